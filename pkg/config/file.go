package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/dlbproject/dlb/internal/suggest"
	"github.com/dlbproject/dlb/pkg/lb"
)

// The configuration file: the whole configuration in YAML (or JSON, which
// YAML reads too), the same model as "dlbctl file save" writes as a
// script. ReadFile reads it, MarshalFile and MarshalFileJSON write it.
//
//	executor:            # the forwarder ("executor start/set")
//	  started: true
//	  interface: eth0
//	  xdp-mode: auto     # auto, native or generic
//	  nfa: 198.18.0.2    # nfa6, clientgateway, clientgateway6
//	  fintimeout: 60
//	manager:             # started, interval, refresh, smoothing, sensitivity
//	  started: true
//	metricserver:        # source, port, secret-file, path
//	  secret-file: /etc/dlb/metric.secret
//	clusters:
//	  - address: 198.18.0.100
//	    configure: true  # announce, communities, med (BGP)
//	    proportions: {active: 49, new: 50, port: 1, system: 0}
//	    metrics: [cpuload]
//	    ports:
//	      - port: 80     # protocol, method, stickytime, stickymask, crossport,
//	                     # selectionalgorithm, maxhalfopen, staletimeout,
//	                     # weightbound, alldown, tablesize
//	        servers:
//	          - address: 198.18.0.21   # weight, fixedweight, down,
//	            weight: 10             # quiesced (true, false or now),
//	                                   # advisorrequest, advisorresponse,
//	                                   # mapport, returnaddress, router
//	advisors:
//	  - name: http       # cluster (none: every cluster balancing the port),
//	    port: 80         # interval, connecttimeout, receivetimeout, retries,
//	                     # rise, fall, program, args, mode
//	ha:                  # high availability: role, recovery, port, secret-file,
//	                     # interval, count, heartbeats, reach (hafile.go)
//	bgp:                 # BGP: asn, routerid, listen-port, neighbors (bgpfile.go)
//
// Keys are dlbctl's keywords. A key left out (or given no value) takes the
// default "dlbctl ... add" would give it: package lb's defaults; a
// server's weight is its port's weightbound; a metric server's port and
// path follow its source; a cluster's proportions are 50 50 0 0, raised
// as starting an advisor or adding a metric raises them. Unknown keys,
// values of the wrong kind and every refusal of the model are errors that
// name the line and the field's path (clusters[0].ports[1].weightbound).

// FileError is a refusal of a configuration file: where, and why.
type FileError struct {
	// Line is the line of the offending key or value (from 1), or 0 when
	// the refusal is not tied to one place in the file.
	Line int
	// Path names the offending field (clusters[0].ports[1].weightbound),
	// or is empty for the file as a whole.
	Path string
	// Msg says what was wrong.
	Msg string
	// Err is the refusal in the model's terms: Field names the field as
	// dlbctl does.
	Err *lb.FieldError
}

