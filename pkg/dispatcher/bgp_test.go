package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlbproject/dlb/advisors"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher/announce"
	"github.com/dlbproject/dlb/pkg/lb"
)

// fakeSpeaker records what the engine asks of the BGP speaker.
type fakeSpeaker struct {
	mu        sync.Mutex
	cfg       lb.BGP
	routes    []lb.Route
	announces int
	closed    int
	checkErr  error // returned by Check
	failNext  error // returned by the next Configure
}

func (f *fakeSpeaker) Check(lb.BGP) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checkErr
}

func (f *fakeSpeaker) Configure(b lb.BGP) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failNext; err != nil {
		f.failNext = nil
		return err
	}
	f.cfg = b.Clone()
	return nil
}

func (f *fakeSpeaker) Announce(rs []lb.Route) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routes = slices.Clone(rs)
	f.announces++
	return nil
}

func (f *fakeSpeaker) Status() lb.BGPStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := lb.BGPStatus{Running: f.cfg.Enabled()}
	for _, r := range f.routes {
		st.Announced = append(st.Announced, r.Prefix)
	}
	return st
}

func (f *fakeSpeaker) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed++
	f.routes = nil
	return nil
}

// announced lists the announced prefixes with their attributes, as
// "prefix med communities".
func (f *fakeSpeaker) announced() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, r := range f.routes {
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %d %s", r.Prefix, r.MED, strings.Join(r.Communities, ","))))
	}
	return strings.Join(out, "; ")
}

func (f *fakeSpeaker) config() lb.BGP {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cfg.Clone()
}

func bgpOps() []config.Op {
	return []config.Op{
		op("bgp", "set", "", "asn", "65001", "routerid", "198.18.0.2"),
		op("neighbor", "add", "198.18.0.1", "remoteas", "65000"),
	}
}

