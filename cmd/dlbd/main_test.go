package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/client"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// runEnv makes the test binary run dlbd's main with the arguments after
// "--" (see TestMain), so that tests start real dlbd processes without
// building them.
const runEnv = "DLBH_TEST_RUN_DLBD"

func TestMain(m *testing.M) {
	if os.Getenv(runEnv) == "1" {
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"dlbd"}, os.Args[i+1:]...)
				break
			}
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// dirs are one dlbd's directories and socket.
type dirs struct {
	state, pins, socket string
}

// newDirs returns a fresh set under base (state and socket) and under
// /sys/fs/bpf (pins), removed when the test ends.
func newDirs(t *testing.T, base, name string) dirs {
	t.Helper()
	d := dirs{
		state:  filepath.Join(base, name+"-state"),
		pins:   filepath.Join("/sys/fs/bpf", fmt.Sprintf("dlbh-%d-%d-%s", os.Getpid(), rand.Uint32(), name)),
		socket: filepath.Join(base, name+".sock"),
	}
	t.Cleanup(func() { os.RemoveAll(d.pins) })
	return d
}

// dlbd is a dlbd process of a test.
type dlbd struct {
	cmd *exec.Cmd
	// stderr is written by the command's copying goroutine while tests
	// read it.
	stderr *testutil.LogBuffer
	done   chan error
}

// startDlbd starts dlbd on d; it is killed when the test ends.
func startDlbd(t *testing.T, d dirs) *dlbd {
	t.Helper()
	return startDlbdWith(t, d)
}

// startDlbdWith starts dlbd on d under the command wrap (none: directly).
func startDlbdWith(t *testing.T, d dirs, wrap ...string) *dlbd {
	t.Helper()
	return launchDlbd(t, d, wrap)
}

// startDlbdArgs starts dlbd on d with extra flags.
func startDlbdArgs(t *testing.T, d dirs, extra ...string) *dlbd {
	t.Helper()
	return launchDlbd(t, d, nil, extra...)
}

// launchDlbd starts dlbd on d under the command wrap (none: directly),
// with extra flags after the directories', and kills it at the test's end.
func launchDlbd(t *testing.T, d dirs, wrap []string, extra ...string) *dlbd {
	t.Helper()
	return launchDlbdTo(t, d, nil, wrap, extra...)
}

// launchDlbdTo is launchDlbd with dlbd's standard error going to stderr
// (nil: the buffer p.stderr).
func launchDlbdTo(t *testing.T, d dirs, stderr io.Writer, wrap []string, extra ...string) *dlbd {
	t.Helper()
	args := append(append(wrap, os.Args[0], "-test.run=^$", "--", "--state-dir", d.state, "--pin-dir", d.pins,
		"--socket", d.socket, "--scripts-dir", filepath.Join(d.state, "scripts"), "--log-level", "debug"), extra...)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), runEnv+"=1")
	p := &dlbd{cmd: cmd, stderr: &testutil.LogBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = p.stderr
	if stderr != nil {
		cmd.Stderr = stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done //nolint:errcheck // killed: its exit status says nothing
	})
	return p
}

// wait waits at most max for the process to exit and returns its error
// (nil for exit status 0).
func (p *dlbd) wait(t *testing.T, max time.Duration) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return err
	case <-time.After(max):
		t.Fatalf("dlbd still running after %v; stderr:\n%s", max, p.stderr)
		return nil
	}
}

