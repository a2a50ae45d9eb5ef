package datapath

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// maxStack is the verifier's limit on the stack of a whole call chain
// (MAX_BPF_STACK).
const maxStack = 512

// oldFrameRound is how Linux 6.1 rounds each frame of a call chain before
// adding it up (newer kernels round to 16 bytes when the program is
// JIT-compiled): a chain that fits at 16-byte rounding can still be refused
// by Debian 12's default kernel.
const oldFrameRound = 32

// bpfFunc is one BPF function of a program: the stack it uses, as its
// instructions address it, and the functions it calls.
type bpfFunc struct {
	name  string
	depth int
	calls []string
}

// bpfFuncs splits a linked program into its functions, in the order the
// kernel numbers them, with each one's stack depth found from its
// instructions: the lowest offset from the frame pointer (r10) that a load,
// a store or a derived pointer reaches, in whole 8-byte slots. A pointer is followed from
// "rX = r10" through constant additions until rX is written otherwise or a
// call clobbers it. This is what the verifier records for a function when
// every path through it is reachable; it can only overstate the kernel's.
func bpfFuncs(insns asm.Instructions) ([]bpfFunc, error) {
	var funcs []bpfFunc
	var fp map[asm.Register]int64 // registers holding r10 + offset
	see := func(off int64) {
		f := &funcs[len(funcs)-1]
		if d := (int(-off) + 7) &^ 7; d > f.depth { // the verifier counts whole 8-byte slots
			f.depth = d
		}
	}
	for i, ins := range insns {
		if sym := ins.Symbol(); sym != "" {
			funcs = append(funcs, bpfFunc{name: sym})
			fp = map[asm.Register]int64{asm.R10: 0}
		}
		if len(funcs) == 0 {
			return nil, fmt.Errorf("instruction %d precedes any function symbol", i)
		}
		f := &funcs[len(funcs)-1]
		cls := ins.OpCode.Class()
		switch {
		case ins.IsFunctionCall():
			if ins.Reference() == "" {
				return nil, fmt.Errorf("%s: call at instruction %d names no function", f.name, i)
			}
			f.calls = append(f.calls, ins.Reference())
			fallthrough
		case ins.IsBuiltinCall() || ins.IsKfuncCall():
			for r := asm.R0; r <= asm.R5; r++ {
				delete(fp, r)
			}
		case cls == asm.LdXClass:
			if off, ok := fp[ins.Src]; ok {
				see(off + int64(ins.Offset))
			}
			delete(fp, ins.Dst)
		case cls.IsStore():
			if off, ok := fp[ins.Dst]; ok {
				see(off + int64(ins.Offset))
			}
		case cls == asm.LdClass:
			delete(fp, ins.Dst)
		case cls == asm.ALU64Class && ins.OpCode.ALUOp() == asm.Mov && ins.OpCode.Source() == asm.RegSource:
			if off, ok := fp[ins.Src]; ok && ins.Dst != asm.R10 {
				fp[ins.Dst] = off
			} else {
				delete(fp, ins.Dst)
			}
		case cls == asm.ALU64Class && ins.OpCode.Source() == asm.ImmSource &&
			(ins.OpCode.ALUOp() == asm.Add || ins.OpCode.ALUOp() == asm.Sub):
			if off, ok := fp[ins.Dst]; ok && ins.Dst != asm.R10 {
				if ins.OpCode.ALUOp() == asm.Sub {
					off -= ins.Constant
				} else {
					off += ins.Constant
				}
				fp[ins.Dst] = off
				see(off)
			}
		case cls.IsALU():
			delete(fp, ins.Dst)
		}
	}
	return funcs, nil
}

