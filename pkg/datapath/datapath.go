//go:build linux

// Package datapath owns the executor's BPF objects. It loads the XDP program
// and its maps, adopting the maps, program and links a previous dlbd left
// pinned, so that a restart never stops forwarding or loses a connection;
// it attaches the program through pinned bpf_links (one per interface) and
// replaces the program on them in place; it writes a desired lb.Dataplane
// into the maps; and it reads counters and sweeps the connection, NAT,
// half-open and affinity tables.
//
// It is the only package that imports github.com/cilium/ebpf. Its objects
// hold file descriptors: call Close (keep pins) or Remove (unpin) when done.
package datapath

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/lb"
)

// DefaultPinDir is where the executor's objects are pinned by default.
const DefaultPinDir = "/sys/fs/bpf/dlb"

// DefaultHashSeed seeds the flow hash. Every dispatcher of a cluster must
// use the same seed so that they pick the same server for a flow.
const DefaultHashSeed = 0x646c6221 // "dlb!"

const (
	linkPin = "link"
	progPin = "prog"
	// extraLinkPin prefixes the pins of the links of attachInterface,
	// followed by the interface index.
	extraLinkPin = "link_if"
)

// Errors returned by the data path.
var (
	// ErrIncompatiblePins is returned when pinned maps of this executor
	// ABI have another layout than this dlbd's (other sizes are replaced,
	// see Open).
	ErrIncompatiblePins = errors.New("pinned executor maps are incompatible")
	// ErrOtherInterface is returned by Attach when the pinned link is
	// attached to another interface.
	ErrOtherInterface = errors.New("executor is attached to another interface")
)

// Options configure a Datapath.
type Options struct {
	// PinDir is the bpffs directory for the pinned objects
	// (DefaultPinDir when empty).
	PinDir string
	// ConnTableSize is the connection table's capacity (the object's
	// default, 262144, when 0; at most 2^24). A full table evicts the
	// longest idle of a few sampled connections.
	ConnTableSize uint32
	// MaxTableSize is the largest Maglev table a service may have (the
	// object's default, 65537, when 0); each service's table has its own
	// size, up to this.
	MaxTableSize uint32
	// MaxServices and MaxBackends size the tables of services (cluster
	// ports) and backends (servers of a port); ids are below them (the
	// object's defaults when 0).
	MaxServices, MaxBackends uint32
	// NATTableSize is the capacity of the NAT connection tables (nat_flows
	// and nat_ports; the object's default, 262144, when 0; at most 2^24).
	// A full table refuses new NAT connections; it never evicts one. The
	// tables are allocated whole: about 176 bytes per entry.
	NATTableSize uint32
	// HalfOpenTableSize is the number of slots of the NAT half-open table
	// (one per half-open connection), a power of two (the object's
	// default, 16384, when 0). The table is direct-mapped by return
	// address and port, so it bounds how many ports of a pool half-open
	// connections (a SYN flood) can hold: keep it at most a quarter of
	// the smallest pool.
	HalfOpenTableSize uint32
	// AffinityTableSize is the capacity of the affinity-record table (an
	// LRU; the object's default, 65536, when 0).
	AffinityTableSize uint32
}

// Datapath is the loaded executor.
type Datapath struct {
	pinDir    string
	objs      dispatcherObjects
	innerSpec *ebpf.MapSpec
	maxTable  uint32
	// empty stands for removed Maglev tables (see placeholder).
	empty *ebpf.Map
	xdp   link.Link // nil while not attached
	// nativeRefused is why the interface refused native mode when auto
	// mode attached xdp in generic mode.
	nativeRefused error
	extra         map[int]link.Link
	applied       applied
	// adopted: the maps were found pinned and what they hold is known
	// only from reading them; Update waits for an Apply of the whole
	// state.
	adopted bool
	dropped []string // pins of severed links removed
	// vipsDirty says vips entries were written since the executor was
	// last told (vipsWritten).
	vipsDirty bool
	// statsMu guards statsBuf, the buffer Stats reads a CPU's row of
	// backend counters into.
	statsMu  sync.Mutex
	statsBuf []dispatcherCounters
	// trace is the running packet trace (trace.go), nil when none.
	trace *Trace
	// natOrphans are the orphaned NAT halves the last sweep found, and
	// since when (see natOrphanGrace); only sweeps touch it.
	natOrphans map[natHalf]uint64
	// pinnedMaps are the maps pinned by name, by name (see Repin).
	pinnedMaps map[string]*ebpf.Map
	// repl is the executor of another ABI or of other sizes that Open
	// found pinned, until Attach replaces it (replace.go); replaced says
	// what Attach did then (nil: nothing replaced).
	repl     *replacement
	replaced *lb.Replacement
	// progAdopted: Open adopted the pinned program (adopt.go); else
	// notAdopted says why not.
	progAdopted bool
	notAdopted  string
	// progMaps names the maps the object does not pin by name, which
	// pinProgram pins with the program (progMapPinName); data holds
	// those of them the generated objects do not.
	progMaps []string
	data     dataSections
}

// The maps sized by the number of services and of backends, with their
// entries per service or backend.
var (
	serviceMaps = map[string]uint32{dispatcherMapVips: 3, dispatcherMapMaglevTables: 1, dispatcherMapMaglevInfo: 1, dispatcherMapServiceStats: 1,
		dispatcherMapTraceServices: 1}
	backendMaps = map[string]uint32{dispatcherMapBackends: 1, dispatcherMapServiceServers: 1,
		dispatcherMapBackendSwept: 1}
)

