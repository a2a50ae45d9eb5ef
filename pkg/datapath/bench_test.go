//go:build linux

package datapath

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/testutil"
)

// The benchmark report (make bench; see BENCHMARKS.md). It measures the
// executor with BPF_PROG_TEST_RUN through bench_wrapper (bpf/tests/bench.c),
// which rebuilds the frame before every run and tail-calls the program
// under test, and reports ns/packet as a ratio to a bare XDP_PASS program
// measured in the same run:
//
//	cost(X)  = T(wrapper→X) − T(wrapper→pass) + T(bare pass)
//	ratio(X) = cost(X) / T(bare pass)
//
// where every T is the median over benchRounds of the kernel's ns/run.
// Phase 1 measures every case, interleaved round by round, with new flows
// inserted into a table that has room; phase 2 measures new flows into a
// full table (every insert evicts), with its own baselines. Each case's
// path is checked first (verdict, output frame, counters, table growth),
// so that the report cannot silently measure the wrong path. The thread is
// pinned to one CPU: the kernel runs the program on the caller's CPU, so
// per-CPU state (the wrapper's run counter, LRU free lists) stays on one.
// Goals are printed as met or NOT MET, never failed: people judge them.
//
// Environment:
//
//	DLB_BENCH=1           run the report (it needs root)
//	DLB_BENCH_OBJECT=f.o  measure dlb_xdp from another build of
//	                      bpf/dispatcher.c (same maps), e.g. a variant
//	                      under test, instead of the committed object
//	DLB_BENCH_NOPIN=1     do not pin the test thread to one CPU

const (
	// benchFrameLen and benchFrame6Len are the lengths of the IPv4 and
	// IPv6 benchmark frames (at most BENCH_FRAME_MAX of bench.c).
	benchFrameLen  = 64
	benchFrame6Len = 88
	// benchRounds is the number of measured rounds (after one warm-up
	// round); every case is measured once per round, interleaved, so
	// that drift affects all of them alike.
	benchRounds = 11
)

// benchCase is one measured configuration.
type benchCase struct {
	name   string
	target *ebpf.Program // program in the wrapper's slot 0; nil: run bare pass directly
	frame  []byte
	vary   bool
	repeat int
	want   uint32 // XDP action every run must return
	// base names the wrapper-overhead case subtracted from this one.
	base string
	// goal is the target: cost at most goal × bare XDP_PASS (0: none).
	goal float64
	// relGoal, when set, makes the goal relGoal × the ratio of the case
	// named relTo (NAT: at most 1.5× its MAC counterpart).
	relGoal float64
	relTo   string
	// v6: the frame is IPv6 (vary offsets differ).
	v6 bool
	// prepare, when set, runs before every measurement (outside it).
	prepare func()
	ns      []float64
}

