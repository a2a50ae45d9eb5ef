package lb

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestParseTarget(t *testing.T) {
	cases := []struct {
		in      string
		depth   Depth
		want    Target
		field   string // non-empty: want a *FieldError naming it
		wantStr string
	}{
		{in: "", depth: ServerDepth, want: Target{}},
		{in: "198.18.0.100", depth: ClusterDepth, want: Target{Clusters: addrs("198.18.0.100")}, wantStr: "198.18.0.100"},
		{in: "198.18.0.100+198.18.0.101", depth: ClusterDepth, want: Target{Clusters: addrs("198.18.0.100", "198.18.0.101")}},
		{in: "198.18.0.100@80", depth: PortDepth, want: Target{Clusters: addrs("198.18.0.100"), Ports: []uint16{80}}},
		{in: "198.18.0.100@80+443", depth: PortDepth, want: Target{Clusters: addrs("198.18.0.100"), Ports: []uint16{80, 443}}},
		{in: "@80", depth: PortDepth, want: Target{Ports: []uint16{80}}},
		{in: "@80@198.18.0.21", depth: ServerDepth, want: Target{Ports: []uint16{80}, Servers: addrs("198.18.0.21")}, wantStr: "@80@198.18.0.21"},
		{in: "198.18.0.100@@198.18.0.21", depth: ServerDepth, want: Target{Clusters: addrs("198.18.0.100"), Servers: addrs("198.18.0.21")}},
		{in: "@@", depth: ServerDepth, want: Target{}},
		{in: "198.18.0.100@80", depth: ClusterDepth, field: "cluster"},
		{in: "198.18.0.100@80@1.2.3.4", depth: PortDepth, field: "port"},
		{in: "198.18.0.100@80", depth: ServerDepth, field: "server"},
		{in: "198.18.0.x", depth: ClusterDepth, field: "cluster"},
		{in: "198.18.0.100@http", depth: PortDepth, field: "port"},
		{in: "198.18.0.100@0", depth: PortDepth, field: "port"},
		{in: "198.18.0.100@65536", depth: PortDepth, field: "port"},
		{in: "198.18.0.100@-1", depth: PortDepth, field: "port"},
		{in: "198.18.0.100@80@nope", depth: ServerDepth, field: "server"},
		{in: "198.18.0.100@80+@198.18.0.21", depth: ServerDepth, field: "port"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseTarget(c.in, c.depth)
			if c.field != "" {
				if FieldOf(err) != c.field {
					t.Fatalf("ParseTarget(%q) error %v, want a refusal naming %q", c.in, err, c.field)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTarget(%q): %v", c.in, err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("ParseTarget(%q) = %+v, want %+v", c.in, got, c.want)
			}
			if c.wantStr != "" && got.String(c.depth) != c.wantStr {
				t.Errorf("String() = %q, want %q", got.String(c.depth), c.wantStr)
			}
		})
	}
}

