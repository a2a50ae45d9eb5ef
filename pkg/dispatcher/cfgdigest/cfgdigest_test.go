package cfgdigest

import (
	"net/netip"
	"testing"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
)

var (
	vip  = netip.MustParseAddr("198.18.0.100")
	vip2 = netip.MustParseAddr("198.18.0.101")
)

func server(a string, weight uint32) lb.Server {
	return lb.Server{Address: netip.MustParseAddr(a), Weight: weight}
}

// base has two clusters, two ports and three servers.
func base() lb.Config {
	p80, p443 := lb.NewPort(80), lb.NewPort(443)
	p80.Servers = []lb.Server{server("198.18.0.21", 10), server("198.18.0.22", 10)}
	p443.Servers = []lb.Server{server("198.18.0.23", 5)}
	cfg := lb.Config{Clusters: []lb.Cluster{{Address: vip, Ports: []lb.Port{p80, p443}}, {Address: vip2}}}
	cfg.Executor.Interface, cfg.Executor.NFA = "eth0", netip.MustParseAddr("198.18.0.2")
	cfg.Sort()
	return cfg
}

func full(cfg lb.Config) uint64 {
	var d Digest
	d.Full(cfg)
	return d.Sum()
}

// TestUpdateFollowsChanges: after each change, the incremental digest is
// the digest computed whole; a change of what a pair must share changes
// it, and what differs between the two of a pair does not.
func TestUpdateFollowsChanges(t *testing.T) {
	for _, c := range []struct {
		name    string
		change  func(cfg *lb.Config)
		changes bool
	}{
		{"a server's weight", func(cfg *lb.Config) { cfg.Clusters[0].Ports[0].Servers[1].Weight = 3 }, true},
		{"a server added", func(cfg *lb.Config) {
			p := &cfg.Clusters[0].Ports[1]
			p.Servers = append(p.Servers, server("198.18.0.24", 1))
		}, true},
		{"a server removed", func(cfg *lb.Config) { cfg.Clusters[0].Ports[0].Servers = cfg.Clusters[0].Ports[0].Servers[:1] }, true},
		{"a port's setting", func(cfg *lb.Config) { cfg.Clusters[0].Ports[1].StickyTime = 60 }, true},
		{"a port removed with its server", func(cfg *lb.Config) { cfg.Clusters[0].Ports = cfg.Clusters[0].Ports[:1] }, true},
		{"a cluster removed", func(cfg *lb.Config) { cfg.Clusters = cfg.Clusters[:1] }, true},
		{"a cluster added", func(cfg *lb.Config) {
			cfg.Clusters = append(cfg.Clusters, lb.Cluster{Address: netip.MustParseAddr("198.18.0.102")})
		}, true},
		{"the executor's interface and NFA", func(cfg *lb.Config) {
			cfg.Executor.Interface, cfg.Executor.NFA = "eth1", netip.MustParseAddr("198.18.0.4")
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			old := base()
			next := old.Clone()
			c.change(&next)
			next.Sort()
			var d Digest
			d.Full(old)
			before := d.Sum()
			d.Update(old, next, config.Diff(old, next))
			if want := full(next); d.Sum() != want {
				t.Errorf("incremental digest %s, computed whole %s", Text(d.Sum()), Text(want))
			}
			if changed := d.Sum() != before; changed != c.changes {
				t.Errorf("digest changed: %v, want %v", changed, c.changes)
			}
			d.Update(next, old, config.Diff(next, old))
			if d.Sum() != before {
				t.Errorf("the change undone: %s, want %s", Text(d.Sum()), Text(before))
			}
		})
	}
}

// TestOrderDoesNotMatter: the same clusters, ports and servers listed in
// another order have the same digest.
func TestOrderDoesNotMatter(t *testing.T) {
	a := base()
	b := a.Clone()
	b.Clusters[0], b.Clusters[1] = b.Clusters[1], b.Clusters[0]
	p := &b.Clusters[1].Ports[0]
	p.Servers[0], p.Servers[1] = p.Servers[1], p.Servers[0]
	if full(a) != full(b) {
		t.Errorf("digests %s and %s of the same configuration in two orders", Text(full(a)), Text(full(b)))
	}
	if full(a) == full(lb.Config{}) {
		t.Error("a configuration has the digest of an empty one")
	}
	if got := Text(0xab); got != "00000000000000ab" {
		t.Errorf("Text: %q", got)
	}
}
