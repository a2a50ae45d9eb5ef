package e2e

// End-to-end tests of issue 9's faults 3 to 8 (the host's network changing
// under dlbd, probes' source addresses, NAT without a route, what a
// refused change leaves behind) and of faults found later (10: files
// deleted under dlbd; 11: its interface renamed), through dlbd and dlbctl
// in a lab. Each logs the figure it measured. Faults 1 and 2 are cmd/dlbd's
// TestPrivilegedOneDlbdPerDir and TestPrivilegedSocketLifecycle; the API's
// limits (8) are pkg/server's tests; IBM's forms (9) cmd/dlbctl's.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
)

// poll checks cond every 10 ms for up to limit and returns how long it
// took, or fails the test: for a cond that is cheap (a file, a map, a
// netlink read) and a time that is measured.
func poll(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return pollEvery(t, 10*time.Millisecond, limit, what, cond)
}

// waitFor is poll every 200 ms: for a cond that runs a command or asks
// dlbd (a report, a probe's result), whose time is not measured.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return pollEvery(t, 200*time.Millisecond, limit, what, cond)
}

// pollEvery checks cond every step for up to limit and returns how long
// it took, or fails the test naming what it waited for.
func pollEvery(t *testing.T, step, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("after %v: still waiting for %s", limit, what)
		}
		time.Sleep(step)
	}
	return time.Since(start)
}

// mustNS runs a command in a lab namespace and fails the test if it fails.
func (l *lab) mustNS(role string, args ...string) string {
	l.t.Helper()
	return l.mustNSFor(l.t, role, args...)
}

// mustNSFor is mustNS failing t (a subtest of the lab's test, whose
// goroutine may not fail its parent).
func (l *lab) mustNSFor(t testing.TB, role string, args ...string) string {
	t.Helper()
	out, err := l.inNS(role, args...)
	if err != nil {
		t.Fatalf("%s: %v: %v\n%s", role, args, err, out)
	}
	return out
}

// removeSubnetRoute deletes the dispatcher's route to the lab's subnet and
// returns a function that puts back exactly the route there was (its
// source address may be the NFA or another address of the subnet).
func (l *lab) removeSubnetRoute() (restore func()) {
	l.t.Helper()
	ifname, subnet := l.env["LAB_IF"], l.env["LAB_SUBNET"]
	route := strings.Fields(l.mustNS("d", "ip", "route", "show", "exact", subnet, "dev", ifname))
	if len(route) == 0 {
		l.t.Fatalf("no route to %s on %s", subnet, ifname)
	}
	l.mustNS("d", "ip", "route", "del", subnet, "dev", ifname)
	return func() {
		l.t.Helper()
		l.mustNS("d", append(append([]string{"ip", "route", "add"}, route...), "dev", ifname)...)
	}
}

// hasAddr reports whether the dispatcher's lab interface holds addr as a
// host address (/32 or /128).
func (l *lab) hasAddr(addr string) bool {
	out, err := l.inNS("d", "ip", "-o", "addr", "show", "dev", l.env["LAB_IF"])
	if err != nil {
		return false
	}
	bits := "/32"
	if strings.Contains(addr, ":") {
		bits = "/128"
	}
	return strings.Contains(out, " "+addr+bits+" ")
}

// configure6 balances the lab's IPv6 VIP on port 80 over n backends (the
// executor started already), with the IPv6 NFA set.
func (l *lab) configure6(n int) string {
	l.t.Helper()
	vip6 := l.env["LAB_VIP6"]
	l.mustCtl("executor", "set", "nfa", l.env["LAB_NFA6"])
	l.mustCtl("cluster", "add", vip6, "--configure")
	l.mustCtl("port", "add", vip6+"@80")
	for i := 1; i <= n; i++ {
		l.mustCtl("server", "add", vip6+"@80@"+l.env[fmt.Sprintf("LAB_B%d_ADDR6", i)])
	}
	l.waitServersUp()
	return vip6
}

// TestPrivilegedE2EFault3AddressesAfterDownUp: the kernel drops an
// interface's IPv6 addresses when it goes down; dlbd puts back the cluster
// addresses it configured (both families), after a down/up while it runs
// and after one while it was not running, and clients of both families
// connect again.
func TestPrivilegedE2EFault3AddressesAfterDownUp(t *testing.T) {
	parallel(t)
	l := newLabArgs(t, "-n", "2", "-c", "1", "-6")
	l.startDlbd()
	l.configure("generic", 10, 10)
	vip6 := l.configure6(2)
	ifname, nfa6 := l.env["LAB_IF"], l.env["LAB_NFA6"]
	urls := []string{"http://" + l.vip() + "/", "http://[" + vip6 + "]/"}
	check := func(when string) {
		t.Helper()
		for _, u := range urls {
			if r := l.mustLoad("-url", u, "-n", "200", "-c", "10", "-timeout", "2s"); r.OK != 200 {
				t.Errorf("%s: %s: %d of 200 answered: %v", when, u, r.OK, r.Errors)
			}
		}
	}
	check("before")
	// downUp sets the interface down and up and puts the lab's own NFA6
	// back, as the host's network configuration would; dlbd's addresses
	// are dlbd's to restore.
	downUp := func() time.Time {
		l.mustNS("d", "ip", "link", "set", ifname, "down")
		l.mustNS("d", "ip", "link", "set", ifname, "up")
		up := time.Now()
		l.mustNS("d", "ip", "-6", "addr", "replace", nfa6+"/64", "dev", ifname, "nodad")
		return up
	}
	for round := 1; round <= 3; round++ {
		up := downUp()
		took := poll(t, 5*time.Second, "the IPv6 cluster address back", func() bool { return l.hasAddr(vip6) })
		took += time.Since(up) - took // measured from the interface coming up
		if !l.hasAddr(l.vip()) {
			t.Errorf("round %d: the IPv4 cluster address is gone", round)
		}
		t.Logf("round %d: IPv6 cluster address back on %s %v after it came up", round, ifname, took.Round(time.Millisecond))
		check(fmt.Sprintf("round %d", round))
	}
	var cl []api.ClusterReport
	l.report(&cl, "cluster", "report")
	for _, c := range cl {
		if !c.Configure {
			t.Errorf("cluster %s no longer configured", c.Address)
		}
	}
	if !strings.Contains(l.dlbdLog(), "restored an address dlbd configured") {
		t.Error("dlbd did not log the addresses it restored")
	}

	// A down/up while no dlbd runs: the next one puts the address back.
	l.killDlbd(syscall.SIGKILL)
	downUp()
	if l.hasAddr(vip6) {
		t.Fatal("the kernel kept the IPv6 address over down/up; the test proves nothing")
	}
	l.startDlbd()
	took := poll(t, 5*time.Second, "the IPv6 cluster address back after dlbd started", func() bool { return l.hasAddr(vip6) })
	t.Logf("after a down/up while dlbd was not running: address back %v after dlbd answered", took.Round(time.Millisecond))
	check("after the restart")
}

// holdConnections opens n keep-alive connections from the first client to
// the cluster address, each sending a request every 100 ms for d (a
// request may take 10 s), and returns after a second, when they are
// established; the channel gets what they saw.
func (l *lab) holdConnections(ctx context.Context, n int, d time.Duration) <-chan loadResult {
	held := make(chan loadResult, 1)
	go func() {
		r, _ := l.load(ctx, "-keepalive", "-url", "http://"+l.vip()+"/", "-duration", d.String(), "-c", strconv.Itoa(n),
			"-interval", "100ms", "-timeout", "10s")
		held <- r
	}()
	time.Sleep(time.Second)
	return held
}

