package dispatcher

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dlbproject/dlb/advisors"
	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/lb"
)

var (
	vip  = "198.18.0.100"
	vip2 = "198.18.0.101"
	s1   = netip.MustParseAddr("198.18.0.21")
	s2   = netip.MustParseAddr("198.18.0.22")
	s3   = netip.MustParseAddr("198.18.0.23")
)

// base configures a started executor, one cluster with ports 80 and 443
// and two servers on each.
func base(h *harness) {
	h.t.Helper()
	start := op("executor", "start", "")
	start.Interface = str("eth0")
	nfa := op("executor", "set", "")
	nfa.NFA = str("198.18.0.2")
	cl := op("cluster", "add", vip)
	cl.Configure = yes()
	h.mustApply(start, nfa, cl,
		op("port", "add", vip+"@80"), op("port", "add", vip+"@443"),
		op("server", "add", "@80+443@198.18.0.21"), op("server", "add", "@80+443@198.18.0.22"))
}

func TestApplyBuildsDataplane(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	dp := h.dp.state()
	if dp == nil || len(dp.Services) != 2 || len(dp.Backends) != 4 {
		t.Fatalf("applied %+v", dp)
	}
	if dp.NFA != netip.MustParseAddr("198.18.0.2") {
		t.Errorf("NFA %s", dp.NFA)
	}
	for _, s := range dp.Services {
		if len(s.Table) != 251 || s.TableSum == 0 {
			t.Errorf("service %d table %d slots sum %d", s.ID, len(s.Table), s.TableSum)
		}
		if s.StaleTimeout != lb.DefaultStaleTimeout || s.FinTimeout != lb.DefaultFinTimeout {
			t.Errorf("service %d timeouts %d/%d", s.ID, s.StaleTimeout, s.FinTimeout)
		}
	}
	for _, b := range dp.Backends {
		if !b.AcceptNew || b.MAC == nil || b.Ifindex != 2 {
			t.Errorf("backend %+v", b)
		}
	}
	if h.nif.addresses[netip.MustParseAddr(vip)] != "eth0" {
		t.Errorf("cluster address not configured: %v", h.nif.addresses)
	}
}

func TestWildcardsAndLists(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	h.mustApply(op("cluster", "add", vip2), op("port", "add", vip2+"@80"))
	// @80@server reaches port 80 of both clusters.
	h.mustApply(op("server", "add", "@80@198.18.0.23"))
	c := h.config()
	for _, a := range []string{vip, vip2} {
		cl := c.Cluster(netip.MustParseAddr(a))
		if cl.Port(80).Server(s3) == nil {
			t.Errorf("%s@80 lacks the wildcard-added server", a)
		}
	}
	if c.Cluster(netip.MustParseAddr(vip)).Port(443).Server(s3) != nil {
		t.Error("port 443 got the server")
	}
	// server set on a wildcard server component changes every server.
	w := op("server", "set", vip+"@80@")
	w.Weight = num(3)
	h.mustApply(w)
	c = h.config()
	for _, s := range c.Cluster(netip.MustParseAddr(vip)).Port(80).Servers {
		if s.Weight != 3 {
			t.Errorf("%s weight %d", s.Address, s.Weight)
		}
	}
	h.mustApply(op("server", "remove", "@@198.18.0.23"))
	c = h.config()
	if c.Cluster(netip.MustParseAddr(vip2)).Port(80).Server(s3) != nil {
		t.Error("wildcard remove left the server")
	}
}

