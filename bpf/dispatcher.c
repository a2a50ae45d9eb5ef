// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Copyright The dlb Authors.
 *
 * The dlb executor: an XDP program that balances TCP and UDP connections to
 * cluster addresses over servers, by MAC forwarding (direct server return)
 * or NAT/NAPT, for IPv4 and IPv6.
 *
 * For each packet: parse Ethernet (up to two VLAN tags), IPv4 or IPv6 (with
 * its extension headers), TCP/UDP; if it is addressed to a balanced cluster
 * address, port and protocol, find its connection in the connection tables
 * or pick a server (affinity record, else the service's Maglev table) and
 * send it on (MAC rewrite; for NAT also addresses, ports and checksums). A
 * reply to a NAT return address is translated back to its client; an ICMP
 * error about a known flow goes to the flow's server or client (icmp.h).
 * Everything else passes to the host stack byte for byte. Every packet is
 * counted under exactly one stat_reason.
 *
 * Policy for packets that cannot be balanced safely, when addressed to a
 * cluster or return address: an IPv4 fragment or an IPv6 packet with a
 * fragment header is dropped (STAT_DROP_FRAGMENT); a packet with IPv4
 * options is dropped (STAT_DROP_IP_OPTIONS); an IPv6 packet whose
 * extension headers the executor does not walk (more than
 * DLB_IPV6_MAX_EXT hop-by-hop, destination-options or routing headers, or
 * a routing header with segments left) is dropped (STAT_DROP_IPV6_EXT).
 * The same packets to any other address pass untouched: the extension
 * headers of a non-cluster IPv6 packet are not even read, so the non-VIP
 * path stays one Bloom-filter read for both families. Truncated or invalid
 * headers pass (STAT_PASS_MALFORMED) for the host stack to discard.
 *
 * Established flows take a fast path before the vips lookup: a packet that
 * is neither SYN, FIN nor RST is looked up in nat_flows (cluster addresses
 * with a NAT port, per the nat_filter) or conns, and forwarded with no
 * helper call but the per-CPU clock cache's and no map write but a last_seen
 * refresh at most once a second.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "dlb_abi.h"
#include "dlb_maps.h"
#include "hash.h"
#include "common.h"
#include "csum.h"
#include "schedule.h"
#include "table.h"
#include "nat.h"
#include "icmp.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Anchors that put these types into BTF so that bpf2go generates them. */
enum stat_reason dlb_btf_stat_reason __attribute__((unused));
enum flow_state dlb_btf_flow_state __attribute__((unused));
enum backend_flags dlb_btf_backend_flags __attribute__((unused));
enum vip_flags dlb_btf_vip_flags __attribute__((unused));
enum dlb_family dlb_btf_family __attribute__((unused));
enum dlb_consts dlb_btf_consts __attribute__((unused));
enum dlb_method dlb_btf_method __attribute__((unused));
enum dlb_selection dlb_btf_selection __attribute__((unused));
enum nat_flags dlb_btf_nat_flags __attribute__((unused));
enum dlb_event dlb_btf_event __attribute__((unused));
enum nat_ctl_op dlb_btf_nat_ctl_op __attribute__((unused));
enum trace_consts dlb_btf_trace_consts __attribute__((unused));
enum trace_flags dlb_btf_trace_flags __attribute__((unused));
enum trace_stat dlb_btf_trace_stat __attribute__((unused));
enum tab_flags dlb_btf_tab_flags __attribute__((unused));

/* IPv4 "more fragments" flag and fragment offset, in network byte order. */
#define IP_MF_OFFSET bpf_htons(0x3fff)

/* The largest offset of an IPv6 packet's transport header: two VLAN tags,
 * the IPv6 header and DLB_IPV6_MAX_EXT extension headers of the largest
 * size. */
#define DLB_L4_MAX_OFF (sizeof(struct ethhdr) + 2 * 4 + sizeof(struct ipv6hdr) + DLB_IPV6_MAX_EXT * 2048)

/* IPv6 extension headers the executor walks, and the fragment header. */
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_DEST 60

struct vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
};

/* balance handles a packet to a MAC-forwarded service that the established
 * fast path did not take. f is its connection-table entry if the fast path
 * looked it up (pk->looked), else it looks; pk->thash is the flow's table
 * hash. */
