package dispatcher

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher/cfgdigest"
	"github.com/dlbproject/dlb/pkg/dispatcher/events"
	"github.com/dlbproject/dlb/pkg/lb"
)

// fakeHA is the high-availability function as a test drives it: the
// test sets the states the function "decides", and reads what the engine
// told it.
type fakeHA struct {
	mu        sync.Mutex
	cfg       lb.HighAvailability
	states    map[lb.HAGroup]lb.HAState
	healthy   bool
	reason    string
	released  []lb.HAGroup
	resumed   *[lb.NumHAGroups]lb.HAState
	takeovers [][]lb.HAGroup
	checkErr  error
	peerRole  lb.HARole
	peerAlive bool
	// started is when the function started, as Status says.
	started    time.Time
	stopped    []bool
	notify     chan struct{}
	activated  chan lb.HAGroup
	recv       chan lb.ConnBatch
	digest     uint64
	configured int
	reasserted map[lb.HAGroup]uint64
	// calls records SetHealth ("health true") and Configure calls, in
	// order.
	calls []string
	// peer is what Status reports of the peer.
	peer lb.HAPeerStatus
	// session is what Session reports (0: no replication connection);
	// sent the batches Send took while it was not 0.
	session uint64
	sent    []lb.ConnBatch
	// resyncs counts Resync calls.
	resyncs int
	// configErr is what Configure returns (the function then does not
	// run); abandoned the reasons Abandon was given; grace what
	// RestartGrace reports.
	configErr error
	abandoned []string
	grace     time.Duration
}

func newFakeHA() *fakeHA {
	return &fakeHA{states: map[lb.HAGroup]lb.HAState{}, reasserted: map[lb.HAGroup]uint64{}, notify: make(chan struct{}, 1), grace: time.Hour,
		activated: make(chan lb.HAGroup, 2*lb.NumHAGroups), recv: make(chan lb.ConnBatch)}
}

func (f *fakeHA) Check(lb.HighAvailability) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checkErr
}
func (f *fakeHA) Configure(h lb.HighAvailability, d uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cfg, f.digest = h, d
	f.configured++
	f.calls = append(f.calls, "configure")
	if f.configErr != nil {
		return f.configErr
	}
	for _, g := range h.Groups() {
		if _, ok := f.states[g]; !ok {
			f.states[g] = lb.HAListen
		}
	}
	return nil
}
func (f *fakeHA) Resume(s [lb.NumHAGroups]lb.HAState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resumed = &s
	for g, st := range s {
		if st == lb.HAActive {
			f.states[lb.HAGroup(g)] = st
		}
	}
}
func (f *fakeHA) Abandon(reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.abandoned = append(f.abandoned, reason)
	for _, g := range f.cfg.Groups() {
		f.states[g] = lb.HAListen
	}
}
func (f *fakeHA) RestartGrace() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.grace
}
func (f *fakeHA) SetHealth(ok bool, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.healthy, f.reason = ok, reason
	f.calls = append(f.calls, fmt.Sprintf("health %v", ok))
}
func (f *fakeHA) SetDigest(d uint64) { f.mu.Lock(); defer f.mu.Unlock(); f.digest = d }
func (f *fakeHA) Takeover(g []lb.HAGroup) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.takeovers = append(f.takeovers, g)
	return nil
}
func (f *fakeHA) Released(g lb.HAGroup, _ uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, g)
}
func (f *fakeHA) NextMarker() uint64 { return 1 }
func (f *fakeHA) Send(b lb.ConnBatch) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.session == 0 {
		return false
	}
	f.sent = append(f.sent, b)
	return true
}
func (f *fakeHA) Session() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.session
}
func (f *fakeHA) Received() <-chan lb.ConnBatch { return f.recv }
func (f *fakeHA) Imported(uint64)               {}
func (f *fakeHA) Resync()                       { f.mu.Lock(); defer f.mu.Unlock(); f.resyncs++ }
func (f *fakeHA) Notify() <-chan struct{}       { return f.notify }
func (f *fakeHA) Activated() <-chan lb.HAGroup  { return f.activated }
func (f *fakeHA) PeerRole() (lb.HARole, netip.Addr, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peerRole, netip.MustParseAddr("198.18.0.4"), f.peerAlive
}
func (f *fakeHA) Stop(restart bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, restart)
}
func (f *fakeHA) Status() lb.HAStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := lb.HAStatus{Running: f.cfg.Enabled() && f.configErr == nil, Healthy: f.healthy, HealthReason: f.reason, Peer: f.peer, Started: f.started}
	if f.configErr != nil {
		st.Error = f.configErr.Error()
	}
	for _, g := range f.cfg.Groups() {
		st.Groups = append(st.Groups, lb.HAGroupStatus{Group: g, State: f.states[g], Reason: "test", Reasserted: f.reasserted[g]})
	}
	return st
}

// set decides group g's state as the function would: Activated on
// becoming active, then Notify.
func (f *fakeHA) set(g lb.HAGroup, st lb.HAState) {
	f.mu.Lock()
	was := f.states[g]
	f.states[g] = st
	f.mu.Unlock()
	if st == lb.HAActive && was != lb.HAActive {
		select {
		case f.activated <- g:
		default:
		}
	}
	select {
	case f.notify <- struct{}{}:
	default:
	}
}