// checkHeld waits for the end of holdConnections' connections and checks
// that all n held, none broken.
func checkHeld(t *testing.T, held <-chan loadResult, n int) {
	t.Helper()
	r := <-held
	t.Logf("established keep-alive connections: %d held, %d broken, %d requests, %d failed", r.Connections, r.Broken, r.Requests, r.Failed)
	if r.Connections != n || r.Broken != 0 {
		t.Errorf("established connections: %d of %d held, %d broken", r.Connections, n, r.Broken)
	}
}

// checkNewConnections opens 300 new connections to the cluster address
// (10 at a time) and checks that all were answered; when says when, for
// the error.
func (l *lab) checkNewConnections(t *testing.T, when string) {
	t.Helper()
	if r := l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "300", "-c", "10"); r.OK != 300 {
		t.Errorf("new connections %s: %d of 300 answered: %v", when, r.OK, r.Errors)
	}
}

// TestPrivilegedE2EFault4InterfaceRecreated: the executor's interface is
// deleted and created again. dlbd reports the executor detached (and runs
// executorDetached), attaches to the new interface keeping its maps (so
// established connections survive), puts its addresses back; a dlbd
// started while the interface is gone waits for it the same way; and
// "executor stop" leaves no pin and says what it removed.
func TestPrivilegedE2EFault4InterfaceRecreated(t *testing.T) {
	parallel(t)
	l := newLab(t, 2)
	scripts, events := eventScripts(t, []string{"executorDetached", "executorAttached"}, "DLB_INTERFACE", "DLB_REASON")
	l.startDlbd("--scripts-dir", scripts)
	l.configure("generic", 10, 10)
	ifname, vip := l.env["LAB_IF"], l.vip()
	before := l.executor()
	// The guard (a tc filter that keeps the host from resetting
	// connections to the cluster address while no executor takes them)
	// is on the interface, and must be on the new one.
	guarded := func() bool {
		out, _ := l.inNS("d", "tc", "filter", "show", "dev", ifname, "ingress")
		return strings.Contains(out, "dlb_guard")
	}
	if !guarded() {
		t.Fatal("no guard on the executor's interface before the fault; the check below proves nothing")
	}

	// Established connections, held through the whole episode.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := l.holdConnections(ctx, 8, 8*time.Second)

	l.mustNS("d", "ip", "link", "del", ifname)
	deleted := time.Now()
	var ex api.ExecutorReport
	took := poll(t, 3*time.Second, "the executor reported detached", func() bool {
		ex = l.executor()
		return ex.State == api.ExecutorDetached
	})
	t.Logf("interface deleted: executor reported %q after %v: %s", ex.State, took.Round(time.Millisecond), ex.Detached)
	if ex.Attached || !strings.Contains(ex.Detached, ifname+" was deleted") || ex.DetachedSince == "" {
		t.Errorf("executor report while detached: attached %v, detached %q since %q", ex.Attached, ex.Detached, ex.DetachedSince)
	}
	if out, _, _ := l.ctl("executor", "report"); !strings.Contains(out, "detached (interface "+ifname+" was deleted") {
		t.Errorf("executor report's table does not say detached:\n%s", out)
	}
	time.Sleep(300 * time.Millisecond)
	if out, err := l.script("relink", "d").CombinedOutput(); err != nil {
		t.Fatalf("relink: %v\n%s", err, out)
	}
	took = poll(t, 5*time.Second, "the executor attached to the new interface", func() bool {
		ex = l.executor()
		return ex.State == api.ExecutorAttached && l.hasAddr(vip)
	})
	t.Logf("interface created again: attached to ifindex %d (was %d) and cluster address back %v after; detached for %v in all",
		ex.Ifindex, before.Ifindex, took.Round(time.Millisecond), time.Since(deleted).Round(time.Millisecond))
	if ex.Ifindex == before.Ifindex || !ex.Attached {
		t.Errorf("executor after the interface returned: attached %v to ifindex %d (was %d)", ex.Attached, ex.Ifindex, before.Ifindex)
	}
	if !guarded() {
		t.Error("no guard on the new interface: the host would reset connections to the cluster address while the executor is detached")
	}
	l.checkNewConnections(t, "after re-attaching")
	checkHeld(t, held, 8)
	// The lab's dispatcher has one interface: a frame redirected went
	// to the deleted interface's index (maps written after the attach).
	for _, rc := range l.executor().Reasons {
		if rc.Reason == "fwd_redirect" && rc.Packets > 0 {
			t.Errorf("%d frames redirected to another interface (the old one's index) after re-attaching", rc.Packets)
		}
	}
	poll(t, 3*time.Second, "both event scripts", func() bool {
		b, _ := os.ReadFile(events)
		return strings.Contains(string(b), "executorDetached "+ifname) && strings.Contains(string(b), "executorAttached "+ifname)
	})

	// A dlbd that starts while the interface is gone: detached, not
	// failed, and attached when the interface returns.
	l.killDlbd(syscall.SIGKILL)
	l.mustNS("d", "ip", "link", "del", ifname)
	l.startDlbd("--scripts-dir", scripts)
	ex = l.executor()
	t.Logf("dlbd started without its interface: state %q (%s), error %q", ex.State, ex.Detached, ex.Error)
	if ex.State != api.ExecutorDetached {
		t.Errorf("dlbd started without its interface: state %q, want %q", ex.State, api.ExecutorDetached)
	}
	if out, err := l.script("relink", "d").CombinedOutput(); err != nil {
		t.Fatalf("relink: %v\n%s", err, out)
	}
	took = poll(t, 5*time.Second, "the executor attached after a restart", func() bool {
		ex = l.executor()
		return ex.State == api.ExecutorAttached && l.hasAddr(vip)
	})
	t.Logf("after a restart without the interface: attached %v after it was created", took.Round(time.Millisecond))
	l.checkNewConnections(t, "after a restart without the interface")

	// executor stop: no pin left, and it says which it removed.
	out := l.mustCtl("executor", "stop")
	t.Logf("executor stop: %s", strings.TrimSpace(out))
	if !strings.Contains(out, "removed ") || !strings.Contains(out, "link") || !strings.Contains(out, "conns") {
		t.Errorf("executor stop did not say what it removed: %q", out)
	}
	if left, _ := os.ReadDir(l.pinDir); len(left) != 0 {
		var names []string
		for _, e := range left {
			names = append(names, e.Name())
		}
		t.Errorf("pins left after executor stop: %v", names)
	}
	l.mustCtl("executor", "start", "--interface", ifname, "--xdp-mode", "generic")
	l.waitServersUp()
	l.checkNewConnections(t, "after stop and start")
}

// serverMAC returns the MAC the executor uses for a server.
func (l *lab) serverMAC(target string) string {
	var r []api.ServerReport
	l.report(&r, "server", "report", target)
	if len(r) != 1 {
		l.t.Fatalf("server report %s: %d servers", target, len(r))
	}
	return r[0].MAC
}

