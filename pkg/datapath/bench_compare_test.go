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
// one object after the other, so that the machine's drift touches all of
// them alike; whole report runs alternated by hand differ by more than
// the variants do. Costs are computed as the report's (connection table
// half full, cost = T(wrapper→X) − T(wrapper→pass) + T(bare XDP_PASS)).
func TestBenchCompare(t *testing.T) {
	list := os.Getenv("DLB_BENCH_COMPARE")
	if list == "" {
		t.Skip("comparing builds: set DLB_BENCH_COMPARE=a.o,b.o (- is the committed object)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the comparison needs root (BPF_PROG_TEST_RUN of XDP programs, network namespaces)")
	}
	e := newBenchEnv(t)
	cpu := pinToOneCPU(t)
	objs := openBenchObjects(t)
	b := &benchRunner{t: t, objs: objs}

	const estPort = 40000
	estKey := key(vipTCP, 80, estPort, 6)
	estFrame, synFrame, ackFrame := benchTCPFrame(t, estPort, "A"), benchTCPFrame(t, 1, "S"), benchTCPFrame(t, 1, "A")
	half := int(e.dp.Info().ConnTable) / 2
	fillConns(t, e, half)
	reset := func() { resetConns(t, e, half, estKey) }

	bases := []*benchCase{
		{name: "bare XDP_PASS", frame: estFrame, repeat: 1_000_000, want: xdpPass},
		{name: "wrapper→pass", target: objs.BenchPass, frame: estFrame, repeat: 1_000_000, want: xdpPass},
		{name: "wrapper(vary)→pass", target: objs.BenchPass, frame: synFrame, vary: benchNewFlow, repeat: 1_000_000, want: xdpPass},
		{name: "wrapper(conn)→pass", target: objs.BenchPass, frame: synFrame, vary: benchConnection, repeat: 1_000_000, want: xdpPass},
	}
	type build struct {
		name  string
		cases []*benchCase
	}
	var builds []build
	for _, path := range strings.Split(list, ",") {
		prog, name := e.dp.objs.DlbXdp, "committed object"
		if path != "-" {
			prog, name = loadVariant(t, path, e.pinDir), path
		}
		builds = append(builds, build{name: name, cases: compareCases(prog, estFrame, synFrame, ackFrame, reset)})
	}
	for _, bl := range builds {
		// Every build takes the paths the cases are named after.
		b.checkEstablished(e, bl.cases[0], estKey)
		b.checkSYN(e, bl.cases[1])
		reset()
		b.checkConn(e, bl.cases[2])
		reset()
		b.checkNew(e, bl.cases[3])
		reset()
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

	baseNS := map[string]float64{}
	for _, c := range bases {
		baseNS[c.name] = median(c.ns)
	}
	cost := func(c *benchCase) float64 { return median(c.ns) - baseNS[c.base] + baseNS["bare XDP_PASS"] }
	var out strings.Builder
	fmt.Fprintf(&out, "\n== comparing builds: %d rounds (+1 warm-up), interleaved; table half full; pinned CPU %d ==\n",
		benchCompareRounds, cpu)
	fmt.Fprintf(&out, "%-24s %10s %10s %10s %10s %12s\n", "object", "est ns", "SYN ns", "conn ns", "ACK ns", "conn/est")
	for _, bl := range builds {
		est, syn := cost(bl.cases[0]), cost(bl.cases[1])
		conn, ack := 2*cost(bl.cases[2]), cost(bl.cases[3])
		fmt.Fprintf(&out, "%-24s %10.1f %10.1f %10.1f %10.1f %11.2f×\n", bl.name, est, syn, conn, ack, conn/est)
	}
	fmt.Fprintf(&out, "\nraw kernel ns/run: median (min–max)\n")
	for _, c := range bases {
		fmt.Fprintf(&out, "  %-44s %7.1f  (%.0f–%.0f)\n", c.name, median(c.ns), slices.Min(c.ns), slices.Max(c.ns))
	}
	for _, bl := range builds {
		for _, c := range bl.cases {
			fmt.Fprintf(&out, "  %-24s %-19s %7.1f  (%.0f–%.0f)\n", bl.name, c.name, median(c.ns), slices.Min(c.ns), slices.Max(c.ns))
		}
	}
	fmt.Print(out.String())
}

// compareCases returns TestBenchCompare's cases for one build of dlb_xdp:
// the established flow, a SYN from a new source, a new connection (per
// packet) and an ACK of an unknown flow.
func compareCases(prog *ebpf.Program, est, syn, ack []byte, reset func()) []*benchCase {
	return []*benchCase{
		{name: "established flow", target: prog, frame: est, repeat: 1_000_000, want: xdpTX, base: "wrapper→pass"},
		{name: "SYN, new source", target: prog, frame: syn, vary: benchNewFlow, repeat: 1_000_000, want: xdpTX,
			base: "wrapper(vary)→pass"},
		{name: "new connection", target: prog, frame: syn, vary: benchConnection, repeat: 2 * benchConns, want: xdpTX,
			base: "wrapper(conn)→pass", prepare: reset},
		{name: "ACK of an unknown flow", target: prog, frame: ack, vary: benchNewFlow, repeat: benchConns, want: xdpTX,
			base: "wrapper(vary)→pass", prepare: reset},
	}
}
