package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/dlbproject/dlb/pkg/dispatcher/events"
	"github.com/dlbproject/dlb/pkg/dispatcher/nexthop"
	"github.com/dlbproject/dlb/pkg/lb"
)

// The host's networking changes under dlbd: interfaces are deleted and
// created again (a driver reload, a hot-plugged NIC, a veth recreated),
// set down and up (which flushes their IPv6 addresses), addresses are
// removed, neighbours change their MACs. The engine follows it through
// Netif.Watch, not by polling:
//
//   - the executor's interface deleted: the executor is detached (it says
//     so in its report, and the event executorDetached runs); an interface
//     of that name created: it is attached to it, keeping its maps and
//     so its connections (executorAttached);
//   - the executor's interface renamed: the executor stays on it, and the
//     configuration follows the name (followRename);
//   - an address dlbd configured removed, or its interface set up again:
//     it is put back;
//   - a next hop's MAC changed: the ports behind it are rewritten at once;
//   - any neighbour's MAC changed or went: the NAT connections whose
//     replies go to its old MAC (a hop from the routing table) look their
//     hop up again (movedHops);
//   - a route changed (a client's router replaced by another, a routing
//     daemon's update): every NAT connection whose replies take their hop
//     from the routing table looks it up again, once (routeMoves).
//
// A MAC that changes without the kernel hearing of it (a host that does
// not announce its new MAC) is found by verifying every next hop's MAC by
// broadcast now and then (reprobeRound): the configured ones, and the
// neighbours NAT replies go to (natHopProbes).

// maxNetBurst bounds the events handled together.
const maxNetBurst = 1024

// attachState is the executor's attachment as the engine follows it.
type attachState struct {
	// ifindex is the interface the engine attached the executor to.
	ifindex int
	// detached says why the executor is detached (its interface is
	// gone), "" when it is not; since is when it was detached.
	detached string
	since    time.Time
	// dropped counts the pins of severed links already logged.
	dropped int
	// renameErr is why following a renamed interface was refused, as
	// last logged.
	renameErr string
}

