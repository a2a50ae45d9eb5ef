package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
)

// csum is a namespace's TCP and UDP checksum-error counters.
type csum struct{ tcp, udp, udp6 uint64 }

// csumErrors reads TcpInCsumErrors, UdpInCsumErrors and Udp6InCsumErrors
// in a lab namespace (TCP over IPv6 counts under Tcp).
func (l *lab) csumErrors(role string) csum {
	l.t.Helper()
	out, err := l.inNS(role, "cat", "/proc/net/snmp", "/proc/net/snmp6")
	if err != nil {
		l.t.Fatalf("reading %s's counters: %v\n%s", role, err, out)
	}
	var c csum
	var header []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "Udp6InCsumErrors" {
			c.udp6, _ = strconv.ParseUint(f[1], 10, 64)
			continue
		}
		if len(f) < 2 || (f[0] != "Tcp:" && f[0] != "Udp:") {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			header = f // the names line precedes the values line
			continue
		}
		for i := 1; i < len(f) && i < len(header); i++ {
			if header[0] == f[0] && header[i] == "InCsumErrors" {
				v, _ := strconv.ParseUint(f[i], 10, 64)
				if f[0] == "Tcp:" {
					c.tcp = v
				} else {
					c.udp = v
				}
			}
		}
	}
	return c
}

// csumSnapshot reads the counters of the given roles.
func (l *lab) csumSnapshot(roles ...string) map[string]csum {
	out := map[string]csum{}
	for _, r := range roles {
		out[r] = l.csumErrors(r)
	}
	return out
}

// checkCsumDeltas fails unless no role's checksum-error counters moved
// since before.
func (l *lab) checkCsumDeltas(before map[string]csum) {
	l.t.Helper()
	for role, b := range before {
		a := l.csumErrors(role)
		l.t.Logf("%s: TcpInCsumErrors +%d, UdpInCsumErrors +%d, Udp6InCsumErrors +%d", role, a.tcp-b.tcp, a.udp-b.udp, a.udp6-b.udp6)
		if a != b {
			l.t.Errorf("%s saw checksum errors: %+v -> %+v", role, b, a)
		}
	}
}

// startNAT starts the executor and balances VIP:80 (TCP) and VIP:53 (UDP)
// by NAT over the lab's NAT servers behind its router, with the lab's
// return address; v6 selects the IPv6 addresses.
func (l *lab) startNAT(v6 bool, servers int) (vip string) {
	l.t.Helper()
	vip, ret, router, addrKey := l.vip(), l.env["LAB_RETURN_ADDR"], l.env["LAB_ROUTER_ADDR"], "LAB_N%d_ADDR"
	l.mustCtl("executor", "start", "--interface", l.env["LAB_IF"], "--xdp-mode", "generic")
	l.mustCtl("executor", "set", "nfa", l.env["LAB_NFA"])
	if v6 {
		vip, ret, router, addrKey = l.env["LAB_VIP6"], l.env["LAB_RETURN_ADDR6"], l.env["LAB_ROUTER_ADDR6"], "LAB_N%d_ADDR6"
		l.mustCtl("executor", "set", "nfa", l.env["LAB_NFA6"])
	}
	l.mustCtl("cluster", "add", vip, "--configure")
	l.mustCtl("port", "add", vip+"@80", "--method", "nat")
	l.mustCtl("port", "add", vip+"@53", "--method", "nat", "--protocol", "udp", "--staletimeout", "30")
	for i := 1; i <= servers; i++ {
		for _, port := range []string{"80", "53"} {
			l.mustCtl("server", "add", vip+"@"+port+"@"+l.env[fmt.Sprintf(addrKey, i)], "--returnaddress", ret, "--router", router)
		}
	}
	l.waitServersUp()
	return vip
}

