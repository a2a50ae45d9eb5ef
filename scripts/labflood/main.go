// Command labflood is a lab tool: a TCP SYN flood generator for the dlb test
// lab (scripts/lab.sh). It writes raw Ethernet frames on an interface of the
// current network namespace through an AF_PACKET socket: TCP SYNs to
// ADDR:PORT, each from a random (spoofed) source address in PREFIX and a
// random source port, with correct IPv4 (or IPv6) and TCP checksums. Nobody
// ever answers the SYN-ACKs, which is the point.
//
// It is not part of dlb and is not meant for anything but the lab: run it
// only inside a lab namespace (lab.sh exec c1 labflood ...).
//
// Usage:
//
//	labflood -iface IFACE -dst ADDR -dport PORT -dstmac MAC|auto -src PREFIX
//	         -count N [-rate PPS] [-srcmac MAC] [-batch B] [-workers W]
//	         [-timeout D] [-seed S] [-json]
//
// Without -rate (or with -rate 0) it sends as fast as it can, in batches
// of -batch frames per sendmmsg(2) call; with -rate it paces the frames to
// PPS per second. It stops after -count frames (or -timeout, or SIGINT)
// and prints one summary line, or with -json one object:
//
//	{"frames":N,"requested":N,"seconds":S,"pps":P,"send_errors":N,
//	 "iface":"...","dst":"...","dport":N,"dst_mac":"...","src_mac":"...",
//	 "src":"...","rate":N,"batch":N,"workers":N,"frame_bytes":N,
//	 "stopped":"done|timeout|interrupted|error","error":"..."}
//
// frames counts the frames the kernel accepted; the receiver may still drop
// some. -dstmac auto resolves the next hop towards ADDR through the kernel:
// it looks the route up, and if the neighbour table has no entry yet, it
// sends one UDP datagram to ADDR port 9 (discard) and waits for the entry.
//
// Exit status: 0 if all -count frames were sent, 1 otherwise, 2 on a usage
// error.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/scripts/internal/inetsum"
)

const (
	maxCount   = 100_000_000
	maxRate    = 10_000_000 // frames per second
	maxBatch   = 1024
	maxWorkers = 16
	maxTimeout = time.Hour
	// resolveTimeout bounds -dstmac auto.
	resolveTimeout = 3 * time.Second
	// discardPort is where -dstmac auto sends its one datagram.
	discardPort = 9
	// retryPause is how long a worker waits after ENOBUFS/EAGAIN.
	retryPause = 100 * time.Microsecond
)

