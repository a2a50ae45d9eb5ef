// Package health runs the advisors' probes and keeps their verdicts: one
// probe loop per advisor, server and port (loops.Repeat: only a timer
// between probes), and IBM's rise/fall hysteresis over the results. The
// engine says which probes the configuration wants (Wanted, Sync) and
// hands every result back to Record on its management goroutine; Record
// says when a server changed state.
package health

import (
	"context"
	"net/netip"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/advisors"
	"github.com/dlbproject/dlb/internal/compact"
	"github.com/dlbproject/dlb/pkg/dispatcher/loops"
	"github.com/dlbproject/dlb/pkg/lb"
)

// Key names one advisor's probes of one server: the advisor's key, the
// server's address and the port probed. A server balanced on the same
// port by several clusters is probed once.
type Key struct {
	Advisor string
	Addr    netip.Addr
	Port    uint16
}

// Spec is everything a probe loop needs; a changed spec restarts it.
type Spec struct {
	Advisor lb.Advisor
	Target  advisors.Target
}

func sameSpec(a, b Spec) bool {
	return a.Target == b.Target && a.Advisor.Key() == b.Advisor.Key() && a.Advisor.Interval == b.Advisor.Interval &&
		a.Advisor.ConnectTimeout == b.Advisor.ConnectTimeout && a.Advisor.ReceiveTimeout == b.Advisor.ReceiveTimeout &&
		a.Advisor.Retries == b.Advisor.Retries && a.Advisor.Rise == b.Advisor.Rise && a.Advisor.Fall == b.Advisor.Fall &&
		a.Advisor.Program == b.Advisor.Program && a.Advisor.Mode == b.Advisor.Mode && slices.Equal(a.Advisor.Args, b.Advisor.Args)
}

// Wanted lists the probes cfg calls for on the given port numbers (nil:
// every port).
func Wanted(cfg lb.Config, ports map[uint16]bool) map[Key]Spec {
	want := map[Key]Spec{}
	for _, a := range cfg.Advisors {
		if ports != nil && !ports[a.Port] {
			continue
		}
		for _, cl := range cfg.Clusters {
			p := cl.Port(a.Port)
			if p == nil || !a.Covers(cl.Address, a.Port) {
				continue
			}
			for _, s := range p.Servers {
				k := Key{Advisor: a.Key(), Addr: s.Address, Port: a.Port}
				if _, ok := want[k]; ok {
					continue // the same server under another cluster: one probe serves both
				}
				// A NAT server listens on its mapport; the advisor probes
				// it there, at its own address.
				port := a.Port
				if p.Method == lb.NAT && s.MapPort != 0 {
					port = s.MapPort
				}
				// Probes leave from the NFA of the server's family, as
				// IBM's advisors do: the kernel would choose the most
				// specific address, which can be a cluster address the
				// servers hold themselves (an IPv6 /128), and a server
				// answers such a probe to itself.
				src := cfg.Executor.NFAFor(s.Address)
				want[k] = Spec{Advisor: a, Target: advisors.Target{
					Address: s.Address, Port: port, Source: src, Cluster: cl.Address,
					ConnectTimeout: seconds(a.ConnectTimeout), ReceiveTimeout: seconds(a.ReceiveTimeout),
					Request: s.AdvisorRequest, Response: s.AdvisorResponse,
				}}
			}
		}
	}
	return want
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Result is one probe's result, from its loop.
type Result struct {
	Key Key
	Gen uint64
	Res advisors.Result
	At  time.Time
}

// State is an advisor's verdict on one server, with IBM's rise/fall
// hysteresis: a server changes state only after Rise (or Fall) results in
// a row, except for its very first result, which decides at once.
type State struct {
	State          lb.AdvisorState
	okRun, failRun int
	// Last and LastAt are the last result and when it came; Since when the
	// server entered its state.
	Last          advisors.Result
	LastAt, Since time.Time
	// Probes and Fails count results and failed ones; Local counts the
	// results that said nothing of the server (advisors.Result.Local),
	// which count in neither and change nothing else.
	Probes, Fails, Local uint64
	// recent holds the loads (ms) of the last up results, newest at
	// recent[(nRecent-1)%len(recent)]; a down result empties it.
	recent  [loadWindow]float64
	nRecent int
}

// loadWindow is how many up results the advisor load given to the manager
// is the lowest of. A probe's time is the backend's reply time plus
// whatever the dispatcher, the backend's scheduler and the path added on
// the way, and that addition is never negative: a busy dispatcher makes
// probes slower, never faster. So the lowest of the last few results is
// the best estimate of what the backend itself takes. One or two probes
// that met a scheduler hiccup do not move weights; a backend that is
// really slow is slow on every probe and shows after loadWindow of them.
// (The median of 3, used before, let two hiccups in a row through: in CI,
// medians of 9–19 ms against 1 ms on idle backends moved weights of a
// settled port.)
const loadWindow = 3

// record remembers an up result's load, or forgets all on a down one.
func (h *State) record(r advisors.Result) {
	if !r.Up {
		h.nRecent = 0
		return
	}
	h.recent[h.nRecent%loadWindow] = float64(r.LoadMS())
	h.nRecent++
}

// Load is the lowest of the remembered loads, and false when there are
// none.
func (h *State) Load() (float64, bool) {
	n := min(h.nRecent, loadWindow)
	if n == 0 {
		return 0, false
	}
	return slices.Min(h.recent[:n]), true
}

// Monitor runs the probe loops and keeps the servers' states.
type Monitor struct {
	loops      *loops.Set[Key, Spec]
	states     map[Key]*State
	results    *loops.Queue[Result]
	limit      *loops.Limiter
	newAdvisor func(lb.Advisor) (advisors.Advisor, error)
}

// NewMonitor returns a monitor building each probe's advisor with
// newAdvisor.
func NewMonitor(newAdvisor func(lb.Advisor) (advisors.Advisor, error)) *Monitor {
	m := &Monitor{states: map[Key]*State{}, results: loops.NewQueue[Result](), newAdvisor: newAdvisor, limit: loops.NewLimiter(probeLimit())}
	m.loops = loops.New(m.start, sameSpec)
	return m
}

// Ready receives when probe results wait to be taken.
func (m *Monitor) Ready() <-chan struct{} { return m.results.Ready() }

// Take returns the oldest waiting results, at most n; the owner hands
// each to Record. A server is probed again only once its result was
// taken: an owner that falls behind slows the probes down.
func (m *Monitor) Take(n int) []Result { return m.results.Take(n) }

// Sync starts, restarts and stops probe loops to match want, for the
// ports in ports (nil: all); it forgets the states of servers no probe
// covers any more. It returns the probes that could not start.
func (m *Monitor) Sync(ctx context.Context, want map[Key]Spec, ports map[uint16]bool) map[Key]error {
	in := func(k Key) bool { return ports == nil || ports[k.Port] }
	errs := m.loops.Sync(ctx, want, in)
	forgot := 0
	for k := range m.states {
		if _, ok := want[k]; !ok && in(k) {
			delete(m.states, k)
			forgot++
		}
	}
	m.states = compact.Map(m.states, forgot)
	for k := range want {
		if m.states[k] == nil && errs[k] == nil {
			m.states[k] = &State{State: lb.AdvisorUnknown, Since: time.Now()}
		}
	}
	return errs
}

// Running reports whether any probe runs.
func (m *Monitor) Running() bool { return m.loops.Len() > 0 }

// Stop stops every probe loop.
func (m *Monitor) Stop() { m.loops.StopAll() }

// State returns the state of k (nil if no probe covers it).
func (m *Monitor) State(k Key) *State { return m.states[k] }

// Each calls f with every probed server's state.
func (m *Monitor) Each(f func(Key, *State)) {
	for k, s := range m.states {
		f(k, s)
	}
}

// maxProbes bounds the probes under way at once. Probes wait for
// answers, so many run together: 100,000 servers every 5 s at 1 ms each
// are 20 at a time; but a burst (100,000 probes due together, on a
// dispatcher that ran them late) ran 58,550 at once, 2.5 GB of goroutine
// stacks, and ran out of descriptors. 16,384 probes that wait their whole
// 4 s (connect and receive timeout) still make 4,096 a second.
const maxProbes = 16384

// probeLimit is maxProbes, or half of this process's descriptors if that
// is fewer (each probe holds a socket): probes that find no descriptor
// are not made at all.
func probeLimit() int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil || lim.Cur/2 >= maxProbes {
		return maxProbes
	}
	return max(int(lim.Cur/2), 64)
}

