//go:build linux

package datapath

import (
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// NAT fixture addresses: the servers behind the router.
var (
	natServer    = netip.MustParseAddr("198.18.2.10")  // B60, port 8080
	natUDPServer = netip.MustParseAddr("198.18.2.11")  // B61, port 53
	nat6Server   = netip.MustParseAddr("2001:2:1::10") // B80, port 8080
	nat6UDP      = netip.MustParseAddr("2001:2:1::11") // B81, port 53
)

// rewrite returns f with its addresses, ports and MAC addresses replaced:
// the frame a translation must produce, built (with its checksums) by
// gopacket.
func rewrite(f testutil.Frame, src netip.Addr, sport uint16, dst netip.Addr, dport uint16, srcMAC, dstMAC net.HardwareAddr) testutil.Frame {
	f.Src, f.SrcPort, f.Dst, f.DstPort = src, sport, dst, dport
	f.SrcMAC, f.DstMAC = srcMAC, dstMAC
	return f
}

// natPort returns candidate i of a flow's NAT port on a pool.
func natPort(k FlowKey, i int, min, max uint16) uint16 {
	return NATCandidates(k, DefaultHashSeed, min, max)[i]
}

// natCases are the NAT/NAPT cases of the data-path table: IPv4 and IPv6,
// TCP (half-open state, promotion, established both ways, closing) and UDP.
func natCases(t testing.TB, e *testEnv) []dpCase {
	build := func(f testutil.Frame) []byte { return f.Build(t) }
	k := func(sport uint16) FlowKey { return key(vipNAT, 80, sport, 6) }
	ku := func(sport uint16) FlowKey { return key(vipNAT, 53, sport, 17) }
	p0 := func(k FlowKey) uint16 { return natPort(k, 0, 1024, 65535) }
	tcp := func(sport uint16, flags string) testutil.Frame { return tcpTo(vipNAT, 80, sport, flags) }
	// The client's packet as the server must see it, and the server's
	// packet as the client must see it.
	toServer := func(f testutil.Frame, port uint16) []byte {
		return build(rewrite(f, retAddr, port, natServer, 8080, ifaceMAC, routerMAC))
	}
	fromServer := func(port uint16, flags string) testutil.Frame {
		return testutil.Frame{Src: natServer, Dst: retAddr, Proto: "tcp", SrcPort: 8080, DstPort: port, Flags: flags, Payload: []byte("srv")}
	}
	toClient := func(f testutil.Frame, cport uint16) []byte {
		return build(rewrite(f, vipNAT, 80, clientAddr, cport, ifaceMAC, gwMAC))
	}
	run := func(f testutil.Frame) func(t *testing.T) {
		return func(t *testing.T) {
			if v, _ := e.run(t, f.Build(t)); v != xdpTX {
				t.Fatalf("setup packet: verdict %d", v)
			}
		}
	}
	halfOpenOn := func(k FlowKey, port uint16) func(t *testing.T) {
		return func(t *testing.T) {
			h, got, ok := e.halfOpen(t, k)
			if !ok || got != port {
				t.Errorf("half-open entry %+v on port %d (present %v), want port %d", h, got, ok, port)
			}
			if _, _, ok := e.getNAT(t, k); ok {
				t.Error("a SYN created an established NAT entry")
			}
		}
	}
	established := func(k FlowKey, ret netip.Addr, port uint16, closing bool) func(t *testing.T) {
		return func(t *testing.T) {
			f, r, ok := e.getNAT(t, k)
			if !ok {
				t.Fatal("no established NAT entry")
			}
			if htons(f.NatPort) != port || addrFrom(f.NatAddr.Addr, k.raw().Family) != ret {
				t.Errorf("mapped to %s:%d, want %s:%d", addrFrom(f.NatAddr.Addr, k.raw().Family), htons(f.NatPort), ret, port)
			}
			want := uint8(dispatcherFlowStateFLOW_ESTABLISHED)
			if closing {
				want = uint8(dispatcherFlowStateFLOW_CLOSING)
			}
			if f.State != want {
				t.Errorf("client side state %d, want %d", f.State, want)
			}
			if _, _, ok := e.halfOpen(t, k); ok {
				t.Error("half-open entry left behind")
			}
			if r.ClientPort != htons(k.SrcPort) {
				t.Errorf("reverse entry names client port %d", htons(r.ClientPort))
			}
		}
	}
	noHalfOpen := func(k FlowKey) func(t *testing.T) {
		return func(t *testing.T) {
			if _, _, ok := e.halfOpen(t, k); ok {
				t.Error("half-open entry left behind")
			}
		}
	}
	natConnOf := func(k FlowKey, backend, service uint32, port uint16) natConn {
		return natConn{key: k, backend: backend, service: service, ret: retAddr, port: port}
	}
	put := func(cs ...natConn) func(t *testing.T) {
		return func(t *testing.T) {
			for _, c := range cs {
				e.putNAT(t, c)
			}
		}
	}

	// A port collision: the flow's first candidate is held by another
	// connection.
	kc := k(5013)
	collide := natConnOf(key(vipNAT, 80, 9999, 6), 60, 6, p0(kc))
	collide.key.Src = netip.MustParseAddr("198.18.1.99")

	// A pool in heavy use: connections of other clients hold the first
	// DLB_NAT_CANDIDATES candidates of a flow; the flow takes the first
	// later one that is free (n: its index, to count the collisions).
	heldFirst := func(kf FlowKey, backend, service uint32) (func(t *testing.T), uint16, uint64) {
		cands := NATCandidates(kf, DefaultHashSeed, 1024, 65535)
		held := map[uint16]bool{}
		var cs []natConn
		for i, p := range cands[:dispatcherDlbConstsDLB_NAT_CANDIDATES] {
			if held[p] {
				continue
			}
			held[p] = true
			c := natConnOf(key(vipNAT, kf.DstPort, uint16(9000+i), kf.Proto), backend, service, p)
			c.key.Src = netip.MustParseAddr("198.18.1.98")
			cs = append(cs, c)
		}
		for n, p := range cands[dispatcherDlbConstsDLB_NAT_CANDIDATES:] {
			if !held[p] {
				return put(cs...), p, uint64(dispatcherDlbConstsDLB_NAT_CANDIDATES) + uint64(n)
			}
		}
		t.Fatal("no free later candidate")
		return nil, 0, 0
	}
	kh := k(5016)
	heldH, portH, collH := heldFirst(kh, 60, 6)
	kh2 := k(5017)
	heldH2, portH2, _ := heldFirst(kh2, 60, 6)
	kh3 := k(5018)
	heldH3, portH3, _ := heldFirst(kh3, 60, 6)
	kuh := ku(5105)
	heldU, portU, collU := heldFirst(kuh, 61, 7)

	// The two-port pool of retSmall, both ports held.
	small := func(proto uint8, port uint16, sport uint16) natConn {
		backend, service := uint32(62), uint32(8)
		if proto == 17 {
			backend, service = 63, 9
		}
		return natConn{key: key(vipNATSmall, 80, sport, proto), backend: backend, service: service, ret: retSmall, port: port}
	}

	udpOut := func(f testutil.Frame, port uint16) []byte {
		return build(rewrite(f, retAddr, port, natUDPServer, 53, ifaceMAC, routerMAC))
	}
	udpFrom := func(port uint16, zero bool) testutil.Frame {
		return testutil.Frame{Src: natUDPServer, Dst: retAddr, Proto: "udp", SrcPort: 53, DstPort: port, Payload: []byte("answer"), UDPZeroChecksum: zero}
	}
	udpToClient := func(f testutil.Frame, cport uint16) []byte {
		return build(rewrite(f, vipNAT, 53, clientAddr, cport, ifaceMAC, gwMAC))
	}
	zeroUDP := func(f testutil.Frame) testutil.Frame { f.UDPZeroChecksum = true; return f }

	// NAT66.
	k6 := func(sport uint16) FlowKey {
		return FlowKey{Src: client6, Dst: vip6NAT, SrcPort: sport, DstPort: 80, Proto: 6}
	}
	tcp6 := func(sport uint16, flags string) testutil.Frame {
		return testutil.Frame{Src: client6, Dst: vip6NAT, Proto: "tcp", SrcPort: sport, DstPort: 80, Flags: flags, Payload: []byte("dlb")}
	}
	to6Server := func(f testutil.Frame, port uint16) []byte {
		return build(rewrite(f, ret6, port, nat6Server, 8080, ifaceMAC, router6MAC))
	}
	from6Server := func(port uint16, flags string) testutil.Frame {
		return testutil.Frame{Src: nat6Server, Dst: ret6, Proto: "tcp", SrcPort: 8080, DstPort: port, Flags: flags, Payload: []byte("srv")}
	}
	to6Client := func(f testutil.Frame, cport uint16) []byte {
		return build(rewrite(f, vip6NAT, 80, client6, cport, ifaceMAC, gw6MAC))
	}
	k6u := FlowKey{Src: client6, Dst: vip6NAT, SrcPort: 5400, DstPort: 53, Proto: 17}
	udp6 := testutil.Frame{Src: client6, Dst: vip6NAT, Proto: "udp", SrcPort: 5400, DstPort: 53, Payload: []byte("query")}

	// Another CPU keeps the buckets of a NAT table locked: a handshake
	// ACK goes on by its reservation, which stays; once the lock is gone,
	// the connection's next segment promotes it.
	lockedACK := func(sport uint16, index func() *ebpf.Map) func(t *testing.T) {
		return func(t *testing.T) {
			run(tcp(sport, "S"))(t)
			e.lockBuckets(t, index())
		}
	}
	reservationKept := func(sport uint16) func(t *testing.T) {
		return func(t *testing.T) {
			kl := k(sport)
			halfOpenOn(kl, p0(kl))(t)
			if e.natPortTaken(t, retAddr, p0(kl), 6) {
				t.Error("the port's nat_ports entry was left behind")
			}
		}
	}
	lockGone := func(sport uint16) func(t *testing.T) {
		return func(t *testing.T) {
			run(tcp(sport, "S"))(t)
			unlock := e.lockBuckets(t, e.dp.objs.NatPortIndex)
			run(tcp(sport, "A"))(t)
			unlock()
		}
	}

	return []dpCase{
		// IPv4 TCP.
		{name: "NAT SYN reserves a port and is translated", frame: build(tcp(5000, "S")),
			want: xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toServer(tcp(5000, "S"), p0(k(5000))),
			events: map[string]uint64{"halfopen_created": 1}, check: halfOpenOn(k(5000), p0(k(5000)))},
		{name: "NAT retransmitted SYN keeps its port", frame: build(tcp(5001, "S")), setup: run(tcp(5001, "S")),
			want: xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toServer(tcp(5001, "S"), p0(k(5001))),
			events: map[string]uint64{"halfopen_retransmit": 1, "halfopen_created": 0}, check: halfOpenOn(k(5001), p0(k(5001)))},
		{name: "NAT SYN-ACK of a half-open connection goes to the client gateway", frame: build(fromServer(p0(k(5002)), "SA")),
			setup: run(tcp(5002, "S")),
			want:  xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toClient(fromServer(p0(k(5002)), "SA"), 5002),
			check: halfOpenOn(k(5002), p0(k(5002)))},
		{name: "NAT handshake ACK promotes the half-open connection", frame: build(tcp(5003, "A")), setup: run(tcp(5003, "S")),
			want: xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toServer(tcp(5003, "A"), p0(k(5003))),
			newConn: map[uint32]uint64{60: 1}, events: map[string]uint64{"halfopen_promoted": 1},
			check: established(k(5003), retAddr, p0(k(5003)), false)},
		{name: "NAT handshake ACK whose port bucket stays locked goes on by its reservation", frame: build(tcp(5030, "A")),
			setup: lockedACK(5030, func() *ebpf.Map { return e.dp.objs.NatPortIndex }),
			want:  xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toServer(tcp(5030, "A"), p0(k(5030))),
			events: map[string]uint64{"conn_insert_failed": 1, "halfopen_promoted": 0, "nat_table_full": 0},
			check:  reservationKept(5030)},
		{name: "NAT handshake ACK whose flow bucket stays locked goes on by its reservation", frame: build(tcp(5031, "A")),
			setup: lockedACK(5031, func() *ebpf.Map { return e.dp.objs.NatFlowIndex }),
			want:  xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toServer(tcp(5031, "A"), p0(k(5031))),
			events: map[string]uint64{"conn_insert_failed": 1, "halfopen_promoted": 0, "nat_table_full": 0},
			check:  reservationKept(5031)},
		{name: "NAT segment after a locked bucket's ACK promotes the connection", frame: build(tcp(5032, "PA")), setup: lockGone(5032),
			want: xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toServer(tcp(5032, "PA"), p0(k(5032))),
			newConn: map[uint32]uint64{60: 1}, events: map[string]uint64{"halfopen_promoted": 1, "conn_insert_failed": 0},
			check: established(k(5032), retAddr, p0(k(5032)), false)},
		{name: "NAT established client data is translated", frame: build(tcp(5004, "PA")), setup: put(natConnOf(k(5004), 60, 6, 30000)),
			want: xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toServer(tcp(5004, "PA"), 30000),
			check: established(k(5004), retAddr, 30000, false)},
		{name: "NAT established server reply is translated back", frame: build(fromServer(30001, "PA")), setup: put(natConnOf(k(5005), 60, 6, 30001)),
			want: xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toClient(fromServer(30001, "PA"), 5005)},
		{name: "NAT client FIN moves the connection to closing", frame: build(tcp(5006, "FA")), setup: put(natConnOf(k(5006), 60, 6, 30002)),
			want: xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toServer(tcp(5006, "FA"), 30002), finConn: map[uint32]uint64{60: 1},
			check: established(k(5006), retAddr, 30002, true)},
		{name: "NAT server FIN moves both halves to closing", frame: build(fromServer(30003, "FA")), setup: put(natConnOf(k(5007), 60, 6, 30003)),
			want: xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toClient(fromServer(30003, "FA"), 5007), finConn: map[uint32]uint64{60: 1},
			check: func(t *testing.T) {
				established(k(5007), retAddr, 30003, true)(t)
				if _, r, _ := e.getNAT(t, k(5007)); r.State != uint8(dispatcherFlowStateFLOW_CLOSING) {
					t.Errorf("server side state %d, want closing", r.State)
				}
			}},
		{name: "NAT ACK of an unknown connection drops", frame: build(tcp(5008, "A")), want: xdpDrop, reason: "drop_nat_no_flow"},
		{name: "NAT SYN on a closing connection takes a new mapping", frame: build(tcp(5009, "S")),
			setup: put(natConn{key: k(5009), backend: 60, service: 6, ret: retAddr, port: 30004, closing: true}),
			want:  xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toServer(tcp(5009, "S"), p0(k(5009))),
			events: map[string]uint64{"nat_flow_released": 1, "halfopen_created": 1},
			check: func(t *testing.T) {
				halfOpenOn(k(5009), p0(k(5009)))(t)
				if e.natPortTaken(t, retAddr, 30004, 6) {
					t.Error("the closed connection's port is still taken")
				}
			}},
		{name: "NAT SYN of a live connection keeps its mapping", frame: build(tcp(5015, "S")), setup: put(natConnOf(k(5015), 60, 6, 30007)),
			want: xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toServer(tcp(5015, "S"), 30007),
			check: established(k(5015), retAddr, 30007, false)},
		{name: "NAT client RST during the handshake frees the port", frame: build(tcp(5010, "R")), setup: run(tcp(5010, "S")),
			want: xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toServer(tcp(5010, "R"), p0(k(5010))), check: noHalfOpen(k(5010))},
		{name: "NAT server RST to a SYN frees the port", frame: build(fromServer(p0(k(5011)), "RA")), setup: run(tcp(5011, "S")),
			want: xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toClient(fromServer(p0(k(5011)), "RA"), 5011), check: noHalfOpen(k(5011))},
		{name: "reply from another source to a live NAT port passes", setup: put(natConnOf(k(5012), 60, 6, 30005)),
			frame: build(testutil.Frame{Src: netip.MustParseAddr("198.18.2.99"), Dst: retAddr, Proto: "tcp", SrcPort: 8080, DstPort: 30005, Flags: "A"}),
			want:  xdpPass, reason: "pass_return_other"},
		{name: "TCP to a return address port without a mapping passes", frame: build(fromServer(30006, "A")), want: xdpPass, reason: "pass_return_other"},
		{name: "ICMP echo to a return address passes", frame: build(testutil.Frame{Src: natServer, Dst: retAddr, Proto: "icmp"}),
			want: xdpPass, reason: "pass_return_other"},
		{name: "fragment to a return address drops", frame: build(testutil.Frame{Src: natServer, Dst: retAddr, Proto: "udp", SrcPort: 53, DstPort: 31000, MoreFragments: true}),
			want: xdpDrop, reason: "drop_fragment"},
		{name: "NAT port collision takes the next candidate", frame: build(tcp(5013, "S")), setup: put(collide),
			want: xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toServer(tcp(5013, "S"), natPort(kc, 1, 1024, 65535)),
			events: map[string]uint64{"nat_port_collision": 1}, check: halfOpenOn(kc, natPort(kc, 1, 1024, 65535))},
		{name: "NAT pool exhaustion is counted and refused", frame: build(tcpTo(vipNATSmall, 80, 5020, "S")),
			setup: put(small(6, 40000, 1), small(6, 40001, 2)),
			want:  xdpDrop, reason: "drop_nat_exhausted", events: map[string]uint64{"nat_port_collision": uint64(dispatcherDlbConstsDLB_NAT_CANDIDATES_MAX)}},
		{name: "NAT SYN whose first candidates connections hold takes a later one", frame: build(tcp(kh.SrcPort, "S")), setup: heldH,
			want: xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toServer(tcp(kh.SrcPort, "S"), portH),
			events: map[string]uint64{"nat_port_collision": collH, "halfopen_created": 1}, check: halfOpenOn(kh, portH)},
		{name: "NAT retransmitted SYN keeps a later candidate", frame: build(tcp(kh2.SrcPort, "S")),
			setup: func(t *testing.T) { heldH2(t); run(tcp(kh2.SrcPort, "S"))(t) },
			want:  xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toServer(tcp(kh2.SrcPort, "S"), portH2),
			events: map[string]uint64{"halfopen_retransmit": 1, "halfopen_created": 0}, check: halfOpenOn(kh2, portH2)},
		{name: "NAT handshake ACK finds a later candidate without the handshake cache", frame: build(tcp(kh3.SrcPort, "A")),
			setup: func(t *testing.T) { heldH3(t); run(tcp(kh3.SrcPort, "S"))(t); e.forgetNATHandshakes(t) },
			want:  xdpTX, reason: "fwd_tx", countAs: 60, wantFrame: toServer(tcp(kh3.SrcPort, "A"), portH3),
			newConn: map[uint32]uint64{60: 1}, events: map[string]uint64{"halfopen_promoted": 1},
			check: established(kh3, retAddr, portH3, false)},
		{name: "NAT UDP flow whose first candidates connections hold takes a later one", frame: build(udpTo(vipNAT, 53, kuh.SrcPort)),
			setup: heldU, want: xdpTX, reason: "fwd_tx", countAs: 61, wantFrame: udpOut(udpTo(vipNAT, 53, kuh.SrcPort), portU),
			newConn: map[uint32]uint64{61: 1}, events: map[string]uint64{"nat_port_collision": collU},
			check: established(kuh, retAddr, portU, false)},
		{name: "NAT UDP pool exhaustion is counted and refused", frame: build(udpTo(vipNATSmall, 53, 5021)),
			setup: put(small(17, 40000, 1), small(17, 40001, 2)),
			want:  xdpDrop, reason: "drop_nat_exhausted"},
		{name: "NAT packet of a removed server's connection drops and frees the port", frame: build(tcp(5014, "A")),
			setup: put(natConnOf(k(5014), 99, 6, 30008)),
			want:  xdpDrop, reason: "drop_nat_no_flow", events: map[string]uint64{"nat_flow_released": 1},
			check: func(t *testing.T) {
				if e.natPortTaken(t, retAddr, 30008, 6) {
					t.Error("the port is still taken")
				}
			}},

		// IPv4 UDP.
		{name: "NAT UDP first packet creates a mapping", frame: build(udpTo(vipNAT, 53, 5100)),
			want: xdpTX, reason: "fwd_tx", countAs: 61, wantFrame: udpOut(udpTo(vipNAT, 53, 5100), p0(ku(5100))),
			newConn: map[uint32]uint64{61: 1}, check: established(ku(5100), retAddr, p0(ku(5100)), false)},
		{name: "NAT UDP first packet whose port bucket stays locked drops", frame: build(udpTo(vipNAT, 53, 5110)),
			setup: func(t *testing.T) { e.lockBuckets(t, e.dp.objs.NatPortIndex) },
			want:  xdpDrop, reason: "drop_table_full", events: map[string]uint64{"conn_insert_failed": 1, "nat_table_full": 0},
			check: func(t *testing.T) {
				if _, _, ok := e.getNAT(t, ku(5110)); ok {
					t.Error("a mapping was created")
				}
				if e.natPortTaken(t, retAddr, p0(ku(5110)), 17) {
					t.Error("the port is taken")
				}
			}},
		{name: "NAT UDP flow keeps its mapping while active", frame: build(udpTo(vipNAT, 53, 5101)), setup: put(natConnOf(ku(5101), 61, 7, 31000)),
			want: xdpTX, reason: "fwd_tx", countAs: 61, wantFrame: udpOut(udpTo(vipNAT, 53, 5101), 31000)},
		{name: "NAT UDP reply is translated back", frame: build(udpFrom(31001, false)), setup: put(natConnOf(ku(5102), 61, 7, 31001)),
			want: xdpTX, reason: "fwd_tx", countAs: 61, wantFrame: udpToClient(udpFrom(31001, false), 5102)},
		{name: "NAT UDP zero checksum stays zero", frame: build(zeroUDP(udpTo(vipNAT, 53, 5103))), setup: put(natConnOf(ku(5103), 61, 7, 31002)),
			want: xdpTX, reason: "fwd_tx", countAs: 61, wantFrame: udpOut(zeroUDP(udpTo(vipNAT, 53, 5103)), 31002)},
		{name: "NAT UDP reply zero checksum stays zero", frame: build(udpFrom(31003, true)), setup: put(natConnOf(ku(5104), 61, 7, 31003)),
			want: xdpTX, reason: "fwd_tx", countAs: 61, wantFrame: udpToClient(udpFrom(31003, true), 5104)},

		// IPv6 (NAT66).
		{name: "NAT66 SYN reserves a port and is translated", frame: build(tcp6(5200, "S")),
			want: xdpTX, reason: "fwd_tx", countAs: 80, wantFrame: to6Server(tcp6(5200, "S"), p0(k6(5200))),
			check: halfOpenOn(k6(5200), p0(k6(5200)))},
		{name: "NAT66 SYN-ACK goes to the IPv6 client gateway", frame: build(from6Server(p0(k6(5201)), "SA")), setup: run(tcp6(5201, "S")),
			want: xdpTX, reason: "fwd_tx", countAs: 80, wantFrame: to6Client(from6Server(p0(k6(5201)), "SA"), 5201)},
		{name: "NAT66 handshake ACK promotes the half-open connection", frame: build(tcp6(5202, "A")), setup: run(tcp6(5202, "S")),
			want: xdpTX, reason: "fwd_tx", countAs: 80, wantFrame: to6Server(tcp6(5202, "A"), p0(k6(5202))), newConn: map[uint32]uint64{80: 1},
			check: established(k6(5202), ret6, p0(k6(5202)), false)},
		{name: "NAT66 established client data is translated", frame: build(tcp6(5203, "PA")),
			setup: put(natConn{key: k6(5203), backend: 80, service: 12, ret: ret6, port: 32000}),
			want:  xdpTX, reason: "fwd_tx", countAs: 80, wantFrame: to6Server(tcp6(5203, "PA"), 32000)},
		{name: "NAT66 established server reply is translated back", frame: build(from6Server(32001, "PA")),
			setup: put(natConn{key: k6(5204), backend: 80, service: 12, ret: ret6, port: 32001}),
			want:  xdpTX, reason: "fwd_tx", countAs: 80, wantFrame: to6Client(from6Server(32001, "PA"), 5204)},
		{name: "NAT66 UDP first packet creates a mapping", frame: build(udp6),
			want: xdpTX, reason: "fwd_tx", countAs: 81, newConn: map[uint32]uint64{81: 1},
			wantFrame: build(rewrite(udp6, ret6, p0(k6u), nat6UDP, 53, ifaceMAC, router6MAC)),
			check:     established(k6u, ret6, p0(k6u), false)},
	}
}
