// Command labicmp is a lab tool: it plays the router that tells a server its
// replies are too big, to test how dlb (scripts/lab.sh) delivers ICMP errors
// about a load-balanced flow to the backend that owns the flow.
//
// It opens -conns TCP connections to -target (labhttpd behind the load
// balancer), sends "GET / HTTP/1.1" with "Host: lab" on each (keep-alive),
// and reads the reply to learn which backend owns the connection (the
// X-Backend header, else the first body line). Then, for every connection,
// it sends one ICMP error to the target address through a raw socket (the
// kernel picks the source address), as a router between the server and the
// client would when the server's reply was too big for the next hop:
//
//   - IPv4: type 3 code 4 (fragmentation needed) with next-hop MTU -mtu,
//     quoting an IPv4 header (src the target, dst the client's local
//     address, protocol TCP, DF, total length 1500, valid header checksum)
//     and the first 8 bytes of a TCP header (target port -> local port).
//     labicmp computes the ICMP checksum.
//   - IPv6: type 2 (packet too big) with MTU -mtu, quoting an IPv6 header
//     (src the target, dst the client, next header TCP, payload length
//     1460) and the same 8 bytes of TCP header. The kernel fills in the
//     ICMPv6 checksum.
//
// The quoted TCP sequence number is the server's next sequence number
// (SND.NXT), which Linux requires of an ICMP error about an established
// connection (else it counts it in TcpExtOutOfWindowIcmps and ignores it).
// labicmp learns it from its own socket's RCV.NXT with TCP_REPAIR (needs
// CAP_NET_ADMIN), which equals the server's SND.NXT once the whole reply has
// been read, as long as nothing on the path rewrites sequence numbers. The
// raw socket needs CAP_NET_RAW: run it as root inside a lab namespace
// (lab.sh exec c1 labicmp ...).
//
// It keeps every connection open for -hold after sending, then closes them.
//
// It is not part of dlb and is not meant for anything but the lab.
//
// Usage:
//
//	labicmp -target HOST:PORT -conns N [-mtu M] [-hold D] [-timeout T] [-json]
//
// HOST is an IPv4 or IPv6 address (IPv6 in brackets). With -json it prints
// one object:
//
//	{"flows":[{"local":"ip:port","backend":"b1","seq":N},...],
//	 "per_backend":{"b1":N,...},"sent":N,"errors":["...",...],
//	 "target":"ip:port","mtu":N}
//
// flows lists the connections that answered, in the order they were
// opened; sent counts the ICMP errors the kernel accepted.
//
// Exit status: 0 if all -conns connections answered, the sequence numbers
// were learnt and all ICMP errors were sent; 1 otherwise; 2 on a usage
// error.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/scripts/internal/inetsum"
)

const (
	maxConns   = 1000
	maxHold    = 10 * time.Minute
	maxTimeout = time.Minute
	// dialParallel bounds how many connections are being opened at once.
	dialParallel = 64
	// defaultMTU4 and defaultMTU6 are -mtu's defaults.
	defaultMTU4 = 1200
	defaultMTU6 = 1280
	// quotedLen4 is the total length in the quoted IPv4 header, and
	// quotedPayload6 the payload length in the quoted IPv6 header: the
	// "too big" packet was a full 1500-byte segment.
	quotedLen4     = 1500
	quotedPayload6 = 1460
	// quotedTTL is the TTL (hop limit) in the quoted header.
	quotedTTL = 64
	// maxBody bounds how much of a reply body is read.
	maxBody = 1 << 20
	// request is what every connection sends.
	request = "GET / HTTP/1.1\r\nHost: lab\r\n\r\n"
	// unknownBackend names a reply that carried no backend name.
	unknownBackend = "(unknown)"
)

// config is the parsed command line.
type config struct {
	target  netip.AddrPort
	conns   int
	mtu     int // resolved: never 0 after parseFlags
	hold    time.Duration
	timeout time.Duration
	json    bool
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	rep := execute(ctx, cfg)
	if cfg.json {
		if err := json.NewEncoder(stdout).Encode(rep); err != nil {
			fmt.Fprintln(stderr, "labicmp:", err)
			return 1
		}
	} else {
		fmt.Fprint(stdout, rep.table(cfg.conns))
	}
	if len(rep.Flows) != cfg.conns || rep.Sent != cfg.conns || len(rep.Errors) > 0 {
		return 1
	}
	return 0
}

