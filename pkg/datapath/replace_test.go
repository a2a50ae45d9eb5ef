//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// setPinnedABI writes abi into the executor's pinned config map, as an
// executor of that ABI would have.
func setPinnedABI(t *testing.T, pinDir string, abi uint32) {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, dispatcherMapConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var cfg dispatcherDlbConfig
	if err := m.Lookup(uint32(0), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg.AbiVersion = abi
	if err := m.Update(uint32(0), &cfg, ebpf.UpdateExist); err != nil {
		t.Fatal(err)
	}
}

// TestPrivilegedReplaceOtherABI: an executor pinned by a dlbd of another
// executor ABI (an upgrade) is not refused but replaced. Open leaves it
// forwarding, on its links and under its pins, and so does a start that
// fails before Attach (RemovePins); Attach puts the new program on the
// old links (the same links: no moment without a program on the
// interface), moves every pin to the new maps (the config map's ABI
// version is this one's) and removes the pins of maps the old one had
// and this one has not; the next Open adopts it.
func TestPrivilegedReplaceOtherABI(t *testing.T) {
	e := newTestEnv(t)
	old, peerIndex := e.attachBoth(t)
	e.putConn(t, conn{key: key(vipTCP, 80, 7, 6), backend: 10, service: 1})
	oldConns := testutil.PinnedMapID(t, filepath.Join(e.pinDir, dispatcherMapConns))
	// A map the older executor had and this one has not.
	gone, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Pin(filepath.Join(e.pinDir, "old_only")); err != nil {
		t.Fatal(err)
	}
	gone.Close()
	if err := e.dp.Close(); err != nil {
		t.Fatal(err)
	}
	abi := uint32(dispatcherDlbConstsDLB_ABI_VERSION)
	setPinnedABI(t, e.pinDir, abi-1)

	// oldInPlace checks that the old executor is as it was: its program
	// on its link, its pins.
	oldInPlace := func(when string) {
		t.Helper()
		a, ok, err := PinnedAttachment(e.pinDir)
		if err != nil || !ok || a.LinkID != old.LinkID || a.ProgramID != old.ProgramID || a.Ifindex != e.dummy {
			t.Errorf("%s: pinned attachment %+v %v (%v), want the old one %+v", when, a, ok, err, old)
		}
		if got, _, err := pinnedABI(e.pinDir); err != nil || got != abi-1 {
			t.Errorf("%s: pinned ABI %d (%v), want %d", when, got, err, abi-1)
		}
		if id := testutil.PinnedMapID(t, filepath.Join(e.pinDir, dispatcherMapConns)); id != oldConns {
			t.Errorf("%s: conns pinned is map %d, want the old %d", when, id, oldConns)
		}
	}

	// A start that fails before Attach leaves the old executor alone.
	dp, err := Open(Options{PinDir: e.pinDir, ConnTableSize: 4096})
	if err != nil {
		t.Fatalf("Open over another ABI: %v", err)
	}
	if _, ok := dp.Attached(); ok {
		t.Error("attached before Attach")
	}
	oldInPlace("after Open")
	if removed, err := dp.RemovePins(); err != nil || len(removed) != 0 {
		t.Errorf("RemovePins before Attach: removed %v, %v; want nothing", removed, err)
	}
	oldInPlace("after a failed start")

	// One asked to attach elsewhere is refused, as an adopted one is.
	dp, err = Open(Options{PinDir: e.pinDir, ConnTableSize: 4096})
	if err != nil {
		t.Fatalf("Open over another ABI: %v", err)
	}
	if _, err := dp.Attach(peerIndex, lb.XDPGeneric); !errors.Is(err, ErrOtherInterface) {
		t.Errorf("Attach to another interface: %v, want ErrOtherInterface", err)
	}
	if _, err := dp.RemovePins(); err != nil {
		t.Error(err)
	}
	oldInPlace("after a start on another interface")

	// The start that succeeds.
	dp, err = Open(Options{PinDir: e.pinDir, ConnTableSize: 4096})
	if err != nil {
		t.Fatalf("Open over another ABI: %v", err)
	}
	e.dp = dp // the cleanup removes this one
	if err := dp.Apply(e.state); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	oldInPlace("after Apply")
	if _, replaced := dp.Replaced(); replaced {
		t.Error("Replaced before Attach")
	}
	if _, err := dp.Attach(e.dummy, lb.XDPGeneric); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if got, replaced := dp.Replaced(); !replaced || got.OldABI != abi-1 || got.Resized != nil || got.Carried != 0 {
		t.Errorf("Replaced() = %+v, %v; want ABI %d, nothing resized or carried, true", got, replaced, abi-1)
	}
	now, ok := dp.Attached()
	if !ok || now.LinkID != old.LinkID || now.Ifindex != e.dummy || now.ProgramID == old.ProgramID {
		t.Errorf("after Attach: %+v %v; want link %d on %d with a new program", now, ok, old.LinkID, e.dummy)
	}
	if as := dp.attachments(); len(as) != 2 || as[1].Ifindex != peerIndex || as[1].ProgramID != now.ProgramID {
		t.Errorf("attachments after Attach: %+v", as)
	}
	if got, differs, err := pinnedABI(e.pinDir); err != nil || differs || got != abi {
		t.Errorf("pinned ABI after Attach: %d %v %v, want %d", got, differs, err, abi)
	}
	if id := testutil.PinnedMapID(t, filepath.Join(e.pinDir, dispatcherMapConns)); id == oldConns {
		t.Errorf("conns still pinned as the old map %d", id)
	}
	if p := pins(t, e.pinDir); slices.Contains(p, "old_only") || slices.Contains(p, progPin+"_new") {
		t.Errorf("pins after Attach: %v", p)
	}
	// The old table's entry is not carried over; the flow's next packet
	// goes to its Maglev server and enters the new table.
	if _, ok := e.getConn(t, key(vipTCP, 80, 7, 6)); ok {
		t.Error("the old table's entry is in the new one")
	}
	if got, _ := e.run(t, tcpTo(vipTCP, 80, 7, "A").Build(t)); got != xdpTX {
		t.Errorf("verdict %d for an established flow's packet after the replacement", got)
	}
	if _, ok := e.getConn(t, key(vipTCP, 80, 7, 6)); !ok {
		t.Error("the flow's packet did not enter the new table")
	}
	// The next dlbd adopts it.
	dp = e.reopen(t, Options{ConnTableSize: 4096})
	if a, ok := dp.Attached(); !ok || a.LinkID != old.LinkID || a.ProgramID != now.ProgramID {
		t.Errorf("not adopted: %+v %v; want link %d with program %d", a, ok, old.LinkID, now.ProgramID)
	}
	// The replacement pinned its program's own maps too.
	if adopted, why := dp.ProgramAdopted(); !adopted {
		t.Errorf("the replacing program was not adopted at the next Open: %s", why)
	}
	if _, ok := e.getConn(t, key(vipTCP, 80, 7, 6)); !ok {
		t.Error("the new table's entry was lost at the next Open")
	}
}

// TestPrivilegedReplaceOtherConfigLayout: an executor whose config map has
// another layout (no ABI version can be read from it) is replaced too.
func TestPrivilegedReplaceOtherConfigLayout(t *testing.T) {
	e := newTestEnv(t)
	if _, err := e.dp.Attach(e.dummy, lb.XDPGeneric); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	old, _ := e.dp.Attached()
	if err := e.dp.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.pinDir, dispatcherMapConfig)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	other, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Pin(path); err != nil {
		t.Fatal(err)
	}
	other.Close()

	dp, err := Open(Options{PinDir: e.pinDir, ConnTableSize: 4096})
	if err != nil {
		t.Fatalf("Open over another config layout: %v", err)
	}
	e.dp = dp
	if err := dp.Apply(e.state); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if _, err := dp.Attach(e.dummy, lb.XDPGeneric); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if got, replaced := dp.Replaced(); !replaced || got.OldABI != 0 {
		t.Errorf("Replaced() = %+v, %v; want ABI 0 (unknown), true", got, replaced)
	}
	if now, ok := dp.Attached(); !ok || now.LinkID != old.LinkID || now.ProgramID == old.ProgramID {
		t.Errorf("after Attach: %+v %v; want link %d with a new program", now, ok, old.LinkID)
	}
	if _, differs, err := pinnedABI(e.pinDir); err != nil || differs {
		t.Errorf("pinned config after Attach: differs %v, %v", differs, err)
	}
}

