//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/dlbproject/dlb/pkg/lb"
)

// reasonNames names every stat_reason, in order. A test checks that it
// covers the enum.
var reasonNames = [...]string{
	dispatcherStatReasonSTAT_PASS_NON_IP:        "pass_non_ip",
	dispatcherStatReasonSTAT_PASS_MALFORMED:     "pass_malformed",
	dispatcherStatReasonSTAT_PASS_NFA:           "pass_nfa",
	dispatcherStatReasonSTAT_PASS_NOT_VIP:       "pass_not_vip",
	dispatcherStatReasonSTAT_PASS_VIP_OTHER:     "pass_vip_other",
	dispatcherStatReasonSTAT_PASS_RETURN_OTHER:  "pass_return_other",
	dispatcherStatReasonSTAT_PASS_ICMP_NO_FLOW:  "pass_icmp_no_flow",
	dispatcherStatReasonSTAT_PASS_NO_NEIGH:      "pass_no_neigh",
	dispatcherStatReasonSTAT_DROP_FRAGMENT:      "drop_fragment",
	dispatcherStatReasonSTAT_DROP_IP_OPTIONS:    "drop_ip_options",
	dispatcherStatReasonSTAT_DROP_IPV6EXT:       "drop_ipv6_ext",
	dispatcherStatReasonSTAT_DROP_NO_BACKEND:    "drop_no_backend",
	dispatcherStatReasonSTAT_DROP_NO_TX_PORT:    "drop_no_tx_port",
	dispatcherStatReasonSTAT_DROP_NAT_EXHAUSTED: "drop_nat_exhausted",
	dispatcherStatReasonSTAT_DROP_TABLE_FULL:    "drop_table_full",
	dispatcherStatReasonSTAT_DROP_NAT_NO_FLOW:   "drop_nat_no_flow",
	dispatcherStatReasonSTAT_DROP_NO_ROUTE:      "drop_no_route",
	dispatcherStatReasonSTAT_FWD_TX:             "fwd_tx",
	dispatcherStatReasonSTAT_FWD_REDIRECT:       "fwd_redirect",
}

// eventNames names every dlb_event (lb.DataplaneStats.Events keys). A test
// checks that it covers the enum.
var eventNames = [...]string{
	dispatcherDlbEventEV_CONN_INSERT_FAILED:  "conn_insert_failed",
	dispatcherDlbEventEV_AFFINITY_HIT:        "affinity_hit",
	dispatcherDlbEventEV_AFFINITY_WRITTEN:    "affinity_written",
	dispatcherDlbEventEV_HALFOPEN_CREATED:    "halfopen_created",
	dispatcherDlbEventEV_HALFOPEN_RETRANSMIT: "halfopen_retransmit",
	dispatcherDlbEventEV_HALFOPEN_PROMOTED:   "halfopen_promoted",
	dispatcherDlbEventEV_HALFOPEN_LOST:       "halfopen_lost",
	dispatcherDlbEventEV_HALFOPEN_EVICTED:    "halfopen_evicted",
	dispatcherDlbEventEV_NAT_TABLE_FULL:      "nat_table_full",
	dispatcherDlbEventEV_NAT_PORT_COLLISION:  "nat_port_collision",
	dispatcherDlbEventEV_NAT_FLOW_RELEASED:   "nat_flow_released",
	dispatcherDlbEventEV_FIB_LOOKUP:          "fib_lookup",
	dispatcherDlbEventEV_ICMP_TO_BACKEND:     "icmp_to_backend",
	dispatcherDlbEventEV_ICMP_TO_CLIENT:      "icmp_to_client",
}

// Reasons reads the executor's per-reason counters alone (Stats reads
// every service's and backend's too).
func (d *Datapath) Reasons() ([]lb.ReasonCount, error) {
	var out []lb.ReasonCount
	for r, name := range reasonNames {
		var per []dispatcherReasonCounters
		if err := d.objs.ReasonStats.Lookup(uint32(r), &per); err != nil {
			return out, fmt.Errorf("reading reason counters: %w", err)
		}
		rc := lb.ReasonCount{Reason: name}
		for _, c := range per {
			rc.Packets += c.Packets
			rc.Bytes += c.Bytes
		}
		out = append(out, rc)
	}
	return out, nil
}

