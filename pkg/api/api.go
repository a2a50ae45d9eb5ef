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
	// PathManager reports the manager: weights and their inputs (GET).
	PathManager = "/v1/manager"
	// PathAdvisors reports the advisors and their probes (GET).
	PathAdvisors = "/v1/advisors"
	// PathMetrics reports the metric servers' figures (GET).
	PathMetrics = "/v1/metrics"
	// PathConfigScript returns the configuration as the script of dlbctl
	// commands that recreates it (GET, text/plain): "dlbctl file save".
	PathConfigScript = "/v1/config/script"
	// PathHA reports high availability (GET): "dlbctl highavailability
	// status".
	PathHA = "/v1/highavailability"
	// PathTakeover asks this dispatcher to take over (POST a
	// TakeoverRequest).
	PathTakeover = "/v1/highavailability/takeover"
)

// Objects an Op can change.
const (
	ObjectExecutor = "executor"
	ObjectCluster  = "cluster"
	ObjectPort     = "port"
	ObjectServer   = "server"
	ObjectManager  = "manager"
	ObjectAdvisor  = "advisor"
	ObjectMetric   = "metric"
	// High availability ("highavailability heartbeat|backup|reach" in
	// dlbctl): a heartbeat path (add, set, remove; the target is the
	// peer's address, Source this dispatcher's), the role (add, remove),
	// a reach target (add, remove; the target is its address).
	ObjectHeartbeat = "heartbeat"
	ObjectBackup    = "backup"
	ObjectReach     = "reach"
	// ObjectBGP is the BGP speaker (set, remove); ObjectNeighbor a router
	// it peers with (add, set, remove).
	ObjectBGP      = "bgp"
	ObjectNeighbor = "neighbor"
)

