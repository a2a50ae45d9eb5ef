package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/api"
)

// checkClient is the client address the server checks probe from: in the
// lab's subnet, held by no host (the dispatcher answers ARP for it while it
// probes).
const checkClient = "198.18.0.99"

// serverCheck runs "dlbctl server check" on backend i and returns the
// report and the exit code.
func (l *lab) serverCheck(i int) (api.ServerCheckReport, int) {
	l.t.Helper()
	out, errOut, code := l.ctl("server", "check", fmt.Sprintf("%s@80@%s", l.vip(), l.backend(i)), "--client", checkClient, "-o", "json")
	var r api.ServerCheckReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		l.t.Fatalf("server check b%d: exit %d: %v\n%s%s", i, code, err, out, errOut)
	}
	return r, code
}

func checkResults(r api.ServerCheckReport) map[string]string {
	m := map[string]string{}
	for _, c := range r.Checks {
		m[c.Name] = c.Result
	}
	return m
}

// TestPrivilegedE2EServerCheck checks, from the dispatcher, a correctly
// prepared backend and backends with one mistake each: each mistake fails
// the check that names it (and only that one), and after the fix the check
// prints, every check passes. The fixes for the missing alias and for
// arp_ignore are "dlbctl backend setup", run on the backend.
func TestPrivilegedE2EServerCheck(t *testing.T) {
	parallel(t)
	l := newLabPrefix(t, "dlbo", "-n", "6", "-c", "1")
	l.startDlbd()
	l.configure("generic", 10, 10, 10, 10, 10, 10)
	vip := l.vip()

	// b2: no alias. b3: answers ARP for the VIP. b4: the service listens
	// on the server's own address only. b5: rp_filter 1, with its route
	// to the client leaving by a second link (to the same switch).
	// b6: MTU 1400.
	l.mustNS("b2", "ip", "addr", "del", vip+"/32", "dev", "lo")
	l.mustNS("b3", "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=0", "net.ipv4.conf.lo.arp_ignore=0", "net.ipv4.conf.dlbeth0.arp_ignore=0",
		"net.ipv4.conf.all.arp_announce=0", "net.ipv4.conf.lo.arp_announce=0", "net.ipv4.conf.dlbeth0.arp_announce=0")
	if out, err := l.script("backend-stop", "b4").CombinedOutput(); err != nil {
		t.Fatalf("stopping b4's server: %v\n%s", err, out)
	}
	if out, err := l.script("backend-start", "b4", "-listen", l.backend(4)+":80").CombinedOutput(); err != nil {
		t.Fatalf("starting b4's server on its own address: %v\n%s", err, out)
	}
	asym, swPort := "dlbo-asym", l.prefix+"-a5"
	if out, err := exec.Command("ip", "link", "add", asym, "netns", l.env["LAB_B5_NS"], "type", "veth",
		"peer", "name", swPort, "netns", l.env["LAB_SWITCH_NS"]).CombinedOutput(); err != nil {
		t.Fatalf("adding b5's second link: %v\n%s", err, out)
	}
	l.mustNS("sw", "ip", "link", "set", swPort, "master", l.env["LAB_BRIDGE"], "up")
	l.mustNS("b5", "ip", "link", "set", asym, "up")
	l.mustNS("b5", "ip", "route", "add", checkClient+"/32", "dev", asym)
	l.mustNS("b5", "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=1", "net.ipv4.conf.dlbeth0.rp_filter=1")
	l.mustNS("b6", "ip", "link", "set", "dlbeth0", "mtu", "1400")

	all := []string{"arp-server", "arp-cluster", "accept", "reply-source", "mtu", "rp-filter"}
	want := map[int]map[string]string{
		1: {"arp-server": "pass", "arp-cluster": "pass", "accept": "pass", "reply-source": "pass", "mtu": "pass", "rp-filter": "pass"},
		2: {"arp-server": "pass", "arp-cluster": "pass", "accept": "fail", "reply-source": "skip", "mtu": "skip", "rp-filter": "skip"},
		3: {"arp-server": "pass", "arp-cluster": "fail", "accept": "pass", "reply-source": "pass", "mtu": "pass", "rp-filter": "pass"},
		4: {"arp-server": "pass", "arp-cluster": "pass", "accept": "fail", "reply-source": "pass", "mtu": "skip", "rp-filter": "pass"},
		5: {"arp-server": "pass", "arp-cluster": "pass", "accept": "pass", "reply-source": "pass", "mtu": "pass", "rp-filter": "fail"},
		6: {"arp-server": "pass", "arp-cluster": "pass", "accept": "pass", "reply-source": "pass", "mtu": "fail", "rp-filter": "pass"},
	}
	for i := 1; i <= 6; i++ {
		r, code := l.serverCheck(i)
		got := checkResults(r)
		for _, c := range r.Checks {
			t.Logf("b%d %-12s %-4s %s", i, c.Name, c.Result, c.Detail)
			if c.Result == api.CheckFail {
				t.Logf("b%d %-12s fix: %s", i, "", c.Fix)
				if c.Fix == "" {
					t.Errorf("b%d: %s failed without a fix", i, c.Name)
				}
			}
		}
		for _, n := range all {
			if got[n] != want[i][n] {
				t.Errorf("b%d: %s = %q, want %q", i, n, got[n], want[i][n])
			}
		}
		if wantOK := i == 1; r.OK != wantOK || (code == 0) != wantOK {
			t.Errorf("b%d: ok %v, exit %d; want ok %v", i, r.OK, code, wantOK)
		}
		if r.ServerMAC != l.env[fmt.Sprintf("LAB_B%d_MAC", i)] {
			t.Errorf("b%d: server MAC %q, want %q", i, r.ServerMAC, l.env[fmt.Sprintf("LAB_B%d_MAC", i)])
		}
	}

	// The fixes the checks print.
	record := t.TempDir()
	for _, b := range []string{"b2", "b3"} {
		l.mustNS(b, filepath.Join(binDir, "dlbctl"), "backend", "setup", vip, "--interface", "dlbeth0", "--root", filepath.Join(record, b))
	}
	if out, err := l.script("backend-stop", "b4").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := l.script("backend-start", "b4").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	l.mustNS("b5", "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=2", "net.ipv4.conf.dlbeth0.rp_filter=2")
	l.mustNS("b6", "ip", "link", "set", "dlbeth0", "mtu", "1500")
	for i := 1; i <= 6; i++ {
		r, code := l.serverCheck(i)
		if !r.OK || code != 0 {
			t.Errorf("b%d after the fix: exit %d, checks %+v", i, code, r.Checks)
		}
	}

	// A client address a host on the link holds (the lab's client): the
	// server answers that host, out of the dispatcher's sight, and the
	// reverse-path check says so instead of failing.
	client := strings.Fields(l.env["LAB_CLIENT_ADDRS"])[0]
	out, errOut, code := l.ctl("server", "check", fmt.Sprintf("%s@80@%s", vip, l.backend(1)), "--client", client, "-o", "json")
	var held api.ServerCheckReport
	if err := json.Unmarshal([]byte(out), &held); err != nil {
		t.Fatalf("server check with --client %s: exit %d: %v\n%s%s", client, code, err, out, errOut)
	}
	for _, c := range held.Checks {
		if c.Name == "rp-filter" && (c.Result != api.CheckSkip || !strings.Contains(c.Detail, "held by the host "+strings.Fields(l.env["LAB_CLIENT_MACS"])[0])) {
			t.Errorf("--client %s, held by the lab's client: rp-filter %s: %s", client, c.Result, c.Detail)
		}
	}
	if !held.OK || code != 0 {
		t.Errorf("--client %s: exit %d, checks %+v", client, code, held.Checks)
	}

	// And the prepared backends take real traffic through the VIP.
	res := l.mustLoad("-url", "http://"+vip+"/", "-n", "600", "-c", "10")
	if res.Failed != 0 {
		t.Errorf("after the fixes %d of %d requests failed: %v", res.Failed, res.Requests, res.Errors)
	}
	for i := 1; i <= 6; i++ {
		if res.PerBackend[fmt.Sprintf("b%d", i)] == 0 {
			t.Errorf("b%d answered none of %d requests: %v", i, res.OK, res.PerBackend)
		}
	}
}