// deepestChain returns the largest stack a chain of calls from the first
// function can need when every frame is rounded up to round bytes (at
// least one round each, as the kernel counts an empty frame), and the chain.
func deepestChain(funcs []bpfFunc, round int) (int, []string, error) {
	byName := make(map[string]*bpfFunc, len(funcs))
	for i := range funcs {
		byName[funcs[i].name] = &funcs[i]
	}
	var walk func(f *bpfFunc, on map[string]bool) (int, []string, error)
	walk = func(f *bpfFunc, on map[string]bool) (int, []string, error) {
		if on[f.name] {
			return 0, nil, fmt.Errorf("%s calls itself", f.name)
		}
		on[f.name] = true
		defer delete(on, f.name)
		best, chain := 0, []string(nil)
		for _, c := range f.calls {
			g, ok := byName[c]
			if !ok {
				return 0, nil, fmt.Errorf("%s calls %s, which is not in the program", f.name, c)
			}
			n, ch, err := walk(g, on)
			if err != nil {
				return 0, nil, err
			}
			if n > best {
				best, chain = n, ch
			}
		}
		own := (max(f.depth, 1) + round - 1) / round * round
		return own + best, append([]string{fmt.Sprintf("%s(%d)", f.name, f.depth)}, chain...), nil
	}
	if len(funcs) == 0 {
		return 0, nil, fmt.Errorf("no functions")
	}
	return walk(&funcs[0], map[string]bool{})
}

// TestBPFFuncsStack: the stack model on small hand-written programs.
func TestBPFFuncsStack(t *testing.T) {
	call := func(to string) asm.Instruction { return asm.Call.Label(to) }
	for _, c := range []struct {
		name   string
		insns  asm.Instructions
		depths []int
		chain  int // at 32-byte rounding
	}{
		{"store and load", asm.Instructions{
			asm.StoreImm(asm.R10, -8, 0, asm.Word).WithSymbol("main"),
			asm.LoadMem(asm.R0, asm.R10, -24, asm.Word),
			asm.Return(),
		}, []int{24}, 32},
		{"derived pointer passed to a helper", asm.Instructions{
			asm.Mov.Reg(asm.R2, asm.R10).WithSymbol("main"),
			asm.Add.Imm(asm.R2, -40),
			asm.FnMapLookupElem.Call(),
			asm.Add.Imm(asm.R2, -400), // r2 was clobbered by the call
			asm.Return(),
		}, []int{40}, 64},
		{"pointer moved and offset again", asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.R10).WithSymbol("main"),
			asm.Add.Imm(asm.R1, -16),
			asm.Mov.Reg(asm.R3, asm.R1),
			asm.StoreMem(asm.R3, -8, asm.R0, asm.DWord),
			asm.Mov.Imm(asm.R3, 0), // no longer a frame pointer
			asm.StoreMem(asm.R3, -300, asm.R0, asm.DWord),
			asm.Return(),
		}, []int{24}, 32},
		{"chain of calls", asm.Instructions{
			asm.StoreImm(asm.R10, -200, 0, asm.Word).WithSymbol("main"),
			call("a"),
			call("b"),
			asm.Return(),
			asm.StoreImm(asm.R10, -8, 0, asm.Word).WithSymbol("a"),
			call("b"),
			asm.Return(),
			asm.StoreImm(asm.R10, -100, 0, asm.Word).WithSymbol("b"),
			asm.Return(),
		}, []int{200, 8, 104}, 224 + 32 + 128},
		{"empty frames count one round", asm.Instructions{
			call("a").WithSymbol("main"),
			asm.Return(),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("a"),
			asm.Return(),
		}, []int{0, 0}, 64},
	} {
		t.Run(c.name, func(t *testing.T) {
			funcs, err := bpfFuncs(c.insns)
			if err != nil {
				t.Fatal(err)
			}
			var depths []int
			for _, f := range funcs {
				depths = append(depths, f.depth)
			}
			if fmt.Sprint(depths) != fmt.Sprint(c.depths) {
				t.Errorf("depths %v, want %v", depths, c.depths)
			}
			n, chain, err := deepestChain(funcs, oldFrameRound)
			if err != nil {
				t.Fatal(err)
			}
			if n != c.chain {
				t.Errorf("deepest chain %d bytes (%v), want %d", n, chain, c.chain)
			}
		})
	}
	if _, _, err := deepestChain([]bpfFunc{{name: "main", calls: []string{"gone"}}}, 32); err == nil {
		t.Error("a call to a missing function was accepted")
	}
	if _, _, err := deepestChain([]bpfFunc{{name: "main", calls: []string{"main"}}}, 32); err == nil {
		t.Error("recursion was accepted")
	}
}

