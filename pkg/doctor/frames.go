package doctor

import (
	"encoding/binary"
	"net"
	"net/netip"
)

const (
	etherTypeARP  = 0x0806
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	arpRequest    = 1
	arpReply      = 2

	protoICMPv6      = 58
	icmpv6Advertised = 136 // neighbour advertisement

	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)

var broadcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// arpFrame builds an Ethernet ARP frame (request or reply).
func arpFrame(op uint16, dstMAC, srcMAC net.HardwareAddr, senderMAC net.HardwareAddr, senderIP netip.Addr, targetMAC net.HardwareAddr, targetIP netip.Addr) []byte {
	b := make([]byte, 42)
	copy(b[0:6], dstMAC)
	copy(b[6:12], srcMAC)
	binary.BigEndian.PutUint16(b[12:], etherTypeARP)
	binary.BigEndian.PutUint16(b[14:], 1) // Ethernet
	binary.BigEndian.PutUint16(b[16:], etherTypeIPv4)
	b[18], b[19] = 6, 4
	binary.BigEndian.PutUint16(b[20:], op)
	copy(b[22:28], senderMAC)
	s4 := senderIP.As4()
	copy(b[28:32], s4[:])
	if targetMAC != nil {
		copy(b[32:38], targetMAC)
	}
	t4 := targetIP.As4()
	copy(b[38:42], t4[:])
	return b
}

// arpPacket is a parsed ARP frame.
type arpPacket struct {
	op        uint16
	senderMAC net.HardwareAddr
	senderIP  netip.Addr
	targetIP  netip.Addr
}

func parseARP(b []byte) (arpPacket, bool) {
	if len(b) < 42 || binary.BigEndian.Uint16(b[12:]) != etherTypeARP ||
		binary.BigEndian.Uint16(b[14:]) != 1 || binary.BigEndian.Uint16(b[16:]) != etherTypeIPv4 || b[18] != 6 || b[19] != 4 {
		return arpPacket{}, false
	}
	return arpPacket{
		op:        binary.BigEndian.Uint16(b[20:]),
		senderMAC: net.HardwareAddr(append([]byte(nil), b[22:28]...)),
		senderIP:  netip.AddrFrom4([4]byte(b[28:32])),
		targetIP:  netip.AddrFrom4([4]byte(b[38:42])),
	}, true
}

// tcpSegment describes a TCP/IPv4 segment to build, or one parsed.
type tcpSegment struct {
	dstMAC, srcMAC   net.HardwareAddr
	src, dst         netip.Addr
	srcPort, dstPort uint16
	seq, ack         uint32
	flags            uint8
	mss              uint16 // the MSS option; 0: none
	ttl              uint8
	dontFragment     bool
	totLen           int
}

// tcpFrame builds an Ethernet/IPv4/TCP frame, or Ethernet/IPv6/TCP for
// IPv6 addresses, with correct checksums.
func tcpFrame(s tcpSegment) []byte {
	optLen := 0
	if s.mss != 0 {
		optLen = 4
	}
	tcpLen := 20 + optLen
	ipLen := 20
	if s.src.Is6() {
		ipLen = 40
	}
	b := make([]byte, 14+ipLen+tcpLen)
	copy(b[0:6], s.dstMAC)
	copy(b[6:12], s.srcMAC)
	ip := b[14 : 14+ipLen]
	var src, dst []byte
	if s.src.Is6() {
		binary.BigEndian.PutUint16(b[12:], etherTypeIPv6)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(tcpLen))
		ip[6], ip[7] = 6, 64
		s16, d16 := s.src.As16(), s.dst.As16()
		src, dst = s16[:], d16[:]
		copy(ip[8:24], src)
		copy(ip[24:40], dst)
	} else {
		binary.BigEndian.PutUint16(b[12:], etherTypeIPv4)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+tcpLen))
		binary.BigEndian.PutUint16(ip[4:], uint16(s.srcPort)) // any ID
		binary.BigEndian.PutUint16(ip[6:], 0x4000)            // DF
		ip[8] = 64
		ip[9] = 6
		s4, d4 := s.src.As4(), s.dst.As4()
		src, dst = s4[:], d4[:]
		copy(ip[12:16], src)
		copy(ip[16:20], dst)
		binary.BigEndian.PutUint16(ip[10:], checksum(ip, 0))
	}
	tcp := b[14+ipLen:]
	binary.BigEndian.PutUint16(tcp[0:], s.srcPort)
	binary.BigEndian.PutUint16(tcp[2:], s.dstPort)
	binary.BigEndian.PutUint32(tcp[4:], s.seq)
	binary.BigEndian.PutUint32(tcp[8:], s.ack)
	tcp[12] = byte(tcpLen/4) << 4
	tcp[13] = s.flags
	binary.BigEndian.PutUint16(tcp[14:], 64240)
	if s.mss != 0 {
		tcp[20], tcp[21] = 2, 4
		binary.BigEndian.PutUint16(tcp[22:], s.mss)
	}
	// Pseudo-header: source, destination, protocol, TCP length.
	var ph uint32
	for i := 0; i < len(src); i += 2 {
		ph += uint32(binary.BigEndian.Uint16(src[i:])) + uint32(binary.BigEndian.Uint16(dst[i:]))
	}
	ph += 6 + uint32(tcpLen)
	binary.BigEndian.PutUint16(tcp[16:], checksum(tcp, ph))
	return b
}

