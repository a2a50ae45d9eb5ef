package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/maglev"
)

// Apply applies a batch of operations, all or none: it prepares the change
// on a copy of the state, validates the whole result, applies it to the
// executor, persists it, and only then makes it current. A refused batch
// returns an *OpError and changes nothing, in memory, on disk or in the
// kernel.
func (e *Engine) Apply(ctx context.Context, ops []api.Op) (api.Result, error) {
	return call(ctx, e, func() (api.Result, error) { return e.apply(ops) })
}

func (e *Engine) apply(ops []api.Op) (api.Result, error) {
	if len(ops) == 0 {
		return api.Result{}, &OpError{Index: -1, Err: lb.Errorf("ops", "", "the request has no operations")}
	}
	next := e.cfg.Clone()
	for i, op := range ops {
		if err := applyOp(&next, op); err != nil {
			return api.Result{}, &OpError{Index: i, Err: err}
		}
	}
	next.Sort()
	last := -1
	if len(ops) == 1 {
		last = 0
	}
	if err := next.Validate(); err != nil {
		return api.Result{}, &OpError{Index: last, Err: err}
	}
	nextIDs := e.ids.clone()
	if err := nextIDs.assign(next, e.opts.MaxServices, e.opts.MaxBackends); err != nil {
		return api.Result{}, &OpError{Index: last, Err: err}
	}
	if err := e.reconcile(next, nextIDs, addedServers(e.cfg, next)); err != nil {
		return api.Result{}, &OpError{Index: last, Err: err}
	}
	if err := saveState(e.opts.StateDir, state{Version: stateVersion, Config: next, IDs: nextIDs, Configured: e.configured, AttachedMode: e.attachedMode}); err != nil {
		if rerr := e.reconcile(e.cfg, e.ids, nil); rerr != nil {
			e.log.Error("rolling back the executor after a failed save", "err", rerr)
		}
		return api.Result{}, &OpError{Index: last, Err: err}
	}
	e.resetWeights(e.cfg, next)
	e.cfg, e.ids = next, nextIDs
	e.reconcileProbes(e.cfg)
	e.reconcileMetrics(e.cfg)
	if e.cfg.Manager.Started {
		// Weights reset by this change take effect now, not at the next
		// cycle.
		e.pushDataplane("change")
	} else {
		e.checkAlerts()
	}
	for i, op := range ops {
		e.log.Info("applied", "op", i, "object", op.Object, "action", op.Action, "target", op.Target)
	}
	return api.Result{Applied: len(ops)}, nil
}

// addedServers lists server addresses next has that cur does not.
func addedServers(cur, next lb.Config) []netip.Addr {
	have := map[netip.Addr]bool{}
	for _, a := range serverAddrs(cur) {
		have[a] = true
	}
	var out []netip.Addr
	for _, a := range serverAddrs(next) {
		if !have[a] {
			out = append(out, a)
		}
	}
	return out
}

// reconcile makes the kernel match next: loads, attaches or removes the
// executor, resolves servers, writes the maps and puts cluster addresses on
// the interface. Servers in fresh must be reachable by MAC forwarding. On
// failure it restores what it changed and returns the error.
func (e *Engine) reconcile(next lb.Config, nextIDs ids, fresh []netip.Addr) error {
	ex := next.Executor
	if !ex.Started {
		if e.dp == nil {
			e.execErr = nil
			return nil
		}
		errs := []error{e.configureAddresses(lb.Config{})}
		errs = append(errs, e.dp.Remove())
		e.dp, e.execErr = nil, nil
		e.tables = map[uint32]table{}
		e.sweep = lb.SweepResult{}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("stopping the executor: %w", err)
		}
		return nil
	}

	link, err := e.opts.Netif.LinkByName(ex.Interface)
	if err != nil {
		return lb.Errorf("interface", "", "%v", err)
	}
	opened, adopted := false, false
	if e.dp == nil {
		dp, err := e.opts.OpenDatapath()
		if err != nil {
			return fmt.Errorf("loading the executor: %w", err)
		}
		e.dp, opened = dp, true
		_, adopted = dp.Attached()
	}
	// undo releases an executor this call loaded: a freshly created one is
	// removed again, an adopted one (still forwarding) is only released.
	undo := func() {
		if !opened {
			return
		}
		var err error
		if adopted {
			err = e.dp.Close()
		} else {
			err = e.dp.Remove()
		}
		if err != nil {
			e.log.Error("releasing the executor", "err", err)
		}
		e.dp = nil
		e.tables = map[uint32]table{}
	}

	want := ex.XDPMode
	if want == lb.XDPAuto && link.Kind == "veth" {
		// A veth only processes frames its peer sent with native-mode
		// XDP_TX if it runs XDP itself, which dlbd cannot see from here:
		// auto is generic on a veth, native must be asked for.
		want = lb.XDPGeneric
		e.log.Info("auto XDP mode uses generic mode on a veth; ask for --xdp-mode native if the peer runs XDP", "interface", ex.Interface)
	}
	mode, err := e.dp.Attach(link.Index, want)
	if err != nil {
		undo()
		return lb.Errorf("interface", ex.Interface, "%v", err)
	}
	if mode != lb.XDPAuto { // Auto: an existing attachment, mode unchanged
		e.attachedMode = mode
	}

	var unknown []netip.Addr
	for _, a := range serverAddrs(next) {
		if e.neigh[a].MAC == nil {
			unknown = append(unknown, a)
		}
	}
	e.waitNeighbors(unknown)
	for _, a := range fresh {
		if err := e.neighErr[a]; err != nil {
			undo()
			return lb.Errorf("server", a.String(), "%v", err)
		}
	}

	if err := e.dp.Apply(e.dataplane(next, nextIDs)); err != nil {
		if opened {
			undo()
		} else if rerr := e.dp.Apply(e.dataplane(e.cfg, e.ids)); rerr != nil {
			e.log.Error("restoring the executor after a failed change", "err", rerr)
		}
		return fmt.Errorf("applying to the executor: %w", err)
	}
	if err := e.configureAddresses(next); err != nil {
		if opened {
			undo()
		} else if rerr := e.dp.Apply(e.dataplane(e.cfg, e.ids)); rerr != nil {
			e.log.Error("restoring the executor after a failed change", "err", rerr)
		}
		return lb.Errorf("configure", "", "%v", err)
	}
	e.execErr = nil
	return nil
}

