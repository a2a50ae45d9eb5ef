// Package dispatcher is dlb's engine. It holds the configuration, applies
// operators' changes to it all or none, reconciles the executor and the
// host's addresses with it, persists it, runs the manager, the advisors'
// probes and the metric pollers, and answers status queries in the
// model's terms (package server renders them for the API).
//
// One management goroutine (Run) owns all state: API calls, probe
// results, timer ticks, network events and neighbour refreshes are
// closures or messages handled on it, in order, so that nothing needs a
// lock. The engine reaches the kernel only through the Datapath and Netif
// interfaces; cmd/dlbd fills them with pkg/datapath and pkg/netif, tests
// with fakes.
//
// A change costs what it touches: package config edits the configuration
// copy on write and says what changed, the store journals only that, the
// ids of new objects are allocated and those of removed ones freed, and
// only the touched ports are written to the executor.
//
// The host's networking is followed through Netif.Watch, not polled: the
// executor detaches when its interface is deleted and attaches again when
// one of that name appears, the configuration follows its renaming,
// addresses dlbd configured are put back, a
// next hop's new MAC is written at once (netevents.go).
//
// The parts, one per file or subpackage: engine.go (this: the loop),
// apply.go (a change, from request to commit), reconcile.go (the executor
// and the host), netevents.go (the host's network changing under dlbd),
// dataplane.go (what a port's maps hold: states, weights, Maglev tables),
// neighbors.go (the next hops resolved, on nexthop/'s table), natroute.go
// (NAT replies without a route), manager.go (the manager's cycle and
// alerts), probes.go (advisors, wired to package health), pollers.go
// (metric servers), status.go (snapshots for reports), bgp.go (what the
// BGP speaker announces, through the Speaker interface), ha.go (high
// availability, through the HighAvailability interface); store/ (ids and
// the state files), health/, loops/ (the reconciler both use), events/,
// nexthop/ (how each next hop is reached), cfgdigest/ (the configuration
// digest a high-availability pair compares).
package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlbproject/dlb/advisors"
	"github.com/dlbproject/dlb/internal/logagg"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher/events"
	"github.com/dlbproject/dlb/pkg/dispatcher/health"
	"github.com/dlbproject/dlb/pkg/dispatcher/loops"
	"github.com/dlbproject/dlb/pkg/dispatcher/nexthop"
	"github.com/dlbproject/dlb/pkg/dispatcher/store"
	"github.com/dlbproject/dlb/pkg/lb"
)

// Datapath is the executor as the engine drives it.
type Datapath interface {
	// Attach attaches the program to an interface (or keeps an adopted
	// attachment) and returns the mode used (lb.XDPAuto: unknown).
	Attach(ifindex int, mode lb.XDPMode) (lb.XDPMode, error)
	// Attached reports the current attachment.
	Attached() (lb.Attachment, bool)
	// Apply makes the executor's maps hold exactly the given state;
	// Update writes what a change touched.
	Apply(lb.Dataplane) error
	Update(lb.DataplaneUpdate) error
	// Stats reads the counters; Reasons only the per-reason ones.
	Stats() (lb.DataplaneStats, error)
	Reasons() ([]lb.ReasonCount, error)
	// Sweep expires idle connections and counts active ones.
	Sweep() (lb.SweepResult, error)
	// DropAffinity removes the affinity records naming a backend and
	// returns how many it removed.
	DropAffinity(backend uint32) (int, error)
	// Info describes the executor's tables, and Memory what each holds
	// in kernel memory.
	Info() lb.DataplaneInfo
	Memory() []lb.TableMemory
	// Close releases the executor and keeps it pinned and forwarding.
	Close() error
	// RemovePins detaches the executor, removes every pin it has (and
	// those it did not load) and releases it; it returns the names of
	// the pins it removed.
	RemovePins() ([]string, error)
	// Dropped names the pins of links whose interface was deleted, which
	// loading or attaching the executor removed.
	Dropped() []string
}

