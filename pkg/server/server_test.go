package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/lb"
)

// fakeEngine records the batches it is asked to apply; gate, when set,
// holds Apply until it is closed.
type fakeEngine struct {
	mu      sync.Mutex
	batches int
	ops     int
	gate    chan struct{}
	entered chan struct{}        // receives once per Apply, when set
	ctxs    chan context.Context // receives each Apply's context, when set
	// settle, when set, holds a change after it is applied (and
	// dispatcher.LoopDone called), as the engine waits for the MACs of
	// the servers a change brought in.
	settle chan struct{}

	// running is the configuration Config and Replace return (the
	// default one when unset); replaceErr refuses every Replace;
	// replaced records the configurations Replace was given.
	running    *lb.Config
	replaceErr error
	replaced   []replaceCall
}

type replaceCall struct {
	next   lb.Config
	dryRun bool
}

func (f *fakeEngine) Replace(ctx context.Context, next lb.Config, dryRun bool) (lb.Config, error) {
	f.mu.Lock()
	f.replaced = append(f.replaced, replaceCall{next, dryRun})
	old := lb.NewConfig()
	if f.running != nil {
		old = *f.running
	}
	f.mu.Unlock()
	f.settled(ctx)
	return old, f.replaceErr
}

// settled calls dispatcher.LoopDone and waits for settle, when set.
func (f *fakeEngine) settled(ctx context.Context) {
	dispatcher.LoopDone(ctx)
	if f.settle != nil {
		select {
		case <-f.settle:
		case <-ctx.Done():
		}
	}
}

func (f *fakeEngine) Apply(ctx context.Context, ops []config.Op) (int, error) {
	if f.entered != nil {
		f.entered <- struct{}{}
	}
	if f.ctxs != nil {
		f.ctxs <- ctx
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	f.mu.Lock()
	f.batches++
	f.ops += len(ops)
	f.mu.Unlock()
	f.settled(ctx)
	return len(ops), nil
}

func (f *fakeEngine) applied() (batches, ops int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.batches, f.ops
}

func (f *fakeEngine) Status(context.Context, dispatcher.Query) (*dispatcher.Status, error) {
	cfg := lb.NewConfig()
	cfg.Executor.Interface = "dlbh0"
	return &dispatcher.Status{Config: cfg}, nil
}

func (f *fakeEngine) Config(context.Context) (lb.Config, error) {
	if f.running != nil {
		return *f.running, nil
	}
	return lb.NewConfig(), nil
}

// unsized hides a body's length, as a chunked request has none.
type unsized struct{ io.Reader }

const oneOp = `{"ops":[{"object":"cluster","action":"add","target":"198.18.0.100"}]}`

// A change request is applied only if it is one JSON request within the
// size limit; anything else is refused with a status and a message that
// says why, and nothing is applied.
func TestOpsRequests(t *testing.T) {
	const limit = 1024
	big := `{"ops":[` + strings.Repeat(`{"object":"cluster","action":"add","target":"198.18.0.100"},`, 20) +
		`{"object":"cluster","action":"add","target":"198.18.0.100"}]}`
	if len(big) <= limit {
		t.Fatalf("the large body has %d bytes, not more than %d", len(big), limit)
	}
	tests := []struct {
		name    string
		body    io.Reader
		status  int
		applied int    // operations
		msg     string // in the error message
	}{
		{"one op", strings.NewReader(oneOp), 200, 1, ""},
		{"white space after", strings.NewReader(oneOp + " \r\n\t\n"), 200, 1, ""},
		{"garbage after", strings.NewReader(oneOp + " GARBAGE"), 400, 0, "data after the end of the JSON request; nothing was applied"},
		{"a second request after", strings.NewReader(oneOp + oneOp), 400, 0, "data after the end of the JSON request"},
		{"a number after", strings.NewReader(oneOp + " 1"), 400, 0, "data after the end"},
		{"cut", strings.NewReader(oneOp[:30]), 400, 0, "unexpected EOF"},
		{"cut after the operations", strings.NewReader(oneOp[:len(oneOp)-1]), 400, 0, "decoding request: unexpected EOF"},
		{"not an object", strings.NewReader(`[]`), 400, 0, "decoding request: json: want {, got ["},
		{"ops not an array", strings.NewReader(`{"ops":{}}`), 400, 0, "cannot unmarshal { into the field ops"},
		{"ops twice", strings.NewReader(`{"ops":[],"ops":[]}`), 400, 0, `field "ops" given twice`},
		{"ops null", strings.NewReader(`{"ops":null}`), 200, 0, ""},
		{"bad operation", strings.NewReader(`{"ops":[{"object":"cluster"},{"objekt":1}]}`), 400, 0, `operation 1: json: unknown field "objekt"`},
		{"many operations", strings.NewReader(`{"ops":[` + strings.Repeat(`{"object":"cluster","action":"add"},`, 2*opsBlock+6) +
			`{"object":"cluster","action":"add"}]}`), 200, 2*opsBlock + 7, ""},
		{"empty", strings.NewReader(""), 400, 0, "decoding request: EOF"},
		{"unknown field", strings.NewReader(`{"ops":[],"opz":1}`), 400, 0, `unknown field "opz"`},
		{"too large, length known", strings.NewReader(big), 413, 0,
			"request body larger than the limit of 1 KiB (raise it with dlbd --max-request-size); nothing was applied"},
		{"too large, chunked", unsized{strings.NewReader(big)}, 413, 0, "larger than the limit of 1 KiB"},
		{"too large in trailing space", unsized{strings.NewReader(oneOp + strings.Repeat(" ", limit))}, 413, 0, "larger than the limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eng := &fakeEngine{}
			max := int64(limit)
			if tt.name == "many operations" {
				max = 1 << 20
			}
			h := New(eng, Options{MaxRequestSize: max, SizeSetting: "dlbd --max-request-size"})
			req := httptest.NewRequest(http.MethodPost, api.PathOps, tt.body)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Errorf("status %d, want %d; body %s", rec.Code, tt.status, rec.Body)
			}
			if _, ops := eng.applied(); ops != tt.applied {
				t.Errorf("applied %d operations, want %d", ops, tt.applied)
			}
			if tt.msg == "" {
				return
			}
			var ae api.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &ae); err != nil {
				t.Fatalf("error body %q: %v", rec.Body, err)
			}
			if !strings.Contains(ae.Message, tt.msg) || ae.Op != -1 {
				t.Errorf("error %+v, want a message containing %q and op -1", ae, tt.msg)
			}
		})
	}
}

