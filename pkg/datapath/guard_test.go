//go:build linux

package datapath

import (
	"maps"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// guardFrame builds an Ethernet frame to dst with the given transport.
func guardFrame(t *testing.T, dst netip.Addr, proto string) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	var ls []gopacket.SerializableLayer
	var nl gopacket.NetworkLayer
	ipProto := map[string]layers.IPProtocol{"tcp": layers.IPProtocolTCP, "udp": layers.IPProtocolUDP,
		"icmp": layers.IPProtocolICMPv4}[proto]
	if dst.Is4() {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: ipProto, SrcIP: net.IP{198, 18, 2, 11}, DstIP: dst.AsSlice()}
		ls, nl = append(ls, eth, ip), ip
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		if proto == "icmp" {
			ipProto = layers.IPProtocolICMPv6
		}
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: ipProto, SrcIP: net.ParseIP("2001:2::11"), DstIP: dst.AsSlice()}
		ls, nl = append(ls, eth, ip), ip
	}
	switch proto {
	case "tcp":
		tcp := &layers.TCP{SrcPort: 40000, DstPort: 80, ACK: true}
		_ = tcp.SetNetworkLayerForChecksum(nl)
		ls = append(ls, tcp)
	case "udp":
		udp := &layers.UDP{SrcPort: 40000, DstPort: 53}
		_ = udp.SetNetworkLayerForChecksum(nl)
		ls = append(ls, udp)
	default:
		ls = append(ls, gopacket.Payload(make([]byte, 8)))
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, append(ls, gopacket.Payload([]byte("x")))...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestPrivilegedGuard(t *testing.T) {
	testutil.RequirePrivileged(t)
	g, err := NewGuard()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	vip, ret, vip6 := netip.MustParseAddr("198.18.0.100"), netip.MustParseAddr("198.18.0.3"), netip.MustParseAddr("2001:2::100")
	if err := g.Set([]netip.Addr{vip, ret, vip6, netip.MustParseAddr("198.18.0.99")}); err != nil {
		t.Fatal(err)
	}
	if err := g.Set([]netip.Addr{vip, ret, vip6}); err != nil {
		t.Fatal(err)
	}
	arp := append(make([]byte, 12), 0x08, 0x06)
	arp = append(arp, make([]byte, 28)...)
	for _, c := range []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"tcp to a cluster address", guardFrame(t, vip, "tcp"), 2},
		{"udp to a return address", guardFrame(t, ret, "udp"), 2},
		{"tcp to an IPv6 cluster address", guardFrame(t, vip6, "tcp"), 2},
		{"tcp to an address no longer guarded", guardFrame(t, netip.MustParseAddr("198.18.0.99"), "tcp"), 0},
		{"tcp to another address", guardFrame(t, netip.MustParseAddr("198.18.0.2"), "tcp"), 0},
		{"icmp to a cluster address", guardFrame(t, vip, "icmp"), 0},
		{"icmpv6 to an IPv6 cluster address", guardFrame(t, vip6, "icmp"), 0},
		{"arp", arp, 0},
		{"a runt frame", make([]byte, 14), 0},
	} {
		ret, err := g.prog.Run(&ebpf.RunOptions{Data: c.frame})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if ret != c.want {
			t.Errorf("%s: verdict %d, want %d", c.name, ret, c.want)
		}
	}
}

// TestPrivilegedGuardSetMirrors: after any sequence of Sets, the map holds
// exactly the last set (Set compares with its mirror, not the map).
func TestPrivilegedGuardSetMirrors(t *testing.T) {
	testutil.RequirePrivileged(t)
	g, err := NewGuard()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	a := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 19, byte(i / 250), byte(i%250 + 1)}) }
	var sets [][]netip.Addr
	for _, r := range [][2]int{{0, 1000}, {500, 1500}, {0, 0}, {10, 20}, {15, 3000}, {2999, 3000}} {
		var set []netip.Addr
		for i := r[0]; i < r[1]; i++ {
			set = append(set, a(i))
		}
		sets = append(sets, set)
	}
	for n, set := range sets {
		if err := g.Set(set); err != nil {
			t.Fatal(err)
		}
		var k [16]byte
		var v uint8
		got := map[netip.Addr]bool{}
		it := g.addrs.Iterate()
		for it.Next(&k, &v) {
			got[netip.AddrFrom16(k).Unmap()] = true
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		want := map[netip.Addr]bool{}
		for _, x := range set {
			want[x] = true
		}
		if !maps.Equal(got, want) {
			t.Errorf("set %d: the map holds %d addresses, want %d", n, len(got), len(want))
		}
	}
}
