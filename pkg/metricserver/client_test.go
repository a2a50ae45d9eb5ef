package metricserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

var (
	testSecret  = []byte("0123456789abcdef-test-secret")
	otherSecret = []byte("fedcba9876543210-other-secret")
)

// mustFS opens a proc fixture under testdata/proc.
func mustFS(t *testing.T, name string) procfs.FS {
	t.Helper()
	fs, err := procfs.NewFS("testdata/proc/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// newTestAgent returns an agent on the proc fixture "a" whose CPU sampler
// has seen fixtures a then b (cpuload 45).
func newTestAgent(t *testing.T, o AgentOptions) *Agent {
	t.Helper()
	if o.Secret == nil {
		o.Secret = testSecret
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "testdata/proc/a"
	}
	a, err := NewAgent(o)
	if err != nil {
		t.Fatal(err)
	}
	now := a.now()
	a.cpu.fs = mustFS(t, "a")
	if err := a.cpu.sample(now); err != nil {
		t.Fatal(err)
	}
	a.cpu.fs = mustFS(t, "b")
	if err := a.cpu.sample(now); err != nil {
		t.Fatal(err)
	}
	return a
}

// serve serves h on a real listener on 127.0.0.1:0 and returns its address.
func serve(t *testing.T, h http.Handler) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	addr := serve(t, newTestAgent(t, AgentOptions{Name: "web1"}))
	c := NewClient(ClientOptions{})
	before := time.Now()
	var lastSeq uint64
	for i := range 3 {
		rep, err := c.Fetch(context.Background(), addr, FetchOptions{Secret: testSecret})
		if err != nil {
			t.Fatalf("fetch %d: %v", i, err)
		}
		want := map[string]float64{MetricCPULoad: 45, MetricMemLoad: 75, MetricLoadAvg: 75}
		for name, v := range want {
			if got, ok := rep.Metrics[name]; !ok || got != v {
				t.Errorf("fetch %d: %s = %v (present %v), want %v", i, name, got, ok, v)
			}
		}
		if len(rep.Missing) != 0 {
			t.Errorf("fetch %d: missing %v", i, rep.Missing)
		}
		if rep.Agent != "web1" || rep.Version != ReportVersion || !validNonce(rep.Nonce) {
			t.Errorf("fetch %d: report %+v", i, rep)
		}
		if rep.Seq <= lastSeq {
			t.Errorf("fetch %d: seq %d not above %d", i, rep.Seq, lastSeq)
		}
		lastSeq = rep.Seq
		if age := rep.Age(time.Now()); age < 0 || age > time.Since(before)+time.Millisecond {
			t.Errorf("fetch %d: age %v", i, age)
		}
	}
	if got := c.Counters(); got != (Counters{Accepted: 3}) {
		t.Errorf("counters %+v, want 3 accepted", got)
	}
	if got := c.AgentCounters(addr); got.Accepted != 3 {
		t.Errorf("agent counters %+v", got)
	}
	c.Forget(addr)
	if got := c.AgentCounters(addr); got != (Counters{}) {
		t.Errorf("after Forget: %+v", got)
	}
}

func TestAgentRefusesBadRequests(t *testing.T) {
	t.Parallel()
	addr := serve(t, newTestAgent(t, AgentOptions{}))
	base := "http://" + addr.String()
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", ReportPath, http.StatusBadRequest},                                  // no nonce
		{"GET", ReportPath + "?nonce=short", http.StatusBadRequest},                 // too short
		{"GET", ReportPath + "?nonce=" + strings.Repeat("a", 129), 400},             // too long
		{"GET", ReportPath + "?nonce=aaaaaaaaaaaaaaaa%2Baaaa", 400},                 // '+' not base64url
		{"GET", ReportPath + "?nonce=aaaaaaaaaaaaaaaa&nonce=bbbbbbbbbbbbbbbb", 400}, // two
		{"POST", ReportPath + "?nonce=aaaaaaaaaaaaaaaa", http.StatusMethodNotAllowed},
		{"GET", "/metrics", http.StatusNotFound},
		{"GET", ReportPath + "?nonce=aaaaaaaaaaaaaaaa", http.StatusOK},
	} {
		req, _ := http.NewRequest(tc.method, base+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
		}
		if signed := resp.Header.Get(SignatureHeader) != ""; signed != (tc.want == http.StatusOK) {
			t.Errorf("%s %s: signed %v", tc.method, tc.path, signed)
		}
	}
}

