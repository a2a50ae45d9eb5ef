/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* This file contains every type, enum and flag shared by the XDP executor and
 * its Go loader. bpf2go generates the Go side from it (pkg/datapath), so a
 * layout change here is a layout change there, never a silent drift.
 *
 * Values are in network byte order where the field type says __be16/__be32
 * or the field is an address; everything else is in host byte order. */
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

/* Constants both sides need. An enum, so that bpf2go generates them. */
enum dlb_consts {
	/* DLB_ABI_VERSION is written into the config map. A loader refuses
	 * pinned maps that another ABI version wrote: layouts can differ
	 * where sizes agree. Bump it on every layout or meaning change. */
	DLB_ABI_VERSION = 8,
	/* A half-open connection (a SYN without its handshake-completing
	 * ACK) counts as half-open for this long; the sweeper frees NAT
	 * half-open entries older than this. */
	DLB_HALF_OPEN_SECONDS = 30,
	/* struct handshake's seen counts the clock in units of 2^this ns. */
	DLB_HANDSHAKE_SEEN_SHIFT = 20,
	/* How many hash-derived candidate ports a new NAT mapping tries
	 * first. When established connections hold all of them (a pool in
	 * heavy use), it goes on to DLB_NAT_CANDIDATES_MAX before the pool
	 * counts as exhausted; when half-open reservations of other ports
	 * share their slots (a SYN flood), it displaces the oldest instead. */
	DLB_NAT_CANDIDATES = 8,
	/* How many candidate ports a new NAT mapping tries at most: with 8,
	 * a pool half held refused one new connection in 256 (and its
	 * retransmissions, which try the same ports); with 64, one in 10^19,
	 * and one in 10^3 at 90 % held. */
	DLB_NAT_CANDIDATES_MAX = 64,
	/* Default NAT port pool of a return address (inclusive). */
	DLB_NAT_PORT_MIN = 1024,
	DLB_NAT_PORT_MAX = 65535,
	/* How many IPv6 extension headers the executor walks. */
	DLB_IPV6_MAX_EXT = 4,
	/* Ways per bucket of a connection table's index (struct
	 * tab_bucket). */
	DLB_TAB_WAYS = 14,
	/* The tag of a way being written (table.h). */
	DLB_TAB_BUSY = 1,
	/* Entries of a connection table address by 24 bits: its largest
	 * capacity. */
	DLB_TAB_MAX_ENTRIES = 1 << 24,
};

/* Forwarding methods of a service (IBM's "method"). */
enum dlb_method {
	/* DLB_METHOD_MAC rewrites the MAC addresses only (direct server
	 * return): the server holds the cluster address on a loopback alias
	 * and answers the client itself. */
	DLB_METHOD_MAC = 0,
	/* DLB_METHOD_NAT (NAPT) rewrites the destination to the server (port
	 * from mapport) and the source to the server's return address and a
	 * port from that address's pool; replies come back to the return
	 * address and are translated back. */
	DLB_METHOD_NAT = 1,
};

/* How a service with a non-zero sticky_time uses affinity records (IBM's
 * selectionalgorithm). */
enum dlb_selection {
	/* DLB_SELECT_AFFINITY: a new connection follows the client's
	 * unexpired record whenever its server is configured and takes new
	 * connections or is quiesced (BACKEND_F_QUIESCED). */
	DLB_SELECT_AFFINITY = 0,
	/* DLB_SELECT_CONN_AFFIN: the record is followed only while its
	 * server takes new connections; otherwise the connection is
	 * scheduled afresh and the record replaced. */
	DLB_SELECT_CONN_AFFIN = 1,
	/* DLB_SELECT_CONNECTION: records are neither read nor written;
	 * every connection is scheduled by its own 5-tuple. */
	DLB_SELECT_CONNECTION = 2,
};

/* Key of the vips map: one entry per balanced cluster address, port and
 * protocol. An entry with port 0 and proto 0 is an address marker: it says
 * "this address is a cluster address" (VIP_F_MARKER) or "this address is a
 * NAT return address" (VIP_F_RETURN) for packets that carry no balanced
 * port (fragments, IP options, ICMP, other protocols and ports). */
