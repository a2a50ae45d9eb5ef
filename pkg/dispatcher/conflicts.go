package dispatcher

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
)

// conflictWait is how long a check waits for ARP (or neighbour
// advertisement) answers.
const conflictWait = 200 * time.Millisecond

// conflictBatch bounds the addresses of a family asked about in one
// round: asked all at once, 4,000 addresses were 4,000 broadcasts every
// round, more than the interface's queue took (the round failed whole,
// every round). With more addresses, each is asked once every
// ceil(addresses/conflictBatch) rounds, and those found answered for
// (up to conflictBatch more) every round.
const conflictBatch = 256

// conflicts is what the last checks found: per address this dispatcher
// holds, the Ethernet addresses of the other hosts that answered ARP (or,
// for IPv6, neighbour solicitations) for it. A server that holds a
// cluster address on its loopback without arp_ignore=1 answers ARP for
// it, and the routers may then send clients straight to it, past the
// dispatcher; so does another host configured with the address (for IPv6
// the only cause: Linux does not answer for a loopback's addresses, and
// dlb puts its addresses on without duplicate address detection).
type conflicts struct {
	found map[netip.Addr][]string
	// peer maps the MACs that answered for the high-availability peer's
	// addresses (its heartbeat destinations) to the address: the peer's
	// host answering for an address this dispatcher serves is told
	// apart from a server's.
	peer map[string]netip.Addr
	// err is the last check's error, logged once.
	err string
	// after is, per family (IPv6: true), the last address a round asked
	// about: the next asks from the one after it (pick).
	after map[bool]netip.Addr
}

// pick narrows each ask of job (its addresses sorted) to at most
// conflictBatch addresses: those after the last the previous round asked,
// in address order, starting again from the first at the end; and asks
// again about (up to conflictBatch) addresses found answered for, so that
// a conflict that ended (a peer that took its addresses off) is not
// reported for a whole cycle of rounds.
func (c *conflicts) pick(job conflictJob) conflictJob {
	if c.after == nil {
		c.after = map[bool]netip.Addr{}
	}
	out := make(conflictJob, 0, len(job))
	for _, ask := range job {
		if n := len(ask.addrs); n > conflictBatch {
			v6 := ask.addrs[0].Is6()
			i, found := slices.BinarySearchFunc(ask.addrs, c.after[v6], netip.Addr.Compare)
			if found {
				i++
			}
			some := make([]netip.Addr, 0, conflictBatch)
			for k := range conflictBatch {
				some = append(some, ask.addrs[(i+k)%n])
			}
			c.after[v6] = some[len(some)-1]
			again := 0
			for _, a := range ask.addrs {
				if again == conflictBatch {
					break
				}
				if len(c.found[a]) > 0 && !slices.Contains(some, a) {
					some = append(some, a)
					again++
				}
			}
			ask.addrs = some
		}
		out = append(out, ask)
	}
	return out
}

// conflictJob is what one round of checks asks: from each NFA, who else
// answers for the addresses of its family.
type conflictJob []conflictAsk

// conflictAsk asks, from src, who else answers for addrs, and who
// answers for peers (the high-availability peer's addresses). holder is
// the MAC of the executor's interface, which holds addrs: an NFA on
// another interface of the segment hears it answer, which is no
// conflict.
type conflictAsk struct {
	src          netip.Addr
	addrs, peers []netip.Addr
	holder       string
}

// addrs are all the addresses the job asks about.
func (j conflictJob) addrs() []netip.Addr {
	var out []netip.Addr
	for _, a := range j {
		out = append(out, a.addrs...)
	}
	return out
}

// held is the set of the job's addresses.
func (j conflictJob) held() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, a := range j {
		for _, addr := range a.addrs {
			out[addr] = true
		}
	}
	return out
}

// conflictJob lists the addresses this dispatcher holds on its interface
// now (under high availability, those of its active groups), by family,
// each family's asked from its NFA (none set: not asked).
func (e *Engine) conflictJob() conflictJob {
	cfg := e.ed.Config()
	if e.exec.dp == nil || e.exec.attach.detached != "" {
		return nil
	}
	// Under high availability, the addresses of the groups it serves.
	var active map[netip.Addr]bool
	if e.haOn(cfg) {
		active = map[netip.Addr]bool{}
		for g, addrs := range e.haAddresses(cfg) {
			if e.haActive(lb.HAGroup(g)) {
				for _, a := range addrs {
					active[a] = true
				}
			}
		}
	}
	v4, v6 := conflictAsk{src: cfg.Executor.NFA}, conflictAsk{src: cfg.Executor.NFA6}
	for a := range e.host.configured {
		if active != nil && !active[a] {
			continue
		}
		if a.Unmap().Is4() {
			v4.addrs = append(v4.addrs, a)
		} else {
			v6.addrs = append(v6.addrs, a)
		}
	}
	if active != nil {
		for _, hb := range cfg.HA.Heartbeats {
			if hb.Destination.Unmap().Is4() {
				v4.peers = append(v4.peers, hb.Destination.Unmap())
			} else {
				v6.peers = append(v6.peers, hb.Destination)
			}
		}
	}
	var job conflictJob
	for _, ask := range []conflictAsk{v4, v6} {
		if ask.src.IsValid() && len(ask.addrs) > 0 {
			slices.SortFunc(ask.addrs, netip.Addr.Compare)
			job = append(job, ask)
		}
	}
	return job
}

