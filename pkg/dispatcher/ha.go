package dispatcher

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher/cfgdigest"
	"github.com/dlbproject/dlb/pkg/dispatcher/events"
	"github.com/dlbproject/dlb/pkg/dispatcher/store"
	"github.com/dlbproject/dlb/pkg/lb"
)

// HighAvailability is the high-availability function as the engine
// drives it. cmd/dlbd fills it with package ha (heartbeats, decisions,
// replication streams); the engine tells it what it knows of the
// executor, acts on the states it decides (the group's addresses on the
// interface and announced, or taken off), and feeds and drains its
// replication.
type HighAvailability interface {
	// Check refuses a configuration this host cannot run (a heartbeat
	// source it does not own, an unreadable secret). It changes nothing.
	Check(lb.HighAvailability) error
	// Configure starts, reconfigures or stops (not enabled) the
	// function; digest is the configuration digest announced.
	Configure(h lb.HighAvailability, digest uint64) error
	// Resume starts the groups in the states a previous dlbd left.
	Resume([lb.NumHAGroups]lb.HAState)
	// Abandon makes every group listen (serve nothing) for reason;
	// RestartGrace is how long the peer waits for a restarting dlbd.
	Abandon(reason string)
	RestartGrace() time.Duration
	// SetHealth says whether the executor can forward, and why not.
	SetHealth(ok bool, reason string)
	// SetDigest changes the digest announced.
	SetDigest(uint64)
	// Takeover asks to serve the groups (all when none).
	Takeover([]lb.HAGroup) error
	// Released confirms a release the function decided, naming the
	// replication marker sent after the group's last entries.
	Released(g lb.HAGroup, marker uint64)
	// NextMarker returns a new replication marker; Send queues a batch
	// for the peer (false: not connected or overrun, and the next
	// session starts over); Session numbers the current connection (0:
	// none; a new one asks for a full copy).
	NextMarker() uint64
	Send(lb.ConnBatch) bool
	Session() uint64
	// Received delivers the peer's batches in order; Imported says the
	// engine imported everything up to a marker.
	Received() <-chan lb.ConnBatch
	Imported(marker uint64)
	// Resync forgets the copy of the peer's tables (the executor's
	// tables are new and empty): the peer sends a full copy again, and
	// until it is imported no group is taken from it.
	Resync()
	// Notify is signalled when a state changes; Status reports.
	// Activated delivers, besides, each group the function decides to
	// serve, at the moment it decides (the takeover's fast path).
	Notify() <-chan struct{}
	Activated() <-chan lb.HAGroup
	Status() lb.HAStatus
	// PeerRole returns the role the peer announces, its address, and
	// whether it is alive.
	PeerRole() (lb.HARole, netip.Addr, bool)
	// Stop stops the function; restart tells the peer this dlbd is
	// restarting (its executor keeps forwarding).
	Stop(restart bool)
}

// Announcer announces addresses on the segment (gratuitous ARP,
// unsolicited neighbour advertisement); package netif's Netif is one.
type Announcer interface {
	Announce(ifname string, addrs []netip.Addr) error
}

// announceAfter are the delays after a takeover at which the group's
// addresses are announced again: a frame can be lost, and a host can
// learn the old MAC from a packet in flight.
var announceAfter = []time.Duration{0, 250 * time.Millisecond, time.Second, 3 * time.Second}

// haEngine is what the engine keeps for high availability.
type haEngine struct {
	// applied are the states the engine acted on, per group.
	applied [lb.NumHAGroups]lb.HAState
	// reasserted is each group's count of the times to announce its
	// addresses again (lb.HAGroupStatus), as last acted on.
	reasserted [lb.NumHAGroups]uint64
	since      [lb.NumHAGroups]time.Time
	// peerAlive and conflict, as last reported, for highavailChange.
	peerAlive bool
	conflict  string
	mismatch  bool
	// digest is the configuration's digest, kept up to date change by
	// change (package cfgdigest).
	digest cfgdigest.Digest
	// fast is the takeover's fast path (takeover.go).
	fast fastTakeover
	// down is since when the configuration enables the function but it
	// does not run (haRetry); zero: it runs, or is not enabled.
	down time.Time
	// Replication counts: records imported, refused (no such server
	// here), batches; of those imported into groups this dispatcher
	// served, merged and kept (the key held already: the same
	// connection, or another used since).
	imported, unknown uint64
	merged, kept      uint64
	healthy           bool
	healthReason      string
	announcements     uint64
}

