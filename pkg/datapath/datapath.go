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
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

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
	// extraLinkPin prefixes the pins of the links of AttachInterface,
	// followed by the interface index.
	extraLinkPin = "link_if"
)

// Errors returned by the data path.
var (
	// ErrIncompatiblePins is returned when the pinned maps were created
	// with other sizes or layouts than this dlbd uses.
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
	// MaglevSize is the size of every Maglev table, a prime (the object's
	// default when 0).
	MaglevSize uint32
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
	pinDir     string
	objs       dispatcherObjects
	innerSpec  *ebpf.MapSpec
	maglevSize uint32
	xdp        link.Link // nil while not attached
	extra      map[int]link.Link
	applied    applied
}

// Open loads the executor's program and maps, adopting whatever a previous
// dlbd pinned under opts.PinDir: the maps keep their contents (connections
// included) and, if a link is pinned, the new program replaces the old one
// on it without detaching. Open mounts bpffs on /sys/fs/bpf if needed.
func Open(opts Options) (_ *Datapath, err error) {
	if opts.PinDir == "" {
		opts.PinDir = DefaultPinDir
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("removing the memlock limit: %w", err)
	}
	if err := ensureBPFFS(opts.PinDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.PinDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating pin directory: %w", err)
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
	// The connection tables' bitmaps and indexes are sized by their
	// capacities.
	for _, t := range [][3]string{
		{dispatcherMapConns, dispatcherMapConnUsed, dispatcherMapConnIndex},
		{dispatcherMapNatFlows, dispatcherMapNatFlowUsed, dispatcherMapNatFlowIndex},
		{dispatcherMapNatPorts, dispatcherMapNatPortUsed, dispatcherMapNatPortIndex},
	} {
		if err := sizeTable(spec, t[0], t[1], t[2]); err != nil {
			return nil, err
		}
	}
	outer := spec.Maps[dispatcherMapMaglevTables]
	if opts.MaglevSize != 0 {
		outer.InnerMap.MaxEntries = opts.MaglevSize
	}

	d := &Datapath{pinDir: opts.PinDir, innerSpec: outer.InnerMap.Copy(), maglevSize: outer.InnerMap.MaxEntries,
		extra: map[int]link.Link{}}
	err = spec.LoadAndAssign(&d.objs, &ebpf.CollectionOptions{
		Maps: ebpf.MapOptions{PinPath: opts.PinDir},
	})
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		return nil, fmt.Errorf("%w under %s: %v (restart dlbd with the table sizes it was started with, or run \"dlbctl executor stop\" to remove them; an upgrade across an executor ABI change needs the latter)", ErrIncompatiblePins, opts.PinDir, err)
	}
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("loading executor: %+v", ve)
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
	for _, t := range d.tables() {
		if err := t.prepare(); err != nil {
			return nil, fmt.Errorf("preparing the connection tables: %w", err)
		}
	}
	if err := d.adoptLink(); err != nil {
		return nil, err
	}
	if err := d.pinProgram(); err != nil {
		return nil, err
	}
	if err := d.loadApplied(); err != nil {
		return nil, fmt.Errorf("reading pinned state: %w", err)
	}
	return d, nil
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
	if cfg.MaglevSize != 0 && cfg.MaglevSize != d.maglevSize {
		return fmt.Errorf("%w under %s: Maglev tables have %d entries, this dlbd uses %d", ErrIncompatiblePins, d.pinDir, cfg.MaglevSize, d.maglevSize)
	}
	cfg.MaglevSize = d.maglevSize
	cfg.HashSeed = DefaultHashSeed
	cfg.AbiVersion = abi
	cfg.HalfopenMask = d.objs.NatHalfopen.MaxEntries() - 1
	cfg.ConnBuckets, cfg.ConnWords = d.objs.ConnIndex.MaxEntries(), d.objs.ConnUsed.MaxEntries()
	cfg.ConnEntries = d.objs.Conns.MaxEntries()
	cfg.NatfBuckets, cfg.NatfWords = d.objs.NatFlowIndex.MaxEntries(), d.objs.NatFlowUsed.MaxEntries()
	cfg.NatpBuckets, cfg.NatpWords = d.objs.NatPortIndex.MaxEntries(), d.objs.NatPortUsed.MaxEntries()
	if err := d.objs.Config.Update(uint32(0), &cfg, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("writing config map: %w", err)
	}
	return nil
}

