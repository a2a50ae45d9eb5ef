//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/dlbproject/dlb/pkg/lb"
)

// applied is what the maps hold, as far as this process knows: read from
// the pinned maps at Open and kept up to date by Apply, so that Apply writes
// only what changed.
type applied struct {
	cfg      dispatcherDlbConfig
	vips     map[dispatcherVipKey]dispatcherVipMeta
	backends map[uint32]dispatcherBackend
	servers  map[dispatcherServerKey]uint32
	// tables maps a service id to its table's sum; adoptedTable when the
	// table was found pinned and its contents are unknown.
	tables    map[uint32]uint64
	txPorts   map[uint32]bool
	filter    *dispatcherVipBloom
	natFilter *dispatcherNatBloom
}

const adoptedTable = 0

// loadApplied reads what a previous dlbd left in the pinned maps.
func (d *Datapath) loadApplied() error {
	a := applied{
		vips:      map[dispatcherVipKey]dispatcherVipMeta{},
		backends:  map[uint32]dispatcherBackend{},
		servers:   map[dispatcherServerKey]uint32{},
		tables:    map[uint32]uint64{},
		txPorts:   map[uint32]bool{},
		filter:    new(dispatcherVipBloom),
		natFilter: new(dispatcherNatBloom),
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
	var sk dispatcherServerKey
	it = d.objs.ServiceServers.Iterate()
	for it.Next(&sk, &id) {
		a.servers[sk] = id
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading service_servers: %w", err)
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
	if err := d.objs.NatFilter.Lookup(uint32(0), a.natFilter); err != nil {
		return fmt.Errorf("reading nat_filter: %w", err)
	}
	if err := d.objs.Config.Lookup(uint32(0), &a.cfg); err != nil {
		return fmt.Errorf("reading config: %w", err)
	}
	d.applied = a
	return nil
}

// Apply makes the maps hold dp. It writes in an order that keeps every
// reader consistent: backends before the tables that name them, tables
// before the vips that lead to them; removals run the other way. Only what
// changed is written. A Maglev table is replaced by building a new one
// beside the live one and swapping it in with one map update. An invalid
// dp is refused whole, before anything is written.
func (d *Datapath) Apply(dp lb.Dataplane) error {
	want, err := d.desired(dp)
	if err != nil {
		return err
	}
	if err := d.applyConfig(want.cfg); err != nil {
		return err
	}

	// Interfaces and backends first.
	for ifindex := range want.txPorts {
		if d.applied.txPorts[ifindex] {
			continue
		}
		if err := d.objs.TxPorts.Update(ifindex, ifindex, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("adding interface %d to tx_ports: %w", ifindex, err)
		}
		d.applied.txPorts[ifindex] = true
	}
	for id, e := range want.backends {
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
	for k, id := range want.servers {
		if old, ok := d.applied.servers[k]; ok && old == id {
			continue
		}
		if err := d.objs.ServiceServers.Update(&k, id, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("writing service_servers: %w", err)
		}
		d.applied.servers[k] = id
	}

	// Tables, then the vips that lead to them.
	wantTables := map[uint32]bool{}
	for _, s := range dp.Services {
		if s.Table == nil {
			continue
		}
		wantTables[s.ID] = true
		if err := d.applyTable(s); err != nil {
			return err
		}
	}
	vipsChanged := false
	for k, m := range want.vips {
		if old, ok := d.applied.vips[k]; ok && old == m {
			continue
		}
		vipsChanged = true
		if m.Flags&uint32(dispatcherVipFlagsVIP_F_MARKER|dispatcherVipFlagsVIP_F_RETURN) == 0 && !d.serviceKnown(m.Service) {
			if err := d.zeroServiceCounters(m.Service); err != nil {
				return err
			}
		}
		if err := d.objs.Vips.Update(&k, &m, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("writing vip %s: %w", vipString(k), err)
		}
		d.applied.vips[k] = m
	}
	if err := d.applyFilters(want.vips); err != nil {
		return err
	}

	// Removals, from the entry points inwards.
	for k := range d.applied.vips {
		if _, ok := want.vips[k]; ok {
			continue
		}
		if err := d.objs.Vips.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("removing vip %s: %w", vipString(k), err)
		}
		delete(d.applied.vips, k)
		vipsChanged = true
	}
	if vipsChanged {
		// The executor's per-CPU copies of vips entries are stale now.
		cfg := d.applied.cfg
		cfg.VipsGen++
		if err := d.applyConfig(cfg); err != nil {
			return err
		}
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
	for k := range d.applied.servers {
		if _, ok := want.servers[k]; ok {
			continue
		}
		if err := d.objs.ServiceServers.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("removing service_servers entry: %w", err)
		}
		delete(d.applied.servers, k)
	}
	removed := map[uint32]dispatcherBackend{}
	for id, old := range d.applied.backends {
		if _, ok := want.backends[id]; ok {
			continue
		}
		if err := d.objs.Backends.Update(id, &dispatcherBackend{}, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("clearing backend %d: %w", id, err)
		}
		delete(d.applied.backends, id)
		removed[id] = old
	}
	if len(removed) > 0 {
		// A removed server's affinity records go with it.
		if _, err := d.dropAffinity(func(r dispatcherAffinityRecord) bool {
			old, ok := removed[r.Backend]
			return ok && old.Service == r.Service && old.Addr == r.Server
		}); err != nil {
			return err
		}
	}
	for ifindex := range d.applied.txPorts {
		if want.txPorts[ifindex] {
			continue
		}
		if err := d.objs.TxPorts.Delete(ifindex); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("removing interface %d from tx_ports: %w", ifindex, err)
		}
		delete(d.applied.txPorts, ifindex)
	}
	return nil
}

// desiredState is what the maps must hold for a Dataplane.
type desiredState struct {
	cfg      dispatcherDlbConfig
	txPorts  map[uint32]bool
	backends map[uint32]dispatcherBackend
	servers  map[dispatcherServerKey]uint32
	vips     map[dispatcherVipKey]dispatcherVipMeta
}

// desired validates dp and computes the map contents it stands for.
func (d *Datapath) desired(dp lb.Dataplane) (desiredState, error) {
	w := desiredState{
		cfg:      d.applied.cfg,
		txPorts:  map[uint32]bool{},
		backends: map[uint32]dispatcherBackend{},
		servers:  map[dispatcherServerKey]uint32{},
		vips:     map[dispatcherVipKey]dispatcherVipMeta{},
	}

	// Global settings.
	nfa4, nfa6 := dp.NFA.Unmap(), dp.NFA6
	if nfa4.IsValid() && !nfa4.Is4() {
		// An IPv6 address in NFA (as an engine that predates NFA6 may
		// put there) is the IPv6 NFA.
		if nfa6.IsValid() && nfa6 != nfa4 {
			return w, fmt.Errorf("NFA %s and NFA6 %s are both IPv6 addresses", nfa4, nfa6)
		}
		nfa4, nfa6 = netip.Addr{}, nfa4
	}
	if nfa6.IsValid() && (!nfa6.Is6() || nfa6.Is4In6()) {
		return w, fmt.Errorf("NFA6 %s is not an IPv6 address", nfa6)
	}
	w.cfg.Nfa.Addr, w.cfg.NfaFamily = addrBytes(nfa4)
	w.cfg.Nfa6.Addr, w.cfg.Nfa6Family = addrBytes(nfa6)
	var err error
	if w.cfg.Gw4, err = nextHop(dp.ClientGateway, "client gateway"); err != nil {
		return w, err
	}
	if w.cfg.Gw6, err = nextHop(dp.ClientGateway6, "IPv6 client gateway"); err != nil {
		return w, err
	}
	for _, g := range []dispatcherNextHop{w.cfg.Gw4, w.cfg.Gw6} {
		if g.Ifindex != 0 {
			w.txPorts[g.Ifindex] = true
		}
	}

	// Services, by id.
	services := map[uint32]lb.DataplaneService{}
	clusters := map[netip.Addr]bool{}
	for _, s := range dp.Services {
		if s.ID >= d.objs.MaglevTables.MaxEntries() {
			return w, fmt.Errorf("service id %d exceeds the executor's %d services", s.ID, d.objs.MaglevTables.MaxEntries())
		}
		if !s.Cluster.IsValid() {
			return w, fmt.Errorf("service %d has no cluster address", s.ID)
		}
		if s.AffinityGroup >= 1<<31 {
			return w, fmt.Errorf("service %s@%d: affinity group %d is not below 2^31", s.Cluster, s.Port, s.AffinityGroup)
		}
		if s.StickyMask4 > 32 || s.StickyMask6 > 128 {
			return w, fmt.Errorf("service %s@%d: sticky mask /%d, /%d out of range", s.Cluster, s.Port, s.StickyMask4, s.StickyMask6)
		}
		if s.Method > lb.DataplaneNAT {
			return w, fmt.Errorf("service %s@%d: unknown method %d", s.Cluster, s.Port, s.Method)
		}
		if s.Selection > lb.DataplaneConnection {
			return w, fmt.Errorf("service %s@%d: unknown selection %d", s.Cluster, s.Port, s.Selection)
		}
		services[s.ID] = s
		clusters[s.Cluster.Unmap()] = true
		for _, e := range vipEntries(s) {
			w.vips[e.key] = e.meta
		}
	}

	// Return-address pools.
	pools := map[netip.Addr]lb.DataplaneReturnPool{}
	for _, p := range dp.ReturnPools {
		a := p.Address.Unmap()
		if p.PortMin == 0 || p.PortMax < p.PortMin {
			return w, fmt.Errorf("return address %s: port pool %d-%d is empty or starts at 0", a, p.PortMin, p.PortMax)
		}
		pools[a] = p
	}
	checkReturn := func(a netip.Addr) error {
		switch {
		case a == nfa4 || a == nfa6:
			return fmt.Errorf("return address %s is a non-forwarding address", a)
		case clusters[a]:
			return fmt.Errorf("return address %s is a cluster address", a)
		}
		return nil
	}

	// Backends.
	for _, b := range dp.Backends {
		if b.ID >= d.objs.Backends.MaxEntries() {
			return w, fmt.Errorf("backend id %d exceeds the executor's %d backends", b.ID, d.objs.Backends.MaxEntries())
		}
		s, ok := services[b.Service]
		nat := ok && s.Method == lb.DataplaneNAT
		e, err := backendEntry(b)
		if err != nil {
			return w, err
		}
		if nat {
			r := b.ReturnAddress.Unmap()
			if !r.IsValid() {
				return w, fmt.Errorf("backend %s of NAT service %s@%d has no return address", b.Address, s.Cluster, s.Port)
			}
			if r.Is4() != b.Address.Unmap().Is4() {
				return w, fmt.Errorf("backend %s: return address %s is of another family", b.Address, r)
			}
			if err := checkReturn(r); err != nil {
				return w, err
			}
			e.NatAddr.Addr, _ = addrBytes(r)
			e.Port = htons(b.Port)
			e.NatPortMin, e.NatPortMax = uint16(dispatcherDlbConstsDLB_NAT_PORT_MIN), uint16(dispatcherDlbConstsDLB_NAT_PORT_MAX)
			if p, ok := pools[r]; ok {
				e.NatPortMin, e.NatPortMax = p.PortMin, p.PortMax
			}
			// The return address's marker: packets to it are NAT replies.
			mk := dispatcherVipKey{Family: e.Family}
			mk.Addr.Addr = e.NatAddr.Addr
			w.vips[mk] = dispatcherVipMeta{Flags: uint32(dispatcherVipFlagsVIP_F_RETURN)}
		}
		w.backends[b.ID] = e
		if b.Ifindex != 0 { // 0: never resolved
			w.txPorts[uint32(b.Ifindex)] = true
		}
		var sk dispatcherServerKey
		sk.Addr.Addr, sk.Family = addrBytes(b.Address)
		sk.Service = b.Service
		w.servers[sk] = b.ID
	}
	return w, nil
}

// nextHop converts a configured next hop; the zero value is "none".
func nextHop(h lb.DataplaneNextHop, what string) (dispatcherNextHop, error) {
	var e dispatcherNextHop
	if h.MAC == nil {
		return e, nil
	}
	if len(h.MAC) != 6 || len(h.SrcMAC) != 6 {
		return e, fmt.Errorf("%s: MACs %s, %s are not Ethernet addresses", what, h.MAC, h.SrcMAC)
	}
	if h.Ifindex <= 0 {
		return e, fmt.Errorf("%s: no interface", what)
	}
	copy(e.Mac[:], h.MAC)
	copy(e.SrcMac[:], h.SrcMAC)
	e.Ifindex = uint32(h.Ifindex)
	return e, nil
}

func (d *Datapath) serviceKnown(id uint32) bool {
	for _, m := range d.applied.vips {
		if m.Service == id && m.Flags&uint32(dispatcherVipFlagsVIP_F_MARKER|dispatcherVipFlagsVIP_F_RETURN) == 0 {
			return true
		}
	}
	return false
}

// applyConfig writes the config map if its settings changed.
func (d *Datapath) applyConfig(cfg dispatcherDlbConfig) error {
	if cfg == d.applied.cfg {
		return nil
	}
	if err := d.objs.Config.Update(uint32(0), &cfg, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("writing config map: %w", err)
	}
	d.applied.cfg = cfg
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

// applyFilters rewrites the pre-filters if the set of cluster and return
// addresses changed. A reader racing with a write sees every bit that
// stays set, so no address is ever missed; a new bit is written before the
// vips entry it leads to is used (filters are written after the vips).
func (d *Datapath) applyFilters(vips map[dispatcherVipKey]dispatcherVipMeta) error {
	f := new(dispatcherVipBloom)
	nf := new(dispatcherNatBloom)
	natVIP := map[dispatcherVipKey]bool{}
	for k, m := range vips {
		if m.Flags&uint32(dispatcherVipFlagsVIP_F_MARKER|dispatcherVipFlagsVIP_F_RETURN) == 0 &&
			dispatcherDlbMethod(m.Method) == dispatcherDlbMethodDLB_METHOD_NAT {
			natVIP[dispatcherVipKey{Addr: k.Addr, Family: k.Family}] = true
		}
	}
	for k, m := range vips {
		a := addrFrom(k.Addr.Addr, k.Family)
		if !a.IsValid() {
			continue
		}
		bit := FilterBit(a)
		f.Bits[bit/64] |= 1 << (bit % 64)
		if m.Flags&uint32(dispatcherVipFlagsVIP_F_RETURN) != 0 {
			nf.Returns[bit/64] |= 1 << (bit % 64)
		}
		if natVIP[dispatcherVipKey{Addr: k.Addr, Family: k.Family}] {
			nf.NatVips[bit/64] |= 1 << (bit % 64)
		}
	}
	if *nf != *d.applied.natFilter {
		if err := d.objs.NatFilter.Update(uint32(0), nf, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("writing nat_filter: %w", err)
		}
		d.applied.natFilter = nf
	}
	if *f != *d.applied.filter {
		if err := d.objs.VipFilter.Update(uint32(0), f, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("writing vip_filter: %w", err)
		}
		d.applied.filter = f
	}
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

// affinityGroup returns the group a service's records are kept under: its
// AffinityGroup, or a group of its own (ids with the top bit set).
func affinityGroup(s lb.DataplaneService) uint32 {
	if s.AffinityGroup != 0 {
		return s.AffinityGroup
	}
	return s.ID | 1<<31
}

// vipEntries returns the vips entries of a service: one per protocol, and
// the cluster-address marker.
func vipEntries(s lb.DataplaneService) []vipEntry {
	addr, fam := addrBytes(s.Cluster)
	base := dispatcherVipKey{Family: fam}
	base.Addr.Addr = addr
	meta := dispatcherVipMeta{
		Service:       s.ID,
		StaleTimeout:  s.StaleTimeout,
		FinTimeout:    s.FinTimeout,
		StickyTime:    s.StickyTime,
		AffinityGroup: affinityGroup(s),
		Method:        uint8(s.Method),
		Selection:     uint8(s.Selection),
		StickyMask4:   s.StickyMask4,
		StickyMask6:   s.StickyMask6,
	}
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
	if !b.Address.IsValid() {
		return e, fmt.Errorf("backend %d has no address", b.ID)
	}
	e.Addr.Addr, e.Family = addrBytes(b.Address)
	if err := copyMAC(e.Mac[:], b.MAC, b.Address, "MAC"); err != nil {
		return e, err
	}
	if err := copyMAC(e.SrcMac[:], b.SrcMAC, b.Address, "interface MAC"); err != nil {
		return e, err
	}
	e.Ifindex = uint32(b.Ifindex)
	e.Service = b.Service
	e.Flags = uint32(dispatcherBackendFlagsBACKEND_F_PRESENT)
	if b.AcceptNew {
		e.Flags |= uint32(dispatcherBackendFlagsBACKEND_F_NEW_OK)
	}
	if b.Quiesced {
		e.Flags |= uint32(dispatcherBackendFlagsBACKEND_F_QUIESCED)
	}
	return e, nil
}

func copyMAC(dst []uint8, mac net.HardwareAddr, server netip.Addr, what string) error {
	if mac == nil {
		return nil
	}
	if len(mac) != 6 {
		return fmt.Errorf("backend %s: %s %s is not an Ethernet address", server, what, mac)
	}
	copy(dst, mac)
	return nil
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
