package testutil

import (
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// InNewNetNS moves the calling goroutine, locked to its OS thread, into a new
// network namespace with only a loopback interface (brought up), and moves
// it back when tb ends. The namespace disappears with its last reference.
// Use it at the top of a test that must not touch the host's interfaces.
func InNewNetNS(tb testing.TB) netns.NsHandle {
	tb.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		tb.Fatalf("getting current netns: %v", err)
	}
	ns, err := netns.New()
	if err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		tb.Fatalf("creating netns: %v", err)
	}
	tb.Cleanup(func() {
		if err := netns.Set(orig); err != nil {
			// The thread is stuck in the test namespace: never unlock it,
			// so that the runtime discards it when the goroutine ends.
			tb.Errorf("restoring netns: %v", err)
			return
		}
		ns.Close()
		orig.Close()
		runtime.UnlockOSThread()
	})
	if err := setLoopbackUp(); err != nil {
		tb.Fatalf("bringing up lo: %v", err)
	}
	return ns
}
