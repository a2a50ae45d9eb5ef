package runner

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// script writes a shell script into a temporary directory.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "s")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// alive reports whether a process exists (and is not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	s = s[strings.LastIndexByte(s, ')')+2:]
	return s[0] != 'Z'
}

func TestRun(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		cmd   Cmd
		check func(t *testing.T, r Result)
	}{
		{name: "exit 0 with output", body: "echo hello; echo oops >&2",
			check: func(t *testing.T, r Result) {
				if r.Err != nil || string(r.Stdout) != "hello\n" || string(r.Stderr) != "oops\n" || r.ExitCode() != 0 {
					t.Errorf("%+v", r)
				}
			}},
		{name: "exit 3", body: "exit 3",
			check: func(t *testing.T, r Result) {
				if r.ExitCode() != 3 || r.TimedOut || !r.Started() {
					t.Errorf("%+v", r)
				}
			}},
		{name: "output capped", body: "yes | head -c 100000", cmd: Cmd{MaxOutput: 10},
			check: func(t *testing.T, r Result) {
				if len(r.Stdout) != 10 || !r.Truncated || r.Err != nil {
					t.Errorf("kept %d bytes, truncated %v, err %v", len(r.Stdout), r.Truncated, r.Err)
				}
			}},
		{name: "endless output stays bounded", body: "exec yes", cmd: Cmd{Timeout: 300 * time.Millisecond},
			check: func(t *testing.T, r Result) {
				if !r.TimedOut || len(r.Stdout) != DefaultMaxOutput {
					t.Errorf("timed out %v, kept %d", r.TimedOut, len(r.Stdout))
				}
			}},
		{name: "timeout kills the group", body: "sleep 30 & echo $!; sleep 30", cmd: Cmd{Timeout: 200 * time.Millisecond},
			check: func(t *testing.T, r Result) {
				if !r.TimedOut {
					t.Errorf("not timed out: %+v", r)
				}
				if r.Elapsed > 2*time.Second {
					t.Errorf("took %s", r.Elapsed)
				}
				checkGone(t, r)
			}},
		{name: "exit kills what it left behind", body: "sleep 30 & echo $!", cmd: Cmd{KillGroupOnExit: true},
			check: func(t *testing.T, r Result) {
				if r.Err != nil {
					t.Errorf("%+v", r)
				}
				checkGone(t, r)
			}},
		{name: "environment and directory", body: "echo $DLB_X; pwd", cmd: Cmd{Env: []string{"DLB_X=42"}, Dir: "/"},
			check: func(t *testing.T, r Result) {
				if string(r.Stdout) != "42\n/\n" {
					t.Errorf("stdout %q", r.Stdout)
				}
			}},
		{name: "signal", body: "kill -TERM $$",
			check: func(t *testing.T, r Result) {
				if s, ok := r.Signaled(); !ok || s != syscall.SIGTERM {
					t.Errorf("signal %v %v", s, ok)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cmd
			c.Path = script(t, tt.body)
			tt.check(t, Run(context.Background(), c))
		})
	}
}

// checkGone checks that the background child whose PID the script printed
// is gone.
func checkGone(t *testing.T, r Result) {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(r.Stdout), "\n", 2)[0]))
	if err != nil {
		t.Fatalf("no child PID in %q", r.Stdout)
	}
	deadline := time.Now().Add(2 * time.Second)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("child %d outlived the run", pid)
	}
}

func TestRunNotStarted(t *testing.T) {
	r := Run(context.Background(), Cmd{Path: "/nonexistent/program"})
	if r.Err == nil || r.Started() || r.ExitCode() != -1 {
		t.Errorf("%+v", r)
	}
}

func TestRunCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	r := Run(ctx, Cmd{Path: script(t, "sleep 30")})
	if !r.Canceled || r.TimedOut {
		t.Errorf("%+v", r)
	}
}
