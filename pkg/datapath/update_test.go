//go:build linux

package datapath

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// dumpMaps renders what the executor's configuration maps hold, in a
// canonical order: vips (with each service's table size), backends,
// service_servers, the Maglev tables' contents, tx_ports, the filters and
// the config. Two executors with equal dumps forward alike.
func dumpMaps(t *testing.T, d *Datapath) string {
	t.Helper()
	// Maps are read a batch at a time (readAll): an entry at a time, the
	// dumps took seconds per test.
	var lines []string
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(readAll(d.objs.Vips, func(vk dispatcherVipKey, vm dispatcherVipMeta) {
		lines = append(lines, fmt.Sprintf("vip %s %+v", vipString(vk), vm))
	}))
	must(readAll(d.objs.Backends, func(id uint32, b dispatcherBackend) {
		if b.Flags != 0 {
			lines = append(lines, fmt.Sprintf("backend %d %+v", id, b))
		}
	}))
	must(readAll(d.objs.ServiceServers, func(sk dispatcherServerKey, id uint32) {
		lines = append(lines, fmt.Sprintf("server %+v %d", sk, id))
	}))
	var inner []uint32
	must(readAll(d.objs.MaglevTables, func(id, innerID uint32) { inner = append(inner, id, innerID) }))
	for i := 0; i < len(inner); i += 2 {
		id, innerID := inner[i], inner[i+1]
		m, err := ebpf.NewMapFromID(ebpf.MapID(innerID))
		if err != nil {
			t.Fatal(err)
		}
		slots := make([]uint32, m.MaxEntries())
		err = readAll(m, func(k, v uint32) { slots[k] = v })
		m.Close()
		must(err)
		if len(slots) < lb.MinTableSize {
			continue // a removed table's placeholder: forwards as no table
		}
		lines = append(lines, fmt.Sprintf("table %d: %d slots, sum %x", id, len(slots), lb.TableSum(slots)))
	}
	must(readAll(d.objs.TxPorts, func(id, _ uint32) {
		lines = append(lines, fmt.Sprintf("tx_port %d", id))
	}))
	var f dispatcherVipBloom
	var nf dispatcherNatBloom
	var cfg dispatcherDlbConfig
	if err := d.objs.VipFilter.Lookup(uint32(0), &f); err != nil {
		t.Fatal(err)
	}
	if err := d.objs.NatFilter.Lookup(uint32(0), &nf); err != nil {
		t.Fatal(err)
	}
	if err := d.objs.Config.Lookup(uint32(0), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg.VipsGen = 0  // how often vips changed, not what they hold
	cfg.RouteGen = 0 // how often routes may have changed, likewise
	lines = append(lines, fmt.Sprintf("filters %x %x", f.Bits, nf), fmt.Sprintf("config %+v", cfg))
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// randomState is a random configuration of the executor: up to 12
// services on up to 5 cluster addresses, MAC and NAT, each with up to 6 backends
// and a table of its own size.
func randomState(r *rand.Rand) lb.Dataplane {
	dp := lb.Dataplane{NFA: nfaAddr, ClientGateway: lb.DataplaneNextHop{MAC: gwMAC, SrcMAC: ifaceMAC, Ifindex: 1}}
	if r.IntN(2) == 0 {
		dp.ClientGateway = lb.DataplaneNextHop{}
	}
	sizes := []uint32{101, 211, 1009}
	nextB := uint32(1)
	for id := uint32(1); id <= 12; id++ {
		if r.IntN(2) == 0 {
			continue
		}
		s := lb.DataplaneService{ID: id, Cluster: netip.AddrFrom4([4]byte{198, 18, 0, byte(100 + r.IntN(5))}), Port: uint16(80 + id),
			Protocol: lb.Protocol(1 + r.IntN(3)), StaleTimeout: 300, FinTimeout: 60}
		nat := r.IntN(3) == 0
		if nat {
			s.Method = lb.DataplaneNAT
		}
		var ids []uint32
		for k := r.IntN(7); k > 0; k-- {
			b := lb.DataplaneBackend{ID: nextB, Service: id, Address: netip.AddrFrom4([4]byte{198, 18, 1, byte(nextB)}),
				MAC: mac(byte(nextB)), SrcMAC: ifaceMAC, Ifindex: 1, AcceptNew: r.IntN(4) != 0}
			if nat {
				b.ReturnAddress = netip.AddrFrom4([4]byte{198, 18, 0, byte(200 + r.IntN(2))})
				b.Port = 8080
			}
			dp.Backends = append(dp.Backends, b)
			ids = append(ids, nextB)
			nextB++
		}
		if len(ids) > 0 {
			size := sizes[r.IntN(len(sizes))]
			s.Table = fill(size, func(slot uint32) uint32 { return ids[int(slot)%len(ids)] })
			s.TableSum = lb.TableSum(s.Table)
		}
		dp.Services = append(dp.Services, s)
	}
	return dp
}

// diff returns the update from one state to another: services and
// backends of next that differ from cur (or are new), and those cur has
// that next does not.
func diff(cur, next lb.Dataplane) lb.DataplaneUpdate {
	g := next.Globals()
	u := lb.DataplaneUpdate{Globals: &g}
	curS := map[uint32]lb.DataplaneService{}
	for _, s := range cur.Services {
		curS[s.ID] = s
	}
	for _, s := range next.Services {
		if c, ok := curS[s.ID]; !ok || fmt.Sprint(c) != fmt.Sprint(s) {
			u.Services = append(u.Services, s)
		}
		delete(curS, s.ID)
	}
	for id := range curS {
		u.RemoveServices = append(u.RemoveServices, id)
	}
	curB := map[uint32]lb.DataplaneBackend{}
	for _, b := range cur.Backends {
		curB[b.ID] = b
	}
	for _, b := range next.Backends {
		if c, ok := curB[b.ID]; !ok || fmt.Sprint(c) != fmt.Sprint(b) {
			u.Backends = append(u.Backends, b)
		}
		delete(curB, b.ID)
	}
	for id := range curB {
		u.RemoveBackends = append(u.RemoveBackends, id)
	}
	return u
}

// TestPrivilegedUpdateMatchesApply: a sequence of incremental updates
// leaves the maps exactly as applying the final state whole does, whatever
// the changes (services and backends added, removed, changed; tables grown
// and shrunk; protocols and methods changed).
func TestPrivilegedUpdateMatchesApply(t *testing.T) {
	testutil.RequirePrivileged(t)
	testutil.InNewNetNS(t)
	open := func() *Datapath {
		d, err := Open(Options{PinDir: newPinDir(t), ConnTableSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Remove() })
		return d
	}
	inc, ref := open(), open()
	r := rand.New(rand.NewPCG(1, 2))
	cur := lb.Dataplane{}
	if err := inc.Apply(cur); err != nil {
		t.Fatal(err)
	}
	for step := 0; step < 40; step++ {
		next := randomState(r)
		if err := inc.Update(diff(cur, next)); err != nil {
			t.Fatalf("step %d: Update: %v", step, err)
		}
		if err := ref.Apply(next); err != nil {
			t.Fatalf("step %d: Apply: %v", step, err)
		}
		if a, b := dumpMaps(t, inc), dumpMaps(t, ref); a != b {
			t.Fatalf("step %d: the maps differ after an update and after a whole apply:\n--- update\n%s\n--- apply\n%s", step, a, b)
		}
		cur = next
	}
}

// TestPrivilegedUpdateRefusesWhole: an update naming a service the executor
// does not have, or a table above the largest size, changes nothing.
func TestPrivilegedUpdateRefusesWhole(t *testing.T) {
	e := newTestEnv(t)
	before := dumpMaps(t, e.dp)
	bad := []lb.DataplaneUpdate{
		{Backends: []lb.DataplaneBackend{{ID: 500, Service: 999, Address: netip.MustParseAddr("198.18.3.1")}}},
		{Services: []lb.DataplaneService{{ID: 1, Cluster: vipTCP, Port: 80, Protocol: lb.TCP, Table: make([]uint32, e.tableM+1)}},
			Backends: []lb.DataplaneBackend{{ID: 501, Service: 1, Address: netip.MustParseAddr("198.18.3.2")}}},
		{Services: []lb.DataplaneService{{ID: 70000, Cluster: vipTCP, Port: 9}}},
	}
	for i, u := range bad {
		if err := e.dp.Update(u); err == nil {
			t.Errorf("update %d accepted", i)
		}
		if after := dumpMaps(t, e.dp); after != before {
			t.Errorf("update %d changed the maps", i)
		}
	}
}

// TestPrivilegedUpdateNeedsWholeStateAfterAdoption: an executor adopted
// from pins takes incremental updates only once the whole state was
// applied (until then it does not know what the pins hold).
func TestPrivilegedUpdateNeedsWholeStateAfterAdoption(t *testing.T) {
	e := newTestEnv(t)
	if err := e.dp.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := Open(Options{PinDir: e.pinDir, ConnTableSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	e.dp = d
	if err := d.Update(lb.DataplaneUpdate{RemoveBackends: []uint32{10}}); err == nil {
		t.Error("Update before the whole state was applied was accepted")
	}
	if err := d.Apply(e.state); err != nil {
		t.Fatal(err)
	}
	if err := d.Update(lb.DataplaneUpdate{RemoveBackends: []uint32{11}}); err != nil {
		t.Errorf("Update after Apply: %v", err)
	}
}

// tableIDs returns the inner map of each service's Maglev table, leaving
// out removed tables' placeholders.
func tableIDs(t *testing.T, d *Datapath) map[uint32]ebpf.MapID {
	t.Helper()
	out := map[uint32]ebpf.MapID{}
	var id uint32
	var inner ebpf.MapID
	it := d.objs.MaglevTables.Iterate()
	for it.Next(&id, &inner) {
		m, err := ebpf.NewMapFromID(inner)
		if err != nil {
			t.Fatal(err)
		}
		if m.MaxEntries() >= lb.MinTableSize {
			out[id] = inner
		}
		m.Close()
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPrivilegedTablesAcrossRestart: a restarted executor keeps the
// pinned tables that still hold what the state says (a restart does not
// rewrite 1,000 tables), writes those that differ, and a removed table
// leaves nothing that counts as a table. More tables than one batch holds
// are written at once.
func TestPrivilegedTablesAcrossRestart(t *testing.T) {
	for _, sysAdmin := range []bool{true, false} {
		t.Run(fmt.Sprintf("CAP_SYS_ADMIN=%v", sysAdmin), func(t *testing.T) { testTablesAcrossRestart(t, sysAdmin) })
	}
}

// testTablesAcrossRestart runs TestPrivilegedTablesAcrossRestart; without
// sysAdmin, inner maps cannot be opened by id (as under dlbd.service), so
// only what maglev_info says counts.
func testTablesAcrossRestart(t *testing.T, sysAdmin bool) {
	testutil.RequirePrivileged(t)
	testutil.InNewNetNS(t)
	if !sysAdmin {
		readInner = func(ebpf.MapID) (*ebpf.Map, error) { return nil, unix.EPERM }
		t.Cleanup(func() { readInner = ebpf.NewMapFromID })
	}
	pinDir := newPinDir(t)
	d, err := Open(Options{PinDir: pinDir, ConnTableSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Remove() })
	const services = tableBatchSize + 44
	var dp lb.Dataplane
	for id := uint32(1); id <= services; id++ {
		b := lb.DataplaneBackend{ID: id, Service: id, Address: netip.AddrFrom4([4]byte{198, 18, 1 + byte(id>>8), byte(id)}),
			MAC: mac(byte(id)), SrcMAC: ifaceMAC, Ifindex: 1, AcceptNew: true}
		s := lb.DataplaneService{ID: id, Cluster: netip.MustParseAddr("198.18.0.100"), Port: uint16(1000 + id), Protocol: lb.TCP,
			Table: fill(101, func(uint32) uint32 { return id })}
		s.TableSum = lb.TableSum(s.Table)
		dp.Services = append(dp.Services, s)
		dp.Backends = append(dp.Backends, b)
	}
	if err := d.Apply(dp); err != nil {
		t.Fatal(err)
	}
	// Tables written by a dlbd that did not name them: service 5's holds
	// what the state says, service 6's does not.
	for id, slot := range map[uint32]uint32{5: 5, 6: 1} {
		spec := d.innerSpec.Copy()
		spec.MaxEntries = 101
		m, err := ebpf.NewMap(spec)
		if err != nil {
			t.Fatal(err)
		}
		for i := uint32(0); i < 101; i++ {
			if err := m.Put(i, slot); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.objs.MaglevTables.Put(id, m); err != nil {
			t.Fatal(err)
		}
		m.Close()
	}
	before := tableIDs(t, d)
	if len(before) != services {
		t.Fatalf("%d tables written, want %d", len(before), services)
	}

	// Restart; service 7's table now differs, service 9's grows, 11 is
	// gone; 6's was replaced behind dlbd's back.
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if d, err = Open(Options{PinDir: pinDir, ConnTableSize: 4096}); err != nil {
		t.Fatal(err)
	}
	next := lb.Dataplane{}
	for _, s := range dp.Services {
		switch s.ID {
		case 7:
			s.Table = slices.Clone(s.Table)
			s.Table[3] = 8
		case 9:
			s.Table = fill(211, func(uint32) uint32 { return 9 })
		case 11:
			continue
		}
		s.TableSum = lb.TableSum(s.Table)
		next.Services = append(next.Services, s)
	}
	for _, b := range dp.Backends {
		if b.ID != 11 {
			next.Backends = append(next.Backends, b)
		}
	}
	if err := d.Apply(next); err != nil {
		t.Fatal(err)
	}
	after := tableIDs(t, d)
	for id, inner := range before {
		switch {
		case id == 11:
			if _, ok := after[id]; ok {
				t.Errorf("removed service 11 still has a table")
			}
		case id == 5 && !sysAdmin:
			// Not recorded in maglev_info, and not readable: rewritten.
			if after[id] == inner {
				t.Errorf("service 5: a table this dlbd could not check was kept")
			}
		case id == 6 || id == 7 || id == 9:
			if after[id] == inner {
				t.Errorf("service %d: changed table not rewritten", id)
			}
		case after[id] != inner:
			t.Errorf("service %d: unchanged table rewritten after the restart", id)
		}
	}
	var tables int
	for _, m := range d.Memory() {
		if m.Name == "maglev_tables" {
			tables = m.Tables
		}
	}
	if tables != services-1 {
		t.Errorf("Memory counts %d tables, want %d", tables, services-1)
	}
	ref, err := Open(Options{PinDir: newPinDir(t), ConnTableSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ref.Remove() })
	if err := ref.Apply(next); err != nil {
		t.Fatal(err)
	}
	if a, b := dumpMaps(t, d), dumpMaps(t, ref); a != b {
		t.Errorf("after the restart the maps differ from a fresh apply:\n--- restarted\n%s\n--- fresh\n%s", a, b)
	}
}

// TestPrivilegedStatsRead: the counters of many backends (read a batch at
// a time) and of a few (read one by one) come back as written, each
// summed over the CPUs, swept connections counted as finished.
func TestPrivilegedStatsRead(t *testing.T) {
	for _, c := range []struct{ n, step uint32 }{{5, 1000}, {5000, 1}} {
		n := c.n
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			testutil.RequirePrivileged(t)
			testutil.InNewNetNS(t)
			pinDir := newPinDir(t)
			d, err := Open(Options{PinDir: pinDir, ConnTableSize: 4096})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Remove() })
			var dp lb.Dataplane
			var ids []uint32
			for id := uint32(1); id <= n; id++ {
				// Sparse ids (looked up one by one), or dense ones
				// beyond one batch.
				bid := c.step*id + 10
				ids = append(ids, bid)
				dp.Backends = append(dp.Backends, lb.DataplaneBackend{ID: bid, Service: 1,
					Address: netip.AddrFrom4([4]byte{198, 19, byte(id >> 8), byte(id)}), MAC: mac(byte(id)), SrcMAC: ifaceMAC, Ifindex: 1})
			}
			s := lb.DataplaneService{ID: 1, Cluster: netip.MustParseAddr("198.18.0.100"), Port: 80, Protocol: lb.TCP,
				Table: fill(101, func(slot uint32) uint32 { return ids[int(slot)%len(ids)] })}
			s.TableSum = lb.TableSum(s.Table)
			dp.Services = []lb.DataplaneService{s}
			if err := d.Apply(dp); err != nil {
				t.Fatal(err)
			}
			cpus := ebpf.MustPossibleCPU()
			for _, id := range ids {
				// Each CPU's counters are in its row of backend_stats.
				stride := d.objs.Backends.MaxEntries()
				for c := range cpus {
					v := dispatcherCounters{Packets: uint64(id) + uint64(c), Bytes: 10 * uint64(id), FinConns: 1}
					if err := d.objs.BackendStats.Update(uint32(c)*stride+id, v, ebpf.UpdateAny); err != nil {
						t.Fatal(err)
					}
				}
				if err := d.objs.BackendSwept.Update(id, uint64(id%7), ebpf.UpdateAny); err != nil {
					t.Fatal(err)
				}
			}
			// backend_swept is dlbd's own: a restarted dlbd reads it
			// from the pins, and applying the same state keeps it.
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			if d, err = Open(Options{PinDir: pinDir, ConnTableSize: 4096}); err != nil {
				t.Fatal(err)
			}
			for _, when := range []string{"adopted", "applied"} {
				if when == "applied" {
					if err := d.Apply(dp); err != nil {
						t.Fatal(err)
					}
				}
				st, err := d.Stats()
				if err != nil {
					t.Fatal(err)
				}
				inUse := 0
				for _, c := range st.Backends {
					if c != (lb.Counters{}) {
						inUse++
					}
				}
				if inUse != len(ids) {
					t.Fatalf("%s: %d backends counted, want %d", when, inUse, len(ids))
				}
				for _, id := range ids {
					c := uint64(cpus)
					want := lb.Counters{Packets: c*uint64(id) + c*(c-1)/2, Bytes: c * 10 * uint64(id), FinConns: c + uint64(id%7)}
					if got := st.Backend(id); got != want {
						t.Fatalf("%s: backend %d: %+v, want %+v", when, id, got, want)
					}
				}
				if _, ok := st.Services[1]; !ok {
					t.Errorf("%s: no counters for service 1", when)
				}
			}
		})
	}
}

// TestPrivilegedVipCacheFollowsUpdates: each CPU keeps copies of the vips
// entries it used; an incremental update that removes a service, or
// changes one, is seen by the very next packet on a CPU that cached it.
func TestPrivilegedVipCacheFollowsUpdates(t *testing.T) {
	e := newTestEnv(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var one unix.CPUSet
	one.Set(0)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	syn := func(sport uint16) uint32 {
		ret, _ := e.run(t, tcpTo(vipTCP, 80, sport, "S").Build(t))
		return ret
	}
	if ret := syn(41000); ret != xdpTX {
		t.Fatalf("SYN to the service: %d, want XDP_TX", ret)
	}

	// The service's table shrinks to 101 slots: its vips entry, which
	// holds the size, is rewritten. A CPU that went on with its copy
	// would pick slots beyond the new table and find no server.
	s := e.service(1)
	if len(s.Table) <= 101 {
		t.Fatalf("the fixture's table has %d slots: nothing to shrink", len(s.Table))
	}
	first := s.Table[0]
	s.Table = fill(101, func(uint32) uint32 { return first })
	s.TableSum = lb.TableSum(s.Table)
	if err := e.dp.Update(lb.DataplaneUpdate{Services: []lb.DataplaneService{s}}); err != nil {
		t.Fatal(err)
	}
	for sport := uint16(41100); sport < 41120; sport++ {
		if ret := syn(sport); ret != xdpTX {
			t.Fatalf("SYN from port %d after the table shrank: %d, want XDP_TX", sport, ret)
		}
	}

	// The service goes: the next SYN is not balanced.
	u := lb.DataplaneUpdate{RemoveServices: []uint32{1}}
	for _, b := range e.state.Backends {
		if b.Service == 1 {
			u.RemoveBackends = append(u.RemoveBackends, b.ID)
		}
	}
	if err := e.dp.Update(u); err != nil {
		t.Fatal(err)
	}
	if ret := syn(41002); ret == xdpTX {
		t.Fatal("a SYN to a removed service was still forwarded: a CPU used its stale copy of the vips entry")
	}
}
