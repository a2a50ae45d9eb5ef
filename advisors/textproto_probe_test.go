package advisors

// Hostile servers for the ftp, smtp, pop3, imap and ldap advisors: every
// probe must come back down, within the Target's connect + receive timeout
// (+500 ms), without panicking and without reading more than it must,
// whatever the server sends. Each protocol's TestXXXHostile runs the same
// table through runHostile; the protocol-specific parts (what a good and a
// wrong greeting look like, an endless reply) are in hostileProtocols.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hostileTimeouts keep the table fast: every probe must end within 1.5 s
// (2.5 s for the trickle, which needs a receive timeout longer than the
// gap between two bytes to show that the deadline covers the exchange).
const (
	hostileConnect        = 500 * time.Millisecond
	hostileReceive        = 500 * time.Millisecond
	hostileTrickleReceive = 1500 * time.Millisecond
)

// tenMB is what the "10 MB" servers send, in chunks of the same buffer
// so that the server does not count against the probe's allocations.
const tenMB = 10 << 20

var hostileChunk = bytes.Repeat([]byte("x"), 64<<10)

// hostileProtocol says how one protocol's server opens a dialogue and
// what its wrong greeting and endless reply are.
type hostileProtocol struct {
	advisor string
	// request is the Target.Request that makes the probe send a command
	// after the greeting ("" when it does by default).
	request string
	// open plays the server's side up to the point where the probe waits
	// for the reply to its command (greeting sent, command read; for
	// ldap, bind answered and search request read). It returns false if
	// the probe went away.
	open func(c net.Conn, r *bufio.Reader) bool
	// greetingBytes is a good first message, sent one byte a second in
	// the trickle case.
	greetingBytes []byte
	// wrong plays a wrong greeting (ldap: a refused bind); wrongWant is
	// the reason it must give.
	wrong     func(c net.Conn, r *bufio.Reader)
	wrongWant string
	// endless writes an endless but well-formed reply to the command.
	endless func(c net.Conn, r *bufio.Reader, done <-chan struct{})
}

// textOpen returns an open function for a line protocol: send greeting,
// read the command line.
func textOpen(greeting string) func(net.Conn, *bufio.Reader) bool {
	return func(c net.Conn, r *bufio.Reader) bool {
		if _, err := c.Write([]byte(greeting)); err != nil {
			return false
		}
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, err := r.ReadString('\n')
		_ = c.SetReadDeadline(time.Time{})
		return err == nil
	}
}

