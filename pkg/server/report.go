package server

import (
	"net/netip"
	"slices"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/dispatcher/health"
	"github.com/dlbproject/dlb/pkg/lb"
)

// The reports: a status snapshot of the engine, rendered as the wire's
// report types.

func executorReport(st *dispatcher.Status) api.ExecutorReport {
	ex := st.Config.Executor
	x := st.Executor
	r := api.ExecutorReport{
		Started: ex.Started, Interface: ex.Interface, XDPMode: ex.XDPMode.String(),
		FinTimeout: ex.FinTimeout, Reasons: []api.ReasonCount{}, Error: x.Err,
		NFA: addrString(ex.NFA), NFA6: addrString(ex.NFA6),
		ClientGateway: addrString(ex.ClientGateway), ClientGateway6: addrString(ex.ClientGateway6),
	}
	r.Warnings = x.Warnings
	if t := x.Trace; t != nil {
		r.Trace = &api.TraceReport{Filter: t.Filter.String(), Since: t.Since.UTC().Format(time.RFC3339), Packets: t.Packets}
	}
	switch {
	case !ex.Started:
		r.State = api.ExecutorStopped
	case x.Detached != "":
		r.State, r.Detached = api.ExecutorDetached, x.Detached
		if !x.DetachedSince.IsZero() {
			r.DetachedSince = x.DetachedSince.UTC().Format(time.RFC3339)
		}
	case !x.Loaded:
		r.State = api.ExecutorFailed
	case x.Attached:
		r.State = api.ExecutorAttached
	default:
		r.State, r.Detached = api.ExecutorDetached, "the executor is attached to no interface"
	}
	if !x.Loaded {
		return r
	}
	r.PinDir = x.Info.PinDir
	if x.Attached {
		r.Attached, r.Ifindex, r.LinkID, r.ProgramID = true, x.Attachment.Ifindex, x.Attachment.LinkID, x.Attachment.ProgramID
		if x.AttachedMode != lb.XDPAuto {
			r.AttachedMode = x.AttachedMode.String()
		}
	}
	r.Connections = x.Connections
	r.ConnectionCapacity, r.MaglevSize = x.Info.ConnTable, x.Info.MaxTableSize
	r.NATCapacity, r.HalfOpenCapacity, r.AffinityCapacity = x.Info.NATTable, x.Info.HalfOpenTable, x.Info.AffinityTable
	r.ServiceCapacity, r.ServerCapacity = x.Info.MaxServices-1, x.Info.MaxBackends-1
	r.AffinityRecords = x.AffinityRecords
	for a, use := range x.ReturnPools {
		r.ReturnAddresses = append(r.ReturnAddresses, api.ReturnAddressReport{
			Address: a.String(), Ports: use.Size, Established: use.Established, HalfOpen: use.HalfOpen})
	}
	slices.SortFunc(r.ReturnAddresses, func(a, b api.ReturnAddressReport) int {
		return netip.MustParseAddr(a.Address).Compare(netip.MustParseAddr(b.Address))
	})
	for _, m := range x.Memory {
		r.Tables = append(r.Tables, api.TableReport{Name: m.Name, Entries: m.Entries, Tables: m.Tables, Bytes: m.Bytes})
		r.MemoryBytes += m.Bytes
	}
	for _, rc := range x.Reasons {
		r.Reasons = append(r.Reasons, api.ReasonCount{Reason: rc.Reason, Packets: rc.Packets, Bytes: rc.Bytes})
		r.Packets += rc.Packets
	}
	if len(x.Events) > 0 {
		r.Events = x.Events
	}
	if len(x.Dropping) > 0 {
		r.Dropping, r.DroppingSeconds = x.Dropping, x.DroppingOver.Seconds()
	}
	return r
}

// addrString formats an optional address: "" when unset.
func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

func counters(c lb.Counters, active uint64) api.Counters {
	return api.Counters{Packets: c.Packets, Bytes: c.Bytes, NewConnections: c.NewConns,
		FinishedConnections: c.FinConns, ActiveConnections: active}
}

