//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/dlbproject/dlb/internal/compact"
	"github.com/dlbproject/dlb/pkg/lb"
)

// applied is what the maps hold, as far as this process knows: read from
// the pinned maps at Open and kept up to date by Update, so that Update
// writes only what changed, and what it is given decides the cost, not
// the size of the configuration.
type applied struct {
	cfg      dispatcherDlbConfig
	globals  lb.DataplaneGlobals
	vips     map[dispatcherVipKey]dispatcherVipMeta
	backends map[uint32]dispatcherBackend
	servers  map[dispatcherServerKey]uint32
	// services are the services written, by id (their tables shared with
	// the caller, who never writes a table it handed over).
	services map[uint32]lb.DataplaneService
	// tables maps a service id to its table's sum; adoptedTable when the
	// table was found pinned and its contents are not read yet.
	tables map[uint32]uint64
	// pinnedTables are the tables found pinned, by service id, consulted
	// when a table is to be written: an unchanged table is not rewritten
	// after a restart.
	pinnedTables map[uint32]pinnedTable
	// markers counts the services of each cluster address and the NAT
	// backends of each return address: their marker entries live while
	// the count is above 0.
	markers map[dispatcherVipKey]int
	// present is the set of backend ids in backends; swept the
	// connections per backend that the sweeper counted as finished (the
	// contents of backend_swept, which dlbd alone writes), without zeros.
	present bitset
	swept   map[uint32]uint64
	// txPorts counts the users (backends, client gateways) of each
	// interface in tx_ports.
	txPorts   map[uint32]int
	filter    *dispatcherVipBloom
	natFilter *dispatcherNatBloom
}

const adoptedTable = 0

// readAll calls f with each entry of m, reading them a batch at a time (a
// table of 100,000 backends is read in tens of system calls, not 200,000).
func readAll[K, V any](m *ebpf.Map, f func(K, V)) error {
	const chunk = 4096
	keys, vals := make([]K, chunk), make([]V, chunk)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			f(keys[i], vals[i])
		}
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return nil // the end
		case errors.Is(err, ebpf.ErrNotSupported):
			var k K
			var v V
			it := m.Iterate()
			for it.Next(&k, &v) {
				f(k, v)
			}
			return it.Err()
		case err != nil:
			return err
		}
	}
}

