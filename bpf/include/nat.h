/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* This file contains NAT/NAPT forwarding (IBM's "method nat").
 *
 * A client's packet C:cp -> VIP:vp of a NAT service leaves as R:np -> S:sp:
 * S is the server (sp its mapport, or vp), R the server's return address,
 * np a port of R's pool. The server's replies S:sp -> R:np come back to the
 * dispatcher and leave as VIP:vp -> C:cp towards the client's next hop.
 * IPv4, TCP and UDP checksums are updated incrementally (csum.h); a zero
 * UDP checksum stays zero.
 *
 * State. An established NAT connection has two entries in tables that
 * never evict (table.h): nat_flows (client flow -> R, np, backend) and
 * nat_ports ((R, np, proto) -> client side, next hop). Owning the
 * nat_ports key is owning the port: ports are claimed by inserts that fail
 * when the key is taken, so a live mapping is never handed out twice. Full
 * tables refuse new connections (STAT_DROP_TABLE_FULL), never evict.
 *
 * SYN flood safety. A NAT connection needs state at SYN time: the
 * server's SYN-ACK comes back to R:np. That state lives in nat_halfopen, a
 * bounded, direct-mapped table of its own: the slot of (R, np, protocol)
 * reserves the port and translates the SYN-ACK. A SYN claims a slot with a
 * compare-and-exchange (no table insert: a SYN flood must not fill the
 * connection tables). The client's
 * handshake ACK finds its slot through the NAT handshake cache
 * (nat_handshakes, an array the SYN writes), or, when a flood overwrote
 * that cache slot, by recomputing the SYN's server and candidate ports; it
 * promotes the connection into nat_flows and nat_ports and frees the slot.
 * A SYN flood therefore only takes half-open slots: established
 * connections of either method are never touched. When every candidate
 * slot of a SYN holds a live half-open connection of another port, the SYN
 * takes the oldest of them (an approximate LRU over the candidates), so a
 * flood can neither exhaust a pool nor keep a legitimate SYN out; the
 * connections it displaces lose their reservation (EV_HALFOPEN_EVICTED),
 * and their ACK is dropped. A TCP segment that is neither a SYN nor part
 * of a known or half-open connection is dropped (STAT_DROP_NAT_NO_FLOW):
 * it could not be translated for a server that never saw its SYN.
 *
 * Port allocation. The candidates are ports derived from the client
 * flow's hash (nat_candidate), tried in order: a port is free when its
 * half-open slot holds no live reservation of it and nat_ports does not
 * hold it; it is taken by claiming the slot. Promotion inserts into
 * nat_ports (with BPF_NOEXIST) before freeing the slot, and a SYN reads
 * the slot before nat_ports, so a port is never handed out twice. A
 * retransmitted SYN finds its own reservation among its candidates. The
 * first DLB_NAT_CANDIDATES are tried as above, with the flood rule; when
 * connections or reservations of their own ports hold all of them (a pool
 * in heavy use), the search goes on, without displacing anything, up to
 * DLB_NAT_CANDIDATES_MAX (dlb_nat_reserve_more; the ACK's search follows
 * it, dlb_nat_find_more). UDP has no handshake: its first packet claims a
 * port in nat_ports directly, from the same candidates. No candidate
 * free: STAT_DROP_NAT_EXHAUSTED.
 *
 * Replies go to the client gateway of the family when one is configured
 * (config.gw4/gw6), else to the next hop the routing table gives
 * (bpf_fib_lookup once per connection, cached in the nat_ports entry). No
 * resolved neighbour: the translated reply is passed to the host stack,
 * which forwards it and resolves the neighbour (STAT_PASS_NO_NEIGH); no
 * route: dropped (STAT_DROP_NO_ROUTE). */
#pragma once

#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>

#include "common.h"
#include "csum.h"
#include "schedule.h"
#include "table.h"

/* ip6_replace overwrites an IPv6 address in the packet and returns the
 * checksum accumulator term of the change. A call of its own: inlined four
 * times, it would overflow the stack frame with spills. */
static __noinline __u64 ip6_replace(__u32 *p, const struct dlb_ip *addr)
{
	const __u32 *n = (const __u32 *)addr->addr;
	__u64 d = 0;

#pragma unroll
	for (int k = 0; k < 4; k++) {
		d += csum_diff32(p[k], n[k]);
		p[k] = n[k];
	}
	return d;
}

/* nat_rewrite sets the addresses and ports of a TCP or UDP packet and
 * updates its checksums. It returns -1 (changing nothing) when the headers
 * are not all inside the packet. */
static __always_inline int nat_rewrite(int family, void *l3, void *l4, __u8 proto, void *data_end,
				       const struct dlb_ip *src, const struct dlb_ip *dst, __be16 sport, __be16 dport)
{
	__u64 d = 0;

	if (l4 + (proto == IPPROTO_TCP ? sizeof(struct tcphdr) : sizeof(struct udphdr)) > data_end)
		return -1;
	if (family == DLB_FAMILY_IPV4) {
		struct iphdr *iph = l3;
		if ((void *)(iph + 1) > data_end)
			return -1;
		__u32 s = *(const __u32 *)src->addr, t = *(const __u32 *)dst->addr;
		d = csum_diff32(iph->saddr, s) + csum_diff32(iph->daddr, t);
		iph->check = csum_update(iph->check, d);
		iph->saddr = s;
		iph->daddr = t;
	} else {
		struct ipv6hdr *ip6h = l3;
		if ((void *)(ip6h + 1) > data_end)
			return -1;
		d = ip6_replace(ip6h->saddr.in6_u.u6_addr32, src) + ip6_replace(ip6h->daddr.in6_u.u6_addr32, dst);
	}
	__be16 *ports = l4;
	d += csum_diff16(ports[0], sport) + csum_diff16(ports[1], dport);
	ports[0] = sport;
	ports[1] = dport;
	if (proto == IPPROTO_TCP) {
		struct tcphdr *th = l4;
		if ((void *)(th + 1) > data_end)
			return -1;
		th->check = csum_update(th->check, d);
	} else {
		struct udphdr *uh = l4;
		uh->check = csum_update_udp(uh->check, d);
	}
	return 0;
}

#define DLB_EEXIST 17
#define DLB_EBUSY 16

/* Results of client_hop besides 0 (resolved). */
#define HOP_NO_NEIGH 1
#define HOP_NO_ROUTE 2

/* client_hop resolves the next hop towards a NAT client into *out: the
 * configured client gateway, the hop cached in the connection's entry
 * (*flags has NAT_F_NEXT_HOP, looked up under the routes' current
 * generation *gen), or a routing-table lookup whose result is cached
 * there. */
static __always_inline int client_hop(struct xdp_md *ctx, const struct dlb_config *cfg, int family, __u8 proto,
				      const struct dlb_ip *vip, const struct dlb_ip *client, __be16 vip_port,
				      __be16 client_port, __u16 tot_len, __u8 *flags, __u16 *gen,
				      struct next_hop *cached, struct next_hop *out)
{
	const struct next_hop *gw = family == DLB_FAMILY_IPV4 ? &cfg->gw4 : &cfg->gw6;

	if (gw->ifindex) {
		*out = *gw;
		return 0;
	}
	__u16 route_gen = cfg->route_gen;
	if ((*flags & NAT_F_NEXT_HOP) && *gen == route_gen) {
		*out = *cached;
		return 0;
	}

	__u32 key0 = 0;
	struct bpf_fib_lookup *p = bpf_map_lookup_elem(&fib_params, &key0);
	if (!p)
		return HOP_NO_ROUTE;
	__builtin_memset(p, 0, sizeof(*p));
	p->l4_protocol = proto;
	p->sport = vip_port;
	p->dport = client_port;
	p->tot_len = tot_len;
	p->ifindex = ctx->ingress_ifindex;
	if (family == DLB_FAMILY_IPV4) {
		p->family = 2; /* AF_INET */
		p->ipv4_src = *(const __u32 *)vip->addr;
		p->ipv4_dst = *(const __u32 *)client->addr;
	} else {
		p->family = 10; /* AF_INET6 */
		const __u32 *v = (const __u32 *)vip->addr, *c = (const __u32 *)client->addr;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			p->ipv6_src[i] = v[i];
			p->ipv6_dst[i] = c[i];
		}
	}
	event(EV_FIB_LOOKUP);
	int rc = bpf_fib_lookup(ctx, p, sizeof(*p), 0);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return HOP_NO_NEIGH;
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return HOP_NO_ROUTE;
	__builtin_memcpy(cached->mac, p->dmac, ETH_ALEN);
	__builtin_memcpy(cached->src_mac, p->smac, ETH_ALEN);
	cached->ifindex = p->ifindex;
	*gen = route_gen;
	*flags |= NAT_F_NEXT_HOP;
	*out = *cached;
	return 0;
}