func validConfig() Config {
	c := NewConfig()
	c.Executor.NFA = netip.MustParseAddr("198.18.0.2")
	p := NewPort(80)
	p.Servers = []Server{{Address: netip.MustParseAddr("198.18.0.21"), Weight: 5}}
	cl := NewCluster(netip.MustParseAddr("198.18.0.100"))
	cl.Ports = []Port{p}
	c.Clusters = []Cluster{cl}
	return c
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(c *Config)
		field string // "" = valid
	}{
		{"valid", func(*Config) {}, ""},
		{"cluster equals NFA", func(c *Config) { c.Clusters[0].Address = c.Executor.NFA }, "cluster"},
		{"duplicate cluster", func(c *Config) { c.Clusters = append(c.Clusters, c.Clusters[0]) }, "cluster"},
		{"IPv6 cluster with an IPv4 server", func(c *Config) { c.Clusters[0].Address = netip.MustParseAddr("2001:2::1") }, "server"},
		{"IPv6 cluster and server", func(c *Config) {
			c.Clusters[0].Address = netip.MustParseAddr("2001:2::100")
			c.Clusters[0].Ports[0].Servers[0].Address = netip.MustParseAddr("2001:2::21")
		}, ""},
		{"IPv4 cluster with an IPv6 server", func(c *Config) {
			c.Clusters[0].Ports[0].Servers[0].Address = netip.MustParseAddr("2001:2::21")
		}, "server"},
		{"link-local IPv6 cluster", func(c *Config) { c.Clusters[0].Address = netip.MustParseAddr("fe80::1") }, "cluster"},
		{"IPv4-mapped cluster", func(c *Config) { c.Clusters[0].Address = netip.MustParseAddr("::ffff:198.18.0.100") }, "cluster"},
		{"IPv6 NFA in the IPv4 slot", func(c *Config) { c.Executor.NFA = netip.MustParseAddr("2001:2::2") }, "nfa"},
		{"IPv6 NFA", func(c *Config) { c.Executor.NFA6 = netip.MustParseAddr("2001:2::2") }, ""},
		{"IPv4 NFA in the IPv6 slot", func(c *Config) { c.Executor.NFA6 = netip.MustParseAddr("198.18.0.3") }, "nfa"},
		{"cluster equals IPv6 NFA", func(c *Config) {
			c.Executor.NFA6 = netip.MustParseAddr("2001:2::100")
			c.Clusters[0].Address = c.Executor.NFA6
			c.Clusters[0].Ports[0].Servers[0].Address = netip.MustParseAddr("2001:2::21")
		}, "cluster"},
		{"client gateways", func(c *Config) {
			c.Executor.ClientGateway = netip.MustParseAddr("198.18.0.1")
			c.Executor.ClientGateway6 = netip.MustParseAddr("2001:2::1")
		}, ""},
		{"multicast client gateway", func(c *Config) { c.Executor.ClientGateway = netip.MustParseAddr("224.0.0.1") }, "clientgateway"},
		{"IPv6 client gateway in the IPv4 slot", func(c *Config) { c.Executor.ClientGateway = netip.MustParseAddr("2001:2::1") }, "clientgateway"},
		{"multicast cluster", func(c *Config) { c.Clusters[0].Address = netip.MustParseAddr("224.0.0.1") }, "cluster"},
		{"loopback cluster", func(c *Config) { c.Clusters[0].Address = netip.MustParseAddr("127.0.0.1") }, "cluster"},
		{"unspecified cluster", func(c *Config) { c.Clusters[0].Address = netip.MustParseAddr("0.0.0.0") }, "cluster"},
		{"broadcast NFA", func(c *Config) { c.Executor.NFA = netip.MustParseAddr("255.255.255.255") }, "nfa"},
		{"port 0", func(c *Config) { c.Clusters[0].Ports[0].Number = 0 }, "port"},
		{"duplicate port", func(c *Config) { c.Clusters[0].Ports = append(c.Clusters[0].Ports, c.Clusters[0].Ports[0]) }, "port"},
		{"weight above weightbound", func(c *Config) { c.Clusters[0].Ports[0].Servers[0].Weight = 21 }, "weight"},
		{"weightbound 0", func(c *Config) { c.Clusters[0].Ports[0].WeightBound = 0 }, "weightbound"},
		{"weightbound 101", func(c *Config) { c.Clusters[0].Ports[0].WeightBound = 101 }, "weightbound"},
		{"staletimeout 0", func(c *Config) { c.Clusters[0].Ports[0].StaleTimeout = 0 }, "staletimeout"},
		{"stickytime", func(c *Config) { c.Clusters[0].Ports[0].StickyTime = 5 }, ""},
		{"stickytime above a week", func(c *Config) { c.Clusters[0].Ports[0].StickyTime = MaxTimeout + 1 }, "stickytime"},
		{"stickymask 24", func(c *Config) { c.Clusters[0].Ports[0].StickyMask = 24 }, ""},
		{"stickymask 33 on IPv4", func(c *Config) { c.Clusters[0].Ports[0].StickyMask = 33 }, "stickymask"},
		{"stickymask 64 on IPv6", func(c *Config) {
			c.Clusters[0].Address = netip.MustParseAddr("2001:2::100")
			c.Clusters[0].Ports[0].Servers[0].Address = netip.MustParseAddr("2001:2::21")
			c.Clusters[0].Ports[0].StickyMask = 64
		}, ""},
		{"unknown selection algorithm", func(c *Config) { c.Clusters[0].Ports[0].Selection = 9 }, "selectionalgorithm"},
		{"crossport", func(c *Config) { crossPorts(c, 60, 60) }, ""},
		{"crossport to itself", func(c *Config) { c.Clusters[0].Ports[0].StickyTime, c.Clusters[0].Ports[0].CrossPort = 60, 80 }, "crossport"},
		{"crossport to a missing port", func(c *Config) { c.Clusters[0].Ports[0].StickyTime, c.Clusters[0].Ports[0].CrossPort = 60, 443 }, "crossport"},
		{"crossport without stickytime", func(c *Config) { crossPorts(c, 60, 0) }, "crossport"},
		{"maxhalfopen", func(c *Config) { c.Clusters[0].Ports[0].MaxHalfOpen = 1000 }, ""},
		{"maxhalfopen too high", func(c *Config) { c.Clusters[0].Ports[0].MaxHalfOpen = MaxHalfOpen + 1 }, "maxhalfopen"},
		{"method 0", func(c *Config) { c.Clusters[0].Ports[0].Method = 0 }, "method"},
		{"nat server", func(c *Config) { natServer(c) }, ""},
		{"nat server behind a router, mapport", func(c *Config) {
			s := natServer(c)
			s.Address, s.Router, s.MapPort = netip.MustParseAddr("198.18.1.11"), netip.MustParseAddr("198.18.0.254"), 8080
		}, ""},
		{"nat server without return address", func(c *Config) { natServer(c).ReturnAddress = netip.Addr{} }, "returnaddress"},
		{"nat return address of the wrong family", func(c *Config) { natServer(c).ReturnAddress = netip.MustParseAddr("2001:2::3") }, "returnaddress"},
		{"nat return address is the NFA", func(c *Config) { natServer(c).ReturnAddress = c.Executor.NFA }, "returnaddress"},
		{"nat return address is the VIP", func(c *Config) { natServer(c).ReturnAddress = c.Clusters[0].Address }, "returnaddress"},
		{"nat return address is a server", func(c *Config) { natServer(c).ReturnAddress = netip.MustParseAddr("198.18.0.21") }, "returnaddress"},
		{"nat router is the server", func(c *Config) { s := natServer(c); s.Router = s.Address }, "router"},
		{"nat router is a VIP", func(c *Config) { natServer(c).Router = c.Clusters[0].Address }, "router"},
		{"nat router is a return address", func(c *Config) { s := natServer(c); s.Router = s.ReturnAddress }, "returnaddress"},
		{"mapport on a mac port", func(c *Config) { c.Clusters[0].Ports[0].Servers[0].MapPort = 8080 }, "mapport"},
		{"returnaddress on a mac port", func(c *Config) {
			c.Clusters[0].Ports[0].Servers[0].ReturnAddress = netip.MustParseAddr("198.18.0.3")
		}, "returnaddress"},
		{"router on a mac port", func(c *Config) {
			c.Clusters[0].Ports[0].Servers[0].Router = netip.MustParseAddr("198.18.0.254")
		}, "router"},
		{"fintimeout 0", func(c *Config) { c.Executor.FinTimeout = 0 }, "fintimeout"},
		{"server equals VIP", func(c *Config) { c.Clusters[0].Ports[0].Servers[0].Address = c.Clusters[0].Address }, "server"},
		{"server equals NFA", func(c *Config) { c.Clusters[0].Ports[0].Servers[0].Address = c.Executor.NFA }, "server"},
		{"duplicate server", func(c *Config) {
			p := &c.Clusters[0].Ports[0]
			p.Servers = append(p.Servers, p.Servers[0])
		}, "server"},
		{"started without interface", func(c *Config) { c.Executor.Started = true }, "interface"},
		{"proportions not summing to 100", func(c *Config) { c.Clusters[0].Proportions = Proportions{50, 50, 1, 0} }, "proportions"},
		{"negative proportion", func(c *Config) { c.Clusters[0].Proportions = Proportions{110, -10, 0, 0} }, "proportions"},
		{"manager interval 0", func(c *Config) { c.Manager.Interval = 0 }, "interval"},
		{"smoothing below 1", func(c *Config) { c.Manager.Smoothing = 0.5 }, "smoothing"},
		{"sensitivity above 100", func(c *Config) { c.Manager.Sensitivity = 101 }, "sensitivity"},
		{"refresh 0", func(c *Config) { c.Manager.Refresh = 0 }, "refresh"},
		{"advisor rise 0", func(c *Config) {
			a := NewAdvisor("http", netip.Addr{}, 80)
			a.Rise = 0
			c.Advisors = []Advisor{a}
		}, "rise"},
		{"advisor twice", func(c *Config) {
			a := NewAdvisor("http", netip.Addr{}, 80)
			c.Advisors = []Advisor{a, a}
		}, "advisor"},
		{"exec advisor without program", func(c *Config) {
			a := NewAdvisor("exec", netip.Addr{}, 80)
			a.Mode = "normal"
			c.Advisors = []Advisor{a}
		}, "program"},
		{"advisor on unknown cluster", func(c *Config) {
			c.Advisors = []Advisor{NewAdvisor("http", netip.MustParseAddr("198.18.0.9"), 80)}
		}, "cluster"},
		{"bad metric name", func(c *Config) { c.Clusters[0].Metrics = []string{"cpu load"} }, "metric"},
		{"metric twice", func(c *Config) { c.Clusters[0].Metrics = []string{"cpuload", "cpuload"} }, "metric"},
		{"metric source", func(c *Config) { c.MetricServer.Source = "snmp" }, "source"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.edit(&c)
			err := c.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if FieldOf(err) != tc.field {
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
func crossPorts(c *Config, st80, st443 uint32) {
	p := NewPort(443)
	p.StickyTime = st443
	c.Clusters[0].Ports = append(c.Clusters[0].Ports, p)
	c.Clusters[0].Ports[0].StickyTime, c.Clusters[0].Ports[0].CrossPort = st80, 443
}

// natServer turns port 80 into a NAT port whose server has a return
// address, and returns the server.
func natServer(c *Config) *Server {
	p := &c.Clusters[0].Ports[0]
	p.Method = NAT
	s := &p.Servers[0]
	s.ReturnAddress = netip.MustParseAddr("198.18.0.3")
	return s
}

func TestCloneIsDeep(t *testing.T) {
	c := validConfig()
	d := c.Clone()
	d.Clusters[0].Ports[0].Servers[0].Weight = 1
	d.Clusters[0].Ports[0].Number = 81
	if c.Clusters[0].Ports[0].Servers[0].Weight != 5 || c.Clusters[0].Ports[0].Number != 80 {
		t.Fatal("Clone shares memory with the original")
	}
}

func TestEnumTextRoundTrip(t *testing.T) {
	for _, p := range []Protocol{TCP, UDP, Both} {
		b, _ := p.MarshalText()
		var q Protocol
		if err := q.UnmarshalText(b); err != nil || q != p {
			t.Errorf("protocol %v round trip: %v %v", p, q, err)
		}
	}
	for _, m := range []XDPMode{XDPAuto, XDPNative, XDPGeneric} {
		b, _ := m.MarshalText()
		var q XDPMode
		if err := q.UnmarshalText(b); err != nil || q != m {
			t.Errorf("mode %v round trip: %v %v", m, q, err)
		}
	}
	for _, m := range []Method{MAC, NAT} {
		b, _ := m.MarshalText()
		var q Method
		if err := q.UnmarshalText(b); err != nil || q != m {
			t.Errorf("method %v round trip: %v %v", m, q, err)
		}
	}
	for _, s := range []Selection{SelectAffinity, SelectConnection, SelectConnAffin} {
		b, _ := s.MarshalText()
		var q Selection
		if err := q.UnmarshalText(b); err != nil || q != s {
			t.Errorf("selection %v round trip: %v %v", s, q, err)
		}
	}
	for _, bad := range []string{"cbr", "encap", "dsr"} {
		if _, err := ParseMethod(bad); err == nil || !strings.Contains(err.Error(), "want mac or nat") {
			t.Errorf("ParseMethod(%s) = %v", bad, err)
		}
	}
	if _, err := ParseSelection("random"); err == nil {
		t.Error("ParseSelection(random) accepted")
	}
}

func TestRaiseProportions(t *testing.T) {
	cases := []struct {
		in, port, system Proportions
	}{
		{Proportions{50, 50, 0, 0}, Proportions{49, 50, 1, 0}, Proportions{49, 50, 0, 1}},
		{Proportions{0, 0, 100, 0}, Proportions{0, 0, 100, 0}, Proportions{0, 0, 99, 1}},
		{Proportions{30, 30, 20, 20}, Proportions{30, 30, 20, 20}, Proportions{30, 30, 20, 20}},
	}
	for _, c := range cases {
		p := c.in
		p.RaisePort()
		if p != c.port {
			t.Errorf("%s RaisePort = %s, want %s", c.in, p, c.port)
		}
		s := c.in
		s.RaiseSystem()
		if s != c.system {
			t.Errorf("%s RaiseSystem = %s, want %s", c.in, s, c.system)
		}
		if err := p.Check(""); err != nil {
			t.Error(err)
		}
	}
}