// serveAPI runs NewServer over eng on a unix socket and returns its path.
func serveAPI(t *testing.T, eng Engine, o Options) string {
	t.Helper()
	path := filepath.Join(sockDir(t), "api.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(eng, o)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return path
}

// closedWithin reads from c until it is closed, and fails if that takes
// longer than max. It returns what was read.
func closedWithin(t *testing.T, c net.Conn, max time.Duration) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(max))
	start := time.Now()
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("connection still open after %v (read %q): %v", max, b, err)
	}
	t.Logf("closed by the server after %v", time.Since(start).Round(time.Millisecond))
	return string(b)
}

// Connections that stall or idle are dropped when their timeout passes,
// instead of being held for ever.
func TestTimeouts(t *testing.T) {
	const tmo = 300 * time.Millisecond
	eng := &fakeEngine{}
	path := serveAPI(t, eng, Options{HeaderTimeout: tmo, BodyTimeout: tmo, IdleTimeout: tmo})
	dial := func(t *testing.T) net.Conn {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	t.Run("stalled body", func(t *testing.T) {
		c := dial(t)
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: dlbd\r\nContent-Length: 1000\r\n\r\n%s", api.PathOps, oneOp[:20])
		got := closedWithin(t, c, 10*tmo)
		if !strings.HasPrefix(got, "HTTP/1.1 408 ") || !strings.Contains(got, "request body not received within 300ms") {
			t.Errorf("answer %q, want 408 naming the timeout", got)
		}
		if b, _ := eng.applied(); b != 0 {
			t.Errorf("applied %d batches", b)
		}
	})
	t.Run("stalled headers", func(t *testing.T) {
		c := dial(t)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: dl", api.PathExecutor)
		closedWithin(t, c, 10*tmo)
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		c := dial(t)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: dlbd\r\n\r\n", api.PathExecutor)
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("status %d, close %v: want a kept-alive 200", resp.StatusCode, resp.Close)
		}
		if rest := closedWithin(t, c, 10*tmo); rest != "" || r.Buffered() != 0 {
			t.Errorf("unexpected data %q", rest)
		}
	})
}

