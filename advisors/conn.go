package advisors

// Shared plumbing for the protocol files: dialing with the Target's
// timeouts, one deadline for the whole exchange, a bounded reader, timing,
// and the mapping from network errors to the short reasons of a down Result.
//
// Every TCP advisor has the same shape:
//
//	func (ftpAdvisor) Probe(ctx context.Context, t Target) Result {
//		t = withDefaultPort(t, 21)
//		s, err := dial(ctx, t) // starts the clock; connect timeout applies
//		if err != nil {
//			return down(err) // "connect refused", "connect timeout after 2s", ...
//		}
//		defer s.Close()
//		line, err := s.ReadLine() // bounded; receive deadline applies
//		if err != nil {
//			return down(err) // "no reply within 2s", "connection reset", ...
//		}
//		if !strings.HasPrefix(line, "220") {
//			return Down("greeting %s", quoteReply(line))
//		}
//		if err := s.WriteString("QUIT\r\n"); err != nil {
//			return down(err)
//		}
//		return s.Up() // Load = time since dial began
//	}
//
// Errors returned by dial, dialTLS and every session method are already
// classified: down(err) turns them into a Result whose Reason is short,
// lower-case and without a trailing period. down also accepts any other
// error (its text becomes the reason).
//
// Bounds: the receive deadline is set once, when the connection is up, for
// the whole rest of the exchange (so a server that trickles one byte per
// second still fails on time); it is never later than the context's
// deadline, and cancelling the context unblocks any pending read or write.
// A session reads at most maxReplyBytes from the server in total (through
// Reader, Conn or the helpers alike) and a line at most maxLineBytes.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"
)

const (
	// maxReplyBytes caps how much a probe reads from one server in total.
	maxReplyBytes = 64 << 10
	// maxLineBytes caps one line of a line-oriented reply (a status line,
	// a header, a greeting).
	maxLineBytes = 4 << 10
	// maxReasonReply caps how much server text a reason quotes.
	maxReasonReply = 80
)

// Sentinel errors of the bounded reader; down maps them to reasons.
var (
	errLineTooLong   = fmt.Errorf("reply line longer than %d bytes", maxLineBytes)
	errReplyTooLarge = fmt.Errorf("reply longer than %d bytes", maxReplyBytes)
)

// failure is an error whose text is already the reason of a down Result.
type failure struct {
	reason string
	err    error // the underlying error, if any
	// local says the probe could not be made for a reason of this host
	// (see Result.Local).
	local bool
}

func (f *failure) Error() string { return f.reason }
func (f *failure) Unwrap() error { return f.err }

// fail returns a classified error with a formatted reason; down(fail(...))
// is the same as Down(...).
func fail(format string, args ...any) error {
	return &failure{reason: fmt.Sprintf(format, args...)}
}

// down turns an error into a down Result. Errors from dial, dialTLS and
// session methods carry their reason; for any other error the reason is
// the error's text.
func down(err error) Result {
	var f *failure
	if errors.As(err, &f) {
		return Result{Reason: f.reason, Local: f.local || hostFault(err)}
	}
	if err == nil {
		return Result{Reason: "unknown failure"}
	}
	return Result{Reason: err.Error(), Local: hostFault(err)}
}

// hostFaults are the errors a probe can only get from this host: its
// source address is missing, it is out of file descriptors, memory or
// buffers, or its own firewall or security policy refused the packet.
// None of them says anything of the server.
var hostFaults = []error{syscall.EADDRNOTAVAIL, syscall.EMFILE, syscall.ENFILE,
	syscall.ENOBUFS, syscall.ENOMEM, syscall.EPERM, syscall.EACCES}

// hostFault reports whether err is one of hostFaults.
func hostFault(err error) bool {
	for _, h := range hostFaults {
		if errors.Is(err, h) {
			return true
		}
	}
	return false
}

// unreachable classifies a "network unreachable" or "host unreachable"
// error. A router's ICMP error or a neighbour that does not answer says
// the server cannot be reached; this host having no route to it (its
// interface's address or route taken away) says nothing of the server,
// and the executor, which forwards by the servers' MAC addresses, goes
// on reaching it.
func unreachable(reason string, err error, t Target) *failure {
	if rerr := routeFromHost(t); rerr != nil {
		return &failure{reason: reason + ": no route from this host", err: err, local: true}
	}
	return &failure{reason: reason, err: err}
}

