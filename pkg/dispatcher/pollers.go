package dispatcher

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher/loops"
	"github.com/dlbproject/dlb/pkg/lb"
)

// pollers are the metric pollers, one per server address some cluster
// with metrics balances, and the servers' last reports.
type pollers struct {
	loops   *loops.Set[netip.Addr, pollerSpec]
	reports map[netip.Addr]*metricRT
	results *loops.Queue[metricResult]
	// refused counts refused or failed reports by reason.
	refused map[string]int64
}

func newPollers() *pollers {
	return &pollers{reports: map[netip.Addr]*metricRT{}, results: loops.NewQueue[metricResult](), refused: map[string]int64{}}
}

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

// pollerSpec is what a poller needs; a change restarts it. source is the
// address polls leave from: the NFA of the server's family, as IBM's
// manager does (the kernel's choice may be a cluster address, which the
// server holds itself); the zero Addr leaves the choice to the kernel.
type pollerSpec struct {
	server   lb.MetricServer
	names    []string
	interval time.Duration
	source   netip.Addr
}

func samePoller(a, b pollerSpec) bool {
	return a.server == b.server && a.interval == b.interval && a.source == b.source && slices.Equal(a.names, b.names)
}

// wantedPollers lists, per server address, the metric names some cluster
// of that server asks for.
func wantedPollers(cfg lb.Config) map[netip.Addr]pollerSpec {
	want := map[netip.Addr]pollerSpec{}
	for _, cl := range cfg.Clusters {
		if len(cl.Metrics) == 0 {
			continue
		}
		for _, p := range cl.Ports {
			for _, s := range p.Servers {
				spec := want[s.Address]
				spec.server, spec.interval = cfg.MetricServer, seconds(cfg.Manager.Interval)
				spec.source = cfg.Executor.NFAFor(s.Address)
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

// metricNames lists the metric names the clusters of cfg ask for, sorted.
func metricNames(cfg lb.Config) []string {
	var names []string
	for _, cl := range cfg.Clusters {
		for _, m := range cl.Metrics {
			if !slices.Contains(names, m) {
				names = append(names, m)
			}
		}
	}
	slices.Sort(names)
	return names
}

// metricCheck refuses a change that leaves metrics asked for which the
// metric source cannot fetch (Options.CheckMetrics). It checks when the
// change touches the metric settings or the names asked for: a change of
// anything else goes through whatever the metric settings are.
func (e *Engine) metricCheck(old, next lb.Config, ch config.Change) error {
	if e.opts.CheckMetrics == nil {
		return nil
	}
	names := metricNames(next)
	if len(names) == 0 || !ch.MetricServer && slices.Equal(names, metricNames(old)) {
		return nil
	}
	return e.opts.CheckMetrics(next.MetricServer, names)
}

// pollersTouched reports whether a change can change the pollers: a
// cluster with metrics (or that had some) touched, or the metric or
// manager settings.
func pollersTouched(old, next lb.Config, ch config.Change) bool {
	if ch.MetricServer || old.Manager.Interval != next.Manager.Interval || nfaChanged(old, next) {
		return true
	}
	for _, k := range ch.PortsTouched() {
		for _, cfg := range []lb.Config{old, next} {
			if cl := cfg.Cluster(k.Cluster); cl != nil && len(cl.Metrics) > 0 {
				return true
			}
		}
	}
	for a := range ch.Clusters {
		for _, cfg := range []lb.Config{old, next} {
			if cl := cfg.Cluster(a); cl != nil && len(cl.Metrics) > 0 {
				return true
			}
		}
	}
	return false
}

// syncPollers starts, restarts and stops metric pollers to match cfg.
func (e *Engine) syncPollers(cfg lb.Config) {
	want := wantedPollers(cfg)
	for a := range e.metrics.reports {
		if _, ok := want[a]; !ok {
			delete(e.metrics.reports, a)
		}
	}
	for a, err := range e.metrics.loops.Sync(e.ctx, want, nil) {
		e.metrics.reports[a] = &metricRT{err: err.Error()}
		e.log.Error("starting metric poller", "server", a, "err", err)
	}
}

func (e *Engine) startPoller(ctx context.Context, a netip.Addr, spec pollerSpec, gen uint64) error {
	if e.opts.NewMetricSource == nil {
		return errors.New("this dlbd has no metric sources")
	}
	fetch, err := e.opts.NewMetricSource(spec.server, a, spec.source, spec.names)
	if err != nil {
		return err
	}
	loops.Repeat(ctx, loops.Spread(e.metrics.loops.Starting(), spec.interval), spec.interval, func(ctx context.Context, next func()) { e.poll(ctx, a, gen, fetch, spec.interval, next) })
	return nil
}

// poll polls one server once and queues the report with next (unless ctx
// ended: the poller was stopped).
func (e *Engine) poll(ctx context.Context, addr netip.Addr, gen uint64, fetch MetricSource, interval time.Duration, next func()) {
	fctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
	values, at, err := fetch(fctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	e.metrics.results.Put(metricResult{addr: addr, gen: gen, values: values, at: at, err: err}, next)
}

// onMetric records a poller's result on the management goroutine. A
// refused or failed poll keeps the last good figures, which go stale and
// are then ignored by the manager — never read as zero load.
func (e *Engine) onMetric(r metricResult) {
	if !e.metrics.loops.Current(r.addr, r.gen) {
		return
	}
	m := e.metrics.reports[r.addr]
	if m == nil {
		m = &metricRT{}
		e.metrics.reports[r.addr] = m
	}
	if r.err != nil {
		e.metrics.refused[e.metricErrorClass(r.err)]++
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
func (e *Engine) metricSample(cl *lb.Cluster, server netip.Addr) (float64, time.Time) {
	m := e.metrics.reports[server]
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
