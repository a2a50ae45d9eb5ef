/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* This file contains the definitions of every map the XDP executor uses.
 * All of them are pinned by name under the daemon's pin directory, so that a
 * restarted dlbd adopts them and no connection is lost. Sizes are defaults:
 * the loader may override max_entries before creating the maps. */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "dlb_abi.h"

/* Highest number of services (balanced cluster@port pairs). */
#define MAX_SERVICES 4096
/* Highest number of backends (servers, counted once per service). */
#define MAX_BACKENDS 16384
/* Default size of a Maglev table: a prime. */
#define MAGLEV_SIZE 65537
/* Default size of the connection table. */
#define CONN_TABLE_SIZE 262144
/* Default size of nat_flows and nat_ports (NAT connections). */
#define NAT_TABLE_SIZE 262144
/* Default slots of nat_halfopen (a power of two; one slot per half-open
 * NAT connection). The table is direct-mapped by return address and port,
 * so at most this many ports of a pool are reserved by half-open
 * connections at once: keep it at most a quarter of the smallest pool. */
#define HALFOPEN_TABLE_SIZE 16384
/* Default size of the affinity map. */
#define AFFINITY_TABLE_SIZE 65536
/* Slots of the handshake cache (a power of two). */
#define HANDSHAKE_SLOTS 16384
/* Highest number of interfaces packets can be redirected to. */
#define MAX_TX_PORTS 64

/* vips: balanced cluster address, port and protocol -> service. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct vip_key);
	__type(value, struct vip_meta);
	__uint(max_entries, MAX_SERVICES * 3);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} vips SEC(".maps");

/* A vips entry as cached by a CPU (dispatcher.c, vip_lookup). */
struct vip_cached {
	struct vip_key key;
	struct vip_meta meta;
	__u32 gen;  /* config.vips_gen when it was read */
	__u32 used; /* 1 once written */
	__u32 pad[2];
};

/* Entries of vip_cache (a power of two). */
#define VIP_CACHE_SLOTS 64

/* vip_cache: per CPU, the vips entries recently used, direct-mapped by a
 * hash of their key: a hit costs one cache line and no kernel function,
 * where a hash-map lookup calls several (about 25 ns here). Not pinned. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct vip_cached);
	__uint(max_entries, VIP_CACHE_SLOTS);
} vip_cache SEC(".maps");

/* vip_filter: Bloom pre-filter over cluster and return addresses (one
 * entry). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct vip_bloom);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} vip_filter SEC(".maps");

/* backends: backend id -> where and how to forward. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct backend);
	__uint(max_entries, MAX_BACKENDS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} backends SEC(".maps");

/* A Maglev lookup table: slot -> backend id. One per service, built beside
 * the live one and swapped into maglev_tables in one update. Each has the
 * size of its service (a prime, vip_meta.table_size, at most MAGLEV_SIZE):
 * BPF_F_INNER_MAP lets inner maps differ from this template in size, so
 * kernel memory follows the number of servers. BPF_F_MMAPABLE lets dlbd
 * fill a table with one copy: written slot by slot, a 65,537-slot table
 * took 15 ms (ABI 8). */
struct maglev_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, MAGLEV_SIZE);
	__uint(map_flags, BPF_F_INNER_MAP | BPF_F_MMAPABLE);
};

/* maglev_tables: service id -> that service's Maglev table. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, MAX_SERVICES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct maglev_table);
} maglev_tables SEC(".maps");

/* table_info: what dlbd knows of the Maglev table it last swapped in for
 * a service: its sum (a hash of its slots), its size, and the id of the
 * inner map. Read by no program: a restarted dlbd keeps the tables whose
 * map id still matches and whose sum is what its state says, instead of
 * rewriting them all. Reading an inner map itself needs CAP_SYS_ADMIN,
 * which dlbd does not have under systemd. */
struct table_info {
	__u64 sum;
	__u32 size;
	__u32 map_id;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct table_info);
	__uint(max_entries, MAX_SERVICES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} maglev_info SEC(".maps");

/* TAB_MAPS declares the maps of a connection table (table.h): entries
 * (its size the capacity), a bitmap of those in use (followed by its
 * summary: a bit per bitmap word, set when the word is full), per-CPU allocation
 * cursors and an index of buckets. The arrays are memory-mappable, so that
 * every bucket and entry is page-aligned (and pkg/datapath reads them
 * without a system call per entry). */
