package testutil

import (
	"net"
	"testing"
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
