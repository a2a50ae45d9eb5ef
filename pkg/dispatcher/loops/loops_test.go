package loops

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
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
			Repeat(ctx, Spread(1, tt.interval), tt.interval, func(_ context.Context, next func()) {
				if inRun.Add(1) > 1 {
					overlaps.Add(1)
				}
				runs.Add(1)
				time.Sleep(tt.runFor)
				inRun.Add(-1)
				next()
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
		Repeat(ctx, time.Second, time.Hour, func(_ context.Context, next func()) { runs.Add(1); next() })
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

// TestQueue: items come out oldest first, at most n at a time, Ready
// receives while some are left, and each item's next is called when it is
// taken, not before.
func TestQueue(t *testing.T) {
	q := NewQueue[int]()
	var nexts []int
	for i := 0; i < 5; i++ {
		q.Put(i, func() { nexts = append(nexts, i) })
	}
	q.Put(5, nil)
	for _, want := range [][]int{{0, 1}, {2, 3}, {4, 5}} {
		select {
		case <-q.Ready():
		default:
			t.Fatalf("Ready does not receive with %v waiting", want)
		}
		got := q.Take(2)
		if !slices.Equal(got, want) {
			t.Fatalf("Take(2) = %v, want %v", got, want)
		}
		if len(nexts) != min(want[1]+1, 5) {
			t.Fatalf("after taking %v, nexts called for %v", got, nexts)
		}
	}
	select {
	case <-q.Ready():
		t.Error("Ready receives with nothing waiting")
	default:
	}
	if got := q.Take(2); len(got) != 0 {
		t.Errorf("Take on an empty queue: %v", got)
	}
}

// TestRepeatWaitsForTake: a loop whose result is not taken does not run
// again; once it is taken, it does.
func TestRepeatWaitsForTake(t *testing.T) {
	q := NewQueue[int]()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runs atomic.Int32
	Repeat(ctx, 10*time.Millisecond, 10*time.Millisecond, func(_ context.Context, next func()) { q.Put(int(runs.Add(1)), next) })
	<-q.Ready()
	time.Sleep(200 * time.Millisecond) // twenty intervals
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d runs while the first result waited, want 1", n)
	}
	if got := q.Take(10); !slices.Equal(got, []int{1}) {
		t.Fatalf("took %v, want [1]", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runs.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("%d runs after the first result was taken, want 2", n)
	}
}

func TestSpread(t *testing.T) {
	tests := []struct {
		n        int
		interval time.Duration
		want     time.Duration
	}{
		{1, 5 * time.Second, time.Second},
		{10000, 5 * time.Second, time.Second},
		{30000, 5 * time.Second, 3 * time.Second},
		{100000, 5 * time.Second, 5 * time.Second}, // never slower than the steady rate
		{100000, time.Minute, 10 * time.Second},
		{1, 100 * time.Millisecond, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := Spread(tt.n, tt.interval); got != tt.want {
			t.Errorf("Spread(%d, %v) = %v, want %v", tt.n, tt.interval, got, tt.want)
		}
	}
}

// TestLimiter: at most n run at a time, the others wait without a
// goroutine, and all of them run; with n = 1, oldest first.
func TestLimiter(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			const total = 50
			l := NewLimiter(n)
			release := make(chan struct{})
			var running, most atomic.Int32
			var mu sync.Mutex
			var order []int
			var wg sync.WaitGroup
			before := runtime.NumGoroutine()
			for i := 0; i < total; i++ {
				wg.Add(1)
				l.Go(func() {
					defer wg.Done()
					r := running.Add(1)
					for m := most.Load(); r > m && !most.CompareAndSwap(m, r); m = most.Load() {
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					<-release
					running.Add(-1)
				})
			}
			if grown := runtime.NumGoroutine() - before; grown > n {
				t.Errorf("%d functions given, %d may run: %d goroutines", total, n, grown)
			}
			close(release)
			wg.Wait()
			if m := most.Load(); m > int32(n) {
				t.Errorf("%d ran at once, want at most %d", m, n)
			}
			if len(order) != total {
				t.Fatalf("%d of %d ran", len(order), total)
			}
			if n == 1 && !slices.IsSorted(order) {
				t.Errorf("order %v: waiting functions ran out of order", order)
			}
		})
	}
}

// TestStarting: a start function learns how many loops start with it.
func TestStarting(t *testing.T) {
	var set *Set[string, int]
	var seen []int
	set = New(func(context.Context, string, int, uint64) error { seen = append(seen, set.Starting()); return nil },
		func(a, b int) bool { return a == b })
	set.Sync(context.Background(), map[string]int{"a": 1, "b": 1, "c": 1}, nil)
	_ = set.Put(context.Background(), "d", 1)
	if !slices.Equal(seen, []int{3, 3, 3, 1}) {
		t.Errorf("Starting() seen by the starts: %v, want [3 3 3 1]", seen)
	}
}