func TestBenchReport(t *testing.T) {
	if os.Getenv("DLB_BENCH") != "1" {
		t.Skip("benchmark report: set DLB_BENCH=1 (make bench) to run it")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the benchmark report needs root (BPF_PROG_TEST_RUN of XDP programs, network namespaces)")
	}
	started := time.Now()

	e := newBenchEnv(t)
	cpu := pinToOneCPU(t)

	var objs benchObjects
	if err := loadBenchObjects(&objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Fatalf("loading bench programs: %+v", ve)
		}
		t.Fatalf("loading bench programs: %v", err)
	}
	t.Cleanup(func() { objs.Close() })

	dispatcher := e.dp.objs.DlbXdp
	object := "pkg/datapath/dispatcher_bpfel.o (committed)"
	if path := os.Getenv("DLB_BENCH_OBJECT"); path != "" {
		dispatcher = loadVariant(t, path, e.pinDir)
		object = path
	}

	b := &benchRunner{t: t, objs: &objs}

	// 64-byte IPv4 frames (14 Ethernet + 20 IPv4 + 20 TCP + 10 payload)
	// and 88-byte IPv6 frames (14 + 40 IPv6 + 20 TCP + 14 payload).
	build := func(f testutil.Frame) []byte {
		want := benchFrameLen
		f.Payload = []byte("dlb-bench!")
		if f.Src.Is6() {
			want, f.Payload = benchFrame6Len, []byte("dlb-bench-ipv6")
		}
		fr := f.Build(t)
		if len(fr) != want {
			t.Fatalf("benchmark frame has %d bytes, want %d", len(fr), want)
		}
		return fr
	}
	tcp6 := func(dst netip.Addr, sport uint16, flags string) testutil.Frame {
		return testutil.Frame{Src: client6, Dst: dst, Proto: "tcp", SrcPort: sport, DstPort: 80, Flags: flags}
	}
	const estPort = 40000
	estFrame := build(tcpTo(vipTCP, 80, estPort, "A"))
	synFrame := build(tcpTo(vipTCP, 80, 1, "S"))
	ackFrame := build(tcpTo(vipTCP, 80, 1, "A"))
	otherFrame := build(tcpTo(otherAddr, 80, estPort, "A"))
	natEstFrame := build(tcpTo(vipNAT, 80, estPort, "A"))
	natSynFrame := build(tcpTo(vipNAT, 80, 1, "S"))
	est6Frame := build(tcp6(vip6, estPort, "A"))
	syn6Frame := build(tcp6(vip6, 1, "S"))
	pass6Frame := build(tcp6(other6, estPort, "A"))
	// The NAT benchmark connection, established through its handshake,
	// and the reply its server sends.
	natEst := key(vipNAT, 80, estPort, 6)
	for _, flags := range []string{"S", "A"} {
		if v, _ := e.run(t, build(tcpTo(vipNAT, 80, estPort, flags))); v != xdpTX {
			t.Fatalf("NAT benchmark handshake: %s verdict %d", flags, v)
		}
	}
	natFlow, _, ok := e.getNAT(t, natEst)
	if !ok {
		t.Fatal("NAT benchmark connection not established")
	}
	natReplyFrame := build(testutil.Frame{Src: natServer, Dst: retAddr, Proto: "tcp", SrcPort: 8080, DstPort: htons(natFlow.NatPort), Flags: "A"})

	// Phase 1: every case once per round, interleaved. A new connection
	// costs twice: its SYN (Maglev pick, remembered in the handshake cache;
	// no table entry by design) and the ACK that completes the handshake
	// (the table insert). "new flow: ACK inserts" measures the insert path
	// with ACKs of unknown flows (Maglev pick + insert). Inserts go into a
	// table with room (as when the sweeper keeps it below capacity): all of
	// phase 1 inserts fewer flows than the table holds.
	cases := []*benchCase{
		{name: "bare XDP_PASS", frame: estFrame, repeat: 1_000_000, want: xdpPass},
		{name: "wrapper→pass", target: objs.BenchPass, frame: estFrame, repeat: 1_000_000, want: xdpPass},
		{name: "wrapper(vary)→pass", target: objs.BenchPass, frame: synFrame, vary: true, repeat: 1_000_000, want: xdpPass},
		{name: "established flow", target: dispatcher, frame: estFrame, repeat: 1_000_000, want: xdpTX,
			base: "wrapper→pass", goal: 3.5},
		{name: "new flow: SYN", target: dispatcher, frame: synFrame, vary: true, repeat: 1_000_000, want: xdpTX,
			base: "wrapper(vary)→pass", goal: 6},
		{name: "new flow: ACK inserts", target: dispatcher, frame: ackFrame, vary: true, repeat: 16_000, want: xdpTX,
			base: "wrapper(vary)→pass", goal: 6},
		{name: "non-VIP pass", target: dispatcher, frame: otherFrame, repeat: 1_000_000, want: xdpPass,
			base: "wrapper→pass", goal: 1.5},
		{name: "NAT established flow", target: dispatcher, frame: natEstFrame, repeat: 1_000_000, want: xdpTX,
			base: "wrapper→pass", relGoal: 1.5, relTo: "established flow"},
		{name: "NAT established reply", target: dispatcher, frame: natReplyFrame, repeat: 1_000_000, want: xdpTX,
			base: "wrapper→pass", relGoal: 1.5, relTo: "established flow"},
		{name: "NAT new flow: SYN", target: dispatcher, frame: natSynFrame, vary: true, repeat: 8_000, want: xdpTX,
			base: "wrapper(vary)→pass", relGoal: 1.5, relTo: "new flow: SYN", prepare: func() { clearHalfOpen(t, e) }},
		{name: "NAT SYN, half-open full", target: dispatcher, frame: natSynFrame, vary: true, repeat: 1_000_000, want: xdpTX,
			base: "wrapper(vary)→pass", relGoal: 1.5, relTo: "new flow: SYN"},
		{name: "wrapper→pass (IPv6)", target: objs.BenchPass, frame: est6Frame, repeat: 1_000_000, want: xdpPass, v6: true},
		{name: "wrapper(vary)→pass (IPv6)", target: objs.BenchPass, frame: syn6Frame, vary: true, repeat: 1_000_000, want: xdpPass, v6: true},
		{name: "IPv6 established flow", target: dispatcher, frame: est6Frame, repeat: 1_000_000, want: xdpTX, v6: true,
			base: "wrapper→pass (IPv6)", goal: 3.5},
		{name: "IPv6 new flow: SYN", target: dispatcher, frame: syn6Frame, vary: true, repeat: 1_000_000, want: xdpTX, v6: true,
			base: "wrapper(vary)→pass (IPv6)", goal: 6},
		{name: "IPv6 non-VIP pass", target: dispatcher, frame: pass6Frame, repeat: 1_000_000, want: xdpPass, v6: true,
			base: "wrapper→pass (IPv6)", goal: 1.5},
	}
	// Phase 2: a full table, where every insert makes the LRU evict
	// (overload), and a SYN flood, which inserts nothing and so evicts
	// nothing, with their own baselines.
	full := []*benchCase{
		{name: "bare XDP_PASS", frame: estFrame, repeat: 1_000_000, want: xdpPass},
		{name: "wrapper(vary)→pass", target: objs.BenchPass, frame: synFrame, vary: true, repeat: 1_000_000, want: xdpPass},
		{name: "ACK inserts, full table", target: dispatcher, frame: ackFrame, vary: true, repeat: 200_000, want: xdpTX,
			base: "wrapper(vary)→pass", goal: 6},
		{name: "SYN, full table", target: dispatcher, frame: synFrame, vary: true, repeat: 1_000_000, want: xdpTX,
			base: "wrapper(vary)→pass", goal: 6},
	}
	byName := map[string]*benchCase{}
	for _, c := range cases {
		byName[c.name] = c
	}
	newRoom, newFull := byName["new flow: ACK inserts"], full[2]
	// With BPF_F_NO_COMMON_LRU every CPU has its own LRU lists and evicts
	// once it holds capacity/CPUs entries; all runs here are on one CPU.
	capacity := int(e.dp.Info().ConnTable)
	room := capacity
	if e.dp.objs.Conns.Flags()&unix.BPF_F_NO_COMMON_LRU != 0 {
		ncpu, err := ebpf.PossibleCPU()
		if err != nil {
			t.Fatal(err)
		}
		room /= ncpu
	}
	newRoom.repeat = min(newRoom.repeat, (room*3/4-1-sanityRuns)/(benchRounds+1))

	// Sanity checks: every case takes the path it is named after.
	b.checkPass(byName["bare XDP_PASS"], byName["wrapper→pass"], byName["wrapper(vary)→pass"])
	b.checkEstablished(e, byName["established flow"], key(vipTCP, 80, estPort, 6))
	b.checkSYN(e, byName["new flow: SYN"])
	b.checkNew(e, newRoom)
	b.checkNotVIP(e, byName["non-VIP pass"])
	b.checkPass(byName["bare XDP_PASS"], byName["wrapper→pass (IPv6)"], byName["wrapper(vary)→pass (IPv6)"])
	b.checkNotVIP(e, byName["IPv6 non-VIP pass"])
	b.checkNAT(e, byName["NAT established flow"], byName["NAT established reply"], byName["NAT new flow: SYN"], htons(natFlow.NatPort))
	clearHalfOpen(t, e)
	b.checkIPv6(e, byName["IPv6 established flow"], byName["IPv6 new flow: SYN"],
		FlowKey{Src: client6, Dst: vip6, SrcPort: estPort, DstPort: 80, Proto: 6})

	// One warm-up round, then the measured rounds.
	rounds := func(cases []*benchCase) {
		for round := -1; round < benchRounds; round++ {
			for _, c := range cases {
				ns := b.measure(c)
				if round >= 0 {
					c.ns = append(c.ns, ns)
				}
			}
		}
	}
	entries := countConns(t, e)
	newBefore := e.stats(t).Services[1].NewConns
	rounds(cases)
	// Every new-flow run scheduled a connection and added an entry: the
	// table had room throughout.
	runs := uint64((benchRounds + 1) * newRoom.repeat)
	if got := e.stats(t).Services[1].NewConns - newBefore; got < runs || float64(got) > 1.1*float64(runs) {
		t.Errorf("new flow: %d connections scheduled during %d runs", got, runs)
	}
	roomEntries := countConns(t, e)
	if got := roomEntries - entries; got < int(runs) || float64(got) > 1.1*float64(runs) {
		t.Errorf("new flow: the connection table grew by %d entries during %d runs", got, runs)
	}

	// Fill the table, then phase 2.
	b.run(newFull, uint32(capacity))
	newBefore = e.stats(t).Services[1].NewConns
	rounds(full)
	runs = uint64((benchRounds + 1) * newFull.repeat)
	if got := e.stats(t).Services[1].NewConns - newBefore; got < runs || float64(got) > 1.1*float64(runs) {
		t.Errorf("new flow, full table: %d connections scheduled during %d runs", got, runs)
	}
	fullEntries := countConns(t, e)
	if fullEntries < room*9/10 {
		t.Errorf("new flow, full table: only %d of %d entries in use", fullEntries, capacity)
	}
	if key := key(vipTCP, 80, estPort, 6); true {
		if _, ok := e.getConn(t, key); !ok {
			t.Log("note: the established benchmark flow was evicted by phase 2's inserts (expected when the table is full)")
		}
	}

	bare := median(byName["bare XDP_PASS"].ns)
	var out strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&out, format, args...) }
	w("\n== dlb executor benchmark (BPF_PROG_TEST_RUN, 64-byte IPv4 and 88-byte IPv6 frames) ==\n")
	w("date      %s\n", started.UTC().Format("2006-01-02 15:04 MST"))
	w("program   %s\n", object)
	w("machine   %s, %d CPUs, %s\n", kernelRelease(), runtime.NumCPU(), cpuModel())
	if cpu >= 0 {
		w("pinned    test thread pinned to CPU %d\n", cpu)
	} else {
		w("pinned    no\n")
	}
	w("method    %d measured rounds (+1 warm-up) per case, medians of the kernel's ns/run\n", benchRounds)
	w("conns     capacity %d; %d entries after phase 1 (new flows had room), %d after phase 2 (full)\n\n",
		capacity, roomEntries, fullEntries)

	w("%-24s %10s %8s %7s  %s\n", "case", "ns/packet", "× bare", "goal", "met")
	w("%-24s %10.1f %8.2f\n", "bare XDP_PASS", bare, 1.0)
	ratioOf := func(c *benchCase, byName map[string]*benchCase, bare float64) float64 {
		return (median(c.ns) - median(byName[c.base].ns) + bare) / bare
	}
	row := func(c *benchCase, byName map[string]*benchCase, bare float64) {
		cost := median(c.ns) - median(byName[c.base].ns) + bare
		ratio := cost / bare
		goal, goalText := c.goal, fmt.Sprintf("≤%g×", c.goal)
		if c.relGoal != 0 {
			goal = c.relGoal * ratioOf(byName[c.relTo], byName, bare)
			goalText = fmt.Sprintf("≤%.2f×", goal)
		}
		met := "yes"
		if ratio > goal {
			met = "NOT MET"
		}
		w("%-24s %10.1f %8.2f %7s  %s\n", c.name, cost, ratio, goalText, met)
	}
	for _, c := range cases {
		if c.goal != 0 || c.relGoal != 0 {
			row(c, byName, bare)
		}
	}
	fullByName := map[string]*benchCase{}
	for _, c := range full {
		fullByName[c.name] = c
	}
	row(newFull, fullByName, median(full[0].ns))
	row(full[3], fullByName, median(full[0].ns))
	w("\nNAT established / MAC established: %.2f (goal ≤ 1.5); NAT reply / MAC established: %.2f\n",
		ratioOf(byName["NAT established flow"], byName, bare)/ratioOf(byName["established flow"], byName, bare),
		ratioOf(byName["NAT established reply"], byName, bare)/ratioOf(byName["established flow"], byName, bare))
	w("NAT SYN / MAC SYN: %.2f with room in the half-open table, %.2f with it full (goal ≤ 1.5)\n",
		ratioOf(byName["NAT new flow: SYN"], byName, bare)/ratioOf(byName["new flow: SYN"], byName, bare),
		ratioOf(byName["NAT SYN, half-open full"], byName, bare)/ratioOf(byName["new flow: SYN"], byName, bare))

	w("\nraw kernel ns/run: median (min–max) over the rounds, runs per round\n")
	raw := func(phase string, cs []*benchCase) {
		for _, c := range cs {
			w("  %-8s %-42s %6.1f  (%.0f–%.0f)  ×%d\n", phase, rawName(c), median(c.ns), slices.Min(c.ns), slices.Max(c.ns), c.repeat)
		}
	}
	raw("phase 1", cases)
	raw("phase 2", full)
	w("\ncost(X) = T(wrapper→X) − T(wrapper→pass) + T(bare XDP_PASS), medians of one phase;\n")
	w("new flows subtract wrapper(vary)→pass. Ratios are what matter: absolute times drift.\n")
	w("elapsed %.1fs\n", time.Since(started).Seconds())
	fmt.Print(out.String())
}

