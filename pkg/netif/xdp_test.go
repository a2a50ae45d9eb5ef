//go:build linux

package netif

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// passProgram loads an XDP program that passes every frame.
func passProgram(t *testing.T) *ebpf.Program {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "dlb_test_pass", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, 2, asm.DWord), asm.Return()}})
	if err != nil {
		t.Fatalf("loading a test XDP program: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// TestPrivilegedLinkReportsXDP: an interface reports the XDP program
// attached to it, with its id and mode (what explains an executor that
// cannot attach), and none once it is detached.
func TestPrivilegedLinkReportsXDP(t *testing.T) {
	testutil.RequirePrivileged(t)
	a, _ := pair(t, testutil.InNewNetNS(t))
	prog := passProgram(t)
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := info.ID()
	if !ok {
		t.Fatal("the kernel gave the test program no id")
	}
	n := New()
	for _, c := range []struct {
		name  string
		flags int
		want  lb.XDPProgram
	}{
		{"none", -1, lb.XDPProgram{}},
		{"generic", nl.XDP_FLAGS_SKB_MODE, lb.XDPProgram{Attached: true, ID: uint32(id), Mode: lb.XDPGeneric}},
		{"native", nl.XDP_FLAGS_DRV_MODE, lb.XDPProgram{Attached: true, ID: uint32(id), Mode: lb.XDPNative}},
	} {
		// No subtests: they would run on another thread, in another
		// network namespace.
		if c.flags >= 0 {
			if err := netlink.LinkSetXdpFdWithFlags(a, prog.FD(), c.flags); err != nil {
				t.Fatalf("%s: attaching: %v", c.name, err)
			}
		}
		l, err := n.LinkByName("dlbhn0")
		if err != nil {
			t.Fatal(err)
		}
		if l.XDP != c.want {
			t.Errorf("%s: XDP %+v, want %+v", c.name, l.XDP, c.want)
		}
		if c.flags >= 0 {
			if err := netlink.LinkSetXdpFdWithFlags(a, -1, c.flags); err != nil {
				t.Fatalf("%s: detaching: %v", c.name, err)
			}
		}
	}
	if l, err := n.LinkByName("dlbhn0"); err != nil || l.XDP != (lb.XDPProgram{}) {
		t.Errorf("after detaching: XDP %+v (%v), want none", l.XDP, err)
	}
}