func addCounters(dst *api.Counters, c api.Counters) {
	dst.Packets += c.Packets
	dst.Bytes += c.Bytes
	dst.NewConnections += c.NewConnections
	dst.FinishedConnections += c.FinishedConnections
	dst.ActiveConnections += c.ActiveConnections
}

func clusterReports(st *dispatcher.Status) []api.ClusterReport {
	out := []api.ClusterReport{}
	for _, cl := range st.Config.Clusters {
		if !st.Selected.MatchCluster(cl.Address) {
			continue
		}
		pr := cl.Proportions
		r := api.ClusterReport{Address: cl.Address.String(), Configure: cl.Configure, Ports: len(cl.Ports),
			PrimaryHost: addrOrEmpty(cl.PrimaryHost),
			Proportions: []int{pr.Active, pr.New, pr.Port, pr.System}, Metrics: cl.Metrics,
			Announce: cl.Announce, Communities: cl.Communities, MED: cl.MED}
		for _, p := range cl.Ports {
			ps := st.Ports[lb.ServiceKey{Cluster: cl.Address, Port: p.Number}]
			addCounters(&r.Counters, counters(ps.Counters, ps.Active))
		}
		out = append(out, r)
	}
	return out
}

func portReports(st *dispatcher.Status) []api.PortReport {
	out := []api.PortReport{}
	for _, cl := range st.Config.Clusters {
		for _, p := range cl.Ports {
			ps, ok := st.Ports[lb.ServiceKey{Cluster: cl.Address, Port: p.Number}]
			if !ok {
				continue
			}
			out = append(out, api.PortReport{
				Cluster: cl.Address.String(), Port: p.Number, Protocol: p.Protocol.String(), Method: p.Method.String(),
				StickyTime: p.StickyTime, StickyMask: p.StickyMask, CrossPort: p.CrossPort,
				SelectionAlgorithm: p.Selection.String(), MaxHalfOpen: p.MaxHalfOpen,
				StaleTimeout: p.StaleTimeout, WeightBound: p.WeightBound,
				AllDown: p.AllDown.String(), Servers: len(p.Servers), TableSize: ps.TableSize, TableDigest: digestString(ps.TableDigest),
				HalfOpen: ps.HalfOpen, HalfOpenAlert: ps.HalfOpenAlert, AffinityRecords: ps.AffinityRecords,
				Counters: counters(ps.Counters, ps.Active),
			})
		}
	}
	return out
}

func serverReports(st *dispatcher.Status) []api.ServerReport {
	out := []api.ServerReport{}
	for _, cl := range st.Config.Clusters {
		for _, p := range cl.Ports {
			sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			for _, s := range p.Servers {
				ss, ok := st.Servers[lb.BackendKey{Service: sk, Server: s.Address}]
				if !ok {
					continue
				}
				r := api.ServerReport{
					Cluster: cl.Address.String(), Port: p.Number, Address: s.Address.String(), Weight: s.Weight,
					CurrentWeight: ss.Weight, FixedWeight: s.FixedWeight, State: ss.State.String(),
					AdvisorRequest: s.AdvisorRequest, AdvisorResponse: s.AdvisorResponse,
					MapPort: s.MapPort, ReturnAddress: addrString(s.ReturnAddress), Router: addrString(s.Router),
					AffinityRecords: ss.AffinityRecords, Counters: counters(ss.Counters, ss.Active),
				}
				if ss.MAC != nil {
					r.MAC = ss.MAC.String()
				}
				out = append(out, r)
			}
		}
	}
	return out
}

