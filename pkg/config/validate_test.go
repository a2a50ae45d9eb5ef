package config

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/lb"
)

func validConfig() lb.Config {
	c := lb.NewConfig()
	c.Executor.NFA = netip.MustParseAddr("198.18.0.2")
	p := lb.NewPort(80)
	p.Servers = []lb.Server{{Address: netip.MustParseAddr("198.18.0.21"), Weight: 5}}
	cl := lb.NewCluster(netip.MustParseAddr("198.18.0.100"))
	cl.Ports = []lb.Port{p}
	c.Clusters = []lb.Cluster{cl}
	return c
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(c *lb.Config)
		field string // "" = valid
	}{
		{"valid", func(*lb.Config) {}, ""},
		{"cluster equals NFA", func(c *lb.Config) { c.Clusters[0].Address = c.Executor.NFA }, "cluster"},
		{"duplicate cluster", func(c *lb.Config) { c.Clusters = append(c.Clusters, c.Clusters[0]) }, "cluster"},
		{"IPv6 cluster with an IPv4 server", func(c *lb.Config) { c.Clusters[0].Address = netip.MustParseAddr("2001:2::1") }, "server"},
		{"IPv6 cluster and server", func(c *lb.Config) {
			c.Clusters[0].Address = netip.MustParseAddr("2001:2::100")
			c.Clusters[0].Ports[0].Servers[0].Address = netip.MustParseAddr("2001:2::21")
		}, ""},
		{"IPv4 cluster with an IPv6 server", func(c *lb.Config) {
			c.Clusters[0].Ports[0].Servers[0].Address = netip.MustParseAddr("2001:2::21")
		}, "server"},
		{"link-local IPv6 cluster", func(c *lb.Config) { c.Clusters[0].Address = netip.MustParseAddr("fe80::1") }, "cluster"},
		{"IPv4-mapped cluster", func(c *lb.Config) { c.Clusters[0].Address = netip.MustParseAddr("::ffff:198.18.0.100") }, "cluster"},
		{"IPv6 NFA in the IPv4 slot", func(c *lb.Config) { c.Executor.NFA = netip.MustParseAddr("2001:2::2") }, "nfa"},
		{"IPv6 NFA", func(c *lb.Config) { c.Executor.NFA6 = netip.MustParseAddr("2001:2::2") }, ""},
		{"IPv4 NFA in the IPv6 slot", func(c *lb.Config) { c.Executor.NFA6 = netip.MustParseAddr("198.18.0.3") }, "nfa"},
		{"cluster equals IPv6 NFA", func(c *lb.Config) {
			c.Executor.NFA6 = netip.MustParseAddr("2001:2::100")
			c.Clusters[0].Address = c.Executor.NFA6
			c.Clusters[0].Ports[0].Servers[0].Address = netip.MustParseAddr("2001:2::21")
		}, "cluster"},
		{"client gateways", func(c *lb.Config) {
			c.Executor.ClientGateway = netip.MustParseAddr("198.18.0.1")
			c.Executor.ClientGateway6 = netip.MustParseAddr("2001:2::1")
		}, ""},
		{"multicast client gateway", func(c *lb.Config) { c.Executor.ClientGateway = netip.MustParseAddr("224.0.0.1") }, "clientgateway"},
		{"IPv6 client gateway in the IPv4 slot", func(c *lb.Config) { c.Executor.ClientGateway = netip.MustParseAddr("2001:2::1") }, "clientgateway"},
		{"multicast cluster", func(c *lb.Config) { c.Clusters[0].Address = netip.MustParseAddr("224.0.0.1") }, "cluster"},
		{"loopback cluster", func(c *lb.Config) { c.Clusters[0].Address = netip.MustParseAddr("127.0.0.1") }, "cluster"},
		{"unspecified cluster", func(c *lb.Config) { c.Clusters[0].Address = netip.MustParseAddr("0.0.0.0") }, "cluster"},
		{"broadcast NFA", func(c *lb.Config) { c.Executor.NFA = netip.MustParseAddr("255.255.255.255") }, "nfa"},
		{"port 0", func(c *lb.Config) { c.Clusters[0].Ports[0].Number = 0 }, "port"},
		{"duplicate port", func(c *lb.Config) { c.Clusters[0].Ports = append(c.Clusters[0].Ports, c.Clusters[0].Ports[0]) }, "port"},
		{"weight above weightbound", func(c *lb.Config) { c.Clusters[0].Ports[0].Servers[0].Weight = 21 }, "weight"},
		{"advisorrequest at its limit", func(c *lb.Config) {
			c.Clusters[0].Ports[0].Servers[0].AdvisorRequest = "GET /" + strings.Repeat("a", lb.MaxAdvisorText-5)
		}, ""},
		{"advisorrequest over its limit", func(c *lb.Config) {
			c.Clusters[0].Ports[0].Servers[0].AdvisorRequest = "GET /" + strings.Repeat("a", lb.MaxAdvisorText-4)
		}, "advisorrequest"},
		{"advisorresponse over its limit", func(c *lb.Config) {
			c.Clusters[0].Ports[0].Servers[0].AdvisorResponse = strings.Repeat("a", lb.MaxAdvisorText+1)
		}, "advisorresponse"},
		{"weightbound 0", func(c *lb.Config) { c.Clusters[0].Ports[0].WeightBound = 0 }, "weightbound"},
		{"weightbound 101", func(c *lb.Config) { c.Clusters[0].Ports[0].WeightBound = 101 }, "weightbound"},
		{"staletimeout 0", func(c *lb.Config) { c.Clusters[0].Ports[0].StaleTimeout = 0 }, "staletimeout"},
		{"stickytime", func(c *lb.Config) { c.Clusters[0].Ports[0].StickyTime = 5 }, ""},
		{"stickytime above a week", func(c *lb.Config) { c.Clusters[0].Ports[0].StickyTime = lb.MaxTimeout + 1 }, "stickytime"},
		{"stickymask 24", func(c *lb.Config) { c.Clusters[0].Ports[0].StickyMask = 24 }, ""},
		{"stickymask 33 on IPv4", func(c *lb.Config) { c.Clusters[0].Ports[0].StickyMask = 33 }, "stickymask"},
		{"stickymask 64 on IPv6", func(c *lb.Config) {
			c.Clusters[0].Address = netip.MustParseAddr("2001:2::100")
			c.Clusters[0].Ports[0].Servers[0].Address = netip.MustParseAddr("2001:2::21")
			c.Clusters[0].Ports[0].StickyMask = 64
		}, ""},
		{"unknown selection algorithm", func(c *lb.Config) { c.Clusters[0].Ports[0].Selection = 9 }, "selectionalgorithm"},
		{"crossport", func(c *lb.Config) { crossPorts(c, 60, 60) }, ""},
		{"crossport to itself", func(c *lb.Config) { c.Clusters[0].Ports[0].StickyTime, c.Clusters[0].Ports[0].CrossPort = 60, 80 }, "crossport"},
		{"crossport to a missing port", func(c *lb.Config) { c.Clusters[0].Ports[0].StickyTime, c.Clusters[0].Ports[0].CrossPort = 60, 443 }, "crossport"},
		{"crossport without stickytime", func(c *lb.Config) { crossPorts(c, 60, 0) }, "crossport"},
		{"maxhalfopen", func(c *lb.Config) { c.Clusters[0].Ports[0].MaxHalfOpen = 1000 }, ""},
		{"maxhalfopen too high", func(c *lb.Config) { c.Clusters[0].Ports[0].MaxHalfOpen = lb.MaxHalfOpen + 1 }, "maxhalfopen"},
		{"method 0", func(c *lb.Config) { c.Clusters[0].Ports[0].Method = 0 }, "method"},
		{"nat server", func(c *lb.Config) { natServer(c) }, ""},
		{"nat server behind a router, mapport", func(c *lb.Config) {
			s := natServer(c)
			s.Address, s.Router, s.MapPort = netip.MustParseAddr("198.18.1.11"), netip.MustParseAddr("198.18.0.254"), 8080
		}, ""},
		{"nat server without return address", func(c *lb.Config) { natServer(c).ReturnAddress = netip.Addr{} }, "returnaddress"},
		{"nat return address of the wrong family", func(c *lb.Config) { natServer(c).ReturnAddress = netip.MustParseAddr("2001:2::3") }, "returnaddress"},
		{"nat return address is the NFA", func(c *lb.Config) { natServer(c).ReturnAddress = c.Executor.NFA }, "returnaddress"},
		{"nat return address is the VIP", func(c *lb.Config) { natServer(c).ReturnAddress = c.Clusters[0].Address }, "returnaddress"},
		{"nat return address is a server", func(c *lb.Config) { natServer(c).ReturnAddress = netip.MustParseAddr("198.18.0.21") }, "returnaddress"},
		{"nat router is the server", func(c *lb.Config) { s := natServer(c); s.Router = s.Address }, "router"},
		{"nat router is a VIP", func(c *lb.Config) { natServer(c).Router = c.Clusters[0].Address }, "router"},
		{"nat router is a return address", func(c *lb.Config) { s := natServer(c); s.Router = s.ReturnAddress }, "returnaddress"},
		{"mapport on a mac port", func(c *lb.Config) { c.Clusters[0].Ports[0].Servers[0].MapPort = 8080 }, "mapport"},
		{"returnaddress on a mac port", func(c *lb.Config) {
			c.Clusters[0].Ports[0].Servers[0].ReturnAddress = netip.MustParseAddr("198.18.0.3")
		}, "returnaddress"},
		{"router on a mac port", func(c *lb.Config) {
			c.Clusters[0].Ports[0].Servers[0].Router = netip.MustParseAddr("198.18.0.254")
		}, "router"},
		{"fintimeout 0", func(c *lb.Config) { c.Executor.FinTimeout = 0 }, "fintimeout"},
		{"server equals VIP", func(c *lb.Config) { c.Clusters[0].Ports[0].Servers[0].Address = c.Clusters[0].Address }, "server"},
		{"server equals NFA", func(c *lb.Config) { c.Clusters[0].Ports[0].Servers[0].Address = c.Executor.NFA }, "server"},
		{"duplicate server", func(c *lb.Config) {
			p := &c.Clusters[0].Ports[0]
			p.Servers = append(p.Servers, p.Servers[0])
		}, "server"},
		{"started without interface", func(c *lb.Config) { c.Executor.Started = true }, "interface"},
		{"proportions not summing to 100", func(c *lb.Config) { c.Clusters[0].Proportions = lb.Proportions{Active: 50, New: 50, Port: 1} }, "proportions"},
		{"negative proportion", func(c *lb.Config) { c.Clusters[0].Proportions = lb.Proportions{Active: 110, New: -10} }, "proportions"},
		{"manager interval 0", func(c *lb.Config) { c.Manager.Interval = 0 }, "interval"},
		{"smoothing below 1", func(c *lb.Config) { c.Manager.Smoothing = 0.5 }, "smoothing"},
		{"sensitivity above 100", func(c *lb.Config) { c.Manager.Sensitivity = 101 }, "sensitivity"},
		{"refresh 0", func(c *lb.Config) { c.Manager.Refresh = 0 }, "refresh"},
		{"advisor rise 0", func(c *lb.Config) {
			a := lb.NewAdvisor("http", netip.Addr{}, 80)
			a.Rise = 0
			c.Advisors = []lb.Advisor{a}
		}, "rise"},
		{"advisor twice", func(c *lb.Config) {
			a := lb.NewAdvisor("http", netip.Addr{}, 80)
			c.Advisors = []lb.Advisor{a, a}
		}, "advisor"},
		{"exec advisor without program", func(c *lb.Config) {
			a := lb.NewAdvisor("exec", netip.Addr{}, 80)
			a.Mode = "normal"
			c.Advisors = []lb.Advisor{a}
		}, "program"},
		{"advisor on unknown cluster", func(c *lb.Config) {
			c.Advisors = []lb.Advisor{lb.NewAdvisor("http", netip.MustParseAddr("198.18.0.9"), 80)}
		}, "cluster"},
		{"bad metric name", func(c *lb.Config) { c.Clusters[0].Metrics = []string{"cpu load"} }, "metric"},
		{"metric twice", func(c *lb.Config) { c.Clusters[0].Metrics = []string{"cpuload", "cpuload"} }, "metric"},
		{"metric source", func(c *lb.Config) { c.MetricServer.Source = "snmp" }, "source"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.edit(&c)
			err := Validate(c)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if lb.FieldOf(err) != tc.field {
				t.Fatalf("Validate error %v, want a refusal naming %q", err, tc.field)
			}
			if !strings.HasPrefix(err.Error(), tc.field+": ") {
				t.Errorf("message %q does not start with the field", err)
			}
		})
	}
}

// crossPorts adds port 443 to the cluster, sharing affinity with port 80,
// with the given stickytimes.
func crossPorts(c *lb.Config, st80, st443 uint32) {
	p := lb.NewPort(443)
	p.StickyTime = st443
	c.Clusters[0].Ports = append(c.Clusters[0].Ports, p)
	c.Clusters[0].Ports[0].StickyTime, c.Clusters[0].Ports[0].CrossPort = st80, 443
}

// natServer turns port 80 into a lb.NAT port whose server has a return
// address, and returns the server.
func natServer(c *lb.Config) *lb.Server {
	p := &c.Clusters[0].Ports[0]
	p.Method = lb.NAT
	s := &p.Servers[0]
	s.ReturnAddress = netip.MustParseAddr("198.18.0.3")
	return s
}