struct vip_key {
	struct dlb_ip addr;
	__be16 port;
	__u8 proto;  /* IPPROTO_TCP or IPPROTO_UDP; 0 in a marker */
	__u8 family; /* enum dlb_family */
};

/* Value of the vips map. */
struct vip_meta {
	__u32 service;        /* service id: index of maglev_tables and service_stats */
	__u32 flags;          /* VIP_F_* */
	__u32 stale_timeout;  /* seconds an idle connection keeps its entry */
	__u32 fin_timeout;    /* seconds a closing connection keeps its entry */
	__u32 sticky_time;    /* seconds an affinity record lives after its last use; 0: no affinity */
	__u32 affinity_group; /* services with the same group share affinity records (crossport) */
	__u8 method;          /* enum dlb_method */
	__u8 selection;       /* enum dlb_selection */
	__u8 sticky_mask4;    /* affinity by client subnet: IPv4 prefix length (1-32) */
	__u8 sticky_mask6;    /* IPv6 prefix length (1-128) */
	__u32 table_size;     /* slots of the service's Maglev table (a prime); 0: no table */
};

/* Flags of a vip_meta. */
enum vip_flags {
	/* VIP_F_MARKER marks the cluster-address marker entry. */
	VIP_F_MARKER = 1 << 0,
	/* VIP_F_RETURN marks a NAT return address's marker entry. */
	VIP_F_RETURN = 1 << 1,
};

/* A backend: one server of one service. Indexed by backend id. */
struct backend {
	struct dlb_ip addr;
	__u8 mac[6];     /* next hop towards the server: its MAC, or the router's */
	__u8 src_mac[6]; /* MAC of the interface the next hop is reached through */
	__u32 ifindex;   /* interface the next hop is reached through */
	__u32 service;   /* the service this backend belongs to */
	__u32 flags;     /* BACKEND_F_* */
	__u8 family;     /* enum dlb_family */
	__u8 pad;
	__be16 port;              /* NAT: the server's port (mapport); 0: the cluster port */
	struct dlb_ip nat_addr;   /* NAT: the return address (source towards the server) */
	__u16 nat_port_min;       /* NAT: the return address's port pool, inclusive */
	__u16 nat_port_max;
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
	/* BACKEND_F_QUIESCED: the server takes no new connections from the
	 * Maglev table but is up (IBM's quiesce without "now"): under
	 * DLB_SELECT_AFFINITY clients with an unexpired record still reach
	 * it. */
	BACKEND_F_QUIESCED = 1 << 2,
};

/* Key of the conns and nat_flows maps: a flow as the client sent it. */
struct flow_key {
	struct dlb_ip src; /* client address */
	struct dlb_ip dst; /* cluster address */
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 family;
	__u16 pad;
};

/* A bucket of a connection table's index, one cache line (table.h): the
 * ways of DLB_TAB_WAYS entries. Way i is the 32-bit half i % 2 of
 * ways[i / 2]: 0 when free, else the way's 8-bit tag (DLB_TAB_BUSY while
 * it is written, else a tag of its entry's key hash, at least 2) in the
 * top byte and its entry's slot in the table's entries array in the low
 * 24 bits. */
struct tab_bucket {
	__u64 ways[DLB_TAB_WAYS / 2];
	__u64 meta; /* TAB_F_* and the spill counts (TAB_SPILL_SHIFT) */
};

/* Flags of a tab_bucket's meta word. */
enum tab_flags {
	/* TAB_F_LOCK: taken while an insert of a key whose first bucket
	 * this is runs, so that one key is never inserted twice. */
	TAB_F_LOCK = 1 << 0,
	/* TAB_F_OVERFLOW: a key whose first bucket this is was put in its
	 * second bucket (this one was full). */
	TAB_F_OVERFLOW = 1 << 1,
	/* The spill counts: TAB_SPILL_BITS bits from bit TAB_SPILL_SHIFT +
	 * TAB_SPILL_BITS * c count the keys of class c (table.h,
	 * tab_spill_shift: 16 classes of key hash) whose first bucket this
	 * is and which sit in their second bucket. A lookup that misses here
	 * reads the second bucket only when its key's class count is not 0:
	 * in a full table most buckets have sent keys there, but of a few
	 * classes only, so most misses read one index line, not two. A key
	 * leaving its second bucket takes its count down again, so that a
	 * table in use (keys coming and going) does not drift towards two
	 * reads for every miss, as one-way flags did. A count that reached
	 * TAB_SPILL_MAX stays there (it no longer says how many). */
	TAB_SPILL_SHIFT = 16,
	TAB_SPILL_BITS = 3,
	TAB_SPILL_MAX = 7,
};

