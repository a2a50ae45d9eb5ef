//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/dlbproject/dlb/pkg/lb"
)

// TestPrivilegedSweep: the sweeper removes idle and orphaned entries,
// counts established ones that expired as finished, and counts the active
// ones per backend.
func TestPrivilegedSweep(t *testing.T) {
	e := newTestEnv(t)
	// The sweep's clock is injected: just old enough for the oldest
	// fixture, and a dispatcher up for 30 days.
	for _, clock := range []uint64{401e9, 30 * 86400e9} {
		t.Run(fmt.Sprintf("clock %d s", clock/1e9), func(t *testing.T) {
			e.clearTables(t)
			e.clock = clock
			defer func() { e.clock = 0 }()
			testSweep(t, e)
		})
	}
}

func testSweep(t *testing.T, e *testEnv) {
	k := func(sport uint16) FlowKey { return key(vipTCP, 80, sport, 6) }
	conns := []conn{
		{key: k(1), backend: 10, service: 1, idle: 10},                  // live
		{key: k(2), backend: 10, service: 1, idle: 10},                  // live
		{key: k(3), backend: 11, service: 1, idle: 10},                  // live, on a down server
		{key: k(4), backend: 10, service: 1, idle: 400},                 // idle past staletimeout (300)
		{key: k(5), backend: 10, service: 1, idle: 70, closing: true},   // closing past fintimeout (60)
		{key: k(6), backend: 10, service: 1, idle: 30, closing: true},   // closing, not yet
		{key: k(7), backend: 99, service: 1, idle: 1},                   // backend removed
		{key: k(8), backend: 20, service: 1, idle: 1},                   // backend of another service
		{key: key(vipTCP, 53, 9, 17), backend: 20, service: 2, idle: 5}, // live UDP
	}
	for _, c := range conns {
		e.putConn(t, c)
	}
	before := e.stats(t).Backend(10).FinConns
	res, err := e.dp.sweep(e.clock)
	if err != nil {
		t.Fatal(err)
	}
	if res.Expired != 4 || res.Entries != 5 {
		t.Errorf("expired %d, left %d; want 4 and 5", res.Expired, res.Entries)
	}
	want := map[uint32]uint64{10: 2, 11: 1, 20: 1}
	for id, n := range want {
		if res.Active[id] != n {
			t.Errorf("backend %d: %d active, want %d (all: %v)", id, res.Active[id], n, res.Active)
		}
	}
	for sport, gone := range map[uint16]bool{1: false, 3: false, 4: true, 5: true, 6: false, 7: true, 8: true} {
		if _, ok := e.getConn(t, k(sport)); ok == gone {
			t.Errorf("entry %d present %v, want %v", sport, ok, !gone)
		}
	}
	// Only the established entry that expired counts as finished; the
	// closing one was counted when it saw its FIN.
	if d := e.stats(t).Backend(10).FinConns - before; d != 1 {
		t.Errorf("backend 10 finished +%d, want +1", d)
	}
}

