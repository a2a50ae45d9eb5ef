package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/lb"
)

// tableBatchSize bounds the new tables a batch holds open (each is a file
// descriptor and its memory until the batch is written).
const tableBatchSize = 256

// tableBatch collects Maglev table swaps and writes them with one update
// of maglev_tables per tableBatchSize tables. Updating a map of maps waits
// for the programs running to finish, an RCU grace period of several
// milliseconds, once per update call: written one at a time, 1,000 tables
// took 9 s; written as a batch they take one wait.
type tableBatch struct {
	d     *Datapath
	ids   []uint32
	fds   []uint32
	maps  []*ebpf.Map
	sums  []uint64
	infos []dispatcherTableInfo
	rm    []bool
	names []string
	// buf is fillTable's buffer, kept from one table to the next.
	buf []byte
}

func (d *Datapath) newTableBatch() *tableBatch { return &tableBatch{d: d} }

// add queues s's table if it differs from the one written, or the removal
// of s's table if s has none (a removed table is replaced by an empty
// placeholder: maps of maps refuse batched deletes, and a delete waits
// like an update). Nothing is written before flush.
func (b *tableBatch) add(s lb.DataplaneService) error {
	a := &b.d.applied
	old, known := a.tables[s.ID]
	if s.Table == nil {
		if !known {
			return nil
		}
		empty, err := b.d.placeholder()
		if err != nil {
			return err
		}
		return b.queue(s.ID, empty, 0, true, fmt.Sprintf("removing Maglev table %d", s.ID))
	}
	sum := s.TableSum
	if sum == adoptedTable {
		sum = lb.TableSum(s.Table)
	}
	if known && old == sum {
		return nil
	}
	if known && old == adoptedTable {
		same, err := b.d.pinnedTableHolds(s.ID, s.Table, sum)
		if err != nil {
			return err
		}
		if same {
			a.tables[s.ID] = sum
			delete(a.pinnedTables, s.ID)
			return nil
		}
	}
	spec := b.d.innerSpec.Copy()
	spec.MaxEntries = uint32(len(s.Table))
	inner, err := ebpf.NewMap(spec)
	if err != nil {
		return fmt.Errorf("creating Maglev table: %w", err)
	}
	if b.buf, err = fillTable(inner, s.Table, b.buf); err != nil {
		inner.Close()
		return fmt.Errorf("filling Maglev table: %w", err)
	}
	b.maps = append(b.maps, inner)
	return b.queue(s.ID, inner, sum, false, fmt.Sprintf("swapping in Maglev table of %s@%d", s.Cluster, s.Port))
}

// tableStride is the distance between two slots in a Maglev table's
// memory: the kernel rounds an array's elements up to 8 bytes.
const tableStride = 8

// fillTable writes table into m, a new Maglev table of its size, through
// the map's memory (BPF_F_MMAPABLE): one copy, where a batch update wrote
// slot by slot (15 ms for 65,537 slots, the size of every announced
// cluster's ports). The slots are laid out in buf, grown if need be and
// returned for the next table: a new 512 KiB buffer per table was a third
// of the time 4,000 tables took, in page faults. The memory is mapped for
// the copy only: a mapping left to the garbage collector (Map.Memory's)
// kept each table, and the tables it replaced, in dlbd's memory, 2 GB
// for 4,000 announced clusters.
func fillTable(m *ebpf.Map, table []uint32, buf []byte) ([]byte, error) {
	if m.ValueSize() != 4 {
		return buf, fmt.Errorf("a table of %d-byte slots, want 4", m.ValueSize())
	}
	// An array's elements are 8-byte aligned: a 4-byte slot every 8,
	// and 4 bytes of padding, written as zeros.
	n := tableStride * len(table)
	if cap(buf) < n {
		buf = make([]byte, n)
	} else {
		buf = buf[:n]
	}
	for i, v := range table {
		binary.NativeEndian.PutUint32(buf[tableStride*i:], v)
		binary.NativeEndian.PutUint32(buf[tableStride*i+4:], 0)
	}
	page := os.Getpagesize()
	mem, err := unix.Mmap(m.FD(), 0, (n+page-1)/page*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return buf, fmt.Errorf("mapping the table's memory: %w", err)
	}
	copy(mem, buf)
	if err := unix.Munmap(mem); err != nil {
		return buf, fmt.Errorf("unmapping the table's memory: %w", err)
	}
	return buf, nil
}

