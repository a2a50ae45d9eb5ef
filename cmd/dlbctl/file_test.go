package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/lb"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestFileSave(t *testing.T) {
	eng := cannedEngine()
	sock := serve(t, eng)
	path := filepath.Join(t.TempDir(), "dlb.cfg")

	r := dlbctl(sock, "file", "save", path)
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if want := "saved 2 clusters, 4 ports and 5 servers to " + path + "\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The header names the socket, which is a temporary path.
	got := strings.ReplaceAll(string(data), sock, "SOCKET")
	golden := filepath.Join("testdata", "save.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("saved script differs from %s (go test -update rewrites it):\n%s", golden, got)
	}

	// "-" writes the same script to stdout.
	r = dlbctl(sock, "file", "save", "-")
	if r.code != exitOK || r.stdout != string(data) {
		t.Errorf("file save -: exit %d, stdout\n%s", r.code, r.stdout)
	}

	// The script loads back into exactly the operations that recreate
	// the configuration.
	ops, _, err := (&app{env: osEnv()}).parseScript(path, string(data))
	if err != nil {
		t.Fatalf("parsing the saved script: %v", err)
	}
	if n := len(ops); n != 21 || ops[n-1].Action != api.ActionStart {
		t.Errorf("saved script holds %d operations, want 21 ending with executor start: %s", n, opJSON(ops...))
	}
}

// natConfig is a configuration that uses every NAT, IPv6, affinity and
// half-open parameter, with crossports that name a port added after the
// port that names it.
func natConfig() *fakeEngine {
	return &fakeEngine{
		exec: api.ExecutorReport{Started: true, Interface: "eth0", XDPMode: "auto", FinTimeout: 60,
			NFA: "192.0.2.10", NFA6: "2001:2::2", ClientGateway: "192.0.2.1", ClientGateway6: "2001:2::1"},
		clusters: []api.ClusterReport{
			{Address: "2001:2::100", Ports: 2, Proportions: []int{50, 50, 0, 0}},
			{Address: "10.0.0.100", Ports: 1, Proportions: []int{50, 50, 0, 0}},
		},
		ports: []api.PortReport{
			{Cluster: "2001:2::100", Port: 80, Protocol: "tcp", Method: "nat", SelectionAlgorithm: "affinity",
				CrossPort: 443, MaxHalfOpen: 1000, StaleTimeout: 300, WeightBound: 20, AllDown: "refuse", Servers: 1,
				HalfOpen: 2000, HalfOpenAlert: true, AffinityRecords: 9},
			{Cluster: "2001:2::100", Port: 443, Protocol: "both", Method: "nat", SelectionAlgorithm: "connection",
				StickyTime: 300, StickyMask: 64, CrossPort: 80, StaleTimeout: 600, WeightBound: 10, AllDown: "spread", Servers: 1},
			// An older dlbd reports no selectionalgorithm: nothing to save.
			{Cluster: "10.0.0.100", Port: 80, Protocol: "tcp", Method: "mac", StaleTimeout: 300, WeightBound: 20,
				AllDown: "refuse", Servers: 1},
		},
		servers: []api.ServerReport{
			{Cluster: "2001:2::100", Port: 80, Address: "2001:2:1::11", Weight: 10, State: api.StateUp,
				MapPort: 8080, ReturnAddress: "2001:2::3", Router: "2001:2::fe", AffinityRecords: 9},
			{Cluster: "2001:2::100", Port: 443, Address: "2001:2::21", Weight: 7, State: api.StateUp, FixedWeight: true,
				ReturnAddress: "2001:2::3"},
			{Cluster: "10.0.0.100", Port: 80, Address: "10.1.1.5", Weight: 5, State: api.StateUp},
		},
	}
}