// TestPrivilegedAdoption: a second Open on the same pins adopts the link,
// the maps and their contents; it adopts the pinned program too when that
// is of the same build and uses the pinned maps, and otherwise replaces
// the program on the links with its own.
func TestPrivilegedAdoption(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before runs after the first Datapath is closed.
		before func(t *testing.T, e *testEnv)
		salt   string // buildSalt of the second Open: another build
		// adopted: the second Open adopts the program; why: else why not.
		adopted bool
		why     string
	}{
		{name: "same build", adopted: true},
		{name: "other build", salt: "another build", why: "the pinned program is of another build"},
		{name: "map pin deleted", before: func(t *testing.T, e *testEnv) {
			if err := os.Remove(filepath.Join(e.pinDir, dispatcherMapReasonStats)); err != nil {
				t.Fatal(err)
			}
		}, why: "the pin of map reason_stats is missing"},
		{name: "another map pinned", before: func(t *testing.T, e *testEnv) {
			// As if the pin had been deleted and the map made again
			// while no dlbd ran.
			spec, err := loadDispatcher()
			if err != nil {
				t.Fatal(err)
			}
			ms := spec.Maps[dispatcherMapReasonStats].Copy()
			ms.Pinning = ebpf.PinNone
			m, err := ebpf.NewMap(ms)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if err := pinReplacing(m, e.pinDir, dispatcherMapReasonStats); err != nil {
				t.Fatal(err)
			}
		}, why: "the pinned program uses a map (id "},
		{name: "program's own map pin deleted", before: func(t *testing.T, e *testEnv) {
			if err := os.Remove(filepath.Join(e.pinDir, progMapPin+"bss")); err != nil {
				t.Fatal(err)
			}
		}, why: "the pin of the program's map .bss is missing"},
		{name: "an older dlbd's program", before: func(t *testing.T, e *testEnv) {
			// Pinned by a dlbd that did not pin the program's own maps.
			for _, name := range pins(t, e.pinDir) {
				if strings.HasPrefix(name, progMapPin) {
					if err := os.Remove(filepath.Join(e.pinDir, name)); err != nil {
						t.Fatal(err)
					}
				}
			}
		}, why: "the pinned program's own maps are not pinned (a dlbd older than this one pinned it)"},
		{name: "program pin deleted", before: func(t *testing.T, e *testEnv) {
			if err := os.Remove(filepath.Join(e.pinDir, progPin)); err != nil {
				t.Fatal(err)
			}
		}, why: "no program is pinned"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t)
			a1, peerIndex := e.attachBoth(t)
			e.putConn(t, conn{key: key(vipTCP, 80, 7, 6), backend: 10, service: 1})
			// A trace left on, as by a dlbd killed while it traced.
			if err := e.dp.objs.DlbTraceOn.Set(uint32(1)); err != nil {
				t.Fatal(err)
			}
			if err := e.dp.Close(); err != nil {
				t.Fatal(err)
			}
			if tc.before != nil {
				tc.before(t, e)
			}
			buildSalt = tc.salt
			t.Cleanup(func() { buildSalt = "" })

			dp, err := Open(Options{PinDir: e.pinDir, ConnTableSize: 4096})
			if err != nil {
				t.Fatalf("second Open: %v", err)
			}
			e.dp = dp // the cleanup removes this one
			if adopted, why := dp.ProgramAdopted(); adopted != tc.adopted || !strings.HasPrefix(why, tc.why) || (tc.why == "") != (why == "") {
				t.Errorf("ProgramAdopted() = %v, %q; want %v, %q", adopted, why, tc.adopted, tc.why)
			}
			// Every pin is there again, the program's own maps too.
			own := []string{progPin, dispatcherMapReasonStats}
			for _, name := range dp.progMaps {
				own = append(own, progMapPinName(name))
			}
			if len(own) < 12 {
				t.Errorf("the program's own maps: %v; want its data sections, trace and scratch maps", dp.progMaps)
			}
			for _, name := range own {
				if _, err := os.Stat(filepath.Join(e.pinDir, name)); err != nil {
					t.Errorf("after Open: %v", err)
				}
			}
			a2, ok := dp.Attached()
			if !ok || a2.LinkID != a1.LinkID || a2.Ifindex != e.dummy {
				t.Fatalf("after Open: %+v %v, want link %d on %d", a2, ok, a1.LinkID, e.dummy)
			}
			if tc.adopted && a2.ProgramID != a1.ProgramID {
				t.Errorf("program %d replaced by %d, want it adopted", a1.ProgramID, a2.ProgramID)
			}
			if !tc.adopted && a2.ProgramID == a1.ProgramID {
				t.Errorf("program %d not replaced", a2.ProgramID)
			}
			if info, err := dp.objs.DlbXdp.Info(); err != nil {
				t.Error(err)
			} else if id, _ := info.ID(); uint32(id) != a2.ProgramID {
				t.Errorf("the Datapath's program is %d, the link's %d", id, a2.ProgramID)
			}
			if on, err := dp.Tracing(); err != nil || on {
				t.Errorf("Tracing() = %v, %v after Open; want the earlier trace off", on, err)
			}
			// The second interface's link was adopted too, with the program.
			if as := dp.attachments(); len(as) != 2 || as[1].Ifindex != peerIndex || as[1].ProgramID != a2.ProgramID {
				t.Errorf("attachments after Open: %+v", as)
			}
			if _, ok := e.getConn(t, key(vipTCP, 80, 7, 6)); !ok {
				t.Error("connection entry lost")
			}
			if len(dp.applied.backends) != len(e.state.Backends) || len(dp.applied.tables) != len(e.state.Services)-1 {
				t.Errorf("adopted %d backends and %d tables", len(dp.applied.backends), len(dp.applied.tables))
			}
			// Attaching again to the same interface keeps the link; another one is refused.
			if m, err := dp.Attach(e.dummy, lb.XDPGeneric); err != nil || m != lb.XDPAuto {
				t.Errorf("re-Attach: %v %v", m, err)
			}
			if _, err := dp.Attach(1, lb.XDPGeneric); !errors.Is(err, ErrOtherInterface) {
				t.Errorf("Attach elsewhere: %v", err)
			}
			// The executor keeps working on the adopted maps, and the
			// syscall programs reach the program's own maps: a trace
			// sees its packets.
			tr, err := dp.StartTrace(lb.TraceFilter{})
			if err != nil {
				t.Fatalf("StartTrace: %v", err)
			}
			defer func() { _, _ = tr.Stop() }()
			if got, _ := e.run(t, tcpTo(vipTCP, 80, 7, "A").Build(t)); got != xdpTX {
				t.Errorf("verdict %d after adoption", got)
			}
			p, err := tr.Next(time.Now().Add(2 * time.Second))
			if err != nil {
				t.Fatalf("trace after Open: %v", err)
			}
			if p.Verdict != "tx" || p.Dst.Port() != 80 {
				t.Errorf("traced %+v, want the packet to port 80 sent on", p)
			}
			// The syscall programs, loaded again, write the pinned table.
			e.putConn(t, conn{key: key(vipTCP, 80, 8, 6), backend: 10, service: 1})
			if _, ok := e.getConn(t, key(vipTCP, 80, 8, 6)); !ok {
				t.Error("a connection written after Open is not found")
			}
		})
	}
}

