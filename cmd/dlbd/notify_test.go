package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// listenNotify opens a datagram socket standing in for systemd's notify
// socket and points $NOTIFY_SOCKET at it (as a path, or abstract).
func listenNotify(t *testing.T, abstract bool) *net.UnixConn {
	t.Helper()
	name := filepath.Join(t.TempDir(), "notify")
	env := name
	if abstract {
		name = "\x00dlbo-notify-" + strings.ReplaceAll(t.Name(), "/", "-")
		env = "@" + name[1:]
	}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", env)
	return c
}

func readNotify(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("reading the notify socket: %v", err)
	}
	return string(buf[:n])
}

// TestNotifyReadyWaitsForTheAPI: READY=1 is sent only once the check
// passes, never before.
func TestNotifyReadyWaitsForTheAPI(t *testing.T) {
	c := listenNotify(t, false)
	var calls atomic.Int32
	check := func(context.Context) error {
		if calls.Add(1) < 4 {
			return errors.New("not yet")
		}
		return nil
	}
	done := make(chan error, 1)
	go func() {
		done <- notifyReady(context.Background(), check, 10*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	got := readNotify(t, c)
	if !strings.HasPrefix(got, "READY=1\n") {
		t.Errorf("got %q, want READY=1 first", got)
	}
	if n := calls.Load(); n != 4 {
		t.Errorf("READY=1 after %d checks, want after the 4th (the first that passed)", n)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestNotifyReadyGivesUp(t *testing.T) {
	c := listenNotify(t, false)
	check := func(context.Context) error { return errors.New("connection refused") }
	err := notifyReady(context.Background(), check, 300*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("got %v, want the check's error", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, _ := c.Read(make([]byte, 64)); n > 0 {
		t.Error("READY=1 was sent although the API never answered")
	}
}
