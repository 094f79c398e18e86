/* SPDX-License-Identifier: MIT */
/*
 * LOTUS's VT cache (docs/lotus.md, "The VT cache"): whole CVT images of keys whose shard this
 * compute node owns, kept so that a transaction holding the key's lock here reads its CVT with
 * no memory-node verb. Coherence costs no message: every writer of a key holds its W lock at
 * the owner, a local writer puts its committed image, and the owner drops the entry when it
 * grants a W lock to another node's coordinator. An entry is read or filled only under a lock
 * on its key, so no writer runs meanwhile.
 *
 * Hash-partitioned: sets of LOTUS_VT_WAYS entries, least recently used out, one spinlock per
 * set (the compute node's worker threads share the cache). Prefix lotus_vt_.
 */
#ifndef REMORA_TXN_LOTUS_VTCACHE_H
#define REMORA_TXN_LOTUS_VTCACHE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define LOTUS_VT_WAYS 4u

struct lotus_vt_ent {
	uint64_t h, key, off; /* h: the lock hash of (table, key); 0: empty */
	uint64_t used;        /* the set's clock at the last use */
	uint32_t table, len, cap;
	unsigned char *img;
};

struct lotus_vt_set {
	pthread_spinlock_t mu;
	uint64_t clock;
	struct lotus_vt_ent e[LOTUS_VT_WAYS];
};

struct lotus_vt {
	struct lotus_vt_set *sets; /* NULL: no cache */
	uint64_t nsets;            /* a power of two */
};

/* A cache of at least `entries` CVTs (rounded up to whole sets); 0: none. 0 or -ENOMEM. */
int lotus_vt_init(struct lotus_vt *v, uint64_t entries);
void lotus_vt_fini(struct lotus_vt *v);
/* Copies the cached image of (table, key) at off into img (len bytes): true on a hit. */
bool lotus_vt_get(struct lotus_vt *v, uint64_t h, uint32_t table, uint64_t key, uint64_t off,
		  void *img, uint32_t len);
/* Caches img as the CVT of (table, key) at off (replacing its entry, else the set's LRU). */
void lotus_vt_put(struct lotus_vt *v, uint64_t h, uint32_t table, uint64_t key, uint64_t off,
		  const void *img, uint32_t len);
/* Drops every entry of lock hash h (a W lock granted to another compute node). */
void lotus_vt_drop(struct lotus_vt *v, uint64_t h);
/* Drops every entry of a key in shard `shard` (key mod nshards): the shard was handed over. */
void lotus_vt_drop_shard(struct lotus_vt *v, uint32_t shard, uint32_t nshards);

#endif
