package config

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/dlbproject/dlb/pkg/lb"
)

// The BGP section of a configuration file, in the words of "dlbctl bgp
// set" and "dlbctl bgp neighbor add":
//
//	bgp:
//	  asn: 65001             # this dispatcher's AS number
//	  routerid: 198.18.0.2   # an IPv4 address of this host
//	  listen-port: 179       # default 0: outgoing sessions only
//	  neighbors:
//	    - address: 198.18.0.1
//	      remote-as: 65000
//	      holdtime: 9        # the default; multihop, port, bfd,
//	      bfd: true          # password-file
//
// and a cluster's "announce", "communities" and "med". A neighbour's keys
// left out take the values "bgp neighbor add" gives (lb.NewBGPNeighbor).

// bgpObject is the name the model's refusals give the speaker's settings
// (checkBGP), under which the file parser records the section.
const bgpObject = "bgp"

// neighborObject is the name under which the file parser records a
// neighbour: the model's refusals name a neighbour by its address alone,
// as they name a cluster, so the two are told apart by the field.
func neighborObject(a string) string { return "neighbor " + a }

// neighborRefusals are the fields of the model's refusals of a neighbour.
var neighborRefusals = []string{"neighbor", "remoteas", "holdtime", "multihop", "passwordfile", "bfd", "neighborport"}

// objectOf returns where the object a refusal names is in the file.
func (p *fileParser) objectOf(fe *lb.FieldError) *objectPos {
	if slices.Contains(neighborRefusals, fe.Field) {
		if o := p.objects[neighborObject(fe.Object)]; o != nil {
			return o
		}
	}
	return p.objects[fe.Object]
}

// bgpFields leave out the neighbours, which the reader and the writer
// handle themselves.
var bgpFields = []field[lb.BGP]{
	fld("asn", uintCodec[uint32](math.MaxUint32), func(x *lb.BGP) *uint32 { return &x.ASN }),
	fld("routerid", addrCodec, func(x *lb.BGP) *netip.Addr { return &x.RouterID }),
	fld("listen-port", uintCodec[uint16](65535), func(x *lb.BGP) *uint16 { return &x.ListenPort }),
}

// neighborFields leave out the address. Their keys are the flags of "bgp
// neighbor add".
var neighborFields = []field[lb.BGPNeighbor]{
	fld("remote-as", uintCodec[uint32](math.MaxUint32), func(x *lb.BGPNeighbor) *uint32 { return &x.RemoteAS }),
	fld("holdtime", uintCodec[uint32](math.MaxUint32), func(x *lb.BGPNeighbor) *uint32 { return &x.HoldTime }),
	fld("multihop", uintCodec[uint8](255), func(x *lb.BGPNeighbor) *uint8 { return &x.Multihop }),
	fld("port", uintCodec[uint16](65535), func(x *lb.BGPNeighbor) *uint16 { return &x.Port }),
	fld("password-file", stringCodec, func(x *lb.BGPNeighbor) *string { return &x.PasswordFile }),
	fld("bfd", boolCodec, func(x *lb.BGPNeighbor) *bool { return &x.BFD }),
}

// neighborParamNames are the parameters of "bgp neighbor add|set" by the
// file's keys.
var neighborParamNames = map[string]string{"remote-as": "remoteas", "holdtime": "holdtime", "multihop": "multihop",
	"port": "neighborport", "password-file": "passwordfile", "bfd": "bfd"}

// communitiesCodec reads a cluster's communities: a list of standard
// (A:B), large (A:B:C) or well-known communities, kept in canonical text.
// Those given twice are left to the model to refuse.
var communitiesCodec = codec[[]string]{
	decode: func(n *yaml.Node) ([]string, error) {
		texts, err := listCodec.decode(n)
		if err != nil {
			return nil, err
		}
		var out []string
		for i, s := range texts {
			c, err := lb.ParseCommunity(strings.TrimSpace(s))
			if err != nil {
				return nil, fmt.Errorf("item %d: %w", i, err)
			}
			out = append(out, c)
		}
		return out, nil
	},
	encode: listCodec.encode,
}

