package dispatcher

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/advisors"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher/events"
	"github.com/dlbproject/dlb/pkg/dispatcher/health"
	"github.com/dlbproject/dlb/pkg/doctor"
	"github.com/dlbproject/dlb/pkg/lb"
)

// syncProbes starts, restarts and stops the advisors' probes to match cfg
// on the given port numbers (nil: all).
func (e *Engine) syncProbes(cfg lb.Config, ports map[uint16]bool) {
	want := health.Wanted(cfg, ports)
	for k, err := range e.health.Sync(e.ctx, want, ports) {
		e.log.Error("starting advisor", "advisor", k.Advisor, "server", k.Addr, "err", err)
	}
}

// probeBatch bounds the probe results (and metric reports) the
// management goroutine applies at once, between its other work.
const probeBatch = 512

// onProbes applies the waiting probe results (at most probeBatch), then
// updates the executor once for every port whose servers failed or came
// back. Each port's update recomputes all its servers: done per result,
// 100,000 servers' first results took 70 s to apply (0.7 ms each);
// results that arrive together (the down verdicts of a rack lost) now
// share one update per port.
func (e *Engine) onProbes() {
	cfg := e.ed.Config()
	touched := map[lb.ServiceKey]bool{}
	var ports []lb.ServiceKey
	for _, r := range e.health.Take(probeBatch) {
		for _, k := range e.onProbe(cfg, r) {
			if !touched[k] {
				touched[k] = true
				ports = append(ports, k)
			}
		}
	}
	if len(ports) > 0 {
		e.pushPorts(cfg, ports, "advisor")
	}
}

// onProbe applies a probe result on the management goroutine: rise/fall
// and events. It returns the ports the server is on when it failed or came
// back (down, or up from down), for an immediate executor update: failover
// does not wait for the manager's cycle.
func (e *Engine) onProbe(cfg lb.Config, r health.Result) []lb.ServiceKey {
	var wasLocal bool
	if h := e.health.State(r.Key); h != nil {
		wasLocal = h.Last.Local
	}
	from, to, ok := e.health.Record(r)
	if !ok {
		return nil
	}
	switch {
	case r.Res.Local && !wasLocal:
		e.probesMade(r.Key, false)
		e.log.Warn("advisor cannot probe from this host; the server keeps its state until a probe reaches it",
			"advisor", r.Key.Advisor, "server", r.Key.Addr, "port", r.Key.Port, "state", to, "reason", r.Res.Reason)
	case !r.Res.Local && wasLocal:
		e.probesMade(r.Key, true)
		e.log.Info("advisor probes again", "advisor", r.Key.Advisor, "server", r.Key.Addr, "port", r.Key.Port)
	}
	if from == to {
		return nil
	}
	e.log.Info("advisor changed a server's state", "advisor", r.Key.Advisor, "server", r.Key.Addr, "port", r.Key.Port,
		"from", from, "to", to, "reason", r.Res.Reason)
	if from != lb.AdvisorUnknown || to == lb.AdvisorDown {
		ev := events.ServerUp
		if to == lb.AdvisorDown {
			ev = events.ServerDown
		}
		e.events.Emit(ev, map[string]string{
			"DLB_SERVER": r.Key.Addr.String(), "DLB_PORT": strconv.Itoa(int(r.Key.Port)),
			"DLB_ADVISOR": r.Key.Advisor, "DLB_REASON": r.Res.Reason,
		})
	}
	if from != lb.AdvisorDown && to != lb.AdvisorDown {
		// A first verdict of up: the server takes connections as it did
		// while unknown (only a down verdict changes what the executor
		// holds), and a restart's 100,000 first verdicts update nothing.
		return nil
	}
	// The ports the server is on that an advisor with this key covers.
	var ports []lb.ServiceKey
	for _, a := range e.advisorsOn(cfg, r.Key.Port) {
		if a.key != r.Key.Advisor {
			continue
		}
		for _, cl := range cfg.Clusters {
			if !a.covers(cl.Address) {
				continue
			}
			if p := cl.Port(r.Key.Port); p != nil && p.Server(r.Key.Addr) != nil {
				ports = append(ports, lb.ServiceKey{Cluster: cl.Address, Port: r.Key.Port})
			}
		}
	}
	return ports
}

// advisorProblem says why an advisor cannot probe from this host now, or
// "": an exec advisor's program is not there, not a regular file or not
// executable; a ping advisor can open no ICMP socket (no CAP_NET_RAW, and
// net.ipv4.ping_group_range leaves dlbd's group out); a cluster advisor
// can open no packet socket (no CAP_NET_RAW). The advisor is
// accepted all the same (the program may be installed later, the
// permission given): until it can probe, its servers keep their state.
func advisorProblem(a lb.Advisor) string {
	why := ""
	switch a.Name {
	case "exec":
		switch fi, err := os.Stat(a.Program); {
		case err != nil:
			why = "cannot run its program: " + err.Error()
		case !fi.Mode().IsRegular():
			why = "cannot run its program: not a regular file"
		default:
			if err := unix.Access(a.Program, unix.X_OK); err != nil {
				why = "cannot run its program: not executable: " + err.Error()
			}
		}
	case "ping":
		if err := advisors.CanPing(a.Cluster.IsValid() && a.Cluster.Unmap().Is6()); err != nil {
			why = err.Error() + " (dlbd needs CAP_NET_RAW, or its group in net.ipv4.ping_group_range)"
		}
	case "cluster":
		if err := doctor.CanProbe(); err != nil {
			why = err.Error()
		}
	}
	if why == "" {
		return ""
	}
	return fmt.Sprintf("advisor %s %s: until it can probe, its servers are not probed and keep their state", a.Key(), why)
}

