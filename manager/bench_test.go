package manager

import (
	"github.com/dlbproject/dlb/pkg/lb"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// benchPorts returns ports × perPort servers with realistic inputs: weights
// 1..20, connections roughly in proportion to weight with ±50% spread,
// advisor loads 20..400 ms and metric loads 10..90, most fresh, some stale
// or missing, one server in twenty out of service, one in fifty fixed.
func benchPorts(ports, perPort int) [][]Server {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([][]Server, ports)
	for i := range out {
		servers := make([]Server, perPort)
		for j := range servers {
			w := 1 + rng.IntN(20)
			s := Server{
				Key:        strconv.Itoa(i) + "/" + strconv.Itoa(j),
				Weight:     w,
				Configured: 10,
				Fixed:      rng.IntN(50) == 0,
				Active:     uint64(w * (50 + rng.IntN(100))),
				New:        uint64(w * (5 + rng.IntN(25))),
				Advisor:    Sample{Value: 20 + 380*rng.Float64(), At: t0.Add(-time.Duration(rng.IntN(4000)) * time.Millisecond)},
				Metric:     Sample{Value: 10 + 80*rng.Float64(), At: t0.Add(-time.Duration(rng.IntN(8000)) * time.Millisecond)},
			}
			if rng.IntN(20) == 0 {
				s.State = lb.ServerFailed
			}
			if rng.IntN(30) == 0 {
				s.Metric = Sample{}
			}
			servers[j] = s
		}
		out[i] = servers
	}
	return out
}

var sink Result

// BenchmarkCompute10000 is one manager cycle of 1,000 ports with 10 servers
// each: one op is 1,000 calls of Compute.
func BenchmarkCompute10000(b *testing.B) {
	ports := benchPorts(1000, 10)
	p := DefaultParams()
	p.Proportions = lb.Proportions{Active: 30, New: 30, Port: 20, System: 20}
	b.ReportAllocs()
	for b.Loop() {
		for _, servers := range ports {
			sink = Compute(p, servers, t0)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/server")
}
