package dispatcher

import (
	"net/netip"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
)

// Connection replication: every replicateInterval the active scans its
// executor's connection, NAT and affinity tables (through memory maps:
// the data path pays nothing) for entries that are new or changed, puts
// addresses in place of its ids, and sends them to the standby, which
// writes them into its own executor with its own ids. A new replication
// session (the standby joined or came back) starts with a full copy,
// ended by a marker the standby acknowledges: from then on it is
// synchronised. Letting go of a group sends its last changes and a
// marker after them; the peer serves only once it imported up to it.
//
// A partition that heals leaves two actives, and the one that lets go
// made connections the other lacks; it had no session to send them on.
// It owes the peer those groups' entries, and sends them with the next
// full copy. An active writes the entries of a group it serves only
// where it holds nothing used since that says otherwise (MergeConns):
// its own connections of the same time stay.

// ConnTables is what an executor offers for replication; the engine
// replicates only when its Datapath has it.
type ConnTables interface {
	// ScanConns calls f for each entry of the tables that is new or
	// changed since s's last scan (every entry when full), and records
	// in s what it saw. An entry that did not change is reported again
	// once its last use is refresh newer than when it was reported, so
	// that the standby does not expire what the active still uses.
	ScanConns(s *lb.ConnScan, full bool, refresh time.Duration, f func(lb.ConnEntry)) error
	// PutConns writes entries as if the executor had written them now
	// less their age, and returns how many it wrote.
	PutConns([]lb.ConnEntry) (int, error)
	// MergeConns writes, likewise, only the entries that no entry of
	// the executor's used since contradicts (a key it has, a NAT return
	// port another connection uses), and returns how many it wrote.
	MergeConns([]lb.ConnEntry) (int, error)
}

// replicateInterval is how often the active looks for changed entries.
const replicateInterval = 100 * time.Millisecond

// replicateRefresh is how much newer an unchanged entry's last use must
// be to be sent again, unless a port's timeouts are shorter (see
// refreshFor).
const replicateRefresh = 10 * time.Second

// refreshFor is how much newer an unchanged entry's last use must be to
// be sent again under cfg: replicateRefresh, or a third of the shortest
// time a standby keeps an idle entry (a port's staletimeout or
// stickytime, the fintimeout) if that is less, so that the standby does
// not expire an entry the active still uses; never less than
// replicateInterval.
func refreshFor(cfg lb.Config) time.Duration {
	refresh := replicateRefresh
	limit := func(seconds uint32) {
		if seconds == 0 {
			return
		}
		if d := time.Duration(seconds) * time.Second / 3; d < refresh {
			refresh = d
		}
	}
	limit(cfg.Executor.FinTimeout)
	for i := range cfg.Clusters {
		for _, p := range cfg.Clusters[i].Ports {
			limit(p.StaleTimeout)
			limit(p.StickyTime)
		}
	}
	return max(refresh, replicateInterval)
}

// replState is the engine's side of replication.
type replState struct {
	scan lb.ConnScan
	// byBackend and byService translate this executor's ids to keys;
	// rebuilt after changes (ids is the change count they were built
	// at).
	byBackend map[uint32]lb.BackendKey
	byService map[uint32]lb.ServiceKey
	ids       uint64
	// session is the replication session the last full copy went to.
	session uint64
	// owed are the groups let go with no session to send their last
	// entries on: the next full copy carries them.
	owed [lb.NumHAGroups]bool
	// movedOut are the clusters a change moved out of a group served
	// here into one that is not (mutual high availability: their
	// primaryhost now names the peer). Until the peer's configuration
	// says the same it does not serve them, and the segment still
	// sends their clients here: the entries this executor makes for
	// them keep going to the peer, which has them all once it serves.
	movedOut map[netip.Addr]bool
	// agreed is when the peer's configuration digest was first seen
	// equal to this one's while clusters were moved out (zero: not).
	agreed time.Time
}

// movedOutGrace is how long clusters moved out keep being replicated
// after the peer's configuration agreed: its change announced them at
// once, and what the segment sent here meanwhile is sent on.
const movedOutGrace = time.Second

