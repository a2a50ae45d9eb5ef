package ha

import (
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
)

const dead = 2 * time.Second

func TestStep(t *testing.T) {
	t0 := time.Unix(1000, 0)
	primary := self{healthy: true, preferred: true, synced: true, boot: 2}
	backup := self{healthy: true, synced: true, boot: 1}
	withReach := func(s self, r, n int) self { s.reach, s.targets = r, n; return s }
	peer := func(st lb.HAState) peerView { return peerView{alive: true, healthy: true, state: st} }
	prefPeer := func(st lb.HAState) peerView { p := peer(st); p.preferred = true; return p }
	cases := []struct {
		name    string
		from    lb.HAState
		since   time.Duration // how long it has been in from
		s       self
		p       peerView
		want    lb.HAState
		release bool // the active lets go (standby, heartbeats still active)
	}{
		{"executor down", lb.HAActive, 0, self{healthy: false}, peer(lb.HAStandby), lb.HANoExecutor, false},
		{"listen: peer active", lb.HAListen, 0, primary, peer(lb.HAActive), lb.HAStandby, false},
		{"listen: peer standby, primary better", lb.HAListen, 0, primary, peer(lb.HAStandby), lb.HAActive, false},
		{"listen: peer listens, backup worse", lb.HAListen, 0, backup, prefPeer(lb.HAListen), lb.HAStandby, false},
		{"listen: backup reaching more wins", lb.HAListen, 0, withReach(backup, 2, 2), withPeerReach(prefPeer(lb.HAListen), 1, 2), lb.HAActive, false},
		{"listen: no peer yet", lb.HAListen, time.Second, backup, peerView{}, lb.HAListen, false},
		{"listen: no peer after dead time", lb.HAListen, dead, backup, peerView{}, lb.HAActive, false},
		{"listen: no peer, no target reachable", lb.HAListen, dead, withReach(backup, 0, 1), peerView{}, lb.HAListen, false},
		{"listen: peer unhealthy", lb.HAListen, 0, backup, peerView{alive: true, preferred: true}, lb.HAActive, false},
		{"standby: peer dead", lb.HAStandby, 0, backup, peerView{}, lb.HAActive, false},
		{"standby: peer dead but we reach nothing", lb.HAStandby, 0, withReach(backup, 0, 2), peerView{}, lb.HAStandby, false},
		{"standby: peer's executor down", lb.HAStandby, 0, backup, peerView{alive: true, preferred: true, state: lb.HANoExecutor}, lb.HAActive, false},
		{"standby: backup stays under a live primary", lb.HAStandby, 0, backup, prefPeer(lb.HAActive), lb.HAStandby, false},
		{"standby: primary auto preempts", lb.HAStandby, 0, primary, peer(lb.HAActive), lb.HAPreempt, false},
		{"standby: primary manual stays", lb.HAStandby, 0, self{healthy: true, preferred: true, synced: true, recovery: lb.RecoveryManual}, peer(lb.HAActive), lb.HAStandby, false},
		{"standby: primary not synced waits", lb.HAStandby, 0, self{healthy: true, preferred: true}, peer(lb.HAActive), lb.HAStandby, false},
		{"standby: more reach preempts", lb.HAStandby, 0, withReach(backup, 1, 1), withPeerReach(prefPeer(lb.HAActive), 0, 1), lb.HAPreempt, false},
		// A target added on one dispatcher first: counted there only, it
		// takes nothing from the other; shares are compared.
		{"standby: a target only it counts does not preempt", lb.HAStandby, 0, withReach(backup, 2, 2),
			withPeerReach(prefPeer(lb.HAActive), 1, 1), lb.HAStandby, false},
		{"standby: a greater share preempts", lb.HAStandby, 0, withReach(backup, 1, 1),
			withPeerReach(prefPeer(lb.HAActive), 1, 2), lb.HAPreempt, false},
		{"standby: the peer without targets, reach says nothing", lb.HAStandby, 0, withReach(backup, 1, 1),
			withPeerReach(prefPeer(lb.HAActive), 0, 0), lb.HAStandby, false},
		{"standby: takeover asked", lb.HAStandby, 0, self{healthy: true, takeover: true}, prefPeer(lb.HAActive), lb.HAPreempt, false},
		{"standby: nobody active, primary takes", lb.HAStandby, 0, primary, peer(lb.HAStandby), lb.HAActive, false},
		{"active: peer dead", lb.HAActive, 0, backup, peerView{}, lb.HAActive, false},
		{"active: isolated, no target", lb.HAActive, 0, withReach(primary, 0, 1), peerView{}, lb.HAListen, false},
		{"active: two actives, the primary stays", lb.HAActive, 0, primary, peer(lb.HAActive), lb.HAActive, false},
		{"active: two actives, the backup yields", lb.HAActive, 0, backup, prefPeer(lb.HAActive), lb.HAStandby, true},
		{"active: backup yields to auto primary", lb.HAActive, 0, backup, wantPeer(prefPeer(lb.HAPreempt), lb.RecoveryAuto), lb.HAStandby, true},
		{"active: backup keeps it from a manual primary", lb.HAActive, 0, backup, wantPeer(prefPeer(lb.HAPreempt), lb.RecoveryManual), lb.HAActive, false},
		{"active: yields to a takeover", lb.HAActive, 0, primary, takeoverPeer(peer(lb.HAPreempt)), lb.HAStandby, true},
		{"active: keeps it from a peer reaching less", lb.HAActive, 0, withReach(backup, 2, 2),
			withPeerReach(wantPeer(prefPeer(lb.HAPreempt), lb.RecoveryAuto), 1, 2), lb.HAActive, false},
		{"active: keeps it from a peer counting a target more", lb.HAActive, 0, withReach(primary, 1, 1),
			withPeerReach(wantPeer(peer(lb.HAPreempt), lb.RecoveryAuto), 2, 2), lb.HAActive, false},
		{"listen: a target only it counts does not make it better", lb.HAListen, 0, withReach(backup, 2, 2),
			withPeerReach(prefPeer(lb.HAListen), 1, 1), lb.HAStandby, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := group{state: c.from, since: t0.Add(-c.since)}
			g.step(t0, c.s, c.p, dead, func(uint64) bool { return true })
			if g.state != c.want || g.releasing != c.release {
				t.Errorf("%s → %s (releasing %v, reason %q), want %s (releasing %v)", c.from, g.state, g.releasing, g.reason, c.want, c.release)
			}
			if c.release && g.wireState() != lb.HAActive {
				t.Error("a releasing group must keep announcing active until the engine confirms")
			}
		})
	}
}

