package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/config"
	"github.com/dlbproject/dlb/pkg/lb"
)

// fakeDatapath records what the engine asks of the executor: it holds
// the state the updates make, as the real maps would.
type fakeDatapath struct {
	mu       sync.Mutex
	attached bool
	// refuseMode is a mode Attach refuses (auto: none); detaches counts
	// Detach calls. nativeRefused is why native mode is refused: an
	// attachment in auto mode falls back to generic with it.
	refuseMode    lb.XDPMode
	nativeRefused error
	lastMode      lb.XDPMode // the mode the last Attach asked for
	detaches      int
	ifindex       int
	globals       lb.DataplaneGlobals
	services      map[uint32]lb.DataplaneService
	backends      map[uint32]lb.DataplaneBackend
	loaded        bool  // the state was applied at least once
	applies       int   // Apply and Update calls that changed something
	wholes        int   // Apply calls (the whole state written)
	failNext      error // returned by the next Apply or Update
	removed       bool
	closed        bool
	dropped       []uint32       // backends DropAffinity was called for
	swept         lb.SweepResult // what Sweep returns
	updated       []lb.DataplaneUpdate
	// droppedPins is what Dropped returns.
	droppedPins []string
	// staleAtAttach lists the backends that, when Attach was called, were
	// reached through another interface than the one attached to: the
	// executor's first frames would be redirected there. forgets counts
	// ForgetStaleHops calls, forgotAttached those made while attached.
	staleAtAttach           []uint32
	forgets, forgotAttached int
	// hops are the next hops NAT entries cached (ForgetHopsTo clears
	// them); hopPasses counts ForgetHopsTo calls.
	hops      []movedHop
	hopPasses int
	// routeTells counts RoutesChanged calls.
	routeTells int
	// reasons are the per-reason counters Stats returns.
	reasons []lb.ReasonCount
	// conns, put and merged are the connection tables (merge_test.go).
	conns, put, merged []lb.ConnEntry
	// occupied refuses Attach as the kernel does when the interface
	// runs another XDP program; described is what DescribeXDP adds to
	// it (name, link, executor).
	occupied  error
	described lb.XDPProgram
	// repin is what the next Repin pins again (its pins deleted);
	// repinErr, while set, is its failure each time.
	repin    []string
	repinErr error
	// onAttach, if set, is called by Attach first.
	onAttach func()
}

// Repin is the real datapath's pinning again of what lost its pin.
func (f *fakeDatapath) Repin() ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.repinErr != nil {
		return nil, f.repinErr
	}
	out := f.repin
	f.repin = nil
	return out, nil
}

// fakeLock is an OwnerLock whose path is lost when held is false.
type fakeLock struct {
	mu      sync.Mutex
	held    bool
	renewed int
}

func (l *fakeLock) StillHeld() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

func (l *fakeLock) Renew() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		l.held = true
		l.renewed++
	}
	return nil
}

func (f *fakeDatapath) Attach(ifindex int, mode lb.XDPMode) (lb.XDPMode, error) {
	if f.onAttach != nil {
		f.onAttach()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.attached && f.ifindex != ifindex {
		return 0, errors.New("attached elsewhere")
	}
	if f.occupied != nil {
		return 0, f.occupied
	}
	if f.refuseMode != lb.XDPAuto && mode == f.refuseMode {
		return 0, errors.New("mode refused")
	}
	f.attached, f.ifindex = true, ifindex
	for _, b := range f.backends {
		if b.MAC != nil && b.Ifindex != ifindex {
			f.staleAtAttach = append(f.staleAtAttach, b.ID)
		}
	}
	f.lastMode = mode
	if mode == lb.XDPAuto {
		mode = lb.XDPGeneric
	}
	return mode, nil
}

func (f *fakeDatapath) NativeRefused() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lastMode != lb.XDPAuto {
		return nil
	}
	return f.nativeRefused
}

// DescribeXDP is the real datapath's reading of a program's name and link.
func (f *fakeDatapath) DescribeXDP(_ int, p *lb.XDPProgram) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p.Name, p.LinkID, p.Executor = f.described.Name, f.described.LinkID, f.described.Executor
}

