package lb

import (
	"net"
	"net/netip"
)

// Dataplane is what the executor's maps must hold: the engine computes it
// from a Config (assigning ids and building Maglev tables), and the data
// path writes it. It is the whole desired kernel state, so applying it is
// idempotent.
type Dataplane struct {
	// NFA is the non-forwarding address; the zero Addr means none.
	NFA netip.Addr
	// Services are the balanced ports, one per cluster@port.
	Services []DataplaneService
	// Backends are the servers, one per cluster@port@server.
	Backends []DataplaneBackend
}

// DataplaneService is one balanced cluster@port as the executor sees it.
type DataplaneService struct {
	// ID indexes the service's Maglev table and counters.
	ID uint32
	// Cluster is the cluster address.
	Cluster netip.Addr
	// Port is the port number.
	Port uint16
	// Protocol says which of TCP and UDP are balanced.
	Protocol Protocol
	// StaleTimeout and FinTimeout are in seconds.
	StaleTimeout, FinTimeout uint32
	// Table is the service's Maglev table: slot -> backend id. It is nil
	// when no server takes new connections.
	Table []uint32
	// TableSum identifies Table's contents, so that an unchanged table is
	// not rewritten.
	TableSum uint64
}

// DataplaneBackend is one server of one service as the executor sees it.
type DataplaneBackend struct {
	// ID indexes the backend's entry and counters.
	ID uint32
	// Service is the id of the service it belongs to.
	Service uint32
	// Address is the server's address.
	Address netip.Addr
	// MAC is the server's MAC address; SrcMAC that of the interface it is
	// reached through, whose index is Ifindex.
	MAC, SrcMAC net.HardwareAddr
	// Ifindex is the interface the server is reached through.
	Ifindex int
	// AcceptNew says whether the server takes new connections.
	AcceptNew bool
}

// Counters count a service's or a backend's traffic.
type Counters struct {
	// Packets and Bytes forwarded.
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
	// Services and Backends are keyed by id.
	Services map[uint32]Counters
	Backends map[uint32]Counters
}

// SweepResult is what one pass over the connection table found.
type SweepResult struct {
	// Entries is the number of entries left in the table.
	Entries int
	// Expired is the number of entries removed.
	Expired int
	// Active counts established, unexpired connections per backend id.
	Active map[uint32]uint64
}

// Attachment describes where the executor's program is attached.
type Attachment struct {
	// Ifindex is the interface the program is attached to.
	Ifindex int
	// LinkID and ProgramID identify the kernel objects.
	LinkID    uint32
	ProgramID uint32
}

// Link is a network interface.
type Link struct {
	// Index and Name identify it; MAC is its hardware address.
	Index int
	Name  string
	MAC   net.HardwareAddr
	// Kind is the driver kind as netlink names it ("veth", "device", ...).
	Kind string
}

// Neighbor says how to reach a server on a directly connected segment.
type Neighbor struct {
	// Ifindex is the interface the server is reached through, and IfMAC
	// that interface's MAC address.
	Ifindex int
	IfMAC   net.HardwareAddr
	// MAC is the server's MAC address, or nil while it is not resolved.
	MAC net.HardwareAddr
}

// TableSum returns a checksum of a Maglev table (FNV-1a over its slots,
// little-endian). It is never 0, so 0 can mean "not computed".
func TableSum(slots []uint32) uint64 {
	h := uint64(14695981039346656037)
	for _, v := range slots {
		for i := 0; i < 4; i++ {
			h ^= uint64(byte(v >> (8 * i)))
			h *= 1099511628211
		}
	}
	if h == 0 {
		return 1
	}
	return h
}
