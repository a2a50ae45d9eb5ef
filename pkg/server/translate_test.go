package server

import (
	"reflect"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
)

func ptr[T any](v T) *T { return &v }

// TestOpsReachTheModel: every field of api.Op reaches package config as a
// parameter that the operation which takes it accepts (a field whose name
// did not translate into its keyword would be refused as "does not
// take").
func TestOpsReachTheModel(t *testing.T) {
	const vip = "198.18.0.100"
	base := []config.Op{
		{Object: config.Executor, Action: config.Set, Params: []config.Param{config.P("nfa", "198.18.0.2")}},
		{Object: config.Cluster, Action: config.Add, Target: vip},
		{Object: config.Port, Action: config.Add, Target: vip + "@80"},
		{Object: config.Port, Action: config.Add, Target: vip + "@81", Params: []config.Param{config.P("method", "nat")}},
		{Object: config.Server, Action: config.Add, Target: vip + "@80@198.18.0.21"},
		{Object: config.Server, Action: config.Add, Target: vip + "@81@198.18.1.11",
			Params: []config.Param{config.P("returnaddress", "198.18.0.3")}},
		{Object: config.Advisor, Action: config.Start, Target: "@80", Params: []config.Param{config.P("advisor", "http")}},
		{Object: config.Advisor, Action: config.Start, Target: "@81", Params: []config.Param{config.P("advisor", "exec"),
			config.P("program", "/bin/true")}},
		{Object: config.BGP, Action: config.Set, Params: []config.Param{config.P("asn", "65001"), config.P("routerid", "198.18.0.2")}},
		{Object: config.Neighbor, Action: config.Add, Target: "198.18.0.1", Params: []config.Param{config.P("remoteas", "65000")}},
	}
	cfg, err := config.Apply(lb.NewConfig(), base, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []api.Op{
		{Object: "executor", Action: "start", Interface: ptr("eth0"), XDPMode: ptr("generic")},
		{Object: "executor", Action: "set", NFA: ptr("2001:2::2"), FinTimeout: ptr[int64](30), ClientGateway: ptr("198.18.0.1")},
		{Object: "cluster", Action: "set", Target: vip, Configure: ptr(true), Proportions: []int64{40, 40, 10, 10}},
		{Object: "port", Action: "set", Target: vip + "@80", Protocol: ptr("both"), StickyTime: ptr[int64](60),
			StickyMask: ptr[int64](24), SelectionAlgorithm: ptr("conn+affin"), MaxHalfOpen: ptr[int64](9),
			StaleTimeout: ptr[int64](30), WeightBound: ptr[int64](30), AllDown: ptr("spread"), TableSize: ptr[int64](1009)},
		{Object: "port", Action: "set", Target: vip + "@81", Method: ptr("nat"), CrossPort: ptr[int64](0)},
		{Object: "server", Action: "set", Target: vip + "@80@198.18.0.21", Weight: ptr[int64](3), FixedWeight: ptr(false),
			AdvisorRequest: ptr("GET / HTTP/1.0"), AdvisorResponse: ptr("200")},
		{Object: "server", Action: "set", Target: vip + "@81@198.18.1.11", MapPort: ptr[int64](8080),
			ReturnAddress: ptr("198.18.0.4"), Router: ptr("198.18.0.254")},
		{Object: "manager", Action: "set", Interval: ptr(0.5), Refresh: ptr[int64](3), Smoothing: ptr(2.5), Sensitivity: ptr(7.5)},
		{Object: "manager", Action: "quiesce", Target: "198.18.0.21", Now: ptr(true)},
		{Object: "advisor", Action: "set", Target: "@80", Advisor: ptr("http"), Interval: ptr(1.5), ConnectTimeout: ptr(0.5),
			ReceiveTimeout: ptr(0.5), Retries: ptr[int64](1), Rise: ptr[int64](3), Fall: ptr[int64](4)},
		{Object: "advisor", Action: "set", Target: "@81", Advisor: ptr("exec"), Program: ptr("/bin/false"),
			Args: []string{"-x", "two words"}, Mode: ptr("replace")},
		{Object: "metric", Action: "add", Target: vip, Metrics: []string{"cpuload", "memload"}},
		{Object: "metric", Action: "set", Source: ptr("prometheus"), MetricPort: ptr[int64](9101), SecretFile: ptr("/etc/s"),
			Path: ptr("/m")},
		{Object: "backup", Action: "add", Role: ptr("primary"), Recovery: ptr("auto"), HAPort: ptr[int64](7000)},
		{Object: "heartbeat", Action: "add", Target: "198.18.0.4", Source: ptr("198.18.0.2"), SecretFile: ptr("/etc/ha"),
			Interval: ptr(250.0), Count: ptr[int64](5)},
		{Object: "reach", Action: "add", Target: "198.18.0.254"},
		{Object: "cluster", Action: "set", Target: vip, PrimaryHost: ptr("198.18.0.2")},
		{Object: "bgp", Action: "set", ASN: ptr[int64](65002), RouterID: ptr("198.18.0.4"), ListenPort: ptr[int64](179)},
		{Object: "neighbor", Action: "set", Target: "198.18.0.1", RemoteAS: ptr[int64](65010), PasswordFile: ptr("/etc/dlb/pw"),
			HoldTime: ptr[int64](30), Multihop: ptr[int64](2), NeighborPort: ptr[int64](1179), BFD: ptr(true)},
		{Object: "cluster", Action: "set", Target: vip, Announce: ptr(true), Communities: []string{"65000:1", "no-export"},
			MED: ptr[int64](10)},
	}
	// Every wire field is covered by the table.
	covered := map[string]bool{}
	for _, o := range tests {
		v := reflect.ValueOf(o)
		for i := 0; i < v.NumField(); i++ {
			if f := v.Field(i); (f.Kind() == reflect.Pointer || f.Kind() == reflect.Slice) && !f.IsNil() {
				covered[v.Type().Field(i).Name] = true
			}
		}
	}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[api.Op]()) {
		if f.Type.Kind() != reflect.String && !covered[f.Name] {
			t.Errorf("api.Op.%s is not covered by the table", f.Name)
		}
	}
	for _, o := range tests {
		t.Run(o.Object+" "+o.Action, func(t *testing.T) {
			if _, err := config.Apply(cfg, Ops([]api.Op{o}), config.Options{}); err != nil {
				t.Errorf("refused: %v (params %+v)", err, Ops([]api.Op{o})[0].Params)
			}
		})
	}
}

// TestOpsValues: values reach the model as their text.
func TestOpsValues(t *testing.T) {
	got := Ops([]api.Op{{Object: "server", Action: "add", Target: "t", Weight: ptr[int64](-3), FixedWeight: ptr(true),
		AdvisorRequest: ptr("a b"), Proportions: []int64{1, 2}, Interval: ptr(0.1)}})[0]
	want := []config.Param{config.P("proportions", "1", "2"), config.P("weight", "-3"), config.P("fixedweight", "yes"),
		config.P("advisorrequest", "a b"), config.P("interval", "0.1")}
	if got.Object != config.Server || got.Action != config.Add || got.Target != "t" || !reflect.DeepEqual(got.Params, want) {
		t.Errorf("got %+v\nwant params %+v", got, want)
	}
	if kw := Ops([]api.Op{{XDPMode: ptr("native")}})[0].Params[0].Name; !strings.Contains(kw, "xdp-mode") {
		t.Errorf("xdp mode keyword %q", kw)
	}
}
