// Package dispatcher is dlb's engine. It holds the desired state (an
// lb.Config), applies operators' changes to it all or none, reconciles the
// executor and the host's addresses with it, persists it, and reports.
//
// One management goroutine (Run) owns all state: API calls, timer ticks and
// neighbour refreshes are closures executed on it, in order, so that nothing
// needs a lock. The engine reaches the kernel only through the Datapath and
// Netif interfaces; cmd/dlbd fills them with pkg/datapath and pkg/netif,
// tests with fakes.
package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strconv"
	"time"

	"github.com/dlbproject/dlb/advisors"
	"github.com/dlbproject/dlb/pkg/lb"
)

// Datapath is the executor as the engine drives it.
type Datapath interface {
	// Attach attaches the program to an interface (or keeps an adopted
	// attachment) and returns the mode used (lb.XDPAuto: unknown).
	Attach(ifindex int, mode lb.XDPMode) (lb.XDPMode, error)
	// Attached reports the current attachment.
	Attached() (lb.Attachment, bool)
	// Apply makes the executor's maps hold the given state.
	Apply(lb.Dataplane) error
	// Stats reads the counters.
	Stats() (lb.DataplaneStats, error)
	// Sweep expires idle connections and counts active ones.
	Sweep() (lb.SweepResult, error)
	// DropAffinity removes the affinity records naming a backend and
	// returns how many it removed.
	DropAffinity(backend uint32) (int, error)
	// MaglevSize and the capacities report sizes fixed at load; PinDir
	// where the objects are pinned.
	MaglevSize() uint32
	ConnTableCapacity() uint32
	NATTableCapacity() uint32
	HalfOpenTableCapacity() uint32
	AffinityTableCapacity() uint32
	PinDir() string
	// Close releases the executor and keeps it pinned and forwarding.
	Close() error
	// Remove detaches and unpins the executor.
	Remove() error
}

// Netif is the host networking the engine needs.
type Netif interface {
	// LinkByName looks up an interface.
	LinkByName(name string) (lb.Link, error)
	// Neighbors says how each address is reached, starting resolution of
	// the MACs it does not know yet.
	Neighbors(addrs []netip.Addr) (map[netip.Addr]lb.Neighbor, map[netip.Addr]error)
	// AddAddress and DelAddress put a cluster address on an interface and
	// take it off.
	AddAddress(ifname string, addr netip.Addr) error
	DelAddress(ifname string, addr netip.Addr) error
}

// Options configure an Engine.
type Options struct {
	// StateDir is where the state file lives.
	StateDir string
	// OpenDatapath loads (or adopts) the executor.
	OpenDatapath func() (Datapath, error)
	// Netif is the host's networking.
	Netif Netif
	// Logger receives the engine's log; slog.Default() when nil.
	Logger *slog.Logger
	// MaxServices and MaxBackends bound the ids the engine hands out (the
	// executor's map sizes).
	MaxServices, MaxBackends uint32
	// TickInterval is how often neighbours are refreshed (default 1 s);
	// SweepInterval how often the connection table is swept (default 2 s).
	TickInterval, SweepInterval time.Duration
	// ResolveWait bounds how long a change waits for new servers' MAC
	// addresses to resolve before it is applied without them (default 1 s).
	ResolveWait time.Duration
	// ScriptsDir holds the operator's event scripts (serverDown, serverUp,
	// managerAlert, managerClear, halfOpenAlert, halfOpenAlertDone); empty
	// runs none. ScriptTimeout bounds each run (default 10 s).
	ScriptsDir    string
	ScriptTimeout time.Duration
	// NewMetricSource builds the poller of one server's load agent; nil
	// makes "metric add" refuse to start pollers (logged).
	NewMetricSource func(ms lb.MetricServer, server netip.Addr, names []string) (MetricSource, error)
	// NewAdvisor builds the probe an advisor configuration names; the
	// default is package advisors' (tests substitute fakes).
	NewAdvisor func(lb.Advisor) (advisors.Advisor, error)
	// MetricErrorClass names the class of a refused or failed metric report
	// ("unauthenticated", "replayed", ...) for "dlbctl metric report";
	// "failed" when nil or it returns "".
	MetricErrorClass func(error) string
}

// Engine is the dispatcher's engine. Create it with New, run it with Run.
type Engine struct {
	opts Options
	log  *slog.Logger
	mgmt chan func()

	cfg lb.Config
	ids ids

	dp           Datapath // nil while the executor is not loaded
	attachedMode lb.XDPMode
	execErr      error // why the executor is not up, if it is not

	neigh    map[netip.Addr]lb.Neighbor
	neighErr map[netip.Addr]error
	tables   map[uint32]table
	sweep    lb.SweepResult
	// configured maps cluster addresses the engine put on an interface to
	// that interface.
	configured map[netip.Addr]string

	// ctx lives as long as Run; probe and metric loops hang off it.
	ctx context.Context
	// The manager: per-backend weights and inputs, per-port results.
	backends map[lb.BackendKey]*backendRT
	ports    map[lb.ServiceKey]*portRT
	cycles   uint64
	// The advisors: probe loops, their results and the servers' health.
	probes   map[probeKey]*runningProbe
	health   map[probeKey]*health
	results  chan probeResult
	probeGen uint64
	// The metric servers: pollers, results and the last reports.
	pollers       map[netip.Addr]*metricPoller
	metrics       map[netip.Addr]*metricRT
	metricResults chan metricResult
	// metricRefused counts refused or failed metric reports by reason.
	metricRefused map[string]int64
	// events waiting for their scripts.
	events chan event
}

