// Package console serves dlbd's web console: a read-only page that shows
// clusters, ports and servers (configured and current weight, state, the
// manager's reason, advisor load, active connections, new connections and
// packets per second as small live charts), the executor's packet reasons
// and table fill, the recent events, the executor report's warnings, and
// high availability's and the BGP speaker's state when they are
// configured. The page polls a JSON snapshot (/api/snapshot) every second,
// taken from the engine's status like every report, and shared by every
// page open while it is fresh; its assets are embedded in dlbd and load
// nothing from elsewhere.
//
// A configuration of more than Options.MaxServers servers is shown port by
// port, without server rows: a snapshot of every server every second
// would cost the engine more than a glance is worth (dlbctl server report
// and the metrics have them all).
package console

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/lb"
)

//go:embed assets
var assets embed.FS

// Source is what the console reads: the engine's configuration and status
// snapshots.
type Source interface {
	Status(ctx context.Context, q dispatcher.Query) (*dispatcher.Status, error)
	Config(ctx context.Context) (lb.Config, error)
}

// Options configure a Handler.
type Options struct {
	// Version is dlbd's version, shown on the page.
	Version string
	// MaxServers is the most servers the page lists one by one (default
	// 2000).
	MaxServers int
	// Interval is how often the page polls (default 1 s).
	Interval time.Duration
	// WarningsEvery is how often a snapshot reads the executor report's
	// warnings (default 10 s); the snapshots between show the last ones.
	WarningsEvery time.Duration
	// Logger receives errors; slog.Default() when nil.
	Logger *slog.Logger
}

// Handler serves the console.
type Handler struct {
	src    Source
	opts   Options
	static http.Handler

	// one lets one snapshot be taken at a time; it guards the fields
	// below. However many pages are open, they share the latest snapshot
	// while it is less than half an interval old: the engine takes about
	// one per interval, not one per viewer.
	one        chan struct{}
	body       []byte
	bodyAt     time.Time
	warnings   []string
	warningsAt time.Time // zero: not read yet
}

// NewHandler returns the console's handler of src.
func NewHandler(src Source, opts Options) *Handler {
	if opts.MaxServers <= 0 {
		opts.MaxServers = 2000
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.WarningsEvery <= 0 {
		opts.WarningsEvery = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return &Handler{src: src, opts: opts, static: http.FileServerFS(sub), one: make(chan struct{}, 1)}
}

// The page's policy: its own scripts, styles and requests only.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// ServeHTTP serves the page, its assets and the snapshot.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the console is read-only", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Security-Policy", csp)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	switch p := r.URL.Path; {
	case p == "/api/snapshot":
		h.snapshot(w, r)
	case p == "/" || p == "/console.js" || p == "/console.css" || p == "/favicon.svg":
		w.Header().Set("Cache-Control", "no-cache")
		h.static.ServeHTTP(w, r)
	case strings.HasPrefix(p, "/index.html"):
		http.Redirect(w, r, "/", http.StatusMovedPermanently)
	default:
		http.NotFound(w, r)
	}
}

func (h *Handler) snapshot(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	body, err := h.current(ctx)
	if err != nil {
		h.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		return
	}
	if _, err := w.Write(body); err != nil {
		h.opts.Logger.Debug("console: writing a snapshot", "err", err)
	}
}

// current returns the latest snapshot, encoded, while it is less than
// half an interval old, and takes a new one otherwise; callers meanwhile
// wait for it and share it.
func (h *Handler) current(ctx context.Context) ([]byte, error) {
	select {
	case h.one <- struct{}{}:
		defer func() { <-h.one }()
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the snapshot another viewer asked for: %w", ctx.Err())
	}
	if h.body != nil && time.Since(h.bodyAt) < h.opts.Interval/2 {
		return h.body, nil
	}
	cfg, err := h.src.Config(ctx)
	if err != nil {
		return nil, err
	}
	servers := countServers(cfg)
	depth := lb.ServerDepth
	if servers > h.opts.MaxServers {
		depth = lb.PortDepth
	}
	readWarnings := h.warningsAt.IsZero() || time.Since(h.warningsAt) >= h.opts.WarningsEvery
	st, err := h.src.Status(ctx, dispatcher.Query{Depth: depth, Counters: true, Warnings: readWarnings, HA: true, BGP: true})
	if err != nil {
		return nil, err
	}
	if readWarnings {
		h.warnings, h.warningsAt = slices.Clone(st.Executor.Warnings), time.Now()
	}
	v := view(st, depth == lb.ServerDepth, h.opts.MaxServers)
	if h.warnings != nil {
		v.Warnings = h.warnings
	}
	v.WarningsAt = h.warningsAt
	v.Version, v.Interval = h.opts.Version, int(h.opts.Interval/time.Millisecond)
	body, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding the snapshot: %w", err)
	}
	h.body, h.bodyAt = append(body, '\n'), time.Now()
	return h.body, nil
}

func (h *Handler) fail(w http.ResponseWriter, err error) {
	h.opts.Logger.Warn("console: reading the engine's status", "err", err)
	http.Error(w, fmt.Sprintf("reading the engine's status: %v", err), http.StatusServiceUnavailable)
}