// ForgetStaleHops is the real datapath's clearing of the client hops NAT
// entries cached through an interface that is gone.
func (f *fakeDatapath) ForgetStaleHops() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgets++
	if f.attached {
		f.forgotAttached++
	}
	return 0, nil
}

// ForgetHopsTo is the real datapath's clearing of the client hops NAT
// entries cached to a MAC that moved.
func (f *fakeDatapath) ForgetHopsTo(stale func(ifindex int, mac net.HardwareAddr) bool) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hopPasses++
	n := len(f.hops)
	f.hops = slices.DeleteFunc(f.hops, func(h movedHop) bool { return stale(h.ifindex, h.mac[:]) })
	return n - len(f.hops), nil
}

// RoutesChanged is the real datapath's having every cached client hop
// looked up again.
func (f *fakeDatapath) RoutesChanged() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routeTells++
	return nil
}

// routesTold returns how many times RoutesChanged was called.
func (f *fakeDatapath) routesTold() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.routeTells
}

// cachedHops returns the hops NAT entries still cache, and how many
// passes cleared them.
func (f *fakeDatapath) cachedHops() ([]movedHop, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.hops), f.hopPasses
}

func (f *fakeDatapath) Attached() (lb.Attachment, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return lb.Attachment{Ifindex: f.ifindex, LinkID: 7, ProgramID: 8}, f.attached
}

func (f *fakeDatapath) Apply(dp lb.Dataplane) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failNext; err != nil {
		f.failNext = nil
		return err
	}
	f.globals = dp.Globals()
	f.services, f.backends = map[uint32]lb.DataplaneService{}, map[uint32]lb.DataplaneBackend{}
	for _, s := range dp.Services {
		f.services[s.ID] = s
	}
	for _, b := range dp.Backends {
		f.backends[b.ID] = b
	}
	f.loaded = true
	f.applies++
	f.wholes++
	return nil
}

func (f *fakeDatapath) Update(u lb.DataplaneUpdate) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failNext; err != nil {
		f.failNext = nil
		return err
	}
	if !f.loaded {
		return errors.New("update before the whole state was applied")
	}
	f.updated = append(f.updated, u)
	if u.Empty() {
		return nil
	}
	if u.Globals != nil {
		f.globals = *u.Globals
	}
	for _, s := range u.Services {
		f.services[s.ID] = s
	}
	for _, b := range u.Backends {
		if _, ok := f.services[b.Service]; !ok {
			return fmt.Errorf("backend %d names service %d, which the executor does not have", b.ID, b.Service)
		}
		f.backends[b.ID] = b
	}
	for _, id := range u.RemoveServices {
		delete(f.services, id)
	}
	for _, id := range u.RemoveBackends {
		delete(f.backends, id)
	}
	f.applies++
	return nil
}

// state returns what the executor's maps hold, nil before the first
// Apply.
func (f *fakeDatapath) state() *lb.Dataplane {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.loaded {
		return nil
	}
	g := f.globals
	dp := &lb.Dataplane{NFA: g.NFA, NFA6: g.NFA6, ClientGateway: g.ClientGateway, ClientGateway6: g.ClientGateway6,
		ReturnPools: g.ReturnPools}
	for _, s := range f.services {
		dp.Services = append(dp.Services, s)
	}
	for _, b := range f.backends {
		dp.Backends = append(dp.Backends, b)
	}
	slices.SortFunc(dp.Services, func(a, b lb.DataplaneService) int { return int(a.ID) - int(b.ID) })
	slices.SortFunc(dp.Backends, func(a, b lb.DataplaneBackend) int { return int(a.ID) - int(b.ID) })
	return dp
}

