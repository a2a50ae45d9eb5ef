package config

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/dlbproject/dlb/pkg/lb"
)

// Step is one change that makes a running configuration equal to another
// (a configuration file), as the operation that makes it: what "dlbctl
// apply --diff" prints.
type Step struct {
	// Kind says whether the step adds, removes or changes something.
	Kind Kind
	// Op is the operation.
	Op Op
	// Was gives the old values of what a set changes ("weight 10"),
	// in the same words; empty for other steps.
	Was string
}

// String returns the step as a dlbctl command, with the old values of a
// set in a comment: "port set 198.18.0.100@80 weightbound 10  # was 20".
func (s Step) String() string {
	if s.Was == "" {
		return s.Op.Command()
	}
	return s.Op.Command() + "  # was " + s.Was
}

// Plan returns the steps that turn old into next, in an order in which
// they make next when applied as one batch (Editor.Prepare): advisors are
// stopped first and started last (they need their ports), removals come
// before additions, ports before their servers, a port's settings before
// its servers' weights (which its weightbound bounds), and clusters'
// proportions after the advisors and metrics whose start raises them; the
// BGP speaker is set before neighbours are added to it, after the
// executor (whose nfa a neighbour may not be) and before the clusters (a
// neighbour leaving an address to a cluster goes first).
// Both configurations must be sorted (lb.Config.Sort); next should be
// valid. Nothing changed gives no steps.
func Plan(old, next lb.Config) []Step {
	pl := &planner{}
	ch := Diff(old, next)
	pl.advisorsStopped(old, next)
	pl.removals(old, ch)
	pl.executor(old.Executor, next.Executor)
	pl.bgp(old.BGP, next.BGP)
	pl.clusters(old, next, ch)
	pl.announce(old, next, ch)
	pl.metricServer(old.MetricServer, next.MetricServer)
	pl.metrics(old, next)
	pl.advisorsStarted(old, next)
	pl.proportions(old, next)
	pl.quiesce(old, next, ch)
	pl.manager(old.Manager, next.Manager)
	pl.ha(old.HA, next.HA)
	return pl.steps
}

type planner struct {
	steps []Step
}

func (pl *planner) add(kind Kind, op Op, was string) {
	pl.steps = append(pl.steps, Step{Kind: kind, Op: op, Was: was})
}

// sortedKeys returns a map's keys in order.
func sortedKeys[K comparable, V any](m map[K]V, cmp func(a, b K) int) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, cmp)
	return out
}

func compareBackend(a, b lb.BackendKey) int {
	if c := compareService(a.Service, b.Service); c != 0 {
		return c
	}
	return a.Server.Compare(b.Server)
}

// advisorTarget is an advisor's target: cluster@port, or @port for
// every cluster.
func advisorTarget(a lb.Advisor) string {
	c := ""
	if a.Cluster.IsValid() {
		c = a.Cluster.String()
	}
	return c + "@" + uitoa(uint64(a.Port))
}

// restarts reports whether an advisor that changed from o to n must be
// stopped and started again: "advisor set" cannot clear its arguments.
func restarts(o, n lb.Advisor) bool {
	return len(n.Args) == 0 && len(o.Args) > 0
}

func advisorsByKey(as []lb.Advisor) map[string]lb.Advisor {
	m := make(map[string]lb.Advisor, len(as))
	for _, a := range as {
		m[a.Key()] = a
	}
	return m
}

func (pl *planner) advisorsStopped(old, next lb.Config) {
	nk := advisorsByKey(next.Advisors)
	for _, a := range old.Advisors {
		n, kept := nk[a.Key()]
		if !kept || restarts(a, n) {
			pl.add(Removed, Op{Object: Advisor, Action: Stop, Target: advisorTarget(a), Params: []Param{P("advisor", a.Name)}}, "")
		}
	}
}

// removals removes the clusters, ports and servers next does not have.
func (pl *planner) removals(old lb.Config, ch Change) {
	for _, a := range sortedKeys(ch.Clusters, netip.Addr.Compare) {
		if ch.Clusters[a] == Removed {
			pl.add(Removed, Op{Object: Cluster, Action: Remove, Target: a.String()}, "")
		}
	}
	for _, k := range sortedKeys(ch.Ports, compareService) {
		if ch.Ports[k] == Removed && ch.Clusters[k.Cluster] != Removed {
			pl.add(Removed, Op{Object: Port, Action: Remove, Target: k.String()}, "")
		}
	}
	for _, k := range sortedKeys(ch.Servers, compareBackend) {
		if ch.Servers[k] == Removed && ch.Ports[k.Service] != Removed {
			pl.add(Removed, Op{Object: Server, Action: Remove, Target: k.String()}, "")
		}
	}
}

