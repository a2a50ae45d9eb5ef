//go:build linux

// Package netif discovers and configures the host networking the executor
// needs: interfaces, how each server is reached (interface and MAC), and
// cluster addresses on the executor's interface. It is the only package
// that imports github.com/vishvananda/netlink. It works in the network
// namespace of the calling thread.
package netif

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/lb"
)

// Errors returned by Neighbors.
var (
	// ErrNotOnLink: the server is reached through a gateway, so MAC
	// forwarding cannot reach it.
	ErrNotOnLink = errors.New("not on a directly connected network")
	// ErrLocal: the address belongs to this host.
	ErrLocal = errors.New("is an address of this host")
	// ErrBroadcast: the address is the broadcast address of a subnet of
	// this host: no one host's.
	ErrBroadcast = errors.New("is the broadcast address of a subnet of this host")
)

// Netif is the host's networking, through netlink.
type Netif struct{}

// New returns a Netif.
func New() *Netif { return &Netif{} }

// ErrNoInterface: the host has no interface of the name (or index)
// given.
var ErrNoInterface = lb.ErrNoInterface

// LinkByName returns the named interface. When there is none, the error
// (ErrNoInterface) names the Ethernet interfaces there are: a misspelt
// name is then plain to see.
func (*Netif) LinkByName(name string) (lb.Link, error) {
	l, err := netlink.LinkByName(name)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return lb.Link{}, fmt.Errorf("%w %q on this host (%s)", ErrNoInterface, name, ethernetNames())
	}
	if err != nil {
		return lb.Link{}, fmt.Errorf("looking up interface %q: %w", name, err)
	}
	return toLink(l), nil
}

// maxNamesShown bounds the interfaces an error lists.
const maxNamesShown = 8

// ethernetNames says which interfaces of the host have an Ethernet
// address, in name order, at most maxNamesShown of them.
func ethernetNames() string {
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Sprintf("listing its interfaces: %v", err)
	}
	var names []string
	for _, l := range links {
		if toLink(l).Ethernet() {
			names = append(names, l.Attrs().Name)
		}
	}
	slices.Sort(names)
	switch n := len(names); {
	case n == 0:
		return "it has no Ethernet interface"
	case n > maxNamesShown:
		return fmt.Sprintf("its Ethernet interfaces: %s and %d more", strings.Join(names[:maxNamesShown], ", "), n-maxNamesShown)
	}
	return "its Ethernet interfaces: " + strings.Join(names, ", ")
}

// LinkByIndex returns the interface with the given index.
func (*Netif) LinkByIndex(index int) (lb.Link, error) {
	l, err := netlink.LinkByIndex(index)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return lb.Link{}, fmt.Errorf("looking up interface %d: %w of that index on this host", index, ErrNoInterface)
	}
	if err != nil {
		return lb.Link{}, fmt.Errorf("looking up interface %d: %w", index, err)
	}
	return toLink(l), nil
}

func toLink(l netlink.Link) lb.Link {
	a := l.Attrs()
	up := a.Flags&net.FlagUp != 0 && a.OperState != netlink.OperDown && a.OperState != netlink.OperLowerLayerDown &&
		a.OperState != netlink.OperNotPresent
	return lb.Link{Index: a.Index, Name: a.Name, MAC: append(net.HardwareAddr(nil), a.HardwareAddr...), Kind: l.Type(), Up: up,
		XDP: xdpProgram(a.Xdp)}
}

// xdpProgram reads the XDP program the kernel reports on an interface
// (IFLA_XDP).
func xdpProgram(x *netlink.LinkXdp) lb.XDPProgram {
	if x == nil || !x.Attached {
		return lb.XDPProgram{}
	}
	p := lb.XDPProgram{Attached: true, ID: x.ProgId, Mode: lb.XDPAuto}
	switch x.AttachMode {
	case nl.XDP_ATTACHED_DRV:
		p.Mode = lb.XDPNative
	case nl.XDP_ATTACHED_SKB:
		p.Mode = lb.XDPGeneric
	}
	return p
}

