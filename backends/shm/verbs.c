/* SPDX-License-Identifier: MIT */
/*
 * shm verbs: applied inline at post time, in posting order, with CPU instructions on the shared
 * mapping. That gives RC ordering and FENCE for free. The core has already validated every
 * verb (node attached, key, bounds, alignment), so nothing here checks addresses again.
 */
#include <string.h>

#include "rshm.h"
#include "transport/cpuverbs.h"

/* Atomics stay out of line: a locked instruction dwarfs a call, and READ/WRITE stay small. */
static __attribute__((noinline)) void apply_atomic_verb(struct rshm_chan *c, struct rshm_node *nd,
							uint16_t node, const struct remora_wr *wr,
							char *p)
{
	uint64_t old;

	if (__builtin_expect(c->t->cfg.atomics != REMORA_ATOMICS_ARBITER, 1)) {
		old = rt_cpu_atomic((uint64_t *)(void *)p, wr);
	} else {
		old = rt_cpu_arbiter_atomic(&nd->hdr->arbiter, (uint64_t *)(void *)p, wr);
		remora_backend_count_emulated(c->ch, node, (enum remora_op)wr->op, 1);
	}
	if (wr->local)
		memcpy(wr->local, &old, sizeof(old));
}

static inline __attribute__((always_inline)) void apply(struct rshm_chan *c,
							 struct rshm_node *nd, uint16_t node,
							 const struct remora_wr *wr)
{
	char *p = nd->base + remora_gaddr_off(wr->raddr);

	if (wr->op == REMORA_OP_READ)
		rt_cpu_read(wr->local, p, wr->len);
	else if (wr->op == REMORA_OP_WRITE)
		rt_cpu_write(p, wr->local, wr->len);
	else
		apply_atomic_verb(c, nd, node, wr, p);
}

/*
 * The core validated wr against the region table of attach time. If the memory node has
 * registered or deregistered since, check against the live table too, as an RNIC checks an
 * rkey at the target: a deregistered key fails the verb, with no effect.
 */
static __attribute__((noinline)) int live_check(const struct rshm_node *nd,
						 const struct remora_wr *wr)
{
	return rt_regtab_check(&nd->hdr->regions, wr);
}

static inline __attribute__((always_inline)) void apply_run(struct rshm_chan *c,
							     struct rshm_node *nd, uint16_t node,
							     const struct remora_wr *wrs,
							     unsigned n, int32_t *status)
{
	if (__builtin_expect(rt_regtab_gen(&nd->hdr->regions) != nd->region_gen, 0)) {
		for (unsigned k = 0; k < n; k++) {
			status[k] = live_check(nd, &wrs[k]);
			if (status[k] == 0)
				apply(c, nd, node, &wrs[k]);
		}
		return;
	}
	/* Start every cache miss of the run at once: a batch then costs about one miss, not n. */
	if (n > 1)
		for (unsigned k = 0; k < n; k++)
			__builtin_prefetch(nd->base + remora_gaddr_off(wrs[k].raddr));
	for (unsigned k = 0; k < n; k++) {
		apply(c, nd, node, &wrs[k]);
		status[k] = 0;
	}
}

/*
 * Runs of consecutive verbs to one node are applied inside one fence handshake (backend.h):
 * a store, a load and a store per run (no locked instruction when membarrier is available);
 * nothing at all for callers that are not compute nodes.
 */
int rshm_post(void *cpriv, const struct remora_wr *wrs, unsigned n, int32_t *status,
	      unsigned pflags)
{
	struct rshm_chan *c = cpriv;
	struct rshm_tp *t = c->t;
	bool check = !(pflags & REMORA_POST_SKIP_FENCE_CHECK);
	unsigned i = 0;

	while (i < n) {
		uint16_t node = remora_gaddr_node(wrs[i].raddr);
		struct rshm_node *nd = &t->nodes[node];
		unsigned j = i + 1;

		while (j < n && remora_gaddr_node(wrs[j].raddr) == node)
			j++;
		if (!nd->slot || !check) {
			apply_run(c, nd, node, wrs + i, j - i, status + i);
		} else if (remora_fence_enter(nd->slot, c->lane, nd->asym, nd->epoch)) {
			apply_run(c, nd, node, wrs + i, j - i, status + i);
			remora_fence_exit(nd->slot, c->lane);
		} else {
			for (unsigned k = i; k < j; k++)
				status[k] = -REMORA_EFENCED;
		}
		i = j;
	}
	return 0;
}
