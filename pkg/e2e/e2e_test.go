package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// checkShares fails unless every backend's share of r is within ±5
// percentage points of its weight's share.
func checkShares(t *testing.T, r loadResult, weights map[string]int) {
	t.Helper()
	total := 0
	for _, w := range weights {
		total += w
	}
	for name, w := range weights {
		want := float64(w) / float64(total)
		got := float64(r.PerBackend[name]) / float64(r.OK)
		t.Logf("%s: %d replies, share %.1f%%, weight share %.1f%%", name, r.PerBackend[name], 100*got, 100*want)
		if math.Abs(got-want) > 0.05 {
			t.Errorf("%s has %.1f%% of the connections, want %.1f%% ± 5", name, 100*got, 100*want)
		}
	}
}

func reasons(r api.ExecutorReport) map[string]uint64 {
	m := map[string]uint64{}
	for _, rc := range r.Reasons {
		m[rc.Reason] = rc.Packets
	}
	return m
}

// TestPrivilegedE2EForwarding moves real TCP through the VIP: every
// connection is answered, straight from the backends, in proportion to the
// weights, and the shares follow a weight change made with dlbctl.
func TestPrivilegedE2EForwarding(t *testing.T) {
	parallel(t)
	l := newLab(t, 3)
	l.startDlbd()
	l.configure("generic", 10, 10, 10)

	r := l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "3000", "-c", "20")
	if r.Failed != 0 || r.OK != 3000 {
		t.Fatalf("%d of %d requests failed: %v", r.Failed, r.Requests, r.Errors)
	}
	checkShares(t, r, map[string]int{"b1": 10, "b2": 10, "b3": 10})

	// The dispatcher scheduled exactly the connections the client made,
	// one per backend reply.
	byAddr := map[string]api.ServerReport{}
	for _, s := range l.servers() {
		byAddr[s.Address] = s
	}
	for i := 1; i <= 3; i++ {
		s := byAddr[l.backend(i)]
		if got, want := s.NewConnections, uint64(r.PerBackend[fmt.Sprintf("b%d", i)]); got != want {
			t.Errorf("b%d: dlbd counted %d new connections, the client got %d replies from it", i, got, want)
		}
		if s.State != api.StateUp || s.Packets == 0 || s.Bytes == 0 {
			t.Errorf("b%d report %+v", i, s)
		}
	}

	// Replies go straight from the backends to the client: the dispatcher
	// sees (almost) nothing but the client's packets, and forwards them.
	ex := l.executor()
	rs := reasons(ex)
	fwd := rs["fwd_tx"]
	if fwd < 3000*4 {
		t.Errorf("only %d packets forwarded for 3000 connections", fwd)
	}
	if other := ex.Packets - fwd; float64(other) > 0.01*float64(fwd) {
		t.Errorf("the dispatcher saw %d packets it did not forward (%v), against %d forwarded: replies are not direct", other, rs, fwd)
	}
	if rs["pass_not_vip"] > 50 {
		t.Errorf("%d packets to non-VIP addresses reached the dispatcher: replies are not direct", rs["pass_not_vip"])
	}
	t.Logf("executor: %d packets seen, %d forwarded, reasons %v", ex.Packets, fwd, rs)

	// Change the weights; the shares follow.
	for i, w := range []int{5, 10, 15} {
		l.mustCtl("server", "set", fmt.Sprintf("%s@80@%s", l.vip(), l.backend(i+1)), "--weight", fmt.Sprint(w))
	}
	r = l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "3000", "-c", "20")
	if r.Failed != 0 {
		t.Fatalf("%d requests failed after the weight change: %v", r.Failed, r.Errors)
	}
	checkShares(t, r, map[string]int{"b1": 5, "b2": 10, "b3": 15})
}

