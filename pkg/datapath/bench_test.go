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

	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// The benchmark report (make bench; see BENCHMARKS.md). It measures the
// executor with BPF_PROG_TEST_RUN through bench_wrapper (bpf/tests/bench.c),
// which rebuilds the frame before every run and tail-calls the program
// under test:
//
//	cost(X) = T(wrapper→X) − T(wrapper→pass) + T(bare pass)
//
// where every T is the median over benchRounds of ns/run (the kernel's
// figure refined below a nanosecond: measure), and
// the wrapper→pass case subtracted varies the frame as X's does. Goals are
// ratios of two costs measured in the same run: to dlb's own established
// flow, and for the established flow to a reference program doing the
// least a MAC-forwarding balancer must do (bench_ref). The ratio to a bare
// XDP_PASS is printed for information only: it measures the machine more
// than dlb (a bare XDP_PASS costs 10 ns on one machine, 26 on another).
//
// Phase 1 measures every case, interleaved round by round, with the
// connection table half full (prefilled to half its capacity, and put back
// to that before every measurement that inserts). A new connection is a
// SYN from a new source and the ACK that completes its handshake, sent
// benchLag connections later (bench.c's BENCH_CONNECTION). Phase 2
// measures SYNs and inserts into a full table. Phase 3 measures
// throughput on a real interface path: live frames (BPF_F_TEST_XDP_LIVE_FRAMES)
// sent out of one end of a veth pair with native XDP on both ends. Each
// case's path is checked first (verdict, output frame, counters, table
// growth), so that the report cannot silently measure the wrong path. The
// thread is pinned to one CPU: the kernel runs the program on the caller's
// CPU, so per-CPU state stays on one. Goals are printed as met or NOT MET,
// never failed: people judge them.
//
// Environment:
//
//	DLB_BENCH=1           run the report (it needs root)
//	DLB_BENCH_OBJECT=f.o  measure dlb_xdp from another build of
//	                      bpf/dispatcher.c (same maps), e.g. a variant
//	                      under test, instead of the committed object
//	DLB_BENCH_NOPIN=1     do not pin the test thread to one CPU
//	DLB_BENCH_NOLIVE=1    skip phase 3 (live frames)
//	DLB_BENCH_TRACE=nothing  measure with a packet trace running whose
//	                      filter matches none of the packets

const (
	// benchFrameLen and benchFrame6Len are the lengths of the IPv4 and
	// IPv6 benchmark frames (at most BENCH_FRAME_MAX of bench.c).
	benchFrameLen  = 64
	benchFrame6Len = 88
	// benchRounds is the number of measured rounds (after one warm-up
	// round); every case is measured once per round, interleaved, so
	// that drift affects all of them alike.
	benchRounds = 11
	// benchLag is how many connections' packets come between a new
	// connection's SYN and its ACK.
	benchLag = 256
	// benchConns is how many new connections one measurement of a
	// new-connection case makes.
	benchConns = 8000
)

// Offsets in the IPv4 and IPv6 benchmark frames.
const (
	benchAddrOff   = 14 + 12 + 2 // the source address's last two bytes
	benchPortOff   = 14 + 20     // the source port
	benchFlagsOff  = 14 + 20 + 13
	benchAddrOff6  = 14 + 8 + 14
	benchPortOff6  = 14 + 40
	benchFlagsOff6 = 14 + 40 + 13
)

