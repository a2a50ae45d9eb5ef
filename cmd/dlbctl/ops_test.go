package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher"
	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/server"
)

// TestVersionFlag: "dlbctl --version" works (the package's smoke test and
// operators use it) and says what "dlbctl version" says.
func TestVersionFlag(t *testing.T) {
	flag := dlbctl("/nonexistent", "--version")
	cmd := dlbctl("/nonexistent", "version")
	if flag.code != exitOK || !strings.HasPrefix(flag.stdout, "dlbctl ") || !strings.Contains(flag.stdout, "admin API v1") {
		t.Errorf("--version: exit %d, stdout %q, stderr %q", flag.code, flag.stdout, flag.stderr)
	}
	if flag.stdout != cmd.stdout {
		t.Errorf("--version printed %q, version printed %q", flag.stdout, cmd.stdout)
	}
}

// TestPackagedExampleLoads: the example configuration the package installs
// as /etc/dlb/dlb.cfg.example is a script "dlbctl file load" accepts, sent
// as one batch.
func TestPackagedExampleLoads(t *testing.T) {
	eng := &fakeEngine{}
	r := dlbctl(serve(t, eng), "file", "load", "../../packaging/etc/dlb.cfg.example")
	if r.code != exitOK {
		t.Fatalf("file load: exit %d: %s", r.code, r.stderr)
	}
	sent := eng.sent()
	if len(sent) != 1 || len(sent[0]) != 11 {
		t.Fatalf("sent %d batches, want one of 11 operations", len(sent))
	}
	if last := sent[0][10]; last.Object != "executor" || last.Action != "start" {
		t.Errorf("last operation %+v, want executor start", last)
	}
}

// TestBackendSetupUsage: bad input is a usage error naming what was wrong,
// before anything is touched.
func TestBackendSetupUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"backend", "setup"}, "at least one cluster address"},
		{[]string{"backend", "setup", "198.18.0.300"}, `"198.18.0.300" is not an IP address`},
		{[]string{"backend", "setup", "198.18.0.100+x"}, `"x" is not an IP address`},
		{[]string{"backend", "setup", "198.18.0.100", "web1"}, `"web1" is not an IP address`},
		{[]string{"backend", "setup", "198.18.0.100", "--undo", "--persist"}, "--undo and --persist"},
		{[]string{"backend", "setup", "198.18.0.100", "--weight", "3"}, "unknown flag: --weight"},
	} {
		r := dlbctl("/nonexistent", c.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("dlbctl %v: exit %d, stderr %q; want exit %d naming %q", c.args, r.code, r.stderr, exitUsage, c.want)
		}
	}
}

func (unreachableClient) BGP(context.Context) (api.BGPReport, error) { return api.BGPReport{}, errDown }
func (unreachableClient) ServerCheck(context.Context, string, string) (api.ServerCheckReport, error) {
	return api.ServerCheckReport{}, errDown
}

// fakeChecker answers server checks with a canned report and records
// what it was asked.
type fakeChecker struct {
	report         api.ServerCheckReport
	target, client string
}

func (f *fakeChecker) CheckServer(_ context.Context, target, client string) (api.ServerCheckReport, error) {
	f.target, f.client = target, client
	return f.report, nil
}

// noEngine is an engine that has nothing: the server check needs none.
type noEngine struct{}

var errNoEngine = errors.New("no engine in this test")

func (noEngine) Apply(context.Context, []config.Op) (int, error) { return 0, errNoEngine }
func (noEngine) Status(context.Context, dispatcher.Query) (*dispatcher.Status, error) {
	return nil, errNoEngine
}
func (noEngine) Config(context.Context) (lb.Config, error) { return lb.Config{}, errNoEngine }
func (noEngine) Replace(context.Context, lb.Config, bool) (lb.Config, error) {
	return lb.Config{}, errNoEngine
}

// serveChecker serves the API with a server checker.
func serveChecker(t *testing.T, c server.ServerChecker) string {
	t.Helper()
	sock := filepath.Join(shortDir(t), "dlbd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: server.New(noEngine{}, server.Options{Logger: slog.New(slog.DiscardHandler), ServerChecker: c})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return sock
}

func TestServerCheck(t *testing.T) {
	failing := api.ServerCheckReport{Target: "198.18.0.100@80@198.18.0.21", Interface: "eth0", Source: "198.18.0.2", ServerMAC: "02:00:00:00:00:15",
		Checks: []api.ServerCheck{
			{Name: "arp-server", Result: "pass", Detail: "198.18.0.21 is at 02:00:00:00:00:15 on eth0"},
			{Name: "arp-cluster", Result: "fail", Detail: "198.18.0.21 answers ARP for the cluster address", Fix: "on 198.18.0.21: dlbctl backend setup 198.18.0.100"},
		}}
	c := &fakeChecker{report: failing}
	sock := serveChecker(t, c)
	r := dlbctl(sock, "server", "check", "198.18.0.100@80@198.18.0.21", "--client", "198.18.0.99")
	if r.code != exitFailed || !strings.Contains(r.stderr, "1 of 2 checks failed") {
		t.Errorf("exit %d, stderr %q: want exit 1 counting the failed check", r.code, r.stderr)
	}
	for _, want := range []string{"arp-cluster  FAIL", "fix:", "dlbctl backend setup 198.18.0.100", "arp-server   PASS"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	if c.target != "198.18.0.100@80@198.18.0.21" || c.client != "198.18.0.99" {
		t.Errorf("dlbd was asked for %q from %q", c.target, c.client)
	}

	c.report.OK, c.report.Checks = true, failing.Checks[:1]
	r = dlbctl(sock, "server", "check", "198.18.0.100@80@198.18.0.21", "-o", "json")
	if r.code != exitOK || !strings.Contains(r.stdout, `"result": "pass"`) {
		t.Errorf("passing check: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	if c.client != "" {
		t.Errorf("client %q sent without --client", c.client)
	}

	// A dlbd without checker says so.
	r = dlbctl(serveChecker(t, nil), "server", "check", "198.18.0.100@80@198.18.0.21")
	if r.code != exitFailed || !strings.Contains(r.stderr, "does not check servers") {
		t.Errorf("without a checker: exit %d, stderr %q", r.code, r.stderr)
	}
	// No target is a usage error.
	if r := dlbctl(sock, "server", "check"); r.code != exitUsage {
		t.Errorf("no target: exit %d", r.code)
	}
}
