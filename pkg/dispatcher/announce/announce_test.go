package announce

import (
	"math"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/dispatcher/health"
	"github.com/dlbproject/dlb/pkg/lb"
)

var (
	vip1 = netip.MustParseAddr("198.18.0.100")
	vip2 = netip.MustParseAddr("198.18.0.101")
	t0   = time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
)

func port(vip netip.Addr, n uint16) lb.ServiceKey { return lb.ServiceKey{Cluster: vip, Port: n} }

// TestPortsUp: a cluster is up while one of its ports has a server that
// takes new connections; a port removed or without one no longer counts.
func TestPortsUp(t *testing.T) {
	b := New()
	for _, c := range []struct {
		name      string
		sk        lb.ServiceKey
		accepting []bool
		present   bool
		up1, up2  bool
	}{
		{"a port with a server up", port(vip1, 80), []bool{false, true}, true, true, false},
		{"another port of the cluster up", port(vip1, 443), []bool{true}, true, true, false},
		{"the first down", port(vip1, 80), []bool{false, false}, true, true, false},
		{"the same again", port(vip1, 80), []bool{false, false}, true, true, false},
		{"the second removed", port(vip1, 443), nil, false, false, false},
		{"a removed port again", port(vip1, 443), nil, false, false, false},
		{"another cluster up", port(vip2, 80), []bool{true}, true, false, true},
		{"a port without servers", port(vip1, 8080), nil, true, false, true},
	} {
		b.Port(c.sk, c.accepting, c.present, t0)
		if b.Up(vip1) != c.up1 || b.Up(vip2) != c.up2 {
			t.Errorf("%s: up %v %v, want %v %v", c.name, b.Up(vip1), b.Up(vip2), c.up1, c.up2)
		}
	}
}

// TestSettled: a cluster not announced is announced only once its
// servers kept their states for the settle time; which servers accept,
// not only whether one does, counts as a change; an announced cluster
// stays announced.
func TestSettled(t *testing.T) {
	const settle = 2 * time.Second
	b := New()
	b.Port(port(vip1, 80), []bool{true, false}, true, t0)
	for _, c := range []struct {
		name      string
		at        time.Duration
		accepting []bool // the port's servers at that time (nil: no change)
		settled   bool
	}{
		{"at once", 0, nil, false},
		{"before the settle time", settle - time.Millisecond, nil, false},
		{"after it", settle, nil, true},
		{"another server accepts instead", settle + time.Second, []bool{false, true}, false},
		{"the same servers again", settle + 2*time.Second, []bool{false, true}, false},
		{"settled again", 2*settle + time.Second, nil, true},
	} {
		now := t0.Add(c.at)
		if c.accepting != nil {
			b.Port(port(vip1, 80), c.accepting, true, now)
		}
		if got := b.Settled(vip1, now, settle); got != c.settled {
			t.Errorf("%s: settled %v, want %v", c.name, got, c.settled)
		}
	}
	b.Told(map[netip.Addr]lb.Route{vip1: {Prefix: netip.PrefixFrom(vip1, 32)}})
	b.Port(port(vip1, 80), []bool{true, true}, true, t0.Add(time.Hour))
	if !b.Settled(vip1, t0.Add(time.Hour), settle) {
		t.Error("an announced cluster whose servers changed is not settled: it would be withdrawn")
	}
}

// TestProbes: a probe this host could not make is remembered until made
// again (or forgotten), and its clusters must settle again once it is.
func TestProbes(t *testing.T) {
	b := New()
	k := health.Key{Advisor: "http@80", Addr: netip.MustParseAddr("198.18.0.21"), Port: 80}
	b.ProbeUnmade(k)
	if got := b.UnmadeProbes(); !slices.Equal(got, []health.Key{k}) {
		t.Fatalf("unmade %v", got)
	}
	b.ProbeMade(k, []netip.Addr{vip1}, t0)
	if got := b.UnmadeProbes(); len(got) != 0 {
		t.Errorf("unmade after the probe was made: %v", got)
	}
	if b.Settled(vip1, t0.Add(MinSettle/2), MinSettle) || !b.Settled(vip2, t0, MinSettle) {
		t.Error("a made probe's cluster must settle again, and only it")
	}
	b.ProbeUnmade(k)
	b.ForgetProbe(k)
	if got := b.UnmadeProbes(); len(got) != 0 {
		t.Errorf("unmade after forgetting: %v", got)
	}
}