// adoptLink replaces the program on the pinned XDP links, if there are
// any: the main one and those of AttachInterface.
func (d *Datapath) adoptLink() error {
	l, err := d.adoptOne(filepath.Join(d.pinDir, linkPin))
	if err != nil || l == nil {
		return err
	}
	d.xdp = l
	entries, err := os.ReadDir(d.pinDir)
	if err != nil {
		return fmt.Errorf("reading pin directory: %w", err)
	}
	for _, e := range entries {
		ifindex, err := strconv.Atoi(strings.TrimPrefix(e.Name(), extraLinkPin))
		if !strings.HasPrefix(e.Name(), extraLinkPin) || err != nil {
			continue
		}
		l, err := d.adoptOne(filepath.Join(d.pinDir, e.Name()))
		if err != nil {
			return err
		}
		if l != nil {
			d.extra[ifindex] = l
		}
	}
	return nil
}

// adoptOne loads the link pinned at path and puts the program on it.
func (d *Datapath) adoptOne(path string) (link.Link, error) {
	l, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("loading pinned link %s: %w", path, err)
	}
	if err := l.Update(d.objs.DlbXdp); err != nil {
		l.Close()
		return nil, fmt.Errorf("replacing the program on the pinned link %s: %w", path, err)
	}
	return l, nil
}

// pinProgram pins the program, replacing a previous pin atomically.
func (d *Datapath) pinProgram() error {
	tmp := filepath.Join(d.pinDir, progPin+"_new") // bpffs refuses names with dots
	_ = os.Remove(tmp)
	if err := d.objs.DlbXdp.Pin(tmp); err != nil {
		return fmt.Errorf("pinning program: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(d.pinDir, progPin)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("pinning program: %w", err)
	}
	return nil
}

// Attached returns the current attachment, or false when the program is
// not attached.
func (d *Datapath) Attached() (lb.Attachment, bool) {
	if d.xdp == nil {
		return lb.Attachment{}, false
	}
	return linkAttachment(d.xdp, d.objs.DlbXdp)
}

func linkAttachment(l link.Link, prog *ebpf.Program) (lb.Attachment, bool) {
	info, err := l.Info()
	if err != nil || info.XDP() == nil {
		return lb.Attachment{}, false
	}
	pinfo, _ := prog.Info()
	a := lb.Attachment{Ifindex: int(info.XDP().Ifindex), LinkID: uint32(info.ID)}
	if pinfo != nil {
		if id, ok := pinfo.ID(); ok {
			a.ProgramID = uint32(id)
		}
	}
	return a, true
}

// Attach attaches the program to the interface with the given index in the
// given mode, pins the link and returns the mode used. If the program is
// already attached to that interface (adopted from a previous dlbd), Attach
// keeps that attachment and returns lb.XDPAuto: the kernel does not report
// the mode of an existing link.
func (d *Datapath) Attach(ifindex int, mode lb.XDPMode) (lb.XDPMode, error) {
	if a, ok := d.Attached(); ok {
		if a.Ifindex != ifindex {
			return 0, fmt.Errorf("%w (ifindex %d)", ErrOtherInterface, a.Ifindex)
		}
		return lb.XDPAuto, nil
	}
	l, m, err := d.attachLink(ifindex, mode, filepath.Join(d.pinDir, linkPin))
	if err != nil {
		return 0, err
	}
	d.xdp = l
	return m, nil
}

// attachLink attaches the program to an interface in the given mode (auto:
// native, else generic) and pins the link at pin.
func (d *Datapath) attachLink(ifindex int, mode lb.XDPMode, pin string) (link.Link, lb.XDPMode, error) {
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
			errs = append(errs, fmt.Errorf("%s mode: %w", m, err))
			continue
		}
		if err := l.Pin(pin); err != nil {
			l.Close()
			return nil, 0, fmt.Errorf("pinning XDP link: %w", err)
		}
		return l, m, nil
	}
	return nil, 0, fmt.Errorf("attaching XDP program: %w", errors.Join(errs...))
}

// AttachInterface attaches the program to one more interface, beside the
// one Attach attached it to: a NAT dispatcher whose clients and servers
// are behind different interfaces needs it on both (replies arrive on the
// servers' side). The link is pinned and adopted like the main one; if
// the program is already attached to the interface, AttachInterface
// keeps that attachment and returns lb.XDPAuto.
func (d *Datapath) AttachInterface(ifindex int, mode lb.XDPMode) (lb.XDPMode, error) {
	if a, ok := d.Attached(); ok && a.Ifindex == ifindex {
		return lb.XDPAuto, nil
	}
	if _, ok := d.extra[ifindex]; ok {
		return lb.XDPAuto, nil
	}
	l, m, err := d.attachLink(ifindex, mode, filepath.Join(d.pinDir, extraLinkPin+strconv.Itoa(ifindex)))
	if err != nil {
		return 0, err
	}
	d.extra[ifindex] = l
	return m, nil
}

