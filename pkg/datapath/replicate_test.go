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

// TestPrivilegedReplicationMerge: what a peer that served the same group
// during a partition sends is written where this executor holds nothing
// that says otherwise, or only entries used less lately; a NAT connection
// only whole, never over a return port or a client flow of another
// connection's used since, and an older connection it replaces loses
// both halves.
func TestPrivilegedReplicationMerge(t *testing.T) {
	testutil.RequirePrivileged(t)
	e := newTestEnv(t)
	client := netip.MustParseAddr("198.18.2.11")
	mac := func(sport uint16) FlowKey {
		return FlowKey{Src: client, Dst: vipTCP, SrcPort: sport, DstPort: 80, Proto: 6}
	}
	natFlow := func(sport uint16) FlowKey {
		return FlowKey{Src: client, Dst: vipNAT, SrcPort: sport, DstPort: 80, Proto: 6}
	}
	// This executor's own: a MAC connection, a NAT connection on return
	// port 30000, an affinity record.
	e.putConn(t, conn{key: mac(1001), backend: 10, service: 1})
	e.putNAT(t, natConn{key: natFlow(5004), backend: 60, service: 6, ret: retAddr, port: 30000})
	e.putAffinity(t, client, 14, 91, 1)
	// And, used 30 s ago, a MAC connection and two NAT connections: one
	// on return port 30010, one of client port 5012 on return port 30020.
	e.putConn(t, conn{key: mac(1002), backend: 10, service: 1, idle: 30})
	e.putNAT(t, natConn{key: natFlow(5010), backend: 60, service: 6, ret: retAddr, port: 30010, idle: 30})
	e.putNAT(t, natConn{key: natFlow(5012), backend: 60, service: 6, ret: retAddr, port: 30020, idle: 30})
	// And, closing (ended: a client port used again finds them, and keeps
	// them fresh), used just now: a MAC connection, a NAT connection.
	e.putConn(t, conn{key: mac(1003), backend: 10, service: 1, closing: true})
	e.putNAT(t, natConn{key: natFlow(5013), backend: 60, service: 6, ret: retAddr, port: 30030, closing: true})
	// And closing, saying what the peer's will (the same server, the same
	// return port): kept closing, fintimeout would end them.
	e.putConn(t, conn{key: mac(1004), backend: 11, service: 1, closing: true})
	e.putNAT(t, natConn{key: natFlow(5014), backend: 60, service: 6, ret: retAddr, port: 30040, closing: true})

	macEntry := func(sport uint16, backend uint32) lb.ConnEntry {
		return lb.ConnEntry{Kind: lb.ConnMAC, Protocol: 6, Client: netip.AddrPortFrom(client, sport),
			Cluster: netip.AddrPortFrom(vipTCP, 80), Backend: backend, Service: 1, Age: time.Second}
	}
	natEntries := func(sport, port uint16, kinds ...lb.ConnKind) []lb.ConnEntry {
		var out []lb.ConnEntry
		for _, k := range kinds {
			out = append(out, lb.ConnEntry{Kind: k, Protocol: 6, Client: netip.AddrPortFrom(client, sport),
				Cluster: netip.AddrPortFrom(vipNAT, 80), NAT: netip.AddrPortFrom(retAddr, port), Backend: 60, Service: 6,
				Age: time.Second})
		}
		return out
	}
	both := []lb.ConnKind{lb.ConnNATFlow, lb.ConnNATPort}
	stranger := netip.MustParseAddr("198.19.2.99") // apart from client under any stickymask
	peer := []lb.ConnEntry{
		macEntry(1001, 11), // this executor's connection, to another server: kept
		macEntry(1005, 11), // new: written
		{Kind: lb.ConnAffinity, Client: netip.AddrPortFrom(client, 0), Backend: 90, Service: 14}, // kept
		{Kind: lb.ConnAffinity, Client: netip.AddrPortFrom(stranger, 0), Backend: 90, Service: 14},
	}
	peer = append(peer, natEntries(5004, 30000, both...)...)        // the same connection: nothing to write
	peer = append(peer, natEntries(5005, 30000, both...)...)        // port 30000 is 5004's: refused
	peer = append(peer, natEntries(5004, 30001, lb.ConnNATPort)...) // 5004's flow maps to 30000: refused,
	peer = append(peer, natEntries(5004, 30001, lb.ConnNATFlow)...) // its port not left behind
	peer = append(peer, natEntries(5006, 30002, both...)...)        // new: both halves written
	peer = append(peer, natEntries(5007, 30003, lb.ConnNATFlow)...) // half a connection: skipped
	// Where this executor's entry was used less lately, the peer's wins.
	peer = append(peer, macEntry(1002, 11))
	peer = append(peer, natEntries(5011, 30010, both...)...) // 5010's port: taken, 5010's flow removed
	peer = append(peer, natEntries(5012, 30021, both...)...) // 5012's flow: replaced, its port 30020 let go
	// And where it is closing and the peer's is not.
	peer = append(peer, macEntry(1003, 11), macEntry(1004, 11))
	peer = append(peer, natEntries(5013, 30031, both...)...)
	peer = append(peer, natEntries(5014, 30040, both...)...)
	n, err := e.dp.MergeConns(peer)
	if err != nil || n != 15 {
		t.Errorf("MergeConns wrote %d entries (%v), want 15: the new MAC connection and the three over older or closing "+
			"entries, five NAT connections' two halves each, the new affinity record", n, err)
	}
	established := uint8(dispatcherFlowStateFLOW_ESTABLISHED)
	if f, ok := e.getConn(t, mac(1004)); !ok || f.Backend != 11 || f.State != established {
		t.Errorf("a closing MAC connection to the peer's server after the merge: %+v %v, want it established", f, ok)
	}
	if f, r, ok := e.getNAT(t, natFlow(5014)); !ok || htons(f.NatPort) != 30040 || f.State != established || r.State != established {
		t.Errorf("a closing NAT connection saying what the peer's does after the merge: %+v %+v %v, want it established", f, r, ok)
	}
	if f, ok := e.getConn(t, mac(1003)); !ok || f.Backend != 11 || f.State != uint8(dispatcherFlowStateFLOW_ESTABLISHED) {
		t.Errorf("a closing MAC connection after the merge: %+v %v, want the peer's (backend 11, established)", f, ok)
	}
	if f, _, ok := e.getNAT(t, natFlow(5013)); !ok || htons(f.NatPort) != 30031 || e.natPortTaken(t, retAddr, 30030, 6) {
		t.Errorf("a closing NAT connection after the merge: %+v %v (port 30030 held: %v), want the peer's on port 30031",
			f, ok, e.natPortTaken(t, retAddr, 30030, 6))
	}
	if f, ok := e.getConn(t, mac(1002)); !ok || f.Backend != 11 {
		t.Errorf("a MAC connection used 30 s ago after the merge: %+v %v, want the peer's (backend 11)", f, ok)
	}
	if _, _, ok := e.getNAT(t, natFlow(5010)); ok {
		t.Error("the older NAT connection whose return port the peer's took still has its flow")
	}
	if f, r, ok := e.getNAT(t, natFlow(5011)); !ok || htons(f.NatPort) != 30010 || htons(r.ClientPort) != 5011 {
		t.Errorf("the peer's NAT connection on an older connection's port after the merge: %+v %+v %v", f, r, ok)
	}
	if f, r, ok := e.getNAT(t, natFlow(5012)); !ok || htons(f.NatPort) != 30021 || htons(r.ClientPort) != 5012 {
		t.Errorf("the peer's NAT connection over an older mapping of its flow after the merge: %+v %+v %v", f, r, ok)
	}
	if e.natPortTaken(t, retAddr, 30020, 6) {
		t.Error("the return port of the older mapping the peer's replaced is still held")
	}
	if f, ok := e.getConn(t, mac(1001)); !ok || f.Backend != 10 {
		t.Errorf("this executor's MAC connection after the merge: %+v %v, want backend 10 still", f, ok)
	}
	if f, ok := e.getConn(t, mac(1005)); !ok || f.Backend != 11 {
		t.Errorf("the peer's new MAC connection after the merge: %+v %v", f, ok)
	}
	if f, r, ok := e.getNAT(t, natFlow(5004)); !ok || htons(f.NatPort) != 30000 || htons(r.ClientPort) != 5004 {
		t.Errorf("this executor's NAT connection after the merge: %+v %+v %v", f, r, ok)
	}
	if _, _, ok := e.getNAT(t, natFlow(5005)); ok {
		t.Error("a NAT connection on a return port this executor uses was written")
	}
	if e.natPortTaken(t, retAddr, 30001, 6) {
		t.Error("the return port of a refused NAT connection was left in nat_ports")
	}
	if f, r, ok := e.getNAT(t, natFlow(5006)); !ok || htons(f.NatPort) != 30002 || htons(r.ClientPort) != 5006 || f.Backend != 60 {
		t.Errorf("the peer's new NAT connection after the merge: %+v %+v %v", f, r, ok)
	}
	if _, _, ok := e.getNAT(t, natFlow(5007)); ok || e.natPortTaken(t, retAddr, 30003, 6) {
		t.Error("half a NAT connection was written")
	}
	if r, ok := e.affinityOf(t, client, 14); !ok || r.Backend != 91 {
		t.Errorf("this executor's affinity record after the merge: %+v %v, want backend 91 still", r, ok)
	}
	if r, ok := e.affinityOf(t, stranger, 14); !ok || r.Backend != 90 {
		t.Errorf("the peer's new affinity record after the merge: %+v %v", r, ok)
	}
	// Merging the same again writes nothing.
	if n, err := e.dp.MergeConns(peer); err != nil || n != 0 {
		t.Errorf("merging the same entries again wrote %d (%v)", n, err)
	}
}
