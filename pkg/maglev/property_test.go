package maglev

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// sizes are the table sizes the properties draw from, small ones included
// so that rounding to zero slots and full tables are exercised.
var sizes = []uint32{2, 13, 251, 1021, 4093, DefaultSize}

// genBackends draws a valid set of 1..200 backends with distinct non-empty
// keys, distinct IDs and weights 0..20.
func genBackends(t *rapid.T) []Backend {
	keys := rapid.SliceOfNDistinct(rapid.StringN(1, 24, -1), 1, 200, rapid.ID).Draw(t, "keys")
	ids := rapid.SliceOfNDistinct(rapid.Uint32(), len(keys), len(keys), rapid.ID).Draw(t, "ids")
	weights := rapid.SliceOfN(rapid.Uint32Range(0, 20), len(keys), len(keys)).Draw(t, "weights")
	bs := make([]Backend, len(keys))
	for i := range bs {
		bs[i] = Backend{Key: keys[i], ID: ids[i], Weight: weights[i]}
	}
	return bs
}

// genSize draws a prime table size with room for bs's positive-weight
// backends.
func genSize(t *rapid.T, bs []Backend) uint32 {
	live := 0
	for _, b := range bs {
		if b.Weight > 0 {
			live++
		}
	}
	fit := slices.DeleteFunc(slices.Clone(sizes), func(m uint32) bool { return int(m) < live })
	return rapid.SampledFrom(fit).Draw(t, "m")
}

func hasWeight(bs []Backend) bool {
	return slices.ContainsFunc(bs, func(b Backend) bool { return b.Weight > 0 })
}

func TestPropOrderIndependent(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		bs := genBackends(t)
		m := genSize(t, bs)
		shuffled := rapid.Permutation(bs).Draw(t, "shuffled")
		want, err := Build(bs, m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Build(shuffled, m)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("shuffling the input changed %.4f of the table", movedFraction(got, want))
		}
	})
}

func TestPropQuotas(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		bs := genBackends(t)
		m := genSize(t, bs)
		table, err := Build(bs, m)
		if err != nil {
			t.Fatal(err)
		}
		if !hasWeight(bs) {
			if table != nil {
				t.Fatalf("no positive weight, but Build returned %d slots", len(table))
			}
			return
		}
		// Every slot is owned by a positive-weight backend, each in
		// its quota.
		checkQuotas(t, bs, m, table)
	})
}

func TestPropDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		bs := genBackends(t)
		m := genSize(t, bs)
		orig := slices.Clone(bs)
		first, err := Build(bs, m)
		if err != nil {
			t.Fatal(err)
		}
		second, err := Build(bs, m)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(first, second) {
			t.Fatal("two builds of the same input differ")
		}
		if !slices.Equal(bs, orig) {
			t.Fatal("Build modified its input")
		}
	})
}

// TestPropDisruption checks the removal and addition bounds of TestDisruption
// on random keys.
func TestPropDisruption(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		keys := rapid.SliceOfNDistinct(rapid.StringN(1, 24, -1), 4, 201, rapid.ID).Draw(t, "keys")
		bs := make([]Backend, len(keys))
		for i, k := range keys {
			bs[i] = Backend{Key: k, ID: uint32(i), Weight: 1}
		}
		// The last key is the one added.
		n := len(bs) - 1
		base := bs[:n]
		full, err := Build(base, DefaultSize)
		if err != nil {
			t.Fatal(err)
		}
		gone := rapid.IntRange(0, n-1).Draw(t, "removed")
		removed, err := Build(without(base, base[gone].Key), DefaultSize)
		if err != nil {
			t.Fatal(err)
		}
		if moved, bound := movedFraction(full, removed), 1/float64(n)+0.01; moved > bound {
			t.Fatalf("removing 1 of %d moved %.4f of slots, bound %.4f", n, moved, bound)
		}
		added, err := Build(bs, DefaultSize)
		if err != nil {
			t.Fatal(err)
		}
		if moved, bound := movedFraction(full, added), 1/float64(n+1)+0.01; moved > bound {
			t.Fatalf("adding 1 to %d moved %.4f of slots, bound %.4f", n, moved, bound)
		}
	})
}

// TestPropArbitraryInput feeds Build inputs that are often invalid (empty
// or repeated keys and IDs, composite sizes): it must return an error or a
// valid table, never panic.
func TestPropArbitraryInput(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 12).Draw(t, "n")
		bs := make([]Backend, n)
		for i := range bs {
			bs[i] = Backend{
				Key:    rapid.SampledFrom([]string{"", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"}).Draw(t, fmt.Sprint("key", i)),
				ID:     rapid.Uint32Range(0, 40).Draw(t, fmt.Sprint("id", i)),
				Weight: rapid.SampledFrom([]uint32{0, 1, 7, 1 << 31, 1<<32 - 1}).Draw(t, fmt.Sprint("weight", i)),
			}
		}
		m := rapid.OneOf(rapid.SampledFrom([]uint32{2, 3, 5, 7, 13, 101, 251}), rapid.Uint32Range(0, 300)).Draw(t, "m")
		table, err := Build(bs, m)
		if err != nil {
			if table != nil {
				t.Fatalf("Build returned a table with error %v", err)
			}
			return
		}
		if !hasWeight(bs) {
			if table != nil {
				t.Fatalf("no positive weight, but Build returned %d slots", len(table))
			}
			return
		}
		checkQuotas(t, bs, m, table)
	})
}
