package dispatcher

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/dlbproject/dlb/advisors"
	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/lb"
)

// applyManager applies a manager operation: start, stop, set, quiesce,
// unquiesce.
func applyManager(cfg *lb.Config, op api.Op) error {
	m := &cfg.Manager
	switch op.Action {
	case api.ActionStart, api.ActionStop:
		if err := noParams(op); err != nil {
			return err
		}
		if op.Target != "" {
			return lb.Errorf("target", "", "manager %s takes no target", op.Action)
		}
		m.Started = op.Action == api.ActionStart
	case api.ActionSet:
		if err := noParams(op, "interval", "refresh", "smoothing", "sensitivity"); err != nil {
			return err
		}
		if op.Target != "" {
			return lb.Errorf("target", "", "manager set takes no target")
		}
		if op.Interval == nil && op.Refresh == nil && op.Smoothing == nil && op.Sensitivity == nil {
			return lb.Errorf("interval", "", "manager set needs interval, refresh, smoothing or sensitivity")
		}
		if op.Interval != nil {
			m.Interval = *op.Interval
		}
		if op.Refresh != nil {
			v, err := inRange("refresh", "manager", *op.Refresh, 1, 100)
			if err != nil {
				return err
			}
			m.Refresh = int(v)
		}
		if op.Smoothing != nil {
			m.Smoothing = *op.Smoothing
		}
		if op.Sensitivity != nil {
			m.Sensitivity = *op.Sensitivity
		}
	case api.ActionQuiesce, api.ActionUnquiesce:
		allowed := []string{}
		if op.Action == api.ActionQuiesce {
			allowed = append(allowed, "now")
		}
		if err := noParams(op, allowed...); err != nil {
			return err
		}
		servers, err := quiesceTargets(cfg, op.Target)
		if err != nil {
			return err
		}
		now := op.Now != nil && *op.Now
		for _, ms := range servers {
			ms.server.Quiesced = op.Action == api.ActionQuiesce
			// "quiesce --now" sticks until unquiesce; a later plain
			// quiesce does not bring affinity back.
			ms.server.QuiesceNow = ms.server.Quiesced && (now || ms.server.QuiesceNow)
		}
	default:
		return badAction(op)
	}
	return nil
}

// quiesceTargets resolves the target of quiesce/unquiesce: IBM quiesces a
// server everywhere by its address, and dlb also takes cluster@port@server.
func quiesceTargets(cfg *lb.Config, target string) ([]matchedServer, error) {
	if target == "" {
		return nil, lb.Errorf("server", "", "quiesce needs a server (ADDR or cluster@port@server)")
	}
	if !strings.Contains(target, "@") {
		a, err := netip.ParseAddr(target)
		if err != nil {
			return nil, lb.Errorf("server", "", "%q is not an IP address", target)
		}
		target = "@@" + a.String()
	}
	t, err := lb.ParseTarget(target, lb.ServerDepth)
	if err != nil {
		return nil, err
	}
	return matchServers(cfg, t, target)
}

// applyAdvisor applies an advisor operation: start, stop, set. The target
// is cluster@port, with the cluster empty for every cluster.
func applyAdvisor(cfg *lb.Config, op api.Op) error {
	if op.Advisor == nil || *op.Advisor == "" {
		return lb.Errorf("advisor", "", "advisor %s needs the advisor's name", op.Action)
	}
	name := *op.Advisor
	t, err := lb.ParseTarget(op.Target, lb.PortDepth)
	if err != nil {
		return err
	}
	if len(t.Ports) != 1 || len(t.Clusters) > 1 {
		return lb.Errorf("port", op.Target, "an advisor takes one port: PORT or cluster@PORT")
	}
	var cluster netip.Addr
	if len(t.Clusters) == 1 {
		cluster = t.Clusters[0]
	}
	key := lb.NewAdvisor(name, cluster, t.Ports[0]).Key()
	idx := slices.IndexFunc(cfg.Advisors, func(a lb.Advisor) bool { return a.Key() == key })
	const params = "interval connecttimeout receivetimeout retries rise fall program args mode"

	switch op.Action {
	case api.ActionStart:
		if err := noParams(op, strings.Fields(params)...); err != nil {
			return err
		}
		if name != "exec" {
			if _, err := advisors.New(name); err != nil {
				return lb.Errorf("advisor", "", "%v", err)
			}
		}
		if idx >= 0 {
			return lb.Errorf("advisor", key, "already started")
		}
		// The advisor needs a port to probe.
		found := false
		for _, cl := range cfg.Clusters {
			if (!cluster.IsValid() || cl.Address == cluster) && cl.Port(t.Ports[0]) != nil {
				found = true
			}
		}
		if !found {
			return lb.Errorf("port", op.Target, "no configured cluster balances port %d", t.Ports[0])
		}
		a := lb.NewAdvisor(name, cluster, t.Ports[0])
		if name == "exec" {
			a.Mode = "normal"
		}
		if err := setAdvisorParams(&a, op); err != nil {
			return err
		}
		cfg.Advisors = append(cfg.Advisors, a)
		// IBM: starting an advisor raises a zero port proportion to 1.
		for i := range cfg.Clusters {
			if a.Covers(cfg.Clusters[i].Address, a.Port) && cfg.Clusters[i].Port(a.Port) != nil {
				cfg.Clusters[i].Proportions.RaisePort()
			}
		}
	case api.ActionSet:
		if err := noParams(op, strings.Fields(params)...); err != nil {
			return err
		}
		if idx < 0 {
			return lb.Errorf("advisor", key, "is not started")
		}
		return setAdvisorParams(&cfg.Advisors[idx], op)
	case api.ActionStop:
		if err := noParams(op); err != nil {
			return err
		}
		if idx < 0 {
			return lb.Errorf("advisor", key, "is not started")
		}
		cfg.Advisors = slices.Delete(cfg.Advisors, idx, idx+1)
	default:
		return badAction(op)
	}
	return nil
}

