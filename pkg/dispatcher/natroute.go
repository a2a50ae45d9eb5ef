package dispatcher

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
)

// NAT sends its replies to a client through the family's client gateway
// (IBM's "executor set clientgateway") or, without one, to the next hop
// the routing table gives: a lookup from XDP that the kernel answers only
// when forwarding is on for the interface the replies arrive on. With
// neither, every NAT connection hangs and nothing else says why, so the
// engine says it: a warning when a change leaves it so, and a line of the
// executor's report while it lasts.
//
// It warns rather than refuses: a configuration is built one command at a
// time (a NAT port before its client gateway is a natural order, and
// "file load" replays that order), and forwarding is a sysctl the operator
// may set after dlbd or outside it. Refusing would break both; a warning
// names the remedy at the moment the operator can act on it.

// routedNATPorts lists the NAT ports of a family (v6: IPv6) whose
// replies go to the next hop the routing table gives: the family has no
// client gateway.
func routedNATPorts(cfg lb.Config, v6 bool) []string {
	gw := cfg.Executor.ClientGateway
	if v6 {
		gw = cfg.Executor.ClientGateway6
	}
	if gw.IsValid() {
		return nil
	}
	var ports []string
	for _, cl := range cfg.Clusters {
		if cl.Address.Is6() != v6 {
			continue
		}
		for _, p := range cl.Ports {
			if p.Method == lb.NAT {
				ports = append(ports, lb.ServiceKey{Cluster: cl.Address, Port: p.Number}.String())
			}
		}
	}
	return ports
}

// natRouteProblems says, per family, why NAT replies of cfg cannot reach
// clients: NAT ports of that family, no client gateway of it, and
// forwarding off on the executor's interface.
func (e *Engine) natRouteProblems(cfg lb.Config) []string {
	ex := cfg.Executor
	if !ex.Started || ex.Interface == "" {
		return nil
	}
	var out []string
	for _, fam := range []struct {
		v6   bool
		name string
	}{{false, "IPv4"}, {true, "IPv6"}} {
		ports := routedNATPorts(cfg, fam.v6)
		if len(ports) == 0 {
			continue
		}
		on, err := e.opts.Netif.Forwarding(ex.Interface, fam.v6)
		if errors.Is(err, fs.ErrNotExist) {
			// No such interface (yet): the executor's own state says
			// so; every report logging it again would not.
			continue
		}
		if err != nil {
			e.log.Warn("checking whether NAT replies can be routed", "err", err)
			continue
		}
		if on {
			continue
		}
		fv := "ipv4"
		if fam.v6 {
			fv = "ipv6"
		}
		out = append(out, fmt.Sprintf("NAT replies to %s clients have no route: no %s client gateway is set and forwarding is off on %s, "+
			"so the connections of %s will hang; set one with \"dlbctl executor set clientgateway ADDRESS\" or enable forwarding "+
			"(sysctl -w net.%s.conf.%s.forwarding=1)",
			fam.name, fam.name, ex.Interface, listSome(ports, 3), fv, ex.Interface))
	}
	return out
}

// natGROProblems says why NAT transfers of cfg stall: the executor runs in
// generic mode, which sees frames after GRO merged them, on an interface
// NAT traffic arrives on (its own, or a NAT server's next hop's) with GRO
// on. A merged frame carries a partial checksum, the pseudo-header's sum,
// which the NAT rewrite updates as if it were complete: the frames it is
// cut into leave with wrong checksums and the receiver drops them. Native
// mode runs before GRO. A warning, like natRouteProblems: GRO is the
// operator's to turn off, and may be turned off after dlbd starts.
func (e *Engine) natGROProblems(cfg lb.Config) []string {
	ex := cfg.Executor
	if !ex.Started || e.host.attachedMode != lb.XDPGeneric || e.exec.dp == nil {
		return nil
	}
	a, ok := e.exec.dp.Attached()
	if !ok {
		return nil
	}
	var ports []string
	ifindexes := []int{a.Ifindex}
	for _, cl := range cfg.Clusters {
		for _, p := range cl.Ports {
			if p.Method != lb.NAT {
				continue
			}
			ports = append(ports, lb.ServiceKey{Cluster: cl.Address, Port: p.Number}.String())
			for _, s := range p.Servers {
				if nb, ok := e.net.Neighbor(s.NextHop()); ok && nb.Ifindex != 0 && !slices.Contains(ifindexes, nb.Ifindex) {
					ifindexes = append(ifindexes, nb.Ifindex)
				}
			}
		}
	}
	if len(ports) == 0 {
		return nil
	}
	var out []string
	for _, ifindex := range ifindexes {
		name, on, err := e.opts.Netif.GRO(ifindex)
		if err != nil {
			e.log.Warn("checking whether GRO merges NAT traffic", "err", err)
			continue
		}
		if on {
			out = append(out, fmt.Sprintf("the executor runs in generic XDP mode and GRO is on for %s: merged frames of %s "+
				"leave with wrong TCP checksums and large transfers stall; turn GRO off (ethtool -K %s gro off) "+
				"or attach in native mode (dlbctl executor start --xdp-mode native)", name, listSome(ports, 3), name))
		}
	}
	return out
}