// TestPrivilegedE2EServerCheckIPv6: "dlbctl server check" of an IPv6
// server, from the IPv6 NFA: a prepared backend passes every check but the
// reverse-path one (skipped: IPv6 has no rp_filter); one without the
// cluster address on its loopback fails the accept check with the fix
// (dlbctl backend setup), and passes again once the address is back.
func TestPrivilegedE2EServerCheckIPv6(t *testing.T) {
	parallel(t)
	l := newLabArgs(t, "-n", "2", "-c", "1", "-6")
	l.startDlbd()
	l.configure("generic", 10, 10)
	vip6 := l.configure6(2)
	check := func(i int) (api.ServerCheckReport, int) {
		t.Helper()
		out, errOut, code := l.ctl("server", "check", fmt.Sprintf("%s@80@%s", vip6, l.env[fmt.Sprintf("LAB_B%d_ADDR6", i)]), "-o", "json")
		var r api.ServerCheckReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("server check b%d: exit %d: %v\n%s%s", i, code, err, out, errOut)
		}
		return r, code
	}
	prepared := map[string]string{"arp-server": api.CheckPass, "arp-cluster": api.CheckPass, "accept": api.CheckPass,
		"reply-source": api.CheckPass, "mtu": api.CheckPass, "rp-filter": api.CheckSkip}
	r, code := check(1)
	if got := checkResults(r); code != 0 || !maps.Equal(got, prepared) || r.Source != l.env["LAB_NFA6"] || r.ServerMAC != l.env["LAB_B1_MAC"] {
		t.Errorf("b1: exit %d, %v from %s, MAC %s; want exit 0, %v from %s, MAC %s", code, got, r.Source, r.ServerMAC,
			prepared, l.env["LAB_NFA6"], l.env["LAB_B1_MAC"])
	}
	l.mustNS("b2", "ip", "-6", "addr", "del", vip6+"/128", "dev", "lo")
	r, code = check(2)
	got := checkResults(r)
	t.Logf("b2 without the IPv6 cluster address: %v", got)
	if code != 1 || got["accept"] != api.CheckFail || got["arp-server"] != api.CheckPass {
		t.Errorf("b2 without the address: exit %d, %v; want exit 1, accept failed", code, got)
	}
	for _, c := range r.Checks {
		if c.Name == "accept" && !strings.Contains(c.Fix, "dlbctl backend setup "+vip6) {
			t.Errorf("accept's fix %q; want dlbctl backend setup %s", c.Fix, vip6)
		}
	}
	l.mustNS("b2", "ip", "-6", "addr", "add", vip6+"/128", "dev", "lo", "nodad")
	if r, code := check(2); code != 0 || !maps.Equal(checkResults(r), prepared) {
		t.Errorf("b2 with the address back: exit %d, %v", code, checkResults(r))
	}
}
