package advisors

import (
	"context"
	"time"

	"github.com/dlbproject/dlb/pkg/doctor"
)

// clusterAdvisor probes a server the way clients reach it through MAC
// forwarding: a SYN to the cluster address (Target.Cluster) at the
// port, sent from the source (the NFA) to the server's MAC address on the
// interface that holds the source (the executor's), as the executor
// forwards a client's. It is up on a SYN-ACK from the cluster address (the
// connection is then reset; Load is the time from the ARP request, or the
// IPv6 neighbour solicitation, to the answer). It finds what every other advisor, which connects to the
// server's own address, cannot: a server that lost the cluster address
// from its loopback (a reboot without it, a network reconfiguration)
// drops every client's connection while answering probes to its own
// address. Down reasons: "no ARP reply" (IPv6: "no neighbour
// advertisement"), "no answer on the cluster
// address (is it on the server's loopback?)", "connection refused on the
// cluster address", "answered from ADDR, not the cluster address". It
// needs a raw packet socket (CAP_NET_RAW); a probe it cannot make (no
// permission, no source address on the host) is this host's (Local). It
// has no default port.
type clusterAdvisor struct{}

func init() { register("cluster", func() Advisor { return clusterAdvisor{} }) }

// Name implements Advisor.
func (clusterAdvisor) Name() string { return "cluster" }

// DefaultPort implements Advisor: none.
func (clusterAdvisor) DefaultPort() uint16 { return 0 }

// Probe implements Advisor.
func (clusterAdvisor) Probe(ctx context.Context, t Target) Result {
	switch {
	case !t.Address.IsValid():
		return Down("no address")
	case t.Port == 0:
		return Down("no port")
	case !t.Cluster.IsValid():
		return Down("no cluster address")
	case !t.SourceAddr().IsValid():
		r := Down("no source address: set the dispatcher's NFA")
		r.Local = true
		return r
	}
	timeout := budget(ctx, t.ConnectTimeoutOrDefault())
	if timeout <= 0 {
		return Down("canceled")
	}
	p, err := doctor.ProbeCluster(ctx, t.SourceAddr(), t.Cluster, t.Port, t.Address, timeout)
	switch {
	case ctx.Err() != nil:
		return Down("canceled")
	case err != nil:
		return Result{Reason: "cannot probe: " + err.Error(), Local: true}
	case p.ServerMAC == nil && t.Address.Unmap().Is4():
		return Down("no ARP reply")
	case p.ServerMAC == nil:
		return Down("no neighbour advertisement")
	case p.Answer == "":
		return Down("no answer on the cluster address within %s (is it on the server's loopback?)", fmtDur(timeout))
	case p.Answer == "rst":
		return Down("connection refused on the cluster address")
	case p.From != t.Cluster.Unmap():
		return Down("answered from %v, not the cluster address", p.From)
	}
	return Result{Up: true, Load: max(p.Took, time.Microsecond)}
}
