package client

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestRemote: a remote client speaks TLS to dlbd's TCP listener, trusts
// the certificates of its CA file, and sends its token with every request;
// a certificate it does not trust, or a listener without TLS, is
// unreachable (nothing sent), a wrong token is refused, and bad token or
// CA files are refused before anything is sent.
func TestRemote(t *testing.T) {
	const token = "0123456789abcdef-token"
	var seen []string
	dlbd := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.Path)
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": "the token is not dlbd's", "op": -1})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"interface": "eth0"})
	})
	srv := httptest.NewTLSServer(dlbd)
	defer srv.Close()
	plain := httptest.NewServer(dlbd)
	defer plain.Close()
	addr := strings.TrimPrefix(srv.URL, "https://")

	dir := t.TempDir()
	write := func(name, content string) string { return testutil.WriteFile(t, dir, name, content) }
	ca := testutil.WriteCA(t, dir, srv.Certificate())
	good, wrong := write("token", token+"\n"), write("wrong", "not-the-token-at-all\n")

	cl, err := NewRemote(Remote{Address: addr, CAFile: ca, TokenFile: good}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := cl.Executor(context.Background()); err != nil || r.Interface != "eth0" {
		t.Fatalf("with the token: %+v %v", r, err)
	}

	cl, _ = NewRemote(Remote{Address: addr, CAFile: ca, TokenFile: wrong}, 5*time.Second)
	_, err = cl.Executor(context.Background())
	var re *RefusedError
	if !errors.As(err, &re) || re.Status != 401 || !strings.Contains(err.Error(), "not dlbd's") {
		t.Errorf("with another token: %v", err)
	}

	n := len(seen)
	for name, r := range map[string]Remote{
		"a certificate not trusted": {Address: addr, TokenFile: good},
		"a listener without TLS":    {Address: strings.TrimPrefix(plain.URL, "http://"), CAFile: ca, TokenFile: good},
	} {
		cl, err := NewRemote(r, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Executor(context.Background())
		if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "TLS") {
			t.Errorf("%s: %v, want ErrUnreachable naming TLS", name, err)
		}
	}
	if len(seen) != n {
		t.Errorf("requests reached the API over an untrusted or plain connection: %v", seen[n:])
	}

	// A listener that closes each connection at once (dlbd over its
	// limit of connections): nothing was sent. One that takes the
	// request and closes: maybe applied.
	closing, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closing.Close()
	go func() {
		for {
			c, err := closing.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	hangUp := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close()
		}
	}))
	hangUp.StartTLS()
	defer hangUp.Close()
	for _, c := range []struct {
		name, addr string
		is         error
		want       string
	}{
		{"closed at once", closing.Addr().String(), ErrUnreachable, "the connection failed before the request was sent"},
		{"closed after the request", strings.TrimPrefix(hangUp.URL, "https://"), ErrNoAnswer, "did not answer"},
	} {
		cl, err := NewRemote(Remote{Address: c.addr, CAFile: ca, TokenFile: good}, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Executor(context.Background())
		if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %v with %q", c.name, err, c.is, c.want)
		}
	}

	empty, notPEM := write("empty", "\n"), write("notpem", "hello\n")
	for name, tt := range map[string]struct {
		r   Remote
		err string
	}{
		"no port":                        {Remote{Address: "198.18.0.2", TokenFile: good}, "want HOST:PORT"},
		"no token file":                  {Remote{Address: addr, TokenFile: filepath.Join(dir, "missing")}, "no such file"},
		"an empty token":                 {Remote{Address: addr, TokenFile: empty}, "is empty"},
		"no CA file":                     {Remote{Address: addr, TokenFile: good, CAFile: filepath.Join(dir, "missing")}, "no such file"},
		"a CA file without certificates": {Remote{Address: addr, TokenFile: good, CAFile: notPEM}, "no PEM certificate"},
	} {
		if _, err := NewRemote(tt.r, time.Second); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: %v, want an error with %q", name, err, tt.err)
		}
	}
}

// TestRemoteFiles: token and CA files that are not regular files of a
// bounded size are refused at once, not read without end or waited for.
func TestRemoteFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	good := testutil.WriteFile(t, dir, "token", "0123456789abcdef-token\n")
	huge := testutil.WriteFile(t, dir, "huge", strings.Repeat("x", 5000))
	for _, tc := range []struct {
		name string
		r    Remote
		want string
	}{
		{"a device as token", Remote{TokenFile: "/dev/zero"}, "reading the token: /dev/zero is a character device, not a regular file"},
		{"a named pipe as token", Remote{TokenFile: fifo}, "reading the token: " + fifo + " is a named pipe, not a regular file"},
		{"a token too large", Remote{TokenFile: huge}, "reading the token: " + huge + " is larger than 4095 bytes"},
		{"a device as CA file", Remote{TokenFile: good, CAFile: "/dev/urandom"}, "reading the CA certificates: /dev/urandom is a character device, not a regular file"},
		{"a named pipe as CA file", Remote{TokenFile: good, CAFile: fifo}, "reading the CA certificates: " + fifo + " is a named pipe, not a regular file"},
	} {
		tc.r.Address = "127.0.0.1:7443"
		done := make(chan error, 1)
		go func() { _, err := NewRemote(tc.r, time.Second); done <- err }()
		select {
		case err := <-done:
			if err == nil || err.Error() != tc.want {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: NewRemote still reading after 5 s", tc.name)
		}
	}
}
