//go:build linux

package datapath

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// tableClient is the client address of flow i of the table tests (198.19/16,
// away from every fixture).
func tableClient(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)})
}

func tableFlow(i int, flags string) testutil.Frame {
	return testutil.Frame{Src: tableClient(i), Dst: vipTCP, Proto: "tcp", SrcPort: 2000, DstPort: 80, Flags: flags, Payload: []byte("dlb")}
}

func tableKey(i int) FlowKey {
	return FlowKey{Src: tableClient(i), Dst: vipTCP, SrcPort: 2000, DstPort: 80, Proto: 6}
}

// TestPrivilegedConnTableCapacity: the MAC connection table holds exactly
// its capacity, whatever it is (a multiple of the bitmap's 64 entries or
// of a bucket's ways, or neither); every entry is found again, by the
// executor's fast path (no new connection) and by pkg/datapath; one more
// flow evicts one entry and keeps the count at the capacity.
func TestPrivilegedConnTableCapacity(t *testing.T) {
	testutil.RequirePrivileged(t)
	for _, tc := range []struct {
		name     string
		capacity uint32
	}{
		{"smaller than a bucket", 10},
		{"two buckets and a bit", 30},
		{"neither a multiple of 64 nor of 14", 100},
		{"two bitmap words", 128},
		{"many buckets", 1000},
		// 64 bitmap words and their one summary word: a full table's
		// search through the summary ends past the last bitmap word.
		{"a whole summary word", 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := openTestEnv(t, Options{ConnTableSize: tc.capacity})
			if got := e.dp.Info().ConnTable; got != tc.capacity {
				t.Fatalf("capacity %d, want %d", got, tc.capacity)
			}
			n := int(tc.capacity)
			before := e.stats(t).Services[1].NewConns
			for i := 0; i < n; i++ {
				if v, out := e.run(t, tableFlow(i, "A").Build(t)); v != xdpTX || !bytes.Equal(out[0:6], mac(0x21)) {
					t.Fatalf("flow %d: verdict %d to %x", i, v, out[0:6])
				}
			}
			if d := e.stats(t).Services[1].NewConns - before; d != uint64(n) {
				t.Fatalf("%d new connections for %d new flows", d, n)
			}
			if got := countConns(t, e); got != n {
				t.Fatalf("%d entries after %d new flows into a table of %d", got, n, n)
			}
			for i := 0; i < n; i++ {
				if f, ok := e.getConn(t, tableKey(i)); !ok || f.Backend != 10 {
					t.Fatalf("flow %d: entry %+v (present %v)", i, f, ok)
				}
			}
			// Every flow again: found, so no new connection.
			before = e.stats(t).Services[1].NewConns
			for i := 0; i < n; i++ {
				if v, _ := e.run(t, tableFlow(i, "PA").Build(t)); v != xdpTX {
					t.Fatalf("flow %d again: verdict %d", i, v)
				}
			}
			if d := e.stats(t).Services[1].NewConns - before; d != 0 {
				t.Fatalf("%d new connections for %d known flows", d, n)
			}
			// One flow more: a full table evicts one entry for it.
			if v, _ := e.run(t, tableFlow(n, "A").Build(t)); v != xdpTX {
				t.Fatalf("flow beyond the capacity: verdict %d", v)
			}
			if _, ok := e.getConn(t, tableKey(n)); !ok {
				t.Error("the flow beyond the capacity has no entry")
			}
			if got := countConns(t, e); got != n {
				t.Errorf("%d entries after one flow more, want the capacity %d", got, n)
			}
			if ev := e.stats(t).Events["conn_insert_failed"]; ev != 0 {
				t.Errorf("%d inserts failed", ev)
			}
		})
	}
}

