/* SPDX-License-Identifier: MIT */
/*
 * The common part of the backends whose memory nodes are plain memory of this host, mapped by
 * every process (shm, pmem): a core service, include it as "backends/host/hostmem.h".
 *
 * A backend's transport, pool and channel state start with the structs below, so that the
 * functions here serve directly as its ops (capabilities aside, which it wraps):
 *   transport  close, chan_open, chan_close, msg_send(_at), msg_recv(_at) (mbox.h), detach
 *   pool       pool_reg, pool_dereg, pool_describe (regtab.h), pool_fence (fence.h)
 *   compute    post: verbs applied with cpuverbs.h, runs of one node inside the fence handshake
 * What stays in the backend is how a pool is laid out, created, checked and mapped.
 */
#ifndef REMORA_BACKENDS_HOST_HOSTMEM_H
#define REMORA_BACKENDS_HOST_HOSTMEM_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <remora/backend.h>

#include "cpuverbs.h"
#include "mbox.h"
#include "regtab.h"
#include "fence.h"

#define RT_HOST_MAX_BATCH 256u
#define RT_HOST_MAX_OUTSTANDING 4096u
#define RT_HOST_MAX_INLINE 1024u /* every WRITE is copied at post, whatever its size */

/* A memory node as this process's compute node sees it once attached. */
struct rt_host_node {
	char *base;                     /* usable bytes; NULL: not attached */
	uint64_t bytes;                 /* usable bytes the node's pool holds */
	struct rt_regtab *regions;      /* the node's live region table, in pool memory */
	uint64_t *arbiter;              /* its atomics=arbiter lock word, in pool memory */
	struct rt_host_fence_slot *slot; /* this CN's fence slot; NULL when not a compute node */
	uint64_t epoch;                 /* the fence epoch this CN attached with */
	bool asym;                      /* lanes skip the CPU barrier (backend.h) */
	uint64_t region_gen;            /* regions->gen the attach-time table matches */
	char locator[128];
};

struct rt_host_tp;
/* Unmaps the pool of node, which this process attached (its rt_host_node is forgotten). */
typedef void rt_host_unmap_fn(struct rt_host_tp *t, uint16_t node);

/* First member of a backend's transport state. */
struct rt_host_tp {
	struct remora_transport *tp;
	struct remora_backend_cfg cfg; /* cluster and dir point to the copies below */
	char cluster[64];
	char dir[PATH_MAX];
	struct rt_mbox mbox;           /* compute-node messages */
	uint32_t lanes;                /* fence lanes held by this process's channels */
	rt_host_unmap_fn *unmap;       /* the backend's: releases its mapping of a node */
	struct rt_host_node nodes[REMORA_MAX_MN];
};

/* A channel (backends need nothing more). */
struct rt_host_chan {
	struct rt_host_tp *t;
	struct remora_chan *ch;
	int lane; /* fence lane, or -1: the shared counter */
};

/* First member of a backend's memory-node (pool) state; the backend fills it at pool_open. */
struct rt_host_pool {
	struct rt_host_tp *t;
	struct rt_regtab *regions;        /* in pool memory */
	struct rt_host_fence_slot *fence;  /* REMORA_MAX_CN slots, in pool memory */
	uint64_t bytes;                   /* usable bytes */
	uint16_t node;
	char path[PATH_MAX];              /* the pool file: the node's locator */
};

/*
 * Capabilities: every verb, messages, fencing, the limits above; flags adds backend flags
 * (REMORA_CAP_PERSIST), gran is its persistence granularity. atomics=native adds coherent
 * atomics; atomics=arbiter marks the atomics emulated (lock + read + write), not native.
 */
int rt_host_caps(const struct remora_backend_cfg *cfg, struct remora_caps *caps, uint32_t flags,
		 enum remora_persist_gran gran);
/*
 * Allocates size (>= sizeof(struct rt_host_tp)) zeroed bytes of backend state, fills in the
 * rt_host_tp they start with (dir: cfg->dir, else default_dir; the backend's unmap) and opens
 * the mailboxes.
 */
int rt_host_open(struct remora_transport *tp, const struct remora_backend_cfg *cfg,
		 const char *default_dir, size_t size, rt_host_unmap_fn *unmap, void **tpriv);
/* Detaches every attached node, closes the mailboxes, frees the state. */
void rt_host_close(void *tpriv);

int rt_host_chan_open(void *tpriv, struct remora_chan *ch, void **cpriv);
void rt_host_chan_close(void *cpriv);
int rt_host_msg_send(void *cpriv, uint16_t dst_cn, const void *buf, uint32_t len);
int rt_host_msg_recv(void *cpriv, uint16_t *src_cn, void *buf, uint32_t cap);
int rt_host_msg_send_at(void *cpriv, uint16_t dst_cn, const void *buf, uint32_t len,
			uint64_t deliver_at);
int rt_host_msg_recv_at(void *cpriv, uint16_t *src_cn, void *buf, uint32_t cap, uint64_t now);

/* "<dir>/remora-<cluster>-mn<node>". 0 or -ENAMETOOLONG. */
int rt_host_pool_path(const char *dir, const char *cluster, unsigned node, char *buf,
		      size_t size);