// serving reports whether a server accepts connections on path.
func serving(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// waitServing waits (at most max) until something accepts connections on
// path, and returns how long it took.
func waitServing(t *testing.T, path string, max time.Duration, p *dlbd) time.Duration {
	t.Helper()
	start := time.Now()
	for !serving(path) {
		if time.Since(start) > max {
			t.Fatalf("nothing serves %s after %v; dlbd's stderr:\n%s", path, max, p.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// TestPrivilegedOneDlbdPerDir: a second dlbd on the state directory or the
// pin directory of a running one exits at once with an error naming the
// first one's PID, having touched nothing: not its own socket, not the
// other directory, not the state. One on the running one's socket exits
// before it creates either directory.
// TestRefusedFlags runs dlbd with flags and arguments it refuses: each
// exits 1 with one line naming what was wrong, before it makes anything.
func TestRefusedFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	state, sock, pins := filepath.Join(dir, "state"), filepath.Join(dir, "dlbd.sock"), filepath.Join(dir, "pins")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--stat-dir", state}, "dlbd: unknown flag: --stat-dir\n"},
		{"argument", []string{"eth0"}, `dlbd: unknown command "eth0" for "dlbd"` + "\n"},
		{"flag without its value", []string{"--check-config"}, "dlbd: flag needs an argument: --check-config\n"},
		{"bad number", []string{"--conn-table-size", "many"}, `dlbd: invalid argument "many" for "--conn-table-size" flag: strconv.ParseUint: parsing "many": invalid syntax` + "\n"},
		{"value out of range", []string{"--conn-table-size", "5"}, "dlbd: --conn-table-size: 5 is outside 1024..67108864\n"},
		{"socket path too long", []string{"--socket", "/run/" + strings.Repeat("d", 103)},
			"dlbd: --socket: /run/" + strings.Repeat("d", 103) + " is 108 bytes long; a unix socket's path holds at most 107\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-test.run=^$", "--", "--state-dir", state, "--socket", sock, "--pin-dir", pins}, tc.args...)
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), runEnv+"=1")
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Errorf("exit: %v, want status 1", err)
			}
			if errb.String() != tc.want || out.Len() != 0 {
				t.Errorf("stderr %q (stdout %q), want %q", errb.String(), out.String(), tc.want)
			}
			for _, p := range []string{state, sock, pins} {
				if exists(p) {
					t.Errorf("dlbd made %s", p)
				}
			}
		})
	}
}

func TestPrivilegedOneDlbdPerDir(t *testing.T) {
	testutil.RequirePrivileged(t)
	base := t.TempDir()
	first := newDirs(t, base, "first")
	a := startDlbd(t, first)
	waitServing(t, first.socket, 20*time.Second, a)
	state, err := os.ReadFile(filepath.Join(first.state, "state.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	pid := strconv.Itoa(a.cmd.Process.Pid)

	tests := []struct {
		name string
		d    func(other dirs) dirs
		want string
	}{
		{"same state directory", func(o dirs) dirs { return dirs{first.state, o.pins, o.socket} },
			"another dlbd (pid " + pid + ") already uses the state directory " + first.state},
		{"same pin directory", func(o dirs) dirs { return dirs{o.state, first.pins, o.socket} },
			"another dlbd (pid " + pid + ") already uses the pin directory " + first.pins},
		{"same socket", func(o dirs) dirs { return dirs{o.state, o.pins, first.socket} },
			"another dlbd is listening on " + first.socket},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.d(newDirs(t, base, fmt.Sprintf("second%d", i)))
			b := startDlbd(t, d)
			start := time.Now()
			err := b.wait(t, 10*time.Second)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Fatalf("second dlbd: %v, want a non-zero exit; stderr:\n%s", err, b.stderr)
			}
			t.Logf("refused after %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(b.stderr.String()))
			if !strings.Contains(b.stderr.String(), tt.want) {
				t.Errorf("stderr %q, want it to contain %q", b.stderr, tt.want)
			}
			if d.socket != first.socket && exists(d.socket) {
				t.Errorf("the second dlbd created its socket %s", d.socket)
			}
			if d.pins != first.pins && exists(d.pins) {
				t.Errorf("the second dlbd created its pin directory %s", d.pins)
			}
			switch {
			case d.socket == first.socket && exists(d.state):
				t.Errorf("the second dlbd, refused for its socket, created its state directory %s", d.state)
			case d.state != first.state && d.socket != first.socket:
				if entries, _ := os.ReadDir(d.state); len(entries) != 1 || entries[0].Name() != lockFile {
					t.Errorf("the second dlbd's state directory holds %v, want only its lock file", entries)
				}
			}
		})
	}
	if !serving(first.socket) {
		t.Error("the first dlbd stopped serving")
	}
	after, err := os.ReadFile(filepath.Join(first.state, "state.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if !bytes.Equal(state, after) {
		t.Error("the first dlbd's state file changed")
	}
	// Once the first has stopped, a dlbd may use its directories.
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := a.wait(t, 10*time.Second); err != nil {
		t.Fatalf("first dlbd: %v; stderr:\n%s", err, a.stderr)
	}
	c := startDlbd(t, first)
	waitServing(t, first.socket, 20*time.Second, c)
}

// TestPrivilegedSocketLifecycle: a dlbd whose socket file is deleted
// creates it again within a second; and a dlbd that stops removes only a
// socket it created, never one another process put at its path.
func TestPrivilegedSocketLifecycle(t *testing.T) {
	testutil.RequirePrivileged(t)
	d := newDirs(t, t.TempDir(), "sock")
	a := startDlbd(t, d)
	waitServing(t, d.socket, 20*time.Second, a)
	for round := range 3 {
		if err := os.Remove(d.socket); err != nil {
			t.Fatal(err)
		}
		took := waitServing(t, d.socket, 5*time.Second, a)
		t.Logf("round %d: socket recreated and serving %v after it was deleted", round, took.Round(time.Millisecond))
		if took > time.Second {
			t.Errorf("round %d: socket recreated after %v, want within 1s", round, took)
		}
	}
	if !strings.Contains(a.stderr.String(), "the API socket had disappeared; created it again") {
		t.Errorf("no log line about the recreated socket; stderr:\n%s", a.stderr)
	}

	// Another process takes the path over (dlbd sees a file there and
	// leaves it alone); stopping dlbd must not remove it.
	var other *net.UnixListener
	for range 20 {
		_ = os.Remove(d.socket)
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: d.socket, Net: "unix"})
		if err == nil {
			other = l
			break
		}
	}
	if other == nil {
		t.Fatal("could not take the socket's path over")
	}
	defer other.Close()
	time.Sleep(600 * time.Millisecond) // a few of dlbd's checks
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := a.wait(t, 10*time.Second); err != nil {
		t.Fatalf("dlbd: %v; stderr:\n%s", err, a.stderr)
	}
	if !serving(d.socket) {
		t.Error("the stopping dlbd removed a socket it had not created")
	}
	other.Close()

	// Its own socket, it removes.
	_ = os.Remove(d.socket)
	b := startDlbd(t, d)
	waitServing(t, d.socket, 20*time.Second, b)
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := b.wait(t, 10*time.Second); err != nil {
		t.Fatalf("dlbd: %v; stderr:\n%s", err, b.stderr)
	}
	if exists(d.socket) {
		t.Error("dlbd left its own socket behind")
	}
}

