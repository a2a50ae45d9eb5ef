package logagg

import (
	"errors"
	"testing"
	"time"
)

// TestSteady: a failure is to be logged when it begins or changes, then
// every SteadyEvery, whatever the clock's origin (a zero time, as a clock
// near its start gives); a success ends it once.
func TestSteady(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	for _, origin := range []time.Time{{}, time.Unix(0, 1), time.Now()} {
		var s Steady
		steps := []struct {
			err  error // nil: a success
			at   time.Duration
			want bool // to log (a failure) or ended (a success)
			msg  string
		}{
			{a, 0, true, "a"},
			{a, time.Second, false, "a"},
			{a, SteadyEvery - time.Nanosecond, false, "a"},
			{a, SteadyEvery, true, "a"},
			{b, SteadyEvery + time.Second, true, "b"},
			{b, SteadyEvery + 2*time.Second, false, "b"},
			{nil, SteadyEvery + 3*time.Second, true, ""},
			{nil, SteadyEvery + 4*time.Second, false, ""},
			{b, SteadyEvery + 5*time.Second, true, "b"},
		}
		for i, st := range steps {
			var got bool
			if st.err != nil {
				got = s.Failed(st.err, origin.Add(st.at))
			} else {
				got = s.OK()
			}
			if got != st.want || s.Msg() != st.msg {
				t.Errorf("origin %v, step %d (%v at %v): %v with %q, want %v with %q", origin, i, st.err, st.at, got, s.Msg(), st.want, st.msg)
			}
		}
	}
}