// spillCounts reads the connection table's index and returns each
// bucket's spill counts as they are (got, the meta word's count bits) and
// as the keys in the table say they should be (want: for each key in its
// second bucket, one more of its class in its first; a count stops at
// TAB_SPILL_MAX), and how many keys sit in their second bucket.
func spillCounts(t *testing.T, e *testEnv) (got, want []uint64, inSecond int) {
	t.Helper()
	idx := e.dp.objs.ConnIndex
	nb := idx.MaxEntries()
	got, want = make([]uint64, nb), make([]uint64, nb)
	shift, width := uint64(dispatcherTabFlagsTAB_SPILL_SHIFT), uint64(dispatcherTabFlagsTAB_SPILL_BITS)
	limit := uint64(dispatcherTabFlagsTAB_SPILL_MAX)
	counts := make([][16]uint64, nb)
	for b := uint32(0); b < nb; b++ {
		var bk dispatcherTabBucket
		if err := idx.Lookup(b, &bk); err != nil {
			t.Fatal(err)
		}
		got[b] = bk.Meta >> shift
		for _, w := range bk.Ways {
			for _, v := range []uint32{uint32(w), uint32(w >> 32)} {
				if v>>24 <= uint32(dispatcherDlbConstsDLB_TAB_BUSY) {
					continue
				}
				var ce dispatcherConnEntry
				if err := e.dp.objs.Conns.Lookup(v&0xffffff, &ce); err != nil {
					t.Fatal(err)
				}
				h := tableHash(ce.Key, DefaultHashSeed)
				if first := uint32(uint64(h) * uint64(nb) >> 32); first != b {
					inSecond++
					counts[first][(h>>12)&15]++
				}
			}
		}
	}
	for b := range counts {
		for c, n := range counts[b] {
			want[b] |= min(n, limit) << (width * uint64(c))
		}
	}
	return got, want, inSecond
}

// TestPrivilegedSpillCounts: a table filled to its capacity puts some keys
// in their second bucket, and each such key's first bucket counts the keys
// of each class there (TAB_SPILL_SHIFT), which is what a lookup that
// misses there reads to decide whether to read the second bucket: the
// counts are exactly those of the keys in the table, after the inserts,
// after inserts that evicted (the evicted keys counted out), and, all
// connections removed, 0 everywhere. One-way flags (the executor before
// ABI 7) stayed set when keys left, so that a table in use drifted towards
// two index reads for every miss (simulated at 80 % full: 54 % of misses
// after connections of 20 times its size had come and gone).
func TestPrivilegedSpillCounts(t *testing.T) {
	testutil.RequirePrivileged(t)
	const n = 2000
	e := openTestEnv(t, Options{ConnTableSize: n})
	check := func(stage string) int {
		got, want, inSecond := spillCounts(t, e)
		bad := 0
		for b := range got {
			if got[b] != want[b] {
				if bad++; bad <= 5 {
					t.Errorf("%s: bucket %d: spill counts %#x, want %#x", stage, b, got[b], want[b])
				}
			}
		}
		if bad > 5 {
			t.Errorf("%s: %d buckets with wrong spill counts", stage, bad)
		}
		return inSecond
	}
	for i := 0; i < n; i++ {
		if v, _ := e.run(t, tableFlow(i, "A").Build(t)); v != xdpTX {
			t.Fatalf("flow %d: verdict %d", i, v)
		}
	}
	if inSecond := check("table filled"); inSecond == 0 {
		t.Fatal("no key in its second bucket: the test shows nothing")
	} else {
		t.Logf("table filled: %d of %d keys in their second bucket", inSecond, n)
	}
	// As many again: every insert evicts (from a full bucket pair, or at
	// the allocation cursor).
	for i := n; i < 2*n; i++ {
		if v, _ := e.run(t, tableFlow(i, "A").Build(t)); v != xdpTX {
			t.Fatalf("flow %d: verdict %d", i, v)
		}
	}
	t.Logf("after %d evicting inserts: %d keys in their second bucket", n, check("evicting inserts"))
	var keys []dispatcherFlowKey
	if err := e.dp.eachConn(func(c dispatcherConnEntry) { keys = append(keys, c.Key) }); err != nil {
		t.Fatal(err)
	}
	if len(keys) < n*9/10 {
		t.Fatalf("%d entries in a table of %d after %d inserts", len(keys), n, 2*n)
	}
	for _, k := range keys {
		if ok, err := e.dp.deleteConn(k, 0); err != nil || !ok {
			t.Fatalf("removing %+v: %v (removed %v)", k, err, ok)
		}
	}
	check("every connection removed")
	got, _, _ := spillCounts(t, e)
	for b, c := range got {
		if c != 0 {
			t.Fatalf("bucket %d counts keys in second buckets of an empty table: %#x", b, c)
		}
	}
}

