package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/lb"
)

// TracingEngine is an Engine that traces packets (dlbctl executor
// trace); *dispatcher.Engine implements it.
type TracingEngine interface {
	Trace(ctx context.Context, f lb.TraceFilter, started func(), emit func(lb.TracePacket) error) (lb.TraceStats, error)
}

// errEnough ends a trace that has its count.
var errEnough = errors.New("the trace has its count")

// traceRequest is a trace's filter and limits, from the query.
type traceRequest struct {
	filter   lb.TraceFilter
	count    int
	duration time.Duration
}

// parseTrace reads api.PathTrace's query parameters.
func parseTrace(r *http.Request) (traceRequest, error) {
	q := r.URL.Query()
	var t traceRequest
	var err error
	if s := q.Get("cluster"); s != "" {
		if t.filter.Cluster, err = netip.ParseAddr(s); err != nil {
			return t, lb.Errorf("cluster", s, "not an IP address")
		}
		t.filter.Cluster = t.filter.Cluster.Unmap()
	}
	if s := q.Get("port"); s != "" {
		p, err := strconv.ParseUint(s, 10, 16)
		if err != nil || p == 0 {
			return t, lb.Errorf("port", s, "not a port (1-65535)")
		}
		if !t.filter.Cluster.IsValid() {
			return t, lb.Errorf("port", s, "a port needs its cluster")
		}
		t.filter.Port = uint16(p)
	}
	if s := q.Get("server"); s != "" {
		if t.filter.Server, err = netip.ParseAddr(s); err != nil {
			return t, lb.Errorf("server", s, "not an IP address")
		}
		t.filter.Server = t.filter.Server.Unmap()
	}
	for _, v := range q["reason"] {
		for _, r := range strings.Split(v, ",") {
			if r = strings.TrimSpace(r); r != "" {
				t.filter.Reasons = append(t.filter.Reasons, r)
			}
		}
	}
	if s := q.Get("count"); s != "" {
		if t.count, err = strconv.Atoi(s); err != nil || t.count < 0 {
			return t, lb.Errorf("count", s, "not a count of packets (0 or more)")
		}
	}
	if s := q.Get("duration"); s != "" {
		if t.duration, err = time.ParseDuration(s); err != nil || t.duration < 0 {
			return t, lb.Errorf("duration", s, "not a duration (such as 10s or 1m)")
		}
	}
	return t, nil
}

// handleTrace serves api.PathTrace with e (501 when it does not trace).
func handleTrace(mux *http.ServeMux, log *slog.Logger, e Engine) {
	mux.HandleFunc("GET "+api.PathTrace, func(w http.ResponseWriter, r *http.Request) {
		te, ok := e.(TracingEngine)
		if !ok {
			writeError(w, http.StatusNotImplemented, api.Error{Message: "this dlbd does not trace packets", Op: -1})
			return
		}
		req, err := parseTrace(r)
		if err != nil {
			respond(w, log, nil, err)
			return
		}
		ctx := r.Context()
		if req.duration > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, req.duration)
			defer cancel()
		}
		rc := http.NewResponseController(w)
		enc := json.NewEncoder(w)
		n := 0
		started := func() {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			_ = rc.Flush()
		}
		st, err := te.Trace(ctx, req.filter, started, func(p lb.TracePacket) error {
			tp := tracePacket(p)
			if err := enc.Encode(api.TraceLine{Packet: &tp}); err != nil {
				return err
			}
			if err := rc.Flush(); err != nil {
				return err
			}
			n++
			if req.count > 0 && n >= req.count {
				return errEnough
			}
			return nil
		})
		if err != nil && !isStarted(w) {
			status := http.StatusInternalServerError
			switch {
			case errors.Is(err, lb.ErrTraceRunning):
				status = http.StatusConflict
			case errors.Is(err, dispatcher.ErrExecutorNotRunning):
				status = http.StatusServiceUnavailable
			case errors.Is(err, dispatcher.ErrNoTrace):
				status = http.StatusNotImplemented
			case lb.FieldOf(err) != "":
				status = http.StatusBadRequest
			}
			writeError(w, status, api.Error{Message: err.Error(), Field: lb.FieldOf(err), Op: -1})
			return
		}
		end := api.TraceEnd{Packets: st.Packets, Lost: st.Lost}
		if err != nil {
			end.Error = err.Error()
		}
		_ = enc.Encode(api.TraceLine{End: &end})
		_ = rc.Flush()
	})
}

// isStarted reports whether the stream's header was written (started ran).
func isStarted(w http.ResponseWriter) bool {
	return w.Header().Get("Content-Type") == "application/x-ndjson"
}

// tracePacket renders a traced packet for the wire.
func tracePacket(p lb.TracePacket) api.TracePacket {
	tp := api.TracePacket{Time: p.Time.UTC().Format(time.RFC3339Nano), Interface: p.Interface, Verdict: p.Verdict,
		Reason: p.Reason, Hit: p.Hit, Length: p.Length, Data: p.Data}
	if p.Data == nil {
		tp.Data = []byte{}
	}
	if p.Server.IsValid() {
		tp.Server = p.Server.String()
	}
	if p.Src.Addr().IsValid() {
		tp.Proto = protoName(p.Proto)
		tp.Src, tp.Dst = p.Src.String(), p.Dst.String()
		if p.Proto != 6 && p.Proto != 17 {
			tp.Src, tp.Dst = p.Src.Addr().String(), p.Dst.Addr().String()
		}
	}
	if p.Proto == 6 {
		tp.TCPFlags = tcpFlags(p.TCPFlags)
	}
	return tp
}

func protoName(p uint8) string {
	switch p {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 1:
		return "icmp"
	case 58:
		return "icmpv6"
	}
	return strconv.Itoa(int(p))
}

// tcpFlags writes TCP flags as tcpdump's letters: F S R P A U E C (". "
// for none).
func tcpFlags(f uint8) string {
	var b strings.Builder
	for i, c := range "FSRPAUEC" {
		if f&(1<<i) != 0 {
			b.WriteRune(c)
		}
	}
	if b.Len() == 0 {
		return "."
	}
	return b.String()
}

// *dispatcher.Engine traces.
var _ TracingEngine = (*dispatcher.Engine)(nil)
