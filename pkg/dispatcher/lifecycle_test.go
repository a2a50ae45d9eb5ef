package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlbproject/dlb/advisors"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// logTo makes the harness's engine log to buf; slow makes the periodic
// checks (neighbour refresh, attachment, reprobes) rare, so that only
// events can explain what a test sees.
func logTo(buf io.Writer, slow bool) func(*Options) {
	return func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		if slow {
			o.TickInterval, o.ReprobeInterval = time.Hour, -1
		}
	}
}

func (n *fakeNetif) setIfindex(i int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ifindex = i
}

// setXDP sets the XDP program the interface reports.
func (n *fakeNetif) setXDP(p lb.XDPProgram) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.xdp = p
}

func (n *fakeNetif) setNoRoutes(b bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.noRoutes = b
}

func (n *fakeNetif) address(a netip.Addr) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ifname, ok := n.addresses[a]
	return ifname, ok
}

func (n *fakeNetif) dropAddress(a netip.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.addresses, a)
}

// TestPinnedExecutorWithoutState: dlbd starts with a state that does not
// start the executor (a new or lost state directory) beside a pinned one:
// it says so, and leaves it; with a state that starts it, nothing is said.
func TestPinnedExecutorWithoutState(t *testing.T) {
	for _, c := range []struct {
		name    string
		started bool
		pins    []string
		warned  bool
	}{
		{name: "pins, no state", pins: []string{"conns", "link", "prog"}, warned: true},
		{name: "no pins, no state"},
		{name: "pins, a state that starts it", started: true, pins: []string{"conns", "link", "prog"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs testutil.LogBuffer
			h := newHarnessWith(t, t.TempDir(), func(o *Options) {
				logTo(&logs, true)(o)
				o.Pins = func() ([]string, error) { return c.pins, nil }
				o.PinnedAttachment = func() (lb.Attachment, bool, error) {
					return lb.Attachment{Ifindex: 2, LinkID: 7, ProgramID: 8}, len(c.pins) > 0, nil
				}
			})
			h.nif.setXDP(lb.XDPProgram{Attached: true, ID: 8})
			from := 0
			if c.started {
				base(h)
				from = len(logs.String())
				h.restart()
			}
			warned := strings.Contains(logs.String()[from:], "an executor is pinned that the saved configuration does not start")
			if warned != c.warned {
				t.Errorf("warned %v, want %v:\n%s", warned, c.warned, logs.String())
			}
			// executor report says so too, for as long as it lasts.
			reported := slices.ContainsFunc(h.status(Query{Warnings: true}).Executor.Warnings, func(w string) bool {
				return strings.Contains(w, "an executor this configuration does not start is pinned, attached to eth0 (ifindex 2")
			})
			if reported != c.warned {
				t.Errorf("reported %v, want %v: %q", reported, c.warned, h.status(Query{Warnings: true}).Executor.Warnings)
			}
			h.dp.mu.Lock()
			removed := h.dp.removed
			h.dp.mu.Unlock()
			if removed {
				t.Error("the pinned executor was removed")
			}
		})
	}
}

// TestStartCutShortRemoved: an executor pinned and attached to no
// interface beside a saved configuration that does not start it but names
// its interface (an "executor start" that dlbd did not live to save) is
// removed when dlbd starts; one attached somewhere, or beside a new state
// directory, is left (and warned of).
func TestStartCutShortRemoved(t *testing.T) {
	for _, c := range []struct {
		name     string
		stopped  bool // the state stopped an executor (names its interface)
		attached bool
		removed  bool
	}{
		{name: "cut short", stopped: true, removed: true},
		{name: "attached", stopped: true, attached: true},
		{name: "a new state directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs testutil.LogBuffer
			removed := 0
			pins := []string{"config", "conns"}
			h := newHarnessWith(t, t.TempDir(), func(o *Options) {
				logTo(&logs, true)(o)
				o.Pins = func() ([]string, error) { return pins, nil }
				o.PinnedAttachment = func() (lb.Attachment, bool, error) {
					return lb.Attachment{Ifindex: 2, LinkID: 7, ProgramID: 8}, c.attached, nil
				}
				o.RemovePins = func() ([]string, error) { removed++; return pins, nil }
			})
			if c.stopped {
				base(h)
				h.mustApply(op("executor", "stop", ""))
			}
			removed = 0
			h.restart()
			if got := removed > 0; got != c.removed {
				t.Errorf("removed %v, want %v:\n%s", got, c.removed, logs.String())
			}
			said := strings.Contains(logs.String(), "removed the pins of an executor attached to no interface")
			if said != c.removed {
				t.Errorf("logged the removal %v, want %v", said, c.removed)
			}
		})
	}
}

// TestPinsDeletedUnderDlbd: the executor's pins are deleted while dlbd
// runs: within a tick it is pinned again, the pin directory locked again,
// and the log says so; with nothing deleted, nothing is said.
func TestPinsDeletedUnderDlbd(t *testing.T) {
	var logs testutil.LogBuffer
	pinLock := &fakeLock{held: true}
	h := newHarnessWith(t, t.TempDir(), func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		o.PinLock = pinLock
	})
	base(h)
	time.Sleep(100 * time.Millisecond) // ticks with nothing deleted
	if strings.Contains(logs.String(), "pins were deleted") || pinLock.renewed != 0 {
		t.Fatalf("pinned again with nothing deleted:\n%s", logs.String())
	}
	h.dp.mu.Lock()
	h.dp.repin = []string{"conns", "link", "prog"}
	h.dp.mu.Unlock()
	pinLock.mu.Lock()
	pinLock.held = false
	pinLock.mu.Unlock()
	eventually(t, "pinned again", func() bool {
		return strings.Contains(logs.String(), `msg="the executor's pins were deleted under dlbd; pinned again, so that a restart adopts it"`)
	})
	eventually(t, "the pin directory locked again", func() bool {
		pinLock.mu.Lock()
		defer pinLock.mu.Unlock()
		return pinLock.renewed == 1
	})
	if !strings.Contains(logs.String(), "pins=3") {
		t.Errorf("the warning does not count the pins:\n%s", logs.String())
	}
}

// TestPinsThatCannotBeMadeAgain: the executor cannot be pinned again
// (its pin directory bound in from the host and deleted there). The
// failure, the same each tick, is logged once, not each tick, and the
// executor report warns with the remedy while it lasts; once the pins
// are made again, both say so.
func TestPinsThatCannotBeMadeAgain(t *testing.T) {
	var logs testutil.LogBuffer
	h := newHarnessWith(t, t.TempDir(), logTo(&logs, false))
	base(h)
	h.dp.mu.Lock()
	h.dp.repinErr = errors.New("/sys/fs/bpf/dlb: the pin directory was deleted, and this dlbd cannot make it again")
	h.dp.mu.Unlock()
	const failed = `msg="pinning the executor again"`
	eventually(t, "the failure logged", func() bool { return strings.Contains(logs.String(), failed) })
	eventually(t, "the report's warning", func() bool { return len(h.executorWarnings("could not be pinned again")) == 1 })
	w := h.executorWarnings("could not be pinned again")[0]
	for _, want := range []string{"cannot make it again", "restart dlbd"} {
		if !strings.Contains(w, want) {
			t.Errorf("warning %q does not say %q", w, want)
		}
	}
	time.Sleep(20 * h.e.opts.TickInterval)
	if n := strings.Count(logs.String(), failed); n != 1 {
		t.Errorf("the same failure logged %d times in 20 ticks, want once:\n%s", n, logs.String())
	}
	h.dp.mu.Lock()
	h.dp.repinErr = nil
	h.dp.mu.Unlock()
	eventually(t, "pinned again", func() bool { return strings.Contains(logs.String(), `msg="the executor is pinned again"`) })
	if w := h.executorWarnings("could not be pinned again"); len(w) != 0 {
		t.Errorf("pinned again, the report still warns: %v", w)
	}
}