// TestPrivilegedPrivatePinsWarned: dlbd started with "ip netns exec" runs
// in a mount namespace with its own /sys, where it mounts its own bpffs:
// its pins would go with it. It says so; started in the host's mount
// namespace, it does not.
func TestPrivilegedPrivatePinsWarned(t *testing.T) {
	testutil.RequirePrivileged(t)
	const warning = "the pin directory is on a bpffs only this dlbd's mount namespace sees"
	ns := fmt.Sprintf("dlbhpp%d", rand.Uint32()%100000)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	base := t.TempDir()

	host := newDirs(t, base, "host")
	p := startDlbd(t, host)
	waitServing(t, host.socket, 30*time.Second, p)
	if strings.Contains(p.stderr.String(), warning) {
		t.Errorf("warned in the host's mount namespace:\n%s", p.stderr)
	}

	private := newDirs(t, base, "private")
	q := startDlbdWith(t, private, "ip", "netns", "exec", ns)
	waitServing(t, private.socket, 30*time.Second, q)
	if !strings.Contains(q.stderr.String(), warning) {
		t.Errorf("no warning under ip netns exec:\n%s", q.stderr)
	}
}

// TestPrivilegedWatchdog: dlbd started as systemd starts it with
// WatchdogSec= (here 0.6 s) says READY=1, then feeds the watchdog every
// third of it from its management loop, and says STOPPING=1 when it stops.
func TestPrivilegedWatchdog(t *testing.T) {
	testutil.RequirePrivileged(t)
	c := listenNotify(t, false)
	t.Setenv("WATCHDOG_USEC", "600000")
	d := newDirs(t, t.TempDir(), "wd")
	p := startDlbd(t, d)
	// next returns the next notification, "" when none came within d.
	next := func(d time.Duration) string {
		buf := make([]byte, 4096)
		_ = c.SetReadDeadline(time.Now().Add(d))
		n, err := c.Read(buf)
		if err != nil {
			return ""
		}
		return string(buf[:n])
	}
	if got := next(30 * time.Second); !strings.HasPrefix(got, "READY=1\n") {
		t.Fatalf("first notification %q, want READY=1; stderr:\n%s", got, p.stderr)
	}
	start, fed := time.Now(), 0
	for time.Since(start) < 2*time.Second {
		switch got := next(time.Second); got {
		case "WATCHDOG=1":
			fed++
		case "":
			t.Fatalf("no notification for 1 s after %d WATCHDOG=1; stderr:\n%s", fed, p.stderr)
		default:
			t.Errorf("notification %q, want WATCHDOG=1", got)
		}
	}
	// Every 0.2 s for 2 s: 10; the check's own time and a loaded machine
	// make it fewer, never more.
	if fed < 7 || fed > 11 {
		t.Errorf("%d WATCHDOG=1 in 2 s, want about 10 (one every 0.2 s)", fed)
	}
	if !strings.Contains(p.stderr.String(), "feeding systemd's watchdog while dlbd's management loop answers") ||
		!strings.Contains(p.stderr.String(), "limit=600ms") {
		t.Errorf("no log line about the watchdog and its limit; stderr:\n%s", p.stderr)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for got := next(5 * time.Second); got != "STOPPING=1"; got = next(5 * time.Second) {
		if got != "WATCHDOG=1" {
			t.Fatalf("notification %q while stopping, want STOPPING=1", got)
		}
	}
	if err := p.wait(t, 10*time.Second); err != nil {
		t.Fatalf("dlbd: %v; stderr:\n%s", err, p.stderr)
	}
	if got := next(300 * time.Millisecond); got != "" {
		t.Errorf("notification %q after dlbd stopped", got)
	}
}

// TestPrivilegedWatchdogWhileLoading: loading the executor keeps dlbd's
// management loop from answering for longer than a short watchdog limit
// (the verifier alone takes about 0.7 s); dlbd keeps feeding the watchdog
// all the same, never leaving a gap as long as the limit, and says why.
func TestPrivilegedWatchdogWhileLoading(t *testing.T) {
	testutil.RequirePrivileged(t)
	const limit = 500 * time.Millisecond
	ns := fmt.Sprintf("dlbhwd%d", rand.Uint32()%100000)
	for _, args := range [][]string{{"netns", "add", ns}, {"-n", ns, "link", "add", "dlbhwd0", "type", "veth", "peer", "name", "dlbhwd1"},
		{"-n", ns, "link", "set", "dlbhwd0", "up"}, {"-n", ns, "link", "set", "dlbhwd1", "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
		if args[0] == "netns" {
			t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		}
	}
	c := listenNotify(t, false)
	t.Setenv("WATCHDOG_USEC", strconv.FormatInt(limit.Microseconds(), 10))
	d := newDirs(t, t.TempDir(), "wdl")
	p := startDlbdWith(t, d, "nsenter", "--net=/run/netns/"+ns)
	buf := make([]byte, 4096)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := c.Read(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "READY=1\n") {
		t.Fatalf("no READY=1 (%v); stderr:\n%s", err, p.stderr)
	}
	// Feedings' times, read while the executor loads.
	var fed []time.Time
	reading := make(chan struct{})
	go func() {
		defer close(reading)
		for {
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if string(buf[:n]) == "WATCHDOG=1" {
				fed = append(fed, time.Now())
			}
		}
	}()
	time.Sleep(500 * time.Millisecond)
	ifname := "dlbhwd0"
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := client.New(d.socket)
	if _, err := cl.Apply(ctx, api.Op{Object: "executor", Action: "start", Interface: &ifname}); err != nil {
		t.Fatalf("executor start: %v; stderr:\n%s", err, p.stderr)
	}
	took := time.Since(start)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := cl.Apply(ctx, api.Op{Object: "executor", Action: "stop"}); err != nil {
			t.Errorf("executor stop: %v", err)
		}
	})
	time.Sleep(500 * time.Millisecond)
	_ = p.cmd.Process.Signal(syscall.SIGSTOP) // ends the feeding: the reader stops 2 s later
	<-reading
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	t.Logf("executor start took %v; %d WATCHDOG=1 in %v", took.Round(time.Millisecond), len(fed), time.Since(start).Round(time.Millisecond))
	if took <= limit {
		t.Fatalf("loading the executor took %v, not longer than the watchdog's limit %v: the test shows nothing", took, limit)
	}
	var most time.Duration
	for i := 1; i < len(fed); i++ {
		if fed[i].Before(start.Add(-limit)) || fed[i-1].After(start.Add(took+limit)) {
			continue
		}
		most = max(most, fed[i].Sub(fed[i-1]))
	}
	if len(fed) < 2 || most >= limit {
		t.Errorf("longest gap between WATCHDOG=1 around the executor's loading: %v (%d fed), want under the limit %v; stderr:\n%s",
			most, len(fed), limit, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), `busy; feeding systemd's watchdog while it works" operation="loading the executor"`) {
		t.Errorf("no log line about the busy loop; stderr:\n%s", p.stderr)
	}
}

