package maglev

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// serverKey returns a realistic backend key: cluster@port@server, with
// server addresses from the benchmarking range 198.18.0.0/15.
func serverKey(i int) string {
	return fmt.Sprintf("198.18.0.100@80@198.%d.%d.%d", 18+i/62500, i/250%250, i%250+1)
}

// equalBackends returns n backends of weight 1.
func equalBackends(n int) []Backend {
	bs := make([]Backend, n)
	for i := range bs {
		bs[i] = Backend{Key: serverKey(i), ID: uint32(1000 + i), Weight: 1}
	}
	return bs
}

// randomBackends returns n backends with weights 1..20 drawn from a fixed
// seed, so a failure reproduces.
func randomBackends(n int, seed uint64) []Backend {
	r := rand.New(rand.NewPCG(seed, 0x6d61676c6576))
	bs := equalBackends(n)
	for i := range bs {
		bs[i].Weight = uint32(r.IntN(20)) + 1
	}
	return bs
}

// counts returns how many slots each ID owns.
func counts(table []uint32) map[uint32]int {
	c := make(map[uint32]int)
	for _, id := range table {
		c[id]++
	}
	return c
}

// movedFraction returns the fraction of slots whose owner differs.
func movedFraction(a, b []uint32) float64 {
	moved := 0
	for i := range a {
		if a[i] != b[i] {
			moved++
		}
	}
	return float64(moved) / float64(len(a))
}

// without returns bs without the backend with key.
func without(bs []Backend, key string) []Backend {
	return slices.DeleteFunc(slices.Clone(bs), func(b Backend) bool { return b.Key == key })
}

// tester is what the checks need of a *testing.T or a *rapid.T.
type tester interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// checkQuotas fails t unless table has m slots, each owned by a backend
// with positive weight, and every backend owns floor or ceil of its exact
// quota m*w/W.
func checkQuotas(t tester, bs []Backend, m uint32, table []uint32) {
	t.Helper()
	if len(table) != int(m) {
		t.Fatalf("table has %d slots, want %d", len(table), m)
	}
	var total uint64
	for _, b := range bs {
		total += uint64(b.Weight)
	}
	c := counts(table)
	owned := 0
	for _, b := range bs {
		got := uint64(c[b.ID])
		if b.Weight == 0 {
			if got != 0 {
				t.Errorf("backend %q has weight 0 but owns %d slots", b.Key, got)
			}
			continue
		}
		owned += c[b.ID]
		// floor(m*w/W) <= got <= ceil(m*w/W), that is |got*W - m*w| < W.
		exact := uint64(m) * uint64(b.Weight)
		if got*total+total <= exact || got*total >= exact+total {
			t.Errorf("backend %q (weight %d of %d) owns %d slots, want %.3f rounded down or up", b.Key, b.Weight, total, got, float64(exact)/float64(total))
		}
	}
	if owned != int(m) {
		t.Errorf("backends with positive weight own %d slots, want all %d", owned, m)
	}
}

// checkShares is checkQuotas, and also checks that each backend's share of
// slots is within one percentage point of its share of the weight.
func checkShares(t tester, bs []Backend, m uint32, table []uint32) {
	t.Helper()
	checkQuotas(t, bs, m, table)
	var total uint64
	for _, b := range bs {
		total += uint64(b.Weight)
	}
	c := counts(table)
	for _, b := range bs {
		share, want := float64(c[b.ID])/float64(m), float64(b.Weight)/float64(total)
		if math.Abs(share-want) > 0.01 {
			t.Errorf("backend %q owns %.4f of slots, weight share is %.4f", b.Key, share, want)
		}
	}
}

