package config

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/lb"
)

const (
	vip  = "198.18.0.100"
	vip2 = "198.18.0.101"
)

// op builds an operation; params are name, value pairs ("proportions"
// takes its four values as one space-separated string).
func op(object Object, action Action, target string, params ...string) Op {
	o := Op{Object: object, Action: action, Target: target}
	for i := 0; i+1 < len(params); i += 2 {
		o.Params = append(o.Params, Param{Name: params[i], Values: strings.Fields(params[i+1])})
	}
	return o
}

// base is a started executor, one cluster with ports 80 and 443 and two
// servers on each, and a NAT port 81 with one server behind a router.
func base(t testing.TB) *Editor {
	t.Helper()
	ed, err := NewEditor(lb.NewConfig(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, ed,
		op(Executor, Start, "", "interface", "eth0"),
		op(Executor, Set, "", "nfa", "198.18.0.2"),
		op(Cluster, Add, vip, "configure", "yes"),
		op(Port, Add, vip+"@80"), op(Port, Add, vip+"@443"),
		op(Server, Add, "@80+443@198.18.0.21"), op(Server, Add, "@80+443@198.18.0.22"),
		op(Port, Add, vip+"@81", "method", "nat"),
		op(Server, Add, vip+"@81@198.18.1.11", "returnaddress", "198.18.0.3", "router", "198.18.0.254"),
	)
	return ed
}

func mustApply(t testing.TB, ed *Editor, ops ...Op) Change {
	t.Helper()
	e, err := ed.Prepare(ops)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	ed.Commit(e)
	return e.Change
}

func TestPrepareBuildsTheModel(t *testing.T) {
	ed := base(t)
	cfg := ed.Config()
	if !cfg.Executor.Started || cfg.Executor.Interface != "eth0" || cfg.Executor.NFA != netip.MustParseAddr("198.18.0.2") {
		t.Errorf("executor %+v", cfg.Executor)
	}
	if len(cfg.Clusters) != 1 || !cfg.Clusters[0].Configure {
		t.Fatalf("clusters %+v", cfg.Clusters)
	}
	ps := cfg.Clusters[0].Ports
	if len(ps) != 3 || ps[0].Number != 80 || ps[1].Number != 81 || ps[2].Number != 443 {
		t.Fatalf("ports not in order: %+v", ps)
	}
	if s := ps[1].Servers[0]; s.ReturnAddress != netip.MustParseAddr("198.18.0.3") || s.Weight != lb.DefaultWeightBound {
		t.Errorf("nat server %+v", s)
	}
	if err := Validate(cfg); err != nil {
		t.Errorf("the result does not validate whole: %v", err)
	}
}

func TestPrepareRefusesAndChangesNothing(t *testing.T) {
	cases := []struct {
		name  string
		ops   []Op
		field string
		index int
	}{
		{"port 0", []Op{op(Port, Add, vip+"@0")}, "port", 0},
		{"weight above bound", []Op{op(Server, Set, vip+"@80@198.18.0.21", "weight", "21")}, "weight", 0},
		{"negative weight", []Op{op(Server, Add, vip+"@80@198.18.0.23", "weight", "-1")}, "weight", 0},
		{"weight not a number", []Op{op(Server, Set, vip+"@80@198.18.0.21", "weight", "abc")}, "weight", 0},
		{"VIP equal to NFA", []Op{op(Cluster, Add, "198.18.0.2")}, "cluster", 0},
		{"NFA equal to a VIP", []Op{op(Executor, Set, "", "nfa", vip)}, "cluster", 0},
		{"server equal to VIP", []Op{op(Server, Add, vip+"@80@"+vip)}, "server", 0},
		{"server equal to NFA", []Op{op(Server, Add, vip+"@80@198.18.0.2")}, "server", 0},
		{"VIP equal to a server", []Op{op(Cluster, Add, "198.18.0.21")}, "server", 0},
		{"NFA equal to a router", []Op{op(Executor, Set, "", "nfa", "198.18.0.254")}, "router", 0},
		{"return address equal to a server", []Op{op(Server, Set, vip+"@81@198.18.1.11", "returnaddress", "198.18.0.21")}, "returnaddress", 0},
		{"server equal to a return address", []Op{op(Server, Add, vip+"@80@198.18.0.3")}, "server", 0},
		{"duplicate cluster", []Op{op(Cluster, Add, vip)}, "cluster", 0},
		{"duplicate port", []Op{op(Port, Add, vip+"@80")}, "port", 0},
		{"duplicate server", []Op{op(Server, Add, vip+"@80@198.18.0.21")}, "server", 0},
		{"malformed cluster", []Op{op(Cluster, Add, "198.18.0.300")}, "cluster", 0},
		{"malformed NFA", []Op{op(Executor, Set, "", "nfa", "nfa")}, "nfa", 0},
		{"unknown port", []Op{op(Server, Add, vip+"@82@198.18.0.23")}, "port", 0},
		{"unknown server", []Op{op(Server, Down, vip+"@80@198.18.0.29")}, "server", 0},
		{"bad protocol", []Op{op(Port, Add, vip+"@82", "protocol", "sctp")}, "protocol", 0},
		{"nat server without return address", []Op{op(Server, Add, vip+"@81@198.18.1.12")}, "returnaddress", 0},
		{"return address on a mac port", []Op{op(Server, Set, vip+"@80@198.18.0.21", "returnaddress", "198.18.0.3")}, "returnaddress", 0},
		{"method mac under nat servers", []Op{op(Port, Set, vip+"@81", "method", "mac")}, "returnaddress", 0},
		{"mapport 70000", []Op{op(Server, Set, vip+"@81@198.18.1.11", "mapport", "70000")}, "mapport", 0},
		{"stickymask 33", []Op{op(Port, Set, vip+"@80", "stickymask", "33")}, "stickymask", 0},
		{"crossport to a missing port", []Op{op(Port, Set, vip+"@80", "stickytime", "60", "crossport", "8443")}, "crossport", 0},
		{"crossport without stickytime", []Op{op(Port, Set, vip+"@80", "crossport", "443")}, "crossport", 0},
		{"IPv6 server on an IPv4 cluster", []Op{op(Server, Add, vip+"@80@2001:2::21")}, "server", 0},
		{"weightbound below weights", []Op{op(Port, Set, vip+"@80", "weightbound", "5")}, "weight", 0},
		{"tablesize not a prime", []Op{op(Port, Set, vip+"@80", "tablesize", "1000")}, "tablesize", 0},
		{"tablesize too large", []Op{op(Port, Set, vip+"@80", "tablesize", "70001")}, "tablesize", 0},
		{"link-local IPv6 cluster", []Op{op(Cluster, Add, "fe80::1")}, "cluster", 0},
		{"wildcard matches nothing", []Op{op(Server, Add, "@8080@198.18.0.23")}, "port", 0},
		{"parameter that does not belong", []Op{op(Cluster, Add, vip2, "weight", "1")}, "weight", 0},
		{"unknown object", []Op{op("rule", Add, vip)}, "object", 0},
		{"unknown action", []Op{op(Cluster, Down, vip)}, "action", 0},
		{"second op bad: first not applied", []Op{op(Cluster, Add, vip2), op(Port, Add, vip2+"@0")}, "port", 1},
		// A refusal of the whole batch blames the last operation that
		// added or set the object it names.
		{"batch invalid as a whole", []Op{op(Port, Set, vip+"@80", "crossport", "443"), op(Port, Set, vip+"@443", "stickytime", "9")}, "crossport", 0},
		{"batch invalid as a whole: the server added", []Op{op(Port, Add, vip+"@82"), op(Server, Add, vip+"@82@198.18.0.31"),
			op(Cluster, Add, vip2), op(Port, Set, vip+"@82", "method", "nat")}, "returnaddress", 1},
		{"batch invalid as a whole: the server set last", []Op{op(Server, Add, vip+"@80@198.18.0.31"), op(Cluster, Add, vip2),
			op(Server, Set, vip+"@80@198.18.0.31", "router", "198.18.0.254"), op(Server, Set, vip+"@80@198.18.0.22", "weight", "3")}, "router", 2},
		{"proportions not summing to 100", []Op{op(Cluster, Set, vip, "proportions", "10 10 10 10")}, "proportions", 0},
		{"advisor interval 0", []Op{op(Advisor, Start, "@80", "advisor", "http", "interval", "0")}, "interval", 0},
		{"advisor on a cluster without the port", []Op{op(Advisor, Start, vip+"@8080", "advisor", "http")}, "port", 0},
		{"cluster advisor of every cluster", []Op{op(Advisor, Start, "@80", "advisor", "cluster")}, "advisor", 0},
		{"cluster advisor on a NAT port", []Op{op(Advisor, Start, vip+"@81", "advisor", "cluster")}, "advisor", 0},
		{"NAT port under a cluster advisor", []Op{op(Port, Add, vip+"@82"), op(Advisor, Start, vip+"@82", "advisor", "cluster"),
			op(Port, Set, vip+"@82", "method", "nat")}, "advisor", -1},
		{"empty batch", nil, "ops", -1},
		{"target with a control character", []Op{op(Server, Down, vip+"@80@198.18.0.21\n")}, "target", 0},
		{"target not ASCII", []Op{op(Cluster, Add, "198.18.0.１")}, "target", 0},
		{"parameter name with a newline", []Op{op(Port, Set, vip+"@80", "stickytime\nweight", "1")}, "params", 0},
		{"empty parameter name", []Op{{Object: Port, Action: Set, Target: vip + "@80", Params: []Param{P("", "1")}}}, "params", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ed := base(t)
			before := ed.Config().Clone()
			_, err := ed.Prepare(c.ops)
			if lb.FieldOf(err) != c.field {
				t.Fatalf("error %v, want a refusal naming %q", err, c.field)
			}
			var oe *OpError
			if !errors.As(err, &oe) || oe.Index != c.index {
				t.Errorf("error %#v, want an *OpError for op %d", err, c.index)
			}
			if !reflect.DeepEqual(ed.Config(), before) {
				t.Error("the committed configuration changed")
			}
		})
	}
}

