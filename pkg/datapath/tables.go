package datapath

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"

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
	rm    []bool
	names []string
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
	spec.Name = tableName(sum)
	inner, err := ebpf.NewMap(spec)
	if err != nil {
		return fmt.Errorf("creating Maglev table: %w", err)
	}
	keys := make([]uint32, len(s.Table))
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := inner.BatchUpdate(keys, s.Table, nil); err != nil {
		inner.Close()
		return fmt.Errorf("filling Maglev table: %w", err)
	}
	b.maps = append(b.maps, inner)
	return b.queue(s.ID, inner, sum, false, fmt.Sprintf("swapping in Maglev table of %s@%d", s.Cluster, s.Port))
}

func (b *tableBatch) queue(id uint32, m *ebpf.Map, sum uint64, rm bool, name string) error {
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
	b.ids, b.fds, b.maps, b.sums, b.rm, b.names = b.ids[:0], b.fds[:0], nil, b.sums[:0], b.rm[:0], b.names[:0]
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
	size uint32
	// sum is the low bits of the table's sum, from its name (named false
	// for a table whose name carries none: its contents are read).
	sum   uint64
	named bool
}

// A table's map name carries its sum: "m" and 14 hex digits, the low 56
// bits (a map name holds 15 characters). A restarted dlbd compares sums
// instead of reading 1,000 tables back.
const sumBits = 1<<56 - 1

func tableName(sum uint64) string { return fmt.Sprintf("m%014x", sum&sumBits) }

// readPinnedTable reads a pinned table's size and the sum in its name.
func readPinnedTable(id ebpf.MapID) (pinnedTable, error) {
	m, err := ebpf.NewMapFromID(id)
	if err != nil {
		return pinnedTable{}, err
	}
	defer m.Close()
	t := pinnedTable{id: id, size: m.MaxEntries()}
	info, err := m.Info()
	if err != nil {
		return pinnedTable{}, err
	}
	if hex, ok := strings.CutPrefix(info.Name, "m"); ok && len(hex) == 14 {
		if v, err := strconv.ParseUint(hex, 16, 64); err == nil {
			t.sum, t.named = v, true
		}
	}
	return t, nil
}

// pinnedTableHolds reports whether the table found pinned for service id
// holds exactly table (whose sum is sum): by the sum in its name, or by
// reading it when it has none.
func (d *Datapath) pinnedTableHolds(id uint32, table []uint32, sum uint64) (bool, error) {
	t, ok := d.applied.pinnedTables[id]
	if !ok || t.size != uint32(len(table)) {
		return false, nil
	}
	if t.named {
		return t.sum == sum&sumBits, nil
	}
	m, err := ebpf.NewMapFromID(t.id)
	if err != nil {
		return false, nil // gone since: write a new one
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
