package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestBackendName(t *testing.T) {
	tests := []struct {
		name   string
		header string
		body   string
		want   string
	}{
		{"header wins", "b1", "b2\n", "b1"},
		{"header trimmed", " b3 ", "", "b3"},
		{"body first line", "", "b2\nmore\n", "b2"},
		{"body without newline", "", "b4", "b4"},
		{"body with CRLF", "", "b5\r\nx", "b5"},
		{"nothing", "", "", unknownBackend},
		{"blank first line", "", "\nb6\n", unknownBackend},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.header != "" {
				h.Set("X-Backend", tt.header)
			}
			if got := backendName(h, tt.body); got != tt.want {
				t.Errorf("backendName(%q, %q) = %q, want %q", tt.header, tt.body, got, tt.want)
			}
		})
	}
}

// timeoutErr is a net.Error that reports a timeout.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestErrorText(t *testing.T) {
	addr := &net.TCPAddr{IP: net.ParseIP("198.18.0.100"), Port: 80}
	src := &net.TCPAddr{IP: net.ParseIP("198.18.0.11"), Port: 40001}
	refused := &net.OpError{Op: "dial", Net: "tcp", Source: src, Addr: addr,
		Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	reset := &net.OpError{Op: "read", Net: "tcp", Source: src, Addr: addr,
		Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	dialTimeout := &net.OpError{Op: "dial", Net: "tcp", Addr: addr, Err: timeoutErr{}}
	wrap := func(err error) error { return &url.Error{Op: "Get", URL: "http://198.18.0.100/", Err: err} }

	tests := []struct {
		name string
		err  error
		want string
	}{
		{"refused", wrap(refused), "dial tcp: connect: connection refused"},
		{"refused other port", wrap(&net.OpError{Op: "dial", Net: "tcp",
			Source: &net.TCPAddr{IP: src.IP, Port: 50000}, Addr: addr, Err: refused.Err}),
			"dial tcp: connect: connection refused"},
		{"reset", wrap(reset), "read tcp: read: connection reset by peer"},
		{"dial timeout", wrap(dialTimeout), "dial tcp: timeout"},
		{"header timeout", wrap(timeoutErr{}), "timeout"},
		{"EOF", wrap(io.EOF), "EOF"},
		{"body truncated", &bodyError{io.ErrUnexpectedEOF}, "read body: unexpected EOF"},
		{"body reset", &bodyError{reset}, "read body: read tcp: read: connection reset by peer"},
		{"body timeout", &bodyError{timeoutErr{}}, "read body: timeout"},
		{"status", errors.New("HTTP status 503 Service Unavailable"), "HTTP status 503 Service Unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := errorText(tt.err)
			if got != tt.want {
				t.Errorf("errorText(%v) = %q, want %q", tt.err, got, tt.want)
			}
			if strings.Contains(got, "198.18.") {
				t.Errorf("errorText(%v) = %q leaks an address", tt.err, got)
			}
		})
	}
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestTally(t *testing.T) {
	refused := errors.New("refused")
	tests := []struct {
		name    string
		workers [][]result // one slice of results per worker tally
		elapsed time.Duration
		want    Report
	}{
		{
			name:    "nothing",
			workers: [][]result{{}},
			want: Report{PerBackend: map[string]int{}, Errors: map[string]int{},
				FirstFailureMS: -1, LastFailureMS: -1},
		},
		{
			name: "all ok over two workers",
			workers: [][]result{
				{{at: ms(1), backend: "b1"}, {at: ms(2), backend: "b2"}},
				{{at: ms(1), backend: "b1"}},
			},
			elapsed: ms(10),
			want: Report{Requests: 3, OK: 3, PerBackend: map[string]int{"b1": 2, "b2": 1},
				Errors: map[string]int{}, ElapsedMS: 10, FirstFailureMS: -1, LastFailureMS: -1},
		},
		{
			name: "failure window spans workers",
			workers: [][]result{
				{{at: ms(5), backend: "b1"}, {at: ms(300), err: refused}, {at: ms(900), err: refused}},
				{},
				{{at: ms(100), err: refused}, {at: ms(400), err: errors.New("HTTP status 500 Internal Server Error")}},
				{{at: ms(1000), backend: "b2"}},
			},
			elapsed: ms(1500),
			want: Report{Requests: 6, OK: 2, Failed: 4,
				PerBackend: map[string]int{"b1": 1, "b2": 1},
				Errors:     map[string]int{"refused": 3, "HTTP status 500 Internal Server Error": 1},
				ElapsedMS:  1500, FirstFailureMS: 100, LastFailureMS: 900},
		},
		{
			name: "single failure at time zero",
			workers: [][]result{
				{{at: 0, err: refused}},
				{{at: ms(7), backend: "b1"}},
			},
			elapsed: ms(8),
			want: Report{Requests: 2, OK: 1, Failed: 1, PerBackend: map[string]int{"b1": 1},
				Errors: map[string]int{"refused": 1}, ElapsedMS: 8, FirstFailureMS: 0, LastFailureMS: 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			total := newTally()
			for _, rs := range tt.workers {
				w := newTally()
				for _, r := range rs {
					w.add(r)
				}
				total.merge(w)
			}
			got := total.report(tt.elapsed)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("report =\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

func TestReportJSON(t *testing.T) {
	tl := newTally()
	tl.add(result{at: ms(3), backend: "b1"})
	b, err := json.Marshal(tl.report(ms(12)))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"requests":1,"ok":1,"failed":0,"per_backend":{"b1":1},"errors":{},` +
		`"elapsed_ms":12,"first_failure_ms":-1,"last_failure_ms":-1}`
	if string(b) != want {
		t.Errorf("JSON = %s\nwant  %s", b, want)
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		r    Report
		want int
	}{
		{Report{Requests: 10, OK: 10}, 0},
		{Report{Requests: 10, OK: 9, Failed: 1}, 1},
		{Report{}, 1}, // nothing was tested
	}
	for _, tt := range tests {
		if got := exitCode(tt.r); got != tt.want {
			t.Errorf("exitCode(%+v) = %d, want %d", tt.r, got, tt.want)
		}
	}
}

func TestSortedNatural(t *testing.T) {
	tests := []struct{ in, want []string }{
		{[]string{"b10", "b2", "b1"}, []string{"b1", "b2", "b10"}},
		{[]string{"b2", "a10", "b02", unknownBackend}, []string{unknownBackend, "a10", "b02", "b2"}},
		{[]string{"x", "b1x2", "b1x10", "b1"}, []string{"b1", "b1x2", "b1x10", "x"}},
		{nil, nil},
	}
	for _, tt := range tests {
		got := sortedNatural(append([]string(nil), tt.in...))
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("sortedNatural(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestFormatTable(t *testing.T) {
	r := Report{Requests: 12, OK: 8, Failed: 4,
		PerBackend: map[string]int{"b10": 2, "b2": 6},
		Errors:     map[string]int{"e-one": 1, "e-three": 3, "e-zwei": 1},
		ElapsedMS:  1234, FirstFailureMS: 100, LastFailureMS: 900}
	got := formatTable(r, 2)
	want := strings.Join([]string{
		"BACKEND               COUNT    SHARE",
		"b2                        6    75.0%",
		"b10                       2    25.0%",
		"requests 12  ok 8  failed 4 (33.3%)  elapsed 1234 ms",
		"failures started at 100 ms, last at 900 ms (request start times)",
		"errors (3 distinct):",
		"         3  e-three",
		"         1  e-one",
		"            ... and 1 more distinct errors",
		"",
	}, "\n")
	if got != want {
		t.Errorf("formatTable =\n%s\nwant\n%s", got, want)
	}

	ok := formatTable(Report{Requests: 1, OK: 1, PerBackend: map[string]int{"b1": 1}}, 5)
	if strings.Contains(ok, "error") || !strings.Contains(ok, "100.0%") {
		t.Errorf("formatTable(all ok) =\n%s", ok)
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr bool
	}{
		{nil, false},
		{[]string{"-url", "http://198.18.0.21/", "-n", "500", "-c", "20", "-json"}, false},
		{[]string{"-duration", "3s", "-timeout", "500ms"}, false},
		{[]string{"-n", "0"}, true},
		{[]string{"-c", "0"}, true},
		{[]string{"-c", "1001"}, true},
		{[]string{"-duration", "-1s"}, true},
		{[]string{"-duration", "2h"}, true},
		{[]string{"-timeout", "0s"}, true},
		{[]string{"-url", "198.18.0.100"}, true},
		{[]string{"-url", "ftp://198.18.0.100/"}, true},
		{[]string{"-max-failures-shown", "-1"}, true},
		{[]string{"extra"}, true},
		{[]string{"-nope"}, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.args), func(t *testing.T) {
			_, err := parseFlags(tt.args, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Errorf("parseFlags(%q) error = %v, wantErr %v", tt.args, err, tt.wantErr)
			}
		})
	}
}

func TestRunExitCodes(t *testing.T) {
	if got := run([]string{"-n", "0"}, io.Discard, io.Discard); got != 2 {
		t.Errorf("run(-n 0) = %d, want 2", got)
	}
	if got := run([]string{"-h"}, io.Discard, io.Discard); got != 0 {
		t.Errorf("run(-h) = %d, want 0", got)
	}
}

// TestLoadgenLoopback runs the real client against a loopback server and
// checks that every request used a new TCP connection.
func TestLoadgenLoopback(t *testing.T) {
	var conns, reqs atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := reqs.Add(1)
		switch {
		case r.URL.Path == "/fail":
			http.Error(w, "no", http.StatusServiceUnavailable)
		case n%2 == 0:
			w.Header().Set("X-Backend", "b2")
		default:
			io.WriteString(w, "b1\n") // name from the body only
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	cfg := config{url: srv.URL + "/", n: 40, c: 4, timeout: 2 * time.Second}
	rep := loadgen(context.Background(), cfg)
	if rep.Requests != 40 || rep.OK != 40 || rep.PerBackend["b1"]+rep.PerBackend["b2"] != 40 ||
		rep.PerBackend["b1"] == 0 || rep.PerBackend["b2"] == 0 {
		t.Errorf("report = %+v, want 40 ok split over b1 and b2", rep)
	}
	if got := conns.Load(); got != 40 {
		t.Errorf("server saw %d connections for 40 requests, want one per request", got)
	}

	cfg.url = srv.URL + "/fail"
	rep = loadgen(context.Background(), cfg)
	if rep.Failed != 40 || rep.Errors["HTTP status 503 Service Unavailable"] != 40 || rep.FirstFailureMS < 0 {
		t.Errorf("report = %+v, want 40 failures with status 503", rep)
	}

	cfg.url, cfg.duration = srv.URL+"/", 200*time.Millisecond
	start := time.Now()
	rep = loadgen(context.Background(), cfg)
	if d := time.Since(start); d > 2*time.Second || rep.Requests == 0 || rep.Failed != 0 {
		t.Errorf("duration run took %v, report %+v", d, rep)
	}
}
