package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/lock"
	"github.com/dlbproject/dlb/pkg/testutil"
)

var (
	vip  = "198.18.0.100"
	vip2 = "198.18.0.101"
	s1   = netip.MustParseAddr("198.18.0.21")
	s2   = netip.MustParseAddr("198.18.0.22")
	s3   = netip.MustParseAddr("198.18.0.23")
)

// base configures a started executor, one cluster with ports 80 and 443
// and two servers on each.
func base(h *harness) {
	h.t.Helper()
	start := op("executor", "start", "")
	start.Params = append(start.Params, config.P("interface", "eth0"))
	nfa := op("executor", "set", "")
	nfa.Params = append(nfa.Params, config.P("nfa", "198.18.0.2"))
	cl := op("cluster", "add", vip)
	cl.Params = append(cl.Params, config.P("configure", "yes"))
	h.mustApply(start, nfa, cl,
		op("port", "add", vip+"@80"), op("port", "add", vip+"@443"),
		op("server", "add", "@80+443@198.18.0.21"), op("server", "add", "@80+443@198.18.0.22"))
}

func TestApplyBuildsDataplane(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	dp := h.dp.state()
	if dp == nil || len(dp.Services) != 2 || len(dp.Backends) != 4 {
		t.Fatalf("applied %+v", dp)
	}
	if dp.NFA != netip.MustParseAddr("198.18.0.2") {
		t.Errorf("NFA %s", dp.NFA)
	}
	for _, s := range dp.Services {
		// A table of about 100 slots per server: 2 servers.
		if len(s.Table) != int(lb.TableSizeFor(2)) || s.TableSum == 0 {
			t.Errorf("service %d table %d slots sum %d", s.ID, len(s.Table), s.TableSum)
		}
		if s.StaleTimeout != lb.DefaultStaleTimeout || s.FinTimeout != lb.DefaultFinTimeout {
			t.Errorf("service %d timeouts %d/%d", s.ID, s.StaleTimeout, s.FinTimeout)
		}
	}
	for _, b := range dp.Backends {
		if !b.AcceptNew || b.MAC == nil || b.Ifindex != 2 {
			t.Errorf("backend %+v", b)
		}
	}
	if h.nif.addresses[netip.MustParseAddr(vip)] != "eth0" {
		t.Errorf("cluster address not configured: %v", h.nif.addresses)
	}
}

func TestWildcardsAndLists(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	h.mustApply(op("cluster", "add", vip2), op("port", "add", vip2+"@80"))
	// @80@server reaches port 80 of both clusters.
	h.mustApply(op("server", "add", "@80@198.18.0.23"))
	c := h.config()
	for _, a := range []string{vip, vip2} {
		cl := c.Cluster(netip.MustParseAddr(a))
		if cl.Port(80).Server(s3) == nil {
			t.Errorf("%s@80 lacks the wildcard-added server", a)
		}
	}
	if c.Cluster(netip.MustParseAddr(vip)).Port(443).Server(s3) != nil {
		t.Error("port 443 got the server")
	}
	// server set on a wildcard server component changes every server.
	w := op("server", "set", vip+"@80@")
	w.Params = append(w.Params, config.P("weight", "3"))
	h.mustApply(w)
	c = h.config()
	for _, s := range c.Cluster(netip.MustParseAddr(vip)).Port(80).Servers {
		if s.Weight != 3 {
			t.Errorf("%s weight %d", s.Address, s.Weight)
		}
	}
	h.mustApply(op("server", "remove", "@@198.18.0.23"))
	c = h.config()
	if c.Cluster(netip.MustParseAddr(vip2)).Port(80).Server(s3) != nil {
		t.Error("wildcard remove left the server")
	}
}

func TestDownWeightZeroAndUnresolvedLeaveTheTable(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	w0 := op("server", "set", vip+"@80@198.18.0.22")
	w0.Params = append(w0.Params, config.P("weight", "0"))
	h.mustApply(op("server", "down", vip+"@443@198.18.0.21"), w0)
	h.nif.setMAC(s3, nil)
	h.mustApply(op("server", "add", vip+"@80@198.18.0.23"))

	dp := h.dp.state()
	accept := map[string]bool{}
	ids := map[uint32]string{}
	for _, b := range dp.Backends {
		accept[b.Address.String()+"/"+string(rune('0'+b.Service))] = b.AcceptNew
		ids[b.ID] = b.Address.String()
	}
	for _, s := range dp.Services {
		in := map[string]bool{}
		for _, id := range s.Table {
			in[ids[id]] = true
		}
		switch s.Port {
		case 80:
			if !in["198.18.0.21"] || in["198.18.0.22"] || in["198.18.0.23"] {
				t.Errorf("port 80 table holds %v, want only .21 (.22 weight 0, .23 unresolved)", in)
			}
		case 443:
			if in["198.18.0.21"] || !in["198.18.0.22"] {
				t.Errorf("port 443 table holds %v, want only .22 (.21 down)", in)
			}
		}
	}
	if st := h.serverState(vip + "@80@198.18.0.23"); st != lb.ServerUnresolved {
		t.Fatalf("state %s, want unresolved", st)
	}

	// Once the neighbour resolves, the tick brings the server in.
	h.nif.setMAC(s3, []byte{2, 0, 0, 0, 0, 0x23})
	deadline := time.Now().Add(2 * time.Second)
	for h.serverState(vip+"@80@198.18.0.23") != lb.ServerUp {
		if time.Now().After(deadline) {
			t.Fatal("server never resolved")
		}
		time.Sleep(10 * time.Millisecond)
	}
	found := false
	for _, b := range h.dp.state().Backends {
		if b.Address == s3 && b.AcceptNew {
			found = true
		}
	}
	if !found {
		t.Error("resolved server not taking connections")
	}
}