/*
 * The owner lock of a pool file: the memory node that serves it holds an exclusive flock on
 * it (it dies with the process, so a crashed node never blocks its restart). lock: 0, or
 * -EBUSY with one line naming the process that holds it. busy: the holder's pid (-1 when
 * /proc/locks does not say), 0 when nobody serves the file or it does not exist.
 */
int rt_host_pool_lock(struct remora_transport *tp, int fd, const char *path);
int rt_host_pool_busy(const char *path);
/* Before a cleanup removes anything: -EBUSY (remora_last_error() names it) while any pool of
 * the cluster in dir is served, else 0. */
int rt_host_cleanup_check(const char *dir, const char *cluster);
/* Pool ops on a struct starting with struct rt_host_pool; errors set the message. */
int rt_host_pool_reg(void *ppriv, uint64_t off, uint64_t len, uint32_t *key);
int rt_host_pool_dereg(void *ppriv, uint32_t key);
int rt_host_pool_fence(void *ppriv, uint16_t cn);
int rt_host_pool_describe(void *ppriv, struct remora_node_desc *desc);

/*
 * A backend's attach, first step. When desc->node is attached to the same locator already, its
 * region generation is refreshed and *fd = -1 (attach returns 0); when it is not attached, *fd
 * is the pool file desc->locator opened read-write. 0, or an error with the message set
 * (-EEXIST: attached to another locator).
 */
int rt_host_attach_open(struct rt_host_tp *t, const struct remora_node_desc *desc, int *fd);
/*
 * Last step, with the node's pool mapped: fills in t->nodes[desc->node] (fence: the node's
 * REMORA_MAX_CN fence slots) and joins this compute node's slot. 0, or an error with the
 * message set (the node stays detached and is unmapped).
 */
int rt_host_attach_node(struct rt_host_tp *t, const struct remora_node_desc *desc, char *base,
			uint64_t bytes, struct rt_regtab *regions, uint64_t *arbiter,
			struct rt_host_fence_slot *fence);
/* The detach op: forgets node and unmaps it; -REMORA_ENODE when it is not attached. */
int rt_host_detach(void *tpriv, uint16_t node);

/* ---- the post path (header-only so that it inlines into each backend's post) ------------- */

/*
 * Called after a verb flagged REMORA_WR_DURABLE took effect on len bytes at p of node (pmem's
 * persist point); NULL for backends without persistence.
 */
typedef void rt_host_durable_fn(struct rt_host_chan *c, uint16_t node, void *p, size_t len);

/*
 * One atomic verb (native, or through the node's arbiter, counted as emulated), its old value
 * written to wr->local. Out of line: a locked instruction dwarfs a call, and READ/WRITE stay
 * small.
 */
void rt_host_atomic(struct rt_host_chan *c, struct rt_host_node *nd, uint16_t node,
		    const struct remora_wr *wr, uint64_t *p);
/*
 * The core validated wr against the region table of attach time. If the memory node has
 * registered or deregistered since, wr is checked against the live table too, as an RNIC
 * checks an rkey at the target: a deregistered key fails the verb, with no effect. 0,
 * -REMORA_EBADKEY or -REMORA_EBOUNDS. Out of line: rare.
 */
int rt_host_live_check(const struct rt_host_node *nd, const struct remora_wr *wr);

static inline __attribute__((always_inline)) void rt_host_apply(struct rt_host_chan *c,
								 struct rt_host_node *nd,
								 uint16_t node,
								 const struct remora_wr *wr,
								 rt_host_durable_fn *durable)
{
	char *p = nd->base + remora_gaddr_off(wr->raddr);
	bool persist = durable && (wr->flags & REMORA_WR_DURABLE);

	if (wr->op == REMORA_OP_READ) {
		rt_cpu_read(wr->local, p, wr->len);
	} else if (wr->op == REMORA_OP_WRITE) {
		rt_cpu_write(p, wr->local, wr->len);
		if (persist && wr->len)
			durable(c, node, p, wr->len);
	} else {
		rt_host_atomic(c, nd, node, wr, (uint64_t *)(void *)p);
		if (persist)
			durable(c, node, p, 8);
	}
}

/*
 * Asks for the pool lines of wr at p (integer arithmetic: p may be unvalidated, and a
 * prefetch never faults), for prefetch and yield. A copy's last line too, and first: a READ
 * loads its last word first (cpuverbs.h), and a record of 72 bytes spans two lines, whose
 * second miss would come after the yield. (A run's own prefetch, rt_host_apply_run, asks for
 * the first line only: in cache it is pure cost, and there it is paid at every batch.)
 */
static inline __attribute__((always_inline)) void rt_host_prefetch_wr(uintptr_t p,
								     const struct remora_wr *wr)
{
	bool copy = wr->op == REMORA_OP_READ || wr->op == REMORA_OP_WRITE;
	uintptr_t last = p + (copy && wr->len ? wr->len - 1 : 0);

	if (wr->op == REMORA_OP_READ) {
		if ((last ^ p) >= 64)
			__builtin_prefetch((const void *)last, 0);
		__builtin_prefetch((const void *)p, 0);
	} else {
		if ((last ^ p) >= 64)
			__builtin_prefetch((const void *)last, 1);
		__builtin_prefetch((const void *)p, 1);
	}
}