// watchConflicts checks, every ConflictInterval, who else answers ARP or
// neighbour solicitations for the addresses this dispatcher holds, off
// the management goroutine (each check waits), and hands the findings to
// it.
func (e *Engine) watchConflicts(ctx context.Context) {
	t := time.NewTicker(e.opts.ConflictInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		job, err := call(ctx, e, func() (conflictJob, error) {
			job := e.conflicts.pick(e.conflictJob())
			if l, err := e.opts.Netif.LinkByIndex(e.exec.attach.ifindex); err == nil && len(job) > 0 {
				for i := range job {
					job[i].holder = l.MAC.String()
				}
			}
			return job, nil
		})
		if err != nil {
			return
		}
		found, peer := map[netip.Addr][]string{}, map[string]netip.Addr{}
		var errs []string
		for _, ask := range job {
			answers, err := e.opts.AddressAnswerers(ctx, ask.src, append(slices.Clone(ask.addrs), ask.peers...), conflictWait)
			if err != nil {
				errs = append(errs, err.Error())
			}
			for a, macs := range answers {
				for _, m := range macs {
					if m.String() == ask.holder {
						continue
					}
					if slices.Contains(ask.peers, a) {
						peer[m.String()] = a
					} else {
						found[a] = append(found[a], m.String())
					}
				}
			}
		}
		// A round with nothing to ask (nothing held, every group
		// standby) clears what the last one found.
		if e.do(ctx, func() { e.onConflicts(job.addrs(), found, peer, strings.Join(errs, "; ")) }) != nil {
			return
		}
	}
}

// onConflicts records a round of checks of addrs (and the MACs of the
// high-availability peer), logging what changed; what earlier rounds
// found for the addresses this dispatcher still holds stays.
func (e *Engine) onConflicts(addrs []netip.Addr, found map[netip.Addr][]string, peer map[string]netip.Addr, errText string) {
	if errText != e.conflicts.err {
		if errText != "" {
			e.log.Warn("cannot ask who else answers ARP or neighbour solicitations for the addresses this dispatcher holds",
				"err", errText)
		}
		e.conflicts.err = errText
	}
	old := e.conflicts.found
	e.conflicts.found, e.conflicts.peer = map[netip.Addr][]string{}, peer
	if len(old) > 0 {
		held := e.conflictJob().held()
		for a, macs := range old {
			if held[a] {
				e.conflicts.found[a] = macs
			}
		}
	}
	for _, a := range addrs {
		now := found[a]
		slices.Sort(now)
		if len(now) > 0 {
			e.conflicts.found[a] = now
		} else {
			delete(e.conflicts.found, a)
		}
		asked, fix := conflictOf(a)
		switch was := old[a]; {
		case len(now) > 0 && !slices.Equal(now, was):
			if p, ok := e.peerOnly(now); ok {
				e.log.Warn("the high-availability peer answers "+asked+" for an address this dispatcher serves as the active: clients may reach it past this dispatcher",
					"address", a, "peer", p, "macs", strings.Join(now, ","), "fix", peerFix)
				break
			}
			e.log.Warn("another host answers "+asked+" for an address this dispatcher holds: clients may reach it past the dispatcher",
				"address", a, "macs", strings.Join(now, ","), "fix", fix)
		case len(now) == 0 && len(was) > 0:
			e.log.Info("no other host answers "+asked+" for the address any more", "address", a)
		}
	}
}

// peerFix is what mends the high-availability peer answering for the
// addresses of a group this dispatcher serves.
const peerFix = "the peer's host still holds the address: its dlbd takes it off when it runs " +
	"(is it running? dlbctl highavailability status there), or the pair cannot hear each other"

// peerOnly reports whether every MAC of macs is the high-availability
// peer's, and the peer's address.
func (e *Engine) peerOnly(macs []string) (netip.Addr, bool) {
	var p netip.Addr
	for _, m := range macs {
		a, ok := e.conflicts.peer[m]
		if !ok {
			return netip.Addr{}, false
		}
		p = a
	}
	return p, len(macs) > 0
}

// conflictOf says what was asked about address a (ARP, or for IPv6
// neighbour solicitations), and what usually causes another answer and
// mends it.
func conflictOf(a netip.Addr) (asked, fix string) {
	if a.Unmap().Is4() {
		return "ARP", "a server holding a cluster address on its loopback needs arp_ignore=1 and arp_announce=2 " +
			"(dlbctl backend setup; dlbctl server check finds it)"
	}
	return "neighbour solicitations", "another host holds the address on an interface (a server's loopback " +
		"is not answered for): take it off there"
}

// conflictWarnings are the report's lines for the conflicts found, for
// the addresses this dispatcher still holds: under high availability, a
// group that went standby since the last check (a partition healed) no
// longer has its addresses answered for by this host.
func (e *Engine) conflictWarnings() []string {
	var out []string
	held := e.conflictJob().held()
	for a, macs := range e.conflicts.found {
		if !held[a] {
			continue
		}
		asked, fix := conflictOf(a)
		if p, ok := e.peerOnly(macs); ok {
			out = append(out, fmt.Sprintf("the high-availability peer %v (%s) answers %s for %v, which this dispatcher serves as the active: clients may reach it past this dispatcher; %s",
				p, strings.Join(macs, ", "), asked, a, peerFix))
			continue
		}
		out = append(out, fmt.Sprintf("another host answers %s for %v (%s): clients may reach it past the dispatcher; %s",
			asked, a, strings.Join(macs, ", "), fix))
	}
	slices.Sort(out)
	return out
}
