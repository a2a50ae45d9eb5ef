package config

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dlbproject/dlb/pkg/lb"
)

// MaxCommunities bounds the communities a cluster's announcement carries.
const MaxCommunities = 32

// applyBGP applies "bgp set" (--asn, --routerid, --listenport; the first
// needs the first two) and "bgp remove" (forgets the speaker and its
// neighbours: every announcement is withdrawn).
func applyBGP(d *draft, op *Op, p *params) error {
	if op.Target != "" {
		return lb.Errorf("target", "", "bgp %s takes no target (got %q)", op.Action, op.Target)
	}
	b := &d.cfg.BGP
	switch op.Action {
	case Set:
		asn, asnOK, err := p.integer("asn")
		if err != nil {
			return err
		}
		rid, ridOK, err := p.addr("routerid", "bgp")
		if err != nil {
			return err
		}
		port, portOK, err := p.ranged("listenport", "bgp", 0, 65535)
		if err != nil {
			return err
		}
		if !asnOK && !ridOK && !portOK {
			return lb.Errorf("asn", "", "bgp set needs --asn, --routerid or --listen-port")
		}
		if asnOK {
			if err := lb.CheckASN("asn", "bgp", asn); err != nil {
				return err
			}
		}
		if !b.Enabled() && (!asnOK || !ridOK) {
			return lb.Errorf("asn", "", "the first bgp set needs both --asn and --routerid")
		}
		nb := b.Clone()
		if asnOK {
			nb.ASN = uint32(asn)
		}
		if ridOK {
			nb.RouterID = rid
		}
		if portOK {
			nb.ListenPort = uint16(port)
		}
		*b = nb
	case Remove:
		if !b.Enabled() {
			return lb.Errorf("bgp", "", "bgp is not configured")
		}
		*b = lb.BGP{}
	default:
		return badAction(op)
	}
	return nil
}

// applyNeighbor applies "neighbor add|set|remove ADDRESS".
func applyNeighbor(d *draft, op *Op, p *params) error {
	a, err := parseAddr("neighbor", "", op.Target)
	if err != nil {
		return err
	}
	if !a.IsValid() {
		return lb.Errorf("neighbor", "", "bgp neighbor %s needs the neighbour's address", op.Action)
	}
	obj := a.String()
	b := &d.cfg.BGP
	i, exists := slices.BinarySearchFunc(b.Neighbors, a, func(n lb.BGPNeighbor, a netip.Addr) int { return n.Address.Compare(a) })
	switch op.Action {
	case Add, Set:
		set, any, err := neighborParams(p, obj)
		if err != nil {
			return err
		}
		if !b.Enabled() {
			return lb.Errorf("neighbor", obj, "configure the speaker first: bgp set --asn N --routerid ADDRESS")
		}
		nb := b.Clone()
		if op.Action == Add {
			if exists {
				return lb.Errorf("neighbor", obj, "already exists")
			}
			if _, given := p.get("remoteas"); !given {
				return lb.Errorf("remoteas", obj, "bgp neighbor add needs --remote-as")
			}
			n := lb.NewBGPNeighbor(a)
			set(&n)
			nb.Neighbors = slices.Insert(nb.Neighbors, i, n)
		} else {
			if !exists {
				return lb.Errorf("neighbor", obj, "is not a configured neighbour")
			}
			if !any {
				return lb.Errorf("remoteas", obj, "bgp neighbor set needs --remote-as, --password-file, --holdtime, --multihop, --bfd or --port")
			}
			set(&nb.Neighbors[i])
		}
		*b = nb
	case Remove:
		if !exists {
			return lb.Errorf("neighbor", obj, "is not a configured neighbour")
		}
		nb := b.Clone()
		nb.Neighbors = slices.Delete(nb.Neighbors, i, i+1)
		*b = nb
	default:
		return badAction(op)
	}
	return nil
}

