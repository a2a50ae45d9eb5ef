package dispatcher

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher/health"
	"github.com/dlbproject/dlb/pkg/lb"
)

// Speaker announces cluster addresses to routers over BGP. cmd/dlbd fills
// it with package bgp (the only importer of GoBGP); the engine decides
// what is announced and when, the speaker only how.
type Speaker interface {
	// Check refuses a configuration this host cannot run (a router id it
	// does not own, a neighbour that is one of its own addresses or on
	// none of its subnets, an unreadable password file). It changes
	// nothing.
	Check(lb.BGP) error
	// Configure starts, reconfigures or (for a configuration that is not
	// enabled) stops the speaker and its sessions. Announcements survive
	// a reconfiguration.
	Configure(lb.BGP) error
	// Announce makes the speaker announce exactly these routes: new ones
	// are announced, changed ones replaced, missing ones withdrawn.
	Announce([]lb.Route) error
	// Status reports the sessions and what is announced.
	Status() lb.BGPStatus
	// Close withdraws every route, closes the sessions (routers withdraw
	// at once) and stops the speaker.
	Close() error
}

// routes is what the engine announces and why.
type routes struct {
	// up says, per port, whether one of its servers takes new connections
	// on its own merits (before the all-down policy spreads connections
	// over failed servers); upPorts counts those ports per cluster.
	up      map[lb.ServiceKey]bool
	upPorts map[netip.Addr]int
	// accepting identifies, per port, which of its servers take new
	// connections; changed is when that last changed for any port of a
	// cluster. A withdrawn cluster is announced only once its servers
	// have settled (settleTime): every dispatcher must have the same view
	// of them, and so the same Maglev tables, before the routers send it
	// flows that others carried until then.
	accepting map[lb.ServiceKey]uint64
	changed   map[netip.Addr]time.Time
	// unmade holds the probes whose last result this host could not make
	// (advisors.Result.Local): the states of their servers are
	// unverified, and a cluster they cover is withdrawn until probes
	// reach its servers again and have settled.
	unmade map[health.Key]bool
	// sent is what the speaker was last told to announce, by cluster.
	sent map[netip.Addr]lb.Route
	// err is the speaker's last configuration or announcement error.
	err error
	// digests caches each service's table digest, with the fingerprint
	// of the table it was computed for.
	digests map[uint32]digest
}

// digest is a table's digest by server address.
type digest struct {
	fingerprint [sha256.Size]byte
	sum         uint64
}

func newRoutes() routes {
	return routes{up: map[lb.ServiceKey]bool{}, upPorts: map[netip.Addr]int{}, accepting: map[lb.ServiceKey]uint64{},
		changed: map[netip.Addr]time.Time{}, sent: map[netip.Addr]lb.Route{}, digests: map[uint32]digest{},
		unmade: map[health.Key]bool{}}
}

// minSettle is the shortest time a withdrawn cluster's servers must keep
// their states before it is announced.
const minSettle = time.Second

// settleTime is how long a withdrawn cluster's servers must keep their
// states before it is announced: the longest time an advisor covering it
// takes to bring a server up (interval × rise), at least minSettle, so
// that the servers coming back together are all back first.
func settleTime(cfg lb.Config, cl *lb.Cluster) time.Duration {
	d := minSettle
	for _, a := range cfg.Advisors {
		for _, p := range cl.Ports {
			if a.Covers(cl.Address, p.Number) {
				d = max(d, seconds(a.Interval)*time.Duration(max(a.Rise, 1)))
				break
			}
		}
	}
	return d
}

// port records whether a port has a server that takes new connections,
// from its servers' states; present false forgets a removed port.
func (r *routes) port(sk lb.ServiceKey, states []effective, present bool) {
	up := false
	h := fnv.New64a()
	for i, s := range states {
		ok := s.state == lb.ServerUp && s.weight > 0
		if ok {
			up = true
			var b [4]byte
			binary.LittleEndian.PutUint32(b[:], uint32(i))
			h.Write(b[:])
		}
	}
	sig := h.Sum64()
	if old, had := r.accepting[sk]; !present || !had || old != sig {
		r.changed[sk.Cluster] = time.Now()
	}
	if present {
		r.accepting[sk] = sig
	} else {
		delete(r.accepting, sk)
	}
	up = up && present
	if r.up[sk] == up {
		if !present {
			delete(r.up, sk)
		}
		return
	}
	if up {
		r.up[sk] = true
		r.upPorts[sk.Cluster]++
		return
	}
	delete(r.up, sk)
	if r.upPorts[sk.Cluster]--; r.upPorts[sk.Cluster] <= 0 {
		delete(r.upPorts, sk.Cluster)
	}
}

// forwarding reports whether the executor is loaded and its program is
// on an interface that exists: only then may traffic be drawn to this
// dispatcher.
func (e *Engine) forwarding() bool {
	if e.exec.dp == nil || e.exec.err != nil || e.exec.attach.detached != "" {
		return false
	}
	_, ok := e.exec.dp.Attached()
	return ok
}