func withPeerReach(p peerView, r, n int) peerView { p.reach, p.targets = r, n; return p }

func wantPeer(p peerView, r lb.HARecovery) peerView { p.want, p.recovery = true, r; return p }

func takeoverPeer(p peerView) peerView { p.want, p.takeover = true, true; return p }

// TestPreemptHandshake: a preempting standby serves only once the active
// let go and the marker after its last entries was imported; a peer that
// does not let go makes it stand by again, and not ask again at once.
func TestPreemptHandshake(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := self{healthy: true, preferred: true, synced: true}
	g := group{state: lb.HAPreempt, since: t0, preemptUntil: t0.Add(2 * dead)}
	imported := uint64(0)
	imp := func(m uint64) bool { return imported >= m }
	released := peerView{alive: true, healthy: true, state: lb.HAStandby, released: 42}
	g.step(t0.Add(time.Millisecond), s, released, dead, imp)
	if g.state != lb.HAPreempt {
		t.Fatalf("served before importing the peer's last entries: %s", g.state)
	}
	imported = 42
	g.step(t0.Add(2*time.Millisecond), s, released, dead, imp)
	if g.state != lb.HAActive {
		t.Fatalf("did not serve once the marker was imported: %s (%s)", g.state, g.reason)
	}

	g = group{state: lb.HAPreempt, since: t0, preemptUntil: t0.Add(2 * dead)}
	stubborn := peerView{alive: true, healthy: true, state: lb.HAActive}
	g.step(t0.Add(2*dead+time.Millisecond), s, stubborn, dead, imp)
	if g.state != lb.HAStandby {
		t.Fatalf("a preempt the peer ignores must time out: %s", g.state)
	}
	g.step(t0.Add(2*dead+2*time.Millisecond), s, stubborn, dead, imp)
	if g.state != lb.HAStandby {
		t.Errorf("asked again at once: %s", g.state)
	}
	g.step(t0.Add(3*dead+3*time.Millisecond), s, stubborn, dead, imp)
	if g.state != lb.HAPreempt {
		t.Errorf("did not ask again after the hold-off: %s", g.state)
	}
}

