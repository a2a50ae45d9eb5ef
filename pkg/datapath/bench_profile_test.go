//go:build linux

package datapath

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// benchProfileSeconds is how long TestBenchProfile samples one case.
const benchProfileSeconds = 8

// TestBenchProfile shows where one case of TestBenchCompare spends its
// time in the committed executor: DLB_BENCH_PROFILE names the case
// ("new connection", "NAT SYN, new source", "NAT new connection", ...).
// It measures the case's cost as TestBenchCompare does, then samples the
// pinned CPU with perf (call graphs) while the case runs again and again,
// and keeps the samples taken inside dlb_xdp (not the wrapper, not the
// preparation between measurements): each function's share, and the
// instructions holding the most samples. One instruction holding most of
// a function's samples is a load waiting for memory: the cache lines a
// path misses. Needs perf (Debian: linux-perf).
func TestBenchProfile(t *testing.T) {
	name := os.Getenv("DLB_BENCH_PROFILE")
	if name == "" {
		t.Skip("profiling a benchmark case: set DLB_BENCH_PROFILE to its name (e.g. \"NAT new connection\")")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the profile needs root (BPF_PROG_TEST_RUN of XDP programs, network namespaces, perf)")
	}
	perf, err := exec.LookPath("perf")
	if err != nil {
		t.Fatalf("the profile needs perf (Debian: apt-get install linux-perf): %v", err)
	}
	ce := newCompareEnv(t)
	prog := ce.e.dp.objs.DlbXdp
	cases := append(compareCases(prog, ce.estFrame, ce.synFrame, ce.ackFrame, ce.reset),
		compareNATCases(t, ce.e, prog, ce.natSynFrame, ce.natReset)...)
	c := caseNamed(cases, name)
	if c == nil {
		names := make([]string, len(cases))
		for k, c := range cases {
			names[k] = strconv.Quote(c.name)
		}
		t.Fatalf("DLB_BENCH_PROFILE=%q: no such case; the cases are %s", name, strings.Join(names, ", "))
	}
	bases := ce.bases()
	bare, base := caseNamed(bases, "bare XDP_PASS"), caseNamed(bases, c.base)
	var bareNS, baseNS, caseNS []float64
	for round := -1; round < 5; round++ {
		b, p, x := ce.b.measure(bare), ce.b.measure(base), ce.b.measure(c)
		if round >= 0 {
			bareNS, baseNS, caseNS = append(bareNS, b), append(baseNS, p), append(caseNS, x)
		}
	}
	cost := median(caseNS) - median(baseNS) + median(bareNS)

	data := filepath.Join(t.TempDir(), "perf.data")
	rec := exec.Command(perf, "record", "-q", "-F", "20000", "-g", "-C", strconv.Itoa(ce.cpu), "-o", data, "--", "sleep", strconv.Itoa(benchProfileSeconds))
	var recOut bytes.Buffer
	rec.Stdout, rec.Stderr = &recOut, &recOut
	if err := rec.Start(); err != nil {
		t.Fatalf("starting perf record: %v", err)
	}
	deadline := time.Now().Add(benchProfileSeconds*time.Second - 500*time.Millisecond)
	runs := 0
	for time.Now().Before(deadline) {
		ce.b.measure(c)
		runs++
	}
	if err := rec.Wait(); err != nil {
		t.Fatalf("perf record: %v: %s", err, recOut.String())
	}
	out, err := exec.Command(perf, "script", "-i", data, "-F", "ip,sym,symoff").Output()
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	p, err := readProfile(bytes.NewReader(out), "dlb_xdp")
	if err != nil {
		t.Fatalf("reading perf script's output: %v", err)
	}
	if p.inProg < 100 {
		t.Fatalf("%d of %d samples inside dlb_xdp: too few to tell (no call graphs through BPF programs?)", p.inProg, p.total)
	}
	src, err := newSourceLines(prog)
	if err != nil {
		t.Logf("instructions not named by source line: %v", err)
	}
	fmt.Print(p.report(name, cost, runs, src.line))
}

