package lb

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// High availability, IBM style: two dispatchers on one segment serve the
// same clusters. They exchange heartbeats; one of them is active for a
// cluster (it holds the cluster and return addresses, announces them and
// forwards new connections), the other stands by with a copy of the
// connection tables, and takes over when the active fails.

// Defaults and bounds of the heartbeats.
const (
	// DefaultHAInterval is the heartbeat interval in milliseconds.
	DefaultHAInterval = 500
	// DefaultHACount is how many intervals without a heartbeat make the
	// peer dead (4 × 500 ms: 2 s).
	DefaultHACount = 4
	// MinHAInterval and MaxHAInterval bound the interval (ms).
	MinHAInterval = 50
	MaxHAInterval = 60000
	// MinHACount and MaxHACount bound the count.
	MinHACount = 2
	MaxHACount = 100
	// MaxHeartbeats and MaxReach bound the heartbeat pairs and reach
	// targets.
	MaxHeartbeats = 8
	MaxReach      = 32
)

// HARole is a dispatcher's role in a high-availability pair.
type HARole uint8

// Roles.
const (
	// RoleNone: high availability is not configured.
	RoleNone HARole = iota
	// RolePrimary: the preferred active for every cluster.
	RolePrimary
	// RoleBackup: stands by for the primary.
	RoleBackup
	// RoleBoth: mutual high availability; each dispatcher is the
	// preferred active for the clusters whose primaryhost is its own
	// address, and stands by for the others.
	RoleBoth
)

// ParseHARole parses "primary", "backup" or "both".
func ParseHARole(s string) (HARole, error) {
	switch strings.ToLower(s) {
	case "primary":
		return RolePrimary, nil
	case "backup":
		return RoleBackup, nil
	case "both":
		return RoleBoth, nil
	}
	return RoleNone, fmt.Errorf("unknown role %q (want primary, backup or both)", s)
}

// String returns "primary", "backup", "both" or "none".
func (r HARole) String() string {
	switch r {
	case RoleNone:
		return "none"
	case RolePrimary:
		return "primary"
	case RoleBackup:
		return "backup"
	case RoleBoth:
		return "both"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// MarshalText implements encoding.TextMarshaler.
func (r HARole) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *HARole) UnmarshalText(b []byte) error {
	if string(b) == "none" {
		*r = RoleNone
		return nil
	}
	v, err := ParseHARole(string(b))
	*r = v
	return err
}

// HARecovery is IBM's recovery strategy: what the preferred active does
// when it comes back while its peer is active.
type HARecovery uint8

// Recovery strategies.
const (
	// RecoveryAuto: it takes its clusters back once it has a full copy
	// of its peer's connection tables.
	RecoveryAuto HARecovery = iota
	// RecoveryManual: it stands by until an operator's "takeover".
	RecoveryManual
)

// ParseHARecovery parses "auto" or "manual".
func ParseHARecovery(s string) (HARecovery, error) {
	switch strings.ToLower(s) {
	case "auto":
		return RecoveryAuto, nil
	case "manual":
		return RecoveryManual, nil
	}
	return RecoveryAuto, fmt.Errorf("unknown recovery strategy %q (want auto or manual)", s)
}

// String returns "auto" or "manual".
func (r HARecovery) String() string {
	switch r {
	case RecoveryAuto:
		return "auto"
	case RecoveryManual:
		return "manual"
	}
	return fmt.Sprintf("recovery(%d)", uint8(r))
}

// MarshalText implements encoding.TextMarshaler.
func (r HARecovery) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *HARecovery) UnmarshalText(b []byte) error {
	v, err := ParseHARecovery(string(b))
	*r = v
	return err
}

// Heartbeat is one path heartbeats take: from an address of this host to
// the peer's. Several paths (over different networks) make a lost link
// distinguishable from a dead peer.
type Heartbeat struct {
	// Source is this dispatcher's address (it must be on the host).
	Source netip.Addr `json:"source"`
	// Destination is the peer's address.
	Destination netip.Addr `json:"destination"`
}

// HighAvailability is the high-availability configuration ("dlbctl
// highavailability ..."). It runs once it has a role (backup add) and a
// heartbeat (heartbeat add).
type HighAvailability struct {
	// Role, Recovery and Port are "backup add": the role, the recovery
	// strategy, and the port heartbeats (UDP) and replication (TCP) use
	// on both dispatchers.
	Role     HARole     `json:"role,omitempty"`
	Recovery HARecovery `json:"recovery,omitempty"`
	Port     uint16     `json:"port,omitempty"`
	// Heartbeats are the paths to the peer, sorted by destination and
	// source.
	Heartbeats []Heartbeat `json:"heartbeats,omitempty"`
	// SecretFile holds the secret both dispatchers share: heartbeats and
	// replication are authenticated with it (HMAC-SHA256).
	SecretFile string `json:"secret_file,omitempty"`
	// Interval is the heartbeat interval in milliseconds, and Count how
	// many intervals without a heartbeat make the peer dead; reach
	// targets are pinged twice an interval and are unreachable after
	// Count missed replies.
	Interval uint32 `json:"interval,omitempty"`
	Count    uint32 `json:"count,omitempty"`
	// Reach are the reach targets, sorted: addresses both dispatchers
	// ping; the one that reaches more of them is the better active.
	Reach []netip.Addr `json:"reach,omitempty"`
}