// config is the parsed command line.
type config struct {
	iface   string
	dst     netip.Addr
	dport   uint16
	dstMAC  net.HardwareAddr // nil with -dstmac auto until resolved
	dstAuto bool
	srcMAC  net.HardwareAddr // nil: the interface's own
	src     netip.Prefix
	count   int64
	rate    int64 // 0: as fast as possible
	batch   int
	workers int
	timeout time.Duration
	seed    uint64 // 0: random
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
	ifc, err := net.InterfaceByName(cfg.iface)
	if err != nil {
		fmt.Fprintf(stderr, "labflood: -iface %s: %v\n", cfg.iface, err)
		return 1
	}
	if cfg.srcMAC == nil {
		if len(ifc.HardwareAddr) != 6 {
			fmt.Fprintf(stderr, "labflood: %s has no Ethernet address; give -srcmac\n", cfg.iface)
			return 1
		}
		cfg.srcMAC = ifc.HardwareAddr
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if cfg.dstAuto {
		mac, err := resolveMAC(ctx, ifc, cfg.dst)
		if err != nil {
			fmt.Fprintf(stderr, "labflood: -dstmac auto: %v\n", err)
			return 1
		}
		cfg.dstMAC = mac
		if !cfg.json {
			fmt.Fprintf(stderr, "labflood: %s is at %s\n", cfg.dst, mac)
		}
	}

	rep := flood(ctx, cfg, ifc.Index)
	if cfg.json {
		if err := json.NewEncoder(stdout).Encode(rep); err != nil {
			fmt.Fprintln(stderr, "labflood:", err)
			return 1
		}
	} else {
		fmt.Fprintln(stdout, rep.line())
		if rep.Error != "" {
			fmt.Fprintln(stderr, "labflood:", rep.Error)
		}
	}
	if rep.Frames != rep.Requested {
		return 1
	}
	return 0
}

const usageLine = "usage: labflood -iface IFACE -dst ADDR -dport PORT -dstmac MAC|auto -src PREFIX -count N\n" +
	"                [-rate PPS] [-srcmac MAC] [-batch B] [-workers W] [-timeout D] [-seed S] [-json]"

// parseFlags parses and validates args; on error it has already printed a
// message to stderr.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var (
		cfg                            config
		dst, dstMAC, srcMAC, src, seed string
		dport                          int
	)
	fs := flag.NewFlagSet("labflood", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageLine+"\n\n"+
			"Lab tool: writes TCP SYNs from random spoofed sources in PREFIX (random source\n"+
			"ports) to ADDR:PORT as raw Ethernet frames on IFACE, as fast as possible or at\n"+
			"-rate PPS, and reports the achieved rate. IPv4 or IPv6 (PREFIX and ADDR must match).\n"+
			"Exit status: 0 all frames sent, 1 otherwise, 2 usage error.\n\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.iface, "iface", "", "interface to send on (required)")
	fs.StringVar(&dst, "dst", "", "destination address, IPv4 or IPv6 (required)")
	fs.IntVar(&dport, "dport", 0, "destination TCP port, 1..65535 (required)")
	fs.StringVar(&dstMAC, "dstmac", "", `destination MAC (required), or "auto": the next hop towards -dst, from the kernel's neighbour table`)
	fs.StringVar(&srcMAC, "srcmac", "", "source MAC (default: the interface's)")
	fs.StringVar(&src, "src", "", "prefix to draw random source addresses from, e.g. 198.19.0.0/16 or 2001:2:ff::/64 (required)")
	fs.Int64Var(&cfg.count, "count", 0, fmt.Sprintf("frames to send, 1..%d (required)", maxCount))
	fs.Int64Var(&cfg.rate, "rate", 0, fmt.Sprintf("frames per second, 0..%d; 0 sends as fast as possible", maxRate))
	fs.IntVar(&cfg.batch, "batch", 64, fmt.Sprintf("frames per sendmmsg call, 1..%d", maxBatch))
	fs.IntVar(&cfg.workers, "workers", 1, fmt.Sprintf("parallel senders (each with its own socket), 1..%d", maxWorkers))
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Minute, fmt.Sprintf("stop after this long even if -count is not reached, at most %v", maxTimeout))
	fs.StringVar(&seed, "seed", "0", "random seed; 0 picks one at random")
	fs.BoolVar(&cfg.json, "json", false, "print one JSON object instead of a line")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	fail := func(format string, a ...any) (config, error) {
		err := fmt.Errorf(format, a...)
		fmt.Fprintf(stderr, "labflood: %v\n%s\n(-h for help)\n", err, usageLine)
		return cfg, err
	}
	if fs.NArg() != 0 {
		return fail("unexpected arguments: %q", fs.Args())
	}
	if cfg.iface == "" || len(cfg.iface) > unix.IFNAMSIZ-1 {
		return fail("-iface %q: want an interface name", cfg.iface)
	}
	var err error
	if cfg.dst, err = netip.ParseAddr(dst); err != nil || cfg.dst.Zone() != "" {
		return fail("-dst %q: want an IPv4 or IPv6 address", dst)
	}
	cfg.dst = cfg.dst.Unmap()
	if cfg.dst.IsUnspecified() || cfg.dst.IsMulticast() {
		return fail("-dst %s: want a unicast address", cfg.dst)
	}
	if dport < 1 || dport > 65535 {
		return fail("-dport %d: must be in 1..65535", dport)
	}
	cfg.dport = uint16(dport)
	if dstMAC == "auto" {
		cfg.dstAuto = true
	} else if cfg.dstMAC, err = parseMAC(dstMAC); err != nil {
		return fail("-dstmac: %v", err)
	}
	if srcMAC != "" {
		if cfg.srcMAC, err = parseMAC(srcMAC); err != nil {
			return fail("-srcmac: %v", err)
		}
	}
	if cfg.src, err = netip.ParsePrefix(src); err != nil {
		return fail("-src %q: want a prefix such as 198.19.0.0/16", src)
	}
	cfg.src = cfg.src.Masked()
	if cfg.src.Addr().Is4() != cfg.dst.Is4() {
		return fail("-src %s and -dst %s are not of the same address family", cfg.src, cfg.dst)
	}
	switch {
	case cfg.count < 1 || cfg.count > maxCount:
		return fail("-count %d: must be in 1..%d", cfg.count, maxCount)
	case cfg.rate < 0 || cfg.rate > maxRate:
		return fail("-rate %d: must be in 0..%d", cfg.rate, maxRate)
	case cfg.batch < 1 || cfg.batch > maxBatch:
		return fail("-batch %d: must be in 1..%d", cfg.batch, maxBatch)
	case cfg.workers < 1 || cfg.workers > maxWorkers:
		return fail("-workers %d: must be in 1..%d", cfg.workers, maxWorkers)
	case cfg.timeout <= 0 || cfg.timeout > maxTimeout:
		return fail("-timeout %v: must be in (0, %v]", cfg.timeout, maxTimeout)
	case cfg.rate > 0 && int64(cfg.workers) > cfg.rate:
		return fail("-workers %d: more than -rate %d", cfg.workers, cfg.rate)
	}
	if cfg.seed, err = strconv.ParseUint(seed, 0, 64); err != nil {
		return fail("-seed %q: want an unsigned integer", seed)
	}
	return cfg, nil
}