// TestPrivilegedSpillCountsPairEviction: keys whose two buckets are the
// same two fill both (some in their second bucket), and each further one
// takes the way of one of them (both buckets full, entries free): a key
// evicted from its second bucket is counted out, so the counts stay those
// of the keys in the table.
func TestPrivilegedSpillCountsPairEviction(t *testing.T) {
	testutil.RequirePrivileged(t)
	const n = 30 // 3 buckets, 42 ways: the two buckets' 28 ways fill first
	e := openTestEnv(t, Options{ConnTableSize: n})
	nb := e.dp.objs.ConnIndex.MaxEntries()
	var flows []int
	for i := 0; i < 1<<16 && len(flows) < 60; i++ {
		h := tableHash(tableKey(i).raw(), DefaultHashSeed)
		n1 := uint32(uint64(h) * uint64(nb) >> 32)
		n2 := uint32(uint64(fmix32(h^0x7461622b)) * uint64(nb) >> 32) // TAB_SALT
		if n1 == 0 && n2 == 1 {
			flows = append(flows, i)
		}
	}
	if len(flows) < 60 {
		t.Fatalf("%d flows found with buckets 0 and 1", len(flows))
	}
	for j, i := range flows {
		if v, _ := e.run(t, tableFlow(i, "A").Build(t)); v != xdpTX {
			t.Fatalf("flow %d: verdict %d", i, v)
		}
		got, want, inSecond := spillCounts(t, e)
		for b := range got {
			if got[b] != want[b] {
				t.Fatalf("after %d inserts (%d keys in their second bucket): bucket %d: spill counts %#x, want %#x",
					j+1, inSecond, b, got[b], want[b])
			}
		}
	}
	got, _, inSecond := spillCounts(t, e)
	entries := 0
	if err := e.dp.eachConn(func(dispatcherConnEntry) { entries++ }); err != nil {
		t.Fatal(err)
	}
	if entries != 2*int(dispatcherDlbConstsDLB_TAB_WAYS) || inSecond == 0 {
		t.Fatalf("%d entries (%d in their second bucket), want both buckets full: the test shows nothing", entries, inSecond)
	}
	t.Logf("%d inserts, %d entries, %d in their second bucket, counts %#x", len(flows), entries, inSecond, got[0])
}

// spilledBuckets returns how many buckets of a table's index count keys in
// their second bucket.
func spilledBuckets(t *testing.T, idx *ebpf.Map) int {
	t.Helper()
	n := 0
	for b := uint32(0); b < idx.MaxEntries(); b++ {
		var bk dispatcherTabBucket
		if err := idx.Lookup(b, &bk); err != nil {
			t.Fatal(err)
		}
		if bk.Meta>>uint64(dispatcherTabFlagsTAB_SPILL_SHIFT) != 0 {
			n++
		}
	}
	return n
}

