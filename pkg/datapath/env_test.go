//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// Addresses of the test fixtures (198.18.0.0/15 and 2001:2::/48 only).
var (
	nfaAddr    = netip.MustParseAddr("198.18.0.2")
	vipTCP     = netip.MustParseAddr("198.18.0.100") // :80 tcp -> B10 (B11 down); :53 udp -> B20
	vipRedir   = netip.MustParseAddr("198.18.0.101") // :80 tcp -> B30 on another interface
	vipEmpty   = netip.MustParseAddr("198.18.0.102") // :80 tcp, its only server is down
	vipBoth    = netip.MustParseAddr("198.18.0.103") // :443 tcp+udp -> B50/B51 by slot parity
	clientAddr = netip.MustParseAddr("198.18.1.10")
	otherAddr  = netip.MustParseAddr("198.18.0.50") // not a cluster address

	// NAT: :80 tcp -> B60 (198.18.2.10:8080), :53 udp -> B61 (198.18.2.11:53),
	// both through the router routerMAC, returning from retAddr.
	vipNAT  = netip.MustParseAddr("198.18.0.110")
	retAddr = netip.MustParseAddr("198.18.0.200")
	// NAT with a two-port pool (40000-40001) on retSmall: :80 tcp -> B62,
	// :53 udp -> B63.
	vipNATSmall = netip.MustParseAddr("198.18.0.111")
	retSmall    = netip.MustParseAddr("198.18.0.201")
	// Affinity (sticky 60 s, /24): :80 -> B90/B91 by slot parity and :443
	// -> B93 share group 7 (crossport; B92 is B90's server on :443);
	// :8080 conn+affin -> B95 (B94, B90's server, quiesced); :8081
	// affinity -> B97 (B96, B90's server, quiesced).
	vipAff = netip.MustParseAddr("198.18.0.120")

	nfa6    = netip.MustParseAddr("2001:2::2")
	vip6    = netip.MustParseAddr("2001:2::100") // MAC: :80 tcp -> B70, :53 udp -> B71
	vip6NAT = netip.MustParseAddr("2001:2::110") // NAT66: :80 tcp -> B80 ([2001:2:1::10]:8080), :53 udp -> B81
	ret6    = netip.MustParseAddr("2001:2::200")
	vip6Aff = netip.MustParseAddr("2001:2::120") // sticky 60 s, /64: :80 -> B98/B99 by slot parity
	client6 = netip.MustParseAddr("2001:2:0:1::10")
	other6  = netip.MustParseAddr("2001:2::50")

	routerMAC  = mac(0x71) // next hop towards the NAT servers
	router6MAC = mac(0x91)
	gwMAC      = mac(0x99) // client gateway (IPv4)
	gw6MAC     = mac(0x9a) // client gateway (IPv6)
)

func mac(last byte) net.HardwareAddr { return net.HardwareAddr{0x02, 0, 0, 0, 0, last} }

// ifaceMAC is the source MAC the executor writes (the dispatcher's own).
var ifaceMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xaa}

// testEnv is a loaded executor in a private network namespace, with pins
// in a private directory that is removed when the test ends.
type testEnv struct {
	dp      *Datapath
	dummy   int // ifindex of a second interface, for redirects
	state   lb.Dataplane
	pinDir  string
	runs    uint64 // packets run through the program
	tableM  uint32
	backend map[uint32]lb.DataplaneBackend
	// clock is the executor-clock time (ns) that fixtures are written
	// against and sweeps run at, when a test injects one; 0 means the real
	// clock.
	clock uint64
}

// now returns the time fixtures are written against: the injected clock,
// else the executor's real (coarse) clock.
func (e *testEnv) now() uint64 {
	if e.clock != 0 {
		return e.clock
	}
	return coarseNow()
}

// ago returns the time stamp idle seconds before e.now(). A fixture older
// than the clock cannot be written (the stamp would wrap): that is a test
// error, so that no fixture silently depends on how long the machine has
// been up. Tests keep real-clock fixtures to a few seconds and shorten the
// timeouts instead (withTimeouts), or inject a clock.
func (e *testEnv) ago(t testing.TB, idle uint64) uint64 {
	t.Helper()
	now := e.now()
	if idle*1e9 > now {
		t.Fatalf("fixture %d s old at clock %d ns: older than the clock", idle, now)
	}
	return now - idle*1e9
}