const usageLine = "usage: labicmp -target HOST:PORT -conns N [-mtu M] [-hold D] [-timeout T] [-json]"

// parseFlags parses and validates args; on error it has already printed a
// message to stderr.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var (
		cfg    config
		target string
	)
	fs := flag.NewFlagSet("labicmp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageLine+"\n\n"+
			"Lab tool: opens N keep-alive HTTP connections to HOST:PORT, learns each one's\n"+
			"backend (X-Backend), then sends, for each, the ICMP error a router would send\n"+
			"the server when its reply is too big (IPv4: fragmentation needed, IPv6: packet\n"+
			"too big) to HOST through a raw socket, and holds the connections for -hold.\n"+
			"Needs root (raw socket, TCP_REPAIR). Exit status: 0 all sent, 1 otherwise, 2 usage error.\n\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&target, "target", "", "server address IP:PORT, IPv6 as [IP]:PORT (required)")
	fs.IntVar(&cfg.conns, "conns", 0, fmt.Sprintf("connections, 1..%d (required)", maxConns))
	fs.IntVar(&cfg.mtu, "mtu", 0, fmt.Sprintf("MTU to report, 1..65535 (default %d for IPv4, %d for IPv6)", defaultMTU4, defaultMTU6))
	fs.DurationVar(&cfg.hold, "hold", time.Second, fmt.Sprintf("keep the connections open this long after sending, 0..%v", maxHold))
	fs.DurationVar(&cfg.timeout, "timeout", 2*time.Second, fmt.Sprintf("per connection: connect, request and reply, (0, %v]", maxTimeout))
	fs.BoolVar(&cfg.json, "json", false, "print one JSON object instead of a table")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	fail := func(format string, a ...any) (config, error) {
		err := fmt.Errorf(format, a...)
		fmt.Fprintf(stderr, "labicmp: %v\n%s\n(-h for help)\n", err, usageLine)
		return cfg, err
	}
	if fs.NArg() != 0 {
		return fail("unexpected arguments: %q", fs.Args())
	}
	var err error
	if cfg.target, err = netip.ParseAddrPort(target); err != nil || cfg.target.Addr().Zone() != "" {
		return fail("-target %q: want IP:PORT or [IPv6]:PORT", target)
	}
	cfg.target = netip.AddrPortFrom(cfg.target.Addr().Unmap(), cfg.target.Port())
	a := cfg.target.Addr()
	switch {
	case a.IsUnspecified() || a.IsMulticast() || (a.Is4() && a == netip.AddrFrom4([4]byte{255, 255, 255, 255})):
		return fail("-target %s: want a unicast address", cfg.target)
	case cfg.target.Port() == 0:
		return fail("-target %s: port must be in 1..65535", cfg.target)
	case cfg.conns < 1 || cfg.conns > maxConns:
		return fail("-conns %d: must be in 1..%d", cfg.conns, maxConns)
	case cfg.mtu < 0 || cfg.mtu > 65535:
		return fail("-mtu %d: must be in 1..65535", cfg.mtu)
	case cfg.hold < 0 || cfg.hold > maxHold:
		return fail("-hold %v: must be in 0..%v", cfg.hold, maxHold)
	case cfg.timeout <= 0 || cfg.timeout > maxTimeout:
		return fail("-timeout %v: must be in (0, %v]", cfg.timeout, maxTimeout)
	}
	if cfg.mtu == 0 {
		cfg.mtu = defaultMTU4
		if a.Is6() {
			cfg.mtu = defaultMTU6
		}
	}
	return cfg, nil
}

// Flow is one connection that answered.
type Flow struct {
	Local   string `json:"local"`   // the client's ip:port
	Backend string `json:"backend"` // X-Backend of the reply
	Seq     uint32 `json:"seq"`     // quoted TCP sequence number: the server's SND.NXT
}

// Report is labicmp's result, printed as JSON with -json.
type Report struct {
	Flows      []Flow         `json:"flows"`
	PerBackend map[string]int `json:"per_backend"`
	Sent       int            `json:"sent"`
	Errors     []string       `json:"errors"`
	Target     string         `json:"target"`
	MTU        int            `json:"mtu"`
}

