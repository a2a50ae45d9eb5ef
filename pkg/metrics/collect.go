package metrics

import (
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/dispatcher/events"
	"github.com/dlbproject/dlb/pkg/dispatcher/health"
	"github.com/dlbproject/dlb/pkg/lb"
)

// eventNames are the engine's events, each counted even before it first
// happens (a counter that appears late loses its first increase).
var eventNames = []string{events.ServerDown, events.ServerUp, events.ManagerAlert, events.ManagerClear,
	events.HalfOpenAlert, events.HalfOpenDone}

// writeStatus writes every dlb_ family of a snapshot.
func writeStatus(t *textWriter, st *dispatcher.Status) {
	writeExecutor(t, st)
	writeConfig(t, st)
	writePorts(t, st)
	writeServers(t, st)
	writeAdvisors(t, st)
	writeMetricServers(t, st)
	writeWarnings(t, st)
	writeHA(t, st)
	writeBGP(t, st)
}

func writeExecutor(t *textWriter, st *dispatcher.Status) {
	x := &st.Executor
	t.family("dlb_executor_loaded", "gauge", "Whether the executor (the XDP program and its maps) is loaded.")
	t.sample("dlb_executor_loaded", nil, nil, bool01(x.Loaded))
	t.family("dlb_executor_attached", "gauge", "Whether the executor is attached to its interface.")
	t.sample("dlb_executor_attached", nil, nil, bool01(x.Attached))

	t.family("dlb_executor_packets_total", "counter", "Packets the executor handled, by reason: pass_* went to the host stack, drop_* were dropped, fwd_* forwarded.")
	for _, r := range x.Reasons {
		t.counter("dlb_executor_packets_total", labels("reason", r.Reason), nil, r.Packets)
	}
	t.family("dlb_executor_bytes_total", "counter", "Bytes the executor handled, by reason.")
	for _, r := range x.Reasons {
		t.counter("dlb_executor_bytes_total", labels("reason", r.Reason), nil, r.Bytes)
	}
	t.family("dlb_executor_events_total", "counter", "Things the executor counted beside the per-packet reasons, by event.")
	for _, name := range slices.Sorted(maps.Keys(x.Events)) {
		t.counter("dlb_executor_events_total", labels("event", name), nil, x.Events[name])
	}

	var natEntries, halfOpen uint64
	for _, use := range x.ReturnPools {
		natEntries += uint64(use.Established)
		halfOpen += uint64(use.HalfOpen)
	}
	conn := uint64(max(x.Connections, 0))
	conn -= min(conn, natEntries)
	if x.Loaded {
		tables := []struct {
			name           string
			entries, limit uint64
		}{
			{"conn", conn, uint64(x.Info.ConnTable)},
			{"nat", natEntries, uint64(x.Info.NATTable)},
			{"half_open", halfOpen, uint64(x.Info.HalfOpenTable)},
			{"affinity", x.AffinityRecords, uint64(x.Info.AffinityTable)},
		}
		t.family("dlb_executor_table_entries", "gauge", "Entries of the executor's tables at the latest sweep: conn (MAC connections), nat (NAT connections), half_open (NAT half-open reservations), affinity (live records).")
		for _, tb := range tables {
			t.counter("dlb_executor_table_entries", labels("table", tb.name), nil, tb.entries)
		}
		t.family("dlb_executor_table_entries_limit", "gauge", "Capacity of the executor's tables.")
		for _, tb := range tables {
			t.counter("dlb_executor_table_entries_limit", labels("table", tb.name), nil, tb.limit)
		}
		t.family("dlb_executor_table_memory_bytes", "gauge", "Kernel memory charged for each of the executor's BPF maps (maglev_tables: all ports' tables).")
		for _, m := range x.Memory {
			t.counter("dlb_executor_table_memory_bytes", labels("table", m.Name), nil, m.Bytes)
		}
		t.family("dlb_executor_ports_limit", "gauge", "Ports (cluster@port) the executor can hold.")
		t.counter("dlb_executor_ports_limit", nil, nil, uint64(max(x.Info.MaxServices, 1)-1))
		t.family("dlb_executor_servers_limit", "gauge", "Servers the executor can hold, counting each server once per port.")
		t.counter("dlb_executor_servers_limit", nil, nil, uint64(max(x.Info.MaxBackends, 1)-1))
	}
	if !x.SweptAt.IsZero() {
		t.family("dlb_executor_last_sweep_timestamp_seconds", "gauge", "When the executor's tables were last swept: the time of the connection, half-open, affinity and NAT pool counts.")
		t.sample("dlb_executor_last_sweep_timestamp_seconds", nil, nil, unixSeconds(x.SweptAt))
	}

	if len(x.AddressConflicts) > 0 {
		conflicts := slices.SortedFunc(maps.Keys(x.AddressConflicts), netip.Addr.Compare)
		t.family("dlb_address_conflict_hosts", "gauge", "Other hosts found answering ARP (IPv6: neighbour solicitations) for an address this dispatcher holds (a server without arp_ignore=1, another host with the address); absent when none.")
		for _, a := range conflicts {
			t.counter("dlb_address_conflict_hosts", labels("address", a.String()), nil, uint64(len(x.AddressConflicts[a])))
		}
	}

	addrs := make([]netip.Addr, 0, len(x.ReturnPools))
	for a := range x.ReturnPools {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	if len(addrs) > 0 {
		t.family("dlb_nat_pool_ports", "gauge", "Ports in the NAT port pool of a return address.")
		for _, a := range addrs {
			t.counter("dlb_nat_pool_ports", labels("address", a.String()), nil, uint64(x.ReturnPools[a].Size))
		}
		t.family("dlb_nat_pool_ports_used", "gauge", "Ports of a return address's pool in use at the latest sweep: by live NAT connections (established) and half-open reservations (half_open).")
		for _, a := range addrs {
			l := labels("address", a.String())
			t.counter("dlb_nat_pool_ports_used", l, labels("state", "established"), uint64(x.ReturnPools[a].Established))
			t.counter("dlb_nat_pool_ports_used", l, labels("state", "half_open"), uint64(x.ReturnPools[a].HalfOpen))
		}
	}
}

func writeConfig(t *textWriter, st *dispatcher.Status) {
	ports, servers := 0, 0
	for _, cl := range st.Config.Clusters {
		ports += len(cl.Ports)
		for _, p := range cl.Ports {
			servers += len(p.Servers)
		}
	}
	t.family("dlb_config_ports", "gauge", "Configured ports (cluster@port).")
	t.counter("dlb_config_ports", nil, nil, uint64(ports))
	t.family("dlb_config_servers", "gauge", "Configured servers, counting each server once per port.")
	t.counter("dlb_config_servers", nil, nil, uint64(servers))
	t.family("dlb_config_changes_total", "counter", "Configuration changes applied since dlbd started.")
	t.counter("dlb_config_changes_total", nil, nil, st.Changes)
	t.family("dlb_config_last_change_timestamp_seconds", "gauge", "When the configuration last changed, or was loaded when dlbd started.")
	t.sample("dlb_config_last_change_timestamp_seconds", nil, nil, unixSeconds(st.LastChange))

	m := st.Config.Manager
	t.family("dlb_manager_running", "gauge", "Whether the manager is started (it sets weights from load).")
	t.sample("dlb_manager_running", nil, nil, bool01(m.Started))
	t.family("dlb_manager_interval_seconds", "gauge", "The manager's cycle.")
	t.sample("dlb_manager_interval_seconds", nil, nil, m.Interval)
	t.family("dlb_manager_cycles_total", "counter", "Manager cycles since dlbd started.")
	t.counter("dlb_manager_cycles_total", nil, nil, st.ManagerCycles)
	t.family("dlb_manager_cycle_duration_seconds", "gauge", "How long the manager's latest cycle took.")
	t.sample("dlb_manager_cycle_duration_seconds", nil, nil, st.ManagerCycle.Seconds())

	t.family("dlb_events_total", "counter", "Events raised since dlbd started (the event scripts' names).")
	for _, name := range eventNames {
		t.counter("dlb_events_total", labels("event", name), nil, st.EventCounts[name])
	}
	t.family("dlb_event_scripts_dropped_total", "counter", "Events whose scripts were not run: too many were waiting.")
	t.counter("dlb_event_scripts_dropped_total", nil, nil, st.EventScriptsDropped)
}

// portRow is a port of the snapshot with its labels.
type portRow struct {
	labels []byte
	ps     *dispatcher.PortStatus
	pr     lb.Proportions
}

func writePorts(t *textWriter, st *dispatcher.Status) {
	var rows []portRow
	for _, cl := range st.Config.Clusters {
		ca := cl.Address.String()
		for _, p := range cl.Ports {
			ps, ok := st.Ports[lb.ServiceKey{Cluster: cl.Address, Port: p.Number}]
			if !ok {
				continue
			}
			rows = append(rows, portRow{labels: labels("cluster", ca, "port", strconv.Itoa(int(p.Number))), ps: &ps, pr: cl.Proportions})
		}
	}
	if len(rows) == 0 {
		return
	}
	counters := []struct {
		name, help string
		v          func(*dispatcher.PortStatus) uint64
	}{
		{"dlb_port_packets_total", "Packets forwarded for the port (NAT: both directions).", func(p *dispatcher.PortStatus) uint64 { return p.Counters.Packets }},
		{"dlb_port_bytes_total", "Bytes forwarded for the port.", func(p *dispatcher.PortStatus) uint64 { return p.Counters.Bytes }},
		{"dlb_port_new_connections_total", "Connections the port scheduled.", func(p *dispatcher.PortStatus) uint64 { return p.Counters.NewConns }},
		{"dlb_port_finished_connections_total", "Connections of the port that ended.", func(p *dispatcher.PortStatus) uint64 { return p.Counters.FinConns }},
	}
	for _, c := range counters {
		t.family(c.name, "counter", c.help)
		for _, r := range rows {
			t.counter(c.name, r.labels, nil, c.v(r.ps))
		}
	}
	gauges := []struct {
		name, help string
		v          func(*dispatcher.PortStatus) float64
	}{
		{"dlb_port_active_connections", "Established connections of the port's servers at the latest sweep.", func(p *dispatcher.PortStatus) float64 { return float64(p.Active) }},
		{"dlb_port_half_open_connections", "Half-open connections of the port at the latest sweep (SYNs of the last 30 s not completed).", func(p *dispatcher.PortStatus) float64 { return float64(p.HalfOpen) }},
		{"dlb_port_affinity_records", "Live affinity records the port wrote.", func(p *dispatcher.PortStatus) float64 { return float64(p.AffinityRecords) }},
		{"dlb_port_maglev_table_slots", "Slots of the port's Maglev table; 0 when no server takes new connections.", func(p *dispatcher.PortStatus) float64 { return float64(p.TableSize) }},
		{"dlb_port_alert", "1 while none of the port's servers takes new connections (managerAlert).", func(p *dispatcher.PortStatus) float64 { return bool01(p.Alert) }},
		{"dlb_port_half_open_alert", "1 while the port's half-open connections exceed its maxhalfopen (halfOpenAlert).", func(p *dispatcher.PortStatus) float64 { return bool01(p.HalfOpenAlert) }},
		{"dlb_port_manager_change_ratio", "The load-driven weight change the manager's latest cycle asked for, as a share of the port's total weight.", func(p *dispatcher.PortStatus) float64 { return p.Change / 100 }},
		{"dlb_port_manager_pushed", "1 if the manager's latest cycle pushed new weights for the port.", func(p *dispatcher.PortStatus) float64 { return bool01(p.Pushed) }},
	}
	for _, g := range gauges {
		t.family(g.name, "gauge", g.help)
		for _, r := range rows {
			t.sample(g.name, r.labels, nil, g.v(r.ps))
		}
	}
	t.family("dlb_port_manager_proportion_ratio", "gauge", "How much each of the manager's inputs (active and new connections, advisor load, system load) weighs for the port's servers: its cluster's proportions.")
	inputs := [4][]byte{labels("input", "active"), labels("input", "new"), labels("input", "port"), labels("input", "system")}
	for _, r := range rows {
		for i, v := range []int{r.pr.Active, r.pr.New, r.pr.Port, r.pr.System} {
			t.sample("dlb_port_manager_proportion_ratio", r.labels, inputs[i], float64(v)/100)
		}
	}
}

// serverRow is a server of the snapshot with its labels.
type serverRow struct {
	labels []byte
	ss     *dispatcher.ServerStatus
	weight uint32
}

func writeServers(t *textWriter, st *dispatcher.Status) {
	rows := make([]serverRow, 0, len(st.Servers))
	ss := make([]dispatcher.ServerStatus, 0, len(st.Servers))
	ends := make([]int, 0, len(st.Servers))
	var b []byte // every server's label set, one after the other
	for _, cl := range st.Config.Clusters {
		ca := cl.Address.String()
		for _, p := range cl.Ports {
			sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			port := strconv.Itoa(int(p.Number))
			for _, s := range p.Servers {
				sst, ok := st.Servers[lb.BackendKey{Service: sk, Server: s.Address}]
				if !ok {
					continue
				}
				b = appendLabels(b, "cluster", ca, "port", port, "server", s.Address.String())
				ends = append(ends, len(b))
				ss = append(ss, sst)
				rows = append(rows, serverRow{weight: s.Weight})
			}
		}
	}
	if len(rows) == 0 {
		return
	}
	off := 0
	for i := range rows {
		rows[i].labels, rows[i].ss = b[off:ends[i]:ends[i]], &ss[i]
		off = ends[i]
	}
	counters := []struct {
		name, help string
		v          func(*dispatcher.ServerStatus) uint64
	}{
		{"dlb_server_packets_total", "Packets forwarded to the server (NAT: both directions).", func(s *dispatcher.ServerStatus) uint64 { return s.Counters.Packets }},
		{"dlb_server_bytes_total", "Bytes forwarded to the server (NAT: both directions).", func(s *dispatcher.ServerStatus) uint64 { return s.Counters.Bytes }},
		{"dlb_server_new_connections_total", "Connections scheduled to the server.", func(s *dispatcher.ServerStatus) uint64 { return s.Counters.NewConns }},
		{"dlb_server_finished_connections_total", "Connections to the server that ended (FIN or RST, replaced, or expired while established).", func(s *dispatcher.ServerStatus) uint64 { return s.Counters.FinConns }},
	}
	for _, c := range counters {
		t.family(c.name, "counter", c.help)
		for _, r := range rows {
			t.counter(c.name, r.labels, nil, c.v(r.ss))
		}
	}
	t.family("dlb_server_active_connections", "gauge", "Established connections to the server at the latest sweep.")
	for _, r := range rows {
		t.counter("dlb_server_active_connections", r.labels, nil, r.ss.Active)
	}
	t.family("dlb_server_configured_weight", "gauge", "The server's weight as the operator configured it.")
	for _, r := range rows {
		t.counter("dlb_server_configured_weight", r.labels, nil, uint64(r.weight))
	}
	t.family("dlb_server_weight", "gauge", "The weight the executor uses for the server now (the manager's, while it runs).")
	for _, r := range rows {
		t.counter("dlb_server_weight", r.labels, nil, uint64(r.ss.Weight))
	}
	t.family("dlb_server_state", "gauge", "1, labelled with the server's state: up, down (the operator's), quiesced, failed (an advisor finds it down) or unresolved (no MAC for its next hop).")
	var states [8][]byte
	for _, r := range rows {
		i := int(r.ss.State) % len(states)
		if states[i] == nil {
			states[i] = labels("state", r.ss.State.String())
		}
		t.sample("dlb_server_state", r.labels, states[i], 1)
	}
}

func writeAdvisors(t *textWriter, st *dispatcher.Status) {
	if len(st.Advisors) == 0 {
		return
	}
	keys := make([]health.Key, 0, len(st.Advisors))
	for k := range st.Advisors {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b health.Key) int {
		if a.Advisor != b.Advisor {
			if a.Advisor < b.Advisor {
				return -1
			}
			return 1
		}
		if c := a.Addr.Compare(b.Addr); c != 0 {
			return c
		}
		return int(a.Port) - int(b.Port)
	})
	lbls := make([][]byte, len(keys))
	for i, k := range keys {
		lbls[i] = labels("advisor", k.Advisor, "server", k.Addr.String(), "port", strconv.Itoa(int(k.Port)))
	}
	t.family("dlb_advisor_state", "gauge", "1, labelled with an advisor's verdict on a server: up, down or unknown (no answer yet).")
	for i, k := range keys {
		t.sample("dlb_advisor_state", lbls[i], labels("state", st.Advisors[k].State.String()), 1)
	}
	t.family("dlb_advisor_load_seconds", "gauge", "The load (response time) an advisor's last probe measured; absent while the server is down or not probed yet.")
	for i, k := range keys {
		if a := st.Advisors[k]; a.Probes > 0 && a.LoadMS >= 0 && a.State != lb.AdvisorDown {
			t.sample("dlb_advisor_load_seconds", lbls[i], nil, float64(a.LoadMS)/1000)
		}
	}
	t.family("dlb_advisor_probes_total", "counter", "Probes an advisor made of a server.")
	for i, k := range keys {
		t.counter("dlb_advisor_probes_total", lbls[i], nil, st.Advisors[k].Probes)
	}
	t.family("dlb_advisor_probe_failures_total", "counter", "Probes of a server that failed.")
	for i, k := range keys {
		t.counter("dlb_advisor_probe_failures_total", lbls[i], nil, st.Advisors[k].Failures)
	}
	t.family("dlb_advisor_probes_unmade_total", "counter",
		"Probes that could not be made for a reason of this host (no NFA, no route, no descriptors, its firewall, an exec program that cannot run): they say nothing of the server, whose state stays.")
	for i, k := range keys {
		t.counter("dlb_advisor_probes_unmade_total", lbls[i], nil, st.Advisors[k].Unmade)
	}
}