// withdrawReason says why a cluster is not announced, or "" when it is:
// BGP configured, the cluster marked announce, the executor attached,
// and one of its ports with a server that takes new connections.
func (e *Engine) withdrawReason(cfg lb.Config, cl *lb.Cluster, attached bool) string {
	switch {
	case !cfg.BGP.Enabled():
		return "bgp is not configured"
	case !cl.Announce:
		return "announce is off"
	case !attached:
		return "the executor is not attached"
	case e.routes.upPorts[cl.Address] == 0:
		return "no server takes new connections"
	case e.unverified(cfg, cl):
		return "its advisors cannot probe its servers from this host"
	}
	return ""
}

// unverified reports whether a probe of one of cl's servers, by an
// advisor covering its port, was last one this host could not make: the
// view of that server may differ from other dispatchers', whose Maglev
// tables would then differ too. Probes that are made again, or whose
// advisor or server went, are forgotten.
func (e *Engine) unverified(cfg lb.Config, cl *lb.Cluster) bool {
	for k := range e.routes.unmade {
		if h := e.health.State(k); h == nil || !h.Last.Local {
			delete(e.routes.unmade, k)
			continue
		}
		p := cl.Port(k.Port)
		if p == nil || p.Server(k.Addr) == nil {
			continue
		}
		for _, a := range e.advisorsOn(cfg, k.Port) {
			if a.key == k.Advisor && a.covers(cl.Address) {
				return true
			}
		}
	}
	return false
}

// probesMade follows a probe whose result this host could (made) or
// could not make: a cluster whose servers are probed again must settle
// before it is announced again.
func (e *Engine) probesMade(k health.Key, made bool) {
	if !made {
		e.routes.unmade[k] = true
		return
	}
	delete(e.routes.unmade, k)
	now := time.Now()
	for _, cl := range e.ed.Config().Clusters {
		if cl.Port(k.Port) != nil {
			e.routes.changed[cl.Address] = now
		}
	}
}

// route is the announcement of a cluster.
func route(cl *lb.Cluster) lb.Route {
	return lb.Route{Prefix: netip.PrefixFrom(cl.Address, cl.Address.BitLen()), Communities: cl.Communities, MED: cl.MED}
}

// syncRoutes tells the speaker what to announce when that changed.
func (e *Engine) syncRoutes(cfg lb.Config) {
	sp := e.opts.Speaker
	if sp == nil {
		return
	}
	want := map[netip.Addr]lb.Route{}
	now := time.Now()
	if cfg.BGP.Enabled() {
		attached := e.forwarding()
		for i := range cfg.Clusters {
			cl := &cfg.Clusters[i]
			if !cl.Announce || e.withdrawReason(cfg, cl, attached) != "" {
				continue
			}
			if _, sent := e.routes.sent[cl.Address]; !sent && now.Sub(e.routes.changed[cl.Address]) < settleTime(cfg, cl) {
				continue // announced by a later call (the tick's)
			}
			want[cl.Address] = route(cl)
		}
	}
	same := len(want) == len(e.routes.sent)
	for a, r := range want {
		if o, ok := e.routes.sent[a]; !ok || !o.Equal(r) {
			same = false
		}
	}
	if same {
		return
	}
	list := make([]lb.Route, 0, len(want))
	for _, r := range want {
		list = append(list, r)
	}
	slices.SortFunc(list, func(a, b lb.Route) int { return a.Prefix.Addr().Compare(b.Prefix.Addr()) })
	if err := sp.Announce(list); err != nil {
		e.routes.err = err
		e.log.Error("announcing cluster addresses", "err", err)
		return
	}
	for a := range e.routes.sent {
		if _, ok := want[a]; !ok {
			reason := "the cluster is gone"
			if cl := cfg.Cluster(a); cl != nil {
				reason = e.withdrawReason(cfg, cl, e.forwarding())
			}
			e.log.Info("cluster address withdrawn", "cluster", a, "reason", reason)
		}
	}
	for a := range want {
		if _, ok := e.routes.sent[a]; !ok {
			e.log.Info("cluster address announced", "cluster", a)
		}
	}
	e.routes.sent = want
}

// startSpeaker configures the speaker from the saved configuration (at
// start). A failure is logged and reported, not fatal.
func (e *Engine) startSpeaker(cfg lb.Config) {
	sp := e.opts.Speaker
	if sp == nil || !cfg.BGP.Enabled() {
		return
	}
	if err := sp.Configure(cfg.BGP); err != nil {
		e.routes.err = fmt.Errorf("starting the BGP speaker: %w", err)
		e.log.Error("starting the BGP speaker from saved state", "err", err)
	}
}

// stopSpeaker withdraws everything and closes the sessions (a graceful
// shutdown): the routers stop sending to this dispatcher at once.
func (e *Engine) stopSpeaker() {
	if sp := e.opts.Speaker; sp != nil {
		if err := sp.Close(); err != nil {
			e.log.Error("stopping the BGP speaker", "err", err)
		}
		e.routes.sent = map[netip.Addr]lb.Route{}
	}
}

