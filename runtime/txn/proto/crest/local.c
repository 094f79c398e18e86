/* SPDX-License-Identifier: MIT */
/*
 * CREST's record cache for localized execution: one per compute node, one entry per record
 * some coordinator of the node is using, freed when none is. An entry holds the remote cell
 * locks for every local writer at once, the record as read when they were taken (the base),
 * and the local versions, newest first. The protocol's steps that use it are in crest.c;
 * docs/crest.md ("Localized execution") gives the rules.
 *
 * The functions on entries take no lock: crest.c calls them holding the cache's lock, which
 * it lets go only where a coroutine may yield (crest.h, struct crest_cache).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include <remora/sched.h>

#include "crest.h"

#define CACHE_BUCKETS 1024u /* entries live are at most coordinators x objects per transaction */
#define LOCK_SPINS 16u       /* turns of a coroutine waiting for the lock before it gives the core away */

int crest_cache_create(struct crest_cache **out, bool shared)
{
	struct crest_cache *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->bucket = calloc(CACHE_BUCKETS, sizeof(*c->bucket));
	if (!c->bucket) {
		free(c);
		return -ENOMEM;
	}
	c->mask = CACHE_BUCKETS - 1;
	c->shared = shared;
	*out = c;
	return 0;
}

/* ---- the cache's lock ---------------------------------------------------------------------- */

/* The lock belongs to a coroutine, which may run its critical sections across the worker's
 * other coroutines; outside one, to the thread. */
static const void *lock_owner(void)
{
	static _Thread_local char thread_self;
	const void *co = remora_coro_self();

	return co ? co : &thread_self;
}

/*
 * Waiting for the lock yields within a coroutine: the holder may be another coroutine of
 * this thread. A wait that goes on gives the core away too: with more threads than cores
 * the holder may be a thread the kernel preempted, and spinning would only keep it off.
 */
static void lock_acquire(struct crest_cache *c, const void *me)
{
	bool in_coro = remora_coro_self() != NULL;
	const void *none = NULL;

	for (unsigned spins = 0;
	     __atomic_load_n(&c->owner, __ATOMIC_RELAXED) ||
	     !__atomic_compare_exchange_n(&c->owner, &none, me, false, __ATOMIC_ACQUIRE,
					  __ATOMIC_RELAXED);
	     spins++) {
		none = NULL; /* read before the CAS: waiters share the line, not take it */
		if (in_coro)
			remora_yield();
		if (!in_coro || spins >= LOCK_SPINS)
			sched_yield();
	}
}

void crest_cache_lock(struct crest_cache *c)
{
	const void *me;

	if (!c || !c->shared)
		return;
	me = lock_owner();
	if (__atomic_load_n(&c->owner, __ATOMIC_RELAXED) != me)
		lock_acquire(c, me);
	c->depth++;
}

/* Every release counts (crest_cache_wait reads the count). */
static void lock_release(struct crest_cache *c)
{
	__atomic_add_fetch(&c->releases, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&c->owner, NULL, __ATOMIC_RELEASE);
}

void crest_cache_unlock(struct crest_cache *c)
{
	if (!c || !c->shared)
		return;
	if (--c->depth == 0)
		lock_release(c);
}

uint32_t crest_cache_suspend(struct crest_cache *c)
{
	uint32_t depth;

	if (!c || !c->shared || __atomic_load_n(&c->owner, __ATOMIC_RELAXED) != lock_owner())
		return 0;
	depth = c->depth;
	c->depth = 0;
	lock_release(c);
	return depth;
}

/*
 * Whatever a wait waits for (a local lock, a version's outcome, a write-back) changes only
 * under the lock, so the waiter takes it back only once another holder has let it go since:
 * waiters that took it just to look would keep the one they wait for from getting it.
 */
void crest_cache_wait(struct crest_cache *c)
{
	uint32_t depth;
	uint64_t seen;

	if (!c || !c->shared) {
		remora_yield();
		return;
	}
	depth = crest_cache_suspend(c);
	seen = __atomic_load_n(&c->releases, __ATOMIC_RELAXED);
	for (unsigned spins = 0; __atomic_load_n(&c->releases, __ATOMIC_RELAXED) == seen;
	     spins++) {
		remora_yield();
		if (spins >= LOCK_SPINS)
			sched_yield();
	}
	crest_cache_resume(c, depth);
}

void crest_cache_resume(struct crest_cache *c, uint32_t depth)
{
	if (!depth)
		return;
	lock_acquire(c, lock_owner());
	c->depth = depth;
}

static void lver_free_list(struct crest_lver *v)
{
	while (v) {
		struct crest_lver *older = v->older;

		crest_lver_put(v);
		v = older;
	}
}

void crest_cache_destroy(struct crest_cache *c)
{
	if (!c)
		return;
	for (uint32_t b = 0; b <= c->mask; b++) {
		for (struct crest_lobj *lo = c->bucket[b], *next; lo; lo = next) {
			next = lo->next;
			lver_free_list(lo->newest);
			free(lo);
		}
	}
	free(c->bucket);
	free(c);
}

static uint32_t bucket_of(const struct crest_cache *c, uint32_t table, uint64_t key)
{
	uint64_t h = (key ^ (uint64_t)table << 56) * UINT64_C(0x9e3779b97f4a7c15);

	return (uint32_t)(h >> 40) & c->mask;
}

