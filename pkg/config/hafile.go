package config

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/dlbproject/dlb/pkg/lb"
)

// The high-availability section of a configuration file:
//
//	ha:
//	  role: primary          # primary, backup or both ("backup add")
//	  recovery: auto         # auto or manual
//	  port: 12345            # UDP heartbeats and TCP replication
//	  secret-file: /etc/dlb/ha.secret
//	  interval: 500          # ms
//	  count: 4               # intervals without a heartbeat: peer dead
//	  heartbeats:
//	    - {source: 198.18.0.2, destination: 198.18.0.4}
//	  reach: [198.18.0.254]
//
// and a cluster's "primaryhost" under role both.

// haObject is the name high-availability refusals give their object, and
// under which the file parser records the section.
const haObject = "highavailability"

// heartbeatsCodec reads a list of {source, destination}.
var heartbeatsCodec = codec[[]lb.Heartbeat]{
	decode: func(n *yaml.Node) ([]lb.Heartbeat, error) {
		if n.Kind != yaml.SequenceNode {
			return nil, errors.New("want a list of {source: ADDRESS, destination: ADDRESS}")
		}
		var out []lb.Heartbeat
		for i, c := range n.Content {
			if c.Kind != yaml.MappingNode {
				return nil, fmt.Errorf("item %d: want {source: ADDRESS, destination: ADDRESS}", i)
			}
			var hb lb.Heartbeat
			seen := map[string]bool{}
			for j := 0; j+1 < len(c.Content); j += 2 {
				k, v := c.Content[j].Value, c.Content[j+1]
				if seen[k] {
					return nil, fmt.Errorf("item %d: %s given twice", i, k)
				}
				seen[k] = true
				a, err := addrCodec.decode(v)
				if err != nil {
					return nil, fmt.Errorf("item %d: %s: %w", i, k, err)
				}
				switch k {
				case "source":
					hb.Source = a
				case "destination":
					hb.Destination = a
				default:
					return nil, fmt.Errorf("item %d: unknown key %q (want source and destination)", i, k)
				}
			}
			if !hb.Source.IsValid() || !hb.Destination.IsValid() {
				return nil, fmt.Errorf("item %d: a heartbeat needs a source and a destination", i)
			}
			out = append(out, hb)
		}
		return out, nil
	},
	encode: func(v []lb.Heartbeat) *yaml.Node {
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, hb := range v {
			m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: yaml.FlowStyle}
			addKey(m, "source", addrCodec.encode(hb.Source))
			addKey(m, "destination", addrCodec.encode(hb.Destination))
			n.Content = append(n.Content, m)
		}
		return n
	},
}

// addrListCodec reads a list of addresses.
var addrListCodec = codec[[]netip.Addr]{
	decode: func(n *yaml.Node) ([]netip.Addr, error) {
		texts, err := listCodec.decode(n)
		if err != nil {
			return nil, err
		}
		var out []netip.Addr
		for i, s := range texts {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("item %d: %q is not an IP address", i, s)
			}
			out = append(out, a.Unmap())
		}
		return out, nil
	},
	encode: func(v []netip.Addr) *yaml.Node {
		texts := make([]string, len(v))
		for i, a := range v {
			texts[i] = a.String()
		}
		return listCodec.encode(texts)
	},
}

// parseRole reads a role for the file, where "none" is no role.
func parseRole(s string) (lb.HARole, error) {
	if s == "none" || s == "" {
		return lb.RoleNone, nil
	}
	return lb.ParseHARole(s)
}

var haFields = []field[lb.HighAvailability]{
	fld("role", enumCodec(parseRole), func(x *lb.HighAvailability) *lb.HARole { return &x.Role }),
	fld("recovery", enumCodec(lb.ParseHARecovery), func(x *lb.HighAvailability) *lb.HARecovery { return &x.Recovery }),
	fld("port", uintCodec[uint16](65535), func(x *lb.HighAvailability) *uint16 { return &x.Port }),
	fld("secret-file", stringCodec, func(x *lb.HighAvailability) *string { return &x.SecretFile }),
	fld("interval", uintCodec[uint32](math.MaxUint32), func(x *lb.HighAvailability) *uint32 { return &x.Interval }),
	fld("count", uintCodec[uint32](math.MaxUint32), func(x *lb.HighAvailability) *uint32 { return &x.Count }),
	fld("heartbeats", heartbeatsCodec, func(x *lb.HighAvailability) *[]lb.Heartbeat { return &x.Heartbeats }),
	fld("reach", addrListCodec, func(x *lb.HighAvailability) *[]netip.Addr { return &x.Reach }),
}

// haSection reads the "ha" section.
func (p *fileParser) haSection(n *yaml.Node, h *lb.HighAvailability) error {
	if isEmpty(n) {
		return nil
	}
	if err := readObject(p, n, "ha", haObject, haFields, h); err != nil {
		return err
	}
	if len(h.Heartbeats) > 0 {
		if h.Interval == 0 {
			h.Interval = lb.DefaultHAInterval
		}
		if h.Count == 0 {
			h.Count = lb.DefaultHACount
		}
	}
	for i := 1; i < len(h.Heartbeats); i++ {
		if slices.Contains(h.Heartbeats[:i], h.Heartbeats[i]) {
			hb := h.Heartbeats[i]
			return p.errAt(n.Line, "ha.heartbeats", "heartbeat", "heartbeat %s/%s is given twice", hb.Source, hb.Destination)
		}
	}
	for i := 1; i < len(h.Reach); i++ {
		if slices.Contains(h.Reach[:i], h.Reach[i]) {
			return p.errAt(n.Line, "ha.reach", "reach", "reach target %s is given twice", h.Reach[i])
		}
	}
	return nil
}