// loadApplied reads what a previous dlbd left in the pinned maps.
func (d *Datapath) loadApplied() error {
	a := applied{
		vips:         map[dispatcherVipKey]dispatcherVipMeta{},
		backends:     map[uint32]dispatcherBackend{},
		servers:      map[dispatcherServerKey]uint32{},
		services:     map[uint32]lb.DataplaneService{},
		tables:       map[uint32]uint64{},
		pinnedTables: map[uint32]pinnedTable{},
		swept:        map[uint32]uint64{},
		markers:      map[dispatcherVipKey]int{},
		txPorts:      map[uint32]int{},
		filter:       new(dispatcherVipBloom),
		natFilter:    new(dispatcherNatBloom),
	}
	if err := readAll(d.objs.Vips, func(k dispatcherVipKey, m dispatcherVipMeta) { a.vips[k] = m }); err != nil {
		return fmt.Errorf("reading vips: %w", err)
	}
	if err := readAll(d.objs.Backends, func(id uint32, b dispatcherBackend) {
		if b.Flags&uint32(dispatcherBackendFlagsBACKEND_F_PRESENT) != 0 {
			a.backends[id] = b
			a.present.set(id, true)
		}
	}); err != nil {
		return fmt.Errorf("reading backends: %w", err)
	}
	if err := readAll(d.objs.BackendSwept, func(id uint32, n uint64) {
		if n != 0 && a.present.has(id) {
			a.swept[id] = n
		}
	}); err != nil {
		return fmt.Errorf("reading backend_swept: %w", err)
	}
	if err := readAll(d.objs.ServiceServers, func(k dispatcherServerKey, id uint32) { a.servers[k] = id }); err != nil {
		return fmt.Errorf("reading service_servers: %w", err)
	}
	tables, err := d.readPinnedTables()
	if err != nil {
		return err
	}
	for id, t := range tables {
		a.tables[id] = adoptedTable
		a.pinnedTables[id] = t
	}
	var id, port uint32
	it := d.objs.TxPorts.Iterate()
	for it.Next(&id, &port) {
		// Users unknown: a pinned interface stays until an Apply of the
		// whole state says who uses what.
		a.txPorts[id] = 0
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
	d.adopted = true
	return nil
}

// Apply makes the maps hold exactly dp: it writes what differs from what
// they hold and removes what dp does not have (the whole-state form of
// Update, used when dlbd starts and by tests). An invalid dp is refused
// whole, before anything is written.
func (d *Datapath) Apply(dp lb.Dataplane) error {
	g := dp.Globals()
	u := lb.DataplaneUpdate{Globals: &g, Services: dp.Services, Backends: dp.Backends}
	wantS := make(map[uint32]bool, len(dp.Services))
	for _, s := range dp.Services {
		wantS[s.ID] = true
	}
	wantB := make(map[uint32]bool, len(dp.Backends))
	for _, b := range dp.Backends {
		wantB[b.ID] = true
	}
	for id := range d.applied.services {
		if !wantS[id] {
			u.RemoveServices = append(u.RemoveServices, id)
		}
	}
	// Services adopted from pinned maps are known only by their vips
	// entries.
	for _, m := range d.applied.vips {
		if m.Flags&uint32(dispatcherVipFlagsVIP_F_MARKER|dispatcherVipFlagsVIP_F_RETURN) == 0 && !wantS[m.Service] {
			if _, ok := d.applied.services[m.Service]; !ok {
				u.RemoveServices = append(u.RemoveServices, m.Service)
			}
		}
	}
	for id := range d.applied.tables {
		if !wantS[id] {
			u.RemoveServices = append(u.RemoveServices, id)
		}
	}
	for id := range d.applied.backends {
		if !wantB[id] {
			u.RemoveBackends = append(u.RemoveBackends, id)
		}
	}
	if err := d.update(u, true); err != nil {
		return err
	}
	d.adopted = false
	return nil
}

// Update changes what the update names and nothing else: it costs what
// it touches, not the size of the state. It writes in an order that keeps
// every reader consistent: backends before the tables that name them,
// tables before the vips that lead to them (a table that shrinks after
// its vips entry, which holds its size); removals run the other way. A
// Maglev table is replaced by building a new one beside the live one and
// swapping it in with one map update. An invalid update is refused whole,
// before anything is written.
func (d *Datapath) Update(u lb.DataplaneUpdate) error {
	if d.adopted {
		return errors.New("the executor was adopted from pinned maps: apply the whole state first")
	}
	return d.update(u, false)
}

// prepared is an update converted to map entries and checked.
type prepared struct {
	cfg      *dispatcherDlbConfig
	gwPorts  []uint32
	services map[uint32]lb.DataplaneService
	vips     map[uint32][]vipEntry // by service
	backends map[uint32]dispatcherBackend
	servers  map[uint32]dispatcherServerKey // by backend
	rmS      map[uint32]bool
	rmB      map[uint32]bool
}

func (d *Datapath) update(u lb.DataplaneUpdate, whole bool) error {
	p, err := d.prepare(u, whole)
	if err != nil {
		return err
	}
	if err := d.write(p); err != nil {
		return err
	}
	if whole {
		// Entries of pinned services that the state does not have any
		// more (a protocol dropped while no dlbd ran).
		want := map[dispatcherVipKey]bool{}
		for _, es := range p.vips {
			for _, e := range es {
				want[e.key] = true
			}
		}
		for k, m := range d.applied.vips {
			if m.Flags != 0 || want[k] {
				continue
			}
			if err := d.delVip(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("removing vip %s: %w", vipString(k), err)
			}
			delete(d.applied.vips, k)
		}
		// What pinned maps held unchanged was not counted while writing:
		// count the users of markers and interfaces afresh.
		d.recount()
		d.adopted = false
	}
	return d.finish()
}

// recount counts the users of cluster and return address markers and of
// tx_ports interfaces from what the maps hold.
func (d *Datapath) recount() {
	a := &d.applied
	for k := range a.markers {
		a.markers[k] = 0
	}
	for k := range a.txPorts {
		a.txPorts[k] = 0
	}
	for _, s := range a.services {
		a.markers[markerKey(clusterMarker(s), false)]++
	}
	for _, e := range a.backends {
		d.returnMarker(e, true, 1)
		if e.Ifindex != 0 {
			a.txPorts[e.Ifindex]++
		}
	}
	for _, g := range []dispatcherNextHop{a.cfg.Gw4, a.cfg.Gw6} {
		if g.Ifindex != 0 {
			a.txPorts[g.Ifindex]++
		}
	}
}

// finish writes the markers and filters and drops unused interfaces.
func (d *Datapath) finish() error {
	if err := d.syncMarkers(); err != nil {
		return err
	}
	if err := d.vipsWritten(); err != nil {
		return err
	}
	if err := d.applyFilters(); err != nil {
		return err
	}
	for ifindex, n := range d.applied.txPorts {
		if n > 0 {
			continue
		}
		if err := d.objs.TxPorts.Delete(ifindex); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("removing interface %d from tx_ports: %w", ifindex, err)
		}
		delete(d.applied.txPorts, ifindex)
	}
	return nil
}

