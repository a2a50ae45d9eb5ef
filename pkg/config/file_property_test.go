package config

import (
	"net/netip"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/dlbproject/dlb/pkg/lb"
)

// genConfig draws a valid configuration that sets every setting of the
// model, from a small universe of addresses and ports, so that two drawn
// configurations share objects and differ in their settings.
func genConfig(t *rapid.T) lb.Config {
	cfg := lb.NewConfig()
	addr := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	maybe := func(label string, from ...string) netip.Addr {
		s := rapid.SampledFrom(append([]string{""}, from...)).Draw(t, label)
		if s == "" {
			return netip.Addr{}
		}
		return addr(s)
	}
	ex := &cfg.Executor
	ex.Started = rapid.Bool().Draw(t, "started")
	ex.Interface = rapid.SampledFrom([]string{"", "eth0", "eth1"}).Draw(t, "interface")
	if ex.Started && ex.Interface == "" {
		ex.Interface = "eth0"
	}
	ex.XDPMode = lb.XDPMode(rapid.IntRange(0, 2).Draw(t, "xdpmode"))
	ex.NFA = maybe("nfa", "198.18.0.2", "198.18.0.3")
	ex.NFA6 = maybe("nfa6", "2001:2::2")
	ex.ClientGateway = maybe("gw", "198.18.0.1")
	ex.ClientGateway6 = maybe("gw6", "2001:2::1")
	ex.FinTimeout = uint32(rapid.SampledFrom([]int{60, 30, 1}).Draw(t, "fintimeout"))

	m := &cfg.Manager
	m.Started = rapid.Bool().Draw(t, "manager")
	m.Interval = rapid.SampledFrom([]float64{2, 1, 0.5}).Draw(t, "interval")
	m.Refresh = rapid.IntRange(1, 3).Draw(t, "refresh")
	m.Smoothing = rapid.SampledFrom([]float64{1.5, 1, 2.25}).Draw(t, "smoothing")
	m.Sensitivity = rapid.SampledFrom([]float64{5, 0, 12.5}).Draw(t, "sensitivity")

	ms := &cfg.MetricServer
	if rapid.Bool().Draw(t, "prometheus") {
		*ms, _ = metricDefaults("prometheus")
		ms.Path = rapid.SampledFrom([]string{"/metrics", "/m", ""}).Draw(t, "path")
	} else {
		ms.Path = rapid.SampledFrom([]string{"", "/x"}).Draw(t, "path")
	}
	ms.Port = uint16(rapid.SampledFrom([]int{int(ms.Port), 9999}).Draw(t, "metricport"))
	ms.SecretFile = rapid.SampledFrom([]string{"", "/etc/dlb/metric secret"}).Draw(t, "secret")

	allMetrics := []string{"cpuload", "memload", "loadavg"}
	for _, c := range []string{"198.18.0.100", "198.18.0.101", "2001:2::100"} {
		if !rapid.Bool().Draw(t, "cluster "+c) {
			continue
		}
		a := addr(c)
		cl := lb.NewCluster(a)
		cl.Configure = rapid.Bool().Draw(t, "configure")
		ms := rapid.Permutation(allMetrics).Draw(t, "metrics")
		cl.Metrics = ms[:rapid.IntRange(0, 3).Draw(t, "nmetrics")]
		if len(cl.Metrics) == 0 {
			cl.Metrics = nil
		}
		v4 := a.Is4()
		for _, n := range []uint16{80, 443, 8080} {
			if !rapid.Bool().Draw(t, "port") {
				continue
			}
			p := lb.NewPort(n)
			p.Protocol = lb.Protocol(rapid.IntRange(1, 3).Draw(t, "protocol"))
			p.Method = lb.Method(rapid.IntRange(1, 2).Draw(t, "method"))
			p.StickyTime = uint32(rapid.SampledFrom([]int{0, 60}).Draw(t, "sticky"))
			if v4 {
				p.StickyMask = uint8(rapid.SampledFrom([]int{0, 24, 32}).Draw(t, "mask"))
			} else {
				p.StickyMask = uint8(rapid.SampledFrom([]int{0, 64, 128}).Draw(t, "mask"))
			}
			p.Selection = lb.Selection(rapid.IntRange(0, 2).Draw(t, "selection"))
			p.MaxHalfOpen = uint32(rapid.SampledFrom([]int{0, 500}).Draw(t, "maxhalfopen"))
			p.StaleTimeout = uint32(rapid.SampledFrom([]int{300, 30}).Draw(t, "stale"))
			p.WeightBound = uint32(rapid.SampledFrom([]int{20, 10, 50}).Draw(t, "bound"))
			p.AllDown = lb.AllDown(rapid.IntRange(0, 1).Draw(t, "alldown"))
			p.TableSize = uint32(rapid.SampledFrom([]int{0, 0, lb.MinTableSize, 65537}).Draw(t, "tablesize"))
			pool := []string{"198.18.0.21", "198.18.0.22", "198.18.0.23"}
			returns := []string{"198.18.0.9", "198.18.0.10"}
			router := "198.18.0.254"
			if !v4 {
				pool, returns, router = []string{"2001:2::21", "2001:2::22"}, []string{"2001:2::9"}, "2001:2::254"
			}
			for _, s := range pool {
				if !rapid.Bool().Draw(t, "server") {
					continue
				}
				srv := lb.Server{Address: addr(s), Weight: uint32(rapid.IntRange(0, int(p.WeightBound)).Draw(t, "weight"))}
				srv.FixedWeight = rapid.Bool().Draw(t, "fixed")
				srv.Down = rapid.Bool().Draw(t, "down")
				switch rapid.IntRange(0, 2).Draw(t, "quiesce") {
				case 1:
					srv.Quiesced = true
				case 2:
					srv.Quiesced, srv.QuiesceNow = true, true
				}
				srv.AdvisorRequest = rapid.SampledFrom([]string{"", "GET /health HTTP/1.0", "it's"}).Draw(t, "request")
				srv.AdvisorResponse = rapid.SampledFrom([]string{"", "200", "true"}).Draw(t, "response")
				if p.Method == lb.NAT {
					srv.MapPort = uint16(rapid.SampledFrom([]int{0, 8443}).Draw(t, "mapport"))
					srv.ReturnAddress = addr(rapid.SampledFrom(returns).Draw(t, "return"))
					srv.Router = maybe("router", router)
				}
				p.Servers = append(p.Servers, srv)
			}
			cl.Ports = append(cl.Ports, p)
		}
		// A crossport between two sticky ports.
		var sticky []uint16
		for _, p := range cl.Ports {
			if p.StickyTime > 0 {
				sticky = append(sticky, p.Number)
			}
		}
		if len(sticky) >= 2 && rapid.Bool().Draw(t, "crossport") {
			i := slices.IndexFunc(cl.Ports, func(p lb.Port) bool { return p.Number == sticky[0] })
			cl.Ports[i].CrossPort = sticky[1]
		}
		cl.Announce = rapid.Bool().Draw(t, "announce")
		cl.Communities = rapid.SampledFrom([][]string{nil, {"65000:100"}, {"no-export", "1:2:3", "65000:7"}}).Draw(t, "communities")
		cl.MED = uint32(rapid.SampledFrom([]int{0, 20, 1 << 31}).Draw(t, "med"))
		cfg.Clusters = append(cfg.Clusters, cl)
	}
	genBGP(t, &cfg.BGP)

	// Advisors on ports that exist.
	for _, a := range []lb.Advisor{
		newAdvisor("http", netip.Addr{}, 80),
		newAdvisor("connect", addr("198.18.0.100"), 443),
		newAdvisor("exec", netip.Addr{}, 8080),
	} {
		covered := false
		for _, cl := range cfg.Clusters {
			for _, p := range cl.Ports {
				covered = covered || a.Covers(cl.Address, p.Number)
			}
		}
		if !covered || !rapid.Bool().Draw(t, "advisor "+a.Name) {
			continue
		}
		a.Interval = rapid.SampledFrom([]float64{5, 1, 0.25}).Draw(t, "ainterval")
		a.ConnectTimeout = rapid.SampledFrom([]float64{2, 0.5}).Draw(t, "connect")
		a.ReceiveTimeout = rapid.SampledFrom([]float64{2, 1.5}).Draw(t, "receive")
		a.Retries = rapid.IntRange(0, 2).Draw(t, "retries")
		a.Rise = rapid.IntRange(1, 3).Draw(t, "rise")
		a.Fall = rapid.IntRange(1, 3).Draw(t, "fall")
		if a.Name == "exec" {
			a.Program = rapid.SampledFrom([]string{"/bin/true", "/usr/local/bin/check load"}).Draw(t, "program")
			a.Args = rapid.SampledFrom([][]string{nil, {"-v"}, {"a b", ""}}).Draw(t, "args")
			a.Mode = rapid.SampledFrom([]string{"normal", "replace"}).Draw(t, "mode")
		}
		cfg.Advisors = append(cfg.Advisors, a)
	}
	cfg.Sort()
	for i := range cfg.Clusters {
		cl := &cfg.Clusters[i]
		switch rapid.IntRange(0, 2).Draw(t, "proportions") {
		case 0:
			cl.Proportions = impliedProportions(cl, cfg.Advisors)
		case 1:
			cl.Proportions = lb.Proportions{Active: 30, New: 30, Port: 40}
		}
	}
	if err := Validate(cfg); err != nil {
		t.Fatalf("generated an invalid configuration: %v", err)
	}
	return cfg
}

