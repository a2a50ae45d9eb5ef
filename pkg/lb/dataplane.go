package lb

import (
	"errors"
	"net"
	"net/netip"
	"slices"
)

// Dataplane is what the executor's maps must hold: the engine computes it
// from a Config (assigning ids and building Maglev tables, resolving next
// hops), and the data path writes it. It is the whole desired kernel state,
// so applying it is idempotent. Every field added after the first release
// has a zero value that keeps the executor's earlier behaviour: MAC
// forwarding, no affinity, IPv4 NFA only.
type Dataplane struct {
	// NFA is the IPv4 non-forwarding address; the zero Addr means none.
	NFA netip.Addr
	// NFA6 is the IPv6 non-forwarding address; the zero Addr means none.
	// Traffic to either NFA is never balanced or translated.
	NFA6 netip.Addr
	// ClientGateway and ClientGateway6 are where NAT replies (and ICMP
	// errors translated for clients) to IPv4 and IPv6 clients go: IBM's
	// "executor set clientgateway". The zero value (no MAC) means "the
	// next hop the routing table gives", looked up in the kernel once per
	// NAT connection (bpf_fib_lookup; this needs forwarding enabled on the
	// interface the replies arrive on).
	ClientGateway, ClientGateway6 DataplaneNextHop
	// ReturnPools are the NAT port pools of return addresses. A return
	// address of a NAT backend that has no entry uses ports
	// 1024-65535. Every return address must be an address the dispatcher
	// owns (the server side must route and ARP/ND it to the dispatcher),
	// and none may be an NFA or a cluster address.
	ReturnPools []DataplaneReturnPool
	// Services are the balanced ports, one per cluster@port.
	Services []DataplaneService
	// Backends are the servers, one per cluster@port@server.
	Backends []DataplaneBackend
}

// DataplaneMethod is how a service forwards packets to its servers.
type DataplaneMethod uint8

// Forwarding methods of a service.
const (
	// DataplaneMAC (the zero value) rewrites MAC addresses only: the
	// server holds the cluster address on a loopback alias and answers
	// the client directly.
	DataplaneMAC DataplaneMethod = iota
	// DataplaneNAT (NAPT) rewrites the destination to the server (port:
	// the backend's Port, else the service's) and the source to the
	// backend's ReturnAddress and a port of that address's pool; replies
	// to the return address are translated back and sent to the client.
	DataplaneNAT
)

// DataplaneSelection is how a service with a non-zero StickyTime uses
// affinity records (IBM's selectionalgorithm).
type DataplaneSelection uint8

// Selections. A record names the server of a client's (or client
// subnet's) latest connection and lives StickyTime seconds after its last
// use: the connection's establishment, a FIN, or a sweep that found the
// client still connected.
const (
	// DataplaneAffinity (the zero value): a new connection follows the
	// client's unexpired record whenever the record's server is configured
	// and either takes new connections or is Quiesced.
	DataplaneAffinity DataplaneSelection = iota
	// DataplaneConnAffin: the record is followed only while its server
	// takes new connections (AcceptNew); otherwise the connection is
	// scheduled afresh and the record replaced.
	DataplaneConnAffin
	// DataplaneConnection: records are neither read nor written; every
	// connection is scheduled on its own (StickyTime is ignored).
	DataplaneConnection
)

// DataplaneService is one balanced cluster@port as the executor sees it.
type DataplaneService struct {
	// ID indexes the service's Maglev table and counters.
	ID uint32
	// Cluster is the cluster address (IPv4 or IPv6).
	Cluster netip.Addr
	// Port is the port number.
	Port uint16
	// Protocol says which of TCP and UDP are balanced.
	Protocol Protocol
	// Method is the forwarding method (zero: MAC).
	Method DataplaneMethod
	// StaleTimeout and FinTimeout are in seconds: how long an idle
	// connection, and one that saw FIN or RST, keep their entries. For UDP
	// the StaleTimeout is the idle time after which a flow may move.
	StaleTimeout, FinTimeout uint32
	// StickyTime is IBM's stickytime in seconds: how long a client's
	// affinity record lives after its last use. 0 disables affinity.
	StickyTime uint32
	// StickyMask4 and StickyMask6 are IBM's stickymask: records are kept
	// per client subnet of this many prefix bits (IPv4 1-32, IPv6 1-128).
	// 0 means the whole address.
	StickyMask4, StickyMask6 uint8
	// AffinityGroup makes services share affinity records (IBM's
	// crossport): services with the same non-zero group (which must be
	// below 1<<31) use each other's records, matching servers by address.
	// 0 gives the service records of its own.
	AffinityGroup uint32
	// Selection is IBM's selectionalgorithm (zero: affinity).
	Selection DataplaneSelection
	// Table is the service's Maglev table: slot -> backend id. It is nil
	// when no server takes new connections.
	Table []uint32
	// TableSum identifies Table's contents, so that an unchanged table is
	// not rewritten.
	TableSum uint64
}