// TestPrivilegedLogReaderGone: dlbd whose standard error is a pipe whose
// reader went away (a logger that ended) goes on serving: each change is
// applied and answered, its log lines lost. Before, its next log line
// ended it with SIGPIPE, in the middle of a change.
func TestPrivilegedLogReaderGone(t *testing.T) {
	testutil.RequirePrivileged(t)
	d := newDirs(t, t.TempDir(), "pipe")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := launchDlbdTo(t, d, w, nil)
	w.Close()
	// The reader takes dlbd's first line, and goes.
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil || !strings.Contains(line, "dlbd started") {
		t.Fatalf("dlbd's first line: %q %v", line, err)
	}
	r.Close()
	waitServing(t, d.socket, 20*time.Second, p)
	cl := client.New(d.socket)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 5 {
		addr := fmt.Sprintf("198.18.0.%d", 100+i)
		if _, err := cl.Apply(ctx, api.Op{Object: "cluster", Action: "add", Target: addr}); err != nil {
			t.Fatalf("cluster add %s with the log reader gone: %v", addr, err)
		}
	}
	cls, err := cl.Clusters(ctx, "")
	if err != nil || len(cls) != 5 {
		t.Fatalf("clusters after the adds: %d, %v", len(cls), err)
	}
	select {
	case err := <-p.done:
		p.done <- err
		t.Fatalf("dlbd ended: %v", err)
	default:
	}
	// It still stops cleanly on SIGTERM.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 20*time.Second); err != nil {
		t.Errorf("dlbd after SIGTERM: %v", err)
	}
}

