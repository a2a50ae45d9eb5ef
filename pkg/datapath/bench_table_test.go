//go:build linux

package datapath

import (
	"net/netip"
	"os"
	"testing"

	"github.com/cilium/ebpf"
)

// The benchmark's view of the connection tables: filling them to a level,
// putting them back to it, counting entries.

// touchTables writes every page of the executor's tables once, leaving
// their contents as they are. A table in use has had every page written
// (its allocation cursor goes round the whole table); a table just
// created has not, and on a virtual machine whose host backs the guest's
// memory on first use (as these test machines do) the first write to
// each of its pages costs a fault in the host, about 18 µs here: over
// the first pass of the cursor that is some 400 ns more per connection
// (measured: BENCHMARKS.md, "Seventeenth session"). The benchmarks
// measure a table in use. The mapped arrays (entries, bitmaps, indexes)
// are written through their memory maps, 8 bytes per page rewritten with
// what they hold (nothing runs yet); the others, empty, are written with
// zeros.
func touchTables(t testing.TB, e *testEnv) {
	t.Helper()
	page := int64(os.Getpagesize())
	word := make([]byte, 8)
	for _, tb := range e.dp.tables() {
		for _, m := range []*ebpf.Map{tb.entries, tb.used, tb.index} {
			mem, err := m.Memory()
			if err != nil {
				t.Fatalf("%s: mapping %v: %v", tb.name, m, err)
			}
			for off := int64(0); off+8 <= int64(mem.Size()); off += page {
				if _, err := mem.ReadAt(word, off); err != nil {
					t.Fatalf("%s: reading %v at %d: %v", tb.name, m, off, err)
				}
				if _, err := mem.WriteAt(word, off); err != nil {
					t.Fatalf("%s: writing %v at %d: %v", tb.name, m, off, err)
				}
			}
		}
	}
	clearHalfOpen(t, e)
	e.forgetHandshakes(t)
	e.forgetNATHandshakes(t)
}

// benchCyclePool is how many NAT connections cycleTables makes at a time:
// three quarters of the benchmark return address's pool (64512 ports), so
// that SYNs find free ports among their first candidates.
const benchCyclePool = 48000

// cycleTables makes connections through prog until the allocation cursor
// of the connection table and of the NAT tables has gone round each table
// once (over the connection table's free entries: the allocation skips
// full bitmap words), then puts the tables back as they were (reset,
// natReset). A table in use has had each of its slots used and freed; a
// table just created has not, and an insert into a slot never used costs
// more: measured here, 130-150 ns more per NAT connection packet on pages
// already written (BENCHMARKS.md, "Seventeenth session"), a cause not
// found. The
// benchmarks measure a table in use. ack is an ACK (of a flow the table
// lacks) and natSyn a NAT SYN: the connection table is filled to 1024
// short of full twice; the NAT tables are filled benchCyclePool
// connections at a time, as one return address's pool allows, until as
// many as their capacity were made.
func cycleTables(t *testing.T, e *testEnv, b *benchRunner, prog *ebpf.Program, ack, natSyn []byte, reset, natReset func()) {
	t.Helper()
	info := e.dp.Info()
	// Twice nearly as many connections as the table has room for (none
	// evicted: the flows the benchmark keeps stay), each time put back.
	room := int(info.ConnTable) - countConns(t, e) - 1024
	if room < 1 {
		t.Fatalf("cycling the connection table: %d entries of %d", countConns(t, e), info.ConnTable)
	}
	conns := &benchCase{name: "cycling the connection table", target: prog, frame: ack, vary: benchNewFlow}
	for range 2 {
		b.run(conns, uint32(room))
		reset()
	}
	nat := &benchCase{name: "cycling the NAT tables", target: prog, frame: natSyn, vary: benchConnection}
	for made := uint64(0); made < uint64(info.NATTable); {
		before := e.stats(t).Events["halfopen_promoted"]
		b.run(nat, 2*benchCyclePool)
		n := e.stats(t).Events["halfopen_promoted"] - before
		if n < benchCyclePool/2 {
			t.Fatalf("cycling the NAT tables: %d of %d connections made", n, benchCyclePool)
		}
		made += n
		natReset()
		clearHalfOpen(t, e)
	}
}