// TestPrivilegedE2EServerDown marks a server down while it holds slow
// connections: no new connection goes to it, and its established ones
// finish; "server up" brings it back.
func TestPrivilegedE2EServerDown(t *testing.T) {
	parallel(t)
	l := newLab(t, 3)
	l.startDlbd()
	l.configure("generic", 10, 10, 10)
	b1 := fmt.Sprintf("%s@80@%s", l.vip(), l.backend(1))

	slow := make(chan loadResult, 1)
	go func() {
		r, err := l.load(context.Background(), "-url", "http://"+l.vip()+"/slow?ms=4000", "-n", "30", "-c", "30", "-timeout", "10s")
		if err != nil {
			t.Error(err)
		}
		slow <- r
	}()
	time.Sleep(1500 * time.Millisecond) // the slow connections are established
	l.mustCtl("server", "down", b1)

	r := l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "1000", "-c", "20")
	if r.Failed != 0 {
		t.Errorf("%d new connections failed while b1 was down: %v", r.Failed, r.Errors)
	}
	if r.PerBackend["b1"] != 0 {
		t.Errorf("b1 is down but got %d new connections", r.PerBackend["b1"])
	}
	sr := <-slow
	if sr.Failed != 0 || sr.OK != 30 {
		t.Errorf("established slow connections: %d ok, %d failed: %v", sr.OK, sr.Failed, sr.Errors)
	}
	if sr.PerBackend["b1"] == 0 {
		t.Errorf("no slow connection was on b1 (%v): the test proves nothing", sr.PerBackend)
	}
	t.Logf("slow connections finished: %v; new ones while b1 down: %v", sr.PerBackend, r.PerBackend)
	var srv []api.ServerReport
	l.report(&srv, "server", "report", b1)
	if srv[0].State != api.StateDown {
		t.Errorf("b1 state %q", srv[0].State)
	}

	l.mustCtl("server", "up", b1)
	r = l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "1500", "-c", "20")
	if r.Failed != 0 || r.PerBackend["b1"] == 0 {
		t.Errorf("after server up: %d failed, b1 got %d", r.Failed, r.PerBackend["b1"])
	}
}

// TestPrivilegedE2EKillDlbd SIGKILLs dlbd under traffic: no connection
// fails, and the restarted dlbd adopts the pinned link, maps and program.
func TestPrivilegedE2EKillDlbd(t *testing.T) {
	parallel(t)
	l := newLab(t, 3)
	l.startDlbd()
	l.configure("generic", 10, 10, 10)
	before := l.executor()
	connsID := testutil.PinnedMapID(t, filepath.Join(l.pinDir, "conns"))

	load := make(chan loadResult, 1)
	go func() {
		r, err := l.load(context.Background(), "-url", "http://"+l.vip()+"/", "-duration", "8s", "-c", "10")
		if err != nil {
			t.Error(err)
		}
		load <- r
	}()
	time.Sleep(2 * time.Second)
	l.killDlbd(syscall.SIGKILL)
	time.Sleep(1500 * time.Millisecond) // forwarding without any dlbd
	l.startDlbd()
	r := <-load
	t.Logf("load across SIGKILL and restart: %d requests, %d failed", r.Requests, r.Failed)
	if r.Failed != 0 || r.OK < 1000 {
		t.Errorf("%d of %d connections failed across the kill: %v", r.Failed, r.Requests, r.Errors)
	}

	after := l.executor()
	if !after.Attached || after.LinkID != before.LinkID {
		t.Errorf("restarted dlbd: attached %v link %d, want the pinned link %d", after.Attached, after.LinkID, before.LinkID)
	}
	// The same dlbd's program is adopted, not loaded (and verified) again.
	if after.ProgramID != before.ProgramID {
		t.Errorf("program %d replaced by %d on restart, want it adopted", before.ProgramID, after.ProgramID)
	}
	if log := l.dlbdLog(); !strings.Contains(log, "adopted the pinned executor program") {
		t.Errorf("the restarted dlbd did not log that it adopted the program:\n%s", log)
	}
	if id := testutil.PinnedMapID(t, filepath.Join(l.pinDir, "conns")); id != connsID {
		t.Errorf("connection table map %d after restart, was %d", id, connsID)
	}
	if after.Connections == 0 {
		t.Error("connection table empty after restart")
	}
	t.Logf("link %d kept; program %d, %d after; conns map %d kept with %d entries", before.LinkID, before.ProgramID, after.ProgramID, connsID, after.Connections)

	// The restarted dlbd manages the executor: a change takes effect.
	l.mustCtl("server", "down", fmt.Sprintf("%s@80@%s", l.vip(), l.backend(3)))
	r = l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "600", "-c", "20")
	if r.Failed != 0 || r.PerBackend["b3"] != 0 {
		t.Errorf("after restart: %d failed, b3 (down) got %d", r.Failed, r.PerBackend["b3"])
	}
}

