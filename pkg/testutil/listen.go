package testutil

import (
	"net"
	"testing"
	"time"
)

// AcceptAndClose serves ln until it is closed, closing every connection as
// soon as it is accepted: a TCP port that is open, for probes and dials that
// only need their connect to succeed. ln is closed when the test ends.
func AcceptAndClose(tb testing.TB, ln net.Listener) {
	tb.Helper()
	tb.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
}

// HoldConns opens n TCP connections to addr and leaves them idle, as a
// host that opens connections and sends nothing; release closes them
// (and so does the end of the test).
func HoldConns(tb testing.TB, addr string, n int) (release func()) {
	tb.Helper()
	var conns []net.Conn
	release = func() {
		for _, c := range conns {
			_ = c.Close()
		}
		conns = nil
	}
	tb.Cleanup(release)
	for range n {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			tb.Fatalf("holding connections to %s: %v", addr, err)
		}
		conns = append(conns, c)
	}
	return release
}