func rawName(c *benchCase) string {
	if c.base == "" {
		return c.name
	}
	if c.v6 && c.vary {
		return "wrapper(vary)→" + c.name
	}
	if c.vary {
		return "wrapper(vary)→" + c.name
	}
	return "wrapper→" + c.name
}

// newBenchEnv is newTestEnv with the default connection-table size
// (262144), so that lookups and inserts see a table of realistic size.
// It does not go through testutil.RequirePrivileged: the report is opt-in
// (DLB_BENCH=1) and not a TestPrivileged test.
func newBenchEnv(t *testing.T) *testEnv {
	t.Helper()
	return openTestEnv(t, Options{})
}

// pinToOneCPU pins the test's OS thread (already locked by InNewNetNS) to
// the highest-numbered CPU it may use, so that every run, and the per-CPU
// state it touches, stays on one CPU. It returns the CPU, or -1.
func pinToOneCPU(t *testing.T) int {
	t.Helper()
	if os.Getenv("DLB_BENCH_NOPIN") == "1" {
		return -1
	}
	runtime.LockOSThread() // balanced below; InNewNetNS holds its own lock
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		t.Fatalf("reading CPU affinity: %v", err)
	}
	cpu := -1
	for i := 0; i < 1024; i++ {
		if orig.IsSet(i) {
			cpu = i
		}
	}
	var one unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatalf("pinning to CPU %d: %v", cpu, err)
	}
	t.Cleanup(func() {
		_ = unix.SchedSetaffinity(0, &orig)
		runtime.UnlockOSThread()
	})
	return cpu
}

