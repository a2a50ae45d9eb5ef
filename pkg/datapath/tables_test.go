//go:build linux

package datapath

import (
	"errors"
	"os"
	"strings"
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

// TestPrivilegedFillTableUnmaps: filling a table leaves no mapping of
// its memory behind (one left to the garbage collector kept every table
// written, and every table replaced, in dlbd's memory: 2 GB for 4,000
// announced clusters).
func TestPrivilegedFillTableUnmaps(t *testing.T) {
	testutil.RequirePrivileged(t)
	spec, err := loadDispatcher()
	if err != nil {
		t.Fatal(err)
	}
	mapped := func() int {
		b, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "bpf-map")
	}
	before := mapped()
	var buf []byte
	for range 3 {
		in := spec.Maps[dispatcherMapMaglevTables].InnerMap.Copy()
		in.MaxEntries = lb.MaxTableSize
		m, err := ebpf.NewMap(in)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if buf, err = fillTable(m, make([]uint32, lb.MaxTableSize), buf); err != nil {
			t.Fatal(err)
		}
	}
	if after := mapped(); after != before {
		t.Errorf("%d mappings of BPF maps after filling 3 tables, %d before", after, before)
	}
}
