package dispatcher

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
)

// neighbors is how the executor reaches each next hop (a server, its
// router, a client gateway), and which ports' servers go through which
// hop, so that a MAC that changes updates exactly the ports behind it.
type neighbors struct {
	neigh map[netip.Addr]lb.Neighbor
	errs  map[netip.Addr]error
	// ports counts, per next hop, the servers of each port that use it.
	ports map[netip.Addr]map[lb.ServiceKey]int
	// sorted lists the next hops in a stable order for reprobeRound,
	// rebuilt when stale; cursor is where the next round starts.
	sorted []netip.Addr
	stale  bool
	cursor int
	// asked lists the addresses the current change asked the kernel to
	// resolve, so that a refused change can take them back.
	asked []netip.Addr
}

func newNeighbors() *neighbors {
	return &neighbors{neigh: map[netip.Addr]lb.Neighbor{}, errs: map[netip.Addr]error{},
		ports: map[netip.Addr]map[lb.ServiceKey]int{}}
}

// index counts the next hops of cfg's servers.
func (n *neighbors) index(cfg lb.Config) {
	n.ports = map[netip.Addr]map[lb.ServiceKey]int{}
	for _, cl := range cfg.Clusters {
		for _, p := range cl.Ports {
			k := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			for _, s := range p.Servers {
				n.use(s.NextHop(), k, 1)
			}
		}
	}
}

func (n *neighbors) use(hop netip.Addr, k lb.ServiceKey, d int) {
	n.stale = true
	m := n.ports[hop]
	if m == nil {
		m = map[lb.ServiceKey]int{}
		n.ports[hop] = m
	}
	m[k] += d
	if m[k] <= 0 {
		delete(m, k)
	}
	if len(m) == 0 {
		delete(n.ports, hop)
	}
}

// update follows a committed change, forgets the hops nothing uses any
// more and returns them.
func (n *neighbors) update(old, next lb.Config, ch config.Change) []netip.Addr {
	var gone []netip.Addr
	for k, kind := range ch.Servers {
		if kind != config.Added {
			if s, ok := serverOf(old, k); ok {
				n.use(s.NextHop(), k.Service, -1)
				gone = append(gone, s.NextHop())
			}
		}
		if kind != config.Removed {
			if s, ok := serverOf(next, k); ok {
				n.use(s.NextHop(), k.Service, 1)
			}
		}
	}
	gone = append(gone, old.Executor.ClientGateway, old.Executor.ClientGateway6)
	n.stale = true
	return n.forget(next, gone)
}

// forget forgets the hops of addrs that cfg does not use, and returns
// them.
func (n *neighbors) forget(cfg lb.Config, addrs []netip.Addr) []netip.Addr {
	var out []netip.Addr
	seen := map[netip.Addr]bool{}
	ex := cfg.Executor
	for _, a := range addrs {
		if !a.IsValid() || seen[a] {
			continue
		}
		seen[a] = true
		if _, used := n.ports[a]; !used && a != ex.ClientGateway && a != ex.ClientGateway6 {
			delete(n.neigh, a)
			delete(n.errs, a)
			out = append(out, a)
		}
	}
	return out
}

// order returns cfg's next hops sorted (cached until the hops change).
func (n *neighbors) order(cfg lb.Config) []netip.Addr {
	if n.stale || n.sorted == nil {
		n.sorted = n.allHops(cfg)
		slices.SortFunc(n.sorted, netip.Addr.Compare)
		n.stale = false
	}
	return n.sorted
}

// hopEvent says what a neighbour event means for a next hop.
type hopEvent uint8

const (
	hopSame    hopEvent = iota // nothing to do
	hopChanged                 // its MAC changed: rewrite the ports behind it
	hopRefresh                 // look it up again (its interface may have changed)
)

// fromEvent applies a neighbour event to the next hop it names. A MAC
// that stopped being usable is ignored: the last known one is kept while
// the kernel resolves the neighbour again (it may be a reprobe).
func (n *neighbors) fromEvent(ev lb.NetEvent, log *slog.Logger) hopEvent {
	if ev.MAC == nil {
		return hopSame
	}
	nb, had := n.neigh[ev.Addr]
	if !had || nb.Ifindex != ev.Ifindex {
		return hopRefresh
	}
	if nb.MAC.String() == ev.MAC.String() {
		return hopSame
	}
	if nb.MAC == nil {
		log.Info("next hop resolved", "address", ev.Addr, "mac", ev.MAC.String(), "ifindex", ev.Ifindex)
	} else {
		log.Info("next hop's MAC changed", "address", ev.Addr, "mac", ev.MAC.String(), "was", nb.MAC.String(), "ifindex", ev.Ifindex)
	}
	nb.MAC = slices.Clone(ev.MAC)
	n.neigh[ev.Addr] = nb
	delete(n.errs, ev.Addr)
	return hopChanged
}

