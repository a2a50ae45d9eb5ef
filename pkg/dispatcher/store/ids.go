package store

import (
	"slices"

	"github.com/dlbproject/dlb/internal/compact"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
)

// IDs are the executor ids of services (a cluster's port) and backends
// (a server of a port). They are persisted so that a restarted dlbd names
// the same objects in the pinned maps the same way. Freed ids are handed
// out again as late as possible (round robin), so that a connection entry
// left pointing at a removed backend is swept long before its id names
// another server.
type IDs struct {
	Services    map[lb.ServiceKey]uint32 `json:"services"`
	Backends    map[lb.BackendKey]uint32 `json:"backends"`
	NextService uint32                   `json:"next_service"`
	NextBackend uint32                   `json:"next_backend"`

	// usedS and usedB are the ids in use (the maps' values).
	usedS, usedB map[uint32]bool
}

// NewIDs returns an empty id space.
func NewIDs() *IDs {
	x := &IDs{Services: map[lb.ServiceKey]uint32{}, Backends: map[lb.BackendKey]uint32{}, NextService: 1, NextBackend: 1}
	x.index()
	return x
}

// index rebuilds the used-id sets from the maps.
func (x *IDs) index() {
	if x.Services == nil {
		x.Services = map[lb.ServiceKey]uint32{}
	}
	if x.Backends == nil {
		x.Backends = map[lb.BackendKey]uint32{}
	}
	x.NextService, x.NextBackend = max(x.NextService, 1), max(x.NextBackend, 1)
	x.usedS = make(map[uint32]bool, len(x.Services))
	for _, id := range x.Services {
		x.usedS[id] = true
	}
	x.usedB = make(map[uint32]bool, len(x.Backends))
	for _, id := range x.Backends {
		x.usedB[id] = true
	}
}

// Clone returns a deep copy.
func (x *IDs) Clone() *IDs {
	out := &IDs{NextService: x.NextService, NextBackend: x.NextBackend,
		Services: make(map[lb.ServiceKey]uint32, len(x.Services)), Backends: make(map[lb.BackendKey]uint32, len(x.Backends))}
	for k, v := range x.Services {
		out.Services[k] = v
	}
	for k, v := range x.Backends {
		out.Backends[k] = v
	}
	out.index()
	return out
}

// IDDelta is a change to the ids: what was added, what removed (with the
// ids they had), and the counters before and after. Apply makes it, and
// Revert undoes it.
type IDDelta struct {
	AddServices map[lb.ServiceKey]uint32 `json:"add_services,omitempty"`
	AddBackends map[lb.BackendKey]uint32 `json:"add_backends,omitempty"`
	DelServices map[lb.ServiceKey]uint32 `json:"del_services,omitempty"`
	DelBackends map[lb.BackendKey]uint32 `json:"del_backends,omitempty"`
	NextService uint32                   `json:"next_service"`
	NextBackend uint32                   `json:"next_backend"`

	prevService, prevBackend uint32
}

// Empty reports whether the delta changes nothing.
func (d *IDDelta) Empty() bool {
	return len(d.AddServices)+len(d.AddBackends)+len(d.DelServices)+len(d.DelBackends) == 0
}

