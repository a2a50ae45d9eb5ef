package dispatcher

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlbproject/dlb/advisors"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// fakeProber answers probes from a table the test changes.
type fakeProber struct {
	mu   sync.Mutex
	down map[netip.Addr]bool
	load map[netip.Addr]time.Duration
	// local makes every probe fail as one leaving from an address the
	// host does not have does.
	local bool
}

func newFakeProber() *fakeProber {
	return &fakeProber{down: map[netip.Addr]bool{}, load: map[netip.Addr]time.Duration{}}
}

func (f *fakeProber) Name() string        { return "connect" }
func (f *fakeProber) DefaultPort() uint16 { return 0 }
func (f *fakeProber) Probe(_ context.Context, t advisors.Target) advisors.Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.local {
		return advisors.Result{Reason: "source address not available", Local: true}
	}
	if f.down[t.Address] {
		return advisors.Down("connect refused")
	}
	l := f.load[t.Address]
	if l == 0 {
		l = 5 * time.Millisecond
	}
	return advisors.Result{Up: true, Load: l}
}

func (f *fakeProber) set(a netip.Addr, down bool, load time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[a], f.load[a] = down, load
}

// setLocal makes every probe one this host cannot make, or not.
func (f *fakeProber) setLocal(local bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.local = local
}

// newManagedHarness is a harness whose advisors are the fake prober and
// whose scripts directory is private.
func newManagedHarness(t *testing.T) (*harness, *fakeProber, string) {
	t.Helper()
	fp := newFakeProber()
	scripts := t.TempDir()
	h := newHarnessWith(t, t.TempDir(), func(o *Options) {
		o.NewAdvisor = func(lb.Advisor) (advisors.Advisor, error) { return fp, nil }
		o.ScriptsDir = scripts
		o.ScriptTimeout = 300 * time.Millisecond
	})
	return h, fp, scripts
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *harness) serverState(target string) lb.ServerState {
	h.t.Helper()
	st := h.status(Query{Depth: lb.ServerDepth, Target: target})
	if len(st.Servers) != 1 {
		h.t.Fatalf("status of %s: %d servers", target, len(st.Servers))
	}
	for _, s := range st.Servers {
		return s.State
	}
	return 0
}

// advisorStates returns the advisors' verdicts on the servers of a port,
// by address.
func (h *harness) advisorStates(port uint16) map[netip.Addr]AdvisorStatus {
	out := map[netip.Addr]AdvisorStatus{}
	for k, a := range h.status(Query{}).Advisors {
		if k.Port == port {
			out[k.Addr] = a
		}
	}
	return out
}

// managerServers returns the manager's view of a port's servers, in
// address order.
func (h *harness) managerServers(port uint16) []ServerStatus {
	st := h.status(Query{Depth: lb.PortDepth + 1})
	var out []ServerStatus
	cfg := st.Config
	for _, cl := range cfg.Clusters {
		for _, p := range cl.Ports {
			if p.Number != port {
				continue
			}
			for _, s := range p.Servers {
				out = append(out, st.Servers[lb.BackendKey{Service: lb.ServiceKey{Cluster: cl.Address, Port: port}, Server: s.Address}])
			}
		}
	}
	return out
}

func (h *harness) accepts(addr netip.Addr, port uint16) bool {
	dp := h.dp.state()
	svc := map[uint32]uint16{}
	for _, s := range dp.Services {
		svc[s.ID] = s.Port
	}
	for _, b := range dp.Backends {
		if b.Address == addr && svc[b.Service] == port {
			return b.AcceptNew
		}
	}
	h.t.Fatalf("no backend %s:%d", addr, port)
	return false
}