static __always_inline int balance(struct xdp_md *ctx, struct pkt *pk, const struct vip_meta *vm, struct flow *f,
				   int family)
{
	const struct dlb_config *cfg = pk->cfg;
	const struct flow_key *fk = &pk->fk;
	__u32 pos, slot;
	int tcp = fk->proto == IPPROTO_TCP;
	int syn = tcp && (pk->tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN;
	int closing = pk->tcp_flags & (TCP_FIN | TCP_RST);
	__u64 now = clock_now();
	__u32 id;
	struct backend *b;
	/* Every way out to a server goes through one forward (at out): one
	 * copy of it (and of its counters' inlined map lookups, each a rewrite
	 * of the whole program when the kernel loads it) instead of nine. */
	struct backend *fb;
	__u32 fid, fnew, fhit;
#define GO_FORWARD(b_, id_, new_, hit_) \
	do {                            \
		fb = (b_);              \
		fid = (id_);            \
		fnew = (new_);          \
		fhit = (hit_);          \
		goto out;               \
	} while (0)

	if (!pk->looked) {
		struct conn_entry *ce = conn_find(fk, pk->thash, cfg->conn_buckets, &pos, &slot);
		f = NULL;
		if (ce) {
			/* Keep clang from computing &ce->flow before the check. */
			asm volatile("" : "+r"(ce));
			f = &ce->flow;
		}
	}
	if (f) {
		b = bpf_map_lookup_elem(&backends, &f->backend);
		int gone = !b || !(b->flags & BACKEND_F_PRESENT) || f->service != vm->service || b->service != vm->service;
		__u64 timeout = f->state == FLOW_CLOSING ? vm->fin_timeout : vm->stale_timeout;
		__u64 idle = idle_ns(now, f->last_seen);
		int expired = idle > timeout * NSEC_PER_SEC;
		int resched = gone || (syn && (!(b->flags & BACKEND_F_NEW_OK) || f->state == FLOW_CLOSING || expired));

		if (!resched) {
			id = f->backend;
			if (closing && f->state == FLOW_ESTABLISHED) {
				f->state = FLOW_CLOSING;
				f->last_seen = now;
				count_fin(id, vm->service);
				affinity_touch(vm, fk, id, now, family);
			} else if (idle > FLOW_TOUCH_NS) {
				f->last_seen = now;
			}
			GO_FORWARD(b, id, 0, 1);
		}

		/* Reschedule: the old server is gone, or this SYN starts a new
		 * connection (the old one closed or expired, or its server takes
		 * no new ones). A replaced established connection counts as
		 * finished on its old server. */
		__u32 old = f->backend;
		int was_open = f->state == FLOW_ESTABLISHED && !gone;
		b = pick_mac(vm, cfg, fk, pk->thash, now, &id);
		if (!b)
			return verdict(ctx, STAT_DROP_NO_BACKEND, XDP_DROP);
		if (was_open)
			count_fin(old, vm->service);
		f->backend = id;
		f->service = vm->service;
		f->state = closing ? FLOW_CLOSING : FLOW_ESTABLISHED;
		f->last_seen = now;
		if (!syn)
			affinity_record(vm, fk, b, id, now, family);
		GO_FORWARD(b, id, 1, 0);
	}

	if (syn) {
		/* No table entry for a bare SYN: remember the choice for its ACK
		 * (the handshake cache is indexed by the table hash). */
		b = pick_mac(vm, cfg, fk, pk->thash, now, &id);
		if (!b)
			return verdict(ctx, STAT_DROP_NO_BACKEND, XDP_DROP);
		remember_handshake(pk->thash, id, vm->service, now);
		GO_FORWARD(b, id, 0, 0);
	}

	b = NULL;
	if (tcp)
		b = handshake_backend(pk->thash, vm->service, &id);
	if (!b)
		b = pick_mac(vm, cfg, fk, pk->thash, now, &id);
	if (!b)
		return verdict(ctx, STAT_DROP_NO_BACKEND, XDP_DROP);
	/* A FIN or RST of a flow the table does not know is forwarded but
	 * creates no entry: there is no connection left to track. */
	if (closing)
		GO_FORWARD(b, id, 0, 0);

	__u32 key0 = 0;
	struct nat_scratch *sc = bpf_map_lookup_elem(&scratch, &key0);
	if (!sc)
		GO_FORWARD(b, id, 0, 0);
	struct conn_ins *ins = &sc->conn;
	__builtin_memcpy(&ins->e.key, fk, sizeof(*fk));
	ins->e.flow.last_seen = now;
	ins->e.flow.backend = id;
	ins->e.flow.service = vm->service;
	ins->e.flow.state = FLOW_ESTABLISHED;
	ins->hash = pk->thash;
	int res = dlb_conn_insert(ins);
	if (res == TAB_EXISTS) {
		/* Another CPU inserted this flow between our lookup and now:
		 * the handshake's ACK and the first data segment (or two
		 * datagrams of a new UDP flow) raced. Follow its entry and
		 * count the connection once. */
		slot = ins->slot;
		struct conn_entry *ce = bpf_map_lookup_elem(&conns, &slot);
		struct backend *ob = ce ? backend_ok(ce->flow.backend, vm->service) : NULL;
		if (ob)
			GO_FORWARD(ob, ce->flow.backend, 0, 1);
		GO_FORWARD(b, id, 0, 0);
	}
	if (res != TAB_INSERTED) {
		/* Another CPU held the bucket: the flow's next packet inserts
		 * it (and counts it). */
		event(EV_CONN_INSERT_FAILED);
		GO_FORWARD(b, id, 0, 0);
	}
	affinity_record(vm, fk, b, id, now, family);
	GO_FORWARD(b, id, 1, 0);
out:
	asm volatile("" : "+r"(fid), "+r"(fnew), "+r"(fhit));
	return forward(ctx, pk, fb, fid, vm->service, fnew, fhit);
#undef GO_FORWARD
}

/* vip_lookup returns the vips entry of vk, through this CPU's vip_cache:
 * a copy read under the current vips generation, else the map's entry,
 * which it copies there. The copy stays valid while the packet is handled:
 * nothing else writes this CPU's cache meanwhile. */
static __always_inline struct vip_meta *vip_lookup(const struct dlb_config *cfg, const struct vip_key *vk)
{
	const __u32 *a = (const __u32 *)vk->addr.addr;
	__u32 slot = ((a[0] ^ a[1] ^ a[2] ^ a[3] ^ ((__u32)vk->port << 8) ^ vk->proto) * 0x9e3779b1U) >> 26;
	struct vip_cached *c = bpf_map_lookup_elem(&vip_cache, &slot);
	__u32 gen = cfg->vips_gen;

	/* Every entry returned is the cache's copy, so that the verifier
	 * follows one kind of pointer from here on, not two. */
	if (!c)
		return NULL;
	if (c->used && c->gen == gen) {
		const __u32 *x = (const __u32 *)&c->key, *y = (const __u32 *)vk;
		if (((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]) | (x[4] ^ y[4])) == 0)
			return &c->meta;
	}
	struct vip_meta *m = bpf_map_lookup_elem(&vips, vk);
	if (!m)
		return NULL;
	__builtin_memcpy(&c->key, vk, sizeof(*vk));
	__builtin_memcpy(&c->meta, m, sizeof(*m));
	c->gen = gen;
	c->used = 1;
	return &c->meta;
}

