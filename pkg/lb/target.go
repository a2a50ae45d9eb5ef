package lb

import (
	"net/netip"
	"strconv"
	"strings"
)

// Depth says how many components of cluster@port@server a command addresses.
type Depth int

// Depths of a target.
const (
	// ClusterDepth addresses clusters: "VIP".
	ClusterDepth Depth = 1
	// PortDepth addresses ports: "VIP@PORT".
	PortDepth Depth = 2
	// ServerDepth addresses servers: "VIP@PORT@ADDR".
	ServerDepth Depth = 3
)

// Target is a parsed cluster@port@server address. A nil slice is a wildcard:
// it stands for every object of that kind that exists. '+' joins several
// values in one component ("10.0.0.1+10.0.0.2@80").
type Target struct {
	// Clusters are the cluster addresses named, or nil for all.
	Clusters []netip.Addr
	// Ports are the port numbers named, or nil for all.
	Ports []uint16
	// Servers are the server addresses named, or nil for all.
	Servers []netip.Addr
}

// ParseTarget parses s, which must have exactly depth components separated
// by '@'. An empty component is a wildcard; so is an empty s.
func ParseTarget(s string, depth Depth) (Target, error) {
	var t Target
	if s == "" {
		return t, nil
	}
	parts := strings.Split(s, "@")
	if len(parts) != int(depth) {
		want := [...]string{"", "cluster", "cluster@port", "cluster@port@server"}[depth]
		return t, Errorf(fieldFor(len(parts), depth), "", "%q does not have the form %s", s, want)
	}
	var err error
	if t.Clusters, err = parseAddrs("cluster", parts[0]); err != nil {
		return t, err
	}
	if depth >= PortDepth {
		if t.Ports, err = parsePorts(parts[1]); err != nil {
			return t, err
		}
	}
	if depth >= ServerDepth {
		if t.Servers, err = parseAddrs("server", parts[2]); err != nil {
			return t, err
		}
	}
	return t, nil
}

func fieldFor(got int, depth Depth) string {
	switch {
	case got > int(depth) && depth == ClusterDepth:
		return "cluster"
	case got > int(depth) && depth == PortDepth:
		return "port"
	}
	return [...]string{"", "cluster", "port", "server"}[depth]
}

func parseAddrs(field, s string) ([]netip.Addr, error) {
	if s == "" {
		return nil, nil
	}
	var out []netip.Addr
	for _, f := range strings.Split(s, "+") {
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, Errorf(field, "", "%q is not an IP address", f)
		}
		out = append(out, a)
	}
	return out, nil
}

func parsePorts(s string) ([]uint16, error) {
	if s == "" {
		return nil, nil
	}
	var out []uint16
	for _, f := range strings.Split(s, "+") {
		n, err := ParsePortNumber(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// ParsePortNumber parses a port number in 1..65535.
func ParsePortNumber(s string) (uint16, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, Errorf("port", "", "%q is not a port number", s)
	}
	if n < 1 || n > 65535 {
		return 0, Errorf("port", "", "%d is outside 1..65535", n)
	}
	return uint16(n), nil
}

// String formats the target back into cluster@port@server form with the
// given depth.
func (t Target) String(depth Depth) string {
	parts := []string{joinAddrs(t.Clusters)}
	if depth >= PortDepth {
		ps := make([]string, len(t.Ports))
		for i, p := range t.Ports {
			ps[i] = strconv.Itoa(int(p))
		}
		parts = append(parts, strings.Join(ps, "+"))
	}
	if depth >= ServerDepth {
		parts = append(parts, joinAddrs(t.Servers))
	}
	return strings.Join(parts, "@")
}

func joinAddrs(as []netip.Addr) string {
	ss := make([]string, len(as))
	for i, a := range as {
		ss[i] = a.String()
	}
	return strings.Join(ss, "+")
}

// MatchCluster reports whether the target's cluster component selects a.
func (t Target) MatchCluster(a netip.Addr) bool { return t.Clusters == nil || contains(t.Clusters, a) }

// MatchPort reports whether the target's port component selects n.
func (t Target) MatchPort(n uint16) bool { return t.Ports == nil || contains(t.Ports, n) }

// MatchServer reports whether the target's server component selects a.
func (t Target) MatchServer(a netip.Addr) bool { return t.Servers == nil || contains(t.Servers, a) }

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// ErrNoMatch is the message used when a wildcard target selects nothing.
func ErrNoMatch(field, target string) error {
	return Errorf(field, target, "matches nothing that is configured")
}