// Actions an Op can take. Not every object takes every action.
const (
	ActionStart     = "start"     // executor, manager, advisor
	ActionStop      = "stop"      // executor, manager, advisor
	ActionSet       = "set"       // executor, cluster, port, server, manager, advisor, metric
	ActionAdd       = "add"       // cluster, port, server, metric
	ActionRemove    = "remove"    // cluster, port, server, metric
	ActionDown      = "down"      // server
	ActionUp        = "up"        // server
	ActionQuiesce   = "quiesce"   // manager (target: cluster@port@server, or a server address)
	ActionUnquiesce = "unquiesce" // manager
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

	// Executor parameters. NFA and ClientGateway set the IPv4 or the IPv6
	// value by the address's family; "none" clears both.
	Interface     *string `json:"interface,omitempty"`
	XDPMode       *string `json:"xdp_mode,omitempty"`
	NFA           *string `json:"nfa,omitempty"`
	FinTimeout    *int64  `json:"fin_timeout,omitempty"`
	ClientGateway *string `json:"client_gateway,omitempty"`

	// Cluster parameters.
	Configure   *bool   `json:"configure,omitempty"`
	Proportions []int64 `json:"proportions,omitempty"` // active new port system

	// Port parameters. CrossPort 0 and StickyMask 0 clear them.
	Protocol           *string `json:"protocol,omitempty"`
	Method             *string `json:"method,omitempty"`
	StickyTime         *int64  `json:"sticky_time,omitempty"`
	StickyMask         *int64  `json:"sticky_mask,omitempty"`
	CrossPort          *int64  `json:"cross_port,omitempty"`
	SelectionAlgorithm *string `json:"selection_algorithm,omitempty"`
	MaxHalfOpen        *int64  `json:"max_half_open,omitempty"`
	StaleTimeout       *int64  `json:"stale_timeout,omitempty"`
	WeightBound        *int64  `json:"weight_bound,omitempty"`
	AllDown            *string `json:"all_down,omitempty"`
	// TableSize fixes the port's Maglev table size (a prime); 0 chooses it
	// from the number of servers.
	TableSize *int64 `json:"table_size,omitempty"`

	// Server parameters. MapPort 0, and ReturnAddress or Router "none",
	// clear them.
	Weight          *int64  `json:"weight,omitempty"`
	FixedWeight     *bool   `json:"fixed_weight,omitempty"`
	AdvisorRequest  *string `json:"advisor_request,omitempty"`
	AdvisorResponse *string `json:"advisor_response,omitempty"`
	MapPort         *int64  `json:"map_port,omitempty"`
	ReturnAddress   *string `json:"return_address,omitempty"`
	Router          *string `json:"router,omitempty"`

	// Manager parameters. Interval is also an advisor's.
	Interval    *float64 `json:"interval,omitempty"`
	Refresh     *int64   `json:"refresh,omitempty"`
	Smoothing   *float64 `json:"smoothing,omitempty"`
	Sensitivity *float64 `json:"sensitivity,omitempty"`
	// Now, with quiesce, also drops the server's affinity records.
	Now *bool `json:"now,omitempty"`

	// Advisor parameters; the target is cluster@port (cluster empty for
	// every cluster balancing the port).
	Advisor        *string  `json:"advisor,omitempty"`
	ConnectTimeout *float64 `json:"connect_timeout,omitempty"`
	ReceiveTimeout *float64 `json:"receive_timeout,omitempty"`
	Retries        *int64   `json:"retries,omitempty"`
	Rise           *int64   `json:"rise,omitempty"`
	Fall           *int64   `json:"fall,omitempty"`
	Program        *string  `json:"program,omitempty"`
	Args           []string `json:"args,omitempty"`
	Mode           *string  `json:"mode,omitempty"`

	// Metric parameters; the target of add/remove is a cluster.
	Metrics    []string `json:"metrics,omitempty"`
	Source     *string  `json:"source,omitempty"`
	MetricPort *int64   `json:"metric_port,omitempty"`
	SecretFile *string  `json:"secret_file,omitempty"`
	Path       *string  `json:"path,omitempty"`

	// BGP parameters: the speaker's (bgp set), a neighbour's (neighbor
	// add/set, the target is its address) and a cluster's announcement
	// (cluster add/set). Communities "none" clears them; MED 0 sends none.
	ASN          *int64   `json:"asn,omitempty"`
	RouterID     *string  `json:"router_id,omitempty"`
	ListenPort   *int64   `json:"listen_port,omitempty"`
	RemoteAS     *int64   `json:"remote_as,omitempty"`
	PasswordFile *string  `json:"password_file,omitempty"`
	HoldTime     *int64   `json:"hold_time,omitempty"`
	Multihop     *int64   `json:"multihop,omitempty"`
	NeighborPort *int64   `json:"neighbor_port,omitempty"`
	BFD          *bool    `json:"bfd,omitempty"`
	Announce     *bool    `json:"announce,omitempty"`
	Communities  []string `json:"communities,omitempty"`
	MED          *int64   `json:"med,omitempty"`

	// High-availability parameters: a heartbeat's Source (above), its
	// SecretFile, Interval (milliseconds here) and Count (intervals
	// without a heartbeat that make the peer dead); the backup's Role
	// (primary, backup, both), Recovery (auto, manual) and HAPort; a
	// cluster's PrimaryHost under role both ("none" clears it).
	Count       *int64  `json:"count,omitempty"`
	Role        *string `json:"role,omitempty"`
	Recovery    *string `json:"recovery,omitempty"`
	HAPort      *int64  `json:"ha_port,omitempty"`
	PrimaryHost *string `json:"primary_host,omitempty"`
}

// TakeoverRequest asks a dispatcher to take over: the clusters of the
// dispatcher whose heartbeat address Address is (under mutual high
// availability), or all of them (no address).
type TakeoverRequest struct {
	Address string `json:"address,omitempty"`
}

