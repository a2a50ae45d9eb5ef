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
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// Addresses of the test fixtures (198.18.0.0/15 only).
var (
	nfaAddr    = netip.MustParseAddr("198.18.0.2")
	vipTCP     = netip.MustParseAddr("198.18.0.100") // :80 tcp -> B10 (B11 down); :53 udp -> B20
	vipRedir   = netip.MustParseAddr("198.18.0.101") // :80 tcp -> B30 on another interface
	vipEmpty   = netip.MustParseAddr("198.18.0.102") // :80 tcp, its only server is down
	vipBoth    = netip.MustParseAddr("198.18.0.103") // :443 tcp+udp -> B50/B51 by slot parity
	clientAddr = netip.MustParseAddr("198.18.1.10")
	otherAddr  = netip.MustParseAddr("198.18.0.50") // not a cluster address
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
}

func newPinDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("dlbtest-%d-%d", os.Getpid(), rand.Uint32()))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	testutil.RequirePrivileged(t)
	return openTestEnv(t, Options{ConnTableSize: 4096})
}

// openTestEnv loads the executor with opts (the pin directory is private)
// in a new network namespace and applies the fixture state.
func openTestEnv(t *testing.T, opts Options) *testEnv {
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
	e.tableM = e.dp.MaglevSize()
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
	svc := func(id uint32, vip netip.Addr, port uint16, p lb.Protocol, table []uint32) lb.DataplaneService {
		return lb.DataplaneService{ID: id, Cluster: vip, Port: port, Protocol: p, StaleTimeout: 300, FinTimeout: 60, Table: table}
	}
	return lb.Dataplane{
		NFA: nfaAddr,
		Services: []lb.DataplaneService{
			svc(1, vipTCP, 80, lb.TCP, fill(m, func(uint32) uint32 { return 10 })),
			svc(2, vipTCP, 53, lb.UDP, fill(m, func(uint32) uint32 { return 20 })),
			svc(3, vipRedir, 80, lb.TCP, fill(m, func(uint32) uint32 { return 30 })),
			svc(4, vipEmpty, 80, lb.TCP, nil),
			svc(5, vipBoth, 443, lb.Both, fill(m, func(s uint32) uint32 { return 50 + s%2 })),
		},
		Backends: []lb.DataplaneBackend{
			be(10, 1, 0x21, 1, true),
			be(11, 1, 0x22, 1, false),
			be(20, 2, 0x31, 1, true),
			be(30, 3, 0x41, e.dummy, true),
			be(40, 4, 0x51, 1, false),
			be(50, 5, 0x61, 1, true),
			be(51, 5, 0x62, 1, true),
		},
	}
}

// run runs one frame through the program as if received on lo.
func (e *testEnv) run(t *testing.T, in []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(in)+256)
	ret, err := e.dp.objs.DlbXdp.Run(&ebpf.RunOptions{Data: in, DataOut: out})
	if err != nil {
		t.Fatalf("running program: %v", err)
	}
	e.runs++
	return ret, out[:len(in)]
}

func (e *testEnv) stats(t *testing.T) lb.DataplaneStats {
	t.Helper()
	st, err := e.dp.Stats()
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st
}

// clearConns empties the connection table.
func (e *testEnv) clearConns(t *testing.T) {
	t.Helper()
	var k dispatcherFlowKey
	var keys []dispatcherFlowKey
	var f dispatcherFlow
	it := e.dp.objs.Conns.Iterate()
	for it.Next(&k, &f) {
		keys = append(keys, k)
	}
	for _, k := range keys {
		if err := e.dp.objs.Conns.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
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
}

func (e *testEnv) putConn(t *testing.T, c conn) {
	t.Helper()
	k := c.key.raw()
	f := dispatcherFlow{LastSeen: coarseNow() - c.idle*1e9, Backend: c.backend, Service: c.service,
		State: uint8(dispatcherFlowStateFLOW_ESTABLISHED)}
	if c.closing {
		f.State = uint8(dispatcherFlowStateFLOW_CLOSING)
	}
	if err := e.dp.objs.Conns.Update(&k, &f, ebpf.UpdateAny); err != nil {
		t.Fatalf("inserting connection: %v", err)
	}
}

func (e *testEnv) getConn(t *testing.T, k FlowKey) (dispatcherFlow, bool) {
	t.Helper()
	raw := k.raw()
	var f dispatcherFlow
	err := e.dp.objs.Conns.Lookup(&raw, &f)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return f, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return f, true
}

// coarseNow reads the clock the executor reads (bpf_ktime_get_coarse_ns).
func coarseNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC_COARSE, &ts)
	return uint64(ts.Nano())
}