func TestDownWeightZeroAndUnresolvedLeaveTheTable(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	w0 := op("server", "set", vip+"@80@198.18.0.22")
	w0.Weight = num(0)
	h.mustApply(op("server", "down", vip+"@443@198.18.0.21"), w0)
	h.nif.setMAC(s3, nil)
	h.mustApply(op("server", "add", vip+"@80@198.18.0.23"))

	dp := h.dp.state()
	accept := map[string]bool{}
	ids := map[uint32]string{}
	for _, b := range dp.Backends {
		accept[b.Address.String()+"/"+string(rune('0'+b.Service))] = b.AcceptNew
		ids[b.ID] = b.Address.String()
	}
	for _, s := range dp.Services {
		in := map[string]bool{}
		for _, id := range s.Table {
			in[ids[id]] = true
		}
		switch s.Port {
		case 80:
			if !in["198.18.0.21"] || in["198.18.0.22"] || in["198.18.0.23"] {
				t.Errorf("port 80 table holds %v, want only .21 (.22 weight 0, .23 unresolved)", in)
			}
		case 443:
			if in["198.18.0.21"] || !in["198.18.0.22"] {
				t.Errorf("port 443 table holds %v, want only .22 (.21 down)", in)
			}
		}
	}
	rep, err := h.e.ServerReports(context.Background(), vip+"@80@198.18.0.23")
	if err != nil || len(rep) != 1 || rep[0].State != api.StateUnresolved {
		t.Fatalf("report %+v %v", rep, err)
	}

	// Once the neighbour resolves, the tick brings the server in.
	h.nif.setMAC(s3, []byte{2, 0, 0, 0, 0, 0x23})
	deadline := time.Now().Add(2 * time.Second)
	for {
		rep, _ = h.e.ServerReports(context.Background(), vip+"@80@198.18.0.23")
		if rep[0].State == api.StateUp {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("server never resolved")
		}
		time.Sleep(10 * time.Millisecond)
	}
	found := false
	for _, b := range h.dp.state().Backends {
		if b.Address == s3 && b.AcceptNew {
			found = true
		}
	}
	if !found {
		t.Error("resolved server not taking connections")
	}
}