// Error formats the refusal as "line N: path: message".
func (e *FileError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the refusal in the model's terms.
func (e *FileError) Unwrap() error { return e.Err }

// maxAliasNodes bounds the values a file's aliases may add once
// expanded: a few aliases of aliases would otherwise expand to billions.
const maxAliasNodes = 1 << 18

var topKeys = []string{"executor", "manager", "metricserver", "clusters", "advisors", "ha", "bgp"}

// File is a configuration file that ReadFile read: the configuration it
// describes, and where each of its objects is in the file.
type File struct {
	// Config is the configuration, sorted (lb.Config.Sort) and valid.
	Config lb.Config

	p *fileParser
}

// ReadFile reads a configuration file (YAML, or JSON) into the
// configuration it describes, sorted and validated whole (opts.KnownAdvisor
// checks the advisors' names). A refusal is a *FileError.
func ReadFile(data []byte, opts Options) (*File, error) {
	p := &fileParser{objects: map[string]*objectPos{}}
	cfg, err := p.parse(data)
	if err != nil {
		return nil, err
	}
	f := &File{Config: cfg, p: p}
	if err := Validate(cfg); err != nil {
		return nil, f.Place(err)
	}
	// As "advisor start" does: an advisor needs a port to probe.
	for _, a := range cfg.Advisors {
		if !probes(cfg, a) {
			return nil, f.Place(lb.Errorf("port", a.Key(), "no configured cluster balances port %d", a.Port))
		}
	}
	if opts.KnownAdvisor != nil {
		for _, a := range cfg.Advisors {
			if a.Name == "exec" {
				continue
			}
			if err := opts.KnownAdvisor(a.Name); err != nil {
				return nil, f.Place(lb.Errorf("advisor", a.Key(), "%v", err))
			}
		}
	}
	return f, nil
}

// probes reports whether an advisor has a port to probe in cfg.
func probes(cfg lb.Config, a lb.Advisor) bool {
	for i := range cfg.Clusters {
		if cl := &cfg.Clusters[i]; a.Covers(cl.Address, a.Port) && cl.Port(a.Port) != nil {
			return true
		}
	}
	return false
}

// Place returns a refusal of the file's configuration (by the model, or
// by the engine applying it) as a *FileError on the line of the file that
// set the field it names, or on its object's line when the file left the
// field at its default. An error that names no field is returned as it is.
func (f *File) Place(err error) error {
	return f.p.place(err)
}

// objectPos is where an object of the file is: its path, its line, and
// its keys, so that a refusal of the model (which names the object and the
// field) can be placed on the line that set it.
type objectPos struct {
	path string
	line int
	keys map[string]*yaml.Node // key → its value node
}

type fileParser struct {
	// objects by the name the model's refusals give them: the cluster
	// address, cluster@port, cluster@port@server, the advisor's key,
	// "manager", "metric", and "" for the executor.
	objects map[string]*objectPos
}

// scriptWords begin the lines of a script of dlbctl commands.
var scriptWords = []string{"dlbctl", "executor", "cluster", "port", "server", "manager", "advisor", "metric", "highavailability", "bgp"}

// scriptLine says whether data is a script of dlbctl commands ("dlbctl
// file save" writes them), by its first line that is not blank or a
// comment, and returns that line's number.
func scriptLine(data []byte) (int, bool) {
	n, l := firstLine(data)
	word, _, _ := strings.Cut(l, " ")
	return n, slices.Contains(scriptWords, word) && strings.Contains(l, " ")
}

// FileLine says whether data is a configuration file rather than a
// script of dlbctl commands, by its first line that is not blank or a
// comment (a top-level key, or a JSON object), and returns that line's
// number: "dlbctl file load" refuses it, naming "dlbctl apply -f".
func FileLine(data []byte) (int, bool) {
	n, l := firstLine(data)
	key, _, _ := strings.Cut(l, ":")
	return n, strings.HasPrefix(l, "{") || strings.Contains(l, ":") && slices.Contains(topKeys, key)
}

// firstLine returns the first line of data that is not blank or a
// comment, trimmed, and its number (0, "": none).
func firstLine(data []byte) (int, string) {
	for i, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return i + 1, l
		}
	}
	return 0, ""
}

// yamlLine finds the line in the YAML library's error messages.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlError is the YAML library's refusal of the file as a *FileError,
// on its line when the library names one.
func yamlError(err error) error {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &FileError{Line: line, Msg: m[2], Err: lb.Errorf("file", "", "%s", m[2])}
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	return &FileError{Msg: msg, Err: lb.Errorf("file", "", "%s", msg)}
}