/* addr_marker returns the marker flags of an address (VIP_F_MARKER for a
 * cluster address, VIP_F_RETURN for a return address), 0 for others. */
static __always_inline __u32 addr_marker(const struct dlb_ip *addr, int family)
{
	struct vip_key vk = { .family = family };

	ip_copy(&vk.addr, addr);
	struct vip_meta *m = bpf_map_lookup_elem(&vips, &vk);
	return m ? m->flags & (VIP_F_MARKER | VIP_F_RETURN) : 0;
}

/* other_reason is the reason of a packet to an address with marker flags
 * mf that the executor does not balance. */
static __always_inline __u32 other_reason(__u32 mf)
{
	if (mf & VIP_F_RETURN)
		return STAT_PASS_RETURN_OTHER;
	if (mf & VIP_F_MARKER)
		return STAT_PASS_VIP_OTHER;
	return STAT_PASS_NOT_VIP;
}

/* The slow paths: BPF-to-BPF calls, so that their stack frames and code
 * stay out of the fast path. Each exists once per family (the family a
 * constant in it), which keeps every frame small enough for the fast
 * path's frame plus the deepest chain of calls to fit the 512-byte BPF
 * stack. Linux 6.1 rounds every frame of a chain up to 32 bytes (later
 * releases to 16 when the program is compiled); three chains sit at its
 * limit today: dlb_xdp 192 + dlb_reply6 248 + dlb_natf_lookup 48 = 192 +
 * 256 + 64 = 512, dlb_xdp + slow_icmp6 56 + icmp_from_server6 168 +
 * dlb_natp_lookup 48 = 192 + 64 + 192 + 64 = 512, and the NAT SYN's and
 * promotion's. The verifier refuses the program when a change overflows
 * it: the data-path tests load it on the machine's kernel, make
 * test-kernels on 6.1. Large temporaries live in the per-CPU scratch map
 * instead. */
#define DLB_SLOW(name, body, ...)                                                        \
	static __noinline int name##4(struct xdp_md *ctx, struct pkt *pk, ##__VA_ARGS__) \
	{                                                                                \
		const int family = DLB_FAMILY_IPV4;                                      \
		return body;                                                             \
	}                                                                                \
	static __noinline int name##6(struct xdp_md *ctx, struct pkt *pk, ##__VA_ARGS__) \
	{                                                                                \
		const int family = DLB_FAMILY_IPV6;                                      \
		return body;                                                             \
	}

DLB_SLOW(slow_mac, balance(ctx, pk, vm, f, family), struct vip_meta *vm, struct flow *f)
DLB_SLOW(slow_nat_existing, nat_existing(ctx, pk, vm, nf, family), struct vip_meta *vm, struct nat_flow *nf)
DLB_SLOW(slow_nat_syn, nat_syn(ctx, pk, vm, family), struct vip_meta *vm)
DLB_SLOW(slow_nat_promote, nat_promote(ctx, pk, vm, family), struct vip_meta *vm)
DLB_SLOW(slow_nat_udp, nat_udp_new(ctx, pk, vm, family), struct vip_meta *vm)
DLB_SLOW(slow_icmp, handle_icmp(ctx, pk, family))

/* parse_l4 reads the ports and TCP flags of a TCP or UDP header at l4 into
 * fk. It returns -1 when the header is truncated or invalid. */
static __always_inline int parse_l4(void *l4, void *data_end, __u8 proto, struct flow_key *fk, __u8 *tcp_flags)
{
	if (proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > data_end || th->doff < 5)
			return -1;
		fk->sport = th->source;
		fk->dport = th->dest;
		*tcp_flags = ((__u8 *)th)[13];
		return 0;
	}
	struct udphdr *uh = l4;
	if ((void *)(uh + 1) > data_end)
		return -1;
	fk->sport = uh->source;
	fk->dport = uh->dest;
	return 0;
}

