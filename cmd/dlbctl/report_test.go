package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/dlbproject/dlb/pkg/api"
)

// big is a counter beyond float64's exact range: YAML output must keep
// every digit.
const big = 1<<63 + 1

func cannedEngine() *fakeEngine {
	return &fakeEngine{
		exec: api.ExecutorReport{
			Started: true, Interface: "eth0", XDPMode: "auto", Attached: true, AttachedMode: "generic",
			Ifindex: 3, LinkID: 12, ProgramID: 34, PinDir: "/sys/fs/bpf/dlb",
			Dropping: map[string]uint64{"drop_no_route": 4}, DroppingSeconds: 5,
			NFA: "192.0.2.10", NFA6: "2001:2::2", ClientGateway: "192.0.2.1", ClientGateway6: "2001:2::1",
			FinTimeout: 30, Connections: 12, ConnectionCapacity: 262144, MaglevSize: 65537,
			NATCapacity: 131072, HalfOpenCapacity: 65536, AffinityCapacity: 65536, AffinityRecords: 7,
			ReturnAddresses: []api.ReturnAddressReport{
				{Address: "10.0.0.3", Ports: 64512, Established: 40, HalfOpen: 2},
				{Address: "2001:2::3", Ports: 64512},
			},
			Events: map[string]uint64{"nat_ports_exhausted": 3, "affinity_insert_failed": 1},
			Reasons: []api.ReasonCount{
				{Reason: "forwarded", Packets: 1000, Bytes: 64000},
				{Reason: "passed", Packets: 20, Bytes: 1500},
			},
			Packets: 1020,
			Trace:   &api.TraceReport{Filter: "cluster 10.0.0.100 port 80", Since: "2026-01-02T03:04:05Z", Packets: 17},
		},
		clusters: []api.ClusterReport{
			{Address: "10.0.0.100", Configure: true, Ports: 2, Proportions: []int{50, 50, 0, 0},
				Counters: api.Counters{Packets: big, Bytes: 2, NewConnections: 3, FinishedConnections: 4, ActiveConnections: 5}},
			{Address: "10.0.0.101", Ports: 2, Proportions: []int{40, 40, 20, 0}, Metrics: []string{"cpuload"}},
		},
		ports: []api.PortReport{
			{Cluster: "10.0.0.100", Port: 53, Protocol: "both", Method: "mac", SelectionAlgorithm: "affinity",
				StaleTimeout: 30, WeightBound: 50, Servers: 1},
			{Cluster: "10.0.0.100", Port: 80, Protocol: "tcp", Method: "mac", SelectionAlgorithm: "connection", MaxHalfOpen: 500,
				StaleTimeout: 300, WeightBound: 20, Servers: 2, HalfOpen: 800, HalfOpenAlert: true,
				Counters: api.Counters{Packets: 10, Bytes: 20, NewConnections: 3, FinishedConnections: 1, ActiveConnections: 2}},
			{Cluster: "10.0.0.101", Port: 443, Protocol: "tcp", Method: "mac", StickyTime: 60, StickyMask: 24, CrossPort: 8443,
				SelectionAlgorithm: "affinity", StaleTimeout: 900, WeightBound: 20, Servers: 1, HalfOpen: 3, AffinityRecords: 5},
			{Cluster: "10.0.0.101", Port: 8443, Protocol: "tcp", Method: "nat", StickyTime: 60, StickyMask: 24, CrossPort: 443,
				SelectionAlgorithm: "conn+affin", StaleTimeout: 300, WeightBound: 20, Servers: 1, AffinityRecords: 2},
		},
		servers: []api.ServerReport{
			{Cluster: "10.0.0.100", Port: 53, Address: "10.1.1.9", Weight: 50, CurrentWeight: 50, State: api.StateUp, MAC: "02:00:00:00:00:09"},
			{Cluster: "10.0.0.100", Port: 80, Address: "10.1.1.5", Weight: 5, CurrentWeight: 12, State: api.StateUp, MAC: "02:00:00:00:00:05",
				Counters: api.Counters{Packets: 10, Bytes: 20, NewConnections: 3, FinishedConnections: 1, ActiveConnections: 2}},
			{Cluster: "10.0.0.100", Port: 80, Address: "10.1.1.6", Weight: 20, CurrentWeight: 0, State: api.StateDown, MAC: "02:00:00:00:00:06"},
			{Cluster: "10.0.0.101", Port: 443, Address: "10.1.1.7", Weight: 0, State: api.StateUnresolved, AffinityRecords: 5},
			{Cluster: "10.0.0.101", Port: 8443, Address: "198.18.1.11", Weight: 20, CurrentWeight: 17, State: api.StateUp, MAC: "02:d1:b0:00:00:fe",
				MapPort: 443, ReturnAddress: "10.0.0.3", Router: "198.18.0.254", AffinityRecords: 2},
		},
		manager: api.ManagerReport{Started: true, Interval: 2, Refresh: 2, Smoothing: 1.5, Sensitivity: 5, Cycles: 7,
			Ports: []api.ManagerPort{
				{Cluster: "10.0.0.100", Port: 80, Proportions: []int{49, 50, 1, 0}, WeightBound: 20, Change: 12.5, Pushed: true,
					Servers: []api.ManagerServer{
						{Address: "10.1.1.5", Weight: 12, NewWeight: 12, Active: 2, New: 3, PortLoad: 4, SystemLoad: 30, State: api.StateUp, Reason: "load"},
						{Address: "10.1.1.6", PortLoad: -1, SystemLoad: -1, State: api.StateDown, Reason: "advisor: down"},
					}},
				{Cluster: "10.0.0.101", Port: 443, Proportions: []int{49, 50, 1, 0}, WeightBound: 20, Alert: true, Servers: []api.ManagerServer{}},
			}},
	}
}