// TestInterfaceRecreatedTakenByAnotherProgram: the executor's interface
// is deleted and created again, and another tool attaches its XDP program
// to it first. The executor stays detached; its report says whose program
// is there and how to free the interface; the engine retries every tick
// without rewriting the maps each time or logging the same error again;
// once the program is gone, the executor attaches.
func TestInterfaceRecreatedTakenByAnotherProgram(t *testing.T) {
	var logs testutil.LogBuffer
	h := newHarnessWith(t, t.TempDir(), logTo(&logs, false))
	base(h)
	h.nif.setIfindex(0)
	h.dp.sever()
	h.nif.events <- lb.NetEvent{Kind: lb.NetLinkRemoved, Ifindex: 2, Ifname: "eth0"}
	eventually(t, "detached", func() bool { return h.status(Query{}).Executor.Detached != "" })
	h.dp.mu.Lock()
	wholes := h.dp.wholes
	h.dp.mu.Unlock()

	h.nif.setXDP(lb.XDPProgram{Attached: true, ID: 41, Mode: lb.XDPGeneric})
	h.dp.mu.Lock()
	h.dp.described = lb.XDPProgram{Name: "xdp_fw"}
	h.dp.occupied = fmt.Errorf("create link: %w", syscall.EBUSY) // as the kernel refuses
	h.dp.mu.Unlock()
	h.nif.setIfindex(7)
	h.nif.events <- lb.NetEvent{Kind: lb.NetLinkAdded, Ifindex: 7, Ifname: "eth0"}
	eventually(t, "the refusal reported", func() bool { return h.status(Query{}).Executor.Err != "" })
	time.Sleep(300 * time.Millisecond) // 15 ticks, each a retry
	st := h.status(Query{}).Executor
	for _, w := range []string{`eth0 already runs XDP program 41 ("xdp_fw") in generic mode, attached by another tool`,
		`"ip link set dev eth0 xdpgeneric off"`} {
		if !strings.Contains(st.Err, w) {
			t.Errorf("executor error %q\nlacks %q", st.Err, w)
		}
	}
	if st.Attached || st.Detached == "" {
		t.Errorf("executor status with another program on its interface: %+v", st)
	}
	h.dp.mu.Lock()
	again, ifindex := h.dp.wholes-wholes, h.dp.ifindex
	h.dp.mu.Unlock()
	if again != 0 || ifindex == 7 {
		t.Errorf("while the interface ran another program: %d writes of the whole state, attached to %d", again, ifindex)
	}
	errors, retries := strings.Count(logs.String(), `level=ERROR msg="re-attaching the executor"`),
		strings.Count(logs.String(), `level=DEBUG msg="re-attaching the executor"`)
	if errors != 1 || retries < 2 {
		t.Errorf("the refusal logged %d times as an error and %d as a retry; want once, then retries quietly", errors, retries)
	}

	h.nif.setXDP(lb.XDPProgram{})
	h.dp.mu.Lock()
	h.dp.occupied = nil
	h.dp.mu.Unlock()
	eventually(t, "re-attached once the program was gone", func() bool { return h.status(Query{}).Executor.Attached })
	if st := h.status(Query{}).Executor; st.Err != "" || st.Detached != "" || st.Attachment.Ifindex != 7 {
		t.Errorf("executor status after the other program went: %+v", st)
	}
}

// The executor's interface deleted: the report says detached, the event
// runs; an interface of that name created: the executor attaches to it,
// keeps its maps, reaches its servers through it and puts its addresses
// back on it. The maps name the new interface before the executor is
// attached to it, even while the routing table does not know it yet (its
// address is not back): a frame sent to the old index is lost. The guard,
// which went with the old interface, is put on the new one.
func TestInterfaceDeletedAndRecreated(t *testing.T) {
	var logs testutil.LogBuffer
	guard := &fakeGuard{}
	h := newHarnessWith(t, t.TempDir(), func(o *Options) { logTo(&logs, true)(o); o.Guard = guard })
	guard.mu.Lock()
	guard.nif = h.nif
	guard.mu.Unlock()
	base(h)
	if g, ok := guard.last(); !ok || g.ifindex != 2 || !slices.Contains(g.addrs, netip.MustParseAddr(vip)) {
		t.Fatalf("guard before the fault: %+v (called: %v)", g, ok)
	}
	v := netip.MustParseAddr(vip)
	applies := h.dp.applies

	h.nif.setIfindex(0)
	h.dp.sever()
	h.nif.dropAddress(v)
	h.nif.events <- lb.NetEvent{Kind: lb.NetLinkRemoved, Ifindex: 2, Ifname: "eth0"}
	eventually(t, "detached", func() bool { return h.status(Query{}).Executor.Detached != "" })
	st := h.status(Query{}).Executor
	if !strings.Contains(st.Detached, "eth0 was deleted") || st.DetachedSince.IsZero() || st.Attached {
		t.Errorf("executor status %+v", st)
	}
	if !strings.Contains(logs.String(), "event=executorDetached") {
		t.Error("no executorDetached event")
	}
	// Changes while detached are taken; addresses wait for the interface.
	cl2 := op("cluster", "add", vip2)
	cl2.Params = append(cl2.Params, config.P("configure", "yes"))
	h.mustApply(cl2)

	h.nif.setIfindex(7)
	h.nif.setNoRoutes(true)
	h.nif.events <- lb.NetEvent{Kind: lb.NetLinkAdded, Ifindex: 7, Ifname: "eth0"}
	eventually(t, "re-attached", func() bool { return h.status(Query{}).Executor.Detached == "" })
	h.dp.mu.Lock()
	stale, forgets, forgotAttached := h.dp.staleAtAttach, h.dp.forgets, h.dp.forgotAttached
	h.dp.mu.Unlock()
	if len(stale) > 0 {
		t.Errorf("backends %v still reached through the old interface when the executor was attached to the new one", stale)
	}
	if g, ok := guard.last(); !ok || g.ifindex != 7 || !slices.Contains(g.addrs, netip.MustParseAddr(vip)) {
		t.Errorf("guard after re-attaching: last told %+v, want the cluster address on the new interface (7)", g)
	}
	if forgets == 0 || forgotAttached > 0 {
		t.Errorf("NAT entries forgot their old hops %d times, %d of them with the executor attached; want before it", forgets, forgotAttached)
	}
	// The address comes back: the routing table confirms the guess.
	h.nif.setNoRoutes(false)
	h.nif.events <- lb.NetEvent{Kind: lb.NetAddressAdded, Ifindex: 7, Ifname: "eth0", Prefix: netip.MustParsePrefix("198.18.0.1/24")}
	st = h.status(Query{}).Executor
	if !st.Attached || st.Attachment.Ifindex != 7 || st.Err != "" {
		t.Errorf("executor status after the interface returned %+v", st)
	}
	if !strings.Contains(logs.String(), "event=executorAttached") || !strings.Contains(logs.String(), "pins=[link]") {
		t.Errorf("no executorAttached event or dropped pins logged:\n%s", logs.String())
	}
	if h.opens != 1 {
		t.Errorf("the executor was loaded %d times; re-attaching must keep it (and its maps)", h.opens)
	}
	if h.dp.applies <= applies {
		t.Error("nothing was written after re-attaching")
	}
	for _, b := range h.dp.state().Backends {
		if b.Ifindex != 7 || b.MAC == nil || !b.AcceptNew {
			t.Errorf("backend %d after re-attaching: %+v", b.ID, b)
		}
	}
	for _, a := range []netip.Addr{v, netip.MustParseAddr(vip2)} {
		if ifname, ok := h.nif.address(a); !ok || ifname != "eth0" {
			t.Errorf("cluster address %s not on the new interface: %v", a, h.nif.addresses)
		}
	}
	// The new interface may have another MAC: the addresses are
	// announced from it.
	h.nif.mu.Lock()
	announced := slices.Contains(h.nif.announced, v)
	h.nif.mu.Unlock()
	if !announced {
		t.Error("the cluster address was not announced from the new interface")
	}

	// Stopped while detached: it stops, and nothing is left to restore.
	h.nif.setIfindex(0)
	h.dp.sever()
	h.nif.events <- lb.NetEvent{Kind: lb.NetLinkRemoved, Ifindex: 7, Ifname: "eth0"}
	eventually(t, "detached again", func() bool { return h.status(Query{}).Executor.Detached != "" })
	h.mustApply(op("executor", "stop", ""))
	if st := h.status(Query{}).Executor; st.Loaded || st.Detached != "" {
		t.Errorf("executor status after stop: %+v", st)
	}
}

