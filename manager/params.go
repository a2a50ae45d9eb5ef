package manager

import (
	"fmt"
	"math"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
)

// The manager's own constants; its parameters' defaults and bounds are
// package lb's (lb.DefaultSmoothing, lb.DefaultSensitivity,
// lb.DefaultWeightBound, lb.MaxWeightBound, lb.DefaultProportions).
const (
	// DefaultInterval is the default manager interval (lb.DefaultInterval
	// seconds).
	DefaultInterval = time.Duration(lb.DefaultInterval * float64(time.Second))
	// StaleIntervals is how many manager intervals an advisor or metric
	// sample stays usable; an older one is stale and ignored.
	StaleIntervals = 3
	// FollowCycles is how many cycles after one whose change passed the
	// sensitivity a port keeps following its targets within the dead band.
	FollowCycles = 3
)

// Params are one port's manager settings.
type Params struct {
	// Proportions weight the four inputs (ACTV, NEWC, PORT, SYS).
	Proportions lb.Proportions `json:"proportions"`
	// WeightBound is the highest weight a server of the port may have,
	// 1..lb.MaxWeightBound.
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
		Proportions: lb.DefaultProportions(),
		WeightBound: lb.DefaultWeightBound,
		Smoothing:   lb.DefaultSmoothing,
		Sensitivity: lb.DefaultSensitivity,
		Interval:    DefaultInterval,
	}
}

// Validate reports the first parameter that is out of range.
func (p Params) Validate() error {
	if err := p.Proportions.Check("manager"); err != nil {
		return fmt.Errorf("checking proportions: %w", err)
	}
	if p.WeightBound < 1 || p.WeightBound > lb.MaxWeightBound {
		return fmt.Errorf("checking weightbound: %d is outside 1..%d", p.WeightBound, lb.MaxWeightBound)
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
	p.WeightBound = min(max(p.WeightBound, 1), lb.MaxWeightBound)
	if !(p.Smoothing >= 1) { // NaN too
		p.Smoothing = 1
	}
	switch {
	case math.IsNaN(p.Sensitivity):
		p.Sensitivity = lb.DefaultSensitivity
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