// writeForever writes first once and then line until the write fails or
// done is closed.
func writeForever(c net.Conn, done <-chan struct{}, first, line string) {
	if _, err := c.Write([]byte(first)); err != nil {
		return
	}
	buf := []byte(strings.Repeat(line, 256))
	for {
		select {
		case <-done:
			return
		default:
		}
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

var hostileProtocols = map[string]hostileProtocol{
	"ftp": {
		advisor:       "ftp",
		open:          textOpen("220 ftp.example ready\r\n"),
		greetingBytes: []byte("220 ftp.example ready\r\n"),
		wrong: func(c net.Conn, _ *bufio.Reader) {
			_, _ = c.Write([]byte("421 Service not available, closing control connection.\r\n"))
		},
		wrongWant: `greeting "421 Service not available, closing control connection." is not 220`,
		endless: func(c net.Conn, _ *bufio.Reader, done <-chan struct{}) {
			writeForever(c, done, "215-UNIX\r\n", " more\r\n")
		},
	},
	"smtp": {
		advisor:       "smtp",
		open:          textOpen("220 mx.example ESMTP\r\n"),
		greetingBytes: []byte("220 mx.example ESMTP\r\n"),
		wrong: func(c net.Conn, _ *bufio.Reader) {
			_, _ = c.Write([]byte("554 mx.example no SMTP service here\r\n"))
		},
		wrongWant: `greeting "554 mx.example no SMTP service here" is not 220`,
		endless: func(c net.Conn, _ *bufio.Reader, done <-chan struct{}) {
			writeForever(c, done, "250-mx.example\r\n", "250-PIPELINING\r\n")
		},
	},
	"pop3": {
		advisor:       "pop3",
		request:       "CAPA",
		open:          textOpen("+OK POP3 ready\r\n"),
		greetingBytes: []byte("+OK POP3 ready\r\n"),
		wrong: func(c net.Conn, _ *bufio.Reader) {
			_, _ = c.Write([]byte("-ERR too many connections\r\n"))
		},
		wrongWant: `greeting "-ERR too many connections" is not +OK`,
		endless: func(c net.Conn, _ *bufio.Reader, done <-chan struct{}) {
			writeForever(c, done, "+OK capabilities follow\r\n", "X-CAPABILITY\r\n")
		},
	},
	"imap": {
		advisor:       "imap",
		request:       "CAPABILITY",
		open:          textOpen("* OK IMAP4rev1 ready\r\n"),
		greetingBytes: []byte("* OK IMAP4rev1 ready\r\n"),
		wrong: func(c net.Conn, _ *bufio.Reader) {
			_, _ = c.Write([]byte("* BYE server shutting down\r\n"))
		},
		wrongWant: `greeting "* BYE server shutting down" is not * OK or * PREAUTH`,
		endless: func(c net.Conn, _ *bufio.Reader, done <-chan struct{}) {
			writeForever(c, done, "* CAPABILITY IMAP4rev1\r\n", "* CAPABILITY X\r\n")
		},
	},
	"ldap": {
		advisor: "ldap",
		open: func(c net.Conn, r *bufio.Reader) bool {
			id, ok := readLDAPRequest(c, r)
			if !ok {
				return false
			}
			if _, err := c.Write(ldapResponse(id, ldapBindResponse, 0, "")); err != nil {
				return false
			}
			_, ok = readLDAPRequest(c, r)
			return ok
		},
		greetingBytes: ldapResponse(1, ldapBindResponse, 0, ""),
		wrong: func(c net.Conn, r *bufio.Reader) {
			if id, ok := readLDAPRequest(c, r); ok {
				_, _ = c.Write(ldapResponse(id, ldapBindResponse, 53, "go away"))
			}
		},
		wrongWant: "bind failed: unwilling to perform (53): go away",
		endless: func(c net.Conn, _ *bufio.Reader, done <-chan struct{}) {
			entry := ldapEntry(2, "", map[string][]string{"objectClass": {"top"}})
			writeForever(c, done, "", string(entry))
		},
	},
}

// hostileCase is one hostile behaviour.
type hostileCase struct {
	name string
	// afterGreeting: the server first plays the protocol's open, and
	// the probe's Target carries the protocol's request.
	afterGreeting bool
	serve         func(p hostileProtocol, c net.Conn, r *bufio.Reader, done <-chan struct{})
	// want is a substring of the reason, per advisor ("" key: all
	// advisors; missing: any reason); "a|b" accepts either.
	want map[string]string
	// measure checks the probe's allocations (10 MB cases).
	measure bool
	// receive overrides hostileReceive.
	receive time.Duration
}

func hostileCases() []hostileCase {
	text := func(s string) map[string]string {
		return map[string]string{"ftp": s, "smtp": s, "pop3": s, "imap": s}
	}
	with := func(m map[string]string, k, v string) map[string]string {
		m[k] = v
		return m
	}
	return []hostileCase{
		{
			name: "10 MB greeting without line end",
			serve: func(_ hostileProtocol, c net.Conn, _ *bufio.Reader, done <-chan struct{}) {
				writeTenMB(c, done)
			},
			want:    with(text("greeting line longer than 4096 bytes"), "ldap", "bind failed"),
			measure: true,
		},
		{
			name: "one byte per second",
			serve: func(p hostileProtocol, c net.Conn, _ *bufio.Reader, done <-chan struct{}) {
				trickle(c, done, p.greetingBytes)
			},
			want:    with(text("no greeting within 1.5s"), "ldap", "no reply within 1.5s"),
			receive: hostileTrickleReceive,
		},
		{
			name: "random bytes",
			serve: func(_ hostileProtocol, c net.Conn, _ *bufio.Reader, done <-chan struct{}) {
				rnd := rand.New(rand.NewPCG(1, 2))
				b := make([]byte, 1<<20)
				for i := range b {
					b[i] = byte(rnd.Uint32())
				}
				if _, err := c.Write(b); err == nil {
					drain(c, done)
				}
			},
		},
		{
			name:  "immediate close",
			serve: func(hostileProtocol, net.Conn, *bufio.Reader, <-chan struct{}) {},
			// The ldap probe speaks first: a server that closes with
			// the bind request unread sends a reset instead of a FIN.
			want: with(text("connection closed without greeting"), "ldap", "connection closed without reply|connection reset"),
		},
		{
			name: "accept and never answer",
			serve: func(_ hostileProtocol, c net.Conn, _ *bufio.Reader, done <-chan struct{}) {
				drain(c, done)
			},
			want: with(text("no greeting within 500ms"), "ldap", "no reply within 500ms"),
		},
		{
			name: "wrong greeting",
			serve: func(p hostileProtocol, c net.Conn, r *bufio.Reader, done <-chan struct{}) {
				p.wrong(c, r)
				drain(c, done)
			},
			want: map[string]string{
				"ftp": hostileProtocols["ftp"].wrongWant, "smtp": hostileProtocols["smtp"].wrongWant,
				"pop3": hostileProtocols["pop3"].wrongWant, "imap": hostileProtocols["imap"].wrongWant,
				"ldap": hostileProtocols["ldap"].wrongWant,
			},
		},
		{
			name:          "silence after greeting",
			afterGreeting: true,
			serve: func(_ hostileProtocol, c net.Conn, _ *bufio.Reader, done <-chan struct{}) {
				drain(c, done)
			},
			want: map[string]string{"": "no reply within 500ms"},
		},
		{
			name:          "close after greeting",
			afterGreeting: true,
			serve:         func(hostileProtocol, net.Conn, *bufio.Reader, <-chan struct{}) {},
			want:          with(text("connection closed before end of reply"), "ldap", "connection closed before end of reply"),
		},
		{
			name:          "endless reply",
			afterGreeting: true,
			serve: func(p hostileProtocol, c net.Conn, r *bufio.Reader, done <-chan struct{}) {
				p.endless(c, r, done)
			},
			want: map[string]string{"": "reply longer than 65536 bytes"},
		},
		{
			name:          "10 MB reply without line end",
			afterGreeting: true,
			serve: func(_ hostileProtocol, c net.Conn, _ *bufio.Reader, done <-chan struct{}) {
				writeTenMB(c, done)
			},
			want:    with(text("reply line longer than 4096 bytes"), "ldap", "rootdse search failed"),
			measure: true,
		},
	}
}

// writeTenMB writes 10 MB of 'x' without a line end, then waits.
func writeTenMB(c net.Conn, done <-chan struct{}) {
	for n := 0; n < tenMB; n += len(hostileChunk) {
		if _, err := c.Write(hostileChunk); err != nil {
			return
		}
	}
	drain(c, done)
}

// trickle writes b one byte a second, over and over, until the write
// fails or done is closed.
func trickle(c net.Conn, done <-chan struct{}, b []byte) {
	for i := 0; ; i++ {
		if _, err := c.Write(b[i%len(b) : i%len(b)+1]); err != nil {
			return
		}
		select {
		case <-done:
			return
		case <-time.After(time.Second):
		}
	}
}

// runHostile runs every hostile case against the named advisor. The 10 MB
// cases run first, one at a time, and check the probe's allocations; the
// others run in parallel.
func runHostile(t *testing.T, name string) {
	p := hostileProtocols[name]
	a, err := New(p.advisor)
	if err != nil {
		t.Fatal(err)
	}
	for _, hc := range hostileCases() {
		t.Run(hc.name, func(t *testing.T) {
			if !hc.measure {
				t.Parallel()
			}
			port := tcpServer(t, nil, func(c net.Conn, done <-chan struct{}) {
				r := bufio.NewReader(c)
				if hc.afterGreeting && !p.open(c, r) {
					return
				}
				hc.serve(p, c, r, done)
			})
			target := Target{Address: loopback, Port: port, ConnectTimeout: hostileConnect, ReceiveTimeout: hostileReceive}
			if hc.receive > 0 {
				target.ReceiveTimeout = hc.receive
			}
			if hc.afterGreeting {
				target.Request = p.request
			}
			var before, after runtime.MemStats
			if hc.measure {
				runtime.GC()
				runtime.ReadMemStats(&before)
			}
			r, el := probeTimed(t, a, target)
			if hc.measure {
				runtime.ReadMemStats(&after)
				if d := after.TotalAlloc - before.TotalAlloc; d > 4<<20 {
					t.Errorf("probe allocated %d bytes against a 10 MB reply", d)
				} else {
					t.Logf("allocated %d KiB", d>>10)
				}
			}
			if r.Up {
				t.Fatalf("up against a hostile server: %+v", r)
			}
			want, ok := hc.want[name]
			if !ok {
				want = hc.want[""]
			}
			if !slices.ContainsFunc(strings.Split(want, "|"), func(w string) bool { return strings.Contains(r.Reason, w) }) {
				t.Errorf("reason %q does not contain %q", r.Reason, want)
			}
			t.Logf("%s: down %q after %v", name, r.Reason, el.Round(time.Millisecond))
		})
	}
}

// runCanceled checks that the advisor honours its context against a server
// that never answers: a deadline shorter than the Target's timeouts ends
// the probe on time, and a cancellation ends it at once with "canceled".
func runCanceled(t *testing.T, name string) {
	a, err := New(name)
	if err != nil {
		t.Fatal(err)
	}
	port := tcpServer(t, nil, drain)
	target := Target{Address: loopback, Port: port, ConnectTimeout: 5 * time.Second, ReceiveTimeout: 5 * time.Second}

	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		r := a.Probe(ctx, target)
		el := time.Since(start)
		checkResultShape(t, r)
		if r.Up || el > 800*time.Millisecond {
			t.Errorf("got %+v after %v, want down within 800ms", r, el)
		}
		t.Logf("down %q after %v", r.Reason, el.Round(time.Millisecond))
	})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		start := time.Now()
		r := a.Probe(ctx, target)
		el := time.Since(start)
		if r.Up || r.Reason != "canceled" || el > 700*time.Millisecond {
			t.Errorf("got %+v after %v, want down \"canceled\" within 700ms", r, el)
		}
		t.Logf("down %q after %v", r.Reason, el.Round(time.Millisecond))
	})
}

