//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"hash/maphash"
	"net/netip"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/dlbproject/dlb/pkg/lb"
)

// Replication (high availability): ScanConns reads the connection tables
// through their memory maps, slot by slot, and reports the entries that
// are new or changed since the previous scan (it remembers a fingerprint
// and the last use it reported of every slot); PutConns writes another
// executor's entries through the same control programs the sweeper uses.
// Neither touches the data path: a scan is sequential reads of mapped
// memory, without a system call per entry.

// slotMark is what a scan last reported of a table slot.
type slotMark struct {
	fp   uint64 // fingerprint of the entry's key and what it says (0: empty)
	seen uint64 // its last use when reported
}

// scanState is a ConnScan's executor state.
type scanState struct {
	tables   [3][]slotMark
	affinity map[dispatcherAffinityKey]slotMark
	seed     maphash.Seed
}

// fingerprint hashes what an entry says, but its last use.
func fingerprint(seed maphash.Seed, parts ...[]byte) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum64() | 1
}

func bytesOf[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// changed reports whether the entry marked m must be reported (its
// fingerprint fp, its last use seen), and marks it as reported.
func changed(m *slotMark, fp, seen uint64, full bool, refresh uint64) bool {
	report := full || m.fp != fp || (seen > m.seen && seen-m.seen >= refresh)
	if report {
		*m = slotMark{fp: fp, seen: seen}
	}
	return report
}

// ScanConns implements the engine's ConnTables: it calls f for every
// entry of the MAC and NAT connection tables and of the affinity table
// that is new or changed since s's last scan (every entry when full).
func (d *Datapath) ScanConns(s *lb.ConnScan, full bool, refresh time.Duration, f func(lb.ConnEntry)) error {
	return scanConns(d.tables(), d.objs.Affinity, s, full, refresh, f)
}

// scanConns is ScanConns of the connection tables tabs (conns, nat_flows,
// nat_ports) and the affinity map affinity: this executor's, or an older
// one's being replaced (carryOver).
func scanConns(tabs []table, affinity *ebpf.Map, s *lb.ConnScan, full bool, refresh time.Duration, f func(lb.ConnEntry)) error {
	st, _ := s.State.(*scanState)
	if st == nil || len(st.tables[0]) != int(tabs[0].entries.MaxEntries()) {
		st = &scanState{affinity: map[dispatcherAffinityKey]slotMark{}, seed: maphash.MakeSeed()}
		for i, t := range tabs {
			st.tables[i] = make([]slotMark, t.entries.MaxEntries())
		}
		s.State, full = st, true
	}
	now := monotonicNow()
	ref := uint64(refresh)
	// Slots left empty since the last scan are forgotten, so that an
	// entry that comes back to one is new.
	var present [3][]bool
	for i := range tabs {
		present[i] = make([]bool, len(st.tables[i]))
	}
	err := eachSlot(tabs[0], func(e *dispatcherConnEntry) bool { return liveState(e.Flow.State) },
		func(slot uint32, e *dispatcherConnEntry) {
			present[0][slot] = true
			fl := e.Flow
			fl.LastSeen = 0
			if !changed(&st.tables[0][slot], fingerprint(st.seed, bytesOf(&e.Key), bytesOf(&fl)), e.Flow.LastSeen, full, ref) {
				return
			}
			k := e.Key
			f(lb.ConnEntry{Kind: lb.ConnMAC, Protocol: k.Proto,
				Client:  netip.AddrPortFrom(addrFrom(k.Src.Addr, k.Family), htons(k.Sport)),
				Cluster: netip.AddrPortFrom(addrFrom(k.Dst.Addr, k.Family), htons(k.Dport)),
				Backend: e.Flow.Backend, Service: e.Flow.Service,
				Closing: dispatcherFlowState(e.Flow.State) == dispatcherFlowStateFLOW_CLOSING,
				Age:     time.Duration(since(now, e.Flow.LastSeen))})
		})
	if err != nil {
		return err
	}
	err = eachSlot(tabs[1], func(e *dispatcherNatFlowEntry) bool { return liveState(e.Flow.State) },
		func(slot uint32, e *dispatcherNatFlowEntry) {
			present[1][slot] = true
			fl := e.Flow
			fl.LastSeen = 0
			if !changed(&st.tables[1][slot], fingerprint(st.seed, bytesOf(&e.Key), bytesOf(&fl)), e.Flow.LastSeen, full, ref) {
				return
			}
			k := e.Key
			f(lb.ConnEntry{Kind: lb.ConnNATFlow, Protocol: k.Proto,
				Client:  netip.AddrPortFrom(addrFrom(k.Src.Addr, k.Family), htons(k.Sport)),
				Cluster: netip.AddrPortFrom(addrFrom(k.Dst.Addr, k.Family), htons(k.Dport)),
				NAT:     netip.AddrPortFrom(addrFrom(e.Flow.NatAddr.Addr, k.Family), htons(e.Flow.NatPort)),
				Backend: e.Flow.Backend, Service: e.Flow.Service,
				Closing: dispatcherFlowState(e.Flow.State) == dispatcherFlowStateFLOW_CLOSING,
				Age:     time.Duration(since(now, e.Flow.LastSeen))})
		})
	if err != nil {
		return err
	}
	err = eachSlot(tabs[2], func(e *dispatcherNatPortEntry) bool { return liveState(e.Rev.State) },
		func(slot uint32, e *dispatcherNatPortEntry) {
			present[2][slot] = true
			r := e.Rev
			r.LastSeen, r.Flags, r.Hop = 0, 0, dispatcherNextHop{} // the next hop is this host's own
			if !changed(&st.tables[2][slot], fingerprint(st.seed, bytesOf(&e.Key), bytesOf(&r)), e.Rev.LastSeen, full, ref) {
				return
			}
			k := e.Key
			f(lb.ConnEntry{Kind: lb.ConnNATPort, Protocol: k.Proto,
				Client:  netip.AddrPortFrom(addrFrom(e.Rev.Client.Addr, k.Family), htons(e.Rev.ClientPort)),
				Cluster: netip.AddrPortFrom(addrFrom(e.Rev.Vip.Addr, k.Family), htons(e.Rev.VipPort)),
				NAT:     netip.AddrPortFrom(addrFrom(k.Addr.Addr, k.Family), htons(k.Port)),
				Backend: e.Rev.Backend, Service: e.Rev.Service,
				Closing: dispatcherFlowState(e.Rev.State) == dispatcherFlowStateFLOW_CLOSING,
				Age:     time.Duration(since(now, e.Rev.LastSeen))})
		})
	if err != nil {
		return err
	}
	for i := range tabs {
		for slot, on := range present[i] {
			if !on {
				st.tables[i][slot] = slotMark{}
			}
		}
	}
	seen := map[dispatcherAffinityKey]bool{}
	err = batchRead(affinity, func(k dispatcherAffinityKey, r dispatcherAffinityRecord) {
		seen[k] = true
		rr := r
		rr.LastSeen = 0
		fp := fingerprint(st.seed, bytesOf(&rr))
		m := st.affinity[k] // a record not seen before: the zero mark, which no fingerprint equals
		report := changed(&m, fp, r.LastSeen, full, ref)
		st.affinity[k] = m
		if !report {
			return
		}
		f(lb.ConnEntry{Kind: lb.ConnAffinity, Client: netip.AddrPortFrom(addrFrom(k.Client.Addr, k.Family), 0),
			Backend: r.Backend, Service: r.Service, Age: time.Duration(since(now, r.LastSeen))})
	})
	if err != nil {
		return fmt.Errorf("reading affinity records: %w", err)
	}
	for k := range st.affinity {
		if !seen[k] {
			delete(st.affinity, k)
		}
	}
	return nil
}

// connWriter turns the engine's entries into this executor's table
// entries, as if the executor had written them their age ago.
type connWriter struct {
	d   *Datapath
	now uint64
	svc map[uint32]svcInfo // read on the first affinity record
}

func (d *Datapath) connWriter() *connWriter { return &connWriter{d: d, now: monotonicNow()} }

// stamp is the last_seen of an entry last used age ago.
func (w *connWriter) stamp(age time.Duration) uint64 {
	if a := uint64(age); a < w.now {
		return w.now - a
	}
	return 1
}

// flowState is an entry's state.
func flowState(closing bool) uint8 {
	if closing {
		return uint8(dispatcherFlowStateFLOW_CLOSING)
	}
	return uint8(dispatcherFlowStateFLOW_ESTABLISHED)
}

// known reports whether e names a backend of this executor's under the
// service it names.
func (w *connWriter) known(e lb.ConnEntry) bool {
	b, ok := w.d.applied.backends[e.Backend]
	return ok && b.Service == e.Service
}

// flowKey is the key of a connection or NAT flow entry.
func flowKeyOf(e lb.ConnEntry) dispatcherFlowKey {
	return FlowKey{Src: e.Client.Addr(), Dst: e.Cluster.Addr(), SrcPort: e.Client.Port(), DstPort: e.Cluster.Port(),
		Proto: e.Protocol}.raw()
}

// flow is a ConnMAC entry's.
func (w *connWriter) flow(e lb.ConnEntry) dispatcherFlow {
	return dispatcherFlow{LastSeen: w.stamp(e.Age), Backend: e.Backend, Service: e.Service, State: flowState(e.Closing)}
}

// natFlow is a ConnNATFlow entry's.
func (w *connWriter) natFlow(e lb.ConnEntry) dispatcherNatFlow {
	nf := dispatcherNatFlow{LastSeen: w.stamp(e.Age), Backend: e.Backend, Service: e.Service, State: flowState(e.Closing),
		NatPort: htons(e.NAT.Port())}
	nf.NatAddr.Addr, _ = addrBytes(e.NAT.Addr())
	return nf
}

// natPort is a ConnNATPort entry's key and record.
func (w *connWriter) natPort(e lb.ConnEntry) (dispatcherNatKey, dispatcherNatRev) {
	var k dispatcherNatKey
	k.Addr.Addr, k.Family = addrBytes(e.NAT.Addr())
	k.Port, k.Proto = htons(e.NAT.Port()), e.Protocol
	r := dispatcherNatRev{LastSeen: w.stamp(e.Age), ClientPort: htons(e.Client.Port()), VipPort: htons(e.Cluster.Port()),
		Backend: e.Backend, Service: e.Service, State: flowState(e.Closing)}
	r.Client.Addr, _ = addrBytes(e.Client.Addr())
	r.Vip.Addr, _ = addrBytes(e.Cluster.Addr())
	return k, r
}

// affinity is a ConnAffinity entry's key and record; false when its port
// keeps no affinity here.
func (w *connWriter) affinity(e lb.ConnEntry) (dispatcherAffinityKey, dispatcherAffinityRecord, bool) {
	if w.svc == nil {
		w.svc = w.d.services()
	}
	si, ok := w.svc[e.Service]
	if !ok || si.sticky == 0 {
		return dispatcherAffinityKey{}, dispatcherAffinityRecord{}, false
	}
	ak := affinityKey(e.Client.Addr(), si.meta.AffinityGroup, si.meta.StickyMask4, si.meta.StickyMask6)
	r := dispatcherAffinityRecord{LastSeen: w.stamp(e.Age), Backend: e.Backend, Service: e.Service}
	r.Server.Addr = w.d.applied.backends[e.Backend].Addr.Addr
	return ak, r, true
}

// PutConns implements the engine's ConnTables: it writes entries (with
// this executor's ids) as if the executor had written them their age
// ago, over the entries of their keys. Entries naming a backend or
// service this executor lacks are skipped. It returns how many it wrote.
func (d *Datapath) PutConns(entries []lb.ConnEntry) (int, error) {
	w := d.connWriter()
	n := 0
	var errs []error
	for _, e := range entries {
		if !w.known(e) {
			continue
		}
		var err error
		switch e.Kind {
		case lb.ConnMAC:
			err = d.putConn(flowKeyOf(e), w.flow(e))
		case lb.ConnNATFlow:
			err = d.putNATFlow(flowKeyOf(e), w.natFlow(e))
		case lb.ConnNATPort:
			err = d.putNATPort(w.natPort(e))
		case lb.ConnAffinity:
			ak, r, ok := w.affinity(e)
			if !ok {
				continue
			}
			err = d.objs.Affinity.Update(&ak, &r, ebpf.UpdateAny)
		default:
			continue
		}
		if err != nil {
			errs = append(errs, err)
			if len(errs) > 8 {
				break
			}
			continue
		}
		n++
	}
	if err := errors.Join(errs...); err != nil {
		return n, fmt.Errorf("writing replicated entries: %w", err)
	}
	return n, nil
}