// Stats reads the executor's counters: per reason, per event, and per
// service and backend that Apply wrote.
func (d *Datapath) Stats() (lb.DataplaneStats, error) {
	st := lb.DataplaneStats{
		Services: map[uint32]lb.Counters{},
		Events:   map[string]uint64{},
	}
	var err error
	if st.Reasons, err = d.Reasons(); err != nil {
		return st, err
	}
	for e, name := range eventNames {
		var per []uint64
		if err := d.objs.Events.Lookup(uint32(e), &per); err != nil {
			return st, fmt.Errorf("reading event counters: %w", err)
		}
		var n uint64
		for _, c := range per {
			n += c
		}
		st.Events[name] = n
	}
	services := map[uint32]bool{}
	for _, m := range d.applied.vips {
		if m.Flags&uint32(dispatcherVipFlagsVIP_F_MARKER|dispatcherVipFlagsVIP_F_RETURN) == 0 {
			services[m.Service] = true
		}
	}
	if err := readCounters(d.objs.ServiceStats, services, func(id uint32, c lb.Counters) { st.Services[id] = c }); err != nil {
		return st, fmt.Errorf("reading service counters: %w", err)
	}
	backends, err := d.backendCounters()
	if err != nil {
		return st, fmt.Errorf("reading backend counters: %w", err)
	}
	st.Backends = backends
	return st, nil
}

// backendCounters reads the counters of every backend id up to the
// largest in use from the memory map of backend_stats (one row per CPU),
// summed over the CPUs, with the connections the sweeper expired
// (backend_swept, dlbd's own: the copy kept with the applied state)
// counted as finished. Ids not in use read zero.
func (d *Datapath) backendCounters() ([]lb.Counters, error) {
	a := &d.applied
	if len(a.backends) == 0 {
		return nil, nil
	}
	n := int(a.present.top()) + 1
	out := make([]lb.Counters, n)
	mem, err := d.objs.BackendStats.Memory()
	if err != nil {
		return nil, fmt.Errorf("mapping backend_stats: %w", err)
	}
	stride := int64(d.objs.Backends.MaxEntries())
	rows := int64(d.objs.BackendStats.MaxEntries()) / stride
	d.statsMu.Lock()
	defer d.statsMu.Unlock()
	if cap(d.statsBuf) < n {
		d.statsBuf = make([]dispatcherCounters, n)
	}
	row := d.statsBuf[:n]
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&row[0])), n*int(unsafe.Sizeof(row[0])))
	for cpu := int64(0); cpu < rows; cpu++ {
		if _, err := mem.ReadAt(buf, cpu*stride*int64(unsafe.Sizeof(row[0]))); err != nil {
			return nil, fmt.Errorf("reading the counters of CPU %d: %w", cpu, err)
		}
		for id := range row {
			c := &row[id]
			o := &out[id]
			o.Packets += c.Packets
			o.Bytes += c.Bytes
			o.NewConns += c.NewConns
			o.FinConns += c.FinConns
		}
	}
	for id := range out {
		if !a.present.has(uint32(id)) {
			out[id] = lb.Counters{}
			continue
		}
		out[id].FinConns += a.swept[uint32(id)]
	}
	return out, nil
}

// bitset is a set of ids.
type bitset []uint64

func (b *bitset) set(id uint32, on bool) {
	w := int(id / 64)
	if w >= len(*b) {
		if !on {
			return
		}
		*b = append(*b, make([]uint64, w+1-len(*b))...)
	}
	if on {
		(*b)[w] |= 1 << (id % 64)
	} else {
		(*b)[w] &^= 1 << (id % 64)
	}
}

func (b bitset) has(id uint32) bool {
	w := int(id / 64)
	return w < len(b) && b[w]&(1<<(id%64)) != 0
}

// top is the largest id in the set (0 when empty).
func (b bitset) top() uint32 {
	for w := len(b) - 1; w >= 0; w-- {
		if b[w] != 0 {
			return uint32(w*64 + 63 - bits.LeadingZeros64(b[w]))
		}
	}
	return 0
}