// table renders r for people.
func (r Report) table(conns int) string {
	var b strings.Builder
	kind := "fragmentation-needed"
	if a, err := netip.ParseAddrPort(r.Target); err == nil && a.Addr().Is6() {
		kind = "packet-too-big"
	}
	fmt.Fprintf(&b, "labicmp: %d/%d connections to %s answered; %d ICMP %s (mtu %d) sent\n",
		len(r.Flows), conns, r.Target, r.Sent, kind, r.MTU)
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "LOCAL\tBACKEND\tSEQ")
	for _, f := range r.Flows {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", f.Local, f.Backend, f.Seq)
	}
	_ = tw.Flush()
	for _, name := range sortedKeys(r.PerBackend) {
		fmt.Fprintf(&b, "backend %s: %d\n", name, r.PerBackend[name])
	}
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "error: %s\n", e)
	}
	return b.String()
}

func sortedKeys(m map[string]int) []string {
	return slices.Sorted(maps.Keys(m))
}

// execute opens the connections, sends the ICMP errors, holds the
// connections and closes them.
func execute(ctx context.Context, cfg config) Report {
	rep := Report{PerBackend: map[string]int{}, Flows: []Flow{}, Errors: []string{},
		Target: cfg.target.String(), MTU: cfg.mtu}
	conns, flows, errs := openFlows(ctx, cfg)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	rep.Flows = flows
	rep.Errors = append(rep.Errors, errs...)
	for _, f := range flows {
		rep.PerBackend[f.Backend]++
	}
	if len(flows) == 0 {
		return rep
	}

	s, err := newRawSender(cfg.target.Addr().Is6())
	if err != nil {
		rep.Errors = append(rep.Errors, err.Error())
		return rep
	}
	defer s.close()
	for _, f := range flows {
		local := netip.MustParseAddrPort(f.Local)
		var pkt []byte
		if cfg.target.Addr().Is6() {
			pkt = packetTooBig(cfg.target, local, f.Seq, uint32(cfg.mtu))
		} else {
			pkt = fragNeeded(cfg.target, local, f.Seq, uint16(cfg.mtu))
		}
		if err := s.send(pkt, cfg.target.Addr()); err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("sending the ICMP error for %s: %v", f.Local, err))
			continue
		}
		rep.Sent++
	}

	if cfg.hold > 0 {
		t := time.NewTimer(cfg.hold)
		select {
		case <-ctx.Done():
			rep.Errors = append(rep.Errors, "interrupted while holding the connections")
		case <-t.C:
		}
		t.Stop()
	}
	return rep
}

// openFlows opens cfg.conns connections (at most dialParallel at a time),
// reads one reply on each and learns the server's sequence number. It
// returns the open connections and their flows, in the order they were
// started, and one error text per failed connection (which it closed) or
// per connection whose sequence number it could not learn (whose flow it
// keeps, with Seq 0).
func openFlows(ctx context.Context, cfg config) ([]net.Conn, []Flow, []string) {
	type slot struct {
		conn   net.Conn
		flow   Flow
		seqErr error
		err    error
	}
	slots := make([]slot, cfg.conns)
	sem := make(chan struct{}, dialParallel)
	var wg sync.WaitGroup
	for i := range slots {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, f, seqErr, err := openFlow(ctx, cfg.target, cfg.timeout)
			slots[i] = slot{c, f, seqErr, err}
		})
	}
	wg.Wait()
	var (
		conns []net.Conn
		flows = []Flow{}
		errs  []string
	)
	for i, s := range slots {
		if s.err != nil {
			errs = append(errs, fmt.Sprintf("connection %d: %v", i+1, s.err))
			continue
		}
		if s.seqErr != nil {
			errs = append(errs, fmt.Sprintf("connection %d (%s): learning the server's sequence number: %v",
				i+1, s.flow.Local, s.seqErr))
		}
		conns = append(conns, s.conn)
		flows = append(flows, s.flow)
	}
	return conns, flows, errs
}

// openFlow dials target, sends the request, reads the whole reply and
// learns the sequence number to quote. Unless err is set the connection
// stays open (with no deadline) for the caller to close; seqErr tells why
// the sequence number is unknown (Seq 0).
func openFlow(ctx context.Context, target netip.AddrPort, timeout time.Duration) (c net.Conn, f Flow, seqErr, err error) {
	d := net.Dialer{Timeout: timeout}
	if c, err = d.DialContext(ctx, "tcp", target.String()); err != nil {
		return nil, Flow{}, nil, err
	}
	if f, err = exchange(c, timeout); err != nil {
		c.Close()
		return nil, Flow{}, nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, f, errors.New("not a TCP connection"), nil
	}
	f.Seq, seqErr = learnSeq(tc)
	return c, f, seqErr, nil
}