// scriptedServer is a well-behaved (or deliberately odd) line server for
// dialogue tests: it sends greeting, then answers each line it reads with
// answer(line); an empty answer sends nothing. It closes the connection
// when answer says so. It returns the port and a channel that receives
// every line the server read.
func scriptedServer(t *testing.T, greeting string, answer func(line string) (reply string, hangup bool)) (uint16, <-chan string) {
	t.Helper()
	lines := make(chan string, 100)
	port := tcpServer(t, nil, func(c net.Conn, done <-chan struct{}) {
		if _, err := c.Write([]byte(greeting)); err != nil {
			return
		}
		r := bufio.NewReader(c)
		for {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\r\n")
			select {
			case lines <- line:
			default:
			}
			reply, hangup := answer(line)
			if reply != "" {
				if _, err := c.Write([]byte(reply)); err != nil {
					return
				}
			}
			if hangup {
				return
			}
		}
	})
	return port, lines
}

// collect returns the lines received so far.
func collect(ch <-chan string) []string {
	var out []string
	for {
		select {
		case l := <-ch:
			out = append(out, l)
		case <-time.After(50 * time.Millisecond):
			return out
		}
	}
}

// TestTextprotoHelpers checks the reply-code parser and the request check
// shared by ftp, smtp, pop3 and imap.
func TestTextprotoHelpers(t *testing.T) {
	codes := []struct {
		line        string
		code        int
		multi, isOK bool
	}{
		{"220 ready", 220, false, true},
		{"220-ready", 220, true, true},
		{"220", 220, false, true},
		{"22", 0, false, false},
		{"2x0 ready", 0, false, false},
		{"220ready", 0, false, false},
		{"", 0, false, false},
		{"\xff\xfe\xfd", 0, false, false},
	}
	for _, c := range codes {
		code, multi, ok := replyCode(c.line)
		if code != c.code || multi != c.multi || ok != c.isOK {
			t.Errorf("replyCode(%q) = %d, %v, %v; want %d, %v, %v", c.line, code, multi, ok, c.code, c.multi, c.isOK)
		}
	}
	reqs := []struct {
		in, out, err string
	}{
		{"SYST", "SYST", ""},
		{"  NOOP  ", "NOOP", ""},
		{"NOOP\r\nDELE x", "", `request "NOOP??DELE x" holds a control character`},
		{"a\x00b", "", `request "a?b" holds a control character`},
		{" ", "", "empty request"},
	}
	for _, c := range reqs {
		out, err := commandLine(c.in)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if out != c.out || got != c.err {
			t.Errorf("commandLine(%q) = %q, %q; want %q, %q", c.in, out, got, c.out, c.err)
		}
	}
	lits := []struct {
		line string
		n    int
		ok   bool
	}{
		{`* ID ("name" {7}`, 7, true},
		{`* X {12+}`, 12, true},
		{`* X ~{3}`, 3, true},
		{`* X {}`, 0, false},
		{`* X {-1}`, 0, false},
		{`* X {99999999999}`, 0, false},
		{`* X}`, 0, false},
	}
	for _, c := range lits {
		n, ok := imapLiteral(c.line)
		if n != c.n || ok != c.ok {
			t.Errorf("imapLiteral(%q) = %d, %v; want %d, %v", c.line, n, ok, c.n, c.ok)
		}
	}
}

