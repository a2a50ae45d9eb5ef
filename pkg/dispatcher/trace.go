package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"os"
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

// Trace runs a packet trace with filter f: it calls started once the
// executor traces, then emit with every packet, until ctx is done (the
// client went away, or its duration passed), emit returns an error (the
// client has its count, or cannot be written to), or the executor stops.
// It returns the trace's counts. One trace runs at a time
// (lb.ErrTraceRunning). The trace runs off the management goroutine:
// only starting and stopping it take turns with the engine's other work.
func (e *Engine) Trace(ctx context.Context, f lb.TraceFilter, started func(), emit func(lb.TracePacket) error) (lb.TraceStats, error) {
	tr, err := call(ctx, e, func() (lb.PacketTrace, error) {
		if e.exec.dp == nil {
			return nil, ErrExecutorNotRunning
		}
		t, ok := e.exec.dp.(Tracer)
		if !ok {
			return nil, ErrNoTrace
		}
		return t.StartTrace(f)
	})
	if err != nil {
		return lb.TraceStats{}, err
	}
	e.log.Info("packet trace started", "filter", fmt.Sprintf("%+v", f))
	err = e.followTrace(ctx, tr, started, emit)
	// Stopped on the management goroutine, which may have closed the
	// executor meanwhile (then it stopped the trace, and Stop returns
	// its counts again); directly when the engine is gone.
	var st lb.TraceStats
	var serr error
	if derr := e.do(context.Background(), func() { st, serr = tr.Stop() }); derr != nil {
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