/* l3_len returns the length of the IP packet (header included). */
static __always_inline __u16 l3_len(int family, void *l3, void *data_end)
{
	if (family == DLB_FAMILY_IPV4) {
		struct iphdr *iph = l3;
		if ((void *)(iph + 1) > data_end)
			return 0;
		return bpf_ntohs(iph->tot_len);
	}
	struct ipv6hdr *ip6h = l3;
	if ((void *)(ip6h + 1) > data_end)
		return 0;
	return bpf_ntohs(ip6h->payload_len) + sizeof(*ip6h);
}

/* to_client sends a translated frame towards a NAT client: MAC rewrite
 * towards hop, or the host stack when hop is unresolved. b is the server
 * the frame came from (for the trace). */
static __always_inline int to_client(struct xdp_md *ctx, struct ethhdr *eth, int rc, const struct next_hop *hop,
				     const struct backend *b)
{
	if (rc == HOP_NO_NEIGH)
		return verdict(ctx, STAT_PASS_NO_NEIGH, XDP_PASS);
	set_macs(eth, hop->mac);
	if (dlb_trace_on)
		return dlb_trace_tx(ctx, TRACE_F_HIT << 16 | TRACE_TX_REPLY, b, hop->ifindex);
	return transmit(ctx, hop->ifindex, 1);
}

/* nat_key_of builds the key of a return address's port. */
static __always_inline void nat_key_of(struct nat_key *k, const struct dlb_ip *nat_addr, __be16 nat_port, __u8 proto,
				       int family)
{
	ip_copy(&k->addr, nat_addr);
	k->port = nat_port;
	k->proto = proto;
	k->family = family;
}

/* halfopen_index returns the nat_halfopen slot of a reservation. */
static __always_inline __u32 halfopen_index(const struct nat_key *k, __u32 mask)
{
	const __u32 *w = (const __u32 *)k->addr.addr;

	return dlb_fmix32(w[0] ^ w[1] ^ w[2] ^ w[3] ^ ((__u32)k->port << 8) ^ k->proto) & mask;
}

/* halfopen_tag is the 32-bit tag of a slot's contents, never 0: a reader
 * that finds it in owner knows the contents are whole. */
static __always_inline __u32 halfopen_tag(const struct halfopen *h, __u32 seed)
{
	struct flow_key k = {
		.sport = h->client_port,
		.dport = h->vip_port,
		.proto = h->key.proto,
		.family = h->key.family,
	};
	const __u32 *w = (const __u32 *)h->key.addr.addr;

	ip_copy(&k.src, &h->client);
	ip_copy(&k.dst, &h->vip);
	return (tab_hash_flow(&k, seed) ^ w[0] ^ w[1] ^ w[2] ^ w[3] ^ h->key.port ^ h->backend) | 1;
}

/* halfopen_stamp is the time stamp of a half-open reservation: seconds
 * since boot, counted from 1 so that a slot claimed in the first second
 * after boot (stamp << 32, tag 0) still differs from a free one (0). */
static __always_inline __u64 halfopen_stamp(__u64 now)
{
	return now / NSEC_PER_SEC + 1;
}

/* halfopen_live reports whether a slot's owner word is a live
 * reservation (or one being written). A stamp ahead of now_s (written by a
 * CPU whose cached clock is a tick ahead) is live. */
static __always_inline int halfopen_live(__u64 owner, __u64 now_s)
{
	__u64 stamp = owner >> 32;

	return owner != 0 && (stamp >= now_s || now_s - stamp <= DLB_HALF_OPEN_SECONDS);
}

/* halfopen_get returns the live, whole half-open reservation of key k, and
 * its owner word. */
static __always_inline struct halfopen *halfopen_get(const struct nat_key *k, const struct dlb_config *cfg, __u64 now,
						     __u64 *owner)
{
	__u32 idx = halfopen_index(k, cfg->halfopen_mask);
	struct halfopen *h = bpf_map_lookup_elem(&nat_halfopen, &idx);

	if (!h)
		return NULL;
	__u64 o = h->owner;
	if (!halfopen_live(o, halfopen_stamp(now)) || !nat_key_eq(&h->key, k) || (__u32)o != halfopen_tag(h, cfg->hash_seed))
		return NULL;
	*owner = o;
	return h;
}

/* halfopen_release frees a slot, unless its owner changed meanwhile. */
static __always_inline void halfopen_release(struct halfopen *h, __u64 owner)
{
	__sync_val_compare_and_swap(&h->owner, owner, 0);
}

/* halfopen_claim takes a slot whose owner word is expect, marking it as
 * being written. Only one of several CPUs claiming a slot at once wins. */
static __always_inline int halfopen_claim(struct halfopen *h, __u64 expect, __u64 now_s)
{
	return __sync_val_compare_and_swap(&h->owner, expect, now_s << 32) == expect;
}

