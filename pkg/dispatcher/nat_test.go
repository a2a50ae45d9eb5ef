package dispatcher

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher/health"
	"github.com/dlbproject/dlb/pkg/lb"
)

var (
	router   = netip.MustParseAddr("198.18.0.254")
	gateway  = netip.MustParseAddr("198.18.0.1")
	retAddr  = netip.MustParseAddr("198.18.0.3")
	natSrv   = netip.MustParseAddr("198.18.1.11")
	vip6     = "2001:2::100"
	srv6     = netip.MustParseAddr("2001:2::21")
	routerHW = net.HardwareAddr{2, 0, 0, 0, 0, 0xfe}
)

// backend returns the applied backend of a server on a port.
func (h *harness) backend(addr netip.Addr, port uint16) lb.DataplaneBackend {
	h.t.Helper()
	dp := h.dp.state()
	for _, b := range dp.Backends {
		if b.Address == addr && h.service(b.Service).Port == port {
			return b
		}
	}
	h.t.Fatalf("no backend %s:%d in %+v", addr, port, dp.Backends)
	return lb.DataplaneBackend{}
}

// service returns the applied service with the given id.
func (h *harness) service(id uint32) lb.DataplaneService {
	h.t.Helper()
	for _, s := range h.dp.state().Services {
		if s.ID == id {
			return s
		}
	}
	h.t.Fatalf("no service %d", id)
	return lb.DataplaneService{}
}

// servicePort returns the applied service of a cluster and port.
func (h *harness) servicePort(cluster string, port uint16) lb.DataplaneService {
	h.t.Helper()
	for _, s := range h.dp.state().Services {
		if s.Cluster == netip.MustParseAddr(cluster) && s.Port == port {
			return s
		}
	}
	h.t.Fatalf("no service %s@%d", cluster, port)
	return lb.DataplaneService{}
}

// TestNATDataplane: a NAT server behind a router gets the router's MAC,
// its mapport and return address; the return address goes on the
// executor's interface while a NAT server uses it; the client gateway is
// resolved and handed to the executor.
func TestNATDataplane(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	h.nif.setMAC(router, routerHW)
	h.nif.setMAC(gateway, net.HardwareAddr{2, 0, 0, 0, 0, 1})
	nat := op("port", "add", vip+"@81")
	nat.Params = append(nat.Params, config.P("method", "nat"))
	srv := op("server", "add", vip+"@81@"+natSrv.String())
	srv.Params = append(srv.Params, config.P("returnaddress", retAddr.String()), config.P("router", router.String()), config.P("mapport", "8080"))
	gw := op("executor", "set", "")
	gw.Params = append(gw.Params, config.P("clientgateway", gateway.String()))
	h.mustApply(nat, srv, gw)

	b := h.backend(natSrv, 81)
	if b.MAC.String() != routerHW.String() || b.Port != 8080 || b.ReturnAddress != retAddr || !b.AcceptNew {
		t.Errorf("NAT backend %+v: want the router's MAC, port 8080, return address %s", b, retAddr)
	}
	if s := h.servicePort(vip, 81); s.Method != lb.DataplaneNAT {
		t.Errorf("service method %v, want NAT", s.Method)
	}
	if s := h.servicePort(vip, 80); s.Method != lb.DataplaneMAC {
		t.Errorf("MAC service method %v", s.Method)
	}
	if gw := h.dp.state().ClientGateway; gw.MAC.String() != "02:00:00:00:00:01" || gw.Ifindex != 2 {
		t.Errorf("client gateway %+v", gw)
	}
	if h.nif.addresses[retAddr] != "eth0" {
		t.Errorf("return address not configured: %v", h.nif.addresses)
	}
	st := h.status(Query{Depth: lb.ServerDepth, Target: vip + "@81@" + natSrv.String()})
	for _, ss := range st.Servers {
		if ss.MAC.String() != routerHW.String() || ss.State != lb.ServerUp {
			t.Errorf("server status %+v", ss)
		}
	}
	if len(st.Servers) != 1 || st.Config.Executor.ClientGateway != gateway || st.Executor.Info.NATTable != 2048 {
		t.Errorf("status %+v", st)
	}

	// The state survives a restart, and removing the NAT server takes
	// the return address off the interface.
	h.restart()
	if b := h.backend(natSrv, 81); b.ReturnAddress != retAddr || b.Port != 8080 {
		t.Errorf("after restart: %+v", b)
	}
	h.mustApply(op("server", "remove", vip+"@81@"+natSrv.String()))
	if _, ok := h.nif.addresses[retAddr]; ok {
		t.Errorf("return address still configured: %v", h.nif.addresses)
	}
	if _, ok := h.nif.addresses[netip.MustParseAddr(vip)]; !ok {
		t.Error("the cluster address went too")
	}
}

