package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher/store"
	"github.com/dlbproject/dlb/pkg/lb"
)

// Apply applies a batch of operations, all or none: package config
// prepares and validates the change; the engine gives ids to new objects,
// writes what the change touched to the executor and the host, journals
// it, and only then makes it current. A refused batch returns a
// *config.OpError and changes nothing, in memory, on disk or in the
// kernel: neighbour entries it had the kernel create for new servers are
// removed again. It returns the number of operations applied.
func (e *Engine) Apply(ctx context.Context, ops []config.Op) (int, error) {
	a, err := e.ApplyWithNotes(ctx, ops)
	return a.Ops, err
}

// Applied is what an accepted batch did, beyond its operations.
type Applied struct {
	// Ops is the number of operations applied.
	Ops int
	// Notes say what the change did that the operator may want to know
	// ("executor stop": the pins it removed).
	Notes []string
	// Warnings name conditions that keep the configuration from working
	// as meant, with their remedy (NAT without a route to clients).
	Warnings []string
}

// ApplyWithNotes is Apply, also returning what the change has to say.
func (e *Engine) ApplyWithNotes(ctx context.Context, ops []config.Op) (Applied, error) {
	n, a, err := callChange(ctx, e, func() (int, error) { return e.apply(ops) })
	a.Ops = n
	return a, err
}

// note adds a note to the change being applied (and logs it).
func (e *Engine) note(msg string) {
	e.log.Info(msg)
	if e.out != nil {
		e.out.Notes = append(e.out.Notes, msg)
	}
}

// warn adds a warning to the change being applied (and logs it).
func (e *Engine) warn(msg string) {
	e.log.Warn(msg)
	if e.out != nil {
		e.out.Warnings = append(e.out.Warnings, msg)
	}
}

// bigChange is the number of servers a change (or a restored state) must
// add or remove for the engine to hand the memory it used back to the
// system at once (releaseMemory).
const bigChange = 10000

func (e *Engine) apply(ops []config.Op) (int, error) {
	edit, err := e.ed.Prepare(ops)
	if err != nil {
		return 0, err
	}
	stop := slices.ContainsFunc(ops, func(op config.Op) bool {
		return op.Object == config.Executor && op.Action == config.Stop
	})
	if err := e.change(edit, -1, stop); err != nil {
		// Refused as a whole (by the executor or the host): the
		// operation that brought in what was refused is named.
		var oe *config.OpError
		if errors.As(err, &oe) && oe.Index < 0 {
			oe.Index = edit.Blame(oe.Err)
		}
		return 0, err
	}
	logEach(e.log, "applied", len(ops), func(i int) []any {
		return []any{"op", i, "object", ops[i].Object, "action", ops[i].Action, "target", ops[i].Target}
	}, func(i int) string { return fmt.Sprintf("%s %s %s", ops[i].Object, ops[i].Action, ops[i].Target) },
		"operations", opCounts(ops))
	return len(ops), nil
}

// opCounts counts a batch's operations by object and action, in the
// order they first appear: "4000 cluster add, 4000 port add".
func opCounts(ops []config.Op) string {
	type kind struct{ object, action string }
	var order []kind
	n := map[kind]int{}
	for _, op := range ops {
		k := kind{fmt.Sprint(op.Object), fmt.Sprint(op.Action)}
		if n[k] == 0 {
			order = append(order, k)
		}
		n[k]++
	}
	parts := make([]string, len(order))
	for i, k := range order {
		parts[i] = fmt.Sprintf("%d %s %s", n[k], k.object, k.action)
	}
	return strings.Join(parts, ", ")
}

// functionsCheck refuses a change the high-availability function or the
// metric source could not run (haCheck, metricCheck); it touches nothing,
// so that a dry run asks it too.
func (e *Engine) functionsCheck(old, next lb.Config, ch config.Change) error {
	if err := e.haCheck(old, next, ch); err != nil {
		return err
	}
	return e.metricCheck(old, next, ch)
}

