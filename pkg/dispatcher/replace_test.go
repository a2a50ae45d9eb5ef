package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
)

func (h *harness) replace(next lb.Config, dryRun bool) (lb.Config, error) {
	h.t.Helper()
	return h.e.Replace(context.Background(), next, dryRun)
}

// backendIDs maps cluster@port@server to the backend id the executor
// holds for it.
func backendIDs(dp *lb.Dataplane) map[string]uint32 {
	svc := map[uint32]lb.ServiceKey{}
	for _, s := range dp.Services {
		svc[s.ID] = lb.ServiceKey{Cluster: s.Cluster, Port: s.Port}
	}
	out := map[string]uint32{}
	for _, b := range dp.Backends {
		out[lb.BackendKey{Service: svc[b.Service], Server: b.Address}.String()] = b.ID
	}
	return out
}

// TestReplaceMakesTheConfiguration: Replace makes the configuration
// equal to the one given, as one journaled change that survives a
// restart, and leaves what it does not change alone: the servers it keeps
// keep their ids, and the executor is written only the ports that
// changed.
func TestReplaceMakesTheConfiguration(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	before := h.config()
	idsBefore := backendIDs(h.dp.state())

	next := before.Clone()
	cl := next.Cluster(netip.MustParseAddr(vip))
	p80 := cl.Port(80)
	p80.Servers = []lb.Server{*p80.Server(s1), {Address: s3, Weight: 7}} // .22 removed, .23 added
	add := lb.NewCluster(netip.MustParseAddr(vip2))
	add.Ports = []lb.Port{lb.NewPort(8080)}
	add.Ports[0].Servers = []lb.Server{{Address: s2, Weight: 3}}
	next.Clusters = append(next.Clusters, add)
	next.Sort()

	h.dp.mu.Lock()
	h.dp.updated = nil
	h.dp.mu.Unlock()
	old, err := h.replace(next, false)
	if err != nil {
		t.Fatal(err)
	}
	if !config.Diff(old, before).Empty() {
		t.Error("Replace did not return the configuration it replaced")
	}
	if ch := config.Diff(h.config(), next); !ch.Empty() {
		t.Fatalf("configuration differs from the one given: %+v", ch)
	}
	ids := backendIDs(h.dp.state())
	for _, k := range []string{vip + "@80@198.18.0.21", vip + "@443@198.18.0.21", vip + "@443@198.18.0.22"} {
		if ids[k] == 0 || ids[k] != idsBefore[k] {
			t.Errorf("%s: id %d, was %d", k, ids[k], idsBefore[k])
		}
	}
	if _, ok := ids[vip+"@80@198.18.0.22"]; ok {
		t.Error("the removed server is still in the executor")
	}
	if ids[vip+"@80@198.18.0.23"] == 0 || ids[vip2+"@8080@198.18.0.22"] == 0 {
		t.Errorf("added servers missing from the executor: %v", ids)
	}
	// One update, of the ports that changed: 443 untouched.
	h.dp.mu.Lock()
	updates := h.dp.updated
	h.dp.mu.Unlock()
	if len(updates) != 1 {
		t.Fatalf("%d executor updates, want 1", len(updates))
	}
	for _, s := range updates[0].Services {
		if s.Cluster.String() == vip && s.Port == 443 {
			t.Error("port 443 did not change but was written")
		}
	}
	h.restart()
	if ch := config.Diff(h.config(), next); !ch.Empty() {
		t.Errorf("after a restart the configuration differs: %+v", ch)
	}
}

// TestReplaceNoChange: replacing the configuration by an equal one does
// nothing: no journal record, no executor write.
func TestReplaceNoChange(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	files, applies := stateFiles(t, h.dir), h.dp.applies
	if _, err := h.replace(h.config(), false); err != nil {
		t.Fatal(err)
	}
	if stateFiles(t, h.dir) != files || h.dp.applies != applies {
		t.Error("an equal configuration changed the state or the executor")
	}
}

