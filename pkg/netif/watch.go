//go:build linux

package netif

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/lb"
)

// watchBuffer is the capacity of Watch's channel.
const watchBuffer = 256

// resubscribeDelay is the wait before subscribing again after a
// subscription failed to open.
const resubscribeDelay = time.Second

// eventBuffer is the receive buffer of the interface, address and
// neighbour subscriptions: a burst larger than the buffer is dropped by
// the kernel, and read again as a resync. The default (net.core.rmem_max,
// 208 KiB) held the events of about 1,000 addresses put on at once: a
// batch of clusters, or a takeover, made dlbd warn that it lost events.
// The kernel charges what the buffer holds, not its size.
const eventBuffer = 16 << 20

// canForceBuffer reports whether this process may size a socket's
// receive buffer beyond net.core.rmem_max (SO_RCVBUFFORCE, which takes
// CAP_NET_ADMIN), trying it on a netlink socket of its own: the netlink
// package leaves the socket of a subscription it could not size open.
func canForceBuffer() bool {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, eventBuffer) == nil
}

// Watch reports changes of the interfaces, addresses and neighbours of the
// network namespace of the calling thread, from netlink subscriptions (no
// polling), until ctx ends; the channel is then closed. Every change after
// Watch returns is reported, once (a neighbour entry refreshed with the
// same MAC, or an address whose flags changed, is not a change):
//
//   - an interface added or removed (a rename is a removal and an
//     addition), or set administratively up or down;
//   - an address added to or removed from an interface;
//   - the MAC of a unicast neighbour (IPv4 or IPv6) changed, appeared or
//     stopped being usable (failed, deleted);
//   - routes added, replaced or removed, in any table (not the routes the
//     kernel clones for its own cache): one NetRouteChanged for the
//     messages read together (a routing daemon loading a table sends
//     thousands), which are not kept or compared: a message that changes
//     nothing is a change.
//
// When the kernel drops events (a consumer too slow, a burst larger than
// the socket's buffer), Watch subscribes again, re-reads the state and
// reports NetResync followed by the differences.
func (n *Netif) Watch(ctx context.Context) (<-chan lb.NetEvent, error) {
	// One thread for the handle and the first subscriptions: the
	// namespace they are opened in is the one w.ns names.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("getting the network namespace: %w", err)
	}
	w := &watcher{ns: ns, out: make(chan lb.NetEvent, watchBuffer)}
	// Routing netlink only: a handle of every family would open an XFRM
	// socket too, which loads xfrm_user or fails where modules are not
	// loaded on demand. Opened in the thread's namespace as it is: given
	// a namespace, the netlink package enters it (see subscribe).
	if w.h, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
		ns.Close()
		return nil, fmt.Errorf("opening netlink: %w", err)
	}
	if err := w.subscribe(); err != nil {
		w.close()
		return nil, err
	}
	// Subscribed first, read second: a change in between is in the state
	// read and arrives again as an event, which then changes nothing.
	snap, err := w.snapshot()
	if err != nil {
		w.unsubscribe()
		w.close()
		return nil, err
	}
	w.state.replace(snap)
	go w.run(ctx)
	return w.out, nil
}

// watcher is one Watch.
type watcher struct {
	ns    netns.NsHandle
	h     *netlink.Handle
	out   chan lb.NetEvent
	state netState

	done   chan struct{} // closes the current subscriptions
	links  chan netlink.LinkUpdate
	addrs  chan netlink.AddrUpdate
	neighs chan netlink.NeighUpdate
	routes <-chan struct{}
}

func (w *watcher) close() {
	w.h.Close()
	w.ns.Close()
}

