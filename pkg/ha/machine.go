package ha

import (
	"fmt"
	"strings"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
)

// The decisions, per group of clusters. They are made from what this
// dispatcher knows of itself (self) and of its peer (peer, from its last
// accepted heartbeat), by the same rules on both sides, so that the two
// agree without a third party:
//
//   - A dispatcher whose executor cannot forward (stopped, detached, its
//     interface down) serves nothing (noexecutor), and says so in its
//     heartbeats: its peer takes over at once.
//   - A dispatcher that hears no peer (none yet, or none for count ×
//     interval, or for the restart grace its peer announced when it
//     stopped) serves the group if it reaches at least one reach target,
//     or has none configured; otherwise it waits (listen). So an
//     isolated active drops its clusters once its targets are gone too.
//   - Of two live dispatchers, the better one serves: the one that
//     reaches more targets (a greater share of them while the two have
//     different numbers configured, one changed before the other: none
//     is taken from the other for a target it only counts; not compared
//     when one has none); on a tie, the group's preferred dispatcher
//     (the primary, or the cluster's primaryhost under role both); if
//     that cannot decide (two primaries), the higher boot id.
//     Two actives (after a partition heals) resolve by this rule: the
//     worse one stands by at once.
//   - A standby takes over from a live active only by preempting: it
//     asks (its heartbeats say it wants the group), the active lets go
//     (takes its addresses off, stops forwarding new connections, sends
//     its last connection entries and a marker after them), and the
//     standby serves once it has imported everything up to that marker.
//     It asks when it reaches more targets and has a full copy of the
//     tables, when it is the preferred dispatcher with recovery auto, a
//     full copy, and as many targets, or when an operator asked for a
//     takeover. The active lets go by the same rules, so a preempt it
//     does not agree with times out and the standby stays standby.

// self is what a dispatcher knows of itself, for one group.
type self struct {
	healthy        bool
	reach, targets int
	preferred      bool
	recovery       lb.HARecovery
	// synced: this dispatcher has a full copy of the active's tables of
	// the group's clusters (or replication has nothing to copy).
	synced bool
	// takeover: an operator asked this dispatcher to take the group.
	takeover bool
	boot     uint64
}

// peerView is what a dispatcher knows of its peer, for one group.
type peerView struct {
	alive          bool
	healthy        bool
	reach, targets int
	state          lb.HAState
	want, takeover bool
	// preferred: the peer's role makes it the group's preferred
	// dispatcher (with self's, both may claim it: two primaries).
	preferred bool
	recovery  lb.HARecovery
	released  uint64
	boot      uint64
}

// group is one group's decision state.
type group struct {
	state  lb.HAState
	since  time.Time
	reason string
	// releasing: the group was let go, and the engine has not yet said
	// it took the addresses off: heartbeats keep saying active.
	releasing bool
	// released is the replication marker sent after letting go.
	released uint64
	// preemptUntil bounds a preempt; retryAt holds off the next one.
	preemptUntil, retryAt time.Time
	// contested: this dispatcher is active, and so was its peer when
	// last heard; heard: the peer was alive at the last step.
	// reasserted counts the times this dispatcher, active, is to
	// announce the group's addresses again (see step).
	contested, heard bool
	reasserted       uint64
	// resumed: the group was resumed (active or standby) after a
	// restart of dlbd (Node.Resume), and the peer has not been heard
	// since.
	resumed bool
}

// reachCmp compares what self and its peer reach: the counts when both
// have as many targets configured, else the shares (0: a tie, or one has
// none: a count it alone has says nothing of the other).
func reachCmp(s self, p peerView) int {
	switch {
	case s.targets == p.targets:
		return cmpInt(s.reach, p.reach)
	case s.targets == 0 || p.targets == 0:
		return 0
	}
	return cmpInt(s.reach*p.targets, p.reach*s.targets)
}

func cmpInt(a, b int) int {
	switch {
	case a > b:
		return 1
	case a < b:
		return -1
	}
	return 0
}

// reachWhy says what each reaches.
func reachWhy(s self, p peerView) string {
	if s.targets == p.targets {
		return fmt.Sprintf("reaches %d of %d targets, the peer %d", s.reach, s.targets, p.reach)
	}
	return fmt.Sprintf("reaches %d of %d targets, the peer %d of %d", s.reach, s.targets, p.reach, p.targets)
}

// better reports whether self is the better dispatcher to serve the
// group than a live, healthy peer, and why.
func better(s self, p peerView) (bool, string) {
	switch c := reachCmp(s, p); {
	case c != 0:
		return c > 0, reachWhy(s, p)
	case s.preferred != p.preferred:
		return s.preferred, "the group's preferred dispatcher"
	}
	return s.boot > p.boot, "the higher boot id (both dispatchers claim the same role)"
}

// canServe reports whether a dispatcher that hears no peer may serve:
// it reaches a target, or has none.
func canServe(s self) bool { return s.targets == 0 || s.reach > 0 }

// wantsGroup reports whether a standby should preempt a live active,
// and why.
func wantsGroup(s self, p peerView) (bool, string) {
	switch {
	case s.takeover:
		return true, "takeover asked"
	case !s.synced:
		return false, ""
	case reachCmp(s, p) > 0:
		return true, strings.Replace(reachWhy(s, p), "the peer", "the active", 1)
	case s.preferred && s.recovery == lb.RecoveryAuto && reachCmp(s, p) >= 0:
		return true, "recovery auto: the preferred dispatcher takes its clusters back"
	}
	return false, ""
}

