//go:build linux

package datapath

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
)

// A restarting dlbd whose pinned program is the one it would load adopts
// that program instead of loading its own: the kernel's verifier, the
// longest part of a start (0.6 s on a quiet host, several seconds beside
// heavy traffic), does not run again, and the API answers sooner.
//
// "The one it would load" is told by dlb_build, a digest in the program's
// read-only data: of the object file, of every map's sizes and of the
// constants the loader sets (buildDigest). The pinned program must also
// use exactly the maps pinned under the pin directory, for a map pin
// deleted while no dlbd ran is made again, empty, by the next load. The
// program's maps that the object does not pin by name (its data sections,
// the trace's ring, per-CPU scratch) are pinned beside it (progMapPin)
// and taken over with it: the syscall programs, which are loaded again
// (they verify in milliseconds), and the trace's switch then reach the
// same ones.

// buildSalt is mixed into the digest; tests set it to stand for another
// build.
var buildSalt string

// buildDigest returns the identity of the program spec loads: a digest of
// the object file, of the cilium/ebpf that links it, of every map's type
// and sizes and of the constants (spec's read-only variables but
// dlb_build itself). Call it once spec is sized.
func buildDigest(spec *ebpf.CollectionSpec) [32]byte {
	h := sha256.New()
	word := func(v uint64) { _ = binary.Write(h, binary.LittleEndian, v) }
	str := func(s string) { word(uint64(len(s))); h.Write([]byte(s)) }
	str("dlb executor build 1")
	str(buildSalt)
	word(uint64(len(_DispatcherBytes)))
	h.Write(_DispatcherBytes)
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/cilium/ebpf" {
				str(m.Version)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(spec.Maps)) {
		m := spec.Maps[name]
		str(name)
		word(uint64(m.Type))
		word(uint64(m.KeySize))
		word(uint64(m.ValueSize))
		word(uint64(m.MaxEntries))
		word(uint64(m.Flags))
		if m.InnerMap != nil {
			word(uint64(m.InnerMap.MaxEntries))
			word(uint64(m.InnerMap.ValueSize))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(spec.Variables)) {
		v := spec.Variables[name]
		if !v.Constant() || name == dispatcherVarDlbBuild {
			continue
		}
		str(name)
		word(uint64(len(v.Value)))
		h.Write(v.Value)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// adoption is a pinned program Open may adopt, with the maps it uses that
// are not pinned, by their names in spec.
type adoption struct {
	prog *ebpf.Program
	maps map[string]*ebpf.Map
}

// close releases what adoption holds (the program too: set prog to nil
// once it is someone else's).
func (a *adoption) close() {
	if a.prog != nil {
		a.prog.Close()
	}
	for _, m := range a.maps {
		m.Close()
	}
}

// progMapPin prefixes the pins of the program's maps that the object does
// not pin by name (its data sections, the trace's ring, per-CPU scratch):
// pinned too, under progMapPin and their names without dots (bpffs
// refuses dots), a restart can adopt them with the program. Their
// references need no CAP_SYS_ADMIN, which opening a map by its id does.
const progMapPin = "progmap_"

// progMapPinName is the pin of the object's map name that the object does
// not pin by name.
func progMapPinName(name string) string {
	return progMapPin + strings.ReplaceAll(strings.TrimPrefix(name, "."), ".", "_")
}

// pinnedProgram returns the program pinned under pinDir if it is the one
// spec would load with build digest sum and uses the maps pinned there
// (those the object pins by name, and its own, progMaps, under
// progMapPinName); otherwise nil and why not.
func pinnedProgram(pinDir string, spec *ebpf.CollectionSpec, progMaps []string, sum [32]byte) (_ *adoption, why string, err error) {
	prog, err := ebpf.LoadPinnedProgram(filepath.Join(pinDir, progPin), nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, "no program is pinned", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("opening the pinned program: %w", err)
	}
	a := &adoption{prog: prog, maps: map[string]*ebpf.Map{}}
	defer func() {
		if err != nil || why != "" {
			a.close()
		}
	}()
	if prog.Type() != ebpf.XDP {
		return nil, fmt.Sprintf("the pinned program is of type %s", prog.Type()), nil
	}
	info, err := prog.Info()
	if err != nil {
		return nil, "", fmt.Errorf("reading the pinned program's information: %w", err)
	}
	ids, ok := info.MapIDs()
	if !ok {
		return nil, "the kernel does not tell the pinned program's maps", nil
	}
	// The maps pinned under pinDir, by id: the object's by name (only
	// their ids are needed: the load opens them again) and the
	// program's own (taken over).
	pinned := map[ebpf.MapID]bool{}
	var ownMissing string
	for _, name := range slices.Sorted(maps.Keys(spec.Maps)) {
		pin, own := name, slices.Contains(progMaps, name)
		if own {
			pin = progMapPinName(name)
		} else if spec.Maps[name].Pinning != ebpf.PinByName {
			continue
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, pin), nil)
		if errors.Is(err, os.ErrNotExist) {
			if own {
				ownMissing = name
				continue
			}
			return nil, fmt.Sprintf("the pin of map %s is missing", name), nil
		}
		if err != nil {
			return nil, "", fmt.Errorf("opening pinned map %s: %w", pin, err)
		}
		mi, err := m.Info()
		if err != nil {
			m.Close()
			return nil, "", fmt.Errorf("reading pinned map %s: %w", pin, err)
		}
		id, _ := mi.ID()
		pinned[id] = true
		if own {
			a.maps[name] = m
		} else {
			m.Close()
		}
	}
	switch {
	case ownMissing != "" && len(a.maps) == 0:
		return nil, "the pinned program's own maps are not pinned (a dlbd older than this one pinned it)", nil
	case ownMissing != "":
		return nil, fmt.Sprintf("the pin of the program's map %s is missing", ownMissing), nil
	}
	for _, id := range ids {
		if !pinned[id] {
			return nil, fmt.Sprintf("the pinned program uses a map (id %d) not pinned under %s", id, pinDir), nil
		}
	}
	v := spec.Variables[dispatcherVarDlbBuild]
	ro := a.maps[v.SectionName]
	if ro == nil {
		return nil, "the pinned program has no build digest", nil
	}
	data := make([]byte, ro.ValueSize())
	if err := ro.Lookup(uint32(0), data); err != nil {
		return nil, "", fmt.Errorf("reading the pinned program's read-only data: %w", err)
	}
	end := uint64(v.Offset) + uint64(len(sum))
	if end > uint64(len(data)) || !bytes.Equal(data[v.Offset:end], sum[:]) {
		return nil, "the pinned program is of another build", nil
	}
	return a, "", nil
}

// dataSections are the object's data-section maps, which the generated
// objects do not name (the program's own maps: progMapPin).
type dataSections struct {
	Rodata *ebpf.Map `ebpf:".rodata"`
	Bss    *ebpf.Map `ebpf:".bss"`
}

// close closes the maps.
func (s *dataSections) close() {
	for _, m := range taggedMaps(map[string]*ebpf.Map{}, s) {
		m.Close()
	}
}

// allObjects are what Open loads when it does not adopt the program.
type allObjects struct {
	dispatcherObjects
	dataSections
}

// syscallObjects are the executor's objects but its XDP program: what
// Open loads when it adopts the pinned program.
type syscallObjects struct {
	dispatcherMaps
	dispatcherVariables
	dataSections
	DlbConnDel *ebpf.Program `ebpf:"dlb_conn_del"`
	DlbConnGet *ebpf.Program `ebpf:"dlb_conn_get"`
	DlbConnPut *ebpf.Program `ebpf:"dlb_conn_put"`
	DlbNatCtl  *ebpf.Program `ebpf:"dlb_nat_ctl"`
}

// objects returns the executor's objects made of o and the XDP program.
func (o *syscallObjects) objects(xdp *ebpf.Program) dispatcherObjects {
	return dispatcherObjects{
		dispatcherPrograms: dispatcherPrograms{DlbConnDel: o.DlbConnDel, DlbConnGet: o.DlbConnGet,
			DlbConnPut: o.DlbConnPut, DlbNatCtl: o.DlbNatCtl, DlbXdp: xdp},
		dispatcherMaps:      o.dispatcherMaps,
		dispatcherVariables: o.dispatcherVariables,
	}
}

// ProgramAdopted reports whether Open adopted the pinned program (the
// same build, not loaded again), or else why not ("no program is
// pinned", "the pinned program is of another build", ...).
func (d *Datapath) ProgramAdopted() (bool, string) {
	return d.progAdopted, d.notAdopted
}