func (f *fakeDatapath) Reasons() ([]lb.ReasonCount, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reasons), nil
}
func (f *fakeDatapath) Stats() (lb.DataplaneStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return lb.DataplaneStats{Services: map[uint32]lb.Counters{}, Reasons: slices.Clone(f.reasons)}, nil
}
func (f *fakeDatapath) Sweep() (lb.SweepResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.swept, nil
}
func (f *fakeDatapath) Info() lb.DataplaneInfo {
	return lb.DataplaneInfo{PinDir: "/fake", ConnTable: 1024, NATTable: 2048, HalfOpenTable: 512, AffinityTable: 4096,
		MaxServices: 4096, MaxBackends: 16384, MaxTableSize: lb.MaxTableSize}
}
func (f *fakeDatapath) Memory() []lb.TableMemory { return nil }
func (f *fakeDatapath) DropAffinity(backend uint32) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropped = append(f.dropped, backend)
	return 1, nil
}
func (f *fakeDatapath) Close() error { f.closed = true; return nil }
func (f *fakeDatapath) RemovePins() ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = true
	f.attached = false
	f.loaded = false
	f.services, f.backends = nil, nil // the maps go with their pins
	return []string{"conns", "link", "prog"}, nil
}

// Detach detaches the executor alone, its maps kept.
func (f *fakeDatapath) Detach() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attached = false
	f.detaches++
	return nil
}

func (f *fakeDatapath) Dropped() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.droppedPins)
}

// sever makes the attachment look as the kernel leaves it when the
// interface is deleted: attached to nothing.
func (f *fakeDatapath) sever() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attached = false
	f.droppedPins = append(f.droppedPins, "link")
}

// fakeGuard records what the engine asked the guard to do, with the index
// the interface of that name had then (nif, once set; -1 before).
type fakeGuard struct {
	mu    sync.Mutex
	nif   *fakeNetif
	calls []guardCall
	// lingered records Linger calls, each with how many Guard calls
	// came before it.
	lingered []lingerCall
}

type lingerCall struct {
	ifname string
	d      time.Duration
	after  int
}

// Linger records the call (the real guard stays on ifname for d).
func (g *fakeGuard) Linger(ifname string, d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lingered = append(g.lingered, lingerCall{ifname, d, len(g.calls)})
}

type guardCall struct {
	ifname  string
	ifindex int
	addrs   []netip.Addr
}

func (g *fakeGuard) Guard(ifname string, addrs []netip.Addr) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	idx := -1
	if g.nif != nil {
		g.nif.mu.Lock()
		idx = g.nif.ifindex
		g.nif.mu.Unlock()
	}
	g.calls = append(g.calls, guardCall{ifname, idx, slices.Clone(addrs)})
	return nil
}

// last returns the latest call, and whether there was one.
func (g *fakeGuard) last() (guardCall, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.calls) == 0 {
		return guardCall{}, false
	}
	return g.calls[len(g.calls)-1], true
}

// fakeNetif resolves servers from a table and records addresses. Its one
// interface, eth0, has index ifindex (0: it does not exist).
type fakeNetif struct {
	mu        sync.Mutex
	macs      map[netip.Addr]net.HardwareAddr // missing: unresolved
	offLink   map[netip.Addr]bool
	addresses map[netip.Addr]string
	ifindex   int
	// entries holds the addresses Neighbors was asked about (it "creates"
	// kernel entries for them) that ForgetNeighbors did not remove since;
	// forgotten lists what ForgetNeighbors removed, reprobed what Reprobe
	// verified.
	entries             map[netip.Addr]bool
	forgotten, reprobed []netip.Addr
	// natNeighbors is what NeighborsAt finds, reprobedNAT what
	// ReprobeUnmanaged verified.
	natNeighbors map[lb.NATHop][]netip.Addr
	reprobedNAT  []netip.Addr
	// forwarding is what Forwarding reports, by family (true: IPv6).
	forwarding map[bool]bool
	// held are the host's own addresses besides those AddAddresses put on
	// (the NFAs the tests use).
	held map[netip.Addr]bool
	// gro is what GRO reports, by interface index.
	gro map[int]bool
	// events feeds Watch.
	events    chan lb.NetEvent
	linkDown  bool
	announced []netip.Addr // every address Announce was called for, in order
	// noRoutes makes Neighbors find no route to anything (an interface
	// whose address is not back yet).
	noRoutes bool
	// src is the source address of the routes Neighbors finds.
	src netip.Addr
	// afterAdd, if set, is called (n.mu held) once AddAddresses put an
	// address on.
	afterAdd func(netip.Addr)
	// listings counts the listings of the host's addresses that
	// AddAddresses and HeldAddresses made.
	listings int
	// refuse makes AddAddresses fail for these addresses.
	refuse map[netip.Addr]bool
	// preferred are the IPv6 addresses on as an older dlbd put them on
	// (not deprecated), until DeprecateAddresses.
	preferred map[netip.Addr]bool
	// xdp is the XDP program eth0 reports.
	xdp lb.XDPProgram
	// mac, when set, is eth0's hardware address ("none": no address).
	mac string
	// name, when set, is the interface's name instead of eth0 (rename).
	name string
	// second, when set, names a second Ethernet interface (index 3);
	// secondDown sets it down; secondXDP is the XDP program it reports.
	second     string
	secondDown bool
	secondXDP  lb.XDPProgram
}