/* flow_addrs4 and flow_addrs6 copy an IP header's addresses into fk. */
static __always_inline void flow_addrs4(struct iphdr *iph, struct flow_key *fk)
{
	*(__u32 *)fk->src.addr = iph->saddr;
	*(__u32 *)fk->dst.addr = iph->daddr;
}

static __always_inline void flow_addrs6(struct ipv6hdr *ip6h, struct flow_key *fk)
{
	__builtin_memcpy(fk->src.addr, &ip6h->saddr, 16);
	__builtin_memcpy(fk->dst.addr, &ip6h->daddr, 16);
}

/* The NAT reply path (nat_reply) is a global function per family, so
 * that the verifier checks it once rather than once for every state the
 * main program reaches it in (it was the largest part of the program's
 * verification, and Linux 6.1's verifier, which tracks precision less
 * well across calls, explored twice as much of it again). A global
 * function sees the packet only through ctx: it parses the addresses and
 * ports again from the headers' offsets (l3off, l4off) and the final
 * protocol (proto, after any IPv6 extension headers). It returns -1 when
 * the packet is no reply, for the caller to go on. */
#define DLB_L3_MAX_OFF (sizeof(struct ethhdr) + 2 * 4)
#define DLB_REPLY(fam, iphdr_t)                                                             \
	__noinline int dlb_reply##fam(struct xdp_md *ctx, __u32 l3off, __u32 l4off, __u32 proto) \
	{                                                                                   \
		void *data = (void *)(long)ctx->data;                                       \
		void *data_end = (void *)(long)ctx->data_end;                               \
		const int family = fam == 4 ? DLB_FAMILY_IPV4 : DLB_FAMILY_IPV6;            \
		__u32 key0 = 0;                                                             \
		struct pkt pk = {};                                                         \
                                                                                            \
		if (l3off > DLB_L3_MAX_OFF || l4off > DLB_L4_MAX_OFF)                       \
			return -1;                                                          \
		pk.eth = data;                                                              \
		iphdr_t *ip = data + l3off;                                                 \
		if ((void *)(pk.eth + 1) > data_end || (void *)(ip + 1) > data_end)         \
			return -1;                                                          \
		pk.l3 = ip;                                                                 \
		pk.l4 = data + l4off;                                                       \
		pk.end = data_end;                                                          \
		pk.fk.proto = proto;                                                        \
		pk.fk.family = family;                                                      \
		flow_addrs##fam(ip, &pk.fk);                                                \
		if (parse_l4(pk.l4, data_end, proto, &pk.fk, &pk.tcp_flags))                \
			return -1;                                                          \
		pk.cfg = bpf_map_lookup_elem(&config, &key0);                               \
		if (!pk.cfg)                                                                \
			return -1;                                                          \
		return nat_reply(ctx, &pk, family);                                         \
	}

DLB_REPLY(4, struct iphdr)
DLB_REPLY(6, struct ipv6hdr)