// change makes a prepared edit current: ids for new objects, the
// executor and the host reconciled, the change journaled, then committed.
// A refusal is a *config.OpError naming the operation at index (-1: the
// batch as a whole), and leaves everything as it was. stop says the
// change asks for the executor to stop (see reconcile).
func (e *Engine) change(edit *config.Edit, index int, stop bool) error {
	refuse := func(err error) error { return &config.OpError{Index: index, Err: err} }
	if err := e.checkStore(); err != nil {
		return refuse(fmt.Errorf("saving the state: %w", err))
	}
	old, next, ch := e.ed.Config(), edit.Next, edit.Change
	if err := e.functionsCheck(old, next, ch); err != nil {
		return refuse(err)
	}
	delta, err := e.ids.Apply(ch, e.opts.MaxServices, e.opts.MaxBackends)
	if err != nil {
		return refuse(err)
	}
	// Room in the journal first: a change that could not be saved is
	// refused before it touches anything.
	rec := store.NewRecord(old, next, ch, delta)
	if err := e.store.Reserve(rec, e.host.recordRoom(next, len(ch.Servers))); err != nil {
		e.ids.Revert(delta)
		return refuse(fmt.Errorf("saving the change: %w (nothing was applied)", err))
	}
	if err := e.reconfigureSpeaker(old, next, ch); err != nil {
		e.ids.Revert(delta)
		return refuse(err)
	}
	hostBefore := e.host.clone()
	e.net.ClearAsked()
	e.intentSaved = false
	if written, err := e.reconcile(old, next, ch, delta, stop); err != nil {
		e.ids.Revert(delta)
		if written {
			e.undo(old, hostBefore)
		} else {
			e.host = hostBefore
		}
		e.unask(old)
		e.restoreSpeaker(old, ch)
		e.unsaveIntent()
		return refuse(err)
	}
	e.host.record(&rec, hostBefore)
	if err := e.store.Append(rec); err != nil {
		e.ids.Revert(delta)
		e.undo(old, hostBefore)
		e.unask(old)
		e.restoreSpeaker(old, ch)
		e.unsaveIntent()
		return refuse(fmt.Errorf("saving the change: %w (it was taken back: nothing was applied)", err))
	}
	e.net.ClearAsked()
	e.ed.Commit(edit)
	e.facts.changes++
	e.facts.lastChange = time.Now()
	e.afterCommit(old, next, ch, delta)
	return nil
}

// unsaveIntent journals the host as a refused change left it, when the
// change journaled addresses before it put them on (saveIntent): they came
// off again.
func (e *Engine) unsaveIntent() {
	if e.intentSaved {
		e.persistHost()
	}
}

// undo takes back a change that wrote to the executor or the host and
// then failed, or could not be saved: the executor and the host's
// addresses go back to what old wants. The record of the host's addresses
// is kept as the change left it, so that those it put on come off and
// those it took off go back on (from the record as it was before, they
// would stay as the change left them); what old wants of them comes from
// before.
func (e *Engine) undo(old lb.Config, before host) {
	e.host.returns = before.returns
	e.attachBack(old, before)
	e.rollback(old)
}

// attachBack attaches the executor again where and as old had it, its
// tables kept, when the change being undone moved it to another interface
// or XDP mode (before is the host as it was).
func (e *Engine) attachBack(old lb.Config, before host) {
	if e.exec.dp == nil || !old.Executor.Started || e.exec.attach.detached != "" {
		return
	}
	now, err := e.opts.Netif.LinkByIndex(e.exec.attach.ifindex)
	if err != nil {
		return
	}
	if now.Name == old.Executor.Interface && e.host.attachedMode == before.attachedMode {
		return
	}
	cur := old
	cur.Executor.Interface, cur.Executor.XDPMode = now.Name, e.host.attachedMode
	if _, _, err := e.moveAttachment(cur, old); err != nil {
		e.log.Error("attaching the executor again where it was before the change", "interface", old.Executor.Interface, "err", err)
	}
}

