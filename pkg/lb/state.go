package lb

import "fmt"

// ServerState is a server's state as the executor must see it: whether it
// takes new connections, and if not, why. It is the one vocabulary of
// server states: reports, the manager and the executor's flags all derive
// from it.
type ServerState uint8

// Server states, in the order their causes are checked: an operator's
// decision first, then the manager's quiesce, then the advisors, then
// whether the server can be reached at all.
const (
	// ServerUp: the server takes new connections (if its weight is > 0).
	ServerUp ServerState = iota
	// ServerDown: the operator marked it down ("server down"); established
	// connections finish, new ones go elsewhere.
	ServerDown
	// ServerQuiesced: the manager quiesced it ("manager quiesce"); like
	// down, but clients whose affinity record names it may still come.
	ServerQuiesced
	// ServerFailed: an advisor found it down; new connections go elsewhere
	// until the advisor sees it up again.
	ServerFailed
	// ServerUnresolved: the MAC address of its next hop is not known.
	ServerUnresolved
)

var serverStates = [...]string{"up", "down", "quiesced", "failed", "unresolved"}

// String returns "up", "down", "quiesced", "failed" or "unresolved".
func (s ServerState) String() string {
	if int(s) < len(serverStates) {
		return serverStates[s]
	}
	return fmt.Sprintf("serverstate(%d)", uint8(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s ServerState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *ServerState) UnmarshalText(b []byte) error {
	for i, name := range serverStates {
		if name == string(b) {
			*s = ServerState(i)
			return nil
		}
	}
	return fmt.Errorf("unknown server state %q", b)
}

// AdvisorState is an advisor's verdict on one server.
type AdvisorState uint8

// Advisor states.
const (
	// AdvisorUnknown: no probe has answered yet.
	AdvisorUnknown AdvisorState = iota
	// AdvisorUp: the server answered (after Rise good probes in a row, or
	// its first probe).
	AdvisorUp
	// AdvisorDown: the server failed Fall probes in a row (or its first).
	AdvisorDown
)

var advisorStates = [...]string{"unknown", "up", "down"}

// String returns "unknown", "up" or "down".
func (s AdvisorState) String() string {
	if int(s) < len(advisorStates) {
		return advisorStates[s]
	}
	return fmt.Sprintf("advisorstate(%d)", uint8(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s AdvisorState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *AdvisorState) UnmarshalText(b []byte) error {
	for i, name := range advisorStates {
		if name == string(b) {
			*s = AdvisorState(i)
			return nil
		}
	}
	return fmt.Errorf("unknown advisor state %q", b)
}
