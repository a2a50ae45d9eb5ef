package config

import (
	"github.com/dlbproject/dlb/pkg/lb"
)

// Options configure an Editor.
type Options struct {
	// KnownAdvisor refuses an advisor name no advisor implements (the
	// exec advisor is always known); nil accepts every name.
	KnownAdvisor func(name string) error
	// CheckRequest refuses a server's advisorrequest and advisorresponse
	// that the named advisor could not use (nil: not interpreted by it,
	// or usable); an error starting "advisorresponse: " is about the
	// response. Checked for servers a change adds or whose request or
	// response it changes, and for advisors it adds. nil accepts
	// everything.
	CheckRequest func(advisor, request, response string) error
}

// Editor applies batches of operations to a configuration, all or none,
// at the cost of what they touch: edits copy only the parts of the
// configuration they change (the rest stays shared), validation checks
// only what changed, against indexes of the whole configuration that the
// editor keeps up to date as changes are committed.
//
// An Editor is not safe for concurrent use; the engine owns one.
type Editor struct {
	opts Options
	cfg  lb.Config
	uses *uses
}

// NewEditor returns an editor of cfg, which must be valid (it is
// validated whole). cfg is never changed: edits produce new values.
func NewEditor(cfg lb.Config, opts Options) (*Editor, error) {
	cfg = cfg.Clone()
	cfg.Sort()
	u := newUses(cfg)
	ch := Diff(lb.Config{}, cfg)
	ch.Executor, ch.Manager, ch.MetricServer = true, true, true
	if err := validate(cfg, ch, u); err != nil {
		return nil, err
	}
	return &Editor{opts: opts, cfg: cfg, uses: u}, nil
}

// Config returns the committed configuration. The caller must not change
// it (its slices are shared with later configurations).
func (ed *Editor) Config() lb.Config { return ed.cfg }

// Edit is a prepared change: the configuration it makes, and what
// changed. Nothing is committed until Commit.
type Edit struct {
	// Next is the configuration after the change.
	Next lb.Config
	// Change lists what differs from the committed configuration.
	Change Change
	// Ops is the number of operations applied.
	Ops int

	base lb.Config
	// touched maps what the operations added or set to the last of them
	// (Blame).
	touched map[string]int
}

// Prepare applies ops to the committed configuration and validates the
// result. A refused batch returns an *OpError (naming the operation, or
// -1 when validation of the whole refused it and the batch has more than
// one operation) and changes nothing.
func (ed *Editor) Prepare(ops []Op) (*Edit, error) {
	if len(ops) == 0 {
		return nil, &OpError{Index: -1, Err: lb.Errorf("ops", "", "the request has no operations")}
	}
	d := newDraft(ed.cfg)
	removes := false
	for i := range ops {
		d.op = i
		if err := ed.apply(d, &ops[i]); err != nil {
			return nil, &OpError{Index: i, Err: err}
		}
		removes = removes || ops[i].Action == Remove && (ops[i].Object == Cluster || ops[i].Object == Port)
	}
	if removes {
		stopIdleAdvisors(d)
	}
	ch := Diff(ed.cfg, d.cfg)
	err := validate(d.cfg, ch, ed.uses.with(ed.cfg, d.cfg, ch))
	if err == nil {
		err = ed.checkRequests(d.cfg, ch)
	}
	if err == nil && haChecked(d.cfg, ch) {
		err = newHAAddressProblem(ed.cfg, d.cfg)
	}
	if err != nil {
		return nil, &OpError{Index: blame(len(ops), d.touched, err), Err: err}
	}
	return &Edit{Next: d.cfg, Change: ch, Ops: len(ops), base: ed.cfg, touched: d.touched}, nil
}

// Blame returns the index of the operation of the edit's batch to blame
// for err, a refusal of the whole batch after it was prepared (the
// executor or the host refused it), as Prepare does: the only one, or the
// last that added or set the cluster, port or server err names (the
// executor, for one of its fields); -1 when none did, or err names none.
func (e *Edit) Blame(err error) int {
	return blame(e.Ops, e.touched, err)
}

// Commit makes a prepared edit the committed configuration. The edit must
// have been prepared from the configuration committed now.
func (ed *Editor) Commit(e *Edit) {
	ed.uses.apply(e.base, e.Next, e.Change)
	ed.cfg = e.Next
}

// Apply applies ops to cfg and returns the new configuration, validated
// whole; cfg is not changed. It is the one-shot form of an Editor.
func Apply(cfg lb.Config, ops []Op, opts Options) (lb.Config, error) {
	ed, err := NewEditor(cfg, opts)
	if err != nil {
		return cfg, err
	}
	e, err := ed.Prepare(ops)
	if err != nil {
		return cfg, err
	}
	return e.Next, nil
}

// Validate checks a whole configuration and returns the first problem
// found as a *lb.FieldError.
func Validate(cfg lb.Config) error {
	cfg = cfg.Clone()
	cfg.Sort()
	ch := Diff(lb.Config{}, cfg)
	ch.Executor, ch.Manager, ch.MetricServer = true, true, true
	return validate(cfg, ch, newUses(cfg))
}
