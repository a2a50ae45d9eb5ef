package config

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/dlbproject/dlb/pkg/lb"
)

// apply applies one operation to the draft.
func (ed *Editor) apply(d *draft, op *Op) error {
	// Refusals name the target and a parameter as given: not ones that
	// could break the line of a log or a terminal.
	if op.Target != "" && !printableASCII(op.Target, 4096) {
		return lb.Errorf("target", "", "%q is not a target: addresses, ports and names are printable ASCII", op.Target)
	}
	for _, x := range op.Params {
		if x.Name == "" || !printableASCII(x.Name, 64) {
			return lb.Errorf("params", "", "parameter name %q is not a keyword", x.Name)
		}
	}
	p := newParams(op)
	var err error
	switch op.Object {
	case Executor:
		err = applyExecutor(d, op, p)
		d.touch(executorObject)
	case Cluster:
		err = applyCluster(d, op, p)
	case Port:
		err = applyPort(d, op, p)
	case Server:
		err = applyServer(d, op, p)
	case Manager:
		err = applyManager(d, op, p)
	case Advisor:
		err = ed.applyAdvisor(d, op, p)
	case Metric:
		err = applyMetric(d, op, p)
	case Heartbeat:
		err = applyHeartbeat(d, op, p)
	case Backup:
		err = applyBackup(d, op, p)
	case Reach:
		err = applyReach(d, op, p)
	case BGP:
		err = applyBGP(d, op, p)
	case Neighbor:
		err = applyNeighbor(d, op, p)
	default:
		return lb.Errorf("object", "", "unknown object %q (want executor, cluster, port, server, manager, advisor, metric, heartbeat, backup, reach, bgp or neighbor)", op.Object)
	}
	if err != nil {
		return err
	}
	return p.unused()
}