// TestPrivilegedE2EUpgradeAcrossABI: dlbd started over an executor that
// a dlbd of another version pinned (an upgrade that changed the
// executor's maps; here its config map has another layout) takes its
// place on the same link instead of refusing it: the keep-alive
// connections through the cluster go on, each to its server (the Maglev
// table is the same), none broken, the new maps are pinned, the event
// executorReplaced runs its script, and dlbd manages the executor. Before, the old executor forwarded on unmanaged
// (no advisor, no change reached it) until "dlbctl executor stop", which
// broke every connection.
func TestPrivilegedE2EUpgradeAcrossABI(t *testing.T) {
	parallel(t)
	l := newLab(t, 2)
	scripts, events := eventScripts(t, []string{"executorReplaced"}, "DLB_INTERFACE", "DLB_REASON")
	l.startDlbd("--scripts-dir", scripts)
	l.configure("generic", 10, 10)
	before := l.executor()
	connsID := testutil.PinnedMapID(t, filepath.Join(l.pinDir, "conns"))

	load := l.keepAlive("http://"+l.vip()+"/", "10s")
	time.Sleep(1500 * time.Millisecond)
	l.killDlbd(syscall.SIGTERM)
	pinOtherVersion(t, l.pinDir)
	l.startDlbd("--scripts-dir", scripts)
	// While they run, the keep-alive connections enter the new table
	// (the report counts them at dlbd's sweeps, every 2 s).
	waitFor(t, 5*time.Second, "the new connection table to hold the 40 keep-alive connections", func() bool {
		return l.executor().Connections >= 40
	})
	checkKeptAlive(t, "the replacement", <-load)
	after := l.executor()
	if !after.Attached || after.LinkID != before.LinkID || after.ProgramID == before.ProgramID {
		t.Errorf("after the replacement: attached %v, link %d program %d; want link %d with a new program (was %d)",
			after.Attached, after.LinkID, after.ProgramID, before.LinkID, before.ProgramID)
	}
	if id := testutil.PinnedMapID(t, filepath.Join(l.pinDir, "conns")); id == connsID {
		t.Errorf("the older executor's connection table (map %d) is still pinned", id)
	}
	if log := l.dlbdLog(); !strings.Contains(log, "replaced the executor a dlbd of another version had pinned") {
		t.Errorf("dlbd did not log the replacement:\n%s", log)
	}
	want := "executorReplaced " + l.env["LAB_IF"] + " the pinned executor's maps were of another version"
	waitFor(t, 3*time.Second, "the executorReplaced event script", func() bool {
		b, _ := os.ReadFile(events)
		return strings.Contains(string(b), want)
	})
	// dlbd manages the executor it put in place: a change takes effect.
	l.mustCtl("server", "down", fmt.Sprintf("%s@80@%s", l.vip(), l.backend(2)))
	r := l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "200", "-c", "10")
	if r.Failed != 0 || r.PerBackend["b2"] != 0 {
		t.Errorf("after the replacement: %d failed, b2 (down) got %d", r.Failed, r.PerBackend["b2"])
	}
}

