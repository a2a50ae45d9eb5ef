//go:build linux

package netif

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

func mac(last byte) net.HardwareAddr { return net.HardwareAddr{0x02, 0, 0, 0, 0, last} }

// The state reports changes, and only changes.
func TestNetStateChanges(t *testing.T) {
	p := netip.MustParsePrefix("198.18.0.1/24")
	nb := netip.MustParseAddr("198.18.0.9")
	type step struct {
		do   func(s *netState) []lb.NetEvent
		want []lb.NetEvent
	}
	link := func(i int, name string, up, present bool) func(*netState) []lb.NetEvent {
		return func(s *netState) []lb.NetEvent { return s.setLink(i, linkState{name: name, up: up}, present) }
	}
	linkMAC := func(i int, m net.HardwareAddr) func(*netState) []lb.NetEvent {
		return func(s *netState) []lb.NetEvent {
			return s.setLink(i, linkState{name: "dlbh0", mac: m.String(), up: true}, true)
		}
	}
	addr := func(i int, present bool) func(*netState) []lb.NetEvent {
		return func(s *netState) []lb.NetEvent { return s.setAddr(i, p, present) }
	}
	neigh := func(i int, m net.HardwareAddr) func(*netState) []lb.NetEvent {
		return func(s *netState) []lb.NetEvent { return s.setNeigh(i, nb, m) }
	}
	ev := func(k lb.NetEventKind, i int, name string) lb.NetEvent {
		return lb.NetEvent{Kind: k, Ifindex: i, Ifname: name}
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"link lifecycle", []step{
			{link(3, "dlbh0", false, true), []lb.NetEvent{ev(lb.NetLinkAdded, 3, "dlbh0")}},
			{link(3, "dlbh0", false, true), nil}, // another attribute changed
			{link(3, "dlbh0", true, true), []lb.NetEvent{ev(lb.NetLinkUp, 3, "dlbh0")}},
			{link(3, "dlbh0", true, true), nil},
			{link(3, "dlbh0", false, true), []lb.NetEvent{ev(lb.NetLinkDown, 3, "dlbh0")}},
			{link(3, "dlbh9", false, true), []lb.NetEvent{ev(lb.NetLinkRemoved, 3, "dlbh0"), ev(lb.NetLinkAdded, 3, "dlbh9")}},
			{link(3, "", false, false), []lb.NetEvent{ev(lb.NetLinkRemoved, 3, "dlbh9")}},
			{link(3, "", false, false), nil},
			{link(4, "dlbh1", true, true), []lb.NetEvent{ev(lb.NetLinkAdded, 4, "dlbh1"), ev(lb.NetLinkUp, 4, "dlbh1")}},
		}},
		{"link MAC", []step{
			{linkMAC(3, mac(1)), []lb.NetEvent{ev(lb.NetLinkAdded, 3, "dlbh0"), ev(lb.NetLinkUp, 3, "dlbh0")}},
			{linkMAC(3, mac(1)), nil},
			{linkMAC(3, mac(2)), []lb.NetEvent{{Kind: lb.NetLinkMACChanged, Ifindex: 3, Ifname: "dlbh0", MAC: mac(2), OldMAC: mac(1)}}},
			{linkMAC(3, nil), nil}, // not reported (none read): kept
			{linkMAC(3, mac(3)), []lb.NetEvent{{Kind: lb.NetLinkMACChanged, Ifindex: 3, Ifname: "dlbh0", MAC: mac(3), OldMAC: mac(2)}}},
		}},
		{"addresses", []step{
			{link(3, "dlbh0", true, true), []lb.NetEvent{ev(lb.NetLinkAdded, 3, "dlbh0"), ev(lb.NetLinkUp, 3, "dlbh0")}},
			{addr(3, true), []lb.NetEvent{{Kind: lb.NetAddressAdded, Ifindex: 3, Ifname: "dlbh0", Prefix: p}}},
			{addr(3, true), nil}, // flags changed
			{addr(3, false), []lb.NetEvent{{Kind: lb.NetAddressRemoved, Ifindex: 3, Ifname: "dlbh0", Prefix: p}}},
			{addr(3, false), nil},
			{addr(3, true), []lb.NetEvent{{Kind: lb.NetAddressAdded, Ifindex: 3, Ifname: "dlbh0", Prefix: p}}},
			// Removing the interface forgets its address silently: it
			// may come back with the same index.
			{link(3, "", false, false), []lb.NetEvent{ev(lb.NetLinkRemoved, 3, "dlbh0")}},
			{addr(3, true), []lb.NetEvent{{Kind: lb.NetAddressAdded, Ifindex: 3, Prefix: p}}},
		}},
		{"neighbours", []step{
			{neigh(3, mac(9)), []lb.NetEvent{{Kind: lb.NetNeighborChanged, Ifindex: 3, Addr: nb, MAC: mac(9)}}},
			{neigh(3, mac(9)), nil}, // refreshed
			{neigh(3, mac(10)), []lb.NetEvent{{Kind: lb.NetNeighborChanged, Ifindex: 3, Addr: nb, MAC: mac(10), OldMAC: mac(9)}}},
			{neigh(3, nil), []lb.NetEvent{{Kind: lb.NetNeighborChanged, Ifindex: 3, Addr: nb, OldMAC: mac(10)}}},
			{neigh(3, nil), nil},
			{neigh(4, mac(10)), []lb.NetEvent{{Kind: lb.NetNeighborChanged, Ifindex: 4, Addr: nb, MAC: mac(10)}}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s netState
			for i, st := range tt.steps {
				if got := st.do(&s); !reflect.DeepEqual(got, st.want) {
					t.Errorf("step %d: %v, want %v", i, got, st.want)
				}
			}
		})
	}
}

// A resync reports the differences between what was known and the state
// read, removals included, in a stable order.
func TestNetStateReplace(t *testing.T) {
	p1, p2 := netip.MustParsePrefix("198.18.0.1/24"), netip.MustParsePrefix("2001:2::1/64")
	n1, n2 := netip.MustParseAddr("198.18.0.9"), netip.MustParseAddr("2001:2::9")
	var s netState
	s.setLink(2, linkState{name: "dlbh0", up: true}, true)
	s.setLink(5, linkState{name: "dlbh5", up: true}, true)
	s.setAddr(2, p1, true)
	s.setNeigh(2, n1, mac(9))
	s.setNeigh(2, n2, mac(1))
	snap := newNetState()
	snap.links[2] = linkState{name: "dlbh0", up: false}
	snap.links[7] = linkState{name: "dlbh7", up: true}
	snap.addrs[addrKey{2, p2}] = true
	snap.neighs[neighKey{2, n1}] = mac(10)
	got := s.replace(snap)
	want := []lb.NetEvent{
		{Kind: lb.NetLinkDown, Ifindex: 2, Ifname: "dlbh0"},
		{Kind: lb.NetLinkAdded, Ifindex: 7, Ifname: "dlbh7"},
		{Kind: lb.NetLinkUp, Ifindex: 7, Ifname: "dlbh7"},
		{Kind: lb.NetAddressRemoved, Ifindex: 2, Ifname: "dlbh0", Prefix: p1},
		{Kind: lb.NetAddressAdded, Ifindex: 2, Ifname: "dlbh0", Prefix: p2},
		{Kind: lb.NetNeighborChanged, Ifindex: 2, Ifname: "dlbh0", Addr: n2, OldMAC: mac(1)},
		{Kind: lb.NetNeighborChanged, Ifindex: 2, Ifname: "dlbh0", Addr: n1, MAC: mac(10), OldMAC: mac(9)},
		{Kind: lb.NetLinkRemoved, Ifindex: 5, Ifname: "dlbh5"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%v\nwant\n%v", got, want)
	}
	if again := s.replace(snap); len(again) != 0 {
		t.Errorf("replacing with the same state: %v", again)
	}
}

// watchFor waits (at most 3 s) for an event matching want, skipping
// others, and fails naming what it saw.
func watchFor(t *testing.T, ch <-chan lb.NetEvent, what string, want func(lb.NetEvent) bool) lb.NetEvent {
	t.Helper()
	var seen []string
	timeout := time.After(3 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("%s: the watch ended; saw %v", what, seen)
			}
			if want(ev) {
				return ev
			}
			seen = append(seen, ev.String())
		case <-timeout:
			t.Fatalf("%s: not reported within 3s; saw %v", what, seen)
		}
	}
}

// watchForAll waits (at most 3 s) for events matching each of want, in
// any order.
func watchForAll(t *testing.T, ch <-chan lb.NetEvent, want map[string]func(lb.NetEvent) bool) {
	t.Helper()
	var seen []string
	timeout := time.After(3 * time.Second)
	for len(want) > 0 {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the watch ended; saw %v", seen)
			}
			seen = append(seen, ev.String())
			for what, match := range want {
				if match(ev) {
					delete(want, what)
					break
				}
			}
		case <-timeout:
			var missing []string
			for what := range want {
				missing = append(missing, what)
			}
			t.Fatalf("not reported within 3s: %v; saw %v", missing, seen)
		}
	}
}

// quiet checks that no event matching match arrives within d.
func quiet(t *testing.T, ch <-chan lb.NetEvent, d time.Duration, what string, match func(lb.NetEvent) bool) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case ev := <-ch:
			if match(ev) {
				t.Errorf("%s: unexpected %v", what, ev)
			}
		case <-timeout:
			return
		}
	}
}

// TestPrivilegedWatch: in a network namespace of its own, the watch
// reports a veth created, set up, given and stripped of addresses (both
// families), its neighbours' MACs set and changed, set down and deleted;
// a neighbour refreshed with the same MAC is not reported; and the
// channel closes when the context ends.
func TestPrivilegedWatch(t *testing.T) {
	testutil.RequirePrivileged(t)
	testutil.InNewNetNS(t)
	ch, cancel := startWatch(t)
	const name = "dlbhw0"
	is := func(k lb.NetEventKind) func(lb.NetEvent) bool {
		return func(ev lb.NetEvent) bool { return ev.Kind == k && ev.Ifname == name }
	}

	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "dlbhw1"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	added := watchFor(t, ch, "veth added", is(lb.NetLinkAdded))
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	idx := l.Attrs().Index
	if added.Ifindex != idx {
		t.Errorf("added %v, want ifindex %d", added, idx)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	watchFor(t, ch, "veth up", is(lb.NetLinkUp))

	for _, s := range []string{"198.18.0.1/24", "2001:2::1/64"} {
		p := netip.MustParsePrefix(s)
		a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}, Flags: unix.IFA_F_NODAD}
		if err := netlink.AddrAdd(l, a); err != nil {
			t.Fatal(err)
		}
		watchFor(t, ch, s+" added", func(ev lb.NetEvent) bool {
			return ev.Kind == lb.NetAddressAdded && ev.Prefix == p && ev.Ifindex == idx && ev.Ifname == name
		})
	}

	for _, s := range []string{"198.18.0.9", "2001:2::9"} {
		nb := netip.MustParseAddr(s)
		family := netlink.FAMILY_V4
		if nb.Is6() {
			family = netlink.FAMILY_V6
		}
		setNeigh := func(m net.HardwareAddr) {
			t.Helper()
			if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: family, State: netlink.NUD_REACHABLE,
				IP: nb.AsSlice(), HardwareAddr: m}); err != nil {
				t.Fatal(err)
			}
		}
		neighIs := func(m net.HardwareAddr) func(lb.NetEvent) bool {
			return func(ev lb.NetEvent) bool {
				return ev.Kind == lb.NetNeighborChanged && ev.Addr == nb && ev.Ifindex == idx && ev.MAC.String() == m.String()
			}
		}
		setNeigh(mac(9))
		watchFor(t, ch, s+" MAC set", neighIs(mac(9)))
		setNeigh(mac(9))
		quiet(t, ch, 300*time.Millisecond, s+" refreshed with the same MAC", func(ev lb.NetEvent) bool { return ev.Kind == lb.NetNeighborChanged })
		start := time.Now()
		setNeigh(mac(10))
		watchFor(t, ch, s+" MAC changed", neighIs(mac(10)))
		t.Logf("%s: new MAC reported %v after the change", s, time.Since(start).Round(time.Microsecond))
		if err := netlink.NeighDel(&netlink.Neigh{LinkIndex: idx, Family: family, IP: nb.AsSlice()}); err != nil {
			t.Fatal(err)
		}
		watchFor(t, ch, s+" deleted", neighIs(nil))
	}

	// Routes: added, moved to another router, removed, each reported.
	for _, r := range []struct{ dst, via, other string }{
		{"198.18.5.0/24", "198.18.0.254", "198.18.0.253"},
		{"2001:2:5::/48", "2001:2::fe", "2001:2::fd"},
	} {
		p := netip.MustParsePrefix(r.dst)
		route := func(via string) *netlink.Route {
			return &netlink.Route{LinkIndex: idx, Dst: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())},
				Gw: netip.MustParseAddr(via).AsSlice()}
		}
		routeIs := func(ev lb.NetEvent) bool { return ev.Kind == lb.NetRouteChanged }
		for _, op := range []struct {
			name string
			do   func(*netlink.Route) error
			via  string
		}{{"added", netlink.RouteAdd, r.via}, {"moved to another router", netlink.RouteReplace, r.other}, {"removed", netlink.RouteDel, r.other}} {
			if err := op.do(route(op.via)); err != nil {
				t.Fatalf("route to %s %s: %v", r.dst, op.name, err)
			}
			watchFor(t, ch, "route to "+r.dst+" "+op.name, routeIs)
		}
	}

	p := netip.MustParsePrefix("198.18.0.1/24")
	if err := netlink.AddrDel(l, &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatal(err)
	}
	watchFor(t, ch, "address removed", func(ev lb.NetEvent) bool {
		return ev.Kind == lb.NetAddressRemoved && ev.Prefix == p && ev.Ifname == name
	})
	if err := netlink.LinkSetDown(l); err != nil {
		t.Fatal(err)
	}
	// The kernel drops the IPv6 address of an interface set down (the
	// fault of issue 9: dlbd must put a cluster address back). The two
	// come through different subscriptions, in either order.
	watchForAll(t, ch, map[string]func(lb.NetEvent) bool{
		"veth down": is(lb.NetLinkDown),
		"IPv6 address dropped on down": func(ev lb.NetEvent) bool {
			return ev.Kind == lb.NetAddressRemoved && ev.Prefix == netip.MustParsePrefix("2001:2::1/64") && ev.Ifname == name
		},
	})
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	watchFor(t, ch, "veth up again", is(lb.NetLinkUp))
	if err := netlink.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	removed := watchFor(t, ch, "veth removed", is(lb.NetLinkRemoved))
	if removed.Ifindex != idx {
		t.Errorf("removed %v, want ifindex %d", removed, idx)
	}
	// Recreated: a new interface of the same name.
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "dlbhw1"}); err != nil {
		t.Fatal(err)
	}
	again := watchFor(t, ch, "veth recreated", is(lb.NetLinkAdded))
	t.Logf("recreated as ifindex %d (was %d)", again.Ifindex, idx)

	cancel()
	deadline := time.After(3 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the channel is still open 3s after the context ended")
		}
	}
}

