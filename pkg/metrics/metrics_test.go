package metrics

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/dispatcher/events"
	"github.com/dlbproject/dlb/pkg/dispatcher/health"
	"github.com/dlbproject/dlb/pkg/lb"
)

var (
	now     = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	vip     = netip.MustParseAddr("198.18.0.100")
	ret     = netip.MustParseAddr("198.18.0.200")
	s1      = netip.MustParseAddr("198.18.0.21")
	s2      = netip.MustParseAddr("198.18.0.22")
	sk80    = lb.ServiceKey{Cluster: vip, Port: 80}
	sk443   = lb.ServiceKey{Cluster: vip, Port: 443}
	quoteMe = "load \"avg\"\\1\nmin"
)

// sample builds a snapshot with something in every family: two ports of
// one cluster, two servers on port 80 (one failed by its advisor), one on
// 443, an advisor, two metric servers (one never answered), a NAT pool.
func sample() *dispatcher.Status {
	cfg := lb.NewConfig()
	cfg.Executor.Started = true
	cl := lb.NewCluster(vip)
	cl.Proportions = lb.Proportions{Active: 20, New: 30, Port: 40, System: 10}
	cl.Metrics = []string{"cpu", quoteMe}
	p80, p443 := lb.NewPort(80), lb.NewPort(443)
	p80.Servers = []lb.Server{{Address: s1, Weight: 10}, {Address: s2, Weight: 5}}
	p443.Servers = []lb.Server{{Address: s1, Weight: 7}}
	cl.Ports = []lb.Port{p80, p443}
	cfg.Clusters = []lb.Cluster{cl}
	cfg.Manager.Started, cfg.Manager.Interval = true, 2
	cfg.Clusters[0].Announce = true
	hb := lb.Heartbeat{Source: netip.MustParseAddr("198.18.0.2"), Destination: netip.MustParseAddr("198.18.0.4")}
	ha := lb.HighAvailability{Role: lb.RoleBoth, Heartbeats: []lb.Heartbeat{hb}}
	return &dispatcher.Status{
		HA: &dispatcher.HAStatus{Config: ha, Imported: 90, Merged: 7, Kept: 2, DigestMatch: false, Node: lb.HAStatus{
			Running: true, Healthy: true,
			Groups: []lb.HAGroupStatus{{Group: lb.GroupLocal, State: lb.HAActive}, {Group: lb.GroupPeer, State: lb.HAStandby, Synced: true}},
			Peer:   lb.HAPeerStatus{Alive: true, Heard: true, Conflict: "the peer is primary too"},
			Stray: []lb.HAPathStatus{{Heartbeat: lb.Heartbeat{Source: netip.MustParseAddr("198.18.0.2"), Destination: netip.MustParseAddr("198.18.0.6")},
				Received: 9}},
			Heartbeats:  []lb.HAPathStatus{{Heartbeat: hb, Sent: 120, Received: 118}},
			Reach:       []lb.HAReachStatus{{Address: netip.MustParseAddr("198.18.0.254"), Reachable: true}, {Address: netip.MustParseAddr("198.18.0.253")}},
			Refused:     map[string]uint64{"replayed": 2},
			Replication: lb.HAReplicationStatus{SentRecords: 100, ReceivedRecords: 95, LastAckRTT: 8 * time.Millisecond},
		}},
		BGP: &dispatcher.BGPStatus{
			BGPStatus: lb.BGPStatus{Running: true, Neighbors: []lb.BGPNeighborStatus{
				{Address: netip.MustParseAddr("198.18.0.254"), State: "established", Sent: 1},
				{Address: netip.MustParseAddr("198.18.0.253"), State: "active"},
			}},
			Clusters: map[netip.Addr]string{vip: "no server takes new connections"},
		},
		Config: cfg, Now: now, ManagerCycles: 42, ManagerCycle: 1500 * time.Microsecond,
		Changes: 7, LastChange: now.Add(-time.Minute),
		EventCounts: map[string]uint64{events.ServerDown: 3, events.ServerUp: 2}, EventScriptsDropped: 5,
		Executor: dispatcher.ExecutorStatus{
			Loaded: true, Attached: true, SweptAt: now.Add(-time.Second),
			Info:        lb.DataplaneInfo{ConnTable: 262144, NATTable: 131072, HalfOpenTable: 16384, AffinityTable: 65536, MaxServices: 4096, MaxBackends: 65536},
			Memory:      []lb.TableMemory{{Name: "conns", Bytes: 1 << 20}, {Name: "maglev_tables", Bytes: 4 << 20, Tables: 2}},
			Connections: 30, AffinityRecords: 4,
			ReturnPools:      map[netip.Addr]lb.DataplanePoolUse{ret: {Size: 64512, Established: 12, HalfOpen: 3}},
			AddressConflicts: map[netip.Addr][]string{ret: {"02:d1:b0:00:00:15", "02:d1:b0:00:00:16"}},
			Reasons:          []lb.ReasonCount{{Reason: "pass_not_vip", Packets: 100, Bytes: 6400}, {Reason: "fwd_tx", Packets: 900, Bytes: 90000}},
			Events:           map[string]uint64{"conn_insert_failed": 1, "affinity_hit": 5},
			Warnings:         []string{"the state cannot be saved (...)"},
		},
		Ports: map[lb.ServiceKey]dispatcher.PortStatus{
			sk80:  {ID: 1, TableSize: 211, Counters: lb.Counters{Packets: 800, Bytes: 80000, NewConns: 40, FinConns: 30}, Active: 10, HalfOpen: 2, AffinityRecords: 4, Change: 12.5, Pushed: true},
			sk443: {ID: 2, TableSize: 0, Alert: true, HalfOpenAlert: true},
		},
		Servers: map[lb.BackendKey]dispatcher.ServerStatus{
			{Service: sk80, Server: s1}:  {ID: 1, State: lb.ServerUp, Weight: 12, Counters: lb.Counters{Packets: 700, Bytes: 70000, NewConns: 35, FinConns: 25}, Active: 9},
			{Service: sk80, Server: s2}:  {ID: 2, State: lb.ServerFailed, Weight: 5, Counters: lb.Counters{Packets: 100, Bytes: 10000, NewConns: 5, FinConns: 5}, Active: 1},
			{Service: sk443, Server: s1}: {ID: 3, State: lb.ServerDown, Weight: 7},
		},
		Advisors: map[health.Key]dispatcher.AdvisorStatus{
			{Advisor: "http@@80", Addr: s1, Port: 80}: {State: lb.AdvisorUp, LoadMS: 25, Probes: 10, Failures: 1},
			{Advisor: "http@@80", Addr: s2, Port: 80}: {State: lb.AdvisorDown, LoadMS: -1, Probes: 10, Failures: 4, Unmade: 3, LastError: "refused"},
		},
		Metrics: map[netip.Addr]dispatcher.MetricStatus{
			s1: {Values: map[string]float64{"cpu": 40, quoteMe: 55}, At: now.Add(-2 * time.Second)},
			s2: {Err: "unavailable"},
		},
		MetricRefused: map[string]int64{"unavailable": 6},
	}
}

