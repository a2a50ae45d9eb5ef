package advisors

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
)

// fuzzAdvisors are the advisors whose probes read a server's reply over
// TCP (the line-oriented ones parse it themselves) and dns, over UDP.
// ssl and https are left out: a TLS handshake does not get as far as a
// reply from bytes that are not TLS.
var fuzzAdvisors = []string{"http", "ftp", "smtp", "pop3", "imap", "ldap", "dns"}

// fuzzReceive is the probes' receive timeout: an input the probe waits on
// for more costs the fuzzer this much.
const fuzzReceive = 150 * time.Millisecond

// FuzzAdvisorReplies hands each advisor's probe a server that answers with
// the fuzzer's bytes: sent at once after the connection opens (then the
// server stops sending and reads until the probe closes), or, for dns, as
// the reply to the query, with the query's ID. A probe must return within
// its timeouts, with a Result of the right shape (down has a short,
// printable reason), and never panic, whatever the server says. The
// request and response are the fuzzer's too, when the advisor accepts them
// (a configuration refuses the others: CheckRequest).
func FuzzAdvisorReplies(f *testing.F) {
	seeds := []struct {
		which             uint8
		request, response string
		reply             string
	}{
		{0, "", "", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		{0, "GET /health HTTP/1.1", "ok", "HTTP/1.0 503 Service Unavailable\r\n\r\n"},
		{1, "", "", "220 ready\r\n221 bye\r\n"},
		{1, "", "", "220-first\r\n220 last\r\n"},
		{2, "", "", "220 mail ESMTP\r\n250-mail\r\n250 HELP\r\n221 bye\r\n"},
		{2, "", "", "554 no\r\n"},
		{3, "", "", "+OK POP3 ready\r\n+OK bye\r\n"},
		{3, "", "", "-ERR busy\r\n"},
		{4, "", "", "* OK IMAP4rev1 ready\r\n"},
		{4, "CAPABILITY", "IMAP4rev1", "* OK ready\r\n* CAPABILITY IMAP4rev1\r\nA1 OK done\r\n"},
		{4, "", "", "* OK ready\r\n* LIST {5}\r\nabcde\r\nA1 OK\r\n"},
		{5, "", "", "\x30\x0c\x02\x01\x01\x61\x07\x0a\x01\x00\x04\x00\x04\x00"},
		{6, "", "", "\x00\x00\x81\x80\x00\x00\x00\x00\x00\x00\x00\x00"},
	}
	for _, s := range seeds {
		f.Add(s.which, s.request, s.response, []byte(s.reply))
	}
	// One server of each kind for all the inputs: a listener per input
	// would soon find no free port (the closed connections' TIME_WAIT).
	// Inputs run one at a time in a fuzzing process, so each connection
	// answers with the input current when it was accepted.
	var cur atomic.Pointer[[]byte]
	tcpPort := tcpServer(f, nil, func(c net.Conn, done <-chan struct{}) {
		_, _ = c.Write(*cur.Load())
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		// Not drain: its goroutine per connection waits for the end of
		// the fuzzing, and a run makes a million connections.
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	})
	udpPort := udpServer(f, func(query []byte) [][]byte {
		r := append([]byte(nil), *cur.Load()...)
		if len(r) >= 2 && len(query) >= 2 {
			copy(r, query[:2])
		}
		return [][]byte{r}
	})
	f.Fuzz(func(t *testing.T, which uint8, request, response string, reply []byte) {
		name := fuzzAdvisors[int(which)%len(fuzzAdvisors)]
		a, err := New(name)
		if err != nil {
			t.Fatal(err)
		}
		if CheckRequest(name, request, response) != nil {
			request, response = "", ""
		}
		cur.Store(&reply)
		port := tcpPort
		if name == "dns" {
			port = udpPort
		}
		tg := Target{Address: loopback, Port: port, ConnectTimeout: time.Second, ReceiveTimeout: fuzzReceive,
			Request: request, Response: response}
		start := time.Now()
		r := a.Probe(context.Background(), tg)
		// Generous: the fuzzer runs a worker per CPU beside this one.
		if el, limit := time.Since(start), time.Second+fuzzReceive+time.Second; el > limit {
			t.Errorf("%s probe took %v, more than %v", name, el, limit)
		}
		checkResultShape(t, r)
		if !r.Up && (!utf8.ValidString(r.Reason) || strings.ContainsAny(r.Reason, "\r\n\x00")) {
			t.Errorf("%s: reason %q is not one printable line", name, r.Reason)
		}
	})
}