/* SLOW calls the slow path name for family (a constant). */
#define SLOW(name, family, ...) \
	((family) == DLB_FAMILY_IPV4 ? name##4(ctx, pk, ##__VA_ARGS__) : name##6(ctx, pk, ##__VA_ARGS__))

/* fast_nat6 is the established fast path of an IPv6 NAT flow: a call of
 * its own, since rewriting 32 bytes of addresses would make the fast
 * path's stack frame too large for the slow paths' frames beside it. */
static __noinline int fast_nat6(struct xdp_md *ctx, struct pkt *pk, struct nat_flow *nf, struct backend *b)
{
	return nat_to_server(ctx, pk, DLB_FAMILY_IPV6, &nf->nat_addr, nf->nat_port, b, nf->backend, nf->service, 0, 1);
}

/* process handles a TCP or UDP packet whose destination passed the VIP
 * pre-filter (bit is its filter bit): a NAT reply, an established flow, or
 * a packet for the vips lookup. */
static __always_inline int process(struct xdp_md *ctx, struct pkt *pk, __u32 bit, int family)
{
	struct flow_key *fk = &pk->fk;
	__u32 key0 = 0;
	struct nat_bloom *nb = bpf_map_lookup_elem(&nat_filter, &key0);
	__u64 mask = 1ULL << (bit % 64);
	int is_ret = nb && (nb->returns[bit / 64] & mask);
	int is_nat = nb && (nb->nat_vips[bit / 64] & mask);

	if (is_ret) {
		void *data = (void *)(long)ctx->data;
		__u32 l3off = pk->l3 - data, l4off = pk->l4 - data;
		int v = family == DLB_FAMILY_IPV4 ? dlb_reply4(ctx, l3off, l4off, fk->proto) :
						     dlb_reply6(ctx, l3off, l4off, fk->proto);
		if (v >= 0)
			return v;
	}

	/* Established fast path: a packet that is neither SYN, FIN nor RST of
	 * a flow the tables know goes straight to its server, without the vips
	 * lookup. A flow of a removed port fails the backend check (removing a
	 * port clears its backends) and takes the full path. */
	struct flow *f = NULL;
	struct nat_flow *nf = NULL;
	__u32 pos, slot;
	pk->thash = tab_hash_flow(fk, pk->cfg->hash_seed);
	if (!(pk->tcp_flags & (TCP_SYN | TCP_FIN | TCP_RST))) {
		/* A tag that matched another key's (the lookup not sure)
		 * leaves the lookup to the full path's, which reads every
		 * matching way. */
		pk->looked = 1;
		if (is_nat) {
			struct nat_flow_entry *ne = natf_find_first(fk, pk->thash, pk->cfg->natf_buckets, &pos, &slot, &pk->looked);
			if (ne) {
				/* Keep clang from computing &ne->flow before the check. */
				asm volatile("" : "+r"(ne));
				nf = &ne->flow;
				struct backend *b = bpf_map_lookup_elem(&backends, &nf->backend);
				if (b && (b->flags & BACKEND_F_PRESENT) && b->service == nf->service) {
					__u64 now = clock_now();
					if (now > nf->last_seen + FLOW_TOUCH_NS)
						nf->last_seen = now;
					if (family == DLB_FAMILY_IPV6)
						return fast_nat6(ctx, pk, nf, b);
					return nat_to_server(ctx, pk, family, &nf->nat_addr, nf->nat_port, b, nf->backend,
							     nf->service, 0, 1);
				}
			}
		} else {
			struct conn_entry *ce = conn_find_first(fk, pk->thash, pk->cfg->conn_buckets, &pos, &slot, &pk->looked);
			if (ce) {
				f = &ce->flow;
				struct backend *b = bpf_map_lookup_elem(&backends, &f->backend);
				if (b && (b->flags & BACKEND_F_PRESENT) && b->service == f->service) {
					__u64 now = clock_now();
					if (now > f->last_seen + FLOW_TOUCH_NS)
						f->last_seen = now;
					return forward(ctx, pk, b, f->backend, f->service, 0, 1);
				}
			}
		}
	}

	struct vip_key vk = {
		.port = fk->dport,
		.proto = fk->proto,
		.family = family,
	};
	ip_copy(&vk.addr, &fk->dst);
	struct vip_meta *vm = vip_lookup(pk->cfg, &vk);
	if (!vm || (vm->flags & (VIP_F_MARKER | VIP_F_RETURN)))
		return verdict_inline(ctx, other_reason(addr_marker(&fk->dst, family)), XDP_PASS);
	if (vm->method == DLB_METHOD_NAT) {
		if (!(pk->looked && is_nat)) {
			struct nat_flow_entry *ne = natf_find_call(fk, pk->thash, pk->cfg->natf_buckets, &pos, &slot);
			if (ne) {
				asm volatile("" : "+r"(ne));
				nf = &ne->flow;
			}
		}
		if (nf) {
			int v = SLOW(slow_nat_existing, family, vm, nf);
			if (v >= 0)
				return v;
		}
		if (fk->proto != IPPROTO_TCP)
			return SLOW(slow_nat_udp, family, vm);
		if ((pk->tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN)
			return SLOW(slow_nat_syn, family, vm);
		return SLOW(slow_nat_promote, family, vm);
	}
	if (is_nat)
		pk->looked = 0;
	return SLOW(slow_mac, family, vm, f);
}

static __always_inline int handle_ipv4(struct xdp_md *ctx, struct ethhdr *eth, struct iphdr *iph)
{
	void *data_end = (void *)(long)ctx->data_end;
	__u32 key0 = 0;

	if (iph->version != 4 || iph->ihl < 5)
		return verdict_inline(ctx, STAT_PASS_MALFORMED, XDP_PASS);
	__u32 tot_len = ntohs_len(iph->tot_len);
	if (tot_len < iph->ihl * 4 || (void *)iph + tot_len > data_end)
		return verdict_inline(ctx, STAT_PASS_MALFORMED, XDP_PASS);

	struct dlb_config *cfg = bpf_map_lookup_elem(&config, &key0);
	if (!cfg)
		return verdict_inline(ctx, STAT_PASS_NOT_VIP, XDP_PASS);
	__u32 daddr = iph->daddr;
	if (cfg->nfa_family == DLB_FAMILY_IPV4 && daddr == *(__u32 *)cfg->nfa.addr)
		return verdict_inline(ctx, STAT_PASS_NFA, XDP_PASS);

	/* Most traffic that is not for a cluster or return address leaves
	 * here after one memory read. */
	struct vip_bloom *vf = bpf_map_lookup_elem(&vip_filter, &key0);
	__u32 bit = vip_filter_bit(daddr);
	if (!vf || !(vf->bits[bit / 64] & (1ULL << (bit % 64))))
		return verdict_inline(ctx, STAT_PASS_NOT_VIP, XDP_PASS);

	struct pkt pk = {
		.eth = eth,
		.l3 = iph,
		.l4 = (void *)(iph + 1),
		.end = (void *)iph + tot_len,
		.cfg = cfg,
		.fk = { .proto = iph->protocol, .family = DLB_FAMILY_IPV4 },
	};
	flow_addrs4(iph, &pk.fk);

	int frag = iph->frag_off & IP_MF_OFFSET;
	if (frag || iph->ihl != 5 || (iph->protocol != IPPROTO_TCP && iph->protocol != IPPROTO_UDP)) {
		__u32 mf = addr_marker(&pk.fk.dst, DLB_FAMILY_IPV4);
		if (!mf)
			return verdict_inline(ctx, STAT_PASS_NOT_VIP, XDP_PASS);
		if (frag)
			return verdict_inline(ctx, STAT_DROP_FRAGMENT, XDP_DROP);
		if (iph->ihl != 5)
			return verdict_inline(ctx, STAT_DROP_IP_OPTIONS, XDP_DROP);
		if (iph->protocol == IPPROTO_ICMP) {
			pk.mflags = mf;
			return slow_icmp4(ctx, &pk);
		}
		return verdict_inline(ctx, other_reason(mf), XDP_PASS);
	}

	if (parse_l4(pk.l4, data_end, iph->protocol, &pk.fk, &pk.tcp_flags))
		return verdict_inline(ctx, STAT_PASS_MALFORMED, XDP_PASS);
	return process(ctx, &pk, bit, DLB_FAMILY_IPV4);
}

static __always_inline int handle_ipv6(struct xdp_md *ctx, struct ethhdr *eth, struct ipv6hdr *ip6h)
{
	void *data_end = (void *)(long)ctx->data_end;
	__u32 key0 = 0;

	if (ip6h->version != 6)
		return verdict_inline(ctx, STAT_PASS_MALFORMED, XDP_PASS);
	void *end = (void *)(ip6h + 1) + ntohs_len(ip6h->payload_len);
	if (end > data_end)
		return verdict_inline(ctx, STAT_PASS_MALFORMED, XDP_PASS);

	struct dlb_config *cfg = bpf_map_lookup_elem(&config, &key0);
	if (!cfg)
		return verdict_inline(ctx, STAT_PASS_NOT_VIP, XDP_PASS);
	const __u32 *d = ip6h->daddr.in6_u.u6_addr32;
	if (cfg->nfa6_family == DLB_FAMILY_IPV6) {
		const __u32 *n = (const __u32 *)cfg->nfa6.addr;
		if (((d[0] ^ n[0]) | (d[1] ^ n[1]) | (d[2] ^ n[2]) | (d[3] ^ n[3])) == 0)
			return verdict_inline(ctx, STAT_PASS_NFA, XDP_PASS);
	}

	struct vip_bloom *vf = bpf_map_lookup_elem(&vip_filter, &key0);
	__u32 bit = vip_filter_bit(ip6_fold(d));
	if (!vf || !(vf->bits[bit / 64] & (1ULL << (bit % 64))))
		return verdict_inline(ctx, STAT_PASS_NOT_VIP, XDP_PASS);

	struct pkt pk = {
		.eth = eth,
		.l3 = ip6h,
		.end = end,
		.cfg = cfg,
		.fk = { .family = DLB_FAMILY_IPV6 },
	};
	flow_addrs6(ip6h, &pk.fk);

	/* Walk the extension headers the executor understands. */
	__u8 nh = ip6h->nexthdr;
	void *p = (void *)(ip6h + 1);
	int frag = 0, bad = 0;
#pragma unroll
	for (int i = 0; i < DLB_IPV6_MAX_EXT; i++) {
		if (nh == NEXTHDR_FRAGMENT) {
			frag = 1;
			break;
		}
		if (nh != NEXTHDR_HOP && nh != NEXTHDR_ROUTING && nh != NEXTHDR_DEST)
			break;
		__u8 *oh = p;
		if ((void *)(oh + 8) > data_end)
			return verdict_inline(ctx, STAT_PASS_MALFORMED, XDP_PASS);
		if (nh == NEXTHDR_ROUTING && oh[3] != 0) {
			/* Segments left: this is a waypoint, not the destination. */
			bad = 1;
			break;
		}
		nh = oh[0];
		p += ((__u32)oh[1] + 1) * 8;
	}
	if (!frag && !bad) {
		if (nh == NEXTHDR_FRAGMENT)
			frag = 1;
		else if (nh == NEXTHDR_HOP || nh == NEXTHDR_ROUTING || nh == NEXTHDR_DEST)
			bad = 1; /* more than DLB_IPV6_MAX_EXT */
	}
	if (p != (void *)(ip6h + 1)) {
		/* One layout from here on for packets with extension headers,
		 * however many (see dlb_xdp's tags). */
		void *data = (void *)(long)ctx->data;
		__u32 l4off = launder(p - data);
		if (l4off > DLB_L4_MAX_OFF)
			return verdict_inline(ctx, STAT_PASS_MALFORMED, XDP_PASS);
		p = data + l4off;
	}
	pk.fk.proto = nh;
	pk.l4 = p;

	if (frag || bad || (nh != IPPROTO_TCP && nh != IPPROTO_UDP)) {
		__u32 mf = addr_marker(&pk.fk.dst, DLB_FAMILY_IPV6);
		if (!mf)
			return verdict_inline(ctx, STAT_PASS_NOT_VIP, XDP_PASS);
		if (frag)
			return verdict_inline(ctx, STAT_DROP_FRAGMENT, XDP_DROP);
		if (bad)
			return verdict_inline(ctx, STAT_DROP_IPV6_EXT, XDP_DROP);
		if (nh == IPPROTO_ICMPV6) {
			pk.mflags = mf;
			return slow_icmp6(ctx, &pk);
		}
		return verdict_inline(ctx, other_reason(mf), XDP_PASS);
	}

	if (parse_l4(p, data_end, nh, &pk.fk, &pk.tcp_flags))
		return verdict_inline(ctx, STAT_PASS_MALFORMED, XDP_PASS);
	return process(ctx, &pk, bit, DLB_FAMILY_IPV6);
}

SEC("xdp")
int dlb_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 off = sizeof(*eth);

	if (data + off > data_end)
		return verdict_inline(ctx, STAT_PASS_MALFORMED, XDP_PASS);

	__be16 proto = eth->h_proto;
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		struct vlan_hdr *vh = data + off;
		if ((void *)(vh + 1) > data_end)
			return verdict_inline(ctx, STAT_PASS_MALFORMED, XDP_PASS);
		proto = vh->encap_proto;
		off += sizeof(*vh);
	}
	/* One layout from here on for tagged frames, however many tags:
	 * the verifier checks what follows once for them, not per count. */
	if (off != sizeof(*eth)) {
		off = launder(off);
		if (off > sizeof(*eth) + 2 * sizeof(struct vlan_hdr))
			return verdict_inline(ctx, STAT_PASS_MALFORMED, XDP_PASS);
	}

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *iph = data + off;
		if ((void *)(iph + 1) > data_end)
			return verdict_inline(ctx, STAT_PASS_MALFORMED, XDP_PASS);
		return handle_ipv4(ctx, eth, iph);
	}
	if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6h = data + off;
		if ((void *)(ip6h + 1) > data_end)
			return verdict_inline(ctx, STAT_PASS_MALFORMED, XDP_PASS);
		return handle_ipv6(ctx, eth, ip6h);
	}
	return verdict_inline(ctx, STAT_PASS_NON_IP, XDP_PASS);
}

