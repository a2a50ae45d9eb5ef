package lb

import (
	"fmt"
	"net"
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

func TestCloneIsDeep(t *testing.T) {
	c := NewConfig()
	p := NewPort(80)
	p.Servers = []Server{{Address: netip.MustParseAddr("198.18.0.21"), Weight: 5}}
	cl := NewCluster(netip.MustParseAddr("198.18.0.100"))
	cl.Ports = []Port{p}
	c.Clusters = []Cluster{cl}
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

// TestKeyStrings: keys print as cluster@port and cluster@port@server, in
// IPv4 and IPv6, and an unset address as netip prints it.
func TestKeyStrings(t *testing.T) {
	v4, v6 := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("2001:2::1")
	for _, c := range []struct {
		got  fmt.Stringer
		want string
	}{
		{ServiceKey{Cluster: v4, Port: 80}, "198.18.0.1@80"},
		{ServiceKey{Cluster: v6, Port: 65535}, "2001:2::1@65535"},
		{BackendKey{Service: ServiceKey{Cluster: v4, Port: 0}, Server: netip.MustParseAddr("198.18.1.2")}, "198.18.0.1@0@198.18.1.2"},
		{BackendKey{Service: ServiceKey{Cluster: v6, Port: 443}, Server: netip.MustParseAddr("2001:2::a")}, "2001:2::1@443@2001:2::a"},
		{BackendKey{}, "invalid IP@0@invalid IP"},
		{TraceFilter{}, "every packet"},
		{TraceFilter{Cluster: v4, Port: 80}, "cluster 198.18.0.1 port 80"},
		{TraceFilter{Cluster: v6, Server: netip.MustParseAddr("2001:2::a"), Reasons: []string{"fwd_tx", "syn_new"}},
			"cluster 2001:2::1 server 2001:2::a reasons fwd_tx,syn_new"},
		{TraceFilter{Reasons: []string{"pass_not_vip"}}, "reasons pass_not_vip"},
	} {
		if s := c.got.String(); s != c.want {
			t.Errorf("%#v prints %q, want %q", c.got, s, c.want)
		}
	}
}

// TestFieldErrorOneLine: a field or object holding what a client sent is
// quoted when it would not print as plain text; plain ones are not.
func TestFieldErrorOneLine(t *testing.T) {
	tests := []struct {
		field, object, want string
	}{
		{"weight", "198.18.0.100@80@198.18.0.21", "weight: bad (198.18.0.100@80@198.18.0.21)"},
		{"weight", "", "weight: bad"},
		{"advisor", "\x00@@1", `advisor: bad ("\x00@@1")`},
		{"a\nb", "x\ry", `"a\nb": bad ("x\ry")`},
		{"name", "caf\xe9", `name: bad ("caf\xe9")`},
		{"name", "café", "name: bad (café)"},
	}
	for _, tt := range tests {
		if got := Errorf(tt.field, tt.object, "bad").Error(); got != tt.want {
			t.Errorf("Errorf(%q, %q): %q, want %q", tt.field, tt.object, got, tt.want)
		}
	}
}

// TestFindByKey: a configuration finds a port and a server by key, and
// says nil for each missing level.
func TestFindByKey(t *testing.T) {
	vip, srv := netip.MustParseAddr("198.18.0.100"), netip.MustParseAddr("198.18.0.21")
	p := NewPort(80)
	p.Servers = []Server{{Address: srv, Weight: 7}}
	cfg := Config{Clusters: []Cluster{{Address: vip, Ports: []Port{p}}}}
	cfg.Sort()
	for _, c := range []struct {
		name             string
		key              BackendKey
		wantPort, wantSv bool
	}{
		{"present", BackendKey{Service: ServiceKey{Cluster: vip, Port: 80}, Server: srv}, true, true},
		{"another server", BackendKey{Service: ServiceKey{Cluster: vip, Port: 80}, Server: netip.MustParseAddr("198.18.0.22")}, true, false},
		{"another port", BackendKey{Service: ServiceKey{Cluster: vip, Port: 81}, Server: srv}, false, false},
		{"another cluster", BackendKey{Service: ServiceKey{Cluster: netip.MustParseAddr("198.18.0.101"), Port: 80}, Server: srv}, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := cfg.Port(c.key.Service); (got != nil) != c.wantPort || got != nil && got.Number != c.key.Service.Port {
				t.Errorf("Port(%v) = %+v", c.key.Service, got)
			}
			if got := cfg.Server(c.key); (got != nil) != c.wantSv || got != nil && got.Weight != 7 {
				t.Errorf("Server(%v) = %+v", c.key, got)
			}
		})
	}
}

func TestLinkEthernet(t *testing.T) {
	for _, c := range []struct {
		mac  net.HardwareAddr
		want bool
	}{
		{net.HardwareAddr{2, 0, 0, 0, 0, 1}, true},
		{net.HardwareAddr{0, 0, 0, 0, 0, 0}, false}, // lo
		{nil, false}, // a tunnel
		{net.HardwareAddr{0, 0, 0, 0, 0, 0, 0, 1}, false},
	} {
		if got := (Link{MAC: c.mac}).Ethernet(); got != c.want {
			t.Errorf("Ethernet(%v) = %v, want %v", c.mac, got, c.want)
		}
	}
}