// reassert counts, as the function would, a reason for an active to
// announce its addresses again (its peer heard after a silence, two
// actives ended), and notifies.
func (f *fakeHA) reassert(g lb.HAGroup) {
	f.mu.Lock()
	f.reasserted[g]++
	f.mu.Unlock()
	select {
	case f.notify <- struct{}{}:
	default:
	}
}

func haHarness(t *testing.T, dir string, f *fakeHA) *harness {
	t.Helper()
	return newHarnessWith(t, dir, func(o *Options) { o.HA = f })
}

// haOps configure high availability in role (primary, backup, both), with
// a heartbeat and a secret.
func haOps(role string) []config.Op {
	return []config.Op{
		op("backup", "add", "", "role", role, "recovery", "auto", "haport", "7000"),
		op("heartbeat", "add", "198.18.0.4", "source", "198.18.0.2", "secretfile", "/etc/dlb/ha.secret"),
	}
}

func (n *fakeNetif) has(a string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.addresses[netip.MustParseAddr(a)]
	return ok
}

func (n *fakeNetif) announcedCount(a string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, x := range n.announced {
		if x == netip.MustParseAddr(a) {
			c++
		}
	}
	return c
}

func eventNames(h *harness) []string {
	var out []string
	for _, r := range h.status(Query{}).RecentEvents {
		out = append(out, r.Name)
	}
	return out
}

// TestHAAddressesFollowTheState: the cluster and return addresses are on
// the interface only while the group is active; they are announced when
// it becomes active, and a release is confirmed once they are off.
func TestHAAddressesFollowTheState(t *testing.T) {
	f := newFakeHA()
	h := haHarness(t, t.TempDir(), f)
	base(h)
	h.mustApply(op("port", "add", vip+"@81", "method", "nat"),
		op("server", "add", vip+"@81@198.18.0.23", "returnaddress", "198.18.0.3"))
	if !h.nif.has(vip) || !h.nif.has("198.18.0.3") {
		t.Fatal("without high availability the addresses are configured")
	}
	h.mustApply(haOps("primary")...)
	eventually(t, "addresses off while listening", func() bool { return !h.nif.has(vip) && !h.nif.has("198.18.0.3") })
	f.set(lb.GroupLocal, lb.HAActive)
	eventually(t, "addresses on once active", func() bool { return h.nif.has(vip) && h.nif.has("198.18.0.3") })
	eventually(t, "announced", func() bool { return h.nif.announcedCount(vip) >= 2 && h.nif.announcedCount("198.18.0.3") >= 2 })
	f.mu.Lock()
	healthy := f.healthy
	f.mu.Unlock()
	if !healthy {
		t.Error("a started, attached executor on an up interface is not reported healthy")
	}

	f.set(lb.GroupLocal, lb.HAStandby)
	eventually(t, "addresses off once standing by", func() bool { return !h.nif.has(vip) && !h.nif.has("198.18.0.3") })
	eventually(t, "release confirmed", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return slices.Contains(f.released, lb.GroupLocal)
	})
	names := eventNames(h)
	for _, want := range []string{events.GoActive, events.GoStandby, events.HighAvailChange} {
		if !slices.Contains(names, want) {
			t.Errorf("event %s not raised: %v", want, names)
		}
	}

	// Removing high availability puts the addresses back.
	h.mustApply(op("backup", "remove", ""))
	eventually(t, "addresses back without high availability", func() bool { return h.nif.has(vip) && h.nif.has("198.18.0.3") })
}

