package dispatcher

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
)

// A takeover's addresses go on the interface, and are announced, from a
// goroutine of their own the moment the function decides to serve a
// group: the engine's goroutine may be in the middle of a sweep, a
// replication scan, a reprobe or a report when the decision comes (tens of
// milliseconds each on two busy cores, up to 150 ms measured), and the
// clients wait for the addresses. It works from a plan the engine
// publishes with every change: for each group, the addresses
// configureAddresses would put on for it. When the engine gets to the
// decision it takes those addresses over (they are what it puts on), or
// takes them off if by then the group is no longer active. Releasing a
// group stays with the engine alone.

// takeoverPlan is what a group's takeover puts on the interface.
type takeoverPlan struct {
	ifname string
	addrs  [lb.NumHAGroups][]netip.Addr
}

// fastTakeover is the state the fast path shares with the engine.
type fastTakeover struct {
	plan atomic.Pointer[takeoverPlan]
	// mu is held by the fast path while it checks a group's state and
	// adds its addresses, and by the engine while it acts on the
	// function's states, so that an address the fast path adds is
	// always seen by the engine's next look.
	mu sync.Mutex
	// added are the addresses the fast path put on, by interface, that
	// the engine has not taken over yet.
	added map[netip.Addr]string
}

// haAddresses lists, per group, the addresses this dispatcher has on its
// interface while the group is active (configureAddresses, and the fast
// path's plan): its clusters marked configure and the NAT return
// addresses of its servers.
func (e *Engine) haAddresses(cfg lb.Config) [lb.NumHAGroups][]netip.Addr {
	var out [lb.NumHAGroups][]netip.Addr
	for i := range cfg.Clusters {
		if cl := &cfg.Clusters[i]; cl.Configure {
			g := cfg.HA.GroupOf(cl)
			out[g] = append(out[g], cl.Address)
		}
	}
	groups := returnGroups(cfg)
	for a := range e.host.returns {
		if g, ok := groups[a]; ok {
			out[g] = append(out[g], a)
		}
	}
	return out
}

// publishTakeoverPlan publishes the plan of cfg: none when high
// availability is off or the executor is not started.
func (e *Engine) publishTakeoverPlan(cfg lb.Config) {
	if !e.haOn(cfg) || !cfg.Executor.Started {
		e.ha.fast.plan.Store(nil)
		return
	}
	e.ha.fast.plan.Store(&takeoverPlan{ifname: cfg.Executor.Interface, addrs: e.haAddresses(cfg)})
}

// runFastTakeover puts on and announces the addresses of every group the
// function decides to serve, until ctx ends.
func (e *Engine) runFastTakeover(ctx context.Context, activated <-chan lb.HAGroup) {
	for {
		select {
		case <-ctx.Done():
			return
		case g := <-activated:
			e.fastTakeover(g)
		}
	}
}

// claimPairAddresses counts as the engine's, at start, the addresses of
// the groups the previous dlbd did not serve as active that the host has
// and the journal does not: a takeover's fast path puts them on before
// the engine journals anything, and a dlbd killed in between left them
// on. Under high availability the addresses are the pair's
// (configureAddresses): left on a standby, they would answer beside the
// active; counted, they come off with the executor's start.
func (e *Engine) claimPairAddresses(cfg lb.Config) {
	group := map[netip.Addr]lb.HAGroup{}
	var unrecorded []netip.Addr
	for g, addrs := range e.haAddresses(cfg) {
		if e.ha.applied[g] == lb.HAActive {
			continue
		}
		for _, a := range addrs {
			if _, ok := e.host.configured[a]; !ok {
				group[a] = lb.HAGroup(g)
				unrecorded = append(unrecorded, a)
			}
		}
	}
	if len(unrecorded) == 0 {
		return
	}
	held, err := e.opts.Netif.HeldAddresses(unrecorded)
	if err != nil {
		e.log.Warn("high availability: checking the host for addresses a takeover put on", "err", err)
		return
	}
	for _, a := range unrecorded {
		if held[a] {
			e.log.Warn("high availability: an address of a group not active here is on the host, recorded nowhere "+
				"(a dlbd stopped during a takeover?): taken off", "address", a, "group", group[a])
			e.host.configured[a] = cfg.Executor.Interface
		}
	}
}

// fastTakeover puts group g's planned addresses on the interface and
// announces them, if the function still has g active.
func (e *Engine) fastTakeover(g lb.HAGroup) {
	start := time.Now()
	p := e.ha.fast.plan.Load()
	if p == nil || int(g) >= len(p.addrs) || len(p.addrs[g]) == 0 {
		return
	}
	f := &e.ha.fast
	f.mu.Lock()
	if !e.haActive(g) {
		f.mu.Unlock()
		return
	}
	// Announced first: the executor forwards for the addresses whether
	// the host has them or not, and putting an address on waits for the
	// kernel's routing lock, which a fault's own link changes can hold
	// for tens of milliseconds.
	if an, ok := e.opts.Netif.(Announcer); ok {
		if err := an.Announce(p.ifname, p.addrs[g]); err != nil {
			e.log.Warn("high availability: announcing the addresses", "err", err)
		}
	}
	announced := time.Since(start)
	put, err := e.opts.Netif.AddAddresses(p.ifname, p.addrs[g])
	if err != nil {
		e.log.Warn("high availability: putting addresses on at once (the engine tries again)", "err", err)
	}
	on := len(put)
	for a, added := range put {
		if !added {
			continue // on already: not the fast path's to take off
		}
		if f.added == nil {
			f.added = map[netip.Addr]string{}
		}
		f.added[a] = p.ifname
	}
	f.mu.Unlock()
	e.log.Info("high availability: addresses announced and put on at once", "group", g, "addresses", len(p.addrs[g]),
		"announced_after", announced.Round(time.Microsecond), "took", time.Since(start).Round(time.Microsecond), "on", on)
}

// haActive reports whether the function has group g active now.
func (e *Engine) haActive(g lb.HAGroup) bool {
	for _, gs := range e.opts.HA.Status().Groups {
		if gs.Group == g {
			return gs.State == lb.HAActive
		}
	}
	return false
}

// settleFastTakeover, on the engine's goroutine with fast.mu held and the
// addresses configured, takes over what the fast path put on: an address
// the engine has on the same interface is the engine's now; any other
// comes off (its group was let go before the engine saw it active).
func (e *Engine) settleFastTakeover() {
	f := &e.ha.fast
	for a, ifname := range f.added {
		if e.host.configured[a] != ifname {
			if err := e.opts.Netif.DelAddress(ifname, a); err != nil {
				e.log.Error("high availability: taking off an address put on at once", "address", a, "err", err)
				continue
			}
		}
		delete(f.added, a)
	}
}
