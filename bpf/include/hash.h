/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* This file contains flow_hash, MurmurHash3 (x86, 32-bit) over the ten
 * 32-bit words of a flow_key, read in host byte order, seeded: the hash of
 * a client subnet (affinity_hash) and of a flow's NAT port candidates
 * (nat_candidate), which pkg/datapath's twins (AffinityHash,
 * NATCandidates) must match. A new flow's Maglev slot comes from the
 * cheaper connection-table hash (table.h, tab_hash_flow; the Go twin is
 * FlowHash), which every packet to a cluster address computes anyway. */
#pragma once

#include <linux/types.h>
#include "dlb_abi.h"

static __always_inline __u32 dlb_rotl32(__u32 x, int r)
{
	return (x << r) | (x >> (32 - r));
}

/* dlb_fmix32 is MurmurHash3's finaliser: every input bit affects every
 * output bit. */
static __always_inline __u32 dlb_fmix32(__u32 h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bU;
	h ^= h >> 13;
	h *= 0xc2b2ae35U;
	h ^= h >> 16;
	return h;
}

#define FLOW_KEY_WORDS (sizeof(struct flow_key) / sizeof(__u32))

/* flow_hash hashes a whole flow key with a seed. */
static __always_inline __u32 flow_hash(const struct flow_key *k, __u32 seed)
{
	const __u32 *w = (const __u32 *)k;
	__u32 h = seed;

#pragma unroll
	for (int i = 0; i < FLOW_KEY_WORDS; i++) {
		__u32 x = w[i];
		x *= 0xcc9e2d51U;
		x = dlb_rotl32(x, 15);
		x *= 0x1b873593U;
		h ^= x;
		h = dlb_rotl32(h, 13);
		h = h * 5 + 0xe6546b64U;
	}
	h ^= sizeof(struct flow_key);
	return dlb_fmix32(h);
}

/* kept_mask returns v & mask with the AND left in the program: clang drops a
 * mask it knows is redundant, but older verifiers (Linux 6.1's) lose the
 * bounds clang relies on (through an XOR, a byte swap) and refuse an
 * unmasked value as an index or a packet offset. The empty asm hides v from
 * clang, so the AND stays. */
static __always_inline __u32 kept_mask(__u32 v, __u32 mask)
{
	asm volatile("" : "+r"(v));
	return v & mask;
}

/* vip_filter_bit folds an address into a bit index of the VIP pre-filter.
 * addr is an IPv4 address (network byte order, read as a host u32), or the
 * XOR of an IPv6 address's four words read the same way (ip6_fold). The
 * pkg/datapath twin is FilterBit. */
static __always_inline __u32 vip_filter_bit(__u32 addr)
{
	/* The XOR of two 16-bit halves needs no mask to clang, but Linux 6.1's
	 * verifier does not bound it. */
	return kept_mask(addr ^ (addr >> 16), VIP_FILTER_BITS - 1);
}

/* ip6_fold XORs the four words of an IPv6 address. */
static __always_inline __u32 ip6_fold(const __u32 *w)
{
	return w[0] ^ w[1] ^ w[2] ^ w[3];
}

/* NAT_HASH_SALT makes the NAT port hash independent of the Maglev one. */
#define NAT_HASH_SALT 0x6e617470U /* "natp" */

/* nat_candidate returns candidate i (0 <= i < DLB_NAT_CANDIDATES) of a NAT
 * port in the pool [min, min+size) for a flow whose NAT hash is h
 * (flow_hash(client flow, seed ^ NAT_HASH_SALT)). The candidates are fixed
 * per flow, so a retransmitted SYN tries the same ports in the same order.
 * pkg/datapath has the twin (natCandidate). */
static __always_inline __u16 nat_candidate(__u32 h, __u32 i, __u32 min, __u32 size)
{
	return min + dlb_fmix32(h + i * 0x9e3779b9U) % size;
}
