package console

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/dispatcher/events"
	"github.com/dlbproject/dlb/pkg/dispatcher/health"
	"github.com/dlbproject/dlb/pkg/lb"
)

var (
	now  = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	vip  = netip.MustParseAddr("198.18.0.100")
	s1   = netip.MustParseAddr("198.18.0.21")
	s2   = netip.MustParseAddr("198.18.0.22")
	sk80 = lb.ServiceKey{Cluster: vip, Port: 80}
)

func config(servers ...netip.Addr) lb.Config {
	cfg := lb.NewConfig()
	cfg.Executor.Started, cfg.Executor.Interface = true, "eth0"
	cl := lb.NewCluster(vip)
	p := lb.NewPort(80)
	for _, a := range servers {
		p.Servers = append(p.Servers, lb.Server{Address: a, Weight: 10})
	}
	cl.Ports = []lb.Port{p}
	cfg.Clusters = []lb.Cluster{cl}
	return cfg
}

// fakeSource answers like the engine: a snapshot at the depth asked.
type fakeSource struct {
	mu       sync.Mutex
	cfg      lb.Config
	err      error
	queries  []dispatcher.Query
	warnings []string
	advisors map[health.Key]dispatcher.AdvisorStatus
	ha       *dispatcher.HAStatus
	bgp      *dispatcher.BGPStatus
	dropping map[string]uint64
}

func (f *fakeSource) Config(context.Context) (lb.Config, error) { return f.cfg, f.err }

func (f *fakeSource) Status(_ context.Context, q dispatcher.Query) (*dispatcher.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, q)
	if f.err != nil {
		return nil, f.err
	}
	st := &dispatcher.Status{Config: f.cfg, Now: now, Changes: 3, LastChange: now.Add(-time.Hour),
		Ports:   map[lb.ServiceKey]dispatcher.PortStatus{sk80: {Counters: lb.Counters{NewConns: 50, Packets: 500}, Active: 4}},
		Servers: map[lb.BackendKey]dispatcher.ServerStatus{},
		Executor: dispatcher.ExecutorStatus{Loaded: true, Attached: true, AttachedMode: lb.XDPGeneric,
			Info:        lb.DataplaneInfo{ConnTable: 1000, NATTable: 500, HalfOpenTable: 64, AffinityTable: 100},
			Connections: 10, ReturnPools: map[netip.Addr]lb.DataplanePoolUse{netip.MustParseAddr("198.18.0.200"): {Size: 100, Established: 4, HalfOpen: 1}},
			Reasons: []lb.ReasonCount{{Reason: "fwd_tx", Packets: 500, Bytes: 50000}},
			Trace:   &dispatcher.TraceStatus{Filter: lb.TraceFilter{Cluster: netip.MustParseAddr("198.18.0.100"), Port: 80}, Since: now.Add(-time.Minute), Packets: 12}},
		RecentEvents: []events.Record{
			{Name: events.ServerUp, At: now.Add(-2 * time.Minute), Env: map[string]string{"DLB_SERVER": s2.String(), "DLB_PORT": "80", "DLB_ADVISOR": "http@@80"}},
			{Name: events.ServerDown, At: now.Add(-time.Minute), Env: map[string]string{"DLB_SERVER": s2.String(), "DLB_PORT": "80", "DLB_ADVISOR": "http@@80", "DLB_REASON": "connection refused"}},
		},
	}
	if q.Warnings {
		st.Executor.Warnings = f.warnings
	}
	if f.dropping != nil { // counted whatever the query
		st.Executor.Dropping, st.Executor.DroppingOver = f.dropping, 5*time.Second
	}
	st.Advisors = f.advisors
	if q.HA {
		st.HA = f.ha
	}
	if q.BGP {
		st.BGP = f.bgp
	}
	if q.Depth >= lb.ServerDepth {
		for _, cl := range f.cfg.Clusters {
			for _, p := range cl.Ports {
				for _, s := range p.Servers {
					state, load := lb.ServerUp, int64(12)
					if s.Address == s2 {
						state, load = lb.ServerFailed, -1
					}
					ss := dispatcher.ServerStatus{State: state, Weight: 8, Reason: "advisor load", PortLoad: load, SystemLoad: -1,
						Active: 2, Counters: lb.Counters{NewConns: 25, Packets: 250}}
					if s.Address == s1 {
						ss.SystemLoad, ss.MAC = 37, net.HardwareAddr{2, 0xd1, 0xb0, 0, 0, 0x15}
					}
					st.Servers[lb.BackendKey{Service: sk80, Server: s.Address}] = ss
				}
			}
		}
	}
	return st, nil
}