/* halfopen_fill writes a claimed slot and publishes it. */
static __always_inline void halfopen_fill(struct halfopen *h, const struct nat_key *k, const struct flow_key *fk,
					  __u32 backend, __u32 service, __u64 now_s, __u32 seed)
{
	h->key = *k;
	ip_copy(&h->client, &fk->src);
	ip_copy(&h->vip, &fk->dst);
	h->client_port = fk->sport;
	h->vip_port = fk->dport;
	h->flags = 0;
	h->backend = backend;
	h->service = service;
	__builtin_memset(&h->hop, 0, sizeof(h->hop));
	h->owner = (now_s << 32) | halfopen_tag(h, seed);
}

/* owns reports whether a half-open or reverse entry belongs to the client
 * flow fk. */
static __always_inline int owns(const struct dlb_ip *client, const struct dlb_ip *vip, __be16 client_port,
				__be16 vip_port, const struct flow_key *fk)
{
	return client_port == fk->sport && vip_port == fk->dport && ip_eq(client, &fk->src) && ip_eq(vip, &fk->dst);
}

/* nat_close_fwd marks the client side of a connection closing when the
 * server sent FIN or RST. */
static __always_inline void nat_close_fwd(const struct dlb_config *cfg, const struct nat_rev *r, __u8 proto, int family,
					  __u64 now)
{
	struct flow_key k = { .sport = r->client_port, .dport = r->vip_port, .proto = proto, .family = family };
	__u32 pos, slot;

	ip_copy(&k.src, &r->client);
	ip_copy(&k.dst, &r->vip);
	struct nat_flow_entry *e = natf_find_call(&k, tab_hash_flow(&k, cfg->hash_seed), cfg->natf_buckets, &pos, &slot);
	if (!e)
		return;
	struct nat_flow *nf = &e->flow;
	if (nf->state == FLOW_ESTABLISHED) {
		nf->state = FLOW_CLOSING;
		nf->last_seen = now;
		count_fin(nf->backend, nf->service);
	}
}

/* nat_reply handles a TCP or UDP packet to a return address: the reply of
 * an established (nat_ports) or half-open (nat_halfopen) connection is
 * translated back and sent to the client. It returns -1 when the packet is
 * no such reply, for the caller to go on. */
static __always_inline int nat_reply(struct xdp_md *ctx, struct pkt *pk, int family)
{
	void *data_end = (void *)(long)ctx->data_end;
	const struct flow_key *fk = &pk->fk;
	struct nat_key nk = { .port = fk->dport, .proto = fk->proto, .family = family };
	struct next_hop hop = {};
	int rc;

	ip_copy(&nk.addr, &fk->dst);
	__u32 pos, slot;
	struct nat_port_entry *pe =
		natp_find(&nk, tab_hash_natkey(&nk, pk->cfg->hash_seed), pk->cfg->natp_buckets, &pos, &slot);
	if (pe) {
		struct nat_rev *r = &pe->rev;
		struct backend *b = backend_ok(r->backend, r->service);
		if (!b || !ip_eq(&b->addr, &fk->src) || server_port(b, r->vip_port) != fk->sport)
			return -1;
		__u64 now = clock_now();
		if ((pk->tcp_flags & (TCP_FIN | TCP_RST)) && r->state == FLOW_ESTABLISHED) {
			r->state = FLOW_CLOSING;
			r->last_seen = now;
			nat_close_fwd(pk->cfg, r, fk->proto, family, now);
		} else if (idle_ns(now, r->last_seen) > FLOW_TOUCH_NS) {
			r->last_seen = now;
		}
		rc = client_hop(ctx, pk->cfg, family, fk->proto, &r->vip, &r->client, r->vip_port, r->client_port,
				l3_len(family, pk->l3, data_end), &r->flags, &r->route_gen, &r->hop, &hop);
		if (rc == HOP_NO_ROUTE)
			return verdict(ctx, STAT_DROP_NO_ROUTE, XDP_DROP);
		if (nat_rewrite(family, pk->l3, pk->l4, fk->proto, data_end, &r->vip, &r->client, r->vip_port,
				r->client_port))
			return verdict(ctx, STAT_PASS_MALFORMED, XDP_PASS);
		__u64 bytes = ctx->data_end - ctx->data;
		count(&service_stats, r->service, bytes, 0, 0);
		count_backend(r->backend, bytes, 0);
		return to_client(ctx, pk->eth, rc, &hop, b);
	}

	/* The server's answer to a SYN whose handshake is not complete. */
	__u64 owner;
	struct halfopen *h = halfopen_get(&nk, pk->cfg, clock_now(), &owner);
	if (!h)
		return -1;
	struct backend *b = backend_ok(h->backend, h->service);
	if (!b || !ip_eq(&b->addr, &fk->src) || server_port(b, h->vip_port) != fk->sport)
		return -1;
	rc = client_hop(ctx, pk->cfg, family, fk->proto, &h->vip, &h->client, h->vip_port, h->client_port,
			l3_len(family, pk->l3, data_end), &h->flags, &h->route_gen, &h->hop, &hop);
	if (rc == HOP_NO_ROUTE)
		return verdict(ctx, STAT_DROP_NO_ROUTE, XDP_DROP);
	if (nat_rewrite(family, pk->l3, pk->l4, fk->proto, data_end, &h->vip, &h->client, h->vip_port, h->client_port))
		return verdict(ctx, STAT_PASS_MALFORMED, XDP_PASS);
	__u64 bytes = ctx->data_end - ctx->data;
	count(&service_stats, h->service, bytes, 0, 0);
	count_backend(h->backend, bytes, 0);
	if (pk->tcp_flags & TCP_RST) {
		/* The server refused the connection: free the port. */
		halfopen_release(h, owner);
	}
	return to_client(ctx, pk->eth, rc, &hop, b);
}

/* nat_to_server translates a client's packet towards b and forwards it.
 * hit: the packet followed a nat_flows entry (for the trace). */
static __always_inline int nat_to_server(struct xdp_md *ctx, struct pkt *pk, int family, const struct dlb_ip *nat_addr,
					 __be16 nat_port, const struct backend *b, __u32 backend_id, __u32 service,
					 __u32 new_conns, int hit)
{
	void *data_end = (void *)(long)ctx->data_end;

	if (nat_rewrite(family, pk->l3, pk->l4, pk->fk.proto, data_end, nat_addr, &b->addr, nat_port,
			server_port(b, pk->fk.dport)))
		return verdict(ctx, STAT_PASS_MALFORMED, XDP_PASS);
	return forward(ctx, pk, b, backend_id, service, new_conns, hit);
}

/* nat_release frees an established mapping: its nat_ports entry (if it is
 * still this flow's) and its nat_flows entry. */
