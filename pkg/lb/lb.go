package lb

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Defaults for a new port, as in IBM's Dispatcher.
const (
	// DefaultStaleTimeout is how long, in seconds, an idle connection keeps
	// its entry in the connection table.
	DefaultStaleTimeout = 300
	// DefaultFinTimeout is how long, in seconds, a connection that has seen
	// a FIN or RST keeps its entry.
	DefaultFinTimeout = 60
	// DefaultWeightBound is the highest weight a server of a port may have.
	DefaultWeightBound = 20
	// MaxWeightBound is the largest weightbound an operator may set.
	MaxWeightBound = 100
	// MaxTimeout bounds staletimeout, fintimeout and stickytime (one week,
	// in seconds).
	MaxTimeout = 7 * 24 * 3600
	// MaxHalfOpen bounds a port's maxhalfopen.
	MaxHalfOpen = 1 << 30
	// MaxAdvisorText bounds a server's advisorrequest and advisorresponse
	// (bytes): the request goes to the server at every probe, and both
	// into every report and saved configuration. A web server's own limit
	// on a request line is about this (Apache's LimitRequestLine, 8190).
	MaxAdvisorText = 8 << 10
)

// Protocol is the transport protocol a port balances.
type Protocol uint8

// Protocols a port can balance.
const (
	// TCP balances TCP only (the default).
	TCP Protocol = iota + 1
	// UDP balances UDP only.
	UDP
	// Both balances TCP and UDP on the same port number.
	Both
)

// ParseProtocol parses "tcp", "udp" or "both".
func ParseProtocol(s string) (Protocol, error) {
	switch strings.ToLower(s) {
	case "tcp":
		return TCP, nil
	case "udp":
		return UDP, nil
	case "both":
		return Both, nil
	}
	return 0, fmt.Errorf("unknown protocol %q (want tcp, udp or both)", s)
}

// String returns "tcp", "udp" or "both".
func (p Protocol) String() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	case Both:
		return "both"
	}
	return fmt.Sprintf("protocol(%d)", uint8(p))
}

// HasTCP reports whether p balances TCP.
func (p Protocol) HasTCP() bool { return p == TCP || p == Both }

// HasUDP reports whether p balances UDP.
func (p Protocol) HasUDP() bool { return p == UDP || p == Both }

// Method is how the executor forwards a packet to a server.
type Method uint8

// Forwarding methods.
const (
	// MAC rewrites the destination MAC address only; the server holds the
	// cluster address on a loopback alias and replies straight to the client
	// (direct server return).
	MAC Method = iota + 1
	// NAT (NAPT) rewrites the destination to the server (and its mapport)
	// and the source to the server's return address and a port of that
	// address's pool; the server replies to the dispatcher, which
	// translates the reply back. The server needs no cluster address and
	// may sit behind a router.
	NAT
)

// ParseMethod parses a forwarding method name: "mac" or "nat" ("napt").
func ParseMethod(s string) (Method, error) {
	switch strings.ToLower(s) {
	case "mac":
		return MAC, nil
	case "nat", "napt":
		return NAT, nil
	case "cbr", "encap":
		return 0, fmt.Errorf("method %q is not supported (want mac or nat)", s)
	}
	return 0, fmt.Errorf("unknown method %q (want mac or nat)", s)
}

// String returns the method's name.
func (m Method) String() string {
	switch m {
	case MAC:
		return "mac"
	case NAT:
		return "nat"
	}
	return fmt.Sprintf("method(%d)", uint8(m))
}

// Selection is IBM's selectionalgorithm: how a port with a stickytime uses
// affinity records.
type Selection uint8

// Selection algorithms. A record names the server of a client's (or, with
// a stickymask, a client subnet's) latest connection and lives stickytime
// seconds after its last use.
const (
	// SelectAffinity (the default) sends a client's new connection to its
	// record's server while the record lives, even if that server is
	// quiesced (but not when it is down or removed).
	SelectAffinity Selection = iota
	// SelectConnection schedules every connection on its own: no records.
	SelectConnection
	// SelectConnAffin follows a record only while its server takes new
	// connections; otherwise it schedules afresh and replaces the record.
	SelectConnAffin
)