// TestAbsentServerDoesNotHoldTheLoop: adding a server whose MAC does
// not resolve (a host not booted yet) waits for it for the whole
// ResolveWait, as before, but the management loop serves other callers
// meanwhile: it used to hold them all that time (1 s a server added).
// A server that resolves during the wait is usable when its Apply
// returns, which is then at once.
func TestAbsentServerDoesNotHoldTheLoop(t *testing.T) {
	const wait = 2 * time.Second
	// No tick: nothing but the add itself re-reads the neighbours.
	h := newHarnessWith(t, t.TempDir(), func(o *Options) { o.ResolveWait, o.TickInterval = wait, time.Hour })
	base(h)
	absent, late := netip.MustParseAddr("198.18.0.24"), netip.MustParseAddr("198.18.0.25")
	h.nif.setMAC(absent, nil)
	h.nif.setMAC(late, nil)

	var warnings []string // of the last add, read after it returned
	// applied receives how long after its start the last add was applied
	// (WithLoopDone), before its wait.
	applied := make(chan time.Duration, 2)
	addServer := func(a netip.Addr) <-chan time.Duration {
		took := make(chan time.Duration, 1)
		go func() {
			start := time.Now()
			ctx := WithLoopDone(context.Background(), func() { applied <- time.Since(start) })
			r, err := h.e.ApplyWithNotes(ctx, []config.Op{op("server", "add", vip+"@80@"+a.String())})
			if err != nil {
				t.Errorf("adding %v: %v", a, err)
			}
			warnings = r.Warnings
			took <- time.Since(start)
		}()
		return took
	}

	added := addServer(absent)
	time.Sleep(300 * time.Millisecond) // past the loop's own wait
	start := time.Now()
	h.status(Query{})
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("a status during the add of an absent server took %v: the loop waited for its MAC", d)
	}
	if d := <-added; d < wait-50*time.Millisecond {
		t.Errorf("the add of an absent server returned after %v; want the whole ResolveWait (%v)", d, wait)
	}
	// The API lets the next change in when this one is applied, not
	// after its wait.
	select {
	case d := <-applied:
		if d > wait/2 {
			t.Errorf("the add of an absent server called WithLoopDone's function after %v; want it before its wait (%v)", d, wait)
		}
	default:
		t.Error("the add of an absent server did not call WithLoopDone's function")
	}
	if st := h.serverState(vip + "@80@198.18.0.24"); st != lb.ServerUnresolved {
		t.Errorf("absent server %s, want unresolved", st)
	}
	if want := "server 198.18.0.24 did not answer ARP within 2s: it takes no connections until it does (is it up, and on eth0's segment?)"; len(warnings) != 1 || warnings[0] != want {
		t.Errorf("warnings of the absent server's add: %q; want %q", warnings, want)
	}

	added = addServer(late)
	time.Sleep(300 * time.Millisecond)
	h.nif.setMAC(late, []byte{2, 0, 0, 0, 0, 0x25})
	if d := <-added; d < 250*time.Millisecond || d > wait/2 {
		t.Errorf("the add of a server that resolved 0.3 s in returned after %v; want soon after that", d)
	}
	if len(warnings) != 0 {
		t.Errorf("the add of a server that resolved warned: %q", warnings)
	}
	if st := h.serverState(vip + "@80@198.18.0.25"); st != lb.ServerUp {
		t.Errorf("server resolved during its add: %s right after, want up", st)
	}
	accepting := false
	for _, b := range h.dp.state().Backends {
		accepting = accepting || b.Address == late && b.AcceptNew
	}
	if !accepting {
		t.Error("server resolved during its add not taking connections in the executor")
	}
}

// TestLoopWaitsForNoHopWhileOthersWait: the management loop waits (up to
// loopResolveWait) for the MAC of a server a change brings in only while
// no one else waits for it: not while other changes wait for their turn
// (WithQueued, as the API's do) nor while other calls wait for the loop.
// 100 `server add` of hosts not up yet, at once, took 13.5 s; 3 s now.
func TestLoopWaitsForNoHopWhileOthersWait(t *testing.T) {
	const adds = 6
	h := newHarnessWith(t, t.TempDir(), func(o *Options) { o.ResolveWait, o.TickInterval = 2*time.Second, time.Hour })
	base(h)
	next := 30
	var running sync.WaitGroup // the adds, waiting for their servers after being applied
	defer running.Wait()
	// add adds an absent server with ctx and returns how long it took to
	// be applied (WithLoopDone), without waiting for its full return.
	add := func(ctx context.Context) time.Duration {
		t.Helper()
		a := netip.AddrFrom4([4]byte{198, 18, 0, byte(next)})
		next++
		h.nif.setMAC(a, nil)
		applied := make(chan time.Duration, 1)
		start := time.Now()
		ctx = WithLoopDone(ctx, func() { applied <- time.Since(start) })
		running.Go(func() {
			if _, err := h.e.Apply(ctx, []config.Op{op("server", "add", vip+"@80@"+a.String())}); err != nil {
				t.Errorf("adding %v: %v", a, err)
			}
		})
		select {
		case d := <-applied:
			return d
		case <-time.After(10 * time.Second):
			t.Fatalf("adding %v: not applied within 10s", a)
			return 0
		}
	}
	if d := add(context.Background()); d < loopResolveWait-10*time.Millisecond {
		t.Errorf("with no one else waiting, an absent server's add was applied after %v; want the loop's wait (%v)", d, loopResolveWait)
	}

	var total time.Duration
	for range adds {
		total += add(WithQueued(context.Background(), func() bool { return true }))
	}
	if total > adds*loopResolveWait/2 {
		t.Errorf("%d adds of absent servers with changes queued behind them were applied in %v; want well under %v each", adds, total, loopResolveWait)
	}

	// Other callers of the loop (a status, asked again and again).
	stop := make(chan struct{})
	asking := make(chan struct{})
	go func() {
		defer close(asking)
		for {
			select {
			case <-stop:
				return
			default:
				h.status(Query{})
			}
		}
	}()
	total = 0
	for range adds {
		total += add(context.Background())
	}
	close(stop)
	<-asking
	if total > adds*loopResolveWait/2 {
		t.Errorf("%d adds of absent servers while a status was asked for were applied in %v; want well under %v each", adds, total, loopResolveWait)
	}
}

// TestManyClustersAskTheHostOnce: the engine asks the host which
// addresses it has once for a batch of clusters, not once a cluster:
// each asking lists every address of the host, so with 4,000 clusters a
// restart kept the API waiting 9 s and a batch putting them on took 11.
func TestManyClustersAskTheHostOnce(t *testing.T) {
	const n = 200
	h := newHarness(t, t.TempDir())
	base(h)
	var ops []config.Op
	var put []netip.Addr
	for i := range n {
		a := netip.AddrFrom4([4]byte{198, 19, byte(i / 100), byte(i%100 + 1)})
		if i%4 == 0 {
			a = netip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 15: byte(i)})
		}
		if i%2 == 0 { // put on by dlb
			ops = append(ops, op("cluster", "add", a.String(), "configure", "yes"))
			put = append(put, a)
		} else { // the operator's to put on (clusterProblems asks)
			ops = append(ops, op("cluster", "add", a.String()))
		}
	}
	listings := func() int {
		h.nif.mu.Lock()
		defer h.nif.mu.Unlock()
		return h.nif.listings
	}
	allOn := func(when string) {
		t.Helper()
		h.nif.mu.Lock()
		defer h.nif.mu.Unlock()
		for _, a := range put {
			if h.nif.addresses[a] != "eth0" {
				t.Fatalf("%s: %v is not on eth0", when, a)
			}
		}
	}
	for _, step := range []struct {
		name string
		do   func()
		max  int
	}{
		// saveIntent, configureAddresses, clusterProblems, nfaProblems
		{"the batch", func() { h.mustApply(ops...) }, 4},
		// nfaProblems, clusterProblems
		{"a status", func() { h.status(Query{Warnings: true}) }, 2},
		// restoreAddresses and deprecateOwnAddresses at start
		{"a restart", func() { h.restart(); h.status(Query{}) }, 3},
		// restoreAddresses after the watch lost events
		{"a resync", func() {
			before := listings()
			h.nif.events <- lb.NetEvent{Kind: lb.NetResync}
			eventually(t, "the resync handled", func() bool { return listings() > before })
		}, 3},
	} {
		before := listings()
		step.do()
		if got := listings() - before; got > step.max {
			t.Errorf("%s with %d clusters asked the host for its addresses %d times; want at most %d", step.name, n, got, step.max)
		}
		allOn("after " + step.name)
	}
	if w := h.executorWarnings("on no interface of this host"); len(w) != 1 || !strings.Contains(w[0], "198.19.0.2, 198.19.0.4, 198.19.0.6") {
		t.Errorf("warnings of the clusters the operator did not put on: %q", w)
	}
}