// TestTextprotoGoodbyeBounded checks that a server which answers the probe
// but never answers QUIT or LOGOUT delays the probe by at most the grace
// period, and does not make it down.
func TestTextprotoGoodbyeBounded(t *testing.T) {
	cases := []struct {
		advisor, greeting, reply string
	}{
		{"ftp", "220 ready\r\n", "215 UNIX Type: L8\r\n"},
		{"smtp", "220 mx ESMTP\r\n", "250 mx\r\n"},
		{"pop3", "+OK ready\r\n", ""},
		{"imap", "* OK ready\r\n", ""},
	}
	for _, c := range cases {
		t.Run(c.advisor, func(t *testing.T) {
			t.Parallel()
			port, _ := scriptedServer(t, c.greeting, func(line string) (string, bool) {
				if strings.Contains(strings.ToUpper(line), "QUIT") || strings.Contains(strings.ToUpper(line), "LOGOUT") {
					// Never answer the goodbye, and keep the
					// connection open a while after it.
					time.Sleep(time.Second)
					return "", true
				}
				return c.reply, false
			})
			a, _ := New(c.advisor)
			r, el := probeTimed(t, a, loTarget(port))
			if !r.Up {
				t.Fatalf("got %+v, want up", r)
			}
			if el > r.Load+goodbyeGrace+100*time.Millisecond {
				t.Errorf("probe took %v, load %v: the goodbye waited more than %v", el, r.Load, goodbyeGrace)
			}
			t.Logf("load %v, probe %v", r.Load, el)
		})
	}
}

