package lb

import (
	"fmt"
	"net/netip"
	"strings"
)

// Manager defaults, as in IBM's Dispatcher.
const (
	// DefaultInterval is the manager's cycle, in seconds.
	DefaultInterval = 2.0
	// DefaultRefresh is how many cycles pass between reads of the
	// executor's counters.
	DefaultRefresh = 2
	// DefaultSmoothing damps each weight change (1 = none).
	DefaultSmoothing = 1.5
	// DefaultSensitivity is the percentage of a port's total weight that
	// must change before new weights are pushed.
	DefaultSensitivity = 5.0
	// DefaultAdvisorInterval is an advisor's probe interval, in seconds.
	DefaultAdvisorInterval = 5.0
	// DefaultAdvisorTimeout is an advisor's connect and receive timeout,
	// in seconds.
	DefaultAdvisorTimeout = 2.0
	// DefaultRise and DefaultFall are how many probes in a row bring a
	// server up or down.
	DefaultRise = 2
	DefaultFall = 3
	// DefaultMetricPort is where dlbmetricd listens (IBM's 10004).
	DefaultMetricPort = 10004
	// DefaultPrometheusPort is where node_exporter listens.
	DefaultPrometheusPort = 9100
)

// Proportions weigh the manager's four inputs — active connections, new
// connections, advisor load and system (metric) load — in percent; they
// sum to 100 (IBM's cluster proportions).
type Proportions struct {
	Active int `json:"active"`
	New    int `json:"new"`
	Port   int `json:"port"`
	System int `json:"system"`
}

// DefaultProportions are IBM's 50 50 0 0.
func DefaultProportions() Proportions { return Proportions{Active: 50, New: 50} }

// String formats them as "A N P S".
func (p Proportions) String() string {
	return fmt.Sprintf("%d %d %d %d", p.Active, p.New, p.Port, p.System)
}

// Check refuses proportions that are negative or do not sum to 100.
func (p Proportions) Check(object string) error {
	for _, v := range []int{p.Active, p.New, p.Port, p.System} {
		if v < 0 || v > 100 {
			return Errorf("proportions", object, "%s: each must be 0..100", p)
		}
	}
	if s := p.Active + p.New + p.Port + p.System; s != 100 {
		return Errorf("proportions", object, "%s: they sum to %d, not 100", p, s)
	}
	return nil
}

// raise makes *field at least 1 when it is 0, taking the point from the
// largest of the connection proportions, so that the sum stays 100 (IBM:
// starting an advisor raises a zero port proportion to 1; adding a metric
// does the same for system).
func (p *Proportions) raise(field *int) {
	if *field != 0 {
		return
	}
	var from *int
	for _, f := range []*int{&p.Active, &p.New, &p.Port, &p.System} {
		if f != field && *f > 0 && (from == nil || *f > *from) {
			from = f
		}
	}
	if from != nil {
		*from--
		*field = 1
	}
}

// RaisePort raises a zero port proportion to 1 (an advisor was started).
func (p *Proportions) RaisePort() { p.raise(&p.Port) }

// RaiseSystem raises a zero system proportion to 1 (a metric was added).
func (p *Proportions) RaiseSystem() { p.raise(&p.System) }

// Manager is the manager's configuration.
type Manager struct {
	// Started says whether the manager runs: it sets weights from load.
	// While it is stopped, servers keep their configured weights.
	Started bool `json:"started"`
	// Interval is the manager's cycle in seconds.
	Interval float64 `json:"interval"`
	// Refresh is how many cycles pass between reads of the executor's
	// counters.
	Refresh int `json:"refresh"`
	// Smoothing damps each weight change: a weight moves 1/Smoothing of
	// the way to its target each cycle.
	Smoothing float64 `json:"smoothing"`
	// Sensitivity is the percentage of a port's total weight that must
	// change before new weights are pushed.
	Sensitivity float64 `json:"sensitivity"`
}

// NewManager returns the manager with IBM's defaults, stopped.
func NewManager() Manager {
	return Manager{Interval: DefaultInterval, Refresh: DefaultRefresh, Smoothing: DefaultSmoothing, Sensitivity: DefaultSensitivity}
}

// AllDown is a port's policy for when none of its servers may take new
// connections (all down, quiesced or failed by their advisor).
// Established connections keep flowing under either policy.
type AllDown uint8