// sourceLines names the source line of a JITed instruction of a loaded
// program, from the kernel's line information: each line record's
// instruction offset and the address its first JITed instruction got.
// Each function is JITed into memory of its own.
type sourceLines struct {
	funcs map[string]*jitedFunc // by function name
}

// jitedFunc is where a function's JITed code lies, and its line records.
type jitedFunc struct {
	start, size uint64
	addrs       []uint64 // JITed address of each line record, ascending
	lines       []string // "file:line: source" of each line record
}

// newSourceLines reads prog's JITed functions and line records.
func newSourceLines(prog *ebpf.Program) (*sourceLines, error) {
	info, err := prog.Info()
	if err != nil {
		return nil, fmt.Errorf("reading the program's info: %w", err)
	}
	ksyms, ok1 := info.JitedKsymAddrs()
	lens, ok2 := info.JitedFuncLens()
	addrs, ok3 := info.JitedLineInfos()
	if !ok1 || !ok2 || !ok3 {
		return nil, fmt.Errorf("the kernel gave no JITed symbols, lengths or line addresses")
	}
	funcs, err := info.FuncInfos()
	if err != nil {
		return nil, fmt.Errorf("reading function infos: %w", err)
	}
	lines, err := info.LineInfos()
	if err != nil {
		return nil, fmt.Errorf("reading line infos: %w", err)
	}
	if len(funcs) != len(ksyms) || len(lens) != len(ksyms) || len(lines) != len(addrs) {
		return nil, fmt.Errorf("%d functions, %d symbols, %d lengths; %d line records, %d addresses: not one to one",
			len(funcs), len(ksyms), len(lens), len(lines), len(addrs))
	}
	sl := &sourceLines{funcs: map[string]*jitedFunc{}}
	byIndex := make([]*jitedFunc, len(funcs))
	for i, f := range funcs {
		byIndex[i] = &jitedFunc{start: uint64(ksyms[i]), size: uint64(lens[i])}
		sl.funcs[f.Func.Name] = byIndex[i]
	}
	k := 0 // the function whose instructions hold the record's (records come in order)
	for i, l := range lines {
		for k+1 < len(funcs) && funcs[k+1].Offset <= l.Offset {
			k++
		}
		f := byIndex[k]
		f.addrs = append(f.addrs, addrs[i])
		f.lines = append(f.lines, fmt.Sprintf("%s:%d: %s", filepath.Base(l.Line.FileName()), l.Line.LineNumber(),
			strings.Join(strings.Fields(l.Line.Line()), " ")))
	}
	for i, f := range byIndex {
		if !slices.IsSorted(f.addrs) {
			return nil, fmt.Errorf("function %s: line addresses out of order", funcs[i].Func.Name)
		}
	}
	return sl, nil
}

// line returns the source line of insn ("function+0xoffset"), or "" when
// it is not known.
func (sl *sourceLines) line(insn string) string {
	if sl == nil {
		return ""
	}
	name, hex, ok := strings.Cut(insn, "+0x")
	f := sl.funcs[name]
	off, err := strconv.ParseUint(hex, 16, 64)
	if !ok || f == nil || err != nil || off >= f.size {
		return ""
	}
	a := f.start + off
	// The last line record at or before a, if it lies in the function.
	i, found := slices.BinarySearch(f.addrs, a)
	if !found {
		i--
	}
	if i < 0 || f.addrs[i] < f.start {
		return ""
	}
	return f.lines[i]
}

// profile is what readProfile found: of total samples, inProg were taken
// inside the program, by function and by instruction (the innermost
// frame, "function+offset").
type profile struct {
	total, inProg int
	funcs, insns  map[string]int
}