// ParseSelection parses "affinity", "connection" or "conn+affin".
func ParseSelection(s string) (Selection, error) {
	switch strings.ToLower(s) {
	case "", "affinity":
		return SelectAffinity, nil
	case "connection":
		return SelectConnection, nil
	case "conn+affin", "connaffin":
		return SelectConnAffin, nil
	}
	return 0, fmt.Errorf("unknown selection algorithm %q (want connection, affinity or conn+affin)", s)
}

// String returns "affinity", "connection" or "conn+affin".
func (s Selection) String() string {
	switch s {
	case SelectAffinity:
		return "affinity"
	case SelectConnection:
		return "connection"
	case SelectConnAffin:
		return "conn+affin"
	}
	return fmt.Sprintf("selection(%d)", uint8(s))
}

// XDPMode selects how the executor's XDP program is attached.
type XDPMode uint8

// XDP attach modes.
const (
	// XDPAuto tries native (driver) mode and falls back to generic.
	XDPAuto XDPMode = iota
	// XDPNative attaches in the driver; fails if the driver lacks XDP.
	XDPNative
	// XDPGeneric attaches after the kernel built an skb; works everywhere.
	XDPGeneric
)

// ParseXDPMode parses "auto", "native" or "generic".
func ParseXDPMode(s string) (XDPMode, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return XDPAuto, nil
	case "native", "driver", "drv":
		return XDPNative, nil
	case "generic", "skb":
		return XDPGeneric, nil
	}
	return 0, fmt.Errorf("unknown xdp mode %q (want auto, native or generic)", s)
}

// String returns "auto", "native" or "generic".
func (m XDPMode) String() string {
	switch m {
	case XDPAuto:
		return "auto"
	case XDPNative:
		return "native"
	case XDPGeneric:
		return "generic"
	}
	return fmt.Sprintf("xdpmode(%d)", uint8(m))
}

// Config is the whole desired state of a dispatcher: what the operator asked
// for, independent of what the kernel currently holds.
type Config struct {
	// Executor holds the settings of the forwarder itself.
	Executor Executor `json:"executor"`
	// Clusters are the cluster addresses, kept sorted by address.
	Clusters []Cluster `json:"clusters,omitempty"`
	// Manager sets weights from load while it is started.
	Manager Manager `json:"manager"`
	// Advisors are the started advisors, sorted by key.
	Advisors []Advisor `json:"advisors,omitempty"`
	// MetricServer says how to reach each server's load agent.
	MetricServer MetricServer `json:"metric_server"`
	// HA is the high-availability configuration: heartbeats with a peer
	// dispatcher, the role, reach targets.
	HA HighAvailability `json:"ha,omitzero"`
	// BGP configures the speaker that announces cluster addresses to
	// routers (scale-out behind ECMP).
	BGP BGP `json:"bgp,omitzero"`
}

// Executor is the forwarder's own configuration.
type Executor struct {
	// Started says whether the operator started the executor; Interface and
	// XDPMode say where and how.
	Started bool `json:"started"`
	// Interface is the network interface the XDP program is attached to.
	Interface string `json:"interface,omitempty"`
	// XDPMode is how the program is attached.
	XDPMode XDPMode `json:"xdp_mode"`
	// NFA and NFA6 are the IPv4 and IPv6 non-forwarding addresses: traffic
	// to them is never balanced. The zero Addr means none is set.
	NFA  netip.Addr `json:"nfa,omitzero"`
	NFA6 netip.Addr `json:"nfa6,omitzero"`
	// ClientGateway and ClientGateway6 are IBM's clientgateway: the next
	// hop NAT replies to IPv4 and IPv6 clients go to. The zero Addr means
	// the routing table decides.
	ClientGateway  netip.Addr `json:"client_gateway,omitzero"`
	ClientGateway6 netip.Addr `json:"client_gateway6,omitzero"`
	// FinTimeout is how long, in seconds, a closing connection keeps its
	// connection-table entry.
	FinTimeout uint32 `json:"fin_timeout"`
}

// NFAFor is the NFA of addr's family (the zero Addr: none set): the
// source of what the dispatcher itself sends to addr (probes, metric
// polls, server checks).
func (e Executor) NFAFor(addr netip.Addr) netip.Addr {
	if addr.Unmap().Is4() {
		return e.NFA
	}
	return e.NFA6
}