// TestPrivilegedSpillCountsNAT: the NAT tables, filled to their capacity
// and emptied through the control program (as dlbd's sweeper removes
// entries), end with no spill count left in their indexes.
func TestPrivilegedSpillCountsNAT(t *testing.T) {
	testutil.RequirePrivileged(t)
	const n = 2000
	e := openTestEnv(t, Options{NATTableSize: n})
	var flows []dispatcherFlowKey
	var ports []dispatcherNatKey
	for i := 0; i < n; i++ {
		fk := tableKey(i).raw()
		if err := e.dp.putNATFlow(fk, dispatcherNatFlow{LastSeen: 1, Backend: 1, Service: 1,
			State: uint8(dispatcherFlowStateFLOW_ESTABLISHED)}); err == nil {
			flows = append(flows, fk)
		}
		pk := dispatcherNatKey{Port: uint16(1024 + i), Proto: 6, Family: 4}
		copy(pk.Addr.Addr[:4], []byte{198, 18, 0, byte(1 + i%4)})
		if err := e.dp.putNATPort(pk, dispatcherNatRev{LastSeen: 1, Backend: 1, Service: 1,
			State: uint8(dispatcherFlowStateFLOW_ESTABLISHED)}); err == nil {
			ports = append(ports, pk)
		}
	}
	if len(flows) < n*95/100 || len(ports) < n*95/100 {
		t.Fatalf("%d flows and %d ports written to tables of %d", len(flows), len(ports), n)
	}
	for _, idx := range []*ebpf.Map{e.dp.objs.NatFlowIndex, e.dp.objs.NatPortIndex} {
		if spilledBuckets(t, idx) == 0 {
			t.Fatal("no key in its second bucket: the test shows nothing")
		}
	}
	for _, k := range flows {
		if ok, err := e.dp.deleteNATFlow(k, 0); err != nil || !ok {
			t.Fatalf("removing flow %+v: %v (removed %v)", k, err, ok)
		}
	}
	for _, k := range ports {
		if ok, err := e.dp.deleteNATPort(k, 0); err != nil || !ok {
			t.Fatalf("removing port %+v: %v (removed %v)", k, err, ok)
		}
	}
	for _, idx := range []*ebpf.Map{e.dp.objs.NatFlowIndex, e.dp.objs.NatPortIndex} {
		if n := spilledBuckets(t, idx); n != 0 {
			t.Errorf("%d buckets count keys in second buckets of an empty table", n)
		}
	}
}

// TestPrivilegedConnTableEvictsClosingFirst: when every entry is in use, an
// insert takes a closing connection's entry before an open one's.
func TestPrivilegedConnTableEvictsClosingFirst(t *testing.T) {
	testutil.RequirePrivileged(t)
	const capacity = 4 // the eviction samples see every entry
	e := openTestEnv(t, Options{ConnTableSize: capacity})
	for i := 0; i < capacity; i++ {
		if v, _ := e.run(t, tableFlow(i, "A").Build(t)); v != xdpTX {
			t.Fatalf("flow %d: verdict %d", i, v)
		}
	}
	const closing = 2
	if v, _ := e.run(t, tableFlow(closing, "FA").Build(t)); v != xdpTX {
		t.Fatalf("FIN: verdict %d", v)
	}
	if v, _ := e.run(t, tableFlow(capacity, "A").Build(t)); v != xdpTX {
		t.Fatalf("new flow: verdict %d", v)
	}
	for i := 0; i <= capacity; i++ {
		_, ok := e.getConn(t, tableKey(i))
		if want := i != closing; ok != want {
			t.Errorf("flow %d: entry present %v, want %v", i, ok, want)
		}
	}
}

// setCursors puts every CPU's allocation cursor of a table at bitmap word w.
func setCursors(t *testing.T, m *ebpf.Map, w uint32) {
	t.Helper()
	cur := make([]uint32, ebpf.MustPossibleCPU())
	for i := range cur {
		cur[i] = w
	}
	if err := m.Update(uint32(0), cur, ebpf.UpdateExist); err != nil {
		t.Fatalf("setting the allocation cursors: %v", err)
	}
}

