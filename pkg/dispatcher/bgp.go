package dispatcher

import (
	"crypto/sha256"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher/announce"
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

// bgpState is the engine's side of BGP: the book of what it announces
// and why, the speaker's last error, and the ports' table digests.
type bgpState struct {
	book *announce.Book
	// err is the speaker's last configuration or announcement error.
	err error
	// digests caches each service's table digest, with the fingerprint
	// of the table it was computed for; byLayout each layout's (tables
	// of one layout have the same digest: its members' keys are their
	// addresses).
	digests  map[uint32]digest
	byLayout map[layout]uint64
}

func newBGPState() bgpState {
	return bgpState{book: announce.New(), digests: map[uint32]digest{}, byLayout: map[layout]uint64{}}
}

// digest is a table's digest by server address.
type digest struct {
	fingerprint [sha256.Size]byte
	sum         uint64
}

// portAccepts records in the book which servers of a port take new
// connections on their own merits (before the all-down policy spreads
// connections over failed servers); nil states forget a removed port.
func (e *Engine) portAccepts(sk lb.ServiceKey, states []effective, present bool) {
	accepting := make([]bool, len(states))
	for i, s := range states {
		accepting[i] = s.state == lb.ServerUp && s.weight > 0
	}
	e.bgp.book.Port(sk, accepting, present, time.Now())
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
	case !e.bgp.book.Up(cl.Address):
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
	for _, k := range e.bgp.book.UnmadeProbes() {
		if h := e.health.State(k); h == nil || !h.Last.Local {
			e.bgp.book.ForgetProbe(k)
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
		e.bgp.book.ProbeUnmade(k)
		return
	}
	var behind []netip.Addr
	for _, cl := range e.ed.Config().Clusters {
		if cl.Port(k.Port) != nil {
			behind = append(behind, cl.Address)
		}
	}
	e.bgp.book.ProbeMade(k, behind, time.Now())
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
			if !e.bgp.book.Settled(cl.Address, now, announce.SettleTime(cfg, cl)) {
				continue // announced by a later call (the tick's)
			}
			r := announce.Route(cl)
			if e.standsBy(cfg, cl) {
				r = announce.Standby(r)
			}
			want[cl.Address] = r
		}
	}
	list, withdrawn, announced, changed := e.bgp.book.Change(want)
	if !changed {
		return
	}
	var remed []netip.Addr // announced before, with another MED
	for a, r := range want {
		if o, ok := e.bgp.book.Sent(a); ok && o.MED != r.MED {
			remed = append(remed, a)
		}
	}
	if err := sp.Announce(list); err != nil {
		e.bgp.err = err
		e.log.Error("announcing cluster addresses", "err", err)
		return
	}
	// Withdrawals by reason, so that a summed-up line gives one.
	byReason := map[string][]netip.Addr{}
	var reasons []string
	for _, a := range withdrawn {
		reason := "the cluster is gone"
		if cl := cfg.Cluster(a); cl != nil {
			reason = e.withdrawReason(cfg, cl, e.forwarding())
		}
		if byReason[reason] == nil {
			reasons = append(reasons, reason)
		}
		byReason[reason] = append(byReason[reason], a)
	}
	for _, reason := range reasons {
		as := byReason[reason]
		logEach(e.log, "cluster address withdrawn", len(as), func(i int) []any { return []any{"cluster", as[i], "reason", reason} },
			func(i int) string { return as[i].String() }, "reason", reason)
	}
	logEach(e.log, "cluster address announced", len(announced), func(i int) []any { return []any{"cluster", announced[i], "med", want[announced[i]].MED} },
		func(i int) string { return announced[i].String() })
	slices.SortFunc(remed, netip.Addr.Compare)
	remedArgs := func(i int) []any {
		a := remed[i]
		args := []any{"cluster", a, "med", want[a].MED}
		if e.haOn(cfg) {
			state := "active"
			if e.standsBy(cfg, cfg.Cluster(a)) {
				state = "standby"
			}
			args = append(args, "high_availability", state)
		}
		return args
	}
	logEach(e.log, "cluster address announced with another MED", len(remed), remedArgs, func(i int) string { return remed[i].String() })
	e.bgp.book.Told(want)
}