// TestPrivilegedE2ENATClientMoves: a NAT client keeps its established
// connections when the way to it changes. The executor caches the next hop
// each NAT connection's replies take (from the routing table: no client
// gateway here), and dlbd has it looked up again
//
//   - when the client's MAC changes (a NIC replaced, a VM moved; the same
//     as a router replaced, or a VRRP backup taking over with a MAC of its
//     own): once the kernel hears of the new one (here from the client's
//     ARP request for the cluster address), the hops cached to the old MAC
//     are cleared;
//   - when the route to the client moves to another router (here the
//     dispatcher's route to client 1 moves from client 2, which forwards
//     for it, to the lab's router; then client 2 stops forwarding, as a
//     failed router would): every cached hop is looked up again;
//   - when a router's MAC changes silently (client 2 routing again, then
//     given a new MAC without a gratuitous ARP): dlbd verifies the MACs
//     of the neighbours NAT replies go to, as it does its next hops', and
//     the new one has the hops cached to the old one cleared.
//
// Before each, the replies went on to the old MAC or router, which no
// longer delivers them.
func TestPrivilegedE2ENATClientMoves(t *testing.T) {
	parallel(t)
	l := newLabArgs(t, "-n", "1", "-r", "2", "-c", "2")
	l.startDlbd()
	l.startNAT(false, 2)
	const conns = 40
	client, ifname := l.env["LAB_C1_ADDR"], l.env["LAB_IF"]

	t.Run("MACChanged", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		held := l.holdConnections(ctx, conns, 3*time.Second)
		time.Sleep(time.Second) // replies on every connection, their hops cached
		const newMAC = "02:dd:00:00:00:99"
		l.mustNSFor(t, "c1", "ip", "link", "set", "dev", ifname, "address", newMAC)
		// The client asks for the cluster address's MAC again, and the
		// dispatcher's kernel learns the new one from the request.
		l.mustNSFor(t, "c1", "ip", "neigh", "flush", "dev", ifname)
		took := waitFor(t, 5*time.Second, "the dispatcher to learn the client's new MAC", func() bool {
			out, _ := l.inNS("d", "ip", "neigh", "show", client, "dev", ifname)
			return strings.Contains(out, newMAC)
		})
		t.Logf("the dispatcher learnt the client's new MAC %v after the change", took.Round(time.Millisecond))
		checkHeld(t, held, conns)
	})

	t.Run("RouteMoved", func(t *testing.T) {
		router1, router2 := l.env["LAB_C2_ADDR"], l.env["LAB_ROUTER_ADDR"]
		// Client 2 forwards for client 1; neither router tells the
		// dispatcher of the shorter way (an ICMP redirect).
		for _, role := range []string{"c2", "r"} {
			l.mustNSFor(t, role, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf."+ifname+".send_redirects=0")
		}
		l.mustNSFor(t, "d", "ip", "route", "add", client+"/32", "via", router1, "dev", ifname)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		held := l.holdConnections(ctx, conns, 3*time.Second)
		time.Sleep(time.Second) // replies on every connection, their hops cached
		l.mustNSFor(t, "d", "ip", "route", "replace", client+"/32", "via", router2, "dev", ifname)
		l.mustNSFor(t, "c2", "sysctl", "-qw", "net.ipv4.ip_forward=0")
		checkHeld(t, held, conns)
	})

	t.Run("RouterMACChangedSilently", func(t *testing.T) {
		// Client 2 routes for client 1 again, then takes a new MAC
		// without telling anyone (no gratuitous ARP: arp_notify is off),
		// and no traffic of the dispatcher's own goes through it.
		l.mustNSFor(t, "c2", "sysctl", "-qw", "net.ipv4.ip_forward=1")
		l.mustNSFor(t, "d", "ip", "route", "replace", client+"/32", "via", l.env["LAB_C2_ADDR"], "dev", ifname)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		held := l.holdConnections(ctx, conns, 3*time.Second)
		time.Sleep(time.Second) // replies on every connection, their hops cached
		l.mustNSFor(t, "c2", "ip", "link", "set", "dev", ifname, "address", "02:dd:00:00:00:98")
		checkHeld(t, held, conns)
	})

	if r := l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "200", "-c", "10"); r.OK != 200 {
		t.Errorf("new connections after the changes: %d of 200 answered: %v", r.OK, r.Errors)
	}
}