// withTimeouts applies the fixture state with service id's staletimeout,
// fintimeout and stickytime (seconds) changed, until the test ends.
func (e *testEnv) withTimeouts(t testing.TB, id, stale, fin, sticky uint32) {
	t.Helper()
	st := e.state
	st.Services = append([]lb.DataplaneService(nil), e.state.Services...)
	found := false
	for i := range st.Services {
		if st.Services[i].ID == id {
			st.Services[i].StaleTimeout, st.Services[i].FinTimeout, st.Services[i].StickyTime = stale, fin, sticky
			found = true
		}
	}
	if !found {
		t.Fatalf("no fixture service %d", id)
	}
	if err := e.dp.Apply(st); err != nil {
		t.Fatalf("Apply with timeouts: %v", err)
	}
	t.Cleanup(func() {
		if err := e.dp.Apply(e.state); err != nil {
			t.Errorf("restoring the fixture state: %v", err)
		}
	})
}

// uptimeSeconds is the executor clock in whole seconds.
func uptimeSeconds() uint32 { return uint32(coarseNow() / 1e9) }

func newPinDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("dlbtest-%d-%d", os.Getpid(), rand.Uint32()))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newTestEnv(t testing.TB) *testEnv {
	t.Helper()
	testutil.RequirePrivileged(t)
	return openTestEnv(t, Options{ConnTableSize: 4096})
}

// openTestEnv loads the executor with opts (the pin directory is private)
// in a new network namespace and applies the fixture state.
func openTestEnv(t testing.TB, opts Options) *testEnv {
	t.Helper()
	testutil.InNewNetNS(t)
	dummy, err := testutil.AddVethPair("dlbdp0", "dlbdp1")
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{pinDir: newPinDir(t), dummy: dummy}
	opts.PinDir = e.pinDir
	e.dp, err = Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := e.dp.Remove(); err != nil {
			t.Errorf("Remove: %v", err)
		}
	})
	e.tableM = e.dp.Info().MaxTableSize
	e.state = e.fixtureState()
	if err := e.dp.Apply(e.state); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	e.backend = map[uint32]lb.DataplaneBackend{}
	for _, b := range e.state.Backends {
		e.backend[b.ID] = b
	}
	return e
}

// reopen closes the test's executor (its pins stay) and opens it again
// with opts under the same pin directory, as a restarted dlbd does; the
// cleanup removes the new one.
func (e *testEnv) reopen(t testing.TB, opts Options) *Datapath {
	t.Helper()
	if err := e.dp.Close(); err != nil {
		t.Fatal(err)
	}
	opts.PinDir = e.pinDir
	dp, err := Open(opts)
	if err != nil {
		t.Fatalf("Open again: %v", err)
	}
	e.dp = dp
	return dp
}

// attachBoth attaches the executor to the veth pair's both ends in
// generic mode (dlbdp0 by Attach, dlbdp1 by attachInterface), and returns
// the first's attachment and the second's index.
func (e *testEnv) attachBoth(t *testing.T) (lb.Attachment, int) {
	t.Helper()
	if _, err := e.dp.Attach(e.dummy, lb.XDPGeneric); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	peer, err := netlink.LinkByName("dlbdp1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.dp.attachInterface(peer.Attrs().Index, lb.XDPGeneric); err != nil {
		t.Fatalf("attachInterface: %v", err)
	}
	a, ok := e.dp.Attached()
	if !ok {
		t.Fatal("not attached")
	}
	return a, peer.Attrs().Index
}

func fill(m uint32, f func(slot uint32) uint32) []uint32 {
	t := make([]uint32, m)
	for i := range t {
		t[i] = f(uint32(i))
	}
	return t
}