// benchCase is one measured configuration.
type benchCase struct {
	name   string
	target *ebpf.Program // program in the wrapper's slot 0; nil: run bare pass directly
	frame  []byte
	vary   benchBenchVary
	repeat int
	want   uint32 // XDP action every run must return
	anyRet bool   // a variant cut short for scale: any action goes
	// base names the wrapper-overhead case subtracted from this one.
	base string
	// v6: the frame is IPv6 (vary offsets differ).
	v6 bool
	// prepare, when set, runs before every measurement (outside it).
	prepare func()
	// verify, when set, runs after every measurement (outside it) and
	// fails the test when the measurement took another path.
	verify func()
	ns     []float64
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

	objs := openBenchObjects(t)

	dispatcher := e.dp.objs.DlbXdp
	object := "pkg/datapath/dispatcher_bpfel.o (committed)"
	if path := os.Getenv("DLB_BENCH_OBJECT"); path != "" {
		dispatcher = loadVariant(t, path, e.pinDir)
		object = path
	}
	if os.Getenv("DLB_BENCH_TRACE") == "nothing" {
		// A packet trace runs during the measurements, with a filter
		// that matches none of their packets: the cost every packet
		// pays while an operator traces other traffic.
		if os.Getenv("DLB_BENCH_OBJECT") != "" {
			t.Fatal("DLB_BENCH_TRACE traces the committed object only")
		}
		tr, err := e.dp.StartTrace(lb.TraceFilter{Cluster: netip.MustParseAddr("198.18.9.9")})
		if err != nil {
			t.Fatalf("starting the trace: %v", err)
		}
		t.Cleanup(func() { _, _ = tr.Stop() })
		object += ", a trace running that matches nothing (DLB_BENCH_TRACE=nothing)"
	}

	b := &benchRunner{t: t, objs: objs}

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
	estKey := key(vipTCP, 80, estPort, 6)
	est6Key := FlowKey{Src: client6, Dst: vip6, SrcPort: estPort, DstPort: 80, Proto: 6}
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

	// The reference program's table: the established flow, to backend
	// 10's MAC, among as many other flows as the connection table holds.
	capacity := int(e.dp.Info().ConnTable)
	half := capacity / 2
	fillRefFlows(t, objs, estKey, half)
	// Phase 1 runs with the connection table half full.
	fillConns(t, e, half)
	keep := []FlowKey{estKey, est6Key}
	reset := func() { resetConns(t, e, half, keep...) }
	cycleTables(t, e, b, dispatcher, ackFrame, natSynFrame, reset, func() { resetNAT(t, e, natEst) })

	// Phase 1: every case once per round, interleaved.
	cases := []*benchCase{
		{name: "bare XDP_PASS", frame: estFrame, repeat: benchFineRuns, want: xdpPass},
		{name: "wrapper→pass", target: objs.BenchPass, frame: estFrame, repeat: benchFineRuns, want: xdpPass},
		{name: "wrapper(vary)→pass", target: objs.BenchPass, frame: synFrame, vary: benchNewFlow, repeat: benchFineRuns, want: xdpPass},
		{name: "wrapper(conn)→pass", target: objs.BenchPass, frame: synFrame, vary: benchConnection, repeat: benchFineRuns, want: xdpPass},
		{name: "reference program", target: objs.BenchRef, frame: estFrame, repeat: benchFineRuns, want: xdpTX, base: "wrapper→pass"},
		{name: "established flow", target: dispatcher, frame: estFrame, repeat: benchFineRuns, want: xdpTX, base: "wrapper→pass"},
		{name: "new connection", target: dispatcher, frame: synFrame, vary: benchConnection, repeat: 2 * benchConns, want: xdpTX,
			base: "wrapper(conn)→pass", prepare: reset},
		{name: "SYN, new source", target: dispatcher, frame: synFrame, vary: benchNewFlow, repeat: benchFineRuns, want: xdpTX,
			base: "wrapper(vary)→pass"},
		{name: "ACK of an unknown flow", target: dispatcher, frame: ackFrame, vary: benchNewFlow, repeat: benchConns, want: xdpTX,
			base: "wrapper(vary)→pass", prepare: reset},
		{name: "non-VIP pass", target: dispatcher, frame: otherFrame, repeat: benchFineRuns, want: xdpPass, base: "wrapper→pass"},
		{name: "NAT established flow", target: dispatcher, frame: natEstFrame, repeat: benchFineRuns, want: xdpTX, base: "wrapper→pass"},
		{name: "NAT established reply", target: dispatcher, frame: natReplyFrame, repeat: benchFineRuns, want: xdpTX, base: "wrapper→pass"},
		natConnCase(t, e, dispatcher, natSynFrame, func() { resetNAT(t, e, natEst) }),
		{name: "NAT SYN, new source", target: dispatcher, frame: natSynFrame, vary: benchNewFlow, repeat: benchConns, want: xdpTX,
			base: "wrapper(vary)→pass", prepare: func() { clearHalfOpen(t, e) }},
		{name: "NAT SYN, half-open full", target: dispatcher, frame: natSynFrame, vary: benchNewFlow, repeat: 1_000_000, want: xdpTX,
			base: "wrapper(vary)→pass"},
		{name: "wrapper→pass (IPv6)", target: objs.BenchPass, frame: est6Frame, repeat: benchFineRuns, want: xdpPass, v6: true},
		{name: "wrapper(vary)→pass (IPv6)", target: objs.BenchPass, frame: syn6Frame, vary: benchNewFlow, repeat: benchFineRuns, want: xdpPass, v6: true},
		{name: "IPv6 established flow", target: dispatcher, frame: est6Frame, repeat: benchFineRuns, want: xdpTX, v6: true,
			base: "wrapper→pass (IPv6)"},
		{name: "IPv6 SYN, new source", target: dispatcher, frame: syn6Frame, vary: benchNewFlow, repeat: benchFineRuns, want: xdpTX, v6: true,
			base: "wrapper(vary)→pass (IPv6)"},
		{name: "IPv6 non-VIP pass", target: dispatcher, frame: pass6Frame, repeat: benchFineRuns, want: xdpPass, v6: true,
			base: "wrapper→pass (IPv6)"},
	}
	// Phase 2: a full table. SYNs (a flood) insert nothing and so evict
	// nothing; ACKs of unknown flows and new connections insert, and
	// every insert evicts (overload).
	full := []*benchCase{
		{name: "bare XDP_PASS", frame: estFrame, repeat: benchFineRuns, want: xdpPass},
		{name: "wrapper(vary)→pass", target: objs.BenchPass, frame: synFrame, vary: benchNewFlow, repeat: benchFineRuns, want: xdpPass},
		{name: "wrapper(conn)→pass", target: objs.BenchPass, frame: synFrame, vary: benchConnection, repeat: benchFineRuns, want: xdpPass},
		{name: "SYN, full table", target: dispatcher, frame: synFrame, vary: benchNewFlow, repeat: benchFineRuns, want: xdpTX,
			base: "wrapper(vary)→pass"},
		{name: "new connection, full table", target: dispatcher, frame: synFrame, vary: benchConnection, repeat: 2 * benchConns, want: xdpTX,
			base: "wrapper(conn)→pass"},
		{name: "ACK of an unknown flow, full table", target: dispatcher, frame: ackFrame, vary: benchNewFlow, repeat: 200_000, want: xdpTX,
			base: "wrapper(vary)→pass"},
	}
	byName, fullByName := map[string]*benchCase{}, map[string]*benchCase{}
	for _, c := range cases {
		byName[c.name] = c
	}
	for _, c := range full {
		fullByName[c.name] = c
	}

	// Sanity checks: every case takes the path it is named after.
	b.checkPass(byName["bare XDP_PASS"], byName["wrapper→pass"], byName["wrapper(vary)→pass"], byName["wrapper(conn)→pass"])
	b.checkRef(byName["reference program"])
	b.checkEstablished(e, byName["established flow"], estKey)
	b.checkSYN(e, byName["SYN, new source"])
	reset()
	b.checkNew(e, byName["ACK of an unknown flow"])
	reset()
	b.checkConn(e, byName["new connection"])
	reset()
	b.checkNotVIP(e, byName["non-VIP pass"])
	b.checkPass(byName["bare XDP_PASS"], byName["wrapper→pass (IPv6)"], byName["wrapper(vary)→pass (IPv6)"])
	b.checkNotVIP(e, byName["IPv6 non-VIP pass"])
	b.checkNAT(e, byName["NAT established flow"], byName["NAT established reply"], byName["NAT SYN, new source"], htons(natFlow.NatPort))
	clearHalfOpen(t, e)
	b.checkNATConn(e, byName["NAT new connection"])
	resetNAT(t, e, natEst)
	b.checkIPv6(e, byName["IPv6 established flow"], byName["IPv6 SYN, new source"], est6Key)

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
	statsBefore := e.stats(t)
	newBefore := statsBefore.Services[1].NewConns
	rounds(cases)
	// Every connection and every unknown ACK scheduled one connection.
	wantNew := uint64((benchRounds + 1) * (benchConns + benchConns))
	st := e.stats(t)
	if got := st.Services[1].NewConns - newBefore; got < wantNew || float64(got) > 1.1*float64(wantNew) {
		t.Errorf("phase 1: %d connections scheduled, want %d (inserts failed: %d)", got, wantNew,
			st.Events["conn_insert_failed"]-statsBefore.Events["conn_insert_failed"])
	}
	reset()
	halfEntries := countConns(t, e)

	// Fill the table, then phase 2.
	b.run(fullByName["ACK of an unknown flow, full table"], uint32(capacity))
	newBefore = e.stats(t).Services[1].NewConns
	rounds(full)
	wantNew = uint64((benchRounds + 1) * (benchConns + fullByName["ACK of an unknown flow, full table"].repeat))
	if got := e.stats(t).Services[1].NewConns - newBefore; got < wantNew || float64(got) > 1.1*float64(wantNew) {
		t.Errorf("phase 2: %d connections scheduled, want %d", got, wantNew)
	}
	fullEntries := countConns(t, e)
	if fullEntries < capacity*9/10 {
		t.Errorf("phase 2: only %d of %d entries in use", fullEntries, capacity)
	}

	// Phase 3: live frames through a veth pair.
	var live *liveResult
	if os.Getenv("DLB_BENCH_NOLIVE") != "1" {
		resetConns(t, e, half, keep...)
		live = benchLive(t, e, b, dispatcher, estFrame, synFrame, estKey, half, keep)
	}

	// The report.
	cost := func(c *benchCase, in map[string]*benchCase) float64 {
		bare := median(in["bare XDP_PASS"].ns)
		if c.base == "" {
			return median(c.ns)
		}
		return median(c.ns) - median(in[c.base].ns) + bare
	}
	costOf := func(name string) float64 {
		if c, ok := byName[name]; ok {
			return cost(c, byName)
		}
		return cost(fullByName[name], fullByName)
	}
	perConn := func(name string) float64 { return 2 * costOf(name) }
	bare := median(byName["bare XDP_PASS"].ns)
	est := costOf("established flow")
	newConn := perConn("new connection")

	var out strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&out, format, args...) }
	w("\n== dlb executor benchmark (BPF_PROG_TEST_RUN, 64-byte IPv4 and 88-byte IPv6 frames) ==\n")
	w("date      %s\n", started.UTC().Format("2006-01-02 15:04 MST"))
	w("program   %s\n", object)
	w("machine   Linux %s, %d CPUs, %s\n", kernelRelease(), runtime.NumCPU(), cpuModel())
	if cpu >= 0 {
		w("pinned    test thread pinned to CPU %d\n", cpu)
	} else {
		w("pinned    no\n")
	}
	w("method    %d measured rounds (+1 warm-up) per case, medians of ns/run: the kernel's whole-ns figure k refined\n", benchRounds)
	w("          within [k, k+1) by the test run's wall time for the cases of %d runs\n", benchFineRuns)
	w("conns     capacity %d; phase 1 half full (%d entries before every inserting case, %d after phase 1), phase 2 full (%d)\n",
		capacity, half, halfEntries, fullEntries)
	w("new conn  a SYN from a new source, and the ACK completing its handshake %d connections later; %d per measurement\n\n",
		benchLag, benchConns)

	w("%-36s %9s  %-24s %7s  %-8s %7s\n", "case", "ns", "ratio", "goal", "met", "× bare")
	type goalRow struct {
		name, label string
		ns          float64
		rel         string  // what the ratio is to
		relNS       float64 // its cost
		goal        float64 // at most goal × rel (0: information only)
	}
	var goals []string
	print := func(r goalRow) {
		ratio, goal, met := "", "", ""
		if r.relNS > 0 {
			ratio = fmt.Sprintf("%.2f× %s", r.ns/r.relNS, r.rel)
		}
		if r.goal > 0 {
			goal = fmt.Sprintf("≤%g×", r.goal)
			met = "yes"
			if r.ns/r.relNS > r.goal {
				met = "NOT MET"
			}
			goals = append(goals, fmt.Sprintf("%s ≤ %g× %s: %.2f× (%s)", r.label, r.goal, r.rel, r.ns/r.relNS, met))
		}
		w("%-36s %9.1f  %-24s %7s  %-8s %7.2f\n", r.label, r.ns, ratio, goal, met, r.ns/bare)
	}
	row := func(name, label, rel string, relNS, goal float64) {
		print(goalRow{name: name, label: label, ns: costOf(name), rel: rel, relNS: relNS, goal: goal})
	}
	ref := costOf("reference program")
	print(goalRow{label: "bare XDP_PASS (information)", ns: bare})
	row("reference program", "reference program", "", 0, 0)
	row("established flow", "established flow", "reference", ref, 1.5)
	print(goalRow{label: "new connection (SYN + its ACK)", ns: newConn, rel: "established", relNS: est, goal: 3})
	row("SYN, new source", "  a SYN from a new source", "established", est, 0)
	row("ACK of an unknown flow", "  an ACK of an unknown flow (insert)", "established", est, 0)
	row("SYN, full table", "SYN, full table (flood)", "established", est, 2)
	print(goalRow{label: "new connection, full table", ns: perConn("new connection, full table"), rel: "established", relNS: est})
	row("ACK of an unknown flow, full table", "ACK of an unknown flow, full table", "established", est, 0)
	row("non-VIP pass", "non-VIP pass", "established", est, 0.5)
	row("NAT established flow", "NAT established flow", "established", est, 1.2)
	row("NAT established reply", "NAT established reply", "established", est, 1.2)
	print(goalRow{label: "NAT new connection (SYN + its ACK)", ns: perConn("NAT new connection"), rel: "MAC new conn", relNS: newConn, goal: 1.5})
	row("NAT SYN, new source", "  a NAT SYN from a new source", "MAC SYN", costOf("SYN, new source"), 0)
	row("NAT SYN, half-open full", "  a NAT SYN, half-open table full", "MAC SYN", costOf("SYN, new source"), 0)
	row("IPv6 established flow", "IPv6 established flow", "established", est, 1.1)
	row("IPv6 SYN, new source", "IPv6 SYN, new source", "MAC SYN", costOf("SYN, new source"), 0)
	row("IPv6 non-VIP pass", "IPv6 non-VIP pass", "established", est, 0)

	if live != nil {
		w("\nlive frames (BPF_F_TEST_XDP_LIVE_FRAMES, XDP_TX out of one end of a veth pair, native XDP on both ends;\n")
		w("one core: the pinned CPU sends and receives; packets per second of the kernel's test-run time),\n")
		w("medians of %d rounds of %d frames (new connections: %d); %d of %d frames arrived at the far end\n",
			benchRounds, live.frames, liveConnFrames, live.arrived, live.sent)
		if live.interrupted > 0 {
			w("(%d runs were cut short by a signal and run again: up to %d frames more were sent)\n",
				live.interrupted, live.resent)
		}
		w("%-36s %9s  %-24s %7s  %s\n", "case", "Mpps", "ratio", "goal", "met")
		liveRow := func(label string, pps, goal float64, note string) {
			r := pps / live.ref
			g, met := "", ""
			if goal > 0 {
				g, met = fmt.Sprintf("≥%g×", goal), "yes"
				if r < goal {
					met = "NOT MET"
				}
				goals = append(goals, fmt.Sprintf("live %s ≥ %g× reference: %.2f× (%s)", label, goal, r, met))
			}
			w("%-36s %9.2f  %-24s %7s  %-8s %s\n", label, pps/1e6, fmt.Sprintf("%.2f× reference", r), g, met, note)
		}
		w("%-36s %9.2f\n", "reference program", live.ref/1e6)
		liveRow("established flow", live.est, 0.9, "")
		liveRow("new connections (SYN + ACK frames)", live.conn, 0, fmt.Sprintf("%.0f connections/s", live.conn/2))
	}

	w("\ngoals\n")
	for _, g := range goals {
		w("  %s\n", g)
	}

	w("\nraw ns/run: median (min–max) over the rounds, runs per round\n")
	raw := func(phase string, cs []*benchCase) {
		for _, c := range cs {
			w("  %-8s %-44s %7.2f  (%.1f–%.1f)  ×%d\n", phase, rawName(c), median(c.ns), slices.Min(c.ns), slices.Max(c.ns), c.repeat)
		}
	}
	raw("phase 1", cases)
	raw("phase 2", full)
	w("\ncost(X) = T(wrapper→X) − T(wrapper→pass) + T(bare XDP_PASS), medians of one phase; the\n")
	w("wrapper→pass subtracted varies the frame as X does. A connection's cost is its two packets'.\n")
	w("Ratios of costs from one run are what matter: absolute times drift.\n")
	w("elapsed %.1fs\n", time.Since(started).Seconds())
	fmt.Print(out.String())
}

