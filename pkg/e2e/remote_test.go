package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestPrivilegedE2ERemoteAPI runs dlbd with its admin API also on a TCP
// listener at the NFA (TLS, a token) and dlbctl on the client host with
// --host: with the token and the CA it configures and reports dlbd; with
// another token, or without trusting dlbd's certificate, it changes
// nothing and says why; the unix socket keeps working beside it.
func TestPrivilegedE2ERemoteAPI(t *testing.T) {
	parallel(t)
	l := newLabPrefix(t, "dlbr", "-n", "2", "-c", "1")
	nfa := l.env["LAB_NFA"]
	dir := filepath.Join(l.run, "api")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cert, key := testutil.WriteCert(t, dir, net.ParseIP(nfa))
	token, wrong := testutil.WriteFile(t, dir, "token", "e2e-0123456789abcdef\n"), testutil.WriteFile(t, dir, "wrong", "e2e-0123456789abcdeF\n")
	host := net.JoinHostPort(nfa, "7443")
	l.startDlbd("--api-address", host, "--api-cert", cert, "--api-key", key, "--api-token-file", token)
	l.configure("generic", 10, 10)

	// remote runs dlbctl on the client host against dlbd's TCP listener.
	remote := func(tokenFile, ca string, args ...string) (string, int) {
		t.Helper()
		a := []string{"exec", "c1", filepath.Join(binDir, "dlbctl"), "--host", host, "--token-file", tokenFile}
		if ca != "" {
			a = append(a, "--ca-file", ca)
		}
		out, err := l.script(append(a, args...)...).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("dlbctl on the client: %v", err)
		}
		return string(out), code
	}
	ports := func() []string {
		var ps []api.PortReport
		l.report(&ps, "port", "report")
		var keys []string
		for _, p := range ps {
			keys = append(keys, fmt.Sprintf("%s@%d", p.Cluster, p.Port))
		}
		return keys
	}

	if out, code := remote(token, cert, "port", "add", l.vip()+"@8080"); code != 0 {
		t.Fatalf("port add over --host: exit %d: %s", code, out)
	}
	if ps := ports(); !strings.Contains(strings.Join(ps, " "), "@8080") {
		t.Errorf("after a port add over --host the socket reports ports %v", ps)
	}
	out, code := remote(token, cert, "server", "report", "-o", "json")
	if code != 0 || !strings.Contains(out, l.backend(1)) {
		t.Errorf("server report over --host: exit %d: %s", code, out)
	}
	t.Logf("dlbctl --host %s server report: %d bytes", host, len(out))

	for _, c := range []struct {
		name, token, ca string
		code            int
		want            []string
	}{
		{"another token", wrong, cert, 1, []string{"the token is not dlbd's"}},
		{"dlbd's certificate not trusted", token, "", 3, []string{"cannot reach dlbd at https://" + host, "TLS", "certificate"}},
	} {
		out, code := remote(c.token, c.ca, "port", "add", l.vip()+"@8081")
		t.Logf("%s: exit %d: %s", c.name, code, strings.TrimSpace(out))
		if code != c.code {
			t.Errorf("%s: exit %d, want %d", c.name, code, c.code)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: %q lacks %q", c.name, out, w)
			}
		}
	}
	if ps := ports(); strings.Contains(strings.Join(ps, " "), "@8081") {
		t.Errorf("a refused port add was applied: ports %v", ps)
	}
}