// TestReleaseThenTakeBack: heartbeats an isolated active sent while its
// link had no carrier arrive at once when the link comes back, in order:
// "active, healthy" (sent before it noticed), then "noexecutor". The
// backup, active meanwhile, lets go on the first and takes the group back
// on the second before the engine confirmed the release. It must then be
// an active like any other: yield to the primary's preempt once the
// primary is healthy again (it stayed active for good, ignoring every
// preempt, in an end-to-end run).
func TestReleaseThenTakeBack(t *testing.T) {
	t0 := time.Unix(1000, 0)
	backup := self{healthy: true, synced: true, boot: 1}
	g := group{state: lb.HAActive, since: t0}
	imp := func(uint64) bool { return true }
	stale := peerView{alive: true, healthy: true, preferred: true, state: lb.HAActive}
	g.step(t0, backup, stale, dead, imp)
	if g.state != lb.HAStandby || !g.releasing {
		t.Fatalf("two actives: the backup did not let go: %s (releasing %v)", g.state, g.releasing)
	}
	down := peerView{alive: true, preferred: true, state: lb.HANoExecutor}
	g.step(t0, backup, down, dead, imp)
	if g.state != lb.HAActive || g.releasing {
		t.Fatalf("the peer cannot forward: %s (releasing %v), want active, not releasing", g.state, g.releasing)
	}
	preempt := peerView{alive: true, healthy: true, preferred: true, state: lb.HAPreempt, want: true, recovery: lb.RecoveryAuto}
	g.step(t0.Add(time.Second), backup, preempt, dead, imp)
	if g.state != lb.HAStandby || !g.releasing {
		t.Errorf("the primary preempts: %s (releasing %v, %q), want standby, releasing", g.state, g.releasing, g.reason)
	}
}

