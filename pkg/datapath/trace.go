//go:build linux

package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/internal/suggest"
	"github.com/dlbproject/dlb/pkg/lb"
)

// ErrTraceRunning is returned by StartTrace while another trace runs: the
// executor has one trace buffer and one filter.
var ErrTraceRunning = lb.ErrTraceRunning

// errTraceStopped is returned by Trace.Next once the trace was stopped.
var errTraceStopped = errors.New("the trace was stopped")

// Trace is a running packet trace (bpf/include/trace.h): the executor
// hands every packet that matches the filter to a ring buffer, which Next
// reads. Next may be called from another goroutine than StartTrace and
// Stop.
type Trace struct {
	d     *Datapath
	rd    *ringbuf.Reader
	clock int64 // wall clock minus the monotonic clock, ns
	rec   ringbuf.Record

	mu      sync.Mutex
	stopped bool
	stats   lb.TraceStats
}

// verdictNames names the XDP actions a trace record carries.
var verdictNames = map[uint32]string{0: "aborted", 1: "drop", 2: "pass", 3: "tx", 4: "redirect"}

// ReasonNames returns the executor's reason names, in its order.
func ReasonNames() []string { return slices.Clone(reasonNames[:]) }

// traceFilter translates f into the executor's filter and the service ids
// of its cluster, as the datapath has them applied.
func (d *Datapath) traceFilter(f lb.TraceFilter) (dispatcherTraceFilter, []uint32, error) {
	var tf dispatcherTraceFilter
	for _, r := range f.Reasons {
		i := slices.Index(reasonNames[:], r)
		if i < 0 {
			msg := "unknown reason"
			if s := suggest.Closest(r, reasonNames[:]); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			return tf, nil, lb.Errorf("reason", r, "%s; the reasons are %s", msg, strings.Join(reasonNames[:], ", "))
		}
		tf.Reasons |= 1 << i
	}
	var services []uint32
	if f.Cluster.IsValid() {
		tf.Vip.Addr, tf.VipFamily = addrBytes(f.Cluster)
		tf.Port = htons(f.Port)
		for k, m := range d.applied.vips {
			if m.Flags&uint32(dispatcherVipFlagsVIP_F_MARKER|dispatcherVipFlagsVIP_F_RETURN) != 0 {
				continue
			}
			if k.Family != tf.VipFamily || k.Addr.Addr != tf.Vip.Addr || (f.Port != 0 && k.Port != tf.Port) {
				continue
			}
			services = append(services, m.Service)
		}
		slices.Sort(services)
		services = slices.Compact(services)
	} else if f.Port != 0 {
		return tf, nil, lb.Errorf("port", strconv.Itoa(int(f.Port)), "a trace's port needs its cluster")
	}
	if f.Server.IsValid() {
		tf.Server.Addr, tf.ServerFamily = addrBytes(f.Server)
	}
	return tf, services, nil
}

// StartTrace starts a packet trace with filter f. Only one trace runs at a
// time: ErrTraceRunning while another does. A cluster filter covers the
// cluster's ports as they are when the trace starts. Not safe for use
// concurrently with the Datapath's other methods; the trace's Next is.
func (d *Datapath) StartTrace(f lb.TraceFilter) (lb.PacketTrace, error) {
	t, err := d.startTrace(f)
	if err != nil {
		return nil, err
	}
	return t, nil
}

func (d *Datapath) startTrace(f lb.TraceFilter) (*Trace, error) {
	if d.trace != nil {
		return nil, ErrTraceRunning
	}
	tf, services, err := d.traceFilter(f)
	if err != nil {
		return nil, err
	}
	if err := clearMap32(d.objs.TraceServices); err != nil {
		return nil, fmt.Errorf("clearing the trace's services: %w", err)
	}
	for _, s := range services {
		if err := d.objs.TraceServices.Update(s, uint8(1), ebpf.UpdateAny); err != nil {
			return nil, fmt.Errorf("writing the trace's services: %w", err)
		}
	}
	if err := resetTraceStats(d.objs.TraceScratch); err != nil {
		return nil, err
	}
	rd, err := ringbuf.NewReader(d.objs.TraceRing)
	if err != nil {
		return nil, fmt.Errorf("reading the trace buffer: %w", err)
	}
	// Records left from an earlier trace (the buffer holds what a
	// stopped trace's reader did not take).
	rd.SetDeadline(time.Now())
	for {
		if _, err := rd.Read(); err != nil {
			break
		}
	}
	rd.SetDeadline(time.Time{})
	var mono unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		rd.Close()
		return nil, fmt.Errorf("reading the monotonic clock: %w", err)
	}
	t := &Trace{d: d, rd: rd, clock: time.Now().UnixNano() - mono.Nano()}
	if err := d.objs.DlbTraceFilter.Set(tf); err != nil {
		rd.Close()
		return nil, fmt.Errorf("writing the trace filter: %w", err)
	}
	if err := d.objs.DlbTraceOn.Set(uint32(1)); err != nil {
		rd.Close()
		return nil, fmt.Errorf("starting the trace: %w", err)
	}
	d.trace = t
	return t, nil
}

