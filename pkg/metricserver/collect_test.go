package metricserver

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

// emptyFS is a proc file system without any file.
func emptyFS(t *testing.T) procfs.FS {
	t.Helper()
	fs, err := procfs.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestBusyPercent(t *testing.T) {
	t.Parallel()
	stat := func(user, system, idle, iowait, steal, guest float64) cpuTimes {
		return procCPUTimes(procfs.CPUStat{User: user, System: system, Idle: idle, Iowait: iowait, Steal: steal, Guest: guest})
	}
	for _, tc := range []struct {
		name      string
		prev, cur cpuTimes
		want      float64
		ok        bool
	}{
		{"half busy", stat(0, 0, 0, 0, 0, 0), stat(30, 20, 50, 0, 0, 0), 50, true},
		{"iowait is idle", stat(0, 0, 0, 0, 0, 0), stat(25, 0, 25, 50, 0, 0), 25, true},
		{"steal is busy", stat(0, 0, 0, 0, 0, 0), stat(0, 0, 50, 0, 50, 0), 50, true},
		{"guest is not counted twice", stat(0, 0, 0, 0, 0, 0), stat(50, 0, 50, 0, 0, 40), 50, true},
		{"idle machine", stat(10, 10, 100, 0, 0, 0), stat(10, 10, 200, 0, 0, 0), 0, true},
		{"saturated", stat(10, 10, 100, 5, 0, 0), stat(110, 10, 100, 5, 0, 0), 100, true},
		{"iowait went backwards", stat(0, 0, 0, 100, 0, 0), stat(50, 0, 50, 90, 0, 0), 50, true},
		{"no time elapsed", stat(10, 10, 10, 10, 0, 0), stat(10, 10, 10, 10, 0, 0), 0, false},
		{"all counters reset", stat(100, 100, 100, 100, 0, 0), stat(1, 1, 1, 1, 0, 0), 0, false},
	} {
		got, ok := busyPercent(tc.prev, tc.cur)
		if ok != tc.ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: got %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestCPUSamplerFixtures feeds two synthetic /proc/stat samples: between
// testdata/proc/a and b, user +600 (guest +300 included), system +200,
// idle +1000, iowait +100, irq +50, softirq +50: 900 busy of 2000.
func TestCPUSamplerFixtures(t *testing.T) {
	t.Parallel()
	s := newCPUSampler(mustFS(t, "a"))
	now := time.Unix(1_700_000_000, 0)
	if _, err := s.value(now, 3*time.Second); !errors.Is(err, errNoValueYet) {
		t.Fatalf("before any sample: %v, want errNoValueYet", err)
	}
	if err := s.sample(now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.value(now, 3*time.Second); !errors.Is(err, errNoValueYet) {
		t.Fatalf("after one sample: %v, want errNoValueYet", err)
	}
	s.fs = mustFS(t, "b")
	if err := s.sample(now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := s.value(now.Add(time.Second), 3*time.Second)
	if err != nil || got != 45 {
		t.Fatalf("cpuload = %v, %v; want 45", got, err)
	}
	// The same sample again: no time elapsed, the previous value stays.
	if err := s.sample(now.Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, err := s.value(now.Add(2*time.Second), 3*time.Second); err != nil || got != 45 {
		t.Fatalf("after an identical sample: %v, %v; want 45", got, err)
	}
	// A sampler that stopped is not believed.
	if _, err := s.value(now.Add(time.Minute), 3*time.Second); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("stalled sampler: %v", err)
	}
	// A failing read is reported.
	s.fs = emptyFS(t)
	if err := s.sample(now); err == nil {
		t.Fatal("sampling a missing stat succeeded")
	}
	if _, err := s.value(now, 3*time.Second); err == nil {
		t.Fatal("value after a failed sample")
	}
}

func TestMemAndLoadAvg(t *testing.T) {
	t.Parallel()
	if got, err := memLoad(mustFS(t, "a")); err != nil || got != 75 {
		t.Errorf("memLoad = %v, %v; want 75 (1 - 4000000/16000000)", got, err)
	}
	if _, err := memLoad(mustFS(t, "nomemavail")); err == nil || !strings.Contains(err.Error(), "MemAvailable") {
		t.Errorf("memLoad without MemAvailable: %v", err)
	}
	if got, err := loadAvgLoad(mustFS(t, "a")); err != nil || got != 75 {
		t.Errorf("loadAvgLoad = %v, %v; want 75 (1.5 / 2 CPUs)", got, err)
	}
	if _, err := loadAvgLoad(emptyFS(t)); err == nil {
		t.Error("loadAvgLoad on a missing fixture succeeded")
	}
}

func TestClamp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   float64
		want float64
		ok   bool
	}{
		{50, 50, true},
		{150, 100, true},
		{-3, 0, true},
		{12.3456, 12.35, true},
		{math.NaN(), 0, false},
		{math.Inf(1), 0, false},
		{math.Inf(-1), 0, false},
	} {
		if got, ok := clamp(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("clamp(%v) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// TestAgentCollectWithoutSampler: without Run, cpuload is missing with a
// reason while the other built-ins are there.
func TestAgentCollectWithoutSampler(t *testing.T) {
	t.Parallel()
	a, err := NewAgent(AgentOptions{Secret: testSecret, ProcRoot: "testdata/proc/a"})
	if err != nil {
		t.Fatal(err)
	}
	rep := a.Collect(t.Context())
	if _, ok := rep.Metrics[MetricCPULoad]; ok {
		t.Errorf("cpuload present without samples: %v", rep.Metrics)
	}
	if !strings.Contains(rep.Missing[MetricCPULoad], "no value yet") {
		t.Errorf("missing cpuload reason %q", rep.Missing[MetricCPULoad])
	}
	if rep.Metrics[MetricMemLoad] != 75 || rep.Metrics[MetricLoadAvg] != 75 {
		t.Errorf("metrics %v", rep.Metrics)
	}
}

func TestAgentRun(t *testing.T) {
	t.Parallel()
	// Run on the real /proc: after two samples cpuload exists.
	a, err := NewAgent(AgentOptions{Secret: testSecret, SampleInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a.cacheFor = 0
	go a.Run(t.Context())
	deadline := time.Now().Add(5 * time.Second)
	for {
		rep := a.Collect(t.Context())
		if v, ok := rep.Metrics[MetricCPULoad]; ok {
			if v < 0 || v > 100 {
				t.Fatalf("cpuload %v", v)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no cpuload after 5s: %v", rep.Missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNewAgentOptions(t *testing.T) {
	t.Parallel()
	if _, err := NewAgent(AgentOptions{Secret: []byte("short")}); err == nil {
		t.Error("short secret accepted")
	}
	if _, err := NewAgent(AgentOptions{Secret: testSecret, ScriptTimeout: -time.Second}); err == nil {
		t.Error("negative timeout accepted")
	}
	a, err := NewAgent(AgentOptions{Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	if a.name == "" || a.scriptTimeout != DefaultScriptTimeout || a.interval != DefaultSampleInterval {
		t.Errorf("defaults: name %q timeout %v interval %v", a.name, a.scriptTimeout, a.interval)
	}
}
