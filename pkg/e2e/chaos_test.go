package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/vishvananda/netns"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// The chaos soak: continuous traffic through the VIP (new connections and
// long-lived keep-alive connections) while faults a production dispatcher
// meets in its first month are injected in a seeded random order, a few
// seconds apart. It reports, per kind of fault, how many were injected,
// how many established connections broke and how many new connections
// failed; it fails when an established connection breaks for a fault that
// did not take its own backend away, or when a new connection fails
// outside the fault's detection window.
//
// A control worker sends the same requests straight to a backend no
// fault touches, past the dispatcher: a new connection through the VIP
// that fails while the control path fails too is the lab's (a machine
// shared with other work stalls now and then), not dlbd's; such failures
// are counted on their own line and are no violation.
//
// DLB_SOAK_DURATION sets how long the faults go on (default 20 s and the round begun, the
// short run of "make test": every fault once; "make soak" runs 3 minutes) and
// DLB_SOAK_SEED the seed (default: the clock); the seed is logged, and the
// same seed replays the same sequence of faults.

// soakBackends balance port 80; soakSpare is churned on port 8080.
const (
	soakBackends = 3
	soakSpare    = 4
)

// fault is one kind of fault.
type fault struct {
	name string
	// ownBackend: the fault takes a backend away, whose established
	// connections may break.
	ownBackend bool
	// window is how long after the fault ends new connections may still
	// fail (0: none may fail at all).
	window time.Duration
	inject func(s *soak, rng *rand.Rand) injected
}

// injected is what one injection did.
type injected struct {
	start, end time.Duration // since the traffic started
	backend    string        // the backend it took away or changed
	note       string
}

// soak is the run's state.
type soak struct {
	t    *testing.T
	l    *lab
	tr   *traffic
	vip  string
	macs map[string]string // backend name -> its MAC now
}

