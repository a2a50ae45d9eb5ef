package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// binDir holds dlbd, dlbctl, labhttpd and labclient, built once by TestMain.
var (
	binDir  string
	repoDir string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	repoDir = filepath.Join(wd, "..", "..")
	if os.Geteuid() == 0 && !testing.Short() {
		dir, err := os.MkdirTemp("", "dlbe2e-bin")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/dlbd", "./cmd/dlbctl", "./cmd/dlbmetricd", "./scripts/labhttpd", "./scripts/labclient", "./scripts/labxdp", "./scripts/labflood", "./scripts/labicmp")
		cmd.Dir = repoDir
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building binaries: %v\n%s", err, out)
			return 1
		}
		// DLB_E2E_DAEMON_FROM names a directory holding another build's
		// dlbd and dlbctl, tested instead of this tree's: a test of a fix
		// must fail against the build before it.
		if from := os.Getenv("DLB_E2E_DAEMON_FROM"); from != "" {
			for _, b := range []string{"dlbd", "dlbctl"} {
				data, err := os.ReadFile(filepath.Join(from, b))
				if err == nil {
					err = os.WriteFile(filepath.Join(dir, b), data, 0o755)
				}
				if err != nil {
					fmt.Fprintf(os.Stderr, "DLB_E2E_DAEMON_FROM: %v\n", err)
					return 1
				}
			}
			fmt.Fprintf(os.Stderr, "testing dlbd and dlbctl from %s\n", from)
		}
		binDir = dir
	}
	return m.Run()
}

// lab is a lab (scripts/lab.sh) with a dlbd in its dispatcher namespace.
type lab struct {
	t      *testing.T
	prefix string
	env    map[string]string
	run    string // private directory: socket, state, logs
	sock   string
	pinDir string
	state  string
	dlbd   *exec.Cmd
	dlbdN  int
	// unitMounts runs dlbd in the mount namespace dlbd.service gives it
	// (see unitMounts); the socket is then in a directory of its own.
	unitMounts bool
	// pkgDir holds the packaged dlbd's socket and state (package_test.go).
	pkgDir string
}

// newLab builds a lab with n backends and one client; everything it made
// is removed when the test ends, whatever happens.
func newLab(t *testing.T, backends int) *lab {
	t.Helper()
	return newLabArgs(t, "-n", fmt.Sprint(backends), "-c", "1")
}

// newLabArgs builds a lab with the given "lab.sh up" options (-n, -c, -r,
// -6).
func newLabArgs(t *testing.T, upArgs ...string) *lab {
	t.Helper()
	return newLabPrefix(t, "dlbe", upArgs...)
}

// newLabPrefix builds a lab whose namespaces and links are named with
// prefix and a random suffix.
func newLabPrefix(t *testing.T, prefix string, upArgs ...string) *lab {
	t.Helper()
	testutil.RequirePrivileged(t)
	if testing.Short() {
		t.Skip("end-to-end lab test (-short)")
	}
	l := &lab{t: t, prefix: freePrefix(t, prefix)}
	l.run = t.TempDir()
	l.sock = filepath.Join(l.run, "dlbd.sock")
	l.state = filepath.Join(l.run, "state")
	l.pinDir = "/sys/fs/bpf/" + l.prefix
	t.Cleanup(l.teardown)
	if out, err := l.script(append([]string{"up"}, upArgs...)...).CombinedOutput(); err != nil {
		t.Fatalf("lab up: %v\n%s", err, out)
	}
	out, err := l.script("env").Output()
	if err != nil {
		t.Fatalf("lab env: %v", err)
	}
	l.env = map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if ok {
			l.env[k] = strings.Trim(v, "'")
		}
	}
	return l
}

