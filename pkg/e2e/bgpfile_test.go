package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
)

// TestPrivilegedE2EBGPFile: two dispatchers configured only by
// configuration files ("dlbctl apply -f") peer with a router (FRR) and
// announce the VIP, which the router then reaches through both; "get |
// apply" changes nothing on a dlbd whose speaker runs; a file that turns
// the announcement off withdraws the VIP from the router; one without
// the bgp section removes the speaker; and the section put back brings
// the dispatcher back as a next hop. Everything goes through the real
// speaker (GoBGP) and a real router.
func TestPrivilegedE2EBGPFile(t *testing.T) {
	parallel(t)
	l := newLabPrefix(t, "dlbg", "-n", "2", "-c", "1", "-x", "2")
	router := &frr{}
	s := &scaleLab{lab: l, router: router}
	addrs := s.startDispatchers(2)
	routerAddr := l.env["LAB_ROUTER_ADDR"]

	// file is a dispatcher's configuration file: what every dispatcher
	// shares, and its own nfa and router id.
	file := func(d *dispatcherProc, announce, withBGP bool) string {
		var b strings.Builder
		fmt.Fprintf(&b, "executor:\n  started: true\n  interface: %s\n  xdp-mode: generic\n  nfa: %s\n", l.env["LAB_IF"], d.addr)
		fmt.Fprintf(&b, "clusters:\n  - address: %s\n    announce: %t\n    communities: ['%s:100']\n", s.vip(), announce, routerAS)
		fmt.Fprintf(&b, "    ports:\n      - port: 80\n        servers:\n          - {address: %s, weight: 10}\n          - {address: %s, weight: 10}\n",
			s.backend(1), s.backend(2))
		if withBGP {
			fmt.Fprintf(&b, "bgp:\n  asn: %s\n  routerid: %s\n  neighbors:\n    - address: %s\n      remote-as: %s\n      holdtime: %d\n",
				dispatchAS, d.addr, routerAddr, routerAS, holdTime)
		}
		return b.String()
	}
	apply := func(d *dispatcherProc, text string) string {
		t.Helper()
		path := filepath.Join(d.dir, "dlb.yaml")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return d.mustCtl("apply", "-f", path)
	}
	// The router first: each dispatcher's first attempt at its session
	// then finds it listening (a refused one is tried again 5 s later).
	router.start(t, l.env["LAB_ROUTER_NS"], routerAddr, addrs)
	for _, d := range s.ds {
		out := apply(d, file(d, true, true))
		for _, want := range []string{
			"+ bgp set --asn " + dispatchAS + " --routerid " + d.addr + "\n",
			"+ bgp neighbor add " + routerAddr + " --remote-as " + routerAS + "\n",
			"+ cluster add " + s.vip() + " --announce yes --community " + routerAS + ":100\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("dispatcher %d: apply printed no %q:\n%s", d.i, want, out)
			}
		}
	}
	took := s.waitHops("configured by files", 60*time.Second, addrs...)
	t.Logf("the router reaches the VIP through %v %v after the files were applied", s.nextHops(), took.Round(time.Millisecond))

	d1, d2 := s.ds[0], s.ds[1]
	// get | apply: nothing changes, the session stays up.
	got := d1.mustCtl("get")
	if !strings.Contains(got, "\nbgp:\n") || !strings.Contains(got, "    announce: true\n") {
		t.Fatalf("get printed no BGP settings:\n%s", got)
	}
	if out := apply(d1, got); out != "no changes\n" {
		t.Errorf("get | apply -f: %q, want no changes", out)
	}

	// The announcement off: the router drops the dispatcher.
	out := apply(d1, file(d1, false, true))
	if want := "~ cluster set " + s.vip() + " --announce no  # was announce yes\napplied 1 change: 1 changed\n"; out != want {
		t.Errorf("announce off: %q, want %q", out, want)
	}
	took = s.waitHops("announcement off", 10*time.Second, d2.addr)
	t.Logf("announce: false withdrew dispatcher 1 from the router in %v", took.Round(time.Millisecond))

	// No bgp section: the speaker goes.
	out = apply(d1, file(d1, true, false))
	if !strings.Contains(out, "- bgp remove\n") {
		t.Errorf("a file without bgp: %q, want a bgp remove", out)
	}
	var r api.BGPReport
	d1.report(&r, "bgp", "report")
	if r.Configured || r.Running || len(r.Neighbors) != 0 {
		t.Errorf("after a file without bgp the speaker is %+v", r)
	}
	if hops := s.nextHops(); len(hops) != 1 || hops[0] != d2.addr {
		t.Errorf("the router's next hops are %v, want only %s", hops, d2.addr)
	}

	// Put back: dispatcher 1 is a next hop again.
	apply(d1, file(d1, true, true))
	took = s.waitHops("bgp put back", 60*time.Second, addrs...)
	t.Logf("the bgp section put back: dispatcher 1 a next hop again in %v", took.Round(time.Millisecond))
	d1.report(&r, "bgp", "report")
	if !r.Running || len(r.Neighbors) != 1 || r.Neighbors[0].State != "established" || r.Neighbors[0].HoldTime != holdTime {
		t.Errorf("speaker %+v", r)
	}
}