func TestFileSaveNATRoundTrip(t *testing.T) {
	cfg := natConfig()
	path := filepath.Join(t.TempDir(), "dlb.cfg")
	if r := dlbctl(serve(t, cfg), "file", "save", path); r.code != exitOK {
		t.Fatalf("save: exit %d: %s", r.code, r.stderr)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	eng := &fakeEngine{}
	if r := dlbctl(serve(t, eng), "file", "load", path); r.code != exitOK {
		t.Fatalf("load: exit %d: %s\n%s", r.code, r.stderr, data)
	}
	const (
		ex = api.ObjectExecutor
		cl = api.ObjectCluster
		po = api.ObjectPort
		sv = api.ObjectServer
	)
	set := api.ActionSet
	want := []api.Op{
		{Object: ex, Action: set, NFA: ptr("192.0.2.10")},
		{Object: ex, Action: set, NFA: ptr("2001:2::2")},
		{Object: ex, Action: set, ClientGateway: ptr("192.0.2.1")},
		{Object: ex, Action: set, ClientGateway: ptr("2001:2::1")},
		{Object: cl, Action: api.ActionAdd, Target: "2001:2::100"},
		{Object: po, Action: api.ActionAdd, Target: "2001:2::100@80", Protocol: ptr("tcp"), Method: ptr("nat"),
			StaleTimeout: ptr[int64](300), WeightBound: ptr[int64](20), MaxHalfOpen: ptr[int64](1000)},
		{Object: sv, Action: api.ActionAdd, Target: "2001:2::100@80@2001:2:1::11", Weight: ptr[int64](10),
			MapPort: ptr[int64](8080), ReturnAddress: ptr("2001:2::3"), Router: ptr("2001:2::fe")},
		{Object: po, Action: api.ActionAdd, Target: "2001:2::100@443", Protocol: ptr("both"), Method: ptr("nat"),
			StaleTimeout: ptr[int64](600), WeightBound: ptr[int64](10), StickyTime: ptr[int64](300), StickyMask: ptr[int64](64),
			SelectionAlgorithm: ptr("connection"), AllDown: ptr("spread")},
		{Object: sv, Action: api.ActionAdd, Target: "2001:2::100@443@2001:2::21", Weight: ptr[int64](7),
			FixedWeight: ptr(true), ReturnAddress: ptr("2001:2::3")},
		// Crossports follow every port of their cluster.
		{Object: po, Action: set, Target: "2001:2::100@80", CrossPort: ptr[int64](443)},
		{Object: po, Action: set, Target: "2001:2::100@443", CrossPort: ptr[int64](80)},
		{Object: cl, Action: api.ActionAdd, Target: "10.0.0.100"},
		{Object: po, Action: api.ActionAdd, Target: "10.0.0.100@80", Protocol: ptr("tcp"), Method: ptr("mac"),
			StaleTimeout: ptr[int64](300), WeightBound: ptr[int64](20)},
		{Object: sv, Action: api.ActionAdd, Target: "10.0.0.100@80@10.1.1.5", Weight: ptr[int64](5)},
		{Object: ex, Action: api.ActionStart, Interface: ptr("eth0"), XDPMode: ptr("auto")},
	}
	got := eng.sent()
	if len(got) != 1 {
		t.Fatalf("sent %d batches, want one", len(got))
	}
	loaded := got[0]
	if !reflect.DeepEqual(loaded, want) {
		t.Errorf("loaded %s\nwant %s\nscript:\n%s", opJSON(loaded...), opJSON(want...), data)
	}

	// Every target, IPv6 ones included, has the form dlbd parses.
	depth := map[string]lb.Depth{cl: lb.ClusterDepth, po: lb.PortDepth, sv: lb.ServerDepth}
	for _, op := range loaded {
		if op.Target == "" {
			continue
		}
		tg, err := lb.ParseTarget(op.Target, depth[op.Object])
		if err != nil || tg.String(depth[op.Object]) != op.Target {
			t.Errorf("target %q parses as %+v, %v", op.Target, tg, err)
		}
	}

	// Replaying the operations as dlbd would gives back the saved
	// configuration.
	replayed := replay(t, loaded)
	if ex, w := replayed.exec, cfg.exec; ex.NFA != w.NFA || ex.NFA6 != w.NFA6 || ex.ClientGateway != w.ClientGateway ||
		ex.ClientGateway6 != w.ClientGateway6 || ex.Started != w.Started || ex.Interface != w.Interface || ex.XDPMode != w.XDPMode {
		t.Errorf("executor replays as %+v, want %+v", ex, w)
	}
	for _, p := range cfg.ports {
		key := fmt.Sprintf("%s@%d", p.Cluster, p.Port)
		g, ok := replayed.ports[key]
		w := portParams(p)
		if !ok || portParams(*g) != w {
			t.Errorf("port %s replays as %+v, want %+v", key, g, w)
		}
	}
	for _, s := range cfg.servers {
		key := fmt.Sprintf("%s@%d@%s", s.Cluster, s.Port, s.Address)
		g, ok := replayed.servers[key]
		w := serverParams(s)
		if !ok || serverParams(*g) != w {
			t.Errorf("server %s replays as %+v, want %+v", key, g, w)
		}
	}
}

// portParams is the part of a port report that a script sets, with dlbd's
// defaults filled in.
func portParams(p api.PortReport) api.PortReport {
	if p.SelectionAlgorithm == "" {
		p.SelectionAlgorithm = defaultSelectionAlgorithm
	}
	if p.AllDown == "" {
		p.AllDown = "refuse"
	}
	return api.PortReport{Cluster: p.Cluster, Port: p.Port, Protocol: p.Protocol, Method: p.Method, StickyTime: p.StickyTime,
		StickyMask: p.StickyMask, CrossPort: p.CrossPort, SelectionAlgorithm: p.SelectionAlgorithm, MaxHalfOpen: p.MaxHalfOpen,
		StaleTimeout: p.StaleTimeout, WeightBound: p.WeightBound, AllDown: p.AllDown}
}

// serverParams is the part of a server report that a script sets.
func serverParams(s api.ServerReport) api.ServerReport {
	return api.ServerReport{Cluster: s.Cluster, Port: s.Port, Address: s.Address, Weight: s.Weight, FixedWeight: s.FixedWeight,
		AdvisorRequest: s.AdvisorRequest, AdvisorResponse: s.AdvisorResponse, MapPort: s.MapPort,
		ReturnAddress: s.ReturnAddress, Router: s.Router}
}

type replayedConfig struct {
	exec    api.ExecutorReport
	ports   map[string]*api.PortReport
	servers map[string]*api.ServerReport
}

// replay applies operations with exact targets to a model of dlbd's
// configuration, as the admin API describes the fields: an address sets
// the nfa or client gateway of its family, and a port's crossport must
// name a port that exists.
func replay(t *testing.T, ops []api.Op) replayedConfig {
	t.Helper()
	c := replayedConfig{ports: map[string]*api.PortReport{}, servers: map[string]*api.ServerReport{}}
	byFamily := func(v4, v6 *string, addr string) {
		if netip.MustParseAddr(addr).Is4() {
			*v4 = addr
		} else {
			*v6 = addr
		}
	}
	setS := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	setN := func(dst any, v *int64) {
		if v == nil {
			return
		}
		switch d := dst.(type) {
		case *uint8:
			*d = uint8(*v)
		case *uint16:
			*d = uint16(*v)
		case *uint32:
			*d = uint32(*v)
		default:
			t.Fatalf("replay: cannot set a %T", dst)
		}
	}
	for i, op := range ops {
		switch op.Object {
		case api.ObjectExecutor:
			ex := &c.exec
			if op.NFA != nil {
				byFamily(&ex.NFA, &ex.NFA6, *op.NFA)
			}
			if op.ClientGateway != nil {
				byFamily(&ex.ClientGateway, &ex.ClientGateway6, *op.ClientGateway)
			}
			if op.Action == api.ActionStart {
				ex.Started = true
				setS(&ex.Interface, op.Interface)
				setS(&ex.XDPMode, op.XDPMode)
			}
		case api.ObjectPort:
			p := c.ports[op.Target]
			if op.Action == api.ActionAdd {
				cluster, port, _ := strings.Cut(op.Target, "@")
				n, _ := lb.ParsePortNumber(port)
				p = &api.PortReport{Cluster: cluster, Port: n, SelectionAlgorithm: defaultSelectionAlgorithm, AllDown: "refuse"}
				c.ports[op.Target] = p
			}
			if p == nil {
				t.Fatalf("op %d: port %s does not exist: %s", i, op.Target, opJSON(op))
			}
			setS(&p.Protocol, op.Protocol)
			setS(&p.Method, op.Method)
			setN(&p.StickyTime, op.StickyTime)
			setN(&p.StickyMask, op.StickyMask)
			setN(&p.CrossPort, op.CrossPort)
			setS(&p.SelectionAlgorithm, op.SelectionAlgorithm)
			setN(&p.MaxHalfOpen, op.MaxHalfOpen)
			setN(&p.StaleTimeout, op.StaleTimeout)
			setN(&p.WeightBound, op.WeightBound)
			setS(&p.AllDown, op.AllDown)
			if p.CrossPort != 0 && c.ports[fmt.Sprintf("%s@%d", p.Cluster, p.CrossPort)] == nil {
				t.Errorf("op %d: crossport %d of %s does not exist yet", i, p.CrossPort, op.Target)
			}
		case api.ObjectServer:
			s := c.servers[op.Target]
			if op.Action == api.ActionAdd {
				parts := strings.Split(op.Target, "@")
				n, _ := lb.ParsePortNumber(parts[1])
				s = &api.ServerReport{Cluster: parts[0], Port: n, Address: parts[2]}
				c.servers[op.Target] = s
			}
			if s == nil {
				t.Fatalf("op %d: server %s does not exist: %s", i, op.Target, opJSON(op))
			}
			setN(&s.Weight, op.Weight)
			if op.FixedWeight != nil {
				s.FixedWeight = *op.FixedWeight
			}
			setS(&s.AdvisorRequest, op.AdvisorRequest)
			setS(&s.AdvisorResponse, op.AdvisorResponse)
			setN(&s.MapPort, op.MapPort)
			setS(&s.ReturnAddress, op.ReturnAddress)
			setS(&s.Router, op.Router)
		}
	}
	return c
}

func TestFileSaveDefaults(t *testing.T) {
	// An executor that was never started or set saves as nothing but
	// the header; fintimeout 60 is the default and is left out.
	eng := &fakeEngine{exec: api.ExecutorReport{XDPMode: "auto", FinTimeout: 60}}
	r := dlbctl(serve(t, eng), "file", "save", "-")
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if !strings.HasPrefix(line, "#") {
			t.Errorf("unexpected line %q in\n%s", line, r.stdout)
		}
	}
	if !strings.Contains(r.stdout, "on 2025-06-01T12:30:00Z") {
		t.Errorf("header lacks the time:\n%s", r.stdout)
	}
}

