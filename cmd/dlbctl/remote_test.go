package main

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestRemoteHost: with --host (or DLB_HOST) dlbctl reaches dlbd's TCP
// admin listener over TLS with the token of --token-file, trusting
// --ca-file; a wrong token is dlbd's refusal (exit 1), an untrusted
// certificate is unreachable (exit 3, with a hint about the listener and
// the CA), and flags that contradict each other are usage errors (exit
// 2). Commands that do not talk to dlbd ignore DLB_HOST.
func TestRemoteHost(t *testing.T) {
	const token = "0123456789abcdef-dlbctl"
	eng := &fakeEngine{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"the token is not dlbd's (dlbd --api-token-file)","op":-1}`))
			return
		}
		eng.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "https://")
	dir := t.TempDir()
	write := func(name, content string) string { return testutil.WriteFile(t, dir, name, content) }
	ca := testutil.WriteCA(t, dir, srv.Certificate())
	good, wrong := write("token", token), write("wrong", "0123456789abcdef-other")
	sock := serve(t, &fakeEngine{}) // a socket dlbd that must not be asked

	tests := []struct {
		name   string
		vars   map[string]string
		args   []string
		code   int
		stderr []string
		sent   int
	}{
		{"flags", nil, []string{"--host", host, "--token-file", good, "--ca-file", ca, "server", "up", "@@10.1.1.5"}, exitOK, nil, 1},
		{"environment", map[string]string{"DLB_HOST": host, "DLB_TOKEN_FILE": good, "DLB_CA_FILE": ca, "DLB_SOCKET": sock},
			[]string{"server", "up", "@@10.1.1.5"}, exitOK, nil, 1},
		{"another token", nil, []string{"--host", host, "--token-file", wrong, "--ca-file", ca, "server", "up", "@@10.1.1.5"},
			exitFailed, []string{"the token is not dlbd's"}, 0},
		{"a certificate not trusted", nil, []string{"--host", host, "--token-file", good, "cluster", "report"},
			exitUnreachable, []string{"cannot reach dlbd at https://" + host, "TLS", "does dlbd listen on " + host, "--ca-file"}, 0},
		{"no token file", nil, []string{"--host", host, "cluster", "report"}, exitUsage, []string{"--host needs --token-file"}, 0},
		{"a token file that is not there", nil, []string{"--host", host, "--token-file", filepath.Join(dir, "none"), "cluster", "report"},
			exitUsage, []string{"reading the token", "no such file"}, 0},
		{"a token without --host", nil, []string{"--token-file", good, "--socket", sock, "cluster", "report"}, exitUsage, []string{"go with --host"}, 0},
		{"--socket and --host", nil, []string{"--socket", sock, "--host", host, "--token-file", good, "cluster", "report"},
			exitUsage, []string{"give one"}, 0},
		{"a local command", map[string]string{"DLB_HOST": host}, []string{"version"}, exitOK, nil, 0},
		{"a socket path too long", nil, []string{"--socket", "/run/" + strings.Repeat("d", 103), "cluster", "report"}, exitUsage,
			[]string{"dlbctl: --socket: /run/ddd", "is 108 bytes long; a unix socket's path holds at most 107\n"}, 0},
		{"DLB_SOCKET too long", map[string]string{"DLB_SOCKET": "/run/" + strings.Repeat("d", 103)}, []string{"cluster", "report"},
			exitUsage, []string{"dlbctl: DLB_SOCKET: /run/ddd", "is 108 bytes long"}, 0},
		{"an empty --socket", nil, []string{"--socket=", "cluster", "report"}, exitUsage, []string{"dlbctl: --socket: the socket's path is empty"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(eng.sent())
			r := runWith(tt.vars, tt.args...)
			if r.code != tt.code {
				t.Fatalf("exit %d, want %d; stderr %q", r.code, tt.code, r.stderr)
			}
			for _, want := range tt.stderr {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr %q, want it to contain %q", r.stderr, want)
				}
			}
			if got := len(eng.sent()) - before; got != tt.sent {
				t.Errorf("dlbd got %d batches, want %d", got, tt.sent)
			}
		})
	}
}