// Open loads the executor's program and maps, adopting whatever a previous
// dlbd pinned under opts.PinDir: the maps keep their contents (connections
// included); the pinned program is adopted, not loaded again, when it is
// the one Open would load (adopt.go); otherwise, if a link is pinned, the
// new program replaces the old one on it without detaching. An executor
// of another ABI pinned there (an upgrade), or with tables of other sizes
// than opts asks for, is not adopted but replaced: this one gets maps of
// its own, and Attach puts it in the old one's place (see replace.go).
// Open mounts bpffs on /sys/fs/bpf if needed.
func Open(opts Options) (_ *Datapath, err error) {
	if opts.PinDir == "" {
		opts.PinDir = DefaultPinDir
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("removing the memlock limit: %w", err)
	}
	if _, err := PreparePinDir(opts.PinDir); err != nil {
		return nil, err
	}

	if n := opts.HalfOpenTableSize; n != 0 && n&(n-1) != 0 {
		return nil, fmt.Errorf("half-open table size %d is not a power of two", n)
	}
	spec, err := loadDispatcher()
	if err != nil {
		return nil, fmt.Errorf("loading executor object: %w", err)
	}
	for name, size := range map[string]uint32{
		dispatcherMapConns:       opts.ConnTableSize,
		dispatcherMapNatFlows:    opts.NATTableSize,
		dispatcherMapNatPorts:    opts.NATTableSize,
		dispatcherMapNatHalfopen: opts.HalfOpenTableSize,
		dispatcherMapAffinity:    opts.AffinityTableSize,
	} {
		if size != 0 {
			spec.Maps[name].MaxEntries = size
		}
	}
	if opts.MaxServices != 0 {
		for name, per := range serviceMaps {
			spec.Maps[name].MaxEntries = opts.MaxServices * per
		}
	}
	if opts.MaxBackends != 0 {
		for name, per := range backendMaps {
			spec.Maps[name].MaxEntries = opts.MaxBackends * per
		}
	}
	if err := sizeBackendStats(spec); err != nil {
		return nil, err
	}
	// The connection tables' bitmaps and indexes are sized by their
	// capacities.
	for _, t := range tableMaps {
		if err := sizeTable(spec, t[0], t[1], t[3]); err != nil {
			return nil, err
		}
	}
	outer := spec.Maps[dispatcherMapMaglevTables]
	if opts.MaxTableSize != 0 {
		if opts.MaxTableSize > lb.MaxTableSize {
			return nil, fmt.Errorf("the Maglev table size %d is above %d", opts.MaxTableSize, lb.MaxTableSize)
		}
		outer.InnerMap.MaxEntries = opts.MaxTableSize
	}

	d := &Datapath{pinDir: opts.PinDir, innerSpec: outer.InnerMap.Copy(), maxTable: outer.InnerMap.MaxEntries,
		extra: map[int]link.Link{}}
	for _, name := range slices.Sorted(maps.Keys(spec.Maps)) {
		if spec.Maps[name].Pinning != ebpf.PinByName {
			d.progMaps = append(d.progMaps, name)
		}
	}
	oldABI, otherABI, err := pinnedABI(opts.PinDir)
	if err != nil {
		return nil, err
	}
	var resized []string
	if !otherABI {
		if resized, err = resizedPins(opts.PinDir, spec, d.maxTable); err != nil {
			return nil, err
		}
	}
	load := &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: opts.PinDir}}
	if otherABI || len(resized) > 0 {
		d.repl = &replacement{rep: lb.Replacement{OldABI: oldABI, Resized: resized}, names: unpinned(spec)}
		load = &ebpf.CollectionOptions{}
		if len(resized) > 0 {
			// Without the old tables (a map's pin deleted), the
			// replacement goes on as across an ABI change.
			var terr error
			if d.repl.tables, d.repl.affinity, terr = pinnedTables(opts.PinDir); terr != nil {
				d.repl.rep.Err = terr.Error()
			}
		}
	}
	sum := buildDigest(spec)
	if err := spec.Variables[dispatcherVarDlbBuild].Set(sum); err != nil {
		return nil, fmt.Errorf("setting the build digest: %w", err)
	}
	var adopt *adoption
	if d.repl != nil {
		d.notAdopted = "the pinned executor is replaced"
	} else if adopt, d.notAdopted, err = pinnedProgram(opts.PinDir, spec, d.progMaps, sum); err != nil {
		// Loading is what always worked.
		adopt, d.notAdopted, err = nil, fmt.Sprintf("adopting the pinned program: %v", err), nil
	}
	if adopt != nil {
		load.MapReplacements = adopt.maps
		var o syscallObjects
		if err = spec.LoadAndAssign(&o, load); err == nil {
			d.objs, d.data, adopt.prog = o.objects(adopt.prog), o.dataSections, nil
			d.progAdopted = true
		}
		adopt.close()
		if err != nil {
			// Not expected (the program's maps were checked); a
			// load of its own is the way that always worked.
			d.notAdopted = fmt.Sprintf("adopting the pinned program: %v", err)
			load.MapReplacements = nil
			err = d.loadAll(spec, load)
		}
	} else {
		err = d.loadAll(spec, load)
	}
	if err != nil && d.repl != nil {
		d.repl.releaseOld()
	}
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		return nil, fmt.Errorf("%w under %s: %v (run \"dlbctl executor stop\" to remove them)", ErrIncompatiblePins, opts.PinDir, err)
	}
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("loading executor: %w", &RefusedError{Kernel: kernelRelease(), Err: ve})
		}
		return nil, fmt.Errorf("loading executor: %w", err)
	}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()

	if err := d.checkConfig(); err != nil {
		return nil, err
	}
	if d.progAdopted {
		// A trace of a dlbd that was killed while it ran.
		if err := d.objs.DlbTraceOn.Set(uint32(0)); err != nil {
			return nil, fmt.Errorf("stopping an earlier dlbd's trace: %w", err)
		}
	}
	d.pinnedMaps = map[string]*ebpf.Map{}
	for name, m := range d.mapsByName() {
		if m.IsPinned() {
			d.pinnedMaps[name] = m
		}
	}
	for _, t := range d.tables() {
		if err := t.prepare(); err != nil {
			return nil, fmt.Errorf("preparing the connection tables: %w", err)
		}
	}
	if d.repl != nil {
		// The old executor's links, for Attach to put this one on.
		if d.repl.link, d.repl.extra, err = d.pinnedLinks(); err != nil {
			return nil, err
		}
	} else {
		if err := d.adoptLink(); err != nil {
			return nil, err
		}
		if err := d.pinProgram(); err != nil {
			return nil, err
		}
	}
	if err := d.loadApplied(); err != nil {
		return nil, fmt.Errorf("reading pinned state: %w", err)
	}
	return d, nil
}

