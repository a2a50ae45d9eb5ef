package doctor

import (
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// packetLink is a raw packet socket on one interface that sees ARP
// frames and TCP segments from one port (a classic BPF filter keeps the
// rest of the interface's traffic out of it).
type packetLink struct {
	fd      int
	ifindex int
	mac     net.HardwareAddr
	mtu     int
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// CanProbe returns why this process cannot open the packet socket the
// checks and ProbeCluster send from (it needs CAP_NET_RAW), or nil.
func CanProbe() error {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("cannot open a packet socket (needs CAP_NET_RAW): %w", err)
	}
	return unix.Close(fd)
}

// openLink opens the packet socket on ifname, seeing ARP, TCP (over IPv4
// or IPv6) from srcPort, and neighbour advertisements.
func openLink(ifname string, srcPort uint16) (link, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", ifname, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("interface %s has no Ethernet address", ifname)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return nil, fmt.Errorf("opening a packet socket (needs CAP_NET_RAW): %w", err)
	}
	l := &packetLink{fd: fd, ifindex: ifi.Index, mac: ifi.HardwareAddr, mtu: ifi.MTU}
	prog, err := bpf.Assemble([]bpf.Instruction{
		/* 0 */ bpf.LoadAbsolute{Off: 12, Size: 2},
		/* 1 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: etherTypeARP, SkipTrue: 17}, // accept
		/* 2 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: etherTypeIPv4, SkipFalse: 6}, // 9: IPv6?
		/* 3 */ bpf.LoadAbsolute{Off: 23, Size: 1},
		/* 4 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 6, SkipFalse: 13}, // drop
		/* 5 */ bpf.LoadMemShift{Off: 14},
		/* 6 */ bpf.LoadIndirect{Off: 14, Size: 2},
		/* 7 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(srcPort), SkipFalse: 10}, // drop
		/* 8 */ bpf.RetConstant{Val: 0xffff},
		/* 9 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: etherTypeIPv6, SkipFalse: 8}, // drop
		/* 10 */ bpf.LoadAbsolute{Off: 20, Size: 1},
		/* 11 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 6, SkipFalse: 2}, // 14: ICMPv6?
		/* 12 */ bpf.LoadAbsolute{Off: 54, Size: 2},
		/* 13 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(srcPort), SkipTrue: 5, SkipFalse: 4}, // accept, drop
		/* 14 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: protoICMPv6, SkipFalse: 3}, // drop
		/* 15 */ bpf.LoadAbsolute{Off: 54, Size: 1},
		/* 16 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: icmpv6Advertised, SkipFalse: 1}, // drop
		/* 17 */ bpf.RetConstant{Val: 0xffff},
		/* 18 */ bpf.RetConstant{Val: 0},
		/* 19 */ bpf.RetConstant{Val: 0xffff},
	})
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("assembling the socket filter: %w", err)
	}
	filter := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		filter[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}); err != nil {
		l.Close()
		return nil, fmt.Errorf("attaching the socket filter: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
		l.Close()
		return nil, fmt.Errorf("binding the packet socket to %s: %w", ifname, err)
	}
	// Frames queued before the filter was attached may be anything.
	buf := make([]byte, 2048)
	for {
		if _, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT); err != nil {
			break
		}
	}
	return l, nil
}

func (l *packetLink) MAC() net.HardwareAddr { return l.mac }
func (l *packetLink) MTU() int              { return l.mtu }

func (l *packetLink) Send(frame []byte) error {
	var dst [8]byte
	copy(dst[:], frame[0:6])
	sa := &unix.SockaddrLinklayer{Ifindex: l.ifindex, Halen: 6, Addr: dst}
	if err := unix.Sendto(l.fd, frame, 0, sa); err != nil {
		return fmt.Errorf("sending a frame: %w", err)
	}
	return nil
}

// Recv returns the next frame received (not one this host sent), or
// errTimeout at deadline.
func (l *packetLink) Recv(deadline time.Time) ([]byte, error) {
	buf := make([]byte, 2048)
	for {
		wait := time.Until(deadline)
		if wait <= 0 {
			return nil, errTimeout
		}
		fds := []unix.PollFd{{Fd: int32(l.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(wait/time.Millisecond)+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("waiting for frames: %w", err)
		}
		if n == 0 {
			continue
		}
		m, from, err := unix.Recvfrom(l.fd, buf, unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("receiving a frame: %w", err)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		return append([]byte(nil), buf[:m]...), nil
	}
}

func (l *packetLink) Close() error { return unix.Close(l.fd) }
