package manager_test

import (
	"fmt"
	"github.com/dlbproject/dlb/pkg/lb"
	"time"

	"github.com/dlbproject/dlb/manager"
)

func ExampleCompute() {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sample := func(v float64) manager.Sample { return manager.Sample{Value: v, At: now.Add(-time.Second)} }

	p := manager.DefaultParams()
	p.Proportions = lb.Proportions{Active: 30, New: 30, Port: 40, System: 0}
	res := manager.Compute(p, []manager.Server{
		{Key: "a", Weight: 10, Configured: 10, Active: 100, New: 40, Advisor: sample(80)},
		{Key: "b", Weight: 10, Configured: 10, Active: 100, New: 40, Advisor: sample(80)},
		{Key: "c", Weight: 10, Configured: 10, Active: 150, New: 40, Advisor: sample(312)},
		{Key: "d", Weight: 10, Configured: 10, State: lb.ServerFailed},
	}, now)
	for _, s := range res.Servers {
		fmt.Printf("%s %2d (target %5.2f) %s\n", s.Key, s.Weight, s.Target, s.Reason)
	}
	fmt.Printf("change %.1f%%, push %v\n", res.Change, res.Push)
	// Output:
	// a 11 (target 11.12) lower advisor load (80 ms vs mean 196 ms)
	// b 11 (target 11.12) lower advisor load (80 ms vs mean 196 ms)
	// c  9 (target  7.76) higher advisor load (312 ms vs mean 80 ms)
	// d  0 (target  0.00) advisor down
	// change 13.3%, push true
}
