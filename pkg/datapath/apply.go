//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/dlbproject/dlb/pkg/lb"
)

// applied is what the maps hold, as far as this process knows: read from
// the pinned maps at Open and kept up to date by Apply, so that Apply writes
// only what changed.
type applied struct {
	nfa      netip.Addr
	vips     map[dispatcherVipKey]dispatcherVipMeta
	backends map[uint32]dispatcherBackend
	// tables maps a service id to its table's sum; adoptedTable when the
	// table was found pinned and its contents are unknown.
	tables  map[uint32]uint64
	txPorts map[uint32]bool
	filter  *dispatcherVipBloom
}

const adoptedTable = 0

// loadApplied reads what a previous dlbd left in the pinned maps.
func (d *Datapath) loadApplied() error {
	a := applied{
		vips:     map[dispatcherVipKey]dispatcherVipMeta{},
		backends: map[uint32]dispatcherBackend{},
		tables:   map[uint32]uint64{},
		txPorts:  map[uint32]bool{},
		filter:   new(dispatcherVipBloom),
	}
	var vk dispatcherVipKey
	var vm dispatcherVipMeta
	it := d.objs.Vips.Iterate()
	for it.Next(&vk, &vm) {
		a.vips[vk] = vm
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading vips: %w", err)
	}
	var id uint32
	var b dispatcherBackend
	it = d.objs.Backends.Iterate()
	for it.Next(&id, &b) {
		if b.Flags&uint32(dispatcherBackendFlagsBACKEND_F_PRESENT) != 0 {
			a.backends[id] = b
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading backends: %w", err)
	}
	var inner ebpf.MapID
	it = d.objs.MaglevTables.Iterate()
	for it.Next(&id, &inner) {
		a.tables[id] = adoptedTable
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading maglev_tables: %w", err)
	}
	var port uint32
	it = d.objs.TxPorts.Iterate()
	for it.Next(&id, &port) {
		a.txPorts[id] = true
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading tx_ports: %w", err)
	}
	if err := d.objs.VipFilter.Lookup(uint32(0), a.filter); err != nil {
		return fmt.Errorf("reading vip_filter: %w", err)
	}
	var cfg dispatcherDlbConfig
	if err := d.objs.Config.Lookup(uint32(0), &cfg); err != nil {
		return fmt.Errorf("reading config: %w", err)
	}
	a.nfa = addrFrom(cfg.Nfa.Addr, cfg.NfaFamily)
	d.applied = a
	return nil
}

// Apply makes the maps hold dp. It writes in an order that keeps every
// reader consistent: backends before the tables that name them, tables
// before the vips that lead to them; removals run the other way. Only what
// changed is written. A Maglev table is replaced by building a new one
// beside the live one and swapping it in with one map update.
func (d *Datapath) Apply(dp lb.Dataplane) error {
	if err := d.applyNFA(dp.NFA); err != nil {
		return err
	}

	// Interfaces and backends first.
	wantPorts := map[uint32]bool{}
	wantBackends := map[uint32]dispatcherBackend{}
	for _, b := range dp.Backends {
		if b.ID >= d.objs.Backends.MaxEntries() {
			return fmt.Errorf("backend id %d exceeds the executor's %d backends", b.ID, d.objs.Backends.MaxEntries())
		}
		e, err := backendEntry(b)
		if err != nil {
			return err
		}
		wantBackends[b.ID] = e
		if b.Ifindex != 0 { // 0: never resolved
			wantPorts[uint32(b.Ifindex)] = true
		}
	}
	for ifindex := range wantPorts {
		if d.applied.txPorts[ifindex] {
			continue
		}
		if err := d.objs.TxPorts.Update(ifindex, ifindex, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("adding interface %d to tx_ports: %w", ifindex, err)
		}
		d.applied.txPorts[ifindex] = true
	}
	for id, e := range wantBackends {
		old, ok := d.applied.backends[id]
		if ok && old == e {
			continue
		}
		if !ok {
			if err := d.zeroBackendCounters(id); err != nil {
				return err
			}
		}
		if err := d.objs.Backends.Update(id, &e, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("writing backend %d: %w", id, err)
		}
		d.applied.backends[id] = e
	}

	// Tables, then the vips that lead to them.
	wantTables := map[uint32]bool{}
	for _, s := range dp.Services {
		if s.ID >= d.objs.MaglevTables.MaxEntries() {
			return fmt.Errorf("service id %d exceeds the executor's %d services", s.ID, d.objs.MaglevTables.MaxEntries())
		}
		if s.Table == nil {
			continue
		}
		wantTables[s.ID] = true
		if err := d.applyTable(s); err != nil {
			return err
		}
	}
	wantVips := map[dispatcherVipKey]dispatcherVipMeta{}
	for _, s := range dp.Services {
		for _, e := range vipEntries(s) {
			wantVips[e.key] = e.meta
		}
	}
	for k, m := range wantVips {
		if old, ok := d.applied.vips[k]; ok && old == m {
			continue
		}
		if m.Flags&uint32(dispatcherVipFlagsVIP_F_MARKER) == 0 && !d.serviceKnown(m.Service) {
			if err := d.zeroServiceCounters(m.Service); err != nil {
				return err
			}
		}
		if err := d.objs.Vips.Update(&k, &m, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("writing vip %s: %w", vipString(k), err)
		}
		d.applied.vips[k] = m
	}
	if err := d.applyFilter(wantVips); err != nil {
		return err
	}

	// Removals, from the entry points inwards.
	for k := range d.applied.vips {
		if _, ok := wantVips[k]; ok {
			continue
		}
		if err := d.objs.Vips.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("removing vip %s: %w", vipString(k), err)
		}
		delete(d.applied.vips, k)
	}
	for id := range d.applied.tables {
		if wantTables[id] {
			continue
		}
		if err := d.objs.MaglevTables.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("removing Maglev table %d: %w", id, err)
		}
		delete(d.applied.tables, id)
	}
	for id := range d.applied.backends {
		if _, ok := wantBackends[id]; ok {
			continue
		}
		if err := d.objs.Backends.Update(id, &dispatcherBackend{}, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("clearing backend %d: %w", id, err)
		}
		delete(d.applied.backends, id)
	}
	for ifindex := range d.applied.txPorts {
		if wantPorts[ifindex] {
			continue
		}
		if err := d.objs.TxPorts.Delete(ifindex); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("removing interface %d from tx_ports: %w", ifindex, err)
		}
		delete(d.applied.txPorts, ifindex)
	}
	return nil
}

