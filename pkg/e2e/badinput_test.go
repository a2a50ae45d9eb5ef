package e2e

import (
	"encoding/hex"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
)

// dumpPinned reads every entry of the executor's configuration maps from
// their pins (not through dlbd), so that a refusal can be shown to have
// left the kernel exactly as it was.
func dumpPinned(t *testing.T, pinDir string) string {
	t.Helper()
	var lines []string
	for _, name := range []string{"vips", "backends", "maglev_tables", "config", "vip_filter", "tx_ports"} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, name), nil)
		if err != nil {
			t.Fatalf("loading pinned map %s: %v", name, err)
		}
		var k, v []byte
		it := m.Iterate()
		for it.Next(&k, &v) {
			if strings.Trim(string(v), "\x00") == "" {
				continue // unused array slot
			}
			lines = append(lines, fmt.Sprintf("%s %s=%s", name, hex.EncodeToString(k), hex.EncodeToString(v)))
		}
		if err := it.Err(); err != nil {
			t.Fatalf("reading pinned map %s: %v", name, err)
		}
		m.Close()
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestPrivilegedE2EBadInputs sends bad commands through dlbctl to a
// running dlbd: each is refused with a message naming the field and the
// right exit status, and the configuration and the pinned maps are
// unchanged afterwards.
func TestPrivilegedE2EBadInputs(t *testing.T) {
	parallel(t)
	l := newLab(t, 3)
	l.startDlbd()
	l.configure("generic", 10, 10, 10)
	vip, b1 := l.vip(), l.backend(1)

	cases := []struct {
		args  []string
		code  int    // 1: refused by dlbd, 2: usage error
		field string // must appear in the message
	}{
		{[]string{"port", "add", "198.18.0.199@80"}, 1, "cluster"},
		{[]string{"port", "add", vip + "@0"}, 1, "port"},
		{[]string{"port", "add", vip + "@65536"}, 1, "port"},
		{[]string{"server", "set", vip + "@80@" + b1, "--weight", "21"}, 1, "weight"},
		{[]string{"server", "add", vip + "@80@198.18.0.24", "--weight", "-1"}, 1, "weight"},
		{[]string{"cluster", "add", l.env["LAB_NFA"]}, 1, "cluster"},
		{[]string{"executor", "set", "nfa", vip}, 1, "nfa"},
		{[]string{"server", "add", vip + "@80@" + vip}, 1, "server"},
		{[]string{"cluster", "add", vip}, 1, "cluster"},
		{[]string{"port", "add", vip + "@80"}, 1, "port"},
		{[]string{"server", "add", vip + "@80@" + b1}, 1, "server"},
		{[]string{"cluster", "add", "198.18.0.300"}, 1, "cluster"},
		{[]string{"server", "add", vip + "@80@198.18.0"}, 1, "server"},
		{[]string{"executor", "set", "nfa", "not-an-address"}, 1, "nfa"},
		{[]string{"server", "add", vip + "@81@" + b1}, 1, "port"},
		{[]string{"server", "down", vip + "@80@198.18.0.29"}, 1, "server"},
		{[]string{"port", "add", vip + "@81", "--protocol", "sctp"}, 1, "protocol"},
		{[]string{"port", "add", vip + "@81", "--method", "cbr"}, 1, "method"},
		{[]string{"server", "set", vip + "@80@" + b1, "--returnaddress", "198.18.0.3"}, 1, "returnaddress"},
		{[]string{"server", "set", vip + "@80@" + b1, "--mapport", "70000"}, 1, "mapport"},
		{[]string{"port", "set", vip + "@80", "--stickymask", "33"}, 1, "stickymask"},
		{[]string{"port", "set", vip + "@80", "--crossport", "443", "--stickytime", "60"}, 1, "crossport"},
		{[]string{"port", "set", vip + "@80", "--selectionalgorithm", "random"}, 1, "selectionalgorithm"},
		{[]string{"port", "set", vip + "@80", "--maxhalfopen", "-1"}, 1, "maxhalfopen"},
		{[]string{"executor", "set", "clientgateway", "198.18.9.9"}, 1, "clientgateway"},
		{[]string{"server", "add", vip + "@80@2001:2::21"}, 1, "server"},
		{[]string{"port", "set", vip + "@80", "--weightbound", "0"}, 1, "weightbound"},
		{[]string{"port", "set", vip + "@80", "--weightbound", "5"}, 1, "weight"},
		{[]string{"port", "set", vip + "@80", "--staletimeout", "0"}, 1, "staletimeout"},
		{[]string{"executor", "set", "fintimeout", "-5"}, 1, "fintimeout"},
		{[]string{"cluster", "add", "fe80::1"}, 1, "cluster"},
		{[]string{"server", "add", "@8080@" + b1}, 1, "port"},
		{[]string{"server", "add", vip + "@80@198.18.9.9"}, 1, "server"},
		{[]string{"server", "add", vip + "@80@127.0.0.1"}, 1, "server"},
		{[]string{"server", "add", vip + "@80@224.0.0.1"}, 1, "server"},
		{[]string{"executor", "start", "--interface", "nope0"}, 1, "interface"},
		{[]string{"server", "set", vip + "@80@" + b1, "--weight", "abc"}, 2, "weight"},
		{[]string{"port", "add"}, 2, "arg"},
		{[]string{"server", "bogus", vip + "@80@" + b1}, 2, "bogus"},
	}
	cfgBefore := configView(t, l)
	mapsBefore := dumpPinned(t, l.pinDir)
	if !strings.Contains(mapsBefore, "vips ") || !strings.Contains(mapsBefore, "backends ") {
		t.Fatalf("the pinned maps look empty:\n%s", mapsBefore)
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			_, stderr, code := l.ctl(c.args...)
			if code != c.code {
				t.Errorf("exit %d, want %d (%s)", code, c.code, strings.TrimSpace(stderr))
			}
			if !strings.Contains(stderr, c.field) {
				t.Errorf("message %q does not name %q", strings.TrimSpace(stderr), c.field)
			}
			if got := configView(t, l); got != cfgBefore {
				t.Errorf("configuration changed:\n%s", got)
			}
			if got := dumpPinned(t, l.pinDir); got != mapsBefore {
				t.Errorf("pinned maps changed")
			}
		})
	}
	// And the dispatcher still forwards.
	if r := l.mustLoad("-url", "http://"+vip+"/", "-n", "300", "-c", "10"); r.Failed != 0 {
		t.Errorf("%d requests failed after the refusals", r.Failed)
	}
}