func TestAdvisorFailoverAndRecovery(t *testing.T) {
	h, fp, scripts := newManagedHarness(t)
	base(h)
	log := filepath.Join(t.TempDir(), "events")
	for _, ev := range []string{"serverDown", "serverUp"} {
		script := "#!/bin/sh\necho \"$DLB_EVENT $DLB_SERVER $DLB_PORT $DLB_REASON\" >> " + log + "\n"
		if err := os.WriteFile(filepath.Join(scripts, ev), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	start := op("advisor", "start", "@80")
	start.Params = append(start.Params, config.P("advisor", "connect"))
	start.Params = append(start.Params, config.P("interval", "0.1"), config.P("rise", "2"), config.P("fall", "2"))
	h.mustApply(start)
	s2 := vip + "@80@198.18.0.22"
	eventually(t, "first probes", func() bool {
		a := h.advisorStates(80)
		return len(a) == 2 && a[s2Addr].State == lb.AdvisorUp
	})

	fp.set(s2Addr, true, 0)
	eventually(t, "s2 failed", func() bool { return h.serverState(s2) == lb.ServerFailed })
	if h.accepts(s2Addr, 80) || !h.accepts(s2Addr, 443) {
		t.Error("a failed server must stop taking new connections on port 80 only")
	}
	fp.set(s2Addr, false, 0)
	eventually(t, "s2 back", func() bool { return h.serverState(s2) == lb.ServerUp })
	if !h.accepts(s2Addr, 80) {
		t.Error("recovered server takes no new connections")
	}
	eventually(t, "event scripts ran", func() bool {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "serverDown 198.18.0.22 80 connect refused") &&
			strings.Contains(string(b), "serverUp 198.18.0.22 80")
	})

	srv := h.advisorStates(80)[s2Addr]
	if srv.Failures < 2 || srv.Probes < 4 || srv.LastError != "" {
		t.Errorf("advisor status %+v", srv)
	}
	// Stopping the advisor forgets its verdicts.
	stop := op("advisor", "stop", "@80")
	stop.Params = append(stop.Params, config.P("advisor", "connect"))
	h.mustApply(stop)
	if a := h.advisorStates(80); len(a) != 0 {
		t.Errorf("advisor status after stop: %+v", a)
	}
}

var s2Addr = netip.MustParseAddr("198.18.0.22")

// TestAdvisorCannotProbe: probes that cannot leave this host (its NFA,
// their source, was removed) say nothing of the servers: they keep their
// states, the executor keeps sending them connections, and the log says
// why once per server. (They used to take every server down: the whole
// service stopped because the dispatcher lost an address of its own.)
// A server that is down stays down; probes that reach the servers again
// decide as before.
func TestAdvisorCannotProbe(t *testing.T) {
	var logs testutil.LogBuffer
	fp := newFakeProber()
	h := newHarnessWith(t, t.TempDir(), func(o *Options) {
		logTo(&logs, false)(o)
		o.NewAdvisor = func(lb.Advisor) (advisors.Advisor, error) { return fp, nil }
	})
	base(h)
	fp.set(s2, true, 0)
	start := op("advisor", "start", vip+"@80")
	start.Params = append(start.Params, config.P("advisor", "connect"), config.P("interval", "0.1"),
		config.P("fall", "1"), config.P("rise", "1"))
	h.mustApply(start)
	eventually(t, "the advisor's verdicts", func() bool {
		a := h.advisorStates(80)
		return a[s1].State == lb.AdvisorUp && a[s2].State == lb.AdvisorDown
	})

	fp.setLocal(true)
	eventually(t, "probes that cannot be made", func() bool {
		a := h.advisorStates(80)
		return a[s1].LastError != "" && a[s2].LastError != ""
	})
	failures := h.advisorStates(80)[s1].Failures
	time.Sleep(500 * time.Millisecond) // five more intervals
	a := h.advisorStates(80)
	if a[s1].State != lb.AdvisorUp || a[s2].State != lb.AdvisorDown {
		t.Errorf("after probes that could not be made: %s %s, %s %s; want them unchanged (up, down)", s1, a[s1].State, s2, a[s2].State)
	}
	if !a[s1].LastUnmade || !a[s2].LastUnmade {
		t.Errorf("the last probes are not said to be unmade: %+v, %+v", a[s1], a[s2])
	}
	if a[s1].Failures != failures || a[s1].Unmade < 3 {
		t.Errorf("%s: failures went from %d to %d on probes that never reached it, %d counted unmade (want at least 3)",
			s1, failures, a[s1].Failures, a[s1].Unmade)
	}
	if !h.accepts(s1, 80) || h.accepts(s2, 80) {
		t.Errorf("executor: %s accepts %v (want true), %s %v (want false)", s1, h.accepts(s1, 80), s2, h.accepts(s2, 80))
	}
	if n := strings.Count(logs.String(), "advisor cannot probe from this host"); n != 2 {
		t.Errorf("logged %d times that the advisor cannot probe; want once per server (2)", n)
	}

	fp.setLocal(false)
	fp.set(s2, false, 0)
	eventually(t, "probes decide again", func() bool { return h.advisorStates(80)[s2].State == lb.AdvisorUp })
	eventually(t, "the last probes to be made ones", func() bool {
		a := h.advisorStates(80)
		return !a[s1].LastUnmade && !a[s2].LastUnmade
	})
	if !strings.Contains(logs.String(), "advisor probes again") {
		t.Error("the probes' return was not logged")
	}
}

func TestManagerWeightsFollowAdvisorLoad(t *testing.T) {
	h, fp, _ := newManagedHarness(t)
	base(h)
	fp.set(s1, false, 10*time.Millisecond)
	fp.set(s2, false, 300*time.Millisecond)
	start := op("advisor", "start", vip+"@80")
	start.Params = append(start.Params, config.P("advisor", "connect"))
	start.Params = append(start.Params, config.P("interval", "0.1"))
	set := op("manager", "set", "")
	set.Params = append(set.Params, config.P("interval", "0.1"))
	prop := op("cluster", "set", vip)
	prop.Params = append(prop.Params, config.P("proportions", "0", "0", "100", "0"))
	h.mustApply(start, set, prop, op("manager", "start", ""))

	eventually(t, "the slow server's weight falls below the fast one's", func() bool {
		s := h.managerServers(80)
		return len(s) == 2 && s[1].Weight < s[0].Weight/2
	})
	p80, p443 := h.managerServers(80), h.managerServers(443)
	t.Logf("manager, port 80: %+v", p80)
	if st := h.status(Query{}); st.ManagerCycles < 1 || !st.Config.Manager.Started {
		t.Errorf("manager: %d cycles, started %v", st.ManagerCycles, st.Config.Manager.Started)
	}
	// The executor's table follows the weights.
	dp := h.dp.state()
	ids := map[uint32]netip.Addr{}
	for _, b := range dp.Backends {
		ids[b.ID] = b.Address
	}
	count := map[netip.Addr]int{}
	for _, s := range dp.Services {
		if s.Port == 80 {
			for _, id := range s.Table {
				count[ids[id]]++
			}
		}
	}
	if count[s2]*2 > count[s1] {
		t.Errorf("table shares %v do not follow the weights", count)
	}
	// Port 443 has no advisor: its PORT column says so.
	for _, srv := range p443 {
		if srv.PortLoad != 0 {
			t.Errorf("port 443 server %d has advisor load %d", srv.ID, srv.PortLoad)
		}
	}
	// A fixed weight is never changed.
	fix := op("server", "set", vip+"@80@198.18.0.22")
	fix.Params = append(fix.Params, config.P("fixedweight", "yes"))
	fix.Params = append(fix.Params, config.P("weight", "20"))
	h.mustApply(fix)
	time.Sleep(500 * time.Millisecond)
	if w := h.managerServers(80)[1].Weight; w != 20 {
		t.Errorf("fixed server weight %d, want 20", w)
	}
}

func TestQuiesce(t *testing.T) {
	h, _, _ := newManagedHarness(t)
	base(h)
	h.mustApply(op("manager", "quiesce", "198.18.0.21"))
	for _, target := range []string{vip + "@80@198.18.0.21", vip + "@443@198.18.0.21"} {
		if st := h.serverState(target); st != lb.ServerQuiesced {
			t.Errorf("%s state %s", target, st)
		}
	}
	if h.accepts(s1, 80) || h.accepts(s1, 443) || !h.accepts(s2, 80) {
		t.Error("quiesced server still takes new connections, or another stopped")
	}
	h.mustApply(op("manager", "unquiesce", vip+"@80@198.18.0.21"))
	if !h.accepts(s1, 80) || h.accepts(s1, 443) {
		t.Error("unquiesce on one port")
	}
	if err := h.apply(op("manager", "quiesce", "198.18.0.99")); lb.FieldOf(err) != "server" {
		t.Errorf("quiesce of an unknown server: %v", err)
	}
}

func TestAllDownPolicies(t *testing.T) {
	h, fp, scripts := newManagedHarness(t)
	base(h)
	log := filepath.Join(t.TempDir(), "alerts")
	for _, ev := range []string{"managerAlert", "managerClear"} {
		if err := os.WriteFile(filepath.Join(scripts, ev), []byte("#!/bin/sh\necho \"$DLB_EVENT $DLB_CLUSTER $DLB_PORT $DLB_POLICY\" >> "+log+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	start := op("advisor", "start", "@80")
	start.Params = append(start.Params, config.P("advisor", "connect"))
	start.Params = append(start.Params, config.P("interval", "0.1"), config.P("fall", "1"))
	h.mustApply(start)
	fp.set(s1, true, 0)
	fp.set(s2, true, 0)
	table80 := func() []uint32 {
		for _, s := range h.dp.state().Services {
			if s.Port == 80 {
				return s.Table
			}
		}
		return nil
	}
	eventually(t, "both servers failed: refuse", func() bool { return table80() == nil })
	eventually(t, "managerAlert", func() bool {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "managerAlert 198.18.0.100 80 refuse")
	})
	policy := op("port", "set", vip+"@80")
	policy.Params = append(policy.Params, config.P("alldown", "spread"))
	h.mustApply(policy)
	if table80() == nil || !h.accepts(s1, 80) || !h.accepts(s2, 80) {
		t.Error("spread policy does not spread over the failed servers")
	}
	fp.set(s1, false, 0)
	eventually(t, "managerClear", func() bool {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "managerClear 198.18.0.100 80")
	})
	eventually(t, "only the live server once one is back", func() bool { return h.accepts(s1, 80) && !h.accepts(s2, 80) })
}

func TestSlowScriptNeverBlocks(t *testing.T) {
	h, _, scripts := newManagedHarness(t)
	base(h)
	marker := filepath.Join(t.TempDir(), "finished")
	if err := os.WriteFile(filepath.Join(scripts, "managerAlert"), []byte("#!/bin/sh\nsleep 5\ntouch "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Every server of port 443 down: an alert whose script hangs.
	h.mustApply(op("server", "down", vip+"@443@"))
	begin := time.Now()
	for i := 0; i < 20; i++ {
		w := op("server", "set", vip+"@80@198.18.0.21")
		w.Params = append(w.Params, config.P("weight", fmt.Sprint(int64(1+i%20))))
		h.mustApply(w)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Errorf("20 changes took %v while a script hung", d)
	}
	time.Sleep(500 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Error("the slow script was not killed at its timeout")
	}
}

func TestAdvisorAndMetricOps(t *testing.T) {
	h, _, _ := newManagedHarness(t)
	base(h)
	start := op("advisor", "start", "80")
	start.Params = append(start.Params, config.P("advisor", "http"))
	if err := h.apply(start); lb.FieldOf(err) != "port" {
		t.Errorf("advisor start with a bare port target (dlbctl adds the @): %v", err)
	}
	start.Target = "@80"
	h.mustApply(start)
	c := h.config()
	if p := c.Cluster(netip.MustParseAddr(vip)).Proportions; p != (lb.Proportions{Active: 49, New: 50, Port: 1}) {
		t.Errorf("proportions after advisor start %s, want 49 50 1 0", p)
	}
	if err := h.apply(start); lb.FieldOf(err) != "advisor" {
		t.Errorf("second start: %v", err)
	}
	bad := start
	bad.Params = append(bad.Params, config.P("advisor", "gopher"))
	bad.Target = "@443"
	if err := h.apply(bad); lb.FieldOf(err) != "advisor" {
		t.Errorf("unknown advisor: %v", err)
	}
	set := op("advisor", "set", "@80")
	set.Params = append(set.Params, config.P("advisor", "http"))
	set.Params = append(set.Params, config.P("fall", "0"))
	if err := h.apply(set); lb.FieldOf(err) != "fall" {
		t.Errorf("fall 0: %v", err)
	}
	m := op("metric", "add", vip)
	m.Params = append(m.Params, config.P("metrics", "cpuload", "memload"))
	h.mustApply(m)
	c = h.config()
	if cl := c.Cluster(netip.MustParseAddr(vip)); cl.Proportions != (lb.Proportions{Active: 49, New: 49, Port: 1, System: 1}) || len(cl.Metrics) != 2 {
		t.Errorf("after metric add: %+v", cl)
	}
	if err := h.apply(m); lb.FieldOf(err) != "metric" {
		t.Errorf("metric added twice: %v", err)
	}
	p := op("cluster", "set", vip)
	p.Params = append(p.Params, config.P("proportions", "30", "30", "30", "5"))
	if err := h.apply(p); lb.FieldOf(err) != "proportions" {
		t.Errorf("proportions summing to 95: %v", err)
	}
	ms := op("metric", "set", "")
	ms.Params = append(ms.Params, config.P("source", "prometheus"))
	h.mustApply(ms)
	if c := h.config(); c.MetricServer.Port != lb.DefaultPrometheusPort || c.MetricServer.Path != "/metrics" {
		t.Errorf("prometheus source defaults: %+v", c.MetricServer)
	}
	// All of it survives a restart.
	before := h.config()
	h.restart()
	if got := h.config(); got.Manager != before.Manager || len(got.Advisors) != 1 || got.MetricServer != before.MetricServer {
		t.Errorf("after restart: %+v", got)
	}
}

// TestExecProgramWarning: an exec advisor whose program this host cannot
// run is accepted (the program may be installed later) with a warning
// naming why; one that can run, and changes that do not touch the
// advisor, warn of nothing.
func TestExecProgramWarning(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "check")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho 5\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, program, want string
	}{
		{"runs", script, ""},
		{"missing", filepath.Join(dir, "missing"), "cannot run its program: stat " + filepath.Join(dir, "missing") + ": no such file or directory"},
		{"a directory", dir, "cannot run its program: not a regular file"},
		{"not executable", plain, "cannot run its program: not executable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarnessWith(t, t.TempDir(), func(o *Options) {
				o.NewAdvisor = func(lb.Advisor) (advisors.Advisor, error) { return newFakeProber(), nil }
			})
			base(h)
			start := op("advisor", "start", vip+"@80")
			start.Params = append(start.Params, config.P("advisor", "exec"), config.P("program", tc.program))
			a, err := h.e.ApplyWithNotes(context.Background(), []config.Op{start})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == "" && len(a.Warnings) != 0:
				t.Errorf("warnings %q; want none", a.Warnings)
			case tc.want != "" && (len(a.Warnings) != 1 || !strings.Contains(a.Warnings[0], tc.want) ||
				!strings.Contains(a.Warnings[0], "exec@"+vip+"@80") || !strings.Contains(a.Warnings[0], "keep their state")):
				t.Errorf("warnings %q; want one naming the advisor and %q", a.Warnings, tc.want)
			}
			a, err = h.e.ApplyWithNotes(context.Background(), []config.Op{op("port", "add", vip+"@8443")})
			if err != nil || len(a.Warnings) != 0 {
				t.Errorf("an unrelated change: %v, warnings %q; want none", err, a.Warnings)
			}
		})
	}
}