// genBGP draws a BGP speaker (or none) with neighbours from a small
// universe, setting every setting of each.
func genBGP(t *rapid.T, b *lb.BGP) {
	if !rapid.Bool().Draw(t, "bgp") {
		return
	}
	b.ASN = uint32(rapid.SampledFrom([]int{65001, 65002, 4200000000}).Draw(t, "asn"))
	b.RouterID = netip.MustParseAddr(rapid.SampledFrom([]string{"198.18.0.2", "198.18.0.3"}).Draw(t, "routerid"))
	b.ListenPort = uint16(rapid.SampledFrom([]int{0, 179, 1179}).Draw(t, "listenport"))
	for _, a := range []string{"198.18.1.1", "198.18.1.2", "2001:2::1:1"} {
		if !rapid.Bool().Draw(t, "neighbor "+a) {
			continue
		}
		n := lb.NewBGPNeighbor(netip.MustParseAddr(a))
		n.RemoteAS = uint32(rapid.SampledFrom([]int{65000, 65001, 4200000001}).Draw(t, "remoteas"))
		n.HoldTime = uint32(rapid.SampledFrom([]int{lb.DefaultHoldTime, 0, 3, 90}).Draw(t, "holdtime"))
		n.Multihop = uint8(rapid.SampledFrom([]int{0, 2, 255}).Draw(t, "multihop"))
		n.Port = uint16(rapid.SampledFrom([]int{0, 179, 1179}).Draw(t, "neighborport"))
		n.PasswordFile = rapid.SampledFrom([]string{"", "/etc/dlb/bgp.secret", "/etc/dlb/it's a secret"}).Draw(t, "passwordfile")
		n.BFD = rapid.Bool().Draw(t, "bfd")
		b.Neighbors = append(b.Neighbors, n)
	}
}