// TestReplaceWarnsOfASilentServer: a configuration file's change says
// what the same change made by operations says: a server it adds that
// does not answer is named in its warnings.
func TestReplaceWarnsOfASilentServer(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	silent := netip.MustParseAddr("198.18.0.26")
	h.nif.setMAC(silent, nil)
	next := h.config()
	p := next.Cluster(netip.MustParseAddr(vip)).Port(80)
	p.Servers = append(p.Servers, lb.Server{Address: silent, Weight: 10})
	_, a, err := h.e.ReplaceWithNotes(context.Background(), next, false)
	if err != nil {
		t.Fatal(err)
	}
	want := "server 198.18.0.26 did not answer ARP within 50ms: it takes no connections until it does (is it up, and on eth0's segment?)"
	if len(a.Warnings) != 1 || a.Warnings[0] != want {
		t.Errorf("warnings %q; want %q", a.Warnings, want)
	}
	if st := h.serverState(vip + "@80@198.18.0.26"); st != lb.ServerUnresolved {
		t.Errorf("the silent server is %s, want unresolved", st)
	}
}

// TestNFANotHeldWarned: an NFA no interface of the host has (a typo, or
// taken off later) is named, with the fix, in the change that sets it and
// in the executor report while it is missing; an NFA the host has is not.
func TestNFANotHeldWarned(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	reported := func() []string { return h.executorWarnings("is not an address of this host") }
	if w := reported(); len(w) != 0 {
		t.Fatalf("warnings with the NFA on the host: %q", w)
	}
	set := func(nfa string) []string {
		t.Helper()
		o := op("executor", "set", "")
		o.Params = append(o.Params, config.P("nfa", nfa))
		a, err := h.e.ApplyWithNotes(context.Background(), []config.Op{o})
		if err != nil {
			t.Fatal(err)
		}
		return a.Warnings
	}
	want := "nfa 198.18.0.77 is not an address of this host: advisors cannot probe from it, and their servers keep their state " +
		"unwatched, until it is put on an interface (ip addr add 198.18.0.77/PREFIX dev eth0)"
	if w := set("198.18.0.77"); len(w) != 1 || w[0] != want {
		t.Errorf("setting an NFA the host does not have warned %q; want %q", w, want)
	}
	if w := reported(); len(w) != 1 || w[0] != want {
		t.Errorf("report with an NFA the host does not have: %q; want %q", w, want)
	}
	if w := set("198.18.0.2"); len(w) != 0 {
		t.Errorf("setting an NFA the host has warned %q", w)
	}
	// The NFA taken off the host later: the report says so until it is back.
	nfa := netip.MustParseAddr("198.18.0.2")
	h.nif.setHeld(nfa, false)
	if w := reported(); len(w) != 1 || !strings.HasPrefix(w[0], "nfa 198.18.0.2 is not an address of this host") {
		t.Errorf("report with the NFA taken off: %q", w)
	}
	h.nif.setHeld(nfa, true)
	if w := reported(); len(w) != 0 {
		t.Errorf("report with the NFA back: %q", w)
	}
}

// TestHeartbeatSourceNotHeldWarned: a heartbeat added before high
// availability has a role is not checked by binding its source (nothing
// runs yet), so a source the host does not have is named in the change
// and in the executor report, rather than only when "backup add" is
// refused; a source the host has is not.
func TestHeartbeatSourceNotHeldWarned(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	add := func(src string) []string {
		t.Helper()
		a, err := h.e.ApplyWithNotes(context.Background(), []config.Op{op("heartbeat", "add", "198.18.0.4", "source", src)})
		if err != nil {
			t.Fatal(err)
		}
		return a.Warnings
	}
	want := "heartbeat source 198.18.0.77 is not an address of this host: high availability cannot start with it " +
		"(highavailability backup add is refused) until it is put on an interface (ip addr add 198.18.0.77/PREFIX dev IF) " +
		"or the heartbeat is removed"
	if w := add("198.18.0.77"); len(w) != 1 || w[0] != want {
		t.Errorf("adding a heartbeat from an address the host does not have warned %q; want %q", w, want)
	}
	if w := h.executorWarnings("heartbeat source"); len(w) != 1 || w[0] != want {
		t.Errorf("report with that heartbeat: %q; want %q", w, want)
	}
	if _, err := h.e.Apply(context.Background(), []config.Op{op("heartbeat", "remove", "198.18.0.4", "source", "198.18.0.77")}); err != nil {
		t.Fatal(err)
	}
	if w := add("198.18.0.2"); len(w) != 0 {
		t.Errorf("adding a heartbeat from the NFA warned %q", w)
	}
	if w := h.executorWarnings("heartbeat source"); len(w) != 0 {
		t.Errorf("report with a heartbeat from the NFA: %q", w)
	}
}

