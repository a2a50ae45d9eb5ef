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

// CheckUnicast refuses addresses that can never be a cluster, server, NFA,
// return address or next hop: invalid, unspecified, multicast, loopback,
// link-local and broadcast addresses, and IPv4-mapped IPv6 ones.
func CheckUnicast(field, object string, a netip.Addr) error {
	switch {
	case !a.IsValid():
		return Errorf(field, object, "missing address")
	case a.Zone() != "":
		return Errorf(field, object, "%s: an address with a zone is link-local", a)
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

// family names an address's family for messages.
func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// checkOptional checks an optional address: unset, or unicast of the
// wanted family (IPv4 when v4).
func checkOptional(field, object string, a netip.Addr, v4 bool) error {
	if !a.IsValid() {
		return nil
	}
	if err := CheckUnicast(field, object, a); err != nil {
		return err
	}
	if a.Is4() != v4 {
		want := "IPv6"
		if v4 {
			want = "IPv4"
		}
		return Errorf(field, object, "%s is an %s address, want %s", a, family(a), want)
	}
	return nil
}

// Validate checks the whole configuration and returns the first problem
// found as a *FieldError. A configuration that validates can be applied.
func (c *Config) Validate() error {
	ex := c.Executor
	for _, f := range []struct {
		field string
		a     netip.Addr
		v4    bool
	}{{"nfa", ex.NFA, true}, {"nfa", ex.NFA6, false}, {"clientgateway", ex.ClientGateway, true}, {"clientgateway", ex.ClientGateway6, false}} {
		if err := checkOptional(f.field, "", f.a, f.v4); err != nil {
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
		if cl.Address == ex.NFA || cl.Address == ex.NFA6 {
			return Errorf("cluster", obj, "equals the non-forwarding address (nfa)")
		}
		if err := cl.validatePorts(); err != nil {
			return err
		}
	}
	if err := c.checkManage(); err != nil {
		return err
	}
	return c.checkAddressRoles(vips)
}

// checkAddressRoles refuses an address that plays two roles that cannot
// go together: a server, router or return address that is a cluster
// address or an NFA would loop packets back, and a return address that is
// also a server or a router would take their traffic.
func (c *Config) checkAddressRoles(vips map[netip.Addr]bool) error {
	ex := c.Executor
	nfa := func(a netip.Addr) bool { return a == ex.NFA || a == ex.NFA6 }
	servers, returns := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	for _, cl := range c.Clusters {
		for _, p := range cl.Ports {
			for _, s := range p.Servers {
				servers[s.Address] = true
				if s.Router.IsValid() {
					servers[s.Router] = true
				}
				if s.ReturnAddress.IsValid() {
					returns[s.ReturnAddress] = true
				}
			}
		}
	}
	for _, cl := range c.Clusters {
		for _, p := range cl.Ports {
			for _, s := range p.Servers {
				obj := BackendKey{ServiceKey{cl.Address, p.Number}, s.Address}.String()
				for _, r := range []struct {
					field string
					a     netip.Addr
				}{{"returnaddress", s.ReturnAddress}, {"server", s.Address}, {"router", s.Router}} {
					switch {
					case !r.a.IsValid():
					case vips[r.a]:
						return Errorf(r.field, obj, "%s is a cluster address", r.a)
					case nfa(r.a):
						return Errorf(r.field, obj, "%s is the non-forwarding address (nfa)", r.a)
					case r.field == "returnaddress" && servers[r.a]:
						return Errorf(r.field, obj, "%s is also a server or a router", r.a)
					case r.field != "returnaddress" && returns[r.a]:
						return Errorf(r.field, obj, "%s is also a return address", r.a)
					}
				}
			}
		}
	}
	return nil
}

func (cl *Cluster) validatePorts() error {
	seen := map[uint16]bool{}
	v4 := cl.Address.Is4()
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
		if p.Method != MAC && p.Method != NAT {
			return Errorf("method", obj, "unknown method %d", p.Method)
		}
		if p.StickyTime > MaxTimeout {
			return Errorf("stickytime", obj, "%d is outside 0..%d seconds", p.StickyTime, MaxTimeout)
		}
		if bits := cl.Address.BitLen(); int(p.StickyMask) > bits {
			return Errorf("stickymask", obj, "%d is outside 0..%d bits (an %s cluster)", p.StickyMask, bits, family(cl.Address))
		}
		if p.Selection > SelectConnAffin {
			return Errorf("selectionalgorithm", obj, "unknown selection algorithm %d", p.Selection)
		}
		if p.CrossPort != 0 {
			other := cl.Port(p.CrossPort)
			switch {
			case p.CrossPort == p.Number:
				return Errorf("crossport", obj, "a port cannot share affinity with itself")
			case other == nil:
				return Errorf("crossport", obj, "port %d is not a port of cluster %s", p.CrossPort, cl.Address)
			case p.StickyTime == 0 || other.StickyTime == 0:
				return Errorf("crossport", obj, "both ports need a stickytime above 0 to share affinity (port %d has %d, port %d has %d)",
					p.Number, p.StickyTime, other.Number, other.StickyTime)
			}
		}
		if p.MaxHalfOpen > MaxHalfOpen {
			return Errorf("maxhalfopen", obj, "%d is outside 0..%d", p.MaxHalfOpen, MaxHalfOpen)
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
			if err := checkOptional("server", sobj, s.Address, v4); err != nil {
				return err
			}
			if err := p.checkNAT(sobj, s, v4); err != nil {
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

// checkNAT checks a server's NAT settings: required (return address) and
// of the cluster's family on a NAT port, absent on a MAC one.
func (p *Port) checkNAT(obj string, s Server, v4 bool) error {
	if p.Method != NAT {
		switch {
		case s.MapPort != 0:
			return Errorf("mapport", obj, "applies to method nat only (the port's method is %s)", p.Method)
		case s.ReturnAddress.IsValid():
			return Errorf("returnaddress", obj, "applies to method nat only (the port's method is %s)", p.Method)
		case s.Router.IsValid():
			return Errorf("router", obj, "applies to method nat only: MAC forwarding reaches servers on the executor's segment (the port's method is %s)", p.Method)
		}
		return nil
	}
	if !s.ReturnAddress.IsValid() {
		return Errorf("returnaddress", obj, "a server of a nat port needs a return address (--returnaddress)")
	}
	if err := checkOptional("returnaddress", obj, s.ReturnAddress, v4); err != nil {
		return err
	}
	if err := checkOptional("router", obj, s.Router, v4); err != nil {
		return err
	}
	if s.Router == s.Address {
		return Errorf("router", obj, "%s is the server itself; leave router unset for a server on the executor's segment", s.Router)
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
