package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/dispatcher/cfgdigest"
	"github.com/dlbproject/dlb/pkg/lb"
)

// Taker is an engine that takes over on request (high availability).
type Taker interface {
	Takeover(ctx context.Context, addr netip.Addr) (warnings []string, err error)
}

// handleTakeover serves POST /v1/highavailability/takeover.
func handleTakeover(mux *http.ServeMux, e Engine, log *slog.Logger) {
	mux.HandleFunc("POST "+api.PathTakeover, func(w http.ResponseWriter, r *http.Request) {
		t, ok := e.(Taker)
		if !ok {
			writeError(w, http.StatusNotImplemented, api.Error{Message: "this dlbd does not take over", Op: -1})
			return
		}
		var req api.TakeoverRequest
		body, err := io.ReadAll(io.LimitReader(r.Body, 4096))
		if err == nil && len(body) > 0 {
			err = json.Unmarshal(body, &req)
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, api.Error{Message: "reading the request: " + err.Error(), Op: -1})
			return
		}
		var addr netip.Addr
		if req.Address != "" {
			if addr, err = netip.ParseAddr(req.Address); err != nil {
				respond(w, log, nil, lb.Errorf("address", "", "%q is not an IP address", req.Address))
				return
			}
		}
		warnings, err := t.Takeover(r.Context(), addr.Unmap())
		respond(w, log, api.Result{Applied: 1, Warnings: warnings}, err)
	})
}

// haReport renders high availability.
func haReport(st *dispatcher.Status) api.HAReport {
	h := st.HA
	if h == nil {
		return api.HAReport{Role: lb.RoleNone.String()}
	}
	c, n := h.Config, h.Node
	r := api.HAReport{Configured: c.Configured(), Running: n.Running, Error: n.Error, Role: c.Role.String(),
		Healthy: n.Healthy, HealthReason: n.HealthReason, Refused: n.Refused, Digest: cfgdigest.Text(h.Digest),
		DigestMatch: h.DigestMatch, Announced: h.Announcements, SecretPending: n.SecretPending, SecretError: n.SecretError,
		PeerPort: n.PeerPort}
	if c.Role != lb.RoleNone {
		r.Recovery, r.Port = c.Recovery.String(), c.Port
	}
	// Configured in part, it does not run: say what it lacks.
	switch {
	case r.Error != "" || !c.Configured():
	case c.Role == lb.RoleNone:
		r.Error = "no role yet (highavailability backup add primary|backup|both auto|manual PORT)"
	case len(c.Heartbeats) == 0:
		r.Error = "no heartbeat yet (highavailability heartbeat add SOURCE DESTINATION --secret-file FILE)"
	}
	if len(c.Heartbeats) > 0 {
		r.IntervalMS, r.Count, r.SecretFile = c.IntervalMS(), c.DeadCount(), c.SecretFile
	}
	if n.Running {
		r.Boot = cfgdigest.Text(n.Boot)
	}
	ago := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return float64(st.Now.Sub(t).Milliseconds()) / 1000
	}
	for _, g := range n.Groups {
		gr := api.HAGroupReport{Group: g.Group.String(), State: g.State.String(), Reason: g.Reason, Takeover: g.Takeover,
			Clusters: h.Clusters[g.Group]}
		if !g.Since.IsZero() {
			gr.Since = g.Since.UTC().Format(time.RFC3339)
		}
		r.Groups = append(r.Groups, gr)
	}
	p := n.Peer
	r.Peer = api.HAPeerReport{Alive: p.Alive, Heard: p.Heard, Healthy: p.Healthy, Restarting: p.Restarting,
		Reach: p.Reach, Targets: p.Targets, Conflict: p.Conflict}
	if p.Heard {
		r.Peer.SecondsAgo = ago(p.LastHeard)
		r.Peer.Role, r.Peer.Recovery, r.Peer.Digest = p.Role.String(), p.Recovery.String(), cfgdigest.Text(p.Digest)
		for _, g := range n.Groups {
			r.Peer.States = append(r.Peer.States, p.States[g.Group].String())
		}
	}
	for _, hb := range n.Heartbeats {
		r.Heartbeats = append(r.Heartbeats, api.HAHeartbeatReport{Source: hb.Source.String(), Destination: hb.Destination.String(),
			Sent: hb.Sent, Received: hb.Received, SecondsAgo: ago(hb.LastHeard), Error: hb.Error})
	}
	if len(n.Heartbeats) == 0 {
		for _, hb := range c.Heartbeats {
			r.Heartbeats = append(r.Heartbeats, api.HAHeartbeatReport{Source: hb.Source.String(), Destination: hb.Destination.String()})
		}
	}
	for _, hb := range n.Stray {
		r.Stray = append(r.Stray, api.HAHeartbeatReport{Source: hb.Source.String(), Destination: hb.Destination.String(),
			Received: hb.Received, SecondsAgo: ago(hb.LastHeard)})
	}
	for _, t := range n.Reach {
		r.Reach = append(r.Reach, api.HAReachReport{Address: t.Address.String(), Reachable: t.Reachable, LastError: t.LastError})
	}
	if len(n.Reach) == 0 {
		for _, a := range c.Reach {
			r.Reach = append(r.Reach, api.HAReachReport{Address: a.String()})
		}
	}
	rp := n.Replication
	r.Replication = api.HAReplReport{Sending: rp.Sending, Receiving: rp.Receiving, Synced: rp.Synced, Sessions: rp.Session,
		SentRecords: rp.SentRecords, ReceivedRecords: rp.ReceivedRecords, Imported: h.Imported, Unknown: h.Unknown,
		Merged: h.Merged, Kept: h.Kept, LagMS: roundMS(rp.LastAckRTT)}
	return r
}

// addrOrEmpty is an address's text, "" for none.
func addrOrEmpty(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// roundMS is d in milliseconds (seconds for ages), to the tenth.
func roundMS(d time.Duration) float64 {
	return float64(d.Round(100*time.Microsecond)) / float64(time.Millisecond)
}