// exchange sends the request on c and reads the reply, within timeout,
// and returns the flow it describes (without Seq).
func exchange(c net.Conn, timeout time.Duration) (Flow, error) {
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return Flow{}, err
	}
	if _, err := io.WriteString(c, request); err != nil {
		return Flow{}, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return Flow{}, fmt.Errorf("reading the reply: %w", err)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	resp.Body.Close()
	if err != nil {
		return Flow{}, fmt.Errorf("reading the reply body: %w", err)
	}
	switch {
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return Flow{}, fmt.Errorf("HTTP status %s", resp.Status)
	case resp.Close:
		return Flow{}, errors.New("the server closed the connection after the reply")
	case br.Buffered() > 0:
		return Flow{}, errors.New("the server sent more than one reply")
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		return Flow{}, err
	}
	local, err := netip.ParseAddrPort(c.LocalAddr().String())
	if err != nil {
		return Flow{}, err
	}
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	return Flow{Local: local.String(), Backend: backendName(resp.Header, string(body))}, nil
}

// backendName returns the X-Backend header, else the first line of body,
// else unknownBackend.
func backendName(h http.Header, body string) string {
	if b := strings.TrimSpace(h.Get("X-Backend")); b != "" {
		return b
	}
	line, _, _ := strings.Cut(body, "\n")
	if line = strings.TrimSpace(line); line != "" {
		return line
	}
	return unknownBackend
}

// TCP_REPAIR_QUEUE values (linux/tcp.h).
const (
	tcpNoQueue   = 0
	tcpRecvQueue = 1
	tcpSendQueue = 2
)

// learnSeq returns c's RCV.NXT, read in TCP repair mode: once the whole
// reply has been read it is the server's SND.NXT, the sequence number an
// ICMP error about the server's segments must quote to be in the window.
func learnSeq(c *net.TCPConn) (uint32, error) {
	return repairSeq(c, tcpRecvQueue)
}

// repairSeq reads the sequence number of queue (tcpRecvQueue: RCV.NXT,
// tcpSendQueue: the end of the send queue) of c through TCP_REPAIR, then
// leaves repair mode without sending a window probe.
func repairSeq(c *net.TCPConn, queue int) (uint32, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var (
		seq  int
		serr error
	)
	err = rc.Control(func(fd uintptr) {
		s := int(fd)
		if serr = unix.SetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_REPAIR, 1); serr != nil {
			serr = fmt.Errorf("TCP_REPAIR on: %w", serr)
			return
		}
		defer func() {
			off := unix.SetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_REPAIR, unix.TCP_REPAIR_OFF_NO_WP)
			if off != nil { // kernels before 4.19: leave with a window probe
				off = unix.SetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_REPAIR, unix.TCP_REPAIR_OFF)
			}
			if off != nil && serr == nil {
				serr = fmt.Errorf("TCP_REPAIR off: %w", off)
			}
		}()
		if serr = unix.SetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_REPAIR_QUEUE, queue); serr != nil {
			serr = fmt.Errorf("TCP_REPAIR_QUEUE: %w", serr)
			return
		}
		seq, serr = unix.GetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_QUEUE_SEQ)
		if serr != nil {
			serr = fmt.Errorf("TCP_QUEUE_SEQ: %w", serr)
		}
		_ = unix.SetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_REPAIR_QUEUE, tcpNoQueue)
	})
	if err != nil {
		return 0, err
	}
	return uint32(seq), serr
}

// --- packets -------------------------------------------------------------------

const (
	icmpHdrLen  = 8 // type, code, checksum, 4 bytes (unused + MTU, or MTU)
	ipv4HdrLen  = 20
	ipv6HdrLen  = 40
	tcpQuoteLen = 8 // source port, destination port, sequence number

	icmpDestUnreach = 3
	icmpFragNeeded  = 4
	icmp6TooBig     = 2
	protoTCP        = 6
	ipv4DF          = 0x4000
)