// TestPrivilegedE2EExecutorMoved: the executor moved to another interface
// of the dispatcher while it serves (a second NIC on the same segment, ARP
// answered only on the interface holding the address, as such a host
// needs). executor start --interface attaches it there, its tables kept;
// the cluster and return addresses and the guard go with it, and are
// announced from it: keep-alive connections, MAC and NAT, all go on. An
// interface that does not exist is refused with nothing changed. The
// second NIC then dies (deleted) and a configuration file moves the
// detached executor back, its tables kept too. (Stopped and started
// again, as before, all 80 connections broke; after the NIC died, the 40
// NAT ones.)
func TestPrivilegedE2EExecutorMoved(t *testing.T) {
	parallel(t)
	l := newLabArgs(t, "-n", "2", "-r", "2", "-c", "1")
	ifname, vip := l.env["LAB_IF"], l.vip()
	const second = "dlbeth1"
	l.mustNS("d", "ip", "link", "add", second, "address", "02:d1:b0:00:00:f2", "type", "veth",
		"peer", "name", l.env["LAB_PREFIX"]+"-dm", "netns", l.env["LAB_SWITCH_NS"])
	l.mustNS("sw", "ip", "link", "set", l.env["LAB_PREFIX"]+"-dm", "master", l.env["LAB_BRIDGE"], "up")
	l.mustNS("d", "ip", "link", "set", second, "up")
	l.mustNS("d", "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf."+ifname+".arp_ignore=1",
		"net.ipv4.conf."+second+".arp_ignore=1")
	l.startDlbd()
	l.configure("generic", 10, 10)
	l.mustCtl("port", "add", vip+"@81", "--method", "nat")
	for i := 1; i <= 2; i++ {
		l.mustCtl("server", "add", vip+"@81@"+l.env[fmt.Sprintf("LAB_N%d_ADDR", i)], "--mapport", "80",
			"--returnaddress", l.env["LAB_RETURN_ADDR"], "--router", l.env["LAB_ROUTER_ADDR"])
	}
	l.waitServersUp()

	// on reports which of the two interfaces hold the cluster address,
	// the return address and the guard.
	on := func(dev string) (vipOn, retOn, guard bool) {
		out, _ := l.inNS("d", "ip", "-o", "addr", "show", "dev", dev)
		tc, _ := l.inNS("d", "tc", "filter", "show", "dev", dev, "ingress")
		return strings.Contains(out, " "+vip+"/32 "), strings.Contains(out, " "+l.env["LAB_RETURN_ADDR"]+"/32 "), strings.Contains(tc, "dlb_guard")
	}
	check := func(when, want, other string) {
		t.Helper()
		ex := l.executor()
		link, _ := l.inNS("d", "ip", "-o", "link", "show", "dev", want)
		idx, _, _ := strings.Cut(link, ":")
		if !ex.Attached || ex.Interface != want || strconv.Itoa(ex.Ifindex) != idx {
			t.Errorf("%s: executor attached %v to %s (ifindex %d), want %s (ifindex %q)", when, ex.Attached, ex.Interface, ex.Ifindex, want, idx)
		}
		if v, r, g := on(want); !v || !r || !g {
			t.Errorf("%s: on %s: cluster address %v, return address %v, guard %v; want all three", when, want, v, r, g)
		}
		if v, r, _ := on(other); v || r {
			t.Errorf("%s: left on %s: cluster address %v, return address %v", when, other, v, r)
		}
	}
	check("before", ifname, second)
	if _, _, g := on(second); g {
		t.Errorf("a guard on %s before the move", second)
	}
	// guardLeaves checks that the guard stays on the interface the
	// executor left while the segment may still send there (what the
	// host would reset is dropped, and sent again to the new one), and
	// leaves it some seconds later.
	guardLeaves := func(dev string) {
		t.Helper()
		if _, _, g := on(dev); !g {
			t.Errorf("the guard left %s with the executor: what the segment still sends there is reset", dev)
		}
		poll(t, 10*time.Second, "the guard to leave "+dev, func() bool { _, _, g := on(dev); return !g })
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const conns = 40
	held := map[string]<-chan loadResult{}
	for _, port := range []string{"80", "81"} {
		ch := make(chan loadResult, 1)
		held[port] = ch
		go func() {
			r, _ := l.load(ctx, "-keepalive", "-url", "http://"+vip+":"+port+"/", "-duration", "16s", "-c", strconv.Itoa(conns),
				"-interval", "100ms", "-timeout", "10s")
			ch <- r
		}()
	}
	time.Sleep(2 * time.Second)

	out := l.mustCtl("executor", "start", "--interface", second)
	t.Logf("executor start --interface %s: %q", second, strings.TrimSpace(out))
	if !strings.Contains(out, "moved from "+ifname+" to "+second) || !strings.Contains(out, "tables kept") {
		t.Errorf("executor start --interface %s does not say the executor moved, its tables kept: %q", second, out)
	}
	check("moved with executor start", second, ifname)
	// Clients learn the cluster address's new MAC from the announcement.
	poll(t, 2*time.Second, "the client's neighbour entry for the cluster address to name "+second+"'s MAC", func() bool {
		out, _ := l.inNS("c1", "ip", "neigh", "show", vip)
		return strings.Contains(out, "02:d1:b0:00:00:f2")
	})
	guardLeaves(ifname)

	if _, stderr, code := l.ctl("executor", "start", "--interface", "dlbnone0"); code == 0 || !strings.Contains(stderr, "dlbnone0") {
		t.Errorf("a move to an interface that does not exist: exit %d, %q; want refused naming it", code, stderr)
	}
	check("after the refused move", second, ifname)

	cfg := l.mustCtl("get", "-o", "yaml")
	if !strings.Contains(cfg, "interface: "+second) {
		t.Fatalf("the configuration does not name %s:\n%s", second, cfg)
	}
	// The second NIC dies (deleted): the executor is detached. Moved
	// back by a file, it keeps its tables (stopped and started there, it
	// lost them: every NAT connection broke).
	l.mustNS("d", "ip", "link", "del", second)
	poll(t, 5*time.Second, "the executor to be detached from "+second, func() bool { return l.executor().Detached != "" })
	file := l.writeLabFile("back.yaml", strings.Replace(cfg, "interface: "+second, "interface: "+ifname, 1))
	out = l.mustCtl("apply", "-f", file)
	t.Logf("dlbctl apply -f back.yaml: %q", strings.TrimSpace(out))
	if !strings.Contains(out, "was attached to "+ifname) || !strings.Contains(out, "tables kept") {
		t.Errorf("dlbctl apply moving the detached executor back to %s does not say its tables were kept: %q", ifname, out)
	}
	check("moved back with dlbctl apply, "+second+" gone", ifname, second)
	poll(t, 2*time.Second, "the client's neighbour entry for the cluster address to name "+ifname+"'s MAC", func() bool {
		out, _ := l.inNS("c1", "ip", "neigh", "show", vip)
		return strings.Contains(out, l.env["LAB_DISPATCHER_MAC"])
	})

	for _, port := range []string{"80", "81"} {
		t.Logf("port %s:", port)
		checkHeld(t, held[port], conns)
	}
	l.checkNewConnections(t, "after the moves")
}

// hostPort joins an address and a port, bracketing IPv6.
func hostPort(addr, port string) string {
	if strings.Contains(addr, ":") {
		return "[" + addr + "]:" + port
	}
	return addr + ":" + port
}

// checkNATTraffic sends conns TCP connections, a 10 MB download and 200
// UDP flows through vip, and checks that all were answered by both NAT
// servers, that the servers saw only the return address, and that the
// bodies were intact.
func (l *lab) checkNATTraffic(vip, ret string, conns int) {
	l.t.Helper()
	t := l.t
	r := l.mustLoad("-url", "http://"+hostPort(vip, "80")+"/", "-n", fmt.Sprint(conns), "-c", "20")
	t.Logf("%d connections: %d ok, %d failed, per server %v, servers saw sources %v", r.Requests, r.OK, r.Failed, r.PerBackend, r.Peers)
	if r.OK != conns || r.Failed != 0 {
		t.Errorf("%d of %d connections answered, %d failed: %v", r.OK, conns, r.Failed, r.Errors)
	}
	for _, n := range []string{"n1", "n2"} {
		if r.PerBackend[n] < conns/4 {
			t.Errorf("NAT server %s answered %d of %d connections", n, r.PerBackend[n], conns)
		}
	}
	if len(r.Peers) != 1 || r.Peers[ret] != r.OK {
		t.Errorf("the servers saw sources %v, want only the return address %s", r.Peers, ret)
	}

	const big = 10 << 20
	b := l.mustLoad("-url", "http://"+hostPort(vip, "80")+fmt.Sprintf("/bytes?n=%d", big), "-n", "1", "-c", "1", "-timeout", "60s")
	t.Logf("10 MB download: %d ok, %d bytes, %d hash mismatches", b.OK, b.Bytes, b.HashMismatches)
	if b.OK != 1 || b.Bytes != big || b.HashMismatches != 0 {
		t.Errorf("10 MB download: ok %d, %d bytes, %d hash mismatches, errors %v", b.OK, b.Bytes, b.HashMismatches, b.Errors)
	}

	u := l.mustLoad("-udp", hostPort(vip, "53"), "-flows", "200", "-packets", "3", "-c", "20")
	t.Logf("UDP: %d flows, %d datagrams, %d answered, %d flows split, per server %v, sources %v", u.Flows, u.Requests, u.OK, u.FlowsSplit, u.PerBackend, u.Peers)
	if u.OK != 600 || u.FlowsSplit != 0 {
		t.Errorf("UDP: %d of 600 datagrams answered, %d flows split across servers", u.OK, u.FlowsSplit)
	}
	if len(u.Peers) != 1 || u.Peers[ret] != u.OK {
		t.Errorf("UDP: the servers saw sources %v, want only %s", u.Peers, ret)
	}
	if u.PerBackend["n1"] == 0 || u.PerBackend["n2"] == 0 {
		t.Errorf("UDP flows not spread over both servers: %v", u.PerBackend)
	}
}

// TestPrivilegedE2ENAT balances by NAT to two servers on a second subnet
// behind a router: 2,000 connections all answered, the servers see only
// the return address, no checksum errors anywhere, a 10 MB download
// intact, UDP flows stay on their server.
func TestPrivilegedE2ENAT(t *testing.T) {
	parallel(t)
	l := newLabArgs(t, "-n", "1", "-r", "2", "-c", "1")
	l.startDlbd()
	vip := l.startNAT(false, 2)
	ret := l.env["LAB_RETURN_ADDR"]
	before := l.csumSnapshot("c1", "n1", "n2")
	l.checkNATTraffic(vip, ret, 2000)
	l.checkCsumDeltas(before)

	// The pools' use is counted by dlbd's sweep (every 2 s); the closed
	// connections hold their ports for the FIN timeout.
	var ex api.ExecutorReport
	waitFor(t, 6*time.Second, "the sweep to count the return address's pool", func() bool {
		ex = l.executor()
		return len(ex.ReturnAddresses) > 0
	})
	t.Logf("executor: %d connections, return addresses %+v, events %v", ex.Connections, ex.ReturnAddresses, ex.Events)
	if len(ex.ReturnAddresses) != 1 || ex.ReturnAddresses[0].Address != ret || ex.ReturnAddresses[0].Ports != 64512 ||
		ex.ReturnAddresses[0].Established == 0 {
		t.Errorf("return address pools %+v, want %s with 64512 ports, some held", ex.ReturnAddresses, ret)
	}
	if ex.Events["nat_table_full"] != 0 {
		t.Errorf("nat_table_full counted %d", ex.Events["nat_table_full"])
	}
	for _, rc := range ex.Reasons {
		if (rc.Reason == "drop_nat_exhausted" || rc.Reason == "drop_table_full" || rc.Reason == "drop_no_route") && rc.Packets != 0 {
			t.Errorf("%s counted %d packets", rc.Reason, rc.Packets)
		}
	}
	var srv []api.ServerReport
	l.report(&srv, "server", "report", vip+"@80@")
	for _, s := range srv {
		if s.ReturnAddress != ret || s.Router != l.env["LAB_ROUTER_ADDR"] || s.MAC != l.env["LAB_ROUTER_MAC"] || s.NewConnections == 0 {
			t.Errorf("server report %+v: want return address %s, router %s reached at %s", s, ret, l.env["LAB_ROUTER_ADDR"], l.env["LAB_ROUTER_MAC"])
		}
	}

	// An advisor probes the NAT servers behind the router: n1 stops, is
	// marked failed, and new connections all go to n2 until it is back.
	l.mustCtl("advisor", "start", "http", vip+"@80", "--interval", "0.5", "--fall", "2", "--rise", "2",
		"--connecttimeout", "0.5", "--receivetimeout", "0.5")
	n1 := vip + "@80@" + l.env["LAB_N1_ADDR"]
	state := func() string {
		var r []api.ServerReport
		l.report(&r, "server", "report", n1)
		return r[0].State
	}
	waitFor(t, 5*time.Second, "the advisor to see n1 up", func() bool { return state() == api.StateUp })
	if out, err := l.script("backend-stop", "n1").CombinedOutput(); err != nil {
		t.Fatalf("stopping n1: %v\n%s", err, out)
	}
	took := waitFor(t, 5*time.Second, "n1 marked failed", func() bool { return state() == api.StateFailed })
	r := l.mustLoad("-url", "http://"+vip+"/", "-n", "500", "-c", "10")
	t.Logf("n1 stopped: marked failed after %.1f s; 500 new connections: %d ok, per server %v", took.Seconds(), r.OK, r.PerBackend)
	if r.OK != 500 || r.PerBackend["n2"] != 500 {
		t.Errorf("with n1 failed: %d of 500 answered, per server %v", r.OK, r.PerBackend)
	}
	if out, err := l.script("backend-start", "n1").CombinedOutput(); err != nil {
		t.Fatalf("starting n1: %v\n%s", err, out)
	}
	waitFor(t, 5*time.Second, "n1 back up", func() bool { return state() == api.StateUp })
}

// TestPrivilegedE2ENAT66 is TestPrivilegedE2ENAT over IPv6.
func TestPrivilegedE2ENAT66(t *testing.T) {
	parallel(t)
	l := newLabArgs(t, "-n", "1", "-r", "2", "-c", "1", "-6")
	l.startDlbd()
	vip := l.startNAT(true, 2)
	before := l.csumSnapshot("c1", "n1", "n2")
	l.checkNATTraffic(vip, l.env["LAB_RETURN_ADDR6"], 1000)
	l.checkCsumDeltas(before)
}

// TestPrivilegedE2EIPv6 balances an IPv6 and an IPv4 cluster address by
// MAC forwarding at the same time: every connection answered, spread over
// the backends, no checksum errors.
func TestPrivilegedE2EIPv6(t *testing.T) {
	parallel(t)
	l := newLabArgs(t, "-n", "3", "-c", "1", "-6")
	l.startDlbd()
	l.configure("generic", 10, 10, 10)
	vip6 := l.env["LAB_VIP6"]
	l.mustCtl("executor", "set", "nfa", l.env["LAB_NFA6"])
	l.mustCtl("cluster", "add", vip6, "--configure")
	l.mustCtl("port", "add", vip6+"@80")
	l.mustCtl("port", "add", vip6+"@53", "--protocol", "udp")
	for i := 1; i <= 3; i++ {
		l.mustCtl("server", "add", fmt.Sprintf("%s@80+53@%s", vip6, l.env[fmt.Sprintf("LAB_B%d_ADDR6", i)]))
	}
	l.waitServersUp()
	before := l.csumSnapshot("c1", "b1", "b2", "b3")

	r := l.mustLoad("-url", "http://"+hostPort(vip6, "80")+"/", "-n", "1500", "-c", "20")
	t.Logf("IPv6: %d connections, %d ok, per backend %v, sources %v", r.Requests, r.OK, r.PerBackend, r.Peers)
	if r.OK != 1500 || r.Failed != 0 {
		t.Errorf("IPv6: %d of 1500 answered: %v", r.OK, r.Errors)
	}
	for i := 1; i <= 3; i++ {
		if n := r.PerBackend[fmt.Sprintf("b%d", i)]; n < 300 {
			t.Errorf("IPv6: b%d answered %d of 1500", i, n)
		}
	}
	if r.Peers[l.env["LAB_C1_ADDR6"]] != r.OK {
		t.Errorf("IPv6 MAC forwarding: backends saw sources %v, want the client %s", r.Peers, l.env["LAB_C1_ADDR6"])
	}
	r4 := l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "300", "-c", "10")
	if r4.OK != 300 {
		t.Errorf("IPv4 alongside IPv6: %d of 300 answered: %v", r4.OK, r4.Errors)
	}
	const big = 10 << 20
	b := l.mustLoad("-url", "http://"+hostPort(vip6, "80")+fmt.Sprintf("/bytes?n=%d", big), "-n", "1", "-timeout", "60s")
	if b.OK != 1 || b.Bytes != big || b.HashMismatches != 0 {
		t.Errorf("IPv6 10 MB download: ok %d, %d bytes, %d hash mismatches, %v", b.OK, b.Bytes, b.HashMismatches, b.Errors)
	}
	// The dispatcher's own IPv6 connections leave from its address, not
	// from the cluster address dlbd put on its interface (IPv6 source
	// selection picked that latest address of the subnet, and the
	// executor took their replies: every one hung).
	own, err := runLoad(exec.Command("nsenter", "--net=/run/netns/"+l.env["LAB_DISPATCHER_NS"], filepath.Join(binDir, "labclient"), "-json",
		"-url", "http://"+hostPort(l.env["LAB_B1_ADDR6"], "80")+"/", "-n", "5", "-timeout", "2s"))
	if err != nil || own.OK != 5 || own.Peers[l.env["LAB_NFA6"]] != 5 {
		t.Errorf("the dispatcher's own connections to b1: %d of 5 answered, from %v (%v, %v); want all from %s",
			own.OK, own.Peers, own.Errors, err, l.env["LAB_NFA6"])
	}
	u := l.mustLoad("-udp", hostPort(vip6, "53"), "-flows", "150", "-packets", "3", "-c", "15")
	t.Logf("IPv6 UDP: %d flows, %d of %d answered, %d split, per backend %v", u.Flows, u.OK, u.Requests, u.FlowsSplit, u.PerBackend)
	if u.OK != 450 || u.FlowsSplit != 0 || len(u.PerBackend) != 3 {
		t.Errorf("IPv6 UDP: %d of 450 answered, %d flows split, backends %v", u.OK, u.FlowsSplit, u.PerBackend)
	}
	l.checkCsumDeltas(before)
}
