package scripts_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The commands deps.sh looks for, by set.
var (
	labCommands  = []string{"ip", "nsenter", "ethtool"}
	testCommands = []string{"dnsmasq", "python3", "openssl", "vsftpd", "exim4", "dovecot", "slapd", "systemd-analyze", "man", "strace", "adduser", "prometheus", "promtool", "chromium", "vtysh", "bird"}
)

// fakeAptGet records its arguments in $FAKE_APT_LOG, and on "install" also
// records what policy-rc.d answers (101: services held back). It fails when
// $FAKE_APT_FAIL names its first argument.
const fakeAptGet = `#!/bin/sh
echo "apt-get $*" >>"$FAKE_APT_LOG"
if [ "$1" = "${FAKE_APT_FAIL:-}" ]; then exit 100; fi
for a in "$@"; do
	if [ "$a" = install ]; then
		if [ -x "$DLB_POLICY_RC" ]; then "$DLB_POLICY_RC" x start; echo "policy $?" >>"$FAKE_APT_LOG"; else echo "policy none" >>"$FAKE_APT_LOG"; fi
	fi
done
exit 0
`

// depsRun is one run of deps.sh in a made-up machine.
type depsRun struct {
	set        string
	present    []string // commands that exist
	pop3       bool     // /usr/lib/dovecot/pop3 exists
	policy     string   // content of an existing policy-rc.d, "" for none
	aptFail    string   // "update" or "install" makes that apt-get call fail
	unprivUser bool     // run as nobody
}

type depsResult struct {
	code      int
	stderr    string
	aptLog    string
	policy    string // policy-rc.d afterwards; "" if absent
	policySet bool
}