// text is a field's value as an operation's parameter takes it.
func text[T any](f field[T], x *T) string {
	n := f.node(x)
	switch {
	case n.Value == "" && n.Tag == "!!str" && (f.key == "returnaddress" || f.key == "router"):
		return "none"
	case n.Tag == "!!bool":
		return yesNo(n.Value == "true")
	}
	return n.Value
}

// changedParams returns the parameters that set what differs between o
// and n among the fields named (all of fs when names is nil), and the old
// values in the same words.
func changedParams[T any](fs []field[T], o, n *T, names []string) ([]Param, string) {
	var ps []Param
	var was []string
	for _, f := range fs {
		if names != nil && !slices.Contains(names, f.key) {
			continue
		}
		if f.same(o, n) {
			continue
		}
		ps = append(ps, P(f.key, text(f, n)))
		was = append(was, f.key+" "+quote(text(f, o)))
	}
	return ps, strings.Join(was, " ")
}

// executor stops, sets and starts the executor. An address sets the value
// of its family; "none" clears both, so a family that loses its value is
// cleared with "none" and the other set again.
//
// A stopped executor keeps the interface and mode "executor start" gave
// it (a later start without --interface uses them): they change by
// starting it there and stopping it again. No command takes them away;
// for that Plan lists a stop that names the interface left behind. A
// running executor given another interface or mode is not stopped: its
// start there moves it, its tables kept.
func (pl *planner) executor(o, n lb.Executor) {
	started := o.Started
	moved := o.Started && n.Started && (o.Interface != n.Interface || o.XDPMode != n.XDPMode)
	if o.Started && !n.Started {
		pl.add(Removed, Op{Object: Executor, Action: Stop}, "")
		started = false
	}
	for _, kv := range []struct {
		key        string
		o4, o6     netip.Addr
		n4, n6     netip.Addr
		was4, was6 string
	}{
		{key: "nfa", o4: o.NFA, o6: o.NFA6, n4: n.NFA, n6: n.NFA6},
		{key: "clientgateway", o4: o.ClientGateway, o6: o.ClientGateway6, n4: n.ClientGateway, n6: n.ClientGateway6},
	} {
		if kv.o4 == kv.n4 && kv.o6 == kv.n6 {
			continue
		}
		var olds []string
		for _, a := range []netip.Addr{kv.o4, kv.o6} {
			if a.IsValid() {
				olds = append(olds, a.String())
			}
		}
		was := "none"
		if len(olds) > 0 {
			was = strings.Join(olds, " ")
		}
		set := func(a netip.Addr) {
			pl.add(Changed, Op{Object: Executor, Action: Set, Params: []Param{P(kv.key, addrText(a))}}, kv.key+" "+was)
		}
		if (kv.o4.IsValid() && !kv.n4.IsValid()) || (kv.o6.IsValid() && !kv.n6.IsValid()) {
			set(netip.Addr{})
			for _, a := range []netip.Addr{kv.n4, kv.n6} {
				if a.IsValid() {
					set(a)
				}
			}
			continue
		}
		if kv.o4 != kv.n4 {
			set(kv.n4)
		}
		if kv.o6 != kv.n6 {
			set(kv.n6)
		}
	}
	if o.FinTimeout != n.FinTimeout {
		pl.add(Changed, Op{Object: Executor, Action: Set, Params: []Param{P("fintimeout", uitoa(uint64(n.FinTimeout)))}},
			"fintimeout "+uitoa(uint64(o.FinTimeout)))
	}
	start := Op{Object: Executor, Action: Start, Params: []Param{P("interface", n.Interface), P("xdp-mode", n.XDPMode.String())}}
	switch {
	case moved:
		pl.add(Changed, start, "interface "+quote(o.Interface)+" xdp-mode "+o.XDPMode.String())
	case n.Started && !started:
		pl.add(Added, start, "")
	case n.Started || (o.Interface == n.Interface && o.XDPMode == n.XDPMode):
	case n.Interface != "":
		was := "interface " + quote(o.Interface) + " xdp-mode " + o.XDPMode.String()
		pl.add(Changed, start, was)
		pl.add(Changed, Op{Object: Executor, Action: Stop}, was)
	default:
		pl.add(Changed, Op{Object: Executor, Action: Stop}, "interface "+quote(o.Interface)+" (kept: no command clears it)")
	}
}

