//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"math/bits"
	"net"
	"unsafe"

	"github.com/cilium/ebpf"
)

// The connection tables (conns for MAC forwarding, nat_flows and nat_ports
// for NAT) are hash tables made of BPF arrays (bpf/include/table.h): the
// entries (their array's size is the capacity), a bitmap of the entries in
// use, per-CPU allocation cursors, and an index of buckets that find
// entries by key. Their hashing, layout and locking live in BPF only:
// pkg/datapath reads the entries through memory maps of the arrays (the
// sweeper), and reads, writes and removes single entries through syscall
// programs (dlb_conn_get/put/del, dlb_nat_ctl), which do what the executor
// does.

// Results of the control programs (struct conn_ctl, struct nat_ctl).
const (
	ctlDone    = 0
	ctlMissing = 1
	ctlNoRoom  = 2
)

// table names the maps of one connection table.
type table struct {
	name                         string
	entries, used, cursor, index *ebpf.Map
}

// tableMaps are the names of the connection tables' maps: entries, bitmap,
// cursors and index, as in table.
var tableMaps = [][4]string{
	{dispatcherMapConns, dispatcherMapConnUsed, dispatcherMapConnCursor, dispatcherMapConnIndex},
	{dispatcherMapNatFlows, dispatcherMapNatFlowUsed, dispatcherMapNatFlowCursor, dispatcherMapNatFlowIndex},
	{dispatcherMapNatPorts, dispatcherMapNatPortUsed, dispatcherMapNatPortCursor, dispatcherMapNatPortIndex},
}

// tabIndexBuckets returns how many index buckets a table of capacity
// entries has: about 1.4 ways per entry, so that a key's two buckets are
// full only when the table is (bpf/include/dlb_maps.h sizes the maps the
// same way).
func tabIndexBuckets(capacity uint32) uint32 {
	return max(1, (capacity+9)/10)
}

// tabBitmapWords returns how many 64-bit words the bitmap of a table of
// capacity entries has (a bit per entry).
func tabBitmapWords(capacity uint32) uint32 {
	return (capacity + 63) / 64
}

// tabUsedWords returns how many 64-bit words the bitmap map of a table of
// capacity entries has: the bitmap, then its summary (a bit per bitmap
// word, set when the word is full; bpf/include/table.h, name_alloc).
func tabUsedWords(capacity uint32) uint32 {
	words := tabBitmapWords(capacity)
	return words + (words+63)/64
}

// sizeTable sizes the bitmap and index of the table whose entries map is
// entries in spec, and refuses a capacity the index cannot address.
func sizeTable(spec *ebpf.CollectionSpec, entries, used, index string) error {
	capacity := spec.Maps[entries].MaxEntries
	if limit := uint32(dispatcherDlbConstsDLB_TAB_MAX_ENTRIES); capacity > limit {
		return fmt.Errorf("%s: table size %d is larger than %d", entries, capacity, limit)
	}
	spec.Maps[used].MaxEntries = tabUsedWords(capacity)
	spec.Maps[index].MaxEntries = tabIndexBuckets(capacity)
	return nil
}

// prepare readies a newly created table: the bitmap bits past the
// capacity are set for good (no entry is there), and every CPU's cursor
// starts at its own share of the table, so that CPUs do not allocate the
// same entries. A table adopted from pins is left as it is.
func (t table) prepare() error {
	capacity := t.entries.MaxEntries()
	words := tabBitmapWords(capacity)
	if t.used.MaxEntries() != tabUsedWords(capacity) {
		return fmt.Errorf("%s: entry bitmap of %d words, want %d", t.name, t.used.MaxEntries(), tabUsedWords(capacity))
	}
	if tail := capacity % 64; tail != 0 {
		var w uint64
		if err := t.used.Lookup(words-1, &w); err != nil {
			return fmt.Errorf("%s: reading the entry bitmap: %w", t.name, err)
		}
		if seal := ^uint64(0) << tail; w&seal != seal {
			if err := t.used.Update(words-1, w|seal, ebpf.UpdateExist); err != nil {
				return fmt.Errorf("%s: sealing the entry bitmap: %w", t.name, err)
			}
		}
	}
	var cur []uint32
	if err := t.cursor.Lookup(uint32(0), &cur); err != nil {
		return fmt.Errorf("%s: reading the allocation cursors: %w", t.name, err)
	}
	for _, c := range cur {
		if c != 0 {
			return nil
		}
	}
	if len(cur) < 2 {
		return nil
	}
	for i := range cur {
		cur[i] = uint32(uint64(i) * uint64(words) / uint64(len(cur)))
	}
	if err := t.cursor.Update(uint32(0), cur, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("%s: writing the allocation cursors: %w", t.name, err)
	}
	return nil
}