// lacking returns those of addrs that no interface of this host has (what
// names them), asking the host once; a failed check is logged and counts
// as held: nothing is said of an address that could not be checked.
func (e *Engine) lacking(what string, addrs []netip.Addr) map[netip.Addr]bool {
	held, err := e.opts.Netif.HeldAddresses(addrs)
	if err != nil {
		e.log.Warn("checking that the host holds addresses", "what", what, "addresses", len(addrs), "err", err)
		return nil
	}
	out := map[netip.Addr]bool{}
	for _, a := range addrs {
		if !held[a] {
			out[a] = true
		}
	}
	return out
}

// nfaProblems names each NFA of cfg that no interface of this host has:
// probes leave from the NFA, so an advisor cannot probe from one that is
// missing (a typo, or taken off), and its servers keep their state,
// unwatched, until it is back.
func (e *Engine) nfaProblems(cfg lb.Config) []string {
	var nfas []netip.Addr
	for _, nfa := range []netip.Addr{cfg.Executor.NFA, cfg.Executor.NFA6} {
		if nfa.IsValid() {
			nfas = append(nfas, nfa)
		}
	}
	lacking := e.lacking("nfa", nfas)
	var out []string
	for _, nfa := range nfas {
		if lacking[nfa] {
			out = append(out, fmt.Sprintf("nfa %s is not an address of this host: advisors cannot probe from it, and their servers "+
				"keep their state unwatched, until it is put on an interface (ip addr add %s/PREFIX dev %s)", nfa, nfa, cfg.Executor.Interface))
		}
	}
	return out
}

// haSourceProblems names each heartbeat source of cfg that no interface
// of this host has while high availability has no role yet: it does not
// run, so nothing binds the source, and the "highavailability backup add"
// that starts it would be refused; said now, when the heartbeat is added.
func (e *Engine) haSourceProblems(cfg lb.Config) []string {
	if cfg.HA.Enabled() {
		return nil
	}
	var out []string
	sources := cfg.HA.Sources()
	lacking := e.lacking("heartbeat source", sources)
	for _, src := range sources {
		if lacking[src] {
			out = append(out, fmt.Sprintf("heartbeat source %s is not an address of this host: high availability cannot start "+
				"with it (highavailability backup add is refused) until it is put on an interface (ip addr add %s/PREFIX dev IF) "+
				"or the heartbeat is removed", src, src))
		}
	}
	return out
}

// haAddressProblems warns of the addresses high availability uses that
// it must not (config.HAAddressProblems): a configuration accepted
// before the check keeps working as it did, and says what to change.
func haAddressProblems(cfg lb.Config) []string {
	var out []string
	for _, err := range config.HAAddressProblems(cfg) {
		out = append(out, err.Error()+" (accepted before dlb checked it: change it)")
	}
	return out
}

// clusterProblems names the clusters of cfg (those in only, or all when
// only is nil) that nothing on this host answers ARP or neighbour
// solicitations for: not put on the interface by dlb (--configure), on no
// interface of the host, not moved by high availability and not to be
// announced over BGP. Clients on the segment cannot reach such a cluster;
// one a router routes to this host (a static route) works, hence a
// warning, not a refusal.
func (e *Engine) clusterProblems(cfg lb.Config, only map[netip.Addr]config.Kind) []string {
	if !cfg.Executor.Started || e.haOn(cfg) {
		return nil
	}
	var unput []netip.Addr
	for i := range cfg.Clusters {
		cl := &cfg.Clusters[i]
		if only != nil {
			if k, ok := only[cl.Address]; !ok || k == config.Removed {
				continue
			}
		}
		if !cl.Configure && !cl.Announce {
			unput = append(unput, cl.Address)
		}
	}
	lacking := e.lacking("cluster", unput)
	var missing []string
	for _, a := range unput {
		if lacking[a] {
			missing = append(missing, a.String())
		}
	}
	if len(missing) == 0 {
		return nil
	}
	first, ifname := missing[0], cfg.Executor.Interface
	put := fmt.Sprintf("ip addr add %s/32 dev %s", first, ifname)
	if netip.MustParseAddr(first).Is6() {
		// Deprecated, as dlbd puts its own: IPv6 source selection would
		// make it the source of the host's own connections.
		put = fmt.Sprintf("ip addr add %s/128 dev %s preferred_lft 0", first, ifname)
	}
	what, them, more := "cluster "+first+" is", "it", ""
	if len(missing) > 1 {
		what, them, more = "clusters "+listSome(missing, 3)+" are", "them", ", and so on"
	}
	return []string{fmt.Sprintf("%s on no interface of this host and dlb does not put %s on one: ARP requests and neighbour "+
		"solicitations for %s go unanswered, so clients reach %s only through a router that routes %s to this host; let dlb put %s "+
		"on %s (dlbctl cluster set %s --configure%s) or put %s there yourself (%s%s)",
		what, them, them, them, them, them, ifname, first, more, them, put, more)}
}
