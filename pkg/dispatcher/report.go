package dispatcher

import (
	"context"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/lb"
)

// call runs f on the management goroutine and returns its result.
func call[T any](ctx context.Context, e *Engine, f func() (T, error)) (T, error) {
	var out T
	var err error
	if derr := e.do(ctx, func() { out, err = f() }); derr != nil {
		return out, derr
	}
	return out, err
}

// ExecutorReport reports the executor.
func (e *Engine) ExecutorReport(ctx context.Context) (api.ExecutorReport, error) {
	return call(ctx, e, e.executorReport)
}

// ClusterReports reports the clusters target selects ("" for all).
func (e *Engine) ClusterReports(ctx context.Context, target string) ([]api.ClusterReport, error) {
	return call(ctx, e, func() ([]api.ClusterReport, error) { return e.clusterReports(target) })
}

// PortReports reports the ports target selects ("" for all).
func (e *Engine) PortReports(ctx context.Context, target string) ([]api.PortReport, error) {
	return call(ctx, e, func() ([]api.PortReport, error) { return e.portReports(target) })
}

// ServerReports reports the servers target selects ("" for all).
func (e *Engine) ServerReports(ctx context.Context, target string) ([]api.ServerReport, error) {
	return call(ctx, e, func() ([]api.ServerReport, error) { return e.serverReports(target) })
}

func (e *Engine) executorReport() (api.ExecutorReport, error) {
	ex := e.cfg.Executor
	r := api.ExecutorReport{
		Started: ex.Started, Interface: ex.Interface, XDPMode: ex.XDPMode.String(),
		FinTimeout: ex.FinTimeout, Reasons: []api.ReasonCount{},
	}
	if ex.NFA.IsValid() {
		r.NFA = ex.NFA.String()
	}
	if e.execErr != nil {
		r.Error = e.execErr.Error()
	}
	if e.dp == nil {
		return r, nil
	}
	r.PinDir = e.dp.PinDir()
	if a, ok := e.dp.Attached(); ok {
		r.Attached, r.Ifindex, r.LinkID, r.ProgramID = true, a.Ifindex, a.LinkID, a.ProgramID
		if e.attachedMode != lb.XDPAuto {
			r.AttachedMode = e.attachedMode.String()
		}
	}
	r.Connections = e.sweep.Entries
	r.ConnectionCapacity = e.dp.ConnTableCapacity()
	r.MaglevSize = e.dp.MaglevSize()
	st, err := e.dp.Stats()
	if err != nil {
		return r, err
	}
	for _, rc := range st.Reasons {
		r.Reasons = append(r.Reasons, api.ReasonCount{Reason: rc.Reason, Packets: rc.Packets, Bytes: rc.Bytes})
		r.Packets += rc.Packets
	}
	return r, nil
}

// selection parses a report's target, checks that a non-empty one names
// configured objects, and reads the executor's counters.
func (e *Engine) selection(target string, depth lb.Depth) (lb.Target, lb.DataplaneStats, error) {
	t, err := lb.ParseTarget(target, depth)
	if err != nil {
		return t, lb.DataplaneStats{}, err
	}
	if target != "" {
		switch depth {
		case lb.ClusterDepth:
			_, err = matchClusters(&e.cfg, t, target)
		case lb.PortDepth:
			_, err = matchPorts(&e.cfg, t, target)
		default:
			_, err = matchServers(&e.cfg, t, target)
		}
		if err != nil {
			return t, lb.DataplaneStats{}, err
		}
	}
	st, err := e.stats()
	return t, st, err
}

func (e *Engine) clusterReports(target string) ([]api.ClusterReport, error) {
	t, st, err := e.selection(target, lb.ClusterDepth)
	if err != nil {
		return nil, err
	}
	out := []api.ClusterReport{}
	for _, cl := range e.cfg.Clusters {
		if !t.MatchCluster(cl.Address) {
			continue
		}
		r := api.ClusterReport{Address: cl.Address.String(), Configure: cl.Configure, Ports: len(cl.Ports)}
		for _, p := range cl.Ports {
			addCounters(&r.Counters, e.portCounters(st, cl, p))
		}
		out = append(out, r)
	}
	return out, nil
}

