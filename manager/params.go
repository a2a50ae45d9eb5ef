package manager

import (
	"fmt"
	"math"
	"time"
)

// IBM's defaults for the manager's parameters.
const (
	// DefaultWeightBound is the default highest weight of a port's servers.
	DefaultWeightBound = 20
	// MaxWeightBound is the largest weightbound a port may have.
	MaxWeightBound = 100
	// DefaultSmoothing is the default smoothing index: each cycle a weight
	// moves 1/1.5 of the way to its target.
	DefaultSmoothing = 1.5
	// DefaultSensitivity is the default sensitivity threshold, in percent:
	// changes of a port's weights up to 5% are not pushed.
	DefaultSensitivity = 5.0
	// DefaultInterval is the default manager interval.
	DefaultInterval = 2 * time.Second
	// StaleIntervals is how many manager intervals an advisor or metric
	// sample stays usable; an older one is stale and ignored.
	StaleIntervals = 3
	// FollowCycles is how many cycles after one whose change passed the
	// sensitivity a port keeps following its targets within the dead band.
	FollowCycles = 3
)

// Proportions say how much each of the four inputs counts, in percent of
// the whole; they sum to 100. A zero proportion switches an input off.
type Proportions struct {
	// Active is the share of active connections per unit of weight (ACTV).
	Active int `json:"active"`
	// New is the share of new connections per unit of weight since the last
	// cycle (NEWC).
	New int `json:"new"`
	// Port is the share of the advisor's load in milliseconds (PORT).
	Port int `json:"port"`
	// System is the share of the metric server's load, 0..100 (SYS).
	System int `json:"system"`
}

// DefaultProportions returns IBM's default proportions: 50 50 0 0.
func DefaultProportions() Proportions {
	return Proportions{Active: 50, New: 50}
}

// Validate reports whether every proportion is in 0..100 and they sum to
// 100.
func (p Proportions) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"active", p.Active}, {"new", p.New}, {"port", p.Port}, {"system", p.System}} {
		if f.v < 0 || f.v > 100 {
			return fmt.Errorf("checking proportions: %s proportion %d is outside 0..100", f.name, f.v)
		}
	}
	if sum := p.Active + p.New + p.Port + p.System; sum != 100 {
		return fmt.Errorf("checking proportions: active %d + new %d + port %d + system %d = %d, want 100",
			p.Active, p.New, p.Port, p.System, sum)
	}
	return nil
}

// String returns the proportions as IBM prints them: "50 50 0 0".
func (p Proportions) String() string {
	return fmt.Sprintf("%d %d %d %d", p.Active, p.New, p.Port, p.System)
}

// Params are one port's manager settings.
type Params struct {
	// Proportions weight the four inputs.
	Proportions Proportions `json:"proportions"`
	// WeightBound is the highest weight a server of the port may have,
	// 1..MaxWeightBound.
	WeightBound int `json:"weight_bound"`
	// Smoothing is the smoothing index, at least 1: each cycle a weight
	// moves 1/Smoothing of the way from its current value to its target.
	// 1 jumps straight to the target; higher is steadier.
	Smoothing float64 `json:"smoothing"`
	// Sensitivity is the threshold, in percent 0..100, that the port's
	// load-driven change (see Result.Change) must exceed to be pushed.
	Sensitivity float64 `json:"sensitivity"`
	// Interval is the manager interval; a sample older than StaleIntervals
	// intervals is stale.
	Interval time.Duration `json:"interval"`
	// FollowThrough is the port's state, not configuration: the previous
	// cycle's Result.FollowThrough (0 on the first cycle). While it is
	// above 0 a change within the sensitivity is still pushed, so that a
	// move that started above the threshold reaches its targets instead of
	// stopping within the dead band of them.
	FollowThrough int `json:"follow_through"`
}

// DefaultParams returns IBM's defaults: proportions 50 50 0 0, weightbound
// 20, smoothing 1.5, sensitivity 5%, interval 2 s.
func DefaultParams() Params {
	return Params{
		Proportions: DefaultProportions(),
		WeightBound: DefaultWeightBound,
		Smoothing:   DefaultSmoothing,
		Sensitivity: DefaultSensitivity,
		Interval:    DefaultInterval,
	}
}

// Validate reports the first parameter that is out of range.
func (p Params) Validate() error {
	if err := p.Proportions.Validate(); err != nil {
		return err
	}
	if p.WeightBound < 1 || p.WeightBound > MaxWeightBound {
		return fmt.Errorf("checking weightbound: %d is outside 1..%d", p.WeightBound, MaxWeightBound)
	}
	if math.IsNaN(p.Smoothing) || math.IsInf(p.Smoothing, 0) || p.Smoothing < 1 {
		return fmt.Errorf("checking smoothing: %v is not a finite number of at least 1", p.Smoothing)
	}
	if math.IsNaN(p.Sensitivity) || p.Sensitivity < 0 || p.Sensitivity > 100 {
		return fmt.Errorf("checking sensitivity: %v is outside 0..100 percent", p.Sensitivity)
	}
	if p.Interval <= 0 {
		return fmt.Errorf("checking interval: %v is not positive", p.Interval)
	}
	return nil
}

// sanitized returns p with every out-of-range value brought into range, so
// that Compute works (and never panics) whatever it is given. Valid
// parameters are returned unchanged.
func (p Params) sanitized() Params {
	p.Proportions.Active = max(p.Proportions.Active, 0)
	p.Proportions.New = max(p.Proportions.New, 0)
	p.Proportions.Port = max(p.Proportions.Port, 0)
	p.Proportions.System = max(p.Proportions.System, 0)
	p.WeightBound = min(max(p.WeightBound, 1), MaxWeightBound)
	if !(p.Smoothing >= 1) { // NaN too
		p.Smoothing = 1
	}
	switch {
	case math.IsNaN(p.Sensitivity):
		p.Sensitivity = DefaultSensitivity
	case p.Sensitivity < 0:
		p.Sensitivity = 0
	case p.Sensitivity > 100:
		p.Sensitivity = 100
	}
	if p.Interval <= 0 {
		p.Interval = DefaultInterval
	}
	p.FollowThrough = min(max(p.FollowThrough, 0), FollowCycles)
	return p
}
