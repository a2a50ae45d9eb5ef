package api

// PathBGP reports the BGP speaker: its sessions and each cluster's
// announcement (GET).
const PathBGP = "/v1/bgp"

// BGPReport describes the BGP speaker.
type BGPReport struct {
	// Configured says whether BGP is configured (bgp set); Running whether
	// the speaker runs; Error why it does not, or its last error.
	Configured bool   `json:"configured"`
	Running    bool   `json:"running"`
	Error      string `json:"error,omitempty"`
	ASN        uint32 `json:"asn,omitempty"`
	RouterID   string `json:"router_id,omitempty"`
	// ListenPort is the port sessions are accepted on (0: none, the
	// speaker only connects).
	ListenPort uint16              `json:"listen_port"`
	Neighbors  []BGPNeighborReport `json:"neighbors"`
	Clusters   []BGPClusterReport  `json:"clusters"`
}

// BGPNeighborReport describes a session with a router.
type BGPNeighborReport struct {
	Address      string `json:"address"`
	Port         uint16 `json:"port"`
	RemoteAS     uint32 `json:"remote_as"`
	HoldTime     uint32 `json:"hold_time"`
	Multihop     uint8  `json:"multihop,omitempty"`
	PasswordFile string `json:"password_file,omitempty"`
	// State is the session's state (idle, connect, active, opensent,
	// openconfirm, established); Since when it was established and
	// UptimeSeconds for how long.
	State         string  `json:"state"`
	Since         string  `json:"since,omitempty"`
	UptimeSeconds float64 `json:"uptime_seconds,omitempty"`
	// NegotiatedHoldTime is the hold time in force (established only).
	NegotiatedHoldTime uint32 `json:"negotiated_hold_time,omitempty"`
	// PrefixesSent and PrefixesReceived count the prefixes advertised to
	// and received from the router (dlbd keeps none of those).
	PrefixesSent     uint64 `json:"prefixes_sent"`
	PrefixesReceived uint64 `json:"prefixes_received"`
	// LastError is why the session last went down.
	LastError string `json:"last_error,omitempty"`
	// BFD says whether BFD runs beside the session, BFDState its state.
	BFD      bool   `json:"bfd,omitempty"`
	BFDState string `json:"bfd_state,omitempty"`
}

// BGPClusterReport says whether a cluster address is announced, and if
// not, why.
type BGPClusterReport struct {
	Address     string   `json:"address"`
	Announce    bool     `json:"announce"`
	Announced   bool     `json:"announced"`
	Reason      string   `json:"reason,omitempty"`
	Prefix      string   `json:"prefix"`
	Communities []string `json:"communities,omitempty"`
	// MED is the cluster's; a high-availability standby announces it
	// with AnnouncedMED (Standby true), higher, so that routers prefer
	// the active.
	MED          uint32 `json:"med,omitempty"`
	Standby      bool   `json:"standby,omitempty"`
	AnnouncedMED uint32 `json:"announced_med,omitempty"`
}
