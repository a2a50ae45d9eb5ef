// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Copyright The dlb Authors.
 *
 * The dlb executor: an XDP program that balances TCP and UDP connections to
 * cluster addresses over servers by MAC forwarding (direct server return).
 *
 * For each packet: parse Ethernet (up to two VLAN tags), IPv4, TCP/UDP; if
 * it is addressed to a balanced cluster address, port and protocol, find
 * its connection in the connection table or pick a server from the
 * service's Maglev table, rewrite the MAC addresses and send it on.
 * Everything else passes to the host stack byte for byte. Every packet is
 * counted under exactly one stat_reason.
 *
 * Policy for packets that cannot be balanced safely: an IPv4 fragment or a
 * packet with IPv4 options addressed to a cluster address is dropped
 * (STAT_DROP_FRAGMENT, STAT_DROP_IP_OPTIONS), whatever its protocol; the
 * same packets to any other address pass untouched. Truncated or invalid
 * headers pass (STAT_PASS_MALFORMED) for the host stack to discard.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "dlb_abi.h"
#include "dlb_maps.h"
#include "hash.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Anchors that put these types into BTF so that bpf2go generates them. */
enum stat_reason dlb_btf_stat_reason __attribute__((unused));
enum flow_state dlb_btf_flow_state __attribute__((unused));
enum backend_flags dlb_btf_backend_flags __attribute__((unused));
enum vip_flags dlb_btf_vip_flags __attribute__((unused));
enum dlb_family dlb_btf_family __attribute__((unused));

#define NSEC_PER_SEC 1000000000ULL
/* An established flow's last_seen is rewritten at most once per this step,
 * so that the fast path does not write to the table on every packet. */
#define FLOW_TOUCH_NS NSEC_PER_SEC

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

/* IPv4 "more fragments" flag and fragment offset, in network byte order. */
#define IP_MF_OFFSET bpf_htons(0x3fff)

struct vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
};

/* verdict counts the packet under reason and returns action. */
static __always_inline int verdict(struct xdp_md *ctx, __u32 reason, int action)
{
	struct reason_counters *rc = bpf_map_lookup_elem(&reason_stats, &reason);

	if (rc) {
		rc->packets++;
		rc->bytes += ctx->data_end - ctx->data;
	}
	return action;
}

static __always_inline void count(void *map, __u32 id, __u64 bytes, __u32 new_conns, __u32 fin_conns)
{
	struct counters *c = bpf_map_lookup_elem(map, &id);

	if (c) {
		c->packets++;
		c->bytes += bytes;
		c->new_conns += new_conns;
		c->fin_conns += fin_conns;
	}
}

/* count_fin counts a finished connection on its backend and service. */
static __always_inline void count_fin(__u32 backend_id, __u32 service_id)
{
	struct counters *c = bpf_map_lookup_elem(&backend_stats, &backend_id);

	if (c)
		c->fin_conns++;
	c = bpf_map_lookup_elem(&service_stats, &service_id);
	if (c)
		c->fin_conns++;
}

/* clock_now returns bpf_ktime_get_coarse_ns(), read at most once per jiffy
 * per CPU: the coarse clock only moves once per tick anyway, and a helper
 * call costs more than the rest of the established-flow path. */
static __always_inline __u64 clock_now(void)
{
	__u32 key0 = 0;
	struct dlb_clock *c = bpf_map_lookup_elem(&clock, &key0);

	if (!c)
		return bpf_ktime_get_coarse_ns();
	__u64 j = bpf_jiffies64();
	if (c->jiffies != j) {
		c->jiffies = j;
		c->now = bpf_ktime_get_coarse_ns();
	}
	return c->now;
}

/* pick chooses the backend of Maglev slot hash % M for a new connection.
 * It returns NULL when the service has no server taking connections. */
static __always_inline struct backend *pick(const struct vip_meta *vm, const struct dlb_config *cfg, __u32 hash,
					    __u32 *backend_id)
{
	void *table = bpf_map_lookup_elem(&maglev_tables, &vm->service);
	if (!table || cfg->maglev_size == 0)
		return NULL;

	__u32 slot = hash % cfg->maglev_size;
	__u32 *id = bpf_map_lookup_elem(table, &slot);
	if (!id)
		return NULL;

	struct backend *b = bpf_map_lookup_elem(&backends, id);
	if (!b || (b->flags & (BACKEND_F_PRESENT | BACKEND_F_NEW_OK)) != (BACKEND_F_PRESENT | BACKEND_F_NEW_OK))
		return NULL;
	*backend_id = *id;
	return b;
}