// printableASCII reports whether s is at most max bytes of printable
// ASCII other than the space.
func printableASCII(s string, max int) bool {
	if len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

func badAction(op *Op) error {
	return lb.Errorf("action", "", "%s does not take %q", op.Object, op.Action)
}

func applyExecutor(d *draft, op *Op, p *params) error {
	if op.Target != "" {
		return lb.Errorf("target", "", "executor takes no target (got %q)", op.Target)
	}
	ex := &d.cfg.Executor
	switch op.Action {
	case Start:
		ifname, given, err := p.str("interface")
		if err != nil {
			return err
		}
		if !given {
			ifname = ex.Interface
		}
		if ifname == "" {
			return lb.Errorf("interface", "", "executor start needs --interface")
		}
		mode := ex.XDPMode
		if s, ok, err := p.str("xdp-mode"); err != nil {
			return err
		} else if ok {
			if mode, err = lb.ParseXDPMode(s); err != nil {
				return lb.Errorf("xdp-mode", "", "%v", err)
			}
		}
		// On a running executor, another interface or mode moves it
		// there, its tables kept (the engine's reconcile).
		ex.Started, ex.Interface, ex.XDPMode = true, ifname, mode
	case Stop:
		ex.Started = false
	case Set:
		nfa, nfaOK, err := p.str("nfa")
		if err != nil {
			return err
		}
		gw, gwOK, err := p.str("clientgateway")
		if err != nil {
			return err
		}
		fin, finOK, err := p.ranged("fintimeout", "", 1, lb.MaxTimeout)
		if err != nil {
			return err
		}
		if !nfaOK && !gwOK && !finOK {
			return lb.Errorf("nfa", "", "executor set needs nfa, clientgateway or fintimeout")
		}
		if nfaOK {
			if err := setByFamily("nfa", nfa, &ex.NFA, &ex.NFA6); err != nil {
				return err
			}
		}
		if gwOK {
			if err := setByFamily("clientgateway", gw, &ex.ClientGateway, &ex.ClientGateway6); err != nil {
				return err
			}
		}
		if finOK {
			ex.FinTimeout = fin
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

// proportions reads a cluster's --proportions.
func (p *params) proportions(obj string) (lb.Proportions, bool, error) {
	v, ok := p.get("proportions")
	if !ok {
		return lb.Proportions{}, false, nil
	}
	if len(v) != 4 {
		return lb.Proportions{}, true, lb.Errorf("proportions", obj, "want 4 values (active new port system), got %d", len(v))
	}
	var n [4]int
	for i, s := range v {
		x, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return lb.Proportions{}, true, lb.Errorf("proportions", obj, "%q is not a whole number", s)
		}
		if x < 0 || x > 100 {
			return lb.Proportions{}, true, lb.Errorf("proportions", obj, "%d is outside 0..100", x)
		}
		n[i] = int(x)
	}
	pr := lb.Proportions{Active: n[0], New: n[1], Port: n[2], System: n[3]}
	return pr, true, pr.Check(obj)
}

func applyCluster(d *draft, op *Op, p *params) error {
	t, err := lb.ParseTarget(op.Target, lb.ClusterDepth)
	if err != nil {
		return err
	}
	switch op.Action {
	case Add:
		configure, _, err := p.flag("configure")
		if err != nil {
			return err
		}
		props, propsOK, err := p.proportions(op.Target)
		if err != nil {
			return err
		}
		primary, _, err := p.addr("primaryhost", op.Target)
		if err != nil {
			return err
		}
		announce, _, err := announceParams(p, op.Target)
		if err != nil {
			return err
		}
		if t.Clusters == nil {
			return lb.Errorf("cluster", "", "cluster add needs a cluster address")
		}
		for _, a := range t.Clusters {
			if _, ok := findCluster(d.cfg.Clusters, a); ok {
				return lb.Errorf("cluster", a.String(), "already exists")
			}
			cl := lb.NewCluster(a)
			cl.Configure = configure
			cl.PrimaryHost = primary
			if propsOK {
				cl.Proportions = props
			}
			announce(&cl)
			d.addCluster(cl)
		}
	case Set:
		configure, configureOK, err := p.flag("configure")
		if err != nil {
			return err
		}
		props, propsOK, err := p.proportions(op.Target)
		if err != nil {
			return err
		}
		primary, primaryOK, err := p.addr("primaryhost", op.Target)
		if err != nil {
			return err
		}
		announce, announceOK, err := announceParams(p, op.Target)
		if err != nil {
			return err
		}
		cls, err := matchClusters(&d.cfg, t, op.Target)
		if err != nil {
			return err
		}
		if !configureOK && !propsOK && !primaryOK && !announceOK {
			return lb.Errorf("configure", "", "cluster set needs --configure, --proportions, --primaryhost, --announce, --community or --med")
		}
		for _, c := range cls {
			cl := d.cluster(c.ci)
			d.touch(cl.Address.String())
			if configureOK {
				cl.Configure = configure
			}
			if primaryOK {
				cl.PrimaryHost = primary
			}
			if propsOK {
				cl.Proportions = props
			}
			announce(cl)
		}
	case Remove:
		cls, err := matchClusters(&d.cfg, t, op.Target)
		if err != nil {
			return err
		}
		gone := map[netip.Addr]bool{}
		for _, c := range cls {
			gone[d.cfg.Clusters[c.ci].Address] = true
		}
		d.cfg.Clusters = slices.DeleteFunc(d.clusters(), func(c lb.Cluster) bool { return gone[c.Address] })
		// The advisors of a removed cluster stop with it (an advisor of
		// every cluster's port stops at the end of the batch when no
		// cluster balances its port then: stopIdleAdvisors).
		if slices.ContainsFunc(d.cfg.Advisors, func(a lb.Advisor) bool { return gone[a.Cluster] }) {
			d.cfg.Advisors = slices.DeleteFunc(d.advisors(), func(a lb.Advisor) bool { return gone[a.Cluster] })
		}
	default:
		return badAction(op)
	}
	return nil
}

// stopIdleAdvisors stops the advisors left with no port to probe at the
// end of a batch that removed clusters or ports: "advisor start" refuses
// such an advisor, and so does a configuration file that holds one (what
// "file save" writes must load). At the end, not at the removal: a batch
// may give the port back (Plan's steps, a cluster moving to a new
// address), and its later steps may name the advisor.
func stopIdleAdvisors(d *draft) {
	idle := func(a lb.Advisor) bool { return !probes(d.cfg, a) }
	if slices.ContainsFunc(d.cfg.Advisors, idle) {
		d.cfg.Advisors = slices.DeleteFunc(d.advisors(), idle)
	}
}

// portParams reads the parameters port add and set take, and returns a
// function that applies them to a port.
func portParams(p *params, obj string) (func(*lb.Port), error) {
	var sets []func(*lb.Port)
	if s, ok, err := p.str("protocol"); err != nil {
		return nil, err
	} else if ok {
		v, err := lb.ParseProtocol(s)
		if err != nil {
			return nil, lb.Errorf("protocol", obj, "%v", err)
		}
		sets = append(sets, func(x *lb.Port) { x.Protocol = v })
	}
	if s, ok, err := p.str("method"); err != nil {
		return nil, err
	} else if ok {
		v, err := lb.ParseMethod(s)
		if err != nil {
			return nil, lb.Errorf("method", obj, "%v", err)
		}
		sets = append(sets, func(x *lb.Port) { x.Method = v })
	}
	if s, ok, err := p.str("selectionalgorithm"); err != nil {
		return nil, err
	} else if ok {
		v, err := lb.ParseSelection(s)
		if err != nil {
			return nil, lb.Errorf("selectionalgorithm", obj, "%v", err)
		}
		sets = append(sets, func(x *lb.Port) { x.Selection = v })
	}
	if s, ok, err := p.str("alldown"); err != nil {
		return nil, err
	} else if ok {
		v, err := lb.ParseAllDown(s)
		if err != nil {
			return nil, lb.Errorf("alldown", obj, "%v", err)
		}
		sets = append(sets, func(x *lb.Port) { x.AllDown = v })
	}
	for _, r := range []struct {
		name   string
		lo, hi int64
		set    func(*lb.Port, uint32)
	}{
		{"stickytime", 0, lb.MaxTimeout, func(x *lb.Port, v uint32) { x.StickyTime = v }},
		{"stickymask", 0, 128, func(x *lb.Port, v uint32) { x.StickyMask = uint8(v) }},
		{"crossport", 0, 65535, func(x *lb.Port, v uint32) { x.CrossPort = uint16(v) }},
		{"maxhalfopen", 0, lb.MaxHalfOpen, func(x *lb.Port, v uint32) { x.MaxHalfOpen = v }},
		{"staletimeout", 1, lb.MaxTimeout, func(x *lb.Port, v uint32) { x.StaleTimeout = v }},
		{"weightbound", 1, lb.MaxWeightBound, func(x *lb.Port, v uint32) { x.WeightBound = v }},
		{"tablesize", 0, lb.MaxTableSize, func(x *lb.Port, v uint32) { x.TableSize = v }},
	} {
		v, ok, err := p.ranged(r.name, obj, r.lo, r.hi)
		if err != nil {
			return nil, err
		}
		if ok {
			set := r.set
			sets = append(sets, func(x *lb.Port) { set(x, v) })
		}
	}
	return func(x *lb.Port) {
		for _, s := range sets {
			s(x)
		}
	}, nil
}

func applyPort(d *draft, op *Op, p *params) error {
	t, err := lb.ParseTarget(op.Target, lb.PortDepth)
	if err != nil {
		return err
	}
	switch op.Action {
	case Add:
		set, err := portParams(p, op.Target)
		if err != nil {
			return err
		}
		if t.Ports == nil {
			return lb.Errorf("port", "", "port add needs a port number (cluster@port)")
		}
		cls, err := matchClusters(&d.cfg, t, op.Target)
		if err != nil {
			return err
		}
		for _, c := range cls {
			cl := &d.cfg.Clusters[c.ci]
			for _, n := range t.Ports {
				obj := lb.ServiceKey{Cluster: cl.Address, Port: n}.String()
				if _, ok := findPort(cl.Ports, n); ok {
					return lb.Errorf("port", obj, "already exists")
				}
				np := lb.NewPort(n)
				set(&np)
				d.addPort(c.ci, np)
			}
		}
	case Set:
		set, err := portParams(p, op.Target)
		if err != nil {
			return err
		}
		ports, err := matchPorts(&d.cfg, t, op.Target)
		if err != nil {
			return err
		}
		for _, pr := range ports {
			set(d.port(pr.ci, pr.pi))
			d.touch(pr.key.String())
		}
	case Remove:
		ports, err := matchPorts(&d.cfg, t, op.Target)
		if err != nil {
			return err
		}
		gone := map[lb.ServiceKey]bool{}
		for _, pr := range ports {
			gone[pr.key] = true
		}
		for ci := range d.cfg.Clusters {
			cl := d.cfg.Clusters[ci]
			if !slices.ContainsFunc(cl.Ports, func(x lb.Port) bool { return gone[lb.ServiceKey{Cluster: cl.Address, Port: x.Number}] }) {
				continue
			}
			d.cluster(ci).Ports = slices.DeleteFunc(d.ports(ci), func(x lb.Port) bool {
				return gone[lb.ServiceKey{Cluster: cl.Address, Port: x.Number}]
			})
		}
	default:
		return badAction(op)
	}
	return nil
}

// serverParams reads the parameters server add and set take other than
// weight, and returns a function that applies them to a server.
func serverParams(p *params, obj string) (func(*lb.Server), bool, error) {
	var sets []func(*lb.Server)
	if v, ok, err := p.flag("fixedweight"); err != nil {
		return nil, false, err
	} else if ok {
		sets = append(sets, func(s *lb.Server) { s.FixedWeight = v })
	}
	for _, f := range []struct {
		name string
		set  func(*lb.Server, string)
	}{
		{"advisorrequest", func(s *lb.Server, v string) { s.AdvisorRequest = v }},
		{"advisorresponse", func(s *lb.Server, v string) { s.AdvisorResponse = v }},
	} {
		v, ok, err := p.str(f.name)
		if err != nil {
			return nil, false, err
		}
		if ok {
			set := f.set
			sets = append(sets, func(s *lb.Server) { set(s, v) })
		}
	}
	if v, ok, err := p.ranged("mapport", obj, 0, 65535); err != nil {
		return nil, false, err
	} else if ok {
		sets = append(sets, func(s *lb.Server) { s.MapPort = uint16(v) })
	}
	if a, ok, err := p.addr("returnaddress", obj); err != nil {
		return nil, false, err
	} else if ok {
		sets = append(sets, func(s *lb.Server) { s.ReturnAddress = a })
	}
	if a, ok, err := p.addr("router", obj); err != nil {
		return nil, false, err
	} else if ok {
		sets = append(sets, func(s *lb.Server) { s.Router = a })
	}
	return func(s *lb.Server) {
		for _, set := range sets {
			set(s)
		}
	}, len(sets) > 0, nil
}

func applyServer(d *draft, op *Op, p *params) error {
	t, err := lb.ParseTarget(op.Target, lb.ServerDepth)
	if err != nil {
		return err
	}
	switch op.Action {
	case Add:
		weight, weightOK, err := p.integer("weight")
		if err != nil {
			return err
		}
		set, _, err := serverParams(p, op.Target)
		if err != nil {
			return err
		}
		if t.Servers == nil {
			return lb.Errorf("server", "", "server add needs a server address (cluster@port@server)")
		}
		ports, err := matchPorts(&d.cfg, t, op.Target)
		if err != nil {
			return err
		}
		for _, pr := range ports {
			port := &d.cfg.Clusters[pr.ci].Ports[pr.pi]
			w := newServer(port, netip.Addr{}).Weight
			if weightOK {
				if w, err = inRange("weight", pr.key.String(), weight, 0, int64(port.WeightBound)); err != nil {
					return err
				}
			}
			for _, a := range t.Servers {
				obj := lb.BackendKey{Service: pr.key, Server: a}.String()
				if _, ok := findServer(d.cfg.Clusters[pr.ci].Ports[pr.pi].Servers, a); ok {
					return lb.Errorf("server", obj, "already exists")
				}
				s := lb.Server{Address: a, Weight: w}
				set(&s)
				d.addServer(pr.ci, pr.pi, s)
			}
		}
		return nil
	case Set:
		weight, weightOK, err := p.integer("weight")
		if err != nil {
			return err
		}
		set, any, err := serverParams(p, op.Target)
		if err != nil {
			return err
		}
		if !weightOK && !any {
			return lb.Errorf("weight", "", "server set needs --weight, --fixedweight, --advisorrequest, --advisorresponse, --mapport, --returnaddress or --router")
		}
		servers, err := matchServers(&d.cfg, t, op.Target)
		if err != nil {
			return err
		}
		for _, sr := range servers {
			if weightOK {
				bound := d.cfg.Clusters[sr.ci].Ports[sr.pi].WeightBound
				w, err := inRange("weight", sr.key.String(), weight, 0, int64(bound))
				if err != nil {
					return err
				}
				d.server(sr.ci, sr.pi, sr.si).Weight = w
			}
			set(d.server(sr.ci, sr.pi, sr.si))
			d.touch(sr.key.String())
		}
	case Down, Up:
		servers, err := matchServers(&d.cfg, t, op.Target)
		if err != nil {
			return err
		}
		for _, sr := range servers {
			if s := d.cfg.Clusters[sr.ci].Ports[sr.pi].Servers[sr.si]; s.Down != (op.Action == Down) {
				d.server(sr.ci, sr.pi, sr.si).Down = op.Action == Down
				d.touch(sr.key.String())
			}
		}
	case Remove:
		servers, err := matchServers(&d.cfg, t, op.Target)
		if err != nil {
			return err
		}
		// Remove from the highest index down, so that the indexes of
		// the others stay valid.
		slices.SortFunc(servers, func(a, b serverRef) int {
			if a.ci != b.ci {
				return a.ci - b.ci
			}
			if a.pi != b.pi {
				return a.pi - b.pi
			}
			return b.si - a.si
		})
		for _, sr := range servers {
			ss := d.servers(sr.ci, sr.pi)
			d.port(sr.ci, sr.pi).Servers = slices.Delete(ss, sr.si, sr.si+1)
		}
	default:
		return badAction(op)
	}
	return nil
}

func applyManager(d *draft, op *Op, p *params) error {
	m := &d.cfg.Manager
	switch op.Action {
	case Start, Stop:
		if op.Target != "" {
			return lb.Errorf("target", "", "manager %s takes no target", op.Action)
		}
		m.Started = op.Action == Start
	case Set:
		if op.Target != "" {
			return lb.Errorf("target", "", "manager set takes no target")
		}
		interval, intervalOK, err := p.number("interval")
		if err != nil {
			return err
		}
		refresh, refreshOK, err := p.ranged("refresh", "manager", 1, 100)
		if err != nil {
			return err
		}
		smoothing, smoothingOK, err := p.number("smoothing")
		if err != nil {
			return err
		}
		sensitivity, sensitivityOK, err := p.number("sensitivity")
		if err != nil {
			return err
		}
		if !intervalOK && !refreshOK && !smoothingOK && !sensitivityOK {
			return lb.Errorf("interval", "", "manager set needs interval, refresh, smoothing or sensitivity")
		}
		if intervalOK {
			m.Interval = interval
		}
		if refreshOK {
			m.Refresh = int(refresh)
		}
		if smoothingOK {
			m.Smoothing = smoothing
		}
		if sensitivityOK {
			m.Sensitivity = sensitivity
		}
	case Quiesce, Unquiesce:
		now := false
		if op.Action == Quiesce {
			var err error
			if now, _, err = p.flag("now"); err != nil {
				return err
			}
		}
		servers, err := quiesceTargets(d, op.Target)
		if err != nil {
			return err
		}
		for _, sr := range servers {
			cur := d.cfg.Clusters[sr.ci].Ports[sr.pi].Servers[sr.si]
			q := op.Action == Quiesce
			// "quiesce --now" sticks until unquiesce; a later plain
			// quiesce does not bring affinity back.
			qn := q && (now || cur.QuiesceNow)
			if cur.Quiesced != q || cur.QuiesceNow != qn {
				s := d.server(sr.ci, sr.pi, sr.si)
				s.Quiesced, s.QuiesceNow = q, qn
				d.touch(sr.key.String())
			}
		}
	default:
		return badAction(op)
	}
	return nil
}

// quiesceTargets resolves the target of quiesce/unquiesce: IBM quiesces a
// server everywhere by its address, and dlb also takes cluster@port@server.
func quiesceTargets(d *draft, target string) ([]serverRef, error) {
	if target == "" {
		return nil, lb.Errorf("server", "", "quiesce needs a server (ADDR or cluster@port@server)")
	}
	if !strings.Contains(target, "@") {
		a, err := netip.ParseAddr(target)
		if err != nil {
			return nil, lb.Errorf("server", "", "%q is not an IP address", target)
		}
		out := serversByAddress(&d.cfg, a.Unmap())
		if len(out) == 0 {
			return nil, lb.Errorf("server", target, "matches no configured server")
		}
		return out, nil
	}
	t, err := lb.ParseTarget(target, lb.ServerDepth)
	if err != nil {
		return nil, err
	}
	return matchServers(&d.cfg, t, target)
}

func (ed *Editor) applyAdvisor(d *draft, op *Op, p *params) error {
	name, _, err := p.str("advisor")
	if err != nil {
		return err
	}
	if name == "" {
		return lb.Errorf("advisor", "", "advisor %s needs the advisor's name", op.Action)
	}
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
	port := t.Ports[0]
	key := lb.NewAdvisor(name, cluster, port).Key()
	idx := slices.IndexFunc(d.cfg.Advisors, func(a lb.Advisor) bool { return a.Key() == key })

	switch op.Action {
	case Start:
		set, err := advisorParams(p, key)
		if err != nil {
			return err
		}
		if name != "exec" && ed.opts.KnownAdvisor != nil {
			if err := ed.opts.KnownAdvisor(name); err != nil {
				return lb.Errorf("advisor", "", "%v", err)
			}
		}
		if idx >= 0 {
			return lb.Errorf("advisor", key, "already started")
		}
		// The advisor needs a port to probe.
		found := false
		for _, cl := range d.cfg.Clusters {
			if _, ok := findPort(cl.Ports, port); ok && (!cluster.IsValid() || cl.Address == cluster) {
				found = true
				break
			}
		}
		if !found {
			return lb.Errorf("port", op.Target, "no configured cluster balances port %d", port)
		}
		a := newAdvisor(name, cluster, port)
		set(&a)
		d.cfg.Advisors = append(d.advisors(), a)
		slices.SortFunc(d.cfg.Advisors, func(a, b lb.Advisor) int { return strings.Compare(a.Key(), b.Key()) })
		// IBM: starting an advisor raises a zero port proportion to 1.
		for ci, cl := range d.cfg.Clusters {
			if _, ok := findPort(cl.Ports, port); ok && a.Covers(cl.Address, port) && cl.Proportions.Port == 0 {
				d.cluster(ci).Proportions.RaisePort()
			}
		}
	case Set:
		set, err := advisorParams(p, key)
		if err != nil {
			return err
		}
		if idx < 0 {
			return lb.Errorf("advisor", key, "is not started")
		}
		set(&d.advisors()[idx])
	case Stop:
		if idx < 0 {
			return lb.Errorf("advisor", key, "is not started")
		}
		d.cfg.Advisors = slices.Delete(d.advisors(), idx, idx+1)
	default:
		return badAction(op)
	}
	return nil
}

// advisorParams reads the parameters advisor start and set take.
func advisorParams(p *params, obj string) (func(*lb.Advisor), error) {
	var sets []func(*lb.Advisor)
	for _, f := range []struct {
		name string
		set  func(*lb.Advisor, float64)
	}{
		{"interval", func(a *lb.Advisor, v float64) { a.Interval = v }},
		{"connecttimeout", func(a *lb.Advisor, v float64) { a.ConnectTimeout = v }},
		{"receivetimeout", func(a *lb.Advisor, v float64) { a.ReceiveTimeout = v }},
	} {
		v, ok, err := p.number(f.name)
		if err != nil {
			return nil, err
		}
		if ok {
			set := f.set
			sets = append(sets, func(a *lb.Advisor) { set(a, v) })
		}
	}
	for _, f := range []struct {
		name string
		lo   int64
		set  func(*lb.Advisor, int)
	}{
		{"retries", 0, func(a *lb.Advisor, v int) { a.Retries = v }},
		{"rise", 1, func(a *lb.Advisor, v int) { a.Rise = v }},
		{"fall", 1, func(a *lb.Advisor, v int) { a.Fall = v }},
	} {
		v, ok, err := p.ranged(f.name, obj, f.lo, 100)
		if err != nil {
			return nil, err
		}
		if ok {
			set := f.set
			sets = append(sets, func(a *lb.Advisor) { set(a, int(v)) })
		}
	}
	if v, ok, err := p.str("program"); err != nil {
		return nil, err
	} else if ok {
		sets = append(sets, func(a *lb.Advisor) { a.Program = v })
	}
	if v, ok := p.list("args"); ok {
		sets = append(sets, func(a *lb.Advisor) { a.Args = slices.Clone(v) })
	}
	if v, ok, err := p.str("mode"); err != nil {
		return nil, err
	} else if ok {
		sets = append(sets, func(a *lb.Advisor) { a.Mode = v })
	}
	return func(a *lb.Advisor) {
		for _, set := range sets {
			set(a)
		}
	}, nil
}

func applyMetric(d *draft, op *Op, p *params) error {
	switch op.Action {
	case Add, Remove:
		names, _ := p.list("metrics")
		if len(names) == 0 {
			return lb.Errorf("metric", "", "metric %s needs metric names (cluster@metric+metric)", op.Action)
		}
		t, err := lb.ParseTarget(op.Target, lb.ClusterDepth)
		if err != nil {
			return err
		}
		cls, err := matchClusters(&d.cfg, t, op.Target)
		if err != nil {
			return err
		}
		for _, c := range cls {
			cl := d.cluster(c.ci)
			ms := slices.Clone(cl.Metrics)
			for _, m := range names {
				has := slices.Contains(ms, m)
				switch {
				case op.Action == Add && has:
					return lb.Errorf("metric", cl.Address.String(), "%q is already added", m)
				case op.Action == Add:
					ms = append(ms, m)
					// IBM: adding a metric raises a zero system proportion to 1.
					cl.Proportions.RaiseSystem()
				case !has:
					return lb.Errorf("metric", cl.Address.String(), "%q is not added", m)
				default:
					ms = slices.DeleteFunc(ms, func(x string) bool { return x == m })
				}
			}
			d.setMetrics(c.ci, ms)
			d.touch(cl.Address.String())
		}
	case Set:
		if op.Target != "" {
			return lb.Errorf("target", "", "metric set takes no target")
		}
		ms := &d.cfg.MetricServer
		src, srcOK, err := p.str("source")
		if err != nil {
			return err
		}
		port, portOK, err := p.integer("metricport")
		if err != nil {
			return err
		}
		secret, secretOK, err := p.str("secretfile")
		if err != nil {
			return err
		}
		path, pathOK, err := p.str("path")
		if err != nil {
			return err
		}
		if srcOK {
			if def, known := metricDefaults(src); known && src != ms.Source {
				ms.Port, ms.Path = def.Port, def.Path
			}
			ms.Source = src
		}
		if portOK {
			v, err := inRange("port", "metric", port, 1, 65535)
			if err != nil {
				return err
			}
			ms.Port = uint16(v)
		}
		if secretOK {
			ms.SecretFile = secret
		}
		if pathOK {
			ms.Path = path
		}
	default:
		return badAction(op)
	}
	return nil
}
