/* SPDX-License-Identifier: MIT */
/*
 * The VT cache (vtcache.h). Written here rather than taken from a library: its entries are
 * variable-size CVT images invalidated by lock hash from the lock path, and each lookup must
 * cost one short critical section on the hot path of every locked READ.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vtcache.h"

static struct lotus_vt_set *set_of(const struct lotus_vt *v, uint64_t h)
{
	/* h's low bits pick the lock-table bucket; mix so that sets do not follow buckets */
	uint64_t z = h * 0x9e3779b97f4a7c15ull;

	return &v->sets[(z >> 32) & (v->nsets - 1)];
}

int lotus_vt_init(struct lotus_vt *v, uint64_t entries)
{
	uint64_t n = 1;

	memset(v, 0, sizeof(*v));
	if (!entries)
		return 0;
	while (n * LOTUS_VT_WAYS < entries)
		n <<= 1;
	v->sets = calloc(n, sizeof(*v->sets));
	if (!v->sets)
		return -ENOMEM;
	v->nsets = n;
	for (uint64_t i = 0; i < n; i++)
		pthread_spin_init(&v->sets[i].mu, PTHREAD_PROCESS_PRIVATE);
	return 0;
}

void lotus_vt_fini(struct lotus_vt *v)
{
	for (uint64_t i = 0; i < v->nsets; i++) {
		for (unsigned w = 0; w < LOTUS_VT_WAYS; w++)
			free(v->sets[i].e[w].img);
		pthread_spin_destroy(&v->sets[i].mu);
	}
	free(v->sets);
	memset(v, 0, sizeof(*v));
}

static struct lotus_vt_ent *find(struct lotus_vt_set *s, uint64_t h, uint32_t table,
				 uint64_t key)
{
	for (unsigned w = 0; w < LOTUS_VT_WAYS; w++)
		if (s->e[w].h == h && s->e[w].table == table && s->e[w].key == key)
			return &s->e[w];
	return NULL;
}

bool lotus_vt_get(struct lotus_vt *v, uint64_t h, uint32_t table, uint64_t key, uint64_t off,
		  void *img, uint32_t len)
{
	struct lotus_vt_set *s;
	struct lotus_vt_ent *e;
	bool hit = false;

	if (!v->sets || !h)
		return false;
	s = set_of(v, h);
	pthread_spin_lock(&s->mu);
	e = find(s, h, table, key);
	if (e && e->off == off && e->len == len) {
		memcpy(img, e->img, len);
		e->used = ++s->clock;
		hit = true;
	}
	pthread_spin_unlock(&s->mu);
	return hit;
}

/* The entry to overwrite: (table, key)'s own, else an empty one, else the least recent. */
static struct lotus_vt_ent *victim(struct lotus_vt_set *s, uint64_t h, uint32_t table,
				   uint64_t key)
{
	struct lotus_vt_ent *e = find(s, h, table, key);

	for (unsigned w = 0; !e && w < LOTUS_VT_WAYS; w++)
		if (!s->e[w].h)
			e = &s->e[w];
	if (e)
		return e;
	e = &s->e[0];
	for (unsigned w = 1; w < LOTUS_VT_WAYS; w++)
		if (s->e[w].used < e->used)
			e = &s->e[w];
	return e;
}

void lotus_vt_put(struct lotus_vt *v, uint64_t h, uint32_t table, uint64_t key, uint64_t off,
		  const void *img, uint32_t len)
{
	struct lotus_vt_set *s;
	struct lotus_vt_ent *e;

	if (!v->sets || !h)
		return;
	s = set_of(v, h);
	pthread_spin_lock(&s->mu);
	e = victim(s, h, table, key);
	/* Grows once per entry up to the largest stride it holds: rare, and short. */
	if (e->cap < len) {
		unsigned char *p = realloc(e->img, len);

		if (!p) { /* no room: drop the entry rather than keep a stale image */
			e->h = 0;
			pthread_spin_unlock(&s->mu);
			return;
		}
		e->img = p;
		e->cap = len;
	}
	memcpy(e->img, img, len);
	e->h = h, e->table = table, e->key = key, e->off = off, e->len = len;
	e->used = ++s->clock;
	pthread_spin_unlock(&s->mu);
}

void lotus_vt_drop(struct lotus_vt *v, uint64_t h)
{
	struct lotus_vt_set *s;

	if (!v->sets || !h)
		return;
	s = set_of(v, h);
	pthread_spin_lock(&s->mu);
	for (unsigned w = 0; w < LOTUS_VT_WAYS; w++)
		if (s->e[w].h == h)
			s->e[w].h = 0;
	pthread_spin_unlock(&s->mu);
}

void lotus_vt_drop_shard(struct lotus_vt *v, uint32_t shard, uint32_t nshards)
{
	for (uint64_t i = 0; v->sets && i < v->nsets; i++) {
		struct lotus_vt_set *s = &v->sets[i];

		pthread_spin_lock(&s->mu);
		for (unsigned w = 0; w < LOTUS_VT_WAYS; w++)
			if (s->e[w].h && s->e[w].key % nshards == shard)
				s->e[w].h = 0;
		pthread_spin_unlock(&s->mu);
	}
}