// onNetEvent handles a change of the host's networking, and the others
// already waiting, together.
func (e *Engine) onNetEvent(first lb.NetEvent) {
	evs := []lb.NetEvent{first}
drain:
	for len(evs) < maxNetBurst {
		select {
		case ev, ok := <-e.netEvents:
			if !ok {
				e.netEvents = nil
				break drain
			}
			evs = append(evs, ev)
		default:
			break drain
		}
	}
	cfg := e.ed.Config()
	ex := cfg.Executor
	var attachment, resync, rehop, routes, announce bool
	// NAT replies routed by the executor cache hops that a neighbour's
	// MAC change makes stale.
	routedNAT := e.exec.dp != nil && (len(routedNATPorts(cfg, false)) > 0 || len(routedNATPorts(cfg, true)) > 0)
	restore := map[netip.Addr]string{} // address -> why
	var refresh []netip.Addr
	changed := map[netip.Addr]bool{}
	for _, ev := range evs {
		e.log.Debug("network change", "event", ev.String())
		switch ev.Kind {
		case lb.NetLinkAdded, lb.NetLinkRemoved:
			if ev.Ifname == ex.Interface || (ev.Ifindex != 0 && ev.Ifindex == e.exec.attach.ifindex) {
				attachment = true
			}
		case lb.NetLinkUp:
			if ev.Ifname == ex.Interface {
				// Removed addresses were put back when they went;
				// make sure of all of them, quietly.
				for a, ifname := range e.host.configured {
					if ifname == ev.Ifname {
						if _, ok := restore[a]; !ok {
							restore[a] = ""
						}
					}
				}
				rehop = true
				// Down, its announcements were lost (and it may be
				// plugged into another switch port now).
				announce = true
			}
		case lb.NetAddressAdded:
			// A subnet on the executor's interface (not a host address
			// like those dlbd adds) brings routes: next hops may be
			// reached through it now.
			if ev.Ifname == ex.Interface && ev.Prefix.Bits() < ev.Prefix.Addr().BitLen() {
				rehop = true
			}
		case lb.NetAddressRemoved:
			a := ev.Prefix.Addr()
			if ifname, ok := e.host.configured[a]; ok && ifname == ev.Ifname && ev.Prefix.Bits() == a.BitLen() {
				restore[a] = "it was removed"
			}
		case lb.NetNeighborChanged:
			e.exec.moved.back(ev.Ifindex, ev.MAC)
			if ev.OldMAC != nil && routedNAT {
				e.exec.moved.add(ev.Ifindex, ev.OldMAC, time.Now())
			}
			if e.exec.dp == nil || !e.followsHop(cfg, ev.Addr) {
				continue
			}
			switch e.net.FromEvent(ev, e.log) {
			case nexthop.Changed:
				changed[ev.Addr] = true
			case nexthop.Refresh:
				refresh = append(refresh, ev.Addr)
			}
		case lb.NetRouteChanged:
			routes = true
		case lb.NetLinkMACChanged:
			// The executor's interface has another MAC (set by hand, a
			// bond's failover): the segment still sends the addresses
			// it holds to the old one, which a NIC drops, until its
			// neighbour entries expire (a router's may live for hours);
			// the frames it sends leave from the old one.
			if e.exec.dp != nil && e.exec.attach.detached == "" && ev.Ifindex == e.exec.attach.ifindex {
				announce, rehop, routes = true, true, true
				e.log.Warn("the executor's interface changed its MAC: the addresses dlbd put on it are announced with the new one",
					"interface", ev.Ifname, "mac", ev.MAC.String(), "was", ev.OldMAC.String())
			}
		case lb.NetResync:
			resync = true
		}
	}
	if resync {
		e.log.Warn("the network watch lost events and read the host's state again")
		attachment = true
		for a, ifname := range e.host.configured {
			if _, ok := restore[a]; !ok && ifname == ex.Interface {
				restore[a] = ""
			}
		}
		rehop = true
		routes = true
	}
	if rehop {
		refresh = append(refresh, nexthop.AllHops(cfg)...)
	}
	if attachment {
		e.checkAttachment(cfg)
	}
	if len(restore) > 0 && e.exec.attach.detached == "" {
		e.restoreAddresses(restore)
	}
	if len(refresh) > 0 && e.exec.dp != nil {
		for _, a := range e.net.Refresh(e.opts.Netif, e.log, refresh) {
			changed[a] = true
		}
	}
	if len(changed) > 0 {
		e.applyHops(cfg, slices.Collect(maps.Keys(changed)))
	}
	e.forgetMovedHops(false)
	if routes && routedNAT {
		e.routesMoved(time.Now())
	}
	if announce && e.exec.dp != nil && e.exec.attach.detached == "" {
		e.announceMoved(ex.Interface, e.exec.attach.ifindex, 0)
	}
}

// followsHop reports whether a is a next hop of cfg: a server's, a
// router or a client gateway.
func (e *Engine) followsHop(cfg lb.Config, a netip.Addr) bool {
	if e.net.Users(a) != nil {
		return true
	}
	return a.IsValid() && (a == cfg.Executor.ClientGateway || a == cfg.Executor.ClientGateway6)
}