// subscribe opens the four subscriptions in the watcher's namespace.
func (w *watcher) subscribe() error {
	done := make(chan struct{})
	links := make(chan netlink.LinkUpdate, 64)
	addrs := make(chan netlink.AddrUpdate, 64)
	neighs := make(chan netlink.NeighUpdate, 64)
	// A subscription that opened closes its channel when done closes; one
	// that did not never will, so its channel is closed here.
	fail := func(what string, err error, unopened ...func()) error {
		close(done)
		for _, c := range unopened {
			c()
		}
		drain(links)
		drain(addrs)
		drain(neighs)
		return fmt.Errorf("subscribing to %s changes: %w", what, err)
	}
	closeLinks, closeAddrs, closeNeighs := func() { close(links) }, func() { close(addrs) }, func() { close(neighs) }
	// The subscriptions are opened again, after the kernel dropped
	// events, from whichever thread runs the watcher then. The netlink
	// package enters the namespace it is given (setns) for every socket,
	// even the one the thread is in, which takes CAP_SYS_ADMIN:
	// dlbd.service does not grant it. So the namespace is given only when
	// this thread is in another one (a test's thread may be).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ns := w.ns
	if cur, err := netns.Get(); err == nil {
		if cur.Equal(w.ns) {
			ns = netns.None()
		}
		cur.Close()
	}
	// Sized beyond rmem_max where this process may (dlbd.service can),
	// as large as rmem_max lets it otherwise.
	force := canForceBuffer()
	if err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{Namespace: &ns,
		ReceiveBufferSize: eventBuffer, ReceiveBufferForceSize: force}); err != nil {
		return fail("interface", err, closeLinks, closeAddrs, closeNeighs)
	}
	if err := netlink.AddrSubscribeWithOptions(addrs, done, netlink.AddrSubscribeOptions{Namespace: &ns,
		ReceiveBufferSize: eventBuffer, ReceiveBufferForceSize: force}); err != nil {
		return fail("address", err, closeAddrs, closeNeighs)
	}
	if err := netlink.NeighSubscribeWithOptions(neighs, done, netlink.NeighSubscribeOptions{Namespace: &ns,
		ReceiveBufferSize: eventBuffer, ReceiveBufferForceSize: force}); err != nil {
		return fail("neighbour", err, closeNeighs)
	}
	routes, err := subscribeRoutes(ns, done)
	if err != nil {
		return fail("route", err)
	}
	w.done, w.links, w.addrs, w.neighs, w.routes = done, links, addrs, neighs, routes
	return nil
}

// unsubscribe closes the subscriptions, if any, and drains their channels,
// so that their goroutines, which may be blocked sending, end.
func (w *watcher) unsubscribe() {
	if w.done == nil {
		return
	}
	close(w.done)
	drain(w.links)
	drain(w.addrs)
	drain(w.neighs)
	drain(w.routes)
	w.done, w.links, w.addrs, w.neighs, w.routes = nil, nil, nil, nil, nil
}

// drain reads c until it is closed, in the background.
func drain[T any](c <-chan T) {
	go func() {
		for range c {
		}
	}()
}

func (w *watcher) run(ctx context.Context) {
	defer close(w.out)
	defer w.close()
	for {
		var evs []lb.NetEvent
		ok := true
		select {
		case <-ctx.Done():
			w.unsubscribe()
			return
		case u, open := <-w.links:
			ok = open
			if open {
				evs = w.state.setLink(int(u.Index), linkStateOf(u.Attrs()), u.Header.Type != unix.RTM_DELLINK)
			}
		case u, open := <-w.addrs:
			ok = open
			if p, valid := prefixOf(u.LinkAddress); open && valid {
				evs = w.state.setAddr(u.LinkIndex, p, u.NewAddr)
			}
		case u, open := <-w.neighs:
			ok = open
			if a, valid := neighAddr(u.Neigh); open && valid {
				var mac net.HardwareAddr
				if u.Type != unix.RTM_DELNEIGH {
					mac = usableMAC(u.Neigh)
				}
				evs = w.state.setNeigh(u.LinkIndex, a, mac)
			}
		case _, open := <-w.routes:
			ok = open
			if open {
				evs = []lb.NetEvent{{Kind: lb.NetRouteChanged}}
			}
		}
		if !ok {
			// A subscription ended: the kernel dropped events
			// (ENOBUFS) or the socket failed.
			evs = w.resync(ctx)
		}
		for _, ev := range evs {
			if ev.Kind != lb.NetResync && ev.Kind != lb.NetRouteChanged && ev.Ifname == "" {
				ev.Ifname = w.name(ev.Ifindex)
			}
			select {
			case w.out <- ev:
			case <-ctx.Done():
				w.unsubscribe()
				return
			}
		}
	}
}

// resync subscribes again and returns NetResync and the differences
// between the state read and what the watcher knew.
func (w *watcher) resync(ctx context.Context) []lb.NetEvent {
	w.unsubscribe()
	for {
		err := w.subscribe()
		if err == nil {
			snap, serr := w.snapshot()
			if serr == nil {
				return append([]lb.NetEvent{{Kind: lb.NetResync}}, w.state.replace(snap)...)
			}
			w.unsubscribe()
		}
		select {
		case <-ctx.Done():
			return nil // run sees ctx too, and returns
		case <-time.After(resubscribeDelay):
		}
	}
}

