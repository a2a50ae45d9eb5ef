package advisors

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestExec(t *testing.T) {
	sh := requireTool(t, "sh", "dash")
	tg := Target{Address: netip.MustParseAddr("192.0.2.7"), Port: 8080, Host: "www.dlb.test", Request: "GET /x",
		ConnectTimeout: 200 * time.Millisecond, ReceiveTimeout: 300 * time.Millisecond}
	tests := []struct {
		name   string
		script string
		mode   ExecMode
		up     bool
		reason string // prefix
		load   time.Duration
	}{
		{"exit 0", "exit 0", ExecNormal, true, "", 0},
		{"exit 3 with stderr", "echo 'backend sick' >&2; echo more >&2; exit 3", ExecNormal, false, "exit status 3: backend sick", 0},
		{"exit 1 silent", "exit 1", ExecNormal, false, "exit status 1", 0},
		{"long stderr line", "head -c 100000 /dev/zero | tr '\\0' e >&2; exit 2", ExecNormal, false, "exit status 2: eeee", 0},
		{"environment", `[ "$DLB_ADVISOR_ADDRESS" = 192.0.2.7 ] && [ "$DLB_ADVISOR_PORT" = 8080 ] &&
			[ "$DLB_ADVISOR_TIMEOUT_MS" = 500 ] && [ "$DLB_ADVISOR_HOST" = www.dlb.test ] &&
			[ "$DLB_ADVISOR_REQUEST" = "GET /x" ] && [ -z "$DLB_ADVISOR_RESPONSE" ] || { env >&2; exit 9; }`, ExecNormal, true, "", 0},
		{"signal", "kill -SEGV $$", ExecNormal, false, "killed by signal SIGSEGV", 0},
		{"timeout", "sleep 10", ExecNormal, false, "timeout after 500ms", 0},
		{"10 MB of output", "head -c 10000000 /dev/zero", ExecNormal, true, "", 0},
		{"replace 42", "echo 42; echo ignored", ExecReplace, true, "", 42 * time.Millisecond},
		{"replace with spaces", "echo '  250  '", ExecReplace, true, "", 250 * time.Millisecond},
		{"replace 0", "echo 0", ExecReplace, true, "", 0},
		{"replace -1", "echo -1", ExecReplace, false, "program reported down", 0},
		{"replace -5", "echo -5", ExecReplace, false, `bad load "-5"`, 0},
		{"replace text", "echo fine", ExecReplace, false, `bad load "fine"`, 0},
		{"replace huge", "echo 99999999999999999999", ExecReplace, false, `bad load "99999999999999999999"`, 0},
		{"replace empty", "true", ExecReplace, false, "no load on stdout", 0},
		{"replace exit 1", "echo 42; exit 1", ExecReplace, false, "exit status 1", 0},
		{"replace no line end", "printf 77", ExecReplace, true, "", 77 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := Exec{Program: sh, Args: []string{"-c", tc.script}, Mode: tc.mode}
			r, el := probeTimed(t, a, tg)
			if r.Up != tc.up || !strings.HasPrefix(r.Reason, tc.reason) {
				t.Fatalf("got %+v, want up=%v reason %q", r, tc.up, tc.reason)
			}
			if tc.up && tc.mode == ExecReplace && r.Load != tc.load {
				t.Errorf("load %v, want %v", r.Load, tc.load)
			}
			if tc.up && tc.mode == ExecNormal && (r.Load <= 0 || r.Load > el) {
				t.Errorf("load %v not in (0, %v]", r.Load, el)
			}
			if len(r.Reason) > 200 {
				t.Errorf("reason is %d bytes", len(r.Reason))
			}
			t.Logf("%+v in %v", r, el.Round(time.Millisecond))
		})
	}
	t.Run("missing program", func(t *testing.T) {
		r, _ := probeTimed(t, Exec{Program: "/nonexistent/dlb-check"}, tg)
		if r.Up || !strings.HasPrefix(r.Reason, "cannot run program: ") || !r.Local {
			t.Fatalf("%+v; want down, local: a program this host cannot run says nothing of the server", r)
		}
		r, _ = probeTimed(t, Exec{}, tg)
		if r.Up || r.Reason != "no program" {
			t.Fatalf("%+v", r)
		}
	})
}

// TestExecKillsGroup checks that the program's whole process group dies,
// both on timeout and when the program exits leaving a child behind.
func TestExecKillsGroup(t *testing.T) {
	sh := requireTool(t, "sh", "dash")
	for _, tc := range []struct {
		name, script string
		up           bool
	}{
		{"timeout", `sleep 30 & echo $! > "$PIDFILE"; sleep 30`, false},
		{"exit leaving a child", `sleep 30 & echo $! > "$PIDFILE"; exit 0`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "child.pid")
			t.Setenv("PIDFILE", pidFile)
			a := Exec{Program: sh, Args: []string{"-c", tc.script}}
			tg := Target{Address: loopback, ConnectTimeout: 100 * time.Millisecond, ReceiveTimeout: 300 * time.Millisecond}
			r, el := probeTimed(t, a, tg)
			if r.Up != tc.up {
				t.Fatalf("%+v", r)
			}
			b, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			// The child is a grandchild of ours: once killed, init reaps it.
			deadline := time.Now().Add(2 * time.Second)
			for syscall.Kill(pid, 0) == nil && !processGone(pid) {
				if time.Now().After(deadline) {
					_ = syscall.Kill(pid, syscall.SIGKILL) // by PID, the one we started
					t.Fatalf("child %d survived the probe", pid)
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("%+v in %v; child %d gone", r, el.Round(time.Millisecond), pid)
		})
	}
}

// TestExecCanceled checks that cancelling the context kills the program.
func TestExecCanceled(t *testing.T) {
	sh := requireTool(t, "sh", "dash")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	r := Exec{Program: sh, Args: []string{"-c", "sleep 10"}}.Probe(ctx, Target{Address: loopback})
	if el := time.Since(start); r.Up || r.Reason != "canceled" || el > time.Second {
		t.Fatalf("%+v after %v", r, el)
	}
	if got := fmt.Sprint(ExecNormal, ExecReplace, ExecMode(7)); got != "normal replace ExecMode(7)" {
		t.Errorf("ExecMode strings: %s", got)
	}
}
