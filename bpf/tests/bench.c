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
 * bench_pass run on its own is the bare XDP_PASS baseline the figures are
 * reported against.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Largest benchmark frame. IPv4 frames are 64 bytes, the frame size of
 * the usual Mpps figures (14 Ethernet + 20 IPv4 + 20 TCP + 10 payload);
 * IPv6 frames 88 (14 + 40 IPv6 + 20 TCP + 14 payload). */
#define BENCH_FRAME_MAX 128

/* The frame the wrapper restores before every run (one entry). */
struct bench_frame {
	__u32 len;      /* the frame's length: a multiple of 8, at most BENCH_FRAME_MAX */
	__u32 vary;     /* non-zero: make every run a new flow */
	__u32 addr_off; /* offset of two bytes of the source address to vary */
	__u32 port_off; /* offset of the source port to vary */
	__u8 data[BENCH_FRAME_MAX] __attribute__((aligned(8)));
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct bench_frame);
	__uint(max_entries, 1);
} bench_frame SEC(".maps");

/* bench_runs counts the wrapper's runs on each CPU; with vary set, the
 * count is written into the frame, so no two runs are the same flow. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
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
		__u32 *runs = bpf_map_lookup_elem(&bench_runs, &key0);
		__u32 aoff = bf->addr_off, poff = bf->port_off;

		if (!runs || aoff > BENCH_FRAME_MAX - 2 || poff > BENCH_FRAME_MAX - 2)
			return XDP_ABORTED;
		__u32 n = ++*runs;
		__u16 *addr = data + aoff, *port = data + poff;
		/* clang knows these checks hold and would drop them; the
		 * verifier needs them for pointers with a variable offset. */
		asm volatile("" : "+r"(data_end));
		if ((void *)(addr + 1) > data_end || (void *)(port + 1) > data_end)
			return XDP_ABORTED;
		*addr = n >> 16;
		*port = n;
	}

	bpf_tail_call(ctx, &bench_progs, 0);
	return XDP_ABORTED;
}
