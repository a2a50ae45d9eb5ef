package dispatcher

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"time"

	"github.com/dlbproject/dlb/advisors"
	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/lb"
)

// probeKey names one advisor's probes of one server: advisor key, server
// address and the port probed.
type probeKey struct {
	advisor string
	addr    netip.Addr
	port    uint16
}

// probeSpec is everything a probe loop needs; a changed spec restarts it.
type probeSpec struct {
	cfg    lb.Advisor
	target advisors.Target
}

// health is an advisor's verdict on one server, with IBM's rise/fall
// hysteresis: a server changes state only after Rise (or Fall) results in
// a row, except for its very first result, which decides at once.
type health struct {
	state          string // api.AdvisorUp, AdvisorDown or AdvisorUnknown
	okRun, failRun int
	last           advisors.Result
	lastAt, since  time.Time
	probes, fails  uint64
	// recent holds the loads (ms) of the last up results, newest at
	// recent[(nRecent-1)%len(recent)]; a down result empties it.
	recent  [loadWindow]float64
	nRecent int
}

// loadWindow is how many up results the advisor load given to the manager
// is the median of: one probe that met a scheduler hiccup on the dispatcher
// or the backend does not move weights, two slow ones in a row do.
const loadWindow = 3

// record remembers an up result's load, or forgets all on a down one.
func (h *health) record(r advisors.Result) {
	if !r.Up {
		h.nRecent = 0
		return
	}
	h.recent[h.nRecent%loadWindow] = float64(r.LoadMS())
	h.nRecent++
}

// load is the median of the remembered loads (the lower middle one of
// two), and false when there are none.
func (h *health) load() (float64, bool) {
	n := min(h.nRecent, loadWindow)
	if n == 0 {
		return 0, false
	}
	v := h.recent
	w := v[:n]
	slices.Sort(w)
	return w[(n-1)/2], true
}

// probeResult is a probe loop's message to the management goroutine.
type probeResult struct {
	key probeKey
	gen uint64
	res advisors.Result
	at  time.Time
}

// runningProbe is a started probe loop.
type runningProbe struct {
	spec   probeSpec
	gen    uint64
	cancel context.CancelFunc
}

// wantedProbes lists the probes cfg calls for.
func wantedProbes(cfg lb.Config) map[probeKey]probeSpec {
	want := map[probeKey]probeSpec{}
	for _, a := range cfg.Advisors {
		for _, cl := range cfg.Clusters {
			p := cl.Port(a.Port)
			if p == nil || !a.Covers(cl.Address, a.Port) {
				continue
			}
			for _, s := range p.Servers {
				k := probeKey{advisor: a.Key(), addr: s.Address, port: a.Port}
				if _, ok := want[k]; ok {
					continue // the same server under another cluster: one probe serves both
				}
				// A NAT server listens on its mapport; the advisor probes
				// it there, at its own address.
				port := a.Port
				if p.Method == lb.NAT && s.MapPort != 0 {
					port = s.MapPort
				}
				want[k] = probeSpec{cfg: a, target: advisors.Target{
					Address: s.Address, Port: port,
					ConnectTimeout: seconds(a.ConnectTimeout), ReceiveTimeout: seconds(a.ReceiveTimeout),
					Request: s.AdvisorRequest, Response: s.AdvisorResponse,
				}}
			}
		}
	}
	return want
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// reconcileProbes starts, restarts and stops probe loops to match cfg, and
// forgets the health of servers no advisor probes any more.
func (e *Engine) reconcileProbes(cfg lb.Config) {
	want := wantedProbes(cfg)
	for k, p := range e.probes {
		if spec, ok := want[k]; !ok || !reflect.DeepEqual(spec, p.spec) {
			p.cancel()
			delete(e.probes, k)
			if !ok {
				delete(e.health, k)
			}
		}
	}
	for k, spec := range want {
		if _, ok := e.probes[k]; ok {
			continue
		}
		adv, err := e.opts.NewAdvisor(spec.cfg)
		if err != nil {
			e.log.Error("starting advisor", "advisor", k.advisor, "err", err)
			continue
		}
		if e.health[k] == nil {
			e.health[k] = &health{state: api.AdvisorUnknown, since: time.Now()}
		}
		e.probeGen++
		ctx, cancel := context.WithCancel(e.ctx)
		e.probes[k] = &runningProbe{spec: spec, gen: e.probeGen, cancel: cancel}
		go e.probeLoop(ctx, k, e.probeGen, adv, spec)
	}
}

// newAdvisor builds the advisor a configuration names.
func newAdvisor(a lb.Advisor) (advisors.Advisor, error) {
	if a.Name == "exec" {
		mode := advisors.ExecNormal
		if a.Mode == "replace" {
			mode = advisors.ExecReplace
		}
		return &advisors.Exec{Program: a.Program, Args: a.Args, Mode: mode}, nil
	}
	return advisors.New(a.Name)
}

// probeLoop probes one server every interval (jittered by ±10 %, the first
// probe within the first interval, so that many servers are not probed in
// step) until ctx ends, and hands each result to the management goroutine.
func (e *Engine) probeLoop(ctx context.Context, k probeKey, gen uint64, adv advisors.Advisor, spec probeSpec) {
	interval := seconds(spec.cfg.Interval)
	wait := time.Duration(rand.Int64N(int64(min(interval, time.Second)) + 1))
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		var res advisors.Result
		for try := 0; try <= spec.cfg.Retries; try++ {
			deadline := spec.target.ConnectTimeoutOrDefault() + spec.target.ReceiveTimeoutOrDefault()
			pctx, cancel := context.WithTimeout(ctx, deadline)
			start := time.Now()
			res = adv.Probe(pctx, spec.target)
			cancel()
			if res.Up && res.Load == 0 {
				res.Load = time.Since(start)
			}
			if res.Up || ctx.Err() != nil {
				break
			}
		}
		if ctx.Err() != nil {
			return
		}
		select {
		case e.results <- probeResult{key: k, gen: gen, res: res, at: time.Now()}:
		case <-ctx.Done():
			return
		}
		wait = time.Duration(float64(interval) * (0.9 + 0.2*rand.Float64()))
	}
}

