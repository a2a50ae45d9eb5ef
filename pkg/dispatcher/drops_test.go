package dispatcher

import (
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/lb"
)

// TestDropping: the executor's drops that want the operator are counted
// per window of dropWindow, from any clock (one near zero), and reported
// for the last window only while it is recent; other reasons are not.
func TestDropping(t *testing.T) {
	dp := &fakeDatapath{}
	e := &Engine{log: slog.New(slog.DiscardHandler), exec: newExecutor()}
	e.exec.dp = dp
	t0 := time.Unix(0, 0) // a clock near zero
	counts := func(noRoute, tableFull, fragments uint64) []lb.ReasonCount {
		return []lb.ReasonCount{{Reason: "fwd_tx", Packets: 1000}, {Reason: "drop_no_route", Packets: noRoute},
			{Reason: "drop_table_full", Packets: tableFull}, {Reason: "drop_fragment", Packets: fragments}}
	}
	for _, st := range []struct {
		name    string
		at      time.Duration // when the tick samples
		reasons []lb.ReasonCount
		nilDP   bool
		report  time.Duration // when the report is asked
		want    map[string]uint64
		over    time.Duration
	}{
		{"first read: nothing to compare", 0, counts(50, 0, 0), false, 0, nil, 0},
		{"grown, within the window: not read", time.Second, counts(80, 0, 0), false, time.Second, nil, 0},
		{"a window later: the growth", dropWindow, counts(80, 3, 9), false, dropWindow, map[string]uint64{"drop_no_route": 30, "drop_table_full": 3}, dropWindow},
		{"reported until the next window", dropWindow + time.Second, counts(80, 3, 9), false, 2 * dropWindow, map[string]uint64{"drop_no_route": 30, "drop_table_full": 3}, dropWindow},
		{"no growth: nothing", 2 * dropWindow, counts(80, 3, 20), false, 2 * dropWindow, nil, 0},
		{"counters started again (another executor)", 3 * dropWindow, counts(7, 0, 0), false, 3 * dropWindow, map[string]uint64{"drop_no_route": 7}, dropWindow},
		{"not read since: long past", 3 * dropWindow, counts(7, 0, 0), false, 6 * dropWindow, nil, 0},
		{"the executor stopped", 7 * dropWindow, nil, true, 7 * dropWindow, nil, 0},
		{"loaded again: a first read", 8 * dropWindow, counts(5, 0, 0), false, 8 * dropWindow, nil, 0},
	} {
		dp.mu.Lock()
		dp.reasons = st.reasons
		dp.mu.Unlock()
		e.exec.dp = dp
		if st.nilDP {
			e.exec.dp = nil
		}
		e.sampleDrops(t0.Add(st.at))
		got, over := e.dropping(t0.Add(st.report))
		if !maps.Equal(got, st.want) || over != st.over {
			t.Errorf("%s: dropping %v over %v, want %v over %v", st.name, got, over, st.want, st.over)
		}
	}
}