// loadVariant loads dlb_xdp from another build of bpf/dispatcher.c, on the
// maps the environment pinned.
func loadVariant(t *testing.T, path, pinDir string) *ebpf.Program {
	t.Helper()
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		t.Fatalf("DLB_BENCH_OBJECT: %v", err)
	}
	var objs struct {
		Prog *ebpf.Program `ebpf:"dlb_xdp"`
	}
	err = spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: pinDir}})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Fatalf("DLB_BENCH_OBJECT: %+v", ve)
		}
		t.Fatalf("DLB_BENCH_OBJECT: %v", err)
	}
	t.Cleanup(func() { objs.Prog.Close() })
	return objs.Prog
}

type benchRunner struct {
	t    *testing.T
	objs *benchObjects
}

// setup points the wrapper at c's program and frame.
func (b *benchRunner) setup(c *benchCase) {
	b.t.Helper()
	if c.target == nil {
		return
	}
	if err := b.objs.BenchProgs.Update(uint32(0), c.target, ebpf.UpdateAny); err != nil {
		b.t.Fatalf("%s: setting the wrapper's target: %v", c.name, err)
	}
	bf := benchBenchFrame{Len: uint32(len(c.frame))}
	if c.vary {
		// The source address's last two bytes and the source port.
		bf.Vary, bf.AddrOff, bf.PortOff = 1, 14+12+2, 14+20
		if c.v6 {
			bf.AddrOff, bf.PortOff = 14+8+14, 14+40
		}
	}
	copy(bf.Data[:], c.frame)
	if err := b.objs.BenchFrame.Update(uint32(0), &bf, ebpf.UpdateAny); err != nil {
		b.t.Fatalf("%s: writing the wrapper's frame: %v", c.name, err)
	}
}