func TestBuildErrors(t *testing.T) {
	three := []Backend{{Key: "a", ID: 1, Weight: 1}, {Key: "b", ID: 2, Weight: 1}, {Key: "c", ID: 3, Weight: 1}}
	tests := []struct {
		name     string
		backends []Backend
		m        uint32
		want     string // the error message must contain this
	}{
		{"size 0", three, 0, "size 0 is not prime"},
		{"size 1", three, 1, "size 1 is not prime"},
		{"even size", three, 65536, "size 65536 is not prime"},
		{"odd composite size", three, 65535, "size 65535 is not prime"},
		{"square of a prime", three, 251 * 251, "is not prime"},
		{"not prime without backends", nil, 100, "size 100 is not prime"},
		{"size below backend count", three, 2, "size 2 is smaller than the number of backends with positive weight (3)"},
		{"duplicate key", []Backend{{Key: "a", ID: 1, Weight: 1}, {Key: "b", ID: 2, Weight: 1}, {Key: "a", ID: 3, Weight: 1}}, 13, `duplicate key "a"`},
		{"duplicate key at weight 0", []Backend{{Key: "a", ID: 1, Weight: 1}, {Key: "a", ID: 2}}, 13, `duplicate key "a"`},
		{"duplicate id", []Backend{{Key: "a", ID: 7, Weight: 1}, {Key: "b", ID: 2, Weight: 1}, {Key: "c", ID: 7, Weight: 1}}, 13, `duplicate id 7 (keys "a" and "c")`},
		{"duplicate id at weight 0", []Backend{{Key: "a", ID: 7, Weight: 1}, {Key: "b", ID: 7}}, 13, "duplicate id 7"},
		{"empty key", []Backend{{Key: "a", ID: 1, Weight: 1}, {Key: "", ID: 2, Weight: 1}}, 13, "backend 1 (id 2) has an empty key"},
		{"empty key at weight 0", []Backend{{Key: "", ID: 2}}, 13, "empty key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table, err := Build(tt.backends, tt.m)
			if err == nil {
				t.Fatalf("Build(m=%d) = table of %d slots, want error containing %q", tt.m, len(table), tt.want)
			}
			if table != nil {
				t.Errorf("Build returned a table of %d slots with error %v", len(table), err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Build error = %q, want it to contain %q", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "building maglev table: ") {
				t.Errorf("Build error = %q, want prefix %q", err, "building maglev table: ")
			}
		})
	}
}

func TestBuildNoPositiveWeight(t *testing.T) {
	for _, bs := range [][]Backend{nil, {}, {{Key: "a", ID: 1}, {Key: "b", ID: 2}}} {
		table, err := Build(bs, DefaultSize)
		if table != nil || err != nil {
			t.Errorf("Build(%v) = (%d slots, %v), want (nil, nil)", bs, len(table), err)
		}
	}
}

func TestBuildSmallestSizes(t *testing.T) {
	// m equal to the number of backends: each owns exactly one slot.
	bs := []Backend{{Key: "a", ID: 1, Weight: 1}, {Key: "b", ID: 2, Weight: 1}}
	table, err := Build(bs, 2)
	if err != nil {
		t.Fatal(err)
	}
	if c := counts(table); c[1] != 1 || c[2] != 1 {
		t.Errorf("Build(m=2) = %v, want one slot each", table)
	}
	// A positive weight whose quota rounds to 0 gets no slot: 2*1/6 = 0.33.
	bs[0].Weight = 5
	table, err = Build(bs, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(table, []uint32{1, 1}) {
		t.Errorf("Build(weights 5 and 1, m=2) = %v, want [1 1]", table)
	}
	table, err = Build(bs[:1], 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(table, []uint32{1, 1}) {
		t.Errorf("Build(one backend, m=2) = %v, want [1 1]", table)
	}
}

func TestBuildExtremeWeights(t *testing.T) {
	// Weights at the top of the range must not overflow the quota or the
	// step-time arithmetic; the light backend's quota rounds to 0 or 1.
	bs := []Backend{
		{Key: "heavy", ID: 1, Weight: math.MaxUint32},
		{Key: "heavy2", ID: 2, Weight: math.MaxUint32 - 1},
		{Key: "light", ID: 3, Weight: 1},
	}
	table, err := Build(bs, 1021)
	if err != nil {
		t.Fatal(err)
	}
	checkQuotas(t, bs, 1021, table)
}

func TestBuildDoesNotModifyInput(t *testing.T) {
	bs := randomBackends(50, 1)
	slices.Reverse(bs)
	bs[3].Weight = 0
	orig := slices.Clone(bs)
	if _, err := Build(bs, DefaultSize); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(bs, orig) {
		t.Error("Build modified its input")
	}
}

func TestQuotaTiesGoToSmallerKey(t *testing.T) {
	// 5 slots over 3 equal backends: 1 each plus 2 left over with equal
	// remainders, which go to the two smallest keys.
	bs := []Backend{{Key: "c", ID: 3, Weight: 1}, {Key: "a", ID: 1, Weight: 1}, {Key: "b", ID: 2, Weight: 1}}
	table, err := Build(bs, 5)
	if err != nil {
		t.Fatal(err)
	}
	c := counts(table)
	if c[1] != 2 || c[2] != 2 || c[3] != 1 {
		t.Errorf("slot counts a=%d b=%d c=%d, want 2 2 1", c[1], c[2], c[3])
	}
}

func TestShares(t *testing.T) {
	for _, n := range []int{3, 4, 7, 10, 50, 100, 333, 1000} {
		for _, weights := range []string{"equal", "random"} {
			t.Run(fmt.Sprintf("N=%d/%s", n, weights), func(t *testing.T) {
				bs := equalBackends(n)
				if weights == "random" {
					bs = randomBackends(n, uint64(n))
				}
				table, err := Build(bs, DefaultSize)
				if err != nil {
					t.Fatal(err)
				}
				checkShares(t, bs, DefaultSize, table)
			})
		}
	}
}

// TestDisruption checks the consistent-hashing bound: removing one of N
// equal backends moves at most 1/N + 1% of slots (its own slots included),
// adding one at most 1/(N+1) + 1%.
func TestDisruption(t *testing.T) {
	for _, n := range []int{3, 5, 10, 50, 100, 200, 400, 500, 700, 1000} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			bs := equalBackends(n)
			keys := make([]string, n)
			for i, b := range bs {
				keys[i] = b.Key
			}
			slices.Sort(keys)
			full, err := Build(bs, DefaultSize)
			if err != nil {
				t.Fatal(err)
			}

			removeBound := 1/float64(n) + 0.01
			worstRemove := 0.0
			for _, key := range []string{keys[0], keys[n/2], keys[n-1]} {
				table, err := Build(without(bs, key), DefaultSize)
				if err != nil {
					t.Fatal(err)
				}
				moved := movedFraction(full, table)
				if moved > removeBound {
					t.Errorf("removing %q moved %.4f of slots, bound %.4f", key, moved, removeBound)
				}
				worstRemove = max(worstRemove, moved)
			}

			addBound := 1/float64(n+1) + 0.01
			added := append(slices.Clone(bs), Backend{Key: "198.18.0.100@80@198.19.255.254", ID: 1, Weight: 1})
			table, err := Build(added, DefaultSize)
			if err != nil {
				t.Fatal(err)
			}
			moved := movedFraction(full, table)
			if moved > addBound {
				t.Errorf("adding a backend moved %.4f of slots, bound %.4f", moved, addBound)
			}
			t.Logf("N=%4d remove: worst %.4f (ideal %.4f, bound %.4f); add: %.4f (ideal %.4f, bound %.4f)",
				n, worstRemove, 1/float64(n), removeBound, moved, 1/float64(n+1), addBound)
		})
	}
}

