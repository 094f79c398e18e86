/* SPDX-License-Identifier: MIT */
/*
 * shm verbs: applied inline at post time, in posting order, with CPU instructions on the shared
 * mapping. That gives RC ordering and FENCE for free. The core has already validated every
 * verb (node attached, key, bounds, alignment), so nothing here checks addresses again.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "rshm.h"

#define ATOMIC_OPS ((1u << REMORA_OP_CAS) | (1u << REMORA_OP_FAA) | (1u << REMORA_OP_MCAS))

/*
 * Copies of whole aligned 8-byte words go word by word with relaxed atomic accesses: each word
 * is single-copy atomic (as on an RDMA NIC, where protocols count on it for version words) and
 * the copy is race-free for sanitizers; the whole copy is not atomic, as the contract says.
 * Anything else is a plain memcpy.
 */
static inline void copy_in(void *dst, const char *src, uint32_t len)
{
	if (len == 8 && !((uintptr_t)src & 7)) { /* the common case: one word */
		uint64_t v = __atomic_load_n((const uint64_t *)(const void *)src, __ATOMIC_RELAXED);

		memcpy(dst, &v, 8);
		return;
	}
	if (((uintptr_t)src | len) & 7) {
		memcpy(dst, src, len);
		return;
	}
	if (((uintptr_t)dst & 7) == 0) {
		uint64_t *d = dst;
		const uint64_t *s = (const uint64_t *)(const void *)src;

		for (uint32_t i = 0; i < len / 8; i++)
			d[i] = __atomic_load_n(&s[i], __ATOMIC_RELAXED);
		return;
	}
	for (uint32_t i = 0; i < len / 8; i++) {
		uint64_t v = __atomic_load_n((const uint64_t *)(const void *)src + i,
					     __ATOMIC_RELAXED);

		memcpy((char *)dst + 8 * i, &v, 8);
	}
}

static inline void copy_out(char *dst, const void *src, uint32_t len)
{
	if (len == 8 && !((uintptr_t)dst & 7)) { /* the common case: one word */
		uint64_t v;

		memcpy(&v, src, 8);
		__atomic_store_n((uint64_t *)(void *)dst, v, __ATOMIC_RELAXED);
		return;
	}
	if (((uintptr_t)dst | len) & 7) {
		memcpy(dst, src, len);
		return;
	}
	for (uint32_t i = 0; i < len / 8; i++) {
		uint64_t v;

		memcpy(&v, (const char *)src + 8 * i, 8);
		__atomic_store_n((uint64_t *)(void *)dst + i, v, __ATOMIC_RELAXED);
	}
}

/* masked-CAS as a CAS loop on the word: one verb on the fabric, atomic against other atomics. */
static inline uint64_t mcas(uint64_t *p, const struct remora_wr *wr)
{
	uint64_t old = __atomic_load_n(p, __ATOMIC_SEQ_CST);

	for (;;) {
		uint64_t new;

		if ((old ^ wr->compare) & wr->compare_mask)
			return old;
		new = (old & ~wr->swap_mask) | (wr->swap & wr->swap_mask);
		if (__atomic_compare_exchange_n(p, &old, new, false, __ATOMIC_SEQ_CST,
						__ATOMIC_SEQ_CST))
			return old;
	}
}

/*
 * seq_cst: protocols build locks and version checks out of these verbs across processes;
 * on x86 every locked instruction is a full barrier anyway, so weaker orders buy nothing.
 */
static inline uint64_t apply_atomic(uint64_t *p, const struct remora_wr *wr)
{
	uint64_t old;

	switch (wr->op) {
	case REMORA_OP_CAS:
		old = wr->compare;
		__atomic_compare_exchange_n(p, &old, wr->swap, false, __ATOMIC_SEQ_CST,
					    __ATOMIC_SEQ_CST);
		return old;
	case REMORA_OP_FAA:
		return __atomic_fetch_add(p, wr->swap, __ATOMIC_SEQ_CST);
	default:
		return mcas(p, wr);
	}
}

/*
 * atomics=arbiter: a multi-host CXL pool has no coherent cross-host atomics, so every atomic
 * of a node goes through one lock word in its pool header and becomes a plain read-modify-write
 * under it. The lock holds the holder's pid so that a dead holder can be detected... and is
 * then taken over (its half-done write may be lost, as a crashed arbiter client's would).
 */
static uint64_t arbiter_atomic(struct rshm_node *nd, uint64_t *p, const struct remora_wr *wr)
{
	uint64_t me = (uint64_t)getpid(), cur = 0, old, new;
	unsigned spins = 0;

	while (!__atomic_compare_exchange_n(&nd->hdr->arbiter, &cur, me, false, __ATOMIC_ACQUIRE,
					    __ATOMIC_RELAXED)) {
		if (++spins % 65536 == 0 && kill((pid_t)cur, 0) < 0 && errno == ESRCH)
			__atomic_compare_exchange_n(&nd->hdr->arbiter, &cur, 0, false,
						    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
		rshm_cpu_relax();
		cur = 0;
	}
	old = __atomic_load_n(p, __ATOMIC_RELAXED);
	switch (wr->op) {
	case REMORA_OP_CAS:
		new = old == wr->compare ? wr->swap : old;
		break;
	case REMORA_OP_FAA:
		new = old + wr->swap;
		break;
	default:
		new = ((old ^ wr->compare) & wr->compare_mask) ? old :
			(old & ~wr->swap_mask) | (wr->swap & wr->swap_mask);
	}
	__atomic_store_n(p, new, __ATOMIC_RELAXED);
	__atomic_store_n(&nd->hdr->arbiter, 0, __ATOMIC_RELEASE);
	return old;
}

/* Atomics stay out of line: a locked instruction dwarfs a call, and READ/WRITE stay small. */
static __attribute__((noinline)) void apply_atomic_verb(struct rshm_chan *c, struct rshm_node *nd,
							uint16_t node, const struct remora_wr *wr,
							char *p)
{
	uint64_t old;

	if (__builtin_expect(c->t->cfg.atomics != REMORA_ATOMICS_ARBITER, 1)) {
		old = apply_atomic((uint64_t *)(void *)p, wr);
	} else {
		old = arbiter_atomic(nd, (uint64_t *)(void *)p, wr);
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
		copy_in(wr->local, p, wr->len);
	else if (wr->op == REMORA_OP_WRITE)
		copy_out(p, wr->local, wr->len);
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
	uint64_t off = remora_gaddr_off(wr->raddr);
	uint64_t len = wr->op == REMORA_OP_READ || wr->op == REMORA_OP_WRITE ? wr->len : 8;

	for (unsigned i = 0; i < REMORA_MAX_REGIONS; i++) {
		const struct rshm_region *r = &nd->hdr->regions[i];

		if (__atomic_load_n(&r->key, __ATOMIC_ACQUIRE) != wr->rkey)
			continue;
		if (off >= r->off && len <= r->len && off - r->off <= r->len - len)
			return 0;
		return -REMORA_EBOUNDS;
	}
	return -REMORA_EBADKEY;
}

static inline __attribute__((always_inline)) void apply_run(struct rshm_chan *c,
							     struct rshm_node *nd, uint16_t node,
							     const struct remora_wr *wrs,
							     unsigned n, int32_t *status)
{
	if (__builtin_expect(__atomic_load_n(&nd->hdr->region_gen, __ATOMIC_ACQUIRE) !=
				     nd->region_gen, 0)) {
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
