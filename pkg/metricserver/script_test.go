package metricserver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The tests that write scripts do not run in parallel with each other:
// exec'ing a file while another goroutine forks with the file still open
// for writing fails with ETXTBSY.

// writeScripts writes shell scripts (name → body after the #! line) into a
// new directory and returns it.
func writeScripts(t *testing.T, scripts map[string]string, mode os.FileMode) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range scripts {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestParseScriptOutput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		out     string
		want    float64
		wantErr string
	}{
		{"42\n", 42, ""},
		{"  17.5  \n", 17.5, ""},
		{"63%\n", 63, ""},
		{"250\n", 100, ""}, // clamped
		{"-5\n", 0, ""},    // clamped
		{"1e3", 100, ""},
		{"abc\n", 0, "not a number"},
		{"12 13\n", 0, "not a number"},
		{"1\n2\n", 0, "not a number"},
		{"", 0, "empty output"},
		{"NaN", 0, "not a finite number"},
		{"+Inf", 0, "not a finite number"},
	} {
		got, err := parseScriptOutput(tc.out)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: error %v, want %q", tc.out, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %v, %v; want %v", tc.out, got, err, tc.want)
		}
	}
}

func TestRunScripts(t *testing.T) {
	dir := writeScripts(t, map[string]string{
		"fifty":    "echo 50",
		"huge":     "echo 250",
		"negative": "echo -7",
		"word":     "echo abc",
		"failing":  "echo 10; exit 3",
		"silent":   "true",
		"chatty":   "i=0; while [ $i -lt 2000 ]; do echo 12345; i=$((i+1)); done",
		"stderr":   "echo oops >&2; echo 8",
		"slow":     "sleep 30; echo 1",
		"slowkids": "(sleep 30; echo 1) & wait",
	}, 0o755)
	// Not metrics: hidden, not executable, a directory.
	for _, name := range []string{".hidden", "README"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\necho 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, ".hidden"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "subdir"), 0o755); err != nil {
		t.Fatal(err)
	}

	list, err := listScripts(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list {
		names = append(names, s.name)
	}
	if got, want := strings.Join(names, " "), "chatty failing fifty huge negative silent slow slowkids stderr word"; got != want {
		t.Fatalf("scripts %q, want %q", got, want)
	}

	const timeout = 300 * time.Millisecond
	start := time.Now()
	results := runScripts(context.Background(), list, timeout)
	elapsed := time.Since(start)
	// All run in parallel; the sleepers are killed at the timeout, their
	// children with them.
	if elapsed > timeout+time.Second {
		t.Errorf("took %v with a %v timeout", elapsed, timeout)
	}
	want := map[string]struct {
		value   float64
		errPart string
	}{
		"fifty":    {50, ""},
		"huge":     {100, ""},
		"negative": {0, ""},
		"stderr":   {8, ""},
		"word":     {0, `output "abc" is not a number`},
		"failing":  {0, "exit status 3"},
		"silent":   {0, "empty output"},
		"chatty":   {0, "output exceeds 4096 bytes"},
		"slow":     {0, "killed after the 300ms timeout"},
		"slowkids": {0, "killed after the 300ms timeout"},
	}
	for _, r := range results {
		w := want[r.name]
		switch {
		case w.errPart != "" && (r.err == nil || !strings.Contains(r.err.Error(), w.errPart)):
			t.Errorf("%s: error %v, want %q", r.name, r.err, w.errPart)
		case w.errPart == "" && (r.err != nil || r.value != w.value):
			t.Errorf("%s: %v, %v; want %v", r.name, r.value, r.err, w.value)
		}
	}
}

func TestScriptPermissionsAndNames(t *testing.T) {
	dir := writeScripts(t, map[string]string{"writable": "echo 5"}, 0o777)
	if err := os.WriteFile(filepath.Join(dir, "bad name!"), []byte("#!/bin/sh\necho 5\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	list, err := listScripts(dir)
	if err != nil {
		t.Fatal(err)
	}
	res := runScripts(context.Background(), list, time.Second)
	if len(res) != 2 {
		t.Fatalf("results %+v", res)
	}
	for _, r := range res {
		if r.err == nil {
			t.Errorf("%s ran: %v", r.name, r.value)
		}
	}
	if _, err := listScripts(filepath.Join(dir, "nope")); err == nil {
		t.Error("listing a missing directory succeeded")
	}
	// A directory others may write is refused, unless sticky like /tmp.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := listScripts(dir); err == nil || !strings.Contains(err.Error(), "chmod go-w") {
		t.Errorf("world-writable directory: %v", err)
	}
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if _, err := listScripts(dir); err != nil {
		t.Errorf("sticky directory: %v", err)
	}
}

// TestAgentScripts: scripts appear in the report, override built-ins, and
// a failing or slow script is reported missing with its reason, within the
// timeout.
func TestAgentScripts(t *testing.T) {
	dir := writeScripts(t, map[string]string{
		"cpuload": "echo 33",
		"custom":  "echo 250",
		"garbage": "echo abc",
		"slow":    "sleep 30",
	}, 0o755)
	a := newTestAgent(t, AgentOptions{ScriptsDir: dir, ScriptTimeout: 200 * time.Millisecond})
	start := time.Now()
	rep := a.Collect(context.Background())
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("collect took %v with a 200ms script timeout", elapsed)
	}
	wantMetrics := map[string]float64{MetricCPULoad: 33, MetricMemLoad: 75, MetricLoadAvg: 75, "custom": 100}
	if len(rep.Metrics) != len(wantMetrics) {
		t.Errorf("metrics %v, want %v", rep.Metrics, wantMetrics)
	}
	for k, v := range wantMetrics {
		if rep.Metrics[k] != v {
			t.Errorf("%s = %v, want %v", k, rep.Metrics[k], v)
		}
	}
	if !strings.Contains(rep.Missing["garbage"], "not a number") || !strings.Contains(rep.Missing["slow"], "killed after") || len(rep.Missing) != 2 {
		t.Errorf("missing %v", rep.Missing)
	}
	// Within the reuse window the collection is served again.
	if again := a.Collect(context.Background()); again.TimestampMS != rep.TimestampMS {
		t.Errorf("collection not reused: %d then %d", rep.TimestampMS, again.TimestampMS)
	}

	// Through the wire, a missing metric stays missing.
	addr := serve(t, a)
	got, err := NewClient(ClientOptions{}).Fetch(context.Background(), addr, FetchOptions{Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	if got.Metrics["custom"] != 100 || got.Missing["slow"] == "" {
		t.Errorf("fetched %+v", got)
	}

	// A scripts directory that vanished leaves the built-ins.
	b := newTestAgent(t, AgentOptions{ScriptsDir: filepath.Join(dir, "gone")})
	if rep := b.Collect(context.Background()); rep.Metrics[MetricMemLoad] != 75 {
		t.Errorf("without scripts directory: %+v", rep)
	}
}