// TestPrivilegedSweepJustBooted: the sweep of a dispatcher whose clock is
// smaller than every timeout (3 s after boot: staletimeout 300, fintimeout
// 60, stickytime 60, half-open 30) expires nothing, and counts entries
// stamped after it read the clock (here: every packet the real executor
// clock stamps) as live.
func TestPrivilegedSweepJustBooted(t *testing.T) {
	e := newTestEnv(t)
	// Half-open connections, stamped by the executor's real clock: ahead
	// of the injected one.
	e.run(t, tcpTo(vipTCP, 80, 500, "S").Build(t))
	e.run(t, tcpTo(vipNAT, 80, 500, "S").Build(t))

	e.clock = 3e9
	k := func(sport uint16) FlowKey { return key(vipTCP, 80, sport, 6) }
	e.putConn(t, conn{key: k(1), backend: 10, service: 1, bootSeen: true})
	e.putConn(t, conn{key: k(2), backend: 10, service: 1, idle: 1})
	e.putConn(t, conn{key: k(3), backend: 10, service: 1, idle: 3, closing: true})
	ahead := k(4).raw()
	f := dispatcherFlow{LastSeen: e.clock + 2e9, Backend: 10, Service: 1, State: uint8(dispatcherFlowStateFLOW_ESTABLISHED)}
	if err := e.dp.putConn(ahead, f); err != nil {
		t.Fatal(err)
	}
	e.putNAT(t, natConn{key: key(vipNAT, 80, 2, 6), backend: 60, service: 6, ret: retAddr, port: 40010, idle: 3})
	e.putAffinity(t, netip.MustParseAddr("198.18.5.1"), 14, 90, 3)

	res, err := e.dp.sweep(e.clock)
	if err != nil {
		t.Fatal(err)
	}
	if res.Expired != 0 || res.Entries != 5 || res.AffinityExpired != 0 {
		t.Errorf("expired %d, left %d, affinity expired %d; want 0, 5, 0", res.Expired, res.Entries, res.AffinityExpired)
	}
	if res.Active[10] != 3 || res.Active[60] != 1 {
		t.Errorf("active %v, want backend 10: 3, backend 60: 1", res.Active)
	}
	if res.HalfOpen[1] != 1 || res.HalfOpen[6] != 1 {
		t.Errorf("half-open %v, want 1 on service 1 (MAC) and 1 on service 6 (NAT)", res.HalfOpen)
	}
	if res.AffinityServices[14] != 1 {
		t.Errorf("affinity records %v, want 1 on service 14", res.AffinityServices)
	}
}
