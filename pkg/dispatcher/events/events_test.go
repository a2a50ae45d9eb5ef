package events

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestRecentAndCounts: every event is counted by name, and Recent keeps the
// latest RecentEvents of them, oldest first, however many were raised.
func TestRecentAndCounts(t *testing.T) {
	tests := []struct {
		name      string
		emit      int
		wantFirst int // index of the oldest event Recent still holds
	}{
		{"none", 0, 0},
		{"a few", 3, 0},
		{"exactly full", RecentEvents, 0},
		{"wrapped once", RecentEvents + 7, 7},
		{"wrapped many times", 3*RecentEvents + 1, 2*RecentEvents + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New("", 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
			for i := range tt.emit {
				name := ServerDown
				if i%2 == 1 {
					name = ServerUp
				}
				r.Emit(name, map[string]string{"I": fmt.Sprint(i)})
			}
			c := r.Counts()
			if got := c[ServerDown] + c[ServerUp]; got != uint64(tt.emit) {
				t.Errorf("counted %d events, want %d (%v)", got, tt.emit, c)
			}
			if c[ServerDown] != uint64((tt.emit+1)/2) {
				t.Errorf("serverDown counted %d, want %d", c[ServerDown], (tt.emit+1)/2)
			}
			rec := r.Recent()
			if want := min(tt.emit, RecentEvents); len(rec) != want {
				t.Fatalf("Recent holds %d, want %d", len(rec), want)
			}
			for j, e := range rec {
				if want := fmt.Sprint(tt.wantFirst + j); e.Env["I"] != want {
					t.Fatalf("Recent[%d] is event %s, want %s", j, e.Env["I"], want)
				}
				if j > 0 && e.At.Before(rec[j-1].At) {
					t.Fatalf("Recent[%d] is older than the one before", j)
				}
			}
		})
	}
}

// script writes an executable shell script into dir.
func script(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestUrgentEventsDoNotWait: a takeover's goActive runs while a burst of
// managerAlert scripts is still queued (a router lost behind many ports),
// not after them; each lane keeps the order events were raised in.
func TestUrgentEventsDoNotWait(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	script(t, dir, ManagerAlert, `echo "alert $DLB_PORT" >> `+out+`; sleep 0.5`)
	script(t, dir, GoStandby, `echo "standby" >> `+out)
	script(t, dir, GoActive, `echo "active" >> `+out)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := New(dir, 5*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	for i := range 10 {
		r.Emit(ManagerAlert, map[string]string{"DLB_PORT": fmt.Sprint(i)})
	}
	start := time.Now()
	r.Emit(GoStandby, nil)
	r.Emit(GoActive, nil)
	var lines []string
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(out)
		lines = strings.Fields(strings.ReplaceAll(string(b), "alert ", "alert-"))
		if slices.Contains(lines, "active") {
			break
		}
	}
	took := time.Since(start)
	i, j := slices.Index(lines, "standby"), slices.Index(lines, "active")
	if j < 0 || i < 0 || i > j {
		t.Fatalf("goStandby then goActive not run in order within 3 s: %q", lines)
	}
	alerts := 0
	for _, l := range lines[:j] {
		if strings.HasPrefix(l, "alert-") {
			alerts++
		}
	}
	t.Logf("goActive ran %v after it was raised, after %d of 10 managerAlert scripts", took.Round(time.Millisecond), alerts)
	if alerts > 2 || took > 2*time.Second {
		t.Errorf("goActive waited for %d managerAlert scripts (%v)", alerts, took)
	}
	cancel()
	<-done
}

// TestDroppedEventsLoggedOnce: a burst of events beyond what the queue
// holds is dropped with one warning that counts it, not one per event.
func TestDroppedEventsLoggedOnce(t *testing.T) {
	dir := t.TempDir()
	script(t, dir, ManagerAlert, "sleep 5")
	var logs testutil.LogBuffer
	r := New(dir, 10*time.Second, slog.New(slog.NewTextHandler(&logs, nil)))
	// Run is not started: nothing leaves the queue.
	for i := range maxQueued + 500 {
		r.Emit(ManagerAlert, map[string]string{"DLB_PORT": fmt.Sprint(i)})
	}
	warnings := func() int {
		return len(slices.DeleteFunc(strings.Split(logs.String(), "\n"), func(l string) bool { return !strings.Contains(l, "dropped") }))
	}
	if n := warnings(); n != 1 {
		t.Errorf("%d warnings about dropped events; want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "dropped=1 ") {
		t.Errorf("the warning does not count the drop: %s", logs.String())
	}
	// An urgent event still has room in its own lane.
	r.Emit(GoActive, nil)
	if n := warnings(); n != 1 {
		t.Errorf("goActive dropped behind a full lane of managerAlert")
	}
	if d := r.Dropped(); d != 500 {
		t.Errorf("Dropped() = %d, want 500", d)
	}
	if c := r.Counts(); c[ManagerAlert] != maxQueued+500 || c[GoActive] != 1 {
		t.Errorf("counts %v", c)
	}
}

// TestEmitLogsTheEnvironment: an event's log line carries its variables
// as attributes, in the text log and in the JSON log alike.
func TestEmitLogsTheEnvironment(t *testing.T) {
	env := map[string]string{"DLB_PORT": "80", "DLB_CLUSTER": "198.18.0.100"}
	for _, c := range []struct {
		name    string
		handler func(io.Writer) slog.Handler
		want    string
	}{
		{"text", func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, nil) },
			"msg=event event=serverDown env.DLB_CLUSTER=198.18.0.100 env.DLB_PORT=80\n"},
		{"json", func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, nil) },
			`"msg":"event","event":"serverDown","env":{"DLB_CLUSTER":"198.18.0.100","DLB_PORT":"80"}}` + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b strings.Builder
			New("", 0, slog.New(c.handler(&b))).Emit(ServerDown, env)
			if !strings.HasSuffix(b.String(), c.want) {
				t.Errorf("logged %q, want it to end in %q", b.String(), c.want)
			}
		})
	}
}