// name returns an interface's name, from the state or the kernel.
func (w *watcher) name(ifindex int) string {
	if l, ok := w.state.links[ifindex]; ok {
		return l.name
	}
	if l, err := w.h.LinkByIndex(ifindex); err == nil {
		return l.Attrs().Name
	}
	return ""
}

// snapshot reads the interfaces, addresses and neighbours.
func (w *watcher) snapshot() (netState, error) {
	s := newNetState()
	links, err := w.h.LinkList()
	if err != nil {
		return s, fmt.Errorf("listing interfaces: %w", err)
	}
	for _, l := range links {
		s.links[l.Attrs().Index] = linkStateOf(l.Attrs())
	}
	addrs, err := w.h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return s, fmt.Errorf("listing addresses: %w", err)
	}
	for _, a := range addrs {
		if p, ok := prefixOf(*a.IPNet); ok {
			s.addrs[addrKey{a.LinkIndex, p}] = true
		}
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		neighs, err := w.h.NeighList(0, fam)
		if err != nil {
			return s, fmt.Errorf("listing neighbours: %w", err)
		}
		for _, nb := range neighs {
			if a, ok := neighAddr(nb); ok {
				if mac := usableMAC(nb); mac != nil {
					s.neighs[neighKey{nb.LinkIndex, a}] = mac
				}
			}
		}
	}
	return s, nil
}

func prefixOf(n net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	bits, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), bits), true
}

// neighAddr returns a neighbour entry's address if it is a unicast IPv4
// or IPv6 one (not a bridge's forwarding entry, not multicast).
func neighAddr(nb netlink.Neigh) (netip.Addr, bool) {
	if nb.Family != netlink.FAMILY_V4 && nb.Family != netlink.FAMILY_V6 {
		return netip.Addr{}, false
	}
	a, ok := netip.AddrFromSlice(nb.IP)
	if !ok {
		return netip.Addr{}, false
	}
	a = a.Unmap()
	return a, !a.IsMulticast() && !a.IsUnspecified()
}

// usableMAC returns the entry's MAC if it can be used to reach the
// neighbour, else nil.
func usableMAC(nb netlink.Neigh) net.HardwareAddr {
	if nb.State&usable == 0 || len(nb.HardwareAddr) != 6 {
		return nil
	}
	return slices.Clone(nb.HardwareAddr)
}

// netState is what a watch knows, to report changes and only changes.
type netState struct {
	links  map[int]linkState
	addrs  map[addrKey]bool
	neighs map[neighKey]net.HardwareAddr
}

type linkState struct {
	name string
	mac  string // net.HardwareAddr's String
	up   bool
}

// linkStateOf is what the state keeps of an interface netlink reports.
func linkStateOf(a *netlink.LinkAttrs) linkState {
	return linkState{name: a.Name, mac: a.HardwareAddr.String(), up: a.Flags&net.FlagUp != 0}
}

type addrKey struct {
	ifindex int
	prefix  netip.Prefix
}

type neighKey struct {
	ifindex int
	addr    netip.Addr
}

func newNetState() netState {
	return netState{links: map[int]linkState{}, addrs: map[addrKey]bool{}, neighs: map[neighKey]net.HardwareAddr{}}
}