// ErrStopped is returned by calls made after Run returned.
var ErrStopped = errors.New("engine stopped")

// New loads the persisted state from opts.StateDir and, if the executor
// was started, brings it up again (adopting pinned objects, so forwarding
// never stopped). A failure to bring the executor up is logged and
// reported, not fatal: the operator can fix it through the API.
func New(opts Options) (*Engine, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.TickInterval == 0 {
		opts.TickInterval = time.Second
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = 2 * time.Second
	}
	if opts.ResolveWait == 0 {
		opts.ResolveWait = time.Second
	}
	if opts.NewAdvisor == nil {
		opts.NewAdvisor = newAdvisor
	}
	if opts.ScriptTimeout == 0 {
		opts.ScriptTimeout = 10 * time.Second
	}
	if opts.MaxServices == 0 || opts.MaxBackends == 0 {
		return nil, errors.New("creating engine: MaxServices and MaxBackends must be set")
	}
	e := &Engine{
		opts:          opts,
		log:           opts.Logger,
		mgmt:          make(chan func()),
		neigh:         map[netip.Addr]lb.Neighbor{},
		neighErr:      map[netip.Addr]error{},
		tables:        map[uint32]table{},
		configured:    map[netip.Addr]string{},
		ctx:           context.Background(),
		backends:      map[lb.BackendKey]*backendRT{},
		ports:         map[lb.ServiceKey]*portRT{},
		probes:        map[probeKey]*runningProbe{},
		health:        map[probeKey]*health{},
		results:       make(chan probeResult, 64),
		pollers:       map[netip.Addr]*metricPoller{},
		metrics:       map[netip.Addr]*metricRT{},
		metricResults: make(chan metricResult, 64),
		metricRefused: map[string]int64{},
		events:        make(chan event, maxQueuedEvents),
	}
	st, err := loadState(opts.StateDir)
	if err != nil {
		return nil, err
	}
	e.cfg, e.ids, e.attachedMode = st.Config, st.IDs, st.AttachedMode
	for a, ifname := range st.Configured {
		e.configured[a] = ifname
	}
	if e.cfg.Executor.Started {
		if err := e.reconcile(e.cfg, e.ids, nil); err != nil {
			e.execErr = err
			e.log.Error("bringing up the executor from saved state", "err", err)
		} else {
			e.log.Info("executor restored", "interface", e.cfg.Executor.Interface)
		}
	}
	return e, nil
}

// Run executes the engine's management loop until ctx is done. It then
// releases the executor, which stays pinned and keeps forwarding.
func (e *Engine) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e.ctx = ctx
	go e.runEvents(ctx)
	e.reconcileProbes(e.cfg)
	e.reconcileMetrics(e.cfg)
	// Sweep once now: the counts the reports show (connections, active
	// per server, half-open) come from the latest sweep, and after a
	// restart the adopted tables are full of connections.
	e.sweepConns()
	e.checkAlerts()

	tick := time.NewTicker(e.opts.TickInterval)
	defer tick.Stop()
	sweep := time.NewTicker(e.opts.SweepInterval)
	defer sweep.Stop()
	cycle := time.NewTimer(seconds(e.cfg.Manager.Interval))
	defer cycle.Stop()
	for {
		select {
		case r := <-e.results:
			e.onProbe(r)
		case r := <-e.metricResults:
			e.onMetric(r)
		case now := <-cycle.C:
			if e.cfg.Manager.Started {
				e.managerCycle(now)
			}
			cycle.Reset(seconds(e.cfg.Manager.Interval))
		case <-ctx.Done():
			for _, p := range e.probes {
				p.cancel()
			}
			for _, p := range e.pollers {
				p.cancel()
			}
			if e.dp != nil {
				if err := e.dp.Close(); err != nil {
					e.log.Error("releasing the executor", "err", err)
				}
				e.dp = nil
			}
			close(e.mgmt)
			return
		case f := <-e.mgmt:
			f()
		case <-tick.C:
			e.refreshNeighbors()
		case <-sweep.C:
			e.sweepConns()
		}
	}
}

