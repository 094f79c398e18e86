/* SPDX-License-Identifier: MIT */
/*
 * pmem verbs: applied inline at post time by the host-memory post loop (backends/host/hostmem.h),
 * on the compute node's libpmem2 mapping of the pool. A verb flagged REMORA_WR_DURABLE (WRITE,
 * and atomics too) is persisted with pmem2's persist function before post() returns, so before
 * its completion can be polled, and counted once.
 */
#include "rpmem.h"

/* One persist point: pmem2 flushes (DAX: cache-line flushes + fence; other files: msync). */
static inline void persist_point(struct rt_host_chan *c, uint16_t node, void *p, size_t len)
{
	uint64_t mut = __atomic_load_n(&rpmem_mutations, __ATOMIC_RELAXED);

	if (__builtin_expect(mut != 0, 0)) {
		if (mut_on(mut, MUT_SKIP_PERSIST))
			return;
		if (mut_on(mut, MUT_COUNT_WITHOUT_PERSIST)) {
			remora_backend_count_persist(c->ch, node);
			return;
		}
	}
	rpmem_tp_of(c->t)->maps[node].persist(p, len);
	remora_backend_count_persist(c->ch, node);
}

static __attribute__((noinline)) int post_runs(void *cpriv, const struct remora_wr *wrs,
					       unsigned n, int32_t *status, unsigned pflags)
{
	return rt_host_post_with(cpriv, wrs, n, status, pflags, persist_point);
}

int rpmem_post(void *cpriv, const struct remora_wr *wrs, unsigned n, int32_t *status,
	       unsigned pflags)
{
	return rt_host_post_split(cpriv, wrs, n, status, pflags, persist_point, post_runs);
}

/* Persists [off, off+len) of node through this compute node's mapping, fenced like a verb. */
int rpmem_persist(void *cpriv, uint16_t node, uint64_t off, uint64_t len)
{
	struct rt_host_chan *c = cpriv;
	struct rt_host_node *nd;

	if (node >= REMORA_MAX_MN || !c->t->nodes[node].base)
		return -REMORA_ENODE;
	nd = &c->t->nodes[node];
	if (off > nd->bytes || len > nd->bytes - off)
		return -REMORA_EBOUNDS;
	if (len == 0)
		return 0;
	if (nd->slot && !rt_host_fence_enter(nd->slot, c->lane, nd->asym, nd->epoch))
		return -REMORA_EFENCED;
	persist_point(c, node, nd->base + off, len);
	if (nd->slot)
		rt_host_fence_exit(nd->slot, c->lane);
	return 0;
}