func setAdvisorParams(a *lb.Advisor, op api.Op) error {
	obj := a.Key()
	if op.Interval != nil {
		a.Interval = *op.Interval
	}
	if op.ConnectTimeout != nil {
		a.ConnectTimeout = *op.ConnectTimeout
	}
	if op.ReceiveTimeout != nil {
		a.ReceiveTimeout = *op.ReceiveTimeout
	}
	for _, p := range []struct {
		name string
		v    *int64
		dst  *int
		lo   int64
	}{{"retries", op.Retries, &a.Retries, 0}, {"rise", op.Rise, &a.Rise, 1}, {"fall", op.Fall, &a.Fall, 1}} {
		if p.v == nil {
			continue
		}
		v, err := inRange(p.name, obj, *p.v, p.lo, 100)
		if err != nil {
			return err
		}
		*p.dst = int(v)
	}
	if op.Program != nil {
		a.Program = *op.Program
	}
	if op.Args != nil {
		a.Args = append([]string(nil), op.Args...)
	}
	if op.Mode != nil {
		a.Mode = *op.Mode
	}
	return nil
}

// applyMetric applies a metric operation: add and remove take a cluster
// (or several, or "" for all) and metric names; set changes how the load
// agents are reached.
func applyMetric(cfg *lb.Config, op api.Op) error {
	switch op.Action {
	case api.ActionAdd, api.ActionRemove:
		if err := noParams(op, "metrics"); err != nil {
			return err
		}
		if len(op.Metrics) == 0 {
			return lb.Errorf("metric", "", "metric %s needs metric names (cluster@metric+metric)", op.Action)
		}
		t, err := lb.ParseTarget(op.Target, lb.ClusterDepth)
		if err != nil {
			return err
		}
		cls, err := matchClusters(cfg, t, op.Target)
		if err != nil {
			return err
		}
		for _, cl := range cls {
			for _, m := range op.Metrics {
				has := slices.Contains(cl.Metrics, m)
				switch {
				case op.Action == api.ActionAdd && has:
					return lb.Errorf("metric", cl.Address.String(), "%q is already added", m)
				case op.Action == api.ActionAdd:
					cl.Metrics = append(cl.Metrics, m)
					// IBM: adding a metric raises a zero system proportion to 1.
					cl.Proportions.RaiseSystem()
				case !has:
					return lb.Errorf("metric", cl.Address.String(), "%q is not added", m)
				default:
					cl.Metrics = slices.DeleteFunc(cl.Metrics, func(x string) bool { return x == m })
				}
			}
		}
	case api.ActionSet:
		if err := noParams(op, "source", "metricport", "secretfile", "path"); err != nil {
			return err
		}
		if op.Target != "" {
			return lb.Errorf("target", "", "metric set takes no target")
		}
		ms := &cfg.MetricServer
		if op.Source != nil {
			if *op.Source != ms.Source {
				switch *op.Source {
				case "prometheus":
					ms.Port, ms.Path = lb.DefaultPrometheusPort, "/metrics"
				case "dlbmetricd":
					ms.Port, ms.Path = lb.DefaultMetricPort, ""
				}
			}
			ms.Source = *op.Source
		}
		if op.MetricPort != nil {
			v, err := inRange("port", "metric", *op.MetricPort, 1, 65535)
			if err != nil {
				return err
			}
			ms.Port = uint16(v)
		}
		if op.SecretFile != nil {
			ms.SecretFile = *op.SecretFile
		}
		if op.Path != nil {
			ms.Path = *op.Path
		}
	default:
		return badAction(op)
	}
	return nil
}

// proportionsParam parses a cluster's --proportions.
func proportionsParam(obj string, v []int64) (lb.Proportions, error) {
	if len(v) != 4 {
		return lb.Proportions{}, lb.Errorf("proportions", obj, "want 4 values (active new port system), got %d", len(v))
	}
	for _, x := range v {
		if x < 0 || x > 100 {
			return lb.Proportions{}, lb.Errorf("proportions", obj, "%d is outside 0..100", x)
		}
	}
	p := lb.Proportions{Active: int(v[0]), New: int(v[1]), Port: int(v[2]), System: int(v[3])}
	return p, p.Check(obj)
}