// loadAll loads spec's every object into d.
func (d *Datapath) loadAll(spec *ebpf.CollectionSpec, opts *ebpf.CollectionOptions) error {
	var o allObjects
	if err := spec.LoadAndAssign(&o, opts); err != nil {
		return err
	}
	d.objs, d.data = o.dispatcherObjects, o.dataSections
	return nil
}

// checkConfig initialises the config map, or checks that a pinned one was
// written for the same Maglev size (the pinned tables have that size).
func (d *Datapath) checkConfig() error {
	var cfg dispatcherDlbConfig
	if err := d.objs.Config.Lookup(uint32(0), &cfg); err != nil {
		return fmt.Errorf("reading config map: %w", err)
	}
	abi := uint32(dispatcherDlbConstsDLB_ABI_VERSION)
	if cfg.MaglevSize != 0 && cfg.AbiVersion != abi {
		return fmt.Errorf("%w under %s: written by executor ABI version %d, this dlbd has version %d (run \"dlbctl executor stop\" to remove them)", ErrIncompatiblePins, d.pinDir, cfg.AbiVersion, abi)
	}
	if cfg.MaglevSize != 0 && cfg.MaglevSize != d.maxTable {
		return fmt.Errorf("%w under %s: Maglev tables have at most %d entries, this dlbd uses %d", ErrIncompatiblePins, d.pinDir, cfg.MaglevSize, d.maxTable)
	}
	cfg.MaglevSize = d.maxTable
	// Routes may have changed while no dlbd watched them: hops cached
	// before are looked up again.
	cfg.RouteGen++
	cfg.HashSeed = DefaultHashSeed
	cfg.AbiVersion = abi
	cfg.HalfopenMask = d.objs.NatHalfopen.MaxEntries() - 1
	cfg.ConnBuckets, cfg.ConnWords = d.objs.ConnIndex.MaxEntries(), tabBitmapWords(d.objs.Conns.MaxEntries())
	cfg.ConnEntries = d.objs.Conns.MaxEntries()
	cfg.NatfBuckets, cfg.NatfWords = d.objs.NatFlowIndex.MaxEntries(), tabBitmapWords(d.objs.NatFlows.MaxEntries())
	cfg.NatpBuckets, cfg.NatpWords = d.objs.NatPortIndex.MaxEntries(), tabBitmapWords(d.objs.NatPorts.MaxEntries())
	if err := d.objs.Config.Update(uint32(0), &cfg, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("writing config map: %w", err)
	}
	return nil
}

// adoptLink replaces the program on the pinned XDP links, if there are
// any: the main one and those of attachInterface (these only with the
// main one).
func (d *Datapath) adoptLink() error {
	main, extra, err := d.pinnedLinks()
	if err == nil && main != nil {
		d.xdp, err = d.adoptOne(main, filepath.Join(d.pinDir, linkPin))
	}
	if err != nil || d.xdp == nil {
		closeLinks(new(link.Link), extra)
		return err
	}
	for ifindex, l := range extra {
		delete(extra, ifindex)
		l, err := d.adoptOne(l, filepath.Join(d.pinDir, extraLinkPin+strconv.Itoa(ifindex)))
		if err != nil {
			closeLinks(new(link.Link), extra)
			return err
		}
		if l != nil {
			d.extra[ifindex] = l
		}
	}
	return nil
}

// pinnedLinks loads the XDP links pinned under the pin directory: the
// executor's (nil when none is) and those of attachInterface, by
// interface index. A link whose interface was deleted is unpinned and
// dropped, not returned.
func (d *Datapath) pinnedLinks() (main link.Link, extra map[int]link.Link, err error) {
	extra = map[int]link.Link{}
	defer func() {
		if err != nil {
			closeLinks(&main, extra)
		}
	}()
	entries, err := os.ReadDir(d.pinDir)
	if err != nil {
		return nil, nil, fmt.Errorf("reading pin directory: %w", err)
	}
	for _, e := range entries {
		ifindex, aerr := strconv.Atoi(strings.TrimPrefix(e.Name(), extraLinkPin))
		isExtra := strings.HasPrefix(e.Name(), extraLinkPin) && aerr == nil
		if e.Name() != linkPin && !isExtra {
			continue
		}
		path := filepath.Join(d.pinDir, e.Name())
		l, err := link.LoadPinnedLink(path, nil)
		if err != nil {
			return main, extra, fmt.Errorf("loading pinned link %s: %w", path, err)
		}
		if severed(l) {
			if err := d.dropSevered(l, path); err != nil {
				return main, extra, err
			}
			continue
		}
		if isExtra {
			extra[ifindex] = l
		} else {
			main = l
		}
	}
	return main, extra, nil
}