// TestIPv6Dataplane: IPv6 clusters, servers and NFA reach the executor,
// the stickymask lands in the IPv6 field.
func TestIPv6Dataplane(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	h.nif.setMAC(srv6, net.HardwareAddr{2, 0, 0, 0, 0, 0x21})
	nfa := op("executor", "set", "")
	nfa.Params = append(nfa.Params, config.P("nfa", "2001:2::2"))
	p := op("port", "add", vip6+"@80")
	p.Params = append(p.Params, config.P("stickytime", "30"), config.P("stickymask", "64"))
	h.mustApply(nfa, op("cluster", "add", vip6), p, op("server", "add", vip6+"@80@"+srv6.String()))
	dp := h.dp.state()
	if dp.NFA6 != netip.MustParseAddr("2001:2::2") || dp.NFA != netip.MustParseAddr("198.18.0.2") {
		t.Errorf("NFAs %s %s: setting the IPv6 one must keep the IPv4 one", dp.NFA, dp.NFA6)
	}
	s := h.servicePort(vip6, 80)
	if s.StickyMask6 != 64 || s.StickyMask4 != 0 || s.StickyTime != 30 || len(s.Table) == 0 {
		t.Errorf("IPv6 service %+v", s)
	}
	if b := h.backend(srv6, 80); !b.AcceptNew || b.MAC == nil {
		t.Errorf("IPv6 backend %+v", b)
	}
	none := op("executor", "set", "")
	none.Params = append(none.Params, config.P("nfa", "none"))
	h.mustApply(none)
	if dp := h.dp.state(); dp.NFA.IsValid() || dp.NFA6.IsValid() {
		t.Errorf("nfa none left %s %s", dp.NFA, dp.NFA6)
	}
}

// TestAffinitySettings: stickytime, stickymask and the selection
// algorithm reach the executor; ports linked by crossport (also through
// a third port) share one affinity group, others have none.
func TestAffinitySettings(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	p80 := op("port", "set", vip+"@80")
	p80.Params = append(p80.Params, config.P("stickytime", "60"), config.P("stickymask", "24"), config.P("selectionalgorithm", "conn+affin"))
	p443 := op("port", "set", vip+"@443")
	p443.Params = append(p443.Params, config.P("stickytime", "60"), config.P("crossport", "80"))
	p8443 := op("port", "add", vip+"@8443")
	p8443.Params = append(p8443.Params, config.P("stickytime", "60"), config.P("crossport", "443"))
	h.mustApply(p80, p443, p8443, op("port", "add", vip+"@9000"))

	s80, s443, s8443, s9000 := h.servicePort(vip, 80), h.servicePort(vip, 443), h.servicePort(vip, 8443), h.servicePort(vip, 9000)
	if s80.StickyTime != 60 || s80.StickyMask4 != 24 || s80.Selection != lb.DataplaneConnAffin {
		t.Errorf("port 80 %+v", s80)
	}
	if s443.Selection != lb.DataplaneAffinity {
		t.Errorf("port 443 selection %v, want the default (affinity)", s443.Selection)
	}
	if g := s80.AffinityGroup; g == 0 || s443.AffinityGroup != g || s8443.AffinityGroup != g {
		t.Errorf("groups 80:%d 443:%d 8443:%d, want one shared non-zero group", s80.AffinityGroup, s443.AffinityGroup, s8443.AffinityGroup)
	}
	if s9000.AffinityGroup != 0 {
		t.Errorf("port 9000 group %d, want none", s9000.AffinityGroup)
	}
	cfg := h.config()
	if p := cfg.Cluster(netip.MustParseAddr(vip)).Port(443); p.CrossPort != 80 || p.Selection != lb.SelectAffinity {
		t.Errorf("port %+v", p)
	}
	// Removing the link breaks the group.
	un := op("port", "set", vip+"@443")
	un.Params = append(un.Params, config.P("crossport", "0"))
	h.mustApply(un)
	if s := h.servicePort(vip, 80); s.AffinityGroup != 0 {
		t.Errorf("port 80 still grouped (%d) after 443 dropped its crossport", s.AffinityGroup)
	}
}

