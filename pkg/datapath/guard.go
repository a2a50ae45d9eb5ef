//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// The guard keeps the host silent for the addresses dlbd puts on the
// executor's interface (cluster and NAT return addresses) when the
// executor does not take their traffic: a tc ingress program that drops
// TCP and UDP to them. The executor's XDP program sees every frame
// first, so the guard only meets what it let pass, and everything while
// it is not attached (detached, not yet adopted, being replaced). Without
// it the host's own stack would answer those segments with resets and
// break connections that a standby dispatcher is about to take over.
//
// The program is built here (a few instructions: no object file) and is
// not pinned: the tc filter that runs it holds it and its map, so it
// outlives dlbd and the executor's pins, and the next dlbd replaces it.

// guardMaxAddrs bounds the guarded addresses.
const guardMaxAddrs = 1 << 16

// Guard is the guard program and its set of addresses.
type Guard struct {
	prog  *ebpf.Program
	addrs *ebpf.Map
	// held mirrors the map's keys: the map is this Guard's alone (made
	// empty by NewGuard, never pinned), so Set compares with the mirror
	// rather than read the map (two system calls an address: a third of
	// a change's time with 4,000 clusters).
	held map[[16]byte]bool
}

// NewGuard creates the guard program and its (empty) address set.
func NewGuard() (*Guard, error) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "dlb_guard_addrs", Type: ebpf.Hash, KeySize: 16, ValueSize: 1,
		MaxEntries: guardMaxAddrs})
	if err != nil {
		return nil, fmt.Errorf("creating the guard's map: %w", err)
	}
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "dlb_guard", Type: ebpf.SchedCLS, License: "Dual BSD/GPL",
		Instructions: guardProgram(m.FD())})
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("loading the guard program: %w", err)
	}
	return &Guard{prog: p, addrs: m, held: map[[16]byte]bool{}}, nil
}

// FD is the program's file descriptor, for a tc filter.
func (g *Guard) FD() int { return g.prog.FD() }

// Set makes the guarded set exactly addrs.
func (g *Guard) Set(addrs []netip.Addr) error {
	want := map[[16]byte]bool{}
	for _, a := range addrs {
		want[a.As16()] = true
	}
	var errs []error
	for k := range g.held {
		if want[k] {
			continue
		}
		if err := g.addrs.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
			continue
		}
		delete(g.held, k)
	}
	for k := range want {
		if g.held[k] {
			continue
		}
		if err := g.addrs.Put(k, uint8(1)); err != nil {
			errs = append(errs, err)
			continue
		}
		g.held[k] = true
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("writing the guarded addresses: %w", err)
	}
	return nil
}

// Close releases the program and its map (a tc filter keeps running
// them).
func (g *Guard) Close() error {
	return errors.Join(g.prog.Close(), g.addrs.Close())
}

// guardProgram is the guard: for an IPv4 or IPv6 TCP or UDP packet whose
// destination (IPv4 as IPv4-mapped IPv6) is in the map, TC_ACT_SHOT;
// everything else TC_ACT_OK. It reads the packet with
// bpf_skb_load_bytes (the Ethernet header first, as tc ingress sees it).
func guardProgram(mapFD int) asm.Instructions {
	const (
		actOK   = 0
		actShot = 2
		keyOff  = -16 // the map key, 16 bytes
		scratch = -24
	)
	load := func(off, dst int32, n int32) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Mov.Imm(asm.R2, off),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, dst),
			asm.Mov.Imm(asm.R4, n),
			asm.FnSkbLoadBytes.Call(),
			asm.JNE.Imm(asm.R0, 0, "pass"),
		}
	}
	var p asm.Instructions
	p = append(p, asm.Mov.Reg(asm.R6, asm.R1))
	// The key starts zero.
	p = append(p, asm.Mov.Imm(asm.R7, 0), asm.StoreMem(asm.RFP, keyOff, asm.R7, asm.DWord),
		asm.StoreMem(asm.RFP, keyOff+8, asm.R7, asm.DWord))
	p = append(p, load(12, scratch, 2)...)
	p = append(p,
		asm.LoadMem(asm.R7, asm.RFP, scratch, asm.Half),
		asm.JEq.Imm(asm.R7, 0x0008, "v4"), // 08 00 read little-endian
		asm.JEq.Imm(asm.R7, 0xdd86, "v6"), // 86 dd
		asm.Ja.Label("pass"),
	)
	// IPv4: protocol at 14+9, destination at 14+16 into the key's last
	// four bytes, after ::ffff.
	v4 := load(23, scratch, 1)
	v4[0] = v4[0].WithSymbol("v4")
	p = append(p, v4...)
	p = append(p,
		asm.LoadMem(asm.R8, asm.RFP, scratch, asm.Byte),
		asm.JEq.Imm(asm.R8, 6, "v4ok"),
		asm.JEq.Imm(asm.R8, 17, "v4ok"),
		asm.Ja.Label("pass"),
		asm.Mov.Imm(asm.R7, 0xffff).WithSymbol("v4ok"),
		asm.StoreMem(asm.RFP, keyOff+10, asm.R7, asm.Half),
	)
	p = append(p, load(30, keyOff+12, 4)...)
	p = append(p, asm.Ja.Label("lookup"))
	// IPv6: next header at 14+6, destination at 14+24.
	v6 := load(20, scratch, 1)
	v6[0] = v6[0].WithSymbol("v6")
	p = append(p, v6...)
	p = append(p,
		asm.LoadMem(asm.R8, asm.RFP, scratch, asm.Byte),
		asm.JEq.Imm(asm.R8, 6, "v6ok"),
		asm.JEq.Imm(asm.R8, 17, "v6ok"),
		asm.Ja.Label("pass"),
	)
	v6ok := load(38, keyOff, 16)
	v6ok[0] = v6ok[0].WithSymbol("v6ok")
	p = append(p, v6ok...)
	p = append(p,
		asm.LoadMapPtr(asm.R1, mapFD).WithSymbol("lookup"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, keyOff),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.Mov.Imm(asm.R0, actShot),
		asm.Return(),
		asm.Mov.Imm(asm.R0, actOK).WithSymbol("pass"),
		asm.Return(),
	)
	return p
}