// TestHAStopRefusedWhileThePeerCanServe: high availability cannot be
// stopped (backup remove, the last heartbeat removed, the ha section gone
// from a replaced configuration) on a dispatcher whose executor runs while
// its peer is heard and forwards: this one would put every address on at
// once, the peer would take them over once the heartbeats stop. Changed
// with backup set, it keeps running; with the peer dead or unable to
// forward, or the executor stopped in the same change, it stops.
func TestHAStopRefusedWhileThePeerCanServe(t *testing.T) {
	f, h := haConfigured(t, "backup")
	f.set(lb.GroupLocal, lb.HAStandby)
	f.mu.Lock()
	f.peer = lb.HAPeerStatus{Alive: true, Heard: true, Healthy: true, Role: lb.RolePrimary}
	f.peerAlive, f.peerRole = true, lb.RolePrimary
	f.mu.Unlock()
	eventually(t, "addresses off while standing by", func() bool { return !h.nif.has(vip) })

	noHA := h.config()
	noHA.HA = lb.HighAvailability{}
	refusals := []struct {
		name, field string
		do          func() error
	}{
		{"backup remove", "role", func() error { return h.apply(op("backup", "remove", "")) }},
		{"the last heartbeat removed", "heartbeat", func() error { return h.apply(op("heartbeat", "remove", "198.18.0.4")) }},
		{"a configuration without ha", "role", func() error { _, err := h.replace(noHA, false); return err }},
		{"its dry run", "role", func() error { _, err := h.replace(noHA, true); return err }},
	}
	before := h.config()
	for _, r := range refusals {
		err := r.do()
		if lb.FieldOf(err) != r.field || !strings.Contains(err.Error(), "198.18.0.4 is heard") {
			t.Errorf("%s while the peer serves: %v, want a refusal naming %q and the peer", r.name, err, r.field)
		}
		if got := h.config(); !got.HA.Equal(before.HA) {
			t.Errorf("%s refused, and yet the configuration's ha is %+v", r.name, got.HA)
		}
		if h.nif.has(vip) {
			t.Fatalf("%s refused, and yet the cluster address is on", r.name)
		}
	}

	h.mustApply(op("backup", "set", "", "recovery", "manual"))
	if got := h.config().HA; !got.Enabled() || got.Recovery != lb.RecoveryManual {
		t.Errorf("backup set --recovery manual: %+v", got)
	}
	if h.nif.has(vip) {
		t.Error("backup set put the standby's addresses on")
	}

	allowed := []struct {
		name string
		peer lb.HAPeerStatus
		ops  []config.Op
	}{
		{"the peer's executor cannot forward", lb.HAPeerStatus{Alive: true, Heard: true}, []config.Op{op("backup", "remove", "")}},
		{"the peer dead", lb.HAPeerStatus{Heard: true, Healthy: true}, []config.Op{op("backup", "remove", "")}},
		{"the executor stopped with it", lb.HAPeerStatus{Alive: true, Heard: true, Healthy: true},
			[]config.Op{op("executor", "stop", ""), op("backup", "remove", "")}},
	}
	for _, a := range allowed {
		f.mu.Lock()
		f.peer = a.peer
		f.mu.Unlock()
		if err := h.apply(a.ops...); err != nil {
			t.Errorf("%s: %v", a.name, err)
		}
		if h.config().HA.Enabled() {
			t.Errorf("%s: high availability still configured", a.name)
		}
		h.mustApply(op("backup", "add", "", "role", "backup", "recovery", "auto", "haport", "7000"))
	}

	// Just started (dlbd restarted, its file applied at once), the peer
	// not heard yet: refused until the dead time (2 s) has passed.
	for _, c := range []struct {
		name    string
		ago     time.Duration
		refused bool
	}{{"started 10 ms ago", 10 * time.Millisecond, true}, {"started 3 s ago", 3 * time.Second, false}} {
		f.mu.Lock()
		f.peer, f.started = lb.HAPeerStatus{}, time.Now().Add(-c.ago)
		f.mu.Unlock()
		cur := h.config()
		_, err := h.replace(noHA, false)
		if refused := err != nil; refused != c.refused || refused && !strings.Contains(err.Error(), "the peer is not heard yet") {
			t.Errorf("%s, the peer not heard yet: %v; want refused %v", c.name, err, c.refused)
		}
		if got := h.config(); c.refused && !got.HA.Equal(cur.HA) {
			t.Errorf("%s refused, and yet the configuration's ha is %+v", c.name, got.HA)
		}
	}
}

// TestHAReassertedAnnouncesAgain: an active whose function says to
// announce its addresses again (its peer heard after a silence, two
// actives ended: the peer may have announced them to its own MAC) does
// so, with the same repeats as a takeover; a standby does not.
func TestHAReassertedAnnouncesAgain(t *testing.T) {
	// Shorter repeats, restored once the engine stopped (cleanups run
	// last first).
	fastAnnouncements(t, 0, 10*time.Millisecond, 30*time.Millisecond, 60*time.Millisecond)
	h, f := haNATSetup(t)
	f.set(lb.GroupLocal, lb.HAActive)
	// The takeover's announcements: now, and at each delay.
	eventually(t, "the takeover's announcements", func() bool { return h.nif.announcedCount(vip) >= len(announceAfter) })
	time.Sleep(announceAfter[len(announceAfter)-1])
	vipBefore, retBefore := h.nif.announcedCount(vip), h.nif.announcedCount("198.18.0.3")
	f.reassert(lb.GroupLocal)
	eventually(t, "announced again", func() bool {
		return h.nif.announcedCount(vip) == vipBefore+len(announceAfter) && h.nif.announcedCount("198.18.0.3") == retBefore+len(announceAfter)
	})
	// A standby that counts one (it cannot: the function counts only
	// for an active) announces nothing.
	f.set(lb.GroupLocal, lb.HAStandby)
	eventually(t, "standing by", func() bool { return !h.nif.has(vip) })
	vipBefore = h.nif.announcedCount(vip)
	f.reassert(lb.GroupLocal)
	time.Sleep(300 * time.Millisecond)
	if n := h.nif.announcedCount(vip); n != vipBefore {
		t.Errorf("a standby announced: %d announcements, want %d", n, vipBefore)
	}
}