/* The connection table's control programs (BPF_PROG_TYPE_SYSCALL, run by
 * pkg/datapath with BPF_PROG_TEST_RUN): the table's layout, hashing and
 * locking exist in BPF only, so that userspace reads, writes and removes
 * entries as the executor does. The context is a struct conn_ctl. */

/* conn_ctl_find returns the entry of c->entry.key, and its table hash,
 * way position and slot. *pos and *slot are set on every path, found or
 * not: the verifier refuses the callers' reads of the stack otherwise. */
static __always_inline struct conn_entry *conn_ctl_find(struct conn_ctl *c, struct flow_key *k, const struct dlb_config **cfgp,
							__u32 *h, __u32 *pos, __u32 *slot)
{
	__u32 key0 = 0;
	const struct dlb_config *cfg = bpf_map_lookup_elem(&config, &key0);

	*pos = 0;
	*slot = 0;
	c->result = 1;
	*cfgp = cfg;
	if (!cfg)
		return NULL;
	__builtin_memcpy(k, &c->entry.key, sizeof(*k));
	*h = tab_hash_flow(k, cfg->hash_seed);
	return conn_find(k, *h, cfg->conn_buckets, pos, slot);
}

/* dlb_conn_get reads the entry of c->entry.key into c->entry.flow. */
SEC("syscall")
int dlb_conn_get(struct conn_ctl *c)
{
	const struct dlb_config *cfg;
	struct flow_key k;
	__u32 h, pos, slot;
	struct conn_entry *e = conn_ctl_find(c, &k, &cfg, &h, &pos, &slot);

	if (e) {
		__builtin_memcpy(&c->entry.flow, &e->flow, sizeof(e->flow));
		c->result = 0;
	}
	return 0;
}