// TableSize is the number of slots of the service's Maglev table (0: it
// has none).
func (s DataplaneService) TableSize() uint32 { return uint32(len(s.Table)) }

// DataplaneBackend is one server of one service as the executor sees it.
type DataplaneBackend struct {
	// ID indexes the backend's entry and counters.
	ID uint32
	// Service is the id of the service it belongs to.
	Service uint32
	// Address is the server's address (of the service's family).
	Address netip.Addr
	// MAC is the next hop towards the server: the server's own MAC on the
	// dispatcher's segment, or, for a NAT server behind a router (IBM's
	// "router"), the router's MAC. SrcMAC is the MAC of the interface that
	// next hop is reached through, whose index is Ifindex.
	MAC, SrcMAC net.HardwareAddr
	// Ifindex is the interface the next hop is reached through.
	Ifindex int
	// AcceptNew says whether the server takes new connections from the
	// Maglev table (it is up and its weight is above 0).
	AcceptNew bool
	// Quiesced says that the server is up but takes no new connections
	// from the Maglev table (IBM's "manager quiesce" without "now"):
	// under DataplaneAffinity clients with an unexpired affinity record
	// still reach it. Leave it false for a down server.
	Quiesced bool
	// Port is the server's port for NAT (IBM's mapport); 0 means the
	// service's port. MAC forwarding ignores it.
	Port uint16
	// ReturnAddress is the source address NAT gives the server's
	// connections (IBM's returnaddress); required for a NAT service's
	// backends, of the server's family. MAC forwarding ignores it.
	ReturnAddress netip.Addr
}

// DataplaneNextHop is a neighbour the executor sends frames to directly.
type DataplaneNextHop struct {
	// MAC is the neighbour's MAC address; nil means "not configured".
	MAC net.HardwareAddr
	// SrcMAC is the MAC of the interface the neighbour is reached through,
	// whose index is Ifindex.
	SrcMAC  net.HardwareAddr
	Ifindex int
}

// DataplaneReturnPool is the NAT port pool of one return address.
type DataplaneReturnPool struct {
	// Address is the return address.
	Address netip.Addr
	// PortMin and PortMax bound the ports NAT may use, inclusive
	// (1 <= PortMin <= PortMax). Half-open connections (a SYN flood) can
	// hold at most as many ports of a pool as the executor's half-open
	// table has slots (16384 by default): keep pools at least four times
	// that, or shrink the table.
	PortMin, PortMax uint16
}

// Counters count a service's or a backend's traffic.
type Counters struct {
	// Packets and Bytes forwarded (for NAT services, both directions).
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// NewConns counts connections scheduled; FinConns those that finished
	// (saw FIN or RST, were replaced, or expired while established).
	NewConns uint64 `json:"new_connections"`
	FinConns uint64 `json:"finished_connections"`
}