// fakeReply is what a fake agent answers to a request with nonce.
type fakeReply func(t *testing.T, nonce string, now time.Time) (body []byte, sig string, status int)

// fakeAgent serves replies from f.
func fakeAgent(t *testing.T, f fakeReply) netip.AddrPort {
	return serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, sig, status := f(t, r.URL.Query().Get(NonceParam), time.Now())
		if sig != "" {
			w.Header().Set(SignatureHeader, sig)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
}

// report returns a correct report body for nonce, changed by edit.
func report(t *testing.T, nonce string, seq uint64, now time.Time, edit func(map[string]any)) []byte {
	t.Helper()
	m := map[string]any{
		"version":      1,
		"agent":        "fake",
		"nonce":        nonce,
		"seq":          seq,
		"timestamp_ms": now.UnixMilli(),
		"metrics":      map[string]any{"cpuload": 10.5, "memload": 0, "custom": 100},
	}
	if edit != nil {
		edit(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// signed answers with a correct report changed by edit, signed with the
// test secret.
func signed(seq uint64, edit func(map[string]any)) fakeReply {
	return func(t *testing.T, nonce string, now time.Time) ([]byte, string, int) {
		b := report(t, nonce, seq, now, edit)
		return b, Sign(testSecret, b), http.StatusOK
	}
}

// signedRaw answers with a fixed body signed with the test secret.
func signedRaw(body string) fakeReply {
	return func(*testing.T, string, time.Time) ([]byte, string, int) {
		return []byte(body), Sign(testSecret, []byte(body)), http.StatusOK
	}
}

// metric replaces the metrics with one raw JSON value.
func metric(raw string) func(map[string]any) {
	return func(m map[string]any) { m["metrics"] = map[string]json.RawMessage{"custom": json.RawMessage(raw)} }
}

func TestFetchRefusals(t *testing.T) {
	t.Parallel()
	// A reply recorded from a real agent, to be served again.
	realAgent := serve(t, newTestAgent(t, AgentOptions{}))
	resp, err := http.Get("http://" + realAgent.String() + ReportPath + "?nonce=recordedrecordedrecorded")
	if err != nil {
		t.Fatal(err)
	}
	recorded, _ := io.ReadAll(resp.Body)
	recordedSig := resp.Header.Get(SignatureHeader)
	resp.Body.Close()

	closed := func() netip.AddrPort {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a := netip.MustParseAddrPort(ln.Addr().String())
		ln.Close()
		return a
	}()

	for _, tc := range []struct {
		name  string
		reply fakeReply      // nil: use addr
		addr  netip.AddrPort // an agent of its own
		prime fakeReply      // answered first, must be accepted
		want  error
		count func(Counters) uint64
	}{
		{name: "wrong secret", addr: realAgent, want: ErrUnauthenticated},
		{name: "no signature", reply: func(t *testing.T, nonce string, now time.Time) ([]byte, string, int) {
			return report(t, nonce, 1, now, nil), "", http.StatusOK
		}, want: ErrUnauthenticated},
		{name: "signature not hex", reply: func(t *testing.T, nonce string, now time.Time) ([]byte, string, int) {
			return report(t, nonce, 1, now, nil), "not-hex", http.StatusOK
		}, want: ErrUnauthenticated},
		{name: "body changed after signing", reply: func(t *testing.T, nonce string, now time.Time) ([]byte, string, int) {
			b := report(t, nonce, 1, now, nil)
			sig := Sign(testSecret, b)
			return []byte(strings.Replace(string(b), "10.5", "1.5", 1)), sig, http.StatusOK
		}, want: ErrUnauthenticated},
		{name: "replayed reply", reply: func(*testing.T, string, time.Time) ([]byte, string, int) {
			return recorded, recordedSig, http.StatusOK
		}, want: ErrReplayed},
		{name: "old sequence", prime: signed(100, nil), reply: signed(99, nil), want: ErrReplayed},
		{name: "same sequence", prime: signed(100, nil), reply: signed(100, nil), want: ErrReplayed},
		{name: "timestamp 10s old", reply: signed(1, func(m map[string]any) {
			m["timestamp_ms"] = time.Now().Add(-10 * time.Second).UnixMilli()
		}), want: ErrStale},
		{name: "timestamp 10s ahead", reply: signed(1, func(m map[string]any) {
			m["timestamp_ms"] = time.Now().Add(10 * time.Second).UnixMilli()
		}), want: ErrStale},
		{name: "malformed JSON", reply: signedRaw(`{"version":1,"nonce":`), want: ErrMalformed},
		{name: "not an object", reply: signedRaw(`[1,2,3]`), want: ErrMalformed},
		{name: "seq is a string", reply: signed(1, func(m map[string]any) { m["seq"] = "7" }), want: ErrMalformed},
		{name: "negative seq", reply: signed(1, func(m map[string]any) { m["seq"] = -1 }), want: ErrMalformed},
		{name: "metrics is a list", reply: signed(1, func(m map[string]any) { m["metrics"] = []int{1} }), want: ErrMalformed},
		{name: "no metrics", reply: signed(1, func(m map[string]any) { delete(m, "metrics") }), want: ErrMalformed},
		{name: "no nonce", reply: signed(1, func(m map[string]any) { delete(m, "nonce") }), want: ErrMalformed},
		{name: "no seq", reply: signed(1, func(m map[string]any) { delete(m, "seq") }), want: ErrMalformed},
		{name: "no timestamp", reply: signed(1, func(m map[string]any) { delete(m, "timestamp_ms") }), want: ErrMalformed},
		{name: "no version", reply: signed(1, func(m map[string]any) { delete(m, "version") }), want: ErrMalformed},
		{name: "version 2", reply: signed(1, func(m map[string]any) { m["version"] = 2 }), want: ErrMalformed},
		{name: "value is a word", reply: signed(1, metric(`"abc"`)), want: ErrMalformed},
		{name: "value is null", reply: signed(1, metric(`null`)), want: ErrMalformed},
		{name: "value is a literal NaN", reply: func(t *testing.T, nonce string, now time.Time) ([]byte, string, int) {
			b := []byte(strings.Replace(string(report(t, nonce, 1, now, nil)), "10.5", "NaN", 1))
			return b, Sign(testSecret, b), http.StatusOK
		}, want: ErrMalformed},
		{name: "huge body", reply: func(t *testing.T, nonce string, now time.Time) ([]byte, string, int) {
			b := report(t, nonce, 1, now, func(m map[string]any) { m["agent"] = strings.Repeat("x", MaxReportSize) })
			return b, Sign(testSecret, b), http.StatusOK
		}, want: ErrMalformed},
		{name: "value 150", reply: signed(1, metric(`150`)), want: ErrOutOfRange},
		{name: "value -0.5", reply: signed(1, metric(`-0.5`)), want: ErrOutOfRange},
		{name: "value NaN", reply: signed(1, metric(`"NaN"`)), want: ErrOutOfRange},
		{name: "value Infinity", reply: signed(1, metric(`"Infinity"`)), want: ErrOutOfRange},
		{name: "value 1e999", reply: signed(1, metric(`1e999`)), want: ErrOutOfRange},
		{name: "HTTP 500", reply: func(*testing.T, string, time.Time) ([]byte, string, int) {
			return []byte("boom"), "", http.StatusInternalServerError
		}, want: ErrUnavailable},
		{name: "nothing listening", addr: closed, want: ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := tc.addr
			secret := testSecret
			if tc.name == "wrong secret" {
				secret = otherSecret
			}
			if !addr.IsValid() {
				var n atomic.Int32
				addr = fakeAgent(t, func(t *testing.T, nonce string, now time.Time) ([]byte, string, int) {
					if n.Add(1) == 1 && tc.prime != nil {
						return tc.prime(t, nonce, now)
					}
					return tc.reply(t, nonce, now)
				})
			}
			c := NewClient(ClientOptions{})
			opts := FetchOptions{Secret: secret, Timeout: 2 * time.Second}
			if tc.prime != nil {
				if _, err := c.Fetch(context.Background(), addr, opts); err != nil {
					t.Fatalf("priming fetch: %v", err)
				}
			}
			rep, err := c.Fetch(context.Background(), addr, opts)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got report %+v, error %v; want %v", rep, err, tc.want)
			}
			for _, other := range []error{ErrUnauthenticated, ErrReplayed, ErrMalformed, ErrOutOfRange, ErrStale, ErrUnavailable} {
				if other != tc.want && errors.Is(err, other) {
					t.Errorf("error %v also wraps %v", err, other)
				}
			}
			if !strings.Contains(err.Error(), addr.String()) {
				t.Errorf("error %q does not name the agent", err)
			}
			t.Logf("error: %v", err)
			want := Counters{}
			if tc.prime != nil {
				want.Accepted = 1
			}
			want.add(tc.want)
			if got := c.Counters(); got != want {
				t.Errorf("counters %+v, want %+v", got, want)
			}
			if got := c.AgentCounters(addr); got != want {
				t.Errorf("agent counters %+v, want %+v", got, want)
			}
		})
	}
}

func TestFetchArguments(t *testing.T) {
	t.Parallel()
	c := NewClient(ClientOptions{})
	ctx := context.Background()
	if _, err := c.Fetch(ctx, netip.AddrPort{}, FetchOptions{Secret: testSecret}); err == nil {
		t.Error("invalid address accepted")
	}
	if _, err := c.Fetch(ctx, netip.MustParseAddrPort("127.0.0.1:1"), FetchOptions{Secret: []byte("short")}); err == nil {
		t.Error("short secret accepted")
	}
	if got := c.Counters(); got != (Counters{}) {
		t.Errorf("argument errors counted: %+v", got)
	}
	if got, want := normalizeAddr(netip.MustParseAddrPort("[::ffff:10.0.0.1]:0")), netip.MustParseAddrPort("10.0.0.1:10004"); got != want {
		t.Errorf("normalizeAddr = %v, want %v", got, want)
	}
}

func TestClientSkewOption(t *testing.T) {
	t.Parallel()
	// A report 10 s old is stale under the default skew and fine under 30 s.
	old := signed(1, func(m map[string]any) { m["timestamp_ms"] = time.Now().Add(-10 * time.Second).UnixMilli() })
	addr := fakeAgent(t, old)
	c := NewClient(ClientOptions{})
	if _, err := c.Fetch(context.Background(), addr, FetchOptions{Secret: testSecret}); !errors.Is(err, ErrStale) {
		t.Fatalf("default skew: %v", err)
	}
	rep, err := c.Fetch(context.Background(), addr, FetchOptions{Secret: testSecret, Skew: 30 * time.Second})
	if err != nil {
		t.Fatalf("30s skew: %v", err)
	}
	if age := rep.Age(time.Now()); age < 10*time.Second || age > 11*time.Second {
		t.Errorf("age %v, want about 10s", age)
	}
}

func TestSequenceIncreasesAcrossRestart(t *testing.T) {
	t.Parallel()
	clock := time.Unix(1_700_000_000, 0)
	now := func() time.Time { return clock }
	a1, err := NewAgent(AgentOptions{Secret: testSecret, ProcRoot: "testdata/proc/a", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	// Many reports within one microsecond still increase.
	var last uint64
	for range 1000 {
		s := a1.nextSeq()
		if s <= last {
			t.Fatalf("seq %d after %d", s, last)
		}
		last = s
	}
	// A restarted agent, a little later, starts above.
	clock = clock.Add(time.Second)
	a2, err := NewAgent(AgentOptions{Secret: testSecret, ProcRoot: "testdata/proc/a", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if s := a2.nextSeq(); s <= last {
		t.Errorf("restarted agent seq %d, not above %d", s, last)
	}
}