// TestHAHealth: a stopped executor or a down interface is reported, and
// raises goInOp when the function decides so.
func TestHAHealth(t *testing.T) {
	f, h := haConfigured(t, "primary")
	reason := func() string { f.mu.Lock(); defer f.mu.Unlock(); return f.reason }
	eventually(t, "healthy", func() bool { return reason() == "" })
	h.nif.mu.Lock()
	h.nif.linkDown = true
	h.nif.mu.Unlock()
	eventually(t, "interface down reported", func() bool { return reason() == "interface eth0 is down" })
	h.nif.mu.Lock()
	h.nif.linkDown = false
	h.nif.mu.Unlock()
	h.mustApply(op("executor", "stop", ""))
	eventually(t, "executor stopped reported", func() bool { return reason() == "the executor is stopped" })
	f.set(lb.GroupLocal, lb.HANoExecutor)
	eventually(t, "goInOp", func() bool { return slices.Contains(eventNames(h), events.GoInOp) })
}

// TestHARefusals: a configuration the function cannot run, or that
// contradicts the live peer, is refused and changes nothing.
func TestHARefusals(t *testing.T) {
	f := newFakeHA()
	h := haHarness(t, t.TempDir(), f)
	base(h)
	f.checkErr = lb.Errorf("source", "198.18.0.2", "cannot send heartbeats from 198.18.0.2 port 7000: the address is not on this host")
	err := h.apply(haOps("primary")...)
	if lb.FieldOf(err) != "source" {
		t.Fatalf("a source the host lacks: %v", err)
	}
	f.checkErr = nil
	f.peerRole, f.peerAlive = lb.RolePrimary, true
	err = h.apply(haOps("primary")...)
	if lb.FieldOf(err) != "role" {
		t.Fatalf("two primaries: %v", err)
	}
	if h.config().HA.Configured() {
		t.Error("a refused change was kept")
	}
	h.mustApply(haOps("backup")...)

	f.peerAlive = false
	e := newHarness(t, t.TempDir()) // no function: refused
	base(e)
	if err := e.apply(haOps("primary")...); lb.FieldOf(err) != "role" {
		t.Errorf("high availability without the function: %v", err)
	}
}

// TestHARolesAgainstTheLivePeer: a role is refused when it contradicts
// the live peer's (two primaries, two backups, both facing another role),
// and taken when it completes it; a pair that is both stays changeable
// (it was not: both == both counted as two primaries).
func TestHARolesAgainstTheLivePeer(t *testing.T) {
	for _, c := range []struct {
		mine, peer lb.HARole
		ok         bool
	}{
		{lb.RolePrimary, lb.RoleBackup, true},
		{lb.RoleBackup, lb.RolePrimary, true},
		{lb.RoleBoth, lb.RoleBoth, true},
		{lb.RolePrimary, lb.RolePrimary, false},
		{lb.RoleBackup, lb.RoleBackup, false},
		{lb.RoleBoth, lb.RolePrimary, false},
		{lb.RolePrimary, lb.RoleBoth, false},
	} {
		t.Run(c.mine.String()+" facing "+c.peer.String(), func(t *testing.T) {
			f := newFakeHA()
			h := haHarness(t, t.TempDir(), f)
			base(h)
			h.mustApply(op("cluster", "set", vip, "primaryhost", "198.18.0.2"))
			f.mu.Lock()
			f.peerRole, f.peerAlive = c.peer, true
			f.mu.Unlock()
			err := h.apply(haOps(c.mine.String())...)
			if c.ok != (err == nil) || (err != nil && lb.FieldOf(err) != "role") {
				t.Fatalf("%s facing a live %s: %v, want accepted %v", c.mine, c.peer, err, c.ok)
			}
			if !c.ok {
				return
			}
			// Changed while the peer is heard.
			if err := h.apply(op("heartbeat", "set", "", "interval", "300"), op("reach", "add", "198.18.0.254")); err != nil {
				t.Errorf("%s facing a live %s: heartbeat set and reach add: %v", c.mine, c.peer, err)
			}
		})
	}
}

// haConfigured is an engine with the base configuration and high
// availability in role (haOps), and its fake function.
func haConfigured(t *testing.T, role string) (*fakeHA, *harness) {
	t.Helper()
	f := newFakeHA()
	h := haHarness(t, t.TempDir(), f)
	base(h)
	h.mustApply(haOps(role)...)
	return f, h
}

// activePrimary is a primary's engine whose function decided it active,
// its addresses on.
func activePrimary(t *testing.T) (*fakeHA, *harness) {
	t.Helper()
	f, h := haConfigured(t, "primary")
	f.set(lb.GroupLocal, lb.HAActive)
	eventually(t, "active", func() bool { return h.nif.has(vip) })
	return f, h
}