func (p *fileParser) parse(data []byte) (lb.Config, error) {
	cfg := lb.NewConfig()
	if line, ok := scriptLine(data); ok {
		return cfg, p.errAt(line, "", "file", "this is a script of dlbctl commands (as \"dlbctl file save\" writes), "+
			"not a configuration file: \"dlbctl file load FILE\" applies it")
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return cfg, nil // an empty file: nothing configured
		}
		return cfg, yamlError(err)
	}
	var more yaml.Node
	switch err := dec.Decode(&more); {
	case errors.Is(err, io.EOF):
	case err != nil:
		// Not a second document: what follows the first does not parse.
		return cfg, yamlError(err)
	default:
		return cfg, p.errAt(more.Line, "", "file", "a configuration file holds one YAML document (remove the second \"---\")")
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return cfg, nil
		}
		root = root.Content[0]
	}
	budget := maxAliasNodes
	if err := expandAliases(root, &budget, false); err != nil {
		return cfg, err
	}
	if isNull(root) {
		return cfg, nil
	}
	top, err := p.mapping(root, "", topKeys)
	if err != nil {
		return cfg, err
	}
	if n := top["executor"]; n != nil {
		if err := readObject(p, n, "executor", "", executorFields, &cfg.Executor); err != nil {
			return cfg, err
		}
	}
	if n := top["manager"]; n != nil {
		if err := readObject(p, n, "manager", "manager", managerFields, &cfg.Manager); err != nil {
			return cfg, err
		}
	}
	if n := top["metricserver"]; n != nil {
		if err := p.metricServer(n, &cfg.MetricServer); err != nil {
			return cfg, err
		}
	}
	explicit := map[netip.Addr]bool{} // clusters whose proportions the file gives
	if n := top["clusters"]; n != nil {
		if err := p.clusters(n, &cfg, explicit); err != nil {
			return cfg, err
		}
	}
	if n := top["bgp"]; n != nil {
		if err := p.bgpSection(n, &cfg.BGP); err != nil {
			return cfg, err
		}
	}
	if n := top["advisors"]; n != nil {
		if err := p.advisors(n, &cfg); err != nil {
			return cfg, err
		}
	}
	if n := top["ha"]; n != nil {
		if err := p.haSection(n, &cfg.HA); err != nil {
			return cfg, err
		}
	}
	cfg.Sort()
	for i := range cfg.Clusters {
		if cl := &cfg.Clusters[i]; !explicit[cl.Address] {
			cl.Proportions = impliedProportions(cl, cfg.Advisors)
		}
	}
	return cfg, nil
}

// expandAliases replaces every alias in the tree by the node it names,
// and refuses trees whose aliases would add more than *budget values.
func expandAliases(n *yaml.Node, budget *int, aliased bool) error {
	if aliased {
		*budget--
		if *budget < 0 {
			return &FileError{Line: n.Line, Msg: fmt.Sprintf("the file's aliases expand to more than %d values", maxAliasNodes),
				Err: lb.Errorf("file", "", "too many values")}
		}
	}
	for i, c := range n.Content {
		through := aliased
		if c.Kind == yaml.AliasNode {
			if c.Alias == nil {
				return &FileError{Line: c.Line, Msg: "alias to an unknown anchor", Err: lb.Errorf("file", "", "unknown anchor")}
			}
			n.Content[i] = c.Alias
			c, through = c.Alias, true
		}
		if err := expandAliases(c, budget, through); err != nil {
			return err
		}
	}
	return nil
}

// isNull reports whether n is an empty value ("key:", "~" or "null").
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// isEmpty reports whether n is null, an empty mapping or an empty list.
func isEmpty(n *yaml.Node) bool {
	return isNull(n) || (n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode) && len(n.Content) == 0
}

// errAt returns a refusal at a line and path; field names it as dlbctl
// does.
func (p *fileParser) errAt(line int, path, field, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if field == "" {
		field = "file" // the document as a whole
	}
	return &FileError{Line: line, Path: path, Msg: msg, Err: &lb.FieldError{Field: field, Msg: msg}}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// mapping returns the values of a mapping by key (null values left out:
// a key without a value takes its default), refusing keys that are not
// in allowed and keys given twice.
func (p *fileParser) mapping(n *yaml.Node, path string, allowed []string) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		what := "a value"
		if n.Kind == yaml.SequenceNode {
			what = "a list"
		}
		return nil, p.errAt(n.Line, path, lastKey(path), "want a mapping (key: value lines), got %s", what)
	}
	out := map[string]*yaml.Node{}
	lines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		if k.Kind != yaml.ScalarNode {
			return nil, p.errAt(k.Line, path, lastKey(path), "a key must be a word")
		}
		kp := join(path, key)
		if key == "<<" {
			return nil, p.errAt(k.Line, kp, key, "merge keys (<<) are not supported; repeat the settings")
		}
		if !slices.Contains(allowed, key) {
			msg := fmt.Sprintf("unknown key %q", key)
			if s := suggest.Closest(key, allowed); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			return nil, p.errAt(k.Line, kp, key, "%s; keys here: %s", msg, strings.Join(allowed, ", "))
		}
		if first, dup := lines[key]; dup {
			return nil, p.errAt(k.Line, kp, key, "given twice (first at line %d)", first)
		}
		lines[key] = k.Line
		if !isNull(v) {
			out[key] = v
		}
	}
	return out, nil
}

