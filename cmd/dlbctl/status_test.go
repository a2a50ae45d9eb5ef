package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/api"
)

// TestStatus: dlbctl status sums up the executor, the servers by state,
// the manager, high availability and BGP, lists every warning, and says
// what needs attention; --check exits 1 then, and 0 when nothing does.
func TestStatus(t *testing.T) {
	healthy := func() *fakeEngine {
		return &fakeEngine{
			exec: api.ExecutorReport{Started: true, State: api.ExecutorAttached, Interface: "eth0", AttachedMode: "native",
				Connections: 120, ConnectionCapacity: 262144},
			servers: []api.ServerReport{{Address: "10.0.1.5", State: "up"}, {Address: "10.0.1.6", State: "up"}, {Address: "10.0.1.7", State: "failed"}},
			// The failed server's metric report is stale too, as expected.
			metrics: api.MetricReport{Source: "dlbmetricd", Clusters: []api.MetricCluster{{Cluster: "10.0.0.100", Metrics: []string{"cpuload"}}},
				Servers: []api.MetricServer{{Address: "10.0.1.5"}, {Address: "10.0.1.6"}, {Address: "10.0.1.7", Stale: true, LastError: "connection refused"}}},
			manager: api.ManagerReport{Started: true, Interval: 2, Ports: []api.ManagerPort{{Cluster: "10.0.0.100", Port: 80}}},
			ha: api.HAReport{Configured: true, Running: true, Healthy: true, Role: "backup", DigestMatch: true,
				Groups: []api.HAGroupReport{{Group: "peer", State: "standby"}}, Peer: api.HAPeerReport{Alive: true, Role: "primary"},
				Replication: api.HAReplReport{Synced: true}},
			bgp: api.BGPReport{Configured: true, Running: true, Neighbors: []api.BGPNeighborReport{{Address: "10.0.0.254", State: "established"}},
				Clusters: []api.BGPClusterReport{{Address: "10.0.0.100", Announce: true, Announced: true}, {Address: "10.0.0.101"}}},
			advisors: []api.AdvisorReport{{Name: "http", Cluster: "10.0.0.100", Port: 80, Servers: []api.AdvisorServer{
				{Address: "10.0.1.5", State: "up"}, {Address: "10.0.1.6", State: "up"}, {Address: "10.0.1.7", State: "down"}}}},
		}
	}
	tests := []struct {
		name      string
		change    func(f *fakeEngine)
		lines     []string // in the table, in this order
		attention []string
	}{
		{"all well", func(*fakeEngine) {}, []string{
			"executor           attached to eth0 (native), 120 of 262144 connections",
			"servers            1 port, 3 servers: 1 failed, 2 up",
			"manager            running, every 2 s",
			"advisors           1 advisor probing 3 servers: 1 down, 2 up",
			"metric servers     2 of 3 reporting (dlbmetricd)",
			"high availability  role backup: standby for the peer's clusters (synced); peer primary alive",
			"bgp                1 of 1 sessions up, 1 of 1 clusters announced",
			"warnings           none",
			"attention          nothing needs attention",
		}, nil},
		{"everything wrong", func(f *fakeEngine) {
			f.exec.State, f.exec.Detached = api.ExecutorDetached, "interface eth0 was deleted"
			f.exec.Warnings = []string{"cluster 10.0.0.101 is on no interface of this host", "the state cannot be saved"}
			f.manager.Ports[0].Alert = true
			f.ha.Peer.Alive, f.ha.Replication.Synced, f.ha.Groups[0].State = false, false, "active"
			f.bgp.Neighbors[0].State = "active"
			f.bgp.Clusters[0].Announced, f.bgp.Clusters[0].Reason = false, "no server takes new connections"
		}, []string{
			"executor           detached from eth0, 120 of 262144 connections: interface eth0 was deleted",
			"high availability  role backup: active for the peer's clusters; peer not heard",
			"bgp                0 of 1 sessions up, 0 of 1 clusters announced",
			"warnings           1. cluster 10.0.0.101 is on no interface of this host",
			"                   2. the state cannot be saved",
		}, []string{
			"the executor is started and detached: interface eth0 was deleted (back when eth0 is; to another interface, its tables kept: dlbctl executor start --interface NAME)",
			"no server takes new connections on 10.0.0.100@80",
			"2 warnings",
			"the high-availability peer is not heard",
			"BGP sessions down: 10.0.0.254 active",
			"clusters withdrawn: 10.0.0.100: no server takes new connections",
		}},
		{"metric reports failing", func(f *fakeEngine) {
			for i := range 2 {
				f.metrics.Servers[i].Stale, f.metrics.Servers[i].LastError = true, "reading secret file: no such file"
			}
		}, []string{"metric servers     0 of 3 reporting (dlbmetricd)"}, []string{
			"no metric report from 2 servers that are up: 10.0.1.5: reading secret file: no such file; 10.0.1.6: reading secret file: no such file",
		}},
		{"metric reports not in yet", func(f *fakeEngine) {
			f.metrics.Servers[0].Stale = true
		}, []string{"metric servers     1 of 3 reporting (dlbmetricd)"}, nil},
		{"no metrics", func(f *fakeEngine) { f.metrics = api.MetricReport{Source: "dlbmetricd"} }, nil, nil},
		{"servers this host cannot probe", func(f *fakeEngine) {
			f.advisors = append(f.advisors, api.AdvisorReport{Name: "connect", Port: 443, Servers: []api.AdvisorServer{{Address: "10.0.1.5", State: "up"}}})
			for _, s := range []*api.AdvisorServer{&f.advisors[0].Servers[0], &f.advisors[0].Servers[1], &f.advisors[1].Servers[0]} {
				s.CannotProbe, s.LastError = true, "network unreachable: no route from this host"
			}
		}, []string{"advisors           2 advisors probing 4 servers: 1 down, 3 up; 3 cannot be probed from this host"}, []string{
			"this host cannot probe 3 servers, whose states go unchecked: http 10.0.0.100@80 10.0.1.5: network unreachable: no route from this host; " +
				"http 10.0.0.100@80 10.0.1.6: network unreachable: no route from this host; " +
				"connect @443 10.0.1.5: network unreachable: no route from this host",
		}},
		{"the executor dropping what it should forward", func(f *fakeEngine) {
			f.exec.Dropping, f.exec.DroppingSeconds = map[string]uint64{"drop_no_route": 120, "drop_nat_exhausted": 1}, 5
		}, []string{"ATTENTION          the executor drops what it should forward: 121 packets in the last 5 s: " +
			"1 with no free NAT port on the return address (drop_nat_exhausted), 120 with no route to the client (drop_no_route)"},
			[]string{"the executor drops what it should forward: 121 packets in the last 5 s: " +
				"1 with no free NAT port on the return address (drop_nat_exhausted), 120 with no route to the client (drop_no_route)"}},
		{"no advisors", func(f *fakeEngine) { f.advisors = nil }, nil, nil},
		{"a standby without a copy", func(f *fakeEngine) { f.ha.Replication.Synced = false }, nil,
			[]string{"standing by without a full copy of the active's connection tables"}},
		{"a peer with another configuration", func(f *fakeEngine) { f.ha.DigestMatch = false }, nil,
			[]string{"the high-availability peer serves another configuration"}},
		{"the peer's heartbeats on a path not configured here", func(f *fakeEngine) {
			f.ha.Stray = []api.HAHeartbeatReport{{Source: "10.0.0.4", Destination: "10.0.0.6", Received: 79, SecondsAgo: 0.3}}
		}, nil, []string{"the peer's heartbeats arrive on a path this dispatcher does not have, from 10.0.0.6 to 10.0.0.4: " +
			"give both dispatchers the same paths (here: dlbctl highavailability heartbeat add 10.0.0.4 10.0.0.6; or change it back on the peer)"}},
		{"a peer of the same role", func(f *fakeEngine) { f.ha.Peer.Role, f.ha.Peer.Conflict = f.ha.Role, "the peer is "+f.ha.Role+" too" }, nil,
			[]string{"the high-availability roles conflict (the peer is backup too, this one backup): which dispatcher serves is decided by chance; " +
				"give one the role primary and the other backup, or both both"}},
		{"a heartbeat path silent, a reach target lost", func(f *fakeEngine) {
			f.ha.IntervalMS, f.ha.Count = 500, 4
			f.ha.Heartbeats = []api.HAHeartbeatReport{{Source: "10.0.0.4", Destination: "10.0.0.2", Sent: 90, Received: 90, SecondsAgo: 0.2},
				{Source: "10.0.5.4", Destination: "10.0.5.2", Sent: 90, Received: 40, SecondsAgo: 4.5},
				{Source: "10.0.6.4", Destination: "10.0.6.2", Sent: 90}}
			f.ha.Reach = []api.HAReachReport{{Address: "10.0.0.254", Reachable: true}, {Address: "10.0.0.253"}}
		}, nil, []string{
			"the peer is not heard on heartbeat paths 10.0.5.4 -> 10.0.5.2, 10.0.6.4 -> 10.0.6.2, only on another: one fault more and neither dispatcher hears the other",
			"reach target 10.0.0.253 not reached from this dispatcher: it serves only if the peer reaches no more",
		}},
		{"a heartbeat path heard within twice the dead time", func(f *fakeEngine) {
			f.ha.IntervalMS, f.ha.Count = 500, 4
			f.ha.Heartbeats = []api.HAHeartbeatReport{{Source: "10.0.0.4", Destination: "10.0.0.2", Sent: 90, Received: 90, SecondsAgo: 0.2},
				{Source: "10.0.5.4", Destination: "10.0.5.2", Sent: 90, Received: 40, SecondsAgo: 3.9}}
		}, nil, nil},
		{"neither HA nor BGP", func(f *fakeEngine) {
			f.ha = api.HAReport{}
			f.bgp = api.BGPReport{Clusters: []api.BGPClusterReport{{Address: "10.0.0.100"}}}
		}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := healthy()
			tt.change(f)
			sock := serve(t, f)
			r := dlbctl(sock, "status")
			if r.code != exitOK {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			at := 0
			for _, want := range tt.lines {
				i := strings.Index(r.stdout[at:], want+"\n")
				if i < 0 {
					t.Fatalf("the table lacks %q after byte %d:\n%s", want, at, r.stdout)
				}
				at += i + len(want)
			}
			if tt.name == "no advisors" && strings.Contains(r.stdout, "advisor") {
				t.Errorf("advisors shown though none is started:\n%s", r.stdout)
			}
			if tt.name == "no metrics" && strings.Contains(r.stdout, "metric") {
				t.Errorf("metric servers shown though no metric is configured:\n%s", r.stdout)
			}
			if tt.name == "neither HA nor BGP" && (strings.Contains(r.stdout, "high availability") || strings.Contains(r.stdout, "bgp")) {
				t.Errorf("HA and BGP shown though neither is configured:\n%s", r.stdout)
			}

			r = dlbctl(sock, "status", "--check", "-o", "json")
			var got statusReport
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
				t.Fatalf("status -o json: %v\n%s", err, r.stdout)
			}
			if strings.Join(got.Attention, "|") != strings.Join(tt.attention, "|") {
				t.Errorf("attention\n got %q\nwant %q", got.Attention, tt.attention)
			}
			want := exitOK
			if len(tt.attention) > 0 {
				want = exitFailed
			}
			if r.code != want || (want == exitFailed) != strings.Contains(r.stderr, "needs attention") {
				t.Errorf("status --check: exit %d (stderr %q), want %d", r.code, r.stderr, want)
			}
		})
	}
}

// TestAttentionListsSomeOfMany: the lines naming ports or clusters list
// the first few of thousands, with their count (-o json has them all).
func TestAttentionListsSomeOfMany(t *testing.T) {
	ports, withdrawn := make([]string, 4000), make([]string, 4000)
	for i := range ports {
		a := fmt.Sprintf("198.19.%d.%d", i/250, i%250+1)
		ports[i], withdrawn[i] = a+"@80", a+": no server takes new connections"
	}
	got := attention(statusReport{NoServer: ports, BGP: &statusBGP{Withdrawn: withdrawn}}, api.ExecutorReport{})
	want := []string{
		"no server takes new connections on " + strings.Join(ports[:listedAddresses], ", ") + " and 3992 more (4000 in all: -o json lists them)",
		"clusters withdrawn: " + strings.Join(withdrawn[:listedAddresses], "; ") + " and 3992 more (4000 in all: -o json lists them)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("attention\n%q\nwant\n%q", got, want)
	}
}
