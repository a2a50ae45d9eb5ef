package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
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
				FirstFailureMS: -1, LastFailureMS: -1, Peers: map[string]int{}},
		},
		{
			name: "all ok over two workers",
			workers: [][]result{
				{{at: ms(1), reply: reply{backend: "b1"}}, {at: ms(2), reply: reply{backend: "b2"}}},
				{{at: ms(1), reply: reply{backend: "b1"}}},
			},
			elapsed: ms(10),
			want: Report{Requests: 3, OK: 3, PerBackend: map[string]int{"b1": 2, "b2": 1},
				Errors: map[string]int{}, ElapsedMS: 10, FirstFailureMS: -1, LastFailureMS: -1,
				Peers: map[string]int{}},
		},
		{
			name: "failure window spans workers",
			workers: [][]result{
				{{at: ms(5), reply: reply{backend: "b1"}}, {at: ms(300), err: refused}, {at: ms(900), err: refused}},
				{},
				{{at: ms(100), err: refused}, {at: ms(400), err: errors.New("HTTP status 500 Internal Server Error")}},
				{{at: ms(1000), reply: reply{backend: "b2"}}},
			},
			elapsed: ms(1500),
			want: Report{Requests: 6, OK: 2, Failed: 4,
				PerBackend: map[string]int{"b1": 1, "b2": 1},
				Errors:     map[string]int{"refused": 3, "HTTP status 500 Internal Server Error": 1},
				ElapsedMS:  1500, FirstFailureMS: 100, LastFailureMS: 900, Peers: map[string]int{}},
		},
		{
			name: "single failure at time zero",
			workers: [][]result{
				{{at: 0, err: refused}},
				{{at: ms(7), reply: reply{backend: "b1"}}},
			},
			elapsed: ms(8),
			want: Report{Requests: 2, OK: 1, Failed: 1, PerBackend: map[string]int{"b1": 1},
				Errors: map[string]int{"refused": 1}, ElapsedMS: 8, FirstFailureMS: 0, LastFailureMS: 0,
				Peers: map[string]int{}},
		},
		{
			name: "peers, bytes and hash mismatches",
			workers: [][]result{
				{{at: ms(1), reply: reply{backend: "b1", peer: "198.18.0.11", bytes: 100}},
					{at: ms(2), reply: reply{backend: "b2", bytes: 50}},
					{at: ms(3), reply: reply{bytes: 100}, err: errHashMismatch}},
				{{at: ms(4), reply: reply{backend: "b1", peer: "198.18.0.11", bytes: 100}},
					{at: ms(5), reply: reply{backend: "b1", peer: "198.18.0.3", bytes: 0}}},
			},
			elapsed: ms(6),
			want: Report{Requests: 5, OK: 4, Failed: 1, PerBackend: map[string]int{"b1": 3, "b2": 1},
				Errors: map[string]int{"body hash mismatch": 1}, ElapsedMS: 6, FirstFailureMS: 3, LastFailureMS: 3,
				Peers: map[string]int{"198.18.0.11": 2, "198.18.0.3": 1}, HashMismatches: 1, Bytes: 350},
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
	tl.add(result{at: ms(3), reply: reply{backend: "b1"}})
	b, err := json.Marshal(tl.report(ms(12)))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"requests":1,"ok":1,"failed":0,"per_backend":{"b1":1},"errors":{},` +
		`"elapsed_ms":12,"first_failure_ms":-1,"last_failure_ms":-1,"peers":{},"hash_mismatches":0,"bytes":0}`
	if string(b) != want {
		t.Errorf("JSON = %s\nwant  %s", b, want)
	}
}

func TestReportJSONModes(t *testing.T) {
	one, two, zero := 1, 2, 0
	tests := []struct {
		name string
		r    Report
		want string
	}{
		{"keepalive", Report{Connections: &two, Broken: &one, BackendChanges: &zero},
			`"connections":2,"broken":1,"backend_changes":0}`},
		{"udp", Report{Flows: &two, FlowsSplit: &zero}, `"flows":2,"flows_split":0}`},
		{"plain", Report{}, `"bytes":0}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.r)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(string(b), tt.want) {
			t.Errorf("%s: JSON = %s, want it to end in %s", tt.name, b, tt.want)
		}
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
		{[]string{"-keepalive", "-duration", "2s", "-c", "5", "-interval", "10ms"}, false},
		{[]string{"-keepalive"}, true}, // needs -duration
		{[]string{"-keepalive", "-duration", "1s", "-interval", "-1ms"}, true},
		{[]string{"-keepalive", "-duration", "1s", "-url", "https://198.18.0.100/"}, true},
		{[]string{"-keepalive", "-duration", "1s", "-udp", "198.18.0.100:53"}, true},
		{[]string{"-keepalive", "-duration", "1s", "-ready", "/tmp/x"}, false},
		{[]string{"-ready", "/tmp/x"}, true}, // needs -keepalive
		{[]string{"-udp", "198.18.0.100:53"}, false},
		{[]string{"-udp", "[2001:2::100]:53", "-flows", "10", "-packets", "5", "-c", "3"}, false},
		{[]string{"-udp", "2001:2::100:53"}, true},
		{[]string{"-udp", ":53"}, true},
		{[]string{"-udp", "198.18.0.100:0"}, true},
		{[]string{"-udp", "198.18.0.100:dns"}, true},
		{[]string{"-udp", "198.18.0.100"}, true},
		{[]string{"-udp", "198.18.0.100:53", "-flows", "0"}, true},
		{[]string{"-udp", "198.18.0.100:53", "-packets", "0"}, true},
		{[]string{"-udp", "198.18.0.100:53", "-flows", "1000000", "-packets", "100000"}, true},
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
			_, _ = io.WriteString(w, "b1\n") // name from the body only
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

