/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* This file contains the executor's small helpers shared by every path:
 * counting (reasons, events, per-service and per-backend counters), the
 * per-CPU clock cache, address helpers, and sending a frame towards a next
 * hop. Everything is inlined into the one XDP program. */
#pragma once

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "dlb_abi.h"
#include "dlb_maps.h"
#include "trace.h"

#define NSEC_PER_SEC 1000000000ULL
/* An established flow's last_seen is rewritten at most once per this step,
 * so that the fast path does not write to the table on every packet. */
#define FLOW_TOUCH_NS NSEC_PER_SEC

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

#ifndef IPPROTO_ICMPV6
#define IPPROTO_ICMPV6 58
#endif

/* A parsed packet as the executor's slow paths receive it: they are
 * BPF-to-BPF calls (each with its own stack frame, so that the fast path's
 * frame stays small), and a call takes at most five arguments. */
struct pkt {
	struct ethhdr *eth;
	void *l3;        /* IPv4 or IPv6 header */
	void *l4;        /* TCP or UDP header; the ICMP header for ICMP */
	void *end;       /* end of the IP packet */
	struct dlb_config *cfg;
	struct flow_key fk;
	__u32 mflags;    /* ICMP: marker flags of the destination (VIP_F_*) */
	__u8 tcp_flags;
	__u8 looked;     /* the fast path looked the flow up, surely (a miss if NULL; 0 after another key's tag) */
	__u8 pad[2];
	__u32 thash;     /* tab_hash_flow(fk, cfg->hash_seed): the connection table's hash */
};

/* launder returns v, which the verifier then knows only by the checks that
 * follow: a value passed through memory it does not track. Packets of
 * several header layouts (VLAN tags, IPv6 extension headers) then reach
 * the code after it in one verifier state instead of one per layout; the
 * program is verified several times faster. A per-CPU store and load. */
static __always_inline __u32 launder(__u32 v)
{
	__u32 key0 = 0;
	__u32 *p = bpf_map_lookup_elem(&launder_cell, &key0);

	if (!p)
		return ~0U;
	*p = v;
	return *(volatile __u32 *)p;
}

/* ntohs_len returns the 16-bit length field v in host order, bounded for
 * the verifier: Linux 6.1's does not know a byte swap's result is below
 * 65536 and refuses it in packet pointer arithmetic (see kept_mask). */
static __always_inline __u32 ntohs_len(__be16 v)
{
	return kept_mask(bpf_ntohs(v), 0xffff);
}

/* count_verdict counts the packet under reason and returns action. */
static __always_inline int count_verdict(struct xdp_md *ctx, __u32 reason, int action)
{
	struct reason_counters *rc = bpf_map_lookup_elem(&reason_stats, &reason);

	if (rc) {
		rc->packets++;
		rc->bytes += ctx->data_end - ctx->data;
	}
	return action;
}

/* verdict_inline is verdict without the call, in dlb_xdp's own body: the
 * packets not for a cluster (most of a host's traffic) pay only the one
 * load of dlb_trace_on for the trace while none runs, and a call there
 * would grow dlb_xdp's frame, the first of its deepest call chains (whose
 * frames nearly fill the 512 bytes of stack Linux 6.1 allows). */
static __always_inline int verdict_inline(struct xdp_md *ctx, __u32 reason, int action)
{
	if (dlb_trace_on)
		return dlb_trace_packet(ctx, reason | action << 8);
	return count_verdict(ctx, reason, action);
}

/* dlb_verdict counts a packet (vf: reason | action << 8), or hands it to
 * the trace while one runs, and returns its action: verdict_inline as a
 * global function. The executor has some 250 places where a packet leaves
 * it through verdict, and each inlined map lookup is one more rewrite of
 * the whole program when the kernel loads it (their count times the
 * program's size was most of the executor's load time). */
__noinline int dlb_verdict(struct xdp_md *ctx, __u32 vf)
{
	if (!ctx)
		return XDP_ABORTED;
	return verdict_inline(ctx, vf & 0xff, (vf >> 8) & 0xff);
}

/* verdict counts the packet under reason and returns action: every packet
 * leaves the executor through it (or verdict_inline) or through forward's
 * (or to_client's) transmit, once. While a trace runs, all hand the packet
 * to the trace instead (trace.h), which counts it too. A call of
 * dlb_verdict. */
static __always_inline int verdict(struct xdp_md *ctx, __u32 reason, int action)
{
	return dlb_verdict(ctx, reason | action << 8);
}

/* dlb_event counts one enum dlb_event. A global function, as dlb_verdict
 * (events are counted at some 40 places, none on an established flow's
 * path). It returns 0: Linux 6.1 takes no global function without a
 * return value. */
__noinline int dlb_event(__u32 ev)
{
	__u64 *c = bpf_map_lookup_elem(&events, &ev);

	if (c)
		(*c)++;
	return 0;
}

/* event counts one enum dlb_event. */
static __always_inline void event(__u32 ev)
{
	dlb_event(ev);
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

/* backend_counters returns this CPU's counters of backend id (NULL for an
 * id out of range): its entry in the CPU's row of backend_stats. */
static __always_inline struct counters *backend_counters(__u32 id)
{
	__u32 key;

	if (id >= stats_stride)
		return NULL;
	key = bpf_get_smp_processor_id() * stats_stride + id;
	return bpf_map_lookup_elem(&backend_stats, &key);
}

/* count_backend counts a packet of bytes (and new_conns new connections)
 * on backend id. */
static __always_inline void count_backend(__u32 id, __u64 bytes, __u32 new_conns)
{
	struct counters *c = backend_counters(id);

	if (c) {
		c->packets++;
		c->bytes += bytes;
		c->new_conns += new_conns;
	}
}

/* count_fin counts a finished connection on its backend and service. */
static __always_inline void count_fin(__u32 backend_id, __u32 service_id)
{
	struct counters *c = backend_counters(backend_id);

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

/* idle_ns returns how long ago last was, 0 if it is ahead of now (as
 * when userspace wrote it). */
static __always_inline __u64 idle_ns(__u64 now, __u64 last)
{
	return now > last ? now - last : 0;
}

/* ip_eq compares two key-form addresses of the same family. */
static __always_inline int ip_eq(const struct dlb_ip *a, const struct dlb_ip *b)
{
	const __u32 *x = (const __u32 *)a->addr, *y = (const __u32 *)b->addr;

	return ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3])) == 0;
}