// TestRefusalsChangeNothing sends bad operations; each must be refused
// naming the field, and leave the configuration, the state file and the
// executor exactly as they were.
func TestRefusalsChangeNothing(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	h.nif.offLink[netip.MustParseAddr("198.18.9.9")] = true
	h.nif.mu.Lock()
	h.nif.src = netip.MustParseAddr("198.18.0.1") // the interface's own address
	h.nif.mu.Unlock()

	cases := []struct {
		name  string
		ops   []config.Op
		field string
	}{
		{"unknown cluster", []config.Op{op("port", "add", "198.18.0.199@80")}, "cluster"},
		{"port 0", []config.Op{op("port", "add", vip+"@0")}, "port"},
		{"port 65536", []config.Op{op("port", "add", vip+"@65536")}, "port"},
		{"port not a number", []config.Op{op("port", "add", vip+"@www")}, "port"},
		{"weight above bound", []config.Op{withP(op("server", "set", vip+"@80@198.18.0.21"), config.P("weight", "21"))}, "weight"},
		{"negative weight", []config.Op{withP(op("server", "add", vip+"@80@198.18.0.23"), config.P("weight", "-1"))}, "weight"},
		{"VIP equal to NFA", []config.Op{op("cluster", "add", "198.18.0.2")}, "cluster"},
		{"NFA equal to a VIP", []config.Op{withP(op("executor", "set", ""), config.P("nfa", vip))}, "cluster"},
		{"server equal to VIP", []config.Op{op("server", "add", vip+"@80@"+vip)}, "server"},
		{"duplicate cluster", []config.Op{op("cluster", "add", vip)}, "cluster"},
		{"duplicate port", []config.Op{op("port", "add", vip+"@80")}, "port"},
		{"duplicate server", []config.Op{op("server", "add", vip+"@80@198.18.0.21")}, "server"},
		{"malformed cluster", []config.Op{op("cluster", "add", "198.18.0.300")}, "cluster"},
		{"malformed server", []config.Op{op("server", "add", vip+"@80@198.18.0")}, "server"},
		{"malformed NFA", []config.Op{withP(op("executor", "set", ""), config.P("nfa", "nfa"))}, "nfa"},
		{"unknown port", []config.Op{op("server", "add", vip+"@81@198.18.0.23")}, "port"},
		{"unknown server", []config.Op{op("server", "down", vip+"@80@198.18.0.29")}, "server"},
		{"bad protocol", []config.Op{withP(op("port", "add", vip+"@81"), config.P("protocol", "sctp"))}, "protocol"},
		{"cbr method", []config.Op{withP(op("port", "add", vip+"@81"), config.P("method", "cbr"))}, "method"},
		{"nat server without return address", []config.Op{withP(op("port", "add", vip+"@81"), config.P("method", "nat")),
			op("server", "add", vip+"@81@198.18.0.23")}, "returnaddress"},
		{"nat router off link", []config.Op{withP(op("port", "add", vip+"@81"), config.P("method", "nat")),
			withP(op("server", "add", vip+"@81@198.18.1.11"), config.P("returnaddress", "198.18.0.3"), config.P("router", "198.18.9.9"))}, "router"},
		{"nat server off link without router", []config.Op{withP(op("port", "add", vip+"@81"), config.P("method", "nat")),
			withP(op("server", "add", vip+"@81@198.18.9.9"), config.P("returnaddress", "198.18.0.3"))}, "server"},
		{"malformed return address", []config.Op{withP(op("server", "set", vip+"@80@198.18.0.21"), config.P("returnaddress", "198.18.0"))}, "returnaddress"},
		{"return address on a mac port", []config.Op{withP(op("server", "set", vip+"@80@198.18.0.21"), config.P("returnaddress", "198.18.0.3"))}, "returnaddress"},
		{"mapport 70000", []config.Op{withP(op("server", "set", vip+"@80@198.18.0.21"), config.P("mapport", "70000"))}, "mapport"},
		{"stickymask 33", []config.Op{withP(op("port", "set", vip+"@80"), config.P("stickymask", "33"))}, "stickymask"},
		{"crossport to a missing port", []config.Op{withP(op("port", "set", vip+"@80"), config.P("stickytime", "60"), config.P("crossport", "8443"))}, "crossport"},
		{"crossport without stickytime", []config.Op{withP(op("port", "set", vip+"@80"), config.P("crossport", "443"))}, "crossport"},
		{"bad selection algorithm", []config.Op{withP(op("port", "set", vip+"@80"), config.P("selectionalgorithm", "random"))}, "selectionalgorithm"},
		{"negative maxhalfopen", []config.Op{withP(op("port", "set", vip+"@80"), config.P("maxhalfopen", "-1"))}, "maxhalfopen"},
		{"malformed client gateway", []config.Op{withP(op("executor", "set", ""), config.P("clientgateway", "gw"))}, "clientgateway"},
		{"client gateway off link", []config.Op{withP(op("executor", "set", ""), config.P("clientgateway", "198.18.9.9"))}, "clientgateway"},
		{"IPv6 server on an IPv4 cluster", []config.Op{op("server", "add", vip+"@80@2001:2::21")}, "server"},
		{"IPv4 server on an IPv6 cluster", []config.Op{op("cluster", "add", "2001:2::100"), op("port", "add", "2001:2::100@80"),
			op("server", "add", "2001:2::100@80@198.18.0.23")}, "server"},
		{"weightbound 0", []config.Op{withP(op("port", "set", vip+"@80"), config.P("weightbound", "0"))}, "weightbound"},
		{"weightbound below weights", []config.Op{withP(op("port", "set", vip+"@80"), config.P("weightbound", "5"))}, "weight"},
		{"staletimeout 0", []config.Op{withP(op("port", "set", vip+"@80"), config.P("staletimeout", "0"))}, "staletimeout"},
		{"fintimeout negative", []config.Op{withP(op("executor", "set", ""), config.P("fintimeout", "-5"))}, "fintimeout"},
		{"link-local IPv6 cluster", []config.Op{op("cluster", "add", "fe80::1")}, "cluster"},
		{"wildcard matches nothing", []config.Op{op("server", "add", "@8080@198.18.0.23")}, "port"},
		{"unknown interface", []config.Op{op("executor", "stop", ""), withP(op("executor", "start", ""), config.P("interface", "nope0"))}, "interface"},
		{"server off link", []config.Op{op("server", "add", vip+"@80@198.18.9.9")}, "server"},
		{"return address the host's own connections leave from", []config.Op{withP(op("port", "add", vip+"@8080"), config.P("method", "nat")),
			withP(op("server", "add", vip+"@8080@198.18.0.23"), config.P("returnaddress", "198.18.0.1"))}, "returnaddress"},
		{"flag that does not belong", []config.Op{withP(op("cluster", "add", vip2), config.P("weight", "1"))}, "weight"},
		{"unknown object", []config.Op{op("rule", "add", vip)}, "object"},
		{"unknown action", []config.Op{op("cluster", "down", vip)}, "action"},
		{"second op bad: first not applied", []config.Op{op("cluster", "add", vip2), op("port", "add", vip2+"@0")}, "port"},
		{"empty batch", nil, "ops"},
		{"an advisorrequest the http advisor could not use", []config.Op{withP(op("advisor", "start", vip+"@80"), config.P("advisor", "http")),
			withP(op("server", "set", vip+"@80@198.18.0.21"), config.P("advisorrequest", "GET health"))}, "advisorrequest"},
		{"an advisorresponse the http advisor could not use", []config.Op{withP(op("advisor", "start", vip+"@80"), config.P("advisor", "http")),
			withP(op("server", "set", vip+"@80@198.18.0.21"), config.P("advisorresponse", "status=99"))}, "advisorresponse"},
	}
	if len(cases) < 20 {
		t.Fatal("too few cases")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			beforeCfg := h.config()
			beforeFile := stateFiles(t, h.dir)
			beforeDP := h.dp.state()
			beforeApplies := h.dp.applies
			beforeAddrs := len(h.nif.addresses)

			err := h.apply(c.ops...)
			if lb.FieldOf(err) != c.field {
				t.Fatalf("error %v, want a refusal naming %q", err, c.field)
			}
			var oe *config.OpError
			if !errors.As(err, &oe) {
				t.Fatalf("error %T is not an *OpError", err)
			}
			if !reflect.DeepEqual(h.config(), beforeCfg) {
				t.Error("configuration changed")
			}
			if after := stateFiles(t, h.dir); after != beforeFile {
				t.Error("state files changed")
			}
			if !reflect.DeepEqual(h.dp.state(), beforeDP) && h.dp.applies != beforeApplies {
				// Only an apply that was rolled back to the same state is
				// acceptable.
				t.Errorf("executor state changed: %d applies", h.dp.applies-beforeApplies)
			}
			if len(h.nif.addresses) != beforeAddrs || h.dp.removed {
				t.Error("host addresses or executor changed")
			}
		})
	}
}

