//go:build linux

package datapath

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// Real traffic through the executor: the kernel's own TCP and UDP, in
// network namespaces, with the program attached by Open/Attach and
// configured by Apply. The namespaces and links are all named dlbdp*, and
// removed when the test ends.

// echoServer serves TCP on a listener: each connection reads one command
// line and answers it. "hello" answers "hello <remote address>"; "upload
// N" reads N bytes and answers their SHA-256; "download N" sends N bytes
// of the seeded stream. It records the remote addresses it saw.
type echoServer struct {
	mu    sync.Mutex
	peers map[string]int
}

// stream returns n deterministic bytes.
func stream(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(42, 43))
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

func (s *echoServer) serve(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go s.handle(c)
	}
}

func (s *echoServer) handle(c net.Conn) {
	defer c.Close()
	host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	s.mu.Lock()
	s.peers[host]++
	s.mu.Unlock()
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return
	}
	var n int
	if strings.HasPrefix(line, "hello") {
		fmt.Fprintf(c, "hello %s\n", host)
	} else if _, err := fmt.Sscanf(line, "upload %d", &n); err == nil {
		h := sha256.New()
		if _, err := io.CopyN(h, r, int64(n)); err != nil {
			return
		}
		fmt.Fprintf(c, "%x\n", h.Sum(nil))
	} else if _, err := fmt.Sscanf(line, "download %d", &n); err == nil {
		_, _ = c.Write(stream(n)) // the client sees a short download
	}
}

// udpEcho answers every datagram with "echo <remote address> <payload>".
func udpEcho(pc net.PacketConn) {
	buf := make([]byte, 2048)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		host, _, _ := net.SplitHostPort(from.String())
		_, _ = pc.WriteTo([]byte("echo "+host+" "+string(buf[:n])), from) // the client sees no echo
	}
}