// secondLink is the second interface; n.mu held.
func (n *fakeNetif) secondLink() lb.Link {
	return lb.Link{Index: 3, Name: n.second, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xbb}, Up: !n.secondDown, XDP: n.secondXDP}
}

// ifname is the interface's name; n.mu held.
func (n *fakeNetif) ifname() string {
	if n.name == "" {
		return "eth0"
	}
	return n.name
}

// rename renames the interface, as "ip link set X name Y" does: its
// index and addresses stay.
func (n *fakeNetif) rename(to string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	from := n.ifname()
	for a, ifname := range n.addresses {
		if ifname == from {
			n.addresses[a] = to
		}
	}
	n.name = to
}

func newFakeNetif() *fakeNetif {
	return &fakeNetif{macs: map[netip.Addr]net.HardwareAddr{}, offLink: map[netip.Addr]bool{}, addresses: map[netip.Addr]string{},
		ifindex: 2, forwarding: map[bool]bool{}, events: make(chan lb.NetEvent, 64), entries: map[netip.Addr]bool{},
		held: map[netip.Addr]bool{netip.MustParseAddr("198.18.0.2"): true, netip.MustParseAddr("198.18.0.4"): true,
			netip.MustParseAddr("2001:2::2"): true}}
}

func (n *fakeNetif) LinkByName(name string) (lb.Link, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.second != "" && name == n.second {
		return n.secondLink(), nil
	}
	if name != n.ifname() || n.ifindex == 0 {
		return lb.Link{}, fmt.Errorf("looking up interface %q: %w", name, lb.ErrNoInterface)
	}
	return n.link(), nil
}

func (n *fakeNetif) LinkByIndex(index int) (lb.Link, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.second != "" && index == 3 {
		return n.secondLink(), nil
	}
	if index != n.ifindex || n.ifindex == 0 {
		return lb.Link{}, fmt.Errorf("looking up interface %d: %w", index, lb.ErrNoInterface)
	}
	return n.link(), nil
}

// link is the interface; n.mu held.
func (n *fakeNetif) link() lb.Link {
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 0xaa}
	switch n.mac {
	case "":
	case "none":
		mac = nil
	default:
		mac, _ = net.ParseMAC(n.mac)
	}
	return lb.Link{Index: n.ifindex, Name: n.ifname(), MAC: mac, Up: !n.linkDown, XDP: n.xdp}
}

func (n *fakeNetif) Watch(ctx context.Context) (<-chan lb.NetEvent, error) {
	out := make(chan lb.NetEvent)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-n.events:
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

func (n *fakeNetif) Reprobe(ifindex int, addrs []netip.Addr, fresh time.Duration) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.reprobed = append(n.reprobed, addrs...)
	return nil
}

// ReprobeUnmanaged records what it verifies in reprobedNAT.
func (n *fakeNetif) ReprobeUnmanaged(ifindex int, addrs []netip.Addr, fresh time.Duration) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.reprobedNAT = append(n.reprobedNAT, addrs...)
	return nil
}

// NeighborsAt returns the neighbours natNeighbors lists for hops.
func (n *fakeNetif) NeighborsAt(hops []lb.NATHop) (map[lb.NATHop][]netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[lb.NATHop][]netip.Addr{}
	for _, h := range hops {
		if addrs, ok := n.natNeighbors[h]; ok {
			out[h] = slices.Clone(addrs)
		}
	}
	return out, nil
}

