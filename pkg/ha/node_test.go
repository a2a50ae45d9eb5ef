package ha

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// A pair of Nodes on loopback addresses, each driven by a small stand-in
// for the engine: it confirms releases, imports what it receives (into a
// map), sends a full copy of its own map on every new replication
// session, and counts the records.

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

var (
	addrA = netip.MustParseAddr("127.0.0.1")
	addrB = netip.MustParseAddr("127.0.0.2")
	// addrC and addrD are a second path's ends (twoPaths).
	addrC = netip.MustParseAddr("127.0.0.3")
	addrD = netip.MustParseAddr("127.0.0.4")
)

type simEngine struct {
	t    *testing.T
	n    *Node
	stop context.CancelFunc
	done chan struct{}

	mu       sync.Mutex
	applied  map[lb.HAGroup]lb.HAState
	table    map[netip.AddrPort]lb.ConnRecord // what it "forwards" (its own entries)
	imported map[netip.AddrPort]lb.ConnRecord
	session  uint64
}

func testConfig(role lb.HARole, src, dst netip.Addr, port uint16) lb.HighAvailability {
	return lb.HighAvailability{Role: role, Recovery: lb.RecoveryAuto, Port: port, SecretFile: "/secret",
		Interval: 50, Count: 4, Heartbeats: []lb.Heartbeat{{Source: src, Destination: dst}}}
}

// twoPaths is testConfig with two heartbeat paths: the primary's A -> B
// and C -> D, the backup's B -> A and D -> C.
func twoPaths(role lb.HARole, port uint16) lb.HighAvailability {
	if role == lb.RoleBackup {
		h := testConfig(role, addrB, addrA, port)
		h.Heartbeats = append(h.Heartbeats, lb.Heartbeat{Source: addrD, Destination: addrC})
		return h
	}
	h := testConfig(role, addrA, addrB, port)
	h.Heartbeats = append(h.Heartbeats, lb.Heartbeat{Source: addrC, Destination: addrD})
	return h
}

func freePort(t *testing.T) uint16 {
	t.Helper()
	for range 20 {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		p := uint16(c.LocalAddr().(*net.UDPAddr).Port)
		c.Close()
		l1, err1 := net.Listen("tcp", netip.AddrPortFrom(addrA, p).String())
		l2, err2 := net.Listen("tcp", netip.AddrPortFrom(addrB, p).String())
		if l1 != nil {
			l1.Close()
		}
		if l2 != nil {
			l2.Close()
		}
		if err1 == nil && err2 == nil {
			return p
		}
	}
	t.Fatal("no free port")
	return 0
}

func startSim(t *testing.T, h lb.HighAvailability, secret string) *simEngine {
	t.Helper()
	return startSimResumed(t, h, secret, nil)
}

// startSimResumed is startSim for a dlbd restarted over an executor that
// kept forwarding: its groups resume the states given.
func startSimResumed(t *testing.T, h lb.HighAvailability, secret string, resume *[lb.NumHAGroups]lb.HAState) *simEngine {
	t.Helper()
	return startSimWith(t, h, func(string) ([]byte, error) { return []byte(secret), nil }, resume)
}

// startSimWith is startSimResumed reading the secret with read (again
// every 20 ms).
func startSimWith(t *testing.T, h lb.HighAvailability, read func(string) ([]byte, error), resume *[lb.NumHAGroups]lb.HAState) *simEngine {
	t.Helper()
	return startSimOptions(t, h, Options{ReadSecret: read}, resume)
}

// startSimOptions starts a simEngine whose Node has opts (quiet, every
// ping answered and the secret read again every 20 ms unless opts say
// otherwise).
func startSimOptions(t *testing.T, h lb.HighAvailability, opts Options, resume *[lb.NumHAGroups]lb.HAState) *simEngine {
	t.Helper()
	opts.Logger = quiet
	if opts.SecretCheck == 0 {
		opts.SecretCheck = 20 * time.Millisecond
	}
	if opts.Probe == nil {
		opts.Probe = func(context.Context, netip.Addr, netip.Addr, time.Duration) error { return nil }
	}
	n := New(opts)
	n.SetHealth(true, "")
	if resume != nil {
		n.Resume(*resume)
	}
	if err := n.Configure(h, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &simEngine{t: t, n: n, stop: cancel, done: make(chan struct{}), applied: map[lb.HAGroup]lb.HAState{},
		table: map[netip.AddrPort]lb.ConnRecord{}, imported: map[netip.AddrPort]lb.ConnRecord{}}
	go e.run(ctx)
	t.Cleanup(e.close)
	return e
}

func (e *simEngine) close() { e.halt(false) }

// halt stops the engine and its Node, as dlbd stopping does (restarting:
// the Node tells the peer it restarts); killed, dlbd says nothing, which
// Stop(false) does too.
func (e *simEngine) halt(restarting bool) {
	e.stop()
	<-e.done
	e.n.Stop(restarting)
}

func (e *simEngine) run(ctx context.Context) {
	defer close(e.done)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-e.n.Received():
			e.mu.Lock()
			for _, r := range b.Records {
				e.imported[r.Client] = r
			}
			e.mu.Unlock()
			if b.Marker != 0 {
				e.n.Imported(b.Marker)
			}
		case <-e.n.Notify():
			e.react()
		case <-tick.C:
			e.react()
		}
	}
}

// react applies the Node's decisions as the engine would.
func (e *simEngine) react() {
	st := e.n.Status()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, g := range st.Groups {
		was := e.applied[g.Group]
		e.applied[g.Group] = g.State
		if was == lb.HAActive && g.State == lb.HAStandby {
			// Let go: send the last entries and a marker after them.
			m := e.n.NextMarker()
			e.n.Send(Batch{Records: e.records(), Marker: m})
			e.n.Released(g.Group, m)
		}
	}
	if s := e.n.Session(); s != 0 && s != e.session {
		e.session = s
		e.n.Send(Batch{Records: e.records(), Marker: e.n.NextMarker(), Full: true})
	}
}

func (e *simEngine) records() []lb.ConnRecord {
	var out []lb.ConnRecord
	for _, r := range e.table {
		out = append(out, r)
	}
	return out
}

func (e *simEngine) state(g lb.HAGroup) lb.HAState {
	for _, s := range e.n.Status().Groups {
		if s.Group == g {
			return s.State
		}
	}
	return lb.HAIdle
}

// waitFor polls cond for at most limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not after %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// secrets are the secret files of the dispatchers of a test, by
// heartbeat address, changed as a test goes.
type secrets struct {
	mu sync.Mutex
	m  map[netip.Addr]string
}

// newSecrets gives addrA and addrB the same secret.
func newSecrets(secret string) *secrets {
	return &secrets{m: map[netip.Addr]string{addrA: secret, addrB: secret}}
}

// reader reads who's secret file (Options.ReadSecret).
func (s *secrets) reader(who netip.Addr) func(string) ([]byte, error) {
	return func(string) ([]byte, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return []byte(s.m[who]), nil
	}
}

// set rewrites who's secret file.
func (s *secrets) set(who netip.Addr, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[who] = secret
}