// TestReplaceAllOrNothing: a configuration refused anywhere on the way
// (by the model, by the host, by the executor, by its capacity) changes
// nothing, even when most of it could have been applied; a dry run
// changes nothing either way.
func TestReplaceAllOrNothing(t *testing.T) {
	h := newHarnessWith(t, t.TempDir(), func(o *Options) { o.MaxBackends = 8 })
	base(h)
	h.nif.offLink[netip.MustParseAddr("198.18.9.9")] = true
	h.nif.src = netip.MustParseAddr("198.18.0.1") // the interface's own address

	// good adds three servers to port 80 and a port 8080 with one.
	good := func() lb.Config {
		c := h.config()
		cl := c.Cluster(netip.MustParseAddr(vip))
		cl.Ports[0].Servers = append(cl.Ports[0].Servers, lb.Server{Address: s3, Weight: 1},
			lb.Server{Address: netip.MustParseAddr("198.18.0.24"), Weight: 1})
		p := lb.NewPort(8080)
		p.Servers = []lb.Server{{Address: netip.MustParseAddr("198.18.0.25"), Weight: 1}}
		cl.Ports = append(cl.Ports, p)
		c.Sort()
		return c
	}
	cases := []struct {
		name  string
		edit  func(c *lb.Config)
		fail  func()
		field string
	}{
		{"a weight above the weightbound", func(c *lb.Config) { c.Clusters[0].Ports[2].Servers[0].Weight = 99 }, nil, "weight"},
		{"a server off link", func(c *lb.Config) {
			c.Clusters[0].Ports[2].Servers[0].Address = netip.MustParseAddr("198.18.9.9") // in place of .25: within --max-servers
		}, nil, "server"},
		{"a return address the host's own connections leave from", func(c *lb.Config) {
			p := &c.Clusters[0].Ports[2] // 8080, made a NAT port
			p.Method, p.Servers[0].ReturnAddress = lb.NAT, netip.MustParseAddr("198.18.0.1")
		}, nil, "returnaddress"},
		{"an unknown interface", func(c *lb.Config) { c.Executor.Interface = "nope0" }, nil, "interface"},
		{"an unknown advisor", func(c *lb.Config) {
			c.Advisors = []lb.Advisor{lb.NewAdvisor("gopher", netip.Addr{}, 80)}
		}, nil, "advisor"},
		{"more servers than the executor holds", func(c *lb.Config) {
			c.Clusters[0].Ports[1].Servers = append(c.Clusters[0].Ports[1].Servers, lb.Server{Address: s3, Weight: 1},
				lb.Server{Address: netip.MustParseAddr("198.18.0.26"), Weight: 1})
		}, nil, "server"},
		{"the executor fails", nil, func() { h.dp.failNext = errors.New("map full") }, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			next := good()
			if c.edit != nil {
				c.edit(&next)
			}
			beforeCfg, beforeFiles, beforeDP := h.config(), stateFiles(t, h.dir), h.dp.state()
			beforeAddrs, beforeEntries := fmt.Sprint(h.nif.addresses), h.nif.kernelEntries()
			check := func(what string) {
				t.Helper()
				if !reflect.DeepEqual(h.config(), beforeCfg) {
					t.Errorf("%s: the configuration changed", what)
				}
				if stateFiles(t, h.dir) != beforeFiles {
					t.Errorf("%s: the state files changed", what)
				}
				if !reflect.DeepEqual(h.dp.state(), beforeDP) {
					t.Errorf("%s: the executor's state changed", what)
				}
				if fmt.Sprint(h.nif.addresses) != beforeAddrs {
					t.Errorf("%s: the host's addresses changed", what)
				}
				if what == "dry run" && !slices.Equal(h.nif.kernelEntries(), beforeEntries) {
					t.Errorf("%s: neighbour entries %v left in the kernel, %v before", what, h.nif.kernelEntries(), beforeEntries)
				}
			}
			if c.fail == nil {
				// The refusals a dry run can find: all but the
				// executor's start on another interface.
				_, err := h.replace(next, true)
				check("dry run")
				if c.field != "interface" {
					if lb.FieldOf(err) != c.field {
						t.Errorf("dry run: error %v, want a refusal naming %q", err, c.field)
					}
				}
			} else {
				c.fail()
			}
			_, err := h.replace(next, false)
			if err == nil {
				t.Fatal("accepted")
			}
			var oe *config.OpError
			if !errors.As(err, &oe) || oe.Index != -1 {
				t.Errorf("error %T %v, want an *OpError of the whole batch", err, err)
			}
			if lb.FieldOf(err) != c.field {
				t.Errorf("error %v, want a refusal naming %q", err, c.field)
			}
			check("refused")
		})
	}

	// The good configuration itself: a dry run changes nothing, then it
	// applies.
	next := good()
	before, files := h.config(), stateFiles(t, h.dir)
	old, err := h.replace(next, true)
	if err != nil || !config.Diff(old, before).Empty() {
		t.Fatalf("dry run: %v", err)
	}
	if !reflect.DeepEqual(h.config(), before) || stateFiles(t, h.dir) != files {
		t.Fatal("a dry run changed something")
	}
	if _, err := h.replace(next, false); err != nil {
		t.Fatal(err)
	}
	if n := len(h.dp.state().Backends); n != 7 {
		t.Errorf("%d backends, want 7", n)
	}
}