// adoptOne puts the program on l, pinned at path; a link severed since it
// was loaded is dropped (nil, no error).
func (d *Datapath) adoptOne(l link.Link, path string) (link.Link, error) {
	if err := l.Update(d.objs.DlbXdp); err != nil {
		if errors.Is(err, unix.ENOLINK) { // severed since it was loaded
			return nil, d.dropSevered(l, path)
		}
		l.Close()
		return nil, fmt.Errorf("replacing the program on the pinned link %s: %w", path, err)
	}
	return l, nil
}

// severed reports whether an XDP link lost its interface: the interface
// was deleted (a driver reload, a NIC hot-plug, a veth recreated). The
// kernel keeps such a link, attached to nothing, until its last pin and
// descriptor go; it cannot be attached again.
func severed(l link.Link) bool {
	info, err := l.Info()
	if err != nil {
		return errors.Is(err, unix.ENOLINK)
	}
	return info.XDP() != nil && info.XDP().Ifindex == 0
}

// dropSevered unpins and closes a severed link, so that the program can be
// attached afresh to an interface of that name; the maps, and so the
// connection table, stay.
func (d *Datapath) dropSevered(l link.Link, path string) error {
	l.Close()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unpinning the severed link %s: %w", path, err)
	}
	d.dropped = append(d.dropped, filepath.Base(path))
	return nil
}

// Dropped returns the pins of links that Open or Attach found severed (their
// interface was deleted) and removed; dlbd logs them.
func (d *Datapath) Dropped() []string { return slices.Clone(d.dropped) }

