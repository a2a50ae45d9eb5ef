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
	// err is the last check's error, logged once.
	err string
}

// conflictJob is what one round of checks asks: from each NFA, who else
// answers for the addresses of its family.
type conflictJob []conflictAsk

// conflictAsk asks, from src, who else answers for addrs.
type conflictAsk struct {
	src   netip.Addr
	addrs []netip.Addr
}

// addrs are all the addresses the job asks about.
func (j conflictJob) addrs() []netip.Addr {
	var out []netip.Addr
	for _, a := range j {
		out = append(out, a.addrs...)
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
		job, err := call(ctx, e, func() (conflictJob, error) { return e.conflictJob(), nil })
		if err != nil {
			return
		}
		if len(job) == 0 {
			continue
		}
		found := map[netip.Addr][]string{}
		var errs []string
		for _, ask := range job {
			answers, err := e.opts.AddressAnswerers(ctx, ask.src, ask.addrs, conflictWait)
			if err != nil {
				errs = append(errs, err.Error())
			}
			for a, macs := range answers {
				for _, m := range macs {
					found[a] = append(found[a], m.String())
				}
			}
		}
		if e.do(ctx, func() { e.onConflicts(job.addrs(), found, strings.Join(errs, "; ")) }) != nil {
			return
		}
	}
}

// onConflicts records a round of checks of addrs, logging what changed.
func (e *Engine) onConflicts(addrs []netip.Addr, found map[netip.Addr][]string, errText string) {
	if errText != e.conflicts.err {
		if errText != "" {
			e.log.Warn("cannot ask who else answers ARP or neighbour solicitations for the addresses this dispatcher holds",
				"err", errText)
		}
		e.conflicts.err = errText
	}
	old := e.conflicts.found
	e.conflicts.found = map[netip.Addr][]string{}
	for _, a := range addrs {
		now := found[a]
		slices.Sort(now)
		if len(now) > 0 {
			e.conflicts.found[a] = now
		}
		asked, fix := conflictOf(a)
		switch was := old[a]; {
		case len(now) > 0 && !slices.Equal(now, was):
			e.log.Warn("another host answers "+asked+" for an address this dispatcher holds: clients may reach it past the dispatcher",
				"address", a, "macs", strings.Join(now, ","), "fix", fix)
		case len(now) == 0 && len(was) > 0:
			e.log.Info("no other host answers "+asked+" for the address any more", "address", a)
		}
	}
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

// conflictWarnings are the report's lines for the conflicts found.
func (e *Engine) conflictWarnings() []string {
	var out []string
	for a, macs := range e.conflicts.found {
		asked, fix := conflictOf(a)
		out = append(out, fmt.Sprintf("another host answers %s for %v (%s): clients may reach it past the dispatcher; %s",
			asked, a, strings.Join(macs, ", "), fix))
	}
	slices.Sort(out)
	return out
}