// Shorter names of the wrapper's modes.
const (
	benchFixed      = benchBenchVaryBENCH_FIXED
	benchNewFlow    = benchBenchVaryBENCH_NEW_FLOW
	benchConnection = benchBenchVaryBENCH_CONNECTION
)

func rawName(c *benchCase) string {
	if c.base == "" {
		return c.name
	}
	switch c.vary {
	case benchNewFlow:
		return "wrapper(vary)→" + c.name
	case benchConnection:
		return "wrapper(conn)→" + c.name
	}
	return "wrapper→" + c.name
}

// openBenchObjects loads the benchmark's wrapper, reference and pass
// programs (bench.c), closed when the test ends.
func openBenchObjects(t *testing.T) *benchObjects {
	t.Helper()
	var objs benchObjects
	if err := loadBenchObjects(&objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Fatalf("loading bench programs: %+v", ve)
		}
		t.Fatalf("loading bench programs: %v", err)
	}
	t.Cleanup(func() { objs.Close() })
	return &objs
}

// benchTCPFrame is a 64-byte frame of a TCP segment from the benchmark
// client's port sport to the TCP cluster's port 80, with flags.
func benchTCPFrame(t *testing.T, sport uint16, flags string) []byte {
	t.Helper()
	f := tcpTo(vipTCP, 80, sport, flags)
	f.Payload = []byte("dlb-bench!")
	fr := f.Build(t)
	if len(fr) != benchFrameLen {
		t.Fatalf("benchmark frame has %d bytes, want %d", len(fr), benchFrameLen)
	}
	return fr
}

