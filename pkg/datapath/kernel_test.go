package datapath

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// TestRefused: the verifier's refusal names the kernel, the release the
// executor needs and the verifier's reason, keeps only the log's last
// lines, and still unwraps to the verifier error and its errno.
func TestRefused(t *testing.T) {
	long := make([]string, 5000)
	for i := range long {
		long[i] = fmt.Sprintf("%d: (bf) r1 = r6", i)
	}
	long[len(long)-1] = "processed 1000001 insns (limit 1000000)"
	for _, c := range []struct {
		name  string
		cause error
		log   []string
		want  []string
		avoid []string
	}{
		{"too complex", unix.E2BIG, long,
			[]string{"too complex", "needs Linux " + MinKernel + " or newer", "processed 1000001 insns", "4990: (bf)"},
			[]string{"4980: (bf)", "\n0: (bf)"}},
		{"refused", unix.EACCES, []string{"0: (61) r2 = *(u32 *)(r1 +4)", "R2 type=mem expected=fp"},
			[]string{"refused the program", "R2 type=mem expected=fp", "0: (61)"},
			[]string{"too complex"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ve := &ebpf.VerifierError{Cause: c.cause, Log: c.log}
			err := fmt.Errorf("loading executor: %w", &RefusedError{Kernel: kernelRelease(), Err: ve})
			msg := err.Error()
			if !strings.Contains(msg, "Linux "+kernelRelease()) {
				t.Errorf("%q does not name the kernel %s", msg, kernelRelease())
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q lacks %q", msg, w)
				}
			}
			for _, a := range c.avoid {
				if strings.Contains(msg, a) {
					t.Errorf("%q has %q", msg, a)
				}
			}
			if n := strings.Count(msg, "\n"); n > refusedTail {
				t.Errorf("%d lines, want at most %d more than the first", n+1, refusedTail)
			}
			var got *ebpf.VerifierError
			if !errors.As(err, &got) || got != ve || !errors.Is(err, c.cause) {
				t.Errorf("%v does not unwrap to the verifier error and %v", err, c.cause)
			}
			var re *RefusedError
			if !errors.As(err, &re) || re.Kernel != kernelRelease() {
				t.Errorf("%v is not a RefusedError of this kernel", err)
			}
		})
	}
}
