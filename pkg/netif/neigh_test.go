//go:build linux

package netif

import (
	"errors"
	"maps"
	"math"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// pair makes a veth pair from the test's namespace to another (anonymous)
// one: dlbhn0 with 198.18.0.1 and 2001:2::1 here, dlbhn1 with the
// neighbours .9 and ::9 there. It returns dlbhn0 and dlbhn1's MAC.
func pair(t *testing.T, ns netns.NsHandle) (netlink.Link, net.HardwareAddr) {
	t.Helper()
	// A second namespace: created (which enters it) and left again.
	peer, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	if err := netns.Set(ns); err != nil {
		t.Fatal(err)
	}
	ph, err := netlink.NewHandleAt(peer, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ph.Close)
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "dlbhn0"}, PeerName: "dlbhn1",
		PeerNamespace: netlink.NsFd(int(peer))}); err != nil {
		t.Fatal(err)
	}
	here, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(here.Close)
	// No duplicate address detection on dlbhn0: its link-local address,
	// which neighbour solicitations leave from, is usable at once. (The
	// kernel sends none while it is tentative: an IPv6 resolution
	// started in the first second or two could run out of retries, as
	// it did once in CI.)
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/dlbhn0/accept_dad", []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, side := range []struct {
		h     *netlink.Handle
		name  string
		addrs []string
	}{{here, "dlbhn0", []string{"198.18.0.1/24", "2001:2::1/64"}}, {ph, "dlbhn1", []string{"198.18.0.9/24", "2001:2::9/64"}}} {
		l, err := side.h.LinkByName(side.name)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range side.addrs {
			p := netip.MustParsePrefix(s)
			addr := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}, Flags: unix.IFA_F_NODAD}
			if err := side.h.AddrAdd(l, addr); err != nil {
				t.Fatal(err)
			}
		}
		if err := side.h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	a, err := netlink.LinkByName("dlbhn0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ph.LinkByName("dlbhn1")
	if err != nil {
		t.Fatal(err)
	}
	return a, b.Attrs().HardwareAddr
}

// entry returns the neighbour entry of ip on link, if any.
func entry(t *testing.T, link netlink.Link, ip netip.Addr) (netlink.Neigh, bool) {
	t.Helper()
	fam := netlink.FAMILY_V4
	if ip.Is6() {
		fam = netlink.FAMILY_V6
	}
	list, err := netlink.NeighList(link.Attrs().Index, fam)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range list {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip {
			return n, true
		}
	}
	return netlink.Neigh{}, false
}

