// Package logqueue is a log sink that does not let a stuck reader hold
// its writers: the daemons' log lines go through it to standard error,
// whose reader (a pipe to journald or to a logger) may stall. A daemon
// whose every goroutine blocks on a log line stops answering, probing and
// taking over; one that queues, then drops, lines while its reader is
// stuck goes on, and says how many it dropped once the reader is back.
package logqueue

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// Defaults of New.
const (
	// DefaultMax is the most a Writer holds for its reader: some
	// thousands of lines, seconds of a busy daemon's debug log.
	DefaultMax = 1 << 20
	// DefaultWait is how long a Write waits for its line to be written
	// while the reader keeps up.
	DefaultWait = 100 * time.Millisecond
)

// Writer hands each Write (one log line, as slog's handlers write them)
// to a goroutine of its own that writes the lines to its output, in
// order. While the output keeps up, a Write returns once its line is
// written, as a direct write would; when a line waits longer than the
// wait, Writes stop waiting (lines queue) until the queue is empty
// again. While the queue holds max bytes a line is dropped and counted;
// where lines were dropped, the output has a line saying how many.
// (Memory: the queue, and the batch being written, each at most max
// bytes.)
type Writer struct {
	out    io.Writer
	max    int
	wait   time.Duration
	notice *slog.Logger // writes the lines that say lines were dropped

	mu      sync.Mutex
	queue   []entry
	size    int
	dropped uint64
	queued  uint64        // lines queued so far
	written uint64        // lines written so far
	moved   chan struct{} // closed (and replaced) when written grows
	stuck   bool          // a line waited longer than wait; the queue has not emptied since
	closed  bool
	wake    chan struct{}
	done    chan struct{}
}

// entry is a queued line, or (line nil) how many lines were dropped
// there.
type entry struct {
	line    []byte
	dropped uint64
}

// Options are a Writer's; zero values mean the defaults.
type Options struct {
	// Max is the most the queue holds, in bytes (DefaultMax).
	Max int
	// Wait is how long a Write waits for its line (DefaultWait).
	Wait time.Duration
	// Handler makes the handler, writing to the output, of the lines
	// that say lines were dropped: the format of the others (nil: slog's
	// text handler).
	Handler func(io.Writer) slog.Handler
}

// New returns a Writer to out. Close it to write what it holds before the
// program ends.
func New(out io.Writer, o Options) *Writer {
	if o.Max <= 0 {
		o.Max = DefaultMax
	}
	if o.Wait <= 0 {
		o.Wait = DefaultWait
	}
	if o.Handler == nil {
		o.Handler = func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, nil) }
	}
	w := &Writer{out: out, max: o.Max, wait: o.Wait, notice: slog.New(o.Handler(out)), moved: make(chan struct{}),
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	go w.run()
	return w
}

// Format returns the handler maker of a log format the daemons take
// (--log-format): "text" (slog's key=value lines) or "json" (one JSON
// object a line, for collectors), with opts.
func Format(name string, opts *slog.HandlerOptions) (func(io.Writer) slog.Handler, error) {
	switch name {
	case "text":
		return func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, opts) }, nil
	case "json":
		return func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, opts) }, nil
	}
	return nil, fmt.Errorf("%q is not a log format: text or json", name)
}

// Write queues a copy of p and waits, at most the Writer's wait, for it
// to be written. It never fails: a line that does not fit, or comes after
// Close, is dropped.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.closed || w.size+len(p) > w.max {
		w.dropped++
		if !w.closed {
			if n := len(w.queue); n > 0 && w.queue[n-1].line == nil {
				w.queue[n-1].dropped++
			} else {
				w.queue = append(w.queue, entry{dropped: 1})
			}
		}
		w.mu.Unlock()
		return len(p), nil
	}
	w.queue = append(w.queue, entry{line: append([]byte(nil), p...)})
	w.size += len(p)
	w.queued++
	seq, stuck, moved := w.queued, w.stuck, w.moved
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	if stuck {
		return len(p), nil
	}
	timer := time.NewTimer(w.wait)
	defer timer.Stop()
	for {
		select {
		case <-moved:
			w.mu.Lock()
			written := w.written
			moved = w.moved
			w.mu.Unlock()
			if written >= seq {
				return len(p), nil
			}
		case <-timer.C:
			w.mu.Lock()
			w.stuck = true
			w.mu.Unlock()
			return len(p), nil
		}
	}
}

// Dropped counts the lines dropped so far.
func (w *Writer) Dropped() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dropped
}

// run writes the queued lines until Close.
func (w *Writer) run() {
	defer close(w.done)
	var told uint64 // drops already said
	for {
		<-w.wake
		for {
			w.mu.Lock()
			batch, closed := w.queue, w.closed
			w.queue, w.size = nil, 0
			if len(batch) == 0 {
				w.stuck = false
			}
			w.mu.Unlock()
			for _, e := range batch {
				if e.line == nil {
					told += e.dropped
					w.notice.Warn("log lines dropped: the log's reader did not keep up", "dropped", e.dropped, "since_start", told)
					continue
				}
				_, _ = w.out.Write(e.line)
				w.mu.Lock()
				w.written++
				close(w.moved)
				w.moved = make(chan struct{})
				w.mu.Unlock()
			}
			if closed {
				return
			}
			if len(batch) == 0 {
				break
			}
		}
	}
}

// Close stops taking lines, and waits at most timeout for those queued
// to be written (the reader may be stuck). It reports whether they were.
func (w *Writer) Close(timeout time.Duration) bool {
	w.mu.Lock()
	already := w.closed
	w.closed = true
	w.mu.Unlock()
	if !already {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	select {
	case <-w.done:
		return true
	case <-time.After(timeout):
		return false
	}
}
