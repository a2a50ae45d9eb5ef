package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
)

// Tracer is a Datapath that traces packets (pkg/datapath's does). A
// Datapath without it answers traces with ErrNoTrace.
type Tracer interface {
	// StartTrace starts a packet trace; lb.ErrTraceRunning while one
	// runs.
	StartTrace(lb.TraceFilter) (lb.PacketTrace, error)
}

// ErrNoTrace is returned by Trace when the executor cannot trace.
var ErrNoTrace = errors.New("this executor cannot trace packets")

// ErrExecutorNotRunning is returned by Trace while the executor is not
// loaded.
var ErrExecutorNotRunning = errors.New("the executor is not running (dlbctl executor start)")

// tracePoll bounds how long Trace waits for a packet before it looks at
// its context again: how long a trace whose client went away may keep the
// next one waiting.
const tracePoll = 50 * time.Millisecond

// traceRun is the packet trace that runs, as status snapshots show it.
type traceRun struct {
	filter lb.TraceFilter
	since  time.Time
	// packets counts those handed to the trace's client (written by the
	// goroutine that follows the trace).
	packets atomic.Uint64
}

// status is what a snapshot shows of r.
func (r *traceRun) status() *TraceStatus {
	return &TraceStatus{Filter: r.filter, Since: r.since, Packets: r.packets.Load()}
}

// Trace runs a packet trace with filter f: it calls started once the
// executor traces, then emit with every packet, until ctx is done (the
// client went away, or its duration passed), emit returns an error (the
// client has its count, or cannot be written to), or the executor stops.
// It returns the trace's counts. One trace runs at a time
// (lb.ErrTraceRunning). The trace runs off the management goroutine:
// only starting and stopping it take turns with the engine's other work.
func (e *Engine) Trace(ctx context.Context, f lb.TraceFilter, started func(), emit func(lb.TracePacket) error) (lb.TraceStats, error) {
	run := &traceRun{filter: f, since: time.Now()}
	tr, err := call(ctx, e, func() (lb.PacketTrace, error) {
		if e.exec.dp == nil {
			return nil, ErrExecutorNotRunning
		}
		t, ok := e.exec.dp.(Tracer)
		if !ok {
			return nil, ErrNoTrace
		}
		tr, err := t.StartTrace(f)
		switch {
		case errors.Is(err, lb.ErrTraceRunning) && e.exec.trace != nil:
			// Say which: the operator may want to wait for it, or
			// find who runs it.
			return nil, fmt.Errorf("%w: %s", err, e.exec.trace.status())
		case err == nil:
			e.exec.trace = run
		}
		return tr, err
	})
	if err != nil {
		return lb.TraceStats{}, err
	}
	e.log.Info("packet trace started", "filter", f.String())
	err = e.followTrace(ctx, tr, started, func(p lb.TracePacket) error {
		if err := emit(p); err != nil {
			return err
		}
		run.packets.Add(1)
		return nil
	})
	// Stopped on the management goroutine, which may have closed the
	// executor meanwhile (then it stopped the trace, and Stop returns
	// its counts again); directly when the engine is gone.
	var st lb.TraceStats
	var serr error
	if derr := e.do(context.Background(), func() {
		st, serr = tr.Stop()
		if e.exec.trace == run {
			e.exec.trace = nil
		}
	}); derr != nil {
		st, serr = tr.Stop()
	}
	if serr != nil {
		e.log.Error("stopping the packet trace", "err", serr)
	}
	e.log.Info("packet trace stopped", "packets", st.Packets, "lost", st.Lost)
	return st, err
}

// followTrace hands tr's packets to emit until ctx is done, emit fails or
// the trace ends. A nil error means ctx or emit ended it.
func (e *Engine) followTrace(ctx context.Context, tr lb.PacketTrace, started func(), emit func(lb.TracePacket) error) error {
	if started != nil {
		started()
	}
	for ctx.Err() == nil {
		p, err := tr.Next(time.Now().Add(tracePoll))
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading the trace: %w", err)
		}
		if err := emit(p); err != nil {
			return nil
		}
	}
	return nil
}
