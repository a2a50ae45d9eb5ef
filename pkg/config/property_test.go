package config

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/dlbproject/dlb/pkg/lb"
)

// A small universe of addresses and ports, so that random edits collide
// often: addresses that are also VIPs, NFAs, return addresses, routers.
var (
	propClusters = []string{"198.18.0.100", "198.18.0.100", "198.18.0.101", "2001:2::100"}
	propPorts    = []string{"80", "81", "443"}
	propServers  = []string{"198.18.0.21", "198.18.0.22", "198.18.0.3", "198.18.0.2", "198.18.0.100", "198.18.0.254", "2001:2::21"}
	propReturns  = []string{"198.18.0.3", "198.18.0.9", "198.18.0.21", "none"}
)

func genOp(t *rapid.T) Op {
	// A wildcard component one time in eight.
	pick := func(from []string, label string) string {
		if rapid.IntRange(0, 7).Draw(t, label+"?") == 0 {
			return ""
		}
		return rapid.SampledFrom(from).Draw(t, label)
	}
	cl, port, srv := pick(propClusters, "cluster"), pick(propPorts, "port"), pick(propServers, "server")
	portT, srvT := cl+"@"+port, cl+"@"+port+"@"+srv
	kind := rapid.IntRange(0, 19).Draw(t, "kind")
	if kind > 13 {
		kind = 6 // server add, more often: the roles need servers
	}
	switch kind {
	case 0:
		return op(Cluster, Add, cl)
	case 1:
		return op(Cluster, Remove, cl)
	case 2:
		return op(Port, Add, portT, "method", rapid.SampledFrom([]string{"mac", "nat"}).Draw(t, "method"))
	case 3:
		return op(Port, Remove, portT)
	case 4:
		return op(Port, Set, portT, "weightbound", fmt.Sprint(rapid.IntRange(5, 20).Draw(t, "bound")),
			"stickytime", rapid.SampledFrom([]string{"0", "60"}).Draw(t, "sticky"),
			"crossport", rapid.SampledFrom([]string{"0", "80", "443"}).Draw(t, "crossport"))
	case 5:
		return op(Port, Set, portT, "method", rapid.SampledFrom([]string{"mac", "nat"}).Draw(t, "method"))
	case 6:
		o := op(Server, Add, srvT, "weight", fmt.Sprint(rapid.IntRange(0, 20).Draw(t, "weight")))
		if rapid.Bool().Draw(t, "nat") {
			o.Params = append(o.Params, P("returnaddress", rapid.SampledFrom(propReturns).Draw(t, "ret")))
			if rapid.Bool().Draw(t, "router") {
				o.Params = append(o.Params, P("router", rapid.SampledFrom(propServers).Draw(t, "via")))
			}
		}
		return o
	case 7:
		return op(Server, Remove, srvT)
	case 8:
		return op(Server, Set, srvT, "weight", fmt.Sprint(rapid.IntRange(0, 20).Draw(t, "weight")))
	case 9:
		return op(Server, Set, srvT, "returnaddress", rapid.SampledFrom(propReturns).Draw(t, "ret"))
	case 10:
		return op(rapid.SampledFrom([]Object{Server, Server, Manager}).Draw(t, "obj"),
			rapid.SampledFrom([]Action{Down, Up}).Draw(t, "act"), srvT)
	case 11:
		return op(Executor, Set, "", "nfa", rapid.SampledFrom(append([]string{"none"}, propServers...)).Draw(t, "nfa"))
	case 12:
		return op(Manager, rapid.SampledFrom([]Action{Quiesce, Unquiesce}).Draw(t, "act"), srvT)
	default:
		return op(Cluster, Set, cl, "configure", rapid.SampledFrom([]string{"yes", "no"}).Draw(t, "configure"))
	}
}

