package lb

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// BGP defaults.
const (
	// DefaultHoldTime is a neighbour's hold time in seconds (keepalives
	// every third of it): a router notices a dispatcher that stopped
	// within it. Routers in data centres commonly use 9 (FRR's datacenter
	// profile).
	DefaultHoldTime = 9
	// DefaultBGPPort is the port neighbours are reached on.
	DefaultBGPPort = 179
	// ASTrans is AS_TRANS (RFC 6793), which no speaker may use as its own.
	ASTrans = 23456
	// MaxASN is the largest usable 4-byte AS number (4294967295 is
	// reserved, RFC 7300).
	MaxASN = 4294967294
)

// BGP configures the BGP speaker dlbd embeds to announce cluster
// addresses to routers (several dispatchers behind ECMP). ASN 0 means BGP
// is not configured: no speaker runs.
type BGP struct {
	// ASN is this dispatcher's AS number; RouterID its BGP identifier (an
	// IPv4 address, by convention one of the host's).
	ASN      uint32     `json:"asn,omitempty"`
	RouterID netip.Addr `json:"router_id,omitzero"`
	// ListenPort is the TCP port the speaker accepts sessions on; 0 makes
	// outgoing sessions only.
	ListenPort uint16 `json:"listen_port,omitempty"`
	// Neighbors are the routers to peer with, sorted by address.
	Neighbors []BGPNeighbor `json:"neighbors,omitempty"`
}

// Enabled reports whether BGP is configured.
func (b BGP) Enabled() bool { return b.ASN != 0 }

// Neighbor returns a pointer to the neighbour with the given address, or
// nil. The neighbours must be sorted.
func (b *BGP) Neighbor(a netip.Addr) *BGPNeighbor {
	i, ok := slices.BinarySearchFunc(b.Neighbors, a, func(n BGPNeighbor, a netip.Addr) int { return n.Address.Compare(a) })
	if !ok {
		return nil
	}
	return &b.Neighbors[i]
}

// Equal reports whether two BGP configurations are the same.
func (b BGP) Equal(o BGP) bool {
	return b.ASN == o.ASN && b.RouterID == o.RouterID && b.ListenPort == o.ListenPort && slices.Equal(b.Neighbors, o.Neighbors)
}

// Clone returns a deep copy.
func (b BGP) Clone() BGP {
	b.Neighbors = slices.Clone(b.Neighbors)
	return b
}

// BGPNeighbor is a router the speaker peers with.
type BGPNeighbor struct {
	// Address is the router's address; Port its BGP port (0: 179).
	Address netip.Addr `json:"address"`
	Port    uint16     `json:"port,omitempty"`
	// RemoteAS is the router's AS number (equal to the speaker's: iBGP).
	RemoteAS uint32 `json:"remote_as"`
	// PasswordFile holds the TCP MD5 password (RFC 2385), read when the
	// session is configured; "" means none. The password itself is never
	// stored in the state.
	PasswordFile string `json:"password_file,omitempty"`
	// HoldTime is the hold time proposed, in seconds (0 or 3..65535).
	HoldTime uint32 `json:"hold_time"`
	// Multihop is the TTL for a router that is not directly connected; 0
	// means directly connected.
	Multihop uint8 `json:"multihop,omitempty"`
	// BFD runs single-hop BFD (RFC 5880/5881) with the router beside the
	// session, control packets every 200 ms, down after 3 missed: the
	// router drops a dispatcher it lost within a second, not the hold
	// time.
	BFD bool `json:"bfd,omitempty"`
}

// NewBGPNeighbor returns a neighbour with the defaults.
func NewBGPNeighbor(a netip.Addr) BGPNeighbor {
	return BGPNeighbor{Address: a, HoldTime: DefaultHoldTime}
}

// RemotePort is the port the neighbour is reached on.
func (n BGPNeighbor) RemotePort() uint16 {
	if n.Port == 0 {
		return DefaultBGPPort
	}
	return n.Port
}

// CheckASN refuses AS numbers no speaker may use: 0, AS_TRANS (23456) and
// 4294967295.
func CheckASN(field, object string, asn int64) error {
	switch {
	case asn < 1 || asn > MaxASN:
		return Errorf(field, object, "%d is not an AS number (want 1..%d)", asn, uint32(MaxASN))
	case asn == ASTrans:
		return Errorf(field, object, "%d is AS_TRANS (RFC 6793), which no speaker may use", asn)
	}
	return nil
}

