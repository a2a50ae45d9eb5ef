package loops

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recorder starts loops that only wait for their context, and records
// starts and stops.
type recorder struct {
	mu      sync.Mutex
	started map[string]int
	running map[string]bool
	wg      sync.WaitGroup
}

func (r *recorder) start(ctx context.Context, k string, s int, gen uint64) error {
	if s < 0 {
		return errors.New("bad spec")
	}
	r.mu.Lock()
	r.started[k]++
	r.running[k] = true
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		<-ctx.Done()
		r.mu.Lock()
		r.running[k] = false
		r.mu.Unlock()
	}()
	return nil
}

func TestSync(t *testing.T) {
	r := &recorder{started: map[string]int{}, running: map[string]bool{}}
	set := New(r.start, func(a, b int) bool { return a == b })
	ctx := context.Background()
	set.Sync(ctx, map[string]int{"a": 1, "b": 1, "c": 1}, nil)
	// b's spec changes, c goes, d is new; e is outside the synced part.
	set.Sync(ctx, map[string]int{"a": 1, "b": 2, "d": 1}, func(k string) bool { return k != "e" })
	errs := set.Sync(ctx, map[string]int{"x": -1}, func(k string) bool { return k == "x" })
	set.StopAll()
	r.wg.Wait()
	if r.started["a"] != 1 || r.started["b"] != 2 || r.started["c"] != 1 || r.started["d"] != 1 || r.started["x"] != 0 {
		t.Errorf("starts %v", r.started)
	}
	if errs["x"] == nil {
		t.Error("a failed start was not reported")
	}
	for k, on := range r.running {
		if on {
			t.Errorf("%s still running after StopAll", k)
		}
	}
}

func TestCurrent(t *testing.T) {
	var gens []uint64
	set := New(func(_ context.Context, _ string, _ int, gen uint64) error { gens = append(gens, gen); return nil },
		func(a, b int) bool { return a == b })
	ctx := context.Background()
	_ = set.Put(ctx, "a", 1)
	_ = set.Put(ctx, "a", 2) // restarted: a new generation
	if set.Current("a", gens[0]) || !set.Current("a", gens[1]) {
		t.Errorf("generations %v: the old one must not be current, the new one must", gens)
	}
	set.Delete("a")
	if set.Current("a", gens[1]) {
		t.Error("a stopped loop's generation is still current")
	}
}

// TestRepeat: runs come about every interval, one at a time, the first
// within a second even for a long interval, and none once ctx ends.
func TestRepeat(t *testing.T) {
	tests := []struct {
		name     string
		interval time.Duration
		runFor   time.Duration // how long each run takes
		atLeast  int           // runs within the second watched
	}{
		{"short interval", 10 * time.Millisecond, 0, 10},
		{"runs longer than the interval", 5 * time.Millisecond, 20 * time.Millisecond, 5},
		{"long interval: the first within a second", time.Hour, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var runs, inRun, overlaps atomic.Int32
			ctx, cancel := context.WithCancel(context.Background())
			Repeat(ctx, tt.interval, func(rctx context.Context) {
				if inRun.Add(1) > 1 {
					overlaps.Add(1)
				}
				runs.Add(1)
				time.Sleep(tt.runFor)
				inRun.Add(-1)
			})
			time.Sleep(1100 * time.Millisecond)
			cancel()
			if n := runs.Load(); int(n) < tt.atLeast {
				t.Errorf("%d runs in 1.1 s, want at least %d", n, tt.atLeast)
			}
			if n := overlaps.Load(); n > 0 {
				t.Errorf("runs overlapped %d times", n)
			}
			time.Sleep(tt.runFor + 10*time.Millisecond) // a run under way ends
			after := runs.Load()
			time.Sleep(100 * time.Millisecond)
			if n := runs.Load(); n != after {
				t.Errorf("%d runs started after ctx ended", n-after)
			}
		})
	}
}

// TestRepeatHoldsNoGoroutine: waiting loops cost no goroutine each.
func TestRepeatHoldsNoGoroutine(t *testing.T) {
	const n = 1000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runs atomic.Int32
	before := runtime.NumGoroutine()
	for i := 0; i < n; i++ {
		Repeat(ctx, time.Hour, func(context.Context) { runs.Add(1) })
	}
	deadline := time.Now().Add(5 * time.Second)
	for runs.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := runs.Load(); got != n {
		t.Fatalf("%d of %d loops ran in 5 s", got, n)
	}
	time.Sleep(50 * time.Millisecond) // the last runs' goroutines end
	if grown := runtime.NumGoroutine() - before; grown > n/10 {
		t.Errorf("%d waiting loops hold %d goroutines", n, grown)
	}
}