// parseTCP parses an Ethernet/IPv4/TCP frame, or an Ethernet/IPv6/TCP one
// without extension headers.
func parseTCP(b []byte) (tcpSegment, bool) {
	if len(b) < 14+20 {
		return tcpSegment{}, false
	}
	s := tcpSegment{dstMAC: net.HardwareAddr(append([]byte(nil), b[0:6]...)), srcMAC: net.HardwareAddr(append([]byte(nil), b[6:12]...))}
	ip := b[14:]
	var tcp []byte
	switch binary.BigEndian.Uint16(b[12:]) {
	case etherTypeIPv4:
		ihl := int(ip[0]&0x0f) * 4
		if ip[0]>>4 != 4 || ihl < 20 || len(ip) < ihl+20 || ip[9] != 6 {
			return tcpSegment{}, false
		}
		if binary.BigEndian.Uint16(ip[6:])&0x1fff != 0 {
			return tcpSegment{}, false // a later fragment
		}
		tcp = ip[ihl:]
		s.src, s.dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
		s.ttl, s.dontFragment = ip[8], binary.BigEndian.Uint16(ip[6:])&0x4000 != 0
		s.totLen = int(binary.BigEndian.Uint16(ip[2:]))
	case etherTypeIPv6:
		if len(ip) < 40+20 || ip[0]>>4 != 6 || ip[6] != 6 {
			return tcpSegment{}, false
		}
		tcp = ip[40:]
		s.src, s.dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
		s.ttl = ip[7]
		s.totLen = 40 + int(binary.BigEndian.Uint16(ip[4:]))
	default:
		return tcpSegment{}, false
	}
	doff := int(tcp[12]>>4) * 4
	if doff < 20 || len(tcp) < doff {
		return tcpSegment{}, false
	}
	s.srcPort, s.dstPort = binary.BigEndian.Uint16(tcp[0:]), binary.BigEndian.Uint16(tcp[2:])
	s.seq, s.ack, s.flags = binary.BigEndian.Uint32(tcp[4:]), binary.BigEndian.Uint32(tcp[8:]), tcp[13]
	opts := tcp[20:doff]
	for len(opts) > 0 {
		switch opts[0] {
		case 0:
			opts = nil
		case 1:
			opts = opts[1:]
		default:
			if len(opts) < 2 || int(opts[1]) < 2 || int(opts[1]) > len(opts) {
				opts = nil
				continue
			}
			if opts[0] == 2 && opts[1] == 4 {
				s.mss = binary.BigEndian.Uint16(opts[2:])
			}
			opts = opts[opts[1]:]
		}
	}
	return s, true
}

// checksum is the Internet checksum of b, starting from the partial sum
// sum (a pseudo-header's).
func checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// parseNA returns the target address of a neighbour advertisement frame
// (IPv6 without extension headers, as neighbour discovery sends it) and
// the Ethernet address it came from.
func parseNA(b []byte) (target netip.Addr, from net.HardwareAddr, ok bool) {
	const icmp = 14 + 40
	if len(b) < icmp+24 || binary.BigEndian.Uint16(b[12:]) != etherTypeIPv6 || b[14]>>4 != 6 ||
		b[20] != protoICMPv6 || b[icmp] != icmpv6Advertised || b[icmp+1] != 0 {
		return netip.Addr{}, nil, false
	}
	target = netip.AddrFrom16([16]byte(b[icmp+8 : icmp+24]))
	return target, net.HardwareAddr(append([]byte(nil), b[6:12]...)), true
}
