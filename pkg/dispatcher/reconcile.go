package dispatcher

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/dlbproject/dlb/internal/logagg"
	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/dispatcher/events"
	"github.com/dlbproject/dlb/pkg/dispatcher/nexthop"
	"github.com/dlbproject/dlb/pkg/dispatcher/store"
	"github.com/dlbproject/dlb/pkg/lb"
)

// executor is the executor and what the engine knows it holds.
type executor struct {
	dp  Datapath // nil while the executor is not loaded
	err error    // why the executor is not up, if it is not
	// adopted says the executor was found pinned and attached, still
	// forwarding, when it was brought up.
	adopted bool
	// tables caches each service's Maglev table and what it was built
	// from; groups each service's affinity group.
	tables map[uint32]table
	groups map[uint32]uint32
	sweep  lb.SweepResult
	// attach follows its interface (netevents.go).
	attach attachState
	// unpinned is why the executor's pins cannot be made again, while
	// they cannot (checkPins).
	unpinned logagg.Steady
	// trace is the packet trace that runs (nil: none).
	trace *traceRun
	// moved are the neighbours' MACs that changed lately, whose cached
	// NAT hops are cleared (netevents.go).
	moved movedHops
	// routes coalesces the route changes told to the executor
	// (netevents.go).
	routes routeMoves
	// natHops are the neighbours NAT replies go to, as the last sweep
	// found them, verified in turn with the next hops (reprobeRound).
	natHops natHopProbes
	// hopCursor is where reprobeRound's next batch of next hops starts.
	hopCursor int
}

func newExecutor() executor {
	return executor{tables: map[uint32]table{}, groups: map[uint32]uint32{}}
}

// reconcile makes the executor and the host match next, which differs
// from old (the committed configuration) by ch, with the ids already
// given (delta). It writes only what ch touched; the first start of the
// executor writes everything. It returns whether it wrote anything: a
// change refused after writing must be rolled back (rollback). stop says
// the change asks for the executor to stop: whatever it left pinned is
// removed even if it is not loaded.
func (e *Engine) reconcile(old, next lb.Config, ch config.Change, delta *store.IDDelta, stop bool) (bool, error) {
	ex := next.Executor
	switch {
	case !ex.Started:
		if e.exec.dp == nil && !stop {
			e.exec.err = nil
			return false, nil
		}
		return true, e.stopExecutor(next)
	case e.exec.dp == nil:
		// startExecutor undoes what it did when it fails.
		return false, e.startExecutor(next)
	case old.Executor.Interface != ex.Interface && old.Executor.XDPMode == ex.XDPMode && e.attachedTo(ex.Interface):
		// The executor's interface was renamed ex.Interface: nothing
		// moves. The addresses dlbd put there went with it.
		// (So did the guard: it is told the new name.)
		e.host.renameInterface(old.Executor.Interface, ex.Interface)
		if err := e.guardAddresses(next); err != nil {
			e.log.Warn("guarding the addresses on the renamed interface", "interface", ex.Interface, "err", err)
		}
	case e.startsAgain(old.Executor, ex):
		// Stopped and started again elsewhere in one batch: refused
		// before anything is touched if the new interface is not there.
		if _, err := e.executorLink(ex); err != nil {
			return false, err
		}
		if done, written, err := e.moveAttachment(old, next); done {
			if err != nil {
				return written, err
			}
			break // the executor's other settings, below
		}
		if e.exec.attach.detached != "" && old.Executor.Interface != ex.Interface {
			return true, e.moveDetached(old, next)
		}
		if err := e.stopExecutor(next); err != nil {
			return true, err
		}
		return true, e.startExecutor(next)
	}

	// Next hops new to the executor must be reachable.
	fresh := freshHops(old, next, ch)
	var unknown []netip.Addr
	for _, a := range fresh {
		if e.net.MAC(a) == nil {
			unknown = append(unknown, a)
		}
	}
	e.unresolved = e.net.Wait(e.opts.Netif, e.log, unknown, min(e.opts.ResolveWait, loopResolveWait), e.othersWait)
	if err := e.checkHops(old, next, ch, fresh, e.tableLookup); err != nil {
		return false, err
	}

	u := lb.DataplaneUpdate{}
	if old.Executor != next.Executor {
		g := e.globals(next)
		u.Globals = &g
	}
	var ports []lb.ServiceKey
	if old.Executor.FinTimeout != next.Executor.FinTimeout {
		ports = allPorts(next) // every service holds the fintimeout
	} else {
		ports = ch.PortsTouched()
		ports = append(ports, e.groupChanges(next, ports)...)
		ports = append(ports, tableSizeChanges(old, next, ch, ports)...)
	}
	e.portsUpdate(&u, next, ports)
	for _, id := range delta.DelBackends {
		u.RemoveBackends = append(u.RemoveBackends, id)
	}
	for _, id := range delta.DelServices {
		u.RemoveServices = append(u.RemoveServices, id)
	}
	if err := e.exec.dp.Update(u); err != nil {
		return true, fmt.Errorf("applying to the executor: %w", err)
	}
	if addressesTouched(old, next, ch) {
		e.host.updateReturns(old, next, ch)
		e.noteMovedOut(old, next, ch)
		had := maps.Clone(e.host.configured)
		if err := e.configureAddresses(next); err != nil {
			return true, lb.Errorf("configure", "", "%v", err)
		}
		e.announceGained(next, had)
	}
	e.exec.err = nil
	return true, nil
}

