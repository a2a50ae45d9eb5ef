package dispatcher

import (
	"context"
	"net/netip"
	"slices"
	"time"

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
	r.NFA, r.NFA6 = addrString(ex.NFA), addrString(ex.NFA6)
	r.ClientGateway, r.ClientGateway6 = addrString(ex.ClientGateway), addrString(ex.ClientGateway6)
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
	r.NATCapacity, r.HalfOpenCapacity, r.AffinityCapacity = e.dp.NATTableCapacity(), e.dp.HalfOpenTableCapacity(), e.dp.AffinityTableCapacity()
	for _, n := range e.sweep.AffinityServices {
		r.AffinityRecords += n
	}
	for a, use := range e.sweep.ReturnPools {
		r.ReturnAddresses = append(r.ReturnAddresses, api.ReturnAddressReport{
			Address: a.String(), Ports: use.Size, Established: use.Established, HalfOpen: use.HalfOpen})
	}
	slices.SortFunc(r.ReturnAddresses, func(a, b api.ReturnAddressReport) int {
		return netip.MustParseAddr(a.Address).Compare(netip.MustParseAddr(b.Address))
	})
	st, err := e.dp.Stats()
	if err != nil {
		return r, err
	}
	for _, rc := range st.Reasons {
		r.Reasons = append(r.Reasons, api.ReasonCount{Reason: rc.Reason, Packets: rc.Packets, Bytes: rc.Bytes})
		r.Packets += rc.Packets
	}
	if len(st.Events) > 0 {
		r.Events = st.Events
	}
	return r, nil
}

// addrString formats an optional address: "" when unset.
func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
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
		pr := cl.Proportions
		r := api.ClusterReport{Address: cl.Address.String(), Configure: cl.Configure, Ports: len(cl.Ports),
			Proportions: []int{pr.Active, pr.New, pr.Port, pr.System}, Metrics: cl.Metrics}
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
			sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			sid := e.ids.Services[sk.String()]
			out = append(out, api.PortReport{
				Cluster: cl.Address.String(), Port: p.Number, Protocol: p.Protocol.String(), Method: p.Method.String(),
				StickyTime: p.StickyTime, StickyMask: p.StickyMask, CrossPort: p.CrossPort,
				SelectionAlgorithm: p.Selection.String(), MaxHalfOpen: p.MaxHalfOpen,
				StaleTimeout: p.StaleTimeout, WeightBound: p.WeightBound,
				AllDown: p.AllDown.String(), Servers: len(p.Servers),
				HalfOpen: e.sweep.HalfOpen[sid], HalfOpenAlert: e.port(sk).halfOpenAlert,
				AffinityRecords: e.sweep.AffinityServices[sid],
				Counters:        e.portCounters(st, cl, p),
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
			states, _ := e.serverStates(e.cfg, cl, p)
			for i, s := range p.Servers {
				if t.MatchServer(s.Address) {
					out = append(out, e.serverReport(st, sk, s, states[i]))
				}
			}
		}
	}
	return out, nil
}

func (e *Engine) serverReport(st lb.DataplaneStats, sk lb.ServiceKey, s lb.Server, eff effective) api.ServerReport {
	id := e.ids.Backends[lb.BackendKey{Service: sk, Server: s.Address}.String()]
	r := api.ServerReport{
		Cluster: sk.Cluster.String(), Port: sk.Port, Address: s.Address.String(), Weight: s.Weight,
		CurrentWeight: eff.weight, FixedWeight: s.FixedWeight, State: eff.state,
		AdvisorRequest: s.AdvisorRequest, AdvisorResponse: s.AdvisorResponse,
		MapPort: s.MapPort, ReturnAddress: addrString(s.ReturnAddress), Router: addrString(s.Router),
		AffinityRecords: e.sweep.AffinityBackends[id],
		Counters:        e.backendCounters(st, id),
	}
	if nb := e.neigh[s.NextHop()]; nb.MAC != nil {
		r.MAC = nb.MAC.String()
	}
	return r
}

// ManagerReport reports the manager: settings, and per port and server the
// weights and the inputs they came from.
func (e *Engine) ManagerReport(ctx context.Context) (api.ManagerReport, error) {
	return call(ctx, e, func() (api.ManagerReport, error) { return e.managerReport(), nil })
}