// do runs f on the management goroutine and waits for it.
func (e *Engine) do(ctx context.Context, f func()) (err error) {
	done := make(chan struct{})
	defer func() {
		if recover() != nil { // mgmt closed: Run returned
			err = ErrStopped
		}
	}()
	select {
	case e.mgmt <- func() { f(); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	}
	<-done
	return nil
}

// sweepConns expires idle connections and records the active counts.
func (e *Engine) sweepConns() {
	if e.dp == nil {
		return
	}
	res, err := e.dp.Sweep()
	if err != nil {
		e.log.Warn("sweeping the connection table", "err", err)
		return
	}
	e.sweep = res
	if res.Expired > 0 {
		e.log.Debug("swept connections", "expired", res.Expired, "left", res.Entries)
	}
	e.checkHalfOpen()
}

// checkHalfOpen compares every port's half-open connections with its
// maxhalfopen and raises halfOpenAlert when they go above it, and
// halfOpenAlertDone when they are back at or below it (or the threshold
// was removed).
func (e *Engine) checkHalfOpen() {
	for _, cl := range e.cfg.Clusters {
		for _, p := range cl.Ports {
			sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			n := e.sweep.HalfOpen[e.ids.Services[sk.String()]]
			prt := e.port(sk)
			alert := p.MaxHalfOpen > 0 && n > uint64(p.MaxHalfOpen)
			if alert == prt.halfOpenAlert {
				continue
			}
			prt.halfOpenAlert = alert
			ev := eventHalfOpenDone
			if alert {
				ev = eventHalfOpenAlert
				e.log.Warn("half-open connections above maxhalfopen: a SYN flood?", "cluster", cl.Address, "port", p.Number,
					"half_open", n, "max_half_open", p.MaxHalfOpen)
			}
			e.emit(ev, map[string]string{
				"DLB_CLUSTER": cl.Address.String(), "DLB_PORT": itoa(int(p.Number)),
				"DLB_HALFOPEN": strconv.FormatUint(n, 10), "DLB_MAXHALFOPEN": itoa(int(p.MaxHalfOpen)),
			})
		}
	}
}

// refreshNeighbors re-reads how every server is reached and pushes a
// changed MAC (or a newly resolved one) to the executor.
func (e *Engine) refreshNeighbors() {
	if e.dp == nil {
		return
	}
	if !e.updateNeighbors(nextHops(e.cfg)) {
		return
	}
	if err := e.dp.Apply(e.dataplane(e.cfg, e.ids)); err != nil {
		e.log.Error("applying refreshed neighbours", "err", err)
	}
}

// updateNeighbors refreshes the neighbour cache for addrs and reports
// whether anything the executor uses changed.
func (e *Engine) updateNeighbors(addrs []netip.Addr) bool {
	if len(addrs) == 0 {
		return false
	}
	got, errs := e.opts.Netif.Neighbors(addrs)
	changed := false
	for _, a := range addrs {
		old, had := e.neigh[a]
		nb, ok := got[a]
		if !ok {
			if err := errs[a]; err != nil {
				if prev := e.neighErr[a]; prev == nil || prev.Error() != err.Error() {
					e.log.Warn("next hop unreachable", "address", a, "err", err)
				}
				e.neighErr[a] = err
			}
			continue
		}
		delete(e.neighErr, a)
		if nb.MAC == nil && had && old.MAC != nil && old.Ifindex == nb.Ifindex {
			nb.MAC = old.MAC // keep the last known MAC while it re-resolves
		}
		if !had || old.Ifindex != nb.Ifindex || old.MAC.String() != nb.MAC.String() || old.IfMAC.String() != nb.IfMAC.String() {
			if nb.MAC != nil && (!had || old.MAC.String() != nb.MAC.String()) {
				e.log.Info("next hop resolved", "address", a, "mac", nb.MAC.String(), "ifindex", nb.Ifindex)
			}
			e.neigh[a] = nb
			changed = true
		}
	}
	return changed
}

// waitNeighbors resolves addrs, polling for at most ResolveWait until each
// has a MAC or an error.
func (e *Engine) waitNeighbors(addrs []netip.Addr) {
	deadline := time.Now().Add(e.opts.ResolveWait)
	for {
		e.updateNeighbors(addrs)
		var pending []netip.Addr
		for _, a := range addrs {
			if e.neigh[a].MAC == nil && e.neighErr[a] == nil {
				pending = append(pending, a)
			}
		}
		if len(pending) == 0 || time.Now().After(deadline) {
			return
		}
		addrs = pending
		time.Sleep(20 * time.Millisecond)
	}
}

// nextHops lists the distinct addresses whose MACs the executor needs: each
// server's next hop (the server, or its router) and the client gateways.
func nextHops(cfg lb.Config) []netip.Addr {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	add := func(a netip.Addr) {
		if a.IsValid() && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, cl := range cfg.Clusters {
		for _, p := range cl.Ports {
			for _, s := range p.Servers {
				add(s.NextHop())
			}
		}
	}
	add(cfg.Executor.ClientGateway)
	add(cfg.Executor.ClientGateway6)
	return out
}
