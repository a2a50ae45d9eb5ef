package api

// PathTrace streams a packet trace (dlbctl executor trace): GET with the
// query parameters cluster (an address), port, server (an address),
// reason (repeated, or comma-separated), count (stop after this many
// packets; 0: no limit) and duration (a Go duration; 0: until the client
// goes away). The answer is a stream of JSON lines, each a TraceLine:
// one per traced packet, then one with End. A refused trace is answered
// as other requests are: an Error, with status 400 (bad filter), 409 (a
// trace is running) or 503 (the executor is not running).
const PathTrace = "/v1/executor/trace"

// TraceLine is one line of a trace's stream: a packet, or the end.
type TraceLine struct {
	Packet *TracePacket `json:"packet,omitempty"`
	End    *TraceEnd    `json:"end,omitempty"`
}

// TracePacket is a traced packet: what the executor did with it.
type TracePacket struct {
	// Time is when the executor handled it (RFC 3339, nanoseconds).
	Time string `json:"time"`
	// Interface is the index of the interface it came in by.
	Interface int `json:"interface"`
	// Verdict is pass, drop, tx or redirect; Reason the executor reason
	// it was counted under.
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
	// Server is the server it was sent to (a NAT reply: came from); empty
	// when none.
	Server string `json:"server,omitempty"`
	// Hit says it followed a connection-table entry.
	Hit bool `json:"hit"`
	// Proto is tcp, udp, icmp, icmpv6, another protocol's number, or
	// empty (not IP). Src and Dst are the frame's addresses and ports as
	// the executor sent it on (after a NAT translation, the translated
	// ones).
	Proto string `json:"proto,omitempty"`
	Src   string `json:"src,omitempty"`
	Dst   string `json:"dst,omitempty"`
	// TCPFlags are the TCP flags as letters (F S R P A U E C).
	TCPFlags string `json:"tcp_flags,omitempty"`
	// Length is the frame's length; Data its first bytes (base64), as
	// the executor sent it on.
	Length int    `json:"length"`
	Data   []byte `json:"data"`
}

// TraceEnd closes a trace's stream.
type TraceEnd struct {
	// Packets the executor handed over and Lost the matching ones its
	// trace buffer had no room for.
	Packets uint64 `json:"packets"`
	Lost    uint64 `json:"lost"`
	// Error says why the trace ended early (the executor stopped), if it
	// did.
	Error string `json:"error,omitempty"`
}
