package manager

import (
	"math"
	"strconv"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
)

// MaxRise is the most a server's target can exceed its configured weight,
// as a factor: target <= MaxRise × configured (and never above the
// weightbound), however idle the server looks. Falls are not limited this
// way: an overloaded server's target can drop to 1.
const MaxRise = (gain + 1) / gain

// Constants of the formula; doc.go explains each.
const (
	// gain sets how strongly a relative load moves the target:
	// g(r) = (gain+1)/(gain+r), so g(1) = 1, g(0) = MaxRise, g(∞) = 0, and
	// the slope at equilibrium is -1/(gain+1).
	gain = 2.0
	// connFloor is added to the connections per unit of weight, so that a
	// handful of connections cannot look like an enormous difference.
	connFloor = 1.0
	// advisorFloor (ms) does the same for advisor loads: 1 ms against 5 ms
	// is a scheduler hiccup on a busy dispatcher, not a fivefold
	// difference; 200 ms against 1 ms still counts nearly twentyfold.
	advisorFloor = 10.0
	// metricFloor (points of 0..100) does the same for metric loads.
	metricFloor = 10.0
	// evenFactor: a load factor within this of 1 is called even in
	// reasons; the weight then moves only towards its anchor.
	evenFactor = 0.05
	// maxAdvisor caps an advisor load (ms) so that sums cannot overflow.
	maxAdvisor = 1e9
	// equalTolerance: a relative load within this of 1 is exactly 1, so
	// that rounding in the means cannot move weights at equilibrium.
	equalTolerance = 1e-9
)

// stateReason words a server's state in the manager's reasons: why a
// server out of service gets weight 0.
func stateReason(s lb.ServerState) string {
	switch s {
	case lb.ServerUp:
		return "in service"
	case lb.ServerDown:
		return "admin down"
	case lb.ServerFailed, lb.ServerUnresolved:
		return "advisor down"
	case lb.ServerQuiesced:
		return "quiesced"
	}
	return s.String()
}

// Sample is a load figure and the time it was taken. The zero At means no
// sample.
type Sample struct {
	// Value is the load: milliseconds for an advisor, 0..100 for a metric.
	Value float64 `json:"value"`
	// At is when the sample was taken.
	At time.Time `json:"at,omitzero"`
}

// Server is one server of a port as the manager sees it in one cycle.
type Server struct {
	// Key names the server; it is copied to the result.
	Key string `json:"key"`
	// Weight is the server's weight now, as the executor has it.
	Weight int `json:"weight"`
	// Configured is the operator's weight: the anchor the loads scale
	// (equal loads bring the weight back to it), the start value of a
	// server that (re)enters service with weight 0, and the weight of a
	// Fixed one. Zero means none: the current weight anchors.
	Configured int `json:"configured"`
	// Fixed says the manager never changes the weight (IBM's fixedweight):
	// it is Configured, capped to the weightbound.
	Fixed bool `json:"fixed,omitempty"`
	// State says whether the server is in service (lb.ServerUp); any
	// other state gives weight 0. A server whose configured weight is 0
	// counts as lb.ServerDown (the operator's choice).
	State lb.ServerState `json:"state"`
	// Active is the number of active connections now (ACTV).
	Active uint64 `json:"active"`
	// New is the number of new connections since the last cycle (NEWC).
	New uint64 `json:"new"`
	// Advisor is the advisor's last load in ms (PORT). A down advisor makes
	// the server lb.ServerFailed instead.
	Advisor Sample `json:"advisor"`
	// Metric is the metric server's last load, 0..100 (SYS).
	Metric Sample `json:"metric"`
}

// ServerResult is the manager's decision for one server.
type ServerResult struct {
	// Key is the server's Key.
	Key string `json:"key"`
	// Weight is the weight the executor should have from now on.
	Weight int `json:"weight"`
	// Proposed is the smoothed weight the loads asked for. It differs from
	// Weight only when the port's change was within the sensitivity
	// threshold (and not followed through) and the current weight was kept.
	Proposed int `json:"proposed"`
	// Target is where the loads would put the weight without smoothing.
	Target float64 `json:"target"`
	// Reason says in a few words why Weight is what it is, for
	// "dlbctl manager report".
	Reason string `json:"reason"`
}