// TestRefusalsChangeNothing sends bad operations; each must be refused
// naming the field, and leave the configuration, the state file and the
// executor exactly as they were.
func TestRefusalsChangeNothing(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	h.nif.offLink[netip.MustParseAddr("198.18.9.9")] = true

	with := func(o api.Op, f func(*api.Op)) api.Op { f(&o); return o }
	cases := []struct {
		name  string
		ops   []api.Op
		field string
	}{
		{"unknown cluster", []api.Op{op("port", "add", "198.18.0.199@80")}, "cluster"},
		{"port 0", []api.Op{op("port", "add", vip+"@0")}, "port"},
		{"port 65536", []api.Op{op("port", "add", vip+"@65536")}, "port"},
		{"port not a number", []api.Op{op("port", "add", vip+"@www")}, "port"},
		{"weight above bound", []api.Op{with(op("server", "set", vip+"@80@198.18.0.21"), func(o *api.Op) { o.Weight = num(21) })}, "weight"},
		{"negative weight", []api.Op{with(op("server", "add", vip+"@80@198.18.0.23"), func(o *api.Op) { o.Weight = num(-1) })}, "weight"},
		{"VIP equal to NFA", []api.Op{op("cluster", "add", "198.18.0.2")}, "cluster"},
		{"NFA equal to a VIP", []api.Op{with(op("executor", "set", ""), func(o *api.Op) { o.NFA = str(vip) })}, "cluster"},
		{"server equal to VIP", []api.Op{op("server", "add", vip+"@80@"+vip)}, "server"},
		{"duplicate cluster", []api.Op{op("cluster", "add", vip)}, "cluster"},
		{"duplicate port", []api.Op{op("port", "add", vip+"@80")}, "port"},
		{"duplicate server", []api.Op{op("server", "add", vip+"@80@198.18.0.21")}, "server"},
		{"malformed cluster", []api.Op{op("cluster", "add", "198.18.0.300")}, "cluster"},
		{"malformed server", []api.Op{op("server", "add", vip+"@80@198.18.0")}, "server"},
		{"malformed NFA", []api.Op{with(op("executor", "set", ""), func(o *api.Op) { o.NFA = str("nfa") })}, "nfa"},
		{"unknown port", []api.Op{op("server", "add", vip+"@81@198.18.0.23")}, "port"},
		{"unknown server", []api.Op{op("server", "down", vip+"@80@198.18.0.29")}, "server"},
		{"bad protocol", []api.Op{with(op("port", "add", vip+"@81"), func(o *api.Op) { o.Protocol = str("sctp") })}, "protocol"},
		{"cbr method", []api.Op{with(op("port", "add", vip+"@81"), func(o *api.Op) { o.Method = str("cbr") })}, "method"},
		{"nat server without return address", []api.Op{with(op("port", "add", vip+"@81"), func(o *api.Op) { o.Method = str("nat") }),
			op("server", "add", vip+"@81@198.18.0.23")}, "returnaddress"},
		{"nat router off link", []api.Op{with(op("port", "add", vip+"@81"), func(o *api.Op) { o.Method = str("nat") }),
			with(op("server", "add", vip+"@81@198.18.1.11"), func(o *api.Op) { o.ReturnAddress, o.Router = str("198.18.0.3"), str("198.18.9.9") })}, "router"},
		{"nat server off link without router", []api.Op{with(op("port", "add", vip+"@81"), func(o *api.Op) { o.Method = str("nat") }),
			with(op("server", "add", vip+"@81@198.18.9.9"), func(o *api.Op) { o.ReturnAddress = str("198.18.0.3") })}, "server"},
		{"malformed return address", []api.Op{with(op("server", "set", vip+"@80@198.18.0.21"), func(o *api.Op) { o.ReturnAddress = str("198.18.0") })}, "returnaddress"},
		{"return address on a mac port", []api.Op{with(op("server", "set", vip+"@80@198.18.0.21"), func(o *api.Op) { o.ReturnAddress = str("198.18.0.3") })}, "returnaddress"},
		{"mapport 70000", []api.Op{with(op("server", "set", vip+"@80@198.18.0.21"), func(o *api.Op) { o.MapPort = num(70000) })}, "mapport"},
		{"stickymask 33", []api.Op{with(op("port", "set", vip+"@80"), func(o *api.Op) { o.StickyMask = num(33) })}, "stickymask"},
		{"crossport to a missing port", []api.Op{with(op("port", "set", vip+"@80"), func(o *api.Op) { o.StickyTime, o.CrossPort = num(60), num(8443) })}, "crossport"},
		{"crossport without stickytime", []api.Op{with(op("port", "set", vip+"@80"), func(o *api.Op) { o.CrossPort = num(443) })}, "crossport"},
		{"bad selection algorithm", []api.Op{with(op("port", "set", vip+"@80"), func(o *api.Op) { o.SelectionAlgorithm = str("random") })}, "selectionalgorithm"},
		{"negative maxhalfopen", []api.Op{with(op("port", "set", vip+"@80"), func(o *api.Op) { o.MaxHalfOpen = num(-1) })}, "maxhalfopen"},
		{"malformed client gateway", []api.Op{with(op("executor", "set", ""), func(o *api.Op) { o.ClientGateway = str("gw") })}, "clientgateway"},
		{"client gateway off link", []api.Op{with(op("executor", "set", ""), func(o *api.Op) { o.ClientGateway = str("198.18.9.9") })}, "clientgateway"},
		{"IPv6 server on an IPv4 cluster", []api.Op{op("server", "add", vip+"@80@2001:2::21")}, "server"},
		{"IPv4 server on an IPv6 cluster", []api.Op{op("cluster", "add", "2001:2::100"), op("port", "add", "2001:2::100@80"),
			op("server", "add", "2001:2::100@80@198.18.0.23")}, "server"},
		{"weightbound 0", []api.Op{with(op("port", "set", vip+"@80"), func(o *api.Op) { o.WeightBound = num(0) })}, "weightbound"},
		{"weightbound below weights", []api.Op{with(op("port", "set", vip+"@80"), func(o *api.Op) { o.WeightBound = num(5) })}, "weight"},
		{"staletimeout 0", []api.Op{with(op("port", "set", vip+"@80"), func(o *api.Op) { o.StaleTimeout = num(0) })}, "staletimeout"},
		{"fintimeout negative", []api.Op{with(op("executor", "set", ""), func(o *api.Op) { o.FinTimeout = num(-5) })}, "fintimeout"},
		{"link-local IPv6 cluster", []api.Op{op("cluster", "add", "fe80::1")}, "cluster"},
		{"wildcard matches nothing", []api.Op{op("server", "add", "@8080@198.18.0.23")}, "port"},
		{"unknown interface", []api.Op{op("executor", "stop", ""), with(op("executor", "start", ""), func(o *api.Op) { o.Interface = str("nope0") })}, "interface"},
		{"server off link", []api.Op{op("server", "add", vip+"@80@198.18.9.9")}, "server"},
		{"flag that does not belong", []api.Op{with(op("cluster", "add", vip2), func(o *api.Op) { o.Weight = num(1) })}, "weight"},
		{"unknown object", []api.Op{op("rule", "add", vip)}, "object"},
		{"unknown action", []api.Op{op("cluster", "down", vip)}, "action"},
		{"second op bad: first not applied", []api.Op{op("cluster", "add", vip2), op("port", "add", vip2+"@0")}, "port"},
		{"empty batch", nil, "ops"},
	}
	if len(cases) < 20 {
		t.Fatal("too few cases")
	}
	stateFile := filepath.Join(h.dir, StateFile)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			beforeCfg := h.config()
			beforeFile, _ := os.ReadFile(stateFile)
			beforeDP := h.dp.state()
			beforeApplies := h.dp.applies
			beforeAddrs := len(h.nif.addresses)

			err := h.apply(c.ops...)
			if lb.FieldOf(err) != c.field {
				t.Fatalf("error %v, want a refusal naming %q", err, c.field)
			}
			var oe *OpError
			if !errors.As(err, &oe) {
				t.Fatalf("error %T is not an *OpError", err)
			}
			if !reflect.DeepEqual(h.config(), beforeCfg) {
				t.Error("configuration changed")
			}
			if after, _ := os.ReadFile(stateFile); string(after) != string(beforeFile) {
				t.Error("state file changed")
			}
			if !reflect.DeepEqual(h.dp.state(), beforeDP) && h.dp.applies != beforeApplies {
				// Only an apply that was rolled back to the same state is
				// acceptable.
				t.Errorf("executor state changed: %d applies", h.dp.applies-beforeApplies)
			}
			if len(h.nif.addresses) != beforeAddrs || h.dp.removed {
				t.Error("host addresses or executor changed")
			}
		})
	}
}

