package dispatcher

import (
	"net/netip"
	"strconv"
	"time"

	"github.com/dlbproject/dlb/internal/compact"
	"github.com/dlbproject/dlb/manager"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher/events"
	"github.com/dlbproject/dlb/pkg/dispatcher/health"
	"github.com/dlbproject/dlb/pkg/lb"
)

// managerState is what the engine knows of ports and servers beyond their
// configuration: the manager's weights and the inputs they came from, and
// the ports' alerts.
type managerState struct {
	backends map[lb.BackendKey]*backendRT
	ports    map[lb.ServiceKey]*portRT
	cycles   uint64
}

func newManagerState() managerState {
	return managerState{backends: map[lb.BackendKey]*backendRT{}, ports: map[lb.ServiceKey]*portRT{}}
}

// backendRT is one server of one port beyond its configuration.
type backendRT struct {
	// addr and key are the server's address and its text, id its
	// executor id (0 until the counters are first read).
	addr netip.Addr
	key  string
	id   uint32
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

// portRT is one port beyond its configuration.
type portRT struct {
	alert  bool
	change float64
	pushed bool
	follow int // the manager's FollowThrough for the port's next cycle
	// halfOpenAlert: the port's half-open connections are above its
	// maxhalfopen (halfOpenAlert raised, halfOpenAlertDone not yet).
	halfOpenAlert bool
	// servers are the records of the port's servers in its order (see
	// managerState.servers).
	servers []*backendRT
}

// rt returns the record of a backend, creating it.
func (m *managerState) rt(key lb.BackendKey) *backendRT {
	r := m.backends[key]
	if r == nil {
		r = &backendRT{}
		m.backends[key] = r
	}
	return r
}

// servers returns the records of a port's servers, in the port's order,
// creating those missing. The list is kept with the port, so that a cycle
// over 100,000 servers looks none of them up by key; it is rebuilt when
// the port's servers are not those it was built for.
func (m *managerState) servers(sk lb.ServiceKey, p *lb.Port) []*backendRT {
	prt := m.port(sk)
	if len(prt.servers) == len(p.Servers) {
		same := true
		for i, r := range prt.servers {
			if r.addr != p.Servers[i].Address {
				same = false
				break
			}
		}
		if same {
			return prt.servers
		}
	}
	prt.servers = make([]*backendRT, len(p.Servers))
	for i, s := range p.Servers {
		r := m.rt(lb.BackendKey{Service: sk, Server: s.Address})
		r.addr, r.key = s.Address, s.Address.String()
		prt.servers[i] = r
	}
	return prt.servers
}

// port returns the record of a port, creating it.
func (m *managerState) port(key lb.ServiceKey) *portRT {
	p := m.ports[key]
	if p == nil {
		p = &portRT{}
		m.ports[key] = p
	}
	return p
}

// forget drops the records of removed ports and servers, and makes the
// manager start again from the operator's weight for servers whose
// configured weight changed (or every server, when the manager stopped).
func (m *managerState) forget(old, next lb.Config, ch config.Change) {
	for k, kind := range ch.Ports {
		if kind == config.Removed {
			delete(m.ports, k)
		}
	}
	removed := 0
	for k, kind := range ch.Servers {
		if kind != config.Changed {
			if p := m.ports[k.Service]; p != nil {
				p.servers = nil // records added or dropped
			}
		}
		switch kind {
		case config.Removed:
			delete(m.backends, k)
			removed++
		case config.Changed:
			o, _ := serverOf(old, k)
			n, _ := serverOf(next, k)
			if r := m.backends[k]; r != nil && o.Weight != n.Weight {
				r.managed = false
			}
		}
	}
	m.backends = compact.Map(m.backends, removed)
	if old.Manager.Started && !next.Manager.Started {
		for _, r := range m.backends {
			r.managed = false
		}
	}
}

// managerCycle is one cycle of the manager: every Refresh cycles it reads
// the executor's live counters (ACTV from the connection table, NEWC as
// the new-connection counter's growth), then computes each port's weights
// from those counters, the advisors' loads and the metric servers' loads,
// and pushes the ports whose change passes the sensitivity threshold.
func (e *Engine) managerCycle(now time.Time) {
	defer func(start time.Time) { e.facts.cycle = time.Since(start) }(time.Now())
	cfg := e.ed.Config()
	m := cfg.Manager
	e.mgr.cycles++
	if e.exec.dp != nil && (m.Refresh <= 1 || e.mgr.cycles%uint64(m.Refresh) == 1) {
		e.refreshCounters(cfg)
	}
	params := manager.Params{
		WeightBound: lb.DefaultWeightBound, Smoothing: m.Smoothing,
		Sensitivity: m.Sensitivity, Interval: seconds(m.Interval),
	}
	var changed []lb.ServiceKey
	var in []manager.Server
	for ci := range cfg.Clusters {
		cl := &cfg.Clusters[ci]
		params.Proportions = cl.Proportions
		for pi := range cl.Ports {
			p := &cl.Ports[pi]
			if len(p.Servers) == 0 {
				continue
			}
			sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			params.WeightBound = int(p.WeightBound)
			states, _ := e.serverStates(cfg, cl, p)
			in = in[:0]
			rts := e.mgr.servers(sk, p)
			for i, s := range p.Servers {
				r := rts[i]
				if !r.managed {
					r.weight, r.managed = int(s.Weight), true
				}
				load, loadAt := e.advisorSample(cfg, cl.Address, p.Number, s.Address)
				sys, sysAt := e.metricSample(cl, s.Address)
				st := states[i].state
				if s.Weight == 0 {
					st = lb.ServerDown // takes no new connections: the operator's choice
				}
				in = append(in, manager.Server{
					Key: r.key, Weight: r.weight, Configured: int(s.Weight), Fixed: s.FixedWeight,
					State: st, Active: r.actv, New: r.newc,
					Advisor: manager.Sample{Value: load, At: loadAt},
					Metric:  manager.Sample{Value: sys, At: sysAt},
				})
			}
			prt := e.mgr.port(sk)
			params.FollowThrough = prt.follow
			res := manager.Compute(params, in, now)
			prt.change, prt.pushed, prt.follow = res.Change, res.Push, res.FollowThrough
			pushed := false
			for i, sr := range res.Servers {
				r := rts[i]
				r.newWeight, r.reason = sr.Weight, sr.Reason
				// A server out of service keeps its last weight: its state
				// already keeps new connections away, and it comes back
				// where it was when its advisor sees it up again.
				if in[i].State == lb.ServerUp && r.weight != sr.Weight {
					r.weight = sr.Weight
					pushed = true
				}
			}
			if pushed {
				changed = append(changed, sk)
			}
		}
	}
	if len(changed) > 0 {
		e.pushPorts(cfg, changed, "manager cycle")
	}
}

// pushPorts writes the given ports (nil: all) to the executor, with the
// weights and states the engine has for them now, and checks their alerts.
func (e *Engine) pushPorts(cfg lb.Config, ports []lb.ServiceKey, why string) {
	if ports == nil {
		ports = allPorts(cfg)
	}
	if e.exec.dp != nil {
		var u lb.DataplaneUpdate
		e.portsUpdate(&u, cfg, ports)
		if err := e.exec.dp.Update(u); err != nil {
			e.log.Error("applying to the executor", "after", why, "err", err)
		}
	}
	e.checkAlerts(cfg, ports)
}

// refreshCounters reads the executor's counters for the manager.
func (e *Engine) refreshCounters(cfg lb.Config) {
	e.sweepConns()
	st, err := e.exec.dp.Stats()
	if err != nil {
		e.log.Warn("reading the executor's counters", "err", err)
		return
	}
	for _, cl := range cfg.Clusters {
		for pi := range cl.Ports {
			p := &cl.Ports[pi]
			sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			for _, r := range e.mgr.servers(sk, p) {
				if r.id == 0 {
					r.id = e.ids.Backends[lb.BackendKey{Service: sk, Server: r.addr}]
				}
				id := r.id
				c := st.Backend(id).NewConns
				if r.lastNewSet && c >= r.lastNew {
					r.newc = c - r.lastNew
				} else {
					r.newc = 0
				}
				r.lastNew, r.lastNewSet = c, true
				r.actv = e.exec.sweep.Active[id]
			}
		}
	}
}

// advisorSample returns the load the advisors covering a port measured for
// the server — the lowest of each advisor's last few up results, the
// highest over advisors — and when the last result came.
func (e *Engine) advisorSample(cfg lb.Config, cluster netip.Addr, port uint16, server netip.Addr) (float64, time.Time) {
	var load float64
	var at time.Time
	for _, a := range e.advisorsOn(cfg, port) {
		if !a.covers(cluster) {
			continue
		}
		h := e.health.State(health.Key{Advisor: a.key, Addr: server, Port: port})
		if h == nil || h.LastAt.IsZero() || !h.Last.Up {
			continue
		}
		if l, ok := h.Load(); ok && l > load {
			load, at = l, h.LastAt
		}
	}
	return load, at
}

// checkAlerts raises managerAlert for a port none of whose servers takes
// new connections, and managerClear when one does again, for the given
// ports (nil: all).
func (e *Engine) checkAlerts(cfg lb.Config, ports []lb.ServiceKey) {
	if ports == nil {
		ports = allPorts(cfg)
	}
	defer e.syncRoutes(cfg)
	for _, sk := range ports {
		cl := cfg.Cluster(sk.Cluster)
		if cl == nil {
			e.portAccepts(sk, nil, false)
			continue
		}
		p := cl.Port(sk.Port)
		if p == nil {
			e.portAccepts(sk, nil, false)
			continue
		}
		states, alert := e.serverStates(cfg, cl, p)
		e.portAccepts(sk, states, true)
		prt := e.mgr.port(sk)
		if alert == prt.alert {
			continue
		}
		prt.alert = alert
		ev := events.ManagerClear
		if alert {
			ev = events.ManagerAlert
		}
		e.events.Emit(ev, map[string]string{
			"DLB_CLUSTER": cl.Address.String(), "DLB_PORT": strconv.Itoa(int(p.Number)),
			"DLB_POLICY": p.AllDown.String(),
		})
	}
}

// sweepConns expires idle connections, records the active counts and
// checks the ports' half-open connections.
func (e *Engine) sweepConns() {
	if e.exec.dp == nil {
		return
	}
	res, err := e.exec.dp.Sweep()
	if err != nil {
		e.log.Warn("sweeping the connection table", "err", err)
		return
	}
	e.exec.sweep, e.facts.sweptAt = res, time.Now()
	e.forgetMovedHops(true)
	e.findNATHops(res.NATHops)
	if res.Expired > 0 {
		e.log.Debug("swept connections", "expired", res.Expired, "left", res.Entries)
	}
	e.checkHalfOpen()
}

// checkHalfOpen compares every port's half-open connections with its
// maxhalfopen and raises halfOpenAlert when they go above it, and
// halfOpenAlertDone when they are back at or below it (or the threshold
// was removed).
func (e *Engine) checkHalfOpen() {
	cfg := e.ed.Config()
	for _, cl := range cfg.Clusters {
		for _, p := range cl.Ports {
			sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			n := e.exec.sweep.HalfOpen[e.ids.Services[sk]]
			alert := p.MaxHalfOpen > 0 && n > uint64(p.MaxHalfOpen)
			prt := e.mgr.ports[sk]
			if prt == nil && !alert {
				continue
			}
			prt = e.mgr.port(sk)
			if alert == prt.halfOpenAlert {
				continue
			}
			prt.halfOpenAlert = alert
			ev := events.HalfOpenDone
			if alert {
				ev = events.HalfOpenAlert
				e.log.Warn("half-open connections above maxhalfopen: a SYN flood?", "cluster", cl.Address, "port", p.Number,
					"half_open", n, "max_half_open", p.MaxHalfOpen)
			}
			e.events.Emit(ev, map[string]string{
				"DLB_CLUSTER": cl.Address.String(), "DLB_PORT": strconv.Itoa(int(p.Number)),
				"DLB_HALFOPEN": strconv.FormatUint(n, 10), "DLB_MAXHALFOPEN": strconv.Itoa(int(p.MaxHalfOpen)),
			})
		}
	}
}