// rollback restores the executor and the host to the configuration old
// (undo's work).
func (e *Engine) rollback(old lb.Config) {
	if !old.Executor.Started {
		if err := e.stopExecutor(old); err != nil {
			e.log.Error("rolling back the executor after a failed save", "err", err)
		}
		return
	}
	if e.exec.dp == nil {
		if err := e.startExecutor(old); err != nil {
			e.log.Error("rolling back the executor after a failed save", "err", err)
		}
		return
	}
	e.exec.tables = map[uint32]table{}
	if err := e.exec.dp.Apply(e.dataplane(old)); err != nil {
		e.log.Error("rolling back the executor after a failed save", "err", err)
	}
	if err := e.configureAddresses(old); err != nil {
		e.log.Error("rolling back the host's addresses after a failed save", "err", err)
	}
}

// unask takes back what a refused change had the kernel resolve: the
// neighbour entries of next hops the configuration cfg (which stays) does
// not use while the executor runs.
func (e *Engine) unask(cfg lb.Config) {
	asked := e.net.TakeAsked()
	if len(asked) == 0 {
		return
	}
	if e.exec.dp == nil { // nothing is needed while the executor is down
		e.net.Drop(asked...)
		slices.SortFunc(asked, netip.Addr.Compare)
		e.forgetNeighbors(slices.Compact(asked))
		return
	}
	e.forgetNeighbors(e.net.Forget(cfg, asked))
}

// afterCommit updates what the engine derives from the configuration,
// for what the change touched.
func (e *Engine) afterCommit(old, next lb.Config, ch config.Change, delta *store.IDDelta) {
	if gone := e.net.Update(old, next, ch); len(gone) > 0 && e.exec.dp != nil {
		e.forgetNeighbors(gone)
	}
	e.mgr.forget(old, next, ch)
	e.dropAffinity(old, next, ch)
	for k := range delta.DelServices {
		delete(e.exec.groups, delta.DelServices[k])
		delete(e.exec.tables, delta.DelServices[k])
	}

	ports := map[uint16]bool{}
	for _, k := range ch.PortsTouched() {
		ports[k.Port] = true
	}
	if len(ch.Advisors) > 0 {
		for _, a := range old.Advisors {
			ports[a.Port] = true
		}
		for _, a := range next.Advisors {
			ports[a.Port] = true
		}
	}
	if nfaChanged(old, next) {
		ports = nil // probes leave from the NFA: every one changes
	}
	if len(next.Advisors) > 0 || e.health.Running() {
		e.syncProbes(next, ports)
	}
	if pollersTouched(old, next, ch) {
		e.syncPollers(next)
	}
	if next.Manager.Started && (!old.Manager.Started || old.Manager != next.Manager) {
		// Weights reset by this change take effect now, not at the next
		// cycle.
		e.pushPorts(next, nil, "manager settings")
	}
	if old.Executor != next.Executor {
		// The executor started, stopped or moved: every port's servers
		// may have changed state (their next hops were resolved).
		e.checkAlerts(next, nil)
	} else {
		e.checkAlerts(next, ch.PortsTouched())
	}
	if old.Executor.NFA != next.Executor.NFA || old.Executor.NFA6 != next.Executor.NFA6 {
		for _, p := range e.nfaProblems(next) {
			e.warn(p)
		}
	}
	if ch.Executor || ch.BGP {
		for _, p := range e.bgpPathProblems(next) {
			e.warn(p)
		}
	}
	if ch.Executor || len(ch.Clusters) > 0 {
		only := ch.Clusters
		if ch.Executor {
			only = nil // started, or moved to another interface
		}
		for _, p := range e.clusterProblems(next, only) {
			e.warn(p)
		}
	}
	if ch.HA {
		for _, p := range e.haSourceProblems(next) {
			e.warn(p)
		}
	}
	if ch.Executor || natTouched(next, ch) {
		for _, p := range e.natRouteProblems(next) {
			e.warn(p)
		}
		for _, p := range e.natGROProblems(next) {
			e.warn(p)
		}
	}
	if ch.Executor || len(ch.Clusters) > 0 || natTouched(next, ch) {
		for _, p := range e.ownSourceProblems() {
			e.warn(p)
		}
	}
	for _, a := range next.Advisors {
		if kind, ok := ch.Advisors[a.Key()]; ok && kind != config.Removed {
			if p := advisorProblem(a); p != "" {
				e.warn(p)
			}
		}
	}
	e.haConfigure(old, next, ch)
	if e.store.NeedsSnapshot() {
		if err := e.store.Snapshot(e.stateCopy()); err != nil {
			e.log.Error("writing a state snapshot", "err", err)
		}
	}
	if len(ch.Servers) >= bigChange {
		releaseMemory()
	}
}