// TestAnnouncementFollowsTheCluster walks a cluster through the states
// that announce or withdraw it: announced while the executor is attached
// and a server takes connections; withdrawn when the advisor fails every
// server, when the operator marks them down, on executor stop, on cluster
// remove, and on shutdown.
func TestAnnouncementFollowsTheCluster(t *testing.T) {
	sp := &fakeSpeaker{}
	fp := newFakeProber()
	h := newHarnessWith(t, t.TempDir(), func(o *Options) {
		o.Speaker = sp
		o.NewAdvisor = newFakeAdvisor(fp)
	})
	base(h)
	h.mustApply(bgpOps()...)
	if got := sp.config(); got.ASN != 65001 || len(got.Neighbors) != 1 || got.Neighbors[0].HoldTime != lb.DefaultHoldTime {
		t.Fatalf("speaker configured with %+v", got)
	}
	if got := sp.announced(); got != "" {
		t.Fatalf("announced %q before the cluster asked for it", got)
	}
	h.mustApply(op("cluster", "set", vip, "announce", "yes", "med", "20"))
	const want = "198.18.0.100/32 20"
	eventually(t, "announced", func() bool { return sp.announced() == want })

	cases := []struct {
		name         string
		do, undo     func()
		withdrawWhy  string
		stillAnnonce bool
	}{
		// (The cases where servers change state wait for them to settle
		// before announcing again.)
		{"advisor fails every server", func() { fp.set(s1, true, 0); fp.set(s2Addr, true, 0) },
			func() { fp.set(s1, false, 0); fp.set(s2Addr, false, 0) }, "no server takes new connections", false},
		{"advisor fails one server", func() { fp.set(s1, true, 0) }, func() { fp.set(s1, false, 0) }, "", true},
		{"operator marks all down", func() { h.mustApply(op("server", "down", "@@")) },
			func() { h.mustApply(op("server", "up", "@@")) }, "no server takes new connections", false},
		{"port 80 down, 443 up", func() { h.mustApply(op("server", "down", vip+"@80@")) },
			func() { h.mustApply(op("server", "up", vip+"@80@")) }, "", true},
		{"weights zero", func() { h.mustApply(op("server", "set", "@@", "weight", "0")) },
			func() { h.mustApply(op("server", "set", "@@", "weight", "10")) }, "no server takes new connections", false},
		{"executor stopped", func() { h.mustApply(op("executor", "stop", "")) },
			func() { h.mustApply(op("executor", "start", "", "interface", "eth0")) }, "the executor is not attached", false},
		{"announce off", func() { h.mustApply(op("cluster", "set", vip, "announce", "no")) },
			func() { h.mustApply(op("cluster", "set", vip, "announce", "yes")) }, "announce is off", false},
		// Probes this host cannot make (its route or NFA gone) leave the
		// servers' states unverified: other dispatchers may see them
		// otherwise.
		{"advisor cannot probe", func() { fp.setLocal(true) }, func() { fp.setLocal(false) },
			"its advisors cannot probe its servers from this host", false},
	}
	for _, port := range []string{"@80", "@443"} {
		h.mustApply(op("advisor", "start", port, "advisor", "connect", "interval", "0.1", "rise", "1", "fall", "1"))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			began := time.Now()
			tc.do()
			if tc.stillAnnonce {
				time.Sleep(300 * time.Millisecond)
				if got := sp.announced(); got != want {
					t.Fatalf("announced %q, want %q", got, want)
				}
			} else {
				eventually(t, "withdrawn", func() bool { return sp.announced() == "" })
				t.Logf("withdrawn %v after the change", time.Since(began).Round(time.Millisecond))
				if why := h.status(Query{BGP: true}).BGP.Clusters[netip.MustParseAddr(vip)]; why != tc.withdrawWhy {
					t.Errorf("report says %q, want %q", why, tc.withdrawWhy)
				}
			}
			undone := time.Now()
			tc.undo()
			eventually(t, "announced again", func() bool { return sp.announced() == want })
			// A withdrawn cluster comes back only once its servers have
			// kept their states for the settle time.
			settles := tc.withdrawWhy == "no server takes new connections" || tc.name == "advisor cannot probe"
			if took := time.Since(undone); settles && took < announce.MinSettle {
				t.Errorf("announced again %v after the change, before the servers settled (%v)", took, announce.MinSettle)
			}
			if why, ok := h.status(Query{BGP: true}).BGP.Clusters[netip.MustParseAddr(vip)]; !ok || why != "" {
				t.Errorf("report says %q (listed %v) for an announced cluster", why, ok)
			}
		})
	}

	// Communities change the announcement in place.
	h.mustApply(op("cluster", "set", vip, "communities", "65000:100+no-export"))
	eventually(t, "communities", func() bool { return sp.announced() == "198.18.0.100/32 20 65000:100,no-export" })

	// The announcement survives a restart of dlbd (the speaker is
	// configured from the saved state), and a shutdown withdraws it.
	closed := sp.closed
	h.restart()
	if sp.closed != closed+1 {
		t.Errorf("shutdown closed the speaker %d times", sp.closed-closed)
	}
	eventually(t, "announced after restart", func() bool {
		if sp.announced() == "198.18.0.100/32 20 65000:100,no-export" {
			return true
		}
		t.Logf("not announced: %+v", h.status(Query{BGP: true}).BGP)
		return false
	})

	h.mustApply(op("cluster", "remove", vip))
	eventually(t, "withdrawn with its cluster", func() bool { return sp.announced() == "" })
	h.mustApply(op("bgp", "remove", ""))
	if got := sp.config(); got.Enabled() {
		t.Errorf("bgp remove left the speaker configured: %+v", got)
	}
}

// newFakeAdvisor returns the advisor factory of the fake prober.
func newFakeAdvisor(fp *fakeProber) func(lb.Advisor) (advisors.Advisor, error) {
	return func(lb.Advisor) (advisors.Advisor, error) { return fp, nil }
}