// startsAgain says whether a change of a running executor's settings from
// old to next stops it and starts it again: another XDP mode, or another
// interface (not the one it is attached to, renamed).
func (e *Engine) startsAgain(old, next lb.Executor) bool {
	return old.XDPMode != next.XDPMode || (old.Interface != next.Interface && !e.attachedTo(next.Interface))
}

// detacher is a Datapath that can be detached from its interface alone,
// its maps and program kept (package datapath's can).
type detacher interface {
	Detach() error
}

// moveAttachment attaches the executor again, its tables kept, where and
// how next says: in another XDP mode, or to another interface. Stopped
// and started again, it lost every connection (the NAT ones broke, and a
// high-availability active served on with empty tables). Moved, the
// addresses dlbd put on the old interface go to the new one, are guarded
// there and, under high availability, announced from it. It reports
// false when the executor cannot be detached alone, or is detached
// already or now (its interface gone, or in another network namespace:
// see moveDetached). An
// attachment the kernel refuses leaves the executor where and as it was
// (written false); if even that fails, the next tick's check attaches it
// again.
func (e *Engine) moveAttachment(old, next lb.Config) (done, written bool, err error) {
	d, ok := e.exec.dp.(detacher)
	if !ok || e.exec.attach.detached != "" {
		return false, false, nil
	}
	ex := next.Executor
	link, err := e.executorLink(ex)
	if err != nil {
		return true, false, err
	}
	back := link
	moved := old.Executor.Interface != ex.Interface
	field, value, where := "xdp-mode", ex.XDPMode.String(), "in XDP mode "+ex.XDPMode.String()
	if moved {
		field, value, where = "interface", ex.Interface, "to "+ex.Interface
		if back, err = e.opts.Netif.LinkByIndex(e.exec.attach.ifindex); err != nil {
			if !errors.Is(err, lb.ErrNoInterface) {
				return false, false, nil // stopped and started
			}
			// Its interface left this network namespace (ip link set
			// netns), where the link still holds it; or is being
			// deleted. Detached, it moves as one whose interface is
			// gone (moveDetached), with its tables.
			if err := d.Detach(); err != nil {
				return true, false, fmt.Errorf("detaching the executor from interface %d, not in this network namespace: %w", e.exec.attach.ifindex, err)
			}
			e.detach(fmt.Sprintf("interface %s left this network namespace, or is being deleted", old.Executor.Interface))
			return false, false, nil
		}
		if err := e.moveRefused(link, back); err != nil {
			return true, false, err
		}
	}
	if err := d.Detach(); err != nil {
		return true, true, fmt.Errorf("detaching the executor to attach it %s: %w", where, err)
	}
	mode, err := e.exec.dp.Attach(link.Index, e.attachMode(ex, link))
	if err != nil {
		err = lb.Errorf(field, value, "attaching the executor %s: %v", where, e.attachRefused(e.exec.dp, link, err))
		was, berr := e.exec.dp.Attach(back.Index, e.attachMode(old.Executor, back))
		if berr != nil {
			e.log.Error("attaching the executor again where it was", "interface", back.Name, "err", berr)
			return true, true, err
		}
		if was != lb.XDPAuto {
			e.host.attachedMode = was
		}
		return true, false, err
	}
	if mode != lb.XDPAuto {
		e.host.attachedMode = mode
	}
	e.logFallback(link.Name)
	if !moved {
		e.note(fmt.Sprintf("the executor was attached again on %s in XDP mode %s, its connection tables kept", ex.Interface, e.host.attachedMode))
		return true, true, nil
	}
	e.exec.attach.ifindex = link.Index
	if g, ok := e.opts.Guard.(guardLingerer); ok {
		g.Linger(back.Name, guardLinger()) // before the guard moves with the addresses
	}
	if err := e.configureAddresses(next); err != nil { // the guard follows them
		return true, true, lb.Errorf("configure", "", "%v", err)
	}
	e.announceMoved(ex.Interface, link.Index, 0)
	e.note(fmt.Sprintf("the executor moved from %s to %s (XDP mode %s), its connection tables kept; the addresses dlbd put on %s moved with it and are announced from %s",
		back.Name, ex.Interface, e.host.attachedMode, back.Name, ex.Interface))
	return true, true, nil
}

