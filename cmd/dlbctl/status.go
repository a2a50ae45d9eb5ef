package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/lb"
)

// statusReport is "dlbctl status": one look at whether the dispatcher
// serves, composed from the executor, server, manager, high-availability
// and BGP reports.
type statusReport struct {
	Executor statusExecutor `json:"executor"`
	Ports    int            `json:"ports"`
	// Servers counts the servers (each once per port) by state.
	Servers map[string]int `json:"servers"`
	// NoServer lists the ports where no server takes new connections.
	NoServer []string        `json:"ports_without_server"`
	Manager  statusManager   `json:"manager"`
	Advisors *statusAdvisors `json:"advisors,omitempty"`
	Metrics  *statusMetrics  `json:"metric_servers,omitempty"`
	HA       *statusHA       `json:"high_availability,omitempty"`
	BGP      *statusBGP      `json:"bgp,omitempty"`
	Warnings []string        `json:"warnings"`
	// Attention lists what needs the operator: empty when all is well.
	Attention []string `json:"attention"`
}

type statusExecutor struct {
	State       string `json:"state"`
	Interface   string `json:"interface,omitempty"`
	Mode        string `json:"mode,omitempty"`
	Connections int    `json:"connections"`
	Capacity    uint32 `json:"connection_capacity"`
	Error       string `json:"error,omitempty"`
	// Dropping is what the executor dropped lately for want of something
	// the operator gives (executor report's dropping), over
	// DroppingSeconds.
	Dropping        map[string]uint64 `json:"dropping,omitempty"`
	DroppingSeconds float64           `json:"dropping_seconds,omitempty"`
}

// statusMetrics is the metric servers' side, when metrics are
// configured: how many servers report, and why those that are up and do
// not report fail.
type statusMetrics struct {
	Source    string `json:"source"`
	Servers   int    `json:"servers"`
	Reporting int    `json:"reporting"`
	// Failing: "ADDRESS: LAST ERROR" of the servers that are up and whose
	// report is stale after an error.
	Failing []string `json:"failing"`
}

// statusAdvisors is the advisors' side, when any is started: how many
// servers they probe, by state, and those this host cannot probe.
type statusAdvisors struct {
	Advisors int            `json:"advisors"`
	Probed   int            `json:"probed"`
	States   map[string]int `json:"states"`
	// CannotProbe: "ADVISOR TARGET SERVER: LAST ERROR" of the servers
	// whose last probe could not be made from this host.
	CannotProbe []string `json:"cannot_probe"`
}

type statusManager struct {
	Running  bool    `json:"running"`
	Interval float64 `json:"interval"`
}

type statusHA struct {
	Role    string `json:"role"`
	Running bool   `json:"running"`
	// Error says why it does not run, when it says.
	Error   string        `json:"error,omitempty"`
	Healthy bool          `json:"healthy"`
	Groups  []statusGroup `json:"groups"`
	Synced  bool          `json:"synced"`
	// Peer is alive; PeerRole its role; SameConfig whether it serves the
	// same configuration.
	Peer       bool   `json:"peer_alive"`
	PeerRole   string `json:"peer_role,omitempty"`
	SameConfig bool   `json:"same_configuration"`
	// Conflict names a peer role inconsistent with this one's ("the peer
	// is backup too").
	Conflict string `json:"role_conflict,omitempty"`
	// Silent are the heartbeat paths ("source -> destination") the live
	// peer has not been heard on for twice its dead time: one fault more and
	// neither dispatcher hears the other. Unreachable are the reach
	// targets this dispatcher does not reach.
	Silent      []string `json:"silent_heartbeats,omitempty"`
	Unreachable []string `json:"unreachable_reach,omitempty"`
	// Stray are the paths the peer's heartbeats arrive on that this
	// dispatcher does not have, each with its remedy.
	Stray []string `json:"stray_heartbeats,omitempty"`
}

// statusGroup is a group's state: "local" are the clusters this
// dispatcher is the preferred active for, "peer" the others.
type statusGroup struct {
	Group string `json:"group"`
	State string `json:"state"`
}