// A neighbour entry holding a MAC that is no longer right is corrected by
// Reprobe at once; a static one is left alone.
func TestPrivilegedReprobe(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, bMAC := pair(t, testutil.InNewNetNS(t))
	wrong := net.HardwareAddr{0x02, 0, 0, 0, 0xee, 0xee}
	for _, s := range []string{"198.18.0.9", "2001:2::9"} {
		ip := netip.MustParseAddr(s)
		fam := netlink.FAMILY_V4
		if ip.Is6() {
			fam = netlink.FAMILY_V6
		}
		// Not a subtest: a subtest's goroutine is not in the test's
		// namespace.
		func() {
			set := func(state int) {
				t.Helper()
				if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: a.Attrs().Index, Family: fam, State: state,
					IP: ip.AsSlice(), HardwareAddr: wrong}); err != nil {
					t.Fatal(err)
				}
			}
			// waitRight waits for the entry to hold the peer's MAC, and
			// to be managed, and returns how long the MAC took. (An
			// ARP reply correcting it is written in two updates, the
			// MAC, then the managed flag the first one cleared: the
			// kernel ignores a state given with the flag. The entry
			// is seen between them now and then.)
			waitRight := func(what string) time.Duration {
				t.Helper()
				start := time.Now()
				var right time.Duration
				for {
					n, ok := entry(t, a, ip)
					if ok && n.HardwareAddr.String() == bMAC.String() {
						if right == 0 {
							right = time.Since(start)
						}
						if n.FlagsExt&netlink.NTF_EXT_MANAGED != 0 {
							return right
						}
					}
					if time.Since(start) > 3*time.Second {
						t.Fatalf("%s: entry %+v after 3 s, want MAC %v, managed", what, n, bMAC)
					}
					time.Sleep(time.Millisecond)
				}
			}
			// Resolved first (the link is ready), then made wrong, as a
			// host that changed its MAC leaves it.
			if _, errs := New().Neighbors([]netip.Addr{ip}); len(errs) > 0 {
				t.Fatal(errs)
			}
			waitRight("resolved")
			set(netlink.NUD_REACHABLE)
			if n, _ := entry(t, a, ip); n.HardwareAddr.String() != wrong.String() {
				t.Fatalf("the entry was not made wrong: %+v", n)
			}
			if err := New().Reprobe(a.Attrs().Index, []netip.Addr{ip}, 0); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: the right MAC again %v after the reprobe", s, waitRight("reprobed").Round(time.Microsecond))

			// Confirmed within fresh: left as it is.
			set(netlink.NUD_REACHABLE)
			if err := New().Reprobe(a.Attrs().Index, []netip.Addr{ip}, time.Hour); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			if n, _ := entry(t, a, ip); n.HardwareAddr.String() != wrong.String() {
				t.Errorf("an entry confirmed just now was reprobed: %+v", n)
			}

			// Static: the operator's, untouched.
			if err := netlink.NeighDel(&netlink.Neigh{LinkIndex: a.Attrs().Index, Family: fam, IP: ip.AsSlice()}); err != nil {
				t.Fatal(err)
			}
			set(netlink.NUD_PERMANENT)
			if err := New().Reprobe(a.Attrs().Index, []netip.Addr{ip}, 0); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			if n, _ := entry(t, a, ip); n.HardwareAddr.String() != wrong.String() || n.State != netlink.NUD_PERMANENT {
				t.Errorf("a permanent entry changed: %+v", n)
			}
			if err := netlink.NeighDel(&netlink.Neigh{LinkIndex: a.Attrs().Index, Family: fam, IP: ip.AsSlice()}); err != nil {
				t.Fatal(err)
			}
		}()
	}
}

// ReprobeUnmanaged corrects a wrong MAC like Reprobe but leaves the entry
// the kernel's (not managed: the kernel may forget it), and creates none
// for an address without one.
func TestPrivilegedReprobeUnmanaged(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, bMAC := pair(t, testutil.InNewNetNS(t))
	wrong := net.HardwareAddr{0x02, 0, 0, 0, 0xee, 0xee}
	idx := a.Attrs().Index
	for _, s := range []string{"198.18.0.9", "2001:2::9"} {
		ip := netip.MustParseAddr(s)
		fam := netlink.FAMILY_V4
		if ip.Is6() {
			fam = netlink.FAMILY_V6
		}
		if _, errs := New().Neighbors([]netip.Addr{ip}); len(errs) > 0 { // the link is ready
			t.Fatal(errs)
		}
		for start := time.Now(); ; time.Sleep(time.Millisecond) {
			if n, ok := entry(t, a, ip); ok && n.HardwareAddr.String() == bMAC.String() {
				break
			}
			if time.Since(start) > 3*time.Second {
				t.Fatalf("%s: not resolved within 3 s", s)
			}
		}
		// As the kernel learns a neighbour: not managed; and wrong.
		if err := netlink.NeighDel(&netlink.Neigh{LinkIndex: idx, Family: fam, IP: ip.AsSlice()}); err != nil {
			t.Fatal(err)
		}
		if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: fam, State: netlink.NUD_STALE, IP: ip.AsSlice(), HardwareAddr: wrong}); err != nil {
			t.Fatal(err)
		}
		if err := New().ReprobeUnmanaged(idx, []netip.Addr{ip}, 0); err != nil {
			t.Fatal(err)
		}
		var n netlink.Neigh
		for start := time.Now(); ; time.Sleep(time.Millisecond) {
			var ok bool
			if n, ok = entry(t, a, ip); ok && n.HardwareAddr.String() == bMAC.String() {
				break
			}
			if time.Since(start) > 3*time.Second {
				t.Fatalf("%s: entry %+v 3 s after the reprobe, want MAC %v", s, n, bMAC)
			}
		}
		time.Sleep(50 * time.Millisecond) // a managed flag would be put on after the MAC
		if n, _ = entry(t, a, ip); n.FlagsExt&netlink.NTF_EXT_MANAGED != 0 {
			t.Errorf("%s: the entry was made managed: %+v", s, n)
		}
	}
	absent := netip.MustParseAddr("198.18.0.99")
	if err := New().ReprobeUnmanaged(idx, []netip.Addr{absent}, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if n, ok := entry(t, a, absent); ok {
		t.Errorf("an entry made for an address without one: %+v", n)
	}
}

