/* SPDX-License-Identifier: MIT */
/* shm backend internals: pool file layout, backend state. */
#ifndef REMORA_RSHM_H
#define REMORA_RSHM_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include <remora/backend.h>

#include "transport/mbox.h"
#include "transport/regtab.h"

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
	/* struct remora_fence_slot fence[REMORA_MAX_CN] at RSHM_FENCE_OFF */
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
_Static_assert(RSHM_FENCE_OFF + REMORA_MAX_CN * sizeof(struct remora_fence_slot) <= RSHM_HDR_BYTES,
	       "fence slots fit the header");
_Static_assert(RSHM_HDR_BYTES % 4096 == 0, "usable area page aligned");

static inline struct remora_fence_slot *rshm_fence_slot(struct rshm_hdr *h, unsigned cn)
{
	return (struct remora_fence_slot *)((char *)h + RSHM_FENCE_OFF) + cn;
}

/* ---- process-local state ------------------------------------------------------------------ */

struct rshm_node {
	char *base;                     /* usable bytes */
	struct rshm_hdr *hdr;
	void *map;
	size_t map_len;
	struct remora_fence_slot *slot; /* this CN's slot; NULL when not a compute node */
	uint64_t epoch;
	bool asym;                      /* lanes skip the CPU barrier (backend.h) */
	uint64_t region_gen;            /* hdr->regions.gen the attach-time region table matches */
	char locator[128];
};

struct rshm_tp {
	struct remora_transport *tp;
	struct remora_backend_cfg cfg;
	char cluster[64];
	char dir[PATH_MAX];
	struct rshm_node nodes[REMORA_MAX_MN];
	struct rt_mbox mbox; /* compute-node messages */
	uint32_t lanes;      /* fence lanes held by this process's channels */
};

struct rshm_pool {
	struct rshm_tp *t;
	struct rshm_hdr *hdr;
	void *map;
	size_t map_len;
	char path[PATH_MAX];
};

struct rshm_chan {
	struct rshm_tp *t;
	struct remora_chan *ch;
	int lane; /* fence lane, or -1: the shared counter */
};

/* pool.c */
int rshm_pool_path(const struct rshm_tp *t, unsigned node, char *buf, size_t size);
int rshm_map_file(int fd, size_t len, bool huge, void **map);
int rshm_pool_open(void *tpriv, const struct remora_pool_spec *spec, void **ppriv, void **base,
		   uint64_t *bytes);
void rshm_pool_close(void *ppriv, bool unlink);
int rshm_pool_reg(void *ppriv, uint64_t off, uint64_t len, uint32_t *key);
int rshm_pool_dereg(void *ppriv, uint32_t key);
int rshm_pool_fence(void *ppriv, uint16_t cn);
int rshm_pool_describe(void *ppriv, struct remora_node_desc *desc);
int rshm_attach(void *tpriv, const struct remora_node_desc *desc);
int rshm_detach(void *tpriv, uint16_t node);
int rshm_check_header(const struct rshm_hdr *h, size_t file_len);

/* verbs.c */
int rshm_post(void *cpriv, const struct remora_wr *wrs, unsigned n, int32_t *status,
	      unsigned pflags);

#endif