func writeMetricServers(t *textWriter, st *dispatcher.Status) {
	if len(st.MetricRefused) > 0 {
		reasons := make([]string, 0, len(st.MetricRefused))
		for r := range st.MetricRefused {
			reasons = append(reasons, r)
		}
		slices.Sort(reasons)
		t.family("dlb_metric_server_refused_reports_total", "counter", "Metric server reports refused or failed, by reason.")
		for _, r := range reasons {
			t.counter("dlb_metric_server_refused_reports_total", labels("reason", r), nil, uint64(max(st.MetricRefused[r], 0)))
		}
	}
	if len(st.Metrics) == 0 {
		return
	}
	addrs := make([]netip.Addr, 0, len(st.Metrics))
	for a := range st.Metrics {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	stale := time.Duration(3 * st.Config.Manager.Interval * float64(time.Second))
	t.family("dlb_metric_server_load_ratio", "gauge", "A metric a server's metric server last reported (0..1: its 0..100 load).")
	for _, a := range addrs {
		m := st.Metrics[a]
		names := make([]string, 0, len(m.Values))
		for n := range m.Values {
			names = append(names, n)
		}
		slices.Sort(names)
		l := labels("server", a.String())
		for _, n := range names {
			t.sample("dlb_metric_server_load_ratio", l, labels("metric", n), m.Values[n]/100)
		}
	}
	t.family("dlb_metric_server_report_age_seconds", "gauge", "Age of a server's last metric report; absent until its first.")
	for _, a := range addrs {
		if m := st.Metrics[a]; !m.At.IsZero() {
			t.sample("dlb_metric_server_report_age_seconds", labels("server", a.String()), nil, st.Now.Sub(m.At).Seconds())
		}
	}
	t.family("dlb_metric_server_stale", "gauge", "1 when a server has no metric report younger than 3 manager intervals (the manager ignores its load).")
	for _, a := range addrs {
		m := st.Metrics[a]
		t.sample("dlb_metric_server_stale", labels("server", a.String()), nil, bool01(m.At.IsZero() || st.Now.Sub(m.At) > stale))
	}
}

// unixSeconds is t in seconds since the epoch, with its fraction.
func unixSeconds(t time.Time) float64 {
	return float64(t.UnixNano()) / 1e9
}
