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
	for _, c := range []struct {
		name, target, client string
		exec                 lb.Executor
		field                string // of the refusal; "" for success
	}{
		{"good", "198.18.0.100@80@198.18.0.21", "198.18.0.99", started, ""},
		{"wildcard server", "198.18.0.100@80@", "", started, "target"},
		{"two servers", "198.18.0.100@80@198.18.0.21+198.18.0.22", "", started, "target"},
		{"bad form", "198.18.0.100@80", "", started, "server"},
		{"bad client", "198.18.0.100@80@198.18.0.21", "client1", started, "client"},
		{"IPv6", "2001:2::100@80@2001:2::21", "", started, "target"},
		{"executor stopped", "198.18.0.100@80@198.18.0.21", "", lb.Executor{}, "executor"},
		{"no NFA", "198.18.0.100@80@198.18.0.21", "", lb.Executor{Started: true, Interface: "eth0"}, "nfa"},
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
			want := doctor.Params{Interface: "eth0", Source: netip.MustParseAddr("198.18.0.2"), VIP: netip.MustParseAddr("198.18.0.100"),
				Port: 80, Server: netip.MustParseAddr("198.18.0.21"), Client: netip.MustParseAddr("198.18.0.99"), Timeout: got.Timeout}
			if got != want {
				t.Errorf("params %+v, want %+v", got, want)
			}
			if r.OK || len(r.Checks) != 2 || r.Checks[1].Result != api.CheckFail || r.ServerMAC != "02:00:00:00:00:15" || !strings.Contains(r.Target, "@80@") {
				t.Errorf("report %+v", r)
			}
		})
	}
}