// TestHAResume: a restarted dlbd whose executor kept forwarding resumes
// the states it served; the function is told to stop for a restart.
func TestHAResume(t *testing.T) {
	f, h := activePrimary(t)
	f.mu.Lock()
	before := len(f.calls)
	f.mu.Unlock()
	h.restart()
	var calls []string
	eventually(t, "high availability configured again", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		calls = slices.Clone(f.calls[before:])
		return slices.Contains(calls, "configure")
	})
	f.mu.Lock()
	resumed, stopped := f.resumed, slices.Clone(f.stopped)
	f.mu.Unlock()
	// The executor's health is told before the function starts: its
	// first decision must not take the resumed active for one that
	// cannot forward.
	if i := slices.Index(calls, "configure"); i < 0 || !slices.Contains(calls[:i], "health true") {
		t.Errorf("calls after the restart %v: the health (true) must come before the configuration", calls)
	}
	if resumed == nil || resumed[lb.GroupLocal] != lb.HAActive {
		t.Fatalf("resumed %v, want the local group active", resumed)
	}
	if len(stopped) == 0 || !stopped[0] {
		t.Errorf("stopped %v: the peer must be told of the restart", stopped)
	}
	if !h.nif.has(vip) {
		t.Error("the cluster address left the interface across a restart")
	}
}

// TestHARestartWithoutTheFunction: a dlbd restarted while its function
// cannot start (its secret file gone) keeps the groups it resumed as
// active, retrying, for the peer's restart grace; then it lets go of
// them (addresses off, the state journaled, an event) rather than serve
// them beside the peer that took them over. Once the function starts, it
// decides as usual.
func TestHARestartWithoutTheFunction(t *testing.T) {
	f, h := activePrimary(t)

	const grace = 400 * time.Millisecond
	f.mu.Lock()
	f.configErr = lb.Errorf("secretfile", "/etc/dlb/ha.secret", "cannot read the shared secret: no such file")
	f.grace = grace
	before := f.configured
	f.mu.Unlock()
	h.restart()
	restarted := time.Now()
	eventually(t, "the function retried", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.configured >= before+3
	})
	if time.Since(restarted) < grace && !h.nif.has(vip) {
		t.Fatal("the resumed active let go of its addresses before the peer's restart grace")
	}
	eventually(t, "addresses off after the grace", func() bool { return !h.nif.has(vip) })
	if took := time.Since(restarted); took < grace {
		t.Errorf("let go after %v, before the grace (%v)", took, grace)
	}
	f.mu.Lock()
	abandoned := slices.Clone(f.abandoned)
	f.mu.Unlock()
	if len(abandoned) != 1 || !strings.Contains(abandoned[0], "cannot read the shared secret") {
		t.Errorf("abandoned %q, want once, naming the fault", abandoned)
	}
	eventually(t, "a highavailChange event", func() bool { return slices.Contains(eventNames(h), events.HighAvailChange) })

	// Restarted again, still without the function: nothing to let go
	// of, nothing put on.
	h.restart()
	time.Sleep(2 * grace)
	if h.nif.has(vip) {
		t.Error("a restart after letting go put the addresses back on")
	}

	// The secret back: the function starts and decides.
	f.mu.Lock()
	f.configErr = nil
	f.mu.Unlock()
	eventually(t, "the function running", func() bool { return f.Status().Running })
	f.set(lb.GroupLocal, lb.HAActive)
	eventually(t, "addresses on once active again", func() bool { return h.nif.has(vip) })
}

// TestHATakeover maps a takeover's address to groups.
func TestHATakeover(t *testing.T) {
	f := newFakeHA()
	h := haHarness(t, t.TempDir(), f)
	base(h)
	ctx := context.Background()
	if _, err := h.e.Takeover(ctx, netip.Addr{}); lb.FieldOf(err) != "highavailability" {
		t.Errorf("takeover without high availability: %v", err)
	}
	h.mustApply(haOps("backup")...)
	if _, err := h.e.Takeover(ctx, netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.e.Takeover(ctx, netip.MustParseAddr("198.18.0.9")); lb.FieldOf(err) != "address" {
		t.Errorf("takeover of a stranger's address: %v", err)
	}
	h.mustApply(op("cluster", "set", vip, "primaryhost", "198.18.0.4"), op("backup", "remove", ""),
		op("backup", "add", "", "role", "both", "recovery", "manual", "haport", "7000"))
	if _, err := h.e.Takeover(ctx, netip.MustParseAddr("198.18.0.4")); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.takeovers) != 2 || f.takeovers[0] != nil || !slices.Equal(f.takeovers[1], []lb.HAGroup{lb.GroupPeer}) {
		t.Errorf("takeovers %v", f.takeovers)
	}
}