// TestDisruptionWeightChange checks that raising one backend's weight by one
// moves little more than the slots its quota gains.
func TestDisruptionWeightChange(t *testing.T) {
	bs := randomBackends(10, 10)
	before, err := Build(bs, DefaultSize)
	if err != nil {
		t.Fatal(err)
	}
	beforeCounts := counts(before)
	for i, b := range bs {
		t.Run(b.Key, func(t *testing.T) {
			changed := slices.Clone(bs)
			changed[i].Weight++
			after, err := Build(changed, DefaultSize)
			if err != nil {
				t.Fatal(err)
			}
			delta := math.Abs(float64(counts(after)[b.ID] - beforeCounts[b.ID]))
			bound := delta/DefaultSize + 0.01
			moved := movedFraction(before, after)
			if moved > bound {
				t.Errorf("weight %d -> %d moved %.4f of slots, bound %.4f", b.Weight, b.Weight+1, moved, bound)
			}
			t.Logf("weight %2d -> %2d: quota +%4.0f slots, moved %.4f (ideal %.4f, bound %.4f)",
				b.Weight, b.Weight+1, delta, moved, delta/DefaultSize, bound)
		})
	}
}

// TestGolden pins the table for a small input, so that any change to the
// hash or the algorithm, which would make dispatchers of different versions
// disagree, fails here.
//
// Quotas: 13*{1,2,3}/6 = 2.17, 4.33, 6.5; the floors 2+4+6 leave one slot
// for the largest remainder, c's, so a, b and c own 2, 4 and 7 slots. At
// m = 13 (primitive root 2) the permutations are
//
//	a (weight 1): 7 5 6 0 10 2 11 9 8 1 4 12 3   center 7, start 9, ratio 7
//	b (weight 2): 6 11 10 4 7 12 3 1 2 8 5 0 9   center 6, start 3, ratio 6
//	c (weight 3): 8 6 9 1 5 3 4 10 7 2 11 0 12   center 8, start 4, ratio 6
//
// and position p comes at time (2p+1)/(2*weight). In time order: c takes 8,
// b 6; at t=1/2 c finds 6 taken, then a takes 7; b 11, c 9, c 1, b 10; at
// t=3/2 c takes 5 and a finds it taken; b 4 (its fourth), c 3; c finds 4,
// 10 (at t=5/2, before a finds 6), 7 taken; c 2; at t=7/2 c finds 11 taken
// and a takes 0 (its second); c finds 0 taken and takes 12 (its seventh).
func TestGolden(t *testing.T) {
	bs := []Backend{{Key: "a", ID: 1, Weight: 1}, {Key: "b", ID: 2, Weight: 2}, {Key: "c", ID: 3, Weight: 3}}
	want := []uint32{1, 3, 3, 3, 2, 3, 2, 1, 3, 3, 2, 2, 3}
	got, err := Build(bs, 13)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("Build = %v, want %v", got, want)
	}
	if c := counts(got); c[1] != 2 || c[2] != 4 || c[3] != 7 {
		t.Errorf("slot counts a=%d b=%d c=%d, want 2 4 7", c[1], c[2], c[3])
	}
}

