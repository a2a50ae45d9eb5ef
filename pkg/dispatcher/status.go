package dispatcher

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher/events"
	"github.com/dlbproject/dlb/pkg/dispatcher/health"
	"github.com/dlbproject/dlb/pkg/lb"
)

// Query selects what a status snapshot holds.
type Query struct {
	// Depth says down to which objects the snapshot goes: 0 none (the
	// executor, the manager, the advisors and the metric servers only),
	// lb.ClusterDepth and lb.PortDepth the ports of the selected clusters
	// or ports, lb.ServerDepth also their servers.
	Depth lb.Depth
	// Target selects objects in the cluster@port@server grammar, with as
	// many components as Depth; "" selects all. Named objects must exist.
	Target string
	// Counters asks for the executor's traffic counters.
	Counters bool
	// Tables asks for the executor's tables' memory: the costly part of
	// a snapshot (tens of milliseconds on a busy host, during which the
	// engine does nothing else), which reports that do not show it leave
	// out.
	Tables bool
	// Warnings asks for the executor report's warnings, which ask the
	// kernel about every cluster address, NAT route and NFA: a report
	// polled every second asks for them less often.
	Warnings bool
	// HA asks for high availability's state.
	HA bool
	// BGP asks for the BGP speaker's sessions and announcements.
	BGP bool
}

// Status is a snapshot of what the engine knows, in the model's terms.
type Status struct {
	// Config is the committed configuration (shared: do not change it).
	Config lb.Config
	// HA is high availability's state (with Query.HA).
	HA *HAStatus
	// Selected is what the query's target selected.
	Selected lb.Target
	// Now is when the snapshot was taken.
	Now      time.Time
	Executor ExecutorStatus
	// Ports and Servers hold the selected objects (see Query.Depth).
	Ports   map[lb.ServiceKey]PortStatus
	Servers map[lb.BackendKey]ServerStatus
	// Advisors holds every probed server's state, by advisor, server and
	// port.
	Advisors map[health.Key]AdvisorStatus
	// Metrics holds every polled server's last report; MetricRefused
	// counts refused or failed reports by reason.
	Metrics       map[netip.Addr]MetricStatus
	MetricRefused map[string]int64
	// ManagerCycles counts manager cycles since dlbd started, and
	// ManagerCycle is how long the latest took.
	ManagerCycles uint64
	ManagerCycle  time.Duration
	// Changes counts the configuration changes applied since dlbd
	// started; LastChange is when the latest was applied, or when the
	// configuration was loaded if none was since.
	Changes    uint64
	LastChange time.Time
	// EventCounts counts the events raised since dlbd started, by name
	// (events.ServerDown, ...); RecentEvents holds the latest ones, oldest
	// first (at most events.RecentEvents).
	EventCounts  map[string]uint64
	RecentEvents []events.Record
	// EventScriptsDropped counts the events whose scripts were not run:
	// too many were waiting.
	EventScriptsDropped uint64
	// BGP is the speaker's state (with Query.BGP).
	BGP *BGPStatus
}

// facts are what the engine counts for status snapshots alone.
type facts struct {
	changes    uint64
	lastChange time.Time
	cycle      time.Duration
	sweptAt    time.Time
}

// ExecutorStatus is the executor's state.
type ExecutorStatus struct {
	// Loaded says whether the executor is loaded; Err why it is not, if
	// it should be.
	Loaded bool
	Err    string
	// Attached and Attachment say where the program is attached;
	// AttachedMode is the mode (lb.XDPAuto: adopted, not known).
	Attached     bool
	Attachment   lb.Attachment
	AttachedMode lb.XDPMode
	// Detached says why the executor, started, is attached to nothing
	// ("interface eth0 was deleted"), since when; it attaches again when
	// an interface of its name appears.
	Detached      string
	DetachedSince time.Time
	// Warnings name conditions that keep the configuration from working
	// as meant, while they last, with their remedy (with Query.Warnings).
	Warnings []string
	// AddressConflicts lists, per address this dispatcher holds, the
	// Ethernet addresses of the other hosts the latest check found
	// answering ARP for it.
	AddressConflicts map[netip.Addr][]string
	// Info describes its tables, and Memory what each holds in kernel
	// memory (with Query.Tables).
	Info   lb.DataplaneInfo
	Memory []lb.TableMemory
	// The latest sweep (SweptAt; zero: none yet): connection entries
	// (MAC and NAT), live affinity records, NAT port use per return
	// address (each live NAT connection holds one established port).
	SweptAt         time.Time
	Connections     int
	AffinityRecords uint64
	ReturnPools     map[netip.Addr]lb.DataplanePoolUse
	// Reasons and Events are the executor's counters (with
	// Query.Counters).
	Reasons []lb.ReasonCount
	Events  map[string]uint64
	// Trace is the packet trace that runs (nil: none).
	Trace *TraceStatus
	// Dropping counts, by reason, what the executor dropped over the
	// last DroppingOver for want of something the operator gives (a
	// route, an interface, table room, NAT ports; nil: nothing).
	Dropping     map[string]uint64
	DroppingOver time.Duration
}