// Result is the manager's decision for one port.
type Result struct {
	// Servers holds one entry per input server, in the same order.
	Servers []ServerResult `json:"servers"`
	// Change is the load-driven change the port asks for, in percent: the
	// sum over the balanced servers (in service, not fixed) of
	// |round(Target) − now|, divided by the sum of their current weights,
	// × 100. The smoothed weights (Proposed) are pushed only when it
	// exceeds Params.Sensitivity, or is above 0 while Params.FollowThrough
	// is: small wishes (noise) are ignored, large ones are followed in
	// damped steps all the way to their targets.
	Change float64 `json:"change"`
	// Push reports whether any Weight differs from the server's current
	// Weight: either the load-driven change was pushed, or a server must
	// change anyway (it left or re-entered service, it is fixed, or its
	// weight is above the weightbound).
	Push bool `json:"push"`
	// FollowThrough is what the next cycle's Params.FollowThrough should
	// be: FollowCycles after a change above the sensitivity, one less
	// after a change within it that was still followed, 0 once the targets
	// are reached.
	FollowThrough int `json:"follow_through"`
}

// The four inputs, in the order of Proportions.
const (
	inActive = iota
	inNew
	inPort
	inSystem
	nInputs
)

// Why an advisor or metric sample cannot be used.
const (
	sampleOK = iota
	sampleNone
	sampleStale
	sampleBad
)

// work is Compute's scratch state for one server.
type work struct {
	v     [nInputs]float64 // loads, each with its floor added
	pre   [nInputs]float64 // sum of v over the usable servers before this one
	preN  [nInputs]int32
	mean  [nInputs]float64 // mean of v over the other usable servers
	meanN [nInputs]int32
	have  uint8 // bit k: input k is usable
	adv   uint8 // sample state of the advisor
	met   uint8 // sample state of the metric
	dom   int8  // input that moved the target most, or -1
	base  float64
	f     float64 // the load factor F
	anch  float64 // the anchor the factor scales
	rs    int     // Reason's bounds in the reason buffer
	re    int
}

