// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Copyright The dlb Authors.
 *
 * Benchmark harness for the executor (pkg/datapath, TestBenchReport). Test
 * code only: it is never loaded by dlbd.
 *
 * Why it exists: BPF_PROG_TEST_RUN with a repeat count runs the program
 * again and again on the same buffer, so from the second run on the
 * executor sees the frame it rewrote itself (for a forwarded packet: new
 * MAC addresses), and a "new connection" is new only once. Live-frame pages
 * (BPF_F_TEST_XDP_LIVE_FRAMES) are recycled without being reset either. A
 * naive figure therefore measures the wrong path. bench_wrapper rebuilds
 * the whole original frame before every run, optionally makes every run a
 * new flow, and tail-calls the program under test. It does the same work
 * whatever the program under test is, so its own cost is measured as
 * bench_wrapper -> bench_pass (with the same vary setting) and subtracted;
 * bench_pass run on its own is the bare XDP_PASS baseline (shown for
 * information only: what it costs depends on the machine, not on dlb).
 *
 * bench_ref is the reference the executor's established flow is compared
 * with: the least a MAC-forwarding balancer must do (parse Ethernet, IPv4
 * and TCP, one hash lookup, rewrite the MAC addresses, XDP_TX). bench_sink
 * counts and drops the frames the live-frames benchmark sends through a
 * veth pair.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Largest benchmark frame. IPv4 frames are 64 bytes, the frame size of
 * the usual Mpps figures (14 Ethernet + 20 IPv4 + 20 TCP + 10 payload);
 * IPv6 frames 88 (14 + 40 IPv6 + 20 TCP + 14 payload). */
#define BENCH_FRAME_MAX 128

/* How the wrapper varies the frame (bench_frame.vary). */
enum bench_vary {
	/* BENCH_FIXED: every run is the same frame. */
	BENCH_FIXED = 0,
	/* BENCH_NEW_FLOW: every run is a new flow (source address and port
	 * from the run counter). */
	BENCH_NEW_FLOW = 1,
	/* BENCH_CONNECTION: runs come in pairs, each a new connection's SYN
	 * and the ACK that completes the handshake of the connection lag
	 * pairs earlier: run 2p is the SYN of connection p, run 2p+1 the ACK
	 * of connection p - lag (lag > 0 puts other connections' packets
	 * between a SYN and its ACK, as a round-trip time does). With prime
	 * set, every run is the SYN of the next connection and no ACK is
	 * sent: lag such runs before a measurement give its first ACKs their
	 * SYNs. The flows' source addresses have BENCH_CONN_MARK set, so that
	 * they never meet BENCH_NEW_FLOW's; the TCP flags byte is rewritten. */
	BENCH_CONNECTION = 2,
};

/* Set in the varied address bytes of BENCH_CONNECTION flows. */
#define BENCH_CONN_MARK 0x8000

/* The frame the wrapper restores before every run (one entry). */
struct bench_frame {
	__u32 len;       /* the frame's length: a multiple of 8, at most BENCH_FRAME_MAX */
	__u32 vary;      /* enum bench_vary */
	__u32 addr_off;  /* offset of two bytes of the source address to vary */
	__u32 port_off;  /* offset of the source port to vary */
	__u32 flags_off; /* BENCH_CONNECTION: offset of the TCP flags byte */
	__u32 lag;       /* BENCH_CONNECTION: connections between a SYN and its ACK */
	__u32 prime;     /* BENCH_CONNECTION: send SYNs only */
	__u32 pad;
	__u8 data[BENCH_FRAME_MAX] __attribute__((aligned(8)));
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct bench_frame);
	__uint(max_entries, 1);
} bench_frame SEC(".maps");

