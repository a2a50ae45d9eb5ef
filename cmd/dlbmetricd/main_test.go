package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/connlimit"
	"github.com/dlbproject/dlb/pkg/metricserver"
	"github.com/dlbproject/dlb/pkg/testutil"
)

const procFixture = "../../pkg/metricserver/testdata/proc/a"

// runAgent runs dlbmetricd with args as main does.
func runAgent(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	var out, errb testutil.LogBuffer
	err = execute(ctx, newCommand(&out, &errb), &errb, args)
	return out.String(), errb.String(), err
}

func TestFlagValidation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := testutil.WriteFileMode(t, dir, "good", "0123456789abcdef0123\n", 0o600)
	worldReadable := testutil.WriteFileMode(t, dir, "world", "0123456789abcdef0123\n", 0o644)
	groupReadable := testutil.WriteFileMode(t, dir, "group", "0123456789abcdef0123\n", 0o640)
	empty := testutil.WriteFileMode(t, dir, "empty", "", 0o600)
	unreadable := testutil.WriteFileMode(t, dir, "unreadable", "0123456789abcdef0123\n", 0o000)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no secret file", nil, "--secret-file is required"},
		{"missing secret file", []string{"--secret-file", filepath.Join(dir, "nope")}, "no such file"},
		{"world-readable secret", []string{"--secret-file", worldReadable}, "chmod 600 " + worldReadable},
		{"group-readable secret", []string{"--secret-file", groupReadable}, "accessible by group or others"},
		{"empty secret", []string{"--secret-file", empty}, "is empty"},
		{"unreadable secret", []string{"--secret-file", unreadable}, "permission denied"},
		{"secret is a directory", []string{"--secret-file", dir}, "not a regular file"},
		{"zero script timeout", []string{"--secret-file", good, "--script-timeout", "0s"}, "--script-timeout"},
		{"missing scripts dir", []string{"--secret-file", good, "--scripts-dir", filepath.Join(dir, "nope")}, "--scripts-dir"},
		{"scripts dir is a file", []string{"--secret-file", good, "--scripts-dir", good}, "not a directory"},
		{"bad log level", []string{"--secret-file", good, "--log-level", "loud"}, "--log-level"},
		{"bad log format", []string{"--secret-file", good, "--log-format", "xml"}, `--log-format: "xml" is not a log format: text or json`},
		{"bad listen", []string{"--secret-file", good, "--listen", "10004"}, "--listen"},
		{"client CA without cert", []string{"--secret-file", good, "--client-ca", good}, "--client-ca needs --tls-cert"},
		{"cert without key", []string{"--secret-file", good, "--tls-cert", good}, "--tls-cert"},
		{"argument", []string{"--secret-file", good, "extra"}, `unknown command "extra"`},
		{"unknown flag", []string{"--secret-file", good, "--lsiten", ":10004"}, "unknown flag: --lsiten"},
		{"flag without its value", []string{"--secret-file"}, "flag needs an argument: --secret-file"},
	} {
		if tc.name == "unreadable secret" && os.Geteuid() == 0 {
			continue // root reads any file
		}
		_, stderr, err := runAgent(context.Background(), tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
			continue
		}
		// Once, whether cobra refused the flag or run the value.
		if want := "dlbmetricd: " + err.Error() + "\n"; stderr != want {
			t.Errorf("%s: stderr %q, want %q", tc.name, stderr, want)
		}
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	stdout, _, err := runAgent(context.Background(), "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"--listen", "--secret-file", "--scripts-dir", "--script-timeout", "--log-level",
		"--tls-cert", "--tls-key", "--client-ca", "--once", "--proc", "--name",
		"X-Dlb-Signature", "HMAC-SHA256", "/v1/report?nonce=", "timestamp_ms", "cpuload", "memload", "loadavg",
		"chmod 600", ":10004",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// TestServe starts the agent on a loopback port, fetches a report through
// the client and stops it by cancelling its context, as SIGTERM does.
func TestServe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secret := testutil.WriteFileMode(t, dir, "secret", "0123456789abcdef0123\n", 0o600)
	scripts := filepath.Join(dir, "scripts")
	if err := os.Mkdir(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	testutil.WriteFileMode(t, scripts, "custom", "#!/bin/sh\necho 42\n", 0o755)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr testutil.LogBuffer
	cmd := newCommand(&bytes.Buffer{}, &stderr)
	cmd.SetArgs([]string{"--listen", "127.0.0.1:0", "--secret-file", secret, "--scripts-dir", scripts,
		"--proc", procFixture, "--name", "web1", "--log-level", "debug"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	listenRE := regexp.MustCompile(`listen=(127\.0\.0\.1:\d+)`)
	var addr netip.AddrPort
	for deadline := time.Now().Add(5 * time.Second); ; {
		if m := listenRE.FindStringSubmatch(stderr.String()); m != nil {
			addr = netip.MustParseAddrPort(m[1])
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent did not start: %s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}

	rep, err := metricserver.NewClient(metricserver.ClientOptions{}).Fetch(ctx, addr,
		metricserver.FetchOptions{Secret: []byte("0123456789abcdef0123")})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Agent != "web1" || rep.Metrics["custom"] != 42 || rep.Metrics["memload"] != 75 {
		t.Errorf("report %+v", rep)
	}

	// Idle connections one host leaves open take that host's places, not
	// the others': holding 32 from 127.0.0.1, a fetch from it fails, one
	// from 127.0.0.2 is served.
	fetchFrom := func(src string) error {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
		tr := &http.Transport{DialContext: d.DialContext}
		defer tr.CloseIdleConnections()
		_, err := metricserver.NewClient(metricserver.ClientOptions{Transport: tr}).Fetch(ctx, addr,
			metricserver.FetchOptions{Secret: []byte("0123456789abcdef0123")})
		return err
	}
	release := testutil.HoldConns(t, addr.String(), connlimit.DefaultPerClient)
	if err := fetchFrom("127.0.0.1"); err == nil {
		t.Error("a fetch from a host holding 32 idle connections was served")
	}
	if err := fetchFrom("127.0.0.2"); err != nil {
		t.Errorf("a fetch from another host, while one holds 32 idle connections: %v", err)
	}
	release()
	if !strings.Contains(stderr.String(), "metric server: connections refused, over the limit") {
		t.Errorf("no log line of the refused connection: %s", stderr.String())
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not stop")
	}
	if !strings.Contains(stderr.String(), "dlbmetricd stopped") {
		t.Errorf("log: %s", stderr.String())
	}
}

func TestOnce(t *testing.T) {
	t.Parallel()
	stdout, stderr, err := runAgent(context.Background(), "--once", "--proc", procFixture, "--name", "web2")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	var rep metricserver.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("output %q: %v", stdout, err)
	}
	// The fixture does not change, so no CPU time elapses between samples.
	if rep.Agent != "web2" || rep.Metrics["memload"] != 75 || rep.Metrics["loadavg"] != 75 || rep.Missing["cpuload"] == "" {
		t.Errorf("report %+v", rep)
	}
}

// TestNotifiesSystemd: under systemd (Type=notify) the agent sends
// READY=1 once it listens, and STOPPING=1 when it stops.
func TestNotifiesSystemd(t *testing.T) {
	dir := t.TempDir()
	secret := testutil.WriteFileMode(t, dir, "secret", "0123456789abcdef0123\n", 0o600)
	sock := filepath.Join(dir, "notify")
	nc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	t.Setenv("NOTIFY_SOCKET", sock)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr testutil.LogBuffer
	cmd := newCommand(&bytes.Buffer{}, &stderr)
	cmd.SetArgs([]string{"--listen", "127.0.0.1:0", "--secret-file", secret, "--scripts-dir", dir, "--proc", procFixture})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	read := func() string {
		buf := make([]byte, 256)
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := nc.Read(buf)
		if err != nil {
			t.Fatalf("reading the notify socket: %v (log: %s)", err, stderr.String())
		}
		return string(buf[:n])
	}
	if got := read(); got != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", got)
	}
	m := regexp.MustCompile(`listen=(127\.0\.0\.1:\d+)`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("READY=1 before the agent logged its address: %s", stderr.String())
	}
	c, err := net.Dial("tcp", m[1])
	if err != nil {
		t.Fatalf("READY=1 sent but %s does not accept: %v", m[1], err)
	}
	c.Close()
	cancel()
	if got := read(); got != "STOPPING=1" {
		t.Errorf("notification at stop %q, want STOPPING=1", got)
	}
	if err := <-done; err != nil {
		t.Errorf("exit: %v", err)
	}
}

// TestSurvivesSIGHUP: a SIGHUP (a log rotation's, "kill -HUP") is logged and
// the agent goes on answering: by default it would end the process, and
// systemd does not restart a service that SIGHUP ended.
func TestSurvivesSIGHUP(t *testing.T) {
	dir := t.TempDir()
	secret := testutil.WriteFileMode(t, dir, "secret", "0123456789abcdef0123\n", 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr testutil.LogBuffer
	cmd := newCommand(&bytes.Buffer{}, &stderr)
	cmd.SetArgs([]string{"--listen", "127.0.0.1:0", "--secret-file", secret, "--proc", procFixture})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	waitLog := func(re *regexp.Regexp) []string {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; {
			if m := re.FindStringSubmatch(stderr.String()); m != nil {
				return m
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log: %s", re, stderr.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	m := waitLog(regexp.MustCompile(`listen=(127\.0\.0\.1:\d+)`))
	addr := netip.MustParseAddrPort(m[1])
	// The agent handles SIGHUP from before it logs its address.
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(regexp.MustCompile(`SIGHUP: nothing to reload`))
	rep, err := metricserver.NewClient(metricserver.ClientOptions{}).Fetch(ctx, addr,
		metricserver.FetchOptions{Secret: []byte("0123456789abcdef0123")})
	if err != nil {
		t.Fatalf("after SIGHUP: %v", err)
	}
	if rep.Metrics["memload"] != 75 {
		t.Errorf("report after SIGHUP %+v", rep)
	}
	select {
	case err := <-done:
		t.Fatalf("the agent ended after SIGHUP: %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("exit: %v", err)
	}
}
