package config

import (
	"net/netip"

	"github.com/dlbproject/dlb/pkg/lb"
)

// The defaults that depend on other settings live here, once: the
// operations (ops.go), the saved script (script.go) and the configuration
// file (file.go) all take them from these functions. Plain defaults come
// from package lb's constructors.

// newAdvisor returns the advisor "advisor start" makes before its flags
// are applied: package lb's defaults, and mode "normal" for the exec
// advisor.
func newAdvisor(name string, cluster netip.Addr, port uint16) lb.Advisor {
	a := lb.NewAdvisor(name, cluster, port)
	if name == "exec" {
		a.Mode = "normal"
	}
	return a
}

// newServer returns the server "server add" makes on port p before its
// flags are applied: its weight is the port's weightbound.
func newServer(p *lb.Port, addr netip.Addr) lb.Server {
	return lb.Server{Address: addr, Weight: p.WeightBound}
}

// metricDefaults returns the metric server settings a source starts with
// (its port and path), and whether the source is known.
func metricDefaults(source string) (lb.MetricServer, bool) {
	switch source {
	case "dlbmetricd":
		return lb.NewMetricServer(), true
	case "prometheus":
		return lb.MetricServer{Source: source, Port: lb.DefaultPrometheusPort, Path: "/metrics"}, true
	}
	return lb.MetricServer{Source: source}, false
}

// impliedProportions returns the proportions a cluster gets when none are
// given for it: the defaults, raised as starting its advisors and adding
// its metrics raise them (a zero port proportion becomes 1 when an
// advisor probes one of its ports, a zero system proportion 1 when it
// has metrics).
func impliedProportions(cl *lb.Cluster, advisors []lb.Advisor) lb.Proportions {
	p := lb.DefaultProportions()
	probed := false
	for _, a := range advisors {
		if cl.Port(a.Port) != nil && a.Covers(cl.Address, a.Port) {
			probed = true
			break
		}
	}
	if probed {
		p.RaisePort()
	}
	if len(cl.Metrics) > 0 {
		p.RaiseSystem()
	}
	return p
}
