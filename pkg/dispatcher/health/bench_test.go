package health

import (
	"context"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/dlbproject/dlb/advisors"
	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/testutil"
)

// BenchmarkProbedServers5000 probes 5,000 servers (loopback addresses, one
// listener) with the real connect advisor every second and reports what
// the monitor holds per probed server once every server has had a few
// results: heap and goroutine stacks, after a collection. At 100,000
// servers this is what dlbd's memory grows by.
func BenchmarkProbedServers5000(b *testing.B) {
	const n = 5000
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	testutil.AcceptAndClose(b, ln)
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	for i := 0; i < b.N; i++ {
		a := lb.NewAdvisor("connect", netip.Addr{}, 80)
		a.Interval = 1
		want := map[Key]Spec{}
		for j := 0; j < n; j++ {
			k := Key{Advisor: a.Key(), Addr: netip.AddrFrom4([4]byte{198, 18, byte(j >> 8), byte(j)}), Port: 80}
			// Every key probes the one listener; the keys differ.
			want[k] = Spec{Advisor: a, Target: advisors.Target{Address: netip.MustParseAddr("127.0.0.1"), Port: port}}
		}
		before := memInUse()
		m := NewMonitor(func(a lb.Advisor) (advisors.Advisor, error) { return advisors.New(a.Name) })
		ctx, cancel := context.WithCancel(context.Background())
		if errs := m.Sync(ctx, want, nil); len(errs) > 0 {
			b.Fatal(errs)
		}
		// Every server three results: up, and its loop idle between probes.
		deadline := time.Now().Add(30 * time.Second)
		for done := 0; done < n; {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d servers had three results in 30 s", done, n)
			}
			select {
			case <-m.Ready():
			case <-time.After(time.Second):
				continue
			}
			for _, r := range m.Take(512) {
				if _, _, ok := m.Record(r); !ok {
					continue
				}
				if h := m.State(r.Key); h.Probes == 3 {
					if h.State != lb.AdvisorUp {
						b.Fatalf("%v: %s (%s)", r.Key, h.State, h.Last.Reason)
					}
					done++
				}
			}
		}
		per := float64(memInUse()-before) / n
		cancel()
		m.Stop()
		b.ReportMetric(per, "B/server")
	}
}

// memInUse is the heap and stack memory in use after a collection.
func memInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}