func TestFileSaveOverwrite(t *testing.T) {
	eng := cannedEngine()
	sock := serve(t, eng)
	dir := t.TempDir()
	path := filepath.Join(dir, "dlb.cfg")
	if err := os.WriteFile(path, []byte("keep me\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	r := dlbctl(sock, "file", "save", path)
	if r.code != exitUsage || !strings.Contains(r.stderr, path+" exists; use --force to overwrite it") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
	if data, _ := os.ReadFile(path); string(data) != "keep me\n" {
		t.Errorf("file was changed to %q", data)
	}
	if len(eng.targets) != 0 {
		t.Errorf("dlbd was asked for reports before the check: %v", eng.targets)
	}

	r = dlbctl(sock, "file", "save", "--force", path)
	if r.code != exitOK {
		t.Fatalf("--force: exit %d: %s", r.code, r.stderr)
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), "# dlb configuration") {
		t.Errorf("--force did not replace the file: %q", data)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v (%v), want 0644", fi.Mode(), err)
	}
	// No temporary file is left behind.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %v, want only dlb.cfg", entries)
	}

	// A directory that does not exist fails without a usage error.
	r = dlbctl(sock, "file", "save", filepath.Join(dir, "no", "such", "dir.cfg"))
	if r.code != exitFailed || !strings.Contains(r.stderr, "creating") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}

