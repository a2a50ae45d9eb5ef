package datapath

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// MinKernel is the oldest Linux release known to accept the executor:
// make test-kernels boots Debian's 6.1 (Debian 12's default kernel) and
// 6.12 in qemu and runs the data-path tests under each; older releases
// were not tried.
const MinKernel = "6.1"

// refusedTail is how many of the verifier's last lines a RefusedError shows.
const refusedTail = 12

// RefusedError is the kernel verifier's refusal of the executor's program.
type RefusedError struct {
	Kernel string // the running kernel's release (uname -r)
	Err    *ebpf.VerifierError
}

// Error names the kernel, the release the executor needs and the
// verifier's reason, with the last refusedTail lines of its log (the whole
// log runs to megabytes).
func (e *RefusedError) Error() string {
	what := "refused the program"
	if errors.Is(e.Err, unix.E2BIG) {
		what = "found the program too complex (above its limit of instructions to explore)"
	}
	log := e.Err.Log
	if len(log) > refusedTail {
		log = log[len(log)-refusedTail:]
	}
	return fmt.Sprintf("the verifier of Linux %s %s; the executor needs Linux %s or newer (the verifier's last lines follow)\n%s",
		e.Kernel, what, MinKernel, strings.Join(log, "\n"))
}

// Unwrap returns the verifier error.
func (e *RefusedError) Unwrap() error { return e.Err }

// kernelRelease returns uname -r, or "(unknown release)".
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "(unknown release)"
	}
	return unix.ByteSliceToString(u.Release[:])
}