// pinProgram pins the program and the maps of progMaps (under
// progMapPinName), each replacing a previous pin atomically, the maps
// first, and removes the pins of program maps this object does not have.
func (d *Datapath) pinProgram() error {
	all := d.allMaps()
	own := map[string]bool{}
	for _, name := range d.progMaps {
		m := all[name]
		if m == nil {
			continue
		}
		pin := progMapPinName(name)
		own[pin] = true
		if err := pinMapAs(m, d.pinDir, pin); err != nil {
			return fmt.Errorf("pinning the program's map %s: %w", name, err)
		}
	}
	if err := pinReplacing(d.objs.DlbXdp, d.pinDir, progPin); err != nil {
		return fmt.Errorf("pinning program: %w", err)
	}
	entries, err := os.ReadDir(d.pinDir)
	if err != nil {
		return fmt.Errorf("reading pin directory: %w", err)
	}
	for _, e := range entries {
		if name := e.Name(); strings.HasPrefix(name, progMapPin) && !own[name] {
			if err := os.Remove(filepath.Join(d.pinDir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("removing an older program's map pin %s: %w", name, err)
			}
		}
	}
	return nil
}

// pinMapAs pins m as dir/name like pinReplacing, through a clone of m:
// m itself stays unpinned, so that RemovePins, which unpins the maps
// pinned by name, leaves it to the pin directory's sweep.
func pinMapAs(m *ebpf.Map, dir, name string) error {
	c, err := m.Clone()
	if err != nil {
		return err
	}
	defer c.Close()
	return pinReplacing(c, dir, name)
}

// pinReplacing pins o as dir/name, replacing what is pinned there
// atomically (through a temporary pin of its own).
func pinReplacing(o interface{ Pin(string) error }, dir, name string) error {
	tmp := filepath.Join(dir, name+"_new") // bpffs refuses names with dots
	_ = os.Remove(tmp)
	if err := o.Pin(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// Repin pins again every object of the open executor whose pin is gone
// (the pin directory emptied or deleted under dlbd), creating the
// directory again if need be, and returns the names it pinned. Without
// its pins the executor could not be adopted: the next dlbd would load a
// new one with empty tables, and the XDP link, whose last reference would
// then be this dlbd's, would take the program off the interface when
// dlbd exits. A path that holds something else is left alone.
func (d *Datapath) Repin() ([]string, error) {
	type pinnable interface {
		Pin(string) error
		Unpin() error
	}
	if d.repl != nil { // the pins are the older executor's until Attach
		return nil, nil
	}
	want := map[string]pinnable{progPin: d.objs.DlbXdp}
	if d.xdp != nil {
		want[linkPin] = d.xdp
	}
	for ifindex, l := range d.extra {
		want[extraLinkPin+strconv.Itoa(ifindex)] = l
	}
	for name, m := range d.pinnedMaps {
		want[name] = m
	}
	all := d.allMaps()
	for _, name := range d.progMaps {
		if m := all[name]; m != nil {
			want[progMapPinName(name)] = clonePin{m}
		}
	}
	var missing []string
	for name := range want {
		if _, err := os.Lstat(filepath.Join(d.pinDir, name)); errors.Is(err, os.ErrNotExist) {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	sort.Strings(missing)
	if err := os.MkdirAll(d.pinDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the pin directory again: %w", err)
	}
	if err := checkNotUnlinked(d.pinDir); err != nil {
		return nil, err
	}
	var done []string
	var errs []error
	for _, name := range missing {
		// Unpin forgets the old path (removing nothing: it is gone),
		// for Pin does nothing when asked for the path it remembers.
		p := want[name]
		if err := p.Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("pinning %s again: %w", name, err))
			continue
		}
		if err := p.Pin(filepath.Join(d.pinDir, name)); err != nil {
			errs = append(errs, fmt.Errorf("pinning %s again: %w", name, err))
			continue
		}
		done = append(done, name)
	}
	return done, errors.Join(errs...)
}

// clonePin pins a map of the program's own through a clone (pinMapAs).
type clonePin struct{ m *ebpf.Map }

// Pin pins the map at path through a clone.
func (c clonePin) Pin(path string) error {
	return pinMapAs(c.m, filepath.Dir(path), filepath.Base(path))
}

// Unpin does nothing: the map itself was never pinned.
func (c clonePin) Unpin() error { return nil }

// ErrPinDirUnlinked: the pin directory was deleted, yet dlbd still sees
// it, as the mount point of a directory bound into its mount namespace
// (dlbd.service binds the host's /sys/fs/bpf/dlb into a private
// /sys/fs/bpf). Nothing can be pinned in it, and dlbd cannot make the
// host's directory again from where it stands.
var ErrPinDirUnlinked = errors.New("the pin directory was deleted, and this dlbd cannot make it again: " +
	"it is the mount point of a directory bound into dlbd's mount namespace (as dlbd.service binds /sys/fs/bpf/dlb)")

// checkNotUnlinked returns ErrPinDirUnlinked, with the path, when dir is
// a directory that was deleted (no links left) but is still reachable.
func checkNotUnlinked(dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err == nil && st.Nlink == 0 {
		return fmt.Errorf("%s: %w", dir, ErrPinDirUnlinked)
	}
	return nil
}

// Attached returns the current attachment, or false when the program is
// not attached.
// A link whose interface was deleted is not attached.
func (d *Datapath) Attached() (lb.Attachment, bool) {
	if d.xdp == nil {
		return lb.Attachment{}, false
	}
	return linkAttachment(d.xdp)
}

func linkAttachment(l link.Link) (lb.Attachment, bool) {
	// One syscall: the link's info names its program too. (Asking the
	// program for its own info as well cost 5-15 ms on a busy host, and
	// high availability asks every 100 ms.)
	info, err := l.Info()
	if err != nil || info.XDP() == nil || info.XDP().Ifindex == 0 {
		return lb.Attachment{}, false
	}
	return lb.Attachment{Ifindex: int(info.XDP().Ifindex), LinkID: uint32(info.ID), ProgramID: uint32(info.Program)}, true
}

// Attach attaches the program to the interface with the given index in the
// given mode, pins the link and returns the mode used. If the program is
// already attached to that interface (adopted from a previous dlbd), Attach
// keeps that attachment and returns lb.XDPAuto: the kernel does not report
// the mode of an existing link. A link whose interface was deleted is
// dropped and the program attached afresh. While an executor of another
// ABI or of other table sizes is pinned (see Open), Attach takes its place
// on its links and pins this one's maps instead.
func (d *Datapath) Attach(ifindex int, mode lb.XDPMode) (lb.XDPMode, error) {
	if d.repl != nil {
		return d.replaceOld(ifindex, mode)
	}
	if d.xdp != nil && severed(d.xdp) {
		l := d.xdp
		d.xdp = nil
		if err := d.dropSevered(l, filepath.Join(d.pinDir, linkPin)); err != nil {
			return 0, err
		}
	}
	if a, ok := d.Attached(); ok {
		if a.Ifindex != ifindex {
			return 0, fmt.Errorf("%w (ifindex %d)", ErrOtherInterface, a.Ifindex)
		}
		return lb.XDPAuto, nil
	}
	l, m, refused, err := d.attachLink(ifindex, mode, filepath.Join(d.pinDir, linkPin))
	if err != nil {
		return 0, err
	}
	d.xdp, d.nativeRefused = l, refused
	return m, nil
}

// NativeRefused says why the interface refused the program in native
// mode when, asked for auto mode, it was attached in generic mode (a
// driver without XDP, an MTU too large for native XDP), nil otherwise.
func (d *Datapath) NativeRefused() error { return d.nativeRefused }

// attachLink attaches the program to an interface in the given mode (auto:
// native, else generic) and pins the link at pin. It returns the link,
// the mode it is attached in, and, in auto mode, why native mode was
// refused when generic mode was not.
func (d *Datapath) attachLink(ifindex int, mode lb.XDPMode, pin string) (link.Link, lb.XDPMode, error, error) {
	try := []lb.XDPMode{mode}
	if mode == lb.XDPAuto {
		try = []lb.XDPMode{lb.XDPNative, lb.XDPGeneric}
	}
	var errs []error
	for _, m := range try {
		flags := link.XDPGenericMode
		if m == lb.XDPNative {
			flags = link.XDPDriverMode
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: d.objs.DlbXdp, Interface: ifindex, Flags: flags})
		if err != nil {
			if m == lb.XDPNative && errors.Is(err, unix.ERANGE) {
				// The kernel's own words are in its extended ack, which
				// the BPF link API does not return.
				err = fmt.Errorf("%w: the MTU of the interface or of its veth peer is larger than native XDP allows (lower it, or use --xdp-mode generic)", err)
			}
			errs = append(errs, fmt.Errorf("%s mode: %w", m, err))
			continue
		}
		if err := l.Pin(pin); err != nil {
			l.Close()
			return nil, 0, nil, fmt.Errorf("pinning XDP link: %w", err)
		}
		return l, m, errors.Join(errs...), nil
	}
	return nil, 0, nil, fmt.Errorf("attaching XDP program: %w", errors.Join(errs...))
}

// executorProgName is the kernel's name of the executor's XDP program
// (its function's name, at most 15 characters).
const executorProgName = "dlb_xdp"

// DescribeXDP fills in what the BPF API tells of the XDP program p the
// host reports attached to interface ifindex: its name, whether it is a
// dlb executor's program, and the BPF link that holds it there (none when
// it was attached through netlink). What cannot be read stays empty: this
// only explains a refusal.
func (d *Datapath) DescribeXDP(ifindex int, p *lb.XDPProgram) {
	if p.ID != 0 {
		if prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(p.ID)); err == nil {
			if info, err := prog.Info(); err == nil {
				p.Name = info.Name
			}
			_ = prog.Close()
		}
	}
	p.Executor = p.Name == executorProgName
	var it link.Iterator
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil || info.Type != link.XDPType || info.XDP() == nil || int(info.XDP().Ifindex) != ifindex {
			continue
		}
		if p.ID == 0 || uint32(info.Program) == p.ID {
			p.LinkID = uint32(info.ID)
			return
		}
	}
}

