package backendsetup

import (
	"bytes"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/testutil"
)

func TestOptionsRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		o    Options
		want string
	}{
		{"no VIP", Options{}, "no cluster address"},
		{"loopback", Options{VIPs: []netip.Addr{netip.MustParseAddr("127.0.0.2")}}, "127.0.0.2"},
		{"multicast", Options{VIPs: []netip.Addr{netip.MustParseAddr("224.0.0.1")}}, "224.0.0.1"},
		{"unspecified", Options{VIPs: []netip.Addr{netip.MustParseAddr("::")}}, "::"},
		{"interface lo", Options{VIPs: []netip.Addr{netip.MustParseAddr("198.18.0.100")}, Interface: "lo"}, "--interface"},
		{"interface path", Options{VIPs: []netip.Addr{netip.MustParseAddr("198.18.0.100")}, Interface: "../x"}, "--interface"},
		{"no such interface", Options{VIPs: []netip.Addr{netip.MustParseAddr("198.18.0.100")}, Interface: "dlbonone", ProcSys: t.TempDir()}, "no such interface"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Nothing may be run or written: IP names a command that
			// does not exist, Root a directory that must stay empty.
			c.o.IP = "/nonexistent/ip"
			c.o.Root = t.TempDir()
			err := Setup(c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error naming %q", err, c.want)
			}
			if ents, _ := os.ReadDir(c.o.Root); len(ents) != 0 {
				t.Errorf("refused setup wrote %v", ents)
			}
		})
	}
}

// sysctls reads the ARP sysctls of the namespace the test runs in.
func sysctls(t *testing.T, devs ...string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, d := range devs {
		for _, n := range []string{"arp_ignore", "arp_announce"} {
			v, err := readSysctl("/proc/sys", "net/ipv4/conf/"+d+"/"+n)
			if err != nil {
				t.Fatal(err)
			}
			m[d+"."+n] = v
		}
	}
	return m
}

func loAddrs(t *testing.T) map[string]bool {
	t.Helper()
	have, err := loAddresses("ip")
	if err != nil {
		t.Fatal(err)
	}
	return have
}

func listFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	_ = filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			rel, _ := filepath.Rel(root, p)
			files = append(files, "/"+rel)
		}
		return nil
	})
	return files
}