// setLink records an interface as l says (present false: removed) and
// returns the events that makes.
func (s *netState) setLink(ifindex int, l linkState, present bool) []lb.NetEvent {
	if s.links == nil {
		*s = newNetState()
	}
	old, known := s.links[ifindex]
	ev := func(k lb.NetEventKind, name string) lb.NetEvent {
		return lb.NetEvent{Kind: k, Ifindex: ifindex, Ifname: name}
	}
	var out []lb.NetEvent
	switch {
	case !present && !known:
		return nil
	case !present:
		delete(s.links, ifindex)
		// What was on it went with it.
		for k := range s.addrs {
			if k.ifindex == ifindex {
				delete(s.addrs, k)
			}
		}
		for k := range s.neighs {
			if k.ifindex == ifindex {
				delete(s.neighs, k)
			}
		}
		return []lb.NetEvent{ev(lb.NetLinkRemoved, old.name)}
	case known && old.name != l.name:
		out = append(out, ev(lb.NetLinkRemoved, old.name))
		known = false
	}
	if l.mac == "" && known {
		l.mac = old.mac // not reported: kept
	}
	s.links[ifindex] = l
	if known && l.mac != old.mac && old.mac != "" {
		ev := ev(lb.NetLinkMACChanged, l.name)
		ev.MAC, _ = net.ParseMAC(l.mac)
		ev.OldMAC, _ = net.ParseMAC(old.mac)
		out = append(out, ev)
	}
	switch {
	case !known:
		out = append(out, ev(lb.NetLinkAdded, l.name))
		if l.up {
			out = append(out, ev(lb.NetLinkUp, l.name))
		}
	case l.up && !old.up:
		out = append(out, ev(lb.NetLinkUp, l.name))
	case !l.up && old.up:
		out = append(out, ev(lb.NetLinkDown, l.name))
	}
	return out
}

// setAddr records an address (present false: removed).
func (s *netState) setAddr(ifindex int, p netip.Prefix, present bool) []lb.NetEvent {
	if s.links == nil {
		*s = newNetState()
	}
	k := addrKey{ifindex, p}
	if s.addrs[k] == present {
		return nil
	}
	kind := lb.NetAddressAdded
	if present {
		s.addrs[k] = true
	} else {
		delete(s.addrs, k)
		kind = lb.NetAddressRemoved
	}
	return []lb.NetEvent{{Kind: kind, Ifindex: ifindex, Ifname: s.links[ifindex].name, Prefix: p}}
}

// setNeigh records a neighbour's usable MAC (nil: none).
func (s *netState) setNeigh(ifindex int, a netip.Addr, mac net.HardwareAddr) []lb.NetEvent {
	if s.links == nil {
		*s = newNetState()
	}
	k := neighKey{ifindex, a}
	old, ok := s.neighs[k]
	if ok == (mac != nil) && bytes.Equal(old, mac) {
		return nil
	}
	if mac == nil {
		delete(s.neighs, k)
	} else {
		s.neighs[k] = slices.Clone(mac)
	}
	return []lb.NetEvent{{Kind: lb.NetNeighborChanged, Ifindex: ifindex, Ifname: s.links[ifindex].name, Addr: a, MAC: slices.Clone(mac), OldMAC: old}}
}

// replace makes the state snap and returns the events for the
// differences: interfaces added or changed, addresses removed and added,
// neighbours changed, interfaces removed; each group in a stable order.
func (s *netState) replace(snap netState) []lb.NetEvent {
	if s.links == nil {
		*s = newNetState()
	}
	var out []lb.NetEvent
	for _, i := range sortedKeys(snap.links, cmp.Compare[int]) {
		l := snap.links[i]
		out = append(out, s.setLink(i, l, true)...)
	}
	addrCmp := func(a, b addrKey) int {
		return cmp.Or(cmp.Compare(a.ifindex, b.ifindex), a.prefix.Addr().Compare(b.prefix.Addr()), cmp.Compare(a.prefix.Bits(), b.prefix.Bits()))
	}
	for _, k := range sortedKeys(s.addrs, addrCmp) {
		if !snap.addrs[k] {
			out = append(out, s.setAddr(k.ifindex, k.prefix, false)...)
		}
	}
	for _, k := range sortedKeys(snap.addrs, addrCmp) {
		out = append(out, s.setAddr(k.ifindex, k.prefix, true)...)
	}
	neighCmp := func(a, b neighKey) int { return cmp.Or(cmp.Compare(a.ifindex, b.ifindex), a.addr.Compare(b.addr)) }
	for _, k := range sortedKeys(s.neighs, neighCmp) {
		if _, ok := snap.neighs[k]; !ok {
			out = append(out, s.setNeigh(k.ifindex, k.addr, nil)...)
		}
	}
	for _, k := range sortedKeys(snap.neighs, neighCmp) {
		out = append(out, s.setNeigh(k.ifindex, k.addr, snap.neighs[k])...)
	}
	for _, i := range sortedKeys(s.links, cmp.Compare[int]) {
		if _, ok := snap.links[i]; !ok {
			out = append(out, s.setLink(i, linkState{}, false)...)
		}
	}
	return out
}

func sortedKeys[K comparable, V any](m map[K]V, cmp func(a, b K) int) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp)
	return keys
}