// TestEditsShareWhatTheyDoNotTouch: an edit copies only the port it
// changes; the rest of the configuration is the base's, and the base is
// unchanged.
func TestEditsShareWhatTheyDoNotTouch(t *testing.T) {
	ed := base(t)
	old := ed.Config()
	snapshot := old.Clone()
	e, err := ed.Prepare([]Op{op(Server, Set, vip+"@80@198.18.0.21", "weight", "7")})
	if err != nil {
		t.Fatal(err)
	}
	next := e.Next
	if !reflect.DeepEqual(old, snapshot) {
		t.Fatal("the base configuration was changed")
	}
	op443 := old.Clusters[0].Ports[2].Servers
	np443 := next.Clusters[0].Ports[2].Servers
	if &op443[0] != &np443[0] {
		t.Error("port 443's servers were copied though untouched")
	}
	if &old.Clusters[0].Ports[0].Servers[0] == &next.Clusters[0].Ports[0].Servers[0] {
		t.Error("port 80's servers were written in place")
	}
	want := Change{
		Advisors: map[string]Kind{}, Clusters: map[netip.Addr]Kind{}, Ports: map[lb.ServiceKey]Kind{},
		Servers: map[lb.BackendKey]Kind{{Service: lb.ServiceKey{Cluster: netip.MustParseAddr(vip), Port: 80}, Server: netip.MustParseAddr("198.18.0.21")}: Changed},
	}
	if !reflect.DeepEqual(e.Change, want) {
		t.Errorf("change %+v, want %+v", e.Change, want)
	}
}