func managerReport(st *dispatcher.Status) api.ManagerReport {
	m := st.Config.Manager
	r := api.ManagerReport{Started: m.Started, Interval: m.Interval, Refresh: m.Refresh, Smoothing: m.Smoothing,
		Sensitivity: m.Sensitivity, Cycles: st.ManagerCycles, Ports: []api.ManagerPort{}}
	for _, cl := range st.Config.Clusters {
		pr := cl.Proportions
		for _, p := range cl.Ports {
			sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			ps, ok := st.Ports[sk]
			if !ok {
				continue // not selected
			}
			mp := api.ManagerPort{Cluster: cl.Address.String(), Port: p.Number,
				Proportions: []int{pr.Active, pr.New, pr.Port, pr.System}, WeightBound: p.WeightBound,
				Alert: ps.Alert, Change: ps.Change, Pushed: ps.Pushed, Servers: []api.ManagerServer{}}
			for _, s := range p.Servers {
				ss, ok := st.Servers[lb.BackendKey{Service: sk, Server: s.Address}]
				if !ok {
					continue
				}
				mp.Servers = append(mp.Servers, api.ManagerServer{Address: s.Address.String(), Weight: ss.Weight,
					NewWeight: ss.NewWeight, Active: ss.ACTV, New: ss.NEWC, PortLoad: ss.PortLoad,
					SystemLoad: ss.SystemLoad, State: ss.State.String(), Reason: ss.Reason})
			}
			if len(mp.Servers) == 0 && st.Selected.Servers != nil {
				continue // none of the servers named
			}
			r.Ports = append(r.Ports, mp)
		}
	}
	return r
}

func advisorReports(st *dispatcher.Status) []api.AdvisorReport {
	out := []api.AdvisorReport{}
	// The probed servers by advisor, in one pass: a walk over all of them
	// per advisor took minutes at 1,000 advisors of 100 servers.
	byAdvisor := map[string][]health.Key{}
	for k := range st.Advisors {
		byAdvisor[k.Advisor] = append(byAdvisor[k.Advisor], k)
	}
	for _, a := range st.Config.Advisors {
		r := api.AdvisorReport{Name: a.Name, Port: a.Port, Interval: a.Interval, ConnectTimeout: a.ConnectTimeout,
			ReceiveTimeout: a.ReceiveTimeout, Retries: a.Retries, Rise: a.Rise, Fall: a.Fall,
			Program: a.Program, Args: a.Args, Mode: a.Mode, Servers: []api.AdvisorServer{}}
		if a.Cluster.IsValid() {
			r.Cluster = a.Cluster.String()
		}
		keys := byAdvisor[a.Key()]
		slices.SortFunc(keys, func(x, y health.Key) int { return x.Addr.Compare(y.Addr) })
		for _, k := range keys {
			h := st.Advisors[k]
			r.Servers = append(r.Servers, api.AdvisorServer{Address: k.Addr.String(), Port: k.Port, State: h.State.String(),
				LoadMS: h.LoadMS, LastError: h.LastError, Probes: h.Probes, Failures: h.Failures, Unmade: h.Unmade, CannotProbe: h.LastUnmade,
				Since: h.Since.UTC().Format(time.RFC3339), SecondsInState: st.Now.Sub(h.Since).Seconds()})
		}
		out = append(out, r)
	}
	return out
}

func metricReport(st *dispatcher.Status) api.MetricReport {
	ms := st.Config.MetricServer
	r := api.MetricReport{Source: ms.Source, Port: ms.Port, SecretFile: ms.SecretFile, Path: ms.Path,
		Clusters: []api.MetricCluster{}, Servers: []api.MetricServer{}, Refused: st.MetricRefused}
	for _, cl := range st.Config.Clusters {
		if len(cl.Metrics) > 0 {
			r.Clusters = append(r.Clusters, api.MetricCluster{Cluster: cl.Address.String(), Metrics: cl.Metrics})
		}
	}
	addrs := make([]netip.Addr, 0, len(st.Metrics))
	for a := range st.Metrics {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, func(x, y netip.Addr) int { return x.Compare(y) })
	stale := time.Duration(3 * st.Config.Manager.Interval * float64(time.Second))
	for _, a := range addrs {
		m := st.Metrics[a]
		s := api.MetricServer{Address: a.String(), Values: m.Values, LastError: m.Err, Stale: true, AgeSeconds: -1}
		if !m.At.IsZero() {
			age := st.Now.Sub(m.At)
			s.AgeSeconds, s.Stale = age.Seconds(), age > stale
		}
		r.Servers = append(r.Servers, s)
	}
	return r
}
