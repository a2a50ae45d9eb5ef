//go:build linux

package datapath

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// TestPrivilegedAttachRefusesAnotherProgram: the interface runs an XDP
// program another tool attached, through netlink (as "ip link" does) or
// through a BPF link. Attach fails in every mode without replacing it,
// and DescribeXDP names it: its name, the link holding it, not a dlb
// executor.
func TestPrivilegedAttachRefusesAnotherProgram(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags int                 // netlink attach flags; 0: through a BPF link
		link  link.XDPAttachFlags // the BPF link's mode
	}{
		{name: "netlink, native", flags: unix.XDP_FLAGS_DRV_MODE},
		{name: "netlink, generic", flags: unix.XDP_FLAGS_SKB_MODE},
		{name: "BPF link, generic", link: link.XDPGenericMode},
		{name: "BPF link, native", link: link.XDPDriverMode},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newTestEnv(t)
			var objs benchObjects
			if err := loadBenchObjects(&objs, nil); err != nil {
				t.Fatal(err)
			}
			defer objs.Close()
			info, err := objs.BenchSink.Info()
			if err != nil {
				t.Fatal(err)
			}
			progID, _ := info.ID()
			var linkID uint32
			if c.flags != 0 {
				l, err := netlink.LinkByIndex(e.dummy)
				if err != nil {
					t.Fatal(err)
				}
				if err := netlink.LinkSetXdpFdWithFlags(l, objs.BenchSink.FD(), c.flags); err != nil {
					t.Fatalf("attaching the other program: %v", err)
				}
			} else {
				l, err := link.AttachXDP(link.XDPOptions{Program: objs.BenchSink, Interface: e.dummy, Flags: c.link})
				if err != nil {
					t.Fatalf("attaching the other program: %v", err)
				}
				defer l.Close()
				li, err := l.Info()
				if err != nil {
					t.Fatal(err)
				}
				linkID = uint32(li.ID)
			}
			for _, m := range []lb.XDPMode{lb.XDPAuto, lb.XDPNative, lb.XDPGeneric} {
				_, err := e.dp.Attach(e.dummy, m)
				if !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EEXIST) {
					t.Errorf("Attach in %s mode: %v, want the kernel's refusal", m, err)
				}
				if a, ok := e.dp.Attached(); ok {
					t.Errorf("Attach in %s mode: attached %+v", m, a)
				}
			}
			l, err := netlink.LinkByIndex(e.dummy)
			if err != nil {
				t.Fatal(err)
			}
			if x := l.Attrs().Xdp; x == nil || x.ProgId != uint32(progID) {
				t.Fatalf("the interface runs %+v, want the other program %d still", x, progID)
			}
			p := lb.XDPProgram{Attached: true, ID: uint32(progID)}
			e.dp.DescribeXDP(e.dummy, &p)
			want := lb.XDPProgram{Attached: true, ID: uint32(progID), Name: "bench_sink", LinkID: linkID}
			if p != want {
				t.Errorf("DescribeXDP: %+v, want %+v", p, want)
			}
		})
	}
}

// TestPrivilegedAttachRefusesAnotherExecutor: a second executor (another
// pin directory: a second dlbd) holds the interface. Attach fails;
// DescribeXDP says it is a dlb executor and names its link; once the
// other one is removed, Attach succeeds.
func TestPrivilegedAttachRefusesAnotherExecutor(t *testing.T) {
	e := newTestEnv(t)
	other, err := Open(Options{PinDir: newPinDir(t), ConnTableSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	removed := false
	defer func() {
		if !removed {
			_, _ = other.RemovePins()
		}
	}()
	if _, err := other.Attach(e.dummy, lb.XDPGeneric); err != nil {
		t.Fatalf("attaching the other executor: %v", err)
	}
	oa, _ := other.Attached()
	if _, err := e.dp.Attach(e.dummy, lb.XDPGeneric); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("Attach over another executor: %v, want the kernel's refusal", err)
	}
	p := lb.XDPProgram{Attached: true, ID: oa.ProgramID, Mode: lb.XDPGeneric}
	e.dp.DescribeXDP(e.dummy, &p)
	want := lb.XDPProgram{Attached: true, ID: oa.ProgramID, Mode: lb.XDPGeneric, Name: executorProgName, LinkID: oa.LinkID, Executor: true}
	if p != want {
		t.Errorf("DescribeXDP: %+v, want %+v", p, want)
	}
	if _, err := other.RemovePins(); err != nil {
		t.Fatal(err)
	}
	removed = true
	if _, err := e.dp.Attach(e.dummy, lb.XDPGeneric); err != nil {
		t.Fatalf("Attach once the other executor was removed: %v", err)
	}
}

// TestPrivilegedAutoModeSaysWhyGeneric: in auto mode, an interface that
// refuses native XDP (a macvlan has none) gets the executor in generic
// mode, and NativeRefused says why; asked for generic mode, or attached
// natively, there is nothing to say. (No subtests: they would run on
// other threads, outside the test's network namespace.)
func TestPrivilegedAutoModeSaysWhyGeneric(t *testing.T) {
	e := newTestEnv(t)
	// The macvlan's parent is a veth of its own: a veth under a macvlan
	// refuses native XDP too.
	parent, err := testutil.AddVethPair("dlbdp2", "dlbdp3")
	if err != nil {
		t.Fatal(err)
	}
	mv := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: "dlbdpm0", ParentIndex: parent}, Mode: netlink.MACVLAN_MODE_BRIDGE}
	if err := netlink.LinkAdd(mv); err != nil {
		t.Fatalf("adding a macvlan: %v", err)
	}
	l, err := netlink.LinkByName("dlbdpm0")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		ifindex int
		mode    lb.XDPMode
		want    lb.XDPMode
		refused bool
	}{
		{"veth, auto", e.dummy, lb.XDPAuto, lb.XDPNative, false},
		{"macvlan, auto", l.Attrs().Index, lb.XDPAuto, lb.XDPGeneric, true},
		{"macvlan, generic", l.Attrs().Index, lb.XDPGeneric, lb.XDPGeneric, false},
	} {
		m, err := e.dp.Attach(c.ifindex, c.mode)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		why := e.dp.NativeRefused()
		t.Logf("%s: attached in %s mode; native refused: %v", c.name, m, why)
		if m != c.want || (why != nil) != c.refused {
			t.Errorf("%s: attached in %s mode, native refused %v; want %s mode, refused %v", c.name, m, why, c.want, c.refused)
		}
		if why != nil && !errors.Is(why, unix.EOPNOTSUPP) {
			t.Errorf("%s: native refused for %v, want the kernel's EOPNOTSUPP", c.name, why)
		}
		if err := e.dp.Detach(); err != nil {
			t.Fatal(err)
		}
		if e.dp.NativeRefused() != nil {
			t.Errorf("%s: NativeRefused after Detach", c.name)
		}
	}
}
