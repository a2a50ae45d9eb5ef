/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* This file contains the executor's connection tables: hash tables made of
 * BPF arrays. A table is
 *
 *   - its entries (an array of entry_t, a key and a value each; the
 *     array's size is the table's capacity),
 *   - a bitmap of the entries in use (with a summary: a bit per bitmap
 *     word, set when the word is full), and a per-CPU cursor into it,
 *   - an index: buckets of DLB_TAB_WAYS ways (struct tab_bucket, one
 *     cache line), each way an 8-bit tag of a key's hash and the slot of
 *     that key's entry.
 *
 * Why not a BPF hash map. On the machines dlb was measured on, inserting
 * into a 262144-entry BPF hash map costs 400-700 ns and a miss lookup
 * 200-250 ns: the map's code runs a dozen kernel functions (each return
 * pays for the return-stack mitigations), takes a bucket lock with
 * interrupts off, and touches the bucket, the chain and the element it
 * reuses, each a cache miss in tens of megabytes. A new connection did
 * that three times.
 *
 * Here a lookup reads one cache line of the index and, when a tag
 * matches, the entry's line; a lookup that misses usually reads only the
 * index line. An insert writes its entry where the CPU's cursor is: the
 * entries of connections made one after the other lie one after the
 * other, so an insert writes a cache line the previous ones brought in
 * (a random one costs 150-250 ns on these machines, a TLB miss and a
 * memory read). When the words at the cursor are full (connections made
 * one after the other and still open), the summary shows where there is
 * room: a table counts as full only when the 131072 entries from the
 * cursor on are in use (TAB_SUMMARY_WORDS), not merely 1024. No kernel
 * function is called: everything is inlined, but the insert, a call of
 * its own, and a lookup that met another key's tag (one way in 254),
 * which is done again by a call (name_find).
 *
 * Keys. A key with hash h (tab_hash_*) has two candidate buckets, b1 and
 * b2 (tab_buckets), and a tag (tab_tag_pattern: 2-255). It is in one of
 * the ways of b1, or of b2 when b1 was nearly full at its insert and b2
 * emptier ("two choices": the index has about 1.4 ways per entry, and a
 * key's two buckets are full only when the table is; see TAB_SPARE). A
 * bucket that ever sent a key to its second bucket has TAB_F_OVERFLOW and
 * counts the key under its class (tab_spill_shift, one of 16) until it
 * leaves, and a lookup that misses in b1 reads b2 only when its key's
 * class count is not 0. A tag
 * matches a key's by chance once in 254 ways: the key of every way whose
 * tag matches is compared.
 *
 * Concurrency. A way is claimed by compare-and-exchange of its 64-bit word
 * (free, 0, to DLB_TAB_BUSY), and published when its entry is written by
 * adding the tag and slot; readers skip busy ways. An entry is allocated
 * by compare-and-exchange of its bitmap word. An insert holds the lock of
 * its key's first bucket from its second lookup to its publication, so
 * that a key whose first packets race on two CPUs is inserted once: the
 * second CPU finds the first one's entry. Values are updated in place, as
 * in BPF hash maps: a reader racing with an eviction or removal can see
 * the entry's next key and value for one packet. */
#pragma once

#include "dlb_abi.h"
#include "dlb_maps.h"
#include "hash.h"
#include "common.h"

#define TAB_WORDS (DLB_TAB_WAYS / 2)
#define TAB_TAGS 0xff000000ff000000ULL
#define TAB_TAG_ONES 0x0100000001000000ULL
#define TAB_TAG_HIGHS 0x8000000080000000ULL
#define TAB_SLOT_MASK 0xffffffU
/* How many times an insert reads a bucket lock another CPU holds before it
 * gives up (TAB_LOCKED): a MAC connection's packet is forwarded without an
 * entry, the next one inserts; a NAT insert tries again (TAB_INSERT_TRIES).
 * Between two reads it reads the clock, a pause of some nanoseconds: reads
 * of the lock alone, under a nanosecond each, gave up on a holder writing
 * its entry (a few cache misses) for 39 % of the flows whose first packets
 * raced on two CPUs (TestPrivilegedConcurrentFirstPackets), 1.6 % with the
 * pause. */
#define TAB_LOCK_SPINS 64
/* How many times a NAT insert (and a write from dlbd) tries a bucket
 * another CPU keeps locked before it gives up. The other CPU is most often
 * inserting the same connection (its handshake's ACK and first data
 * segment, or two datagrams of a new UDP flow, arrived on two CPUs at
 * once); once it is done, the insert finds its entry. What is left is a
 * holder stopped for longer (by an interrupt, say): 2-8 of 20,000 racing
 * UDP flows in that test, each losing a datagram. */
#define TAB_INSERT_TRIES 32
/* How many words of the bitmap (64 entries each) an allocation reads
 * from its cursor before it looks for room through the bitmap's summary. */
#define TAB_ALLOC_WORDS 16
/* How many words of the bitmap's summary (one bit per bitmap word, set
 * when the word is full) an allocation reads before it counts the table
 * as full: 32 cover 131072 entries, half of a table of the default size
 * (64 would cover it all, but cost 7 % more of the verifier's work at
 * every load of the executor). The summary follows the bitmap in its map
 * (pkg/datapath: tabUsedWords). */
#define TAB_SUMMARY_WORDS 32
/* Salt of the second bucket's hash. */
#define TAB_SALT 0x7461622bU /* "tab+" */

/* tab_mix finishes a table hash: every input bit reaches the 32 bits
 * returned. */
static __always_inline __u32 tab_mix(__u64 h)
{
	h ^= h >> 32;
	h *= 0xd6e8feb86659fd93ULL;
	h ^= h >> 32;
	return h;
}

/* tab_word64 reads 32-bit words i and i+1 of a key as one 64-bit word
 * (keys on the stack may be only 4-byte aligned). */
static __always_inline __u64 tab_word64(const __u32 *w, int i)
{
	return (__u64)w[i] | (__u64)w[i + 1] << 32;
}

/* tab_hash_flow is the table hash of a flow key: a sum of products of its
 * five 64-bit words with odd constants (independent multiplications, a
 * few ns; flow_hash is a chain of ten rounds), mixed. It also places the
 * flow in the handshake caches and picks its Maglev slot; pkg/datapath's
 * twin is FlowHash. */
static __always_inline __u32 tab_hash_flow(const struct flow_key *k, __u32 seed)
{
	const __u32 *w = (const __u32 *)k;

	return tab_mix(tab_word64(w, 0) * 0x9e3779b97f4a7c15ULL + tab_word64(w, 2) * 0xc2b2ae3d27d4eb4fULL +
		       tab_word64(w, 4) * 0x165667b19e3779f9ULL + tab_word64(w, 6) * 0x85ebca77c2b2ae63ULL +
		       tab_word64(w, 8) * 0x27d4eb2f165667c5ULL + seed);
}

/* tab_hash_natkey is the table hash of a NAT port key (return address,
 * port, protocol, family). */
static __always_inline __u32 tab_hash_natkey(const struct nat_key *k, __u32 seed)
{
	const __u32 *w = (const __u32 *)k;

	return tab_mix(tab_word64(w, 0) * 0x9e3779b97f4a7c15ULL + tab_word64(w, 2) * 0xc2b2ae3d27d4eb4fULL +
		       (__u64)w[4] * 0x165667b19e3779f9ULL + seed);
}

/* nat_key_eq compares two NAT port keys. */
static __always_inline int nat_key_eq(const struct nat_key *a, const struct nat_key *b)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;
	__u32 d = 0;

#pragma unroll
	for (int i = 0; i < 5; i++) {
		d |= x[i] ^ y[i];
		asm volatile("" : "+r"(d)); /* no branch per word (flow_key_eq) */
	}
	return d == 0;
}

