package main

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/doctor"
	"github.com/dlbproject/dlb/pkg/lb"
)

func fakeExecutor(ex lb.Executor) executorConfig {
	return func(context.Context) (lb.Executor, error) { return ex, nil }
}

func TestServerChecker(t *testing.T) {
	started := lb.Executor{Started: true, Interface: "eth0", NFA: netip.MustParseAddr("198.18.0.2")}
	dual := started
	dual.NFA6 = netip.MustParseAddr("2001:2::2")
	a := netip.MustParseAddr
	for _, c := range []struct {
		name, target, client string
		exec                 lb.Executor
		field                string // of the refusal; "" for success
		want                 doctor.Params
	}{
		{"good", "198.18.0.100@80@198.18.0.21", "198.18.0.99", started, "",
			doctor.Params{Interface: "eth0", Source: a("198.18.0.2"), VIP: a("198.18.0.100"), Port: 80, Server: a("198.18.0.21"), Client: a("198.18.0.99")}},
		{"IPv6, from the IPv6 NFA", "2001:2::100@80@2001:2::21", "", dual, "",
			doctor.Params{Interface: "eth0", Source: a("2001:2::2"), VIP: a("2001:2::100"), Port: 80, Server: a("2001:2::21")}},
		{"wildcard server", "198.18.0.100@80@", "", started, "target", doctor.Params{}},
		{"two servers", "198.18.0.100@80@198.18.0.21+198.18.0.22", "", started, "target", doctor.Params{}},
		{"bad form", "198.18.0.100@80", "", started, "server", doctor.Params{}},
		{"bad client", "198.18.0.100@80@198.18.0.21", "client1", started, "client", doctor.Params{}},
		{"IPv6 without an IPv6 NFA", "2001:2::100@80@2001:2::21", "", started, "nfa", doctor.Params{}},
		{"two families", "2001:2::100@80@198.18.0.21", "", dual, "target", doctor.Params{}},
		{"executor stopped", "198.18.0.100@80@198.18.0.21", "", lb.Executor{}, "executor", doctor.Params{}},
		{"no NFA", "198.18.0.100@80@198.18.0.21", "", lb.Executor{Started: true, Interface: "eth0"}, "nfa", doctor.Params{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got doctor.Params
			sc := &serverChecker{executor: fakeExecutor(c.exec), run: func(_ context.Context, p doctor.Params) (doctor.Report, error) {
				got = p
				return doctor.Report{Interface: p.Interface, Source: p.Source, ServerMAC: net.HardwareAddr{2, 0, 0, 0, 0, 0x15},
					Checks: []doctor.Check{{Name: doctor.CheckARPServer, Result: doctor.Pass}, {Name: doctor.CheckAccept, Result: doctor.Fail, Fix: "x"}}}, nil
			}}
			r, err := sc.CheckServer(context.Background(), c.target, c.client)
			if c.field != "" {
				if lb.FieldOf(err) != c.field {
					t.Fatalf("got %v, want a refusal naming %s", err, c.field)
				}
				if got.Interface != "" {
					t.Error("probes ran after a refusal")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := c.want
			want.Timeout = got.Timeout
			if got != want {
				t.Errorf("params %+v, want %+v", got, want)
			}
			if r.OK || len(r.Checks) != 2 || r.Checks[1].Result != api.CheckFail || r.ServerMAC != "02:00:00:00:00:15" || !strings.Contains(r.Target, "@80@") {
				t.Errorf("report %+v", r)
			}
		})
	}
}