func (n *fakeNetif) ForgetNeighbors(addrs []netip.Addr) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.forgotten = append(n.forgotten, addrs...)
	for _, a := range addrs {
		delete(n.entries, a)
	}
	return nil
}

func (n *fakeNetif) GRO(ifindex int) (string, bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return fmt.Sprintf("if%d", ifindex), n.gro[ifindex], nil
}

// setHeld makes the host hold a (an address the operator put on an
// interface), or not.
func (n *fakeNetif) setHeld(a netip.Addr, held bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.held[a] = held
}

func (n *fakeNetif) HeldAddresses(addrs []netip.Addr) (map[netip.Addr]bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	held := map[netip.Addr]bool{}
	if len(addrs) == 0 {
		return held, nil
	}
	n.listings++
	for _, a := range addrs {
		if n.held[a] || n.addresses[a] != "" {
			held[a] = true
		}
	}
	return held, nil
}

func (n *fakeNetif) Forwarding(ifname string, ipv6 bool) (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ifindex == 0 || ifname != n.ifname() {
		return false, fmt.Errorf("reading /proc/sys/net/ipv4/conf/%s/forwarding: %w", ifname, fs.ErrNotExist)
	}
	return n.forwarding[ipv6], nil
}

// kernelEntries returns the addresses Neighbors was asked about and
// ForgetNeighbors has not removed since: the entries dlbd left in the
// kernel.
func (n *fakeNetif) kernelEntries() []netip.Addr {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := slices.Collect(maps.Keys(n.entries))
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func (n *fakeNetif) Neighbors(addrs []netip.Addr) (map[netip.Addr]lb.Neighbor, map[netip.Addr]error) {
	out, errs := n.Routes(addrs)
	n.mu.Lock()
	defer n.mu.Unlock()
	for a, nb := range out {
		n.entries[a] = true
		nb.MAC = n.macs[a]
		out[a] = nb
	}
	return out, errs
}

func (n *fakeNetif) Routes(addrs []netip.Addr) (map[netip.Addr]lb.Neighbor, map[netip.Addr]error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[netip.Addr]lb.Neighbor{}
	errs := map[netip.Addr]error{}
	for _, a := range addrs {
		switch {
		case n.offLink[a]:
			errs[a] = fmt.Errorf("%s is not on a directly connected network", a)
		case n.ifindex == 0 || n.noRoutes:
			errs[a] = fmt.Errorf("no route to %s", a)
		default:
			out[a] = lb.Neighbor{Ifindex: n.ifindex, IfMAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xaa}, Src: n.src}
		}
	}
	return out, errs
}

func (n *fakeNetif) setMAC(a netip.Addr, mac net.HardwareAddr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.macs[a] = mac
}

func (n *fakeNetif) DeprecateAddresses(ifname string, addrs []netip.Addr) ([]netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(addrs) > 0 {
		n.listings++
	}
	var changed []netip.Addr
	for _, a := range addrs {
		if n.addresses[a] == ifname && n.preferred[a] {
			delete(n.preferred, a)
			changed = append(changed, a)
		}
	}
	return changed, nil
}

func (n *fakeNetif) AddAddresses(ifname string, addrs []netip.Addr) (map[netip.Addr]bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	on := map[netip.Addr]bool{}
	if len(addrs) == 0 {
		return on, nil
	}
	if (n.ifindex == 0 || ifname != n.ifname()) && (n.second == "" || ifname != n.second) {
		return on, fmt.Errorf("looking up interface %q: Link not found", ifname)
	}
	n.listings++
	var errs []error
	for _, a := range addrs {
		if n.addresses[a] == ifname {
			on[a] = false
			continue
		}
		if n.refuse[a] {
			errs = append(errs, fmt.Errorf("adding %s to %s: refused by the test", a, ifname))
			continue
		}
		n.addresses[a] = ifname
		on[a] = true
		if n.afterAdd != nil {
			n.afterAdd(a)
		}
	}
	return on, errors.Join(errs...)
}

func (n *fakeNetif) Announce(ifname string, addrs []netip.Addr) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.announced = append(n.announced, addrs...)
	return nil
}