// yields reports whether an active should let go of the group to a
// preempting peer, by the rules wantsGroup applies on the other side.
func yields(s self, p peerView) (bool, string) {
	switch {
	case p.takeover:
		return true, "the peer was asked to take over"
	case reachCmp(s, p) < 0:
		return true, "the peer is better: " + reachWhy(s, p)
	case p.preferred && !s.preferred && p.recovery == lb.RecoveryAuto && reachCmp(s, p) <= 0:
		return true, "recovery auto: the preferred dispatcher takes its clusters back"
	}
	return false, ""
}

// step decides the group's next state at now. deadTime is count ×
// interval; imported reports whether replication has imported
// everything up to a marker.
func (g *group) step(now time.Time, s self, p peerView, deadTime time.Duration, imported func(uint64) bool) {
	set := func(st lb.HAState, reason string) {
		if st != g.state {
			g.state, g.since = st, now
		}
		// A group let go of and taken again before the engine confirmed
		// the release serves: it is no longer releasing (else the active
		// case would wait for a confirmation that never comes, and ignore
		// its peer for good).
		if st != lb.HAStandby {
			g.releasing = false
		}
		g.reason = reason
	}
	if !s.healthy {
		g.releasing = false
		set(lb.HANoExecutor, "the executor cannot forward")
		return
	}
	if g.resumed {
		// A group resumed after a restart of dlbd decides nothing until
		// the peer is heard (it may serve the group now), or the dead
		// time passed without it.
		if !p.alive && now.Sub(g.since) < deadTime {
			return
		}
		g.resumed = false
		if g.state == lb.HAActive && p.alive && (p.state == lb.HAActive || p.state == lb.HAPreempt) {
			// dlbd was down here long enough for the peer to take the
			// group over: the peer has connections this dispatcher does
			// not. It stands by for a copy of them; taking the group back
			// (recovery auto) then waits for the peer's last ones.
			// (Staying active, it would make the peer let go at once, and
			// break every NAT connection the peer made meanwhile.)
			set(lb.HAStandby, "resumed after a restart of dlbd, but the peer took the group over meanwhile")
			g.heard = true
			return
		}
	}
	switch g.state {
	case lb.HAIdle, lb.HANoExecutor:
		set(lb.HAListen, "listening for the peer")
		fallthrough
	case lb.HAListen:
		switch {
		case p.alive && (p.state == lb.HAActive || p.state == lb.HAPreempt):
			set(lb.HAStandby, "the peer serves the group")
		case p.alive && !p.healthy:
			if canServe(s) {
				set(lb.HAActive, "the peer's executor cannot forward")
			}
		case p.alive:
			if ok, why := better(s, p); ok {
				set(lb.HAActive, why)
			} else {
				set(lb.HAStandby, "the peer is better: "+why)
			}
		case now.Sub(g.since) >= deadTime:
			if canServe(s) {
				set(lb.HAActive, "no peer heard")
			} else {
				g.reason = "no peer heard, and no reach target reachable"
			}
		}
	case lb.HAActive:
		if g.releasing {
			return
		}
		switch {
		case !p.alive:
			if !canServe(s) {
				set(lb.HAListen, "no peer heard, and no reach target reachable")
			}
		case !p.healthy:
		case p.state == lb.HAActive:
			if ok, why := better(s, p); !ok {
				g.release(now, "two actives: the peer is better: "+why)
			}
		case p.want:
			if ok, why := yields(s, p); ok {
				g.release(now, why)
			}
		}
	case lb.HAStandby:
		switch {
		case !p.alive:
			if canServe(s) {
				set(lb.HAActive, "the peer is dead")
			}
		case !p.healthy:
			if canServe(s) {
				set(lb.HAActive, "the peer's executor cannot forward")
			}
		case p.state != lb.HAActive && p.state != lb.HAPreempt:
			// Nobody serves: the better one takes it (the other sees
			// the same).
			if ok, why := better(s, p); ok {
				set(lb.HAActive, "no active: "+why)
			}
		case p.state == lb.HAActive && !now.Before(g.retryAt):
			if ok, why := wantsGroup(s, p); ok {
				set(lb.HAPreempt, why)
				g.preemptUntil = now.Add(2 * deadTime)
			}
		}
	case lb.HAPreempt:
		switch {
		case !p.alive || !p.healthy:
			set(lb.HAActive, "the peer went away while preempting")
		case p.state != lb.HAActive && (p.released == 0 || imported(p.released)):
			set(lb.HAActive, "the peer let go: "+g.reason)
		case now.After(g.preemptUntil):
			set(lb.HAStandby, "the peer did not let go")
			g.retryAt = now.Add(deadTime)
		}
	}
	// An active announces its addresses again when its peer is heard
	// after a silence (a dlbd restarted on this dispatcher after the peer
	// took over, a partition that healed: the peer may have served, and
	// announced them, meanwhile), and when two actives end with this one
	// active (the peer announced them when it took over): hosts and
	// routers would otherwise keep sending to the peer's MAC.
	switch {
	case g.state != lb.HAActive:
		g.contested = false
	case p.alive && !g.heard:
		g.reasserted++
		g.contested = p.state == lb.HAActive
	case p.alive && p.state == lb.HAActive:
		g.contested = true
	case g.contested:
		g.contested = false
		g.reasserted++
	}
	g.heard = p.alive
}

// release lets go of the group: it stands by, and heartbeats say active
// until the engine confirms (Released).
func (g *group) release(now time.Time, reason string) {
	g.state, g.since, g.reason = lb.HAStandby, now, reason
	g.releasing = true
}

// wireState is the state heartbeats announce.
func (g *group) wireState() lb.HAState {
	if g.releasing {
		return lb.HAActive
	}
	return g.state
}