// writeTemp writes a script into a temporary directory.
func writeTemp(t *testing.T, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.cfg")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFileLoad(t *testing.T) {
	eng := &fakeEngine{}
	path := writeTemp(t, `# a test script
executor set nfa 192.0.2.10   # trailing comment

  cluster add 10.0.0.100 --configure
dlbctl port add '10.0.0.100@80' --staletimeout "600"
se a 10.0.0.100@80@10.1.1.5+10.1.1.6 --weight 5
server down 10.0.0.100@80@10.1.1.6
executor start --interface 'eth 0'
`)
	r := dlbctl(serve(t, eng), "file", "load", path)
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if want := path + ": applied 6 operations\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	want := []api.Op{
		{Object: api.ObjectExecutor, Action: api.ActionSet, NFA: ptr("192.0.2.10")},
		{Object: api.ObjectCluster, Action: api.ActionAdd, Target: "10.0.0.100", Configure: ptr(true)},
		{Object: api.ObjectPort, Action: api.ActionAdd, Target: "10.0.0.100@80", StaleTimeout: ptr[int64](600)},
		{Object: api.ObjectServer, Action: api.ActionAdd, Target: "10.0.0.100@80@10.1.1.5+10.1.1.6", Weight: ptr[int64](5)},
		{Object: api.ObjectServer, Action: api.ActionDown, Target: "10.0.0.100@80@10.1.1.6"},
		{Object: api.ObjectExecutor, Action: api.ActionStart, Interface: ptr("eth 0")},
	}
	got := eng.sent()
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("sent %d batches: %v\nwant one: %s", len(got), got, opJSON(want...))
	}
}

