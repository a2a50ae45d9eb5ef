//go:build linux

package datapath

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/lb"
)

// reasonNames names every stat_reason, in order. A test checks that it
// covers the enum.
var reasonNames = [...]string{
	dispatcherStatReasonSTAT_PASS_NON_IP:     "pass_non_ip",
	dispatcherStatReasonSTAT_PASS_IPV6:       "pass_ipv6",
	dispatcherStatReasonSTAT_PASS_MALFORMED:  "pass_malformed",
	dispatcherStatReasonSTAT_PASS_NFA:        "pass_nfa",
	dispatcherStatReasonSTAT_PASS_NOT_VIP:    "pass_not_vip",
	dispatcherStatReasonSTAT_PASS_VIP_OTHER:  "pass_vip_other",
	dispatcherStatReasonSTAT_DROP_FRAGMENT:   "drop_fragment",
	dispatcherStatReasonSTAT_DROP_IP_OPTIONS: "drop_ip_options",
	dispatcherStatReasonSTAT_DROP_NO_BACKEND: "drop_no_backend",
	dispatcherStatReasonSTAT_DROP_NO_TX_PORT: "drop_no_tx_port",
	dispatcherStatReasonSTAT_FWD_TX:          "fwd_tx",
	dispatcherStatReasonSTAT_FWD_REDIRECT:    "fwd_redirect",
}

// Stats reads the executor's counters: per reason, and per service and
// backend that Apply wrote.
func (d *Datapath) Stats() (lb.DataplaneStats, error) {
	st := lb.DataplaneStats{
		Services: map[uint32]lb.Counters{},
		Backends: map[uint32]lb.Counters{},
	}
	for r, name := range reasonNames {
		var per []dispatcherReasonCounters
		if err := d.objs.ReasonStats.Lookup(uint32(r), &per); err != nil {
			return st, fmt.Errorf("reading reason counters: %w", err)
		}
		rc := lb.ReasonCount{Reason: name}
		for _, c := range per {
			rc.Packets += c.Packets
			rc.Bytes += c.Bytes
		}
		st.Reasons = append(st.Reasons, rc)
	}
	for _, m := range d.applied.vips {
		if m.Flags&uint32(dispatcherVipFlagsVIP_F_MARKER) != 0 {
			continue
		}
		if _, ok := st.Services[m.Service]; ok {
			continue
		}
		c, err := sumCounters(d.objs.ServiceStats, m.Service)
		if err != nil {
			return st, fmt.Errorf("reading counters of service %d: %w", m.Service, err)
		}
		st.Services[m.Service] = c
	}
	for id := range d.applied.backends {
		c, err := sumCounters(d.objs.BackendStats, id)
		if err != nil {
			return st, fmt.Errorf("reading counters of backend %d: %w", id, err)
		}
		var swept uint64
		if err := d.objs.BackendSwept.Lookup(id, &swept); err != nil {
			return st, fmt.Errorf("reading swept counter of backend %d: %w", id, err)
		}
		c.FinConns += swept
		st.Backends[id] = c
	}
	return st, nil
}

func sumCounters(m *ebpf.Map, id uint32) (lb.Counters, error) {
	var per []dispatcherCounters
	var c lb.Counters
	if err := m.Lookup(id, &per); err != nil {
		return c, err
	}
	for _, p := range per {
		c.Packets += p.Packets
		c.Bytes += p.Bytes
		c.NewConns += p.NewConns
		c.FinConns += p.FinConns
	}
	return c, nil
}

// monotonicNow returns CLOCK_MONOTONIC in nanoseconds, the clock of
// bpf_ktime_get_coarse_ns.
func monotonicNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

const sweepBatch = 4096

// Sweep walks the connection table once. It removes entries that idled past
// their port's staletimeout (or fintimeout, once closing), entries of
// removed services or backends, and counts established connections per
// backend. An established connection that expires counts as finished.
func (d *Datapath) Sweep() (lb.SweepResult, error) {
	return d.sweep(monotonicNow())
}

func (d *Datapath) sweep(now uint64) (lb.SweepResult, error) {
	res := lb.SweepResult{Active: map[uint32]uint64{}}
	type timeouts struct{ stale, fin uint64 }
	svc := map[uint32]timeouts{}
	for _, m := range d.applied.vips {
		if m.Flags&uint32(dispatcherVipFlagsVIP_F_MARKER) == 0 {
			svc[m.Service] = timeouts{uint64(m.StaleTimeout) * 1e9, uint64(m.FinTimeout) * 1e9}
		}
	}
	swept := map[uint32]uint64{}
	type doomedEntry struct {
		key     dispatcherFlowKey
		seen    uint64
		backend uint32
		counted bool // counted as swept (it was established)
	}
	var doomed []doomedEntry

	keys := make([]dispatcherFlowKey, sweepBatch)
	vals := make([]dispatcherFlow, sweepBatch)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := d.objs.Conns.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < n; i++ {
			k, f := keys[i], vals[i]
			res.Entries++
			to, svcOK := svc[f.Service]
			b, backendOK := d.applied.backends[f.Backend]
			established := dispatcherFlowState(f.State) == dispatcherFlowStateFLOW_ESTABLISHED
			limit := to.stale
			if !established {
				limit = to.fin
			}
			idle := uint64(0)
			if now > f.LastSeen {
				idle = now - f.LastSeen
			}
			switch {
			case !svcOK || !backendOK || b.Service != f.Service:
				doomed = append(doomed, doomedEntry{k, f.LastSeen, f.Backend, false})
			case idle > limit:
				doomed = append(doomed, doomedEntry{k, f.LastSeen, f.Backend, established})
				if established {
					swept[f.Backend]++
				}
			case established:
				res.Active[f.Backend]++
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return res, fmt.Errorf("reading connection table: %w", err)
		}
	}

	// Delete only entries no packet refreshed since they were read.
	for _, e := range doomed {
		var f dispatcherFlow
		if err := d.objs.Conns.Lookup(&e.key, &f); err != nil || f.LastSeen != e.seen {
			if e.counted {
				swept[e.backend]-- // gone already, or a packet revived it
			}
			if err == nil && dispatcherFlowState(f.State) == dispatcherFlowStateFLOW_ESTABLISHED {
				res.Active[f.Backend]++
			}
			continue
		}
		if err := d.objs.Conns.Delete(&e.key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return res, fmt.Errorf("removing expired connection: %w", err)
		}
		res.Expired++
		res.Entries--
	}
	for id, n := range swept {
		if n == 0 {
			continue
		}
		var total uint64
		if err := d.objs.BackendSwept.Lookup(id, &total); err != nil {
			return res, fmt.Errorf("reading swept counter of backend %d: %w", id, err)
		}
		if err := d.objs.BackendSwept.Update(id, total+n, ebpf.UpdateAny); err != nil {
			return res, fmt.Errorf("writing swept counter of backend %d: %w", id, err)
		}
	}
	return res, nil
}
