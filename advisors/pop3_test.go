package advisors

import (
	"slices"
	"strings"
	"testing"
)

// TestPOP3RealServer probes a real Dovecot POP3 server.
func TestPOP3RealServer(t *testing.T) {
	proc, port := startDovecot(t, "pop3")
	a, _ := New("pop3")
	probeRealServer(t, a, proc, port, []realCase{
		{name: "greeting", up: true},
		{name: "greeting matches", response: "dlb test pop3 ready", up: true},
		{name: "CAPA", request: "CAPA", response: "\nUIDL", up: true},
		{name: "command refused before login", request: "STAT", reason: `reply "-ERR Unknown command." to STAT is not +OK`},
		{name: "response mismatch", request: "CAPA", response: "APOP", reason: `reply does not contain "APOP"`},
	})
}

// TestPOP3Dialogue checks the pop3 advisor against a scripted server:
// status indicators, multi-line CAPA with byte-stuffing, and the QUIT.
func TestPOP3Dialogue(t *testing.T) {
	server := func(line string) (string, bool) {
		switch strings.ToUpper(line) {
		case "CAPA":
			return "+OK Capability list follows\r\nUSER\r\n..dotted\r\nSASL PLAIN\r\n.\r\n", false
		case "NOOP":
			return "-ERR not in this state\r\n", false
		case "QUIT":
			return "+OK bye\r\n", true
		}
		return "-ERR unknown\r\n", false
	}
	tests := []struct {
		name              string
		greeting          string
		request, response string
		up                bool
		reason            string
		sent              []string
	}{
		{name: "+OK", greeting: "+OK POP3 ready <1896.697170952@dbc.mtview.ca.us>\r\n", response: "dbc.mtview", up: true, sent: []string{"QUIT"}},
		{name: "bare +OK", greeting: "+OK\r\n", up: true},
		{name: "-ERR", greeting: "-ERR maildrop locked\r\n", reason: `greeting "-ERR maildrop locked" is not +OK`},
		{name: "not POP3", greeting: "* OK IMAP4rev1 ready\r\n", reason: `greeting "* OK IMAP4rev1 ready" is not +OK`},
		{name: "CAPA", greeting: "+OK ready\r\n", request: "CAPA", response: "\nSASL PLAIN", up: true, sent: []string{"CAPA", "QUIT"}},
		{name: "CAPA byte-stuffed line", greeting: "+OK ready\r\n", request: "capa", response: "\n.dotted\n", up: true},
		{name: "command refused", greeting: "+OK ready\r\n", request: "NOOP", reason: `reply "-ERR not in this state" to NOOP is not +OK`},
	}
	a, _ := New("pop3")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			port, lines := scriptedServer(t, tc.greeting, server)
			target := loTarget(port)
			target.Request, target.Response = tc.request, tc.response
			r, el := probeTimed(t, a, target)
			if r.Up != tc.up || r.Reason != tc.reason {
				t.Fatalf("got %+v, want up=%v reason %q", r, tc.up, tc.reason)
			}
			if tc.sent != nil {
				if got := collect(lines); !slices.Equal(got, tc.sent) {
					t.Errorf("server read %q, want %q", got, tc.sent)
				}
			}
			t.Logf("up=%v reason=%q in %v", r.Up, r.Reason, el)
		})
	}
}

// TestPOP3Hostile runs the hostile-server table against the pop3 advisor.
func TestPOP3Hostile(t *testing.T) { runHostile(t, "pop3") }

// TestPOP3Canceled checks that the pop3 advisor honours its context.
func TestPOP3Canceled(t *testing.T) { runCanceled(t, "pop3") }