// TestHATakeoverTakenBack: a takeover of clusters whose preferred
// dispatcher is the live, healthy peer with recovery auto (and as many
// reach targets) is done, with a warning that the peer takes them back at
// once, naming the way to keep them; none otherwise.
func TestHATakeoverTakenBack(t *testing.T) {
	autoPeer := lb.HAPeerStatus{Alive: true, Healthy: true, Recovery: lb.RecoveryAuto}
	manualPeer, deadPeer, reachesLess := autoPeer, autoPeer, autoPeer
	manualPeer.Recovery, deadPeer.Alive = lb.RecoveryManual, false
	reach := []lb.HAReachStatus{{Reachable: true}}
	reachesLess.Reach = 0
	standby := []lb.HAGroupStatus{{Group: lb.GroupLocal, State: lb.HAStandby}, {Group: lb.GroupPeer, State: lb.HAStandby}}
	active := []lb.HAGroupStatus{{Group: lb.GroupLocal, State: lb.HAActive}, {Group: lb.GroupPeer, State: lb.HAActive}}
	const warn = "group peer"
	for _, tc := range []struct {
		name   string
		role   lb.HARole
		st     lb.HAStatus
		groups []lb.HAGroup
		want   string // in the warning; "" none
	}{
		{"backup, auto primary", lb.RoleBackup, lb.HAStatus{Peer: autoPeer, Groups: standby[1:]}, nil, warn},
		{"backup, manual primary", lb.RoleBackup, lb.HAStatus{Peer: manualPeer, Groups: standby[1:]}, nil, ""},
		{"backup, dead primary", lb.RoleBackup, lb.HAStatus{Peer: deadPeer, Groups: standby[1:]}, nil, ""},
		{"backup reaching more", lb.RoleBackup, lb.HAStatus{Peer: reachesLess, Reach: reach, Groups: standby[1:]}, nil, ""},
		{"backup already active", lb.RoleBackup, lb.HAStatus{Peer: autoPeer, Groups: active[1:]}, nil, ""},
		{"primary", lb.RolePrimary, lb.HAStatus{Peer: autoPeer, Groups: standby[:1]}, nil, ""},
		{"both: the peer's group", lb.RoleBoth, lb.HAStatus{Peer: autoPeer, Groups: standby}, []lb.HAGroup{lb.GroupPeer}, warn},
		{"both: its own group", lb.RoleBoth, lb.HAStatus{Peer: autoPeer, Groups: standby}, []lb.HAGroup{lb.GroupLocal}, ""},
		{"both: all", lb.RoleBoth, lb.HAStatus{Peer: autoPeer, Groups: standby}, nil, warn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := takenBack(lb.Config{HA: lb.HighAvailability{Role: tc.role}}, tc.st, tc.groups)
			switch {
			case tc.want == "" && len(got) != 0:
				t.Errorf("warned %q", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want) || !strings.Contains(got[0], "dlbctl executor stop")):
				t.Errorf("warned %q, want one naming %q and the remedy", got, tc.want)
			}
		})
	}

	// Through the engine: the warning comes with the takeover.
	f := newFakeHA()
	f.peer = autoPeer
	h := haHarness(t, t.TempDir(), f)
	base(h)
	h.mustApply(haOps("backup")...)
	got, err := h.e.Takeover(context.Background(), netip.Addr{})
	if err != nil || len(got) != 1 || !strings.Contains(got[0], "preferred dispatcher of "+vip+" ") {
		t.Errorf("takeover from an auto primary: %q, %v; want a warning naming %s", got, err, vip)
	}
}

// TestHADigest: the digest does not depend on the order of
// configuration, follows changes incrementally, and leaves out what
// differs between two dispatchers of a pair.
func TestHADigest(t *testing.T) {
	a := newHarness(t, t.TempDir())
	base(a)
	a.mustApply(op("server", "add", vip+"@80@198.18.0.23"), op("port", "set", vip+"@443", "stickytime", "60"))
	b := newHarness(t, t.TempDir())
	start := withP(op("executor", "start", ""), config.P("interface", "eth0"))
	b.mustApply(start, withP(op("executor", "set", ""), config.P("nfa", "198.18.0.4")),
		withP(op("cluster", "add", vip), config.P("configure", "yes")), op("port", "add", vip+"@443"),
		op("port", "set", vip+"@443", "stickytime", "60"), op("port", "add", vip+"@80"),
		op("server", "add", vip+"@80@198.18.0.23"), op("server", "add", "@80+443@198.18.0.22"), op("server", "add", "@80+443@198.18.0.21"))
	da, db := a.status(Query{HA: true}).HA.Digest, b.status(Query{HA: true}).HA.Digest
	if da != db {
		t.Errorf("digests %x and %x of the same clusters configured in two orders", da, db)
	}
	var full cfgdigest.Digest
	full.Full(a.config())
	if full.Sum() != da {
		t.Errorf("incremental digest %x, computed whole %x", da, full.Sum())
	}
	b.mustApply(op("server", "set", vip+"@80@198.18.0.23", "weight", "3"))
	if db2 := b.status(Query{HA: true}).HA.Digest; db2 == da {
		t.Error("a weight change left the digest as it was")
	}
	b.mustApply(op("server", "set", vip+"@80@198.18.0.23", "weight", "20"))
	if db3 := b.status(Query{HA: true}).HA.Digest; db3 != da {
		t.Errorf("undoing the change: %x, want %x", db3, da)
	}
}

// blockEngine keeps the engine's goroutine busy until the returned
// function is called, as a long sweep or report would.
func blockEngine(t *testing.T, h *harness) func() {
	t.Helper()
	busy, release := make(chan struct{}), make(chan struct{})
	go func() { _ = h.e.do(context.Background(), func() { close(busy); <-release }) }()
	<-busy
	var once sync.Once
	done := func() { once.Do(func() { close(release) }) }
	t.Cleanup(done)
	return done
}

