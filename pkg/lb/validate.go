package lb

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// FieldError is a refusal that names the field that was wrong.
type FieldError struct {
	// Field is the name of the offending field, as the CLI spells it
	// ("weight", "cluster", "port", "nfa", ...).
	Field string
	// Object is the object the field belongs to, as cluster@port@server,
	// or empty when the field is not tied to one object.
	Object string
	// Msg says what was wrong with it.
	Msg string
}

// Error formats the refusal as "field: message (object)".
func (e *FieldError) Error() string {
	if e.Object != "" {
		return fmt.Sprintf("%s: %s (%s)", e.Field, e.Msg, e.Object)
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Msg)
}

// Errorf returns a *FieldError for field about object.
func Errorf(field, object, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Object: object, Msg: fmt.Sprintf(format, args...)}
}

// FieldOf returns the field named by err if it is (or wraps) a *FieldError,
// and "" otherwise.
func FieldOf(err error) string {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}

// CheckUnicast refuses addresses that can never be a cluster, server or NFA:
// invalid, unspecified, multicast, loopback, link-local and broadcast
// addresses. IPv6 addresses are refused until the data path supports them.
func CheckUnicast(field, object string, a netip.Addr) error {
	switch {
	case !a.IsValid():
		return Errorf(field, object, "missing address")
	case a.Is6() && !a.Is4In6():
		return Errorf(field, object, "%s: IPv6 is not supported yet", a)
	case a.Is4In6():
		return Errorf(field, object, "%s: use the plain IPv4 form", a)
	case a.IsUnspecified():
		return Errorf(field, object, "%s is the unspecified address", a)
	case a.IsMulticast():
		return Errorf(field, object, "%s is a multicast address", a)
	case a.IsLoopback():
		return Errorf(field, object, "%s is a loopback address", a)
	case a.IsLinkLocalUnicast():
		return Errorf(field, object, "%s is a link-local address", a)
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return Errorf(field, object, "%s is the broadcast address", a)
	}
	return nil
}

// Validate checks the whole configuration and returns the first problem
// found as a *FieldError. A configuration that validates can be applied.
func (c *Config) Validate() error {
	ex := c.Executor
	if ex.NFA.IsValid() {
		if err := CheckUnicast("nfa", "", ex.NFA); err != nil {
			return err
		}
	}
	if ex.FinTimeout < 1 || ex.FinTimeout > MaxTimeout {
		return Errorf("fintimeout", "", "%d is outside 1..%d seconds", ex.FinTimeout, MaxTimeout)
	}
	if ex.Started && ex.Interface == "" {
		return Errorf("interface", "", "the executor is started but has no interface")
	}
	if ex.XDPMode > XDPGeneric {
		return Errorf("xdp-mode", "", "unknown mode %d", ex.XDPMode)
	}
	vips := map[netip.Addr]bool{}
	for i := range c.Clusters {
		cl := &c.Clusters[i]
		obj := cl.Address.String()
		if err := CheckUnicast("cluster", obj, cl.Address); err != nil {
			return err
		}
		if vips[cl.Address] {
			return Errorf("cluster", obj, "defined twice")
		}
		vips[cl.Address] = true
		if cl.Address == ex.NFA {
			return Errorf("cluster", obj, "equals the non-forwarding address (nfa)")
		}
		if err := cl.validatePorts(); err != nil {
			return err
		}
	}
	if err := c.checkManage(); err != nil {
		return err
	}
	// A server that is itself a cluster address would loop packets back.
	for _, cl := range c.Clusters {
		for _, p := range cl.Ports {
			for _, s := range p.Servers {
				obj := BackendKey{ServiceKey{cl.Address, p.Number}, s.Address}.String()
				if vips[s.Address] {
					return Errorf("server", obj, "%s is a cluster address", s.Address)
				}
				if s.Address == ex.NFA {
					return Errorf("server", obj, "%s is the non-forwarding address (nfa)", s.Address)
				}
			}
		}
	}
	return nil
}

func (cl *Cluster) validatePorts() error {
	seen := map[uint16]bool{}
	for _, p := range cl.Ports {
		obj := ServiceKey{cl.Address, p.Number}.String()
		if p.Number == 0 {
			return Errorf("port", obj, "port 0 is not a valid port (want 1..65535)")
		}
		if seen[p.Number] {
			return Errorf("port", obj, "defined twice")
		}
		seen[p.Number] = true
		if p.Protocol < TCP || p.Protocol > Both {
			return Errorf("protocol", obj, "unknown protocol %d", p.Protocol)
		}
		if p.Method != MAC {
			return Errorf("method", obj, "unknown method %d", p.Method)
		}
		if p.StickyTime != 0 {
			return Errorf("stickytime", obj, "affinity (stickytime > 0) is not supported yet")
		}
		if p.StaleTimeout < 1 || p.StaleTimeout > MaxTimeout {
			return Errorf("staletimeout", obj, "%d is outside 1..%d seconds", p.StaleTimeout, MaxTimeout)
		}
		if p.WeightBound < 1 || p.WeightBound > MaxWeightBound {
			return Errorf("weightbound", obj, "%d is outside 1..%d", p.WeightBound, MaxWeightBound)
		}
		servers := map[netip.Addr]bool{}
		for _, s := range p.Servers {
			sobj := BackendKey{ServiceKey{cl.Address, p.Number}, s.Address}.String()
			if err := CheckUnicast("server", sobj, s.Address); err != nil {
				return err
			}
			if servers[s.Address] {
				return Errorf("server", sobj, "defined twice")
			}
			servers[s.Address] = true
			if s.Weight > p.WeightBound {
				return Errorf("weight", sobj, "%d is outside 0..%d (the port's weightbound)", s.Weight, p.WeightBound)
			}
		}
	}
	return nil
}

// Sort puts clusters, ports and servers in their canonical order, so that
// two equal configurations serialise identically.
func (c *Config) Sort() {
	slices.SortFunc(c.Clusters, func(a, b Cluster) int { return a.Address.Compare(b.Address) })
	slices.SortFunc(c.Advisors, func(a, b Advisor) int { return strings.Compare(a.Key(), b.Key()) })
	for i := range c.Clusters {
		ps := c.Clusters[i].Ports
		slices.SortFunc(ps, func(a, b Port) int { return int(a.Number) - int(b.Number) })
		for j := range ps {
			slices.SortFunc(ps[j].Servers, func(a, b Server) int { return a.Address.Compare(b.Address) })
		}
	}
}