// onProbe applies a probe result on the management goroutine: rise/fall,
// events, and an immediate executor update when a server fails or comes
// back — failover does not wait for the manager's cycle.
func (e *Engine) onProbe(r probeResult) {
	p := e.probes[r.key]
	h := e.health[r.key]
	if p == nil || p.gen != r.gen || h == nil {
		return // a result of a probe loop that was stopped since
	}
	h.probes++
	h.last, h.lastAt = r.res, r.at
	h.record(r.res)
	if !r.res.Up {
		h.fails++
	}
	old := h.state
	switch {
	case r.res.Up:
		h.okRun, h.failRun = h.okRun+1, 0
		if old == api.AdvisorUnknown || (old == api.AdvisorDown && h.okRun >= p.spec.cfg.Rise) {
			h.state = api.AdvisorUp
		}
	default:
		h.okRun, h.failRun = 0, h.failRun+1
		if old == api.AdvisorUnknown || (old == api.AdvisorUp && h.failRun >= p.spec.cfg.Fall) {
			h.state = api.AdvisorDown
		}
	}
	if h.state == old {
		return
	}
	h.since = r.at
	e.log.Info("advisor changed a server's state", "advisor", r.key.advisor, "server", r.key.addr, "port", r.key.port,
		"from", old, "to", h.state, "reason", r.res.Reason)
	if old != api.AdvisorUnknown || h.state == api.AdvisorDown {
		ev := eventServerUp
		if h.state == api.AdvisorDown {
			ev = eventServerDown
		}
		e.emit(ev, map[string]string{
			"DLB_SERVER": r.key.addr.String(), "DLB_PORT": itoa(int(r.key.port)),
			"DLB_ADVISOR": r.key.advisor, "DLB_REASON": r.res.Reason,
		})
	}
	e.pushDataplane("advisor")
}

// pushDataplane writes the current state to the executor (if loaded) and
// raises or clears manager alerts.
func (e *Engine) pushDataplane(why string) {
	e.checkAlerts()
	if e.dp == nil {
		return
	}
	if err := e.dp.Apply(e.dataplane(e.cfg, e.ids)); err != nil {
		e.log.Error("applying to the executor", "after", why, "err", err)
	}
}
