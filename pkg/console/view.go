package console

import (
	"slices"
	"strings"
	"time"

	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/dispatcher/events"
	"github.com/dlbproject/dlb/pkg/dispatcher/health"
	"github.com/dlbproject/dlb/pkg/lb"
)

// View is what the page shows: the console's own JSON, translated from a
// status snapshot. Counters are cumulative; the page turns them into rates.
type View struct {
	Now     time.Time `json:"now"`
	Version string    `json:"version"`
	// Interval is how often the page polls, in milliseconds.
	Interval int          `json:"interval_ms"`
	Executor ExecutorView `json:"executor"`
	Manager  ManagerView  `json:"manager"`
	// Warnings are the executor report's warnings, each with its remedy,
	// as of WarningsAt (they are read less often than the rest).
	Warnings   []string  `json:"warnings"`
	WarningsAt time.Time `json:"warnings_at"`
	// Dropping says what the executor dropped lately for want of
	// something the operator gives (a route, NAT room), as dlbctl status
	// does; "" when nothing. It is read with every snapshot.
	// DroppingPackets is how many packets that was, over DroppingSeconds.
	Dropping        string  `json:"dropping,omitempty"`
	DroppingPackets uint64  `json:"dropping_packets,omitempty"`
	DroppingSeconds float64 `json:"dropping_seconds,omitempty"`
	// HA is high availability's state (nil: not configured), BGP the
	// speaker's (nil: no neighbour, nothing announced).
	HA       *HAView       `json:"ha,omitempty"`
	BGP      *BGPView      `json:"bgp,omitempty"`
	Clusters []ClusterView `json:"clusters"`
	// Servers counts the configured servers (each once per port); when
	// they are more than MaxServers the snapshot is taken at port depth
	// and ServersListed is false.
	Servers       int         `json:"servers"`
	ServersListed bool        `json:"servers_listed"`
	MaxServers    int         `json:"max_servers"`
	Events        []EventView `json:"events"`
	Changes       uint64      `json:"changes"`
	LastChange    time.Time   `json:"last_change"`
}

// ExecutorView is the executor's state and counters.
type ExecutorView struct {
	Started   bool   `json:"started"`
	Loaded    bool   `json:"loaded"`
	Attached  bool   `json:"attached"`
	Interface string `json:"interface"`
	Mode      string `json:"mode"`
	Error     string `json:"error,omitempty"`
	// Trace describes the packet trace that runs (dlbctl executor
	// trace): "" when none.
	Trace   string      `json:"trace,omitempty"`
	Reasons []Reason    `json:"reasons"`
	Tables  []TableFill `json:"tables"`
}