// TestReplaceDryRunChecksMetrics: a dry run refuses what the change would
// refuse for the metric source ("apply --diff" said "would apply" to a
// file the apply then refused), changing nothing.
func TestReplaceDryRunChecksMetrics(t *testing.T) {
	h := newHarnessWith(t, t.TempDir(), func(o *Options) {
		o.CheckMetrics = func(lb.MetricServer, []string) error { return lb.Errorf("secretfile", "", "no secret file") }
	})
	base(h)
	before := h.config()
	next := before.Clone()
	next.Cluster(netip.MustParseAddr(vip)).Metrics = []string{"cpuload"}
	for _, dry := range []bool{true, false} {
		if _, err := h.replace(next, dry); lb.FieldOf(err) != "secretfile" {
			t.Errorf("dry run %v: %v, want the metric source's refusal", dry, err)
		}
		if !reflect.DeepEqual(h.config(), before) {
			t.Errorf("dry run %v: the configuration changed", dry)
		}
	}
}

// TestReplaceXDPModeKeepsTheTables: another XDP mode on the same
// interface attaches the executor again in it, its maps (the connection
// tables) kept, not removed with a stop and a start; a mode the kernel
// refuses is refused, the executor attached in its former one.
func TestReplaceXDPModeKeepsTheTables(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	cfg, err := h.e.Config(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode, want lb.XDPMode
		refused    bool
	}{
		{lb.XDPNative, lb.XDPNative, false},
		{lb.XDPGeneric, lb.XDPGeneric, false},
		{lb.XDPNative, lb.XDPGeneric, true},
	} {
		h.dp.mu.Lock()
		if tc.refused {
			h.dp.refuseMode = tc.mode
		}
		detaches := h.dp.detaches
		h.dp.mu.Unlock()
		next := cfg
		next.Executor.XDPMode = tc.mode
		_, err := h.replace(next, false)
		if tc.refused != (lb.FieldOf(err) == "xdp-mode") {
			t.Errorf("mode %s: %v, want refused %v", tc.mode, err, tc.refused)
		}
		h.dp.mu.Lock()
		removed, attached, n := h.dp.removed, h.dp.attached, h.dp.detaches-detaches
		h.dp.refuseMode = lb.XDPAuto
		h.dp.mu.Unlock()
		if removed || !attached || n != 1 {
			t.Errorf("mode %s: pins removed %v, attached %v, %d detaches; want the executor detached once and attached again, its pins kept",
				tc.mode, removed, attached, n)
		}
		if got := h.status(Query{}).Executor.AttachedMode; got != tc.want {
			t.Errorf("mode %s: attached in %s, want %s", tc.mode, got, tc.want)
		}
		if got, _ := h.e.Config(context.Background()); (got.Executor.XDPMode == tc.mode) == tc.refused {
			t.Errorf("mode %s: the configuration says %s", tc.mode, got.Executor.XDPMode)
		}
	}
}

