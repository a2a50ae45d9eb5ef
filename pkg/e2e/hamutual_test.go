package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPrivilegedHAMutual: mutual high availability (role both) in the HA
// lab. The IPv4 cluster's primaryhost is d1, the IPv6 cluster's d2: each
// serves its own and stands by for the other's. Then, with NAT
// keep-alive connections through the IPv6 cluster each time:
//   - d2's dlbd killed: d1 takes the IPv6 cluster over, d2 restarted
//     takes it back (recovery auto): none broken;
//   - the IPv6 cluster's primaryhost moved to d1, d1 changed first: the
//     router sends the cluster to d1 at once (d1 announces it; it kept
//     d2's MAC before), none broken;
//   - moved back to d2, d1 changed first (the connections are made
//     through d1 in between, when neither serves it by its
//     configuration): the router sends it to d2 at once, and none
//     broken (d1 sends the connections it made meanwhile; 50 of 50
//     broke before);
//   - d2's executor stopped and started again (servicing): d1 serves the
//     IPv6 cluster meanwhile, d2 takes it back once it has a full copy
//     again: none broken (50 of 50 broke when it took it back at once);
//   - d2's XDP mode changed to native and back (dlbctl apply): attached
//     again, its tables kept: none broken (50 of 50 when stopped and
//     started).
func TestPrivilegedHAMutual(t *testing.T) {
	parallel(t)
	h := newHAPair(t, "dlbh")
	d1, d2 := h.d[0], h.d[1]
	vip, vip6 := h.vip(), h.env["LAB_VIP6"]
	for _, d := range h.d {
		d.mustCtl("cluster", "set", vip, "--primaryhost", d1.addr)
		d.mustCtl("cluster", "set", vip6, "--primaryhost", d2.addr)
	}
	h.configureHA(d1, "both", d2.addr)
	h.configureHA(d2, "both", d1.addr)

	// serving says which dispatcher serves each cluster, by the groups
	// it reports active ("" for none, "both" when both do).
	serving := func(cluster string) string {
		var who []string
		for _, d := range h.d {
			for _, g := range d.status().Groups {
				if g.State == "active" && slices.Contains(g.Clusters, cluster) {
					who = append(who, d.ns)
				}
			}
		}
		switch len(who) {
		case 0:
			return ""
		case 1:
			return who[0]
		}
		return "both"
	}
	steady := func(owner6 *haDispatcher) time.Duration {
		t.Helper()
		return poll(t, 30*time.Second, vip+" served by d1 alone, "+vip6+" by "+owner6.ns+" alone, the configurations alike", func() bool {
			s1, s2 := d1.status(), d2.status()
			return serving(vip) == d1.ns && serving(vip6) == owner6.ns && s1.DigestMatch && s2.DigestMatch &&
				s1.Peer.Alive && s2.Peer.Alive && s1.Replication.Synced && s2.Replication.Synced
		})
	}
	// holds says whether the address is on the dispatcher's interface.
	holds := func(d *haDispatcher, a string) bool {
		out, _ := h.inNS(strings.TrimPrefix(d.ns, h.prefix), "ip", "-br", "addr", "show", "dev", h.env["LAB_IF"])
		return slices.Contains(strings.Fields(strings.ReplaceAll(out, "/", " ")), a)
	}
	steady(d2)
	for _, c := range []struct {
		d    *haDispatcher
		addr string
		want bool
	}{{d1, vip, true}, {d2, vip, false}, {d1, vip6, false}, {d2, vip6, true}} {
		if holds(c.d, c.addr) != c.want {
			t.Errorf("%s holds %s: %v, want %v", c.d.ns, c.addr, !c.want, c.want)
		}
	}
	url6 := "http://[" + vip6 + "]:81/"
	for _, u := range []string{"http://" + vip + ":81/", url6} {
		if r, err := h.load(context.Background(), "-url", u, "-n", "20", "-c", "5"); err != nil || r.OK != 20 {
			t.Errorf("%s: %v, %d of 20 answered: %v", u, err, r.OK, r.Errors)
		}
	}

	// keep runs 50 NAT keep-alive connections to the IPv6 cluster; the
	// function it returns ends them, and checks that none broke.
	keep := func(t *testing.T, name string) func() {
		t.Helper()
		finish := h.keepAlive(t, strings.ReplaceAll(name, " ", "-"), url6, 50)
		return func() {
			t.Helper()
			r, err := finish()
			t.Logf("%s: NAT keep-alive connections broken %d of %d (%d requests)", name, r.Broken, r.Connections, r.Requests)
			if err != nil || r.Connections != 50 || r.Broken != 0 {
				t.Errorf("%s: %v, %d of %d keep-alive connections broken: %v", name, err, r.Broken, r.Connections, r.Errors)
			}
		}
	}

	t.Run("dlbd killed and back", func(t *testing.T) {
		report := keep(t, "failover")
		d2.stop(syscall.SIGKILL)
		took := poll(t, 15*time.Second, "d1 serving "+vip6, func() bool { return serving(vip6) == d1.ns })
		time.Sleep(time.Second)
		d2.start()
		back := steady(d2)
		report()
		t.Logf("d1 served %s %v after d2's dlbd was killed; d2, restarted, served it again %v after its start",
			vip6, took.Round(time.Millisecond), back.Round(time.Millisecond))
	})

	// routerTo says whether the router sends the IPv6 cluster to d.
	routerTo := func(d *haDispatcher) func() bool {
		mac := d.mac(h.env["LAB_IF"])
		return func() bool {
			out, _ := h.inNS("r", "ip", "-6", "-br", "neigh", "show", vip6, "dev", h.env["LAB_ROUTER_IF"])
			return strings.Contains(out, mac)
		}
	}
	// The dispatcher that gains the cluster changed first: it serves it
	// beside the peer until the peer's change, and the router sends it
	// there at once (it announced it); without the announcement the
	// router kept the peer, which answered for the address.
	t.Run("cluster moved in first", func(t *testing.T) {
		steady(d2)
		report := keep(t, "moved, in first")
		d1.mustCtl("cluster", "set", vip6, "--primaryhost", d1.addr)
		moved := poll(t, 2*time.Second, "the router sending "+vip6+" to d1", routerTo(d1))
		d2.mustCtl("cluster", "set", vip6, "--primaryhost", d1.addr)
		steady(d1)
		report()
		t.Logf("the router sent %s to d1 %v after d1's change", vip6, moved.Round(time.Millisecond))
	})
	// The one that loses it changed first: until the other's change
	// neither serves it, and the router still sends it to the one that
	// lost it, whose executor forwards: the connections made meanwhile
	// are sent to the peer (they all broke before).
	t.Run("cluster moved out first", func(t *testing.T) {
		d1.mustCtl("cluster", "set", vip6, "--primaryhost", d2.addr)
		poll(t, 10*time.Second, vip6+" off d1", func() bool { return !holds(d1, vip6) })
		report := keep(t, "moved, out first")
		d2.mustCtl("cluster", "set", vip6, "--primaryhost", d2.addr)
		moved := poll(t, 2*time.Second, "the router sending "+vip6+" to d2", routerTo(d2))
		steady(d2)
		report()
		t.Logf("the router sent %s to d2 %v after d2's change", vip6, moved.Round(time.Millisecond))
	})
	// The way to service a dispatcher (README): its executor stopped,
	// the peer serves; started again, with empty tables, it takes its
	// clusters back only once the peer sent it a full copy again (it
	// took them back at once, and 50 of 50 broke).
	t.Run("executor stopped and started", func(t *testing.T) {
		steady(d2)
		report := keep(t, "executor stopped and started")
		d2.mustCtl("executor", "stop")
		took := poll(t, 10*time.Second, "d1 serving "+vip6, func() bool { return serving(vip6) == d1.ns })
		time.Sleep(time.Second)
		d2.mustCtl("executor", "start", "--interface", h.env["LAB_IF"], "--xdp-mode", "generic")
		back := steady(d2)
		report()
		t.Logf("d1 served %s %v after d2's executor stopped; d2 served it again %v after its executor started", vip6,
			took.Round(time.Millisecond), back.Round(time.Millisecond))
	})
	// Another XDP mode, applied to the active: the executor is attached
	// again in it, its tables kept (stopped and started again, it lost
	// them, served on, and 50 of 50 broke).
	t.Run("XDP mode changed", func(t *testing.T) {
		steady(d2)
		report := keep(t, "XDP mode changed")
		for _, mode := range []string{"native", "generic"} {
			cfg := d2.mustCtl("get", "-o", "yaml")
			if !strings.Contains(cfg, "xdp-mode: ") {
				t.Fatalf("no xdp-mode in the configuration:\n%s", cfg)
			}
			var lines []string
			for _, l := range strings.Split(cfg, "\n") {
				if k, _, ok := strings.Cut(l, "xdp-mode: "); ok {
					l = k + "xdp-mode: " + mode
				}
				lines = append(lines, l)
			}
			file := filepath.Join(h.run, "d2-"+mode+".yaml")
			if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
				t.Fatal(err)
			}
			d2.mustCtl("apply", "-f", file)
			out, _ := h.inNS("d2", "ip", "-d", "link", "show", "dev", h.env["LAB_IF"])
			if !strings.Contains(out, "prog/xdp") || strings.Contains(out, "xdpgeneric") != (mode == "generic") {
				t.Errorf("after the change to %s: %s", mode, out)
			}
			time.Sleep(500 * time.Millisecond)
		}
		report()
		if serving(vip6) != d2.ns {
			t.Errorf("%s served by %q after the changes, want d2", vip6, serving(vip6))
		}
	})
}
