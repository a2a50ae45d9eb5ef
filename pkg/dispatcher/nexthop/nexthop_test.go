package nexthop

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
)

var discard = slog.New(slog.DiscardHandler)

func mac(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

var (
	vip    = netip.MustParseAddr("198.18.0.100")
	s1     = netip.MustParseAddr("198.18.0.21")
	s2     = netip.MustParseAddr("198.18.0.22")
	router = netip.MustParseAddr("198.18.1.1")
	gw     = netip.MustParseAddr("198.18.0.1")
)

// testConfig returns a configuration whose port 80 has servers s1 and s2,
// port 81 s1 and a NAT server behind router, and whose client gateway
// is gw.
func testConfig() lb.Config {
	p80 := lb.NewPort(80)
	p80.Servers = []lb.Server{{Address: s1}, {Address: s2}}
	p81 := lb.NewPort(81)
	p81.Servers = []lb.Server{{Address: s1}, {Address: netip.MustParseAddr("198.18.2.5"), Router: router}}
	cfg := lb.Config{Clusters: []lb.Cluster{{Address: vip, Ports: []lb.Port{p80, p81}}}}
	cfg.Executor.ClientGateway = gw
	cfg.Sort()
	return cfg
}

// resolver answers from its maps, counting calls.
type resolver struct {
	neigh map[netip.Addr]lb.Neighbor
	errs  map[netip.Addr]error
	calls int
}

func (r *resolver) Neighbors(addrs []netip.Addr) (map[netip.Addr]lb.Neighbor, map[netip.Addr]error) {
	r.calls++
	got, errs := map[netip.Addr]lb.Neighbor{}, map[netip.Addr]error{}
	for _, a := range addrs {
		if nb, ok := r.neigh[a]; ok {
			got[a] = nb
		}
		if err, ok := r.errs[a]; ok {
			errs[a] = err
		}
	}
	return got, errs
}

func TestIndexAndUpdate(t *testing.T) {
	cfg := testConfig()
	tab := New()
	tab.Index(cfg)
	k80, k81 := lb.ServiceKey{Cluster: vip, Port: 80}, lb.ServiceKey{Cluster: vip, Port: 81}
	if got := tab.Users(s1); len(got) != 2 || got[k80] != 1 || got[k81] != 1 {
		t.Errorf("users of s1: %v", got)
	}
	if got := tab.Users(router); len(got) != 1 || got[k81] != 1 {
		t.Errorf("users of the router: %v", got)
	}
	hops := tab.ServerHops()
	slices.SortFunc(hops, netip.Addr.Compare)
	if want := []netip.Addr{s1, s2, router}; !slices.Equal(hops, want) {
		t.Errorf("server hops %v, want %v", hops, want)
	}

	r := &resolver{neigh: map[netip.Addr]lb.Neighbor{
		s1: {Ifindex: 3, MAC: mac("02:00:00:00:00:21")}, s2: {Ifindex: 3, MAC: mac("02:00:00:00:00:22")},
		router: {Ifindex: 3, MAC: mac("02:00:00:00:01:01")}, gw: {Ifindex: 3, MAC: mac("02:00:00:00:00:01")},
	}}
	tab.Refresh(r, discard, AllHops(cfg))

	// s2 leaves port 80: nothing else uses it, so it is forgotten; s1
	// leaves port 80 but port 81 keeps it.
	next := cfg.Clone()
	next.Clusters[0].Ports[0].Servers = nil
	ch := config.Diff(cfg, next)
	gone := tab.Update(cfg, next, ch)
	if !slices.Equal(gone, []netip.Addr{s2}) {
		t.Errorf("gone %v, want [%v]", gone, s2)
	}
	if _, ok := tab.Neighbor(s2); ok || tab.Users(s2) != nil {
		t.Errorf("s2 still known")
	}
	if tab.MAC(s1) == nil || tab.Users(s1)[k80] != 0 || tab.Users(s1)[k81] != 1 {
		t.Errorf("s1: MAC %v, users %v", tab.MAC(s1), tab.Users(s1))
	}
	if tab.MAC(gw) == nil {
		t.Errorf("the client gateway, which next keeps, was forgotten")
	}
}

func TestRefresh(t *testing.T) {
	m1, m2 := mac("02:00:00:00:00:21"), mac("02:00:00:00:00:99")
	if1, if2 := mac("02:00:00:00:00:02"), mac("02:00:00:00:00:03")
	unreachable := errors.New("no route")
	src1, src2 := netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.3")
	for _, c := range []struct {
		name        string
		before, now *lb.Neighbor // nil: none (now: the error)
		changed     bool
		wantMAC     net.HardwareAddr
		wantErr     bool
		wantSrc     netip.Addr
	}{
		{name: "resolved", now: &lb.Neighbor{Ifindex: 3, IfMAC: if1, MAC: m1}, changed: true, wantMAC: m1},
		{name: "the same", before: &lb.Neighbor{Ifindex: 3, IfMAC: if1, MAC: m1}, now: &lb.Neighbor{Ifindex: 3, IfMAC: if1, MAC: m1}, wantMAC: m1},
		{name: "its MAC changed", before: &lb.Neighbor{Ifindex: 3, IfMAC: if1, MAC: m1}, now: &lb.Neighbor{Ifindex: 3, IfMAC: if1, MAC: m2}, changed: true, wantMAC: m2},
		{name: "the interface's own MAC changed", before: &lb.Neighbor{Ifindex: 3, IfMAC: if1, MAC: m1}, now: &lb.Neighbor{Ifindex: 3, IfMAC: if2, MAC: m1}, changed: true, wantMAC: m1},
		{name: "another interface", before: &lb.Neighbor{Ifindex: 3, IfMAC: if1, MAC: m1}, now: &lb.Neighbor{Ifindex: 4, IfMAC: if2, MAC: m1}, changed: true, wantMAC: m1},
		{name: "re-resolving keeps the last MAC", before: &lb.Neighbor{Ifindex: 3, IfMAC: if1, MAC: m1}, now: &lb.Neighbor{Ifindex: 3, IfMAC: if1}, wantMAC: m1},
		{name: "unreachable", before: &lb.Neighbor{Ifindex: 3, IfMAC: if1, MAC: m1}, wantMAC: m1, wantErr: true},
		{name: "not resolved yet", now: &lb.Neighbor{Ifindex: 3, IfMAC: if1}, changed: true},
		{name: "the host's source changed: nothing to write", before: &lb.Neighbor{Ifindex: 3, IfMAC: if1, MAC: m1, Src: src1},
			now: &lb.Neighbor{Ifindex: 3, IfMAC: if1, MAC: m1, Src: src2}, wantMAC: m1, wantSrc: src2},
		{name: "unreachable keeps the source", before: &lb.Neighbor{Ifindex: 3, IfMAC: if1, MAC: m1, Src: src1}, wantMAC: m1, wantErr: true, wantSrc: src1},
	} {
		t.Run(c.name, func(t *testing.T) {
			tab := New()
			r := &resolver{neigh: map[netip.Addr]lb.Neighbor{}, errs: map[netip.Addr]error{}}
			if c.before != nil {
				r.neigh[s1] = *c.before
				tab.Refresh(r, discard, []netip.Addr{s1})
			}
			delete(r.neigh, s1)
			if c.now != nil {
				r.neigh[s1] = *c.now
			} else {
				r.errs[s1] = unreachable
			}
			changed := tab.Refresh(r, discard, []netip.Addr{s1})
			if got := len(changed) == 1; got != c.changed {
				t.Errorf("changed %v, want %v", changed, c.changed)
			}
			if got := tab.MAC(s1); got.String() != c.wantMAC.String() {
				t.Errorf("MAC %v, want %v", got, c.wantMAC)
			}
			if nb, _ := tab.Neighbor(s1); nb.Src != c.wantSrc {
				t.Errorf("source %v, want %v", nb.Src, c.wantSrc)
			}
			if got := tab.Err(s1) != nil; got != c.wantErr {
				t.Errorf("error %v, want one: %v", tab.Err(s1), c.wantErr)
			}
			hop := tab.Hop(s1)
			if c.wantMAC != nil && (hop.MAC.String() != c.wantMAC.String() || hop.Ifindex == 0) {
				t.Errorf("hop %+v", hop)
			}
			if c.wantMAC == nil && hop.MAC != nil {
				t.Errorf("hop %+v without a MAC", hop)
			}
		})
	}
}

func TestFromEvent(t *testing.T) {
	m1, m2 := mac("02:00:00:00:00:21"), mac("02:00:00:00:00:99")
	for _, c := range []struct {
		name string
		ev   lb.NetEvent
		want Event
		mac  net.HardwareAddr
	}{
		{name: "no usable MAC", ev: lb.NetEvent{Addr: s1, Ifindex: 3}, want: Same, mac: m1},
		{name: "the same MAC", ev: lb.NetEvent{Addr: s1, Ifindex: 3, MAC: m1}, want: Same, mac: m1},
		{name: "a new MAC", ev: lb.NetEvent{Addr: s1, Ifindex: 3, MAC: m2}, want: Changed, mac: m2},
		{name: "another interface", ev: lb.NetEvent{Addr: s1, Ifindex: 4, MAC: m2}, want: Refresh, mac: m1},
		{name: "an unknown hop", ev: lb.NetEvent{Addr: s2, Ifindex: 3, MAC: m2}, want: Refresh, mac: m1},
	} {
		t.Run(c.name, func(t *testing.T) {
			tab := New()
			tab.Refresh(&resolver{neigh: map[netip.Addr]lb.Neighbor{s1: {Ifindex: 3, MAC: m1}}}, discard, []netip.Addr{s1})
			if got := tab.FromEvent(c.ev, discard); got != c.want {
				t.Errorf("event %v, want %v", got, c.want)
			}
			if got := tab.MAC(s1); got.String() != c.mac.String() {
				t.Errorf("MAC %v, want %v", got, c.mac)
			}
		})
	}
}

func TestMoved(t *testing.T) {
	tab := New()
	r := &resolver{neigh: map[netip.Addr]lb.Neighbor{
		s1: {Ifindex: 3, IfMAC: mac("02:00:00:00:00:02"), MAC: mac("02:00:00:00:00:21")},
		s2: {Ifindex: 5, IfMAC: mac("02:00:00:00:00:05"), MAC: mac("02:00:00:00:00:22")},
	}}
	tab.Refresh(r, discard, []netip.Addr{s1, s2})
	tab.Moved(3, lb.Link{Index: 7, MAC: mac("02:00:00:00:00:07")})
	if h := tab.Hop(s1); h.Ifindex != 7 || h.SrcMAC.String() != "02:00:00:00:00:07" || h.MAC.String() != "02:00:00:00:00:21" {
		t.Errorf("s1's hop after the move: %+v", h)
	}
	if h := tab.Hop(s2); h.Ifindex != 5 {
		t.Errorf("s2, on another interface, moved: %+v", h)
	}
}

func TestOrder(t *testing.T) {
	cfg := testConfig()
	tab := New()
	tab.Index(cfg)
	want := []netip.Addr{gw, s1, s2, router} // sorted: 198.18.0.1, .0.21, .0.22, .1.1
	if got := tab.Order(cfg); !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	if got := tab.Order(lb.Config{}); !slices.Equal(got, want) {
		t.Errorf("the order is kept until the hops change: %v", got)
	}
	next := cfg.Clone()
	next.Clusters[0].Ports[0].Servers = nil // s2 goes; s1 stays on port 81
	tab.Update(cfg, next, config.Diff(cfg, next))
	if got, want := tab.Order(next), []netip.Addr{gw, s1, router}; !slices.Equal(got, want) {
		t.Errorf("after a change: %v, want %v", got, want)
	}
}

func TestWaitAndAsked(t *testing.T) {
	tab := New()
	r := &resolver{neigh: map[netip.Addr]lb.Neighbor{s1: {Ifindex: 3, MAC: mac("02:00:00:00:00:21")}, s2: {Ifindex: 3}},
		errs: map[netip.Addr]error{router: errors.New("network unreachable")}}
	began := time.Now()
	left := tab.Wait(r, discard, []netip.Addr{s1, s2, router}, 100*time.Millisecond, nil)
	if !slices.Equal(left, []netip.Addr{s2}) {
		t.Errorf("unresolved after the wait: %v, want [%v]", left, s2)
	}
	if took := time.Since(began); took < 100*time.Millisecond || r.calls < 2 {
		t.Errorf("waited %v, %d lookups", took, r.calls)
	}
	if asked := tab.TakeAsked(); len(asked) != 3 {
		t.Errorf("asked %v", asked)
	}
	if asked := tab.TakeAsked(); len(asked) != 0 {
		t.Errorf("asked again %v", asked)
	}
	tab.Wait(r, discard, []netip.Addr{s1}, time.Second, nil)
	tab.ClearAsked()
	if asked := tab.TakeAsked(); len(asked) != 0 {
		t.Errorf("asked after ClearAsked: %v", asked)
	}
	tab.Drop(s1)
	if _, ok := tab.Neighbor(s1); ok {
		t.Errorf("s1 known after Drop")
	}
	tab.Clear()
	if tab.Err(router) != nil {
		t.Errorf("an error kept after Clear")
	}
}
