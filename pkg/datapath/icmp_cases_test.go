//go:build linux

package datapath

import (
	"net/netip"
	"testing"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// icmpCases are the ICMP and ICMPv6 error cases of the data-path table:
// errors about MAC flows go unchanged to the flow's server, errors about
// NAT flows are translated (outer and quoted headers, all checksums), and
// errors about no known flow pass.
func icmpCases(t testing.TB, e *testEnv) []dpCase {
	build := func(f testutil.Frame) []byte { return f.Build(t) }
	router := netip.MustParseAddr("198.18.1.1") // a router on the client side
	router6 := netip.MustParseAddr("2001:2::1") // the same, IPv6
	srvRouter := netip.MustParseAddr("198.18.2.1")
	// An ICMP error from src to dst quoting the packet q.
	icmpErr := func(src, dst netip.Addr, typ, code uint8, info uint32, q []byte) testutil.Frame {
		return testutil.Frame{Src: src, Dst: dst, Proto: "icmp", ICMPType: typ, ICMPCode: code, ICMPInfo: info, Quote: q}
	}
	fragNeeded := func(dst netip.Addr, q []byte) testutil.Frame {
		return icmpErr(router, dst, testutil.ICMPv4DestUnreachable, testutil.ICMPv4FragNeeded, 1400, q)
	}
	tooBig := func(src, dst netip.Addr, q []byte) testutil.Frame {
		return icmpErr(src, dst, testutil.ICMPv6PacketTooBig, 0, 1280, q)
	}
	// What the server sent (MAC: from the VIP; NAT: as translated).
	reply := func(src netip.Addr, sport uint16, dst netip.Addr, dport uint16, proto string) testutil.Frame {
		return testutil.Frame{Src: src, Dst: dst, Proto: proto, SrcPort: sport, DstPort: dport, Flags: "PA", Payload: []byte("a reply that was too big")}
	}
	k80 := func(sport uint16) FlowKey { return key(vipTCP, 80, sport, 6) }
	fwd := func(f testutil.Frame) testutil.Frame { f.SrcMAC, f.DstMAC = ifaceMAC, routerMAC; return f }
	toGW := func(f testutil.Frame, gw []byte) testutil.Frame { f.SrcMAC, f.DstMAC = ifaceMAC, gw; return f }

	// MAC: the quote is the server's reply VIP:80 -> client.
	macQuote := reply(vipTCP, 80, clientAddr, 7000, "tcp").IPPacket(t, 0)
	later := reply(vipTCP, 80, clientAddr, 7005, "tcp")
	later.FragOffset = 8
	laterQuote := later.IPPacket(t, 28)

	// NAT, client side: the quote is the translated reply VIP:80 ->
	// client:7010; the server must get it as it sent it, 198.18.2.10:8080
	// -> ret:30100.
	natQuoteIn := reply(vipNAT, 80, clientAddr, 7010, "tcp").IPPacket(t, 0)
	natQuoteOut := reply(natServer, 8080, retAddr, 30100, "tcp").IPPacket(t, 0)
	// NAT, server side: a UDP query the server could not take, quoted as
	// ret:31100 -> 198.18.2.11:53; the client must get it as it sent it,
	// client:7011 -> VIP:53.
	udpQuoteIn := reply(retAddr, 31100, natUDPServer, 53, "udp").IPPacket(t, 0)
	udpQuoteOut := reply(clientAddr, 7011, vipNAT, 53, "udp").IPPacket(t, 0)
	// A quote cut after the ports (no L4 checksum): only headers change.
	cutIn := reply(vipNAT, 80, clientAddr, 7012, "tcp").IPPacket(t, 28)
	cutOut := reply(natServer, 8080, retAddr, 30101, "tcp").IPPacket(t, 28)

	// IPv6.
	mac6Quote := reply(vip6, 80, client6, 7020, "tcp").IPPacket(t, 0)
	nat6In := reply(vip6NAT, 80, client6, 7021, "tcp").IPPacket(t, 0)
	nat6Out := reply(nat6Server, 8080, ret6, 32100, "tcp").IPPacket(t, 0)
	srv6In := reply(ret6, 32101, nat6Server, 8080, "tcp").IPPacket(t, 0)
	srv6Out := reply(client6, 7022, vip6NAT, 80, "tcp").IPPacket(t, 0)
	k6 := func(dst netip.Addr, sport uint16) FlowKey {
		return FlowKey{Src: client6, Dst: dst, SrcPort: sport, DstPort: 80, Proto: 6}
	}
	put := func(cs ...natConn) func(t *testing.T) {
		return func(t *testing.T) {
			for _, c := range cs {
				e.putNAT(t, c)
			}
		}
	}
	icmpEv := map[string]uint64{"icmp_to_backend": 1}

	return []dpCase{
		{name: "ICMP fragmentation needed about a MAC flow goes to its server", frame: build(fragNeeded(vipTCP, macQuote)),
			before: []conn{{key: k80(7000), backend: 10, service: 1}},
			want:   xdpTX, reason: "fwd_tx", to: 10, events: icmpEv},
		{name: "ICMP time exceeded about a MAC flow goes to its server",
			frame:  build(icmpErr(router, vipTCP, testutil.ICMPv4TimeExceeded, 0, 0, reply(vipTCP, 80, clientAddr, 7001, "tcp").IPPacket(t, 28))),
			before: []conn{{key: k80(7001), backend: 11, service: 1}},
			want:   xdpTX, reason: "fwd_tx", to: 11, events: icmpEv},
		{name: "ICMP error about an unknown flow passes", frame: build(fragNeeded(vipTCP, reply(vipTCP, 80, clientAddr, 7002, "tcp").IPPacket(t, 0))),
			want: xdpPass, reason: "pass_icmp_no_flow"},
		{name: "ICMP error quoting another address than its destination passes",
			frame:  build(fragNeeded(vipTCP, reply(vipBoth, 80, clientAddr, 7003, "tcp").IPPacket(t, 0))),
			before: []conn{{key: k80(7003), backend: 10, service: 1}},
			want:   xdpPass, reason: "pass_icmp_no_flow"},
		{name: "ICMP error quoting a later fragment passes", frame: build(fragNeeded(vipTCP, laterQuote)),
			before: []conn{{key: k80(7005), backend: 10, service: 1}},
			want:   xdpPass, reason: "pass_icmp_no_flow"},
		{name: "ICMP error quoting an unbalanced port passes", frame: build(fragNeeded(vipTCP, reply(vipTCP, 81, clientAddr, 7004, "tcp").IPPacket(t, 0))),
			want: xdpPass, reason: "pass_icmp_no_flow"},
		{name: "ICMP error to a non-cluster address passes", frame: build(fragNeeded(otherAddr, reply(otherAddr, 80, clientAddr, 7006, "tcp").IPPacket(t, 0))),
			want: xdpPass, reason: "pass_not_vip"},
		{name: "ICMP fragmentation needed about a NAT flow is translated for its server", frame: build(fragNeeded(vipNAT, natQuoteIn)),
			setup: put(natConn{key: key(vipNAT, 80, 7010, 6), backend: 60, service: 6, ret: retAddr, port: 30100}),
			want:  xdpTX, reason: "fwd_tx", countAs: 60, events: icmpEv,
			wantFrame: build(fwd(icmpErr(retAddr, natServer, testutil.ICMPv4DestUnreachable, testutil.ICMPv4FragNeeded, 1400, natQuoteOut)))},
		{name: "ICMP error with a short NAT quote is translated for its server", frame: build(fragNeeded(vipNAT, cutIn)),
			setup: put(natConn{key: key(vipNAT, 80, 7012, 6), backend: 60, service: 6, ret: retAddr, port: 30101}),
			want:  xdpTX, reason: "fwd_tx", countAs: 60, events: icmpEv,
			wantFrame: build(fwd(icmpErr(retAddr, natServer, testutil.ICMPv4DestUnreachable, testutil.ICMPv4FragNeeded, 1400, cutOut)))},
		{name: "ICMP port unreachable from the server side is translated for the client",
			frame: build(icmpErr(srvRouter, retAddr, testutil.ICMPv4DestUnreachable, testutil.ICMPv4PortUnreachable, 0, udpQuoteIn)),
			setup: put(natConn{key: key(vipNAT, 53, 7011, 17), backend: 61, service: 7, ret: retAddr, port: 31100}),
			want:  xdpTX, reason: "fwd_tx", countAs: 61, events: map[string]uint64{"icmp_to_client": 1},
			wantFrame: build(toGW(icmpErr(vipNAT, clientAddr, testutil.ICMPv4DestUnreachable, testutil.ICMPv4PortUnreachable, 0, udpQuoteOut), gwMAC))},
		{name: "ICMP error to a return address about no mapping passes",
			frame: build(icmpErr(srvRouter, retAddr, testutil.ICMPv4DestUnreachable, testutil.ICMPv4PortUnreachable, 0, udpQuoteIn)),
			want:  xdpPass, reason: "pass_icmp_no_flow"},
		{name: "ICMPv6 packet too big about a MAC flow goes to its server", frame: build(tooBig(router6, vip6, mac6Quote)),
			before: []conn{{key: k6(vip6, 7020), backend: 70, service: 10}},
			want:   xdpTX, reason: "fwd_tx", to: 70, events: icmpEv},
		{name: "ICMPv6 packet too big about an unknown flow passes", frame: build(tooBig(router6, vip6, mac6Quote)),
			want: xdpPass, reason: "pass_icmp_no_flow"},
		{name: "ICMPv6 packet too big about a NAT66 flow is translated for its server", frame: build(tooBig(router6, vip6NAT, nat6In)),
			setup: put(natConn{key: k6(vip6NAT, 7021), backend: 80, service: 12, ret: ret6, port: 32100}),
			want:  xdpTX, reason: "fwd_tx", countAs: 80, events: icmpEv,
			wantFrame: build(func() testutil.Frame {
				f := tooBig(ret6, nat6Server, nat6Out)
				f.SrcMAC, f.DstMAC = ifaceMAC, router6MAC
				return f
			}())},
		{name: "ICMPv6 error from the server side is translated for the client",
			frame: build(icmpErr(nat6Server, ret6, testutil.ICMPv6DestUnreachable, testutil.ICMPv6PortUnreachable, 0, srv6In)),
			setup: put(natConn{key: k6(vip6NAT, 7022), backend: 80, service: 12, ret: ret6, port: 32101}),
			want:  xdpTX, reason: "fwd_tx", countAs: 80, events: map[string]uint64{"icmp_to_client": 1},
			wantFrame: build(toGW(icmpErr(vip6NAT, client6, testutil.ICMPv6DestUnreachable, testutil.ICMPv6PortUnreachable, 0, srv6Out), gw6MAC))},
	}
}
