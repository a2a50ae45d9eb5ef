package testutil

import (
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Frame describes a test frame; zero fields take defaults.
type Frame struct {
	// SrcMAC and DstMAC default to 02:00:00:00:00:01 and :02.
	SrcMAC, DstMAC net.HardwareAddr
	// VLANs are 802.1Q tags, outermost first; with two, the outer one is
	// sent as 802.1ad.
	VLANs []uint16
	// Src and Dst are the IP addresses.
	Src, Dst netip.Addr
	// Proto is "tcp", "udp" or "icmp".
	Proto string
	// SrcPort and DstPort are the transport ports.
	SrcPort, DstPort uint16
	// Flags are TCP flags as letters: S(YN) A(CK) F(IN) R(ST) P(SH).
	Flags string
	// FragOffset (in 8-byte units) and MoreFragments make a fragment.
	FragOffset    uint16
	MoreFragments bool
	// Options adds 4 bytes of IPv4 options (NOP NOP NOP EOL).
	Options bool
	// Payload is the transport payload.
	Payload []byte
}

var (
	// ClientMAC is the default source MAC of test frames.
	ClientMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	// RouterMAC is the default destination MAC of test frames.
	RouterMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
)

// Build serialises the frame, with lengths and checksums computed.
func (f Frame) Build(tb testing.TB) []byte {
	tb.Helper()
	src, dst := f.SrcMAC, f.DstMAC
	if src == nil {
		src = ClientMAC
	}
	if dst == nil {
		dst = RouterMAC
	}
	ipType := layers.EthernetTypeIPv4
	if f.Src.Is6() {
		ipType = layers.EthernetTypeIPv6
	}
	var ls []gopacket.SerializableLayer
	eth := &layers.Ethernet{SrcMAC: src, DstMAC: dst, EthernetType: ipType}
	ls = append(ls, eth)
	for i, id := range f.VLANs {
		t := layers.EthernetTypeDot1Q
		if i == 0 && len(f.VLANs) > 1 {
			t = layers.EthernetTypeQinQ
		}
		if i == 0 {
			eth.EthernetType = t
		} else {
			ls[len(ls)-1].(*layers.Dot1Q).Type = t
		}
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: id, Type: ipType})
	}

	var netLayer gopacket.NetworkLayer
	if f.Src.Is6() {
		ip6 := &layers.IPv6{Version: 6, HopLimit: 64, SrcIP: f.Src.AsSlice(), DstIP: f.Dst.AsSlice()}
		ip6.NextHeader = ipProto(f.Proto)
		netLayer = ip6
		ls = append(ls, ip6)
	} else {
		ip4 := &layers.IPv4{Version: 4, TTL: 64, SrcIP: f.Src.AsSlice(), DstIP: f.Dst.AsSlice(),
			Protocol: ipProto(f.Proto), FragOffset: f.FragOffset, Id: 0x1234}
		if f.MoreFragments {
			ip4.Flags = layers.IPv4MoreFragments
		}
		if f.Options {
			ip4.Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
		}
		netLayer = ip4
		ls = append(ls, ip4)
	}
	switch f.Proto {
	case "tcp":
		tcp := &layers.TCP{SrcPort: layers.TCPPort(f.SrcPort), DstPort: layers.TCPPort(f.DstPort), Seq: 1000, Window: 65535}
		for _, c := range f.Flags {
			switch c {
			case 'S':
				tcp.SYN = true
			case 'A':
				tcp.ACK = true
				tcp.Ack = 1
			case 'F':
				tcp.FIN = true
			case 'R':
				tcp.RST = true
			case 'P':
				tcp.PSH = true
			}
		}
		_ = tcp.SetNetworkLayerForChecksum(netLayer)
		ls = append(ls, tcp)
	case "udp":
		udp := &layers.UDP{SrcPort: layers.UDPPort(f.SrcPort), DstPort: layers.UDPPort(f.DstPort)}
		_ = udp.SetNetworkLayerForChecksum(netLayer)
		ls = append(ls, udp)
	case "icmp":
		ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: 1, Seq: 1})
	}
	ls = append(ls, gopacket.Payload(f.Payload))
	return Serialize(tb, ls...)
}

func ipProto(p string) layers.IPProtocol {
	switch p {
	case "tcp":
		return layers.IPProtocolTCP
	case "udp":
		return layers.IPProtocolUDP
	case "icmp":
		return layers.IPProtocolICMPv4
	}
	return layers.IPProtocolNoNextHeader
}

// Serialize serialises layers with lengths and checksums fixed up.
func Serialize(tb testing.TB, ls ...gopacket.SerializableLayer) []byte {
	tb.Helper()
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		tb.Fatalf("serialising frame: %v", err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// ARPRequest returns an ARP who-has frame for target from sender.
func ARPRequest(tb testing.TB, sender, target netip.Addr) []byte {
	tb.Helper()
	eth := &layers.Ethernet{SrcMAC: ClientMAC, DstMAC: net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, EthernetType: layers.EthernetTypeARP}
	arp := &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
		Operation: layers.ARPRequest, SourceHwAddress: ClientMAC, SourceProtAddress: sender.AsSlice(),
		DstHwAddress: make([]byte, 6), DstProtAddress: target.AsSlice()}
	return Serialize(tb, eth, arp)
}
