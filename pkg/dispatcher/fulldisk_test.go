package dispatcher

import (
	"os"
	"strings"
	"testing"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestPrivilegedFullDiskRefusesChange: on a state directory with no room
// left (a small tmpfs, filled), a change is refused naming why, before it
// touches anything: nothing of it is in the configuration or on the host,
// nor after a restart, and an executor stop leaves the executor as it was
// (not stopped and started again with new tables). Once there is room, the
// same change is saved.
func TestPrivilegedFullDiskRefusesChange(t *testing.T) {
	testutil.RequirePrivileged(t)
	dir := t.TempDir()
	testutil.SmallFS(t, dir, 64<<10)
	h := newHarness(t, dir)
	const saved, refused = "198.18.1.1", "198.18.1.2"
	h.mustApply(op("executor", "start", "", "interface", "eth0"), op("cluster", "add", saved, "configure", "yes"))
	fill := testutil.FillFS(t, dir)
	check := func(when string, want ...string) {
		t.Helper()
		if n := len(h.config().Clusters); n != len(want) {
			t.Errorf("%s: %d clusters; want %d", when, n, len(want))
		}
		for _, a := range want {
			if !h.nif.has(a) {
				t.Errorf("%s: %s is not on the interface", when, a)
			}
		}
	}

	err := h.apply(op("cluster", "add", refused, "configure", "yes"))
	if err == nil || !strings.Contains(err.Error(), "no space left on device (nothing was applied)") {
		t.Fatalf("cluster add on a full state directory: %v; want no space left on device, nothing applied", err)
	}
	check("after the refusal", saved)
	if h.nif.has(refused) {
		t.Errorf("the refused change's address %s is on the interface", refused)
	}
	opens := h.opens
	if err := h.apply(op("executor", "stop", "")); err == nil || !strings.Contains(err.Error(), "nothing was applied") {
		t.Errorf("executor stop on a full state directory: %v; want refused", err)
	}
	if h.opens != opens || h.dp.state() == nil || !h.config().Executor.Started {
		t.Errorf("after the refused stop: opened %d times more, executor loaded %v", h.opens-opens, h.dp.state() != nil)
	}
	h.restart()
	check("after a restart", saved)

	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	h.mustApply(op("cluster", "add", refused, "configure", "yes"))
	h.restart()
	check("once there was room, after a restart", saved, refused)
}