// TestQuiesceNowDropsAffinity: a plain quiesce keeps the server's sticky
// clients (Quiesced), "quiesce --now" drops its records and stops
// following them; unquiesce clears both.
func TestQuiesceNowDropsAffinity(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	target := vip + "@80@" + s1.String()
	h.mustApply(op("manager", "quiesce", target))
	if b := h.backend(s1, 80); b.AcceptNew || !b.Quiesced {
		t.Errorf("quiesced backend %+v: want Quiesced, not AcceptNew", b)
	}
	if len(h.dp.dropped) != 0 {
		t.Errorf("plain quiesce dropped records of %v", h.dp.dropped)
	}
	now := op("manager", "quiesce", target)
	now.Params = append(now.Params, config.P("now", "yes"))
	h.mustApply(now)
	b := h.backend(s1, 80)
	if b.AcceptNew || b.Quiesced {
		t.Errorf("quiesced-now backend %+v: want neither", b)
	}
	if !slices.Equal(h.dp.dropped, []uint32{b.ID}) {
		t.Errorf("dropped %v, want [%d]", h.dp.dropped, b.ID)
	}
	// A later plain quiesce does not bring affinity back, nor drop again.
	h.mustApply(op("manager", "quiesce", target))
	if b := h.backend(s1, 80); b.Quiesced || len(h.dp.dropped) != 1 {
		t.Errorf("after a second quiesce: %+v, dropped %v", b, h.dp.dropped)
	}
	h.mustApply(op("manager", "unquiesce", target))
	if b := h.backend(s1, 80); !b.AcceptNew || b.Quiesced {
		t.Errorf("unquiesced backend %+v", b)
	}
	cfg := h.config()
	if s := cfg.Cluster(netip.MustParseAddr(vip)).Port(80).Server(s1); s.Quiesced || s.QuiesceNow {
		t.Errorf("unquiesce left %+v", s)
	}
}

