package advisors

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/testutil"
)

func TestConnect(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testutil.AcceptAndClose(t, l)
	a, _ := New("connect")
	tests := []struct {
		name   string
		target Target
		up     bool
		reason string
	}{
		{"listening", loTarget(portOf(t, l.Addr())), true, ""},
		{"refused", loTarget(refusedPort(t)), false, "connect refused"},
		{"no port", loTarget(0), false, "no port"},
		{"no address", Target{Port: 80}, false, "no address"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, el := probeTimed(t, a, tc.target)
			if r.Up != tc.up || r.Reason != tc.reason {
				t.Fatalf("got %+v, want up=%v reason %q", r, tc.up, tc.reason)
			}
			if r.Up && (r.Load <= 0 || r.Load > el) {
				t.Errorf("load %v not in (0, %v]", r.Load, el)
			}
			t.Logf("%s: %+v in %v", tc.name, r, el)
		})
	}
}

// TestConnectCanceled checks that a cancelled context ends a probe at once.
func TestConnectCanceled(t *testing.T) {
	port := tcpServer(t, nil, drain)
	for _, name := range []string{"connect", "http", "https", "ssl"} {
		a, _ := New(name)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		start := time.Now()
		r := a.Probe(ctx, loTarget(port))
		if r.Up || time.Since(start) > 100*time.Millisecond || !strings.Contains(r.Reason, "canceled") {
			t.Errorf("%s with cancelled context: %+v after %v", name, r, time.Since(start))
		}
	}
	// A context deadline shorter than the timeouts wins.
	a, _ := New("http")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	r := a.Probe(ctx, loTarget(port))
	if el := time.Since(start); r.Up || el > 800*time.Millisecond {
		t.Errorf("http with a 300ms context against a silent server: %+v after %v", r, el)
	} else {
		t.Logf("http with a 300ms context: %+v after %v", r, el)
	}
}

// TestManyProbesFromOneSource: probes bound to the NFA leave the choice of
// their source port to connect (IP_BIND_ADDRESS_NO_PORT), and 3,000 probes
// in a row from one source all connect.
// (A bind with port 0 walks every socket bound to the address, TIME_WAIT
// ones included; at 100,000 servers that walk took the dispatcher's CPUs.)
func TestManyProbesFromOneSource(t *testing.T) {
	port := tcpServer(t, nil, func(net.Conn, <-chan struct{}) {}) // closes each connection
	target := loTarget(port)
	target.Source = netip.MustParseAddr("127.0.0.1")
	a, _ := New("connect")
	if d := target.dialer("tcp"); d.Control == nil || d.LocalAddr == nil {
		t.Fatalf("a TCP probe from a source: dialer %+v, want it bound without a port", d)
	}
	for i := range 3000 {
		if r := a.Probe(context.Background(), target); !r.Up {
			t.Fatalf("probe %d: %+v", i, r)
		}
	}
}

// TestProbeLate: a probe whose time ran out before it could connect (this
// host ran it late) is not made: Local, not down.
func TestProbeLate(t *testing.T) {
	port := tcpServer(t, nil, drain)
	for _, name := range []string{"connect", "http", "https", "ssl", "smtp"} {
		a, _ := New(name)
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		r := a.Probe(ctx, loTarget(port))
		cancel()
		if r.Up || !r.Local || !strings.Contains(r.Reason, "not made") {
			t.Errorf("%s, its deadline passed before it began: %+v, want a local result", name, r)
		}
	}
}