func TestDatapathFailureRollsBack(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	before := h.dp.state()
	beforeCfg := h.config()
	h.dp.failNext = errors.New("map full")
	err := h.apply(op("server", "add", vip+"@80@198.18.0.23"))
	if err == nil || !strings.Contains(err.Error(), "map full") {
		t.Fatalf("error %v", err)
	}
	if !reflect.DeepEqual(h.config(), beforeCfg) {
		t.Error("configuration changed")
	}
	if !reflect.DeepEqual(h.dp.state(), before) {
		t.Error("executor not restored to the previous state")
	}
}

func TestStateSurvivesRestart(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	h.mustApply(op("server", "down", vip+"@80@198.18.0.22"))
	before := h.config()
	beforeDP := h.dp.state()
	h.dp.applied = nil
	h.restart()
	if !reflect.DeepEqual(h.config(), before) {
		t.Fatalf("config after restart:\n%+v\nwant\n%+v", h.config(), before)
	}
	after := h.dp.state()
	if after == nil {
		t.Fatal("restarted engine did not re-apply the executor state")
	}
	// Same ids for the same objects, so the pinned maps stay valid.
	ids := func(dp *lb.Dataplane) map[string]uint32 {
		m := map[string]uint32{}
		for _, b := range dp.Backends {
			m[b.Address.String()+"/"+string(rune('0'+b.Service))] = b.ID
		}
		return m
	}
	if !reflect.DeepEqual(ids(after), ids(beforeDP)) {
		t.Errorf("backend ids changed across restart: %v vs %v", ids(after), ids(beforeDP))
	}
}