// bgpSection reads the "bgp" section.
func (p *fileParser) bgpSection(n *yaml.Node, b *lb.BGP) error {
	if isEmpty(n) {
		return nil
	}
	const path = "bgp"
	m, err := p.mapping(n, path, append(keys(bgpFields), "neighbors"))
	if err != nil {
		return err
	}
	if err := readFields(p, m, n, path, bgpObject, bgpFields, b); err != nil {
		return err
	}
	nn := m["neighbors"]
	if nn == nil {
		return nil
	}
	items, err := p.sequence(nn, path+".neighbors")
	if err != nil {
		return err
	}
	first := map[netip.Addr]int{}
	for i, item := range items {
		npath := index(path+".neighbors", i)
		nm, err := p.mapping(item, npath, append([]string{"address"}, keys(neighborFields)...))
		if err != nil {
			return err
		}
		addr, an, err := required(p, nm, item, npath, "address", addrCodec)
		if err != nil {
			return err
		}
		if !addr.IsValid() {
			return p.errAt(an.Line, npath+".address", "neighbor", "a neighbour needs an address")
		}
		if l, dup := first[addr]; dup {
			return p.errAt(an.Line, npath+".address", "neighbor", "neighbor %s is defined twice (first at line %d)", addr, l)
		}
		first[addr] = an.Line
		if _, ok := nm["remote-as"]; !ok {
			return p.errAt(item.Line, npath, "remoteas", "remote-as is required")
		}
		nb := lb.NewBGPNeighbor(addr)
		if err := readFields(p, nm, item, npath, neighborObject(addr.String()), neighborFields, &nb); err != nil {
			return err
		}
		b.Neighbors = append(b.Neighbors, nb)
	}
	return nil
}

// bgpNode returns the "bgp" section of a written file, or nil when BGP is
// not configured.
func bgpNode(b lb.BGP) *yaml.Node {
	if b.Equal(lb.BGP{}) {
		return nil
	}
	n := writeObject(&b, &lb.BGP{}, bgpFields, []string{"asn", "routerid"})
	if len(b.Neighbors) > 0 {
		ns := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for i := range b.Neighbors {
			nb := &b.Neighbors[i]
			m := mappingNode()
			addKey(m, "address", addrCodec.encode(nb.Address))
			def := lb.NewBGPNeighbor(nb.Address)
			m.Content = append(m.Content, writeObject(nb, &def, neighborFields, []string{"remote-as"}).Content...)
			ns.Content = append(ns.Content, m)
		}
		addKey(n, "neighbors", ns)
	}
	return n
}