// TestPrivilegedE2EFault5BackendMACChange: a backend's MAC changes without
// any announcement (a replaced NIC, a VM restored elsewhere); dlbd uses
// the new MAC within a second, and new connections fail only meanwhile.
// Under load the backend itself soon reveals its new MAC (it asks for its
// clients' MACs again); idle, nothing does, and dlbd must find it alone.
func TestPrivilegedE2EFault5BackendMACChange(t *testing.T) {
	parallel(t)
	l := newLab(t, 2)
	l.startDlbd()
	l.configure("generic", 10, 10)
	ifname, vip, b1 := l.env["LAB_IF"], l.vip(), l.backend(1)
	target := vip + "@80@" + b1
	macs := []string{"02:d1:b0:00:aa:15", "02:d1:b0:00:bb:15", "02:d1:b0:00:cc:15", l.env["LAB_B1_MAC"]}
	for round, mac := range macs {
		loaded := round%2 == 0
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan loadResult, 1)
		var loadStart time.Time
		run := func() {
			loadStart = time.Now()
			go func() {
				r, _ := l.load(ctx, "-url", "http://"+vip+"/", "-duration", "3s", "-c", "4", "-timeout", "1s")
				done <- r
			}()
		}
		if loaded {
			run()
			time.Sleep(time.Second)
		} else {
			// Nothing in flight to or from b1: its own traffic cannot
			// tell the dispatcher.
			time.Sleep(2 * time.Second)
		}
		l.mustNS("b1", "ip", "link", "set", ifname, "address", mac)
		changed := time.Now()
		if !loaded {
			run()
		}
		took := poll(t, 20*time.Second, "dlbd to use b1's new MAC", func() bool { return l.serverMAC(target) == mac })
		r := <-done
		cancel()
		at := changed.Sub(loadStart).Milliseconds()
		window := "none"
		if r.Failed > 0 {
			window = fmt.Sprintf("%d..%d ms after the change", int64(r.FirstFailMS)-at, int64(r.LastFailMS)-at)
		}
		how := "under load"
		if !loaded {
			how = "idle"
		}
		t.Logf("round %d (%s): b1's MAC -> %s: used %v after the change; %d of %d new connections failed (started %s)",
			round+1, how, mac, took.Round(time.Millisecond), r.Failed, r.Requests, window)
		if took > time.Second {
			t.Errorf("round %d: the new MAC was used %v after the change, want within 1 s", round+1, took)
		}
		if r.Failed > 0 && int64(r.LastFailMS) > at+1000 {
			t.Errorf("round %d: a new connection failed %d ms after the change, want none after 1 s", round+1, int64(r.LastFailMS)-at)
		}
	}
}

// TestPrivilegedE2EFault6IPv6AdvisorsMACMode: IPv6 advisors and metric
// polls in MAC mode leave from the NFA6. The kernel's own choice is the
// /128 cluster address (the longest match), which every backend holds on
// lo and answers to itself: every server would be marked down.
func TestPrivilegedE2EFault6IPv6AdvisorsMACMode(t *testing.T) {
	parallel(t)
	l := newLabArgs(t, "-n", "2", "-c", "1", "-6")
	l.startDlbd()
	l.mustCtl("executor", "start", "--interface", l.env["LAB_IF"], "--xdp-mode", "generic")
	l.mustCtl("executor", "set", "nfa", l.env["LAB_NFA"])
	vip6 := l.configure6(2)
	secret := l.metricSecret()
	for i := 1; i <= 2; i++ {
		l.startMetricd(i, secret, 30)
	}
	l.mustCtl("metric", "set", "--secret-file", secret)
	l.mustCtl("metric", "add", vip6+"@sysload")
	l.mustCtl("advisor", "start", "http", vip6+"@80", "--interval", "0.5", "--fall", "1", "--rise", "1",
		"--connecttimeout", "0.5", "--receivetimeout", "0.5")
	started := time.Now()
	var adv []api.AdvisorReport
	poll(t, 5*time.Second, "every server probed 4 times", func() bool {
		adv = nil
		l.report(&adv, "advisor", "report")
		if len(adv) != 1 || len(adv[0].Servers) != 2 {
			return false
		}
		for _, s := range adv[0].Servers {
			if s.Probes < 4 {
				return false
			}
		}
		return true
	})
	for _, s := range adv[0].Servers {
		t.Logf("advisor http on %s: %s after %d probes (%d failed), load %d ms, last error %q", s.Address, s.State, s.Probes, s.Failures, s.LoadMS, s.LastError)
		if s.State != api.AdvisorUp || s.Failures != 0 {
			t.Errorf("%s: %s, %d of %d probes failed (%s)", s.Address, s.State, s.Failures, s.Probes, s.LastError)
		}
	}
	for _, s := range l.servers() {
		if s.State != api.StateUp {
			t.Errorf("server %s@%d@%s is %s", s.Cluster, s.Port, s.Address, s.State)
		}
	}
	var m api.MetricReport
	poll(t, 10*time.Second, "fresh metric reports from both backends", func() bool {
		l.report(&m, "metric", "report")
		fresh := 0
		for _, s := range m.Servers {
			if !s.Stale && s.Values["sysload"] == 30 {
				fresh++
			}
		}
		return fresh == 2
	})
	for _, s := range m.Servers {
		t.Logf("metric poll of %s: sysload %v, %.1f s old, error %q", s.Address, s.Values["sysload"], s.AgeSeconds, s.LastError)
	}
	t.Logf("probes and polls healthy %v after the advisor started", time.Since(started).Round(time.Millisecond))
	if r := l.mustLoad("-url", "http://["+vip6+"]/", "-n", "200", "-c", "10"); r.OK != 200 {
		t.Errorf("IPv6 clients: %d of 200 answered: %v", r.OK, r.Errors)
	}

	// b1's MAC changes without an announcement: dlbd's own solicitation
	// finds it (its reprobe keeps the entry's MAC meanwhile) and the
	// executor uses the new one within a second.
	target := vip6 + "@80@" + l.env["LAB_B1_ADDR6"]
	const mac = "02:d1:b0:00:aa:16"
	l.mustNS("b1", "ip", "link", "set", l.env["LAB_IF"], "address", mac)
	took := poll(t, 10*time.Second, "dlbd to use b1's new MAC", func() bool { return l.serverMAC(target) == mac })
	t.Logf("b1's IPv6 MAC -> %s: used %v after the change", mac, took.Round(time.Millisecond))
	if took > time.Second {
		t.Errorf("b1's new MAC was used %v after the change, want within 1 s", took)
	}
	l.waitServersUp()
	if r := l.mustLoad("-url", "http://["+vip6+"]/", "-n", "200", "-c", "10"); r.OK != 200 {
		t.Errorf("IPv6 clients after b1's MAC changed: %d of 200 answered: %v", r.OK, r.Errors)
	}
}

