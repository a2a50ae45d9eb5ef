package dispatcher

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher/events"
	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestStatusFacts: a snapshot counts applied changes (a refused one does
// not count), says when the last was applied, times the manager's latest
// cycle, says when the executor was last swept, and counts and lists the
// events raised.
func TestStatusFacts(t *testing.T) {
	h, fp, _ := newManagedHarness(t)
	st := h.status(Query{})
	if st.Changes != 0 || st.LastChange.IsZero() || st.LastChange.After(st.Now) {
		t.Fatalf("fresh engine: %d changes, last %v (now %v)", st.Changes, st.LastChange, st.Now)
	}
	loaded := st.LastChange
	time.Sleep(5 * time.Millisecond)
	base(h)
	st = h.status(Query{})
	if st.Changes != 1 || !st.LastChange.After(loaded) {
		t.Errorf("after one change: %d changes, last %v (loaded %v)", st.Changes, st.LastChange, loaded)
	}
	if !st.Executor.SweptAt.IsZero() {
		t.Error("a sweep time is reported, but no sweep ran")
	}
	// A restarted engine sweeps the executor it restores at once, and
	// counts changes afresh.
	h.restart()
	st = h.status(Query{})
	if st.Executor.SweptAt.IsZero() || st.Changes != 0 {
		t.Errorf("after a restart: swept at %v, %d changes", st.Executor.SweptAt, st.Changes)
	}
	if err := h.apply(op("port", "add", vip+"@80")); err == nil {
		t.Fatal("adding an existing port was accepted")
	}
	if st2 := h.status(Query{}); st2.Changes != st.Changes || !st2.LastChange.Equal(st.LastChange) {
		t.Errorf("a refused change counted: %d changes, last %v", st2.Changes, st2.LastChange)
	}

	start := op("advisor", "start", "@80")
	start.Params = append(start.Params, config.P("advisor", "connect"), config.P("interval", "0.1"), config.P("fall", "1"))
	set := op("manager", "set", "")
	set.Params = append(set.Params, config.P("interval", "0.1"))
	h.mustApply(start, set, op("manager", "start", ""))
	fp.set(s2Addr, true, 0)
	eventually(t, "serverDown raised and listed", func() bool {
		st := h.status(Query{})
		if st.EventCounts[events.ServerDown] != 1 || len(st.RecentEvents) == 0 {
			return false
		}
		last := st.RecentEvents[len(st.RecentEvents)-1]
		return last.Name == events.ServerDown && last.Env["DLB_SERVER"] == s2Addr.String() && !last.At.IsZero()
	})
	eventually(t, "a timed manager cycle", func() bool {
		st := h.status(Query{})
		return st.ManagerCycles > 0 && st.ManagerCycle > 0 && st.ManagerCycle < time.Second
	})
	if st := h.status(Query{}); st.Changes != 1 {
		t.Errorf("one change after the restart, %d counted", st.Changes)
	}
}

// The executor's interface down (set down, or its carrier lost) is a
// warning of the report while it lasts: the executor is still attached,
// and the servers' lookups fail for it.
func TestInterfaceDownWarned(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	down := func(b bool) {
		h.nif.mu.Lock()
		defer h.nif.mu.Unlock()
		h.nif.linkDown = b
	}
	const key = "interface eth0 is down"
	if w := h.executorWarnings(key); len(w) != 0 {
		t.Errorf("warnings with the interface up: %q", w)
	}
	down(true)
	want := "interface eth0 is down (set down, or without carrier): the executor receives nothing and sends nothing until it is up " +
		"(ip link set eth0 up; a cable, the switch port)"
	if w := h.executorWarnings(key); len(w) != 1 || w[0] != want {
		t.Errorf("warnings with the interface down: %q; want %q", w, want)
	}
	down(false)
	if w := h.executorWarnings(key); len(w) != 0 {
		t.Errorf("warnings with the interface up again: %q", w)
	}
}

// TestNativeRefusedWarned: an executor asked for auto mode that the
// interface refused in native mode runs in generic mode, and the log and
// the report say so and why; asked for generic mode, it is not warned of.
func TestNativeRefusedWarned(t *testing.T) {
	var logs testutil.LogBuffer
	h := newHarnessWith(t, t.TempDir(), logTo(&logs, true))
	h.dp.nativeRefused = errors.New("native mode: operation not supported")
	h.mustApply(op("executor", "start", "", "interface", "eth0"))
	const key = "refused native mode"
	want := "the executor runs in generic XDP mode, several times slower, because eth0 refused native mode (native mode: operation not supported): " +
		"use a driver with native XDP, or ask for generic mode (dlbctl executor start --xdp-mode generic)"
	if w := h.executorWarnings(key); len(w) != 1 || w[0] != want {
		t.Errorf("warnings in auto mode, native refused: %q; want %q", w, want)
	}
	if !strings.Contains(logs.String(), `msg="the executor runs in generic XDP mode: the interface refused native mode`) ||
		!strings.Contains(logs.String(), `native="native mode: operation not supported"`) {
		t.Errorf("not logged:\n%s", logs.String())
	}
	h.mustApply(op("executor", "start", "", "xdp-mode", "generic"))
	if w := h.executorWarnings(key); len(w) != 0 {
		t.Errorf("warnings in generic mode asked for: %q", w)
	}
}

// While the executor's interface does not exist, the reports say so
// (detached) and the NAT route check, which reads the interface's
// forwarding setting, logs nothing at every report.
func TestNATRouteCheckQuietWithoutInterface(t *testing.T) {
	var logs testutil.LogBuffer
	h := newHarnessWith(t, t.TempDir(), logTo(&logs, true))
	base(h)
	h.mustApply(natPortOps()...)
	h.nif.setIfindex(0)
	h.dp.sever()
	h.nif.events <- lb.NetEvent{Kind: lb.NetLinkRemoved, Ifindex: 2, Ifname: "eth0"}
	eventually(t, "detached", func() bool { return h.status(Query{}).Executor.Detached != "" })
	for range 3 {
		h.executorWarnings("")
	}
	if strings.Contains(logs.String(), "checking whether NAT replies can be routed") {
		t.Errorf("the NAT route check logged with the interface gone:\n%s", logs.String())
	}
}

// A configuration saved before dlb refused a reach target that is a
// cluster address loads, and the executor report says what to change.
func TestHAAddressProblemsWarned(t *testing.T) {
	vip := netip.MustParseAddr("198.18.0.100")
	cfg := lb.Config{Clusters: []lb.Cluster{{Address: vip}},
		HA: lb.HighAvailability{Role: lb.RolePrimary, Recovery: lb.RecoveryAuto, Port: 7000, Reach: []netip.Addr{vip}}}
	w := haAddressProblems(cfg)
	if len(w) != 1 || !strings.Contains(w[0], "198.18.0.100 is a cluster address") || !strings.Contains(w[0], "accepted before dlb checked it") {
		t.Errorf("warnings %q", w)
	}
	cfg.HA.Reach = []netip.Addr{netip.MustParseAddr("198.18.0.254")}
	if w := haAddressProblems(cfg); len(w) != 0 {
		t.Errorf("warnings for a router as reach target: %q", w)
	}
}
