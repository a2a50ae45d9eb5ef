package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/lb"
)

// fileBGP is a speaker with one neighbour at its defaults; tests append
// keys to the neighbour.
const fileBGP = `bgp:
  asn: 65001
  routerid: 198.18.0.2
  neighbors:
    - address: 198.18.0.1
      remote-as: 65000
`

// TestReadFileBGP reads every key of the BGP section and of a cluster's
// announcement into the model.
func TestReadFileBGP(t *testing.T) {
	speaker := func(c *lb.Config) *lb.BGP {
		c.BGP.ASN, c.BGP.RouterID = 65001, mustAddr("198.18.0.2")
		return &c.BGP
	}
	neighbor := func(c *lb.Config) *lb.BGPNeighbor {
		b := speaker(c)
		b.Neighbors = []lb.BGPNeighbor{lb.NewBGPNeighbor(mustAddr("198.18.0.1"))}
		b.Neighbors[0].RemoteAS = 65000
		return &b.Neighbors[0]
	}
	const atNeighbor, atCluster = "      ", "    "
	withCluster := func(keys string) string {
		return strings.Replace(fileCluster, "    ports:\n", keys+"    ports:\n", 1)
	}
	tests := []struct {
		name string
		file string
		want func(c *lb.Config)
	}{
		{"empty section", "bgp:\n", nil},
		{"empty mapping", "bgp: {}\n", nil},
		{"speaker without neighbours", "bgp:\n  asn: 65001\n  routerid: 198.18.0.2\n", func(c *lb.Config) { speaker(c) }},
		{"listen port", "bgp:\n  asn: 4200000000\n  routerid: 198.18.0.2\n  listen-port: 1179\n", func(c *lb.Config) {
			speaker(c).ListenPort = 1179
			c.BGP.ASN = 4200000000
		}},
		{"a neighbour takes the defaults of neighbor add", fileBGP, func(c *lb.Config) { neighbor(c) }},
		{"every neighbour key", fileBGP + atNeighbor + "holdtime: 30\n" + atNeighbor + "multihop: 2\n" + atNeighbor + "port: 1179\n" +
			atNeighbor + "password-file: /etc/dlb/bgp secret\n" + atNeighbor + "bfd: yes\n", func(c *lb.Config) {
			n := neighbor(c)
			n.HoldTime, n.Multihop, n.Port, n.PasswordFile, n.BFD = 30, 2, 1179, "/etc/dlb/bgp secret", true
		}},
		{"hold time 0 (no keepalives)", fileBGP + atNeighbor + "holdtime: 0\n", func(c *lb.Config) { neighbor(c).HoldTime = 0 }},
		{"neighbours sorted, IPv6 too", `bgp:
  asn: 65001
  routerid: 198.18.0.2
  neighbors:
    - {address: "2001:2::1", remote-as: 65001, multihop: 1}
    - {address: 198.18.0.5, remote-as: 65000}
    - {address: 198.18.0.1, remote-as: 65000}
`, func(c *lb.Config) {
			b := speaker(c)
			for _, a := range []string{"198.18.0.1", "198.18.0.5", "2001:2::1"} {
				n := lb.NewBGPNeighbor(mustAddr(a))
				n.RemoteAS = 65000
				if a == "2001:2::1" {
					n.RemoteAS, n.Multihop = 65001, 1
				}
				b.Neighbors = append(b.Neighbors, n)
			}
		}},
		{"a cluster's announcement", withCluster(atCluster + "announce: true\n" + atCluster + "communities: [65000:100, NO-EXPORT, 1:2:3]\n" + atCluster + "med: 20\n"),
			func(c *lb.Config) {
				cl := &c.Clusters[0]
				cl.Announce, cl.Communities, cl.MED = true, []string{"65000:100", "no-export", "1:2:3"}, 20
			}},
		{"no communities", withCluster(atCluster + "communities: []\n"), nil},
		{"announce without a speaker (withdrawn until one is set)", withCluster(atCluster + "announce: yes\n"), func(c *lb.Config) {
			c.Clusters[0].Announce = true
		}},
		{"JSON", `{"bgp": {"asn": 65001, "routerid": "198.18.0.2", "neighbors": [{"address": "198.18.0.1", "remote-as": 65000, "bfd": true}]}}`,
			func(c *lb.Config) { neighbor(c).BFD = true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := lb.NewConfig()
			if strings.Contains(tt.file, "        servers:\n          - address: 198.18.0.21\n") { // fileCluster
				want = defaultCluster()
			}
			if tt.want != nil {
				tt.want(&want)
			}
			want.Sort()
			f, err := ReadFile([]byte(tt.file), Options{})
			if err != nil {
				t.Fatalf("%v\n%s", err, tt.file)
			}
			if !reflect.DeepEqual(f.Config, want) {
				t.Errorf("read\n%+v\nwant\n%+v", f.Config, want)
			}
		})
	}
}

