package config

import (
	"errors"
	"net/netip"
	"slices"

	"github.com/dlbproject/dlb/pkg/lb"
)

// draft is a configuration being edited, copy on write: it starts as a
// shallow copy of its base and copies a slice (the clusters, one cluster's
// ports, one port's servers, the advisors) the first time an edit writes
// to it. What the edits do not touch stays shared with the base, so an
// edit costs what it touches, not the size of the configuration, and the
// base is never changed. Diff relies on that sharing to skip untouched
// parts.
type draft struct {
	cfg         lb.Config
	ownClusters bool
	ownAdvisors bool
	ownPorts    map[netip.Addr]bool
	ownServers  map[lb.ServiceKey]bool
	// op is the index of the operation being applied; touched maps the
	// clusters, ports and servers (by the name refusals give them) that
	// operations added or set to the last of them (blame).
	op      int
	touched map[string]int
}

func newDraft(base lb.Config) *draft {
	return &draft{cfg: base, ownPorts: map[netip.Addr]bool{}, ownServers: map[lb.ServiceKey]bool{}, touched: map[string]int{}}
}

// touch records that the operation being applied added or set the object
// named name.
func (d *draft) touch(name string) { d.touched[name] = d.op }

// executorObject is the name touched records executor operations under
// (the executor has none in refusals).
const executorObject = "(executor)"

// blame returns the index of the operation of a batch of n to blame for
// err, a refusal of the batch as a whole: the only one, or the last that
// added or set the object err names, or the last executor operation for a
// refusal of one of the executor's fields (-1: none did, or err names
// nothing such).
func blame(n int, touched map[string]int, err error) int {
	if n == 1 {
		return 0
	}
	var fe *lb.FieldError
	if !errors.As(err, &fe) {
		return -1
	}
	if i, ok := touched[fe.Object]; ok && fe.Object != "" {
		return i
	}
	if slices.ContainsFunc(executorFields, func(f field[lb.Executor]) bool { return f.key == fe.Field }) {
		if i, ok := touched[executorObject]; ok {
			return i
		}
	}
	return -1
}

// clusters returns the draft's own, writable cluster slice.
func (d *draft) clusters() []lb.Cluster {
	if !d.ownClusters {
		d.cfg.Clusters = slices.Clone(d.cfg.Clusters)
		d.ownClusters = true
	}
	return d.cfg.Clusters
}

// cluster returns a writable cluster (its Ports slice may still be shared:
// write ports through ports()).
func (d *draft) cluster(ci int) *lb.Cluster { return &d.clusters()[ci] }

// ports returns a cluster's own, writable port slice.
func (d *draft) ports(ci int) []lb.Port {
	cl := d.cluster(ci)
	if !d.ownPorts[cl.Address] {
		cl.Ports = slices.Clone(cl.Ports)
		d.ownPorts[cl.Address] = true
	}
	return cl.Ports
}

// port returns a writable port (its Servers slice may still be shared:
// write servers through servers()).
func (d *draft) port(ci, pi int) *lb.Port { return &d.ports(ci)[pi] }

// servers returns a port's own, writable server slice.
func (d *draft) servers(ci, pi int) []lb.Server {
	cl := d.cluster(ci)
	p := d.port(ci, pi)
	k := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
	if !d.ownServers[k] {
		p.Servers = slices.Clone(p.Servers)
		d.ownServers[k] = true
	}
	return p.Servers
}

// server returns a writable server.
func (d *draft) server(ci, pi, si int) *lb.Server { return &d.servers(ci, pi)[si] }

// metrics returns a cluster's own, writable metric list.
func (d *draft) setMetrics(ci int, m []string) { d.cluster(ci).Metrics = m }

// advisors returns the draft's own, writable advisor slice.
func (d *draft) advisors() []lb.Advisor {
	if !d.ownAdvisors {
		out := make([]lb.Advisor, len(d.cfg.Advisors))
		for i, a := range d.cfg.Advisors {
			out[i] = a
			out[i].Args = slices.Clone(a.Args)
		}
		d.cfg.Advisors = out
		d.ownAdvisors = true
	}
	return d.cfg.Advisors
}

// findCluster returns the index of the cluster with address a, and
// whether it exists (if not, where it would go).
func findCluster(cls []lb.Cluster, a netip.Addr) (int, bool) {
	return slices.BinarySearchFunc(cls, a, func(c lb.Cluster, a netip.Addr) int { return c.Address.Compare(a) })
}

// findPort returns the index of port n in ps, and whether it exists.
func findPort(ps []lb.Port, n uint16) (int, bool) {
	return slices.BinarySearchFunc(ps, n, func(p lb.Port, n uint16) int { return int(p.Number) - int(n) })
}

// findServer returns the index of the server with address a, and whether
// it exists.
func findServer(ss []lb.Server, a netip.Addr) (int, bool) {
	return slices.BinarySearchFunc(ss, a, func(s lb.Server, a netip.Addr) int { return s.Address.Compare(a) })
}

// addCluster inserts a cluster in order.
func (d *draft) addCluster(cl lb.Cluster) {
	i, _ := findCluster(d.cfg.Clusters, cl.Address)
	d.cfg.Clusters = slices.Insert(d.clusters(), i, cl)
	d.ownPorts[cl.Address] = true // a new cluster's slices are its own
	d.touch(cl.Address.String())
}

// addPort inserts a port in order into cluster ci.
func (d *draft) addPort(ci int, p lb.Port) {
	ps := d.ports(ci)
	i, _ := findPort(ps, p.Number)
	cl := d.cluster(ci)
	cl.Ports = slices.Insert(ps, i, p)
	k := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
	d.ownServers[k] = true
	d.touch(k.String())
}

// addServer inserts a server in order into port (ci, pi).
func (d *draft) addServer(ci, pi int, s lb.Server) {
	ss := d.servers(ci, pi)
	i, _ := findServer(ss, s.Address)
	p := d.port(ci, pi)
	p.Servers = slices.Insert(ss, i, s)
	d.touch(lb.BackendKey{Service: lb.ServiceKey{Cluster: d.cfg.Clusters[ci].Address, Port: p.Number}, Server: s.Address}.String())
}