// bgp adds the steps that change the speaker: "bgp remove" when next has
// none (it forgets the neighbours too); else the neighbours next does
// not have removed, the speaker's settings set ("bgp set", which the
// first time needs the AS number and the router id), and the neighbours
// added or set.
func (pl *planner) bgp(o, n lb.BGP) {
	if o.Equal(n) {
		return
	}
	if !n.Enabled() {
		if o.Enabled() {
			pl.add(Removed, Op{Object: BGP, Action: Remove}, "")
		}
		return
	}
	for _, on := range o.Neighbors {
		if n.Neighbor(on.Address) == nil {
			pl.add(Removed, Op{Object: Neighbor, Action: Remove, Target: on.Address.String()}, "")
		}
	}
	var ps []Param
	var was []string
	if !o.Enabled() || o.ASN != n.ASN {
		ps = append(ps, P("asn", uitoa(uint64(n.ASN))))
		was = append(was, "asn "+uitoa(uint64(o.ASN)))
	}
	if !o.Enabled() || o.RouterID != n.RouterID {
		ps = append(ps, P("routerid", n.RouterID.String()))
		was = append(was, "routerid "+addrText(o.RouterID))
	}
	if o.ListenPort != n.ListenPort {
		ps = append(ps, P("listenport", uitoa(uint64(n.ListenPort))))
		was = append(was, "listen-port "+uitoa(uint64(o.ListenPort)))
	}
	switch {
	case len(ps) == 0:
	case !o.Enabled():
		pl.add(Added, Op{Object: BGP, Action: Set, Params: ps}, "")
	default:
		pl.add(Changed, Op{Object: BGP, Action: Set, Params: ps}, strings.Join(was, " "))
	}
	for i := range n.Neighbors {
		nn := &n.Neighbors[i]
		t := nn.Address.String()
		if on := o.Neighbor(nn.Address); on != nil {
			if ps, was := neighborChanges(on, nn); len(ps) > 0 {
				pl.add(Changed, Op{Object: Neighbor, Action: Set, Target: t, Params: ps}, was)
			}
			continue
		}
		def := lb.NewBGPNeighbor(nn.Address)
		ps, _ := neighborChanges(&def, nn)
		// The remote AS always: "bgp neighbor add" needs it.
		if !slices.ContainsFunc(ps, func(x Param) bool { return x.Name == "remoteas" }) {
			ps = append([]Param{P("remoteas", uitoa(uint64(nn.RemoteAS)))}, ps...)
		}
		pl.add(Added, Op{Object: Neighbor, Action: Add, Target: t, Params: ps}, "")
	}
}

// neighborChanges returns the parameters of "bgp neighbor set" that make
// o into n, and o's values in the flags' words.
func neighborChanges(o, n *lb.BGPNeighbor) ([]Param, string) {
	var ps []Param
	var was []string
	value := func(f field[lb.BGPNeighbor], x *lb.BGPNeighbor) string {
		if f.key == "password-file" && x.PasswordFile == "" {
			return "none"
		}
		return text(f, x)
	}
	for _, f := range neighborFields {
		if f.same(o, n) {
			continue
		}
		ps = append(ps, P(neighborParamNames[f.key], value(f, n)))
		was = append(was, f.key+" "+quote(value(f, o)))
	}
	return ps, strings.Join(was, " ")
}

// announce puts a cluster's announcement settings on the step that adds
// it, and sets them where they changed.
func (pl *planner) announce(old, next lb.Config, ch Change) {
	for _, a := range sortedKeys(ch.Clusters, netip.Addr.Compare) {
		var o lb.Cluster
		switch ch.Clusters[a] {
		case Removed:
			continue
		case Changed:
			o = *old.Cluster(a)
		}
		n := next.Cluster(a)
		ps, was := announceChanges(&o, n)
		if len(ps) == 0 {
			continue
		}
		if ch.Clusters[a] == Added {
			for i := range pl.steps {
				if op := &pl.steps[i].Op; op.Object == Cluster && op.Action == Add && op.Target == a.String() {
					op.Params = append(op.Params, ps...)
				}
			}
			continue
		}
		pl.add(Changed, Op{Object: Cluster, Action: Set, Target: a.String(), Params: ps}, was)
	}
}

// announceChanges returns the parameters of "cluster set" that make o's
// announcement settings n's, and o's values in the flags' words.
func announceChanges(o, n *lb.Cluster) ([]Param, string) {
	var ps []Param
	var was []string
	if o.Announce != n.Announce {
		ps = append(ps, P("announce", yesNo(n.Announce)))
		was = append(was, "announce "+yesNo(o.Announce))
	}
	if !slices.Equal(o.Communities, n.Communities) {
		ps = append(ps, P("communities", communityValues(n.Communities)...))
		was = append(was, "community "+strings.Join(communityValues(o.Communities), " "))
	}
	if o.MED != n.MED {
		ps = append(ps, P("med", uitoa(uint64(n.MED))))
		was = append(was, "med "+uitoa(uint64(o.MED)))
	}
	return ps, strings.Join(was, " ")
}

// communityValues are communities as the --community flag takes them:
// "none" clears them.
func communityValues(cs []string) []string {
	if len(cs) == 0 {
		return []string{"none"}
	}
	return cs
}
