// Package ndframe builds the Ethernet frames of IPv6 neighbour discovery
// messages that dlb sends on packet sockets: solicitations (to verify a
// server's MAC, to find who else holds an address) and unsolicited
// advertisements (a takeover's announcement). It has no dependency beyond
// the standard library, so that every platform builds it.
package ndframe

import (
	"encoding/binary"
	"net"
	"net/netip"
)

const (
	etherTypeIPv6 = 0x86dd
	protoICMPv6   = 58
)

// Advertisement is the Ethernet frame of an unsolicited neighbour
// advertisement of a (override set, a's link-layer address mac) to all
// nodes, sent to dstMAC.
func Advertisement(mac, dstMAC net.HardwareAddr, a netip.Addr) []byte {
	src := a.As16()
	dst := netip.MustParseAddr("ff02::1").As16()
	icmp := make([]byte, 32)
	icmp[0] = 136                                    // neighbour advertisement
	binary.BigEndian.PutUint32(icmp[4:], 0x20000000) // override
	copy(icmp[8:], src[:])                           // target
	icmp[24], icmp[25] = 2, 1                        // target link-layer address, 8 bytes
	copy(icmp[26:], mac)                             //
	return ndFrame(dstMAC, mac, src, dst, icmp)
}

// Solicitation is the Ethernet frame of a neighbour solicitation for
// target, from the IPv6 address src and link-layer address mac (given as
// the source link-layer option, so that the target answers at once, by
// unicast), to target's solicited-node group.
func Solicitation(mac net.HardwareAddr, src, target netip.Addr) []byte {
	s, t := src.As16(), target.As16()
	dst := [16]byte{0: 0xff, 1: 0x02, 11: 0x01, 12: 0xff, 13: t[13], 14: t[14], 15: t[15]}
	icmp := make([]byte, 32)
	icmp[0] = 135             // neighbour solicitation
	copy(icmp[8:], t[:])      // target
	icmp[24], icmp[25] = 1, 1 // source link-layer address, 8 bytes
	copy(icmp[26:], mac)
	return ndFrame(net.HardwareAddr{0x33, 0x33, dst[12], dst[13], dst[14], dst[15]}, mac, s, dst, icmp)
}

// ndFrame is the Ethernet frame of neighbour discovery message icmp (its
// checksum field 0, filled in here) from src and srcMAC to dst and
// dstMAC, with the hop limit 255 that receivers require.
func ndFrame(dstMAC, srcMAC net.HardwareAddr, src, dst [16]byte, icmp []byte) []byte {
	binary.BigEndian.PutUint16(icmp[2:], icmpv6Checksum(src, dst, icmp))
	b := make([]byte, 0, 14+40+len(icmp))
	b = append(b, dstMAC...)
	b = append(b, srcMAC...)
	b = binary.BigEndian.AppendUint16(b, etherTypeIPv6)
	b = append(b, 0x60, 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(len(icmp)))
	b = append(b, protoICMPv6, 255)
	b = append(b, src[:]...)
	b = append(b, dst[:]...)
	return append(b, icmp...)
}

// icmpv6Checksum is the ICMPv6 checksum of msg (its checksum field 0)
// from src to dst.
func icmpv6Checksum(src, dst [16]byte, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(src[:])
	add(dst[:])
	var pseudo [8]byte
	binary.BigEndian.PutUint32(pseudo[:], uint32(len(msg)))
	pseudo[7] = protoICMPv6
	add(pseudo[:])
	add(msg)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
