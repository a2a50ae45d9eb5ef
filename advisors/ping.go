package advisors

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// pingAdvisor is IBM's ping advisor: one ICMP (or ICMPv6) echo request to
// Target.Address; up on the matching echo reply, Load = round-trip time.
// Port, Request and Response are ignored; DefaultPort is 0.
//
// It first tries an unprivileged ICMP socket ("udp4"/"udp6", allowed when
// the process's group is in net.ipv4.ping_group_range), then a raw socket
// ("ip4:icmp"/"ip6:ipv6-icmp", which needs CAP_NET_RAW). If neither opens
// it is down with reason "cannot open ICMP socket: ...", a result of this
// host (Local) when it lacks the permission or descriptors.
//
// It waits at most the receive timeout (there is no connect), shortened by
// the context. A reply matches when it comes from the address and carries
// the request's sequence number and random payload (and, on a raw socket,
// its identifier). On a raw socket an ICMP error quoting the request is
// down at once: "host unreachable", "network unreachable", "destination
// unreachable (code N)", "ttl exceeded". Other down reasons: "no reply
// within 2s", and the send errors "network unreachable" and "host
// unreachable".
type pingAdvisor struct{}

func init() { register("ping", func() Advisor { return pingAdvisor{} }) }

// Name implements Advisor.
func (pingAdvisor) Name() string { return "ping" }

// DefaultPort implements Advisor: none.
func (pingAdvisor) DefaultPort() uint16 { return 0 }

// pingSocket is one way to open an ICMP socket.
type pingSocket struct {
	network, listen string
	raw             bool
}

var (
	pingSockets4 = []pingSocket{{"udp4", "0.0.0.0", false}, {"ip4:icmp", "0.0.0.0", true}}
	pingSockets6 = []pingSocket{{"udp6", "::", false}, {"ip6:ipv6-icmp", "::", true}}
)

// Probe implements Advisor.
func (pingAdvisor) Probe(ctx context.Context, t Target) Result {
	socks := pingSockets4
	if t.Address.Unmap().Is6() {
		socks = pingSockets6
	}
	return ping(ctx, t, socks)
}

// CanPing returns why this process cannot open an ICMP socket of the
// family (v6: ICMPv6) in either way the ping advisor tries, or nil.
func CanPing(v6 bool) error {
	socks := pingSockets4
	if v6 {
		socks = pingSockets6
	}
	var openErr error
	for _, s := range socks {
		c, err := icmp.ListenPacket(s.network, s.listen)
		if err == nil {
			return c.Close()
		}
		openErr = telling(openErr, err)
	}
	return fmt.Errorf("cannot open ICMP socket: %s", innerError(openErr))
}

// telling returns which of two ways' errors opening an ICMP socket says
// more: the unprivileged socket's "permission denied" (this group is not in
// net.ipv4.ping_group_range, a network namespace's default) says only that
// the raw socket was tried next, whose own error (a source address the
// host does not hold) is the reason.
func telling(first, next error) error {
	if first == nil || errors.Is(first, syscall.EACCES) && !errors.Is(next, syscall.EACCES) && !errors.Is(next, syscall.EPERM) {
		return next
	}
	return first
}

// ping probes t with the first of socks that opens.
func ping(ctx context.Context, t Target, socks []pingSocket) Result {
	if !t.Address.IsValid() {
		return Down("no address")
	}
	addr := t.Address.Unmap()
	var (
		c       *icmp.PacketConn
		sock    pingSocket
		openErr error
	)
	for _, s := range socks {
		var err error
		listen := s.listen
		if src := t.SourceAddr(); src.IsValid() {
			listen = src.String() // the echo request leaves from it
		}
		if c, err = icmp.ListenPacket(s.network, listen); err == nil {
			sock = s
			break
		}
		openErr = telling(openErr, err)
	}
	if c == nil {
		r := Down("cannot open ICMP socket: %s", innerError(openErr))
		r.Local = hostFault(openErr) // the source is not on the host, no descriptors, no permission
		return r
	}
	defer c.Close()

	recv := budget(ctx, t.ReceiveTimeoutOrDefault())
	start := time.Now()
	_ = c.SetDeadline(start.Add(recv))
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var rnd [20]byte
	_, _ = rand.Read(rnd[:])
	id, seq, payload := int(binary.BigEndian.Uint16(rnd[0:])), int(binary.BigEndian.Uint16(rnd[2:])), rnd[4:]
	proto := 1 // ICMP
	var echoType, replyType icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	if addr.Is6() {
		proto = 58 // ICMPv6
		echoType, replyType = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	req := icmp.Message{Type: echoType, Body: &icmp.Echo{ID: id, Seq: seq, Data: payload}}
	wire, err := req.Marshal(nil) // the kernel fills in the ICMPv6 checksum
	if err != nil {
		return Down("cannot build echo request: %v", err)
	}
	var dst net.Addr = &net.UDPAddr{IP: addr.AsSlice()}
	if sock.raw {
		dst = &net.IPAddr{IP: addr.AsSlice()}
	}
	sent := time.Now()
	if _, err := c.WriteTo(wire, dst); err != nil {
		return down(datagramFailure(ctx, t, err, recv))
	}

	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return down(datagramFailure(ctx, t, err, recv))
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil {
			continue // not a well-formed ICMP message: not ours
		}
		switch body := m.Body.(type) {
		case *icmp.Echo:
			if m.Type != replyType || addrOf(from) != addr || body.Seq != seq ||
				sock.raw && body.ID != id || !bytes.Equal(body.Data, payload) {
				continue
			}
			return Result{Up: true, Load: time.Since(sent)}
		case *icmp.DstUnreach:
			if quotesEcho(body.Data, addr.Is6(), id, seq, sock.raw) {
				return Down("%s", unreachReason(addr.Is6(), m.Code))
			}
		case *icmp.TimeExceeded:
			if quotesEcho(body.Data, addr.Is6(), id, seq, sock.raw) {
				return Down("ttl exceeded")
			}
		}
	}
}

// addrOf returns the IP address of a ping socket's peer.
func addrOf(a net.Addr) netip.Addr {
	var ip net.IP
	switch a := a.(type) {
	case *net.UDPAddr:
		ip = a.IP
	case *net.IPAddr:
		ip = a.IP
	}
	addr, _ := netip.AddrFromSlice(ip)
	return addr.Unmap()
}

// quotesEcho reports whether an ICMP error's quoted datagram is our echo
// request (IP header, then the first 8 bytes of the ICMP message).
func quotesEcho(data []byte, v6 bool, id, seq int, checkID bool) bool {
	var hdr int
	var echo byte = 8
	if v6 {
		hdr, echo = 40, 128
	} else if len(data) > 0 {
		hdr = int(data[0]&0x0f) * 4
	}
	if hdr == 0 || len(data) < hdr+8 {
		return false
	}
	icmpHdr := data[hdr:]
	return icmpHdr[0] == echo &&
		(!checkID || int(binary.BigEndian.Uint16(icmpHdr[4:])) == id) &&
		int(binary.BigEndian.Uint16(icmpHdr[6:])) == seq
}

// unreachReason names a destination-unreachable code.
func unreachReason(v6 bool, code int) string {
	switch {
	case code == 0:
		return "network unreachable"
	case !v6 && code == 1, v6 && code == 3:
		return "host unreachable"
	}
	return "destination unreachable (code " + strconv.Itoa(code) + ")"
}