// lastKey returns the last key of a path: the field a value belongs to.
func lastKey(path string) string {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		path = path[i+1:]
	}
	if i := strings.IndexByte(path, '['); i >= 0 {
		path = path[:i]
	}
	return path
}

// readObject reads a mapping whose keys are fs into x, and records where
// the object is under name (the name the model's refusals give it).
func readObject[T any](p *fileParser, n *yaml.Node, path, name string, fs []field[T], x *T) error {
	m, err := p.mapping(n, path, keys(fs))
	if err != nil {
		return err
	}
	return readFields(p, m, n, path, name, fs, x)
}

// readFields reads the values of a mapping's keys (m) into x through fs,
// and records where the object is under name.
func readFields[T any](p *fileParser, m map[string]*yaml.Node, n *yaml.Node, path, name string, fs []field[T], x *T) error {
	p.objects[name] = &objectPos{path: path, line: n.Line, keys: m}
	for _, f := range fs {
		v, ok := m[f.key]
		if !ok {
			continue
		}
		if err := f.set(v, x); err != nil {
			return p.errAt(v.Line, join(path, f.key), f.key, "%v", err)
		}
	}
	return nil
}

// required reads a key the object cannot go without.
func required[V any](p *fileParser, m map[string]*yaml.Node, n *yaml.Node, path, key string, c codec[V]) (V, *yaml.Node, error) {
	var zero V
	v, ok := m[key]
	if !ok {
		return zero, nil, p.errAt(n.Line, path, key, "%s is required", key)
	}
	x, err := c.decode(v)
	if err != nil {
		return zero, nil, p.errAt(v.Line, join(path, key), key, "%v", err)
	}
	return x, v, nil
}

// sequence returns the items of a list.
func (p *fileParser) sequence(n *yaml.Node, path string) ([]*yaml.Node, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.errAt(n.Line, path, lastKey(path), "want a list (one \"- item\" a line)")
	}
	return n.Content, nil
}

func (p *fileParser) metricServer(n *yaml.Node, ms *lb.MetricServer) error {
	const path = "metricserver"
	m, err := p.mapping(n, path, keys(metricServerFields))
	if err != nil {
		return err
	}
	// The source decides the other settings' defaults.
	if v, ok := m["source"]; ok {
		src, err := stringCodec.decode(v)
		if err != nil {
			return p.errAt(v.Line, path+".source", "source", "%v", err)
		}
		*ms, _ = metricDefaults(src)
		ms.Source = src
	}
	return readFields(p, m, n, path, "metric", metricServerFields, ms)
}

func (p *fileParser) clusters(n *yaml.Node, cfg *lb.Config, explicit map[netip.Addr]bool) error {
	items, err := p.sequence(n, "clusters")
	if err != nil {
		return err
	}
	first := map[netip.Addr]int{}
	for i, item := range items {
		path := index("clusters", i)
		m, err := p.mapping(item, path, append(keys(clusterFields), "address", "ports"))
		if err != nil {
			return err
		}
		addr, an, err := required(p, m, item, path, "address", addrCodec)
		if err != nil {
			return err
		}
		if l, dup := first[addr]; dup {
			return p.errAt(an.Line, path+".address", "cluster", "cluster %s is defined twice (first at line %d)", addr, l)
		}
		first[addr] = an.Line
		cl := lb.NewCluster(addr)
		if err := readFields(p, m, item, path, addr.String(), clusterFields, &cl); err != nil {
			return err
		}
		_, explicit[addr] = m["proportions"]
		if pn := m["ports"]; pn != nil {
			if err := p.ports(pn, path+".ports", &cl); err != nil {
				return err
			}
		}
		cfg.Clusters = append(cfg.Clusters, cl)
	}
	return nil
}