// prepare converts and checks an update against what the maps hold.
func (d *Datapath) prepare(u lb.DataplaneUpdate, whole bool) (*prepared, error) {
	p := &prepared{services: map[uint32]lb.DataplaneService{}, vips: map[uint32][]vipEntry{},
		backends: map[uint32]dispatcherBackend{}, servers: map[uint32]dispatcherServerKey{},
		rmS: map[uint32]bool{}, rmB: map[uint32]bool{}}
	for _, id := range u.RemoveServices {
		p.rmS[id] = true
	}
	for _, id := range u.RemoveBackends {
		p.rmB[id] = true
	}
	globals := d.applied.globals
	if u.Globals != nil {
		cfg, err := d.globalConfig(*u.Globals)
		if err != nil {
			return nil, err
		}
		p.cfg = &cfg
		globals = *u.Globals
	}
	nfa4, nfa6 := addrFrom(d.applied.cfg.Nfa.Addr, d.applied.cfg.NfaFamily), addrFrom(d.applied.cfg.Nfa6.Addr, d.applied.cfg.Nfa6Family)
	if p.cfg != nil {
		nfa4, nfa6 = addrFrom(p.cfg.Nfa.Addr, p.cfg.NfaFamily), addrFrom(p.cfg.Nfa6.Addr, p.cfg.Nfa6Family)
		for _, g := range []dispatcherNextHop{p.cfg.Gw4, p.cfg.Gw6} {
			if g.Ifindex != 0 {
				p.gwPorts = append(p.gwPorts, g.Ifindex)
			}
		}
	}

	// Services.
	maxS := d.objs.MaglevTables.MaxEntries()
	for _, s := range u.Services {
		if s.ID == 0 || s.ID >= maxS {
			return nil, fmt.Errorf("service id %d is outside the executor's 1..%d", s.ID, maxS-1)
		}
		if !s.Cluster.IsValid() {
			return nil, fmt.Errorf("service %d has no cluster address", s.ID)
		}
		if s.AffinityGroup >= 1<<31 {
			return nil, fmt.Errorf("service %s@%d: affinity group %d is not below 2^31", s.Cluster, s.Port, s.AffinityGroup)
		}
		if s.StickyMask4 > 32 || s.StickyMask6 > 128 {
			return nil, fmt.Errorf("service %s@%d: sticky mask /%d, /%d out of range", s.Cluster, s.Port, s.StickyMask4, s.StickyMask6)
		}
		if s.Method > lb.DataplaneNAT {
			return nil, fmt.Errorf("service %s@%d: unknown method %d", s.Cluster, s.Port, s.Method)
		}
		if s.Selection > lb.DataplaneConnection {
			return nil, fmt.Errorf("service %s@%d: unknown selection %d", s.Cluster, s.Port, s.Selection)
		}
		if n := uint32(len(s.Table)); n > d.maxTable {
			return nil, fmt.Errorf("the Maglev table of %s@%d has %d slots, the executor holds at most %d", s.Cluster, s.Port, n, d.maxTable)
		}
		if a := s.Cluster.Unmap(); a == nfa4 || a == nfa6 {
			return nil, fmt.Errorf("cluster address %s is a non-forwarding address", a)
		}
		p.services[s.ID] = s
		p.vips[s.ID] = vipEntries(s)
		delete(p.rmS, s.ID)
	}
	// svc returns a service as it will be after the update.
	svc := func(id uint32) (lb.DataplaneService, bool) {
		if s, ok := p.services[id]; ok {
			return s, true
		}
		if p.rmS[id] {
			return lb.DataplaneService{}, false
		}
		s, ok := d.applied.services[id]
		return s, ok
	}
	newClusters := map[netip.Addr]bool{}
	for _, s := range p.services {
		newClusters[s.Cluster.Unmap()] = true
	}
	clusters := func(a netip.Addr) bool {
		k := dispatcherVipKey{}
		k.Addr.Addr, k.Family = addrBytes(a)
		return d.applied.markers[markerKey(k, false)] > 0 || newClusters[a]
	}
	pools := map[netip.Addr]lb.DataplaneReturnPool{}
	for _, pl := range globals.ReturnPools {
		a := pl.Address.Unmap()
		if pl.PortMin == 0 || pl.PortMax < pl.PortMin {
			return nil, fmt.Errorf("return address %s: port pool %d-%d is empty or starts at 0", a, pl.PortMin, pl.PortMax)
		}
		pools[a] = pl
	}

	// Backends.
	maxB := d.objs.Backends.MaxEntries()
	for _, b := range u.Backends {
		if b.ID == 0 || b.ID >= maxB {
			return nil, fmt.Errorf("backend id %d is outside the executor's 1..%d", b.ID, maxB-1)
		}
		e, err := backendEntry(b)
		if err != nil {
			return nil, err
		}
		s, ok := svc(b.Service)
		if !ok && !whole {
			return nil, fmt.Errorf("backend %d (%s) names service %d, which the executor does not have", b.ID, b.Address, b.Service)
		}
		if ok && s.Method == lb.DataplaneNAT {
			r := b.ReturnAddress.Unmap()
			switch {
			case !r.IsValid():
				return nil, fmt.Errorf("backend %s of NAT service %s@%d has no return address", b.Address, s.Cluster, s.Port)
			case r.Is4() != b.Address.Unmap().Is4():
				return nil, fmt.Errorf("backend %s: return address %s is of another family", b.Address, r)
			case r == nfa4 || r == nfa6:
				return nil, fmt.Errorf("return address %s is a non-forwarding address", r)
			case clusters(r):
				return nil, fmt.Errorf("return address %s is a cluster address", r)
			}
			e.NatAddr.Addr, _ = addrBytes(r)
			e.Port = htons(b.Port)
			e.NatPortMin, e.NatPortMax = uint16(dispatcherDlbConstsDLB_NAT_PORT_MIN), uint16(dispatcherDlbConstsDLB_NAT_PORT_MAX)
			if pl, ok := pools[r]; ok {
				e.NatPortMin, e.NatPortMax = pl.PortMin, pl.PortMax
			}
		}
		p.backends[b.ID] = e
		var sk dispatcherServerKey
		sk.Addr.Addr, sk.Family = addrBytes(b.Address)
		sk.Service = b.Service
		p.servers[b.ID] = sk
		delete(p.rmB, b.ID)
	}
	return p, nil
}