// haNATSetup is a primary with a NAT port whose server has a return
// address, standing by for the function's decision.
func haNATSetup(t *testing.T) (*harness, *fakeHA) {
	t.Helper()
	f := newFakeHA()
	h := haHarness(t, t.TempDir(), f)
	base(h)
	h.mustApply(op("port", "add", vip+"@81", "method", "nat"),
		op("server", "add", vip+"@81@198.18.0.23", "returnaddress", "198.18.0.3"))
	h.mustApply(haOps("primary")...)
	eventually(t, "addresses off while listening", func() bool { return !h.nif.has(vip) && !h.nif.has("198.18.0.3") })
	return h, f
}

// TestHATakeoverDoesNotWaitForTheEngine: a group decided active has its
// addresses on and announced while the engine's goroutine is busy with
// something else; the engine then takes them over, and a later release
// takes them off as it would its own.
func TestHATakeoverDoesNotWaitForTheEngine(t *testing.T) {
	h, f := haNATSetup(t)
	unblock := blockEngine(t, h)
	f.set(lb.GroupLocal, lb.HAActive)
	eventually(t, "addresses on and announced while the engine is busy", func() bool {
		return h.nif.has(vip) && h.nif.has("198.18.0.3") && h.nif.announcedCount(vip) >= 1 && h.nif.announcedCount("198.18.0.3") >= 1
	})
	unblock()
	eventually(t, "the engine's own announcement", func() bool { return h.nif.announcedCount(vip) >= 2 })
	if names := eventNames(h); !slices.Contains(names, events.GoActive) {
		t.Errorf("goActive not raised once the engine got to the decision: %v", names)
	}
	f.set(lb.GroupLocal, lb.HAStandby)
	eventually(t, "addresses off once standing by", func() bool { return !h.nif.has(vip) && !h.nif.has("198.18.0.3") })
}

// TestHAFastTakeoverUndone: a group let go again before the engine saw
// it active loses the addresses the fast path put on; a stale decision
// (the group no longer active when the fast path looks) puts none on.
func TestHAFastTakeoverUndone(t *testing.T) {
	h, f := haNATSetup(t)
	unblock := blockEngine(t, h)
	f.set(lb.GroupLocal, lb.HAActive)
	eventually(t, "addresses on while the engine is busy", func() bool { return h.nif.has(vip) && h.nif.has("198.18.0.3") })
	f.set(lb.GroupLocal, lb.HAStandby)
	unblock()
	eventually(t, "addresses off once the engine looked", func() bool { return !h.nif.has(vip) && !h.nif.has("198.18.0.3") })
	if names := eventNames(h); slices.Contains(names, events.GoActive) {
		t.Errorf("goActive raised for a state the engine never acted on: %v", names)
	}

	unblock = blockEngine(t, h)
	f.activated <- lb.GroupLocal // decided, then let go before the fast path looked
	time.Sleep(200 * time.Millisecond)
	if h.nif.has(vip) || h.nif.has("198.18.0.3") {
		t.Error("the fast path put on the addresses of a group no longer active")
	}
	unblock()
}

// TestHAFoundAddressesMove: an address the interface had before dlb
// configured it (the operator's) stays on when dlb no longer wants it, but
// not under high availability: there the addresses are the pair's, and a
// standby that kept one would answer ARP for it beside the active.
func TestHAFoundAddressesMove(t *testing.T) {
	f := newFakeHA()
	h := haHarness(t, t.TempDir(), f)
	h.nif.mu.Lock()
	h.nif.addresses[netip.MustParseAddr(vip)] = "eth0"
	h.nif.mu.Unlock()
	base(h)
	h.mustApply(haOps("primary")...)
	eventually(t, "the address off while listening", func() bool { return !h.nif.has(vip) })
	f.set(lb.GroupLocal, lb.HAActive)
	eventually(t, "the address on once active", func() bool { return h.nif.has(vip) })
	f.set(lb.GroupLocal, lb.HAStandby)
	eventually(t, "the address off once standing by", func() bool { return !h.nif.has(vip) })
}

// TestHAFullCopySweeps: once a full copy of the peer's tables is in, the
// executor report counts its connections at once, not at the next
// periodic sweep (an hour away here); an incremental batch waits for it.
func TestHAFullCopySweeps(t *testing.T) {
	f, h := haConfigured(t, "backup")
	connections := func() int { return h.status(Query{}).Executor.Connections }
	before := connections()
	h.dp.mu.Lock()
	h.dp.swept = lb.SweepResult{Entries: before + 300, Active: map[uint32]uint64{}}
	h.dp.mu.Unlock()
	f.recv <- lb.ConnBatch{Marker: 1}
	if n := connections(); n != before {
		t.Errorf("after an incremental batch: %d connections, want %d (the last sweep's)", n, before)
	}
	f.recv <- lb.ConnBatch{Marker: 2, Full: true}
	if n := connections(); n != before+300 {
		t.Errorf("right after a full copy: %d connections, want %d", n, before+300)
	}
}