func get(t *testing.T, h http.Handler, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec
}

// TestSnapshot: the JSON the page polls has every configured server with
// its weights, state, reason and advisor load, the executor's reasons and
// table fill (NAT entries told apart from MAC ones), and the events newest
// first, described.
func TestSnapshot(t *testing.T) {
	cfg := config(s1, s2)
	// An advisor of port 80 on every cluster, one of another cluster's
	// port 80, and one of port 443: only the first's verdicts are s1's
	// and s2's.
	other := netip.MustParseAddr("198.18.0.101")
	cfg.Advisors = []lb.Advisor{{Name: "http", Port: 80}, {Name: "connect", Cluster: other, Port: 80}, {Name: "ssl", Port: 443}}
	since := now.Add(-90 * time.Second)
	src := &fakeSource{cfg: cfg, advisors: map[health.Key]dispatcher.AdvisorStatus{
		{Advisor: "http@@80", Addr: s1, Port: 80}:                {State: lb.AdvisorUp, LoadMS: 12, Since: since, Probes: 90},
		{Advisor: "http@@80", Addr: s2, Port: 80}:                {State: lb.AdvisorDown, LoadMS: -1, Since: since, LastError: "connection refused", Probes: 90, Failures: 3},
		{Advisor: "connect@198.18.0.101@80", Addr: s1, Port: 80}: {State: lb.AdvisorDown},
		{Advisor: "ssl@@443", Addr: s1, Port: 443}:               {State: lb.AdvisorDown},
	}}
	h := NewHandler(src, Options{Version: "v9"})
	rec := get(t, h, http.MethodGet, "/api/snapshot")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, type %q: %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	var v View
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if v.Version != "v9" || v.Interval != 1000 || !v.ServersListed || v.Servers != 2 || v.Changes != 3 {
		t.Errorf("view %+v", v)
	}
	if len(v.Clusters) != 1 || len(v.Clusters[0].Ports) != 1 {
		t.Fatalf("clusters %+v", v.Clusters)
	}
	p := v.Clusters[0].Ports[0]
	if p.Key != "198.18.0.100@80" || p.NewConnections != 50 || p.Active != 4 || p.ServerCount != 2 || len(p.Servers) != 2 {
		t.Errorf("port %+v", p)
	}
	want := map[string]ServerView{
		"198.18.0.100@80@198.18.0.21": {Key: "198.18.0.100@80@198.18.0.21", Address: "198.18.0.21", Weight: 10, CurrentWeight: 8, State: "up",
			Reason: "advisor load", AdvisorLoadMS: 12, SystemLoad: 37, Active: 2, NewConnections: 25, Packets: 250, MAC: "02:d1:b0:00:00:15",
			Advisors: []VerdictView{{Advisor: "http@@80", State: "up", Since: since, LoadMS: 12, Probes: 90}}},
		"198.18.0.100@80@198.18.0.22": {Key: "198.18.0.100@80@198.18.0.22", Address: "198.18.0.22", Weight: 10, CurrentWeight: 8, State: "failed",
			Reason: "advisor load", AdvisorLoadMS: -1, SystemLoad: -1, Active: 2, NewConnections: 25, Packets: 250,
			Advisors: []VerdictView{{Advisor: "http@@80", State: "down", Since: since, LoadMS: -1, LastError: "connection refused", Probes: 90, Failures: 3}}},
	}
	for _, s := range p.Servers {
		if got, want := mustJSON(t, s), mustJSON(t, want[s.Key]); got != want {
			t.Errorf("server\n got %s\nwant %s", got, want)
		}
	}
	x := v.Executor
	if !x.Attached || x.Mode != "generic" || x.Interface != "eth0" || len(x.Reasons) != 1 || x.Reasons[0].Packets != 500 {
		t.Errorf("executor %+v", x)
	}
	if want := "cluster 198.18.0.100 port 80, since " + now.Add(-time.Minute).UTC().Format(time.RFC3339) + ", 12 packets so far"; x.Trace != want {
		t.Errorf("trace %q, want %q", x.Trace, want)
	}
	fill := map[string]TableFill{}
	for _, tb := range x.Tables {
		fill[tb.Name] = tb
	}
	if fill["connections"].Entries != 6 || fill["NAT connections"].Entries != 4 || fill["NAT half-open"].Entries != 1 || fill["connections"].Limit != 1000 {
		t.Errorf("tables %+v", x.Tables)
	}
	if len(v.Events) != 2 || v.Events[0].Name != events.ServerDown || !v.Events[0].Bad || v.Events[1].Bad ||
		v.Events[0].Text != "server 198.18.0.22 port 80 down (advisor http@@80): connection refused" {
		t.Errorf("events %+v", v.Events)
	}
	if q := src.queries[0]; q.Depth != lb.ServerDepth || !q.Counters {
		t.Errorf("query %+v", q)
	}
}