// TestPrivilegedAllocPastFullRun: an insert whose CPU's cursor stands at
// the start of a run of full bitmap words longer than an allocation reads
// (TAB_ALLOC_WORDS, 16: the entries of connections made one after the
// other and still open) finds the free entries past it through the
// bitmap's summary. It used to count the table as full there: the MAC
// table evicted one of those open connections though three quarters of
// the table's room was elsewhere, and the NAT tables refused the new
// connection (drop_table_full). A table really full still evicts (MAC)
// or refuses (NAT): TestPrivilegedConnTableCapacity, TestPrivilegedNATTableCapacity.
func TestPrivilegedAllocPastFullRun(t *testing.T) {
	testutil.RequirePrivileged(t)
	const capacity, run = 4096, 3072 // 64 bitmap words, the first 48 full
	e := openTestEnv(t, Options{ConnTableSize: capacity, NATTableSize: capacity})

	t.Run("MAC", func(t *testing.T) {
		setCursors(t, e.dp.objs.ConnCursor, 0)
		for i := 0; i < run; i++ {
			e.putConn(t, conn{key: tableKey(i), backend: 10, service: 1})
		}
		setCursors(t, e.dp.objs.ConnCursor, 0)
		if v, _ := e.run(t, tableFlow(run, "A").Build(t)); v != xdpTX {
			t.Fatalf("new flow: verdict %d", v)
		}
		if _, ok := e.getConn(t, tableKey(run)); !ok {
			t.Error("the new flow has no entry")
		}
		if got := countConns(t, e); got != run+1 {
			t.Errorf("%d entries, want %d: an open connection was evicted", got, run+1)
		}
		for i := 0; i < run; i++ {
			if _, ok := e.getConn(t, tableKey(i)); !ok {
				t.Errorf("connection %d was evicted", i)
			}
		}
		if ev := e.stats(t).Events["conn_insert_failed"]; ev != 0 {
			t.Errorf("%d inserts failed", ev)
		}
	})

	t.Run("NAT", func(t *testing.T) {
		setCursors(t, e.dp.objs.NatFlowCursor, 0)
		now := coarseNow()
		for i := 0; i < run; i++ {
			k := FlowKey{Src: tableClient(i), Dst: vipNAT, SrcPort: 4000, DstPort: 53, Proto: 17}
			f := dispatcherNatFlow{LastSeen: now, Backend: 61, Service: 7, State: uint8(dispatcherFlowStateFLOW_ESTABLISHED),
				NatPort: htons(uint16(10000 + i))}
			if err := e.dp.putNATFlow(k.raw(), f); err != nil {
				t.Fatalf("NAT flow %d: %v", i, err)
			}
		}
		setCursors(t, e.dp.objs.NatFlowCursor, 0)
		before := e.stats(t)
		nf := testutil.Frame{Src: tableClient(run), Dst: vipNAT, Proto: "udp", SrcPort: 3000, DstPort: 53, Payload: []byte("dlb")}
		if v, _ := e.run(t, nf.Build(t)); v != xdpTX {
			t.Errorf("new NAT flow: verdict %d, want XDP_TX (drop_table_full +%d)", v,
				reasonDelta(before, e.stats(t), "drop_table_full"))
		}
		if _, _, ok := e.getNAT(t, FlowKey{Src: tableClient(run), Dst: vipNAT, SrcPort: 3000, DstPort: 53, Proto: 17}); !ok {
			t.Error("the new NAT flow has no mapping")
		}
		n := 0
		if err := e.dp.eachNATFlow(func(dispatcherFlowKey, dispatcherNatFlow) { n++ }); err != nil {
			t.Fatal(err)
		}
		if n != run+1 {
			t.Errorf("%d NAT flows, want %d", n, run+1)
		}
	})
}

// TestPrivilegedAllocPastFullHalf: a table of the default size whose
// second half is full, every CPU's cursor at its start: the search
// through the summary reads those 32 summary words (TAB_SUMMARY_WORDS), all
// full, and the insert takes an entry at the start of the table, past the
// last word read (a search that ended there once took a bit of the
// summary itself for an entry, and the insert failed).
func TestPrivilegedAllocPastFullHalf(t *testing.T) {
	testutil.RequirePrivileged(t)
	e := openTestEnv(t, Options{})
	capacity := int(e.dp.Info().ConnTable)
	half := uint32(tabBitmapWords(uint32(capacity)) / 2)
	setCursors(t, e.dp.objs.ConnCursor, half)
	for i := 0; i < capacity/2; i++ {
		e.putConn(t, conn{key: prefillKey(i), backend: 10, service: 1})
	}
	setCursors(t, e.dp.objs.ConnCursor, half)
	if v, _ := e.run(t, tableFlow(capacity/2, "A").Build(t)); v != xdpTX {
		t.Fatalf("new flow: verdict %d", v)
	}
	if _, ok := e.getConn(t, tableKey(capacity/2)); !ok {
		t.Error("the new flow has no entry")
	}
	if got := countConns(t, e); got != capacity/2+1 {
		t.Errorf("%d entries, want %d", got, capacity/2+1)
	}
	if ev := e.stats(t).Events["conn_insert_failed"]; ev != 0 {
		t.Errorf("%d inserts failed", ev)
	}
}