// routeFromHost looks up this host's route to t's address from t's source
// by connecting a UDP socket, which sends nothing, and returns the
// lookup's error.
func routeFromHost(t Target) error {
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(t.Address, 9)) // discard: nothing is sent
	var src *net.UDPAddr
	if s := t.SourceAddr(); s.IsValid() {
		src = net.UDPAddrFromAddrPort(netip.AddrPortFrom(s, 0))
	}
	c, err := net.DialUDP("udp", src, dst)
	if err != nil {
		return err
	}
	return c.Close()
}

// withDefaultPort returns t with Port set to def when t.Port is zero.
func withDefaultPort(t Target, def uint16) Target {
	if t.Port == 0 {
		t.Port = def
	}
	return t
}

// fmtDur formats a timeout for a reason: "2s", "1.5s", "300ms".
func fmtDur(d time.Duration) string {
	if d >= time.Millisecond {
		d = d.Round(time.Millisecond)
	}
	return d.String()
}

// budget returns d, shortened to what is left before ctx's deadline.
func budget(ctx context.Context, d time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < d {
			if left < 0 {
				left = 0
			}
			return left
		}
	}
	return d
}

// exchangeBudget is the longest a whole probe of t may take: connect plus
// receive timeout, shortened by ctx's deadline. Advisors that do not use a
// session (dns, ping, exec) bound themselves with it.
func exchangeBudget(ctx context.Context, t Target) time.Duration {
	return budget(ctx, t.ConnectTimeoutOrDefault()+t.ReceiveTimeoutOrDefault())
}

// session is one timed exchange over a TCP (or TLS) connection. It is not
// safe for concurrent use.
type session struct {
	conn  net.Conn      // the bounded connection (TLS after startTLS)
	raw   net.Conn      // the TCP connection, closed by Close
	r     *bufio.Reader // bounded reader over conn, made on first use (Reader)
	cnt   *countingConn
	ctx   context.Context
	stop  func() bool // stops the context watcher
	start time.Time   // when dial began: Load is measured from here
	recv  time.Duration
	until time.Time // the receive deadline
}

// dial connects to t.HostPort() over TCP, from t's source address if it
// has one, within t's connect timeout (and ctx), and returns a session
// whose receive deadline (t's receive timeout from now, or ctx's deadline
// if earlier) covers the rest of the exchange.
// The session's clock starts before the connect, as IBM's advisors time
// the whole exchange. Failures are classified: "connect refused",
// "connect timeout after 2s", "host unreachable", "network unreachable",
// "no address", "no port", "canceled", "connect failed: ...". A probe
// whose time ran out before the connect began is not made (Local).
func dial(ctx context.Context, t Target) (*session, error) {
	if !t.Address.IsValid() {
		return nil, fail("no address")
	}
	if t.Port == 0 {
		return nil, fail("no port")
	}
	start := time.Now()
	ct := budget(ctx, t.ConnectTimeoutOrDefault())
	if ct <= 0 && ctx.Err() != context.Canceled {
		// The probe's time ran out before it could connect: this host
		// fell behind (a dispatcher starting 100,000 probes at once ran
		// them seconds late), which says nothing of the server.
		return nil, &failure{reason: "not made: the probe's time ran out before it could connect", local: true}
	}
	dctx, cancel := context.WithTimeout(ctx, ct)
	defer cancel()
	c, err := t.dialer("tcp").DialContext(dctx, "tcp", t.HostPort())
	if err != nil {
		return nil, dialFailure(ctx, t, err, ct)
	}
	return newSession(ctx, c, t.ReceiveTimeoutOrDefault(), start), nil
}

// dialFailure classifies an error connecting to t.
func dialFailure(ctx context.Context, t Target, err error, timeout time.Duration) error {
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return &failure{reason: "canceled", err: err}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &failure{reason: "connect refused", err: err}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), isTimeout(err):
		return &failure{reason: "connect timeout after " + fmtDur(timeout), err: err}
	case errors.Is(err, syscall.EHOSTUNREACH):
		return unreachable("host unreachable", err, t)
	case errors.Is(err, syscall.ENETUNREACH):
		return unreachable("network unreachable", err, t)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return &failure{reason: "source address not available", err: err}
	}
	return &failure{reason: "connect failed: " + innerError(err), err: err}
}

// newSession wraps an established connection; start is when the exchange
// began (for Load). recv is the receive timeout from now.
func newSession(ctx context.Context, c net.Conn, recv time.Duration, start time.Time) *session {
	recv = budget(ctx, recv)
	cnt := &countingConn{Conn: c, left: maxReplyBytes}
	s := &session{conn: cnt, raw: c, cnt: cnt, ctx: ctx, start: start, recv: recv}
	s.until = time.Now().Add(recv)
	_ = c.SetDeadline(s.until)
	// Cancelling ctx unblocks any read or write at once.
	s.stop = context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	return s
}

