package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// packagePaths are the directories the package may add to; a snapshot of
// the names under them before the install must equal one after the purge.
var packagePaths = []string{"/etc", "/usr/sbin", "/usr/bin", "/usr/lib/dlb", "/lib/systemd/system", "/usr/share/man/man1",
	"/usr/share/man/man8", "/usr/share/bash-completion/completions", "/usr/share/zsh/vendor-completions",
	"/usr/share/fish/vendor_completions.d", "/usr/share/doc", "/var/lib/dlb", "/var/lib/systemd", "/run/dlb", "/sys/fs/bpf/dlb"}

func snapshot(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, root := range packagePaths {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil {
				names[p] = true
			}
			return nil
		})
	}
	return names
}

func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = nil
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// tracee returns the PID of strace's child (dlbd).
func tracee(t *testing.T, stracePID int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", stracePID, stracePID))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		t.Fatalf("strace (%d) has children %q, want one dlbd", stracePID, f)
	}
	pid, _ := strconv.Atoi(f[0])
	return pid
}

// tracedSyscalls returns the distinct system calls in an strace -f log.
func tracedSyscalls(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^\d+ +(?:<\.\.\. )?([a-z0-9_]+)[( ]`)
	seen := map[string]bool{}
	for _, m := range re.FindAllSubmatch(b, -1) {
		seen[string(m[1])] = true
	}
	var out []string
	for s := range seen {
		out = append(out, s)
	}
	slices.Sort(out)
	if len(out) < 20 {
		t.Fatalf("only %d system calls in %s: strace did not trace dlbd", len(out), path)
	}
	return out
}

// unitSyscalls evaluates a unit's SystemCallFilter= lines as systemd does:
// the first line's list (an allow list unless it starts with ~), then each
// line adds to it or (with ~) takes from it; groups are expanded with
// "systemd-analyze syscall-filter".
func unitSyscalls(t *testing.T, unit string) map[string]bool {
	t.Helper()
	out, err := exec.Command("systemd-analyze", "syscall-filter").Output()
	if err != nil {
		t.Fatalf("systemd-analyze syscall-filter: %v", err)
	}
	groups := map[string][]string{}
	var cur string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "@"):
			cur = f
		case f == "" || strings.HasPrefix(f, "#") || cur == "":
		default:
			groups[cur] = append(groups[cur], f)
		}
	}
	var expand func(string) []string
	expand = func(name string) []string {
		if !strings.HasPrefix(name, "@") {
			return []string{name}
		}
		var r []string
		for _, s := range groups[name] {
			r = append(r, expand(s)...)
		}
		return r
	}
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{}
	first := true
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "SystemCallFilter=")
		if !ok {
			continue
		}
		deny := strings.HasPrefix(v, "~")
		if first && deny {
			t.Fatalf("%s: a deny-list filter is not what this test evaluates", unit)
		}
		first = false
		for _, name := range strings.Fields(strings.TrimPrefix(v, "~")) {
			for _, sc := range expand(name) {
				allowed[sc] = !deny
			}
		}
	}
	for sc, ok := range allowed {
		if !ok {
			delete(allowed, sc)
		}
	}
	if len(allowed) < 100 {
		t.Fatalf("%s: only %d system calls allowed: the filter was not read", unit, len(allowed))
	}
	return allowed
}

// capNumbers are the capabilities dlbd.service may name.
var capNumbers = map[string]uint{"CAP_NET_BIND_SERVICE": 10, "CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13, "CAP_SYS_ADMIN": 21, "CAP_PERFMON": 38, "CAP_BPF": 39}

// unitCaps reads a unit's CapabilityBoundingSet and AmbientCapabilities.
func unitCaps(t *testing.T, unit string) (bounding, ambient []string) {
	t.Helper()
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		switch {
		case !ok:
		case k == "CapabilityBoundingSet":
			bounding = strings.Fields(v)
		case k == "AmbientCapabilities":
			ambient = strings.Fields(v)
		}
	}
	return bounding, ambient
}

// procCaps reads a process's capability sets from /proc/PID/status.
func procCaps(t *testing.T, pid int) map[string]uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]uint64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":\t")
		if ok && strings.HasPrefix(k, "Cap") {
			m[k], _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		} else if ok && k == "Uid" {
			uid, _ := strconv.ParseUint(strings.Fields(v)[0], 10, 64)
			m["Uid"] = uid
		}
	}
	return m
}

// TestPrivilegedPackage builds the .deb, installs it with dpkg, checks what
// it installed (binaries, man pages, units, user and group, conffiles that
// keep an operator's edit), runs dlbd as user dlb with exactly the
// capabilities of dlbd.service through the lab's MAC and NAT smoke tests
// (and a server check, which needs CAP_NET_RAW), and purges the package:
// every file, the user and the group are gone.
func TestPrivilegedPackage(t *testing.T) {
	parallel(t)
	l := newLabPrefix(t, "dlbo", "-n", "2", "-r", "2", "-c", "1")
	if out, err := exec.Command("dpkg-query", "-W", "dlb").CombinedOutput(); err == nil {
		t.Fatalf("package dlb is installed on this machine (%s): the test installs and purges it; remove it first", strings.TrimSpace(string(out)))
	}
	if _, err := user.Lookup("dlb"); err == nil {
		t.Fatal("a user dlb exists already: the test checks that the package creates and removes it")
	}
	_, pinErr := os.Stat("/sys/fs/bpf/dlb")
	defaultPinFree := os.IsNotExist(pinErr)
	before := snapshot(t)

	// Build.
	debDir := t.TempDir()
	start := time.Now()
	mk := exec.Command("make", "package", "BIN="+debDir)
	mk.Dir = repoDir
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make package: %v\n%s", err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(debDir, "dlb_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("make package made %v", debs)
	}
	deb := debs[0]
	t.Logf("make package: %s in %v", filepath.Base(deb), time.Since(start).Round(time.Second))
	t.Logf("dpkg -c:\n%s", mustRun(t, "dpkg", "-c", deb))

	// Install; whatever happens, purge at the end.
	t.Cleanup(func() {
		if out, err := exec.Command("dpkg", "--purge", "dlb").CombinedOutput(); err != nil {
			t.Errorf("dpkg --purge dlb: %v\n%s", err, out)
		}
	})
	mustRun(t, "dpkg", "-i", deb)

	if out := mustRun(t, "/usr/bin/dlbctl", "--version"); !regexp.MustCompile(`^dlbctl \S+ \(admin API v1\)\n$`).MatchString(out) {
		t.Errorf("dlbctl --version: %q", out)
	}
	for page, want := range map[string]string{"dlbctl": "dlbctl - Configure and report dlbd", "dlbd": "dlbd - dlb dispatcher daemon",
		"dlbctl-server-check": "reply-source", "dlbctl-backend-setup": "arp_ignore=1", "dlbmetricd": "dlbmetricd"} {
		cmd := exec.Command("man", "-P", "cat", page)
		cmd.Env = append(os.Environ(), "MANWIDTH=200")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("man %s: %v: want %q in\n%.300s", page, err, want, out)
		}
	}
	u, err := user.Lookup("dlb")
	if err != nil {
		t.Fatalf("no user dlb after the install: %v", err)
	}
	g, err := user.LookupGroup("dlb")
	if err != nil || u.Gid != g.Gid {
		t.Fatalf("group dlb: %v (user's gid %s)", err, u.Gid)
	}
	if pw := mustRun(t, "getent", "passwd", "dlb"); !strings.HasSuffix(strings.TrimSpace(pw), ":/var/lib/dlb:/usr/sbin/nologin") {
		t.Errorf("user dlb: %q", pw)
	}
	conff := mustRun(t, "dpkg-query", "-W", "-f=${Conffiles}", "dlb")
	for _, f := range []string{"/etc/dlb/README", "/etc/dlb/dlb.cfg.example", "/etc/dlb/dlb.yaml.example", "/etc/default/dlbd"} {
		if !strings.Contains(conff, " "+f+" ") {
			t.Errorf("%s is not a conffile: %q", f, conff)
		}
	}
	for _, f := range []string{"/usr/share/bash-completion/completions/dlbctl", "/usr/share/zsh/vendor-completions/_dlbctl",
		"/usr/share/fish/vendor_completions.d/dlbctl.fish", "/usr/lib/dlb/dlbd-prepare"} {
		if _, err := os.Stat(f); err != nil {
			t.Error(err)
		}
	}

	// The units: systemd-analyze verify (which also finds the binaries and
	// man pages they name) and the security score.
	units := []string{"/lib/systemd/system/dlbd.service", "/lib/systemd/system/dlbmetricd.service"}
	if out, err := exec.Command("systemd-analyze", append([]string{"verify"}, units...)...).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	for _, unit := range units {
		out, _ := exec.Command("systemd-analyze", "security", "--offline=yes", unit).CombinedOutput()
		m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+) (\S+)`).FindSubmatch(out)
		if m == nil {
			t.Errorf("systemd-analyze security %s: no score in\n%s", unit, out)
			continue
		}
		score, _ := strconv.ParseFloat(string(m[1]), 64)
		t.Logf("systemd-analyze security %s: %s %s", filepath.Base(unit), m[1], m[2])
		if score > 2.5 {
			t.Errorf("%s: exposure %.1f, want at most 2.5", unit, score)
		}
	}

	// Conffiles: an operator's edit survives a reinstall, and an upgrade
	// whose own version of the file changed too (kept with
	// --force-confold, the new one beside it as .dpkg-dist).
	const edit = "DLBD_OPTS=\"--log-level=debug\" # operator\n"
	if err := os.WriteFile("/etc/default/dlbd", []byte(edit), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "dpkg", "-i", deb)
	if b, _ := os.ReadFile("/etc/default/dlbd"); string(b) != edit {
		t.Errorf("reinstall overwrote the operator's /etc/default/dlbd: %q", b)
	}
	tree := filepath.Join(t.TempDir(), "v2")
	mustRun(t, "dpkg-deb", "-R", deb, tree)
	ctl, _ := os.ReadFile(filepath.Join(tree, "DEBIAN", "control"))
	ctl = regexp.MustCompile(`(?m)^Version: (.*)$`).ReplaceAll(ctl, []byte("Version: ${1}+v2"))
	if err := os.WriteFile(filepath.Join(tree, "DEBIAN", "control"), ctl, 0o644); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(filepath.Join(tree, "etc", "default", "dlbd"), os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprintln(f, "# changed in v2")
	f.Close()
	// Uncompressed: dpkg-deb's default (xz) takes 20 s and 30 CPU-seconds here.
	mustRun(t, "dpkg-deb", "-Znone", "-b", tree, tree+".deb")
	mustRun(t, "dpkg", "-i", "--force-confdef", "--force-confold", tree+".deb")
	if b, _ := os.ReadFile("/etc/default/dlbd"); string(b) != edit {
		t.Errorf("upgrade overwrote the operator's /etc/default/dlbd: %q", b)
	}
	if b, err := os.ReadFile("/etc/default/dlbd.dpkg-dist"); err != nil || !strings.Contains(string(b), "changed in v2") {
		t.Errorf("the upgrade's /etc/default/dlbd is not beside it as .dpkg-dist: %v", err)
	}

	// dlbd-prepare makes the default pin directory dlb's (when no dlbd
	// uses it here); purge must remove it.
	if defaultPinFree {
		mustRun(t, "/usr/lib/dlb/dlbd-prepare")
		var st syscall.Stat_t
		if err := syscall.Stat("/sys/fs/bpf/dlb", &st); err != nil || fmt.Sprint(st.Uid) != u.Uid || st.Mode&0o777 != 0o700 {
			t.Errorf("dlbd-prepare: /sys/fs/bpf/dlb: %v, uid %d mode %o", err, st.Uid, st.Mode&0o777)
		}
	} else {
		t.Log("/sys/fs/bpf/dlb exists already: dlbd-prepare's default and its purge are not checked")
	}

	// dlbd as user dlb with exactly the unit's capabilities.
	bounding, ambient := unitCaps(t, units[0])
	if !slices.Equal(bounding, ambient) || len(ambient) == 0 {
		t.Fatalf("dlbd.service: bounding set %v, ambient %v: want the same, non-empty", bounding, ambient)
	}
	var want uint64
	var setprivCaps []string
	for _, c := range ambient {
		n, ok := capNumbers[c]
		if !ok {
			t.Fatalf("dlbd.service names %s, unknown to this test", c)
		}
		want |= 1 << n
		setprivCaps = append(setprivCaps, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
	}
	t.Logf("dlbd.service capabilities: %v", ambient)
	l.startPackagedDlbd(u, strings.Join(setprivCaps, ","), "")
	caps := procCaps(t, l.dlbd.Process.Pid)
	if fmt.Sprint(caps["Uid"]) != u.Uid || caps["CapEff"] != want || caps["CapBnd"] != want || caps["CapAmb"] != want || caps["CapPrm"] != want {
		t.Fatalf("dlbd runs as uid %d with effective %#x, bounding %#x, ambient %#x; want uid %s and %#x", caps["Uid"], caps["CapEff"], caps["CapBnd"], caps["CapAmb"], u.Uid, want)
	}

	// MAC smoke test.
	l.configure("generic", 10, 10)
	r := l.mustLoad("-url", "http://"+l.vip()+"/", "-n", "1000", "-c", "20")
	t.Logf("MAC: %d of %d answered, per backend %v", r.OK, r.Requests, r.PerBackend)
	if r.OK != 1000 || r.PerBackend["b1"] == 0 || r.PerBackend["b2"] == 0 {
		t.Errorf("MAC: %d of 1000 answered (%v), per backend %v", r.OK, r.Errors, r.PerBackend)
	}
	// A server check: raw frames with CAP_NET_RAW only.
	if rep, code := l.serverCheck(1); code != 0 || !rep.OK {
		t.Errorf("server check under the unit's capabilities: exit %d: %+v", code, rep.Checks)
	}
	// NAT smoke test, on the same dlbd.
	l.mustCtl("cluster", "remove", l.vip())
	vip := l.startNAT(false, 2)
	l.checkNATTraffic(vip, l.env["LAB_RETURN_ADDR"], 500)

	// The pins are dlb's.
	var st syscall.Stat_t
	if err := syscall.Stat(l.pinDir, &st); err != nil || fmt.Sprint(st.Uid) != u.Uid {
		t.Errorf("pin directory %s: %v, uid %d", l.pinDir, err, st.Uid)
	}
	// A BGP speaker on its standard port.
	l.mustCtl("bgp", "set", "--asn", "65001", "--routerid", l.env["LAB_NFA"], "--listen-port", "179")
	l.mustCtl("bgp", "remove")
	// Nothing dlbd did needs more than the unit grants: not one error in
	// its log. (Following the host's netlink events once entered its own
	// network namespace again, which takes CAP_SYS_ADMIN, and dlbd fell
	// back to polling.)
	for _, line := range strings.Split(l.dlbdLog(), "\n") {
		switch {
		case strings.Contains(line, "level=ERROR"):
			t.Errorf("dlbd under the unit's capabilities logged an error: %s", line)
		case strings.Contains(line, "level=WARN"):
			t.Logf("dlbd under the unit's capabilities warned: %s", line)
		}
	}
	l.killDlbd(syscall.SIGTERM)

	// The unit's system call filter: every call dlbd makes, restarting on
	// the saved configuration (the NAT balancing above), probing, running
	// advisors and forwarding, is one the filter allows.
	trace := filepath.Join(l.pkgDir, "run", "strace")
	l.startPackagedDlbd(u, strings.Join(setprivCaps, ","), trace)
	// The restart adopts the pinned program through its pins alone
	// (opening a map by its id would take CAP_SYS_ADMIN).
	if log := l.dlbdLog(); !strings.Contains(log, "adopted the pinned executor program") {
		t.Errorf("the restart under the unit's capabilities did not adopt the pinned program:\n%s", log)
	}
	if rep, code := l.serverCheck(1); code != 0 || !rep.OK {
		t.Errorf("server check under strace: exit %d: %+v", code, rep.Checks)
	}
	l.mustCtl("advisor", "start", "http", vip+"@80", "--interval", "0.5")
	l.mustCtl("advisor", "start", "ping", vip+"@53", "--interval", "0.5")
	r = l.mustLoad("-url", "http://"+vip+"/", "-n", "100", "-c", "10")
	if r.OK != 100 {
		t.Errorf("under strace: %d of 100 answered: %v", r.OK, r.Errors)
	}
	time.Sleep(time.Second)
	// strace detaches on SIGTERM and leaves dlbd running: stop dlbd, and
	// strace ends with it.
	if err := syscall.Kill(tracee(t, l.dlbd.Process.Pid), syscall.SIGTERM); err != nil {
		t.Fatalf("stopping the traced dlbd: %v", err)
	}
	l.waitDlbd()
	used := tracedSyscalls(t, trace)
	allowed := unitSyscalls(t, units[0])
	var denied []string
	for _, sc := range used {
		if !allowed[sc] {
			denied = append(denied, sc)
		}
	}
	t.Logf("dlbd made %d distinct system calls, the unit's filter allows %d: %v", len(used), len(allowed), used)
	if len(denied) > 0 {
		t.Errorf("dlbd.service's SystemCallFilter would deny %v (used: %v)", denied, used)
	}

	// Purge: everything the package added is gone.
	mustRun(t, "dpkg", "--purge", "dlb")
	after := snapshot(t)
	for p := range after {
		if !before[p] {
			t.Errorf("left after the purge: %s", p)
		}
	}
	for p := range before {
		if !after[p] {
			t.Errorf("removed by the install and purge, but there before: %s", p)
		}
	}
	if _, err := user.Lookup("dlb"); err == nil {
		t.Error("user dlb left after the purge")
	}
	if _, err := user.LookupGroup("dlb"); err == nil {
		t.Error("group dlb left after the purge")
	}
}

// startPackagedDlbd starts the installed /usr/sbin/dlbd in the
// dispatcher's namespace as the service would run: as user u with exactly
// the capabilities caps (setpriv's form, "+bpf,+net_admin"), no new
// privileges, and the unit's mounts (unitMounts: a private /sys/fs/bpf
// holding only the pin directory, a read-only file system but for the
// state and runtime directories).
//
// With trace set, dlbd runs under "strace -f -o trace" (started by setpriv,
// so with the same identity and capabilities).
func (l *lab) startPackagedDlbd(u *user.User, caps, trace string) {
	l.t.Helper()
	dir := l.pkgDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "dlbo-pkg"); err != nil {
			l.t.Fatal(err)
		}
		l.t.Cleanup(func() { os.RemoveAll(dir) })
		l.pkgDir = dir
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	run := filepath.Join(dir, "run")
	for _, d := range []string{run, filepath.Join(dir, "state")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			l.t.Fatal(err)
		}
		if err := os.Chown(d, uid, gid); err != nil {
			l.t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		l.t.Fatal(err)
	}
	l.sock, l.state = filepath.Join(run, "dlbd.sock"), filepath.Join(dir, "state")
	hold := filepath.Join(dir, "pins")
	if err := os.MkdirAll(hold, 0o700); err != nil {
		l.t.Fatal(err)
	}
	// ExecStartPre=+/usr/lib/dlb/dlbd-prepare, for this test's pin dir.
	if out, err := exec.Command("/usr/lib/dlb/dlbd-prepare", l.pinDir, "dlb").CombinedOutput(); err != nil {
		l.t.Fatalf("dlbd-prepare: %v\n%s", err, out)
	}
	// The unit's mounts (unitMounts), then its identity and capabilities.
	args := []string{"--mount", "--propagation", "private", "--", "sh", "-ec", unitMounts, "sh", l.pinDir, hold, dir, l.state, run,
		"nsenter", "--net=/run/netns/" + l.env["LAB_DISPATCHER_NS"],
		"setpriv", "--reuid", "dlb", "--regid", "dlb", "--init-groups", "--no-new-privs",
		"--inh-caps=-all," + caps, "--ambient-caps=-all," + caps, "--bounding-set=-all," + caps}
	if trace != "" {
		args = append(args, "strace", "-f", "-qq", "-o", trace)
	}
	args = append(args, "/usr/sbin/dlbd", "--socket", l.sock, "--state-dir", l.state, "--pin-dir", l.pinDir,
		"--scripts-dir", "/etc/dlb/scripts", "--log-level", "debug")
	cmd := exec.Command("unshare", args...)
	l.dlbdN++
	logf, err := os.Create(filepath.Join(l.run, fmt.Sprintf("dlbd%d.log", l.dlbdN)))
	if err != nil {
		l.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		l.t.Fatalf("starting dlbd: %v", err)
	}
	logf.Close()
	l.dlbd = cmd
	// Stopped before the purge (registered earlier, so run later) even
	// when the test fails: userdel refuses while dlb runs a process.
	l.t.Cleanup(func() {
		if cmd.ProcessState == nil && cmd.Process.Signal(syscall.SIGTERM) == nil {
			l.dlbd = cmd
			l.waitDlbd()
		}
	})
	deadline := time.Now().Add(dlbdAnswerWait)
	for time.Now().Before(deadline) {
		if _, _, code := l.ctl("executor", "report", "-o", "json"); code == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(logf.Name())
	l.t.Fatalf("dlbd did not answer within %s:\n%s", dlbdAnswerWait, b)
}
