//go:build linux

package netif

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/ndframe"
)

// Reprobe verifies, by broadcast, the MAC of each of addrs on the
// interface with the given index: an ARP request (IPv4) or a neighbour
// solicitation to the solicited-node group (IPv6), answered within
// milliseconds by whoever holds the address now. A host whose MAC changed
// without announcing it (a replaced NIC, a VM restored elsewhere) is found
// this way; the kernel's own checks would first probe the old MAC by
// unicast for seconds. The answer updates the neighbour table, which Watch
// reports.
//
// A neighbour with a MAC keeps it while it is verified: Reprobe sends the
// question itself, on a packet socket. IPv6: a solicitation from the
// interface's link-local address; the advertisement that answers it
// (solicited, override set) replaces the MAC in the kernel's entry. IPv4:
// an ARP request from an address of the interface; Reprobe listens for
// the replies for arpListen and puts a MAC that differs from the entry's
// into it itself (the kernel applies an ARP reply that changes a MAC only
// when the entry did not change in the last second, locktime). The host's
// own packets go on meanwhile, and an unanswered question holds nothing
// back. Without an address to ask from, or without CAP_NET_RAW, the
// kernel verifies: the entry is set failed and resolved again by
// broadcast, which holds the host's packets to it until the answer.
//
// An entry the kernel is resolving already is left alone, and so are
// static ones (permanent, noarp: the operator's) and reachable ones that
// the host's own traffic confirmed within the last fresh (a TCP peer's
// acknowledgements, an advisor's probe: the MAC works). An address without
// an entry is resolved afresh. Reprobe returns without waiting for answers.
// Every entry it verifies is left managed (the kernel keeps it resolved):
// dlbd's next hops.
func (*Netif) Reprobe(ifindex int, addrs []netip.Addr, fresh time.Duration) error {
	return reprobe(ifindex, addrs, fresh, true)
}

// ReprobeUnmanaged verifies the MACs of addrs like Reprobe, but leaves the
// entries as the kernel keeps them (managed or not), and an address
// without an entry alone: the neighbours NAT replies go to, which the
// kernel learnt and may forget.
func (*Netif) ReprobeUnmanaged(ifindex int, addrs []netip.Addr, fresh time.Duration) error {
	return reprobe(ifindex, addrs, fresh, false)
}

// reprobe is Reprobe; manage says whether every entry is made managed.
func reprobe(ifindex int, addrs []netip.Addr, fresh time.Duration, manage bool) error {
	var errs []error
	for family, list := range byFamily(addrs) {
		table, err := neighTable(ifindex, family)
		if err != nil {
			return err
		}
		var kernel, ask []netip.Addr
		for _, a := range list {
			e, found := table[a]
			switch {
			case found && e.State&(netlink.NUD_PERMANENT|netlink.NUD_NOARP|netlink.NUD_INCOMPLETE) != 0:
				// Static, or being resolved already.
			case found && e.State&netlink.NUD_REACHABLE != 0 && ticks(e.Confirmed) < fresh:
				// Confirmed just now.
			case found && len(e.HardwareAddr) == 6 &&
				e.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE) != 0:
				ask = append(ask, a)
				if manage && e.FlagsExt&netlink.NTF_EXT_MANAGED == 0 {
					// Made managed again (an administrative update
					// without the flag clears it), as the kernel's way
					// does; on a valid entry this holds nothing back.
					if err := resolve(here, ifindex, family, a.AsSlice()); err != nil {
						errs = append(errs, fmt.Errorf("reprobing %s: %w", a, err))
					}
				}
			case !found && !manage:
				// Gone since it was named: nothing to verify.
			default:
				kernel = append(kernel, a)
			}
		}
		if len(ask) > 0 {
			var unsent []netip.Addr
			if family == netlink.FAMILY_V6 {
				unsent, err = solicit(ifindex, ask)
			} else {
				unsent, err = requestARP(ifindex, ask, table, manage)
			}
			if err != nil {
				errs = append(errs, err)
			}
			kernel = append(kernel, unsent...)
		}
		for _, a := range kernel {
			e, found := table[a]
			if found {
				// From a valid state the kernel confirms the MAC it has,
				// by unicast; from a failed one it asks everyone. The
				// update must not carry the managed flag: with it, the
				// kernel ignores the state given.
				n := &netlink.Neigh{LinkIndex: ifindex, Family: family, IP: a.AsSlice(), State: netlink.NUD_FAILED}
				if err := netlink.NeighSet(n); err != nil {
					errs = append(errs, fmt.Errorf("reprobing %s: %w", a, err))
					continue
				}
			}
			if err := resolveAs(here, ifindex, family, a.AsSlice(), manage || e.FlagsExt&netlink.NTF_EXT_MANAGED != 0); err != nil {
				errs = append(errs, fmt.Errorf("reprobing %s: %w", a, err))
			}
		}
	}
	return errors.Join(errs...)
}