// HAReport is "dlbctl highavailability status".
type HAReport struct {
	// Configured says high availability is configured; Running that it
	// exchanges heartbeats; Error why it does not, if it should.
	Configured bool   `json:"configured"`
	Running    bool   `json:"running"`
	Error      string `json:"error,omitempty"`
	Role       string `json:"role"`
	Recovery   string `json:"recovery,omitempty"`
	Port       uint16 `json:"port,omitempty"`
	IntervalMS uint32 `json:"interval_ms,omitempty"`
	Count      uint32 `json:"count,omitempty"`
	SecretFile string `json:"secret_file,omitempty"`
	// Healthy says this dispatcher's executor can forward.
	Healthy      bool   `json:"healthy"`
	HealthReason string `json:"health_reason,omitempty"`
	// Groups are the states: one group for a primary or a backup, two
	// under role both (local: the clusters whose primaryhost is this
	// dispatcher; peer: the others).
	Groups []HAGroupReport `json:"groups,omitempty"`
	Peer   HAPeerReport    `json:"peer"`
	// Heartbeats and Reach are the paths and the reach targets.
	Heartbeats []HAHeartbeatReport `json:"heartbeats,omitempty"`
	Reach      []HAReachReport     `json:"reach,omitempty"`
	// Stray are paths this dispatcher does not have that the peer's
	// authenticated heartbeats arrived on in the last minute (Source this
	// dispatcher's address, as in Heartbeats): the two dispatchers' paths
	// differ, and the peer is not heard on these.
	Stray []HAHeartbeatReport `json:"stray_heartbeats,omitempty"`
	// Refused counts heartbeats and replication refused, by reason.
	Refused map[string]uint64 `json:"refused,omitempty"`
	// SecretPending says the peer was last heard with another shared
	// secret (this dispatcher's was changed first): heartbeats go under
	// both until the peer has the new one. SecretError says why the
	// secret file, read again, cannot be used (the former secret stays).
	SecretPending bool   `json:"secret_pending,omitempty"`
	SecretError   string `json:"secret_error,omitempty"`
	// PeerPort is the port the live peer uses when it is not this
	// dispatcher's (changed on one side first): heartbeats go to both,
	// replication to the peer's, until the peer uses this one.
	PeerPort uint16 `json:"peer_port,omitempty"`
	// Digest is this configuration's digest, and DigestMatch says the
	// live peer announces the same one.
	Digest      string       `json:"config_digest"`
	DigestMatch bool         `json:"config_digest_match"`
	Replication HAReplReport `json:"replication"`
	Boot        string       `json:"boot,omitempty"`
	Announced   uint64       `json:"announcements"`
}