// TestChange: what the speaker is told, and what that withdraws and
// announces, against what it was told last.
func TestChange(t *testing.T) {
	r1 := lb.Route{Prefix: netip.PrefixFrom(vip1, 32)}
	r2 := lb.Route{Prefix: netip.PrefixFrom(vip2, 32)}
	r1med := lb.Route{Prefix: r1.Prefix, MED: 10}
	b := New()
	for _, c := range []struct {
		name                 string
		want                 map[netip.Addr]lb.Route
		routes               []lb.Route
		withdrawn, announced []netip.Addr
		changed              bool
	}{
		{"nothing to nothing", map[netip.Addr]lb.Route{}, nil, nil, nil, false},
		{"two announced, sorted", map[netip.Addr]lb.Route{vip2: r2, vip1: r1}, []lb.Route{r1, r2}, nil, []netip.Addr{vip1, vip2}, true},
		{"the same", map[netip.Addr]lb.Route{vip1: r1, vip2: r2}, []lb.Route{r1, r2}, nil, nil, false},
		{"a MED changed", map[netip.Addr]lb.Route{vip1: r1med, vip2: r2}, []lb.Route{r1med, r2}, nil, nil, true},
		{"one withdrawn", map[netip.Addr]lb.Route{vip1: r1med}, []lb.Route{r1med}, []netip.Addr{vip2}, nil, true},
		{"all withdrawn", map[netip.Addr]lb.Route{}, nil, []netip.Addr{vip1}, nil, true},
	} {
		routes, withdrawn, announced, changed := b.Change(c.want)
		if !slices.EqualFunc(routes, c.routes, lb.Route.Equal) || !slices.Equal(withdrawn, c.withdrawn) ||
			!slices.Equal(announced, c.announced) || changed != c.changed {
			t.Errorf("%s: %v, withdrawn %v, announced %v, changed %v; want %v, %v, %v, %v", c.name,
				routes, withdrawn, announced, changed, c.routes, c.withdrawn, c.announced, c.changed)
		}
		b.Told(c.want)
		for a := range c.want {
			if !b.Announced(a) {
				t.Errorf("%s: %v not announced after being told", c.name, a)
			}
		}
	}
}

// TestSettleTime: the longest time an advisor covering the cluster takes
// to bring a server up, at least MinSettle.
func TestSettleTime(t *testing.T) {
	cl := lb.Cluster{Address: vip1, Ports: []lb.Port{{Number: 80}}}
	for _, c := range []struct {
		name     string
		advisors []lb.Advisor
		want     time.Duration
	}{
		{"no advisor", nil, MinSettle},
		{"a fast one", []lb.Advisor{{Name: "http", Port: 80, Interval: 0.2, Rise: 2}}, MinSettle},
		{"interval × rise", []lb.Advisor{{Name: "http", Port: 80, Interval: 2, Rise: 3}}, 6 * time.Second},
		{"another port's", []lb.Advisor{{Name: "http", Port: 443, Interval: 5, Rise: 3}}, MinSettle},
		{"another cluster's", []lb.Advisor{{Name: "http", Cluster: vip2, Port: 80, Interval: 5, Rise: 3}}, MinSettle},
	} {
		if got := SettleTime(lb.Config{Advisors: c.advisors}, &cl); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestStandby(t *testing.T) {
	for _, tc := range []struct{ med, want uint32 }{
		{0, 1}, {20, 21}, {math.MaxUint32 - 1, math.MaxUint32}, {math.MaxUint32, math.MaxUint32},
	} {
		r := lb.Route{Prefix: netip.MustParsePrefix("198.18.0.100/32"), MED: tc.med, Communities: []string{"65000:1"}}
		got := Standby(r)
		if got.MED != tc.want || got.Prefix != r.Prefix || len(got.Communities) != 1 {
			t.Errorf("Standby(MED %d) = %+v, want MED %d and the rest kept", tc.med, got, tc.want)
		}
	}
}