// TestReasserted: an active counts the times it must announce its
// addresses again: its peer heard after a silence (it may have served
// meanwhile), and two actives that ended with this one active, whether
// the peer let go or went away. One that yields, or stands by, or keeps
// hearing a peer that never served, counts nothing.
func TestReasserted(t *testing.T) {
	t0 := time.Unix(1000, 0)
	primary := self{healthy: true, preferred: true, synced: true, boot: 2}
	backup := self{healthy: true, synced: true, boot: 1}
	active := peerView{alive: true, healthy: true, state: lb.HAActive}
	standby := peerView{alive: true, healthy: true, state: lb.HAStandby}
	prefActive, prefStandby := active, standby
	prefActive.preferred, prefStandby.preferred = true, true
	cases := []struct {
		name  string
		from  lb.HAState
		heard bool // the peer heard before the first step
		s     self
		peers []peerView
		want  uint64
		state lb.HAState
	}{
		{"two actives: the peer lets go", lb.HAActive, true, primary, []peerView{active, active, standby, standby}, 1, lb.HAActive},
		{"two actives: the peer goes away", lb.HAActive, true, primary, []peerView{active, {}}, 1, lb.HAActive},
		{"two actives twice", lb.HAActive, true, primary, []peerView{active, standby, active, active, standby}, 2, lb.HAActive},
		{"a peer standing by all along", lb.HAActive, true, primary, []peerView{standby, standby, standby}, 0, lb.HAActive},
		{"the peer heard after a silence", lb.HAActive, true, primary, []peerView{standby, {}, {}, standby, standby}, 1, lb.HAActive},
		{"restarted active: the peer first heard standing by", lb.HAActive, false, primary, []peerView{{}, standby, standby}, 1, lb.HAActive},
		{"restarted active: the peer first heard active, then lets go", lb.HAActive, false, primary, []peerView{active, active, standby}, 2, lb.HAActive},
		{"this one yields", lb.HAActive, true, backup, []peerView{prefActive, prefActive, prefStandby}, 0, lb.HAStandby},
		{"a standby hears its peer again", lb.HAStandby, true, backup, []peerView{prefActive, {}, prefActive}, 0, lb.HAStandby},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := group{state: c.from, since: t0, heard: c.heard}
			for i, p := range c.peers {
				g.step(t0.Add(time.Duration(i)*time.Millisecond), c.s, p, dead, func(uint64) bool { return true })
			}
			if g.reasserted != c.want || g.state != c.state {
				t.Errorf("reasserted %d in %s, want %d in %s", g.reasserted, g.state, c.want, c.state)
			}
		})
	}
}

// TestResumed: a group resumed after a restart of dlbd decides nothing
// until the peer is heard or the dead time passed. Resumed active, it
// then stands by if the peer serves the group (it took it over while dlbd
// was down), and serves on if not; resumed standby, it does not take the
// group from a peer not heard yet.
func TestResumed(t *testing.T) {
	t0 := time.Unix(1000, 0)
	primary := self{healthy: true, preferred: true, synced: true, boot: 2}
	backup := self{healthy: true, synced: true, boot: 1}
	took := "resumed after a restart of dlbd, but the peer took the group over meanwhile"
	cases := []struct {
		name       string
		from       lb.HAState
		s          self
		since      time.Duration
		p          peerView
		want       lb.HAState
		stillWaits bool
		wantReason string
	}{
		{"active: the peer took the group over", lb.HAActive, primary, 0, peerView{alive: true, healthy: true, state: lb.HAActive}, lb.HAStandby, false, took},
		{"active: the peer takes it back", lb.HAActive, primary, 0, peerView{alive: true, healthy: true, state: lb.HAPreempt}, lb.HAStandby, false, took},
		{"active: the peer stood by", lb.HAActive, primary, 0, peerView{alive: true, healthy: true, state: lb.HAStandby}, lb.HAActive, false, "resumed"},
		{"active: no peer heard yet", lb.HAActive, primary, time.Second, peerView{}, lb.HAActive, true, "resumed"},
		{"active: no peer heard in the dead time", lb.HAActive, primary, dead, peerView{}, lb.HAActive, false, "resumed"},
		{"standby: no peer heard yet", lb.HAStandby, backup, time.Second, peerView{}, lb.HAStandby, true, "resumed"},
		{"standby: the peer serves", lb.HAStandby, backup, 0, peerView{alive: true, healthy: true, preferred: true, state: lb.HAActive}, lb.HAStandby, false, "resumed"},
		{"standby: no peer heard in the dead time", lb.HAStandby, backup, dead, peerView{}, lb.HAActive, false, "the peer is dead"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := group{state: c.from, since: t0.Add(-c.since), reason: "resumed", resumed: true}
			g.step(t0, c.s, c.p, dead, func(uint64) bool { return true })
			if g.state != c.want || g.resumed != c.stillWaits || g.reason != c.wantReason || g.releasing {
				t.Errorf("%s (%q), still waiting for the peer %v, releasing %v; want %s (%q), %v", g.state, g.reason, g.resumed,
					g.releasing, c.want, c.wantReason, c.stillWaits)
			}
		})
	}
}