// releaseMemory gives back what a large change took while it ran: the
// heap would otherwise stay at twice its peak. It collects twice: the
// first collection moves pooled buffers (json's encoders held megabytes)
// to the pools' victim caches, the second frees them, and FreeOSMemory
// returns the pages.
func releaseMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

// stateCopy is the state as the store keeps it, safe to write out on
// another goroutine: the configuration is never written after it is
// committed, the ids and the host facts are copied.
func (e *Engine) stateCopy() store.State {
	return store.State{Config: e.ed.Config(), IDs: e.ids.Clone(), Configured: maps.Clone(e.host.configured),
		Found: maps.Clone(e.host.found), AttachedMode: e.host.attachedMode, HAStates: e.ha.applied}
}

// checkStore makes the state directory hold the state again when its
// files, or the directory itself, were deleted under dlbd (a clean-up
// script, an operator's mistake): otherwise every change from then on
// would be journaled into a file no one can read, and the next dlbd would
// start with an empty configuration. The lock file is taken again first:
// if another dlbd took the directory meanwhile, nothing is written and
// the error says so.
func (e *Engine) checkStore() error {
	if err := e.restoreStore(); err != nil {
		return fmt.Errorf("%w (dlbd still runs its configuration: \"dlbctl file save FILE\" keeps a copy)", err)
	}
	return nil
}

// unsavedRemedy is what the operator does about a state that cannot be
// saved.
const unsavedRemedy = "changes are refused until the state can be saved; dlbd forwards with what it runs. " +
	"Make the state directory writable again; if dlbd cannot reach it any more (under dlbd.service, a state " +
	"directory deleted on the host), save the configuration (dlbctl file save FILE), restart dlbd, then load it " +
	"(dlbctl file load FILE)"

// unsavedWarning is the executor report's warning while the state cannot
// be saved, or "".
func (e *Engine) unsavedWarning() string {
	if e.unsaved.Msg() == "" {
		return ""
	}
	return "the state cannot be saved (" + e.unsaved.Msg() + "): " + unsavedRemedy
}

// restoreStore is checkStore's work.
func (e *Engine) restoreStore() error {
	if l := e.opts.StateLock; l != nil && !l.StillHeld() {
		if err := l.Renew(); err != nil {
			return fmt.Errorf("the lock file of the state directory %s was deleted, and locking it again failed: %w", e.opts.StateDir, err)
		}
		e.log.Warn("the lock file of the state directory was deleted under dlbd; locked again", "dir", e.opts.StateDir)
	}
	if !e.store.Lost() {
		return nil
	}
	if err := e.store.Rewrite(e.stateCopy()); err != nil {
		return fmt.Errorf("writing the state again into %s, whose files were deleted: %w", e.opts.StateDir, err)
	}
	e.log.Warn("the state directory's files were deleted under dlbd; the whole state was written again", "dir", e.opts.StateDir)
	return nil
}

