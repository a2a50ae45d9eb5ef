package dispatcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/dlbproject/dlb/advisors"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher/health"
	"github.com/dlbproject/dlb/pkg/lb"
)

// benchEngine is an engine on fakes with clusters × ports × servers, the
// manager started (refresh 100 and sensitivity as given), and live
// connection counts for every server. tableSize fixes the ports' Maglev
// tables (0: chosen from the number of servers).
func benchEngine(b *testing.B, clusters, ports, servers int, tableSize, sensitivity string) *Engine {
	b.Helper()
	return benchEngineWith(b, nil, clusters, ports, servers, tableSize, sensitivity)
}

// benchEngineWith is benchEngine with options changed by opt (nil: none).
func benchEngineWith(b *testing.B, opt func(*Options), clusters, ports, servers int, tableSize, sensitivity string) *Engine {
	b.Helper()
	nif := newFakeNetif()
	addrs := make([]string, servers)
	for i := range addrs {
		a := netip.AddrFrom4([4]byte{198, 18, byte(2 + i/250), byte(1 + i%250)})
		nif.macs[a] = net.HardwareAddr{2, 0, 0, 2, byte(i >> 8), byte(i)}
		addrs[i] = a.String()
	}
	dp := &fakeDatapath{}
	o := Options{
		StateDir:     b.TempDir(),
		OpenDatapath: func() (Datapath, error) { return dp, nil },
		Netif:        nif,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		MaxServices:  1 << 16, MaxBackends: 1 << 20,
	}
	if opt != nil {
		opt(&o)
	}
	e, err := New(o)
	if err != nil {
		b.Fatal(err)
	}
	ops := []config.Op{op("executor", "start", "", "interface", "eth0")}
	for c := 0; c < clusters; c++ {
		vip := fmt.Sprintf("198.18.1.%d", c+1)
		ops = append(ops, op("cluster", "add", vip))
		for p := 0; p < ports; p++ {
			port := op("port", "add", fmt.Sprintf("%s@%d", vip, 8000+p))
			if tableSize != "" {
				port.Params = append(port.Params, config.P("tablesize", tableSize))
			}
			ops = append(ops, port)
		}
	}
	ops = append(ops, op("server", "add", "@@"+strings.Join(addrs, "+"), "weight", "10"),
		op("manager", "set", "", "refresh", "100", "sensitivity", sensitivity), op("manager", "start", ""))
	if _, err := e.apply(ops); err != nil {
		b.Fatal(err)
	}
	return e
}

// setLoads gives every server a random live load, as a refresh would.
func setLoads(e *Engine, rng *rand.Rand) {
	for _, r := range e.mgr.backends {
		r.actv, r.newc = uint64(rng.IntN(200)), uint64(rng.IntN(50))
	}
}

// benchCycle is one manager cycle in steady state: the loads move a
// little, so weights change by less than the sensitivity and nothing is
// pushed. The goal is < 50 ms at 100,000 servers.
func benchCycle(b *testing.B, e *Engine) {
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Now()
	e.managerCycle(now) // creates the runtime records
	for _, r := range e.mgr.backends {
		r.actv, r.newc = 100, 20
	}
	e.managerCycle(now) // settle
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, r := range e.mgr.backends {
			r.actv, r.newc = 100+uint64(rng.IntN(3)), 20+uint64(rng.IntN(2))
		}
		e.managerCycle(now)
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/cycle")
}

// BenchmarkManagerCycle10000: 100 clusters × 10 ports × 10 servers.
func BenchmarkManagerCycle10000(b *testing.B) { benchCycle(b, benchEngine(b, 100, 10, 10, "", "5")) }

// BenchmarkManagerCycle100000: 10 clusters × 100 ports × 100 servers.
func BenchmarkManagerCycle100000(b *testing.B) { benchCycle(b, benchEngine(b, 10, 100, 100, "", "5")) }

// BenchmarkManagerCyclePushAll is the worst case: every port's weights
// change in one cycle, so all 1,000 Maglev tables (here fixed at 65537
// slots) are rebuilt and handed to the executor (a fake here: the map
// writes are not timed).
func BenchmarkManagerCyclePushAll(b *testing.B) {
	e := benchEngine(b, 100, 10, 10, "65537", "0")
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Now()
	e.managerCycle(now) // creates the runtime records
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		setLoads(e, rng)
		e.managerCycle(now)
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/cycle")
}

// BenchmarkLoad100000 loads 10 clusters × 100 ports × 100 servers as one
// batch (the engine's share of "dlbctl file load": the executor is a
// fake), then changes one server's weight.
func BenchmarkLoad100000(b *testing.B) {
	for i := 0; i < b.N; i++ {
		e := benchEngine(b, 10, 100, 100, "", "5")
		b.StopTimer()
		start := time.Now()
		if _, err := e.apply([]config.Op{op("server", "set", "198.18.1.1@8000@198.18.2.1", "weight", "3")}); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "ms/change")
		b.StartTimer()
	}
}

// BenchmarkChangeAt100000 changes one server's weight in a configuration
// of 100,000 servers (the executor is a fake).
func BenchmarkChangeAt100000(b *testing.B) {
	e := benchEngine(b, 10, 100, 100, "", "5")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.apply([]config.Op{op("server", "set", "198.18.1.1@8000@198.18.2.1", "weight", fmt.Sprint(1+i%9))}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChangeAt100 is the same change in a configuration of one port
// with 100 servers.
func BenchmarkChangeAt100(b *testing.B) {
	e := benchEngine(b, 1, 1, 100, "", "5")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.apply([]config.Op{op("server", "set", "198.18.1.1@8000@198.18.2.1", "weight", fmt.Sprint(1+i%9))}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFirstVerdictsAt100000: 10 clusters × 100 ports × 100 servers
// and an advisor per port (1,000), one server in ten refusing: the
// engine's time to apply each server's first result, as a restart does
// (90,000 up, which change nothing the executor holds; 10,000 down, which
// update their ports). The probes are fakes that answer at once; only the
// time spent applying results is counted. With every result updating its
// port and each server walking all advisors this was 364 results/s.
func BenchmarkFirstVerdictsAt100000(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		fp := newFakeProber()
		for i := 0; i < 100; i += 10 {
			fp.down[netip.AddrFrom4([4]byte{198, 18, byte(2 + i/250), byte(1 + i%250)})] = true
		}
		e := benchEngineWith(b, func(o *Options) {
			o.NewAdvisor = func(lb.Advisor) (advisors.Advisor, error) { return fp, nil }
		}, 10, 100, 100, "", "5")
		var ops []config.Op
		for c := 0; c < 10; c++ {
			for p := 0; p < 100; p++ {
				ops = append(ops, op("advisor", "start", fmt.Sprintf("198.18.1.%d@%d", c+1, 8000+p), "advisor", "connect"))
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		e.ctx = ctx
		if _, err := e.apply(ops); err != nil {
			b.Fatal(err)
		}
		var spent time.Duration
		verdicts := 0
		for n := 0; verdicts < 100000; n++ {
			<-e.health.Ready()
			start := time.Now()
			e.onProbes()
			spent += time.Since(start)
			if n%10 == 0 {
				verdicts = 0
				e.health.Each(func(_ health.Key, h *health.State) {
					if h.State != lb.AdvisorUnknown {
						verdicts++
					}
				})
			}
		}
		cancel()
		e.health.Stop()
		b.ReportMetric(spent.Seconds(), "s-applying")
		b.ReportMetric(100000/spent.Seconds(), "results/s")
	}
}