// TestReadFileBGPErrors: every refusal of a BGP setting names the line
// and the field's path, and carries the field as dlbctl names it.
func TestReadFileBGPErrors(t *testing.T) {
	const atNeighbor, atCluster = "      ", "    "
	withCluster := func(keys string) string {
		return strings.Replace(fileCluster, "    ports:\n", keys+"    ports:\n", 1)
	}
	tests := []struct {
		name  string
		file  string
		want  string
		field string
	}{
		{"unknown key", "bgp:\n  asn: 65001\n  router-id: 198.18.0.2\n",
			`line 3: bgp.router-id: unknown key "router-id" (did you mean "routerid"?); keys here: asn, routerid, listen-port, neighbors`, "router-id"},
		{"not a mapping", "bgp: 65001\n", "line 1: bgp: want a mapping (key: value lines), got a value", "bgp"},
		{"no AS number", "bgp:\n  routerid: 198.18.0.2\n", "line 2: bgp: asn: BGP settings without an AS number", "asn"},
		{"AS 0 with settings", "bgp:\n  asn: 0\n  routerid: 198.18.0.2\n", "line 2: bgp.asn: BGP settings without an AS number", "asn"},
		{"AS_TRANS", "bgp:\n  asn: 23456\n  routerid: 198.18.0.2\n", "line 2: bgp.asn: 23456 is AS_TRANS (RFC 6793), which no speaker may use", "asn"},
		{"AS number too large", "bgp:\n  asn: 4294967295\n  routerid: 198.18.0.2\n", "line 2: bgp.asn: 4294967295 is not an AS number (want 1..4294967294)", "asn"},
		{"AS number not a number", "bgp:\n  asn: 65001.5\n", `line 2: bgp.asn: "65001.5" is not a whole number in 0..4294967295`, "asn"},
		{"no router id", "bgp:\n  asn: 65001\n", "line 2: bgp: routerid: missing router id", "routerid"},
		{"IPv6 router id", "bgp:\n  asn: 65001\n  routerid: 2001:2::2\n", "line 3: bgp.routerid: 2001:2::2: a BGP router id is an IPv4 address", "routerid"},
		{"bad router id", "bgp:\n  asn: 65001\n  routerid: 198.18.0\n", `line 3: bgp.routerid: "198.18.0" is not an IP address`, "routerid"},
		{"listen port out of range", "bgp:\n  asn: 65001\n  routerid: 198.18.0.2\n  listen-port: 65536\n",
			`line 4: bgp.listen-port: "65536" is not a whole number in 0..65535`, "listen-port"},
		{"neighbours not a list", "bgp:\n  asn: 65001\n  routerid: 198.18.0.2\n  neighbors: {address: 198.18.0.1}\n",
			`line 4: bgp.neighbors: want a list (one "- item" a line)`, "neighbors"},
		{"neighbour without address", "bgp:\n  asn: 65001\n  routerid: 198.18.0.2\n  neighbors:\n    - remote-as: 65000\n",
			"line 5: bgp.neighbors[0]: address is required", "address"},
		{"neighbour without remote AS", "bgp:\n  asn: 65001\n  routerid: 198.18.0.2\n  neighbors:\n    - address: 198.18.0.1\n",
			"line 5: bgp.neighbors[0]: remote-as is required", "remoteas"},
		{"unknown neighbour key", fileBGP + atNeighbor + "hold-time: 30\n",
			`line 7: bgp.neighbors[0].hold-time: unknown key "hold-time" (did you mean "holdtime"?); keys here: address, remote-as, holdtime, multihop, port, password-file, bfd`, "hold-time"},
		{"neighbour twice", fileBGP + "    - address: 198.18.0.1\n      remote-as: 65000\n",
			"line 7: bgp.neighbors[1].address: neighbor 198.18.0.1 is defined twice (first at line 5)", "neighbor"},
		{"neighbour's remote AS", strings.Replace(fileBGP, "65000", "0", 1), "line 6: bgp.neighbors[0].remote-as: 0 is not an AS number (want 1..4294967294)", "remoteas"},
		{"hold time below 3", fileBGP + atNeighbor + "holdtime: 2\n", "line 7: bgp.neighbors[0].holdtime: 2 is not 0 or 3..65535 seconds (RFC 4271)", "holdtime"},
		{"multihop above 255", fileBGP + atNeighbor + "multihop: 256\n", `line 7: bgp.neighbors[0].multihop: "256" is not a whole number in 0..255`, "multihop"},
		{"neighbour port", fileBGP + atNeighbor + "port: -1\n", `line 7: bgp.neighbors[0].port: "-1" is not a whole number in 0..65535`, "port"},
		{"relative password file", fileBGP + atNeighbor + "password-file: bgp.secret\n",
			`line 7: bgp.neighbors[0].password-file: "bgp.secret" is not an absolute file name`, "passwordfile"},
		{"bfd not a switch", fileBGP + atNeighbor + "bfd: fast\n", `line 7: bgp.neighbors[0].bfd: "fast" is not true or false`, "bfd"},
		{"neighbour is a cluster address", fileCluster + strings.Replace(fileBGP, "198.18.0.1\n", "198.18.0.100\n", 1),
			"line 11: bgp.neighbors[0].address: 198.18.0.100 is a cluster address", "neighbor"},
		{"neighbour is the nfa", "executor:\n  nfa: 198.18.0.1\n" + fileBGP,
			"line 7: bgp.neighbors[0].address: 198.18.0.1 is this dispatcher's own address (nfa)", "neighbor"},
		{"neighbour is not unicast", strings.Replace(fileBGP, "198.18.0.1\n", "224.0.0.5\n", 1),
			"line 5: bgp.neighbors[0].address: 224.0.0.5 is a multicast address", "neighbor"},
		{"announce not a switch", withCluster(atCluster + "announce: always\n"), `line 3: clusters[0].announce: "always" is not true or false`, "announce"},
		{"communities not a list", withCluster(atCluster + "communities: 65000:100\n"),
			`line 3: clusters[0].communities: want a list ([a, b] or one "- item" a line)`, "communities"},
		{"bad community", withCluster(atCluster + "communities: [65000:100, 70000:1]\n"),
			`line 3: clusters[0].communities: item 1: ` + communityErr(t, "70000:1"), "communities"},
		{"community twice", withCluster(atCluster + "communities: [65000:100, \"65000:0100\"]\n"),
			`line 3: clusters[0].communities: "65000:100" given twice`, "community"},
		{"med out of range", withCluster(atCluster + "med: 4294967296\n"),
			`line 3: clusters[0].med: "4294967296" is not a whole number in 0..4294967295`, "med"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ReadFile([]byte(tt.file), Options{})
			if err == nil {
				t.Fatalf("read %+v, want error %q", f.Config, tt.want)
			}
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("%T %v, want a *FileError", err, err)
			}
			if err.Error() != tt.want {
				t.Errorf("error\n%s\nwant\n%s", err, tt.want)
			}
			if got := lb.FieldOf(err); got != tt.field {
				t.Errorf("field %q, want %q", got, tt.field)
			}
		})
	}
}

