package manager

import (
	"github.com/dlbproject/dlb/pkg/lb"
	"math"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// genParams draws valid parameters.
func genParams(t *rapid.T) Params {
	a := rapid.IntRange(0, 100).Draw(t, "active")
	n := rapid.IntRange(0, 100-a).Draw(t, "new")
	po := rapid.IntRange(0, 100-a-n).Draw(t, "port")
	return Params{
		Proportions: lb.Proportions{Active: a, New: n, Port: po, System: 100 - a - n - po},
		WeightBound: rapid.IntRange(1, lb.MaxWeightBound).Draw(t, "weightbound"),
		Smoothing:   rapid.Float64Range(1, 5).Draw(t, "smoothing"),
		Sensitivity: rapid.SampledFrom([]float64{0, 0, 1, 5, 5, 20, 100}).Draw(t, "sensitivity"),
		Interval:    time.Duration(rapid.IntRange(1, 10).Draw(t, "interval")) * time.Second,

		FollowThrough: rapid.SampledFrom([]int{0, 0, 0, 1, FollowCycles}).Draw(t, "followThrough"),
	}
}

// genSample draws a sample that is fresh, stale, in the future, or absent.
func genSample(t *rapid.T, name string, hi float64, interval time.Duration) Sample {
	v := rapid.Float64Range(0, hi).Draw(t, name)
	switch rapid.IntRange(0, 5).Draw(t, name+"Age") {
	case 0:
		return Sample{}
	case 1:
		return Sample{Value: v, At: t0.Add(-StaleIntervals*interval - time.Duration(rapid.Int64Range(1, 1e12).Draw(t, name+"Stale")))}
	default:
		return Sample{Value: v, At: t0.Add(-time.Duration(rapid.Int64Range(-int64(interval), StaleIntervals*int64(interval)).Draw(t, name+"At")))}
	}
}

// genServer draws a server of a port with parameters p. Its weight is
// usually within 0..weightbound, sometimes above it.
func genServer(t *rapid.T, p Params, i int) Server {
	return Server{
		Key:        "s" + strconv.Itoa(i),
		Weight:     rapid.IntRange(0, p.WeightBound+3).Draw(t, "weight"),
		Configured: rapid.IntRange(0, p.WeightBound+3).Draw(t, "configured"),
		Fixed:      rapid.IntRange(0, 7).Draw(t, "fixed") == 0,
		State:      rapid.SampledFrom([]lb.ServerState{lb.ServerUp, lb.ServerUp, lb.ServerUp, lb.ServerUp, lb.ServerDown, lb.ServerFailed, lb.ServerQuiesced}).Draw(t, "state"),
		Active:     rapid.Uint64Range(0, 1_000_000).Draw(t, "active"),
		New:        rapid.Uint64Range(0, 100_000).Draw(t, "new"),
		Advisor:    genSample(t, "advisor", 5000, p.Interval),
		Metric:     genSample(t, "metric", 120, p.Interval),
	}
}

func genPort(t *rapid.T, p Params) []Server {
	n := rapid.IntRange(1, 20).Draw(t, "servers")
	servers := make([]Server, n)
	for i := range servers {
		servers[i] = genServer(t, p, i)
	}
	return servers
}

// balanced reports whether the manager computes s's weight from load.
func balanced(s Server) bool { return s.State == lb.ServerUp && !s.Fixed }

// start is the weight a balanced server's step starts from.
func start(s Server, bound int) int {
	switch {
	case s.Weight < 1:
		return min(max(s.Configured, 1), bound)
	case s.Weight > bound:
		return bound
	}
	return s.Weight
}

// TestPropMoreLoadNeverRaises is property 1: raising one server's ACTV,
// NEWC, PORT or SYS, everything else fixed, never raises its target or its
// proposed weight, nor, with sensitivity 0, its weight.
func TestPropMoreLoadNeverRaises(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genParams(t)
		if rapid.Bool().Draw(t, "sensitivity0") {
			p.Sensitivity = 0
		}
		servers := genPort(t, p)
		i := rapid.IntRange(0, len(servers)-1).Draw(t, "server")
		servers[i].State, servers[i].Fixed = lb.ServerUp, false
		more := slices.Clone(servers)
		switch input := rapid.IntRange(0, 3).Draw(t, "input"); input {
		case inActive:
			more[i].Active += rapid.Uint64Range(1, 1_000_000).Draw(t, "delta")
		case inNew:
			more[i].New += rapid.Uint64Range(1, 1_000_000).Draw(t, "delta")
		case inPort:
			more[i].Advisor.Value += rapid.Float64Range(1e-9, 5000).Draw(t, "delta")
		case inSystem:
			more[i].Metric.Value += rapid.Float64Range(1e-9, 100).Draw(t, "delta")
		}
		before := Compute(p, servers, t0).Servers[i]
		after := Compute(p, more, t0).Servers[i]
		if after.Target > before.Target || after.Proposed > before.Proposed {
			t.Fatalf("more load raised server %d: before %+v, after %+v", i, before, after)
		}
		if p.Sensitivity == 0 && after.Weight > before.Weight {
			t.Fatalf("more load raised server %d's weight (sensitivity 0): before %+v, after %+v", i, before, after)
		}
	})
}

