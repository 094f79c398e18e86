/* SPDX-License-Identifier: MIT */
/* Region table in pool memory; see regtab.h. */
#include <stdbool.h>
#include <stdlib.h>
#include <sys/random.h>

#include "regtab.h"

static bool key_used(const struct rt_regtab *t, uint32_t k)
{
	for (unsigned i = 0; i < REMORA_MAX_REGIONS; i++)
		if (__atomic_load_n(&t->slot[i].key, __ATOMIC_RELAXED) == k)
			return true;
	return false;
}

static uint32_t fresh_key(const struct rt_regtab *t)
{
	uint32_t k;

	do {
		if (getrandom(&k, sizeof(k), 0) != (ssize_t)sizeof(k))
			k = (uint32_t)random();
	} while (k == 0 || k == RT_REGTAB_BUSY || key_used(t, k));
	return k;
}

/* A slot is claimed (0 -> BUSY) before it is filled, so two registering threads never share it. */
int rt_regtab_reg(struct rt_regtab *t, uint64_t off, uint64_t len, uint32_t *key)
{
	for (unsigned i = 0; i < REMORA_MAX_REGIONS; i++) {
		struct rt_regtab_slot *s = &t->slot[i];
		uint32_t free_key = 0;

		if (!__atomic_compare_exchange_n(&s->key, &free_key, RT_REGTAB_BUSY, false,
						 __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			continue;
		__atomic_store_n(&s->off, off, __ATOMIC_RELAXED);
		__atomic_store_n(&s->len, len, __ATOMIC_RELAXED);
		*key = fresh_key(t);
		__atomic_store_n(&s->key, *key, __ATOMIC_RELEASE);
		__atomic_fetch_add(&t->gen, 1, __ATOMIC_SEQ_CST);
		return 0;
	}
	return -REMORA_EFULL;
}

int rt_regtab_dereg(struct rt_regtab *t, uint32_t key)
{
	for (unsigned i = 0; key && key != RT_REGTAB_BUSY && i < REMORA_MAX_REGIONS; i++) {
		uint32_t k = key;

		if (__atomic_compare_exchange_n(&t->slot[i].key, &k, 0, false, __ATOMIC_RELEASE,
						__ATOMIC_RELAXED)) {
			__atomic_fetch_add(&t->gen, 1, __ATOMIC_SEQ_CST);
			return 0;
		}
	}
	return -REMORA_EBADKEY;
}

unsigned rt_regtab_describe(const struct rt_regtab *t, struct remora_region_desc *out)
{
	unsigned n = 0;

	for (unsigned i = 0; i < REMORA_MAX_REGIONS; i++) {
		const struct rt_regtab_slot *s = &t->slot[i];
		uint32_t key = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE);

		if (key == 0 || key == RT_REGTAB_BUSY)
			continue;
		out[n].off = __atomic_load_n(&s->off, __ATOMIC_RELAXED);
		out[n].len = __atomic_load_n(&s->len, __ATOMIC_RELAXED);
		out[n].key = key;
		out[n]._pad = 0;
		n++;
	}
	return n;
}

void rt_regtab_clear(struct rt_regtab *t)
{
	for (unsigned i = 0; i < REMORA_MAX_REGIONS; i++) {
		__atomic_store_n(&t->slot[i].off, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&t->slot[i].len, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&t->slot[i].key, 0, __ATOMIC_RELEASE);
	}
	__atomic_fetch_add(&t->gen, 1, __ATOMIC_SEQ_CST);
}

bool rt_regtab_matches(const struct rt_regtab *t, const struct remora_node_desc *desc)
{
	struct remora_region_desc live[REMORA_MAX_REGIONS];
	unsigned n = rt_regtab_describe(t, live);

	if (n != desc->nregions)
		return false;
	for (unsigned d = 0; d < n; d++) {
		bool found = false;

		for (unsigned i = 0; i < n && !found; i++)
			found = live[i].key == desc->regions[d].key &&
				live[i].off == desc->regions[d].off &&
				live[i].len == desc->regions[d].len;
		if (!found)
			return false;
	}
	return true;
}