// globalConfig converts the global settings into the config map's entry.
func (d *Datapath) globalConfig(g lb.DataplaneGlobals) (dispatcherDlbConfig, error) {
	cfg := d.applied.cfg
	nfa4, nfa6 := g.NFA.Unmap(), g.NFA6
	if nfa4.IsValid() && !nfa4.Is4() {
		// An IPv6 address in NFA (as an engine that predates NFA6 may
		// put there) is the IPv6 NFA.
		if nfa6.IsValid() && nfa6 != nfa4 {
			return cfg, fmt.Errorf("NFA %s and NFA6 %s are both IPv6 addresses", nfa4, nfa6)
		}
		nfa4, nfa6 = netip.Addr{}, nfa4
	}
	if nfa6.IsValid() && (!nfa6.Is6() || nfa6.Is4In6()) {
		return cfg, fmt.Errorf("NFA6 %s is not an IPv6 address", nfa6)
	}
	cfg.Nfa.Addr, cfg.NfaFamily = addrBytes(nfa4)
	cfg.Nfa6.Addr, cfg.Nfa6Family = addrBytes(nfa6)
	var err error
	if cfg.Gw4, err = nextHop(g.ClientGateway, "client gateway"); err != nil {
		return cfg, err
	}
	if cfg.Gw6, err = nextHop(g.ClientGateway6, "IPv6 client gateway"); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// write writes a prepared update.
func (d *Datapath) write(p *prepared) error {
	a := &d.applied
	// Interfaces first: gateways and backends need them.
	if p.cfg != nil {
		for _, g := range []dispatcherNextHop{a.cfg.Gw4, a.cfg.Gw6} {
			if g.Ifindex != 0 {
				a.txPorts[g.Ifindex]--
			}
		}
		for _, ifindex := range p.gwPorts {
			if err := d.txPortUse(ifindex, 1); err != nil {
				return err
			}
		}
		if err := d.applyConfig(*p.cfg); err != nil {
			return err
		}
	}
	// Backends, and the service_servers entries that name them.
	for id, e := range p.backends {
		old, ok := a.backends[id]
		if ok && old == e {
			continue
		}
		if !ok {
			if err := d.zeroBackendCounters(id); err != nil {
				return err
			}
		}
		if e.Ifindex != 0 {
			if err := d.txPortUse(e.Ifindex, 1); err != nil {
				return err
			}
		}
		if err := d.objs.Backends.Update(id, &e, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("writing backend %d: %w", id, err)
		}
		if ok && old.Ifindex != 0 {
			a.txPorts[old.Ifindex]--
		}
		d.returnMarker(old, ok, -1)
		d.returnMarker(e, true, 1)
		a.backends[id] = e
		a.present.set(id, true)
	}
	for id, k := range p.servers {
		if old, ok := a.servers[k]; ok && old == id {
			continue
		}
		if err := d.objs.ServiceServers.Update(&k, id, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("writing service_servers: %w", err)
		}
		a.servers[k] = id
	}

	// Tables, then the vips that lead to them; a table that shrinks goes
	// after its vips entry (which holds its size), so that no reader looks
	// up a slot beyond it.
	// New tables are swapped in a batch at a time: each swap waits for
	// the programs running to finish (an RCU grace period, milliseconds),
	// and a batch waits once.
	before, after := d.newTableBatch(), d.newTableBatch()
	defer before.close()
	defer after.close()
	for id, s := range p.services {
		shrink := s.TableSize() < a.services[id].TableSize() && s.Table != nil
		b := before
		if shrink {
			b = after
		}
		if err := b.add(s); err != nil {
			return err
		}
	}
	if err := before.flush(); err != nil {
		return err
	}
	for id, s := range p.services {
		if err := d.writeVips(s, p.vips[id]); err != nil {
			return err
		}
		a.services[id] = s
	}
	// Before a table shrinks: no CPU may go on using a cached vips entry
	// with the larger size.
	if err := d.vipsWritten(); err != nil {
		return err
	}
	if err := after.flush(); err != nil {
		return err
	}

	// Removals, from the entry points inwards.
	gone := d.newTableBatch()
	defer gone.close()
	for id := range p.rmS {
		if err := d.removeService(id, gone); err != nil {
			return err
		}
	}
	if err := gone.flush(); err != nil {
		return err
	}
	a.services = compact.Map(a.services, len(p.rmS))
	a.tables = compact.Map(a.tables, len(p.rmS))
	a.vips = compact.Map(a.vips, len(p.rmS))
	removed := map[uint32]dispatcherBackend{}
	for id := range p.rmB {
		old, ok := a.backends[id]
		if !ok {
			continue
		}
		var sk dispatcherServerKey
		sk.Addr.Addr, sk.Family, sk.Service = old.Addr.Addr, old.Family, old.Service
		if cur, ok := a.servers[sk]; ok && cur == id {
			if err := d.objs.ServiceServers.Delete(&sk); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("removing service_servers entry: %w", err)
			}
			delete(a.servers, sk)
		}
		if err := d.objs.Backends.Update(id, &dispatcherBackend{}, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("clearing backend %d: %w", id, err)
		}
		if old.Ifindex != 0 {
			a.txPorts[old.Ifindex]--
		}
		d.returnMarker(old, true, -1)
		delete(a.backends, id)
		delete(a.swept, id)
		a.present.set(id, false)
		removed[id] = old
	}
	a.backends = compact.Map(a.backends, len(removed))
	a.servers = compact.Map(a.servers, len(removed))
	a.swept = compact.Map(a.swept, len(removed))
	if len(removed) > 0 {
		// A removed server's affinity records go with it.
		if _, err := d.dropAffinity(func(r dispatcherAffinityRecord) bool {
			old, ok := removed[r.Backend]
			return ok && old.Service == r.Service && old.Addr == r.Server
		}); err != nil {
			return err
		}
	}
	return nil
}