type statusBGP struct {
	Running   bool     `json:"running"`
	Sessions  int      `json:"sessions"`
	Up        int      `json:"sessions_up"`
	Announce  int      `json:"clusters_to_announce"`
	Announced int      `json:"clusters_announced"`
	Down      []string `json:"sessions_down,omitempty"`
	Withdrawn []string `json:"withdrawn,omitempty"` // "VIP: reason"
}

const statusLong = `Report in a few lines whether this dispatcher serves: the executor, the
servers by state and the ports where none takes new connections, the
manager, the advisors, the metric servers, high availability and BGP when
configured, and every warning of "executor report". The last line says what
needs attention, if anything: the executor not attached, a port without a
server, the executor dropping what it should forward in the last 5 s (no
route to the clients, no usable interface, NAT tables full, NAT ports
exhausted), a warning, a server this host cannot probe (no route to it, its NFA
gone), a server that is up and whose metric reports fail, high
availability not running or without its peer (or a standby without a full
copy of the active's tables, a peer serving another configuration, a
heartbeat path the peer is no longer heard on, a reach target not reached),
a BGP session down or a cluster withdrawn.

With --check, dlbctl exits 1 when something needs attention (for a
monitoring check); without it, 0 whenever dlbd answered.`

func (a *app) statusCmd() *cobra.Command {
	var check bool
	c := &cobra.Command{
		Use:   "status [--check]",
		Short: "Report in a few lines whether the dispatcher serves, and what needs attention",
		Long:  statusLong,
		Example: `  dlbctl status
  dlbctl status --check -o json`,
		Args: noArgs,
		RunE: a.runE(func(cmd *cobra.Command, _ []string) error {
			r, err := a.status(cmd.Context())
			if err != nil {
				return err
			}
			if err := a.print(r, func(w io.Writer) { statusTable(w, r) }); err != nil {
				return err
			}
			if check && len(r.Attention) > 0 {
				return errAttention
			}
			return nil
		}),
	}
	c.Flags().BoolVar(&check, "check", false, "exit 1 when something needs attention")
	return c
}

// errAttention is status --check's failure: the report said why.
var errAttention = errors.New("needs attention (see above)")