static inline __attribute__((always_inline)) void rt_host_apply_run(struct rt_host_chan *c,
								     struct rt_host_node *nd,
								     uint16_t node,
								     const struct remora_wr *wrs,
								     unsigned n, int32_t *status,
								     rt_host_durable_fn *durable)
{
	if (__builtin_expect(rt_regtab_gen(nd->regions) != nd->region_gen, 0)) {
		for (unsigned k = 0; k < n; k++) {
			status[k] = rt_host_live_check(nd, &wrs[k]);
			if (status[k] == 0)
				rt_host_apply(c, nd, node, &wrs[k], durable);
		}
		return;
	}
	/* Start every cache miss of the run at once: a batch then costs about one miss, not n. */
	if (n > 1)
		for (unsigned k = 0; k < n; k++)
			__builtin_prefetch(nd->base + remora_gaddr_off(wrs[k].raddr));
	for (unsigned k = 0; k < n; k++) {
		rt_host_apply(c, nd, node, &wrs[k], durable);
		status[k] = 0;
	}
}

/* One verb, fence checked: what rt_host_post_with does for a batch of one. */
static inline __attribute__((always_inline)) int rt_host_post_one(struct rt_host_chan *c,
								   struct rt_host_node *nd,
								   const struct remora_wr *wr,
								   int32_t *status,
								   rt_host_durable_fn *durable)
{
	uint16_t node = remora_gaddr_node(wr->raddr);

	if (!nd->slot) {
		rt_host_apply_run(c, nd, node, wr, 1, status, durable);
	} else if (rt_host_fence_enter(nd->slot, c->lane, nd->asym, nd->epoch)) {
		rt_host_apply_run(c, nd, node, wr, 1, status, durable);
		rt_host_fence_exit(nd->slot, c->lane);
	} else {
		*status = -REMORA_EFENCED;
	}
	return 0;
}

/*
 * A backend's post: verbs applied inline, in posting order (RC ordering and FENCE hold
 * trivially); the core validated every one. Runs of consecutive verbs to one node are applied
 * inside one fence handshake (backend.h): a store, a load and a store per run (no locked
 * instruction when membarrier is available), nothing at all for callers that are not compute
 * nodes.
 */
static inline __attribute__((always_inline)) int rt_host_post_with(struct rt_host_chan *c,
								    const struct remora_wr *wrs,
								    unsigned n, int32_t *status,
								    unsigned pflags,
								    rt_host_durable_fn *durable)
{
	struct rt_host_tp *t = c->t;
	bool check = !(pflags & REMORA_POST_SKIP_FENCE_CHECK);
	unsigned i = 0;

	while (i < n) {
		uint16_t node = remora_gaddr_node(wrs[i].raddr);
		struct rt_host_node *nd = &t->nodes[node];
		unsigned j = i + 1;

		while (j < n && remora_gaddr_node(wrs[j].raddr) == node)
			j++;
		if (!nd->slot || !check) {
			rt_host_apply_run(c, nd, node, wrs + i, j - i, status + i, durable);
		} else if (rt_host_fence_enter(nd->slot, c->lane, nd->asym, nd->epoch)) {
			rt_host_apply_run(c, nd, node, wrs + i, j - i, status + i, durable);
			rt_host_fence_exit(nd->slot, c->lane);
		} else {
			for (unsigned k = i; k < j; k++)
				status[k] = -REMORA_EFENCED;
		}
		i = j;
	}
	return 0;
}

typedef int rt_host_post_fn(void *cpriv, const struct remora_wr *wrs, unsigned n,
			    int32_t *status, unsigned pflags);

/*
 * A backend's post op: a batch of one verb (the most common one) goes straight to its node;
 * longer ones, and fence-check-free posts, go to runs, the backend's out-of-line
 * rt_host_post_with. Split so that one verb does not pay the run search's frame and spills.
 */
static inline __attribute__((always_inline)) int rt_host_post_split(void *cpriv,
								     const struct remora_wr *wrs,
								     unsigned n, int32_t *status,
								     unsigned pflags,
								     rt_host_durable_fn *durable,
								     rt_host_post_fn *runs)
{
	struct rt_host_chan *c = cpriv;

	if (n == 1 && !(pflags & REMORA_POST_SKIP_FENCE_CHECK))
		return rt_host_post_one(c, &c->t->nodes[remora_gaddr_node(wrs[0].raddr)], wrs,
					status, durable);
	return runs(cpriv, wrs, n, status, pflags);
}

/* The post op of a backend without persistence (shm). */
int rt_host_post(void *cpriv, const struct remora_wr *wrs, unsigned n, int32_t *status,
		 unsigned pflags);
/* The prefetch op (backend.h): a prefetch of each verb's pool line; unknown nodes are skipped. */
void rt_host_prefetch(void *cpriv, const struct remora_wr *wrs, unsigned n);

#endif