// parseMAC parses a 6-byte Ethernet address.
func parseMAC(s string) (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(s)
	if err != nil || len(mac) != 6 {
		return nil, fmt.Errorf("%q: want an Ethernet address such as 02:d1:b0:00:00:02", s)
	}
	return mac, nil
}

// --- frames --------------------------------------------------------------------

const (
	ethLen     = 14
	ipv4Len    = 20
	ipv6Len    = 40
	tcpLen     = 24 // 20 + the MSS option
	ttl        = 64
	tcpWindow  = 64240
	mss4       = 1460
	mss6       = 1440
	minSrcPort = 1024
	// minFrame is the shortest Ethernet frame (without the FCS): an IPv4
	// SYN is padded to it with zeros, as a NIC would pad it on the wire.
	minFrame = 60
)

// builder writes SYN frames from a fixed template, drawing the source
// address (within the prefix), the source port, the sequence number and
// the IPv4 identification at random for each frame.
type builder struct {
	v6                    bool
	tmpl                  []byte
	ipOff, tcpOff, srcOff int // offsets of the IP header, the TCP header, the source address
	// The source address is base | (random & mask), as two 64-bit halves
	// for IPv6 and in lo alone for IPv4.
	baseHi, baseLo, maskHi, maskLo uint64
}

func newBuilder(dstMAC, srcMAC net.HardwareAddr, src netip.Prefix, dst netip.Addr, dport uint16) *builder {
	b := &builder{v6: dst.Is6(), ipOff: ethLen}
	ipHdr, etherType, mss := ipv4Len, uint16(0x0800), uint16(mss4)
	if b.v6 {
		ipHdr, etherType, mss = ipv6Len, 0x86dd, mss6
	}
	b.tcpOff = ethLen + ipHdr
	f := make([]byte, max(minFrame, b.tcpOff+tcpLen))
	copy(f[0:6], dstMAC)
	copy(f[6:12], srcMAC)
	binary.BigEndian.PutUint16(f[12:], etherType)

	ip := f[ethLen:b.tcpOff]
	base := src.Addr().AsSlice()
	bits := src.Bits()
	if b.v6 {
		binary.BigEndian.PutUint32(ip[0:], 6<<28)
		binary.BigEndian.PutUint16(ip[4:], tcpLen) // payload length
		ip[6] = unix.IPPROTO_TCP
		ip[7] = ttl
		copy(ip[24:40], dst.AsSlice())
		b.srcOff = ethLen + 8
		b.baseHi = binary.BigEndian.Uint64(base[0:])
		b.baseLo = binary.BigEndian.Uint64(base[8:])
		if bits < 64 {
			b.maskHi, b.maskLo = ^uint64(0)>>bits, ^uint64(0)
		} else {
			b.maskLo = ^uint64(0) >> (bits - 64) // 0 for /128
		}
	} else {
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], ipv4Len+tcpLen)
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
		ip[8] = ttl
		ip[9] = unix.IPPROTO_TCP
		copy(ip[16:20], dst.AsSlice())
		b.srcOff = ethLen + 12
		b.baseLo = uint64(binary.BigEndian.Uint32(base))
		b.maskLo = uint64(^uint32(0) >> bits) // 0 for /32
	}
	copy(b.srcAddr(f), base)

	tcp := f[b.tcpOff : b.tcpOff+tcpLen]
	binary.BigEndian.PutUint16(tcp[2:], dport)
	tcp[12] = (tcpLen / 4) << 4
	tcp[13] = 0x02 // SYN
	binary.BigEndian.PutUint16(tcp[14:], tcpWindow)
	tcp[20], tcp[21] = 2, 4 // MSS
	binary.BigEndian.PutUint16(tcp[22:], mss)
	b.tmpl = f
	return b
}

