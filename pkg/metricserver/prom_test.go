package metricserver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParsePromQuery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    PromQuery
		str     string
		wantErr bool
	}{
		{in: "cpuload", want: PromQuery{Name: "cpuload"}, str: "cpuload"},
		{in: " loadavg ", want: PromQuery{Name: "loadavg"}, str: "loadavg"},
		{in: "node_load5/8", want: PromQuery{Name: "node_load5", Max: 8}, str: "node_load5/8"},
		{in: "node_pressure_cpu_waiting_seconds_total/1", want: PromQuery{Name: "node_pressure_cpu_waiting_seconds_total", Max: 1}, str: "node_pressure_cpu_waiting_seconds_total/1"},
		{
			in:   `node_filesystem_avail_bytes{mountpoint="/", fstype="ext4"}/1e10`,
			want: PromQuery{Name: "node_filesystem_avail_bytes", Labels: map[string]string{"mountpoint": "/", "fstype": "ext4"}, Max: 1e10},
			str:  `node_filesystem_avail_bytes{fstype="ext4",mountpoint="/"}/1e+10`,
		},
		{in: `x{a="q\"uo\\te\n"}`, want: PromQuery{Name: "x", Labels: map[string]string{"a": "q\"uo\\te\n"}}, str: `x{a="q\"uo\\te\n"}`},
		{in: `x{}`, want: PromQuery{Name: "x", Labels: map[string]string{}}, str: `x{}`},
		{in: `ns:rule_name`, want: PromQuery{Name: "ns:rule_name"}, str: `ns:rule_name`},
		{in: "", wantErr: true},
		{in: "9lives", wantErr: true},
		{in: "cpuload/2", wantErr: true},
		{in: `memload{a="b"}`, wantErr: true},
		{in: "x/0", wantErr: true},
		{in: "x/NaN", wantErr: true},
		{in: "x/-Inf", wantErr: true},
		{in: "x/-3", wantErr: true},
		{in: "x/abc", wantErr: true},
		{in: "x/Inf", wantErr: true},
		{in: `x{a="b"`, wantErr: true},
		{in: `x{a=b}`, wantErr: true},
		{in: `x{a="b",a="c"}`, wantErr: true},
		{in: `x{a="\q"}`, wantErr: true},
		{in: `x{="b"}`, wantErr: true},
		{in: `x y`, wantErr: true},
	} {
		got, err := ParsePromQuery(tc.in)
		if tc.wantErr {
			if err == nil {
				t.Errorf("%q: parsed as %+v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) || got.String() != tc.str {
			t.Errorf("%q: %+v (%s), want %+v (%s)", tc.in, got, got, tc.want, tc.str)
		}
		// The canonical form parses back to the same query.
		if again, err := ParsePromQuery(got.String()); err != nil || again.String() != got.String() {
			t.Errorf("%q: round trip %q: %v", tc.in, again, err)
		}
	}
}

func mustQueries(t *testing.T, qs ...string) []PromQuery {
	t.Helper()
	out := make([]PromQuery, len(qs))
	for i, q := range qs {
		var err error
		if out[i], err = ParsePromQuery(q); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// promFixtureQueries and their values on the second scrape of the
// testdata/node_exporter_{1,2}.prom fixtures, 10 s apart:
//
//   - cpuload: cpu0 idle +6 iowait +1 system +1 user +2 (busy 3 of 10),
//     cpu1 idle +2 system +3 user +4 softirq +1 (busy 8 of 10): 11/20 = 55
//   - memload: 1 − 2e9/8e9 = 75
//   - loadavg: node_load1 1 over 2 CPUs = 50
//   - node_load5/8: 0.8/8 = 10
//   - the pressure counter gains 2.5 s in 10 s: 25 %
//   - / has 5e9 of 1e10 bytes free: 50
var promFixtureQueries = []string{
	"cpuload", "memload", "loadavg",
	"node_load5/8",
	"node_pressure_cpu_waiting_seconds_total/1",
	`node_filesystem_avail_bytes{mountpoint="/"}/1e10`,
	"process_open_fds",            // a gauge taken as is
	"node_filesystem_avail_bytes", // two series
	`node_filesystem_avail_bytes{mountpoint="/nope"}`,
	"node_scrape_collector_duration_seconds", // a histogram
	"no_such_metric",
}

func checkPromReport(t *testing.T, rep Report, want map[string]float64, missing map[string]string) {
	t.Helper()
	for k, v := range want {
		if got, ok := rep.Metrics[k]; !ok || math.Abs(got-v) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v; missing: %q", k, got, ok, v, rep.Missing[k])
		}
	}
	for k, part := range missing {
		if !strings.Contains(rep.Missing[k], part) {
			t.Errorf("missing[%s] = %q, want it to contain %q", k, rep.Missing[k], part)
		}
	}
	if len(rep.Metrics) != len(want) || len(rep.Missing) != len(missing) {
		t.Errorf("metrics %v, missing %v", rep.Metrics, rep.Missing)
	}
}

// TestPromSourceFixtures scrapes the two fixtures from an httptest server.
func TestPromSourceFixtures(t *testing.T) {
	t.Parallel()
	scrapes := make([][]byte, 2)
	for i := range scrapes {
		var err error
		if scrapes[i], err = os.ReadFile(fmt.Sprintf("testdata/node_exporter_%d.prom", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.Header.Get("Accept"), "text/plain") {
			t.Errorf("Accept %q", r.Header.Get("Accept"))
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		i := min(int(n.Add(1))-1, len(scrapes)-1)
		_, _ = w.Write(scrapes[i])
	}))
	t.Cleanup(srv.Close)

	clock := time.Unix(1_700_000_000, 0)
	p, err := NewPromSource(srv.URL+"/metrics", PromOptions{Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	queries := mustQueries(t, promFixtureQueries...)
	badOnes := map[string]string{
		"node_filesystem_avail_bytes":                     "2 series",
		`node_filesystem_avail_bytes{mountpoint="/nope"}`: "no series",
		"node_scrape_collector_duration_seconds":          "histogram",
		"no_such_metric":                                  "no metric no_such_metric",
	}

	// First scrape: no rates yet.
	rep, err := p.Fetch(context.Background(), queries)
	if err != nil {
		t.Fatal(err)
	}
	first := map[string]string{"cpuload": "no value yet", "node_pressure_cpu_waiting_seconds_total/1": "no value yet"}
	for k, v := range badOnes {
		first[k] = v
	}
	checkPromReport(t, rep, map[string]float64{
		"memload": 75, "loadavg": 50, "node_load5/8": 10, `node_filesystem_avail_bytes{mountpoint="/"}/1e+10`: 50, "process_open_fds": 9,
	}, first)
	if rep.Agent != srv.URL+"/metrics" || rep.Time() != clock {
		t.Errorf("report agent %q time %v", rep.Agent, rep.Time())
	}

	// Second scrape, 10 s later.
	clock = clock.Add(10 * time.Second)
	if rep, err = p.Fetch(context.Background(), queries); err != nil {
		t.Fatal(err)
	}
	checkPromReport(t, rep, map[string]float64{
		"cpuload": 55, "memload": 75, "loadavg": 50, "node_load5/8": 10,
		"node_pressure_cpu_waiting_seconds_total/1":         25,
		`node_filesystem_avail_bytes{mountpoint="/"}/1e+10`: 50, "process_open_fds": 9,
	}, badOnes)
	if rep.Age(clock) != 0 {
		t.Errorf("age %v", rep.Age(clock))
	}

	// Third scrape serves the same text: no CPU time elapsed.
	clock = clock.Add(10 * time.Second)
	if rep, err = p.Fetch(context.Background(), mustQueries(t, "cpuload", "node_pressure_cpu_waiting_seconds_total/1")); err != nil {
		t.Fatal(err)
	}
	checkPromReport(t, rep, map[string]float64{"node_pressure_cpu_waiting_seconds_total/1": 0},
		map[string]string{"cpuload": "no CPU time elapsed"})
}

// TestPromCPUFromText evaluates cpuload straight from the fixture text,
// and the edge cases of the delta: a CPU that appears, a counter that goes
// backwards, guest modes.
func TestPromCPUFromText(t *testing.T) {
	t.Parallel()
	eval := func(p *PromSource, text string, at time.Time) (float64, error) {
		fams, err := parsePromText([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return p.eval(fams, PromQuery{Name: MetricCPULoad}, "cpuload", at)
	}
	p, _ := NewPromSource("http://127.0.0.1:9100/metrics", PromOptions{})
	b1, _ := os.ReadFile("testdata/node_exporter_1.prom")
	b2, _ := os.ReadFile("testdata/node_exporter_2.prom")
	now := time.Now()
	if _, err := eval(p, string(b1), now); !errors.Is(err, errNoValueYet) {
		t.Fatalf("first: %v", err)
	}
	if v, err := eval(p, string(b2), now); err != nil || v != 55 {
		t.Fatalf("second: %v, %v; want 55", v, err)
	}

	line := func(cpu, mode string, v float64) string {
		return fmt.Sprintf("node_cpu_seconds_total{cpu=%q,mode=%q} %v\n", cpu, mode, v)
	}
	const head = "# TYPE node_cpu_seconds_total counter\n"
	for _, tc := range []struct {
		name       string
		prev, cur  string
		want       float64
		wantErrSub string
	}{
		{
			name: "new CPU does not count its history",
			prev: head + line("0", "idle", 100) + line("0", "user", 100),
			cur:  head + line("0", "idle", 110) + line("0", "user", 110) + line("1", "idle", 5) + line("1", "user", 5000),
			want: 50,
		},
		{
			name: "iowait going backwards counts as zero",
			prev: head + line("0", "idle", 100) + line("0", "iowait", 50) + line("0", "user", 100),
			cur:  head + line("0", "idle", 110) + line("0", "iowait", 45) + line("0", "user", 130),
			want: 75,
		},
		{
			name: "guest modes are ignored",
			prev: head + line("0", "idle", 100) + line("0", "user", 100) + line("0", "guest", 0),
			cur:  head + line("0", "idle", 110) + line("0", "user", 110) + line("0", "guest", 10),
			want: 50,
		},
		{
			name: "steal is busy, iowait idle",
			prev: head + line("0", "idle", 0) + line("0", "iowait", 0) + line("0", "steal", 0),
			cur:  head + line("0", "idle", 10) + line("0", "iowait", 10) + line("0", "steal", 20),
			want: 50,
		},
		{
			name:       "no node_cpu_seconds_total",
			prev:       head + line("0", "idle", 0),
			cur:        "node_load1 1\n",
			wantErrSub: "no node_cpu_seconds_total",
		},
	} {
		p, _ := NewPromSource("http://127.0.0.1:9100/metrics", PromOptions{})
		if _, err := eval(p, tc.prev, now); !errors.Is(err, errNoValueYet) {
			t.Fatalf("%s: first: %v", tc.name, err)
		}
		v, err := eval(p, tc.cur, now)
		switch {
		case tc.wantErrSub != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErrSub) {
				t.Errorf("%s: %v, %v; want error %q", tc.name, v, err, tc.wantErrSub)
			}
		case err != nil || math.Abs(v-tc.want) > 1e-9:
			t.Errorf("%s: %v, %v; want %v", tc.name, v, err, tc.want)
		}
	}
}

func TestPromSourceFailures(t *testing.T) {
	t.Parallel()
	handler := func(status int, ctype, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if ctype != "" {
				w.Header().Set("Content-Type", ctype)
			}
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}
	}
	for _, tc := range []struct {
		name string
		h    http.Handler
		max  int64
		want error
	}{
		{"HTTP 503", handler(503, "text/plain", ""), 0, ErrUnavailable},
		{"not the text format", handler(200, "text/plain", "node_load1 {{{\n"), 0, ErrMalformed},
		{"protobuf", handler(200, "application/vnd.google.protobuf", "\x00\x01"), 0, ErrMalformed},
		{"too large", handler(200, "text/plain", strings.Repeat("# comment\n", 200)), 1000, ErrMalformed},
		{"slow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}), 0, ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tc.h)
			t.Cleanup(srv.Close)
			p, err := NewPromSource(srv.URL, PromOptions{MaxBody: tc.max, Timeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Fetch(context.Background(), mustQueries(t, "memload"))
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
		})
	}

	// An OpenMetrics body with its # EOF parses.
	srv := httptest.NewServer(handler(200, "application/openmetrics-text; version=1.0.0", "# TYPE node_load1 gauge\nnode_load1 0.5\n# EOF\n"))
	t.Cleanup(srv.Close)
	p, _ := NewPromSource(srv.URL, PromOptions{})
	rep, err := p.Fetch(context.Background(), mustQueries(t, "node_load1/1"))
	if err != nil || rep.Metrics["node_load1/1"] != 50 {
		t.Errorf("openmetrics: %+v, %v", rep, err)
	}

	for _, u := range []string{"", "ftp://x/metrics", "http:///metrics", "://"} {
		if _, err := NewPromSource(u, PromOptions{}); err == nil {
			t.Errorf("URL %q accepted", u)
		}
	}
}