// TestHAClusterMovedInIsAnnounced: under mutual high availability, a
// cluster whose primaryhost a change moves to this dispatcher, whose own
// group is active, goes on the interface and is announced as a
// takeover's addresses are (the segment still sends its clients to the
// peer); a cluster moved to the peer, whose group stands by here, comes
// off unannounced; a change that gains nothing announces nothing.
func TestHAClusterMovedInIsAnnounced(t *testing.T) {
	fastAnnouncements(t, 0, 10*time.Millisecond, 30*time.Millisecond, 60*time.Millisecond)
	const vip2, ret2 = "198.18.0.101", "198.18.0.6"
	f := newFakeHA()
	h := haHarness(t, t.TempDir(), f)
	base(h)
	cl2 := op("cluster", "add", vip2)
	cl2.Params = append(cl2.Params, config.P("configure", "yes"), config.P("primaryhost", "198.18.0.4"))
	h.mustApply(op("cluster", "set", vip, "primaryhost", "198.18.0.2"), cl2,
		op("port", "add", vip2+"@81", "method", "nat"),
		op("server", "add", vip2+"@81@198.18.0.23", "returnaddress", ret2))
	h.mustApply(haOps("both")...)
	f.set(lb.GroupLocal, lb.HAActive)
	f.set(lb.GroupPeer, lb.HAStandby)
	eventually(t, "the local group's takeover announced", func() bool { return h.nif.announcedCount(vip) >= len(announceAfter) })
	if h.nif.has(vip2) || h.nif.has(ret2) || h.nif.announcedCount(vip2) != 0 {
		t.Fatalf("the peer's cluster on the interface (%v) or announced (%d times)", h.nif.has(vip2), h.nif.announcedCount(vip2))
	}
	// The takeover's announcements (its fast path's and the engine's)
	// are over once the count holds for a while.
	before := h.nif.announcedCount(vip)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); before = h.nif.announcedCount(vip) {
		time.Sleep(4 * announceAfter[len(announceAfter)-1])
		if h.nif.announcedCount(vip) == before {
			break
		}
	}

	// Nothing gained: nothing announced.
	h.mustApply(op("port", "add", vip+"@8080"))
	time.Sleep(100 * time.Millisecond)
	if n := h.nif.announcedCount(vip); n != before {
		t.Errorf("a change that moved no address announced the group: %d announcements, want %d", n, before)
	}

	// Moved in: on and announced, the return address with it.
	h.mustApply(op("cluster", "set", vip2, "primaryhost", "198.18.0.2"))
	eventually(t, "the moved cluster announced", func() bool {
		return h.nif.has(vip2) && h.nif.has(ret2) &&
			h.nif.announcedCount(vip2) == len(announceAfter) && h.nif.announcedCount(ret2) == len(announceAfter)
	})

	// Moved out: off, and not announced again.
	h.mustApply(op("cluster", "set", vip2, "primaryhost", "198.18.0.4"))
	eventually(t, "the cluster moved out off the interface", func() bool { return !h.nif.has(vip2) && !h.nif.has(ret2) })
	time.Sleep(100 * time.Millisecond)
	if n := h.nif.announcedCount(vip2); n != len(announceAfter) {
		t.Errorf("a cluster moved to the peer announced: %d announcements, want %d", n, len(announceAfter))
	}
}

// TestHAExecutorStartedAgainResyncs: an executor stopped and started
// again has new, empty tables: the function is told to forget the copy
// of the peer's (Resync), so that the peer sends it all again before
// this dispatcher takes a group back.
func TestHAExecutorStartedAgainResyncs(t *testing.T) {
	f, h := haConfigured(t, "primary")
	resyncs := func() int { f.mu.Lock(); defer f.mu.Unlock(); return f.resyncs }
	before := resyncs()
	h.mustApply(op("port", "add", vip+"@8080"))
	if n := resyncs(); n != before {
		t.Errorf("a change that keeps the executor resynchronised: %d calls, want %d", n, before)
	}
	h.mustApply(op("executor", "stop", ""))
	start := op("executor", "start", "")
	start.Params = append(start.Params, config.P("interface", "eth0"))
	h.mustApply(start)
	if n := resyncs(); n != before+1 {
		t.Errorf("an executor started again: %d Resync calls, want %d", n, before+1)
	}
}

// TestHARoleChangedNotResumed: a group the dispatcher served under its
// former role (backup: the peer group, active) is not journaled as
// active once the role changed (primary): the next start resumed it, a
// group outside the role, which never decided.
func TestHARoleChangedNotResumed(t *testing.T) {
	f := newFakeHA()
	dir := t.TempDir()
	h := haHarness(t, dir, f)
	base(h)
	h.mustApply(haOps("backup")...)
	f.set(lb.GroupPeer, lb.HAActive)
	eventually(t, "the peer group active", func() bool { return h.nif.has(vip) })
	h.mustApply(op("backup", "set", "", "role", "primary"))
	h.restart()
	f.mu.Lock()
	resumed := f.resumed
	f.mu.Unlock()
	if resumed == nil {
		t.Fatal("nothing resumed")
	}
	if resumed[lb.GroupPeer] != lb.HAIdle {
		t.Errorf("resumed %v: the peer group, outside the primary's role, resumed %s", *resumed, resumed[lb.GroupPeer])
	}
}
