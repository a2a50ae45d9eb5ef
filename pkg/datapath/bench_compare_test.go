//go:build linux

package datapath

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
)

// benchCompareRounds is how many rounds TestBenchCompare measures (after
// one warm-up round): more than the report's, since the differences it
// is for are a few tens of nanoseconds on a noisy machine.
const benchCompareRounds = 21

// TestBenchCompare measures builds of bpf/dispatcher.c against each
// other: DLB_BENCH_COMPARE names their objects, comma-separated ("-" is
// the committed one). Each round measures every object's established
// flow, SYN from a new source, new connection and ACK of an unknown flow,
// and its NAT SYN from a new source and NAT new connection (each with the
// half-open table emptied first), then, the table filled, its SYN from a
// new source into a full table (a flood), one object after the other, so
// that the machine's drift touches all of them alike; whole report runs
// alternated by hand differ by more than the variants do. Costs are
// computed as the report's (connection table half full, cost =
// T(wrapper→X) − T(wrapper→pass) + T(bare XDP_PASS)).
// DLB_BENCH_COMPARE_NOCHECK=1 measures variants cut short for scale (a
// path returning early): their paths and verdicts are not checked.
func TestBenchCompare(t *testing.T) {
	list := os.Getenv("DLB_BENCH_COMPARE")
	if list == "" {
		t.Skip("comparing builds: set DLB_BENCH_COMPARE=a.o,b.o (- is the committed object)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the comparison needs root (BPF_PROG_TEST_RUN of XDP programs, network namespaces)")
	}
	ce := newCompareEnv(t)
	e, cpu, b, estKey := ce.e, ce.cpu, ce.b, ce.estKey
	estFrame, synFrame, ackFrame, natSynFrame := ce.estFrame, ce.synFrame, ce.ackFrame, ce.natSynFrame
	reset, natReset := ce.reset, ce.natReset

	bases := ce.bases()
	type build struct {
		name  string
		cases []*benchCase
	}
	// Variants that cut a path short, measured for scale: neither their
	// paths nor their verdicts are checked.
	noCheck := os.Getenv("DLB_BENCH_COMPARE_NOCHECK") == "1"
	var builds []build
	for _, path := range strings.Split(list, ",") {
		prog, name := e.dp.objs.DlbXdp, "committed object"
		if path != "-" {
			prog, name = loadVariant(t, path, e.pinDir), path
		}
		cases := compareCases(prog, estFrame, synFrame, ackFrame, reset)
		cases = append(cases, compareNATCases(t, e, prog, natSynFrame, natReset)...)
		for _, c := range cases {
			c.anyRet = noCheck
		}
		builds = append(builds, build{name: name, cases: cases})
	}
	for _, bl := range builds {
		if noCheck {
			break
		}
		// Every build takes the paths the cases are named after, the
		// NAT connection in the state its measurements start from.
		b.checkEstablished(e, bl.cases[0], estKey)
		b.checkSYN(e, bl.cases[1])
		reset()
		b.checkConn(e, bl.cases[2])
		reset()
		b.checkNew(e, bl.cases[3])
		reset()
		bl.cases[5].prepare()
		b.checkNATConn(e, bl.cases[5])
		natReset()
	}

	for round := -1; round < benchCompareRounds; round++ {
		for _, c := range bases {
			if ns := b.measure(c); round >= 0 {
				c.ns = append(c.ns, ns)
			}
		}
		for _, bl := range builds {
			for _, c := range bl.cases {
				if ns := b.measure(c); round >= 0 {
					c.ns = append(c.ns, ns)
				}
			}
		}
	}

	// Then the table full, as the report fills it (ACKs of unknown flows
	// through the committed object, which set what variants read): every
	// build's SYN from a new source, a flood.
	fill := &benchCase{name: "filling", target: e.dp.objs.DlbXdp, frame: ackFrame, vary: benchNewFlow, want: xdpTX}
	b.run(fill, uint32(e.dp.Info().ConnTable))
	if n, capacity := countConns(t, e), int(e.dp.Info().ConnTable); n < capacity*9/10 {
		t.Fatalf("filling the table: %d entries of %d", n, capacity)
	}
	fresh := ce.bases()
	fullBases := []*benchCase{caseNamed(fresh, "bare XDP_PASS"), caseNamed(fresh, "wrapper(vary)→pass")}
	floods := make([]*benchCase, len(builds))
	for i, bl := range builds {
		floods[i] = &benchCase{name: "SYN, full table", target: bl.cases[0].target, frame: synFrame, vary: benchNewFlow,
			repeat: benchFineRuns, want: xdpTX, base: "wrapper(vary)→pass", anyRet: noCheck}
	}
	for round := -1; round < benchCompareRounds; round++ {
		for _, c := range append(fullBases, floods...) {
			if ns := b.measure(c); round >= 0 {
				c.ns = append(c.ns, ns)
			}
		}
	}

	baseNS, fullNS := map[string]float64{}, map[string]float64{}
	for _, c := range bases {
		baseNS[c.name] = median(c.ns)
	}
	for _, c := range fullBases {
		fullNS[c.name] = median(c.ns)
	}
	// cost is a case's cost against the base cases measured beside it.
	cost := func(base map[string]float64, c *benchCase) float64 {
		return median(c.ns) - base[c.base] + base["bare XDP_PASS"]
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n== comparing builds: %d rounds (+1 warm-up), interleaved; table half full; pinned CPU %d ==\n",
		benchCompareRounds, cpu)
	fmt.Fprintf(&out, "%-24s %8s %8s %8s %8s %9s %9s %9s %10s %9s %9s\n", "object", "est ns", "SYN ns", "conn ns", "ACK ns",
		"conn/est", "NAT SYN", "NAT conn", "NAT/MAC", "flood ns", "flood/est")
	for i, bl := range builds {
		est, syn := cost(baseNS, bl.cases[0]), cost(baseNS, bl.cases[1])
		conn, ack := 2*cost(baseNS, bl.cases[2]), cost(baseNS, bl.cases[3])
		natSyn, natConn := cost(baseNS, bl.cases[4]), 2*cost(baseNS, bl.cases[5])
		flood := cost(fullNS, floods[i])
		fmt.Fprintf(&out, "%-24s %8.1f %8.1f %8.1f %8.1f %8.2f× %9.1f %9.1f %9.2f× %9.1f %8.2f×\n", bl.name, est, syn, conn, ack,
			conn/est, natSyn, natConn, natConn/conn, flood, flood/est)
	}
	fmt.Fprintf(&out, "\nraw ns/run (refined below a nanosecond: measure): median (min–max)\n")
	for _, c := range bases {
		fmt.Fprintf(&out, "  %-44s %7.2f  (%.1f–%.1f)\n", c.name, median(c.ns), slices.Min(c.ns), slices.Max(c.ns))
	}
	for i, bl := range builds {
		for _, c := range append(bl.cases, floods[i]) {
			fmt.Fprintf(&out, "  %-24s %-19s %7.2f  (%.1f–%.1f)\n", bl.name, c.name, median(c.ns), slices.Min(c.ns), slices.Max(c.ns))
		}
	}
	for _, c := range fullBases {
		fmt.Fprintf(&out, "  %-44s %7.2f  (%.1f–%.1f)  (table full)\n", c.name, median(c.ns), slices.Min(c.ns), slices.Max(c.ns))
	}
	fmt.Print(out.String())
}