// stopServer stops an external server by PID (SIGTERM; SIGKILL if it has
// not exited after 5 s) and waits until its port refuses connections. It
// does not reap the process (startProcess's cleanup does): it watches
// /proc for the process to become a zombie, and only then tries the port,
// since a connection made while Dovecot shuts down keeps a login process
// alive for seconds.
func stopServer(t *testing.T, p *os.Process, port uint16) {
	t.Helper()
	exited := func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid))
		if err != nil {
			return true
		}
		// pid (comm) state ...: the state follows the last ')'.
		i := bytes.LastIndexByte(b, ')')
		return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
	}
	_ = p.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(5 * time.Second)
	for !exited() {
		if time.Now().After(deadline) {
			t.Logf("pid %d ignored SIGTERM for 5s; killing it", p.Pid)
			_ = p.Kill()
			deadline = time.Now().Add(5 * time.Second)
		}
		time.Sleep(10 * time.Millisecond)
	}
	addr := netip.AddrPortFrom(loopback, port).String()
	deadline = time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if errors.Is(err, syscall.ECONNREFUSED) {
			return
		}
		if err == nil {
			c.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still accepts connections 5s after its server exited", addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTextprotoRegistered checks the names and default ports of the ftp,
// smtp, pop3, imap and ldap advisors.
func TestTextprotoRegistered(t *testing.T) {
	want := map[string]uint16{"ftp": 21, "smtp": 25, "pop3": 110, "imap": 143, "ldap": 389}
	for name, port := range want {
		a, err := New(name)
		if err != nil {
			t.Fatal(err)
		}
		if a.Name() != name || a.DefaultPort() != port {
			t.Errorf("New(%q) = %s with default port %d, want port %d", name, a.Name(), a.DefaultPort(), port)
		}
	}
}

// realCase is one probe of a real server: what to send and expect, and the
// verdict.
type realCase struct {
	name              string
	request, response string
	up                bool
	reason            string
}

// probeRealServer probes a real server with each case (an up probe must
// report a load within the probe's own duration), then stops the server
// and checks that the probe reports the connection refused.
func probeRealServer(t *testing.T, a Advisor, proc *os.Process, port uint16, cases []realCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A real daemon forks for each connection: on a loaded
			// 2-core machine its greeting took over a second.
			target := loTarget(port)
			target.ReceiveTimeout = 5 * time.Second
			target.Request, target.Response = tc.request, tc.response
			r, el := probeTimed(t, a, target)
			if r.Up != tc.up || r.Reason != tc.reason {
				t.Fatalf("got %+v, want up=%v reason %q", r, tc.up, tc.reason)
			}
			if r.Up && (r.Load <= 0 || r.Load > el) {
				t.Errorf("load %v not in (0, %v]", r.Load, el)
			}
			t.Logf("up=%v load=%v reason=%q in %v", r.Up, r.Load, r.Reason, el)
		})
	}
	t.Run("server stopped", func(t *testing.T) {
		stopServer(t, proc, port)
		r, _ := probeTimed(t, a, loTarget(port))
		if r.Up || r.Reason != "connect refused" {
			t.Fatalf("got %+v, want down \"connect refused\"", r)
		}
	})
}
