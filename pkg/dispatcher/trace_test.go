package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
)

// tracingDatapath is a fake executor that traces: its trace hands over
// the packets in queue, then waits.
type tracingDatapath struct {
	*fakeDatapath
	mu      sync.Mutex
	running *fakeTrace
	filters []lb.TraceFilter
	queue   []lb.TracePacket
}

func (d *tracingDatapath) StartTrace(f lb.TraceFilter) (lb.PacketTrace, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running != nil {
		return nil, lb.ErrTraceRunning
	}
	if len(f.Reasons) > 0 && f.Reasons[0] == "bad" {
		return nil, errors.New(`unknown reason "bad"`)
	}
	d.filters = append(d.filters, f)
	ch := make(chan lb.TracePacket, len(d.queue))
	for _, p := range d.queue {
		ch <- p
	}
	d.running = &fakeTrace{d: d, ch: ch, done: make(chan struct{})}
	return d.running, nil
}

type fakeTrace struct {
	d     *tracingDatapath
	ch    chan lb.TracePacket
	done  chan struct{}
	once  sync.Once
	stops int
}

func (t *fakeTrace) Next(deadline time.Time) (lb.TracePacket, error) {
	select {
	case p := <-t.ch:
		return p, nil
	case <-t.done:
		return lb.TracePacket{}, errors.New("stopped")
	case <-time.After(time.Until(deadline)):
		return lb.TracePacket{}, fmt.Errorf("waiting: %w", os.ErrDeadlineExceeded)
	}
}

func (t *fakeTrace) Stop() (lb.TraceStats, error) {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	t.stops++
	t.once.Do(func() { close(t.done) })
	if t.d.running == t {
		t.d.running = nil
	}
	return lb.TraceStats{Packets: uint64(len(t.d.queue))}, nil
}

// newTracingHarness is a harness whose executor traces.
func newTracingHarness(t *testing.T) (*harness, *tracingDatapath) {
	tdp := &tracingDatapath{}
	var h *harness
	h = newHarnessWith(t, t.TempDir(), func(o *Options) {
		o.OpenDatapath = func() (Datapath, error) {
			h.opens++
			tdp.fakeDatapath = h.dp
			return tdp, nil
		}
	})
	return h, tdp
}

func TestTraceNeedsTheExecutor(t *testing.T) {
	h, _ := newTracingHarness(t)
	_, err := h.e.Trace(context.Background(), lb.TraceFilter{}, nil, func(lb.TracePacket) error { return nil })
	if !errors.Is(err, ErrExecutorNotRunning) {
		t.Fatalf("Trace without an executor: %v", err)
	}
	// A Datapath that cannot trace says so.
	h2 := newHarness(t, t.TempDir())
	base(h2)
	if _, err := h2.e.Trace(context.Background(), lb.TraceFilter{}, nil, func(lb.TracePacket) error { return nil }); !errors.Is(err, ErrNoTrace) {
		t.Fatalf("Trace on an executor without tracing: %v", err)
	}
}

func TestTrace(t *testing.T) {
	h, tdp := newTracingHarness(t)
	base(h)
	for i := range 5 {
		tdp.queue = append(tdp.queue, lb.TracePacket{Reason: "fwd_tx", Length: 60 + i})
	}

	// The client takes three packets and goes.
	var got []lb.TracePacket
	started := false
	f := lb.TraceFilter{Reasons: []string{"fwd_tx"}}
	st, err := h.e.Trace(context.Background(), f, func() { started = true }, func(p lb.TracePacket) error {
		got = append(got, p)
		if len(got) == 3 {
			return errors.New("enough")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !started || len(got) != 3 || got[2].Length != 62 || st.Packets != 5 {
		t.Fatalf("started %v, got %d packets, stats %+v", started, len(got), st)
	}
	if len(tdp.filters) != 1 || tdp.filters[0].Reasons[0] != "fwd_tx" || tdp.running != nil {
		t.Fatalf("filters %+v, still running %v", tdp.filters, tdp.running != nil)
	}

	// A trace ends when its context does, and a second one meanwhile is
	// refused; after it, a new one starts.
	tdp.queue = nil
	ctx, cancel := context.WithCancel(context.Background())
	running := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := h.e.Trace(ctx, lb.TraceFilter{}, func() { close(running) }, func(lb.TracePacket) error { return nil })
		done <- err
	}()
	<-running
	if _, err := h.e.Trace(context.Background(), lb.TraceFilter{}, nil, func(lb.TracePacket) error { return nil }); !errors.Is(err, lb.ErrTraceRunning) {
		t.Fatalf("second trace: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the trace did not end with its context")
	}
	if tdp.running != nil {
		t.Fatal("the trace was not stopped")
	}

	// A refused filter starts nothing.
	if _, err := h.e.Trace(context.Background(), lb.TraceFilter{Reasons: []string{"bad"}}, nil, func(lb.TracePacket) error { return nil }); err == nil {
		t.Fatal("a bad filter was accepted")
	}
	if tdp.running != nil {
		t.Fatal("a refused trace runs")
	}
}
