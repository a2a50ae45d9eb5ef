package config

import (
	"net/netip"

	"github.com/dlbproject/dlb/internal/compact"
	"github.com/dlbproject/dlb/pkg/lb"
)

// Roles an address plays for the servers of a configuration.
const (
	roleServer = iota
	roleRouter
	roleReturn
	nRoles
)

// uses counts, for every address, how many servers of the configuration
// use it in each role: as the server's address, as its router, as its
// return address. Validation asks it about the addresses a change
// touches instead of scanning the whole configuration.
type uses struct {
	n map[netip.Addr]*[nRoles]int32
}

func newUses(cfg lb.Config) *uses {
	u := &uses{n: map[netip.Addr]*[nRoles]int32{}}
	for _, cl := range cfg.Clusters {
		for _, p := range cl.Ports {
			for _, s := range p.Servers {
				u.add(s, 1)
			}
		}
	}
	return u
}

// roles returns the addresses a server uses, by role.
func roles(s lb.Server) [nRoles]netip.Addr {
	return [nRoles]netip.Addr{s.Address, s.Router, s.ReturnAddress}
}

func (u *uses) add(s lb.Server, d int32) {
	for r, a := range roles(s) {
		if !a.IsValid() {
			continue
		}
		c := u.n[a]
		if c == nil {
			c = new([nRoles]int32)
			u.n[a] = c
		}
		c[r] += d
		if *c == ([nRoles]int32{}) {
			delete(u.n, a)
		}
	}
}

// count returns how many servers use a in role r.
func (u *uses) count(a netip.Addr, r int) int32 {
	if c := u.n[a]; c != nil {
		return c[r]
	}
	return 0
}

// lookupServer returns the server a key names in cfg.
func lookupServer(cfg lb.Config, k lb.BackendKey) (lb.Server, bool) {
	ci, ok := findCluster(cfg.Clusters, k.Service.Cluster)
	if !ok {
		return lb.Server{}, false
	}
	ps := cfg.Clusters[ci].Ports
	pi, ok := findPort(ps, k.Service.Port)
	if !ok {
		return lb.Server{}, false
	}
	si, ok := findServer(ps[pi].Servers, k.Server)
	if !ok {
		return lb.Server{}, false
	}
	return ps[pi].Servers[si], true
}

// each calls f with the old and new value of every server ch lists (with
// weight -1 for the old, +1 for the new).
func each(old, next lb.Config, ch Change, f func(s lb.Server, d int32)) {
	for k, kind := range ch.Servers {
		if kind != Added {
			if s, ok := lookupServer(old, k); ok {
				f(s, -1)
			}
		}
		if kind != Removed {
			if s, ok := lookupServer(next, k); ok {
				f(s, 1)
			}
		}
	}
}

// counter answers how many servers use an address in a role.
type counter interface {
	count(a netip.Addr, r int) int32
}

// view is the counts of a configuration that differs from a counted one:
// top holds the counts of the addresses the difference touches, base the
// rest.
type view struct {
	base *uses
	top  map[netip.Addr]*[nRoles]int32
}

func (v view) count(a netip.Addr, r int) int32 {
	if c, ok := v.top[a]; ok {
		return c[r]
	}
	return v.base.count(a, r)
}

// with returns the counts of next, which differs from the counted
// configuration old by ch, without changing u.
func (u *uses) with(old, next lb.Config, ch Change) counter {
	top := map[netip.Addr]*[nRoles]int32{}
	each(old, next, ch, func(s lb.Server, d int32) {
		for r, a := range roles(s) {
			if !a.IsValid() {
				continue
			}
			c := top[a]
			if c == nil {
				c = new([nRoles]int32)
				if b := u.n[a]; b != nil {
					*c = *b
				}
				top[a] = c
			}
			c[r] += d
		}
	})
	return view{base: u, top: top}
}

// apply makes u count next, which differs from old by ch.
func (u *uses) apply(old, next lb.Config, ch Change) {
	removed := 0
	each(old, next, ch, func(s lb.Server, d int32) {
		u.add(s, d)
		if d < 0 {
			removed++
		}
	})
	u.n = compact.Map(u.n, removed)
}
