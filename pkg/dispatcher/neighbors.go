package dispatcher

import (
	"log/slog"
	"net/netip"
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

// update follows a committed change, and forgets the hops nothing uses
// any more.
func (n *neighbors) update(old, next lb.Config, ch config.Change) {
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
	ex := next.Executor
	for _, a := range gone {
		if _, used := n.ports[a]; !used && a != ex.ClientGateway && a != ex.ClientGateway6 {
			delete(n.neigh, a)
			delete(n.errs, a)
		}
	}
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
		if nb.MAC == nil && had && old.MAC != nil && old.Ifindex == nb.Ifindex {
			nb.MAC = old.MAC // keep the last known MAC while it re-resolves
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
// an error.
func (n *neighbors) wait(nif Netif, log *slog.Logger, addrs []netip.Addr, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for len(addrs) > 0 {
		n.refresh(nif, log, addrs)
		var pending []netip.Addr
		for _, a := range addrs {
			if n.neigh[a].MAC == nil && n.errs[a] == nil {
				pending = append(pending, a)
			}
		}
		if len(pending) == 0 || time.Now().After(deadline) {
			return
		}
		addrs = pending
		time.Sleep(20 * time.Millisecond)
	}
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
	changed := e.net.refresh(e.opts.Netif, e.log, hops)
	if len(changed) == 0 {
		return
	}
	var ports []lb.ServiceKey
	seen := map[lb.ServiceKey]bool{}
	gateway := false
	for _, a := range changed {
		if a == cfg.Executor.ClientGateway || a == cfg.Executor.ClientGateway6 {
			gateway = true
		}
		for k := range e.net.ports[a] {
			if !seen[k] {
				seen[k] = true
				ports = append(ports, k)
			}
		}
	}
	var u lb.DataplaneUpdate
	if gateway {
		g := e.globals(cfg)
		u.Globals = &g
	}
	e.portsUpdate(&u, cfg, ports)
	if err := e.exec.dp.Update(u); err != nil {
		e.log.Error("applying refreshed neighbours", "err", err)
	}
	e.checkAlerts(cfg, ports)
}