// Compute turns one port's per-server inputs into new weights. It is a pure
// function of its arguments: now is the time samples are judged against.
// Results come in the order of servers. See the package documentation for
// the formula.
//
// Compute does not reject bad parameters (use Params.Validate when they are
// configured); it brings them into range instead: negative proportions count
// as 0 and the proportions count relative to their sum, weightbound is
// clamped to 1..lb.MaxWeightBound, smoothing below 1 is 1, sensitivity is
// clamped to 0..100 (NaN is the default), and an interval ≤ 0 is the
// default. It never panics.
func Compute(p Params, servers []Server, now time.Time) Result {
	p = p.sanitized()
	res := Result{Servers: make([]ServerResult, len(servers))}
	if len(servers) == 0 {
		return res
	}
	var stack [16]work
	var ws []work
	if len(servers) <= len(stack) {
		ws = stack[:len(servers)]
	} else {
		ws = make([]work, len(servers))
	}
	prop := [nInputs]float64{
		float64(p.Proportions.Active), float64(p.Proportions.New),
		float64(p.Proportions.Port), float64(p.Proportions.System),
	}
	limit := time.Duration(math.MaxInt64)
	if p.Interval <= limit/StaleIntervals {
		limit = StaleIntervals * p.Interval
	}
	bound := float64(p.WeightBound)

	// Loads, and sums of the servers before each one.
	var sum [nInputs]float64
	var cnt [nInputs]int32
	for i := range servers {
		s, w := &servers[i], &ws[i]
		w.dom = -1
		if s.State != lb.ServerUp {
			continue
		}
		// Connections count per unit of the weight that brought them.
		cur := float64(max(s.Weight, 1))
		w.v[inActive] = float64(s.Active)/cur + connFloor
		w.v[inNew] = float64(s.New)/cur + connFloor
		w.have = 1<<inActive | 1<<inNew
		w.adv = judge(s.Advisor, now, limit)
		if w.adv == sampleOK && s.Advisor.Value < 0 {
			w.adv = sampleBad
		}
		if w.adv == sampleOK {
			w.v[inPort] = min(s.Advisor.Value, maxAdvisor) + advisorFloor
			w.have |= 1 << inPort
		}
		w.met = judge(s.Metric, now, limit)
		if w.met == sampleOK && s.Metric.Value < 0 {
			w.met = sampleBad
		}
		if w.met == sampleOK {
			w.v[inSystem] = min(s.Metric.Value, 100) + metricFloor
			w.have |= 1 << inSystem
		}
		for k := range nInputs {
			w.pre[k], w.preN[k] = sum[k], cnt[k]
			if w.have&(1<<k) != 0 {
				sum[k] += w.v[k]
				cnt[k]++
			}
		}
	}
	// Mean of the others: the sum before plus the sum after, which does not
	// depend on the server's own load at all.
	sum, cnt = [nInputs]float64{}, [nInputs]int32{}
	for i := len(ws) - 1; i >= 0; i-- {
		w := &ws[i]
		if servers[i].State != lb.ServerUp {
			continue
		}
		for k := range nInputs {
			if n := w.preN[k] + cnt[k]; n > 0 {
				w.mean[k] = (w.pre[k] + sum[k]) / float64(n)
				w.meanN[k] = n
			}
			if w.have&(1<<k) != 0 {
				sum[k] += w.v[k]
				cnt[k]++
			}
		}
	}

	// Targets and smoothed proposals.
	var moved, total float64
	for i := range servers {
		s, w, r := &servers[i], &ws[i], &res.Servers[i]
		r.Key = s.Key
		switch {
		case s.State != lb.ServerUp:
			// Weight, Proposed and Target stay 0.
		case s.Fixed:
			r.Weight = min(max(s.Configured, 0), p.WeightBound)
			r.Proposed = r.Weight
			r.Target = float64(r.Weight)
		default:
			switch {
			case s.Weight < 1:
				w.base = float64(min(max(s.Configured, 1), p.WeightBound))
			case s.Weight > p.WeightBound:
				w.base = bound
			default:
				w.base = float64(s.Weight)
			}
			// The target is anchored to the operator's weight: loads
			// scale it, so equal loads bring every server back to its
			// configured weight (a server that recovered gets its share
			// back), and a server that looks idle gets at most MaxRise
			// times its configured weight.
			// Without a configured weight (0), the current one anchors.
			anchor := w.base
			if s.Configured >= 1 {
				anchor = float64(min(s.Configured, p.WeightBound))
			}
			f := w.factor(&prop)
			w.f, w.anch = f, anchor
			target := anchor * f
			if !(target >= 1) { // NaN too
				target = 1
			}
			target = min(target, bound)
			r.Target = target
			r.Proposed = int(step(w.base, target, p.Smoothing))
			moved += math.Abs(math.Round(target) - w.base)
			total += w.base
		}
	}
	if total > 0 {
		res.Change = moved / total * 100
	}
	pushLoad := res.Change > p.Sensitivity || (p.FollowThrough > 0 && res.Change > 0)
	switch {
	case res.Change > p.Sensitivity:
		res.FollowThrough = FollowCycles
	case pushLoad:
		res.FollowThrough = p.FollowThrough - 1
	}

	// Weights and reasons.
	buf := make([]byte, 0, 48*len(servers))
	for i := range servers {
		s, w, r := &servers[i], &ws[i], &res.Servers[i]
		w.rs = len(buf)
		switch {
		case s.State != lb.ServerUp:
			buf = append(buf, stateReason(s.State)...)
		case s.Fixed:
			buf = append(buf, "fixed weight"...)
			if s.Configured > p.WeightBound {
				buf = append(buf, ", capped to weightbound "...)
				buf = strconv.AppendInt(buf, int64(p.WeightBound), 10)
			}
		default:
			r.Weight = int(w.base)
			if pushLoad {
				r.Weight = r.Proposed
			}
			buf = w.reason(buf, s, r, pushLoad, p.WeightBound, &prop)
		}
		w.re = len(buf)
		if r.Weight != s.Weight {
			res.Push = true
		}
	}
	reasons := string(buf)
	for i := range res.Servers {
		res.Servers[i].Reason = reasons[ws[i].rs:ws[i].re]
	}
	return res
}

// judge says whether a sample can be used at now: it must exist, be
// finite, and be no more than limit away from now (older, or newer after a
// clock step).
func judge(s Sample, now time.Time, limit time.Duration) uint8 {
	switch {
	case s.At.IsZero():
		return sampleNone
	case math.IsNaN(s.Value) || math.IsInf(s.Value, 0):
		return sampleBad
	}
	age := now.Sub(s.At)
	if age > limit || age < -limit {
		return sampleStale
	}
	return sampleOK
}

// factor returns the proportion-weighted mean of the server's goodness
// g(r) = (gain+1)/(gain+r) over the inputs it has, r being its load
// relative to the mean of the other servers that have the input. It also
// records the input that moved the factor most.
func (w *work) factor(prop *[nInputs]float64) float64 {
	var num, den, best float64
	for k := range nInputs {
		if prop[k] <= 0 || w.have&(1<<k) == 0 {
			continue
		}
		g := 1.0
		if w.meanN[k] > 0 {
			if r := w.v[k] / w.mean[k]; math.Abs(r-1) > equalTolerance {
				g = (gain + 1) / (gain + r)
			}
		}
		num += prop[k] * g
		den += prop[k]
		if d := prop[k] * math.Abs(g-1); d > best {
			best, w.dom = d, int8(k)
		}
	}
	if den == 0 {
		return 1 // no usable input: keep the weight
	}
	return num / den
}