// TestMoveInterfaceKeepsTheTables: executor start with another interface
// on a running executor attaches it there, its maps (the connection
// tables) kept and the cluster address moved with it; an interface that
// does not exist, or that the kernel refuses, is refused with the
// executor, its addresses and the configuration where they were; a
// change that fails after the move takes it back.
func TestMoveInterfaceKeepsTheTables(t *testing.T) {
	fastAnnouncements(t, 0, 10*time.Millisecond, 30*time.Millisecond, 60*time.Millisecond)
	guard := &fakeGuard{}
	h := newHarnessWith(t, t.TempDir(), func(o *Options) { o.Guard = guard })
	base(h)
	h.nif.mu.Lock()
	h.nif.second = "eth1"
	h.nif.mu.Unlock()
	vipAddr := netip.MustParseAddr(vip)
	check := func(when, ifname string, ifindex int) {
		t.Helper()
		h.dp.mu.Lock()
		removed, attached, at := h.dp.removed, h.dp.attached, h.dp.ifindex
		h.dp.mu.Unlock()
		h.nif.mu.Lock()
		on := h.nif.addresses[vipAddr]
		h.nif.mu.Unlock()
		if removed || !attached || at != ifindex || h.opens != 1 {
			t.Errorf("%s: pins removed %v, attached %v to ifindex %d, %d loads; want attached to %d, loaded once, pins kept",
				when, removed, attached, at, h.opens, ifindex)
		}
		if on != ifname {
			t.Errorf("%s: the cluster address is on %q, want %q", when, on, ifname)
		}
		if got := h.config().Executor.Interface; got != ifname {
			t.Errorf("%s: the configuration says %s, want %s", when, got, ifname)
		}
		if x := h.status(Query{}).Executor; x.Attachment.Ifindex != ifindex {
			t.Errorf("%s: the report says ifindex %d, want %d", when, x.Attachment.Ifindex, ifindex)
		}
	}
	start := func(ifname string, params ...string) config.Op {
		return op("executor", "start", "", append([]string{"interface", ifname}, params...)...)
	}

	// A move to an interface that is down would stop the forwarding.
	h.nif.mu.Lock()
	h.nif.secondDown = true
	h.nif.mu.Unlock()
	if err := h.apply(start("eth1")); lb.FieldOf(err) != "interface" || !strings.Contains(err.Error(), "eth1 is down") {
		t.Errorf("moving to eth1, down: %v, want refused", err)
	}
	// A file's dry run (apply --diff) says so too.
	moved := h.config()
	moved.Executor.Interface = "eth1"
	if _, err := h.replace(moved, true); lb.FieldOf(err) != "interface" || !strings.Contains(err.Error(), "eth1 is down") {
		t.Errorf("a dry run moving to eth1, down: %v, want refused", err)
	}
	check("after the move to eth1, down, refused", "eth0", 2)
	h.nif.mu.Lock()
	h.nif.secondDown = false
	h.nif.mu.Unlock()

	if err := h.apply(start("eth1")); err != nil {
		t.Fatalf("moving to eth1: %v", err)
	}
	check("moved to eth1", "eth1", 3)
	// The guard stays on eth0 a while (the segment may still send
	// there), told so before it moved to eth1.
	guard.mu.Lock()
	lingered, calls := slices.Clone(guard.lingered), slices.Clone(guard.calls)
	guard.mu.Unlock()
	if len(lingered) != 1 || lingered[0].ifname != "eth0" || lingered[0].d != guardLinger() ||
		len(calls) <= lingered[0].after || calls[lingered[0].after].ifname != "eth1" || calls[lingered[0].after-1].ifname != "eth0" {
		t.Errorf("guard lingering %+v, guard calls %+v: want eth0 kept for %v, asked before the guard moved to eth1", lingered, calls, guardLinger())
	}
	// The segment learns the cluster address's new MAC: announced now,
	// and again as after a takeover.
	announced := func() int {
		h.nif.mu.Lock()
		defer h.nif.mu.Unlock()
		return len(slices.DeleteFunc(slices.Clone(h.nif.announced), func(a netip.Addr) bool { return a != vipAddr }))
	}
	if n := announced(); n != 1 {
		t.Errorf("the cluster address was announced %d times at the move, want once", n)
	}
	eventually(t, "the cluster address announced again 3 times", func() bool { return announced() == len(announceAfter) })

	if err := h.apply(start("eth9")); lb.FieldOf(err) != "interface" {
		t.Errorf("moving to an interface that does not exist: %v, want refused", err)
	}
	check("after eth9 refused", "eth1", 3)

	// eth0 taken by another tool's XDP program meanwhile: refused before
	// the executor leaves eth1.
	h.nif.mu.Lock()
	h.nif.xdp = lb.XDPProgram{Attached: true, ID: 99, Mode: lb.XDPNative}
	h.nif.mu.Unlock()
	h.dp.mu.Lock()
	detaches := h.dp.detaches
	h.dp.mu.Unlock()
	if err := h.apply(start("eth0")); lb.FieldOf(err) != "interface" || !strings.Contains(err.Error(), "already runs XDP program 99") {
		t.Errorf("moving to eth0, taken by another program: %v, want refused naming it", err)
	}
	h.dp.mu.Lock()
	if h.dp.detaches != detaches {
		t.Errorf("the executor was detached from eth1 (%d times) for a move refused", h.dp.detaches-detaches)
	}
	h.dp.mu.Unlock()
	h.nif.mu.Lock()
	h.nif.xdp = lb.XDPProgram{}
	h.nif.mu.Unlock()
	check("after the move to eth0, taken, refused", "eth1", 3)

	h.dp.mu.Lock()
	h.dp.refuseMode = lb.XDPNative
	h.dp.mu.Unlock()
	if err := h.apply(start("eth0", "xdp-mode", "native")); lb.FieldOf(err) != "interface" || !strings.Contains(err.Error(), "mode refused") {
		t.Errorf("moving to eth0 in a mode the kernel refuses: %v, want refused with the kernel's words", err)
	}
	h.dp.mu.Lock()
	h.dp.refuseMode = lb.XDPAuto
	h.dp.failNext = errors.New("a map update failed")
	h.dp.mu.Unlock()
	check("after the refused attachment", "eth1", 3)

	if err := h.apply(start("eth0")); err == nil || !strings.Contains(err.Error(), "a map update failed") {
		t.Errorf("a move whose map update fails: %v, want refused", err)
	}
	check("after the move taken back", "eth1", 3)

	if err := h.apply(start("eth0")); err != nil {
		t.Fatalf("moving back to eth0: %v", err)
	}
	check("moved back to eth0", "eth0", 2)

	// Another XDP mode whose change fails after the executor was
	// attached in it: attached again in the former one.
	was := h.status(Query{}).Executor.AttachedMode
	h.dp.mu.Lock()
	h.dp.failNext = errors.New("a map update failed")
	h.dp.mu.Unlock()
	if err := h.apply(start("eth0", "xdp-mode", "native")); err == nil {
		t.Error("a mode change whose map update fails: applied")
	}
	if got := h.status(Query{}).Executor.AttachedMode; got != was || h.config().Executor.XDPMode == lb.XDPNative {
		t.Errorf("after a mode change taken back: attached in %s (was %s), configuration %s", got, was, h.config().Executor.XDPMode)
	}
	check("after the mode change taken back", "eth0", 2)
}