// bgpPathProblems names each BGP neighbour of cfg reached through another
// interface than the executor's: the speaker's next hop for the clusters
// is this host's address on the session, there, so the neighbour sends
// their traffic where the executor does not see it (the host answers it,
// or drops it).
func (e *Engine) bgpPathProblems(cfg lb.Config) []string {
	if !cfg.BGP.Enabled() || e.exec.dp == nil || e.exec.attach.detached != "" || e.exec.attach.ifindex == 0 {
		return nil
	}
	var addrs []netip.Addr
	for _, n := range cfg.BGP.Neighbors {
		addrs = append(addrs, n.Address)
	}
	routes, _ := e.opts.Netif.Routes(addrs)
	var out []string
	for _, a := range addrs {
		r, ok := routes[a]
		if !ok || r.Ifindex == 0 || r.Ifindex == e.exec.attach.ifindex {
			continue
		}
		via := fmt.Sprintf("interface %d", r.Ifindex)
		if l, err := e.opts.Netif.LinkByIndex(r.Ifindex); err == nil {
			via = l.Name
		}
		ex := cfg.Executor.Interface
		out = append(out, fmt.Sprintf("BGP neighbour %s is reached through %s, not the executor's interface %s: it learns the "+
			"clusters with this host's address on %s as their next hop, and sends their traffic where the executor does not see it "+
			"(start the executor on %s, or route the neighbour through %s)", a, via, ex, via, via, ex))
	}
	return out
}

// standsBy reports whether this dispatcher is one of a high-availability
// pair that does not serve cl now (its peer does, or neither yet): it
// announces cl with a worse MED, so that routers send cl's traffic to the
// active. (Withdrawn instead, the route would be missing while the
// clusters move: the new active's announcement waits for its takeover,
// and for routers that delay announcements, not withdrawals.)
func (e *Engine) standsBy(cfg lb.Config, cl *lb.Cluster) bool {
	return e.haOn(cfg) && e.ha.applied[cfg.HA.GroupOf(cl)] != lb.HAActive
}

// startSpeaker configures the speaker from the saved configuration (at
// start). A failure is logged and reported, not fatal.
func (e *Engine) startSpeaker(cfg lb.Config) {
	sp := e.opts.Speaker
	if sp == nil || !cfg.BGP.Enabled() {
		return
	}
	if err := sp.Configure(cfg.BGP); err != nil {
		e.bgp.err = fmt.Errorf("starting the BGP speaker: %w", err)
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
		e.bgp.book.Told(nil)
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
	e.bgp.err = nil
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
	// Standby holds the announced clusters that this dispatcher, a
	// high-availability standby for them, announces with a worse MED.
	Standby map[netip.Addr]lb.Route
	// Err is the engine's last error talking to the speaker.
	Err string
}

// bgpStatus reports the speaker and the announcements.
func (e *Engine) bgpStatus(cfg lb.Config) *BGPStatus {
	st := &BGPStatus{Clusters: map[netip.Addr]string{}, Standby: map[netip.Addr]lb.Route{}}
	if e.opts.Speaker != nil {
		st.BGPStatus = e.opts.Speaker.Status()
	} else if cfg.BGP.Enabled() {
		st.BGPStatus.Err = errNoSpeaker.Error()
	}
	if e.bgp.err != nil {
		st.Err = e.bgp.err.Error()
	}
	attached := e.forwarding()
	for i := range cfg.Clusters {
		cl := &cfg.Clusters[i]
		why := e.withdrawReason(cfg, cl, attached)
		if why == "" && !e.bgp.book.Announced(cl.Address) && e.opts.Speaker != nil {
			why = "waiting for its servers' states to settle"
		}
		st.Clusters[cl.Address] = why
		if r, ok := e.bgp.book.Sent(cl.Address); ok && why == "" && e.standsBy(cfg, cl) {
			st.Standby[cl.Address] = r
		}
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
// same server. It is computed once per layout (1 ms at 65,537 slots: the
// first status after 4,000 tables changed took 4 s when it was computed
// per table).
func (e *Engine) tableDigest(sid uint32, sk lb.ServiceKey, p *lb.Port) uint64 {
	t, ok := e.exec.tables[sid]
	if !ok || len(t.slots) == 0 {
		return 0
	}
	if d, ok := e.bgp.digests[sid]; ok && d.fingerprint == t.fingerprint {
		return d.sum
	}
	if d, ok := e.bgp.byLayout[t.layout]; ok {
		e.bgp.digests[sid] = digest{fingerprint: t.fingerprint, sum: d}
		return d
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
	e.bgp.digests[sid] = digest{fingerprint: t.fingerprint, sum: d}
	// Layouts of tables long gone are forgotten now and then.
	if len(e.bgp.byLayout) >= max(1024, 2*len(e.exec.tables)) {
		clear(e.bgp.byLayout)
	}
	e.bgp.byLayout[t.layout] = d
	return d
}