// eachEntry calls each for every entry of t in use (a snapshot: entries
// change while it reads), read through memory maps of the arrays. E is
// the entries' type; live tells an entry in use from one being written.
func eachEntry[E any](t table, live func(*E) bool, each func(*E)) error {
	return eachSlot(t, live, func(_ uint32, e *E) { each(e) })
}

// eachSlot is eachEntry, with each entry's slot in the table.
func eachSlot[E any](t table, live func(*E) bool, each func(uint32, *E)) error {
	used, err := t.used.Memory()
	if err != nil {
		return fmt.Errorf("%s: mapping the entry bitmap: %w", t.name, err)
	}
	entries, err := t.entries.Memory()
	if err != nil {
		return fmt.Errorf("%s: mapping the entries: %w", t.name, err)
	}
	words := make([]uint64, tabBitmapWords(t.entries.MaxEntries()))
	if _, err := used.ReadAt(unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8), 0); err != nil {
		return fmt.Errorf("%s: reading the entry bitmap: %w", t.name, err)
	}
	var e E
	size := unsafe.Sizeof(e)
	if uint32(size) != t.entries.ValueSize() {
		return fmt.Errorf("%s: entries of %d bytes, want %d", t.name, t.entries.ValueSize(), size)
	}
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&e)), size)
	capacity := t.entries.MaxEntries()
	for i, w := range words {
		for w != 0 {
			slot := uint32(i)*64 + uint32(bits.TrailingZeros64(w))
			w &= w - 1
			if slot >= capacity {
				break
			}
			if _, err := entries.ReadAt(buf, int64(slot)*int64(size)); err != nil {
				return fmt.Errorf("%s: reading entry %d: %w", t.name, slot, err)
			}
			if live(&e) {
				each(slot, &e)
			}
		}
	}
	return nil
}

// liveState reports whether a connection state is that of an entry in
// use (established or closing).
func liveState(s uint8) bool {
	st := dispatcherFlowState(s)
	return st == dispatcherFlowStateFLOW_ESTABLISHED || st == dispatcherFlowStateFLOW_CLOSING
}

func (d *Datapath) tables() []table {
	o := &d.objs
	return []table{
		{"conns", o.Conns, o.ConnUsed, o.ConnCursor, o.ConnIndex},
		{"nat_flows", o.NatFlows, o.NatFlowUsed, o.NatFlowCursor, o.NatFlowIndex},
		{"nat_ports", o.NatPorts, o.NatPortUsed, o.NatPortCursor, o.NatPortIndex},
	}
}

// runCtl runs a control program on c (a struct conn_ctl or nat_ctl).
func runCtl[C any](p *ebpf.Program, c *C) error {
	if _, err := p.Run(&ebpf.RunOptions{Context: c, ContextOut: c}); err != nil {
		return err
	}
	return nil
}

// getConn returns the connection-table entry of a flow.
func (d *Datapath) getConn(k dispatcherFlowKey) (dispatcherFlow, bool, error) {
	c := dispatcherConnCtl{Entry: dispatcherConnEntry{Key: k}}
	if err := runCtl(d.objs.DlbConnGet, &c); err != nil {
		return dispatcherFlow{}, false, fmt.Errorf("reading a connection: %w", err)
	}
	return c.Entry.Flow, c.Result == ctlDone, nil
}

// putConn writes a connection-table entry: over the flow's entry, else as
// a new one (evicting, as the executor does, when the table is full).
func (d *Datapath) putConn(k dispatcherFlowKey, f dispatcherFlow) error {
	c := dispatcherConnCtl{Entry: dispatcherConnEntry{Key: k, Flow: f}}
	if err := runCtl(d.objs.DlbConnPut, &c); err != nil {
		return fmt.Errorf("writing a connection: %w", err)
	}
	if c.Result != ctlDone {
		return errors.New("writing a connection: no room could be made")
	}
	return nil
}