// TestBGPRefusals checks that a configuration the speaker refuses changes
// nothing.
func TestBGPRefusals(t *testing.T) {
	sp := &fakeSpeaker{}
	h := newHarnessWith(t, t.TempDir(), func(o *Options) { o.Speaker = sp })
	base(h)
	h.mustApply(bgpOps()...)

	sp.checkErr = lb.Errorf("routerid", "bgp", "198.18.0.9 is not an address of this host")
	err := h.apply(op("bgp", "set", "", "routerid", "198.18.0.9"))
	if lb.FieldOf(err) != "routerid" {
		t.Fatalf("got %v", err)
	}
	sp.checkErr = nil
	sp.failNext = errors.New("listen tcp :179: address already in use")
	if err := h.apply(op("bgp", "set", "", "listenport", "179")); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("got %v", err)
	}
	if got := sp.config(); got.RouterID != netip.MustParseAddr("198.18.0.2") || got.ListenPort != 0 {
		t.Errorf("speaker left with %+v", got)
	}
	if got := h.config().BGP; got.RouterID != netip.MustParseAddr("198.18.0.2") || got.ListenPort != 0 {
		t.Errorf("configuration changed to %+v", got)
	}

	// Without a speaker, BGP settings are refused.
	h2 := newHarness(t, t.TempDir())
	if err := h2.apply(bgpOps()[0]); lb.FieldOf(err) != "bgp" {
		t.Errorf("a dlbd without a speaker took bgp settings: %v", err)
	}
}

// tablesByAddress returns every port's Maglev table as the executor holds
// it, with each slot naming its server's address instead of its id: the
// ids are a dispatcher's own, the addresses are what every dispatcher must
// agree on.
func tablesByAddress(t *testing.T, h *harness) map[string][]byte {
	t.Helper()
	dp := h.dp.state()
	addr := map[uint32]netip.Addr{}
	for _, b := range dp.Backends {
		addr[b.ID] = b.Address
	}
	out := map[string][]byte{}
	for _, s := range dp.Services {
		var buf []byte
		for _, id := range s.Table {
			buf = addr[id].AppendTo(buf)
			buf = append(buf, '\n')
		}
		out[lb.ServiceKey{Cluster: s.Cluster, Port: s.Port}.String()] = buf
	}
	return out
}