// startWatch starts a Watch in the calling thread's namespace, ended when
// the test ends or cancel is called.
func startWatch(t *testing.T) (<-chan lb.NetEvent, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := New().Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ch, cancel
}

func TestNetEventString(t *testing.T) {
	for ev, want := range map[string]lb.NetEvent{
		"link up dlbh0 (3)":                                    {Kind: lb.NetLinkUp, Ifindex: 3, Ifname: "dlbh0"},
		"address removed 2001:2::1/64 on dlbh0 (3)":            {Kind: lb.NetAddressRemoved, Ifindex: 3, Ifname: "dlbh0", Prefix: netip.MustParsePrefix("2001:2::1/64")},
		"neighbour changed 198.18.0.9 on 3: 02:00:00:00:00:09": {Kind: lb.NetNeighborChanged, Ifindex: 3, Addr: netip.MustParseAddr("198.18.0.9"), MAC: mac(9)},
		"neighbour changed 198.18.0.9 on 3: none":              {Kind: lb.NetNeighborChanged, Ifindex: 3, Addr: netip.MustParseAddr("198.18.0.9")},
		"resync":         {Kind: lb.NetResync},
		"routes changed": {Kind: lb.NetRouteChanged},
	} {
		if got := want.String(); got != ev {
			t.Errorf("%q, want %q", got, ev)
		}
	}
	if got := lb.NetEventKind(42).String(); !strings.Contains(got, "42") {
		t.Errorf("unknown kind: %q", got)
	}
}

