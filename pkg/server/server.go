// Package server serves dlbd's admin API (package api) over HTTP. Every
// handler is a thin adapter: decode, call the engine, encode.
package server

import (
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
	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/lb"
)

// Engine is what the API serves; *dispatcher.Engine implements it.
type Engine interface {
	Apply(ctx context.Context, ops []api.Op) (api.Result, error)
	ExecutorReport(ctx context.Context) (api.ExecutorReport, error)
	ClusterReports(ctx context.Context, target string) ([]api.ClusterReport, error)
	PortReports(ctx context.Context, target string) ([]api.PortReport, error)
	ServerReports(ctx context.Context, target string) ([]api.ServerReport, error)
	ManagerReport(ctx context.Context) (api.ManagerReport, error)
	AdvisorReports(ctx context.Context) ([]api.AdvisorReport, error)
	MetricReport(ctx context.Context) (api.MetricReport, error)
}

// maxRequest bounds a request body (a file load of many thousand
// operations fits).
const maxRequest = 32 << 20

// Handler returns the API's HTTP handler; opts add optional parts
// (servercheck.go).
func Handler(e Engine, log *slog.Logger, opts ...Option) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+api.PathOps, func(w http.ResponseWriter, r *http.Request) {
		var req api.Request
		dec := json.NewDecoder(io.LimitReader(r.Body, maxRequest))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, api.Error{Message: fmt.Sprintf("decoding request: %v", err), Op: -1})
			return
		}
		res, err := e.Apply(r.Context(), req.Ops)
		respond(w, log, res, err)
	})
	mux.HandleFunc("GET "+api.PathExecutor, func(w http.ResponseWriter, r *http.Request) {
		res, err := e.ExecutorReport(r.Context())
		respond(w, log, res, err)
	})
	mux.HandleFunc("GET "+api.PathClusters, func(w http.ResponseWriter, r *http.Request) {
		res, err := e.ClusterReports(r.Context(), r.URL.Query().Get("target"))
		respond(w, log, res, err)
	})
	mux.HandleFunc("GET "+api.PathPorts, func(w http.ResponseWriter, r *http.Request) {
		res, err := e.PortReports(r.Context(), r.URL.Query().Get("target"))
		respond(w, log, res, err)
	})
	mux.HandleFunc("GET "+api.PathServers, func(w http.ResponseWriter, r *http.Request) {
		res, err := e.ServerReports(r.Context(), r.URL.Query().Get("target"))
		respond(w, log, res, err)
	})
	mux.HandleFunc("GET "+api.PathManager, func(w http.ResponseWriter, r *http.Request) {
		res, err := e.ManagerReport(r.Context())
		respond(w, log, res, err)
	})
	mux.HandleFunc("GET "+api.PathAdvisors, func(w http.ResponseWriter, r *http.Request) {
		res, err := e.AdvisorReports(r.Context())
		respond(w, log, res, err)
	})
	mux.HandleFunc("GET "+api.PathMetrics, func(w http.ResponseWriter, r *http.Request) {
		res, err := e.MetricReport(r.Context())
		respond(w, log, res, err)
	})
	handleOptional(mux, log, opts)
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
	var oe *dispatcher.OpError
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
