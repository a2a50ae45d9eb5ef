// Package nexthop keeps how the executor reaches each next hop of a
// configuration (a server, the router in front of NAT servers, a client
// gateway): the neighbour's MAC, the interface it is reached through and
// that interface's MAC, and which balanced ports' servers go through each
// hop, so that a MAC that changes rewrites exactly the ports behind it.
//
// A Table is not safe for concurrent use: the dispatcher's engine owns it
// and uses it from its management loop only.
package nexthop

import (
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
)

// Resolver reads from the kernel how addresses are reached: each one's
// neighbour (MAC not yet known: nil), or why it cannot be reached.
type Resolver interface {
	Neighbors(addrs []netip.Addr) (map[netip.Addr]lb.Neighbor, map[netip.Addr]error)
}

// Table is how the executor reaches each next hop, and which ports use it.
type Table struct {
	neigh map[netip.Addr]lb.Neighbor
	errs  map[netip.Addr]error
	// ports counts, per next hop, the servers of each port that use it.
	ports map[netip.Addr]map[lb.ServiceKey]int
	// sorted lists the next hops in a stable order (Order), rebuilt
	// when stale.
	sorted []netip.Addr
	stale  bool
	// asked lists the addresses the current change asked the kernel to
	// resolve, so that a refused change can take them back.
	asked []netip.Addr
}

// New returns an empty table.
func New() *Table {
	return &Table{neigh: map[netip.Addr]lb.Neighbor{}, errs: map[netip.Addr]error{},
		ports: map[netip.Addr]map[lb.ServiceKey]int{}}
}

// Index counts the next hops of cfg's servers, forgetting any earlier
// count.
func (t *Table) Index(cfg lb.Config) {
	t.ports = map[netip.Addr]map[lb.ServiceKey]int{}
	for _, cl := range cfg.Clusters {
		for _, p := range cl.Ports {
			k := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			for _, s := range p.Servers {
				t.use(s.NextHop(), k, 1)
			}
		}
	}
}

func (t *Table) use(hop netip.Addr, k lb.ServiceKey, d int) {
	t.stale = true
	m := t.ports[hop]
	if m == nil {
		m = map[lb.ServiceKey]int{}
		t.ports[hop] = m
	}
	m[k] += d
	if m[k] <= 0 {
		delete(m, k)
	}
	if len(m) == 0 {
		delete(t.ports, hop)
	}
}

// Update follows a committed change from old to next, forgets the hops
// nothing uses any more and returns them.
func (t *Table) Update(old, next lb.Config, ch config.Change) []netip.Addr {
	var gone []netip.Addr
	for k, kind := range ch.Servers {
		if kind != config.Added {
			if s := old.Server(k); s != nil {
				t.use(s.NextHop(), k.Service, -1)
				gone = append(gone, s.NextHop())
			}
		}
		if kind != config.Removed {
			if s := next.Server(k); s != nil {
				t.use(s.NextHop(), k.Service, 1)
			}
		}
	}
	gone = append(gone, old.Executor.ClientGateway, old.Executor.ClientGateway6)
	t.stale = true
	return t.Forget(next, gone)
}

// Forget forgets the hops of addrs that cfg does not use, and returns
// them.
func (t *Table) Forget(cfg lb.Config, addrs []netip.Addr) []netip.Addr {
	var out []netip.Addr
	seen := map[netip.Addr]bool{}
	ex := cfg.Executor
	for _, a := range addrs {
		if !a.IsValid() || seen[a] {
			continue
		}
		seen[a] = true
		if _, used := t.ports[a]; !used && a != ex.ClientGateway && a != ex.ClientGateway6 {
			delete(t.neigh, a)
			delete(t.errs, a)
			out = append(out, a)
		}
	}
	return out
}

// Order returns cfg's next hops sorted, the same slice until the hops
// change (Index, Update): a stable order for a round-robin through them.
// The caller must not change it.
func (t *Table) Order(cfg lb.Config) []netip.Addr {
	if t.stale || t.sorted == nil {
		t.sorted = AllHops(cfg)
		slices.SortFunc(t.sorted, netip.Addr.Compare)
		t.stale = false
	}
	return t.sorted
}

// Event says what a neighbour event means for a next hop.
type Event uint8

const (
	// Same: nothing to do.
	Same Event = iota
	// Changed: its MAC changed; rewrite the ports behind it.
	Changed
	// Refresh: look it up again (its interface may have changed).
	Refresh
)

// FromEvent applies a neighbour event to the next hop it names. A MAC
// that stopped being usable is ignored: the last known one is kept while
// the kernel resolves the neighbour again (it may be a reprobe).
func (t *Table) FromEvent(ev lb.NetEvent, log *slog.Logger) Event {
	if ev.MAC == nil {
		return Same
	}
	nb, had := t.neigh[ev.Addr]
	if !had || nb.Ifindex != ev.Ifindex {
		return Refresh
	}
	if nb.MAC.String() == ev.MAC.String() {
		return Same
	}
	if nb.MAC == nil {
		log.Info("next hop resolved", "address", ev.Addr, "mac", ev.MAC.String(), "ifindex", ev.Ifindex)
	} else {
		log.Info("next hop's MAC changed", "address", ev.Addr, "mac", ev.MAC.String(), "was", nb.MAC.String(), "ifindex", ev.Ifindex)
	}
	nb.MAC = slices.Clone(ev.MAC)
	t.neigh[ev.Addr] = nb
	delete(t.errs, ev.Addr)
	return Changed
}

