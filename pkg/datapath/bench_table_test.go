//go:build linux

package datapath

import (
	"net/netip"
	"testing"
)

// The benchmark's view of the connection tables: filling them to a level,
// putting them back to it, counting entries.

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