// TestPrivilegedWatchResync: a burst of changes while the consumer does not
// read overflows the kernel's buffer; the watch subscribes again, reports
// NetResync and the differences, so that in the end every change is
// known: here, each of 3,000 neighbours' MAC.
func TestPrivilegedWatchResync(t *testing.T) {
	testutil.RequirePrivileged(t)
	testutil.InNewNetNS(t)
	idx, err := testutil.AddVethPair("dlbhr0", "dlbhr1")
	if err != nil {
		t.Fatal(err)
	}
	ch, _ := startWatch(t)
	const n = 3000
	want := map[netip.Addr]bool{}
	for i := range n {
		a := netip.AddrFrom4([4]byte{198, 18, byte(1 + i/250), byte(1 + i%250)})
		want[a] = true
		if err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: idx, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
			IP: a.AsSlice(), HardwareAddr: mac(byte(i))}); err != nil {
			t.Fatalf("adding neighbour %d: %v", i, err)
		}
	}
	resynced := false
	known := map[netip.Addr]bool{}
	timeout := time.After(10 * time.Second)
	for len(known) < n {
		select {
		case ev := <-ch:
			switch ev.Kind {
			case lb.NetResync:
				resynced = true
			case lb.NetNeighborChanged:
				if ev.Ifindex == idx && want[ev.Addr] && ev.MAC != nil {
					known[ev.Addr] = true
				}
			}
		case <-timeout:
			t.Fatalf("after 10s, %d of %d neighbours known (resynced: %v)", len(known), n, resynced)
		}
	}
	if !resynced {
		t.Log("the burst did not overflow the kernel's buffer: no resync happened (the test still checked every change arrived)")
	}
	t.Logf("all %d neighbours known; resynced: %v", n, resynced)
}

// TestPrivilegedWatchRouteBurst: a routing daemon loading a table changes
// thousands of routes a second. The watch reports them as a few
// NetRouteChanged events, the last after the last change, not one per
// route (each cost dlbd about 33 µs of CPU through the netlink package's
// route subscription: 30 s for a full Internet table).
func TestPrivilegedWatchRouteBurst(t *testing.T) {
	testutil.RequirePrivileged(t)
	testutil.InNewNetNS(t)
	const name, routes = "dlbhr0", 20000
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "dlbhr1"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{name, "dlbhr1"} {
		l, err := netlink.LinkByName(n)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	l, _ := netlink.LinkByName(name)
	if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(198, 18, 0, 1), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatal(err)
	}
	var batch strings.Builder
	for i := range routes {
		fmt.Fprintf(&batch, "route add 198.19.%d.%d/32 via 198.18.0.254 dev %s\n", i/256, i%256, name)
	}
	file := filepath.Join(t.TempDir(), "routes")
	if err := os.WriteFile(file, []byte(batch.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	ch, _ := startWatch(t)
	var mu sync.Mutex
	var events int
	var last time.Time
	go func() {
		for ev := range ch {
			if ev.Kind == lb.NetRouteChanged || ev.Kind == lb.NetResync {
				mu.Lock()
				events, last = events+1, time.Now()
				mu.Unlock()
			}
		}
	}()
	var before, after unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &before)
	start := time.Now()
	// ip runs in this thread's network namespace: the test's.
	if out, err := exec.Command("ip", "-batch", file).CombinedOutput(); err != nil {
		t.Fatalf("ip -batch: %v\n%s", err, out)
	}
	loaded := time.Now()
	time.Sleep(500 * time.Millisecond) // what is in flight arrives
	_ = unix.Getrusage(unix.RUSAGE_SELF, &after)
	mu.Lock()
	n, lastAt := events, last
	mu.Unlock()
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	t.Logf("%d routes added in %v: %d events, the last %v after the last route; this process's CPU %v (%.2f µs a route)",
		routes, loaded.Sub(start).Round(time.Millisecond), n, lastAt.Sub(loaded).Round(time.Millisecond), cpu.Round(time.Millisecond),
		float64(cpu.Microseconds())/routes)
	if n == 0 || n > routes/20 {
		t.Errorf("%d events for %d routes, want at least one and at most %d", n, routes, routes/20)
	}
	// And the watch goes on: one more route, one more event.
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: net.IPv4(198, 19, 255, 1), Mask: net.CIDRMask(32, 32)},
		Gw: net.IPv4(198, 18, 0, 254)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		mu.Lock()
		more := events > n
		mu.Unlock()
		if more {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a route added after the burst: not reported within 3s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
