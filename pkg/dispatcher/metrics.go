package dispatcher

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
)

// metricRT is a server's last load report.
type metricRT struct {
	values map[string]float64
	at     time.Time // the report's own timestamp
	err    string
}

// metricResult is a metric poller's message to the management goroutine.
type metricResult struct {
	addr   netip.Addr
	gen    uint64
	values map[string]float64
	at     time.Time
	err    error
}

// metricPoller is a started poller of one server.
type metricPoller struct {
	spec   metricSpec
	gen    uint64
	cancel context.CancelFunc
}

// metricSpec is what a poller needs; a change restarts it.
type metricSpec struct {
	server   lb.MetricServer
	names    []string
	interval time.Duration
}

// wantedMetrics lists, per server address, the metric names some cluster
// of that server asks for.
func wantedMetrics(cfg lb.Config) map[netip.Addr]metricSpec {
	want := map[netip.Addr]metricSpec{}
	for _, cl := range cfg.Clusters {
		if len(cl.Metrics) == 0 {
			continue
		}
		for _, p := range cl.Ports {
			for _, s := range p.Servers {
				spec := want[s.Address]
				spec.server, spec.interval = cfg.MetricServer, seconds(cfg.Manager.Interval)
				for _, m := range cl.Metrics {
					if !slices.Contains(spec.names, m) {
						spec.names = append(spec.names, m)
					}
				}
				slices.Sort(spec.names)
				want[s.Address] = spec
			}
		}
	}
	return want
}

// reconcileMetrics starts, restarts and stops metric pollers to match cfg.
func (e *Engine) reconcileMetrics(cfg lb.Config) {
	want := wantedMetrics(cfg)
	for a, p := range e.pollers {
		if spec, ok := want[a]; !ok || !reflect.DeepEqual(spec, p.spec) {
			p.cancel()
			delete(e.pollers, a)
			if !ok {
				delete(e.metrics, a)
			}
		}
	}
	for a, spec := range want {
		if _, ok := e.pollers[a]; ok {
			continue
		}
		var fetch MetricSource
		err := errors.New("this dlbd has no metric sources")
		if e.opts.NewMetricSource != nil {
			fetch, err = e.opts.NewMetricSource(spec.server, a, spec.names)
		}
		if err != nil {
			e.metrics[a] = &metricRT{err: err.Error()}
			e.log.Error("starting metric poller", "server", a, "err", err)
			continue
		}
		e.probeGen++
		ctx, cancel := context.WithCancel(e.ctx)
		e.pollers[a] = &metricPoller{spec: spec, gen: e.probeGen, cancel: cancel}
		go e.metricLoop(ctx, a, e.probeGen, fetch, spec.interval)
	}
}

// MetricSource fetches one server's load report: metric name → 0..100,
// and the report's timestamp.
type MetricSource func(ctx context.Context) (map[string]float64, time.Time, error)

// metricLoop polls one server once per manager interval until ctx ends.
func (e *Engine) metricLoop(ctx context.Context, addr netip.Addr, gen uint64, fetch MetricSource, interval time.Duration) {
	wait := time.Duration(rand.Int64N(int64(min(interval, time.Second)) + 1))
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		fctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
		values, at, err := fetch(fctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		select {
		case e.metricResults <- metricResult{addr: addr, gen: gen, values: values, at: at, err: err}:
		case <-ctx.Done():
			return
		}
		wait = time.Duration(float64(interval) * (0.9 + 0.2*rand.Float64()))
	}
}

// onMetric records a poller's result on the management goroutine. A
// refused or failed poll keeps the last good figures, which go stale and
// are then ignored by the manager — never read as zero load.
func (e *Engine) onMetric(r metricResult) {
	p := e.pollers[r.addr]
	if p == nil || p.gen != r.gen {
		return
	}
	m := e.metrics[r.addr]
	if m == nil {
		m = &metricRT{}
		e.metrics[r.addr] = m
	}
	if r.err != nil {
		e.metricRefused[e.metricErrorClass(r.err)]++
		if m.err != r.err.Error() {
			e.log.Warn("metric server refused or failed", "server", r.addr, "err", r.err)
		}
		m.err = r.err.Error()
		return
	}
	m.values, m.at, m.err = r.values, r.at, ""
}

// metricSample is the cluster's system load for a server: the mean of the
// cluster's metrics in the server's last report, and the report's time.
func (e *Engine) metricSample(cl lb.Cluster, server netip.Addr) (float64, time.Time) {
	m := e.metrics[server]
	if m == nil || m.at.IsZero() || len(cl.Metrics) == 0 {
		return 0, time.Time{}
	}
	var sum float64
	n := 0
	for _, name := range cl.Metrics {
		if v, ok := m.values[name]; ok {
			sum += v
			n++
		}
	}
	if n == 0 {
		return 0, time.Time{}
	}
	return sum / float64(n), m.at
}

// metricErrorClass names the class of a refused or failed report for the
// report's counters.
func (e *Engine) metricErrorClass(err error) string {
	if e.opts.MetricErrorClass != nil {
		if c := e.opts.MetricErrorClass(err); c != "" {
			return c
		}
	}
	return "failed"
}