// putVip writes a vips entry, delVip removes one; vipsWritten then tells
// the executor's CPUs that their cached copies are stale.
func (d *Datapath) putVip(k *dispatcherVipKey, m *dispatcherVipMeta) error {
	d.vipsDirty = true
	return d.objs.Vips.Update(k, m, ebpf.UpdateAny)
}

func (d *Datapath) delVip(k *dispatcherVipKey) error {
	d.vipsDirty = true
	return d.objs.Vips.Delete(k)
}

// vipsWritten bumps the config's vips generation if vips entries were
// written since it last did: each CPU keeps copies of the entries it uses
// (vip_cache) and drops them when the generation changes.
func (d *Datapath) vipsWritten() error {
	if !d.vipsDirty {
		return nil
	}
	cfg := d.applied.cfg
	cfg.VipsGen++
	if err := d.applyConfig(cfg); err != nil {
		return err
	}
	d.vipsDirty = false
	return nil
}

// txPortUse counts one more (or one fewer) user of an interface, adding
// it to tx_ports when it gets its first.
func (d *Datapath) txPortUse(ifindex uint32, delta int) error {
	n, known := d.applied.txPorts[ifindex]
	if !known && delta > 0 {
		if err := d.objs.TxPorts.Update(ifindex, ifindex, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("adding interface %d to tx_ports: %w", ifindex, err)
		}
	}
	d.applied.txPorts[ifindex] = n + delta
	return nil
}

