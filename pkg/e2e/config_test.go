package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// labFile is a configuration file for the lab: the executor on the lab's
// interface, the VIP (configured) with port 80 on the given backends
// (weight 10 each), and extra YAML after the port 80's servers (more
// ports).
func (l *lab) labFile(backends []int, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `executor:
  started: true
  interface: %s
  xdp-mode: generic
  nfa: %s
clusters:
  - address: %s
    configure: true
    ports:
      - port: 80
        servers:
`, l.env["LAB_IF"], l.env["LAB_NFA"], l.vip())
	for _, i := range backends {
		fmt.Fprintf(&b, "          - address: %s\n            weight: 10\n", l.backend(i))
	}
	b.WriteString(extra)
	return b.String()
}

// writeLabFile writes a configuration file and returns its path.
func (l *lab) writeLabFile(name, data string) string {
	l.t.Helper()
	path := filepath.Join(l.run, name)
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		l.t.Fatal(err)
	}
	return path
}

// equalsFile reports whether dlbd's configuration equals the file's:
// "apply --diff" finds nothing to change.
func (l *lab) equalsFile(path string) bool {
	out, errOut, code := l.ctl("apply", "-f", path, "--diff")
	if code != 0 {
		l.t.Fatalf("apply --diff %s: exit %d: %s", path, code, errOut)
	}
	return out == "no changes\n"
}

// TestPrivilegedE2EConfigFile drives dlbd with a configuration file:
// dlbd --check-config (touching nothing, even beside a running dlbd),
// dlbctl apply --diff (nothing changed), apply (traffic flows), get (the
// round trip is a no-op), a refused file (nothing changed), and dlbd
// --config at start, which wins over the saved state as one change.
func TestPrivilegedE2EConfigFile(t *testing.T) {
	parallel(t)
	l := newLabPrefix(t, "dlbf", "-n", "3", "-c", "1")
	good := l.writeLabFile("good.yaml", l.labFile([]int{1, 2}, ""))
	bad := l.writeLabFile("bad.yaml", strings.Replace(l.labFile([]int{1, 2}, ""), "weight: 10", "weight: 50", 1))

	// --check-config before any dlbd: valid, invalid.
	check := func(path string) (string, int) {
		cmd := exec.Command(filepath.Join(binDir, "dlbd"), "--check-config", path, "--state-dir", l.state, "--socket", l.sock, "--pin-dir", l.pinDir)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	if out, code := check(good); code != 0 || !strings.Contains(out, "configuration OK: 1 cluster, 1 port, 2 servers") {
		t.Fatalf("--check-config of a valid file: exit %d: %s", code, out)
	}
	if out, code := check(bad); code != 1 || !strings.Contains(out, "line 13: clusters[0].ports[0].servers[0].weight: 50 is outside 0..20") {
		t.Fatalf("--check-config of an invalid file: exit %d: %s", code, out)
	}
	for _, p := range []string{l.state, l.sock, l.pinDir} {
		if _, err := os.Lstat(p); err == nil {
			t.Fatalf("--check-config made %s", p)
		}
	}

	l.startDlbd()
	// Beside a running dlbd (which holds the lock): still only a check.
	if out, code := check(good); code != 0 {
		t.Fatalf("--check-config beside a running dlbd: exit %d: %s", code, out)
	}

	// --diff changes nothing.
	out := l.mustCtl("apply", "-f", good, "--diff")
	if !strings.Contains(out, "+ cluster add "+l.vip()+" configure yes\n") || !strings.HasSuffix(out, "(nothing was changed)\n") {
		t.Errorf("--diff printed\n%s", out)
	}
	if ex := l.executor(); ex.Started || len(l.servers()) != 0 {
		t.Fatal("--diff changed the configuration")
	}

	// A refused file changes nothing and names the line.
	_, errOut, code := l.ctl("apply", "-f", bad)
	if code != 1 || !strings.Contains(errOut, bad+": line 13: clusters[0].ports[0].servers[0].weight: 50 is outside 0..20 (the port's weightbound) (nothing was changed)") {
		t.Errorf("apply of an invalid file: exit %d: %s", code, errOut)
	}
	// One the host refuses (no such interface): nothing of it applied.
	noIf := l.writeLabFile("noif.yaml", strings.Replace(l.labFile([]int{1, 2}, ""), "interface: "+l.env["LAB_IF"], "interface: dlbfnope0", 1))
	_, errOut, code = l.ctl("apply", "-f", noIf)
	if code != 1 || !strings.Contains(errOut, "line 3: executor.interface:") {
		t.Errorf("apply with an unknown interface: exit %d: %s", code, errOut)
	}
	if ex := l.executor(); ex.Started || len(l.servers()) != 0 {
		t.Fatal("a refused file changed the configuration")
	}

	// Applied: traffic flows over both servers.
	out = l.mustCtl("apply", "-f", good)
	if !strings.Contains(out, "applied 6 changes") {
		t.Errorf("apply printed\n%s", out)
	}
	l.waitServersUp()
	r := l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "200", "-c", "4")
	if r.Failed != 0 || r.PerBackend["b1"] == 0 || r.PerBackend["b2"] == 0 {
		t.Errorf("after apply: %+v", r)
	}
	// get | apply: no changes.
	got := l.mustCtl("get", "-o", "yaml")
	if !l.equalsFile(l.writeLabFile("got.yaml", got)) {
		t.Error("what get printed differs from the running configuration")
	}

	// A change through dlbctl, then dlbd restarted with --config: the
	// file wins over the saved state.
	l.mustCtl("server", "add", l.vip()+"@80@"+l.backend(3), "--weight", "5")
	l.killDlbd(syscall.SIGTERM)
	l.startDlbd("--config", good)
	if !l.equalsFile(good) {
		t.Errorf("after a start with --config, the configuration is not the file's; log:\n%s", l.dlbdLog())
	}
	if !strings.Contains(l.dlbdLog(), `change="server remove `+l.vip()+"@80@"+l.backend(3)+`"`) {
		t.Errorf("the start did not log the change it made:\n%s", l.dlbdLog())
	}
	l.killDlbd(syscall.SIGTERM)
	// An invalid --config stops dlbd before it touches anything.
	cmd := exec.Command("nsenter", "--net=/run/netns/"+l.env["LAB_DISPATCHER_NS"], filepath.Join(binDir, "dlbd"),
		"--socket", l.sock, "--state-dir", l.state, "--pin-dir", l.pinDir, "--config", bad)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "line 13:") {
		t.Errorf("dlbd with an invalid --config: %v: %s", err, out)
	}
}

