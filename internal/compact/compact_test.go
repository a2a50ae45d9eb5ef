package compact

import (
	"runtime"
	"testing"
)

// TestMap: a map that lost most of its entries is copied, and the copy
// holds the same entries; a map that lost few is kept as it is.
func TestMap(t *testing.T) {
	for _, c := range []struct {
		name          string
		size, removed int
		copied        bool
	}{
		{"most removed", 100_000, 99_000, true},
		{"all removed", 5000, 5000, true},
		{"few removed", 100_000, 1000, false},
		{"below the minimum", 1000, 1000, false},
		{"half removed", 4096, 2048, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := make(map[int]int, c.size)
			for i := range c.size {
				m[i] = i
			}
			for i := range c.removed {
				delete(m, i)
			}
			got := Map(m, c.removed)
			m[-1] = -1 // visible in got only if got is m
			_, same := got[-1]
			if same == c.copied {
				t.Fatalf("copied %v, want %v", !same, c.copied)
			}
			delete(m, -1)
			if len(got) != c.size-c.removed {
				t.Fatalf("%d entries, want %d", len(got), c.size-c.removed)
			}
			for k, v := range got {
				if k != v || k < c.removed {
					t.Fatalf("entry %d=%d", k, v)
				}
			}
		})
	}
}

// TestMapGivesMemoryBack: the copy of an emptied large map lets its
// buckets be collected.
func TestMapGivesMemoryBack(t *testing.T) {
	heap := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	base := heap()
	m := map[[4]uint64]bool{}
	for i := range 200_000 {
		m[[4]uint64{uint64(i)}] = true
	}
	for k := range m {
		delete(m, k)
	}
	kept := heap()
	m = Map(m, 200_000)
	freed := heap()
	runtime.KeepAlive(m)
	if kept-base < 4<<20 {
		t.Fatalf("the emptied map holds only %d bytes: nothing to measure", kept-base)
	}
	if freed-base > (kept-base)/10 {
		t.Errorf("after the copy %d bytes are held, before it %d", freed-base, kept-base)
	}
}