func TestExecutorStopRemovesAndStartRestores(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	h.mustApply(op("executor", "stop", ""))
	if !h.dp.removed {
		t.Fatal("executor not removed")
	}
	if len(h.nif.addresses) != 0 {
		t.Errorf("cluster addresses left: %v", h.nif.addresses)
	}
	r, err := h.e.ExecutorReport(context.Background())
	if err != nil || r.Started || r.Attached {
		t.Fatalf("report %+v %v", r, err)
	}
	// Configuration changes are accepted while stopped, and applied on start.
	h.mustApply(op("server", "add", vip+"@80@198.18.0.23"))
	h.dp.removed = false
	h.mustApply(op("executor", "start", ""))
	if n := len(h.dp.state().Backends); n != 5 {
		t.Errorf("%d backends after start, want 5", n)
	}
	if h.nif.addresses[netip.MustParseAddr(vip)] != "eth0" {
		t.Error("cluster address not restored")
	}
}

func TestIDsAreStableAndNotReusedAtOnce(t *testing.T) {
	x := newIDs()
	cfg := lb.NewConfig()
	p := lb.NewPort(80)
	p.Servers = []lb.Server{{Address: s1}, {Address: s2}}
	cfg.Clusters = []lb.Cluster{{Address: netip.MustParseAddr(vip), Ports: []lb.Port{p}}}
	if err := x.assign(cfg, 16, 8); err != nil {
		t.Fatal(err)
	}
	first := x.Backends[vip+"@80@198.18.0.21"]
	cfg.Clusters[0].Ports[0].Servers = cfg.Clusters[0].Ports[0].Servers[1:]
	if err := x.assign(cfg, 16, 8); err != nil {
		t.Fatal(err)
	}
	cfg.Clusters[0].Ports[0].Servers = append(cfg.Clusters[0].Ports[0].Servers, lb.Server{Address: s3})
	if err := x.assign(cfg, 16, 8); err != nil {
		t.Fatal(err)
	}
	if x.Backends[vip+"@80@198.18.0.23"] == first {
		t.Error("a freed id was handed out again at once")
	}
	// The table is bounded.
	for i := 0; i < 10; i++ {
		cfg.Clusters[0].Ports[0].Servers = append(cfg.Clusters[0].Ports[0].Servers, lb.Server{Address: netip.AddrFrom4([4]byte{198, 18, 1, byte(i)})})
	}
	if err := x.assign(cfg, 16, 8); lb.FieldOf(err) != "server" {
		t.Errorf("overflow error %v", err)
	}
}

func TestHealthLoadMedian(t *testing.T) {
	up := func(ms int) advisors.Result {
		return advisors.Result{Up: true, Load: time.Duration(ms) * time.Millisecond}
	}
	down := advisors.Result{Up: false}
	tests := []struct {
		name    string
		results []advisors.Result
		want    float64
		ok      bool
	}{
		{"none", nil, 0, false},
		{"one", []advisors.Result{up(7)}, 7, true},
		{"two takes the lower", []advisors.Result{up(7), up(3)}, 3, true},
		{"one outlier ignored", []advisors.Result{up(1), up(40), up(1)}, 1, true},
		{"two slow in a row count", []advisors.Result{up(1), up(200), up(210)}, 200, true},
		{"window slides", []advisors.Result{up(200), up(200), up(200), up(1), up(1)}, 1, true},
		{"down forgets", []advisors.Result{up(200), up(200), down}, 0, false},
		{"after down starts afresh", []advisors.Result{up(200), up(200), down, up(2)}, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h health
			for _, r := range tt.results {
				h.record(r)
			}
			got, ok := h.load()
			if got != tt.want || ok != tt.ok {
				t.Errorf("load() = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestRestartReportsAdoptedConnections: right after a restart, before the
// first periodic sweep (an hour away here), the executor report counts the
// connections of the adopted tables.
func TestRestartReportsAdoptedConnections(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	h.dp.mu.Lock()
	h.dp.swept = lb.SweepResult{Entries: 4242, Active: map[uint32]uint64{}}
	h.dp.mu.Unlock()
	h.restart()
	r, err := h.e.ExecutorReport(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Connections != 4242 {
		t.Errorf("executor report right after restart: %d connections, want 4242", r.Connections)
	}
}