// TestPrivilegedReplaceAfterACrash: a dlbd that died half-way through a
// replacement (its program already on the link, some maps pinned in the
// old ones' place, not the config map) leaves pins that the next Open
// replaces again, whole.
func TestPrivilegedReplaceAfterACrash(t *testing.T) {
	e := newTestEnv(t)
	old, _ := e.attachBoth(t)
	if err := e.dp.Close(); err != nil {
		t.Fatal(err)
	}
	abi := uint32(dispatcherDlbConstsDLB_ABI_VERSION)
	setPinnedABI(t, e.pinDir, abi-1)

	// The dlbd that dies: its program on the link, conns pinned.
	dp, err := Open(Options{PinDir: e.pinDir, ConnTableSize: 4096})
	if err != nil {
		t.Fatalf("Open over another ABI: %v", err)
	}
	if err := dp.Apply(e.state); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := dp.repl.link.Update(dp.objs.DlbXdp); err != nil {
		t.Fatal(err)
	}
	half, _ := linkAttachment(dp.repl.link)
	conns := filepath.Join(e.pinDir, dispatcherMapConns)
	if err := os.Remove(conns); err != nil {
		t.Fatal(err)
	}
	if err := dp.objs.Conns.Pin(conns); err != nil {
		t.Fatal(err)
	}
	halfConns := testutil.PinnedMapID(t, conns)
	if err := dp.Close(); err != nil {
		t.Fatal(err)
	}
	if half.ProgramID == old.ProgramID {
		t.Fatal("the program was not swapped")
	}

	// The next dlbd.
	dp, err = Open(Options{PinDir: e.pinDir, ConnTableSize: 4096})
	if err != nil {
		t.Fatalf("Open after a half-done replacement: %v", err)
	}
	e.dp = dp
	if dp.repl == nil {
		t.Fatal("the half-done replacement was adopted, not replaced again")
	}
	if err := dp.Apply(e.state); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if _, err := dp.Attach(e.dummy, lb.XDPGeneric); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	now, ok := dp.Attached()
	if !ok || now.LinkID != old.LinkID || now.ProgramID == half.ProgramID || now.ProgramID == old.ProgramID {
		t.Errorf("after Attach: %+v %v; want link %d with a third program", now, ok, old.LinkID)
	}
	if got, differs, err := pinnedABI(e.pinDir); err != nil || differs || got != abi {
		t.Errorf("pinned ABI after Attach: %d %v %v, want %d", got, differs, err, abi)
	}
	if id := testutil.PinnedMapID(t, conns); id == halfConns {
		t.Errorf("conns still pinned as the half-done replacement's map %d", id)
	}
	if got, _ := e.run(t, tcpTo(vipTCP, 80, 7, "A").Build(t)); got != xdpTX {
		t.Errorf("verdict %d after the replacement", got)
	}
}