// errReader fails after its content.
type errReader struct {
	s   string
	err error
}

func (r *errReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, r.err
	}
	n := copy(p, r.s)
	r.s = r.s[n:]
	return n, nil
}

func TestReadReply(t *testing.T) {
	const body = "hello, lab\n"
	sum := sha256.Sum256([]byte(body))
	good := hex.EncodeToString(sum[:])
	tests := []struct {
		name    string
		status  int
		header  map[string]string
		body    io.Reader
		want    reply
		wantErr string
	}{
		{"plain", 200, map[string]string{"X-Backend": "b1", "X-Peer": "198.18.0.11"},
			strings.NewReader(body), reply{backend: "b1", peer: "198.18.0.11", bytes: 11}, ""},
		{"backend from body", 200, nil, strings.NewReader("b3\n"), reply{backend: "b3", bytes: 3}, ""},
		{"hash ok", 200, map[string]string{"X-Backend": "b1", "X-Content-SHA256": good},
			strings.NewReader(body), reply{backend: "b1", bytes: 11}, ""},
		{"hash ok upper case", 200, map[string]string{"X-Backend": "b1", "X-Content-SHA256": strings.ToUpper(good)},
			strings.NewReader(body), reply{backend: "b1", bytes: 11}, ""},
		{"hash mismatch", 200, map[string]string{"X-Backend": "b1", "X-Content-SHA256": good},
			strings.NewReader("hello, lab!"), reply{bytes: 11}, "body hash mismatch"},
		{"status", 503, map[string]string{"X-Backend": "b1"}, strings.NewReader("no\n"),
			reply{bytes: 3}, "HTTP status 503 Service Unavailable"},
		{"truncated", 200, map[string]string{"X-Backend": "b1"}, &errReader{"hel", io.ErrUnexpectedEOF},
			reply{bytes: 3}, "read body: unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.header {
				h.Set(k, v)
			}
			resp := &http.Response{StatusCode: tt.status, Status: fmt.Sprintf("%d %s", tt.status, http.StatusText(tt.status)),
				Header: h, Body: io.NopCloser(tt.body)}
			got, err := readReply(resp)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || errorText(err) != tt.wantErr) {
				t.Fatalf("readReply error = %v, want %q", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("readReply = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseUDPReply(t *testing.T) {
	tests := []struct {
		in      string
		want    reply
		wantErr bool
	}{
		{"b1 198.18.0.11:40000\n", reply{backend: "b1", peer: "198.18.0.11", bytes: 21}, false},
		{"n2 [2001:2::11]:5\n", reply{backend: "n2", peer: "2001:2::11", bytes: 18}, false},
		{"b3 [::ffff:198.18.0.3]:7", reply{backend: "b3", peer: "198.18.0.3", bytes: 24}, false},
		{"b1\n", reply{bytes: 3}, true},
		{" 198.18.0.11:1\n", reply{bytes: 15}, true},
		{"b1 198.18.0.11\n", reply{bytes: 15}, true},
		{"", reply{}, true},
	}
	for _, tt := range tests {
		got, err := parseUDPReply([]byte(tt.in))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseUDPReply(%q) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestLoadgenHashLoopback checks the body hash verification end to end.
func TestLoadgenHashLoopback(t *testing.T) {
	const body = "0123456789"
	sum := sha256.Sum256([]byte(body))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", "b1")
		w.Header().Set("X-Peer", "198.18.0.11")
		if r.URL.Path == "/bad" {
			w.Header().Set("X-Content-SHA256", hex.EncodeToString(sum[:len(sum)-1])+"00")
		} else {
			w.Header().Set("X-Content-SHA256", hex.EncodeToString(sum[:]))
		}
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	cfg := config{url: srv.URL + "/good", n: 10, c: 2, timeout: 2 * time.Second}
	rep := loadgen(context.Background(), cfg)
	if rep.OK != 10 || rep.HashMismatches != 0 || rep.Bytes != 100 || rep.Peers["198.18.0.11"] != 10 {
		t.Errorf("good: report %+v", rep)
	}
	cfg.url = srv.URL + "/bad"
	rep = loadgen(context.Background(), cfg)
	if rep.Failed != 10 || rep.HashMismatches != 10 || rep.Errors["body hash mismatch"] != 10 || len(rep.Peers) != 0 {
		t.Errorf("bad: report %+v", rep)
	}
}

// keepaliveServer is a loopback HTTP server for -keepalive tests: it
// counts connections, and answers each connection's n-th request (from 1)
// with backend(n) and, if closeAfter > 0, closes the connection after
// closeAfter requests.
func keepaliveServer(t *testing.T, backend func(n int) string, closeAfter int) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	type ctxKey struct{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := r.Context().Value(ctxKey{}).(*atomic.Int64).Add(1)
		w.Header().Set("X-Backend", backend(int(n)))
		w.Header().Set("X-Peer", "127.0.0.1")
		if closeAfter > 0 && n >= int64(closeAfter) {
			w.Header().Set("Connection", "close")
		}
		_, _ = io.WriteString(w, "ok\n")
	}))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, ctxKey{}, new(atomic.Int64))
	}
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func TestKeepaliveLoopback(t *testing.T) {
	const c = 3
	tests := []struct {
		name        string
		backend     func(n int) string
		closeAfter  int
		wantBroken  int
		wantChanges int
	}{
		{"steady", func(int) string { return "b1" }, 0, 0, 0},
		{"backend changes", func(n int) string { return fmt.Sprint("b", 1+n/3) }, 0, 0, c},
		{"server closes", func(int) string { return "b2" }, 2, c, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, conns := keepaliveServer(t, tt.backend, tt.closeAfter)
			cfg := config{url: srv.URL + "/", c: c, keepalive: true, duration: 300 * time.Millisecond,
				interval: 10 * time.Millisecond, timeout: time.Second}
			// -ready: the file appears once every connection had a reply.
			cfg.ready = filepath.Join(t.TempDir(), "ready")
			start := time.Now()
			rep := keepaliveLoad(context.Background(), cfg)
			if _, err := os.Stat(cfg.ready); err != nil {
				t.Errorf("-ready file not created: %v", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("run took %v", d)
			}
			if got := conns.Load(); got != c {
				t.Errorf("server saw %d connections, want exactly %d (no re-dial)", got, c)
			}
			if deref(rep.Connections) != c || deref(rep.Broken) != tt.wantBroken || deref(rep.BackendChanges) != tt.wantChanges {
				t.Errorf("connections %d broken %d changes %d, want %d %d %d", deref(rep.Connections),
					deref(rep.Broken), deref(rep.BackendChanges), c, tt.wantBroken, tt.wantChanges)
			}
			if rep.Failed != tt.wantBroken || rep.OK+rep.Failed != rep.Requests || rep.Peers["127.0.0.1"] != rep.OK {
				t.Errorf("report %+v", rep)
			}
			if tt.closeAfter > 0 {
				if rep.OK != c*tt.closeAfter {
					t.Errorf("ok = %d, want %d", rep.OK, c*tt.closeAfter)
				}
			} else if rep.OK < 3*c { // about 30 per connection
				t.Errorf("only %d requests succeeded", rep.OK)
			}
		})
	}
}

func TestKeepaliveRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := config{url: "http://" + addr + "/", c: 2, keepalive: true, duration: 200 * time.Millisecond,
		interval: 10 * time.Millisecond, timeout: time.Second}
	cfg.ready = filepath.Join(t.TempDir(), "ready")
	rep := keepaliveLoad(context.Background(), cfg)
	if _, err := os.Stat(cfg.ready); err == nil {
		t.Error("-ready file created though no connection had a reply")
	}
	if rep.Requests != 2 || rep.Failed != 2 || deref(rep.Broken) != 2 ||
		rep.Errors["dial tcp: connect: connection refused"] != 2 {
		t.Errorf("report %+v", rep)
	}
}