/* tab_tag returns the tag of hash h (its low byte: the buckets come from
 * the high bits), 2-255, in the top byte of both halves of a word. */
static __always_inline __u64 tab_tag_pattern(__u32 h)
{
	__u64 t = h & 0xff;

	t = t < 2 ? t + 2 : t;
	return (t << 24) | (t << 56);
}

/* tab_spill_shift returns where a bucket's meta word counts the keys of
 * the class of hash h that sit in their second bucket (TAB_SPILL_SHIFT):
 * the class comes from hash bits that neither the buckets (the high bits)
 * nor the tag (the low byte) come from. */
static __always_inline __u32 tab_spill_shift(__u32 h)
{
	return TAB_SPILL_SHIFT + TAB_SPILL_BITS * ((h >> 12) & 15);
}

/* tab_spilled returns the count of keys of h's class whose first bucket
 * is b and which sit in their second: 0 when a key of hash h missing
 * from b is missing from the table. */
static __always_inline __u64 tab_spilled(const struct tab_bucket *b, __u32 h)
{
	return (b->meta >> tab_spill_shift(h)) & TAB_SPILL_MAX;
}

/* How many times a spill count's update tries again after another CPU
 * changed the bucket's meta word. */
#define TAB_SPILL_TRIES 8

/* tab_spill counts a key of hash h into (add 1) or out of (add 0) its
 * second bucket, in the spill count of its class in its first bucket, b1
 * (TAB_SPILL_SHIFT). A count at TAB_SPILL_MAX stays. A count that cannot
 * be raised (other CPUs kept changing the word) is set to TAB_SPILL_MAX,
 * one that cannot be lowered stays as it is: a count too high costs a
 * needless read of the second bucket, one too low would lose keys. Raised
 * before the key's way is published, lowered after it is removed. It
 * returns 1 when it changed the count. */
static __always_inline int tab_spill(struct tab_bucket *b1, __u32 h, __u32 add)
{
	__u32 sh = tab_spill_shift(h);

	for (int i = 0; i < TAB_SPILL_TRIES; i++) {
		__u64 m = *(volatile __u64 *)&b1->meta;
		__u64 c = (m >> sh) & TAB_SPILL_MAX;
		if (c == TAB_SPILL_MAX || (!add && c == 0))
			return 0;
		__u64 nm = add ? (m + (1ULL << sh)) | TAB_F_OVERFLOW : m - (1ULL << sh);
		if (__sync_val_compare_and_swap(&b1->meta, m, nm) == m)
			return 1;
	}
	if (add)
		__sync_fetch_and_or(&b1->meta, (__u64)TAB_SPILL_MAX << sh | TAB_F_OVERFLOW);
	return 0;
}

/* tab_range maps a hash onto [0, n) by multiplication (no division). */
static __always_inline __u32 tab_range(__u32 h, __u32 n)
{
	return ((__u64)h * n) >> 32;
}

/* tab_buckets computes the two buckets of hash h in an index of nb. */
static __always_inline void tab_buckets(__u32 h, __u32 nb, __u32 *n1, __u32 *n2)
{
	*n1 = tab_range(h, nb);
	*n2 = tab_range(dlb_fmix32(h ^ TAB_SALT), nb);
}

/* tab_match returns the ways of word w whose tag is pat's: bit 31 for the
 * low way, bit 63 for the high one. When the low way matches, the high one
 * may be reported too; callers check what they find. */
static __always_inline __u64 tab_match(__u64 w, __u64 pat)
{
	__u64 x = (w ^ pat) & TAB_TAGS;

	return (x - TAB_TAG_ONES) & ~x & TAB_TAG_HIGHS;
}

/* tab_way returns the 32-bit value of way i of bucket b. */
static __always_inline __u32 tab_way(const struct tab_bucket *b, __u32 i)
{
	__u32 w = i / 2;

	/* i < DLB_TAB_WAYS; the verifier wants to see it (and clang, who
	 * knows it too, must not drop the check). */
	asm volatile("" : "+r"(w));
	if (w >= TAB_WORDS)
		w = 0;
	return b->ways[w] >> (32 * (i % 2));
}

/* tab_wordp returns the word holding way i of bucket b. */
static __always_inline __u64 *tab_wordp(struct tab_bucket *b, __u32 i)
{
	__u32 w = i / 2;

	asm volatile("" : "+r"(w));
	if (w >= TAB_WORDS)
		w = 0;
	return &b->ways[w];
}