/* State of a connection-table entry. */
enum flow_state {
	FLOW_ESTABLISHED = 1,
	/* FLOW_CLOSING: a FIN or RST was seen; the entry lives fin_timeout. */
	FLOW_CLOSING = 2,
};

/* Value of the conns map (MAC forwarding). */
struct flow {
	__u64 last_seen; /* bpf_ktime_get_coarse_ns() when last refreshed */
	__u32 backend;   /* backend id */
	__u32 service;   /* service id */
	__u8 state;      /* enum flow_state */
	__u8 pad[7];
};

/* An entry of conns, the MAC connection table: a flow and where it goes. */
struct conn_entry {
	struct flow_key key;
	struct flow flow;
};

/* The context of the dlb_conn_* syscall programs, by which pkg/datapath
 * reads, writes and removes connection-table entries (the table's layout
 * and locking live in BPF only). */
struct conn_ctl {
	struct conn_entry entry; /* in: the key (and flow, for put); out: the entry (get) */
	__u64 expect_seen;       /* del: remove only if last_seen is this (0: any) */
	__u32 result;            /* out: 0 done; 1 no such entry (or changed); 2 no room; 3 the key has an entry (put, only_new) */
	__u32 only_new;          /* put: write only a new entry, never over the key's */
};

/* An entry of the handshake cache (MAC forwarding). The executor does not
 * create a connection-table entry for a bare SYN (a SYN flood must not
 * evict established flows, and the table insert is the costliest step); it
 * remembers here which server it sent the SYN to, and the handshake's first
 * ACK, which creates the entry, goes to that same server even if the Maglev
 * table changed in between, and clears the slot. Slots are overwritten
 * freely: a lost entry only means the ACK is scheduled by Maglev again.
 * Slots with a recent "seen" are the half-open connections the sweeper
 * counts per service.
 *
 * 16 bytes, four to a cache line, without the flow's key: a stream of new
 * connections writes and reads a quarter of the memory that a 64-byte
 * entry holding the key took (BENCHMARKS.md). The slot is the flow's
 * table hash (tab_hash_flow) modulo the slots, and check holds the whole
 * hash: an ACK takes the entry of another flow only if that flow's hash is
 * its own, all 32 bits, and then gets the server its own SYN would have
 * been given, since a new flow's Maglev slot comes from that same hash. */
struct handshake {
	/* check = the flow's table hash ^ backend ^ service: also detects an
	 * entry torn by two CPUs writing the same slot at once. */
	__u32 check;
	__u32 backend;
	__u32 service;
	/* seen: the coarse clock of the SYN in units of 2^20 ns (about a
	 * millisecond, DLB_HANDSHAKE_SEEN_SHIFT), modulo 2^32, never 0 (1
	 * stands for 0); 0 once the handshake completed. */
	__u32 seen;
};

/* Where to send a frame: a neighbour's MAC, the MAC of the interface it
 * is reached through, and that interface. */
struct next_hop {
	__u8 mac[6];
	__u8 src_mac[6];
	__u32 ifindex; /* 0: unset */
};

/* Key of nat_ports: one port of a return address. A live NAT mapping owns
 * its key, so the same return address and port are never handed out
 * twice. */
struct nat_key {
	struct dlb_ip addr; /* return address */
	__be16 port;        /* NAT port */
	__u8 proto;
	__u8 family;
};

/* Value of nat_flows (key: the client's flow_key): how to translate the
 * client's packets. The server address and port come from the backend. */
struct nat_flow {
	__u64 last_seen;        /* coarse ns, refreshed at most once a second */
	__u32 backend;
	__u32 service;
	__u8 state;             /* enum flow_state */
	__u8 pad;
	__be16 nat_port;
	__u32 pad2;
	struct dlb_ip nat_addr; /* return address */
};