func (b *tableBatch) queue(id uint32, m *ebpf.Map, sum uint64, rm bool, name string) error {
	mid, err := mapID(m)
	if err != nil {
		return err
	}
	b.infos = append(b.infos, dispatcherTableInfo{Sum: sum, Size: m.MaxEntries(), MapId: uint32(mid)})
	b.ids = append(b.ids, id)
	b.rm = append(b.rm, rm)
	b.fds = append(b.fds, uint32(m.FD()))
	b.sums = append(b.sums, sum)
	b.names = append(b.names, name)
	if len(b.ids) >= tableBatchSize {
		return b.flush()
	}
	return nil
}

// flush writes the queued swaps. On an error, those written before it are
// recorded as written.
func (b *tableBatch) flush() error {
	defer b.close()
	if len(b.ids) == 0 {
		return nil
	}
	n, err := b.d.objs.MaglevTables.BatchUpdate(b.ids, b.fds, nil)
	if errors.Is(err, ebpf.ErrNotSupported) {
		n, err = 0, nil
		for i, id := range b.ids {
			if err = b.d.objs.MaglevTables.Update(id, b.fds[i], ebpf.UpdateAny); err != nil {
				break
			}
			n++
		}
	}
	if n > 0 {
		// What each swapped-in table is, with its map id: a restarted dlbd
		// trusts an entry only while the table it names is the live one.
		if _, ierr := b.d.objs.MaglevInfo.BatchUpdate(b.ids[:n], b.infos[:n], nil); ierr != nil {
			err = errors.Join(err, fmt.Errorf("recording Maglev tables: %w", ierr))
		}
	}
	a := &b.d.applied
	for i, id := range b.ids[:n] {
		delete(a.pinnedTables, id)
		if b.rm[i] {
			delete(a.tables, id)
			continue
		}
		a.tables[id] = b.sums[i]
	}
	if err != nil {
		name := "writing Maglev tables"
		if n < len(b.names) {
			name = b.names[n]
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// close releases the new tables' descriptors (maglev_tables holds the
// tables written) and empties the batch.
func (b *tableBatch) close() {
	for _, m := range b.maps {
		m.Close()
	}
	b.ids, b.fds, b.maps, b.sums, b.infos, b.rm, b.names = b.ids[:0], b.fds[:0], nil, b.sums[:0], b.infos[:0], b.rm[:0], b.names[:0]
}

// placeholder returns the table that stands for a removed one: a single
// slot naming backend 0, which is never present, so a packet that finds
// it finds no server, as it would find no table.
func (d *Datapath) placeholder() (*ebpf.Map, error) {
	if d.empty != nil {
		return d.empty, nil
	}
	spec := d.innerSpec.Copy()
	spec.MaxEntries = 1
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return nil, fmt.Errorf("creating the empty Maglev table: %w", err)
	}
	d.empty = m
	return m, nil
}

// pinnedTable is a Maglev table found pinned.
type pinnedTable struct {
	id   ebpf.MapID
	size uint32 // 0: not known
	// sum is the table's sum, when known (from maglev_info).
	sum   uint64
	known bool
}

// readInner opens an inner map by its id, which needs CAP_SYS_ADMIN
// (tests take it away).
var readInner = ebpf.NewMapFromID

// tableMemory returns the kernel memory of the tables in maglev_tables and
// their number, placeholders left out: each table's own figure when this
// process may open it, else computed from its size as the kernel does for
// an array (a fixed part, which the placeholder's figure shows, and 4
// bytes a slot).
func (d *Datapath) tableMemory() (bytes, entries uint64, tables int) {
	pinned, err := d.readPinnedTables()
	if err != nil {
		return 0, 0, 0
	}
	var fixed uint64
	for _, t := range pinned {
		if m, err := readInner(t.id); err == nil {
			bytes += memlock(m)
			entries += uint64(m.MaxEntries())
			tables++
			m.Close()
			continue
		}
		if t.size == 0 {
			tables++ // not known
			continue
		}
		if fixed == 0 {
			if p, err := d.placeholder(); err == nil {
				fixed = memlock(p) - 4
			}
		}
		bytes += fixed + 4*uint64(t.size)
		entries += uint64(t.size)
		tables++
	}
	return bytes, entries, tables
}

// mapID returns the id of a map this process holds.
func mapID(m *ebpf.Map) (ebpf.MapID, error) {
	info, err := m.Info()
	if err != nil {
		return 0, fmt.Errorf("reading a Maglev table's id: %w", err)
	}
	id, ok := info.ID()
	if !ok {
		return 0, errors.New("reading a Maglev table's id: the kernel does not say")
	}
	return id, nil
}

// readPinnedTables reads what maglev_tables holds: per service, the live
// table's map id and, where maglev_info describes that very map, its size
// and sum. Placeholders of removed tables are left out. A table
// maglev_info does not describe (written by a dlbd that did not record
// it, or swapped in just before a crash) is read, if this process may
// (that needs CAP_SYS_ADMIN), or else rewritten.
func (d *Datapath) readPinnedTables() (map[uint32]pinnedTable, error) {
	infos := map[uint32]dispatcherTableInfo{}
	if err := readAll(d.objs.MaglevInfo, func(id uint32, t dispatcherTableInfo) {
		if t.MapId != 0 {
			infos[id] = t
		}
	}); err != nil {
		return nil, fmt.Errorf("reading maglev_info: %w", err)
	}
	out := map[uint32]pinnedTable{}
	var id uint32
	var inner ebpf.MapID
	it := d.objs.MaglevTables.Iterate()
	for it.Next(&id, &inner) {
		t := pinnedTable{id: inner}
		if info, ok := infos[id]; ok && ebpf.MapID(info.MapId) == inner {
			t.size, t.sum, t.known = info.Size, info.Sum, true
		} else if m, err := readInner(inner); err == nil {
			t.size = m.MaxEntries()
			m.Close()
		}
		if t.size != 0 && t.size < lb.MinTableSize {
			continue // the placeholder of a removed table
		}
		out[id] = t
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reading maglev_tables: %w", err)
	}
	return out, nil
}

// pinnedTableHolds reports whether the table found pinned for service id
// holds exactly table (whose sum is sum): by the sum in its name, or by
// reading it when it has none.
func (d *Datapath) pinnedTableHolds(id uint32, table []uint32, sum uint64) (bool, error) {
	t, ok := d.applied.pinnedTables[id]
	if !ok || t.size != uint32(len(table)) {
		return false, nil
	}
	if t.known {
		return t.sum == sum, nil
	}
	m, err := readInner(t.id)
	if err != nil {
		return false, nil // gone since, or not ours to read: write a new one
	}
	defer m.Close()
	keys := make([]uint32, len(table))
	vals := make([]uint32, len(table))
	var cursor ebpf.MapBatchCursor
	n, err := m.BatchLookup(&cursor, keys, vals, nil)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return false, fmt.Errorf("reading pinned Maglev table %d: %w", id, err)
	}
	if n != len(table) {
		return false, nil
	}
	for i, k := range keys {
		if k != uint32(i) {
			return false, nil
		}
	}
	return slices.Equal(vals, table), nil
}
