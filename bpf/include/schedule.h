/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* This file contains how the executor chooses a server for a new
 * connection: the Maglev pick, affinity records (IBM's stickytime,
 * stickymask, crossport and selectionalgorithm), and the handshake cache
 * of MAC forwarding.
 *
 * Affinity, as dlb reads IBM: a service with sticky_time S > 0 (and a
 * selection other than "connection") keeps one record per affinity group
 * and client subnet (the client address masked to sticky_mask4/6 bits).
 * The record names the server of the client's latest connection and lives
 * S seconds after its last use: it is written when a connection is
 * established (the handshake's ACK, a NAT promotion, a UDP flow's first
 * packet; never by a bare SYN, so a SYN flood cannot churn it), refreshed
 * on FIN and by the sweeper while the client has established connections.
 * A new connection of a client with an unexpired record goes to the
 * record's server if that server is configured and takes new connections
 * ("conn+affin"), or also when it is quiesced ("affinity"). Without a
 * usable record, an affinity service picks the Maglev slot of the masked
 * client address (not of the 5-tuple), so that parallel connections of a
 * new client, whose SYNs all arrive before any record exists, agree on a
 * server. Ports of a crossport group share records through a common
 * affinity_group; a record written by another port names the server by
 * address and is resolved through service_servers. */
#pragma once

#include "common.h"
#include "hash.h"

/* pick chooses the backend of Maglev slot hash % M (the service's table
 * size) for a new connection.
 * It returns NULL when the service has no server taking connections. */
static __always_inline struct backend *pick(const struct vip_meta *vm, const struct dlb_config *cfg, __u32 hash,
					    __u32 *backend_id)
{
	__u32 size = vm->table_size;
	__u32 service = vm->service; /* a key on the stack: vm may be a global function's argument */
	void *table = bpf_map_lookup_elem(&maglev_tables, &service);
	if (!table || size == 0)
		return NULL;

	__u32 slot = hash % size;
	__u32 *id = bpf_map_lookup_elem(table, &slot);
	if (!id)
		return NULL;

	struct backend *b = bpf_map_lookup_elem(&backends, id);
	if (!b || (b->flags & (BACKEND_F_PRESENT | BACKEND_F_NEW_OK)) != (BACKEND_F_PRESENT | BACKEND_F_NEW_OK))
		return NULL;
	*backend_id = *id;
	return b;
}

/* sticky reports whether a service uses affinity records. */
static __always_inline int sticky(const struct vip_meta *vm)
{
	return vm->sticky_time != 0 && vm->selection != DLB_SELECT_CONNECTION;
}

/* mask_word returns the network-order mask of word i (0-3) of an address
 * masked to bits prefix bits. */
static __always_inline __u32 mask_word(__u32 bits, __u32 i)
{
	if (bits <= 32 * i)
		return 0;
	if (bits >= 32 * (i + 1))
		return 0xffffffffU;
	return bpf_htonl(0xffffffffU << (32 * (i + 1) - bits));
}

/* affinity_key_of builds the affinity key of a client flow. The pkg/
 * datapath twin is affinityKey. */
static __always_inline void affinity_key_of(struct affinity_key *ak, const struct vip_meta *vm,
					    const struct flow_key *fk, int family)
{
	__u32 bits;

	if (family == DLB_FAMILY_IPV4)
		bits = vm->sticky_mask4 && vm->sticky_mask4 < 32 ? vm->sticky_mask4 : 32;
	else
		bits = vm->sticky_mask6 && vm->sticky_mask6 < 128 ? vm->sticky_mask6 : 128;
	const __u32 *s = (const __u32 *)fk->src.addr;
	__u32 *d = (__u32 *)ak->client.addr;
#pragma unroll
	for (int i = 0; i < 4; i++)
		d[i] = s[i] & mask_word(bits, i);
	ak->group = vm->affinity_group;
	ak->family = family;
}

/* affinity_hash is the flow hash of a client subnet in a group: the
 * Maglev slot of an affinity service's new clients. */
static __always_inline __u32 affinity_hash(const struct affinity_key *ak, __u32 seed)
{
	struct flow_key k = {};

	ip_copy(&k.src, &ak->client);
	*(__u32 *)k.dst.addr = ak->group;
	k.family = ak->family;
	return flow_hash(&k, seed);
}

