//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/cilium/ebpf"
)

// The connection table is a hash table made of BPF arrays (bpf/include/
// table.h): the entries (conns), a bitmap of the entries in use
// (conn_used), per-CPU allocation cursors (conn_cursor), and an index of
// buckets that find entries by key (conn_index). Its hashing, layout and
// locking live in BPF only: pkg/datapath reads the arrays whole (the
// sweeper), and reads, writes and removes single entries through the
// dlb_conn_* syscall programs, which do what the executor does.

// Results of the dlb_conn_* programs (struct conn_ctl).
const (
	ctlDone    = 0
	ctlMissing = 1
	ctlNoRoom  = 2
)

// connIndexBuckets returns how many index buckets a table of capacity
// entries has: about 1.3 ways per entry, so that a key's two buckets are
// full only when the table is.
func connIndexBuckets(capacity uint32) uint32 {
	return max(1, (capacity+10)/11)
}

// connUsedWords returns how many 64-bit words the bitmap of a table of
// capacity entries has.
func connUsedWords(capacity uint32) uint32 {
	return (capacity + 63) / 64
}

// checkConnCapacity refuses a connection table the index cannot address.
func checkConnCapacity(capacity uint32) error {
	if limit := uint32(dispatcherDlbConstsDLB_TAB_MAX_ENTRIES); capacity > limit {
		return fmt.Errorf("connection table size %d is larger than %d", capacity, limit)
	}
	return nil
}

// prepareConnTable readies a newly created connection table: the bitmap
// bits past the capacity are set for good (no entry is there), and every
// CPU's cursor starts at its own share of the table, so that CPUs do not
// allocate the same entries. A table adopted from pins is left as it is.
func prepareConnTable(used, cursor *ebpf.Map, capacity uint32) error {
	words := used.MaxEntries()
	if tail := capacity % 64; tail != 0 {
		var w uint64
		if err := used.Lookup(words-1, &w); err != nil {
			return fmt.Errorf("reading the entry bitmap: %w", err)
		}
		if seal := ^uint64(0) << tail; w&seal != seal {
			if err := used.Update(words-1, w|seal, ebpf.UpdateExist); err != nil {
				return fmt.Errorf("sealing the entry bitmap: %w", err)
			}
		}
	}
	var cur []uint32
	if err := cursor.Lookup(uint32(0), &cur); err != nil {
		return fmt.Errorf("reading the allocation cursors: %w", err)
	}
	fresh := true
	for _, c := range cur {
		if c != 0 {
			fresh = false
		}
	}
	if !fresh || len(cur) < 2 {
		return nil
	}
	for i := range cur {
		cur[i] = uint32(uint64(i) * uint64(words) / uint64(len(cur)))
	}
	if err := cursor.Update(uint32(0), cur, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("writing the allocation cursors: %w", err)
	}
	return nil
}

// connCtl runs one of the dlb_conn_* programs on c.
func connCtl(p *ebpf.Program, c *dispatcherConnCtl) error {
	if _, err := p.Run(&ebpf.RunOptions{Context: c, ContextOut: c}); err != nil {
		return err
	}
	return nil
}

// getConn returns the connection-table entry of a flow.
func (d *Datapath) getConn(k dispatcherFlowKey) (dispatcherFlow, bool, error) {
	c := dispatcherConnCtl{Entry: dispatcherConnEntry{Key: k}}
	if err := connCtl(d.objs.DlbConnGet, &c); err != nil {
		return dispatcherFlow{}, false, fmt.Errorf("reading a connection: %w", err)
	}
	return c.Entry.Flow, c.Result == ctlDone, nil
}

// putConn writes a connection-table entry: over the flow's entry, else as
// a new one (evicting, as the executor does, when the table is full).
func (d *Datapath) putConn(k dispatcherFlowKey, f dispatcherFlow) error {
	c := dispatcherConnCtl{Entry: dispatcherConnEntry{Key: k, Flow: f}}
	if err := connCtl(d.objs.DlbConnPut, &c); err != nil {
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
	if err := connCtl(d.objs.DlbConnDel, &c); err != nil {
		return false, fmt.Errorf("removing a connection: %w", err)
	}
	return c.Result == ctlDone, nil
}

// eachConn calls each for every entry of the connection table (a snapshot:
// entries change while it reads).
func (d *Datapath) eachConn(each func(dispatcherConnEntry)) error {
	used := make([]uint64, d.objs.ConnUsed.MaxEntries())
	err := batchRead(d.objs.ConnUsed, func(i uint32, w uint64) {
		if int(i) < len(used) {
			used[i] = w
		}
	})
	if err != nil {
		return fmt.Errorf("reading the connection table's bitmap: %w", err)
	}
	// Only the words with entries in use are read.
	capacity := d.objs.Conns.MaxEntries()
	for i, w := range used {
		for w != 0 {
			bit := uint32(bits.TrailingZeros64(w))
			w &= w - 1
			slot := uint32(i)*64 + bit
			if slot >= capacity {
				break
			}
			var e dispatcherConnEntry
			if err := d.objs.Conns.Lookup(slot, &e); err != nil {
				return fmt.Errorf("reading the connection table: %w", err)
			}
			if s := dispatcherFlowState(e.Flow.State); s == dispatcherFlowStateFLOW_ESTABLISHED || s == dispatcherFlowStateFLOW_CLOSING {
				each(e)
			}
		}
	}
	return nil
}