func TestClusterRemoveStopsItsAdvisors(t *testing.T) {
	ed := base(t)
	mustApply(t, ed, op(Cluster, Add, vip2), op(Port, Add, vip2+"@443"),
		op(Advisor, Start, vip+"@80", "advisor", "http"), op(Advisor, Start, "@443", "advisor", "connect"),
		op(Advisor, Start, "@81", "advisor", "ping"))
	ch := mustApply(t, ed, op(Cluster, Remove, vip))
	// The advisor of all clusters' port 443 still has vip2's to probe;
	// the one of port 81 has none left.
	if n := len(ed.Config().Advisors); n != 1 || ed.Config().Advisors[0].Name != "connect" {
		t.Errorf("advisors after removing the cluster: %+v", ed.Config().Advisors)
	}
	if ch.Advisors["http@"+vip+"@80"] != Removed || ch.Advisors["ping@@81"] != Removed || len(ch.Servers) != 5 || len(ch.Ports) != 3 {
		t.Errorf("change %+v", ch)
	}
	assertFileLoads(t, ed.Config())
}

// TestPortRemoveStopsIdleAdvisors: removing a port stops the advisors left
// with no port to probe (as "advisor start" and a configuration file
// refuse them), and only those.
func TestPortRemoveStopsIdleAdvisors(t *testing.T) {
	ed := base(t)
	mustApply(t, ed, op(Cluster, Add, vip2), op(Port, Add, vip2+"@443"),
		op(Advisor, Start, vip+"@80", "advisor", "http"), op(Advisor, Start, "@443", "advisor", "connect"),
		op(Advisor, Start, vip+"@443", "advisor", "ssl"))
	ch := mustApply(t, ed, op(Port, Remove, vip+"@80+443"))
	var names []string
	for _, a := range ed.Config().Advisors {
		names = append(names, a.Key())
	}
	if want := []string{"connect@@443"}; !reflect.DeepEqual(names, want) {
		t.Errorf("advisors after removing %s's ports 80 and 443: %v, want %v", vip, names, want)
	}
	if ch.Advisors["http@"+vip+"@80"] != Removed || ch.Advisors["ssl@"+vip+"@443"] != Removed {
		t.Errorf("change %+v", ch)
	}
	assertFileLoads(t, ed.Config())
	mustApply(t, ed, op(Port, Remove, "@443"))
	if len(ed.Config().Advisors) != 0 {
		t.Errorf("advisors with no port 443 left: %+v", ed.Config().Advisors)
	}
	assertFileLoads(t, ed.Config())
}

