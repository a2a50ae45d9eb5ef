package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestPrivilegedE2EFault19StateDirectoryFull: the file system of dlbd's
// state directory fills up (here a 256 KiB tmpfs). A change is refused,
// saying why and that nothing was applied, before it touches anything:
// "cluster add --configure" leaves no address on the interface (it used
// to stay on), and "executor stop" leaves the executor attached, the same
// program with its tables, and established connections held (it used to
// stop it, and load a new one with empty tables). Once there is room, the
// changes are taken.
func TestPrivilegedE2EFault19StateDirectoryFull(t *testing.T) {
	parallel(t)
	l := newLab(t, 2)
	testutil.SmallFS(t, l.state, 256<<10)
	l.startDlbd()
	l.configure("generic", 10, 10)
	before := l.executor()

	fill := testutil.FillFS(t, l.state)

	// What is left of the journal's last block takes small changes (a
	// dlbd that reserves nothing takes a few): until one is refused.
	refusedAt := -1
	for i := range 100 {
		if _, _, code := l.ctl("cluster", "add", fmt.Sprintf("198.18.3.%d", i+1)); code != 0 {
			refusedAt = i
			break
		}
	}
	t.Logf("changes taken once the file system was full: %d", refusedAt)
	if refusedAt < 0 {
		t.Fatal("100 changes taken on a full state directory")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := l.holdConnections(ctx, 8, 4*time.Second)
	const other = "198.18.0.101"
	_, errOut, code := l.ctl("cluster", "add", other, "--configure")
	t.Logf("cluster add on a full state directory: exit %d: %s", code, strings.TrimSpace(errOut))
	if code == 0 || !strings.Contains(errOut, "no space left on device (nothing was applied)") {
		t.Errorf("cluster add: exit %d, %q; want refused, no space left on device, nothing applied", code, errOut)
	}
	if l.hasAddr(other) {
		t.Errorf("the refused cluster's address %s is on the interface", other)
	}
	_, errOut, code = l.ctl("executor", "stop")
	t.Logf("executor stop on a full state directory: exit %d: %s", code, strings.TrimSpace(errOut))
	if code == 0 || !strings.Contains(errOut, "nothing was applied") {
		t.Errorf("executor stop: exit %d, %q; want refused", code, errOut)
	}
	after := l.executor()
	if !after.Attached || after.ProgramID != before.ProgramID {
		t.Errorf("after the refused stop: attached %v, program %d (was %d): the executor was stopped", after.Attached, after.ProgramID, before.ProgramID)
	}
	checkHeld(t, held, 8)
	l.checkNewConnections(t, "after the refused changes")

	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	l.mustCtl("cluster", "add", other, "--configure")
	if !l.hasAddr(other) {
		t.Errorf("%s not on the interface once there was room", other)
	}
}
