//go:build linux

package netif

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// arpListen is how long Reprobe listens for the replies to its ARP
// requests: an answer on a segment takes milliseconds, and Reprobe runs
// every 500 ms by default (a later answer is the kernel's to apply).
const arpListen = 250 * time.Millisecond

// requestARP asks, by broadcast from an IPv4 address of the interface on
// the target's subnet, for the MAC of each of addrs, on a packet socket
// (CAP_NET_RAW), and listens for the replies for arpListen in the
// background: a reply naming another MAC than the entry in table replaces
// it. It returns the addresses it could not ask for, for the kernel to
// verify: those on none of the interface's subnets (the kernel picks the
// source address then), and all of them when dlbd may not open a packet
// socket.
func requestARP(ifindex int, addrs []netip.Addr, table map[netip.Addr]netlink.Neigh, manage bool) ([]netip.Addr, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return nil, fmt.Errorf("looking up interface %d: %w", ifindex, err)
	}
	mac := l.Attrs().HardwareAddr
	own, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil || len(mac) != 6 {
		return addrs, nil
	}
	var unsent []netip.Addr
	srcs := map[netip.Addr]netip.Addr{}
	for _, a := range addrs {
		if src, ok := arpSource(own, a); ok {
			srcs[a] = src
		} else {
			unsent = append(unsent, a)
		}
	}
	if len(srcs) == 0 {
		return addrs, nil
	}
	// The netlink handle is made here, in the caller's network namespace,
	// for the listener, whose thread may be in another one.
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("reprobing on %s: %w", l.Attrs().Name, err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		h.Close()
		return addrs, nil // without CAP_NET_RAW: the kernel's way
	}
	if err == nil {
		err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifindex})
		if err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("reprobing on %s: opening a packet socket: %w", l.Attrs().Name, err)
	}
	asked := map[netip.Addr]arpQuestion{}
	var errs []error
	for a, src := range srcs {
		if err := sendFrame(fd, ifindex, arpFrame(1, broadcastMAC, mac, src, net.HardwareAddr{0, 0, 0, 0, 0, 0}, a)); err != nil {
			errs = append(errs, fmt.Errorf("reprobing %s: %w", a, err))
			continue
		}
		asked[a] = arpQuestion{src: src, had: table[a].HardwareAddr, manage: manage || table[a].FlagsExt&netlink.NTF_EXT_MANAGED != 0}
	}
	go listenARP(fd, h, ifindex, mac, asked, time.Now().Add(arpListen))
	return unsent, errors.Join(errs...)
}

// arpQuestion is an ARP request Reprobe sent: from src, about an entry
// that had the MAC had, to be made managed again (manage) once a new MAC
// is put in.
type arpQuestion struct {
	src    netip.Addr
	had    net.HardwareAddr
	manage bool
}

// arpSource is the address of own to ask about a from: one whose subnet
// holds a. Not any other: a cluster address (a /32 of the interface) as
// the sender would announce it on the segment, as a gratuitous ARP does,
// from a dispatcher that may not be the one serving it.
func arpSource(own []netlink.Addr, a netip.Addr) (netip.Addr, bool) {
	for _, o := range own {
		if o.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(o.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ones, _ := o.Mask.Size(); ip != a && netip.PrefixFrom(ip, ones).Masked().Contains(a) {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// listenARP reads the ARP replies to the questions asked until deadline
// (or all are answered), puts each MAC that differs from the one the
// entry had into the neighbour table (then made managed again by
// resolve, if it is to be), then closes fd and h. The first reply for an address counts.
func listenARP(fd int, h *netlink.Handle, ifindex int, mac net.HardwareAddr, asked map[netip.Addr]arpQuestion, deadline time.Time) {
	defer h.Close()
	defer unix.Close(fd)
	buf := make([]byte, 128)
	for len(asked) > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return
		}
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return // the deadline (EAGAIN), or the socket is gone
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		r, ok := parseARPReply(buf[:n])
		if !ok || !bytes.Equal(r.targetMAC, mac) {
			continue
		}
		q, ok := asked[r.sender]
		if !ok || r.target != q.src {
			continue
		}
		delete(asked, r.sender)
		if bytes.Equal(r.senderMAC, q.had) {
			continue
		}
		if h.NeighSet(&netlink.Neigh{LinkIndex: ifindex, Family: netlink.FAMILY_V4, State: netlink.NUD_REACHABLE,
			IP: r.sender.AsSlice(), HardwareAddr: r.senderMAC}) == nil && q.manage {
			_ = resolve(h, ifindex, netlink.FAMILY_V4, r.sender.AsSlice())
		}
	}
}

// arpReply is what an ARP reply says: sender is at senderMAC, to target
// at targetMAC.
type arpReply struct {
	sender, target       netip.Addr
	senderMAC, targetMAC net.HardwareAddr
}

// parseARPReply reads an Ethernet frame holding an IPv4-over-Ethernet ARP
// reply.
func parseARPReply(b []byte) (arpReply, bool) {
	if len(b) < 42 || binary.BigEndian.Uint16(b[12:]) != unix.ETH_P_ARP {
		return arpReply{}, false
	}
	a := b[14:]
	if binary.BigEndian.Uint16(a[0:]) != 1 || binary.BigEndian.Uint16(a[2:]) != unix.ETH_P_IP || a[4] != 6 || a[5] != 4 ||
		binary.BigEndian.Uint16(a[6:]) != 2 {
		return arpReply{}, false
	}
	return arpReply{
		senderMAC: net.HardwareAddr(bytes.Clone(a[8:14])), sender: netip.AddrFrom4([4]byte(a[14:18])),
		targetMAC: net.HardwareAddr(bytes.Clone(a[18:24])), target: netip.AddrFrom4([4]byte(a[24:28])),
	}, true
}
