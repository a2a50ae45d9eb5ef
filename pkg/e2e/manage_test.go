package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/lb"
)

// startMetricd runs dlbmetricd in backend i's namespace with a script
// "sysload" that reports load, and returns a function that stops it (also
// run when the test ends).
func (l *lab) startMetricd(i int, secret string, load int) func() {
	l.t.Helper()
	dir := filepath.Join(l.run, fmt.Sprintf("metric-b%d", i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		l.t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\necho %d\n", load)
	if err := os.WriteFile(filepath.Join(dir, "sysload"), []byte(script), 0o755); err != nil {
		l.t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(l.run, fmt.Sprintf("metricd-b%d.log", i)))
	if err != nil {
		l.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", "--net=/run/netns/"+l.env[fmt.Sprintf("LAB_B%d_NS", i)],
		filepath.Join(binDir, "dlbmetricd"), "--listen", ":10004", "--secret-file", secret, "--scripts-dir", dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		l.t.Fatalf("starting dlbmetricd on b%d: %v", i, err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	l.t.Cleanup(stop)
	return stop
}

// metricSecret writes a shared secret for dlbmetricd and dlbd.
func (l *lab) metricSecret() string {
	l.t.Helper()
	path := filepath.Join(l.run, "metric.secret")
	if err := os.WriteFile(path, []byte("dlb-e2e-shared-secret-0123456789abcdef\n"), 0o600); err != nil {
		l.t.Fatal(err)
	}
	return path
}

// setDelay makes backend i's HTTP server delay every reply by ms.
func (l *lab) setDelay(i, ms int) {
	l.t.Helper()
	req := fmt.Sprintf(`exec 3<>/dev/tcp/%s/80 && printf 'POST /admin/delay?ms=%d HTTP/1.0\r\n\r\n' >&3 && head -1 <&3`, l.backend(i), ms)
	out, err := l.inNS("c1", "bash", "-c", req)
	if err != nil || !strings.Contains(out, "204") {
		l.t.Fatalf("setting b%d's delay: %v %s", i, err, out)
	}
}

func (l *lab) manager() api.ManagerReport {
	var r api.ManagerReport
	l.report(&r, "manager", "report")
	return r
}

// weights returns the weights of port 80's servers by backend number.
func (l *lab) weights() map[int]uint32 {
	out := map[int]uint32{}
	for _, p := range l.manager().Ports {
		if p.Port != 80 {
			continue
		}
		for _, s := range p.Servers {
			for i := 1; i <= 9; i++ {
				if s.Address == l.backend(i) {
					out[i] = s.Weight
				}
			}
		}
	}
	return out
}

// newConns returns every port-80 server's new-connection counter.
func (l *lab) newConns() map[int]uint64 {
	out := map[int]uint64{}
	for _, s := range l.servers() {
		for i := 1; i <= 9; i++ {
			if s.Address == l.backend(i) && s.Port == 80 {
				out[i] = s.NewConnections
			}
		}
	}
	return out
}

// TestPrivilegedE2EHerd replays seed 000: one backend reports a much lower
// load, its figures are 5 s old, and 500 new connections arrive inside one
// manager interval. dlb's weights bound every backend's share; a greedy
// least-loaded chooser fed the same figures sends the whole burst to one.
func TestPrivilegedE2EHerd(t *testing.T) {
	alone(t)
	l := newLab(t, 3)
	l.startDlbd()
	l.configure("generic", 10, 10, 10)
	secret := l.metricSecret()
	loads := map[int]int{1: 5, 2: 80, 3: 80}
	var stops []func()
	for i := 1; i <= 3; i++ {
		stops = append(stops, l.startMetricd(i, secret, loads[i]))
	}
	l.mustCtl("metric", "set", "--secret-file", secret)
	l.mustCtl("metric", "add", l.vip()+"@sysload")
	l.mustCtl("cluster", "set", l.vip(), "--proportions", "25", "25", "0", "50")
	l.mustCtl("manager", "set", "interval", "2")
	l.mustCtl("manager", "start")

	waitFor(t, 20*time.Second, "fresh reports from the three agents", func() bool {
		var m api.MetricReport
		l.report(&m, "metric", "report")
		fresh := 0
		for _, s := range m.Servers {
			if !s.Stale && s.Values["sysload"] > 0 {
				fresh++
			}
		}
		return fresh == 3
	})
	// The agents stop: their last figures age towards 5 s (stale at 6 s).
	for _, stop := range stops {
		stop()
	}
	reported := time.Now()
	time.Sleep(4500 * time.Millisecond)
	w := l.weights()
	total := w[1] + w[2] + w[3]
	t.Logf("weights %v, figures %.1fs old (b1 reports load %d, b2 and b3 %d)", w, time.Since(reported).Seconds(), loads[1], loads[2])

	// 500 new connections well inside one 2 s interval.
	r := l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "500", "-c", "50")
	if r.Failed != 0 {
		t.Fatalf("%d of the burst failed: %v", r.Failed, r.Errors)
	}
	greedy := map[int]int{1: 500} // every connection to the least-loaded figure
	t.Logf("%-8s %-14s %-12s %-10s", "backend", "weight share", "dlb burst", "greedy burst")
	for i := 1; i <= 3; i++ {
		share := float64(w[i]) / float64(total)
		got := float64(r.PerBackend[fmt.Sprintf("b%d", i)]) / float64(r.OK)
		t.Logf("b%-7d %5.1f%%         %3d (%4.1f%%)   %3d (%5.1f%%)", i, 100*share, r.PerBackend[fmt.Sprintf("b%d", i)], 100*got, greedy[i], float64(greedy[i])/5)
		if got > share+0.10 {
			t.Errorf("b%d took %.1f%% of the burst, above its weight share %.1f%% + 10 points", i, 100*got, 100*share)
		}
	}
}

// TestPrivilegedE2ESlowBackend delays one backend's replies by 200 ms: its
// weight and its share of new connections fall by half within 5 manager
// cycles, and recover once the delay is gone; settled, no weight change
// passes the sensitivity threshold for 10 cycles.
func TestPrivilegedE2ESlowBackend(t *testing.T) {
	alone(t)
	l := newLab(t, 3)
	l.startDlbd()
	l.configure("generic", 10, 10, 10)
	l.mustCtl("advisor", "start", "http", l.vip()+"@80", "--interval", "0.5", "--receivetimeout", "2")
	l.mustCtl("cluster", "set", l.vip(), "--proportions", "20", "20", "60", "0")
	l.mustCtl("manager", "set", "interval", "1", "refresh", "1")
	l.mustCtl("manager", "start")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loadDone := make(chan loadResult, 1)
	go func() {
		r, _ := l.load(ctx, "-url", "http://"+l.vip()+"/", "-duration", "60s", "-c", "16", "-timeout", "3s")
		loadDone <- r
	}()
	time.Sleep(4 * time.Second) // settle under load
	before := l.weights()
	c0 := l.newConns()
	time.Sleep(5 * time.Second)
	c1 := l.newConns()
	shareBefore := share(c0, c1, 2)

	l.setDelay(2, 200)
	slowAt := time.Now()
	took := waitFor(t, 8*time.Second, "b2's weight to halve", func() bool { return l.weights()[2]*2 <= before[2] })
	cycles := took.Seconds() / 1.0
	time.Sleep(2 * time.Second)
	c2 := l.newConns()
	time.Sleep(5 * time.Second)
	c3 := l.newConns()
	shareSlow := share(c2, c3, 2)
	for _, p := range l.manager().Ports {
		if p.Port == 80 {
			t.Logf("manager while b2 is slow: %+v", p.Servers)
		}
	}
	t.Logf("b2 delayed 200 ms: weight %d -> %v in %.1f s (~%.0f cycles); share of new connections %.1f%% of %d -> %.1f%% of %d",
		before[2], l.weights(), time.Since(slowAt).Seconds(), cycles, 100*shareBefore, sum(c0, c1), 100*shareSlow, sum(c2, c3))
	if cycles > 5.5 {
		t.Errorf("b2's weight took %.1f cycles to halve, want at most 5", cycles)
	}
	if shareSlow*2 > shareBefore {
		t.Errorf("b2's share of new connections fell from %.1f%% to %.1f%%, not by half", 100*shareBefore, 100*shareSlow)
	}

	l.setDelay(2, 0)
	recovered := waitFor(t, 20*time.Second, "b2 to recover", func() bool {
		w := l.weights()
		return w[2]*10 >= w[1]*8 // within 20 % of b1
	})
	t.Logf("b2 recovered %.1f s after its delay was removed", recovered.Seconds())
	t.Logf("b2 recovered: weights %v", l.weights())

	// The recovery ends with a few small steps (a push past the
	// sensitivity threshold is followed through for manager.FollowCycles
	// cycles). Settled means: 3 cycles in a row that push nothing.
	quiet, last := 0, l.manager().Cycles
	settled := waitFor(t, 30*time.Second, "the weights to settle after b2's recovery", func() bool {
		m := l.manager()
		if m.Cycles == last {
			return false
		}
		last = m.Cycles
		quiet++
		for _, p := range m.Ports {
			if p.Port == 80 && p.Pushed {
				quiet = 0
			}
		}
		return quiet >= 3
	})
	t.Logf("settled %.1f s later: weights %v", settled.Seconds(), l.weights())

	// Settled: for 10 cycles no change passes the sensitivity threshold
	// (the default, 5%), and no weight moves at all.
	start := l.manager().Cycles
	past, pushed := 0, 0
	seen := map[uint64]bool{}
	for len(seen) < 10 {
		m := l.manager()
		if m.Cycles > start && !seen[m.Cycles] {
			seen[m.Cycles] = true
			for _, p := range m.Ports {
				if p.Port != 80 {
					continue
				}
				if p.Change > lb.DefaultSensitivity {
					past++
				}
				if p.Pushed {
					pushed++
					t.Logf("cycle %d pushed a change of %.1f%%: %+v", m.Cycles, p.Change, p.Servers)
				}
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	if past != 0 || pushed != 0 {
		t.Errorf("of 10 settled cycles, %d asked for a change past the sensitivity threshold and %d moved weights", past, pushed)
	}
	cancel()
	if r := <-loadDone; r.Failed != 0 {
		t.Errorf("%d requests failed during the test: %v", r.Failed, r.Errors)
	}
}

// share is backend i's share of the new connections between two snapshots.
func share(a, b map[int]uint64, i int) float64 {
	if n := sum(a, b); n > 0 {
		return float64(b[i]-a[i]) / float64(n)
	}
	return 0
}

// sum is the number of new connections between two snapshots.
func sum(a, b map[int]uint64) uint64 {
	var n uint64
	for k := range b {
		n += b[k] - a[k]
	}
	return n
}

// TestPrivilegedE2EBusyBackend: a metric script on one backend reports high
// load, and its share falls as the proportions say; when its agent stops,
// the figure goes stale and is ignored, not read as zero load.
func TestPrivilegedE2EBusyBackend(t *testing.T) {
	alone(t)
	l := newLab(t, 3)
	l.startDlbd()
	l.configure("generic", 10, 10, 10)
	secret := l.metricSecret()
	stop1 := l.startMetricd(1, secret, 90)
	l.startMetricd(2, secret, 10)
	l.startMetricd(3, secret, 10)
	l.mustCtl("metric", "set", "--secret-file", secret)
	l.mustCtl("metric", "add", l.vip()+"@sysload")
	l.mustCtl("cluster", "set", l.vip(), "--proportions", "0", "0", "0", "100")
	l.mustCtl("manager", "set", "interval", "1")
	l.mustCtl("manager", "start")

	waitFor(t, 15*time.Second, "b1's weight to fall below half of b2's", func() bool {
		w := l.weights()
		return w[1]*2 <= w[2]
	})
	w := l.weights()
	r := l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "1500", "-c", "20")
	t.Logf("b1 reports load 90, b2/b3 10: weights %v, shares b1 %d b2 %d b3 %d", w, r.PerBackend["b1"], r.PerBackend["b2"], r.PerBackend["b3"])
	if r.Failed != 0 {
		t.Errorf("%d requests failed", r.Failed)
	}
	// The shares follow the weights the proportions gave (±5 points), and
	// the busy backend's is well below the others'.
	checkShares(t, r, map[string]int{"b1": int(w[1]), "b2": int(w[2]), "b3": int(w[3])})
	if 10*r.PerBackend["b1"] > 7*r.PerBackend["b2"] {
		t.Errorf("b1 took %d connections against b2's %d", r.PerBackend["b1"], r.PerBackend["b2"])
	}

	stop1()
	waitFor(t, 10*time.Second, "b1's figure to go stale", func() bool {
		var m api.MetricReport
		l.report(&m, "metric", "report")
		for _, s := range m.Servers {
			if s.Address == l.backend(1) {
				return s.Stale
			}
		}
		return false
	})
	// Stale is ignored: with no figure, b1 is neither busy nor idle and
	// moves back towards its configured weight, never above the servers
	// that report real (low) load — read as zero load, it would have been
	// the best server and overtaken them.
	for k := 0; k < 5; k++ {
		time.Sleep(time.Second)
		w := l.weights()
		t.Logf("cycle %d after the figure went stale: weights %v", k, w)
		if w[1] > w[2] || w[1] > w[3] || w[1] > 10 {
			t.Errorf("weights %v: b1's stale figure was read as low load", w)
		}
	}
	for _, p := range l.manager().Ports {
		for _, s := range p.Servers {
			if p.Port == 80 && s.Address == l.backend(1) {
				t.Logf("b1 after its agent stopped: weight %d, SYS %.0f, reason %q", s.Weight, s.SystemLoad, s.Reason)
				if s.SystemLoad != -1 {
					t.Errorf("the report still shows b1's stale load %.0f", s.SystemLoad)
				}
			}
		}
	}
}

// TestPrivilegedE2EFailover stops one backend's server under load: its
// advisor marks it down within interval × fall + timeout, no new
// connection fails after that moment, established connections elsewhere
// finish, and it rejoins after rise successes when it comes back.
func TestPrivilegedE2EFailover(t *testing.T) {
	parallel(t)
	l := newLab(t, 3)
	l.startDlbd()
	l.configure("generic", 10, 10, 10)
	const interval, fall, rise, timeout = 1.0, 2, 2, 1.0
	l.mustCtl("advisor", "start", "http", l.vip()+"@80", "--interval", fmt.Sprint(interval),
		"--fall", fmt.Sprint(fall), "--rise", fmt.Sprint(rise),
		"--connecttimeout", fmt.Sprint(timeout), "--receivetimeout", fmt.Sprint(timeout))
	b2 := fmt.Sprintf("%s@80@%s", l.vip(), l.backend(2))

	ctx := context.Background()
	slow := make(chan loadResult, 1)
	go func() {
		r, _ := l.load(ctx, "-url", "http://"+l.vip()+"/slow?ms=5000", "-n", "30", "-c", "30", "-timeout", "15s")
		slow <- r
	}()
	load := make(chan loadResult, 1)
	loadStart := time.Now()
	go func() {
		r, _ := l.load(ctx, "-url", "http://"+l.vip()+"/", "-duration", "12s", "-c", "8", "-timeout", "2s")
		load <- r
	}()
	time.Sleep(2 * time.Second)
	// SIGTERM: b2's server stops listening at once and drains its
	// established connections; the script returns when it has exited.
	stopped := time.Now()
	stopErr := make(chan error, 1)
	go func() {
		out, err := l.script("backend-stop", "b2").CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%v: %s", err, out)
		}
		stopErr <- err
	}()
	var downAt time.Time
	for downAt.IsZero() {
		var srv []api.ServerReport
		l.report(&srv, "server", "report", b2)
		if srv[0].State == api.StateFailed {
			downAt = time.Now()
		} else if time.Since(stopped) > 10*time.Second {
			t.Fatal("b2 not marked down within 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := <-stopErr; err != nil {
		t.Fatalf("stopping b2's server: %v", err)
	}
	r := <-load
	downMS := int(downAt.Sub(loadStart).Milliseconds())
	t.Logf("load: %d requests, %d failed, failures from %d ms to %d ms; b2 down at %d ms", r.Requests, r.Failed, r.FirstFailMS, r.LastFailMS, downMS)

	// Detection counts from the moment b2's server stopped accepting:
	// the start of the first request it refused, or the start of the
	// stop script if none failed. On a busy host the script takes a
	// second or more to deliver SIGTERM, time no advisor can see. The
	// load's clock starts after loadStart, so the refusal time is taken
	// early and the measured detection errs long.
	from := stopped
	if r.Failed > 0 {
		if f := loadStart.Add(time.Duration(r.FirstFailMS) * time.Millisecond); f.After(from) {
			from = f
		}
	}
	detect := downAt.Sub(from)
	limit := time.Duration((interval*fall + timeout) * float64(time.Second))
	t.Logf("b2 stopped (script started at %d ms, first refusal at %d ms); marked down after %v (limit interval×fall+timeout = %v)",
		stopped.Sub(loadStart).Milliseconds(), from.Sub(loadStart).Milliseconds(), detect, limit)
	if detect > limit+200*time.Millisecond { // the report is polled every ~100 ms
		t.Errorf("marked down after %v, want at most %v", detect, limit)
	}
	if r.LastFailMS > downMS {
		t.Errorf("a new connection failed at %d ms, after b2 was marked down at %d ms", r.LastFailMS, downMS)
	}
	sr := <-slow
	if sr.Failed != 0 {
		t.Errorf("%d established connections broke: %v", sr.Failed, sr.Errors)
	}
	t.Logf("established slow connections: %v all finished", sr.PerBackend)

	if out, err := l.script("backend-start", "b2").CombinedOutput(); err != nil {
		t.Fatalf("starting b2's server: %v %s", err, out)
	}
	back := waitFor(t, 10*time.Second, "b2 back up", func() bool {
		var srv []api.ServerReport
		l.report(&srv, "server", "report", b2)
		return srv[0].State == api.StateUp
	})
	t.Logf("b2 rejoined %v after its server came back (rise %d × interval %gs)", back, rise, interval)
	r = l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "900", "-c", "10")
	if r.Failed != 0 || r.PerBackend["b2"] == 0 {
		t.Errorf("after b2 rejoined: %d failed, b2 got %d", r.Failed, r.PerBackend["b2"])
	}
}

// TestPrivilegedE2EQuiesce: a quiesced server gets no new connections,
// and its established ones finish.
func TestPrivilegedE2EQuiesce(t *testing.T) {
	parallel(t)
	l := newLab(t, 3)
	l.startDlbd()
	l.configure("generic", 10, 10, 10)
	slow := make(chan loadResult, 1)
	go func() {
		r, _ := l.load(context.Background(), "-url", "http://"+l.vip()+"/slow?ms=4000", "-n", "30", "-c", "30", "-timeout", "10s")
		slow <- r
	}()
	time.Sleep(1500 * time.Millisecond)
	l.mustCtl("manager", "quiesce", l.backend(1))
	// The manager report of one server: it alone, on the one port it
	// serves, quiesced.
	var mr api.ManagerReport
	l.report(&mr, "manager", "report", "@@"+l.backend(1))
	if len(mr.Ports) != 1 || len(mr.Ports[0].Servers) != 1 || mr.Ports[0].Servers[0].Address != l.backend(1) ||
		mr.Ports[0].Servers[0].State != "quiesced" {
		t.Errorf("manager report @@%s: %+v; want that server alone, quiesced", l.backend(1), mr.Ports)
	}
	r := l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "900", "-c", "20")
	if r.Failed != 0 || r.PerBackend["b1"] != 0 {
		t.Errorf("while b1 was quiesced: %d failed, b1 got %d new connections", r.Failed, r.PerBackend["b1"])
	}
	sr := <-slow
	if sr.Failed != 0 || sr.PerBackend["b1"] == 0 {
		t.Errorf("established connections: %d failed, %d on b1 (want some, all finished)", sr.Failed, sr.PerBackend["b1"])
	}
	t.Logf("quiesced b1: new connections %v; established ones finished %v", r.PerBackend, sr.PerBackend)
	l.mustCtl("manager", "unquiesce", l.backend(1))
	if r := l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "600", "-c", "20"); r.PerBackend["b1"] == 0 {
		t.Error("b1 got nothing after unquiesce")
	}
}