// A cluster removed while its interface is gone, before dlbd heard of it:
// its address went with the interface, and the interface created again
// does not get it back (the other cluster's does).
func TestClusterRemovedWhileInterfaceGone(t *testing.T) {
	h := newHarnessWith(t, t.TempDir(), logTo(io.Discard, true))
	base(h)
	cl2 := op("cluster", "add", vip2)
	cl2.Params = append(cl2.Params, config.P("configure", "yes"))
	h.mustApply(cl2)
	v, v2 := netip.MustParseAddr(vip), netip.MustParseAddr(vip2)
	if _, ok := h.nif.address(v2); !ok {
		t.Fatal("the second cluster's address was never put on")
	}

	h.nif.setIfindex(0)
	h.dp.sever()
	h.nif.dropAddress(v)
	h.nif.dropAddress(v2)
	h.mustApply(op("cluster", "remove", vip2))
	h.nif.events <- lb.NetEvent{Kind: lb.NetLinkRemoved, Ifindex: 2, Ifname: "eth0"}
	eventually(t, "detached", func() bool { return h.status(Query{}).Executor.Detached != "" })
	h.nif.setIfindex(7)
	h.nif.events <- lb.NetEvent{Kind: lb.NetLinkAdded, Ifindex: 7, Ifname: "eth0"}
	eventually(t, "re-attached", func() bool { return h.status(Query{}).Executor.Detached == "" })
	if _, ok := h.nif.address(v); !ok {
		t.Errorf("%s not back on the new interface", v)
	}
	if _, ok := h.nif.address(v2); ok {
		t.Errorf("%s, whose cluster was removed, put on the new interface", v2)
	}
}

// A dlbd started after its interface was deleted and created again while
// no dlbd ran: the pinned maps name the old interface's index, and the
// program's link went with the old interface (the executor is not
// adopted). The maps are rewritten, and the NAT entries forget their hops
// through the old interface, before the program is attached to the new
// one.
func TestStartAfterInterfaceRecreated(t *testing.T) {
	h := newHarnessWith(t, t.TempDir(), logTo(io.Discard, true))
	base(h)
	h.stop()
	h.dp.sever()
	h.nif.setIfindex(9)
	h.dp.mu.Lock()
	forgets := h.dp.forgets
	h.dp.mu.Unlock()
	h.start()
	eventually(t, "attached", func() bool { return h.status(Query{}).Executor.Attached })
	for _, b := range h.dp.state().Backends {
		if b.Ifindex != 9 || b.MAC == nil {
			t.Errorf("backend %d after the start: %+v, want reached through ifindex 9", b.ID, b)
		}
	}
	h.dp.mu.Lock()
	defer h.dp.mu.Unlock()
	if len(h.dp.staleAtAttach) > 0 {
		t.Errorf("backends %v still reached through the old interface when the executor was attached", h.dp.staleAtAttach)
	}
	if h.dp.forgets == forgets || h.dp.forgotAttached > 0 {
		t.Errorf("NAT entries forgot their old hops %d times, %d of them with the executor attached; want before it",
			h.dp.forgets-forgets, h.dp.forgotAttached)
	}
}

// A dlbd that starts while the interface is missing reports the executor
// detached and brings it up when the interface appears.
func TestStartWithoutInterface(t *testing.T) {
	var logs testutil.LogBuffer
	h := newHarnessWith(t, t.TempDir(), logTo(&logs, true))
	base(h)
	h.stop()
	h.nif.setIfindex(0)
	h.dp = &fakeDatapath{}
	h.start()
	eventually(t, "detached", func() bool { return h.status(Query{}).Executor.Detached != "" })
	if st := h.status(Query{}).Executor; st.Loaded || !strings.Contains(st.Detached, "eth0 does not exist") {
		t.Errorf("executor status %+v", st)
	}
	h.nif.setIfindex(4)
	h.nif.events <- lb.NetEvent{Kind: lb.NetLinkAdded, Ifindex: 4, Ifname: "eth0"}
	eventually(t, "started", func() bool { return h.status(Query{}).Executor.Attached })
	if st := h.status(Query{}).Executor; st.Detached != "" || st.Err != "" || st.Attachment.Ifindex != 4 {
		t.Errorf("executor status %+v", st)
	}
	if dp := h.dp.state(); dp == nil || len(dp.Backends) != 4 {
		t.Errorf("state not written: %+v", dp)
	}
}

// Addresses dlbd configured come back when the host loses them: removed
// by hand, or flushed by a down/up (IPv6 addresses are).
func TestConfiguredAddressesRestored(t *testing.T) {
	h := newHarnessWith(t, t.TempDir(), logTo(io.Discard, true))
	base(h)
	v := netip.MustParseAddr(vip)
	for _, ev := range []lb.NetEvent{
		{Kind: lb.NetAddressRemoved, Ifindex: 2, Ifname: "eth0", Prefix: netip.PrefixFrom(v, 32)},
		{Kind: lb.NetLinkUp, Ifindex: 2, Ifname: "eth0"},
	} {
		t.Run(ev.Kind.String(), func(t *testing.T) {
			h.nif.dropAddress(v)
			h.nif.events <- ev
			eventually(t, "address restored", func() bool { _, ok := h.nif.address(v); return ok })
		})
	}
	// An address dlbd took off itself stays off.
	off := op("cluster", "set", vip)
	off.Params = append(off.Params, config.P("configure", "no"))
	h.mustApply(off)
	h.nif.events <- lb.NetEvent{Kind: lb.NetAddressRemoved, Ifindex: 2, Ifname: "eth0", Prefix: netip.PrefixFrom(v, 32)}
	h.nif.events <- lb.NetEvent{Kind: lb.NetLinkUp, Ifindex: 2, Ifname: "eth0"}
	time.Sleep(50 * time.Millisecond)
	if _, ok := h.nif.address(v); ok {
		t.Error("an address dlbd removed came back")
	}
}

// A next hop's new MAC reaches the executor from the event, with no
// periodic refresh.
func TestNeighborEventApplied(t *testing.T) {
	h := newHarnessWith(t, t.TempDir(), logTo(io.Discard, true))
	base(h)
	newMAC := net.HardwareAddr{2, 0, 0, 0, 0xbb, 21}
	macOf := func() []string {
		var out []string
		for _, b := range h.dp.state().Backends {
			if b.Address == s1 {
				out = append(out, b.MAC.String())
			}
		}
		return out
	}
	// A MAC that stops being usable (a reprobe in flight) keeps the last.
	h.nif.events <- lb.NetEvent{Kind: lb.NetNeighborChanged, Ifindex: 2, Ifname: "eth0", Addr: s1}
	h.nif.events <- lb.NetEvent{Kind: lb.NetNeighborChanged, Ifindex: 2, Ifname: "eth0", Addr: s1, MAC: newMAC}
	eventually(t, "new MAC applied", func() bool {
		m := macOf()
		return len(m) == 2 && m[0] == newMAC.String() && m[1] == newMAC.String()
	})
	// A neighbour dlbd does not use changes nothing.
	n := len(h.dp.updated)
	h.nif.events <- lb.NetEvent{Kind: lb.NetNeighborChanged, Ifindex: 2, Addr: netip.MustParseAddr("198.18.0.99"), MAC: newMAC}
	time.Sleep(50 * time.Millisecond)
	if len(h.dp.updated) != n {
		t.Error("a neighbour no server uses caused an update")
	}
}

// Reprobe rounds go through every resolved next hop, a batch at a time.
func TestReprobeRounds(t *testing.T) {
	h := newHarnessWith(t, t.TempDir(), func(o *Options) {
		o.TickInterval, o.ReprobeInterval, o.ReprobeBatch = time.Hour, -1, 2
	})
	base(h)
	h.mustApply(op("server", "add", vip+"@80@198.18.0.23"))
	for range 3 {
		if err := h.e.do(context.Background(), h.e.reprobeRound); err != nil {
			t.Fatal(err)
		}
	}
	h.nif.mu.Lock()
	got := slices.Clone(h.nif.reprobed)
	h.nif.mu.Unlock()
	want := []netip.Addr{s1, s2, s3, s1, s2, s3}
	if !slices.Equal(got, want) {
		t.Errorf("reprobed %v, want %v", got, want)
	}
}