// Netif is the host networking the engine needs.
type Netif interface {
	// LinkByName and LinkByIndex look up an interface.
	LinkByName(name string) (lb.Link, error)
	LinkByIndex(index int) (lb.Link, error)
	// Neighbors says how each address is reached, starting resolution of
	// the MACs it does not know yet.
	Neighbors(addrs []netip.Addr) (map[netip.Addr]lb.Neighbor, map[netip.Addr]error)
	// Routes says how each address is reached, as Neighbors does, from
	// the routes alone: no MAC, and nothing asked of the kernel that
	// would stay (a dry run's lookups).
	Routes(addrs []netip.Addr) (map[netip.Addr]lb.Neighbor, map[netip.Addr]error)
	// AddAddresses and DelAddress put cluster addresses on an interface
	// and take one off (off an interface that is gone: done, not an
	// error). AddAddresses reports, in on, each address the interface
	// has now: true if it put it on, false if it was there already (left
	// as it is); err joins the failures, each naming its address.
	AddAddresses(ifname string, addrs []netip.Addr) (on map[netip.Addr]bool, err error)
	// DeprecateAddresses makes IPv6 host addresses deprecated, as
	// AddAddresses puts them on, where they are not; it returns those it
	// changed.
	DeprecateAddresses(ifname string, addrs []netip.Addr) (changed []netip.Addr, err error)
	DelAddress(ifname string, addr netip.Addr) error
	// Watch reports changes of interfaces, addresses and neighbours until
	// ctx ends.
	Watch(ctx context.Context) (<-chan lb.NetEvent, error)
	// Reprobe has the kernel verify the MACs of addrs on an interface by
	// broadcast (the answers arrive as Watch events), except those the
	// host's own traffic confirmed within fresh; ForgetNeighbors removes
	// the neighbour entries Neighbors made for addrs.
	Reprobe(ifindex int, addrs []netip.Addr, fresh time.Duration) error
	ForgetNeighbors(addrs []netip.Addr) error
	// NeighborsAt returns the addresses of the neighbours that have one
	// of hops' MACs on its interface, per hop; ReprobeUnmanaged verifies
	// their MACs like Reprobe, leaving their entries the kernel's.
	NeighborsAt(hops []lb.NATHop) (map[lb.NATHop][]netip.Addr, error)
	ReprobeUnmanaged(ifindex int, addrs []netip.Addr, fresh time.Duration) error
	// Forwarding reports whether an interface forwards IPv4 (ipv6: IPv6)
	// packets.
	Forwarding(ifname string, ipv6 bool) (bool, error)
	// GRO reports whether generic receive offload is on for an
	// interface, and the interface's name.
	GRO(ifindex int) (string, bool, error)
	// HeldAddresses returns those of addrs an interface of this host has.
	HeldAddresses(addrs []netip.Addr) (map[netip.Addr]bool, error)
}

// OwnerLock is a lock that makes this dlbd the only owner of a directory
// (package lock's).
type OwnerLock interface {
	// StillHeld reports whether the path is still the one locked.
	StillHeld() bool
	// Renew locks what is at the path when it is not.
	Renew() error
}

// MetricSource fetches one server's load report: metric name → 0..100,
// and the report's timestamp.
type MetricSource func(ctx context.Context) (map[string]float64, time.Time, error)

