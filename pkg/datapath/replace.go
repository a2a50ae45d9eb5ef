package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/dlbproject/dlb/pkg/lb"
)

// An executor pinned by a dlbd of another executor ABI (an upgrade of dlb
// whose executor's maps changed) cannot be adopted: its maps mean other
// things. Open then loads this executor with maps of its own, not pinned,
// and leaves the old one forwarding, on its links and under its pins,
// while dlbd writes the whole configuration into the new maps. Attach then
// puts the new program on the old one's links in its place (the kernel
// swaps it between two packets: no frame reaches the host's stack for
// want of a program) and moves the pins to the new maps, the config map
// last: its ABI version is what a later dlbd reads first, so a dlbd that
// dies half-way leaves pins that are replaced again. The connection
// table starts empty: a MAC-mode connection's next packet goes to the
// server the Maglev table gives it, the same as before when the servers
// and weights are; NAT connections (their return ports) and affinity
// records are lost.
//
// An executor of this ABI whose tables have other sizes than this dlbd's
// options (a restart with other table-size flags) is replaced the same
// way, but its tables can be read: Attach carries their entries over
// (connections, NAT mappings, affinity records, with their ages and the
// backend ids the state directory keeps), once before the new program
// takes the old one's place and once after, for what changed in between.
// Half-open NAT handshakes are not carried (the client's next SYN makes
// another), nor the counters.

// replacement is what Open found of an executor of another ABI, until
// Attach replaces it.
type replacement struct {
	// rep is what the replacement did, for Replaced: the old executor's
	// ABI version (0 when its config map has another layout, so that no
	// version can be read), what has other sizes (see resizedPins; only
	// when the ABI is the same), what was carried over and lost, and why.
	rep lb.Replacement
	// names are the maps to pin, by name, the config map last.
	names []string
	// link and extra are the old executor's links (nil, empty: none).
	link  link.Link
	extra map[int]link.Link
	// tables and affinity are the old executor's when it has other sizes,
	// to carry over; scan is what of them was carried.
	tables   []table
	affinity *ebpf.Map
	scan     lb.ConnScan
}

// pinnedABI reads the ABI version of the executor pinned under pinDir:
// differs is true when one is pinned there and its version is not this
// dlbd's (abi is 0 when the config map's layout differs, so that no
// version can be read).
func pinnedABI(pinDir string) (abi uint32, differs bool, err error) {
	cfg, layout, err := pinnedConfig(pinDir)
	if err != nil || !layout {
		return 0, !layout, err
	}
	if cfg == nil { // none, or never written: nothing to adopt or replace
		return 0, false, nil
	}
	return cfg.AbiVersion, cfg.AbiVersion != uint32(dispatcherDlbConstsDLB_ABI_VERSION), nil
}

// pinnedConfig reads the config map of the executor pinned under pinDir:
// nil when none is pinned or it was never written; layout is false when
// the map has another layout than this dlbd's.
func pinnedConfig(pinDir string) (cfg *dispatcherDlbConfig, layout bool, err error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, dispatcherMapConfig), &ebpf.LoadPinOptions{ReadOnly: true})
	if errors.Is(err, os.ErrNotExist) {
		return nil, true, nil
	}
	if err != nil {
		return nil, true, fmt.Errorf("reading the pinned config map: %w", err)
	}
	defer m.Close()
	cfg = new(dispatcherDlbConfig)
	if m.ValueSize() != uint32(binary.Size(*cfg)) || m.Type() != ebpf.Array {
		return nil, false, nil
	}
	if err := m.Lookup(uint32(0), cfg); err != nil {
		return nil, true, fmt.Errorf("reading the pinned config map: %w", err)
	}
	if cfg.MaglevSize == 0 {
		return nil, true, nil
	}
	return cfg, true, nil
}

// sizeLabels names the maps whose sizes dlbd's options set, as resizedPins
// reports them.
var sizeLabels = map[string]string{
	dispatcherMapConns:       "connection table",
	dispatcherMapNatFlows:    "NAT tables",
	dispatcherMapNatHalfopen: "half-open table",
	dispatcherMapAffinity:    "affinity table",
	dispatcherMapMaglevInfo:  "port slots",
	dispatcherMapBackends:    "server slots",
}