/* Value of nat_ports: how to translate the server's replies back. */
struct nat_rev {
	__u64 last_seen; /* coarse ns of the last reply, refreshed at most once a second */
	struct dlb_ip client;
	struct dlb_ip vip;
	__be16 client_port;
	__be16 vip_port;
	__u32 backend;
	__u32 service;
	__u8 state; /* enum flow_state: closing once the server sent FIN or RST */
	__u8 flags; /* NAT_F_* */
	__u16 route_gen; /* dlb_config's route_gen when hop was looked up */
	struct next_hop hop; /* towards the client, once resolved (NAT_F_NEXT_HOP) */
};

/* An entry of nat_flows (table.h): a client flow and its mapping. */
struct nat_flow_entry {
	struct flow_key key;
	struct nat_flow flow;
};

/* An entry of nat_ports (table.h): a return address's port and the
 * connection it translates replies for. */
struct nat_port_entry {
	struct nat_key key;
	__u32 pad;
	struct nat_rev rev;
};

/* What the dlb_nat_ctl syscall program does (struct nat_ctl). */
enum nat_ctl_op {
	NAT_CTL_GET_FLOW = 0, /* read the nat_flows entry of f.key into f.flow */
	NAT_CTL_GET_PORT = 1, /* read the nat_ports entry of p.key into p.rev */
	NAT_CTL_PUT_FLOW = 2, /* write f (over its key's entry, else new) */
	NAT_CTL_PUT_PORT = 3, /* write p */
	NAT_CTL_DEL_FLOW = 4, /* remove f.key's entry if its last_seen is expect_seen (or that is 0) */
	NAT_CTL_DEL_PORT = 5, /* remove p.key's entry, likewise */
	NAT_CTL_FORGET_HOP = 6, /* clear p.key's cached next hop if it is still p.rev.hop */
	NAT_CTL_ADD_FLOW = 7,   /* write f only as a new entry (result 3 when f.key has one) */
	NAT_CTL_ADD_PORT = 8,   /* write p only as a new entry, likewise */
};

/* The context of the dlb_nat_ctl syscall program, by which pkg/datapath
 * reads, writes and removes NAT table entries. */
struct nat_ctl {
	struct nat_flow_entry f;
	struct nat_port_entry p;
	__u64 expect_seen;
	__u32 op;     /* enum nat_ctl_op */
	__u32 result; /* out: 0 done; 1 no such entry (or changed); 2 no room; 3 the key has an entry (add) */
};

/* Flags of a nat_rev or halfopen. */
enum nat_flags {
	/* NAT_F_NEXT_HOP: hop holds the next hop towards the client, looked
	 * up in the routing table under route_gen (unused when a client
	 * gateway is set). */
	NAT_F_NEXT_HOP = 1 << 0,
};

/* A slot of nat_halfopen: a NAT connection between its SYN and the
 * client's ACK that completes its handshake, holding the return address
 * and port it reserved. The table is direct-mapped: the reservation of
 * (return address, port, protocol) lives in slot halfopen_slot(...) & mask.
 * A slot is claimed with a compare-and-exchange on owner, so that two SYNs
 * can never reserve the same port. */
struct halfopen {
	/* owner: 0 when free; else the creation time in seconds since boot
	 * plus one (coarse clock; halfopen_stamp) << 32 | a 32-bit tag of the slot's contents (halfopen_tag),
	 * 0 while they are being written. A slot older than
	 * DLB_HALF_OPEN_SECONDS is free. */
	__u64 owner;
	struct nat_key key; /* the reserved return address, port and protocol */
	__u32 pad;
	struct dlb_ip client;
	struct dlb_ip vip;
	__be16 client_port;
	__be16 vip_port;
	__u8 flags; /* NAT_F_* */
	__u8 pad2;
	__u16 route_gen; /* dlb_config's route_gen when hop was looked up */
	__u32 backend;
	__u32 service;
	struct next_hop hop; /* towards the client, once resolved (NAT_F_NEXT_HOP) */
};

/* An entry of the NAT handshake cache: which port a recent NAT SYN
 * reserved, so that its ACK finds the half-open connection directly. Slots
 * are overwritten freely: a lost slot only means the ACK looks the
 * reservation up by recomputing the SYN's server and candidate ports. The
 * entry names the reservation's nat_halfopen slot, which holds the return
 * address and port and the client flow they are for (the ACK checks it
 * owns them): 8 bytes, eight to a cache line, not the 64 of an entry
 * holding the flow's key and the return address (BENCHMARKS.md). The slot
 * is the client flow's table hash modulo the slots. */