// checkAttachment makes the executor's attachment follow its interface:
// detached when the interface is gone, attached again when an interface
// of its name exists, brought up when it could not be before.
func (e *Engine) checkAttachment(cfg lb.Config) {
	ex := cfg.Executor
	if !ex.Started {
		return
	}
	link, lerr := e.opts.Netif.LinkByName(ex.Interface)
	if e.exec.dp == nil {
		// It could not be brought up. Its interface is missing: it is
		// brought up when the interface appears. (Other reasons need
		// the operator.)
		if lerr != nil {
			e.detach(fmt.Sprintf("interface %s does not exist", ex.Interface))
			return
		}
		if e.exec.attach.detached == "" {
			return
		}
		start := time.Now()
		e.log.Debug("bringing up the executor: its interface appeared", "interface", ex.Interface, "ifindex", link.Index)
		defer func() {
			e.log.Debug("bringing up the executor", "took", time.Since(start).Round(time.Millisecond).String())
		}()
		if err := e.startExecutor(cfg); err != nil {
			e.exec.err = err
			e.log.Error("bringing up the executor on its interface", "interface", ex.Interface, "err", err)
			return
		}
		e.persistHost()
		e.attached(cfg, link, "executor started: its interface appeared")
		return
	}
	att, attached := e.exec.dp.Attached()
	switch {
	case attached && lerr == nil && att.Ifindex == link.Index:
		if e.exec.attach.detached != "" {
			e.attached(cfg, link, "executor attached")
		}
	case attached:
		// Still attached, to an interface that no longer has the name
		// (renamed): it keeps forwarding there, and the configuration
		// follows the new name.
		e.followRename(cfg, att)
	case lerr != nil:
		e.detach(fmt.Sprintf("interface %s was deleted", ex.Interface))
	default:
		e.reattach(cfg, link)
	}
}

// followRename makes the configuration follow the executor's interface,
// renamed: the executor goes on forwarding there (its XDP link is the
// interface's, whatever its name), and what finds the interface by name
// (the addresses dlbd configures, the guard, the checks and announcements
// of high availability) must find it under the new one. The change is
// journaled like an operator's. One refused is logged when it first
// happens and tried again at the next tick.
func (e *Engine) followRename(cfg lb.Config, att lb.Attachment) {
	link, ok := e.executorInterface(att)
	if !ok || link.Name == cfg.Executor.Interface {
		return // gone meanwhile, or named so again: the next event decides
	}
	ifindex := link.Index
	from := cfg.Executor.Interface
	next := cfg
	next.Executor.Interface = link.Name
	edit, err := e.ed.PrepareConfig(next)
	if err == nil {
		err = e.change(edit, -1, false)
	}
	if err != nil {
		if msg := err.Error(); msg != e.exec.attach.renameErr {
			e.exec.attach.renameErr = msg
			e.log.Error("following the executor's renamed interface", "from", from, "to", link.Name, "ifindex", ifindex, "err", err)
		}
		return
	}
	e.exec.attach.renameErr = ""
	e.log.Warn("the executor's interface was renamed: it forwards there still, and the configuration names it so "+
		"(a configuration file naming the old name needs the new one)", "from", from, "to", link.Name, "ifindex", ifindex)
}

// pinnedRenamed reports whether the interface cfg's executor is started
// on is missing while the pinned executor is attached to an interface of
// another name (renamed while no dlbd ran), and returns that interface.
func (e *Engine) pinnedRenamed(cfg lb.Config) (lb.Link, bool) {
	if e.opts.PinnedAttachment == nil {
		return lb.Link{}, false
	}
	if _, err := e.opts.Netif.LinkByName(cfg.Executor.Interface); err == nil {
		return lb.Link{}, false
	}
	att, attached, err := e.opts.PinnedAttachment()
	if err != nil || !attached {
		return lb.Link{}, false
	}
	link, ok := e.executorInterface(att)
	if !ok || link.Name == cfg.Executor.Interface {
		return lb.Link{}, false
	}
	return link, true
}

// executorInterface returns the interface of this network namespace the
// executor's attachment att is on: the one with its index that runs its
// program. (An interface moved to another namespace keeps its index
// there, and another one here may get it.)
func (e *Engine) executorInterface(att lb.Attachment) (lb.Link, bool) {
	link, err := e.opts.Netif.LinkByIndex(att.Ifindex)
	if err != nil || !link.XDP.Attached || (link.XDP.ID != 0 && link.XDP.ID != att.ProgramID) {
		return lb.Link{}, false
	}
	return link, true
}

