package dispatcher

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
)

// benchEngine is an engine on fakes with 100 clusters × 10 ports × 10
// servers (10,000 servers), the manager started, and live connection
// counts for every server. Its Maglev tables have m slots.
func benchEngine(b *testing.B, m uint32) *Engine {
	b.Helper()
	nif := newFakeNetif()
	for i := 0; i < 10; i++ {
		nif.macs[netip.AddrFrom4([4]byte{198, 18, 2, byte(10 + i)})] = net.HardwareAddr{2, 0, 0, 2, 0, byte(i)}
	}
	dp := &fakeDatapath{maglev: m}
	e, err := New(Options{
		StateDir:     b.TempDir(),
		OpenDatapath: func() (Datapath, error) { return dp, nil },
		Netif:        nif,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		MaxServices:  4096, MaxBackends: 16384,
	})
	if err != nil {
		b.Fatal(err)
	}
	start := op("executor", "start", "")
	start.Interface = str("eth0")
	ops := []api.Op{start}
	for c := 0; c < 100; c++ {
		vip := fmt.Sprintf("198.18.1.%d", c+1)
		ops = append(ops, op("cluster", "add", vip))
		for p := 0; p < 10; p++ {
			ops = append(ops, op("port", "add", fmt.Sprintf("%s@%d", vip, 8000+p)))
		}
	}
	var servers string
	for i := 0; i < 10; i++ {
		if i > 0 {
			servers += "+"
		}
		servers += fmt.Sprintf("198.18.2.%d", 10+i)
	}
	add := op("server", "add", "@@"+servers)
	add.Weight = num(10)
	ops = append(ops, add, op("manager", "start", ""))
	if _, err := e.apply(ops); err != nil {
		b.Fatal(err)
	}
	return e
}

// setLoads gives every server a random live load, as a refresh would.
func setLoads(e *Engine, rng *rand.Rand) {
	for _, r := range e.backends {
		r.actv, r.newc = uint64(rng.IntN(200)), uint64(rng.IntN(50))
	}
}

// BenchmarkManagerCycle10000 is one manager cycle over 1,000 ports × 10
// servers in steady state: the loads move a little, so weights change by
// less than the sensitivity and nothing is pushed. The goal is < 50 ms.
func BenchmarkManagerCycle10000(b *testing.B) {
	e := benchEngine(b, 251)
	rng := rand.New(rand.NewPCG(1, 2))
	e.cfg.Manager.Refresh = 1 << 30 // the fake executor has no counters to read
	now := time.Now()
	e.managerCycle(now) // creates the runtime records
	for _, r := range e.backends {
		r.actv, r.newc = 100, 20
	}
	e.managerCycle(now) // settle
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, r := range e.backends {
			r.actv, r.newc = 100+uint64(rng.IntN(3)), 20+uint64(rng.IntN(2))
		}
		e.managerCycle(now)
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/cycle")
}

// BenchmarkManagerCyclePushAll is the worst case: every port's weights
// change in one cycle, so all 1,000 Maglev tables (65537 slots) are rebuilt
// and handed to the executor (a fake here: the map writes are not timed).
func BenchmarkManagerCyclePushAll(b *testing.B) {
	e := benchEngine(b, 65537)
	rng := rand.New(rand.NewPCG(3, 4))
	e.cfg.Manager.Refresh = 1 << 30
	e.cfg.Manager.Sensitivity = 0
	now := time.Now()
	e.managerCycle(now) // creates the runtime records
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		setLoads(e, rng)
		e.managerCycle(now)
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/cycle")
}