// A change request that waits for its turn longer than the body timeout
// is still read and applied: the timeout runs from its turn.
func TestWaitingRequestKeepsItsBody(t *testing.T) {
	const tmo = 200 * time.Millisecond
	eng := &fakeEngine{gate: make(chan struct{}), entered: make(chan struct{}, 2)}
	path := serveAPI(t, eng, Options{HeaderTimeout: tmo, BodyTimeout: tmo})
	hc := unixClient(path)
	post := func() (int, error) { return postOps(hc) }
	type result struct {
		status int
		err    error
	}
	results := make(chan result, 2)
	go func() { s, err := post(); results <- result{s, err} }()
	<-eng.entered // the first holds the turn in Apply
	go func() { s, err := post(); results <- result{s, err} }()
	time.Sleep(4 * tmo)
	close(eng.gate)
	for range 2 {
		select {
		case r := <-results:
			if r.err != nil || r.status != 200 {
				t.Errorf("status %d, err %v; want 200", r.status, r.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no answer within 5s")
		}
	}
	if b, ops := eng.applied(); b != 2 || ops != 2 {
		t.Errorf("applied %d batches, %d operations; want 2 and 2", b, ops)
	}
}

// TestTurnEndsWhenApplied: a change waiting for the MACs of the servers
// it brought in (up to a second for one not up yet) no longer holds the
// next change back: the turn ends when the engine has applied it. A
// script adding 40 servers not booted yet at once took 40 s.
func TestTurnEndsWhenApplied(t *testing.T) {
	const file = "clusters:\n  - address: 198.18.0.100\n"
	for _, c := range []struct{ path, body string }{{api.PathOps, oneOp}, {api.PathConfig, file}} {
		t.Run(c.path, func(t *testing.T) {
			eng := &fakeEngine{settle: make(chan struct{})}
			path := serveAPI(t, eng, Options{})
			hc := unixClient(path)
			post := func(done chan<- int) {
				resp, err := hc.Post("http://dlbd"+c.path, "application/json", strings.NewReader(c.body))
				if err != nil {
					t.Error(err)
					done <- 0
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				done <- resp.StatusCode
			}
			// changes counts the changes the engine was given.
			changes := func() int {
				eng.mu.Lock()
				defer eng.mu.Unlock()
				if c.path == api.PathOps {
					return eng.batches
				}
				return len(eng.replaced)
			}
			first, second := make(chan int, 1), make(chan int, 1)
			go post(first)
			// The first is applied and settling; the second goes ahead
			// (the wait only bounds a machine under load).
			go post(second)
			for deadline := time.Now().Add(5 * time.Second); changes() < 2 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			if n := changes(); n != 2 {
				t.Errorf("%d changes applied while the first settles; want 2: the second waited for its turn", n)
			}
			select {
			case st := <-first:
				t.Errorf("a change answered (%d) before it settled", st)
			case st := <-second:
				t.Errorf("a change answered (%d) before it settled", st)
			default:
			}
			close(eng.settle)
			for _, ch := range []chan int{first, second} {
				if st := <-ch; st != http.StatusOK {
					t.Errorf("status %d, want 200", st)
				}
			}
		})
	}
}

// unixClient returns an HTTP client of the API socket at path.
func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
}

// postOps posts oneOp with hc and returns the answer's status.
func postOps(hc *http.Client) (int, error) {
	resp, err := hc.Post("http://dlbd"+api.PathOps, "application/json", strings.NewReader(oneOp))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// TestChangeKnowsOthersWait: a change being applied is told whether
// other change requests wait for their turn behind it
// (dispatcher.Queued), so that the engine does not make them wait for
// the MAC of a server it brings in that is not up yet.
func TestChangeKnowsOthersWait(t *testing.T) {
	eng := &fakeEngine{gate: make(chan struct{}), ctxs: make(chan context.Context, 2)}
	path := serveAPI(t, eng, Options{})
	hc := unixClient(path)
	statuses := make(chan int, 2)
	post := func() {
		st, err := postOps(hc)
		if err != nil {
			t.Error(err)
		}
		statuses <- st
	}
	go post()
	first := <-eng.ctxs // held in Apply by the gate
	if dispatcher.Queued(first) {
		t.Error("a change alone was told others wait behind it")
	}
	go post()
	deadline := time.Now().Add(5 * time.Second)
	for !dispatcher.Queued(first) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !dispatcher.Queued(first) {
		t.Error("a change was not told within 5s that another waits behind it")
	}
	close(eng.gate)
	second := <-eng.ctxs
	for range 2 {
		if st := <-statuses; st != http.StatusOK {
			t.Errorf("status %d, want 200", st)
		}
	}
	if dispatcher.Queued(first) || dispatcher.Queued(second) {
		t.Error("changes were told others wait after every one had its turn")
	}
}

func TestSizeString(t *testing.T) {
	for n, want := range map[int64]string{8 << 20: "8 MiB", 1024: "1 KiB", 1536: "1536 bytes", 3 << 30: "3072 MiB", 1000: "1000 bytes"} {
		if got := sizeString(n); got != want {
			t.Errorf("sizeString(%d) = %q, want %q", n, got, want)
		}
	}
}

// respond answers a refusal 400 naming the field, a request abandoned (the
// client gone, or dlbd stopping under it) 503 without an error logged,
// and anything else 500 with an error logged.
func TestRespondStatus(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		status int
		logged bool // an ERROR line
	}{
		{"a refusal", lb.Errorf("weight", "x", "not a number"), http.StatusBadRequest, false},
		{"the client went away", fmt.Errorf("applying: %w", context.Canceled), http.StatusServiceUnavailable, false},
		{"dlbd stopping", fmt.Errorf("reading: %w", dispatcher.ErrStopped), http.StatusServiceUnavailable, false},
		{"a failure", fmt.Errorf("writing the state: %w", io.ErrShortWrite), http.StatusInternalServerError, true},
	} {
		var logs strings.Builder
		log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		w := httptest.NewRecorder()
		respond(w, log, nil, tc.err)
		var ae api.Error
		if err := json.Unmarshal(w.Body.Bytes(), &ae); err != nil || ae.Message != tc.err.Error() {
			t.Errorf("%s: body %q (%v)", tc.name, w.Body, err)
		}
		if w.Code != tc.status || strings.Contains(logs.String(), "level=ERROR") != tc.logged {
			t.Errorf("%s: status %d, logged %q; want %d, an error logged: %v", tc.name, w.Code, logs.String(), tc.status, tc.logged)
		}
	}
}
