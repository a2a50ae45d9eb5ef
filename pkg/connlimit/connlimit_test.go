package connlimit

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestNew: connections beyond the limit of one client address, or
// of all, are closed at once and counted; the others are served; a
// closed connection frees its place; the refusal is logged once, not per
// connection.
func TestNew(t *testing.T) {
	for _, c := range []struct {
		name         string
		total, perIP int
		dial         []string // the client address of each connection, in order
		refused      []bool   // whether each is refused
	}{
		{"per client", 10, 2, []string{"127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2"},
			[]bool{false, false, true, false, false}},
		{"in all", 3, 2, []string{"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.1"},
			[]bool{false, false, false, true, true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var logBuf testutil.LogBuffer
			l := New(inner, "test API", c.total, c.perIP, slog.New(slog.NewTextHandler(&logBuf, nil)))
			defer l.Close()
			// The server echoes a line on each connection it accepts.
			var wg sync.WaitGroup
			served := make(chan net.Conn, 16)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					sc, err := l.Accept()
					if err != nil {
						return
					}
					served <- sc
					go func() { _, _ = io.Copy(sc, sc) }()
				}
			}()
			var conns []net.Conn
			defer func() {
				for _, cc := range conns {
					cc.Close()
				}
			}()
			for i, src := range c.dial {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
				cc, err := d.Dial("tcp", inner.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, cc)
				if got := isRefused(t, cc); got != c.refused[i] {
					t.Errorf("connection %d from %s: refused %v, want %v", i, src, got, c.refused[i])
				}
			}
			want := 0
			for _, r := range c.refused {
				if r {
					want++
				}
			}
			if got := l.Refused(); got != uint64(want) {
				t.Errorf("counted %d refused, want %d", got, want)
			}
			if n := strings.Count(logBuf.String(), "test API: connections refused"); n != 1 {
				t.Errorf("%d log lines about refusals, want 1:\n%s", n, logBuf.String())
			}
			// The first connection closes (client and server side):
			// its client address gets a place again.
			conns[0].Close()
			(<-served).Close()
			for deadline := time.Now().Add(2 * time.Second); ; {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(c.dial[0])}, Timeout: 2 * time.Second}
				cc, err := d.Dial("tcp", inner.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, cc)
				if !isRefused(t, cc) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no place freed by a closed connection")
				}
				time.Sleep(20 * time.Millisecond)
			}
			l.Close()
			wg.Wait()
		})
	}
}

// isRefused says whether the server closed cc instead of echoing.
func isRefused(t *testing.T, cc net.Conn) bool {
	t.Helper()
	if _, err := cc.Write([]byte("ping\n")); err != nil {
		return true
	}
	_ = cc.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 5)
	_, err := io.ReadFull(cc, buf)
	switch {
	case err == nil:
		return false
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed), isReset(err):
		return true
	default:
		t.Fatalf("reading the echo: %v", err)
		return false
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}