// readCounters calls f with the counters of each key of ids in the
// per-CPU array m, summed over the CPUs.
func readCounters[K any](m *ebpf.Map, ids map[uint32]K, f func(uint32, lb.Counters)) error {
	return readIDs(m, ids, func(id uint32, per []dispatcherCounters) {
		var c lb.Counters
		for _, p := range per {
			c.Packets += p.Packets
			c.Bytes += p.Bytes
			c.NewConns += p.NewConns
			c.FinConns += p.FinConns
		}
		f(id, c)
	})
}

// readIDs calls f with the value of each key of ids in the array m: the
// CPUs' values of a per-CPU array, or the one value of another. Many ids,
// densely allocated as they are, are read a batch at a time up to the
// largest (a report on 4,000 services takes one system call, not 4,000);
// a few, one lookup each. (Backend counters are read from a memory map
// instead: backendCounters.)
func readIDs[V, K any](m *ebpf.Map, ids map[uint32]K, f func(uint32, []V)) error {
	cpus := 1
	if m.Type() == ebpf.PerCPUArray {
		n, err := ebpf.PossibleCPU()
		if err != nil {
			return err
		}
		cpus = n
	}
	var top uint32
	for id := range ids {
		top = max(top, id)
	}
	if len(ids) < 64 || top/uint32(len(ids)) > 4 {
		for id := range ids {
			vals := make([]V, 1)
			var err error
			if m.Type() == ebpf.PerCPUArray {
				err = m.Lookup(id, &vals)
			} else {
				err = m.Lookup(id, &vals[0])
			}
			if err != nil {
				return fmt.Errorf("reading entry %d: %w", id, err)
			}
			f(id, vals)
		}
		return nil
	}
	const chunk = 4096
	keys := make([]uint32, chunk)
	vals := make([]V, chunk*cpus)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
		for i := range n {
			if _, ok := ids[keys[i]]; ok {
				f(keys[i], vals[i*cpus:(i+1)*cpus])
			}
		}
		if err != nil || n == 0 || keys[n-1] >= top {
			return nil
		}
	}
}

// monotonicNow returns CLOCK_MONOTONIC in nanoseconds, the clock of
// bpf_ktime_get_coarse_ns.
func monotonicNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// since returns how long before now (ns) the time stamp then was, and 0
// when then is not before now: a stamp a packet wrote after the sweep read
// the clock, or one a CPU wrote from a clock cache a tick ahead. Every age
// the sweeper computes goes through it, so that none can wrap, however
// small the clock is (a dispatcher that just booted).
func since(now, then uint64) uint64 {
	if now > then {
		return now - then
	}
	return 0
}

// halfOpenLive reports whether the owner word of a NAT half-open slot is a
// live reservation at now (ns), as halfopen_live in bpf/include/nat.h: its
// stamp (seconds since boot plus one) is at most DLB_HALF_OPEN_SECONDS old.
func halfOpenLive(owner, now uint64) bool {
	const window = uint64(dispatcherDlbConstsDLB_HALF_OPEN_SECONDS)
	stamp, nowS := owner>>32, now/1e9+1
	return owner != 0 && (stamp >= nowS || nowS-stamp <= window)
}

const sweepBatch = 4096

