package dispatcher

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// fakeAnswerers answers the conflict checks: the MACs set per address,
// and records what was asked.
type fakeAnswerers struct {
	mu    sync.Mutex
	macs  map[netip.Addr][]net.HardwareAddr
	asked map[netip.Addr]netip.Addr // address -> source
	most  int                       // the most addresses one call asked about
	calls int
}

func (f *fakeAnswerers) answer(_ context.Context, src netip.Addr, addrs []netip.Addr, _ time.Duration) (map[netip.Addr][]net.HardwareAddr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[netip.Addr][]net.HardwareAddr{}
	f.most = max(f.most, len(addrs))
	f.calls++
	for _, a := range addrs {
		f.asked[a] = src
		if m := f.macs[a]; len(m) > 0 {
			out[a] = slices.Clone(m)
		}
	}
	return out, nil
}

func (f *fakeAnswerers) set(addr netip.Addr, macs ...net.HardwareAddr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.macs[addr] = macs
}

// conflictHarness is a harness whose conflict checks, every 20 ms, ask the
// fakeAnswerers returned, logging to the buffer returned.
func conflictHarness(t *testing.T) (*harness, *fakeAnswerers, *testutil.LogBuffer) {
	logs := &testutil.LogBuffer{}
	fa := &fakeAnswerers{macs: map[netip.Addr][]net.HardwareAddr{}, asked: map[netip.Addr]netip.Addr{}}
	h := newHarnessWith(t, t.TempDir(), func(o *Options) {
		logTo(logs, false)(o)
		o.AddressAnswerers = fa.answer
		o.ConflictInterval = 20 * time.Millisecond
	})
	return h, fa, logs
}

// TestAddressConflicts: a host that answers ARP for a cluster address the
// dispatcher holds (a server without arp_ignore) is found within a check
// interval, named in the executor report with the fix, logged once, and
// forgotten when it stops answering. Only addresses the dispatcher holds
// are asked about, from its NFA.
func TestAddressConflicts(t *testing.T) {
	h, fa, logs := conflictHarness(t)
	base(h)
	h.mustApply(op("cluster", "add", vip2)) // not configured on the interface: not asked about
	v := netip.MustParseAddr(vip)
	server := net.HardwareAddr{2, 0xd1, 0xb0, 0, 0, 0x15}
	warned := func() []string { return h.executorWarnings("answers ARP") }
	fa.set(v, server)
	eventually(t, "the conflict reported", func() bool { return len(warned()) == 1 })
	if w := warned()[0]; !strings.Contains(w, vip) || !strings.Contains(w, server.String()) || !strings.Contains(w, "arp_ignore=1") {
		t.Errorf("warning %q; want the address, the MAC and the fix", w)
	}
	time.Sleep(100 * time.Millisecond) // several more checks
	if n := strings.Count(logs.String(), "another host answers ARP"); n != 1 {
		t.Errorf("logged the conflict %d times; want once", n)
	}
	fa.mu.Lock()
	asked := askedList(fa.asked)
	fa.mu.Unlock()
	if want := []string{vip + " from 198.18.0.2"}; !slices.Equal(asked, want) {
		t.Errorf("asked %v; want %v", asked, want)
	}
	fa.set(v)
	eventually(t, "the conflict forgotten", func() bool { return len(warned()) == 0 })
	if !strings.Contains(logs.String(), "no other host answers ARP for the address any more") {
		t.Error("the end of the conflict was not logged")
	}
}

func askedList(m map[netip.Addr]netip.Addr) []string {
	var out []string
	for a, src := range m {
		out = append(out, a.String()+" from "+src.String())
	}
	slices.Sort(out)
	return out
}

// TestAddressConflictsIPv6: an IPv6 address the dispatcher holds is asked
// about from the IPv6 NFA (the IPv4 ones from the IPv4 NFA, in the same
// round); another host advertising it is reported as a neighbour
// discovery conflict, with its own fix, and logged once.
func TestAddressConflictsIPv6(t *testing.T) {
	h, fa, logs := conflictHarness(t)
	h.nif.mu.Lock()
	h.nif.macs[netip.MustParseAddr("2001:2::21")] = net.HardwareAddr{2, 0, 0, 0, 0, 0x21}
	h.nif.mu.Unlock()
	base(h)
	const vip6 = "2001:2::100"
	h.mustApply(op("executor", "set", "", "nfa", "2001:2::2"), op("cluster", "add", vip6, "configure", "yes"),
		op("port", "add", vip6+"@80"), op("server", "add", vip6+"@80@2001:2::21"))
	v6 := netip.MustParseAddr(vip6)
	other := net.HardwareAddr{2, 0xd1, 0xb0, 0, 0, 0x99}
	fa.set(v6, other)
	var w []string
	eventually(t, "the IPv6 conflict reported", func() bool {
		w = h.executorWarnings("answers neighbour solicitations")
		return len(w) == 1
	})
	if !strings.Contains(w[0], vip6) || !strings.Contains(w[0], other.String()) || !strings.Contains(w[0], "take it off there") {
		t.Errorf("warning %q; want the address, the MAC and the fix", w[0])
	}
	time.Sleep(100 * time.Millisecond)
	if n := strings.Count(logs.String(), "another host answers neighbour solicitations"); n != 1 {
		t.Errorf("logged the conflict %d times; want once", n)
	}
	fa.mu.Lock()
	asked := askedList(fa.asked)
	fa.mu.Unlock()
	if want := []string{vip + " from 198.18.0.2", vip6 + " from 2001:2::2"}; !slices.Equal(asked, want) {
		t.Errorf("asked %v; want %v", asked, want)
	}
}

