package dispatcher

import (
	"net/netip"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/lb"
)

// backendRT is what the engine knows of one server of one port beyond its
// configuration: the manager's weight and the inputs it came from.
type backendRT struct {
	// weight is the manager's current weight; valid when managed.
	weight  int
	managed bool
	// newWeight and reason are the last cycle's result.
	newWeight int
	reason    string
	// lastNew is the executor's new-connection counter at the last
	// refresh; newc the connections since the one before (NEWC), actv the
	// active connections (ACTV).
	lastNew    uint64
	lastNewSet bool
	newc, actv uint64
}

// portRT is the manager's view of one port.
type portRT struct {
	alert  bool
	change float64
	pushed bool
	follow int // the manager's FollowThrough for the port's next cycle
	// halfOpenAlert: the port's half-open connections are above its
	// maxhalfopen (halfOpenAlert raised, halfOpenAlertDone not yet).
	halfOpenAlert bool
}

// rt returns the runtime record of a backend, creating it.
func (e *Engine) rt(key lb.BackendKey) *backendRT {
	r := e.backends[key]
	if r == nil {
		r = &backendRT{}
		e.backends[key] = r
	}
	return r
}

// effective is a server's state as the executor must see it.
type effective struct {
	weight uint32
	accept bool
	state  string
}

// serverStates computes every server of a port's effective weight and
// state: operator down, quiesced, failed by an advisor, unresolved, or up;
// the manager's weight while it runs; and the port's all-down policy. It
// reports whether the port is in alert (no server takes new connections).
func (e *Engine) serverStates(cfg lb.Config, cl lb.Cluster, p lb.Port) ([]effective, bool) {
	sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
	out := make([]effective, len(p.Servers))
	anyAccept := false
	for i, s := range p.Servers {
		w := s.Weight
		if cfg.Manager.Started && !s.FixedWeight {
			if r := e.backends[lb.BackendKey{Service: sk, Server: s.Address}]; r != nil && r.managed {
				w = uint32(r.weight)
			}
		}
		st := api.StateUp
		switch {
		case s.Down:
			st = api.StateDown
		case s.Quiesced:
			st = api.StateQuiesced
		case e.advisorDown(cfg, cl.Address, p.Number, s.Address):
			st = api.StateFailed
		case e.neigh[s.NextHop()].MAC == nil:
			st = api.StateUnresolved
		}
		out[i] = effective{weight: w, state: st, accept: st == api.StateUp && w > 0}
		anyAccept = anyAccept || out[i].accept
	}
	if anyAccept || len(p.Servers) == 0 {
		return out, false
	}
	if p.AllDown == lb.AllDownSpread {
		// IBM: when every server is down, all get weightbound/2. Only the
		// advisors' verdict is overruled; operator decisions stand.
		w := max(p.WeightBound/2, 1)
		for i, s := range p.Servers {
			if out[i].state == api.StateFailed && e.neigh[s.NextHop()].MAC != nil {
				out[i].weight, out[i].accept = w, true
				anyAccept = true
			}
		}
	}
	return out, !anyAccept
}

// advisorDown reports whether an advisor covering the port found the
// server down.
func (e *Engine) advisorDown(cfg lb.Config, cluster netip.Addr, port uint16, server netip.Addr) bool {
	for _, a := range cfg.Advisors {
		if !a.Covers(cluster, port) {
			continue
		}
		if h := e.health[probeKey{advisor: a.Key(), addr: server, port: port}]; h != nil && h.state == api.AdvisorDown {
			return true
		}
	}
	return false
}

// advisorSample returns the load the advisors covering a port measured for
// the server — the median of each advisor's last few up results, the
// highest over advisors — and when the last result came.
func (e *Engine) advisorSample(cfg lb.Config, cluster netip.Addr, port uint16, server netip.Addr) (float64, time.Time) {
	var load float64
	var at time.Time
	for _, a := range cfg.Advisors {
		if !a.Covers(cluster, port) {
			continue
		}
		h := e.health[probeKey{advisor: a.Key(), addr: server, port: port}]
		if h == nil || h.lastAt.IsZero() || !h.last.Up {
			continue
		}
		if l, ok := h.load(); ok && l > load {
			load, at = l, h.lastAt
		}
	}
	return load, at
}