static __always_inline int tab_lock(struct tab_bucket *b)
{
	int locked = 0;

	for (int i = 0; i < TAB_LOCK_SPINS; i++) {
		__u64 m = *(volatile __u64 *)&b->meta;
		if (!(m & TAB_F_LOCK) && __sync_val_compare_and_swap(&b->meta, m, m | TAB_F_LOCK) == m) {
			locked = 1;
			break;
		}
		bpf_ktime_get_ns(); /* a pause: see TAB_LOCK_SPINS */
	}
	return locked;
}

static __always_inline void tab_unlock(struct tab_bucket *b)
{
	__sync_fetch_and_and(&b->meta, ~TAB_F_LOCK);
}

/* tab_ctz returns the index of the only bit set in bit. */
static __always_inline __u32 tab_ctz(__u64 bit)
{
	__u64 x = bit - 1;

	x = x - ((x >> 1) & 0x5555555555555555ULL);
	x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	return (x * 0x0101010101010101ULL) >> 56;
}

/* tab_free_ways returns a bit for each free way of bucket b (bit i: way
 * i), computed without a branch: a way's bit is 1 when its 32 bits are 0
 * (v - 1 borrows into bit 63 only for v == 0). */
static __always_inline __u32 tab_free_ways(const struct tab_bucket *b)
{
	__u32 m = 0;

#pragma unroll
	for (int w = 0; w < TAB_WORDS; w++) {
		__u64 v = b->ways[w];
		m |= (__u32)(((v & 0xffffffffULL) - 1) >> 63) << (2 * w);
		m |= (__u32)(((v >> 32) - 1) >> 63) << (2 * w + 1);
	}
	return m;
}

/* How many times tab_claim looks for a free way again after another CPU
 * took the one it chose. */
#define TAB_CLAIM_TRIES 8

/* tab_claim claims a free way of bucket b, the first: it returns the way,
 * now busy, or -1. The way is computed from the bucket's words, not
 * returned by a loop over them, so the verifier sees the same unknown way
 * on every path after it (a constant per way would make it check what
 * follows once per way). */
static __always_inline int tab_claim(struct tab_bucket *b)
{
	for (int n = 0; n < TAB_CLAIM_TRIES; n++) {
		__u32 m = tab_free_ways(b);
		if (!m)
			break;
		__u32 i = tab_ctz(m & -m);
		__u64 *wp = tab_wordp(b, i);
		__u32 sh = 32 * (i % 2);
		__u64 old = *wp;
		if ((__u32)(old >> sh) != 0)
			continue;
		if (__sync_val_compare_and_swap(wp, old, old | ((__u64)DLB_TAB_BUSY << 24) << sh) == old)
			return i;
	}
	return -1;
}

/* tab_used returns how many ways of bucket b are in use (or busy). */
static __always_inline __u32 tab_used(const struct tab_bucket *b)
{
	__u32 n = 0;

#pragma unroll
	for (int w = 0; w < TAB_WORDS; w++) {
		__u64 v = b->ways[w];
		/* 1 for a way that is not 0, without a branch. */
		n += (((v & 0xffffffffULL) + 0xffffffffULL) >> 32) + (((v >> 32) + 0xffffffffULL) >> 32);
	}
	return n;
}

/* TAB_SPARE: an insert prefers its key's first bucket until fewer than
 * this many of its ways are free; then the emptier of its two buckets.
 * Simulated, with 1.4 ways per entry: always the first bucket while it has
 * room, a 262144-entry table failed its first insert 56-67% full; this
 * way not before 99%, so a never-evicting table refuses connections only
 * when it is full, and most keys are in their first bucket (a miss reads
 * one index line). */
#define TAB_SPARE 3

/* tab_prefer_second reports whether an insert should try bucket b2 before
 * b1. */
static __always_inline int tab_prefer_second(const struct tab_bucket *b1, const struct tab_bucket *b2, __u32 n1,
					     __u32 n2)
{
	if (n1 == n2)
		return 0;
	__u32 u1 = tab_used(b1);
	return u1 > DLB_TAB_WAYS - TAB_SPARE && tab_used(b2) < u1;
}

/* tab_publish turns claimed (busy) way i of bucket b into the way of the
 * entry in slot, with tag pattern pat. */
static __always_inline void tab_publish(struct tab_bucket *b, __u32 i, __u64 pat, __u32 slot)
{
	__u64 v = (((pat >> 24) & 0xff) - DLB_TAB_BUSY) << 24 | slot;

	__sync_fetch_and_add(tab_wordp(b, i), v << (32 * (i % 2)));
}

/* tab_set replaces way i of bucket b, if its value is still old, by nw.
 * It returns 1 when it did. */
static __always_inline int tab_set(struct tab_bucket *b, __u32 i, __u32 old, __u32 nw)
{
	__u64 *wp = tab_wordp(b, i);
	__u32 sh = 32 * (i % 2);
	int done = 0;

	for (int n = 0; n < 4; n++) {
		__u64 w = *wp;
		if ((__u32)(w >> sh) != old)
			break;
		__u64 x = (w & ~(0xffffffffULL << sh)) | ((__u64)nw << sh);
		if (__sync_val_compare_and_swap(wp, w, x) == w) {
			done = 1;
			break;
		}
	}
	return done;
}

/* TAB_DEFINE defines the functions of table name: its entries map (of
 * entry_t, whose first member is key, a key_t), bitmap, cursor and index
 * maps, and key_eq comparing two key_t.
 *
 * name_find(k, h, nb, &pos, &slot) returns the entry of key k (table hash
 * h; nb index buckets) or NULL, the position of its way (bucket *
 * DLB_TAB_WAYS + way) in pos and its slot in slot. name_alloc(nw) allocates an entry (nw:
 * words of the bitmap) and returns its slot, or -1; name_free frees one;
 * name_unlink removes the way at pos if it still names slot. */
