//go:build linux

package netif

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/ndframe"
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
	var frames [][]byte
	for _, a := range addrs {
		if a.Is4() {
			frames = append(frames, garp(1, mac, a), garp(2, mac, a))
		} else {
			frames = append(frames, ndframe.Advertisement(mac, net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}, a))
		}
	}
	ifindex := l.Attrs().Index
	if err := sendAll(frames, func(f []byte) error { return sendFrame(fd, ifindex, f) }, time.Now().Add(announceTime)); err != nil {
		return fmt.Errorf("announcing on %s: %w", ifname, err)
	}
	return nil
}

// announceTime bounds how long Announce waits for room to send in.
const announceTime = 2 * time.Second

// sendAll sends frames with send, each in turn; a frame refused for want
// of room (ENOBUFS: the interface's queue full, or for a veth its peer's
// backlog) is sent again once there may be room, until deadline: the
// 8,000 frames announcing 4,000 addresses filled the queue, and each
// frame refused was an announcement lost. The error counts the frames
// not sent.
func sendAll(frames [][]byte, send func([]byte) error, deadline time.Time) error {
	failed := 0
	var first error
	for _, f := range frames {
		err := send(f)
		for errors.Is(err, unix.ENOBUFS) && time.Now().Before(deadline) {
			time.Sleep(roomWait)
			err = send(f)
		}
		if err != nil {
			if first == nil {
				first = err
			}
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d frames not sent: %w", failed, len(frames), first)
	}
	return nil
}

// roomWait is the wait before a frame refused for want of room is sent
// again.
const roomWait = 200 * time.Microsecond

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
