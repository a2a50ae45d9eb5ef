package main

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/connlimit"
	"github.com/dlbproject/dlb/pkg/testutil"
)

func TestCheckMetricsAddress(t *testing.T) {
	tests := []struct {
		addr    string
		wantErr string
	}{
		{"", ""},
		{"127.0.0.1:9917", ""},
		{"[::1]:9917", ""},
		{":9917", ""},
		{"localhost:9917", ""},
		{"127.0.0.1", "is not HOST:PORT"},
		{"127.0.0.1:", "the port must be a number"},
		{"127.0.0.1:0", "the port must be a number"},
		{"127.0.0.1:http", "the port must be a number"},
		{"127.0.0.1:70000", "the port must be a number"},
		{"::1:9917", "is not HOST:PORT"},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			err := checkMetricsAddress(tt.addr)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "--metrics-address")):
				t.Errorf("error %v, want one naming --metrics-address and %q", err, tt.wantErr)
			}
		})
	}
}

// freePort returns a loopback address no one listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestPrivilegedMonitor: dlbd --metrics-address serves /metrics, the
// console and its snapshot on one listener; an address it cannot listen on
// makes it exit with an error naming the flag, leaving no socket behind.
func TestPrivilegedMonitor(t *testing.T) {
	testutil.RequirePrivileged(t)
	base := t.TempDir()
	addr := freePort(t)
	d := newDirs(t, base, "mon")
	p := startDlbdArgs(t, d, "--metrics-address", addr)
	waitServing(t, d.socket, 20*time.Second, p)
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("nothing listens on %s; stderr:\n%s", addr, p.stderr)
		}
	}

	// The connections of these requests are from 127.0.0.3: one still
	// counted by dlbd when the test holds 127.0.0.1's places below would
	// take one of them.
	from3 := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}, Timeout: 2 * time.Second}
	client := &http.Client{Transport: &http.Transport{DialContext: from3.DialContext}, Timeout: 5 * time.Second}
	get := func(path string) (int, string, http.Header) {
		t.Helper()
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v; stderr:\n%s", path, err, p.stderr)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	code, body, _ := get("/metrics")
	if code != 200 || !strings.Contains(body, "dlb_executor_loaded 0") || !strings.Contains(body, "go_goroutines") ||
		!strings.Contains(body, `dlb_build_info{goversion=`) {
		t.Errorf("/metrics: %d\n%.3000s", code, body)
	}
	code, body, hdr := get("/")
	if code != 200 || !strings.Contains(body, "<title>dlb console</title>") || hdr.Get("Content-Security-Policy") == "" {
		t.Errorf("/: %d %v\n%.500s", code, hdr, body)
	}
	code, body, _ = get("/api/snapshot")
	var v struct {
		Clusters []any  `json:"clusters"`
		Version  string `json:"version"`
	}
	if err := json.Unmarshal([]byte(body), &v); code != 200 || err != nil || v.Clusters == nil || v.Version == "" {
		t.Errorf("/api/snapshot: %d %v\n%.500s", code, err, body)
	}
	if !strings.Contains(p.stderr.String(), "http://"+addr+"/metrics") {
		t.Errorf("dlbd did not log where it serves metrics; stderr:\n%s", p.stderr)
	}

	// Idle connections a host leaves open take its own places, not the
	// others': holding 32 from 127.0.0.1, a scrape from it fails, one
	// from 127.0.0.2 is served.
	client.CloseIdleConnections()
	scrapeFrom := func(src string) error {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
		tr := &http.Transport{DialContext: d.DialContext}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("http://" + addr + "/metrics")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	release := testutil.HoldConns(t, addr, connlimit.DefaultPerClient)
	if err := scrapeFrom("127.0.0.1"); err == nil {
		t.Error("a scrape from a host holding 32 idle connections was served")
	}
	if err := scrapeFrom("127.0.0.2"); err != nil {
		t.Errorf("a scrape from another host, while one holds 32 idle connections: %v", err)
	}
	release()
	if !strings.Contains(p.stderr.String(), "metrics and console: connections refused, over the limit") {
		t.Errorf("no log line of the refused connection; stderr:\n%s", p.stderr)
	}

	// Another dlbd on the same address cannot listen: it exits with an
	// error naming the flag, and removes the socket it had made.
	d2 := newDirs(t, base, "mon2")
	p2 := startDlbdArgs(t, d2, "--metrics-address", addr)
	err := p2.wait(t, 20*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(p2.stderr.String(), "--metrics-address") {
		t.Errorf("second dlbd: %v; stderr:\n%s", err, p2.stderr)
	}
	if exists(d2.socket) {
		t.Error("the refused dlbd left its socket behind")
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 10*time.Second); err != nil {
		t.Fatalf("dlbd: %v; stderr:\n%s", err, p.stderr)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Error("the metrics listener is still open after dlbd stopped")
	}
}