func (r depsRun) do(t *testing.T) depsResult {
	t.Helper()
	// Not t.TempDir: its parent is private, and one case runs as nobody.
	dir, err := os.MkdirTemp("", "dlbdeps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	have := filepath.Join(dir, "have") // what the "machine" has
	fake := filepath.Join(dir, "fakebin")
	root := filepath.Join(dir, "root")
	for _, d := range []string{have, fake, filepath.Join(root, "usr/lib/dovecot"), filepath.Join(root, "usr/sbin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range r.present {
		write(t, filepath.Join(have, c), "#!/bin/sh\nexit 0\n", 0o755)
	}
	if r.pop3 {
		write(t, filepath.Join(root, "usr/lib/dovecot/pop3"), "", 0o755)
	}
	write(t, filepath.Join(fake, "apt-get"), fakeAptGet, 0o755)
	policy := filepath.Join(root, "usr/sbin/policy-rc.d")
	if r.policy != "" {
		write(t, policy, r.policy, 0o755)
	}
	log := filepath.Join(dir, "apt.log")
	write(t, log, "", 0o666)

	cmd := exec.Command("bash", "deps.sh", r.set)
	cmd.Env = []string{
		"PATH=" + fake + ":/usr/bin:/bin",
		"DLB_DEPS_PATH=" + have,
		"DLB_DEPS_ROOT=" + root,
		"DLB_POLICY_RC=" + policy,
		"FAKE_APT_LOG=" + log,
		"FAKE_APT_FAIL=" + r.aptFail,
	}
	if r.unprivUser {
		if os.Getuid() != 0 {
			t.Skip("running as another user needs root")
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	res := depsResult{stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		res.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(log)
	res.aptLog = string(b)
	if b, err := os.ReadFile(policy); err == nil {
		res.policy, res.policySet = string(b), true
	}
	return res
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// TestDeps runs scripts/deps.sh against a fake apt-get and a made-up set
// of installed commands: the fresh-machine conditions a newcomer meets
// (policy-rc.d present or absent, packages missing, not root).
func TestDeps(t *testing.T) {
	if os.Getuid() != 0 {
		// As a normal user every "missing" case is the not-root case.
		t.Log("not root: only the cases that need no install run")
	}
	const keep = "#!/bin/sh\n# the image's own\nexit 101\n"
	all := append(append([]string{}, labCommands...), testCommands...)
	tests := []struct {
		name       string
		run        depsRun
		wantCode   int
		wantApt    []string // substrings of the apt-get log, in order
		noApt      bool
		wantPolicy string // "" means: no policy-rc.d afterwards
		wantErr    string
		needRoot   bool
	}{
		{name: "lab: nothing missing, no policy-rc.d",
			run: depsRun{set: "lab", present: labCommands}, noApt: true},
		{name: "lab: nothing missing, policy-rc.d present",
			run: depsRun{set: "lab", present: labCommands, policy: keep}, noApt: true, wantPolicy: keep},
		{name: "test: nothing missing",
			run: depsRun{set: "test", present: all, pop3: true}, noApt: true},
		{name: "lab: ethtool missing, no policy-rc.d",
			run:     depsRun{set: "lab", present: []string{"ip", "nsenter"}},
			wantApt: []string{"apt-get update", "apt-get install -y -qq --no-install-recommends ethtool", "policy 101"}, needRoot: true},
		{name: "lab: ethtool missing, policy-rc.d present (the image's is kept)",
			run:     depsRun{set: "lab", present: []string{"ip", "nsenter"}, policy: keep},
			wantApt: []string{"apt-get update", "install -y -qq --no-install-recommends ethtool", "policy 101"}, wantPolicy: keep, needRoot: true},
		{name: "test: servers missing, policy-rc.d present",
			run:     depsRun{set: "test", present: labCommands, policy: keep},
			wantApt: []string{"apt-get update", "install -y -qq --no-install-recommends dnsmasq-base python3 openssl vsftpd exim4-daemon-light dovecot-imapd dovecot-pop3d slapd systemd man-db strace adduser prometheus chromium frr bird2", "policy 101"}, wantPolicy: keep, needRoot: true},
		{name: "test: only the pop3 module missing",
			run:     depsRun{set: "test", present: all},
			wantApt: []string{"install -y -qq --no-install-recommends dovecot-pop3d"}, needRoot: true},
		{name: "apt-get update fails: exit 1, our policy-rc.d removed",
			run:      depsRun{set: "lab", present: []string{"ip"}, aptFail: "update"},
			wantCode: 1, wantApt: []string{"apt-get update"}, wantErr: "apt-get update failed", needRoot: true},
		{name: "apt-get install fails: exit 1, the image's policy-rc.d kept",
			run:      depsRun{set: "lab", present: []string{"ip"}, aptFail: "install", policy: keep},
			wantCode: 1, wantApt: []string{"apt-get install"}, wantPolicy: keep, wantErr: "apt-get install util-linux ethtool failed", needRoot: true},
		{name: "not root and something missing: exit 1 naming the packages, no apt-get",
			run:      depsRun{set: "lab", present: []string{"ip"}, unprivUser: true},
			wantCode: 1, noApt: true, wantErr: "missing util-linux ethtool; run as root"},
		{name: "not root and nothing missing: exit 0",
			run: depsRun{set: "lab", present: labCommands, unprivUser: true}, noApt: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.needRoot && os.Getuid() != 0 {
				t.Skip("installing needs root")
			}
			res := tt.run.do(t)
			if res.code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", res.code, tt.wantCode, res.stderr)
			}
			if tt.noApt && res.aptLog != "" {
				t.Errorf("apt-get was called:\n%s", res.aptLog)
			}
			rest := res.aptLog
			for _, w := range tt.wantApt {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Errorf("apt-get log lacks %q (in order):\n%s", w, res.aptLog)
					break
				}
				rest = rest[i+len(w):]
			}
			if tt.wantPolicy == "" && res.policySet {
				t.Errorf("policy-rc.d left behind: %q", res.policy)
			}
			if tt.wantPolicy != "" && res.policy != tt.wantPolicy {
				t.Errorf("policy-rc.d is %q (present %v), want the original %q", res.policy, res.policySet, tt.wantPolicy)
			}
			if tt.wantErr != "" && !strings.Contains(res.stderr, tt.wantErr) {
				t.Errorf("stderr %q lacks %q", res.stderr, tt.wantErr)
			}
		})
	}
}

// TestDepsUsage: an unknown set is a usage error that installs nothing.
func TestDepsUsage(t *testing.T) {
	res := depsRun{set: "everything"}.do(t)
	if res.code != 2 || !strings.Contains(res.stderr, "usage: deps.sh lab|test") || res.aptLog != "" {
		t.Errorf("exit %d, stderr %q, apt %q", res.code, res.stderr, res.aptLog)
	}
}