func (e *Engine) portReports(target string) ([]api.PortReport, error) {
	t, st, err := e.selection(target, lb.PortDepth)
	if err != nil {
		return nil, err
	}
	out := []api.PortReport{}
	for _, cl := range e.cfg.Clusters {
		for _, p := range cl.Ports {
			if !t.MatchCluster(cl.Address) || !t.MatchPort(p.Number) {
				continue
			}
			out = append(out, api.PortReport{
				Cluster: cl.Address.String(), Port: p.Number, Protocol: p.Protocol.String(), Method: p.Method.String(),
				StickyTime: p.StickyTime, StaleTimeout: p.StaleTimeout, WeightBound: p.WeightBound,
				Servers: len(p.Servers), Counters: e.portCounters(st, cl, p),
			})
		}
	}
	return out, nil
}

func (e *Engine) serverReports(target string) ([]api.ServerReport, error) {
	t, st, err := e.selection(target, lb.ServerDepth)
	if err != nil {
		return nil, err
	}
	out := []api.ServerReport{}
	for _, cl := range e.cfg.Clusters {
		for _, p := range cl.Ports {
			if !t.MatchCluster(cl.Address) || !t.MatchPort(p.Number) {
				continue
			}
			sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			for _, s := range p.Servers {
				if t.MatchServer(s.Address) {
					out = append(out, e.serverReport(st, sk, s))
				}
			}
		}
	}
	return out, nil
}

func (e *Engine) serverReport(st lb.DataplaneStats, sk lb.ServiceKey, s lb.Server) api.ServerReport {
	id := e.ids.Backends[lb.BackendKey{Service: sk, Server: s.Address}.String()]
	r := api.ServerReport{
		Cluster: sk.Cluster.String(), Port: sk.Port, Address: s.Address.String(), Weight: s.Weight,
		State: api.StateUp, Counters: e.backendCounters(st, id),
	}
	nb := e.neigh[s.Address]
	if nb.MAC != nil {
		r.MAC = nb.MAC.String()
	}
	switch {
	case s.Down:
		r.State = api.StateDown
	case nb.MAC == nil:
		r.State = api.StateUnresolved
	}
	return r
}

// stats reads the executor's counters (all zero while it is not loaded).
func (e *Engine) stats() (lb.DataplaneStats, error) {
	if e.dp == nil {
		return lb.DataplaneStats{}, nil
	}
	return e.dp.Stats()
}

func (e *Engine) backendCounters(st lb.DataplaneStats, id uint32) api.Counters {
	c := st.Backends[id]
	return api.Counters{
		Packets: c.Packets, Bytes: c.Bytes, NewConnections: c.NewConns,
		FinishedConnections: c.FinConns, ActiveConnections: e.sweep.Active[id],
	}
}

func (e *Engine) portCounters(st lb.DataplaneStats, cl lb.Cluster, p lb.Port) api.Counters {
	sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
	c := st.Services[e.ids.Services[sk.String()]]
	r := api.Counters{Packets: c.Packets, Bytes: c.Bytes, NewConnections: c.NewConns, FinishedConnections: c.FinConns}
	for _, s := range p.Servers {
		r.ActiveConnections += e.sweep.Active[e.ids.Backends[lb.BackendKey{Service: sk, Server: s.Address}.String()]]
	}
	return r
}

func addCounters(dst *api.Counters, c api.Counters) {
	dst.Packets += c.Packets
	dst.Bytes += c.Bytes
	dst.NewConnections += c.NewConnections
	dst.FinishedConnections += c.FinishedConnections
	dst.ActiveConnections += c.ActiveConnections
}