// TraceStatus is a packet trace that runs (dlbctl executor trace).
type TraceStatus struct {
	// Filter is what it selects; Since when it started; Packets how many
	// it has handed to its client so far.
	Filter  lb.TraceFilter
	Since   time.Time
	Packets uint64
}

// String describes the trace: "cluster 198.18.0.100 port 80, since
// 2026-12-05T23:56:34Z, 12 packets so far".
func (t *TraceStatus) String() string {
	return fmt.Sprintf("%s, since %s, %d packets so far", t.Filter, t.Since.UTC().Format(time.RFC3339), t.Packets)
}

// PortStatus is a port beyond its configuration.
type PortStatus struct {
	// ID is its service id; TableSize its Maglev table's slots (0: no
	// table, no server takes new connections).
	ID        uint32
	TableSize uint32
	// TableDigest identifies the table by server address (0: no table):
	// equal on every dispatcher that sends every slot to the same server.
	TableDigest uint64
	// Counters are the service's (with Query.Counters); Active the
	// established connections of its servers.
	Counters lb.Counters
	Active   uint64
	// HalfOpen counts its half-open connections and HalfOpenAlert says
	// they are above maxhalfopen.
	HalfOpen      uint64
	HalfOpenAlert bool
	// AffinityRecords counts the live records it wrote.
	AffinityRecords uint64
	// Alert: no server takes new connections. Change and Pushed are the
	// manager's last cycle for the port.
	Alert  bool
	Change float64
	Pushed bool
}

// ServerStatus is a server of a port beyond its configuration.
type ServerStatus struct {
	// ID is its backend id.
	ID uint32
	// State is its state as the executor sees it, Weight the weight it
	// uses now (the manager's, while it runs).
	State  lb.ServerState
	Weight uint32
	// NewWeight and Reason are the manager's last cycle's result (the
	// configured weight while it is stopped).
	NewWeight uint32
	Reason    string
	// MAC is the next hop's MAC, when resolved.
	MAC net.HardwareAddr
	// Counters are the backend's (with Query.Counters); Active its
	// established connections.
	Counters lb.Counters
	Active   uint64
	// ACTV and NEWC are the manager's inputs (active connections, new
	// connections in the last refresh).
	ACTV, NEWC uint64
	// PortLoad is IBM's PORT column: the advisor's load in ms, -1 when an
	// advisor finds the server down, 0 when no advisor covers it;
	// SystemLoad the metric servers' load 0..100, -1 when none or stale.
	PortLoad   int64
	SystemLoad float64
	// AffinityRecords counts the live records naming it.
	AffinityRecords uint64
}

// AdvisorStatus is an advisor's verdict on one server.
type AdvisorStatus struct {
	State lb.AdvisorState
	// LoadMS is the last probe's load in ms (-1: down; 0: no probe yet).
	LoadMS    int64
	LastError string
	// Since is when it entered its state.
	Since            time.Time
	Probes, Failures uint64
	// Unmade counts the probes this host could not make
	// (advisors.Result.Local): they say nothing of the server.
	Unmade uint64
	// LastUnmade says the last probe was one of those.
	LastUnmade bool
}

// MetricStatus is a server's last load report.
type MetricStatus struct {
	Values map[string]float64
	// At is the report's own time (zero: none yet); Err the last error.
	At  time.Time
	Err string
}

// Status returns a snapshot for q.
func (e *Engine) Status(ctx context.Context, q Query) (*Status, error) {
	return call(ctx, e, func() (*Status, error) { return e.status(q) })
}

// Config returns the committed configuration (shared: do not change it).
func (e *Engine) Config(ctx context.Context) (lb.Config, error) {
	return call(ctx, e, func() (lb.Config, error) { return e.ed.Config(), nil })
}

