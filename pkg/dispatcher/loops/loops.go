// Package loops keeps one loop running per key — an advisor's probes of
// one server, a metric poller of one server — in step with what the
// configuration wants: a key that appears gets a loop, a key whose spec
// changed gets its loop restarted, a key that disappears gets its loop
// stopped. It is the one reconciler the engine uses for both, and Repeat
// is the loop both run.
//
// A Set is not safe for concurrent use: the engine's management goroutine
// owns it. The loops themselves run on goroutines of their own and hand
// their results back tagged with a generation, so that a result of a loop
// that was stopped or restarted since is recognised and dropped (Current).
package loops

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// Set is a set of running loops keyed by K, each started from a spec S.
type Set[K comparable, S any] struct {
	start   func(ctx context.Context, k K, s S, gen uint64) error
	equal   func(a, b S) bool
	running map[K]*entry[S]
	gen     uint64
	syncing int // keys wanted by the Sync under way (Starting)
}

type entry[S any] struct {
	spec   S
	gen    uint64
	cancel context.CancelFunc
}

// New returns an empty set. start launches the loop of a key (it must not
// block: Repeat, or a goroutine that runs until ctx ends); an error leaves
// the key without a loop. equal says whether two specs are the same (a changed
// spec restarts the loop).
func New[K comparable, S any](start func(ctx context.Context, k K, s S, gen uint64) error, equal func(a, b S) bool) *Set[K, S] {
	return &Set[K, S]{start: start, equal: equal, running: map[K]*entry[S]{}}
}

// Put makes the loop of k run with spec s: it starts it, or restarts it if
// it runs with another spec. It returns the start error, if any.
func (set *Set[K, S]) Put(ctx context.Context, k K, s S) error {
	if cur, ok := set.running[k]; ok {
		if set.equal(cur.spec, s) {
			return nil
		}
		cur.cancel()
		delete(set.running, k)
	}
	set.gen++
	lctx, cancel := context.WithCancel(ctx)
	if err := set.start(lctx, k, s, set.gen); err != nil {
		cancel()
		return err
	}
	set.running[k] = &entry[S]{spec: s, gen: set.gen, cancel: cancel}
	return nil
}

// Delete stops the loop of k, if it runs.
func (set *Set[K, S]) Delete(k K) {
	if cur, ok := set.running[k]; ok {
		cur.cancel()
		delete(set.running, k)
	}
}

// Sync makes the loops whose keys pass in (nil: every key) match want:
// those in want run with its spec, the others stop. Keys that do not pass
// in are left alone, so that a change can reconcile only what it touched.
// It returns the keys whose loop could not be started, with the errors.
func (set *Set[K, S]) Sync(ctx context.Context, want map[K]S, in func(K) bool) map[K]error {
	set.syncing = len(want)
	defer func() { set.syncing = 0 }()
	for k := range set.running {
		if _, ok := want[k]; !ok && (in == nil || in(k)) {
			set.Delete(k)
		}
	}
	var errs map[K]error
	for k, s := range want {
		if err := set.Put(ctx, k, s); err != nil {
			if errs == nil {
				errs = map[K]error{}
			}
			errs[k] = err
		}
	}
	return errs
}

// Starting is, for a start function, how many loops start with it: the
// keys the Sync under way wants, or 1 (a Put of its own). Spread takes it.
func (set *Set[K, S]) Starting() int { return max(set.syncing, 1) }

// Current reports whether gen is the generation of k's running loop: a
// result tagged with another comes from a loop stopped since.
func (set *Set[K, S]) Current(k K, gen uint64) bool {
	cur, ok := set.running[k]
	return ok && cur.gen == gen
}

// Spec returns the spec k's loop runs with.
func (set *Set[K, S]) Spec(k K) (S, bool) {
	cur, ok := set.running[k]
	if !ok {
		var zero S
		return zero, false
	}
	return cur.spec, true
}

// Len returns the number of running loops.
func (set *Set[K, S]) Len() int { return len(set.running) }

// Keys calls f with every running key.
func (set *Set[K, S]) Keys(f func(K)) {
	for k := range set.running {
		f(k)
	}
}

// StopAll stops every loop.
func (set *Set[K, S]) StopAll() {
	for k := range set.running {
		set.Delete(k)
	}
}