func TestPrivilegedE2EChaosSoak(t *testing.T) {
	alone(t)
	dur := 20 * time.Second // and the round begun: one round, every fault once, about 50 s
	if v := os.Getenv("DLB_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("DLB_SOAK_DURATION=%q: want a positive duration", v)
		}
		dur = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("DLB_SOAK_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("DLB_SOAK_SEED=%q: %v", v, err)
		}
		seed = s
	}
	t.Logf("chaos soak: %v of faults and the round then begun, seed %d (DLB_SOAK_SEED=%d replays it)", dur, seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x646c62))

	l := newLab(t, soakSpare)
	// The state directory lives on a file system of its own, which the
	// "state directory full" fault fills.
	statefs := filepath.Join(l.run, "statefs")
	testutil.SmallFS(t, statefs, 16<<20)
	l.state = filepath.Join(statefs, "state")
	l.startDlbd()
	l.configure("generic", 10, 10, 10)
	vip := l.vip()
	for _, a := range []string{"http", "cluster"} {
		l.mustCtl("advisor", "start", a, vip+"@80", "--interval", "0.5", "--fall", "2", "--rise", "1",
			"--connecttimeout", "0.5", "--receivetimeout", "0.5")
	}
	l.mustCtl("port", "add", vip+"@8080")
	l.mustCtl("server", "add", vip+"@8080@"+l.backend(soakSpare))
	s := &soak{t: t, l: l, vip: vip, macs: map[string]string{}}
	for i := 1; i <= soakBackends; i++ {
		s.macs[fmt.Sprintf("b%d", i)] = l.env[fmt.Sprintf("LAB_B%d_MAC", i)]
	}

	faults := []fault{
		{name: "dlbd SIGKILL and restart", inject: (*soak).killRestart},
		{name: "interface down/up", window: time.Second, inject: (*soak).downUp},
		{name: "backend server restart", ownBackend: true, window: 1500 * time.Millisecond, inject: (*soak).backendRestart},
		{name: "backend MAC change", window: time.Second, inject: (*soak).macChange},
		{name: "config churn (other port)", inject: (*soak).churn},
		{name: "second dlbd attempt", inject: (*soak).secondDlbd},
		{name: "socket deleted", inject: (*soak).socketDeleted},
		{name: "state and pins deleted, restart", inject: (*soak).filesDeleted},
		{name: "interface renamed, and back", window: time.Second, inject: (*soak).renamed},
		{name: "NFA off the interface", inject: (*soak).nfaRemoved},
		{name: "route to the servers removed", inject: (*soak).routeRemoved},
		{name: "cluster address off a backend", ownBackend: true, window: time.Second, inject: (*soak).clusterAddressOff},
		{name: "state directory full", inject: (*soak).stateFull},
	}

	tr, err := startTraffic(l.env["LAB_C1_NS"], vip+":80", l.backend(soakSpare)+":80", 12, 4)
	if err != nil {
		t.Fatal(err)
	}
	s.tr = tr
	time.Sleep(2 * time.Second) // a baseline without faults

	type record struct {
		kind int
		injected
	}
	var log []record
	began := time.Now()
	end := began.Add(dur)
	var order []int
	// Every kind once per round, in a random order; a round begun is
	// finished, so that every kind is injected as often as the others.
	for time.Now().Before(end) || len(order) > 0 {
		if len(order) == 0 {
			order = rng.Perm(len(faults))
		}
		k := order[0]
		order = order[1:]
		inj := faults[k].inject(s, rng)
		log = append(log, record{k, inj})
		t.Logf("%6.1fs %-28s %s", inj.start.Seconds(), faults[k].name, inj.note)
		time.Sleep(2*time.Second + time.Duration(rng.Int64N(int64(2*time.Second))))
	}
	faulted := time.Since(began).Round(time.Second)
	time.Sleep(3 * time.Second) // the last fault's aftermath
	res := tr.stop()

	// Attribute every broken connection and failed new connection to the
	// latest fault injected before it (by when it was seen).
	type stats struct {
		injected, broken, brokenOwn, failed, violations int
	}
	per := make([]stats, len(faults))
	for _, r := range log {
		per[r.kind].injected++
	}
	var baselineFailed, baselineBroken int
	latest := func(at time.Duration) (int, bool) {
		i, _ := slices.BinarySearchFunc(log, at, func(r record, at time.Duration) int {
			if r.start <= at {
				return -1
			}
			return 1
		})
		return i - 1, i > 0
	}
	var problems []string
	for _, b := range res.breaks {
		i, ok := latest(b.at)
		if !ok {
			baselineBroken++
			problems = append(problems, fmt.Sprintf("%.1fs: a connection to %s broke before any fault: %s", b.at.Seconds(), b.backend, b.err))
			continue
		}
		r := log[i]
		f := faults[r.kind]
		if f.ownBackend && b.backend == r.backend {
			per[r.kind].brokenOwn++
			continue
		}
		per[r.kind].broken++
		per[r.kind].violations++
		problems = append(problems, fmt.Sprintf("%.1fs: a connection to %s broke after %s at %.1fs (%s): %s",
			b.at.Seconds(), b.backend, f.name, r.start.Seconds(), r.note, b.err))
	}
	const timeout = 2 * time.Second // a new connection's dial + reply limit
	// stalled: the control path failed around the same time.
	stalled := func(n failedConn) bool {
		for _, c := range res.control {
			if c.start < n.end+500*time.Millisecond && c.end > n.start-500*time.Millisecond {
				return true
			}
		}
		return false
	}
	var stalls int
	for _, n := range res.failures {
		if stalled(n) {
			stalls++
			continue
		}
		i, ok := latest(n.end)
		if !ok {
			baselineFailed++
			problems = append(problems, fmt.Sprintf("%.1fs: a new connection failed before any fault: %s", n.end.Seconds(), n.err))
			continue
		}
		r := log[i]
		f := faults[r.kind]
		per[r.kind].failed++
		// It must have started while the fault could explain it: from a
		// request's timeout before the fault to its detection window
		// after the fault ended.
		if f.window == 0 || n.start < r.start-timeout || n.start > r.end+f.window {
			per[r.kind].violations++
			problems = append(problems, fmt.Sprintf("%.1fs: a new connection started at %.1fs failed after %s at %.1f-%.1fs (%s): %s",
				n.end.Seconds(), n.start.Seconds(), f.name, r.start.Seconds(), r.end.Seconds(), r.note, n.err))
		}
	}

	var tab bytes.Buffer
	w := tabwriter.NewWriter(&tab, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "fault\tinjected\testablished broken\tof its own backend\tnew connections failed\tdetection window\tviolations\t\n")
	for i, f := range faults {
		p := per[i]
		win := "none may fail"
		if f.window > 0 {
			win = f.window.String()
		}
		own := "-"
		if f.ownBackend {
			own = strconv.Itoa(p.brokenOwn)
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%d\t%s\t%d\t\n", f.name, p.injected, p.broken, own, p.failed, win, p.violations)
	}
	fmt.Fprintf(w, "no fault (baseline)\t-\t%d\t-\t%d\tnone may fail\t%d\t\n", baselineBroken, baselineFailed, baselineBroken+baselineFailed)
	fmt.Fprintf(w, "lab stall (control path failed too)\t-\t-\t-\t%d\t-\t-\t\n", stalls)
	w.Flush()
	t.Logf("chaos soak, seed %d, %v of faults: %d new connections (%d failed), %d keep-alive connections (%d requests, %d broken); control path past the dispatcher: %d connections, %d failed\n%s",
		seed, faulted, res.newTotal, len(res.failures), res.kaConns, res.kaRequests, len(res.breaks), res.controlTotal, len(res.control), tab.String())
	for _, c := range res.control {
		t.Logf("control path failed at %.1f-%.1fs: %s", c.start.Seconds(), c.end.Seconds(), c.err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	for i, f := range faults {
		if per[i].injected == 0 {
			t.Errorf("%s was never injected; run longer", f.name)
		}
	}
	if res.kaRequests == 0 || res.newTotal == 0 {
		t.Errorf("no traffic: %d keep-alive requests, %d new connections", res.kaRequests, res.newTotal)
	}
	// And the dispatcher ends as it started.
	if ex := s.l.executor(); ex.State != "attached" {
		t.Errorf("executor after the soak: %q (%s)", ex.State, ex.Error)
	}
}

// since is the time since the traffic started.
func (s *soak) since() time.Duration { return time.Since(s.tr.start) }

// waitFor polls cond every 20 ms until it holds, for at most limit from
// from (a time of s.since), and returns how long after from it held; if
// it did not, the test fails with failure (the soak goes on) and waitFor
// returns false.
func (s *soak) waitFor(from, limit time.Duration, failure string, cond func() bool) (time.Duration, bool) {
	for !cond() {
		if s.since()-from > limit {
			s.t.Error(failure)
			return s.since() - from, false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s.since() - from, true
}

func (s *soak) killRestart(*rand.Rand) injected {
	start := s.since()
	s.l.killDlbd(syscall.SIGKILL)
	s.l.startDlbd()
	return injected{start: start, end: s.since(), note: fmt.Sprintf("dlbd answered again after %v", (s.since() - start).Round(time.Millisecond))}
}

func (s *soak) downUp(rng *rand.Rand) injected {
	ifname := s.l.env["LAB_IF"]
	down := time.Duration(100+rng.IntN(300)) * time.Millisecond
	start := s.since()
	s.l.mustNS("d", "ip", "link", "set", ifname, "down")
	time.Sleep(down)
	s.l.mustNS("d", "ip", "link", "set", ifname, "up")
	return injected{start: start, end: s.since(), note: fmt.Sprintf("down for %v", down)}
}

// renamed renames the executor's interface (down, rename, up: what "ip
// link set name" needs) and, once dlbd follows, renames it back.
func (s *soak) renamed(*rand.Rand) injected {
	ifname := s.l.env["LAB_IF"]
	start := s.since()
	var took []string
	for _, p := range [][2]string{{ifname, ifname + "r"}, {ifname + "r", ifname}} {
		s.l.mustNS("d", "ip", "link", "set", p[0], "down")
		s.l.mustNS("d", "ip", "link", "set", p[0], "name", p[1])
		s.l.mustNS("d", "ip", "link", "set", p[1], "up")
		d, _ := s.waitFor(s.since(), 3*time.Second, fmt.Sprintf("dlbd did not follow the rename of %s to %s in 3 s", p[0], p[1]),
			func() bool { return s.l.executor().Interface == p[1] })
		took = append(took, d.Round(time.Millisecond).String())
	}
	return injected{start: start, end: s.since(), note: "followed after " + strings.Join(took, " and ")}
}

// nfaRemoved takes the NFA, the advisors' source, off the interface for
// longer than the advisors need to find a server down (fall 2 at 0.5 s),
// then puts it back. Another address keeps the subnet on the interface.
// No connection may fail: the probes that cannot leave say nothing of
// the servers.
func (s *soak) nfaRemoved(rng *rand.Rand) injected {
	ifname, nfa := s.l.env["LAB_IF"], s.l.env["LAB_NFA"]+"/"+s.l.env["LAB_PREFIXLEN"]
	s.l.mustNS("d", "sysctl", "-qw", "net.ipv4.conf."+ifname+".promote_secondaries=1")
	s.l.mustNS("d", "ip", "addr", "replace", "198.18.0.6/"+s.l.env["LAB_PREFIXLEN"], "dev", ifname)
	gone := time.Duration(1500+rng.IntN(1000)) * time.Millisecond
	start := s.since()
	s.l.mustNS("d", "ip", "addr", "del", nfa, "dev", ifname)
	time.Sleep(gone)
	s.l.mustNS("d", "ip", "addr", "add", nfa, "dev", ifname)
	return injected{start: start, end: s.since(), note: fmt.Sprintf("gone for %v", gone)}
}

// clusterAddressOff takes the cluster address off a backend's loopback
// for a while: the connections the executor sends it are dropped until
// the cluster advisor takes it down (the http advisor, probing its own
// address, never does).
func (s *soak) clusterAddressOff(rng *rand.Rand) injected {
	name := fmt.Sprintf("b%d", 1+rng.IntN(soakBackends))
	gone := time.Duration(2500+rng.IntN(1000)) * time.Millisecond
	start := s.since()
	s.l.mustNS(name, "ip", "addr", "del", s.vip+"/32", "dev", "lo")
	time.Sleep(gone)
	s.l.mustNS(name, "ip", "addr", "add", s.vip+"/32", "dev", "lo")
	return injected{start: start, end: s.since(), backend: name, note: fmt.Sprintf("%s without it for %v", name, gone)}
}

// routeRemoved takes the host's route to the servers' subnet away for a
// while: the advisors cannot probe, the executor forwards on.
func (s *soak) routeRemoved(rng *rand.Rand) injected {
	gone := time.Duration(1500+rng.IntN(1000)) * time.Millisecond
	start := s.since()
	restore := s.l.removeSubnetRoute()
	time.Sleep(gone)
	restore()
	return injected{start: start, end: s.since(), note: fmt.Sprintf("gone for %v", gone)}
}

func (s *soak) backendRestart(rng *rand.Rand) injected {
	name := fmt.Sprintf("b%d", 1+rng.IntN(soakBackends))
	start := s.since()
	if out, err := s.l.script("backend-stop", name).CombinedOutput(); err != nil {
		s.t.Fatalf("stopping %s: %v\n%s", name, err, out)
	}
	time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
	if out, err := s.l.script("backend-start", name).CombinedOutput(); err != nil {
		s.t.Fatalf("starting %s: %v\n%s", name, err, out)
	}
	return injected{start: start, end: s.since(), backend: name, note: fmt.Sprintf("%s down for %v", name, (s.since() - start).Round(time.Millisecond))}
}

func (s *soak) macChange(rng *rand.Rand) injected {
	name := fmt.Sprintf("b%d", 1+rng.IntN(soakBackends))
	mac := fmt.Sprintf("02:d1:b0:%02x:%02x:%02x", 0x10+rng.IntN(0xe0), rng.IntN(256), rng.IntN(256))
	i, _ := strconv.Atoi(name[1:])
	target := s.vip + "@80@" + s.l.backend(i)
	start := s.since()
	s.l.mustNS(name, "ip", "link", "set", s.l.env["LAB_IF"], "address", mac)
	s.macs[name] = mac
	var took time.Duration
	for {
		if s.l.serverMAC(target) == mac {
			took = s.since() - start
			break
		}
		if s.since()-start > 10*time.Second {
			s.t.Errorf("%s's new MAC %s not used after 10 s", name, mac)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return injected{start: start, end: start, note: fmt.Sprintf("%s -> %s, used after %v", name, mac, took.Round(time.Millisecond))}
}

func (s *soak) churn(rng *rand.Rand) injected {
	port := s.vip + "@8080@"
	spare := s.l.backend(soakSpare)
	ops := 0
	start := s.since()
	for range 3 + rng.IntN(4) {
		var args []string
		switch rng.IntN(4) {
		case 0:
			args = []string{"server", "set", port + spare, "--weight", strconv.Itoa(rng.IntN(20))}
		case 1:
			a := fmt.Sprintf("198.18.0.%d", 50+rng.IntN(20))
			args = []string{"server", "add", port + a}
		case 2:
			args = []string{"server", "remove", port + fmt.Sprintf("198.18.0.%d", 50+rng.IntN(20))}
		default:
			args = []string{"port", "set", s.vip + "@8080", "--stickytime", strconv.Itoa(rng.IntN(60))}
		}
		if _, _, code := s.l.ctl(args...); code == 0 {
			ops++
		}
	}
	return injected{start: start, end: s.since(), note: fmt.Sprintf("%d changes applied", ops)}
}

func (s *soak) secondDlbd(*rand.Rand) injected {
	start := s.since()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "--net=/run/netns/"+s.l.env["LAB_DISPATCHER_NS"], filepath.Join(binDir, "dlbd"),
		"--socket", filepath.Join(s.l.run, "second.sock"), "--state-dir", s.l.state, "--pin-dir", s.l.pinDir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 || !strings.Contains(string(out), "another dlbd") {
		s.t.Errorf("a second dlbd on the same directories: %v: %s", err, out)
	}
	return injected{start: start, end: s.since(), note: fmt.Sprintf("refused after %v", (s.since() - start).Round(time.Millisecond))}
}

func (s *soak) socketDeleted(*rand.Rand) injected {
	start := s.since()
	if err := os.Remove(s.l.sock); err != nil {
		s.t.Errorf("deleting the socket: %v", err)
	}
	took, back := s.waitFor(start, 5*time.Second, "the socket was not back after 5 s", func() bool {
		_, _, code := s.l.ctl("executor", "report", "-o", "json")
		return code == 0
	})
	if !back {
		took = 0
	}
	if took > time.Second {
		s.t.Errorf("the socket came back after %v, want within 1 s", took)
	}
	return injected{start: start, end: s.since(), note: fmt.Sprintf("answering again after %v", took.Round(time.Millisecond))}
}

// filesDeleted deletes the state and pin directories under dlbd (a
// clean-up script's rm -rf), waits for dlbd to write them back, and
// restarts it: the restarted dlbd must find its configuration and adopt
// the executor, so nothing may fail.
func (s *soak) filesDeleted(*rand.Rand) injected {
	start := s.since()
	for _, dir := range []string{s.l.state, s.l.pinDir} {
		if err := os.RemoveAll(dir); err != nil {
			s.t.Errorf("deleting %s: %v", dir, err)
		}
	}
	back, ok := s.waitFor(start, 5*time.Second, "the state and the pins were not written back after 5 s", func() bool {
		_, errS := os.Stat(filepath.Join(s.l.state, "state.json"))
		_, errP := os.Stat(filepath.Join(s.l.pinDir, "link"))
		return errS == nil && errP == nil
	})
	if !ok {
		back = 0
	}
	s.l.killDlbd(syscall.SIGTERM)
	s.l.startDlbd()
	return injected{start: start, end: s.since(), note: fmt.Sprintf("written back after %v, then dlbd restarted", back.Round(time.Millisecond))}
}

// stateFull fills the state directory's file system: a change and an
// executor stop are refused before they touch anything (the executor
// keeps its program), so nothing may fail; once there is room a change is
// taken again.
func (s *soak) stateFull(rng *rand.Rand) injected {
	start := s.since()
	before := s.l.executor().ProgramID
	fill := testutil.FillFS(s.t, s.l.state)
	refused := 0
	for _, args := range [][]string{
		{"server", "set", s.vip + "@8080@" + s.l.backend(soakSpare), "--weight", strconv.Itoa(1 + rng.IntN(19))},
		{"executor", "stop"},
	} {
		if _, errOut, code := s.l.ctl(args...); code == 0 || !strings.Contains(errOut, "nothing was applied") {
			s.t.Errorf("%v on a full state directory: exit %d, %q; want refused, nothing applied", args, code, errOut)
		} else {
			refused++
		}
	}
	if r := s.l.executor(); !r.Attached || r.ProgramID != before {
		s.t.Errorf("after an executor stop refused for a full state directory: attached %v, program %d (was %d)", r.Attached, r.ProgramID, before)
	}
	if err := os.Remove(fill); err != nil {
		s.t.Error(err)
	}
	if _, errOut, code := s.l.ctl("server", "set", s.vip+"@8080@"+s.l.backend(soakSpare), "--weight", "10"); code != 0 {
		s.t.Errorf("a change once there was room again: %s", errOut)
	}
	return injected{start: start, end: s.since(), note: fmt.Sprintf("%d of 2 refused, then a change taken", refused)}
}

// traffic is the load: keep-alive connections sending a request every
// 50 ms, re-dialled when they break, and workers opening a new
// connection for each request; all from a client namespace.
type traffic struct {
	start time.Time
	stopc chan struct{}
	wg    sync.WaitGroup

	mu         sync.Mutex
	breaks     []broken
	failures   []failedConn
	newTotal   int
	kaConns    int
	kaRequests int
	// control: the same requests past the dispatcher.
	control      []failedConn
	controlTotal int
}

type broken struct {
	at      time.Duration
	backend string
	err     string
}

type failedConn struct {
	start, end time.Duration
	err        string
}

type trafficResult struct {
	breaks                        []broken
	failures, control             []failedConn
	newTotal, kaConns, kaRequests int
	controlTotal                  int
}

// inNetns runs f on a goroutine whose thread is in the named network
// namespace; sockets f creates live there. The thread is never given
// back: it ends with the goroutine.
func inNetns(ns string, f func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err == nil {
			err = netns.Set(h)
			h.Close()
		}
		errc <- err
		if err == nil {
			f()
		}
	}()
	return <-errc
}

// startTraffic loads addr from the namespace ns: keepalive connections,
// workers opening new ones, and one control worker doing the same to
// control.
func startTraffic(ns, addr, control string, keepalive, workers int) (*traffic, error) {
	tr := &traffic{start: time.Now(), stopc: make(chan struct{})}
	for range keepalive {
		tr.wg.Add(1)
		if err := inNetns(ns, func() { defer tr.wg.Done(); tr.keepAlive(addr) }); err != nil {
			tr.wg.Done()
			close(tr.stopc)
			tr.wg.Wait()
			return nil, err
		}
	}
	for i := range workers + 1 {
		tr.wg.Add(1)
		target, failures, total := addr, &tr.failures, &tr.newTotal
		if i == workers {
			target, failures, total = control, &tr.control, &tr.controlTotal
		}
		if err := inNetns(ns, func() { defer tr.wg.Done(); tr.newConns(target, failures, total) }); err != nil {
			tr.wg.Done()
			close(tr.stopc)
			tr.wg.Wait()
			return nil, err
		}
	}
	return tr, nil
}

func (tr *traffic) stop() trafficResult {
	close(tr.stopc)
	tr.wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return trafficResult{breaks: tr.breaks, failures: tr.failures, newTotal: tr.newTotal, kaConns: tr.kaConns, kaRequests: tr.kaRequests,
		control: tr.control, controlTotal: tr.controlTotal}
}

func (tr *traffic) stopped(d time.Duration) bool {
	select {
	case <-tr.stopc:
		return true
	case <-time.After(d):
		return false
	}
}

// get sends one request on c and returns the backend that answered.
func get(c net.Conn, br *bufio.Reader, host string, keepAlive bool, limit time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(limit))
	conn := "keep-alive"
	if !keepAlive {
		conn = "close"
	}
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: %s\r\n\r\n", host, conn); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return "", err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s", resp.Status)
	}
	return resp.Header.Get("X-Backend"), nil
}

// keepAlive holds one connection, a request every 50 ms; a reply that
// does not come within 5 s, or an error, breaks it, and it is dialled
// again.
func (tr *traffic) keepAlive(addr string) {
	for {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			if tr.stopped(100 * time.Millisecond) {
				return
			}
			continue
		}
		tr.mu.Lock()
		tr.kaConns++
		tr.mu.Unlock()
		br := bufio.NewReader(c)
		backend := ""
		for {
			b, err := get(c, br, addr, true, 5*time.Second)
			if err != nil {
				select {
				case <-tr.stopc: // the end, not a break
				default:
					tr.mu.Lock()
					tr.breaks = append(tr.breaks, broken{at: time.Since(tr.start), backend: backend, err: err.Error()})
					tr.mu.Unlock()
				}
				break
			}
			backend = b
			tr.mu.Lock()
			tr.kaRequests++
			tr.mu.Unlock()
			if tr.stopped(50 * time.Millisecond) {
				c.Close()
				return
			}
		}
		c.Close()
		if tr.stopped(50 * time.Millisecond) {
			return
		}
	}
}

// newConns opens a new connection to addr for every request, every
// 20 ms: a dial within 1 s and the reply within 2 s, or it failed (and is
// added to failures; total counts them all).
func (tr *traffic) newConns(addr string, failures *[]failedConn, total *int) {
	for !tr.stopped(20 * time.Millisecond) {
		start := time.Since(tr.start)
		err := func() error {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = get(c, bufio.NewReader(c), addr, false, 2*time.Second)
			return err
		}()
		tr.mu.Lock()
		*total++
		if err != nil {
			*failures = append(*failures, failedConn{start: start, end: time.Since(tr.start), err: err.Error()})
		}
		tr.mu.Unlock()
	}
}
