//go:build linux

package datapath

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
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
// backend 10, seen now).
func fillConns(t *testing.T, e *testEnv, n int) {
	t.Helper()
	const chunk = 4096
	now := coarseNow()
	for i := 0; i < n; i += chunk {
		m := min(chunk, n-i)
		keys := make([]dispatcherFlowKey, m)
		vals := make([]dispatcherFlow, m)
		for j := range keys {
			keys[j] = prefillKey(i + j).raw()
			vals[j] = dispatcherFlow{LastSeen: now, Backend: 10, Service: 1, State: uint8(dispatcherFlowStateFLOW_ESTABLISHED)}
		}
		if _, err := e.dp.objs.Conns.BatchUpdate(keys, vals, nil); err != nil {
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
	err := batchRead(e.dp.objs.Conns, func(k dispatcherFlowKey, _ dispatcherFlow) {
		switch {
		case isPrefill(k):
			prefilled++
		case !kept[k]:
			doomed = append(doomed, k)
		}
	})
	if err != nil {
		t.Fatalf("reading the connection table: %v", err)
	}
	for len(doomed) > 0 {
		m := min(4096, len(doomed))
		if _, err := e.dp.objs.Conns.BatchDelete(doomed[:m], nil); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Fatalf("resetting the connection table: %v", err)
		}
		doomed = doomed[m:]
	}
	if prefilled < n {
		fillConns(t, e, n)
	}
}

// countConns returns how many entries the connection table holds.
func countConns(t *testing.T, e *testEnv) int {
	t.Helper()
	n := 0
	if err := batchRead(e.dp.objs.Conns, func(dispatcherFlowKey, dispatcherFlow) { n++ }); err != nil {
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
	err := batchRead(e.dp.objs.NatFlows, func(k dispatcherFlowKey, f dispatcherNatFlow) {
		if k != kept && k.Src.Addr[3]&0x80 != 0 {
			doomed = append(doomed, pair{k, dispatcherNatKey{Addr: f.NatAddr, Port: f.NatPort, Proto: k.Proto, Family: k.Family}})
		}
	})
	if err != nil {
		t.Fatalf("reading nat_flows: %v", err)
	}
	for _, p := range doomed {
		if err := e.dp.objs.NatFlows.Delete(&p.fk); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Fatal(err)
		}
		if err := e.dp.objs.NatPorts.Delete(&p.nk); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Fatal(err)
		}
	}
}
