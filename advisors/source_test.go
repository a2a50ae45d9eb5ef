package advisors

import (
	"context"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// peerRecorder accepts TCP connections on addr and reports each one's
// source address; it closes them at once (the probes then come back down,
// which does not matter here: where they came from does).
func peerRecorder(tb testing.TB, addr string) (uint16, <-chan netip.Addr) {
	tb.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	peers := make(chan netip.Addr, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			peers <- c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
			c.Close()
		}
	}()
	tb.Cleanup(func() { l.Close() })
	return portOf(tb, l.Addr()), peers
}

// udpPeerRecorder is peerRecorder for UDP datagrams.
func udpPeerRecorder(tb testing.TB, addr string) (uint16, <-chan netip.Addr) {
	tb.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	peers := make(chan netip.Addr, 16)
	go func() {
		buf := make([]byte, 2048)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			peers <- from.(*net.UDPAddr).AddrPort().Addr().Unmap()
		}
	}()
	tb.Cleanup(func() { pc.Close() })
	return portOf(tb, pc.LocalAddr()), peers
}

func nextPeer(tb testing.TB, peers <-chan netip.Addr) netip.Addr {
	tb.Helper()
	select {
	case p := <-peers:
		return p
	case <-time.After(3 * time.Second):
		tb.Fatal("the probe never reached the server")
		return netip.Addr{}
	}
}

