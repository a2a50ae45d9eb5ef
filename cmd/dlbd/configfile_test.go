package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

const goodFile = `clusters:
  - address: 198.18.0.100
    ports:
      - port: 80
        servers:
          - address: 198.18.0.21
          - address: 198.18.0.22
advisors:
  - name: http
    port: 80
`

func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCheckConfig runs "dlbd --check-config": 0 and a summary for a
// valid file, 1 and the error with its line for an invalid one, and
// nothing touched either way (no state, no socket, no pins, no lock). It
// needs no privileges: it touches nothing.
func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, file     string
		code           int
		stdout, stderr string
	}{
		{"valid", goodFile, 0, "configuration OK: 1 cluster, 1 port, 2 servers, 1 advisor\n", ""},
		{"a bad weight", strings.Replace(goodFile, "198.18.0.22\n", "198.18.0.22\n            weight: 50\n", 1), 1, "",
			"line 8: clusters[0].ports[0].servers[1].weight: 50 is outside 0..20 (the port's weightbound)\n"},
		{"an unknown advisor", strings.Replace(goodFile, "name: http", "name: gopher", 1), 1, "",
			`line 9: advisors[0].name: unknown advisor "gopher"`},
		{"an advisorrequest the http advisor could not use", strings.Replace(goodFile, "198.18.0.22\n",
			"198.18.0.22\n            advisorrequest: GET health\n", 1), 1, "",
			`line 8: clusters[0].ports[0].servers[1].advisorrequest: the http advisor of port 80 could not use it: bad path "health"`},
		{"an unknown key", "executor:\n  interfac: eth0\n", 1, "",
			`line 2: executor.interfac: unknown key "interfac" (did you mean "interface"?)`},
		{"not YAML", "clusters: [\n", 1, "", "line 1: did not find expected node content\n"},
		{"a reach target that is a cluster address", goodFile + "ha:\n  role: primary\n  recovery: auto\n  port: 7000\n" +
			"  secret-file: /etc/dlb/ha.secret\n  heartbeats:\n    - {source: 198.18.0.2, destination: 198.18.0.4}\n  reach: [198.18.0.100]\n", 1, "",
			"line 18: ha.reach: 198.18.0.100 is a cluster address, which the active answers for itself"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, dir, strings.ReplaceAll(tt.name, " ", "_")+".yaml", tt.file)
			state, sock, pins := filepath.Join(dir, "state"), filepath.Join(dir, "dlbd.sock"), filepath.Join(dir, "pins")
			cmd := exec.Command(os.Args[0], "-test.run=^$", "--", "--check-config", path,
				"--state-dir", state, "--socket", sock, "--pin-dir", pins)
			cmd.Env = append(os.Environ(), runEnv+"=1")
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr %s", code, tt.code, errb.String())
			}
			if tt.stdout != "" && out.String() != path+": "+tt.stdout {
				t.Errorf("stdout %q, want %q", out.String(), path+": "+tt.stdout)
			}
			if tt.stderr != "" && !strings.HasPrefix(errb.String(), "dlbd: "+path+": "+tt.stderr) {
				t.Errorf("stderr %q, want it to start with %q", errb.String(), "dlbd: "+path+": "+tt.stderr)
			}
			for _, p := range []string{state, sock, pins} {
				if exists(p) {
					t.Errorf("--check-config made %s", p)
				}
			}
		})
	}
}

// fakeReplacer records the configurations it is given; refuse refuses
// them.
type fakeReplacer struct {
	mu      sync.Mutex
	running lb.Config
	got     []lb.Config
	refuse  error
	called  chan struct{}
}

func (f *fakeReplacer) Replace(_ context.Context, next lb.Config, dryRun bool) (lb.Config, error) {
	f.mu.Lock()
	defer func() {
		f.mu.Unlock()
		f.called <- struct{}{}
	}()
	if dryRun {
		return f.running, errors.New("not a dry run")
	}
	f.got = append(f.got, next)
	old := f.running
	if f.refuse != nil {
		return old, f.refuse
	}
	f.running = next
	return old, nil
}

