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

// conflictWait is how long a check waits for ARP answers.
const conflictWait = 200 * time.Millisecond

// conflicts is what the last checks found: per address this dispatcher
// holds, the Ethernet addresses of the other hosts that answered ARP for
// it. A server that holds a cluster address on its loopback without
// arp_ignore=1 answers for it, and the routers may then send clients
// straight to it, past the dispatcher; so does another host configured
// with the address.
type conflicts struct {
	found map[netip.Addr][]string
	// err is the last check's error, logged once.
	err string
}

// conflictJob is what one round of checks asks: from src, who else
// answers for addrs.
type conflictJob struct {
	src   netip.Addr
	addrs []netip.Addr
}

// conflictJob lists the IPv4 addresses this dispatcher holds on its
// interface now (under high availability, those of its active groups).
func (e *Engine) conflictJob() conflictJob {
	cfg := e.ed.Config()
	job := conflictJob{src: cfg.Executor.NFA}
	if !job.src.IsValid() || e.exec.dp == nil || e.exec.attach.detached != "" {
		return conflictJob{}
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
	for a := range e.host.configured {
		if a.Unmap().Is4() && (active == nil || active[a]) {
			job.addrs = append(job.addrs, a)
		}
	}
	slices.SortFunc(job.addrs, netip.Addr.Compare)
	return job
}

// watchConflicts checks, every ConflictInterval, who else answers ARP for
// the addresses this dispatcher holds, off the management goroutine (each
// check waits), and hands the findings to it.
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
		if len(job.addrs) == 0 {
			continue
		}
		found := map[netip.Addr][]string{}
		errText := ""
		answers, err := e.opts.AddressAnswerers(ctx, job.src, job.addrs, conflictWait)
		if err != nil {
			errText = err.Error()
		}
		for a, macs := range answers {
			for _, m := range macs {
				found[a] = append(found[a], m.String())
			}
		}
		if e.do(ctx, func() { e.onConflicts(job.addrs, found, errText) }) != nil {
			return
		}
	}
}

// onConflicts records a round of checks of addrs, logging what changed.
func (e *Engine) onConflicts(addrs []netip.Addr, found map[netip.Addr][]string, errText string) {
	if errText != e.conflicts.err {
		if errText != "" {
			e.log.Warn("cannot ask who else answers ARP for the addresses this dispatcher holds", "err", errText)
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
		switch was := old[a]; {
		case len(now) > 0 && !slices.Equal(now, was):
			e.log.Warn("another host answers ARP for an address this dispatcher holds: clients may reach it past the dispatcher",
				"address", a, "macs", strings.Join(now, ","), "fix", conflictFix)
		case len(now) == 0 && len(was) > 0:
			e.log.Info("no other host answers ARP for the address any more", "address", a)
		}
	}
}

// conflictFix says what usually causes a conflict and mends it.
const conflictFix = "a server holding a cluster address on its loopback needs arp_ignore=1 and arp_announce=2 " +
	"(dlbctl backend setup; dlbctl server check finds it)"

// conflictWarnings are the report's lines for the conflicts found.
func (e *Engine) conflictWarnings() []string {
	var out []string
	for a, macs := range e.conflicts.found {
		out = append(out, fmt.Sprintf("another host answers ARP for %v (%s): clients may reach it past the dispatcher; %s",
			a, strings.Join(macs, ", "), conflictFix))
	}
	slices.Sort(out)
	return out
}
