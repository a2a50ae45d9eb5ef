package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestCheckRemoteAPI: the TCP admin listener is off by default, and when
// asked for needs one address of this host, a certificate and key that
// load, and a token file of the owner's alone; each flag's error names it.
func TestCheckRemoteAPI(t *testing.T) {
	dir := t.TempDir()
	cert, key := testutil.WriteCert(t, dir, net.ParseIP("198.18.0.2"))
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, []byte("0123456789abcdef0123\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                     string
		addr, cert, key, tokenFl string
		err                      string
	}{
		{"off", "", "", "", "", ""},
		{"on", "198.18.0.2:7443", cert, key, token, ""},
		{"IPv6", "[2001:2::2]:7443", cert, key, token, ""},
		{"a token without an address", "", "", "", token, "go with --api-address"},
		{"no port", "198.18.0.2", cert, key, token, "not ADDRESS:PORT"},
		{"port 0", "198.18.0.2:0", cert, key, token, "1..65535"},
		{"a host name", "dispatcher:7443", cert, key, token, "must be an IP address"},
		{"every address", "0.0.0.0:7443", cert, key, token, "listens on every address"},
		{"every IPv6 address", "[::]:7443", cert, key, token, "listens on every address"},
		{"no token", "198.18.0.2:7443", cert, key, "", "needs --api-cert, --api-key and --api-token-file"},
		{"no certificate", "198.18.0.2:7443", "", key, token, "needs --api-cert"},
		{"a certificate that is not one", "198.18.0.2:7443", token, key, token, "--api-cert/--api-key"},
		{"the key of nothing", "198.18.0.2:7443", cert, cert, token, "--api-cert/--api-key"},
		{"a token others can read", "198.18.0.2:7443", cert, key, open, "--api-token-file: reading the token"},
		// Files that never end or never open: refused, not waited for.
		{"a device as certificate", "198.18.0.2:7443", "/dev/zero", key, token, "--api-cert: /dev/zero is a character device, not a regular file"},
		{"a named pipe as key", "198.18.0.2:7443", cert, fifo, token, "--api-key: " + fifo + " is a named pipe, not a regular file"},
		{"a named pipe as token", "198.18.0.2:7443", cert, key, fifo, "--api-token-file: reading the token: " + fifo + " is a named pipe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := checkRemoteAPI(tt.addr, tt.cert, tt.key, tt.tokenFl)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (r == nil) != (tt.addr == "") {
				t.Fatalf("remote %+v for address %q", r, tt.addr)
			}
			if r != nil && (r.token != "0123456789abcdef0123" || len(r.tls.Certificates) != 1 || r.address != tt.addr) {
				t.Errorf("remote %+v", r)
			}
		})
	}
}
