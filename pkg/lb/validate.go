package lb

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
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

// Error formats the refusal as "field: message (object)". A field or
// object made of what a client sent is quoted when it holds a control
// character or is not UTF-8, so that the refusal stays one readable line.
func (e *FieldError) Error() string {
	if e.Object != "" {
		return fmt.Sprintf("%s: %s (%s)", shown(e.Field), e.Msg, shown(e.Object))
	}
	return fmt.Sprintf("%s: %s", shown(e.Field), e.Msg)
}

// shown returns s, or s quoted when it is not plain printable text.
func shown(s string) string {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
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

// Sort puts clusters, ports and servers in their canonical order, so that
// two equal configurations serialise identically.
func (c *Config) Sort() {
	slices.SortFunc(c.Clusters, func(a, b Cluster) int { return a.Address.Compare(b.Address) })
	slices.SortFunc(c.Advisors, func(a, b Advisor) int { return strings.Compare(a.Key(), b.Key()) })
	c.HA.Sort()
	slices.SortFunc(c.BGP.Neighbors, func(a, b BGPNeighbor) int { return a.Address.Compare(b.Address) })
	for i := range c.Clusters {
		ps := c.Clusters[i].Ports
		slices.SortFunc(ps, func(a, b Port) int { return int(a.Number) - int(b.Number) })
		for j := range ps {
			slices.SortFunc(ps[j].Servers, func(a, b Server) int { return a.Address.Compare(b.Address) })
		}
	}
}
