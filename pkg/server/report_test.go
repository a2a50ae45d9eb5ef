package server

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/lb"
)

// The executor report's state says where the executor stands, a deleted
// interface included.
func TestExecutorReportState(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	started := lb.Config{Executor: lb.Executor{Started: true, Interface: "eth0"}}
	for _, c := range []struct {
		name     string
		cfg      lb.Config
		x        dispatcher.ExecutorStatus
		state    string
		detached string
	}{
		{"stopped", lb.Config{}, dispatcher.ExecutorStatus{}, api.ExecutorStopped, ""},
		{"attached", started, dispatcher.ExecutorStatus{Loaded: true, Attached: true}, api.ExecutorAttached, ""},
		{"interface deleted", started, dispatcher.ExecutorStatus{Loaded: true, Detached: "interface eth0 was deleted", DetachedSince: since},
			api.ExecutorDetached, "interface eth0 was deleted"},
		{"started without its interface", started, dispatcher.ExecutorStatus{Err: "no eth0", Detached: "interface eth0 does not exist"},
			api.ExecutorDetached, "interface eth0 does not exist"},
		{"could not be loaded", started, dispatcher.ExecutorStatus{Err: "pins incompatible"}, api.ExecutorFailed, ""},
		{"loaded, attached to nothing", started, dispatcher.ExecutorStatus{Loaded: true}, api.ExecutorDetached, "the executor is attached to no interface"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := executorReport(&dispatcher.Status{Config: c.cfg, Executor: c.x})
			if r.State != c.state || r.Detached != c.detached {
				t.Errorf("state %q (%q), want %q (%q)", r.State, r.Detached, c.state, c.detached)
			}
			if r.Attached != (c.state == api.ExecutorAttached) {
				t.Errorf("attached %v in state %q", r.Attached, r.State)
			}
			if c.x.DetachedSince.IsZero() != (r.DetachedSince == "") {
				t.Errorf("detached since %q", r.DetachedSince)
			} else if r.DetachedSince != "" && r.DetachedSince != "2026-01-02T03:04:05Z" {
				t.Errorf("detached since %q", r.DetachedSince)
			}
		})
	}
}

// A running packet trace is in the executor report, its filter in
// dlbctl executor trace's words; none is left out.
func TestExecutorReportTrace(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600))
	cfg := lb.Config{Executor: lb.Executor{Started: true, Interface: "eth0"}}
	x := dispatcher.ExecutorStatus{Loaded: true, Attached: true, Trace: &dispatcher.TraceStatus{
		Filter: lb.TraceFilter{Server: netip.MustParseAddr("198.18.0.21"), Reasons: []string{"fwd_tx"}}, Since: since, Packets: 4}}
	r := executorReport(&dispatcher.Status{Config: cfg, Executor: x})
	want := api.TraceReport{Filter: "server 198.18.0.21 reasons fwd_tx", Since: "2026-01-02T02:04:05Z", Packets: 4}
	if r.Trace == nil || *r.Trace != want {
		t.Errorf("trace %+v, want %+v", r.Trace, want)
	}
	x.Trace = nil
	if r := executorReport(&dispatcher.Status{Config: cfg, Executor: x}); r.Trace != nil {
		t.Errorf("no trace runs, the report shows %+v", r.Trace)
	}
}