// TestSnapshotBounded: beyond MaxServers the snapshot is taken at port
// depth and says the servers are not listed.
func TestSnapshotBounded(t *testing.T) {
	src := &fakeSource{cfg: config(s1, s2)}
	h := NewHandler(src, Options{MaxServers: 1})
	var v View
	if err := json.Unmarshal(get(t, h, http.MethodGet, "/api/snapshot").Body.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if v.ServersListed || v.Servers != 2 || v.MaxServers != 1 || len(v.Clusters[0].Ports[0].Servers) != 0 || v.Clusters[0].Ports[0].ServerCount != 2 {
		t.Errorf("view %+v", v)
	}
	if q := src.queries[0]; q.Depth != lb.PortDepth {
		t.Errorf("query %+v: want port depth", q)
	}
}

// TestRoutes: the page and its assets come from the binary with a strict
// content security policy; nothing can be changed; unknown paths are 404;
// an engine that cannot answer makes the snapshot 503.
func TestRoutes(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	tests := []struct {
		name     string
		src      *fakeSource
		method   string
		path     string
		wantCode int
		wantType string
		wantBody string
	}{
		{"page", &fakeSource{cfg: config(s1)}, "GET", "/", 200, "text/html", `<script src="/console.js"`},
		{"script", &fakeSource{cfg: config(s1)}, "GET", "/console.js", 200, "text/javascript", "/api/snapshot"},
		{"style", &fakeSource{cfg: config(s1)}, "GET", "/console.css", 200, "text/css", ".state.failed"},
		{"icon", &fakeSource{cfg: config(s1)}, "GET", "/favicon.svg", 200, "image/svg+xml", "<svg"},
		{"index.html", &fakeSource{cfg: config(s1)}, "GET", "/index.html", 301, "", ""},
		{"unknown", &fakeSource{cfg: config(s1)}, "GET", "/assets/console.js", 404, "", ""},
		{"directory listing", &fakeSource{cfg: config(s1)}, "GET", "/assets/", 404, "", ""},
		{"post", &fakeSource{cfg: config(s1)}, "POST", "/api/snapshot", 405, "", "read-only"},
		{"delete", &fakeSource{cfg: config(s1)}, "DELETE", "/", 405, "", "read-only"},
		{"engine stopped", &fakeSource{err: dispatcher.ErrStopped}, "GET", "/api/snapshot", 503, "", "engine stopped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHandler(tt.src, Options{Logger: quiet})
			rec := get(t, h, tt.method, tt.path)
			if rec.Code != tt.wantCode {
				t.Fatalf("status %d, want %d", rec.Code, tt.wantCode)
			}
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, tt.wantType) {
				t.Errorf("content type %q, want %q", ct, tt.wantType)
			}
			if !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Errorf("body lacks %q", tt.wantBody)
			}
			if tt.wantCode == 200 && !strings.Contains(rec.Header().Get("Content-Security-Policy"), "default-src 'none'") {
				t.Errorf("no content security policy: %q", rec.Header().Get("Content-Security-Policy"))
			}
		})
	}
}

// TestAssetsSelfContained: nothing the page loads comes from elsewhere (it
// must work without internet).
func TestAssetsSelfContained(t *testing.T) {
	for _, name := range []string{"assets/index.html", "assets/console.js", "assets/console.css"} {
		b, err := assets.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"http://", "https://", "//cdn", "@import", "innerHTML", "eval("} {
			s := string(b)
			if name == "assets/console.js" && bad == "http://" {
				s = strings.ReplaceAll(s, "'http://www.w3.org/2000/svg'", "") // the SVG namespace, not a URL loaded
			}
			if strings.Contains(s, bad) {
				t.Errorf("%s contains %q", name, bad)
			}
		}
	}
}