// Cluster is a cluster address (a VIP) and the ports balanced on it.
type Cluster struct {
	// Address is the cluster address.
	Address netip.Addr `json:"address"`
	// Configure says whether dlb puts the address on the executor's
	// interface (IBM's "executor configure"), so that it answers ARP for it.
	Configure bool `json:"configure,omitempty"`
	// Ports are the ports balanced on this cluster, sorted by number.
	Ports []Port `json:"ports,omitempty"`
	// Proportions weigh the manager's inputs for this cluster's servers.
	Proportions Proportions `json:"proportions"`
	// Metrics are the system metrics the manager asks each server's load
	// agent for (IBM's "metric add cluster@metric"), averaged into SYS.
	Metrics []string `json:"metrics,omitempty"`
	// PrimaryHost is the address (a heartbeat source of one of the two
	// dispatchers) of the dispatcher that is the preferred active for
	// this cluster under mutual high availability (role both); the zero
	// Addr when unset.
	PrimaryHost netip.Addr `json:"primary_host,omitzero"`
	// Announce says whether the BGP speaker announces the address (as a
	// /32 or /128) while the cluster can take connections, with
	// Communities (canonical text, see ParseCommunity) and MED (0: none).
	Announce    bool     `json:"announce,omitempty"`
	Communities []string `json:"communities,omitempty"`
	MED         uint32   `json:"med,omitempty"`
}

// Port is one balanced port of a cluster.
type Port struct {
	// Number is the port number, 1..65535.
	Number uint16 `json:"number"`
	// Protocol is the transport protocol balanced.
	Protocol Protocol `json:"protocol"`
	// Method is the forwarding method.
	Method Method `json:"method"`
	// StickyTime is the affinity time in seconds; 0 means no affinity.
	StickyTime uint32 `json:"sticky_time,omitempty"`
	// StickyMask keeps affinity per client subnet of this many leading
	// bits (IPv4 1..32, IPv6 1..128); 0 means the whole address.
	StickyMask uint8 `json:"sticky_mask,omitempty"`
	// CrossPort names another port of the cluster that shares this port's
	// affinity records (IBM's crossport); 0 means none. Ports linked by
	// crossport, directly or through others, form one group.
	CrossPort uint16 `json:"cross_port,omitempty"`
	// Selection is the selection algorithm.
	Selection Selection `json:"selection_algorithm,omitempty"`
	// MaxHalfOpen raises a halfOpenAlert when the port's half-open
	// connections exceed it; 0 means no alert.
	MaxHalfOpen uint32 `json:"max_half_open,omitempty"`
	// StaleTimeout is how long, in seconds, an idle connection keeps its
	// connection-table entry.
	StaleTimeout uint32 `json:"stale_timeout"`
	// WeightBound is the highest weight a server of this port may have.
	WeightBound uint32 `json:"weight_bound"`
	// AllDown is the policy when no server may take new connections.
	AllDown AllDown `json:"all_down"`
	// TableSize fixes the size of the port's Maglev table (a prime in
	// MinTableSize..MaxTableSize); 0 chooses it from the number of servers
	// (TableSizeFor), so that kernel memory follows what is configured.
	TableSize uint32 `json:"table_size,omitempty"`
	// Servers are the servers behind this port, sorted by address.
	Servers []Server `json:"servers,omitempty"`
}