// TestPrivilegedE2EFault7NATWithoutRoute: NAT replies need a client
// gateway or forwarding on the interface they arrive on. Without either,
// dlbctl warns when the NAT port is configured (naming both remedies),
// the executor's report shows the condition while it lasts, and either
// remedy clears it and lets clients through. GRO on the interface of this
// generic-mode executor is reported too.
func TestPrivilegedE2EFault7NATWithoutRoute(t *testing.T) {
	parallel(t)
	l := newLabArgs(t, "-n", "1", "-r", "1", "-c", "1")
	ifname, vip := l.env["LAB_IF"], l.vip()
	// lab.sh turns forwarding on for NAT; the operator here has not.
	setForwarding := func(v string) {
		l.mustNS("d", "sysctl", "-q", "-w", "net.ipv4.conf.all.forwarding="+v, "net.ipv4.conf."+ifname+".forwarding="+v)
	}
	setForwarding("0")
	l.startDlbd("--metrics-address", metricsAddr)
	l.mustCtl("executor", "start", "--interface", ifname, "--xdp-mode", "generic")
	l.mustCtl("executor", "set", "nfa", l.env["LAB_NFA"])
	l.mustCtl("cluster", "add", vip, "--configure")
	stdout, stderr, code := l.ctl("port", "add", vip+"@80", "--method", "nat")
	t.Logf("port add (method nat): exit %d; %s", code, strings.TrimSpace(stderr))
	if code != 0 {
		t.Fatalf("port add: exit %d: %s %s", code, stdout, stderr)
	}
	for _, want := range []string{"warning:", "no route", "executor set clientgateway", "net.ipv4.conf." + ifname + ".forwarding=1", vip + "@80"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("port add's warning lacks %q: %q", want, stderr)
		}
	}
	l.mustCtl("server", "add", vip+"@80@"+l.env["LAB_N1_ADDR"], "--returnaddress", l.env["LAB_RETURN_ADDR"], "--router", l.env["LAB_ROUTER_ADDR"])
	l.waitServersUp()
	if ex := l.executor(); len(ex.Warnings) != 1 || !strings.Contains(ex.Warnings[0], "no route") {
		t.Errorf("executor report's warnings %q", ex.Warnings)
	}
	if out := l.mustCtl("executor", "report"); !strings.Contains(out, "warning:") {
		t.Errorf("executor report's table does not show the warning:\n%s", out)
	}
	r := l.mustLoad("-url", "http://"+vip+"/", "-n", "20", "-c", "10", "-timeout", "1s")
	t.Logf("without a route to clients: %d of %d connections answered (%v)", r.OK, r.Requests, r.Errors)
	if r.OK != 0 {
		t.Errorf("%d connections answered without a route to clients: the test's premise is wrong", r.OK)
	}
	// The replies dropped are counted: dlbctl status names them (the
	// drops of the last 5 s window), and they stop once the route is back.
	dropping := func() string {
		out, _, _ := l.ctl("status", "--check")
		return out
	}
	var out string
	poll(t, 12*time.Second, "dlbctl status to say the executor drops replies for want of a route", func() bool {
		out = dropping()
		return strings.Contains(out, "the executor drops what it should forward") && strings.Contains(out, "no route to the client (drop_no_route)")
	})
	t.Logf("without a route to clients, dlbctl status says:\n%s", out)
	// The console says it too (its snapshot, which the page shows as a
	// card and at the head of the warnings).
	console := "http://" + l.forwarder(metricsAddr) + "/api/snapshot"
	var snap struct {
		Dropping        string `json:"dropping"`
		DroppingPackets uint64 `json:"dropping_packets"`
	}
	poll(t, 12*time.Second, "the console to say the executor drops replies for want of a route", func() bool {
		snap.Dropping, snap.DroppingPackets = "", 0
		resp, err := http.Get(console)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&snap) == nil && snap.DroppingPackets > 0 &&
			strings.Contains(snap.Dropping, "no route to the client (drop_no_route)")
	})
	t.Logf("the console says: %s", snap.Dropping)

	// Remedy one: forwarding.
	setForwarding("1")
	if ex := l.executor(); len(ex.Warnings) != 0 {
		t.Errorf("warnings with forwarding on: %q", ex.Warnings)
	}
	if r := l.mustLoad("-url", "http://"+vip+"/", "-n", "200", "-c", "10"); r.OK != 200 {
		t.Errorf("with forwarding on: %d of 200 answered: %v", r.OK, r.Errors)
	}
	poll(t, 12*time.Second, "dlbctl status to no longer say the executor drops", func() bool {
		return !strings.Contains(dropping(), "drop_no_route")
	})
	if resp, err := http.Get(console); err != nil {
		t.Errorf("reading the console's snapshot: %v", err)
	} else {
		snap.Dropping = ""
		if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil || snap.Dropping != "" {
			t.Errorf("the console, drops stopped: %v %q", err, snap.Dropping)
		}
		resp.Body.Close()
	}
	// Remedy two: a client gateway (the router, which forwards to the
	// clients' segment).
	setForwarding("0")
	if ex := l.executor(); len(ex.Warnings) != 1 {
		t.Errorf("warnings with forwarding off again: %q", ex.Warnings)
	}
	_, stderr, _ = l.ctl("executor", "set", "clientgateway", l.env["LAB_ROUTER_ADDR"])
	if strings.Contains(stderr, "warning:") {
		t.Errorf("executor set clientgateway still warns: %q", stderr)
	}
	if ex := l.executor(); len(ex.Warnings) != 0 {
		t.Errorf("warnings with a client gateway: %q", ex.Warnings)
	}
	if r := l.mustLoad("-url", "http://"+vip+"/", "-n", "200", "-c", "10"); r.OK != 200 {
		t.Errorf("with a client gateway: %d of 200 answered: %v", r.OK, r.Errors)
	}

	// GRO on the interface of a generic-mode executor: merged frames would
	// leave with wrong checksums. The report says so while it lasts.
	l.mustNS("d", "ethtool", "-K", ifname, "gro", "on")
	if ex := l.executor(); len(ex.Warnings) != 1 || !strings.Contains(ex.Warnings[0], "GRO is on for "+ifname) ||
		!strings.Contains(ex.Warnings[0], "ethtool -K "+ifname+" gro off") {
		t.Errorf("warnings with GRO on: %q", ex.Warnings)
	}
	l.mustNS("d", "ethtool", "-K", ifname, "gro", "off")
	if ex := l.executor(); len(ex.Warnings) != 0 {
		t.Errorf("warnings with GRO off: %q", ex.Warnings)
	}
}

// neighbourCount counts the dispatcher's neighbour entries whose address
// starts with prefix.
func (l *lab) neighbourCount(prefix string) int {
	l.t.Helper()
	out := l.mustNS("d", "ip", "-6", "neigh", "show")
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, prefix) {
			n++
		}
	}
	return n
}

// TestPrivilegedE2EFault8RefusedLeavesNothing: a refused change of 3,000
// IPv6 servers on the lab's subnet (none of which exists) leaves no
// neighbour entry in the kernel and does not flood the log: the
// warnings about servers that cannot be reached come as a few lines and a
// count. Servers removed later leave nothing either. It runs alone: it
// fills the kernel's IPv6 neighbour table, which every network namespace
// shares (gc_thresh3, 1,024 entries here), and beside it another test's
// neighbour was refused ("no buffer space available": netif's
// TestPrivilegedWatch, 2026-12-03).
func TestPrivilegedE2EFault8RefusedLeavesNothing(t *testing.T) {
	alone(t)
	l := newLabArgs(t, "-n", "1", "-c", "1", "-6")
	l.startDlbd()
	l.mustCtl("executor", "start", "--interface", l.env["LAB_IF"], "--xdp-mode", "generic")
	vip6 := l.configure6(1)
	const prefix = "2001:2::1:"
	var lines []string
	for i := range 3000 {
		lines = append(lines, fmt.Sprintf("server add %s@80@%s%x", vip6, prefix, i+1))
	}
	// One server that cannot be reached by MAC forwarding (no route): the
	// whole batch is refused, after the others were handed to the kernel.
	lines = append(lines, "server add "+vip6+"@80@2001:2:99::1")
	script := filepath.Join(l.run, "many.dlb")
	if err := os.WriteFile(script, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	logBefore := len(l.dlbdLog())
	start := time.Now()
	_, stderr, code := l.ctl("file", "load", script)
	t.Logf("3,001 servers: exit %d after %v: %s", code, time.Since(start).Round(time.Millisecond), strings.TrimSpace(stderr))
	// Refused either for the server without a route or because the
	// kernel's neighbour table is full (the case), whichever
	// comes first.
	if code != 1 || !strings.Contains(stderr, "nothing was applied") {
		t.Fatalf("file load: exit %d, %q; want it refused", code, stderr)
	}
	if n := len(l.servers()); n != 1 {
		t.Errorf("%d servers configured after the refusal, want 1", n)
	}
	left := l.neighbourCount(prefix)
	time.Sleep(2 * time.Second) // what the kernel would probe meanwhile
	later := l.neighbourCount(prefix)
	t.Logf("neighbour entries of the refused servers: %d at once, %d 2 s later", left, later)
	if left != 0 || later != 0 {
		t.Errorf("the refused change left %d neighbour entries (%d 2 s later)", left, later)
	}
	warnings := func() (lines, summaries int, text string) {
		text = l.dlbdLog()[logBefore:]
		for _, line := range strings.Split(text, "\n") {
			if strings.Contains(line, "level=WARN") {
				lines++
				if strings.Contains(line, "(repeated)") {
					summaries++
				}
			}
		}
		return lines, summaries, text
	}
	n, _, _ := warnings()
	t.Logf("warning lines logged for the refused change: %d", n)
	if n > 20 {
		t.Errorf("%d warning lines for one refused change; want them aggregated", n)
	}
	// The count of those held back comes when the interval ends.
	poll(t, 15*time.Second, "the summary of the warnings held back", func() bool {
		_, s, _ := warnings()
		return s > 0
	})
	_, _, text := warnings()
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, "(repeated)") {
			t.Logf("summary: %s", line)
		}
	}

	// Accepted, then removed: nothing left either.
	var add []string
	for i := range 50 {
		add = append(add, fmt.Sprintf("%s%x", prefix, 0x1000+i))
	}
	l.mustCtl("server", "add", vip6+"@80@"+strings.Join(add, "+"))
	during := l.neighbourCount(prefix)
	l.mustCtl("server", "remove", vip6+"@80@"+strings.Join(add, "+"))
	after := l.neighbourCount(prefix)
	t.Logf("50 servers added: %d neighbour entries; removed: %d left", during, after)
	if during == 0 {
		t.Error("no neighbour entries for 50 added servers: the test proves nothing")
	}
	if after != 0 {
		t.Errorf("%d neighbour entries left after the servers were removed", after)
	}
}