// readProfile reads perf script's output (-F ip,sym,symoff with call
// graphs: a sample is its frames, innermost first, one per line, samples
// separated by blank lines) and counts the samples whose call graph holds
// a function named prog (a BPF program's symbol is
// bpf_prog_<tag>_<name>).
func readProfile(r io.Reader, prog string) (*profile, error) {
	p := &profile{funcs: map[string]int{}, insns: map[string]int{}}
	var frames []string
	flush := func() {
		if len(frames) == 0 {
			return
		}
		p.total++
		if slices.ContainsFunc(frames, func(f string) bool { return bpfProgName(f) == prog }) {
			p.inProg++
			leaf := shortSymbol(frames[0])
			p.insns[leaf]++
			fn, _, _ := strings.Cut(leaf, "+")
			p.funcs[fn]++
		}
		frames = frames[:0]
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 0:
			flush()
		case len(f) == 1:
			frames = append(frames, "[unknown]")
		default:
			frames = append(frames, f[1])
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading samples: %w", err)
	}
	return p, nil
}

// bpfProgName returns the name of a BPF program's symbol (function+offset
// or function), or "" when it is not one.
func bpfProgName(sym string) string {
	fn, _, _ := strings.Cut(sym, "+")
	rest, ok := strings.CutPrefix(fn, "bpf_prog_")
	if !ok {
		return ""
	}
	_, name, ok := strings.Cut(rest, "_") // the tag
	if !ok {
		return ""
	}
	return name
}

// shortSymbol drops a BPF program symbol's prefix and tag.
func shortSymbol(sym string) string {
	if name := bpfProgName(sym); name != "" {
		if _, off, ok := strings.Cut(sym, "+"); ok {
			return name + "+" + off
		}
		return name
	}
	return sym
}

