package logagg

import "time"

// SteadyEvery is how often Steady lets a failure that stays the same be
// logged again while it lasts.
const SteadyEvery = 10 * time.Minute

// Steady follows a failure that a periodic check meets again each time
// (a directory dlbd cannot make again stays so until someone acts): it is
// to be logged when it begins or changes, then every SteadyEvery, not at
// each check; its text is kept for reports while it lasts. The zero value
// holds no failure.
type Steady struct {
	msg      string
	loggedAt time.Time
}

// Failed records err, met at now, and reports whether to log it.
func (s *Steady) Failed(err error, now time.Time) bool {
	msg := err.Error()
	if msg == s.msg && now.Sub(s.loggedAt) < SteadyEvery {
		return false
	}
	s.msg, s.loggedAt = msg, now
	return true
}

// OK records a success and reports whether it ends a failure.
func (s *Steady) OK() bool {
	was := s.msg != ""
	*s = Steady{}
	return was
}

// Msg is the failure's text, or "" while there is none.
func (s *Steady) Msg() string { return s.msg }