// Options configure an Engine.
type Options struct {
	// StateDir is where the state is kept (package store); StateLock,
	// if set, is the lock that makes this dlbd its only owner, taken
	// again when its file is deleted under dlbd. PinLock is the pin
	// directory's, taken again when the executor is pinned again.
	StateDir  string
	StateLock OwnerLock
	PinLock   OwnerLock
	// OpenDatapath loads (or adopts) the executor.
	OpenDatapath func() (Datapath, error)
	// RemovePins removes the executor's pins without loading it (when it
	// cannot be loaded) and names them; nil removes nothing. Pins names
	// them without removing them; nil: none.
	RemovePins func() ([]string, error)
	Pins       func() ([]string, error)
	// PinnedAttachment returns where the pinned executor is attached,
	// without loading it (false: nowhere); nil: nowhere.
	PinnedAttachment func() (lb.Attachment, bool, error)
	// Netif is the host's networking.
	Netif Netif
	// Logger receives the engine's log; slog.Default() when nil.
	Logger *slog.Logger
	// MaxServices and MaxBackends bound the ids the engine hands out (the
	// executor's table sizes).
	MaxServices, MaxBackends uint32
	// TickInterval is how often neighbours are refreshed (default 1 s);
	// SweepInterval how often the connection table is swept (default 2 s).
	TickInterval, SweepInterval time.Duration
	// ResolveWait bounds how long a change waits for new servers' MAC
	// addresses to resolve before it is applied without them (default 1 s).
	// The management loop waits for at most loopResolveWait of it, and
	// only while no other call or change waits for the loop; the
	// caller of Apply or Replace waits for the rest outside the loop, which
	// meanwhile serves everyone else, and then finds the servers that
	// resolved usable.
	ResolveWait time.Duration
	// ReprobeInterval is how often the MACs of next hops are verified by
	// broadcast (default 500 ms; negative: never), ReprobeBatch how many
	// at most per round (default 128): with more next hops than that,
	// each is verified once per ceil(hops/batch) rounds. A host whose MAC
	// changed without announcing it is found this way, within 1.25
	// intervals (a hop the host's own traffic just confirmed waits for
	// the next round).
	ReprobeInterval time.Duration
	ReprobeBatch    int
	// AddressAnswerers asks, from src, which other hosts answer ARP (src
	// IPv4) or neighbour solicitations (src IPv6) for each of addrs
	// within wait (doctor.AddressAnswerers); nil checks nothing. Every
	// ConflictInterval (default 10 s) the engine asks it of the
	// addresses it holds on the interface, each family from its NFA, and
	// reports the answerers.
	AddressAnswerers func(ctx context.Context, src netip.Addr, addrs []netip.Addr, wait time.Duration) (map[netip.Addr][]net.HardwareAddr, error)
	ConflictInterval time.Duration
	// ScriptsDir holds the operator's event scripts (package events);
	// empty runs none. ScriptTimeout bounds each run (default 10 s).
	ScriptsDir    string
	ScriptTimeout time.Duration
	// NewMetricSource builds the poller of one server's load agent, whose
	// polls leave from source (the NFA of the server's family; the zero
	// Addr: the kernel's choice); nil makes "metric add" refuse to start
	// pollers (logged).
	NewMetricSource func(ms lb.MetricServer, server, source netip.Addr, names []string) (MetricSource, error)
	// CheckMetrics refuses metric settings and names the metric source
	// could not fetch (a query that does not parse, a secret file that
	// cannot be read); nil checks nothing.
	CheckMetrics func(ms lb.MetricServer, names []string) error
	// NewAdvisor builds the probe an advisor configuration names; the
	// default is package advisors' (tests substitute fakes).
	NewAdvisor func(lb.Advisor) (advisors.Advisor, error)
	// HA is the high-availability function (package ha); nil refuses
	// high-availability settings.
	HA HighAvailability
	// Guard keeps the host silent for the addresses the engine put on
	// the executor's interface when the executor does not take their
	// traffic; nil: no guard.
	Guard Guard
	// Speaker announces cluster addresses over BGP (package bgp); nil
	// refuses BGP settings.
	Speaker Speaker
	// MetricErrorClass names the class of a refused or failed metric report
	// ("unauthenticated", "replayed", ...) for the metric report; "failed"
	// when nil or it returns "".
	MetricErrorClass func(error) string
}

// Engine is the dispatcher's engine. Create it with New, run it with Run.
type Engine struct {
	opts Options
	log  *slog.Logger
	// conflicts are the other hosts found answering ARP for addresses
	// this dispatcher holds (watchConflicts).
	conflicts conflicts
	mgmt      chan func()
	stopped   chan struct{} // closed when Run returns: nothing takes mgmt any more
	// callers counts the calls (do) waiting for the management loop to
	// take them.
	callers atomic.Int32
	// queued reports whether other changes wait to be let in by whoever
	// made the change being applied (Queued; nil: no change is).
	queued func() bool
	// ctx lives as long as Run; probe and metric loops hang off it.
	ctx context.Context

	ed *config.Editor // the committed configuration
	// advIndex is the committed configuration's advisors by port
	// (advisorsOn); management goroutine only.
	advIndex advisorIndex
	store    *store.Store
	ids      *store.IDs
	host     host // what the engine did to the host and must remember

	exec executor // the executor, and what the engine knows it holds
	// drops counts the executor's drops that want the operator.
	drops dropWatch
	// unsaved is why the state cannot be saved, while it cannot (a state
	// directory deleted that dlbd cannot make again).
	unsaved logagg.Steady
	net     *nexthop.Table
	// netEvents are the host's network changes (nil: not followed).
	netEvents <-chan lb.NetEvent
	// agg holds back repeated warnings (package logagg).
	agg *logagg.Handler
	// out collects what the change being applied has to say.
	out *Applied
	// unresolved are the next hops the change being applied brought in
	// that had no MAC yet when it was written (callChange).
	unresolved []netip.Addr
	mgr        managerState
	health     *health.Monitor
	metrics    *pollers
	events     *events.Runner
	facts      facts    // for status snapshots
	bgp        bgpState // what the BGP speaker announces
	ha         haEngine
	repl       replState
	// guarded is what the guard was last told (interface and addresses).
	guarded string
	// intentSaved says configureAddresses journaled addresses before it
	// put them on (saveIntent) since it was last cleared: a change that
	// is then refused journals the host as it is left.
	intentSaved bool
	// long is the operation, long by nature, the management loop is in
	// (nil: none); read by Busy from any goroutine.
	long atomic.Pointer[longOp]
}