// persistHost journals the host facts, outside a change's record (the
// executor brought up at start, a refused change that journaled addresses
// it was about to put on).
func (e *Engine) persistHost() {
	var rec store.Record
	conf, found := maps.Clone(e.host.configured), maps.Clone(e.host.found)
	rec.Configured, rec.Found = &conf, &found
	mode := e.host.attachedMode
	rec.AttachedMode = &mode
	if err := e.checkStore(); err != nil {
		e.log.Error("saving the host's state", "err", err)
	}
	if err := e.store.Append(rec); err != nil {
		e.log.Error("saving the host's state", "err", err)
	}
}

// dropAffinity removes the affinity records of the servers that next
// quiesces "now" and old did not: their sticky clients go elsewhere from
// their next connection on. (Records of removed servers go with them.)
func (e *Engine) dropAffinity(old, next lb.Config, ch config.Change) {
	if e.exec.dp == nil {
		return
	}
	for k, kind := range ch.Servers {
		if kind != config.Changed {
			continue
		}
		s, _ := serverOf(next, k)
		o, _ := serverOf(old, k)
		if !s.QuiesceNow || o.QuiesceNow {
			continue
		}
		n, err := e.exec.dp.DropAffinity(e.ids.Backends[k])
		if err != nil {
			e.log.Error("dropping affinity records", "server", k, "err", err)
			continue
		}
		e.log.Info("quiesced now: affinity records dropped", "server", k, "records", n)
	}
}

// serverOf returns the server a key names in cfg.
func serverOf(cfg lb.Config, k lb.BackendKey) (lb.Server, bool) {
	s := cfg.Server(k)
	if s == nil {
		return lb.Server{}, false
	}
	return *s, true
}

// host is what the engine did to the host and must remember across
// restarts: the addresses it put on interfaces (to take them off again),
// and the XDP mode it attached in (the kernel does not report it for an
// adopted link); and, derived from the configuration, how many servers
// use each return address.
type host struct {
	configured map[netip.Addr]string
	// found are those of configured that their interface had before the
	// engine wanted them there (the operator's): they stay on when the
	// engine no longer wants them.
	found        map[netip.Addr]string
	attachedMode lb.XDPMode
	returns      map[netip.Addr]int
}

func (h host) clone() host {
	return host{configured: maps.Clone(h.configured), found: maps.Clone(h.found), attachedMode: h.attachedMode,
		returns: maps.Clone(h.returns)}
}

// renameInterface records that the interface the engine put addresses on
// as from is now named to: the addresses went with it.
func (h *host) renameInterface(from, to string) {
	for _, m := range []map[netip.Addr]string{h.configured, h.found} {
		for a, ifname := range m {
			if ifname == from {
				m[a] = to
			}
		}
	}
}

// indexReturns counts the servers of each return address.
func (h *host) indexReturns(cfg lb.Config) {
	h.returns = map[netip.Addr]int{}
	for _, cl := range cfg.Clusters {
		for _, p := range cl.Ports {
			for _, s := range p.Servers {
				if p.Method == lb.NAT && s.ReturnAddress.IsValid() {
					h.returns[s.ReturnAddress]++
				}
			}
		}
	}
}

// recordRoom bounds what record adds to the journal record of a change
// to next that touched servers: the addresses put on interfaces (and
// found there), at most those held now and one more per cluster and per
// server touched (a new return address). It is at least a block, so that
// on a file system with no block free every change is refused, not only
// those that do not fit what is left of the journal's last block.
func (h host) recordRoom(next lb.Config, servers int) int {
	return 4096 + 2*96*(len(h.configured)+len(h.found)+len(next.Clusters)+servers)
}

// record adds the host facts that changed since before to a record.
func (h host) record(rec *store.Record, before host) {
	if !maps.Equal(h.configured, before.configured) {
		c := maps.Clone(h.configured)
		rec.Configured = &c
	}
	if !maps.Equal(h.found, before.found) {
		f := maps.Clone(h.found)
		rec.Found = &f
	}
	if h.attachedMode != before.attachedMode {
		m := h.attachedMode
		rec.AttachedMode = &m
	}
}