// TestAddressConflictsHAPeer: under high availability, the active asks
// who answers for the peer's address too, and tells the peer's host
// answering for an address it serves (the peer's dlbd not running to take
// it off) from a server's: its own warning and fix; a server answering
// beside the peer is the usual conflict.
func TestAddressConflictsHAPeer(t *testing.T) {
	logs := &testutil.LogBuffer{}
	fa := &fakeAnswerers{macs: map[netip.Addr][]net.HardwareAddr{}, asked: map[netip.Addr]netip.Addr{}}
	f := newFakeHA()
	h := newHarnessWith(t, t.TempDir(), func(o *Options) {
		logTo(logs, false)(o)
		o.AddressAnswerers = fa.answer
		o.ConflictInterval = 20 * time.Millisecond
		o.HA = f
	})
	base(h)
	h.mustApply(haOps("primary")...)
	f.set(lb.GroupLocal, lb.HAActive)
	eventually(t, "the cluster address on", func() bool { return h.nif.has(vip) })
	peer := netip.MustParseAddr("198.18.0.4") // haOps' heartbeat destination
	peerMAC, server := net.HardwareAddr{2, 0xd1, 0xb0, 0, 0, 4}, net.HardwareAddr{2, 0xd1, 0xb0, 0, 0, 0x15}
	fa.set(peer, peerMAC)
	fa.set(netip.MustParseAddr(vip), peerMAC)
	var w []string
	eventually(t, "the peer's answer reported", func() bool {
		w = h.executorWarnings("answers ARP")
		return len(w) == 1
	})
	if !strings.Contains(w[0], "the high-availability peer 198.18.0.4 ("+peerMAC.String()+") answers ARP for "+vip) ||
		!strings.Contains(w[0], "its dlbd takes it off") {
		t.Errorf("warning %q; want the peer named, and its fix", w[0])
	}
	if !strings.Contains(logs.String(), "the high-availability peer answers ARP") {
		t.Error("the peer's answer was not logged as the peer's")
	}
	fa.mu.Lock()
	asked := askedList(fa.asked)
	fa.mu.Unlock()
	if want := []string{vip + " from 198.18.0.2", "198.18.0.4 from 198.18.0.2"}; !slices.Equal(asked, want) {
		t.Errorf("asked %v; want %v", asked, want)
	}
	fa.set(netip.MustParseAddr(vip), peerMAC, server)
	eventually(t, "a server beside the peer reported as the usual conflict", func() bool {
		w = h.executorWarnings("answers ARP")
		return len(w) == 1 && strings.HasPrefix(w[0], "another host answers ARP for "+vip) && strings.Contains(w[0], server.String())
	})

	// The group goes standby (a partition healed): this dispatcher no
	// longer serves the address, and what was found for it is not
	// reported, at once, nor after the next rounds (which ask nothing).
	f.set(lb.GroupLocal, lb.HAStandby)
	eventually(t, "the cluster address off", func() bool { return !h.nif.has(vip) })
	if w := h.executorWarnings("answers ARP"); len(w) != 0 {
		t.Errorf("standby: warnings %q", w)
	}
	time.Sleep(100 * time.Millisecond) // rounds of checks
	if w := h.executorWarnings("answers ARP"); len(w) != 0 {
		t.Errorf("standby, after the next rounds: warnings %q", w)
	}
	var found int
	if err := h.e.do(context.Background(), func() { found = len(h.e.conflicts.found) }); err != nil {
		t.Fatal(err)
	}
	if found != 0 {
		t.Errorf("standby: %d addresses still recorded as answered for", found)
	}
}