func (e *testEnv) fixtureState() lb.Dataplane {
	m := e.tableM
	be := func(id, svc uint32, last byte, ifindex int, up bool) lb.DataplaneBackend {
		return lb.DataplaneBackend{ID: id, Service: svc, Address: netip.AddrFrom4([4]byte{198, 18, 0, last}),
			MAC: mac(last), SrcMAC: ifaceMAC, Ifindex: ifindex, AcceptNew: up}
	}
	at := func(b lb.DataplaneBackend, addr string) lb.DataplaneBackend {
		b.Address = netip.MustParseAddr(addr)
		return b
	}
	nat := func(id, svc uint32, addr string, port uint16, ret netip.Addr, next net.HardwareAddr) lb.DataplaneBackend {
		return lb.DataplaneBackend{ID: id, Service: svc, Address: netip.MustParseAddr(addr), MAC: next, SrcMAC: ifaceMAC,
			Ifindex: 1, AcceptNew: true, Port: port, ReturnAddress: ret}
	}
	quiesced := func(b lb.DataplaneBackend) lb.DataplaneBackend {
		b.AcceptNew, b.Quiesced = false, true
		return b
	}
	svc := func(id uint32, vip netip.Addr, port uint16, p lb.Protocol, table []uint32) lb.DataplaneService {
		return lb.DataplaneService{ID: id, Cluster: vip, Port: port, Protocol: p, StaleTimeout: 300, FinTimeout: 60, Table: table}
	}
	natSvc := func(s lb.DataplaneService) lb.DataplaneService {
		s.Method = lb.DataplaneNAT
		return s
	}
	sticky := func(s lb.DataplaneService, group uint32, sel lb.DataplaneSelection) lb.DataplaneService {
		s.StickyTime, s.StickyMask4, s.StickyMask6, s.AffinityGroup, s.Selection = 60, 24, 64, group, sel
		return s
	}
	all := func(id uint32) []uint32 { return fill(m, func(uint32) uint32 { return id }) }
	parity := func(even uint32) []uint32 { return fill(m, func(s uint32) uint32 { return even + s%2 }) }
	return lb.Dataplane{
		NFA:            nfaAddr,
		NFA6:           nfa6,
		ClientGateway:  lb.DataplaneNextHop{MAC: gwMAC, SrcMAC: ifaceMAC, Ifindex: 1},
		ClientGateway6: lb.DataplaneNextHop{MAC: gw6MAC, SrcMAC: ifaceMAC, Ifindex: 1},
		ReturnPools:    []lb.DataplaneReturnPool{{Address: retSmall, PortMin: 40000, PortMax: 40001}},
		Services: []lb.DataplaneService{
			svc(1, vipTCP, 80, lb.TCP, all(10)),
			svc(2, vipTCP, 53, lb.UDP, all(20)),
			svc(3, vipRedir, 80, lb.TCP, all(30)),
			svc(4, vipEmpty, 80, lb.TCP, nil),
			svc(5, vipBoth, 443, lb.Both, parity(50)),
			natSvc(svc(6, vipNAT, 80, lb.TCP, all(60))),
			natSvc(svc(7, vipNAT, 53, lb.UDP, all(61))),
			natSvc(svc(8, vipNATSmall, 80, lb.TCP, all(62))),
			natSvc(svc(9, vipNATSmall, 53, lb.UDP, all(63))),
			svc(10, vip6, 80, lb.TCP, all(70)),
			svc(11, vip6, 53, lb.UDP, all(71)),
			natSvc(svc(12, vip6NAT, 80, lb.TCP, all(80))),
			natSvc(svc(13, vip6NAT, 53, lb.UDP, all(81))),
			sticky(svc(14, vipAff, 80, lb.TCP, parity(90)), 7, lb.DataplaneAffinity),
			sticky(svc(15, vipAff, 443, lb.TCP, all(93)), 7, lb.DataplaneAffinity),
			sticky(svc(16, vipAff, 8080, lb.TCP, all(95)), 0, lb.DataplaneConnAffin),
			sticky(svc(17, vipAff, 8081, lb.TCP, all(97)), 0, lb.DataplaneAffinity),
			sticky(svc(18, vip6Aff, 80, lb.TCP, parity(98)), 0, lb.DataplaneAffinity),
		},
		Backends: []lb.DataplaneBackend{
			be(10, 1, 0x21, 1, true),
			be(11, 1, 0x22, 1, false),
			be(20, 2, 0x31, 1, true),
			be(30, 3, 0x41, e.dummy, true),
			be(40, 4, 0x51, 1, false),
			be(50, 5, 0x61, 1, true),
			be(51, 5, 0x62, 1, true),
			nat(60, 6, "198.18.2.10", 8080, retAddr, routerMAC),
			nat(61, 7, "198.18.2.11", 0, retAddr, routerMAC),
			nat(62, 8, "198.18.2.12", 0, retSmall, routerMAC),
			nat(63, 9, "198.18.2.12", 0, retSmall, routerMAC),
			at(be(70, 10, 0x23, 1, true), "2001:2::21"),
			at(be(71, 11, 0x24, 1, true), "2001:2::22"),
			nat(80, 12, "2001:2:1::10", 8080, ret6, router6MAC),
			nat(81, 13, "2001:2:1::11", 0, ret6, router6MAC),
			at(be(90, 14, 0x25, 1, true), "198.18.3.1"),
			at(be(91, 14, 0x26, 1, true), "198.18.3.2"),
			at(be(92, 15, 0x25, 1, true), "198.18.3.1"),
			at(be(93, 15, 0x26, 1, true), "198.18.3.2"),
			quiesced(at(be(94, 16, 0x25, 1, true), "198.18.3.1")),
			at(be(95, 16, 0x26, 1, true), "198.18.3.2"),
			quiesced(at(be(96, 17, 0x25, 1, true), "198.18.3.1")),
			at(be(97, 17, 0x26, 1, true), "198.18.3.2"),
			at(be(98, 18, 0x27, 1, true), "2001:2::31"),
			at(be(99, 18, 0x28, 1, true), "2001:2::32"),
		},
	}
}

