/* SPDX-License-Identifier: MIT */
/*
 * pmem backend internals: the durable pool file layout, backend state, and the functions the
 * backend's files share. The only header of remora that includes <libpmem2.h>.
 */
#ifndef REMORA_RPMEM_H
#define REMORA_RPMEM_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpmem2.h>

#include <remora/backend.h>

#include "mutate/mutate.h"
#include "backends/host/hostmem.h"

/* /var/tmp survives reboots (unlike /dev/shm and often /tmp); real PMem: a DAX mount. */
#define RPMEM_DEFAULT_DIR "/var/tmp"

/*
 * ---- pool file ---------------------------------------------------------------------------
 *
 *     0      superblock: identity and sizes, written once at creation, CRC-protected
 *     256    durable state: clean-shutdown flag, open count
 *     4096   control area, volatile: re-initialized by every memory-node open
 *              4096  region table (struct rt_regtab)
 *              4352  arbiter lock word (atomics=arbiter), own cache line
 *              4416  boot id of the memory node's last open
 *     8192   fence slots, one struct rt_host_fence_slot per compute node
 *     65536  usable bytes: offset 0 of every global address of the node
 */
#define RPMEM_MAGIC UINT64_C(0x4d454d502d6d7272) /* "rrm-PMEM" */
#define RPMEM_LAYOUT 1
#define RPMEM_STATE_OFF 256u
#define RPMEM_CTL_OFF 4096u
#define RPMEM_FENCE_OFF 8192u
#define RPMEM_HDR_BYTES 65536u
#define RPMEM_CRC_BYTES 120u /* the superblock bytes the CRC covers */

struct rpmem_super {
	uint64_t magic;
	uint32_t layout;       /* RPMEM_LAYOUT */
	uint32_t hdr_bytes;    /* offset of the usable bytes in the file */
	uint64_t usable_bytes; /* remora_pool_bytes() */
	uint64_t file_bytes;   /* size the file was created with; shorter means truncated */
	uint16_t node;
	uint16_t _pad0;
	uint32_t flags;        /* none defined: must be 0 */
	uint64_t created_ns;   /* CLOCK_REALTIME at creation */
	uint8_t uuid[16];      /* random at creation: the pool's identity */
	uint8_t _reserved[56]; /* zero */
	uint32_t crc;          /* crc32 (zlib) of bytes [0, RPMEM_CRC_BYTES) */
	uint32_t _pad1;
};

struct rpmem_state {
	uint64_t clean; /* 1: the last memory node closed the pool and persisted it all */
	uint64_t opens; /* memory-node opens since creation */
	uint64_t _pad[6];
};

struct rpmem_ctl {
	struct rt_regtab regions;
	uint64_t arbiter; /* atomics=arbiter: pid of the holder, 0 when free */
	uint64_t _pad[7];
	char boot_id[64]; /* /proc/sys/kernel/random/boot_id at the memory node's open */
};

_Static_assert(offsetof(struct rpmem_super, layout) == 8, "pmem superblock layout");
_Static_assert(offsetof(struct rpmem_super, usable_bytes) == 16, "pmem superblock layout");
_Static_assert(offsetof(struct rpmem_super, file_bytes) == 24, "pmem superblock layout");
_Static_assert(offsetof(struct rpmem_super, node) == 32, "pmem superblock layout");
_Static_assert(offsetof(struct rpmem_super, created_ns) == 40, "pmem superblock layout");
_Static_assert(offsetof(struct rpmem_super, uuid) == 48, "pmem superblock layout");
_Static_assert(offsetof(struct rpmem_super, crc) == RPMEM_CRC_BYTES, "pmem superblock layout");
_Static_assert(sizeof(struct rpmem_super) == 128, "pmem superblock layout");
_Static_assert(sizeof(struct rpmem_state) == 64, "pmem state layout");
_Static_assert(offsetof(struct rpmem_ctl, arbiter) == 256, "pmem control layout");
_Static_assert(offsetof(struct rpmem_ctl, boot_id) == 320, "pmem control layout");
_Static_assert(sizeof(struct rpmem_ctl) <= RPMEM_FENCE_OFF - RPMEM_CTL_OFF, "pmem control layout");
_Static_assert(RPMEM_FENCE_OFF + REMORA_MAX_CN * sizeof(struct rt_host_fence_slot) <=
		       RPMEM_HDR_BYTES, "fence slots fit the header");
_Static_assert(RPMEM_HDR_BYTES % 4096 == 0, "usable area page aligned");

static inline struct rpmem_state *rpmem_state_of(void *map)
{
	return (struct rpmem_state *)((char *)map + RPMEM_STATE_OFF);
}

static inline struct rpmem_ctl *rpmem_ctl_of(void *map)
{
	return (struct rpmem_ctl *)((char *)map + RPMEM_CTL_OFF);
}

/* The REMORA_MAX_CN fence slots of a pool. */
static inline struct rt_host_fence_slot *rpmem_fence(void *map)
{
	return (struct rt_host_fence_slot *)(void *)((char *)map + RPMEM_FENCE_OFF);
}

/* ---- process-local state ------------------------------------------------------------------ */

/* One libpmem2 mapping of a whole pool file. */
struct rpmem_map {
	struct pmem2_map *map;
	char *addr;
	size_t len;
	pmem2_persist_fn persist;
	enum pmem2_granularity gran;
};

struct rpmem_tp {
	struct rt_host_tp h;                  /* first: hostmem's ops take it */
	struct rpmem_map maps[REMORA_MAX_MN]; /* of the nodes attached in h.nodes */
};

struct rpmem_pool {
	struct rt_host_pool h; /* first: hostmem's ops take it */
	struct rpmem_map m;
	int fd;                /* held open: its flock makes this process the pool's owner */
	bool unlink;           /* REMORA_POOL_UNLINK_ON_CLOSE */
	bool uncommitted;      /* REMORA_POOL_DEFER_COMMIT: header not written yet */
};

_Static_assert(offsetof(struct rpmem_tp, h) == 0, "hostmem state first");
_Static_assert(offsetof(struct rpmem_pool, h) == 0, "hostmem state first");

static inline struct rpmem_tp *rpmem_tp_of(struct rt_host_tp *h)
{
	return (struct rpmem_tp *)(void *)h;
}

/* Test-only negative controls (mutate.h; runtime/mutate, layer MUT_PMEM), process-wide. */
extern uint64_t rpmem_mutations;

/* pmem.c */
enum remora_persist_gran rpmem_gran(enum pmem2_granularity g);

/* pool.c */
int rpmem_pool_open(void *tpriv, const struct remora_pool_spec *spec, void **ppriv, void **base,
		    uint64_t *bytes);
void rpmem_pool_close(void *ppriv, bool unlink);
int rpmem_pool_persist(void *ppriv, uint64_t off, uint64_t len);
int rpmem_pool_commit(void *ppriv);
int rpmem_attach(void *tpriv, const struct remora_node_desc *desc);
void rpmem_unmap_node(struct rt_host_tp *h, uint16_t node);
/* Maps fd whole with libpmem2 (page granularity accepted). Returns 0 or a pmem2 error. */
int rpmem_map_fd(int fd, struct rpmem_map *m);
void rpmem_unmap(struct rpmem_map *m);

/* verbs.c */
int rpmem_post(void *cpriv, const struct remora_wr *wrs, unsigned n, int32_t *status,
	       unsigned pflags);
int rpmem_persist(void *cpriv, uint16_t node, uint64_t off, uint64_t len);

#endif