// resizedPins compares the maps of this ABI's executor pinned under
// pinDir with spec's, and its Maglev table size with maglev: it returns
// what has another size, as "connection table 4096 -> 8192" (the maps
// sized from those, by name only when nothing else differs), nothing
// when the sizes are the same or nothing is pinned.
func resizedPins(pinDir string, spec *ebpf.CollectionSpec, maglev uint32) ([]string, error) {
	var labelled, other []string
	names := slices.Sorted(maps.Keys(spec.Maps))
	for _, name := range names {
		ms := spec.Maps[name]
		if ms.Pinning != ebpf.PinByName || ms.MaxEntries == 0 {
			continue
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, name), &ebpf.LoadPinOptions{ReadOnly: true})
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the pinned map %s: %w", name, err)
		}
		n := m.MaxEntries()
		m.Close()
		if n == ms.MaxEntries {
			continue
		}
		if label, ok := sizeLabels[name]; ok {
			labelled = append(labelled, fmt.Sprintf("%s %d -> %d", label, n, ms.MaxEntries))
		} else {
			other = append(other, fmt.Sprintf("%s %d -> %d", name, n, ms.MaxEntries))
		}
	}
	cfg, _, err := pinnedConfig(pinDir)
	if err != nil {
		return nil, err
	}
	if cfg != nil && cfg.MaglevSize != maglev {
		labelled = append(labelled, fmt.Sprintf("Maglev tables %d -> %d", cfg.MaglevSize, maglev))
	}
	if len(labelled) > 0 {
		return labelled, nil
	}
	return other, nil
}

// pinnedTables opens the connection tables and affinity map pinned under
// pinDir, to read (see carryOver).
func pinnedTables(pinDir string) (_ []table, _ *ebpf.Map, err error) {
	var opened []*ebpf.Map
	defer func() {
		if err != nil {
			for _, m := range opened {
				m.Close()
			}
		}
	}()
	load := func(name string) (*ebpf.Map, error) {
		m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, name), nil)
		if err != nil {
			return nil, fmt.Errorf("opening the older executor's map %s: %w", name, err)
		}
		opened = append(opened, m)
		return m, nil
	}
	var tabs []table
	for _, names := range tableMaps {
		t := table{name: names[0]}
		for i, dst := range []**ebpf.Map{&t.entries, &t.used, &t.cursor, &t.index} {
			if *dst, err = load(names[i]); err != nil {
				return nil, nil, err
			}
		}
		tabs = append(tabs, t)
	}
	affinity, err := load(dispatcherMapAffinity)
	if err != nil {
		return nil, nil, err
	}
	return tabs, affinity, nil
}

