package loops

import (
	"context"
	"errors"
	"sync"
	"testing"
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
