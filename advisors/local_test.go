package advisors

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestDownSaysWhoseFault: the errors only this host can cause make a
// Local result, wrapped as the net package wraps them; the server's own
// answers (refused, reset, timed out) do not.
func TestDownSaysWhoseFault(t *testing.T) {
	dialErr := func(syscallName string, errno syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError(syscallName, errno)}
	}
	cases := []struct {
		name  string
		err   error
		local bool
	}{
		{"out of descriptors", dialErr("socket", syscall.EMFILE), true},
		{"system out of descriptors", dialErr("socket", syscall.ENFILE), true},
		{"no buffer space", dialErr("connect", syscall.ENOBUFS), true},
		{"no memory", dialErr("socket", syscall.ENOMEM), true},
		{"own firewall", dialErr("connect", syscall.EPERM), true},
		{"own policy", dialErr("connect", syscall.EACCES), true},
		{"no source address", dialErr("bind", syscall.EADDRNOTAVAIL), true},
		{"classified no source address", &failure{reason: "source address not available", err: dialErr("bind", syscall.EADDRNOTAVAIL)}, true},
		{"classified local", &failure{reason: "x", local: true}, true},
		{"refused", dialErr("connect", syscall.ECONNREFUSED), false},
		{"reset", &failure{reason: "connection reset", err: dialErr("read", syscall.ECONNRESET)}, false},
		{"timeout", &failure{reason: "connect timeout after 2s", err: context.DeadlineExceeded}, false},
		{"plain", errors.New("status 503"), false},
		{"nil", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := down(tc.err)
			if r.Up || r.Local != tc.local {
				t.Errorf("down(%v) = %+v; want down, local %v", tc.err, r, tc.local)
			}
		})
	}
}

