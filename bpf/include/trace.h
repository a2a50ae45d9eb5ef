/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* This file contains the packet trace (dlbctl executor trace): while a
 * trace runs, every packet's exit (common.h: verdict, or forward's transmit) hands the
 * packet to dlb_trace_packet, which applies the trace's filter and puts a
 * record of the packet (its verdict, reason, chosen server, whether a
 * connection table entry was followed, and its first DLB_TRACE_SNAPLEN
 * bytes) into the trace_ring ring buffer that pkg/datapath reads.
 *
 * Cost: with no trace running, one load of dlb_trace_on (a global
 * variable: no map lookup) and a branch not taken, per packet. While a
 * trace runs, a packet the filter refuses costs the copy of its first
 * bytes and the filter; a matching one the ring buffer write. A full ring
 * buffer loses the record, never the packet, and counts it
 * (TRACE_STAT_LOST). */
#pragma once

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "dlb_abi.h"
#include "dlb_maps.h"

/* Bytes of each frame a trace record carries: enough for every header the
 * executor reads (two VLAN tags, IPv6 and its extension headers aside). */
#define DLB_TRACE_SNAPLEN 128

/* Constants shared with Go. */
enum trace_consts {
	/* TRACE_NO_SERVICE: the packet went to no server. */
	TRACE_NO_SERVICE = 0xffffffff,
	TRACE_SNAPLEN = DLB_TRACE_SNAPLEN,
	/* TRACE_TX_REPLY: dlb_trace_tx's vf bit for a NAT reply (transmit's
	 * any_port). */
	TRACE_TX_REPLY = 1 << 15,
};

/* Flags of a trace_event. */
enum trace_flags {
	/* TRACE_F_HIT: the packet followed an entry of a connection table
	 * (conns, nat_flows, or nat_ports for a NAT reply). */
	TRACE_F_HIT = 1 << 0,
};

/* Counters of trace_stats (per CPU). */
enum trace_stat {
	TRACE_STAT_SENT = 0, /* records put in the ring buffer */
	TRACE_STAT_LOST = 1, /* matching packets whose record found the ring buffer full */
	TRACE_STAT_MAX = 2,
};

/* One traced packet, as the ring buffer carries it. */
struct trace_event {
	__u64 ts;             /* bpf_ktime_get_ns() */
	struct flow_key flow; /* the flow as received; family 0: not IPv4/IPv6; ports 0: not TCP/UDP */
	struct dlb_ip server; /* the server the packet went to (or, a NAT reply, came from) */
	__u32 reason;         /* enum stat_reason */
	__u32 action;         /* XDP_PASS, XDP_DROP, XDP_TX, XDP_REDIRECT */
	__u32 service;        /* the server's service id, or TRACE_NO_SERVICE */
	__u32 ifindex;        /* the receiving interface */
	__u32 pkt_len;        /* length of the frame as it left the executor */
	__u16 cap_len;        /* bytes of data used */
	__u8 flags;           /* TRACE_F_* */
	__u8 tcp_flags;
	__u8 server_family;   /* DLB_FAMILY_NONE: no server */
	__u8 pad[7];
	__u8 data[DLB_TRACE_SNAPLEN]; /* the frame as it left: forwarded frames after their rewrite */
};

/* What a trace selects. Every set field must match. */
struct trace_filter {
	/* The cluster: a packet sent to a server matches when the server's
	 * service is in trace_services; another when its destination
	 * address (and port, if set) is vip. */
	struct dlb_ip vip;
	struct dlb_ip server; /* the chosen server's address, or the source of a packet sent to no server */
	__be16 port;          /* the destination port; 0: any */
	__u8 vip_family;      /* DLB_FAMILY_*; NONE: any cluster */
	__u8 server_family;   /* DLB_FAMILY_*; NONE: any server */
	__u32 reasons;        /* bit (1 << reason) per enum stat_reason; 0: any */
	__u32 pad;
};

/* dlb_trace_on: non-zero while a trace runs. pkg/datapath writes the
 * filter first, then this. A global variable: reading it costs one load. */
volatile __u32 dlb_trace_on;
/* dlb_trace_filter: the running trace's filter. */
volatile struct trace_filter dlb_trace_filter;

/* trace_ring: the records of a running trace. Not pinned: it belongs to
 * the program that one dlbd loaded. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} trace_ring SEC(".maps");

/* trace_services: the services of the running trace's cluster (its
 * ports), by service id; the value is unused. Sized by the loader like
 * the other per-service maps. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, MAX_SERVICES);
} trace_services SEC(".maps");

/* trace_scratch: per CPU, the record being built (too large for the
 * stack), and the trace's counters, per enum trace_stat. */
