/* SPDX-License-Identifier: MIT */
/*
 * pmem verbs: applied inline at post time, in posting order, with CPU instructions on the
 * compute node's libpmem2 mapping of the pool (RC ordering and FENCE hold trivially). The core
 * has validated every verb. A verb flagged REMORA_WR_DURABLE (WRITE, and atomics too) is
 * persisted with pmem2's persist function before post() returns, so before its completion can
 * be polled, and counted once.
 */
#include <errno.h>
#include <string.h>

#include "rpmem.h"
#include "transport/cpuverbs.h"

/* One persist point: pmem2 flushes (DAX: cache-line flushes + fence; other files: msync). */
static inline void persist_point(struct rpmem_chan *c, struct rpmem_node *nd, uint16_t node,
				 const void *p, size_t len)
{
	unsigned mut = __atomic_load_n(&rpmem_mutations, __ATOMIC_RELAXED);

	if (__builtin_expect(mut != 0, 0)) {
		if (mut & RPMEM_MUT_SKIP_PERSIST)
			return;
		if (mut & RPMEM_MUT_COUNT_NO_PERSIST) {
			remora_backend_count_persist(c->ch, node);
			return;
		}
	}
	nd->m.persist(p, len);
	remora_backend_count_persist(c->ch, node);
}

static inline void apply(struct rpmem_chan *c, struct rpmem_node *nd, uint16_t node,
			 const struct remora_wr *wr)
{
	char *p = nd->base + remora_gaddr_off(wr->raddr);
	uint64_t old;

	switch (wr->op) {
	case REMORA_OP_READ:
		rt_cpu_read(wr->local, p, wr->len);
		return;
	case REMORA_OP_WRITE:
		rt_cpu_write(p, wr->local, wr->len);
		if ((wr->flags & REMORA_WR_DURABLE) && wr->len)
			persist_point(c, nd, node, p, wr->len);
		return;
	default:
		if (__builtin_expect(c->t->cfg.atomics != REMORA_ATOMICS_ARBITER, 1)) {
			old = rt_cpu_atomic((uint64_t *)(void *)p, wr);
		} else {
			old = rt_cpu_arbiter_atomic(&nd->ctl->arbiter, (uint64_t *)(void *)p, wr);
			remora_backend_count_emulated(c->ch, node, (enum remora_op)wr->op, 1);
		}
		if (wr->flags & REMORA_WR_DURABLE)
			persist_point(c, nd, node, p, 8);
		if (wr->local)
			memcpy(wr->local, &old, sizeof(old));
	}
}

/*
 * When the memory node registered or deregistered since this compute node attached, every
 * verb is also checked against the live region table, as an RNIC checks an rkey at the target.
 */
static void apply_run(struct rpmem_chan *c, struct rpmem_node *nd, uint16_t node,
		      const struct remora_wr *wrs, unsigned n, int32_t *status)
{
	if (__builtin_expect(rt_regtab_gen(&nd->ctl->regions) != nd->region_gen, 0)) {
		for (unsigned k = 0; k < n; k++) {
			status[k] = rt_regtab_check(&nd->ctl->regions, &wrs[k]);
			if (status[k] == 0)
				apply(c, nd, node, &wrs[k]);
		}
		return;
	}
	for (unsigned k = 0; k < n; k++) {
		apply(c, nd, node, &wrs[k]);
		status[k] = 0;
	}
}

/* Runs of consecutive verbs to one node are applied inside one fence handshake (backend.h). */
int rpmem_post(void *cpriv, const struct remora_wr *wrs, unsigned n, int32_t *status,
	       unsigned pflags)
{
	struct rpmem_chan *c = cpriv;
	struct rpmem_tp *t = c->t;
	bool check = !(pflags & REMORA_POST_SKIP_FENCE_CHECK);
	unsigned i = 0;

	while (i < n) {
		uint16_t node = remora_gaddr_node(wrs[i].raddr);
		struct rpmem_node *nd = &t->nodes[node];
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

/* Persists [off, off+len) of node through this compute node's mapping, fenced like a verb. */
int rpmem_persist(void *cpriv, uint16_t node, uint64_t off, uint64_t len)
{
	struct rpmem_chan *c = cpriv;
	struct rpmem_node *nd;

	if (node >= REMORA_MAX_MN || !c->t->nodes[node].m.map)
		return -REMORA_ENODE;
	nd = &c->t->nodes[node];
	if (off > nd->usable || len > nd->usable - off)
		return -REMORA_EBOUNDS;
	if (len == 0)
		return 0;
	if (nd->slot && !remora_fence_enter(nd->slot, c->lane, nd->asym, nd->epoch))
		return -REMORA_EFENCED;
	persist_point(c, nd, node, nd->base + off, len);
	if (nd->slot)
		remora_fence_exit(nd->slot, c->lane);
	return 0;
}