// TestPrivilegedE2EConfigReload reloads the configuration file (SIGHUP)
// under traffic: 40 keep-alive connections through the VIP to b1 and b2
// while the reload adds b3 and b4 to the port and adds and removes other
// ports. None breaks or moves, and the new servers take new
// connections. A reload of an invalid file, or of one the host refuses,
// changes nothing.
func TestPrivilegedE2EConfigReload(t *testing.T) {
	parallel(t)
	l := newLabPrefix(t, "dlbf", "-n", "4", "-c", "1")
	before := l.labFile([]int{1, 2}, `      - port: 81
        servers:
          - address: `+l.backend(4)+`
`)
	after := l.labFile([]int{1, 2, 3, 4}, `      - port: 53
        protocol: udp
        servers:
          - address: `+l.backend(3)+`
`)
	path := l.writeLabFile("dlb.yaml", before)
	l.startDlbd("--config", path)
	if !l.equalsFile(path) {
		t.Fatalf("the configuration is not the file's after start; log:\n%s", l.dlbdLog())
	}
	l.waitServersUp()

	held := l.keepAlive("http://"+l.vip()+"/", "10s")
	time.Sleep(2 * time.Second) // the connections are established

	if err := os.WriteFile(path, []byte(after), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := l.dlbd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	took := waitFor(t, 10*time.Second, "the reloaded configuration", func() bool { return l.equalsFile(path) })
	t.Logf("SIGHUP to the new configuration in dlbd: %v (polled every 200 ms)", took.Round(time.Millisecond))
	l.waitServersUp()

	// New connections reach the new servers too.
	fresh := l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "400", "-c", "8")
	t.Logf("new connections after the reload: %d of %d, per backend %v", fresh.OK, fresh.Requests, fresh.PerBackend)
	if fresh.Failed != 0 || fresh.PerBackend["b3"] == 0 || fresh.PerBackend["b4"] == 0 {
		t.Errorf("new connections after the reload: %d failed, per backend %v", fresh.Failed, fresh.PerBackend)
	}

	h := <-held
	t.Logf("keep-alive connections over the reload: %d held, %d requests, %d broken, %d moved to another backend, per backend %v",
		h.Connections, h.Requests, h.Broken, h.BackendChanges, h.PerBackend)
	if h.Connections != 40 || h.Broken != 0 || h.BackendChanges != 0 || h.Requests == 0 {
		t.Errorf("established connections: %d held, %d broken, %d moved (errors %v)", h.Connections, h.Broken, h.BackendChanges, h.Errors)
	}
	if h.PerBackend["b3"]+h.PerBackend["b4"] != 0 {
		t.Errorf("keep-alive connections opened before the reload were answered by the new servers: %v", h.PerBackend)
	}

	// A reload of an invalid file: logged with its line, nothing changed.
	if err := os.WriteFile(path, []byte(strings.Replace(after, "port: 53", "port: 0", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := l.dlbd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the failed reload in the log", func() bool {
		return strings.Contains(l.dlbdLog(), "reloading the configuration file failed")
	})
	if lg := l.dlbdLog(); !strings.Contains(lg, "port 0 is not a valid port") || !strings.Contains(lg, "line ") {
		t.Errorf("the failed reload does not say why:\n%s", lg)
	}
	// One the host refuses: an interface that does not exist.
	if err := os.WriteFile(path, []byte(strings.Replace(after, "interface: "+l.env["LAB_IF"], "interface: dlbfnope0", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	n := strings.Count(l.dlbdLog(), "reloading the configuration file failed")
	if err := l.dlbd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the second failed reload in the log", func() bool {
		return strings.Count(l.dlbdLog(), "reloading the configuration file failed") > n
	})
	ok := l.writeLabFile("after.yaml", after)
	if !l.equalsFile(ok) {
		t.Error("a failed reload changed the configuration")
	}
	if r := l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "100", "-c", "4"); r.Failed != 0 {
		t.Errorf("after the failed reloads: %d of %d failed", r.Failed, r.Requests)
	}
}