// compareEnv is the set-up TestBenchCompare and TestBenchProfile measure
// in: a test namespace with the benchmark's configuration, the
// connection table half full and every table cycled once, the test
// pinned to one CPU.
type compareEnv struct {
	e                                         *testEnv
	b                                         *benchRunner
	cpu                                       int
	estKey                                    FlowKey
	estFrame, synFrame, ackFrame, natSynFrame []byte
	reset, natReset                           func()
}

// newCompareEnv builds the compareEnv.
func newCompareEnv(t *testing.T) *compareEnv {
	t.Helper()
	e := newBenchEnv(t)
	cpu := pinToOneCPU(t)
	b := &benchRunner{t: t, objs: openBenchObjects(t)}
	const estPort = 40000
	ce := &compareEnv{e: e, b: b, cpu: cpu, estKey: key(vipTCP, 80, estPort, 6),
		estFrame: benchTCPFrame(t, estPort, "A"), synFrame: benchTCPFrame(t, 1, "S"), ackFrame: benchTCPFrame(t, 1, "A")}
	natSyn := tcpTo(vipNAT, 80, 1, "S")
	natSyn.Payload = []byte("dlb-bench!")
	ce.natSynFrame = natSyn.Build(t)
	half := int(e.dp.Info().ConnTable) / 2
	fillConns(t, e, half)
	ce.reset = func() { resetConns(t, e, half, ce.estKey) }
	ce.natReset = func() { resetNAT(t, e, FlowKey{}) }
	cycleTables(t, e, b, e.dp.objs.DlbXdp, ce.ackFrame, ce.natSynFrame, ce.reset, ce.natReset)
	return ce
}