// assertFileLoads checks that cfg, written as a configuration file ("file
// save"), reads back as cfg.
func assertFileLoads(t *testing.T, cfg lb.Config) {
	t.Helper()
	data, err := MarshalFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ReadFile(data, Options{})
	if err != nil {
		t.Fatalf("the saved configuration does not load: %v\n%s", err, data)
	}
	if !sameConfig(back.Config, cfg) {
		t.Fatalf("the saved configuration loads differently: %+v", Diff(cfg, back.Config))
	}
}

func TestTableSize(t *testing.T) {
	for _, c := range []struct {
		servers int
		want    uint32
	}{{0, 101}, {1, 101}, {2, 211}, {10, 1009}, {100, 10007}, {655, 65519}, {656, 65537}, {5000, 65537}} {
		if got := lb.TableSizeFor(c.servers); got != c.want {
			t.Errorf("TableSizeFor(%d) = %d, want %d", c.servers, got, c.want)
		}
	}
	ed := base(t)
	mustApply(t, ed, op(Port, Set, vip+"@80", "tablesize", "65537"))
	if p := ed.Config().Clusters[0].Ports[0]; p.Table() != 65537 {
		t.Errorf("fixed table size %d", p.Table())
	}
}

// TestEditBlame: a refusal of a prepared batch (by the executor or the
// host) blames the last operation that added or set what it names: a
// server, a port, a cluster, or for a field of the executor's, the last
// executor operation.
func TestEditBlame(t *testing.T) {
	ops := []Op{
		op(Server, Add, vip+"@80@198.18.0.31"),
		op(Executor, Set, "", "nfa", "198.18.0.9"),
		op(Cluster, Add, vip2),
		op(Server, Set, vip+"@80@198.18.0.31", "weight", "3"),
		op(Port, Add, vip2+"@80"),
	}
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"a server set after it was added", lb.Errorf("server", vip+"@80@198.18.0.31", "finding a route: no route"), 3},
		{"a cluster", lb.Errorf("cluster", vip2, "refused"), 2},
		{"a port", lb.Errorf("port", vip2+"@80", "refused"), 4},
		{"the executor's interface", lb.Errorf("interface", "eth9", "no interface \"eth9\""), 1},
		{"an object the batch did not touch", lb.Errorf("server", vip+"@80@198.18.0.21", "refused"), -1},
		{"no object", lb.Errorf("configure", "", "refused"), -1},
		{"not a field's refusal", errors.New("saving the change: disk full"), -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := base(t).Prepare(ops)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.Blame(tc.err); got != tc.want {
				t.Errorf("Blame(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}
