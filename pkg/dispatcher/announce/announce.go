// Package announce keeps the book of a dispatcher's BGP announcements:
// which ports have a server that takes new connections, when the servers
// of each cluster last changed (a withdrawn cluster is announced again only
// once they have settled, so that every dispatcher behind the routers has
// the same Maglev tables first), the probes this host could not make, and
// the routes the speaker was last told. The engine feeds it and asks it;
// it touches neither the host nor the speaker.
package announce

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/dlbproject/dlb/pkg/dispatcher/health"
	"github.com/dlbproject/dlb/pkg/lb"
)

// MinSettle is the shortest time a withdrawn cluster's servers must keep
// their states before it is announced.
const MinSettle = time.Second

// Book is what a dispatcher announces and why. Its zero value is not
// usable: New makes one. It is not safe for concurrent use.
type Book struct {
	// up says, per port, whether one of its servers takes new connections
	// on its own merits (before the all-down policy spreads connections
	// over failed servers); upPorts counts those ports per cluster.
	up      map[lb.ServiceKey]bool
	upPorts map[netip.Addr]int
	// accepting identifies, per port, which of its servers take new
	// connections; changed is when that last changed for any port of a
	// cluster.
	accepting map[lb.ServiceKey]uint64
	changed   map[netip.Addr]time.Time
	// unmade holds the probes whose last result this host could not make:
	// the states of their servers are unverified.
	unmade map[health.Key]bool
	// sent is what the speaker was last told to announce, by cluster.
	sent map[netip.Addr]lb.Route
}

// New returns an empty book.
func New() *Book {
	return &Book{up: map[lb.ServiceKey]bool{}, upPorts: map[netip.Addr]int{}, accepting: map[lb.ServiceKey]uint64{},
		changed: map[netip.Addr]time.Time{}, unmade: map[health.Key]bool{}, sent: map[netip.Addr]lb.Route{}}
}

// Port records which servers of a port take new connections (accepting,
// in the port's order) at now; present false forgets a removed port.
func (b *Book) Port(sk lb.ServiceKey, accepting []bool, present bool, now time.Time) {
	up := false
	h := fnv.New64a()
	for i, ok := range accepting {
		if ok {
			up = true
			var w [4]byte
			binary.LittleEndian.PutUint32(w[:], uint32(i))
			h.Write(w[:])
		}
	}
	sig := h.Sum64()
	if old, had := b.accepting[sk]; !present || !had || old != sig {
		b.changed[sk.Cluster] = now
	}
	if present {
		b.accepting[sk] = sig
	} else {
		delete(b.accepting, sk)
	}
	up = up && present
	if b.up[sk] == up {
		if !present {
			delete(b.up, sk)
		}
		return
	}
	if up {
		b.up[sk] = true
		b.upPorts[sk.Cluster]++
		return
	}
	delete(b.up, sk)
	if b.upPorts[sk.Cluster]--; b.upPorts[sk.Cluster] <= 0 {
		delete(b.upPorts, sk.Cluster)
	}
}

// Up reports whether a port of cluster has a server that takes new
// connections.
func (b *Book) Up(cluster netip.Addr) bool { return b.upPorts[cluster] > 0 }

// ProbeUnmade records that the last result of probe k was one this host
// could not make.
func (b *Book) ProbeUnmade(k health.Key) { b.unmade[k] = true }

// ProbeMade records that probe k was made: the clusters its server is
// behind (those given) must settle again, from now, before they are
// announced.
func (b *Book) ProbeMade(k health.Key, clusters []netip.Addr, now time.Time) {
	delete(b.unmade, k)
	for _, a := range clusters {
		b.changed[a] = now
	}
}

// UnmadeProbes returns the probes recorded as not made, in no order.
func (b *Book) UnmadeProbes() []health.Key {
	out := make([]health.Key, 0, len(b.unmade))
	for k := range b.unmade {
		out = append(out, k)
	}
	return out
}

// ForgetProbe forgets probe k (made again, or its advisor or server gone).
func (b *Book) ForgetProbe(k health.Key) { delete(b.unmade, k) }

// Announced reports whether the speaker was told to announce cluster.
func (b *Book) Announced(cluster netip.Addr) bool {
	_, ok := b.sent[cluster]
	return ok
}

// Settled reports whether cluster may be announced at now: it is
// announced already, or its servers kept their states for settle.
func (b *Book) Settled(cluster netip.Addr, now time.Time, settle time.Duration) bool {
	return b.Announced(cluster) || now.Sub(b.changed[cluster]) >= settle
}

// Change compares want with what the speaker was last told: the routes to
// tell it (sorted by address), and the clusters that telling it withdraws
// and announces; changed is false when it announces want already.
func (b *Book) Change(want map[netip.Addr]lb.Route) (routes []lb.Route, withdrawn, announced []netip.Addr, changed bool) {
	for a, r := range want {
		o, ok := b.sent[a]
		if !ok {
			announced = append(announced, a)
		}
		if !ok || !o.Equal(r) {
			changed = true
		}
		routes = append(routes, r)
	}
	for a := range b.sent {
		if _, ok := want[a]; !ok {
			withdrawn = append(withdrawn, a)
			changed = true
		}
	}
	slices.SortFunc(routes, func(x, y lb.Route) int { return x.Prefix.Addr().Compare(y.Prefix.Addr()) })
	slices.SortFunc(withdrawn, netip.Addr.Compare)
	slices.SortFunc(announced, netip.Addr.Compare)
	return routes, withdrawn, announced, changed
}

// Told records that the speaker announces want (nil: nothing).
func (b *Book) Told(want map[netip.Addr]lb.Route) {
	if want == nil {
		want = map[netip.Addr]lb.Route{}
	}
	b.sent = want
}

// SettleTime is how long a withdrawn cluster's servers must keep their
// states before it is announced: the longest time an advisor covering it
// takes to bring a server up (interval × rise), at least MinSettle, so
// that the servers coming back together are all back first.
func SettleTime(cfg lb.Config, cl *lb.Cluster) time.Duration {
	d := MinSettle
	for _, a := range cfg.Advisors {
		for _, p := range cl.Ports {
			if a.Covers(cl.Address, p.Number) {
				d = max(d, time.Duration(a.Interval*float64(time.Second))*time.Duration(max(a.Rise, 1)))
				break
			}
		}
	}
	return d
}

// Route is the announcement of a cluster.
func Route(cl *lb.Cluster) lb.Route {
	return lb.Route{Prefix: netip.PrefixFrom(cl.Address, cl.Address.BitLen()), Communities: cl.Communities, MED: cl.MED}
}

// StandbyMED is how much higher (worse) the MED of a cluster is when a
// dispatcher of a high-availability pair announces it while its peer
// serves it: routers send the cluster's traffic to the active, and to the
// standby only once the active's route is gone (its session dropped, or
// it withdrew), before the pair's heartbeats have moved the cluster.
const StandbyMED = 1

// Standby is r as a standby announces it: its MED raised by StandbyMED
// (a route without one counts as MED 0), at most the largest MED.
func Standby(r lb.Route) lb.Route {
	r.MED += min(StandbyMED, math.MaxUint32-r.MED)
	return r
}

// Sent returns the route the speaker was last told for cluster.
func (b *Book) Sent(cluster netip.Addr) (lb.Route, bool) {
	r, ok := b.sent[cluster]
	return r, ok
}