// frameLen is the length of every frame (IPv4: 60 bytes with 2 of padding,
// IPv6: 78 bytes).
func (b *builder) frameLen() int { return len(b.tmpl) }

func (b *builder) srcAddr(f []byte) []byte {
	if b.v6 {
		return f[b.srcOff : b.srcOff+16]
	}
	return f[b.srcOff : b.srcOff+4]
}

// fill writes one SYN into f, which must be frameLen() long.
func (b *builder) fill(f []byte, r *rand.Rand) {
	copy(f, b.tmpl)
	x := r.Uint64()
	ip, tcp := f[b.ipOff:b.tcpOff], f[b.tcpOff:b.tcpOff+tcpLen]
	sport := minSrcPort + uint16(((x&0xffff)*(65536-minSrcPort))>>16)
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint32(tcp[4:], uint32(x>>32)) // sequence number
	src := b.srcAddr(f)
	if b.v6 {
		hi, lo := b.baseHi, b.baseLo|r.Uint64()&b.maskLo
		if b.maskHi != 0 {
			hi |= r.Uint64() & b.maskHi
		}
		binary.BigEndian.PutUint64(src[0:], hi)
		binary.BigEndian.PutUint64(src[8:], lo)
		// Pseudo-header: addresses, upper-layer length, next header.
		s := inetsum.Add(ip[8:40], tcpLen+unix.IPPROTO_TCP)
		binary.BigEndian.PutUint16(tcp[16:], inetsum.Fold(inetsum.Add(tcp, s)))
		return
	}
	a := uint32(b.baseLo) | uint32(r.Uint64()&b.maskLo)
	binary.BigEndian.PutUint32(src, a)
	binary.BigEndian.PutUint16(ip[4:], uint16(x>>16)) // identification
	binary.BigEndian.PutUint16(ip[10:], inetsum.Fold(inetsum.Add(ip, 0)))
	s := inetsum.Add(ip[12:20], tcpLen+unix.IPPROTO_TCP)
	binary.BigEndian.PutUint16(tcp[16:], inetsum.Fold(inetsum.Add(tcp, s)))
}

// --- sending -------------------------------------------------------------------

// sender owns one AF_PACKET socket bound to the interface and a batch of
// frame buffers that sendmmsg(2) sends.
type sender struct {
	fd   int
	bufs [][]byte
	iovs []unix.Iovec
	msgs []unix.Mmsghdr
}

func newSender(ifindex, batch, frameLen int) (*sender, error) {
	// Protocol 0: the socket receives nothing, it only sends.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding to interface %d: %w", ifindex, err)
	}
	// Skip the qdisc (there is none on a veth anyway); not fatal if unsupported.
	_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)
	s := &sender{
		fd:   fd,
		bufs: make([][]byte, batch),
		iovs: make([]unix.Iovec, batch),
		msgs: make([]unix.Mmsghdr, batch),
	}
	mem := make([]byte, batch*frameLen)
	for i := range batch {
		s.bufs[i] = mem[i*frameLen : (i+1)*frameLen : (i+1)*frameLen]
		s.iovs[i].Base = &s.bufs[i][0]
		s.iovs[i].SetLen(frameLen)
		s.msgs[i].Hdr.Iov = &s.iovs[i]
		s.msgs[i].Hdr.SetIovlen(1)
	}
	return s, nil
}