func TestDatapathFailureRollsBack(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	before := h.dp.state()
	beforeCfg := h.config()
	h.dp.failNext = errors.New("map full")
	err := h.apply(op("server", "add", vip+"@80@198.18.0.23"))
	if err == nil || !strings.Contains(err.Error(), "map full") {
		t.Fatalf("error %v", err)
	}
	if !reflect.DeepEqual(h.config(), beforeCfg) {
		t.Error("configuration changed")
	}
	if !reflect.DeepEqual(h.dp.state(), before) {
		t.Error("executor not restored to the previous state")
	}
}

func TestStateSurvivesRestart(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	h.mustApply(op("server", "down", vip+"@80@198.18.0.22"))
	before := h.config()
	beforeDP := h.dp.state()
	h.dp.loaded = false
	h.restart()
	if !reflect.DeepEqual(h.config(), before) {
		t.Fatalf("config after restart:\n%+v\nwant\n%+v", h.config(), before)
	}
	after := h.dp.state()
	if after == nil {
		t.Fatal("restarted engine did not re-apply the executor state")
	}
	// Same ids for the same objects, so the pinned maps stay valid.
	ids := func(dp *lb.Dataplane) map[string]uint32 {
		m := map[string]uint32{}
		for _, b := range dp.Backends {
			m[b.Address.String()+"/"+string(rune('0'+b.Service))] = b.ID
		}
		return m
	}
	if !reflect.DeepEqual(ids(after), ids(beforeDP)) {
		t.Errorf("backend ids changed across restart: %v vs %v", ids(after), ids(beforeDP))
	}
}

func TestExecutorStopRemovesAndStartRestores(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	h.mustApply(op("executor", "stop", ""))
	if !h.dp.removed {
		t.Fatal("executor not removed")
	}
	if len(h.nif.addresses) != 0 {
		t.Errorf("cluster addresses left: %v", h.nif.addresses)
	}
	if st := h.status(Query{}); st.Config.Executor.Started || st.Executor.Attached || st.Executor.Loaded {
		t.Fatalf("executor %+v, started %v", st.Executor, st.Config.Executor.Started)
	}
	// Configuration changes are accepted while stopped, and applied on start.
	h.mustApply(op("server", "add", vip+"@80@198.18.0.23"))
	h.dp.removed = false
	h.mustApply(op("executor", "start", ""))
	if n := len(h.dp.state().Backends); n != 5 {
		t.Errorf("%d backends after start, want 5", n)
	}
	if h.nif.addresses[netip.MustParseAddr(vip)] != "eth0" {
		t.Error("cluster address not restored")
	}
}

// TestExecutorStartWithoutEthernet: an interface with no Ethernet address
// (lo's is all zero, a tunnel has none) cannot carry the executor: the
// start is refused, naming it, before the executor is loaded.
func TestExecutorStartWithoutEthernet(t *testing.T) {
	for _, mac := range []string{"00:00:00:00:00:00", "none"} {
		t.Run(mac, func(t *testing.T) {
			h := newHarness(t, t.TempDir())
			h.nif.mu.Lock()
			h.nif.mac = mac
			h.nif.mu.Unlock()
			err := h.apply(op("executor", "start", "", "interface", "eth0"))
			if err == nil || !strings.Contains(err.Error(), "eth0 has no Ethernet address") {
				t.Fatalf("executor start: %v, want it refused", err)
			}
			if h.opens != 0 || h.status(Query{}).Config.Executor.Started {
				t.Errorf("refused start: executor loaded %d times, started %v", h.opens, h.status(Query{}).Config.Executor.Started)
			}
		})
	}
}

// TestExecutorStartOnAnotherProgram: the executor's interface runs an XDP
// program dlbd did not attach. The start is refused with an error that
// says whose program it is and how to free the interface (the kernel's
// own words kept at the end), and nothing of it is applied: the loaded
// executor is removed again, no address is configured. Once the interface
// is free, the same start succeeds. An attach that fails for another
// reason keeps its error as it is.
func TestExecutorStartOnAnotherProgram(t *testing.T) {
	busy := fmt.Errorf("attaching XDP program: generic mode: create link: %w", syscall.EBUSY)
	cases := []struct {
		name      string
		xdp       lb.XDPProgram // what the interface reports
		described lb.XDPProgram // what the executor adds to it
		want      []string
		not       []string
	}{
		{name: "another tool's, generic, through netlink",
			xdp:       lb.XDPProgram{Attached: true, ID: 41, Mode: lb.XDPGeneric},
			described: lb.XDPProgram{Name: "xdp_fw"},
			want: []string{`eth0 already runs XDP program 41 ("xdp_fw") in generic mode, attached by another tool`,
				"dlbd does not replace a program it did not attach", `detach it with "ip link set dev eth0 xdpgeneric off"`,
				"or start the executor on another interface", "device or resource busy"}},
		{name: "another tool's, native, name unreadable",
			xdp:  lb.XDPProgram{Attached: true, ID: 42, Mode: lb.XDPNative},
			want: []string{"eth0 already runs XDP program 42 in native mode, attached by another tool", `"ip link set dev eth0 xdpdrv off"`}},
		{name: "held by a BPF link",
			xdp:       lb.XDPProgram{Attached: true, ID: 43, Mode: lb.XDPGeneric},
			described: lb.XDPProgram{Name: "fw", LinkID: 9},
			want:      []string{"it is held by BPF link 9: the program that made the link must release it", "bpftool link show id 9"},
			not:       []string{"ip link set"}},
		{name: "another dlb executor",
			xdp:       lb.XDPProgram{Attached: true, ID: 44, Mode: lb.XDPGeneric},
			described: lb.XDPProgram{Name: "dlb_xdp", LinkID: 12, Executor: true},
			want:      []string{`XDP program 44 ("dlb_xdp")`, "another dlb executor's, not the one pinned in this dlbd's --pin-dir", "BPF link 12"},
			not:       []string{"another tool"}},
		{name: "several programs",
			xdp:  lb.XDPProgram{Attached: true, Mode: lb.XDPAuto},
			want: []string{"eth0 already runs an XDP program, attached by another tool", `"ip link set dev eth0 xdp off"`}},
		{name: "no program: another failure",
			want: []string{"interface: attaching XDP program: generic mode: create link: device or resource busy"},
			not:  []string{"already runs", "does not replace"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, t.TempDir())
			cl := op("cluster", "add", vip, "configure", "yes")
			h.mustApply(cl, op("port", "add", vip+"@80"), op("server", "add", vip+"@80@198.18.0.21"))
			h.nif.setXDP(c.xdp)
			h.dp.mu.Lock()
			h.dp.occupied, h.dp.described = busy, c.described
			h.dp.mu.Unlock()
			start := op("executor", "start", "", "interface", "eth0")
			err := h.apply(start)
			if err == nil {
				t.Fatal("executor start succeeded on an interface running another program")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
			for _, n := range c.not {
				if strings.Contains(err.Error(), n) {
					t.Errorf("error %q\nsays %q", err, n)
				}
			}
			if st := h.status(Query{}); st.Config.Executor.Started || st.Executor.Attached || st.Executor.Loaded {
				t.Errorf("after the refused start: started %v, executor %+v", st.Config.Executor.Started, st.Executor)
			}
			h.dp.mu.Lock()
			removed := h.dp.removed
			h.dp.occupied, h.dp.removed = nil, false
			h.dp.mu.Unlock()
			if !removed {
				t.Error("the executor loaded for the refused start was not removed")
			}
			h.nif.mu.Lock()
			addrs := len(h.nif.addresses)
			h.nif.xdp = lb.XDPProgram{}
			h.nif.mu.Unlock()
			if addrs != 0 {
				t.Errorf("addresses configured by the refused start: %v", h.nif.addresses)
			}
			h.mustApply(start)
			if h.nif.addresses[netip.MustParseAddr(vip)] != "eth0" {
				t.Error("cluster address not configured once the interface was free")
			}
		})
	}
}

