package health

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/dlbproject/dlb/advisors"
	"github.com/dlbproject/dlb/pkg/lb"
)

func TestLoadLowest(t *testing.T) {
	up := func(ms int) advisors.Result {
		return advisors.Result{Up: true, Load: time.Duration(ms) * time.Millisecond}
	}
	down := advisors.Result{Up: false}
	tests := []struct {
		name    string
		results []advisors.Result
		want    float64
		ok      bool
	}{
		{"none", nil, 0, false},
		{"one", []advisors.Result{up(7)}, 7, true},
		{"two takes the lower", []advisors.Result{up(7), up(3)}, 3, true},
		{"one outlier ignored", []advisors.Result{up(1), up(40), up(1)}, 1, true},
		{"two slow in a row ignored", []advisors.Result{up(1), up(19), up(12)}, 1, true},
		{"three slow in a row count", []advisors.Result{up(1), up(200), up(210), up(205)}, 200, true},
		{"window slides", []advisors.Result{up(200), up(200), up(200), up(1)}, 1, true},
		{"a fast one among slow ones", []advisors.Result{up(200), up(3), up(210)}, 3, true},
		{"down forgets", []advisors.Result{up(200), up(200), down}, 0, false},
		{"after down starts afresh", []advisors.Result{up(200), up(200), down, up(2)}, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h State
			for _, r := range tt.results {
				h.record(r)
			}
			got, ok := h.Load()
			if got != tt.want || ok != tt.ok {
				t.Errorf("Load() = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// script is an advisor whose results the test gives.
type script struct{ results chan advisors.Result }

func (s script) Name() string        { return "connect" }
func (s script) DefaultPort() uint16 { return 0 }
func (s script) Probe(ctx context.Context, _ advisors.Target) advisors.Result {
	select {
	case r := <-s.results:
		return r
	case <-ctx.Done():
		return advisors.Down("canceled")
	}
}

// takeOne waits for the monitor's next result.
func takeOne(t *testing.T, m *Monitor) Result {
	t.Helper()
	select {
	case <-m.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("no result in 10 s")
	}
	rs := m.Take(1)
	if len(rs) != 1 {
		t.Fatalf("Ready, then %d results taken", len(rs))
	}
	return rs[0]
}

// scripted is a monitor running one probe loop, of a connect advisor with
// the given rise and fall, whose results the test sends on adv.
type scripted struct {
	adv script
	m   *Monitor
	a   lb.Advisor
	k   Key
	ctx context.Context
}

func newScripted(t *testing.T, rise, fall int) scripted {
	t.Helper()
	adv := script{results: make(chan advisors.Result)}
	m := NewMonitor(func(lb.Advisor) (advisors.Advisor, error) { return adv, nil })
	a := lb.NewAdvisor("connect", netip.Addr{}, 80)
	a.Interval, a.Rise, a.Fall = 0.01, rise, fall
	k := Key{Advisor: a.Key(), Addr: netip.MustParseAddr("198.18.0.21"), Port: 80}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m.Sync(ctx, map[Key]Spec{k: {Advisor: a}}, nil)
	return scripted{adv: adv, m: m, a: a, k: k, ctx: ctx}
}

// TestRiseFall: the first result decides; afterwards Fall failures in a
// row take a server down and Rise successes bring it back; results of a
// stopped loop are ignored.
func TestRiseFall(t *testing.T) {
	sc := newScripted(t, 2, 3)
	adv, m, a, k, ctx := sc.adv, sc.m, sc.a, sc.k, sc.ctx
	step := func(up bool) lb.AdvisorState {
		t.Helper()
		if up {
			adv.results <- advisors.Result{Up: true, Load: time.Millisecond}
		} else {
			adv.results <- advisors.Down("refused")
		}
		r := takeOne(t, m)
		if _, _, ok := m.Record(r); !ok {
			t.Fatal("a current loop's result was ignored")
		}
		return m.State(k).State
	}
	want := []struct {
		up   bool
		want lb.AdvisorState
	}{{true, lb.AdvisorUp}, {false, lb.AdvisorUp}, {false, lb.AdvisorUp}, {false, lb.AdvisorDown},
		{true, lb.AdvisorDown}, {true, lb.AdvisorUp}}
	for i, w := range want {
		if got := step(w.up); got != w.want {
			t.Fatalf("result %d (up %v): state %s, want %s", i, w.up, got, w.want)
		}
	}
	// A result sent by the loop before it was restarted is dropped.
	adv.results <- advisors.Result{Up: true}
	r := takeOne(t, m)
	a.Rise = 5
	m.Sync(ctx, map[Key]Spec{k: {Advisor: a}}, nil)
	if _, _, ok := m.Record(r); ok {
		t.Error("a stopped loop's result was recorded")
	}
	m.Stop()
}

// TestLocalResults: a result that says nothing of the server (its probe
// could not leave this host) changes no state and breaks no run of
// results; it is counted apart.
func TestLocalResults(t *testing.T) {
	sc := newScripted(t, 2, 2)
	adv, m, k := sc.adv, sc.m, sc.k
	defer m.Stop()
	local := advisors.Result{Reason: "source address not available", Local: true}
	for i, step := range []struct {
		res  advisors.Result
		want lb.AdvisorState
	}{
		{local, lb.AdvisorUnknown}, // not even the first result decides
		{advisors.Result{Up: true, Load: time.Millisecond}, lb.AdvisorUp},
		{local, lb.AdvisorUp},
		{local, lb.AdvisorUp},
		{advisors.Down("refused"), lb.AdvisorUp},
		{local, lb.AdvisorUp},
		{advisors.Down("refused"), lb.AdvisorDown}, // two failures in a row, the local one between not counted
		{local, lb.AdvisorDown},
	} {
		adv.results <- step.res
		if _, _, ok := m.Record(takeOne(t, m)); !ok {
			t.Fatal("a current loop's result was ignored")
		}
		if got := m.State(k).State; got != step.want {
			t.Fatalf("result %d (%+v): state %s, want %s", i, step.res, got, step.want)
		}
	}
	if h := m.State(k); h.Probes != 3 || h.Fails != 2 || h.Local != 5 || !h.Last.Local {
		t.Errorf("counts: %d probes, %d failures, %d local, last %+v; want 3, 2, 5", h.Probes, h.Fails, h.Local, h.Last)
	}
}