// ReasonCount counts packets the executor handled for one reason.
type ReasonCount struct {
	// Reason names why: pass_*, drop_* or fwd_*.
	Reason  string `json:"reason"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// DataplaneStats is a snapshot of the executor's counters.
type DataplaneStats struct {
	// Reasons has one entry per reason, in the executor's order; their
	// packets add up to all packets the executor saw.
	Reasons []ReasonCount
	// Services is keyed by id.
	Services map[uint32]Counters
	// Backends is indexed by backend id (ids are dense): the counters of
	// every id up to the largest configured one, zero for ids not in
	// use. Read it with Backend.
	Backends []Counters
	// Events counts things that happened beside the per-packet reasons,
	// by name: table inserts refused (conn_insert_failed,
	// nat_table_full), affinity records used and written, NAT half-open
	// connections created, retransmitted, promoted, lost and evicted (the
	// half-open table was full: a SYN flood), NAT port collisions and
	// releases, routing-table lookups, ICMP errors delivered. See the
	// datapath package for the full list.
	Events map[string]uint64
}

// Backend returns the counters of backend id (zero for an id not in use).
func (s DataplaneStats) Backend(id uint32) Counters {
	if int(id) < len(s.Backends) {
		return s.Backends[id]
	}
	return Counters{}
}

// SweepResult is what one pass over the executor's tables found.
type SweepResult struct {
	// Entries is the number of connection entries left (MAC connections
	// plus NAT connections).
	Entries int
	// Expired is the number of connection entries removed.
	Expired int
	// Active counts established, unexpired connections per backend id.
	Active map[uint32]uint64
	// HalfOpen counts half-open connections per service id: SYNs seen in
	// the last 30 seconds whose handshake has not completed (MAC: slots
	// of the handshake cache, at most 16384 in all; NAT: reservations in
	// the half-open table). Both saturate under a SYN flood rather than
	// count every spoofed SYN, which is enough for the engine to compare
	// with a port's maxhalfopen (IBM's halfOpenAlert).
	HalfOpen map[uint32]uint64
	// AffinityServices and AffinityBackends count live affinity records
	// by the service and backend that wrote them.
	AffinityServices map[uint32]uint64
	AffinityBackends map[uint32]uint64
	// AffinityExpired is the number of affinity records removed.
	AffinityExpired int
	// ReturnPools is the NAT port use of every return address in use.
	ReturnPools map[netip.Addr]DataplanePoolUse
	// NATHops counts the NAT entries that cache each next hop towards
	// their clients (looked up in the routing table: no client gateway).
	NATHops map[NATHop]int
}

// NATHop is a next hop NAT replies are sent to: an interface and the MAC
// of a neighbour on it (a router, or a client on the same link).
type NATHop struct {
	Ifindex int
	MAC     [6]byte
}

// DataplanePoolUse is how much of a return address's NAT port pool is in
// use.
type DataplanePoolUse struct {
	// Size is the number of ports in the pool.
	Size uint32 `json:"size"`
	// Established counts ports held by established connections (UDP flows
	// included); HalfOpen those reserved by half-open TCP connections.
	Established uint32 `json:"established"`
	HalfOpen    uint32 `json:"half_open"`
}

// Attachment describes where the executor's program is attached.
type Attachment struct {
	// Ifindex is the interface the program is attached to.
	Ifindex int
	// LinkID and ProgramID identify the kernel objects.
	LinkID    uint32
	ProgramID uint32
}

// Replacement is what a dlbd did when it replaced the executor a dlbd
// before it had pinned, instead of adopting it: that one was of another
// executor ABI (an upgrade), or its tables of other sizes (a restart
// with other table-size flags).
type Replacement struct {
	// OldABI is the old executor's ABI version (0: unknown).
	OldABI uint32
	// Resized says what changed size, as "connection table 4096 -> 8192";
	// empty when the ABI changed (the old tables could not be read).
	Resized []string
	// Carried counts the connection-table entries and affinity records
	// carried over from the old executor's tables into the new ones; Lost
	// those that could not be (the new tables full, or a table left
	// half-replaced by a dlbd that died), and Err why ("": nothing lost).
	Carried, Lost int
	Err           string
}

// ErrNoInterface says an interface looked up (by name or index) is not
// on this host: not in this network namespace.
var ErrNoInterface = errors.New("no interface")

// Link is a network interface.
type Link struct {
	// Index and Name identify it; MAC is its hardware address.
	Index int
	Name  string
	MAC   net.HardwareAddr
	// Kind is the driver kind as netlink names it ("veth", "device", ...).
	Kind string
	// Up says the interface is administratively up and its carrier is
	// not down (it can carry frames).
	Up bool
	// XDP is the XDP program attached to it, if any.
	XDP XDPProgram
}

// Ethernet reports whether the interface has an Ethernet address it can
// send from: six bytes, not all zero (lo's).
func (l Link) Ethernet() bool {
	return len(l.MAC) == 6 && slices.ContainsFunc(l.MAC, func(b byte) bool { return b != 0 })
}

// XDPProgram is an XDP program attached to an interface, as the host
// reports it: the executor's or another tool's.
type XDPProgram struct {
	// Attached says a program is attached; ID is its kernel id (0 when
	// the host reports several).
	Attached bool
	ID       uint32
	// Mode is the mode it runs in; XDPAuto when the host reports
	// several programs or one offloaded to the NIC.
	Mode XDPMode
	// Name is the program's name, LinkID the BPF link that holds it on
	// the interface (0: attached through netlink, as "ip link" does),
	// and Executor says it is a dlb executor's program; the executor
	// fills them in (Datapath.DescribeXDP).
	Name     string
	LinkID   uint32
	Executor bool
}

// Neighbor says how to reach a server on a directly connected segment.
type Neighbor struct {
	// Ifindex is the interface the server is reached through, and IfMAC
	// that interface's MAC address.
	Ifindex int
	IfMAC   net.HardwareAddr
	// MAC is the server's MAC address, or nil while it is not resolved.
	MAC net.HardwareAddr
	// Src is the address this host's own packets to it leave from (its
	// route's preferred source), invalid when the route names none.
	Src netip.Addr
}

// TableSum returns a checksum of a Maglev table: FNV-1a taking a slot,
// not a byte, at each step (a byte at a time was a third of the CPU a
// change of 4,000 tables took). It is never 0, so 0 can mean "not
// computed". (An executor pinned by a dlbd that summed bytes has its
// tables written once more, unchanged, when adopted: their sums differ.)
func TableSum(slots []uint32) uint64 {
	h := uint64(14695981039346656037)
	for _, v := range slots {
		h ^= uint64(v)
		h *= 1099511628211
	}
	if h == 0 {
		return 1
	}
	return h
}

// DataplaneGlobals are the executor's settings that are not per service:
// the non-forwarding addresses, the client gateways and the NAT return
// pools (see Dataplane).
type DataplaneGlobals struct {
	NFA, NFA6                     netip.Addr
	ClientGateway, ClientGateway6 DataplaneNextHop
	ReturnPools                   []DataplaneReturnPool
}

// Globals returns the dataplane's global settings.
func (d Dataplane) Globals() DataplaneGlobals {
	return DataplaneGlobals{NFA: d.NFA, NFA6: d.NFA6, ClientGateway: d.ClientGateway,
		ClientGateway6: d.ClientGateway6, ReturnPools: d.ReturnPools}
}

// DataplaneUpdate is a change to the executor's maps: what a change to
// the configuration touched, and nothing else. Services and Backends are
// written (added, or replaced when they differ from what the maps hold);
// the ids in RemoveServices and RemoveBackends are removed. A service's
// Table replaces its Maglev table when its TableSum differs.
type DataplaneUpdate struct {
	// Globals, when not nil, replaces the global settings.
	Globals        *DataplaneGlobals
	Services       []DataplaneService
	Backends       []DataplaneBackend
	RemoveServices []uint32
	RemoveBackends []uint32
}

// Empty reports whether the update changes nothing.
func (u DataplaneUpdate) Empty() bool {
	return u.Globals == nil && len(u.Services)+len(u.Backends)+len(u.RemoveServices)+len(u.RemoveBackends) == 0
}

// DataplaneInfo describes the executor's tables, sized when it was loaded.
type DataplaneInfo struct {
	// PinDir is where its objects are pinned.
	PinDir string
	// ConnTable, NATTable, HalfOpenTable and AffinityTable are the
	// capacities of the connection, NAT, NAT half-open and affinity
	// tables.
	ConnTable, NATTable, HalfOpenTable, AffinityTable uint32
	// MaxServices and MaxBackends bound service and backend ids (ids are
	// below them).
	MaxServices, MaxBackends uint32
	// MaxTableSize is the largest Maglev table a service may have.
	MaxTableSize uint32
}

// TableMemory is what one of the executor's tables holds in kernel memory.
type TableMemory struct {
	// Name names the table ("conns", "maglev_tables", ...).
	Name string
	// Entries is its capacity (for the Maglev tables: the slots of all
	// services' tables), Tables the number of inner tables (Maglev).
	Entries uint64
	Tables  int
	// Bytes is the kernel memory charged for it.
	Bytes uint64
}