// communityErr is the model's refusal of a community.
func communityErr(t *testing.T, s string) string {
	t.Helper()
	_, err := lb.ParseCommunity(s)
	if err == nil {
		t.Fatalf("%q parses", s)
	}
	return err.Error()
}

// TestFileBGPPlace: a refusal of the speaker (by dlbd, checking the
// host) is placed on the line of the neighbour it names, not on the
// cluster of the same address.
func TestFileBGPPlace(t *testing.T) {
	f, err := ReadFile([]byte(fileCluster+fileBGP+"      password-file: /etc/dlb/none\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		err  error
		want string
	}{
		{lb.Errorf("passwordfile", "198.18.0.1", "reading the password: no such file"),
			"line 13: bgp.neighbors[0].password-file: reading the password: no such file"},
		{lb.Errorf("neighbor", "198.18.0.1", "198.18.0.1 is on none of this host's subnets"),
			"line 11: bgp.neighbors[0].address: 198.18.0.1 is on none of this host's subnets"},
		{lb.Errorf("routerid", "bgp", "198.18.0.2 is not an address of this host"),
			"line 9: bgp.routerid: 198.18.0.2 is not an address of this host"},
		{lb.Errorf("configure", "198.18.0.100", "x"), "line 2: clusters[0]: configure: x"},
	} {
		if got := f.Place(tt.err).Error(); got != tt.want {
			t.Errorf("placed %q, want %q", got, tt.want)
		}
	}
}

// TestMarshalFileBGP shows the BGP section and a cluster's announcement as
// a file has them: the neighbours' defaults left out, the remote AS
// always.
func TestMarshalFileBGP(t *testing.T) {
	cfg := defaultCluster()
	cl := &cfg.Clusters[0]
	cl.Announce, cl.Communities, cl.MED = true, []string{"65000:100", "no-export"}, 5
	cfg.BGP = lb.BGP{ASN: 65001, RouterID: mustAddr("198.18.0.2"), ListenPort: 1179}
	n1, n2 := lb.NewBGPNeighbor(mustAddr("198.18.0.1")), lb.NewBGPNeighbor(mustAddr("198.18.0.3"))
	n1.RemoteAS = 65000
	n2.RemoteAS, n2.HoldTime, n2.Multihop, n2.Port, n2.PasswordFile, n2.BFD = 65001, 0, 2, 1179, "/etc/dlb/bgp.secret", true
	cfg.BGP.Neighbors = []lb.BGPNeighbor{n1, n2}
	got, err := MarshalFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := "# " + strings.ReplaceAll(fileHeader, "\n", "\n# ") + `
clusters:
  - address: 198.18.0.100
    announce: true
    communities: ['65000:100', no-export]
    med: 5
    ports:
      - port: 80
        protocol: tcp
        method: mac
        servers:
          - address: 198.18.0.21
            weight: 20
bgp:
  asn: 65001
  routerid: 198.18.0.2
  listen-port: 1179
  neighbors:
    - address: 198.18.0.1
      remote-as: 65000
    - address: 198.18.0.3
      remote-as: 65001
      holdtime: 0
      multihop: 2
      port: 1179
      password-file: /etc/dlb/bgp.secret
      bfd: true
`
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	f, err := ReadFile(got, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !sameConfig(f.Config, cfg) {
		t.Errorf("read back differs: %+v", Diff(cfg, f.Config))
	}
}

// TestPlanBGPWords shows the steps that change the speaker, its
// neighbours and the clusters' announcements, as dlbctl commands.
func TestPlanBGPWords(t *testing.T) {
	read := func(s string) lb.Config {
		t.Helper()
		f, err := ReadFile([]byte(s), Options{})
		if err != nil {
			t.Fatalf("%v\n%s", err, s)
		}
		return f.Config
	}
	const speaker = "bgp:\n  asn: 65001\n  routerid: 198.18.0.2\n"
	tests := []struct {
		name      string
		old, next string
		want      []string
	}{
		{"speaker and neighbour added", "", speaker + "  listen-port: 179\n  neighbors:\n    - {address: 198.18.0.1, remote-as: 65000, bfd: true, password-file: /etc/dlb/a b}\n",
			[]string{
				"+ bgp set --asn 65001 --routerid 198.18.0.2 --listen-port 179",
				"+ bgp neighbor add 198.18.0.1 --remote-as 65000 --password-file '/etc/dlb/a b' --bfd yes",
			}},
		{"speaker removed", speaker + "  neighbors:\n    - {address: 198.18.0.1, remote-as: 65000}\n", "",
			[]string{"- bgp remove"}},
		{"speaker changed, neighbours removed, set and added",
			speaker + "  listen-port: 179\n  neighbors:\n    - {address: 198.18.0.1, remote-as: 65000, password-file: /etc/dlb/p}\n    - {address: 198.18.0.3, remote-as: 65000}\n",
			"bgp:\n  asn: 65002\n  routerid: 198.18.0.2\n  neighbors:\n    - {address: 198.18.0.1, remote-as: 65002, holdtime: 30, multihop: 2, port: 1179}\n    - {address: 198.18.0.4, remote-as: 65002, holdtime: 9}\n",
			[]string{
				"- bgp neighbor remove 198.18.0.3",
				"~ bgp set --asn 65002 --listen-port 0  # was asn 65001 listen-port 179",
				"~ bgp neighbor set 198.18.0.1 --remote-as 65002 --holdtime 30 --multihop 2 --port 1179 --password-file none  # was remote-as 65000 holdtime 9 multihop 0 port 0 password-file /etc/dlb/p",
				"+ bgp neighbor add 198.18.0.4 --remote-as 65002",
			}},
		{"a cluster announced with its attributes on add", "",
			"clusters:\n  - {address: 198.18.0.100, configure: true, announce: true, communities: [65000:100, no-export], med: 5}\n",
			[]string{"+ cluster add 198.18.0.100 configure yes --announce yes --community 65000:100 --community no-export --med 5"}},
		{"a cluster's announcement changed",
			"clusters:\n  - {address: 198.18.0.100, announce: true, communities: [65000:100], med: 5}\n",
			"clusters:\n  - {address: 198.18.0.100, announce: false, communities: [], med: 0}\n",
			[]string{"~ cluster set 198.18.0.100 --announce no --community none --med 0  # was announce yes community 65000:100 med 5"}},
		{"a neighbour makes room for a cluster", speaker + "  neighbors:\n    - {address: 198.18.0.100, remote-as: 65000}\n",
			speaker + "clusters:\n  - {address: 198.18.0.100, announce: true}\n",
			[]string{
				"- bgp neighbor remove 198.18.0.100",
				"+ cluster add 198.18.0.100 --announce yes",
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, next := read(tt.old), read(tt.next)
			steps := Plan(old, next)
			var got []string
			for _, s := range steps {
				got = append(got, map[Kind]string{Added: "+", Removed: "-", Changed: "~"}[s.Kind]+" "+s.String())
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			ops := make([]Op, len(steps))
			for i, s := range steps {
				ops[i] = s.Op
			}
			made, err := Apply(old, ops, Options{})
			if err != nil {
				t.Fatalf("applying the steps: %v", err)
			}
			if !sameConfig(made, next) {
				t.Errorf("the steps make %+v more changes", Diff(made, next))
			}
		})
	}
}