// attachInterface attaches the program to one more interface, beside the
// one Attach attached it to: a NAT dispatcher whose clients and servers
// are behind different interfaces needs it on both (replies arrive on the
// servers' side). The link is pinned and adopted like the main one; if
// the program is already attached to the interface, attachInterface
// keeps that attachment and returns lb.XDPAuto.
func (d *Datapath) attachInterface(ifindex int, mode lb.XDPMode) (lb.XDPMode, error) {
	if a, ok := d.Attached(); ok && a.Ifindex == ifindex {
		return lb.XDPAuto, nil
	}
	if l, ok := d.extra[ifindex]; ok {
		if !severed(l) {
			return lb.XDPAuto, nil
		}
		delete(d.extra, ifindex)
		if err := d.dropSevered(l, filepath.Join(d.pinDir, extraLinkPin+strconv.Itoa(ifindex))); err != nil {
			return 0, err
		}
	}
	l, m, _, err := d.attachLink(ifindex, mode, filepath.Join(d.pinDir, extraLinkPin+strconv.Itoa(ifindex)))
	if err != nil {
		return 0, err
	}
	d.extra[ifindex] = l
	return m, nil
}

// detachInterface detaches the program from an interface of
// attachInterface and removes the link's pin.
func (d *Datapath) detachInterface(ifindex int) error {
	l, ok := d.extra[ifindex]
	if !ok {
		return nil
	}
	delete(d.extra, ifindex)
	if err := l.Unpin(); err != nil {
		l.Close()
		return fmt.Errorf("unpinning XDP link: %w", err)
	}
	if err := l.Close(); err != nil {
		return fmt.Errorf("detaching XDP program: %w", err)
	}
	return nil
}

// attachments returns every attachment: Attach's first, then those of
// attachInterface by interface index.
func (d *Datapath) attachments() []lb.Attachment {
	var out []lb.Attachment
	if a, ok := d.Attached(); ok {
		out = append(out, a)
	}
	var idx []int
	for i := range d.extra {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		if a, ok := linkAttachment(d.extra[i]); ok {
			out = append(out, a)
		}
	}
	return out
}

// Detach detaches the program from every interface and removes the link
// pins.
func (d *Datapath) Detach() error {
	for ifindex := range d.extra {
		if err := d.detachInterface(ifindex); err != nil {
			return err
		}
	}
	if d.xdp == nil {
		return nil
	}
	if err := d.xdp.Unpin(); err != nil {
		return fmt.Errorf("unpinning XDP link: %w", err)
	}
	err := d.xdp.Close()
	d.xdp, d.nativeRefused = nil, nil
	if err != nil {
		return fmt.Errorf("detaching XDP program: %w", err)
	}
	return nil
}

// Close releases the file descriptors and keeps every pin: the program
// stays attached and keeps forwarding.
func (d *Datapath) Close() error {
	if d.trace != nil {
		_, _ = d.trace.Stop()
	}
	if d.repl != nil {
		d.repl.releaseOld()
	}
	closeLinks(&d.xdp, d.extra)
	if d.empty != nil {
		d.empty.Close()
		d.empty = nil
	}
	d.data.close()
	return d.objs.Close()
}

// closeLinks closes *main (then nil) and the links of extra (then
// empty). Closing a pinned link leaves it attached.
func closeLinks(main *link.Link, extra map[int]link.Link) {
	if *main != nil {
		(*main).Close()
		*main = nil
	}
	for i, l := range extra {
		l.Close()
		delete(extra, i)
	}
}

// Remove detaches the program, unpins every object and closes the
// Datapath (see RemovePins).
func (d *Datapath) Remove() error {
	_, err := d.RemovePins()
	return err
}