// TestAddressConflictsNotTheHolder: the NFA on another interface of the
// segment than the executor's (the executor moved to a second NIC) hears
// the executor's interface answer for the addresses it holds: no
// conflict. (It was reported as another host, with a server's fix.)
func TestAddressConflictsNotTheHolder(t *testing.T) {
	h, fa, _ := conflictHarness(t)
	base(h)
	v := netip.MustParseAddr(vip)
	own, server := net.HardwareAddr{2, 0, 0, 0, 0, 0xaa}, net.HardwareAddr{2, 0xd1, 0xb0, 0, 0, 0x15} // eth0's, a server's
	fa.set(v, own, server)
	eventually(t, "the server reported", func() bool { return len(h.executorWarnings("answers ARP")) == 1 })
	if w := h.executorWarnings("answers ARP")[0]; !strings.Contains(w, server.String()) || strings.Contains(w, own.String()) {
		t.Errorf("warning %q; want the server MAC, not the executor interface", w)
	}
	fa.set(v, own)
	eventually(t, "no conflict with the executor's interface alone answering", func() bool {
		return len(h.executorWarnings("answers ARP")) == 0
	})
}

// TestAddressConflictsManyAddresses: with more addresses than
// conflictBatch, a round asks about conflictBatch of them, the next round
// the next ones, every address in turn, and the addresses found answered
// for again: a conflict found stays reported, and goes the next round
// after no other host answers. Asked all at once, 4,000 addresses
// overflowed the interface's queue and every round failed.
func TestAddressConflictsManyAddresses(t *testing.T) {
	const n = conflictBatch*8 + 10
	h, fa, _ := conflictHarness(t)
	base(h)
	var ops []config.Op
	for i := range n - 1 { // and base's vip
		ops = append(ops, op("cluster", "add", netip.AddrFrom4([4]byte{198, 19, byte(i / 250), byte(i%250 + 1)}).String(), "configure", "yes"))
	}
	h.mustApply(ops...)
	server := net.HardwareAddr{2, 0xd1, 0xb0, 0, 0, 0x15}
	first := netip.MustParseAddr("198.19.0.1")
	fa.set(first, server)
	warned := func() []string { return h.executorWarnings("answers ARP") }
	eventually(t, "the conflict reported", func() bool { return len(warned()) == 1 })
	eventually(t, "every address asked", func() bool {
		fa.mu.Lock()
		defer fa.mu.Unlock()
		return len(fa.asked) == n
	})
	// Reported through whole cycles of rounds.
	for range 10 {
		if w := warned(); len(w) != 1 || !strings.Contains(w[0], first.String()) {
			t.Fatalf("warnings %q; want the conflict of %v, still", w, first)
		}
		time.Sleep(10 * time.Millisecond)
	}
	fa.mu.Lock()
	most := fa.most
	fa.mu.Unlock()
	if most > conflictBatch+1 {
		t.Errorf("a round asked about %d addresses at once; want at most %d and the one answered for", most, conflictBatch)
	}
	calls := func() int {
		fa.mu.Lock()
		defer fa.mu.Unlock()
		return fa.calls
	}
	fa.set(first)
	before := calls()
	eventually(t, "the conflict forgotten", func() bool { return len(warned()) == 0 })
	// The round under way may have asked before the answer changed.
	if rounds := calls() - before; rounds > 3 {
		t.Errorf("the conflict was forgotten %d rounds after it ended; want the next round (of %d a cycle)", rounds, n/conflictBatch+1)
	}
}

// TestConflictPick: a round asks about the next conflictBatch addresses
// after those the last asked, in order, wrapping around, and again about
// those found answered for.
func TestConflictPick(t *testing.T) {
	addrs := make([]netip.Addr, conflictBatch*3)
	for i := range addrs {
		addrs[i] = netip.AddrFrom4([4]byte{198, 19, byte(i / 250), byte(i%250 + 1)})
	}
	answered := addrs[10]
	c := &conflicts{found: map[netip.Addr][]string{answered: {"02:d1:b0:00:00:15"}}}
	for round, want := range [][2]int{{0, conflictBatch}, {conflictBatch, 2 * conflictBatch}, {2 * conflictBatch, 3 * conflictBatch}, {0, conflictBatch}} {
		job := c.pick(conflictJob{{src: netip.MustParseAddr("198.18.0.2"), addrs: addrs}})
		got := job[0].addrs
		wantAddrs := slices.Clone(addrs[want[0]:want[1]])
		if !slices.Contains(wantAddrs, answered) {
			wantAddrs = append(wantAddrs, answered)
		}
		if !slices.Equal(got, wantAddrs) {
			t.Errorf("round %d asked %d addresses from %v; want %d from %v, and %v", round, len(got), got[0], want[1]-want[0], addrs[want[0]], answered)
		}
	}
}