func (d *Datapath) serviceKnown(id uint32) bool {
	for _, m := range d.applied.vips {
		if m.Service == id && m.Flags&uint32(dispatcherVipFlagsVIP_F_MARKER) == 0 {
			return true
		}
	}
	return false
}

func (d *Datapath) applyNFA(nfa netip.Addr) error {
	if nfa == d.applied.nfa {
		return nil
	}
	var cfg dispatcherDlbConfig
	if err := d.objs.Config.Lookup(uint32(0), &cfg); err != nil {
		return fmt.Errorf("reading config map: %w", err)
	}
	cfg.Nfa.Addr, cfg.NfaFamily = addrBytes(nfa)
	if err := d.objs.Config.Update(uint32(0), &cfg, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("writing nfa: %w", err)
	}
	d.applied.nfa = nfa
	return nil
}

// applyTable swaps in a new Maglev table for s if its contents changed.
func (d *Datapath) applyTable(s lb.DataplaneService) error {
	if uint32(len(s.Table)) != d.maglevSize {
		return fmt.Errorf("Maglev table of %s@%d has %d slots, the executor uses %d", s.Cluster, s.Port, len(s.Table), d.maglevSize)
	}
	sum := s.TableSum
	if sum == adoptedTable {
		sum = lb.TableSum(s.Table)
	}
	if old, ok := d.applied.tables[s.ID]; ok && old == sum {
		return nil
	}
	inner, err := ebpf.NewMap(d.innerSpec)
	if err != nil {
		return fmt.Errorf("creating Maglev table: %w", err)
	}
	defer inner.Close()
	keys := make([]uint32, len(s.Table))
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := inner.BatchUpdate(keys, s.Table, nil); err != nil {
		return fmt.Errorf("filling Maglev table: %w", err)
	}
	if err := d.objs.MaglevTables.Update(s.ID, inner, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("swapping in Maglev table of %s@%d: %w", s.Cluster, s.Port, err)
	}
	d.applied.tables[s.ID] = sum
	return nil
}

// applyFilter rewrites the VIP pre-filter if the set of cluster addresses
// changed. A reader racing with the write sees every bit that stays set,
// so no cluster address is ever missed.
func (d *Datapath) applyFilter(vips map[dispatcherVipKey]dispatcherVipMeta) error {
	f := new(dispatcherVipBloom)
	for k := range vips {
		if dispatcherDlbFamily(k.Family) != dispatcherDlbFamilyDLB_FAMILY_IPV4 {
			continue
		}
		bit := FilterBit(netip.AddrFrom4([4]byte(k.Addr.Addr[:4])))
		f.Bits[bit/64] |= 1 << (bit % 64)
	}
	if *f == *d.applied.filter {
		return nil
	}
	if err := d.objs.VipFilter.Update(uint32(0), f, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("writing vip_filter: %w", err)
	}
	d.applied.filter = f
	return nil
}