// TestPrivilegedNATRealTraffic: a client, the dispatcher, a router and a
// server on a second subnet, each in a namespace:
//
//	dlbdpc (client 198.18.10.2) -- dlbdpd (dispatcher: 198.18.10.1, VIP .100;
//	198.18.11.1, return address 198.18.11.50) -- dlbdpr (router 198.18.11.2,
//	198.18.12.1) -- dlbdps (server 198.18.12.2)
//
// The VIP's port 80/tcp and 53/udp are NAT-forwarded to the server's 8080
// and 5353 through the router; replies come back to the return address,
// are translated and go to the client through the routing table's next
// hop. 2,000 TCP connections and 200 UDP exchanges must all be answered,
// the server must see only the return address, the client and server
// kernels must count no checksum error, and 10 MB must cross each way
// intact.
func TestPrivilegedNATRealTraffic(t *testing.T) {
	testutil.RequirePrivileged(t)
	cli := testutil.NewNetNS(t, "dlbdpc")
	dsp := testutil.NewNetNS(t, "dlbdpd")
	rtr := testutil.NewNetNS(t, "dlbdpr")
	srv := testutil.NewNetNS(t, "dlbdps")
	testutil.Veth(t, cli, "dlbdpc0", dsp, "dlbdpd0")
	testutil.Veth(t, dsp, "dlbdpd1", rtr, "dlbdpr0")
	testutil.Veth(t, rtr, "dlbdpr1", srv, "dlbdps0")
	cli.Addr(t, "dlbdpc0", "198.18.10.2/24")
	dsp.Addr(t, "dlbdpd0", "198.18.10.1/24")
	dsp.Addr(t, "dlbdpd0", "198.18.10.100/32") // the VIP: the dispatcher answers ARP for it
	dsp.Addr(t, "dlbdpd1", "198.18.11.1/24")
	dsp.Addr(t, "dlbdpd1", "198.18.11.50/24") // the return address
	rtr.Addr(t, "dlbdpr0", "198.18.11.2/24")
	rtr.Addr(t, "dlbdpr1", "198.18.12.1/24")
	srv.Addr(t, "dlbdps0", "198.18.12.2/24")
	srv.Route(t, "0.0.0.0/0", "198.18.12.1")
	dsp.Route(t, "198.18.12.0/24", "198.18.11.2")
	rtr.Sysctl(t, "net/ipv4/ip_forward", "1")
	// Routing-table next hops need forwarding on; accept_local lets the
	// host forward a reply the executor passed for want of a neighbour
	// (its source is the VIP, a local address).
	dsp.Sysctl(t, "net/ipv4/conf/all/forwarding", "1")
	dsp.Sysctl(t, "net/ipv4/conf/all/accept_local", "1")
	// Complete checksums on every packet, verified by every receiver.
	for _, x := range []struct {
		ns *testutil.NetNS
		l  string
	}{{cli, "dlbdpc0"}, {dsp, "dlbdpd0"}, {dsp, "dlbdpd1"}, {rtr, "dlbdpr0"}, {rtr, "dlbdpr1"}, {srv, "dlbdps0"}} {
		x.ns.ChecksumOffloadOff(t, x.l)
	}

	vip := netip.MustParseAddr("198.18.10.100")
	ret := netip.MustParseAddr("198.18.11.50")
	server := netip.MustParseAddr("198.18.12.2")

	// The executor, attached to both of the dispatcher's interfaces.
	pin := newPinDir(t)
	dp, err := Open(Options{PinDir: pin, ConnTableSize: 16384})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := dp.Remove(); err != nil {
			t.Errorf("Remove: %v", err)
		}
	})
	d0, d1 := dsp.Link(t, "dlbdpd0"), dsp.Link(t, "dlbdpd1")
	err = dsp.Do(func() error {
		if _, err := dp.Attach(d0.Attrs().Index, lb.XDPGeneric); err != nil {
			return err
		}
		_, err := dp.attachInterface(d1.Attrs().Index, lb.XDPGeneric)
		return err
	})
	if err != nil {
		t.Fatalf("attaching: %v", err)
	}
	if n := len(dp.attachments()); n != 2 {
		t.Fatalf("%d attachments, want 2", n)
	}
	m := dp.Info().MaxTableSize
	backend := func(id, svc uint32, port uint16) lb.DataplaneBackend {
		return lb.DataplaneBackend{ID: id, Service: svc, Address: server, MAC: rtr.Link(t, "dlbdpr0").Attrs().HardwareAddr,
			SrcMAC: d1.Attrs().HardwareAddr, Ifindex: d1.Attrs().Index, AcceptNew: true, Port: port, ReturnAddress: ret}
	}
	// Apply in the dispatcher's namespace: tx_ports resolves interface
	// indexes in the caller's.
	state := lb.Dataplane{
		NFA:         netip.MustParseAddr("198.18.10.1"),
		ReturnPools: []lb.DataplaneReturnPool{{Address: ret, PortMin: 20000, PortMax: 29999}},
		Services: []lb.DataplaneService{
			{ID: 1, Cluster: vip, Port: 80, Protocol: lb.TCP, Method: lb.DataplaneNAT, StaleTimeout: 300, FinTimeout: 60, Table: fill(m, func(uint32) uint32 { return 1 })},
			{ID: 2, Cluster: vip, Port: 53, Protocol: lb.UDP, Method: lb.DataplaneNAT, StaleTimeout: 30, FinTimeout: 60, Table: fill(m, func(uint32) uint32 { return 2 })},
		},
		Backends: []lb.DataplaneBackend{backend(1, 1, 8080), backend(2, 2, 5353)},
	}
	if err := dsp.Do(func() error { return dp.Apply(state) }); err != nil {
		t.Fatalf("Apply: %v", err)
	}

	// The server.
	es := &echoServer{peers: map[string]int{}}
	var l net.Listener
	var pc net.PacketConn
	err = srv.Do(func() error {
		var err error
		if l, err = net.Listen("tcp4", "0.0.0.0:8080"); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp4", "0.0.0.0:5353")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	defer pc.Close()
	go es.serve(l)
	go udpEcho(pc)

	csum := func() (uint64, uint64) {
		return cli.SNMP(t, "Tcp", "InCsumErrors") + srv.SNMP(t, "Tcp", "InCsumErrors"),
			cli.SNMP(t, "Udp", "InCsumErrors") + srv.SNMP(t, "Udp", "InCsumErrors")
	}
	tcp0, udp0 := csum()
	started := time.Now()

	// 2,000 connections, 200 datagrams, and 10 MB each way, from the client.
	const conns, datagrams, size = 2000, 200, 10 << 20
	var answered, udpAnswered int
	var upSum, downSum string
	err = cli.Do(func() error {
		d := net.Dialer{Timeout: 5 * time.Second}
		for i := 0; i < conns; i++ {
			c, err := d.Dial("tcp4", "198.18.10.100:80")
			if err != nil {
				return fmt.Errorf("connection %d: %w", i, err)
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "hello\n")
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err != nil {
				return fmt.Errorf("connection %d: %w", i, err)
			}
			if line != "hello "+ret.String()+"\n" {
				return fmt.Errorf("connection %d: answer %q: the server did not see the return address", i, line)
			}
			answered++
		}
		u, err := net.Dial("udp4", "198.18.10.100:53")
		if err != nil {
			return err
		}
		defer u.Close()
		buf := make([]byte, 2048)
		for i := 0; i < datagrams; i++ {
			msg := fmt.Sprintf("datagram %d", i)
			_ = u.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := u.Write([]byte(msg)); err != nil {
				return err
			}
			n, err := u.Read(buf)
			if err != nil {
				return fmt.Errorf("datagram %d: %w", i, err)
			}
			if string(buf[:n]) != "echo "+ret.String()+" "+msg {
				return fmt.Errorf("datagram %d: answer %q", i, buf[:n])
			}
			udpAnswered++
		}

		// The dispatcher forgets the client's MAC: the next replies find no
		// neighbour, pass translated to the host, which forwards them and
		// resolves the neighbour again.
		if err := dsp.Netlink().NeighDel(&netlink.Neigh{LinkIndex: d0.Attrs().Index, IP: net.ParseIP("198.18.10.2")}); err != nil {
			return fmt.Errorf("forgetting the client's MAC: %w", err)
		}
		for i := 0; i < 20; i++ {
			c, err := d.Dial("tcp4", "198.18.10.100:80")
			if err != nil {
				return fmt.Errorf("connection %d without a neighbour: %w", i, err)
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "hello\n")
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err != nil || line != "hello "+ret.String()+"\n" {
				return fmt.Errorf("connection %d without a neighbour: %q %v", i, line, err)
			}
			answered++
		}

		// 10 MB up: the server answers the SHA-256 of what it received.
		data := stream(size)
		want := sha256.Sum256(data)
		c, err := d.Dial("tcp4", "198.18.10.100:80")
		if err != nil {
			return err
		}
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
		fmt.Fprintf(c, "upload %d\n", size)
		if _, err := c.Write(data); err != nil {
			return err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil {
			return fmt.Errorf("upload: %w", err)
		}
		upSum = strings.TrimSpace(line)
		if upSum != hex.EncodeToString(want[:]) {
			return fmt.Errorf("upload: the server received SHA-256 %s, want %x", upSum, want)
		}

		// 10 MB down.
		c, err = d.Dial("tcp4", "198.18.10.100:80")
		if err != nil {
			return err
		}
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
		fmt.Fprintf(c, "download %d\n", size)
		h := sha256.New()
		n, err := io.Copy(h, c)
		c.Close()
		if err != nil {
			return fmt.Errorf("download: %w", err)
		}
		downSum = hex.EncodeToString(h.Sum(nil))
		if n != size || downSum != hex.EncodeToString(want[:]) {
			return fmt.Errorf("download: %d bytes with SHA-256 %s, want %d with %x", n, downSum, size, want)
		}
		return nil
	})
	elapsed := time.Since(started)
	if err != nil {
		t.Error(err)
		for _, ns := range []*testutil.NetNS{cli, dsp, rtr, srv} {
			t.Logf("%s: ip in %d forw %d indiscards %d inaddrerr %d noroutes %d tcp in %d out %d csumerr %d attemptfails %d", ns.Name,
				ns.SNMP(t, "Ip", "InReceives"), ns.SNMP(t, "Ip", "ForwDatagrams"), ns.SNMP(t, "Ip", "InDiscards"), ns.SNMP(t, "Ip", "InAddrErrors"), ns.SNMP(t, "Ip", "OutNoRoutes"),
				ns.SNMP(t, "Tcp", "InSegs"), ns.SNMP(t, "Tcp", "OutSegs"), ns.SNMP(t, "Tcp", "InCsumErrors"), ns.SNMP(t, "Tcp", "AttemptFails"))
		}
	}
	tcp1, udp1 := csum()

	st, err := dp.Stats()
	if err != nil {
		t.Fatal(err)
	}
	res, err := dp.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]uint64{}
	for _, r := range st.Reasons {
		if r.Packets != 0 {
			reasons[r.Reason] = r.Packets
		}
	}
	es.mu.Lock()
	peers := fmt.Sprint(es.peers)
	es.mu.Unlock()
	t.Logf("NAT real traffic in %v: %d/%d connections answered (%d of them after the client's neighbour entry was deleted), %d/%d datagrams answered",
		elapsed.Round(time.Millisecond), answered, conns+20, 20, udpAnswered, datagrams)
	t.Logf("server saw sources %s", peers)
	t.Logf("checksum errors (client+server): TcpInCsumErrors +%d, UdpInCsumErrors +%d", tcp1-tcp0, udp1-udp0)
	t.Logf("10 MB up: SHA-256 %s; 10 MB down: SHA-256 %s", upSum, downSum)
	t.Logf("executor reasons %v", reasons)
	events := map[string]uint64{}
	for name, n := range st.Events {
		if n != 0 {
			events[name] = n
		}
	}
	t.Logf("executor events %v; NAT connections %d, pool %+v", events, res.Entries, res.ReturnPools[ret])
	if reasons["pass_no_neigh"] == 0 {
		t.Errorf("no reply passed for want of a neighbour")
	}
	if answered != conns+20 || udpAnswered != datagrams {
		t.Errorf("answered %d of %d connections and %d of %d datagrams", answered, conns, udpAnswered, datagrams)
	}
	if tcp1 != tcp0 || udp1 != udp0 {
		t.Errorf("checksum errors: TCP +%d, UDP +%d", tcp1-tcp0, udp1-udp0)
	}
	es.mu.Lock()
	for peer := range es.peers {
		if peer != ret.String() {
			t.Errorf("the server saw source %s, not the return address", peer)
		}
	}
	es.mu.Unlock()
	if st.Events["halfopen_promoted"] < conns {
		t.Errorf("only %d handshakes promoted", st.Events["halfopen_promoted"])
	}
}

// TestPrivilegedIPv6MACRealTraffic: IPv6 MAC forwarding with real TCP. A
// client, the dispatcher and two servers share one segment (a bridge in
// a namespace of its own); the servers hold the VIP on lo and answer the
// client directly.
func TestPrivilegedIPv6MACRealTraffic(t *testing.T) {
	testutil.RequirePrivileged(t)
	lan := testutil.NewNetNS(t, "dlbdp6l")
	cli := testutil.NewNetNS(t, "dlbdp6c")
	dsp := testutil.NewNetNS(t, "dlbdp6d")
	s1 := testutil.NewNetNS(t, "dlbdp6s1")
	s2 := testutil.NewNetNS(t, "dlbdp6s2")
	lan.Run(t, "ip", "link", "add", "dlbdpbr", "type", "bridge")
	lan.Run(t, "ip", "link", "set", "dlbdpbr", "up")
	for _, n := range []struct {
		ns       *testutil.NetNS
		in, port string
		addr     string
	}{
		{cli, "dlbdp6c0", "dlbdp6lc", "2001:2:6::10/64"},
		{dsp, "dlbdp6d0", "dlbdp6ld", "2001:2:6::1/64"},
		{s1, "dlbdp6s10", "dlbdp6l1", "2001:2:6::21/64"},
		{s2, "dlbdp6s20", "dlbdp6l2", "2001:2:6::22/64"},
	} {
		testutil.Veth(t, n.ns, n.in, lan, n.port)
		lan.Run(t, "ip", "link", "set", n.port, "master", "dlbdpbr")
		n.ns.Addr(t, n.in, n.addr)
		n.ns.ChecksumOffloadOff(t, n.in)
		lan.ChecksumOffloadOff(t, n.port)
	}
	vip := netip.MustParseAddr("2001:2:6::100")
	dsp.Addr(t, "dlbdp6d0", "2001:2:6::100/128") // the dispatcher answers ND for the VIP
	for _, s := range []*testutil.NetNS{s1, s2} {
		s.Addr(t, "lo", "2001:2:6::100/128") // loopback alias: the servers accept it, never answer ND for it
	}

	pin := newPinDir(t)
	dp, err := Open(Options{PinDir: pin, ConnTableSize: 16384})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := dp.Remove(); err != nil {
			t.Errorf("Remove: %v", err)
		}
	})
	d0 := dsp.Link(t, "dlbdp6d0")
	if err := dsp.Do(func() error { _, err := dp.Attach(d0.Attrs().Index, lb.XDPGeneric); return err }); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	be := func(id uint32, s *testutil.NetNS, ifname, addr string) lb.DataplaneBackend {
		return lb.DataplaneBackend{ID: id, Service: 1, Address: netip.MustParseAddr(addr), MAC: s.Link(t, ifname).Attrs().HardwareAddr,
			SrcMAC: d0.Attrs().HardwareAddr, Ifindex: d0.Attrs().Index, AcceptNew: true}
	}
	m := dp.Info().MaxTableSize
	state := lb.Dataplane{
		NFA6: netip.MustParseAddr("2001:2:6::1"),
		Services: []lb.DataplaneService{{ID: 1, Cluster: vip, Port: 80, Protocol: lb.TCP, StaleTimeout: 300, FinTimeout: 60,
			Table: fill(m, func(s uint32) uint32 { return 1 + s%2 })}},
		Backends: []lb.DataplaneBackend{be(1, s1, "dlbdp6s10", "2001:2:6::21"), be(2, s2, "dlbdp6s20", "2001:2:6::22")},
	}
	if err := dsp.Do(func() error { return dp.Apply(state) }); err != nil {
		t.Fatalf("Apply: %v", err)
	}

	servers := map[string]*echoServer{}
	for name, s := range map[string]*testutil.NetNS{"s1": s1, "s2": s2} {
		es := &echoServer{peers: map[string]int{}}
		servers[name] = es
		var l net.Listener
		if err := s.Do(func() error {
			var err error
			l, err = net.Listen("tcp6", "[::]:80")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go es.serve(l)
	}

	tcp0 := cli.SNMP(t, "Tcp", "InCsumErrors") + s1.SNMP(t, "Tcp", "InCsumErrors") + s2.SNMP(t, "Tcp", "InCsumErrors")
	const conns = 1000
	answered := 0
	var sum string
	err = cli.Do(func() error {
		d := net.Dialer{Timeout: 5 * time.Second}
		for i := 0; i < conns; i++ {
			c, err := d.Dial("tcp6", "[2001:2:6::100]:80")
			if err != nil {
				return fmt.Errorf("connection %d: %w", i, err)
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "hello\n")
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err != nil {
				return fmt.Errorf("connection %d: %w", i, err)
			}
			if line != "hello 2001:2:6::10\n" {
				return fmt.Errorf("connection %d: answer %q", i, line)
			}
			answered++
		}
		// 10 MB up through one connection.
		data := stream(10 << 20)
		want := sha256.Sum256(data)
		c, err := d.Dial("tcp6", "[2001:2:6::100]:80")
		if err != nil {
			return err
		}
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
		fmt.Fprintf(c, "upload %d\n", len(data))
		if _, err := c.Write(data); err != nil {
			return err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil {
			return err
		}
		if sum = strings.TrimSpace(line); sum != hex.EncodeToString(want[:]) {
			return fmt.Errorf("upload: SHA-256 %s, want %x", sum, want)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	tcp1 := cli.SNMP(t, "Tcp", "InCsumErrors") + s1.SNMP(t, "Tcp", "InCsumErrors") + s2.SNMP(t, "Tcp", "InCsumErrors")
	st, err := dp.Stats()
	if err != nil {
		t.Fatal(err)
	}
	var n1, n2 int
	servers["s1"].mu.Lock()
	n1 = servers["s1"].peers["2001:2:6::10"]
	servers["s1"].mu.Unlock()
	servers["s2"].mu.Lock()
	n2 = servers["s2"].peers["2001:2:6::10"]
	servers["s2"].mu.Unlock()
	t.Logf("IPv6 MAC real traffic: %d/%d connections answered; server 1 took %d, server 2 %d; TcpInCsumErrors +%d; 10 MB up SHA-256 %s",
		answered, conns, n1, n2, tcp1-tcp0, sum)
	t.Logf("executor: new connections %d on backend 1, %d on backend 2", st.Backend(1).NewConns, st.Backend(2).NewConns)
	if answered != conns {
		t.Errorf("answered %d of %d", answered, conns)
	}
	if n1 == 0 || n2 == 0 {
		t.Errorf("connections not spread: %d and %d", n1, n2)
	}
	if tcp1 != tcp0 {
		t.Errorf("TcpInCsumErrors +%d", tcp1-tcp0)
	}
}