// TestPrivilegedSetupAndUndo runs in a private network namespace (its own
// lo, its own net.ipv4.conf sysctls) with a temporary root for the files:
// setup adds the VIPs and sets the sysctls, a second setup changes
// nothing, --persist writes the boot files, and undo restores exactly the
// state before, leaving alone what was there already.
func TestPrivilegedSetupAndUndo(t *testing.T) {
	testutil.RequirePrivileged(t)
	testutil.InNewNetNS(t)
	if out, err := exec.Command("ip", "link", "add", "dlbo0", "type", "veth", "peer", "name", "dlbo1").CombinedOutput(); err != nil {
		t.Fatalf("adding a veth pair: %v: %s", err, out)
	}
	// Already there before: an address on lo and one sysctl at its value.
	if out, err := exec.Command("ip", "addr", "add", "198.18.0.101/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := writeSysctl("/proc/sys", "net/ipv4/conf/lo/arp_ignore", "1"); err != nil {
		t.Fatal(err)
	}
	devs := []string{"all", "lo", "dlbo0"}
	before, beforeAddrs := sysctls(t, devs...), loAddrs(t)
	root := t.TempDir()
	vips := []netip.Addr{netip.MustParseAddr("198.18.0.100"), netip.MustParseAddr("198.18.0.101"), netip.MustParseAddr("2001:2::100")}

	var out bytes.Buffer
	o := Options{VIPs: vips, Interface: "dlbo0", Persist: true, Root: root, Out: &out}
	if err := Setup(o); err != nil {
		t.Fatalf("setup: %v\n%s", err, out.String())
	}
	t.Logf("setup:\n%s", out.String())
	for k, v := range sysctls(t, devs...) {
		want := map[bool]string{true: "1", false: "2"}[strings.HasSuffix(k, "arp_ignore")]
		if v != want {
			t.Errorf("%s = %s after setup, want %s", k, v, want)
		}
	}
	have := loAddrs(t)
	for _, p := range []string{"198.18.0.100/32", "198.18.0.101/32", "2001:2::100/128"} {
		if !have[p] {
			t.Errorf("%s not on lo after setup (%v)", p, have)
		}
	}
	unit, err := os.ReadFile(filepath.Join(root, UnitFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ip addr replace 198.18.0.100/32 dev lo\n", "ip addr replace 198.18.0.101/32 dev lo\n", "ip addr replace 2001:2::100/128 dev lo nodad\n"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("unit lacks %q:\n%s", want, unit)
		}
	}
	sc, err := os.ReadFile(filepath.Join(root, SysctlFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"net.ipv4.conf.all.arp_ignore = 1\n", "net.ipv4.conf.lo.arp_announce = 2\n", "net.ipv4.conf.dlbo0.arp_ignore = 1\n"} {
		if !strings.Contains(string(sc), want) {
			t.Errorf("sysctl.d file lacks %q:\n%s", want, sc)
		}
	}
	if dst, err := os.Readlink(filepath.Join(root, WantsLink)); err != nil || dst != UnitFile {
		t.Errorf("unit not enabled: %q, %v", dst, err)
	}
	if out, err := exec.Command("systemd-analyze", "verify", "--man=no", filepath.Join(root, UnitFile)).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze verify of the unit: %v\n%s", err, out)
	}

	// Idempotent: a second run changes nothing and records nothing new.
	rec1, _ := os.ReadFile(filepath.Join(root, RecordFile))
	out.Reset()
	if err := Setup(o); err != nil {
		t.Fatalf("second setup: %v", err)
	}
	rec2, _ := os.ReadFile(filepath.Join(root, RecordFile))
	if !bytes.Equal(rec1, rec2) {
		t.Errorf("second setup changed the record:\n%s\n->\n%s", rec1, rec2)
	}
	if strings.Contains(out.String(), "added") || strings.Contains(out.String(), "->") {
		t.Errorf("second setup changed something:\n%s", out.String())
	}

	// Undo one VIP: only it goes, the files follow.
	out.Reset()
	if err := Undo(Options{VIPs: vips[:1], Root: root, Out: &out}); err != nil {
		t.Fatalf("undo 198.18.0.100: %v", err)
	}
	if have := loAddrs(t); have["198.18.0.100/32"] || !have["2001:2::100/128"] {
		t.Errorf("after undoing one VIP, lo has %v", have)
	}
	unit, _ = os.ReadFile(filepath.Join(root, UnitFile))
	if strings.Contains(string(unit), "198.18.0.100/") || !strings.Contains(string(unit), "2001:2::100/128") {
		t.Errorf("unit after undoing one VIP:\n%s", unit)
	}

	// Undo the rest: exactly the state before, no file left.
	out.Reset()
	if err := Undo(Options{VIPs: vips, Root: root, Out: &out}); err != nil {
		t.Fatalf("undo: %v\n%s", err, out.String())
	}
	t.Logf("undo:\n%s", out.String())
	after, afterAddrs := sysctls(t, devs...), loAddrs(t)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s = %s after undo, was %s before setup", k, after[k], v)
		}
	}
	if len(afterAddrs) != len(beforeAddrs) {
		t.Errorf("lo has %v after undo, had %v before setup", afterAddrs, beforeAddrs)
	}
	for p := range beforeAddrs {
		if !afterAddrs[p] {
			t.Errorf("undo removed %s, which was on lo before setup", p)
		}
	}
	if files := listFiles(t, root); len(files) != 0 {
		t.Errorf("files left after undo: %v", files)
	}
}