/* dlb_conn_put writes c->entry: over the key's entry (unless c->only_new:
 * result 3), else as a new one (evicting, as the executor does, when the
 * table is full). */
SEC("syscall")
int dlb_conn_put(struct conn_ctl *c)
{
	const struct dlb_config *cfg;
	struct flow_key k;
	struct flow v;
	__u32 h, pos, slot;
	struct conn_entry *e = conn_ctl_find(c, &k, &cfg, &h, &pos, &slot);

	__builtin_memcpy(&v, &c->entry.flow, sizeof(v));
	/* Keep clang from copying c->entry.flow again through a pointer into
	 * the context, which the verifier refuses. */
	asm volatile("" ::: "memory");
	if (e) {
		if (c->only_new) {
			c->result = 3;
			return 0;
		}
		e->flow = v;
		c->result = 0;
		return 0;
	}
	if (!cfg)
		return 0;
	__u32 key0 = 0;
	struct nat_scratch *sc = bpf_map_lookup_elem(&scratch, &key0);
	if (!sc)
		return 0;
	sc->conn.e.key = k;
	sc->conn.e.flow = v;
	sc->conn.hash = h;
	int res = TAB_INSERT_RETRY(dlb_conn_insert(&sc->conn));
	if (res != TAB_INSERTED && res != TAB_EXISTS) {
		c->result = 2;
		return 0;
	}
	if (res == TAB_EXISTS && c->only_new) {
		c->result = 3;
		return 0;
	}
	if (res == TAB_EXISTS) {
		slot = sc->conn.slot;
		e = bpf_map_lookup_elem(&conns, &slot);
		if (e)
			e->flow = v;
	}
	c->result = 0;
	return 0;
}