// report prints the profile of case name, whose cost was costNS per
// packet, measured runs times while sampled; line names an instruction's
// source line ("" when unknown).
func (p *profile) report(name string, costNS float64, runs int, line func(string) string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n== where %q spends its time: %.0f ns a packet; %d measurements sampled, %d of %d samples inside dlb_xdp ==\n",
		name, costNS, runs, p.inProg, p.total)
	share := func(n int) float64 { return float64(n) / float64(p.inProg) }
	top := func(m map[string]int, n int) []string {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b string) int {
			if m[a] != m[b] {
				return m[b] - m[a]
			}
			return strings.Compare(a, b)
		})
		return keys[:min(n, len(keys))]
	}
	fmt.Fprintf(&b, "function (innermost frame)                share   ≈ ns a packet\n")
	for _, k := range top(p.funcs, 12) {
		fmt.Fprintf(&b, "  %-40s %5.1f %%  %6.1f\n", k, 100*share(p.funcs[k]), share(p.funcs[k])*costNS)
	}
	fmt.Fprintf(&b, "instructions holding the most samples\n")
	for _, k := range top(p.insns, 10) {
		fmt.Fprintf(&b, "  %-40s %5.1f %%  %6.1f", k, 100*share(p.insns[k]), share(p.insns[k])*costNS)
		if l := line(k); l != "" {
			fmt.Fprintf(&b, "  %s", l)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestReadProfile(t *testing.T) {
	const script = `
	ffffffffc0012345 bpf_prog_1fe6003595e700e3_dlb_natp_taken+0x1a4
	ffffffffc0010000 bpf_prog_58cb5cf793fe8e1f_dlb_nat_reserve+0x4e4
	ffffffffc0020000 bpf_prog_13dc6f5f77cccbe5_dlb_xdp+0x793
	ffffffffc0030000 bpf_prog_4e7cd6eeec589812_bench_wrapper+0x40
	ffffffff814f0606 __sys_bpf+0x636

	ffffffffc0012345 bpf_prog_1fe6003595e700e3_dlb_natp_taken+0x1a4
	ffffffffc0020000 bpf_prog_13dc6f5f77cccbe5_dlb_xdp+0x793

	ffffffffc0020001 bpf_prog_13dc6f5f77cccbe5_dlb_xdp+0x10

	ffffffff822424ea __pi_memcpy+0xa
	ffffffff814ed7b4 generic_map_update_batch+0x1b4
	            b7ae [unknown]

	ffffffffc0040000 bpf_prog_aaaaaaaaaaaaaaaa_dlb_natp_taken+0x1a4
	ffffffffc0050000 bpf_prog_bbbbbbbbbbbbbbbb_dlb_nat_ctl+0x7c
	            b7ae
`
	tests := []struct {
		prog          string
		total, inProg int
		funcs, insns  map[string]int
	}{
		{prog: "dlb_xdp", total: 5, inProg: 3,
			funcs: map[string]int{"dlb_natp_taken": 2, "dlb_xdp": 1},
			insns: map[string]int{"dlb_natp_taken+0x1a4": 2, "dlb_xdp+0x10": 1}},
		{prog: "dlb_nat_ctl", total: 5, inProg: 1,
			funcs: map[string]int{"dlb_natp_taken": 1}, insns: map[string]int{"dlb_natp_taken+0x1a4": 1}},
		{prog: "dlb_nat", total: 5, inProg: 0, funcs: map[string]int{}, insns: map[string]int{}},
	}
	for _, tc := range tests {
		t.Run(tc.prog, func(t *testing.T) {
			p, err := readProfile(strings.NewReader(script), tc.prog)
			if err != nil {
				t.Fatal(err)
			}
			if p.total != tc.total || p.inProg != tc.inProg {
				t.Errorf("%d samples, %d inside, want %d, %d", p.total, p.inProg, tc.total, tc.inProg)
			}
			if !maps.Equal(p.funcs, tc.funcs) || !maps.Equal(p.insns, tc.insns) {
				t.Errorf("functions %v, instructions %v, want %v, %v", p.funcs, p.insns, tc.funcs, tc.insns)
			}
		})
	}
}

func TestProfileReport(t *testing.T) {
	p := &profile{total: 10, inProg: 4, funcs: map[string]int{"dlb_natp_taken": 3, "dlb_xdp": 1},
		insns: map[string]int{"dlb_natp_taken+0x1a4": 3, "dlb_xdp+0x10": 1}}
	line := func(insn string) string {
		if insn == "dlb_natp_taken+0x1a4" {
			return "table.h:1: a line"
		}
		return ""
	}
	r := p.report("NAT SYN, new source", 400, 7, line)
	for _, want := range []string{"400 ns a packet", "7 measurements", "4 of 10 samples", "dlb_natp_taken                            75.0 %   300.0",
		"dlb_natp_taken+0x1a4                      75.0 %   300.0  table.h:1: a line\n",
		"dlb_xdp+0x10                              25.0 %   100.0"} {
		if !strings.Contains(r, want) {
			t.Errorf("report lacks %q:\n%s", want, r)
		}
	}
}

func TestSourceLine(t *testing.T) {
	sl := &sourceLines{funcs: map[string]*jitedFunc{
		"dlb_xdp": {start: 0x1000, size: 0x100, addrs: []uint64{0x1000, 0x1010, 0x1080},
			lines: []string{"a.c:1: x", "a.c:2: y", "a.c:3: z"}},
		// JITed below the main function: each function has memory of its own.
		"dlb_pick": {start: 0x800, size: 0x80, addrs: []uint64{0x800, 0x820}, lines: []string{"b.h:7: p", "b.h:8: q"}},
		"dlb_late": {start: 0x2000, size: 0x40, addrs: []uint64{0x2008}, lines: []string{"c.h:9: r"}},
	}}
	tests := []struct{ insn, want string }{
		{"dlb_xdp+0x0", "a.c:1: x"},
		{"dlb_xdp+0xf", "a.c:1: x"},
		{"dlb_xdp+0x10", "a.c:2: y"},
		{"dlb_xdp+0xff", "a.c:3: z"},
		{"dlb_xdp+0x100", ""}, // past the function
		{"dlb_pick+0x1f", "b.h:7: p"},
		{"dlb_pick+0x20", "b.h:8: q"},
		{"dlb_late+0x4", ""}, // before its first record
		{"dlb_late+0x8", "c.h:9: r"},
		{"dlb_other+0x10", ""},
		{"dlb_xdp", ""},
		{"dlb_xdp+0xzz", ""},
	}
	for _, tc := range tests {
		if got := sl.line(tc.insn); got != tc.want {
			t.Errorf("line(%q) = %q, want %q", tc.insn, got, tc.want)
		}
	}
	if got := (*sourceLines)(nil).line("dlb_xdp+0x10"); got != "" {
		t.Errorf("nil sourceLines gave %q", got)
	}
}
