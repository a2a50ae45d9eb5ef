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

// handleServerCheck serves api.PathServerCheck with c (501 when nil).
func handleServerCheck(mux *http.ServeMux, log *slog.Logger, c ServerChecker) {
	mux.HandleFunc("GET "+api.PathServerCheck, func(w http.ResponseWriter, r *http.Request) {
		if c == nil {
			writeError(w, http.StatusNotImplemented, api.Error{Message: "this dlbd does not check servers", Op: -1})
			return
		}
		q := r.URL.Query()
		res, err := c.CheckServer(r.Context(), q.Get("target"), q.Get("client"))
		respond(w, log, res, err)
	})
}