// Enabled reports whether high availability runs: a role and at least
// one heartbeat.
func (h HighAvailability) Enabled() bool {
	return h.Role != RoleNone && len(h.Heartbeats) > 0
}

// Configured reports whether anything of high availability is set.
func (h HighAvailability) Configured() bool {
	return h.Role != RoleNone || len(h.Heartbeats) > 0 || len(h.Reach) > 0
}

// Clone returns a deep copy of h.
func (h HighAvailability) Clone() HighAvailability {
	out := h
	out.Heartbeats = slices.Clone(h.Heartbeats)
	out.Reach = slices.Clone(h.Reach)
	return out
}

// Equal reports whether h and o are the same configuration.
func (h HighAvailability) Equal(o HighAvailability) bool {
	return h.Role == o.Role && h.Recovery == o.Recovery && h.Port == o.Port && h.SecretFile == o.SecretFile &&
		h.Interval == o.Interval && h.Count == o.Count && slices.Equal(h.Heartbeats, o.Heartbeats) &&
		slices.Equal(h.Reach, o.Reach)
}

// Sort puts the heartbeats and reach targets in their canonical order.
func (h *HighAvailability) Sort() {
	slices.SortFunc(h.Heartbeats, compareHeartbeat)
	slices.SortFunc(h.Reach, netip.Addr.Compare)
}

func compareHeartbeat(a, b Heartbeat) int {
	if c := a.Destination.Compare(b.Destination); c != 0 {
		return c
	}
	return a.Source.Compare(b.Source)
}

// IntervalMS returns the interval, its default when unset.
func (h HighAvailability) IntervalMS() uint32 {
	if h.Interval == 0 {
		return DefaultHAInterval
	}
	return h.Interval
}

// DeadCount returns the count, its default when unset.
func (h HighAvailability) DeadCount() uint32 {
	if h.Count == 0 {
		return DefaultHACount
	}
	return h.Count
}

// Sources returns this dispatcher's heartbeat addresses.
func (h HighAvailability) Sources() []netip.Addr {
	out := make([]netip.Addr, 0, len(h.Heartbeats))
	for _, hb := range h.Heartbeats {
		if !slices.Contains(out, hb.Source) {
			out = append(out, hb.Source)
		}
	}
	return out
}

// Destinations returns the peer's heartbeat addresses.
func (h HighAvailability) Destinations() []netip.Addr {
	out := make([]netip.Addr, 0, len(h.Heartbeats))
	for _, hb := range h.Heartbeats {
		if !slices.Contains(out, hb.Destination) {
			out = append(out, hb.Destination)
		}
	}
	return out
}

// HAGroup is a set of clusters that one dispatcher of the pair serves at
// a time. With role primary or backup there is one group; with role both
// there are two: the clusters whose primaryhost is this dispatcher
// (GroupLocal) and those whose primaryhost is the peer (GroupPeer).
type HAGroup uint8

// Groups.
const (
	// GroupLocal holds the clusters this dispatcher is the preferred
	// active for: all of them for a primary; under role both, those
	// whose primaryhost is one of its heartbeat sources.
	GroupLocal HAGroup = iota
	// GroupPeer holds the clusters the peer is the preferred active for:
	// all of them for a backup; under role both, the others.
	GroupPeer
	// NumHAGroups is the number of groups.
	NumHAGroups
)

// String returns "local" or "peer".
func (g HAGroup) String() string {
	switch g {
	case GroupLocal:
		return "local"
	case GroupPeer:
		return "peer"
	}
	return fmt.Sprintf("group(%d)", uint8(g))
}

// GroupOf returns the group of cluster cl under h: with role primary
// GroupLocal, with role backup GroupPeer, with role both by the cluster's
// primaryhost.
func (h HighAvailability) GroupOf(cl *Cluster) HAGroup {
	switch h.Role {
	case RoleBackup:
		return GroupPeer
	case RoleBoth:
		if slices.Contains(h.Sources(), cl.PrimaryHost) {
			return GroupLocal
		}
		return GroupPeer
	}
	return GroupLocal
}

// Groups returns the groups h has: none without high availability; one
// for a primary or a backup; both for role both.
func (h HighAvailability) Groups() []HAGroup {
	switch h.Role {
	case RolePrimary:
		return []HAGroup{GroupLocal}
	case RoleBackup:
		return []HAGroup{GroupPeer}
	case RoleBoth:
		return []HAGroup{GroupLocal, GroupPeer}
	}
	return nil
}

// HAState is a group's state on one dispatcher (IBM's words).
type HAState uint8