// Tracing reports whether a trace runs (the executor's global switch).
func (d *Datapath) Tracing() (bool, error) {
	var on uint32
	if err := d.objs.DlbTraceOn.Get(&on); err != nil {
		return false, fmt.Errorf("reading the trace switch: %w", err)
	}
	return on != 0, nil
}

// Next waits for the trace's next packet, until deadline (zero: no
// deadline; then os.ErrDeadlineExceeded). It fails once the trace is
// stopped.
func (t *Trace) Next(deadline time.Time) (lb.TracePacket, error) {
	t.rd.SetDeadline(deadline)
	if err := t.rd.ReadInto(&t.rec); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return lb.TracePacket{}, err
		}
		if errors.Is(err, ringbuf.ErrClosed) {
			return lb.TracePacket{}, errTraceStopped
		}
		return lb.TracePacket{}, fmt.Errorf("reading the trace buffer: %w", err)
	}
	var ev dispatcherTraceEvent
	if _, err := binary.Decode(t.rec.RawSample, binary.NativeEndian, &ev); err != nil {
		return lb.TracePacket{}, fmt.Errorf("decoding a trace record: %w", err)
	}
	return t.packet(&ev), nil
}

// packet translates a trace record.
func (t *Trace) packet(ev *dispatcherTraceEvent) lb.TracePacket {
	p := lb.TracePacket{
		Time:      time.Unix(0, int64(ev.Ts)+t.clock),
		Interface: int(ev.Ifindex),
		Verdict:   verdictNames[ev.Action],
		Hit:       ev.Flags&uint8(dispatcherTraceFlagsTRACE_F_HIT) != 0,
		Proto:     ev.Flow.Proto,
		TCPFlags:  ev.TcpFlags,
		Length:    int(ev.PktLen),
		Data:      slices.Clone(ev.Data[:min(int(ev.CapLen), len(ev.Data))]),
	}
	if int(ev.Reason) < len(reasonNames) {
		p.Reason = reasonNames[ev.Reason]
	} else {
		p.Reason = fmt.Sprintf("reason_%d", ev.Reason)
	}
	if p.Verdict == "" {
		p.Verdict = fmt.Sprintf("action_%d", ev.Action)
	}
	if ev.ServerFamily != 0 {
		p.Server = addrFrom(ev.Server.Addr, ev.ServerFamily)
	}
	if ev.Flow.Family != 0 {
		p.Src = netip.AddrPortFrom(addrFrom(ev.Flow.Src.Addr, ev.Flow.Family), htons(ev.Flow.Sport))
		p.Dst = netip.AddrPortFrom(addrFrom(ev.Flow.Dst.Addr, ev.Flow.Family), htons(ev.Flow.Dport))
	}
	return p
}

// Stop ends the trace: the executor stops handing packets over (from the
// next packet on) and Next fails. It returns the trace's counts. Stopping
// a stopped trace returns its counts again.
func (t *Trace) Stop() (lb.TraceStats, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return t.stats, nil
	}
	t.stopped = true
	d := t.d
	err := d.objs.DlbTraceOn.Set(uint32(0))
	if err != nil {
		err = fmt.Errorf("stopping the trace: %w", err)
	}
	st, serr := traceStats(d.objs.TraceScratch)
	t.stats = st
	if cerr := t.rd.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("closing the trace buffer: %w", cerr)
	}
	if d.trace == t {
		d.trace = nil
	}
	return st, errors.Join(err, serr)
}

// traceStats sums the trace counters of every CPU.
func traceStats(m *ebpf.Map) (lb.TraceStats, error) {
	var per []dispatcherTraceScratch
	if err := m.Lookup(uint32(0), &per); err != nil {
		return lb.TraceStats{}, fmt.Errorf("reading the trace counters: %w", err)
	}
	var st lb.TraceStats
	for _, p := range per {
		st.Packets += p.Stats[dispatcherTraceStatTRACE_STAT_SENT]
		st.Lost += p.Stats[dispatcherTraceStatTRACE_STAT_LOST]
	}
	return st, nil
}

// resetTraceStats zeroes the trace counters of every CPU.
func resetTraceStats(m *ebpf.Map) error {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("counting CPUs: %w", err)
	}
	if err := m.Update(uint32(0), make([]dispatcherTraceScratch, n), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("resetting the trace counters: %w", err)
	}
	return nil
}

// clearMap32 removes every entry of a map with uint32 keys.
func clearMap32(m *ebpf.Map) error {
	var keys []uint32
	var k uint32
	it := m.Iterate()
	var v []byte
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return err
	}
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}