// TestPrivilegedLogReaderStuck: dlbd whose standard error is a pipe
// nobody reads (a logger stopped, journald stuck) goes on answering:
// 400 changes, far more log than the pipe holds, are each applied and
// answered; once the pipe is read, their lines are there, in order.
// Before, dlbd stopped answering after about 250 (the pipe's 64 KiB),
// every goroutine waiting on a log line.
func TestPrivilegedLogReaderStuck(t *testing.T) {
	testutil.RequirePrivileged(t)
	d := newDirs(t, t.TempDir(), "stuck")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p := launchDlbdTo(t, d, w, nil)
	w.Close()
	waitServing(t, d.socket, 20*time.Second, p)
	cl := client.New(d.socket)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	apply := func(op api.Op) {
		t.Helper()
		opCtx, opCancel := context.WithTimeout(ctx, 5*time.Second)
		defer opCancel()
		if _, err := cl.Apply(opCtx, op); err != nil {
			t.Fatalf("%s %s %s with nobody reading dlbd's log: %v", op.Object, op.Action, op.Target, err)
		}
	}
	apply(api.Op{Object: "cluster", Action: "add", Target: "198.18.0.100"})
	apply(api.Op{Object: "port", Action: "add", Target: "198.18.0.100@80"})
	const pairs = 200
	for i := range pairs {
		target := fmt.Sprintf("198.18.0.100@80@198.18.3.%d", i%250+1)
		apply(api.Op{Object: "server", Action: "add", Target: target})
		apply(api.Op{Object: "server", Action: "remove", Target: target})
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(out), "msg=applied"); n != 2+2*pairs {
		t.Errorf("%d changes logged, want %d", n, 2+2*pairs)
	}
	if len(out) <= 64<<10 {
		t.Errorf("dlbd logged %d bytes, no more than the pipe holds: the test shows nothing", len(out))
	}
	if !strings.HasSuffix(strings.TrimSpace(string(out)), `msg="dlbd stopped; the executor stays pinned and keeps forwarding"`) {
		t.Errorf("the log does not end with dlbd's last line:\n...%s", out[max(0, len(out)-500):])
	}
}