// All-down policies.
const (
	// AllDownRefuse drops new connections until a server is back (the
	// default): clients fail fast instead of waiting on dead servers.
	AllDownRefuse AllDown = iota
	// AllDownSpread ignores the advisors and spreads new connections over
	// every server that is not operator-down or quiesced, at equal weight
	// (IBM's behaviour: all servers get weightbound/2).
	AllDownSpread
)

// ParseAllDown parses "refuse" or "spread".
func ParseAllDown(s string) (AllDown, error) {
	switch strings.ToLower(s) {
	case "refuse":
		return AllDownRefuse, nil
	case "spread":
		return AllDownSpread, nil
	}
	return 0, fmt.Errorf("unknown all-down policy %q (want refuse or spread)", s)
}

// String returns "refuse" or "spread".
func (a AllDown) String() string {
	if a == AllDownSpread {
		return "spread"
	}
	return "refuse"
}

// MarshalText implements encoding.TextMarshaler.
func (a AllDown) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *AllDown) UnmarshalText(b []byte) error {
	v, err := ParseAllDown(string(b))
	*a = v
	return err
}

// Advisor is a started advisor: a protocol probe of every server of a
// port (of one cluster, or of every cluster balancing that port).
type Advisor struct {
	// Name is the protocol ("http", "connect", "exec", ...).
	Name string `json:"name"`
	// Cluster restricts the advisor to one cluster; the zero Addr means
	// every cluster balancing Port.
	Cluster netip.Addr `json:"cluster,omitzero"`
	// Port is the balanced port whose servers are probed.
	Port uint16 `json:"port"`
	// Interval between probes of a server, in seconds (jittered).
	Interval float64 `json:"interval"`
	// ConnectTimeout and ReceiveTimeout bound a probe, in seconds.
	ConnectTimeout float64 `json:"connect_timeout"`
	ReceiveTimeout float64 `json:"receive_timeout"`
	// Retries is how many times a failed probe is retried at once before
	// it counts as a failure.
	Retries int `json:"retries"`
	// Rise and Fall are how many results in a row bring a server up or
	// down.
	Rise int `json:"rise"`
	Fall int `json:"fall"`
	// Program, Args and Mode configure the exec advisor: the program to
	// run, and "normal" (exit status says up or down; the framework times
	// it) or "replace" (the program prints the load).
	Program string   `json:"program,omitempty"`
	Args    []string `json:"args,omitempty"`
	Mode    string   `json:"mode,omitempty"`
}

// NewAdvisor returns an advisor with the default settings.
func NewAdvisor(name string, cluster netip.Addr, port uint16) Advisor {
	return Advisor{
		Name: name, Cluster: cluster, Port: port, Interval: DefaultAdvisorInterval,
		ConnectTimeout: DefaultAdvisorTimeout, ReceiveTimeout: DefaultAdvisorTimeout,
		Rise: DefaultRise, Fall: DefaultFall,
	}
}

// Key names the advisor: name@cluster@port (cluster empty for all).
func (a Advisor) Key() string {
	c := ""
	if a.Cluster.IsValid() {
		c = a.Cluster.String()
	}
	return fmt.Sprintf("%s@%s@%d", a.Name, c, a.Port)
}

// Covers reports whether the advisor probes the given cluster's port.
func (a Advisor) Covers(cluster netip.Addr, port uint16) bool {
	return a.Port == port && (!a.Cluster.IsValid() || a.Cluster == cluster)
}

// MetricServer configures how the manager reaches each server's load
// agent.
type MetricServer struct {
	// Source is "dlbmetricd" (dlb's agent, authenticated) or "prometheus"
	// (an existing node_exporter or other Prometheus endpoint).
	Source string `json:"source"`
	// Port is the agent's port on each server (10004 for dlbmetricd, 9100
	// for node_exporter).
	Port uint16 `json:"port"`
	// SecretFile holds the secret shared with dlbmetricd.
	SecretFile string `json:"secret_file,omitempty"`
	// Path is the Prometheus endpoint's path ("/metrics").
	Path string `json:"path,omitempty"`
}

// NewMetricServer returns the default: dlbmetricd on port 10004.
func NewMetricServer() MetricServer {
	return MetricServer{Source: "dlbmetricd", Port: DefaultMetricPort}
}