// The neighbours NAT replies go to (the MACs NAT entries cache, found at
// each sweep) are verified in turn with the configured next hops, a batch
// a round, without making their entries dlbd's (ReprobeUnmanaged); one
// that is a next hop too is verified as one; none once no entry caches a
// hop.
func TestReprobeNATHops(t *testing.T) {
	h := newHarnessWith(t, t.TempDir(), func(o *Options) {
		o.TickInterval, o.ReprobeInterval, o.ReprobeBatch = time.Hour, -1, 2
	})
	base(h)
	router, client, other := netip.MustParseAddr("198.18.0.254"), netip.MustParseAddr("198.18.0.11"), netip.MustParseAddr("198.18.0.12")
	rh, ch := lb.NATHop{Ifindex: 2, MAC: [6]byte{2, 0, 0, 0, 0, 0xfe}}, lb.NATHop{Ifindex: 2, MAC: [6]byte{2, 0, 0, 0, 0, 0x0b}}
	sh := lb.NATHop{Ifindex: 2, MAC: [6]byte{2, 0, 0, 0, 0, 0x15}} // a server's: a next hop too
	h.nif.mu.Lock()
	h.nif.natNeighbors = map[lb.NATHop][]netip.Addr{rh: {router}, ch: {client}, sh: {s1},
		{Ifindex: 2, MAC: [6]byte{2, 0, 0, 0, 0, 0x0c}}: {other}} // no entry caches it
	h.nif.mu.Unlock()
	rounds := func(n int) (hops, nat []netip.Addr) {
		t.Helper()
		h.nif.mu.Lock()
		h.nif.reprobed, h.nif.reprobedNAT = nil, nil
		h.nif.mu.Unlock()
		for range n {
			if err := h.e.do(context.Background(), h.e.reprobeRound); err != nil {
				t.Fatal(err)
			}
		}
		h.nif.mu.Lock()
		defer h.nif.mu.Unlock()
		return slices.Clone(h.nif.reprobed), slices.Clone(h.nif.reprobedNAT)
	}
	sweep := func(hops map[lb.NATHop]int) {
		t.Helper()
		h.dp.mu.Lock()
		h.dp.swept.NATHops = hops
		h.dp.mu.Unlock()
		if err := h.e.do(context.Background(), h.e.sweepConns); err != nil {
			t.Fatal(err)
		}
	}
	servers := []netip.Addr{s1, s2, s1, s2, s1, s2} // base's two, two a round

	if hops, nat := rounds(3); !slices.Equal(hops, servers) || len(nat) != 0 {
		t.Errorf("before any sweep found NAT hops: reprobed %v and %v, want the servers only", hops, nat)
	}
	sweep(map[lb.NATHop]int{rh: 3, ch: 1, sh: 2})
	// Sorted: client (.11), s1 (.21), router (.254), two a round.
	if hops, nat := rounds(3); !slices.Equal(hops, servers) || !slices.Equal(nat, []netip.Addr{client, router, client, router}) {
		t.Errorf("after the sweep: reprobed %v and, unmanaged, %v; want the servers and client, router, client, router", hops, nat)
	}
	sweep(nil)
	if _, nat := rounds(2); len(nat) != 0 {
		t.Errorf("no hop cached any more: reprobed %v unmanaged", nat)
	}
}

// executor stop removes every pin, loaded or not, and says which.
func TestStopRemovesPins(t *testing.T) {
	t.Run("loaded", func(t *testing.T) {
		h := newHarness(t, t.TempDir())
		base(h)
		a, err := h.e.ApplyWithNotes(context.Background(), []config.Op{op("executor", "stop", "")})
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Notes) != 1 || a.Notes[0] != "removed 3 pins under /fake: conns, link, prog" {
			t.Errorf("notes %q", a.Notes)
		}
		if !h.dp.removed {
			t.Error("not removed")
		}
		if left := h.nif.kernelEntries(); len(left) != 0 {
			t.Errorf("neighbour entries left after stop: %v", left)
		}
	})
	t.Run("not loadable", func(t *testing.T) {
		removed := 0
		h := newHarnessWith(t, t.TempDir(), func(o *Options) {
			o.RemovePins = func() ([]string, error) { removed++; return []string{"conns", "prog"}, nil }
		})
		base(h)
		h.stop()
		h.extra = func(o *Options) {
			o.OpenDatapath = func() (Datapath, error) { return nil, errors.New("pinned maps are incompatible") }
			o.RemovePins = func() ([]string, error) { removed++; return []string{"conns", "prog"}, nil }
		}
		h.start()
		if st := h.status(Query{}).Executor; st.Loaded || !strings.Contains(st.Err, "incompatible") {
			t.Fatalf("executor status %+v", st)
		}
		a, err := h.e.ApplyWithNotes(context.Background(), []config.Op{op("executor", "stop", "")})
		if err != nil {
			t.Fatal(err)
		}
		if removed != 1 || len(a.Notes) != 1 || a.Notes[0] != "removed 2 pins: conns, prog" {
			t.Errorf("removed %d times, notes %q", removed, a.Notes)
		}
		if _, ok := h.nif.address(netip.MustParseAddr(vip)); ok {
			t.Error("the cluster address stayed on the host")
		}
		// Stopped already: stop again still removes what is there.
		if _, err := h.e.ApplyWithNotes(context.Background(), []config.Op{op("executor", "stop", "")}); err != nil || removed != 2 {
			t.Errorf("second stop: %v, removed %d times", err, removed)
		}
	})
}

// A refused change leaves no neighbour entry behind: those it had the
// kernel create are removed. So do servers removed later.
func TestRefusedChangeLeavesNoNeighbours(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	before := h.nif.kernelEntries()
	var servers []string
	for i := 30; i < 90; i++ {
		servers = append(servers, fmt.Sprintf("198.18.0.%d", i))
	}
	bad := netip.MustParseAddr("198.18.0.89")
	h.nif.offLink[bad] = true
	err := h.apply(op("server", "add", vip+"@80@"+strings.Join(servers, "+")))
	if err == nil || !strings.Contains(err.Error(), "198.18.0.89") {
		t.Fatalf("Apply: %v, want a refusal naming 198.18.0.89", err)
	}
	if got := h.nif.kernelEntries(); !slices.Equal(got, before) {
		t.Errorf("neighbour entries after the refusal: %v, before: %v", got, before)
	}
	h.nif.mu.Lock() // the engine reads it on its goroutine
	delete(h.nif.offLink, bad)
	h.nif.mu.Unlock()
	h.mustApply(op("server", "add", vip+"@80@198.18.0.30+198.18.0.31"))
	h.mustApply(op("server", "remove", vip+"@80@198.18.0.30+198.18.0.31"))
	if got := h.nif.kernelEntries(); !slices.Equal(got, before) {
		t.Errorf("neighbour entries after the servers went: %v, before: %v", got, before)
	}
	// A server still on another port keeps its entry.
	h.mustApply(op("server", "remove", vip+"@443@198.18.0.21"))
	if got := h.nif.kernelEntries(); !slices.Contains(got, s1) {
		t.Errorf("the entry of a server still in use went: %v", got)
	}
}

// natPortOps add NAT port vip@8080 and a server of it.
func natPortOps() []config.Op {
	nat := op("port", "add", vip+"@8080")
	nat.Params = append(nat.Params, config.P("method", "nat"))
	srv := op("server", "add", vip+"@8080@198.18.0.23")
	srv.Params = append(srv.Params, config.P("returnaddress", "198.18.0.3"))
	return []config.Op{nat, srv}
}

// NAT without a client gateway and with forwarding off is warned about
// when configured, and reported while it lasts.
func TestNATRouteWarning(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	a, err := h.e.ApplyWithNotes(context.Background(), natPortOps())
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Warnings) != 1 || !strings.Contains(a.Warnings[0], "executor set clientgateway") ||
		!strings.Contains(a.Warnings[0], "net.ipv4.conf.eth0.forwarding=1") || !strings.Contains(a.Warnings[0], vip+"@8080") {
		t.Errorf("warnings %q", a.Warnings)
	}
	if w := h.status(Query{Warnings: true}).Executor.Warnings; len(w) != 1 {
		t.Errorf("report warnings %q", w)
	}
	// Unrelated changes do not repeat it; the report does.
	a, err = h.e.ApplyWithNotes(context.Background(), []config.Op{op("server", "down", vip+"@80@198.18.0.21")})
	if err != nil || len(a.Warnings) != 0 {
		t.Errorf("unrelated change: %v, warnings %q", err, a.Warnings)
	}
	// Forwarding on: the condition is gone.
	h.nif.mu.Lock()
	h.nif.forwarding[false] = true
	h.nif.mu.Unlock()
	if w := h.status(Query{}).Executor.Warnings; len(w) != 0 {
		t.Errorf("report warnings with forwarding on: %q", w)
	}
	// A client gateway instead.
	h.nif.mu.Lock()
	h.nif.forwarding[false] = false
	h.nif.mu.Unlock()
	gw := op("executor", "set", "")
	gw.Params = append(gw.Params, config.P("clientgateway", "198.18.0.1"))
	h.nif.setMAC(netip.MustParseAddr("198.18.0.1"), net.HardwareAddr{2, 0, 0, 0, 0, 1})
	a, err = h.e.ApplyWithNotes(context.Background(), []config.Op{gw})
	if err != nil || len(a.Warnings) != 0 {
		t.Errorf("client gateway set: %v, warnings %q", err, a.Warnings)
	}
	if w := h.status(Query{}).Executor.Warnings; len(w) != 0 {
		t.Errorf("report warnings with a client gateway: %q", w)
	}
}