// neighborParams reads the parameters neighbor add and set take.
func neighborParams(p *params, obj string) (func(*lb.BGPNeighbor), bool, error) {
	var sets []func(*lb.BGPNeighbor)
	if n, ok, err := p.integer("remoteas"); err != nil {
		return nil, false, err
	} else if ok {
		if err := lb.CheckASN("remoteas", obj, n); err != nil {
			return nil, false, err
		}
		sets = append(sets, func(x *lb.BGPNeighbor) { x.RemoteAS = uint32(n) })
	}
	if s, ok, err := p.str("passwordfile"); err != nil {
		return nil, false, err
	} else if ok {
		if s == "none" {
			s = ""
		}
		sets = append(sets, func(x *lb.BGPNeighbor) { x.PasswordFile = s })
	}
	if v, ok, err := p.ranged("holdtime", obj, 0, 65535); err != nil {
		return nil, false, err
	} else if ok {
		sets = append(sets, func(x *lb.BGPNeighbor) { x.HoldTime = v })
	}
	if v, ok, err := p.ranged("multihop", obj, 0, 255); err != nil {
		return nil, false, err
	} else if ok {
		sets = append(sets, func(x *lb.BGPNeighbor) { x.Multihop = uint8(v) })
	}
	if v, ok, err := p.flag("bfd"); err != nil {
		return nil, false, err
	} else if ok {
		sets = append(sets, func(x *lb.BGPNeighbor) { x.BFD = v })
	}
	if v, ok, err := p.ranged("neighborport", obj, 0, 65535); err != nil {
		return nil, false, err
	} else if ok {
		sets = append(sets, func(x *lb.BGPNeighbor) { x.Port = uint16(v) })
	}
	return func(x *lb.BGPNeighbor) {
		for _, s := range sets {
			s(x)
		}
	}, len(sets) > 0, nil
}

// announceParams reads the announcement parameters cluster add and set
// take (--announce, --communities, --med) and returns a function that
// applies them to a cluster.
func announceParams(p *params, obj string) (func(*lb.Cluster), bool, error) {
	var sets []func(*lb.Cluster)
	if v, ok, err := p.flag("announce"); err != nil {
		return nil, false, err
	} else if ok {
		sets = append(sets, func(c *lb.Cluster) { c.Announce = v })
	}
	if vals, ok := p.list("communities"); ok {
		var cs []string
		for _, v := range vals {
			// "none" (alone) clears them; values may also be joined by
			// '+' or ',' as IBM joins values.
			for _, s := range strings.FieldsFunc(v, func(r rune) bool { return r == '+' || r == ',' }) {
				if s == "none" {
					continue
				}
				c, err := lb.ParseCommunity(s)
				if err != nil {
					return nil, false, lb.Errorf("community", obj, "%v", err)
				}
				if !slices.Contains(cs, c) {
					cs = append(cs, c)
				}
			}
		}
		if len(cs) > MaxCommunities {
			return nil, false, lb.Errorf("community", obj, "%d communities, at most %d", len(cs), MaxCommunities)
		}
		sets = append(sets, func(c *lb.Cluster) { c.Communities = cs })
	}
	if v, ok, err := p.ranged("med", obj, 0, 1<<32-1); err != nil {
		return nil, false, err
	} else if ok {
		sets = append(sets, func(c *lb.Cluster) { c.MED = v })
	}
	return func(c *lb.Cluster) {
		for _, s := range sets {
			s(c)
		}
	}, len(sets) > 0, nil
}

// checkBGP checks the speaker's configuration: AS numbers, the router id
// and the neighbours' addresses (never a cluster address or this
// dispatcher's NFA: the speaker would peer with itself).
func checkBGP(cfg lb.Config) error {
	b := cfg.BGP
	if !b.Enabled() {
		if b.RouterID.IsValid() || b.ListenPort != 0 || len(b.Neighbors) > 0 {
			return lb.Errorf("asn", "bgp", "BGP settings without an AS number")
		}
		return nil
	}
	if err := lb.CheckASN("asn", "bgp", int64(b.ASN)); err != nil {
		return err
	}
	if err := checkRouterID(b.RouterID); err != nil {
		return err
	}
	for i, n := range b.Neighbors {
		obj := n.Address.String()
		if i > 0 && b.Neighbors[i-1].Address == n.Address {
			return lb.Errorf("neighbor", obj, "defined twice")
		}
		if err := checkNeighborAddr(cfg, n.Address); err != nil {
			return err
		}
		if err := lb.CheckASN("remoteas", obj, int64(n.RemoteAS)); err != nil {
			return err
		}
		if n.HoldTime != 0 && (n.HoldTime < 3 || n.HoldTime > 65535) {
			return lb.Errorf("holdtime", obj, "%d is not 0 or 3..65535 seconds (RFC 4271)", n.HoldTime)
		}
		if f := n.PasswordFile; f != "" && (!filepath.IsAbs(f) || strings.ContainsAny(f, "\n\x00")) {
			return lb.Errorf("passwordfile", obj, "%q is not an absolute file name", f)
		}
	}
	return nil
}