/* affinity_pick returns the server of the client's record, if the record
 * is unexpired and selection allows its server. */
static __always_inline struct backend *affinity_pick(const struct vip_meta *vm, const struct affinity_key *ak,
						     __u64 now, __u32 *backend_id)
{
	struct affinity_record *rec = bpf_map_lookup_elem(&affinity, ak);

	if (!rec || idle_ns(now, rec->last_seen) > (__u64)vm->sticky_time * NSEC_PER_SEC)
		return NULL;
	__u32 id = rec->backend;
	if (rec->service != vm->service) {
		/* Written by another port of the crossport group. */
		struct server_key sk = { .service = vm->service, .family = ak->family };
		ip_copy(&sk.addr, &rec->server);
		__u32 *p = bpf_map_lookup_elem(&service_servers, &sk);
		if (!p)
			return NULL;
		id = *p;
	}
	struct backend *b = backend_ok(id, vm->service);
	if (!b || !ip_eq(&b->addr, &rec->server))
		return NULL;
	if (!(b->flags & BACKEND_F_NEW_OK) &&
	    !(vm->selection == DLB_SELECT_AFFINITY && (b->flags & BACKEND_F_QUIESCED)))
		return NULL;
	*backend_id = id;
	event(EV_AFFINITY_HIT);
	return b;
}

/* sticky_pick returns the server of the client's usable affinity record,
 * or -1 with *hash set to the Maglev hash of the client's subnet. A call
 * of its own: its keys would not fit the callers' stack frames (and only
 * affinity services pay for it). */
static __noinline int sticky_pick(const struct vip_meta *vm, const struct dlb_config *cfg, const struct flow_key *fk,
				  __u64 now, __u32 *hash)
{
	struct affinity_key ak = {};
	__u32 id;

	affinity_key_of(&ak, vm, fk, fk->family);
	if (affinity_pick(vm, &ak, now, &id))
		return id;
	*hash = affinity_hash(&ak, cfg->hash_seed);
	return -1;
}

/* pick_id chooses the server of a new connection: the client's affinity
 * record, else the Maglev slot of the masked client (affinity services) or
 * of the flow hash. It returns the backend id, or -1 when the service has
 * no server taking connections. */
static __always_inline int pick_id(const struct vip_meta *vm, const struct dlb_config *cfg, const struct flow_key *fk,
				   __u32 hash, __u64 now)
{
	__u32 id;

	if (sticky(vm)) {
		int sid = sticky_pick(vm, cfg, fk, now, &hash);
		if (sid >= 0)
			return sid;
	}
	if (!pick(vm, cfg, hash, &id))
		return -1;
	return id;
}

/* dlb_pick is pick_id as a global function, for the NAT slow paths: the
 * verifier checks it once, not at each of its callers (it returns an id,
 * not a pointer, for that reason). The MAC path inlines pick_id instead,
 * saving the call (8-10 ns measured here, return-thunk mitigations
 * included). */
__noinline int dlb_pick(const struct vip_meta *vm, const struct dlb_config *cfg, const struct flow_key *fk, __u32 hash,
			__u64 now)
{
	if (!vm || !cfg || !fk) /* arguments of a global function may be NULL */
		return -1;
	return pick_id(vm, cfg, fk, hash, now);
}

/* pick_new returns the backend pick_id (inline) or dlb_pick (a call)
 * chooses. */
static __always_inline struct backend *pick_new_how(const struct vip_meta *vm, const struct dlb_config *cfg,
						    const struct flow_key *fk, __u32 hash, __u64 now, int inlined,
						    __u32 *backend_id)
{
	int id = inlined ? pick_id(vm, cfg, fk, hash, now) : dlb_pick(vm, cfg, fk, hash, now);
	if (id < 0)
		return NULL;
	*backend_id = id;
	return bpf_map_lookup_elem(&backends, backend_id);
}

/* pick_new is the NAT paths' pick (a call). */
static __always_inline struct backend *pick_new(const struct vip_meta *vm, const struct dlb_config *cfg,
						const struct flow_key *fk, __u32 hash, __u64 now, int family,
						__u32 *backend_id)
{
	return pick_new_how(vm, cfg, fk, hash, now, 0, backend_id);
}