// watchPeers checks every 2 ms that a (the primary) and b (the backup)
// hear each other, until the function it returns is called; that returns
// what was seen first when one did not ("" when both always did).
func watchPeers(a, b *simEngine) func() string {
	stop := make(chan struct{})
	watched := make(chan string, 1)
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			for i, e := range []*simEngine{a, b} {
				if st := e.n.Status(); !st.Peer.Alive {
					watched <- fmt.Sprintf("the peer of %s not alive: %+v", []string{"the primary", "the backup"}[i], st.Peer)
					return
				}
			}
		}
	}()
	return func() string {
		close(stop)
		return <-watched
	}
}

// startPair starts a primary (a) and a backup (b) on a free port and
// waits for the primary to serve, the backup to stand by.
func startPair(t *testing.T) (a, b *simEngine, port uint16) {
	t.Helper()
	port = freePort(t)
	a = startSim(t, testConfig(lb.RolePrimary, addrA, addrB, port), "secret-secret")
	b = startSim(t, testConfig(lb.RoleBackup, addrB, addrA, port), "secret-secret")
	waitFor(t, 2*time.Second, "primary active, backup standby", func() bool {
		return a.state(lb.GroupLocal) == lb.HAActive && b.state(lb.GroupPeer) == lb.HAStandby
	})
	return a, b, port
}

func TestNodePairFailoverAndFailback(t *testing.T) {
	a, b, port := startPair(t)
	// The active's entries reach the standby (full copy on connect).
	rec := lb.ConnRecord{Kind: lb.ConnMAC, Protocol: 6, Client: netip.MustParseAddrPort("198.18.2.11:40000"),
		Cluster: netip.MustParseAddrPort("198.18.0.100:80"), Server: netip.MustParseAddr("198.18.0.21"), Age: 3 * time.Second}
	a.mu.Lock()
	a.table[rec.Client] = rec
	a.mu.Unlock()
	if !a.n.Send(Batch{Records: []lb.ConnRecord{rec}}) {
		waitFor(t, 2*time.Second, "replication connected", func() bool { return a.n.Session() != 0 })
		a.n.Send(Batch{Records: []lb.ConnRecord{rec}})
	}
	waitFor(t, 2*time.Second, "the record at the standby", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		got, ok := b.imported[rec.Client]
		return ok && got == rec
	})
	waitFor(t, 2*time.Second, "standby synced", func() bool { return b.n.Status().Replication.Synced })

	// The primary dies without a word: the backup takes over after
	// count × interval (200 ms).
	a.close()
	took := waitFor(t, 2*time.Second, "backup active", func() bool { return b.state(lb.GroupPeer) == lb.HAActive })
	if took < 150*time.Millisecond {
		t.Errorf("took over after %v, before the dead time", took)
	}
	t.Logf("backup active %v after the primary stopped", took)

	// The primary comes back (a new boot): it stands by, gets a full
	// copy, and, recovery auto, takes its clusters back by preempting.
	b.mu.Lock()
	b.table[rec.Client] = rec
	b.mu.Unlock()
	a2 := startSim(t, testConfig(lb.RolePrimary, addrA, addrB, port), "secret-secret")
	waitFor(t, 3*time.Second, "primary active again, backup standby", func() bool {
		return a2.state(lb.GroupLocal) == lb.HAActive && b.state(lb.GroupPeer) == lb.HAStandby
	})
	a2.mu.Lock()
	_, ok := a2.imported[rec.Client]
	a2.mu.Unlock()
	if !ok {
		t.Error("the primary took over without the backup's entries")
	}
}

// TestNodeDeadline: loop's timer falls due at the moment the peer stops
// counting as alive: count × interval after the last heartbeat, or at the
// end of a restart's grace when that is later; none when the peer is not
// alive.
func TestNodeDeadline(t *testing.T) {
	heard := time.Unix(1000, 0)
	for _, tc := range []struct {
		name    string
		running bool
		heard   bool
		grace   time.Duration // after heard; 0: none
		now     time.Duration // after heard
		want    time.Duration // after heard; -1: no deadline
	}{
		{name: "alive", running: true, heard: true, now: 100 * time.Millisecond, want: 2 * time.Second},
		{name: "alive, just heard", running: true, heard: true, now: 0, want: 2 * time.Second},
		{name: "dead at the deadline", running: true, heard: true, now: 2 * time.Second, want: -1},
		{name: "dead since", running: true, heard: true, now: 3 * time.Second, want: -1},
		{name: "restarting", running: true, heard: true, grace: 30 * time.Second, now: 5 * time.Second, want: 30 * time.Second},
		{name: "grace shorter than the dead time", running: true, heard: true, grace: time.Second, now: 0, want: 2 * time.Second},
		{name: "never heard", running: true, heard: false, now: 0, want: -1},
		{name: "stopped", running: false, heard: true, now: 0, want: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := New(Options{Logger: quiet})
			n.cfg = lb.HighAvailability{Interval: 500, Count: 4}
			n.running = tc.running
			n.peer.heard, n.peer.lastHeard = tc.heard, heard
			if tc.grace > 0 {
				n.peer.graceUntil = heard.Add(tc.grace)
			}
			at, ok := n.deadlineLocked(heard.Add(tc.now))
			if tc.want < 0 {
				if ok {
					t.Fatalf("deadline %v after the last heartbeat, want none", at.Sub(heard))
				}
				return
			}
			if !ok || !at.Equal(heard.Add(tc.want)) {
				t.Fatalf("deadline %v after the last heartbeat (%v), want %v", at.Sub(heard), ok, tc.want)
			}
			if n.peerAliveLocked(at) || !n.peerAliveLocked(at.Add(-time.Nanosecond)) {
				t.Fatalf("the peer's aliveness does not change at the deadline")
			}
		})
	}
}

// TestNodeRestartGrace: a peer that says it restarts is waited for.
func TestNodeRestartGrace(t *testing.T) {
	a, b, port := startPair(t)
	a.halt(true)
	time.Sleep(500 * time.Millisecond) // 2.5 × the dead time
	if st := b.state(lb.GroupPeer); st != lb.HAStandby {
		t.Fatalf("took over a restarting peer: %s", st)
	}
	if p := b.n.Status().Peer; !p.Restarting || !p.Alive {
		t.Errorf("peer status %+v, want restarting and alive", p)
	}
	a2 := New(Options{Logger: quiet, ReadSecret: func(string) ([]byte, error) { return []byte("secret-secret"), nil }})
	a2.SetHealth(true, "")
	a2.Resume([lb.NumHAGroups]lb.HAState{lb.HAActive})
	if err := a2.Configure(testConfig(lb.RolePrimary, addrA, addrB, port), 1); err != nil {
		t.Fatal(err)
	}
	defer a2.Stop(false)
	if st := a2.Status().Groups[0]; st.State != lb.HAActive || st.Reason != "resumed after a restart of dlbd" {
		t.Errorf("the restarted primary starts %s (%s), want active as it was", st.State, st.Reason)
	}
	waitFor(t, 2*time.Second, "the restarted peer heard again", func() bool {
		p := b.n.Status().Peer
		return p.Alive && !p.Restarting && p.Boot == a2.boot
	})
	if st := b.state(lb.GroupPeer); st != lb.HAStandby {
		t.Errorf("the backup is %s after the primary's restart", st)
	}
}