// TestFirstVerdictUpUpdatesNothing: a server's first verdict of up changes
// nothing the executor holds (an unknown server takes connections as an up
// one does), so it costs no update; a down verdict, and up again after it,
// do update at once.
func TestFirstVerdictUpUpdatesNothing(t *testing.T) {
	h, fp, _ := newManagedHarness(t)
	base(h)
	updates := func() int {
		h.dp.mu.Lock()
		defer h.dp.mu.Unlock()
		return len(h.dp.updated)
	}
	start := op("advisor", "start", "@80")
	start.Params = append(start.Params, config.P("advisor", "connect"), config.P("interval", "0.1"), config.P("rise", "1"), config.P("fall", "1"))
	h.mustApply(start)
	before := updates()
	eventually(t, "first verdicts", func() bool {
		a := h.advisorStates(80)
		return len(a) == 2 && a[s2Addr].State == lb.AdvisorUp && a[netip.MustParseAddr("198.18.0.21")].State == lb.AdvisorUp
	})
	time.Sleep(300 * time.Millisecond) // more results, all up
	if n := updates() - before; n != 0 {
		t.Errorf("%d executor updates for first verdicts of up; want none", n)
	}
	fp.set(s2Addr, true, 0)
	eventually(t, "s2 failed", func() bool { return !h.accepts(s2Addr, 80) })
	fp.set(s2Addr, false, 0)
	eventually(t, "s2 back", func() bool { return h.accepts(s2Addr, 80) })
}