// States.
const (
	// HAIdle: high availability is not running (not configured).
	HAIdle HAState = iota
	// HAListen: just started; listening for the peer before deciding.
	HAListen
	// HAActive: this dispatcher serves the group's clusters.
	HAActive
	// HAStandby: the peer serves them; this one keeps a copy of its
	// connection tables.
	HAStandby
	// HAPreempt: taking the group over from a live peer (auto recovery
	// or an operator's takeover): waiting for the peer to let go and
	// send its last connection entries.
	HAPreempt
	// HANoExecutor: the executor cannot forward here (stopped, detached,
	// or its interface down): this dispatcher can serve nothing.
	HANoExecutor
)

var haStates = [...]string{"idle", "listen", "active", "standby", "preempt", "noexecutor"}

// String returns the state's name.
func (s HAState) String() string {
	if int(s) < len(haStates) {
		return haStates[s]
	}
	return fmt.Sprintf("hastate(%d)", uint8(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s HAState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *HAState) UnmarshalText(b []byte) error {
	for i, n := range haStates {
		if n == string(b) {
			*s = HAState(i)
			return nil
		}
	}
	return fmt.Errorf("unknown high-availability state %q", b)
}

// Serving reports whether a dispatcher in state s holds its group's
// addresses and forwards its new connections.
func (s HAState) Serving() bool { return s == HAActive }

// HAStatus is what the high-availability function knows, for reports.
type HAStatus struct {
	// Running says heartbeats are being exchanged (the configuration is
	// enabled and its sockets are open); Error says why not, if it
	// should.
	Running bool
	Error   string
	// Started is when the function last started (its sockets opened).
	Started time.Time
	// Boot is this dispatcher's boot id (random per start).
	Boot uint64
	// Healthy says this dispatcher's executor can forward; HealthReason
	// says why not.
	Healthy      bool
	HealthReason string
	// Groups are the groups' states.
	Groups []HAGroupStatus
	// Peer is what the peer's last heartbeat said.
	Peer HAPeerStatus
	// Heartbeats are the paths, and Reach the reach targets.
	Heartbeats []HAPathStatus
	Reach      []HAReachStatus
	// Stray are the paths this dispatcher does not have that the peer's
	// authenticated heartbeats arrived on in the last minute (named as
	// this dispatcher would name them: Source its own address): the two
	// dispatchers' paths differ, and the peer is not heard on these.
	Stray []HAPathStatus
	// Refused counts heartbeats and replication frames refused, by
	// reason (malformed, unauthenticated, replayed, unconfirmed boot).
	Refused map[string]uint64
	// SecretPending says the peer was last heard with another shared
	// secret than this dispatcher's (changed here first): heartbeats go
	// under both, replication under the peer's, until it has the new
	// one. SecretError says why the secret file, read again, cannot be
	// used (the secret read before stays in use).
	SecretPending bool
	SecretError   string
	// PeerPort is the port the live peer uses when it is not this
	// dispatcher's (changed on one side first; 0 otherwise): heartbeats
	// go to both ports, replication to the peer's.
	PeerPort uint16
	// Replication is the connection-table replication's state.
	Replication HAReplicationStatus
}

// HAGroupStatus is one group's state.
type HAGroupStatus struct {
	Group  HAGroup
	State  HAState
	Since  time.Time
	Reason string
	// Takeover says an operator's takeover is pending; Synced that this
	// dispatcher has a full copy of the active peer's tables.
	Takeover, Synced bool
	// Reasserted counts the times this dispatcher, active, is to
	// announce the group's addresses again: its peer heard after a
	// silence, or two actives that ended with this one active (the peer
	// may have announced them meanwhile).
	Reasserted uint64
}

// HAPeerStatus is the peer as its heartbeats describe it.
type HAPeerStatus struct {
	// Alive says the peer is heard (or restarting within its grace);
	// Heard that it ever was.
	Alive, Heard bool
	LastHeard    time.Time
	Role         HARole
	Recovery     HARecovery
	Healthy      bool
	Restarting   bool
	// Reach and Targets are the reach targets it reaches, of how many.
	Reach, Targets int
	// States are its states of the groups, in this dispatcher's terms
	// (States[GroupLocal] is its state of this dispatcher's clusters).
	States [NumHAGroups]HAState
	// Digest is its configuration digest.
	Digest uint64
	Boot   uint64
	// Conflict names an inconsistent pair ("the peer is primary too").
	Conflict string
}

// HAPathStatus is one heartbeat path.
type HAPathStatus struct {
	Heartbeat
	Sent, Received uint64
	LastHeard      time.Time
	Error          string
}

// HAReachStatus is one reach target.
type HAReachStatus struct {
	Address   netip.Addr
	Reachable bool
	LastError string
}

// HAReplicationStatus is the replication of the connection tables.
type HAReplicationStatus struct {
	// Sending: a connection to the peer is up; Session counts them (a
	// new one starts with a full copy). Receiving: the peer's is up.
	Sending, Receiving bool
	Session            uint64
	// SentRecords and ReceivedRecords count connection records; Marks
	// the markers acknowledged.
	SentRecords, ReceivedRecords uint64
	// LastAckRTT is how long the latest marker took from sending to the
	// peer's acknowledgement (after it imported everything before it).
	LastAckRTT time.Duration
	// Synced says this dispatcher has a full copy of the peer's tables
	// (when the peer is active for something).
	Synced bool
}
