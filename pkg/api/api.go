// Package api defines the wire types of dlbd's admin API: HTTP+JSON over a
// unix socket. dlbctl, the daemon and any script speak these types; the
// JSON that `dlbctl ... -o json` prints is exactly a response body.
//
// Changes are sent as a batch of operations (POST /v1/ops) that dlbd
// applies all or none: a batch that is refused changes nothing. Reports are
// GET requests that take an optional ?target= in cluster@port@server form.
package api

// Version is the API version; it prefixes every path.
const Version = "v1"

// Paths of the API.
const (
	// PathOps takes a Request and applies it (POST).
	PathOps = "/v1/ops"
	// PathExecutor reports the executor (GET).
	PathExecutor = "/v1/executor"
	// PathClusters reports clusters (GET, ?target=cluster).
	PathClusters = "/v1/clusters"
	// PathPorts reports ports (GET, ?target=cluster@port).
	PathPorts = "/v1/ports"
	// PathServers reports servers (GET, ?target=cluster@port@server).
	PathServers = "/v1/servers"
)

// Objects an Op can change.
const (
	ObjectExecutor = "executor"
	ObjectCluster  = "cluster"
	ObjectPort     = "port"
	ObjectServer   = "server"
)

// Actions an Op can take. Not every object takes every action.
const (
	ActionStart  = "start"  // executor
	ActionStop   = "stop"   // executor
	ActionSet    = "set"    // executor, port, server
	ActionAdd    = "add"    // cluster, port, server
	ActionRemove = "remove" // cluster, port, server
	ActionDown   = "down"   // server
	ActionUp     = "up"     // server
)

// Request is a batch of operations, applied all or none.
type Request struct {
	Ops []Op `json:"ops"`
}

// Op is one operation. Target addresses the objects in IBM's
// cluster@port@server grammar: an empty component is a wildcard that
// selects every existing object of that kind, and '+' joins several values.
// Only the parameters that are set (non-nil) are applied.
type Op struct {
	Object string `json:"object"`
	Action string `json:"action"`
	Target string `json:"target,omitempty"`

	// Executor parameters.
	Interface  *string `json:"interface,omitempty"`
	XDPMode    *string `json:"xdp_mode,omitempty"`
	NFA        *string `json:"nfa,omitempty"`
	FinTimeout *int64  `json:"fin_timeout,omitempty"`

	// Cluster parameters.
	Configure *bool `json:"configure,omitempty"`

	// Port parameters.
	Protocol     *string `json:"protocol,omitempty"`
	Method       *string `json:"method,omitempty"`
	StickyTime   *int64  `json:"sticky_time,omitempty"`
	StaleTimeout *int64  `json:"stale_timeout,omitempty"`
	WeightBound  *int64  `json:"weight_bound,omitempty"`

	// Server parameters.
	Weight *int64 `json:"weight,omitempty"`
}

// Result answers an accepted Request.
type Result struct {
	// Applied is the number of operations applied.
	Applied int `json:"applied"`
}

// Error answers a refused Request or a failed report.
type Error struct {
	// Message says what was wrong.
	Message string `json:"error"`
	// Field names the offending field, when one is to blame.
	Field string `json:"field,omitempty"`
	// Op is the index of the offending operation in the batch, or -1.
	Op int `json:"op"`
}

// Counters count traffic of a cluster, port or server.
type Counters struct {
	Packets             uint64 `json:"packets"`
	Bytes               uint64 `json:"bytes"`
	NewConnections      uint64 `json:"new_connections"`
	FinishedConnections uint64 `json:"finished_connections"`
	ActiveConnections   uint64 `json:"active_connections"`
}

// ReasonCount counts packets the executor handled for one reason.
type ReasonCount struct {
	Reason  string `json:"reason"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// ExecutorReport describes the executor.
type ExecutorReport struct {
	// Started says whether the operator started the executor.
	Started bool `json:"started"`
	// Interface and XDPMode are what the operator asked for.
	Interface string `json:"interface,omitempty"`
	XDPMode   string `json:"xdp_mode"`
	// Attached says whether the program is attached; AttachedMode is the
	// mode it was attached in ("" when adopted from an earlier dlbd and
	// not known).
	Attached     bool   `json:"attached"`
	AttachedMode string `json:"attached_mode,omitempty"`
	Ifindex      int    `json:"ifindex,omitempty"`
	LinkID       uint32 `json:"link_id,omitempty"`
	ProgramID    uint32 `json:"program_id,omitempty"`
	PinDir       string `json:"pin_dir"`
	// Error is the last error bringing the executor up, if it is not.
	Error string `json:"error,omitempty"`

	NFA        string `json:"nfa,omitempty"`
	FinTimeout uint32 `json:"fin_timeout"`

	// Connection table fill and capacity; Maglev table size.
	Connections        int    `json:"connections"`
	ConnectionCapacity uint32 `json:"connection_capacity"`
	MaglevSize         uint32 `json:"maglev_size"`

	// Reasons count every packet the executor saw under one reason.
	Reasons []ReasonCount `json:"reasons"`
	// Packets is the sum of Reasons' packets.
	Packets uint64 `json:"packets"`
}

// ClusterReport describes a cluster.
type ClusterReport struct {
	Address   string `json:"address"`
	Configure bool   `json:"configure"`
	Ports     int    `json:"ports"`
	Counters
}

// PortReport describes a port.
type PortReport struct {
	Cluster      string `json:"cluster"`
	Port         uint16 `json:"port"`
	Protocol     string `json:"protocol"`
	Method       string `json:"method"`
	StickyTime   uint32 `json:"sticky_time"`
	StaleTimeout uint32 `json:"stale_timeout"`
	WeightBound  uint32 `json:"weight_bound"`
	Servers      int    `json:"servers"`
	Counters
}

// Server states in reports.
const (
	// StateUp: the server takes new connections (if its weight is > 0).
	StateUp = "up"
	// StateDown: the operator marked it down; established connections
	// finish, new ones go elsewhere.
	StateDown = "down"
	// StateUnresolved: its MAC address is not known yet.
	StateUnresolved = "unresolved"
)

// ServerReport describes one server of one port.
type ServerReport struct {
	Cluster string `json:"cluster"`
	Port    uint16 `json:"port"`
	Address string `json:"address"`
	Weight  uint32 `json:"weight"`
	State   string `json:"state"`
	MAC     string `json:"mac,omitempty"`
	Counters
}