// Routes returns, for each address, the interface its route uses, that
// interface's MAC and the route's preferred source, or the error
// Neighbors would give it; it asks nothing of the neighbour table.
func (n *Netif) Routes(addrs []netip.Addr) (map[netip.Addr]lb.Neighbor, map[netip.Addr]error) {
	out := map[netip.Addr]lb.Neighbor{}
	errs := map[netip.Addr]error{}
	for _, addr := range addrs {
		nb, err := n.route(addr)
		if err != nil {
			errs[addr] = err
			continue
		}
		out[addr] = nb
	}
	return out, errs
}

// usable are the neighbour states whose link-layer address can be used.
const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE |
	netlink.NUD_PERMANENT | netlink.NUD_NOARP

// Neighbors returns, for each address, how to reach it: the interface its
// route uses, that interface's MAC, and the address's MAC from the
// neighbour table. When the table has no usable entry, or only a stale one,
// it asks the kernel to resolve the address (through a managed entry, which
// the kernel then keeps resolved) and returns what it has: MAC stays nil
// until resolution succeeds. Addresses that cannot be reached by MAC
// forwarding get an error instead (ErrNotOnLink, ErrLocal, ErrBroadcast,
// no route).
func (n *Netif) Neighbors(addrs []netip.Addr) (map[netip.Addr]lb.Neighbor, map[netip.Addr]error) {
	out, errs := n.Routes(addrs)
	type famIf struct{ ifindex, family int }
	byIf := map[famIf][]netip.Addr{}
	for _, addr := range addrs {
		nb, ok := out[addr]
		if !ok {
			continue
		}
		family := netlink.FAMILY_V4
		if addr.Is6() && !addr.Is4In6() {
			family = netlink.FAMILY_V6
		}
		byIf[famIf{nb.Ifindex, family}] = append(byIf[famIf{nb.Ifindex, family}], addr)
	}
	for fi, list := range byIf {
		table, err := neighTable(fi.ifindex, fi.family)
		if err != nil {
			for _, a := range list {
				errs[a] = err
				delete(out, a)
			}
			continue
		}
		for _, a := range list {
			nb := out[a]
			e, found := table[a]
			if found && e.State&usable != 0 && len(e.HardwareAddr) == 6 {
				nb.MAC = append(net.HardwareAddr(nil), e.HardwareAddr...)
				out[a] = nb
			}
			if found && e.State&(netlink.NUD_REACHABLE|netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0 {
				continue
			}
			// Missing, incomplete, failed or stale: have the kernel
			// (re)resolve it.
			if err := resolve(here, fi.ifindex, fi.family, a.AsSlice()); err != nil {
				errs[a] = fmt.Errorf("resolving %s: %w", a, err)
				delete(out, a)
			}
		}
	}
	return out, errs
}

// route finds the interface addr is reached through, directly.
func (n *Netif) route(addr netip.Addr) (lb.Neighbor, error) {
	var nb lb.Neighbor
	routes, err := netlink.RouteGet(addr.AsSlice())
	if err != nil {
		return nb, fmt.Errorf("finding a route to %s: %w", addr, err)
	}
	if len(routes) == 0 {
		return nb, fmt.Errorf("no route to %s", addr)
	}
	r := routes[0]
	switch r.Type {
	case unix.RTN_UNICAST:
	case unix.RTN_LOCAL:
		return nb, fmt.Errorf("%s %w", addr, ErrLocal)
	case unix.RTN_BROADCAST:
		return nb, fmt.Errorf("%s %w: every host on the segment would receive its frames", addr, ErrBroadcast)
	default:
		// Multicast, anycast, blackhole, ...: not one host to forward to.
		return nb, fmt.Errorf("%s is not routed to one host (route type %d)", addr, r.Type)
	}
	if r.Gw != nil {
		return nb, fmt.Errorf("%s is %w (it is reached through %s)", addr, ErrNotOnLink, r.Gw)
	}
	link, err := n.LinkByIndex(r.LinkIndex)
	if err != nil {
		return nb, err
	}
	nb.Ifindex, nb.IfMAC = link.Index, link.MAC
	if src, ok := netip.AddrFromSlice(r.Src); ok {
		nb.Src = src.Unmap()
	}
	return nb, nil
}

// here is a netlink handle in the calling thread's network namespace, as
// the netlink package's own functions use.
var here = &netlink.Handle{}

// resolve asks the kernel, through h, to resolve ip now (NTF_USE), as a
// managed entry, so that the kernel keeps it resolved. The managed flag is
// given every time: an administrative update without it clears it.
func resolve(h *netlink.Handle, ifindex, family int, ip net.IP) error {
	return resolveAs(h, ifindex, family, ip, true)
}

// resolveAs is resolve, of a managed entry or (managed false) of one the
// kernel may forget.
func resolveAs(h *netlink.Handle, ifindex, family int, ip net.IP, managed bool) error {
	n := &netlink.Neigh{LinkIndex: ifindex, Family: family, IP: ip, Flags: netlink.NTF_USE}
	if managed {
		n.FlagsExt = netlink.NTF_EXT_MANAGED
	}
	err := h.NeighSet(n)
	if err != nil && n.FlagsExt != 0 {
		// Kernels before 5.16 have no managed entries.
		n.FlagsExt = 0
		err = h.NeighSet(n)
	}
	return err
}

// AddAddresses puts each of addrs on the named interface as a /32 (or
// /128), so that the host answers ARP (or neighbour solicitations) for
// it; an interface that has an address already (with any prefix length:
// the operator's, or put there before) is left as it is. It lists the
// host's addresses once rather than once an address (a listing holds
// every address of the host: a thousand clusters put on one by one took a
// second, four thousand nine). on has each address the interface has now:
// true if this call put it on, false if it was there. err joins the
// failures, each naming its address; one that concerns them all (the
// interface gone) leaves on empty.
func (*Netif) AddAddresses(ifname string, addrs []netip.Addr) (on map[netip.Addr]bool, err error) {
	on = map[netip.Addr]bool{}
	if len(addrs) == 0 {
		return on, nil
	}
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return on, fmt.Errorf("looking up interface %q: %w", ifname, err)
	}
	have, err := listAddresses(l)
	if err != nil {
		return on, fmt.Errorf("listing the addresses of %s: %w", ifname, err)
	}
	var errs []error
	for _, addr := range addrs {
		if _, ok := have[addr]; ok {
			on[addr] = false
			continue
		}
		// As a /32 it would take the place of the broadcast route: the
		// host would stop taking the subnet's broadcasts as broadcasts.
		// IPv6 has no broadcast (and a lookup costs 0.5 ms there with
		// thousands of addresses).
		if r, err := routeGet4(addr); err == nil && len(r) > 0 && r[0].Type == unix.RTN_BROADCAST {
			errs = append(errs, fmt.Errorf("%s %w: not an address one host can hold", addr, ErrBroadcast))
			continue
		}
		if err := netlink.AddrReplace(l, hostAddr(addr)); err != nil {
			if addr.Is6() && errors.Is(err, unix.EACCES) {
				// What the kernel says when IPv6 is off on the interface.
				err = fmt.Errorf("%w (is IPv6 disabled there? sysctl net.ipv6.conf.%s.disable_ipv6)", err, ifname)
			}
			errs = append(errs, fmt.Errorf("adding %s to %s: %w", addr, ifname, err))
			continue
		}
		on[addr] = true
		have[addr] = netlink.Addr{}
	}
	return on, errors.Join(errs...)
}

