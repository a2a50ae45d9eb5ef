package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/dlbproject/dlb/pkg/lb"
)

// Writing a configuration file (file.go describes it).

// fileHeader heads a written file.
const fileHeader = `dlb configuration. "dlbctl apply -f FILE" makes dlbd's configuration
equal to this file (--diff shows what it would change); "dlbd --config FILE"
applies it at start and on SIGHUP. Keys left out take their defaults.`

// MarshalFile writes cfg as a configuration file (YAML) that ReadFile
// reads back into cfg. Settings at their defaults are left out, except
// the ones an operator reads an object by (a port's protocol and method,
// a server's weight).
func MarshalFile(cfg lb.Config) ([]byte, error) {
	root := FileNode(cfg)
	root.HeadComment = fileHeader
	return encodeInPieces(root, serversPerDocument)
}

// serversPerDocument is how many servers encodeInPieces writes as one YAML
// document.
const serversPerDocument = 256

// serversPlaceholder stands for a port's servers in the rest of the file
// while encodeInPieces writes it; its number follows.
const serversPlaceholder = "dlb-servers-written-apart-"

// encodeInPieces writes the tree FileNode made as YAML, each port's servers
// as documents of their own (at most perDocument servers each) put in
// where the rest of the file holds a placeholder: the same text as one
// document. go-yaml's emitter keeps every event of a document until the
// document ends (go-yaml/yaml#873): written whole, every server's events
// are held at once in one queue, grown and copied as it fills (10,000
// servers: 170 ms; in pieces 66–74 ms, BenchmarkFile10k/MarshalFile). A
// value elsewhere in the file that holds a placeholder's text makes it
// write the file whole.
func encodeInPieces(root *yaml.Node, perDocument int) ([]byte, error) {
	var lists []*yaml.Node // the servers taken out, by placeholder number
	eachServers(root, func(slot **yaml.Node) {
		lists = append(lists, *slot)
		*slot = scalarNode("!!str", serversPlaceholder+strconv.Itoa(len(lists)-1))
	})
	if len(lists) == 0 {
		return encodeYAML(root)
	}
	rest, err := encodeYAML(root)
	if err != nil || bytes.Count(rest, []byte(serversPlaceholder)) != len(lists) {
		restoreServers(root, lists)
		return encodeYAML(root)
	}
	var out bytes.Buffer
	for line := range bytes.Lines(rest) {
		indent, n, found := bytes.Cut(line, []byte("servers: "+serversPlaceholder))
		if !found {
			out.Write(line)
			continue
		}
		i, err := strconv.Atoi(string(bytes.TrimSuffix(n, []byte("\n"))))
		if err != nil || i < 0 || i >= len(lists) || len(bytes.Trim(indent, " ")) != 0 {
			restoreServers(root, lists)
			return encodeYAML(root)
		}
		out.Write(indent)
		out.WriteString("servers:\n")
		items := lists[i].Content
		for len(items) > 0 {
			k := min(perDocument, len(items))
			doc, err := encodeYAML(&yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: items[:k]})
			if err != nil {
				return nil, err
			}
			for l := range bytes.Lines(doc) {
				if len(l) > 1 {
					out.Write(indent)
					out.WriteString("  ")
				}
				out.Write(l)
			}
			items = items[k:]
		}
	}
	return out.Bytes(), nil
}

// encodeYAML writes n as one YAML document.
func encodeYAML(n *yaml.Node) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, fmt.Errorf("encoding the configuration as YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encoding the configuration as YAML: %w", err)
	}
	return buf.Bytes(), nil
}

// restoreServers puts the servers encodeInPieces took out back in place
// of their placeholders.
func restoreServers(root *yaml.Node, lists []*yaml.Node) {
	j := 0
	eachServers(root, func(slot **yaml.Node) {
		if j < len(lists) {
			*slot = lists[j]
			j++
		}
	})
}

// eachServers calls f with each port's servers in the tree FileNode made,
// in the order they are written.
func eachServers(root *yaml.Node, f func(slot **yaml.Node)) {
	for _, cl := range valueOf(root, "clusters") {
		for _, p := range valueOf(cl, "ports") {
			for i := 0; i+1 < len(p.Content); i += 2 {
				if p.Content[i].Value == "servers" {
					f(&p.Content[i+1])
				}
			}
		}
	}
}

// valueOf is the content of key's value in mapping m (nothing if m has no
// such key).
func valueOf(m *yaml.Node, key string) []*yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1].Content
		}
	}
	return nil
}