// TestEventText: every event has a readable line, an unknown one its
// variables.
func TestEventText(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
		bad  bool
	}{
		{events.ServerUp, map[string]string{"DLB_SERVER": "198.18.0.21", "DLB_PORT": "80", "DLB_ADVISOR": "http@@80"}, "server 198.18.0.21 port 80 up (advisor http@@80)", false},
		{events.ManagerAlert, map[string]string{"DLB_CLUSTER": "198.18.0.100", "DLB_PORT": "80", "DLB_POLICY": "drop"}, "no server of 198.18.0.100@80 takes new connections (policy drop)", true},
		{events.ManagerClear, map[string]string{"DLB_CLUSTER": "198.18.0.100", "DLB_PORT": "80"}, "198.18.0.100@80 has a server taking new connections again", false},
		{events.HalfOpenAlert, map[string]string{"DLB_CLUSTER": "198.18.0.100", "DLB_PORT": "80", "DLB_HALFOPEN": "900", "DLB_MAXHALFOPEN": "500"}, "198.18.0.100@80: 900 half-open connections, above maxhalfopen 500", true},
		{events.HalfOpenDone, map[string]string{"DLB_CLUSTER": "198.18.0.100", "DLB_PORT": "80", "DLB_HALFOPEN": "3"}, "198.18.0.100@80: half-open connections back at or below maxhalfopen (3)", false},
		{"haTakeover", map[string]string{"DLB_ROLE": "primary", "DLB_PEER": "198.18.0.3"}, "peer=198.18.0.3 role=primary", false},
		{events.ExecutorDetached, map[string]string{"DLB_INTERFACE": "eth0", "DLB_REASON": "interface eth0 was deleted"},
			"the executor's interface eth0 is gone (interface eth0 was deleted): it attaches again when an interface of that name appears, or to another with dlbctl executor start --interface NAME", true},
		{events.ExecutorAttached, map[string]string{"DLB_INTERFACE": "eth0", "DLB_IFINDEX": "7"}, "the executor is attached to eth0 again (ifindex 7)", false},
		{events.GoActive, map[string]string{"DLB_HA_GROUP": "local", "DLB_HA_STATE": "active", "DLB_HA_PREVIOUS": "listen",
			"DLB_HA_REASON": "the peer is not heard", "DLB_HA_ROLE": "primary", "DLB_HA_CLUSTERS": "198.18.0.100 198.18.0.101"},
			"high availability: local group active (was listen): the peer is not heard; clusters 198.18.0.100 198.18.0.101", false},
		{events.GoInOp, map[string]string{"DLB_HA_GROUP": "peer", "DLB_HA_STATE": "noexecutor", "DLB_HA_PREVIOUS": "standby", "DLB_HA_ROLE": "backup"},
			"high availability: peer group noexecutor (was standby)", true},
		{events.HighAvailChange, map[string]string{"DLB_HA_PEER": "no", "DLB_HA_ROLE": "backup"}, "high availability: the peer is not heard", true},
		{events.HighAvailChange, map[string]string{"DLB_HA_PEER": "yes", "DLB_HA_ROLE": "backup"}, "high availability: the peer is heard", false},
		{events.HighAvailChange, map[string]string{"DLB_HA_PEER": "yes", "DLB_HA_ROLE": "backup", "DLB_HA_DIGEST": "00000000000000aa",
			"DLB_HA_PEER_DIGEST": "00000000000000bb"}, "high availability: the peer is heard; its configuration differs (digest 00000000000000bb, this one 00000000000000aa)", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := eventView(events.Record{Name: tt.name, At: now, Env: tt.env})
			if ev.Text != tt.want || ev.Bad != tt.bad {
				t.Errorf("%q bad %v, want %q bad %v", ev.Text, ev.Bad, tt.want, tt.bad)
			}
		})
	}
}