// detach records that the executor lost its interface.
func (e *Engine) detach(why string) {
	if e.exec.attach.detached != "" {
		return
	}
	e.exec.attach.detached, e.exec.attach.since = why, time.Now()
	cfg := e.ed.Config()
	e.log.Warn("executor detached; it attaches again when an interface of that name appears, or to another one, its tables kept, "+
		"with dlbctl executor start --interface NAME",
		"interface", cfg.Executor.Interface, "reason", why)
	e.events.Emit(events.ExecutorDetached, map[string]string{
		"DLB_INTERFACE": cfg.Executor.Interface, "DLB_REASON": why,
	})
}

// reattach attaches the executor to an interface of its name that
// appeared, keeping its maps (and connections): the next hops are
// reached through the new interface, the addresses dlbd configured are
// put on it again.
//
// The maps are rewritten before the executor is attached: the first
// frame it sees on the new interface must not be sent to the old one's
// index (a redirect to an interface that is gone loses the frame). So
// the next hops reached through the old interface move to the new one
// at once (their MACs stay; the routing table, which may not know the
// new interface yet, corrects them when it does), and the NAT entries
// forget the client hops they cached through the old one.
func (e *Engine) reattach(cfg lb.Config, link lb.Link) {
	ex := cfg.Executor
	// The same interface: the executor's link was detached from it by
	// another tool (bpftool link detach), not by a new interface.
	same := link.Index == e.exec.attach.ifindex
	if e.exec.attach.detached == "" {
		why := fmt.Sprintf("interface %s was replaced", ex.Interface)
		if same {
			why = fmt.Sprintf("the executor's XDP link was detached from %s by another tool", ex.Interface)
		}
		e.detach(why)
	}
	if link.XDP.Attached {
		// Another program took the new interface (the executor's own
		// cannot be on it: that would be adopted, not re-attached).
		// Retried every tick until it is gone, without rewriting the
		// maps each time.
		e.reattachFailed(link, lb.Errorf("interface", ex.Interface, "attaching to the new interface: %v", occupied(e.exec.dp, link)))
		return
	}
	mode, err := e.attachTo(cfg, link)
	if err != nil {
		e.reattachFailed(link, err)
		return
	}
	if mode != lb.XDPAuto && mode != e.host.attachedMode {
		e.host.attachedMode = mode
		e.persistHost()
	}
	e.logFallback(link.Name)
	e.exec.attach.ifindex = link.Index
	all := map[netip.Addr]string{}
	for a := range e.host.configured {
		all[a] = "its interface was created again"
		if same {
			all[a] = "the executor was attached again"
		}
	}
	// The guard first: it went with the old interface.
	if err := e.guardAddresses(cfg); err != nil {
		e.log.Warn("guarding the addresses on the new interface", "interface", ex.Interface, "err", err)
	}
	e.restoreAddresses(all)
	e.attached(cfg, link, "executor re-attached")
	if !same {
		// A new interface may have a MAC of its own (a NIC replaced, a
		// VM's hot-plugged again): the segment still has the old one.
		e.announceMoved(ex.Interface, link.Index, 0)
	}
	e.checkAlerts(cfg, nil)
}

// attachTo attaches the executor, detached from the interface it was on
// (gone), to link: a new interface of its name (reattach) or another one
// (moveDetached). The whole state of cfg is written first, the next hops
// reached through the old interface pointed at link: the first frame
// the executor sees there must not be sent to the old one's index (a
// redirect to an interface that is gone loses the frame), while the
// routing table may not know link yet. A refused attachment is an error
// of field "interface".
func (e *Engine) attachTo(cfg lb.Config, link lb.Link) (lb.XDPMode, error) {
	e.net.Moved(e.exec.attach.ifindex, link)
	err := e.writeBeforeAttach(cfg)
	e.net.ClearAsked()
	if err != nil {
		return 0, err
	}
	mode, err := e.exec.dp.Attach(link.Index, e.attachMode(cfg.Executor, link))
	e.logDropped(e.exec.dp)
	if err != nil {
		return 0, lb.Errorf("interface", cfg.Executor.Interface, "attaching to %s: %v", link.Name, e.attachRefused(e.exec.dp, link, err))
	}
	return mode, nil
}