// ParseCommunity parses a BGP community: a standard community "A:B" (each
// 0..65535), a large community "A:B:C" (each 0..4294967295, RFC 8092), or
// one of the well-known names no-export, no-advertise, no-export-subconfed,
// no-peer, blackhole, graceful-shutdown. It returns the canonical text.
func ParseCommunity(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if _, ok := wellKnownCommunities[s]; ok {
		return s, nil
	}
	parts := strings.Split(s, ":")
	bits := 16
	switch len(parts) {
	case 2:
	case 3:
		bits = 32
	default:
		return "", fmt.Errorf("%q is not a community (want A:B, A:B:C or a well-known name such as no-export)", s)
	}
	out := make([]string, len(parts))
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, bits)
		if err != nil {
			return "", fmt.Errorf("%q is not a community: %q is not a number in 0..%d", s, p, uint64(1)<<bits-1)
		}
		out[i] = strconv.FormatUint(v, 10)
	}
	return strings.Join(out, ":"), nil
}

// wellKnownCommunities are the well-known communities by name (RFC 1997,
// 3765, 7999, 8326).
var wellKnownCommunities = map[string]uint32{
	"no-export":           0xFFFFFF01,
	"no-advertise":        0xFFFFFF02,
	"no-export-subconfed": 0xFFFFFF03,
	"no-peer":             0xFFFFFF04,
	"blackhole":           0xFFFF029A,
	"graceful-shutdown":   0xFFFF0000,
}

// CommunityValue returns the 32-bit value of a standard or well-known
// community in canonical text, and false for a large one.
func CommunityValue(c string) (uint32, bool) {
	if v, ok := wellKnownCommunities[c]; ok {
		return v, true
	}
	a, b, ok := strings.Cut(c, ":")
	if !ok || strings.Contains(b, ":") {
		return 0, false
	}
	x, err1 := strconv.ParseUint(a, 10, 16)
	y, err2 := strconv.ParseUint(b, 10, 16)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return uint32(x<<16 | y), true
}

// LargeCommunityValue returns the three parts of a large community in
// canonical text, and false for another.
func LargeCommunityValue(c string) ([3]uint32, bool) {
	var out [3]uint32
	parts := strings.Split(c, ":")
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return out, false
		}
		out[i] = uint32(v)
	}
	return out, true
}

// Route is a path the speaker announces: a cluster address as a /32 or
// /128, with its attributes.
type Route struct {
	// Prefix is the cluster address as a host prefix.
	Prefix netip.Prefix
	// Communities are in canonical text (ParseCommunity).
	Communities []string
	// MED is the multi-exit discriminator; 0 sends none (routers read a
	// missing MED as 0).
	MED uint32
}

// Equal reports whether two routes are the same.
func (r Route) Equal(o Route) bool {
	return r.Prefix == o.Prefix && r.MED == o.MED && slices.Equal(r.Communities, o.Communities)
}

// BGPStatus is the speaker's state, for reports.
type BGPStatus struct {
	// Running says whether the speaker runs; Err why it does not, or
	// its last configuration error.
	Running bool
	Err     string
	// Neighbors are the sessions, sorted by address.
	Neighbors []BGPNeighborStatus
	// Announced are the prefixes the speaker announces now.
	Announced []netip.Prefix
}

// BGPNeighborStatus is one session's state.
type BGPNeighborStatus struct {
	Address netip.Addr
	// State is the session's FSM state: "idle", "connect", "active",
	// "opensent", "openconfirm" or "established".
	State string
	// Since is when it entered the established state (zero: not
	// established).
	Since time.Time
	// HoldTime is the negotiated hold time in seconds (0 before the
	// session is established).
	HoldTime uint32
	// Sent and Received count prefixes advertised to and received from
	// the neighbour; Accepted those received that the speaker kept (none:
	// it imports nothing).
	Sent, Received, Accepted uint64
	// LastError is why the session last went down, if it did.
	LastError string
	// BFD is the BFD session's state ("up", "down", "init", "admin
	// down"), "" without BFD.
	BFD string
}