// natTouched reports whether a change touched a NAT port (or made one).
func natTouched(next lb.Config, ch config.Change) bool {
	for k := range ch.Ports {
		if p := next.Port(k); p != nil && p.Method == lb.NAT {
			return true
		}
	}
	return false
}

// nfaChanged reports whether the NFAs changed: the advisors' probes and
// the metric polls leave from them.
func nfaChanged(old, next lb.Config) bool {
	return old.Executor.NFA != next.Executor.NFA || old.Executor.NFA6 != next.Executor.NFA6
}

// listSome joins the first n of items and says how many more there are.
func listSome(items []string, n int) string {
	if len(items) > n {
		return strings.Join(items[:n], ", ") + fmt.Sprintf(", and %d more", len(items)-n)
	}
	return strings.Join(items, ", ")
}

// hopLookup says how a next hop is reached, or why it cannot be.
type hopLookup func(netip.Addr) (lb.Neighbor, error)

// tableLookup is a hopLookup of the next-hop table (hops resolved or
// failed already).
func (e *Engine) tableLookup(a netip.Addr) (lb.Neighbor, error) {
	nb, _ := e.net.Neighbor(a)
	return nb, e.net.Err(a)
}

// checkHops refuses a change from old to next, while the executor runs,
// that brings in a next hop this host cannot forward to (fresh: those it
// brings in, looked up by look), or that gives a NAT server a return
// address the host's own connections leave from (checkReturnSources).
func (e *Engine) checkHops(old, next lb.Config, ch config.Change, fresh []netip.Addr, look hopLookup) error {
	failed := map[netip.Addr]error{}
	for _, a := range fresh {
		if _, err := look(a); err != nil {
			failed[a] = err
		}
	}
	if len(failed) > 0 {
		return hopRefusal(next, ch, failed)
	}
	return e.checkReturnSources(old, next, ch, fresh, look)
}

// hopRefusal refuses a change to next for the next hops in failed (each
// with why it cannot be reached), naming the first server in next's order
// that the change added or changed and that forwards to one: a batch, a
// script or a file of 10,000 servers is refused for the same one every
// time, placed on the line that added it (config.Edit.Blame, the file's
// placement). A hop no such server names (a client gateway) is named
// alone, the lowest first.
func hopRefusal(next lb.Config, ch config.Change, failed map[netip.Addr]error) error {
	for _, cl := range next.Clusters {
		for _, p := range cl.Ports {
			for _, s := range p.Servers {
				h := s.NextHop()
				err, ok := failed[h]
				if !ok {
					continue
				}
				k := lb.BackendKey{Service: lb.ServiceKey{Cluster: cl.Address, Port: p.Number}, Server: s.Address}
				if kind, touched := ch.Servers[k]; !touched || kind == config.Removed {
					continue
				}
				field := "server"
				if h != s.Address {
					field = "router"
				}
				return lb.Errorf(field, k.String(), "%v", err)
			}
		}
	}
	hops := slices.Collect(maps.Keys(failed))
	a := slices.MinFunc(hops, netip.Addr.Compare)
	return lb.Errorf(hopRole(next, a), a.String(), "%v", failed[a])
}