// HAGroupReport is one group's state: since when, and why it changed to
// it then (Reason, which may no longer hold).
type HAGroupReport struct {
	Group    string   `json:"group"`
	State    string   `json:"state"`
	Since    string   `json:"since,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	Takeover bool     `json:"takeover_pending,omitempty"`
	Clusters []string `json:"clusters,omitempty"`
}

// HAPeerReport is the peer as its heartbeats describe it.
type HAPeerReport struct {
	Alive      bool     `json:"alive"`
	Heard      bool     `json:"heard"`
	SecondsAgo float64  `json:"seconds_since_heard,omitempty"`
	Role       string   `json:"role,omitempty"`
	Recovery   string   `json:"recovery,omitempty"`
	Healthy    bool     `json:"healthy"`
	Restarting bool     `json:"restarting,omitempty"`
	Reach      int      `json:"reach"`
	Targets    int      `json:"targets"`
	States     []string `json:"states,omitempty"` // by group, as Groups
	Digest     string   `json:"config_digest,omitempty"`
	Conflict   string   `json:"conflict,omitempty"`
}

// HAHeartbeatReport is one heartbeat path.
type HAHeartbeatReport struct {
	Source      string  `json:"source"`
	Destination string  `json:"destination"`
	Sent        uint64  `json:"sent"`
	Received    uint64  `json:"received"`
	SecondsAgo  float64 `json:"seconds_since_heard,omitempty"`
	Error       string  `json:"error,omitempty"`
}

// HAReachReport is one reach target.
type HAReachReport struct {
	Address   string `json:"address"`
	Reachable bool   `json:"reachable"`
	LastError string `json:"last_error,omitempty"`
}

// HAReplReport is connection-table replication.
type HAReplReport struct {
	Sending         bool    `json:"sending"`
	Receiving       bool    `json:"receiving"`
	Synced          bool    `json:"synced"`
	Sessions        uint64  `json:"sessions"`
	SentRecords     uint64  `json:"sent_records"`
	ReceivedRecords uint64  `json:"received_records"`
	Imported        uint64  `json:"imported_records"`
	Unknown         uint64  `json:"unknown_records,omitempty"`
	LagMS           float64 `json:"lag_ms"`
	// Merged and Kept are the records received for groups this
	// dispatcher served too (a partition that healed): written, and not
	// written (the key held already: the same connection, or another
	// used since).
	Merged uint64 `json:"merged_records,omitempty"`
	Kept   uint64 `json:"kept_records,omitempty"`
}

// Result answers an accepted Request.
type Result struct {
	// Applied is the number of operations applied.
	Applied int `json:"applied"`
	// Notes say what the change did that the operator may want to know
	// (executor stop: the pins it removed).
	Notes []string `json:"notes,omitempty"`
	// Warnings name conditions that keep the configuration from working
	// as meant, with their remedy; the change was applied.
	Warnings []string `json:"warnings,omitempty"`
}

// Error answers a refused Request or a failed report.
type Error struct {
	// Message says what was wrong.
	Message string `json:"error"`
	// Field names the offending field, when one is to blame.
	Field string `json:"field,omitempty"`
	// Op is the index of the offending operation in the batch, or -1.
	Op int `json:"op"`
	// Line and Path say where a refused configuration file is wrong:
	// the line (from 1) and the field's path in the file
	// ("clusters[0].ports[1].weightbound"); 0 and empty otherwise.
	Line int    `json:"line,omitempty"`
	Path string `json:"path,omitempty"`
}

// Counters count traffic of a cluster, port or server. Packets, Bytes,
// NewConnections and FinishedConnections count from the moment the
// executor's tables were created (a dlbd restart keeps them);
// ActiveConnections is a count at the latest sweep.
type Counters struct {
	// Packets and Bytes count what the executor forwarded (NAT: both
	// ways).
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// NewConnections counts connections scheduled (NEWC);
	// FinishedConnections those that saw a FIN or an RST, gave way to a
	// new connection from the same client port, or expired while
	// established (FIN).
	NewConnections      uint64 `json:"new_connections"`
	FinishedConnections uint64 `json:"finished_connections"`
	// ActiveConnections counts the established connections dlbd found
	// at its latest sweep of the connection table, every 2 s (ACTV): it
	// lags NewConnections and FinishedConnections by up to a sweep.
	ActiveConnections uint64 `json:"active_connections"`
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
	// State is where it stands (ExecutorStopped, ...); Detached says
	// why it is detached, DetachedSince since when (RFC 3339).
	State         string `json:"state"`
	Detached      string `json:"detached,omitempty"`
	DetachedSince string `json:"detached_since,omitempty"`
	// Warnings name conditions that keep the configuration from working
	// as meant, while they last, with their remedy.
	Warnings []string `json:"warnings,omitempty"`
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

	NFA            string `json:"nfa,omitempty"`
	NFA6           string `json:"nfa6,omitempty"`
	ClientGateway  string `json:"client_gateway,omitempty"`
	ClientGateway6 string `json:"client_gateway6,omitempty"`
	FinTimeout     uint32 `json:"fin_timeout"`

	// Connection table fill and capacity (MAC and NAT connections); the
	// largest Maglev table a port may have; the capacities of the NAT,
	// half-open and affinity tables, and how many ports and servers the
	// executor holds, fixed when dlbd loaded it.
	Connections        int    `json:"connections"`
	ConnectionCapacity uint32 `json:"connection_capacity"`
	MaglevSize         uint32 `json:"maglev_size"`
	ServiceCapacity    uint32 `json:"port_capacity,omitempty"`
	ServerCapacity     uint32 `json:"server_capacity,omitempty"`
	NATCapacity        uint32 `json:"nat_capacity,omitempty"`
	HalfOpenCapacity   uint32 `json:"half_open_capacity,omitempty"`
	AffinityCapacity   uint32 `json:"affinity_capacity,omitempty"`
	// AffinityRecords counts live affinity records.
	AffinityRecords uint64 `json:"affinity_records"`
	// ReturnAddresses is the NAT port-pool use of each return address.
	ReturnAddresses []ReturnAddressReport `json:"return_addresses,omitempty"`
	// Events count what happened beside the per-packet reasons (table
	// inserts refused, NAT ports exhausted, half-open evictions, ...).
	Events map[string]uint64 `json:"events,omitempty"`
	// Tables is the kernel memory each of the executor's tables holds, and
	// MemoryBytes their sum.
	Tables      []TableReport `json:"tables,omitempty"`
	MemoryBytes uint64        `json:"memory_bytes,omitempty"`

	// Dropping counts, by reason, the packets the executor dropped in the
	// last DroppingSeconds for want of something the operator gives: a
	// route to the clients (drop_no_route), a usable interface towards a
	// server (drop_no_tx_port), room in the NAT tables (drop_table_full),
	// free NAT ports (drop_nat_exhausted). Empty when it dropped none.
	Dropping        map[string]uint64 `json:"dropping,omitempty"`
	DroppingSeconds float64           `json:"dropping_seconds,omitempty"`
	// Reasons count every packet the executor saw under one reason.
	Reasons []ReasonCount `json:"reasons"`
	// Packets is the sum of Reasons' packets.
	Packets uint64 `json:"packets"`
	// Trace is the packet trace that runs (dlbctl executor trace), if
	// one does.
	Trace *TraceReport `json:"trace,omitempty"`
}

// TraceReport is a packet trace that runs.
type TraceReport struct {
	// Filter says what it selects ("cluster 198.18.0.100 port 80",
	// "every packet"); Since when it started (RFC 3339); Packets how many
	// it has handed to its client so far.
	Filter  string `json:"filter"`
	Since   string `json:"since"`
	Packets uint64 `json:"packets"`
}

// TableReport is one of the executor's tables in kernel memory.
type TableReport struct {
	Name string `json:"name"`
	// Entries is its capacity (Maglev: the slots of all ports' tables,
	// Tables of them).
	Entries uint64 `json:"entries"`
	Tables  int    `json:"tables,omitempty"`
	Bytes   uint64 `json:"bytes"`
}

// ReturnAddressReport is the NAT port pool of one return address.
type ReturnAddressReport struct {
	Address string `json:"address"`
	// Ports is the pool's size; Established and HalfOpen the ports held.
	Ports       uint32 `json:"ports"`
	Established uint32 `json:"established"`
	HalfOpen    uint32 `json:"half_open"`
}

// ClusterReport describes a cluster.
type ClusterReport struct {
	Address     string   `json:"address"`
	Configure   bool     `json:"configure"`
	PrimaryHost string   `json:"primary_host,omitempty"`
	Announce    bool     `json:"announce,omitempty"`
	Communities []string `json:"communities,omitempty"`
	MED         uint32   `json:"med,omitempty"`
	Ports       int      `json:"ports"`
	Proportions []int    `json:"proportions"` // active new port system
	Metrics     []string `json:"metrics,omitempty"`
	Counters
}

// PortReport describes a port.
type PortReport struct {
	Cluster    string `json:"cluster"`
	Port       uint16 `json:"port"`
	Protocol   string `json:"protocol"`
	Method     string `json:"method"`
	StickyTime uint32 `json:"sticky_time"`
	// StickyMask is the affinity prefix length (0: whole address).
	StickyMask         uint8  `json:"sticky_mask,omitempty"`
	CrossPort          uint16 `json:"cross_port,omitempty"`
	SelectionAlgorithm string `json:"selection_algorithm"`
	MaxHalfOpen        uint32 `json:"max_half_open,omitempty"`
	StaleTimeout       uint32 `json:"stale_timeout"`
	WeightBound        uint32 `json:"weight_bound"`
	AllDown            string `json:"all_down"`
	Servers            int    `json:"servers"`
	// TableSize is the slots of the port's Maglev table (0: none, no
	// server takes new connections).
	TableSize uint32 `json:"table_size,omitempty"`
	// TableDigest identifies the table's contents by server address
	// (FNV-1a over each slot's server): dispatchers behind ECMP must show
	// the same digest for a port, whatever the order they were configured
	// in.
	TableDigest string `json:"table_digest,omitempty"`
	// HalfOpen counts the port's half-open connections (SYNs without a
	// completed handshake, last 30 s; saturates under a flood), and
	// HalfOpenAlert says it is above MaxHalfOpen.
	HalfOpen      uint64 `json:"half_open"`
	HalfOpenAlert bool   `json:"half_open_alert,omitempty"`
	// AffinityRecords counts the live affinity records the port wrote.
	AffinityRecords uint64 `json:"affinity_records"`
	Counters
}

// Executor states in reports.
const (
	// ExecutorStopped: the operator stopped it (or never started it).
	ExecutorStopped = "stopped"
	// ExecutorAttached: started and attached to its interface.
	ExecutorAttached = "attached"
	// ExecutorDetached: started, but its interface is gone; it attaches
	// again when an interface of that name appears.
	ExecutorDetached = "detached"
	// ExecutorFailed: started, but it could not be brought up (see the
	// report's error).
	ExecutorFailed = "failed"
)

// Server states in reports.
const (
	// StateUp: the server takes new connections (if its weight is > 0).
	StateUp = "up"
	// StateDown: the operator marked it down; established connections
	// finish, new ones go elsewhere.
	StateDown = "down"
	// StateUnresolved: its MAC address is not known yet.
	StateUnresolved = "unresolved"
	// StateQuiesced: the manager quiesced it; like down.
	StateQuiesced = "quiesced"
	// StateFailed: its advisor found it down; new connections go
	// elsewhere until the advisor sees it up again.
	StateFailed = "failed"
)

// ServerReport describes one server of one port.
type ServerReport struct {
	Cluster string `json:"cluster"`
	Port    uint16 `json:"port"`
	Address string `json:"address"`
	// Weight is the operator's (configured) weight; CurrentWeight the one
	// the executor uses now (the manager's, while it runs).
	Weight          uint32 `json:"weight"`
	CurrentWeight   uint32 `json:"current_weight"`
	FixedWeight     bool   `json:"fixed_weight,omitempty"`
	State           string `json:"state"`
	MAC             string `json:"mac,omitempty"`
	AdvisorRequest  string `json:"advisor_request,omitempty"`
	AdvisorResponse string `json:"advisor_response,omitempty"`
	// MapPort, ReturnAddress and Router are the server's NAT settings.
	MapPort       uint16 `json:"map_port,omitempty"`
	ReturnAddress string `json:"return_address,omitempty"`
	Router        string `json:"router,omitempty"`
	// AffinityRecords counts the live affinity records naming the server.
	AffinityRecords uint64 `json:"affinity_records"`
	Counters
}

// ManagerReport describes the manager and, per port and server, the
// weights and the inputs they came from.
type ManagerReport struct {
	Started     bool    `json:"started"`
	Interval    float64 `json:"interval"`
	Refresh     int     `json:"refresh"`
	Smoothing   float64 `json:"smoothing"`
	Sensitivity float64 `json:"sensitivity"`
	// Cycles counts manager cycles since dlbd started.
	Cycles uint64        `json:"cycles"`
	Ports  []ManagerPort `json:"ports"`
}

// ManagerPort is one port in the manager report.
type ManagerPort struct {
	Cluster     string `json:"cluster"`
	Port        uint16 `json:"port"`
	Proportions []int  `json:"proportions"`
	WeightBound uint32 `json:"weight_bound"`
	// Alert says that no server of the port takes new connections.
	Alert bool `json:"alert"`
	// Change is the last cycle's weight change in percent, and Pushed
	// whether it passed the sensitivity threshold.
	Change  float64         `json:"change"`
	Pushed  bool            `json:"pushed"`
	Servers []ManagerServer `json:"servers"`
}

// ManagerServer is one server in the manager report: IBM's columns.
type ManagerServer struct {
	Address string `json:"address"`
	// Weight is the weight the executor uses now; NewWeight the one the
	// last cycle computed (applied only when pushed).
	Weight    uint32 `json:"weight"`
	NewWeight uint32 `json:"new_weight"`
	// Active and New are ACTV and NEWC (new connections in the last
	// refresh period).
	Active uint64 `json:"active"`
	New    uint64 `json:"new"`
	// PortLoad is the advisor's load in ms (-1: down, 0: no advisor).
	PortLoad int64 `json:"port_load"`
	// SystemLoad is the metric servers' load 0..100 (-1: none or stale).
	SystemLoad float64 `json:"system_load"`
	State      string  `json:"state"`
	// Reason says why the weight last changed.
	Reason string `json:"reason"`
}

// AdvisorReport describes one started advisor and its servers.
type AdvisorReport struct {
	Name           string          `json:"name"`
	Cluster        string          `json:"cluster,omitempty"`
	Port           uint16          `json:"port"`
	Interval       float64         `json:"interval"`
	ConnectTimeout float64         `json:"connect_timeout"`
	ReceiveTimeout float64         `json:"receive_timeout"`
	Retries        int             `json:"retries"`
	Rise           int             `json:"rise"`
	Fall           int             `json:"fall"`
	Program        string          `json:"program,omitempty"`
	Args           []string        `json:"args,omitempty"`
	Mode           string          `json:"mode,omitempty"`
	Servers        []AdvisorServer `json:"servers"`
}

// Advisor states of a server.
const (
	AdvisorUp      = "up"
	AdvisorDown    = "down"
	AdvisorUnknown = "unknown"
)

// AdvisorServer is one probed server in the advisor report.
type AdvisorServer struct {
	Address string `json:"address"`
	Port    uint16 `json:"port"`
	State   string `json:"state"`
	// LoadMS is the last probe's load in ms (-1: down).
	LoadMS int64 `json:"load_ms"`
	// Since is when the server entered its state (RFC 3339), and
	// SecondsInState how long ago that was.
	Since          string  `json:"since,omitempty"`
	SecondsInState float64 `json:"seconds_in_state"`
	LastError      string  `json:"last_error,omitempty"`
	Probes         uint64  `json:"probes"`
	Failures       uint64  `json:"failures"`
	// Unmade counts the probes the dispatcher could not make for a reason
	// of its own (its NFA or its route to the server missing, out of file
	// descriptors, its firewall), which are neither probes nor failures.
	Unmade uint64 `json:"unmade,omitempty"`
	// CannotProbe says the last probe was one of those: the state is the
	// one before, unchecked, until this host can probe again.
	CannotProbe bool `json:"cannot_probe,omitempty"`
}

// MetricReport describes the metric sources and what they reported.
type MetricReport struct {
	Source     string           `json:"source"`
	Port       uint16           `json:"port"`
	SecretFile string           `json:"secret_file,omitempty"`
	Path       string           `json:"path,omitempty"`
	Clusters   []MetricCluster  `json:"clusters"`
	Servers    []MetricServer   `json:"servers"`
	Refused    map[string]int64 `json:"refused"`
}

// MetricCluster lists a cluster's metrics.
type MetricCluster struct {
	Cluster string   `json:"cluster"`
	Metrics []string `json:"metrics"`
}

// MetricServer is one server's last report.
type MetricServer struct {
	Address string             `json:"address"`
	Values  map[string]float64 `json:"values,omitempty"`
	// AgeSeconds is how old the report is; Stale says the manager
	// ignores it (older than 3 manager intervals).
	AgeSeconds float64 `json:"age_seconds"`
	Stale      bool    `json:"stale"`
	LastError  string  `json:"last_error,omitempty"`
}