// haNode returns the "ha" section of a written file, or nil when high
// availability is not configured.
func haNode(h lb.HighAvailability) *yaml.Node {
	if !h.Configured() {
		return nil
	}
	var def lb.HighAvailability
	if len(h.Heartbeats) > 0 {
		def.Interval, def.Count = lb.DefaultHAInterval, lb.DefaultHACount
	}
	return writeObject(&h, &def, haFields, []string{"role"})
}

// ha adds the steps that change the high-availability settings: the
// role first removed, heartbeats and reach targets removed, then added,
// the shared heartbeat settings changed, the role added.
func (pl *planner) ha(o, n lb.HighAvailability) {
	if o.Equal(n) {
		return
	}
	roleChanged := o.Role != n.Role || o.Recovery != n.Recovery || o.Port != n.Port
	if roleChanged && o.Role != lb.RoleNone {
		pl.add(Removed, Op{Object: Backup, Action: Remove}, "")
	}
	for _, hb := range o.Heartbeats {
		if !slices.Contains(n.Heartbeats, hb) {
			pl.add(Removed, Op{Object: Heartbeat, Action: Remove, Target: hb.Destination.String(),
				Params: []Param{P("source", hb.Source.String())}}, "")
		}
	}
	for _, a := range o.Reach {
		if !slices.Contains(n.Reach, a) {
			pl.add(Removed, Op{Object: Reach, Action: Remove, Target: a.String()}, "")
		}
	}
	var shared []Param
	var was []string
	if o.SecretFile != n.SecretFile {
		shared = append(shared, P("secretfile", n.SecretFile))
		was = append(was, "secretfile "+quote(o.SecretFile))
	}
	if o.IntervalMS() != n.IntervalMS() {
		shared = append(shared, P("interval", strconv.FormatUint(uint64(n.IntervalMS()), 10)))
		was = append(was, "interval "+strconv.FormatUint(uint64(o.IntervalMS()), 10))
	}
	if o.DeadCount() != n.DeadCount() {
		shared = append(shared, P("count", strconv.FormatUint(uint64(n.DeadCount()), 10)))
		was = append(was, "count "+strconv.FormatUint(uint64(o.DeadCount()), 10))
	}
	remaining := 0
	for _, hb := range o.Heartbeats {
		if slices.Contains(n.Heartbeats, hb) {
			remaining++
		}
	}
	if len(shared) > 0 && remaining > 0 {
		pl.add(Changed, Op{Object: Heartbeat, Action: Set, Params: shared}, strings.Join(was, " "))
		shared = nil
	}
	for _, hb := range n.Heartbeats {
		if slices.Contains(o.Heartbeats, hb) {
			continue
		}
		op := Op{Object: Heartbeat, Action: Add, Target: hb.Destination.String(), Params: []Param{P("source", hb.Source.String())}}
		op.Params = append(op.Params, shared...)
		shared = nil
		pl.add(Added, op, "")
	}
	for _, a := range n.Reach {
		if !slices.Contains(o.Reach, a) {
			pl.add(Added, Op{Object: Reach, Action: Add, Target: a.String()}, "")
		}
	}
	if roleChanged && n.Role != lb.RoleNone {
		pl.add(Added, Op{Object: Backup, Action: Add, Params: []Param{P("role", n.Role.String()),
			P("recovery", n.Recovery.String()), P("haport", strconv.Itoa(int(n.Port)))}}, "")
	}
}

// haCommand returns a high-availability operation as dlbctl's command:
// "highavailability heartbeat add SRC DEST --secret-file F ...",
// "highavailability backup add ROLE RECOVERY PORT", "highavailability
// reach add ADDR".
func haCommand(op Op) string {
	words := []string{"highavailability", string(op.Object), string(op.Action)}
	param := func(name string) (string, bool) {
		for _, p := range op.Params {
			if p.Name == name && len(p.Values) == 1 {
				return p.Values[0], true
			}
		}
		return "", false
	}
	switch op.Object {
	case Backup:
		if op.Action == Add {
			for _, n := range []string{"role", "recovery", "haport"} {
				if v, ok := param(n); ok {
					words = append(words, quote(v))
				}
			}
		}
		return strings.Join(words, " ")
	case Heartbeat:
		src, hasSrc := param("source")
		switch op.Action {
		case Add:
			words = append(words, quote(src), quote(op.Target))
		case Remove:
			words = append(words, quote(op.Target))
			if hasSrc {
				words = append(words, "--source", quote(src))
			}
		}
		flags := map[string]string{"secretfile": "secret-file", "interval": "interval", "count": "count"}
		for _, p := range op.Params {
			if f, ok := flags[p.Name]; ok && len(p.Values) == 1 {
				words = append(words, "--"+f, quote(p.Values[0]))
			}
		}
		return strings.Join(words, " ")
	}
	if op.Target != "" {
		words = append(words, quote(op.Target))
	}
	return strings.Join(words, " ")
}