/* dlb_conn_del removes the entry of c->entry.key, if its last_seen is
 * c->expect_seen (or that is 0). */
SEC("syscall")
int dlb_conn_del(struct conn_ctl *c)
{
	const struct dlb_config *cfg;
	struct flow_key k;
	__u32 h, pos, slot;
	struct conn_entry *e = conn_ctl_find(c, &k, &cfg, &h, &pos, &slot);

	if (!e || (c->expect_seen && e->flow.last_seen != c->expect_seen))
		return 0;
	if (conn_delete(pos, slot, h, cfg->conn_buckets))
		c->result = 0;
	return 0;
}

/* nat_ctl_added is a NAT_CTL_ADD_* result of an insert's: done, the key
 * has an entry (the executor inserted it since the look), or no room. */
static __always_inline __u32 nat_ctl_added(int res)
{
	if (res == TAB_INSERTED)
		return 0;
	return res == TAB_EXISTS ? 3 : 2;
}

/* dlb_nat_ctl reads, writes or removes an entry of nat_flows or nat_ports
 * (c->op, an enum nat_ctl_op), as pkg/datapath needs: the NAT tables'
 * layout and locking exist in BPF only. */
SEC("syscall")
int dlb_nat_ctl(struct nat_ctl *c)
{
	__u32 key0 = 0, pos, slot;
	const struct dlb_config *cfg = bpf_map_lookup_elem(&config, &key0);
	struct nat_scratch *sc = bpf_map_lookup_elem(&scratch, &key0);

	c->result = 1;
	if (!cfg || !sc)
		return 0;
	__u32 op = c->op;
	if (op == NAT_CTL_GET_FLOW || op == NAT_CTL_PUT_FLOW || op == NAT_CTL_DEL_FLOW || op == NAT_CTL_ADD_FLOW) {
		struct natf_ins *in = &sc->natf;
		__builtin_memcpy(&in->e, &c->f, sizeof(in->e));
		in->hash = tab_hash_flow(&in->e.key, cfg->hash_seed);
		struct nat_flow_entry *e = natf_find_call(&in->e.key, in->hash, cfg->natf_buckets, &pos, &slot);
		if (op == NAT_CTL_GET_FLOW) {
			if (e) {
				__builtin_memcpy(&c->f.flow, &e->flow, sizeof(e->flow));
				c->result = 0;
			}
		} else if (op == NAT_CTL_PUT_FLOW) {
			if (e) {
				__builtin_memcpy(&e->flow, &in->e.flow, sizeof(e->flow));
				c->result = 0;
			} else {
				c->result = TAB_INSERT_RETRY(dlb_natf_insert(in)) == TAB_INSERTED ? 0 : 2;
			}
		} else if (op == NAT_CTL_ADD_FLOW) {
			c->result = e ? 3 : nat_ctl_added(TAB_INSERT_RETRY(dlb_natf_insert(in)));
		} else if (e && (!c->expect_seen || e->flow.last_seen == c->expect_seen) && natf_delete(pos, slot, in->hash, cfg->natf_buckets)) {
			c->result = 0;
		}
		return 0;
	}
	struct natp_ins *in = &sc->natp;
	__builtin_memcpy(&in->e, &c->p, sizeof(in->e));
	in->hash = tab_hash_natkey(&in->e.key, cfg->hash_seed);
	struct nat_port_entry *e = natp_find_call(&in->e.key, in->hash, cfg->natp_buckets, &pos, &slot);
	if (op == NAT_CTL_GET_PORT) {
		if (e) {
			__builtin_memcpy(&c->p.rev, &e->rev, sizeof(e->rev));
			c->result = 0;
		}
	} else if (op == NAT_CTL_PUT_PORT) {
		if (e) {
			__builtin_memcpy(&e->rev, &in->e.rev, sizeof(e->rev));
			c->result = 0;
		} else {
			c->result = TAB_INSERT_RETRY(dlb_natp_insert(in)) == TAB_INSERTED ? 0 : 2;
		}
	} else if (op == NAT_CTL_ADD_PORT) {
		c->result = e ? 3 : nat_ctl_added(TAB_INSERT_RETRY(dlb_natp_insert(in)));
	} else if (op == NAT_CTL_DEL_PORT && e && (!c->expect_seen || e->rev.last_seen == c->expect_seen) &&
		   natp_delete(pos, slot, in->hash, cfg->natp_buckets)) {
		c->result = 0;
	} else if (op == NAT_CTL_FORGET_HOP && e && (e->rev.flags & NAT_F_NEXT_HOP)) {
		/* Only the flag and the hop are written: the state and last_seen
		 * the data path changed since pkg/datapath read the entry stay. */
		const struct next_hop *h = &e->rev.hop, *want = &in->e.rev.hop;
		if (h->ifindex == want->ifindex && *(const __u32 *)h->mac == *(const __u32 *)want->mac &&
		    *(const __u16 *)&h->mac[4] == *(const __u16 *)&want->mac[4]) {
			e->rev.flags &= ~NAT_F_NEXT_HOP;
			__builtin_memset(&e->rev.hop, 0, sizeof(e->rev.hop));
			c->result = 0;
		}
	}
	return 0;
}
