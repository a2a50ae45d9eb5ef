package advisors

import (
	"bytes"
	"crypto/tls"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

// webHostile is what a hostile server does with a connection.
type webHostile struct {
	name string
	// serve misbehaves on c; it returns when done is closed or c fails.
	serve func(c net.Conn, done <-chan struct{})
	// slow behaviours end only by the probe's receive deadline (except
	// fastRawTLS ones against a TLS client, which sees garbage at once).
	slow, fastRawTLS bool
	// needsMatch behaviours are hostile only to a probe that reads the
	// body (an endless body behind good headers is up otherwise).
	needsMatch bool
}

// webHostileChunk is a reusable block of 'a's, so that the servers stream
// megabytes without allocating them (the memory check counts every
// allocation of the process).
var webHostileChunk = bytes.Repeat([]byte("a"), 32<<10)

// webHostileRandom is 1 MiB of (seeded) random bytes.
var webHostileRandom = func() []byte {
	b := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

// webWriteStream writes prefix, then n bytes of chunk (repeated), then
// suffix, stopping at the first error.
func webWriteStream(c net.Conn, prefix string, chunk []byte, n int, suffix string) {
	if _, err := c.Write([]byte(prefix)); err != nil {
		return
	}
	for n > 0 {
		m := min(n, len(chunk))
		if _, err := c.Write(chunk[:m]); err != nil {
			return
		}
		n -= m
	}
	_, _ = c.Write([]byte(suffix))
}

var webHostileBehaviours = []webHostile{
	{name: "10 MB header", serve: func(c net.Conn, done <-chan struct{}) {
		webWriteStream(c, "HTTP/1.1 200 OK\r\nX-Big: ", webHostileChunk, 10<<20, "\r\n\r\n")
	}},
	{name: "100k short headers", serve: func(c net.Conn, done <-chan struct{}) {
		line := bytes.Repeat([]byte("X-A: b\r\n"), 4096)
		webWriteStream(c, "HTTP/1.1 200 OK\r\n", line, 100000*8, "\r\n")
	}},
	{name: "no line ends", serve: func(c net.Conn, done <-chan struct{}) {
		webWriteStream(c, "", webHostileChunk, 10<<20, "")
	}},
	{name: "endless body", needsMatch: true, serve: func(c net.Conn, done <-chan struct{}) {
		webWriteStream(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n", webHostileChunk, 10<<20, "")
	}},
	{name: "one byte per second", slow: true, serve: func(c net.Conn, done <-chan struct{}) {
		for _, b := range []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") {
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
			select {
			case <-done:
				return
			case <-time.After(time.Second):
			}
		}
	}},
	{name: "TLS garbage", serve: func(c net.Conn, done <-chan struct{}) {
		// A handshake record header announcing 64 KiB, then noise.
		webWriteStream(c, "\x16\x03\x01\xff\xff", webHostileRandom, 1<<20, "")
	}},
	{name: "TLS alert", serve: func(c net.Conn, done <-chan struct{}) {
		_, _ = c.Write([]byte("\x15\x03\x03\x00\x02\x02\x28")) // fatal handshake_failure
	}},
	{name: "random bytes", serve: func(c net.Conn, done <-chan struct{}) {
		webWriteStream(c, "", webHostileRandom, len(webHostileRandom), "")
	}},
	{name: "closes immediately", serve: func(c net.Conn, done <-chan struct{}) {}},
	{name: "never answers", slow: true, serve: drain},
	{name: "status line then silence", slow: true, fastRawTLS: true, serve: func(c net.Conn, done <-chan struct{}) {
		_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\n"))
		drain(c, done)
	}},
}

// TestHostile runs every hostile behaviour against the http, https and ssl
// advisors (https both before and after a good TLS handshake) and checks
// that each probe is down, within connect + receive timeout + 500 ms, with
// a well-formed reason and bounded allocation.
func TestHostile(t *testing.T) {
	if testing.Short() {
		t.Skip("slow cases take a second each")
	}
	type setup struct {
		advisor  string
		tls      bool // the server completes a TLS handshake first
		request  string
		response string
	}
	setups := []setup{
		{advisor: "http"},
		{advisor: "http", request: "GET / HTTP/1.1", response: "needle"},
		{advisor: "https"},
		{advisor: "https", tls: true},
		{advisor: "https", tls: true, request: "GET / HTTP/1.1", response: "needle"},
		{advisor: "ssl"},
	}
	const memLimit = 4 << 20
	for _, su := range setups {
		for _, hb := range webHostileBehaviours {
			name := su.advisor
			if su.tls {
				name += " in TLS"
			}
			if su.response != "" {
				name += " GET+match"
			}
			if hb.needsMatch && su.response == "" {
				continue
			}
			rawTLS := su.advisor != "http" && !su.tls
			t.Run(name+"/"+hb.name, func(t *testing.T) {
				var cfg *tls.Config
				if su.tls {
					cfg = testTLSConfig(t, nil)
				}
				port := tcpServer(t, cfg, hb.serve)
				a, _ := New(su.advisor)
				tg := loTarget(port)
				tg.Request, tg.Response = su.request, su.response

				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				r, el := probeTimed(t, a, tg)
				runtime.ReadMemStats(&after)
				alloc := after.TotalAlloc - before.TotalAlloc

				if r.Up {
					t.Fatalf("hostile server reported up: %+v", r)
				}
				if hb.slow && !(hb.fastRawTLS && rawTLS) && el < 900*time.Millisecond {
					t.Errorf("slow case ended after %v, before the 1s receive timeout", el)
				}
				if alloc > memLimit {
					t.Errorf("probe allocated %d bytes, more than %d", alloc, memLimit)
				}
				t.Logf("down %q in %v, allocated %d KiB", r.Reason, el.Round(time.Millisecond), alloc>>10)
			})
		}
	}
}

// TestHostileReasons pins the reasons of a few hostile cases.
func TestHostileReasons(t *testing.T) {
	byName := map[string]webHostile{}
	for _, hb := range webHostileBehaviours {
		byName[hb.name] = hb
	}
	tests := []struct {
		advisor, behaviour, reason string
	}{
		{"http", "10 MB header", "reply longer than 65536 bytes"},
		{"http", "100k short headers", "reply longer than 65536 bytes"},
		{"http", "no line ends", "reply longer than 65536 bytes"},
		// The server closes at once: its FIN reaches the advisor before
		// the request reaches it (closed), or after (the server's kernel
		// answers the request with a reset). Either is the truth.
		{"http", "closes immediately", "connection closed without reply|connection reset"},
		{"http", "never answers", "no reply within 1s"},
		{"http", "status line then silence", "no reply within 1s"},
		{"http", "one byte per second", "no reply within 1s"},
		{"http", "random bytes", "bad HTTP reply: "},
		{"http GET /", "slow endless body", ""}, // up, at once: the body is not needed
		{"ssl", "TLS garbage", "TLS handshake failed: "},
		{"ssl", "TLS alert", "TLS handshake failed: remote error: handshake failure"},
		{"ssl", "never answers", "TLS handshake timeout after 1s"},
		{"ssl", "closes immediately", "TLS handshake failed: connection "}, // closed or reset
	}
	byName["slow endless body"] = webHostile{serve: func(c net.Conn, done <-chan struct{}) {
		_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n"))
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := c.Write([]byte("a")); err != nil {
				return
			}
		}
	}}
	for _, tc := range tests {
		if testing.Short() && byName[tc.behaviour].slow {
			continue
		}
		port := tcpServer(t, nil, byName[tc.behaviour].serve)
		name, request, _ := strings.Cut(tc.advisor, " ")
		a, _ := New(name)
		tg := loTarget(port)
		tg.Request = request
		r, el := probeTimed(t, a, tg)
		if tc.reason == "" {
			if !r.Up || el > 200*time.Millisecond {
				t.Errorf("%s vs %s: %+v after %v, want up at once", tc.advisor, tc.behaviour, r, el)
			}
			continue
		}
		match := false
		for _, want := range strings.Split(tc.reason, "|") {
			match = match || strings.HasPrefix(r.Reason, want)
		}
		if r.Up || !match {
			t.Errorf("%s vs %s: %+v, want reason %q", tc.advisor, tc.behaviour, r, tc.reason)
		}
	}
}
