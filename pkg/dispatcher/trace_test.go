package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
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

	if st, err := h.e.Status(context.Background(), Query{}); err != nil || st.Executor.Trace != nil {
		t.Fatalf("after the trace, status shows %+v (%v)", st.Executor.Trace, err)
	}

	// A trace ends when its context does; meanwhile the executor's status
	// shows it, and a second one is refused with what runs.
	tdp.queue = []lb.TracePacket{{Reason: "fwd_tx"}, {Reason: "fwd_tx"}}
	ctx, cancel := context.WithCancel(context.Background())
	running := make(chan struct{})
	emitted := make(chan struct{}, 2)
	done := make(chan error, 1)
	first := lb.TraceFilter{Cluster: netip.MustParseAddr("198.18.0.100"), Port: 80}
	begin := time.Now()
	go func() {
		_, err := h.e.Trace(ctx, first, func() { close(running) }, func(lb.TracePacket) error { emitted <- struct{}{}; return nil })
		done <- err
	}()
	<-running
	<-emitted
	<-emitted
	st2, err := h.e.Status(context.Background(), Query{})
	if err != nil {
		t.Fatal(err)
	}
	tr := st2.Executor.Trace
	if tr == nil || tr.Filter.String() != "cluster 198.18.0.100 port 80" || tr.Since.Before(begin) || tr.Since.After(time.Now()) {
		t.Fatalf("status of a running trace: %+v", tr)
	}
	// The count is taken after each packet is handed over: wait for it.
	for deadline := time.Now().Add(5 * time.Second); tr.Packets != 2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		st2, _ = h.e.Status(context.Background(), Query{})
		tr = st2.Executor.Trace
	}
	if tr.Packets != 2 {
		t.Fatalf("running trace counts %d packets, want 2", tr.Packets)
	}
	_, err = h.e.Trace(context.Background(), lb.TraceFilter{}, nil, func(lb.TracePacket) error { return nil })
	if !errors.Is(err, lb.ErrTraceRunning) || !strings.Contains(err.Error(), "cluster 198.18.0.100 port 80, since ") ||
		!strings.Contains(err.Error(), ", 2 packets so far") {
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
	if st, err := h.e.Status(context.Background(), Query{}); err != nil || st.Executor.Trace != nil {
		t.Fatalf("after the trace, status shows %+v (%v)", st.Executor.Trace, err)
	}

	// A refused filter starts nothing.
	if _, err := h.e.Trace(context.Background(), lb.TraceFilter{Reasons: []string{"bad"}}, nil, func(lb.TracePacket) error { return nil }); err == nil {
		t.Fatal("a bad filter was accepted")
	}
	if tdp.running != nil {
		t.Fatal("a refused trace runs")
	}
}