// TestUnpinned: the maps pinned by name are unpinned and listed sorted,
// the config map last (its ABI version marks a whole replacement).
func TestUnpinned(t *testing.T) {
	spec := &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{
		dispatcherMapConfig: {Pinning: ebpf.PinByName},
		"vips":              {Pinning: ebpf.PinByName},
		"affinity":          {Pinning: ebpf.PinByName},
		"scratch":           {Pinning: ebpf.PinNone},
	}}
	got := unpinned(spec)
	if want := []string{"affinity", "vips", dispatcherMapConfig}; !slices.Equal(got, want) {
		t.Errorf("unpinned: %v, want %v", got, want)
	}
	for name, m := range spec.Maps {
		if m.Pinning != ebpf.PinNone {
			t.Errorf("%s still pinned by name", name)
		}
	}
}

// TestPrivilegedReplaceSeveredLink: the old executor's interface deleted
// and created again between Open and Attach: its severed link is dropped
// and the new program attached afresh to the new interface.
func TestPrivilegedReplaceSeveredLink(t *testing.T) {
	e := newTestEnv(t)
	old, _ := e.attachBoth(t)
	if err := e.dp.Close(); err != nil {
		t.Fatal(err)
	}
	setPinnedABI(t, e.pinDir, uint32(dispatcherDlbConstsDLB_ABI_VERSION)-1)
	dp, err := Open(Options{PinDir: e.pinDir, ConnTableSize: 4096})
	if err != nil {
		t.Fatalf("Open over another ABI: %v", err)
	}
	e.dp = dp
	if err := dp.Apply(e.state); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	idx := recreateVeth(t)
	if _, err := dp.Attach(idx, lb.XDPGeneric); err != nil {
		t.Fatalf("Attach to the recreated interface: %v", err)
	}
	now, ok := dp.Attached()
	if !ok || now.Ifindex != idx || now.LinkID == old.LinkID {
		t.Errorf("after Attach: %+v %v; want a new link on %d (the old was %d)", now, ok, idx, old.LinkID)
	}
	if got, replaced := dp.Replaced(); !replaced || got.OldABI != uint32(dispatcherDlbConstsDLB_ABI_VERSION)-1 {
		t.Errorf("Replaced() = %+v, %v", got, replaced)
	}
}

