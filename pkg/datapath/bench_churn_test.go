//go:build linux

package datapath

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// benchChurnCheckpoints are the points, in connections made per table
// capacity, at which TestBenchChurn measures.
var benchChurnCheckpoints = []int{0, 1, 2, 5, 10, 20}

// TestBenchChurn measures a connection table that stays full while
// connections come and go (each new one evicts an old one), for the
// objects DLB_BENCH_CHURN names, comma-separated ("-" is the committed
// one; any other is read as an executor of ABI 6, whose buckets marked a
// class of keys sent to their second bucket with a flag never cleared).
// Each object gets a table of its own, filled through it with ACKs of new
// flows, then as many again, table after table; at each checkpoint it
// reports the share of lookups that miss a key's first bucket and then
// read its second (from the index's counts or flags: a miss's class and
// first bucket taken as uniform) and the cost of a SYN from a new source
// (a flood's SYN), as the report computes costs.
func TestBenchChurn(t *testing.T) {
	list := os.Getenv("DLB_BENCH_CHURN")
	if list == "" {
		t.Skip("churning tables: set DLB_BENCH_CHURN=a.o,b.o (- is the committed object)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the churn benchmark needs root (BPF_PROG_TEST_RUN of XDP programs, network namespaces)")
	}
	var out strings.Builder
	for _, path := range strings.Split(list, ",") {
		t.Run(path, func(t *testing.T) {
			e := newBenchEnv(t)
			pinToOneCPU(t)
			objs := openBenchObjects(t)
			b := &benchRunner{t: t, objs: objs}
			prog, counts := e.dp.objs.DlbXdp, true
			if path != "-" {
				prog, counts = loadVariant(t, path, e.pinDir), false
			}
			capacity := e.dp.Info().ConnTable
			fill := &benchCase{name: "churning", target: prog, frame: benchTCPFrame(t, 1, "A"), vary: benchNewFlow, want: xdpTX}
			syn := &benchCase{name: "SYN, full table", target: prog, frame: benchTCPFrame(t, 1, "S"), vary: benchNewFlow,
				repeat: 1_000_000, want: xdpTX}
			pass := &benchCase{name: "wrapper(vary)→pass", target: objs.BenchPass, frame: syn.frame, vary: benchNewFlow,
				repeat: 1_000_000, want: xdpPass}
			bare := &benchCase{name: "bare XDP_PASS", frame: syn.frame, repeat: 1_000_000, want: xdpPass}
			b.run(fill, capacity)
			made, first := 0, -1.0
			fmt.Fprintf(&out, "%s (capacity %d)\n  %-28s %-22s %s\n", path, capacity, "connections made after full",
				"misses reading 2 lines", "SYN ns (flood)")
			for _, cp := range benchChurnCheckpoints {
				for ; made < cp; made++ {
					b.run(fill, capacity)
				}
				share := secondReadShare(t, e, counts)
				if first < 0 {
					first = share
				}
				// The counts follow the keys: the share stays that of
				// a table just filled (not some fixed figure).
				if counts && share > first+0.01 {
					t.Errorf("after %d × capacity: %.1f %% of misses read two lines, %.1f %% when the table was filled",
						cp, 100*share, 100*first)
				}
				var costs []float64
				for range 5 {
					costs = append(costs, b.measure(syn)-b.measure(pass)+b.measure(bare))
				}
				fmt.Fprintf(&out, "  %-28s %-22s %.1f\n", fmt.Sprintf("%d × capacity", cp),
					fmt.Sprintf("%.1f %%", 100*share), median(costs))
			}
		})
	}
	t.Log("\n" + out.String())
}

// secondReadShare returns the share of lookups missing from their first
// bucket that read their second: of the (bucket, class) pairs, those whose
// bucket counts (counts) or flags (ABI 6) keys of the class in their
// second bucket.
func secondReadShare(t *testing.T, e *testEnv, counts bool) float64 {
	t.Helper()
	idx := e.dp.objs.ConnIndex
	nb := idx.MaxEntries()
	set := 0
	for n := uint32(0); n < nb; n++ {
		var bk dispatcherTabBucket
		if err := idx.Lookup(n, &bk); err != nil {
			t.Fatal(err)
		}
		for c := uint64(0); c < 16; c++ {
			if counts && bk.Meta>>(uint64(dispatcherTabFlagsTAB_SPILL_SHIFT)+3*c)&7 != 0 ||
				!counts && bk.Meta>>(16+c)&1 != 0 {
				set++
			}
		}
	}
	return float64(set) / float64(16*nb)
}
