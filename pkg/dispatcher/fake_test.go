package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/dlbproject/dlb/pkg/api"
	"github.com/dlbproject/dlb/pkg/lb"
)

// fakeDatapath records what the engine asks of the executor.
type fakeDatapath struct {
	mu       sync.Mutex
	attached bool
	ifindex  int
	applied  *lb.Dataplane
	applies  int
	failNext error // returned by the next Apply
	removed  bool
	closed   bool
	maglev   uint32         // table size; 251 when 0
	dropped  []uint32       // backends DropAffinity was called for
	swept    lb.SweepResult // what Sweep returns
}

func (f *fakeDatapath) Attach(ifindex int, mode lb.XDPMode) (lb.XDPMode, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.attached && f.ifindex != ifindex {
		return 0, errors.New("attached elsewhere")
	}
	f.attached, f.ifindex = true, ifindex
	if mode == lb.XDPAuto {
		mode = lb.XDPGeneric
	}
	return mode, nil
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
	f.applied = &dp
	f.applies++
	return nil
}

func (f *fakeDatapath) state() *lb.Dataplane {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied
}

func (f *fakeDatapath) Stats() (lb.DataplaneStats, error) {
	return lb.DataplaneStats{Services: map[uint32]lb.Counters{}, Backends: map[uint32]lb.Counters{}}, nil
}
func (f *fakeDatapath) Sweep() (lb.SweepResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.swept, nil
}
func (f *fakeDatapath) MaglevSize() uint32 {
	if f.maglev == 0 {
		return 251
	}
	return f.maglev
}
func (f *fakeDatapath) ConnTableCapacity() uint32 { return 1024 }
func (f *fakeDatapath) NATTableCapacity() uint32  { return 2048 }
func (f *fakeDatapath) HalfOpenTableCapacity() uint32 {
	return 512
}
func (f *fakeDatapath) AffinityTableCapacity() uint32 { return 4096 }
func (f *fakeDatapath) DropAffinity(backend uint32) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropped = append(f.dropped, backend)
	return 1, nil
}
func (f *fakeDatapath) PinDir() string { return "/fake" }
func (f *fakeDatapath) Close() error   { f.closed = true; return nil }
func (f *fakeDatapath) Remove() error  { f.removed = true; f.attached = false; return nil }

// fakeNetif resolves servers from a table and records addresses.
type fakeNetif struct {
	mu        sync.Mutex
	macs      map[netip.Addr]net.HardwareAddr // missing: unresolved
	offLink   map[netip.Addr]bool
	addresses map[netip.Addr]string
}

func newFakeNetif() *fakeNetif {
	return &fakeNetif{macs: map[netip.Addr]net.HardwareAddr{}, offLink: map[netip.Addr]bool{}, addresses: map[netip.Addr]string{}}
}

func (n *fakeNetif) LinkByName(name string) (lb.Link, error) {
	if name != "eth0" {
		return lb.Link{}, fmt.Errorf("looking up interface %q: Link not found", name)
	}
	return lb.Link{Index: 2, Name: name, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xaa}}, nil
}

func (n *fakeNetif) Neighbors(addrs []netip.Addr) (map[netip.Addr]lb.Neighbor, map[netip.Addr]error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[netip.Addr]lb.Neighbor{}
	errs := map[netip.Addr]error{}
	for _, a := range addrs {
		if n.offLink[a] {
			errs[a] = fmt.Errorf("%s is not on a directly connected network", a)
			continue
		}
		out[a] = lb.Neighbor{Ifindex: 2, IfMAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xaa}, MAC: n.macs[a]}
	}
	return out, errs
}

func (n *fakeNetif) setMAC(a netip.Addr, mac net.HardwareAddr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.macs[a] = mac
}

func (n *fakeNetif) AddAddress(ifname string, a netip.Addr) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.addresses[a] = ifname
	return nil
}

func (n *fakeNetif) DelAddress(ifname string, a netip.Addr) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.addresses, a)
	return nil
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

func (h *harness) apply(ops ...api.Op) error {
	h.t.Helper()
	_, err := h.e.Apply(context.Background(), ops)
	return err
}

func (h *harness) mustApply(ops ...api.Op) {
	h.t.Helper()
	if err := h.apply(ops...); err != nil {
		h.t.Fatalf("Apply: %v", err)
	}
}

func (h *harness) config() lb.Config {
	h.t.Helper()
	var c lb.Config
	if err := h.e.do(context.Background(), func() { c = h.e.cfg.Clone() }); err != nil {
		h.t.Fatal(err)
	}
	return c
}

func str(s string) *string { return &s }
func num(n int64) *int64   { return &n }
func yes() *bool           { b := true; return &b }

func op(object, action, target string) api.Op {
	return api.Op{Object: object, Action: action, Target: target}
}
