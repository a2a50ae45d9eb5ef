package testutil

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NetNS is a named network namespace (/run/netns/NAME) a test created.
type NetNS struct {
	Name   string
	Handle netns.NsHandle
	nl     *netlink.Handle
}

// NewNetNS creates the named network namespace name (which must start
// with "dlbdp"), brings its loopback up, and deletes it when tb ends,
// whether the test passed or not. A namespace of that name left by a
// crashed run is deleted first.
func NewNetNS(tb testing.TB, name string) *NetNS {
	tb.Helper()
	if !strings.HasPrefix(name, "dlbdp") {
		tb.Fatalf("network namespace %q must start with dlbdp", name)
	}
	_ = netns.DeleteNamed(name)
	// NewNamed switches the calling thread into the new namespace: keep
	// the thread, and switch it back.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		tb.Fatalf("getting current netns: %v", err)
	}
	defer orig.Close()
	h, err := netns.NewNamed(name)
	if err != nil {
		tb.Fatalf("creating netns %s: %v", name, err)
	}
	if err := netns.Set(orig); err != nil {
		h.Close()
		tb.Fatalf("returning from netns %s: %v", name, err)
	}
	nl, err := netlink.NewHandleAt(h, unix.NETLINK_ROUTE)
	if err != nil {
		h.Close()
		tb.Fatalf("netlink handle in %s: %v", name, err)
	}
	ns := &NetNS{Name: name, Handle: h, nl: nl}
	tb.Cleanup(func() {
		nl.Close()
		h.Close()
		if err := netns.DeleteNamed(name); err != nil {
			tb.Errorf("deleting netns %s: %v", name, err)
		}
	})
	lo, err := nl.LinkByName("lo")
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	if err := nl.LinkSetUp(lo); err != nil {
		tb.Fatalf("%s: bringing up lo: %v", name, err)
	}
	return ns
}

// Do runs f on an OS thread that is in the namespace. Sockets f creates
// belong to the namespace and may be used from any goroutine afterwards;
// goroutines f starts run outside it.
func (ns *NetNS) Do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(ns.Handle); err != nil {
			errc <- fmt.Errorf("entering %s: %w", ns.Name, err)
			return
		}
		err = f()
		if serr := netns.Set(orig); serr != nil {
			// Leave the thread locked: the runtime discards it when this
			// goroutine ends.
			errc <- fmt.Errorf("leaving %s: %v (after %v)", ns.Name, serr, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// Netlink returns a netlink handle that works in the namespace.
func (ns *NetNS) Netlink() *netlink.Handle { return ns.nl }

// Link returns an interface of the namespace.
func (ns *NetNS) Link(tb testing.TB, name string) netlink.Link {
	tb.Helper()
	l, err := ns.nl.LinkByName(name)
	if err != nil {
		tb.Fatalf("%s: %s: %v", ns.Name, name, err)
	}
	return l
}

// Sysctl writes a sysctl (e.g. "net/ipv4/ip_forward") in the namespace.
func (ns *NetNS) Sysctl(tb testing.TB, key, value string) {
	tb.Helper()
	err := ns.Do(func() error { return os.WriteFile("/proc/sys/"+key, []byte(value), 0o644) })
	if err != nil {
		tb.Fatalf("%s: sysctl %s=%s: %v", ns.Name, key, value, err)
	}
}

// Run runs a command in the namespace (through nsenter) and returns its
// combined output.
func (ns *NetNS) Run(tb testing.TB, name string, args ...string) string {
	tb.Helper()
	out, err := exec.Command("nsenter", append([]string{"--net=/run/netns/" + ns.Name, name}, args...)...).CombinedOutput()
	if err != nil {
		tb.Fatalf("%s: %s %v: %v: %s", ns.Name, name, args, err, out)
	}
	return string(out)
}

// Addr adds an address (CIDR, without duplicate address detection) to an
// interface of the namespace.
func (ns *NetNS) Addr(tb testing.TB, ifname, cidr string) {
	tb.Helper()
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		tb.Fatal(err)
	}
	a.Flags = unix.IFA_F_NODAD
	if err := ns.nl.AddrAdd(ns.Link(tb, ifname), a); err != nil {
		tb.Fatalf("%s: adding %s to %s: %v", ns.Name, cidr, ifname, err)
	}
}

// Route adds a route to dst (CIDR) via gw in the namespace.
func (ns *NetNS) Route(tb testing.TB, dst, gw string) {
	tb.Helper()
	_, n, err := net.ParseCIDR(dst)
	if err != nil {
		tb.Fatal(err)
	}
	r := &netlink.Route{Dst: n, Gw: net.ParseIP(gw)}
	if err := ns.nl.RouteAdd(r); err != nil {
		tb.Fatalf("%s: route %s via %s: %v", ns.Name, dst, gw, err)
	}
}

// Veth connects two namespaces with a veth pair: interface a in ns and b
// in peer, both up. Both names must start with "dlbdp".
func Veth(tb testing.TB, ns *NetNS, a string, peer *NetNS, b string) {
	tb.Helper()
	for _, n := range []string{a, b} {
		if !strings.HasPrefix(n, "dlbdp") {
			tb.Fatalf("interface %q must start with dlbdp", n)
		}
	}
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a}, PeerName: b, PeerNamespace: netlink.NsFd(int(peer.Handle))}
	if err := ns.nl.LinkAdd(v); err != nil {
		tb.Fatalf("veth %s/%s: %v", a, b, err)
	}
	if err := ns.nl.LinkSetUp(ns.Link(tb, a)); err != nil {
		tb.Fatal(err)
	}
	if err := peer.nl.LinkSetUp(peer.Link(tb, b)); err != nil {
		tb.Fatal(err)
	}
}

