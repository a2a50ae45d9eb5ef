package config

import (
	"net/netip"
	"reflect"
	"slices"

	"github.com/dlbproject/dlb/pkg/lb"
)

// Kind says how an object changed.
type Kind uint8

// Kinds of change.
const (
	// Added: the object is new.
	Added Kind = iota + 1
	// Removed: the object is gone.
	Removed
	// Changed: the object's own settings changed (for a cluster or a
	// port: not counting its ports or servers, which are listed apart).
	Changed
)

// String returns "added", "removed" or "changed".
func (k Kind) String() string {
	switch k {
	case Added:
		return "added"
	case Removed:
		return "removed"
	case Changed:
		return "changed"
	}
	return "unchanged"
}

// Change lists what differs between two configurations, object by object.
type Change struct {
	// Executor, Manager and MetricServer say whether their settings
	// changed.
	Executor, Manager, MetricServer bool
	// HA says whether the high-availability settings changed.
	HA bool
	// BGP says whether the speaker's settings or neighbours changed.
	BGP bool
	// Advisors, by key (name@cluster@port).
	Advisors map[string]Kind
	// Clusters, ports and servers. A cluster or port that is added or
	// removed has its ports and servers listed as added or removed too.
	Clusters map[netip.Addr]Kind
	Ports    map[lb.ServiceKey]Kind
	Servers  map[lb.BackendKey]Kind
}

// Empty reports whether nothing changed.
func (c Change) Empty() bool {
	return !c.Executor && !c.Manager && !c.MetricServer && !c.HA && !c.BGP && len(c.Advisors) == 0 &&
		len(c.Clusters) == 0 && len(c.Ports) == 0 && len(c.Servers) == 0
}

// PortsTouched returns, sorted, every port that changed in any way: added,
// removed, its settings changed, or one of its servers added, removed or
// changed.
func (c Change) PortsTouched() []lb.ServiceKey {
	set := map[lb.ServiceKey]bool{}
	for k := range c.Ports {
		set[k] = true
	}
	for k := range c.Servers {
		set[k.Service] = true
	}
	out := make([]lb.ServiceKey, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.SortFunc(out, compareService)
	return out
}

func compareService(a, b lb.ServiceKey) int {
	if c := a.Cluster.Compare(b.Cluster); c != 0 {
		return c
	}
	return int(a.Port) - int(b.Port)
}

// Diff returns what changed from old to next; both must be sorted (as
// every configuration an Editor makes is). Parts that next shares with old
// (an Editor's edits copy only what they touch) are skipped without
// looking inside, so a Diff after a small edit costs little however large
// the configuration is.
func Diff(old, next lb.Config) Change {
	c := Change{
		Executor:     old.Executor != next.Executor,
		Manager:      old.Manager != next.Manager,
		MetricServer: old.MetricServer != next.MetricServer,
		HA:           !old.HA.Equal(next.HA),
		BGP:          !old.BGP.Equal(next.BGP),
		Advisors:     map[string]Kind{},
		Clusters:     map[netip.Addr]Kind{},
		Ports:        map[lb.ServiceKey]Kind{},
		Servers:      map[lb.BackendKey]Kind{},
	}
	diffAdvisors(&c, old.Advisors, next.Advisors)
	if sameSlice(old.Clusters, next.Clusters) {
		return c
	}
	merge(old.Clusters, next.Clusters, func(a, b lb.Cluster) int { return a.Address.Compare(b.Address) },
		func(o, n *lb.Cluster) {
			switch {
			case o == nil:
				c.Clusters[n.Address] = Added
				c.ports(n.Address, nil, n.Ports)
			case n == nil:
				c.Clusters[o.Address] = Removed
				c.ports(o.Address, o.Ports, nil)
			default:
				if !sameClusterSettings(*o, *n) {
					c.Clusters[n.Address] = Changed
				}
				if !sameSlice(o.Ports, n.Ports) {
					c.ports(n.Address, o.Ports, n.Ports)
				}
			}
		})
	return c
}

// ports records the differences between a cluster's old and new ports.
func (c *Change) ports(cluster netip.Addr, old, next []lb.Port) {
	merge(old, next, func(a, b lb.Port) int { return int(a.Number) - int(b.Number) }, func(o, n *lb.Port) {
		switch {
		case o == nil:
			k := lb.ServiceKey{Cluster: cluster, Port: n.Number}
			c.Ports[k] = Added
			c.servers(k, nil, n.Servers)
		case n == nil:
			k := lb.ServiceKey{Cluster: cluster, Port: o.Number}
			c.Ports[k] = Removed
			c.servers(k, o.Servers, nil)
		default:
			k := lb.ServiceKey{Cluster: cluster, Port: n.Number}
			if !samePortSettings(*o, *n) {
				c.Ports[k] = Changed
			}
			if !sameSlice(o.Servers, n.Servers) {
				c.servers(k, o.Servers, n.Servers)
			}
		}
	})
}

// servers records the differences between a port's old and new servers.
func (c *Change) servers(k lb.ServiceKey, old, next []lb.Server) {
	merge(old, next, func(a, b lb.Server) int { return a.Address.Compare(b.Address) }, func(o, n *lb.Server) {
		switch {
		case o == nil:
			c.Servers[lb.BackendKey{Service: k, Server: n.Address}] = Added
		case n == nil:
			c.Servers[lb.BackendKey{Service: k, Server: o.Address}] = Removed
		case *o != *n:
			c.Servers[lb.BackendKey{Service: k, Server: n.Address}] = Changed
		}
	})
}

func diffAdvisors(c *Change, old, next []lb.Advisor) {
	byKey := map[string]lb.Advisor{}
	for _, a := range old {
		byKey[a.Key()] = a
	}
	for _, a := range next {
		o, ok := byKey[a.Key()]
		switch {
		case !ok:
			c.Advisors[a.Key()] = Added
		case !reflect.DeepEqual(o, a):
			c.Advisors[a.Key()] = Changed
		}
		delete(byKey, a.Key())
	}
	for k := range byKey {
		c.Advisors[k] = Removed
	}
}

// sameSlice reports whether two slices are the same slice: same length
// and the same backing array (an Editor's edits share what they do not
// touch).
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// sameClusterSettings compares a cluster's own settings, not its ports.
func sameClusterSettings(a, b lb.Cluster) bool {
	return a.Configure == b.Configure && a.Proportions == b.Proportions && slices.Equal(a.Metrics, b.Metrics) &&
		a.PrimaryHost == b.PrimaryHost &&
		a.Announce == b.Announce && a.MED == b.MED && slices.Equal(a.Communities, b.Communities)
}

// samePortSettings compares a port's own settings, not its servers.
func samePortSettings(a, b lb.Port) bool {
	a.Servers, b.Servers = nil, nil
	return reflect.DeepEqual(a, b)
}

// merge walks two sorted slices together, calling f with each element
// present in only one of them (the other nil) or in both.
func merge[T any](a, b []T, cmp func(T, T) int, f func(o, n *T)) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && cmp(a[i], b[j]) < 0):
			f(&a[i], nil)
			i++
		case i == len(a) || cmp(a[i], b[j]) > 0:
			f(nil, &b[j])
			j++
		default:
			f(&a[i], &b[j])
			i++
			j++
		}
	}
}
