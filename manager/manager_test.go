package manager

import (
	"github.com/dlbproject/dlb/pkg/lb"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fresh returns a sample taken one second before t0.
func fresh(v float64) Sample { return Sample{Value: v, At: t0.Add(-time.Second)} }

// srv returns an in-service server of weight w (also its configured
// weight) with w*perWeight active and w*newPerWeight new connections.
func srv(key string, w int, perWeight, newPerWeight uint64) Server {
	return Server{Key: key, Weight: w, Configured: w, Active: uint64(w) * perWeight, New: uint64(w) * newPerWeight}
}

func params(active, nw, port, system int) Params {
	p := DefaultParams()
	p.Proportions = lb.Proportions{Active: active, New: nw, Port: port, System: system}
	return p
}

func TestParamsValidate(t *testing.T) {
	if err := DefaultParams().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if got := lb.DefaultProportions().String(); got != "50 50 0 0" {
		t.Errorf("DefaultProportions = %q", got)
	}
	tests := []struct {
		name   string
		change func(*Params)
		want   string
	}{
		{"sum", func(p *Params) { p.Proportions = lb.Proportions{Active: 50, New: 50, Port: 10} }, "they sum to 110, not 100"},
		{"negative", func(p *Params) { p.Proportions = lb.Proportions{Active: 110, New: -10} }, "110 -10 0 0: each must be 0..100"},
		{"negative2", func(p *Params) { p.Proportions = lb.Proportions{Active: 50, New: 60, Port: -10} }, "50 60 -10 0: each must be 0..100"},
		{"bound0", func(p *Params) { p.WeightBound = 0 }, "weightbound: 0 is outside 1..100"},
		{"bound101", func(p *Params) { p.WeightBound = 101 }, "weightbound: 101"},
		{"smoothing", func(p *Params) { p.Smoothing = 0.5 }, "smoothing: 0.5"},
		{"smoothingNaN", func(p *Params) { p.Smoothing = math.NaN() }, "smoothing: NaN"},
		{"smoothingInf", func(p *Params) { p.Smoothing = math.Inf(1) }, "smoothing: +Inf"},
		{"sensitivity", func(p *Params) { p.Sensitivity = 101 }, "sensitivity: 101"},
		{"sensitivityNeg", func(p *Params) { p.Sensitivity = -1 }, "sensitivity: -1"},
		{"sensitivityNaN", func(p *Params) { p.Sensitivity = math.NaN() }, "sensitivity: NaN"},
		{"interval", func(p *Params) { p.Interval = 0 }, "interval: 0s is not positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultParams()
			tt.change(&p)
			err := p.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "checking ") {
				t.Fatalf("Validate() = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

func TestCompute(t *testing.T) {
	stale := Sample{Value: 0, At: t0.Add(-7 * time.Second)} // > 3 × 2 s
	type want struct {
		weight int
		reason string // substring
	}
	tests := []struct {
		name    string
		p       Params
		servers []Server
		want    []want
		push    bool
	}{
		{
			name: "equal load per weight: equilibrium",
			p:    params(25, 25, 25, 25),
			servers: []Server{
				{Key: "a", Weight: 5, Active: 50, New: 10, Advisor: fresh(40), Metric: fresh(30)},
				{Key: "b", Weight: 10, Active: 100, New: 20, Advisor: fresh(40), Metric: fresh(30)},
				{Key: "c", Weight: 20, Active: 200, New: 40, Advisor: fresh(40), Metric: fresh(30)},
			},
			want: []want{{5, "no change"}, {10, "no change"}, {20, "no change"}},
		},
		{
			name: "stale metric ignored, not read as zero",
			p:    params(50, 0, 0, 50),
			servers: []Server{
				{Key: "a", Weight: 10, Active: 100, Metric: stale},
				{Key: "b", Weight: 10, Active: 100, Metric: fresh(60)},
				{Key: "c", Weight: 10, Active: 100, Metric: fresh(60)},
			},
			want: []want{{10, "no change; stale metric ignored"}, {10, "no change"}, {10, "no change"}},
		},
		{
			name: "missing and bad metrics ignored",
			p:    params(50, 0, 0, 50),
			servers: []Server{
				{Key: "a", Weight: 10, Active: 100},
				{Key: "b", Weight: 10, Active: 100, Metric: Sample{Value: math.NaN(), At: t0}},
				{Key: "c", Weight: 10, Active: 100, Metric: Sample{Value: -1, At: t0}},
				{Key: "d", Weight: 10, Active: 100, Metric: fresh(90)},
			},
			want: []want{{10, "no change; no metric"}, {10, "no change; bad metric ignored"}, {10, "no change; bad metric ignored"}, {10, "no change"}},
		},
		{
			name: "one slow server loses weight to the advisor",
			p:    params(30, 30, 40, 0),
			servers: []Server{
				{Key: "a", Weight: 10, Active: 100, New: 40, Advisor: fresh(80)},
				{Key: "b", Weight: 10, Active: 100, New: 40, Advisor: fresh(80)},
				{Key: "c", Weight: 10, Active: 100, New: 40, Advisor: fresh(312)},
			},
			want: []want{{11, "lower advisor load (80 ms vs mean 196 ms)"}, {11, "lower advisor load"}, {9, "higher advisor load (312 ms vs mean 80 ms)"}},
			push: true,
		},
		{
			name: "the package documentation's worked example",
			p:    params(30, 30, 40, 0),
			servers: []Server{
				{Key: "a", Weight: 10, Active: 100, New: 40, Advisor: fresh(80)},
				{Key: "b", Weight: 10, Active: 100, New: 40, Advisor: fresh(80)},
				{Key: "c", Weight: 10, Active: 150, New: 40, Advisor: fresh(312)},
			},
			want: []want{{11, "lower advisor load (80 ms vs mean 196 ms)"}, {11, "lower advisor load"}, {9, "higher advisor load (312 ms vs mean 80 ms)"}},
			push: true,
		},
		{
			name: "more active connections per weight",
			p:    DefaultParams(),
			servers: []Server{
				srv("a", 10, 30, 5),
				srv("b", 10, 10, 5),
				srv("c", 10, 10, 5),
			},
			want: []want{{9, "more active connections per weight (30.0 vs mean 10.0)"}, {11, "fewer active"}, {11, "fewer active"}},
			push: true,
		},
		{
			name: "higher system load",
			p:    params(0, 0, 0, 100),
			servers: []Server{
				{Key: "a", Weight: 10, Metric: fresh(90)},
				{Key: "b", Weight: 10, Metric: fresh(20)},
				{Key: "c", Weight: 10, Metric: fresh(20)},
			},
			want: []want{{7, "higher system load (90 vs mean 20)"}, {11, "lower system load (20 vs mean 55)"}, {11, "lower system load"}},
			push: true,
		},
		{
			name: "small difference below sensitivity: kept",
			p:    DefaultParams(),
			servers: []Server{
				srv("a", 10, 16, 5),
				srv("b", 10, 10, 5),
				srv("c", 10, 10, 5),
				srv("d", 10, 10, 5),
			},
			want: []want{{10, "below sensitivity: kept (proposed 9)"}, {10, "no change"}, {10, "no change"}, {10, "no change"}},
		},
		{
			name: "fixed weight, capped, and out of service",
			p:    DefaultParams(),
			servers: []Server{
				{Key: "a", Weight: 3, Configured: 7, Fixed: true, Active: 1000},
				{Key: "b", Weight: 20, Configured: 50, Fixed: true},
				{Key: "c", Weight: 10, Configured: 10, State: lb.ServerFailed, Active: 1},
				{Key: "d", Weight: 10, Configured: 10, State: lb.ServerQuiesced},
				{Key: "e", Weight: 10, Configured: 10, State: lb.ServerDown},
				{Key: "f", Weight: 10, Configured: 10, Fixed: true, State: lb.ServerFailed},
			},
			want: []want{{7, "fixed weight"}, {20, "fixed weight, capped to weightbound 20"}, {0, "advisor down"}, {0, "quiesced"}, {0, "admin down"}, {0, "advisor down"}},
			push: true,
		},
		{
			name: "back in service at configured weight, weight above the bound capped",
			p:    DefaultParams(),
			servers: []Server{
				{Key: "a", Weight: 0, Configured: 8},
				{Key: "b", Weight: 25, Configured: 10, Active: 250},
				{Key: "c", Weight: 0, Configured: 0},
			},
			// a and c start from their configured weights (at least 1), b
			// from the bound; a and c have no connections yet and look less
			// loaded than b (10 per unit of its actual weight 25), whose
			// target is its configured 10 scaled down, reached in a
			// smoothed step from 20.
			want: []want{
				{9, "fewer active connections per weight (0.0 vs mean 5.0); back in service at configured weight 8"},
				{11, "more active connections per weight (10.0 vs mean 0.0); capped to weightbound 20"},
				{1, "back in service at configured weight 1"},
			},
			push: true,
		},
		{
			name: "all out of service",
			p:    DefaultParams(),
			servers: []Server{
				{Key: "a", Weight: 10, State: lb.ServerFailed},
				{Key: "b", Weight: 0, State: lb.ServerDown},
			},
			want: []want{{0, "advisor down"}, {0, "admin down"}},
			push: true,
		},
		{
			name: "single server keeps its weight",
			p:    DefaultParams(),
			servers: []Server{
				srv("a", 7, 1000, 1000),
			},
			want: []want{{7, "no change"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Compute(tt.p, tt.servers, t0)
			if len(res.Servers) != len(tt.want) {
				t.Fatalf("got %d results, want %d", len(res.Servers), len(tt.want))
			}
			for i, w := range tt.want {
				got := res.Servers[i]
				if got.Key != tt.servers[i].Key || got.Weight != w.weight || !strings.Contains(got.Reason, w.reason) {
					t.Errorf("server %s: got weight %d (%q), want %d (%q)",
						tt.servers[i].Key, got.Weight, got.Reason, w.weight, w.reason)
				}
			}
			if res.Push != tt.push {
				t.Errorf("Push = %v, want %v (change %.2f%%)", res.Push, tt.push, res.Change)
			}
			t.Logf("change %.2f%%, %+v", res.Change, res.Servers)
		})
	}
}

// TestStaleNotZero checks that a stale or missing sample never counts as
// zero load: the same server with a fresh sample of 0 does rise.
func TestStaleNotZero(t *testing.T) {
	p := params(0, 0, 50, 50)
	others := []Server{
		{Key: "b", Weight: 10, Advisor: fresh(200), Metric: fresh(80)},
		{Key: "c", Weight: 10, Advisor: fresh(200), Metric: fresh(80)},
	}
	run := func(adv, met Sample) ServerResult {
		a := Server{Key: "a", Weight: 10, Advisor: adv, Metric: met}
		return Compute(p, append([]Server{a}, others...), t0).Servers[0]
	}
	if got := run(fresh(0), fresh(0)); got.Weight <= 10 {
		t.Fatalf("fresh zero load: weight %d, want a rise", got.Weight)
	}
	old := t0.Add(-3*DefaultInterval - time.Nanosecond)
	for _, tc := range []struct {
		adv, met Sample
		reason   string
	}{
		{Sample{0, old}, Sample{0, old}, "no change; stale advisor load ignored; stale metric ignored"},
		{Sample{}, Sample{}, "no change; no advisor load; no metric"},
		{Sample{0, t0.Add(time.Hour)}, Sample{math.Inf(1), t0}, "no change; stale advisor load ignored; bad metric ignored"},
	} {
		if got := run(tc.adv, tc.met); got.Weight != 10 || got.Target != 10 || got.Reason != tc.reason {
			t.Errorf("got %+v, want weight 10 target 10 reason %q", got, tc.reason)
		}
	}
	// Exactly three intervals old is still fresh.
	edge := t0.Add(-3 * DefaultInterval)
	if got := run(Sample{0, edge}, Sample{0, edge}); got.Weight <= 10 {
		t.Errorf("sample exactly 3 intervals old: weight %d, want a rise", got.Weight)
	}
}

// TestSmoothingConverges runs a closed loop: the advisor load of a server
// grows with its share of the traffic divided by its capacity, and server
// c has twice the capacity of a and b. When the operator's weights say so
// (10 10 20), the weights stay near 1:1:2; when they do not (10 10 10), c
// gains weight, but at most MaxRise times its configured weight: the
// manager adjusts the operator's weights, it does not replace them. The
// weights move by damped steps and settle; with the default sensitivity
// they settle earlier, inside the dead band.
func TestSmoothingConverges(t *testing.T) {
	capacity := []float64{1, 1, 2}
	configured := []int{10, 10, 20}
	run := func(t *testing.T, sensitivity float64) ([]int, Result) {
		p := params(0, 0, 100, 0)
		p.Sensitivity = sensitivity
		weights := slices.Clone(configured)
		stable := 0
		var res Result
		for cycle := range 30 {
			var total float64
			for _, w := range weights {
				total += float64(w)
			}
			servers := make([]Server, len(weights))
			for i, w := range weights {
				share := float64(w) / total
				servers[i] = Server{Key: string(rune('a' + i)), Weight: w, Configured: configured[i],
					Advisor: fresh(20 + 600*share/capacity[i])}
			}
			res = Compute(p, servers, t0)
			for i, r := range res.Servers {
				now := float64(weights[i])
				if d := math.Abs(float64(r.Proposed) - now); d > max(1, math.Abs(r.Target-now)/p.Smoothing+0.5) {
					t.Fatalf("cycle %d server %s: moved %v, more than |%.2f-%v|/%v+0.5", cycle, r.Key, d, r.Target, now, p.Smoothing)
				}
			}
			t.Logf("cycle %2d: weights %v, targets %.2f %.2f %.2f, change %.1f%%, push %v", cycle, weights,
				res.Servers[0].Target, res.Servers[1].Target, res.Servers[2].Target, res.Change, res.Push)
			if res.Push {
				stable = 0
			} else {
				stable++
			}
			for i, r := range res.Servers {
				weights[i] = r.Weight
			}
		}
		if stable < 5 {
			t.Fatalf("weights %v still moving after 30 cycles", weights)
		}
		return weights, res
	}
	t.Run("sensitivity 0", func(t *testing.T) {
		weights, _ := run(t, 0)
		ratio := float64(weights[2]) / float64(weights[0]+weights[1]) * 2
		if weights[0] != weights[1] || ratio < 1.6 || ratio > 2.4 {
			t.Fatalf("weights settled at %v, want about 1:1:2", weights)
		}
	})
	t.Run("default sensitivity", func(t *testing.T) {
		weights, res := run(t, lb.DefaultSensitivity)
		if weights[2] <= weights[0] || res.Change > lb.DefaultSensitivity {
			t.Fatalf("weights settled at %v (change %.1f%%), want c above a, change within %v%%", weights, res.Change, lb.DefaultSensitivity)
		}
	})
	t.Run("equal configured weights", func(t *testing.T) {
		configured = []int{10, 10, 10}
		weights, _ := run(t, 0)
		if weights[2] <= weights[0] || float64(weights[2]) > MaxRise*10 {
			t.Fatalf("weights settled at %v, want c above a and at most %v", weights, MaxRise*10)
		}
	})
}

// TestSensitivity checks the push threshold on the same loads with several
// sensitivities.
func TestSensitivity(t *testing.T) {
	servers := []Server{srv("a", 10, 20, 5), srv("b", 10, 10, 5), srv("c", 10, 10, 5)}
	base := Compute(DefaultParams(), servers, t0)
	if base.Change <= 0 {
		t.Fatalf("change %v, want > 0", base.Change)
	}
	for _, sens := range []float64{0, base.Change - 0.01, base.Change, base.Change + 0.01, 100} {
		p := DefaultParams()
		p.Sensitivity = sens
		res := Compute(p, servers, t0)
		pushed := sens < base.Change
		if res.Push != pushed {
			t.Errorf("sensitivity %.2f, change %.2f: Push %v, want %v", sens, res.Change, res.Push, pushed)
		}
		for i, r := range res.Servers {
			want := servers[i].Weight
			if pushed {
				want = r.Proposed
			}
			if r.Weight != want {
				t.Errorf("sensitivity %.2f: %s weight %d, want %d", sens, r.Key, r.Weight, want)
			}
		}
	}
}

// TestFollowThrough: a wish within the sensitivity is kept on a settled
// port, followed for FollowCycles cycles after a change above it, and a
// move that starts above the threshold ends at its target, not within the
// dead band of it.
func TestFollowThrough(t *testing.T) {
	small := []Server{srv("a", 10, 16, 5), srv("b", 10, 10, 5), srv("c", 10, 10, 5), srv("d", 10, 10, 5)}
	tests := []struct {
		name       string
		follow     int
		wantWeight int
		wantFollow int
	}{
		{"settled: kept", 0, 10, 0},
		{"following: pushed", 2, 9, 1},
		{"last follow cycle: pushed", 1, 9, 0},
		{"out of range counts as FollowCycles", 99, 9, FollowCycles - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultParams()
			p.FollowThrough = tt.follow
			res := Compute(p, small, t0)
			if got := res.Servers[0].Weight; got != tt.wantWeight {
				t.Errorf("a's weight %d, want %d (%s)", got, tt.wantWeight, res.Servers[0].Reason)
			}
			if res.FollowThrough != tt.wantFollow {
				t.Errorf("FollowThrough %d, want %d", res.FollowThrough, tt.wantFollow)
			}
		})
	}

	// A slow server (seed: 200 ms against 1 ms) among two fast ones,
	// cycle after cycle with the engine carrying FollowThrough: it ends at
	// its rounded target.
	p := DefaultParams()
	p.Proportions = lb.Proportions{Active: 20, New: 20, Port: 60}
	servers := []Server{
		{Key: "a", Weight: 10, Configured: 10, Active: 0, New: 50, Advisor: fresh(1)},
		{Key: "b", Weight: 10, Configured: 10, Active: 6, New: 50, Advisor: fresh(201)},
		{Key: "c", Weight: 10, Configured: 10, Active: 0, New: 50, Advisor: fresh(1)},
	}
	var res Result
	for cycle := 0; cycle < 10; cycle++ {
		res = Compute(p, servers, t0)
		p.FollowThrough = res.FollowThrough
		for i := range servers {
			servers[i].Weight = res.Servers[i].Weight
			servers[i].New = uint64(5 * servers[i].Weight) // new connections follow the weights
		}
	}
	for _, r := range res.Servers {
		if want := int(math.Round(r.Target)); r.Weight != want {
			t.Errorf("%s: weight %d after 10 cycles, want its target %d (%.2f)", r.Key, r.Weight, want, r.Target)
		}
	}
	if res.Push || res.FollowThrough != 0 {
		t.Errorf("settled at the targets, yet Push %v, FollowThrough %d", res.Push, res.FollowThrough)
	}
}

// TestHerdBounded is seed 000's scenario: one server's figures look far
// better than the others'. From equal weights its weight rises by at most
// (target-now)/smoothing (plus rounding) per cycle, its target by at most
// MaxRise, and never above the weightbound; the others keep most of the
// traffic.
func TestHerdBounded(t *testing.T) {
	p := params(20, 20, 30, 30)
	servers := []Server{
		{Key: "fast", Weight: 10, Configured: 10, Active: 100, New: 20, Advisor: fresh(5), Metric: fresh(2)},
		{Key: "b", Weight: 10, Configured: 10, Active: 100, New: 20, Advisor: fresh(400), Metric: fresh(95)},
		{Key: "c", Weight: 10, Configured: 10, Active: 100, New: 20, Advisor: fresh(400), Metric: fresh(95)},
	}
	for cycle := range 6 {
		res := Compute(p, servers, t0)
		r := res.Servers[0]
		now := float64(servers[0].Weight)
		if r.Target > min(MaxRise*now, float64(p.WeightBound)) {
			t.Fatalf("cycle %d: target %.2f above min(%.1f × %v, %d)", cycle, r.Target, MaxRise, now, p.WeightBound)
		}
		if float64(r.Weight)-now > (r.Target-now)/p.Smoothing+0.5 || r.Weight > p.WeightBound {
			t.Fatalf("cycle %d: weight %v → %d, target %.2f: step too large", cycle, now, r.Weight, r.Target)
		}
		total := 0
		for _, s := range res.Servers {
			total += s.Weight
		}
		t.Logf("cycle %d: weights %d %d %d, fast target %.2f, fast share %.0f%% (%s)", cycle,
			res.Servers[0].Weight, res.Servers[1].Weight, res.Servers[2].Weight, r.Target,
			100*float64(r.Weight)/float64(total), r.Reason)
		if cycle == 0 && r.Weight > 13 {
			t.Fatalf("first cycle: weight %d, want at most 13", r.Weight)
		}
		for i := range servers {
			// Connections follow the weights (per weight they stay equal).
			w := uint64(res.Servers[i].Weight)
			servers[i].Weight, servers[i].Active, servers[i].New = int(w), 10*w, 2*w
		}
	}
}

// TestLiveCountsSeeSurge is seed 001's lesson: the advisor still reports a
// fast server from a sample 4 s old (fresh enough), but the live counter
// shows it took five times the new connections per unit of weight since:
// its weight does not rise.
func TestLiveCountsSeeSurge(t *testing.T) {
	p := params(0, 50, 50, 0)
	old := Sample{Value: 20, At: t0.Add(-4 * time.Second)}
	servers := []Server{
		{Key: "a", Weight: 10, New: 500, Advisor: old},
		{Key: "b", Weight: 10, New: 100, Advisor: fresh(100)},
		{Key: "c", Weight: 10, New: 100, Advisor: fresh(100)},
	}
	res := Compute(p, servers, t0)
	if r := res.Servers[0]; r.Weight > 10 || r.Proposed >= 10 {
		t.Fatalf("surged server: %+v, want a proposed fall", r)
	}
	p.Sensitivity = 0
	res = Compute(p, servers, t0)
	if r := res.Servers[0]; r.Weight >= 10 || !strings.Contains(r.Reason, "more new connections per weight (50.0 vs mean 10.0)") {
		t.Fatalf("surged server, sensitivity 0: %+v, want a fall for more new connections", r)
	}
}

func TestComputeEmpty(t *testing.T) {
	res := Compute(DefaultParams(), nil, t0)
	if len(res.Servers) != 0 || res.Push || res.Change != 0 {
		t.Fatalf("Compute(nil) = %+v", res)
	}
}

func TestStateReason(t *testing.T) {
	for s, want := range map[lb.ServerState]string{lb.ServerUp: "in service", lb.ServerDown: "admin down",
		lb.ServerFailed: "advisor down", lb.ServerUnresolved: "advisor down", lb.ServerQuiesced: "quiesced", 9: "serverstate(9)"} {
		if got := stateReason(s); got != want {
			t.Errorf("stateReason(%d) = %q, want %q", s, got, want)
		}
	}
}

// TestRecovery is the lab's slow-backend case: a server that was pushed
// down to weight 1 while slow, and is as fast as the others again, climbs
// back to its configured weight under the default sensitivity, a unit or
// more per cycle — a weight never sticks short of its target.
func TestRecovery(t *testing.T) {
	p := params(25, 25, 50, 0)
	weights := []int{20, 1, 20}
	configured := []int{10, 10, 10}
	for cycle := range 20 {
		servers := make([]Server, 3)
		for i := range servers {
			w := uint64(weights[i])
			servers[i] = Server{Key: string(rune('a' + i)), Weight: weights[i], Configured: configured[i],
				Active: 3 * w, New: 10 * w, Advisor: fresh(1)}
		}
		res := Compute(p, servers, t0)
		for i, r := range res.Servers {
			weights[i] = r.Weight
		}
		t.Logf("cycle %2d: weights %v, change %.1f%%, push %v, b: %s", cycle, weights, res.Change, res.Push, res.Servers[1].Reason)
	}
	if !slices.Equal(weights, configured) {
		t.Fatalf("weights settled at %v, want the configured %v", weights, configured)
	}
}