// noteMovedOut records the clusters the change from old to next moves
// out of a group served here into one that is not, and forgets those
// removed or served here again.
func (e *Engine) noteMovedOut(old, next lb.Config, ch config.Change) {
	if !e.haOn(next) {
		e.repl.movedOut, e.repl.agreed = nil, time.Time{}
		return
	}
	for a := range e.repl.movedOut {
		if cl := next.Cluster(a); cl == nil || e.ha.applied[next.HA.GroupOf(cl)] == lb.HAActive {
			delete(e.repl.movedOut, a)
		}
	}
	if !e.haOn(old) {
		return
	}
	for a := range ch.Clusters {
		was, now := old.Cluster(a), next.Cluster(a)
		if was == nil || now == nil {
			continue
		}
		if e.ha.applied[old.HA.GroupOf(was)] == lb.HAActive && e.ha.applied[next.HA.GroupOf(now)] != lb.HAActive {
			if e.repl.movedOut == nil {
				e.repl.movedOut = map[netip.Addr]bool{}
			}
			e.repl.movedOut[a] = true
			e.repl.agreed = time.Time{}
			e.log.Info("high availability: a cluster moved to the peer; its connections made here are sent to the peer until its configuration says the same",
				"cluster", a)
		}
	}
}

// settleMovedOut forgets the clusters moved out once the peer's
// configuration has agreed with this one for movedOutGrace.
func (e *Engine) settleMovedOut() {
	if len(e.repl.movedOut) == 0 {
		return
	}
	st := e.opts.HA.Status()
	if !st.Peer.Alive || st.Peer.Digest != e.ha.digest.Sum() {
		e.repl.agreed = time.Time{}
		return
	}
	if e.repl.agreed.IsZero() {
		e.repl.agreed = time.Now()
		return
	}
	if time.Since(e.repl.agreed) >= movedOutGrace {
		e.log.Info("high availability: the peer serves the clusters moved to it", "clusters", len(e.repl.movedOut))
		e.repl.movedOut, e.repl.agreed = nil, time.Time{}
	}
}

// connTables returns the executor's replication, if it has one.
func (e *Engine) connTables() (ConnTables, bool) {
	if e.exec.dp == nil {
		return nil, false
	}
	ct, ok := e.exec.dp.(ConnTables)
	return ct, ok
}

// reverseIDs rebuilds the id → key maps if the configuration changed.
func (e *Engine) reverseIDs() {
	if e.repl.byBackend != nil && e.repl.ids == e.facts.changes {
		return
	}
	e.repl.byBackend = make(map[uint32]lb.BackendKey, len(e.ids.Backends))
	for k, id := range e.ids.Backends {
		e.repl.byBackend[id] = k
	}
	e.repl.byService = make(map[uint32]lb.ServiceKey, len(e.ids.Services))
	for k, id := range e.ids.Services {
		e.repl.byService[id] = k
	}
	e.repl.ids = e.facts.changes
}

// scanRecords scans the tables (all of them when full) and returns the
// records of the clusters of the groups in send.
func (e *Engine) scanRecords(cfg lb.Config, full bool, send [lb.NumHAGroups]bool) []lb.ConnRecord {
	ct, ok := e.connTables()
	if !ok {
		return nil
	}
	e.reverseIDs()
	var out []lb.ConnRecord
	groupOf := map[netip.Addr]lb.HAGroup{}
	for i := range cfg.Clusters {
		groupOf[cfg.Clusters[i].Address] = cfg.HA.GroupOf(&cfg.Clusters[i])
	}
	err := ct.ScanConns(&e.repl.scan, full, refreshFor(cfg), func(c lb.ConnEntry) {
		svc, ok := e.repl.byService[c.Service]
		if !ok {
			return
		}
		if g, ok := groupOf[svc.Cluster]; !ok || !send[g] && !e.repl.movedOut[svc.Cluster] {
			return
		}
		bk, ok := e.repl.byBackend[c.Backend]
		if !ok || bk.Service != svc && c.Kind != lb.ConnAffinity {
			return
		}
		cluster := c.Cluster
		if c.Kind == lb.ConnAffinity {
			cluster = netip.AddrPortFrom(svc.Cluster, svc.Port)
		}
		out = append(out, lb.ConnRecord{Kind: c.Kind, Protocol: c.Protocol, Client: c.Client, Cluster: cluster,
			Server: bk.Server, NAT: c.NAT, Closing: c.Closing, Age: c.Age})
	})
	if err != nil {
		e.log.Error("replication: scanning the connection tables", "err", err)
	}
	return out
}

// activeGroups says which groups this dispatcher serves, and whether it
// has entries to send: a group served, or a cluster moved out.
func (e *Engine) activeGroups() ([lb.NumHAGroups]bool, bool) {
	var out [lb.NumHAGroups]bool
	any := len(e.repl.movedOut) > 0
	for g, st := range e.ha.applied {
		if st == lb.HAActive {
			out[g], any = true, true
		}
	}
	return out, any
}

