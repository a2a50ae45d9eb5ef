package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
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
	"github.com/dlbproject/dlb/pkg/server"
)

// fakeEngine is a dlbd engine that records what it is asked and answers
// with canned reports, or a canned refusal.
type fakeEngine struct {
	mu      sync.Mutex
	batches [][]api.Op
	targets []string // targets of the reports asked for, in order

	refuse    error // returned by Apply
	reportErr error // returned by the list reports

	exec     api.ExecutorReport
	clusters []api.ClusterReport
	ports    []api.PortReport
	servers  []api.ServerReport
	manager  api.ManagerReport
	advisors []api.AdvisorReport
	metrics  api.MetricReport
}

func (f *fakeEngine) Apply(_ context.Context, ops []api.Op) (api.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.batches = append(f.batches, slices.Clone(ops))
	if f.refuse != nil {
		return api.Result{}, f.refuse
	}
	return api.Result{Applied: len(ops)}, nil
}

func (f *fakeEngine) ExecutorReport(context.Context) (api.ExecutorReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.exec, nil
}

func (f *fakeEngine) ClusterReports(_ context.Context, target string) ([]api.ClusterReport, error) {
	return report(f, target, f.clusters)
}

func (f *fakeEngine) PortReports(_ context.Context, target string) ([]api.PortReport, error) {
	return report(f, target, f.ports)
}

func (f *fakeEngine) ServerReports(_ context.Context, target string) ([]api.ServerReport, error) {
	return report(f, target, f.servers)
}

func (f *fakeEngine) ManagerReport(context.Context) (api.ManagerReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.manager, f.reportErr
}

func (f *fakeEngine) AdvisorReports(context.Context) ([]api.AdvisorReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.advisors, f.reportErr
}

func (f *fakeEngine) MetricReport(context.Context) (api.MetricReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.metrics, f.reportErr
}

func report[T any](f *fakeEngine, target string, canned []T) ([]T, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.targets = append(f.targets, target)
	if f.reportErr != nil {
		return nil, f.reportErr
	}
	if canned == nil {
		return []T{}, nil // as dlbd answers an empty list
	}
	return canned, nil
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

// serve runs dlbd's API handler over eng on a unix socket and returns the
// socket's path.
func serve(t *testing.T, eng server.Engine) string {
	t.Helper()
	sock := filepath.Join(shortDir(t), "dlbd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: server.Handler(eng, slog.New(slog.DiscardHandler))}
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
	var out, errb bytes.Buffer
	e := &env{
		stdout:    &out,
		stderr:    &errb,
		getenv:    func(k string) string { return vars[k] },
		newClient: func(socket string) dlbClient { return client.New(socket) },
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