// Server is one backend of a port.
type Server struct {
	// Address is the server's address: on the executor's L2 segment for
	// MAC forwarding; anywhere its Router (or the segment) reaches for NAT.
	Address netip.Addr `json:"address"`
	// Weight is the server's share of new connections, 0..WeightBound.
	// Weight 0 takes no new connections but keeps its established ones.
	Weight uint32 `json:"weight"`
	// Down is the operator's "server down": no new connections until
	// "server up"; established connections finish.
	Down bool `json:"down,omitempty"`
	// Quiesced is the manager's "quiesce": like Down, set and cleared with
	// "manager quiesce" and "unquiesce". A quiesced server still takes the
	// new connections of clients whose affinity record names it, unless
	// QuiesceNow ("manager quiesce --now") also dropped those records.
	Quiesced   bool `json:"quiesced,omitempty"`
	QuiesceNow bool `json:"quiesce_now,omitempty"`
	// FixedWeight keeps Weight whatever the manager computes.
	FixedWeight bool `json:"fixed_weight,omitempty"`
	// AdvisorRequest and AdvisorResponse are what this server's advisors
	// send and expect, overriding the advisor's defaults.
	AdvisorRequest  string `json:"advisor_request,omitempty"`
	AdvisorResponse string `json:"advisor_response,omitempty"`
	// MapPort, ReturnAddress and Router apply to NAT ports only: the
	// server's port (0: the cluster port), the source address NAT gives
	// the server's connections (required; dlbd puts it on the executor's
	// interface), and the next hop to a server on another subnet (the zero
	// Addr: the server is on the executor's segment).
	MapPort       uint16     `json:"map_port,omitempty"`
	ReturnAddress netip.Addr `json:"return_address,omitzero"`
	Router        netip.Addr `json:"router,omitzero"`
}

// NextHop is the address whose MAC frames to the server are sent to: its
// router, or the server itself.
func (s Server) NextHop() netip.Addr {
	if s.Router.IsValid() {
		return s.Router
	}
	return s.Address
}

// NewPort returns a port with IBM's defaults.
func NewPort(number uint16) Port {
	return Port{
		Number:       number,
		Protocol:     TCP,
		Method:       MAC,
		StaleTimeout: DefaultStaleTimeout,
		WeightBound:  DefaultWeightBound,
	}
}

// NewConfig returns an empty configuration with the executor's defaults.
func NewConfig() Config {
	return Config{Executor: Executor{FinTimeout: DefaultFinTimeout}, Manager: NewManager(), MetricServer: NewMetricServer()}
}

// NewCluster returns a cluster with the default proportions.
func NewCluster(addr netip.Addr) Cluster {
	return Cluster{Address: addr, Proportions: DefaultProportions()}
}

// FillDefaults gives settings that an older state file did not have their
// defaults.
func (c *Config) FillDefaults() {
	if c.Manager.Interval == 0 {
		started := c.Manager.Started
		c.Manager = NewManager()
		c.Manager.Started = started
	}
	if c.MetricServer.Source == "" {
		c.MetricServer = NewMetricServer()
	}
	for i := range c.Clusters {
		if c.Clusters[i].Proportions == (Proportions{}) {
			c.Clusters[i].Proportions = DefaultProportions()
		}
	}
}

// Clone returns a deep copy of c (nil slices stay nil), so that a change
// can be prepared without touching the original.
func (c Config) Clone() Config {
	out := c
	out.Advisors = slices.Clone(c.Advisors)
	for i, a := range out.Advisors {
		out.Advisors[i].Args = slices.Clone(a.Args)
	}
	out.HA = c.HA.Clone()
	out.BGP = c.BGP.Clone()
	out.Clusters = slices.Clone(c.Clusters)
	for i, cl := range out.Clusters {
		out.Clusters[i].Metrics = slices.Clone(cl.Metrics)
		out.Clusters[i].Communities = slices.Clone(cl.Communities)
		out.Clusters[i].Ports = slices.Clone(cl.Ports)
		for j, p := range out.Clusters[i].Ports {
			out.Clusters[i].Ports[j].Servers = slices.Clone(p.Servers)
		}
	}
	return out
}

// Cluster returns a pointer to the cluster with the given address, or nil.
// The clusters must be sorted (Sort).
func (c *Config) Cluster(addr netip.Addr) *Cluster {
	i, ok := slices.BinarySearchFunc(c.Clusters, addr, func(x Cluster, a netip.Addr) int { return x.Address.Compare(a) })
	if !ok {
		return nil
	}
	return &c.Clusters[i]
}

// Port returns a pointer to the port with the given number, or nil. The
// ports must be sorted (Config.Sort).
func (cl *Cluster) Port(number uint16) *Port {
	i, ok := slices.BinarySearchFunc(cl.Ports, number, func(x Port, n uint16) int { return int(x.Number) - int(n) })
	if !ok {
		return nil
	}
	return &cl.Ports[i]
}

// Server returns a pointer to the server with the given address, or nil.
// The servers must be sorted (Config.Sort).
func (p *Port) Server(addr netip.Addr) *Server {
	i, ok := slices.BinarySearchFunc(p.Servers, addr, func(x Server, a netip.Addr) int { return x.Address.Compare(a) })
	if !ok {
		return nil
	}
	return &p.Servers[i]
}

