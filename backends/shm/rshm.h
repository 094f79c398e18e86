/* SPDX-License-Identifier: MIT */
/* shm backend internals: pool file layout, backend state. */
#ifndef REMORA_RSHM_H
#define REMORA_RSHM_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include <remora/backend.h>

#include "backends/host/hostmem.h"

#define RSHM_DEFAULT_DIR "/dev/shm"

/* ---- pool file: header, then the usable bytes -------------------------------------------- */

#define RSHM_MAGIC UINT64_C(0x4c4f4f502d6d7272) /* "rrm-POOL" */
#define RSHM_LAYOUT 4                           /* 4: the region table of regtab.h */
#define RSHM_HDR_BYTES 36864u                   /* usable bytes start here (4 KiB aligned) */
#define RSHM_HUGE_BYTES (2u << 20)              /* ... or here with huge pages (2 MiB) */
#define RSHM_FENCE_OFF 1024u

enum rshm_hdr_flags {
	RSHM_HDR_HUGE = 1u << 0, /* usable area 2 MiB aligned; map it 2 MiB aligned too */
};

struct rshm_hdr {
	uint64_t magic;        /* written last at creation */
	uint32_t layout;       /* RSHM_LAYOUT */
	uint32_t hdr_bytes;    /* offset of the usable bytes in the file */
	uint64_t usable_bytes;
	uint16_t node;
	uint16_t _pad0;
	uint32_t flags;        /* enum rshm_hdr_flags */
	uint64_t _pad1[4];
	struct rt_regtab regions; /* shared with pmem: generation on its own line, then slots */
	uint64_t arbiter;      /* atomics=arbiter: pid of the holder, 0 when free (own line) */
	uint64_t _pad2[7];
	/* struct rt_host_fence_slot fence[REMORA_MAX_CN] at RSHM_FENCE_OFF */
};

_Static_assert(offsetof(struct rshm_hdr, layout) == 8, "pool header layout");
_Static_assert(offsetof(struct rshm_hdr, usable_bytes) == 16, "pool header layout");
_Static_assert(offsetof(struct rshm_hdr, node) == 24, "pool header layout");
_Static_assert(offsetof(struct rshm_hdr, flags) == 28, "pool header layout");
_Static_assert(offsetof(struct rshm_hdr, regions) == 64, "pool header layout");
_Static_assert(offsetof(struct rshm_hdr, arbiter) == 64 + sizeof(struct rt_regtab),
	       "pool header layout");
_Static_assert(offsetof(struct rshm_hdr, arbiter) % 64 == 0, "arbiter on its own line");
_Static_assert(sizeof(struct rshm_hdr) <= RSHM_FENCE_OFF, "pool header layout");
_Static_assert(RSHM_FENCE_OFF + REMORA_MAX_CN * sizeof(struct rt_host_fence_slot) <= RSHM_HDR_BYTES,
	       "fence slots fit the header");
_Static_assert(RSHM_HDR_BYTES % 4096 == 0, "usable area page aligned");

/* The REMORA_MAX_CN fence slots of a pool. */
static inline struct rt_host_fence_slot *rshm_fence(struct rshm_hdr *h)
{
	return (struct rt_host_fence_slot *)(void *)((char *)h + RSHM_FENCE_OFF);
}

/* ---- process-local state ------------------------------------------------------------------ */

/* A mapping of a whole pool file. */
struct rshm_map {
	void *addr; /* the header; NULL: not mapped */
	size_t len;
};

struct rshm_tp {
	struct rt_host_tp h;                 /* first: hostmem's ops take it */
	struct rshm_map maps[REMORA_MAX_MN]; /* of the nodes attached in h.nodes */
};

struct rshm_pool {
	struct rt_host_pool h; /* first: hostmem's ops take it */
	int fd;                /* holds the owner lock (rt_host_pool_lock) while open */
	struct rshm_hdr *hdr;
	struct rshm_map map;
};

_Static_assert(offsetof(struct rshm_tp, h) == 0, "hostmem state first");
_Static_assert(offsetof(struct rshm_pool, h) == 0, "hostmem state first");

static inline struct rshm_tp *rshm_tp_of(struct rt_host_tp *h)
{
	return (struct rshm_tp *)(void *)h;
}

/* pool.c */
int rshm_pool_open(void *tpriv, const struct remora_pool_spec *spec, void **ppriv, void **base,
		   uint64_t *bytes);
void rshm_pool_close(void *ppriv, bool unlink);
int rshm_attach(void *tpriv, const struct remora_node_desc *desc);
void rshm_unmap(struct rt_host_tp *h, uint16_t node);

#endif
