package advisors

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// pipeSession returns a session over one end of a net.Pipe and the other
// end, which the test writes the server's side to.
func pipeSession(t *testing.T, recv time.Duration) (*session, net.Conn) {
	t.Helper()
	client, server := net.Pipe()
	s := newSession(context.Background(), client, recv, time.Now())
	t.Cleanup(func() {
		s.Close()
		server.Close()
	})
	return s, server
}

func TestSessionReadLine(t *testing.T) {
	tests := []struct {
		name   string
		server string // written, then the server end closes
		lines  []string
		reason string // of the read after the lines
	}{
		{"crlf and lf", "220 ready\r\n250 ok\n", []string{"220 ready", "250 ok"}, "connection closed before end of reply"},
		{"nothing", "", nil, "connection closed without reply"},
		{"cut line", "220 rea", nil, "connection closed before end of reply"},
		{"line too long", strings.Repeat("a", maxLineBytes+10) + "\n", nil, "reply line longer than 4096 bytes"},
		{"longest line", strings.Repeat("a", maxLineBytes-1) + "\n", []string{strings.Repeat("a", maxLineBytes-1)}, "connection closed before end of reply"},
		{"reply too long", strings.Repeat(strings.Repeat("b", 1023)+"\n", 80), nil, "reply longer than 65536 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, server := pipeSession(t, time.Second)
			go func() {
				_, _ = server.Write([]byte(tc.server))
				server.Close()
			}()
			var got []string
			var err error
			for {
				var line string
				if line, err = s.ReadLine(); err != nil {
					break
				}
				got = append(got, line)
			}
			if tc.lines != nil && strings.Join(got, "|") != strings.Join(tc.lines, "|") {
				t.Errorf("lines %q, want %q", got, tc.lines)
			}
			if r := down(err); r.Reason != tc.reason {
				t.Errorf("reason %q, want %q", r.Reason, tc.reason)
			}
		})
	}
}

func TestSessionDeadline(t *testing.T) {
	s, server := pipeSession(t, 200*time.Millisecond)
	go func() { // one byte every 50ms: the deadline covers the whole exchange
		for range 100 {
			if _, err := server.Write([]byte("x")); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	start := time.Now()
	_, err := s.ReadLine()
	if r := down(err); r.Reason != "no reply within 200ms" || time.Since(start) > 400*time.Millisecond {
		t.Errorf("got %q after %v", r.Reason, time.Since(start))
	}
}

func TestSessionReadAtMost(t *testing.T) {
	for _, tc := range []struct {
		send, max int
		want      int
	}{{0, 100, 0}, {10, 100, 10}, {10000, 100, 100}, {100000, 1 << 20, maxReplyBytes}, {5000, 5000, 5000}} {
		s, server := pipeSession(t, time.Second)
		go func() {
			_, _ = server.Write([]byte(strings.Repeat("z", tc.send)))
			server.Close()
		}()
		b, err := s.ReadAtMost(tc.max)
		if len(b) != tc.want || err != nil && !errors.Is(err, errReplyTooLarge) {
			t.Errorf("send %d, ReadAtMost(%d) = %d bytes, %v; want %d", tc.send, tc.max, len(b), err, tc.want)
		}
	}
}

func TestSessionCanceled(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	ctx, cancel := context.WithCancel(context.Background())
	s := newSession(ctx, client, 5*time.Second, time.Now())
	defer s.Close()
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := s.ReadLine()
	if r := down(err); r.Reason != "canceled" || time.Since(start) > time.Second {
		t.Errorf("got %q after %v", r.Reason, time.Since(start))
	}
}

func TestReasonHelpers(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", "plain"},
		{"tab\there\x00\xff", "tab?here??"},
		{strings.Repeat("é", 100), strings.Repeat("é", 80) + "…"},
	} {
		if got := printable(tc.in, 80); got != tc.want {
			t.Errorf("printable(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := quoteReply("554 go away\r"); got != `"554 go away?"` {
		t.Errorf("quoteReply = %s", got)
	}
	for d, want := range map[time.Duration]string{2 * time.Second: "2s", 1500 * time.Millisecond: "1.5s", 300 * time.Millisecond: "300ms", 299999 * time.Microsecond: "300ms"} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", d, got, want)
		}
	}
	if r := down(fail("status %d", 503)); r.Up || r.Reason != "status 503" {
		t.Errorf("down(fail) = %+v", r)
	}
	if r := down(errors.New("plain error")); r.Reason != "plain error" {
		t.Errorf("down(plain) = %+v", r)
	}
	if tg := withDefaultPort(Target{}, 80); tg.Port != 80 {
		t.Errorf("withDefaultPort: %d", tg.Port)
	}
	if tg := withDefaultPort(Target{Port: 8080}, 80); tg.Port != 8080 {
		t.Errorf("withDefaultPort overrode %d", tg.Port)
	}
}