// naiveDiff compares two configurations object by object, looking at
// everything.
func naiveDiff(old, next lb.Config) Change {
	c := Change{Executor: old.Executor != next.Executor, Manager: old.Manager != next.Manager, MetricServer: old.MetricServer != next.MetricServer,
		Advisors: map[string]Kind{}, Clusters: map[netip.Addr]Kind{}, Ports: map[lb.ServiceKey]Kind{}, Servers: map[lb.BackendKey]Kind{}}
	type clusterSettings struct {
		configure bool
		props     lb.Proportions
		metrics   string
	}
	oc, nc := map[netip.Addr]clusterSettings{}, map[netip.Addr]clusterSettings{}
	op, np := map[lb.ServiceKey]lb.Port{}, map[lb.ServiceKey]lb.Port{}
	os, ns := map[lb.BackendKey]lb.Server{}, map[lb.BackendKey]lb.Server{}
	for _, side := range []struct {
		cfg lb.Config
		c   map[netip.Addr]clusterSettings
		p   map[lb.ServiceKey]lb.Port
		s   map[lb.BackendKey]lb.Server
	}{{old, oc, op, os}, {next, nc, np, ns}} {
		for _, cl := range side.cfg.Clusters {
			side.c[cl.Address] = clusterSettings{cl.Configure, cl.Proportions, fmt.Sprint(cl.Metrics)}
			for _, p := range cl.Ports {
				k := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
				for _, s := range p.Servers {
					side.s[lb.BackendKey{Service: k, Server: s.Address}] = s
				}
				p.Servers = nil
				side.p[k] = p
			}
		}
	}
	for k, v := range oc {
		if w, ok := nc[k]; !ok {
			c.Clusters[k] = Removed
		} else if v != w {
			c.Clusters[k] = Changed
		}
	}
	for k := range nc {
		if _, ok := oc[k]; !ok {
			c.Clusters[k] = Added
		}
	}
	for k, v := range op {
		if w, ok := np[k]; !ok {
			c.Ports[k] = Removed
		} else if !reflect.DeepEqual(v, w) {
			c.Ports[k] = Changed
		}
	}
	for k := range np {
		if _, ok := op[k]; !ok {
			c.Ports[k] = Added
		}
	}
	for k, v := range os {
		if w, ok := ns[k]; !ok {
			c.Servers[k] = Removed
		} else if v != w {
			c.Servers[k] = Changed
		}
	}
	for k := range ns {
		if _, ok := os[k]; !ok {
			c.Servers[k] = Added
		}
	}
	diffAdvisors(&c, old.Advisors, next.Advisors)
	return c
}

// TestIncrementalValidationMatchesWhole: for random edits, validating only
// what changed (against the editor's indexes) accepts exactly what
// validating the whole result accepts; Diff finds exactly what a full
// comparison finds; and the committed configuration is never changed by a
// prepared edit.
func TestIncrementalValidationMatchesWhole(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ed, err := NewEditor(lb.NewConfig(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		mustPrepare := func(ops ...Op) {
			e, err := ed.Prepare(ops)
			if err != nil {
				t.Fatalf("setting up: %v", err)
			}
			ed.Commit(e)
		}
		mustPrepare(op(Executor, Set, "", "nfa", "198.18.0.2"),
			op(Cluster, Add, "198.18.0.100+2001:2::100"), op(Port, Add, "@80"), op(Port, Add, "@81", "method", "nat"))
		steps := rapid.IntRange(1, 100).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			o := genOp(t)
			before := ed.Config().Clone()
			d := newDraft(ed.Config())
			if err := ed.apply(d, &o); err != nil {
				continue
			}
			ch := Diff(ed.Config(), d.cfg)
			if want := naiveDiff(ed.Config(), d.cfg); !reflect.DeepEqual(ch, want) {
				t.Fatalf("%+v: Diff\n%+v\nwant\n%+v", o, ch, want)
			}
			inc := validate(d.cfg, ch, ed.uses.with(ed.Config(), d.cfg, ch))
			full := Validate(d.cfg)
			if (inc == nil) != (full == nil) {
				t.Fatalf("%+v: incremental validation says %v, whole says %v", o, inc, full)
			}
			e, err := ed.Prepare([]Op{o})
			if !reflect.DeepEqual(ed.Config(), before) {
				t.Fatalf("%+v: Prepare changed the committed configuration", o)
			}
			if (err == nil) != (full == nil) {
				t.Fatalf("%+v: Prepare says %v, whole validation %v", o, err, full)
			}
			if err == nil {
				ed.Commit(e)
				if fresh := newUses(ed.Config()); !reflect.DeepEqual(fresh.n, ed.uses.n) {
					t.Fatalf("%+v: the editor's address counts drifted from the configuration", o)
				}
			}
		}
	})
}
