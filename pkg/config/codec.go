package config

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/dlbproject/dlb/pkg/lb"
)

// The values of a configuration file (file.go): how each kind of setting
// is read from a YAML node and written back to one. A field ties a key of
// an object to one setting of the model through a codec; an object's
// fields are one table that both reading and writing use, so the two
// cannot drift apart.

// codec reads and writes one kind of value. decode's errors say what is
// wrong with the value only; the reader adds the line and the path.
type codec[V any] struct {
	decode func(n *yaml.Node) (V, error)
	encode func(V) *yaml.Node
}

// field is one key of an object of type T.
type field[T any] struct {
	key string
	// set reads the key's value into x.
	set func(n *yaml.Node, x *T) error
	// node returns x's value as a node.
	node func(x *T) *yaml.Node
	// same reports whether a and b hold the same value.
	same func(a, b *T) bool
}

// fld ties key to the setting at returns, read and written with c.
func fld[T, V any](key string, c codec[V], at func(*T) *V) field[T] {
	return field[T]{
		key: key,
		set: func(n *yaml.Node, x *T) error {
			v, err := c.decode(n)
			if err != nil {
				return err
			}
			*at(x) = v
			return nil
		},
		node: func(x *T) *yaml.Node { return c.encode(*at(x)) },
		same: func(a, b *T) bool { return reflect.DeepEqual(*at(a), *at(b)) },
	}
}

// keys returns the fields' keys.
func keys[T any](fs []field[T]) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.key
	}
	return out
}

func scalarNode(tag, value string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
}

// scalar returns a scalar node's text, refusing mappings and sequences.
func scalar(n *yaml.Node, want string) (string, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Value, nil
	case yaml.MappingNode:
		return "", fmt.Errorf("want %s, got a mapping", want)
	case yaml.SequenceNode:
		return "", fmt.Errorf("want %s, got a list", want)
	}
	return "", fmt.Errorf("want %s", want)
}

// uintCodec reads a whole number in 0..max into an unsigned type.
func uintCodec[U ~uint8 | ~uint16 | ~uint32](max uint64) codec[U] {
	return codec[U]{
		decode: func(n *yaml.Node) (U, error) {
			s, err := scalar(n, "a whole number")
			if err != nil {
				return 0, err
			}
			v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
			if err != nil || v > max {
				return 0, fmt.Errorf("%q is not a whole number in 0..%d", s, max)
			}
			return U(v), nil
		},
		encode: func(v U) *yaml.Node { return scalarNode("!!int", strconv.FormatUint(uint64(v), 10)) },
	}
}

// intCodec reads a whole number (ranges are the model's to check).
var intCodec = codec[int]{
	decode: func(n *yaml.Node) (int, error) {
		s, err := scalar(n, "a whole number")
		if err != nil {
			return 0, err
		}
		v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%q is not a whole number", s)
		}
		return int(v), nil
	},
	encode: func(v int) *yaml.Node { return scalarNode("!!int", strconv.Itoa(v)) },
}

// floatCodec reads a decimal number (NaN and infinities refused).
var floatCodec = codec[float64]{
	decode: func(n *yaml.Node) (float64, error) {
		s, err := scalar(n, "a number")
		if err != nil {
			return 0, err
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, fmt.Errorf("%q is not a number", s)
		}
		return v, nil
	},
	encode: func(v float64) *yaml.Node {
		s := strconv.FormatFloat(v, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0" // read back as a float by YAML tools
		}
		return scalarNode("!!float", s)
	},
}

// parseBool reads the yes/no words dlbctl takes.
func parseBool(s string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "yes", "on":
		return true, true
	case "false", "no", "off":
		return false, true
	}
	return false, false
}

// boolCodec reads true/false (or yes/no, on/off).
var boolCodec = codec[bool]{
	decode: func(n *yaml.Node) (bool, error) {
		s, err := scalar(n, "true or false")
		if err != nil {
			return false, err
		}
		v, ok := parseBool(s)
		if !ok {
			return false, fmt.Errorf("%q is not true or false", s)
		}
		return v, nil
	},
	encode: func(v bool) *yaml.Node { return scalarNode("!!bool", strconv.FormatBool(v)) },
}

