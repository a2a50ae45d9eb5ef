// Package server serves dlbd's admin API (package api) over HTTP. Every
// handler is a thin adapter: decode, call the engine, encode.
package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/lb"
)

// Engine is what the API serves; *dispatcher.Engine implements it.
type Engine interface {
	Apply(ctx context.Context, ops []config.Op) (int, error)
	// Replace makes the configuration equal to a configuration file's
	// (or, with dryRun, only checks it) and returns the one it replaced.
	Replace(ctx context.Context, next lb.Config, dryRun bool) (lb.Config, error)
	Status(ctx context.Context, q dispatcher.Query) (*dispatcher.Status, error)
	Config(ctx context.Context) (lb.Config, error)
}

// NotingEngine is an Engine that also says what a change did (notes) and
// what keeps it from working (warnings); the API passes them on in the
// result. *dispatcher.Engine implements it.
type NotingEngine interface {
	ApplyWithNotes(ctx context.Context, ops []config.Op) (dispatcher.Applied, error)
	ReplaceWithNotes(ctx context.Context, next lb.Config, dryRun bool) (lb.Config, dispatcher.Applied, error)
}

// Defaults of Options.
const (
	// DefaultMaxRequestSize bounds a request body: a file load of many
	// thousand operations fits.
	DefaultMaxRequestSize = 8 << 20
	// DefaultHeaderTimeout bounds reading a request's headers.
	DefaultHeaderTimeout = 10 * time.Second
	// DefaultBodyTimeout bounds reading a change request's body, from when
	// its turn comes.
	DefaultBodyTimeout = 30 * time.Second
	// DefaultIdleTimeout is how long a keep-alive connection may wait for
	// its next request.
	DefaultIdleTimeout = 30 * time.Second
)

// Options are the API's limits. Zero values mean the defaults.
type Options struct {
	// MaxRequestSize bounds a request body, in bytes; a larger one is
	// answered 413.
	MaxRequestSize int64
	// SizeSetting names what raises MaxRequestSize, for the message of a
	// refused request ("dlbd --max-request-size").
	SizeSetting string
	// HeaderTimeout, BodyTimeout and IdleTimeout bound reading headers,
	// reading a change request's body (408 when it stalls), and a
	// keep-alive connection's wait for its next request.
	HeaderTimeout, BodyTimeout, IdleTimeout time.Duration
	// Logger receives failed requests (discarded when nil).
	Logger *slog.Logger
	// Profiling serves Go's runtime profiles under /debug/pprof/ (as
	// net/http/pprof does), for finding where dlbd spends its time.
	Profiling bool
	// ServerChecker serves api.PathServerCheck; without one the path
	// answers 501.
	ServerChecker ServerChecker
}