// TestReloads: each SIGHUP applies the file as it is then; a file that
// became invalid, or that the engine refuses, is logged with its line and
// changes nothing; without a file SIGHUP does nothing.
func TestReloads(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "dlb.yaml", goodFile)
	eng := &fakeReplacer{running: lb.NewConfig(), called: make(chan struct{}, 10)}
	var logs testutil.LogBuffer
	cf := &configFile{path: path, e: eng, log: slog.New(slog.NewTextHandler(&logs, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() { cf.reloads(ctx, hup); close(done) }()

	waitCall := func() {
		t.Helper()
		select {
		case <-eng.called:
		case <-time.After(5 * time.Second):
			t.Fatalf("no Replace after SIGHUP; log:\n%s", logs.String())
		}
	}
	waitLog := func(s string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), s); {
			if time.Now().After(deadline) {
				t.Fatalf("log lacks %q:\n%s", s, logs.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	hup <- syscall.SIGHUP
	waitCall()
	waitLog("configuration file applied")
	if len(eng.got) != 1 || len(eng.got[0].Clusters) != 1 || len(eng.got[0].Advisors) != 1 {
		t.Fatalf("Replace got %+v", eng.got)
	}
	if !strings.Contains(logs.String(), `change="server add 198.18.0.100@80@198.18.0.21 weight 20"`) {
		t.Errorf("the changes are not logged:\n%s", logs.String())
	}

	// An edit that breaks the file: logged, nothing replaced.
	writeFile(t, dir, "dlb.yaml", strings.Replace(goodFile, "port: 80\n        servers", "port: 0\n        servers", 1))
	hup <- syscall.SIGHUP
	waitLog("reloading the configuration file failed")
	if !strings.Contains(logs.String(), "line 4: clusters[0].ports[0].port: port 0 is not a valid port") {
		t.Errorf("the failure does not name the line:\n%s", logs.String())
	}
	if len(eng.got) != 1 {
		t.Errorf("an invalid file reached the engine")
	}

	// The engine refuses (an interface the host lacks): placed on the
	// file's line, the running configuration unchanged.
	writeFile(t, dir, "dlb.yaml", "executor:\n  started: true\n  interface: nope0\n")
	eng.mu.Lock()
	eng.refuse = &config.OpError{Index: -1, Err: lb.Errorf("interface", "", `looking up interface "nope0": Link not found`)}
	before := eng.running
	eng.mu.Unlock()
	hup <- syscall.SIGHUP
	waitCall()
	waitLog(`line 3: executor.interface: looking up interface \"nope0\": Link not found (nothing was changed)`)
	if eng.running.Cluster(netip.MustParseAddr("198.18.0.100")) == nil || !config.Diff(eng.running, before).Empty() {
		t.Error("a refused reload changed the configuration")
	}

	// Without a file.
	cancel()
	<-done
	ctx, cancel = context.WithCancel(context.Background())
	done = make(chan struct{})
	cf.path = ""
	go func() { cf.reloads(ctx, hup); close(done) }()
	hup <- syscall.SIGHUP
	waitLog("nothing to reload")
	cancel()
	<-done
}

// TestReadConfigFileSpecial: a configuration file that is not a regular
// file is refused at once, naming what it is. A named pipe used to stop
// dlbd's start (or every later SIGHUP) until someone wrote to it.
func TestReadConfigFileSpecial(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "dlb.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{fifo, "reading the configuration file: " + fifo + " is a named pipe, not a regular file"},
		{"/dev/zero", "reading the configuration file: /dev/zero is a character device, not a regular file"},
		{dir, "reading the configuration file: " + dir + " is a directory, not a regular file"},
	} {
		start := time.Now()
		_, err := readConfigFile(tc.path)
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: took %v", tc.path, took)
		}
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v; want %q", tc.path, err, tc.want)
		}
	}
}
