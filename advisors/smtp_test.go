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

// eximConf is a private Exim configuration: the daemon runs as root (so
// that it can write its spool and logs in the test's directory, which
// only root can enter), listens on 127.0.0.1 only, does no ident or DNS
// lookups (they would slow every connection down), advertises no TLS and
// refuses every recipient. The port comes from -oX.
const eximConf = `exim_user = root
exim_group = root
keep_environment =
primary_hostname = mx.dlb.test
spool_directory = %[1]s/spool
log_file_path = %[1]s/log/%%slog
local_interfaces = <; 127.0.0.1
rfc1413_hosts =
host_lookup =
tls_advertise_hosts =
acl_smtp_rcpt = refuse_all

begin acl

refuse_all:
  deny message = no relaying in tests
`

// startExim starts Exim (Debian package exim4-daemon-light) as a
// foreground SMTP daemon (-bdf) on a free port of 127.0.0.1, and returns
// the process and port. It is killed by PID when t ends.
func startExim(t *testing.T) (*os.Process, uint16) {
	t.Helper()
	bin := requireTool(t, "exim4", "exim4-daemon-light")
	dir := t.TempDir()
	for _, d := range []string{"spool", "log"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(dir, "exim.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, eximConf, dir), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t, "tcp")
	start := time.Now()
	cmd := startProcess(t, bin, "-C", conf, "-bdf", "-oX", fmt.Sprint(port))
	t.Cleanup(func() {
		if t.Failed() {
			for _, f := range []string{"mainlog", "paniclog", "rejectlog"} {
				if b, err := os.ReadFile(filepath.Join(dir, "log", f)); err == nil {
					t.Logf("exim %s:\n%s", f, b)
				}
			}
		}
	})
	waitTCP(t, port)
	t.Logf("exim listening on port %d after %v", port, time.Since(start).Round(time.Millisecond))
	return cmd.Process, port
}

// TestSMTPRealServer probes a real Exim.
func TestSMTPRealServer(t *testing.T) {
	proc, port := startExim(t)
	a, _ := New("smtp")
	probeRealServer(t, a, proc, port, []realCase{
		{name: "EHLO", up: true},
		{name: "greeting matches", response: "ESMTP Exim", up: true},
		{name: "EHLO keyword matches", response: "250-PIPELINING", up: true},
		{name: "NOOP", request: "NOOP", up: true},
		{name: "HELO with a name", request: "HELO lb1.dlb.test", response: "Hello lb1.dlb.test", up: true},
		{name: "response mismatch", response: "STARTTLS", reason: `reply does not contain "STARTTLS"`},
		{name: "refused command", request: "RCPT TO:<a@b.test>", reason: `reply "503 sender not yet given" to RCPT is not 2xx`},
	})
}

// TestSMTPDialogue checks the smtp advisor against a scripted server:
// EHLO with its address literal, the HELO fallback, multi-line replies,
// and failing codes.
func TestSMTPDialogue(t *testing.T) {
	modern := func(line string) (string, bool) {
		switch verb := strings.ToUpper(commandVerb(line)); verb {
		case "EHLO":
			return "250-mx.test greets " + strings.TrimPrefix(line, "EHLO ") + "\r\n250-SIZE 1000\r\n250 HELP\r\n", false
		case "QUIT":
			return "221 bye\r\n", true
		}
		return "250 ok\r\n", false
	}
	old := func(line string) (string, bool) {
		switch verb := strings.ToUpper(commandVerb(line)); verb {
		case "HELO":
			return "250 mx.test\r\n", false
		case "QUIT":
			return "221 bye\r\n", true
		}
		return "502 command not implemented\r\n", false
	}
	tests := []struct {
		name              string
		greeting          string
		answer            func(string) (string, bool)
		request, response string
		up                bool
		reason            string
		sent              []string
	}{
		{name: "EHLO", greeting: "220 mx.test ESMTP\r\n", answer: modern, response: "greets [127.0.0.1]", up: true, sent: []string{"EHLO [127.0.0.1]", "QUIT"}},
		{name: "HELO fallback", greeting: "220 mx.test SMTP\r\n", answer: old, up: true, sent: []string{"EHLO [127.0.0.1]", "HELO [127.0.0.1]", "QUIT"}},
		{name: "multi-line greeting", greeting: "220-mx.test\r\n220-no UCE\r\n220 ready\r\n", answer: modern, response: "no UCE", up: true},
		{name: "greeting 554", greeting: "554 mx.test no service\r\n", answer: modern, reason: `greeting "554 mx.test no service" is not 220`},
		{
			name: "EHLO 421", greeting: "220 mx.test\r\n",
			answer: func(string) (string, bool) { return "421 too busy\r\n", true },
			reason: `reply "421 too busy" to EHLO is not 250`,
		},
		{
			name: "HELO refused too", greeting: "220 mx.test\r\n",
			answer: func(string) (string, bool) { return "500 what?\r\n", false },
			reason: `reply "500 what?" to HELO is not 250`,
		},
		{name: "custom command", greeting: "220 mx.test\r\n", answer: modern, request: "NOOP", up: true, sent: []string{"NOOP", "QUIT"}},
		{name: "custom command refused", greeting: "220 mx.test\r\n", answer: old, request: "VRFY postmaster", reason: `reply "502 command not implemented" to VRFY is not 2xx`},
	}
	a, _ := New("smtp")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			port, lines := scriptedServer(t, tc.greeting, tc.answer)
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

// TestSMTPHostile runs the hostile-server table against the smtp advisor.
func TestSMTPHostile(t *testing.T) { runHostile(t, "smtp") }

// TestSMTPCanceled checks that the smtp advisor honours its context.
func TestSMTPCanceled(t *testing.T) { runCanceled(t, "smtp") }
