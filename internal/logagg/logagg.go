// Package logagg keeps a burst of identical warnings from flooding a log:
// a slog.Handler that passes the first few records of each kind (level and
// message) per interval and counts the others, then writes one line per
// kind saying how many it held back. A refused change of 10,000 servers
// that each cannot be reached logs a handful of lines and a count, not
// 10,000 lines.
package logagg

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// Defaults of Options.
const (
	DefaultBurst    = 5
	DefaultInterval = 10 * time.Second
)

// Options configure a Handler. Zero values mean the defaults.
type Options struct {
	// Level is the lowest level aggregated (default slog.LevelWarn):
	// records below it always pass.
	Level slog.Level
	// Burst is how many records of a kind pass per Interval.
	Burst    int
	Interval time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Handler aggregates repeated records; see the package doc. Handlers
// derived with WithAttrs and WithGroup share their parent's counts.
type Handler struct {
	next slog.Handler
	st   *state
}

type kind struct {
	level slog.Level
	msg   string
}

// window is one kind's current interval.
type window struct {
	start  time.Time
	passed int
	held   int
	// last is the most recent record held back, for its attributes.
	last slog.Record
	h    slog.Handler // the handler the last held record came through
}

type state struct {
	mu    sync.Mutex
	opts  Options
	kinds map[kind]*window
}

// New returns a Handler writing to next.
func New(next slog.Handler, o Options) *Handler {
	if o.Level == 0 {
		o.Level = slog.LevelWarn
	}
	if o.Burst <= 0 {
		o.Burst = DefaultBurst
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Handler{next: next, st: &state{opts: o, kinds: map[kind]*window{}}}
}

// Enabled reports whether the next handler takes records of level l.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// WithAttrs returns a handler adding attrs, sharing h's counts.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(attrs), st: h.st}
}

// WithGroup returns a handler opening a group, sharing h's counts.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), st: h.st}
}

// Handle passes r on, or counts it when its kind passed Burst records in
// the current interval. A kind whose interval ended first writes its
// summary.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < h.st.opts.Level {
		return h.next.Handle(ctx, r)
	}
	k := kind{r.Level, r.Message}
	now := h.st.opts.Now()
	h.st.mu.Lock()
	w := h.st.kinds[k]
	var summary *pending
	if w != nil && now.Sub(w.start) >= h.st.opts.Interval {
		summary = w.summary(k, now)
		w = nil
	}
	if w == nil {
		w = &window{start: now}
		h.st.kinds[k] = w
	}
	pass := w.passed < h.st.opts.Burst
	if pass {
		w.passed++
	} else {
		w.held++
		w.last, w.h = r.Clone(), h.next
	}
	h.st.mu.Unlock()
	if summary != nil {
		_ = summary.write(ctx)
	}
	if !pass {
		return nil
	}
	return h.next.Handle(ctx, r)
}

// Flush writes the summaries of the kinds whose interval has ended and
// forgets them; call it now and then (the engine does every second), so
// that a burst that stopped is still counted.
func (h *Handler) Flush() {
	now := h.st.opts.Now()
	type due struct {
		start time.Time
		p     *pending
	}
	var out []due
	h.st.mu.Lock()
	for k, w := range h.st.kinds {
		if now.Sub(w.start) < h.st.opts.Interval {
			continue
		}
		if p := w.summary(k, now); p != nil {
			out = append(out, due{w.start, p})
		}
		delete(h.st.kinds, k)
	}
	h.st.mu.Unlock()
	// In the order the kinds began, then by message: the log reads the
	// same way every time, whatever the map's order.
	slices.SortFunc(out, func(a, b due) int {
		if c := a.start.Compare(b.start); c != 0 {
			return c
		}
		return strings.Compare(a.p.r.Message, b.p.r.Message)
	})
	for _, d := range out {
		_ = d.p.write(context.Background())
	}
}

// pending is a summary to write outside the lock.
type pending struct {
	h slog.Handler
	r slog.Record
}

func (p *pending) write(ctx context.Context) error { return p.h.Handle(ctx, p.r) }

// summary returns the line for a kind whose records were held back, or
// nil: the message, how many were held back over how long, and the last
// one's attributes.
func (w *window) summary(k kind, now time.Time) *pending {
	if w.held == 0 {
		return nil
	}
	r := slog.NewRecord(now, k.level, k.msg+" (repeated)", 0)
	r.AddAttrs(slog.Int("suppressed", w.held), slog.Duration("over", now.Sub(w.start).Round(time.Second)))
	last := []slog.Attr{}
	w.last.Attrs(func(a slog.Attr) bool { last = append(last, a); return true })
	if len(last) > 0 {
		r.AddAttrs(slog.Any("last", slog.GroupValue(last...)))
	}
	return &pending{h: w.h, r: r}
}