// batchRead reads a whole map with batch lookups.
func batchRead[K comparable, V any](m *ebpf.Map, each func(K, V)) error {
	keys := make([]K, sweepBatch)
	vals := make([]V, sweepBatch)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < n; i++ {
			each(keys[i], vals[i])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// svcInfo is what the sweeper needs of a service.
type svcInfo struct {
	stale, fin uint64 // ns
	sticky     uint64 // ns; 0: no affinity records
	meta       dispatcherVipMeta
}

func (d *Datapath) services() map[uint32]svcInfo {
	svc := map[uint32]svcInfo{}
	for _, m := range d.applied.vips {
		if m.Flags&uint32(dispatcherVipFlagsVIP_F_MARKER|dispatcherVipFlagsVIP_F_RETURN) != 0 {
			continue
		}
		si := svcInfo{stale: uint64(m.StaleTimeout) * 1e9, fin: uint64(m.FinTimeout) * 1e9, meta: m}
		if m.StickyTime != 0 && dispatcherDlbSelection(m.Selection) != dispatcherDlbSelectionDLB_SELECT_CONNECTION {
			si.sticky = uint64(m.StickyTime) * 1e9
		}
		svc[m.Service] = si
	}
	return svc
}

// Sweep walks the executor's tables once. It removes connection entries
// (MAC and NAT) that idled past their port's staletimeout (or fintimeout,
// once closing), entries of removed services or backends, NAT half-open
// entries older than 30 seconds, and expired affinity records (refreshing
// those of clients that are still connected); it counts established
// connections per backend, half-open connections per service, affinity
// records per service and backend, and NAT port use per return address.
// An established connection that expires counts as finished.
func (d *Datapath) Sweep() (lb.SweepResult, error) {
	return d.sweep(monotonicNow())
}

// sweeper is one sweep's working state.
type sweeper struct {
	d     *Datapath
	now   uint64
	svc   map[uint32]svcInfo
	res   lb.SweepResult
	swept map[uint32]uint64
	// seen is the latest activity of established connections per affinity
	// key, for refreshing records.
	seen map[dispatcherAffinityKey]uint64
	// orphans are the NAT halves found orphaned, with the time of the
	// first sweep that found each (Datapath.natOrphans after the sweep).
	orphans map[natHalf]uint64
}

func (d *Datapath) sweep(now uint64) (lb.SweepResult, error) {
	s := &sweeper{
		d:   d,
		now: now,
		svc: d.services(),
		res: lb.SweepResult{
			Active:           map[uint32]uint64{},
			HalfOpen:         map[uint32]uint64{},
			AffinityServices: map[uint32]uint64{},
			AffinityBackends: map[uint32]uint64{},
			ReturnPools:      map[netip.Addr]lb.DataplanePoolUse{},
			NATHops:          map[lb.NATHop]int{},
		},
		swept:   map[uint32]uint64{},
		seen:    map[dispatcherAffinityKey]uint64{},
		orphans: map[natHalf]uint64{},
	}
	for _, step := range []func() error{s.conns, s.nat, s.halfOpen, s.handshakes, s.affinity} {
		if err := step(); err != nil {
			return s.res, err
		}
	}
	for id, n := range s.swept {
		if n == 0 {
			continue
		}
		total := d.applied.swept[id] + n
		if err := d.objs.BackendSwept.Update(id, total, ebpf.UpdateAny); err != nil {
			return s.res, fmt.Errorf("writing swept counter of backend %d: %w", id, err)
		}
		d.applied.swept[id] = total
	}
	return s.res, nil
}

// verdictOf decides an entry's fate: doomed (and whether that counts as an
// established connection expiring), or active.
func (s *sweeper) verdictOf(service, backend uint32, lastSeen uint64, established bool) (doomed, counted bool) {
	to, svcOK := s.svc[service]
	b, backendOK := s.d.applied.backends[backend]
	limit := to.stale
	if !established {
		limit = to.fin
	}
	idle := since(s.now, lastSeen)
	switch {
	case !svcOK || !backendOK || b.Service != service:
		return true, false
	case idle > limit:
		return true, established
	}
	return false, false
}

// noteActive records an established connection for the affinity refresh.
func (s *sweeper) noteActive(service uint32, client [16]uint8, family uint8, lastSeen uint64) {
	si := s.svc[service]
	if si.sticky == 0 {
		return
	}
	ak := affinityKey(addrFrom(client, family), si.meta.AffinityGroup, si.meta.StickyMask4, si.meta.StickyMask6)
	if lastSeen > s.seen[ak] {
		s.seen[ak] = lastSeen
	}
}

// conns sweeps the MAC connection table.
func (s *sweeper) conns() error {
	type doomedEntry struct {
		key     dispatcherFlowKey
		seen    uint64
		backend uint32
		counted bool // counted as swept (it was established)
	}
	var doomed []doomedEntry
	err := s.d.eachConn(func(e dispatcherConnEntry) {
		k, f := e.Key, e.Flow
		s.res.Entries++
		established := dispatcherFlowState(f.State) == dispatcherFlowStateFLOW_ESTABLISHED
		if gone, counted := s.verdictOf(f.Service, f.Backend, f.LastSeen, established); gone {
			doomed = append(doomed, doomedEntry{k, f.LastSeen, f.Backend, counted})
			if counted {
				s.swept[f.Backend]++
			}
			return
		}
		if established {
			s.res.Active[f.Backend]++
			s.noteActive(f.Service, k.Src.Addr, k.Family, f.LastSeen)
		}
	})
	if err != nil {
		return err
	}
	// Delete only entries no packet refreshed since they were read.
	for _, e := range doomed {
		removed, err := s.d.deleteConn(e.key, e.seen)
		if err != nil {
			return fmt.Errorf("removing expired connection: %w", err)
		}
		if !removed {
			if e.counted {
				s.swept[e.backend]-- // gone already, or a packet revived it
			}
			f, ok, err := s.d.getConn(e.key)
			if err != nil {
				return err
			}
			if ok && dispatcherFlowState(f.State) == dispatcherFlowStateFLOW_ESTABLISHED {
				s.res.Active[f.Backend]++
			}
			continue
		}
		s.res.Expired++
		s.res.Entries--
	}
	return nil
}

// revOwner returns the client flow a nat_ports entry translates for.
func revOwner(k dispatcherNatKey, r dispatcherNatRev) dispatcherFlowKey {
	return dispatcherFlowKey{Src: r.Client, Dst: r.Vip, Sport: r.ClientPort, Dport: r.VipPort, Proto: k.Proto, Family: k.Family}
}

// pool returns the pool use entry of a return address.
func (s *sweeper) pool(addr [16]uint8, family uint8) (netip.Addr, lb.DataplanePoolUse) {
	a := addrFrom(addr, family)
	u, ok := s.res.ReturnPools[a]
	if !ok {
		for _, b := range s.d.applied.backends {
			if b.NatAddr.Addr == addr && b.Family == family && b.NatPortMax >= b.NatPortMin && b.NatPortMin != 0 {
				u.Size = uint32(b.NatPortMax) - uint32(b.NatPortMin) + 1
				break
			}
		}
	}
	return a, u
}

// nat sweeps the NAT connection tables. A connection is its nat_flows
// entry and the nat_ports entry it names; it is idle when both halves
// are, closing when either saw FIN or RST.
func (s *sweeper) nat() error {
	revs := map[dispatcherNatKey]dispatcherNatRev{}
	if err := s.d.eachNATPort(func(k dispatcherNatKey, r dispatcherNatRev) {
		revs[k] = r
		if r.Flags&hopCached != 0 {
			s.res.NATHops[lb.NATHop{Ifindex: int(r.Hop.Ifindex), MAC: r.Hop.Mac}]++
		}
	}); err != nil {
		return fmt.Errorf("reading nat_ports: %w", err)
	}
	type pair struct {
		fk      dispatcherFlowKey
		rk      dispatcherNatKey
		fseen   uint64
		rseen   uint64
		backend uint32
		counted bool
	}
	var doomed []pair
	owned := map[dispatcherNatKey]bool{}
	var lookupErr error
	err := s.d.eachNATFlow(func(fk dispatcherFlowKey, f dispatcherNatFlow) {
		s.res.Entries++
		rk := dispatcherNatKey{Addr: f.NatAddr, Port: f.NatPort, Proto: fk.Proto, Family: fk.Family}
		r, ok := revs[rk]
		if !ok {
			// Created after nat_ports was read, or half gone.
			var err error
			if r, ok, err = s.d.getNATPort(rk); err != nil {
				lookupErr = err
			}
		}
		// No port, or a port that another connection took: on a
		// standby, the port's record (or its new owner's) may still be
		// on its way (see natOrphanGrace).
		orphan := !ok || revOwner(rk, r) != fk
		if orphan && !s.orphanDue(natHalf{flow: fk, port: rk}) {
			return
		}
		if orphan {
			doomed = append(doomed, pair{fk: fk, fseen: f.LastSeen, backend: f.Backend})
			return
		}
		owned[rk] = true
		last := max(f.LastSeen, r.LastSeen)
		established := dispatcherFlowState(f.State) == dispatcherFlowStateFLOW_ESTABLISHED &&
			dispatcherFlowState(r.State) == dispatcherFlowStateFLOW_ESTABLISHED
		if gone, counted := s.verdictOf(f.Service, f.Backend, last, established); gone {
			doomed = append(doomed, pair{fk, rk, f.LastSeen, r.LastSeen, f.Backend, counted})
			if counted {
				s.swept[f.Backend]++
			}
			return
		}
		a, u := s.pool(rk.Addr.Addr, rk.Family)
		u.Established++
		s.res.ReturnPools[a] = u
		if established {
			s.res.Active[f.Backend]++
			s.noteActive(f.Service, fk.Src.Addr, fk.Family, last)
		}
	})
	if err == nil {
		err = lookupErr
	}
	if err != nil {
		return fmt.Errorf("reading nat_flows: %w", err)
	}

	// Delete the halves no packet refreshed since they were read: the
	// client side first (no new packet can use the port then), then the
	// port itself.
	for _, p := range doomed {
		if p.rk != (dispatcherNatKey{}) {
			r, ok, err := s.d.getNATPort(p.rk)
			if err != nil {
				return err
			}
			if ok && r.LastSeen != p.rseen {
				if p.counted {
					s.swept[p.backend]--
				}
				continue
			}
		}
		removed, err := s.d.deleteNATFlow(p.fk, p.fseen)
		if err != nil {
			return fmt.Errorf("removing expired NAT connection: %w", err)
		}
		if !removed {
			if p.counted {
				s.swept[p.backend]--
			}
			continue
		}
		if p.rk != (dispatcherNatKey{}) {
			if err := s.deleteRev(p.rk, p.fk); err != nil {
				return err
			}
		}
		s.res.Expired++
		s.res.Entries--
	}

	// Ports whose client side is gone (a table insert that failed half
	// way, or a client side removed above): free them unless a client
	// side appeared since or they have not been orphans for the grace
	// yet (the ports of connections removed above are owned: freed with
	// them).
	for rk, r := range revs {
		if owned[rk] {
			continue
		}
		fk := revOwner(rk, r)
		if _, ok, err := s.d.getNATFlow(fk); err != nil {
			return err
		} else if ok {
			continue
		}
		if !s.orphanDue(natHalf{flow: fk, port: rk, isPort: true}) {
			continue
		}
		if err := s.deleteRev(rk, fk); err != nil {
			return err
		}
	}
	s.d.natOrphans = s.orphans
	return nil
}

// natOrphanGrace is how long a NAT connection's half whose other half is
// missing is kept before the sweeper frees it. Replication can deliver a
// connection's two halves to the standby in successive batches, 100 ms
// apart (the active's scan reads nat_flows and then nat_ports while the
// data path inserts the port and then the flow): freeing the first half
// before the second arrives would lose the connection on takeover, as the
// second half, freed in turn, is not sent again.
const natOrphanGrace = uint64(3 * time.Second)

// natHalf names an orphaned half of a NAT connection: its client side
// (flow, naming port) or its port (isPort, owned by flow).
type natHalf struct {
	flow   dispatcherFlowKey
	port   dispatcherNatKey
	isPort bool
}

// orphanDue records that h is an orphan at this sweep and reports
// whether it has been one for natOrphanGrace, since the first sweep that
// found it.
func (s *sweeper) orphanDue(h natHalf) bool {
	first, ok := s.d.natOrphans[h]
	if !ok {
		first = s.now
	}
	s.orphans[h] = first
	return since(s.now, first) >= natOrphanGrace
}

// deleteRev deletes a nat_ports entry if it still belongs to fk.
func (s *sweeper) deleteRev(rk dispatcherNatKey, fk dispatcherFlowKey) error {
	r, ok, err := s.d.getNATPort(rk)
	if err != nil {
		return err
	}
	if !ok || revOwner(rk, r) != fk {
		return nil
	}
	if _, err := s.d.deleteNATPort(rk, r.LastSeen); err != nil {
		return fmt.Errorf("freeing NAT port: %w", err)
	}
	return nil
}

// halfOpenNs is how long a SYN counts as half-open (MAC: in the handshake
// cache; NAT: its reservation).
const halfOpenNs = uint64(dispatcherDlbConstsDLB_HALF_OPEN_SECONDS) * 1e9

// handshakeSeenShift is the unit of struct handshake's seen: 2^this ns
// (handshake_seen in bpf/include/schedule.h).
const handshakeSeenShift = uint32(dispatcherDlbConstsDLB_HANDSHAKE_SEEN_SHIFT)

// handshakeAge returns how long ago, in ns, a handshake-cache entry's seen
// was at now (both in its units, modulo 2^32: so is their difference). An
// entry stamped after the sweep read its clock (up to 2^31 units, about
// 26 days, ahead) is 0 old, as since counts it.
func handshakeAge(now, seen uint32) uint64 {
	if d := int32(now - seen); d > 0 {
		return uint64(d) << handshakeSeenShift
	}
	return 0
}

// halfOpen counts the live reservations of the NAT half-open table (its
// slots expire by themselves: nothing to remove).
func (s *sweeper) halfOpen() error {
	err := batchRead(s.d.objs.NatHalfopen, func(_ uint32, h dispatcherHalfopen) {
		if uint32(h.Owner) == 0 || !halfOpenLive(h.Owner, s.now) {
			return
		}
		s.res.HalfOpen[h.Service]++
		a, u := s.pool(h.Key.Addr.Addr, h.Key.Family)
		u.HalfOpen++
		s.res.ReturnPools[a] = u
	})
	if err != nil {
		return fmt.Errorf("reading nat_halfopen: %w", err)
	}
	return nil
}

// handshakes counts the MAC half-open connections: handshake-cache slots
// with a recent SYN whose ACK has not come.
func (s *sweeper) handshakes() error {
	now := uint32(s.now >> handshakeSeenShift)
	err := batchRead(s.d.objs.Handshakes, func(_ uint32, h dispatcherHandshake) {
		if h.Seen == 0 || handshakeAge(now, h.Seen) > halfOpenNs {
			return
		}
		s.res.HalfOpen[h.Service]++
	})
	if err != nil {
		return fmt.Errorf("reading handshakes: %w", err)
	}
	return nil
}

// affinity refreshes the records of connected clients, removes expired
// records and those of removed servers, and counts the rest.
func (s *sweeper) affinity() error {
	type rec struct {
		k dispatcherAffinityKey
		r dispatcherAffinityRecord
	}
	var refresh []rec
	var doomed []dispatcherAffinityKey
	err := batchRead(s.d.objs.Affinity, func(k dispatcherAffinityKey, r dispatcherAffinityRecord) {
		si, ok := s.svc[r.Service]
		b, bok := s.d.applied.backends[r.Backend]
		if !ok || si.sticky == 0 || !bok || b.Service != r.Service || b.Addr != r.Server {
			doomed = append(doomed, k)
			return
		}
		if last := s.seen[k]; last > r.LastSeen {
			r.LastSeen = last
			refresh = append(refresh, rec{k, r})
		}
		if since(s.now, r.LastSeen) > si.sticky {
			doomed = append(doomed, k)
			return
		}
		s.res.AffinityServices[r.Service]++
		s.res.AffinityBackends[r.Backend]++
	})
	if err != nil {
		return fmt.Errorf("reading affinity records: %w", err)
	}
	for _, x := range refresh {
		var cur dispatcherAffinityRecord
		if err := s.d.objs.Affinity.Lookup(&x.k, &cur); err != nil || cur.Backend != x.r.Backend || cur.LastSeen >= x.r.LastSeen {
			continue
		}
		cur.LastSeen = x.r.LastSeen
		if err := s.d.objs.Affinity.Update(&x.k, &cur, ebpf.UpdateExist); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("refreshing affinity record: %w", err)
		}
	}
	for _, k := range doomed {
		if err := s.d.objs.Affinity.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("removing affinity record: %w", err)
		}
		s.res.AffinityExpired++
	}
	return nil
}

// DropAffinity removes every affinity record that sends clients to the
// backend with the given id (IBM's "manager quiesce ... now", or a server
// going down): its clients' next connections are scheduled afresh. It
// returns how many records it removed.
func (d *Datapath) DropAffinity(backend uint32) (int, error) {
	return d.dropAffinity(func(r dispatcherAffinityRecord) bool { return r.Backend == backend })
}

// dropAffinity removes the records for which drop returns true.
func (d *Datapath) dropAffinity(drop func(dispatcherAffinityRecord) bool) (int, error) {
	var doomed []dispatcherAffinityKey
	err := batchRead(d.objs.Affinity, func(k dispatcherAffinityKey, r dispatcherAffinityRecord) {
		if drop(r) {
			doomed = append(doomed, k)
		}
	})
	if err != nil {
		return 0, fmt.Errorf("reading affinity records: %w", err)
	}
	n := 0
	for _, k := range doomed {
		err := d.objs.Affinity.Delete(&k)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("removing affinity record: %w", err)
		}
		n++
	}
	return n, nil
}