// haReplicate sends what changed (everything, to a new session).
func (e *Engine) haReplicate() {
	cfg := e.ed.Config()
	if !e.haOn(cfg) {
		return
	}
	s := e.opts.HA.Session()
	if s == 0 {
		return
	}
	full := s != e.repl.session
	e.settleMovedOut()
	send, any := e.activeGroups()
	if full {
		for g, owed := range e.repl.owed {
			if owed {
				send[g], any = true, true
			}
		}
	}
	if !any && !full {
		return
	}
	var b lb.ConnBatch
	if any {
		b.Records = e.scanRecords(cfg, full, send)
	}
	if full {
		b.Marker, b.Full = e.opts.HA.NextMarker(), true
	}
	if len(b.Records) == 0 && b.Marker == 0 {
		return
	}
	if e.opts.HA.Send(b) && full {
		e.repl.session = s
		e.repl.owed = [lb.NumHAGroups]bool{}
		e.log.Info("replication: full copy sent", "records", len(b.Records))
	}
}

// haSendLast sends the peer the last changes of the groups served here
// while the executor still holds them: it is about to be removed, and
// the peer takes the groups over once it hears so; the release then has
// no tables to scan (the last 100 ms of connections were lost).
func (e *Engine) haSendLast(cfg lb.Config) {
	if !e.haOn(cfg) || e.exec.dp == nil || e.opts.HA.Session() == 0 {
		return
	}
	send, any := e.activeGroups()
	if !any {
		return
	}
	if recs := e.scanRecords(cfg, false, send); len(recs) > 0 && !e.opts.HA.Send(lb.ConnBatch{Records: recs}) {
		e.log.Warn("replication: the last connections before the executor stops could not be sent", "records", len(recs))
	}
}

// haFlush sends group g's last changes and a marker after them, and
// returns the marker (0: nothing could be sent).
func (e *Engine) haFlush(cfg lb.Config, g lb.HAGroup) uint64 {
	if e.opts.HA.Session() == 0 {
		return 0
	}
	var send [lb.NumHAGroups]bool
	send[g] = true
	b := lb.ConnBatch{Records: e.scanRecords(cfg, false, send), Marker: e.opts.HA.NextMarker()}
	if !e.opts.HA.Send(b) {
		return 0
	}
	return b.Marker
}

// haImport writes the peer's records into the executor, with this
// dispatcher's ids: over what it holds, but in the groups it serves
// (the peer served them too, a partition healing) only where it holds
// nothing used since that says otherwise.
func (e *Engine) haImport(b lb.ConnBatch) {
	if len(b.Records) > 0 {
		if ct, ok := e.connTables(); ok {
			cfg := e.ed.Config()
			serving := map[netip.Addr]bool{}
			for i := range cfg.Clusters {
				if e.ha.applied[cfg.HA.GroupOf(&cfg.Clusters[i])] == lb.HAActive {
					serving[cfg.Clusters[i].Address] = true
				}
			}
			entries := make([]lb.ConnEntry, 0, len(b.Records))
			var merge []lb.ConnEntry
			for _, r := range b.Records {
				bk := r.Backend()
				bid, okB := e.ids.Backends[bk]
				sid, okS := e.ids.Services[bk.Service]
				if !okB || !okS {
					e.ha.unknown++
					continue
				}
				ce := lb.ConnEntry{Kind: r.Kind, Protocol: r.Protocol, Client: r.Client, Cluster: r.Cluster,
					NAT: r.NAT, Backend: bid, Service: sid, Closing: r.Closing, Age: r.Age}
				if serving[r.Cluster.Addr()] {
					merge = append(merge, ce)
				} else {
					entries = append(entries, ce)
				}
			}
			n, err := ct.PutConns(entries)
			e.ha.imported += uint64(n)
			if err != nil {
				e.log.Error("replication: writing the peer's entries", "err", err)
			}
			if len(merge) > 0 {
				n, err := ct.MergeConns(merge)
				e.ha.imported += uint64(n)
				e.ha.merged += uint64(n)
				e.ha.kept += uint64(len(merge) - n)
				if err != nil {
					e.log.Error("replication: merging the peer's entries", "err", err)
				}
			}
		}
	}
	if b.Marker != 0 {
		e.opts.HA.Imported(b.Marker)
	}
	if b.Full {
		// The reports count the copy's connections now, not at the next
		// sweep: a takeback right after the copy showed 0 for up to 2 s.
		e.sweepConns()
	}
}