/* remember_handshake records which server a SYN went to. */
static __always_inline void remember_handshake(const struct flow_key *fk, __u32 hash, __u32 backend_id, __u32 service)
{
	__u32 slot = hash & (HANDSHAKE_SLOTS - 1);
	struct handshake *hs = bpf_map_lookup_elem(&handshakes, &slot);

	if (!hs)
		return;
	__builtin_memcpy(&hs->key, fk, sizeof(*fk));
	hs->backend = backend_id;
	hs->service = service;
	hs->check = hash ^ backend_id ^ service;
}

/* handshake_backend returns the server the flow's SYN went to, if the
 * handshake cache still holds it and that server is still configured. */
static __always_inline struct backend *handshake_backend(const struct flow_key *fk, __u32 hash, __u32 service,
							 __u32 *backend_id)
{
	__u32 slot = hash & (HANDSHAKE_SLOTS - 1);
	struct handshake *hs = bpf_map_lookup_elem(&handshakes, &slot);

	if (!hs || hs->service != service || hs->check != (hash ^ hs->backend ^ hs->service))
		return NULL;
	if (__builtin_memcmp(&hs->key, fk, sizeof(*fk)) != 0)
		return NULL;
	__u32 id = hs->backend;
	struct backend *b = bpf_map_lookup_elem(&backends, &id);
	if (!b || !(b->flags & BACKEND_F_PRESENT) || b->service != service)
		return NULL;
	*backend_id = id;
	return b;
}

/* forward rewrites the MAC addresses towards b and sends the frame. */
static __always_inline int forward(struct xdp_md *ctx, struct ethhdr *eth, const struct backend *b,
				   __u32 backend_id, __u32 service_id, __u32 new_conns)
{
	__u64 bytes = ctx->data_end - ctx->data;

	__builtin_memcpy(eth->h_dest, b->mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, b->src_mac, ETH_ALEN);
	count(&service_stats, service_id, bytes, new_conns, 0);
	count(&backend_stats, backend_id, bytes, new_conns, 0);

	if (b->ifindex == ctx->ingress_ifindex)
		return verdict(ctx, STAT_FWD_TX, XDP_TX);

	int action = bpf_redirect_map(&tx_ports, b->ifindex, XDP_DROP);
	if (action != XDP_REDIRECT)
		return verdict(ctx, STAT_DROP_NO_TX_PORT, XDP_DROP);
	return verdict(ctx, STAT_FWD_REDIRECT, action);
}

/* balance handles a packet to a balanced cluster address, port and protocol
 * that the established fast path did not take. f is its connection-table
 * entry if the caller already looked it up (looked), else it looks. */