func (p *fileParser) ports(n *yaml.Node, path string, cl *lb.Cluster) error {
	items, err := p.sequence(n, path)
	if err != nil {
		return err
	}
	first := map[uint16]int{}
	for i, item := range items {
		ppath := index(path, i)
		m, err := p.mapping(item, ppath, append(keys(portFields), "port", "servers"))
		if err != nil {
			return err
		}
		num, nn, err := required(p, m, item, ppath, "port", uintCodec[uint16](65535))
		if err != nil {
			return err
		}
		key := lb.ServiceKey{Cluster: cl.Address, Port: num}
		if l, dup := first[num]; dup {
			return p.errAt(nn.Line, ppath+".port", "port", "port %s is defined twice (first at line %d)", key, l)
		}
		first[num] = nn.Line
		port := lb.NewPort(num)
		if err := readFields(p, m, item, ppath, key.String(), portFields, &port); err != nil {
			return err
		}
		if sn := m["servers"]; sn != nil {
			if err := p.servers(sn, ppath+".servers", key, &port); err != nil {
				return err
			}
		}
		cl.Ports = append(cl.Ports, port)
	}
	return nil
}

func (p *fileParser) servers(n *yaml.Node, path string, svc lb.ServiceKey, port *lb.Port) error {
	items, err := p.sequence(n, path)
	if err != nil {
		return err
	}
	first := map[netip.Addr]int{}
	for i, item := range items {
		spath := index(path, i)
		m, err := p.mapping(item, spath, append(keys(serverFields), "address"))
		if err != nil {
			return err
		}
		addr, an, err := required(p, m, item, spath, "address", addrCodec)
		if err != nil {
			return err
		}
		key := lb.BackendKey{Service: svc, Server: addr}
		if l, dup := first[addr]; dup {
			return p.errAt(an.Line, spath+".address", "server", "server %s is defined twice (first at line %d)", key, l)
		}
		first[addr] = an.Line
		s := newServer(port, addr)
		if err := readFields(p, m, item, spath, key.String(), serverFields, &s); err != nil {
			return err
		}
		port.Servers = append(port.Servers, s)
	}
	return nil
}

func (p *fileParser) advisors(n *yaml.Node, cfg *lb.Config) error {
	items, err := p.sequence(n, "advisors")
	if err != nil {
		return err
	}
	first := map[string]int{}
	for i, item := range items {
		path := index("advisors", i)
		identity := []string{"name", "cluster", "port"}
		m, err := p.mapping(item, path, append(keys(advisorFields), identity...))
		if err != nil {
			return err
		}
		name, nn, err := required(p, m, item, path, "name", stringCodec)
		if err != nil {
			return err
		}
		port, _, err := required(p, m, item, path, "port", uintCodec[uint16](65535))
		if err != nil {
			return err
		}
		var cluster netip.Addr
		if v, ok := m["cluster"]; ok {
			if cluster, err = addrCodec.decode(v); err != nil {
				return p.errAt(v.Line, path+".cluster", "cluster", "%v", err)
			}
		}
		a := newAdvisor(name, cluster, port)
		if l, dup := first[a.Key()]; dup {
			return p.errAt(nn.Line, path, "advisor", "advisor %s is defined twice (first at line %d)", a.Key(), l)
		}
		first[a.Key()] = nn.Line
		if err := readFields(p, m, item, path, a.Key(), advisorFields, &a); err != nil {
			return err
		}
		cfg.Advisors = append(cfg.Advisors, a)
	}
	return nil
}

// fieldKeys maps a field the model's refusals name to the keys of the
// file that may hold it, where the two differ.
var fieldKeys = map[string][]string{
	"cluster":       {"address", "cluster"},
	"server":        {"address"},
	"advisor":       {"name"},
	"neighbor":      {"address"},
	"listenport":    {"listen-port"},
	"remoteas":      {"remote-as"},
	"passwordfile":  {"password-file"},
	"neighborport":  {"port"},
	"community":     {"communities"},
	"metric":        {"metrics"},
	"nfa":           {"nfa", "nfa6"},
	"clientgateway": {"clientgateway", "clientgateway6"},
	"haport":        {"port"},
	"secretfile":    {"secret-file"},
	"source":        {"heartbeats", "source"},
	"destination":   {"heartbeats"},
	"heartbeat":     {"heartbeats"},
}

