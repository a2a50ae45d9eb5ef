package dispatcher

import (
	"maps"
	"slices"
	"time"
)

// watchedDrops are the executor's drop reasons that mean it cannot
// forward what it should, for want of something the operator gives: a
// route to the clients (drop_no_route), a usable interface towards a
// server (drop_no_tx_port), room in the NAT tables (drop_table_full),
// free NAT ports (drop_nat_exhausted). Drops of the traffic itself
// (fragments, options, no server) are not among them: a port without a
// server is reported as such.
var watchedDrops = []string{"drop_no_route", "drop_no_tx_port", "drop_table_full", "drop_nat_exhausted"}

// dropWindow is how often the watched drops are counted: a report says
// what the executor dropped in the last full window.
const dropWindow = 5 * time.Second

// dropWatch counts the watched drops per window.
type dropWatch struct {
	// at is when the counters were last read (zero: never, or the
	// executor is not loaded), counts what they said then.
	at     time.Time
	counts map[string]uint64
	// recent are the watched drops of the last window (only reasons that
	// grew), over its length.
	recent map[string]uint64
	over   time.Duration
}

// sampleDrops reads the executor's per-reason counters once a window
// (each tick asks; not every service's and server's: Stats) and keeps
// the growth of the watched ones.
func (e *Engine) sampleDrops(now time.Time) {
	w := &e.drops
	if e.exec.dp == nil {
		*w = dropWatch{}
		return
	}
	if !w.at.IsZero() && now.Sub(w.at) < dropWindow {
		return
	}
	reasons, err := e.exec.dp.Reasons()
	if err != nil {
		e.log.Debug("reading the executor's counters for its drops", "err", err)
		return
	}
	counts := map[string]uint64{}
	for _, rc := range reasons {
		if slices.Contains(watchedDrops, rc.Reason) {
			counts[rc.Reason] = rc.Packets
		}
	}
	var recent map[string]uint64
	if !w.at.IsZero() {
		for r, c := range counts {
			d := c - w.counts[r]
			if c < w.counts[r] {
				d = c // counters started again (another executor)
			}
			if d > 0 {
				if recent == nil {
					recent = map[string]uint64{}
				}
				recent[r] = d
			}
		}
	}
	*w = dropWatch{at: now, counts: counts, recent: recent, over: now.Sub(w.at)}
	if w.recent == nil {
		w.over = 0
	}
}

// dropping returns the watched drops of the last window and its length
// (nil when there were none, or the window is long past: the counters
// stopped being read).
func (e *Engine) dropping(now time.Time) (map[string]uint64, time.Duration) {
	w := e.drops
	if len(w.recent) == 0 || now.Sub(w.at) > 2*dropWindow {
		return nil, 0
	}
	return maps.Clone(w.recent), w.over
}
