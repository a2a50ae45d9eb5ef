//go:build linux

package datapath

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// recreateVeth deletes the veth pair dlbdp0/dlbdp1 of a test env and
// creates it again (a driver reload, a NIC hot-plug), returning the new
// index of dlbdp0.
func recreateVeth(t *testing.T) int {
	t.Helper()
	l, err := netlink.LinkByName("dlbdp0")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkDel(l); err != nil {
		t.Fatalf("deleting the veth: %v", err)
	}
	idx, err := testutil.AddVethPair("dlbdp0", "dlbdp1")
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

// pins lists the pin directory.
func pins(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// TestPrivilegedReopenAfterInterfaceRecreated: the interface the executor
// was attached to is deleted and created again while dlbd is down. The
// pinned link is severed; the next Open drops it instead of failing with
// "link has been severed", and Attach attaches afresh to the new interface,
// keeping the maps and the connection table.
func TestPrivilegedReopenAfterInterfaceRecreated(t *testing.T) {
	e := newTestEnv(t)
	if _, err := e.dp.Attach(e.dummy, lb.XDPGeneric); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	e.putConn(t, conn{key: key(vipTCP, 80, 7, 6), backend: 10, service: 1})
	if err := e.dp.Close(); err != nil {
		t.Fatal(err)
	}
	idx := recreateVeth(t)

	dp, err := Open(Options{PinDir: e.pinDir, ConnTableSize: 4096})
	if err != nil {
		t.Fatalf("Open after the interface was recreated: %v", err)
	}
	e.dp = dp // the cleanup removes this one
	if a, ok := dp.Attached(); ok {
		t.Errorf("attached %+v after Open, want the severed link dropped", a)
	}
	if slices.Contains(pins(t, e.pinDir), linkPin) {
		t.Errorf("the severed link is still pinned: %v", pins(t, e.pinDir))
	}
	if _, err := dp.Attach(idx, lb.XDPGeneric); err != nil {
		t.Fatalf("Attach to the new interface: %v", err)
	}
	if a, ok := dp.Attached(); !ok || a.Ifindex != idx {
		t.Errorf("attached %+v %v, want ifindex %d", a, ok, idx)
	}
	if _, ok := e.getConn(t, key(vipTCP, 80, 7, 6)); !ok {
		t.Error("the connection table lost its entry")
	}
	if got, _ := e.run(t, tcpTo(vipTCP, 80, 7, "A").Build(t)); got != xdpTX {
		t.Errorf("verdict %d on the established flow, want XDP_TX", got)
	}
}

// TestPrivilegedAttachAfterInterfaceRecreated: the interface is deleted and
// created again while the executor is open. It is no longer reported as
// attached (not "attached to ifindex 0"), and Attach to the new interface
// replaces the severed link instead of refusing it as another interface.
func TestPrivilegedAttachAfterInterfaceRecreated(t *testing.T) {
	e := newTestEnv(t)
	e.attachBoth(t)
	idx := recreateVeth(t)
	if a, ok := e.dp.Attached(); ok {
		t.Errorf("reported attached %+v after the interface was deleted", a)
	}
	if as := e.dp.attachments(); len(as) != 0 {
		t.Errorf("attachments %+v after both interfaces were deleted", as)
	}
	if _, err := e.dp.Attach(idx, lb.XDPGeneric); err != nil {
		t.Fatalf("Attach to the new interface: %v", err)
	}
	if a, ok := e.dp.Attached(); !ok || a.Ifindex != idx {
		t.Errorf("attached %+v %v, want ifindex %d", a, ok, idx)
	}
}

// TestPrivilegedRemoveLeavesNoPins: Remove unpins everything it owns, even
// with severed links and a program pin left half-way by an interrupted
// upgrade, and says what it removed; the directory stays (dlbd locks it).
func TestPrivilegedRemoveLeavesNoPins(t *testing.T) {
	e := newTestEnv(t)
	e.attachBoth(t)
	recreateVeth(t)
	if err := e.dp.objs.DlbXdp.Pin(e.pinDir + "/" + progPin + "_new"); err != nil {
		t.Fatal(err)
	}
	before := pins(t, e.pinDir)
	slices.Sort(before)
	if listed, err := Pins(e.pinDir); err != nil || !slices.Equal(listed, before) {
		t.Errorf("Pins: %v (%v), want every pin that is there: %v", listed, err, before)
	}
	removed, err := e.dp.RemovePins()
	if err != nil {
		t.Fatalf("RemovePins: %v", err)
	}
	if left := pins(t, e.pinDir); len(left) != 0 {
		t.Errorf("pins left: %v", left)
	}
	if !slices.Equal(before, removed) {
		t.Errorf("removed %v, want every pin that was there: %v", removed, before)
	}
	if listed, err := Pins(e.pinDir); err != nil || len(listed) != 0 {
		t.Errorf("Pins after RemovePins: %v (%v), want none", listed, err)
	}
	e.dp = reopen(t, e.pinDir)
}

// TestPrivilegedRemovePinsWithoutOpen: pins that cannot be opened (here: a
// map of another value size, its ABI version unchanged) are removed by the
// package-level RemovePins, which "executor stop" uses when there is no
// executor loaded.
func TestPrivilegedRemovePinsWithoutOpen(t *testing.T) {
	e := newTestEnv(t)
	if _, err := e.dp.Attach(e.dummy, lb.XDPGeneric); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	backends := e.dp.objs.Backends.MaxEntries()
	if err := e.dp.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.pinDir, dispatcherMapBackends)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	other, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: backends})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Pin(path); err != nil {
		t.Fatal(err)
	}
	other.Close()
	if _, err := Open(Options{PinDir: e.pinDir, ConnTableSize: 4096}); !errors.Is(err, ErrIncompatiblePins) {
		t.Fatalf("Open over a map of another layout: %v, want ErrIncompatiblePins", err)
	}
	before := pins(t, e.pinDir)
	// What is not the executor's stays.
	if err := os.Mkdir(filepath.Join(e.pinDir, "other"), 0o700); err != nil {
		t.Fatal(err)
	}
	removed, err := RemovePins(e.pinDir)
	if err != nil {
		t.Fatalf("RemovePins: %v", err)
	}
	if left := pins(t, e.pinDir); !slices.Equal(left, []string{"other"}) {
		t.Errorf("left %v, want only the directory that is not the executor's", left)
	}
	if err := os.Remove(filepath.Join(e.pinDir, "other")); err != nil {
		t.Fatal(err)
	}
	if len(removed) != len(before) || !slices.Contains(removed, linkPin) || !slices.Contains(removed, "conns") {
		t.Errorf("removed %v, want all of %v", removed, before)
	}
	// The XDP program is off the interface.
	l, err := netlink.LinkByName("dlbdp0")
	if err != nil {
		t.Fatal(err)
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		t.Errorf("XDP still attached to dlbdp0: %+v", x)
	}
	if removed, err := RemovePins(e.pinDir); err != nil || len(removed) != 0 {
		t.Errorf("second RemovePins: %v %v, want nothing to do", removed, err)
	}
	e.dp = reopen(t, e.pinDir)
}

