//go:build linux

package datapath

import (
	"maps"
	"reflect"
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

// TestSyscallObjectsCoverPrograms: what an adopting Open loads names every
// program of the object but the XDP one, which it adopts; a program added
// to the C code and missing here would be nil in an adopted executor.
func TestSyscallObjectsCoverPrograms(t *testing.T) {
	tags := func(v any) map[string]bool {
		out := map[string]bool{}
		typ := reflect.TypeOf(v).Elem()
		for i := 0; i < typ.NumField(); i++ {
			if tag := typ.Field(i).Tag.Get("ebpf"); tag != "" && typ.Field(i).Type == reflect.TypeOf((*ebpf.Program)(nil)) {
				out[tag] = true
			}
		}
		return out
	}
	want := tags(&dispatcherPrograms{})
	delete(want, "dlb_xdp")
	if got := tags(&syscallObjects{}); !maps.Equal(got, want) {
		t.Errorf("syscallObjects loads programs %v; want every one but dlb_xdp: %v", got, want)
	}
	// objects puts each back in its place.
	var o syscallObjects
	progs := map[string]*ebpf.Program{}
	v := reflect.ValueOf(&o).Elem()
	for i := 0; i < v.NumField(); i++ {
		if tag := v.Type().Field(i).Tag.Get("ebpf"); v.Field(i).Type() == reflect.TypeOf((*ebpf.Program)(nil)) {
			p := new(ebpf.Program)
			progs[tag] = p
			v.Field(i).Set(reflect.ValueOf(p))
		}
	}
	xdp := new(ebpf.Program)
	objs := o.objects(xdp)
	pv := reflect.ValueOf(&objs.dispatcherPrograms).Elem()
	for i := 0; i < pv.NumField(); i++ {
		tag := pv.Type().Field(i).Tag.Get("ebpf")
		want := progs[tag]
		if tag == "dlb_xdp" {
			want = xdp
		}
		if got := pv.Field(i).Interface().(*ebpf.Program); got != want {
			t.Errorf("objects: program %s is not the one loaded", tag)
		}
	}
}