// TestSnapshotHABGP: with high availability and BGP configured the
// snapshot says which groups this dispatcher serves and whether it holds a
// copy of the peer's tables, what the peer says of itself, the reach
// targets, each BGP session and each announced cluster (withdrawn ones
// with the reason); without them it has neither.
func TestSnapshotHABGP(t *testing.T) {
	since := now.Add(-time.Minute)
	peerAddr, router := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.254")
	vip2 := netip.MustParseAddr("198.18.0.101")
	cfg := config(s1)
	cfg.Clusters[0].Announce = true
	cl2 := lb.NewCluster(vip2)
	cl2.Announce = true
	cfg.Clusters = append(cfg.Clusters, cl2, lb.NewCluster(netip.MustParseAddr("198.18.0.102")))
	ha := &dispatcher.HAStatus{
		Config:      lb.HighAvailability{Role: lb.RoleBackup, Recovery: lb.RecoveryAuto, Heartbeats: []lb.Heartbeat{{Destination: peerAddr}}, Reach: []netip.Addr{router}},
		Clusters:    map[lb.HAGroup][]string{lb.GroupPeer: {vip.String(), vip2.String()}},
		DigestMatch: true,
		Node: lb.HAStatus{Running: true, Healthy: true,
			Groups: []lb.HAGroupStatus{{Group: lb.GroupPeer, State: lb.HAStandby, Since: since, Reason: "the peer is active", Synced: true}},
			Peer:   lb.HAPeerStatus{Alive: true, Heard: true, LastHeard: now, Role: lb.RolePrimary, Healthy: true, Reach: 1, Targets: 1},
			Reach:  []lb.HAReachStatus{{Address: router, Reachable: false, LastError: "no reply"}},
			Stray:  []lb.HAPathStatus{{Heartbeat: lb.Heartbeat{Source: netip.MustParseAddr("198.18.0.4"), Destination: netip.MustParseAddr("198.18.0.6")}}}},
	}
	bgp := &dispatcher.BGPStatus{
		BGPStatus: lb.BGPStatus{Running: true, Neighbors: []lb.BGPNeighborStatus{
			{Address: router, State: "established", Since: since, Sent: 1, BFD: "up"},
			{Address: peerAddr, State: "active", LastError: "hold timer expired"}}},
		Clusters: map[netip.Addr]string{vip: "", vip2: "no server takes new connections"},
	}
	src := &fakeSource{cfg: cfg, ha: ha, bgp: bgp}
	var v View
	if err := json.Unmarshal(get(t, NewHandler(src, Options{}), http.MethodGet, "/api/snapshot").Body.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if q := src.queries[0]; !q.HA || !q.BGP {
		t.Errorf("query %+v: want HA and BGP", q)
	}
	if v.HA == nil {
		t.Fatal("no HA in the snapshot")
	}
	wantHA := HAView{Role: "backup", Recovery: "auto", Running: true, Healthy: true,
		Groups: []HAGroupView{{Group: "peer", State: "standby", Since: since, Reason: "the peer is active", Synced: true,
			Clusters: []string{"198.18.0.100", "198.18.0.101"}}},
		Peer:  HAPeerView{Alive: true, Heard: true, LastHeard: now, Role: "primary", Healthy: true, SameConfig: true, Reach: 1, Targets: 1},
		Reach: []ReachView{{Address: "198.18.0.254", Up: false, Error: "no reply"}},
		Stray: []string{"from 198.18.0.6 to 198.18.0.4"}}
	if got, want := mustJSON(t, v.HA), mustJSON(t, wantHA); got != want {
		t.Errorf("HA\n got %s\nwant %s", got, want)
	}
	if v.BGP == nil {
		t.Fatal("no BGP in the snapshot")
	}
	wantBGP := BGPView{Running: true,
		Neighbors: []BGPNeighborView{{Address: "198.18.0.254", State: "established", Since: since, Sent: 1, BFD: "up"},
			{Address: "198.18.0.2", State: "active", LastError: "hold timer expired"}},
		Clusters: []AnnouncementView{{Address: "198.18.0.100", Announced: true},
			{Address: "198.18.0.101", Reason: "no server takes new connections"}}}
	if got, want := mustJSON(t, v.BGP), mustJSON(t, wantBGP); got != want {
		t.Errorf("BGP\n got %s\nwant %s", got, want)
	}

	// Neither configured: neither in the snapshot (not even as null).
	src = &fakeSource{cfg: config(s1), ha: &dispatcher.HAStatus{}, bgp: &dispatcher.BGPStatus{Clusters: map[netip.Addr]string{}}}
	body := get(t, NewHandler(src, Options{}), http.MethodGet, "/api/snapshot").Body.String()
	if strings.Contains(body, `"ha"`) || strings.Contains(body, `"bgp"`) {
		t.Errorf("without high availability or BGP the snapshot has them: %s", body)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWarningsEvery: the first snapshot reads the warnings, the next ones
// within WarningsEvery show those without asking the engine (a warning
// asks the kernel about every cluster address), and once it has passed
// they are read again: a warning gone is gone from the page.
func TestWarningsEvery(t *testing.T) {
	src := &fakeSource{cfg: config(s1), warnings: []string{"the host does not hold 198.18.0.100"}}
	snap := func(h *Handler) View {
		t.Helper()
		var v View
		if err := json.Unmarshal(get(t, h, http.MethodGet, "/api/snapshot").Body.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	// Interval: a snapshot shared for less than a nanosecond, so that each
	// request takes one.
	h := NewHandler(src, Options{WarningsEvery: time.Hour, Interval: time.Nanosecond})
	first := snap(h)
	src.warnings = nil
	second := snap(h)
	if len(src.queries) != 2 || !src.queries[0].Warnings || src.queries[1].Warnings {
		t.Errorf("queries %+v: want warnings asked for the first only", src.queries)
	}
	for i, v := range []View{first, second} {
		if len(v.Warnings) != 1 || v.Warnings[0] != "the host does not hold 198.18.0.100" || v.WarningsAt.IsZero() {
			t.Errorf("snapshot %d: warnings %q at %v", i+1, v.Warnings, v.WarningsAt)
		}
	}

	h = NewHandler(src, Options{WarningsEvery: time.Nanosecond, Interval: time.Nanosecond})
	src.warnings = []string{"w"}
	if v := snap(h); len(v.Warnings) != 1 {
		t.Errorf("warnings %q", v.Warnings)
	}
	src.warnings = nil
	if v := snap(h); len(v.Warnings) != 0 || v.Warnings == nil {
		t.Errorf("a warning gone: the page shows %#v, want an empty list", v.Warnings)
	}
}

// TestDropping: what the executor drops for want of a route or NAT room is
// on every snapshot, not only those that read the warnings, worded as
// dlbctl status words it; nothing dropped, nothing said.
func TestDropping(t *testing.T) {
	src := &fakeSource{cfg: config(s1)}
	h := NewHandler(src, Options{WarningsEvery: time.Hour, Interval: time.Nanosecond})
	snap := func() View {
		t.Helper()
		var v View
		if err := json.Unmarshal(get(t, h, http.MethodGet, "/api/snapshot").Body.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := snap(); v.Dropping != "" || v.DroppingPackets != 0 {
		t.Errorf("nothing dropped: %q, %d packets", v.Dropping, v.DroppingPackets)
	}
	src.dropping = map[string]uint64{"drop_no_route": 120, "drop_nat_exhausted": 1}
	v := snap()
	if src.queries[1].Warnings {
		t.Fatalf("the second snapshot read the warnings: the test would not show drops are read without them")
	}
	want := "the executor drops what it should forward: 121 packets in the last 5 s: " +
		"1 with no free NAT port on the return address (drop_nat_exhausted), 120 with no route to the client (drop_no_route)"
	if v.Dropping != want || v.DroppingPackets != 121 || v.DroppingSeconds != 5 {
		t.Errorf("dropping %q, %d packets over %v s; want %q, 121 over 5", v.Dropping, v.DroppingPackets, v.DroppingSeconds, want)
	}
	src.dropping = nil
	if v := snap(); v.Dropping != "" {
		t.Errorf("drops stopped: the page still says %q", v.Dropping)
	}
}

// TestSnapshotShared: pages polling at once, or within half an interval
// of each other, share one snapshot: the engine takes one however many
// viewers there are; once half an interval has passed, the next request
// takes a new one.
func TestSnapshotShared(t *testing.T) {
	tests := []struct {
		name     string
		interval time.Duration
		want     int
	}{
		{"within half an interval", time.Hour, 1},
		{"each older than half an interval", time.Nanosecond, 21},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &fakeSource{cfg: config(s1, s2)}
			h := NewHandler(src, Options{Interval: tt.interval})
			var wg sync.WaitGroup
			codes := make([]int, 20)
			for i := range codes {
				wg.Go(func() { codes[i] = get(t, h, http.MethodGet, "/api/snapshot").Code })
			}
			wg.Wait()
			if rec := get(t, h, http.MethodGet, "/api/snapshot"); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"198.18.0.100@80"`) {
				t.Errorf("a later request: %d %s", rec.Code, rec.Body)
			}
			for i, c := range codes {
				if c != 200 {
					t.Errorf("request %d: status %d", i, c)
				}
			}
			src.mu.Lock()
			defer src.mu.Unlock()
			if len(src.queries) != tt.want {
				t.Errorf("21 requests took %d snapshots, want %d", len(src.queries), tt.want)
			}
		})
	}
}