// DetachInterface detaches the program from an interface of
// AttachInterface and removes the link's pin.
func (d *Datapath) DetachInterface(ifindex int) error {
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

// Attachments returns every attachment: Attach's first, then those of
// AttachInterface by interface index.
func (d *Datapath) Attachments() []lb.Attachment {
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
		if a, ok := linkAttachment(d.extra[i], d.objs.DlbXdp); ok {
			out = append(out, a)
		}
	}
	return out
}

// Detach detaches the program from every interface and removes the link
// pins.
func (d *Datapath) Detach() error {
	for ifindex := range d.extra {
		if err := d.DetachInterface(ifindex); err != nil {
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
	d.xdp = nil
	if err != nil {
		return fmt.Errorf("detaching XDP program: %w", err)
	}
	return nil
}

// Close releases the file descriptors and keeps every pin: the program
// stays attached and keeps forwarding.
func (d *Datapath) Close() error {
	if d.xdp != nil {
		d.xdp.Close()
		d.xdp = nil
	}
	for i, l := range d.extra {
		l.Close()
		delete(d.extra, i)
	}
	return d.objs.Close()
}

// Remove detaches the program, unpins every object and closes the Datapath.
// The connection table is lost.
func (d *Datapath) Remove() error {
	errs := []error{d.Detach()}
	for _, m := range d.maps() {
		if !m.IsPinned() {
			continue
		}
		if err := m.Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("unpinning map: %w", err))
		}
	}
	if err := os.Remove(filepath.Join(d.pinDir, progPin)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("unpinning program: %w", err))
	}
	errs = append(errs, d.Close())
	if err := os.Remove(d.pinDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("removing pin directory: %w", err))
	}
	return errors.Join(errs...)
}

// maps returns every map of the object, read off the generated struct so
// that a map added to the C code is never forgotten here.
func (d *Datapath) maps() []*ebpf.Map {
	v := reflect.ValueOf(&d.objs.dispatcherMaps).Elem()
	out := make([]*ebpf.Map, 0, v.NumField())
	for i := 0; i < v.NumField(); i++ {
		if m, ok := v.Field(i).Interface().(*ebpf.Map); ok && m != nil {
			out = append(out, m)
		}
	}
	return out
}

// MaglevSize returns the number of slots in every Maglev table.
func (d *Datapath) MaglevSize() uint32 { return d.maglevSize }

// ConnTableCapacity returns the connection table's capacity.
func (d *Datapath) ConnTableCapacity() uint32 { return d.objs.Conns.MaxEntries() }

// NATTableCapacity returns the capacity of the NAT connection tables.
func (d *Datapath) NATTableCapacity() uint32 { return d.objs.NatFlows.MaxEntries() }

// HalfOpenTableCapacity returns the number of slots of the NAT half-open
// table (one per half-open connection).
func (d *Datapath) HalfOpenTableCapacity() uint32 { return d.objs.NatHalfopen.MaxEntries() }

// AffinityTableCapacity returns the capacity of the affinity-record table.
func (d *Datapath) AffinityTableCapacity() uint32 { return d.objs.Affinity.MaxEntries() }

// PinDir returns the directory the objects are pinned under.
func (d *Datapath) PinDir() string { return d.pinDir }

const bpffsMagic = 0xcafe4a11

// ensureBPFFS checks that dir is (or will be) on a bpf filesystem, and mounts
// one on /sys/fs/bpf when dir is below it and nothing is mounted there.
func ensureBPFFS(dir string) error {
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
		return fmt.Errorf("checking %s: %w", probe, err)
	}
	if st.Type == bpffsMagic {
		return nil
	}
	const root = "/sys/fs/bpf"
	if probe != root {
		return fmt.Errorf("pin directory %s is not on a bpf filesystem", dir)
	}
	if err := unix.Mount("bpf", root, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mounting bpffs on %s: %w", root, err)
	}
	return nil
}

// Limits returns how many services and backends the executor's maps hold;
// the engine hands out ids below them.
func Limits() (services, backends uint32, err error) {
	spec, err := loadDispatcher()
	if err != nil {
		return 0, 0, fmt.Errorf("loading executor object: %w", err)
	}
	return spec.Maps[dispatcherMapMaglevTables].MaxEntries, spec.Maps[dispatcherMapBackends].MaxEntries, nil
}