struct nat_handshake {
	__u32 slot;  /* the reservation's slot of nat_halfopen */
	/* check = table hash (tab_hash_flow) ^ slot: detects an entry torn by
	 * two CPUs, and most other flows' entries. */
	__u32 check;
};

/* Key of the affinity map: a client (or client subnet) in an affinity
 * group. */
struct affinity_key {
	struct dlb_ip client; /* masked with the service's sticky mask */
	__u32 group;          /* vip_meta.affinity_group */
	__u8 family;
	__u8 pad[3];
};

/* Value of the affinity map. */
struct affinity_record {
	__u64 last_seen;      /* coarse ns of the last new connection or FIN */
	struct dlb_ip server; /* the server's address, for crossport lookups */
	__u32 backend;        /* backend id in the service that wrote it */
	__u32 service;
};

/* Key of service_servers: a server of a service, by address. */
struct server_key {
	struct dlb_ip addr;
	__u32 service;
	__u8 family;
	__u8 pad[3];
};

/* The per-CPU clock cache: bpf_ktime_get_coarse_ns() read once per jiffy. */
struct dlb_clock {
	__u64 jiffies;
	__u64 now;
};

/* Per-service and per-backend counters (per CPU; Go sums them). For NAT
 * services, packets and bytes count both directions. */
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
	STAT_PASS_NON_IP = 0,      /* not IPv4 or IPv6: ARP, LLDP, ... */
	STAT_PASS_MALFORMED = 1,   /* truncated or invalid headers */
	STAT_PASS_NFA = 2,         /* to a non-forwarding address */
	STAT_PASS_NOT_VIP = 3,     /* not to a cluster or return address (IPv6 ND included) */
	STAT_PASS_VIP_OTHER = 4,   /* to a cluster address, but no balanced port/protocol (ICMP echo, ND) */
	STAT_PASS_RETURN_OTHER = 5,/* to a return address, but no live NAT mapping */
	STAT_PASS_ICMP_NO_FLOW = 6,/* ICMP error to a cluster/return address about no known flow */
	/* Passed after translation: a NAT reply whose next hop towards the
	 * client has no resolved neighbour; the host stack forwards it (and
	 * resolves the neighbour). */
	STAT_PASS_NO_NEIGH = 7,
	/* Dropped. */
	STAT_DROP_FRAGMENT = 8,     /* IP fragment to a cluster or return address */
	STAT_DROP_IP_OPTIONS = 9,   /* IPv4 options to a cluster or return address */
	STAT_DROP_IPV6_EXT = 10,    /* IPv6 extension headers to a cluster/return address that cannot be balanced */
	STAT_DROP_NO_BACKEND = 11,  /* balanced port with no server taking connections */
	STAT_DROP_NO_TX_PORT = 12,  /* server's interface missing from tx_ports */
	STAT_DROP_NAT_EXHAUSTED = 13,/* NAT: no free port among the candidates of the return address */
	STAT_DROP_TABLE_FULL = 14,  /* NAT: nat_flows or nat_ports refused an insert (full; or, for a new UDP flow, locked) */
	STAT_DROP_NAT_NO_FLOW = 15, /* NAT: TCP segment that is no SYN, of no known or half-open connection */
	STAT_DROP_NO_ROUTE = 16,    /* NAT: no usable route towards the client */
	/* Forwarded. */
	STAT_FWD_TX = 17,       /* sent back out of the receiving interface */
	STAT_FWD_REDIRECT = 18, /* redirected to another interface */
	STAT_MAX = 19,
};

/* Counters of one reason (per CPU). */
struct reason_counters {
	__u64 packets;
	__u64 bytes;
};

/* Things that happened, counted beside the reasons (per CPU). A packet may
 * count several events or none. */