func (e *Engine) status(q Query) (*Status, error) {
	cfg := e.ed.Config()
	st := &Status{Config: cfg, Now: time.Now(), ManagerCycles: e.mgr.cycles, ManagerCycle: e.facts.cycle,
		Changes: e.facts.changes, LastChange: e.facts.lastChange,
		EventCounts: e.events.Counts(), RecentEvents: e.events.Recent(), EventScriptsDropped: e.events.Dropped(),
		Ports: map[lb.ServiceKey]PortStatus{}, Servers: map[lb.BackendKey]ServerStatus{},
		Advisors: map[health.Key]AdvisorStatus{}, Metrics: map[netip.Addr]MetricStatus{},
		MetricRefused: map[string]int64{}}
	if q.HA {
		st.HA = e.haStatus(cfg)
	}
	if q.Depth > 0 {
		t, err := config.Select(cfg, q.Target, q.Depth)
		if err != nil {
			return nil, err
		}
		st.Selected = t
	}
	var stats lb.DataplaneStats
	if e.exec.dp != nil && q.Counters {
		var err error
		if stats, err = e.exec.dp.Stats(); err != nil {
			return nil, err
		}
	}
	e.executorStatus(&st.Executor, stats, q.Tables, q.Warnings)
	if q.Depth > 0 {
		e.objectStatus(st, q, stats)
	}
	e.health.Each(func(k health.Key, h *health.State) {
		as := AdvisorStatus{State: h.State, LoadMS: h.Last.LoadMS(), LastError: h.Last.Reason,
			Since: h.Since, Probes: h.Probes, Failures: h.Fails, Unmade: h.Local, LastUnmade: h.Last.Local}
		if h.Probes == 0 {
			as.LoadMS = 0
		}
		st.Advisors[k] = as
	})
	for a, m := range e.metrics.reports {
		st.Metrics[a] = MetricStatus{Values: m.values, At: m.at, Err: m.err}
	}
	for reason, n := range e.metrics.refused {
		st.MetricRefused[reason] = n
	}
	if q.BGP {
		st.BGP = e.bgpStatus(cfg)
	}
	return st, nil
}

func (e *Engine) executorStatus(x *ExecutorStatus, stats lb.DataplaneStats, memory, warnings bool) {
	if e.exec.err != nil {
		x.Err = e.exec.err.Error()
	}
	x.Detached, x.DetachedSince = e.exec.attach.detached, e.exec.attach.since
	if len(e.conflicts.found) > 0 {
		x.AddressConflicts = maps.Clone(e.conflicts.found)
	}
	if warnings {
		x.Warnings = append(e.natRouteProblems(e.ed.Config()), e.natGROProblems(e.ed.Config())...)
		if why := e.nativeRefused(); why != "" {
			x.Warnings = append(x.Warnings, fmt.Sprintf("the executor runs in generic XDP mode, several times slower, because %s refused native mode (%s): "+
				"use a driver with native XDP, or ask for generic mode (dlbctl executor start --xdp-mode generic)", e.ed.Config().Executor.Interface, why))
		}
		if w := e.pinnedUnstarted(); w != "" {
			x.Warnings = append(x.Warnings, w)
		}
		if w := e.unpinnedWarning(); w != "" {
			x.Warnings = append(x.Warnings, w)
		}
		if w := e.unsavedWarning(); w != "" {
			x.Warnings = append(x.Warnings, w)
		}
		x.Warnings = append(x.Warnings, e.conflictWarnings()...)
		x.Warnings = append(x.Warnings, e.nfaProblems(e.ed.Config())...)
		x.Warnings = append(x.Warnings, e.clusterProblems(e.ed.Config(), nil)...)
		x.Warnings = append(x.Warnings, e.haSourceProblems(e.ed.Config())...)
		x.Warnings = append(x.Warnings, haAddressProblems(e.ed.Config())...)
		x.Warnings = append(x.Warnings, e.hopProblems(e.ed.Config(), nil)...)
		x.Warnings = append(x.Warnings, e.ownSourceProblems()...)
		x.Warnings = append(x.Warnings, e.bgpPathProblems(e.ed.Config())...)
	}
	if e.exec.trace != nil {
		x.Trace = e.exec.trace.status()
	}
	x.Dropping, x.DroppingOver = e.dropping(time.Now())
	if e.exec.dp == nil {
		return
	}
	dp := e.exec.dp
	x.Loaded, x.Info = true, dp.Info()
	if a, ok := dp.Attached(); ok {
		x.Attached, x.Attachment = true, a
		link, err := e.opts.Netif.LinkByIndex(a.Ifindex)
		switch {
		case !warnings:
		case err != nil:
			x.Warnings = append(x.Warnings, fmt.Sprintf("the executor is attached to ifindex %d, which is no interface of this network namespace "+
				"(moved to another namespace?): it forwards there, not here, until the interface comes back", a.Ifindex))
		case !link.Up:
			x.Warnings = append(x.Warnings, fmt.Sprintf("interface %s is down (set down, or without carrier): the executor receives nothing "+
				"and sends nothing until it is up (ip link set %s up; a cable, the switch port)", link.Name, link.Name))
		}
	}
	x.AttachedMode = e.host.attachedMode
	if memory {
		x.Memory = dp.Memory()
	}
	sw := e.exec.sweep
	x.SweptAt, x.Connections, x.ReturnPools = e.facts.sweptAt, sw.Entries, sw.ReturnPools
	for _, n := range sw.AffinityServices {
		x.AffinityRecords += n
	}
	x.Reasons, x.Events = stats.Reasons, stats.Events
}

