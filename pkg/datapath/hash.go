//go:build linux

package datapath

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
	"unsafe"
)

// FlowKey is a flow as the client sent it, in host terms.
type FlowKey struct {
	// Src and Dst are the client and cluster addresses.
	Src, Dst netip.Addr
	// SrcPort and DstPort are the client and cluster ports.
	SrcPort, DstPort uint16
	// Proto is the IP protocol number (6 or 17).
	Proto uint8
}

func (k FlowKey) raw() dispatcherFlowKey {
	var fk dispatcherFlowKey
	fk.Src.Addr, fk.Family = addrBytes(k.Src)
	fk.Dst.Addr, _ = addrBytes(k.Dst)
	fk.Sport = htons(k.SrcPort)
	fk.Dport = htons(k.DstPort)
	fk.Proto = k.Proto
	return fk
}

// FlowHash returns the hash the executor computes for a flow (tab_hash_flow
// in bpf/include/table.h), which places it in the connection table and
// the handshake cache. A new flow takes Maglev slot FlowHash(k, seed) % M.
func FlowHash(k FlowKey, seed uint32) uint32 {
	return tableHash(k.raw(), seed)
}

// rawHash is flow_hash (bpf/include/hash.h, MurmurHash3 x86_32 over the
// key's ten words) over a raw key.
func rawHash(fk dispatcherFlowKey, seed uint32) uint32 {
	b := unsafe.Slice((*byte)(unsafe.Pointer(&fk)), unsafe.Sizeof(fk))
	h := seed
	for i := 0; i+4 <= len(b); i += 4 {
		x := binary.LittleEndian.Uint32(b[i:])
		x *= 0xcc9e2d51
		x = bits.RotateLeft32(x, 15)
		x *= 0x1b873593
		h ^= x
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
	}
	h ^= uint32(len(b))
	return fmix32(h)
}

// tableHash is tab_hash_flow of bpf/include/table.h: the connection
// table's hash of a flow, which also places it in the MAC handshake cache
// and picks its Maglev slot.
func tableHash(fk dispatcherFlowKey, seed uint32) uint32 {
	b := unsafe.Slice((*byte)(unsafe.Pointer(&fk)), unsafe.Sizeof(fk))
	primes := [5]uint64{0x9e3779b97f4a7c15, 0xc2b2ae3d27d4eb4f, 0x165667b19e3779f9, 0x85ebca77c2b2ae63, 0x27d4eb2f165667c5}
	var h uint64
	for i, p := range primes {
		h += binary.LittleEndian.Uint64(b[8*i:]) * p
	}
	h += uint64(seed)
	h ^= h >> 32
	h *= 0xd6e8feb86659fd93
	h ^= h >> 32
	return uint32(h)
}

func fmix32(h uint32) uint32 {
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// FilterBit returns the VIP pre-filter bit of an IPv4 or IPv6 address, as
// the executor computes it (vip_filter_bit and ip6_fold in bpf/include/
// hash.h).
func FilterBit(a netip.Addr) uint32 {
	raw, _ := addrBytes(a)
	w := binary.LittleEndian.Uint32(raw[0:]) ^ binary.LittleEndian.Uint32(raw[4:]) ^
		binary.LittleEndian.Uint32(raw[8:]) ^ binary.LittleEndian.Uint32(raw[12:])
	return (w ^ w>>16) & (uint32(len(dispatcherVipBloom{}.Bits))*64 - 1)
}

// natHashSalt is NAT_HASH_SALT of bpf/include/hash.h.
const natHashSalt = 0x6e617470

// NATCandidates returns the NAT ports the executor tries, in order, for a
// new connection of flow k on a return address with pool [min, max]
// (nat_candidate in bpf/include/hash.h): the first one free is taken. The
// first DLB_NAT_CANDIDATES are tried with the SYN-flood rule (the oldest
// reservation among them is displaced); the rest only when connections
// hold all of those.
func NATCandidates(k FlowKey, seed uint32, min, max uint16) []uint16 {
	h := rawHash(k.raw(), seed^natHashSalt)
	size := uint32(max) - uint32(min) + 1
	out := make([]uint16, dispatcherDlbConstsDLB_NAT_CANDIDATES_MAX)
	for i := range out {
		out[i] = uint16(uint32(min) + fmix32(h+uint32(i)*0x9e3779b9)%size)
	}
	return out
}

// affinityKey returns the affinity key of a client (affinity_key_of in
// bpf/include/schedule.h): the address masked to the service's prefix.
func affinityKey(client netip.Addr, group uint32, mask4, mask6 uint8) dispatcherAffinityKey {
	var ak dispatcherAffinityKey
	bits := 32
	if client.Is6() && !client.Is4In6() {
		bits = 128
		if mask6 != 0 && mask6 < 128 {
			bits = int(mask6)
		}
	} else if mask4 != 0 && mask4 < 32 {
		bits = int(mask4)
	}
	p, _ := client.Unmap().Prefix(bits)
	ak.Client.Addr, ak.Family = addrBytes(p.Addr())
	ak.Group = group
	return ak
}

// AffinityHash returns the hash by which an affinity service picks the
// Maglev slot of a client without a usable record (affinity_hash in bpf/
// include/schedule.h): a new client of such a service takes slot
// AffinityHash(...) % M, whatever its port.
func AffinityHash(client netip.Addr, group uint32, mask4, mask6 uint8, seed uint32) uint32 {
	ak := affinityKey(client, group, mask4, mask6)
	var fk dispatcherFlowKey
	fk.Src.Addr = ak.Client.Addr
	binary.LittleEndian.PutUint32(fk.Dst.Addr[:4], ak.Group)
	fk.Family = ak.Family
	return rawHash(fk, seed)
}