func TestFileLoadBadLine(t *testing.T) {
	tests := []struct {
		line string
		want string
	}{
		{"server add 10.0.0.1@80@10.1.1.5 --weight abc", `"--weight"`},
		{"server report", `"server report" cannot be used in a script`},
		{"executor report", "cannot be used in a script"},
		{"se rep", `"server report" cannot be used in a script`},
		{"file save x", `"file save" cannot be used in a script`},
		{"file load x", "cannot be used in a script"},
		{"version", `"version" cannot be used in a script`},
		{"completion bash", `"completion bash" cannot be used in a script`},
		{"help", `"help" cannot be used in a script`},
		{"bogus 1", `unknown command "bogus"`},
		{"server bogus 1", `unknown command "bogus" for "dlbctl server"`},
		{"server", `"server" is not a complete command`},
		{"server add 10.0.0.1@80@10.1.1.5 --help", "is not a complete command"},
		{"server add 10.0.0.1@80@10.1.1.5 --socket /tmp/x", "unknown flag: --socket"},
		{"server report -o json", "cannot be used in a script"},
		{"cluster add 10.0.0.1 'unterminated", "unterminated ' quote"},
		{`cluster add "10.0.0.1`, `unterminated " quote`},
		{`cluster add 10.0.0.1 \`, "backslash at the end"},
		{"executor set bogus 1", `unknown executor keyword "bogus"`},
		{"cluster set 10.0.0.1", `at least one of the flags in the group [configure proportions] is required`},
		{"server add", "server add needs a target"},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			eng := &fakeEngine{}
			// The bad line is line 4, after good lines that must not be
			// sent either.
			path := writeTemp(t, "cluster add 10.0.0.1\n# comment\nport add 10.0.0.1@80\n"+tt.line+"\nserver add 10.0.0.1@80@10.1.1.5\n")
			r := dlbctl(serve(t, eng), "file", "load", path)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d", r.code, exitUsage)
			}
			if prefix := "dlbctl: " + path + ":4: "; !strings.HasPrefix(r.stderr, prefix) || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("stderr %q, want %q...%q", r.stderr, prefix, tt.want)
			}
			if got := eng.sent(); len(got) != 0 {
				t.Errorf("sent %v, want nothing", got)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
		})
	}
}

func TestFileLoadRefused(t *testing.T) {
	script := "cluster add 10.0.0.1\n\n# the port\nport add 10.0.0.1@80\nserver add 10.0.0.1@80@10.1.1.5 --weight 500\n"
	tests := []struct {
		index int
		want  string
	}{
		{2, ":5: weight: 500 is outside 0..20 (10.0.0.1@80@10.1.1.5) (nothing was applied)\n"},
		{1, ":4: weight: 500 is outside 0..20 (10.0.0.1@80@10.1.1.5) (nothing was applied)\n"},
		// A refusal of the batch as a whole names no line.
		{-1, ": weight: 500 is outside 0..20 (10.0.0.1@80@10.1.1.5) (nothing was applied)\n"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.index), func(t *testing.T) {
			eng := &fakeEngine{refuse: &dispatcher.OpError{Index: tt.index,
				Err: lb.Errorf("weight", "10.0.0.1@80@10.1.1.5", "500 is outside 0..20")}}
			path := writeTemp(t, script)
			r := dlbctl(serve(t, eng), "file", "load", path)
			if r.code != exitFailed {
				t.Errorf("exit %d, want %d", r.code, exitFailed)
			}
			if want := "dlbctl: " + path + tt.want; r.stderr != want {
				t.Errorf("stderr %q, want %q", r.stderr, want)
			}
			if got := eng.sent(); len(got) != 1 || len(got[0]) != 3 {
				t.Errorf("sent %v, want one batch of 3", got)
			}
		})
	}
}

func TestFileLoadEmptyAndMissing(t *testing.T) {
	eng := &fakeEngine{}
	sock := serve(t, eng)
	path := writeTemp(t, "# nothing\n\n")
	r := dlbctl(sock, "file", "load", path)
	if r.code != exitOK || r.stdout != path+": nothing to apply\n" || len(eng.sent()) != 0 {
		t.Errorf("exit %d, stdout %q, sent %v", r.code, r.stdout, eng.sent())
	}
	r = dlbctl(sock, "file", "load", filepath.Join(t.TempDir(), "missing.cfg"))
	if r.code != exitFailed || !strings.Contains(r.stderr, "reading script") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestSplitWords(t *testing.T) {
	tests := []struct {
		line string
		want []string
		err  bool
	}{
		{"", nil, false},
		{"   # only a comment", nil, false},
		{"a b\tc", []string{"a", "b", "c"}, false},
		{"a 'b c' d", []string{"a", "b c", "d"}, false},
		{`a "b \"c\" \\ \n"`, []string{"a", `b "c" \ \n`}, false},
		{`a'b'"c"d`, []string{"abcd"}, false},
		{`a '' b`, []string{"a", "", "b"}, false},
		{`a b#c # comment`, []string{"a", "b#c"}, false},
		{`a \# b\ c`, []string{"a", "#", "b c"}, false},
		{"a b\r", []string{"a", "b"}, false},
		{"a 'b", nil, true},
		{`a "b`, nil, true},
		{`a \`, nil, true},
	}
	for _, tt := range tests {
		got, err := splitWords(tt.line)
		if (err != nil) != tt.err || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("splitWords(%q) = %q, %v; want %q, error %v", tt.line, got, err, tt.want, tt.err)
		}
	}
	// quote's output splits back into the word.
	for _, w := range []string{"plain", "", "a b", "it's", `"x"`, `back\slash`, "#hash", "10.0.0.1@80"} {
		got, err := splitWords("cmd " + quote(w))
		if err != nil || len(got) != 2 || got[1] != w {
			t.Errorf("quote(%q) = %s splits into %q, %v", w, quote(w), got, err)
		}
	}
}

// The round trip runs the real engine behind a fake kernel: what file
// save writes from one dlbd, file load recreates in a fresh one.

type fakeDatapath struct {
	attached bool
	ifindex  int
}

func (d *fakeDatapath) Attach(ifindex int, mode lb.XDPMode) (lb.XDPMode, error) {
	d.attached, d.ifindex = true, ifindex
	if mode == lb.XDPAuto {
		return lb.XDPGeneric, nil
	}
	return mode, nil
}

func (d *fakeDatapath) Attached() (lb.Attachment, bool) {
	return lb.Attachment{Ifindex: d.ifindex, LinkID: 7, ProgramID: 9}, d.attached
}
func (d *fakeDatapath) Apply(lb.Dataplane) error          { return nil }
func (d *fakeDatapath) Stats() (lb.DataplaneStats, error) { return lb.DataplaneStats{}, nil }
func (d *fakeDatapath) Sweep() (lb.SweepResult, error)    { return lb.SweepResult{}, nil }
func (d *fakeDatapath) MaglevSize() uint32                { return 65537 }
func (d *fakeDatapath) ConnTableCapacity() uint32         { return 1024 }
func (d *fakeDatapath) NATTableCapacity() uint32          { return 1024 }
func (d *fakeDatapath) HalfOpenTableCapacity() uint32     { return 1024 }
func (d *fakeDatapath) AffinityTableCapacity() uint32     { return 1024 }
func (d *fakeDatapath) DropAffinity(uint32) (int, error)  { return 0, nil }
func (d *fakeDatapath) PinDir() string                    { return "/sys/fs/bpf/dlb-test" }
func (d *fakeDatapath) Close() error                      { return nil }
func (d *fakeDatapath) Remove() error                     { d.attached = false; return nil }

// fakeNetif has one interface, eth0, and reaches every server on it with
// a MAC made of the server's address.
type fakeNetif struct{}

var ifMAC = net.HardwareAddr{2, 0, 0, 0, 0, 0xee}

func (fakeNetif) LinkByName(name string) (lb.Link, error) {
	if name != "eth0" {
		return lb.Link{}, fmt.Errorf("no interface %q", name)
	}
	return lb.Link{Index: 2, Name: name, MAC: ifMAC}, nil
}

func (fakeNetif) Neighbors(addrs []netip.Addr) (map[netip.Addr]lb.Neighbor, map[netip.Addr]error) {
	out := map[netip.Addr]lb.Neighbor{}
	for _, a := range addrs {
		out[a] = lb.Neighbor{Ifindex: 2, IfMAC: ifMAC, MAC: net.HardwareAddr{2, 0, 0, 0, 0, a.As16()[15]}}
	}
	return out, nil
}

func (fakeNetif) AddAddress(string, netip.Addr) error { return nil }
func (fakeNetif) DelAddress(string, netip.Addr) error { return nil }

// realDaemon runs dispatcher's engine over the fakes and serves it.
func realDaemon(t *testing.T) string {
	t.Helper()
	eng, err := dispatcher.New(dispatcher.Options{
		StateDir:     t.TempDir(),
		OpenDatapath: func() (dispatcher.Datapath, error) { return &fakeDatapath{}, nil },
		Netif:        fakeNetif{},
		Logger:       slog.New(slog.DiscardHandler),
		MaxServices:  4096,
		MaxBackends:  16384,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { eng.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		// Bounded, so that an engine stuck in a change fails this test
		// instead of hanging the whole run.
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the engine did not stop")
		}
	})
	return serve(t, eng)
}

func TestFileRoundTrip(t *testing.T) {
	a := realDaemon(t)
	for _, cmd := range []string{
		"executor set nfa 192.0.2.10 fintimeout 30",
		"cluster add 10.0.0.100+10.0.0.101",
		"cluster set 10.0.0.101 --configure=true",
		"port add @80 --weightbound 50",
		"port add 10.0.0.100@53 --protocol both --staletimeout 30",
		"server add @80@10.1.1.5+10.1.1.6 --weight 7",
		"server add 10.0.0.100@53@10.1.1.9",
		"server down 10.0.0.101@80@10.1.1.6",
		"server set 10.0.0.100@80@10.1.1.6 --weight 0",
		"executor set nfa 2001:2::2",
		"executor set clientgateway 10.0.0.1",
		"port add 10.0.0.100@443 --method nat --stickytime 60 --stickymask 24 --selectionalgorithm conn+affin --maxhalfopen 500",
		"port add 10.0.0.100@8443 --stickytime 60 --crossport 443",
		"server add 10.0.0.100@443@10.2.0.5 --returnaddress 10.0.0.3 --router 10.0.0.254 --mapport 8443",
		"server add 10.0.0.100@443@10.0.0.7 --returnaddress 10.0.0.3",
		"cluster add 2001:2::100",
		"port add 2001:2::100@80 --stickytime 30 --stickymask 64 --protocol udp",
		"server add 2001:2::100@80@2001:2::21",
		"executor start --interface eth0 --xdp-mode native",
	} {
		if r := dlbctl(a, strings.Fields(cmd)...); r.code != exitOK {
			t.Fatalf("%s: exit %d: %s", cmd, r.code, r.stderr)
		}
	}
	// dlbd checks ranges: a weight above the port's weightbound.
	r := dlbctl(a, "server", "set", "10.0.0.100@53@10.1.1.9", "--weight", "500")
	if want := "dlbctl: weight: 500 is outside 0..20 (10.0.0.100@53@10.1.1.9)\n"; r.code != exitFailed || r.stderr != want {
		t.Errorf("exit %d, stderr %q, want 1, %q", r.code, r.stderr, want)
	}

	path := filepath.Join(t.TempDir(), "dlb.cfg")
	if r := dlbctl(a, "file", "save", path); r.code != exitOK {
		t.Fatalf("save: exit %d: %s", r.code, r.stderr)
	}
	b := realDaemon(t)
	if r := dlbctl(b, "file", "load", path); r.code != exitOK {
		data, _ := os.ReadFile(path)
		t.Fatalf("load: exit %d: %s\n%s", r.code, r.stderr, data)
	}
	for _, args := range [][]string{{"cluster", "report"}, {"port", "report"}, {"server", "report"}} {
		ra, rb := dlbctl(a, append(args, "-o", "json")...), dlbctl(b, append(args, "-o", "json")...)
		if ra.stdout != rb.stdout || ra.code != exitOK {
			t.Errorf("%s differs after the round trip:\n%s\nvs\n%s", args, ra.stdout, rb.stdout)
		}
	}
	exA, exB := executorConfig(t, a), executorConfig(t, b)
	if exA != exB || !exA.Started || exA.NFA6 != "2001:2::2" || exA.ClientGateway != "10.0.0.1" {
		t.Errorf("executor %+v, want %+v", exB, exA)
	}

	// Loading the script again conflicts with what it created: the
	// refusal names the line of the first operation dlbd refused, and
	// the whole batch is left out.
	data, _ := os.ReadFile(path)
	line := 0
	for i, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "cluster add 10.0.0.100") {
			line = i + 1
			break
		}
	}
	r = dlbctl(a, "file", "load", path)
	want := fmt.Sprintf("dlbctl: %s:%d: cluster: already exists (10.0.0.100) (nothing was applied)\n", path, line)
	if r.code != exitFailed || r.stderr != want {
		t.Errorf("exit %d, stderr %q, want %q", r.code, r.stderr, want)
	}
}

// executorConfig is the part of the executor report that a script sets.
type execConfig struct {
	Started                       bool
	Interface, Mode               string
	NFA, NFA6                     string
	ClientGateway, ClientGateway6 string
	FinTimeout                    uint32
}

func executorConfig(t *testing.T, sock string) execConfig {
	t.Helper()
	r := dlbctl(sock, "executor", "report", "-o", "json")
	var ex api.ExecutorReport
	if err := json.Unmarshal([]byte(r.stdout), &ex); err != nil {
		t.Fatalf("exit %d: %v: %s", r.code, err, r.stderr)
	}
	return execConfig{ex.Started, ex.Interface, ex.XDPMode, ex.NFA, ex.NFA6, ex.ClientGateway, ex.ClientGateway6, ex.FinTimeout}
}