// TestExecutorStackFitsOldKernels: every program of the committed executor
// keeps each call chain within 512 bytes of stack at Linux 6.1's 32-byte
// frame rounding. A newer kernel accepts up to 16 bytes per frame more, so
// without this check a change can pass every test here and be refused only
// by Debian 12's default kernel (it happened: 544 bytes).
func TestExecutorStackFitsOldKernels(t *testing.T) {
	_, progs := executorFuncs(t)
	for name, funcs := range progs {
		n, chain, err := deepestChain(funcs, oldFrameRound)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: deepest chain %d bytes at %d-byte frames: %s", name, n, oldFrameRound, strings.Join(chain, " → "))
		if n > maxStack {
			t.Errorf("%s: a call chain needs %d bytes of stack at Linux %s's %d-byte frame rounding, over the %d allowed: %s",
				name, n, MinKernel, oldFrameRound, maxStack, strings.Join(chain, " → "))
		}
	}
}

// executorFuncs returns the committed executor's specification and the
// functions of each of its programs.
func executorFuncs(t *testing.T) (*ebpf.CollectionSpec, map[string][]bpfFunc) {
	t.Helper()
	spec, err := loadDispatcher()
	if err != nil {
		t.Fatal(err)
	}
	progs := make(map[string][]bpfFunc, len(spec.Programs))
	for name, p := range spec.Programs {
		funcs, err := bpfFuncs(p.Instructions)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		progs[name] = funcs
	}
	return spec, progs
}

var (
	stackDepthLine = regexp.MustCompile(`(?m)^stack depth ([0-9+]+)`)
	processedLine  = regexp.MustCompile(`processed \d+ insns.*`)
)

// TestPrivilegedStackModel: the stack depth the model finds for each
// function of the executor is never below what this kernel's verifier
// records for it (its statistics line "stack depth a+b+..."), so the check
// above cannot pass a program the verifier would count deeper.
func TestPrivilegedStackModel(t *testing.T) {
	testutil.RequirePrivileged(t)
	spec, progs := executorFuncs(t)
	pins := newPinDir(t)
	if _, err := PreparePinDir(pins); err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		Maps:     ebpf.MapOptions{PinPath: pins},
		Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats},
	})
	if err != nil {
		t.Fatalf("loading the executor: %v", err)
	}
	defer coll.Close()
	for name, funcs := range progs {
		m := stackDepthLine.FindStringSubmatch(coll.Programs[name].VerifierLog)
		// How much of its budget the verifier spent (kernels.sh shows it
		// for each kernel).
		if pl := processedLine.FindString(coll.Programs[name].VerifierLog); pl != "" {
			t.Logf("%s: %s", name, pl)
		}
		if m == nil {
			t.Fatalf("%s: no stack depth line in the verifier's statistics:\n%s", name, coll.Programs[name].VerifierLog)
		}
		kernel := strings.Split(m[1], "+")
		if len(kernel) != len(funcs) {
			t.Fatalf("%s: the verifier counts %d functions (%s), the model %d", name, len(kernel), m[1], len(funcs))
		}
		for i, f := range funcs {
			k, err := strconv.Atoi(kernel[i])
			if err != nil {
				t.Fatalf("%s: stack depth %q: %v", name, m[1], err)
			}
			if f.depth < k {
				t.Errorf("%s: function %s uses %d bytes of stack by the verifier's count, the model finds %d", name, f.name, k, f.depth)
			} else {
				t.Logf("%s: %s %d bytes (verifier %d)", name, f.name, f.depth, k)
			}
		}
	}
}