// lockedStateDir makes a state directory and locks it as dlbd does,
// until the test ends.
func lockedStateDir(t *testing.T) (string, *lock.Lock) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := lock.File(filepath.Join(dir, "dlbd.lock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Release() })
	return dir, l
}

// TestStateThatCannotBeSaved: the state directory is deleted and a file
// takes its place, so that each tick fails to write the state again. The
// failure is logged once, not each tick, with the remedy; the executor
// report warns while it lasts; once the file is gone, the next tick
// writes the state again, and both say so.
func TestStateThatCannotBeSaved(t *testing.T) {
	dir, l := lockedStateDir(t)
	var logs testutil.LogBuffer
	h := newHarnessWith(t, dir, func(o *Options) {
		o.StateLock, o.TickInterval = l, 20*time.Millisecond
		logTo(&logs, false)(o)
	})
	base(h)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const failed = `msg="saving the state"`
	eventually(t, "the failure logged", func() bool { return strings.Contains(logs.String(), failed) })
	eventually(t, "the report's warning", func() bool { return len(h.executorWarnings("the state cannot be saved")) == 1 })
	if w := h.executorWarnings("the state cannot be saved")[0]; !strings.Contains(w, "not a directory") || !strings.Contains(w, "dlbctl file save FILE") {
		t.Errorf("warning %q does not say why or what to do", w)
	}
	time.Sleep(20 * 20 * time.Millisecond)
	if n := strings.Count(logs.String(), failed); n != 1 {
		t.Errorf("the same failure logged %d times in 20 ticks, want once:\n%s", n, logs.String())
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	eventually(t, "saved again", func() bool { return strings.Contains(logs.String(), `msg="the state is saved again"`) })
	if w := h.executorWarnings("the state cannot be saved"); len(w) != 0 {
		t.Errorf("saved again, the report still warns: %v", w)
	}
	if _, err := os.Stat(filepath.Join(dir, "state.json")); err != nil {
		t.Errorf("the state was not written again: %v", err)
	}
}

// TestStateDeletedUnderDlbd: the state directory is deleted while dlbd
// runs. Its lock and its whole state are written again (within a tick, or
// at the next change, whichever comes first), so that a restart finds the
// configuration, the change included. If another dlbd took the directory
// meanwhile, changes are refused rather than saved where no one reads
// them.
func TestStateDeletedUnderDlbd(t *testing.T) {
	for _, c := range []struct {
		name  string
		tick  bool // wait for a tick before the change
		taken bool // another process locks the directory first
		file  bool // a file where the directory was: nothing can be written
	}{
		{name: "found by a tick", tick: true},
		{name: "found by the next change"},
		{name: "taken by another dlbd", taken: true},
		{name: "replaced by a file", file: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, l := lockedStateDir(t)
			var err error
			tick := time.Hour
			if c.tick {
				tick = 20 * time.Millisecond
			}
			h := newHarnessWith(t, dir, func(o *Options) { o.StateLock, o.TickInterval = l, tick })
			base(h)
			before := h.config()
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			if c.tick {
				eventually(t, "the state written again", func() bool {
					_, err := os.Stat(filepath.Join(dir, "state.json"))
					// The engine renews the lock on its goroutine: ask there.
					held := false
					if derr := h.e.do(context.Background(), func() { held = l.StillHeld() }); derr != nil {
						return false
					}
					return err == nil && held
				})
			}
			if c.taken {
				if err := os.MkdirAll(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				other, err := lock.File(filepath.Join(dir, "dlbd.lock"))
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = other.Release() }()
			}
			if c.file {
				if err := os.WriteFile(dir, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			change := op("server", "add", vip+"@80@198.18.0.23")
			err = h.apply(change)
			if c.taken || c.file {
				want := "locked by another process"
				if c.file {
					want = "not a directory"
				}
				if err == nil || !strings.Contains(err.Error(), "saving the state") || !strings.Contains(err.Error(), want) ||
					!strings.Contains(err.Error(), `"dlbctl file save FILE" keeps a copy`) {
					t.Fatalf("change with the state directory unusable: %v, want it refused (%s)", err, want)
				}
				if !reflect.DeepEqual(h.config(), before) {
					t.Error("the refused change was applied")
				}
				return
			}
			if err != nil {
				t.Fatalf("change after the state directory was deleted: %v", err)
			}
			if !l.StillHeld() {
				t.Error("the state directory's lock was not taken again")
			}
			want := h.config()
			h.restart()
			if got := h.config(); !reflect.DeepEqual(got, want) {
				t.Errorf("after a restart:\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

// TestRestartReportsAdoptedConnections: right after a restart, before the
// first periodic sweep (an hour away here), the executor report counts the
// connections of the adopted tables.
func TestRestartReportsAdoptedConnections(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	h.dp.mu.Lock()
	h.dp.swept = lb.SweepResult{Entries: 4242, Active: map[uint32]uint64{}}
	h.dp.mu.Unlock()
	h.restart()
	if n := h.status(Query{}).Executor.Connections; n != 4242 {
		t.Errorf("executor status right after restart: %d connections, want 4242", n)
	}
}

// stateFiles returns the contents of every file in the state directory.
func stateFiles(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s:\n%s\n", e.Name(), data)
	}
	return b.String()
}

// TestBusyWhileLoadingTheExecutor: while the management loop loads the
// executor (its tables are allocated whole: seconds for large ones), writes
// the whole state into it and attaches it, it answers nothing, and Busy
// says what it is doing and for how long; before and after, it is not
// busy. (Busy ended with the loading: in CI, the writes and the attach
// after it kept the watchdog unfed for 501 ms of its 500.)
func TestBusyWhileLoadingTheExecutor(t *testing.T) {
	for _, phase := range []string{"loading", "attaching"} {
		t.Run(phase, func(t *testing.T) {
			entered, release := make(chan struct{}), make(chan struct{})
			hold := func() {
				close(entered)
				<-release
			}
			var h *harness
			h = newHarnessWith(t, t.TempDir(), func(o *Options) {
				open := o.OpenDatapath
				o.OpenDatapath = func() (Datapath, error) {
					if phase == "loading" {
						hold()
					} else {
						h.dp.onAttach = hold
					}
					return open()
				}
			})
			if what, _, busy := h.e.Busy(); busy {
				t.Fatalf("busy with %q before anything was asked", what)
			}
			applied := make(chan error, 1)
			go func() { applied <- h.apply(op("executor", "start", "", "interface", "eth0")) }()
			<-entered
			time.Sleep(30 * time.Millisecond)
			what, long, busy := h.e.Busy()
			if !busy || what != "loading the executor" || long < 30*time.Millisecond || long > time.Minute {
				t.Errorf("while %s: Busy() = %q, %v, %v; want loading the executor, for 30ms or more", phase, what, long, busy)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_, err := h.e.Status(ctx, Query{})
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("status while %s: %v, want no answer (the loop is busy)", phase, err)
			}
			close(release)
			if err := <-applied; err != nil {
				t.Fatal(err)
			}
			if what, _, busy := h.e.Busy(); busy {
				t.Errorf("still busy with %q after the executor was started", what)
			}
		})
	}
}

// TestFoundAddressesStay: an address the interface had before a cluster
// wanted it configured (the operator's) is used as it is and stays on when
// the cluster goes, when the cluster stops asking for it, and when the
// executor stops, across a restart of the engine; the engine's own go.
func TestFoundAddressesStay(t *testing.T) {
	const theirs, ours = "198.18.0.101", "198.18.0.102"
	on := func(h *harness, a string) bool {
		h.nif.mu.Lock()
		defer h.nif.mu.Unlock()
		return h.nif.addresses[netip.MustParseAddr(a)] == "eth0"
	}
	for _, tc := range []struct {
		name    string
		restart bool
		undo    []config.Op // what makes the addresses unwanted
	}{
		{"cluster remove", false, []config.Op{op("cluster", "remove", theirs), op("cluster", "remove", ours)}},
		{"cluster remove after a restart", true, []config.Op{op("cluster", "remove", theirs), op("cluster", "remove", ours)}},
		{"configure no", false, []config.Op{op("cluster", "set", theirs, "configure", "no"), op("cluster", "set", ours, "configure", "no")}},
		{"executor stop", true, []config.Op{op("executor", "stop", "")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, t.TempDir())
			h.nif.mu.Lock()
			h.nif.addresses[netip.MustParseAddr(theirs)] = "eth0"
			h.nif.mu.Unlock()
			h.mustApply(op("executor", "start", "", "interface", "eth0"),
				op("cluster", "add", theirs, "configure", "yes"), op("cluster", "add", ours, "configure", "yes"))
			if !on(h, theirs) || !on(h, ours) {
				t.Fatalf("addresses on: %v", h.nif.addresses)
			}
			if tc.restart {
				h.restart()
			}
			h.mustApply(tc.undo...)
			if !on(h, theirs) {
				t.Errorf("the operator's address %s was taken off", theirs)
			}
			if on(h, ours) {
				t.Errorf("the address dlb put on, %s, stayed", ours)
			}
		})
	}
}

// TestRefusedChangeTakesItsAddressesOff: a change that put an address on
// the interface (a cluster's, a NAT return address) and then failed (here
// the next address it wanted would not go on) takes it off again, and
// puts back one it took off: nothing of it is left on the host, as nothing
// of it is left in the configuration.
func TestRefusedChangeTakesItsAddressesOff(t *testing.T) {
	const first, refused, gone = "198.18.0.101", "198.18.0.102", "198.18.0.103"
	natSrv := op("server", "add", vip+"@81@"+natSrv.String(), "returnaddress", retAddr.String(), "router", router.String())
	for _, tc := range []struct {
		name   string
		change []config.Op
		off    []string // on before the change, and after its refusal
		on     []string // put on by the change, off after its refusal
	}{
		{"a cluster added, one removed", []config.Op{op("cluster", "remove", gone),
			op("cluster", "add", first, "configure", "yes"), op("cluster", "add", refused, "configure", "yes")},
			[]string{gone}, []string{first}},
		{"a NAT return address", []config.Op{op("port", "add", vip+"@81", "method", "nat"), natSrv,
			op("cluster", "add", refused, "configure", "yes")},
			[]string{gone, vip}, []string{retAddr.String()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, t.TempDir())
			base(h)
			h.nif.setMAC(router, routerHW)
			h.mustApply(op("cluster", "add", gone, "configure", "yes"))
			h.nif.mu.Lock()
			h.nif.refuse = map[netip.Addr]bool{netip.MustParseAddr(refused): true}
			h.nif.mu.Unlock()
			clusters := len(h.config().Clusters)
			for range 3 { // the order in which a change puts addresses on is a map's
				_, err := h.e.Apply(context.Background(), tc.change)
				if err == nil || !strings.Contains(err.Error(), "refused by the test") {
					t.Fatalf("change: %v; want refused", err)
				}
				for _, a := range tc.off {
					if !h.nif.has(a) {
						t.Errorf("after the refused change %s is not on the interface: %v", a, h.nif.addresses)
					}
				}
				for _, a := range append(tc.on, refused) {
					if h.nif.has(a) {
						t.Errorf("after the refused change %s is on the interface: %v", a, h.nif.addresses)
					}
				}
				if n := len(h.config().Clusters); n != clusters {
					t.Errorf("%d clusters after the refused change; want %d", n, clusters)
				}
			}
			h.restart()
			h.nif.mu.Lock()
			h.nif.refuse = nil
			h.nif.mu.Unlock()
			h.mustApply(op("cluster", "remove", gone))
			if h.nif.has(gone) {
				t.Errorf("%s stayed after its cluster went: %v", gone, h.nif.addresses)
			}
		})
	}
}

// TestUnreachableClusterWarned: a cluster address that dlb does not put on
// the interface and that no interface of the host has is one nothing on
// the host answers ARP for: the change that adds it and the executor
// report say so, with both fixes, until it is configured, put on an
// interface or removed. A configured one, or one the host has, is not
// named; neither is anything while the executor is stopped.
func TestUnreachableClusterWarned(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h) // vip, configured
	const key = "on no interface of this host"
	reported := func() []string { return h.executorWarnings(key) }
	apply := func(ops ...config.Op) []string {
		t.Helper()
		a, err := h.e.ApplyWithNotes(context.Background(), ops)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, w := range a.Warnings {
			if strings.Contains(w, key) {
				out = append(out, w)
			}
		}
		return out
	}
	if w := reported(); len(w) != 0 {
		t.Fatalf("warnings with the cluster configured: %q", w)
	}
	want := "cluster " + vip2 + " is on no interface of this host and dlb does not put it on one: ARP requests and neighbour " +
		"solicitations for it go unanswered, so clients reach it only through a router that routes it to this host; let dlb put it " +
		"on eth0 (dlbctl cluster set " + vip2 + " --configure) or put it there yourself (ip addr add " + vip2 + "/32 dev eth0)"
	if w := apply(op("cluster", "add", vip2)); len(w) != 1 || w[0] != want {
		t.Errorf("adding a cluster the host does not have warned %q; want %q", w, want)
	}
	if w := reported(); len(w) != 1 || w[0] != want {
		t.Errorf("report: %q; want %q", w, want)
	}
	// A change elsewhere does not repeat it; the report keeps it.
	if w := apply(op("server", "set", vip+"@80@198.18.0.21", "weight", "5")); len(w) != 0 {
		t.Errorf("a change to another cluster warned %q", w)
	}
	// Several: named together.
	const vip3, vip4, vip5 = "198.18.0.103", "198.18.0.104", "198.18.0.105"
	w := apply(op("cluster", "add", vip3+"+"+vip4+"+"+vip5))
	if len(w) != 1 || !strings.HasPrefix(w[0], "clusters "+vip3+", "+vip4+", "+vip5+" are on no interface") ||
		!strings.Contains(w[0], "--configure, and so on)") {
		t.Errorf("adding three clusters warned %q", w)
	}
	if w := reported(); len(w) != 1 || !strings.HasPrefix(w[0], "clusters "+vip2+", "+vip3+", "+vip4+", and 1 more are on no interface") {
		t.Errorf("report with four: %q", w)
	}
	h.mustApply(op("cluster", "remove", vip3+"+"+vip4+"+"+vip5))
	// The operator puts it on an interface (or the loopback): fine.
	v2 := netip.MustParseAddr(vip2)
	h.nif.setHeld(v2, true)
	if w := reported(); len(w) != 0 {
		t.Errorf("report with the address on the host: %q", w)
	}
	h.nif.setHeld(v2, false)
	if w := reported(); len(w) != 1 {
		t.Errorf("report with the address taken off again: %q", w)
	}
	// Configured by dlb: fine.
	if w := apply(op("cluster", "set", vip2, "configure", "yes")); len(w) != 0 {
		t.Errorf("configuring it warned %q", w)
	}
	if w := reported(); len(w) != 0 {
		t.Errorf("report with the cluster configured: %q", w)
	}
	// Executor stopped: nothing to reach.
	h.mustApply(op("cluster", "set", vip2, "configure", "no"))
	h.mustApply(op("executor", "stop", ""))
	if w := reported(); len(w) != 0 {
		t.Errorf("report with the executor stopped: %q", w)
	}
	// Started again: the change says it.
	start := op("executor", "start", "")
	start.Params = append(start.Params, config.P("interface", "eth0"))
	if w := apply(start); len(w) != 1 || w[0] != want {
		t.Errorf("starting the executor warned %q; want %q", w, want)
	}
	// An IPv6 one: put on by hand, deprecated, as dlbd puts its own.
	want6 := "ip addr add 2001:2::100/128 dev eth0 preferred_lft 0)"
	if w := apply(op("cluster", "add", "2001:2::100")); len(w) != 1 || !strings.HasSuffix(w[0], want6) {
		t.Errorf("adding an IPv6 cluster the host does not have warned %q; want the fix %q", w, want6)
	}
}

// TestOwnIPv6AddressesDeprecatedAtStart: an IPv6 cluster address an
// older dlbd put on as preferred (the host's own connections then left
// from it, and hung) is deprecated when dlbd starts; one the operator put
// on is left as it is (and warned of).
func TestOwnIPv6AddressesDeprecatedAtStart(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	const own, operators = "2001:2::100", "2001:2::101"
	h.nif.mu.Lock()
	h.nif.addresses[netip.MustParseAddr(operators)] = "eth0"
	h.nif.mu.Unlock()
	h.mustApply(op("cluster", "add", own, "configure", "yes"), op("cluster", "add", operators, "configure", "yes"))
	if !h.nif.has(own) || !h.nif.has(operators) {
		t.Fatal("the IPv6 cluster addresses are not on")
	}
	h.nif.mu.Lock()
	h.nif.preferred = map[netip.Addr]bool{netip.MustParseAddr(own): true, netip.MustParseAddr(operators): true}
	h.nif.mu.Unlock()
	h.restart()
	eventually(t, "dlbd's own address deprecated", func() bool {
		h.nif.mu.Lock()
		defer h.nif.mu.Unlock()
		return !h.nif.preferred[netip.MustParseAddr(own)]
	})
	h.nif.mu.Lock()
	defer h.nif.mu.Unlock()
	if !h.nif.preferred[netip.MustParseAddr(operators)] {
		t.Error("the operator's address was changed")
	}
}

// TestAnnouncedClusterNotWarned: a cluster to be announced over BGP is
// reached through the routers, even before BGP itself is set: not named
// as one nothing answers ARP for.
func TestAnnouncedClusterNotWarned(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	a, err := h.e.ApplyWithNotes(context.Background(), []config.Op{op("cluster", "add", vip2, "announce", "yes")})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range append(a.Warnings, h.executorWarnings("")...) {
		if strings.Contains(w, "on no interface of this host") {
			t.Errorf("warned %q", w)
		}
	}
	if w := h.executorWarnings("on no interface"); len(w) != 0 {
		t.Errorf("report: %q", w)
	}
	h.mustApply(op("cluster", "set", vip2, "announce", "no"))
	if w := h.executorWarnings("on no interface"); len(w) != 1 {
		t.Errorf("report with the announcement off: %q; want one warning", w)
	}
}
