package metrics

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/lb"
)

// Source is what the metrics are read from: the engine's status snapshot.
type Source interface {
	Status(ctx context.Context, q dispatcher.Query) (*dispatcher.Status, error)
}

// Options configure a Handler.
type Options struct {
	// Version is dlbd's version, for dlb_build_info.
	Version string
	// Logger receives scrape errors; slog.Default() when nil.
	Logger *slog.Logger
	// Timeout bounds one scrape's wait for the snapshot (default 10 s).
	Timeout time.Duration
	// NoProcess leaves out the Go runtime and process collectors (tests).
	NoProcess bool
}

// Handler serves /metrics.
type Handler struct {
	src  Source
	opts Options
	reg  *prometheus.Registry
	// one lets one scrape run at a time: a scrape of a large configuration
	// costs the engine a snapshot of every server, so concurrent scrapes
	// wait for each other rather than pile up.
	one chan struct{}
}

// NewHandler returns the /metrics handler of src.
func NewHandler(src Source, opts Options) *Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	reg := prometheus.NewRegistry()
	if !opts.NoProcess {
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "dlb_build_info",
		Help:        "dlbd's version and the Go version it was built with; always 1.",
		ConstLabels: prometheus.Labels{"version": opts.Version, "goversion": runtime.Version()},
	})
	info.Set(1)
	reg.MustRegister(info)
	return &Handler{src: src, opts: opts, reg: reg, one: make(chan struct{}, 1)}
}

// ServeHTTP writes the exposition in the text format (0.0.4), gzipped when
// the client accepts it (Prometheus does).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "metrics are read with GET", http.StatusMethodNotAllowed)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
	defer cancel()
	select {
	case h.one <- struct{}{}:
		defer func() { <-h.one }()
	case <-ctx.Done():
		http.Error(w, "another scrape is still running", http.StatusServiceUnavailable)
		return
	}
	st, err := h.src.Status(ctx, dispatcher.Query{Depth: lb.ServerDepth, Counters: true, Tables: true, Warnings: true, HA: true, BGP: true})
	if err != nil {
		h.opts.Logger.Warn("metrics: reading the engine's status", "err", err)
		http.Error(w, fmt.Sprintf("reading the engine's status: %v", err), http.StatusServiceUnavailable)
		return
	}
	families, err := h.reg.Gather()
	if err != nil {
		h.opts.Logger.Warn("metrics: gathering dlbd's own metrics", "err", err)
		http.Error(w, fmt.Sprintf("gathering dlbd's own metrics: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	w.Header().Add("Vary", "Accept-Encoding")
	if r.Method == http.MethodHead {
		return
	}
	var out io.Writer = w
	if acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		// The fastest level: a large exposition compresses about tenfold
		// even so, and the scrape stays short.
		gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
		defer gz.Close()
		out = gz
	}
	if err := Write(out, st, families); err != nil {
		// The status line is sent: the client sees a truncated body.
		h.opts.Logger.Debug("metrics: writing the exposition", "err", err)
	}
}

// Write writes the exposition of a snapshot, after the given families
// (gathered from a client_golang registry), in the text format.
func Write(w io.Writer, st *dispatcher.Status, families []*dto.MetricFamily) error {
	bw := bufio.NewWriterSize(w, 32<<10)
	for _, mf := range families {
		if _, err := expfmt.MetricFamilyToText(bw, mf); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	t := newTextWriter(w)
	writeStatus(t, st)
	t.flush()
	return t.err
}

// acceptsGzip reports whether the request accepts a gzipped body.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}