// TestHAReportSaysWhatIsMissing: high availability configured in part
// does not run, and its report says which command it still needs; one
// whose function failed keeps the function's error.
func TestHAReportSaysWhatIsMissing(t *testing.T) {
	hb := []lb.Heartbeat{{Source: netip.MustParseAddr("198.18.0.2"), Destination: netip.MustParseAddr("198.18.0.4")}}
	for _, c := range []struct {
		name string
		cfg  lb.HighAvailability
		node lb.HAStatus
		want string
	}{
		{"nothing", lb.HighAvailability{}, lb.HAStatus{}, ""},
		{"a heartbeat, no role", lb.HighAvailability{Heartbeats: hb, SecretFile: "/etc/dlb/ha.secret"}, lb.HAStatus{},
			"no role yet (highavailability backup add primary|backup|both auto|manual PORT)"},
		{"a role, no heartbeat", lb.HighAvailability{Role: lb.RolePrimary, Port: 7700}, lb.HAStatus{},
			"no heartbeat yet (highavailability heartbeat add SOURCE DESTINATION --secret-file FILE)"},
		{"reach targets only", lb.HighAvailability{Reach: []netip.Addr{netip.MustParseAddr("198.18.0.254")}}, lb.HAStatus{},
			"no role yet (highavailability backup add primary|backup|both auto|manual PORT)"},
		{"both, failed", lb.HighAvailability{Role: lb.RolePrimary, Port: 7700, Heartbeats: hb}, lb.HAStatus{Error: "cannot read the shared secret"},
			"cannot read the shared secret"},
		{"both, running", lb.HighAvailability{Role: lb.RolePrimary, Port: 7700, Heartbeats: hb}, lb.HAStatus{Running: true}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := haReport(&dispatcher.Status{HA: &dispatcher.HAStatus{Config: c.cfg, Node: c.node}})
			if r.Error != c.want {
				t.Errorf("error %q, want %q", r.Error, c.want)
			}
		})
	}
}

// TestManagerReportSelects: the manager report holds the ports and
// servers the target selected (the status holds those only), and with
// servers named, only the ports that have one of them.
func TestManagerReportSelects(t *testing.T) {
	vip := netip.MustParseAddr("198.18.0.100")
	s1, s2 := netip.MustParseAddr("198.18.0.21"), netip.MustParseAddr("198.18.0.22")
	cfg := lb.Config{Clusters: []lb.Cluster{{Address: vip, Ports: []lb.Port{
		{Number: 80, Servers: []lb.Server{{Address: s1}, {Address: s2}}},
		{Number: 443, Servers: []lb.Server{{Address: s2}}},
	}}}}
	key := func(port uint16) lb.ServiceKey { return lb.ServiceKey{Cluster: vip, Port: port} }
	backend := func(port uint16, s netip.Addr) lb.BackendKey { return lb.BackendKey{Service: key(port), Server: s} }
	for _, c := range []struct {
		name     string
		selected lb.Target
		ports    []uint16
		servers  map[lb.BackendKey]bool // in the status: what the target matched
		want     []string
	}{
		{"everything", lb.Target{}, []uint16{80, 443},
			map[lb.BackendKey]bool{backend(80, s1): true, backend(80, s2): true, backend(443, s2): true},
			[]string{"80 198.18.0.21", "80 198.18.0.22", "443 198.18.0.22"}},
		{"one port", lb.Target{Ports: []uint16{443}}, []uint16{443},
			map[lb.BackendKey]bool{backend(443, s2): true}, []string{"443 198.18.0.22"}},
		{"a port without servers", lb.Target{Ports: []uint16{80}}, []uint16{80}, nil, []string{"80 -"}},
		{"one server", lb.Target{Servers: []netip.Addr{s1}}, []uint16{80, 443},
			map[lb.BackendKey]bool{backend(80, s1): true}, []string{"80 198.18.0.21"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := &dispatcher.Status{Config: cfg, Selected: c.selected, Ports: map[lb.ServiceKey]dispatcher.PortStatus{},
				Servers: map[lb.BackendKey]dispatcher.ServerStatus{}}
			for _, p := range c.ports {
				st.Ports[key(p)] = dispatcher.PortStatus{}
			}
			for k := range c.servers {
				st.Servers[k] = dispatcher.ServerStatus{}
			}
			var got []string
			for _, p := range managerReport(st).Ports {
				if len(p.Servers) == 0 {
					got = append(got, fmt.Sprintf("%d -", p.Port))
				}
				for _, s := range p.Servers {
					got = append(got, fmt.Sprintf("%d %s", p.Port, s.Address))
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}
