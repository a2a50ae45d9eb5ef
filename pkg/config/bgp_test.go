package config

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/lb"
)

func bgpOp(object Object, action Action, target string, kv ...string) Op {
	o := Op{Object: object, Action: action, Target: target}
	for i := 0; i+1 < len(kv); i += 2 {
		o.Params = append(o.Params, P(kv[i], kv[i+1]))
	}
	return o
}

// TestBGPOps checks the bgp, neighbor and cluster announcement operations
// and their refusals, each against a dispatcher with the speaker set up.
func TestBGPOps(t *testing.T) {
	setUp := []Op{
		bgpOp(BGP, Set, "", "asn", "65001", "routerid", "198.18.0.2"),
		bgpOp(Neighbor, Add, "198.18.0.1", "remoteas", "65000"),
	}
	cases := []struct {
		name  string
		op    Op
		field string // "" = accepted
		msg   string
		check func(t *testing.T, c lb.Config)
	}{
		{"neighbor with everything", bgpOp(Neighbor, Add, "198.18.7.1", "remoteas", "4200000000", "holdtime", "3",
			"multihop", "2", "passwordfile", "/etc/dlb/bgp.pw", "neighborport", "1179", "bfd", "yes"), "", "", func(t *testing.T, c lb.Config) {
			n := c.BGP.Neighbor(netip.MustParseAddr("198.18.7.1"))
			if n == nil || n.RemoteAS != 4200000000 || n.HoldTime != 3 || n.Multihop != 2 || n.PasswordFile != "/etc/dlb/bgp.pw" ||
				n.RemotePort() != 1179 || !n.BFD {
				t.Errorf("neighbour %+v", n)
			}
		}},
		{"neighbor set", bgpOp(Neighbor, Set, "198.18.0.1", "holdtime", "0"), "", "", func(t *testing.T, c lb.Config) {
			if n := c.BGP.Neighbor(netip.MustParseAddr("198.18.0.1")); n.HoldTime != 0 || n.RemoteAS != 65000 {
				t.Errorf("neighbour %+v", n)
			}
		}},
		{"neighbor remove", bgpOp(Neighbor, Remove, "198.18.0.1"), "", "", func(t *testing.T, c lb.Config) {
			if len(c.BGP.Neighbors) != 0 {
				t.Errorf("neighbours %+v", c.BGP.Neighbors)
			}
		}},
		{"bgp remove", bgpOp(BGP, Remove, ""), "", "", func(t *testing.T, c lb.Config) {
			if c.BGP.Enabled() || len(c.BGP.Neighbors) != 0 {
				t.Errorf("bgp %+v", c.BGP)
			}
		}},
		{"listen port", bgpOp(BGP, Set, "", "listenport", "179"), "", "", func(t *testing.T, c lb.Config) {
			if c.BGP.ListenPort != 179 || c.BGP.ASN != 65001 {
				t.Errorf("bgp %+v", c.BGP)
			}
		}},
		{"announce", Op{Object: Cluster, Action: Set, Target: "198.18.0.100", Params: []Param{P("announce", "yes"),
			P("communities", "65000:100+no-export", "1:2:3"), P("med", "20")}}, "", "", func(t *testing.T, c lb.Config) {
			cl := c.Cluster(netip.MustParseAddr("198.18.0.100"))
			if !cl.Announce || cl.MED != 20 || strings.Join(cl.Communities, " ") != "65000:100 no-export 1:2:3" {
				t.Errorf("cluster %+v", cl)
			}
		}},
		{"announce on add", bgpOp(Cluster, Add, "198.18.0.101", "announce", "yes"), "", "", func(t *testing.T, c lb.Config) {
			if !c.Cluster(netip.MustParseAddr("198.18.0.101")).Announce {
				t.Error("not announced")
			}
		}},
		{"AS 0", bgpOp(BGP, Set, "", "asn", "0"), "asn", "not an AS number", nil},
		{"AS too large", bgpOp(BGP, Set, "", "asn", "4294967295"), "asn", "not an AS number", nil},
		{"AS_TRANS", bgpOp(BGP, Set, "", "asn", "23456"), "asn", "AS_TRANS", nil},
		{"AS not a number", bgpOp(BGP, Set, "", "asn", "AS65001"), "asn", "not a whole number", nil},
		{"IPv6 router id", bgpOp(BGP, Set, "", "routerid", "2001:2::2"), "routerid", "IPv4", nil},
		{"router id 0.0.0.0", bgpOp(BGP, Set, "", "routerid", "0.0.0.0"), "routerid", "unspecified", nil},
		{"multicast router id", bgpOp(BGP, Set, "", "routerid", "224.0.0.5"), "routerid", "multicast", nil},
		{"router id not an address", bgpOp(BGP, Set, "", "routerid", "router1"), "routerid", "not an IP address", nil},
		{"listen port too large", bgpOp(BGP, Set, "", "listenport", "70000"), "listenport", "outside", nil},
		{"bgp set without values", bgpOp(BGP, Set, ""), "asn", "needs", nil},
		{"bgp with a target", bgpOp(BGP, Set, "198.18.0.1", "asn", "1"), "target", "no target", nil},
		{"neighbor twice", bgpOp(Neighbor, Add, "198.18.0.1", "remoteas", "65000"), "neighbor", "already exists", nil},
		{"neighbor without remote as", bgpOp(Neighbor, Add, "198.18.0.9"), "remoteas", "needs --remote-as", nil},
		{"neighbor bad remote as", bgpOp(Neighbor, Add, "198.18.0.9", "remoteas", "0"), "remoteas", "not an AS number", nil},
		{"neighbor is the VIP", bgpOp(Neighbor, Add, "198.18.0.100", "remoteas", "65000"), "neighbor", "cluster address", nil},
		{"neighbor is the NFA", bgpOp(Neighbor, Add, "198.18.0.2", "remoteas", "65000"), "neighbor", "own address (nfa)", nil},
		{"neighbor is loopback", bgpOp(Neighbor, Add, "127.0.0.1", "remoteas", "65000"), "neighbor", "loopback", nil},
		{"neighbor is multicast", bgpOp(Neighbor, Add, "ff02::5", "remoteas", "65000"), "neighbor", "multicast", nil},
		{"neighbor hold time 2", bgpOp(Neighbor, Set, "198.18.0.1", "holdtime", "2"), "holdtime", "RFC 4271", nil},
		{"neighbor multihop 256", bgpOp(Neighbor, Set, "198.18.0.1", "multihop", "256"), "multihop", "outside", nil},
		{"relative password file", bgpOp(Neighbor, Set, "198.18.0.1", "passwordfile", "bgp.pw"), "passwordfile", "absolute", nil},
		{"remove unknown neighbour", bgpOp(Neighbor, Remove, "198.18.0.9"), "neighbor", "not a configured neighbour", nil},
		{"neighbor without address", bgpOp(Neighbor, Add, "", "remoteas", "1"), "neighbor", "needs the neighbour's address", nil},
		{"neighbor takes no weight", bgpOp(Neighbor, Add, "198.18.0.9", "remoteas", "1", "weight", "1"), "weight", "does not take", nil},
		{"bad community", bgpOp(Cluster, Set, "198.18.0.100", "communities", "65536:1"), "community", "not a community", nil},
		{"community word", bgpOp(Cluster, Set, "198.18.0.100", "communities", "gold"), "community", "not a community", nil},
		{"MED too large", bgpOp(Cluster, Set, "198.18.0.100", "med", "4294967296"), "med", "outside", nil},
		{"announce maybe", bgpOp(Cluster, Set, "198.18.0.100", "announce", "maybe"), "announce", "not yes or no", nil},
		{"cluster on the neighbour", bgpOp(Cluster, Add, "198.18.0.1"), "neighbor", "cluster address", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base, err := Apply(validConfig(), setUp, Options{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := Apply(base, []Op{tc.op}, Options{})
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				tc.check(t, got)
				return
			}
			if err == nil {
				t.Fatalf("accepted, want a refusal naming %s", tc.field)
			}
			if lb.FieldOf(err) != tc.field || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v (field %q), want field %q and %q", err, lb.FieldOf(err), tc.field, tc.msg)
			}
		})
	}
}

