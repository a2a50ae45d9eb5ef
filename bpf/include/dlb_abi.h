/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* This file contains every type, enum and flag shared by the XDP executor and
 * its Go loader. bpf2go generates the Go side from it (pkg/datapath), so a
 * layout change here is a layout change there, never a silent drift. */
#pragma once

#include <linux/types.h>

/* An IPv4 or IPv6 address in network byte order. IPv4 addresses use the
 * first four bytes and leave the rest zero, so that keys keep one layout
 * for both families. */
struct dlb_ip {
	__u8 addr[16];
} __attribute__((aligned(4)));

/* Address families as stored in keys. */
enum dlb_family {
	DLB_FAMILY_NONE = 0,
	DLB_FAMILY_IPV4 = 4,
	DLB_FAMILY_IPV6 = 6,
};

/* Key of the vips map: one entry per balanced cluster address, port and
 * protocol. An entry with port 0 and proto 0 is the cluster-address marker:
 * it says "this address is a cluster address" for packets that carry no
 * usable port (fragments, IP options, other protocols). */
struct vip_key {
	struct dlb_ip addr;
	__be16 port;
	__u8 proto;  /* IPPROTO_TCP or IPPROTO_UDP; 0 in the marker */
	__u8 family; /* enum dlb_family */
};

/* Value of the vips map. */
struct vip_meta {
	__u32 service;       /* service id: index of maglev_tables and service_stats */
	__u32 flags;         /* VIP_F_* */
	__u32 stale_timeout; /* seconds an idle connection keeps its entry */
	__u32 fin_timeout;   /* seconds a closing connection keeps its entry */
};

/* Flags of a vip_meta. */
enum vip_flags {
	/* VIP_F_MARKER marks the cluster-address marker entry. */
	VIP_F_MARKER = 1 << 0,
};

/* A backend: one server of one service. Indexed by backend id. */
struct backend {
	struct dlb_ip addr;
	__u8 mac[6];     /* the server's MAC address */
	__u8 src_mac[6]; /* MAC of the interface the server is reached through */
	__u32 ifindex;   /* interface the server is reached through */
	__u32 service;   /* the service this backend belongs to */
	__u32 flags;     /* BACKEND_F_* */
	__u8 family;     /* enum dlb_family */
	__u8 pad[3];
};

/* Flags of a backend. */
enum backend_flags {
	/* BACKEND_F_PRESENT: the slot holds a configured server. A flow whose
	 * entry points at a slot without it is rescheduled. */
	BACKEND_F_PRESENT = 1 << 0,
	/* BACKEND_F_NEW_OK: the server takes new connections (it is up and its
	 * weight is above 0). Without it, established flows still reach it but
	 * a SYN is rescheduled. */
	BACKEND_F_NEW_OK = 1 << 1,
};

/* Key of the conns map: a flow as the client sent it. */
struct flow_key {
	struct dlb_ip src; /* client address */
	struct dlb_ip dst; /* cluster address */
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 family;
	__u16 pad;
};

/* State of a connection-table entry. */
enum flow_state {
	FLOW_ESTABLISHED = 1,
	/* FLOW_CLOSING: a FIN or RST was seen; the entry lives fin_timeout. */
	FLOW_CLOSING = 2,
};

/* Value of the conns map. */
struct flow {
	__u64 last_seen; /* bpf_ktime_get_coarse_ns() when last refreshed */
	__u32 backend;   /* backend id */
	__u32 service;   /* service id */
	__u8 state;      /* enum flow_state */
	__u8 pad[7];
};

/* An entry of the handshake cache. The executor does not create a
 * connection-table entry for a bare SYN (a SYN flood must not evict
 * established flows, and the table insert is the costliest step); it
 * remembers here which server it sent the SYN to, and the handshake's first
 * ACK, which creates the entry, goes to that same server even if the Maglev
 * table changed in between. Slots are overwritten freely: a lost entry only
 * means the ACK is scheduled by Maglev again. */
struct handshake {
	struct flow_key key;
	__u32 backend;
	__u32 service;
	/* check = flow hash ^ backend ^ service: detects an entry torn by two
	 * CPUs writing the same slot at once. */
	__u32 check;
	__u32 pad[3];
};

/* The per-CPU clock cache: bpf_ktime_get_coarse_ns() read once per jiffy. */
struct dlb_clock {
	__u64 jiffies;
	__u64 now;
};

/* Per-service and per-backend counters (per CPU; Go sums them). */
struct counters {
	__u64 packets;
	__u64 bytes;
	__u64 new_conns; /* connections scheduled: entries created or rescheduled */
	__u64 fin_conns; /* connections that saw FIN or RST, or were replaced */
};

/* Why the executor let a packet pass, dropped it or forwarded it. Every
 * packet is counted under exactly one reason, so the reason counters add up
 * to the packets seen. */
enum stat_reason {
	/* Passed to the host stack untouched. */
	STAT_PASS_NON_IP = 0,   /* not IPv4 or IPv6: ARP, LLDP, ... */
	STAT_PASS_IPV6 = 1,     /* IPv6 (not balanced yet) */
	STAT_PASS_MALFORMED = 2,/* truncated or invalid headers */
	STAT_PASS_NFA = 3,      /* to the non-forwarding address */
	STAT_PASS_NOT_VIP = 4,  /* to an address that is not a cluster address */
	STAT_PASS_VIP_OTHER = 5,/* to a cluster address, but no balanced port/protocol */
	/* Dropped. */
	STAT_DROP_FRAGMENT = 6,   /* IP fragment to a cluster address */
	STAT_DROP_IP_OPTIONS = 7, /* IPv4 options to a cluster address */
	STAT_DROP_NO_BACKEND = 8, /* balanced port with no server taking connections */
	STAT_DROP_NO_TX_PORT = 9, /* server's interface missing from tx_ports */
	/* Forwarded. */
	STAT_FWD_TX = 10,       /* sent back out of the receiving interface */
	STAT_FWD_REDIRECT = 11, /* redirected to another interface */
	STAT_MAX = 12,
};

/* Counters of one reason (per CPU). */
struct reason_counters {
	__u64 packets;
	__u64 bytes;
};

/* The executor's global settings: the single entry of the config map. */
struct dlb_config {
	struct dlb_ip nfa;  /* non-forwarding address; all zero when unset */
	__u32 maglev_size;  /* entries in every Maglev table (a prime) */
	__u32 hash_seed;    /* seed of the flow hash; equal on every dispatcher */
	__u8 nfa_family;    /* enum dlb_family; DLB_FAMILY_NONE when unset */
	__u8 pad[7];
};

/* Bits of the VIP pre-filter: a one-hash Bloom filter over cluster addresses
 * that lets the executor pass most non-cluster traffic with one memory read
 * instead of a hash-map lookup. */
#define VIP_FILTER_BITS 65536
struct vip_bloom {
	__u64 bits[VIP_FILTER_BITS / 64];
};
