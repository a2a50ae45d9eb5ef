package dispatcher

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/dlbproject/dlb/pkg/dispatcher/health"
	"github.com/dlbproject/dlb/pkg/lb"
	"github.com/dlbproject/dlb/pkg/maglev"
)

// effective is a server's state as the executor must see it.
type effective struct {
	weight uint32
	accept bool
	state  lb.ServerState
}

// serverStates computes every server of a port's effective weight and
// state: operator down, quiesced, failed by an advisor, unresolved, or up;
// the manager's weight while it runs; and the port's all-down policy. It
// reports whether the port is in alert (no server takes new connections).
func (e *Engine) serverStates(cfg lb.Config, cl *lb.Cluster, p *lb.Port) ([]effective, bool) {
	sk := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
	out := make([]effective, len(p.Servers))
	anyAccept := false
	var rts []*backendRT
	if cfg.Manager.Started {
		rts = e.mgr.servers(sk, p)
	}
	// The servers of a port mostly share a next hop (a router).
	var hop netip.Addr
	var resolved bool
	for i, s := range p.Servers {
		w := s.Weight
		if rts != nil && !s.FixedWeight && rts[i].managed {
			w = uint32(rts[i].weight)
		}
		if h := s.NextHop(); h != hop || i == 0 {
			hop, resolved = h, e.net.MAC(h) != nil
		}
		st := lb.ServerUp
		switch {
		case s.Down:
			st = lb.ServerDown
		case s.Quiesced:
			st = lb.ServerQuiesced
		case e.advisorDown(cfg, cl.Address, p.Number, s.Address):
			st = lb.ServerFailed
		case !resolved:
			st = lb.ServerUnresolved
		}
		out[i] = effective{weight: w, state: st, accept: st == lb.ServerUp && w > 0}
		anyAccept = anyAccept || out[i].accept
	}
	if anyAccept || len(p.Servers) == 0 {
		return out, false
	}
	if p.AllDown == lb.AllDownSpread {
		// IBM: when every server is down, all get weightbound/2. Only the
		// advisors' verdict is overruled; operator decisions stand.
		w := max(p.WeightBound/2, 1)
		for i, s := range p.Servers {
			if out[i].state == lb.ServerFailed && e.net.MAC(s.NextHop()) != nil {
				out[i].weight, out[i].accept = w, true
				anyAccept = true
			}
		}
	}
	return out, !anyAccept
}

// advisorDown reports whether an advisor covering the port found the
// server down.
func (e *Engine) advisorDown(cfg lb.Config, cluster netip.Addr, port uint16, server netip.Addr) bool {
	for _, a := range e.advisorsOn(cfg, port) {
		if !a.covers(cluster) {
			continue
		}
		if h := e.health.State(health.Key{Advisor: a.key, Addr: server, Port: port}); h != nil && h.State == lb.AdvisorDown {
			return true
		}
	}
	return false
}

// advisorRef is an advisor of the index advisorsOn keeps: its key and the
// cluster it is limited to (none: every cluster).
type advisorRef struct {
	key     string
	cluster netip.Addr
}

func (a advisorRef) covers(cluster netip.Addr) bool {
	return !a.cluster.IsValid() || a.cluster == cluster
}

// advisorIndex is cfg.Advisors by port, for the advisors list it was built
// from (a committed configuration's slices are never written again: the
// same first element and length are the same list).
type advisorIndex struct {
	first  *lb.Advisor
	n      int
	byPort map[uint16][]advisorRef
}

// advisorsOn returns the advisors of cfg on port, of any cluster. The
// state of every server of a port is computed when one of its servers
// changes state: with an advisor per port, a walk over all of them for
// each server made 1,000 ports of 100 servers take minutes to settle
// (100,000 first results, each walking 1,000 advisors 100 times).
func (e *Engine) advisorsOn(cfg lb.Config, port uint16) []advisorRef {
	x := &e.advIndex
	var first *lb.Advisor
	if len(cfg.Advisors) > 0 {
		first = &cfg.Advisors[0]
	}
	if x.byPort == nil || x.first != first || x.n != len(cfg.Advisors) {
		*x = advisorIndex{first: first, n: len(cfg.Advisors), byPort: map[uint16][]advisorRef{}}
		for _, a := range cfg.Advisors {
			x.byPort[a.Port] = append(x.byPort[a.Port], advisorRef{key: a.Key(), cluster: a.Cluster})
		}
	}
	return x.byPort[port]
}