// moveDetached attaches the executor, detached (old's interface gone: a
// NIC that died, a deleted veth), to next's interface, another one, its
// tables kept. Stopped and started again there, it lost them: every NAT
// connection broke (50 of 50 in the lab), though the clients' packets
// reach the new interface once it is announced. It is attached as when
// an interface of its name comes back (attachTo); then the addresses
// dlbd put on the gone interface go on the new one and are announced
// from it. The whole of next is written: the caller has nothing left to
// write.
func (e *Engine) moveDetached(old, next lb.Config) error {
	ex := next.Executor
	link, err := e.executorLink(ex)
	if err != nil {
		return err
	}
	if err := e.moveRefused(link, lb.Link{}); err != nil { // it leaves nothing that forwards
		return err
	}
	from := old.Executor.Interface
	mode, err := e.attachTo(next, link)
	if err != nil {
		return err
	}
	was := e.exec.attach
	e.exec.attach.detached, e.exec.attach.ifindex = "", link.Index // the addresses go on the host
	e.host.indexReturns(next)
	if err := e.configureAddresses(next); err != nil {
		// Detached again, as it was, nothing left on link: the change
		// is refused and undone (left attached there, it forwarded for
		// a configuration that names the gone interface).
		if cerr := e.configureAddresses(lb.Config{}); cerr != nil {
			e.log.Error("taking the addresses off again after a refused move", "interface", ex.Interface, "err", cerr)
		}
		if d, ok := e.exec.dp.(detacher); ok {
			if derr := d.Detach(); derr != nil {
				e.log.Error("detaching the executor again after a refused move", "interface", ex.Interface, "err", derr)
			}
		}
		e.exec.attach = was
		return lb.Errorf("configure", "", "%v", err)
	}
	if mode != lb.XDPAuto {
		e.host.attachedMode = mode
	}
	e.logFallback(link.Name)
	e.exec.attach = was
	e.attached(next, link, "executor attached to another interface, its own gone")
	e.announceMoved(ex.Interface, link.Index, 0)
	e.note(fmt.Sprintf("the executor, detached from %s (gone), was attached to %s (XDP mode %s), its connection tables kept; "+
		"the addresses dlbd put on %s are on %s and announced from it", from, ex.Interface, e.host.attachedMode, from, ex.Interface))
	return nil
}

// moveRefused says why the executor, attached to back, may not move to
// link, before it leaves back: link is down while back is up (it would
// forward nothing), or another tool's XDP program holds it. Nil when it
// may.
func (e *Engine) moveRefused(link, back lb.Link) error {
	if !link.Up && back.Up {
		return lb.Errorf("interface", link.Name, "interface %s is down (set down, or without carrier): moved there, "+
			"the executor would forward nothing; bring it up first (ip link set %s up; a cable, the switch port)", link.Name, link.Name)
	}
	if link.XDP.Attached {
		return lb.Errorf("interface", link.Name, "attaching the executor to %s: %v", link.Name, occupied(e.exec.dp, link))
	}
	return nil
}