// TestPrivilegedReplaceResized: an executor of this ABI pinned with other
// table sizes (dlbd restarted with other size options) is replaced as one
// of another ABI is, and what its tables hold is carried over into the
// new ones: MAC connections, both halves of NAT connections and affinity
// records, with their states and ages, a second pass carrying what the
// old one changed since the first. A new table too small keeps what fits
// and counts the rest lost; the next Open with the same sizes adopts.
func TestPrivilegedReplaceResized(t *testing.T) {
	e := newTestEnv(t) // a connection table of 4096
	old, _ := e.attachBoth(t)
	mk := func(dst netip.Addr, sport uint16) FlowKey {
		return FlowKey{Src: netip.MustParseAddr("198.18.2.11"), Dst: dst, SrcPort: sport, DstPort: 80, Proto: 6}
	}
	client := netip.MustParseAddr("198.18.2.11")
	const macConns = 100
	putAt := time.Now() // the entries' ages grow from 3 s from here on
	for i := range macConns {
		e.putConn(t, conn{key: mk(vipTCP, uint16(2000+i)), backend: 10, service: 1, idle: 3})
	}
	natKey := mk(vipNAT, 5004)
	e.putNAT(t, natConn{key: natKey, backend: 60, service: 6, ret: retAddr, port: 30000, idle: 2})
	e.putAffinity(t, client, 14, 91, 4)
	oldConns := testutil.PinnedMapID(t, filepath.Join(e.pinDir, dispatcherMapConns))
	olddp := e.dp // the old dlbd, still running while the new one starts
	on := func(dp *Datapath, f func()) {
		e.dp, dp = dp, e.dp
		defer func() { e.dp = dp }()
		f()
	}

	dp, err := Open(Options{PinDir: e.pinDir, ConnTableSize: 8192})
	if err != nil {
		t.Fatalf("Open with another connection table size: %v", err)
	}
	e.dp = dp
	if dp.repl == nil || !slices.Equal(dp.repl.rep.Resized, []string{"connection table 4096 -> 8192"}) {
		t.Fatalf("Open did not find the sizes changed: %+v", dp.repl)
	}
	if err := dp.Apply(e.state); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	// The first pass carries everything; the second what changed since.
	dp.carryOver(dp.repl)
	if r := dp.repl.rep; r.Carried != macConns+3 || r.Lost != 0 || r.Err != "" {
		t.Fatalf("first pass: carried %d, lost %d (%v); want %d, 0", r.Carried, r.Lost, r.Err, macConns+3)
	}
	on(olddp, func() {
		e.putConn(t, conn{key: mk(vipTCP, 2000), backend: 10, service: 1, closing: true})
		e.putConn(t, conn{key: mk(vipTCP, 3000), backend: 10, service: 1})
	})
	dp.carryOver(dp.repl)
	if r := dp.repl.rep; r.Carried != macConns+5 {
		t.Errorf("second pass: carried %d in all, want %d (a changed entry and a new one more)", r.Carried, macConns+5)
	}
	if err := olddp.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := dp.Attach(e.dummy, lb.XDPGeneric); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	got, replaced := dp.Replaced()
	if !replaced || got.Carried != macConns+5 || got.Lost != 0 || got.Err != "" || len(got.Resized) != 1 {
		t.Errorf("Replaced() = %+v, %v; want %d carried, nothing lost", got, replaced, macConns+5)
	}
	if now, ok := dp.Attached(); !ok || now.LinkID != old.LinkID || now.ProgramID == old.ProgramID {
		t.Errorf("after Attach: %+v %v; want link %d with a new program", now, ok, old.LinkID)
	}
	if id := testutil.PinnedMapID(t, filepath.Join(e.pinDir, dispatcherMapConns)); id == oldConns {
		t.Errorf("conns still pinned as the old map %d", id)
	}
	if n := dp.objs.Conns.MaxEntries(); n != 8192 {
		t.Errorf("the new connection table holds %d entries, want 8192", n)
	}
	if f, ok := e.getConn(t, mk(vipTCP, 2000)); !ok || f.Backend != 10 || f.State != uint8(dispatcherFlowStateFLOW_CLOSING) {
		t.Errorf("the changed MAC entry after the replacement: %+v %v", f, ok)
	}
	if f, ok := e.getConn(t, mk(vipTCP, 2001)); !ok || f.Backend != 10 {
		t.Errorf("a MAC entry after the replacement: %+v %v", f, ok)
	} else {
		// Its age carried over: the 3 s it was given plus the time since,
		// however long the loads took (seconds beside other tests), to
		// within the coarse clock's tick.
		since := time.Since(putAt)
		if age := time.Duration(coarseNow() - f.LastSeen); age < 3*time.Second-50*time.Millisecond || age > 3*time.Second+since+50*time.Millisecond {
			t.Errorf("a MAC entry's age %v after the replacement, want 3 s plus the %v since it was written", age, since.Round(time.Millisecond))
		}
	}
	if _, ok := e.getConn(t, mk(vipTCP, 3000)); !ok {
		t.Error("the MAC entry the old executor made after the first pass was not carried")
	}
	if nf, nr, ok := e.getNAT(t, natKey); !ok || nf.Backend != 60 || htons(nf.NatPort) != 30000 || htons(nr.ClientPort) != 5004 {
		t.Errorf("NAT entry after the replacement: %+v %+v %v", nf, nr, ok)
	}
	if r, ok := e.affinityOf(t, client, 14); !ok || r.Backend != 91 {
		t.Errorf("affinity record after the replacement: %+v %v", r, ok)
	}
	if err := dp.Close(); err != nil {
		t.Fatal(err)
	}

	// Into a table too small for them all: what fits is carried.
	dp, err = Open(Options{PinDir: e.pinDir, ConnTableSize: 64})
	if err != nil {
		t.Fatalf("Open with a smaller connection table: %v", err)
	}
	e.dp = dp
	if err := dp.Apply(e.state); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if _, err := dp.Attach(e.dummy, lb.XDPGeneric); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	got, replaced = dp.Replaced()
	if !replaced || got.Lost == 0 || got.Carried+got.Lost > macConns+4 || got.Carried < 3 || got.Err == "" {
		t.Errorf("Replaced() into a table of 64 = %+v, %v; want some carried, the rest lost and why", got, replaced)
	}
	t.Logf("into a table of 64: %+v", got)
	if _, _, ok := e.getNAT(t, natKey); !ok {
		t.Error("the NAT entry (its tables kept their size) was not carried")
	}
	// The next dlbd with the same sizes adopts it, its program too.
	dp = e.reopen(t, Options{ConnTableSize: 64})
	if dp.repl != nil {
		t.Errorf("replaced again with the same sizes: %+v", dp.repl.rep.Resized)
	}
	if adopted, why := dp.ProgramAdopted(); !adopted {
		t.Errorf("the program of the new sizes was not adopted at the next Open: %s", why)
	}
	if a, ok := dp.Attached(); !ok || a.LinkID != old.LinkID {
		t.Errorf("not adopted: %+v %v", a, ok)
	}
}