// step moves now 1/smoothing of the way to target and rounds to the nearest
// integer, halves away from zero; when that rounds back to now although
// round(target) differs, it moves one unit towards the target, so that a
// weight never sticks short of its target (weight 1 with target 1.6 would
// otherwise stay 1 forever). The result lies between now and round(target).
func step(now, target, smoothing float64) float64 {
	next := math.Round(now + (target-now)/smoothing)
	goal := math.Round(target)
	switch {
	case next == now && goal > now:
		next = now + 1
	case next == now && goal < now:
		next = now - 1
	}
	return next
}

// reason appends a balanced server's reason to buf.
func (w *work) reason(buf []byte, s *Server, r *ServerResult, pushed bool, bound int, prop *[nInputs]float64) []byte {
	start := len(buf)
	sep := func() {
		if len(buf) > start {
			buf = append(buf, "; "...)
		}
	}
	base := int(w.base)
	switch {
	case r.Proposed != base && !pushed:
		buf = append(buf, "below sensitivity: kept (proposed "...)
		buf = strconv.AppendInt(buf, int64(r.Proposed), 10)
		buf = append(buf, ')')
	case r.Proposed != base && math.Abs(w.f-1) < evenFactor:
		// Loads are even: the weight returns to the operator's.
		buf = append(buf, "back towards configured weight "...)
		buf = strconv.AppendInt(buf, int64(w.anch), 10)
	case r.Proposed != base:
		buf = w.driver(buf, r.Proposed > base)
	}
	switch {
	case s.Weight < 1:
		sep()
		buf = append(buf, "back in service at configured weight "...)
		buf = strconv.AppendInt(buf, int64(base), 10)
	case s.Weight > bound:
		sep()
		buf = append(buf, "capped to weightbound "...)
		buf = strconv.AppendInt(buf, int64(bound), 10)
	case len(buf) == start:
		buf = append(buf, "no change"...)
	}
	if prop[inPort] > 0 && w.adv != sampleOK {
		sep()
		buf = append(buf, sampleNote(w.adv, "advisor load")...)
	}
	if prop[inSystem] > 0 && w.met != sampleOK {
		sep()
		buf = append(buf, sampleNote(w.met, "metric")...)
	}
	return buf
}

// driver appends what moved the weight: the input with the largest
// weighted effect, the server's figure and the other servers' mean.
func (w *work) driver(buf []byte, up bool) []byte {
	k := w.dom
	if k < 0 || w.meanN[k] == 0 {
		if up {
			return append(buf, "lower load"...)
		}
		return append(buf, "higher load"...)
	}
	var floor float64
	var prec int
	var unit string
	switch k {
	case inActive, inNew:
		floor, prec = connFloor, 1
		if up {
			buf = append(buf, "fewer "...)
		} else {
			buf = append(buf, "more "...)
		}
		if k == inActive {
			buf = append(buf, "active connections per weight ("...)
		} else {
			buf = append(buf, "new connections per weight ("...)
		}
	case inPort:
		floor, unit = advisorFloor, " ms"
		buf = appendDir(buf, up, "advisor load (")
	case inSystem:
		floor = metricFloor
		buf = appendDir(buf, up, "system load (")
	}
	own, mean := w.v[k]-floor, w.mean[k]-floor
	if k == inPort && max(own, mean) < 10 {
		prec = 1
	}
	buf = strconv.AppendFloat(buf, own, 'f', prec, 64)
	buf = append(buf, unit...)
	buf = append(buf, " vs mean "...)
	buf = strconv.AppendFloat(buf, mean, 'f', prec, 64)
	buf = append(buf, unit...)
	return append(buf, ')')
}

func appendDir(buf []byte, up bool, what string) []byte {
	if up {
		buf = append(buf, "lower "...)
	} else {
		buf = append(buf, "higher "...)
	}
	return append(buf, what...)
}

// sampleNote says why an advisor or metric sample was not used.
func sampleNote(state uint8, what string) string {
	switch state {
	case sampleStale:
		if what == "metric" {
			return "stale metric ignored"
		}
		return "stale advisor load ignored"
	case sampleBad:
		if what == "metric" {
			return "bad metric ignored"
		}
		return "bad advisor load ignored"
	}
	if what == "metric" {
		return "no metric"
	}
	return "no advisor load"
}