// TestPrivilegedConnTableRemoveAndReuse: entries removed (by the sweeper's
// program) free their room: a full table takes as many new flows again
// without evicting any, and put/get/del through the control programs
// agree with what the executor sees.
func TestPrivilegedConnTableRemoveAndReuse(t *testing.T) {
	testutil.RequirePrivileged(t)
	const capacity = 70
	e := openTestEnv(t, Options{ConnTableSize: capacity})
	for i := 0; i < capacity; i++ {
		e.putConn(t, conn{key: tableKey(i), backend: 10, service: 1})
	}
	if got := countConns(t, e); got != capacity {
		t.Fatalf("%d entries after %d puts", got, capacity)
	}
	for i := 0; i < capacity; i += 2 {
		if removed, err := e.dp.deleteConn(tableKey(i).raw(), 0); err != nil || !removed {
			t.Fatalf("removing flow %d: %v (removed %v)", i, err, removed)
		}
	}
	if removed, err := e.dp.deleteConn(tableKey(0).raw(), 0); err != nil || removed {
		t.Fatalf("removing flow 0 twice: %v (removed %v)", err, removed)
	}
	// A removal that expects another last_seen leaves the entry.
	if removed, err := e.dp.deleteConn(tableKey(1).raw(), 1); err != nil || removed {
		t.Fatalf("removing flow 1 with a stale last_seen: %v (removed %v)", err, removed)
	}
	for i := capacity; i < capacity+capacity/2; i++ {
		if v, _ := e.run(t, tableFlow(i, "A").Build(t)); v != xdpTX {
			t.Fatalf("flow %d: verdict %d", i, v)
		}
	}
	if got := countConns(t, e); got != capacity {
		t.Errorf("%d entries, want %d", got, capacity)
	}
	// Nothing was evicted: every odd old flow and every new one is there.
	for i := 1; i < capacity+capacity/2; i++ {
		_, ok := e.getConn(t, tableKey(i))
		if want := i%2 == 1 || i >= capacity; ok != want {
			t.Errorf("flow %d: entry present %v, want %v", i, ok, want)
		}
	}
	// The executor follows an entry written from userspace.
	e.putConn(t, conn{key: tableKey(1), backend: 11, service: 1})
	if v, out := e.run(t, tableFlow(1, "PA").Build(t)); v != xdpTX || !bytes.Equal(out[0:6], mac(0x22)) {
		t.Errorf("flow 1 after its entry was rewritten: verdict %d to %x, want backend 11", v, out[0:6])
	}
}

// TestPrivilegedHandshakeSlot: the MAC handshake cache is indexed by the
// table hash, as its Go twin (tableHash) computes it, and an entry's check
// is that hash with the server and service.
func TestPrivilegedHandshakeSlot(t *testing.T) {
	e := newTestEnv(t)
	slots := e.dp.objs.Handshakes.MaxEntries()
	for i := 0; i < 20; i++ {
		if v, _ := e.run(t, tableFlow(i, "S").Build(t)); v != xdpTX {
			t.Fatalf("SYN %d: verdict %d", i, v)
		}
		h := tableHash(tableKey(i).raw(), DefaultHashSeed)
		var hs dispatcherHandshake
		if err := e.dp.objs.Handshakes.Lookup(h&(slots-1), &hs); err != nil {
			t.Fatal(err)
		}
		if hs.Check != h^hs.Backend^hs.Service || hs.Seen == 0 {
			t.Fatalf("SYN %d: slot %d holds %+v, want its check and a time", i, h&(slots-1), hs)
		}
	}
}