static __always_inline int balance(struct xdp_md *ctx, struct ethhdr *eth, const struct vip_meta *vm,
				   const struct dlb_config *cfg, struct flow_key *fk, __u8 tcp_flags,
				   struct flow *f, int looked)
{
	int tcp = fk->proto == IPPROTO_TCP;
	int syn = tcp && (tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN;
	int closing = tcp_flags & (TCP_FIN | TCP_RST);
	__u64 now = clock_now();
	__u32 id;
	struct backend *b;

	if (!looked)
		f = bpf_map_lookup_elem(&conns, fk);
	if (f) {
		b = bpf_map_lookup_elem(&backends, &f->backend);
		int gone = !b || !(b->flags & BACKEND_F_PRESENT) || f->service != vm->service || b->service != vm->service;
		__u64 timeout = f->state == FLOW_CLOSING ? vm->fin_timeout : vm->stale_timeout;
		/* last_seen may be ahead of the coarse clock when userspace wrote it. */
		__u64 idle = now > f->last_seen ? now - f->last_seen : 0;
		int expired = idle > timeout * NSEC_PER_SEC;
		int resched = gone || (syn && (!(b->flags & BACKEND_F_NEW_OK) || f->state == FLOW_CLOSING || expired));

		if (!resched) {
			id = f->backend;
			if (closing && f->state == FLOW_ESTABLISHED) {
				f->state = FLOW_CLOSING;
				f->last_seen = now;
				count_fin(id, vm->service);
			} else if (idle > FLOW_TOUCH_NS) {
				f->last_seen = now;
			}
			return forward(ctx, eth, b, id, vm->service, 0);
		}

		/* Reschedule: the old server is gone, or this SYN starts a new
		 * connection (the old one closed or expired, or its server takes
		 * no new ones). A replaced established connection counts as
		 * finished on its old server. */
		__u32 old = f->backend;
		int was_open = f->state == FLOW_ESTABLISHED && !gone;
		b = pick(vm, cfg, flow_hash(fk, cfg->hash_seed), &id);
		if (!b)
			return verdict(ctx, STAT_DROP_NO_BACKEND, XDP_DROP);
		if (was_open)
			count_fin(old, vm->service);
		f->backend = id;
		f->service = vm->service;
		f->state = closing ? FLOW_CLOSING : FLOW_ESTABLISHED;
		f->last_seen = now;
		return forward(ctx, eth, b, id, vm->service, 1);
	}

	__u32 hash = flow_hash(fk, cfg->hash_seed);
	if (syn) {
		/* No table entry for a bare SYN: remember the choice for its ACK. */
		b = pick(vm, cfg, hash, &id);
		if (!b)
			return verdict(ctx, STAT_DROP_NO_BACKEND, XDP_DROP);
		remember_handshake(fk, hash, id, vm->service);
		return forward(ctx, eth, b, id, vm->service, 0);
	}

	b = NULL;
	if (tcp)
		b = handshake_backend(fk, hash, vm->service, &id);
	if (!b)
		b = pick(vm, cfg, hash, &id);
	if (!b)
		return verdict(ctx, STAT_DROP_NO_BACKEND, XDP_DROP);
	/* A FIN or RST of a flow the table does not know is forwarded but
	 * creates no entry: there is no connection left to track. */
	if (closing)
		return forward(ctx, eth, b, id, vm->service, 0);

	struct flow nf = {
		.last_seen = now,
		.backend = id,
		.service = vm->service,
		.state = FLOW_ESTABLISHED,
	};
	bpf_map_update_elem(&conns, fk, &nf, BPF_ANY);
	return forward(ctx, eth, b, id, vm->service, 1);
}

/* vip_marker reports whether addr is a cluster address at all. */
static __always_inline int vip_marker(__u32 addr)
{
	struct vip_key vk = { .family = DLB_FAMILY_IPV4 };

	*(__u32 *)vk.addr.addr = addr;
	return bpf_map_lookup_elem(&vips, &vk) != NULL;
}

static __always_inline int handle_ipv4(struct xdp_md *ctx, struct ethhdr *eth, struct iphdr *iph)
{
	void *data_end = (void *)(long)ctx->data_end;
	__u32 key0 = 0;

	if (iph->version != 4 || iph->ihl < 5)
		return verdict(ctx, STAT_PASS_MALFORMED, XDP_PASS);
	__u16 tot_len = bpf_ntohs(iph->tot_len);
	if (tot_len < iph->ihl * 4 || (void *)iph + tot_len > data_end)
		return verdict(ctx, STAT_PASS_MALFORMED, XDP_PASS);

	struct dlb_config *cfg = bpf_map_lookup_elem(&config, &key0);
	if (!cfg)
		return verdict(ctx, STAT_PASS_NOT_VIP, XDP_PASS);
	__u32 daddr = iph->daddr;
	if (cfg->nfa_family == DLB_FAMILY_IPV4 && daddr == *(__u32 *)cfg->nfa.addr)
		return verdict(ctx, STAT_PASS_NFA, XDP_PASS);

	/* Most traffic that is not for a cluster address leaves here after one
	 * memory read. */
	struct vip_bloom *vf = bpf_map_lookup_elem(&vip_filter, &key0);
	__u32 bit = vip_filter_bit(daddr);
	if (!vf || !(vf->bits[bit / 64] & (1ULL << (bit % 64))))
		return verdict(ctx, STAT_PASS_NOT_VIP, XDP_PASS);

	int frag = iph->frag_off & IP_MF_OFFSET;
	if (frag || iph->ihl != 5 || (iph->protocol != IPPROTO_TCP && iph->protocol != IPPROTO_UDP)) {
		if (!vip_marker(daddr))
			return verdict(ctx, STAT_PASS_NOT_VIP, XDP_PASS);
		if (frag)
			return verdict(ctx, STAT_DROP_FRAGMENT, XDP_DROP);
		if (iph->ihl != 5)
			return verdict(ctx, STAT_DROP_IP_OPTIONS, XDP_DROP);
		return verdict(ctx, STAT_PASS_VIP_OTHER, XDP_PASS);
	}

	struct flow_key fk = {
		.proto = iph->protocol,
		.family = DLB_FAMILY_IPV4,
	};
	*(__u32 *)fk.src.addr = iph->saddr;
	*(__u32 *)fk.dst.addr = daddr;
	__u8 tcp_flags = 0;

	void *l4 = (void *)(iph + 1);
	if (iph->protocol == IPPROTO_TCP) {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > data_end || th->doff < 5)
			return verdict(ctx, STAT_PASS_MALFORMED, XDP_PASS);
		fk.sport = th->source;
		fk.dport = th->dest;
		tcp_flags = ((__u8 *)th)[13];
	} else {
		struct udphdr *uh = l4;
		if ((void *)(uh + 1) > data_end)
			return verdict(ctx, STAT_PASS_MALFORMED, XDP_PASS);
		fk.sport = uh->source;
		fk.dport = uh->dest;
	}

