package datapath

import "testing"

// TestBitset: ids set and cleared in any order; top follows the largest.
func TestBitset(t *testing.T) {
	var b bitset
	steps := []struct {
		id      uint32
		on      bool
		wantTop uint32
	}{
		{5, true, 5}, {64, true, 64}, {63, true, 64}, {100000, true, 100000},
		{100000, false, 64}, {64, false, 63}, {7000, false, 63}, {0, true, 63},
		{63, false, 5}, {5, false, 0}, {0, false, 0},
	}
	for i, s := range steps {
		b.set(s.id, s.on)
		if b.has(s.id) != s.on {
			t.Fatalf("step %d: has(%d) = %v", i, s.id, !s.on)
		}
		if top := b.top(); top != s.wantTop {
			t.Fatalf("step %d: top %d, want %d", i, top, s.wantTop)
		}
	}
	if b.has(1 << 30) {
		t.Error("has an id beyond its words")
	}
}
