//go:build linux

package datapath

import (
	"net/netip"
	"strconv"
	"testing"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// ipv6Cases are the IPv6 cases of the data-path table: MAC forwarding,
// the extension-header policy, neighbour discovery and other traffic that
// must pass untouched.
func ipv6Cases(t testing.TB, e *testEnv) []dpCase {
	build := func(f testutil.Frame) []byte { return f.Build(t) }
	tcp6 := func(dst netip.Addr, dport, sport uint16, flags string) testutil.Frame {
		return testutil.Frame{Src: client6, Dst: dst, Proto: "tcp", SrcPort: sport, DstPort: dport, Flags: flags, Payload: []byte("dlb")}
	}
	k6 := func(sport uint16) FlowKey {
		return FlowKey{Src: client6, Dst: vip6, SrcPort: sport, DstPort: 80, Proto: 6}
	}
	ext := func(f testutil.Frame, h ...testutil.Ext6) testutil.Frame { f.Ext = h; return f }
	hbh := testutil.Ext6{Type: testutil.ExtHopByHop}
	dst := testutil.Ext6{Type: testutil.ExtDestination, Units: 1}
	route := func(left uint8) testutil.Ext6 {
		return testutil.Ext6{Type: testutil.ExtRouting, Units: 2, SegmentsLeft: left}
	}
	frag := testutil.Ext6{Type: testutil.ExtFragment, MoreFragments: true}
	solicitedNode := netip.MustParseAddr("ff02::1:ff00:100")
	ns := func(dst netip.Addr) testutil.Frame {
		target := vip6.As16()
		return testutil.Frame{Src: client6, Dst: dst, TTL: 255, Proto: "icmp", ICMPType: testutil.ICMPv6NeighborSolicit, Quote: target[:]}
	}
	longPayload := build(tcp6(vip6, 80, 6020, "S"))
	longPayload[14+4], longPayload[14+5] = 0x05, 0xdc // payload length 1500 > frame
	vlanACK := tcp6(vip6, 80, 6021, "A")
	vlanACK.VLANs = []uint16{7}

	cases := []dpCase{
		{name: "IPv6 SYN is forwarded without a table entry", frame: build(tcp6(vip6, 80, 6000, "S")),
			want: xdpTX, reason: "fwd_tx", to: 70, conn: ptr(k6(6000))},
		{name: "IPv6 handshake ACK creates its entry", frame: build(tcp6(vip6, 80, 6001, "A")),
			want: xdpTX, reason: "fwd_tx", to: 70, newConn: map[uint32]uint64{70: 1},
			conn: ptr(k6(6001)), wantConn: &conn{backend: 70, service: 10}},
		{name: "IPv6 established flow hits its entry", frame: build(tcp6(vip6, 80, 6002, "PA")),
			before: []conn{{key: k6(6002), backend: 70, service: 10}},
			want:   xdpTX, reason: "fwd_tx", to: 70, conn: ptr(k6(6002)), wantConn: &conn{backend: 70, service: 10}},
		{name: "IPv6 UDP to a UDP port is scheduled", frame: build(testutil.Frame{Src: client6, Dst: vip6, Proto: "udp", SrcPort: 6003, DstPort: 53}),
			want: xdpTX, reason: "fwd_tx", to: 71, newConn: map[uint32]uint64{71: 1},
			conn: &FlowKey{Src: client6, Dst: vip6, SrcPort: 6003, DstPort: 53, Proto: 17}, wantConn: &conn{backend: 71, service: 11}},
		{name: "IPv6 VLAN-tagged ACK creates its entry", frame: build(vlanACK),
			want: xdpTX, reason: "fwd_tx", to: 70, newConn: map[uint32]uint64{70: 1}, conn: ptr(k6(6021)), wantConn: &conn{backend: 70, service: 10}},
		{name: "IPv6 hop-by-hop and destination options are walked", frame: build(ext(tcp6(vip6, 80, 6004, "A"), hbh, dst)),
			want: xdpTX, reason: "fwd_tx", to: 70, newConn: map[uint32]uint64{70: 1}, conn: ptr(k6(6004)), wantConn: &conn{backend: 70, service: 10}},
		{name: "IPv6 routing header with no segments left is balanced", frame: build(ext(tcp6(vip6, 80, 6005, "A"), route(0))),
			want: xdpTX, reason: "fwd_tx", to: 70, newConn: map[uint32]uint64{70: 1}, conn: ptr(k6(6005)), wantConn: &conn{backend: 70, service: 10}},
		{name: "IPv6 routing header with segments left to a cluster address drops", frame: build(ext(tcp6(vip6, 80, 6006, "A"), route(1))),
			want: xdpDrop, reason: "drop_ipv6_ext", conn: ptr(k6(6006))},
		{name: "IPv6 routing header with segments left to another address passes", frame: build(ext(tcp6(other6, 80, 6007, "A"), route(1))),
			want: xdpPass, reason: "pass_not_vip"},
		{name: "IPv6 fragment to a cluster address drops", frame: build(ext(tcp6(vip6, 80, 6008, "S"), frag)),
			want: xdpDrop, reason: "drop_fragment"},
		{name: "IPv6 fragment after options to a cluster address drops", frame: build(ext(tcp6(vip6, 80, 6009, "S"), hbh, frag)),
			want: xdpDrop, reason: "drop_fragment"},
		{name: "IPv6 fragment to another address passes", frame: build(ext(tcp6(other6, 80, 6010, "S"), frag)),
			want: xdpPass, reason: "pass_not_vip"},
		{name: "IPv6 with five extension headers to a cluster address drops", frame: build(ext(tcp6(vip6, 80, 6011, "S"), hbh, dst, dst, dst, dst)),
			want: xdpDrop, reason: "drop_ipv6_ext"},
		{name: "IPv6 with four extension headers to a cluster address is balanced", frame: build(ext(tcp6(vip6, 80, 6012, "S"), hbh, dst, route(0), dst)),
			want: xdpTX, reason: "fwd_tx", to: 70},
		{name: "IPv6 with five extension headers to another address passes", frame: build(ext(tcp6(other6, 80, 6013, "S"), hbh, dst, dst, dst, dst)),
			want: xdpPass, reason: "pass_not_vip"},
		{name: "IPv6 no-next-header to a cluster address passes", frame: build(testutil.Frame{Src: client6, Dst: vip6, Proto: "none"}),
			want: xdpPass, reason: "pass_vip_other"},
		{name: "ICMPv6 echo to a cluster address passes", frame: build(testutil.Frame{Src: client6, Dst: vip6, Proto: "icmp"}),
			want: xdpPass, reason: "pass_vip_other"},
		{name: "neighbour solicitation to the solicited-node address passes", frame: build(ns(solicitedNode)),
			want: xdpPass, reason: "pass_not_vip"},
		{name: "neighbour solicitation to a cluster address passes", frame: build(ns(vip6)),
			want: xdpPass, reason: "pass_vip_other"},
		{name: "IPv6 to the NFA passes", frame: build(tcp6(nfa6, 22, 6014, "S")), want: xdpPass, reason: "pass_nfa"},
		{name: "IPv6 cluster address, unbalanced port passes", frame: build(tcp6(vip6, 81, 6015, "S")), want: xdpPass, reason: "pass_vip_other"},
		{name: "IPv6 cluster address, wrong protocol passes", frame: build(testutil.Frame{Src: client6, Dst: vip6, Proto: "udp", SrcPort: 6016, DstPort: 80}),
			want: xdpPass, reason: "pass_vip_other"},
		{name: "IPv6 payload length beyond the frame passes as malformed", frame: longPayload, want: xdpPass, reason: "pass_malformed"},
	}
	// Truncation at every header offset of an IPv6 frame with an
	// extension header.
	full := build(ext(tcp6(vip6, 80, 6017, "S"), dst))
	for n := 14; n < 14+40+16+20; n += 3 {
		cases = append(cases, dpCase{name: "truncated IPv6 at " + strconv.Itoa(n), frame: full[:n], want: xdpPass, reason: "pass_malformed"})
	}
	return cases
}