// newBenchEnv is newTestEnv with the default connection-table size
// (262144), so that lookups and inserts see a table of realistic size,
// its tables' memory written once (touchTables), as a table in use has
// been. It does not go through testutil.RequirePrivileged: the report is
// opt-in (DLB_BENCH=1) and not a TestPrivileged test.
func newBenchEnv(t *testing.T) *testEnv {
	t.Helper()
	e := openTestEnv(t, Options{})
	touchTables(t, e)
	return e
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

// benchSpec returns the executor object at path ("-": the committed one),
// sized as Open sizes it: an object with per-CPU rows of backend counters
// gets its rows and its stats_stride (which the verifier reads: at 0 it
// would find the counting code dead and skip it). Older objects have no
// such rows.
func benchSpec(t *testing.T, path string) *ebpf.CollectionSpec {
	t.Helper()
	spec, err := loadDispatcher()
	if path != "-" {
		spec, err = ebpf.LoadCollectionSpec(path)
	}
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if _, ok := spec.Variables[dispatcherVarStatsStride]; ok {
		if err := sizeBackendStats(spec); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	return spec
}

// loadVariant loads dlb_xdp from another build of bpf/dispatcher.c, on the
// maps the environment pinned.
func loadVariant(t *testing.T, path, pinDir string) *ebpf.Program {
	t.Helper()
	spec := benchSpec(t, path)
	var objs struct {
		Prog *ebpf.Program `ebpf:"dlb_xdp"`
	}
	err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: pinDir}})
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