func (b *benchRunner) prog(c *benchCase) *ebpf.Program {
	if c.target == nil {
		return b.objs.BenchPass
	}
	return b.objs.BenchWrapper
}

// measure runs c once with its repeat count and returns the kernel's ns/run.
func (b *benchRunner) measure(c *benchCase) float64 {
	b.t.Helper()
	b.setup(c)
	if c.prepare != nil {
		c.prepare()
	}
	ret, d, err := b.prog(c).Benchmark(c.frame, c.repeat, nil)
	if err != nil {
		b.t.Fatalf("%s: %v", c.name, err)
	}
	if ret != c.want {
		b.t.Fatalf("%s: program returned %d, want %d: the benchmark would measure the wrong path", c.name, ret, c.want)
	}
	return float64(d.Nanoseconds())
}

// run runs c n times and returns the verdict and the final frame.
func (b *benchRunner) run(c *benchCase, n uint32) (uint32, []byte) {
	b.t.Helper()
	b.setup(c)
	out := make([]byte, len(c.frame)+256)
	opts := &ebpf.RunOptions{Data: c.frame, DataOut: out, Repeat: n}
	ret, err := b.prog(c).Run(opts)
	if err != nil {
		b.t.Fatalf("%s: %v", c.name, err)
	}
	return ret, opts.DataOut
}

