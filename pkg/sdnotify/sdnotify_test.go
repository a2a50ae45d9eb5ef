package sdnotify

import (
	"net"
	"path/filepath"
	"strings"
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

func TestSdNotify(t *testing.T) {
	for _, abstract := range []bool{false, true} {
		t.Run(map[bool]string{false: "path", true: "abstract"}[abstract], func(t *testing.T) {
			c := listenNotify(t, abstract)
			if err := Notify("READY=1"); err != nil {
				t.Fatal(err)
			}
			if got := readNotify(t, c); got != "READY=1" {
				t.Errorf("got %q, want READY=1", got)
			}
		})
	}
}

func TestSdNotifyWithoutSocket(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if err := Notify("READY=1"); err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v, want nothing done", err)
	}
	t.Setenv("NOTIFY_SOCKET", "relative/path")
	if err := Notify("READY=1"); err == nil || !strings.Contains(err.Error(), "NOTIFY_SOCKET") {
		t.Errorf("relative NOTIFY_SOCKET: %v, want an error naming it", err)
	}
}