// configureAddresses puts the cluster addresses marked Configure on the
// executor's interface and takes off those it put there that are no longer
// wanted.
func (e *Engine) configureAddresses(cfg lb.Config) error {
	want := map[netip.Addr]string{}
	if cfg.Executor.Started {
		for _, cl := range cfg.Clusters {
			if cl.Configure {
				want[cl.Address] = cfg.Executor.Interface
			}
		}
	}
	var errs []error
	for a, ifname := range e.configured {
		if want[a] == ifname {
			continue
		}
		if err := e.opts.Netif.DelAddress(ifname, a); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(e.configured, a)
	}
	for a, ifname := range want {
		if e.configured[a] == ifname {
			continue
		}
		if err := e.opts.Netif.AddAddress(ifname, a); err != nil {
			errs = append(errs, err)
			continue
		}
		e.configured[a] = ifname
	}
	return errors.Join(errs...)
}

// table is a cached Maglev table and what it was built from.
type table struct {
	fingerprint string
	slots       []uint32
	sum         uint64
}

// dataplane computes what the executor's maps must hold for cfg. The
// Maglev tables whose members or weights changed are rebuilt, in parallel
// when there are several (a manager cycle may change many ports at once).
func (e *Engine) dataplane(cfg lb.Config, x ids) lb.Dataplane {
	dp := lb.Dataplane{NFA: cfg.Executor.NFA}
	m := e.dp.MaglevSize()
	live := map[uint32]bool{}
	var stale []tableJob
	for _, cl := range cfg.Clusters {
		for _, p := range cl.Ports {
			sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			sid := x.Services[sk.String()]
			live[sid] = true
			var members []maglev.Backend
			states, _ := e.serverStates(cfg, cl, p)
			for i, s := range p.Servers {
				bk := lb.BackendKey{Service: sk, Server: s.Address}
				nb := e.neigh[s.Address]
				b := lb.DataplaneBackend{
					ID: x.Backends[bk.String()], Service: sid, Address: s.Address,
					MAC: nb.MAC, SrcMAC: nb.IfMAC, Ifindex: nb.Ifindex,
					AcceptNew: states[i].accept,
				}
				dp.Backends = append(dp.Backends, b)
				if b.AcceptNew {
					members = append(members, maglev.Backend{Key: s.Address.String(), ID: b.ID, Weight: states[i].weight})
				}
			}
			fp := fingerprint(members, m)
			if t, ok := e.tables[sid]; !ok || t.fingerprint != fp {
				stale = append(stale, tableJob{sid: sid, members: members, fp: fp})
			}
			dp.Services = append(dp.Services, lb.DataplaneService{
				ID: sid, Cluster: cl.Address, Port: p.Number, Protocol: p.Protocol,
				StaleTimeout: p.StaleTimeout, FinTimeout: cfg.Executor.FinTimeout,
			})
		}
	}
	e.buildTables(stale, m)
	for i := range dp.Services {
		t := e.tables[dp.Services[i].ID]
		dp.Services[i].Table, dp.Services[i].TableSum = t.slots, t.sum
	}
	for id := range e.tables {
		if !live[id] {
			delete(e.tables, id)
		}
	}
	return dp
}

// tableJob is a Maglev table to rebuild.
type tableJob struct {
	sid     uint32
	members []maglev.Backend
	fp      string
	out     table
}

// fingerprint identifies a table's inputs: its size and its members' keys,
// ids and weights.
func fingerprint(members []maglev.Backend, m uint32) string {
	sort.Slice(members, func(i, j int) bool { return members[i].Key < members[j].Key })
	var fp strings.Builder
	fp.WriteString(strconv.Itoa(int(m)))
	for _, b := range members {
		fmt.Fprintf(&fp, ";%s/%d/%d", b.Key, b.ID, b.Weight)
	}
	return fp.String()
}

// buildTables rebuilds the given tables on up to GOMAXPROCS goroutines and
// stores them in the cache.
func (e *Engine) buildTables(jobs []tableJob, m uint32) {
	workers := min(runtime.GOMAXPROCS(0), len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				j := &jobs[i]
				slots, err := maglev.Build(j.members, m)
				if err != nil {
					// Build only fails on inputs the engine never produces
					// (a non-prime size, duplicate keys); serve nothing
					// rather than something wrong.
					e.log.Error("building Maglev table", "service", j.sid, "err", err)
					slots = nil
				}
				j.out = table{fingerprint: j.fp, slots: slots}
				if slots != nil {
					j.out.sum = lb.TableSum(slots)
				}
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, j := range jobs {
		e.tables[j.sid] = j.out
	}
}