struct trace_scratch {
	struct trace_event ev;
	__u64 stats[TRACE_STAT_MAX];
};

/* dlb_trace_key is 0: the key of trace_scratch, in memory that is not the
 * stack (dlb_trace_packet uses no stack: see there). */
__u32 dlb_trace_key;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct trace_scratch);
	__uint(max_entries, 1);
} trace_scratch SEC(".maps");

/* trace_parse reads the flow of the frame copied into e->data (as far as
 * the first DLB_TRACE_SNAPLEN bytes hold it): up to two VLAN tags, IPv4
 * (options skipped) or IPv6 (no extension headers), TCP or UDP ports. */
static __always_inline void trace_parse(struct trace_event *e)
{
	__u32 cap = e->cap_len;
	__u32 off = sizeof(struct ethhdr);
	__u16 proto;

	if (cap < off)
		return;
	proto = *(__u16 *)&e->data[12];
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		if (off + 4 > cap)
			return;
		proto = *(__u16 *)&e->data[off + 2];
		off += 4;
	}
	__u8 l4proto;
	if (proto == bpf_htons(ETH_P_IP)) {
		if (off + 20 > cap)
			return;
		__u8 *ip = &e->data[off];
		e->flow.family = DLB_FAMILY_IPV4;
		__builtin_memcpy(e->flow.src.addr, ip + 12, 4);
		__builtin_memcpy(e->flow.dst.addr, ip + 16, 4);
		l4proto = ip[9];
		e->flow.proto = l4proto;
		if (ip[6] & 0x3f || ip[7]) /* a fragment: no ports */
			return;
		off += (ip[0] & 0xf) * 4;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		if (off + 40 > cap)
			return;
		__u8 *ip = &e->data[off];
		e->flow.family = DLB_FAMILY_IPV6;
		__builtin_memcpy(e->flow.src.addr, ip + 8, 16);
		__builtin_memcpy(e->flow.dst.addr, ip + 24, 16);
		l4proto = ip[6];
		e->flow.proto = l4proto;
		off += 40;
	} else {
		return;
	}
	if (l4proto != IPPROTO_TCP && l4proto != IPPROTO_UDP)
		return;
	if (off > DLB_TRACE_SNAPLEN - 14 || off + 4 > cap)
		return;
	__builtin_memcpy(&e->flow.sport, &e->data[off], 2);
	__builtin_memcpy(&e->flow.dport, &e->data[off + 2], 2);
	if (l4proto == IPPROTO_TCP && off + 14 <= cap)
		e->tcp_flags = e->data[off + 13];
}

/* trace_addr_eq compares a flow address with a filter's. */
static __always_inline int trace_addr_eq(const struct dlb_ip *a, const volatile struct dlb_ip *b)
{
	const __u32 *x = (const __u32 *)a->addr;
	const volatile __u32 *y = (const volatile __u32 *)b->addr;

	return ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3])) == 0;
}

/* trace_begin fills the verdict's part of this CPU's scratch record s
 * (vf: reason | action << 8 | flags << 16 (TRACE_F_*))
 * and counts the packet under its reason, as verdict does when no trace
 * runs. */
static __always_inline void trace_begin(struct xdp_md *ctx, struct trace_scratch *s, __u32 vf,
					const struct backend *b)
{
	struct trace_event *e = &s->ev;

	e->reason = vf & 0xff;
	e->action = (vf >> 8) & 0xff;
	e->flags = (vf >> 16) & TRACE_F_HIT;
	if (b) {
		__builtin_memcpy(&e->server, &b->addr, sizeof(e->server));
		e->server_family = b->family;
		e->service = b->service;
	} else {
		__builtin_memset(&e->server, 0, sizeof(e->server));
		e->server_family = DLB_FAMILY_NONE;
		e->service = TRACE_NO_SERVICE;
	}
	struct reason_counters *rc = bpf_map_lookup_elem(&reason_stats, &e->reason);
	if (rc) {
		rc->packets++;
		rc->bytes += ctx->data_end - ctx->data;
	}
}

/* trace_record completes this CPU's scratch record s (its flow parsed
 * from the frame), applies the filter and writes the
 * record to trace_ring. Returns the packet's action. */