// freePrefix returns prefix with a random suffix that no namespace, link
// or pin directory on the host uses yet, so that labs of test runs going
// on at the same time (other packages, other checkouts) never meet.
func freePrefix(t *testing.T, prefix string) string {
	t.Helper()
	for range 100 {
		p := fmt.Sprintf("%s%03x", prefix, rand.IntN(0xfff))
		used := false
		for _, glob := range []string{"/run/netns/" + p + "*", "/sys/class/net/" + p + "*", "/sys/fs/bpf/" + p + "*"} {
			if m, _ := filepath.Glob(glob); len(m) > 0 {
				used = true
			}
		}
		if !used {
			return p
		}
	}
	t.Fatalf("no free lab prefix %s…", prefix)
	return ""
}

func (l *lab) script(args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(repoDir, "scripts", "lab.sh"), args...)
	cmd.Env = append(os.Environ(), "LAB_PREFIX="+l.prefix, "LAB_BIN="+binDir, "LAB_RUN="+filepath.Join(l.run, "lab"))
	return cmd
}

func (l *lab) teardown() {
	if l.dlbd != nil && l.dlbd.ProcessState == nil {
		_ = l.dlbd.Process.Signal(syscall.SIGTERM)
		l.waitDlbd()
	}
	if l.t.Failed() {
		for i := 1; i <= l.dlbdN; i++ {
			if b, err := os.ReadFile(filepath.Join(l.run, fmt.Sprintf("dlbd%d.log", i))); err == nil {
				l.t.Logf("dlbd log %d:\n%s", i, b)
			}
		}
	}
	// Unpinning the link detaches the program; the namespaces go with the lab.
	_ = os.RemoveAll(l.pinDir)
	if out, err := l.script("down").CombinedOutput(); err != nil {
		l.t.Errorf("lab down: %v\n%s", err, out)
	}
}

// dlbdAnswerWait is how long a test waits for a started dlbd's API. A
// dlbd that starts on a saved configuration loads its executor through
// the kernel's verifier before it answers: 1.5-2 s alone, and over 10 s
// was seen on a slow machine with pkg/datapath's tests beside it.
const dlbdAnswerWait = 30 * time.Second

// startDlbd starts dlbd in the dispatcher namespace and waits for its API.
func (l *lab) startDlbd(extra ...string) {
	l.t.Helper()
	l.startDlbdWait(dlbdAnswerWait, extra...)
}

// startDlbdWait starts dlbd and waits up to wait for its API.
func (l *lab) startDlbdWait(wait time.Duration, extra ...string) {
	l.t.Helper()
	l.dlbdN++
	args := append([]string{"--net=/run/netns/" + l.env["LAB_DISPATCHER_NS"], filepath.Join(binDir, "dlbd"),
		"--socket", l.sock, "--state-dir", l.state, "--pin-dir", l.pinDir, "--log-level", "debug"}, extra...)
	cmd := exec.Command("nsenter", args...)
	if l.unitMounts {
		prep := exec.Command(filepath.Join(repoDir, "scripts", "systemd", "dlbd-prepare"), l.pinDir, "root")
		if out, err := prep.CombinedOutput(); err != nil {
			l.t.Fatalf("dlbd-prepare: %v\n%s", err, out)
		}
		hold := filepath.Join(l.run, "pins-bound")
		// As systemd makes StateDirectory= and RuntimeDirectory=.
		for _, d := range []string{hold, l.state, filepath.Dir(l.sock)} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				l.t.Fatal(err)
			}
		}
		cmd = exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--", "sh", "-ec", unitMounts,
			"sh", l.pinDir, hold, l.run, l.state, filepath.Dir(l.sock), "nsenter"}, args...)...)
	}
	logf, err := os.Create(filepath.Join(l.run, fmt.Sprintf("dlbd%d.log", l.dlbdN)))
	if err != nil {
		l.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		l.t.Fatalf("starting dlbd: %v", err)
	}
	logf.Close()
	l.dlbd = cmd
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if _, _, code := l.ctl("executor", "report", "-o", "json"); code == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	l.t.Fatalf("dlbd did not answer within %s", wait)
}

