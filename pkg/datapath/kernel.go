package datapath

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// MinKernel is the oldest Linux release known to accept the executor:
// make test-kernels boots Debian's 6.1 and 6.12 in qemu; releases between
// them were not tried. Linux 6.1, Debian 12's default kernel, refuses it:
// its verifier explores more than its limit of a million instructions.
const MinKernel = "6.12"

// refusedTail is how many of the verifier's last lines an error keeps: the
// whole log runs to megabytes.
const refusedTail = 12

// refused describes the verifier's refusal of the executor: the kernel
// release, the release the executor needs, the verifier's reason and the
// last lines of its log. It wraps ve (and so the errno it carries).
func refused(ve *ebpf.VerifierError) error {
	log := ve.Log
	if len(log) > refusedTail {
		log = log[len(log)-refusedTail:]
	}
	what := "refused the program"
	if errors.Is(ve, unix.E2BIG) {
		what = "found the program too complex (above its limit of instructions to explore)"
	}
	return &RefusedError{Kernel: kernelRelease(), Reason: what, Tail: strings.Join(log, "\n"), Err: ve}
}

// RefusedError is the kernel verifier's refusal of the executor's program.
type RefusedError struct {
	Kernel string // the running kernel's release (uname -r)
	Reason string // what the verifier found, in words
	Tail   string // the verifier log's last lines
	Err    *ebpf.VerifierError
}

// Error names the kernel, the release dlb needs and the verifier's reason,
// with the last lines of its log.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("the verifier of Linux %s %s; the executor needs Linux %s or newer (the verifier's last lines follow)\n%s",
		e.Kernel, e.Reason, MinKernel, e.Tail)
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