// Repeat runs run about every interval until ctx ends: the first time
// within first (uniformly: see Spread), then interval after run calls
// next, jittered by ±10 %, so that many loops started together do not run
// in step. It returns at once. run must call next once: at its end, or
// later, on any goroutine (Queue.Take does, when the run's result is
// taken). Each run has a goroutine of its own, and between runs the loop
// holds only a timer: 100,000 loops that wait cost no goroutine stacks
// (8 KiB each at least). Runs of one loop never overlap; once ctx ends, no
// run starts (one under way ends when run returns).
func Repeat(ctx context.Context, first, interval time.Duration, run func(ctx context.Context, next func())) {
	var t *time.Timer
	next := func() {
		if ctx.Err() == nil {
			t.Reset(time.Duration(float64(interval) * (0.9 + 0.2*rand.Float64())))
		}
	}
	t = time.AfterFunc(time.Duration(1<<63-1), func() {
		if ctx.Err() == nil {
			run(ctx, next)
		}
	})
	// t is set before the timer can fire or next be called: it is armed
	// only now.
	t.Reset(time.Duration(rand.Int64N(int64(max(first, 0)) + 1)))
	context.AfterFunc(ctx, func() { t.Stop() })
}

// startRate is how many loops started together may run for the first time
// in a second (see Spread).
const startRate = 10000

// Spread is what the first runs of n loops started together, each every
// interval, are spread over: a second, or longer where that would start
// more than startRate a second, up to interval (their steady rate).
// 100,000 advisor probes started within one second ran 100,000
// goroutines, sockets and connects at once: gigabytes of stacks, the
// descriptors run out, and probes so late their time ran out.
func Spread(n int, interval time.Duration) time.Duration {
	return min(interval, max(time.Second, time.Duration(n)*time.Second/startRate))
}

// Queue hands what loops produce to the goroutine that owns them, oldest
// first, without keeping a loop's goroutine waiting: a result waiting to
// be taken costs its own size, not a goroutine's stack. A loop's next run
// is scheduled when its result is taken (Put's next, called by Take), so
// an owner that falls behind slows the loops down instead of piling up
// their results: the queue holds at most one result per loop.
type Queue[T any] struct {
	mu    sync.Mutex
	items []queued[T]
	ready chan struct{}
}

type queued[T any] struct {
	v    T
	next func()
}

// NewQueue returns an empty queue.
func NewQueue[T any]() *Queue[T] { return &Queue[T]{ready: make(chan struct{}, 1)} }

// Put queues v; Take calls next (nil: nothing) when v is taken.
func (q *Queue[T]) Put(v T, next func()) {
	q.mu.Lock()
	q.items = append(q.items, queued[T]{v: v, next: next})
	q.mu.Unlock()
	q.signal()
}

// Ready receives when the queue holds something to take.
func (q *Queue[T]) Ready() <-chan struct{} { return q.ready }

// Take removes and returns the oldest items, at most n, and calls their
// nexts. If more are left, Ready receives again.
func (q *Queue[T]) Take(n int) []T {
	q.mu.Lock()
	n = min(n, len(q.items))
	taken := q.items[:n:n]
	q.items = q.items[n:]
	if len(q.items) == 0 {
		q.items = nil // let the taken part's array go
	}
	more := len(q.items) > 0
	q.mu.Unlock()
	if more {
		q.signal()
	}
	out := make([]T, n)
	for i, it := range taken {
		out[i] = it.v
		if it.next != nil {
			it.next()
		}
	}
	clear(taken) // the array may live on under items: let what was taken go
	return out
}

func (q *Queue[T]) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// Limiter runs functions on goroutines of their own, at most n at a time;
// the others wait, oldest first, as functions, not goroutines. The zero
// Limiter is not usable: make one with NewLimiter.
type Limiter struct {
	mu      sync.Mutex
	n       int
	running int
	waiting []func()
}

// NewLimiter returns a limiter of n (at least 1) at a time.
func NewLimiter(n int) *Limiter { return &Limiter{n: max(n, 1)} }

// Go runs f, now if fewer than n run, otherwise once those before it ran.
func (l *Limiter) Go(f func()) {
	l.mu.Lock()
	if l.running < l.n {
		l.running++
		l.mu.Unlock()
		go l.run(f)
		return
	}
	l.waiting = append(l.waiting, f)
	l.mu.Unlock()
}

// run runs f, then whatever waits, until nothing does.
func (l *Limiter) run(f func()) {
	for f != nil {
		f()
		l.mu.Lock()
		f = nil
		if len(l.waiting) > 0 {
			f = l.waiting[0]
			l.waiting[0] = nil
			l.waiting = l.waiting[1:]
		} else {
			l.running--
			l.waiting = nil // let the array go
		}
		l.mu.Unlock()
	}
}