// fragNeeded returns an ICMPv4 "destination unreachable, fragmentation
// needed" message with next-hop MTU mtu about a TCP segment from server to
// client (quoting its IPv4 header and first 8 TCP bytes, sequence number
// seq), checksummed; the kernel adds the outer IPv4 header.
func fragNeeded(server, client netip.AddrPort, seq uint32, mtu uint16) []byte {
	b := make([]byte, icmpHdrLen+ipv4HdrLen+tcpQuoteLen)
	b[0], b[1] = icmpDestUnreach, icmpFragNeeded
	binary.BigEndian.PutUint16(b[6:], mtu) // b[4:6] unused
	ip := b[icmpHdrLen : icmpHdrLen+ipv4HdrLen]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], quotedLen4)
	binary.BigEndian.PutUint16(ip[6:], ipv4DF)
	ip[8] = quotedTTL
	ip[9] = protoTCP
	s, c := server.Addr().As4(), client.Addr().As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], c[:])
	binary.BigEndian.PutUint16(ip[10:], inetsum.Fold(inetsum.Add(ip, 0)))
	putTCPQuote(b[icmpHdrLen+ipv4HdrLen:], server.Port(), client.Port(), seq)
	binary.BigEndian.PutUint16(b[2:], inetsum.Fold(inetsum.Add(b, 0)))
	return b
}

// packetTooBig returns an ICMPv6 "packet too big" message with MTU mtu
// about a TCP segment from server to client (quoting its IPv6 header and
// first 8 TCP bytes, sequence number seq). Its checksum is left zero: the
// kernel computes it on an IPPROTO_ICMPV6 raw socket, since it depends on
// the source address the kernel picks.
func packetTooBig(server, client netip.AddrPort, seq uint32, mtu uint32) []byte {
	b := make([]byte, icmpHdrLen+ipv6HdrLen+tcpQuoteLen)
	b[0], b[1] = icmp6TooBig, 0
	binary.BigEndian.PutUint32(b[4:], mtu)
	ip := b[icmpHdrLen : icmpHdrLen+ipv6HdrLen]
	binary.BigEndian.PutUint32(ip[0:], 6<<28)
	binary.BigEndian.PutUint16(ip[4:], quotedPayload6)
	ip[6] = protoTCP
	ip[7] = quotedTTL
	s, c := server.Addr().As16(), client.Addr().As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], c[:])
	putTCPQuote(b[icmpHdrLen+ipv6HdrLen:], server.Port(), client.Port(), seq)
	return b
}

// putTCPQuote writes the first 8 bytes of a TCP header into b.
func putTCPQuote(b []byte, sport, dport uint16, seq uint32) {
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint32(b[4:], seq)
}

// --- sending -------------------------------------------------------------------

// Socket options of raw ICMP sockets (linux/icmp.h, linux/icmpv6.h).
const (
	icmpFilter   = 1 // SOL_RAW
	icmpv6Filter = 1 // SOL_ICMPV6
)

// rawSender is a raw ICMP or ICMPv6 socket that only sends.
type rawSender struct {
	fd int
	v6 bool
}

func newRawSender(v6 bool) (*rawSender, error) {
	family, proto, name := unix.AF_INET, unix.IPPROTO_ICMP, "ICMP"
	if v6 {
		family, proto, name = unix.AF_INET6, unix.IPPROTO_ICMPV6, "ICMPv6"
	}
	fd, err := unix.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return nil, fmt.Errorf("raw %s socket (needs CAP_NET_RAW): %w", name, err)
	}
	// Receive nothing: block every ICMP type (best effort).
	if v6 {
		f := unix.ICMPv6Filter{}
		for i := range f.Data {
			f.Data[i] = ^uint32(0)
		}
		_ = unix.SetsockoptICMPv6Filter(fd, unix.SOL_ICMPV6, icmpv6Filter, &f)
	} else {
		_ = unix.SetsockoptInt(fd, unix.SOL_RAW, icmpFilter, -1)
	}
	return &rawSender{fd: fd, v6: v6}, nil
}

// send sends one ICMP message to dst; the kernel adds the IP header.
func (s *rawSender) send(msg []byte, dst netip.Addr) error {
	var sa unix.Sockaddr
	if s.v6 {
		sa = &unix.SockaddrInet6{Addr: dst.As16()}
	} else {
		sa = &unix.SockaddrInet4{Addr: dst.As4()}
	}
	for range 3 { // a signal may interrupt the call
		err := unix.Sendto(s.fd, msg, 0, sa)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
	return unix.EINTR
}

func (s *rawSender) close() { _ = unix.Close(s.fd) }