// A neighbour whose MAC changes or goes (a router replaced, a VRRP
// backup taking over with a MAC of its own) has the NAT entries that
// cached a hop to its old MAC look their hop up again: at once, a burst
// of changes in one pass a second at most, and again at the sweeps while
// a handshake begun before may still complete with it. Without NAT ports
// that route their replies (none, or a client gateway), nothing is done.
func TestNeighborMACMovedNATHops(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	m := func(b byte) [6]byte { return [6]byte{2, 0, 0, 0, 0x77, b} }
	moved := func(ifindex int, old [6]byte) lb.NetEvent {
		return lb.NetEvent{Kind: lb.NetNeighborChanged, Ifindex: ifindex, Ifname: "eth0", Addr: netip.MustParseAddr("198.18.0.250"),
			MAC: net.HardwareAddr{2, 0, 0, 0, 0x77, 0xff}, OldMAC: old[:]}
	}
	h.dp.mu.Lock()
	h.dp.hops = []movedHop{{2, m(1)}, {2, m(2)}, {3, m(1)}, {2, m(3)}}
	h.dp.mu.Unlock()

	// No NAT port: a change does not look through the NAT entries.
	h.nif.events <- moved(2, m(1))
	time.Sleep(50 * time.Millisecond)
	if hops, passes := h.dp.cachedHops(); passes != 0 || len(hops) != 4 {
		t.Fatalf("without NAT: %d passes, hops %v", passes, hops)
	}

	h.mustApply(natPortOps()...)
	h.nif.events <- moved(2, m(1))
	eventually(t, "the hop to the old MAC forgotten", func() bool {
		hops, passes := h.dp.cachedHops()
		return passes == 1 && slices.Equal(hops, []movedHop{{2, m(2)}, {3, m(1)}, {2, m(3)}})
	})
	// Within a second, another change waits for the sweep, which also
	// looks again for the first.
	h.nif.events <- moved(2, m(2))
	time.Sleep(50 * time.Millisecond)
	if _, passes := h.dp.cachedHops(); passes != 1 {
		t.Errorf("a second pass within a second: %d passes", passes)
	}
	h.dp.mu.Lock()
	h.dp.hops = append(h.dp.hops, movedHop{2, m(1)}) // a handshake completed since
	h.dp.mu.Unlock()
	if err := h.e.do(context.Background(), h.e.sweepConns); err != nil {
		t.Fatal(err)
	}
	if hops, passes := h.dp.cachedHops(); passes != 2 || !slices.Equal(hops, []movedHop{{3, m(1)}, {2, m(3)}}) {
		t.Errorf("after the sweep: %d passes, hops %v", passes, hops)
	}

	// A client gateway: replies no longer take hops from the routing table.
	gw := op("executor", "set", "")
	gw.Params = append(gw.Params, config.P("clientgateway", "198.18.0.1"))
	h.nif.setMAC(netip.MustParseAddr("198.18.0.1"), net.HardwareAddr{2, 0, 0, 0, 0, 1})
	h.mustApply(gw)
	time.Sleep(movedHopGap) // a pass may come: for the MACs that moved before
	h.nif.events <- moved(2, m(3))
	time.Sleep(50 * time.Millisecond)
	if hops, _ := h.dp.cachedHops(); !slices.Equal(hops, []movedHop{{3, m(1)}, {2, m(3)}}) {
		t.Errorf("with a client gateway: hops %v", hops)
	}
}

// A route change (a client's router replaced by another, a routing
// daemon's update) has every NAT connection that routes its replies look
// its hop up again: the executor is told at once, of a burst's others
// once, routeMovesGap later; a resync of the network watch may hide route
// changes and tells it too. Without NAT ports that route their replies
// (none, or a client gateway), it is not told.
func TestRouteChangedNATHops(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	route := lb.NetEvent{Kind: lb.NetRouteChanged}
	quietFor := func(what string, want int) {
		t.Helper()
		time.Sleep(routeMovesGap + 100*time.Millisecond)
		if n := h.dp.routesTold(); n != want {
			t.Errorf("%s: told %d times, want %d", what, n, want)
		}
	}

	h.nif.events <- route
	quietFor("without NAT", 0)

	h.mustApply(natPortOps()...)
	h.nif.events <- route
	eventually(t, "told", func() bool { return h.dp.routesTold() == 1 })
	for range 3 {
		h.nif.events <- route
	}
	time.Sleep(50 * time.Millisecond)
	if n := h.dp.routesTold(); n != 1 {
		t.Errorf("a burst within %v: told %d times, want 1 so far", routeMovesGap, n)
	}
	eventually(t, "the burst told once, at the gap's end", func() bool { return h.dp.routesTold() == 2 })
	quietFor("after the burst", 2)

	h.nif.events <- lb.NetEvent{Kind: lb.NetResync}
	eventually(t, "told at a resync", func() bool { return h.dp.routesTold() == 3 })

	// A client gateway: replies no longer take hops from the routing table.
	gw := op("executor", "set", "")
	gw.Params = append(gw.Params, config.P("clientgateway", "198.18.0.1"))
	h.nif.setMAC(netip.MustParseAddr("198.18.0.1"), net.HardwareAddr{2, 0, 0, 0, 0, 1})
	h.mustApply(gw)
	h.nif.events <- route
	quietFor("with a client gateway", 3)
}

// routesMoved tells the executor at once when it was last told
// routeMovesGap ago or never (from any clock: a clock near zero), and
// otherwise sets one wait for the gap's end, whatever the changes meanwhile.
func TestRoutesMovedGap(t *testing.T) {
	dp := &fakeDatapath{}
	e := &Engine{log: slog.New(slog.DiscardHandler), exec: newExecutor()}
	e.exec.dp = dp
	t0 := time.Unix(0, 0) // a clock near zero
	steps := []struct {
		name string
		at   time.Duration
		told int  // times told after it
		wait bool // a wait set
	}{
		{"first change: at once", 0, 1, false},
		{"100 ms later: waits", 100 * time.Millisecond, 1, true},
		{"another meanwhile: the same wait", 200 * time.Millisecond, 1, true},
	}
	for _, st := range steps {
		e.routesMoved(t0.Add(st.at))
		if n := dp.routesTold(); n != st.told || (e.exec.routes.due != nil) != st.wait {
			t.Errorf("%s: told %d times, waiting %v; want %d, %v", st.name, n, e.exec.routes.due != nil, st.told, st.wait)
		}
	}
	first := e.exec.routes.due
	e.tellRoutesMoved(t0.Add(routeMovesGap))
	if n := dp.routesTold(); n != 2 || e.exec.routes.due != nil || first == nil {
		t.Errorf("at the gap's end: told %d times, waiting %v", n, e.exec.routes.due != nil)
	}
	e.routesMoved(t0.Add(2 * routeMovesGap))
	if n := dp.routesTold(); n != 3 {
		t.Errorf("a gap after the last: told %d times, want 3", n)
	}
	e.exec.dp = nil // the executor stopped meanwhile
	e.exec.routes.due = first
	e.tellRoutesMoved(t0.Add(3 * routeMovesGap))
	if e.exec.routes.due != nil {
		t.Error("a wait left without an executor")
	}
}