// udpResponder answers every datagram on a loopback socket with
// "<name> <sender>\n"; name(n) is chosen by the datagram count and drop(n)
// drops datagrams.
func udpResponder(t *testing.T, name func(n int) string, drop func(n int) bool) *net.UDPAddr {
	t.Helper()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for n := 1; ; n++ {
			_, src, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if drop(n) {
				continue
			}
			_, _ = pc.WriteToUDPAddrPort([]byte(name(n)+" "+src.String()+"\n"), src)
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr)
}

func TestUDPLoadLoopback(t *testing.T) {
	never := func(int) bool { return false }
	tests := []struct {
		name      string
		respName  func(n int) string
		drop      func(n int) bool
		flows     int
		packets   int
		wantOK    int
		wantSplit int
	}{
		{"one backend", func(int) string { return "b1" }, never, 20, 3, 60, 0},
		{"alternating", func(n int) string { return fmt.Sprint("b", 1+n%2) }, never, 10, 2, 20, 10},
		{"one datagram per flow", func(n int) string { return fmt.Sprint("b", 1+n%2) }, never, 10, 1, 10, 0},
		{"drops", func(int) string { return "b1" }, func(n int) bool { return n == 1 }, 1, 3, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := udpResponder(t, tt.respName, tt.drop)
			c := 4
			if tt.flows == 1 || tt.wantSplit > 0 {
				c = 1 // the responder's count decides the names: keep it in order
			}
			cfg := config{c: c, udp: addr.String(), udpAddr: addr, flows: tt.flows, packets: tt.packets,
				timeout: 200 * time.Millisecond}
			rep := udpLoad(context.Background(), cfg)
			total := tt.flows * tt.packets
			if rep.Requests != total || rep.OK != tt.wantOK || rep.Failed != total-tt.wantOK {
				t.Errorf("requests %d ok %d failed %d, want %d %d %d", rep.Requests, rep.OK, rep.Failed,
					total, tt.wantOK, total-tt.wantOK)
			}
			if deref(rep.Flows) != tt.flows || deref(rep.FlowsSplit) != tt.wantSplit {
				t.Errorf("flows %d split %d, want %d %d", deref(rep.Flows), deref(rep.FlowsSplit), tt.flows, tt.wantSplit)
			}
			if rep.Peers["127.0.0.1"] != tt.wantOK || rep.Bytes == 0 {
				t.Errorf("peers %v bytes %d", rep.Peers, rep.Bytes)
			}
			sum := 0
			for _, n := range rep.PerBackend {
				sum += n
			}
			if sum != tt.wantOK {
				t.Errorf("per_backend %v does not add up to %d", rep.PerBackend, tt.wantOK)
			}
		})
	}
}

