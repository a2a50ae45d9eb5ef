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
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/lb"
)

// Engine is what the API serves; *dispatcher.Engine implements it.
type Engine interface {
	Apply(ctx context.Context, ops []config.Op) (int, error)
	Status(ctx context.Context, q dispatcher.Query) (*dispatcher.Status, error)
	Config(ctx context.Context) (lb.Config, error)
}

// maxRequest bounds a request body (a file load of many thousand
// operations fits).
const maxRequest = 32 << 20

// Handler returns the API's HTTP handler. Each handler translates the wire
// to the model at the door (Ops, the report functions), so that nothing
// below this package knows the wire types.
func Handler(e Engine, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+api.PathOps, func(w http.ResponseWriter, r *http.Request) {
		var req api.Request
		dec := json.NewDecoder(io.LimitReader(r.Body, maxRequest))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, api.Error{Message: fmt.Sprintf("decoding request: %v", err), Op: -1})
			return
		}
		n, err := e.Apply(r.Context(), Ops(req.Ops))
		respond(w, log, api.Result{Applied: n}, err)
	})
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
	report(api.PathExecutor, fixed(dispatcher.Query{Counters: true}), func(st *dispatcher.Status) any { return executorReport(st) })
	report(api.PathClusters, target(lb.ClusterDepth, true), func(st *dispatcher.Status) any { return clusterReports(st) })
	report(api.PathPorts, target(lb.PortDepth, true), func(st *dispatcher.Status) any { return portReports(st) })
	report(api.PathServers, target(lb.ServerDepth, true), func(st *dispatcher.Status) any { return serverReports(st) })
	report(api.PathManager, fixed(dispatcher.Query{Depth: lb.ServerDepth}), func(st *dispatcher.Status) any { return managerReport(st) })
	report(api.PathAdvisors, fixed(dispatcher.Query{}), func(st *dispatcher.Status) any { return advisorReports(st) })
	report(api.PathMetrics, fixed(dispatcher.Query{}), func(st *dispatcher.Status) any { return metricReport(st) })
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
	return mux
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
	if ae.Field != "" {
		status = http.StatusBadRequest
	} else {
		log.Error("request failed", "err", err)
	}
	writeError(w, status, ae)
}

func writeError(w http.ResponseWriter, status int, e api.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(e)
}

// Listen opens the unix socket at path with the given mode, creating its
// directory. A stale socket left by a dead dlbd is replaced; a live one is
// an error. If a group named "dlb" exists, the socket is given to it, so
// that its members may use dlbctl without root.
func Listen(path string, mode os.FileMode) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating socket directory: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("another dlbd is listening on %s", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing stale socket: %w", err)
	}
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if g, err := user.LookupGroup("dlb"); err == nil {
		if gid, err := strconv.Atoi(g.Gid); err == nil {
			_ = os.Chown(path, -1, gid)
		}
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("setting socket mode: %w", err)
	}
	return l, nil
}
