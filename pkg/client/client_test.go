package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// listen serves handle on a unix socket and returns the socket's path.
func listen(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dlbclient")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			go handle(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return sock
}

// answer writes an HTTP answer with body after reading the request.
func answer(body string) func(net.Conn) {
	return func(c net.Conn) {
		_, _ = c.Read(make([]byte, 4096))
		_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + body))
		c.Close()
	}
}

// TestErrors: what went wrong is told apart: nothing sent (ErrUnreachable),
// sent and not answered (ErrNoAnswer), an answer too large to read.
func TestErrors(t *testing.T) {
	defer func(n int) { maxAnswer = n }(maxAnswer)
	maxAnswer = 1024
	for _, c := range []struct {
		name   string
		socket func(t *testing.T) string
		is     error
		want   string
	}{
		{name: "no dlbd", socket: func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") },
			is: ErrUnreachable, want: "cannot reach dlbd at "},
		{name: "not answering", socket: func(t *testing.T) string { return listen(t, func(net.Conn) {}) },
			is: ErrNoAnswer, want: "dlbd did not answer within 200ms at "},
		{name: "ended before answering", socket: func(t *testing.T) string {
			return listen(t, func(c net.Conn) { _, _ = c.Read(make([]byte, 4096)); c.Close() })
		}, is: ErrNoAnswer, want: "dlbd did not answer at "},
		{name: "answer cut short", socket: func(t *testing.T) string {
			return listen(t, func(c net.Conn) {
				_, _ = c.Read(make([]byte, 4096))
				_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"cl"))
				c.Close()
			})
		}, is: ErrNoAnswer, want: "dlbd did not answer in full at "},
		{name: "answer too large", socket: func(t *testing.T) string {
			return listen(t, answer(`{"x":"`+strings.Repeat("y", 2000)+`"}`))
		}, want: "larger than 1024 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := NewTimeout(c.socket(t), 200*time.Millisecond)
			var out map[string]any
			err := cl.do(context.Background(), http.MethodGet, "/v1/x", "", nil, &out)
			if err == nil {
				t.Fatalf("no error; answer %v", out)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %q is not %q", err, c.is)
			}
			for _, other := range []error{ErrUnreachable, ErrNoAnswer} {
				if other != c.is && errors.Is(err, other) {
					t.Errorf("error %q is %q too", err, other)
				}
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want it to contain %q", err, c.want)
			}
		})
	}
	// An answer at the limit is read.
	var out map[string]any
	body := `{"x":"` + strings.Repeat("y", 1024-8) + `"}`
	if err := NewTimeout(listen(t, answer(body)), time.Second).do(context.Background(), http.MethodGet, "/v1/x", "", nil, &out); err != nil {
		t.Errorf("an answer of %d bytes: %v", len(body), err)
	}
}

// TestCheckSocketPath checks the limit against the kernel's: a socket of
// MaxSocketPath bytes listens, one a byte longer is refused by both.
func TestCheckSocketPath(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{len(dir) + 2, MaxSocketPath, MaxSocketPath + 1} {
		path := dir + "/" + strings.Repeat("s", n-len(dir)-1)
		checked := CheckSocketPath(path)
		ln, err := net.Listen("unix", path)
		if err == nil {
			ln.Close()
		}
		if (checked == nil) != (err == nil) {
			t.Errorf("%d bytes: CheckSocketPath says %v, the kernel %v", n, checked, err)
		}
	}
	if err := CheckSocketPath(""); err == nil || err.Error() != "the socket's path is empty" {
		t.Errorf("an empty path: %v", err)
	}
}