// Apply frees the ids of what ch removes and gives ids to what it adds,
// keeping every other id, and returns what it did. It refuses, changing
// nothing, when the executor's tables (maxServices, maxBackends) cannot
// hold the result.
func (x *IDs) Apply(ch config.Change, maxServices, maxBackends uint32) (*IDDelta, error) {
	d := &IDDelta{AddServices: map[lb.ServiceKey]uint32{}, AddBackends: map[lb.BackendKey]uint32{},
		DelServices: map[lb.ServiceKey]uint32{}, DelBackends: map[lb.BackendKey]uint32{},
		prevService: x.NextService, prevBackend: x.NextBackend}
	var addS []lb.ServiceKey
	for k, kind := range ch.Ports {
		switch kind {
		case config.Removed:
			if id, ok := x.Services[k]; ok {
				d.DelServices[k] = id
			}
		case config.Added:
			if _, ok := x.Services[k]; !ok {
				addS = append(addS, k)
			}
		}
	}
	var addB []lb.BackendKey
	for k, kind := range ch.Servers {
		switch kind {
		case config.Removed:
			if id, ok := x.Backends[k]; ok {
				d.DelBackends[k] = id
			}
		case config.Added:
			if _, ok := x.Backends[k]; !ok {
				addB = append(addB, k)
			}
		}
	}
	if n := uint32(len(x.Services) - len(d.DelServices) + len(addS)); n > maxServices-1 {
		return nil, lb.Errorf("port", "", "the executor holds at most %d ports (dlbd --max-ports), this change needs %d", maxServices-1, n)
	}
	if n := uint32(len(x.Backends) - len(d.DelBackends) + len(addB)); n > maxBackends-1 {
		return nil, lb.Errorf("server", "", "the executor holds at most %d servers (dlbd --max-servers), this change needs %d", maxBackends-1, n)
	}
	// Sorted, so that the same change gives the same ids everywhere.
	slices.SortFunc(addS, compareService)
	slices.SortFunc(addB, func(a, b lb.BackendKey) int {
		if c := compareService(a.Service, b.Service); c != 0 {
			return c
		}
		return a.Server.Compare(b.Server)
	})
	for k, id := range d.DelServices {
		delete(x.Services, k)
		delete(x.usedS, id)
	}
	for k, id := range d.DelBackends {
		delete(x.Backends, k)
		delete(x.usedB, id)
	}
	x.Services = compact.Map(x.Services, len(d.DelServices))
	x.usedS = compact.Map(x.usedS, len(d.DelServices))
	x.Backends = compact.Map(x.Backends, len(d.DelBackends))
	x.usedB = compact.Map(x.usedB, len(d.DelBackends))
	for _, k := range addS {
		id := allocate(x.usedS, &x.NextService, maxServices)
		x.Services[k] = id
		d.AddServices[k] = id
	}
	for _, k := range addB {
		id := allocate(x.usedB, &x.NextBackend, maxBackends)
		x.Backends[k] = id
		d.AddBackends[k] = id
	}
	d.NextService, d.NextBackend = x.NextService, x.NextBackend
	return d, nil
}

func compareService(a, b lb.ServiceKey) int {
	if c := a.Cluster.Compare(b.Cluster); c != 0 {
		return c
	}
	return int(a.Port) - int(b.Port)
}

// allocate takes the next free id at or after *next, wrapping within
// [1, max); the caller made sure one is free.
func allocate(used map[uint32]bool, next *uint32, max uint32) uint32 {
	id := *next
	for used[id] || id == 0 || id >= max {
		id++
		if id >= max {
			id = 1
		}
	}
	used[id] = true
	*next = id + 1
	if *next >= max {
		*next = 1
	}
	return id
}

// Revert undoes the delta Apply returned (the last one applied).
func (x *IDs) Revert(d *IDDelta) {
	x.exchange(d.AddServices, d.AddBackends, d.DelServices, d.DelBackends)
	x.NextService, x.NextBackend = d.prevService, d.prevBackend
}

// replay applies a delta read back from the journal.
func (x *IDs) replay(d *IDDelta) {
	x.exchange(d.DelServices, d.DelBackends, d.AddServices, d.AddBackends)
	x.NextService, x.NextBackend = d.NextService, d.NextBackend
}

// exchange frees the ids of goneS and goneB, then gives those of
// backS and backB again: a delta replayed is its deletions then its
// additions, a delta reverted the other way round.
func (x *IDs) exchange(goneS map[lb.ServiceKey]uint32, goneB map[lb.BackendKey]uint32,
	backS map[lb.ServiceKey]uint32, backB map[lb.BackendKey]uint32) {
	for k, id := range goneS {
		delete(x.Services, k)
		delete(x.usedS, id)
	}
	for k, id := range goneB {
		delete(x.Backends, k)
		delete(x.usedB, id)
	}
	x.Services = compact.Map(x.Services, len(goneS))
	x.usedS = compact.Map(x.usedS, len(goneS))
	x.Backends = compact.Map(x.Backends, len(goneB))
	x.usedB = compact.Map(x.usedB, len(goneB))
	for k, id := range backS {
		x.Services[k] = id
		x.usedS[id] = true
	}
	for k, id := range backB {
		x.Backends[k] = id
		x.usedB[id] = true
	}
}