enum dlb_event {
	/* A connection table insert gave up on a bucket another CPU kept
	 * locked: a MAC connection's packet and a NAT handshake's ACK were
	 * still forwarded (the next packet inserts), a new NAT UDP flow's
	 * datagram was dropped (drop_table_full). */
	EV_CONN_INSERT_FAILED = 0,
	EV_AFFINITY_HIT = 1,        /* a new connection followed an affinity record */
	EV_AFFINITY_WRITTEN = 2,    /* an affinity record was created or replaced */
	EV_HALFOPEN_CREATED = 3,    /* NAT: a SYN reserved a port (a new half-open connection) */
	EV_HALFOPEN_RETRANSMIT = 4, /* NAT: a SYN found its half-open connection */
	EV_HALFOPEN_PROMOTED = 5,   /* NAT: a handshake ACK promoted its half-open connection */
	EV_HALFOPEN_LOST = 6,       /* NAT: a handshake ACK found no port reservation (evicted, expired or taken) */
	EV_HALFOPEN_EVICTED = 7,    /* NAT: a SYN took the slot of an older half-open connection (the table was full) */
	EV_NAT_TABLE_FULL = 8,      /* NAT: nat_flows or nat_ports refused an insert */
	EV_NAT_PORT_COLLISION = 9,  /* NAT: a candidate port was in use, the next one was tried */
	EV_NAT_FLOW_RELEASED = 10,  /* NAT: a mapping was freed by the executor (closed, expired or orphaned, replaced) */
	EV_FIB_LOOKUP = 11,         /* NAT: a next hop towards a client was looked up in the routing table */
	EV_ICMP_TO_BACKEND = 12,    /* an ICMP error about a flow was sent to the flow's server */
	EV_ICMP_TO_CLIENT = 13,     /* NAT: an ICMP error from the server side was translated for the client */
	EV_MAX = 14,
};

/* The executor's global settings: the single entry of the config map. */
struct dlb_config {
	struct dlb_ip nfa;  /* IPv4 non-forwarding address; all zero when unset */
	__u32 maglev_size;  /* the largest Maglev table (the inner map template's size) */
	__u32 hash_seed;    /* seed of the flow hash; equal on every dispatcher */
	__u8 nfa_family;    /* DLB_FAMILY_IPV4, or DLB_FAMILY_NONE when unset */
	__u8 nfa6_family;   /* DLB_FAMILY_IPV6, or DLB_FAMILY_NONE when unset */
	/* Changes when the host's routes may have: a next hop towards a NAT
	 * client cached under another generation (nat_rev, halfopen) is
	 * looked up again. */
	__u16 route_gen;
	__u32 abi_version;  /* DLB_ABI_VERSION of the executor that wrote it */
	__u32 halfopen_mask;/* slots of nat_halfopen - 1 (a power of two - 1) */
	__u32 conn_buckets; /* buckets of the connection table's index (conn_index entries) */
	struct dlb_ip nfa6; /* IPv6 non-forwarding address */
	/* Client gateways: where NAT replies to IPv4 (gw4) and IPv6 (gw6)
	 * clients go. ifindex 0: look the next hop up in the routing table. */
	struct next_hop gw4;
	struct next_hop gw6;
	__u32 conn_words;   /* words of conn_used's bitmap (conns entries / 64, rounded up; its summary follows) */
	/* Changes whenever the vips map does: entries of the per-CPU vips
	 * cache (vip_cache) read under another generation are stale. */
	__u32 vips_gen;
	__u32 natf_buckets; /* buckets of nat_flow_index */
	__u32 natf_words;   /* words of nat_flow_used */
	__u32 natp_buckets; /* buckets of nat_port_index */
	__u32 natp_words;   /* words of nat_port_used */
	__u32 conn_entries; /* entries of conns (its capacity) */
};

/* Bits of the VIP pre-filter: a one-hash Bloom filter over cluster and
 * return addresses that lets the executor pass most other traffic with one
 * memory read instead of a hash-map lookup. */
#define VIP_FILTER_BITS 65536
struct vip_bloom {
	__u64 bits[VIP_FILTER_BITS / 64];
};

/* The NAT pre-filters, at the same bit positions as vip_bloom: cluster
 * addresses that have a NAT port (their flows are looked up in nat_flows
 * first), and return addresses (packets to them are looked up in
 * nat_ports first). */
struct nat_bloom {
	__u64 nat_vips[VIP_FILTER_BITS / 64];
	__u64 returns[VIP_FILTER_BITS / 64];
};