static __always_inline int trace_record(struct xdp_md *ctx, struct trace_scratch *s)
{
	struct trace_event *e = &s->ev;

	e->ifindex = ctx->ingress_ifindex;
	__u32 want = dlb_trace_filter.reasons;
	if (want && !(want & (1U << (e->reason & 31))))
		return e->action;

	/* A packet sent to a server is filtered by its server first: most
	 * traffic of a busy dispatcher is, and then its bytes are not
	 * copied unless it matches. */
	__u8 fam = dlb_trace_filter.vip_family;
	__u8 sfam = dlb_trace_filter.server_family;
	if (e->server_family) {
		/* The frame may be translated already (NAT): its server's
		 * service tells its cluster. */
		if (fam && !bpf_map_lookup_elem(&trace_services, &e->service))
			return e->action;
		if (sfam && (e->server_family != sfam || !trace_addr_eq(&e->server, &dlb_trace_filter.server)))
			return e->action;
	}

	__u32 len = ctx->data_end - ctx->data;
	__u32 cap = len < DLB_TRACE_SNAPLEN ? len : DLB_TRACE_SNAPLEN;
	e->pkt_len = len;
	e->cap_len = 0;
	/* The helper needs 1 <= cap <= DLB_TRACE_SNAPLEN proven on the
	 * register it gets: bound cap - 1 behind a barrier, so that clang
	 * checks the very register it passes. */
	__u32 less = cap - 1;
	asm volatile("" : "+r"(less));
	if (less < DLB_TRACE_SNAPLEN && bpf_xdp_load_bytes(ctx, 0, e->data, less + 1) == 0)
		e->cap_len = less + 1;
	__builtin_memset(&e->flow, 0, sizeof(e->flow));
	e->tcp_flags = 0;
	trace_parse(e);

	if (!e->server_family) {
		if (fam) {
			if (e->flow.family != fam || !trace_addr_eq(&e->flow.dst, &dlb_trace_filter.vip))
				return e->action;
			__be16 port = dlb_trace_filter.port;
			if (port && e->flow.dport != port)
				return e->action;
		}
		if (sfam && (e->flow.family != sfam || !trace_addr_eq(&e->flow.src, &dlb_trace_filter.server)))
			return e->action;
	}

	e->ts = bpf_ktime_get_ns();
	if (bpf_ringbuf_output(&trace_ring, e, sizeof(*e), 0))
		s->stats[TRACE_STAT_LOST]++;
	else
		s->stats[TRACE_STAT_SENT]++;
	return e->action;
}

/* dlb_trace_packet is verdict while a trace runs: it counts the packet
 * (vf: reason | action << 8), traces it with its flow parsed from the
 * frame and returns its action. Global functions, these: the verifier
 * checks each once, not once per call. They use no stack for keys (map
 * keys are map memory): they are called from deep chains of calls, whose
 * frames nearly fill the 512-byte BPF stack; and they are called last, so
 * that their callers keep nothing across the call. */
__noinline int dlb_trace_packet(struct xdp_md *ctx, __u32 vf)
{
	struct trace_scratch *s = bpf_map_lookup_elem(&trace_scratch, &dlb_trace_key);

	if (!ctx || !s)
		return (vf >> 8) & 0xff;
	trace_begin(ctx, s, vf, NULL);
	return trace_record(ctx, s);
}

/* dlb_trace_tx is transmit while a trace runs, for forward and
 * to_client (who counted the frame on its server b): it sends the frame
 * out of ifindex (0: b's) as transmit does (any_port for a NAT reply,
 * TRACE_TX_REPLY), counts its reason, traces it with b, and returns its
 * action. vf: TRACE_F_HIT << 16, TRACE_TX_REPLY. It takes no more than
 * this: a pointer to the parsed flow (on the caller's stack) made clang
 * keep the fast path's packet state in memory, and the fast path's frame
 * grew past what the deepest chain of calls leaves of the BPF stack. */
__noinline int dlb_trace_tx(struct xdp_md *ctx, __u32 vf, const struct backend *b, __u32 ifindex)
{
	__u32 reason = STAT_FWD_TX, action = XDP_TX;

	if (!ctx || !b)
		return XDP_DROP;
	if (!ifindex)
		ifindex = b->ifindex;
	if (ifindex != ctx->ingress_ifindex) {
		action = bpf_redirect_map(&tx_ports, ifindex, XDP_DROP);
		if (action != XDP_REDIRECT && (vf & TRACE_TX_REPLY))
			action = bpf_redirect(ifindex, 0);
		reason = action == XDP_REDIRECT ? STAT_FWD_REDIRECT : STAT_DROP_NO_TX_PORT;
		if (action != XDP_REDIRECT)
			action = XDP_DROP;
	}
	struct trace_scratch *s = bpf_map_lookup_elem(&trace_scratch, &dlb_trace_key);
	if (!s)
		return action;
	trace_begin(ctx, s, (vf & 0xffff0000) | reason | action << 8, b);
	return trace_record(ctx, s);
}
