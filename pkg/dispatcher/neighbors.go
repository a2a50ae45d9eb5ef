package dispatcher

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
)

// loopResolveWait is how long the management loop itself waits for the
// MACs of the next hops a change brings in: a host that answers does
// within a poll or two; one that does not (a server not booted yet) no
// longer holds every other caller for the whole ResolveWait. It waits
// only while no one else waits for the loop (othersWait): 100 changes
// each adding a host not up yet, at once, would take 10 s of it.
const loopResolveWait = 100 * time.Millisecond

// awaitHops waits, outside the management loop, until the next hops addrs
// that an accepted change brought in have a MAC (or an error), or until
// deadline: the ports behind each that resolves are written at once, so
// that a caller finds them usable when it returns, as if the change had
// waited for them. Hops the configuration no longer uses are skipped. It
// returns the hops still without a MAC at the end.
func (e *Engine) awaitHops(ctx context.Context, addrs []netip.Addr, deadline time.Time) []netip.Addr {
	for len(addrs) > 0 && time.Now().Before(deadline) {
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return addrs
		case <-t.C:
		}
		var err error
		addrs, err = call(ctx, e, func() ([]netip.Addr, error) {
			cfg := e.ed.Config()
			var used []netip.Addr
			for _, a := range addrs {
				if len(e.net.Users(a)) > 0 || a == cfg.Executor.ClientGateway || a == cfg.Executor.ClientGateway6 {
					used = append(used, a)
				}
			}
			e.applyHops(cfg, e.net.Refresh(e.opts.Netif, e.log, used))
			return e.net.Unresolved(used), nil
		})
		if err != nil {
			return addrs
		}
	}
	return addrs
}

// silentHop says what a next hop that a change brought in and that did not
// resolve within ResolveWait means, for the operator who made the change.
func silentHop(cfg lb.Config, a netip.Addr, wait time.Duration) string {
	question := "ARP"
	if a.Is6() {
		question = "neighbour solicitations"
	}
	role, what := hopLoss(cfg, a)
	return fmt.Sprintf("%s %s did not answer %s within %v: %s until it does (is it up, and on %s's segment?)",
		role, a, question, wait, what, cfg.Executor.Interface)
}

// hopLoss names what next hop a is in cfg (hopRole) and what is lost
// while it cannot be reached.
func hopLoss(cfg lb.Config, a netip.Addr) (role, what string) {
	switch role = hopRole(cfg, a); role {
	case "router":
		return role, "the servers behind it take no connections"
	case "clientgateway":
		return role, "the executor sends nothing through it"
	}
	return role, "it takes no connections"
}

// refreshNeighbors re-reads how every next hop is reached and updates the
// ports behind those that changed, and the client gateways.
func (e *Engine) refreshNeighbors() {
	if e.exec.dp == nil {
		return
	}
	cfg := e.ed.Config()
	hops := e.net.ServerHops()
	for _, a := range []netip.Addr{cfg.Executor.ClientGateway, cfg.Executor.ClientGateway6} {
		if a.IsValid() {
			hops = append(hops, a)
		}
	}
	e.applyHops(cfg, e.net.Refresh(e.opts.Netif, e.log, hops))
}

// forgetNeighbors removes the kernel's neighbour entries dlbd made for
// addresses it no longer uses.
func (e *Engine) forgetNeighbors(addrs []netip.Addr) {
	if len(addrs) == 0 {
		return
	}
	if err := e.opts.Netif.ForgetNeighbors(addrs); err != nil {
		e.log.Warn("removing neighbour entries dlbd no longer uses", "err", err)
	}
}

// maxHopProblems is how many next hops hopProblems names one by one.
const maxHopProblems = 5

// hopProblems names the next hops of cfg whose last lookup failed (no
// route, reached through a gateway, an address of this host). A change
// that brings such a hop in while the executor runs is refused; one that
// starts the executor is not, nor a restart, nor the host's routes
// changing under dlbd: the report says so. A hop never resolved takes
// nothing; one whose route went is still sent to at its last known MAC
// (a fault of this host's must not stop the service). hops are cfg's next
// hops (nil: those of the servers the table counts, and the client
// gateways). Beyond maxHopProblems hops the rest are counted.
func (e *Engine) hopProblems(cfg lb.Config, hops []netip.Addr) []string {
	if e.exec.dp == nil {
		return nil
	}
	if hops == nil {
		hops = append(e.net.ServerHops(), cfg.Executor.ClientGateway, cfg.Executor.ClientGateway6)
	}
	var failed []netip.Addr
	for _, a := range hops {
		if a.IsValid() && e.net.Err(a) != nil {
			failed = append(failed, a)
		}
	}
	slices.SortFunc(failed, netip.Addr.Compare)
	failed = slices.Compact(failed)
	var out []string
	for i, a := range failed {
		if i == maxHopProblems {
			out = append(out, fmt.Sprintf("%d more next hops cannot be looked up (dlbd's log says why)", len(failed)-i))
			break
		}
		role, what := hopLoss(cfg, a)
		if mac := e.net.MAC(a); mac != nil {
			what = "the executor goes on sending to its last known MAC, " + mac.String()
		}
		out = append(out, fmt.Sprintf("%s %s cannot be looked up (%v): %s", role, a, e.net.Err(a), what))
	}
	return out
}