// A reprobe nobody answers leaves the entry as it was: the host's packets
// to the neighbour keep going out to the MAC it had, rather than waiting
// in the kernel's queue for an answer (up to a second per unanswered
// question, as when the kernel re-resolves a failed entry).
func TestPrivilegedReprobeHoldsNothing(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, _ := pair(t, testutil.InNewNetNS(t))
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0x77, 0x77}
	// Solicitations leave from the link-local address, which is usable
	// once the kernel's duplicate address detection is done with it
	// (without one, the kernel resolves the entry again).
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if _, ok := linkLocal(a); ok {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("no usable link-local address on dlbhn0 after 5 s")
		}
	}
	for _, s := range []string{"198.18.0.77", "2001:2::77"} { // on the link, nobody's
		ip := netip.MustParseAddr(s)
		fam := netlink.FAMILY_V4
		if ip.Is6() {
			fam = netlink.FAMILY_V6
		}
		for _, state := range []int{netlink.NUD_REACHABLE, netlink.NUD_STALE} {
			if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: a.Attrs().Index, Family: fam, State: state,
				IP: ip.AsSlice(), HardwareAddr: mac}); err != nil {
				t.Fatal(err)
			}
			if err := New().Reprobe(a.Attrs().Index, []netip.Addr{ip}, 0); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
			n, ok := entry(t, a, ip)
			if !ok || n.HardwareAddr.String() != mac.String() || n.State&usable == 0 {
				t.Errorf("%s from state %#x: entry %+v after an unanswered reprobe, want MAC %v in a usable state", s, state, n, mac)
			}
			if n.FlagsExt&netlink.NTF_EXT_MANAGED == 0 {
				t.Errorf("%s from state %#x: the entry is not managed", s, state)
			}
		}
	}
}

// ForgetNeighbors removes the entries Neighbors made (managed) and leaves
// the others.
func TestPrivilegedForgetNeighbors(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, _ := pair(t, testutil.InNewNetNS(t))
	n := New()
	made := []netip.Addr{netip.MustParseAddr("198.18.0.9"), netip.MustParseAddr("2001:2::9"), netip.MustParseAddr("198.18.0.50")}
	if _, errs := n.Neighbors(made); len(errs) > 0 {
		t.Fatal(errs)
	}
	other := netip.MustParseAddr("198.18.0.51")
	if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: a.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_STALE,
		IP: other.AsSlice(), HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 0x51}}); err != nil {
		t.Fatal(err)
	}
	for _, ip := range made {
		if _, ok := entry(t, a, ip); !ok {
			t.Fatalf("no entry for %s after Neighbors", ip)
		}
	}
	if err := n.ForgetNeighbors(append(made, other)); err != nil {
		t.Fatal(err)
	}
	for _, ip := range made {
		if e, ok := entry(t, a, ip); ok {
			t.Errorf("%s still has an entry: %+v", ip, e)
		}
	}
	if _, ok := entry(t, a, other); !ok {
		t.Error("an entry Neighbors did not make was removed")
	}
}