// TestNodeResumeAfterTakeover: dlbd restarted on the active after its
// peer took the group over (it was down longer than the dead time). The
// group it resumes active stands by once it hears the peer serving: the
// peer has connections the restarted one lacks, and must not let go of
// the group at once ("two actives"), before sending them. Recovery auto
// then takes the group back the usual way, through a preempt that waits
// for the peer's last entries.
func TestNodeResumeAfterTakeover(t *testing.T) {
	a, b, port := startPair(t)
	// dlbd killed: no heartbeat says it restarts.
	a.halt(false)
	waitFor(t, 2*time.Second, "the backup active", func() bool { return b.state(lb.GroupPeer) == lb.HAActive })
	a2 := startSimResumed(t, testConfig(lb.RolePrimary, addrA, addrB, port), "secret-secret", &[lb.NumHAGroups]lb.HAState{lb.HAActive})
	waitFor(t, 5*time.Second, "the primary active again, the backup standing by", func() bool {
		return a2.state(lb.GroupLocal) == lb.HAActive && b.state(lb.GroupPeer) == lb.HAStandby
	})
	// Through a preempt (the peer let go when asked, after its last
	// entries), not by staying active as it resumed.
	if got := a2.n.Status().Groups; len(got) != 1 || got[0].Reason != "the peer let go: recovery auto: the preferred dispatcher takes its clusters back" {
		t.Errorf("the restarted primary serves with %+v, want after a preempt", got)
	}
	if got := b.n.Status().Groups; len(got) != 1 || got[0].Reason != "recovery auto: the preferred dispatcher takes its clusters back" {
		t.Errorf("the backup let go with %+v, want the preempt's reason (not two actives)", got)
	}
}

// TestNodeStandbyRestart: dlbd restarted on the standby resumes standing
// by; it does not take the group, its peer not heard yet, only to let go
// of it again (it did, for tens of milliseconds, announcing the addresses
// to its own MAC).
func TestNodeStandbyRestart(t *testing.T) {
	a, b, port := startPair(t)
	b.halt(true)
	b2 := startSimResumed(t, testConfig(lb.RoleBackup, addrB, addrA, port), "secret-secret", &[lb.NumHAGroups]lb.HAState{lb.HAIdle, lb.HAStandby})
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		if st := b2.state(lb.GroupPeer); st != lb.HAStandby {
			t.Fatalf("the restarted standby is %s (%s)", st, b2.n.Status().Groups[0].Reason)
		}
		if st := a.state(lb.GroupLocal); st != lb.HAActive {
			t.Fatalf("the primary is %s during the standby's restart", st)
		}
	}
	if p := b2.n.Status().Peer; !p.Alive {
		t.Error("the restarted standby has not heard the primary in 500 ms")
	}
}