// addrText is an address as a parameter takes it: "none" for no address.
func addrText(a netip.Addr) string {
	if !a.IsValid() {
		return "none"
	}
	return a.String()
}

// clusters adds and changes clusters, ports and servers (their
// proportions and metrics come later).
func (pl *planner) clusters(old, next lb.Config, ch Change) {
	for _, a := range sortedKeys(ch.Clusters, netip.Addr.Compare) {
		switch ch.Clusters[a] {
		case Added:
			op := Op{Object: Cluster, Action: Add, Target: a.String()}
			if next.Cluster(a).Configure {
				op.Params = []Param{P("configure", "yes")}
			}
			if ph := next.Cluster(a).PrimaryHost; ph.IsValid() {
				op.Params = append(op.Params, P("primaryhost", ph.String()))
			}
			pl.add(Added, op, "")
		case Changed:
			o, n := old.Cluster(a), next.Cluster(a)
			if o.Configure != n.Configure {
				pl.add(Changed, Op{Object: Cluster, Action: Set, Target: a.String(), Params: []Param{P("configure", yesNo(n.Configure))}},
					"configure "+yesNo(o.Configure))
			}
			if o.PrimaryHost != n.PrimaryHost {
				pl.add(Changed, Op{Object: Cluster, Action: Set, Target: a.String(), Params: []Param{P("primaryhost", addrText(n.PrimaryHost))}},
					"primaryhost "+addrText(o.PrimaryHost))
			}
		}
	}
	for _, k := range sortedKeys(ch.Ports, compareService) {
		kind := ch.Ports[k]
		if kind == Removed {
			continue
		}
		n := next.Cluster(k.Cluster).Port(k.Port)
		switch kind {
		case Added:
			def := lb.NewPort(k.Port)
			ps, _ := changedParams(portFields, &def, n, nil)
			pl.add(Added, Op{Object: Port, Action: Add, Target: k.String(), Params: ps}, "")
		case Changed:
			o := old.Cluster(k.Cluster).Port(k.Port)
			ps, was := changedParams(portFields, o, n, nil)
			pl.add(Changed, Op{Object: Port, Action: Set, Target: k.String(), Params: ps}, was)
		}
	}
	// The settings "server add" and "server set" take.
	settings := []string{"weight", "fixedweight", "advisorrequest", "advisorresponse", "mapport", "returnaddress", "router"}
	var down, up []lb.BackendKey
	for _, k := range sortedKeys(ch.Servers, compareBackend) {
		kind := ch.Servers[k]
		if kind == Removed {
			continue
		}
		p := next.Cluster(k.Service.Cluster).Port(k.Service.Port)
		switch kind {
		case Added:
			n := p.Server(k.Server)
			def := newServer(p, k.Server)
			ps, _ := changedParams(serverFields, &def, n, settings)
			// The weight always: it is what an operator reads a server by.
			if !slices.ContainsFunc(ps, func(x Param) bool { return x.Name == "weight" }) {
				ps = append([]Param{P("weight", uitoa(uint64(n.Weight)))}, ps...)
			}
			pl.add(Added, Op{Object: Server, Action: Add, Target: k.String(), Params: ps}, "")
			if n.Down {
				down = append(down, k)
			}
		case Changed:
			o, n := old.Cluster(k.Service.Cluster).Port(k.Service.Port).Server(k.Server), p.Server(k.Server)
			if ps, was := changedParams(serverFields, o, n, settings); len(ps) > 0 {
				pl.add(Changed, Op{Object: Server, Action: Set, Target: k.String(), Params: ps}, was)
			}
			switch {
			case n.Down && !o.Down:
				down = append(down, k)
			case !n.Down && o.Down:
				up = append(up, k)
			}
		}
	}
	for _, k := range down {
		pl.add(Changed, Op{Object: Server, Action: Down, Target: k.String()}, "")
	}
	for _, k := range up {
		pl.add(Changed, Op{Object: Server, Action: Up, Target: k.String()}, "")
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// metricServerParams are the parameters of "metric set" by the file's
// keys.
var metricServerParams = map[string]string{"source": "source", "port": "metricport", "secret-file": "secretfile", "path": "path"}

// metricServer sets how the manager reaches the load agents. Changing the
// source resets the port and the path to the new source's, so the other
// values are set after it, where they differ from those.
func (pl *planner) metricServer(o, n lb.MetricServer) {
	if o == n {
		return
	}
	base := o
	if o.Source != n.Source {
		if def, known := metricDefaults(n.Source); known {
			base.Port, base.Path = def.Port, def.Path
		}
		base.Source = n.Source
	}
	var ps []Param
	var was []string
	for _, f := range metricServerFields {
		if f.key != "source" && f.same(&base, &n) {
			continue
		}
		if f.key == "source" && o.Source == n.Source {
			continue
		}
		ps = append(ps, P(metricServerParams[f.key], text(f, &n)))
		was = append(was, metricServerParams[f.key]+" "+quote(text(f, &o)))
	}
	pl.add(Changed, Op{Object: Metric, Action: Set, Params: ps}, strings.Join(was, " "))
}

// metrics removes and adds clusters' metrics: the order of a cluster's
// metrics is kept, so from the first one that differs on, the old ones
// are removed and the new ones added.
func (pl *planner) metrics(old, next lb.Config) {
	for i := range next.Clusters {
		n := &next.Clusters[i]
		var om []string
		if o := old.Cluster(n.Address); o != nil {
			om = o.Metrics
		}
		k := 0
		for k < len(om) && k < len(n.Metrics) && om[k] == n.Metrics[k] {
			k++
		}
		if k < len(om) {
			pl.add(Removed, Op{Object: Metric, Action: Remove, Target: n.Address.String(), Params: []Param{P("metrics", om[k:]...)}}, "")
		}
		if k < len(n.Metrics) {
			pl.add(Added, Op{Object: Metric, Action: Add, Target: n.Address.String(), Params: []Param{P("metrics", n.Metrics[k:]...)}}, "")
		}
	}
}

func (pl *planner) advisorsStarted(old, next lb.Config) {
	ok := advisorsByKey(old.Advisors)
	for i := range next.Advisors {
		n := &next.Advisors[i]
		o, kept := ok[n.Key()]
		name := P("advisor", n.Name)
		if !kept || restarts(o, *n) {
			def := newAdvisor(n.Name, n.Cluster, n.Port)
			ps, _ := changedParams(advisorFields, &def, n, nil)
			pl.add(Added, Op{Object: Advisor, Action: Start, Target: advisorTarget(*n), Params: append([]Param{name}, argsParam(ps, n.Args)...)}, "")
			continue
		}
		if ps, was := changedParams(advisorFields, &o, n, nil); len(ps) > 0 {
			pl.add(Changed, Op{Object: Advisor, Action: Set, Target: advisorTarget(*n), Params: append([]Param{name}, argsParam(ps, n.Args)...)}, was)
		}
	}
}

// argsParam gives the exec advisor's arguments as one parameter of
// several values (a field's text is one value).
func argsParam(ps []Param, args []string) []Param {
	for i := range ps {
		if ps[i].Name == "args" {
			ps[i].Values = slices.Clone(args)
		}
	}
	return ps
}

// proportions sets the clusters' proportions where the steps so far (run
// on a draft of old: starting advisors and adding metrics raise them)
// leave them different from next's.
func (pl *planner) proportions(old, next lb.Config) {
	d := newDraft(old)
	ed := &Editor{}
	sim := true
	for i := range pl.steps {
		if err := ed.apply(d, &pl.steps[i].Op); err != nil {
			sim = false // not expected: set every proportion that differs from old
			break
		}
	}
	for i := range next.Clusters {
		n := &next.Clusters[i]
		var have lb.Proportions
		if sim {
			if c := d.cfg.Cluster(n.Address); c != nil {
				have = c.Proportions
			}
		} else if o := old.Cluster(n.Address); o != nil {
			have = o.Proportions
		}
		if have == n.Proportions {
			continue
		}
		pr := n.Proportions
		was := ""
		if o := old.Cluster(n.Address); o != nil {
			was = "proportions " + o.Proportions.String()
		}
		pl.add(Changed, Op{Object: Cluster, Action: Set, Target: n.Address.String(),
			Params: []Param{P("proportions", itoa(pr.Active), itoa(pr.New), itoa(pr.Port), itoa(pr.System))}}, was)
	}
}

// quiesce quiesces and unquiesces servers. "quiesce --now" sticks until
// "unquiesce": going from it to a plain quiesce takes both.
func (pl *planner) quiesce(old, next lb.Config, ch Change) {
	for _, k := range sortedKeys(ch.Servers, compareBackend) {
		kind := ch.Servers[k]
		if kind == Removed {
			continue
		}
		n, _ := serverAt(next, k)
		var o lb.Server
		if kind == Changed {
			o, _ = serverAt(old, k)
		}
		if o.Quiesced == n.Quiesced && o.QuiesceNow == n.QuiesceNow {
			continue
		}
		t := k.String()
		if o.Quiesced && (!n.Quiesced || (o.QuiesceNow && !n.QuiesceNow)) {
			pl.add(Changed, Op{Object: Manager, Action: Unquiesce, Target: t}, "")
		}
		if n.Quiesced {
			op := Op{Object: Manager, Action: Quiesce, Target: t}
			if n.QuiesceNow {
				op.Params = []Param{P("now", "yes")}
			}
			pl.add(Changed, op, "")
		}
	}
}

func serverAt(cfg lb.Config, k lb.BackendKey) (lb.Server, bool) {
	s := cfg.Server(k)
	if s == nil {
		return lb.Server{}, false
	}
	return *s, true
}

func (pl *planner) manager(o, n lb.Manager) {
	if ps, was := changedParams(managerFields, &o, &n, []string{"interval", "refresh", "smoothing", "sensitivity"}); len(ps) > 0 {
		pl.add(Changed, Op{Object: Manager, Action: Set, Params: ps}, was)
	}
	switch {
	case n.Started && !o.Started:
		pl.add(Added, Op{Object: Manager, Action: Start}, "")
	case !n.Started && o.Started:
		pl.add(Removed, Op{Object: Manager, Action: Stop}, "")
	}
}

func uitoa(v uint64) string { return strconv.FormatUint(v, 10) }

func itoa(v int) string { return strconv.Itoa(v) }

// commandFlags are the parameters dlbctl takes as flags (--name value)
// rather than as IBM's keyword-value pairs after the target, and the
// flag's name where it differs from the parameter's.
var commandFlags = map[Object]map[string]string{
	Executor: {"interface": "interface", "xdp-mode": "xdp-mode"},
	Manager:  {"now": "now"},
	Advisor: {"interval": "interval", "connecttimeout": "connecttimeout", "receivetimeout": "receivetimeout",
		"retries": "retries", "rise": "rise", "fall": "fall", "program": "program", "args": "arg", "mode": "mode"},
	Metric:  {"source": "source", "metricport": "port", "secretfile": "secret-file", "path": "path"},
	Cluster: {"announce": "announce", "communities": "community", "med": "med"},
	BGP:     {"asn": "asn", "routerid": "routerid", "listenport": "listen-port"},
	Neighbor: {"remoteas": "remote-as", "passwordfile": "password-file", "holdtime": "holdtime",
		"multihop": "multihop", "bfd": "bfd", "neighborport": "port"},
}

// Command returns the operation as the dlbctl command that makes it
// ("server add 198.18.0.100@80@198.18.0.21 weight 10"): what "dlbctl
// file load" reads, without the leading "dlbctl".
func (op Op) Command() string {
	switch op.Object {
	case Heartbeat, Backup, Reach:
		return haCommand(op)
	}
	words := []string{string(op.Object), string(op.Action)}
	params := op.Params
	switch op.Object {
	case Advisor:
		// advisor ACTION NAME [CLUSTER@]PORT
		var name string
		params = nil
		for _, p := range op.Params {
			if p.Name == "advisor" && len(p.Values) == 1 {
				name = p.Values[0]
				continue
			}
			params = append(params, p)
		}
		words = append(words, quote(name), strings.TrimPrefix(op.Target, "@"))
	case Metric:
		if op.Action == Add || op.Action == Remove {
			// metric add CLUSTER@METRIC+METRIC
			var names []string
			params = nil
			for _, p := range op.Params {
				if p.Name == "metrics" {
					names = append(names, p.Values...)
					continue
				}
				params = append(params, p)
			}
			words = append(words, quote(op.Target+"@"+strings.Join(names, "+")))
			break
		}
		fallthrough
	default:
		if op.Target != "" {
			words = append(words, quote(op.Target))
		}
	}
	flags := commandFlags[op.Object]
	for _, p := range params {
		if flag, ok := flags[p.Name]; ok {
			if flag == "now" { // a switch: no value
				if len(p.Values) == 1 && p.Values[0] == "yes" {
					words = append(words, "--now")
				}
				continue
			}
			if len(p.Values) == 0 {
				words = append(words, "--"+flag)
			}
			for _, v := range p.Values {
				words = append(words, "--"+flag, quote(v))
			}
			continue
		}
		words = append(words, p.Name)
		for _, v := range p.Values {
			words = append(words, quote(v))
		}
	}
	if op.Object == Neighbor {
		return "bgp " + strings.Join(words, " ")
	}
	return strings.Join(words, " ")
}
