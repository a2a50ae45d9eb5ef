package dispatcher

import (
	"time"

	"github.com/dlbproject/dlb/manager"
	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/lb"
)

// managerCycle is one cycle of the manager: every Refresh cycles it reads
// the executor's live counters (ACTV from the connection table, NEWC as
// the new-connection counter's growth), then computes each port's weights
// from those counters, the advisors' loads and the metric servers' loads,
// and pushes the ports whose change passes the sensitivity threshold.
func (e *Engine) managerCycle(now time.Time) {
	m := e.cfg.Manager
	e.cycles++
	if e.dp != nil && (m.Refresh <= 1 || e.cycles%uint64(m.Refresh) == 1) {
		e.refreshCounters()
	}
	params := manager.Params{
		WeightBound: lb.DefaultWeightBound, Smoothing: m.Smoothing,
		Sensitivity: m.Sensitivity, Interval: seconds(m.Interval),
	}
	changed := false
	for _, cl := range e.cfg.Clusters {
		params.Proportions = cl.Proportions
		for _, p := range cl.Ports {
			if len(p.Servers) == 0 {
				continue
			}
			sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			params.WeightBound = int(p.WeightBound)
			states, _ := e.serverStates(e.cfg, cl, p)
			in := make([]manager.Server, len(p.Servers))
			rts := make([]*backendRT, len(p.Servers))
			for i, s := range p.Servers {
				r := e.rt(lb.BackendKey{Service: sk, Server: s.Address})
				rts[i] = r
				if !r.managed {
					r.weight, r.managed = int(s.Weight), true
				}
				load, loadAt := e.advisorSample(e.cfg, cl.Address, p.Number, s.Address)
				sys, sysAt := e.metricSample(cl, s.Address)
				in[i] = manager.Server{
					Key: s.Address.String(), Weight: r.weight, Configured: int(s.Weight), Fixed: s.FixedWeight,
					State:  managerState(states[i].state, s.Weight),
					Active: r.actv, New: r.newc,
					Advisor: manager.Sample{Value: load, At: loadAt},
					Metric:  manager.Sample{Value: sys, At: sysAt},
				}
			}
			prt := e.port(sk)
			params.FollowThrough = prt.follow
			res := manager.Compute(params, in, now)
			prt.change, prt.pushed, prt.follow = res.Change, res.Push, res.FollowThrough
			for i, sr := range res.Servers {
				r := rts[i]
				r.newWeight, r.reason = sr.Weight, sr.Reason
				// A server out of service keeps its last weight: its state
				// already keeps new connections away, and it comes back
				// where it was when its advisor sees it up again.
				if in[i].State == lb.ServerUp && r.weight != sr.Weight {
					r.weight = sr.Weight
					changed = true
				}
			}
		}
	}
	if changed {
		e.pushDataplane("manager cycle")
	}
}

// refreshCounters reads the executor's counters for the manager.
func (e *Engine) refreshCounters() {
	e.sweepConns()
	st, err := e.dp.Stats()
	if err != nil {
		e.log.Warn("reading the executor's counters", "err", err)
		return
	}
	for _, cl := range e.cfg.Clusters {
		for _, p := range cl.Ports {
			sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			for _, s := range p.Servers {
				bk := lb.BackendKey{Service: sk, Server: s.Address}
				e.refreshBackend(e.rt(bk), st, e.ids.Backends[bk.String()])
			}
		}
	}
}

// refreshBackend takes a backend's NEWC and ACTV from the counters.
func (e *Engine) refreshBackend(r *backendRT, st lb.DataplaneStats, id uint32) {
	c := st.Backends[id].NewConns
	if r.lastNewSet && c >= r.lastNew {
		r.newc = c - r.lastNew
	} else {
		r.newc = 0
	}
	r.lastNew, r.lastNewSet = c, true
	r.actv = e.sweep.Active[id]
}

// port returns the manager's record of a port, creating it.
func (e *Engine) port(key lb.ServiceKey) *portRT {
	p := e.ports[key]
	if p == nil {
		p = &portRT{}
		e.ports[key] = p
	}
	return p
}

// checkAlerts raises managerAlert for a port none of whose servers takes
// new connections, and managerClear when one does again.
func (e *Engine) checkAlerts() {
	for _, cl := range e.cfg.Clusters {
		for _, p := range cl.Ports {
			_, alert := e.serverStates(e.cfg, cl, p)
			sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			prt := e.port(sk)
			if alert == prt.alert {
				continue
			}
			prt.alert = alert
			ev := eventManagerClear
			if alert {
				ev = eventManagerAlert
			}
			e.emit(ev, map[string]string{
				"DLB_CLUSTER": cl.Address.String(), "DLB_PORT": itoa(int(p.Number)),
				"DLB_POLICY": p.AllDown.String(),
			})
		}
	}
}

// resetWeights forgets the manager's weight of servers whose configured
// weight changed in next, so that they restart from the operator's value.
func (e *Engine) resetWeights(cur, next lb.Config) {
	old := map[lb.BackendKey]uint32{}
	for _, cl := range cur.Clusters {
		for _, p := range cl.Ports {
			for _, s := range p.Servers {
				old[lb.BackendKey{Service: lb.ServiceKey{Cluster: cl.Address, Port: p.Number}, Server: s.Address}] = s.Weight
			}
		}
	}
	live := map[lb.BackendKey]bool{}
	livePorts := map[lb.ServiceKey]bool{}
	for _, cl := range next.Clusters {
		for _, p := range cl.Ports {
			livePorts[lb.ServiceKey{Cluster: cl.Address, Port: p.Number}] = true
			for _, s := range p.Servers {
				k := lb.BackendKey{Service: lb.ServiceKey{Cluster: cl.Address, Port: p.Number}, Server: s.Address}
				live[k] = true
				if w, ok := old[k]; !ok || w != s.Weight || !next.Manager.Started {
					if r := e.backends[k]; r != nil {
						r.managed = false
					}
				}
			}
		}
	}
	for k := range e.backends {
		if !live[k] {
			delete(e.backends, k)
		}
	}
	for k := range e.ports {
		if !livePorts[k] {
			delete(e.ports, k)
		}
	}
}

// managerState maps a server's report state onto the manager's. A server
// the operator gave weight 0 takes no new connections: the manager leaves
// it alone as it would an operator-down one.
func managerState(st string, configured uint32) lb.ServerState {
	switch {
	case configured == 0, st == api.StateDown:
		return lb.ServerDown
	case st == api.StateUp:
		return lb.ServerUp
	case st == api.StateQuiesced:
		return lb.ServerQuiesced
	}
	return lb.ServerFailed // failed, or its MAC is not known: no traffic can reach it
}