/* pick_mac is the MAC path's pick (inlined). */
static __always_inline struct backend *pick_mac(const struct vip_meta *vm, const struct dlb_config *cfg,
						const struct flow_key *fk, __u32 hash, __u64 now, __u32 *backend_id)
{
	return pick_new_how(vm, cfg, fk, hash, now, 1, backend_id);
}

/* affinity_write writes (or refreshes) the client's record of a
 * connection to backend_id (address server) of an affinity service. A call
 * of its own, like sticky_pick. */
static __noinline void affinity_write(const struct vip_meta *vm, const struct flow_key *fk, const struct dlb_ip *server,
				      __u32 backend_id, __u64 now)
{
	struct affinity_key ak = {};

	affinity_key_of(&ak, vm, fk, fk->family);
	struct affinity_record *rec = bpf_map_lookup_elem(&affinity, &ak);
	if (rec && rec->backend == backend_id && rec->service == vm->service) {
		rec->last_seen = now;
		return;
	}
	struct affinity_record v = { .last_seen = now, .backend = backend_id, .service = vm->service };
	ip_copy(&v.server, server);
	bpf_map_update_elem(&affinity, &ak, &v, BPF_ANY);
	event(EV_AFFINITY_WRITTEN);
}

/* affinity_record writes (or refreshes) the client's record when a
 * connection to b is established. */
static __always_inline void affinity_record(const struct vip_meta *vm, const struct flow_key *fk,
					    const struct backend *b, __u32 backend_id, __u64 now, int family)
{
	if (sticky(vm))
		affinity_write(vm, fk, &b->addr, backend_id, now);
}

/* affinity_refresh refreshes the client's record of backend_id. */
static __noinline void affinity_refresh(const struct vip_meta *vm, const struct flow_key *fk, __u32 backend_id, __u64 now)
{
	struct affinity_key ak = {};

	affinity_key_of(&ak, vm, fk, fk->family);
	struct affinity_record *rec = bpf_map_lookup_elem(&affinity, &ak);
	if (rec && rec->backend == backend_id && rec->service == vm->service)
		rec->last_seen = now;
}

/* affinity_touch refreshes the client's record when one of its
 * connections to backend_id closes: stickytime counts from there. */
static __always_inline void affinity_touch(const struct vip_meta *vm, const struct flow_key *fk, __u32 backend_id,
					   __u64 now, int family)
{
	if (sticky(vm))
		affinity_refresh(vm, fk, backend_id, now);
}

/* handshake_seen is the clock now as struct handshake's seen. */
static __always_inline __u32 handshake_seen(__u64 now)
{
	__u32 s = now >> DLB_HANDSHAKE_SEEN_SHIFT;

	return s ? s : 1;
}

/* remember_handshake records which server a SYN went to. hash is the
 * flow's table hash (tab_hash_flow). */
static __always_inline void remember_handshake(__u32 hash, __u32 backend_id, __u32 service, __u64 now)
{
	__u32 slot = hash & (HANDSHAKE_SLOTS - 1);
	struct handshake *hs = bpf_map_lookup_elem(&handshakes, &slot);

	if (!hs)
		return;
	hs->check = hash ^ backend_id ^ service;
	hs->backend = backend_id;
	hs->service = service;
	hs->seen = handshake_seen(now);
}

/* handshake_backend returns the server the SYN of the flow with table hash
 * hash went to, if the handshake cache still holds it and that server is
 * still configured, and marks the handshake completed. */
static __always_inline struct backend *handshake_backend(__u32 hash, __u32 service, __u32 *backend_id)
{
	__u32 slot = hash & (HANDSHAKE_SLOTS - 1);
	struct handshake *hs = bpf_map_lookup_elem(&handshakes, &slot);

	if (!hs || hs->service != service)
		return NULL;
	__u32 id = hs->backend;
	if (hs->check != (hash ^ id ^ service))
		return NULL;
	struct backend *b = backend_ok(id, service);
	if (!b)
		return NULL;
	hs->seen = 0;
	*backend_id = id;
	return b;
}