// TestPrivilegedE2EClusterRemoveWithAdvisor: a cluster with an advisor can
// be removed; its advisor stops with it (issue 9, fault 9).
func TestPrivilegedE2EClusterRemoveWithAdvisor(t *testing.T) {
	parallel(t)
	l := newLab(t, 2)
	l.startDlbd()
	l.configure("generic", 10, 10)
	vip := l.vip()
	l.mustCtl("advisor", "start", "http", vip+"@80", "--interval", "0.5")
	poll(t, 5*time.Second, "the advisor's first probes", func() bool {
		var adv []api.AdvisorReport
		l.report(&adv, "advisor", "report")
		return len(adv) == 1 && len(adv[0].Servers) == 2 && adv[0].Servers[0].Probes > 0
	})
	l.mustCtl("cluster", "remove", vip)
	var adv []api.AdvisorReport
	l.report(&adv, "advisor", "report")
	if len(adv) != 0 {
		t.Errorf("advisors left after the cluster was removed: %+v", adv)
	}
	if cl := l.mustCtl("cluster", "report", "-o", "json"); strings.TrimSpace(cl) != "[]" {
		t.Errorf("clusters left: %s", cl)
	}
	if l.hasAddr(vip) {
		t.Error("the removed cluster's address stayed on the interface")
	}
}

