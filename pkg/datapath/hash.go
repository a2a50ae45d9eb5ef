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

// FlowHash returns the hash the executor computes for a flow (bpf/include/
// hash.h): MurmurHash3 x86_32 over the key's ten words. A new flow takes
// Maglev slot FlowHash(k, seed) % M.
func FlowHash(k FlowKey, seed uint32) uint32 {
	fk := k.raw()
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
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// FilterBit returns the VIP pre-filter bit of an IPv4 address, as the
// executor computes it (vip_filter_bit in bpf/include/hash.h).
func FilterBit(a netip.Addr) uint32 {
	v4 := a.As4()
	w := binary.LittleEndian.Uint32(v4[:])
	return (w ^ w>>16) & (uint32(len(dispatcherVipBloom{}.Bits))*64 - 1)
}