func (n *fakeNetif) DelAddress(ifname string, a netip.Addr) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if (n.ifindex == 0 || ifname != n.ifname()) && (n.second == "" || ifname != n.second) {
		return nil // gone, with its addresses
	}
	if n.addresses[a] == ifname {
		delete(n.addresses, a)
	}
	return nil
}

// fastAnnouncements makes announceAfter's delays after (short ones) for
// the test.
func fastAnnouncements(t *testing.T, after ...time.Duration) {
	saved := announceAfter
	t.Cleanup(func() { announceAfter = saved })
	announceAfter = after
}

// harness is an engine on fakes, running until the test ends.
type harness struct {
	t     *testing.T
	e     *Engine
	dp    *fakeDatapath
	nif   *fakeNetif
	dir   string
	opens int
	stop  func()
	// extra adjusts the engine's options before each start.
	extra func(*Options)
}

func newHarness(t *testing.T, dir string) *harness {
	t.Helper()
	return newHarnessWith(t, dir, nil)
}

// newHarnessWith is newHarness with extra adjusting the engine's options;
// servers 198.18.0.21-29 resolve.
func newHarnessWith(t *testing.T, dir string, extra func(*Options)) *harness {
	t.Helper()
	h := &harness{t: t, dp: &fakeDatapath{}, nif: newFakeNetif(), dir: dir, extra: extra}
	for i := 21; i <= 29; i++ {
		h.nif.macs[netip.AddrFrom4([4]byte{198, 18, 0, byte(i)})] = net.HardwareAddr{2, 0, 0, 0, 0, byte(i)}
	}
	h.start()
	return h
}

func (h *harness) start() {
	h.t.Helper()
	var err error
	opts := Options{
		StateDir:     h.dir,
		OpenDatapath: func() (Datapath, error) { h.opens++; return h.dp, nil },
		Netif:        h.nif,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		MaxServices:  4096, MaxBackends: 16384,
		TickInterval: 20 * time.Millisecond, SweepInterval: time.Hour,
		ResolveWait: 50 * time.Millisecond,
	}
	if h.extra != nil {
		h.extra(&opts)
	}
	h.e, err = New(opts)
	if err != nil {
		h.t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.e.Run(ctx); close(done) }()
	h.stop = func() { cancel(); <-done }
	h.t.Cleanup(h.stop)
}

func (h *harness) restart() {
	h.t.Helper()
	h.stop()
	h.start()
}

func (h *harness) apply(ops ...config.Op) error {
	h.t.Helper()
	_, err := h.e.Apply(context.Background(), ops)
	return err
}

func (h *harness) mustApply(ops ...config.Op) {
	h.t.Helper()
	if err := h.apply(ops...); err != nil {
		h.t.Fatalf("Apply: %v", err)
	}
}

// status takes a snapshot.
func (h *harness) status(q Query) *Status {
	h.t.Helper()
	st, err := h.e.Status(context.Background(), q)
	if err != nil {
		h.t.Fatalf("Status(%+v): %v", q, err)
	}
	return st
}

// executorWarnings returns the executor report's warnings that contain
// substr.
func (h *harness) executorWarnings(substr string) []string {
	h.t.Helper()
	var out []string
	for _, w := range h.status(Query{Warnings: true}).Executor.Warnings {
		if strings.Contains(w, substr) {
			out = append(out, w)
		}
	}
	return out
}

func (h *harness) config() lb.Config {
	h.t.Helper()
	var c lb.Config
	if err := h.e.do(context.Background(), func() { c = h.e.ed.Config().Clone() }); err != nil {
		h.t.Fatal(err)
	}
	return c
}

// op builds an operation; params are keyword, value pairs.
func op(object, action, target string, params ...string) config.Op {
	o := config.Op{Object: config.Object(object), Action: config.Action(action), Target: target}
	for i := 0; i+1 < len(params); i += 2 {
		o.Params = append(o.Params, config.P(params[i], params[i+1]))
	}
	return o
}

// withP adds parameters to an operation.
func withP(o config.Op, ps ...config.Param) config.Op {
	o.Params = append(o.Params, ps...)
	return o
}
