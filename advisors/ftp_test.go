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

// vsftpdConf runs vsftpd in the foreground as a standalone server on
// 127.0.0.1 with a private configuration: no anonymous access, local
// logins possible (vsftpd refuses to start with both off), no seccomp
// sandbox (tests run as root in containers), logs in the test directory.
const vsftpdConf = `listen=YES
listen_ipv6=NO
listen_address=127.0.0.1
listen_port=%[2]d
background=NO
anonymous_enable=NO
local_enable=YES
seccomp_sandbox=NO
secure_chroot_dir=%[1]s/empty
xferlog_enable=NO
vsftpd_log_file=%[1]s/vsftpd.log
ftpd_banner=dlb test FTP (vsFTPd)
`

// startVsftpd starts vsftpd (Debian package vsftpd) on a free port of
// 127.0.0.1, and returns the process and port. It is killed by PID when
// t ends.
func startVsftpd(t *testing.T) (*os.Process, uint16) {
	t.Helper()
	bin := requireTool(t, "vsftpd", "vsftpd")
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	port := freePort(t, "tcp")
	conf := filepath.Join(dir, "vsftpd.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, vsftpdConf, dir, port), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cmd := startProcess(t, bin, conf)
	waitTCP(t, port)
	t.Logf("vsftpd listening on port %d after %v", port, time.Since(start).Round(time.Millisecond))
	return cmd.Process, port
}

// TestFTPRealServer probes a real vsftpd. vsftpd answers SYST before a
// login with "530 Please login with USER and PASS.", which the advisor
// counts as up (see ftpAdvisor).
func TestFTPRealServer(t *testing.T) {
	proc, port := startVsftpd(t)
	a, _ := New("ftp")
	probeRealServer(t, a, proc, port, []realCase{
		{name: "SYST", up: true},
		{name: "greeting matches", response: "dlb test FTP", up: true},
		{name: "FEAT multi-line reply matches", request: "FEAT", response: " EPSV", up: true},
		{name: "strict 215 refused before login", response: "215 ", reason: `reply does not contain "215 "`},
		{name: "response mismatch", request: "FEAT", response: "MLST", reason: `reply does not contain "MLST"`},
	})
}

// TestFTPDialogue checks the ftp advisor's reading of replies against a
// scripted server: codes, multi-line replies, 120 before 220, Request and
// Response, and the commands the probe sends.
func TestFTPDialogue(t *testing.T) {
	unix := func(line string) (string, bool) {
		switch strings.ToUpper(line) {
		case "SYST":
			return "215 UNIX Type: L8\r\n", false
		case "FEAT":
			return "211-Features:\r\n MDTM\r\n REST STREAM\r\n211 End\r\n", false
		case "QUIT":
			return "221 Goodbye.\r\n", true
		}
		return "500 Unknown command.\r\n", false
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
		{name: "SYST 215", greeting: "220 ready\r\n", answer: unix, up: true, sent: []string{"SYST", "QUIT"}},
		{name: "strict 215", greeting: "220 ready\r\n", answer: unix, response: "215 ", up: true},
		{name: "120 then 220", greeting: "120 ready in 1 minute\r\n220 ready\r\n", answer: unix, up: true},
		{name: "multi-line greeting", greeting: "220-Welcome\r\n  to the test\r\n220 ready\r\n", answer: unix, response: "to the test", up: true},
		{name: "FEAT", greeting: "220 ready\r\n", answer: unix, request: "FEAT", response: " MDTM", up: true, sent: []string{"FEAT", "QUIT"}},
		{name: "unknown command", greeting: "220 ready\r\n", answer: unix, request: "XYZZY", reason: `reply "500 Unknown command." to XYZZY is not 2xx, 3xx or 530`, sent: []string{"XYZZY", "QUIT"}},
		{
			name: "530 before login", greeting: "220 ready\r\n",
			answer: func(string) (string, bool) { return "530 Please login with USER and PASS.\r\n", false },
			up:     true,
		},
		{name: "greeting 421", greeting: "421 Too many users\r\n", answer: unix, reason: `greeting "421 Too many users" is not 220`},
		{name: "greeting without code", greeting: "SSH-2.0-OpenSSH_9.2\r\n", answer: unix, reason: `greeting "SSH-2.0-OpenSSH_9.2" is not 220`},
		{name: "greeting with control bytes", greeting: "220\x1b[31m\r\n", answer: unix, reason: `greeting "220?[31m" is not 220`},
		{name: "request with line break", greeting: "220 ready\r\n", answer: unix, request: "NOOP\r\nDELE x", reason: `request "NOOP??DELE x" holds a control character`},
		{
			name: "reply cut", greeting: "220 ready\r\n",
			answer: func(string) (string, bool) { return "215-UNIX\r\n", true },
			reason: "connection closed before end of reply",
		},
	}
	a, _ := New("ftp")
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

// TestFTPHostile runs the hostile-server table against the ftp advisor.
func TestFTPHostile(t *testing.T) { runHostile(t, "ftp") }

// TestFTPCanceled checks that the ftp advisor honours its context.
func TestFTPCanceled(t *testing.T) { runCanceled(t, "ftp") }