func (d *Datapath) zeroBackendCounters(id uint32) error {
	zero := make([]dispatcherCounters, ebpf.MustPossibleCPU())
	if err := d.objs.BackendStats.Update(id, zero, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("zeroing counters of backend %d: %w", id, err)
	}
	if err := d.objs.BackendSwept.Update(id, uint64(0), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("zeroing counters of backend %d: %w", id, err)
	}
	return nil
}

func (d *Datapath) zeroServiceCounters(id uint32) error {
	zero := make([]dispatcherCounters, ebpf.MustPossibleCPU())
	if err := d.objs.ServiceStats.Update(id, zero, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("zeroing counters of service %d: %w", id, err)
	}
	return nil
}

type vipEntry struct {
	key  dispatcherVipKey
	meta dispatcherVipMeta
}

// vipEntries returns the vips entries of a service: one per protocol, and
// the cluster-address marker.
func vipEntries(s lb.DataplaneService) []vipEntry {
	addr, fam := addrBytes(s.Cluster)
	base := dispatcherVipKey{Family: fam}
	base.Addr.Addr = addr
	meta := dispatcherVipMeta{Service: s.ID, StaleTimeout: s.StaleTimeout, FinTimeout: s.FinTimeout}
	out := []vipEntry{{key: base, meta: dispatcherVipMeta{Flags: uint32(dispatcherVipFlagsVIP_F_MARKER)}}}
	for _, p := range []struct {
		on    bool
		proto uint8
	}{{s.Protocol.HasTCP(), unixIPPROTO_TCP}, {s.Protocol.HasUDP(), unixIPPROTO_UDP}} {
		if !p.on {
			continue
		}
		k := base
		k.Port = htons(s.Port)
		k.Proto = p.proto
		out = append(out, vipEntry{key: k, meta: meta})
	}
	return out
}

const (
	unixIPPROTO_TCP = 6
	unixIPPROTO_UDP = 17
)

func backendEntry(b lb.DataplaneBackend) (dispatcherBackend, error) {
	var e dispatcherBackend
	e.Addr.Addr, e.Family = addrBytes(b.Address)
	if b.MAC != nil {
		if len(b.MAC) != 6 {
			return e, fmt.Errorf("backend %s: MAC %s is not an Ethernet address", b.Address, b.MAC)
		}
		copy(e.Mac[:], b.MAC)
	}
	if b.SrcMAC != nil {
		if len(b.SrcMAC) != 6 {
			return e, fmt.Errorf("backend %s: interface MAC %s is not an Ethernet address", b.Address, b.SrcMAC)
		}
		copy(e.SrcMac[:], b.SrcMAC)
	}
	e.Ifindex = uint32(b.Ifindex)
	e.Service = b.Service
	e.Flags = uint32(dispatcherBackendFlagsBACKEND_F_PRESENT)
	if b.AcceptNew {
		e.Flags |= uint32(dispatcherBackendFlagsBACKEND_F_NEW_OK)
	}
	return e, nil
}

// addrBytes returns the 16-byte key form of a and its family.
func addrBytes(a netip.Addr) ([16]uint8, uint8) {
	var out [16]uint8
	switch {
	case !a.IsValid():
		return out, uint8(dispatcherDlbFamilyDLB_FAMILY_NONE)
	case a.Is4() || a.Is4In6():
		v4 := a.Unmap().As4()
		copy(out[:], v4[:])
		return out, uint8(dispatcherDlbFamilyDLB_FAMILY_IPV4)
	}
	return a.As16(), uint8(dispatcherDlbFamilyDLB_FAMILY_IPV6)
}

// addrFrom is the inverse of addrBytes.
func addrFrom(b [16]uint8, family uint8) netip.Addr {
	switch dispatcherDlbFamily(family) {
	case dispatcherDlbFamilyDLB_FAMILY_IPV4:
		return netip.AddrFrom4([4]byte(b[:4]))
	case dispatcherDlbFamilyDLB_FAMILY_IPV6:
		return netip.AddrFrom16(b)
	}
	return netip.Addr{}
}

// htons converts a port to network byte order as stored in a __be16 field
// read by a little-endian host (the generated object is little-endian only).
func htons(v uint16) uint16 { return v<<8 | v>>8 }

func vipString(k dispatcherVipKey) string {
	a := addrFrom(k.Addr.Addr, k.Family)
	if k.Proto == 0 {
		return a.String()
	}
	return fmt.Sprintf("%s@%d/%d", a, htons(k.Port), k.Proto)
}