// sameConfig reports whether two sorted configurations are equal
// (Diff compares every setting).
func sameConfig(a, b lb.Config) bool { return Diff(a, b).Empty() }

// TestFileRoundTrip: a configuration written as a file (YAML or JSON)
// reads back as the same configuration.
func TestFileRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		for _, w := range []struct {
			name  string
			write func(lb.Config) ([]byte, error)
		}{{"yaml", MarshalFile}, {"json", MarshalFileJSON}} {
			data, err := w.write(cfg)
			if err != nil {
				t.Fatal(err)
			}
			f, err := ReadFile(data, Options{})
			if err != nil {
				t.Fatalf("%s: reading back: %v\n%s", w.name, err, data)
			}
			if !sameConfig(cfg, f.Config) {
				t.Fatalf("%s: read back differs: %+v\n%s", w.name, Diff(cfg, f.Config), data)
			}
		}
	})
}

// TestPlanMakesNext: the steps Plan lists, applied to old as one batch,
// make exactly next; a configuration needs no steps to become itself; and
// each step's command reads back (as dlbctl's script reader splits it)
// into its words.
func TestPlanMakesNext(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		old, next := genConfig(t), genConfig(t)
		// No command takes a stopped executor's interface away (Plan
		// says so in a step of its own): keep it.
		if ex := &next.Executor; !ex.Started && ex.Interface == "" {
			ex.Interface, ex.XDPMode = old.Executor.Interface, old.Executor.XDPMode
		}
		if steps := Plan(old, old); len(steps) != 0 {
			t.Fatalf("Plan(old, old) = %v", steps)
		}
		steps := Plan(old, next)
		if len(steps) == 0 {
			if !sameConfig(old, next) {
				t.Fatalf("no steps, but the configurations differ: %+v", Diff(old, next))
			}
			return
		}
		ops := make([]Op, len(steps))
		for i, s := range steps {
			ops[i] = s.Op
		}
		got, err := Apply(old, ops, Options{})
		if err != nil {
			t.Fatalf("applying the plan: %v\nsteps:\n%s", err, stepLines(steps))
		}
		if !sameConfig(got, next) {
			t.Fatalf("the plan makes %+v more changes\nsteps:\n%s", Diff(got, next), stepLines(steps))
		}
		ed, err := NewEditor(old, Options{})
		if err != nil {
			t.Fatal(err)
		}
		e, err := ed.PrepareConfig(next)
		if err != nil {
			t.Fatalf("PrepareConfig: %v", err)
		}
		if !sameConfig(e.Next, next) || !sameConfig(ed.Config(), old) {
			t.Fatal("PrepareConfig: wrong next, or the committed configuration changed")
		}
	})
}

func stepLines(steps []Step) string {
	var s string
	for _, x := range steps {
		s += x.String() + "\n"
	}
	return s
}