// returnMarker counts (or uncounts) a NAT backend's use of its return
// address's marker.
func (d *Datapath) returnMarker(e dispatcherBackend, present bool, delta int) {
	if !present || e.NatPortMax == 0 {
		return
	}
	k := dispatcherVipKey{Family: e.Family}
	k.Addr.Addr = e.NatAddr.Addr
	d.applied.markers[markerKey(k, true)] += delta
}

// markerKey keys the marker counts: a return address's marker and a
// cluster address's count apart (the port field is free in a marker key).
func markerKey(k dispatcherVipKey, ret bool) dispatcherVipKey {
	k.Port, k.Proto = 0, 0
	if ret {
		k.Port = 1
	}
	return k
}

// writeVips writes a service's vips entries (and counts its cluster
// address's marker), removing those it no longer has (a protocol
// dropped).
func (d *Datapath) writeVips(s lb.DataplaneService, entries []vipEntry) error {
	a := &d.applied
	old, known := a.services[s.ID]
	want := map[dispatcherVipKey]bool{}
	for _, e := range entries {
		want[e.key] = true
		if cur, ok := a.vips[e.key]; ok && cur == e.meta {
			continue
		}
		if !known && !d.serviceKnown(s.ID) {
			if err := d.zeroServiceCounters(s.ID); err != nil {
				return err
			}
		}
		if err := d.putVip(&e.key, &e.meta); err != nil {
			return fmt.Errorf("writing vip %s: %w", vipString(e.key), err)
		}
		a.vips[e.key] = e.meta
	}
	if known {
		for _, e := range vipEntries(old) {
			if !want[e.key] {
				if err := d.delVip(&e.key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
					return fmt.Errorf("removing vip %s: %w", vipString(e.key), err)
				}
				delete(a.vips, e.key)
			}
		}
		a.markers[markerKey(clusterMarker(old), false)]--
	}
	a.markers[markerKey(clusterMarker(s), false)]++
	return nil
}

// clusterMarker is the vips key of a service's cluster-address marker.
func clusterMarker(s lb.DataplaneService) dispatcherVipKey {
	k := dispatcherVipKey{}
	k.Addr.Addr, k.Family = addrBytes(s.Cluster)
	return k
}