func (o Options) withDefaults() Options {
	if o.MaxRequestSize <= 0 {
		o.MaxRequestSize = DefaultMaxRequestSize
	}
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = DefaultHeaderTimeout
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = DefaultBodyTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// NewServer returns the API's http.Server: New's handler, with the
// header, body and idle timeouts of o. A stalled request or an idle
// keep-alive connection is dropped when its timeout passes.
func NewServer(e Engine, o Options) *http.Server {
	o = o.withDefaults()
	return &http.Server{
		Handler:           New(e, o),
		ReadHeaderTimeout: o.HeaderTimeout,
		// ReadTimeout bounds the whole request; a change request waiting
		// for its turn gets BodyTimeout afresh when the turn comes (see
		// ops). No WriteTimeout: applying a large change may take long.
		ReadTimeout: o.HeaderTimeout + o.BodyTimeout,
		IdleTimeout: o.IdleTimeout,
		ErrorLog:    slog.NewLogLogger(o.Logger.Handler(), slog.LevelDebug),
	}
}

// Handler returns the API's HTTP handler with the default limits.
func Handler(e Engine, log *slog.Logger) http.Handler {
	return New(e, Options{Logger: log})
}

// New returns the API's HTTP handler with o's limits.
func New(e Engine, o Options) http.Handler {
	o = o.withDefaults()
	h := &handler{e: e, o: o, log: o.Logger, turn: make(chan struct{}, 1)}
	log := h.log
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+api.PathOps, h.ops)
	mux.HandleFunc("GET "+api.PathConfig, h.getConfig)
	mux.HandleFunc("POST "+api.PathConfig, h.postConfig)
	// The reports: a status snapshot rendered as the wire's types. Each
	// translates at the door, so that nothing below this package knows
	// the wire.
	report := func(path string, q func(*http.Request) dispatcher.Query, render func(*dispatcher.Status) any) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
			st, err := e.Status(r.Context(), q(r))
			if err != nil {
				respond(w, log, nil, err)
				return
			}
			respond(w, log, render(st), nil)
		})
	}
	target := func(d lb.Depth, counters bool) func(*http.Request) dispatcher.Query {
		return func(r *http.Request) dispatcher.Query {
			return dispatcher.Query{Depth: d, Target: r.URL.Query().Get("target"), Counters: counters}
		}
	}
	fixed := func(q dispatcher.Query) func(*http.Request) dispatcher.Query {
		return func(*http.Request) dispatcher.Query { return q }
	}
	report(api.PathExecutor, fixed(dispatcher.Query{Counters: true, Tables: true, Warnings: true}), func(st *dispatcher.Status) any { return executorReport(st) })
	report(api.PathClusters, target(lb.ClusterDepth, true), func(st *dispatcher.Status) any { return clusterReports(st) })
	report(api.PathPorts, target(lb.PortDepth, true), func(st *dispatcher.Status) any { return portReports(st) })
	report(api.PathServers, target(lb.ServerDepth, true), func(st *dispatcher.Status) any { return serverReports(st) })
	report(api.PathManager, target(lb.ServerDepth, false), func(st *dispatcher.Status) any { return managerReport(st) })
	report(api.PathAdvisors, fixed(dispatcher.Query{}), func(st *dispatcher.Status) any { return advisorReports(st) })
	report(api.PathMetrics, fixed(dispatcher.Query{}), func(st *dispatcher.Status) any { return metricReport(st) })
	report(api.PathHA, fixed(dispatcher.Query{HA: true}), func(st *dispatcher.Status) any { return haReport(st) })
	handleTakeover(mux, e, log)
	report(api.PathBGP, fixed(dispatcher.Query{BGP: true}), func(st *dispatcher.Status) any { return bgpReport(st) })
	mux.HandleFunc("GET "+api.PathConfigScript, func(w http.ResponseWriter, r *http.Request) {
		cfg, err := e.Config(r.Context())
		if err != nil {
			respond(w, log, nil, err)
			return
		}
		var buf bytes.Buffer
		if err := config.Script(&buf, cfg); err != nil {
			respond(w, log, nil, err)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(buf.Bytes())
	})
	handleServerCheck(mux, log, o.ServerChecker)
	handleTrace(mux, log, e)
	if o.Profiling {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// handler serves the API. Change requests take turns: the engine applies
// changes one at a time anyway, and a decoded request takes several times
// the memory of its body, so decoding them all at once (50 large requests
// at the same time) would take gigabytes. A request waiting for its turn
// holds no more than its connection; its body stays in the socket.
type handler struct {
	e    Engine
	o    Options
	log  *slog.Logger
	turn chan struct{}
	// waiting counts the change requests waiting for their turn.
	waiting atomic.Int32
}

func (h *handler) ops(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > h.o.MaxRequestSize {
		writeError(w, http.StatusRequestEntityTooLarge, api.Error{Message: h.tooLarge(), Op: -1})
		return
	}
	ctx, leave, ok := h.takeTurn(r.Context())
	if !ok {
		return // the client gave up waiting
	}
	defer leave()
	// The body's own deadline runs from now, not from when the request
	// arrived and started waiting.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.o.BodyTimeout))
	body := &countingReader{r: http.MaxBytesReader(w, r.Body, h.o.MaxRequestSize)}
	defer body.release()
	req, status, err := decodeRequest(body)
	if err != nil {
		msg := err.Error()
		if status == http.StatusRequestEntityTooLarge {
			msg = h.tooLarge()
		}
		if status == http.StatusRequestTimeout {
			msg = fmt.Sprintf("request body not received within %s", h.o.BodyTimeout)
		}
		writeError(w, status, api.Error{Message: msg, Op: -1})
		return
	}
	if ne, ok := h.e.(NotingEngine); ok {
		a, err := ne.ApplyWithNotes(ctx, Ops(req.Ops))
		respond(w, h.log, api.Result{Applied: a.Ops, Notes: a.Notes, Warnings: a.Warnings}, err)
		return
	}
	n, err := h.e.Apply(ctx, Ops(req.Ops))
	respond(w, h.log, api.Result{Applied: n}, err)
}

// takeTurn waits for a change request's turn (see handler), or for ctx
// to end (ok false). The turn is given up by leave, or as soon as the
// engine has applied (or refused) the change made with the returned
// context: the MACs of the servers a change brought in are waited for
// (up to a second) after that, while the next change goes ahead; the
// change is told (dispatcher.WithQueued) while others wait for their turn.
func (h *handler) takeTurn(ctx context.Context) (_ context.Context, leave func(), ok bool) {
	h.waiting.Add(1)
	select {
	case h.turn <- struct{}{}:
		h.waiting.Add(-1)
	case <-ctx.Done():
		h.waiting.Add(-1)
		return ctx, nil, false
	}
	var once sync.Once
	leave = func() { once.Do(func() { <-h.turn }) }
	ctx = dispatcher.WithQueued(ctx, func() bool { return h.waiting.Load() > 0 })
	return dispatcher.WithLoopDone(ctx, leave), leave, true
}

func (h *handler) tooLarge() string {
	msg := fmt.Sprintf("request body larger than the limit of %s", sizeString(h.o.MaxRequestSize))
	if h.o.SizeSetting != "" {
		msg += " (raise it with " + h.o.SizeSetting + ")"
	}
	return msg + "; nothing was applied"
}

// largeRequest is the body size from which a request's memory is given
// back as soon as it is handled.
const largeRequest = 1 << 20

// countingReader counts the bytes of a body.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// release collects the garbage of a large request once it is handled, so
// that the next one reuses its memory. A decoded request takes several
// times its body's size, and the collector would free it only once the
// heap had grown to twice what was live: each large request in a queue of
// them would decode on top of the last one's garbage, and the daemon's
// footprint would double.
func (c *countingReader) release() {
	if c.n >= largeRequest {
		runtime.GC()
	}
}

// sizeString formats a byte count: "8 MiB", "1536 bytes".
func sizeString(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// decodeRequest reads one JSON request, and refuses anything after it but
// white space: a body with trailing data is not the request its sender
// meant. It returns the HTTP status of a failure: 413 for a body over the
// limit, 408 for one that stalled, 400 for anything else.
//
// The operations are decoded one at a time into fixed-size blocks and
// copied once into a slice of the exact length. Decoding the whole body
// in one go would buffer all of it and grow the slice step by step: an
// 8 MiB request then allocated 280 MB on the way to 55 MB of operations.
func decodeRequest(body io.Reader) (api.Request, int, error) {
	var req api.Request
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	fail := func(err error) (api.Request, int, error) {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return api.Request{}, readStatus(err), fmt.Errorf("decoding request: %w", err)
	}
	if err := expectDelim(dec, '{'); err != nil {
		if errors.Is(err, io.EOF) { // an empty body
			return api.Request{}, http.StatusBadRequest, fmt.Errorf("decoding request: %w", err)
		}
		return fail(err)
	}
	seen := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fail(err)
		}
		key, _ := tok.(string)
		if !strings.EqualFold(key, "ops") { // encoding/json matches names so
			return api.Request{}, http.StatusBadRequest, fmt.Errorf("decoding request: json: unknown field %q", key)
		}
		if seen {
			return api.Request{}, http.StatusBadRequest, errors.New(`decoding request: field "ops" given twice`)
		}
		seen = true
		if req.Ops, err = decodeOps(dec); err != nil {
			return fail(err)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return fail(err)
	}
	switch _, err := dec.Token(); {
	case errors.Is(err, io.EOF):
		return req, 0, nil
	case err != nil && readStatus(err) != http.StatusBadRequest:
		return req, readStatus(err), err
	}
	return api.Request{}, http.StatusBadRequest, errors.New("decoding request: data after the end of the JSON request; nothing was applied")
}

// opsBlock is how many operations decodeOps decodes into one block.
const opsBlock = 1024

// decodeOps decodes a JSON array of operations (or null).
func decodeOps(dec *json.Decoder) ([]api.Op, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, fmt.Errorf("json: cannot unmarshal %v into the field ops of type []api.Op", tok)
	}
	var blocks [][]api.Op
	cur := make([]api.Op, 0, opsBlock)
	n := 0
	for dec.More() {
		if len(cur) == opsBlock {
			blocks = append(blocks, cur)
			cur = make([]api.Op, 0, opsBlock)
		}
		cur = append(cur, api.Op{})
		if err := dec.Decode(&cur[len(cur)-1]); err != nil {
			return nil, fmt.Errorf("operation %d: %w", n, err)
		}
		n++
	}
	if _, err := dec.Token(); err != nil { // ']'
		return nil, err
	}
	out := make([]api.Op, 0, n)
	for _, b := range blocks {
		out = append(out, b...)
	}
	return append(out, cur...), nil
}

// expectDelim reads the delimiter d.
func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if got, ok := tok.(json.Delim); !ok || got != d {
		return fmt.Errorf("json: want %v, got %v", d, tok)
	}
	return nil
}

// readStatus maps an error of reading or decoding a body to a status.
func readStatus(err error) int {
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return http.StatusRequestTimeout
	}
	return http.StatusBadRequest
}

// respond writes v, or the error: refusals (bad input) are 400 with the
// field named, anything else is 500.
func respond(w http.ResponseWriter, log *slog.Logger, v any, err error) {
	if err == nil {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
		return
	}
	ae := api.Error{Message: err.Error(), Field: lb.FieldOf(err), Op: -1}
	var oe *config.OpError
	if errors.As(err, &oe) {
		ae.Op = oe.Index
	}
	status := http.StatusInternalServerError
	switch {
	case ae.Field != "":
		status = http.StatusBadRequest
	case errors.Is(err, context.Canceled), errors.Is(err, dispatcher.ErrStopped):
		// The client went away, or dlbd is stopping (the request came
		// as the engine stopped): nothing failed.
		status = http.StatusServiceUnavailable
		log.Debug("request abandoned", "err", err)
	default:
		log.Error("request failed", "err", err)
	}
	writeError(w, status, ae)
}

func writeError(w http.ResponseWriter, status int, e api.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(e)
}
