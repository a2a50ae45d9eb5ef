package dispatcher

import (
	"context"
	"net/netip"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
)

// Replace makes the configuration equal to next (a whole configuration:
// a configuration file) as one change, all or none, through the same
// path as Apply: package config validates next whole, the engine gives
// ids to new objects, writes what differs to the executor and the host,
// journals it and commits it. Objects next does not change are not
// touched: their servers keep their ids, their Maglev tables and their
// connections. A refused configuration returns a *config.OpError (Index
// -1) and changes nothing.
//
// With dryRun nothing is changed: next is validated, and checked against
// the executor's capacity, the high-availability function and the metric
// source, as it would be. Either way Replace returns the
// configuration it replaced (or would replace), so that the caller can
// say what changed (config.Plan); when next equals it, nothing is done.
func (e *Engine) Replace(ctx context.Context, next lb.Config, dryRun bool) (lb.Config, error) {
	old, _, err := e.ReplaceWithNotes(ctx, next, dryRun)
	return old, err
}

// ReplaceWithNotes is Replace, also returning what the change has to say
// (its notes and warnings, as ApplyWithNotes does; Ops is not counted).
func (e *Engine) ReplaceWithNotes(ctx context.Context, next lb.Config, dryRun bool) (lb.Config, Applied, error) {
	return callChange(ctx, e, func() (lb.Config, error) { return e.replace(next, dryRun) })
}

// dryRunHops refuses what reconcile's next-hop checks would (checkHops)
// when the change would reach them (the executor runs, and does not start
// again: startsAgain), looking the fresh hops up in the routing table
// alone: a dry run leaves nothing in the kernel's neighbour table.
func (e *Engine) dryRunHops(old, next lb.Config, ch config.Change) error {
	if e.exec.dp == nil || !next.Executor.Started || e.startsAgain(old.Executor, next.Executor) {
		return nil
	}
	fresh := freshHops(old, next, ch)
	routes, errs := e.opts.Netif.Routes(fresh)
	return e.checkHops(old, next, ch, fresh, func(a netip.Addr) (lb.Neighbor, error) { return routes[a], errs[a] })
}

// dryRunMove refuses what moveAttachment (or moveDetached) would refuse
// before the executor leaves its interface, when the change moves it to
// another one.
func (e *Engine) dryRunMove(old, next lb.Config) error {
	o, n := old.Executor, next.Executor
	if e.exec.dp == nil || !o.Started || !n.Started || o.Interface == n.Interface || e.attachedTo(n.Interface) {
		return nil
	}
	link, err := e.executorLink(n)
	if err != nil {
		return err
	}
	var back lb.Link // detached: it leaves nothing (moveDetached)
	if e.exec.attach.detached == "" {
		if back, err = e.opts.Netif.LinkByIndex(e.exec.attach.ifindex); err != nil {
			return nil // stopped and started: the link's check is all
		}
	}
	return e.moveRefused(link, back)
}

func (e *Engine) replace(next lb.Config, dryRun bool) (lb.Config, error) {
	old := e.ed.Config()
	edit, err := e.ed.PrepareConfig(next)
	if err != nil {
		return old, err
	}
	ch := edit.Change
	if ch.Empty() {
		return old, nil
	}
	if dryRun {
		// What change would refuse before touching anything.
		if err := e.functionsCheck(old, edit.Next, ch); err != nil {
			return old, &config.OpError{Index: -1, Err: err}
		}
		if err := e.dryRunHops(old, edit.Next, ch); err != nil {
			return old, &config.OpError{Index: -1, Err: err}
		}
		if err := e.dryRunMove(old, edit.Next); err != nil {
			return old, &config.OpError{Index: -1, Err: err}
		}
		delta, err := e.ids.Apply(ch, e.opts.MaxServices, e.opts.MaxBackends)
		if err != nil {
			return old, &config.OpError{Index: -1, Err: err}
		}
		e.ids.Revert(delta)
		return old, nil
	}
	// A file that stops a started executor stops it as "executor stop"
	// does: whatever it left pinned goes too.
	stop := e.ed.Config().Executor.Started && !edit.Next.Executor.Started
	if err := e.change(edit, -1, stop); err != nil {
		return old, err
	}
	e.log.Info("configuration replaced", "clusters", len(ch.Clusters), "ports", len(ch.Ports), "servers", len(ch.Servers),
		"advisors", len(ch.Advisors), "executor", ch.Executor, "manager", ch.Manager, "metric_server", ch.MetricServer)
	return old, nil
}
