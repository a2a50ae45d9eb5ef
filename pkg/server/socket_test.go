package server

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// sockDir returns a short temporary directory: a unix socket's path must
// fit in 108 bytes.
func sockDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dlbh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serveSocket serves a trivial handler on s until the test ends.
func serveSocket(t *testing.T, s *Socket) {
	t.Helper()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})}
	done := make(chan error, 1)
	go func() { done <- s.Serve(srv) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		s.Close()
	})
}

// reachable reports whether something accepts connections at path.
func reachable(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// A socket file deleted under a running server comes back within a
// check period or two, and serves.
func TestSocketRecreated(t *testing.T) {
	path := filepath.Join(sockDir(t), "dlbd.sock")
	s, err := OpenSocket(path, SocketOptions{Check: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	serveSocket(t, s)
	for round := range 3 {
		if !reachable(path) {
			t.Fatalf("round %d: not reachable before the delete", round)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for !reachable(path) {
			if time.Since(start) > 2*time.Second {
				t.Fatalf("round %d: socket not recreated within 2s", round)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("round %d: recreated and serving after %v", round, time.Since(start).Round(time.Millisecond))
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o660 || fi.Mode().Type() != os.ModeSocket {
			t.Errorf("round %d: recreated with mode %v, want a socket of mode 0660", round, fi.Mode())
		}
	}
}

// A socket whose directory cannot be made again (here a file took its
// place; under dlbd.service, /run/dlb deleted on the host) is said once,
// not at every check; once the directory can be made, the socket comes
// back and serves.
func TestSocketThatCannotBeMadeAgain(t *testing.T) {
	dir := filepath.Join(sockDir(t), "run")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "dlbd.sock")
	var logs testutil.LogBuffer
	s, err := OpenSocket(path, SocketOptions{Check: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	serveSocket(t, s)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const said = "cannot be created again"
	for start := time.Now(); !strings.Contains(logs.String(), said); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 2*time.Second {
			t.Fatalf("nothing said within 2 s:\n%s", logs.String())
		}
	}
	time.Sleep(30 * 10 * time.Millisecond) // 30 more checks
	if n := strings.Count(logs.String(), said); n != 1 {
		t.Errorf("said %d times in 30 checks, want once:\n%s", n, logs.String())
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); !reachable(path); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 2*time.Second {
			t.Fatalf("the socket did not come back within 2 s:\n%s", logs.String())
		}
	}
}

// A server never removes a socket file it did not create: neither when
// it closes nor when it checks its file, whose path another server took
// over after the file was deleted.
func TestSocketLeavesOthersAlone(t *testing.T) {
	for _, tt := range []struct {
		name  string
		check time.Duration // of the first server
		wait  time.Duration // before it is closed
	}{
		{"closed before its next check", time.Hour, 0},
		{"checked while the other serves", 20 * time.Millisecond, 200 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(sockDir(t), "dlbd.sock")
			first, err := OpenSocket(path, SocketOptions{Check: tt.check})
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.NotFoundHandler()}
			done := make(chan error, 1)
			go func() { done <- first.Serve(srv) }()
			// The file disappears and another server takes the path over
			// before the first one notices.
			var second *Socket
			for range 20 {
				if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Fatal(err)
				}
				if second, err = OpenSocket(path, SocketOptions{Check: time.Hour}); err == nil {
					break
				}
			}
			if second == nil {
				t.Fatalf("the second server could not take the path: %v", err)
			}
			serveSocket(t, second)
			time.Sleep(tt.wait)
			srv.Close()
			if err := <-done; !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("first Serve: %v", err)
			}
			if err := first.Close(); err != nil {
				t.Errorf("first Close: %v", err)
			}
			if !reachable(path) {
				t.Fatal("the first server removed or replaced the second one's socket")
			}
			id, err := statID(path)
			if err != nil || id != second.id {
				t.Errorf("the file at the path is %+v (%v), want the second server's %+v", id, err, second.id)
			}
		})
	}
}

// Close removes the server's own file.
func TestSocketCloseRemovesOwn(t *testing.T) {
	path := filepath.Join(sockDir(t), "sub", "dlbd.sock")
	s, err := OpenSocket(path, SocketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Close: %v, want the file gone", err)
	}
}

// A live socket is refused; a stale one (its server died) is replaced.
func TestOpenSocketLiveAndStale(t *testing.T) {
	dir := sockDir(t)
	live := filepath.Join(dir, "live.sock")
	l, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := OpenSocket(live, SocketOptions{}); err == nil || err.Error() != "another dlbd is listening on "+live {
		t.Errorf("OpenSocket on a live socket: %v", err)
	}
	stale := filepath.Join(dir, "stale.sock")
	sl, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	sl.SetUnlinkOnClose(false)
	sl.Close()
	s, err := OpenSocket(stale, SocketOptions{})
	if err != nil {
		t.Fatalf("OpenSocket on a stale socket: %v", err)
	}
	s.Close()
}