// run runs one frame through the program as if received on lo.
func (e *testEnv) run(t testing.TB, in []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(in)+256)
	ret, err := e.dp.objs.DlbXdp.Run(&ebpf.RunOptions{Data: in, DataOut: out})
	if err != nil {
		t.Fatalf("running program: %v", err)
	}
	e.runs++
	return ret, out[:len(in)]
}

// runOn runs the program on a frame that came in through interface
// ifindex and returns its verdict.
func (e *testEnv) runOn(t testing.TB, in []byte, ifindex int) uint32 {
	t.Helper()
	ctx := xdpMd{DataEnd: uint32(len(in)), IngressIfindex: uint32(ifindex)}
	ret, err := e.dp.objs.DlbXdp.Run(&ebpf.RunOptions{Data: in, DataOut: make([]byte, len(in)+256), Context: ctx})
	if err != nil {
		t.Fatalf("running program on interface %d: %v", ifindex, err)
	}
	e.runs++
	return ret
}

func (e *testEnv) stats(t testing.TB) lb.DataplaneStats {
	t.Helper()
	st, err := e.dp.Stats()
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st
}

// clearConns empties the connection table.
func (e *testEnv) clearConns(t testing.TB) {
	t.Helper()
	var keys []dispatcherFlowKey
	if err := e.dp.eachConn(func(c dispatcherConnEntry) { keys = append(keys, c.Key) }); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, err := e.dp.deleteConn(k, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// conn is a connection-table entry in test terms.
type conn struct {
	key     FlowKey
	backend uint32
	service uint32
	closing bool
	// idle is how long ago the entry was last seen, in seconds.
	idle uint64
	// bootSeen: last seen at time 0 of the clock instead (at boot).
	bootSeen bool
}

func (e *testEnv) putConn(t testing.TB, c conn) {
	t.Helper()
	k := c.key.raw()
	seen := uint64(0)
	if !c.bootSeen {
		seen = e.ago(t, c.idle)
	}
	f := dispatcherFlow{LastSeen: seen, Backend: c.backend, Service: c.service,
		State: uint8(dispatcherFlowStateFLOW_ESTABLISHED)}
	if c.closing {
		f.State = uint8(dispatcherFlowStateFLOW_CLOSING)
	}
	if err := e.dp.putConn(k, f); err != nil {
		t.Fatalf("inserting connection: %v", err)
	}
}

func (e *testEnv) getConn(t testing.TB, k FlowKey) (dispatcherFlow, bool) {
	t.Helper()
	f, ok, err := e.dp.getConn(k.raw())
	if err != nil {
		t.Fatal(err)
	}
	return f, ok
}

// coarseNow reads the clock the executor reads (bpf_ktime_get_coarse_ns).
func coarseNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts)
	return uint64(ts.Nano())
}

// natConn is an established NAT connection in test terms.
type natConn struct {
	key     FlowKey
	backend uint32
	service uint32
	ret     netip.Addr
	port    uint16
	closing bool
	idle    uint64 // seconds since both halves were last seen
	// bootSeen: last seen at time 0 of the clock instead (at boot).
	bootSeen bool
}