// parse parses an exposition with client_golang's own parser.
func parse(t *testing.T, b []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, b)
	}
	return fams
}

// value finds the sample of a family with exactly the given labels.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, lbls map[string]string) (float64, bool) {
	t.Helper()
	mf, ok := fams[name]
	if !ok {
		return 0, false
	}
	for _, m := range mf.Metric {
		if len(m.Label) != len(lbls) {
			continue
		}
		match := true
		for _, lp := range m.Label {
			if lbls[lp.GetName()] != lp.GetValue() {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

func render(t *testing.T, st *dispatcher.Status) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, st, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func srv(port, server string) map[string]string {
	return map[string]string{"cluster": vip.String(), "port": port, "server": server}
}

func port(p string, extra ...string) map[string]string {
	m := map[string]string{"cluster": vip.String(), "port": p}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

func with(m map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// TestExposition checks every family's samples against the snapshot they
// come from.
func TestExposition(t *testing.T) {
	fams := parse(t, render(t, sample()))
	adv1 := map[string]string{"advisor": "http@@80", "server": s1.String(), "port": "80"}
	adv2 := map[string]string{"advisor": "http@@80", "server": s2.String(), "port": "80"}
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
		absent bool
	}{
		{"dlb_executor_loaded", nil, 1, false},
		{"dlb_executor_attached", nil, 1, false},
		{"dlb_executor_packets_total", map[string]string{"reason": "fwd_tx"}, 900, false},
		{"dlb_executor_bytes_total", map[string]string{"reason": "pass_not_vip"}, 6400, false},
		{"dlb_executor_events_total", map[string]string{"event": "affinity_hit"}, 5, false},
		// 30 connection entries, 12 of them NAT connections.
		{"dlb_executor_table_entries", map[string]string{"table": "conn"}, 18, false},
		{"dlb_executor_table_entries", map[string]string{"table": "nat"}, 12, false},
		{"dlb_executor_table_entries", map[string]string{"table": "half_open"}, 3, false},
		{"dlb_executor_table_entries", map[string]string{"table": "affinity"}, 4, false},
		{"dlb_executor_table_entries_limit", map[string]string{"table": "conn"}, 262144, false},
		{"dlb_executor_table_entries_limit", map[string]string{"table": "nat"}, 131072, false},
		{"dlb_executor_table_entries_limit", map[string]string{"table": "half_open"}, 16384, false},
		{"dlb_executor_table_entries_limit", map[string]string{"table": "affinity"}, 65536, false},
		{"dlb_executor_table_memory_bytes", map[string]string{"table": "maglev_tables"}, 4 << 20, false},
		{"dlb_executor_ports_limit", nil, 4095, false},
		{"dlb_executor_servers_limit", nil, 65535, false},
		{"dlb_executor_last_sweep_timestamp_seconds", nil, float64(now.Unix() - 1), false},
		{"dlb_nat_pool_ports", map[string]string{"address": ret.String()}, 64512, false},
		{"dlb_address_conflict_hosts", map[string]string{"address": ret.String()}, 2, false},
		{"dlb_nat_pool_ports_used", map[string]string{"address": ret.String(), "state": "established"}, 12, false},
		{"dlb_nat_pool_ports_used", map[string]string{"address": ret.String(), "state": "half_open"}, 3, false},
		{"dlb_config_ports", nil, 2, false},
		{"dlb_config_servers", nil, 3, false},
		{"dlb_config_changes_total", nil, 7, false},
		{"dlb_config_last_change_timestamp_seconds", nil, float64(now.Unix() - 60), false},
		{"dlb_manager_running", nil, 1, false},
		{"dlb_manager_interval_seconds", nil, 2, false},
		{"dlb_manager_cycles_total", nil, 42, false},
		{"dlb_manager_cycle_duration_seconds", nil, 0.0015, false},
		{"dlb_events_total", map[string]string{"event": "serverDown"}, 3, false},
		{"dlb_events_total", map[string]string{"event": "managerAlert"}, 0, false},
		{"dlb_event_scripts_dropped_total", nil, 5, false},
		{"dlb_port_packets_total", port("80"), 800, false},
		{"dlb_port_bytes_total", port("80"), 80000, false},
		{"dlb_port_new_connections_total", port("80"), 40, false},
		{"dlb_port_finished_connections_total", port("80"), 30, false},
		{"dlb_port_active_connections", port("80"), 10, false},
		{"dlb_port_half_open_connections", port("80"), 2, false},
		{"dlb_port_affinity_records", port("80"), 4, false},
		{"dlb_port_maglev_table_slots", port("80"), 211, false},
		{"dlb_port_maglev_table_slots", port("443"), 0, false},
		{"dlb_port_alert", port("80"), 0, false},
		{"dlb_port_alert", port("443"), 1, false},
		{"dlb_port_half_open_alert", port("443"), 1, false},
		{"dlb_port_manager_change_ratio", port("80"), 0.125, false},
		{"dlb_port_manager_pushed", port("80"), 1, false},
		{"dlb_port_manager_proportion_ratio", port("443", "input", "port"), 0.4, false},
		{"dlb_port_manager_proportion_ratio", port("80", "input", "system"), 0.1, false},
		{"dlb_server_packets_total", srv("80", s1.String()), 700, false},
		{"dlb_server_bytes_total", srv("80", s2.String()), 10000, false},
		{"dlb_server_new_connections_total", srv("80", s1.String()), 35, false},
		{"dlb_server_finished_connections_total", srv("80", s1.String()), 25, false},
		{"dlb_server_active_connections", srv("80", s1.String()), 9, false},
		{"dlb_server_configured_weight", srv("80", s1.String()), 10, false},
		{"dlb_server_weight", srv("80", s1.String()), 12, false},
		{"dlb_server_configured_weight", srv("443", s1.String()), 7, false},
		{"dlb_server_state", with(srv("80", s1.String()), "state", "up"), 1, false},
		{"dlb_server_state", with(srv("80", s2.String()), "state", "failed"), 1, false},
		{"dlb_server_state", with(srv("443", s1.String()), "state", "down"), 1, false},
		// Only the current state has a series.
		{"dlb_server_state", with(srv("80", s2.String()), "state", "up"), 0, true},
		{"dlb_advisor_state", with(adv1, "state", "up"), 1, false},
		{"dlb_advisor_state", with(adv2, "state", "down"), 1, false},
		{"dlb_advisor_load_seconds", adv1, 0.025, false},
		{"dlb_advisor_load_seconds", adv2, 0, true},
		{"dlb_advisor_probes_total", adv2, 10, false},
		{"dlb_advisor_probe_failures_total", adv2, 4, false},
		{"dlb_advisor_probes_unmade_total", adv2, 3, false},
		{"dlb_metric_server_load_ratio", map[string]string{"server": s1.String(), "metric": "cpu"}, 0.4, false},
		{"dlb_metric_server_load_ratio", map[string]string{"server": s1.String(), "metric": quoteMe}, 0.55, false},
		{"dlb_metric_server_report_age_seconds", map[string]string{"server": s1.String()}, 2, false},
		{"dlb_metric_server_report_age_seconds", map[string]string{"server": s2.String()}, 0, true},
		{"dlb_metric_server_stale", map[string]string{"server": s1.String()}, 0, false},
		{"dlb_metric_server_stale", map[string]string{"server": s2.String()}, 1, false},
		{"dlb_metric_server_refused_reports_total", map[string]string{"reason": "unavailable"}, 6, false},
		{"dlb_warnings", nil, 1, false},
		{"dlb_ha_running", nil, 1, false},
		{"dlb_ha_healthy", nil, 1, false},
		{"dlb_ha_state", map[string]string{"group": "local", "state": "active"}, 1, false},
		{"dlb_ha_state", map[string]string{"group": "peer", "state": "standby"}, 1, false},
		{"dlb_ha_state", map[string]string{"group": "peer", "state": "active"}, 0, true},
		{"dlb_ha_synced", map[string]string{"group": "peer"}, 1, false},
		{"dlb_ha_synced", map[string]string{"group": "local"}, 0, false},
		{"dlb_ha_peer_alive", nil, 1, false},
		{"dlb_ha_config_digest_match", nil, 0, false},
		{"dlb_ha_role_conflict", nil, 1, false},
		{"dlb_ha_stray_heartbeats", map[string]string{"source": "198.18.0.2", "destination": "198.18.0.6"}, 1, false},
		{"dlb_ha_reach_target_up", map[string]string{"address": "198.18.0.254"}, 1, false},
		{"dlb_ha_reach_target_up", map[string]string{"address": "198.18.0.253"}, 0, false},
		{"dlb_ha_heartbeats_sent_total", map[string]string{"source": "198.18.0.2", "destination": "198.18.0.4"}, 120, false},
		{"dlb_ha_heartbeats_received_total", map[string]string{"source": "198.18.0.2", "destination": "198.18.0.4"}, 118, false},
		{"dlb_ha_refused_total", map[string]string{"reason": "replayed"}, 2, false},
		{"dlb_ha_replication_records_sent_total", nil, 100, false},
		{"dlb_ha_replication_records_received_total", nil, 95, false},
		{"dlb_ha_replication_records_imported_total", nil, 90, false},
		{"dlb_ha_replication_records_merged_total", map[string]string{"result": "written"}, 7, false},
		{"dlb_ha_replication_records_merged_total", map[string]string{"result": "kept"}, 2, false},
		{"dlb_ha_replication_ack_seconds", nil, 0.008, false},
		{"dlb_bgp_running", nil, 1, false},
		{"dlb_bgp_neighbor_up", map[string]string{"neighbor": "198.18.0.254"}, 1, false},
		{"dlb_bgp_neighbor_up", map[string]string{"neighbor": "198.18.0.253"}, 0, false},
		{"dlb_bgp_neighbor_prefixes_sent", map[string]string{"neighbor": "198.18.0.254"}, 1, false},
		{"dlb_bgp_cluster_announced", map[string]string{"cluster": vip.String()}, 0, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s%v", tt.name, tt.labels), func(t *testing.T) {
			got, ok := value(t, fams, tt.name, tt.labels)
			switch {
			case tt.absent && ok:
				t.Errorf("present with %v, want no such series", got)
			case !tt.absent && !ok:
				t.Errorf("no such series")
			case !tt.absent && got != tt.want:
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	// Every family has exactly the series the package documents: one per
	// server for each server family.
	for _, name := range []string{"dlb_server_packets_total", "dlb_server_state", "dlb_server_weight"} {
		if n := len(fams[name].GetMetric()); n != 3 {
			t.Errorf("%s has %d series, want 3 (one per server of a port)", name, n)
		}
	}
}

// TestBGPClusterAnnounced: a cluster to be announced is 1 while the
// speaker announces it and 0 while it is withdrawn (for any reason); a
// cluster not to be announced has no series.
func TestBGPClusterAnnounced(t *testing.T) {
	on, off, quiet := netip.MustParseAddr("198.18.0.101"), netip.MustParseAddr("198.18.0.102"), netip.MustParseAddr("198.18.0.103")
	cfg := lb.NewConfig()
	for _, a := range []netip.Addr{on, off, quiet} {
		cl := lb.NewCluster(a)
		cl.Announce = a != quiet
		cfg.Clusters = append(cfg.Clusters, cl)
	}
	st := &dispatcher.Status{Config: cfg, Now: now, LastChange: now, BGP: &dispatcher.BGPStatus{
		Clusters: map[netip.Addr]string{on: "", off: "the executor is not attached", quiet: "not to be announced"},
	}}
	fams := parse(t, render(t, st))
	for addr, want := range map[netip.Addr]float64{on: 1, off: 0} {
		if v, ok := value(t, fams, "dlb_bgp_cluster_announced", map[string]string{"cluster": addr.String()}); !ok || v != want {
			t.Errorf("dlb_bgp_cluster_announced{cluster=%q}: %v (present %v), want %v", addr, v, ok, want)
		}
	}
	if _, ok := value(t, fams, "dlb_bgp_cluster_announced", map[string]string{"cluster": quiet.String()}); ok {
		t.Errorf("a cluster not to be announced has a series")
	}
}

// TestExpositionEmpty: a dlbd with no configuration and no executor still
// serves a valid exposition, without the executor's table families.
func TestExpositionEmpty(t *testing.T) {
	st := &dispatcher.Status{Config: lb.NewConfig(), Now: now, LastChange: now}
	b := render(t, st)
	fams := parse(t, b)
	if v, ok := value(t, fams, "dlb_executor_loaded", nil); !ok || v != 0 {
		t.Errorf("dlb_executor_loaded %v %v", v, ok)
	}
	for _, name := range []string{"dlb_executor_table_entries", "dlb_server_state", "dlb_port_alert", "dlb_advisor_state", "dlb_ha_state", "dlb_bgp_running"} {
		if _, ok := fams[name]; ok {
			t.Errorf("%s present without an executor or configuration", name)
		}
	}
	promtoolCheck(t, b)
}

// promtoolCheck runs "promtool check metrics" on an exposition: the
// Prometheus project's own lint of names, types, units and help. It skips
// when promtool is missing on a developer's machine, and fails then when
// DLB_REQUIRE_PRIVILEGED=1 (CI, which installs it with make test-deps).
func promtoolCheck(t *testing.T, b []byte) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("DLB_REQUIRE_PRIVILEGED") == "1" {
			t.Fatal("promtool is missing (make test-deps installs the prometheus package)")
		}
		t.Skip("promtool is missing: make test-deps installs it")
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = bytes.NewReader(b)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestPromtool: promtool finds nothing to complain about in an exposition
// that has every family, dlbd's own Go and process metrics included.
func TestPromtool(t *testing.T) {
	h := NewHandler(fakeSource{st: sample()}, Options{Version: "v1.2.3"})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	b := rec.Body.Bytes()
	fams := parse(t, b)
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", "dlb_server_state"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}
	if v, ok := value(t, fams, "dlb_build_info", map[string]string{"version": "v1.2.3", "goversion": runtimeVersion()}); !ok || v != 1 {
		t.Errorf("dlb_build_info %v %v", v, ok)
	}
	promtoolCheck(t, b)
}

type fakeSource struct {
	st    *dispatcher.Status
	err   error
	delay time.Duration
	calls *atomic.Int32
	q     *dispatcher.Query
}

func (f fakeSource) Status(ctx context.Context, q dispatcher.Query) (*dispatcher.Status, error) {
	if f.calls != nil {
		f.calls.Add(1)
	}
	if f.q != nil {
		*f.q = q
	}
	select {
	case <-time.After(f.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return f.st, f.err
}

// TestHandler: the handler asks for every server with counters, gzips for
// clients that accept it, refuses other methods, and answers 503 when the
// engine cannot give a snapshot.
func TestHandler(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var q dispatcher.Query
	tests := []struct {
		name       string
		src        fakeSource
		method     string
		encoding   string
		wantCode   int
		wantGzip   bool
		wantInBody string
	}{
		{"plain", fakeSource{st: sample(), q: &q}, http.MethodGet, "", 200, false, `dlb_server_state{cluster="198.18.0.100",port="80",server="198.18.0.22",state="failed"} 1`},
		{"gzip", fakeSource{st: sample()}, http.MethodGet, "gzip, deflate", 200, true, "dlb_port_alert"},
		{"gzip refused", fakeSource{st: sample()}, http.MethodGet, "gzip;q=0", 200, false, "dlb_port_alert"},
		{"head", fakeSource{st: sample()}, http.MethodHead, "", 200, false, ""},
		{"post", fakeSource{st: sample()}, http.MethodPost, "", 405, false, "GET"},
		{"engine stopped", fakeSource{err: dispatcher.ErrStopped}, http.MethodGet, "", 503, false, "engine stopped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHandler(tt.src, Options{Logger: quiet, NoProcess: true})
			req := httptest.NewRequest(tt.method, "/metrics", nil)
			if tt.encoding != "" {
				req.Header.Set("Accept-Encoding", tt.encoding)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.wantCode, rec.Body)
			}
			body := rec.Body.Bytes()
			if gz := rec.Header().Get("Content-Encoding") == "gzip"; gz != tt.wantGzip {
				t.Fatalf("gzipped %v, want %v", gz, tt.wantGzip)
			}
			if tt.wantGzip {
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
			}
			if !strings.Contains(string(body), tt.wantInBody) {
				t.Errorf("body lacks %q:\n%.2000s", tt.wantInBody, body)
			}
			if tt.wantCode == 200 && tt.method == http.MethodGet {
				if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
					t.Errorf("content type %q", ct)
				}
				parse(t, body)
			}
		})
	}
	if q.Depth != lb.ServerDepth || q.Target != "" || !q.Counters {
		t.Errorf("query %+v: want every server, with counters", q)
	}
}

// blockingSource holds every Status call until release is closed.
type blockingSource struct {
	st      *dispatcher.Status
	calls   atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func (b *blockingSource) Status(ctx context.Context, _ dispatcher.Query) (*dispatcher.Status, error) {
	b.calls.Add(1)
	b.entered <- struct{}{}
	select {
	case <-b.release:
		return b.st, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestOneScrapeAtATime: while one scrape takes its snapshot, another waits
// for its turn, and gets 503 without costing the engine a snapshot if its
// turn does not come before it gives up; after the first, scrapes go on.
func TestOneScrapeAtATime(t *testing.T) {
	src := &blockingSource{st: sample(), entered: make(chan struct{}, 4), release: make(chan struct{})}
	h := NewHandler(src, Options{NoProcess: true, Timeout: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	scrape := func(ctx context.Context) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil).WithContext(ctx))
		return rec.Code
	}
	first := make(chan int, 1)
	go func() { first <- scrape(context.Background()) }()
	<-src.entered // the first scrape holds its turn, in Status
	// A scraper that gives up after 200 ms (as Prometheus does at its
	// scrape_timeout).
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if code := scrape(short); code != http.StatusServiceUnavailable {
		t.Errorf("a scrape during another got %d, want 503", code)
	}
	if n := src.calls.Load(); n != 1 {
		t.Errorf("%d snapshots taken while one scrape ran, want 1", n)
	}
	close(src.release)
	if code := <-first; code != http.StatusOK {
		t.Errorf("the first scrape got %d", code)
	}
	for range 2 {
		if code := scrape(context.Background()); code != http.StatusOK {
			t.Errorf("a scrape after the others got %d", code)
		}
		<-src.entered
	}
}

// TestEscaping: label values and help texts with quotes, backslashes and
// line feeds are escaped so that they parse back unchanged.
func TestEscaping(t *testing.T) {
	tests := []string{"plain", `a"b`, `a\b`, "a\nb", `\"` + "\n\\n", ""}
	for _, v := range tests {
		var b bytes.Buffer
		tw := newTextWriter(&b)
		tw.family("x_total", "counter", "help with \\ and \n line")
		tw.counter("x_total", labels("v", v), nil, 1)
		tw.flush()
		fams := parse(t, b.Bytes())
		got, ok := value(t, fams, "x_total", map[string]string{"v": v})
		if !ok || got != 1 {
			t.Errorf("%q: did not parse back (%v %v):\n%s", v, got, ok, b.String())
		}
		if h := fams["x_total"].GetHelp(); h != "help with \\ and \n line" {
			t.Errorf("help parsed back as %q", h)
		}
	}
}

// TestWriteError: a failing client stops the writer at its first error.
func TestWriteError(t *testing.T) {
	st := synth(50, 100)
	w := &failAfter{n: 100 << 10}
	err := Write(w, st, nil)
	if !errors.Is(err, errBroken) {
		t.Fatalf("Write: %v, want the writer's error", err)
	}
	if w.writes > 3 {
		t.Errorf("%d writes after the first error", w.writes-1)
	}
}

var errBroken = errors.New("broken pipe")

type failAfter struct {
	n, written, writes int
}

func (f *failAfter) Write(p []byte) (int, error) {
	f.writes++
	if f.written+len(p) > f.n {
		return 0, errBroken
	}
	f.written += len(p)
	return len(p), nil
}

// synth builds a snapshot of ports ports of servers servers each, with
// counters, as Engine.Status returns one at ServerDepth.
func synth(ports, servers int) *dispatcher.Status {
	cfg := lb.NewConfig()
	cl := lb.NewCluster(vip)
	st := &dispatcher.Status{Config: cfg, Now: now, LastChange: now,
		Ports: map[lb.ServiceKey]dispatcher.PortStatus{}, Servers: make(map[lb.BackendKey]dispatcher.ServerStatus, ports*servers)}
	next := uint32(0)
	for p := range ports {
		pt := lb.NewPort(uint16(1001 + p))
		sk := lb.ServiceKey{Cluster: vip, Port: pt.Number}
		for range servers {
			n := 198<<24 | 18<<16 | 8<<8 + next
			a := netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
			next++
			pt.Servers = append(pt.Servers, lb.Server{Address: a, Weight: 10})
			st.Servers[lb.BackendKey{Service: sk, Server: a}] = dispatcher.ServerStatus{ID: next, Weight: 10,
				Counters: lb.Counters{Packets: uint64(next) * 1000, Bytes: uint64(next) * 100000, NewConns: uint64(next) * 10, FinConns: uint64(next) * 9}, Active: uint64(next % 7)}
		}
		cl.Ports = append(cl.Ports, pt)
		st.Ports[sk] = dispatcher.PortStatus{ID: uint32(p + 1), TableSize: lb.TableSizeFor(servers)}
	}
	cfg.Clusters = []lb.Cluster{cl}
	st.Config = cfg
	return st
}

// BenchmarkWrite100k writes the exposition of 1,000 ports x 100 servers
// (what dlbd does per scrape after taking the snapshot), and reports its
// size.
func BenchmarkWrite100k(b *testing.B) {
	st := synth(1000, 100)
	var n countWriter
	b.ReportAllocs()
	for b.Loop() {
		n = 0
		if err := Write(&n, st, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/1e6, "MB/scrape")
}

type countWriter int

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

func runtimeVersion() string { return runtime.Version() }

// TestAlertRules: the example rules in docs/ pass promtool check rules,
// every dlb_ family they use is one the exposition has, and those of
// testdata/alerts_test.yml fire as it expects (promtool test rules).
func TestAlertRules(t *testing.T) {
	const path = "../../docs/dlb-alerts.yml"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fams := parse(t, render(t, sample()))
	names := regexp.MustCompile(`\bdlb_[a-z_]+`).FindAllString(string(b), -1)
	if len(names) == 0 {
		t.Fatal("the rules use no dlb_ family")
	}
	for _, n := range names {
		if _, ok := fams[n]; !ok {
			t.Errorf("the rules use %s, which dlbd does not expose", n)
		}
	}
	promtool := "promtool"
	if _, err := exec.LookPath(promtool); err != nil {
		if os.Getenv("DLB_REQUIRE_PRIVILEGED") == "1" {
			t.Fatal("promtool is missing (make test-deps installs the prometheus package)")
		}
		t.Skip("promtool is missing: make test-deps installs it")
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	// The alerts fire on the series dlbd exposes, and only then.
	cmd := exec.Command(promtool, "test", "rules", "alerts_test.yml")
	cmd.Dir = "testdata"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestCardinality: the series counts the package documents — 8 per server
// of a port, 16 per port — hold.
func TestCardinality(t *testing.T) {
	tests := []struct{ ports, servers int }{{1, 1}, {3, 4}, {10, 25}}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%dx%d", tt.ports, tt.servers), func(t *testing.T) {
			fams := parse(t, render(t, synth(tt.ports, tt.servers)))
			perServer, perPort := 0, 0
			for _, mf := range fams {
				for _, m := range mf.Metric {
					has := map[string]bool{}
					for _, lp := range m.Label {
						has[lp.GetName()] = true
					}
					switch {
					case has["cluster"] && has["port"] && has["server"]:
						perServer++
					case has["cluster"] && has["port"]:
						perPort++
					}
				}
			}
			if want := 8 * tt.ports * tt.servers; perServer != want {
				t.Errorf("%d series per server of a port, want %d", perServer, want)
			}
			if want := 16 * tt.ports; perPort != want {
				t.Errorf("%d series per port, want %d", perPort, want)
			}
		})
	}
}
