package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// listenNotify opens a datagram socket standing in for systemd's notify
// socket and points $NOTIFY_SOCKET at it (as a path, or abstract).
func listenNotify(t *testing.T, abstract bool) *net.UnixConn {
	t.Helper()
	name := filepath.Join(t.TempDir(), "notify")
	env := name
	if abstract {
		name = "\x00dlbo-notify-" + strings.ReplaceAll(t.Name(), "/", "-")
		env = "@" + name[1:]
	}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", env)
	return c
}

func readNotify(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("reading the notify socket: %v", err)
	}
	return string(buf[:n])
}

// TestNotifyReadyWaitsForTheAPI: READY=1 is sent only once the check
// passes, never before.
func TestNotifyReadyWaitsForTheAPI(t *testing.T) {
	c := listenNotify(t, false)
	var calls atomic.Int32
	check := func(context.Context) error {
		if calls.Add(1) < 4 {
			return errors.New("not yet")
		}
		return nil
	}
	done := make(chan error, 1)
	go func() {
		done <- notifyReady(context.Background(), check, 10*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	got := readNotify(t, c)
	if !strings.HasPrefix(got, "READY=1\n") {
		t.Errorf("got %q, want READY=1 first", got)
	}
	if n := calls.Load(); n != 4 {
		t.Errorf("READY=1 after %d checks, want after the 4th (the first that passed)", n)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestNotifyReadyGivesUp(t *testing.T) {
	c := listenNotify(t, false)
	check := func(context.Context) error { return errors.New("connection refused") }
	err := notifyReady(context.Background(), check, 300*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("got %v, want the check's error", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, _ := c.Read(make([]byte, 64)); n > 0 {
		t.Error("READY=1 was sent although the API never answered")
	}
}

// TestWatchdogFeedsOnlyWhileDlbdAnswers: WATCHDOG=1 goes out every period
// while the check passes, and none while it fails or hangs (a hung check
// is not started again beside itself); feeding resumes when the check
// passes again, each change of state is logged once, and the watchdog
// stops with its context. A loop busy in an operation long by nature (its
// tables being loaded) is fed for up to longPatience.
func TestWatchdogFeedsOnlyWhileDlbdAnswers(t *testing.T) {
	c := listenNotify(t, true)
	const period = 40 * time.Millisecond
	var mode atomic.Int32 // 0 answers, 1 fails, 2 hangs until released
	var running, most atomic.Int32
	release := make(chan struct{})
	check := func(ctx context.Context) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		switch mode.Load() {
		case 1:
			return errors.New("engine stopped")
		case 2:
			<-release // ignores ctx, as a management call stuck in its loop would
			return nil
		}
		return nil
	}
	var busyFor atomic.Int64 // <0: not busy
	busyFor.Store(-1)
	busy := func() (string, time.Duration, bool) {
		d := time.Duration(busyFor.Load())
		return "loading the executor", d, d >= 0
	}
	var logs testutil.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { watchdog(ctx, check, busy, period, log); close(done) }()

	// count reads the WATCHDOG=1 notifications that arrive within d.
	count := func(d time.Duration) int {
		n := 0
		buf := make([]byte, 64)
		for end := time.Now().Add(d); ; {
			_ = c.SetReadDeadline(end)
			k, err := c.Read(buf)
			if err != nil {
				return n
			}
			if got := string(buf[:k]); got != "WATCHDOG=1" {
				t.Errorf("notification %q, want WATCHDOG=1", got)
			}
			n++
		}
	}
	steps := []struct {
		name    string
		mode    int32
		busyFor time.Duration // <0: not busy
		lo, hi  int           // WATCHDOG=1 within 10 periods, after a settling period
	}{
		{"answers", 0, -1, 4, 11},
		{"fails", 1, -1, 0, 0},
		{"answers again", 0, -1, 4, 11},
		{"fails while busy", 1, time.Minute, 4, 11},
		{"fails while busy for too long", 1, longPatience, 0, 0},
		{"hangs", 2, -1, 0, 0},
		{"hangs while busy", 2, time.Second, 4, 11},
		{"hangs, no longer busy", 2, -1, 0, 0},
	}
	for _, s := range steps {
		mode.Store(s.mode)
		busyFor.Store(int64(s.busyFor))
		count(2 * period) // what was on its way when the mode changed
		if n := count(10 * period); n < s.lo || n > s.hi {
			t.Errorf("%s: %d WATCHDOG=1 in 10 periods, want %d..%d", s.name, n, s.lo, s.hi)
		}
	}
	if m := most.Load(); m != 1 {
		t.Errorf("%d checks ran at once, want 1", m)
	}
	mode.Store(0)
	close(release)
	if n := count(10 * period); n < 4 {
		t.Errorf("after the hung check returned: %d WATCHDOG=1 in 10 periods, want feeding again", n)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("the watchdog did not stop with its context")
	}
	out := logs.String()
	for line, want := range map[string]int{
		"not feeding systemd's watchdog":            3, // fails, busy for too long, no longer busy
		"feeding systemd's watchdog again":          2, // answers again, released
		"busy; feeding systemd's watchdog while it": 2, // fails while busy, hangs while busy
	} {
		if n := strings.Count(out, line); n != want {
			t.Errorf("%d lines %q, want %d:\n%s", n, line, want, out)
		}
	}
}

// TestWatchdogExcusesAnAnswerBehindALongOperation: a check asked while
// the loop was in a long operation waits for that work to end; timed out
// just after it ended, it is given one more period (CI run 188: a start
// of the executor left 500 ms between feedings where the limit was 500),
// and its answer then feeds the watchdog without a failure in between.
func TestWatchdogExcusesAnAnswerBehindALongOperation(t *testing.T) {
	c := listenNotify(t, true)
	const period = 100 * time.Millisecond
	answer := make(chan struct{})
	check := func(context.Context) error { <-answer; return nil } // behind the long operation
	var ended, closed atomic.Bool
	busy := func() (string, time.Duration, bool) {
		if !ended.Load() {
			return "loading the executor", time.Second, true
		}
		if closed.CompareAndSwap(false, true) {
			// The loop answers a quarter of a period after the
			// first look that finds the operation over.
			time.AfterFunc(period/4, func() { close(answer) })
		}
		return "", 0, false
	}
	var logs testutil.LogBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { watchdog(ctx, check, busy, period, slog.New(slog.NewTextHandler(&logs, nil))); close(done) }()
	var fed []time.Time
	buf := make([]byte, 64)
	for end := time.Now().Add(8 * period); ; {
		if len(fed) == 3 {
			ended.Store(true)
		}
		_ = c.SetReadDeadline(end)
		if _, err := c.Read(buf); err != nil {
			break
		}
		fed = append(fed, time.Now())
	}
	cancel()
	<-done
	var most time.Duration
	for i := 1; i < len(fed); i++ {
		most = max(most, fed[i].Sub(fed[i-1]))
	}
	if out := logs.String(); strings.Contains(out, "not feeding") || len(fed) < 6 || most > 2*period {
		t.Errorf("%d WATCHDOG=1 in 8 periods, at most %v apart (want within 2 periods); log:\n%s", len(fed), most, out)
	}
}

// TestWatchdogLimit: the watchdog is fed when systemd asks for it for this
// process, and its variables are gone from the environment afterwards (event
// scripts do not inherit them); a malformed one is an error in the log.
func TestWatchdogLimit(t *testing.T) {
	me := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		usec, pid string
		want      time.Duration
		logged    string
	}{
		{"", "", 0, ""},
		{"30000000", "", 30 * time.Second, ""},
		{"30000000", me, 30 * time.Second, ""},
		{"30000000", "1", 0, ""},
		{"thirty", "", 0, "WATCHDOG_USEC"},
		{"-5", "", 0, "WATCHDOG_USEC"},
		{"30000000", "me", 0, "WATCHDOG_PID"},
	} {
		t.Setenv("WATCHDOG_USEC", tc.usec)
		t.Setenv("WATCHDOG_PID", tc.pid)
		var logs testutil.LogBuffer
		got := watchdogLimit(slog.New(slog.NewTextHandler(&logs, nil)))
		if got != tc.want {
			t.Errorf("USEC %q PID %q: %v, want %v", tc.usec, tc.pid, got, tc.want)
		}
		if tc.logged == "" && logs.String() != "" || !strings.Contains(logs.String(), tc.logged) {
			t.Errorf("USEC %q PID %q: logged %q, want %q", tc.usec, tc.pid, logs.String(), tc.logged)
		}
		for _, v := range []string{"WATCHDOG_USEC", "WATCHDOG_PID"} {
			if _, set := os.LookupEnv(v); set {
				t.Errorf("USEC %q PID %q: %s still in the environment", tc.usec, tc.pid, v)
			}
		}
	}
}