func TestUDPLoadRefused(t *testing.T) {
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().(*net.UDPAddr)
	pc.Close()
	cfg := config{c: 2, udp: addr.String(), udpAddr: addr, flows: 3, packets: 2, timeout: 200 * time.Millisecond}
	rep := udpLoad(context.Background(), cfg)
	if rep.Requests != 6 || rep.Failed != 6 || exitCode(rep) != 1 {
		t.Errorf("report %+v", rep)
	}
}

func TestRunUDPJSON(t *testing.T) {
	addr := udpResponder(t, func(int) string { return "b1" }, func(int) bool { return false })
	var out strings.Builder
	code := run([]string{"-udp", addr.String(), "-flows", "5", "-packets", "2", "-json"}, &out, io.Discard)
	if code != 0 {
		t.Fatalf("run = %d, output %s", code, out.String())
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]float64{"requests": 10, "ok": 10, "failed": 0, "flows": 5, "flows_split": 0} {
		if rep[k] != want {
			t.Errorf("%s = %v, want %v (%s)", k, rep[k], want, out.String())
		}
	}
	if _, ok := rep["connections"]; ok {
		t.Errorf("UDP report has keep-alive fields: %s", out.String())
	}
}

func TestFormatTableModes(t *testing.T) {
	three, one, zero := 3, 1, 0
	tests := []struct {
		name string
		r    Report
		want []string
	}{
		{"peers and bytes", Report{Requests: 2, OK: 2, PerBackend: map[string]int{"b1": 2},
			Peers: map[string]int{"198.18.0.3": 2}, Bytes: 20},
			[]string{"198.18.0.3", "bytes 20  hash mismatches 0"}},
		{"keepalive", Report{Requests: 2, OK: 2, Connections: &three, Broken: &one, BackendChanges: &zero},
			[]string{"connections 3  broken 1  backend changes 0"}},
		{"udp", Report{Requests: 2, OK: 2, Flows: &three, FlowsSplit: &one},
			[]string{"flows 3  split over backends 1"}},
	}
	for _, tt := range tests {
		got := formatTable(tt.r, 5)
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: table lacks %q:\n%s", tt.name, w, got)
			}
		}
	}
}
