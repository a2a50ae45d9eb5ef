package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/client"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
)

// fakeEngine is a fake dlbd API: it records the batches of operations
// it is sent and answers reports with canned values.
type fakeEngine struct {
	mu      sync.Mutex
	batches [][]api.Op
	targets []string // targets of the reports asked for, in order

	refuse    error // answers every batch
	reportErr error // answers the reports

	exec     api.ExecutorReport
	clusters []api.ClusterReport
	ports    []api.PortReport
	servers  []api.ServerReport
	manager  api.ManagerReport
	advisors []api.AdvisorReport
	metrics  api.MetricReport
	script   string
	requests int
	// ha answers the high-availability report; takeovers records the
	// addresses takeovers asked for.
	ha        api.HAReport
	takeovers []string
	// bgp answers the BGP report.
	bgp api.BGPReport

	// The configuration file: what GET returns by format, what POST
	// answers, and the files POST received with their dry_run.
	configFiles  map[string]string
	configResult api.ConfigResult
	posted       []postedFile
}

type postedFile struct {
	body, dryRun string
}

func (f *fakeEngine) requestCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests
}

// ServeHTTP answers as dlbd's API would.
func (f *fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	fail := func(err error) {
		ae := api.Error{Message: err.Error(), Field: lb.FieldOf(err), Op: -1}
		var oe *config.OpError
		if errors.As(err, &oe) {
			ae.Op = oe.Index
		}
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(ae)
	}
	answer := func(v any) { _ = json.NewEncoder(w).Encode(v) }
	list := func(v any) {
		f.targets = append(f.targets, r.URL.Query().Get("target"))
		if f.reportErr != nil {
			fail(f.reportErr)
			return
		}
		answer(v)
	}
	switch r.Method + " " + r.URL.Path {
	case "POST " + api.PathOps:
		var req api.Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		f.batches = append(f.batches, slices.Clone(req.Ops))
		if f.refuse != nil {
			fail(f.refuse)
			return
		}
		answer(api.Result{Applied: len(req.Ops)})
	case "GET " + api.PathExecutor:
		answer(f.exec)
	case "GET " + api.PathClusters:
		list(orEmpty(f.clusters))
	case "GET " + api.PathPorts:
		list(orEmpty(f.ports))
	case "GET " + api.PathServers:
		list(orEmpty(f.servers))
	case "GET " + api.PathManager, "GET " + api.PathAdvisors, "GET " + api.PathMetrics:
		if f.reportErr != nil {
			fail(f.reportErr)
			return
		}
		switch r.URL.Path {
		case api.PathManager:
			f.targets = append(f.targets, r.URL.Query().Get("target"))
			answer(f.manager)
		case api.PathAdvisors:
			answer(orEmpty(f.advisors))
		default:
			answer(f.metrics)
		}
	case "GET " + api.PathConfigScript:
		_, _ = w.Write([]byte(f.script))
	case "GET " + api.PathHA:
		answer(f.ha)
	case "GET " + api.PathBGP:
		answer(f.bgp)
	case "POST " + api.PathTakeover:
		var req api.TakeoverRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.takeovers = append(f.takeovers, req.Address)
		if f.refuse != nil {
			fail(f.refuse)
			return
		}
		answer(api.Result{Applied: 1})
	case "GET " + api.PathConfig:
		_, _ = w.Write([]byte(f.configFiles[r.URL.Query().Get("format")]))
	case "POST " + api.PathConfig:
		body, _ := io.ReadAll(r.Body)
		f.posted = append(f.posted, postedFile{string(body), r.URL.Query().Get("dry_run")})
		if f.refuse != nil {
			fail(f.refuse)
			return
		}
		answer(f.configResult)
	default:
		http.NotFound(w, r)
	}
}

// orEmpty answers a nil list as dlbd does: [].
func orEmpty[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}

func (f *fakeEngine) sent() [][]api.Op {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.batches)
}

// shortDir returns a temporary directory with a short path: a unix
// socket's path must fit in 108 bytes, which t.TempDir's long names of
// subtests can exceed.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dlbctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serve serves an API handler on a unix socket and returns the socket's
// path.
func serve(t *testing.T, eng http.Handler) string {
	t.Helper()
	sock := filepath.Join(shortDir(t), "dlbd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: eng}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serving the API: %v", err)
		}
	}()
	t.Cleanup(func() { srv.Close() })
	return sock
}

// testTime is the clock of every test run.
var testTime = time.Date(2025, 6, 1, 12, 30, 0, 0, time.UTC)

type result struct {
	code           int
	stdout, stderr string
}

// runWith runs dlbctl in-process with the given environment.
func runWith(vars map[string]string, args ...string) result {
	return runIn(vars, "", args...)
}

// runIn runs dlbctl in-process with the given environment and standard
// input.
func runIn(vars map[string]string, stdin string, args ...string) result {
	var out, errb bytes.Buffer
	e := &env{
		stdin:     strings.NewReader(stdin),
		stdout:    &out,
		stderr:    &errb,
		getenv:    func(k string) string { return vars[k] },
		newClient: func(socket string, timeout time.Duration) dlbClient { return client.NewTimeout(socket, timeout) },
		newRemote: func(r client.Remote, timeout time.Duration) (dlbClient, error) { return client.NewRemote(r, timeout) },
		now:       func() time.Time { return testTime },
		resolver:  testHosts,
	}
	code := run(e, args)
	return result{code, out.String(), errb.String()}
}

// dlbctl runs dlbctl against the dlbd listening on sock (through
// DLB_SOCKET).
func dlbctl(sock string, args ...string) result {
	return runWith(map[string]string{"DLB_SOCKET": sock}, args...)
}

func ptr[T any](v T) *T { return &v }

// fakeResolver is a name table: no test depends on /etc/hosts or DNS.
type fakeResolver map[string][]netip.Addr

func (r fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == "broken.example" {
		return nil, &net.DNSError{Err: "server misbehaving", Name: host, IsTemporary: true}
	}
	if a, ok := r[strings.ToLower(host)]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// testHosts are the host names of every test run.
var testHosts = fakeResolver{
	"server1":     {netip.MustParseAddr("198.18.0.21")},
	"server2":     {netip.MustParseAddr("198.18.0.22"), netip.MustParseAddr("::ffff:198.18.0.22")},
	"web6":        {netip.MustParseAddr("2001:2::21")},
	"dual":        {netip.MustParseAddr("198.18.0.23"), netip.MustParseAddr("2001:2::23")},
	"twin":        {netip.MustParseAddr("198.18.0.31"), netip.MustParseAddr("198.18.0.32")},
	"vip1":        {netip.MustParseAddr("198.18.0.100")},
	"vip6":        {netip.MustParseAddr("2001:2::100")},
	"gw1":         {netip.MustParseAddr("198.18.0.254")},
	"noaddr":      {},
	"my-host.lab": {netip.MustParseAddr("198.18.0.40")},
}