// status composes the report.
func (a *app) status(ctx context.Context) (statusReport, error) {
	cl := a.client()
	r := statusReport{Servers: map[string]int{}, NoServer: []string{}, Warnings: []string{}, Attention: []string{}}
	x, err := cl.Executor(ctx)
	if err != nil {
		return r, err
	}
	r.Executor = statusExecutor{State: x.State, Interface: x.Interface, Mode: x.AttachedMode, Connections: x.Connections,
		Capacity: x.ConnectionCapacity, Error: x.Error, Dropping: x.Dropping, DroppingSeconds: x.DroppingSeconds}
	if x.Detached != "" {
		r.Executor.Error = x.Detached
	}
	r.Warnings = append(r.Warnings, x.Warnings...)
	servers, err := cl.Servers(ctx, "")
	if err != nil {
		return r, err
	}
	up := map[string]bool{}
	for _, s := range servers {
		r.Servers[s.State]++
		if s.State == "up" {
			up[s.Address] = true
		}
	}
	m, err := cl.Manager(ctx, "")
	if err != nil {
		return r, err
	}
	r.Manager = statusManager{Running: m.Started, Interval: m.Interval}
	r.Ports = len(m.Ports)
	for _, p := range m.Ports {
		if p.Alert {
			r.NoServer = append(r.NoServer, fmt.Sprintf("%s@%d", p.Cluster, p.Port))
		}
	}
	adv, err := cl.Advisors(ctx)
	if err != nil {
		return r, err
	}
	if len(adv) > 0 {
		a := &statusAdvisors{Advisors: len(adv), States: map[string]int{}, CannotProbe: []string{}}
		for _, ar := range adv {
			for _, s := range ar.Servers {
				a.Probed++
				a.States[s.State]++
				if s.CannotProbe {
					a.CannotProbe = append(a.CannotProbe, fmt.Sprintf("%s %s %s: %s", ar.Name, advisorOn(ar), s.Address, s.LastError))
				}
			}
		}
		r.Advisors = a
	}
	mr, err := cl.Metrics(ctx)
	if err != nil {
		return r, err
	}
	if len(mr.Clusters) > 0 {
		ms := &statusMetrics{Source: mr.Source, Servers: len(mr.Servers), Failing: []string{}}
		for _, s := range mr.Servers {
			switch {
			case !s.Stale:
				ms.Reporting++
			case s.LastError != "" && up[s.Address]:
				// Without an error the first report may be on its way;
				// a server that is not up is not expected to report.
				ms.Failing = append(ms.Failing, s.Address+": "+s.LastError)
			}
		}
		r.Metrics = ms
	}
	ha, err := cl.HA(ctx)
	if err != nil {
		return r, err
	}
	if ha.Configured {
		h := &statusHA{Role: ha.Role, Running: ha.Running, Error: ha.Error, Healthy: ha.Healthy, Synced: ha.Replication.Synced,
			Peer: ha.Peer.Alive, PeerRole: ha.Peer.Role, SameConfig: ha.DigestMatch, Conflict: ha.Peer.Conflict, Groups: []statusGroup{}}
		for _, g := range ha.Groups {
			h.Groups = append(h.Groups, statusGroup{Group: g.Group, State: g.State})
		}
		h.Silent = silentPaths(ha)
		for _, p := range ha.Stray {
			h.Stray = append(h.Stray, fmt.Sprintf("from %s to %s: %s", p.Destination, p.Source, strayRemedy(p)))
		}
		if ha.Running {
			for _, t := range ha.Reach {
				if !t.Reachable {
					h.Unreachable = append(h.Unreachable, t.Address)
				}
			}
		}
		r.HA = h
	}
	b, err := cl.BGP(ctx)
	if err != nil {
		return r, err
	}
	if b.Configured || len(b.Neighbors) > 0 || slices.ContainsFunc(b.Clusters, func(c api.BGPClusterReport) bool { return c.Announce }) {
		s := &statusBGP{Running: b.Running, Sessions: len(b.Neighbors)}
		for _, n := range b.Neighbors {
			if n.State == "established" {
				s.Up++
			} else {
				s.Down = append(s.Down, n.Address+" "+n.State)
			}
		}
		for _, c := range b.Clusters {
			if !c.Announce {
				continue
			}
			s.Announce++
			if c.Announced {
				s.Announced++
			} else {
				s.Withdrawn = append(s.Withdrawn, c.Address+": "+c.Reason)
			}
		}
		r.BGP = s
	}
	r.Attention = attention(r, x)
	return r, nil
}