// place puts a refusal of the model on the line of the file that set the
// field it names (or, for a default, on its object's line).
func (p *fileParser) place(err error) error {
	var fe *lb.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	obj := p.objectOf(fe)
	if obj == nil {
		return &FileError{Msg: fe.Error(), Err: fe}
	}
	cands := fieldKeys[fe.Field]
	if cands == nil {
		cands = []string{fe.Field}
	}
	var found string
	for _, k := range cands {
		if v, ok := obj.keys[k]; ok {
			if found == "" {
				found = k
			}
			// Of two keys (nfa, nfa6), the one whose value the message
			// quotes.
			if v.Kind == yaml.ScalarNode && v.Value != "" && strings.Contains(fe.Msg, v.Value) {
				found = k
				break
			}
		}
	}
	if found == "" {
		return &FileError{Line: obj.line, Path: obj.path, Msg: fe.Field + ": " + fe.Msg, Err: fe}
	}
	return &FileError{Line: obj.keys[found].Line, Path: join(obj.path, found), Msg: fe.Msg, Err: fe}
}

// The fields of each object, in the order they are written.

var executorFields = []field[lb.Executor]{
	fld("started", boolCodec, func(x *lb.Executor) *bool { return &x.Started }),
	fld("interface", stringCodec, func(x *lb.Executor) *string { return &x.Interface }),
	fld("xdp-mode", enumCodec(lb.ParseXDPMode), func(x *lb.Executor) *lb.XDPMode { return &x.XDPMode }),
	fld("nfa", addrCodec, func(x *lb.Executor) *netip.Addr { return &x.NFA }),
	fld("nfa6", addrCodec, func(x *lb.Executor) *netip.Addr { return &x.NFA6 }),
	fld("clientgateway", addrCodec, func(x *lb.Executor) *netip.Addr { return &x.ClientGateway }),
	fld("clientgateway6", addrCodec, func(x *lb.Executor) *netip.Addr { return &x.ClientGateway6 }),
	fld("fintimeout", uintCodec[uint32](math.MaxUint32), func(x *lb.Executor) *uint32 { return &x.FinTimeout }),
}

var managerFields = []field[lb.Manager]{
	fld("started", boolCodec, func(x *lb.Manager) *bool { return &x.Started }),
	fld("interval", floatCodec, func(x *lb.Manager) *float64 { return &x.Interval }),
	fld("refresh", intCodec, func(x *lb.Manager) *int { return &x.Refresh }),
	fld("smoothing", floatCodec, func(x *lb.Manager) *float64 { return &x.Smoothing }),
	fld("sensitivity", floatCodec, func(x *lb.Manager) *float64 { return &x.Sensitivity }),
}

var metricServerFields = []field[lb.MetricServer]{
	fld("source", stringCodec, func(x *lb.MetricServer) *string { return &x.Source }),
	fld("port", uintCodec[uint16](65535), func(x *lb.MetricServer) *uint16 { return &x.Port }),
	fld("secret-file", stringCodec, func(x *lb.MetricServer) *string { return &x.SecretFile }),
	fld("path", stringCodec, func(x *lb.MetricServer) *string { return &x.Path }),
}

// clusterFields leave out the address and the ports, which the reader and
// the writer handle themselves.
var clusterFields = []field[lb.Cluster]{
	fld("configure", boolCodec, func(x *lb.Cluster) *bool { return &x.Configure }),
	fld("announce", boolCodec, func(x *lb.Cluster) *bool { return &x.Announce }),
	fld("communities", communitiesCodec, func(x *lb.Cluster) *[]string { return &x.Communities }),
	fld("med", uintCodec[uint32](math.MaxUint32), func(x *lb.Cluster) *uint32 { return &x.MED }),
	fld("proportions", proportionsCodec, func(x *lb.Cluster) *lb.Proportions { return &x.Proportions }),
	fld("metrics", listCodec, func(x *lb.Cluster) *[]string { return &x.Metrics }),
	fld("primaryhost", addrCodec, func(x *lb.Cluster) *netip.Addr { return &x.PrimaryHost }),
}

