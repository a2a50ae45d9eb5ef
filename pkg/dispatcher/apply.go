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
	e.dropAffinity(e.cfg, next, nextIDs)
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

// dropAffinity removes the affinity records of the servers that next
// quiesces "now" and cur did not: their sticky clients go elsewhere from
// their next connection on. (Records of removed servers go with the
// executor's next sweep.)
func (e *Engine) dropAffinity(cur, next lb.Config, x ids) {
	if e.dp == nil {
		return
	}
	was := map[lb.BackendKey]bool{}
	for _, cl := range cur.Clusters {
		for _, p := range cl.Ports {
			for _, s := range p.Servers {
				if s.QuiesceNow {
					was[lb.BackendKey{Service: lb.ServiceKey{Cluster: cl.Address, Port: p.Number}, Server: s.Address}] = true
				}
			}
		}
	}
	for _, cl := range next.Clusters {
		for _, p := range cl.Ports {
			for _, s := range p.Servers {
				k := lb.BackendKey{Service: lb.ServiceKey{Cluster: cl.Address, Port: p.Number}, Server: s.Address}
				if !s.QuiesceNow || was[k] {
					continue
				}
				n, err := e.dp.DropAffinity(x.Backends[k.String()])
				if err != nil {
					e.log.Error("dropping affinity records", "server", k, "err", err)
					continue
				}
				e.log.Info("quiesced now: affinity records dropped", "server", k, "records", n)
			}
		}
	}
}

// addedServers lists the next hops next has that cur does not: new
// servers, routers and client gateways must be reachable for a change to
// be accepted.
func addedServers(cur, next lb.Config) []netip.Addr {
	have := map[netip.Addr]bool{}
	for _, a := range nextHops(cur) {
		have[a] = true
	}
	var out []netip.Addr
	for _, a := range nextHops(next) {
		if !have[a] {
			out = append(out, a)
		}
	}
	return out
}

// reconcile makes the kernel match next: loads, attaches or removes the
// executor, resolves servers, writes the maps and puts cluster addresses on
// the interface. Next hops in fresh (servers, routers, client gateways)
// must be directly reachable. On failure it restores what it changed and
// returns the error.
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
	for _, a := range nextHops(next) {
		if e.neigh[a].MAC == nil {
			unknown = append(unknown, a)
		}
	}
	e.waitNeighbors(unknown)
	for _, a := range fresh {
		if err := e.neighErr[a]; err != nil {
			undo()
			return lb.Errorf(hopRole(next, a), a.String(), "%v", err)
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

// hopRole names what a next hop is in cfg, for refusals: "router",
// "clientgateway" or "server" (with a hint for a NAT server off the
// segment).
func hopRole(cfg lb.Config, a netip.Addr) string {
	if a == cfg.Executor.ClientGateway || a == cfg.Executor.ClientGateway6 {
		return "clientgateway"
	}
	for _, cl := range cfg.Clusters {
		for _, p := range cl.Ports {
			for _, s := range p.Servers {
				if s.Router == a {
					return "router"
				}
			}
		}
	}
	return "server"
}

// configureAddresses puts the cluster addresses marked Configure and the
// NAT return addresses on the executor's interface, and takes off those it
// put there that are no longer wanted.
func (e *Engine) configureAddresses(cfg lb.Config) error {
	want := map[netip.Addr]string{}
	if cfg.Executor.Started {
		for _, cl := range cfg.Clusters {
			if cl.Configure {
				want[cl.Address] = cfg.Executor.Interface
			}
			for _, p := range cl.Ports {
				for _, s := range p.Servers {
					if p.Method == lb.NAT && s.ReturnAddress.IsValid() {
						want[s.ReturnAddress] = cfg.Executor.Interface
					}
				}
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
	ex := cfg.Executor
	dp := lb.Dataplane{
		NFA: ex.NFA, NFA6: ex.NFA6,
		ClientGateway: e.hop(ex.ClientGateway), ClientGateway6: e.hop(ex.ClientGateway6),
	}
	m := e.dp.MaglevSize()
	live := map[uint32]bool{}
	groups := affinityGroups(cfg, x)
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
				nb := e.neigh[s.NextHop()]
				b := lb.DataplaneBackend{
					ID: x.Backends[bk.String()], Service: sid, Address: s.Address,
					MAC: nb.MAC, SrcMAC: nb.IfMAC, Ifindex: nb.Ifindex,
					AcceptNew: states[i].accept,
					// A quiesced server keeps the clients whose affinity
					// records name it, unless it was quiesced "now".
					Quiesced: states[i].state == api.StateQuiesced && !s.QuiesceNow,
				}
				if p.Method == lb.NAT {
					b.Port, b.ReturnAddress = s.MapPort, s.ReturnAddress
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
			svc := lb.DataplaneService{
				ID: sid, Cluster: cl.Address, Port: p.Number, Protocol: p.Protocol,
				StaleTimeout: p.StaleTimeout, FinTimeout: ex.FinTimeout,
				StickyTime: p.StickyTime, AffinityGroup: groups[sid],
			}
			if p.Method == lb.NAT {
				svc.Method = lb.DataplaneNAT
			}
			if cl.Address.Is4() {
				svc.StickyMask4 = p.StickyMask
			} else {
				svc.StickyMask6 = p.StickyMask
			}
			switch p.Selection {
			case lb.SelectConnection:
				svc.Selection = lb.DataplaneConnection
			case lb.SelectConnAffin:
				svc.Selection = lb.DataplaneConnAffin
			}
			dp.Services = append(dp.Services, svc)
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

// hop returns how the executor reaches a next hop: its MAC and interface,
// or the zero value (not configured, or not resolved yet).
func (e *Engine) hop(a netip.Addr) lb.DataplaneNextHop {
	if !a.IsValid() {
		return lb.DataplaneNextHop{}
	}
	nb := e.neigh[a]
	if nb.MAC == nil {
		return lb.DataplaneNextHop{}
	}
	return lb.DataplaneNextHop{MAC: nb.MAC, SrcMAC: nb.IfMAC, Ifindex: nb.Ifindex}
}

// affinityGroups gives the services linked by crossport (directly or
// through others) a shared affinity group: the smallest service id of the
// group plus one. Services without crossport get none (0).
func affinityGroups(cfg lb.Config, x ids) map[uint32]uint32 {
	out := map[uint32]uint32{}
	for _, cl := range cfg.Clusters {
		parent := map[uint16]uint16{}
		var find func(uint16) uint16
		find = func(n uint16) uint16 {
			for parent[n] != n {
				n = parent[n]
			}
			return n
		}
		linked := false
		for _, p := range cl.Ports {
			parent[p.Number] = p.Number
		}
		for _, p := range cl.Ports {
			if _, ok := parent[p.CrossPort]; p.CrossPort != 0 && ok {
				parent[find(p.Number)] = find(p.CrossPort)
				linked = true
			}
		}
		if !linked {
			continue
		}
		minID := map[uint16]uint32{}
		count := map[uint16]int{}
		for _, p := range cl.Ports {
			root := find(p.Number)
			sid := x.Services[lb.ServiceKey{Cluster: cl.Address, Port: p.Number}.String()]
			if cur, ok := minID[root]; !ok || sid < cur {
				minID[root] = sid
			}
			count[root]++
		}
		for _, p := range cl.Ports {
			root := find(p.Number)
			if count[root] > 1 {
				out[x.Services[lb.ServiceKey{Cluster: cl.Address, Port: p.Number}.String()]] = minID[root] + 1
			}
		}
	}
	return out
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