// deleteConn removes a flow's entry if its last_seen is still seen (any,
// when 0). It reports whether it removed it.
func (d *Datapath) deleteConn(k dispatcherFlowKey, seen uint64) (bool, error) {
	c := dispatcherConnCtl{Entry: dispatcherConnEntry{Key: k}, ExpectSeen: seen}
	if err := runCtl(d.objs.DlbConnDel, &c); err != nil {
		return false, fmt.Errorf("removing a connection: %w", err)
	}
	return c.Result == ctlDone, nil
}

// eachConn calls each for every entry of the MAC connection table.
func (d *Datapath) eachConn(each func(dispatcherConnEntry)) error {
	return eachEntry(d.tables()[0], func(e *dispatcherConnEntry) bool { return liveState(e.Flow.State) },
		func(e *dispatcherConnEntry) { each(*e) })
}

// natCtl runs dlb_nat_ctl.
func (d *Datapath) natCtl(c *dispatcherNatCtl) error {
	if err := runCtl(d.objs.DlbNatCtl, c); err != nil {
		return fmt.Errorf("NAT table operation %d: %w", c.Op, err)
	}
	return nil
}

// getNATFlow returns the nat_flows entry of a client flow.
func (d *Datapath) getNATFlow(k dispatcherFlowKey) (dispatcherNatFlow, bool, error) {
	c := dispatcherNatCtl{Op: uint32(dispatcherNatCtlOpNAT_CTL_GET_FLOW), F: dispatcherNatFlowEntry{Key: k}}
	err := d.natCtl(&c)
	return c.F.Flow, err == nil && c.Result == ctlDone, err
}

// getNATPort returns the nat_ports entry of a return address's port.
func (d *Datapath) getNATPort(k dispatcherNatKey) (dispatcherNatRev, bool, error) {
	c := dispatcherNatCtl{Op: uint32(dispatcherNatCtlOpNAT_CTL_GET_PORT), P: dispatcherNatPortEntry{Key: k}}
	err := d.natCtl(&c)
	return c.P.Rev, err == nil && c.Result == ctlDone, err
}

// putNATFlow writes a nat_flows entry (over the key's, else new).
func (d *Datapath) putNATFlow(k dispatcherFlowKey, f dispatcherNatFlow) error {
	c := dispatcherNatCtl{Op: uint32(dispatcherNatCtlOpNAT_CTL_PUT_FLOW), F: dispatcherNatFlowEntry{Key: k, Flow: f}}
	if err := d.natCtl(&c); err != nil {
		return err
	}
	if c.Result != ctlDone {
		return errors.New("writing a NAT flow: the table is full")
	}
	return nil
}

// putNATPort writes a nat_ports entry (over the key's, else new).
func (d *Datapath) putNATPort(k dispatcherNatKey, r dispatcherNatRev) error {
	c := dispatcherNatCtl{Op: uint32(dispatcherNatCtlOpNAT_CTL_PUT_PORT), P: dispatcherNatPortEntry{Key: k, Rev: r}}
	if err := d.natCtl(&c); err != nil {
		return err
	}
	if c.Result != ctlDone {
		return errors.New("writing a NAT port: the table is full")
	}
	return nil
}

// deleteNATFlow removes a client flow's nat_flows entry if its last_seen
// is still seen (any, when 0). It reports whether it removed it.
func (d *Datapath) deleteNATFlow(k dispatcherFlowKey, seen uint64) (bool, error) {
	c := dispatcherNatCtl{Op: uint32(dispatcherNatCtlOpNAT_CTL_DEL_FLOW), F: dispatcherNatFlowEntry{Key: k}, ExpectSeen: seen}
	err := d.natCtl(&c)
	return err == nil && c.Result == ctlDone, err
}

// deleteNATPort removes a port's nat_ports entry if its last_seen is still
// seen (any, when 0). It reports whether it removed it.
func (d *Datapath) deleteNATPort(k dispatcherNatKey, seen uint64) (bool, error) {
	c := dispatcherNatCtl{Op: uint32(dispatcherNatCtlOpNAT_CTL_DEL_PORT), P: dispatcherNatPortEntry{Key: k}, ExpectSeen: seen}
	err := d.natCtl(&c)
	return err == nil && c.Result == ctlDone, err
}