// unitMounts, run by sh in dlbd's new mount namespace with the pin
// directory, a directory to hold it for a moment, the lab's private
// directory, the state directory and the socket's directory (both in the
// private one), then dlbd's command, makes what dlbd.service gives dlbd
// and runs it: a private, empty /sys/fs/bpf holding only the host's pin
// directory (TemporaryFileSystem=, BindPaths=), and a read-only file
// system but for the state and runtime directories, each bound writable
// onto itself (ProtectSystem=strict, StateDirectory=, RuntimeDirectory=).
const unitMounts = `pin=$1 hold=$2 run=$3 state=$4 sockdir=$5; shift 5
mount --bind "$pin" "$hold"
mount -t tmpfs -o mode=0755 dlbunit /sys/fs/bpf
mkdir -p "$pin"
mount --move "$hold" "$pin"
mount --bind "$run" "$run"
mount -o remount,bind,ro "$run"
for d in "$state" "$sockdir"; do mount --bind "$d" "$d"; mount -o remount,bind,rw "$d"; done
exec "$@"`

// killDlbd sends sig to dlbd and waits for it to exit.
func (l *lab) killDlbd(sig syscall.Signal) {
	l.t.Helper()
	if err := l.dlbd.Process.Signal(sig); err != nil {
		l.t.Fatalf("signalling dlbd: %v", err)
	}
	l.waitDlbd()
}

// dlbdLog returns what the current dlbd logged so far.
func (l *lab) dlbdLog() string {
	b, _ := os.ReadFile(filepath.Join(l.run, fmt.Sprintf("dlbd%d.log", l.dlbdN)))
	return string(b)
}

func (l *lab) waitDlbd() {
	done := make(chan struct{})
	go func() { _ = l.dlbd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = l.dlbd.Process.Kill()
		<-done
	}
}