const sanityRuns = 1000

func (b *benchRunner) checkPass(bare, wrapped, varied *benchCase) {
	t := b.t
	t.Helper()
	for _, c := range []*benchCase{bare, wrapped, varied} {
		ret, out := b.run(c, sanityRuns)
		if ret != xdpPass {
			t.Fatalf("%s: returned %d, want XDP_PASS (tail call failed?)", c.name, ret)
		}
		if c.vary {
			// Only the varied bytes may differ.
			a, p := 28, 34
			if c.v6 {
				a, p = 36, 54
			}
			if out[a] == c.frame[a] && out[a+1] == c.frame[a+1] && out[p] == c.frame[p] && out[p+1] == c.frame[p+1] {
				t.Fatalf("%s: the source address and port were not varied", c.name)
			}
			for _, i := range []int{a, a + 1, p, p + 1} {
				out[i] = c.frame[i]
			}
		}
		if !bytes.Equal(out, c.frame) {
			t.Fatalf("%s: frame changed:\n got %x\nwant %x", c.name, out, c.frame)
		}
	}
}

func (b *benchRunner) checkEstablished(e *testEnv, c *benchCase, k FlowKey) {
	t := b.t
	t.Helper()
	// The first run creates the flow's entry.
	if ret, _ := b.run(c, 1); ret != xdpTX {
		t.Fatalf("%s: first packet returned %d, want XDP_TX", c.name, ret)
	}
	f, ok := e.getConn(t, k)
	if !ok || f.Backend != 10 {
		t.Fatalf("%s: connection-table entry %+v (present %v), want one to backend 10", c.name, f, ok)
	}
	before := e.stats(t).Services[1]
	ret, out := b.run(c, sanityRuns)
	after := e.stats(t).Services[1]
	if ret != xdpTX {
		t.Fatalf("%s: returned %d, want XDP_TX", c.name, ret)
	}
	if !bytes.Equal(out[0:6], mac(0x21)) || !bytes.Equal(out[6:12], ifaceMAC) || !bytes.Equal(out[12:], c.frame[12:]) {
		t.Fatalf("%s: output frame %x, want MACs rewritten towards backend 10 only", c.name, out)
	}
	if d := after.Packets - before.Packets; d != sanityRuns {
		t.Fatalf("%s: service counted %d packets in %d runs", c.name, d, sanityRuns)
	}
	if d := after.NewConns - before.NewConns; d != 0 {
		t.Fatalf("%s: %d new connections in %d runs of an established flow", c.name, d, sanityRuns)
	}
}