// pinOtherVersion makes the executor pinned under pinDir look like
// another version's, as after an upgrade that changed the executor's
// maps: its config map gets another layout.
func pinOtherVersion(t *testing.T, pinDir string) {
	t.Helper()
	cfgPin := filepath.Join(pinDir, "config")
	if err := os.Remove(cfgPin); err != nil {
		t.Fatal(err)
	}
	other, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Pin(cfgPin); err != nil {
		t.Fatal(err)
	}
}

// configView is the configuration part of the reports (no counters), for
// comparing two dlbds.
func configView(t *testing.T, l *lab) string {
	t.Helper()
	var b strings.Builder
	ex := l.executor()
	fmt.Fprintf(&b, "executor started=%v if=%s mode=%s nfa=%s nfa6=%s gw=%s gw6=%s fin=%d\n", ex.Started, ex.Interface, ex.XDPMode,
		ex.NFA, ex.NFA6, ex.ClientGateway, ex.ClientGateway6, ex.FinTimeout)
	var cls []api.ClusterReport
	l.report(&cls, "cluster", "report")
	for _, c := range cls {
		fmt.Fprintf(&b, "cluster %s configure=%v ports=%d\n", c.Address, c.Configure, c.Ports)
	}
	var ports []api.PortReport
	l.report(&ports, "port", "report")
	for _, p := range ports {
		fmt.Fprintf(&b, "port %s@%d %s %s sticky=%d/%d/%d/%s halfopen=%d stale=%d bound=%d servers=%d\n", p.Cluster, p.Port, p.Protocol, p.Method,
			p.StickyTime, p.StickyMask, p.CrossPort, p.SelectionAlgorithm, p.MaxHalfOpen, p.StaleTimeout, p.WeightBound, p.Servers)
	}
	for _, s := range l.servers() {
		fmt.Fprintf(&b, "server %s@%d@%s weight=%d state=%s nat=%d/%s/%s\n", s.Cluster, s.Port, s.Address, s.Weight, s.State,
			s.MapPort, s.ReturnAddress, s.Router)
	}
	return b.String()
}

// TestPrivilegedE2EStateAndFiles: the configuration survives a dlbd
// restart, and "file save" then "file load" into a fresh dlbd reproduces
// it.
func TestPrivilegedE2EStateAndFiles(t *testing.T) {
	parallel(t)
	l := newLab(t, 3)
	l.startDlbd()
	l.configure("generic", 5, 10, 15)
	l.mustCtl("port", "add", l.vip()+"@53", "--protocol", "udp", "--staletimeout", "30", "--weightbound", "10")
	l.mustCtl("server", "add", fmt.Sprintf("%s@53@%s+%s", l.vip(), l.backend(1), l.backend(2)), "--weight", "7")
	l.mustCtl("server", "down", fmt.Sprintf("%s@80@%s", l.vip(), l.backend(2)))
	l.mustCtl("executor", "set", "fintimeout", "30")
	l.waitServersUp()
	want := configView(t, l)
	t.Logf("configuration:\n%s", want)

	l.killDlbd(syscall.SIGTERM)
	l.startDlbd()
	l.waitServersUp()
	if got := configView(t, l); got != want {
		t.Errorf("after restart:\n%s\nwant:\n%s", got, want)
	}

	file := filepath.Join(l.run, "dlb.cfg")
	l.mustCtl("file", "save", file)
	l.mustCtl("executor", "stop")
	l.killDlbd(syscall.SIGTERM)

	// A fresh dlbd: no state, nothing pinned.
	l.state = filepath.Join(l.run, "state2")
	l.startDlbd()
	if got := l.executor(); got.Started || len(l.servers()) != 0 {
		t.Fatalf("fresh dlbd is not empty: %+v", got)
	}
	l.mustCtl("file", "load", file)
	l.waitServersUp()
	if got := configView(t, l); got != want {
		t.Errorf("after file load into a fresh dlbd:\n%s\nwant:\n%s", got, want)
	}
	r := l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "600", "-c", "20")
	if r.Failed != 0 || r.PerBackend["b2"] != 0 {
		t.Errorf("after file load: %d failed, b2 (down) got %d", r.Failed, r.PerBackend["b2"])
	}
}

