package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// maxDatagram is the receive buffer size: longer datagrams are truncated,
// which does not matter since the payload is ignored.
const maxDatagram = 2048

// udpNetworks returns the networks ("udp4", "udp6") that -udp addr serves:
// both for an address without a host, else the host's family. The host
// must be an IP literal and the port a number.
func udpNetworks(addr string) ([]string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%q: want [HOST]:PORT", addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return nil, fmt.Errorf("%q: port %q is not a number in 0..65535", addr, port)
	}
	if host == "" {
		return []string{"udp4", "udp6"}, nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return nil, fmt.Errorf("%q: host %q is not an IP address", addr, host)
	}
	if ip.Is4() || ip.Is4In6() {
		return []string{"udp4"}, nil
	}
	return []string{"udp6"}, nil
}

// udpResponder answers datagrams on one IPv4 and/or one IPv6 socket with
// "<name> <sender>\n", from the address each datagram was sent to.
type udpResponder struct {
	name  string
	log   *slog.Logger
	conns []udpConn
	once  sync.Once
}

// udpConn is one socket with its family's control-message reader and
// writer.
type udpConn struct {
	pc    net.PacketConn
	read  func(b []byte) (n int, dst netip.Addr, src net.Addr, err error)
	write func(b []byte, from netip.Addr, to net.Addr) error
}

// listenUDP opens the sockets -udp addr asks for. When addr has no host,
// a failure to open the IPv6 socket (IPv6 disabled) is logged and IPv4 is
// served alone; every other failure is returned.
func listenUDP(addr, name string, log *slog.Logger) (*udpResponder, error) {
	return listenUDPWith(openUDP, addr, name, log)
}

// listenUDPWith is listenUDP with the socket opener as a parameter, for
// tests.
func listenUDPWith(open func(network, addr string) (udpConn, error), addr, name string, log *slog.Logger) (*udpResponder, error) {
	nets, err := udpNetworks(addr)
	if err != nil {
		return nil, err
	}
	u := &udpResponder{name: name, log: log}
	for _, network := range nets {
		c, err := open(network, addr)
		if err != nil {
			if network == "udp6" && len(nets) == 2 {
				log.Warn("UDP responder serves IPv4 only: cannot open an IPv6 socket", "addr", addr, "err", err)
				continue
			}
			u.Close()
			return nil, err
		}
		u.conns = append(u.conns, c)
	}
	return u, nil
}

// openUDP opens one socket of network ("udp4" or "udp6") on addr and asks
// for the destination address of every datagram.
func openUDP(network, addr string) (udpConn, error) {
	pc, err := net.ListenPacket(network, addr)
	if err != nil {
		return udpConn{}, err
	}
	if network == "udp4" {
		p := ipv4.NewPacketConn(pc)
		if err := p.SetControlMessage(ipv4.FlagDst|ipv4.FlagInterface, true); err != nil {
			pc.Close()
			return udpConn{}, fmt.Errorf("IP_PKTINFO: %w", err)
		}
		return udpConn{
			pc: pc,
			read: func(b []byte) (int, netip.Addr, net.Addr, error) {
				n, cm, src, err := p.ReadFrom(b)
				var dst netip.Addr
				if cm != nil {
					dst, _ = netip.AddrFromSlice(cm.Dst.To4())
				}
				return n, dst, src, err
			},
			write: func(b []byte, from netip.Addr, to net.Addr) error {
				var cm *ipv4.ControlMessage
				if from.IsValid() {
					cm = &ipv4.ControlMessage{Src: from.AsSlice()}
				}
				_, err := p.WriteTo(b, cm, to)
				return err
			},
		}, nil
	}
	p := ipv6.NewPacketConn(pc)
	if err := p.SetControlMessage(ipv6.FlagDst|ipv6.FlagInterface, true); err != nil {
		pc.Close()
		return udpConn{}, fmt.Errorf("IPV6_RECVPKTINFO: %w", err)
	}
	return udpConn{
		pc: pc,
		read: func(b []byte) (int, netip.Addr, net.Addr, error) {
			n, cm, src, err := p.ReadFrom(b)
			var dst netip.Addr
			if cm != nil {
				dst, _ = netip.AddrFromSlice(cm.Dst.To16())
			}
			return n, dst, src, err
		},
		write: func(b []byte, from netip.Addr, to net.Addr) error {
			var cm *ipv6.ControlMessage
			if from.IsValid() {
				cm = &ipv6.ControlMessage{Src: from.AsSlice()}
			}
			_, err := p.WriteTo(b, cm, to)
			return err
		},
	}, nil
}

// Addrs returns the local addresses of the open sockets.
func (u *udpResponder) Addrs() []net.Addr {
	out := make([]net.Addr, len(u.conns))
	for i, c := range u.conns {
		out[i] = c.pc.LocalAddr()
	}
	return out
}

// Serve answers datagrams on every socket, each in its own goroutine,
// until Close. A socket that fails for another reason reports the error
// on errc (which must have room for one error per socket).
func (u *udpResponder) Serve(errc chan<- error) {
	for _, c := range u.conns {
		u.log.Info("UDP responder listening", "addr", c.pc.LocalAddr().String())
		go func() {
			if err := u.serve(c); err != nil {
				errc <- err
			}
		}()
	}
}

// serve is one socket's loop; it returns nil once the socket is closed.
func (u *udpResponder) serve(c udpConn) error {
	buf := make([]byte, maxDatagram)
	for {
		_, dst, src, err := c.read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// A connected peer's ICMP error can surface here on some
			// kernels; it concerns one peer, not the socket.
			if isTransient(err) {
				u.log.Debug("UDP read", "err", err)
				continue
			}
			return fmt.Errorf("UDP %s: %w", c.pc.LocalAddr(), err)
		}
		reply := udpReply(u.name, src)
		if err := c.write(reply, dst, src); err != nil {
			u.log.Warn("UDP reply failed", "to", src.String(), "from", dst.String(), "err", err)
			continue
		}
		u.log.Debug("UDP datagram", "from", src.String(), "to", dst.String())
	}
}

// udpReply is the answer to a datagram from src: "<name> <src ip:port>\n",
// with an IPv4-mapped sender shown as IPv4.
func udpReply(name string, src net.Addr) []byte {
	peer := src.String()
	if ua, ok := src.(*net.UDPAddr); ok {
		ap := ua.AddrPort()
		peer = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
	}
	return []byte(name + " " + peer + "\n")
}

// isTransient reports whether a read error concerns one datagram or peer
// rather than the socket, so the loop should go on.
func isTransient(err error) bool {
	for _, e := range []error{syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.ENETUNREACH,
		syscall.ENOBUFS, syscall.ENOMEM, syscall.EINTR, syscall.EAGAIN} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Close closes every socket; it is safe to call more than once.
func (u *udpResponder) Close() {
	u.once.Do(func() {
		for _, c := range u.conns {
			_ = c.pc.Close()
		}
	})
}