// movedHops watches a MAC for movedHopWatch, passes at most once per
// movedHopGap but at the sweep, from any clock: a zero time of the last
// pass (none yet) is long enough ago.
func TestMovedHopsDue(t *testing.T) {
	t0 := time.Unix(0, 0) // a clock near zero
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	var m movedHops
	if m.due(t0, true) {
		t.Error("due with nothing moved")
	}
	m.add(2, mac, t0)
	m.add(2, net.HardwareAddr{1, 2, 3}, t0) // not a MAC: ignored
	steps := []struct {
		name  string
		at    time.Duration
		sweep bool
		want  bool
	}{
		{"first pass", 0, false, true},
		{"half a second later", 500 * time.Millisecond, false, false},
		{"half a second later, at the sweep", 500 * time.Millisecond, true, true},
		{"a second after the last pass", 1500 * time.Millisecond, false, true},
		{"just before the watch ends", movedHopWatch - time.Millisecond, true, true},
		{"the watch over", movedHopWatch, true, false},
	}
	for _, st := range steps {
		now := t0.Add(st.at)
		if got := m.due(now, st.sweep); got != st.want {
			t.Errorf("%s: due %v, want %v", st.name, got, st.want)
		}
		if st.want {
			m.swept = now
		}
		if got, want := m.stale(2, mac), st.at < movedHopWatch; got != want {
			t.Errorf("%s: stale %v, want %v", st.name, got, want)
		}
	}
	if m.stale(3, mac) || m.stale(2, nil) {
		t.Error("another interface or no MAC is stale")
	}
}

// A neighbour that went and came back with its MAC (the kernel flushes
// an interface's neighbours when the interface's own MAC changes, and
// collects unused ones) did not move: the NAT entries' hops to it stay.
// (Each pass for 32 s cleared them, and the next replies cached them
// again.) One that comes back with another MAC moved.
func TestNeighborBackWithItsMAC(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	h.mustApply(natPortOps()...)
	m := func(b byte) [6]byte { return [6]byte{2, 0, 0, 0, 0x77, b} }
	one, two := m(1), m(2)
	sentinel := byte(0x80)
	event := func(a string, mac, old []byte) lb.NetEvent {
		return lb.NetEvent{Kind: lb.NetNeighborChanged, Ifindex: 2, Ifname: "eth0", Addr: netip.MustParseAddr(a), MAC: mac, OldMAC: old}
	}
	watched := func(mac [6]byte) bool {
		v, err := call(context.Background(), h.e, func() (bool, error) { return h.e.exec.moved.stale(2, mac[:]), nil })
		return err == nil && v
	}
	// handled sends evs, then another neighbour's going (a MAC of its
	// own each time), and waits until that is watched: evs were handled
	// before it.
	handled := func(evs ...lb.NetEvent) {
		t.Helper()
		sentinel++
		other := m(sentinel)
		for _, ev := range append(evs, event("198.18.0.251", nil, other[:])) {
			h.nif.events <- ev
		}
		eventually(t, "the events handled", func() bool { return watched(other) })
	}
	cached := []movedHop{{2, one}}

	handled(event("198.18.0.250", nil, one[:]), event("198.18.0.250", one[:], nil)) // gone, back with its MAC
	if watched(one) {
		t.Error("a neighbour back with its MAC is watched as moved")
	}
	h.dp.mu.Lock()
	h.dp.hops = slices.Clone(cached) // the next replies cached it again, if a pass cleared it
	h.dp.mu.Unlock()
	if err := h.e.do(context.Background(), h.e.sweepConns); err != nil {
		t.Fatal(err)
	}
	if hops, _ := h.dp.cachedHops(); !slices.Equal(hops, cached) {
		t.Errorf("after the neighbour came back with its MAC, a sweep: hops %v, want %v kept", hops, cached)
	}

	handled(event("198.18.0.250", nil, one[:]), event("198.18.0.250", two[:], nil)) // gone, back with another MAC
	if !watched(one) {
		t.Error("a neighbour back with another MAC: its old one is not watched")
	}
}

// The executor's interface changes its MAC (by hand, a bond's failover):
// the addresses dlbd put on it are announced with the new one (the
// segment kept sending them to the old one, which a NIC drops), the next
// hops are read again and the NAT entries look their hops up again (the
// frames left from the old MAC). Another interface's change does nothing.
// One set up again is announced from too.
func TestExecutorInterfaceMACChanged(t *testing.T) {
	fastAnnouncements(t, 0, 10*time.Millisecond)
	h := newHarness(t, t.TempDir())
	base(h)
	h.mustApply(natPortOps()...)
	v := netip.MustParseAddr(vip)
	announced := func() int {
		h.nif.mu.Lock()
		defer h.nif.mu.Unlock()
		return len(slices.DeleteFunc(slices.Clone(h.nif.announced), func(a netip.Addr) bool { return a != v }))
	}
	changed := func(ifindex int, name string) lb.NetEvent {
		return lb.NetEvent{Kind: lb.NetLinkMACChanged, Ifindex: ifindex, Ifname: name,
			MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xab}, OldMAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xaa}}
	}
	was, told := announced(), h.dp.routesTold()
	h.nif.events <- changed(9, "eth9")
	time.Sleep(100 * time.Millisecond)
	if n, r := announced(), h.dp.routesTold(); n != was || r != told {
		t.Errorf("another interface's MAC changed: announced %d times, routes told %d times; want nothing", n-was, r-told)
	}
	h.nif.events <- changed(2, "eth0")
	eventually(t, "the cluster address announced twice", func() bool { return announced() == was+len(announceAfter) })
	eventually(t, "the NAT entries told to look their hops up again", func() bool { return h.dp.routesTold() > told })

	// Set up again after it was down (its announcements lost, perhaps
	// on another switch port now): announced too.
	was = announced()
	h.nif.events <- lb.NetEvent{Kind: lb.NetLinkUp, Ifindex: 2, Ifname: "eth0"}
	eventually(t, "the cluster address announced after the link came up", func() bool { return announced() == was+len(announceAfter) })
}

// The executor's interface moved to another network namespace (ip link
// set netns; it keeps its index there), where its link holds it still
// (TestInterfaceMovedToAnotherNamespace), and the operator moves it to
// another interface: it was stopped and started there, its tables lost.
// It is detached from the other namespace and attached with them. So
// when the index it had is another interface's here.
func TestMoveFromAnotherNamespace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		leave func(n *fakeNetif)
	}{
		{"index gone", func(n *fakeNetif) { n.setIfindex(0) }},
		{"index another interface's", func(n *fakeNetif) {
			n.rename("other0")
			n.setXDP(lb.XDPProgram{Attached: true, ID: 99})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, t.TempDir())
			base(h)
			h.nif.mu.Lock()
			h.nif.second = "eth1"
			h.nif.mu.Unlock()
			tc.leave(h.nif) // the link stays attached
			h.nif.events <- lb.NetEvent{Kind: lb.NetLinkRemoved, Ifindex: 2, Ifname: "eth0"}
			time.Sleep(50 * time.Millisecond)
			if err := h.apply(op("executor", "start", "", "interface", "eth1")); err != nil {
				t.Fatalf("moving the executor to eth1: %v", err)
			}
			h.dp.mu.Lock()
			removed, attached, at := h.dp.removed, h.dp.attached, h.dp.ifindex
			h.dp.mu.Unlock()
			if removed || !attached || at != 3 || h.opens != 1 {
				t.Errorf("after the move: pins removed %v, attached %v to %d, %d loads; want eth1 (3), pins kept, loaded once",
					removed, attached, at, h.opens)
			}
			if st := h.status(Query{}).Executor; st.Detached != "" || st.Err != "" || h.config().Executor.Interface != "eth1" {
				t.Errorf("after the move: detached %q, error %q, configuration %s", st.Detached, st.Err, h.config().Executor.Interface)
			}
		})
	}
}