// TestNodeRefusesStrangers: heartbeats with another secret, and a
// recorded heartbeat replayed once the peer is gone, do not keep a peer
// alive.
func TestNodeRefusesStrangers(t *testing.T) {
	port := freePort(t)
	b := startSim(t, testConfig(lb.RoleBackup, addrB, addrA, port), "secret-secret")
	// A primary with another secret: never heard.
	a := startSim(t, testConfig(lb.RolePrimary, addrA, addrB, port), "another secret")
	time.Sleep(300 * time.Millisecond)
	if p := b.n.Status().Peer; p.Heard {
		t.Fatal("heard a peer with another secret")
	}
	if b.n.Status().Refused[errMAC.Error()] == 0 {
		t.Error("refusals not counted")
	}
	a.close()

	// The real primary; record what it sends, then stop it and replay.
	sniff, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.3"), port)))
	if err != nil {
		t.Skipf("no 127.0.0.3: %v", err)
	}
	defer sniff.Close()
	h := testConfig(lb.RolePrimary, addrA, addrB, port)
	h.Heartbeats = append(h.Heartbeats, lb.Heartbeat{Source: addrA, Destination: netip.MustParseAddr("127.0.0.3")})
	a2 := startSim(t, h, "secret-secret")
	waitFor(t, 2*time.Second, "peer heard", func() bool { return b.n.Status().Peer.Alive })
	var recorded [][]byte
	buf := make([]byte, 2048)
	_ = sniff.SetReadDeadline(time.Now().Add(time.Second))
	for len(recorded) < 5 {
		k, err := sniff.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		recorded = append(recorded, append([]byte(nil), buf[:k]...))
	}
	a2.close()
	replayer, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrA, port)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrB, port)))
	if err != nil {
		t.Fatal(err)
	}
	defer replayer.Close()
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		for _, r := range recorded {
			_, _ = replayer.Write(r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if p := b.n.Status().Peer; p.Alive {
		t.Error("replayed heartbeats keep a dead peer alive")
	}
	if st := b.state(lb.GroupPeer); st != lb.HAActive {
		t.Errorf("the backup is %s with its peer gone", st)
	}
	if b.n.Status().Refused[errReplay.Error()] == 0 {
		t.Error("replays not counted")
	}
}

// TestNodeDropsReplicationOfSilentPeer: when the peer is no longer heard
// (here: its heartbeats stop while its process and TCP connections live
// on, as across a partition), both replication connections are closed,
// so that the next one starts afresh with a full copy instead of resuming
// at TCP's backed-off retransmission.
func TestNodeDropsReplicationOfSilentPeer(t *testing.T) {
	port := freePort(t)
	a := startSim(t, testConfig(lb.RolePrimary, addrA, addrB, port), "secret-secret")
	b := startSim(t, testConfig(lb.RoleBackup, addrB, addrA, port), "secret-secret")
	both := func(sending, receiving bool) func() bool {
		return func() bool {
			ra, rb := a.n.Status().Replication, b.n.Status().Replication
			return ra.Sending == sending && ra.Receiving == receiving && rb.Sending == sending && rb.Receiving == receiving
		}
	}
	waitFor(t, 2*time.Second, "replication up both ways", both(true, true))
	// a's heartbeat sockets close: a neither hears b nor is heard; the
	// TCP connections stay up.
	a.n.mu.Lock()
	for _, c := range a.n.socks {
		c.Close()
	}
	a.n.mu.Unlock()
	took := waitFor(t, 2*time.Second, "both replication connections closed on both sides", both(false, false))
	// The dead time (200 ms) runs from the last heartbeat heard, which
	// came up to an interval (50 ms) before the sockets closed, later
	// if the scheduler delayed it: closed at once would be a few ms.
	if took < 100*time.Millisecond {
		t.Errorf("closed after %v, well before the dead time (200 ms)", took)
	}
}

// TestNodeSecretGoneAtStart: a start whose secret file cannot be read
// (deleted while dlbd was down) leaves the function stopped, and its
// status says why; once the file is back, a Configure starts it.
func TestNodeSecretGoneAtStart(t *testing.T) {
	secret := []byte("")
	var readErr error
	n := New(Options{Logger: quiet, ReadSecret: func(string) ([]byte, error) { return secret, readErr },
		Probe: func(context.Context, netip.Addr, netip.Addr, time.Duration) error { return nil }})
	defer n.Stop(false)
	n.SetHealth(true, "")
	h := testConfig(lb.RolePrimary, addrA, addrB, freePort(t))
	readErr = fmt.Errorf("open /secret: no such file or directory")
	if err := n.Configure(h, 1); err == nil {
		t.Fatal("configured without its secret")
	}
	st := n.Status()
	if st.Running || !strings.Contains(st.Error, "cannot read the shared secret") || !strings.Contains(st.Error, "no such file") {
		t.Fatalf("status without the secret: running %v, error %q", st.Running, st.Error)
	}
	secret, readErr = []byte("secret-secret"), nil
	if err := n.Configure(h, 1); err != nil {
		t.Fatal(err)
	}
	if st := n.Status(); !st.Running || st.Error != "" {
		t.Fatalf("status with the secret back: running %v, error %q", st.Running, st.Error)
	}
}

// TestNodeDecidesOnNewestOfBurst: heartbeats a primary sent while its link
// was down arrive together when it comes back, the first still saying
// "active, healthy", the last "noexecutor". The backup, active meanwhile,
// decides on the newest only: it neither lets go nor takes back (on the
// old code it did both in the same instant).
func TestNodeDecidesOnNewestOfBurst(t *testing.T) {
	port := freePort(t)
	b := startSim(t, testConfig(lb.RoleBackup, addrB, addrA, port), "secret-secret")
	waitFor(t, 5*time.Second, "the lone backup active", func() bool { return b.state(lb.GroupPeer) == lb.HAActive })
	st := b.n.Status()
	var since time.Time
	for _, g := range st.Groups {
		if g.Group == lb.GroupPeer {
			since = g.Since
		}
	}
	b.n.mu.Lock()
	key := b.n.key
	b.n.mu.Unlock()
	heartbeat := func(seq uint64, healthy bool, state lb.HAState) []byte {
		m := message{Healthy: healthy, Boot: 77, Seq: seq, PeerBoot: st.Boot, Role: lb.RolePrimary, Recovery: lb.RecoveryAuto}
		m.Groups[0].State = state // the sender's local group: the backup's peer group
		return m.encode(key)
	}
	peer, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrA, port)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrB, port)))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	// Both are queued before the backup handles the first: it waits for
	// its lock, which the test holds meanwhile.
	b.n.mu.Lock()
	for i, hb := range [][]byte{heartbeat(1, true, lb.HAActive), heartbeat(2, false, lb.HANoExecutor)} {
		if _, err := peer.Write(hb); err != nil {
			b.n.mu.Unlock()
			t.Fatalf("heartbeat %d: %v", i+1, err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	b.n.mu.Unlock()
	waitFor(t, 2*time.Second, "the peer heard", func() bool { return b.n.Status().Peer.Heard })
	time.Sleep(100 * time.Millisecond)
	for _, g := range b.n.Status().Groups {
		if g.Group != lb.GroupPeer {
			continue
		}
		if g.State != lb.HAActive || !g.Since.Equal(since) {
			t.Errorf("after the burst: %s since %v (%q), want active since %v, never left", g.State, g.Since, g.Reason, since)
		}
	}
	if p := b.n.Status().Peer; p.Healthy || p.States[lb.GroupPeer] != lb.HANoExecutor {
		t.Errorf("the peer as last heard: healthy %v, state %s; want the newest heartbeat's", p.Healthy, p.States[lb.GroupPeer])
	}
}

// TestReadSecretFile: the secret file named in a configuration is read
// only if it is a regular file of at most 4 KiB. A named pipe used to stop
// the engine until someone wrote to it; /dev/zero made dlbd read until its
// memory ran out (3.8 GB in 30 s, the API unanswered).
func TestReadSecretFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	good, big := filepath.Join(dir, "good"), filepath.Join(dir, "big")
	if err := os.WriteFile(good, []byte("secret-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, bytes.Repeat([]byte("s"), 5000), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, want string }{
		{"regular", good, ""},
		{"named pipe", fifo, "is a named pipe, not a regular file"},
		{"endless device", "/dev/zero", "is a character device, not a regular file"},
		{"too large", big, "larger than 4 KiB"},
	} {
		start := time.Now()
		b, err := readSecretFile(tc.path)
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: took %v", tc.name, took)
		}
		if tc.want == "" {
			if err != nil || string(b) != "secret-secret\n" {
				t.Errorf("%s: %q, %v", tc.name, b, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestNodeWarnsOfAnExposedSecret: a secret file others may read is
// logged (not refused: that would stop a running pair at an upgrade); a
// private one is not.
func TestNodeWarnsOfAnExposedSecret(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		mode os.FileMode
		warn bool
	}{{0o644, true}, {0o600, false}} {
		path := filepath.Join(dir, fmt.Sprintf("secret-%o", tc.mode))
		if err := os.WriteFile(path, []byte("secret-secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, tc.mode); err != nil {
			t.Fatal(err)
		}
		var logs testutil.LogBuffer
		n := New(Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			Probe: func(context.Context, netip.Addr, netip.Addr, time.Duration) error { return nil }})
		n.SetHealth(true, "")
		h := testConfig(lb.RolePrimary, addrA, addrB, freePort(t))
		h.SecretFile = path
		// Configured twice (the engine retries a start that failed):
		// warned once.
		for range 2 {
			if err := n.Configure(h, 1); err != nil {
				t.Fatal(err)
			}
			n.Stop(false)
		}
		if c := strings.Count(logs.String(), "others may read the shared secret file"); c > 1 {
			t.Errorf("mode %04o: warned %d times, want once", tc.mode, c)
		}
		warned := strings.Contains(logs.String(), "others may read the shared secret file") &&
			strings.Contains(logs.String(), "has mode 0644; run: chmod 600 "+path)
		if warned != tc.warn {
			t.Errorf("mode %04o: warned %v, want %v; log:\n%s", tc.mode, warned, tc.warn, logs.String())
		}
	}
}

// TestResumedWithholdsPeerBoot: while a group resumed after a restart has
// not decided, heartbeats do not confirm the peer's boot, so the peer
// refuses them and never sees the undecided claim to be active; once it
// has decided, they do.
func TestResumedWithholdsPeerBoot(t *testing.T) {
	n := New(Options{Logger: quiet})
	n.Resume([lb.NumHAGroups]lb.HAState{lb.HAActive})
	n.mu.Lock()
	defer n.mu.Unlock()
	n.peer.fresh.heard = 42
	if m := n.messageLocked(false); m.PeerBoot != 0 || m.Groups[lb.GroupLocal].State != lb.HAActive {
		t.Errorf("undecided: the heartbeat confirms boot %d (state %s), want none", m.PeerBoot, m.Groups[lb.GroupLocal].State)
	}
	n.groups[lb.GroupLocal].resumed = false
	if m := n.messageLocked(false); m.PeerBoot != 42 {
		t.Errorf("decided: the heartbeat confirms boot %d, want the peer's, 42", m.PeerBoot)
	}
}

// TestNodeResync: a standby whose executor's tables were replaced by
// empty ones (Resync) is not synchronised at once, and does not take its
// group back from the live peer before the peer's next full copy, on a
// new replication session, is imported.
func TestNodeResync(t *testing.T) {
	a, b, _ := startPair(t)
	rec := lb.ConnRecord{Kind: lb.ConnMAC, Protocol: 6, Client: netip.MustParseAddrPort("198.18.2.11:40000"),
		Cluster: netip.MustParseAddrPort("198.18.0.100:81"), Server: netip.MustParseAddr("198.18.1.11")}
	waitFor(t, 2*time.Second, "the backup synced", func() bool { return b.n.Status().Replication.Synced })
	waitFor(t, 2*time.Second, "the primary synced", func() bool { return a.n.Status().Replication.Synced })

	// The primary's executor stops: the backup serves, and makes a
	// connection.
	a.n.SetHealth(false, "the executor is not loaded")
	waitFor(t, 2*time.Second, "the backup active, as the primary hears", func() bool {
		return b.state(lb.GroupPeer) == lb.HAActive && a.n.Status().Peer.States[lb.GroupLocal] == lb.HAActive
	})
	b.mu.Lock()
	b.table[rec.Client] = rec
	session := b.session
	b.mu.Unlock()

	// It starts again, empty: the primary forgets what it imported.
	a.mu.Lock()
	a.imported = map[netip.AddrPort]lb.ConnRecord{}
	a.mu.Unlock()
	a.n.Resync()
	if a.n.Status().Replication.Synced {
		t.Fatal("synced right after Resync")
	}
	a.n.SetHealth(true, "")
	// It takes the group back (recovery auto) only once synced: the
	// backup's full copy, on a new session, holds the connection.
	deadline := time.Now().Add(5 * time.Second)
	for a.state(lb.GroupLocal) != lb.HAActive {
		if time.Now().After(deadline) {
			t.Fatal("the primary did not take its group back")
		}
		time.Sleep(time.Millisecond)
	}
	a.mu.Lock()
	_, ok := a.imported[rec.Client]
	a.mu.Unlock()
	b.mu.Lock()
	newSession := b.session != session
	b.mu.Unlock()
	if !newSession || !ok {
		t.Errorf("the primary took its group back with new session %v, the backup's connection imported %v", newSession, ok)
	}
}

// TestNodeSecretRotation: the two secret files changed one after the
// other (each read again within SecretCheck), the pair never stops
// hearing each other: heartbeats go under both secrets on the side
// changed first, replication connects under the one both hold, and once
// the peer is heard with the new one the former is refused. Two
// different new secrets keep the pair on the former one, and say so.
func TestNodeSecretRotation(t *testing.T) {
	port := freePort(t)
	sec := newSecrets("secret-one")
	reader, set := sec.reader, sec.set
	a := startSimWith(t, testConfig(lb.RolePrimary, addrA, addrB, port), reader(addrA), nil)
	b := startSimWith(t, testConfig(lb.RoleBackup, addrB, addrA, port), reader(addrB), nil)
	waitFor(t, 2*time.Second, "primary active, backup standby, synced", func() bool {
		return a.state(lb.GroupLocal) == lb.HAActive && b.state(lb.GroupPeer) == lb.HAStandby && b.n.Status().Replication.Synced
	})
	aSince, bSince := a.n.Status().Groups[0].Since, b.n.Status().Groups[0].Since

	// Watch: neither may stop hearing the other.
	watched := watchPeers(a, b)
	// newSession drops the replication connections: the next ones
	// handshake with the secret the peer holds.
	newSession := func(what string) {
		t.Helper()
		was := b.n.Status().Replication.Session
		a.n.mu.Lock()
		a.n.dropConnsLocked()
		a.n.mu.Unlock()
		waitFor(t, 3*time.Second, what+": replication connected again", func() bool {
			st := b.n.Status()
			return st.Replication.Synced && st.Replication.Receiving && a.n.Session() != 0 && a.n.Session() != was
		})
	}
	pending := func(e *simEngine) bool { return e.n.Status().SecretPending }
	refused := func(e *simEngine) uint64 { return e.n.Status().Refused["unauthenticated"] }

	set(addrA, "secret-two")
	waitFor(t, 2*time.Second, "the primary pending on the new secret", func() bool { return pending(a) })
	waitFor(t, 2*time.Second, "the backup refusing the heartbeats under the new secret", func() bool { return refused(b) > 0 })
	if pending(b) {
		t.Error("the backup, not changed, says a secret is pending")
	}
	newSession("one side changed")

	set(addrB, "secret-two")
	waitFor(t, 2*time.Second, "neither pending", func() bool { return !pending(a) && !pending(b) })
	newSession("both changed")
	// A heartbeat under the former secret is refused now.
	was := refused(b)
	m := message{Healthy: true, Boot: 1, Seq: 1, Role: lb.RolePrimary}
	c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrA, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrB, port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(m.encode([]byte("secret-one"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "a heartbeat under the former secret refused", func() bool { return refused(b) > was })

	// Two different new secrets: the pair stays on the one both hold.
	set(addrA, "secret-three")
	set(addrB, "secret-four")
	waitFor(t, 2*time.Second, "both pending", func() bool { return pending(a) && pending(b) })
	time.Sleep(300 * time.Millisecond) // past the dead time (200 ms)

	if msg := watched(); msg != "" {
		t.Error(msg)
	}
	if st := a.n.Status().Groups[0]; st.State != lb.HAActive || !st.Since.Equal(aSince) {
		t.Errorf("the primary %s since %v (%s), want active since %v", st.State, st.Since, st.Reason, aSince)
	}
	if st := b.n.Status().Groups[0]; st.State != lb.HAStandby || !st.Since.Equal(bSince) {
		t.Errorf("the backup %s since %v (%s), want standby since %v", st.State, st.Since, st.Reason, bSince)
	}
}

// TestNodeConfigureFailedKeepsTheGroups: a start whose secret cannot be
// read does not run, and says so, but names the groups it resumed, so
// that the engine can keep them for the restart grace and then let go of
// them (Abandon); started later, the function decides from there.
func TestNodeConfigureFailedKeepsTheGroups(t *testing.T) {
	var mu sync.Mutex
	secret := ""
	n := New(Options{Logger: quiet, ReadSecret: func(string) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		if secret == "" {
			return nil, os.ErrNotExist
		}
		return []byte(secret), nil
	}, Probe: func(context.Context, netip.Addr, netip.Addr, time.Duration) error { return nil }})
	n.Resume([lb.NumHAGroups]lb.HAState{lb.HAActive})
	h := testConfig(lb.RolePrimary, addrA, addrB, freePort(t))
	if err := n.Configure(h, 1); lb.FieldOf(err) != "secretfile" {
		t.Fatalf("Configure without its secret: %v", err)
	}
	st := n.Status()
	if st.Running || !strings.Contains(st.Error, "cannot read the shared secret") || len(st.Groups) != 1 || st.Groups[0].State != lb.HAActive {
		t.Fatalf("not running: %+v", st)
	}
	n.Abandon("let go")
	if g := n.Status().Groups[0]; g.State != lb.HAListen || g.Reason != "let go" {
		t.Errorf("abandoned: %+v", g)
	}
	mu.Lock()
	secret = "secret-secret"
	mu.Unlock()
	if err := n.Configure(h, 1); err != nil {
		t.Fatal(err)
	}
	defer n.Stop(false)
	if st := n.Status(); !st.Running || st.Error != "" {
		t.Errorf("started: %+v", st)
	}
}

// TestNodeRestartingPeerHostDown: a peer that said it was restarting dlbd
// is waited for while its host answers pings; once the host, having
// answered, stops (a reboot: systemd stops dlbd as for a restart, then the
// host goes, maybe at once), it is taken over after count unanswered
// pings, not at the end of its grace; a host that never answered (ICMP
// filtered) keeps its grace.
func TestNodeRestartingPeerHostDown(t *testing.T) {
	const (
		never = iota
		atOnce
		later
	)
	for _, c := range []struct {
		name     string
		answers  bool // the host answers pings while dlbd runs
		down     int  // when the host goes down
		takeover bool
	}{
		{"dlbd restarting, the host up", true, never, false},
		{"the host down 300 ms after dlbd", true, later, true},
		{"the host down with dlbd", true, atOnce, true},
		{"the host never answering", false, later, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			port := freePort(t)
			var hostUp atomic.Bool
			hostUp.Store(c.answers)
			probe := func(_ context.Context, target, _ netip.Addr, _ time.Duration) error {
				if target == addrA && !hostUp.Load() {
					return errors.New("no reply")
				}
				return nil
			}
			a := startSim(t, testConfig(lb.RolePrimary, addrA, addrB, port), "secret-secret")
			b := startSimOptions(t, testConfig(lb.RoleBackup, addrB, addrA, port),
				Options{ReadSecret: func(string) ([]byte, error) { return []byte("secret-secret"), nil }, Probe: probe}, nil)
			waitFor(t, 2*time.Second, "primary active, backup standby", func() bool {
				return a.state(lb.GroupLocal) == lb.HAActive && b.state(lb.GroupPeer) == lb.HAStandby
			})
			time.Sleep(100 * time.Millisecond) // pinged while alive
			a.halt(true)
			if c.down == atOnce {
				hostUp.Store(false)
			}
			waitFor(t, time.Second, "the peer restarting", func() bool { return b.n.Status().Peer.Restarting })
			time.Sleep(300 * time.Millisecond) // past the dead time (200 ms)
			if c.down == later {
				hostUp.Store(false)
			}
			// count (4) pings, 25 ms apart, with margin; far below the
			// grace (30 s).
			time.Sleep(time.Second)
			if got := b.state(lb.GroupPeer) == lb.HAActive; got != c.takeover {
				t.Fatalf("the backup active %v (peer %+v), want %v", got, b.n.Status().Peer, c.takeover)
			}
		})
	}
}

// TestNodePeerWithALongerInterval: a peer that announces a longer
// interval than this dispatcher's (changed there first) is waited for
// count of its intervals: with this dispatcher's dead time (200 ms) below
// the peer's interval (300 ms), it was found dead between every two
// heartbeats, and the two served in turns. Gone, it is taken over after
// count × its interval.
func TestNodePeerWithALongerInterval(t *testing.T) {
	port := freePort(t)
	a := startSim(t, testConfig(lb.RolePrimary, addrA, addrB, port), "secret-secret")
	hb := testConfig(lb.RoleBackup, addrB, addrA, port)
	hb.Interval = 300
	b := startSim(t, hb, "secret-secret")
	waitFor(t, 3*time.Second, "primary active, backup standby", func() bool {
		return a.state(lb.GroupLocal) == lb.HAActive && b.state(lb.GroupPeer) == lb.HAStandby
	})
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if p := a.n.Status().Peer; !p.Alive {
			t.Fatalf("the primary (dead time 200 ms) lost the backup (interval 300 ms) between two heartbeats: %+v", p)
		}
	}
	b.close()
	gone := time.Now()
	waitFor(t, 3*time.Second, "the backup no longer heard", func() bool { return !a.n.Status().Peer.Alive })
	if took := time.Since(gone); took < 900*time.Millisecond {
		t.Errorf("the backup found dead %v after it went, before count × its interval (1.2 s)", took)
	}
}

// TestNodeChangedOnOneSide: a change that rebinds the sockets (the port,
// a heartbeat source), made on one side of a live pair and then on the
// other, as an operator does it: neither side stops hearing the other,
// neither changes state, and replication reconnects in between.
func TestNodeChangedOnOneSide(t *testing.T) {
	for _, tc := range []struct {
		name string
		// first and second are the sides changed in that order (0: the
		// primary, 1: the backup); change changes a configuration.
		first  int
		change func(h *lb.HighAvailability, newPort uint16)
	}{
		{"port, the backup first", 1, func(h *lb.HighAvailability, p uint16) { h.Port = p }},
		{"port, the primary first", 0, func(h *lb.HighAvailability, p uint16) { h.Port = p }},
		{"a heartbeat path added, the backup first", 1, func(h *lb.HighAvailability, _ uint16) {
			if h.Role == lb.RoleBackup {
				h.Heartbeats = append(h.Heartbeats, lb.Heartbeat{Source: addrC, Destination: addrD})
			} else {
				h.Heartbeats = append(h.Heartbeats, lb.Heartbeat{Source: addrD, Destination: addrC})
			}
		}},
		{"a heartbeat path added, the primary first", 0, func(h *lb.HighAvailability, _ uint16) {
			if h.Role == lb.RoleBackup {
				h.Heartbeats = append(h.Heartbeats, lb.Heartbeat{Source: addrC, Destination: addrD})
			} else {
				h.Heartbeats = append(h.Heartbeats, lb.Heartbeat{Source: addrD, Destination: addrC})
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port, newPort := freePort(t), freePort(t)
			cfgs := []lb.HighAvailability{testConfig(lb.RolePrimary, addrA, addrB, port), testConfig(lb.RoleBackup, addrB, addrA, port)}
			sims := []*simEngine{startSim(t, cfgs[0], "secret-secret"), startSim(t, cfgs[1], "secret-secret")}
			a, b := sims[0], sims[1]
			waitFor(t, 2*time.Second, "primary active, backup standby, synced", func() bool {
				return a.state(lb.GroupLocal) == lb.HAActive && b.state(lb.GroupPeer) == lb.HAStandby && b.n.Status().Replication.Synced
			})
			aSince, bSince := a.n.Status().Groups[0].Since, b.n.Status().Groups[0].Since

			watched := watchPeers(a, b)
			for k, side := range []int{tc.first, 1 - tc.first} {
				tc.change(&cfgs[side], newPort)
				if err := sims[side].n.Configure(cfgs[side], 1); err != nil {
					t.Fatal(err)
				}
				time.Sleep(300 * time.Millisecond) // past the dead time (200 ms)
				waitFor(t, 3*time.Second, fmt.Sprintf("change %d: replication synced both ways", k+1), func() bool {
					sa, sb := a.n.Status(), b.n.Status()
					return sa.Replication.Synced && sb.Replication.Synced && sa.Replication.Sending && sb.Replication.Sending
				})
				if p := sims[1-side].n.Status().PeerPort; k == 0 && cfgs[0].Port != cfgs[1].Port && p != cfgs[side].Port {
					t.Errorf("change %d: the side not changed says the peer's port is %d, want %d", k+1, p, cfgs[side].Port)
				}
			}
			if msg := watched(); msg != "" {
				t.Error(msg)
			}
			for i, e := range sims {
				st := e.n.Status()
				if st.PeerPort != 0 {
					t.Errorf("%d: the peer's port still %d once both changed", i, st.PeerPort)
				}
				want, since := lb.HAActive, aSince
				if i == 1 {
					want, since = lb.HAStandby, bSince
				}
				if g := st.Groups[0]; g.State != want || !g.Since.Equal(since) {
					t.Errorf("%d: %s since %v (%s), want %s since %v", i, g.State, g.Since, g.Reason, want, since)
				}
			}
		})
	}
}

// TestNodeCheck: a configuration whose heartbeat sockets cannot bind is
// refused before anything changes: a source not on this host, a port
// another program holds over UDP (heartbeats) or over TCP (replication:
// only the UDP port was tried, and the function stopped at the start);
// the sockets of the running function itself are no obstacle.
func TestNodeCheck(t *testing.T) {
	port := freePort(t)
	held := func(network string) func(t *testing.T) uint16 {
		return func(t *testing.T) uint16 {
			p := freePort(t)
			ap := netip.AddrPortFrom(addrA, p).String()
			var c io.Closer
			var err error
			if network == "udp" {
				c, err = net.ListenPacket("udp", ap)
			} else {
				c, err = net.Listen("tcp", ap)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return p
		}
	}
	running := startSim(t, testConfig(lb.RolePrimary, addrA, addrB, port), "secret-secret")
	for _, tc := range []struct {
		name string
		src  netip.Addr
		port func(t *testing.T) uint16
		want string // in the error; "" accepted
	}{
		{"a free port", addrA, freePort, ""},
		{"the running function's own port", addrA, func(*testing.T) uint16 { return port }, ""},
		{"a source not on this host", netip.MustParseAddr("198.18.99.1"), freePort, "the address is not on this host"},
		{"the UDP port held", addrA, held("udp"), "cannot send heartbeats from 127.0.0.1"},
		{"the TCP port held", addrA, held("tcp"), "cannot accept replication on 127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := running.n.Check(testConfig(lb.RolePrimary, tc.src, addrB, tc.port(t)))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
			if st := running.n.Status(); !st.Running || st.Error != "" {
				t.Errorf("the running function changed: running %v, error %q", st.Running, st.Error)
			}
		})
	}
}

// TestNodeTwoPaths: with two heartbeat paths each heartbeat arrives
// twice; the copy is the path's sign of life, not a replay: both paths
// count what they carry, and nothing is refused (the slower path's
// copies were refused as replayed, and it looked silent).
func TestNodeTwoPaths(t *testing.T) {
	port := freePort(t)
	a, b := startSim(t, twoPaths(lb.RolePrimary, port), "secret-secret"), startSim(t, twoPaths(lb.RoleBackup, port), "secret-secret")
	waitFor(t, 2*time.Second, "primary active, backup standby", func() bool {
		return a.state(lb.GroupLocal) == lb.HAActive && b.state(lb.GroupPeer) == lb.HAStandby
	})
	time.Sleep(time.Second) // 20 intervals
	for i, e := range []*simEngine{a, b} {
		st := e.n.Status()
		if n := st.Refused["replayed"]; n > 0 {
			t.Errorf("%d: %d heartbeats refused as replayed: %v", i, n, st.Refused)
		}
		if len(st.Heartbeats) != 2 {
			t.Fatalf("%d: paths %+v", i, st.Heartbeats)
		}
		for _, p := range st.Heartbeats {
			if p.Received < p.Sent*3/4 || time.Since(p.LastHeard) > 200*time.Millisecond {
				t.Errorf("%d: path %s -> %s: sent %d, received %d, last heard %v ago", i, p.Source, p.Destination,
					p.Sent, p.Received, time.Since(p.LastHeard))
			}
		}
	}
}

// TestNodeCopyOfAnUnconfirmedHeartbeat: at a start, a heartbeat refused
// until the peer confirms this boot may have its copy on the other path
// arrive after the next heartbeat was accepted: a copy, not a replay
// (TestNodeTwoPaths failed on it in CI, 1 of about 25 runs). The same
// heartbeat sent again later is a replay still.
func TestNodeCopyOfAnUnconfirmedHeartbeat(t *testing.T) {
	port := freePort(t)
	a := startSim(t, twoPaths(lb.RolePrimary, port), "secret-secret")
	a.n.mu.Lock()
	key, own := a.n.key, a.n.boot
	a.n.mu.Unlock()
	// The peer's two paths: B -> A and D -> C.
	send := func(from, to netip.Addr, m message) {
		t.Helper()
		c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(to, port)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(m.encode(key)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // handled before the next
	}
	hb := func(seq, peerBoot uint64) message {
		return message{Boot: 0xb007, Seq: seq, PeerBoot: peerBoot, Role: lb.RoleBackup, Healthy: true, IntervalMS: 50}
	}
	refused := func() map[string]uint64 { return a.n.Status().Refused }
	send(addrD, addrC, hb(1, 0))   // before the peer heard this boot: refused
	send(addrB, addrA, hb(2, own)) // accepted
	send(addrB, addrA, hb(1, 0))   // the first one's copy, late on the other path
	if r := refused(); r["replayed"] != 0 || r["unconfirmed boot"] != 1 {
		t.Errorf("refused %v; want the unconfirmed heartbeat once, no replay", r)
	}
	time.Sleep(100 * time.Millisecond) // two intervals
	send(addrB, addrA, hb(1, 0))
	if r := refused(); r["replayed"] != 1 {
		t.Errorf("refused %v; want the heartbeat sent again later refused as a replay", r)
	}
}

// TestNodeRestartedWithAnotherPort: a dlbd restarted over its saved
// configuration, then given a configuration file with another port
// before it heard its peer (the operator edited the file, restarted):
// it talks to the peer's port, the former one, until the peer uses the
// new one too. It was a partition: the standby took the group over 2 s
// after its start, beside the active.
func TestNodeRestartedWithAnotherPort(t *testing.T) {
	a, b, port := startPair(t)
	newPort := freePort(t)
	b.halt(true)
	cfg := testConfig(lb.RoleBackup, addrB, addrA, port)
	resume := [lb.NumHAGroups]lb.HAState{lb.HAIdle, lb.HAStandby}
	b2 := startSimResumed(t, cfg, "secret-secret", &resume)
	cfg.Port = newPort
	if err := b2.n.Configure(cfg, 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "the restarted backup heard, standby", func() bool {
		return b2.n.Status().Peer.Alive && b2.state(lb.GroupPeer) == lb.HAStandby && a.n.Status().Peer.Alive &&
			!a.n.Status().Peer.Restarting
	})
	watched := watchPeers(a, b2)
	time.Sleep(500 * time.Millisecond) // 2.5 × the dead time
	if msg := watched(); msg != "" {
		t.Error(msg)
	}
	if sa, sb := a.state(lb.GroupLocal), b2.state(lb.GroupPeer); sa != lb.HAActive || sb != lb.HAStandby {
		t.Errorf("the primary %s, the restarted backup %s", sa, sb)
	}
	if p := a.n.Status().PeerPort; p != newPort {
		t.Errorf("the primary says the peer's port is %d, want %d", p, newPort)
	}
}

// TestNodeRestartedWithAnotherSecret: a dlbd restarted after its secret
// file changed, the peer's not yet (configuration management rewrote
// the file and restarted dlbd), still hears the peer with the secret
// kept from before the restart; once the peer has the new secret, that
// is the one kept. It served beside the active 2 s after its start.
func TestNodeRestartedWithAnotherSecret(t *testing.T) {
	port := freePort(t)
	kept := filepath.Join(t.TempDir(), PeerSecretFileName)
	sec := newSecrets("secret-one")
	reader := sec.reader
	a := startSimWith(t, testConfig(lb.RolePrimary, addrA, addrB, port), reader(addrA), nil)
	bcfg := testConfig(lb.RoleBackup, addrB, addrA, port)
	b := startSimOptions(t, bcfg, Options{ReadSecret: reader(addrB), PeerSecretFile: kept}, nil)
	waitFor(t, 2*time.Second, "primary active, backup standby", func() bool {
		return a.state(lb.GroupLocal) == lb.HAActive && b.state(lb.GroupPeer) == lb.HAStandby
	})
	if got, err := os.ReadFile(kept); err != nil || string(got) != "secret-one" {
		t.Fatalf("kept %q, %v; want the secret the peer was heard with", got, err)
	}
	b.halt(true)
	sec.set(addrB, "secret-two")
	resume := [lb.NumHAGroups]lb.HAState{lb.HAIdle, lb.HAStandby}
	b2 := startSimOptions(t, bcfg, Options{ReadSecret: reader(addrB), PeerSecretFile: kept}, &resume)
	waitFor(t, 2*time.Second, "the restarted backup heard, standby", func() bool {
		return b2.n.Status().Peer.Alive && a.n.Status().Peer.Alive && !a.n.Status().Peer.Restarting
	})
	watched := watchPeers(a, b2)
	time.Sleep(500 * time.Millisecond) // 2.5 × the dead time
	if sa, sb := a.state(lb.GroupLocal), b2.state(lb.GroupPeer); sa != lb.HAActive || sb != lb.HAStandby {
		t.Errorf("the primary %s, the restarted backup %s", sa, sb)
	}
	if !b2.n.Status().SecretPending {
		t.Error("the restarted backup does not say the peer has another secret")
	}
	sec.set(addrA, "secret-two")
	waitFor(t, 2*time.Second, "neither pending", func() bool { return !a.n.Status().SecretPending && !b2.n.Status().SecretPending })
	if msg := watched(); msg != "" {
		t.Error(msg)
	}
	if got, err := os.ReadFile(kept); err != nil || string(got) != "secret-two" {
		t.Errorf("kept %q, %v; want the new secret both hold", got, err)
	}
	if fi, err := os.Stat(kept); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the kept secret's mode: %v, %v", fi.Mode(), err)
	}
	// High availability removed: the kept secret goes.
	if err := b2.n.Configure(lb.HighAvailability{}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(kept); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the kept secret stays once high availability is removed: %v", err)
	}
}

// TestNodeStrayPath: heartbeats the peer sends on a path this dispatcher
// does not have (the primary's path changed on its side alone) are
// refused, and reported as a stray path, authentic ones only: a datagram
// under another secret is not. Once the path is configured here too, it
// is no longer stray.
func TestNodeStrayPath(t *testing.T) {
	port := freePort(t)
	pcfg, bcfg := testConfig(lb.RolePrimary, addrA, addrB, port), testConfig(lb.RoleBackup, addrB, addrA, port)
	a, b := startSim(t, pcfg, "secret-secret"), startSim(t, bcfg, "secret-secret")
	waitFor(t, 2*time.Second, "primary active, backup standby", func() bool {
		return a.state(lb.GroupLocal) == lb.HAActive && b.state(lb.GroupPeer) == lb.HAStandby
	})
	if st := b.n.Status(); len(st.Stray) != 0 {
		t.Fatalf("stray paths with the same paths on both: %+v", st.Stray)
	}
	// A datagram of a heartbeat's size from another address, under
	// another secret: not the peer's.
	forged := (&message{Boot: 7, Seq: 1, Role: lb.RolePrimary}).encode([]byte("another secret"))
	c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 4)}, &net.UDPAddr{IP: addrB.AsSlice(), Port: int(port)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(forged); err != nil {
		t.Fatal(err)
	}

	pcfg.Heartbeats = []lb.Heartbeat{{Source: addrC, Destination: addrB}}
	if err := a.n.Configure(pcfg, 1); err != nil {
		t.Fatal(err)
	}
	want := lb.Heartbeat{Source: addrB, Destination: addrC}
	waitFor(t, 2*time.Second, "the backup reporting the stray path "+want.Destination.String()+" -> "+want.Source.String(), func() bool {
		st := b.n.Status()
		return len(st.Stray) == 1 && st.Stray[0].Heartbeat == want && st.Stray[0].Received > 0 && !st.Stray[0].LastHeard.IsZero()
	})
	if st := b.n.Status(); st.Refused["unknown sender"] == 0 {
		t.Errorf("refused %v: the stray heartbeats not counted as from an unknown sender", st.Refused)
	}
	if st := a.n.Status(); len(st.Stray) != 0 {
		t.Errorf("the primary reports stray paths %+v: it receives nothing on a path it lacks", st.Stray)
	}

	bcfg.Heartbeats = append(bcfg.Heartbeats, want)
	if err := b.n.Configure(bcfg, 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "the path configured on the backup no longer stray, and heard", func() bool {
		st := b.n.Status()
		return len(st.Stray) == 0 && st.Peer.Alive && slices.ContainsFunc(st.Heartbeats, func(p lb.HAPathStatus) bool {
			return p.Heartbeat == want && p.Received > 0
		})
	})
}

// TestNodeResumedOutsideItsRole: dlbd restarted as primary with the
// states it journaled while it was backup (its role changed since: the
// peer group's state active): a group outside its role is not resumed.
// It was, and never decided (only the role's groups decide), so every
// heartbeat left unconfirming the peer's boot: the peer refused them all
// ("unconfirmed boot"), and the pair stayed split for good.
func TestNodeResumedOutsideItsRole(t *testing.T) {
	a, b, port := startPair(t)
	a.halt(true)
	resume := [lb.NumHAGroups]lb.HAState{lb.HAActive, lb.HAActive}
	a2 := startSimResumed(t, testConfig(lb.RolePrimary, addrA, addrB, port), "secret-secret", &resume)
	waitFor(t, 2*time.Second, "the restarted primary heard, and hearing its peer", func() bool {
		sa, sb := a2.n.Status(), b.n.Status()
		return sa.Peer.Alive && sb.Peer.Alive && !sb.Peer.Restarting && sb.Peer.Boot == sa.Boot
	})
	if sa, sb := a2.state(lb.GroupLocal), b.state(lb.GroupPeer); sa != lb.HAActive || sb != lb.HAStandby {
		t.Errorf("the primary %s, the backup %s", sa, sb)
	}
	if got := a2.n.Status().Groups; len(got) != 1 || got[0].Group != lb.GroupLocal {
		t.Errorf("the restarted primary's groups %+v, want its own only", got)
	}
}