// errNoSpeaker refuses BGP settings in a dlbd built without a speaker.
var errNoSpeaker = lb.Errorf("bgp", "", "this dlbd runs no BGP speaker")

// reconfigureSpeaker applies a change of the speaker's configuration,
// before the rest of the change is written: it is checked against the
// host first, and a speaker that refuses it is put back as it was.
func (e *Engine) reconfigureSpeaker(old, next lb.Config, ch config.Change) error {
	if !ch.BGP {
		return nil
	}
	sp := e.opts.Speaker
	if sp == nil {
		if next.BGP.Enabled() {
			return errNoSpeaker
		}
		return nil
	}
	if next.BGP.Enabled() {
		if err := sp.Check(next.BGP); err != nil {
			return err
		}
	}
	if err := sp.Configure(next.BGP); err != nil {
		if rerr := sp.Configure(old.BGP); rerr != nil {
			e.log.Error("restoring the BGP speaker", "err", rerr)
		}
		return fmt.Errorf("configuring the BGP speaker: %w", err)
	}
	e.routes.err = nil
	return nil
}

// restoreSpeaker puts the speaker back to old after a change that
// reconfigured it was refused later.
func (e *Engine) restoreSpeaker(old lb.Config, ch config.Change) {
	if !ch.BGP || e.opts.Speaker == nil {
		return
	}
	if err := e.opts.Speaker.Configure(old.BGP); err != nil {
		e.log.Error("restoring the BGP speaker", "err", err)
	}
}

// BGPStatus is the speaker's state and each cluster's announcement.
type BGPStatus struct {
	lb.BGPStatus
	// Clusters says, per cluster, why it is not announced ("" when it
	// is).
	Clusters map[netip.Addr]string
	// Err is the engine's last error talking to the speaker.
	Err string
}

// bgpStatus reports the speaker and the announcements.
func (e *Engine) bgpStatus(cfg lb.Config) *BGPStatus {
	st := &BGPStatus{Clusters: map[netip.Addr]string{}}
	if e.opts.Speaker != nil {
		st.BGPStatus = e.opts.Speaker.Status()
	} else if cfg.BGP.Enabled() {
		st.BGPStatus.Err = errNoSpeaker.Error()
	}
	if e.routes.err != nil {
		st.Err = e.routes.err.Error()
	}
	attached := e.forwarding()
	for i := range cfg.Clusters {
		cl := &cfg.Clusters[i]
		why := e.withdrawReason(cfg, cl, attached)
		if _, sent := e.routes.sent[cl.Address]; why == "" && !sent && e.opts.Speaker != nil {
			why = "waiting for its servers' states to settle"
		}
		st.Clusters[cl.Address] = why
	}
	return st
}

// tableSizeChanges returns the ports, beyond those the change touched,
// whose table size changed with their cluster's announcement (an
// announced cluster's ports keep one size: lb.Cluster.TableIn).
func tableSizeChanges(old, next lb.Config, ch config.Change, touched []lb.ServiceKey) []lb.ServiceKey {
	var out []lb.ServiceKey
	for a, kind := range ch.Clusters {
		if kind != config.Changed {
			continue
		}
		ocl, ncl := old.Cluster(a), next.Cluster(a)
		if ocl == nil || ncl == nil || ocl.Announce == ncl.Announce {
			continue
		}
		for i := range ncl.Ports {
			p := &ncl.Ports[i]
			k := lb.ServiceKey{Cluster: a, Port: p.Number}
			if op := ocl.Port(p.Number); op != nil && ocl.TableIn(op) != ncl.TableIn(p) && !slices.Contains(touched, k) {
				out = append(out, k)
			}
		}
	}
	return out
}

// tableDigest returns a digest of a port's Maglev table by server address
// (FNV-1a 64 over each slot's server address and a newline; 0: no table).
// Ids are a dispatcher's own; addresses are what dispatchers behind ECMP
// must agree on, so equal digests mean that they send every slot to the
// same server. It is computed once per table.
func (e *Engine) tableDigest(sid uint32, sk lb.ServiceKey, p *lb.Port) uint64 {
	t, ok := e.exec.tables[sid]
	if !ok || len(t.slots) == 0 {
		return 0
	}
	if d, ok := e.routes.digests[sid]; ok && d.fingerprint == t.fingerprint {
		return d.sum
	}
	addr := make(map[uint32]string, len(p.Servers))
	for _, s := range p.Servers {
		addr[e.ids.Backends[lb.BackendKey{Service: sk, Server: s.Address}]] = s.Address.String()
	}
	h := fnv.New64a()
	for _, id := range t.slots {
		h.Write([]byte(addr[id]))
		h.Write([]byte{'\n'})
	}
	d := h.Sum64()
	if d == 0 {
		d = 1
	}
	e.routes.digests[sid] = digest{fingerprint: t.fingerprint, sum: d}
	return d
}