// TestHalfOpenAlert: half-open connections above a port's maxhalfopen
// raise halfOpenAlert (script and report), back at or below clear it
// with halfOpenAlertDone.
func TestHalfOpenAlert(t *testing.T) {
	scripts := t.TempDir()
	h := newHarnessWith(t, t.TempDir(), func(o *Options) {
		o.SweepInterval = 20 * time.Millisecond
		o.ScriptsDir = scripts
		o.ScriptTimeout = time.Second
	})
	base(h)
	log := filepath.Join(t.TempDir(), "events")
	for _, ev := range []string{"halfOpenAlert", "halfOpenAlertDone"} {
		script := "#!/bin/sh\necho \"$DLB_EVENT $DLB_CLUSTER $DLB_PORT $DLB_HALFOPEN $DLB_MAXHALFOPEN\" >> " + log + "\n"
		if err := os.WriteFile(filepath.Join(scripts, ev), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	set := op("port", "set", vip+"@80")
	set.Params = append(set.Params, config.P("maxhalfopen", "100"))
	h.mustApply(set)
	sid := h.servicePort(vip, 80).ID
	sid443 := h.servicePort(vip, 443).ID
	setHalfOpen := func(n80, n443 uint64) {
		h.dp.mu.Lock()
		h.dp.swept = lb.SweepResult{HalfOpen: map[uint32]uint64{sid: n80, sid443: n443}}
		h.dp.mu.Unlock()
	}
	port80 := func() PortStatus {
		return h.status(Query{Depth: lb.PortDepth, Target: vip + "@80"}).Ports[lb.ServiceKey{Cluster: netip.MustParseAddr(vip), Port: 80}]
	}
	alerted := func() bool { return port80().HalfOpenAlert }
	setHalfOpen(100, 5000) // at the threshold; port 443 has none
	time.Sleep(100 * time.Millisecond)
	if alerted() {
		t.Fatal("alert at the threshold, want only above it")
	}
	setHalfOpen(150, 0)
	eventually(t, "halfOpenAlert", alerted)
	if p := port80(); p.HalfOpen != 150 {
		t.Errorf("port status %+v", p)
	}
	setHalfOpen(20, 0)
	eventually(t, "halfOpenAlertDone", func() bool { return !alerted() })
	eventually(t, "both scripts ran", func() bool {
		b, _ := os.ReadFile(log)
		return strings.Count(string(b), "\n") >= 2
	})
	b, _ := os.ReadFile(log)
	want := "halfOpenAlert " + vip + " 80 150 100\nhalfOpenAlertDone " + vip + " 80 20 100\n"
	if string(b) != want {
		t.Errorf("scripts saw\n%s\nwant\n%s", b, want)
	}
}

// TestAdvisorProbesNATMapport: an advisor of a NAT port probes each
// server at its mapport (where it listens), a MAC server at the port.
func TestAdvisorProbesNATMapport(t *testing.T) {
	cfg := lb.NewConfig()
	cl := lb.NewCluster(netip.MustParseAddr(vip))
	nat := lb.NewPort(81)
	nat.Method = lb.NAT
	nat.Servers = []lb.Server{
		{Address: natSrv, Weight: 10, MapPort: 8080, ReturnAddress: retAddr},
		{Address: netip.MustParseAddr("198.18.1.12"), Weight: 10, ReturnAddress: retAddr},
	}
	mac := lb.NewPort(80)
	mac.Servers = []lb.Server{{Address: s1, Weight: 10}}
	cl.Ports = []lb.Port{mac, nat}
	cfg.Clusters = []lb.Cluster{cl}
	cfg.Advisors = []lb.Advisor{lb.NewAdvisor("http", netip.Addr{}, 81), lb.NewAdvisor("http", netip.Addr{}, 80)}
	got := map[string]uint16{}
	for k, spec := range health.Wanted(cfg, nil) {
		got[k.Addr.String()] = spec.Target.Port
	}
	want := map[string]uint16{natSrv.String(): 8080, "198.18.1.12": 81, s1.String(): 80}
	if len(got) != len(want) {
		t.Fatalf("probes %v, want %v", got, want)
	}
	for a, p := range want {
		if got[a] != p {
			t.Errorf("%s probed at port %d, want %d", a, got[a], p)
		}
	}
}

// A return address this host's own connections leave from (the
// interface's own address) is refused by a change while the executor
// runs; kept by executor start, which warns, and by the report while it
// lasts; a change that keeps it (a weight) is not refused.
func TestReturnSourceWarned(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	h.nif.mu.Lock()
	h.nif.src = netip.MustParseAddr("198.18.0.1")
	h.nif.mu.Unlock()
	const own = "198.18.0.1"
	srv := vip + "@8080@198.18.0.23"
	nat := withP(op("port", "add", vip+"@8080"), config.P("method", "nat"))
	if err := h.apply(nat, withP(op("server", "add", srv), config.P("returnaddress", own))); lb.FieldOf(err) != "returnaddress" ||
		!strings.Contains(err.Error(), "198.18.0.1 is an address this host uses itself (its connections to 198.18.0.2") {
		t.Fatalf("a NAT server with the host's own address as return address: %v; want a refusal naming returnaddress and why", err)
	}

	h.mustApply(op("executor", "stop", ""), nat, withP(op("server", "add", srv), config.P("returnaddress", own)))
	a, err := h.e.ApplyWithNotes(context.Background(), []config.Op{op("executor", "start", "")})
	if err != nil {
		t.Fatalf("executor start: %v", err)
	}
	const key = "return address 198.18.0.1 is an address this host uses itself"
	if !slices.ContainsFunc(a.Warnings, func(w string) bool { return strings.HasPrefix(w, key) }) {
		t.Errorf("executor start's warnings %q lack %q", a.Warnings, key)
	}
	if w := h.executorWarnings(key); len(w) != 1 || !strings.HasSuffix(w[0], "(dlbctl server set CLUSTER@PORT@SERVER returnaddress ADDRESS)") {
		t.Errorf("executor report's warnings %q", w)
	}
	h.mustApply(withP(op("server", "set", srv), config.P("weight", "5")))
	h.mustApply(withP(op("server", "set", srv), config.P("returnaddress", "198.18.0.3")))
	if w := h.executorWarnings(key); len(w) != 0 {
		t.Errorf("warnings with a return address of its own: %q", w)
	}
}

// A return address of a NAT server added while the executor was stopped
// is put on the interface when it starts (the servers' replies come to
// it), and taken off when its last server goes.
func TestReturnAddressAddedWhileStopped(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h)
	ra := netip.MustParseAddr("198.18.0.4")
	h.mustApply(op("executor", "stop", ""), withP(op("port", "add", vip+"@8080"), config.P("method", "nat")),
		withP(op("server", "add", vip+"@8080@198.18.0.23"), config.P("returnaddress", ra.String())))
	h.mustApply(op("executor", "start", ""))
	if ifname, ok := h.nif.address(ra); !ok || ifname != "eth0" {
		t.Errorf("return address %s after executor start: on %q (%v); want on eth0", ra, ifname, ok)
	}
	h.mustApply(op("server", "remove", vip+"@8080@198.18.0.23"))
	if ifname, ok := h.nif.address(ra); ok {
		t.Errorf("return address %s still on %s after its last server went", ra, ifname)
	}
}

// A cluster address on the executor's interface that the host's own
// connections leave from (an IPv6 one put on by hand, not deprecated) is
// warned of by the change that configures it, and while it lasts.
func TestClusterSourceWarned(t *testing.T) {
	h := newHarness(t, t.TempDir())
	base(h) // vip on eth0 (--configure)
	const key = "cluster address 198.18.0.100 is an address this host uses itself"
	if w := h.executorWarnings(key); len(w) != 0 {
		t.Fatalf("warned before: %q", w)
	}
	h.nif.mu.Lock()
	h.nif.src = netip.MustParseAddr(vip)
	h.nif.mu.Unlock()
	eventually(t, "the warning", func() bool {
		w := h.executorWarnings(key)
		return len(w) == 1 && strings.HasSuffix(w[0], "; let the host's connections leave from another address")
	})
	h.mustApply(op("cluster", "set", vip, "configure", "no"))
	if w := h.executorWarnings(key); len(w) != 0 {
		t.Errorf("warned with the cluster address off the interface: %q", w)
	}
	a, err := h.e.ApplyWithNotes(context.Background(), []config.Op{op("cluster", "set", vip, "configure", "yes")})
	if err != nil || !slices.ContainsFunc(a.Warnings, func(w string) bool { return strings.HasPrefix(w, key) }) {
		t.Errorf("configuring it again: %v, warnings %q; want one starting %q", err, a.Warnings, key)
	}
	h.nif.mu.Lock()
	h.nif.src = netip.MustParseAddr("198.18.0.1")
	h.nif.mu.Unlock()
	eventually(t, "the warning to go", func() bool { return len(h.executorWarnings(key)) == 0 })
}