// reattachFailed records why the executor could not be attached to link;
// it is logged when it first happens or changes, not at every retry.
func (e *Engine) reattachFailed(link lb.Link, err error) {
	lvl := slog.LevelError
	if e.exec.err != nil && e.exec.err.Error() == err.Error() {
		lvl = slog.LevelDebug
	}
	e.exec.err = err
	e.log.Log(context.Background(), lvl, "re-attaching the executor", "interface", link.Name, "ifindex", link.Index, "err", err)
}

// hopForgetter is a Datapath whose NAT entries cache next hops towards
// clients (package datapath's does): ForgetStaleHops clears those through
// an interface that is gone, ForgetHopsTo those stale says are, and
// RoutesChanged has every one looked up again.
type hopForgetter interface {
	ForgetStaleHops() (int, error)
	ForgetHopsTo(stale func(ifindex int, mac net.HardwareAddr) bool) (int, error)
	RoutesChanged() error
}

// routeMoves coalesces the route changes the executor is told of (each
// has every NAT connection that routes its replies look its hop up again
// at its next reply): the first at once, those of the next routeMovesGap
// together at its end. A routing daemon's churn (a BGP feed) then costs a
// connection one routing-table lookup per routeMovesGap at most.
type routeMoves struct {
	// told is when the executor was last told.
	told time.Time
	// due fires when the changes waiting are to be told; nil when none
	// wait.
	due <-chan time.Time
}

// routeMovesGap is the least time between two route changes told to the
// executor.
const routeMovesGap = 250 * time.Millisecond

// routesMoved tells the executor that routes changed, at once or, within
// routeMovesGap of the last time, at its end (the engine's loop waits for
// e.exec.routes.due).
func (e *Engine) routesMoved(now time.Time) {
	r := &e.exec.routes
	if r.due != nil {
		return
	}
	if wait := routeMovesGap - now.Sub(r.told); wait > 0 {
		r.due = time.After(wait)
		return
	}
	e.tellRoutesMoved(now)
}

// tellRoutesMoved tells the executor, if one runs, that routes changed.
func (e *Engine) tellRoutesMoved(now time.Time) {
	e.exec.routes.due = nil
	hf, ok := e.exec.dp.(hopForgetter)
	if !ok {
		return
	}
	e.exec.routes.told = now
	if err := hf.RoutesChanged(); err != nil {
		e.log.Warn("having the NAT next hops towards clients looked up again after a route change", "err", err)
		return
	}
	e.log.Debug("routes changed: NAT replies look their next hop up again")
}

// forgetStaleHops clears the next hops NAT entries cached through an
// interface that is gone, once the executor is on the interface created
// in its place: their replies would go to the old index.
func (e *Engine) forgetStaleHops() {
	hf, ok := e.exec.dp.(hopForgetter)
	if !ok {
		return
	}
	if n, err := hf.ForgetStaleHops(); err != nil {
		e.log.Warn("forgetting the NAT next hops cached through the old interface", "err", err)
	} else if n > 0 {
		e.log.Info("forgot the NAT next hops cached through the old interface; the next replies look them up again", "entries", n)
	}
}

// movedHops are the interfaces and MACs that neighbours had before their
// MAC changed or went (a router replaced, a VRRP backup taking over with
// a MAC of its own), each until when NAT entries that cached a hop to it
// are looked for: the executor caches the hop a reply takes towards its
// client (found in the routing table when no client gateway is set) for
// the connection's life, and a handshake under way when the MAC changed
// may still complete with the old one for DLB_HALF_OPEN_SECONDS.
type movedHops struct {
	until map[movedHop]time.Time
	// swept is when entries were last looked through.
	swept time.Time
}

