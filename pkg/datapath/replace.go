package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

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

// replacement is what Open found of an executor of another ABI, until
// Attach replaces it.
type replacement struct {
	// oldABI is the old executor's ABI version, 0 when its config map
	// has another layout (so no version can be read).
	oldABI uint32
	// names are the maps to pin, by name, the config map last.
	names []string
	// link and extra are the old executor's links (nil, empty: none).
	link  link.Link
	extra map[int]link.Link
}

// pinnedABI reads the ABI version of the executor pinned under pinDir:
// differs is true when one is pinned there and its version is not this
// dlbd's (abi is 0 when the config map's layout differs, so that no
// version can be read).
func pinnedABI(pinDir string) (abi uint32, differs bool, err error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, dispatcherMapConfig), &ebpf.LoadPinOptions{ReadOnly: true})
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("reading the pinned config map: %w", err)
	}
	defer m.Close()
	var cfg dispatcherDlbConfig
	if m.ValueSize() != uint32(binary.Size(cfg)) || m.Type() != ebpf.Array {
		return 0, true, nil
	}
	if err := m.Lookup(uint32(0), &cfg); err != nil {
		return 0, false, fmt.Errorf("reading the pinned config map: %w", err)
	}
	if cfg.MaglevSize == 0 { // never written: nothing to adopt or replace
		return 0, false, nil
	}
	return cfg.AbiVersion, cfg.AbiVersion != uint32(dispatcherDlbConstsDLB_ABI_VERSION), nil
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

// Replaced reports whether Open found an executor of another ABI that
// Attach replaced, and its version (0: unknown).
func (d *Datapath) Replaced() (oldABI uint32, replaced bool) {
	return d.replacedABI, d.replaced
}

// replaceOld is Attach while an executor of another ABI is pinned: the
// program takes the old one's place on its link (or is attached afresh
// when the old one has none), on its other interfaces' links too, then
// the pins move to this executor's maps. An old link on another interface
// is refused as Attach refuses an adopted one (ErrOtherInterface), with
// nothing changed.
func (d *Datapath) replaceOld(ifindex int, mode lb.XDPMode) (lb.XDPMode, error) {
	r := d.repl
	got := lb.XDPAuto
	if r.link != nil {
		if a, ok := linkAttachment(r.link); ok && a.Ifindex != ifindex {
			return 0, fmt.Errorf("%w (ifindex %d)", ErrOtherInterface, a.Ifindex)
		}
		// As an adoption: a link severed since Open is dropped.
		l := r.link
		r.link = nil
		var err error
		if d.xdp, err = d.adoptOne(l, filepath.Join(d.pinDir, linkPin)); err != nil {
			return 0, err
		}
	}
	if d.xdp == nil {
		l, m, err := d.attachLink(ifindex, mode, filepath.Join(d.pinDir, linkPin))
		if err != nil {
			return 0, err
		}
		d.xdp, got = l, m
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
	if err := d.movePins(r.names); err != nil {
		return got, err
	}
	d.repl = nil
	d.replaced, d.replacedABI = true, r.oldABI
	return got, nil
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
		if e.IsDir() || d.pinnedMaps[name] != nil || name == progPin || name == linkPin || strings.HasPrefix(name, extraLinkPin) {
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
}
