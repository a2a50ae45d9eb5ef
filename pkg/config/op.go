package config

import (
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/dlbproject/dlb/pkg/lb"
)

// Object names what an operation changes.
type Object string

// Objects an operation can change.
const (
	Executor Object = "executor"
	Cluster  Object = "cluster"
	Port     Object = "port"
	Server   Object = "server"
	Manager  Object = "manager"
	Advisor  Object = "advisor"
	Metric   Object = "metric"
	// Heartbeat, Backup and Reach are high availability's
	// ("highavailability heartbeat|backup|reach" in dlbctl): a heartbeat
	// path to the peer (add, set, remove; the target is the peer's
	// address), the role (add, remove), a reach target (add, remove).
	Heartbeat Object = "heartbeat"
	Backup    Object = "backup"
	Reach     Object = "reach"
	// BGP is the speaker (set, remove); Neighbor a router it peers with
	// (add, set, remove; the target is the neighbour's address).
	BGP      Object = "bgp"
	Neighbor Object = "neighbor"
)

// Action is what an operation does to its object. Not every object takes
// every action.
type Action string

// Actions.
const (
	Start     Action = "start"     // executor, manager, advisor
	Stop      Action = "stop"      // executor, manager, advisor
	Set       Action = "set"       // executor, cluster, port, server, manager, advisor, metric
	Add       Action = "add"       // cluster, port, server, metric
	Remove    Action = "remove"    // cluster, port, server, metric
	Down      Action = "down"      // server
	Up        Action = "up"        // server
	Quiesce   Action = "quiesce"   // manager (target: cluster@port@server, or a server address)
	Unquiesce Action = "unquiesce" // manager
)

// Op is one edit of the configuration, in the model's terms: an object,
// an action on it, the objects it addresses in IBM's cluster@port@server
// grammar (an empty component selects every existing object of its kind,
// '+' joins several values), and the parameters given with it.
type Op struct {
	Object Object  `json:"object"`
	Action Action  `json:"action"`
	Target string  `json:"target,omitempty"`
	Params []Param `json:"params,omitempty"`
}

// Param is one parameter of an operation: its keyword (IBM's, which is
// also dlbctl's flag name: "weight", "returnaddress", ...) and its values
// as text ("yes"/"no" for a switch; several for proportions, metrics and
// an exec advisor's arguments). The operation that takes it parses and
// checks it; a parameter the operation does not take is refused.
type Param struct {
	Name   string   `json:"name"`
	Values []string `json:"values"`
}

// P returns a parameter; a shorthand for building operations.
func P(name string, values ...string) Param { return Param{Name: name, Values: values} }

// params reads an operation's parameters and remembers which were read,
// so that one given but not taken is refused by name (unused).
type params struct {
	op   *Op
	read []bool
}

func newParams(op *Op) *params { return &params{op: op, read: make([]bool, len(op.Params))} }

// get returns the values of a parameter and whether it was given; a
// parameter given twice is the later one.
func (p *params) get(name string) ([]string, bool) {
	var out []string
	found := false
	for i, x := range p.op.Params {
		if x.Name == name {
			p.read[i] = true
			out, found = x.Values, true
		}
	}
	return out, found
}

// unused refuses the first parameter the operation did not read.
func (p *params) unused() error {
	for i, x := range p.op.Params {
		if !p.read[i] {
			return lb.Errorf(x.Name, "", "%s %s does not take --%s", p.op.Object, p.op.Action, x.Name)
		}
	}
	return nil
}

// str returns a one-value parameter as text.
func (p *params) str(name string) (string, bool, error) {
	v, ok := p.get(name)
	if !ok {
		return "", false, nil
	}
	if len(v) != 1 {
		return "", true, lb.Errorf(name, "", "takes one value, got %d", len(v))
	}
	return v[0], true, nil
}

// integer returns a whole-number parameter.
func (p *params) integer(name string) (int64, bool, error) {
	s, ok, err := p.str(name)
	if !ok || err != nil {
		return 0, ok, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, true, lb.Errorf(name, "", "%q is not a whole number", s)
	}
	return n, true, nil
}

// ranged returns a whole-number parameter that must lie in lo..hi.
func (p *params) ranged(name, obj string, lo, hi int64) (uint32, bool, error) {
	n, ok, err := p.integer(name)
	if !ok || err != nil {
		return 0, ok, err
	}
	v, err := inRange(name, obj, n, lo, hi)
	return v, true, err
}

// number returns a decimal-number parameter (NaN and infinities refused).
func (p *params) number(name string) (float64, bool, error) {
	s, ok, err := p.str(name)
	if !ok || err != nil {
		return 0, ok, err
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, true, lb.Errorf(name, "", "%q is not a number", s)
	}
	return f, true, nil
}

// flag returns a yes/no parameter.
func (p *params) flag(name string) (bool, bool, error) {
	s, ok, err := p.str(name)
	if !ok || err != nil {
		return false, ok, err
	}
	switch strings.ToLower(s) {
	case "yes", "true", "on", "1":
		return true, true, nil
	case "no", "false", "off", "0":
		return false, true, nil
	}
	return false, true, lb.Errorf(name, "", "%q is not yes or no", s)
}

// addr returns an address parameter; "none" (or empty) is the zero Addr.
func (p *params) addr(name, obj string) (netip.Addr, bool, error) {
	s, ok, err := p.str(name)
	if !ok || err != nil {
		return netip.Addr{}, ok, err
	}
	a, err := parseAddr(name, obj, s)
	return a, true, err
}

// list returns a parameter's values (any number).
func (p *params) list(name string) ([]string, bool) {
	v, ok := p.get(name)
	return append([]string(nil), v...), ok
}

// parseAddr parses an address parameter; "none" is the zero Addr.
func parseAddr(field, obj, s string) (netip.Addr, error) {
	if s == "" || s == "none" {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, lb.Errorf(field, obj, "%q is not an IP address", s)
	}
	return a.Unmap(), nil
}

// inRange checks an integer parameter.
func inRange(field, obj string, v, lo, hi int64) (uint32, error) {
	if v < lo || v > hi {
		return 0, lb.Errorf(field, obj, "%d is outside %d..%d", v, lo, hi)
	}
	return uint32(v), nil
}

// OpError is a refused operation: which one in the batch, and why.
type OpError struct {
	// Index is the position of the operation in its batch, or -1 when
	// the batch as a whole was refused.
	Index int
	// Err says why; it is (or wraps) an *lb.FieldError when a field is to
	// blame.
	Err error
}

// Error formats the refusal.
func (e *OpError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }
