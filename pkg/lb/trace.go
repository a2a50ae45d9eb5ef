package lb

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// ErrTraceRunning is returned when a packet trace is asked for while
// another runs: the executor has one trace buffer and one filter.
var ErrTraceRunning = errors.New("a trace is running (one at a time)")

// PacketTrace is a running packet trace.
type PacketTrace interface {
	// Next waits for the next traced packet until deadline (zero: no
	// deadline), and then fails with an error that wraps
	// os.ErrDeadlineExceeded. It fails once the trace stopped.
	Next(deadline time.Time) (TracePacket, error)
	// Stop ends the trace and returns its counts; stopping it again
	// returns them again.
	Stop() (TraceStats, error)
}

// TraceFilter selects the packets of a packet trace (dlbctl executor
// trace). The executor applies it to every packet while the trace runs;
// every set field must match.
type TraceFilter struct {
	// Cluster, when valid, selects the packets of the cluster's
	// connections: a packet sent to a server (or, a NAT reply, from one)
	// of one of the cluster's ports, and a packet the executor sent to no
	// server whose destination is the cluster address.
	Cluster netip.Addr
	// Port narrows Cluster to one port (0: every port).
	Port uint16
	// Server, when valid, selects the packets sent to (or, NAT replies,
	// from) that server, and packets sent to no server whose source is
	// that address.
	Server netip.Addr
	// Reasons, when not empty, selects the packets counted under these
	// reasons (the executor's reason names, as in the executor report).
	Reasons []string
}

// String names what f selects, in dlbctl executor trace's words
// ("cluster 198.18.0.100 port 80 reasons syn_new,conn_hit"; "every
// packet" when nothing is set).
func (f TraceFilter) String() string {
	var parts []string
	if f.Cluster.IsValid() {
		parts = append(parts, "cluster "+f.Cluster.String())
	}
	if f.Port != 0 {
		parts = append(parts, fmt.Sprintf("port %d", f.Port))
	}
	if f.Server.IsValid() {
		parts = append(parts, "server "+f.Server.String())
	}
	if len(f.Reasons) > 0 {
		parts = append(parts, "reasons "+strings.Join(f.Reasons, ","))
	}
	if len(parts) == 0 {
		return "every packet"
	}
	return strings.Join(parts, " ")
}

// TracePacket is one packet of a trace: what the executor did with it.
type TracePacket struct {
	// Time is when the executor handled it.
	Time time.Time
	// Interface is the index of the interface it arrived on.
	Interface int
	// Reason is the reason it was counted under; Verdict what the
	// executor did: "pass" (to the host stack), "drop", "tx" (sent back
	// out of the interface it came in by) or "redirect" (to another).
	Reason, Verdict string
	// Server is the server it was sent to (or, a NAT reply, came from);
	// invalid when none.
	Server netip.Addr
	// Hit says it followed a connection-table entry (conns or nat_flows,
	// or nat_ports for a NAT reply): an established connection.
	Hit bool
	// Proto is the IP protocol (0: not IPv4 or IPv6); Src and Dst the
	// addresses and ports of the frame as the executor sent it on (ports
	// 0 for other protocols): after a NAT translation, the translated
	// ones.
	Proto    uint8
	Src, Dst netip.AddrPort
	// TCPFlags are the TCP header's flags (FIN 0x01, SYN 0x02, RST 0x04,
	// PSH 0x08, ACK 0x10).
	TCPFlags uint8
	// Length is the frame's length; Data its first bytes (at most 128),
	// as the executor sent it on (forwarded frames after their rewrite).
	Length int
	Data   []byte
}

// TraceStats are a trace's counts.
type TraceStats struct {
	// Packets is how many packets matched and were handed over; Lost how
	// many matched but found the executor's trace buffer full (the
	// packets themselves were handled as usual).
	Packets, Lost uint64
}
