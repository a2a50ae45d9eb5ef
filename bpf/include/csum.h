/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* This file contains incremental Internet checksum updates (RFC 1624,
 * eqn. 3: HC' = ~(~HC + ~m + m')), written out so that the NAT paths need
 * no helper call. Words are read raw from the packet (network byte order
 * seen as host integers): the ones'-complement sum does not care about
 * byte order as long as every word, the checksum included, is read the same
 * way. A change is accumulated as a 64-bit sum of (~old + new) terms over
 * 16- or 32-bit words, then applied to each checksum that covers the
 * changed words. */
#pragma once

#include <linux/types.h>

/* csum_fold folds a 64-bit ones'-complement accumulator into 16 bits. */
static __always_inline __u16 csum_fold(__u64 s)
{
	s = (s & 0xffffffffULL) + (s >> 32);
	s = (s & 0xffffffffULL) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)s;
}

/* csum_diff32 is the accumulator term of replacing 32-bit word old by new. */
static __always_inline __u64 csum_diff32(__u32 old, __u32 new)
{
	return (__u64)(__u32)~old + new;
}

/* csum_diff16 is the accumulator term of replacing 16-bit word old by new. */
static __always_inline __u64 csum_diff16(__u16 old, __u16 new)
{
	return (__u64)(__u16)~old + new;
}

/* csum_update returns checksum field check after changes whose
 * accumulated terms are d. */
static __always_inline __u16 csum_update(__u16 check, __u64 d)
{
	return (__u16)~csum_fold((__u64)(__u16)~check + d);
}

/* csum_update_udp is csum_update for a UDP checksum: 0 means "no
 * checksum" (IPv4) and stays 0, and a computed 0 is sent as 0xffff. */
static __always_inline __u16 csum_update_udp(__u16 check, __u64 d)
{
	if (!check)
		return 0;
	__u16 c = csum_update(check, d);
	return c ? c : 0xffff;
}