// RemovePins detaches the program, removes every pin of the executor under
// the pin directory and closes the Datapath. The connection table is lost.
// It removes the pins it did not load too: links whose interface was
// deleted, a program pin left by an interrupted restart. It returns the
// names of the pins it removed, sorted. The directory itself stays: dlbd
// holds its lock on it. While an executor of another ABI is pinned and
// not yet replaced (see Open), it only closes: the pins are that one's.
func (d *Datapath) RemovePins() ([]string, error) {
	if d.repl != nil {
		// The pins are the older executor's, which forwards as it did
		// before Open: this one was never in its place.
		return nil, d.Close()
	}
	var removed []string
	var errs []error
	for ifindex := range d.extra {
		if err := d.detachInterface(ifindex); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, extraLinkPin+strconv.Itoa(ifindex))
	}
	if d.xdp != nil {
		if err := d.Detach(); err != nil {
			errs = append(errs, err)
		} else {
			removed = append(removed, linkPin)
		}
	}
	for name, m := range d.mapsByName() {
		if !m.IsPinned() {
			continue
		}
		if err := m.Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("unpinning map %s: %w", name, err))
			continue
		}
		removed = append(removed, name)
	}
	errs = append(errs, d.Close())
	// Whatever this Datapath did not hold.
	rest, err := RemovePins(d.pinDir)
	removed = append(removed, rest...)
	errs = append(errs, err)
	slices.Sort(removed)
	return slices.Compact(removed), errors.Join(errs...)
}

// PinnedAttachment returns where the executor pinned under pinDir is
// attached (the interface's index and the program's id), without loading
// it; false when no XDP link is pinned there or its interface was
// deleted. dlbd asks it when the interface its configuration names is
// missing at start: an executor still forwarding on an interface renamed
// while no dlbd ran is followed, not left unseen.
func PinnedAttachment(pinDir string) (lb.Attachment, bool, error) {
	if pinDir == "" {
		pinDir = DefaultPinDir
	}
	l, err := link.LoadPinnedLink(filepath.Join(pinDir, linkPin), nil)
	if errors.Is(err, os.ErrNotExist) {
		return lb.Attachment{}, false, nil
	}
	if err != nil {
		return lb.Attachment{}, false, fmt.Errorf("loading the pinned XDP link: %w", err)
	}
	defer l.Close()
	a, ok := linkAttachment(l)
	return a, ok, nil
}