// TestPrivilegedTableSizeLimit: a connection table larger than its index
// can address is refused before anything is created.
func TestPrivilegedTableSizeLimit(t *testing.T) {
	testutil.RequirePrivileged(t)
	for _, opts := range []Options{
		{ConnTableSize: 1<<24 + 1},
		{NATTableSize: 1 << 25},
	} {
		opts.PinDir = newPinDir(t)
		dp, err := Open(opts)
		if err == nil {
			_ = dp.Remove()
			t.Fatalf("Open(%+v) succeeded", opts)
		}
		if !strings.Contains(err.Error(), "is larger than") {
			t.Errorf("Open(%+v): %v, want an error naming the size", opts, err)
		}
	}
}

// TestPrivilegedNATTableCapacity: the NAT tables, which never evict, take
// exactly their capacity of connections and then refuse new ones, for
// sizes that are multiples of neither the bitmap's 64 entries nor a
// bucket's ways.
func TestPrivilegedNATTableCapacity(t *testing.T) {
	testutil.RequirePrivileged(t)
	for _, capacity := range []uint32{30, 300} {
		e := openTestEnv(t, Options{ConnTableSize: 4096, NATTableSize: capacity})
		if got := e.dp.Info().NATTable; got != capacity {
			t.Fatalf("capacity %d, want %d", got, capacity)
		}
		udp := func(i int) testutil.Frame {
			return testutil.Frame{Src: tableClient(i), Dst: vipNAT, Proto: "udp", SrcPort: 3000, DstPort: 53, Payload: []byte("dlb")}
		}
		for i := 0; i < int(capacity); i++ {
			if v, _ := e.run(t, udp(i).Build(t)); v != xdpTX {
				t.Fatalf("NAT table of %d: flow %d refused (verdict %d)", capacity, i, v)
			}
		}
		before := e.stats(t)
		if v, _ := e.run(t, udp(int(capacity)).Build(t)); v != xdpDrop {
			t.Errorf("NAT table of %d: the flow beyond it got verdict %d, want a drop", capacity, v)
		}
		if d := reasonDelta(before, e.stats(t), "drop_table_full"); d != 1 {
			t.Errorf("NAT table of %d: drop_table_full +%d, want +1", capacity, d)
		}
		for i := 0; i < int(capacity); i++ {
			k := FlowKey{Src: tableClient(i), Dst: vipNAT, SrcPort: 3000, DstPort: 53, Proto: 17}
			if _, _, ok := e.getNAT(t, k); !ok {
				t.Errorf("NAT table of %d: mapping %d lost", capacity, i)
			}
		}
	}
}

// tagTwins returns two keys keyOf(i) that share their first bucket (in an
// index of nb buckets) and their tag (bpf/include/table.h: tab_buckets,
// tab_tag_pattern), so that a lookup of the second meets the first's way
// before its own.
func tagTwins(t *testing.T, nb uint32, keyOf func(i int) FlowKey) (FlowKey, FlowKey) {
	t.Helper()
	seen := map[uint64]FlowKey{}
	for i := 0; i < 1<<16; i++ {
		k := keyOf(i)
		h := tableHash(k.raw(), DefaultHashSeed)
		tag := h & 0xff
		if tag < 2 {
			tag += 2
		}
		id := uint64(uint64(h)*uint64(nb)>>32)<<8 | uint64(tag)
		if first, ok := seen[id]; ok {
			return first, k
		}
		seen[id] = k
	}
	t.Fatal("no two keys share a bucket and a tag")
	return FlowKey{}, FlowKey{}
}