// pinnedUnstarted describes an executor pinned beside a configuration
// that does not start it (a new or lost state directory): it forwards
// with what it was last given, which a report saying only "stopped"
// would hide. "" when there is none.
func (e *Engine) pinnedUnstarted() string {
	if e.ed.Config().Executor.Started || e.exec.dp != nil || e.opts.Pins == nil {
		return ""
	}
	if pins, err := e.opts.Pins(); err != nil || len(pins) == 0 {
		return ""
	}
	where := "attached to no interface"
	if e.opts.PinnedAttachment != nil {
		if att, ok, err := e.opts.PinnedAttachment(); err == nil && ok {
			where = fmt.Sprintf("attached to ifindex %d (link id %d, program id %d)", att.Ifindex, att.LinkID, att.ProgramID)
			if link, ok := e.executorInterface(att); ok {
				where = fmt.Sprintf("attached to %s (ifindex %d, link id %d, program id %d)", link.Name, att.Ifindex, att.LinkID, att.ProgramID)
			}
		}
	}
	return "an executor this configuration does not start is pinned, " + where + ", and forwards with what it was last given: " +
		"\"dlbctl executor start\" takes it over with this configuration (load a saved one first), \"dlbctl executor stop\" removes it"
}

func (e *Engine) objectStatus(st *Status, q Query, stats lb.DataplaneStats) {
	cfg, t, sw := st.Config, st.Selected, e.exec.sweep
	stale := 3 * seconds(cfg.Manager.Interval)
	for ci := range cfg.Clusters {
		cl := &cfg.Clusters[ci]
		if !t.MatchCluster(cl.Address) {
			continue
		}
		for pi := range cl.Ports {
			p := &cl.Ports[pi]
			if q.Depth >= lb.PortDepth && !t.MatchPort(p.Number) {
				continue
			}
			sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			sid := e.ids.Services[sk]
			states, alert := e.serverStates(cfg, cl, p)
			prt := e.mgr.ports[sk]
			ps := PortStatus{ID: sid, TableSize: uint32(len(e.exec.tables[sid].slots)), Counters: stats.Services[sid],
				HalfOpen: sw.HalfOpen[sid], AffinityRecords: sw.AffinityServices[sid], Alert: alert}
			if prt != nil {
				ps.HalfOpenAlert, ps.Change, ps.Pushed = prt.halfOpenAlert, prt.change, prt.pushed
			}
			ps.TableDigest = e.tableDigest(sid, sk, p)
			for i, s := range p.Servers {
				bk := lb.BackendKey{Service: sk, Server: s.Address}
				id := e.ids.Backends[bk]
				ps.Active += sw.Active[id]
				if q.Depth < lb.ServerDepth || !t.MatchServer(s.Address) {
					continue
				}
				ss := ServerStatus{ID: id, State: states[i].state, Weight: states[i].weight, NewWeight: states[i].weight,
					Counters: stats.Backend(id), Active: sw.Active[id], AffinityRecords: sw.AffinityBackends[id],
					PortLoad: e.portLoad(cfg, cl, p, s), SystemLoad: -1, MAC: e.net.MAC(s.NextHop())}
				if rt := e.mgr.backends[bk]; rt != nil {
					ss.ACTV, ss.NEWC, ss.Reason = rt.actv, rt.newc, rt.reason
					if cfg.Manager.Started {
						ss.NewWeight = uint32(max(rt.newWeight, 0))
					}
				}
				if !cfg.Manager.Started {
					ss.Reason = "manager stopped: configured weight"
				}
				if v, at := e.metricSample(cl, s.Address); !at.IsZero() && st.Now.Sub(at) <= stale {
					ss.SystemLoad = v
				}
				st.Servers[bk] = ss
			}
			st.Ports[sk] = ps
		}
	}
}

// portLoad is IBM's PORT column: the advisor's last load in ms, -1 when an
// advisor finds the server down, 0 when no advisor covers the port.
func (e *Engine) portLoad(cfg lb.Config, cl *lb.Cluster, p *lb.Port, s lb.Server) int64 {
	if e.advisorDown(cfg, cl.Address, p.Number, s.Address) {
		return -1
	}
	load, at := e.advisorSample(cfg, cl.Address, p.Number, s.Address)
	if at.IsZero() {
		return 0
	}
	return int64(load)
}