// eachNATFlow calls each for every entry of nat_flows.
func (d *Datapath) eachNATFlow(each func(dispatcherFlowKey, dispatcherNatFlow)) error {
	return eachEntry(d.tables()[1], func(e *dispatcherNatFlowEntry) bool { return liveState(e.Flow.State) },
		func(e *dispatcherNatFlowEntry) { each(e.Key, e.Flow) })
}

// eachNATPort calls each for every entry of nat_ports.
func (d *Datapath) eachNATPort(each func(dispatcherNatKey, dispatcherNatRev)) error {
	return eachEntry(d.tables()[2], func(e *dispatcherNatPortEntry) bool { return liveState(e.Rev.State) },
		func(e *dispatcherNatPortEntry) { each(e.Key, e.Rev) })
}

// hopCached is the flag of a NAT entry that caches its next hop towards
// its client (NAT_F_NEXT_HOP).
const hopCached = uint8(dispatcherNatFlagsNAT_F_NEXT_HOP)

// RoutesChanged tells the executor that the host's routes may have
// changed: every next hop a NAT entry cached towards its client (looked up
// in the routing table, when no client gateway is set) is looked up again
// at the entry's next reply, once. Nothing is written but the config
// map's route generation, whatever the number of entries.
func (d *Datapath) RoutesChanged() error {
	cfg := d.applied.cfg
	cfg.RouteGen++
	if err := d.applyConfig(cfg); err != nil {
		return fmt.Errorf("marking the cached NAT next hops stale: %w", err)
	}
	return nil
}

// ForgetStaleHops clears the next hop that NAT entries cached towards
// their clients (looked up in the routing table, when no client gateway
// is set) where its interface no longer exists: an interface deleted and
// created again gets a new index, and replies sent to the old one would
// be lost for as long as the connection lives. The next reply looks the
// hop up again. It returns how many entries it cleared. Each interface is
// looked up once: a lookup is a netlink dump of every link (about 60 µs
// here), and dlbd asks at every start, over every NAT entry.
func (d *Datapath) ForgetStaleHops() (int, error) {
	live := onceEach(func(ifindex uint32) bool {
		_, err := net.InterfaceByIndex(int(ifindex))
		return err == nil
	})
	return d.forgetHops(func(h dispatcherNextHop) bool { return !live(h.Ifindex) })
}

// ForgetHopsTo clears the next hop that NAT entries cached towards their
// clients where stale says so of its interface and MAC: a neighbour whose
// MAC changed (a router replaced, a VRRP pair's backup taking over with
// its own MAC) no longer answers at the old one. The next reply looks the
// hop up again. It returns how many entries it cleared.
func (d *Datapath) ForgetHopsTo(stale func(ifindex int, mac net.HardwareAddr) bool) (int, error) {
	return d.forgetHops(func(h dispatcherNextHop) bool { return stale(int(h.Ifindex), h.Mac[:]) })
}

// onceEach returns live remembering its answer for each interface index.
func onceEach(live func(ifindex uint32) bool) func(uint32) bool {
	seen := map[uint32]bool{}
	return func(ifindex uint32) bool {
		ok, known := seen[ifindex]
		if !known {
			ok = live(ifindex)
			seen[ifindex] = ok
		}
		return ok
	}
}

// forgetHops clears the cached next hops that stale says are stale, and
// returns how many it cleared.
func (d *Datapath) forgetHops(stale func(dispatcherNextHop) bool) (int, error) {
	type cachedHop struct {
		key dispatcherNatKey
		hop dispatcherNextHop
	}
	var found []cachedHop
	err := d.eachNATPort(func(k dispatcherNatKey, r dispatcherNatRev) {
		if r.Flags&hopCached != 0 && stale(r.Hop) {
			found = append(found, cachedHop{k, r.Hop})
		}
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, f := range found {
		// The executor clears the hop if it is still the one found: the
		// entry may have changed since the scan (closing, refreshed,
		// gone), and only the hop is written.
		c := dispatcherNatCtl{Op: uint32(dispatcherNatCtlOpNAT_CTL_FORGET_HOP),
			P: dispatcherNatPortEntry{Key: f.key, Rev: dispatcherNatRev{Hop: f.hop}}}
		if err := d.natCtl(&c); err != nil {
			return n, fmt.Errorf("clearing a stale next hop: %w", err)
		}
		if c.Result == ctlDone {
			n++
		}
	}
	return n, nil
}