// TestPrivilegedTagCollision: a flow whose bucket holds, in an earlier
// way, another key with the same tag is found (the fast path's lookup
// reads only the first matching way and leaves the rest to the full
// path's), for the MAC connection table and the NAT flows.
func TestPrivilegedTagCollision(t *testing.T) {
	e := newTestEnv(t)
	// The entries are put as last seen at boot, and a packet refreshes an
	// entry idle for over a second (FLOW_TOUCH_NS): the clock must be past
	// it (a guest of scripts/kernels.sh runs its tests seconds after boot).
	if now := e.now(); now < 2e9 {
		time.Sleep(time.Duration(2e9 - now))
	}
	t.Run("MAC", func(t *testing.T) {
		a, b := tagTwins(t, e.dp.objs.ConnIndex.MaxEntries(), func(i int) FlowKey {
			return FlowKey{Src: tableClient(i), Dst: vipTCP, SrcPort: 3000, DstPort: 80, Proto: 6}
		})
		e.putConn(t, conn{key: a, backend: 10, service: 1, bootSeen: true})
		e.putConn(t, conn{key: b, backend: 11, service: 1, bootSeen: true})
		before := e.stats(t).Services[1].NewConns
		for _, c := range []struct {
			k   FlowKey
			mac byte
		}{{a, 0x21}, {b, 0x22}} {
			f := testutil.Frame{Src: c.k.Src, Dst: vipTCP, Proto: "tcp", SrcPort: 3000, DstPort: 80, Flags: "PA", Payload: []byte("dlb")}
			if v, out := e.run(t, f.Build(t)); v != xdpTX || !bytes.Equal(out[0:6], mac(c.mac)) {
				t.Errorf("flow from %s: verdict %d to %x, want %x", c.k.Src, v, out[0:6], mac(c.mac))
			}
			// The packet refreshed its own entry (found, not raced).
			if f, ok := e.getConn(t, c.k); !ok || f.LastSeen == 0 {
				t.Errorf("flow from %s: entry %+v (present %v) not refreshed", c.k.Src, f, ok)
			}
		}
		if d := e.stats(t).Services[1].NewConns - before; d != 0 {
			t.Errorf("%d new connections: a flow in the table was taken for a new one", d)
		}
	})
	t.Run("NAT", func(t *testing.T) {
		a, b := tagTwins(t, e.dp.objs.NatFlowIndex.MaxEntries(), func(i int) FlowKey {
			return key(vipNAT, 80, uint16(10000+i), 6)
		})
		e.putNAT(t, natConn{key: a, backend: 60, service: 6, ret: retAddr, port: 41000, bootSeen: true})
		e.putNAT(t, natConn{key: b, backend: 60, service: 6, ret: retAddr, port: 41001, bootSeen: true})
		for _, c := range []struct {
			k    FlowKey
			port uint16
		}{{a, 41000}, {b, 41001}} {
			f := tcpTo(vipNAT, 80, c.k.SrcPort, "PA")
			want := rewrite(f, retAddr, c.port, natServer, 8080, ifaceMAC, routerMAC).Build(t)
			if v, out := e.run(t, f.Build(t)); v != xdpTX || !bytes.Equal(out[:len(want)], want) {
				t.Errorf("flow from port %d: verdict %d, frame\n%x\nwant\n%x", c.k.SrcPort, v, out[:len(want)], want)
			}
			if f, _, ok := e.getNAT(t, c.k); !ok || f.LastSeen == 0 {
				t.Errorf("flow from port %d: entry %+v (present %v) not refreshed", c.k.SrcPort, f, ok)
			}
		}
	})
	// Both keys of each pair are in one bucket with the same tag (the
	// first inserted in the earlier way: an insert takes the first free
	// one), which is what the lookups above had to get past.
	for _, idx := range []*ebpf.Map{e.dp.objs.ConnIndex, e.dp.objs.NatFlowIndex} {
		n := 0
		it := idx.Iterate()
		var k uint32
		var bk dispatcherTabBucket
		for it.Next(&k, &bk) {
			tags := map[uint32]int{}
			for _, w := range bk.Ways {
				for _, v := range []uint32{uint32(w), uint32(w >> 32)} {
					if v>>24 > 1 {
						tags[v>>24]++
					}
				}
			}
			for _, c := range tags {
				if c >= 2 {
					n++
				}
			}
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("%s: %d buckets with two ways of one tag, want 1", idx, n)
		}
	}
}