// DeprecateAddresses makes each IPv6 host address of addrs (a /128) on
// the named interface deprecated, as AddAddresses puts one on, if it is
// not (an older dlbd put it on without): IPv6 source selection would
// otherwise pick it for the host's own connections, whose replies the
// executor takes. An IPv4 address, one that is not there or has another
// prefix length (the operator's), and an interface that is gone are left
// as they are. It lists the interface's addresses once (4,000 IPv6
// clusters, one listing each, held every start for 12 s); it returns the
// addresses it changed, and joins the failures, each naming its address.
func (*Netif) DeprecateAddresses(ifname string, addrs []netip.Addr) (changed []netip.Addr, err error) {
	if !slices.ContainsFunc(addrs, netip.Addr.Is6) {
		return nil, nil
	}
	l, err := netlink.LinkByName(ifname)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("looking up interface %q: %w", ifname, err)
	}
	have, err := listAddresses(l)
	if err != nil {
		return nil, fmt.Errorf("listing the addresses of %s: %w", ifname, err)
	}
	var errs []error
	for _, addr := range addrs {
		h, ok := have[addr]
		if !addr.Is6() || !ok {
			continue
		}
		if ones, _ := h.Mask.Size(); ones != 128 || h.Flags&unix.IFA_F_DEPRECATED != 0 && h.PreferedLft == 0 {
			continue
		}
		if err := netlink.AddrReplace(l, hostAddr(addr)); err != nil {
			errs = append(errs, fmt.Errorf("deprecating %s on %s: %w", addr, ifname, err))
			continue
		}
		changed = append(changed, addr)
	}
	return changed, errors.Join(errs...)
}