// checkRouterID refuses a router id that is not a usable IPv4 address.
func checkRouterID(a netip.Addr) error {
	if !a.IsValid() {
		return lb.Errorf("routerid", "bgp", "missing router id")
	}
	if !a.Is4() {
		return lb.Errorf("routerid", "bgp", "%s: a BGP router id is an IPv4 address", a)
	}
	return lb.CheckUnicast("routerid", "bgp", a)
}

// checkNeighborAddr refuses a neighbour address that cannot be a router.
func checkNeighborAddr(cfg lb.Config, a netip.Addr) error {
	obj := a.String()
	if err := lb.CheckUnicast("neighbor", obj, a); err != nil {
		return err
	}
	if _, ok := findCluster(cfg.Clusters, a); ok {
		return lb.Errorf("neighbor", obj, "%s is a cluster address", a)
	}
	if a == cfg.Executor.NFA || a == cfg.Executor.NFA6 {
		return lb.Errorf("neighbor", obj, "%s is this dispatcher's own address (nfa)", a)
	}
	return nil
}

// checkAnnounce checks a cluster's announcement settings.
func checkAnnounce(cl lb.Cluster) error {
	obj := cl.Address.String()
	if len(cl.Communities) > MaxCommunities {
		return lb.Errorf("community", obj, "%d communities, at most %d", len(cl.Communities), MaxCommunities)
	}
	for i, c := range cl.Communities {
		canon, err := lb.ParseCommunity(c)
		if err != nil {
			return lb.Errorf("community", obj, "%v", err)
		}
		if canon != c {
			return lb.Errorf("community", obj, "%q is not in canonical form (%q)", c, canon)
		}
		if slices.Contains(cl.Communities[:i], c) {
			return lb.Errorf("community", obj, "%q given twice", c)
		}
	}
	return nil
}

// bgpScript writes the speaker's configuration as dlbctl commands.
func bgpScript(sw *scriptWriter, b lb.BGP) {
	if !b.Enabled() {
		return
	}
	sw.printf("\nbgp set --asn %d --routerid %s", b.ASN, b.RouterID)
	if b.ListenPort != 0 {
		sw.printf(" --listen-port %d", b.ListenPort)
	}
	sw.printf("\n")
	for _, n := range b.Neighbors {
		sw.printf("bgp neighbor add %s --remote-as %d --holdtime %d", n.Address, n.RemoteAS, n.HoldTime)
		if n.Multihop != 0 {
			sw.printf(" --multihop %d", n.Multihop)
		}
		if n.Port != 0 {
			sw.printf(" --port %d", n.Port)
		}
		if n.BFD {
			sw.printf(" --bfd yes")
		}
		if n.PasswordFile != "" {
			sw.printf(" --password-file %s", quote(n.PasswordFile))
		}
		sw.printf("\n")
	}
}

// announceFlags returns the flags of "cluster add" that recreate a
// cluster's announcement settings.
func announceFlags(cl lb.Cluster) string {
	var b strings.Builder
	if cl.Announce {
		b.WriteString(" --announce yes")
	}
	for _, c := range cl.Communities {
		b.WriteString(" --community " + c)
	}
	if cl.MED != 0 {
		fmt.Fprintf(&b, " --med %d", cl.MED)
	}
	return b.String()
}