// TestPrivilegedE2EFault10FilesDeletedUnderDlbd: the state directory and
// the pin directory are deleted while dlbd runs and clients hold
// connections (a clean-up script, an operator's rm -rf), a change is made,
// then dlbd is restarted. The running dlbd writes both back and says so;
// the restarted one finds the configuration with the change, and adopts
// the executor, which never left the interface: the same XDP link, no
// connection broken.
func TestPrivilegedE2EFault10FilesDeletedUnderDlbd(t *testing.T) {
	parallel(t)
	l := newLab(t, 2)
	l.startDlbd()
	l.configure("generic", 10, 10)
	target := l.vip() + "@80@" + l.backend(1)
	before := l.executor()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := l.holdConnections(ctx, 8, 7*time.Second)

	for _, dir := range []string{l.state, l.pinDir} {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	l.mustCtl("server", "set", target, "--weight", "7")
	took := poll(t, 5*time.Second, "the state and the pins written back", func() bool {
		_, errS := os.Stat(filepath.Join(l.state, "state.json"))
		_, errP := os.Stat(filepath.Join(l.pinDir, "link"))
		return errS == nil && errP == nil
	})
	t.Logf("state and pins back %v after they were deleted", took.Round(time.Millisecond))
	// dlbd says so once every map and program is pinned again: the link
	// the poll looks for may be back a moment before (a loaded machine
	// once checked the log in between).
	for _, w := range []string{"the state directory's files were deleted under dlbd", "the executor's pins were deleted under dlbd"} {
		poll(t, 2*time.Second, fmt.Sprintf("dlbd to log %q", w), func() bool { return strings.Contains(l.dlbdLog(), w) })
	}

	l.killDlbd(syscall.SIGTERM)
	l.startDlbd()
	after := l.executor()
	if !after.Attached || after.LinkID != before.LinkID {
		t.Errorf("after the restart: attached %v with link %d, want the executor adopted (link %d)", after.Attached, after.LinkID, before.LinkID)
	}
	var weight uint32
	for _, s := range l.servers() {
		if s.Address == l.backend(1) {
			weight = s.Weight
		}
	}
	if n := len(l.servers()); n != 2 || weight != 7 {
		t.Errorf("after the restart: %d servers, %s weight %d; want 2, and the change made after the deletion (7)", n, target, weight)
	}
	checkHeld(t, held, 8)
	l.checkNewConnections(t, "after the restart")
}

// TestPrivilegedE2EFault20UnitDirectoriesDeletedOnHost: dlbd runs in the
// mount namespace dlbd.service gives it (unitMounts), and the host's pin
// directory, then its state directory, then its runtime directory are
// deleted (rm -rf) while clients hold connections. From inside, dlbd can
// make none of them again: it used to log the same error every second
// (every 250 ms for the socket), forever, the pins' twenty lines long, and
// its report said nothing. It now says each once, and the executor report
// warns with what it means and what to do, while the executor, unpinned,
// forwards on and changes are refused. The remedy it gives works: the
// configuration saved, dlbd restarted (the unit makes the directories
// again), the configuration loaded: a pinned executor again.
func TestPrivilegedE2EFault20UnitDirectoriesDeletedOnHost(t *testing.T) {
	parallel(t)
	l := newLab(t, 2)
	l.unitMounts = true
	l.sock = filepath.Join(l.run, "runtime", "dlbd.sock")
	l.startDlbd()
	l.configure("generic", 10, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := l.holdConnections(ctx, 8, 8*time.Second)

	for _, c := range []struct{ dir, logged, warning string }{
		{l.pinDir, "pinning the executor again", "could not be pinned again"},
		{l.state, "saving the state", "the state cannot be saved"},
	} {
		if err := os.RemoveAll(c.dir); err != nil {
			t.Fatal(err)
		}
		poll(t, 5*time.Second, fmt.Sprintf("dlbd to log %q", c.logged), func() bool { return strings.Contains(l.dlbdLog(), c.logged) })
		var warning string
		waitFor(t, 10*time.Second, "the executor report's warning", func() bool {
			warning = l.executorWarning(c.warning)
			return warning != ""
		})
		t.Logf("executor report: %s", warning)
		if !strings.Contains(warning, "restart dlbd") {
			t.Errorf("the warning does not say what to do: %s", warning)
		}
	}
	target := l.vip() + "@80@" + l.backend(1)
	if _, errOut, code := l.ctl("server", "set", target, "--weight", "7"); code == 0 || !strings.Contains(errOut, "file save") {
		t.Errorf("a change with the state unsaved: exit %d, %s; want it refused, saying how to keep a copy", code, errOut)
	}
	time.Sleep(3 * time.Second) // three more of dlbd's ticks
	for _, said := range []string{`msg="pinning the executor again"`, `msg="saving the state"`} {
		if n := strings.Count(l.dlbdLog(), said); n != 1 {
			t.Errorf("dlbd logged %s %d times, want once", said, n)
		}
	}
	checkHeld(t, held, 8)
	l.checkNewConnections(t, "with the executor unpinned and the state unsaved")

	saved := filepath.Join(t.TempDir(), "saved.conf")
	l.mustCtl("file", "save", saved)
	// Last, the runtime directory with the API socket: dlbctl can no
	// longer reach dlbd, which says so once (it checks every 250 ms).
	if err := os.RemoveAll(filepath.Dir(l.sock)); err != nil {
		t.Fatal(err)
	}
	const unreachable = "the API socket disappeared and cannot be created again"
	poll(t, 5*time.Second, "dlbd to say its socket cannot be made again", func() bool { return strings.Contains(l.dlbdLog(), unreachable) })
	time.Sleep(time.Second)
	if n := strings.Count(l.dlbdLog(), unreachable); n != 1 {
		t.Errorf("dlbd logged %q %d times in a second, want once", unreachable, n)
	}
	l.killDlbd(syscall.SIGTERM)
	l.startDlbd()
	l.mustCtl("file", "load", saved)
	if r := l.executor(); !r.Attached || len(r.Warnings) != 0 {
		t.Errorf("after the restart and the load: attached %v (%s), warnings %q", r.Attached, r.Error, r.Warnings)
	}
	if _, err := os.Stat(filepath.Join(l.pinDir, "link")); err != nil {
		t.Errorf("after the restart: the executor is not pinned: %v", err)
	}
	if n := len(l.servers()); n != 2 {
		t.Errorf("after the restart and the load: %d servers, want 2", n)
	}
	l.checkNewConnections(t, "after the restart")
}

// TestPrivilegedE2EFault11InterfaceRenamed: the executor's interface is
// renamed (ip link set X name Y, which takes it down) while clients hold
// connections, then renamed again while no dlbd runs. The executor stays
// on the interface, and the configuration follows its name: a change that
// puts a cluster address on it is taken (before, it was refused: "looking
// up interface X"), and a dlbd started after the second rename adopts the
// executor where it is (before, it reported the executor detached while
// it forwarded on the renamed interface).
func TestPrivilegedE2EFault11InterfaceRenamed(t *testing.T) {
	parallel(t)
	l := newLab(t, 2)
	l.startDlbd()
	l.configure("generic", 10, 10)
	ifname, vip, vip2 := l.env["LAB_IF"], l.vip(), "198.18.0.101"
	before := l.executor()
	rename := func(from, to string) {
		t.Helper()
		l.mustNS("d", "ip", "link", "set", from, "down")
		l.mustNS("d", "ip", "link", "set", from, "name", to)
		l.mustNS("d", "ip", "link", "set", to, "up")
	}
	on := func(ifname, addr string) bool {
		out, err := l.inNS("d", "ip", "-o", "addr", "show", "dev", ifname)
		return err == nil && strings.Contains(out, " "+addr+"/32 ")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := l.holdConnections(ctx, 8, 7*time.Second)

	first := ifname + "r"
	rename(ifname, first)
	var ex api.ExecutorReport
	took := poll(t, 3*time.Second, "the configuration names the renamed interface", func() bool {
		ex = l.executor()
		return ex.Interface == first
	})
	t.Logf("renamed %s to %s: followed after %v", ifname, first, took.Round(time.Millisecond))
	if ex.State != api.ExecutorAttached || ex.LinkID != before.LinkID || ex.Error != "" {
		t.Errorf("executor after the rename: state %q, link %d (was %d), error %q", ex.State, ex.LinkID, before.LinkID, ex.Error)
	}
	if !strings.Contains(l.dlbdLog(), "interface was renamed") {
		t.Error("dlbd did not log the rename")
	}
	l.mustCtl("cluster", "add", vip2, "--configure")
	if !on(first, vip2) || !on(first, vip) {
		t.Errorf("cluster addresses %s and %s not both on %s", vip, vip2, first)
	}

	l.killDlbd(syscall.SIGTERM)
	second := ifname + "s"
	rename(first, second)
	l.startDlbd()
	poll(t, 3*time.Second, "the restarted dlbd follows the second rename", func() bool {
		ex = l.executor()
		return ex.Interface == second
	})
	t.Logf("renamed %s to %s while no dlbd ran: state %q, link %d", first, second, ex.State, ex.LinkID)
	if ex.State != api.ExecutorAttached || ex.LinkID != before.LinkID || ex.Error != "" {
		t.Errorf("executor after a restart on the renamed interface: state %q, link %d (want the executor adopted, link %d), error %q",
			ex.State, ex.LinkID, before.LinkID, ex.Error)
	}
	l.mustCtl("cluster", "remove", vip2)
	if on(second, vip2) || !on(second, vip) {
		t.Errorf("after removing cluster %s: its address on %s %v (want gone), %s's %v (want there)", vip2, second, on(second, vip2), vip, on(second, vip))
	}
	checkHeld(t, held, 8)
	l.checkNewConnections(t, "after the renames")
}

// TestPrivilegedE2EFault12NFARemoved: the dispatcher's NFA is taken off its
// interface while an http advisor probes the servers from it (a network
// reconfiguration, an operator's mistake; a link flap does it to an NFA6
// until the network configuration puts it back). The probes cannot leave
// the host. Before, every server was marked down and the cluster refused
// every new connection; now the servers keep their states, the clients
// see nothing, and once the NFA is back the probes decide again. The same
// holds when the host loses its route to the servers (the subnet's route
// deleted: the probes get "network unreachable" from this host, which
// used to take every server down too), while the executor forwards on.
func TestPrivilegedE2EFault12NFARemoved(t *testing.T) {
	parallel(t)
	l := newLab(t, 2)
	l.startDlbd()
	l.configure("generic", 10, 10)
	ifname, nfa, vip := l.env["LAB_IF"], l.env["LAB_NFA"], l.vip()
	l.mustCtl("advisor", "start", "http", vip+"@80", "--interval", "0.5", "--fall", "1", "--rise", "1",
		"--connecttimeout", "0.5", "--receivetimeout", "0.5")
	probes := func() map[string]api.AdvisorServer { return l.advisors()["http"] }
	all := func(what string, cond func(api.AdvisorServer) bool) {
		t.Helper()
		poll(t, 5*time.Second, what, func() bool {
			s := probes()
			for _, b := range []string{l.backend(1), l.backend(2)} {
				if x, ok := s[b]; !ok || !cond(x) {
					return false
				}
			}
			return len(s) == 2
		})
	}
	all("both servers probed up", func(s api.AdvisorServer) bool { return s.State == api.AdvisorUp && s.Probes >= 2 })

	// The subnet stays on the interface (another address of it, promoted
	// when the NFA goes): only the probes' source is missing.
	l.mustNS("d", "sysctl", "-qw", "net.ipv4.conf."+ifname+".promote_secondaries=1")
	l.mustNS("d", "ip", "addr", "add", "198.18.0.6/"+l.env["LAB_PREFIXLEN"], "dev", ifname)
	l.mustNS("d", "ip", "addr", "del", nfa+"/"+l.env["LAB_PREFIXLEN"], "dev", ifname)
	all("probes failing to leave", func(s api.AdvisorServer) bool { return s.LastError == "source address not available" })
	time.Sleep(1500 * time.Millisecond) // three more probes each (fall 1)
	for _, s := range probes() {
		t.Logf("NFA gone: %s %s after %d probes, %d failed, %d unmade, last error %q", s.Address, s.State, s.Probes, s.Failures, s.Unmade, s.LastError)
		if s.State != api.AdvisorUp || s.Failures != 0 || s.Unmade == 0 {
			t.Errorf("%s: %s with %d failures, %d unmade; want up, none, some: the probes never reached it", s.Address, s.State, s.Failures, s.Unmade)
		}
	}
	for _, s := range l.servers() {
		if s.State != api.StateUp {
			t.Errorf("server %s is %s", s.Address, s.State)
		}
	}
	l.checkNewConnections(t, "while the NFA is gone")
	if !strings.Contains(l.dlbdLog(), "advisor cannot probe from this host") {
		t.Error("dlbd did not log that its advisor cannot probe")
	}
	missing := "nfa " + nfa + " is not an address of this host"
	if w := l.executorWarning(missing); !strings.Contains(w, "ip addr add "+nfa+"/PREFIX dev "+ifname) {
		t.Errorf("executor report while the NFA is gone: warning %q; want one naming it and the fix", w)
	}

	l.mustNS("d", "ip", "addr", "add", nfa+"/"+l.env["LAB_PREFIXLEN"], "dev", ifname)
	all("probes reaching the servers again", func(s api.AdvisorServer) bool { return s.State == api.AdvisorUp && s.LastError == "" })
	if w := l.executorWarning(missing); w != "" {
		t.Errorf("executor report with the NFA back: %q", w)
	}

	// No route from this host to the servers' subnet.
	unmade := map[string]uint64{}
	for _, s := range probes() {
		unmade[s.Address] = s.Unmade
	}
	restore := l.removeSubnetRoute()
	all("probes without a route", func(s api.AdvisorServer) bool {
		return s.LastError == "network unreachable: no route from this host"
	})
	time.Sleep(1500 * time.Millisecond)
	for _, s := range probes() {
		t.Logf("route gone: %s %s after %d probes, %d failed, %d unmade, last error %q", s.Address, s.State, s.Probes, s.Failures, s.Unmade, s.LastError)
		if s.State != api.AdvisorUp || s.Failures != 0 || s.Unmade <= unmade[s.Address] {
			t.Errorf("%s without a route: %s with %d failures, %d unmade (was %d); want up, none, more", s.Address, s.State, s.Failures, s.Unmade, unmade[s.Address])
		}
	}
	l.checkNewConnections(t, "while the host has no route to the servers")
	restore()
	all("probes reaching the servers with the route back", func(s api.AdvisorServer) bool { return s.State == api.AdvisorUp && s.LastError == "" })
}

// TestPrivilegedE2EFault13ClusterAddressOffBackend: a backend loses the
// cluster address from its loopback (rebooted without it, its network
// configuration rewritten). Every advisor that connects to the server's
// own address still finds it up, while the connections the executor
// forwards to it are dropped: by hand, 56 of 100 new connections failed.
// The cluster advisor sends its SYN to the cluster address at the
// server's MAC, as the executor forwards a client's: it takes the server
// down, the clients see nothing, and it brings the server back when the
// address is back.
func TestPrivilegedE2EFault13ClusterAddressOffBackend(t *testing.T) {
	parallel(t)
	l := newLab(t, 2)
	l.startDlbd()
	l.configure("generic", 10, 10)
	l.clusterAddressOff(t, l.vip(), l.backend(1), l.backend(2), func(when string) { l.checkNewConnections(t, when) })
}

// clusterAddressOff starts an http and a cluster advisor on vip@80 and
// takes vip off b1's loopback: the cluster advisor takes b1 down while
// the http advisor, probing b1's own address, finds it up, and load says
// whether new connections are all served; with the address back, the
// cluster advisor finds b1 up again.
func (l *lab) clusterAddressOff(t *testing.T, vip, b1, b2 string, load func(when string)) {
	t.Helper()
	timeouts := []string{"--interval", "0.5", "--fall", "2", "--rise", "1", "--connecttimeout", "0.5", "--receivetimeout", "0.5"}
	l.mustCtl(append([]string{"advisor", "start", "http", vip + "@80"}, timeouts...)...)
	l.mustCtl(append([]string{"advisor", "start", "cluster", vip + "@80"}, timeouts...)...)
	states := l.advisors
	poll(t, 5*time.Second, "both advisors find both servers up", func() bool {
		st := states()
		for _, name := range []string{"http", "cluster"} {
			for _, b := range []string{b1, b2} {
				if st[name][b].State != api.AdvisorUp {
					return false
				}
			}
		}
		return true
	})
	fam, hostAddr, addFlags := "-4", vip+"/32", []string(nil)
	if strings.Contains(vip, ":") {
		fam, hostAddr, addFlags = "-6", vip+"/128", []string{"nodad"}
	}
	onB1 := func(action string, flags ...string) {
		l.mustNS("b1", append([]string{"ip", fam, "addr", action, hostAddr, "dev", "lo"}, flags...)...)
	}

	onB1("del")
	poll(t, 5*time.Second, "the cluster advisor finding b1 down", func() bool {
		return states()["cluster"][b1].State == api.AdvisorDown
	})
	st := states()
	t.Logf("b1 without the cluster address: cluster advisor %s (%q), http advisor %s", st["cluster"][b1].State, st["cluster"][b1].LastError, st["http"][b1].State)
	if !strings.Contains(st["cluster"][b1].LastError, "is it on the server's loopback?") {
		t.Errorf("cluster advisor's reason %q; want it to name the loopback", st["cluster"][b1].LastError)
	}
	if st["http"][b1].State != api.AdvisorUp || st["cluster"][b2].State != api.AdvisorUp {
		t.Errorf("http advisor: b1 %s (want up: it probes b1's own address); cluster advisor: b2 %s (want up)", st["http"][b1].State, st["cluster"][b2].State)
	}
	for _, s := range l.servers() {
		if want, ok := map[string]string{b1: api.StateFailed, b2: api.StateUp}[s.Address]; ok && s.State != want {
			t.Errorf("server %s is %s, want %s", s.Address, s.State, want)
		}
	}
	load("while b1 lacks the cluster address")

	onB1("add", addFlags...)
	poll(t, 5*time.Second, "the cluster advisor finding b1 up again", func() bool {
		return states()["cluster"][b1].State == api.AdvisorUp
	})
	load("with the cluster address back on b1")
}

// TestPrivilegedE2EFault14ServerAnswersARP: a backend that holds the
// cluster address on its loopback loses arp_ignore (rebooted without its
// sysctl settings) and answers ARP for it: the routers and clients may
// then send to it, past the dispatcher. dlbd asks who else answers for
// the addresses it holds (every 10 s) and names the backend's MAC and
// the fix in the executor report until it stops answering.
func TestPrivilegedE2EFault14ServerAnswersARP(t *testing.T) {
	parallel(t)
	l := newLab(t, 2)
	l.startDlbd()
	l.configure("generic", 10, 10)
	ifname, b1MAC := l.env["LAB_IF"], l.env["LAB_B1_MAC"]
	conflict := func() string { return l.executorWarning("answers ARP") }
	arpIgnore := func(v string) {
		for _, c := range []string{"all", "lo", ifname} {
			l.mustNS("b1", "sysctl", "-qw", "net.ipv4.conf."+c+".arp_ignore="+v)
		}
	}
	arpIgnore("0")
	start := time.Now()
	poll(t, 25*time.Second, "the conflict reported", func() bool { return conflict() != "" })
	w := conflict()
	t.Logf("reported after %v: %s", time.Since(start).Round(time.Millisecond), w)
	if !strings.Contains(w, l.vip()) || !strings.Contains(w, b1MAC) || !strings.Contains(w, "arp_ignore=1") {
		t.Errorf("warning %q; want the cluster address, b1's MAC %s and the fix", w, b1MAC)
	}
	arpIgnore("1")
	poll(t, 25*time.Second, "the conflict forgotten", func() bool { return conflict() == "" })
}

// TestPrivilegedE2EFault15OperatorsAddressKept: the operator had put the
// cluster address on the dispatcher's interface before dlb (a keepalived
// or ifupdown set-up being moved to dlb). "cluster add --configure" uses
// it as it is and clients are served; "cluster remove" used to take it off
// with the cluster, although dlb had not put it there. Now dlb takes off
// only what it put on: the operator's address stays through cluster
// remove, and through a dlbd restart and "executor stop"; a second
// cluster's address, which dlb did put on, goes each time.
func TestPrivilegedE2EFault15OperatorsAddressKept(t *testing.T) {
	parallel(t)
	l := newLab(t, 2)
	l.startDlbd()
	ifname, vip, ours := l.env["LAB_IF"], l.vip(), "198.18.0.102"
	l.mustNS("d", "ip", "addr", "add", vip+"/32", "dev", ifname)
	l.configure("generic", 10, 10)
	l.mustCtl("cluster", "add", ours, "--configure")
	if !l.hasAddr(ours) {
		t.Fatalf("%s not put on", ours)
	}
	l.checkNewConnections(t, "through the operator's cluster address")
	if !strings.Contains(l.dlbdLog(), "was there already") {
		t.Error("dlbd did not log that it found the operator's address")
	}
	check := func(when string) {
		t.Helper()
		if !l.hasAddr(vip) {
			t.Errorf("%s: the operator's address %s was taken off", when, vip)
		}
		if l.hasAddr(ours) {
			t.Errorf("%s: the address dlb put on, %s, stayed", when, ours)
		}
	}
	l.mustCtl("cluster", "remove", vip)
	l.mustCtl("cluster", "remove", ours)
	check("cluster remove")

	l.mustCtl("cluster", "add", vip, "--configure")
	l.mustCtl("cluster", "add", ours, "--configure")
	l.killDlbd(syscall.SIGTERM)
	l.startDlbd()
	l.mustCtl("executor", "stop")
	check("executor stop after a dlbd restart")
}

// TestPrivilegedE2EFault16ServerHoldsIPv6ClusterAddress: a backend is
// given the IPv6 cluster address on its interface instead of its loopback
// (a typo in its set-up) and advertises it: clients' routers may then send
// to it, past the dispatcher. dlb puts its own addresses on without
// duplicate address detection, so nothing else notices. dlbd asks who else
// answers neighbour solicitations for the IPv6 addresses it holds (every
// 10 s, from the IPv6 NFA) and names the backend's MAC and the fix in the
// executor report until the address is taken off.
func TestPrivilegedE2EFault16ServerHoldsIPv6ClusterAddress(t *testing.T) {
	parallel(t)
	l := newLabArgs(t, "-n", "2", "-c", "1", "-6")
	l.startDlbd()
	l.configure("generic", 10, 10)
	vip6 := l.configure6(2)
	ifname, b1MAC := l.env["LAB_IF"], l.env["LAB_B1_MAC"]
	conflict := func() string { return l.executorWarning("answers neighbour solicitations") }
	l.mustNS("b1", "ip", "-6", "addr", "add", vip6+"/128", "dev", ifname, "nodad")
	start := time.Now()
	poll(t, 25*time.Second, "the conflict reported", func() bool { return conflict() != "" })
	w := conflict()
	t.Logf("reported after %v: %s", time.Since(start).Round(time.Millisecond), w)
	if !strings.Contains(w, vip6) || !strings.Contains(w, b1MAC) || !strings.Contains(w, "take it off there") {
		t.Errorf("warning %q; want the cluster address, b1's MAC %s and the fix", w, b1MAC)
	}
	l.mustNS("b1", "ip", "-6", "addr", "del", vip6+"/128", "dev", ifname)
	poll(t, 25*time.Second, "the conflict forgotten", func() bool { return conflict() == "" })
}

// TestPrivilegedE2EFault17IPv6ClusterAddressOffBackend is Fault13 for an
// IPv6 cluster: a backend loses the IPv6 cluster address from its
// loopback; the http advisor, probing its own address, finds it up, the
// cluster advisor (a SYN to the cluster address at its MAC, found by a
// neighbour solicitation from the IPv6 NFA) takes it down, and every new
// connection is served by the other; with the address back, it is up again.
func TestPrivilegedE2EFault17IPv6ClusterAddressOffBackend(t *testing.T) {
	parallel(t)
	l := newLabArgs(t, "-n", "2", "-c", "1", "-6")
	l.startDlbd()
	l.configure("generic", 10, 10)
	vip6 := l.configure6(2)
	l.clusterAddressOff(t, vip6, l.env["LAB_B1_ADDR6"], l.env["LAB_B2_ADDR6"], func(when string) {
		t.Helper()
		if r := l.mustLoad("-url", "http://["+vip6+"]/", "-n", "300", "-c", "10"); r.OK != 300 {
			t.Errorf("new connections %s: %d of 300 answered: %v", when, r.OK, r.Errors)
		}
	})
}

// TestPrivilegedE2EFault18ServerNotUpYet: the operator adds a server that
// does not answer yet (not booted, a typo). The add waits for its MAC for
// a second, as before, and then says it did not answer and what it means;
// it used to say nothing, and to hold every other dlbctl call for that
// second. The server is unresolved and takes no connections; the others
// serve every new connection.
func TestPrivilegedE2EFault18ServerNotUpYet(t *testing.T) {
	parallel(t)
	l := newLab(t, 2)
	l.startDlbd()
	l.configure("generic", 10, 10)
	absent := "198.18.0.29" // no backend of the lab's
	type result struct {
		stderr string
		code   int
		took   time.Duration
	}
	added := make(chan result, 1)
	go func() {
		start := time.Now()
		_, errOut, code := l.ctl("server", "add", l.vip()+"@80@"+absent)
		added <- result{errOut, code, time.Since(start)}
	}()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	l.executor()
	report := time.Since(start)
	r := <-added
	t.Logf("the add returned after %v (exit %d): %s; a report beside it took %v", r.took.Round(time.Millisecond), r.code,
		strings.TrimSpace(r.stderr), report.Round(time.Millisecond))
	if report > 500*time.Millisecond {
		t.Errorf("a report beside the add took %v: dlbd waited for the absent server's MAC", report)
	}
	want := "warning: server " + absent + " did not answer ARP within 1s: it takes no connections until it does"
	if r.code != 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("server add of an absent server: exit %d, stderr %q; want 0 and %q", r.code, r.stderr, want)
	}
	state := "not in the report"
	for _, s := range l.servers() {
		if s.Address == absent {
			state = s.State
		}
	}
	if state != "unresolved" {
		t.Errorf("the absent server is %s, want unresolved", state)
	}
	l.checkNewConnections(t, "beside a server not up yet")
}