// benchFineRuns is the runs of a test run of a cheap case (tens of ns a
// run): enough that the wall time refines the kernel's whole nanoseconds
// (measure).
const benchFineRuns = 10_000_000

type benchRunner struct {
	t    *testing.T
	objs *benchObjects
}

// setup points the wrapper at c's program and frame.
func (b *benchRunner) setup(c *benchCase) {
	b.setupPrime(c, false)
}

func (b *benchRunner) setupPrime(c *benchCase, prime bool) {
	b.t.Helper()
	if c.target == nil {
		return
	}
	if err := b.objs.BenchProgs.Update(uint32(0), c.target, ebpf.UpdateAny); err != nil {
		b.t.Fatalf("%s: setting the wrapper's target: %v", c.name, err)
	}
	bf := benchBenchFrame{Len: uint32(len(c.frame)), Vary: uint32(c.vary)}
	if c.vary != benchFixed {
		bf.AddrOff, bf.PortOff, bf.FlagsOff = benchAddrOff, benchPortOff, benchFlagsOff
		if c.v6 {
			bf.AddrOff, bf.PortOff, bf.FlagsOff = benchAddrOff6, benchPortOff6, benchFlagsOff6
		}
	}
	if c.vary == benchConnection {
		bf.Lag = benchLag
		if prime {
			bf.Prime = 1
		}
	}
	copy(bf.Data[:], c.frame)
	if err := b.objs.BenchFrame.Update(uint32(0), &bf, ebpf.UpdateAny); err != nil {
		b.t.Fatalf("%s: writing the wrapper's frame: %v", c.name, err)
	}
}