// addOperatorsAddresses puts on link the addresses an operator might
// have: 198.18.0.101/24 and 2001:2::101/64.
func addOperatorsAddresses(t *testing.T, link netlink.Link) {
	t.Helper()
	for _, p := range []string{"198.18.0.101/24", "2001:2::101/64"} {
		addr, err := netlink.ParseAddr(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.AddrAdd(link, addr); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPrivilegedAddAddressLeavesWhatIsThere: AddAddresses puts a host
// address on and says so; an address the interface has already, with any
// prefix length, it leaves as it is (no second address, no other flags)
// and says it did not add it.
func TestPrivilegedAddAddressLeavesWhatIsThere(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, _ := pair(t, testutil.InNewNetNS(t))
	n := New()
	addOperatorsAddresses(t, a)
	count := func(ip netip.Addr) (n int, prefixes []string) {
		for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
			addrs, err := netlink.AddrList(a, fam)
			if err != nil {
				t.Fatal(err)
			}
			for _, ad := range addrs {
				if ad.IP.Equal(ip.AsSlice()) {
					n++
					prefixes = append(prefixes, ad.IPNet.String())
				}
			}
		}
		return n, prefixes
	}
	for _, tc := range []struct {
		addr      string
		wantAdded []bool // first and second call
		want      string // the one address left with it
	}{
		{"198.18.0.100", []bool{true, false}, "198.18.0.100/32"},
		{"198.18.0.101", []bool{false, false}, "198.18.0.101/24"},
		{"2001:2::100", []bool{true, false}, "2001:2::100/128"},
		{"2001:2::101", []bool{false, false}, "2001:2::101/64"},
	} {
		ip := netip.MustParseAddr(tc.addr)
		for i, want := range tc.wantAdded {
			on, err := n.AddAddresses("dlbhn0", []netip.Addr{ip})
			added := on[ip]
			if err != nil || added != want {
				t.Errorf("%s, call %d: added %v, %v; want %v", tc.addr, i+1, added, err, want)
			}
		}
		if got, prefixes := count(ip); got != 1 || prefixes[0] != tc.want {
			t.Errorf("%s: the interface has %v, want only %s", tc.addr, prefixes, tc.want)
		}
	}
}

// TestPrivilegedAddAddressesInOneGo: AddAddresses puts many addresses on
// in one call, those there already left, each failure named, and
// HeldAddresses says which the host has.
func TestPrivilegedAddAddressesInOneGo(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, _ := pair(t, testutil.InNewNetNS(t))
	addOperatorsAddresses(t, a)
	n := New()
	ips := []netip.Addr{netip.MustParseAddr("198.18.0.100"), netip.MustParseAddr("198.18.0.101"),
		netip.MustParseAddr("198.18.0.255"), netip.MustParseAddr("2001:2::100"), netip.MustParseAddr("2001:2::101")}
	for call, want := range []map[netip.Addr]bool{
		{ips[0]: true, ips[1]: false, ips[3]: true, ips[4]: false},
		{ips[0]: false, ips[1]: false, ips[3]: false, ips[4]: false},
	} {
		on, err := n.AddAddresses("dlbhn0", ips)
		if !maps.Equal(on, want) {
			t.Errorf("call %d: on %v, want %v", call+1, on, want)
		}
		if err == nil || !strings.Contains(err.Error(), "198.18.0.255 is the broadcast address of a subnet of this host") {
			t.Errorf("call %d: error %v; want the broadcast address named", call+1, err)
		}
	}
	if on, err := n.AddAddresses("dlbhn9", ips[:1]); len(on) != 0 || err == nil || !strings.Contains(err.Error(), `looking up interface "dlbhn9"`) {
		t.Errorf("an interface that is not there: on %v, %v; want none and the interface named", on, err)
	}
	other := netip.MustParseAddr("198.18.0.77")
	held, err := n.HeldAddresses(append(ips, other))
	if want := map[netip.Addr]bool{ips[0]: true, ips[1]: true, ips[3]: true, ips[4]: true}; err != nil || !maps.Equal(held, want) {
		t.Errorf("HeldAddresses: %v, %v; want %v", held, err, want)
	}
}

// TestPrivilegedAddAddressIsNoSource: an IPv6 address AddAddresses puts on
// is deprecated, so that the host's own connections do not leave from it
// (IPv6 source selection picks the latest address of a subnet otherwise,
// and the executor takes every reply to a cluster or return address); an
// IPv4 one is not picked either.
func TestPrivilegedAddAddressIsNoSource(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, _ := pair(t, testutil.InNewNetNS(t))
	for _, tc := range []struct{ add, to, want string }{
		{"2001:2::3", "2001:2::fe", "2001:2::1"},
		{"198.18.0.3", "198.18.0.254", "198.18.0.1"},
	} {
		ip := netip.MustParseAddr(tc.add)
		if _, err := New().AddAddresses("dlbhn0", []netip.Addr{ip}); err != nil {
			t.Fatal(err)
		}
		got, errs := New().Routes([]netip.Addr{netip.MustParseAddr(tc.to)})
		if src := got[netip.MustParseAddr(tc.to)].Src; src.String() != tc.want {
			t.Errorf("with %s on: the host's connections to %s leave from %v (%v); want %s", tc.add, tc.to, src, errs, tc.want)
		}
		if ip.Is4() {
			continue
		}
		addrs, err := netlink.AddrList(a, netlink.FAMILY_V6)
		if err != nil {
			t.Fatal(err)
		}
		for _, ad := range addrs {
			if ad.IP.Equal(ip.AsSlice()) && (ad.Flags&unix.IFA_F_DEPRECATED == 0 || ad.ValidLft != math.MaxUint32) {
				t.Errorf("%s: flags %#x, valid %d s; want deprecated, valid for ever", ad.IPNet, ad.Flags, ad.ValidLft)
			}
		}
	}
}

// TestPrivilegedDeprecateAddress: an IPv6 host address put on as an
// older dlbd did (preferred) is deprecated, valid for ever; one already
// deprecated, one of another prefix length (the operator's), an IPv4 one
// and one that is not there are left as they are.
func TestPrivilegedDeprecateAddress(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, _ := pair(t, testutil.InNewNetNS(t))
	for _, c := range []string{"2001:2::3/128", "2001:2::4/64"} {
		p := netip.MustParsePrefix(c)
		ipnet := &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 128)}
		if err := netlink.AddrAdd(a, &netlink.Addr{IPNet: ipnet, Flags: unix.IFA_F_NODAD}); err != nil {
			t.Fatal(err)
		}
	}
	n := New()
	for _, tc := range []struct {
		addr    string
		changed bool
	}{
		{"2001:2::3", true}, {"2001:2::3", false}, {"2001:2::4", false}, {"198.18.0.1", false}, {"2001:2::99", false},
	} {
		done, err := n.DeprecateAddresses("dlbhn0", []netip.Addr{netip.MustParseAddr(tc.addr)})
		if changed := len(done) > 0; err != nil || changed != tc.changed {
			t.Errorf("DeprecateAddresses(%s): %v, %v; want %v", tc.addr, changed, err, tc.changed)
		}
	}
	addrs, err := netlink.AddrList(a, netlink.FAMILY_V6)
	if err != nil {
		t.Fatal(err)
	}
	for _, ad := range addrs {
		deprecated := ad.Flags&unix.IFA_F_DEPRECATED != 0
		switch ad.IPNet.String() {
		case "2001:2::3/128":
			if !deprecated || ad.ValidLft != math.MaxUint32 {
				t.Errorf("%s: flags %#x, valid %d s; want deprecated, valid for ever", ad.IPNet, ad.Flags, ad.ValidLft)
			}
		case "2001:2::4/64":
			if deprecated {
				t.Errorf("the operator's %s was deprecated", ad.IPNet)
			}
		}
	}
	if done, err := n.DeprecateAddresses("dlbgone0", []netip.Addr{netip.MustParseAddr("2001:2::3")}); len(done) > 0 || err != nil {
		t.Errorf("an interface that is gone: %v, %v; want no change, no error", done, err)
	}
}

