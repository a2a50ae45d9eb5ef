package main

import (
	"strings"
	"testing"
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
	if len(sent) != 1 || len(sent[0]) != 9 {
		t.Fatalf("sent %d batches, want one of 9 operations", len(sent))
	}
	if last := sent[0][8]; last.Object != "executor" || last.Action != "start" {
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