// TestPrivilegedResizedPins: Open tells each size option that differs
// from the pinned executor's by what it sizes (the maps sized from it not
// named), and replaces nothing when they are the same. A start that goes
// no further than Open leaves the pins as they were, entries included.
func TestPrivilegedResizedPins(t *testing.T) {
	e := newTestEnv(t) // a connection table of 4096, the object's other sizes
	def, err := Defaults()
	if err != nil {
		t.Fatal(err)
	}
	e.putConn(t, conn{key: key(vipTCP, 80, 7, 6), backend: 10, service: 1})
	if err := e.dp.Close(); err != nil {
		t.Fatal(err)
	}
	conns := testutil.PinnedMapID(t, filepath.Join(e.pinDir, dispatcherMapConns))
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{}, ""},
		{Options{ConnTableSize: 8192}, "connection table 4096 -> 8192"},
		{Options{NATTableSize: 8192}, fmt.Sprintf("NAT tables %d -> 8192", def.NATTableSize)},
		{Options{HalfOpenTableSize: 1024}, fmt.Sprintf("half-open table %d -> 1024", def.HalfOpenTableSize)},
		{Options{AffinityTableSize: 1024}, fmt.Sprintf("affinity table %d -> 1024", def.AffinityTableSize)},
		{Options{MaxServices: 512}, fmt.Sprintf("port slots %d -> 512", def.MaxServices)},
		{Options{MaxBackends: 2048}, fmt.Sprintf("server slots %d -> 2048", def.MaxBackends)},
		{Options{MaxTableSize: 1021}, fmt.Sprintf("Maglev tables %d -> 1021", def.MaxTableSize)},
		{Options{ConnTableSize: 8192, AffinityTableSize: 1024}, fmt.Sprintf("affinity table %d -> 1024, connection table 4096 -> 8192", def.AffinityTableSize)},
	} {
		opts := c.opts
		opts.PinDir = e.pinDir
		if opts.ConnTableSize == 0 {
			opts.ConnTableSize = 4096
		}
		dp, err := Open(opts)
		if err != nil {
			t.Fatalf("Open(%+v): %v", c.opts, err)
		}
		var got string
		if dp.repl != nil {
			got = strings.Join(dp.repl.rep.Resized, ", ")
		}
		if got != c.want || (dp.repl != nil) != (c.want != "") {
			t.Errorf("Open(%+v): replacing %v, resized %q; want %q", c.opts, dp.repl != nil, got, c.want)
		}
		if err := dp.Close(); err != nil {
			t.Fatal(err)
		}
		if id := testutil.PinnedMapID(t, filepath.Join(e.pinDir, dispatcherMapConns)); id != conns {
			t.Fatalf("after Open(%+v) and Close: conns pinned is map %d, want %d", c.opts, id, conns)
		}
	}
	e.dp = reopen(t, e.pinDir)
	if e.dp.repl != nil {
		t.Errorf("the last Open replaced: %v", e.dp.repl.rep.Resized)
	}
	if _, ok := e.getConn(t, key(vipTCP, 80, 7, 6)); !ok {
		t.Error("the pinned table lost its entry")
	}
}