// Pins names the executor's pins under pinDir, sorted, without loading
// anything: what RemovePins would remove. A missing directory holds none.
func Pins(pinDir string) ([]string, error) {
	if pinDir == "" {
		pinDir = DefaultPinDir
	}
	entries, err := os.ReadDir(pinDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading pin directory: %w", err)
	}
	names, err := pinNames()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if isExecutorPin(e.Name(), names) && !e.IsDir() {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// RemovePins removes every pin of the executor under pinDir without
// loading it: the XDP links (which detaches the program, unless a running
// dlbd still holds them), the program and the maps. Pins of other names
// stay, so a pin directory shared by mistake loses nothing else. It
// returns the names of the pins it removed, sorted; a missing directory
// is nothing to remove. "executor stop" uses it when the executor could
// not be loaded (maps of another size or ABI, for instance).
func RemovePins(pinDir string) ([]string, error) {
	if pinDir == "" {
		pinDir = DefaultPinDir
	}
	pins, err := Pins(pinDir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, name := range pins {
		if name == linkPin || strings.HasPrefix(name, extraLinkPin) {
			// Detached now, not when the kernel gets round to freeing the
			// link once its last reference (the pin) is gone. A link whose
			// interface is gone has nothing to detach from: removing its
			// pin is all there is to do.
			if l, err := link.LoadPinnedLink(filepath.Join(pinDir, name), nil); err == nil {
				_ = l.Detach()
				l.Close()
			}
		}
		if err := os.Remove(filepath.Join(pinDir, name)); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing pin %s: %w", name, err))
			}
			continue
		}
		removed = append(removed, name)
	}
	slices.Sort(removed)
	return removed, errors.Join(errs...)
}

// pinNames returns the names the executor pins its maps under.
func pinNames() (map[string]bool, error) {
	spec, err := loadDispatcher()
	if err != nil {
		return nil, fmt.Errorf("loading executor object: %w", err)
	}
	out := map[string]bool{}
	for name, m := range spec.Maps {
		if m.Pinning == ebpf.PinByName {
			out[name] = true
		}
	}
	return out, nil
}

// isExecutorPin reports whether name is one of the executor's pins: a
// map of the object, the program (and its temporary name while it is
// replaced) and its own maps (progMapPin), the main link or a link of
// AttachInterface.
func isExecutorPin(name string, maps map[string]bool) bool {
	switch name {
	case linkPin, progPin, progPin + "_new":
		return true
	}
	if strings.HasPrefix(name, progMapPin) {
		return true
	}
	if n, ok := strings.CutPrefix(name, extraLinkPin); ok {
		_, err := strconv.Atoi(n)
		return err == nil
	}
	return maps[name]
}

// mapsByName returns every map of the object by its name in the object,
// read off the generated struct so that a map added to the C code is never
// forgotten here.
func (d *Datapath) mapsByName() map[string]*ebpf.Map {
	return taggedMaps(map[string]*ebpf.Map{}, &d.objs.dispatcherMaps)
}

// allMaps is mapsByName with the data sections.
func (d *Datapath) allMaps() map[string]*ebpf.Map {
	return taggedMaps(d.mapsByName(), &d.data)
}

// taggedMaps adds the maps of the struct *objs points to (fields tagged
// with their names, as bpf2go makes them) to out, and returns it.
func taggedMaps(out map[string]*ebpf.Map, objs any) map[string]*ebpf.Map {
	v := reflect.ValueOf(objs).Elem()
	for i := 0; i < v.NumField(); i++ {
		if m, ok := v.Field(i).Interface().(*ebpf.Map); ok && m != nil {
			out[v.Type().Field(i).Tag.Get("ebpf")] = m
		}
	}
	return out
}

// Info describes the executor's tables.
func (d *Datapath) Info() lb.DataplaneInfo {
	return lb.DataplaneInfo{
		PinDir:        d.pinDir,
		ConnTable:     d.objs.Conns.MaxEntries(),
		NATTable:      d.objs.NatFlows.MaxEntries(),
		HalfOpenTable: d.objs.NatHalfopen.MaxEntries(),
		AffinityTable: d.objs.Affinity.MaxEntries(),
		MaxServices:   d.objs.MaglevTables.MaxEntries(),
		MaxBackends:   d.objs.Backends.MaxEntries(),
		MaxTableSize:  d.maxTable,
	}
}

const bpffsMagic = 0xcafe4a11

// PreparePinDir makes dir ready to hold pins without loading anything:
// it mounts bpffs on /sys/fs/bpf if dir is below it and nothing is
// mounted there (and says so), and creates dir. dlbd calls it to lock the
// directory before it opens the executor.
func PreparePinDir(dir string) (mounted bool, err error) {
	mounted, err = ensureBPFFS(dir)
	if err != nil {
		return false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return mounted, fmt.Errorf("creating pin directory: %w", err)
	}
	return mounted, nil
}

// ensureBPFFS checks that dir is (or will be) on a bpf filesystem, and mounts
// one on /sys/fs/bpf when dir is below it and nothing is mounted there.
func ensureBPFFS(dir string) (mounted bool, err error) {
	probe := dir
	for {
		if _, err := os.Stat(probe); err == nil {
			break
		}
		parent := filepath.Dir(probe)
		if parent == probe {
			break
		}
		probe = parent
	}
	var st unix.Statfs_t
	if err := unix.Statfs(probe, &st); err != nil {
		return false, fmt.Errorf("checking %s: %w", probe, err)
	}
	if st.Type == bpffsMagic {
		return false, nil
	}
	const root = "/sys/fs/bpf"
	if probe != root {
		return false, fmt.Errorf("pin directory %s is not on a bpf filesystem (%s is not): pins live below /sys/fs/bpf (dlbd mounts it when needed), or on a bpffs mounted elsewhere (mount -t bpf bpf DIR)", dir, probe)
	}
	if err := unix.Mount("bpf", root, "bpf", 0, "mode=0700"); err != nil {
		return false, fmt.Errorf("mounting bpffs on %s: %w", root, err)
	}
	return true, nil
}

// Defaults returns the sizes of the executor's tables that Open uses when
// its Options leave them 0: the object's own, so that nothing else needs
// to repeat them (dlbd's flags default from here).
func Defaults() (Options, error) {
	spec, err := loadDispatcher()
	if err != nil {
		return Options{}, fmt.Errorf("loading executor object: %w", err)
	}
	return Options{
		PinDir:            DefaultPinDir,
		ConnTableSize:     spec.Maps[dispatcherMapConns].MaxEntries,
		NATTableSize:      spec.Maps[dispatcherMapNatFlows].MaxEntries,
		HalfOpenTableSize: spec.Maps[dispatcherMapNatHalfopen].MaxEntries,
		AffinityTableSize: spec.Maps[dispatcherMapAffinity].MaxEntries,
		MaxTableSize:      spec.Maps[dispatcherMapMaglevTables].InnerMap.MaxEntries,
		MaxServices:       spec.Maps[dispatcherMapMaglevTables].MaxEntries,
		MaxBackends:       spec.Maps[dispatcherMapBackends].MaxEntries,
	}, nil
}

// Memory reports what each of the executor's maps holds in kernel memory
// (the kernel's own memlock figure), the Maglev tables of all services
// together under maglev_tables.
func (d *Datapath) Memory() []lb.TableMemory {
	var out []lb.TableMemory
	v := reflect.ValueOf(&d.objs.dispatcherMaps).Elem()
	for i := 0; i < v.NumField(); i++ {
		m, ok := v.Field(i).Interface().(*ebpf.Map)
		if !ok || m == nil {
			continue
		}
		name := v.Type().Field(i).Tag.Get("ebpf")
		t := lb.TableMemory{Name: name, Entries: uint64(m.MaxEntries()), Bytes: memlock(m)}
		if m == d.objs.MaglevTables {
			b, n, tables := d.tableMemory()
			t.Bytes += b
			t.Entries, t.Tables = n, tables
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// memlock returns the kernel memory a map is charged for, from its fd's
// fdinfo.
func memlock(m *ebpf.Map) uint64 {
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(m.FD()))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "memlock:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// sizeBackendStats gives backend_stats one row per possible CPU, each as
// long as the backends map, and tells the program the row length.
func sizeBackendStats(spec *ebpf.CollectionSpec) error {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("counting the possible CPUs: %w", err)
	}
	stride := spec.Maps[dispatcherMapBackends].MaxEntries
	if uint64(stride)*uint64(cpus) > math.MaxUint32 {
		return fmt.Errorf("%d backends on %d CPUs: too many counters", stride, cpus)
	}
	spec.Maps[dispatcherMapBackendStats].MaxEntries = stride * uint32(cpus)
	v, ok := spec.Variables[dispatcherVarStatsStride]
	if !ok {
		return fmt.Errorf("executor object has no %s", dispatcherVarStatsStride)
	}
	if err := v.Set(stride); err != nil {
		return fmt.Errorf("setting %s: %w", dispatcherVarStatsStride, err)
	}
	return nil
}
