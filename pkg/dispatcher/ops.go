package dispatcher

import (
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/lb"
)

// OpError is a refused operation: which one in the batch, and why.
type OpError struct {
	// Index is the position of the operation in its batch.
	Index int
	// Err says why; it is (or wraps) an *lb.FieldError when a field is to
	// blame.
	Err error
}

// Error formats the refusal.
func (e *OpError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// applyOp applies one operation to cfg (a private copy).
func applyOp(cfg *lb.Config, op api.Op) error {
	switch op.Object {
	case api.ObjectExecutor:
		return applyExecutor(cfg, op)
	case api.ObjectCluster:
		return applyCluster(cfg, op)
	case api.ObjectPort:
		return applyPort(cfg, op)
	case api.ObjectServer:
		return applyServer(cfg, op)
	case api.ObjectManager:
		return applyManager(cfg, op)
	case api.ObjectAdvisor:
		return applyAdvisor(cfg, op)
	case api.ObjectMetric:
		return applyMetric(cfg, op)
	}
	return lb.Errorf("object", "", "unknown object %q (want executor, cluster, port, server, manager, advisor or metric)", op.Object)
}

func badAction(op api.Op) error {
	return lb.Errorf("action", "", "%s does not take %q", op.Object, op.Action)
}

// noParams refuses parameters that do not belong to the operation.
func noParams(op api.Op, allowed ...string) error {
	given := map[string]bool{
		"interface": op.Interface != nil, "xdp-mode": op.XDPMode != nil, "nfa": op.NFA != nil,
		"fintimeout": op.FinTimeout != nil, "configure": op.Configure != nil, "protocol": op.Protocol != nil,
		"method": op.Method != nil, "stickytime": op.StickyTime != nil, "staletimeout": op.StaleTimeout != nil,
		"weightbound": op.WeightBound != nil, "weight": op.Weight != nil,
		"proportions": op.Proportions != nil, "alldown": op.AllDown != nil, "fixedweight": op.FixedWeight != nil,
		"advisorrequest": op.AdvisorRequest != nil, "advisorresponse": op.AdvisorResponse != nil,
		"interval": op.Interval != nil, "refresh": op.Refresh != nil, "smoothing": op.Smoothing != nil,
		"sensitivity": op.Sensitivity != nil, "now": op.Now != nil,
		"advisor":        op.Advisor != nil && op.Object != api.ObjectAdvisor,
		"connecttimeout": op.ConnectTimeout != nil, "receivetimeout": op.ReceiveTimeout != nil,
		"retries": op.Retries != nil, "rise": op.Rise != nil, "fall": op.Fall != nil,
		"program": op.Program != nil, "args": op.Args != nil, "mode": op.Mode != nil,
		"metrics": op.Metrics != nil, "source": op.Source != nil, "metricport": op.MetricPort != nil,
		"secretfile": op.SecretFile != nil, "path": op.Path != nil,
		"clientgateway": op.ClientGateway != nil, "stickymask": op.StickyMask != nil,
		"crossport": op.CrossPort != nil, "selectionalgorithm": op.SelectionAlgorithm != nil,
		"maxhalfopen": op.MaxHalfOpen != nil, "mapport": op.MapPort != nil,
		"returnaddress": op.ReturnAddress != nil, "router": op.Router != nil,
	}
	for _, name := range sortedKeys(given) {
		if given[name] && !slices.Contains(allowed, name) {
			return lb.Errorf(name, "", "%s %s does not take --%s", op.Object, op.Action, name)
		}
	}
	return nil
}

func applyExecutor(cfg *lb.Config, op api.Op) error {
	if op.Target != "" {
		return lb.Errorf("target", "", "executor takes no target (got %q)", op.Target)
	}
	ex := &cfg.Executor
	switch op.Action {
	case api.ActionStart:
		if err := noParams(op, "interface", "xdp-mode"); err != nil {
			return err
		}
		ifname := ex.Interface
		if op.Interface != nil {
			ifname = *op.Interface
		}
		if ifname == "" {
			return lb.Errorf("interface", "", "executor start needs --interface")
		}
		mode := ex.XDPMode
		if op.XDPMode != nil {
			m, err := lb.ParseXDPMode(*op.XDPMode)
			if err != nil {
				return lb.Errorf("xdp-mode", "", "%v", err)
			}
			mode = m
		}
		if ex.Started && (ifname != ex.Interface || mode != ex.XDPMode) {
			return lb.Errorf("interface", "", "the executor is already started on %s (%s mode); stop it first", ex.Interface, ex.XDPMode)
		}
		ex.Started, ex.Interface, ex.XDPMode = true, ifname, mode
	case api.ActionStop:
		if err := noParams(op); err != nil {
			return err
		}
		ex.Started = false
	case api.ActionSet:
		if err := noParams(op, "nfa", "fintimeout", "clientgateway"); err != nil {
			return err
		}
		if op.NFA == nil && op.FinTimeout == nil && op.ClientGateway == nil {
			return lb.Errorf("nfa", "", "executor set needs nfa, clientgateway or fintimeout")
		}
		if op.NFA != nil {
			if err := setByFamily("nfa", *op.NFA, &ex.NFA, &ex.NFA6); err != nil {
				return err
			}
		}
		if op.ClientGateway != nil {
			if err := setByFamily("clientgateway", *op.ClientGateway, &ex.ClientGateway, &ex.ClientGateway6); err != nil {
				return err
			}
		}
		if op.FinTimeout != nil {
			v, err := inRange("fintimeout", "", *op.FinTimeout, 1, lb.MaxTimeout)
			if err != nil {
				return err
			}
			ex.FinTimeout = v
		}
	default:
		return badAction(op)
	}
	return nil
}

// setByFamily sets *v4 or *v6 to the address s, by its family; "none" (or
// "") clears both.
func setByFamily(field, s string, v4, v6 *netip.Addr) error {
	if s == "" || s == "none" {
		*v4, *v6 = netip.Addr{}, netip.Addr{}
		return nil
	}
	a, err := parseAddr(field, "", s)
	if err != nil {
		return err
	}
	if a.Is4() {
		*v4 = a
	} else {
		*v6 = a
	}
	return nil
}

// parseAddr parses an address parameter; "none" is the zero Addr.
func parseAddr(field, obj, s string) (netip.Addr, error) {
	if s == "" || s == "none" {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, lb.Errorf(field, obj, "%q is not an IP address", s)
	}
	return a.Unmap(), nil
}

func applyCluster(cfg *lb.Config, op api.Op) error {
	t, err := lb.ParseTarget(op.Target, lb.ClusterDepth)
	if err != nil {
		return err
	}
	switch op.Action {
	case api.ActionAdd:
		if err := noParams(op, "configure", "proportions"); err != nil {
			return err
		}
		if t.Clusters == nil {
			return lb.Errorf("cluster", "", "cluster add needs a cluster address")
		}
		for _, a := range t.Clusters {
			if cfg.Cluster(a) != nil {
				return lb.Errorf("cluster", a.String(), "already exists")
			}
			cl := lb.NewCluster(a)
			cl.Configure = op.Configure != nil && *op.Configure
			if op.Proportions != nil {
				p, err := proportionsParam(a.String(), op.Proportions)
				if err != nil {
					return err
				}
				cl.Proportions = p
			}
			cfg.Clusters = append(cfg.Clusters, cl)
		}
	case api.ActionSet:
		if err := noParams(op, "configure", "proportions"); err != nil {
			return err
		}
		cls, err := matchClusters(cfg, t, op.Target)
		if err != nil {
			return err
		}
		if op.Configure == nil && op.Proportions == nil {
			return lb.Errorf("configure", "", "cluster set needs --configure or --proportions")
		}
		for _, cl := range cls {
			if op.Configure != nil {
				cl.Configure = *op.Configure
			}
			if op.Proportions != nil {
				p, err := proportionsParam(cl.Address.String(), op.Proportions)
				if err != nil {
					return err
				}
				cl.Proportions = p
			}
		}
	case api.ActionRemove:
		if err := noParams(op); err != nil {
			return err
		}
		if _, err := matchClusters(cfg, t, op.Target); err != nil {
			return err
		}
		cfg.Clusters = slices.DeleteFunc(cfg.Clusters, func(c lb.Cluster) bool { return t.MatchCluster(c.Address) })
	default:
		return badAction(op)
	}
	return nil
}

func applyPort(cfg *lb.Config, op api.Op) error {
	t, err := lb.ParseTarget(op.Target, lb.PortDepth)
	if err != nil {
		return err
	}
	const portParams = "protocol method stickytime stickymask crossport selectionalgorithm maxhalfopen staletimeout weightbound alldown"
	switch op.Action {
	case api.ActionAdd:
		if err := noParams(op, strings.Fields(portParams)...); err != nil {
			return err
		}
		if t.Ports == nil {
			return lb.Errorf("port", "", "port add needs a port number (cluster@port)")
		}
		cls, err := matchClusters(cfg, t, op.Target)
		if err != nil {
			return err
		}
		for _, cl := range cls {
			for _, n := range t.Ports {
				obj := lb.ServiceKey{Cluster: cl.Address, Port: n}.String()
				if cl.Port(n) != nil {
					return lb.Errorf("port", obj, "already exists")
				}
				p := lb.NewPort(n)
				if err := setPortParams(&p, op, obj); err != nil {
					return err
				}
				cl.Ports = append(cl.Ports, p)
			}
		}
	case api.ActionSet:
		if err := noParams(op, strings.Fields(portParams)...); err != nil {
			return err
		}
		ports, err := matchPorts(cfg, t, op.Target)
		if err != nil {
			return err
		}
		for _, mp := range ports {
			if err := setPortParams(mp.port, op, mp.key.String()); err != nil {
				return err
			}
		}
	case api.ActionRemove:
		if err := noParams(op); err != nil {
			return err
		}
		if _, err := matchPorts(cfg, t, op.Target); err != nil {
			return err
		}
		for i := range cfg.Clusters {
			cl := &cfg.Clusters[i]
			if t.MatchCluster(cl.Address) {
				cl.Ports = slices.DeleteFunc(cl.Ports, func(p lb.Port) bool { return t.MatchPort(p.Number) })
			}
		}
	default:
		return badAction(op)
	}
	return nil
}

func setPortParams(p *lb.Port, op api.Op, obj string) error {
	if op.Protocol != nil {
		v, err := lb.ParseProtocol(*op.Protocol)
		if err != nil {
			return lb.Errorf("protocol", obj, "%v", err)
		}
		p.Protocol = v
	}
	if op.Method != nil {
		v, err := lb.ParseMethod(*op.Method)
		if err != nil {
			return lb.Errorf("method", obj, "%v", err)
		}
		p.Method = v
	}
	var err error
	if op.StickyTime != nil {
		if p.StickyTime, err = inRange("stickytime", obj, *op.StickyTime, 0, lb.MaxTimeout); err != nil {
			return err
		}
	}
	if op.StickyMask != nil {
		v, err := inRange("stickymask", obj, *op.StickyMask, 0, 128)
		if err != nil {
			return err
		}
		p.StickyMask = uint8(v)
	}
	if op.CrossPort != nil {
		v, err := inRange("crossport", obj, *op.CrossPort, 0, 65535)
		if err != nil {
			return err
		}
		p.CrossPort = uint16(v)
	}
	if op.SelectionAlgorithm != nil {
		v, err := lb.ParseSelection(*op.SelectionAlgorithm)
		if err != nil {
			return lb.Errorf("selectionalgorithm", obj, "%v", err)
		}
		p.Selection = v
	}
	if op.MaxHalfOpen != nil {
		if p.MaxHalfOpen, err = inRange("maxhalfopen", obj, *op.MaxHalfOpen, 0, lb.MaxHalfOpen); err != nil {
			return err
		}
	}
	if op.StaleTimeout != nil {
		if p.StaleTimeout, err = inRange("staletimeout", obj, *op.StaleTimeout, 1, lb.MaxTimeout); err != nil {
			return err
		}
	}
	if op.WeightBound != nil {
		if p.WeightBound, err = inRange("weightbound", obj, *op.WeightBound, 1, lb.MaxWeightBound); err != nil {
			return err
		}
	}
	if op.AllDown != nil {
		v, err := lb.ParseAllDown(*op.AllDown)
		if err != nil {
			return lb.Errorf("alldown", obj, "%v", err)
		}
		p.AllDown = v
	}
	return nil
}

// serverParams are the parameters server add and set take.
var serverParams = []string{"weight", "fixedweight", "advisorrequest", "advisorresponse", "mapport", "returnaddress", "router"}

// setServerParams applies a server's optional parameters other than weight.
func setServerParams(s *lb.Server, op api.Op, obj string) error {
	if op.FixedWeight != nil {
		s.FixedWeight = *op.FixedWeight
	}
	if op.AdvisorRequest != nil {
		s.AdvisorRequest = *op.AdvisorRequest
	}
	if op.AdvisorResponse != nil {
		s.AdvisorResponse = *op.AdvisorResponse
	}
	if op.MapPort != nil {
		v, err := inRange("mapport", obj, *op.MapPort, 0, 65535)
		if err != nil {
			return err
		}
		s.MapPort = uint16(v)
	}
	var err error
	if op.ReturnAddress != nil {
		if s.ReturnAddress, err = parseAddr("returnaddress", obj, *op.ReturnAddress); err != nil {
			return err
		}
	}
	if op.Router != nil {
		if s.Router, err = parseAddr("router", obj, *op.Router); err != nil {
			return err
		}
	}
	return nil
}

func applyServer(cfg *lb.Config, op api.Op) error {
	t, err := lb.ParseTarget(op.Target, lb.ServerDepth)
	if err != nil {
		return err
	}
	switch op.Action {
	case api.ActionAdd:
		if err := noParams(op, serverParams...); err != nil {
			return err
		}
		if t.Servers == nil {
			return lb.Errorf("server", "", "server add needs a server address (cluster@port@server)")
		}
		ports, err := matchPorts(cfg, t, op.Target)
		if err != nil {
			return err
		}
		for _, mp := range ports {
			for _, a := range t.Servers {
				obj := lb.BackendKey{Service: mp.key, Server: a}.String()
				if mp.port.Server(a) != nil {
					return lb.Errorf("server", obj, "already exists")
				}
				s := lb.Server{Address: a, Weight: mp.port.WeightBound}
				if op.Weight != nil {
					w, err := inRange("weight", obj, *op.Weight, 0, int64(mp.port.WeightBound))
					if err != nil {
						return err
					}
					s.Weight = w
				}
				if err := setServerParams(&s, op, obj); err != nil {
					return err
				}
				mp.port.Servers = append(mp.port.Servers, s)
			}
		}
		return nil
	case api.ActionSet, api.ActionRemove, api.ActionDown, api.ActionUp:
	default:
		return badAction(op)
	}

	allowed := []string{}
	if op.Action == api.ActionSet {
		allowed = append(allowed, serverParams...)
	}
	if err := noParams(op, allowed...); err != nil {
		return err
	}
	servers, err := matchServers(cfg, t, op.Target)
	if err != nil {
		return err
	}
	switch op.Action {
	case api.ActionSet:
		if op.Weight == nil && op.FixedWeight == nil && op.AdvisorRequest == nil && op.AdvisorResponse == nil &&
			op.MapPort == nil && op.ReturnAddress == nil && op.Router == nil {
			return lb.Errorf("weight", "", "server set needs --weight, --fixedweight, --advisorrequest, --advisorresponse, --mapport, --returnaddress or --router")
		}
		for _, ms := range servers {
			if op.Weight != nil {
				w, err := inRange("weight", ms.key.String(), *op.Weight, 0, int64(ms.port.WeightBound))
				if err != nil {
					return err
				}
				ms.server.Weight = w
			}
			if err := setServerParams(ms.server, op, ms.key.String()); err != nil {
				return err
			}
		}
	case api.ActionDown, api.ActionUp:
		for _, ms := range servers {
			ms.server.Down = op.Action == api.ActionDown
		}
	case api.ActionRemove:
		for i := range cfg.Clusters {
			cl := &cfg.Clusters[i]
			if !t.MatchCluster(cl.Address) {
				continue
			}
			for j := range cl.Ports {
				p := &cl.Ports[j]
				if t.MatchPort(p.Number) {
					p.Servers = slices.DeleteFunc(p.Servers, func(s lb.Server) bool { return t.MatchServer(s.Address) })
				}
			}
		}
	}
	return nil
}

// matchClusters returns the clusters t selects; named clusters must exist,
// and a wildcard must match something.
func matchClusters(cfg *lb.Config, t lb.Target, target string) ([]*lb.Cluster, error) {
	for _, a := range t.Clusters {
		if cfg.Cluster(a) == nil {
			return nil, lb.Errorf("cluster", a.String(), "is not a configured cluster")
		}
	}
	var out []*lb.Cluster
	for i := range cfg.Clusters {
		if t.MatchCluster(cfg.Clusters[i].Address) {
			out = append(out, &cfg.Clusters[i])
		}
	}
	if len(out) == 0 {
		return nil, lb.Errorf("cluster", target, "matches no configured cluster")
	}
	return out, nil
}

type matchedPort struct {
	key  lb.ServiceKey
	port *lb.Port
}

// matchPorts returns the ports t selects; named ports must exist on every
// selected cluster, and a wildcard must match something.
func matchPorts(cfg *lb.Config, t lb.Target, target string) ([]matchedPort, error) {
	cls, err := matchClusters(cfg, t, target)
	if err != nil {
		return nil, err
	}
	var out []matchedPort
	for _, cl := range cls {
		for _, n := range t.Ports {
			if cl.Port(n) == nil && t.Clusters != nil {
				return nil, lb.Errorf("port", lb.ServiceKey{Cluster: cl.Address, Port: n}.String(), "is not a configured port")
			}
		}
		for i := range cl.Ports {
			if t.MatchPort(cl.Ports[i].Number) {
				out = append(out, matchedPort{lb.ServiceKey{Cluster: cl.Address, Port: cl.Ports[i].Number}, &cl.Ports[i]})
			}
		}
	}
	if len(out) == 0 {
		return nil, lb.Errorf("port", target, "matches no configured port")
	}
	return out, nil
}

type matchedServer struct {
	key    lb.BackendKey
	port   *lb.Port
	server *lb.Server
}

// matchServers returns the servers t selects; named servers must exist on
// every selected port, and a wildcard must match something.
func matchServers(cfg *lb.Config, t lb.Target, target string) ([]matchedServer, error) {
	ports, err := matchPorts(cfg, t, target)
	if err != nil {
		return nil, err
	}
	var out []matchedServer
	for _, mp := range ports {
		for _, a := range t.Servers {
			if mp.port.Server(a) == nil && t.Clusters != nil && t.Ports != nil {
				return nil, lb.Errorf("server", lb.BackendKey{Service: mp.key, Server: a}.String(), "is not a configured server")
			}
		}
		for i := range mp.port.Servers {
			s := &mp.port.Servers[i]
			if t.MatchServer(s.Address) {
				out = append(out, matchedServer{lb.BackendKey{Service: mp.key, Server: s.Address}, mp.port, s})
			}
		}
	}
	if len(out) == 0 {
		return nil, lb.Errorf("server", target, "matches no configured server")
	}
	return out, nil
}

// inRange checks an integer parameter.
func inRange(field, obj string, v, lo, hi int64) (uint32, error) {
	if v < lo || v > hi {
		return 0, lb.Errorf(field, obj, "%d is outside %d..%d", v, lo, hi)
	}
	return uint32(v), nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