// TestMetricCheck: a change that leaves metrics the source cannot fetch
// is refused, changing nothing; the check runs when the metric settings
// or the metrics asked for change, not for other changes.
func TestMetricCheck(t *testing.T) {
	var checked [][]string
	bad := map[string]bool{"bad{": true}
	h := newHarnessWith(t, t.TempDir(), func(o *Options) {
		o.CheckMetrics = func(ms lb.MetricServer, names []string) error {
			checked = append(checked, names)
			for _, n := range names {
				if bad[n] {
					return lb.Errorf("metric", n, "does not parse")
				}
			}
			if ms.SecretFile == "/missing" {
				return lb.Errorf("secretfile", ms.SecretFile, "cannot be read")
			}
			return nil
		}
	})
	base(h)
	add := func(names ...string) config.Op {
		m := op("metric", "add", vip)
		m.Params = append(m.Params, config.P("metrics", names...))
		return m
	}
	secret := func(f string) config.Op {
		s := op("metric", "set", "")
		s.Params = append(s.Params, config.P("secretfile", f))
		return s
	}
	steps := []struct {
		name    string
		op      config.Op
		field   string   // the refusal's field; "" accepted
		checked []string // the names checked; nil: no check
	}{
		{"a secret file, no metrics yet", secret("/missing"), "", nil},
		{"a metric, the secret missing", add("cpuload"), "secretfile", []string{"cpuload"}},
		{"the secret mended", secret("/etc/dlb/metric.secret"), "", nil},
		{"a metric", add("cpuload"), "", []string{"cpuload"}},
		{"a query that does not parse", add("bad{"), "metric", []string{"bad{", "cpuload"}},
		{"a change of something else", op("port", "add", vip+"@8080"), "", nil},
		{"the secret broken again", secret("/missing"), "secretfile", []string{"cpuload"}},
	}
	for _, s := range steps {
		checked = nil
		before := h.config()
		err := h.apply(s.op)
		if lb.FieldOf(err) != s.field || (err == nil) != (s.field == "") {
			t.Errorf("%s: %v, want a refusal of field %q", s.name, err, s.field)
		}
		if err != nil && !reflect.DeepEqual(h.config(), before) {
			t.Errorf("%s: refused, yet the configuration changed", s.name)
		}
		if (len(checked) > 0) != (s.checked != nil) || s.checked != nil && !slices.Equal(checked[len(checked)-1], s.checked) {
			t.Errorf("%s: checked %q, want %q", s.name, checked, s.checked)
		}
	}
}
