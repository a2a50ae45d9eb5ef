package testutil

import (
	"encoding/binary"
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
	// Src and Dst are the IP addresses (both IPv4 or both IPv6).
	Src, Dst netip.Addr
	// TTL is the IPv4 TTL or IPv6 hop limit (default 64).
	TTL uint8
	// Proto is "tcp", "udp", "icmp" (ICMP for IPv4, ICMPv6 for IPv6) or
	// "none" (no transport header: IPv6 next header 59).
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
	// Ext are IPv6 extension headers between the IPv6 header and the
	// transport header, in order.
	Ext []Ext6
	// UDPZeroChecksum sends a UDP datagram with checksum 0 ("no checksum"
	// for IPv4).
	UDPZeroChecksum bool
	// Seq is the TCP sequence number (default 1000).
	Seq uint32
	// ICMPType and ICMPCode make an ICMP or ICMPv6 message other than an
	// echo request; ICMPInfo is the word after the checksum (the MTU of
	// "fragmentation needed" and "packet too big"), Quote the quoted
	// packet of an error (from its IP header on, see IPPacket).
	ICMPType, ICMPCode uint8
	ICMPInfo           uint32
	Quote              []byte
	// Payload is the transport payload.
	Payload []byte
}

// Ext6 is an IPv6 extension header of a Frame.
type Ext6 struct {
	// Type is the header's next-header number: 0 (hop-by-hop options), 43
	// (routing), 44 (fragment) or 60 (destination options).
	Type uint8
	// Units is the header's length in 8-byte units beyond the first
	// (options and routing headers; PadN fills it).
	Units uint8
	// SegmentsLeft is a routing header's segments-left field.
	SegmentsLeft uint8
	// FragOffset (8-byte units) and MoreFragments fill a fragment header.
	FragOffset    uint16
	MoreFragments bool
}

// IPv6 extension header and ICMP numbers the builders use.
const (
	ExtHopByHop    = 0
	ExtRouting     = 43
	ExtFragment    = 44
	ExtDestination = 60

	ICMPv4DestUnreachable  = 3
	ICMPv4FragNeeded       = 4 // code of ICMPv4DestUnreachable
	ICMPv4PortUnreachable  = 3 // code of ICMPv4DestUnreachable
	ICMPv4TimeExceeded     = 11
	ICMPv6DestUnreachable  = 1
	ICMPv6PacketTooBig     = 2
	ICMPv6EchoRequest      = 128
	ICMPv6NeighborSolicit  = 135
	ICMPv6PortUnreachable  = 4 // code of ICMPv6DestUnreachable
	ipProtoNoNext          = 59
	ipProtoICMPv6          = 58
	ipProtoTCP, ipProtoUDP = 6, 17
)

// extBytes serialises extension headers; last is the next header after
// them.
func extBytes(ext []Ext6, last layers.IPProtocol) []byte {
	var out []byte
	for i, e := range ext {
		next := uint8(last)
		if i+1 < len(ext) {
			next = ext[i+1].Type
		}
		switch e.Type {
		case ExtFragment:
			h := make([]byte, 8)
			h[0] = next
			fo := e.FragOffset << 3
			if e.MoreFragments {
				fo |= 1
			}
			binary.BigEndian.PutUint16(h[2:], fo)
			binary.BigEndian.PutUint32(h[4:], 0x1234)
			out = append(out, h...)
		default:
			h := make([]byte, 8*(int(e.Units)+1))
			h[0], h[1] = next, e.Units
			if e.Type == ExtRouting {
				h[2], h[3] = 253, e.SegmentsLeft // experimental routing type
			} else {
				// PadN over the rest of the header.
				h[2], h[3] = 1, uint8(len(h)-4)
			}
			out = append(out, h...)
		}
	}
	return out
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

	ttl := f.TTL
	if ttl == 0 {
		ttl = 64
	}
	v6 := f.Src.Is6() && !f.Src.Is4In6()
	var netLayer gopacket.NetworkLayer
	var ip6 *layers.IPv6
	if v6 {
		ip6 = &layers.IPv6{Version: 6, HopLimit: ttl, SrcIP: f.Src.AsSlice(), DstIP: f.Dst.AsSlice()}
		ip6.NextHeader = ipProto(f.Proto, true)
		netLayer = ip6
		ls = append(ls, ip6)
		if len(f.Ext) > 0 {
			ip6.NextHeader = layers.IPProtocol(f.Ext[0].Type)
			ls = append(ls, gopacket.Payload(extBytes(f.Ext, ipProto(f.Proto, true))))
		}
	} else {
		ip4 := &layers.IPv4{Version: 4, TTL: ttl, SrcIP: f.Src.AsSlice(), DstIP: f.Dst.AsSlice(),
			Protocol: ipProto(f.Proto, false), FragOffset: f.FragOffset, Id: 0x1234}
		if f.MoreFragments {
			ip4.Flags = layers.IPv4MoreFragments
		}
		if f.Options {
			ip4.Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
		}
		netLayer = ip4
		ls = append(ls, ip4)
	}
	seq := f.Seq
	if seq == 0 {
		seq = 1000
	}
	udpAt := -1
	switch f.Proto {
	case "tcp":
		tcp := &layers.TCP{SrcPort: layers.TCPPort(f.SrcPort), DstPort: layers.TCPPort(f.DstPort), Seq: seq, Window: 65535}
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
		udpAt = len(ls) - 1
	case "icmp":
		if v6 {
			typ := f.ICMPType
			if typ == 0 {
				typ = ICMPv6EchoRequest
			}
			icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, f.ICMPCode)}
			_ = icmp.SetNetworkLayerForChecksum(ip6)
			info := make([]byte, 4)
			binary.BigEndian.PutUint32(info, f.ICMPInfo)
			if typ == ICMPv6EchoRequest && f.ICMPInfo == 0 {
				binary.BigEndian.PutUint32(info, 1<<16|1) // id 1, seq 1
			}
			ls = append(ls, icmp, gopacket.Payload(append(info, f.Quote...)))
		} else {
			typ := f.ICMPType
			if typ == 0 && f.Quote == nil {
				typ = layers.ICMPv4TypeEchoRequest
			}
			icmp := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, f.ICMPCode), Id: uint16(f.ICMPInfo >> 16), Seq: uint16(f.ICMPInfo)}
			if typ == layers.ICMPv4TypeEchoRequest && f.ICMPInfo == 0 {
				icmp.Id, icmp.Seq = 1, 1
			}
			ls = append(ls, icmp, gopacket.Payload(f.Quote))
		}
	}
	ls = append(ls, gopacket.Payload(f.Payload))
	out := Serialize(tb, ls...)
	if f.UDPZeroChecksum && udpAt >= 0 {
		// The UDP header's checksum: it follows everything before it.
		off := len(out) - len(f.Payload) - 8 + 6
		out[off], out[off+1] = 0, 0
	}
	return out
}

// IPPacket returns the frame's IP packet (without the Ethernet header and
// VLAN tags), truncated to n bytes when n > 0: the part of a packet an
// ICMP error quotes.
func (f Frame) IPPacket(tb testing.TB, n int) []byte {
	tb.Helper()
	g := f
	g.VLANs = nil
	b := g.Build(tb)[14:]
	if n > 0 && n < len(b) {
		b = b[:n]
	}
	return b
}

func ipProto(p string, v6 bool) layers.IPProtocol {
	switch p {
	case "tcp":
		return layers.IPProtocolTCP
	case "udp":
		return layers.IPProtocolUDP
	case "icmp":
		if v6 {
			return layers.IPProtocolICMPv6
		}
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