#define TAB_MAPS(entries, used, cursor, index, entry_t, capacity)                                 \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                                  \
		__type(key, __u32);                                                                \
		__type(value, entry_t);                                                            \
		__uint(max_entries, capacity);                                                     \
		__uint(map_flags, BPF_F_MMAPABLE);                                                 \
		__uint(pinning, LIBBPF_PIN_BY_NAME);                                               \
	} entries SEC(".maps");                                                                    \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                                  \
		__type(key, __u32);                                                                \
		__type(value, __u64);                                                              \
		__uint(max_entries, ((capacity) + 63) / 64 + ((capacity) + 4095) / 4096);          \
		__uint(map_flags, BPF_F_MMAPABLE);                                                 \
		__uint(pinning, LIBBPF_PIN_BY_NAME);                                               \
	} used SEC(".maps");                                                                       \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                                           \
		__type(key, __u32);                                                                \
		__type(value, __u32);                                                              \
		__uint(max_entries, 1);                                                            \
		__uint(pinning, LIBBPF_PIN_BY_NAME);                                               \
	} cursor SEC(".maps");                                                                     \
	struct {                                                                                   \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                                  \
		__type(key, __u32);                                                                \
		__type(value, struct tab_bucket);                                                  \
		__uint(max_entries, ((capacity) + 9) / 10); /* pkg/datapath: tabIndexBuckets */    \
		__uint(map_flags, BPF_F_MMAPABLE);                                                 \
		__uint(pinning, LIBBPF_PIN_BY_NAME);                                               \
	} index SEC(".maps");

/* The MAC connection table (table.h), shared by all CPUs so that a flow
 * whose packets land on different CPUs still finds its entry. */
TAB_MAPS(conns, conn_used, conn_cursor, conn_index, struct conn_entry, CONN_TABLE_SIZE)

/* nat_filter: the NAT pre-filters (one entry, see struct nat_bloom). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct nat_bloom);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat_filter SEC(".maps");

/* nat_flows (and its bitmap, cursors and index): established NAT
 * connections, by the client's flow: how to translate the client's
 * packets. Never evicting: a live mapping must never be dropped (its port
 * would be handed out again while the connection still uses it). When
 * full, new NAT connections are refused (STAT_DROP_TABLE_FULL); the
 * sweeper frees idle entries. */
TAB_MAPS(nat_flows, nat_flow_used, nat_flow_cursor, nat_flow_index, struct nat_flow_entry, NAT_TABLE_SIZE)

/* nat_ports (and its bitmap, cursors and index): established NAT
 * connections, by return address and NAT port: the port allocation (an
 * insert that finds the key taken fails) and the translation of the
 * server's replies. Same size and policy as nat_flows. */
TAB_MAPS(nat_ports, nat_port_used, nat_port_cursor, nat_port_index, struct nat_port_entry, NAT_TABLE_SIZE)

/* nat_halfopen: NAT connections between their SYN and their handshake
 * ACK, direct-mapped by the port they reserved (see struct halfopen). A
 * bounded table of its own, written without a hash insert: a SYN flood
 * only overwrites other half-open slots (the oldest of a SYN's candidate
 * slots, and only when all are taken), never an established connection,
 * and cannot exhaust a port pool. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct halfopen);
	__uint(max_entries, HALFOPEN_TABLE_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat_halfopen SEC(".maps");

/* affinity: affinity records (stickytime), by affinity group and masked
 * client address. An LRU: a lost record only loses stickiness. Written
 * when a connection is established (never by a bare SYN) and on FIN;
 * refreshed and expired by the sweeper. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct affinity_key);
	__type(value, struct affinity_record);
	__uint(max_entries, AFFINITY_TABLE_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} affinity SEC(".maps");

/* service_servers: (service, server address) -> backend id, so that an
 * affinity record written by one port of a crossport group finds the same
 * server on another port. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct server_key);
	__type(value, __u32);
	__uint(max_entries, MAX_BACKENDS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} service_servers SEC(".maps");

/* handshakes: which server each recent SYN went to (see struct handshake).
 * Shared by all CPUs: a SYN and its ACK may be handled on different ones. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct handshake);
	__uint(max_entries, HANDSHAKE_SLOTS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} handshakes SEC(".maps");

/* nat_handshakes: which port each recent NAT SYN reserved (see struct
 * nat_handshake). Shared by all CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct nat_handshake);
	__uint(max_entries, HANDSHAKE_SLOTS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} nat_handshakes SEC(".maps");

/* clock: the per-CPU clock cache (one entry). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct dlb_clock);
	__uint(max_entries, 1);
} clock SEC(".maps");

/* launder_cell: one per-CPU word that values pass through to lose what
 * the verifier knows of them (common.h, launder). Not pinned. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} launder_cell SEC(".maps");

/* Room for a struct bpf_fib_lookup (bpf2go cannot generate its anonymous
 * unions, so the map holds bytes). */
