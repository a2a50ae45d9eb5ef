package config

import (
	"net/netip"

	"github.com/dlbproject/dlb/pkg/lb"
)

// The objects a target selects, as indexes into the draft (valid until
// the next insert or removal).
type (
	clusterRef struct{ ci int }
	portRef    struct {
		ci, pi int
		key    lb.ServiceKey
	}
	serverRef struct {
		ci, pi, si int
		key        lb.BackendKey
	}
)

// matchClusters returns the clusters t selects; named clusters must exist,
// and a wildcard must match something.
func matchClusters(cfg *lb.Config, t lb.Target, target string) ([]clusterRef, error) {
	var out []clusterRef
	if t.Clusters != nil {
		seen := map[int]bool{}
		for _, a := range t.Clusters {
			ci, ok := findCluster(cfg.Clusters, a)
			if !ok {
				return nil, lb.Errorf("cluster", a.String(), "is not a configured cluster")
			}
			if !seen[ci] {
				seen[ci] = true
				out = append(out, clusterRef{ci})
			}
		}
		return out, nil
	}
	for ci := range cfg.Clusters {
		out = append(out, clusterRef{ci})
	}
	if len(out) == 0 {
		return nil, lb.Errorf("cluster", target, "matches no configured cluster")
	}
	return out, nil
}

// matchPorts returns the ports t selects; named ports must exist on every
// selected cluster when the clusters are named, and a wildcard must match
// something.
func matchPorts(cfg *lb.Config, t lb.Target, target string) ([]portRef, error) {
	cls, err := matchClusters(cfg, t, target)
	if err != nil {
		return nil, err
	}
	var out []portRef
	for _, c := range cls {
		cl := &cfg.Clusters[c.ci]
		if t.Ports != nil {
			seen := map[uint16]bool{}
			for _, n := range t.Ports {
				if seen[n] {
					continue
				}
				seen[n] = true
				pi, ok := findPort(cl.Ports, n)
				if !ok {
					if t.Clusters != nil {
						return nil, lb.Errorf("port", lb.ServiceKey{Cluster: cl.Address, Port: n}.String(), "is not a configured port")
					}
					continue
				}
				out = append(out, portRef{c.ci, pi, lb.ServiceKey{Cluster: cl.Address, Port: n}})
			}
			continue
		}
		for pi, p := range cl.Ports {
			out = append(out, portRef{c.ci, pi, lb.ServiceKey{Cluster: cl.Address, Port: p.Number}})
		}
	}
	if len(out) == 0 {
		return nil, lb.Errorf("port", target, "matches no configured port")
	}
	return out, nil
}

// matchServers returns the servers t selects; named servers must exist on
// every selected port when cluster and port are named, and a wildcard must
// match something.
func matchServers(cfg *lb.Config, t lb.Target, target string) ([]serverRef, error) {
	ports, err := matchPorts(cfg, t, target)
	if err != nil {
		return nil, err
	}
	var out []serverRef
	for _, pr := range ports {
		p := &cfg.Clusters[pr.ci].Ports[pr.pi]
		if t.Servers != nil {
			seen := map[netip.Addr]bool{}
			for _, a := range t.Servers {
				if seen[a] {
					continue
				}
				seen[a] = true
				si, ok := findServer(p.Servers, a)
				if !ok {
					if t.Clusters != nil && t.Ports != nil {
						return nil, lb.Errorf("server", lb.BackendKey{Service: pr.key, Server: a}.String(), "is not a configured server")
					}
					continue
				}
				out = append(out, serverRef{pr.ci, pr.pi, si, lb.BackendKey{Service: pr.key, Server: a}})
			}
			continue
		}
		for si, s := range p.Servers {
			out = append(out, serverRef{pr.ci, pr.pi, si, lb.BackendKey{Service: pr.key, Server: s.Address}})
		}
	}
	if len(out) == 0 {
		return nil, lb.Errorf("server", target, "matches no configured server")
	}
	return out, nil
}

// serversByAddress returns every server with address a, on any port of
// any cluster (IBM's "manager quiesce ADDR").
func serversByAddress(cfg *lb.Config, a netip.Addr) []serverRef {
	var out []serverRef
	for ci, cl := range cfg.Clusters {
		for pi, p := range cl.Ports {
			if si, ok := findServer(p.Servers, a); ok {
				out = append(out, serverRef{ci, pi, si, lb.BackendKey{Service: lb.ServiceKey{Cluster: cl.Address, Port: p.Number}, Server: a}})
			}
		}
	}
	return out
}

// Select parses a report's target (depth components of
// cluster@port@server; "" selects everything) and checks that the objects
// it names exist in cfg, as an operation's target must.
func Select(cfg lb.Config, target string, depth lb.Depth) (lb.Target, error) {
	t, err := lb.ParseTarget(target, depth)
	if err != nil || target == "" {
		return t, err
	}
	switch depth {
	case lb.ClusterDepth:
		_, err = matchClusters(&cfg, t, target)
	case lb.PortDepth:
		_, err = matchPorts(&cfg, t, target)
	default:
		_, err = matchServers(&cfg, t, target)
	}
	return t, err
}