// Reason is one of the executor's packet reasons.
type Reason struct {
	Reason  string `json:"reason"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// TableFill is how full one of the executor's tables is.
type TableFill struct {
	Name    string `json:"name"`
	Entries uint64 `json:"entries"`
	Limit   uint64 `json:"limit"`
}

// ManagerView is the manager's state.
type ManagerView struct {
	Running  bool    `json:"running"`
	Interval float64 `json:"interval"`
	Cycles   uint64  `json:"cycles"`
	CycleMS  float64 `json:"cycle_ms"`
}

// ClusterView is a cluster and its ports.
type ClusterView struct {
	Address string     `json:"address"`
	Ports   []PortView `json:"ports"`
}

// PortView is a port, with its servers when they are listed.
type PortView struct {
	Key            string       `json:"key"`
	Port           uint16       `json:"port"`
	Protocol       string       `json:"protocol"`
	Method         string       `json:"method"`
	Alert          bool         `json:"alert"`
	HalfOpen       uint64       `json:"half_open"`
	Active         uint64       `json:"active"`
	NewConnections uint64       `json:"new_connections"`
	Packets        uint64       `json:"packets"`
	Bytes          uint64       `json:"bytes"`
	ServerCount    int          `json:"server_count"`
	Servers        []ServerView `json:"servers"`
}

// ServerView is one server of a port.
type ServerView struct {
	// Key is cluster@port@server.
	Key           string `json:"key"`
	Address       string `json:"address"`
	Weight        uint32 `json:"weight"`
	CurrentWeight uint32 `json:"current_weight"`
	State         string `json:"state"`
	Reason        string `json:"reason"`
	// AdvisorLoadMS is IBM's PORT column: the advisors' load in ms, -1
	// when an advisor finds the server down, 0 when none covers it.
	AdvisorLoadMS int64 `json:"advisor_load_ms"`
	// SystemLoad is IBM's SYSTEM column: the metric servers' load
	// 0..100, -1 when none reports or the report is stale.
	SystemLoad     float64 `json:"system_load"`
	Active         uint64  `json:"active"`
	NewConnections uint64  `json:"new_connections"`
	Packets        uint64  `json:"packets"`
	Bytes          uint64  `json:"bytes"`
	// MAC is the next hop's Ethernet address, when resolved.
	MAC string `json:"mac,omitempty"`
	// Advisors are the verdicts of the advisors that probe it.
	Advisors []VerdictView `json:"advisors"`
}

// VerdictView is one advisor's verdict on a server: its state, since
// when (the time in state), and why the last probe failed.
type VerdictView struct {
	Advisor   string    `json:"advisor"`
	State     string    `json:"state"`
	Since     time.Time `json:"since"`
	LoadMS    int64     `json:"load_ms"`
	LastError string    `json:"last_error,omitempty"`
	Probes    uint64    `json:"probes"`
	Failures  uint64    `json:"failures"`
}

// EventView is a recent event.
type EventView struct {
	At   time.Time `json:"at"`
	Name string    `json:"name"`
	Text string    `json:"text"`
	// Bad says the event reports a fault (a server down, an alert).
	Bad bool `json:"bad"`
}

// view translates a snapshot; listed says it was taken at server depth.
func view(st *dispatcher.Status, listed bool, maxServers int) View {
	v := View{Now: st.Now, Servers: countServers(st.Config), ServersListed: listed, MaxServers: maxServers,
		Changes: st.Changes, LastChange: st.LastChange, Clusters: []ClusterView{}, Events: []EventView{},
		Warnings: []string{}, HA: haView(st.HA), BGP: bgpView(st.BGP, st.Config)}
	ex, x := st.Config.Executor, st.Executor
	v.Executor = ExecutorView{Started: ex.Started, Loaded: x.Loaded, Attached: x.Attached, Interface: ex.Interface,
		Mode: ex.XDPMode.String(), Error: x.Err, Reasons: []Reason{}, Tables: []TableFill{}}
	if x.Attached && x.AttachedMode != lb.XDPAuto {
		v.Executor.Mode = x.AttachedMode.String()
	}
	if t := x.Trace; t != nil {
		v.Executor.Trace = t.String()
	}
	if len(x.Dropping) > 0 {
		v.Dropping = "the executor drops what it should forward: " + lb.DroppingText(x.Dropping, x.DroppingOver)
		for _, n := range x.Dropping {
			v.DroppingPackets += n
		}
		v.DroppingSeconds = x.DroppingOver.Seconds()
	}
	for _, r := range x.Reasons {
		v.Executor.Reasons = append(v.Executor.Reasons, Reason{Reason: r.Reason, Packets: r.Packets, Bytes: r.Bytes})
	}
	if x.Loaded {
		var nat, halfOpen uint64
		for _, use := range x.ReturnPools {
			nat += uint64(use.Established)
			halfOpen += uint64(use.HalfOpen)
		}
		conn := uint64(max(x.Connections, 0))
		conn -= min(conn, nat)
		v.Executor.Tables = []TableFill{
			{"connections", conn, uint64(x.Info.ConnTable)},
			{"NAT connections", nat, uint64(x.Info.NATTable)},
			{"NAT half-open", halfOpen, uint64(x.Info.HalfOpenTable)},
			{"affinity records", x.AffinityRecords, uint64(x.Info.AffinityTable)},
		}
	}
	m := st.Config.Manager
	v.Manager = ManagerView{Running: m.Started, Interval: m.Interval, Cycles: st.ManagerCycles,
		CycleMS: float64(st.ManagerCycle.Microseconds()) / 1000}

	for _, cl := range st.Config.Clusters {
		cv := ClusterView{Address: cl.Address.String(), Ports: []PortView{}}
		for _, p := range cl.Ports {
			sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			ps, ok := st.Ports[sk]
			if !ok {
				continue
			}
			pv := PortView{Key: sk.String(), Port: p.Number, Protocol: p.Protocol.String(), Method: p.Method.String(),
				Alert: ps.Alert, HalfOpen: ps.HalfOpen, Active: ps.Active, NewConnections: ps.Counters.NewConns,
				Packets: ps.Counters.Packets, Bytes: ps.Counters.Bytes, ServerCount: len(p.Servers), Servers: []ServerView{}}
			// The advisors probing this port, once for all its servers.
			var advisorKeys []string
			if listed {
				for _, a := range st.Config.Advisors {
					if a.Covers(cl.Address, p.Number) {
						advisorKeys = append(advisorKeys, a.Key())
					}
				}
			}
			for _, s := range p.Servers {
				bk := lb.BackendKey{Service: sk, Server: s.Address}
				ss, ok := st.Servers[bk]
				if !ok {
					continue
				}
				sv := ServerView{Key: bk.String(), Address: s.Address.String(), Weight: s.Weight,
					CurrentWeight: ss.Weight, State: ss.State.String(), Reason: ss.Reason, AdvisorLoadMS: ss.PortLoad,
					SystemLoad: ss.SystemLoad, Active: ss.Active, NewConnections: ss.Counters.NewConns, Packets: ss.Counters.Packets,
					Bytes: ss.Counters.Bytes, Advisors: []VerdictView{}}
				if ss.MAC != nil {
					sv.MAC = ss.MAC.String()
				}
				for _, key := range advisorKeys {
					if as, ok := st.Advisors[health.Key{Advisor: key, Addr: s.Address, Port: p.Number}]; ok {
						sv.Advisors = append(sv.Advisors, VerdictView{Advisor: key, State: as.State.String(), Since: as.Since,
							LoadMS: as.LoadMS, LastError: as.LastError, Probes: as.Probes, Failures: as.Failures})
					}
				}
				pv.Servers = append(pv.Servers, sv)
			}
			cv.Ports = append(cv.Ports, pv)
		}
		v.Clusters = append(v.Clusters, cv)
	}
	// Newest first.
	for i := len(st.RecentEvents) - 1; i >= 0; i-- {
		v.Events = append(v.Events, eventView(st.RecentEvents[i]))
	}
	return v
}

// eventView describes an event in a line.
func eventView(r events.Record) EventView {
	e := r.Env
	ev := EventView{At: r.At, Name: r.Name}
	switch r.Name {
	case events.ServerDown, events.ServerUp:
		ev.Bad = r.Name == events.ServerDown
		state := "up"
		if ev.Bad {
			state = "down"
		}
		ev.Text = "server " + e["DLB_SERVER"] + " port " + e["DLB_PORT"] + " " + state + " (advisor " + e["DLB_ADVISOR"] + ")"
		if e["DLB_REASON"] != "" {
			ev.Text += ": " + e["DLB_REASON"]
		}
	case events.ManagerAlert:
		ev.Bad = true
		ev.Text = "no server of " + e["DLB_CLUSTER"] + "@" + e["DLB_PORT"] + " takes new connections (policy " + e["DLB_POLICY"] + ")"
	case events.ManagerClear:
		ev.Text = e["DLB_CLUSTER"] + "@" + e["DLB_PORT"] + " has a server taking new connections again"
	case events.HalfOpenAlert:
		ev.Bad = true
		ev.Text = e["DLB_CLUSTER"] + "@" + e["DLB_PORT"] + ": " + e["DLB_HALFOPEN"] + " half-open connections, above maxhalfopen " + e["DLB_MAXHALFOPEN"]
	case events.HalfOpenDone:
		ev.Text = e["DLB_CLUSTER"] + "@" + e["DLB_PORT"] + ": half-open connections back at or below maxhalfopen (" + e["DLB_HALFOPEN"] + ")"
	case events.ExecutorDetached:
		ev.Bad = true
		ev.Text = "the executor's interface " + e["DLB_INTERFACE"] + " is gone (" + e["DLB_REASON"] + "): it attaches again when an interface of that name appears, or to another with dlbctl executor start --interface NAME"
	case events.ExecutorAttached:
		ev.Text = "the executor is attached to " + e["DLB_INTERFACE"] + " again (ifindex " + e["DLB_IFINDEX"] + ")"
	case events.GoActive, events.GoStandby, events.GoInOp, events.HighAvailChange:
		if _, ok := e["DLB_HA_STATE"]; ok {
			ev.Bad = e["DLB_HA_STATE"] == lb.HANoExecutor.String()
			ev.Text = "high availability: " + e["DLB_HA_GROUP"] + " group " + e["DLB_HA_STATE"] + " (was " + e["DLB_HA_PREVIOUS"] + ")"
			if e["DLB_HA_REASON"] != "" {
				ev.Text += ": " + e["DLB_HA_REASON"]
			}
			if e["DLB_HA_CLUSTERS"] != "" {
				ev.Text += "; clusters " + e["DLB_HA_CLUSTERS"]
			}
			break
		}
		ev.Bad = e["DLB_HA_PEER"] != "yes" || e["DLB_HA_CONFLICT"] != "" || e["DLB_HA_PEER_DIGEST"] != ""
		ev.Text = "high availability: the peer is not heard"
		if e["DLB_HA_PEER"] == "yes" {
			ev.Text = "high availability: the peer is heard"
		}
		if e["DLB_HA_CONFLICT"] != "" {
			ev.Text += "; " + e["DLB_HA_CONFLICT"]
		}
		if e["DLB_HA_PEER_DIGEST"] != "" {
			ev.Text += "; its configuration differs (digest " + e["DLB_HA_PEER_DIGEST"] + ", this one " + e["DLB_HA_DIGEST"] + ")"
		}
	default:
		keys := make([]string, 0, len(e))
		for k := range e {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = strings.ToLower(strings.TrimPrefix(k, "DLB_")) + "=" + e[k]
		}
		ev.Text = strings.Join(parts, " ")
	}
	return ev
}

// countServers counts a configuration's servers, each once per port.
func countServers(cfg lb.Config) int {
	n := 0
	for _, cl := range cfg.Clusters {
		for _, p := range cl.Ports {
			n += len(p.Servers)
		}
	}
	return n
}