// removeService removes a service's vips entries, and its Maglev table
// by way of b.
func (d *Datapath) removeService(id uint32, b *tableBatch) error {
	a := &d.applied
	s, known := a.services[id]
	if known {
		for _, e := range vipEntries(s) {
			if e.meta.Flags != 0 {
				continue // the marker: counted
			}
			if err := d.delVip(&e.key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("removing vip %s: %w", vipString(e.key), err)
			}
			delete(a.vips, e.key)
		}
		a.markers[markerKey(clusterMarker(s), false)]--
		delete(a.services, id)
	} else {
		// Adopted: known only by its vips entries.
		for k, m := range a.vips {
			if m.Service != id || m.Flags != 0 {
				continue
			}
			if err := d.delVip(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("removing vip %s: %w", vipString(k), err)
			}
			delete(a.vips, k)
		}
	}
	return b.add(lb.DataplaneService{ID: id})
}

// syncMarkers writes the marker entries of cluster and return addresses
// that gained their first user, and removes those that lost their last.
// Markers found pinned and not counted by anything written since are
// removed too, once the whole state was applied.
func (d *Datapath) syncMarkers() error {
	a := &d.applied
	want := map[dispatcherVipKey]dispatcherVipMeta{}
	for k, n := range a.markers {
		if n <= 0 {
			delete(a.markers, k)
			continue
		}
		vk := k
		vk.Port = 0
		flags := uint32(dispatcherVipFlagsVIP_F_MARKER)
		if k.Port == 1 {
			flags = uint32(dispatcherVipFlagsVIP_F_RETURN)
		}
		if m, ok := want[vk]; ok {
			flags |= m.Flags
		}
		want[vk] = dispatcherVipMeta{Flags: flags}
	}
	for k, m := range want {
		// A cluster address that is also a return address is refused by
		// prepare; the flags may still combine while one replaces the
		// other within an update.
		if m.Flags&uint32(dispatcherVipFlagsVIP_F_MARKER) != 0 {
			m.Flags = uint32(dispatcherVipFlagsVIP_F_MARKER)
		}
		if cur, ok := a.vips[k]; ok && cur == m {
			continue
		}
		if err := d.putVip(&k, &m); err != nil {
			return fmt.Errorf("writing marker %s: %w", vipString(k), err)
		}
		a.vips[k] = m
	}
	if d.adopted {
		return nil
	}
	for k, m := range a.vips {
		if k.Proto != 0 || m.Flags&uint32(dispatcherVipFlagsVIP_F_MARKER|dispatcherVipFlagsVIP_F_RETURN) == 0 {
			continue
		}
		if _, ok := want[k]; ok {
			continue
		}
		if err := d.delVip(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("removing marker %s: %w", vipString(k), err)
		}
		delete(a.vips, k)
	}
	return nil
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
	if _, ok := d.applied.services[id]; ok {
		return true
	}
	if !d.adopted {
		return false
	}
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

// applyFilters rewrites the pre-filters if the set of cluster and return
// addresses changed. A reader racing with a write sees every bit that
// stays set, so no address is ever missed; a new bit is written before the
// vips entry it leads to is used (filters are written after the vips).
func (d *Datapath) applyFilters() error {
	vips := d.applied.vips
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
	mem, err := d.objs.BackendStats.Memory()
	if err != nil {
		return fmt.Errorf("zeroing counters of backend %d: mapping backend_stats: %w", id, err)
	}
	var zero dispatcherCounters
	size := int64(unsafe.Sizeof(zero))
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&zero)), size)
	stride := int64(d.objs.Backends.MaxEntries())
	for row := int64(0); row < int64(d.objs.BackendStats.MaxEntries())/stride; row++ {
		if _, err := mem.WriteAt(buf, (row*stride+int64(id))*size); err != nil {
			return fmt.Errorf("zeroing counters of backend %d: %w", id, err)
		}
	}
	if err := d.objs.BackendSwept.Update(id, uint64(0), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("zeroing counters of backend %d: %w", id, err)
	}
	delete(d.applied.swept, id)
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

// vipEntries returns the vips entries of a service: one per protocol.
// (Its cluster address's marker is counted apart: several services share
// it.)
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
		TableSize:     s.TableSize(),
	}
	var out []vipEntry
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
