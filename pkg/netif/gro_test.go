//go:build linux

package netif

import (
	"testing"

	"github.com/safchain/ethtool"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestPrivilegedGRO: GRO reads the interface's generic receive offload as
// ethtool sets it, names the interface, and refuses an unknown index.
func TestPrivilegedGRO(t *testing.T) {
	testutil.RequirePrivileged(t)
	l, _ := pair(t, testutil.InNewNetNS(t))
	et, err := ethtool.NewEthtool()
	if err != nil {
		t.Fatal(err)
	}
	defer et.Close()
	n := New()
	for _, want := range []bool{true, false, true} {
		if err := et.Change("dlbhn0", map[string]bool{groFeature: want}); err != nil {
			t.Fatalf("setting %s %v: %v", groFeature, want, err)
		}
		name, got, err := n.GRO(l.Attrs().Index)
		if err != nil || got != want || name != "dlbhn0" {
			t.Errorf("GRO set %v: got %q %v, %v", want, name, got, err)
		}
	}
	if _, _, err := n.GRO(1 << 30); err == nil {
		t.Error("GRO of an unknown interface: no error")
	}
}