// bases returns new base cases (their measurements their own): a bare
// XDP_PASS, and the wrapper passing a fixed frame, a frame varied as a new
// flow, and one varied as a connection's packets, which a case's cost
// subtracts (benchCase.base).
func (ce *compareEnv) bases() []*benchCase {
	pass := ce.b.objs.BenchPass
	return []*benchCase{
		{name: "bare XDP_PASS", frame: ce.estFrame, repeat: benchFineRuns, want: xdpPass},
		{name: "wrapper→pass", target: pass, frame: ce.estFrame, repeat: benchFineRuns, want: xdpPass},
		{name: "wrapper(vary)→pass", target: pass, frame: ce.synFrame, vary: benchNewFlow, repeat: benchFineRuns, want: xdpPass},
		{name: "wrapper(conn)→pass", target: pass, frame: ce.synFrame, vary: benchConnection, repeat: benchFineRuns, want: xdpPass},
	}
}

// caseNamed returns the case of cs named name, or nil.
func caseNamed(cs []*benchCase, name string) *benchCase {
	if i := slices.IndexFunc(cs, func(c *benchCase) bool { return c.name == name }); i >= 0 {
		return cs[i]
	}
	return nil
}

// compareCases returns TestBenchCompare's cases for one build of dlb_xdp:
// the established flow, a SYN from a new source, a new connection (per
// packet) and an ACK of an unknown flow.
func compareCases(prog *ebpf.Program, est, syn, ack []byte, reset func()) []*benchCase {
	return []*benchCase{
		{name: "established flow", target: prog, frame: est, repeat: benchFineRuns, want: xdpTX, base: "wrapper→pass"},
		{name: "SYN, new source", target: prog, frame: syn, vary: benchNewFlow, repeat: benchFineRuns, want: xdpTX,
			base: "wrapper(vary)→pass"},
		{name: "new connection", target: prog, frame: syn, vary: benchConnection, repeat: 2 * benchConns, want: xdpTX,
			base: "wrapper(conn)→pass", prepare: reset},
		{name: "ACK of an unknown flow", target: prog, frame: ack, vary: benchNewFlow, repeat: benchConns, want: xdpTX,
			base: "wrapper(vary)→pass", prepare: reset},
	}
}

// compareNATCases returns TestBenchCompare's NAT cases for one build of
// dlb_xdp, as the report measures them: a NAT SYN from a new source and a
// NAT new connection (per packet), each after reset (the benchmark's NAT
// connections removed) and with the half-open table emptied.
func compareNATCases(t *testing.T, e *testEnv, prog *ebpf.Program, syn []byte, reset func()) []*benchCase {
	return []*benchCase{
		{name: "NAT SYN, new source", target: prog, frame: syn, vary: benchNewFlow, repeat: benchConns, want: xdpTX,
			base: "wrapper(vary)→pass", prepare: func() { reset(); clearHalfOpen(t, e) }},
		natConnCase(t, e, prog, syn, reset),
	}
}