// prefillKey is the i-th connection the benchmark prefills the table
// with: from 198.19.0.0/16, which no benchmark frame uses.
func prefillKey(i int) FlowKey {
	return FlowKey{Src: netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), Dst: vipTCP,
		SrcPort: 1024 + uint16(i>>16), DstPort: 80, Proto: 6}
}

func isPrefill(k dispatcherFlowKey) bool {
	return k.Family == 4 && k.Src.Addr[0] == 198 && k.Src.Addr[1] == 19
}

// fillConns writes the first n prefill connections (established, to
// backend 10, seen now) that the table lacks.
func fillConns(t *testing.T, e *testEnv, n int) {
	t.Helper()
	have := map[dispatcherFlowKey]bool{}
	if err := e.dp.eachConn(func(c dispatcherConnEntry) { have[c.Key] = true }); err != nil {
		t.Fatal(err)
	}
	now := coarseNow()
	for i := 0; i < n; i++ {
		k := prefillKey(i).raw()
		if have[k] {
			continue
		}
		f := dispatcherFlow{LastSeen: now, Backend: 10, Service: 1, State: uint8(dispatcherFlowStateFLOW_ESTABLISHED)}
		if err := e.dp.putConn(k, f); err != nil {
			t.Fatalf("prefilling the connection table: %v", err)
		}
	}
}

// resetConns puts the table back to its n prefill connections and the
// kept ones: it removes every other entry, and writes the prefill
// connections again if any is missing.
func resetConns(t *testing.T, e *testEnv, n int, keep ...FlowKey) {
	t.Helper()
	kept := map[dispatcherFlowKey]bool{}
	for _, k := range keep {
		kept[k.raw()] = true
	}
	var doomed []dispatcherFlowKey
	prefilled := 0
	err := e.dp.eachConn(func(c dispatcherConnEntry) {
		switch {
		case isPrefill(c.Key):
			prefilled++
		case !kept[c.Key]:
			doomed = append(doomed, c.Key)
		}
	})
	if err != nil {
		t.Fatalf("reading the connection table: %v", err)
	}
	for _, k := range doomed {
		if _, err := e.dp.deleteConn(k, 0); err != nil {
			t.Fatalf("resetting the connection table: %v", err)
		}
	}
	if prefilled < n {
		fillConns(t, e, n)
	}
}

// countConns returns how many entries the connection table holds.
func countConns(t *testing.T, e *testEnv) int {
	t.Helper()
	n := 0
	if err := e.dp.eachConn(func(dispatcherConnEntry) { n++ }); err != nil {
		t.Fatalf("counting connections: %v", err)
	}
	return n
}

// resetNAT removes the NAT connections of the new-connection case (their
// client addresses carry BENCH_CONN_MARK), keeping keep.
func resetNAT(t *testing.T, e *testEnv, keep FlowKey) {
	t.Helper()
	kept := keep.raw()
	type pair struct {
		fk dispatcherFlowKey
		nk dispatcherNatKey
	}
	var doomed []pair
	err := e.dp.eachNATFlow(func(k dispatcherFlowKey, f dispatcherNatFlow) {
		if k != kept && k.Src.Addr[3]&0x80 != 0 {
			doomed = append(doomed, pair{k, dispatcherNatKey{Addr: f.NatAddr, Port: f.NatPort, Proto: k.Proto, Family: k.Family}})
		}
	})
	if err != nil {
		t.Fatalf("reading nat_flows: %v", err)
	}
	for _, p := range doomed {
		if _, err := e.dp.deleteNATFlow(p.fk, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := e.dp.deleteNATPort(p.nk, 0); err != nil {
			t.Fatal(err)
		}
	}
}