// TestPropBounds is property 2, with the never-herd bound on targets: a
// balanced server's weight is within 1..weightbound and its target at most
// MaxRise × its anchor (its configured weight, else the weight it starts
// from); others get 0 or their fixed weight.
func TestPropBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genParams(t)
		servers := genPort(t, p)
		res := Compute(p, servers, t0)
		if len(res.Servers) != len(servers) {
			t.Fatalf("%d results for %d servers", len(res.Servers), len(servers))
		}
		for i, s := range servers {
			r := res.Servers[i]
			if r.Key != s.Key || r.Reason == "" {
				t.Fatalf("result %d: %+v for %+v", i, r, s)
			}
			switch {
			case s.State != lb.ServerUp:
				if r.Weight != 0 || r.Reason != stateReason(s.State) {
					t.Fatalf("out of service: %+v", r)
				}
			case s.Fixed:
				if want := min(max(s.Configured, 0), p.WeightBound); r.Weight != want {
					t.Fatalf("fixed %+v: weight %d, want %d", s, r.Weight, want)
				}
			default:
				if r.Weight < 1 || r.Weight > p.WeightBound || r.Proposed < 1 || r.Proposed > p.WeightBound {
					t.Fatalf("balanced %+v: %+v outside 1..%d", s, r, p.WeightBound)
				}
				if limit := min(MaxRise*float64(anchor(s, p.WeightBound)), float64(p.WeightBound)); r.Target > limit || r.Target < 1 {
					t.Fatalf("balanced %+v: target %v outside 1..%v", s, r.Target, limit)
				}
			}
		}
	})
}

// TestPropDeterministicAndEquilibrium is property 3: the same inputs give
// the same outputs; identical loads (connections per unit of weight) leave
// every balanced weight that sits at its configured weight where it is, and
// bring the others back towards theirs.
func TestPropDeterministicAndEquilibrium(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genParams(t)
		servers := genPort(t, p)
		a := Compute(p, servers, t0)
		b := Compute(p, slices.Clone(servers), t0)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("same inputs, different results:\n%+v\n%+v", a, b)
		}

		// Equal loads. Out-of-service servers may have any load; samples
		// may be missing or stale on some servers.
		perActive := rapid.Uint64Range(0, 1000).Draw(t, "perActive")
		perNew := rapid.Uint64Range(0, 1000).Draw(t, "perNew")
		adv := rapid.Float64Range(0, 5000).Draw(t, "advisorLoad")
		met := rapid.Float64Range(0, 100).Draw(t, "metricLoad")
		for i := range servers {
			s := &servers[i]
			if s.State != lb.ServerUp {
				continue
			}
			s.Weight = rapid.IntRange(1, p.WeightBound).Draw(t, "eqWeight")
			s.Configured = s.Weight // the operator's weight: the equilibrium
			w := uint64(s.Weight)
			s.Active, s.New = perActive*w, perNew*w
			if !s.Advisor.At.IsZero() {
				s.Advisor.Value = adv
			}
			if !s.Metric.At.IsZero() {
				s.Metric.Value = met
			}
		}
		res := Compute(p, servers, t0)
		for i, s := range servers {
			if r := res.Servers[i]; balanced(s) && (r.Weight != s.Weight || r.Proposed != s.Weight || r.Target != float64(s.Weight)) {
				t.Fatalf("equal loads moved %+v to %+v", s, r)
			}
		}
		if res.Change != 0 {
			t.Fatalf("equal loads: change %v", res.Change)
		}

		// Equal loads away from the configured weights: every target is
		// the configured weight, and each weight moves towards it.
		for i := range servers {
			if balanced(servers[i]) {
				servers[i].Configured = rapid.IntRange(1, p.WeightBound).Draw(t, "configured")
			}
		}
		res = Compute(p, servers, t0)
		for i, s := range servers {
			r := res.Servers[i]
			if !balanced(s) {
				continue
			}
			if r.Target != float64(s.Configured) {
				t.Fatalf("equal loads: %+v has target %v, want its configured weight", s, r.Target)
			}
			if lo, hi := min(s.Weight, s.Configured), max(s.Weight, s.Configured); r.Proposed < lo || r.Proposed > hi {
				t.Fatalf("equal loads: %+v proposed %d, not between its weight and its configured weight", s, r.Proposed)
			}
		}
	})
}