// longOp is an operation of the management loop that takes long by
// nature: loading the executor allocates its tables whole (12.5 s for
// two tables of 16 Mi entries on a 2-CPU host).
type longOp struct {
	what  string
	since time.Time
}

// inLong marks the management loop as in the long operation what until
// the returned function is called.
func (e *Engine) inLong(what string) (done func()) {
	e.long.Store(&longOp{what: what, since: time.Now()})
	return func() { e.long.Store(nil) }
}

// Busy reports the operation long by nature the management loop is in, if
// any, and for how long it has been in it; a loop that does not answer
// and is not in one is stuck. Safe from any goroutine.
func (e *Engine) Busy() (what string, forHowLong time.Duration, busy bool) {
	op := e.long.Load()
	if op == nil {
		return "", 0, false
	}
	return op.what, time.Since(op.since), true
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
	if opts.ReprobeInterval == 0 {
		opts.ReprobeInterval = 500 * time.Millisecond
	}
	if opts.ConflictInterval <= 0 {
		opts.ConflictInterval = 10 * time.Second
	}
	if opts.ReprobeBatch <= 0 {
		opts.ReprobeBatch = 128
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
	// A burst of identical warnings (10,000 servers that cannot be
	// reached) is logged as a few lines and a count.
	agg := logagg.New(opts.Logger.Handler(), logagg.Options{})
	opts.Logger = slog.New(agg)
	st, state, err := store.Open(opts.StateDir)
	if err != nil {
		return nil, err
	}
	for _, d := range state.Dropped {
		opts.Logger.Warn("state: " + d)
	}
	ed, err := config.NewEditor(state.Config, config.Options{KnownAdvisor: knownAdvisor, CheckRequest: advisors.CheckRequest})
	if err != nil {
		st.Close()
		return nil, err
	}
	e := &Engine{
		opts:    opts,
		log:     opts.Logger,
		mgmt:    make(chan func()),
		stopped: make(chan struct{}),
		ctx:     context.Background(),
		ed:      ed,
		store:   st,
		ids:     state.IDs,
		host:    host{configured: state.Configured, found: state.Found, attachedMode: state.AttachedMode},
		exec:    newExecutor(),
		net:     nexthop.New(),
		mgr:     newManagerState(),
		health:  health.NewMonitor(opts.NewAdvisor),
		metrics: newPollers(),
		events:  events.New(opts.ScriptsDir, opts.ScriptTimeout, opts.Logger),
		facts:   facts{lastChange: time.Now()},
		agg:     agg,
		bgp:     newBGPState(),
	}
	e.metrics.loops = loops.New(e.startPoller, samePoller)
	cfg := ed.Config()
	e.net.Index(cfg)
	e.host.indexReturns(cfg)
	e.ha.digest.Full(cfg)
	if e.haOn(cfg) {
		// What the previous dlbd served, it serves again until the
		// function decides otherwise; whether that holds (the executor
		// still forwards) is checked once it is up.
		e.ha.applied = state.HAStates
		if cfg.Executor.Started {
			e.claimPairAddresses(cfg)
		}
	}
	if cfg.Executor.Started {
		start := cfg
		if to, ok := e.pinnedRenamed(cfg); ok {
			// Its interface was renamed while no dlbd ran: the
			// executor is adopted there, and the configuration
			// follows the name once the engine runs
			// (checkAttachment).
			e.log.Warn("the executor's interface is missing, and the pinned executor forwards on another: renamed while no dlbd ran?",
				"interface", cfg.Executor.Interface, "now", to.Name, "ifindex", to.Index)
			start.Executor.Interface = to.Name
			e.host.renameInterface(cfg.Executor.Interface, to.Name)
		}
		if err := e.startExecutor(start); err != nil {
			e.exec.err = err
			e.log.Error("bringing up the executor from saved state", "err", err)
		} else {
			e.log.Info("executor restored", "interface", start.Executor.Interface)
		}
		e.persistHost()
	}
	if !cfg.Executor.Started && opts.Pins != nil {
		e.removeStartCutShort(cfg)
		// A state directory that is new, or was lost, beside an
		// executor still forwarding: say so rather than leave it
		// unseen (it is not removed: that would stop the traffic).
		if pins, err := opts.Pins(); err == nil && len(pins) > 0 {
			e.log.Warn("an executor is pinned that the saved configuration does not start (a new or lost state directory?): "+
				"it is left forwarding with what it was last given; \"dlbctl executor start\" takes it over with this configuration "+
				"(load a saved one first), \"dlbctl executor stop\" removes it", "pins", len(pins))
		}
	}
	if e.haOn(cfg) {
		if e.exec.adopted {
			opts.HA.Resume(e.ha.applied)
		} else if e.ha.applied != ([lb.NumHAGroups]lb.HAState{}) {
			// A fresh executor forwarded nothing: decide anew.
			e.ha.applied = [lb.NumHAGroups]lb.HAState{}
			if err := e.configureAddresses(cfg); err != nil {
				e.log.Error("high availability: taking the addresses off until decided", "err", err)
			}
		}
	}
	if len(state.IDs.Backends) >= bigChange {
		releaseMemory()
	}
	return e, nil
}

// knownAdvisor refuses advisor names package advisors has no advisor for.
func knownAdvisor(name string) error {
	_, err := advisors.New(name)
	return err
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

// Run executes the engine's management loop until ctx is done. It then
// releases the executor, which stays pinned and keeps forwarding.
func (e *Engine) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e.ctx = ctx
	go e.events.Run(ctx)
	if ch, err := e.opts.Netif.Watch(ctx); err != nil {
		e.log.Error("following the host's interfaces, addresses and neighbours; changes are noticed by polling only", "err", err)
	} else {
		e.netEvents = ch
	}
	cfg := e.ed.Config()
	// What changed while no dlbd ran: an interface that came back, an
	// address that went.
	e.checkAttachment(cfg)
	if e.exec.dp != nil && e.exec.attach.detached == "" {
		all := map[netip.Addr]string{}
		for a := range e.host.configured {
			all[a] = ""
		}
		e.restoreAddresses(all)
		e.deprecateOwnAddresses()
	}
	e.startSpeaker(cfg)
	if e.opts.AddressAnswerers != nil {
		go e.watchConflicts(ctx)
	}
	e.syncProbes(cfg, nil)
	e.syncPollers(cfg)
	// Sweep once now: the counts reports show (connections, active per
	// server, half-open) come from the latest sweep, and after a restart
	// the adopted tables are full of connections.
	e.sweepConns()
	e.checkAlerts(cfg, nil)
	var haNotify <-chan struct{}
	var haReceived <-chan lb.ConnBatch
	haTick := time.NewTicker(replicateInterval)
	defer haTick.Stop()
	if e.opts.HA != nil {
		haNotify, haReceived = e.opts.HA.Notify(), e.opts.HA.Received()
		e.publishTakeoverPlan(cfg)
		go e.runFastTakeover(ctx, e.opts.HA.Activated())
		if cfg.HA.Enabled() {
			// The executor's health first: the function's first decision
			// must not take a resumed active for one that cannot forward
			// (it let go of its addresses, and put them back, at every
			// restart).
			e.haHealth()
			if err := e.opts.HA.Configure(cfg.HA, e.ha.digest.Sum()); err != nil {
				e.log.Error("high availability: starting (retried every tick)", "err", err)
				e.ha.down = time.Now() // the peer's grace runs from the restart (haRetry)
			}
			e.haSync()
		}
	}

	tick := time.NewTicker(e.opts.TickInterval)
	defer tick.Stop()
	sweep := time.NewTicker(e.opts.SweepInterval)
	defer sweep.Stop()
	cycle := time.NewTimer(seconds(cfg.Manager.Interval))
	defer cycle.Stop()
	var reprobe <-chan time.Time
	if e.opts.ReprobeInterval > 0 {
		t := time.NewTicker(e.opts.ReprobeInterval)
		defer t.Stop()
		reprobe = t.C
	}
	for {
		// A high-availability decision goes before whatever else is
		// waiting (a sweep, a replication scan, probe results): a
		// takeover's clients wait for it.
		select {
		case <-haNotify:
			e.haSync()
			continue
		default:
		}
		select {
		case ev, ok := <-e.netEvents:
			if !ok {
				e.netEvents = nil
				if ctx.Err() == nil {
					e.log.Error("the network watch ended; changes are noticed by polling only")
				}
				continue
			}
			e.onNetEvent(ev)
		case now := <-e.exec.routes.due:
			e.tellRoutesMoved(now)
		case <-reprobe:
			e.reprobeRound()
		case <-e.health.Ready():
			e.onProbes()
		case <-e.metrics.results.Ready():
			for _, r := range e.metrics.results.Take(probeBatch) {
				e.onMetric(r)
			}
		case now := <-cycle.C:
			if e.ed.Config().Manager.Started {
				e.managerCycle(now)
			}
			cycle.Reset(seconds(e.ed.Config().Manager.Interval))
		case <-ctx.Done():
			// Withdraw first: the routers stop sending here while the
			// executor still forwards what is on its way.
			e.stopSpeaker()
			if e.opts.HA != nil {
				// The executor keeps forwarding: the peer is told to
				// wait for the restart rather than take over.
				e.opts.HA.Stop(true)
			}
			e.health.Stop()
			e.metrics.loops.StopAll()
			if e.exec.dp != nil {
				if err := e.exec.dp.Close(); err != nil {
					e.log.Error("releasing the executor", "err", err)
				}
				e.exec.dp = nil
			}
			if err := e.store.Close(); err != nil {
				e.log.Error("closing the state", "err", err)
			}
			close(e.stopped)
			return
		case f := <-e.mgmt:
			f()
		case <-tick.C:
			if err := e.checkStore(); err != nil {
				if e.unsaved.Failed(err, time.Now()) {
					e.log.Error("saving the state", "err", err, "remedy", unsavedRemedy)
				}
			} else if e.unsaved.OK() {
				e.log.Info("the state is saved again", "dir", e.opts.StateDir)
			}
			e.checkPins()
			e.checkAttachment(e.ed.Config())
			e.haRetry(time.Now())
			e.refreshNeighbors()
			e.sampleDrops(time.Now())
			e.agg.Flush()
			// Catches an executor that lost its attachment (its
			// interface went away) within a tick.
			e.syncRoutes(e.ed.Config())
		case <-sweep.C:
			e.sweepConns()
		case <-haNotify:
			e.haSync()
		case b := <-haReceived:
			e.haImport(b)
		case <-haTick.C:
			if e.haOn(e.ed.Config()) {
				e.haHealth()
				e.haReplicate()
			}
		}
	}
}

// do runs f on the management goroutine and waits for it.
func (e *Engine) do(ctx context.Context, f func()) error {
	done := make(chan struct{})
	e.callers.Add(1)
	select {
	case e.mgmt <- func() { e.callers.Add(-1); f(); close(done) }:
	case <-ctx.Done():
		e.callers.Add(-1)
		return ctx.Err()
	case <-e.stopped:
		e.callers.Add(-1)
		return ErrStopped
	}
	<-done
	return nil
}

// removeStartCutShort removes, at start, the pins of an executor that an
// "executor start" left when dlbd stopped before the start was done (and
// saved): the saved configuration does not start it, but did name its
// interface (a new or lost state directory names none), and it is
// attached to no interface, so it forwards nothing. Left, it held its
// tables' memory, and a warning, until an operator removed it.
func (e *Engine) removeStartCutShort(cfg lb.Config) {
	if cfg.Executor.Interface == "" || e.opts.PinnedAttachment == nil || e.opts.RemovePins == nil {
		return
	}
	if pins, err := e.opts.Pins(); err != nil || len(pins) == 0 {
		return
	}
	if _, attached, err := e.opts.PinnedAttachment(); err != nil || attached {
		return
	}
	removed, err := e.opts.RemovePins()
	if err != nil {
		e.log.Warn("removing the pins of an executor whose start was cut short", "err", err)
		return
	}
	e.log.Warn("removed the pins of an executor attached to no interface that the saved configuration does not start: "+
		"a start cut short (dlbd stopped during it)", "pins", strings.Join(removed, ", "))
}

// othersWait reports, on the management loop, whether anyone else waits
// for it: a call not taken yet, or a change its maker holds back until
// the one being applied is (WithQueued). The loop then stops waiting for
// a new next hop's MAC: the change's caller waits for the rest outside it
// (awaitHops), and a host that is not up yet holds no one else.
func (e *Engine) othersWait() bool {
	return e.callers.Load() > 0 || (e.queued != nil && e.queued())
}

// call runs f on the management goroutine and returns its result.
func call[T any](ctx context.Context, e *Engine, f func() (T, error)) (T, error) {
	var out T
	var err error
	if derr := e.do(ctx, func() { out, err = f() }); derr != nil {
		return out, derr
	}
	return out, err
}

// loopDoneKey is the context key of WithLoopDone's function.
type loopDoneKey struct{}

// WithLoopDone returns a context that makes a change made with it (Apply,
// Replace and their WithNotes forms) call done once the management loop
// has applied or refused it, before the change waits for the MACs of the
// next hops it brought in (up to Options.ResolveWait): a caller that lets
// changes in one at a time may let the next one in then, rather than make
// it wait for a server that is not up yet.
func WithLoopDone(ctx context.Context, done func()) context.Context {
	return context.WithValue(ctx, loopDoneKey{}, done)
}

// queuedKey is the context key of WithQueued's function.
type queuedKey struct{}

// WithQueued returns a context that makes a change made with it ask
// queued, while it is applied, whether other changes wait for their turn
// behind it (as they do behind WithLoopDone's): the management loop then
// waits for no next hop's MAC, and lets them in sooner.
func WithQueued(ctx context.Context, queued func() bool) context.Context {
	return context.WithValue(ctx, queuedKey{}, queued)
}

// Queued calls the function WithQueued put in ctx: whether other changes
// wait behind the one made with ctx (false without one).
func Queued(ctx context.Context) bool {
	q, ok := ctx.Value(queuedKey{}).(func() bool)
	return ok && q()
}

// LoopDone calls the function WithLoopDone put in ctx, if any: an
// engine calls it once a change made with ctx is applied or refused.
func LoopDone(ctx context.Context) {
	if done, ok := ctx.Value(loopDoneKey{}).(func()); ok {
		done()
	}
}

// callChange runs f, which applies a change, on the management loop as
// call does, collecting what the change has to say (its notes and
// warnings: e.out), then (after WithLoopDone's function) waits outside
// the loop for the next hops it brought in that had no MAC yet
// (awaitHops), up to ResolveWait from the start, and adds a warning for
// each still silent (silentHop), also logged. A refused change says
// nothing.
func callChange[T any](ctx context.Context, e *Engine, f func() (T, error)) (T, Applied, error) {
	deadline := time.Now().Add(e.opts.ResolveWait)
	var unresolved []netip.Addr
	var said Applied
	out, err := call(ctx, e, func() (T, error) {
		e.out, e.unresolved = &Applied{}, nil
		e.queued = func() bool { return Queued(ctx) }
		defer func() { e.out, e.queued = nil, nil }()
		out, err := f()
		if err == nil {
			said, unresolved = *e.out, e.unresolved
		}
		return out, err
	})
	LoopDone(ctx)
	if err != nil {
		return out, Applied{}, err
	}
	silent := e.awaitHops(ctx, unresolved, deadline)
	if len(silent) == 0 {
		return out, said, nil
	}
	// The change is applied either way: a caller gone meanwhile (ctx)
	// only misses the warnings.
	_ = e.do(ctx, func() {
		cfg := e.ed.Config()
		for _, a := range silent {
			w := silentHop(cfg, a, e.opts.ResolveWait)
			e.log.Warn(w)
			said.Warnings = append(said.Warnings, w)
		}
	})
	return out, said, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