// allHops lists every next hop of cfg: the servers' and the client
// gateways.
func (n *neighbors) allHops(cfg lb.Config) []netip.Addr {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	add := func(a netip.Addr) {
		if a.IsValid() && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, cl := range cfg.Clusters {
		for _, p := range cl.Ports {
			for _, s := range p.Servers {
				add(s.NextHop())
			}
		}
	}
	add(cfg.Executor.ClientGateway)
	add(cfg.Executor.ClientGateway6)
	return out
}

// moved points the next hops reached through the interface of index
// old, which is gone, at link, created in its place under the same name.
// The servers' MACs do not change with it; link's own MAC may. The
// routing table corrects the guess at the next refresh that finds a
// route (the new interface may not have its address yet).
func (n *neighbors) moved(old int, link lb.Link) {
	if old == 0 || old == link.Index {
		return
	}
	for a, nb := range n.neigh {
		if nb.Ifindex == old {
			nb.Ifindex, nb.IfMAC = link.Index, slices.Clone(link.MAC)
			n.neigh[a] = nb
		}
	}
}

// hop returns how the executor reaches a next hop: its MAC and interface,
// or the zero value (not configured, or not resolved yet).
func (n *neighbors) hop(a netip.Addr) lb.DataplaneNextHop {
	if !a.IsValid() {
		return lb.DataplaneNextHop{}
	}
	nb := n.neigh[a]
	if nb.MAC == nil {
		return lb.DataplaneNextHop{}
	}
	return lb.DataplaneNextHop{MAC: nb.MAC, SrcMAC: nb.IfMAC, Ifindex: nb.Ifindex}
}

// refresh re-reads how addrs are reached and returns those whose MAC,
// interface or reachability changed.
func (n *neighbors) refresh(nif Netif, log *slog.Logger, addrs []netip.Addr) []netip.Addr {
	if len(addrs) == 0 {
		return nil
	}
	got, errs := nif.Neighbors(addrs)
	var changed []netip.Addr
	for _, a := range addrs {
		old, had := n.neigh[a]
		nb, ok := got[a]
		if !ok {
			if err := errs[a]; err != nil {
				if prev := n.errs[a]; prev == nil || prev.Error() != err.Error() {
					log.Warn("next hop unreachable", "address", a, "err", err)
				}
				n.errs[a] = err
			}
			continue
		}
		delete(n.errs, a)
		if nb.MAC == nil && had && old.MAC != nil {
			// Keep the last known MAC while it re-resolves, even through
			// another interface: the executor's own interface created
			// again (a new index) does not change the servers' MACs.
			nb.MAC = old.MAC
		}
		if !had || old.Ifindex != nb.Ifindex || old.MAC.String() != nb.MAC.String() || old.IfMAC.String() != nb.IfMAC.String() {
			if nb.MAC != nil && (!had || old.MAC.String() != nb.MAC.String()) {
				log.Info("next hop resolved", "address", a, "mac", nb.MAC.String(), "ifindex", nb.Ifindex)
			}
			n.neigh[a] = nb
			changed = append(changed, a)
		}
	}
	return changed
}

// wait resolves addrs, polling for at most limit until each has a MAC or
// an error, and returns those that have neither yet.
func (n *neighbors) wait(nif Netif, log *slog.Logger, addrs []netip.Addr, limit time.Duration) []netip.Addr {
	n.asked = append(n.asked, addrs...)
	deadline := time.Now().Add(limit)
	for len(addrs) > 0 {
		n.refresh(nif, log, addrs)
		addrs = n.unresolved(addrs)
		if len(addrs) == 0 || time.Now().After(deadline) {
			return addrs
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// unresolved returns the addresses of addrs that have neither a MAC nor
// an error yet.
func (n *neighbors) unresolved(addrs []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if n.neigh[a].MAC == nil && n.errs[a] == nil {
			out = append(out, a)
		}
	}
	return out
}

// loopResolveWait is how long the management loop itself waits for the
// MACs of the next hops a change brings in: a host that answers does
// within a poll or two; one that does not (a server not booted yet) no
// longer holds every other caller for the whole ResolveWait.
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
				if len(e.net.ports[a]) > 0 || a == cfg.Executor.ClientGateway || a == cfg.Executor.ClientGateway6 {
					used = append(used, a)
				}
			}
			e.applyHops(cfg, e.net.refresh(e.opts.Netif, e.log, used))
			return e.net.unresolved(used), nil
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
	role, what := hopRole(cfg, a), "it takes no connections"
	switch role {
	case "router":
		what = "the servers behind it take no connections"
	case "clientgateway":
		what = "the executor sends nothing through it"
	}
	return fmt.Sprintf("%s %s did not answer %s within %v: %s until it does (is it up, and on %s's segment?)",
		role, a, question, wait, what, cfg.Executor.Interface)
}

// refreshNeighbors re-reads how every next hop is reached and updates the
// ports behind those that changed, and the client gateways.
func (e *Engine) refreshNeighbors() {
	if e.exec.dp == nil {
		return
	}
	cfg := e.ed.Config()
	hops := make([]netip.Addr, 0, len(e.net.ports)+2)
	for a := range e.net.ports {
		hops = append(hops, a)
	}
	for _, a := range []netip.Addr{cfg.Executor.ClientGateway, cfg.Executor.ClientGateway6} {
		if a.IsValid() {
			hops = append(hops, a)
		}
	}
	e.applyHops(cfg, e.net.refresh(e.opts.Netif, e.log, hops))
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