// putNAT inserts both halves of an established NAT connection.
func (e *testEnv) putNAT(t testing.TB, c natConn) {
	t.Helper()
	k := c.key.raw()
	state := uint8(dispatcherFlowStateFLOW_ESTABLISHED)
	if c.closing {
		state = uint8(dispatcherFlowStateFLOW_CLOSING)
	}
	seen := uint64(0)
	if !c.bootSeen {
		seen = e.ago(t, c.idle)
	}
	f := dispatcherNatFlow{LastSeen: seen, Backend: c.backend, Service: c.service, State: state, NatPort: htons(c.port)}
	f.NatAddr.Addr, _ = addrBytes(c.ret)
	rk := dispatcherNatKey{Port: htons(c.port), Proto: c.key.Proto, Family: k.Family}
	rk.Addr.Addr, _ = addrBytes(c.ret)
	r := dispatcherNatRev{LastSeen: seen, Client: k.Src, Vip: k.Dst, ClientPort: k.Sport, VipPort: k.Dport,
		Backend: c.backend, Service: c.service, State: state}
	if err := e.dp.putNATPort(rk, r); err != nil {
		t.Fatalf("inserting nat_ports entry: %v", err)
	}
	if err := e.dp.putNATFlow(k, f); err != nil {
		t.Fatalf("inserting nat_flows entry: %v", err)
	}
}

// getNAT returns the two halves of a NAT connection, if present.
func (e *testEnv) getNAT(t testing.TB, k FlowKey) (dispatcherNatFlow, dispatcherNatRev, bool) {
	t.Helper()
	raw := k.raw()
	var r dispatcherNatRev
	f, ok, err := e.dp.getNATFlow(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return f, r, false
	}
	rk := dispatcherNatKey{Addr: f.NatAddr, Port: f.NatPort, Proto: k.Proto, Family: raw.Family}
	r, ok, err = e.dp.getNATPort(rk)
	if err != nil || !ok {
		t.Fatalf("nat_flows entry %+v has no nat_ports entry (%v)", f, err)
	}
	return f, r, true
}