static struct crest_lobj *lobj_new(const struct txn_obj *o)
{
	uint32_t stride = o->t->geom.stride;
	struct crest_lobj *lo = calloc(1, sizeof(*lo) + 2u * stride);

	if (!lo)
		return NULL;
	lo->t = o->t;
	lo->table = o->table;
	lo->key = o->key;
	lo->off = o->off;
	lo->primary = o->primary;
	lo->base = (unsigned char *)(lo + 1);
	lo->wb = lo->base + stride;
	return lo;
}

struct crest_lobj *crest_lobj_get(struct crest_cache *c, const struct txn_obj *o, bool create)
{
	uint32_t b = bucket_of(c, o->table, o->key);
	struct crest_lobj *lo;

	for (lo = c->bucket[b]; lo; lo = lo->next)
		if (lo->table == o->table && lo->key == o->key && lo->off == o->off)
			break;
	if (!lo && create && (lo = lobj_new(o))) {
		lo->next = c->bucket[b];
		c->bucket[b] = lo;
		c->live++;
	}
	if (lo)
		lo->refs++;
	return lo;
}

/* Freed once nobody uses it and nothing of it is held or left to write back. */
void crest_lobj_put(struct crest_cache *c, struct crest_lobj *lo)
{
	struct crest_lobj **p;

	if (--lo->refs || lo->writers || lo->held || lo->newest || lo->applying || lo->lost)
		return;
	for (p = &c->bucket[bucket_of(c, lo->table, lo->key)]; *p != lo; p = &(*p)->next)
		;
	*p = lo->next;
	c->live--;
	free(lo);
}

uint64_t crest_lobj_cell(const struct crest_lobj *lo, unsigned c, void *val,
			 struct crest_lver **from)
{
	const struct codec_geom *g = &lo->t->geom;
	struct codec_rec r;

	for (struct crest_lver *v = lo->newest; v; v = v->older) {
		uint32_t off, len;

		if (!(v->cells >> c & 1) || v->state == CREST_V_ABORTED)
			continue;
		codec_cell_span(g->cells, g->value_size, c, &off, &len);
		if (val)
			memcpy((unsigned char *)val + off, v->val + off, len);
		*from = v;
		return v->ver[c];
	}
	*from = NULL;
	if (val)
		codec_cell_get(g, lo->base, c, val);
	/* the base of a held cell came with its lock from a READ that landed: whole */
	if (codec_cell.decode(g, lo->base, c, &r))
		return 0;
	return r.version;
}

struct crest_lver *crest_lver_new(struct crest_lobj *lo, uint64_t txid, uint64_t cells,
				  uint64_t ts_exec, const void *val, const uint64_t *ver)
{
	uint32_t vs = lo->t->geom.value_size;
	struct crest_lver *v = malloc(sizeof(*v) + vs);

	if (!v)
		return NULL;
	memset(v, 0, sizeof(*v));
	v->txid = txid;
	v->cells = cells;
	v->ts_exec = ts_exec;
	v->refs = 2; /* the list and the creator */
	v->state = CREST_V_PENDING;
	memcpy(v->ver, ver, sizeof(v->ver));
	memcpy(v->val, val, vs);
	v->older = lo->newest;
	lo->newest = v;
	return v;
}

void crest_lver_put(struct crest_lver *v)
{
	if (v && --v->refs == 0)
		free(v);
}

void crest_lobj_unlink(struct crest_lobj *lo, struct crest_lver *v)
{
	for (struct crest_lver **p = &lo->newest; *p; p = &(*p)->older) {
		if (*p == v) {
			*p = v->older;
			v->older = NULL;
			crest_lver_put(v);
			return;
		}
	}
}

uint64_t crest_lobj_wb_image(struct crest_lobj *lo)
{
	const struct codec_geom *g = &lo->t->geom;
	uint64_t done = 0;
	struct codec_cell_hdr h;

	memcpy(lo->wb, lo->base, g->stride);
	memcpy(&h, lo->wb, sizeof(h));
	h.lock = 0;
	for (struct crest_lver *v = lo->newest; v; v = v->older) {
		uint64_t cells = v->state == CREST_V_COMMITTED ? v->cells & ~done : 0;

		for (unsigned c = 0; c < g->nparts; c++) {
			if (!(cells >> c & 1))
				continue;
			h.en[c] = codec_cell_en(v->ver[c]);
			memcpy(lo->wb, &h, sizeof(h)); /* the cell's seal covers the header's key */
			codec_cell_put(g, lo->wb, c, v->val, v->ver[c]);
		}
		done |= cells;
	}
	memcpy(lo->wb, &h, sizeof(h));
	return done;
}

void crest_lobj_written_back(struct crest_lobj *lo)
{
	struct crest_lver *v = lo->newest;

	lo->newest = NULL;
	for (struct crest_lver *older; v; v = older) {
		older = v->older;
		v->older = NULL;
		if (v->state == CREST_V_COMMITTED)
			v->state = CREST_V_APPLIED;
		crest_lver_put(v);
	}
	lo->held = 0;
	lo->admitted = 0;
	lo->applying = false;
}
