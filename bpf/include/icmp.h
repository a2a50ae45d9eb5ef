/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* This file contains the handling of ICMP and ICMPv6 errors about balanced
 * flows.
 *
 * An error (ICMP destination unreachable, fragmentation needed included,
 * and time exceeded; ICMPv6 destination unreachable, packet too big and
 * time exceeded) quotes the packet that caused it. The executor matches
 * the quoted TCP or UDP header against its tables:
 *
 * - to a cluster address, quoting VIP:vp -> C:cp (a reply the client side
 *   could not take, e.g. a router's "fragmentation needed"): with MAC
 *   forwarding the frame goes unchanged to the server that owns the flow
 *   (conns), which holds the VIP and adjusts its path MTU; with NAT
 *   (nat_flows) it is translated as the server would have received it:
 *   outer R -> S, quoted S:sp -> R:np, every checksum updated;
 * - to a return address, quoting R:np -> S:sp (an error from the server's
 *   side): translated back for the client (outer VIP -> C, quoted C:cp ->
 *   VIP:vp) and sent like a NAT reply.
 *
 * Errors about no known flow, errors whose quote has no ports (other
 * protocols, later fragments, IPv4 options in the quote) and all other
 * ICMP messages (echo, IPv6 neighbour discovery, ...) pass to the host
 * (STAT_PASS_ICMP_NO_FLOW, STAT_PASS_VIP_OTHER, STAT_PASS_RETURN_OTHER):
 * the dispatcher owns those addresses and answers or ignores them itself. */
#pragma once

#include <linux/ip.h>
#include <linux/ipv6.h>

#include "common.h"
#include "csum.h"
#include "nat.h"
#include "table.h"

/* icmp_is_error reports whether an ICMP (v4) or ICMPv6 type quotes a
 * packet the executor may own. */
static __always_inline int icmp_is_error(int family, __u8 type)
{
	if (family == DLB_FAMILY_IPV4)
		return type == 3 /* destination unreachable */ || type == 11 /* time exceeded */;
	return type == 1 /* destination unreachable */ || type == 2 /* packet too big */ || type == 3 /* time exceeded */;
}

/* icmp_translate rewrites an ICMP error: the outer addresses to osrc ->
 * odst, the quoted packet's to isrc:isport -> idst:idport, and the
 * checksums that cover them: outer IPv4 header, quoted IPv4 header, quoted
 * TCP/UDP checksum (when the quote holds it), ICMP checksum (whose IPv6
 * pseudo-header covers the outer addresses). */
static __always_inline int icmp_translate(int family, void *l3, __u8 *icmp, void *in3, void *in4, __u8 iproto,
					  void *msg_end, void *data_end, const struct dlb_ip *osrc,
					  const struct dlb_ip *odst, const struct dlb_ip *isrc, const struct dlb_ip *idst,
					  __be16 isport, __be16 idport)
{
	__u64 din = 0, dicmp = 0;

	if ((void *)(icmp + 8) > data_end || in4 + 8 > data_end)
		return -1;
	if (family == DLB_FAMILY_IPV4) {
		struct iphdr *o = l3, *i = in3;
		if ((void *)(o + 1) > data_end || (void *)(i + 1) > data_end)
			return -1;
		__u32 os = *(const __u32 *)osrc->addr, od = *(const __u32 *)odst->addr;
		__u32 is = *(const __u32 *)isrc->addr, id = *(const __u32 *)idst->addr;
		o->check = csum_update(o->check, csum_diff32(o->saddr, os) + csum_diff32(o->daddr, od));
		o->saddr = os;
		o->daddr = od;
		din = csum_diff32(i->saddr, is) + csum_diff32(i->daddr, id);
		__u16 oc = i->check, nc = csum_update(oc, din);
		i->saddr = is;
		i->daddr = id;
		i->check = nc;
		dicmp = din + csum_diff16(oc, nc);
	} else {
		struct ipv6hdr *o = l3, *i = in3;
		if ((void *)(o + 1) > data_end || (void *)(i + 1) > data_end)
			return -1;
		__u64 dout = ip6_replace(o->saddr.in6_u.u6_addr32, osrc) + ip6_replace(o->daddr.in6_u.u6_addr32, odst);
		din = ip6_replace(i->saddr.in6_u.u6_addr32, isrc) + ip6_replace(i->daddr.in6_u.u6_addr32, idst);
		dicmp = din + dout;
	}
	__be16 *pp = in4;
	__u64 dports = csum_diff16(pp[0], isport) + csum_diff16(pp[1], idport);
	pp[0] = isport;
	pp[1] = idport;
	dicmp += dports;

	/* The quoted L4 checksum, if the quote holds it. */
	__u16 *lc = in4 + (iproto == IPPROTO_TCP ? 16 : 6);
	if ((void *)(lc + 1) <= data_end && (void *)(lc + 1) <= msg_end) {
		__u16 old = *lc;
		__u16 nw = iproto == IPPROTO_TCP ? csum_update(old, din + dports) : csum_update_udp(old, din + dports);
		*lc = nw;
		dicmp += csum_diff16(old, nw);
	}
	__u16 *ic = (__u16 *)(icmp + 2);
	*ic = csum_update(*ic, dicmp);
	return 0;
}

/* A quoted packet, as parsed. */
struct quote {
	void *in3; /* the quoted IP header (no options, no extension headers), then its TCP/UDP header */
	struct dlb_ip src, dst;
	__be16 sport, dport;
	__u8 proto;
};

/* quote_l4 is the quoted TCP/UDP header: it follows a header of fixed
 * length (handle_icmp refuses other quotes). Not kept in the quote: the
 * frame that holds it is one of four nested ones, and Linux 6.1 counts
 * each in 32-byte steps against the 512-byte stack. */
static __always_inline void *quote_l4(const struct quote *q, int family)
{
	return q->in3 + (family == DLB_FAMILY_IPV4 ? sizeof(struct iphdr) : sizeof(struct ipv6hdr));
}

/* icmp_from_client handles an error to a cluster address, quoting the
 * reply VIP:vp -> C:cp. */
static __always_inline int icmp_from_client(struct xdp_md *ctx, struct pkt *pk, const struct quote *q, int family)
{
	void *data_end = (void *)(long)ctx->data_end;
	/* The flow's key lives in the scratch space: this call's stack frame
	 * is one of four nested ones (with the connection lookup's). */
	__u32 key0 = 0;
	struct nat_scratch *sc = bpf_map_lookup_elem(&scratch, &key0);
	if (!sc)
		return verdict(ctx, STAT_PASS_ICMP_NO_FLOW, XDP_PASS);
	struct flow_key *fkp = &sc->conn.e.key;
	__builtin_memset(fkp, 0, sizeof(*fkp));
	fkp->sport = q->dport;
	fkp->dport = q->sport;
	fkp->proto = q->proto;
	fkp->family = family;
	ip_copy(&fkp->src, &q->dst);
	ip_copy(&fkp->dst, &q->src);
	struct vip_key vk = { .port = q->sport, .proto = q->proto, .family = family };
	ip_copy(&vk.addr, &q->src);
	struct vip_meta *vm = bpf_map_lookup_elem(&vips, &vk);
	if (!vm || (vm->flags & (VIP_F_MARKER | VIP_F_RETURN)))
		return verdict(ctx, STAT_PASS_ICMP_NO_FLOW, XDP_PASS);

	if (vm->method != DLB_METHOD_NAT) {
		__u32 pos, slot;
		struct conn_entry *ce =
			conn_find_call(fkp, tab_hash_flow(fkp, pk->cfg->hash_seed), pk->cfg->conn_buckets, &pos, &slot);
		if (!ce)
			return verdict(ctx, STAT_PASS_ICMP_NO_FLOW, XDP_PASS);
		struct flow *f = &ce->flow;
		__u32 id = f->backend;
		struct backend *b = backend_ok(id, vm->service);
		if (!b || f->service != vm->service)
			return verdict(ctx, STAT_PASS_ICMP_NO_FLOW, XDP_PASS);
		event(EV_ICMP_TO_BACKEND);
		return forward(ctx, pk, b, id, vm->service, 0, 1);
	}

	__u32 pos, slot;
	struct nat_flow_entry *ne =
		natf_find_call(fkp, tab_hash_flow(fkp, pk->cfg->hash_seed), pk->cfg->natf_buckets, &pos, &slot);
	if (!ne)
		return verdict(ctx, STAT_PASS_ICMP_NO_FLOW, XDP_PASS);
	struct nat_flow *nf = &ne->flow;
	__u32 id = nf->backend;
	struct backend *b = backend_ok(id, vm->service);
	if (!b || nf->service != vm->service)
		return verdict(ctx, STAT_PASS_ICMP_NO_FLOW, XDP_PASS);
	/* As the server would have received it: outer R -> S, quoted
	 * S:sp -> R:np. */
	if (icmp_translate(family, pk->l3, pk->l4, q->in3, quote_l4(q, family), q->proto, pk->end, data_end, &nf->nat_addr, &b->addr,
			   &b->addr, &nf->nat_addr, server_port(b, q->sport), nf->nat_port))
		return verdict(ctx, STAT_PASS_MALFORMED, XDP_PASS);
	event(EV_ICMP_TO_BACKEND);
	return forward(ctx, pk, b, id, vm->service, 0, 1);
}

/* icmp_from_server handles an error to a return address, quoting the
 * translated packet R:np -> S:sp. */
static __always_inline int icmp_from_server(struct xdp_md *ctx, struct pkt *pk, const struct quote *q, int family)
{
	void *data_end = (void *)(long)ctx->data_end;
	struct nat_key nk = { .port = q->sport, .proto = q->proto, .family = family };
	struct dlb_ip *client, *vip;
	__be16 client_port, vip_port;
	__u32 id, service;
	__u8 *flags;
	__u16 *gen;
	struct next_hop *cached;

	ip_copy(&nk.addr, &q->src);
	__u32 pos, slot;
	struct nat_port_entry *pe =
		natp_find_call(&nk, tab_hash_natkey(&nk, pk->cfg->hash_seed), pk->cfg->natp_buckets, &pos, &slot);
	if (pe) {
		struct nat_rev *r = &pe->rev;
		client = &r->client;
		vip = &r->vip;
		client_port = r->client_port;
		vip_port = r->vip_port;
		id = r->backend;
		service = r->service;
		flags = &r->flags;
		gen = &r->route_gen;
		cached = &r->hop;
	} else {
		__u64 owner;
		struct halfopen *h = halfopen_get(&nk, pk->cfg, clock_now(), &owner);
		if (!h)
			return verdict(ctx, STAT_PASS_ICMP_NO_FLOW, XDP_PASS);
		client = &h->client;
		vip = &h->vip;
		client_port = h->client_port;
		vip_port = h->vip_port;
		id = h->backend;
		service = h->service;
		flags = &h->flags;
		gen = &h->route_gen;
		cached = &h->hop;
	}
	struct backend *b = backend_ok(id, service);
	if (!b || !ip_eq(&b->addr, &q->dst) || server_port(b, vip_port) != q->dport)
		return verdict(ctx, STAT_PASS_ICMP_NO_FLOW, XDP_PASS);
	struct next_hop hop = {};
	int rc = client_hop(ctx, pk->cfg, family, q->proto, vip, client, vip_port, client_port,
			    l3_len(family, pk->l3, data_end), flags, gen, cached, &hop);
	if (rc == HOP_NO_ROUTE)
		return verdict(ctx, STAT_DROP_NO_ROUTE, XDP_DROP);
	/* As the client would have received it: outer VIP -> C, quoted
	 * C:cp -> VIP:vp. */
	if (icmp_translate(family, pk->l3, pk->l4, q->in3, quote_l4(q, family), q->proto, pk->end, data_end, vip, client, client, vip,
			   client_port, vip_port))
		return verdict(ctx, STAT_PASS_MALFORMED, XDP_PASS);
	__u64 bytes = ctx->data_end - ctx->data;
	count(&service_stats, service, bytes, 0, 0);
	count_backend(id, bytes, 0);
	event(EV_ICMP_TO_CLIENT);
	return to_client(ctx, pk->eth, rc, &hop, b);
}

/* The translations are calls of their own, once per family: the stack
 * frame of a handle_icmp with them inlined would not fit beside the fast
 * path's. */
static __noinline int icmp_from_client4(struct xdp_md *ctx, struct pkt *pk, const struct quote *q)
{
	return icmp_from_client(ctx, pk, q, DLB_FAMILY_IPV4);
}

static __noinline int icmp_from_client6(struct xdp_md *ctx, struct pkt *pk, const struct quote *q)
{
	return icmp_from_client(ctx, pk, q, DLB_FAMILY_IPV6);
}

static __noinline int icmp_from_server4(struct xdp_md *ctx, struct pkt *pk, const struct quote *q)
{
	return icmp_from_server(ctx, pk, q, DLB_FAMILY_IPV4);
}

static __noinline int icmp_from_server6(struct xdp_md *ctx, struct pkt *pk, const struct quote *q)
{
	return icmp_from_server(ctx, pk, q, DLB_FAMILY_IPV6);
}

/* handle_icmp handles an ICMP (family IPv4) or ICMPv6 packet to a cluster
 * or return address (mflags: that address's marker flags). icmp is the
 * ICMP header, msg_end the end of the IP packet. */
static __always_inline int handle_icmp(struct xdp_md *ctx, struct pkt *pk, int family)
{
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *icmp = pk->l4;
	void *l3 = pk->l3;
	__u32 mflags = pk->mflags;
	__u32 other = mflags & VIP_F_RETURN ? STAT_PASS_RETURN_OTHER : STAT_PASS_VIP_OTHER;

	if ((void *)(icmp + 8) > data_end)
		return verdict(ctx, STAT_PASS_MALFORMED, XDP_PASS);
	if (!icmp_is_error(family, icmp[0]))
		return verdict(ctx, other, XDP_PASS);

	struct quote q = {};
	void *in3 = icmp + 8, *in4;
	if (family == DLB_FAMILY_IPV4) {
		struct iphdr *ip = in3;
		/* A quote with IP options or of a later fragment has no ports. */
		if ((void *)(ip + 1) > data_end || ip->version != 4 || ip->ihl != 5 || (ip->frag_off & bpf_htons(0x1fff)))
			return verdict(ctx, STAT_PASS_ICMP_NO_FLOW, XDP_PASS);
		q.proto = ip->protocol;
		*(__u32 *)q.src.addr = ip->saddr;
		*(__u32 *)q.dst.addr = ip->daddr;
		in4 = ip + 1;
	} else {
		struct ipv6hdr *ip = in3;
		if ((void *)(ip + 1) > data_end || ip->version != 6)
			return verdict(ctx, STAT_PASS_ICMP_NO_FLOW, XDP_PASS);
		q.proto = ip->nexthdr;
		__builtin_memcpy(q.src.addr, &ip->saddr, 16);
		__builtin_memcpy(q.dst.addr, &ip->daddr, 16);
		in4 = ip + 1;
	}
	if ((q.proto != IPPROTO_TCP && q.proto != IPPROTO_UDP) || in4 + 8 > data_end)
		return verdict(ctx, STAT_PASS_ICMP_NO_FLOW, XDP_PASS);
	/* The quoted packet must have come from the address the error is
	 * sent to. */
	/* Compared in place, not copied: this frame is one of four nested
	 * ones (with icmp_from_server's and the NAT port lookup's), and Linux
	 * 6.1 counts each in 32-byte steps against the 512-byte stack. */
	if (family == DLB_FAMILY_IPV4) {
		struct iphdr *o = l3;
		if ((void *)(o + 1) > data_end)
			return verdict(ctx, STAT_PASS_MALFORMED, XDP_PASS);
		if (o->daddr != *(__u32 *)q.src.addr)
			return verdict(ctx, STAT_PASS_ICMP_NO_FLOW, XDP_PASS);
	} else {
		struct ipv6hdr *o = l3;
		if ((void *)(o + 1) > data_end)
			return verdict(ctx, STAT_PASS_MALFORMED, XDP_PASS);
		const __u32 *d = o->daddr.in6_u.u6_addr32, *a = (const __u32 *)q.src.addr;
		if ((d[0] ^ a[0]) | (d[1] ^ a[1]) | (d[2] ^ a[2]) | (d[3] ^ a[3]))
			return verdict(ctx, STAT_PASS_ICMP_NO_FLOW, XDP_PASS);
	}
	__be16 *ports = in4;
	q.sport = ports[0];
	q.dport = ports[1];

	q.in3 = in3;
	if (mflags & VIP_F_RETURN)
		return family == DLB_FAMILY_IPV4 ? icmp_from_server4(ctx, pk, &q) : icmp_from_server6(ctx, pk, &q);
	return family == DLB_FAMILY_IPV4 ? icmp_from_client4(ctx, pk, &q) : icmp_from_client6(ctx, pk, &q);
}