func (s *sender) close() { unix.Close(s.fd) }

// sendmmsg sends frames from..to-1 of the batch and returns how many the
// kernel took.
func (s *sender) sendmmsg(from, to int) (int, error) {
	r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(s.fd),
		uintptr(unsafe.Pointer(&s.msgs[from])), uintptr(to-from), 0, 0, 0)
	runtime.KeepAlive(s)
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

// Report is labflood's result, printed as JSON with -json.
type Report struct {
	Frames     int64   `json:"frames"`
	Requested  int64   `json:"requested"`
	Seconds    float64 `json:"seconds"`
	PPS        float64 `json:"pps"`
	SendErrors int64   `json:"send_errors"` // ENOBUFS/EAGAIN retries
	Iface      string  `json:"iface"`
	Dst        string  `json:"dst"`
	DPort      uint16  `json:"dport"`
	DstMAC     string  `json:"dst_mac"`
	SrcMAC     string  `json:"src_mac"`
	Src        string  `json:"src"`
	Rate       int64   `json:"rate"`
	Batch      int     `json:"batch"`
	Workers    int     `json:"workers"`
	FrameBytes int     `json:"frame_bytes"`
	Stopped    string  `json:"stopped"` // done, timeout, interrupted or error
	Error      string  `json:"error,omitempty"`
}

func (r Report) line() string {
	rate := "as fast as possible"
	if r.Rate > 0 {
		rate = fmt.Sprintf("paced to %d pps", r.Rate)
	}
	return fmt.Sprintf("labflood: %d/%d SYN frames (%d bytes) to %s port %d (%s) from %s via %s in %.3f s: %.0f pps (%s, %d worker(s), %s)",
		r.Frames, r.Requested, r.FrameBytes, r.Dst, r.DPort, r.DstMAC, r.Src, r.Iface, r.Seconds, r.PPS,
		rate, r.Workers, r.Stopped)
}

// workerResult is one worker's share of the report.
type workerResult struct {
	sent, retries int64
	err           error
}