// A return address must be the executor's alone: it takes every packet
// to one, and the guard drops what it does not take. An address the host
// uses itself (the interface's own, given as a return address) would
// lose the host's connections from it (advisors' probes without an nfa,
// metric polls, ssh from this host) and to it (ssh to this host).
// sourceHops maps the addresses this host's own connections to the next
// hops of the table, and to fresh (looked up by look), leave from (their
// routes' preferred sources) to one such hop, the lowest.
func (e *Engine) sourceHops(fresh []netip.Addr, look hopLookup) map[netip.Addr]netip.Addr {
	out := map[netip.Addr]netip.Addr{}
	add := func(h netip.Addr, nb lb.Neighbor) {
		if !nb.Src.IsValid() {
			return
		}
		if was, ok := out[nb.Src]; !ok || h.Less(was) {
			out[nb.Src] = h
		}
	}
	for _, h := range e.net.ServerHops() {
		if nb, ok := e.net.Neighbor(h); ok {
			add(h, nb)
		}
	}
	for _, h := range fresh {
		if nb, err := look(h); err == nil {
			add(h, nb)
		}
	}
	return out
}

// returnSourceText says why return address r, the source of this host's
// connections to hop, cannot serve, and how to mend it (ifname: the
// executor's interface).
func returnSourceText(r, hop netip.Addr, ifname string) string {
	fix := "give NAT an address of its own"
	if r.Is6() {
		// One put on by hand, or by an older dlbd: dlbd puts its
		// own on deprecated, which source selection passes over.
		fix += fmt.Sprintf(", or deprecate it if it is one (ip -6 addr change %s/128 dev %s preferred_lft 0)", r, ifname)
	}
	return fmt.Sprintf("%s is an address this host uses itself (its connections to %s leave from it): the executor takes "+
		"every packet to a return address, so the host's own connections from and to it would fail (ssh, advisors' probes "+
		"without an nfa, metric polls); %s", r, hop, fix)
}

// checkReturnSources refuses a change from old to next that gives a NAT
// server a return address this host's own connections leave from
// (sourceHops), fresh being the next hops the change brings in, looked up
// by look. A server that kept its return address is let be (restored
// with it, it is warned of): a change of its weight is not refused.
func (e *Engine) checkReturnSources(old, next lb.Config, ch config.Change, fresh []netip.Addr, look hopLookup) error {
	var srcs map[netip.Addr]netip.Addr
	for k, kind := range ch.Servers {
		if kind == config.Removed {
			continue
		}
		s := next.Server(k)
		if p := next.Port(k.Service); s == nil || p == nil || p.Method != lb.NAT || !s.ReturnAddress.IsValid() {
			continue
		}
		if was, op := old.Server(k), old.Port(k.Service); was != nil && op != nil && op.Method == lb.NAT && was.ReturnAddress == s.ReturnAddress {
			continue
		}
		if srcs == nil {
			srcs = e.sourceHops(fresh, look)
		}
		if hop, ok := srcs[s.ReturnAddress]; ok {
			return lb.Errorf("returnaddress", k.String(), "%s", returnSourceText(s.ReturnAddress, hop, next.Executor.Interface))
		}
	}
	return nil
}

// ownSourceProblems names the return addresses of the configuration
// that this host's own connections leave from (see sourceHops): kept
// when the executor started with them or a route changed under dlbd,
// refused by a change that brings one in. So too the cluster addresses on
// the executor's interface (an IPv6 one the operator put on without
// deprecating it): the executor takes every packet to a cluster address,
// and its guard those it does not forward.
func (e *Engine) ownSourceProblems() []string {
	if len(e.host.returns) == 0 && len(e.host.configured) == 0 {
		return nil
	}
	srcs := e.sourceHops(nil, nil)
	if len(srcs) == 0 {
		return nil
	}
	cfg := e.ed.Config()
	ifname := cfg.Executor.Interface
	var out []string
	for r := range e.host.returns {
		if hop, ok := srcs[r]; ok {
			out = append(out, "return address "+returnSourceText(r, hop, ifname)+" (dlbctl server set CLUSTER@PORT@SERVER returnaddress ADDRESS)")
		}
	}
	for a := range e.host.configured {
		hop, ok := srcs[a]
		if !ok || cfg.Cluster(a) == nil || e.host.returns[a] > 0 {
			continue
		}
		fix := "let the host's connections leave from another address"
		if a.Is6() {
			fix = fmt.Sprintf("deprecate it, as dlbd does the addresses it puts on (ip -6 addr change %s/128 dev %s preferred_lft 0)", a, ifname)
		}
		out = append(out, fmt.Sprintf("cluster address %s is an address this host uses itself (its connections to %s leave from it): "+
			"the executor takes every packet to a cluster address, so the host's own connections from it fail (ssh, metric polls "+
			"and advisors' probes without an nfa); %s", a, hop, fix))
	}
	slices.Sort(out)
	return out
}
