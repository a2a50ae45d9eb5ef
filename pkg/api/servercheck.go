package api

// PathServerCheck checks a backend server from the dispatcher (GET,
// ?target=VIP@PORT@SERVER, optional &client=ADDR): "dlbctl server check".
const PathServerCheck = "/v1/servercheck"

// Server check results.
const (
	CheckPass = "pass"
	CheckFail = "fail"
	CheckSkip = "skip"
)

// ServerCheckReport is the outcome of a server check.
type ServerCheckReport struct {
	// Target is the checked VIP@PORT@SERVER; Client the client address
	// probed from, if one was given.
	Target string `json:"target"`
	Client string `json:"client,omitempty"`
	// Interface and Source are where the probes left from (the
	// executor's interface and the dispatcher's NFA).
	Interface string `json:"interface"`
	Source    string `json:"source"`
	// ServerMAC is the MAC address the server answered ARP with.
	ServerMAC string `json:"server_mac,omitempty"`
	// OK says that no check failed.
	OK     bool          `json:"ok"`
	Checks []ServerCheck `json:"checks"`
}

// ServerCheck is one check of a server.
type ServerCheck struct {
	// Name is the check: arp-server, arp-cluster, accept, reply-source,
	// mtu or rp-filter.
	Name string `json:"name"`
	// Result is pass, fail or skip.
	Result string `json:"result"`
	// Detail says what was seen; Fix, for a failure, what to do.
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}