// dataplane computes the whole state of the executor's maps for cfg (at
// start, and to roll back).
func (e *Engine) dataplane(cfg lb.Config) lb.Dataplane {
	g := e.globals(cfg)
	dp := lb.Dataplane{NFA: g.NFA, NFA6: g.NFA6, ClientGateway: g.ClientGateway, ClientGateway6: g.ClientGateway6,
		ReturnPools: g.ReturnPools}
	var u lb.DataplaneUpdate
	e.portsUpdate(&u, cfg, allPorts(cfg))
	dp.Services, dp.Backends = u.Services, u.Backends
	return dp
}

// portsUpdate adds to u the services and backends of the given ports as
// cfg has them (ports cfg does not have are skipped: the caller removes
// them by id), building the Maglev tables that changed, in parallel.
func (e *Engine) portsUpdate(u *lb.DataplaneUpdate, cfg lb.Config, ports []lb.ServiceKey) {
	maxTable := uint32(lb.MaxTableSize)
	if e.exec.dp != nil {
		maxTable = e.exec.dp.Info().MaxTableSize
	}
	groups := map[lb.ServiceKey]uint32{}
	seenCluster := map[netip.Addr]bool{}
	var jobs []tableJob
	first := len(u.Services)
	for _, k := range ports {
		cl := cfg.Cluster(k.Cluster)
		if cl == nil {
			continue
		}
		p := cl.Port(k.Port)
		if p == nil {
			continue
		}
		if !seenCluster[cl.Address] {
			seenCluster[cl.Address] = true
			for sk, g := range affinityGroups(cl, e.ids.Services) {
				groups[sk] = g
			}
		}
		sid := e.ids.Services[k]
		states, _ := e.serverStates(cfg, cl, p)
		var members []maglev.Backend
		for i, s := range p.Servers {
			bk := lb.BackendKey{Service: k, Server: s.Address}
			nb, _ := e.net.Neighbor(s.NextHop())
			b := lb.DataplaneBackend{
				ID: e.ids.Backends[bk], Service: sid, Address: s.Address,
				MAC: nb.MAC, SrcMAC: nb.IfMAC, Ifindex: nb.Ifindex,
				AcceptNew: states[i].accept,
				// A quiesced server keeps the clients whose affinity
				// records name it, unless it was quiesced "now".
				Quiesced: states[i].state == lb.ServerQuiesced && !s.QuiesceNow,
			}
			if p.Method == lb.NAT {
				b.Port, b.ReturnAddress = s.MapPort, s.ReturnAddress
			}
			u.Backends = append(u.Backends, b)
			if b.AcceptNew {
				members = append(members, maglev.Backend{Key: s.Address.String(), ID: b.ID, Weight: states[i].weight})
			}
		}
		size := min(cl.TableIn(p), maxTable)
		fp := fingerprint(members, size)
		if t, ok := e.exec.tables[sid]; !ok || t.fingerprint != fp {
			jobs = append(jobs, tableJob{sid: sid, members: members, size: size, fp: fp})
		}
		svc := lb.DataplaneService{
			ID: sid, Cluster: cl.Address, Port: p.Number, Protocol: p.Protocol,
			StaleTimeout: p.StaleTimeout, FinTimeout: cfg.Executor.FinTimeout,
			StickyTime: p.StickyTime, AffinityGroup: groups[k],
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
		u.Services = append(u.Services, svc)
		e.exec.groups[sid] = groups[k]
	}
	e.buildTables(jobs)
	for i := first; i < len(u.Services); i++ {
		t := e.exec.tables[u.Services[i].ID]
		u.Services[i].Table, u.Services[i].TableSum = t.slots, t.sum
	}
}

// groupChanges returns the ports of the clusters of touched whose
// affinity group changed (a crossport link made or undone elsewhere in the
// cluster), beyond touched itself.
func (e *Engine) groupChanges(cfg lb.Config, touched []lb.ServiceKey) []lb.ServiceKey {
	in := map[lb.ServiceKey]bool{}
	clusters := map[netip.Addr]bool{}
	for _, k := range touched {
		in[k] = true
		clusters[k.Cluster] = true
	}
	var out []lb.ServiceKey
	for a := range clusters {
		cl := cfg.Cluster(a)
		if cl == nil {
			continue
		}
		groups := affinityGroups(cl, e.ids.Services)
		for _, p := range cl.Ports {
			k := lb.ServiceKey{Cluster: a, Port: p.Number}
			if !in[k] && e.exec.groups[e.ids.Services[k]] != groups[k] {
				out = append(out, k)
			}
		}
	}
	return out
}

// affinityGroups gives the ports of a cluster linked by crossport
// (directly or through others) a shared affinity group: the smallest
// service id of the group plus one. Ports without crossport get none (0).
func affinityGroups(cl *lb.Cluster, ids map[lb.ServiceKey]uint32) map[lb.ServiceKey]uint32 {
	out := map[lb.ServiceKey]uint32{}
	parent := map[uint16]uint16{}
	find := func(n uint16) uint16 {
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
		return out
	}
	minID := map[uint16]uint32{}
	count := map[uint16]int{}
	for _, p := range cl.Ports {
		root := find(p.Number)
		sid := ids[lb.ServiceKey{Cluster: cl.Address, Port: p.Number}]
		if cur, ok := minID[root]; !ok || sid < cur {
			minID[root] = sid
		}
		count[root]++
	}
	for _, p := range cl.Ports {
		if root := find(p.Number); count[root] > 1 {
			out[lb.ServiceKey{Cluster: cl.Address, Port: p.Number}] = minID[root] + 1
		}
	}
	return out
}

// table is a cached Maglev table and what it was built from.
type table struct {
	fingerprint [sha256.Size]byte
	layout      layout // the layout it maps to its servers' ids
	slots       []uint32
	sum         uint64
}

// tableJob is a Maglev table to rebuild.
type tableJob struct {
	sid     uint32
	members []maglev.Backend
	size    uint32
	fp      [sha256.Size]byte
	out     table
}

// fingerprint identifies a table's inputs: its size and its members' keys,
// ids and weights (a digest: a port's list of 100 servers is kilobytes).
// It sorts members by key.
func fingerprint(members []maglev.Backend, m uint32) [sha256.Size]byte {
	slices.SortFunc(members, func(a, b maglev.Backend) int { return strings.Compare(a.Key, b.Key) })
	return membersHash(members, m, true)
}

// layout identifies a table's layout, which of its members owns each
// slot: its size and its members' keys and weights, not their ids.
// Members must be sorted by key (fingerprint sorts them).
type layout [sha256.Size]byte

func layoutOf(members []maglev.Backend, m uint32) layout {
	return membersHash(members, m, false)
}

// membersHash hashes a table's size and its members' keys, ids (if
// withIDs) and weights, in their order.
func membersHash(members []maglev.Backend, m uint32, withIDs bool) [sha256.Size]byte {
	h := sha256.New()
	var buf [4]byte
	put := func(v uint32) {
		binary.LittleEndian.PutUint32(buf[:], v)
		h.Write(buf[:])
	}
	put(m)
	for _, b := range members {
		put(uint32(len(b.Key)))
		_, _ = io.WriteString(h, b.Key) // a hash.Hash never fails
		if withIDs {
			put(b.ID)
		}
		put(b.Weight)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// buildTables rebuilds the given tables on up to GOMAXPROCS goroutines and
// stores them in the cache. A port none of whose servers takes new
// connections has no table (nil). Maglev places a table's members by
// their keys and weights only, so the ports of one set of servers (4,000
// clusters in front of one pool, changed by one batch) share a layout,
// computed once: each table maps it to its own servers' ids.
func (e *Engine) buildTables(jobs []tableJob) {
	// The layouts to build, each with the job whose members build it,
	// and the layout of each job.
	var leaders []int
	var keys []layout
	index := map[layout]int{}
	of := make([]int, len(jobs))
	for i := range jobs {
		of[i] = -1
		if len(jobs[i].members) == 0 {
			continue
		}
		l := layoutOf(jobs[i].members, jobs[i].size)
		k, ok := index[l]
		if !ok {
			k = len(leaders)
			index[l] = k
			leaders = append(leaders, i)
			keys = append(keys, l)
		}
		of[i] = k
	}
	// Each layout holds, per slot, 1 + the index of its owner among the
	// members: built with those as ids.
	layouts := make([][]uint32, len(leaders))
	parallel(len(leaders), func(k int) {
		j := &jobs[leaders[k]]
		members := slices.Clone(j.members)
		for i := range members {
			members[i].ID = uint32(i) + 1
		}
		slots, err := maglev.Build(members, j.size)
		if err != nil {
			// Build only fails on inputs the engine never produces
			// (a non-prime size, duplicate keys); serve nothing
			// rather than something wrong.
			e.log.Error("building Maglev table", "service", j.sid, "err", fmt.Sprint(err))
			return
		}
		layouts[k] = slots
	})
	parallel(len(jobs), func(i int) {
		j := &jobs[i]
		j.out = table{fingerprint: j.fp}
		if of[i] < 0 || layouts[of[i]] == nil {
			return
		}
		l := layouts[of[i]]
		j.out.layout = keys[of[i]]
		slots := make([]uint32, len(l))
		for s, o := range l {
			slots[s] = j.members[o-1].ID
		}
		j.out.slots, j.out.sum = slots, lb.TableSum(slots)
	})
	for _, j := range jobs {
		e.exec.tables[j.sid] = j.out
	}
}

// parallel runs f(0) … f(n-1) on up to GOMAXPROCS goroutines.
func parallel(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