func (m *Monitor) start(ctx context.Context, k Key, s Spec, gen uint64) error {
	adv, err := m.newAdvisor(s.Advisor)
	if err != nil {
		return err
	}
	interval := seconds(s.Advisor.Interval)
	loops.Repeat(ctx, loops.Spread(m.loops.Starting(), interval), interval, func(ctx context.Context, next func()) {
		m.limit.Go(func() { m.probe(ctx, k, gen, adv, s, next) })
	})
	return nil
}

// probe probes one server, with the advisor's retries, and queues the
// result with next (unless ctx ended: the loop was stopped).
func (m *Monitor) probe(ctx context.Context, k Key, gen uint64, adv advisors.Advisor, spec Spec, next func()) {
	if ctx.Err() != nil {
		return // stopped while it waited for its turn
	}
	var res advisors.Result
	for try := 0; try <= spec.Advisor.Retries; try++ {
		deadline := spec.Target.ConnectTimeoutOrDefault() + spec.Target.ReceiveTimeoutOrDefault()
		pctx, cancel := context.WithTimeout(ctx, deadline)
		start := time.Now()
		res = adv.Probe(pctx, spec.Target)
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
	m.results.Put(Result{Key: k, Gen: gen, Res: res, At: time.Now()}, next)
}

// Record applies a result: rise/fall. It returns the state before and
// after, and false when the result came from a loop stopped since (it is
// then ignored). A result that says nothing of the server (Local) changes
// no state.
func (m *Monitor) Record(r Result) (from, to lb.AdvisorState, ok bool) {
	h := m.states[r.Key]
	spec, running := m.loops.Spec(r.Key)
	if !running || !m.loops.Current(r.Key, r.Gen) || h == nil {
		return 0, 0, false
	}
	if r.Res.Local {
		// The probe could not be made (this host's source address or
		// route is missing, it is out of descriptors, ...): the server
		// keeps its state, which only a probe that reached it may
		// change. Taking every server down because the dispatcher lost
		// its own address or route would stop the service.
		h.Local++
		h.Last, h.LastAt = r.Res, r.At
		return h.State, h.State, true
	}
	h.Probes++
	h.Last, h.LastAt = r.Res, r.At
	h.record(r.Res)
	if !r.Res.Up {
		h.Fails++
	}
	old := h.State
	switch {
	case r.Res.Up:
		h.okRun, h.failRun = h.okRun+1, 0
		if old == lb.AdvisorUnknown || (old == lb.AdvisorDown && h.okRun >= spec.Advisor.Rise) {
			h.State = lb.AdvisorUp
		}
	default:
		h.okRun, h.failRun = 0, h.failRun+1
		if old == lb.AdvisorUnknown || (old == lb.AdvisorUp && h.failRun >= spec.Advisor.Fall) {
			h.State = lb.AdvisorDown
		}
	}
	if h.State != old {
		h.Since = r.At
	}
	return old, h.State, true
}