func (b *benchRunner) checkNew(e *testEnv, c *benchCase) {
	t := b.t
	t.Helper()
	entries := countConns(t, e)
	before := e.stats(t).Services[1]
	ret, out := b.run(c, sanityRuns)
	after := e.stats(t).Services[1]
	if ret != xdpTX {
		t.Fatalf("%s: returned %d, want XDP_TX", c.name, ret)
	}
	if !bytes.Equal(out[0:6], mac(0x21)) {
		t.Fatalf("%s: output frame %x, want it forwarded to backend 10", c.name, out)
	}
	if d := after.NewConns - before.NewConns; d != sanityRuns {
		t.Fatalf("%s: %d new connections in %d runs, want one per run", c.name, d, sanityRuns)
	}
	if d := countConns(t, e) - entries; d != sanityRuns {
		t.Fatalf("%s: the connection table grew by %d entries in %d runs, want one per run", c.name, d, sanityRuns)
	}
}

// checkSYN checks that a SYN of a new flow is forwarded and remembered in
// the handshake cache, and creates no table entry and no new connection.
func (b *benchRunner) checkSYN(e *testEnv, c *benchCase) {
	t := b.t
	t.Helper()
	entries := countConns(t, e)
	before := e.stats(t).Services[1]
	ret, out := b.run(c, sanityRuns)
	after := e.stats(t).Services[1]
	if ret != xdpTX || !bytes.Equal(out[0:6], mac(0x21)) {
		t.Fatalf("%s: returned %d to %x, want XDP_TX to backend 10", c.name, ret, out[0:6])
	}
	if d := after.Packets - before.Packets; d != sanityRuns {
		t.Fatalf("%s: service counted %d packets in %d runs", c.name, d, sanityRuns)
	}
	if d := after.NewConns - before.NewConns; d != 0 {
		t.Fatalf("%s: %d new connections counted for bare SYNs", c.name, d)
	}
	if d := countConns(t, e) - entries; d != 0 {
		t.Fatalf("%s: bare SYNs added %d table entries", c.name, d)
	}
	var hs dispatcherHandshake
	remembered := 0
	for slot := uint32(0); slot < 16384; slot++ {
		if err := e.dp.objs.Handshakes.Lookup(slot, &hs); err == nil && hs.Backend == 10 {
			remembered++
		}
	}
	if remembered < sanityRuns/2 {
		t.Fatalf("%s: only %d handshake-cache slots hold a SYN after %d SYNs", c.name, remembered, sanityRuns)
	}
}

func (b *benchRunner) checkNotVIP(e *testEnv, c *benchCase) {
	t := b.t
	t.Helper()
	reason := func() uint64 {
		for _, r := range e.stats(t).Reasons {
			if r.Reason == "pass_not_vip" {
				return r.Packets
			}
		}
		t.Fatal("no pass_not_vip counter")
		return 0
	}
	before := reason()
	ret, out := b.run(c, sanityRuns)
	if ret != xdpPass {
		t.Fatalf("%s: returned %d, want XDP_PASS", c.name, ret)
	}
	if !bytes.Equal(out, c.frame) {
		t.Fatalf("%s: frame changed:\n got %x\nwant %x", c.name, out, c.frame)
	}
	if d := reason() - before; d != sanityRuns {
		t.Fatalf("%s: %d packets counted as pass_not_vip in %d runs", c.name, d, sanityRuns)
	}
}