// Probes and metric polls leave from the NFA of the server's family, and
// follow it when it changes.
func TestProbesAndPollsUseTheNFA(t *testing.T) {
	var mu sync.Mutex
	probeSrc := map[netip.Addr]netip.Addr{}
	pollSrc := map[netip.Addr]netip.Addr{}
	h := newHarnessWith(t, t.TempDir(), func(o *Options) {
		o.NewAdvisor = func(a lb.Advisor) (advisors.Advisor, error) {
			return advisorFunc(func(_ context.Context, tg advisors.Target) advisors.Result {
				mu.Lock()
				probeSrc[tg.Address] = tg.SourceAddr()
				mu.Unlock()
				return advisors.Result{Up: true}
			}), nil
		}
		o.NewMetricSource = func(_ lb.MetricServer, server, source netip.Addr, _ []string) (MetricSource, error) {
			mu.Lock()
			pollSrc[server] = source
			mu.Unlock()
			return func(context.Context) (map[string]float64, time.Time, error) {
				return nil, time.Time{}, errors.New("no agent")
			}, nil
		}
	})
	base(h)
	s6 := netip.MustParseAddr("2001:2::21")
	h.nif.setMAC(s6, net.HardwareAddr{2, 0, 0, 0, 6, 21})
	nfa6 := op("executor", "set", "")
	nfa6.Params = append(nfa6.Params, config.P("nfa", "2001:2::2"))
	adv := op("advisor", "start", "@80")
	adv.Params = append(adv.Params, config.P("advisor", "connect"), config.P("interval", "0.1"))
	met := op("metric", "add", vip)
	met.Params = append(met.Params, config.P("metrics", "cpuload"))
	met6 := op("metric", "add", "2001:2::100")
	met6.Params = append(met6.Params, config.P("metrics", "cpuload"))
	h.mustApply(nfa6, op("cluster", "add", "2001:2::100"), op("port", "add", "2001:2::100@80"),
		op("server", "add", "2001:2::100@80@2001:2::21"), adv, met, met6)
	check := func(nfa4, nfa6 string) {
		t.Helper()
		want := map[netip.Addr]netip.Addr{s1: netip.MustParseAddr(nfa4), s2: netip.MustParseAddr(nfa4), s6: netip.MustParseAddr(nfa6)}
		eventually(t, "sources "+nfa4+" and "+nfa6, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for a, src := range want {
				if probeSrc[a] != src || pollSrc[a] != src {
					return false
				}
			}
			return true
		})
	}
	check("198.18.0.2", "2001:2::2")
	nfa := op("executor", "set", "")
	nfa.Params = append(nfa.Params, config.P("nfa", "198.18.0.4"))
	h.mustApply(nfa)
	check("198.18.0.4", "2001:2::2")
}

// advisorFunc is an advisor made of a function.
type advisorFunc func(context.Context, advisors.Target) advisors.Result

func (f advisorFunc) Probe(ctx context.Context, t advisors.Target) advisors.Result { return f(ctx, t) }
func (advisorFunc) Name() string                                                   { return "connect" }
func (advisorFunc) DefaultPort() uint16                                            { return 0 }

// NAT through an executor in generic XDP mode on an interface with GRO on
// is warned about when configured, and reported while it lasts; MAC
// forwarding and native mode are not.
func TestNATGROWarning(t *testing.T) {
	h := newHarness(t, t.TempDir())
	h.nif.mu.Lock()
	h.nif.forwarding[false] = true
	h.nif.gro = map[int]bool{2: true}
	h.nif.mu.Unlock()
	base(h)
	if w := h.status(Query{Warnings: true}).Executor.Warnings; len(w) != 0 {
		t.Errorf("MAC forwarding only: report warnings %q", w)
	}
	a, err := h.e.ApplyWithNotes(context.Background(), natPortOps())
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Warnings) != 1 || !strings.Contains(a.Warnings[0], "GRO is on for if2") ||
		!strings.Contains(a.Warnings[0], "ethtool -K if2 gro off") || !strings.Contains(a.Warnings[0], vip+"@8080") {
		t.Errorf("warnings %q", a.Warnings)
	}
	if w := h.status(Query{Warnings: true}).Executor.Warnings; len(w) != 1 || w[0] != a.Warnings[0] {
		t.Errorf("report warnings %q", w)
	}
	// GRO off: the condition is gone.
	h.nif.mu.Lock()
	h.nif.gro[2] = false
	h.nif.mu.Unlock()
	if w := h.status(Query{Warnings: true}).Executor.Warnings; len(w) != 0 {
		t.Errorf("report warnings with GRO off: %q", w)
	}
	// GRO on, native mode: nothing to warn about.
	h.nif.mu.Lock()
	h.nif.gro[2] = true
	h.nif.mu.Unlock()
	start := op("executor", "start", "")
	start.Params = append(start.Params, config.P("interface", "eth0"), config.P("xdp-mode", "native"))
	a, err = h.e.ApplyWithNotes(context.Background(), []config.Op{op("executor", "stop", ""), start})
	if err != nil || len(a.Warnings) != 0 {
		t.Errorf("native mode: %v, warnings %q", err, a.Warnings)
	}
	if x := h.status(Query{Warnings: true}).Executor; len(x.Warnings) != 0 || !x.Attached || x.AttachedMode != lb.XDPNative {
		t.Errorf("native mode: report warnings %q, attached %v in mode %v", x.Warnings, x.Attached, x.AttachedMode)
	}
}

// The executor's interface renamed (ip link set eth0 name eth9): the
// executor forwards there still, and the configuration follows the name,
// so that a change that puts an address on the interface is not refused
// (it was: "looking up interface eth0") and a restart finds it. Renamed
// while no dlbd ran, the next dlbd adopts the executor where it is and
// follows the name too (it used to report the executor detached while it
// forwarded on the renamed interface).
func TestInterfaceRenamed(t *testing.T) {
	var logs testutil.LogBuffer
	guard := &fakeGuard{}
	var h *harness
	h = newHarnessWith(t, t.TempDir(), func(o *Options) {
		logTo(&logs, true)(o)
		o.Guard = guard
		o.PinnedAttachment = func() (lb.Attachment, bool, error) {
			if h == nil {
				return lb.Attachment{}, false, nil
			}
			a, ok := h.dp.Attached()
			return a, ok, nil
		}
	})
	// The interface reports the executor's program (the fake's id 8).
	h.nif.setXDP(lb.XDPProgram{Attached: true, ID: 8})
	guard.mu.Lock()
	guard.nif = h.nif
	guard.mu.Unlock()
	base(h)
	v, v2 := netip.MustParseAddr(vip), netip.MustParseAddr(vip2)
	// rename renames the interface as the kernel reports it: the old
	// name removed, the new one added, with the same index.
	rename := func(from, to string) {
		h.nif.rename(to)
		h.nif.events <- lb.NetEvent{Kind: lb.NetLinkRemoved, Ifindex: 2, Ifname: from}
		h.nif.events <- lb.NetEvent{Kind: lb.NetLinkAdded, Ifindex: 2, Ifname: to}
	}
	followed := func(name string) {
		t.Helper()
		eventually(t, "the configuration names "+name, func() bool { return h.status(Query{}).Config.Executor.Interface == name })
		st := h.status(Query{}).Executor
		if !st.Attached || st.Attachment.Ifindex != 2 || st.Detached != "" || st.Err != "" {
			t.Errorf("executor status after the rename to %s: %+v", name, st)
		}
	}

	// An interface with the executor's index that does not run its
	// program (the executor's went to another namespace, where it keeps
	// its index, and this one got the index here) is not followed.
	h.nif.setXDP(lb.XDPProgram{Attached: true, ID: 99})
	rename("eth0", "other0")
	time.Sleep(200 * time.Millisecond)
	if name := h.status(Query{}).Config.Executor.Interface; name != "eth0" {
		t.Fatalf("the configuration followed an interface that does not run the executor: %s", name)
	}
	h.nif.setXDP(lb.XDPProgram{Attached: true, ID: 8})

	rename("other0", "eth9")
	followed("eth9")
	if !strings.Contains(logs.String(), "interface was renamed") || strings.Contains(logs.String(), "event=executorDetached") {
		t.Errorf("want the rename logged, and no executorDetached event:\n%s", logs.String())
	}
	if g, ok := guard.last(); !ok || g.ifname != "eth9" || g.ifindex != 2 || !slices.Contains(g.addrs, v) {
		t.Errorf("guard after the rename: last told %+v", g)
	}
	cl2 := op("cluster", "add", vip2)
	cl2.Params = append(cl2.Params, config.P("configure", "yes"))
	h.mustApply(cl2)
	for _, a := range []netip.Addr{v, v2} {
		if ifname, ok := h.nif.address(a); !ok || ifname != "eth9" {
			t.Errorf("cluster address %s not on the renamed interface: %v", a, h.nif.addresses)
		}
	}
	if h.opens != 1 {
		t.Errorf("the executor was loaded %d times; a rename must not touch it", h.opens)
	}
	h.restart()
	if st := h.status(Query{}); st.Config.Executor.Interface != "eth9" || !st.Executor.Attached || st.Executor.Err != "" {
		t.Errorf("after a restart: interface %q, executor %+v", st.Config.Executor.Interface, st.Executor)
	}

	// Renamed while no dlbd ran.
	h.stop()
	h.nif.rename("eth5")
	h.start()
	followed("eth5")
	if st := h.status(Query{}).Executor; st.Err != "" {
		t.Errorf("executor error after a restart on the renamed interface: %s", st.Err)
	}
	if strings.Contains(logs.String(), "bringing up the executor from saved state") {
		t.Errorf("the restart on the renamed interface failed to bring up the executor:\n%s", logs.String())
	}
	// The addresses are known to be there: removing a cluster takes its
	// address off the renamed interface.
	h.mustApply(op("cluster", "remove", vip2))
	if _, ok := h.nif.address(v2); ok {
		t.Errorf("cluster address %s left on the interface after its cluster was removed: %v", v2, h.nif.addresses)
	}
	if ifname, ok := h.nif.address(v); !ok || ifname != "eth5" {
		t.Errorf("cluster address %s not on the renamed interface: %v", v, h.nif.addresses)
	}
}

