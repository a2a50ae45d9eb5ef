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

/* vip_filter: Bloom pre-filter over cluster addresses (one entry). */
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
 * the live one and swapped into maglev_tables in one update. */
struct maglev_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, MAGLEV_SIZE);
};

/* maglev_tables: service id -> that service's Maglev table. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__type(key, __u32);
	__uint(max_entries, MAX_SERVICES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct maglev_table);
} maglev_tables SEC(".maps");

/* conns: the connection table, shared by all CPUs so that a flow whose
 * packets land on different CPUs still finds its entry. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct flow_key);
	__type(value, struct flow);
	__uint(max_entries, CONN_TABLE_SIZE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} conns SEC(".maps");

/* handshakes: which server each recent SYN went to (see struct handshake).
 * Shared by all CPUs: a SYN and its ACK may be handled on different ones. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct handshake);
	__uint(max_entries, HANDSHAKE_SLOTS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} handshakes SEC(".maps");

/* clock: the per-CPU clock cache (one entry). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct dlb_clock);
	__uint(max_entries, 1);
} clock SEC(".maps");

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

/* backend_stats: per-backend counters, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct counters);
	__uint(max_entries, MAX_BACKENDS);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} backend_stats SEC(".maps");

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

/* reason_stats: packets and bytes per enum stat_reason, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct reason_counters);
	__uint(max_entries, STAT_MAX);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} reason_stats SEC(".maps");