// TestMaglevTablesAreTheSameOnEveryDispatcher configures two engines with
// the same servers in different orders (one of them also adds and removes
// others first, so that the ids differ) and checks that every port's
// table sends every slot to the same server, before and after a restart
// and after the same change is made on both.
func TestMaglevTablesAreTheSameOnEveryDispatcher(t *testing.T) {
	servers := []string{"198.18.0.21", "198.18.0.22", "198.18.0.23", "198.18.0.24", "198.18.0.25"}
	weights := map[string]string{"198.18.0.21": "10", "198.18.0.22": "5", "198.18.0.23": "10", "198.18.0.24": "7", "198.18.0.25": "1"}
	setup := func(h *harness, order []string, ports []string, churn bool) {
		h.mustApply(op("executor", "start", "", "interface", "eth0"), op("cluster", "add", vip))
		for _, p := range ports {
			h.mustApply(op("port", "add", vip+"@"+p))
		}
		if churn {
			h.mustApply(op("server", "add", vip+"@@198.18.0.29"), op("server", "add", vip+"@@198.18.0.28"))
			h.mustApply(op("server", "remove", vip+"@@198.18.0.29+198.18.0.28"))
		}
		for _, s := range order {
			for _, p := range ports {
				h.mustApply(op("server", "add", vip+"@"+p+"@"+s, "weight", weights[s]))
			}
		}
	}
	a := newHarness(t, t.TempDir())
	b := newHarness(t, t.TempDir())
	setup(a, servers, []string{"80", "443", "8080"}, false)
	rev := slices.Clone(servers)
	slices.Reverse(rev)
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(rev), func(i, j int) { rev[i], rev[j] = rev[j], rev[i] })
	setup(b, rev, []string{"8080", "443", "80"}, true)

	idsDiffer := false
	for k, id := range a.e.ids.Backends {
		if b.e.ids.Backends[k] != id {
			idsDiffer = true
		}
	}
	if !idsDiffer {
		t.Fatal("the two engines gave the same ids: the test would not show that tables ignore them")
	}
	compare := func(when string) {
		t.Helper()
		ta, tb := tablesByAddress(t, a), tablesByAddress(t, b)
		if len(ta) != 3 || len(tb) != 3 {
			t.Fatalf("%s: %d and %d ports", when, len(ta), len(tb))
		}
		for k, x := range ta {
			if len(x) == 0 {
				t.Fatalf("%s: %s has no table", when, k)
			}
			if string(x) != string(tb[k]) {
				t.Errorf("%s: %s: the tables send some slots to different servers", when, k)
			}
		}
		// The port report's digests say the same.
		da, db := digests(t, a), digests(t, b)
		if len(da) != 3 || !maps.Equal(da, db) {
			t.Errorf("%s: table digests %v and %v", when, da, db)
		}
		for k, d := range da {
			if d == 0 {
				t.Errorf("%s: %s has no digest", when, k)
			}
		}
	}
	compare("configured")
	// The three ports have the same servers and weights: one layout,
	// one digest.
	if da := digests(t, a); da[vip+"@80"] != da[vip+"@443"] || da[vip+"@80"] != da[vip+"@8080"] {
		t.Errorf("ports of the same servers have digests %v", da)
	}
	b.restart()
	compare("after a restart")
	a.restart()
	compare("after both restarted")
	for _, h := range []*harness{a, b} {
		h.mustApply(op("server", "remove", vip+"@443@198.18.0.23"), op("server", "set", vip+"@80@198.18.0.25", "weight", "9"))
	}
	compare("after the same change")

	// A change on one of them only: its digest differs.
	b.mustApply(op("server", "set", vip+"@80@198.18.0.21", "weight", "1"))
	if da, db := digests(t, a), digests(t, b); da[vip+"@80"] == db[vip+"@80"] || da[vip+"@443"] != db[vip+"@443"] {
		t.Errorf("after a change on one dispatcher: digests %v and %v", da, db)
	}
	// Digests computed afresh, by a restarted engine, are the same.
	before := digests(t, b)
	b.restart()
	if after := digests(t, b); !maps.Equal(before, after) {
		t.Errorf("digests %v, computed afresh after a restart %v", before, after)
	}
}

// digests returns every port's table digest as the status reports it.
func digests(t *testing.T, h *harness) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for k, p := range h.status(Query{Depth: lb.PortDepth}).Ports {
		out[k.String()] = p.TableDigest
	}
	return out
}

// TestAnnouncedTablesKeepTheirSize: a port of an announced cluster keeps
// one table size whatever its servers, so that removing a server moves
// its own slots and (almost) no others, on every dispatcher alike; a port
// of a cluster that is not announced sizes its table by its servers.
func TestAnnouncedTablesKeepTheirSize(t *testing.T) {
	h := newHarness(t, t.TempDir())
	h.mustApply(op("executor", "start", "", "interface", "eth0"), op("cluster", "add", vip, "announce", "yes"),
		op("port", "add", vip+"@80"), op("server", "add", vip+"@80@198.18.0.21+198.18.0.22+198.18.0.23+198.18.0.24"))
	key := vip + "@80"
	before := strings.Split(string(tablesByAddress(t, h)[key]), "\n")
	if len(before)-1 != lb.MaxTableSize {
		t.Fatalf("an announced cluster's port has %d slots, want %d", len(before)-1, lb.MaxTableSize)
	}
	h.mustApply(op("server", "remove", vip+"@80@198.18.0.24"))
	after := strings.Split(string(tablesByAddress(t, h)[key]), "\n")
	if len(after) != len(before) {
		t.Fatalf("removing a server changed the table size from %d to %d", len(before)-1, len(after)-1)
	}
	others := 0
	for i := range before {
		if before[i] != after[i] && before[i] != "198.18.0.24" {
			others++
		}
	}
	t.Logf("removing one of 4 servers moved %d slots of the others (%.3f%%)", others, 100*float64(others)/lb.MaxTableSize)
	if others > lb.MaxTableSize/100 {
		t.Errorf("removing one of 4 servers moved %d slots of the 3 others, more than 1%%", others)
	}

	h.mustApply(op("cluster", "set", vip, "announce", "no"))
	if n := len(tablesByAddress(t, h)[key]); strings.Count(string(tablesByAddress(t, h)[key]), "\n") != int(lb.TableSizeFor(3)) {
		t.Errorf("a cluster that is not announced has %d bytes of table, want %d slots", n, lb.TableSizeFor(3))
	}
}