// Close closes the connection. It is safe to call more than once.
func (s *session) Close() {
	s.stop()
	_ = s.raw.Close()
}

// CloseWrite half-closes the TCP connection: the server reads EOF after
// what was sent, and can still answer. Some servers wait for more input
// before answering a goodbye (Exim waits 200 ms after QUIT, in case the
// client pipelined more); the half-close ends that wait.
func (s *session) CloseWrite() {
	if cw, ok := s.raw.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// Up returns an up Result whose Load is the time since dial began.
func (s *session) Up() Result {
	return Result{Up: true, Load: s.Elapsed()}
}

// Elapsed is the time since dial began.
func (s *session) Elapsed() time.Duration { return time.Since(s.start) }

// ReceiveBudget is the receive timeout in force (for reasons).
func (s *session) ReceiveBudget() time.Duration { return s.recv }

// Expired reports whether the receive deadline has passed or the context
// is done: a parser that swallowed a timeout (bufio.Reader.ReadLine
// returns a cut line without error) then got a cut reply, not a bad one.
func (s *session) Expired() bool {
	return s.ctx.Err() != nil || !time.Now().Before(s.until)
}

// Conn returns the connection (TLS after startTLS): reads through it count
// against maxReplyBytes and the session's deadline applies. For libraries
// that need a net.Conn; do not mix with Reader/ReadLine, whose buffer may
// hold bytes already read.
func (s *session) Conn() net.Conn { return s.conn }

// Reader returns the session's buffered reader (bounded in total by
// maxReplyBytes, so even textproto's unbounded line reads stay bounded).
// Its errors are raw; pass them through s.classify before down. It is made
// on first use: a connect probe reads nothing, and at 20,000 probes a
// second its buffers were 80 MB/s of garbage.
func (s *session) Reader() *bufio.Reader {
	if s.r == nil {
		s.r = bufio.NewReaderSize(s.conn, maxLineBytes)
	}
	return s.r
}

// ReadLine reads one line of at most maxLineBytes and returns it without
// its "\n" or "\r\n". A line cut by the end of the stream is an error.
func (s *session) ReadLine() (string, error) {
	b, err := s.Reader().ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			err = errLineTooLong
		}
		return "", s.classify(err)
	}
	b = b[:len(b)-1]
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return string(b), nil
}

// ReadAtMost reads until end of stream or until n bytes (n is capped at
// maxReplyBytes). Reaching n is not an error; a timeout or reset is.
func (s *session) ReadAtMost(n int) ([]byte, error) {
	if n > maxReplyBytes {
		n = maxReplyBytes
	}
	buf := make([]byte, 0, min(n, 4096))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, err := s.Reader().Read(buf[len(buf):min(cap(buf), n)])
		buf = buf[:len(buf)+m]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return buf, s.classify(err)
		}
	}
	return buf, nil
}

// Write writes p in full before the session's deadline.
func (s *session) Write(p []byte) error {
	if _, err := s.conn.Write(p); err != nil {
		return s.classifyWrite(err)
	}
	return nil
}

// WriteString writes str in full before the session's deadline.
func (s *session) WriteString(str string) error { return s.Write([]byte(str)) }

// startTLS runs a TLS client handshake over the session's connection
// within the session's deadline (for https/ssl, and for STARTTLS after the
// plain-text negotiation). Reads after it count against the same
// maxReplyBytes budget. Bytes already buffered from the server before the
// handshake are an error ("unexpected data before TLS handshake").
func (s *session) startTLS(cfg *tls.Config) error {
	if s.r != nil && s.r.Buffered() > 0 {
		return fail("unexpected data before TLS handshake")
	}
	tc := tls.Client(s.cnt, cfg)
	if err := tc.HandshakeContext(s.ctx); err != nil {
		return s.classifyTLS(err)
	}
	s.conn, s.r = tc, nil // the next Reader reads through TLS
	return nil
}