// TestPermutation pins the permutation hash documented in doc.go, so that
// another implementation can check itself against these values.
func TestPermutation(t *testing.T) {
	tests := []struct {
		key                           string
		centerHash, startHash, ratioH uint64
		center, start, ratio          uint32 // at m = DefaultSize
	}{
		{"a", 0x35afd95a679a62f3, 0x465af037427dae88, 0x548ac6afd06b60d1, 40708, 44681, 31948},
		{"b", 0xc0bfa48fe8c42099, 0xe7afd734b962385e, 0x380cfd0431998c90, 7078, 14431, 43668},
		{"198.18.0.100@80@198.18.0.21", 0x5350e1219aa72c87, 0x76eaef1be320f902, 0xd7c205ff7fa10bf2, 8113, 63747, 51228},
	}
	f := newField(DefaultSize)
	if f.root != 3 {
		t.Errorf("primitive root of %d = %d, want 3", DefaultSize, f.root)
	}
	for _, tt := range tests {
		for _, h := range []struct {
			salt string
			want uint64
		}{{centerSalt, tt.centerHash}, {startSalt, tt.startHash}, {ratioSalt, tt.ratioH}} {
			if got := keyHash(h.salt, tt.key); got != h.want {
				t.Errorf("hash of %q with salt %q = %#x, want %#x", tt.key, h.salt, got, h.want)
			}
		}
		center, start, ratio := f.permutation(tt.key)
		if center != tt.center || start != tt.start || ratio != tt.ratio {
			t.Errorf("permutation(%q) at m=%d = (%d, %d, %d), want (%d, %d, %d)", tt.key, DefaultSize, center, start, ratio, tt.center, tt.start, tt.ratio)
		}
	}
}

// TestPermutationVisitsEverySlot checks that a walk visits each slot once
// in m positions, for small primes where every case can be tried.
func TestPermutationVisitsEverySlot(t *testing.T) {
	for _, m := range []uint32{2, 3, 5, 7, 13, 251, 1021} {
		f := newField(m)
		for _, key := range []string{"a", "b", "c", "d", serverKey(1), serverKey(2)} {
			w := newWalker(&f, key, 1, 1)
			seen := make([]bool, m)
			for p := range m {
				if seen[w.cur] {
					t.Fatalf("m=%d key %q: slot %d visited again at position %d", m, key, w.cur, p)
				}
				seen[w.cur] = true
				w.cur, w.y = next(w.center, w.y, w.ratio, w.ratioQ, m)
			}
		}
	}
}

// TestFieldArithmetic checks the Barrett and Shoup reductions against plain
// division, near the top of the uint32 range too.
func TestFieldArithmetic(t *testing.T) {
	for _, m := range []uint32{2, 3, 13, DefaultSize, 4294967291} {
		f := newField(m)
		for _, a := range []uint32{0, 1, 2, m / 2, m - 2, m - 1} {
			for _, b := range []uint32{1, 2, 3, m / 3, m - 1} {
				a, b := a%m, b%m
				want := uint32(uint64(a) * uint64(b) % uint64(m))
				if got := f.mul(a, b); got != want {
					t.Errorf("m=%d: mul(%d, %d) = %d, want %d", m, a, b, got, want)
				}
				if b == 0 {
					continue
				}
				w := walker{center: m - 1, y: a, ratio: b}
				w.ratioQ, _ = bits.Div64(uint64(b), 0, uint64(m))
				cur, y := next(w.center, w.y, w.ratio, w.ratioQ, m)
				if y != want || cur != uint32((uint64(m-1)+uint64(want))%uint64(m)) {
					t.Errorf("m=%d: next(center %d, y %d, ratio %d) = (%d, %d), want (%d, %d)", m, m-1, a, b, cur, y, (uint64(m-1)+uint64(want))%uint64(m), want)
				}
			}
		}
	}
}

func benchmarkBuild(b *testing.B, bs []Backend) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Build(bs, DefaultSize); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBuild10(b *testing.B)   { benchmarkBuild(b, equalBackends(10)) }
func BenchmarkBuild1000(b *testing.B) { benchmarkBuild(b, equalBackends(1000)) }

// BenchmarkBuild1000Weighted has weights 1..100, as the manager may set
// them: backends of one weight step together, so many distinct weights
// cost more than one.
func BenchmarkBuild1000Weighted(b *testing.B) {
	bs := equalBackends(1000)
	r := rand.New(rand.NewPCG(1000, 100))
	for i := range bs {
		bs[i].Weight = uint32(r.IntN(100)) + 1
	}
	benchmarkBuild(b, bs)
}
