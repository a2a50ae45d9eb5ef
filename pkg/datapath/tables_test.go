//go:build linux

package datapath

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestPrivilegedFillTable: a Maglev table filled through its memory
// reads back slot by slot as written, at the smallest and the largest
// size (the kernel keeps an array's 4-byte slots 8 bytes apart), with a
// buffer kept from a table to the next, larger or smaller.
func TestPrivilegedFillTable(t *testing.T) {
	testutil.RequirePrivileged(t)
	spec, err := loadDispatcher()
	if err != nil {
		t.Fatal(err)
	}
	var buf []byte
	for round, size := range []uint32{lb.MinTableSize, lb.MaxTableSize, lb.MinTableSize} {
		in := spec.Maps[dispatcherMapMaglevTables].InnerMap.Copy()
		in.MaxEntries = size
		m, err := ebpf.NewMap(in)
		if err != nil {
			t.Fatal(err)
		}
		table := make([]uint32, size)
		for i := range table {
			table[i] = uint32(i+round)*2654435761 + 1
		}
		if buf, err = fillTable(m, table, buf); err != nil {
			t.Fatal(err)
		}
		keys, got := make([]uint32, size), make([]uint32, size)
		var cursor ebpf.MapBatchCursor
		n, err := m.BatchLookup(&cursor, keys, got, nil)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Fatal(err)
		}
		if n != int(size) {
			t.Fatalf("size %d: read %d slots", size, n)
		}
		for i, k := range keys {
			if got[i] != table[k] {
				t.Fatalf("size %d: slot %d holds %d, want %d", size, k, got[i], table[k])
			}
		}
		m.Close()
	}
}
