package maglev

import (
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// referenceBuild builds the table the way the package documentation
// specifies it, plainly and slowly, with none of Build's shortcuts (weight
// groups, the priority queue, skipping taken slots, Barrett and Shoup
// reduction, the bitmap). It takes valid input only, and is meant for small
// m: it is O(m^2) in places.
func referenceBuild(backends []Backend, m uint32) []uint32 {
	bs := slices.Clone(backends)
	slices.SortFunc(bs, func(a, b Backend) int { return strings.Compare(a.Key, b.Key) })
	bs = slices.DeleteFunc(bs, func(b Backend) bool { return b.Weight == 0 })
	if len(bs) == 0 {
		return nil
	}
	M := uint64(m)

	// Largest remainder: floors, then one more slot each for the largest
	// remainders, ties to the smaller key.
	var total uint64
	for _, b := range bs {
		total += uint64(b.Weight)
	}
	quota := make([]uint64, len(bs))
	byRemainder := make([]int, len(bs))
	left := M
	for i, b := range bs {
		quota[i] = M * uint64(b.Weight) / total
		left -= quota[i]
		byRemainder[i] = i
	}
	slices.SortStableFunc(byRemainder, func(i, j int) int {
		ri, rj := M*uint64(bs[i].Weight)%total, M*uint64(bs[j].Weight)%total
		switch {
		case ri > rj:
			return -1
		case ri < rj:
			return 1
		}
		return 0
	})
	for _, i := range byRemainder[:left] {
		quota[i]++
	}

	// The smallest g whose powers reach every nonzero residue.
	root := uint64(1)
	for g := uint64(2); M > 2; g++ {
		seen, x := 0, uint64(1)
		for {
			x = x * g % M
			seen++
			if x == 1 {
				break
			}
		}
		if seen == int(M-1) {
			root = g
			break
		}
	}
	pow := func(a, e uint64) uint64 {
		r := uint64(1)
		for range e {
			r = r * a % M
		}
		return r
	}
	gcd := func(a, b uint64) uint64 {
		for b != 0 {
			a, b = b, a%b
		}
		return a
	}
	// slotAt[i][p] is the slot at position p of backend i's permutation.
	slotAt := make([][]uint64, len(bs))
	for i, b := range bs {
		center := keyHash("dlb-maglev-center\x00", b.Key) % M
		start := keyHash("dlb-maglev-start\x00", b.Key)%(M-1) + 1
		e := keyHash("dlb-maglev-ratio\x00", b.Key) % (M - 1)
		for gcd(e, M-1) != 1 {
			e = (e + 1) % (M - 1)
		}
		ratio := pow(root, e)
		slotAt[i] = make([]uint64, M)
		slotAt[i][0] = center
		y := start
		for p := uint64(1); p < M; p++ {
			y = y * ratio % M
			slotAt[i][p] = (center + y) % M
		}
	}

	// Visits in time order: position p of backend i comes at time
	// (2p+1)/(2w); at equal times the heavier backend first, then the
	// smaller key. A backend stops at its quota.
	table := make([]uint32, m)
	owned := make([]bool, m)
	pos := make([]uint64, len(bs))
	count := make([]uint64, len(bs))
	for filled := uint64(0); filled < M; {
		next := -1
		for i, b := range bs {
			if count[i] == quota[i] {
				continue
			}
			if next < 0 {
				next = i
				continue
			}
			// (2p+1)/(2w) < (2q+1)/(2v)  <=>  (2p+1)*v < (2q+1)*w; the
			// weights in the tests keep these products small.
			ti := (2*pos[i] + 1) * uint64(bs[next].Weight)
			tn := (2*pos[next] + 1) * uint64(b.Weight)
			if ti < tn || ti == tn && b.Weight > bs[next].Weight {
				next = i
			}
		}
		s := slotAt[next][pos[next]]
		if !owned[s] {
			owned[s] = true
			table[s] = bs[next].ID
			count[next]++
			filled++
		}
		pos[next]++
	}
	return table
}

// TestReference checks Build against referenceBuild, the package
// documentation's specification done the slow way.
func TestReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		keys := rapid.SliceOfNDistinct(rapid.StringN(1, 8, -1), 1, 40, rapid.ID).Draw(t, "keys")
		weights := rapid.SliceOfN(rapid.Uint32Range(0, 30), len(keys), len(keys)).Draw(t, "weights")
		bs := make([]Backend, len(keys))
		for i := range bs {
			bs[i] = Backend{Key: keys[i], ID: uint32(i), Weight: weights[i]}
		}
		fit := slices.DeleteFunc([]uint32{2, 3, 5, 13, 101, 251, 1021}, func(m uint32) bool { return int(m) < len(bs) })
		m := rapid.SampledFrom(fit).Draw(t, "m")
		want := referenceBuild(bs, m)
		got, err := Build(bs, m)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Build differs from the reference in %.4f of %d slots\ngot  %v\nwant %v", movedFraction(got, want), m, got, want)
		}
	})
}

// TestReferenceLarger checks Build against referenceBuild on sets larger
// than the random ones above usually are.
func TestReferenceLarger(t *testing.T) {
	distinct := equalBackends(60)
	for i := range distinct {
		distinct[i].Weight = uint32(i + 1)
	}
	sparse := randomBackends(50, 7)
	for i := range sparse {
		if i%3 == 0 {
			sparse[i].Weight = 0
		}
	}
	tests := []struct {
		name     string
		backends []Backend
		m        uint32
	}{
		{"30 weights 1..20", randomBackends(30, 30), 1021},
		{"100 equal", equalBackends(100), 4093},
		{"60 distinct weights", distinct, 4093},
		{"50 with zero weights", sparse, 2053},
		{"251 equal in 251 slots", equalBackends(251), 251},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Build(tt.backends, tt.m)
			if err != nil {
				t.Fatal(err)
			}
			if want := referenceBuild(tt.backends, tt.m); !slices.Equal(got, want) {
				t.Errorf("Build differs from the reference in %.4f of %d slots", movedFraction(got, want), tt.m)
			}
		})
	}
}