// Server returns a pointer to the server k names, or nil when its
// cluster, port or server is not in the configuration. The configuration
// must be sorted (Sort).
func (c *Config) Server(k BackendKey) *Server {
	p := c.Port(k.Service)
	if p == nil {
		return nil
	}
	return p.Server(k.Server)
}

// Port returns a pointer to the port k names, or nil when its cluster or
// port is not in the configuration. The configuration must be sorted
// (Sort).
func (c *Config) Port(k ServiceKey) *Port {
	cl := c.Cluster(k.Cluster)
	if cl == nil {
		return nil
	}
	return cl.Port(k.Port)
}

// ServiceKey identifies a balanced port: a cluster address and a port number.
type ServiceKey struct {
	// Cluster is the cluster address.
	Cluster netip.Addr
	// Port is the port number.
	Port uint16
}

// String formats the key as cluster@port.
func (k ServiceKey) String() string { return string(k.appendTo(make([]byte, 0, 48))) }

// appendTo appends k's text (without fmt: keys are written for every
// server of a large configuration).
func (k ServiceKey) appendTo(b []byte) []byte {
	b = appendAddr(b, k.Cluster)
	b = append(b, '@')
	return strconv.AppendUint(b, uint64(k.Port), 10)
}

// appendAddr appends a's text as its String method writes it.
func appendAddr(b []byte, a netip.Addr) []byte {
	if !a.IsValid() {
		return append(b, a.String()...)
	}
	return a.AppendTo(b)
}

// BackendKey identifies one server of one balanced port.
type BackendKey struct {
	// Service is the balanced port.
	Service ServiceKey
	// Server is the server's address.
	Server netip.Addr
}

// String formats the key as cluster@port@server.
func (k BackendKey) String() string {
	b := k.Service.appendTo(make([]byte, 0, 96))
	b = append(b, '@')
	return string(appendAddr(b, k.Server))
}

// MarshalText implements encoding.TextMarshaler.
func (p Protocol) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (p *Protocol) UnmarshalText(b []byte) error {
	v, err := ParseProtocol(string(b))
	*p = v
	return err
}

// MarshalText implements encoding.TextMarshaler.
func (m Method) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *Method) UnmarshalText(b []byte) error {
	v, err := ParseMethod(string(b))
	*m = v
	return err
}

// MarshalText implements encoding.TextMarshaler.
func (s Selection) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Selection) UnmarshalText(b []byte) error {
	v, err := ParseSelection(string(b))
	*s = v
	return err
}

// MarshalText implements encoding.TextMarshaler.
func (m XDPMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *XDPMode) UnmarshalText(b []byte) error {
	v, err := ParseXDPMode(string(b))
	*m = v
	return err
}

// MarshalText implements encoding.TextMarshaler: cluster@port.
func (k ServiceKey) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *ServiceKey) UnmarshalText(b []byte) error {
	c, p, ok := strings.Cut(string(b), "@")
	if !ok {
		return fmt.Errorf("%q is not cluster@port", b)
	}
	a, err := netip.ParseAddr(c)
	if err != nil {
		return fmt.Errorf("%q is not cluster@port: %w", b, err)
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return fmt.Errorf("%q is not cluster@port: bad port", b)
	}
	*k = ServiceKey{Cluster: a, Port: uint16(n)}
	return nil
}

// MarshalText implements encoding.TextMarshaler: cluster@port@server.
func (k BackendKey) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *BackendKey) UnmarshalText(b []byte) error {
	s := string(b)
	i := strings.LastIndexByte(s, '@')
	if i < 0 {
		return fmt.Errorf("%q is not cluster@port@server", b)
	}
	var sk ServiceKey
	if err := sk.UnmarshalText([]byte(s[:i])); err != nil {
		return fmt.Errorf("%q is not cluster@port@server: %w", b, err)
	}
	a, err := netip.ParseAddr(s[i+1:])
	if err != nil {
		return fmt.Errorf("%q is not cluster@port@server: %w", b, err)
	}
	*k = BackendKey{Service: sk, Server: a}
	return nil
}