/* flow_key_eq compares two flow keys, as 32-bit words (keys on the stack
 * may be only 4-byte aligned; __builtin_memcmp compiles to a byte at a
 * time, about 230 instructions for a key). */
static __always_inline int flow_key_eq(const struct flow_key *a, const struct flow_key *b)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;
	__u32 d = 0;

#pragma unroll
	for (int i = 0; i < (int)(sizeof(*a) / 4); i++) {
		d |= x[i] ^ y[i];
		/* Keeps clang from turning this into a branch per word: every
		 * branch is a path the verifier walks. */
		asm volatile("" : "+r"(d));
	}
	return d == 0;
}

/* set_macs writes a frame's destination and source MAC addresses from
 * macs, the two addresses back to back (a backend's or a next hop's mac
 * and src_mac, 4-byte aligned): three 32-bit moves instead of the twelve
 * single-byte loads and stores __builtin_memcpy compiles to. The packet
 * store may be unaligned: the verifier allows that wherever the kernel
 * does not ask for strict alignment (every 64-bit architecture XDP runs
 * on in practice). */
static __always_inline void set_macs(struct ethhdr *eth, const __u8 *macs)
{
	__u32 *d = (__u32 *)eth;
	const __u32 *s = (const __u32 *)macs;

	d[0] = s[0];
	d[1] = s[1];
	d[2] = s[2];
}

_Static_assert(__builtin_offsetof(struct backend, src_mac) == __builtin_offsetof(struct backend, mac) + 6 &&
		       __builtin_offsetof(struct backend, mac) % 4 == 0,
	       "set_macs reads a backend's mac and src_mac as one aligned run");
_Static_assert(__builtin_offsetof(struct next_hop, src_mac) == __builtin_offsetof(struct next_hop, mac) + 6 &&
		       __builtin_offsetof(struct next_hop, mac) % 4 == 0,
	       "set_macs reads a next hop's mac and src_mac as one aligned run");

static __always_inline void ip_copy(struct dlb_ip *dst, const struct dlb_ip *src)
{
	__u32 *d = (__u32 *)dst->addr;
	const __u32 *s = (const __u32 *)src->addr;

	d[0] = s[0];
	d[1] = s[1];
	d[2] = s[2];
	d[3] = s[3];
}

/* server_port returns the port a backend is reached on: its mapport, or
 * the cluster port. */
static __always_inline __be16 server_port(const struct backend *b, __be16 vip_port)
{
	return b->port ? b->port : vip_port;
}

/* transmit sends the frame out of ifindex: back out of the receiving
 * interface, or redirected through tx_ports. A missing tx_ports entry
 * drops (STAT_DROP_NO_TX_PORT), unless any_port allows a plain
 * bpf_redirect (next hops from the routing table). Its callers looked at
 * dlb_trace_on already: trace.h's dlb_trace_tx does the same while a
 * trace runs. */
static __always_inline int transmit(struct xdp_md *ctx, __u32 ifindex, int any_port)
{
	__u32 reason = STAT_FWD_TX;
	int action = XDP_TX;

	if (ifindex != ctx->ingress_ifindex) {
		action = bpf_redirect_map(&tx_ports, ifindex, XDP_DROP);
		if (action != XDP_REDIRECT && any_port)
			action = bpf_redirect(ifindex, 0);
		reason = STAT_FWD_REDIRECT;
		if (action != XDP_REDIRECT) {
			reason = STAT_DROP_NO_TX_PORT;
			action = XDP_DROP;
		}
	}
	/* One count for the three ways out (an inlined map lookup more is a
	 * rewrite of the whole program at load time, at each of transmit's
	 * callers): the empty asm keeps clang from copying it into each. */
	asm volatile("" : "+r"(reason), "+r"(action));
	return count_verdict(ctx, reason, action);
}

/* forward rewrites the MAC addresses towards b (the server, or the router
 * in front of it), counts the packet and sends the frame. hit: the packet
 * followed a connection-table entry (for the trace). */
static __always_inline int forward(struct xdp_md *ctx, const struct pkt *pk, const struct backend *b,
				   __u32 backend_id, __u32 service_id, __u32 new_conns, int hit)
{
	struct ethhdr *eth = pk->eth;
	__u64 bytes = ctx->data_end - ctx->data;

	set_macs(eth, b->mac);
	count(&service_stats, service_id, bytes, new_conns, 0);
	count_backend(backend_id, bytes, new_conns);
	if (dlb_trace_on)
		return dlb_trace_tx(ctx, hit ? TRACE_F_HIT << 16 : 0, b, 0);
	return transmit(ctx, b->ifindex, 0);
}

/* backend_ok returns backend id if it is configured for service. */
static __always_inline struct backend *backend_ok(__u32 id, __u32 service)
{
	struct backend *b = bpf_map_lookup_elem(&backends, &id);

	if (!b || !(b->flags & BACKEND_F_PRESENT) || b->service != service)
		return NULL;
	return b;
}