// TestPrivilegedUnreachableFromHere: in a namespace of its own, a server
// this host has no route to (its address or route taken away), or only an
// "unreachable" route, is out of the probe's reach for a reason of this
// host (Local) for the TCP, DNS and ping advisors; a server on a connected
// subnet that does not answer ARP is down for its own reason. The probes'
// source is the namespace's address, as a dispatcher's NFA.
func TestPrivilegedUnreachableFromHere(t *testing.T) {
	testutil.RequirePrivileged(t)
	testutil.InNewNetNS(t)
	if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647"), 0o644); err != nil {
		t.Fatalf("enabling ping sockets in the test namespace: %v", err)
	}
	if _, err := testutil.AddVethPair("dlbadv0", "dlbadv1"); err != nil {
		t.Fatal(err)
	}
	// An unanswered ARP request fails the neighbour after 100 ms.
	for k, v := range map[string]string{"mcast_solicit": "1", "ucast_solicit": "1", "app_solicit": "0", "retrans_time_ms": "100"} {
		if err := os.WriteFile("/proc/sys/net/ipv4/neigh/dlbadv0/"+k, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l, err := netlink.LinkByName("dlbadv0")
	if err != nil {
		t.Fatal(err)
	}
	nfa := netip.MustParseAddr("198.18.6.1")
	addr, _ := netlink.ParseAddr(nfa.String() + "/24")
	if err := netlink.AddrAdd(l, addr); err != nil {
		t.Fatal(err)
	}
	_, unreach, _ := net.ParseCIDR("198.18.8.0/24")
	if err := netlink.RouteAdd(&netlink.Route{Dst: unreach, Type: syscall.RTN_UNREACHABLE}); err != nil {
		t.Fatal(err)
	}

	connect, _ := New("connect")
	dns, _ := New("dns")
	probes := []struct {
		name  string
		probe func(Target) Result
	}{
		{"connect", func(tg Target) Result { tg.Port = 80; return connect.Probe(context.Background(), tg) }},
		{"dns", func(tg Target) Result { return dns.Probe(context.Background(), tg) }},
		{"ping", func(tg Target) Result { return ping(context.Background(), tg, pingSockets4[:1]) }},
	}
	cases := []struct {
		server string
		local  bool
		reason string
	}{
		{"198.18.7.7", true, "network unreachable: no route from this host"}, // no route at all
		{"198.18.8.8", true, "host unreachable: no route from this host"},    // an unreachable route
		{"198.18.6.9", false, "host unreachable"},                            // on the subnet, never answers ARP
	}
	// No subtests: they would run on other threads, outside the namespace.
	for _, tc := range cases {
		for _, p := range probes {
			tg := Target{Address: netip.MustParseAddr(tc.server), Source: nfa, ConnectTimeout: 2 * time.Second, ReceiveTimeout: 2 * time.Second}
			r := p.probe(tg)
			what := fmt.Sprintf("%s to %s", p.name, tc.server)
			if r.Up || r.Local != tc.local {
				t.Errorf("%s: %+v; want down, local %v", what, r, tc.local)
			}
			if tc.local && r.Reason != tc.reason {
				t.Errorf("%s: reason %q; want %q", what, r.Reason, tc.reason)
			}
			// The DNS and ping advisors may hear nothing rather than an
			// error from a neighbour that never answers.
			if !tc.local && !strings.Contains(r.Reason, tc.reason) && !strings.HasPrefix(r.Reason, "no reply within") {
				t.Errorf("%s: reason %q; want %q", what, r.Reason, tc.reason)
			}
		}
	}

	// The cluster advisor leaves from the interface that holds its
	// source: with the source on none it cannot probe; a server on the
	// subnet that never answers ARP is down.
	cluster, _ := New("cluster")
	for _, tc := range []struct {
		source, reason string
		local          bool
	}{
		{"198.18.6.7", "cannot probe: the source address 198.18.6.7 is on no interface", true},
		{nfa.String(), "no ARP reply", false},
	} {
		tg := Target{Address: netip.MustParseAddr("198.18.6.9"), Port: 80, Cluster: netip.MustParseAddr("198.18.9.100"),
			Source: netip.MustParseAddr(tc.source), ConnectTimeout: 300 * time.Millisecond}
		r := cluster.Probe(context.Background(), tg)
		if r.Up || r.Local != tc.local || !strings.HasPrefix(r.Reason, tc.reason) {
			t.Errorf("cluster from %s: %+v; want down, local %v, reason %q", tc.source, r, tc.local, tc.reason)
		}
	}
	tg := Target{Address: netip.MustParseAddr("198.18.6.9"), Port: 80, Cluster: netip.MustParseAddr("198.18.9.100")}
	if r := cluster.Probe(context.Background(), tg); r.Up || !r.Local {
		t.Errorf("cluster without a source address: %+v; want down, local", r)
	}
}

// TestPrivilegedCanPing: without CAP_NET_RAW (dropped from this thread's
// effective set) and with net.ipv4.ping_group_range leaving every group
// out, no ICMP socket opens: CanPing says so and a ping probe is this
// host's result (Local), not the server's; with the range open, both work.
func TestPrivilegedCanPing(t *testing.T) {
	testutil.RequirePrivileged(t)
	testutil.InNewNetNS(t) // locks the goroutine to its thread
	setRange := func(r string) {
		t.Helper()
		if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte(r), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setRange("1 0")
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var saved [2]unix.CapUserData
	if err := unix.Capget(&hdr, &saved[0]); err != nil {
		t.Fatal(err)
	}
	dropped := saved
	dropped[unix.CAP_NET_RAW/32].Effective &^= 1 << (unix.CAP_NET_RAW % 32)
	if err := unix.Capset(&hdr, &dropped[0]); err != nil {
		t.Fatal(err)
	}
	err := CanPing(false)
	r := ping(context.Background(), Target{Address: loopback, ReceiveTimeout: time.Second}, pingSockets4)
	if err := unix.Capset(&hdr, &saved[0]); err != nil {
		t.Fatalf("restoring this thread's capabilities: %v", err)
	}
	if err == nil || !strings.HasPrefix(err.Error(), "cannot open ICMP socket: ") {
		t.Errorf("CanPing without permission: %v; want cannot open ICMP socket", err)
	}
	if r.Up || !r.Local {
		t.Errorf("ping without permission: %+v; want down, local", r)
	}
	setRange("0 2147483647")
	if err := CanPing(false); err != nil {
		t.Errorf("CanPing with the range open: %v", err)
	}
}