func TestBGPNeedsSetFirst(t *testing.T) {
	_, err := Apply(validConfig(), []Op{bgpOp(Neighbor, Add, "198.18.0.1", "remoteas", "65000")}, Options{})
	if lb.FieldOf(err) != "neighbor" || !strings.Contains(err.Error(), "bgp set") {
		t.Errorf("got %v", err)
	}
	_, err = Apply(validConfig(), []Op{bgpOp(BGP, Set, "", "asn", "65001")}, Options{})
	if lb.FieldOf(err) != "asn" || !strings.Contains(err.Error(), "--routerid") {
		t.Errorf("got %v", err)
	}
}

// TestBGPScript checks that file save writes the speaker and the
// announcements as commands.
func TestBGPScript(t *testing.T) {
	c, err := Apply(validConfig(), []Op{
		bgpOp(BGP, Set, "", "asn", "65001", "routerid", "198.18.0.2", "listenport", "1179"),
		bgpOp(Neighbor, Add, "198.18.0.1", "remoteas", "65000", "multihop", "2", "passwordfile", "/etc/dlb/my pw", "bfd", "yes"),
		bgpOp(Cluster, Set, "198.18.0.100", "announce", "yes", "communities", "65000:100", "med", "5"),
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Script(&b, c); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"cluster add 198.18.0.100 --announce yes --community 65000:100 --med 5\n",
		"bgp set --asn 65001 --routerid 198.18.0.2 --listen-port 1179\n",
		"bgp neighbor add 198.18.0.1 --remote-as 65000 --holdtime 9 --multihop 2 --bfd yes --password-file '/etc/dlb/my pw'\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("script lacks %q:\n%s", want, b.String())
		}
	}
}
