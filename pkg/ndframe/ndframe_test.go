package ndframe

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

func TestAdvertisementFrame(t *testing.T) {
	mac := net.HardwareAddr{2, 0xd1, 0xb0, 0, 0, 4}
	a6 := netip.MustParseAddr("2001:2::100")
	frame := Advertisement(mac, net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}, a6)
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	na, ok := p.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement)
	if !ok {
		t.Fatalf("not a neighbour advertisement: %v", p)
	}
	if !na.Override() || na.Solicited() || !na.TargetAddress.Equal(a6.AsSlice()) || len(na.Options) != 1 ||
		!bytes.Equal(na.Options[0].Data, mac) {
		t.Errorf("advertisement %+v", na)
	}
	ip := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	if ip.HopLimit != 255 {
		t.Errorf("hop limit %d: receivers drop advertisements that are not 255", ip.HopLimit)
	}
	checkICMPv6Checksum(t, p)
}

// checkICMPv6Checksum recomputes the checksum of p's ICMPv6 message with
// gopacket and compares it with the one in the frame.
func checkICMPv6Checksum(t *testing.T, p gopacket.Packet) {
	t.Helper()
	ip := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	icmp := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
	want := icmp.Checksum
	if err := icmp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true}, icmp, gopacket.Payload(icmp.Payload)); err != nil {
		t.Fatal(err)
	}
	got := gopacket.NewPacket(buf.Bytes(), layers.LayerTypeICMPv6, gopacket.Default).Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6).Checksum
	if got != want {
		t.Errorf("checksum %#04x, gopacket computes %#04x", want, got)
	}
}

func TestSolicitationFrame(t *testing.T) {
	mac := net.HardwareAddr{2, 0xd1, 0xb0, 0, 0, 4}
	src, target := netip.MustParseAddr("fe80::d1:b0ff:fe00:4"), netip.MustParseAddr("2001:2::21:3344")
	p := gopacket.NewPacket(Solicitation(mac, src, target), layers.LayerTypeEthernet, gopacket.Default)
	ns, ok := p.Layer(layers.LayerTypeICMPv6NeighborSolicitation).(*layers.ICMPv6NeighborSolicitation)
	if !ok {
		t.Fatalf("not a neighbour solicitation: %v", p)
	}
	if !ns.TargetAddress.Equal(target.AsSlice()) || len(ns.Options) != 1 ||
		ns.Options[0].Type != layers.ICMPv6OptSourceAddress || !bytes.Equal(ns.Options[0].Data, mac) {
		t.Errorf("solicitation %+v", ns)
	}
	ip := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	if ip.HopLimit != 255 || !ip.SrcIP.Equal(src.AsSlice()) || ip.DstIP.String() != "ff02::1:ff21:3344" {
		t.Errorf("IPv6 header %v -> %v hop limit %d, want %v -> ff02::1:ff21:3344 hop limit 255", ip.SrcIP, ip.DstIP, ip.HopLimit, src)
	}
	if eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet); eth.DstMAC.String() != "33:33:ff:21:33:44" || !bytes.Equal(eth.SrcMAC, mac) {
		t.Errorf("Ethernet %v -> %v", eth.SrcMAC, eth.DstMAC)
	}
	checkICMPv6Checksum(t, p)
}