// TestRestartTakesBackAChangeNeverSaved: a dlbd stopped during a move
// (or a change of XDP mode), after the kernel took the executor there and
// before the change was saved, left it where the saved configuration does
// not put it. The next dlbd failed to start it ("attached to another
// interface") and left it forwarding, unmanaged, while high availability
// told the peer this dispatcher could not forward. It is put back where
// the saved configuration says, its tables kept, and what moved with it
// (the addresses, the guard) moves back.
func TestRestartTakesBackAChangeNeverSaved(t *testing.T) {
	fastAnnouncements(t, 0, 10*time.Millisecond)
	vipAddr := netip.MustParseAddr(vip)
	for _, tc := range []struct {
		name string
		// leave is where the stopped dlbd left the executor: an
		// interface index, and what the host reports of eth0's XDP.
		ifindex int
		xdp     lb.XDPProgram
		// found is the interface the restart found it on ("": none
		// taken back).
		found string
	}{
		{name: "moved to eth1", ifindex: 3, found: "eth1"},
		{name: "on eth0 in native mode", ifindex: 2, xdp: lb.XDPProgram{Attached: true, Mode: lb.XDPNative}, found: "eth0"},
		{name: "where it belongs", ifindex: 2, xdp: lb.XDPProgram{Attached: true, Mode: lb.XDPGeneric}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			guard := &fakeGuard{}
			h := newHarnessWith(t, t.TempDir(), func(o *Options) { o.Guard = guard })
			base(h)
			h.mustApply(op("executor", "start", "", "interface", "eth0", "xdp-mode", "generic"))
			h.stop()
			h.nif.mu.Lock()
			h.nif.second = "eth1"
			h.nif.xdp = tc.xdp
			if tc.ifindex == 3 {
				h.nif.addresses[vipAddr] = "eth1"
			}
			h.nif.announced = nil
			h.nif.mu.Unlock()
			h.dp.mu.Lock()
			h.dp.ifindex = tc.ifindex
			detaches := h.dp.detaches
			h.dp.mu.Unlock()
			guard.mu.Lock()
			guard.lingered = nil
			guard.mu.Unlock()

			h.start()
			x := h.status(Query{}).Executor
			if x.Err != "" || x.Attachment.Ifindex != 2 || x.AttachedMode != lb.XDPGeneric {
				t.Errorf("after the restart: executor error %q, attached to ifindex %d in %s; want eth0 (2) in generic",
					x.Err, x.Attachment.Ifindex, x.AttachedMode)
			}
			h.dp.mu.Lock()
			n, removed := h.dp.detaches-detaches, h.dp.removed
			h.dp.mu.Unlock()
			if want := map[bool]int{true: 1, false: 0}[tc.found != ""]; n != want || removed {
				t.Errorf("detached %d times, pins removed %v; want %d, pins kept", n, removed, want)
			}
			h.nif.mu.Lock()
			on, announced := h.nif.addresses[vipAddr], slices.Contains(h.nif.announced, vipAddr)
			h.nif.mu.Unlock()
			if on != "eth0" {
				t.Errorf("the cluster address is on %q, want eth0", on)
			}
			guard.mu.Lock()
			lingered := slices.Clone(guard.lingered)
			guard.mu.Unlock()
			if tc.found == "eth1" {
				if !announced {
					t.Error("the cluster address was not announced from eth0, back from eth1")
				}
				if len(lingered) != 1 || lingered[0].ifname != "eth1" {
					t.Errorf("guard lingering %+v, want on eth1 a while", lingered)
				}
			} else if len(lingered) != 0 {
				t.Errorf("guard lingering %+v, want none", lingered)
			}
		})
	}
}