// MarshalFileJSON writes cfg as a configuration file in JSON: the same
// document as MarshalFile, which ReadFile reads too.
func MarshalFileJSON(cfg lb.Config) ([]byte, error) {
	var buf bytes.Buffer
	if err := writeJSON(&buf, FileNode(cfg)); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, buf.Bytes(), "", "  "); err != nil {
		return nil, fmt.Errorf("encoding the configuration as JSON: %w", err)
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// FileNode returns cfg as the YAML tree of its configuration file.
func FileNode(cfg lb.Config) *yaml.Node {
	cfg = cfg.Clone()
	cfg.Sort()
	def := lb.NewConfig()
	root := mappingNode()
	if n := writeObject(&cfg.Executor, &def.Executor, executorFields, nil); len(n.Content) > 0 {
		addKey(root, "executor", n)
	}
	if n := writeObject(&cfg.Manager, &def.Manager, managerFields, nil); len(n.Content) > 0 {
		addKey(root, "manager", n)
	}
	if cfg.MetricServer != def.MetricServer {
		msDef, _ := metricDefaults(cfg.MetricServer.Source)
		addKey(root, "metricserver", writeObject(&cfg.MetricServer, &msDef, metricServerFields, []string{"source"}))
	}
	if len(cfg.Clusters) > 0 {
		cls := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for i := range cfg.Clusters {
			cls.Content = append(cls.Content, clusterNode(&cfg.Clusters[i], cfg.Advisors))
		}
		addKey(root, "clusters", cls)
	}
	if len(cfg.Advisors) > 0 {
		as := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for i := range cfg.Advisors {
			a := &cfg.Advisors[i]
			n := mappingNode()
			addKey(n, "name", stringCodec.encode(a.Name))
			if a.Cluster.IsValid() {
				addKey(n, "cluster", addrCodec.encode(a.Cluster))
			}
			addKey(n, "port", uintCodec[uint16](65535).encode(a.Port))
			def := newAdvisor(a.Name, a.Cluster, a.Port)
			n.Content = append(n.Content, writeObject(a, &def, advisorFields, nil).Content...)
			as.Content = append(as.Content, n)
		}
		addKey(root, "advisors", as)
	}
	if n := haNode(cfg.HA); n != nil {
		addKey(root, "ha", n)
	}
	if n := bgpNode(cfg.BGP); n != nil {
		addKey(root, "bgp", n)
	}
	return root
}

func clusterNode(cl *lb.Cluster, advisors []lb.Advisor) *yaml.Node {
	n := mappingNode()
	addKey(n, "address", addrCodec.encode(cl.Address))
	def := lb.NewCluster(cl.Address)
	def.Proportions = impliedProportions(cl, advisors)
	n.Content = append(n.Content, writeObject(cl, &def, clusterFields, nil).Content...)
	if len(cl.Ports) > 0 {
		ps := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for i := range cl.Ports {
			p := &cl.Ports[i]
			pn := mappingNode()
			addKey(pn, "port", uintCodec[uint16](65535).encode(p.Number))
			pdef := lb.NewPort(p.Number)
			pn.Content = append(pn.Content, writeObject(p, &pdef, portFields, []string{"protocol", "method"}).Content...)
			if len(p.Servers) > 0 {
				ss := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
				for j := range p.Servers {
					s := &p.Servers[j]
					sn := mappingNode()
					addKey(sn, "address", addrCodec.encode(s.Address))
					sdef := newServer(p, s.Address)
					sn.Content = append(sn.Content, writeObject(s, &sdef, serverFields, []string{"weight"}).Content...)
					ss.Content = append(ss.Content, sn)
				}
				addKey(pn, "servers", ss)
			}
			ps.Content = append(ps.Content, pn)
		}
		addKey(n, "ports", ps)
	}
	return n
}

// writeObject returns the fields of x that differ from def (and those in
// always) as a mapping.
func writeObject[T any](x, def *T, fs []field[T], always []string) *yaml.Node {
	n := mappingNode()
	for _, f := range fs {
		if slices.Contains(always, f.key) || !f.same(x, def) {
			addKey(n, f.key, f.node(x))
		}
	}
	return n
}

func mappingNode() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }

func addKey(n *yaml.Node, key string, v *yaml.Node) {
	n.Content = append(n.Content, scalarNode("!!str", key), v)
}

// writeJSON writes a tree FileNode made as JSON, keeping the order of
// the keys.
func writeJSON(buf *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.MappingNode:
		buf.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				buf.WriteByte(',')
			}
			k, _ := json.Marshal(n.Content[i].Value)
			buf.Write(k)
			buf.WriteByte(':')
			if err := writeJSON(buf, n.Content[i+1]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeJSON(buf, c); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!int", "!!float", "!!bool":
			buf.WriteString(n.Value)
		default:
			s, _ := json.Marshal(n.Value)
			buf.Write(s)
		}
	default:
		return fmt.Errorf("encoding the configuration as JSON: unexpected node kind %d", n.Kind)
	}
	return nil
}