// announceMoved announces the addresses dlbd put on ifname (index
// ifindex), the executor's interface, after it moved there: the segment's
// hosts and routers still have the old interface's MAC for them, and
// would send their clients' packets (and the servers' NAT replies) there,
// to the host stack, which resets them. As after a takeover, they are
// announced now and again at announceAfter's delays (step is the one due),
// while the executor stays there. So they are when the interface's own
// MAC changed.
func (e *Engine) announceMoved(ifname string, ifindex, step int) {
	an, ok := e.opts.Netif.(Announcer)
	if !ok || e.exec.dp == nil || e.exec.attach.ifindex != ifindex {
		return
	}
	var addrs []netip.Addr
	for a, on := range e.host.configured {
		if on == ifname {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	if err := an.Announce(ifname, addrs); err != nil {
		e.log.Warn("announcing the addresses on the executor's new interface", "interface", ifname, "err", err)
	}
	e.announceAgain(step, func() { e.announceMoved(ifname, ifindex, step+1) })
}

// startExecutor loads (or adopts) the executor, resolves every next hop,
// writes the whole state of cfg and attaches it.
func (e *Engine) startExecutor(cfg lb.Config) error {
	ex := cfg.Executor
	link, err := e.executorLink(ex)
	if err != nil {
		return err
	}
	// Loading, writing the whole state and attaching are long by nature
	// (writes of 100,000 servers, an attach waiting for the kernel): the
	// watchdog is fed through all of them.
	done := e.inLong("loading the executor")
	defer done()
	dp, err := e.opts.OpenDatapath()
	if err != nil {
		return fmt.Errorf("loading the executor: %w", err)
	}
	e.exec.attach.dropped = 0
	e.logDropped(dp)
	att, adopted := dp.Attached()
	e.exec.adopted = adopted
	// undo releases the executor again: a freshly created one is removed,
	// an adopted one (still forwarding) only released.
	undo := func() {
		var err error
		if adopted {
			err = dp.Close()
		} else {
			_, err = dp.RemovePins()
		}
		if err != nil {
			e.log.Error("releasing the executor", "err", err)
		}
		e.exec.dp = nil
		e.exec.tables = map[uint32]table{}
	}
	e.exec.dp = dp
	e.exec.tables = map[uint32]table{}
	// Changes made while the executor was stopped did not count the
	// return addresses (reconcile returns early): count them all.
	e.host.indexReturns(cfg)
	// Pinned maps whose interface was deleted and created again while no
	// dlbd ran name the old one's index (the executor is then not
	// adopted: its link went with the interface).
	if err := e.writeBeforeAttach(cfg); err != nil {
		undo()
		return err
	}
	want := e.attachMode(ex, link)
	left, err := e.takeBack(dp, att, adopted, link, want)
	if err != nil {
		undo()
		return lb.Errorf("interface", ex.Interface, "%v", err)
	}
	mode, err := dp.Attach(link.Index, want)
	if err != nil {
		err = e.attachRefused(dp, link, err)
		if left.Index != 0 { // forwarding on where it was found
			if _, berr := dp.Attach(left.Index, left.XDP.Mode); berr != nil {
				e.log.Error("attaching the executor again where it was found", "interface", left.Name, "err", berr)
			}
		}
		undo()
		return lb.Errorf("interface", ex.Interface, "%v", err)
	}
	if mode != lb.XDPAuto { // Auto: an existing attachment, mode unchanged
		e.host.attachedMode = mode
	}
	e.logFallback(link.Name)
	e.exec.attach = attachState{ifindex: link.Index, dropped: e.exec.attach.dropped}
	if r, ok := dp.(replacer); ok {
		if rep, replaced := r.Replaced(); replaced {
			e.logReplacement(link.Name, rep)
		}
	}
	moved := left.Index != 0 && left.Index != link.Index // by a dlbd stopped mid-move
	if moved {
		e.addressesLeft(left, link)
	}
	if err := e.configureAddresses(cfg); err != nil {
		undo()
		return lb.Errorf("configure", "", "%v", err)
	}
	if moved {
		e.announceMoved(ex.Interface, link.Index, 0)
	}
	e.exec.err = nil
	if !adopted && e.opts.HA != nil {
		// New, empty tables: what was imported into the old ones is
		// gone, and the peer must send it all again before this
		// dispatcher may take a group back from it.
		e.opts.HA.Resync()
	}
	if e.out != nil {
		// Logged as each lookup failed; the change says it too.
		e.out.Warnings = append(e.out.Warnings, e.hopProblems(cfg, nexthop.AllHops(cfg))...)
	}
	return nil
}

// takeBack detaches the executor a dlbd adopted where its saved
// configuration does not put it: on another interface than link, or on
// link in another XDP mode than want. A dlbd stopped during a move (or a
// change of mode) left it there after the kernel took it and before the
// change was saved: the change was never reported done, so the saved
// configuration holds, and the executor goes back with its tables (Attach
// attaches it again). a is dp's attachment (attached: it has one). It
// returns the interface the executor was found on (Index 0: it was where
// it belongs, or is not a detacher).
func (e *Engine) takeBack(dp Datapath, a lb.Attachment, attached bool, link lb.Link, want lb.XDPMode) (lb.Link, error) {
	d, detaches := dp.(detacher)
	if !attached || !detaches {
		return lb.Link{}, nil
	}
	found := link
	if a.Ifindex != link.Index {
		l, err := e.opts.Netif.LinkByIndex(a.Ifindex)
		if err != nil {
			return lb.Link{}, nil // going with its interface: Attach says so
		}
		found = l
	} else if want == lb.XDPAuto || link.XDP.Mode == lb.XDPAuto || link.XDP.Mode == want {
		return lb.Link{}, nil
	}
	if err := d.Detach(); err != nil {
		return lb.Link{}, fmt.Errorf("detaching the executor from %s (XDP mode %s), where a dlbd stopped during a change left it: %w",
			found.Name, found.XDP.Mode, err)
	}
	e.log.Warn("the executor was found where the saved configuration does not put it, left there by a dlbd stopped "+
		"during a change that was never saved: put back, its connection tables kept",
		"found_on", found.Name, "found_mode", found.XDP.Mode, "interface", link.Name, "xdp_mode", want)
	return found, nil
}

// addressesLeft moves the addresses dlbd put on the executor's interface
// link from left, where the executor was found (takeBack): a dlbd stopped
// during a move had moved them with it. The guard stays on left a while,
// as after a move.
func (e *Engine) addressesLeft(left, link lb.Link) {
	if g, ok := e.opts.Guard.(guardLingerer); ok {
		g.Linger(left.Name, guardLinger())
	}
	var back []netip.Addr
	for a, ifname := range e.host.configured {
		if ifname == link.Name {
			back = append(back, a)
		}
	}
	if _, err := e.opts.Netif.AddAddresses(link.Name, back); err != nil {
		e.log.Warn("putting addresses back on the executor's interface", "interface", link.Name, "err", err)
	}
	for _, a := range back {
		if err := e.opts.Netif.DelAddress(left.Name, a); err != nil {
			e.log.Warn("taking an address off the interface the executor was found on", "address", a, "interface", left.Name, "err", err)
		}
	}
}

// replacer is a Datapath that can take the place of an executor pinned by
// an older (or newer) dlbd of another ABI, or by one with other table
// sizes (package datapath's can).
type replacer interface {
	Replaced() (lb.Replacement, bool)
}

// nativeRefuser is a datapath that says why auto mode fell back to
// generic mode (the executor's does).
type nativeRefuser interface {
	NativeRefused() error
}

// nativeRefused says, if the executor asked for auto mode runs in
// generic mode because the interface refused native mode, why: "" if
// not.
func (e *Engine) nativeRefused() string {
	r, ok := e.exec.dp.(nativeRefuser)
	if !ok || e.host.attachedMode != lb.XDPGeneric {
		return ""
	}
	if err := r.NativeRefused(); err != nil {
		return err.Error()
	}
	return ""
}

// logFallback warns, after an attachment, that auto mode fell back to
// generic mode, and why.
func (e *Engine) logFallback(ifname string) {
	if why := e.nativeRefused(); why != "" {
		e.log.Warn("the executor runs in generic XDP mode: the interface refused native mode (generic mode forwards several times fewer packets per core)",
			"interface", ifname, "native", why)
	}
}

// logReplacement says, in the log and with the executorReplaced event,
// that the executor took the place of the one pinned before it on
// interface ifname, and why.
func (e *Engine) logReplacement(ifname string, rep lb.Replacement) {
	var reason string
	if len(rep.Resized) > 0 {
		resized := strings.Join(rep.Resized, ", ")
		reason = "the pinned executor's tables had other sizes: " + resized
		args := []any{"resized", resized, "carried", rep.Carried, "lost", rep.Lost}
		msg := "replaced the executor pinned with other table sizes: its connections and affinity records are carried over"
		if rep.Lost == 0 && rep.Err == "" {
			e.log.Info(msg, args...)
		} else {
			e.log.Warn(msg+", not all", append(args, "err", rep.Err)...)
		}
	} else {
		e.log.Warn("replaced the executor a dlbd of another version had pinned (another executor ABI): "+
			"its tables could not be read, so MAC-mode connections go on to the server the Maglev table gives "+
			"them (the same while the servers and weights are); its NAT connections and affinity records are lost",
			"old_abi", rep.OldABI)
		reason = "the pinned executor's maps were of another version"
		if rep.OldABI != 0 {
			reason = fmt.Sprintf("the pinned executor's maps were of executor ABI %d", rep.OldABI)
		}
	}
	e.events.Emit(events.ExecutorReplaced, map[string]string{"DLB_INTERFACE": ifname, "DLB_REASON": reason})
}

// repinner is a Datapath that can pin itself again (package datapath's
// can).
type repinner interface {
	Repin() ([]string, error)
}

// repinRemedy is what the operator does about pins that cannot be made
// again.
const repinRemedy = "until it is pinned, the executor forwards but cannot be adopted: a restart of dlbd loads " +
	"a new one with empty tables, and this one leaves the interface when dlbd exits; restart dlbd at a quiet time " +
	"(under systemd the restart makes the pin directory again)"

// unpinnedWarning is the executor report's warning while the executor's
// pins cannot be made again, or "".
func (e *Engine) unpinnedWarning() string {
	if e.exec.unpinned.Msg() == "" || e.exec.dp == nil {
		return ""
	}
	return "the executor could not be pinned again (" + e.exec.unpinned.Msg() + "): " + repinRemedy
}

// checkPins pins the executor again when its pins were deleted under dlbd
// (rm -rf of the pin directory): without them the next dlbd would load a
// new executor with empty tables, and the program would leave the
// interface when this dlbd exits. The pin directory's lock is taken again
// with it.
func (e *Engine) checkPins() {
	rp, ok := e.exec.dp.(repinner)
	if !ok {
		return
	}
	names, err := rp.Repin()
	if len(names) > 0 {
		e.log.Warn("the executor's pins were deleted under dlbd; pinned again, so that a restart adopts it",
			"dir", e.exec.dp.Info().PinDir, "pins", len(names))
	}
	if err != nil {
		// A pin directory dlbd cannot make again stays so until a
		// restart: the report warns all along (unpinnedWarning).
		if e.exec.unpinned.Failed(err, time.Now()) {
			e.log.Error("pinning the executor again", "err", err, "remedy", repinRemedy)
		}
		return
	}
	if e.exec.unpinned.OK() {
		e.log.Info("the executor is pinned again", "dir", e.exec.dp.Info().PinDir)
	}
	if l := e.opts.PinLock; l != nil && !l.StillHeld() {
		if err := l.Renew(); err != nil {
			e.log.Error("locking the pin directory again", "dir", e.exec.dp.Info().PinDir, "err", err)
		}
	}
}

// xdpDescriber is a Datapath that can tell what an XDP program is
// (package datapath's can).
type xdpDescriber interface {
	DescribeXDP(ifindex int, p *lb.XDPProgram)
}

// attachRefused explains err, dp's failure to attach to link, when the
// interface holds an XDP program dlbd did not attach: dlbd never replaces
// another tool's program, and the kernel's own words for it ("device or
// resource busy", "file exists") do not say what to do. They are kept at
// the end.
func (e *Engine) attachRefused(dp Datapath, link lb.Link, err error) error {
	now, lerr := e.opts.Netif.LinkByName(link.Name)
	if lerr != nil || now.Index != link.Index || !now.XDP.Attached {
		return err
	}
	return fmt.Errorf("%w (%w)", occupied(dp, now), err)
}

// occupied says which XDP program link runs instead of the executor, and
// how to free the interface. link.XDP is one dlbd did not attach.
func occupied(dp Datapath, link lb.Link) error {
	p := link.XDP
	if d, ok := dp.(xdpDescriber); ok {
		d.DescribeXDP(link.Index, &p)
	}
	what := "an XDP program"
	if p.ID != 0 {
		what = fmt.Sprintf("XDP program %d", p.ID)
		if p.Name != "" {
			what += fmt.Sprintf(" (%q)", p.Name)
		}
	}
	if p.Mode != lb.XDPAuto {
		what += " in " + p.Mode.String() + " mode"
	}
	who := "attached by another tool"
	if p.Executor {
		who = "another dlb executor's, not the one pinned in this dlbd's --pin-dir (a second dlbd?)"
	}
	var fix string
	switch {
	case p.LinkID != 0:
		fix = fmt.Sprintf("it is held by BPF link %d: the program that made the link must release it (bpftool link show id %d names it)", p.LinkID, p.LinkID)
	case p.Mode == lb.XDPGeneric:
		fix = fmt.Sprintf(`detach it with "ip link set dev %s xdpgeneric off"`, link.Name)
	case p.Mode == lb.XDPNative:
		fix = fmt.Sprintf(`detach it with "ip link set dev %s xdpdrv off"`, link.Name)
	default:
		fix = fmt.Sprintf(`detach them with "ip link set dev %s xdp off" (with xdpgeneric, xdpdrv, xdpoffload as needed)`, link.Name)
	}
	return fmt.Errorf("%s already runs %s, %s: dlbd does not replace a program it did not attach; %s, or start the executor on another interface",
		link.Name, what, who, fix)
}

// attachedTo reports whether the executor is attached to the interface
// named ifname.
func (e *Engine) attachedTo(ifname string) bool {
	if e.exec.dp == nil {
		return false
	}
	att, ok := e.exec.dp.Attached()
	if !ok {
		return false
	}
	link, err := e.opts.Netif.LinkByName(ifname)
	return err == nil && link.Index == att.Ifindex
}

// executorLink finds the interface ex names and checks that the executor
// can work there.
func (e *Engine) executorLink(ex lb.Executor) (lb.Link, error) {
	link, err := e.opts.Netif.LinkByName(ex.Interface)
	if err != nil {
		return lb.Link{}, lb.Errorf("interface", "", "%v", err)
	}
	if !link.Ethernet() {
		// lo, a tunnel, WireGuard: nothing arrives there from clients
		// as Ethernet frames, and nothing can be sent to a server's MAC.
		addr := link.MAC.String()
		if addr == "" {
			addr = "none"
		}
		return lb.Link{}, lb.Errorf("interface", ex.Interface, "%s has no Ethernet address (%s): the executor forwards Ethernet frames; "+
			"start it on the interface clients and servers are reached through", ex.Interface, addr)
	}
	return link, nil
}

// writeBeforeAttach reads every next hop of cfg again (a route lookup
// each, the known ones too), writes the whole state into the executor and
// has its NAT entries forget the client hops cached through interfaces
// that are gone: what must hold before the program is attached, for the
// first frame it sees must not be sent to an index that no longer exists.
func (e *Engine) writeBeforeAttach(cfg lb.Config) error {
	e.net.Wait(e.opts.Netif, e.log, nexthop.AllHops(cfg), e.opts.ResolveWait, nil)
	if err := e.exec.dp.Apply(e.dataplane(cfg)); err != nil {
		return fmt.Errorf("applying to the executor: %w", err)
	}
	e.forgetStaleHops()
	return nil
}

// attachMode is the XDP mode to attach the executor to link in.
func (e *Engine) attachMode(ex lb.Executor, link lb.Link) lb.XDPMode {
	want := ex.XDPMode
	if want == lb.XDPAuto && link.Kind == "veth" {
		// A veth only processes frames its peer sent with native-mode
		// XDP_TX if it runs XDP itself, which dlbd cannot see from here:
		// auto is generic on a veth, native must be asked for.
		want = lb.XDPGeneric
		e.log.Info("auto XDP mode uses generic mode on a veth; ask for --xdp-mode native if the peer runs XDP", "interface", ex.Interface)
	}
	return want
}

// stopExecutor takes the addresses the engine configured off the host,
// detaches the executor and removes every pin it has, loaded or not (one
// that could not be loaded is removed by name), and the neighbour entries
// it made for cfg's next hops. The change's notes name the pins removed.
func (e *Engine) stopExecutor(cfg lb.Config) error {
	e.haSendLast(cfg)
	errs := []error{e.configureAddresses(lb.Config{})}
	var removed []string
	where := ""
	if e.exec.dp != nil {
		where = " under " + e.exec.dp.Info().PinDir
		r, err := e.exec.dp.RemovePins()
		removed = r
		errs = append(errs, err)
	} else if e.opts.RemovePins != nil {
		r, err := e.opts.RemovePins()
		removed = r
		errs = append(errs, err)
	}
	e.exec.dp, e.exec.err = nil, nil
	e.exec.tables = map[uint32]table{}
	e.exec.groups = map[uint32]uint32{}
	e.exec.sweep = lb.SweepResult{}
	e.exec.attach = attachState{}
	e.forgetNeighbors(nexthop.AllHops(cfg))
	e.net.Clear()
	if len(removed) > 0 {
		e.note(fmt.Sprintf("removed %d pins%s: %s", len(removed), where, strings.Join(removed, ", ")))
	} else {
		e.note("no pins to remove")
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stopping the executor: %w", err)
	}
	return nil
}

// globals are the executor's global settings for cfg.
func (e *Engine) globals(cfg lb.Config) lb.DataplaneGlobals {
	ex := cfg.Executor
	return lb.DataplaneGlobals{NFA: ex.NFA, NFA6: ex.NFA6,
		ClientGateway: e.net.Hop(ex.ClientGateway), ClientGateway6: e.net.Hop(ex.ClientGateway6)}
}

// hopRole names what a next hop is in cfg, for refusals: "router",
// "clientgateway" or "server".
func hopRole(cfg lb.Config, a netip.Addr) string {
	if a == cfg.Executor.ClientGateway || a == cfg.Executor.ClientGateway6 {
		return "clientgateway"
	}
	for _, cl := range cfg.Clusters {
		for _, p := range cl.Ports {
			for _, s := range p.Servers {
				if s.Router == a {
					return "router"
				}
			}
		}
	}
	return "server"
}

// freshHops lists the next hops the change adds: those of added or
// changed servers, and changed client gateways, that old did not use.
func freshHops(old, next lb.Config, ch config.Change) []netip.Addr {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	add := func(a netip.Addr, before bool) {
		if a.IsValid() && !before && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for k, kind := range ch.Servers {
		if kind == config.Removed {
			continue
		}
		s, _ := serverOf(next, k)
		o, had := serverOf(old, k)
		add(s.NextHop(), had && o.NextHop() == s.NextHop())
	}
	oe, ne := old.Executor, next.Executor
	add(ne.ClientGateway, ne.ClientGateway == oe.ClientGateway)
	add(ne.ClientGateway6, ne.ClientGateway6 == oe.ClientGateway6)
	return out
}

// allPorts lists every port of cfg.
func allPorts(cfg lb.Config) []lb.ServiceKey {
	var out []lb.ServiceKey
	for _, cl := range cfg.Clusters {
		for _, p := range cl.Ports {
			out = append(out, lb.ServiceKey{Cluster: cl.Address, Port: p.Number})
		}
	}
	return out
}

// addressesTouched reports whether the change can change the addresses
// the engine puts on the host: a cluster's configure flag, a cluster
// removed, or a NAT server's return address.
func addressesTouched(old, next lb.Config, ch config.Change) bool {
	if old.Executor != next.Executor {
		return true
	}
	for range ch.Clusters {
		return true
	}
	for k := range ch.Ports {
		if p := next.Port(k); p != nil && p.Method == lb.NAT {
			return true
		}
		if p := old.Port(k); p != nil && p.Method == lb.NAT {
			return true
		}
	}
	for k := range ch.Servers {
		if s, ok := serverOf(next, k); ok && s.ReturnAddress.IsValid() {
			return true
		}
		if s, ok := serverOf(old, k); ok && s.ReturnAddress.IsValid() {
			return true
		}
	}
	return false
}

// updateReturns updates the count of servers per return address.
func (h *host) updateReturns(old, next lb.Config, ch config.Change) {
	count := func(cfg lb.Config, k lb.BackendKey, d int) {
		p := cfg.Port(k.Service)
		if p == nil || p.Method != lb.NAT {
			return
		}
		if s := p.Server(k.Server); s != nil && s.ReturnAddress.IsValid() {
			h.returns[s.ReturnAddress] += d
			if h.returns[s.ReturnAddress] <= 0 {
				delete(h.returns, s.ReturnAddress)
			}
		}
	}
	for k := range ch.Servers {
		count(old, k, -1)
		count(next, k, 1)
	}
	// A port whose method changed changes the role of all its servers'
	// return addresses.
	for k, kind := range ch.Ports {
		if kind != config.Changed {
			continue
		}
		op, np := old.Port(k), next.Port(k)
		if op == nil || np == nil || op.Method == np.Method {
			continue
		}
		for _, s := range op.Servers {
			if ch.Servers[lb.BackendKey{Service: k, Server: s.Address}] == 0 {
				count(old, lb.BackendKey{Service: k, Server: s.Address}, -1)
				count(next, lb.BackendKey{Service: k, Server: s.Address}, 1)
			}
		}
	}
}

// configureAddresses puts the cluster addresses marked Configure and the
// NAT return addresses on the executor's interface, and takes off those it
// put there that are no longer wanted. One the interface had before it was
// wanted (the operator's) stays on, the engine did not put it there;
// except under high availability, which moves every address.
func (e *Engine) configureAddresses(cfg lb.Config) error {
	want := map[netip.Addr]string{}
	switch {
	case !cfg.Executor.Started:
	case e.haOn(cfg):
		// Those of the groups active here.
		for g, addrs := range e.haAddresses(cfg) {
			if e.ha.applied[g] == lb.HAActive {
				for _, a := range addrs {
					want[a] = cfg.Executor.Interface
				}
			}
		}
	default:
		for i := range cfg.Clusters {
			if cl := &cfg.Clusters[i]; cl.Configure {
				want[cl.Address] = cfg.Executor.Interface
			}
		}
		for a := range e.host.returns {
			want[a] = cfg.Executor.Interface
		}
	}
	if e.exec.attach.detached != "" {
		// The interface is gone, and its addresses with it: remember
		// what is wanted, which re-attaching puts on the new one.
		e.host.configured, e.host.found = want, map[netip.Addr]string{}
		return nil
	}
	intent := e.saveIntent(cfg, want)
	var errs []error
	for a, ifname := range e.host.configured {
		if want[a] == ifname {
			continue
		}
		// Under high availability the addresses are the pair's: a
		// standby that kept one would answer for it beside the active.
		if e.host.found[a] == ifname && !e.haOn(cfg) {
			e.log.Info("left an address on its interface: it was there before dlb wanted it", "address", a, "interface", ifname)
		} else if err := e.opts.Netif.DelAddress(ifname, a); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(e.host.configured, a)
		delete(e.host.found, a)
	}
	put := map[netip.Addr]string{}
	for a, ifname := range want {
		if e.host.configured[a] != ifname {
			put[a] = ifname
		}
	}
	on, err := e.putAddresses(put)
	if err != nil {
		errs = append(errs, err)
	}
	for a, added := range on {
		ifname := put[a]
		e.host.configured[a] = ifname
		// Under high availability the addresses are the pair's, and
		// the takeover's fast path may have just put them on.
		if !added && !e.haOn(cfg) {
			e.host.found[a] = ifname
			e.log.Info("an address dlb wants on its interface was there already: dlb will leave it there", "address", a,
				"interface", ifname)
		}
	}
	for a, ifname := range intent {
		if e.host.configured[a] != ifname {
			// One did not go on: the journal says as the host is.
			e.persistHost()
			break
		}
	}
	if err := e.guardAddresses(cfg); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// saveIntent journals, as dlbd's (configured), the addresses of want that
// configureAddresses (for cfg) is about to put on, before they go on, and
// returns them. A dlbd killed after putting one on and before the change
// that wanted it was saved then takes it off when it starts again (the
// saved configuration does not want it), instead of leaving the host
// answering for an address nothing serves, the address recorded nowhere.
// One an interface has already may be the operator's: it is not journaled
// (a dlbd killed then leaves it on). Under high availability, where the
// addresses are the pair's, neither is one the saved configuration has: a
// restart takes it off if its group is not active (claimPairAddresses),
// and a takeover puts on many at once, that must not wait for the disk.
func (e *Engine) saveIntent(cfg lb.Config, want map[netip.Addr]string) map[netip.Addr]string {
	var saved map[netip.Addr]bool
	if e.haOn(cfg) {
		saved = map[netip.Addr]bool{}
		for _, addrs := range e.haAddresses(e.ed.Config()) {
			for _, a := range addrs {
				saved[a] = true
			}
		}
	}
	var fresh []netip.Addr
	for a, ifname := range want {
		if e.host.configured[a] != ifname && !saved[a] {
			fresh = append(fresh, a)
		}
	}
	if saved == nil && len(fresh) > 0 {
		held, err := e.opts.Netif.HeldAddresses(fresh)
		if err != nil {
			return nil // which are the operator's is unknown: none is journaled
		}
		fresh = slices.DeleteFunc(fresh, func(a netip.Addr) bool { return held[a] })
	}
	if len(fresh) == 0 {
		return nil
	}
	intent := make(map[netip.Addr]string, len(fresh))
	for _, a := range fresh {
		intent[a] = want[a]
	}
	conf := maps.Clone(e.host.configured)
	maps.Copy(conf, intent)
	if err := e.store.Append(store.Record{Configured: &conf}); err != nil {
		e.log.Error("saving the addresses about to be put on", "err", err)
		return nil
	}
	e.intentSaved = true
	return intent
}
