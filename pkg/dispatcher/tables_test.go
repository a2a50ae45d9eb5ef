package dispatcher

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/maglev"
)

// TestBuildTablesSharesLayouts: ports of the same servers and weights
// share one Maglev layout, and each table is the one maglev.Build makes
// of its own members: their ids in their slots, whatever the others'.
func TestBuildTablesSharesLayouts(t *testing.T) {
	pool := func(ids []uint32, weights ...uint32) []maglev.Backend {
		var ms []maglev.Backend
		for i, w := range weights {
			ms = append(ms, maglev.Backend{Key: fmt.Sprintf("198.18.0.%d", 21+i), ID: ids[i], Weight: w})
		}
		return ms
	}
	const m = 251
	var jobs []tableJob
	for sid := range uint32(40) {
		var members []maglev.Backend
		switch sid % 4 {
		case 0, 1: // one pool, the same weights: one layout
			members = pool([]uint32{100 + sid, 200 + sid, 300 + sid}, 10, 10, 5)
		case 2: // the pool with other weights, one of them 0
			members = pool([]uint32{100 + sid, 200 + sid, 300 + sid}, 0, 3, 10)
		case 3: // another pool, listed in another order
			members = pool([]uint32{400 + sid, 500 + sid}, 7, 9)
			slices.Reverse(members)
		}
		if sid == 39 {
			members = nil // no server takes new connections
		}
		jobs = append(jobs, tableJob{sid: sid, members: members, size: m, fp: fingerprint(members, m)})
	}
	want := make(map[uint32][]uint32)
	for _, j := range jobs {
		if j.members == nil {
			continue
		}
		slots, err := maglev.Build(j.members, j.size)
		if err != nil {
			t.Fatal(err)
		}
		want[j.sid] = slots
	}
	e := &Engine{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	e.exec.tables = map[uint32]table{}
	e.buildTables(jobs)
	for _, j := range jobs {
		got := e.exec.tables[j.sid]
		if got.fingerprint != j.fp {
			t.Errorf("service %d: table cached under another fingerprint", j.sid)
		}
		if !slices.Equal(got.slots, want[j.sid]) {
			t.Fatalf("service %d: table differs from maglev.Build's of its members", j.sid)
		}
		if got.slots != nil && got.sum != lb.TableSum(got.slots) {
			t.Errorf("service %d: sum %x, want %x", j.sid, got.sum, lb.TableSum(got.slots))
		}
	}
}