// portFields leave out the number and the servers.
var portFields = []field[lb.Port]{
	fld("protocol", enumCodec(lb.ParseProtocol), func(x *lb.Port) *lb.Protocol { return &x.Protocol }),
	fld("method", enumCodec(lb.ParseMethod), func(x *lb.Port) *lb.Method { return &x.Method }),
	fld("stickytime", uintCodec[uint32](math.MaxUint32), func(x *lb.Port) *uint32 { return &x.StickyTime }),
	fld("stickymask", uintCodec[uint8](255), func(x *lb.Port) *uint8 { return &x.StickyMask }),
	fld("crossport", uintCodec[uint16](65535), func(x *lb.Port) *uint16 { return &x.CrossPort }),
	fld("selectionalgorithm", enumCodec(lb.ParseSelection), func(x *lb.Port) *lb.Selection { return &x.Selection }),
	fld("maxhalfopen", uintCodec[uint32](math.MaxUint32), func(x *lb.Port) *uint32 { return &x.MaxHalfOpen }),
	fld("staletimeout", uintCodec[uint32](math.MaxUint32), func(x *lb.Port) *uint32 { return &x.StaleTimeout }),
	fld("weightbound", uintCodec[uint32](math.MaxUint32), func(x *lb.Port) *uint32 { return &x.WeightBound }),
	fld("alldown", enumCodec(lb.ParseAllDown), func(x *lb.Port) *lb.AllDown { return &x.AllDown }),
	fld("tablesize", uintCodec[uint32](math.MaxUint32), func(x *lb.Port) *uint32 { return &x.TableSize }),
}

// quiesce is a server's "manager quiesce" state as one value of the file:
// false, true, or "now" (quiesced, and its affinity records dropped).
var quiesceField = field[lb.Server]{
	key: "quiesced",
	set: func(n *yaml.Node, s *lb.Server) error {
		v, err := scalar(n, "true, false or now")
		if err != nil {
			return err
		}
		if strings.EqualFold(strings.TrimSpace(v), "now") {
			s.Quiesced, s.QuiesceNow = true, true
			return nil
		}
		b, ok := parseBool(v)
		if !ok {
			return fmt.Errorf("%q is not true, false or now", v)
		}
		s.Quiesced, s.QuiesceNow = b, false
		return nil
	},
	node: func(s *lb.Server) *yaml.Node {
		if s.QuiesceNow {
			return scalarNode("!!str", "now")
		}
		return boolCodec.encode(s.Quiesced)
	},
	same: func(a, b *lb.Server) bool { return a.Quiesced == b.Quiesced && a.QuiesceNow == b.QuiesceNow },
}

// serverFields leave out the address.
var serverFields = []field[lb.Server]{
	fld("weight", uintCodec[uint32](math.MaxUint32), func(x *lb.Server) *uint32 { return &x.Weight }),
	fld("fixedweight", boolCodec, func(x *lb.Server) *bool { return &x.FixedWeight }),
	fld("down", boolCodec, func(x *lb.Server) *bool { return &x.Down }),
	quiesceField,
	fld("advisorrequest", stringCodec, func(x *lb.Server) *string { return &x.AdvisorRequest }),
	fld("advisorresponse", stringCodec, func(x *lb.Server) *string { return &x.AdvisorResponse }),
	fld("mapport", uintCodec[uint16](65535), func(x *lb.Server) *uint16 { return &x.MapPort }),
	fld("returnaddress", addrCodec, func(x *lb.Server) *netip.Addr { return &x.ReturnAddress }),
	fld("router", addrCodec, func(x *lb.Server) *netip.Addr { return &x.Router }),
}

// advisorFields leave out the name, the cluster and the port.
var advisorFields = []field[lb.Advisor]{
	fld("interval", floatCodec, func(x *lb.Advisor) *float64 { return &x.Interval }),
	fld("connecttimeout", floatCodec, func(x *lb.Advisor) *float64 { return &x.ConnectTimeout }),
	fld("receivetimeout", floatCodec, func(x *lb.Advisor) *float64 { return &x.ReceiveTimeout }),
	fld("retries", intCodec, func(x *lb.Advisor) *int { return &x.Retries }),
	fld("rise", intCodec, func(x *lb.Advisor) *int { return &x.Rise }),
	fld("fall", intCodec, func(x *lb.Advisor) *int { return &x.Fall }),
	fld("program", stringCodec, func(x *lb.Advisor) *string { return &x.Program }),
	fld("args", listCodec, func(x *lb.Advisor) *[]string { return &x.Args }),
	fld("mode", stringCodec, func(x *lb.Advisor) *string { return &x.Mode }),
}