// TestHAStandbyAnnouncesWithAWorseMED: under high availability with BGP,
// both dispatchers announce the cluster, the one that does not serve it
// with its MED raised, so that routers send its traffic to the active; the
// MEDs follow the group's state, and leave when high availability does.
func TestHAStandbyAnnouncesWithAWorseMED(t *testing.T) {
	sp, f := &fakeSpeaker{}, newFakeHA()
	h := newHarnessWith(t, t.TempDir(), func(o *Options) { o.Speaker, o.HA = sp, f })
	base(h)
	h.mustApply(bgpOps()...)
	h.mustApply(op("cluster", "set", vip, "announce", "yes", "med", "20"))
	const active, standby = "198.18.0.100/32 20", "198.18.0.100/32 21"
	eventually(t, "announced without high availability", func() bool { return sp.announced() == active })

	report := func() (bool, uint32) {
		r, ok := h.status(Query{BGP: true}).BGP.Standby[netip.MustParseAddr(vip)]
		return ok, r.MED
	}
	steps := []struct {
		name  string
		do    func()
		want  string
		stand bool
	}{
		{"high availability configured, listening", func() { h.mustApply(haOps("primary")...) }, standby, true},
		{"active", func() { f.set(lb.GroupLocal, lb.HAActive) }, active, false},
		{"standby", func() { f.set(lb.GroupLocal, lb.HAStandby) }, standby, true},
		{"active again", func() { f.set(lb.GroupLocal, lb.HAActive) }, active, false},
		{"standby again", func() { f.set(lb.GroupLocal, lb.HAStandby) }, standby, true},
		{"high availability removed", func() { h.mustApply(op("backup", "remove", "")) }, active, false},
	}
	for _, st := range steps {
		st.do()
		eventually(t, st.name+": "+st.want, func() bool { return sp.announced() == st.want })
		if stand, med := report(); stand != st.stand || (stand && med != 21) {
			t.Errorf("%s: the report says standby %v with MED %d", st.name, stand, med)
		}
	}
}

// TestBGPNeighbourOffTheExecutorsInterface: the executor moved to an
// interface the BGP neighbour is not reached through: the neighbour's
// next hop for the clusters is this host's address on the other one, and
// their traffic goes where the executor does not see it. The move warns,
// and so does the executor report while it lasts.
func TestBGPNeighbourOffTheExecutorsInterface(t *testing.T) {
	sp := &fakeSpeaker{}
	h := newHarnessWith(t, t.TempDir(), func(o *Options) { o.Speaker = sp })
	base(h)
	h.mustApply(bgpOps()...)
	h.nif.mu.Lock()
	h.nif.second = "eth1"
	h.nif.mu.Unlock()
	const want = "BGP neighbour 198.18.0.1 is reached through eth0, not the executor's interface eth1"
	if w := h.executorWarnings("BGP neighbour"); len(w) != 0 {
		t.Fatalf("warnings on eth0, through which the neighbour is reached: %q", w)
	}
	res, err := h.e.ApplyWithNotes(context.Background(), []config.Op{op("executor", "start", "", "interface", "eth1")})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(res.Warnings, func(w string) bool { return strings.HasPrefix(w, want) }) {
		t.Errorf("the move's warnings %q lack %q", res.Warnings, want)
	}
	if w := h.executorWarnings("BGP neighbour"); len(w) != 1 || !strings.HasPrefix(w[0], want) {
		t.Errorf("executor report's warnings %q, want %q…", w, want)
	}
	h.mustApply(op("executor", "start", "", "interface", "eth0"))
	if w := h.executorWarnings("BGP neighbour"); len(w) != 0 {
		t.Errorf("warnings back on eth0: %q", w)
	}
}