func (e *Engine) managerReport() api.ManagerReport {
	m := e.cfg.Manager
	r := api.ManagerReport{Started: m.Started, Interval: m.Interval, Refresh: m.Refresh, Smoothing: m.Smoothing,
		Sensitivity: m.Sensitivity, Cycles: e.cycles, Ports: []api.ManagerPort{}}
	for _, cl := range e.cfg.Clusters {
		pr := cl.Proportions
		for _, p := range cl.Ports {
			sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			prt := e.port(sk)
			states, alert := e.serverStates(e.cfg, cl, p)
			mp := api.ManagerPort{Cluster: cl.Address.String(), Port: p.Number,
				Proportions: []int{pr.Active, pr.New, pr.Port, pr.System}, WeightBound: p.WeightBound,
				Alert: alert, Change: prt.change, Pushed: prt.pushed, Servers: []api.ManagerServer{}}
			for i, s := range p.Servers {
				rt := e.backends[lb.BackendKey{Service: sk, Server: s.Address}]
				ms := api.ManagerServer{Address: s.Address.String(), Weight: states[i].weight, NewWeight: states[i].weight,
					State: states[i].state, PortLoad: e.portLoad(cl, p, s), SystemLoad: -1}
				if rt != nil {
					ms.Active, ms.New, ms.Reason = rt.actv, rt.newc, rt.reason
					if m.Started {
						ms.NewWeight = uint32(max(rt.newWeight, 0))
					}
				}
				if !m.Started {
					ms.Reason = "manager stopped: configured weight"
				}
				if v, at := e.metricSample(cl, s.Address); !at.IsZero() && time.Since(at) <= 3*seconds(m.Interval) {
					ms.SystemLoad = v
				}
				mp.Servers = append(mp.Servers, ms)
			}
			r.Ports = append(r.Ports, mp)
		}
	}
	return r
}

// portLoad is IBM's PORT column: the advisor's last load in ms, -1 when an
// advisor finds the server down, 0 when no advisor covers the port.
func (e *Engine) portLoad(cl lb.Cluster, p lb.Port, s lb.Server) int64 {
	if e.advisorDown(e.cfg, cl.Address, p.Number, s.Address) {
		return -1
	}
	load, at := e.advisorSample(e.cfg, cl.Address, p.Number, s.Address)
	if at.IsZero() {
		return 0
	}
	return int64(load)
}

// AdvisorReports reports every started advisor and its servers.
func (e *Engine) AdvisorReports(ctx context.Context) ([]api.AdvisorReport, error) {
	return call(ctx, e, func() ([]api.AdvisorReport, error) { return e.advisorReports(), nil })
}

func (e *Engine) advisorReports() []api.AdvisorReport {
	out := []api.AdvisorReport{}
	now := time.Now()
	for _, a := range e.cfg.Advisors {
		r := api.AdvisorReport{Name: a.Name, Port: a.Port, Interval: a.Interval, ConnectTimeout: a.ConnectTimeout,
			ReceiveTimeout: a.ReceiveTimeout, Retries: a.Retries, Rise: a.Rise, Fall: a.Fall,
			Program: a.Program, Args: a.Args, Mode: a.Mode, Servers: []api.AdvisorServer{}}
		if a.Cluster.IsValid() {
			r.Cluster = a.Cluster.String()
		}
		var keys []probeKey
		for k := range e.health {
			if k.advisor == a.Key() {
				keys = append(keys, k)
			}
		}
		slices.SortFunc(keys, func(x, y probeKey) int { return x.addr.Compare(y.addr) })
		for _, k := range keys {
			h := e.health[k]
			as := api.AdvisorServer{Address: k.addr.String(), Port: k.port, State: h.state, LoadMS: h.last.LoadMS(),
				LastError: h.last.Reason, Probes: h.probes, Failures: h.fails,
				Since: h.since.UTC().Format(time.RFC3339), SecondsInState: now.Sub(h.since).Seconds()}
			if h.probes == 0 {
				as.LoadMS = 0
			}
			r.Servers = append(r.Servers, as)
		}
		out = append(out, r)
	}
	return out
}

// MetricReport reports the metric settings and each server's last report.
func (e *Engine) MetricReport(ctx context.Context) (api.MetricReport, error) {
	return call(ctx, e, func() (api.MetricReport, error) { return e.metricReport(), nil })
}

func (e *Engine) metricReport() api.MetricReport {
	ms := e.cfg.MetricServer
	r := api.MetricReport{Source: ms.Source, Port: ms.Port, SecretFile: ms.SecretFile, Path: ms.Path,
		Clusters: []api.MetricCluster{}, Servers: []api.MetricServer{}, Refused: map[string]int64{}}
	for _, cl := range e.cfg.Clusters {
		if len(cl.Metrics) > 0 {
			r.Clusters = append(r.Clusters, api.MetricCluster{Cluster: cl.Address.String(), Metrics: cl.Metrics})
		}
	}
	addrs := make([]netip.Addr, 0, len(e.metrics))
	for a := range e.metrics {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, func(x, y netip.Addr) int { return x.Compare(y) })
	stale := 3 * seconds(e.cfg.Manager.Interval)
	for _, a := range addrs {
		m := e.metrics[a]
		s := api.MetricServer{Address: a.String(), Values: m.values, LastError: m.err, Stale: true, AgeSeconds: -1}
		if !m.at.IsZero() {
			age := time.Since(m.at)
			s.AgeSeconds, s.Stale = age.Seconds(), age > stale
		}
		r.Servers = append(r.Servers, s)
	}
	for reason, n := range e.metricRefused {
		r.Refused[reason] = n
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