// prime sends the SYNs of the benchLag connections whose ACKs a
// new-connection case's next runs send first.
func (b *benchRunner) prime(c *benchCase) {
	b.t.Helper()
	if c.vary != benchConnection {
		return
	}
	b.setupPrime(c, true)
	opts := &ebpf.RunOptions{Data: c.frame, Repeat: benchLag}
	if _, err := b.prog(c).Run(opts); err != nil {
		b.t.Fatalf("%s: priming: %v", c.name, err)
	}
	b.setup(c)
}

func (b *benchRunner) prog(c *benchCase) *ebpf.Program {
	if c.target == nil {
		return b.objs.BenchPass
	}
	return b.objs.BenchWrapper
}

// measure runs c once with its repeat count and returns its ns/run: the
// kernel's own figure k, its timer's total over the runs rounded down to
// a whole nanosecond. That is too coarse for paths of 20-40 ns (a ratio
// of two such figures moves by ±5 % with the rounding alone), so a case
// of benchFineRuns runs or more is placed within [k, k+1), where its true
// figure lies, by the test run's wall time over its runs. A test run of
// more than one run spends 0.3-2 ms outside the kernel's timer (a
// one-run test run 4 µs; not traced further: the kernel switches its XDP
// dispatcher to the program and back only for more than one run), which
// at ten million runs adds at most 0.2 ns a run, and alike to every case.
func (b *benchRunner) measure(c *benchCase) float64 {
	b.t.Helper()
	if c.prepare != nil {
		c.prepare()
	}
	b.setup(c)
	b.prime(c)
	start := time.Now()
	ret, d, err := b.prog(c).Benchmark(c.frame, c.repeat, nil)
	wall := time.Since(start)
	if err != nil {
		b.t.Fatalf("%s: %v", c.name, err)
	}
	if ret != c.want && !c.anyRet {
		b.t.Fatalf("%s: program returned %d, want %d: the benchmark would measure the wrong path", c.name, ret, c.want)
	}
	if c.verify != nil && !c.anyRet {
		c.verify()
	}
	k := float64(d.Nanoseconds())
	if c.repeat < benchFineRuns {
		return k
	}
	return min(max(float64(wall.Nanoseconds())/float64(c.repeat), k), k+0.99)
}

