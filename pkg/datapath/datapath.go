//go:build linux

// Package datapath owns the executor's BPF objects. It loads the XDP program
// and its maps, adopting the maps, program and link a previous dlbd left
// pinned, so that a restart never stops forwarding or loses the connection
// table; it attaches the program through a pinned bpf_link and replaces the
// program on that link in place; it writes a desired lb.Dataplane into the
// maps; and it reads counters and sweeps the connection table.
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
	// default when 0).
	ConnTableSize uint32
	// MaglevSize is the size of every Maglev table, a prime (the object's
	// default when 0).
	MaglevSize uint32
}

// Datapath is the loaded executor.
type Datapath struct {
	pinDir     string
	objs       dispatcherObjects
	innerSpec  *ebpf.MapSpec
	maglevSize uint32
	xdp        link.Link // nil while not attached
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

	spec, err := loadDispatcher()
	if err != nil {
		return nil, fmt.Errorf("loading executor object: %w", err)
	}
	if opts.ConnTableSize != 0 {
		spec.Maps[dispatcherMapConns].MaxEntries = opts.ConnTableSize
	}
	outer := spec.Maps[dispatcherMapMaglevTables]
	if opts.MaglevSize != 0 {
		outer.InnerMap.MaxEntries = opts.MaglevSize
	}

	d := &Datapath{pinDir: opts.PinDir, innerSpec: outer.InnerMap.Copy(), maglevSize: outer.InnerMap.MaxEntries}
	err = spec.LoadAndAssign(&d.objs, &ebpf.CollectionOptions{
		Maps: ebpf.MapOptions{PinPath: opts.PinDir},
	})
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		return nil, fmt.Errorf("%w under %s: %v (restart dlbd with the sizes it was started with, or run \"dlbctl executor stop\" to remove them)", ErrIncompatiblePins, opts.PinDir, err)
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
	if cfg.MaglevSize != 0 && cfg.MaglevSize != d.maglevSize {
		return fmt.Errorf("%w under %s: Maglev tables have %d entries, this dlbd uses %d", ErrIncompatiblePins, d.pinDir, cfg.MaglevSize, d.maglevSize)
	}
	cfg.MaglevSize = d.maglevSize
	cfg.HashSeed = DefaultHashSeed
	if err := d.objs.Config.Update(uint32(0), &cfg, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("writing config map: %w", err)
	}
	return nil
}

// adoptLink replaces the program on a pinned XDP link, if there is one.
func (d *Datapath) adoptLink() error {
	path := filepath.Join(d.pinDir, linkPin)
	l, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("loading pinned link %s: %w", path, err)
	}
	if err := l.Update(d.objs.DlbXdp); err != nil {
		l.Close()
		return fmt.Errorf("replacing the program on the pinned link: %w", err)
	}
	d.xdp = l
	return nil
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
	info, err := d.xdp.Info()
	if err != nil || info.XDP() == nil {
		return lb.Attachment{}, false
	}
	pinfo, _ := d.objs.DlbXdp.Info()
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
		if err := l.Pin(filepath.Join(d.pinDir, linkPin)); err != nil {
			l.Close()
			return 0, fmt.Errorf("pinning XDP link: %w", err)
		}
		d.xdp = l
		return m, nil
	}
	return 0, fmt.Errorf("attaching XDP program: %w", errors.Join(errs...))
}

// Detach detaches the program from its interface and removes the link pin.
func (d *Datapath) Detach() error {
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
