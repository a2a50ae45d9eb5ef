package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/lb"
)

// fileCluster is the start of a file with one cluster, one port and one
// server; tests append keys to its objects.
const fileCluster = `clusters:
  - address: 198.18.0.100
    ports:
      - port: 80
        servers:
          - address: 198.18.0.21
`

// defaultCluster is what fileCluster reads as.
func defaultCluster() lb.Config {
	cfg := lb.NewConfig()
	cl := lb.NewCluster(netip.MustParseAddr("198.18.0.100"))
	p := lb.NewPort(80)
	p.Servers = []lb.Server{{Address: netip.MustParseAddr("198.18.0.21"), Weight: lb.DefaultWeightBound}}
	cl.Ports = []lb.Port{p}
	cfg.Clusters = []lb.Cluster{cl}
	return cfg
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// TestReadFileFields reads every key of the file into the model.
func TestReadFileFields(t *testing.T) {
	cl := func(c *lb.Config) *lb.Cluster { return &c.Clusters[0] }
	port := func(c *lb.Config) *lb.Port { return &c.Clusters[0].Ports[0] }
	srv := func(c *lb.Config) *lb.Server { return &c.Clusters[0].Ports[0].Servers[0] }
	// at indents keys for an object of fileCluster.
	const atCluster, atPort, atServer = "    ", "        ", "            "
	tests := []struct {
		name string
		file string
		want func(c *lb.Config)
	}{
		{"empty file", "", nil},
		{"empty document", "---\n", nil},
		{"comments only", "# nothing\n", nil},
		{"executor", `executor:
  started: true
  interface: eth0
  xdp-mode: native
  nfa: 198.18.0.2
  nfa6: 2001:2::2
  clientgateway: 198.18.0.1
  clientgateway6: 2001:2::1
  fintimeout: 30
`, func(c *lb.Config) {
			c.Executor = lb.Executor{Started: true, Interface: "eth0", XDPMode: lb.XDPNative, NFA: mustAddr("198.18.0.2"),
				NFA6: mustAddr("2001:2::2"), ClientGateway: mustAddr("198.18.0.1"), ClientGateway6: mustAddr("2001:2::1"), FinTimeout: 30}
		}},
		{"yes and no", "executor:\n  started: yes\n  interface: eth0\nmanager:\n  started: on\n", func(c *lb.Config) {
			c.Executor.Started, c.Executor.Interface, c.Manager.Started = true, "eth0", true
		}},
		{"a key without a value takes its default", "executor:\n  fintimeout:\n  nfa: ~\n", nil},
		{"manager", "manager:\n  started: true\n  interval: 1\n  refresh: 3\n  smoothing: 2.5\n  sensitivity: 10\n", func(c *lb.Config) {
			c.Manager = lb.Manager{Started: true, Interval: 1, Refresh: 3, Smoothing: 2.5, Sensitivity: 10}
		}},
		{"metric server: dlbmetricd", "metricserver:\n  secret-file: /etc/dlb/s\n  port: 10005\n", func(c *lb.Config) {
			c.MetricServer = lb.MetricServer{Source: "dlbmetricd", Port: 10005, SecretFile: "/etc/dlb/s"}
		}},
		{"metric server: prometheus takes its port and path", "metricserver:\n  source: prometheus\n", func(c *lb.Config) {
			c.MetricServer = lb.MetricServer{Source: "prometheus", Port: lb.DefaultPrometheusPort, Path: "/metrics"}
		}},
		{"metric server: prometheus elsewhere", "metricserver:\n  path: /m\n  source: prometheus\n  port: 9200\n", func(c *lb.Config) {
			c.MetricServer = lb.MetricServer{Source: "prometheus", Port: 9200, Path: "/m"}
		}},
		{"cluster", fileCluster, func(*lb.Config) {}},
		{"cluster settings", strings.Replace(fileCluster, "    ports:\n",
			atCluster+"configure: true\n"+atCluster+"proportions: {active: 30, new: 30, port: 20, system: 20}\n"+atCluster+"metrics: [cpuload, memload]\n    ports:\n", 1),
			func(c *lb.Config) {
				cl(c).Configure = true
				cl(c).Proportions = lb.Proportions{Active: 30, New: 30, Port: 20, System: 20}
				cl(c).Metrics = []string{"cpuload", "memload"}
			}},
		{"metrics raise the system proportion", strings.Replace(fileCluster, "    ports:\n", atCluster+"metrics:\n      - loadavg\n    ports:\n", 1),
			func(c *lb.Config) {
				cl(c).Metrics = []string{"loadavg"}
				cl(c).Proportions = lb.Proportions{Active: 49, New: 50, System: 1}
			}},
		{"port settings", strings.Replace(fileCluster, "        servers:\n", atPort+"protocol: both\n"+atPort+"method: nat\n"+atPort+"stickytime: 60\n"+
			atPort+"stickymask: 24\n"+atPort+"selectionalgorithm: conn+affin\n"+atPort+"maxhalfopen: 500\n"+atPort+"staletimeout: 30\n"+
			atPort+"weightbound: 50\n"+atPort+"alldown: spread\n"+atPort+"tablesize: 65537\n        servers:\n", 1) +
			atServer + "returnaddress: 198.18.0.9\n",
			func(c *lb.Config) {
				p := port(c)
				p.Protocol, p.Method, p.StickyTime, p.StickyMask = lb.Both, lb.NAT, 60, 24
				p.Selection, p.MaxHalfOpen, p.StaleTimeout, p.WeightBound = lb.SelectConnAffin, 500, 30, 50
				p.AllDown, p.TableSize = lb.AllDownSpread, 65537
				// The default weight is the port's weightbound.
				srv(c).Weight = 50
				srv(c).ReturnAddress = mustAddr("198.18.0.9")
			}},
		{"crossport", strings.Replace(fileCluster, "        servers:\n", "        stickytime: 30\n        servers:\n", 1) + `      - port: 81
        stickytime: 60
        crossport: 80
`, func(c *lb.Config) {
			p81 := lb.NewPort(81)
			p81.StickyTime, p81.CrossPort = 60, 80
			cl(c).Ports = append(cl(c).Ports, p81)
			port(c).StickyTime = 30
		}},
		{"server settings", fileCluster + atServer + "weight: 7\n" + atServer + "fixedweight: true\n" + atServer + "down: true\n" +
			atServer + "quiesced: now\n" + atServer + "advisorrequest: \"GET / HTTP/1.0\"\n" + atServer + "advisorresponse: '200'\n",
			func(c *lb.Config) {
				s := srv(c)
				s.Weight, s.FixedWeight, s.Down, s.Quiesced, s.QuiesceNow = 7, true, true, true, true
				s.AdvisorRequest, s.AdvisorResponse = "GET / HTTP/1.0", "200"
			}},
		{"quiesced", fileCluster + atServer + "quiesced: true\n", func(c *lb.Config) { srv(c).Quiesced = true }},
		{"nat server", strings.Replace(fileCluster, "        servers:\n", atPort+"method: nat\n        servers:\n", 1) +
			atServer + "mapport: 8080\n" + atServer + "returnaddress: 198.18.0.9\n" + atServer + "router: 198.18.0.254\n",
			func(c *lb.Config) {
				port(c).Method = lb.NAT
				s := srv(c)
				s.MapPort, s.ReturnAddress, s.Router = 8080, mustAddr("198.18.0.9"), mustAddr("198.18.0.254")
			}},
		{"advisors raise the port proportion", fileCluster + `advisors:
  - name: http
    port: 80
    interval: 1
    connecttimeout: 0.5
    receivetimeout: 1.5
    retries: 2
    rise: 1
    fall: 4
  - name: exec
    cluster: 198.18.0.100
    port: 80
    program: /usr/local/bin/check
    args: [-v, "a b"]
    mode: replace
`, func(c *lb.Config) {
			http := lb.NewAdvisor("http", netip.Addr{}, 80)
			http.Interval, http.ConnectTimeout, http.ReceiveTimeout, http.Retries, http.Rise, http.Fall = 1, 0.5, 1.5, 2, 1, 4
			exec := lb.NewAdvisor("exec", mustAddr("198.18.0.100"), 80)
			exec.Program, exec.Args, exec.Mode = "/usr/local/bin/check", []string{"-v", "a b"}, "replace"
			c.Advisors = []lb.Advisor{exec, http}
			cl(c).Proportions = lb.Proportions{Active: 49, New: 50, Port: 1}
		}},
		{"exec advisor's default mode", fileCluster + "advisors:\n  - name: exec\n    port: 80\n    program: /bin/true\n", func(c *lb.Config) {
			a := lb.NewAdvisor("exec", netip.Addr{}, 80)
			a.Program, a.Mode = "/bin/true", "normal"
			c.Advisors = []lb.Advisor{a}
			cl(c).Proportions = lb.Proportions{Active: 49, New: 50, Port: 1}
		}},
		{"reserved keys left empty", "ha:\nbgp: {}\n", nil},
		{"JSON", `{"executor": {"fintimeout": 30}, "clusters": [{"address": "198.18.0.100"}]}`, func(c *lb.Config) {
			c.Executor.FinTimeout = 30
			c.Clusters = []lb.Cluster{lb.NewCluster(mustAddr("198.18.0.100"))}
		}},
		{"anchors and aliases", `clusters:
  - address: 198.18.0.100
    ports:
      - port: 80
        servers:
          - &s {address: 198.18.0.21, weight: 5}
  - address: 198.18.0.101
    ports:
      - port: 80
        servers: [*s]
`, func(c *lb.Config) {
			c.Clusters = nil
			for _, a := range []string{"198.18.0.100", "198.18.0.101"} {
				cl := lb.NewCluster(mustAddr(a))
				p := lb.NewPort(80)
				p.Servers = []lb.Server{{Address: mustAddr("198.18.0.21"), Weight: 5}}
				cl.Ports = []lb.Port{p}
				c.Clusters = append(c.Clusters, cl)
			}
		}},
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

// TestReadFileErrors: every refusal names the line and the field's path,
// and carries the field as dlbctl names it.
func TestReadFileErrors(t *testing.T) {
	const atServer = "            "
	tests := []struct {
		name  string
		file  string
		want  string
		field string
	}{
		{"YAML syntax", "clusters: [\n", "line 1: did not find expected node content", "file"},
		{"tabs", "executor:\n\tstarted: true\n", "line 2: found character that cannot start any token", "file"},
		{"two documents", "executor: {}\n---\nmanager: {}\n", `line 2: a configuration file holds one YAML document (remove the second "---")`, "file"},
		{"not a mapping", "- a\n", "line 1: want a mapping (key: value lines), got a list", "file"},
		{"unknown top-level key", "executor: {}\nclusterz: []\n",
			`line 2: clusterz: unknown key "clusterz" (did you mean "clusters"?); keys here: executor, manager, metricserver, clusters, advisors, ha, bgp`, "clusterz"},
		{"unknown key", fileCluster + atServer + "wieght: 5\n",
			`line 7: clusters[0].ports[0].servers[0].wieght: unknown key "wieght" (did you mean "weight"?); keys here: weight, fixedweight, down, quiesced, advisorrequest, advisorresponse, mapport, returnaddress, router, address`, "wieght"},
		{"key given twice", "executor:\n  fintimeout: 30\n  fintimeout: 40\n", "line 3: executor.fintimeout: given twice (first at line 2)", "fintimeout"},
		{"merge key", "executor:\n  <<: {fintimeout: 30}\n", "line 2: executor.<<: merge keys (<<) are not supported; repeat the settings", "<<"},
		{"clusters not a list", "clusters:\n  address: 198.18.0.100\n", `line 2: clusters: want a list (one "- item" a line)`, "clusters"},
		{"cluster without address", "clusters:\n  - configure: true\n", "line 2: clusters[0]: address is required", "address"},
		{"bad address", "clusters:\n  - address: 198.18.0.300\n", `line 2: clusters[0].address: "198.18.0.300" is not an IP address`, "address"},
		{"cluster twice", "clusters:\n  - address: 198.18.0.100\n  - address: 198.18.0.100\n",
			"line 3: clusters[1].address: cluster 198.18.0.100 is defined twice (first at line 2)", "cluster"},
		{"port out of range", "clusters:\n  - address: 198.18.0.100\n    ports:\n      - port: 70000\n",
			`line 4: clusters[0].ports[0].port: "70000" is not a whole number in 0..65535`, "port"},
		{"port twice", fileCluster + "      - port: 80\n",
			"line 7: clusters[0].ports[1].port: port 198.18.0.100@80 is defined twice (first at line 4)", "port"},
		{"port 0", "clusters:\n  - address: 198.18.0.100\n    ports:\n      - port: 0\n",
			"line 4: clusters[0].ports[0].port: port 0 is not a valid port (want 1..65535)", "port"},
		{"server twice", fileCluster + "          - address: 198.18.0.21\n",
			"line 7: clusters[0].ports[0].servers[1].address: server 198.18.0.100@80@198.18.0.21 is defined twice (first at line 6)", "server"},
		{"negative weight", fileCluster + atServer + "weight: -1\n",
			`line 7: clusters[0].ports[0].servers[0].weight: "-1" is not a whole number in 0..4294967295`, "weight"},
		{"weight above the weightbound", fileCluster + atServer + "weight: 30\n",
			"line 7: clusters[0].ports[0].servers[0].weight: 30 is outside 0..20 (the port's weightbound)", "weight"},
		{"unknown protocol", strings.Replace(fileCluster, "        servers:\n", "        protocol: sctp\n        servers:\n", 1),
			`line 5: clusters[0].ports[0].protocol: unknown protocol "sctp" (want tcp, udp or both)`, "protocol"},
		{"bad switch", fileCluster + atServer + "down: maybe\n",
			`line 7: clusters[0].ports[0].servers[0].down: "maybe" is not true or false`, "down"},
		{"bad quiesce", fileCluster + atServer + "quiesced: later\n",
			`line 7: clusters[0].ports[0].servers[0].quiesced: "later" is not true, false or now`, "quiesced"},
		{"value of the wrong kind", "executor:\n  fintimeout: [30]\n", "line 2: executor.fintimeout: want a whole number, got a list", "fintimeout"},
		{"not a number", "manager:\n  interval: fast\n", `line 2: manager.interval: "fast" is not a number`, "interval"},
		{"not a finite number", "manager:\n  interval: .inf\n", `line 2: manager.interval: ".inf" is not a number`, "interval"},
		{"manager's range", "manager:\n  smoothing: 0.5\n", "line 2: manager.smoothing: 0.5 is outside 1..100", "smoothing"},
		{"executor's range", "executor:\n  fintimeout: 0\n", "line 2: executor.fintimeout: 0 is outside 1..604800 seconds", "fintimeout"},
		{"started without interface", "executor:\n  started: true\n", "line 2: executor: interface: the executor is started but has no interface", "interface"},
		{"nfa of the wrong family", "executor:\n  nfa: 198.18.0.2\n  nfa6: 198.18.0.3\n", "line 3: executor.nfa6: 198.18.0.3 is an IPv4 address, want IPv6", "nfa"},
		{"cluster is the nfa", "executor:\n  nfa: 198.18.0.100\n" + fileCluster,
			"line 4: clusters[0].address: equals the non-forwarding address (nfa)", "cluster"},
		{"proportions", strings.Replace(fileCluster, "    ports:\n", "    proportions: {active: 50, new: 40}\n    ports:\n", 1),
			"line 3: clusters[0].proportions: 50 40 0 0: they sum to 90, not 100", "proportions"},
		{"proportions' keys", strings.Replace(fileCluster, "    ports:\n", "    proportions: {act: 100}\n    ports:\n", 1),
			`line 3: clusters[0].proportions: unknown key "act" (want active, new, port and system)`, "proportions"},
		{"metrics not a list", strings.Replace(fileCluster, "    ports:\n", "    metrics: cpuload\n    ports:\n", 1),
			`line 3: clusters[0].metrics: want a list ([a, b] or one "- item" a line)`, "metrics"},
		{"metric twice", strings.Replace(fileCluster, "    ports:\n", "    metrics: [cpuload, cpuload]\n    ports:\n", 1),
			`line 3: clusters[0].metrics: "cpuload" added twice`, "metric"},
		{"nat server without return address (a default: the object's line)",
			strings.Replace(fileCluster, "        servers:\n", "        method: nat\n        servers:\n", 1),
			"line 7: clusters[0].ports[0].servers[0]: returnaddress: a server of a nat port needs a return address (--returnaddress)", "returnaddress"},
		{"return address on a mac port", fileCluster + atServer + "returnaddress: 198.18.0.9\n",
			"line 7: clusters[0].ports[0].servers[0].returnaddress: applies to method nat only (the port's method is mac)", "returnaddress"},
		{"server is a cluster address", "clusters:\n  - address: 198.18.0.101\n" + strings.TrimPrefix(fileCluster, "clusters:\n") + "          - address: 198.18.0.101\n",
			"line 8: clusters[1].ports[0].servers[1].address: 198.18.0.101 is a cluster address", "server"},
		{"crossport", strings.Replace(fileCluster, "        servers:\n", "        crossport: 443\n        servers:\n", 1),
			"line 5: clusters[0].ports[0].crossport: port 443 is not a port of cluster 198.18.0.100", "crossport"},
		{"advisor without port", fileCluster + "advisors:\n  - name: http\n", "line 8: advisors[0]: port is required", "port"},
		{"advisor with nothing to probe", fileCluster + "advisors:\n  - name: http\n    port: 443\n",
			"line 9: advisors[0].port: no configured cluster balances port 443", "port"},
		{"advisor's cluster", fileCluster + "advisors:\n  - name: http\n    cluster: 198.18.0.101\n    port: 80\n",
			"line 9: advisors[0].cluster: 198.18.0.101 is not a configured cluster", "cluster"},
		{"advisor twice", fileCluster + "advisors:\n  - name: http\n    port: 80\n  - name: http\n    port: 80\n",
			"line 10: advisors[1]: advisor http@@80 is defined twice (first at line 8)", "advisor"},
		{"advisor's range", fileCluster + "advisors:\n  - name: http\n    port: 80\n    fall: 0\n",
			"line 10: advisors[0].fall: 0 is outside 1..100", "fall"},
		{"exec advisor without program", fileCluster + "advisors:\n  - name: exec\n    port: 80\n",
			"line 8: advisors[0]: program: the exec advisor needs --program", "program"},
		{"unknown advisor", fileCluster + "advisors:\n  - name: gopher\n    port: 80\n",
			`line 8: advisors[0].name: no advisor "gopher"`, "advisor"},
		{"metric server's source", "metricserver:\n  source: snmp\n", `line 2: metricserver.source: "snmp" is not dlbmetricd or prometheus`, "source"},
		{"ha's keys", "ha:\n  peer: 198.18.0.3\n", `line 2: ha.peer: unknown key "peer"; keys here: role, recovery, port, secret-file, interval, count, heartbeats, reach`, "peer"},
		{"ha's heartbeat without a destination", "ha:\n  heartbeats:\n    - {source: 198.18.0.2}\n", `line 3: ha.heartbeats: item 0: a heartbeat needs a source and a destination`, "heartbeats"},
		{"ha without a secret", "ha:\n  role: primary\n  port: 7000\n  heartbeats:\n    - {source: 198.18.0.2, destination: 198.18.0.4}\n",
			`line 2: ha: secretfile: heartbeats are authenticated: give the shared secret's file (highavailability heartbeat add|set --secret-file F)`, "secretfile"},
		{"alias to a list where a value goes", "x: &l [1]\nexecutor:\n  fintimeout: *l\n", `line 1: x: unknown key "x"; keys here: executor, manager, metricserver, clusters, advisors, ha, bgp`, "x"},
		{"a script of dlbctl commands", "# saved\n\ncluster add 198.18.0.100\nport add 198.18.0.100@80\n",
			`line 3: this is a script of dlbctl commands (as "dlbctl file save" writes), not a configuration file: "dlbctl file load FILE" applies it`, "file"},
		{"a script with dlbctl in front", "dlbctl executor start --interface eth0\n",
			`line 1: this is a script of dlbctl commands (as "dlbctl file save" writes), not a configuration file: "dlbctl file load FILE" applies it`, "file"},
		{"what follows the document does not parse", "executor:\n  fintimeout: 30\n---\n: :\n  - [\n",
			`line 3: did not find expected key`, "file"},
	}
	known := func(name string) error {
		if name == "gopher" {
			return fmt.Errorf("no advisor %q", name)
		}
		return nil
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ReadFile([]byte(tt.file), Options{KnownAdvisor: known})
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

// TestReadFileAliasBomb: aliases of aliases that would expand to billions
// of values are refused, quickly.
func TestReadFileAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [", i, i)
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	_, err := ReadFile([]byte(b.String()), Options{})
	if err == nil || !strings.Contains(err.Error(), "aliases expand to more than") {
		t.Fatalf("error %v, want a refusal of the expansion", err)
	}
}

// TestMarshalFileInPieces: a file written with each port's servers as
// YAML documents of their own is the same text as one written whole, for
// any size of piece; a value that holds the placeholder's text makes it
// write the file whole, and the same.
func TestMarshalFileInPieces(t *testing.T) {
	withServers := func(servers ...lb.Server) lb.Config {
		cfg := defaultCluster()
		cfg.Clusters[0].Ports[0].Servers = servers
		cfg.Clusters = append(cfg.Clusters, lb.NewCluster(mustAddr("2001:2::100")))
		p := lb.NewPort(443)
		for i := range 7 {
			p.Servers = append(p.Servers, lb.Server{Address: netip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 15: byte(i + 1)}), Weight: uint32(i)})
		}
		cfg.Clusters[1].Ports = []lb.Port{lb.NewPort(80), p}
		return cfg
	}
	srv := func(addr, request string) lb.Server {
		return lb.Server{Address: mustAddr(addr), Weight: 10, AdvisorRequest: request}
	}
	for _, c := range []struct {
		name string
		cfg  lb.Config
	}{
		{"no clusters", lb.NewConfig()},
		{"a port without servers", withServers()},
		{"servers", withServers(srv("198.18.0.21", ""), srv("198.18.0.22", "GET / HTTP/1.0"), srv("198.18.0.23", "it's"))},
		{"a request of several lines", withServers(srv("198.18.0.21", "GET / HTTP/1.0\nHost: a\n\n  indented\n"), srv("198.18.0.22", "x\n"))},
		{"a server's value holding the placeholder", withServers(srv("198.18.0.21", "servers: "+serversPlaceholder+"0"), srv("198.18.0.22", ""))},
		{"another value holding the placeholder", func() lb.Config {
			cfg := withServers(srv("198.18.0.21", ""))
			a := lb.NewAdvisor("exec", netip.Addr{}, 80)
			a.Mode = "normal"
			a.Program = "/bin/x\nservers: " + serversPlaceholder + "0" // a line of its own, as the placeholder is
			cfg.Advisors = []lb.Advisor{a}
			return cfg
		}()},
		{"ten thousand servers", bigConfig()},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := FileNode(c.cfg)
			root.HeadComment = fileHeader
			want, err := encodeYAML(root)
			if err != nil {
				t.Fatal(err)
			}
			for _, per := range []int{1, 2, 3, serversPerDocument} {
				root := FileNode(c.cfg)
				root.HeadComment = fileHeader
				got, err := encodeInPieces(root, per)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != string(want) {
					t.Fatalf("%d servers a document: the file differs from the one written whole:\n%s\nwant:\n%s", per, got, want)
				}
			}
			f, err := ReadFile(want, Options{})
			if err != nil {
				t.Fatalf("reading the file back: %v", err)
			}
			if !sameConfig(c.cfg, f.Config) {
				t.Errorf("read back differs: %+v", Diff(c.cfg, f.Config))
			}
		})
	}
}

// TestMarshalFile shows what a written file looks like: defaults left
// out, implied proportions left out, the rest in the file's words.
func TestMarshalFile(t *testing.T) {
	cfg := defaultCluster()
	cfg.Executor.Started, cfg.Executor.Interface, cfg.Executor.NFA = true, "eth0", mustAddr("198.18.0.2")
	cfg.Clusters[0].Configure = true
	cfg.Clusters[0].Ports[0].Servers = append(cfg.Clusters[0].Ports[0].Servers,
		lb.Server{Address: mustAddr("198.18.0.22"), Weight: 5, Down: true, QuiesceNow: true, Quiesced: true, AdvisorRequest: "yes"})
	cfg.Advisors = []lb.Advisor{lb.NewAdvisor("http", netip.Addr{}, 80)}
	cfg.Clusters[0].Proportions = lb.Proportions{Active: 49, New: 50, Port: 1}
	got, err := MarshalFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := "# " + strings.ReplaceAll(fileHeader, "\n", "\n# ") + `
executor:
  started: true
  interface: eth0
  nfa: 198.18.0.2
clusters:
  - address: 198.18.0.100
    configure: true
    ports:
      - port: 80
        protocol: tcp
        method: mac
        servers:
          - address: 198.18.0.21
            weight: 20
          - address: 198.18.0.22
            weight: 5
            down: true
            quiesced: now
            advisorrequest: "yes"
advisors:
  - name: http
    port: 80
`
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	js, err := MarshalFileJSON(lb.NewConfig())
	if err != nil || string(js) != "{}\n" {
		t.Errorf("an empty configuration in JSON: %q, %v", js, err)
	}
}

// TestPlanWords shows the steps in dscontrol's words.
func TestPlanWords(t *testing.T) {
	read := func(s string) lb.Config {
		t.Helper()
		f, err := ReadFile([]byte(s), Options{})
		if err != nil {
			t.Fatal(err)
		}
		return f.Config
	}
	old := read(`executor: {started: true, interface: eth0, nfa: 198.18.0.2}
clusters:
  - address: 198.18.0.100
    ports:
      - port: 80
        servers:
          - {address: 198.18.0.21, weight: 10}
          - {address: 198.18.0.22, weight: 10}
      - port: 443
`)
	next := read(`executor: {started: true, interface: eth0, nfa: 198.18.0.3}
manager: {started: true}
clusters:
  - address: 198.18.0.100
    ports:
      - port: 80
        weightbound: 10
        stickytime: 60
        servers:
          - {address: 198.18.0.21, weight: 5, down: true}
          - {address: 198.18.0.23, weight: 10}
  - address: 198.18.0.101
    configure: true
advisors:
  - {name: exec, port: 80, program: /usr/local/bin/check it, args: [-q]}
`)
	want := []string{
		"- port remove 198.18.0.100@443",
		"- server remove 198.18.0.100@80@198.18.0.22",
		"~ executor set nfa 198.18.0.3  # was nfa 198.18.0.2",
		"+ cluster add 198.18.0.101 configure yes",
		"~ port set 198.18.0.100@80 stickytime 60 weightbound 10  # was stickytime 0 weightbound 20",
		"~ server set 198.18.0.100@80@198.18.0.21 weight 5  # was weight 10",
		"+ server add 198.18.0.100@80@198.18.0.23 weight 10",
		"~ server down 198.18.0.100@80@198.18.0.21",
		"+ advisor start exec 80 --program '/usr/local/bin/check it' --arg -q",
		"+ manager start",
	}
	var got []string
	for _, s := range Plan(old, next) {
		got = append(got, map[Kind]string{Added: "+", Removed: "-", Changed: "~"}[s.Kind]+" "+s.String())
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestExampleFile: the example the package installs
// (/etc/dlb/dlb.yaml.example) is valid, and says what the script example
// beside it says.
func TestExampleFile(t *testing.T) {
	data, err := os.ReadFile("../../packaging/etc/dlb.yaml.example")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(data, Options{})
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("../../packaging/etc/dlb.cfg.example")
	if err != nil {
		t.Fatal(err)
	}
	var ops []Op
	for _, line := range strings.Split(string(script), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		ops = append(ops, scriptOp(t, line))
	}
	want, err := Apply(lb.NewConfig(), ops, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ch := Diff(f.Config, want); !ch.Empty() {
		t.Errorf("the YAML example and the script example differ: %+v", ch)
	}
}

// scriptParams are the parameters of the script example's flags, where
// the two differ.
var scriptParams = map[string]string{"remote-as": "remoteas", "community": "communities", "listen-port": "listenport"}

// scriptOp reads one line of the script example: "object action [target]
// [--flag value | keyword value]...", flags without a value being yes.
func scriptOp(t *testing.T, line string) Op {
	t.Helper()
	w := strings.Fields(line)
	if w[0] == "bgp" && w[1] == "neighbor" {
		w = w[1:] // bgp neighbor ACTION ADDRESS
	}
	o := Op{Object: Object(w[0]), Action: Action(w[1])}
	rest := w[2:]
	if o.Object == Advisor {
		o.Params = append(o.Params, P("advisor", rest[0]))
		o.Target, rest = rest[1], rest[2:]
	} else if len(rest) > 0 && !strings.HasPrefix(rest[0], "--") && (o.Object != Executor || o.Action != Set) {
		o.Target, rest = rest[0], rest[1:]
	}
	for i := 0; i < len(rest); i++ {
		name := strings.TrimPrefix(rest[i], "--")
		if p, ok := scriptParams[name]; ok {
			name = p
		}
		if i+1 < len(rest) && !strings.HasPrefix(rest[i+1], "--") {
			o.Params = append(o.Params, P(name, rest[i+1]))
			i++
		} else {
			o.Params = append(o.Params, P(name, "yes"))
		}
	}
	return o
}

// TestPlanExecutorWords: a running executor given another interface or
// XDP mode is started there (which moves it, its tables kept), not
// stopped first; stopped, or started from stopped, it is as before.
func TestPlanExecutorWords(t *testing.T) {
	ex := func(started bool, ifname string, mode lb.XDPMode) lb.Config {
		cfg := lb.NewConfig()
		cfg.Executor.Started, cfg.Executor.Interface, cfg.Executor.XDPMode = started, ifname, mode
		return cfg
	}
	for _, tc := range []struct {
		name      string
		old, next lb.Config
		want      []string
	}{
		{"moved", ex(true, "eth0", lb.XDPGeneric), ex(true, "eth1", lb.XDPGeneric),
			[]string{"~ executor start --interface eth1 --xdp-mode generic  # was interface eth0 xdp-mode generic"}},
		{"another mode", ex(true, "eth0", lb.XDPGeneric), ex(true, "eth0", lb.XDPNative),
			[]string{"~ executor start --interface eth0 --xdp-mode native  # was interface eth0 xdp-mode generic"}},
		{"stopped", ex(true, "eth0", lb.XDPGeneric), ex(false, "eth0", lb.XDPGeneric), []string{"- executor stop"}},
		{"started", ex(false, "eth0", lb.XDPGeneric), ex(true, "eth1", lb.XDPGeneric),
			[]string{"+ executor start --interface eth1 --xdp-mode generic"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, s := range Plan(tc.old, tc.next) {
				got = append(got, map[Kind]string{Added: "+", Removed: "-", Changed: "~"}[s.Kind]+" "+s.String())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