// attention says what of r needs the operator.
func attention(r statusReport, x api.ExecutorReport) []string {
	out := []string{}
	if x.Started && x.State != api.ExecutorAttached {
		msg := "the executor is started and " + x.State + orSuffix(r.Executor.Error)
		if x.State == api.ExecutorDetached {
			msg += " (back when " + x.Interface + " is; to another interface, its tables kept: dlbctl executor start --interface NAME)"
		}
		out = append(out, msg)
	}
	if len(r.NoServer) > 0 {
		out = append(out, "no server takes new connections on "+someAddresses(r.NoServer, ", "))
	}
	if ex := r.Executor; len(ex.Dropping) > 0 {
		out = append(out, "the executor drops what it should forward: "+lb.DroppingText(ex.Dropping, seconds(ex.DroppingSeconds)))
	}
	if n := len(r.Warnings); n > 0 {
		out = append(out, fmt.Sprintf("%d %s", n, plural(n, "warning", "warnings")))
	}
	if a := r.Advisors; a != nil && len(a.CannotProbe) > 0 {
		n := len(a.CannotProbe)
		out = append(out, fmt.Sprintf("this host cannot probe %s, %s unchecked: %s", counted(n, "server", "servers"),
			plural(n, "whose state goes", "whose states go"), listSome(a.CannotProbe, 3)))
	}
	if m := r.Metrics; m != nil && len(m.Failing) > 0 {
		out = append(out, fmt.Sprintf("no metric report from %s that %s up: %s", counted(len(m.Failing), "server", "servers"),
			plural(len(m.Failing), "is", "are"), listSome(m.Failing, 3)))
	}
	if h := r.HA; h != nil {
		switch {
		case !h.Running:
			out = append(out, "high availability is configured and not running"+orSuffix(h.Error))
		case !h.Peer:
			out = append(out, "the high-availability peer is not heard")
		case !h.SameConfig:
			out = append(out, "the high-availability peer serves another configuration")
		}
		if h.Running && h.Peer && h.Conflict != "" {
			out = append(out, fmt.Sprintf("the high-availability roles conflict (%s, this one %s): which dispatcher serves is decided by chance; "+
				"give one the role primary and the other backup, or both both", h.Conflict, h.Role))
		}
		if h.Running && h.Peer && slices.ContainsFunc(h.Groups, func(g statusGroup) bool { return g.State == "standby" }) && !h.Synced {
			out = append(out, "standing by without a full copy of the active's connection tables")
		}
		if h.Running && !h.Healthy {
			out = append(out, "this dispatcher cannot forward (high availability says so to its peer)")
		}
		if len(h.Silent) > 0 {
			out = append(out, fmt.Sprintf("the peer is not heard on heartbeat %s %s, only on another: one fault more and neither dispatcher hears the other",
				plural(len(h.Silent), "path", "paths"), strings.Join(h.Silent, ", ")))
		}
		for _, p := range h.Stray {
			out = append(out, "the peer's heartbeats arrive on a path this dispatcher does not have, "+p)
		}
		if len(h.Unreachable) > 0 {
			out = append(out, fmt.Sprintf("reach %s %s not reached from this dispatcher: it serves only if the peer reaches no more",
				plural(len(h.Unreachable), "target", "targets"), strings.Join(h.Unreachable, ", ")))
		}
	}
	if b := r.BGP; b != nil {
		if len(b.Down) > 0 {
			out = append(out, "BGP sessions down: "+strings.Join(b.Down, ", "))
		}
		if len(b.Withdrawn) > 0 {
			out = append(out, "clusters withdrawn: "+someAddresses(b.Withdrawn, "; "))
		}
	}
	return out
}

// silentPaths lists the heartbeat paths of r the live peer has not been
// heard on for twice the dead time (count × interval: twice, for a peer
// of a longer interval), or at all though count heartbeats went out on
// them.
func silentPaths(r api.HAReport) []string {
	if !r.Running || !r.Peer.Alive || len(r.Heartbeats) < 2 {
		return nil
	}
	dead := 2 * float64(r.Count) * float64(r.IntervalMS) / 1000
	var out []string
	for _, hb := range r.Heartbeats {
		if hb.Received == 0 && hb.Sent > uint64(r.Count) || hb.Received > 0 && hb.SecondsAgo > dead {
			out = append(out, hb.Source+" -> "+hb.Destination)
		}
	}
	return out
}

// byState renders counts by state as ": 1 down, 2 up" (states sorted),
// or "" when there are none.
func byState(counts map[string]int) string {
	var states []string
	for _, st := range slices.Sorted(maps.Keys(counts)) {
		states = append(states, fmt.Sprintf("%d %s", counts[st], st))
	}
	if len(states) == 0 {
		return ""
	}
	return ": " + strings.Join(states, ", ")
}

// listSome joins the first n of items with "; ", and counts the rest.
func listSome(items []string, n int) string {
	return listFirst(items, n, "; ")
}

