package advisors

import (
	"context"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/testutil"
	"github.com/vishvananda/netlink"
)

// TestPrivilegedPing pings loopback through both kinds of ICMP socket, and
// checks the down cases inside a network namespace of its own (so that no
// echo request ever leaves the machine): no route, and a route into a
// veth whose far end never answers.
func TestPrivilegedPing(t *testing.T) {
	testutil.RequirePrivileged(t)
	testutil.InNewNetNS(t)
	// The unprivileged ICMP socket needs our group in ping_group_range; the
	// sysctl is per network namespace, so this changes only the test's.
	if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647"), 0o644); err != nil {
		t.Fatalf("enabling ping sockets in the test namespace: %v", err)
	}

	a, _ := New("ping")
	short := func(addr string) Target {
		return Target{Address: netip.MustParseAddr(addr), ReceiveTimeout: 300 * time.Millisecond, ConnectTimeout: 300 * time.Millisecond}
	}
	up := []struct {
		name  string
		addr  string
		socks []pingSocket
	}{
		{"ipv4 default", "127.0.0.1", pingSockets4},
		{"ipv4 unprivileged socket", "127.0.0.1", pingSockets4[:1]},
		{"ipv4 raw socket", "127.0.0.1", pingSockets4[1:]},
		{"ipv6 default", "::1", pingSockets6},
		{"ipv6 unprivileged socket", "::1", pingSockets6[:1]},
		{"ipv6 raw socket", "::1", pingSockets6[1:]},
		{"ipv4-mapped address", "::ffff:127.0.0.1", nil},
	}
	for _, tc := range up {
		var r Result
		start := time.Now()
		if tc.socks == nil {
			r = a.Probe(context.Background(), short(tc.addr))
		} else {
			r = ping(context.Background(), short(tc.addr), tc.socks)
		}
		el := time.Since(start)
		if !r.Up || r.Load <= 0 || r.Load > el {
			t.Errorf("%s: %+v", tc.name, r)
		}
		t.Logf("%s: %+v in %v", tc.name, r, el)
	}

	// No route at all: the send fails at once, for a reason of this host.
	r, el := probeTimed(t, a, short("198.18.255.254"))
	if r.Up || r.Reason != "network unreachable: no route from this host" || !r.Local {
		t.Errorf("no route: %+v", r)
	}
	t.Logf("no route: %+v in %v", r, el)

	// A route into a veth whose peer has no address: ARP is never
	// answered, so the request is never delivered and nothing replies.
	addSilentRoute(t)
	for _, socks := range [][]pingSocket{pingSockets4[:1], pingSockets4[1:]} {
		tg := short("198.18.255.254")
		start := time.Now()
		r := ping(context.Background(), tg, socks)
		el := time.Since(start)
		if r.Up || r.Reason != "no reply within 300ms" || el > 800*time.Millisecond {
			t.Errorf("%s, silent address: %+v after %v", socks[0].network, r, el)
		}
		t.Logf("%s, silent address: %+v in %v", socks[0].network, r, el)
	}

	// Neither socket can be opened: a clear reason.
	r = ping(context.Background(), short("127.0.0.1"), []pingSocket{{"udp4", "198.51.100.1", false}})
	if r.Up || !strings.HasPrefix(r.Reason, "cannot open ICMP socket: ") {
		t.Errorf("no socket: %+v", r)
	}

	// Cancellation ends a wait at once.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	tg := short("198.18.255.254")
	tg.ReceiveTimeout = 5 * time.Second
	start := time.Now()
	r = a.Probe(ctx, tg)
	if r.Up || r.Reason != "canceled" || time.Since(start) > time.Second {
		t.Errorf("canceled: %+v after %v", r, time.Since(start))
	}
}

// silentAddr is an address that addSilentRoute routes into silence.
var silentAddr = netip.MustParseAddr("198.18.255.254")

// addSilentRoute adds, in the current (test) network namespace, a veth
// pair whose first end holds 198.18.0.1/15 and whose peer has no address:
// packets to silentAddr wait for an ARP reply that never comes.
func addSilentRoute(t *testing.T) {
	t.Helper()
	if _, err := testutil.AddVethPair("dlbadv1a", "dlbadv1b"); err != nil {
		t.Fatal(err)
	}
	link, err := netlink.LinkByName("dlbadv1a")
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := netlink.ParseAddr("198.18.0.1/15")
	if err := netlink.AddrAdd(link, addr); err != nil {
		t.Fatal(err)
	}
}

// TestPrivilegedPingHost pings 127.0.0.1 in the host's namespace, where
// ping_group_range usually excludes root, so the raw-socket fallback runs.
func TestPrivilegedPingHost(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, _ := New("ping")
	r, el := probeTimed(t, a, Target{Address: loopback, ReceiveTimeout: time.Second})
	if !r.Up {
		t.Fatalf("%+v", r)
	}
	t.Logf("%+v in %v", r, el)
}

// TestPrivilegedConnectTimeout checks the connect advisors against an
// address that never answers (in a namespace of the test's own).
func TestPrivilegedConnectTimeout(t *testing.T) {
	testutil.RequirePrivileged(t)
	testutil.InNewNetNS(t)
	addSilentRoute(t)
	for _, name := range []string{"connect", "http", "https", "ssl"} {
		a, _ := New(name)
		tg := Target{Address: silentAddr, Port: 443, ConnectTimeout: 300 * time.Millisecond, ReceiveTimeout: time.Second}
		r, el := probeTimed(t, a, tg)
		if r.Up || r.Reason != "connect timeout after 300ms" || el > 800*time.Millisecond {
			t.Errorf("%s: %+v after %v", name, r, el)
		}
		t.Logf("%s: %+v in %v", name, r, el)
	}
}

// TestPrivilegedPingSourceNotHeld: in a fresh network namespace
// (net.ipv4.ping_group_range leaves every group out, so the unprivileged
// socket is refused) a ping from a source address the host does not hold
// (an HA dispatcher whose interface was just deleted) says so, not the
// unprivileged socket's "permission denied".
func TestPrivilegedPingSourceNotHeld(t *testing.T) {
	testutil.RequirePrivileged(t)
	testutil.InNewNetNS(t)
	if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("1 0"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, _ := New("ping")
	r := a.Probe(context.Background(), Target{Address: loopback, Source: netip.MustParseAddr("198.18.77.1"), ReceiveTimeout: time.Second})
	if want := "cannot open ICMP socket: cannot assign requested address"; r.Up || r.Reason != want || !r.Local {
		t.Errorf("source not held: %+v; want down, local, %q", r, want)
	}
}

func TestTellingOpenError(t *testing.T) {
	tests := []struct {
		name        string
		first, next error
		want        error
	}{
		{"only one", nil, syscall.EACCES, syscall.EACCES},
		{"permission, then a reason", syscall.EACCES, syscall.EADDRNOTAVAIL, syscall.EADDRNOTAVAIL},
		{"permission twice", syscall.EACCES, syscall.EPERM, syscall.EACCES},
		{"a reason first stays", syscall.EADDRNOTAVAIL, syscall.EMFILE, syscall.EADDRNOTAVAIL},
		{"wrapped", &os.SyscallError{Syscall: "socket", Err: syscall.EACCES}, syscall.EMFILE, syscall.EMFILE},
	}
	for _, tc := range tests {
		if got := telling(tc.first, tc.next); got != tc.want {
			t.Errorf("%s: telling(%v, %v) = %v; want %v", tc.name, tc.first, tc.next, got, tc.want)
		}
	}
}
