package config

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/dlbproject/dlb/pkg/lb"
)

// validate checks what ch says changed in cfg, and the relations the
// change could break (an address in two roles, a crossport naming a port
// that is gone, a weight above a lowered weightbound, ...), and returns
// the first problem found as a *lb.FieldError. u counts the uses of
// addresses in cfg.
func validate(cfg lb.Config, ch Change, u counter) error {
	ex := cfg.Executor
	if ch.Executor {
		if err := checkExecutor(cfg); err != nil {
			return err
		}
	}
	if ch.Manager {
		if err := checkManager(cfg.Manager); err != nil {
			return err
		}
	}
	if ch.MetricServer {
		if err := checkMetricServer(cfg.MetricServer); err != nil {
			return err
		}
	}
	if ch.BGP || ch.Executor || (len(ch.Clusters) > 0 && len(cfg.BGP.Neighbors) > 0) {
		if err := checkBGP(cfg); err != nil {
			return err
		}
	}
	if err := checkUnique(cfg, ch); err != nil {
		return err
	}
	if haChecked(cfg, ch) {
		if err := checkHA(cfg); err != nil {
			return err
		}
	}

	// Clusters.
	for a, kind := range ch.Clusters {
		if kind == Removed {
			continue
		}
		ci, _ := findCluster(cfg.Clusters, a)
		if err := checkCluster(cfg.Clusters[ci], ex); err != nil {
			return err
		}
		if err := checkAnnounce(cfg.Clusters[ci]); err != nil {
			return err
		}
	}

	// Ports and their servers. Crossport links are checked in every
	// cluster one of whose ports changed; every server of a port whose
	// settings changed is checked again (its weightbound or method may
	// have changed).
	clusters := map[netip.Addr]bool{}
	for _, k := range ch.PortsTouched() {
		ci, ok := findCluster(cfg.Clusters, k.Cluster)
		if !ok {
			continue
		}
		clusters[k.Cluster] = true
		cl := &cfg.Clusters[ci]
		pi, ok := findPort(cl.Ports, k.Port)
		if !ok {
			continue
		}
		p := &cl.Ports[pi]
		whole := ch.Ports[k] == Added || ch.Ports[k] == Changed
		if whole {
			if err := checkPort(cl, p); err != nil {
				return err
			}
		}
		v4 := cl.Address.Is4()
		for _, s := range p.Servers {
			bk := lb.BackendKey{Service: k, Server: s.Address}
			if kind := ch.Servers[bk]; !whole && kind != Added && kind != Changed {
				continue
			}
			if err := checkServer(p, bk.String(), s, v4); err != nil {
				return err
			}
			// The return address first: its conflicts are named by it.
			rs := roles(s)
			for _, r := range []int{roleReturn, roleServer, roleRouter} {
				if a := rs[r]; a.IsValid() {
					if err := checkRoles(cfg, u, a, r, bk.String()); err != nil {
						return err
					}
				}
			}
		}
	}
	for a := range clusters {
		ci, _ := findCluster(cfg.Clusters, a)
		if err := checkCrossPorts(&cfg.Clusters[ci]); err != nil {
			return err
		}
	}

	// A new cluster address or NFA must not be an address servers use.
	var fresh []netip.Addr
	for a, kind := range ch.Clusters {
		if kind == Added {
			fresh = append(fresh, a)
		}
	}
	if ch.Executor {
		fresh = append(fresh, ex.NFA, ex.NFA6)
	}
	for _, a := range fresh {
		if !a.IsValid() {
			continue
		}
		for r := range nRoles {
			if u.count(a, r) > 0 {
				return roleConflict(cfg, a)
			}
		}
	}

	// Advisors.
	if len(ch.Advisors) > 0 || len(ch.Clusters) > 0 || len(ch.Ports) > 0 {
		for _, a := range cfg.Advisors {
			if ch.Advisors[a.Key()] == Added || ch.Advisors[a.Key()] == Changed {
				if err := checkAdvisor(a); err != nil {
					return err
				}
			}
			if a.Cluster.IsValid() {
				if _, ok := findCluster(cfg.Clusters, a.Cluster); !ok {
					return lb.Errorf("cluster", a.Key(), "%s is not a configured cluster", a.Cluster)
				}
			}
			if err := checkClusterAdvisor(cfg, a); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkClusterAdvisor refuses a cluster advisor that could not probe what
// it means to: it sends a SYN to one IPv4 cluster address at the servers'
// MACs, as MAC forwarding does; a NAT port's servers do not hold the
// cluster address.
func checkClusterAdvisor(cfg lb.Config, a lb.Advisor) error {
	if a.Name != "cluster" {
		return nil
	}
	if !a.Cluster.IsValid() {
		return lb.Errorf("advisor", a.Key(), "the cluster advisor probes one cluster address: name it (VIP@PORT)")
	}
	ci, _ := findCluster(cfg.Clusters, a.Cluster)
	if pi, ok := findPort(cfg.Clusters[ci].Ports, a.Port); ok && cfg.Clusters[ci].Ports[pi].Method == lb.NAT {
		return lb.Errorf("advisor", a.Key(), "port %v@%d forwards by NAT: its servers do not hold the cluster address the cluster advisor probes (use another advisor)", a.Cluster, a.Port)
	}
	return nil
}

// checkUnique refuses two clusters with one address, two ports of a
// cluster with one number, two servers of a port with one address, and
// two advisors with one key. The slices are sorted, so duplicates are
// neighbours; only the touched parts are looked at.
func checkUnique(cfg lb.Config, ch Change) error {
	if len(ch.Clusters) > 0 {
		for i := 1; i < len(cfg.Clusters); i++ {
			if cfg.Clusters[i].Address == cfg.Clusters[i-1].Address {
				return lb.Errorf("cluster", cfg.Clusters[i].Address.String(), "defined twice")
			}
		}
	}
	for _, k := range ch.PortsTouched() {
		ci, ok := findCluster(cfg.Clusters, k.Cluster)
		if !ok {
			continue
		}
		ps := cfg.Clusters[ci].Ports
		for i := 1; i < len(ps); i++ {
			if ps[i].Number == ps[i-1].Number {
				return lb.Errorf("port", lb.ServiceKey{Cluster: k.Cluster, Port: ps[i].Number}.String(), "defined twice")
			}
		}
		pi, ok := findPort(ps, k.Port)
		if !ok {
			continue
		}
		ss := ps[pi].Servers
		for i := 1; i < len(ss); i++ {
			if ss[i].Address == ss[i-1].Address {
				return lb.Errorf("server", lb.BackendKey{Service: k, Server: ss[i].Address}.String(), "defined twice")
			}
		}
	}
	for i := 1; i < len(cfg.Advisors); i++ {
		if cfg.Advisors[i].Key() == cfg.Advisors[i-1].Key() {
			return lb.Errorf("advisor", cfg.Advisors[i].Key(), "started twice")
		}
	}
	return nil
}

// checkOptional checks an optional address: unset, or unicast of the
// wanted family (IPv4 when v4).
func checkOptional(field, object string, a netip.Addr, v4 bool) error {
	if !a.IsValid() {
		return nil
	}
	if err := lb.CheckUnicast(field, object, a); err != nil {
		return err
	}
	if a.Is4() != v4 {
		want, got := "IPv6", "IPv4"
		if v4 {
			want, got = "IPv4", "IPv6"
		}
		return lb.Errorf(field, object, "%s is an %s address, want %s", a, got, want)
	}
	return nil
}

func checkExecutor(cfg lb.Config) error {
	ex := cfg.Executor
	for _, f := range []struct {
		field string
		a     netip.Addr
		v4    bool
	}{{"nfa", ex.NFA, true}, {"nfa", ex.NFA6, false}, {"clientgateway", ex.ClientGateway, true}, {"clientgateway", ex.ClientGateway6, false}} {
		if err := checkOptional(f.field, "", f.a, f.v4); err != nil {
			return err
		}
	}
	for _, a := range []netip.Addr{ex.NFA, ex.NFA6} {
		if ci, ok := findCluster(cfg.Clusters, a); ok && a.IsValid() {
			return lb.Errorf("cluster", cfg.Clusters[ci].Address.String(), "equals the non-forwarding address (nfa)")
		}
	}
	if ex.FinTimeout < 1 || ex.FinTimeout > lb.MaxTimeout {
		return lb.Errorf("fintimeout", "", "%d is outside 1..%d seconds", ex.FinTimeout, lb.MaxTimeout)
	}
	if ex.Started && ex.Interface == "" {
		return lb.Errorf("interface", "", "the executor is started but has no interface")
	}
	if ex.XDPMode > lb.XDPGeneric {
		return lb.Errorf("xdp-mode", "", "unknown mode %d", ex.XDPMode)
	}
	return nil
}

func checkCluster(cl lb.Cluster, ex lb.Executor) error {
	obj := cl.Address.String()
	if err := lb.CheckUnicast("cluster", obj, cl.Address); err != nil {
		return err
	}
	if cl.Address == ex.NFA || cl.Address == ex.NFA6 {
		return lb.Errorf("cluster", obj, "equals the non-forwarding address (nfa)")
	}
	if err := cl.Proportions.Check(obj); err != nil {
		return err
	}
	for _, m := range cl.Metrics {
		if err := checkMetricName(obj, m); err != nil {
			return err
		}
	}
	for i := range cl.Metrics {
		if slices.Contains(cl.Metrics[:i], cl.Metrics[i]) {
			return lb.Errorf("metric", obj, "%q added twice", cl.Metrics[i])
		}
	}
	return nil
}

func checkPort(cl *lb.Cluster, p *lb.Port) error {
	obj := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}.String()
	switch {
	case p.Number == 0:
		return lb.Errorf("port", obj, "port 0 is not a valid port (want 1..65535)")
	case p.Protocol < lb.TCP || p.Protocol > lb.Both:
		return lb.Errorf("protocol", obj, "unknown protocol %d", p.Protocol)
	case p.Method != lb.MAC && p.Method != lb.NAT:
		return lb.Errorf("method", obj, "unknown method %d", p.Method)
	case p.StickyTime > lb.MaxTimeout:
		return lb.Errorf("stickytime", obj, "%d is outside 0..%d seconds", p.StickyTime, lb.MaxTimeout)
	case int(p.StickyMask) > cl.Address.BitLen():
		return lb.Errorf("stickymask", obj, "%d is outside 0..%d bits (an %s cluster)", p.StickyMask, cl.Address.BitLen(), family(cl.Address))
	case p.Selection > lb.SelectConnAffin:
		return lb.Errorf("selectionalgorithm", obj, "unknown selection algorithm %d", p.Selection)
	case p.MaxHalfOpen > lb.MaxHalfOpen:
		return lb.Errorf("maxhalfopen", obj, "%d is outside 0..%d", p.MaxHalfOpen, lb.MaxHalfOpen)
	case p.StaleTimeout < 1 || p.StaleTimeout > lb.MaxTimeout:
		return lb.Errorf("staletimeout", obj, "%d is outside 1..%d seconds", p.StaleTimeout, lb.MaxTimeout)
	case p.WeightBound < 1 || p.WeightBound > lb.MaxWeightBound:
		return lb.Errorf("weightbound", obj, "%d is outside 1..%d", p.WeightBound, lb.MaxWeightBound)
	case p.TableSize != 0 && !lb.ValidTableSize(p.TableSize):
		return lb.Errorf("tablesize", obj, "%d is not a prime in %d..%d (or 0: chosen from the number of servers)",
			p.TableSize, lb.MinTableSize, lb.MaxTableSize)
	}
	return nil
}

// checkCrossPorts checks the crossport links of a cluster's ports.
func checkCrossPorts(cl *lb.Cluster) error {
	for i := range cl.Ports {
		p := &cl.Ports[i]
		if p.CrossPort == 0 {
			continue
		}
		obj := lb.ServiceKey{Cluster: cl.Address, Port: p.Number}.String()
		oi, ok := findPort(cl.Ports, p.CrossPort)
		switch {
		case p.CrossPort == p.Number:
			return lb.Errorf("crossport", obj, "a port cannot share affinity with itself")
		case !ok:
			return lb.Errorf("crossport", obj, "port %d is not a port of cluster %s", p.CrossPort, cl.Address)
		case p.StickyTime == 0 || cl.Ports[oi].StickyTime == 0:
			return lb.Errorf("crossport", obj, "both ports need a stickytime above 0 to share affinity (port %d has %d, port %d has %d)",
				p.Number, p.StickyTime, p.CrossPort, cl.Ports[oi].StickyTime)
		}
	}
	return nil
}

func checkServer(p *lb.Port, obj string, s lb.Server, v4 bool) error {
	if err := checkOptional("server", obj, s.Address, v4); err != nil {
		return err
	}
	if err := checkNAT(p, obj, s, v4); err != nil {
		return err
	}
	if s.Weight > p.WeightBound {
		return lb.Errorf("weight", obj, "%d is outside 0..%d (the port's weightbound)", s.Weight, p.WeightBound)
	}
	for _, f := range []struct{ name, v string }{{"advisorrequest", s.AdvisorRequest}, {"advisorresponse", s.AdvisorResponse}} {
		if len(f.v) > lb.MaxAdvisorText {
			return lb.Errorf(f.name, obj, "%d bytes, more than %d (a probe sends the request, or looks for the response, at every interval)", len(f.v), lb.MaxAdvisorText)
		}
	}
	return nil
}

// checkNAT checks a server's NAT settings: required (return address) and
// of the cluster's family on a NAT port, absent on a MAC one.
func checkNAT(p *lb.Port, obj string, s lb.Server, v4 bool) error {
	if p.Method != lb.NAT {
		switch {
		case s.MapPort != 0:
			return lb.Errorf("mapport", obj, "applies to method nat only (the port's method is %s)", p.Method)
		case s.ReturnAddress.IsValid():
			return lb.Errorf("returnaddress", obj, "applies to method nat only (the port's method is %s)", p.Method)
		case s.Router.IsValid():
			return lb.Errorf("router", obj, "applies to method nat only: MAC forwarding reaches servers on the executor's segment (the port's method is %s)", p.Method)
		}
		return nil
	}
	if !s.ReturnAddress.IsValid() {
		return lb.Errorf("returnaddress", obj, "a server of a nat port needs a return address (--returnaddress)")
	}
	if err := checkOptional("returnaddress", obj, s.ReturnAddress, v4); err != nil {
		return err
	}
	if err := checkOptional("router", obj, s.Router, v4); err != nil {
		return err
	}
	if s.Router == s.Address {
		return lb.Errorf("router", obj, "%s is the server itself; leave router unset for a server on the executor's segment", s.Router)
	}
	return nil
}

var roleFields = [nRoles]string{"server", "router", "returnaddress"}

// checkRoles refuses an address a server uses (in role r) that plays
// another role that cannot go with it: a server, router or return address
// that is a cluster address or an NFA would loop packets back, and a
// return address that is also a server or a router would take their
// traffic.
func checkRoles(cfg lb.Config, u counter, a netip.Addr, r int, obj string) error {
	field := roleFields[r]
	ex := cfg.Executor
	if _, ok := findCluster(cfg.Clusters, a); ok {
		return lb.Errorf(field, obj, "%s is a cluster address", a)
	}
	if a == ex.NFA || a == ex.NFA6 {
		return lb.Errorf(field, obj, "%s is the non-forwarding address (nfa)", a)
	}
	if r == roleReturn && u.count(a, roleServer)+u.count(a, roleRouter) > 0 {
		return lb.Errorf(field, obj, "%s is also a server or a router", a)
	}
	if r != roleReturn && u.count(a, roleReturn) > 0 {
		return lb.Errorf(field, obj, "%s is also a return address", a)
	}
	return nil
}

// roleConflict names a server that uses a (a new cluster address or NFA),
// looking through the whole configuration: it runs only to word a refusal.
func roleConflict(cfg lb.Config, a netip.Addr) error {
	what := "a cluster address"
	if a == cfg.Executor.NFA || a == cfg.Executor.NFA6 {
		what = "the non-forwarding address (nfa)"
	}
	for _, cl := range cfg.Clusters {
		for _, p := range cl.Ports {
			for _, s := range p.Servers {
				for r, x := range roles(s) {
					if x == a {
						return lb.Errorf(roleFields[r], lb.BackendKey{Service: lb.ServiceKey{Cluster: cl.Address, Port: p.Number}, Server: s.Address}.String(),
							"%s is %s", a, what)
					}
				}
			}
		}
	}
	return lb.Errorf("cluster", a.String(), "is used by a server")
}

// family names an address's family for messages.
func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

func checkManager(m lb.Manager) error {
	switch {
	case !(m.Interval >= 0.1 && m.Interval <= 3600):
		return lb.Errorf("interval", "manager", "%g is outside 0.1..3600 seconds", m.Interval)
	case m.Refresh < 1 || m.Refresh > 100:
		return lb.Errorf("refresh", "manager", "%d is outside 1..100 cycles", m.Refresh)
	case !(m.Smoothing >= 1 && m.Smoothing <= 100):
		return lb.Errorf("smoothing", "manager", "%g is outside 1..100", m.Smoothing)
	case !(m.Sensitivity >= 0 && m.Sensitivity <= 100):
		return lb.Errorf("sensitivity", "manager", "%g is outside 0..100 percent", m.Sensitivity)
	}
	return nil
}

func checkAdvisor(a lb.Advisor) error {
	obj := a.Key()
	switch {
	case !(a.Interval >= 0.1 && a.Interval <= 3600):
		return lb.Errorf("interval", obj, "%g is outside 0.1..3600 seconds", a.Interval)
	case !(a.ConnectTimeout >= 0.01 && a.ConnectTimeout <= 600):
		return lb.Errorf("connecttimeout", obj, "%g is outside 0.01..600 seconds", a.ConnectTimeout)
	case !(a.ReceiveTimeout >= 0.01 && a.ReceiveTimeout <= 600):
		return lb.Errorf("receivetimeout", obj, "%g is outside 0.01..600 seconds", a.ReceiveTimeout)
	case a.Retries < 0 || a.Retries > 10:
		return lb.Errorf("retries", obj, "%d is outside 0..10", a.Retries)
	case a.Rise < 1 || a.Rise > 100:
		return lb.Errorf("rise", obj, "%d is outside 1..100", a.Rise)
	case a.Fall < 1 || a.Fall > 100:
		return lb.Errorf("fall", obj, "%d is outside 1..100", a.Fall)
	}
	if a.Name == "exec" {
		if a.Program == "" {
			return lb.Errorf("program", obj, "the exec advisor needs --program")
		}
		if a.Mode != "normal" && a.Mode != "replace" {
			return lb.Errorf("mode", obj, "%q is not normal or replace", a.Mode)
		}
	} else if a.Program != "" || a.Mode != "" || len(a.Args) > 0 {
		return lb.Errorf("program", obj, "only the exec advisor takes a program")
	}
	return nil
}

func checkMetricServer(m lb.MetricServer) error {
	switch m.Source {
	case "dlbmetricd", "prometheus":
	default:
		return lb.Errorf("source", "metric", "%q is not dlbmetricd or prometheus", m.Source)
	}
	if m.Port == 0 {
		return lb.Errorf("port", "metric", "port 0 is not a valid port")
	}
	if m.Source == "prometheus" && m.Path != "" && !strings.HasPrefix(m.Path, "/") {
		return lb.Errorf("path", "metric", "%q does not start with /", m.Path)
	}
	return nil
}

// checkMetricName refuses metric names that could not be a file or a
// Prometheus metric name.
func checkMetricName(cluster, name string) error {
	if name == "" || len(name) > 200 {
		return lb.Errorf("metric", cluster, "%q is not a metric name", name)
	}
	for _, r := range name {
		if !(r == '_' || r == ':' || r == '-' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '{' || r == '}' || r == '=' || r == '"' || r == ',') {
			return lb.Errorf("metric", cluster, "%q has the character %q", name, r)
		}
	}
	return nil
}