// ChecksumOffloadOff turns checksum offload off on a veth interface of the
// namespace, both ways: locally generated packets then carry complete
// checksums (an XDP program that rewrites headers updates checksums
// incrementally, which needs complete ones), and received packets are
// verified by the stack (a veth marks packets "checksum unnecessary" when
// its receive offload is on, and TcpInCsumErrors would then count nothing).
func (ns *NetNS) ChecksumOffloadOff(tb testing.TB, ifname string) {
	tb.Helper()
	ns.Run(tb, "ethtool", "-K", ifname, "tx", "off", "rx", "off")
}

// SNMP reads a counter of /proc/net/snmp (or snmp6 for names of it) in the
// namespace, e.g. ("Tcp", "InCsumErrors").
func (ns *NetNS) SNMP(tb testing.TB, group, name string) uint64 {
	tb.Helper()
	var v uint64
	err := ns.Do(func() error {
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		var head []string
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 || f[0] != group+":" {
				continue
			}
			if head == nil {
				head = f
				continue
			}
			for i, h := range head {
				if h == name && i < len(f) {
					v, err = strconv.ParseUint(f[i], 10, 64)
					return err
				}
			}
			return fmt.Errorf("no %s %s", group, name)
		}
		return fmt.Errorf("no %s in /proc/net/snmp", group)
	})
	if err != nil {
		tb.Fatalf("%s: %v", ns.Name, err)
	}
	return v
}

// SNMP6 reads a counter of /proc/net/snmp6 in the namespace, e.g.
// "Tcp6InCsumErrors" does not exist there: IPv6 TCP counts in
// /proc/net/snmp's Tcp line; UDP over IPv6 is "Udp6InCsumErrors".
func (ns *NetNS) SNMP6(tb testing.TB, name string) uint64 {
	tb.Helper()
	var v uint64
	err := ns.Do(func() error {
		b, err := os.ReadFile("/proc/thread-self/net/snmp6")
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && f[0] == name {
				v, err = strconv.ParseUint(f[1], 10, 64)
				return err
			}
		}
		return fmt.Errorf("no %s in /proc/net/snmp6", name)
	})
	if err != nil {
		tb.Fatalf("%s: %v", ns.Name, err)
	}
	return v
}

// Neigh adds a permanent neighbour entry in the namespace.
func (ns *NetNS) Neigh(tb testing.TB, ifname string, ip netip.Addr, mac net.HardwareAddr) {
	tb.Helper()
	n := &netlink.Neigh{LinkIndex: ns.Link(tb, ifname).Attrs().Index, State: netlink.NUD_PERMANENT, IP: ip.AsSlice(), HardwareAddr: mac}
	if ip.Is6() {
		n.Family = netlink.FAMILY_V6
	}
	if err := ns.nl.NeighAdd(n); err != nil {
		tb.Fatalf("%s: neighbour %s: %v", ns.Name, ip, err)
	}
}