// Every advisor that opens a socket opens it from Target.Source: servers
// on 127.0.0.1 see the probes come from 127.0.0.2 and from 127.0.0.3 as
// asked, and from 127.0.0.1 (the kernel's choice) without a source or
// with a source of the other family.
func TestProbesLeaveFromSource(t *testing.T) {
	tcpPort, tcpPeers := peerRecorder(t, "127.0.0.1:0")
	udpPort, udpPeers := udpPeerRecorder(t, "127.0.0.1:0")
	sources := []struct {
		source netip.Addr
		want   netip.Addr
	}{
		{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.2")},
		{netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("127.0.0.3")},
		{netip.MustParseAddr("::ffff:127.0.0.3"), netip.MustParseAddr("127.0.0.3")},
		{netip.Addr{}, loopback},
		{netip.MustParseAddr("::1"), loopback}, // another family: ignored
	}
	for _, name := range []string{"connect", "http", "https", "ssl", "ftp", "smtp", "pop3", "imap", "ldap", "dns"} {
		a, err := New(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sources {
			t.Run(name+" from "+s.source.String(), func(t *testing.T) {
				tg, peers := loTarget(tcpPort), tcpPeers
				if name == "dns" {
					tg, peers = loTarget(udpPort), udpPeers
					tg.ReceiveTimeout = 100 * time.Millisecond // nothing answers
				}
				tg.Source = s.source
				r := a.Probe(context.Background(), tg)
				checkResultShape(t, r)
				if got := nextPeer(t, peers); got != s.want {
					t.Errorf("the server saw the probe from %v, want %v (result %+v)", got, s.want, r)
				}
			})
		}
	}
}

// The exec advisor hands the source address to its program.
func TestExecSource(t *testing.T) {
	sh := requireTool(t, "sh", "dash")
	for _, tt := range []struct {
		source netip.Addr
		script string
	}{
		{netip.MustParseAddr("127.0.0.2"), `[ "$DLB_ADVISOR_SOURCE" = 127.0.0.2 ]`},
		{netip.Addr{}, `[ -z "${DLB_ADVISOR_SOURCE+set}" ]`},
		{netip.MustParseAddr("2001:2::2"), `[ -z "${DLB_ADVISOR_SOURCE+set}" ]`}, // not the server's family
	} {
		tg := loTarget(80)
		tg.Source = tt.source
		r := Exec{Program: sh, Args: []string{"-c", tt.script + " || { env >&2; exit 1; }"}}.Probe(context.Background(), tg)
		if !r.Up {
			t.Errorf("source %v: %+v", tt.source, r)
		}
	}
}

// A source the host does not have is a clear down reason.
func TestSourceNotAvailable(t *testing.T) {
	port, _ := peerRecorder(t, "127.0.0.1:0")
	a, _ := New("connect")
	tg := loTarget(port)
	tg.Source = netip.MustParseAddr("198.18.255.253")
	if r := a.Probe(context.Background(), tg); r.Up || r.Reason != "source address not available" || !r.Local {
		t.Errorf("%+v; want down, local", r)
	}
	// A server that refuses is no local matter.
	tg.Source = netip.Addr{}
	tg.Port = freeLoopbackPort(t)
	if r := a.Probe(context.Background(), tg); r.Up || r.Local {
		t.Errorf("refused: %+v; want down, not local", r)
	}
}

// freeLoopbackPort returns a TCP port of 127.0.0.1 nothing listens on.
func freeLoopbackPort(t *testing.T) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := portOf(t, l.Addr())
	l.Close()
	return port
}

// TestPrivilegedProbesLeaveFromSourceIPv6AndPing: in a network namespace
// of its own, with two IPv6 addresses on lo, TCP probes to ::1 and echo
// requests (both kinds of ICMP socket, both families) leave from the
// source asked for, as a raw socket watching the echo requests sees.
func TestPrivilegedProbesLeaveFromSourceIPv6AndPing(t *testing.T) {
	testutil.RequirePrivileged(t)
	testutil.InNewNetNS(t)
	if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647"), 0o644); err != nil {
		t.Fatalf("enabling ping sockets in the test namespace: %v", err)
	}
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	src6 := []netip.Addr{netip.MustParseAddr("2001:2::2"), netip.MustParseAddr("2001:2::3")}
	for _, a := range src6 {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(128, 128)}, Flags: unix.IFA_F_NODAD}
		if err := netlink.AddrAdd(lo, addr); err != nil {
			t.Fatalf("adding %s to lo: %v", a, err)
		}
	}
	// The kernel installs an IPv6 address's local route a moment after
	// adding the address (from a work queue): until then, replies to it
	// are lost.
	for _, a := range src6 {
		deadline := time.Now().Add(2 * time.Second)
		for {
			routes, err := netlink.RouteGet(a.AsSlice())
			if err == nil && len(routes) > 0 && routes[0].Type == unix.RTN_LOCAL {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no local route to %s after 2s: %v %v", a, routes, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	port, peers := peerRecorder(t, "[::1]:0")
	connect, _ := New("connect")
	for _, src := range src6 {
		tg := Target{Address: netip.MustParseAddr("::1"), Port: port, Source: src, ConnectTimeout: time.Second, ReceiveTimeout: time.Second}
		if r := connect.Probe(context.Background(), tg); !r.Up {
			t.Fatalf("connect over IPv6 from %v: %+v", src, r)
		}
		if got := nextPeer(t, peers); got != src {
			t.Errorf("connect over IPv6 from %v: the server saw %v", src, got)
		}
	}

	type pingCase struct {
		name   string
		dst    netip.Addr
		source netip.Addr
		socks  []pingSocket
	}
	var cases []pingCase
	for _, src := range []string{"127.0.0.2", "127.0.0.3"} {
		cases = append(cases,
			pingCase{"unprivileged", loopback, netip.MustParseAddr(src), pingSockets4[:1]},
			pingCase{"raw", loopback, netip.MustParseAddr(src), pingSockets4[1:]})
	}
	for _, src := range src6 {
		cases = append(cases,
			pingCase{"unprivileged", netip.MustParseAddr("::1"), src, pingSockets6[:1]},
			pingCase{"raw", netip.MustParseAddr("::1"), src, pingSockets6[1:]})
	}
	// No subtests: they would run on other threads, outside the
	// namespace.
	seen4, seen6 := watchEchoRequests(t, false), watchEchoRequests(t, true)
	for _, tc := range cases {
		seen := seen4
		if tc.dst.Is6() {
			seen = seen6
		}
		tg := Target{Address: tc.dst, Source: tc.source, ReceiveTimeout: time.Second}
		if r := ping(context.Background(), tg, tc.socks); !r.Up {
			t.Errorf("ping %s from %v: %+v", tc.name, tc.source, r)
			continue
		}
		if got := nextPeer(t, seen); got != tc.source {
			t.Errorf("ping %s from %v: the echo request came from %v", tc.name, tc.source, got)
		}
	}
}

// watchEchoRequests reports the source of every ICMP (or ICMPv6) echo
// request the namespace receives, through a raw socket.
func watchEchoRequests(tb testing.TB, v6 bool) <-chan netip.Addr {
	tb.Helper()
	network, laddr, proto, echo := "ip4:icmp", "0.0.0.0", 1, icmp.Type(ipv4.ICMPTypeEcho)
	if v6 {
		network, laddr, proto, echo = "ip6:ipv6-icmp", "::", 58, ipv6.ICMPTypeEchoRequest
	}
	c, err := icmp.ListenPacket(network, laddr)
	if err != nil {
		tb.Fatal(err)
	}
	out := make(chan netip.Addr, 16)
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			if m, err := icmp.ParseMessage(proto, buf[:n]); err == nil && m.Type == echo {
				out <- addrOf(from)
			}
		}
	}()
	tb.Cleanup(func() { c.Close() })
	return out
}
