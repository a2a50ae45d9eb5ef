package datapath

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestPrivilegedReadCounters reads counters of a per-CPU array both ways
// readIDs does: a few sparse ids one lookup each, many dense ones in
// batches (beyond one batch of 4,096), and only the ids asked for.
func TestPrivilegedReadCounters(t *testing.T) {
	testutil.RequirePrivileged(t)
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4,
		ValueSize: 32, MaxEntries: 20000})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for id := uint32(0); id < 20000; id++ {
		per := make([]dispatcherCounters, cpus)
		for c := range per {
			per[c] = dispatcherCounters{Packets: uint64(id), Bytes: uint64(c + 1), NewConns: 1, FinConns: uint64(id % 3)}
		}
		if err := m.Update(id, per, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
	}
	sparse := map[uint32]bool{3: true, 5000: true, 19999: true}
	dense := map[uint32]bool{}
	for id := uint32(1); id <= 9000; id++ {
		if id != 77 { // one hole: not reported
			dense[id] = true
		}
	}
	for name, ids := range map[string]map[uint32]bool{"sparse": sparse, "dense": dense} {
		t.Run(name, func(t *testing.T) {
			got := map[uint32]lb.Counters{}
			if err := readCounters(m, ids, func(id uint32, c lb.Counters) { got[id] = c }); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(ids) {
				t.Fatalf("%d ids read, want %d", len(got), len(ids))
			}
			for id := range ids {
				want := lb.Counters{Packets: uint64(id) * uint64(cpus), Bytes: uint64(cpus * (cpus + 1) / 2),
					NewConns: uint64(cpus), FinConns: uint64(id%3) * uint64(cpus)}
				if got[id] != want {
					t.Fatalf("id %d: %+v, want %+v", id, got[id], want)
				}
			}
		})
	}
}

// TestHandshakeAge: the age of a handshake-cache entry, whose time is the
// clock in 2^20 ns units modulo 2^32, across the wrap of those units and
// for entries stamped after the sweep read the clock.
func TestHandshakeAge(t *testing.T) {
	const unit = 1 << handshakeSeenShift
	for _, tc := range []struct {
		name      string
		now, seen uint32
		want      uint64
	}{
		{"just now", 7, 7, 0},
		{"a thousand units ago", 5000, 4000, 1000 * unit},
		{"across the wrap", 3, 0xfffffffe, 5 * unit},
		{"stamped after the clock was read", 100, 105, 0},
		{"at boot (1 stands for 0)", 0, 1, 0},
		{"half the range ago", 1 << 31, 1, (1<<31 - 1) * unit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := handshakeAge(tc.now, tc.seen); got != tc.want {
				t.Errorf("handshakeAge(%d, %d) = %d, want %d", tc.now, tc.seen, got, tc.want)
			}
		})
	}
}