// checkNAT checks that the NAT cases take their paths: the established
// flow's packets leave translated towards the router and its replies
// towards the client gateway, with no new connection; every varied SYN
// creates a half-open connection.
func (b *benchRunner) checkNAT(e *testEnv, est, reply, syn *benchCase, port uint16) {
	t := b.t
	t.Helper()
	before := e.stats(t)
	ret, out := b.run(est, sanityRuns)
	if ret != xdpTX || !bytes.Equal(out[0:6], routerMAC) || !bytes.Equal(out[26:30], retAddr.AsSlice()) ||
		!bytes.Equal(out[30:34], natServer.AsSlice()) || out[34] != byte(port>>8) || out[35] != byte(port) {
		t.Fatalf("%s: returned %d with %x, want XDP_TX translated to %s:%d -> %s", est.name, ret, out, retAddr, port, natServer)
	}
	ret, out = b.run(reply, sanityRuns)
	if ret != xdpTX || !bytes.Equal(out[0:6], gwMAC) || !bytes.Equal(out[26:30], vipNAT.AsSlice()) || !bytes.Equal(out[30:34], clientAddr.AsSlice()) {
		t.Fatalf("%s: returned %d with %x, want XDP_TX translated to %s -> %s", reply.name, ret, out, vipNAT, clientAddr)
	}
	after := e.stats(t)
	if d := after.Services[6].NewConns - before.Services[6].NewConns; d != 0 {
		t.Fatalf("NAT established: %d new connections", d)
	}
	ret, out = b.run(syn, sanityRuns)
	created := e.stats(t).Events["halfopen_created"] - after.Events["halfopen_created"]
	if ret != xdpTX || !bytes.Equal(out[0:6], routerMAC) || !bytes.Equal(out[26:30], retAddr.AsSlice()) || created != sanityRuns {
		t.Fatalf("%s: returned %d with %x and %d half-open connections in %d runs", syn.name, ret, out, created, sanityRuns)
	}
}

// checkIPv6 checks the IPv6 cases: the established flow hits its entry,
// SYNs are forwarded without one.
func (b *benchRunner) checkIPv6(e *testEnv, est, syn *benchCase, k FlowKey) {
	t := b.t
	t.Helper()
	if ret, _ := b.run(est, 1); ret != xdpTX {
		t.Fatalf("%s: first packet returned %d", est.name, ret)
	}
	if f, ok := e.getConn(t, k); !ok || f.Backend != 70 {
		t.Fatalf("%s: entry %+v (present %v), want backend 70", est.name, f, ok)
	}
	before := e.stats(t).Services[10]
	ret, out := b.run(est, sanityRuns)
	if ret != xdpTX || !bytes.Equal(out[0:6], e.backend[70].MAC) || !bytes.Equal(out[12:], est.frame[12:]) {
		t.Fatalf("%s: returned %d with %x", est.name, ret, out)
	}
	entries := countConns(t, e)
	ret, out = b.run(syn, sanityRuns)
	after := e.stats(t).Services[10]
	if ret != xdpTX || !bytes.Equal(out[0:6], e.backend[70].MAC) || countConns(t, e) != entries {
		t.Fatalf("%s: returned %d to %x, or inserted entries", syn.name, ret, out[0:6])
	}
	if d := after.Packets - before.Packets; d != 2*sanityRuns {
		t.Fatalf("IPv6: service counted %d packets in %d runs", d, 2*sanityRuns)
	}
}

// clearHalfOpen frees every NAT half-open slot, so that the next SYNs
// find room (the NAT SYN case with room).
func clearHalfOpen(t *testing.T, e *testEnv) {
	t.Helper()
	slots := make([]uint32, e.dp.objs.NatHalfopen.MaxEntries())
	for i := range slots {
		slots[i] = uint32(i)
	}
	if _, err := e.dp.objs.NatHalfopen.BatchUpdate(slots, make([]dispatcherHalfopen, len(slots)), nil); err != nil {
		t.Fatal(err)
	}
}

func countConns(t *testing.T, e *testEnv) int {
	t.Helper()
	keys := make([]dispatcherFlowKey, 4096)
	vals := make([]dispatcherFlow, 4096)
	var cur ebpf.MapBatchCursor
	total := 0
	for {
		n, err := e.dp.objs.Conns.BatchLookup(&cur, keys, vals, nil)
		total += n
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return total
		}
		if err != nil {
			t.Fatalf("counting connections: %v", err)
		}
	}
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "?"
	}
	return "Linux " + unix.ByteSliceToString(u.Release[:])
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if name, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
		}
	}
	return "?"
}