// routeGet4 looks up the route to an IPv4 address; an IPv6 one has none
// (nil).
func routeGet4(addr netip.Addr) ([]netlink.Route, error) {
	if !addr.Is4() {
		return nil, nil
	}
	return netlink.RouteGet(addr.AsSlice())
}

// HeldAddresses returns those of addrs that an interface of this host (of
// this network namespace) has, with any prefix length, listing the host's
// addresses once.
func (*Netif) HeldAddresses(addrs []netip.Addr) (map[netip.Addr]bool, error) {
	held := map[netip.Addr]bool{}
	if len(addrs) == 0 {
		return held, nil
	}
	have, err := listAddresses(nil)
	if err != nil {
		return held, fmt.Errorf("listing the host's addresses: %w", err)
	}
	for _, a := range addrs {
		if _, ok := have[a]; ok {
			held[a] = true
		}
	}
	return held, nil
}

// listAddresses returns the addresses link (nil: every interface) has, of
// both families, by address.
func listAddresses(link netlink.Link) (map[netip.Addr]netlink.Addr, error) {
	have, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nil, err
	}
	out := make(map[netip.Addr]netlink.Addr, len(have))
	for _, h := range have {
		if a, ok := netip.AddrFromSlice(h.IP); ok {
			out[a.Unmap()] = h
		}
	}
	return out, nil
}

// DelAddress removes addr from the named interface; an address that is not
// there is not an error, nor is an interface that is gone (it took its
// addresses with it).
func (*Netif) DelAddress(ifname string, addr netip.Addr) error {
	l, err := netlink.LinkByName(ifname)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("looking up interface %q: %w", ifname, err)
	}
	if err := netlink.AddrDel(l, hostAddr(addr)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		return fmt.Errorf("removing %s from %s: %w", addr, ifname, err)
	}
	return nil
}

// hostAddr is a as a host address. An IPv6 one skips duplicate address
// detection: it must answer neighbour solicitations at once (it is a
// cluster or return address the operator assigned to this host), not
// after a second of being tentative. And it is deprecated (preferred
// lifetime 0, valid for ever): IPv6 source address selection would
// otherwise pick it, the latest address of the subnet, for the host's own
// connections, whose replies the executor takes (a cluster or return
// address is the executor's alone). It still receives and is answered
// for. (IPv4 picks a subnet's primary address, not a /32 added later.)
func hostAddr(a netip.Addr) *netlink.Addr {
	p := netip.PrefixFrom(a, a.BitLen())
	out := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(p.Bits(), a.BitLen())}}
	if a.Is6() {
		out.Flags = unix.IFA_F_NODAD
		out.PreferedLft, out.ValidLft = 0, math.MaxUint32 // INFINITY_LIFE_TIME
	}
	return out
}