// run runs c n times (after priming a new-connection case) and returns
// the verdict and the final frame.
func (b *benchRunner) run(c *benchCase, n uint32) (uint32, []byte) {
	b.t.Helper()
	b.setup(c)
	b.prime(c)
	out := make([]byte, len(c.frame)+256)
	opts := &ebpf.RunOptions{Data: c.frame, DataOut: out, Repeat: n}
	ret, err := b.prog(c).Run(opts)
	if err != nil {
		b.t.Fatalf("%s: %v", c.name, err)
	}
	return ret, opts.DataOut
}

const sanityRuns = 1000

func (b *benchRunner) checkPass(bare *benchCase, wrapped ...*benchCase) {
	t := b.t
	t.Helper()
	for _, c := range append([]*benchCase{bare}, wrapped...) {
		ret, out := b.run(c, sanityRuns)
		if ret != xdpPass {
			t.Fatalf("%s: returned %d, want XDP_PASS (tail call failed?)", c.name, ret)
		}
		if c.vary != benchFixed {
			// Only the varied bytes may differ.
			a, p, f := benchAddrOff, benchPortOff, benchFlagsOff
			if c.v6 {
				a, p, f = benchAddrOff6, benchPortOff6, benchFlagsOff6
			}
			if out[a] == c.frame[a] && out[a+1] == c.frame[a+1] && out[p] == c.frame[p] && out[p+1] == c.frame[p+1] {
				t.Fatalf("%s: the source address and port were not varied", c.name)
			}
			varied := []int{a, a + 1, p, p + 1}
			if c.vary == benchConnection {
				// sanityRuns is even: the last run is an ACK.
				if out[f] != 0x10 || out[a+1]&0x80 == 0 {
					t.Fatalf("%s: last run's flags %#x, address mark %#x: want an ACK of a marked flow", c.name, out[f], out[a+1])
				}
				varied = append(varied, f)
			}
			for _, i := range varied {
				out[i] = c.frame[i]
			}
		}
		if !bytes.Equal(out, c.frame) {
			t.Fatalf("%s: frame changed:\n got %x\nwant %x", c.name, out, c.frame)
		}
	}
}

