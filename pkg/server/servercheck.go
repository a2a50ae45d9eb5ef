package server

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/dlbproject/dlb/pkg/api"
)

// ServerChecker checks a backend server from the dispatcher ("dlbctl
// server check"): target is VIP@PORT@SERVER, client an optional client
// address to probe from.
type ServerChecker interface {
	CheckServer(ctx context.Context, target, client string) (api.ServerCheckReport, error)
}

// Option adds an optional part to the API.
type Option func(*options)

type options struct {
	checker ServerChecker
}

// WithServerChecker serves api.PathServerCheck with c. Without it, the
// path answers 501.
func WithServerChecker(c ServerChecker) Option {
	return func(o *options) { o.checker = c }
}

// handleOptional registers the optional parts' paths.
func handleOptional(mux *http.ServeMux, log *slog.Logger, opts []Option) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	mux.HandleFunc("GET "+api.PathServerCheck, func(w http.ResponseWriter, r *http.Request) {
		if o.checker == nil {
			writeError(w, http.StatusNotImplemented, api.Error{Message: "this dlbd does not check servers", Op: -1})
			return
		}
		q := r.URL.Query()
		res, err := o.checker.CheckServer(r.Context(), q.Get("target"), q.Get("client"))
		respond(w, log, res, err)
	})
}