// ctl runs dlbctl against the lab's dlbd.
func (l *lab) ctl(args ...string) (stdout, stderr string, code int) {
	cmd := exec.Command(filepath.Join(binDir, "dlbctl"), append([]string{"--socket", l.sock}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	return o.String(), e.String(), code
}

// mustCtl runs dlbctl and fails the test unless it succeeds.
func (l *lab) mustCtl(args ...string) string {
	l.t.Helper()
	out, errOut, code := l.ctl(args...)
	if code != 0 {
		l.t.Fatalf("dlbctl %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// report runs a dlbctl report with -o json and decodes it into v.
func (l *lab) report(v any, args ...string) {
	l.t.Helper()
	out := l.mustCtl(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		l.t.Fatalf("decoding %v: %v\n%s", args, err, out)
	}
}

func (l *lab) servers() []api.ServerReport {
	var r []api.ServerReport
	l.report(&r, "server", "report")
	return r
}

// advisors returns the advisor report's servers by advisor name, then
// server address.
func (l *lab) advisors() map[string]map[string]api.AdvisorServer {
	var adv []api.AdvisorReport
	l.report(&adv, "advisor", "report")
	out := map[string]map[string]api.AdvisorServer{}
	for _, a := range adv {
		out[a.Name] = map[string]api.AdvisorServer{}
		for _, s := range a.Servers {
			out[a.Name][s.Address] = s
		}
	}
	return out
}

func (l *lab) executor() api.ExecutorReport {
	var r api.ExecutorReport
	l.report(&r, "executor", "report")
	return r
}

// executorWarning returns the first warning of the executor report that
// contains substr, or "".
func (l *lab) executorWarning(substr string) string {
	for _, w := range l.executor().Warnings {
		if strings.Contains(w, substr) {
			return w
		}
	}
	return ""
}

// vip returns the lab's cluster address and backend addresses.
func (l *lab) vip() string { return l.env["LAB_VIP"] }

func (l *lab) backend(i int) string { return l.env[fmt.Sprintf("LAB_B%d_ADDR", i)] }

// configure starts the executor and balances VIP:80 over the backends
// with the given weights.
func (l *lab) configure(mode string, weights ...int) {
	l.t.Helper()
	l.mustCtl("executor", "start", "--interface", l.env["LAB_IF"], "--xdp-mode", mode)
	l.mustCtl("executor", "set", "nfa", l.env["LAB_NFA"])
	l.mustCtl("cluster", "add", l.vip(), "--configure")
	l.mustCtl("port", "add", l.vip()+"@80")
	for i, w := range weights {
		l.mustCtl("server", "add", fmt.Sprintf("%s@80@%s", l.vip(), l.backend(i+1)), "--weight", fmt.Sprint(w))
	}
	l.waitServersUp()
}

// waitServersUp waits until every server is resolved.
func (l *lab) waitServersUp() {
	l.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pending := 0
		for _, s := range l.servers() {
			if s.State == api.StateUnresolved {
				pending++
			}
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("%d servers still unresolved after 10 s", pending)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// loadResult is labclient's -json output.
type loadResult struct {
	Requests    int            `json:"requests"`
	OK          int            `json:"ok"`
	Failed      int            `json:"failed"`
	PerBackend  map[string]int `json:"per_backend"`
	Errors      map[string]int `json:"errors"`
	ElapsedMS   int            `json:"elapsed_ms"`
	FirstFailMS int            `json:"first_failure_ms"`
	LastFailMS  int            `json:"last_failure_ms"`
	// Peers counts the source addresses the backends saw; HashMismatches
	// the bodies that differed from the hash their server sent; Bytes the
	// body bytes received.
	Peers          map[string]int `json:"peers"`
	HashMismatches int            `json:"hash_mismatches"`
	Bytes          int64          `json:"bytes"`
	// Keep-alive mode: connections held, broken, and those whose backend
	// changed.
	Connections    int `json:"connections"`
	Broken         int `json:"broken"`
	BackendChanges int `json:"backend_changes"`
	// BrokenByBackend counts broken connections by their last backend.
	BrokenByBackend map[string]int `json:"broken_by_backend"`
	// UDP mode: flows, and those answered by more than one backend.
	Flows      int `json:"flows"`
	FlowsSplit int `json:"flows_split"`
}

// load runs labclient in the first client's namespace and returns its
// result.
func (l *lab) load(ctx context.Context, args ...string) (loadResult, error) {
	return l.loadFrom(ctx, 1, args...)
}

// keepAlive runs labclient's keep-alive mode from client 1 in the
// background for duration: 40 connections to url, a request on each every
// 50 ms; the result arrives on the channel when it ends.
func (l *lab) keepAlive(url, duration string) <-chan loadResult {
	res := make(chan loadResult, 1)
	go func() {
		r, err := l.load(context.Background(), "-url", url, "-keepalive", "-c", "40", "-interval", "50ms",
			"-duration", duration, "-timeout", "3s")
		if err != nil {
			l.t.Error(err)
		}
		res <- r
	}()
	return res
}

// checkKeptAlive logs what keepAlive's connections saw across what
// happened meanwhile, and fails the test unless all 40 lasted, each on
// its server, and every request was answered.
func checkKeptAlive(t *testing.T, across string, r loadResult) {
	t.Helper()
	t.Logf("keep-alive connections across %s: %d, broken %d, backend changes %d; requests %d, failed %d",
		across, r.Connections, r.Broken, r.BackendChanges, r.Requests, r.Failed)
	if r.Connections != 40 || r.Broken != 0 || r.BackendChanges != 0 || r.Failed != 0 {
		t.Errorf("across %s: %d connections, %d broken, %d changed server, %d requests failed: %v",
			across, r.Connections, r.Broken, r.BackendChanges, r.Failed, r.Errors)
	}
}

// loadFrom runs labclient in client i's namespace; ctx's end kills it.
func (l *lab) loadFrom(ctx context.Context, client int, args ...string) (loadResult, error) {
	return runLoad(exec.CommandContext(ctx, "nsenter", l.labclientArgs(client, args...)...))
}

// loadFromUntil runs labclient in client i's namespace like loadFrom, and
// ends it early when stop is closed: labclient, sent SIGTERM, finishes
// the requests in flight (each within its -timeout, killed if not within
// a minute) and reports what it did. ctx's end kills it.
func (l *lab) loadFromUntil(ctx context.Context, stop <-chan struct{}, client int, args ...string) (loadResult, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-sctx.Done():
		}
	}()
	cmd := exec.CommandContext(sctx, "nsenter", l.labclientArgs(client, args...)...)
	cmd.Cancel = func() error {
		if ctx.Err() != nil {
			return cmd.Process.Kill()
		}
		return cmd.Process.Signal(syscall.SIGTERM)
	}
	cmd.WaitDelay = time.Minute
	return runLoad(cmd)
}

// labclientArgs are nsenter's arguments to run labclient (JSON report)
// with args in client i's namespace.
func (l *lab) labclientArgs(client int, args ...string) []string {
	return append([]string{"--net=/run/netns/" + l.env[fmt.Sprintf("LAB_C%d_NS", client)], filepath.Join(binDir, "labclient"), "-json"}, args...)
}

// runLoad runs a labclient command and decodes its report.
func runLoad(cmd *exec.Cmd) (loadResult, error) {
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var r loadResult
	if jerr := json.Unmarshal(o.Bytes(), &r); jerr != nil {
		return r, fmt.Errorf("labclient: %v (%v): %s %s", err, jerr, o.String(), e.String())
	}
	return r, nil
}

func (l *lab) mustLoad(args ...string) loadResult {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := l.load(ctx, args...)
	if err != nil {
		l.t.Fatal(err)
	}
	return r
}

// eventScripts writes, in a directory of its own, an event script for
// each of names that appends the event's name and the values of vars
// (DLB_INTERFACE, ...) as a line to a log; it returns the directory (for
// --scripts-dir) and the log's path.
func eventScripts(t *testing.T, names []string, vars ...string) (dir, log string) {
	t.Helper()
	dir, log = t.TempDir(), filepath.Join(t.TempDir(), "events.log")
	line := "$DLB_EVENT"
	for _, v := range vars {
		line += " $" + v
	}
	script := "#!/bin/sh\necho \"" + line + "\" >> " + log + "\n"
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir, log
}

// inNS runs a command in one of the lab's namespaces.
func (l *lab) inNS(role string, args ...string) (string, error) {
	out, err := l.script(append([]string{"exec", role}, args...)...).CombinedOutput()
	return string(out), err
}

// The phases of make test (DLB_E2E_PHASE): "alone" runs only the tests that
// call alone, with no other package's tests beside them; "shared" runs the
// others, two at a time and beside the other packages' tests. Unset, every
// test runs, those that call alone first, one at a time.
const (
	phaseAlone  = "alone"
	phaseShared = "shared"
)

// parallel lets a test run beside other such tests (go test's -parallel,
// GOMAXPROCS by default): each builds its own lab under its own prefix, and
// most of an end-to-end test's time is waiting (probe intervals, timeouts,
// routers' timers), not CPU. DLB_E2E_SERIAL=1 runs every test alone.
func parallel(t *testing.T) {
	if os.Getenv("DLB_E2E_PHASE") == phaseAlone {
		t.Skip("runs in make test's shared phase (DLB_E2E_PHASE=shared)")
	}
	if os.Getenv("DLB_E2E_SERIAL") == "" {
		t.Parallel()
	}
}

// alone marks a test that measures timings under load or loads the machine
// itself (its CPUs, or a table the kernel shares between network
// namespaces): it runs one at a time, and in make test in a phase of its
// own, with no other package's tests beside it.
func alone(t *testing.T) {
	if os.Getenv("DLB_E2E_PHASE") == phaseShared {
		t.Skip("runs in make test's phase of its own (DLB_E2E_PHASE=alone)")
	}
}
