package dispatcher

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestPrivilegedFullDiskRefusesChange: on a state directory with no room
// left (a small tmpfs, filled), a change is refused naming why, and
// nothing of it stays: not in the configuration, not on the host (the
// cluster address it put on comes off), not after a restart. Once there
// is room, the same change is saved.
func TestPrivilegedFullDiskRefusesChange(t *testing.T) {
	testutil.RequirePrivileged(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0700"); err != nil {
		t.Fatalf("mounting a small tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	h := newHarness(t, dir)
	h.mustApply(op("executor", "start", "", "interface", "eth0"))
	fill := filepath.Join(dir, "fill")
	if err := os.WriteFile(fill, make([]byte, 128<<10), 0o600); err == nil {
		t.Fatal("128 KiB written into a 64 KiB tmpfs")
	}
	on := func(a string) bool {
		h.nif.mu.Lock()
		defer h.nif.mu.Unlock()
		return h.nif.addresses[netip.MustParseAddr(a)] == "eth0"
	}
	// The journal's last page has room for a few records: changes are
	// saved until it is full.
	var saved []string
	refused := ""
	for i := range 200 {
		a := fmt.Sprintf("198.18.1.%d", i+1)
		err := h.apply(op("cluster", "add", a, "configure", "yes"))
		if err == nil {
			saved = append(saved, a)
			continue
		}
		if !strings.Contains(err.Error(), "no space left on device") {
			t.Fatalf("cluster add %s: %v; want no space left on device", a, err)
		}
		refused = a
		break
	}
	if refused == "" {
		t.Fatal("200 changes saved into a full state directory")
	}
	t.Logf("%d changes saved, then %s refused", len(saved), refused)
	check := func(when string, want []string) {
		t.Helper()
		cfg := h.config()
		if len(cfg.Clusters) != len(want) {
			t.Errorf("%s: %d clusters; want %d", when, len(cfg.Clusters), len(want))
		}
		for _, a := range want {
			if !on(a) {
				t.Errorf("%s: %s is not on the interface", when, a)
			}
		}
	}
	check("after the refusal", saved)
	if on(refused) {
		t.Errorf("the refused change's address %s stayed on the interface", refused)
	}
	h.restart()
	check("after a restart", saved)
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	h.mustApply(op("cluster", "add", refused, "configure", "yes"))
	h.restart()
	check("once there was room, after a restart", append(saved, refused))
}