// natPortTaken reports whether nat_ports holds a return address's port.
func (e *testEnv) natPortTaken(t testing.TB, ret netip.Addr, port uint16, proto uint8) bool {
	t.Helper()
	rk := dispatcherNatKey{Port: htons(port), Proto: proto}
	rk.Addr.Addr, rk.Family = addrBytes(ret)
	_, ok, err := e.dp.getNATPort(rk)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// halfOpen returns the live half-open reservation of a NAT connection and
// the port it reserved.
func (e *testEnv) halfOpen(t testing.TB, k FlowKey) (h dispatcherHalfopen, port uint16, ok bool) {
	t.Helper()
	raw := k.raw()
	now := monotonicNow()
	var idx uint32
	it := e.dp.objs.NatHalfopen.Iterate()
	for it.Next(&idx, &h) {
		if !halfOpenLive(h.Owner, now) {
			continue
		}
		if h.Client == raw.Src && h.Vip == raw.Dst && h.ClientPort == raw.Sport && h.VipPort == raw.Dport && h.Key.Proto == raw.Proto {
			return h, htons(h.Key.Port), true
		}
	}
	return h, 0, false
}

// lockBuckets sets the lock flag (TAB_F_LOCK of bpf/include/dlb_abi.h) of
// every bucket of a table's index, as another CPU inserting into each
// would, until the returned function or the test's end clears them.
func (e *testEnv) lockBuckets(t testing.TB, index *ebpf.Map) (unlock func()) {
	t.Helper()
	const tabFLock = 1
	set := func(lock bool) error {
		n := index.MaxEntries()
		keys := make([]uint32, n)
		vals := make([]dispatcherTabBucket, n)
		for i := range keys {
			keys[i] = uint32(i)
			if err := index.Lookup(keys[i], &vals[i]); err != nil {
				return fmt.Errorf("reading bucket %d: %w", i, err)
			}
			if lock {
				vals[i].Meta |= tabFLock
			} else {
				vals[i].Meta &^= tabFLock
			}
		}
		if _, err := index.BatchUpdate(keys, vals, nil); err != nil {
			return fmt.Errorf("writing buckets: %w", err)
		}
		return nil
	}
	if err := set(true); err != nil {
		t.Fatal(err)
	}
	locked := true
	unlock = func() {
		if !locked {
			return
		}
		locked = false
		if err := set(false); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(unlock)
	return unlock
}

// zeroArray writes the zero value of V into every slot of array map m, in
// one batch.
func zeroArray[V any](t testing.TB, m *ebpf.Map) {
	t.Helper()
	slots := make([]uint32, m.MaxEntries())
	for i := range slots {
		slots[i] = uint32(i)
	}
	if _, err := m.BatchUpdate(slots, make([]V, len(slots)), nil); err != nil {
		t.Fatal(err)
	}
}

// forgetHandshakes empties the MAC handshake cache.
func (e *testEnv) forgetHandshakes(t testing.TB) {
	t.Helper()
	zeroArray[dispatcherHandshake](t, e.dp.objs.Handshakes)
}

// forgetNATHandshakes empties the NAT handshake cache, as a flood that
// overwrote every slot would.
func (e *testEnv) forgetNATHandshakes(t testing.TB) {
	t.Helper()
	zeroArray[dispatcherNatHandshake](t, e.dp.objs.NatHandshakes)
}

// clearTables empties every connection, NAT, half-open, affinity and
// handshake table.
func (e *testEnv) clearTables(t testing.TB) {
	t.Helper()
	e.clearConns(t)
	var flows []dispatcherFlowKey
	var ports []dispatcherNatKey
	if err := e.dp.eachNATFlow(func(k dispatcherFlowKey, _ dispatcherNatFlow) { flows = append(flows, k) }); err != nil {
		t.Fatal(err)
	}
	if err := e.dp.eachNATPort(func(k dispatcherNatKey, _ dispatcherNatRev) { ports = append(ports, k) }); err != nil {
		t.Fatal(err)
	}
	for _, k := range flows {
		if _, err := e.dp.deleteNATFlow(k, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range ports {
		if _, err := e.dp.deleteNATPort(k, 0); err != nil {
			t.Fatal(err)
		}
	}
	clearMap(t, e.dp.objs.Affinity, dispatcherAffinityKey{}, dispatcherAffinityRecord{})
	// The handshake caches and the half-open table: rewritten whole (one
	// batch each).
	e.forgetHandshakes(t)
	e.forgetNATHandshakes(t)
	clearHalfOpen(t, e)
}

func clearMap[K comparable, V any](t testing.TB, m *ebpf.Map, k K, v V) {
	t.Helper()
	var keys []K
	it := m.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	for _, k := range keys {
		if err := m.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Fatal(err)
		}
	}
}

// putAffinity writes an affinity record of a client in a service's group,
// naming backend b, last used age seconds ago.
func (e *testEnv) putAffinity(t testing.TB, client netip.Addr, service, b uint32, age uint64) {
	t.Helper()
	var s lb.DataplaneService
	for _, x := range e.state.Services {
		if x.ID == service {
			s = x
		}
	}
	ak := affinityKey(client, affinityGroup(s), s.StickyMask4, s.StickyMask6)
	r := dispatcherAffinityRecord{LastSeen: e.ago(t, age), Backend: b, Service: service}
	r.Server.Addr, _ = addrBytes(e.backend[b].Address)
	if err := e.dp.objs.Affinity.Update(&ak, &r, ebpf.UpdateAny); err != nil {
		t.Fatalf("writing affinity record: %v", err)
	}
}

// affinityOf returns the record of a client in a service's group.
func (e *testEnv) affinityOf(t testing.TB, client netip.Addr, service uint32) (dispatcherAffinityRecord, bool) {
	t.Helper()
	var s lb.DataplaneService
	for _, x := range e.state.Services {
		if x.ID == service {
			s = x
		}
	}
	ak := affinityKey(client, affinityGroup(s), s.StickyMask4, s.StickyMask6)
	var r dispatcherAffinityRecord
	err := e.dp.objs.Affinity.Lookup(&ak, &r)
	return r, err == nil
}

// service returns a fixture service by id.
func (e *testEnv) service(id uint32) lb.DataplaneService {
	for _, s := range e.state.Services {
		if s.ID == id {
			return s
		}
	}
	return lb.DataplaneService{}
}