// AllHops lists every next hop of cfg: the servers' and the client
// gateways.
func AllHops(cfg lb.Config) []netip.Addr {
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

// Moved points the next hops reached through the interface of index
// old, which is gone, at link, created in its place under the same name.
// The servers' MACs do not change with it; link's own MAC may. The
// routing table corrects the guess at the next refresh that finds a
// route (the new interface may not have its address yet).
func (t *Table) Moved(old int, link lb.Link) {
	if old == 0 || old == link.Index {
		return
	}
	for a, nb := range t.neigh {
		if nb.Ifindex == old {
			nb.Ifindex, nb.IfMAC = link.Index, slices.Clone(link.MAC)
			t.neigh[a] = nb
		}
	}
}

// Hop returns how the executor reaches a next hop: its MAC and interface,
// or the zero value (not configured, or not resolved yet).
func (t *Table) Hop(a netip.Addr) lb.DataplaneNextHop {
	if !a.IsValid() {
		return lb.DataplaneNextHop{}
	}
	nb := t.neigh[a]
	if nb.MAC == nil {
		return lb.DataplaneNextHop{}
	}
	return lb.DataplaneNextHop{MAC: nb.MAC, SrcMAC: nb.IfMAC, Ifindex: nb.Ifindex}
}

// Neighbor returns what the table knows of a: its neighbour, and whether
// the table has an entry for it at all.
func (t *Table) Neighbor(a netip.Addr) (lb.Neighbor, bool) {
	nb, ok := t.neigh[a]
	return nb, ok
}

// MAC returns a's MAC, or nil while it is not known.
func (t *Table) MAC(a netip.Addr) net.HardwareAddr {
	return t.neigh[a].MAC
}

// Err returns why a could not be reached at its last lookup, or nil.
func (t *Table) Err(a netip.Addr) error {
	return t.errs[a]
}

// Users returns the ports whose servers go through a, each with its
// count of such servers (nil: none). The caller must not change it.
func (t *Table) Users(a netip.Addr) map[lb.ServiceKey]int {
	return t.ports[a]
}

// ServerHops lists the next hops that servers use (not the client
// gateways), in no particular order.
func (t *Table) ServerHops() []netip.Addr {
	out := make([]netip.Addr, 0, len(t.ports))
	for a := range t.ports {
		out = append(out, a)
	}
	return out
}

// Refresh re-reads how addrs are reached and returns those whose MAC,
// interface or reachability changed.
func (t *Table) Refresh(r Resolver, log *slog.Logger, addrs []netip.Addr) []netip.Addr {
	if len(addrs) == 0 {
		return nil
	}
	got, errs := r.Neighbors(addrs)
	var changed []netip.Addr
	for _, a := range addrs {
		old, had := t.neigh[a]
		nb, ok := got[a]
		if !ok {
			if err := errs[a]; err != nil {
				if prev := t.errs[a]; prev == nil || prev.Error() != err.Error() {
					log.Warn("next hop unreachable", "address", a, "err", err)
				}
				t.errs[a] = err
			}
			continue
		}
		delete(t.errs, a)
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
			t.neigh[a] = nb
			changed = append(changed, a)
		} else if old.Src != nb.Src {
			t.neigh[a] = nb // the host's source: nothing to write
		}
	}
	return changed
}

// Wait resolves addrs, polling for at most limit until each has a MAC or
// an error, or until stop (nil: never) reports true after a poll, and
// returns those that have neither yet. The addresses count as asked
// (TakeAsked).
func (t *Table) Wait(r Resolver, log *slog.Logger, addrs []netip.Addr, limit time.Duration, stop func() bool) []netip.Addr {
	t.asked = append(t.asked, addrs...)
	deadline := time.Now().Add(limit)
	for len(addrs) > 0 {
		t.Refresh(r, log, addrs)
		addrs = t.Unresolved(addrs)
		if len(addrs) == 0 || time.Now().After(deadline) || (stop != nil && stop()) {
			return addrs
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// Unresolved returns the addresses of addrs that have neither a MAC nor
// an error yet.
func (t *Table) Unresolved(addrs []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if t.neigh[a].MAC == nil && t.errs[a] == nil {
			out = append(out, a)
		}
	}
	return out
}

// TakeAsked returns the addresses Wait asked the kernel to resolve since
// the last call, and starts the list again.
func (t *Table) TakeAsked() []netip.Addr {
	asked := t.asked
	t.asked = nil
	return asked
}

// ClearAsked starts the list of asked addresses again (TakeAsked).
func (t *Table) ClearAsked() {
	t.asked = nil
}

// Drop forgets what the table knows of addrs (their MACs and errors),
// whether or not ports use them.
func (t *Table) Drop(addrs ...netip.Addr) {
	for _, a := range addrs {
		delete(t.neigh, a)
		delete(t.errs, a)
	}
}

// Clear forgets every hop's MAC and error (the executor stopped); the
// count of ports behind each hop stays.
func (t *Table) Clear() {
	t.neigh, t.errs = map[netip.Addr]lb.Neighbor{}, map[netip.Addr]error{}
}