// The executor's XDP link detached by another tool (bpftool link detach):
// the interface is the same, so the executor is attached again at the
// next tick, keeping its maps, and the log says what happened (it used to
// say the interface had been deleted and created again).
func TestLinkDetachedByAnotherTool(t *testing.T) {
	var logs testutil.LogBuffer
	h := newHarnessWith(t, t.TempDir(), logTo(&logs, false))
	base(h)
	h.dp.sever()
	eventually(t, "attached again", func() bool {
		st := h.status(Query{}).Executor
		return st.Attached && st.Detached == "" && strings.Contains(logs.String(), "executor re-attached")
	})
	if !strings.Contains(logs.String(), "XDP link was detached from eth0 by another tool") {
		t.Errorf("the log does not say the link was detached:\n%s", logs.String())
	}
	if h.opens != 1 {
		t.Errorf("the executor was loaded %d times; attaching again must keep it (and its maps)", h.opens)
	}
}

// The executor's interface moved to another network namespace (ip link
// set X netns Y): the link stays attached to it there, and the report
// says so rather than "attached" alone; nothing is followed or detached,
// and when the interface comes back all is as before.
func TestInterfaceMovedToAnotherNamespace(t *testing.T) {
	h := newHarnessWith(t, t.TempDir(), logTo(io.Discard, true))
	base(h)
	moved := func() bool {
		return slices.ContainsFunc(h.status(Query{Warnings: true}).Executor.Warnings, func(w string) bool {
			return strings.Contains(w, "ifindex 2, which is no interface of this network namespace")
		})
	}
	if moved() {
		t.Fatal("warned before the interface moved")
	}
	h.nif.setIfindex(0) // gone from this namespace; the link stays attached
	h.nif.events <- lb.NetEvent{Kind: lb.NetLinkRemoved, Ifindex: 2, Ifname: "eth0"}
	eventually(t, "the report says where the executor is", moved)
	if st := h.status(Query{}); st.Config.Executor.Interface != "eth0" || !st.Executor.Attached || st.Executor.Detached != "" {
		t.Errorf("while moved: interface %q, executor %+v", st.Config.Executor.Interface, st.Executor)
	}
	h.nif.setIfindex(2)
	h.nif.events <- lb.NetEvent{Kind: lb.NetLinkAdded, Ifindex: 2, Ifname: "eth0"}
	eventually(t, "no warning once it is back", func() bool { return !moved() })
}

// TestDetachedExecutorMoved: the executor's interface deleted (a NIC that
// died) and the operator moves it to another one. Stopped and started
// there, it lost its tables (50 of 50 NAT connections broke in the lab);
// it is attached with them, its next hops pointed at the new interface
// before it sees a frame, its addresses put there and announced.
func TestDetachedExecutorMoved(t *testing.T) {
	fastAnnouncements(t, 0, 10*time.Millisecond)
	h := newHarness(t, t.TempDir())
	base(h)
	v := netip.MustParseAddr(vip)
	h.nif.mu.Lock()
	h.nif.second = "eth1"
	h.nif.mu.Unlock()

	h.nif.setIfindex(0)
	h.dp.sever()
	h.nif.dropAddress(v)
	h.nif.events <- lb.NetEvent{Kind: lb.NetLinkRemoved, Ifindex: 2, Ifname: "eth0"}
	eventually(t, "detached", func() bool { return h.status(Query{}).Executor.Detached != "" })
	h.nif.mu.Lock()
	h.nif.announced = nil
	h.nif.mu.Unlock()

	// eth1 held by another tool's XDP program: refused, by the dry run
	// (apply --diff) too, and the executor stays as it was.
	h.nif.mu.Lock()
	h.nif.secondXDP = lb.XDPProgram{Attached: true, ID: 99, Mode: lb.XDPNative}
	h.nif.mu.Unlock()
	moved := h.config()
	moved.Executor.Interface = "eth1"
	if _, err := h.replace(moved, true); lb.FieldOf(err) != "interface" || !strings.Contains(err.Error(), "already runs XDP program 99") {
		t.Errorf("a dry run moving the detached executor to eth1, taken: %v, want refused naming the program", err)
	}
	if err := h.apply(op("executor", "start", "", "interface", "eth1")); lb.FieldOf(err) != "interface" || !strings.Contains(err.Error(), "already runs XDP program 99") {
		t.Errorf("moving the detached executor to eth1, taken: %v, want refused naming the program", err)
	}
	if st := h.status(Query{}).Executor; st.Detached == "" || h.config().Executor.Interface != "eth0" {
		t.Errorf("after the refused move: detached %q, configuration %s; want detached from eth0", st.Detached, h.config().Executor.Interface)
	}
	h.nif.mu.Lock()
	h.nif.secondXDP = lb.XDPProgram{}
	h.nif.mu.Unlock()

	// An address eth1 refuses (IPv6 disabled there, say) after the
	// executor was attached: detached again, nothing left on eth1, the
	// change refused. (It stayed attached there, the configuration
	// naming eth0, retried as a rename every second.)
	h.nif.mu.Lock()
	h.nif.refuse = map[netip.Addr]bool{v: true}
	h.nif.mu.Unlock()
	if err := h.apply(op("executor", "start", "", "interface", "eth1")); lb.FieldOf(err) != "configure" {
		t.Errorf("moving the detached executor to eth1, which refuses its address: %v, want refused", err)
	}
	h.dp.mu.Lock()
	attachedAfter := h.dp.attached
	h.dp.mu.Unlock()
	h.nif.mu.Lock()
	left := slices.Collect(maps.Values(h.nif.addresses))
	h.nif.refuse = nil
	h.nif.mu.Unlock()
	if st := h.status(Query{}).Executor; st.Detached == "" || attachedAfter || h.config().Executor.Interface != "eth0" || slices.Contains(left, "eth1") {
		t.Errorf("after the refused move: detached %q, attached %v, configuration %s, addresses on %v; want detached from eth0, nothing on eth1",
			st.Detached, attachedAfter, h.config().Executor.Interface, left)
	}

	if err := h.apply(op("executor", "start", "", "interface", "eth1")); err != nil {
		t.Fatalf("moving the detached executor to eth1: %v", err)
	}
	h.dp.mu.Lock()
	removed, attached, at, stale := h.dp.removed, h.dp.attached, h.dp.ifindex, slices.Clone(h.dp.staleAtAttach)
	h.dp.mu.Unlock()
	if removed || !attached || at != 3 || h.opens != 1 {
		t.Errorf("pins removed %v, attached %v to ifindex %d, %d loads; want attached to eth1 (3), loaded once, pins kept",
			removed, attached, at, h.opens)
	}
	if len(stale) > 0 {
		t.Errorf("backends %v still reached through the gone interface when the executor was attached to eth1", stale)
	}
	if st := h.status(Query{}).Executor; st.Err != "" || st.Detached != "" || st.Attachment.Ifindex != 3 {
		t.Errorf("executor report: error %q, detached %q, attached to %d; want attached to 3", st.Err, st.Detached, st.Attachment.Ifindex)
	}
	if got := h.config().Executor.Interface; got != "eth1" {
		t.Errorf("the configuration says %s, want eth1", got)
	}
	h.nif.mu.Lock()
	on, announced := h.nif.addresses[v], slices.Contains(h.nif.announced, v)
	h.nif.mu.Unlock()
	if on != "eth1" || !announced {
		t.Errorf("the cluster address is on %q, announced %v; want on eth1, announced", on, announced)
	}
}