type movedHop struct {
	ifindex int
	mac     [6]byte
}

// movedHopWatch is how long after a neighbour's MAC changed NAT entries
// that cached the old one are looked for: a half-open NAT connection's
// life, and a sweep more.
const movedHopWatch = 32 * time.Second

// movedHopGap is the least time between two passes through the NAT
// entries for moved hops, but at the sweep (a burst of neighbour changes
// takes one pass).
const movedHopGap = time.Second

// add records that a neighbour on ifindex had mac until now.
func (m *movedHops) add(ifindex int, mac net.HardwareAddr, now time.Time) {
	if len(mac) != 6 {
		return
	}
	if m.until == nil {
		m.until = map[movedHop]time.Time{}
	}
	m.until[movedHop{ifindex, [6]byte(mac)}] = now.Add(movedHopWatch)
}

// due drops the hops watched long enough and reports whether a pass is
// due now: some are left, and (unless sweep) the last pass is
// movedHopGap old.
func (m *movedHops) due(now time.Time, sweep bool) bool {
	for h, until := range m.until {
		if !now.Before(until) {
			delete(m.until, h)
		}
	}
	return len(m.until) > 0 && (sweep || now.Sub(m.swept) >= movedHopGap)
}

// back stops watching mac on ifindex: a neighbour has it (again). The
// kernel flushes an interface's neighbours when its own MAC changes, and
// may collect an unused one: each went, its MAC watched as an old one,
// and came back with the same; every pass for movedHopWatch then cleared
// the NAT entries' hops to it, which the next replies cached again.
func (m *movedHops) back(ifindex int, mac net.HardwareAddr) {
	if len(mac) == 6 {
		delete(m.until, movedHop{ifindex, [6]byte(mac)})
	}
}

// stale reports whether a hop through ifindex to mac is a moved one.
func (m *movedHops) stale(ifindex int, mac net.HardwareAddr) bool {
	if len(mac) != 6 {
		return false
	}
	_, ok := m.until[movedHop{ifindex, [6]byte(mac)}]
	return ok
}

// forgetMovedHops clears the next hops NAT entries cached to a
// neighbour's MAC that changed: the next reply of each looks its hop up
// again. sweep says it is called at the connection sweep.
func (e *Engine) forgetMovedHops(sweep bool) {
	now := time.Now()
	if !e.exec.moved.due(now, sweep) {
		return
	}
	hf, ok := e.exec.dp.(hopForgetter)
	if !ok {
		return
	}
	e.exec.moved.swept = now
	if n, err := hf.ForgetHopsTo(e.exec.moved.stale); err != nil {
		e.log.Warn("forgetting the NAT next hops cached to a neighbour's old MAC", "err", err)
	} else if n > 0 {
		e.log.Info("forgot the NAT next hops cached to a neighbour's old MAC; the next replies look them up again", "entries", n)
	}
}

// attached records that the executor is attached to link again.
func (e *Engine) attached(cfg lb.Config, link lb.Link, msg string) {
	was, since := e.exec.attach.detached, e.exec.attach.since
	e.exec.attach.detached, e.exec.attach.ifindex, e.exec.err = "", link.Index, nil
	args := []any{"interface", link.Name, "ifindex", link.Index}
	if was != "" {
		args = append(args, "detached_for", time.Since(since).Round(time.Millisecond).String())
	}
	e.log.Info(msg, args...)
	if was != "" {
		e.events.Emit(events.ExecutorAttached, map[string]string{
			"DLB_INTERFACE": cfg.Executor.Interface, "DLB_IFINDEX": fmt.Sprint(link.Index),
		})
	}
}

// logDropped logs the pins of severed links dp removed since the last
// call.
func (e *Engine) logDropped(dp Datapath) {
	d := dp.Dropped()
	if len(d) > e.exec.attach.dropped {
		e.log.Warn("removed the pins of XDP links severed from their interface (deleted, or the link detached)", "pins", d[e.exec.attach.dropped:])
	}
	e.exec.attach.dropped = len(d)
}