static __always_inline void nat_release(const struct dlb_config *cfg, const struct flow_key *fk,
					const struct dlb_ip *nat_addr, __be16 nat_port, int family)
{
	struct nat_key nk = { .port = nat_port, .proto = fk->proto, .family = family };
	__u32 pos, slot, h;

	ip_copy(&nk.addr, nat_addr);
	h = tab_hash_natkey(&nk, cfg->hash_seed);
	struct nat_port_entry *pe = natp_find_call(&nk, h, cfg->natp_buckets, &pos, &slot);
	if (pe && owns(&pe->rev.client, &pe->rev.vip, pe->rev.client_port, pe->rev.vip_port, fk))
		natp_delete(pos, slot, h, cfg->natp_buckets);
	h = tab_hash_flow(fk, cfg->hash_seed);
	if (natf_find_call(fk, h, cfg->natf_buckets, &pos, &slot))
		natf_delete(pos, slot, h, cfg->natf_buckets);
	event(EV_NAT_FLOW_RELEASED);
}

/* nat_existing handles a client's packet of a NAT connection with a
 * nat_flows entry that the fast path did not take (SYN, FIN, RST, or its
 * server changed). It returns -1 when the entry was released and the
 * packet must start a new connection. */
static __always_inline int nat_existing(struct xdp_md *ctx, struct pkt *pk, const struct vip_meta *vm,
					struct nat_flow *nf, int family)
{
	int tcp = pk->fk.proto == IPPROTO_TCP;
	int syn = tcp && (pk->tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN;
	__u64 now = clock_now();
	__u32 id = nf->backend;
	struct backend *b = backend_ok(id, vm->service);
	int gone = !b || nf->service != vm->service;
	__u64 timeout = nf->state == FLOW_CLOSING ? vm->fin_timeout : vm->stale_timeout;
	__u64 idle = idle_ns(now, nf->last_seen);
	int expired = idle > timeout * NSEC_PER_SEC;

	if (!gone && !(syn && (!(b->flags & BACKEND_F_NEW_OK) || nf->state == FLOW_CLOSING || expired))) {
		if ((pk->tcp_flags & (TCP_FIN | TCP_RST)) && nf->state == FLOW_ESTABLISHED) {
			nf->state = FLOW_CLOSING;
			nf->last_seen = now;
			count_fin(id, vm->service);
			affinity_touch(vm, &pk->fk, id, now, family);
		} else if (idle > FLOW_TOUCH_NS) {
			nf->last_seen = now;
		}
		return nat_to_server(ctx, pk, family, &nf->nat_addr, nf->nat_port, b, id, vm->service, 0, 1);
	}

	/* The mapping ends: its server is gone, or this SYN starts a new
	 * connection. A replaced established connection counts as finished
	 * on its old server. */
	if (nf->state == FLOW_ESTABLISHED && !gone)
		count_fin(id, vm->service);
	struct dlb_ip nat_addr;
	ip_copy(&nat_addr, &nf->nat_addr);
	nat_release(pk->cfg, &pk->fk, &nat_addr, nf->nat_port, family);
	if (tcp && !syn)
		return verdict(ctx, STAT_DROP_NAT_NO_FLOW, XDP_DROP);
	return -1;
}

/* dlb_natp_taken reports whether an established connection holds port
 * key k (in nat_ports). A global function: dlb_nat_reserve's candidate
 * loop around an inlined lookup would be more than the verifier checks. */
__noinline int dlb_natp_taken(const struct nat_key *k)
{
	__u32 key0 = 0;
	const struct dlb_config *cfg = bpf_map_lookup_elem(&config, &key0);

	if (!k || !cfg)
		return 0;
	__u32 h = tab_hash_natkey(k, cfg->hash_seed), n1, n2;

	tab_buckets(h, cfg->natp_buckets, &n1, &n2);
	struct tab_bucket *b = bpf_map_lookup_elem(&nat_port_index, &n1);
	if (!b)
		return 0;
	if (natp_probe_loop(b, n1, tab_tag_pattern(h), k) >= 0)
		return 1;
	if (!tab_spilled(b, h))
		return 0;
	b = bpf_map_lookup_elem(&nat_port_index, &n2);
	return b && natp_probe_loop(b, n2, tab_tag_pattern(h), k) >= 0;
}

/* nat_pool sets *nh, *pmin and *psize to the candidate sequence
 * (nat_candidate) of flow fk on backend b's pool of return ports, and
 * returns 0 when b has no pool. */
static __always_inline int nat_pool(const struct backend *b, const struct flow_key *fk, const struct dlb_config *cfg,
				    __u32 *nh, __u32 *pmin, __u32 *psize)
{
	__u32 lo = b->nat_port_min, hi = b->nat_port_max;

	if (lo == 0 || hi < lo)
		return 0;
	*pmin = lo;
	*psize = hi - lo + 1;
	*nh = flow_hash(fk, cfg->hash_seed ^ NAT_HASH_SALT);
	return 1;
}

/* nat_sequence returns backend a->backend, with a->nh, a->pmin and
 * a->psize set to the candidate sequence of a->fk on its pool, or NULL
 * when it has no pool. dlb_nat_reserve and dlb_nat_find compute it; their
 * "more" searches, which run only after them, use it as they left it. */
static __always_inline struct backend *nat_sequence(struct nat_args *a, const struct dlb_config *cfg)
{
	/* Helpers take keys on the stack or in a map value: a is a global
	 * function's argument (memory of unknown kind to Linux 6.1's verifier). */
	__u32 id = a->backend;
	struct backend *b = bpf_map_lookup_elem(&backends, &id);

	if (!b || !nat_pool(b, &a->fk, cfg, &a->nh, &a->pmin, &a->psize))
		return NULL;
	return b;
}

/* dlb_nat_reserve reserves a port of the return address of backend
 * a->backend for a new TCP connection a->fk, claiming the port's half-open
 * slot. It returns the port (network order), or 0 when every candidate is
 * taken; a->nk and a->slot name the reservation. A retransmitted SYN finds
 * the reservation its first SYN made: then a->retx is 1 and a->backend the
 * backend that reservation names. A global function: the verifier checks
 * its loop once, not at each caller. */
__noinline int dlb_nat_reserve(struct nat_args *a)
{
	__u32 key0 = 0;

	if (!a)
		return 0;
	a->retx = 0;
	a->more = 0;
	struct dlb_config *cfg = bpf_map_lookup_elem(&config, &key0);
	if (!cfg)
		return 0;
	struct backend *b = nat_sequence(a, cfg);
	if (!b)
		return 0;
	__u32 nh = a->nh, min = a->pmin, size = a->psize;
	__u64 now_s = halfopen_stamp(a->now);
	__u64 oldest = ~0ULL, victim_owner = 0;
	__u32 victim = 0;
	__be16 victim_port = 0;
	nat_key_of(&a->nk, &b->nat_addr, 0, a->fk.proto, a->fk.family);

	for (int i = 0; i < DLB_NAT_CANDIDATES; i++) {
		__be16 port = bpf_htons(nat_candidate(nh, i, min, size));
		a->nk.port = port;
		__u32 idx = halfopen_index(&a->nk, cfg->halfopen_mask);
		struct halfopen *h = bpf_map_lookup_elem(&nat_halfopen, &idx);
		if (!h)
			continue;
		__u64 o = h->owner;
		if (halfopen_live(o, now_s)) {
			if (nat_key_eq(&h->key, &a->nk)) {
				/* The port is reserved: by this flow's first SYN? */
				if (owns(&h->client, &h->vip, h->client_port, h->vip_port, &a->fk) &&
				    (__u32)o == halfopen_tag(h, cfg->hash_seed)) {
					a->retx = 1;
					/* The SYN-ACK may not have reached the client
					 * through the hop it cached (its neighbour's MAC
					 * changed, or its interface was recreated): the
					 * next one looks the hop up again. */
					h->flags &= ~NAT_F_NEXT_HOP;
					a->backend = h->backend;
					a->slot = idx;
					a->owner = o;
					return port;
				}
				event(EV_NAT_PORT_COLLISION);
				continue;
			}
			/* Another port's reservation: displaceable if all are taken,
			 * and if no established connection holds this port. */
			if ((__u32)o && (o >> 32) < oldest && !dlb_natp_taken(&a->nk)) {
				oldest = o >> 32;
				victim = idx;
				victim_port = port;
				victim_owner = o;
			}
			continue;
		}
		if (dlb_natp_taken(&a->nk) || !halfopen_claim(h, o, now_s)) {
			event(EV_NAT_PORT_COLLISION);
			continue;
		}
		halfopen_fill(h, &a->nk, &a->fk, a->backend, a->service, now_s, cfg->hash_seed);
		a->slot = idx;
		a->owner = h->owner;
		return port;
	}

	/* Every candidate's slot holds a live reservation: take the oldest
	 * that is not of this port (the table is full, as under a flood). */
	if (victim_owner) {
		a->nk.port = victim_port;
		struct halfopen *h = bpf_map_lookup_elem(&nat_halfopen, &victim);
		if (h && halfopen_claim(h, victim_owner, now_s)) {
			halfopen_fill(h, &a->nk, &a->fk, a->backend, a->service, now_s, cfg->hash_seed);
			event(EV_HALFOPEN_EVICTED);
			a->slot = victim;
			a->owner = h->owner;
			return victim_port;
		}
		return 0;
	}
	/* Every candidate is held by a connection or by a reservation of its
	 * own port: the pool is in heavy use, not flooded. */
	a->more = 1;
	return 0;
}

/* dlb_nat_free_port sets k->port to the first of candidates
 * DLB_NAT_CANDIDATES up to DLB_NAT_CANDIDATES_MAX (of hash nh on the pool
 * [min, min+size)) that no connection holds, and returns 1, or returns 0
 * when every one is held. For UDP, which claims ports in nat_ports
 * directly. A global function. */
__noinline int dlb_nat_free_port(struct nat_key *k, __u32 nh, __u32 min, __u32 size)
{
	if (!k || size == 0)
		return 0;
	for (int i = DLB_NAT_CANDIDATES; i < DLB_NAT_CANDIDATES_MAX; i++) {
		k->port = bpf_htons(nat_candidate(nh, i, min, size));
		if (!dlb_natp_taken(k))
			return 1;
		event(EV_NAT_PORT_COLLISION);
	}
	return 0;
}

/* What dlb_nat_candidate found. */
enum {
	NAT_CAND_FREE,     /* no reservation in its slot, no connection holds it */
	NAT_CAND_MINE,     /* a live reservation of it by flow a->fk */
	NAT_CAND_RESERVED, /* a live reservation of it by another flow */
	NAT_CAND_HELD,     /* an established connection holds it */
	NAT_CAND_OTHER,    /* its slot holds a live reservation of another port */
};

/* dlb_nat_candidate examines candidate i of a->fk's sequence (a->nh,
 * a->pmin, a->psize) on a->nk's return address: it sets a->nk.port, and
 * a->slot and a->owner to the port's half-open slot and its owner word,
 * and returns a NAT_CAND_* value. With held 0 it does not look the port up
 * in nat_ports (for a search that wants only NAT_CAND_MINE): then a port
 * it calls free or other may be held. A global function, so that the
 * later candidates' loops verify as small loops of calls. */
__noinline int dlb_nat_candidate(struct nat_args *a, __u32 i, __u32 held)
{
	__u32 key0 = 0;

	if (!a)
		return NAT_CAND_HELD;
	struct dlb_config *cfg = bpf_map_lookup_elem(&config, &key0);
	if (!cfg || a->psize == 0)
		return NAT_CAND_HELD;
	a->nk.port = bpf_htons(nat_candidate(a->nh, i, a->pmin, a->psize));
	__u32 idx = halfopen_index(&a->nk, cfg->halfopen_mask);
	struct halfopen *h = bpf_map_lookup_elem(&nat_halfopen, &idx);
	if (!h)
		return NAT_CAND_HELD;
	__u64 o = h->owner;
	int live = halfopen_live(o, halfopen_stamp(a->now));
	a->slot = idx;
	a->owner = o;
	if (live && nat_key_eq(&h->key, &a->nk)) {
		if (owns(&h->client, &h->vip, h->client_port, h->vip_port, &a->fk) && (__u32)o == halfopen_tag(h, cfg->hash_seed))
			return NAT_CAND_MINE;
		return NAT_CAND_RESERVED;
	}
	if (held && dlb_natp_taken(&a->nk))
		return NAT_CAND_HELD;
	return live ? NAT_CAND_OTHER : NAT_CAND_FREE;
}

/* dlb_nat_reserve_more goes on where dlb_nat_reserve stopped with a->more
 * set (and the candidate sequence, nat_sequence): it reserves the first of candidates DLB_NAT_CANDIDATES up to
 * DLB_NAT_CANDIDATES_MAX that is free (it displaces no reservation: only
 * the first candidates do, so that a flood costs each SYN at most those).
 * A retransmitted SYN finds its reservation here too. It returns the port
 * (network order) or 0, as dlb_nat_reserve. A global function. */
__noinline int dlb_nat_reserve_more(struct nat_args *a)
{
	__u32 key0 = 0;

	if (!a)
		return 0;
	struct dlb_config *cfg = bpf_map_lookup_elem(&config, &key0);
	if (!cfg)
		return 0;
	int st = NAT_CAND_HELD;
	for (int i = DLB_NAT_CANDIDATES; i < DLB_NAT_CANDIDATES_MAX; i++) {
		st = dlb_nat_candidate(a, i, 1);
		if (st == NAT_CAND_FREE || st == NAT_CAND_MINE)
			break;
		event(EV_NAT_PORT_COLLISION);
	}
	__u32 slot = a->slot; /* a key on the stack: see nat_sequence */
	struct halfopen *h = bpf_map_lookup_elem(&nat_halfopen, &slot);
	if (!h)
		return 0;
	if (st == NAT_CAND_MINE) {
		a->retx = 1;
		a->backend = h->backend;
		return a->nk.port;
	}
	__u64 now_s = halfopen_stamp(a->now);
	if (st != NAT_CAND_FREE || !halfopen_claim(h, a->owner, now_s))
		return 0;
	halfopen_fill(h, &a->nk, &a->fk, a->backend, a->service, now_s, cfg->hash_seed);
	a->owner = h->owner;
	return a->nk.port;
}

/* dlb_nat_find finds the half-open connection of client flow a->fk (table
 * hash a->thash) by the reservation its SYN remembered in the NAT handshake
 * cache. It returns 1 and fills a->nk, a->slot and a->owner, or returns 0
 * (the slot was overwritten: a flood, or a hash collision), and the caller
 * then looks among the candidate ports of the server the SYN would have
 * picked (dlb_nat_find_server). A global function, like dlb_nat_reserve. */
__noinline int dlb_nat_find(struct nat_args *a)
{
	__u32 key0 = 0;
	struct halfopen *h;

	if (!a)
		return 0;
	struct dlb_config *cfg = bpf_map_lookup_elem(&config, &key0);
	if (!cfg)
		return 0;
	__u32 hash = a->thash;
	__u32 slot = hash & (HANDSHAKE_SLOTS - 1);
	struct nat_handshake *hs = bpf_map_lookup_elem(&nat_handshakes, &slot);
	if (!hs || hs->check != (hash ^ hs->slot))
		return 0;
	__u32 idx = hs->slot;
	h = bpf_map_lookup_elem(&nat_halfopen, &idx);
	if (h) {
		/* The slot's key, then the whole reservation read again and
		 * checked under it (halfopen_get: live, contents whole, the
		 * same key), as another CPU may be rewriting the slot. */
		__builtin_memcpy(&a->nk, &h->key, sizeof(a->nk));
		h = halfopen_get(&a->nk, cfg, a->now, &a->owner);
		if (h && a->nk.proto == a->fk.proto && a->nk.family == a->fk.family &&
		    owns(&h->client, &h->vip, h->client_port, h->vip_port, &a->fk)) {
			a->slot = halfopen_index(&a->nk, cfg->halfopen_mask);
			return 1;
		}
	}
	return 0;
}

/* dlb_nat_find_server looks for the half-open connection of a->fk among
 * the first candidate ports of server a->backend, the one the SYN would
 * have picked (Maglev: the caller picks it, so that the pick's frames do
 * not stack on this one's; Linux 6.1 counts every frame of the deepest
 * chain of calls against the 512-byte stack, in 32-byte steps). It
 * returns 1 and fills a->nk, a->slot and a->owner, or returns 0, with
 * a->more set when the search should go on (dlb_nat_find_more). A global
 * function. */
__noinline int dlb_nat_find_server(struct nat_args *a)
{
	__u32 key0 = 0;
	struct halfopen *h;

	if (!a)
		return 0;
	a->more = 0;
	struct dlb_config *cfg = bpf_map_lookup_elem(&config, &key0);
	if (!cfg)
		return 0;
	struct backend *b = nat_sequence(a, cfg);
	if (!b)
		return 0;
	__u32 nh = a->nh, min = a->pmin, size = a->psize;
	nat_key_of(&a->nk, &b->nat_addr, 0, a->fk.proto, a->fk.family);
	for (int i = 0; i < DLB_NAT_CANDIDATES; i++) {
		a->nk.port = bpf_htons(nat_candidate(nh, i, min, size));
		h = halfopen_get(&a->nk, cfg, a->now, &a->owner);
		if (h && owns(&h->client, &h->vip, h->client_port, h->vip_port, &a->fk)) {
			a->slot = halfopen_index(&a->nk, cfg->halfopen_mask);
			return 1;
		}
	}
	a->more = 1;
	return 0;
}

/* dlb_nat_find_more goes on where dlb_nat_find_server stopped with a->more set
 * (a->backend the server the SYN would have picked, and its candidate
 * sequence, nat_sequence): if every one of the
 * first candidates is held, by a connection or a reservation of its own
 * port, the SYN went on to the later ones (dlb_nat_reserve_more), and so
 * does this search. It returns 1 and fills a->nk, a->slot and a->owner, or
 * returns 0. A global function. */
__noinline int dlb_nat_find_more(struct nat_args *a)
{
	if (!a)
		return 0;
	for (int i = 0; i < DLB_NAT_CANDIDATES; i++) {
		int st = dlb_nat_candidate(a, i, 1);
		if (st == NAT_CAND_MINE)
			return 1;
		if (st != NAT_CAND_RESERVED && st != NAT_CAND_HELD)
			return 0;
	}
	for (int i = DLB_NAT_CANDIDATES; i < DLB_NAT_CANDIDATES_MAX; i++) {
		if (dlb_nat_candidate(a, i, 0) == NAT_CAND_MINE)
			return 1;
	}
	return 0;
}

/* nat_scratch returns this CPU's scratch space for the NAT slow paths'
 * large values (the BPF stack is too small to hold them beside the rest). */
static __always_inline struct nat_scratch *nat_scratch(void)
{
	__u32 key0 = 0;

	return bpf_map_lookup_elem(&scratch, &key0);
}

/* nat_syn handles the SYN of a new NAT connection: it gets a server and a
 * port; a retransmitted SYN finds the port its first SYN reserved. */
static __always_inline int nat_syn(struct xdp_md *ctx, struct pkt *pk, const struct vip_meta *vm, int family)
{
	const struct flow_key *fk = &pk->fk;
	struct nat_scratch *sc = nat_scratch();
	__u64 now = clock_now();
	__u32 id;

	if (!sc)
		return verdict(ctx, STAT_DROP_TABLE_FULL, XDP_DROP);
	__u32 hash = pk->thash;
	struct backend *b = pick_new(vm, pk->cfg, fk, hash, now, family, &id);
	if (!b)
		return verdict(ctx, STAT_DROP_NO_BACKEND, XDP_DROP);
	struct nat_args *a = &sc->args;
	__builtin_memcpy(&a->fk, fk, sizeof(*fk));
	a->now = now;
	a->backend = id;
	a->service = vm->service;
	__be16 port = dlb_nat_reserve(a);
	if (!port && a->more)
		port = dlb_nat_reserve_more(a);
	if (!port)
		return verdict(ctx, STAT_DROP_NAT_EXHAUSTED, XDP_DROP);
	if (a->retx) {
		/* A retransmission: to the server its first SYN went to. */
		event(EV_HALFOPEN_RETRANSMIT);
		id = a->backend;
		b = backend_ok(id, vm->service);
		if (!b)
			return verdict(ctx, STAT_DROP_NO_BACKEND, XDP_DROP);
	} else {
		event(EV_HALFOPEN_CREATED);
	}

	/* Remember the reservation for the handshake's ACK (by the table
	 * hash, which the ACK has computed). */
	__u32 slot = pk->thash & (HANDSHAKE_SLOTS - 1);
	struct nat_handshake *hs = bpf_map_lookup_elem(&nat_handshakes, &slot);
	if (hs) {
		hs->slot = a->slot;
		hs->check = pk->thash ^ a->slot;
	}
	return nat_to_server(ctx, pk, family, &a->nk.addr, port, b, id, vm->service, 0, 0);
}

/* nat_insert_err is the error of an insert's result other than
 * TAB_INSERTED: -EEXIST (the key is taken), -EBUSY (its bucket stayed
 * locked) or -1 (the table is full). */
static __always_inline int nat_insert_err(int res)
{
	if (res == TAB_EXISTS)
		return -DLB_EEXIST;
	return res == TAB_LOCKED ? -DLB_EBUSY : -1;
}

/* dlb_nat_establish inserts an established mapping: sc->natp (the port)
 * and sc->natf (the client flow), keys and values filled in. It returns 0,
 * -EEXIST when the port or the flow is taken, -EBUSY when another CPU kept
 * a bucket locked TAB_INSERT_TRIES times, or -1 when a table is full. A
 * global function: the verifier checks its retry loops once, not in each
 * of the slow paths (and each of their loops) that call it. */
__noinline int dlb_nat_establish(struct nat_scratch *sc)
{
	__u32 key0 = 0;
	const struct dlb_config *cfg = bpf_map_lookup_elem(&config, &key0);

	if (!sc || !cfg)
		return -1;
	sc->natp.hash = tab_hash_natkey(&sc->natp.e.key, cfg->hash_seed);
	int res = TAB_INSERT_RETRY(dlb_natp_insert(&sc->natp));
	if (res != TAB_INSERTED)
		return nat_insert_err(res);
	sc->natf.hash = tab_hash_flow(&sc->natf.e.key, cfg->hash_seed);
	res = TAB_INSERT_RETRY(dlb_natf_insert(&sc->natf));
	if (res == TAB_INSERTED)
		return 0;
	/* Undo the port: the flow is taken, its table is full, or its bucket
	 * stayed locked. */
	__u32 pos, slot;
	if (natp_find_call(&sc->natp.e.key, sc->natp.hash, cfg->natp_buckets, &pos, &slot) && slot == sc->natp.slot)
		natp_delete(pos, slot, sc->natp.hash, cfg->natp_buckets);
	return nat_insert_err(res);
}

/* nat_table_full counts a refused insert. */
static __always_inline int nat_table_full(struct xdp_md *ctx)
{
	event(EV_NAT_TABLE_FULL);
	return verdict(ctx, STAT_DROP_TABLE_FULL, XDP_DROP);
}


/* nat_find finds the half-open connection of a->fk of service vm: the
 * reservation its SYN remembered, else the one among the candidate ports
 * of the server the SYN would have picked. It returns 1 with a->nk,
 * a->slot and a->owner filled, or 0. */
static __always_inline int nat_find(struct nat_args *a, const struct vip_meta *vm, const struct dlb_config *cfg)
{
	if (dlb_nat_find(a))
		return 1;
	int pid = dlb_pick(vm, cfg, &a->fk, a->thash, a->now);
	if (pid < 0)
		return 0;
	a->backend = pid;
	return dlb_nat_find_server(a) || (a->more && dlb_nat_find_more(a));
}

/* nat_promote handles a client's TCP segment (no SYN) of a connection
 * without a nat_flows entry: the handshake's ACK promotes its half-open
 * connection; a RST aborts it; anything else is dropped. */
static __always_inline int nat_promote(struct xdp_md *ctx, struct pkt *pk, const struct vip_meta *vm, int family)
{
	const struct flow_key *fk = &pk->fk;
	struct nat_scratch *sc = nat_scratch();
	__u64 now = clock_now();
	/* Every way out to a server but the RST's goes through one
	 * nat_to_server (at out), as in balance: one copy of it. */
	const struct dlb_ip *fa;
	__be16 fport;
	const struct backend *fb;
	__u32 fid, fnew, fhit;
#define GO_NAT_FORWARD(a_, port_, b_, id_, new_, hit_) \
	do {                                           \
		fa = (a_);                             \
		fport = (port_);                       \
		fb = (b_);                             \
		fid = (id_);                           \
		fnew = (new_);                         \
		fhit = (hit_);                         \
		goto out;                              \
	} while (0)

	if (!sc)
		return verdict(ctx, STAT_DROP_TABLE_FULL, XDP_DROP);
	struct nat_args *a = &sc->args;
	__builtin_memcpy(&a->fk, fk, sizeof(*fk));
	a->now = now;
	a->thash = pk->thash;
	struct halfopen *h = NULL;
	if (nat_find(a, vm, pk->cfg))
		h = bpf_map_lookup_elem(&nat_halfopen, &a->slot);
	if (!h) {
		/* Another CPU may have promoted the connection since this
		 * packet missed nat_flows (the handshake's ACK and the first
		 * data segment raced): follow its mapping. */
		__u32 pos, slot;
		struct nat_flow_entry *ne = natf_find_call(fk, pk->thash, pk->cfg->natf_buckets, &pos, &slot);
		struct backend *ob = ne ? backend_ok(ne->flow.backend, vm->service) : NULL;
		if (ob)
			GO_NAT_FORWARD(&ne->flow.nat_addr, ne->flow.nat_port, ob, ne->flow.backend, 0, 1);
		event(EV_HALFOPEN_LOST);
		return verdict(ctx, STAT_DROP_NAT_NO_FLOW, XDP_DROP);
	}
	struct nat_key *nk = &a->nk;
	__u64 owner = a->owner;
	__u32 id = h->backend;
	struct backend *b = backend_ok(id, vm->service);
	if (!b) {
		halfopen_release(h, owner);
		return verdict(ctx, STAT_DROP_NAT_NO_FLOW, XDP_DROP);
	}

	if (pk->tcp_flags & TCP_RST) {
		/* The client aborted the handshake: forward, free the port. */
		int v = nat_to_server(ctx, pk, family, &nk->addr, nk->port, b, id, vm->service, 0, 0);
		halfopen_release(h, owner);
		return v;
	}

	int closing = pk->tcp_flags & TCP_FIN;
	__builtin_memcpy(&sc->natp.e.key, nk, sizeof(*nk));
	__builtin_memcpy(&sc->natf.e.key, fk, sizeof(*fk));
	struct nat_rev *rv = &sc->natp.e.rev;
	__builtin_memset(rv, 0, sizeof(*rv));
	rv->last_seen = now;
	rv->client_port = h->client_port;
	rv->vip_port = h->vip_port;
	rv->backend = id;
	rv->service = vm->service;
	rv->state = closing ? FLOW_CLOSING : FLOW_ESTABLISHED;
	rv->flags = h->flags;
	/* The hop cached at the SYN-ACK goes out through the interface the
	 * client's ACK came in on, unless routing is asymmetric or that
	 * interface was deleted and created again (with a new index) during
	 * the handshake, after dlbd's sweep of stale hops in nat_ports. Keep
	 * it only then; else the next reply looks it up again. */
	if (h->hop.ifindex == ctx->ingress_ifindex) {
		rv->hop = h->hop;
		rv->route_gen = h->route_gen;
	} else
		rv->flags &= ~NAT_F_NEXT_HOP;
	ip_copy(&rv->client, &h->client);
	ip_copy(&rv->vip, &h->vip);
	struct nat_flow *fv = &sc->natf.e.flow;
	__builtin_memset(fv, 0, sizeof(*fv));
	fv->last_seen = now;
	fv->backend = id;
	fv->service = vm->service;
	fv->state = rv->state;
	fv->nat_port = nk->port;
	ip_copy(&fv->nat_addr, &nk->addr);

	int err = dlb_nat_establish(sc);
	if (err == -DLB_EEXIST) {
		/* Another CPU promoted this connection (a duplicate ACK), or
		 * the port was taken after an eviction. */
		__u32 pos, slot;
		struct nat_port_entry *pe = natp_find_call(nk, tab_hash_natkey(nk, pk->cfg->hash_seed),
							   pk->cfg->natp_buckets, &pos, &slot);
		struct nat_rev *r = pe ? &pe->rev : NULL;
		if (r && owns(&r->client, &r->vip, r->client_port, r->vip_port, fk))
			GO_NAT_FORWARD(&fv->nat_addr, fv->nat_port, b, id, 0, 1);
		halfopen_release(h, owner);
		event(EV_HALFOPEN_LOST);
		return verdict(ctx, STAT_DROP_NAT_NO_FLOW, XDP_DROP);
	}
	if (err == -DLB_EBUSY) {
		/* Another CPU kept a bucket locked: forward by the port the
		 * SYN reserved, which stays reserved; the connection's next
		 * packet promotes it. */
		event(EV_CONN_INSERT_FAILED);
		GO_NAT_FORWARD(&fv->nat_addr, fv->nat_port, b, id, 0, 0);
	}
	halfopen_release(h, owner);
	if (err)
		return nat_table_full(ctx);
	event(EV_HALFOPEN_PROMOTED);
	affinity_record(vm, fk, b, id, now, family);
	if (closing) {
		count_fin(id, vm->service);
		affinity_touch(vm, fk, id, now, family);
	}
	GO_NAT_FORWARD(&fv->nat_addr, fv->nat_port, b, id, 1, 0);
out:
	asm volatile("" : "+r"(fid), "+r"(fnew), "+r"(fhit));
	return nat_to_server(ctx, pk, family, fa, fport, fb, fid, vm->service, fnew, fhit);
#undef GO_NAT_FORWARD
}

/* nat_udp_new handles the first packet of a UDP flow to a NAT service:
 * it claims a port in nat_ports directly (UDP has no handshake). */
static __always_inline int nat_udp_new(struct xdp_md *ctx, struct pkt *pk, const struct vip_meta *vm, int family)
{
	const struct flow_key *fk = &pk->fk;
	struct nat_scratch *sc = nat_scratch();
	__u64 now = clock_now();
	__u32 id;

	if (!sc)
		return verdict(ctx, STAT_DROP_TABLE_FULL, XDP_DROP);
	struct backend *b = pick_new(vm, pk->cfg, fk, pk->thash, now, family, &id);
	if (!b)
		return verdict(ctx, STAT_DROP_NO_BACKEND, XDP_DROP);
	__u32 h, min, size;
	if (!nat_pool(b, fk, pk->cfg, &h, &min, &size))
		return verdict(ctx, STAT_DROP_NAT_EXHAUSTED, XDP_DROP);

	struct nat_key *nk = &sc->natp.e.key;
	__builtin_memset(nk, 0, sizeof(*nk));
	__builtin_memcpy(&sc->natf.e.key, fk, sizeof(*fk));
	ip_copy(&nk->addr, &b->nat_addr);
	nk->proto = fk->proto;
	nk->family = family;
	struct nat_rev *rv = &sc->natp.e.rev;
	__builtin_memset(rv, 0, sizeof(*rv));
	rv->last_seen = now;
	rv->client_port = fk->sport;
	rv->vip_port = fk->dport;
	rv->backend = id;
	rv->service = vm->service;
	rv->state = FLOW_ESTABLISHED;
	ip_copy(&rv->client, &fk->src);
	ip_copy(&rv->vip, &fk->dst);
	struct nat_flow *fv = &sc->natf.e.flow;
	__builtin_memset(fv, 0, sizeof(*fv));
	fv->last_seen = now;
	fv->backend = id;
	fv->service = vm->service;
	fv->state = FLOW_ESTABLISHED;
	ip_copy(&fv->nat_addr, &b->nat_addr);

	int err = -DLB_EEXIST;
	for (int i = 0; i <= DLB_NAT_CANDIDATES; i++) {
		/* After the first candidates, the first free one of the rest. */
		if (i < DLB_NAT_CANDIDATES)
			nk->port = bpf_htons(nat_candidate(h, i, min, size));
		else if (!dlb_nat_free_port(nk, h, min, size))
			break;
		fv->nat_port = nk->port;
		err = dlb_nat_establish(sc);
		if (err != -DLB_EEXIST && err != -DLB_EBUSY)
			break;
		/* The port is taken, or another CPU just created this flow (or
		 * kept a bucket locked while it did). */
		__u32 pos, slot;
		struct nat_flow_entry *ne = natf_find_call(fk, pk->thash, pk->cfg->natf_buckets, &pos, &slot);
		if (ne) {
			struct nat_flow *nf = &ne->flow;
			struct backend *ob = backend_ok(nf->backend, vm->service);
			if (!ob)
				return verdict(ctx, STAT_DROP_NO_BACKEND, XDP_DROP);
			return nat_to_server(ctx, pk, family, &nf->nat_addr, nf->nat_port, ob, nf->backend, vm->service,
					     0, 1);
		}
		if (err == -DLB_EBUSY)
			break;
		event(EV_NAT_PORT_COLLISION);
	}
	if (err == -DLB_EEXIST)
		return verdict(ctx, STAT_DROP_NAT_EXHAUSTED, XDP_DROP);
	if (err == -DLB_EBUSY) {
		/* Another CPU kept a bucket locked: the datagram is dropped
		 * (without a mapping its answer could not come back); the
		 * flow's next one tries again. */
		event(EV_CONN_INSERT_FAILED);
		return verdict(ctx, STAT_DROP_TABLE_FULL, XDP_DROP);
	}
	if (err)
		return nat_table_full(ctx);
	affinity_record(vm, fk, b, id, now, family);
	return nat_to_server(ctx, pk, family, &fv->nat_addr, fv->nat_port, b, id, vm->service, 1, 0);
}
