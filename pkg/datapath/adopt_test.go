//go:build linux

package datapath

import (
	"testing"

	"github.com/cilium/ebpf"
)

// TestBuildDigest: the digest that tells a pinned program is the one Open
// would load is the same for the same object and sizes, and differs when
// any size or constant the loader sets differs, or the build does.
func TestBuildDigest(t *testing.T) {
	// sized sizes the spec as Open does, with change before and after
	// after.
	sized := func(t *testing.T, change, after func(*ebpf.CollectionSpec)) [32]byte {
		t.Helper()
		spec, err := loadDispatcher()
		if err != nil {
			t.Fatal(err)
		}
		if change != nil {
			change(spec)
		}
		if err := sizeBackendStats(spec); err != nil {
			t.Fatal(err)
		}
		if after != nil {
			after(spec)
		}
		return buildDigest(spec)
	}
	base := sized(t, nil, nil)
	if again := sized(t, nil, nil); again != base {
		t.Fatalf("the same spec: digests %x and %x", base, again)
	}
	for _, tc := range []struct {
		name          string
		change, after func(*ebpf.CollectionSpec)
		salt          string
	}{
		{name: "connection table size", change: func(s *ebpf.CollectionSpec) { s.Maps[dispatcherMapConns].MaxEntries *= 2 }},
		// The backends' size sets stats_stride, a constant, too.
		{name: "backends", change: func(s *ebpf.CollectionSpec) { s.Maps[dispatcherMapBackends].MaxEntries++ }},
		{name: "Maglev table size", change: func(s *ebpf.CollectionSpec) {
			s.Maps[dispatcherMapMaglevTables].InnerMap.MaxEntries = 251
		}},
		{name: "a constant", after: func(s *ebpf.CollectionSpec) {
			if err := s.Variables[dispatcherVarStatsStride].Set(uint32(7)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "another build", salt: "other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buildSalt = tc.salt
			defer func() { buildSalt = "" }()
			if got := sized(t, tc.change, tc.after); got == base {
				t.Errorf("digest unchanged: %x", got)
			}
		})
	}
	// dlb_build itself is not part of what it digests.
	spec, err := loadDispatcher()
	if err != nil {
		t.Fatal(err)
	}
	if err := sizeBackendStats(spec); err != nil {
		t.Fatal(err)
	}
	if err := spec.Variables[dispatcherVarDlbBuild].Set(base); err != nil {
		t.Fatal(err)
	}
	if got := buildDigest(spec); got != base {
		t.Errorf("digest with dlb_build set: %x, want %x", got, base)
	}
	if v := spec.Variables[dispatcherVarDlbBuild]; !v.Constant() || v.Size() != 32 {
		t.Errorf("dlb_build: %v; want 32 bytes of read-only data", v)
	}
}