// TestPropSmoothing is property 4: the proposed weight lies between the
// starting weight and round(target), and moves at most |target −
// now|/smoothing + ½ (the rounding), or one unit when that would not move
// it at all although round(target) differs.
func TestPropSmoothing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genParams(t)
		servers := genPort(t, p)
		res := Compute(p, servers, t0)
		for i, s := range servers {
			if !balanced(s) {
				continue
			}
			r := res.Servers[i]
			now := float64(start(s, p.WeightBound))
			prop := float64(r.Proposed)
			lo, hi := min(now, math.Round(r.Target)), max(now, math.Round(r.Target))
			if prop < lo || prop > hi {
				t.Fatalf("%+v: proposed %v outside [%v, %v]", s, prop, lo, hi)
			}
			if d := math.Abs(prop - now); d > max(1, math.Abs(r.Target-now)/p.Smoothing+0.5+1e-9) {
				t.Fatalf("%+v: moved %v from %v towards %v, more than 1/%v of the way + ½", s, d, now, r.Target, p.Smoothing)
			}
		}
	})
}

// TestPropSensitivity is property 5: Change is 100 × Σ|round(target) −
// now| / Σ now over the balanced servers (the change the loads ask for);
// above the sensitivity, or above 0 while following through, balanced
// servers take the proposed (smoothed) weights, otherwise they keep their
// current ones; Push says whether any weight differs from the current one;
// FollowThrough restarts at FollowCycles above the sensitivity, counts
// down while following, and is 0 otherwise.
func TestPropSensitivity(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genParams(t)
		servers := genPort(t, p)
		res := Compute(p, servers, t0)
		var moved, total float64
		push := false
		for i, s := range servers {
			r := res.Servers[i]
			if r.Weight != s.Weight {
				push = true
			}
			if !balanced(s) {
				continue
			}
			now := start(s, p.WeightBound)
			moved += math.Abs(math.Round(r.Target) - float64(now))
			total += float64(now)
		}
		want := 0.0
		if total > 0 {
			want = moved / total * 100
		}
		if math.Abs(res.Change-want) > 1e-9 {
			t.Fatalf("change %v, want %v", res.Change, want)
		}
		if res.Push != push {
			t.Fatalf("Push %v, but weights differ: %v", res.Push, push)
		}
		wantFollow := 0
		switch {
		case res.Change > p.Sensitivity:
			wantFollow = FollowCycles
		case p.FollowThrough > 0 && res.Change > 0:
			wantFollow = p.FollowThrough - 1
		}
		if res.FollowThrough != wantFollow {
			t.Fatalf("change %v%%, sensitivity %v%%, following %d: FollowThrough %d, want %d", res.Change, p.Sensitivity, p.FollowThrough, res.FollowThrough, wantFollow)
		}
		for i, s := range servers {
			if !balanced(s) {
				continue
			}
			r := res.Servers[i]
			want := start(s, p.WeightBound)
			if res.Change > p.Sensitivity || (p.FollowThrough > 0 && res.Change > 0) {
				want = r.Proposed
			}
			if r.Weight != want {
				t.Fatalf("change %v%%, sensitivity %v%%: %+v has weight %d, want %d", res.Change, p.Sensitivity, s, r.Weight, want)
			}
		}
	})
}