/* bench_runs counts the wrapper's runs on each CPU: entry 0 those of
 * BENCH_NEW_FLOW, entry 1 those of BENCH_CONNECTION. The count is written
 * into the frame, so no two runs are the same flow (or connection). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 2);
} bench_runs SEC(".maps");

/* bench_progs: slot 0 holds the program under test. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} bench_progs SEC(".maps");

SEC("xdp")
int bench_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

SEC("xdp")
int bench_wrapper(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 key0 = 0;

	struct bench_frame *bf = bpf_map_lookup_elem(&bench_frame, &key0);
	if (!bf)
		return XDP_ABORTED;
	/* The frame must be exactly bf->len bytes long. */
	__u32 len = bf->len;
	if (len % 8 || len > BENCH_FRAME_MAX || ctx->data_end - ctx->data != len)
		return XDP_ABORTED;
	/* Eight-byte copies: x86 allows unaligned packet stores. */
	__u64 *dst = data;
	const __u64 *src = (const __u64 *)bf->data;
	for (int i = 0; i < BENCH_FRAME_MAX / 8; i++) {
		if (i * 8 >= len)
			break;
		if ((void *)(dst + i + 1) > data_end)
			return XDP_ABORTED;
		dst[i] = src[i];
	}

	if (bf->vary) {
		__u32 idx = bf->vary == BENCH_CONNECTION;
		__u32 *runs = bpf_map_lookup_elem(&bench_runs, &idx);
		__u32 aoff = bf->addr_off, poff = bf->port_off, foff = bf->flags_off;

		if (!runs || aoff > BENCH_FRAME_MAX - 2 || poff > BENCH_FRAME_MAX - 2 || foff > BENCH_FRAME_MAX - 1)
			return XDP_ABORTED;
		__u32 n = *runs;
		__u16 *addr = data + aoff, *port = data + poff;
		__u8 *flags = data + foff;
		/* clang knows these checks hold and would drop them; the
		 * verifier needs them for pointers with a variable offset. */
		asm volatile("" : "+r"(data_end));
		if ((void *)(addr + 1) > data_end || (void *)(port + 1) > data_end || (void *)(flags + 1) > data_end)
			return XDP_ABORTED;
		if (bf->vary == BENCH_CONNECTION) {
			if (bf->prime)
				n = (n + 1) & ~1U;
			*runs = n + (bf->prime ? 2 : 1);
			__u32 p = n >> 1;
			if (n & 1) {
				p -= bf->lag;
				*flags = 0x10; /* ACK */
			} else {
				*flags = 0x02; /* SYN */
			}
			n = p & 0x7fffffff;
			*addr = (n >> 16) | BENCH_CONN_MARK;
		} else {
			*runs = ++n;
			*addr = n >> 16;
		}
		*port = n;
	}

	bpf_tail_call(ctx, &bench_progs, 0);
	return XDP_ABORTED;
}

/* The reference program's flow table: the established flows of a minimal
 * balancer, by IPv4 5-tuple. */
struct ref_key {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u32 proto;
};

struct ref_value {
	__u8 mac[ETH_ALEN]; /* the server's MAC address */
	__u8 pad[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct ref_key);
	__type(value, struct ref_value);
	__uint(max_entries, 262144);
} ref_flows SEC(".maps");

/* bench_ref: parse Ethernet, IPv4 and TCP, look the flow up, send the frame
 * to its server (destination MAC from the table, source MAC the one it
 * was sent to) with XDP_TX. Anything else passes. */
SEC("xdp")
int bench_ref(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = data + sizeof(*eth);
	struct tcphdr *th = (void *)(iph + 1);

	if ((void *)(th + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP) || iph->ihl != 5 ||
	    iph->protocol != IPPROTO_TCP)
		return XDP_PASS;
	struct ref_key k = {
		.saddr = iph->saddr,
		.daddr = iph->daddr,
		.sport = th->source,
		.dport = th->dest,
		.proto = IPPROTO_TCP,
	};
	struct ref_value *v = bpf_map_lookup_elem(&ref_flows, &k);
	if (!v)
		return XDP_PASS;
	/* The MAC addresses in 32- and 16-bit moves, as the executor's
	 * set_macs does (__builtin_memcpy compiles to a byte at a time): the
	 * floor should not pay what dlb does not. */
	__u8 *m = (__u8 *)eth;
	*(__u32 *)(m + 6) = *(__u32 *)m;
	*(__u16 *)(m + 10) = *(__u16 *)(m + 4);
	const __u8 *mac = __builtin_assume_aligned(v->mac, 4); /* a map value */
	*(__u32 *)m = *(const __u32 *)mac;
	*(__u16 *)(m + 4) = *(const __u16 *)(mac + 4);
	return XDP_TX;
}

/* bench_sink_count counts the frames bench_sink received, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} bench_sink_count SEC(".maps");

/* bench_sink: the far end of the live-frames benchmark's veth pair. It
 * counts IPv4 frames only: the kernel sends IPv6 neighbour discovery on
 * the pair's links by itself. */
SEC("xdp")
int bench_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 key0 = 0;

	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_DROP;
	__u64 *c = bpf_map_lookup_elem(&bench_sink_count, &key0);
	if (c)
		(*c)++;
	return XDP_DROP;
}

/* Anchor for bpf2go. */
enum bench_vary bench_btf_vary __attribute__((unused));