// stringCodec reads any text.
var stringCodec = codec[string]{
	decode: func(n *yaml.Node) (string, error) { return scalar(n, "text") },
	encode: func(v string) *yaml.Node {
		n := scalarNode("!!str", v)
		if _, isBool := parseBool(v); isBool || strings.EqualFold(v, "y") || strings.EqualFold(v, "n") {
			// Text YAML 1.1 tools would read as a switch.
			n.Style = yaml.DoubleQuotedStyle
		}
		return n
	},
}

// addrCodec reads an IP address; the empty text is no address.
var addrCodec = codec[netip.Addr]{
	decode: func(n *yaml.Node) (netip.Addr, error) {
		s, err := scalar(n, "an IP address")
		if err != nil {
			return netip.Addr{}, err
		}
		if strings.TrimSpace(s) == "" {
			return netip.Addr{}, nil
		}
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
		}
		return a.Unmap(), nil
	},
	encode: func(v netip.Addr) *yaml.Node {
		if !v.IsValid() {
			return scalarNode("!!str", "")
		}
		return scalarNode("!!str", v.String())
	},
}

// enumCodec reads a named value with the model's parser (protocol,
// method, ...); its errors already list the names.
func enumCodec[E fmt.Stringer](parse func(string) (E, error)) codec[E] {
	return codec[E]{
		decode: func(n *yaml.Node) (E, error) {
			var zero E
			s, err := scalar(n, "a name")
			if err != nil {
				return zero, err
			}
			return parse(strings.TrimSpace(s))
		},
		encode: func(v E) *yaml.Node { return scalarNode("!!str", v.String()) },
	}
}

// listCodec reads a list of texts (an empty list is none).
var listCodec = codec[[]string]{
	decode: func(n *yaml.Node) ([]string, error) {
		if n.Kind != yaml.SequenceNode {
			return nil, errors.New("want a list ([a, b] or one \"- item\" a line)")
		}
		var out []string
		for i, c := range n.Content {
			if c.Kind == yaml.AliasNode {
				c = c.Alias
			}
			s, err := scalar(c, "text")
			if err != nil {
				return nil, fmt.Errorf("item %d: %w", i, err)
			}
			out = append(out, s)
		}
		return out, nil
	},
	encode: func(v []string) *yaml.Node {
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
		for _, s := range v {
			n.Content = append(n.Content, scalarNode("!!str", s))
		}
		return n
	},
}

// proportionNames are the keys of a cluster's proportions, in IBM's order.
var proportionNames = []string{"active", "new", "port", "system"}

func proportionRefs(p *lb.Proportions) []*int { return []*int{&p.Active, &p.New, &p.Port, &p.System} }

// proportionsCodec reads {active: A, new: N, port: P, system: S}; a
// missing key is 0 (the model checks that they sum to 100).
var proportionsCodec = codec[lb.Proportions]{
	decode: func(n *yaml.Node) (lb.Proportions, error) {
		var p lb.Proportions
		if n.Kind != yaml.MappingNode {
			return p, errors.New("want {active: A, new: N, port: P, system: S}")
		}
		refs := proportionRefs(&p)
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i].Value, n.Content[i+1]
			j := indexOf(proportionNames, k)
			if j < 0 {
				return p, fmt.Errorf("unknown key %q (want active, new, port and system)", k)
			}
			if seen[k] {
				return p, fmt.Errorf("%s given twice", k)
			}
			seen[k] = true
			x, err := intCodec.decode(v)
			if err != nil {
				return p, fmt.Errorf("%s: %w", k, err)
			}
			*refs[j] = x
		}
		return p, nil
	},
	encode: func(p lb.Proportions) *yaml.Node {
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: yaml.FlowStyle}
		for i, r := range proportionRefs(&p) {
			n.Content = append(n.Content, scalarNode("!!str", proportionNames[i]), intCodec.encode(*r))
		}
		return n
	},
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}
