package testutil

import (
	"os"
	"strings"
	"testing"
)

// RequirePrivileged skips tb unless the process runs as root. When
// DLB_REQUIRE_PRIVILEGED=1 (as CI sets it) it fails instead, so that a
// privileged test can never pass by being skipped. Privileged tests must be
// named TestPrivileged... so that they can be selected with -run (fuzz
// targets, selected with -fuzz, may use it too).
func RequirePrivileged(tb testing.TB) {
	tb.Helper()
	if !strings.HasPrefix(tb.Name(), "TestPrivileged") && !strings.HasPrefix(tb.Name(), "BenchmarkPrivileged") && !strings.HasPrefix(tb.Name(), "Fuzz") {
		tb.Fatalf("privileged test %s must be named TestPrivileged...", tb.Name())
	}
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("DLB_REQUIRE_PRIVILEGED") == "1" {
		tb.Fatalf("%s needs root, and DLB_REQUIRE_PRIVILEGED=1 forbids skipping it", tb.Name())
	}
	tb.Skipf("%s needs root (run as root, or set DLB_REQUIRE_PRIVILEGED=1 to make this a failure)", tb.Name())
}