struct fib_scratch {
	__u8 data[sizeof(struct bpf_fib_lookup)];
} __attribute__((aligned(8)));

/* fib_params: per-CPU scratch space for bpf_fib_lookup's parameters, which
 * do not fit the BPF stack beside everything else. Not pinned. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct fib_scratch);
	__uint(max_entries, 1);
} fib_params SEC(".maps");

/* Scratch space of the NAT slow paths: keys and values too large for the
 * BPF stack beside everything else. */
/* The arguments and results of the NAT port functions (dlb_nat_reserve,
 * dlb_nat_find): global functions, which take pointers to memory only. */
struct nat_args {
	struct flow_key fk;  /* in: the client's flow */
	struct nat_key nk;   /* out: the reservation's key */
	__u32 pad;
	__u64 now;           /* in: coarse ns */
	__u64 owner;         /* out: the reservation slot's owner word */
	__u32 backend;       /* in: the server chosen; out: the reservation's */
	__u32 service;       /* in */
	__u32 slot;          /* out: the reservation's nat_halfopen slot */
	__u32 retx;          /* out (reserve): 1 when the flow had reserved the port already */
	__u32 thash;         /* in (find): the flow's table hash (tab_hash_flow) */
	__u32 more;          /* out: 1 when the reservation may lie past the first candidates */
	__u32 nh;            /* the flow's candidate sequence (nat_candidate): hash, */
	__u32 pmin;          /* first port of the pool, */
	__u32 psize;         /* ports in the pool */
	__u32 pad3;
};

/* The arguments of dlb_conn_insert (table.h). */
struct conn_ins {
	struct conn_entry e; /* in: the key and value */
	__u32 hash;          /* in: the key's flow_hash */
	__u32 slot;          /* out: the entry's slot (inserted or existing) */
};

/* The arguments of dlb_natf_insert and dlb_natp_insert (table.h). */
struct natf_ins {
	struct nat_flow_entry e;
	__u32 hash;
	__u32 slot;
};

struct natp_ins {
	struct nat_port_entry e;
	__u32 hash;
	__u32 slot;
};

struct nat_scratch {
	struct natp_ins natp; /* a nat_ports entry to insert */
	struct natf_ins natf; /* a nat_flows entry to insert */
	struct nat_args args;
	struct conn_ins conn;
};

/* scratch: per-CPU struct nat_scratch (one entry): room for the slow
 * paths' large values. Not pinned. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct nat_scratch);
	__uint(max_entries, 1);
} scratch SEC(".maps");

/* tx_ports: interfaces that packets may be redirected to, by ifindex. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, MAX_TX_PORTS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tx_ports SEC(".maps");

/* config: the executor's global settings (one entry). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct dlb_config);
	__uint(max_entries, 1);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} config SEC(".maps");

/* service_stats: per-service counters, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct counters);
	__uint(max_entries, MAX_SERVICES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} service_stats SEC(".maps");

/* backend_stats: per-backend counters, one row of stats_stride entries per
 * CPU (entry cpu * stats_stride + backend id), each CPU writing only its
 * own row. Not a per-CPU array: an array the daemon maps into its memory,
 * so that reading the counters of 100,000 backends is a copy of a few MiB,
 * not 100,000 lookups (each system call's element costs ~300 ns). The
 * loader sizes it to stats_stride × the possible CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct counters);
	__uint(max_entries, MAX_BACKENDS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} backend_stats SEC(".maps");

/* stats_stride is the row length of backend_stats: the capacity of the
 * backends map, which the loader sets (read only once loaded, so the
 * verifier knows it). */
volatile const __u32 stats_stride = MAX_BACKENDS;

/* dlb_build identifies the program as loaded: a digest of this object and
 * of the sizes and constants it was loaded with, which the loader sets. The
 * program never reads it; a restarting dlbd reads it in the pinned program's
 * read-only data to tell whether that program is the one it would load, and
 * then adopts it instead of loading (and verifying) its own. */
volatile const __u8 dlb_build[32] = {};

/* backend_swept: connections per backend that the daemon's sweeper expired
 * while still established (counted as finished). Written only by the
 * daemon, so it needs no per-CPU split. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, MAX_BACKENDS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} backend_swept SEC(".maps");

/* events: counts per enum dlb_event, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, EV_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} events SEC(".maps");

/* reason_stats: packets and bytes per enum stat_reason, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct reason_counters);
	__uint(max_entries, STAT_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} reason_stats SEC(".maps");
