package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/lb"
)

// getConfig serves GET api.PathConfig: the configuration as a file.
func (h *handler) getConfig(w http.ResponseWriter, r *http.Request) {
	format := r.URL.Query().Get("format")
	if format == "" {
		format = api.FormatYAML
	}
	if format != api.FormatYAML && format != api.FormatJSON {
		writeError(w, http.StatusBadRequest, api.Error{Message: fmt.Sprintf("unknown format %q (want yaml or json)", format), Field: "format", Op: -1})
		return
	}
	cfg, err := h.e.Config(r.Context())
	if err != nil {
		respond(w, h.log, nil, err)
		return
	}
	var data []byte
	if format == api.FormatJSON {
		data, err = config.MarshalFileJSON(cfg)
		w.Header().Set("Content-Type", "application/json")
	} else {
		data, err = config.MarshalFile(cfg)
		w.Header().Set("Content-Type", "application/yaml")
	}
	if err != nil {
		respond(w, h.log, nil, err)
		return
	}
	_, _ = w.Write(data)
}

// postConfig serves POST api.PathConfig: a configuration file, made the
// configuration (or, with ?dry_run=true, compared with it). The file is
// read here (its refusals name lines) and replaces the configuration in
// the engine, which validates it against the running one; what changed
// is the plan from the configuration it replaced to the file's.
func (h *handler) postConfig(w http.ResponseWriter, r *http.Request) {
	dryRun := false
	if v := r.URL.Query().Get("dry_run"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, api.Error{Message: fmt.Sprintf("dry_run: %q is not true or false", v), Field: "dry_run", Op: -1})
			return
		}
		dryRun = b
	}
	if r.ContentLength > h.o.MaxRequestSize {
		writeError(w, http.StatusRequestEntityTooLarge, api.Error{Message: h.tooLarge(), Op: -1})
		return
	}
	// Changes take turns (see handler).
	ctx, leave, ok := h.takeTurn(r.Context())
	if !ok {
		return
	}
	defer leave()
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.o.BodyTimeout))
	body := &countingReader{r: http.MaxBytesReader(w, r.Body, h.o.MaxRequestSize)}
	defer body.release()
	data, err := io.ReadAll(body)
	if err != nil {
		status := readStatus(err)
		msg := fmt.Sprintf("reading the configuration file: %v", err)
		switch status {
		case http.StatusRequestEntityTooLarge:
			msg = h.tooLarge()
		case http.StatusRequestTimeout:
			msg = fmt.Sprintf("request body not received within %s", h.o.BodyTimeout)
		}
		writeError(w, status, api.Error{Message: msg, Op: -1})
		return
	}
	f, err := config.ReadFile(data, config.Options{})
	if err != nil {
		respondFile(w, h, err)
		return
	}
	var old lb.Config
	var said dispatcher.Applied
	if ne, ok := h.e.(NotingEngine); ok {
		old, said, err = ne.ReplaceWithNotes(ctx, f.Config, dryRun)
	} else {
		old, err = h.e.Replace(ctx, f.Config, dryRun)
	}
	if err != nil {
		respondFile(w, h, f.Place(err))
		return
	}
	res := api.ConfigResult{Changes: []api.ConfigChange{}, Notes: said.Notes, Warnings: said.Warnings}
	for _, s := range config.Plan(old, f.Config) {
		res.Changes = append(res.Changes, api.ConfigChange{Kind: s.Kind.String(), Command: s.Op.Command(), Was: s.Was})
	}
	res.Applied = !dryRun && len(res.Changes) > 0
	respond(w, h.log, res, nil)
}

// respondFile answers a refused configuration file: 400 naming the line
// and path when the file is to blame, 500 for a failure of dlbd's own.
func respondFile(w http.ResponseWriter, h *handler, err error) {
	var fe *config.FileError
	if !errors.As(err, &fe) {
		respond(w, h.log, nil, err)
		return
	}
	writeError(w, http.StatusBadRequest, api.Error{Message: fe.Error(), Field: lb.FieldOf(err), Op: -1, Line: fe.Line, Path: fe.Path})
}
