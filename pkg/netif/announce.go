//go:build linux

package netif

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Announce tells the segment of the named interface that the addresses
// are now reached through it: a gratuitous ARP request and reply for
// each IPv4 address, an unsolicited neighbour advertisement (override
// set) for each IPv6 one, sent on a packet socket (CAP_NET_RAW). Hosts
// and routers that had another MAC for an address (the peer dispatcher's,
// before a takeover) replace it at once.
func (*Netif) Announce(ifname string, addrs []netip.Addr) error {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("looking up interface %q: %w", ifname, err)
	}
	mac := l.Attrs().HardwareAddr
	if len(mac) != 6 {
		return fmt.Errorf("announcing on %s: not an Ethernet interface", ifname)
	}
	// Protocol 0: the socket only sends, and receives nothing while it
	// is open (ETH_P_ALL would copy it every frame of the host). Its
	// close waits for an RCU grace period in the kernel (10-20 ms on a
	// busy host), which the takeover need not wait for: it is closed
	// aside.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("announcing on %s: opening a packet socket: %w", ifname, err)
	}
	defer func() { go unix.Close(fd) }()
	var errs []error
	send := func(frame []byte) {
		if err := sendFrame(fd, l.Attrs().Index, frame); err != nil {
			errs = append(errs, err)
		}
	}
	for _, a := range addrs {
		if a.Is4() {
			send(garp(1, mac, a))
			send(garp(2, mac, a))
		} else {
			send(unsolicitedNA(mac, net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}, a))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("announcing on %s: %w", ifname, err)
	}
	return nil
}

var broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// sendFrame sends an Ethernet frame out of an interface on packet socket
// fd, to the frame's own destination MAC, as the frame's own protocol.
func sendFrame(fd, ifindex int, frame []byte) error {
	sa := &unix.SockaddrLinklayer{Ifindex: ifindex, Halen: 6, Protocol: htons(binary.BigEndian.Uint16(frame[12:14]))}
	copy(sa.Addr[:], frame[:6])
	return unix.Sendto(fd, frame, 0, sa)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// garp is a gratuitous ARP frame (op 1: request, 2: reply) for a, from
// mac: sender and target address both a.
func garp(op uint16, mac net.HardwareAddr, a netip.Addr) []byte {
	target := net.HardwareAddr{0, 0, 0, 0, 0, 0}
	if op == 2 {
		target = broadcastMAC
	}
	return arpFrame(op, broadcastMAC, mac, a, target, a)
}

// arpFrame is an IPv4-over-Ethernet ARP frame (op 1: request, 2: reply)
// from senderMAC (also the frame's source) and sender, about target and
// targetMAC, sent to dstMAC.
func arpFrame(op uint16, dstMAC, senderMAC net.HardwareAddr, sender netip.Addr, targetMAC net.HardwareAddr, target netip.Addr) []byte {
	b := make([]byte, 0, 42)
	b = append(b, dstMAC...)
	b = append(b, senderMAC...)
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_ARP)
	b = binary.BigEndian.AppendUint16(b, 1) // Ethernet
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_IP)
	b = append(b, 6, 4)
	b = binary.BigEndian.AppendUint16(b, op)
	s, t := sender.As4(), target.As4()
	b = append(b, senderMAC...)
	b = append(b, s[:]...)
	b = append(b, targetMAC...)
	return append(b, t[:]...)
}

// unsolicitedNA is an unsolicited neighbour advertisement of a (override
// set, a's link-layer address mac) to all nodes.
func unsolicitedNA(mac, dstMAC net.HardwareAddr, a netip.Addr) []byte {
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

// solicitation is a neighbour solicitation for target, from the address
// src and link-layer address mac (given as the source link-layer option,
// so that the target answers at once, by unicast), to target's
// solicited-node group.
func solicitation(mac net.HardwareAddr, src, target netip.Addr) []byte {
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
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_IPV6)
	b = append(b, 0x60, 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(len(icmp)))
	b = append(b, unix.IPPROTO_ICMPV6, 255)
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
	pseudo[7] = unix.IPPROTO_ICMPV6
	add(pseudo[:])
	add(msg)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