// listFirst lists the first n of items, sep between them, and counts the
// rest.
func listFirst(items []string, n int, sep string) string {
	shown := items[:min(len(items), n)]
	s := strings.Join(shown, sep)
	if more := len(items) - len(shown); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

// listedAddresses bounds the addresses (clusters, ports) a line of a
// report lists.
const listedAddresses = 8

// someAddresses lists addresses, sep between them, the first
// listedAddresses of many with their count: 4,000 clusters were printed
// on one line.
func someAddresses(items []string, sep string) string {
	s := listFirst(items, listedAddresses, sep)
	if len(items) > listedAddresses {
		s += fmt.Sprintf(" (%d in all: -o json lists them)", len(items))
	}
	return s
}

func orSuffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// statusTable writes the report as a few labelled lines.
func statusTable(w io.Writer, r statusReport) {
	x := r.Executor
	exec := x.State
	switch {
	case x.Interface == "":
	case x.State == api.ExecutorAttached:
		exec += " to " + x.Interface
		if x.Mode != "" {
			exec += " (" + x.Mode + ")"
		}
	case x.State == api.ExecutorDetached:
		exec += " from " + x.Interface
	default:
		exec += " (interface " + x.Interface + ")"
	}
	if x.State == api.ExecutorAttached || x.Connections > 0 {
		exec += fmt.Sprintf(", %d of %d connections", x.Connections, x.Capacity)
	}
	fmt.Fprintf(w, "executor\t%s%s\n", exec, orSuffix(x.Error))
	total := 0
	for _, n := range r.Servers {
		total += n
	}
	line := counted(r.Ports, "port", "ports") + ", " + counted(total, "server", "servers") + byState(r.Servers)
	fmt.Fprintf(w, "servers\t%s\n", line)
	mgr := "stopped: configured weights"
	if r.Manager.Running {
		mgr = fmt.Sprintf("running, every %g s", r.Manager.Interval)
	}
	fmt.Fprintf(w, "manager\t%s\n", mgr)
	if a := r.Advisors; a != nil {
		line := fmt.Sprintf("%s probing %s", counted(a.Advisors, "advisor", "advisors"), counted(a.Probed, "server", "servers")) +
			byState(a.States)
		if n := len(a.CannotProbe); n > 0 {
			line += fmt.Sprintf("; %d cannot be probed from this host", n)
		}
		fmt.Fprintf(w, "advisors\t%s\n", line)
	}
	if m := r.Metrics; m != nil {
		fmt.Fprintf(w, "metric servers\t%d of %d reporting (%s)\n", m.Reporting, m.Servers, m.Source)
	}
	if h := r.HA; h != nil {
		line := "role " + h.Role + ": "
		if !h.Running {
			line += "not running"
		} else {
			var groups []string
			for _, g := range h.Groups {
				whose := "its own clusters"
				if g.Group == "peer" {
					whose = "the peer's clusters"
				}
				groups = append(groups, g.State+" for "+whose)
			}
			line += strings.Join(groups, ", ")
			if h.Synced {
				line += " (synced)"
			}
			if h.Peer {
				line += "; peer " + h.PeerRole + " alive"
				if !h.SameConfig {
					line += ", ANOTHER configuration"
				}
			} else {
				line += "; peer not heard"
			}
		}
		fmt.Fprintf(w, "high availability\t%s\n", line)
	}
	if b := r.BGP; b != nil {
		fmt.Fprintf(w, "bgp\t%d of %d sessions up, %d of %d clusters announced\n", b.Up, b.Sessions, b.Announced, b.Announce)
	}
	if len(r.Warnings) == 0 {
		fmt.Fprintf(w, "warnings\tnone\n")
	}
	for i, wn := range r.Warnings {
		label := ""
		if i == 0 {
			label = "warnings"
		}
		fmt.Fprintf(w, "%s\t%d. %s\n", label, i+1, wn)
	}
	if len(r.Attention) == 0 {
		fmt.Fprintf(w, "attention\tnothing needs attention\n")
		return
	}
	for i, s := range r.Attention {
		label := ""
		if i == 0 {
			label = "ATTENTION"
		}
		fmt.Fprintf(w, "%s\t%s\n", label, s)
	}
}