// haOn reports whether high availability runs in cfg.
func (e *Engine) haOn(cfg lb.Config) bool {
	return e.opts.HA != nil && cfg.HA.Enabled()
}

// returnGroups maps each NAT return address of cfg to the group of a
// cluster that uses it (validation keeps it to one group).
func returnGroups(cfg lb.Config) map[netip.Addr]lb.HAGroup {
	out := map[netip.Addr]lb.HAGroup{}
	for i := range cfg.Clusters {
		cl := &cfg.Clusters[i]
		g := cfg.HA.GroupOf(cl)
		for _, p := range cl.Ports {
			if p.Method != lb.NAT {
				continue
			}
			for _, s := range p.Servers {
				if s.ReturnAddress.IsValid() {
					out[s.ReturnAddress] = g
				}
			}
		}
	}
	return out
}

// groupAddresses lists the addresses of group g that this dispatcher
// puts on its interface: its clusters marked configure, and their NAT
// return addresses.
func groupAddresses(cfg lb.Config, g lb.HAGroup) []netip.Addr {
	var out []netip.Addr
	for i := range cfg.Clusters {
		cl := &cfg.Clusters[i]
		if cl.Configure && cfg.HA.GroupOf(cl) == g {
			out = append(out, cl.Address)
		}
	}
	for a, rg := range returnGroups(cfg) {
		if rg == g {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// groupClusters lists the clusters of group g.
func groupClusters(cfg lb.Config, g lb.HAGroup) []string {
	var out []string
	for i := range cfg.Clusters {
		if cfg.HA.GroupOf(&cfg.Clusters[i]) == g {
			out = append(out, cfg.Clusters[i].Address.String())
		}
	}
	return out
}

// haHealth tells the function whether the executor can forward: loaded,
// attached, and its interface up.
func (e *Engine) haHealth() {
	ok, reason := e.haForwarding(e.ed.Config())
	if ok != e.ha.healthy || reason != e.ha.healthReason {
		e.ha.healthy, e.ha.healthReason = ok, reason
		e.opts.HA.SetHealth(ok, reason)
	}
}

// haForwarding reports whether the executor can forward, and if not, why
// (what a heartbeat proves; forwarding, for BGP, says only whether).
func (e *Engine) haForwarding(cfg lb.Config) (bool, string) {
	switch {
	case !cfg.Executor.Started:
		return false, "the executor is stopped"
	case e.exec.dp == nil:
		msg := "the executor is not loaded"
		if e.exec.err != nil {
			msg += ": " + e.exec.err.Error()
		}
		return false, msg
	}
	if _, ok := e.exec.dp.Attached(); !ok {
		return false, "the executor is not attached"
	}
	l, err := e.opts.Netif.LinkByName(cfg.Executor.Interface)
	if err != nil {
		return false, err.Error()
	}
	if !l.Up {
		return false, "interface " + cfg.Executor.Interface + " is down"
	}
	return true, ""
}

// haSync acts on the function's decisions: for each group whose state
// changed, its addresses go on the interface and are announced (active)
// or come off (anything else), its clusters' last entries follow a
// release, and the events are raised.
func (e *Engine) haSync() {
	cfg := e.ed.Config()
	if !e.haOn(cfg) {
		return
	}
	// The fast path adds no address between this look at the states and
	// the settling below.
	e.ha.fast.mu.Lock()
	st := e.opts.HA.Status()
	type change struct {
		g        lb.HAGroup
		was, now lb.HAState
		reason   string
	}
	var changes []change
	var became, reasserted []lb.HAGroup
	for _, gs := range st.Groups {
		g := gs.Group
		was := e.ha.applied[g]
		if gs.Reasserted != e.ha.reasserted[g] {
			e.ha.reasserted[g] = gs.Reasserted
			if gs.State == lb.HAActive && was == lb.HAActive {
				reasserted = append(reasserted, g)
			}
		}
		if gs.State == was {
			continue
		}
		changes = append(changes, change{g, was, gs.State, gs.Reason})
		e.ha.applied[g], e.ha.since[g] = gs.State, time.Now()
		if gs.State == lb.HAActive {
			became = append(became, g)
		}
		if was == lb.HAActive {
			// Off the interface before anything else: the host must
			// not answer for the clusters (or reset their
			// connections) once the peer has them.
			if err := e.configureAddresses(cfg); err != nil {
				e.log.Error("high availability: taking the addresses off", "group", g, "err", err)
			}
			marker := e.haFlush(cfg, g)
			e.repl.owed[g] = marker == 0
			e.opts.HA.Released(g, marker)
		}
	}
	// A takeover's addresses go on and are announced before anything
	// else (events, the journal): every millisecond here is one the
	// clients wait.
	if len(became) > 0 {
		if err := e.configureAddresses(cfg); err != nil {
			e.log.Error("high availability: putting the addresses on", "err", err)
		}
	}
	e.settleFastTakeover()
	e.ha.fast.mu.Unlock()
	// A group this dispatcher kept while its peer may have served it
	// too: the peer announced the addresses, which must point here
	// again.
	for _, g := range append(became, reasserted...) {
		e.haAnnounce(cfg, g, 0)
	}
	if len(changes) > 0 {
		e.syncRoutes(cfg) // BGP: the active's MED, the standby's
	}
	for _, c := range changes {
		name := map[lb.HAState]string{lb.HAActive: events.GoActive, lb.HAStandby: events.GoStandby,
			lb.HANoExecutor: events.GoInOp}[c.now]
		env := map[string]string{"DLB_HA_GROUP": c.g.String(), "DLB_HA_STATE": c.now.String(),
			"DLB_HA_PREVIOUS": c.was.String(), "DLB_HA_REASON": c.reason, "DLB_HA_ROLE": cfg.HA.Role.String(),
			"DLB_HA_CLUSTERS": strings.Join(groupClusters(cfg, c.g), " ")}
		if name != "" {
			e.events.Emit(name, env)
		}
		e.events.Emit(events.HighAvailChange, env)
	}
	// A group outside the role (the role changed) is idle: journaled as
	// it was, a restart would resume it.
	stale := false
	for g := range e.ha.applied {
		if e.ha.applied[g] != lb.HAIdle && !slices.Contains(cfg.HA.Groups(), lb.HAGroup(g)) {
			e.ha.applied[g], stale = lb.HAIdle, true
		}
	}
	if len(changes) > 0 || stale {
		e.persistHAStates()
	}
	mismatch := st.Peer.Alive && st.Peer.Digest != e.ha.digest.Sum()
	if st.Peer.Alive != e.ha.peerAlive || st.Peer.Conflict != e.ha.conflict || mismatch != e.ha.mismatch {
		e.ha.peerAlive, e.ha.conflict, e.ha.mismatch = st.Peer.Alive, st.Peer.Conflict, mismatch
		env := map[string]string{"DLB_HA_PEER": yes(st.Peer.Alive), "DLB_HA_ROLE": cfg.HA.Role.String()}
		if st.Peer.Conflict != "" {
			env["DLB_HA_CONFLICT"] = st.Peer.Conflict
			e.log.Error("high availability: inconsistent pair", "conflict", st.Peer.Conflict)
		}
		if mismatch {
			env["DLB_HA_DIGEST"] = cfgdigest.Text(e.ha.digest.Sum())
			env["DLB_HA_PEER_DIGEST"] = cfgdigest.Text(st.Peer.Digest)
			e.log.Warn("high availability: the peer's configuration differs from this one",
				"digest", cfgdigest.Text(e.ha.digest.Sum()), "peer", cfgdigest.Text(st.Peer.Digest))
		}
		e.events.Emit(events.HighAvailChange, env)
	}
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// haAnnounce announces group g's addresses now, and again after the
// delays of announceAfter while the group stays active.
func (e *Engine) haAnnounce(cfg lb.Config, g lb.HAGroup, step int) {
	if e.ha.applied[g] != lb.HAActive || !cfg.Executor.Started {
		return
	}
	addrs := groupAddresses(cfg, g)
	if an, ok := e.opts.Netif.(Announcer); ok && len(addrs) > 0 {
		if err := an.Announce(cfg.Executor.Interface, addrs); err != nil {
			e.log.Warn("high availability: announcing the addresses", "err", err)
		} else {
			e.ha.announcements++
		}
	}
	since := e.ha.since[g]
	e.announceAgain(step, func() {
		if e.ha.since[g].Equal(since) { // still the same takeover
			e.haAnnounce(e.ed.Config(), g, step+1)
		}
	})
}

// announceAgain runs again, on the engine's goroutine, an announcement
// made at step of announceAfter: at the next step's delay, if there is
// one.
func (e *Engine) announceAgain(step int, again func()) {
	if step+1 < len(announceAfter) {
		time.AfterFunc(announceAfter[step+1], func() { e.post(again) })
	}
}

// announceGained announces, as a takeover does, each group active here
// that a change gave an address it did not have on the interface (had).
// Under mutual high availability a cluster whose primaryhost now names
// this dispatcher was the peer's: the segment's hosts and routers still
// send its clients to the peer, which no longer holds the address (or is
// about to let it go), and would until their neighbour entries expire.
func (e *Engine) announceGained(cfg lb.Config, had map[netip.Addr]string) {
	if !e.haOn(cfg) {
		return
	}
	for g, addrs := range e.haAddresses(cfg) {
		gained := slices.ContainsFunc(addrs, func(a netip.Addr) bool { _, ok := had[a]; return !ok })
		if gained && e.ha.applied[g] == lb.HAActive {
			e.haAnnounce(cfg, lb.HAGroup(g), 0)
		}
	}
}

// post runs f on the management goroutine later, unless Run returned. It
// may be called before Run (an announcement scheduled while New brought
// the executor up): it reads nothing Run sets.
func (e *Engine) post(f func()) {
	go func() {
		select {
		case e.mgmt <- f:
		case <-e.stopped:
		}
	}()
}

// persistHAStates journals the states acted on, for a restart.
func (e *Engine) persistHAStates() {
	var rec store.Record
	s := e.ha.applied
	rec.HAStates = &s
	if err := e.checkStore(); err != nil {
		e.log.Error("saving the high-availability states", "err", err)
	}
	if err := e.store.Append(rec); err != nil {
		e.log.Error("saving the high-availability states", "err", err)
	}
}

// haConfigure starts, changes or stops the function after a change.
func (e *Engine) haConfigure(old, next lb.Config, ch config.Change) {
	e.ha.digest.Update(old, next, ch)
	if e.opts.HA == nil {
		return
	}
	e.publishTakeoverPlan(next)
	if !ch.HA && e.haOn(next) {
		e.opts.HA.SetDigest(e.ha.digest.Sum())
		if ch.Executor {
			e.haHealth()
		}
		return
	}
	if !ch.HA {
		return
	}
	// The function decides anew: nothing is moved out any longer.
	e.repl.movedOut, e.repl.agreed = nil, time.Time{}
	if err := e.opts.HA.Configure(next.HA, e.ha.digest.Sum()); err != nil {
		e.log.Error("high availability: configuring", "err", err)
	}
	if !next.HA.Enabled() {
		e.ha.applied = [lb.NumHAGroups]lb.HAState{}
		e.persistHAStates()
		e.ha.fast.mu.Lock()
		if err := e.configureAddresses(next); err != nil {
			e.log.Error("high availability: restoring the addresses", "err", err)
		}
		e.settleFastTakeover()
		e.ha.fast.mu.Unlock()
		return
	}
	// Until the function decides, the addresses of groups not active
	// stay off.
	if err := e.configureAddresses(next); err != nil {
		e.log.Error("high availability: taking the addresses off until decided", "err", err)
	}
	e.ha.healthy, e.ha.healthReason = false, "?"
	e.haHealth()
	e.haSync()
}

// haRetry starts the function again, once a tick, while the
// configuration enables it but it does not run: its secret file
// unreadable, a heartbeat source not on the host (a boot where dlbd came
// before the network). The groups a restart resumed as active are kept
// for as long as the peer waits for a restarting dlbd (RestartGrace);
// then they are let go of (their addresses off): the peer, not hearing
// this dispatcher, has taken them over, and both would serve them for as
// long as the fault lasts.
func (e *Engine) haRetry(now time.Time) {
	cfg := e.ed.Config()
	if !e.haOn(cfg) {
		e.ha.down = time.Time{}
		return
	}
	st := e.opts.HA.Status()
	if st.Running {
		e.ha.down = time.Time{}
		return
	}
	if e.ha.down.IsZero() {
		e.ha.down = now
	}
	if err := e.opts.HA.Configure(cfg.HA, e.ha.digest.Sum()); err == nil {
		e.log.Info("high availability started", "after", now.Sub(e.ha.down).Round(time.Millisecond))
		e.ha.down = time.Time{}
		e.haSync()
		return
	}
	if now.Sub(e.ha.down) < e.opts.HA.RestartGrace() || !slices.Contains(e.ha.applied[:], lb.HAActive) {
		return
	}
	reason := "high availability has not run for the peer's restart grace (" + e.opts.HA.RestartGrace().String() + "): " + st.Error
	e.log.Error("high availability: letting go of the clusters resumed as active; the peer, not hearing this dispatcher, serves them",
		"err", st.Error, "since", e.ha.down)
	e.opts.HA.Abandon(reason)
	e.haSync()
}

// haCheck refuses a change the high-availability function cannot run,
// that contradicts the live peer (two primaries, a role both facing
// another role), or that stops it while the peer could serve (haStopCheck).
func (e *Engine) haCheck(old, next lb.Config, ch config.Change) error {
	if !ch.HA {
		return nil
	}
	if !next.HA.Enabled() {
		return e.haStopCheck(old, next)
	}
	if e.opts.HA == nil {
		return lb.Errorf("role", "", "high availability is not available in this dlbd")
	}
	if err := e.opts.HA.Check(next.HA); err != nil {
		return err
	}
	pr, from, alive := e.opts.HA.PeerRole()
	if !alive {
		return nil
	}
	me := next.HA.Role
	// A live pair's roles change one dispatcher at a time: the other is
	// taken out of the pair first.
	const out = "; to change the roles of a live pair, take the peer out first (executor stop and backup remove there), " +
		"then change this one and add the peer back"
	switch {
	case me == lb.RoleBoth && pr != lb.RoleBoth, me != lb.RoleBoth && pr == lb.RoleBoth:
		return lb.Errorf("role", "", "the peer %s is %s: under mutual high availability both dispatchers are both"+out, from, pr)
	case me == pr && me != lb.RoleBoth:
		return lb.Errorf("role", "", "the peer %s is %s too: one dispatcher is primary, the other backup"+out, from, pr)
	}
	return nil
}

// haStopCheck refuses to stop high availability (backup remove, the last
// heartbeat removed) on a dispatcher whose executor runs while its peer
// is heard and can forward: this dispatcher would serve every cluster at
// once, and the peer, still configured, would take them over once the
// heartbeats stop: two dispatchers answering for the same addresses.
func (e *Engine) haStopCheck(old, next lb.Config) error {
	if !e.haOn(old) || !next.Executor.Started {
		return nil
	}
	field := "role"
	if next.HA.Role != lb.RoleNone {
		field = "heartbeat"
	}
	st := e.opts.HA.Status()
	// Just started (dlbd restarted, its configuration file applied at
	// once), the peer not heard yet: it may well serve.
	dead := time.Duration(old.HA.IntervalMS()) * time.Duration(old.HA.DeadCount()) * time.Millisecond
	if wait := dead - time.Since(st.Started); st.Running && !st.Peer.Heard && wait > 0 {
		return lb.Errorf(field, "", "high availability started %v ago and the peer is not heard yet: it may serve, and without "+
			"high availability this dispatcher would serve every cluster at once (both would answer for their addresses); "+
			"apply again in %v, or stop the executor first (executor stop)", time.Since(st.Started).Round(time.Millisecond), wait.Round(time.Millisecond))
	}
	if !st.Peer.Alive || !st.Peer.Healthy {
		return nil
	}
	_, from, _ := e.opts.HA.PeerRole()
	return lb.Errorf(field, "", "the peer %s is heard and its executor forwards: without high availability this dispatcher "+
		"would serve every cluster at once, and the peer would take them over once the heartbeats stop (both would answer "+
		"for their addresses); stop the executor on one of the two first (executor stop), or change the role, recovery "+
		"or port with highavailability backup set", from)
}

// Takeover asks this dispatcher to serve the clusters that addr names:
// the clusters of the dispatcher whose heartbeat address addr is (under
// mutual high availability), or all of them (no address).
func (e *Engine) Takeover(ctx context.Context, addr netip.Addr) (warnings []string, err error) {
	return call(ctx, e, func() ([]string, error) {
		cfg := e.ed.Config()
		if !e.haOn(cfg) {
			return nil, lb.Errorf("highavailability", "", "high availability is not running (highavailability backup add and heartbeat add first)")
		}
		var groups []lb.HAGroup
		if addr.IsValid() {
			switch {
			case cfg.HA.Role != lb.RoleBoth && (slices.Contains(cfg.HA.Sources(), addr) || slices.Contains(cfg.HA.Destinations(), addr)):
			case slices.Contains(cfg.HA.Sources(), addr):
				groups = []lb.HAGroup{lb.GroupLocal}
			case slices.Contains(cfg.HA.Destinations(), addr):
				groups = []lb.HAGroup{lb.GroupPeer}
			default:
				return nil, lb.Errorf("address", addr.String(), "is neither a heartbeat source nor a destination")
			}
		}
		st := e.opts.HA.Status()
		if err := e.opts.HA.Takeover(groups); err != nil {
			return nil, lb.Errorf("highavailability", "", "%v", err)
		}
		return takenBack(cfg, st, groups), nil
	})
}

// takenBack warns of a takeover the peer undoes at once: of groups whose
// preferred dispatcher is the live, healthy peer, with recovery auto and
// reaching as many targets as this one (it preempts as soon as it has a
// copy of the connections). groups nil is every group.
func takenBack(cfg lb.Config, st lb.HAStatus, groups []lb.HAGroup) []string {
	p := st.Peer
	if !p.Alive || !p.Healthy || p.Recovery != lb.RecoveryAuto {
		return nil
	}
	reach := 0
	for _, r := range st.Reach {
		if r.Reachable {
			reach++
		}
	}
	if p.Reach < reach {
		return nil
	}
	var back []string
	for _, gs := range st.Groups {
		g := gs.Group
		peerPreferred := cfg.HA.Role == lb.RoleBackup || cfg.HA.Role == lb.RoleBoth && g == lb.GroupPeer
		if !peerPreferred || gs.State == lb.HAActive || groups != nil && !slices.Contains(groups, g) {
			continue
		}
		if cls := groupClusters(cfg, g); len(cls) > 0 {
			back = append(back, cls...)
		} else {
			back = append(back, "group "+g.String())
		}
	}
	if len(back) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("the peer is the preferred dispatcher of %s and its recovery is auto: "+
		"it takes them back within seconds, once it has a copy of the connections made here; to keep them here (the peer's "+
		"maintenance), run \"dlbctl executor stop\" on the peer, or make its recovery manual", strings.Join(back, ", "))}
}

// HAStatus is high availability in a status snapshot.
type HAStatus struct {
	// Config is the configuration; Node what the function reports.
	Config lb.HighAvailability
	Node   lb.HAStatus
	// Clusters lists each group's clusters.
	Clusters map[lb.HAGroup][]string
	// Digest is this configuration's digest, and DigestMatch whether the
	// live peer announces the same.
	Digest      uint64
	DigestMatch bool
	// Imported and Unknown count replicated records written to the
	// executor and those naming a server this configuration lacks.
	Imported, Unknown uint64
	// Merged and Kept count the records received for groups this
	// dispatcher served too (a partition that healed): written, and not
	// written (the key held already: the same connection, or another
	// used since).
	Merged, Kept uint64
	// Announcements counts the rounds of gratuitous ARP and unsolicited
	// neighbour advertisements sent.
	Announcements uint64
}

// haStatus takes the snapshot.
func (e *Engine) haStatus(cfg lb.Config) *HAStatus {
	st := &HAStatus{Config: cfg.HA.Clone(), Digest: e.ha.digest.Sum(), Clusters: map[lb.HAGroup][]string{},
		Imported: e.ha.imported, Unknown: e.ha.unknown, Merged: e.ha.merged, Kept: e.ha.kept, Announcements: e.ha.announcements}
	if e.opts.HA != nil {
		st.Node = e.opts.HA.Status()
		st.DigestMatch = st.Node.Peer.Alive && st.Node.Peer.Digest == st.Digest
	}
	for _, g := range cfg.HA.Groups() {
		st.Clusters[g] = groupClusters(cfg, g)
	}
	return st
}