#define TAB_DEFINE(name, key_t, entry_t, entries_map, used_map, cursor_map, index_map, key_eq, words_field) \
	static __always_inline entry_t *name##_cand(__u32 v, const key_t *k, __u32 *slot)                      \
	{                                                                                                      \
		*slot = v & TAB_SLOT_MASK;                                                                     \
		entry_t *e = bpf_map_lookup_elem(&entries_map, slot);                                          \
		return e && key_eq(&e->key, k) ? e : NULL;                                                     \
	}                                                                                                      \
                                                                                                               \
	/* name_first reads the entry of the first way of bucket b (number n;    \
	 * pat: its tag pattern) whose tag is k's: the scan of the bucket is      \
	 * unrolled, but reads one entry, at one of two places (every entry read \
	 * is a helper call the kernel rewrites at load, copying the whole       \
	 * program).                                                             \
	 * It returns the entry if its key is k; else NULL, and clears *sure     \
	 * when a tag matched another key's (one way in 254), so that later ways \
	 * may hold k.                                                            */ \
	static __always_inline entry_t *name##_first(struct tab_bucket *b, __u32 n, __u64 pat, const key_t *k, \
						     __u32 *pos, __u32 *slot, __u8 *sure)                     \
	{                                                                                                      \
		__u64 x = 0, m = 0;                                                                            \
		__u32 wf = 0;                                                                                  \
		_Pragma("unroll") for (int w = 0; w < TAB_WORDS; w++)                                          \
		{                                                                                              \
			x = b->ways[w];                                                                        \
			m = tab_match(x, pat);                                                                 \
			wf = w;                                                                                \
			if (m)                                                                                 \
				break;                                                                         \
		}                                                                                              \
		if (!m)                                                                                        \
			return NULL;                                                                           \
		__u32 i = wf * 2;                                                                              \
		entry_t *e;                                                                                    \
		if (m & 0x80000000ULL) {                                                                       \
			e = name##_cand(x, k, slot);                                                           \
		} else {                                                                                       \
			/* Two reads, a branch between them: the entry's address   \
			 * then waits for the bucket's word only, not for the match \
			 * as well (one read of a computed half: 1 ns more on an    \
			 * established flow).                                       */ \
			asm volatile("" : "+r"(x));                                                            \
			e = name##_cand(x >> 32, k, slot);                                                     \
			i++;                                                                                   \
		}                                                                                              \
		if (!e) {                                                                                      \
			*sure = 0;                                                                             \
			return NULL;                                                                           \
		}                                                                                              \
		*pos = n * DLB_TAB_WAYS + i;                                                                   \
		return e;                                                                                      \
	}                                                                                                      \
                                                                                                               \
	/* name_probe_loop and name_probe_pos look k up in bucket b as loops    \
	 * (for the global functions, where they cost less stack).               */ \
	static __always_inline int name##_probe_loop(struct tab_bucket *b, __u32 n, __u64 pat, const key_t *k)  \
	{                                                                                                      \
		_Pragma("clang loop unroll(disable)") for (int w = 0; w < TAB_WORDS; w++)                      \
		{                                                                                              \
			__u64 v = b->ways[w];                                                                  \
			__u64 m = tab_match(v, pat);                                                           \
			__u32 slot;                                                                            \
			if (!m)                                                                                \
				continue;                                                                      \
			if ((m & 0x80000000ULL) && name##_cand(v, k, &slot))                                   \
				return slot;                                                                   \
			if ((m >> 63) && name##_cand(v >> 32, k, &slot))                                       \
				return slot;                                                                   \
		}                                                                                              \
		return -1;                                                                                     \
	}                                                                                                      \
                                                                                                               \
	static __always_inline long name##_probe_pos(struct tab_bucket *b, __u32 n, __u64 pat, const key_t *k)  \
	{                                                                                                      \
		_Pragma("clang loop unroll(disable)") for (int w = 0; w < TAB_WORDS; w++)                      \
		{                                                                                              \
			__u64 v = b->ways[w];                                                                  \
			__u64 m = tab_match(v, pat);                                                           \
			__u32 slot;                                                                            \
			if (!m)                                                                                \
				continue;                                                                      \
			if ((m & 0x80000000ULL) && name##_cand(v, k, &slot))                                   \
				return (long)(n * DLB_TAB_WAYS + w * 2) << 32 | slot;                          \
			if ((m >> 63) && name##_cand(v >> 32, k, &slot))                                       \
				return (long)(n * DLB_TAB_WAYS + w * 2 + 1) << 32 | slot;                      \
		}                                                                                              \
		return -1;                                                                                     \
	}                                                                                                      \
                                                                                                               \
	__noinline int dlb_##name##_emptied(__u32 word);                                                       \
                                                                                                               \
	/* dlb_name_unspill counts a key of hash h out of its second bucket    \
	 * (tab_spill) in its first, number n1. A global function: keys leave  \
	 * second buckets seldom.                                              */ \
	__noinline int dlb_##name##_unspill(__u32 n1, __u32 h)                                                 \
	{                                                                                                      \
		struct tab_bucket *b = bpf_map_lookup_elem(&index_map, &n1);                                   \
		return b ? tab_spill(b, h, 0) : 0;                                                             \
	}                                                                                                      \
                                                                                                               \
	/* name_summary marks bitmap word word full (or not) in the summary: \
	 * bit word % 64 of word nw + word / 64 of the bitmap map (nw: words   \
	 * of the bitmap itself). The summary is a hint: racing CPUs can leave \
	 * a bit wrong until the word next fills or empties, and name_alloc    \
	 * mends a full word it finds marked with room.                         */ \
	static __always_inline void name##_summary(__u32 nw, __u32 word, int full)                              \
	{                                                                                                      \
		__u32 i = nw + word / 64;                                                                      \
		__u64 *s = bpf_map_lookup_elem(&used_map, &i);                                                 \
		if (!s)                                                                                        \
			return;                                                                                \
		__u64 bit = 1ULL << (word % 64);                                                               \
		if (full && !(*s & bit))                                                                       \
			__sync_fetch_and_or(s, bit);                                                           \
		else if (!full && (*s & bit))                                                                  \
			__sync_fetch_and_and(s, ~bit);                                                         \
	}                                                                                                      \
                                                                                                               \
	/* name_take allocates an entry of bitmap word w (number word), or     \
	 * returns -1 when it is full or another CPU changed it meanwhile.     */ \
	static __always_inline int name##_take(__u32 nw, __u64 *w, __u32 word)                                 \
	{                                                                                                      \
		__u64 old = *w;                                                                                \
		if (old == ~0ULL)                                                                              \
			return -1;                                                                             \
		__u64 bit = ~old & (old + 1);                                                                  \
		if (__sync_val_compare_and_swap(w, old, old | bit) != old)                                     \
			return -1;                                                                             \
		if ((old | bit) == ~0ULL)                                                                      \
			name##_summary(nw, word, 1);                                                           \
		return word * 64 + tab_ctz(bit);                                                               \
	}                                                                                                      \
                                                                                                               \
	/* name_alloc takes a free entry at this CPU's cursor: in the first of \
	 * TAB_ALLOC_WORDS words from it that has one, else in a word the      \
	 * summary shows with room (TAB_SUMMARY_WORDS summary words read from  \
	 * the cursor's, at most) or the first word past those, where the      \
	 * cursor then goes. It returns -1 when every word it read is full (or \
	 * another CPU took the entry it found): not merely because the        \
	 * connections made one after the other, whose entries follow the      \
	 * cursor, are still open. The bitmap word's index is read from the    \
	 * cursor's memory, never from the stack: the verifier would track its \
	 * value through the loops, and check them once per value.             */ \
	static __always_inline int name##_alloc(__u32 nw)                                                      \
	{                                                                                                      \
		__u32 key0 = 0;                                                                                \
		__u32 *cur = bpf_map_lookup_elem(&cursor_map, &key0);                                          \
		if (!cur || !nw)                                                                               \
			return -1;                                                                             \
		/* Loops that only look, and a take after each: the verifier     \
		 * checks a take twice, not once per word read.                    */ \
		__u32 found = 0;                                                                               \
		for (int n = 0; n < TAB_ALLOC_WORDS; n++) {                                                    \
			if (*cur >= nw)                                                                        \
				*cur = 0;                                                                      \
			__u64 *w = bpf_map_lookup_elem(&used_map, cur);                                        \
			if (!w)                                                                                \
				return -1;                                                                     \
			if (*w != ~0ULL) {                                                                     \
				found = 1;                                                                     \
				break;                                                                         \
			}                                                                                      \
			*cur += 1;                                                                             \
		}                                                                                              \
		if (found) {                                                                                   \
			__u64 *w = bpf_map_lookup_elem(&used_map, cur);                                        \
			int s = w ? name##_take(nw, w, *cur) : -1;                                             \
			if (s >= 0)                                                                            \
				return s;                                                                      \
		}                                                                                              \
		/* The words at the cursor are full (or another CPU took the    \
		 * free entry): find a word with room in the summary.              */ \
		__u32 ns = (nw + 63) / 64;                                                                     \
		found = 0;                                                                                     \
		__u64 last = nw % 64 ? (1ULL << (nw % 64)) - 1 : ~0ULL;                                        \
		for (int n = 0; n < TAB_SUMMARY_WORDS; n++) {                                                  \
			if (*cur >= nw)                                                                        \
				*cur = 0;                                                                      \
			__u32 si = nw + *cur / 64;                                                             \
			__u64 *sw = bpf_map_lookup_elem(&used_map, &si);                                       \
			if (!sw)                                                                               \
				return -1;                                                                     \
			__u64 room = ~*sw;                                                                     \
			if (si - nw == ns - 1)                                                                 \
				room &= last;                                                                  \
			if (room) {                                                                            \
				*cur = (si - nw) * 64 + tab_ctz(room & -room);                                 \
				found = 1;                                                                     \
				break;                                                                         \
			}                                                                                      \
			*cur = (si - nw + 1) * 64;                                                             \
		}                                                                                              \
		/* The word found, or (none found) the first past those read. */ \
		if (*cur >= nw)                                                                                \
			*cur = 0;                                                                              \
		__u64 *w = bpf_map_lookup_elem(&used_map, cur);                                                \
		if (!w)                                                                                        \
			return -1;                                                                             \
		int s = name##_take(nw, w, *cur);                                                              \
		if (s < 0 && found && *w == ~0ULL)                                                             \
			name##_summary(nw, *cur, 1); /* mend it */                                             \
		return s;                                                                                      \
	}                                                                                                      \
                                                                                                               \
	static __always_inline void name##_free(__u32 slot)                                                    \
	{                                                                                                      \
		__u32 i = slot / 64;                                                                           \
		__u64 *w = bpf_map_lookup_elem(&used_map, &i);                                                 \
		if (!w)                                                                                        \
			return;                                                                                \
		if (__sync_fetch_and_and(w, ~(1ULL << (slot % 64))) == ~0ULL)                                  \
			dlb_##name##_emptied(i);                                                               \
	}                                                                                                      \
                                                                                                               \
	/* dlb_name_emptied clears the summary bit of bitmap word word, which \
	 * was full and is no longer. A global function: name_free is inlined \
	 * in every path that removes an entry, and this is seldom needed.     */ \
	__noinline int dlb_##name##_emptied(__u32 word)                                                        \
	{                                                                                                      \
		__u32 key0 = 0;                                                                                \
		const struct dlb_config *cfg = bpf_map_lookup_elem(&config, &key0);                            \
		if (cfg)                                                                                       \
			name##_summary(cfg->words_field, word, 0);                                             \
		return 0;                                                                                      \
	}                                                                                                      \
                                                                                                               \
	static __always_inline int name##_unlink(__u32 pos, __u32 slot)                                        \
	{                                                                                                      \
		__u32 n = pos / DLB_TAB_WAYS, i = pos % DLB_TAB_WAYS;                                          \
		struct tab_bucket *b = bpf_map_lookup_elem(&index_map, &n);                                    \
		if (!b)                                                                                        \
			return 0;                                                                              \
		__u32 v = tab_way(b, i);                                                                       \
		if ((v & TAB_SLOT_MASK) != slot || (v >> 24) <= DLB_TAB_BUSY)                                  \
			return 0;                                                                              \
		return tab_set(b, i, v, 0);                                                                    \
	}                                                                                                      \
                                                                                                               \
	/* dlb_name_delete removes the entry in slot, whose way is at pos       \
	 * (found by its key, of table hash h; nb index buckets), unless another \
	 * CPU took it meanwhile; it returns 1 when it did. A global function:  \
	 * every inlined map lookup is a rewrite of the whole program when the  \
	 * kernel loads it, and removals are not on a packet's fast path.       */ \
	__noinline int dlb_##name##_delete(__u32 pos, __u32 slot, __u32 h, __u32 nb)                           \
	{                                                                                                      \
		if (!name##_unlink(pos, slot))                                                                 \
			return 0;                                                                              \
		__u32 n1 = tab_range(h, nb);                                                                   \
		if (pos / DLB_TAB_WAYS != n1)                                                                  \
			dlb_##name##_unspill(n1, h);                                                           \
		name##_free(slot);                                                                             \
		return 1;                                                                                      \
	}                                                                                                      \
                                                                                                               \
	/* name_delete is dlb_name_delete. */                                   \
	static __always_inline int name##_delete(__u32 pos, __u32 slot, __u32 h, __u32 nb)                     \
	{                                                                                                      \
		return dlb_##name##_delete(pos, slot, h, nb);                                                  \
	}                                                                                                      \
                                                                                                               \
	/* dlb_name_lookup is name_find as a global function (verified once; a \
	 * call costs a few ns), for the less frequent paths: it returns the    \
	 * way's position << 32 | the entry's slot, or -1. */                   \
	__noinline long dlb_##name##_lookup(const key_t *k, __u32 h, __u32 nb)                                 \
	{                                                                                                      \
		__u32 n1, n2;                                                                                  \
		if (!k)                                                                                        \
			return -1;                                                                             \
		tab_buckets(h, nb, &n1, &n2);                                                                  \
		__u64 pat = tab_tag_pattern(h);                                                                \
		struct tab_bucket *b = bpf_map_lookup_elem(&index_map, &n1);                                   \
		if (!b)                                                                                        \
			return -1;                                                                             \
		long r = name##_probe_pos(b, n1, pat, k);                                                      \
		if (r >= 0 || !tab_spilled(b, h))                                                        \
			return r;                                                                              \
		b = bpf_map_lookup_elem(&index_map, &n2);                                                      \
		if (!b)                                                                                        \
			return -1;                                                                             \
		return name##_probe_pos(b, n2, pat, k);                                                        \
	}                                                                                                      \
                                                                                                               \
	static __always_inline entry_t *name##_find_call(const key_t *k, __u32 h, __u32 nb, __u32 *pos,        \
							 __u32 *slot)                                          \
	{                                                                                                      \
		long r = dlb_##name##_lookup(k, h, nb);                                                        \
		if (r < 0)                                                                                     \
			return NULL;                                                                           \
		*pos = r >> 32;                                                                                \
		*slot = (__u32)r;                                                                              \
		return bpf_map_lookup_elem(&entries_map, slot);                                                \
	}                                                                                                      \
                                                                                                               \
	/* name_find_first: the first way of k's first bucket whose tag        \
	 * matches, then of its second if the first counts keys of k's class    \
	 * there (tab_spilled). It returns NULL and clears *sure (1             \
	 * on entry) when a tag matched another key's: then only a lookup of    \
	 * every matching way (name_find, name_find_call) can tell.              */ \
	static __always_inline entry_t *name##_find_first(const key_t *k, __u32 h, __u32 nb, __u32 *pos,        \
							  __u32 *slot, __u8 *sure)                             \
	{                                                                                                      \
		__u32 n1, n2;                                                                                  \
		tab_buckets(h, nb, &n1, &n2);                                                                  \
		struct tab_bucket *b = bpf_map_lookup_elem(&index_map, &n1);                                   \
		if (!b)                                                                                        \
			return NULL;                                                                           \
		__u64 pat = tab_tag_pattern(h);                                                                \
		entry_t *e = name##_first(b, n1, pat, k, pos, slot, sure);                                     \
		if (e || !*sure || !tab_spilled(b, h))                                                   \
			return e;                                                                              \
		b = bpf_map_lookup_elem(&index_map, &n2);                                                      \
		if (!b)                                                                                        \
			return NULL;                                                                           \
		return name##_first(b, n2, pat, k, pos, slot, sure);                                           \
	}                                                                                                      \
                                                                                                               \
	/* name_find(k, h, nb, &pos, &slot): name_find_first, and the whole     \
	 * lookup as a call when a tag matched another key's.                   */ \
	static __always_inline entry_t *name##_find(const key_t *k, __u32 h, __u32 nb, __u32 *pos, __u32 *slot) \
	{                                                                                                      \
		__u8 sure = 1;                                                                                 \
		entry_t *e = name##_find_first(k, h, nb, pos, slot, &sure);                                    \
		return sure ? e : name##_find_call(k, h, nb, pos, slot);                                       \
	}

/* Results of the inserts. */
enum tab_insert_result {
	TAB_INSERTED = 0, /* a new entry */
	TAB_EXISTS = 1,   /* the key has an entry (another CPU inserted it, or the port is taken) */
	TAB_FAILED = 2,   /* no entry: the table is full */
	TAB_LOCKED = 3,   /* no entry: another CPU kept the key's first bucket locked (TAB_LOCK_SPINS) */
};

/* TAB_INSERT_RETRY runs call, an insert, again while it says TAB_LOCKED,
 * TAB_INSERT_TRIES times at most; its value is the last result. */
#define TAB_INSERT_RETRY(call)                                                    \
	({                                                                        \
		int r_ = TAB_LOCKED;                                              \
		for (int i_ = 0; i_ < TAB_INSERT_TRIES && r_ == TAB_LOCKED; i_++) \
			r_ = (call);                                              \
		r_;                                                               \
	})

/* TAB_INSERT defines dlb_name_insert for table name (of TAB_DEFINE), which
 * never evicts: it inserts a->e (table hash a->hash) into a free way of
 * its key's first bucket, else of its second, and a free entry at this
 * CPU's cursor, or fails when there is none. It returns a
 * tab_insert_result and the entry's slot in a->slot (the existing one's
 * for TAB_EXISTS). A global function, verified once. */
#define TAB_INSERT(name, ins_t, entries_map, index_map, buckets_field, words_field)                         \
	__noinline int dlb_##name##_insert(ins_t *a)                                                           \
	{                                                                                                      \
		__u32 key0 = 0;                                                                                \
		const struct dlb_config *cfg = bpf_map_lookup_elem(&config, &key0);                            \
		if (!a || !cfg)                                                                                \
			return TAB_FAILED;                                                                     \
		__u32 h = a->hash, n1, n2;                                                                     \
		tab_buckets(h, cfg->buckets_field, &n1, &n2);                                                  \
		struct tab_bucket *b1 = bpf_map_lookup_elem(&index_map, &n1);                                  \
		struct tab_bucket *b2 = bpf_map_lookup_elem(&index_map, &n2);                                  \
		if (!b1 || !b2)                                                                                \
			return TAB_FAILED;                                                                     \
		if (!tab_lock(b1))                                                                             \
			return TAB_LOCKED;                                                                     \
		int res = TAB_FAILED;                                                                          \
		__u64 pat = tab_tag_pattern(h);                                                                \
		int s = name##_probe_loop(b1, n1, pat, &a->e.key);                                             \
		if (s < 0 && tab_spilled(b1, h))                                                               \
			s = name##_probe_loop(b2, n2, pat, &a->e.key);                                         \
		if (s >= 0) {                                                                                  \
			a->slot = s;                                                                           \
			res = TAB_EXISTS;                                                                      \
			goto out;                                                                              \
		}                                                                                              \
		int second = tab_prefer_second(b1, b2, n1, n2);                                                \
		struct tab_bucket *b = second ? b2 : b1;                                                       \
		int way = tab_claim(b);                                                                        \
		if (way < 0) {                                                                                 \
			b = second ? b1 : b2;                                                                  \
			way = tab_claim(b);                                                                    \
		}                                                                                              \
		if (way < 0)                                                                                   \
			goto out;                                                                              \
		s = name##_alloc(cfg->words_field);                                                            \
		__u32 slot = s;                                                                                \
		void *e = s < 0 ? NULL : bpf_map_lookup_elem(&entries_map, &slot);                             \
		if (!e) {                                                                                      \
			tab_set(b, way, DLB_TAB_BUSY << 24, 0);                                                \
			goto out;                                                                              \
		}                                                                                              \
		/* Typed, so that clang copies in 8-byte words: through the void                               \
		 * pointer it copied a byte at a time (160-192 instructions). */                               \
		__builtin_memcpy((typeof(a->e) *)e, &a->e, sizeof(a->e));                                      \
		if (b != b1)                                                                                   \
			tab_spill(b1, h, 1);                                                                   \
		tab_publish(b, way, pat, slot);                                                                \
		a->slot = slot;                                                                                \
		res = TAB_INSERTED;                                                                            \
	out:                                                                                                   \
		tab_unlock(b1);                                                                                \
		return res;                                                                                    \
	}

/* The MAC connection table. */
TAB_DEFINE(conn, struct flow_key, struct conn_entry, conns, conn_used, conn_cursor, conn_index, flow_key_eq,
	   conn_words)

/* The NAT tables: client flows and return-address ports. */
TAB_DEFINE(natf, struct flow_key, struct nat_flow_entry, nat_flows, nat_flow_used, nat_flow_cursor, nat_flow_index,
	   flow_key_eq, natf_words)
TAB_INSERT(natf, struct natf_ins, nat_flows, nat_flow_index, natf_buckets, natf_words)
TAB_DEFINE(natp, struct nat_key, struct nat_port_entry, nat_ports, nat_port_used, nat_port_cursor, nat_port_index,
	   nat_key_eq, natp_words)
TAB_INSERT(natp, struct natp_ins, nat_ports, nat_port_index, natp_buckets, natp_words)

/* CONN_NOT_LIVE is conn_idle's answer for an entry no connection holds. */
#define CONN_NOT_LIVE (~0ULL)

/* conn_idle returns how long the entry in slot has been idle at now, with
 * closing connections counted as idle for longer than any open one (the
 * first an eviction takes), or CONN_NOT_LIVE. */
static __always_inline __u64 conn_idle(__u32 slot, __u64 now)
{
	struct conn_entry *e = bpf_map_lookup_elem(&conns, &slot);

	if (!e || (e->flow.state != FLOW_ESTABLISHED && e->flow.state != FLOW_CLOSING))
		return CONN_NOT_LIVE;
	__u64 idle = now > e->flow.last_seen ? now - e->flow.last_seen : 0;
	return e->flow.state == FLOW_CLOSING ? idle | (1ULL << 62) : idle;
}

/* How many entries an insert into a full table (or a full bucket pair)
 * looks at to choose the one it evicts: the one idle longest (a sampled
 * LRU). */
#define CONN_EVICT_SAMPLES 4

/* conn_unlink_entry removes the index way of the entry in slot (the
 * caller took it away from its connection). It returns 1 when it found
 * it. */
static __always_inline int conn_unlink_entry(const struct dlb_config *cfg, __u32 slot)
{
	struct conn_entry *e = bpf_map_lookup_elem(&conns, &slot);

	if (!e)
		return 0;
	__u32 h = tab_hash_flow(&e->key, cfg->hash_seed), n[2];
	tab_buckets(h, cfg->conn_buckets, &n[0], &n[1]);
#pragma unroll
	for (int j = 0; j < 2; j++) {
		struct tab_bucket *b = bpf_map_lookup_elem(&conn_index, &n[j]);
		if (!b)
			continue;
		for (int i = 0; i < DLB_TAB_WAYS; i++) {
			__u32 v = tab_way(b, i);
			if ((v & TAB_SLOT_MASK) != slot || (v >> 24) <= DLB_TAB_BUSY)
				continue;
			int done = tab_set(b, i, v, 0);
			/* The key leaves its second bucket. */
			if (done && j == 1 && n[0] != n[1])
				dlb_conn_unspill(n[0], h);
			return done;
		}
	}
	return 0;
}

/* dlb_conn_insert inserts a->e (its key's table hash a->hash): a free way
 * of its first bucket, else of its second, and a free entry at this CPU's
 * cursor. When the key's buckets are full it takes the way (and entry) of
 * the longest idle of a few of their entries; when the entries are all in
 * use, the longest idle of a few at the cursor. It returns a
 * tab_insert_result and the entry's slot in a->slot. A global function:
 * the verifier checks its loops once, not at each caller (an insert
 * happens once per connection; the call costs a few ns). */
__noinline int dlb_conn_insert(struct conn_ins *a)
{
	__u32 key0 = 0;
	const struct dlb_config *cfg = bpf_map_lookup_elem(&config, &key0);

	if (!a || !cfg)
		return TAB_FAILED;
	__u32 h = a->hash, n1, n2;
	tab_buckets(h, cfg->conn_buckets, &n1, &n2);
	struct tab_bucket *b1 = bpf_map_lookup_elem(&conn_index, &n1);
	struct tab_bucket *b2 = bpf_map_lookup_elem(&conn_index, &n2);
	if (!b1 || !b2)
		return TAB_FAILED;
	if (!tab_lock(b1))
		return TAB_LOCKED;

	int res = TAB_FAILED;
	__u64 pat = tab_tag_pattern(h);
	__u64 now = a->e.flow.last_seen;
	int found = conn_probe_loop(b1, n1, pat, &a->e.key);
	if (found < 0 && tab_spilled(b1, h))
		found = conn_probe_loop(b2, n2, pat, &a->e.key);
	if (found >= 0) {
		a->slot = found;
		res = TAB_EXISTS;
		goto out;
	}
	struct conn_entry *e;

	int second = tab_prefer_second(b1, b2, n1, n2);
	struct tab_bucket *b = second ? b2 : b1;
	int way = tab_claim(b), slot = -1;
	if (way < 0) {
		b = second ? b1 : b2;
		way = tab_claim(b);
	}
	if (way < 0) {
		/* Both buckets are full: take the way of the longest idle of
		 * a few of their entries, and its entry. */
		__u64 best = 0;
		struct tab_bucket *vb = NULL;
		int vw = -1;
		__u32 off = (h >> 8) % DLB_TAB_WAYS;
#pragma unroll
		for (int i = 0; i < CONN_EVICT_SAMPLES; i++) {
			struct tab_bucket *cb = i % 2 ? b2 : b1;
			__u32 wi = (off + i / 2 * (DLB_TAB_WAYS / 2)) % DLB_TAB_WAYS;
			__u32 v = tab_way(cb, wi);
			if ((v >> 24) <= DLB_TAB_BUSY)
				continue;
			__u64 d = conn_idle(v & TAB_SLOT_MASK, now);
			if (d != CONN_NOT_LIVE && (vw < 0 || d > best)) {
				best = d;
				vb = cb;
				vw = wi;
			}
		}
		if (!vb || vw < 0)
			goto out;
		__u32 v = tab_way(vb, vw);
		if ((v >> 24) <= DLB_TAB_BUSY || !tab_set(vb, vw, v, DLB_TAB_BUSY << 24))
			goto out;
		b = vb;
		way = vw;
		slot = v & TAB_SLOT_MASK;
		/* Its key leaves its second bucket if vb was that. */
		__u32 vs = slot;
		struct conn_entry *ve = bpf_map_lookup_elem(&conns, &vs);
		if (ve) {
			__u32 vh = tab_hash_flow(&ve->key, cfg->hash_seed);
			__u32 vn1 = tab_range(vh, cfg->conn_buckets);
			if (vn1 != (vb == b1 ? n1 : n2))
				dlb_conn_unspill(vn1, vh);
		}
	}
	if (slot < 0)
		slot = conn_alloc(cfg->conn_words);
	if (slot < 0) {
		/* Every entry is in use: take the longest idle of a few at
		 * this CPU's cursor. */
		__u32 cur = 0, *cp = bpf_map_lookup_elem(&conn_cursor, &key0);
		if (cp && *cp < cfg->conn_words)
			cur = *cp;
		/* The entries of the cursor's bitmap word (fewer in the last
		 * word of a table whose size is no multiple of 64). */
		__u32 n = cfg->conn_entries > cur * 64 ? cfg->conn_entries - cur * 64 : 1;
		n = n < 64 ? n : 64;
		__u32 step = n / CONN_EVICT_SAMPLES ? n / CONN_EVICT_SAMPLES : 1;
		__u64 best = 0;
		/* Only entries in use: a freed entry keeps its contents. */
		__u64 *uw = bpf_map_lookup_elem(&conn_used, &cur);
		__u64 inuse = uw ? *uw : 0;
#pragma unroll
		for (int i = 0; i < CONN_EVICT_SAMPLES; i++) {
			__u32 s = cur * 64 + ((h >> 8) + i * step) % n;
			if (!(inuse >> (s % 64) & 1))
				continue;
			__u64 d = conn_idle(s, now);
			if (d != CONN_NOT_LIVE && (slot < 0 || d > best)) {
				best = d;
				slot = s;
			}
		}
		if (slot < 0 || !conn_unlink_entry(cfg, slot)) {
			tab_set(b, way, DLB_TAB_BUSY << 24, 0);
			slot = -1;
			goto out;
		}
	}
	__u32 s = slot;
	e = bpf_map_lookup_elem(&conns, &s);
	if (!e) {
		tab_set(b, way, DLB_TAB_BUSY << 24, 0);
		goto out;
	}
	__builtin_memcpy(e, &a->e, sizeof(*e));
	if (b != b1)
		tab_spill(b1, h, 1);
	tab_publish(b, way, pat, s);
	a->slot = s;
	res = TAB_INSERTED;
out:
	tab_unlock(b1);
	return res;
}