// NeighborsAt returns the addresses of the neighbours that have one of
// hops' MACs on its interface, per hop: the routers (and clients on the
// same link) that NAT replies are sent to, found by the MAC the executor
// cached, for Reprobe to verify. Entries without a usable MAC (failed,
// being resolved) are left out.
func (*Netif) NeighborsAt(hops []lb.NATHop) (map[lb.NATHop][]netip.Addr, error) {
	want := make(map[lb.NATHop]bool, len(hops))
	for _, h := range hops {
		want[h] = true
	}
	out := map[lb.NATHop][]netip.Addr{}
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		table, err := neighTable(0, family)
		if err != nil {
			return nil, err
		}
		for a, e := range table {
			mac := usableMAC(e)
			if mac == nil {
				continue
			}
			if h := (lb.NATHop{Ifindex: e.LinkIndex, MAC: [6]byte(mac)}); want[h] {
				out[h] = append(out[h], a)
			}
		}
	}
	for _, addrs := range out {
		slices.SortFunc(addrs, netip.Addr.Compare)
	}
	return out, nil
}

// neighTable reads the neighbour table of one family on an interface (0:
// every interface), by address.
func neighTable(ifindex, family int) (map[netip.Addr]netlink.Neigh, error) {
	neighs, err := netlink.NeighList(ifindex, family)
	if err != nil {
		return nil, fmt.Errorf("reading the neighbour table: %w", err)
	}
	table := make(map[netip.Addr]netlink.Neigh, len(neighs))
	for _, e := range neighs {
		if a, ok := netip.AddrFromSlice(e.IP); ok {
			table[a.Unmap()] = e
		}
	}
	return table, nil
}

// solicit sends a neighbour solicitation for each of the IPv6 addresses
// addrs on a packet socket (CAP_NET_RAW), from the interface's link-local
// address, and returns those it could not send for the kernel to verify:
// all of them when the interface has no link-local address to send from
// or dlbd may not open a packet socket.
func solicit(ifindex int, addrs []netip.Addr) ([]netip.Addr, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return nil, fmt.Errorf("looking up interface %d: %w", ifindex, err)
	}
	mac := l.Attrs().HardwareAddr
	src, ok := linkLocal(l)
	if !ok || len(mac) != 6 {
		return addrs, nil
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return addrs, nil // without CAP_NET_RAW: the kernel's way
	}
	if err != nil {
		return nil, fmt.Errorf("reprobing on %s: opening a packet socket: %w", l.Attrs().Name, err)
	}
	// Closed aside, as Announce's: the close waits for an RCU grace period.
	defer func() { go unix.Close(fd) }()
	var errs []error
	for _, a := range addrs {
		if err := sendFrame(fd, ifindex, ndframe.Solicitation(mac, src, a)); err != nil {
			errs = append(errs, fmt.Errorf("reprobing %s: %w", a, err))
		}
	}
	return nil, errors.Join(errs...)
}

// linkLocal returns a link-local IPv6 address of l that is not tentative.
func linkLocal(l netlink.Link) (netip.Addr, bool) {
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V6)
	if err != nil {
		return netip.Addr{}, false
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if ok && ip.IsLinkLocalUnicast() && a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) == 0 {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// ticks converts the kernel's neighbour times (USER_HZ ticks ago, 100 a
// second in the netlink ABI) to a duration.
func ticks(n uint32) time.Duration { return time.Duration(n) * 10 * time.Millisecond }

// ForgetNeighbors removes the managed neighbour entries of addrs, on every
// interface: those Neighbors created, which the kernel would otherwise
// keep resolving (and, for hosts that do not answer, keep as failed
// entries) forever. Entries the kernel made for its own traffic are left.
func (*Netif) ForgetNeighbors(addrs []netip.Addr) error {
	var errs []error
	for family, list := range byFamily(addrs) {
		want := map[netip.Addr]bool{}
		for _, a := range list {
			want[a] = true
		}
		neighs, err := netlink.NeighList(0, family)
		if err != nil {
			return fmt.Errorf("reading the neighbour table: %w", err)
		}
		for _, e := range neighs {
			a, ok := netip.AddrFromSlice(e.IP)
			if !ok || !want[a.Unmap()] || e.FlagsExt&netlink.NTF_EXT_MANAGED == 0 {
				continue
			}
			n := &netlink.Neigh{LinkIndex: e.LinkIndex, Family: family, IP: e.IP}
			if err := netlink.NeighDel(n); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("removing the neighbour entry of %s: %w", a.Unmap(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// byFamily splits addresses into IPv4 and IPv6, by netlink family.
func byFamily(addrs []netip.Addr) map[int][]netip.Addr {
	out := map[int][]netip.Addr{}
	for _, a := range addrs {
		a = a.Unmap()
		f := netlink.FAMILY_V4
		if a.Is6() {
			f = netlink.FAMILY_V6
		}
		out[f] = append(out[f], a)
	}
	return out
}

// Forwarding reports whether the named interface forwards IPv4 (or, with
// ipv6, IPv6) packets: net.ipv{4,6}.conf.IFNAME.forwarding. The kernel's
// routing-table lookup from XDP (NAT replies without a client gateway)
// needs it on the interface the replies arrive on.
func (*Netif) Forwarding(ifname string, ipv6 bool) (bool, error) {
	if ifname == "" || strings.ContainsAny(ifname, "/\x00") || ifname == "." || ifname == ".." {
		return false, fmt.Errorf("reading forwarding: bad interface name %q", ifname)
	}
	fam := "ipv4"
	if ipv6 {
		fam = "ipv6"
	}
	path := filepath.Join("/proc/sys/net", fam, "conf", ifname, "forwarding")
	b, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)) != "0", nil
}
