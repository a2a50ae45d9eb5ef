package config

import (
	"github.com/dlbproject/dlb/pkg/lb"
)

// PrepareConfig prepares the change that makes the committed
// configuration equal to next, a whole configuration (as a configuration
// file gives it): next is validated whole, the names of its new and
// changed advisors are checked (Options.KnownAdvisor), so are the
// advisor requests of new and changed servers and advisors
// (Options.CheckRequest), and the edit lists
// what differs from the committed configuration. Nothing is committed
// until Commit. A refused configuration returns an *OpError with Index
// -1; next is not changed.
func (ed *Editor) PrepareConfig(next lb.Config) (*Edit, error) {
	next = next.Clone()
	next.Sort()
	if err := Validate(next); err != nil {
		return nil, &OpError{Index: -1, Err: err}
	}
	ch := Diff(ed.cfg, next)
	if ed.opts.KnownAdvisor != nil {
		for _, a := range next.Advisors {
			if k := ch.Advisors[a.Key()]; a.Name != "exec" && (k == Added || k == Changed) {
				if err := ed.opts.KnownAdvisor(a.Name); err != nil {
					return nil, &OpError{Index: -1, Err: lb.Errorf("advisor", a.Key(), "%v", err)}
				}
			}
		}
	}
	if err := ed.checkRequests(next, ch); err != nil {
		return nil, &OpError{Index: -1, Err: err}
	}
	if haChecked(next, ch) {
		if err := newHAAddressProblem(ed.cfg, next); err != nil {
			return nil, &OpError{Index: -1, Err: err}
		}
	}
	return &Edit{Next: next, Change: ch, base: ed.cfg}, nil
}