// reopen opens a fresh executor on dir, for the test env's cleanup to
// remove.
func reopen(t *testing.T, dir string) *Datapath {
	t.Helper()
	dp, err := Open(Options{PinDir: dir, ConnTableSize: 4096})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return dp
}

// TestPrivilegedRepin: the pins of an open executor are deleted under it
// (all of them with their directory, or only the link's). Repin pins
// again exactly what went, and only that; a dlbd started after this one
// exits then adopts the executor still attached, with its connections.
func TestPrivilegedRepin(t *testing.T) {
	for _, c := range []struct {
		name   string
		remove func(dir string) error
		want   []string // nil: every pin
	}{
		{name: "the whole directory", remove: os.RemoveAll},
		{name: "the link's pin", remove: func(dir string) error { return os.Remove(filepath.Join(dir, linkPin)) }, want: []string{linkPin}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newTestEnv(t)
			if _, err := e.dp.Attach(e.dummy, lb.XDPGeneric); err != nil {
				t.Fatalf("Attach: %v", err)
			}
			k := key(vipTCP, 80, 7, 6)
			e.putConn(t, conn{key: k, backend: 10, service: 1})
			before := pins(t, e.pinDir)
			slices.Sort(before)
			if again, err := e.dp.Repin(); err != nil || len(again) != 0 {
				t.Fatalf("Repin with every pin there: %v, %v; want nothing done", again, err)
			}
			if err := c.remove(e.pinDir); err != nil {
				t.Fatal(err)
			}
			want := c.want
			if want == nil {
				want = before
			}
			again, err := e.dp.Repin()
			if err != nil {
				t.Fatalf("Repin: %v", err)
			}
			if !slices.Equal(again, want) {
				t.Errorf("pinned again %v, want %v", again, want)
			}
			if now := pins(t, e.pinDir); !slices.Equal(sorted(now), before) {
				t.Errorf("pins after Repin %v, want %v", now, before)
			}
			// dlbd exits (its descriptors close) and another starts.
			if err := e.dp.Close(); err != nil {
				t.Fatal(err)
			}
			e.dp = reopen(t, e.pinDir)
			if a, ok := e.dp.Attached(); !ok || a.Ifindex != e.dummy {
				t.Errorf("after a restart: attached %+v %v, want the adopted link on %d", a, ok, e.dummy)
			}
			if _, ok := e.getConn(t, k); !ok {
				t.Error("after a restart: the connection table lost its entry")
			}
		})
	}
}

// sorted returns s sorted.
func sorted(s []string) []string {
	slices.Sort(s)
	return s
}

// TestPrivilegedNativeRefusedForMTU: a veth whose peer's MTU is larger
// than native XDP allows refuses the executor in native mode with
// "numerical result out of range" only; the error now says what to do,
// and auto mode falls back to generic.
func TestPrivilegedNativeRefusedForMTU(t *testing.T) {
	e := newTestEnv(t)
	peer, err := netlink.LinkByName("dlbdp1")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetMTU(peer, 9000); err != nil {
		t.Fatalf("setting the peer's MTU: %v", err)
	}
	_, err = e.dp.Attach(e.dummy, lb.XDPNative)
	if err == nil || !strings.Contains(err.Error(), "MTU") || !strings.Contains(err.Error(), "--xdp-mode generic") {
		t.Fatalf("native attach with the peer's MTU 9000: %v; want an error naming the MTU and the remedy", err)
	}
	t.Log(err)
	m, err := e.dp.Attach(e.dummy, lb.XDPAuto)
	if err != nil || m != lb.XDPGeneric {
		t.Errorf("auto attach: %v, %v; want generic", m, err)
	}
}