	/* Established fast path: a packet that is neither SYN, FIN nor RST of
	 * a flow the table knows goes straight to its server, without the vips
	 * lookup. A flow of a removed port fails the backend check (removing a
	 * port clears its backends) and takes the full path. */
	struct flow *f = NULL;
	int looked = 0;
	if (!(tcp_flags & (TCP_SYN | TCP_FIN | TCP_RST))) {
		looked = 1;
		f = bpf_map_lookup_elem(&conns, &fk);
		if (f) {
			struct backend *b = bpf_map_lookup_elem(&backends, &f->backend);
			if (b && (b->flags & BACKEND_F_PRESENT) && b->service == f->service) {
				__u64 now = clock_now();
				if (now > f->last_seen + FLOW_TOUCH_NS)
					f->last_seen = now;
				return forward(ctx, eth, b, f->backend, f->service, 0);
			}
		}
	}

	struct vip_key vk = {
		.port = fk.dport,
		.proto = fk.proto,
		.family = DLB_FAMILY_IPV4,
	};
	*(__u32 *)vk.addr.addr = daddr;
	struct vip_meta *vm = bpf_map_lookup_elem(&vips, &vk);
	if (!vm || (vm->flags & VIP_F_MARKER)) {
		if (vip_marker(daddr))
			return verdict(ctx, STAT_PASS_VIP_OTHER, XDP_PASS);
		return verdict(ctx, STAT_PASS_NOT_VIP, XDP_PASS);
	}
	return balance(ctx, eth, vm, cfg, &fk, tcp_flags, f, looked);
}

SEC("xdp")
int dlb_xdp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 off = sizeof(*eth);

	if (data + off > data_end)
		return verdict(ctx, STAT_PASS_MALFORMED, XDP_PASS);

	__be16 proto = eth->h_proto;
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		struct vlan_hdr *vh = data + off;
		if ((void *)(vh + 1) > data_end)
			return verdict(ctx, STAT_PASS_MALFORMED, XDP_PASS);
		proto = vh->encap_proto;
		off += sizeof(*vh);
	}

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *iph = data + off;
		if ((void *)(iph + 1) > data_end)
			return verdict(ctx, STAT_PASS_MALFORMED, XDP_PASS);
		return handle_ipv4(ctx, eth, iph);
	}
	if (proto == bpf_htons(ETH_P_IPV6))
		return verdict(ctx, STAT_PASS_IPV6, XDP_PASS);
	return verdict(ctx, STAT_PASS_NON_IP, XDP_PASS);
}