// TestPropPerUnitOfWeight is property 6: scaling a server's weight and its
// connection counts by the same factor leaves the other servers' targets
// exactly as they were, and its own too when it has a configured weight
// (its load per unit of weight did not change: it is not punished for its
// own share); without one its target, anchored to its weight, scales.
func TestPropPerUnitOfWeight(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genParams(t)
		p.WeightBound = rapid.IntRange(2, lb.MaxWeightBound).Draw(t, "weightbound")
		servers := genPort(t, p)
		i := rapid.IntRange(0, len(servers)-1).Draw(t, "server")
		s := &servers[i]
		s.State, s.Fixed = lb.ServerUp, false
		s.Weight = rapid.IntRange(1, p.WeightBound/2).Draw(t, "w")
		k := rapid.IntRange(2, p.WeightBound/s.Weight).Draw(t, "k")
		scaled := slices.Clone(servers)
		scaled[i].Weight *= k
		scaled[i].Active *= uint64(k)
		scaled[i].New *= uint64(k)

		a, b := Compute(p, servers, t0), Compute(p, scaled, t0)
		for j := range servers {
			if j != i && a.Servers[j].Target != b.Servers[j].Target {
				t.Fatalf("scaling server %d moved server %d's target: %v → %v", i, j, a.Servers[j].Target, b.Servers[j].Target)
			}
		}
		// Own factor: compare the unclamped targets when neither is clamped.
		ta, tb := a.Servers[i].Target, b.Servers[i].Target
		bound := float64(p.WeightBound)
		if ta > 1 && ta < bound && tb > 1 && tb < bound {
			want := ta * float64(k)
			if s.Configured >= 1 {
				want = ta
			}
			if math.Abs(tb-want) > 1e-9*want {
				t.Fatalf("scaling server %d by %d: target %v → %v, want %v", i, k, ta, tb, want)
			}
		}
	})
}

// TestPropNoPanic feeds Compute arbitrary, mostly invalid, inputs: it must
// not panic, must return one result per server, and a balanced server's
// weight stays within 1..the clamped weightbound.
func TestPropNoPanic(t *testing.T) {
	anyFloat := rapid.OneOf(rapid.Float64(), rapid.SampledFrom([]float64{
		math.NaN(), math.Inf(1), math.Inf(-1), 0, -1, math.MaxFloat64, math.SmallestNonzeroFloat64}))
	anyTime := rapid.Custom(func(t *rapid.T) time.Time {
		if rapid.Bool().Draw(t, "zero") {
			return time.Time{}
		}
		return time.Unix(rapid.Int64Range(-1<<40, 1<<40).Draw(t, "sec"), rapid.Int64Range(0, 1e9-1).Draw(t, "ns"))
	})
	rapid.Check(t, func(t *rapid.T) {
		p := Params{
			Proportions: lb.Proportions{Active: rapid.Int().Draw(t, "a"), New: rapid.Int().Draw(t, "n"), Port: rapid.Int().Draw(t, "p"), System: rapid.Int().Draw(t, "s")},
			WeightBound: rapid.Int().Draw(t, "bound"),
			Smoothing:   anyFloat.Draw(t, "smoothing"),
			Sensitivity: anyFloat.Draw(t, "sensitivity"),
			Interval:    time.Duration(rapid.Int64().Draw(t, "interval")),
		}
		n := rapid.IntRange(0, 40).Draw(t, "n")
		servers := make([]Server, n)
		for i := range servers {
			servers[i] = Server{
				Key:        rapid.String().Draw(t, "key"),
				Weight:     rapid.Int().Draw(t, "weight"),
				Configured: rapid.Int().Draw(t, "configured"),
				Fixed:      rapid.Bool().Draw(t, "fixed"),
				State:      lb.ServerState(rapid.Uint8().Draw(t, "state")),
				Active:     rapid.Uint64().Draw(t, "active"),
				New:        rapid.Uint64().Draw(t, "new"),
				Advisor:    Sample{anyFloat.Draw(t, "adv"), anyTime.Draw(t, "advAt")},
				Metric:     Sample{anyFloat.Draw(t, "met"), anyTime.Draw(t, "metAt")},
			}
		}
		now := anyTime.Draw(t, "now")
		res := Compute(p, servers, now)
		if len(res.Servers) != n || math.IsNaN(res.Change) {
			t.Fatalf("bad result %+v", res)
		}
		bound := p.sanitized().WeightBound
		for i, s := range servers {
			r := res.Servers[i]
			if balanced(s) && (r.Weight < 1 || r.Weight > bound) {
				t.Fatalf("balanced server got %+v (bound %d)", r, bound)
			}
			if s.State != lb.ServerUp && r.Weight != 0 {
				t.Fatalf("out of service server got %+v", r)
			}
			if math.IsNaN(r.Target) || r.Reason == "" {
				t.Fatalf("bad server result %+v", r)
			}
		}
	})
}

// anchor is the weight a balanced server's loads scale: its configured
// weight (capped to the bound) when it has one, else its start weight.
func anchor(s Server, bound int) int {
	if s.Configured >= 1 {
		return min(s.Configured, bound)
	}
	return start(s, bound)
}