// TestPrivilegedStoppedWhileStarting: a dlbd stopped right after it
// started, before it told systemd it is ready, logs no error for that and
// nothing after its last line.
func TestPrivilegedStoppedWhileStarting(t *testing.T) {
	testutil.RequirePrivileged(t)
	base := t.TempDir()
	for i := range 5 {
		d := newDirs(t, base, fmt.Sprintf("early%d", i))
		p := startDlbd(t, d)
		for deadline := time.Now().Add(20 * time.Second); !strings.Contains(p.stderr.String(), `msg="dlbd started"`); {
			if time.Now().After(deadline) {
				t.Fatalf("dlbd did not start; stderr:\n%s", p.stderr)
			}
			time.Sleep(time.Millisecond)
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := p.wait(t, 20*time.Second); err != nil {
			t.Fatalf("dlbd: %v; stderr:\n%s", err, p.stderr)
		}
		out := strings.TrimSpace(p.stderr.String())
		if strings.Contains(out, "level=ERROR") || !strings.HasSuffix(out, `msg="dlbd stopped; the executor stays pinned and keeps forwarding"`) {
			t.Fatalf("run %d: an error, or a line after the last (%d bytes):\n%s", i, len(out), out)
		}
	}
}

// TestPrivilegedLogFormat: --log-format json makes every line a JSON
// object (for collectors); another format is refused, naming the flag,
// before dlbd touches anything.
func TestPrivilegedLogFormat(t *testing.T) {
	testutil.RequirePrivileged(t)
	base := t.TempDir()
	d := newDirs(t, base, "json")
	p := startDlbdArgs(t, d, "--log-format", "json")
	waitServing(t, d.socket, 20*time.Second, p)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 20*time.Second); err != nil {
		t.Fatalf("dlbd: %v; stderr:\n%s", err, p.stderr)
	}
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(p.stderr.String()), "\n") {
		var rec struct {
			Time  time.Time `json:"time"`
			Level string    `json:"level"`
			Msg   string    `json:"msg"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Time.IsZero() || rec.Level == "" {
			t.Fatalf("a line that is not a JSON log record: %q (%v)", line, err)
		}
		msgs = append(msgs, rec.Msg)
	}
	if len(msgs) < 2 || msgs[0] != "dlbd started" || !strings.HasPrefix(msgs[len(msgs)-1], "dlbd stopped") {
		t.Errorf("messages %q, want dlbd started ... dlbd stopped", msgs)
	}

	d2 := newDirs(t, base, "xml")
	p2 := startDlbdArgs(t, d2, "--log-format", "xml")
	err := p2.wait(t, 20*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(p2.stderr.String(), `--log-format: "xml" is not a log format: text or json`) {
		t.Errorf("--log-format xml: %v; stderr:\n%s", err, p2.stderr)
	}
	if exists(d2.state) {
		t.Error("a refused --log-format made the state directory")
	}
}

// TestPermissionHint: a refusal for want of permission tells a user
// other than root what dlbd needs; other errors, and root, get no hint.
func TestPermissionHint(t *testing.T) {
	denied := fmt.Errorf("creating pin directory: %w", &fs.PathError{Op: "mkdir", Path: "/sys/fs/bpf/dlb", Err: syscall.EACCES})
	notPermitted := fmt.Errorf("loading the executor: map create: %w", syscall.EPERM)
	for _, c := range []struct {
		err  error
		euid int
		hint bool
	}{
		{denied, 1000, true},
		{notPermitted, 1000, true},
		{denied, 0, false},
		{errors.New("creating state directory: mkdir /etc/passwd: not a directory"), 1000, false},
	} {
		h := permissionHint(c.err, c.euid)
		if (h != "") != c.hint || c.hint && !strings.Contains(h, "CAP_BPF, CAP_NET_ADMIN and CAP_PERFMON") {
			t.Errorf("%v as %d: hint %q", c.err, c.euid, h)
		}
	}
}