// dialTLS dials like dial and then completes a TLS handshake with cfg
// (see tlsConfig) within the receive deadline.
func dialTLS(ctx context.Context, t Target, cfg *tls.Config) (*session, error) {
	s, err := dial(ctx, t)
	if err != nil {
		return nil, err
	}
	if err := s.startTLS(cfg); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// tlsConfig is the advisors' TLS client configuration for t: no
// certificate verification (advisors check liveness, not PKI), SNI =
// t.Host, and old protocol versions accepted so that old backends are
// still probed.
func tlsConfig(t Target) *tls.Config {
	return &tls.Config{
		ServerName:         t.Host,
		InsecureSkipVerify: true,             //nolint:gosec // liveness probe, not a trust decision
		MinVersion:         tls.VersionTLS10, //nolint:gosec // old backends must still be probed
	}
}

// classify maps a read error to a classified error: "no reply within 2s",
// "canceled", "connection closed without reply", "connection closed
// before end of reply", "connection reset", "reply line longer than 4096
// bytes", "reply longer than 65536 bytes", "read failed: ...".
func (s *session) classify(err error) error {
	var f *failure
	switch {
	case err == nil:
		return nil
	case errors.As(err, &f):
		return err
	case errors.Is(s.ctx.Err(), context.Canceled):
		return &failure{reason: "canceled", err: err}
	case errors.Is(err, errLineTooLong), errors.Is(err, errReplyTooLarge):
		return &failure{reason: err.Error(), err: err}
	case errors.Is(err, os.ErrDeadlineExceeded), isTimeout(err), errors.Is(s.ctx.Err(), context.DeadlineExceeded):
		return &failure{reason: "no reply within " + fmtDur(s.recv), err: err}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		if s.cnt.read == 0 {
			return &failure{reason: "connection closed without reply", err: err}
		}
		return &failure{reason: "connection closed before end of reply", err: err}
	case errors.Is(err, syscall.ECONNRESET):
		return &failure{reason: "connection reset", err: err}
	}
	return &failure{reason: "read failed: " + innerError(err), err: err}
}

// classifyWrite maps a write error.
func (s *session) classifyWrite(err error) error {
	switch {
	case errors.Is(s.ctx.Err(), context.Canceled):
		return &failure{reason: "canceled", err: err}
	case errors.Is(err, os.ErrDeadlineExceeded), isTimeout(err):
		return &failure{reason: "send timeout after " + fmtDur(s.recv), err: err}
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return &failure{reason: "connection reset", err: err}
	}
	return &failure{reason: "write failed: " + innerError(err), err: err}
}

// classifyTLS maps a handshake error: timeouts, resets and cancellation as
// classify does, anything else "TLS handshake failed: ...".
func (s *session) classifyTLS(err error) error {
	switch {
	case errors.Is(s.ctx.Err(), context.Canceled):
		return &failure{reason: "canceled", err: err}
	case errors.Is(err, os.ErrDeadlineExceeded), isTimeout(err), errors.Is(s.ctx.Err(), context.DeadlineExceeded):
		return &failure{reason: "TLS handshake timeout after " + fmtDur(s.recv), err: err}
	case errors.Is(err, errReplyTooLarge):
		return &failure{reason: "TLS handshake failed: " + err.Error(), err: err}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &failure{reason: "TLS handshake failed: connection closed", err: err}
	case errors.Is(err, syscall.ECONNRESET):
		return &failure{reason: "TLS handshake failed: connection reset", err: err}
	}
	return &failure{reason: "TLS handshake failed: " + innerError(err), err: err}
}

// isTimeout reports whether err is a net.Error timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// innerError returns err's text without net.OpError's "dial tcp a:p: "
// prefix, lower-cased first letter, capped in length.
func innerError(err error) string {
	prefix := ""
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		if oe.Op == "remote error" { // a TLS alert from the server
			prefix = "remote error: "
		}
		err = oe.Err
	}
	var se *os.SyscallError
	if errors.As(err, &se) && se.Err != nil {
		err = se.Err
	}
	msg := err.Error()
	msg = prefix + strings.TrimPrefix(msg, "tls: ")
	return printable(msg, 120)
}

// quoteReply quotes server text for a reason: printable, at most
// maxReasonReply runes, in Go quotes ("greeting \"554 go away\"").
func quoteReply(s string) string {
	return fmt.Sprintf("%q", printable(s, maxReasonReply))
}

// printable returns s with control and invalid bytes replaced by '?' and
// cut to at most n runes (with "…" appended when cut, so that a cut reason
// does not end with a period).
func printable(s string, n int) string {
	var b strings.Builder
	runes := 0
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		s = s[size:]
		if runes == n {
			b.WriteString("…")
			break
		}
		if r == utf8.RuneError && size <= 1 || !unicode.IsPrint(r) {
			r = '?'
		}
		b.WriteRune(r)
		runes++
	}
	return b.String()
}

// countingConn is a net.Conn that fails reads with errReplyTooLarge once
// left bytes have been read.
type countingConn struct {
	net.Conn
	left int64
	read int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errReplyTooLarge
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.Conn.Read(p)
	c.left -= int64(n)
	c.read += int64(n)
	return n, err
}