// managerTableWant is the manager report of cannedEngine as a table.
const managerTableWant = `manager:   started (cycle 7)
interval:  2 s, refresh 2, sensitivity 5 %, smoothing 1.5

10.0.0.100@80  proportions [49 50 1 0], weightbound 20, change 12.5 %, pushed true
SERVER         WEIGHT  NEW  ACTV  NEWC  PORT  SYS  STATE  REASON
10.1.1.5       12      12   2     3     4     30   up     load
10.1.1.6       0       0    0     0     -1    -    down   advisor: down

10.0.0.101@443  proportions [49 50 1 0], weightbound 20, change 0.0 %, pushed false  ALERT: no server takes new connections
no servers
`

func TestReportFormats(t *testing.T) {
	eng := cannedEngine()
	sock := serve(t, eng)
	tests := []struct {
		args   []string
		target string // the target dlbd must be asked for
		want   any    // the canned report
		table  string
	}{
		{[]string{"executor", "report"}, "", eng.exec, `started:             yes
interface:           eth0
xdp mode:            auto, attached as generic
attached:            yes (ifindex 3, link id 12, program id 34)
pin dir:             /sys/fs/bpf/dlb
dropping:            4 packets in the last 5 s: 4 with no route to the client (drop_no_route)
packet trace:        running since 2026-01-02T03:04:05Z (cluster 10.0.0.100 port 80), 17 packets so far
nfa:                 192.0.2.10
nfa6:                2001:2::2
client gateway:      192.0.2.1
client gateway6:     2001:2::1
fintimeout:          30 s
connections:         12/262144
nat capacity:        131072
half-open capacity:  65536
affinity records:    7/65536
maglev size:         65537

RETURN ADDRESS  PORTS  ESTABLISHED  HALF-OPEN
10.0.0.3        64512  40           2
2001:2::3       64512  0            0

REASON     PACKETS  BYTES
forwarded  1000     64000
passed     20       1500
total      1020     65500

EVENT                   COUNT
affinity_insert_failed  1
nat_ports_exhausted     3
`},
		// A port without servers says so instead of an empty table.
		{[]string{"manager", "report"}, "", eng.manager, managerTableWant},
		{[]string{"manager", "report", "10.0.0.100:80"}, "10.0.0.100@80@", eng.manager, managerTableWant},
		{[]string{"cluster", "report"}, "", eng.clusters, `CLUSTER     CONFIGURE  PORTS  PACKETS              BYTES  NEWC  ACTV  FIN
10.0.0.100  yes        2      9223372036854775809  2      3     5     4
10.0.0.101  no         2      0                    0      0     0     0
`},
		// Parameters whose 0 means unset show '-'; the half-open count is
		// marked above maxhalfopen.
		{[]string{"port", "report", "@80"}, "@80", eng.ports, `CLUSTER     PORT  PROTOCOL  METHOD  SELECTION   STICKYTIME  STICKYMASK  CROSSPORT  STALETIMEOUT  WEIGHTBOUND  MAXHALFOPEN  SERVERS  PACKETS  BYTES  NEWC  ACTV  FIN  HALFOPEN   AFFINITY
10.0.0.100  53    both      mac     affinity    0           -           -          30            50           -            1        0        0      0     0     0    0          0
10.0.0.100  80    tcp       mac     connection  0           -           -          300           20           500          2        10       20     3     2     1    800 ALERT  0
10.0.0.101  443   tcp       mac     affinity    60          24          8443       900           20           -            1        0        0      0     0     0    3          5
10.0.0.101  8443  tcp       nat     conn+affin  60          24          443        300           20           -            1        0        0      0     0     0    0          2
`},
		// WEIGHT is the configured weight, CURRENT the one the executor
		// uses now (the manager's).
		{[]string{"server", "report", "10.0.0.100@80@"}, "10.0.0.100@80@", eng.servers, `CLUSTER     PORT  SERVER       WEIGHT  CURRENT  STATE       PACKETS  BYTES  NEWC  ACTV  FIN  AFFINITY  MAC                MAPPORT  RETURNADDRESS  ROUTER
10.0.0.100  53    10.1.1.9     50      50       up          0        0      0     0     0    0         02:00:00:00:00:09  -        -              -
10.0.0.100  80    10.1.1.5     5       12       up          10       20     3     2     1    0         02:00:00:00:00:05  -        -              -
10.0.0.100  80    10.1.1.6     20      0        down        0        0      0     0     0    0         02:00:00:00:00:06  -        -              -
10.0.0.101  443   10.1.1.7     0       0        unresolved  0        0      0     0     0    5         -                  -        -              -
10.0.0.101  8443  198.18.1.11  20      17       up          0        0      0     0     0    2         02:d1:b0:00:00:fe  443      10.0.0.3       198.18.0.254
`},
	}
	for _, tt := range tests {
		name := strings.Join(tt.args, " ")
		// decode reads a report into a fresh value of the canned type.
		decode := func(t *testing.T, unmarshal func([]byte, any) error, data []byte) any {
			t.Helper()
			p := reflect.New(reflect.TypeOf(tt.want))
			if err := unmarshal(data, p.Interface()); err != nil {
				t.Fatalf("decoding %s: %v", data, err)
			}
			return p.Elem().Interface()
		}
		t.Run(name+" -o json", func(t *testing.T) {
			r := dlbctl(sock, append(tt.args, "-o", "json")...)
			if r.code != exitOK {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if got := decode(t, json.Unmarshal, []byte(r.stdout)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
			// Indented, as the API's body would be pretty-printed.
			if !strings.Contains(r.stdout, "\n  ") {
				t.Errorf("not indented:\n%s", r.stdout)
			}
			eng.mu.Lock()
			last := ""
			if n := len(eng.targets); n > 0 {
				last = eng.targets[n-1]
			}
			eng.mu.Unlock()
			if last != tt.target {
				t.Errorf("dlbd was asked for target %q, want %q", last, tt.target)
			}
		})
		t.Run(name+" -o yaml", func(t *testing.T) {
			r := dlbctl(sock, append(tt.args, "--output=yaml")...)
			if r.code != exitOK {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			// YAML is the JSON document: decoding it generically and
			// re-encoding it as JSON must give back the report, which
			// only works if the field names are the JSON ones.
			var doc any
			if err := yaml.Unmarshal([]byte(r.stdout), &doc); err != nil {
				t.Fatalf("decoding YAML: %v\n%s", err, r.stdout)
			}
			js, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			if got := decode(t, json.Unmarshal, js); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v\nYAML:\n%s", got, tt.want, r.stdout)
			}
		})
		t.Run(name+" table", func(t *testing.T) {
			r := dlbctl(sock, tt.args...)
			if r.code != exitOK {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if r.stdout != tt.table {
				t.Errorf("got\n%s\nwant\n%s", r.stdout, tt.table)
			}
			// -o table is the default, spelled out.
			if r2 := dlbctl(sock, append(tt.args, "-o", "table")...); r2.stdout != r.stdout {
				t.Errorf("-o table differs from the default:\n%s", r2.stdout)
			}
		})
	}
}

func TestReportYAMLShape(t *testing.T) {
	eng := cannedEngine()
	r := dlbctl(serve(t, eng), "cluster", "report", "-o", "yaml")
	want := `- address: 10.0.0.100
  configure: true
  ports: 2
  proportions:
    - 50
    - 50
    - 0
    - 0
  packets: 9223372036854775809
  bytes: 2
  new_connections: 3
  finished_connections: 4
  active_connections: 5
- address: 10.0.0.101
  configure: false
  ports: 2
  proportions:
    - 40
    - 40
    - 20
    - 0
  metrics:
    - cpuload
  packets: 0
  bytes: 0
  new_connections: 0
  finished_connections: 0
  active_connections: 0
`
	if r.code != exitOK || r.stdout != want {
		t.Errorf("exit %d, got\n%s\nwant\n%s", r.code, r.stdout, want)
	}

	// A MAC address is a base 60 number to YAML 1.1 readers unless
	// quoted; an address is not.
	r = dlbctl(serve(t, eng), "server", "report", "-o", "yaml")
	for _, want := range []string{`  mac: "02:00:00:00:00:09"` + "\n", "  address: 10.1.1.9\n", "  state: up\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("YAML lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestReportEmpty(t *testing.T) {
	sock := serve(t, &fakeEngine{})
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"server", "report"}, "CLUSTER  PORT  SERVER  WEIGHT  CURRENT  STATE  PACKETS  BYTES  NEWC  ACTV  FIN  AFFINITY  MAC  MAPPORT  RETURNADDRESS  ROUTER\n"},
		{[]string{"port", "report"}, "CLUSTER  PORT  PROTOCOL  METHOD  SELECTION  STICKYTIME  STICKYMASK  CROSSPORT  STALETIMEOUT  WEIGHTBOUND  " +
			"MAXHALFOPEN  SERVERS  PACKETS  BYTES  NEWC  ACTV  FIN  HALFOPEN  AFFINITY\n"},
		{[]string{"cluster", "report"}, "CLUSTER  CONFIGURE  PORTS  PACKETS  BYTES  NEWC  ACTV  FIN\n"},
		{[]string{"port", "report", "-o", "json"}, "[]\n"},
		{[]string{"server", "report", "-o", "yaml"}, "[]\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := dlbctl(sock, tt.args...)
			if r.code != exitOK || r.stdout != tt.want {
				t.Errorf("exit %d, got %q, want %q", r.code, r.stdout, tt.want)
			}
		})
	}

	// An executor that never started has no attachment and no reasons.
	r := dlbctl(sock, "executor", "report", "-o", "json")
	var got api.ExecutorReport
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Reasons == nil {
		t.Errorf("exit %d, %v, reasons %v: want []\n%s", r.code, err, got.Reasons, r.stdout)
	}
	r = dlbctl(sock, "executor", "report")
	for _, want := range []string{"started:             no", "attached:            no", "nfa:                 none",
		"nfa6:                none", "client gateway:      none", "client gateway6:     none", "connections:         -",
		"nat capacity:        -", "half-open capacity:  -", "affinity records:    -", "total   0        0"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	// Without return addresses, events or a trace, they are left out.
	for _, absent := range []string{"RETURN ADDRESS", "EVENT", "packet trace"} {
		if strings.Contains(r.stdout, absent) {
			t.Errorf("table has %q:\n%s", absent, r.stdout)
		}
	}
}

func TestPrefixReport(t *testing.T) {
	eng := cannedEngine()
	r := dlbctl(serve(t, eng), "se", "rep")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "CLUSTER     PORT  SERVER") {
		t.Errorf("exit %d (%s):\n%s", r.code, r.stderr, r.stdout)
	}
}

// TestRefusedByReason: the reports' refused counts read as reasons and
// counts in the reasons' order, not as a Go map.
func TestRefusedByReason(t *testing.T) {
	var b strings.Builder
	metricTable(&b, api.MetricReport{Source: "agent", Port: 10004, Refused: map[string]int64{"stale": 3, "bad signature": 1}})
	if !strings.Contains(b.String(), "refused:\tbad signature 1, stale 3\n") {
		t.Errorf("metric report:\n%s", b.String())
	}
	if got := byReason(map[string]uint64{}); got != "" {
		t.Errorf("no counts: %q", got)
	}
}

// TestAdvisorReportSelects: advisor report NAME [VIP@PORT|PORT] shows
// the advisors of that name, on that port; none is an error naming those
// started.
func TestAdvisorReportSelects(t *testing.T) {
	eng := &fakeEngine{advisors: []api.AdvisorReport{
		{Name: "http", Cluster: "10.0.0.100", Port: 80}, {Name: "http", Port: 8080}, {Name: "connect", Cluster: "10.0.0.100", Port: 80}}}
	sock := serve(t, eng)
	for _, c := range []struct {
		args []string
		want []string // name@cluster@port of each advisor shown
		err  string
	}{
		{nil, []string{"http 10.0.0.100@80", "http @8080", "connect 10.0.0.100@80"}, ""},
		{[]string{"http"}, []string{"http 10.0.0.100@80", "http @8080"}, ""},
		{[]string{"http", "10.0.0.100:80"}, []string{"http 10.0.0.100@80"}, ""},
		{[]string{"http", "8080"}, []string{"http @8080"}, ""},
		{[]string{"http", "80"}, nil, "no advisor http is started on @80 (started: http 10.0.0.100@80, http @8080, connect 10.0.0.100@80)"},
		{[]string{"dns"}, nil, "no advisor dns is started (started: "},
	} {
		r := dlbctl(sock, append(append([]string{"advisor", "report"}, c.args...), "-o", "json")...)
		if c.err != "" {
			if r.code != exitFailed || !strings.Contains(r.stderr, c.err) {
				t.Errorf("advisor report %q: exit %d, %q; want %d and %q", c.args, r.code, r.stderr, exitFailed, c.err)
			}
			continue
		}
		var got []api.AdvisorReport
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != exitOK {
			t.Fatalf("advisor report %q: exit %d, %v: %s", c.args, r.code, err, r.stderr)
		}
		var names []string
		for _, a := range got {
			names = append(names, fmt.Sprintf("%s %s@%d", a.Name, a.Cluster, a.Port))
		}
		if !slices.Equal(names, c.want) {
			t.Errorf("advisor report %q: %q, want %q", c.args, names, c.want)
		}
	}
}