// checkRef checks that the reference program finds the flow and sends it
// to backend 10's MAC.
func (b *benchRunner) checkRef(c *benchCase) {
	t := b.t
	t.Helper()
	ret, out := b.run(c, sanityRuns)
	if ret != xdpTX || !bytes.Equal(out[0:6], mac(0x21)) || !bytes.Equal(out[6:12], c.frame[0:6]) || !bytes.Equal(out[12:], c.frame[12:]) {
		t.Fatalf("%s: returned %d with %x, want XDP_TX towards backend 10's MAC", c.name, ret, out)
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

// checkNew checks that every ACK of an unknown flow schedules a
// connection and inserts it.
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

// checkConn checks the new-connection case: after priming, sanityRuns
// runs are sanityRuns/2 SYNs, which insert nothing, and sanityRuns/2 ACKs,
// each completing the handshake of a SYN sent benchLag connections
// earlier: one new connection and one table entry each, every packet sent
// to backend 10.
func (b *benchRunner) checkConn(e *testEnv, c *benchCase) {
	t := b.t
	t.Helper()
	e.forgetHandshakes(t)
	b.setup(c)
	b.prime(c)
	entries := countConns(t, e)
	before := e.stats(t)
	out := make([]byte, len(c.frame)+256)
	opts := &ebpf.RunOptions{Data: c.frame, DataOut: out, Repeat: sanityRuns}
	ret, err := b.prog(c).Run(opts)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	after := e.stats(t)
	if ret != xdpTX || !bytes.Equal(out[0:6], mac(0x21)) {
		t.Fatalf("%s: returned %d with %x, want XDP_TX to backend 10", c.name, ret, out[0:6])
	}
	const conns = sanityRuns / 2
	if d := after.Services[1].Packets - before.Services[1].Packets; d != sanityRuns {
		t.Fatalf("%s: service counted %d packets in %d runs", c.name, d, sanityRuns)
	}
	if d := after.Services[1].NewConns - before.Services[1].NewConns; d != conns {
		t.Fatalf("%s: %d new connections in %d runs, want %d", c.name, d, sanityRuns, conns)
	}
	if d := countConns(t, e) - entries; d != conns {
		t.Fatalf("%s: the connection table grew by %d entries, want %d", c.name, d, conns)
	}
	if n := completedHandshakes(t, e); n < conns*9/10 {
		t.Fatalf("%s: only %d handshake-cache slots completed by their ACK, want about %d", c.name, n, conns)
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
	for slot := uint32(0); slot < e.dp.objs.Handshakes.MaxEntries(); slot++ {
		if err := e.dp.objs.Handshakes.Lookup(slot, &hs); err == nil && hs.Backend == 10 && hs.Seen != 0 {
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

// checkNATConn checks the NAT new-connection case: every SYN reserves a
// port and every ACK promotes the half-open connection of its SYN.
func (b *benchRunner) checkNATConn(e *testEnv, c *benchCase) {
	t := b.t
	t.Helper()
	b.setup(c)
	b.prime(c)
	before := e.stats(t)
	out := make([]byte, len(c.frame)+256)
	opts := &ebpf.RunOptions{Data: c.frame, DataOut: out, Repeat: sanityRuns}
	ret, err := b.prog(c).Run(opts)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	after := e.stats(t)
	const conns = sanityRuns / 2
	if ret != xdpTX || !bytes.Equal(out[0:6], routerMAC) || !bytes.Equal(out[26:30], retAddr.AsSlice()) {
		t.Fatalf("%s: returned %d with %x, want XDP_TX translated towards the router", c.name, ret, out)
	}
	for ev, want := range map[string]uint64{"halfopen_created": conns, "halfopen_promoted": conns, "halfopen_lost": 0} {
		if d := after.Events[ev] - before.Events[ev]; d != want {
			t.Fatalf("%s: %s counted %d times in %d runs, want %d", c.name, ev, d, sanityRuns, want)
		}
	}
	if d := after.Services[6].NewConns - before.Services[6].NewConns; d != conns {
		t.Fatalf("%s: %d new connections, want %d", c.name, d, conns)
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

// natConnCase returns the NAT new-connection case (per packet) for
// program prog: before every measurement, reset and an emptied half-open
// table; after it, a check that every SYN reserved a port without
// displacing another reservation and every ACK promoted its SYN's. A
// half-open table left full by the flood case would make every SYN try
// all its candidates and take the oldest reservation: the flood's cost,
// not a new connection's.
func natConnCase(t *testing.T, e *testEnv, prog *ebpf.Program, syn []byte, reset func()) *benchCase {
	var before lb.DataplaneStats
	c := &benchCase{name: "NAT new connection", target: prog, frame: syn, vary: benchConnection, repeat: 2 * benchConns,
		want: xdpTX, base: "wrapper(conn)→pass"}
	c.prepare = func() {
		reset()
		clearHalfOpen(t, e)
		before = e.stats(t)
	}
	c.verify = func() {
		after := e.stats(t)
		// The primed connections' SYNs come before the measurement's.
		want := map[string]uint64{"halfopen_created": benchConns + benchLag, "halfopen_promoted": benchConns,
			"halfopen_evicted": 0, "halfopen_lost": 0}
		for ev, n := range want {
			if d := after.Events[ev] - before.Events[ev]; d != n {
				t.Fatalf("%s: %s counted %d times in a measurement, want %d", c.name, ev, d, n)
			}
		}
	}
	return c
}

// clearHalfOpen frees every NAT half-open slot, so that the next SYNs
// find room (the NAT SYN case with room).
func clearHalfOpen(t testing.TB, e *testEnv) {
	t.Helper()
	zeroArray[dispatcherHalfopen](t, e.dp.objs.NatHalfopen)
}

// completedHandshakes counts the handshake-cache slots whose ACK came
// (written, and seen cleared) of connections to backend 10.
func completedHandshakes(t *testing.T, e *testEnv) int {
	t.Helper()
	n := 0
	err := batchRead(e.dp.objs.Handshakes, func(_ uint32, h dispatcherHandshake) {
		if h.Seen == 0 && h.Check != 0 && h.Backend == 10 {
			n++
		}
	})
	if err != nil {
		t.Fatalf("reading handshakes: %v", err)
	}
	return n
}

// fillRefFlows writes the reference program's table: k to backend 10's
// MAC, and n-1 other flows.
func fillRefFlows(t *testing.T, objs *benchObjects, k FlowKey, n int) {
	t.Helper()
	raw := k.raw()
	keys := make([]benchRefKey, 0, n)
	vals := make([]benchRefValue, 0, n)
	var v benchRefValue
	copy(v.Mac[:], mac(0x21))
	ref := func(src [4]byte, sport uint16) benchRefKey {
		return benchRefKey{Saddr: ne32(src), Daddr: ne32([4]byte(raw.Dst.Addr[:4])), Sport: htons(sport), Dport: raw.Dport, Proto: 6}
	}
	keys = append(keys, ref([4]byte(raw.Src.Addr[:4]), k.SrcPort))
	vals = append(vals, v)
	for i := 1; i < n; i++ {
		keys = append(keys, ref([4]byte{198, 19, byte(i >> 16), byte(i >> 8)}, uint16(i)))
		vals = append(vals, v)
	}
	if _, err := objs.RefFlows.BatchUpdate(keys, vals, nil); err != nil {
		t.Fatalf("filling the reference table: %v", err)
	}
}

// ne32 returns four bytes in memory order as a host integer.
func ne32(b [4]byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
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