// unpinned takes the pinning off spec's maps, and returns the names of
// those that were pinned by name, the config map last.
func unpinned(spec *ebpf.CollectionSpec) []string {
	var names []string
	for name, m := range spec.Maps {
		if m.Pinning == ebpf.PinByName {
			m.Pinning = ebpf.PinNone
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if i := slices.Index(names, dispatcherMapConfig); i >= 0 {
		names = append(slices.Delete(names, i, i+1), dispatcherMapConfig)
	}
	return names
}

// Replaced reports whether Open found an executor of another ABI, or of
// other table sizes, that Attach replaced, and what it did.
func (d *Datapath) Replaced() (lb.Replacement, bool) {
	if d.replaced == nil {
		return lb.Replacement{}, false
	}
	return *d.replaced, true
}

// replaceOld is Attach while an executor of another ABI or of other
// sizes is pinned: the program takes the old one's place on its link (or
// is attached afresh when the old one has none), on its other interfaces'
// links too, then the pins move to this executor's maps. The old tables'
// entries are carried over first when they can be read (see carryOver). An old link on another interface
// is refused as Attach refuses an adopted one (ErrOtherInterface), with
// nothing changed.
func (d *Datapath) replaceOld(ifindex int, mode lb.XDPMode) (lb.XDPMode, error) {
	r := d.repl
	got := lb.XDPAuto
	if r.link != nil {
		if a, ok := linkAttachment(r.link); ok && a.Ifindex != ifindex {
			return 0, fmt.Errorf("%w (ifindex %d)", ErrOtherInterface, a.Ifindex)
		}
	}
	// What the old executor's tables hold now, then (below) what changed
	// until this program took its place.
	d.carryOver(r)
	if r.link != nil {
		// As an adoption: a link severed since Open is dropped.
		l := r.link
		r.link = nil
		var err error
		if d.xdp, err = d.adoptOne(l, filepath.Join(d.pinDir, linkPin)); err != nil {
			return 0, err
		}
	}
	if d.xdp == nil {
		l, m, refused, err := d.attachLink(ifindex, mode, filepath.Join(d.pinDir, linkPin))
		if err != nil {
			return 0, err
		}
		d.xdp, got, d.nativeRefused = l, m, refused
	}
	for i, l := range r.extra {
		delete(r.extra, i)
		if err := l.Update(d.objs.DlbXdp); err != nil {
			// Its interface went since Open (or the link takes no
			// other program): the link goes, not the older program
			// with the older maps beside this one.
			if err := d.dropSevered(l, filepath.Join(d.pinDir, extraLinkPin+strconv.Itoa(i))); err != nil {
				return got, err
			}
			continue
		}
		d.extra[i] = l
	}
	d.carryOver(r)
	if err := d.movePins(r.names); err != nil {
		return got, err
	}
	d.repl = nil
	r.releaseOld()
	d.replaced = &r.rep
	return got, nil
}

// carryOver writes into this executor's tables the old one's entries
// that are new or changed since its last call (all at the first), when
// the old one is of this ABI (resized). The configuration is written
// first: the entries name backends by the ids the state directory keeps,
// and those this executor lacks are not carried. What could not be
// carried is counted, and why kept: the replacement goes on.
func (d *Datapath) carryOver(r *replacement) {
	if r.tables == nil {
		return
	}
	first := r.scan.State == nil
	var entries []lb.ConnEntry
	err := scanConns(r.tables, r.affinity, &r.scan, false, time.Duration(math.MaxInt64), func(e lb.ConnEntry) {
		entries = append(entries, e)
	})
	n, perr := d.PutConns(entries)
	if first && perr == nil {
		// Tables smaller than what they are given evict, as the
		// executor does when full: what they hold is what was carried
		// (nothing else writes them before Attach).
		n = 0
		perr = scanConns(d.tables(), d.objs.Affinity, &lb.ConnScan{}, true, 0, func(lb.ConnEntry) { n++ })
		if perr == nil && n < len(entries) {
			perr = fmt.Errorf("%d entries did not fit in the new tables", len(entries)-n)
		}
	}
	r.rep.Carried += n
	r.rep.Lost += max(0, len(entries)-n)
	if err = errors.Join(err, perr); err != nil && r.rep.Err == "" {
		r.rep.Err = fmt.Sprintf("carrying the older executor's entries over: %v", err)
	}
}

// movePins pins this executor's maps in place of the old one's (the
// config map last), then its program, and removes what else the old
// executor had pinned (maps this ABI no longer has).
func (d *Datapath) movePins(names []string) error {
	maps := d.mapsByName()
	d.pinnedMaps = map[string]*ebpf.Map{}
	for _, name := range names {
		m := maps[name]
		if m == nil {
			continue
		}
		path := filepath.Join(d.pinDir, name)
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("unpinning the older executor's map %s: %w", name, err)
		}
		if err := m.Pin(path); err != nil {
			return fmt.Errorf("pinning map %s: %w", name, err)
		}
		d.pinnedMaps[name] = m
	}
	if err := d.pinProgram(); err != nil {
		return err
	}
	entries, err := os.ReadDir(d.pinDir)
	if err != nil {
		return fmt.Errorf("reading pin directory: %w", err)
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || d.pinnedMaps[name] != nil || name == progPin || name == linkPin || strings.HasPrefix(name, extraLinkPin) ||
			strings.HasPrefix(name, progMapPin) {
			continue
		}
		if err := os.Remove(filepath.Join(d.pinDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing the older executor's pin %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// releaseOld lets go of the old executor's links without touching them:
// it forwards on, under its pins, as before Open.
func (r *replacement) releaseOld() {
	closeLinks(&r.link, r.extra)
	for _, t := range r.tables {
		for _, m := range []*ebpf.Map{t.entries, t.used, t.cursor, t.index} {
			m.Close()
		}
	}
	if r.affinity != nil {
		r.affinity.Close()
	}
	r.tables, r.affinity = nil, nil
}
