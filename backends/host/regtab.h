/* SPDX-License-Identifier: MIT */
/*
 * The region table of a memory node whose pool is shared memory (shm, pmem): a core service that
 * lives in pool memory, written by the memory node and read by it to describe the node. Include
 * it as "transport/regtab.h". Compute nodes never read it: the core checks every verb against the
 * copy of the regions it got from the node's descriptor (RDMA's rkey check, done in software).
 *
 * A key is random, non-zero and unique in the table, like an rkey: a key guessed from an older
 * registration of the same slot is refused once that region is deregistered.
 */
#ifndef REMORA_BACKENDS_HOST_REGTAB_H
#define REMORA_BACKENDS_HOST_REGTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <remora/transport.h>

struct rt_regtab_slot {
	uint64_t off;
	uint64_t len;
	uint32_t key; /* 0: free; RT_REGTAB_BUSY: being filled in */
	uint32_t _pad;
};

struct rt_regtab {
	uint64_t gen; /* bumped by every reg and dereg */
	uint64_t _pad[7];
	struct rt_regtab_slot slot[REMORA_MAX_REGIONS];
};

#define RT_REGTAB_BUSY UINT32_MAX

_Static_assert(sizeof(struct rt_regtab_slot) == 24, "region table layout");
_Static_assert(offsetof(struct rt_regtab, slot) == 64, "region table layout");
_Static_assert(sizeof(struct rt_regtab) == 64 + 24 * REMORA_MAX_REGIONS, "region table layout");

/* Registers [off, off+len) (the core checked the bounds). 0 with *key set, or -REMORA_EFULL. */
int rt_regtab_reg(struct rt_regtab *t, uint64_t off, uint64_t len, uint32_t *key);
/* 0, or -REMORA_EBADKEY when no region has that key. */
int rt_regtab_dereg(struct rt_regtab *t, uint32_t key);
/* Copies the registered regions to out[] (room for REMORA_MAX_REGIONS); returns how many. */
unsigned rt_regtab_describe(const struct rt_regtab *t, struct remora_region_desc *out);
/* Forgets every region (a memory node starting on an existing pool). */
void rt_regtab_clear(struct rt_regtab *t);
/* Whether the live table holds exactly desc's regions (same keys and bounds). */
bool rt_regtab_matches(const struct rt_regtab *t, const struct remora_node_desc *desc);

static inline uint64_t rt_regtab_gen(const struct rt_regtab *t)
{
	return __atomic_load_n(&t->gen, __ATOMIC_ACQUIRE);
}

/*
 * The rkey check at the target: wr against the live table, for a backend that sees the table
 * changed since the compute node attached (the core only knows the table of attach time).
 * 0, -REMORA_EBADKEY (key deregistered) or -REMORA_EBOUNDS (region re-registered smaller).
 */
static inline int rt_regtab_check(const struct rt_regtab *t, const struct remora_wr *wr)
{
	uint64_t off = remora_gaddr_off(wr->raddr);
	uint64_t len = wr->op == REMORA_OP_READ || wr->op == REMORA_OP_WRITE ? wr->len : 8;

	for (unsigned i = 0; i < REMORA_MAX_REGIONS; i++) {
		const struct rt_regtab_slot *s = &t->slot[i];

		uint64_t r_off, r_len;

		if (__atomic_load_n(&s->key, __ATOMIC_ACQUIRE) != wr->rkey)
			continue;
		/* relaxed: the memory node may be refilling a slot it just freed */
		r_off = __atomic_load_n(&s->off, __ATOMIC_RELAXED);
		r_len = __atomic_load_n(&s->len, __ATOMIC_RELAXED);
		if (off >= r_off && len <= r_len && off - r_off <= r_len - len)
			return 0;
		return -REMORA_EBOUNDS;
	}
	return -REMORA_EBADKEY;
}

#endif
