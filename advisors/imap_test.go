package advisors

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// dovecotConf runs Dovecot with one protocol (imap or pop3) on
// 127.0.0.1 from a private configuration: base and state directories and
// logs under the test's directory, no TLS, a static password database
// (nobody logs in; the probes stop at the greeting).
const dovecotConf = `protocols = %[2]s
listen = 127.0.0.1
base_dir = %[1]s/run
state_dir = %[1]s/state
log_path = /dev/stderr
ssl = no
disable_plaintext_auth = no
login_greeting = dlb test %[2]s ready.
mail_location = maildir:%[1]s/mail/%%u
passdb {
  driver = static
  args = password=secret
}
userdb {
  driver = static
  args = uid=root gid=root home=%[1]s/mail/%%u
}
service imap-login {
  inet_listener imap {
    address = 127.0.0.1
    port = %[3]d
  }
  inet_listener imaps {
    port = 0
  }
}
service pop3-login {
  inet_listener pop3 {
    address = 127.0.0.1
    port = %[3]d
  }
  inet_listener pop3s {
    port = 0
  }
}
`

// startDovecot starts Dovecot (Debian packages dovecot-imapd and
// dovecot-pop3d) in the foreground for protocol ("imap" or "pop3") on a
// free port of 127.0.0.1, and returns the process and port. It is killed
// by PID when t ends.
func startDovecot(t *testing.T, protocol string) (*os.Process, uint16) {
	t.Helper()
	bin := requireTool(t, "dovecot", "dovecot-"+protocol+"d")
	if _, err := os.Stat("/usr/lib/dovecot/" + protocol + "-login"); err != nil {
		requireTool(t, "dovecot-"+protocol+"-login", "dovecot-"+protocol+"d")
	}
	dir := t.TempDir()
	port := freePort(t, "tcp")
	conf := filepath.Join(dir, "dovecot.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, dovecotConf, dir, protocol, port), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cmd := startProcess(t, bin, "-F", "-c", conf)
	waitTCP(t, port)
	t.Logf("dovecot (%s) listening on port %d after %v", protocol, port, time.Since(start).Round(time.Millisecond))
	return cmd.Process, port
}

// TestIMAPRealServer probes a real Dovecot IMAP server.
func TestIMAPRealServer(t *testing.T) {
	proc, port := startDovecot(t, "imap")
	a, _ := New("imap")
	probeRealServer(t, a, proc, port, []realCase{
		{name: "greeting", up: true},
		{name: "greeting matches", response: "dlb test imap ready", up: true},
		{name: "CAPABILITY", request: "CAPABILITY", response: "IMAP4rev1", up: true},
		{name: "NOOP", request: "NOOP", up: true},
		{name: "command refused before login", request: "SELECT INBOX", reason: `reply "a1 BAD Error in IMAP command received by server." to SELECT is not OK`},
		{name: "response mismatch", response: "Cyrus", reason: `reply does not contain "Cyrus"`},
	})
}

// TestIMAPDialogue checks the imap advisor against a scripted server:
// PREAUTH, tags, untagged lines and literals, continuation requests.
func TestIMAPDialogue(t *testing.T) {
	server := func(line string) (string, bool) {
		tag, cmd, _ := strings.Cut(line, " ")
		switch strings.ToUpper(cmd) {
		case "CAPABILITY":
			return "* CAPABILITY IMAP4rev1 STARTTLS\r\n" + tag + " OK done\r\n", false
		case "ID NIL":
			// A literal holding something that looks like a tagged reply.
			return "* ID (\"name\" {13}\r\na1 NO inside)\r\n" + tag + " OK ID done\r\n", false
		case "AUTHENTICATE PLAIN":
			return "+ \r\n", false
		case "LOGOUT":
			return "* BYE bye\r\n" + tag + " OK bye\r\n", true
		}
		return tag + " BAD unknown\r\n", false
	}
	tests := []struct {
		name              string
		greeting          string
		request, response string
		up                bool
		reason            string
		sent              []string
	}{
		{name: "OK", greeting: "* OK [CAPABILITY IMAP4rev1] ready\r\n", up: true, sent: []string{"a1 LOGOUT"}},
		{name: "PREAUTH", greeting: "* PREAUTH ready, you are root\r\n", up: true},
		{name: "lower-case ok", greeting: "* ok ready\r\n", up: true},
		{name: "BYE", greeting: "* BYE too many connections\r\n", reason: `greeting "* BYE too many connections" is not * OK or * PREAUTH`},
		{name: "not IMAP", greeting: "+OK POP3 ready\r\n", reason: `greeting "+OK POP3 ready" is not * OK or * PREAUTH`},
		{name: "CAPABILITY", greeting: "* OK ready\r\n", request: "CAPABILITY", response: "STARTTLS", up: true, sent: []string{"a1 CAPABILITY", "a2 LOGOUT"}},
		{name: "literal skipped", greeting: "* OK ready\r\n", request: "ID NIL", response: "ID done", up: true},
		{name: "tagged BAD", greeting: "* OK ready\r\n", request: "XYZZY", reason: `reply "a1 BAD unknown" to XYZZY is not OK`},
		{name: "continuation", greeting: "* OK ready\r\n", request: "AUTHENTICATE PLAIN", reason: `reply "+ " to AUTHENTICATE asks for more input`},
		{name: "response mismatch", greeting: "* OK ready\r\n", request: "CAPABILITY", response: "IMAP4rev2", reason: `reply does not contain "IMAP4rev2"`},
	}
	a, _ := New("imap")
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

// TestIMAPHostile runs the hostile-server table against the imap advisor.
func TestIMAPHostile(t *testing.T) { runHostile(t, "imap") }

// TestIMAPCanceled checks that the imap advisor honours its context.
func TestIMAPCanceled(t *testing.T) { runCanceled(t, "imap") }
