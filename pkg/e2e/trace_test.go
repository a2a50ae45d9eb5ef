package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
)

// startTrace runs "dlbctl executor trace args" in the background and
// returns once dlbd traces; wait ends it (SIGINT if it still runs) and
// returns its standard output. While the previous trace is still being
// stopped (dlbd notices its client went away within 50 ms) it tries
// again.
func (l *lab) startTrace(args ...string) (wait func() string) {
	l.t.Helper()
	for range 20 {
		if wait, busy := l.tryTrace(args...); !busy {
			return wait
		}
		time.Sleep(100 * time.Millisecond)
	}
	l.t.Fatal("a trace was still running after 2 s")
	return nil
}

func (l *lab) tryTrace(args ...string) (wait func() string, busy bool) {
	l.t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "dlbctl"), append([]string{"--socket", l.sock, "executor", "trace"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout = &out
	stderr, err := cmd.StderrPipe()
	if err != nil {
		l.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	started := make(chan bool, 1)
	var rest bytes.Buffer
	go func() {
		ok := false
		for sc.Scan() {
			if !ok && strings.Contains(sc.Text(), "tracing") {
				ok = true
				started <- true
				continue
			}
			rest.WriteString(sc.Text() + "\n")
		}
		if !ok {
			started <- false
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case ok := <-started:
		if !ok {
			_ = cmd.Wait()
			if strings.Contains(rest.String(), "a trace is running") {
				return nil, true
			}
			l.t.Fatalf("dlbctl executor trace %v did not start: %s", args, rest.String())
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		l.t.Fatalf("dlbctl executor trace %v did not start in 10 s", args)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return func() string {
		l.t.Helper()
		var err error
		select {
		case err = <-done:
		case <-time.After(2 * time.Second):
			_ = cmd.Process.Signal(syscall.SIGINT)
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				l.t.Fatal("dlbctl executor trace did not stop on SIGINT")
			}
		}
		if err != nil {
			l.t.Fatalf("dlbctl executor trace %v: %v\n%s", args, err, rest.String())
		}
		l.t.Logf("dlbctl executor trace %v: %s", args, strings.TrimSpace(rest.String()))
		return out.String()
	}, false
}

// TestPrivilegedE2ETrace traces real connections through the VIP: every
// connection the trace saw went to one server, the one whose reply the
// client got, in the same numbers; a second trace stops at its count and
// writes a file that tcpdump reads; one trace runs at a time.
func TestPrivilegedE2ETrace(t *testing.T) {
	parallel(t)
	l := newLab(t, 3)
	l.startDlbd()
	l.configure("generic", 10, 10, 10)

	// The whole of a sequential load, traced; the trace ends on SIGINT.
	wait := l.startTrace("--cluster", l.vip()+"@80", "-o", "json")
	// One trace at a time; the refusal says which runs.
	running := "cluster " + l.vip() + " port 80"
	if _, errOut, code := l.ctl("executor", "trace", "--count", "1"); code == 0 ||
		!strings.Contains(errOut, "a trace is running (one at a time): "+running+", since ") {
		t.Errorf("a second trace: exit %d, %q", code, errOut)
	}
	r := l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "30", "-c", "1")
	if r.Failed != 0 || r.OK != 30 {
		t.Fatalf("%d of %d requests failed: %v", r.Failed, r.Requests, r.Errors)
	}
	// The executor report shows the trace while it runs, and not after.
	if rep, errOut, code := l.ctl("executor", "report"); code != 0 || !regexp.MustCompile(
		`packet trace: +running since \S+Z \(`+regexp.QuoteMeta(running)+`\), \d+ packets so far`).MatchString(rep) {
		t.Errorf("executor report during a trace: exit %d %s\n%s", code, errOut, rep)
	}
	out := wait()
	// dlbd notices its client went away within 50 ms.
	for i := 0; ; i++ {
		rep, _, _ := l.ctl("executor", "report")
		if !strings.Contains(rep, "packet trace") {
			break
		}
		if i == 20 {
			t.Errorf("executor report 2 s after the trace:\n%s", rep)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	byServer := map[string]string{} // backend address -> lab name (b1...)
	for i := 1; i <= 3; i++ {
		byServer[l.backend(i)] = fmt.Sprintf("b%d", i)
	}
	conns := map[string]string{} // client address:port -> server
	syns := map[string]int{}     // lab name -> connections traced
	packets := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var p api.TracePacket
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatalf("trace line %q: %v", line, err)
		}
		packets++
		name, ok := byServer[p.Server]
		if !ok || p.Verdict != "tx" && p.Verdict != "redirect" || p.Dst != l.vip()+":80" {
			t.Errorf("traced packet to %s went to %q (%s %s)", p.Dst, p.Server, p.Verdict, p.Reason)
			continue
		}
		if prev, seen := conns[p.Src]; seen && prev != p.Server {
			t.Errorf("connection %s went to %s and to %s", p.Src, prev, p.Server)
		}
		conns[p.Src] = p.Server
		if p.TCPFlags == "S" {
			syns[name]++
			if p.Hit {
				t.Errorf("a SYN (%s) followed a connection-table entry", p.Src)
			}
		}
	}
	if packets < 100 {
		t.Errorf("only %d packets traced for 30 connections", packets)
	}
	for name, n := range r.PerBackend {
		if syns[name] != n {
			t.Errorf("%s: the trace saw %d connections go to it, the client got %d replies from it (trace %v, client %v)",
				name, syns[name], n, syns, r.PerBackend)
		}
	}
	t.Logf("traced %d packets of %d connections: %v; the client's replies: %v", packets, len(conns), syns, r.PerBackend)

	// A trace of 100 packets to the VIP, written to a file; tcpdump reads
	// it.
	file := filepath.Join(l.run, "trace.pcapng")
	wait = l.startTrace("--cluster", l.vip(), "--count", "100", "--duration", "60s", "-w", file)
	r = l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "40", "-c", "2")
	if r.Failed != 0 {
		t.Fatalf("%d requests failed: %v", r.Failed, r.Errors)
	}
	wait()
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		t.Fatal("tcpdump is missing (make test-deps installs it)")
	}
	dump, err := exec.Command(tcpdump, "-r", file, "-nn").CombinedOutput()
	if err != nil {
		t.Fatalf("tcpdump -r: %v\n%s", err, dump)
	}
	n := 0
	for _, line := range strings.Split(string(dump), "\n") {
		if strings.Contains(line, " > "+l.vip()+".80: ") {
			n++
		}
	}
	if n != 100 {
		t.Errorf("tcpdump read %d packets to %s:80 from the file, want 100:\n%s", n, l.vip(), dump)
	}
	if info, err := os.Stat(file); err == nil {
		t.Logf("%s: %d bytes; tcpdump's first lines:\n%s", file, info.Size(), firstLines(string(dump), 3))
	}

	// No trace now: the executor's switch is off (its report would not
	// say; dlbd's log does).
	if !strings.Contains(l.dlbdLog(), "packet trace stopped") {
		t.Error("dlbd did not log the end of the traces")
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
