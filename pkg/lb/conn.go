package lb

import (
	"fmt"
	"net/netip"
	"time"
)

// ConnKind says which of the executor's tables a connection record is of.
type ConnKind uint8

// Kinds of connection records.
const (
	// ConnMAC is an entry of the MAC connection table: a client's flow
	// and its server.
	ConnMAC ConnKind = iota + 1
	// ConnNATFlow is a NAT mapping seen from the client: its flow, its
	// server, and the return address and port the server sees it from.
	ConnNATFlow
	// ConnNATPort is the same mapping seen from the server: the return
	// address's port and the client flow replies are translated back to.
	ConnNATPort
	// ConnAffinity is an affinity record: a client (or client subnet)
	// and the server of its latest connection to a port.
	ConnAffinity
)

// String names the kind.
func (k ConnKind) String() string {
	switch k {
	case ConnMAC:
		return "mac"
	case ConnNATFlow:
		return "natflow"
	case ConnNATPort:
		return "natport"
	case ConnAffinity:
		return "affinity"
	}
	return fmt.Sprintf("connkind(%d)", uint8(k))
}

// ConnRecord is one entry of the executor's connection tables in the
// model's terms: addresses and the server's address instead of the ids
// and clock values one executor gives them, so that another dispatcher's
// executor can hold the same entry (high-availability replication).
type ConnRecord struct {
	Kind ConnKind
	// Protocol is the IP protocol (6: TCP, 17: UDP).
	Protocol uint8
	// Client is the client's address and port; for an affinity record,
	// the client's address masked with the port's stickymask, port 0.
	Client netip.AddrPort
	// Cluster is the cluster address and port the client connected to;
	// for an affinity record, the port that wrote it.
	Cluster netip.AddrPort
	// Server is the address of the server the connection goes to.
	Server netip.Addr
	// NAT is the return address and port of a NAT mapping.
	NAT netip.AddrPort
	// Closing says a FIN or RST was seen: the entry lives fintimeout.
	Closing bool
	// Age is how long ago the entry was last used.
	Age time.Duration
}

// Backend returns the server the record names, as a backend key.
func (r ConnRecord) Backend() BackendKey {
	return BackendKey{Service: ServiceKey{Cluster: r.Cluster.Addr(), Port: r.Cluster.Port()}, Server: r.Server}
}

// ConnBatch is a piece of connection-table replication: records, and
// optionally a marker after them.
type ConnBatch struct {
	// Records are connection-table entries.
	Records []ConnRecord
	// Marker, when not 0, follows the records: the receiver acknowledges
	// it once it imported everything before it. Full says it ends a full
	// copy of the sender's tables.
	Marker uint64
	Full   bool
	// Sent is when the sender sent the batch (its clock).
	Sent time.Time
}

// ConnEntry is an entry of the executor's connection tables as the
// executor holds it: with its ids (the engine translates them to
// addresses for a ConnRecord).
type ConnEntry struct {
	Kind     ConnKind
	Protocol uint8
	// Client, Cluster and NAT are as in ConnRecord.
	Client, Cluster, NAT netip.AddrPort
	// Backend is the backend id of the entry's server; Service the
	// service id of the port that wrote it.
	Backend, Service uint32
	Closing          bool
	Age              time.Duration
}

// ConnScan is a scan of the connection tables in progress: what was
// found in each table's slots at the last scan, so that the next one
// reports only what changed. The executor owns its contents.
type ConnScan struct {
	// State is the executor's record of the slots.
	State any
}
