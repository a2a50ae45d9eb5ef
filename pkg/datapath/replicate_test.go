//go:build linux

package datapath

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// scan runs ScanConns and returns what it reported.
func scan(t *testing.T, e *testEnv, s *lb.ConnScan, full bool, refresh time.Duration) []lb.ConnEntry {
	t.Helper()
	var out []lb.ConnEntry
	if err := e.dp.ScanConns(s, full, refresh, func(c lb.ConnEntry) { out = append(out, c) }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPrivilegedReplicationRoundTrip: a scan reports every entry of the
// MAC, NAT and affinity tables once, then only what changed; what it
// reported, written into emptied tables, makes the same entries (their
// ages kept, the NAT next hop left for this host to find).
func TestPrivilegedReplicationRoundTrip(t *testing.T) {
	testutil.RequirePrivileged(t)
	e := newTestEnv(t)
	mk := func(dst netip.Addr, dport, sport uint16, proto uint8) FlowKey {
		return FlowKey{Src: netip.MustParseAddr("198.18.2.11"), Dst: dst, SrcPort: sport, DstPort: dport, Proto: proto}
	}
	macKey := mk(vipTCP, 80, 1001, 6)
	natKey := mk(vipNAT, 80, 5004, 6)
	client := netip.MustParseAddr("198.18.2.11")
	e.putConn(t, conn{key: macKey, backend: 10, service: 1, idle: 3})
	e.putConn(t, conn{key: mk(vipTCP, 80, 1002, 6), backend: 10, service: 1, closing: true, idle: 1})
	putAt := time.Now() // the NAT entry's age grows from 2 s from here on
	e.putNAT(t, natConn{key: natKey, backend: 60, service: 6, ret: retAddr, port: 30000, idle: 2})
	e.putAffinity(t, client, 14, 91, 4)
	// natAged reports whether an age is the NAT entry's: the 2 s it was
	// given plus the time since, to within the coarse clock's tick.
	natAged := func(age time.Duration) bool {
		return age >= 2*time.Second-50*time.Millisecond && age <= 2*time.Second+time.Since(putAt)+50*time.Millisecond
	}

	var s lb.ConnScan
	all := scan(t, e, &s, false, time.Hour)
	kinds := map[lb.ConnKind]int{}
	for _, c := range all {
		kinds[c.Kind]++
	}
	if kinds[lb.ConnMAC] != 2 || kinds[lb.ConnNATFlow] != 1 || kinds[lb.ConnNATPort] != 1 || kinds[lb.ConnAffinity] != 1 {
		t.Fatalf("first scan reported %v: %+v", kinds, all)
	}
	i := slices.IndexFunc(all, func(c lb.ConnEntry) bool { return c.Kind == lb.ConnNATPort })
	if got := all[i]; got.NAT != netip.AddrPortFrom(retAddr, 30000) || got.Client != netip.AddrPortFrom(client, 5004) ||
		got.Cluster != netip.AddrPortFrom(vipNAT, 80) || got.Backend != 60 || !natAged(got.Age) {
		t.Errorf("nat port entry %+v", got)
	}
	if again := scan(t, e, &s, false, time.Hour); len(again) != 0 {
		t.Errorf("a second scan reported %d unchanged entries: %+v", len(again), again)
	}
	// A changed entry (closing now) and a new one are reported, alone.
	e.putConn(t, conn{key: macKey, backend: 10, service: 1, closing: true})
	e.putConn(t, conn{key: mk(vipTCP, 80, 1003, 6), backend: 10, service: 1})
	if ch := scan(t, e, &s, false, time.Hour); len(ch) != 2 {
		t.Errorf("after a change and an addition, reported %+v", ch)
	}
	// An entry used again later than the refresh is reported again.
	e.putConn(t, conn{key: mk(vipTCP, 80, 1002, 6), backend: 10, service: 1, closing: true})
	if ch := scan(t, e, &s, false, 500*time.Millisecond); len(ch) != 1 || ch[0].Client.Port() != 1002 {
		t.Errorf("after a refresh, reported %+v", ch)
	}
	if full := scan(t, e, &s, true, time.Hour); len(full) != 6 {
		t.Errorf("a full scan reported %d entries, want 6", len(full))
	}

	// Round trip: empty the tables, write what was scanned.
	all = scan(t, e, &lb.ConnScan{}, true, time.Hour)
	e.clearTables(t)
	if n, err := e.dp.PutConns(all); err != nil || n != len(all) {
		t.Fatalf("PutConns wrote %d of %d: %v", n, len(all), err)
	}
	if f, ok := e.getConn(t, macKey); !ok || f.Backend != 10 || f.State != uint8(dispatcherFlowStateFLOW_CLOSING) {
		t.Errorf("MAC entry after the round trip: %+v %v", f, ok)
	}
	nf, nr, ok := e.getNAT(t, natKey)
	if !ok || nf.Backend != 60 || htons(nf.NatPort) != 30000 || nr.Flags != 0 || htons(nr.ClientPort) != 5004 {
		t.Errorf("NAT entry after the round trip: %+v %+v %v", nf, nr, ok)
	}
	if age := time.Duration(coarseNow() - nf.LastSeen); !natAged(age) {
		t.Errorf("NAT entry's age %v, want 2 s plus the %v since it was written", age, time.Since(putAt).Round(time.Millisecond))
	}
	if r, ok := e.affinityOf(t, client, 14); !ok || r.Backend != 91 {
		t.Errorf("affinity record after the round trip: %+v %v", r, ok)
	}
	// Entries for backends this executor lacks are skipped.
	if n, _ := e.dp.PutConns([]lb.ConnEntry{{Kind: lb.ConnMAC, Protocol: 6, Client: netip.MustParseAddrPort("198.18.2.12:9"),
		Cluster: netip.AddrPortFrom(vipTCP, 80), Backend: 9999, Service: 1}}); n != 0 {
		t.Errorf("wrote an entry of an unknown backend")
	}
}