// TestPrivilegedE2ENeighborRefresh changes a backend's MAC address: the
// dispatcher learns the new one from the neighbour table and keeps
// forwarding to it.
func TestPrivilegedE2ENeighborRefresh(t *testing.T) {
	parallel(t)
	l := newLab(t, 3)
	l.startDlbd()
	l.configure("generic", 10, 10, 10)
	const newMAC = "02:d1:b0:00:00:99"
	if out, err := l.inNS("b1", "ip", "link", "set", "dlbeth0", "address", newMAC); err != nil {
		t.Fatalf("changing b1's MAC: %v: %s", err, out)
	}
	// b1 talks to the dispatcher once; its ARP request updates the
	// dispatcher's neighbour entry.
	_, _ = l.inNS("b1", "bash", "-c", "exec 3<>/dev/tcp/"+l.env["LAB_NFA"]+"/9 || true")

	b1 := fmt.Sprintf("%s@80@%s", l.vip(), l.backend(1))
	deadline := time.Now().Add(10 * time.Second)
	for {
		var srv []api.ServerReport
		l.report(&srv, "server", "report", b1)
		if srv[0].MAC == newMAC {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b1's MAC still %s after 10 s", srv[0].MAC)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r := l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "900", "-c", "20", "-timeout", "1s")
	if r.Failed != 0 || r.PerBackend["b1"] < 200 {
		t.Errorf("after b1's MAC changed: %d failed, b1 got %d: %v", r.Failed, r.PerBackend["b1"], r.Errors)
	}
}

// TestPrivilegedE2ENativeMode runs the executor in native (driver) XDP
// mode on the veth.
func TestPrivilegedE2ENativeMode(t *testing.T) {
	alone(t)
	l := newLab(t, 3)
	l.startDlbd()
	l.configure("native", 10, 10, 10)
	if m := l.executor().AttachedMode; m != "native" {
		t.Fatalf("attached in %q mode", m)
	}
	r := l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "2000", "-c", "20", "-timeout", "1s")
	if r.Failed != 0 {
		t.Fatalf("%d of %d requests failed in native mode: %v", r.Failed, r.Requests, r.Errors)
	}
	checkShares(t, r, map[string]int{"b1": 10, "b2": 10, "b3": 10})
}

// TestPrivilegedLabDownStale: "lab.sh down --stale" (make demo's cleanup of
// a lab a killed demo left) stops what still runs in the lab's namespaces,
// which plain "down" only warns about.
func TestPrivilegedLabDownStale(t *testing.T) {
	parallel(t)
	l := newLabPrefix(t, "dlbk", "-n", "1", "-c", "1")
	// A process lab.sh did not start, as a killed demo's dlbd is.
	left := exec.Command("nsenter", "--net=/run/netns/"+l.env["LAB_DISPATCHER_NS"], "sleep", "300")
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- left.Wait() }()
	t.Cleanup(func() { _ = left.Process.Kill() })
	out, err := l.script("down", "--stale").CombinedOutput()
	if err != nil {
		t.Fatalf("lab down --stale: %v\n%s", err, out)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("the process left in the dispatcher's namespace ended by itself, not stopped")
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the process left in the dispatcher's namespace still runs after down --stale:\n%s", out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("stopped what was left in %s (pids %d)", l.env["LAB_DISPATCHER_NS"], left.Process.Pid)) {
		t.Errorf("down --stale did not say what it stopped:\n%s", out)
	}
	if ns, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(ns), l.prefix) {
		t.Errorf("namespaces left: %s", ns)
	}
}