// flood runs cfg.workers senders and returns the report.
func flood(ctx context.Context, cfg config, ifindex int) Report {
	b := newBuilder(cfg.dstMAC, cfg.srcMAC, cfg.src, cfg.dst, cfg.dport)
	rep := Report{
		Requested: cfg.count, Iface: cfg.iface, Dst: cfg.dst.String(), DPort: cfg.dport,
		DstMAC: cfg.dstMAC.String(), SrcMAC: cfg.srcMAC.String(), Src: cfg.src.String(),
		Rate: cfg.rate, Batch: cfg.batch, Workers: cfg.workers, FrameBytes: b.frameLen(),
	}
	seed := cfg.seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	// Sockets first, so that a failure sends nothing.
	senders := make([]*sender, cfg.workers)
	for w := range senders {
		s, err := newSender(ifindex, cfg.batch, b.frameLen())
		if err != nil {
			for _, s := range senders[:w] {
				s.close()
			}
			rep.Stopped, rep.Error = "error", err.Error()
			return rep
		}
		senders[w] = s
	}
	tctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	results := make([]workerResult, cfg.workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w, s := range senders {
		n := cfg.count / int64(cfg.workers)
		rate := cfg.rate / int64(cfg.workers)
		if int64(w) < cfg.count%int64(cfg.workers) {
			n++
		}
		if int64(w) < cfg.rate%int64(cfg.workers) {
			rate++
		}
		r := rand.New(rand.NewPCG(seed, uint64(w)))
		wg.Go(func() {
			defer s.close()
			results[w] = work(tctx, s, b, r, n, rate, start)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	var firstErr error
	for _, res := range results {
		rep.Frames += res.sent
		rep.SendErrors += res.retries
		if res.err != nil && firstErr == nil {
			firstErr = res.err
		}
	}
	rep.Seconds = elapsed.Seconds()
	if rep.Seconds > 0 {
		rep.PPS = float64(rep.Frames) / rep.Seconds
	}
	switch {
	case firstErr != nil:
		rep.Stopped, rep.Error = "error", firstErr.Error()
	case rep.Frames == rep.Requested:
		rep.Stopped = "done"
	case ctx.Err() != nil:
		rep.Stopped = "interrupted"
	default:
		rep.Stopped = "timeout"
	}
	return rep
}

// work sends n frames through s, at most rate per second (0: no limit),
// until ctx ends.
func work(ctx context.Context, s *sender, b *builder, r *rand.Rand, n, rate int64, start time.Time) workerResult {
	var res workerResult
	batch := int64(len(s.bufs))
	if rate > 0 {
		// About a millisecond's worth per call keeps the pacing smooth.
		batch = max(1, min(batch, rate/1000))
	}
	for res.sent < n {
		if ctx.Err() != nil {
			return res
		}
		if rate > 0 {
			due := start.Add(time.Duration(float64(res.sent) / float64(rate) * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					return res
				case <-t.C:
				}
			}
		}
		k := int(min(batch, n-res.sent))
		for i := range k {
			b.fill(s.bufs[i], r)
		}
		for done := 0; done < k; {
			m, err := s.sendmmsg(done, k)
			switch {
			case err == nil:
				done += m
				res.sent += int64(m)
			case errors.Is(err, unix.EINTR):
			case errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN):
				res.retries++
				if ctx.Err() != nil {
					return res
				}
				time.Sleep(retryPause)
			default:
				res.err = fmt.Errorf("sendmmsg: %w", err)
				return res
			}
		}
	}
	return res
}

// --- -dstmac auto ------------------------------------------------------------

// resolveMAC returns the MAC of the next hop towards dst, which must be
// reached through ifc, from the kernel's neighbour table; if there is no
// usable entry it sends one UDP datagram to dst to make the kernel resolve
// it, and waits (bounded) for the entry.
func resolveMAC(ctx context.Context, ifc *net.Interface, dst netip.Addr) (net.HardwareAddr, error) {
	routes, err := netlink.RouteGet(dst.AsSlice())
	if err != nil {
		return nil, fmt.Errorf("route to %s: %w", dst, err)
	}
	if len(routes) == 0 {
		return nil, fmt.Errorf("no route to %s", dst)
	}
	rt := routes[0]
	if rt.LinkIndex != ifc.Index {
		return nil, fmt.Errorf("the route to %s leaves through interface %d, not %s (%d)", dst, rt.LinkIndex, ifc.Name, ifc.Index)
	}
	if rt.Type == unix.RTN_LOCAL {
		return nil, fmt.Errorf("%s is a local address", dst)
	}
	hop := dst
	if gw, ok := netip.AddrFromSlice(rt.Gw); ok && rt.Gw != nil && !gw.IsUnspecified() {
		hop = gw.Unmap()
	}
	family := netlink.FAMILY_V4
	if hop.Is6() {
		family = netlink.FAMILY_V6
	}
	lookup := func() (net.HardwareAddr, error) {
		neighs, err := netlink.NeighList(ifc.Index, family)
		if err != nil {
			return nil, fmt.Errorf("neighbour table: %w", err)
		}
		for _, n := range neighs {
			a, ok := netip.AddrFromSlice(n.IP)
			if !ok || a.Unmap() != hop || len(n.HardwareAddr) != 6 {
				continue
			}
			if n.State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED) != 0 {
				continue
			}
			return n.HardwareAddr, nil
		}
		return nil, nil
	}
	if mac, err := lookup(); mac != nil || err != nil {
		return mac, err
	}
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, discardPort)))
	if err != nil {
		return nil, fmt.Errorf("sending a datagram to %s: %w", dst, err)
	}
	_, _ = conn.Write([]byte{0}) // an ICMP error back is fine
	conn.Close()
	deadline := time.Now().Add(resolveTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
		if mac, err := lookup(); mac != nil || err != nil {
			return mac, err
		}
	}
	return nil, fmt.Errorf("no neighbour entry for %s on %s after %v", hop, ifc.Name, resolveTimeout)
}