// TestEmitLogsLongValuesCut: a long value (the clusters of a pair with
// thousands) is logged cut after a whole word, with its length, while the
// recent events keep it whole.
func TestEmitLogsLongValuesCut(t *testing.T) {
	words := make([]string, 4000)
	for i := range words {
		words[i] = fmt.Sprintf("198.19.%d.%d", i/250, i%250+1)
	}
	long := strings.Join(words, " ")
	var b strings.Builder
	r := New("", 0, slog.New(slog.NewTextHandler(&b, nil)))
	r.Emit(GoActive, map[string]string{"DLB_HA_CLUSTERS": long, "DLB_HA_GROUP": "local"})
	line := b.String()
	if len(line) > 2*maxLogged {
		t.Errorf("logged %d bytes for a value of %d", len(line), len(long))
	}
	want := fmt.Sprintf(`env.DLB_HA_CLUSTERS="%s … (%d bytes in all)"`, long[:strings.LastIndexByte(long[:maxLogged+1], ' ')], len(long))
	if !strings.Contains(line, want) || !strings.Contains(line, "env.DLB_HA_GROUP=local") {
		t.Errorf("logged %q\nwant it to hold %q", line, want)
	}
	if rec := r.Recent(); len(rec) != 1 || rec[0].Env["DLB_HA_CLUSTERS"] != long {
		t.Error("the recent event does not keep the whole value")
	}
}

// TestLongValuesInAFile: a variable too long for a script's environment
// (the clusters of a group of thousands: Linux refuses a string of
// 128 KiB) reaches the script as NAME_FILE, a file holding the value,
// removed when the script ends; shorter ones stay in the environment.
func TestLongValuesInAFile(t *testing.T) {
	words := make([]string, 12000) // IPv6 clusters: some 300 KB
	for i := range words {
		words[i] = fmt.Sprintf("2001:2:0:%x::%x", i/250, i%250+1)
	}
	tests := []struct {
		name   string
		value  string
		inFile bool
	}{
		{"short", "198.18.0.100 198.18.0.101", false},
		{"at the bound", strings.Repeat("a", MaxInEnvironment), false},
		{"past the bound", strings.Repeat("a", MaxInEnvironment+1), true},
		{"12,000 IPv6 clusters", strings.Join(words, " "), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			// The script reads the value as the README says, and notes
			// the file's name if it had one.
			script(t, dir, GoActive, `clusters=${DLB_HA_CLUSTERS-$(cat "$DLB_HA_CLUSTERS_FILE")}
printf '%s\n' "$clusters" > `+out+`.value
if [ -n "$DLB_HA_CLUSTERS_FILE" ]; then echo "$DLB_HA_CLUSTERS_FILE" > `+out+`.file; fi
printf '%s' "$DLB_HA_GROUP" > `+out+`.group`)
			// Raised after, in the same lane: it runs once goActive's
			// script has ended and its file is removed.
			script(t, dir, GoStandby, `touch `+out+`.done`)
			ctx, cancel := context.WithCancel(context.Background())
			var logs testutil.LogBuffer
			r := New(dir, 10*time.Second, slog.New(slog.NewTextHandler(&logs, nil)))
			done := make(chan struct{})
			go func() { r.Run(ctx); close(done) }()
			r.Emit(GoActive, map[string]string{"DLB_HA_CLUSTERS": tt.value, "DLB_HA_GROUP": "local"})
			r.Emit(GoStandby, nil)
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if _, err := os.Stat(out + ".done"); err == nil {
					break
				}
			}
			cancel()
			<-done
			got, err := os.ReadFile(out + ".value")
			if err != nil {
				t.Fatalf("the script did not run: %v\n%s", err, logs.String())
			}
			if string(got) != tt.value+"\n" {
				t.Errorf("the script got %d bytes, want the %d of the value", len(got), len(tt.value)+1)
			}
			if g, _ := os.ReadFile(out + ".group"); string(g) != "local" {
				t.Errorf("DLB_HA_GROUP = %q beside it, want local", g)
			}
			file, err := os.ReadFile(out + ".file")
			if (err == nil) != tt.inFile {
				t.Fatalf("value passed in a file: %v, want %v", err == nil, tt.inFile)
			}
			if tt.inFile {
				if _, err := os.Stat(strings.TrimSpace(string(file))); !os.IsNotExist(err) {
					t.Errorf("the value's file %s is left after the script: %v", file, err)
				}
			}
		})
	}
}