// restoreAddresses puts back addresses dlbd configured that the host lost
// (why says how, for the log; "": it may not have, make sure quietly).
func (e *Engine) restoreAddresses(addrs map[netip.Addr]string) {
	put := map[netip.Addr]string{}
	for a := range addrs {
		if ifname, ok := e.host.configured[a]; ok {
			put[a] = ifname
		}
	}
	on, err := e.putAddresses(put)
	if err != nil {
		e.log.Warn("restoring addresses dlbd configured", "err", err)
	}
	for a, why := range addrs {
		if _, ok := on[a]; ok && why != "" {
			e.log.Info("restored an address dlbd configured", "address", a, "interface", put[a], "because", why)
		}
	}
}

// putAddresses puts addrs on their interfaces (address → interface name),
// asking each interface's addresses once (Netif.AddAddresses: with
// thousands of clusters, asking address by address took seconds); on and
// err are as AddAddresses's, for every interface.
func (e *Engine) putAddresses(addrs map[netip.Addr]string) (on map[netip.Addr]bool, err error) {
	on = map[netip.Addr]bool{}
	var errs []error
	for ifname, list := range byInterface(addrs) {
		o, err := e.opts.Netif.AddAddresses(ifname, list)
		maps.Copy(on, o)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return on, errors.Join(errs...)
}

// byInterface groups addrs (address → interface name) by interface: the
// interfaces in the order of their names, each with its addresses sorted.
func byInterface(addrs map[netip.Addr]string) iter.Seq2[string, []netip.Addr] {
	by := map[string][]netip.Addr{}
	for a, ifname := range addrs {
		by[ifname] = append(by[ifname], a)
	}
	return func(yield func(string, []netip.Addr) bool) {
		for _, ifname := range slices.Sorted(maps.Keys(by)) {
			list := by[ifname]
			slices.SortFunc(list, netip.Addr.Compare)
			if !yield(ifname, list) {
				return
			}
		}
	}
}

// deprecateOwnAddresses deprecates the IPv6 addresses dlbd put on that
// are not (an older dlbd put them on so): the host's own connections
// would leave from them, and hang, their replies taken by the executor.
// The operator's own addresses are only warned of (ownSourceProblems).
func (e *Engine) deprecateOwnAddresses() {
	own := map[netip.Addr]string{}
	for a, ifname := range e.host.configured {
		if a.Is6() && e.host.found[a] != ifname {
			own[a] = ifname
		}
	}
	for ifname, addrs := range byInterface(own) {
		changed, err := e.opts.Netif.DeprecateAddresses(ifname, addrs)
		if err != nil {
			e.log.Warn("deprecating IPv6 addresses dlbd put on", "interface", ifname, "err", err)
		}
		for _, a := range changed {
			e.log.Info("deprecated an IPv6 address an older dlbd put on as preferred: the host's own connections no longer leave from it",
				"address", a, "interface", ifname)
		}
	}
}

// applyHops rewrites the ports behind next hops whose MAC or interface
// changed, and the client gateways among them.
func (e *Engine) applyHops(cfg lb.Config, changed []netip.Addr) {
	if e.exec.dp == nil || len(changed) == 0 {
		return
	}
	var ports []lb.ServiceKey
	seen := map[lb.ServiceKey]bool{}
	gateway := false
	for _, a := range changed {
		if a == cfg.Executor.ClientGateway || a == cfg.Executor.ClientGateway6 {
			gateway = true
		}
		for k := range e.net.Users(a) {
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
		e.log.Error("applying changed next hops", "err", err)
	}
	e.checkAlerts(cfg, ports)
}

// natHopProbes are the neighbours that NAT replies go to (their MACs are
// cached in NAT entries, found at each sweep), verified by broadcast in
// turn like the configured next hops: a router whose MAC changed without
// the kernel hearing of it (no gratuitous ARP, and no traffic of the
// host's own through it) is found, and the Watch event of its new MAC has
// the NAT entries look their hop up again (movedHops).
type natHopProbes struct {
	neighbors []natNeighbor
	cursor    int
}

type natNeighbor struct {
	ifindex int
	addr    netip.Addr
}

// findNATHops looks up the neighbours that hops (the next hops NAT entries
// cache, from a sweep) are the MACs of.
func (e *Engine) findNATHops(hops map[lb.NATHop]int) {
	p := &e.exec.natHops
	if len(hops) == 0 {
		p.neighbors, p.cursor = nil, 0
		return
	}
	found, err := e.opts.Netif.NeighborsAt(slices.Collect(maps.Keys(hops)))
	if err != nil {
		e.log.Warn("finding the neighbours NAT replies go to", "err", err)
		return
	}
	var ns []natNeighbor
	for h, addrs := range found {
		for _, a := range addrs {
			ns = append(ns, natNeighbor{h.Ifindex, a})
		}
	}
	slices.SortFunc(ns, func(a, b natNeighbor) int {
		return cmp.Or(cmp.Compare(a.ifindex, b.ifindex), a.addr.Compare(b.addr))
	})
	p.neighbors = ns
	if p.cursor >= len(ns) {
		p.cursor = 0
	}
}

// nextBatch returns the next n items of list (fewer if it has fewer) from
// *cursor on, wrapping around, and moves *cursor past them.
func nextBatch[T any](list []T, cursor *int, n int) []T {
	n = min(len(list), n)
	out := make([]T, n)
	for i := range out {
		out[i] = list[(*cursor+i)%len(list)]
	}
	if n > 0 {
		*cursor = (*cursor + n) % len(list)
	}
	return out
}

// reprobeRound verifies, by broadcast, the MACs of the next batch of next
// hops, and of neighbours NAT replies go to; the answers come back as
// neighbour events (onNetEvent).
func (e *Engine) reprobeRound() {
	if e.exec.dp == nil || e.exec.attach.detached != "" {
		return
	}
	cfg := e.ed.Config()
	byIf := map[int][]netip.Addr{}
	for _, a := range nextBatch(e.net.Order(cfg), &e.exec.hopCursor, e.opts.ReprobeBatch) {
		// Unresolved hops are being resolved already; a hop with an
		// error is not reachable by MAC.
		if nb, _ := e.net.Neighbor(a); nb.MAC != nil && nb.Ifindex > 0 && e.net.Err(a) == nil {
			byIf[nb.Ifindex] = append(byIf[nb.Ifindex], a)
		}
	}
	// The neighbours NAT replies go to, but those that are next hops
	// too: their entries are dlbd's, kept managed.
	natIf := map[int][]netip.Addr{}
	for _, nb := range nextBatch(e.exec.natHops.neighbors, &e.exec.natHops.cursor, e.opts.ReprobeBatch) {
		if _, hop := e.net.Neighbor(nb.addr); !hop {
			natIf[nb.ifindex] = append(natIf[nb.ifindex], nb.addr)
		}
	}
	for ifindex, list := range natIf {
		if err := e.opts.Netif.ReprobeUnmanaged(ifindex, list, e.opts.ReprobeInterval/4); err != nil {
			e.log.Warn("verifying the MAC addresses of the neighbours NAT replies go to", "ifindex", ifindex, "err", err)
		}
	}
	for ifindex, list := range byIf {
		// A hop the host's own traffic confirmed within a quarter of the
		// interval needs no reprobe. Not within the whole interval: the
		// answer to the last reprobe confirms it too, and every hop would
		// be verified every other round only. A silent change is found
		// within 1.25 intervals.
		if err := e.opts.Netif.Reprobe(ifindex, list, e.opts.ReprobeInterval/4); err != nil {
			e.log.Warn("verifying next hops' MAC addresses", "ifindex", ifindex, "err", err)
		}
	}
}