// TestPrivilegedAddAddressRefusesABroadcastAddress: the broadcast address
// of a subnet of the host is refused, naming why, and left as it was (a
// broadcast route, not an address of the interface).
func TestPrivilegedAddAddressRefusesABroadcastAddress(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, _ := pair(t, testutil.InNewNetNS(t))
	bcast := netip.MustParseAddr("198.18.0.255")
	on, err := New().AddAddresses("dlbhn0", []netip.Addr{bcast})
	added := on[bcast]
	if added || err == nil || !strings.Contains(err.Error(), "198.18.0.255 is the broadcast address of a subnet of this host") {
		t.Errorf("AddAddresses(%s): added %v, %v; want a refusal naming the broadcast address", bcast, added, err)
	}
	addrs, err := netlink.AddrList(a, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, ad := range addrs {
		if ad.IP.Equal(bcast.AsSlice()) {
			t.Errorf("the interface holds %s after the refusal", ad.IPNet)
		}
	}
	if r, err := netlink.RouteGet(bcast.AsSlice()); err != nil || len(r) == 0 || r[0].Type != unix.RTN_BROADCAST {
		t.Errorf("the route to %s after the refusal: %+v, %v; want the broadcast route", bcast, r, err)
	}
}

// DelAddress takes an address off; one that is not there, or on an
// interface that is gone, is already off.
func TestPrivilegedDelAddress(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, _ := pair(t, testutil.InNewNetNS(t))
	n := New()
	vip := netip.MustParseAddr("198.18.0.100")
	if on, err := n.AddAddresses("dlbhn0", []netip.Addr{vip}); err != nil || !on[vip] {
		t.Fatalf("AddAddresses: %v, %v; want added", on, err)
	}
	has := func() bool {
		addrs, err := netlink.AddrList(a, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		for _, ad := range addrs {
			if ad.IP.Equal(vip.AsSlice()) {
				return true
			}
		}
		return false
	}
	if !has() {
		t.Fatal("AddAddresses put nothing on")
	}
	for i, name := range []string{"dlbhn0", "dlbhn0"} {
		if err := n.DelAddress(name, vip); err != nil {
			t.Errorf("DelAddress #%d: %v", i+1, err)
		}
	}
	if has() {
		t.Error("the address is still on after DelAddress")
	}
	if err := netlink.LinkDel(a); err != nil {
		t.Fatal(err)
	}
	if err := n.DelAddress("dlbhn0", vip); err != nil {
		t.Errorf("DelAddress on an interface that is gone: %v", err)
	}
	if err := n.DelAddress("dlbhn0", vip); err != nil {
		t.Errorf("DelAddress again: %v", err)
	}
}

func TestPrivilegedForwarding(t *testing.T) {
	testutil.RequirePrivileged(t)
	pair(t, testutil.InNewNetNS(t))
	n := New()
	for _, v6 := range []bool{false, true} {
		fam := "ipv4"
		if v6 {
			fam = "ipv6"
		}
		for _, want := range []bool{false, true} {
			v := "0"
			if want {
				v = "1"
			}
			if err := os.WriteFile("/proc/sys/net/"+fam+"/conf/dlbhn0/forwarding", []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := n.Forwarding("dlbhn0", v6)
			if err != nil || got != want {
				t.Errorf("%s forwarding %s: got %v, %v", fam, v, got, err)
			}
		}
	}
	for _, bad := range []string{"", "../all", "nope0"} {
		if _, err := n.Forwarding(bad, false); err == nil {
			t.Errorf("Forwarding(%q): no error", bad)
		}
	}
}

// TestPrivilegedNeighborsRefuseWhatIsNotOneHost: Neighbors reaches a
// neighbour on the segment (from the interface's address), and refuses, naming why, what MAC forwarding
// must not send to: an address of this host, the subnet's broadcast
// address (its MAC is ff:ff:ff:ff:ff:ff: every host would receive the
// frames), an address reached through a gateway, one with no route.
func TestPrivilegedNeighborsRefuseWhatIsNotOneHost(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, _ := pair(t, testutil.InNewNetNS(t))
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: a.Attrs().Index, Dst: &net.IPNet{IP: net.IP{198, 18, 5, 0}, Mask: net.CIDRMask(24, 32)},
		Gw: net.IP{198, 18, 0, 9}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr, wantErr string
	}{
		{"198.18.0.9", ""},
		{"198.18.0.1", "198.18.0.1 is an address of this host"},
		{"198.18.0.255", "198.18.0.255 is the broadcast address of a subnet of this host"},
		{"198.18.5.7", "198.18.5.7 is not on a directly connected network (it is reached through 198.18.0.9)"},
		{"198.19.0.7", "198.19.0.7"},
	} {
		addr := netip.MustParseAddr(tc.addr)
		got, errs := New().Neighbors([]netip.Addr{addr})
		err := errs[addr]
		switch {
		case tc.wantErr == "" && (err != nil || got[addr].Ifindex != a.Attrs().Index || got[addr].Src != netip.MustParseAddr("198.18.0.1")):
			t.Errorf("%s: %+v, %v; want reached through dlbhn0, from 198.18.0.1", tc.addr, got[addr], err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v; want one with %q", tc.addr, err, tc.wantErr)
		}
	}
}

// TestPrivilegedRoutesAskNothing: Routes says how an address is reached
// (the interface, the route's source) or why it cannot be, as Neighbors
// does, and leaves no neighbour entry behind: a dry run's lookups.
func TestPrivilegedRoutesAskNothing(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, _ := pair(t, testutil.InNewNetNS(t))
	on, local := netip.MustParseAddr("198.18.0.33"), netip.MustParseAddr("198.18.0.1")
	got, errs := New().Routes([]netip.Addr{on, local})
	if nb := got[on]; errs[on] != nil || nb.Ifindex != a.Attrs().Index || nb.Src != local || nb.MAC != nil {
		t.Errorf("%s: %+v, %v; want reached through dlbhn0 from %s, no MAC", on, nb, errs[on], local)
	}
	if err := errs[local]; !errors.Is(err, ErrLocal) {
		t.Errorf("%s: error %v; want ErrLocal", local, err)
	}
	if n, ok := entry(t, a, on); ok {
		t.Errorf("Routes left a neighbour entry: %+v", n)
	}
}

// TestPrivilegedHoldsAddress: an address of any interface of the
// namespace is held (lo's too), one only a neighbour has is not.
func TestPrivilegedHoldsAddress(t *testing.T) {
	testutil.RequirePrivileged(t)
	pair(t, testutil.InNewNetNS(t))
	for addr, want := range map[string]bool{"198.18.0.1": true, "2001:2::1": true, "127.0.0.1": true, "198.18.0.9": false,
		"2001:2::9": false, "198.18.0.77": false} {
		a := netip.MustParseAddr(addr)
		held, err := New().HeldAddresses([]netip.Addr{a})
		if got := held[a]; err != nil || got != want {
			t.Errorf("HeldAddresses(%s) = %v, %v; want %v", addr, got, err, want)
		}
	}
}

// NeighborsAt finds, per interface and MAC, the neighbours that have it
// (IPv4 and IPv6, several addresses for one MAC): the routers NAT replies
// go to, by the MAC the executor cached. Entries without a usable MAC,
// other MACs and other interfaces are left out.
func TestPrivilegedNeighborsAt(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, _ := pair(t, testutil.InNewNetNS(t))
	idx := a.Attrs().Index
	router, client := [6]byte{2, 0, 0, 0, 0, 0xfe}, [6]byte{2, 0, 0, 0, 0, 0x0b}
	for _, n := range []struct {
		addr  string
		mac   [6]byte
		state int
	}{
		{"198.18.0.254", router, netlink.NUD_REACHABLE},
		{"198.18.0.253", router, netlink.NUD_STALE},
		{"2001:2::fe", router, netlink.NUD_PERMANENT},
		{"198.18.0.11", client, netlink.NUD_REACHABLE},
		{"198.18.0.12", [6]byte{2, 0, 0, 0, 0, 0x0c}, netlink.NUD_REACHABLE},
		{"198.18.0.13", client, netlink.NUD_FAILED},
	} {
		ip := netip.MustParseAddr(n.addr)
		fam := netlink.FAMILY_V4
		if ip.Is6() {
			fam = netlink.FAMILY_V6
		}
		if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: fam, State: n.state, IP: ip.AsSlice(),
			HardwareAddr: net.HardwareAddr(n.mac[:])}); err != nil {
			t.Fatalf("%s: %v", n.addr, err)
		}
	}
	rh, ch := lb.NATHop{Ifindex: idx, MAC: router}, lb.NATHop{Ifindex: idx, MAC: client}
	got, err := New().NeighborsAt([]lb.NATHop{rh, ch, {Ifindex: idx + 100, MAC: router}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[lb.NATHop][]netip.Addr{
		rh: {netip.MustParseAddr("198.18.0.253"), netip.MustParseAddr("198.18.0.254"), netip.MustParseAddr("2001:2::fe")},
		ch: {netip.MustParseAddr("198.18.0.11")},
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("neighbours %v, want %v", got, want)
	}
}
