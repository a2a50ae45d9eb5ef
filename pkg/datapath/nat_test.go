//go:build linux

package datapath

import (
	"bytes"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestPrivilegedSweepNAT: the sweeper expires NAT connections by the later
// of their two halves, frees their ports, removes orphaned halves and
// connections of removed backends, and reports pool use.
func TestPrivilegedSweepNAT(t *testing.T) {
	e := newTestEnv(t)
	e.clock = 401e9 // injected: just old enough for the oldest fixture
	k := func(sport uint16) FlowKey { return key(vipNAT, 80, sport, 6) }
	c := func(sport, port uint16, idle uint64, closing bool) natConn {
		return natConn{key: k(sport), backend: 60, service: 6, ret: retAddr, port: port, idle: idle, closing: closing}
	}
	e.putNAT(t, c(1, 40001, 10, false))  // live
	e.putNAT(t, c(2, 40002, 400, false)) // idle past staletimeout
	e.putNAT(t, c(3, 40003, 70, true))   // closing past fintimeout
	e.putNAT(t, c(4, 40004, 30, true))   // closing, not yet
	e.putNAT(t, c(5, 40005, 400, false)) // client side idle, but the server side is live
	e.putNAT(t, natConn{key: k(6), backend: 99, service: 6, ret: retAddr, port: 40006})
	// Make the server side of 5 live.
	rk := dispatcherNatKey{Port: htons(40005), Proto: 6, Family: 4}
	rk.Addr.Addr, _ = addrBytes(retAddr)
	r, ok, err := e.dp.getNATPort(rk)
	if err != nil || !ok {
		t.Fatalf("reading the nat_ports entry: %v (present %v)", err, ok)
	}
	r.LastSeen = e.now()
	if err := e.dp.putNATPort(rk, r); err != nil {
		t.Fatal(err)
	}
	// An orphaned port (its client side is gone).
	e.putNAT(t, c(7, 40007, 1, false))
	if removed, err := e.dp.deleteNATFlow(k(7).raw(), 0); err != nil || !removed {
		t.Fatalf("removing the client side: %v (removed %v)", err, removed)
	}

	before := e.stats(t).Backend(60).FinConns
	res, err := e.dp.sweep(e.clock)
	if err != nil {
		t.Fatal(err)
	}
	if res.Expired != 3 || res.Entries != 3 {
		t.Errorf("expired %d, left %d; want 3 and 3", res.Expired, res.Entries)
	}
	if res.Active[60] != 2 {
		t.Errorf("backend 60: %d active, want 2 (%v)", res.Active[60], res.Active)
	}
	// The orphaned port is kept for the grace (its client side could be
	// on its way from the active, see TestPrivilegedSweepNATHalvesApart).
	for port, taken := range map[uint16]bool{40001: true, 40002: false, 40003: false, 40004: true, 40005: true, 40006: false, 40007: true} {
		if got := e.natPortTaken(t, retAddr, port, 6); got != taken {
			t.Errorf("port %d taken %v, want %v", port, got, taken)
		}
	}
	if d := e.stats(t).Backend(60).FinConns - before; d != 1 {
		t.Errorf("backend 60 finished +%d, want +1 (the established connection that expired)", d)
	}
	if u := res.ReturnPools[retAddr]; u.Established != 3 || u.Size != 65535-1024+1 {
		t.Errorf("pool use of %s: %+v", retAddr, u)
	}
	// A sweep just short of the grace later keeps it; one the grace after
	// the first frees it, and nothing else.
	for _, step := range []struct {
		after uint64
		taken bool
	}{{natOrphanGrace - 1e9, true}, {natOrphanGrace, false}} {
		res, err := e.dp.sweep(e.clock + step.after)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.natPortTaken(t, retAddr, 40007, 6); got != step.taken || res.Expired != 0 || res.Entries != 3 {
			t.Errorf("%.0f s after: orphaned port taken %v, want %v (expired %d, left %d)", float64(step.after)/1e9, got, step.taken,
				res.Expired, res.Entries)
		}
	}
}

// TestPrivilegedSweepNATHalvesApart: replication can bring a NAT
// connection's two halves in successive batches (the active's scan read
// nat_flows before the data path inserted the flow, and nat_ports after it
// inserted the port). A sweep between them must keep the first half, in
// either order, and also when the port still belongs to an older
// connection the active has since freed it from: freed, the first half
// would not be sent again, and the connection would be lost on takeover
// (the second half freed in turn, as an orphan). The likely cause of a NAT
// connection the HA suite lost once (SIGKILL).
func TestPrivilegedSweepNATHalvesApart(t *testing.T) {
	e := newTestEnv(t)
	for i, tc := range []struct {
		name      string
		portFirst bool
		// reused: the standby still holds an older connection on the
		// same port when the new client side arrives.
		reused bool
	}{
		{name: "port first", portFirst: true},
		{name: "client side first"},
		{name: "client side first, its port still an older connection's", reused: true},
	} {
		key := key(vipNAT, 80, uint16(7000+i), 6)
		port := uint16(41000 + i)
		e.putNAT(t, natConn{key: key, backend: 60, service: 6, ret: retAddr, port: port, idle: 1})
		halves := scan(t, e, &lb.ConnScan{}, true, time.Hour)
		e.clearTables(t)
		var first, second []lb.ConnEntry
		for _, h := range halves {
			if (h.Kind == lb.ConnNATPort) == tc.portFirst {
				first = append(first, h)
			} else {
				second = append(second, h)
			}
		}
		if len(first) != 1 || len(second) != 1 {
			t.Fatalf("%s: scanned %+v, want one NAT flow and one NAT port", tc.name, halves)
		}
		old := key
		old.SrcPort += 100
		if tc.reused {
			e.putNAT(t, natConn{key: old, backend: 60, service: 6, ret: retAddr, port: port, idle: 50, closing: true})
		}
		now := monotonicNow()
		if n, err := e.dp.PutConns(first); err != nil || n != 1 {
			t.Fatalf("%s: writing the first half: %d, %v", tc.name, n, err)
		}
		if _, err := e.dp.sweep(now); err != nil {
			t.Fatal(err)
		}
		if n, err := e.dp.PutConns(second); err != nil || n != 1 {
			t.Fatalf("%s: writing the second half: %d, %v", tc.name, n, err)
		}
		// Two sweeps later, the grace long past: the connection is whole,
		// and the older connection's client side is gone.
		for _, at := range []uint64{now + 2e9, now + 2*natOrphanGrace} {
			if _, err := e.dp.sweep(at); err != nil {
				t.Fatal(err)
			}
		}
		if f, r, ok := e.getNAT(t, key); !ok || f.Backend != 60 || htons(r.ClientPort) != key.SrcPort {
			t.Errorf("%s: the connection after the sweeps: %+v %+v (present %v)", tc.name, f, r, ok)
		}
		if _, ok, err := e.dp.getNATFlow(old.raw()); err != nil || ok {
			t.Errorf("%s: the older connection's client side still there (%v)", tc.name, err)
		}
		e.clearTables(t)
	}
}

// TestPrivilegedHalfOpenCounts: half-open connections are counted per
// service (MAC: the handshake cache; NAT: the half-open table), completed
// handshakes stop counting, and stale NAT half-open entries are freed.
func TestPrivilegedHalfOpenCounts(t *testing.T) {
	e := newTestEnv(t)
	for sport := uint16(100); sport < 110; sport++ {
		e.run(t, tcpTo(vipTCP, 80, sport, "S").Build(t))
		e.run(t, tcpTo(vipNAT, 80, sport, "S").Build(t))
	}
	// Three MAC and two NAT handshakes complete.
	for sport := uint16(100); sport < 103; sport++ {
		e.run(t, tcpTo(vipTCP, 80, sport, "A").Build(t))
	}
	for sport := uint16(100); sport < 102; sport++ {
		e.run(t, tcpTo(vipNAT, 80, sport, "A").Build(t))
	}
	res, err := e.dp.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if res.HalfOpen[1] != 7 || res.HalfOpen[6] != 8 {
		t.Errorf("half-open: service 1 %d, service 6 %d; want 7 and 8 (%v)", res.HalfOpen[1], res.HalfOpen[6], res.HalfOpen)
	}
	if u := res.ReturnPools[retAddr]; u.HalfOpen != 8 || u.Established != 2 {
		t.Errorf("pool use %+v, want 8 half-open and 2 established", u)
	}
	// Thirty-one seconds later the half-open entries are stale.
	res, err = e.dp.sweep(monotonicNow() + 31e9)
	if err != nil {
		t.Fatal(err)
	}
	if res.HalfOpen[1] != 0 || res.HalfOpen[6] != 0 || res.ReturnPools[retAddr].HalfOpen != 0 {
		t.Errorf("stale half-open still counted: %v, %+v", res.HalfOpen, res.ReturnPools[retAddr])
	}
}

// TestPrivilegedSweepAffinity: affinity records are refreshed while their
// client is connected, expire after stickytime, go with their server, are
// counted per service and backend, and DropAffinity removes one backend's.
func TestPrivilegedSweepAffinity(t *testing.T) {
	e := newTestEnv(t)
	e.clock = 71e9 // injected: just old enough for the oldest fixture
	c1 := netip.MustParseAddr("198.18.5.1")
	c2 := netip.MustParseAddr("198.18.6.1")
	c3 := netip.MustParseAddr("198.18.7.1")
	c4 := netip.MustParseAddr("198.18.8.1")
	e.putAffinity(t, c1, 14, 90, 50) // live
	e.putAffinity(t, c2, 14, 91, 70) // expired...
	e.putAffinity(t, c3, 14, 91, 70) // ...but its client is still connected
	e.putConn(t, conn{key: FlowKey{Src: c3, Dst: vipAff, SrcPort: 1, DstPort: 80, Proto: 6}, backend: 91, service: 14, idle: 5})
	e.putAffinity(t, c4, 15, 92, 10) // live, on the crossport service
	res, err := e.dp.sweep(e.clock)
	if err != nil {
		t.Fatal(err)
	}
	if res.AffinityExpired != 1 {
		t.Errorf("%d records expired, want 1", res.AffinityExpired)
	}
	if res.AffinityServices[14] != 2 || res.AffinityServices[15] != 1 || res.AffinityBackends[90] != 1 || res.AffinityBackends[91] != 1 || res.AffinityBackends[92] != 1 {
		t.Errorf("records per service %v, per backend %v", res.AffinityServices, res.AffinityBackends)
	}
	if r, ok := e.affinityOf(t, c3, 14); !ok || e.clock-r.LastSeen > 10e9 {
		t.Errorf("connected client's record %+v (present %v) was not refreshed", r, ok)
	}
	if _, ok := e.affinityOf(t, c2, 14); ok {
		t.Error("expired record left")
	}

	// quiesce --now: drop backend 90's records.
	if n, err := e.dp.DropAffinity(90); err != nil || n != 1 {
		t.Errorf("DropAffinity(90) = %d, %v; want 1", n, err)
	}
	if _, ok := e.affinityOf(t, c1, 14); ok {
		t.Error("backend 90's record left")
	}

	// Removing a server drops its records.
	st := e.fixtureState()
	for i, b := range st.Backends {
		if b.ID == 92 {
			st.Backends = append(st.Backends[:i], st.Backends[i+1:]...)
			break
		}
	}
	if err := e.dp.Apply(st); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.affinityOf(t, c4, 15); ok {
		t.Error("removed server's record left")
	}
	if _, ok := e.affinityOf(t, c3, 14); !ok {
		t.Error("another server's record was dropped")
	}
}

// TestPrivilegedNATTableFull: full NAT tables refuse new connections
// cleanly (counted) and never evict a live mapping.
func TestPrivilegedNATTableFull(t *testing.T) {
	testutil.RequirePrivileged(t)
	e := openTestEnv(t, Options{ConnTableSize: 4096, NATTableSize: 8})
	var live []FlowKey
	for sport := uint16(1); sport <= 8; sport++ {
		if v, _ := e.run(t, udpTo(vipNAT, 53, sport).Build(t)); v != xdpTX {
			t.Fatalf("flow %d: verdict %d", sport, v)
		}
		live = append(live, key(vipNAT, 53, sport, 17))
	}
	before := e.stats(t)
	if v, _ := e.run(t, udpTo(vipNAT, 53, 100).Build(t)); v != xdpDrop {
		t.Errorf("UDP flow beyond the table: verdict %d, want drop", v)
	}
	// A TCP handshake: the SYN is half-open, the ACK cannot be promoted.
	e.run(t, tcpTo(vipNAT, 80, 100, "S").Build(t))
	if v, _ := e.run(t, tcpTo(vipNAT, 80, 100, "A").Build(t)); v != xdpDrop {
		t.Errorf("handshake ACK into a full table: verdict %d, want drop", v)
	}
	after := e.stats(t)
	if d := reasonDelta(before, after, "drop_table_full"); d != 2 {
		t.Errorf("drop_table_full +%d, want +2", d)
	}
	if d := after.Events["nat_table_full"] - before.Events["nat_table_full"]; d != 2 {
		t.Errorf("nat_table_full +%d, want +2", d)
	}
	for _, k := range live {
		if _, _, ok := e.getNAT(t, k); !ok {
			t.Errorf("live mapping %v was lost", k)
		}
	}
	if _, _, ok := e.halfOpen(t, key(vipNAT, 80, 100, 6)); ok {
		t.Error("the refused connection keeps its port reserved")
	}
}

func reasonDelta(before, after lb.DataplaneStats, reason string) uint64 {
	for i, r := range after.Reasons {
		if r.Reason == reason {
			return r.Packets - before.Reasons[i].Packets
		}
	}
	return 0
}

// TestPrivilegedApplyRefusesBadNAT: invalid NAT configurations are refused
// whole.
func TestPrivilegedApplyRefusesBadNAT(t *testing.T) {
	e := newTestEnv(t)
	for name, mutate := range map[string]func(*lb.Dataplane){
		"no return address": func(dp *lb.Dataplane) {
			for i := range dp.Backends {
				if dp.Backends[i].ID == 60 {
					dp.Backends[i].ReturnAddress = netip.Addr{}
				}
			}
		},
		"return address is the NFA": func(dp *lb.Dataplane) {
			for i := range dp.Backends {
				if dp.Backends[i].ID == 60 {
					dp.Backends[i].ReturnAddress = nfaAddr
				}
			}
		},
		"return address is a cluster address": func(dp *lb.Dataplane) {
			for i := range dp.Backends {
				if dp.Backends[i].ID == 60 {
					dp.Backends[i].ReturnAddress = vipTCP
				}
			}
		},
		"return address of another family": func(dp *lb.Dataplane) {
			for i := range dp.Backends {
				if dp.Backends[i].ID == 60 {
					dp.Backends[i].ReturnAddress = ret6
				}
			}
		},
		"empty pool": func(dp *lb.Dataplane) {
			dp.ReturnPools = []lb.DataplaneReturnPool{{Address: retAddr, PortMin: 2000, PortMax: 1000}}
		},
		"bad gateway":   func(dp *lb.Dataplane) { dp.ClientGateway.MAC = dp.ClientGateway.MAC[:3] },
		"two IPv6 NFAs": func(dp *lb.Dataplane) { dp.NFA = netip.MustParseAddr("2001:2::3") },
	} {
		dp := e.fixtureState()
		mutate(&dp)
		if err := e.dp.Apply(dp); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	// Nothing changed: the fixture still forwards.
	if v, _ := e.run(t, tcpTo(vipNAT, 80, 1, "S").Build(t)); v != xdpTX {
		t.Errorf("verdict %d after refused changes", v)
	}
}

// newRoutedEnv is a test environment without client gateways, whose NAT
// replies go to the next hop the routing table gives: the client subnets
// are on the dummy interface, where clientAddr's and client6's MAC is
// clientMAC.
func newRoutedEnv(t *testing.T) (e *testEnv, link netlink.Link, clientMAC net.HardwareAddr) {
	t.Helper()
	e = newTestEnv(t)
	st := e.fixtureState()
	st.ClientGateway, st.ClientGateway6 = lb.DataplaneNextHop{}, lb.DataplaneNextHop{}
	if err := e.dp.Apply(st); err != nil {
		t.Fatal(err)
	}
	// The client subnets are on dlbdp0, where one client's MAC is known.
	clientMAC = mac(0x55)
	var err error
	link, err = netlink.LinkByIndex(e.dummy)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"198.18.1.1/24", "2001:2:0:1::1/64"} {
		addr, _ := netlink.ParseAddr(a)
		addr.Flags = unix.IFA_F_NODAD
		if err := netlink.AddrAdd(link, addr); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []netip.Addr{clientAddr, client6} {
		n := &netlink.Neigh{LinkIndex: e.dummy, State: netlink.NUD_PERMANENT, IP: c.AsSlice(), HardwareAddr: clientMAC}
		if c.Is6() {
			n.Family = netlink.FAMILY_V6
		}
		if err := netlink.NeighAdd(n); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"/proc/sys/net/ipv4/conf/all/forwarding", "/proc/sys/net/ipv6/conf/all/forwarding"} {
		if err := os.WriteFile(f, []byte("1"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return e, link, clientMAC
}

// TestPrivilegedNATRoutingNextHop: without a client gateway, a NAT reply
// goes to the next hop the routing table gives, looked up once per
// connection; an unresolved neighbour passes the translated reply to the
// host stack, and no route drops it.
func TestPrivilegedNATRoutingNextHop(t *testing.T) {
	e, link, clientMAC := newRoutedEnv(t)

	reply := func(port uint16) []byte {
		return testutil.Frame{Src: natServer, Dst: retAddr, Proto: "tcp", SrcPort: 8080, DstPort: port, Flags: "PA", Payload: []byte("srv")}.Build(t)
	}
	cases := []struct {
		name   string
		client netip.Addr
		port   uint16
		want   uint32
		reason string
		mac    net.HardwareAddr // expected destination MAC; nil: not rewritten
		fibs   uint64
	}{
		{"resolved neighbour: redirected to it", clientAddr, 45000, xdpRedirect, "fwd_redirect", clientMAC, 1},
		{"the next hop is cached in the connection", clientAddr, 45000, xdpRedirect, "fwd_redirect", clientMAC, 0},
		{"unresolved neighbour: translated and passed", netip.MustParseAddr("198.18.1.11"), 45001, xdpPass, "pass_no_neigh", nil, 1},
		{"no route: dropped", netip.MustParseAddr("198.19.200.1"), 45002, xdpDrop, "drop_no_route", nil, 1},
	}
	// No subtests: the packets must run on this goroutine's thread, in
	// the test's network namespace, whose routes the lookups read.
	for _, c := range cases {
		func() {
			t := &namedT{t, c.name}
			k := FlowKey{Src: c.client, Dst: vipNAT, SrcPort: 5500, DstPort: 80, Proto: 6}
			if _, _, ok := e.getNAT(t, k); !ok {
				e.putNAT(t, natConn{key: k, backend: 60, service: 6, ret: retAddr, port: c.port})
			}
			before := e.stats(t)
			in := reply(c.port)
			v, out := e.run(t, in)
			after := e.stats(t)
			if v != c.want {
				t.Errorf("verdict %d, want %d", v, c.want)
			}
			if d := reasonDelta(before, after, c.reason); d != 1 {
				t.Errorf("reason %s +%d, want +1", c.reason, d)
			}
			if d := after.Events["fib_lookup"] - before.Events["fib_lookup"]; d != c.fibs {
				t.Errorf("fib lookups +%d, want +%d", d, c.fibs)
			}
			if c.mac != nil && (!bytes.Equal(out[0:6], c.mac) || !bytes.Equal(out[6:12], link.Attrs().HardwareAddr)) {
				t.Errorf("MACs %x -> %x, want %s -> %s", out[6:12], out[0:6], link.Attrs().HardwareAddr, c.mac)
			}
			if c.want != xdpDrop {
				want := testutil.Frame{Src: vipNAT, Dst: c.client, Proto: "tcp", SrcPort: 80, DstPort: 5500, Flags: "PA", Payload: []byte("srv")}.Build(t)
				if !bytes.Equal(out[12:], want[12:]) {
					t.Errorf("not translated:\n got %x\nwant %x", out[12:], want[12:])
				}
			}
		}()
	}

	// IPv6: the same through the IPv6 routing table.
	k := FlowKey{Src: client6, Dst: vip6NAT, SrcPort: 5501, DstPort: 80, Proto: 6}
	e.putNAT(t, natConn{key: k, backend: 80, service: 12, ret: ret6, port: 45003})
	in := testutil.Frame{Src: nat6Server, Dst: ret6, Proto: "tcp", SrcPort: 8080, DstPort: 45003, Flags: "PA"}.Build(t)
	if v, out := e.run(t, in); v != xdpRedirect || !bytes.Equal(out[0:6], clientMAC) {
		t.Errorf("IPv6 reply: verdict %d to %x, want a redirect to %s", v, out[0:6], clientMAC)
	}
}

// TestPrivilegedNATHopCheckedAtACK: the next hop a NAT handshake's
// SYN-ACK looked up towards its client is kept at the ACK only when the
// ACK came in through that hop's interface. An ACK from another interface
// (routing is asymmetric, or the interface was deleted and created again
// with a new index during the handshake, which dlbd's sweep of nat_ports
// cannot see) leaves the connection without a hop, and its first reply
// looks it up again.
func TestPrivilegedNATHopCheckedAtACK(t *testing.T) {
	e, _, clientMAC := newRoutedEnv(t)
	cases := []struct {
		name  string
		sport uint16
		ackOn int    // the ACK's ingress interface
		fibs  uint64 // lookups at the first reply after the ACK
	}{
		{"ACK through the hop's interface: hop kept", 3200, e.dummy, 0},
		{"ACK through another interface: looked up again", 3201, 1, 1},
	}
	for _, c := range cases {
		t := &namedT{t, c.name}
		k := key(vipNAT, 80, c.sport, 6)
		port := natPort(k, 0, 1024, 65535)
		fromServer := func(flags string) []byte {
			return testutil.Frame{Src: natServer, Dst: retAddr, Proto: "tcp", SrcPort: 8080, DstPort: port, Flags: flags, Payload: []byte("srv")}.Build(t)
		}
		if v, _ := e.run(t, tcpTo(vipNAT, 80, c.sport, "S").Build(t)); v != xdpTX {
			t.Fatalf("SYN: verdict %d", v)
		}
		before := e.stats(t)
		if v, out := e.run(t, fromServer("SA")); v != xdpRedirect || !bytes.Equal(out[0:6], clientMAC) {
			t.Fatalf("SYN-ACK: verdict %d to %x, want a redirect to %s", v, out[0:6], clientMAC)
		}
		if d := e.stats(t).Events["fib_lookup"] - before.Events["fib_lookup"]; d != 1 {
			t.Errorf("SYN-ACK: fib lookups +%d, want +1", d)
		}
		before = e.stats(t)
		if v := e.runOn(t, tcpTo(vipNAT, 80, c.sport, "A").Build(t), c.ackOn); v != xdpTX && v != xdpRedirect {
			t.Fatalf("ACK: verdict %d", v)
		}
		if d := e.stats(t).Events["halfopen_promoted"] - before.Events["halfopen_promoted"]; d != 1 {
			t.Fatalf("ACK: %d half-open connections promoted, want 1", d)
		}
		for i, want := range []uint64{c.fibs, 0} {
			before = e.stats(t)
			if v, out := e.run(t, fromServer("PA")); v != xdpRedirect || !bytes.Equal(out[0:6], clientMAC) {
				t.Errorf("reply %d: verdict %d to %x, want a redirect to %s", i+1, v, out[0:6], clientMAC)
			}
			if d := e.stats(t).Events["fib_lookup"] - before.Events["fib_lookup"]; d != want {
				t.Errorf("reply %d: fib lookups +%d, want +%d", i+1, d, want)
			}
		}
	}
	// The sweep counts the connections that cache each hop: dlbd verifies
	// the MACs of the neighbours they name.
	res, err := e.dp.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	want := map[lb.NATHop]int{{Ifindex: e.dummy, MAC: [6]byte(clientMAC)}: len(cases)}
	if !maps.Equal(res.NATHops, want) {
		t.Errorf("swept NAT hops %v, want %v", res.NATHops, want)
	}
}

// TestPrivilegedNATHopFollowsRoutes: a NAT connection's next hop towards
// its client, cached in the half-open slot and then in nat_ports, is kept
// while the routes stay as they are, and looked up again (once) at the
// next reply after RoutesChanged says they may have changed: a route to the
// client moved to another router, or back.
func TestPrivilegedNATHopFollowsRoutes(t *testing.T) {
	e, link, clientMAC := newRoutedEnv(t)
	routerMAC := mac(0x66)
	// No subtests: the packets must run on this goroutine's thread, in
	// the test's network namespace, whose routes the lookups read.
	for _, fam := range []struct {
		name                         string
		client, vip, server, ret, gw netip.Addr
		family                       int
	}{
		{"IPv4", clientAddr, vipNAT, natServer, retAddr, netip.MustParseAddr("198.18.1.254"), netlink.FAMILY_V4},
		{"IPv6", client6, vip6NAT, nat6Server, ret6, netip.MustParseAddr("2001:2:0:1::fe"), netlink.FAMILY_V6},
	} {
		if err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: e.dummy, Family: fam.family, State: netlink.NUD_PERMANENT,
			IP: fam.gw.AsSlice(), HardwareAddr: routerMAC}); err != nil {
			t.Fatal(err)
		}
		bits := fam.client.BitLen()
		viaRouter := &netlink.Route{LinkIndex: e.dummy, Dst: &net.IPNet{IP: fam.client.AsSlice(), Mask: net.CIDRMask(bits, bits)}, Gw: fam.gw.AsSlice()}
		addRoute := func() {
			if err := netlink.RouteAdd(viaRouter); err != nil {
				t.Fatal(err)
			}
		}
		delRoute := func() {
			if err := netlink.RouteDel(viaRouter); err != nil {
				t.Fatal(err)
			}
		}
		changed := func() {
			if err := e.dp.RoutesChanged(); err != nil {
				t.Fatal(err)
			}
		}
		const sport = 3400
		fromClient := func(flags string) []byte {
			return testutil.Frame{Src: fam.client, Dst: fam.vip, Proto: "tcp", SrcPort: sport, DstPort: 80, Flags: flags, Payload: []byte("dlb")}.Build(t)
		}
		port := natPort(FlowKey{Src: fam.client, Dst: fam.vip, SrcPort: sport, DstPort: 80, Proto: 6}, 0, 1024, 65535)
		fromServer := func(flags string) []byte {
			return testutil.Frame{Src: fam.server, Dst: fam.ret, Proto: "tcp", SrcPort: 8080, DstPort: port, Flags: flags, Payload: []byte("srv")}.Build(t)
		}
		steps := []struct {
			name   string
			before []func() // done before the frame is sent
			in     []byte
			ackOn  int              // the frame's ingress interface; 0: loopback
			to     net.HardwareAddr // the destination MAC of a redirected frame
			fibs   uint64
		}{
			{"SYN", nil, fromClient("S"), 0, nil, 0},
			{"SYN-ACK: looked up", nil, fromServer("SA"), 0, clientMAC, 1},
			{"route moved, not said: SYN-ACK cached", []func(){addRoute}, fromServer("SA"), 0, clientMAC, 0},
			{"routes changed: SYN-ACK looked up again", []func(){changed}, fromServer("SA"), 0, routerMAC, 1},
			{"ACK: promoted with its hop", nil, fromClient("A"), e.dummy, nil, 0},
			{"reply: the hop promoted", nil, fromServer("PA"), 0, routerMAC, 0},
			{"route moved back, said: reply looked up again", []func(){delRoute, changed}, fromServer("PA"), 0, clientMAC, 1},
			{"reply: cached again", nil, fromServer("PA"), 0, clientMAC, 0},
			{"routes said changed, unchanged: looked up once", []func(){changed}, fromServer("PA"), 0, clientMAC, 1},
		}
		for _, st := range steps {
			for _, f := range st.before {
				f()
			}
			before := e.stats(t)
			var v uint32
			var out []byte
			if st.ackOn != 0 {
				v = e.runOn(t, st.in, st.ackOn)
			} else {
				v, out = e.run(t, st.in)
			}
			switch {
			case st.to == nil && v != xdpTX && v != xdpRedirect:
				t.Fatalf("%s: %s: verdict %d", fam.name, st.name, v)
			case st.to != nil && (v != xdpRedirect || !bytes.Equal(out[0:6], st.to) || !bytes.Equal(out[6:12], link.Attrs().HardwareAddr)):
				t.Fatalf("%s: %s: verdict %d to %x, want a redirect to %s", fam.name, st.name, v, out[0:6], st.to)
			}
			if d := e.stats(t).Events["fib_lookup"] - before.Events["fib_lookup"]; d != st.fibs {
				t.Errorf("%s: %s: fib lookups +%d, want +%d", fam.name, st.name, d, st.fibs)
			}
		}
	}
}

// TestPrivilegedNATHopForgottenAtSYNRetransmit: a retransmitted SYN says
// the SYN-ACK may not have reached the client through the hop it cached
// (the neighbour's MAC changed, or its interface was recreated): the
// next SYN-ACK looks the hop up again, and caches it.
func TestPrivilegedNATHopForgottenAtSYNRetransmit(t *testing.T) {
	e, _, clientMAC := newRoutedEnv(t)
	const sport = 3300
	k := key(vipNAT, 80, sport, 6)
	port := natPort(k, 0, 1024, 65535)
	synAck := testutil.Frame{Src: natServer, Dst: retAddr, Proto: "tcp", SrcPort: 8080, DstPort: port, Flags: "SA"}.Build(t)
	syn := tcpTo(vipNAT, 80, sport, "S").Build(t)
	steps := []struct {
		name string
		in   []byte
		want uint32
		fibs uint64
	}{
		{"SYN", syn, xdpTX, 0},
		{"SYN-ACK: looked up", synAck, xdpRedirect, 1},
		{"SYN-ACK again: cached", synAck, xdpRedirect, 0},
		{"SYN retransmitted", syn, xdpTX, 0},
		{"SYN-ACK after it: looked up again", synAck, xdpRedirect, 1},
		{"SYN-ACK again: cached again", synAck, xdpRedirect, 0},
	}
	for _, st := range steps {
		before := e.stats(t)
		v, out := e.run(t, st.in)
		after := e.stats(t)
		if v != st.want || (v == xdpRedirect && !bytes.Equal(out[0:6], clientMAC)) {
			t.Fatalf("%s: verdict %d to %x, want %d", st.name, v, out[0:6], st.want)
		}
		if d := after.Events["fib_lookup"] - before.Events["fib_lookup"]; d != st.fibs {
			t.Errorf("%s: fib lookups +%d, want +%d", st.name, d, st.fibs)
		}
	}
	if n := e.stats(t).Events["halfopen_retransmit"]; n != 1 {
		t.Errorf("%d retransmitted SYNs counted, want 1", n)
	}
}

// namedT prefixes a test's errors with a case name.
type namedT struct {
	*testing.T
	name string
}

func (t *namedT) Errorf(format string, args ...any) {
	t.Helper()
	t.T.Errorf("%s: "+format, append([]any{t.name}, args...)...)
}

// TestPrivilegedForgetStaleHops: a NAT entry's cached next hop towards
// its client is cleared when its interface is gone (a recreated
// interface has a new index), or when its neighbour's MAC changed, and
// kept otherwise; entries without a cached hop are left alone.
func TestPrivilegedForgetStaleHops(t *testing.T) {
	e := newTestEnv(t)
	const gone, here = 4242, 7
	oldMAC, otherMAC := [6]uint8{2, 0, 0, 0, 0, 1}, [6]uint8{2, 0, 0, 0, 0, 2}
	portKey := func(port uint16) dispatcherNatKey {
		rk := dispatcherNatKey{Port: htons(port), Proto: 6, Family: 4}
		rk.Addr.Addr, _ = addrBytes(retAddr)
		return rk
	}
	cached := hopCached
	hops := map[uint16]dispatcherNextHop{
		40001: {Mac: oldMAC, Ifindex: gone},
		40002: {Mac: oldMAC, Ifindex: here},
		40003: {Mac: otherMAC, Ifindex: here},
		40004: {}, // none cached
	}
	for port, hop := range hops {
		e.putNAT(t, natConn{key: key(vipNAT, 80, port-40000, 6), backend: 60, service: 6, ret: retAddr, port: port})
		r, ok, err := e.dp.getNATPort(portKey(port))
		if err != nil || !ok {
			t.Fatalf("reading the nat_ports entry: %v (present %v)", err, ok)
		}
		if hop.Ifindex != 0 {
			r.Flags |= cached
			r.Hop = hop
		}
		if err := e.dp.putNATPort(portKey(port), r); err != nil {
			t.Fatal(err)
		}
	}
	ifGone := func(h dispatcherNextHop) bool { return h.Ifindex == gone }
	macMoved := func(ifindex int, mac net.HardwareAddr) bool {
		return ifindex == here && bytes.Equal(mac, oldMAC[:])
	}
	for _, pass := range []struct {
		name   string
		forget func() (int, error)
		n      int
		left   []uint16 // ports whose hop is still cached
	}{
		{"interface gone", func() (int, error) { return e.dp.forgetHops(ifGone) }, 1, []uint16{40002, 40003}},
		{"interface gone, again", func() (int, error) { return e.dp.forgetHops(ifGone) }, 0, []uint16{40002, 40003}},
		{"a neighbour's MAC moved", func() (int, error) { return e.dp.ForgetHopsTo(macMoved) }, 1, []uint16{40003}},
		{"a neighbour's MAC moved, again", func() (int, error) { return e.dp.ForgetHopsTo(macMoved) }, 0, []uint16{40003}},
	} {
		if n, err := pass.forget(); err != nil || n != pass.n {
			t.Errorf("%s: forgot %d hops (%v), want %d", pass.name, n, err, pass.n)
		}
		for port, hop := range hops {
			want := dispatcherNextHop{}
			if slices.Contains(pass.left, port) {
				want = hop
			}
			r, ok, err := e.dp.getNATPort(portKey(port))
			if err != nil || !ok {
				t.Fatalf("%s: port %d: %v (present %v)", pass.name, port, err, ok)
			}
			if r.Hop != want || (r.Flags&cached != 0) != (want.Ifindex != 0) {
				t.Errorf("%s: port %d: flags %#x hop %+v, want hop %+v", pass.name, port, r.Flags, r.Hop, want)
			}
			if r.Backend != 60 || r.Service != 6 {
				t.Errorf("%s: port %d: the rest of the entry changed: %+v", pass.name, port, r)
			}
		}
	}
}

// TestPrivilegedForgetHopKeepsTheRest: clearing a stale hop writes only
// the hop: what the data path changed in the entry since the scan read
// it (closing, a reply's time) stays, and a hop cached anew since is not
// cleared.
func TestPrivilegedForgetHopKeepsTheRest(t *testing.T) {
	e := newTestEnv(t)
	oldMAC := [6]uint8{2, 0, 0, 0, 0, 1}
	const ifindex = 7
	portKey := func(port uint16) dispatcherNatKey {
		rk := dispatcherNatKey{Port: htons(port), Proto: 6, Family: 4}
		rk.Addr.Addr, _ = addrBytes(retAddr)
		return rk
	}
	cached := hopCached
	for _, c := range []struct {
		name    string
		since   func(r *dispatcherNatRev) // what the data path did after the scan
		cleared bool
	}{
		{"closed and refreshed since", func(r *dispatcherNatRev) {
			r.State, r.LastSeen = uint8(dispatcherFlowStateFLOW_CLOSING), r.LastSeen+1e9
		}, true},
		{"a new hop cached since", func(r *dispatcherNatRev) { r.Hop.Mac[5] = 9 }, false},
	} {
		const port = 40010
		e.putNAT(t, natConn{key: key(vipNAT, 80, 10, 6), backend: 60, service: 6, ret: retAddr, port: port})
		r, ok, err := e.dp.getNATPort(portKey(port))
		if err != nil || !ok {
			t.Fatalf("%s: reading the nat_ports entry: %v (present %v)", c.name, err, ok)
		}
		r.Flags |= cached
		r.Hop = dispatcherNextHop{Mac: oldMAC, Ifindex: ifindex}
		if err := e.dp.putNATPort(portKey(port), r); err != nil {
			t.Fatal(err)
		}
		want := r
		n, err := e.dp.forgetHops(func(h dispatcherNextHop) bool {
			if h.Mac != oldMAC {
				return false
			}
			// The entry was read: the data path changes it now (at
			// each call: a clearing that read it again since would
			// write back an older copy).
			c.since(&want)
			if err := e.dp.putNATPort(portKey(port), want); err != nil {
				t.Fatal(err)
			}
			return true
		})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.cleared {
			want.Flags &^= cached
			want.Hop = dispatcherNextHop{}
		}
		got, ok, err := e.dp.getNATPort(portKey(port))
		if err != nil || !ok {
			t.Fatalf("%s: reading the entry again: %v (present %v)", c.name, err, ok)
		}
		if got != want || (n == 1) != c.cleared {
			t.Errorf("%s: cleared %d, entry %+v, want %+v", c.name, n, got, want)
		}
		e.clearTables(t)
	}
}

// TestOnceEach: ForgetStaleHops asks the host about each interface once,
// however many NAT entries cached a hop through it.
func TestOnceEach(t *testing.T) {
	asked := map[uint32]int{}
	live := onceEach(func(ifindex uint32) bool { asked[ifindex]++; return ifindex != 3 })
	for _, i := range []uint32{2, 3, 2, 2, 3, 5} {
		if got := live(i); got != (i != 3) {
			t.Errorf("live(%d) = %v", i, got)
		}
	}
	if want := map[uint32]int{2: 1, 3: 1, 5: 1}; !maps.Equal(asked, want) {
		t.Errorf("asked %v, want %v", asked, want)
	}
}

// TestPrivilegedNATPoolInHeavyUse: a return address's pool half held by
// established connections, then filled to 80 % by new ones, refuses none
// of them. The first DLB_NAT_CANDIDATES candidates alone would have
// refused every flow whose candidates were all held (one in 256 at half,
// one in 6 at 80 %; a retransmitted SYN tries the same ports): the test
// counts those flows with the Go twin of the candidate sequence and
// requires some, so that it shows the later candidates at work.
func TestPrivilegedNATPoolInHeavyUse(t *testing.T) {
	e := newTestEnv(t)
	const min, max = 40000, 40000 + 1023
	st := e.fixtureState()
	st.ReturnPools = []lb.DataplaneReturnPool{{Address: retSmall, PortMin: min, PortMax: max}}
	if err := e.dp.Apply(st); err != nil {
		t.Fatal(err)
	}
	held := map[uint16]bool{}
	for p := uint16(min); p <= max; p += 2 {
		c := natConn{key: key(vipNATSmall, 80, p, 6), backend: 62, service: 8, ret: retSmall, port: p}
		c.key.Src = netip.MustParseAddr("198.18.1.97")
		e.putNAT(t, c)
		held[p] = true
	}
	const conns = 307 // from 512 held of 1024 to 819 (80 %)
	beyond := 0
	for i := 0; i < conns; i++ {
		sport := uint16(20000 + i)
		k := key(vipNATSmall, 80, sport, 6)
		cands := NATCandidates(k, DefaultHashSeed, min, max)
		all := true
		for _, p := range cands[:dispatcherDlbConstsDLB_NAT_CANDIDATES] {
			all = all && held[p]
		}
		if all {
			beyond++
		}
		v, out := e.run(t, tcpTo(vipNATSmall, 80, sport, "S").Build(t))
		if v != xdpTX {
			t.Fatalf("connection %d (%d of %d ports held): SYN verdict %d, want XDP_TX", i, len(held), max-min+1, v)
		}
		port := uint16(out[34])<<8 | uint16(out[35]) // the TCP source port, after 14 + 20 bytes
		if held[port] {
			t.Fatalf("connection %d: port %d handed out twice", i, port)
		}
		if v, _ := e.run(t, tcpTo(vipNATSmall, 80, sport, "A").Build(t)); v != xdpTX {
			t.Fatalf("connection %d: ACK verdict %d, want XDP_TX", i, v)
		}
		if f, _, ok := e.getNAT(t, k); !ok || htons(f.NatPort) != port {
			t.Fatalf("connection %d: established %v on port %d, want port %d", i, ok, htons(f.NatPort), port)
		}
		held[port] = true
	}
	t.Logf("%d connections, %d of them with all of their first %d candidates held; the pool ends %d of %d held",
		conns, beyond, dispatcherDlbConstsDLB_NAT_CANDIDATES, len(held), max-min+1)
	if beyond == 0 {
		t.Error("no connection needed a later candidate: the test shows nothing")
	}
	res, err := e.dp.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if u := res.ReturnPools[retSmall]; int(u.Established) != len(held) || u.Size != max-min+1 {
		t.Errorf("pool use %+v, want %d established of %d", u, len(held), max-min+1)
	}
}

// TestPrivilegedNATHandshakeSurvivesTableSwap: a NAT SYN's reservation is
// remembered in the NAT handshake cache, whose entry names the
// reservation's half-open slot, and the handshake's ACK promotes it on the
// SYN's server through that entry even when the Maglev table moved the
// flow to another server in between (one with another return address).
// Without the entry the ACK searches the new server's candidate ports,
// finds nothing and is dropped: a second connection, whose entry is
// forgotten, shows it.
func TestPrivilegedNATHandshakeSurvivesTableSwap(t *testing.T) {
	e := newTestEnv(t)
	flow := func(sport uint16) (FlowKey, uint16) {
		k := key(vipNAT, 80, sport, 6)
		return k, natPort(k, 0, 1024, 65535)
	}
	toServer := func(f testutil.Frame, port uint16) []byte {
		return rewrite(f, retAddr, port, natServer, 8080, ifaceMAC, routerMAC).Build(t)
	}
	k1, port1 := flow(3100)
	_, port2 := flow(3101)
	for _, c := range []struct {
		sport, port uint16
	}{{3100, port1}, {3101, port2}} {
		syn := tcpTo(vipNAT, 80, c.sport, "S")
		if v, out := e.run(t, syn.Build(t)); v != xdpTX || !bytes.Equal(out[:len(toServer(syn, c.port))], toServer(syn, c.port)) {
			t.Fatalf("SYN from port %d: verdict %d, frame %x", c.sport, v, out)
		}
	}
	// The first SYN's entry names the half-open slot of its reservation.
	h := tableHash(k1.raw(), DefaultHashSeed)
	var hs dispatcherNatHandshake
	if err := e.dp.objs.NatHandshakes.Lookup(h&(e.dp.objs.NatHandshakes.MaxEntries()-1), &hs); err != nil {
		t.Fatal(err)
	}
	var ho dispatcherHalfopen
	if err := e.dp.objs.NatHalfopen.Lookup(hs.Slot, &ho); err != nil {
		t.Fatalf("handshake entry %+v: %v", hs, err)
	}
	if hs.Check != h^hs.Slot || ho.Key.Port != htons(port1) || ho.Backend != 60 {
		t.Fatalf("handshake entry %+v names half-open slot %+v, want port %d of server 60", hs, ho, port1)
	}

	// Every slot of the service now belongs to a new server.
	st := e.fixtureState()
	st.Backends = append(st.Backends, lb.DataplaneBackend{ID: 64, Service: 6, Address: netip.MustParseAddr("198.18.2.14"),
		MAC: routerMAC, SrcMAC: ifaceMAC, Ifindex: 1, AcceptNew: true, Port: 8080, ReturnAddress: retSmall})
	for i := range st.Services {
		if st.Services[i].ID == 6 {
			st.Services[i].Table = fill(e.tableM, func(uint32) uint32 { return 64 })
		}
	}
	if err := e.dp.Apply(st); err != nil {
		t.Fatal(err)
	}

	before := e.stats(t)
	ack := tcpTo(vipNAT, 80, 3100, "A")
	if v, out := e.run(t, ack.Build(t)); v != xdpTX || !bytes.Equal(out[:len(toServer(ack, port1))], toServer(ack, port1)) {
		t.Fatalf("handshake ACK: verdict %d, frame %x, want the SYN's server and port %d", v, out, port1)
	}
	if f, _, ok := e.getNAT(t, k1); !ok || f.Backend != 60 {
		t.Fatalf("mapping %+v (present %v), want server 60", f, ok)
	}
	if d := e.stats(t).Events["halfopen_promoted"] - before.Events["halfopen_promoted"]; d != 1 {
		t.Errorf("%d half-open connections promoted, want 1", d)
	}

	e.forgetNATHandshakes(t)
	before = e.stats(t)
	if v, _ := e.run(t, tcpTo(vipNAT, 80, 3101, "A").Build(t)); v != xdpDrop {
		t.Errorf("ACK whose handshake entry was forgotten after the table moved: verdict %d, want a drop", v)
	}
	if d := e.stats(t).Events["halfopen_lost"] - before.Events["halfopen_lost"]; d != 1 {
		t.Errorf("%d half-open connections lost, want 1", d)
	}
}
