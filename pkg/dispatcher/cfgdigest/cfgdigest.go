// Package cfgdigest computes a configuration's digest, which the two
// dispatchers of a high-availability pair compare: the XOR of a hash of
// each cluster's, port's and server's own settings, so that a change
// updates it in what it touched. Two dispatchers that serve the same
// clusters have the same digest, whatever order they were configured in.
// The executor's settings (its interface and NFA differ between the two),
// the advisors, the manager and high availability are left out.
package cfgdigest

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/netip"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
)

// Digest is a configuration's digest, kept up to date change by change.
// The zero value is the digest of a configuration without clusters.
type Digest struct {
	sum uint64
}

// Sum returns the digest.
func (d *Digest) Sum() uint64 { return d.sum }

// Full computes the digest of cfg, forgetting what it was.
func (d *Digest) Full(cfg lb.Config) {
	d.sum = 0
	for _, cl := range cfg.Clusters {
		d.sum ^= clusterHash(cl)
		for _, p := range cl.Ports {
			d.sum ^= portHash(cl.Address, p)
			k := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}
			for _, s := range p.Servers {
				d.sum ^= serverHash(k, s)
			}
		}
	}
}

// Update follows a change from old to next (ch: config.Diff(old, next),
// or what the change's edit reported).
func (d *Digest) Update(old, next lb.Config, ch config.Change) {
	for a, kind := range ch.Clusters {
		if kind != config.Added {
			if cl := old.Cluster(a); cl != nil {
				d.sum ^= clusterHash(*cl)
			}
		}
		if kind != config.Removed {
			if cl := next.Cluster(a); cl != nil {
				d.sum ^= clusterHash(*cl)
			}
		}
	}
	for k, kind := range ch.Ports {
		if kind != config.Added {
			if p := old.Port(k); p != nil {
				d.sum ^= portHash(k.Cluster, *p)
			}
		}
		if kind != config.Removed {
			if p := next.Port(k); p != nil {
				d.sum ^= portHash(k.Cluster, *p)
			}
		}
	}
	for k, kind := range ch.Servers {
		if kind != config.Added {
			if s := old.Server(k); s != nil {
				d.sum ^= serverHash(k.Service, *s)
			}
		}
		if kind != config.Removed {
			if s := next.Server(k); s != nil {
				d.sum ^= serverHash(k.Service, *s)
			}
		}
	}
}

// Text formats a digest as reports show it: 16 hexadecimal digits.
func Text(d uint64) string { return fmt.Sprintf("%016x", d) }

func hashOf(parts ...any) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		b, _ := json.Marshal(p)
		h.Write(b)
		h.Write([]byte{0})
	}
	return h.Sum64()
}

func clusterHash(cl lb.Cluster) uint64 {
	cl.Ports = nil
	return hashOf("cluster", cl)
}

func portHash(cl netip.Addr, p lb.Port) uint64 {
	p.Servers = nil
	return hashOf("port", cl, p)
}

func serverHash(k lb.ServiceKey, s lb.Server) uint64 {
	return hashOf("server", k, s)
}
