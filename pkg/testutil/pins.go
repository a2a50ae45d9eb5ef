package testutil

import (
	"testing"

	"github.com/cilium/ebpf"
)

// PinnedMapID returns the id of the BPF map pinned at path (a test
// compares it before and after, to tell a map kept from one made anew).
func PinnedMapID(t testing.TB, path string) ebpf.MapID {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("loading pinned map %s: %v", path, err)
	}
	defer m.Close()
	info, err := m.Info()
	if err != nil {
		t.Fatalf("reading pinned map %s: %v", path, err)
	}
	id, _ := info.ID()
	return id
}
