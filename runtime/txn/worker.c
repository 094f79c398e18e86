/* SPDX-License-Identifier: MIT */
/*
 * Workers (one per thread: channel, scheduler, coordinators), and the small services of the
 * generic layer: address cache, per-coordinator arena, error helpers.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <remora/sched.h>

#include "protocol.h"
#include "transport/direct.h"
#include "txn.h"

void (*txn_test_hook)(struct remora_tx *tx, const char *point);

/* ---- workers --------------------------------------------------------------------------- */

static void coord_fini(struct txn_coord *c)
{
	for (unsigned i = 0; i < TXN_SCRATCH__COUNT; i++)
		free(c->scratch[i]);
	txn_arena_fini(&c->arena);
	free(c->wrs);
	if (c->w)
		c->w->db->proto->coord_fini(c);
	free(c->priv);
	free(c->tx.objs);
	free(c->tx.priv);
}

static int coord_init(struct remora_worker *w, struct txn_coord *c, unsigned local)
{
	const struct remora_db *db = w->db;
	uint32_t in_cn = w->index * db->coords_per_worker + local;

	c->w = w;
	c->id = txn_db_coord_id(db, in_cn);
	c->log_slot = (uint32_t)db->cn_id * db->st.sb.coords_per_cn + in_cn;
	c->seq = db->seq_base;
	c->tx.c = c;
	if (!txn_wrs(c, 64))
		return -ENOMEM;
	if (db->proto->tx_priv_size) {
		c->tx.priv = calloc(1, db->proto->tx_priv_size);
		if (!c->tx.priv)
			return -ENOMEM;
	}
	if (db->proto->coord_priv_size) {
		c->priv = calloc(1, db->proto->coord_priv_size);
		if (!c->priv)
			return -ENOMEM;
	}
	return db->proto->coord_init(c);
}

REMORA_API int remora_worker_create(struct remora_db *db, unsigned index,
				    struct remora_worker **out)
{
	struct remora_worker *w;
	int rc;

	if (!db || index >= db->workers) {
		if (db)
			snprintf(db->errmsg, sizeof(db->errmsg),
				 "worker index %u: the db was opened with %u workers", index,
				 db->workers);
		return -EINVAL;
	}
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->db = db;
	w->index = index;
	w->ncoords = db->coords_per_worker;
	rc = remora_chan_open(db->st.tp, &w->ch);
	if (rc)
		goto err_free;
	rc = remora_sched_create(w->ch, 0, &w->sched);
	if (rc)
		goto err_chan;
	/* The dispatcher rides on the scheduler: replies wake parked coroutines, no polling. */
	if (db->rpc && (rc = remora_rpc_ep_open(db->rpc, index, w->ch, w->sched, &w->rpc)))
		goto err_sched;
	w->coords = calloc(w->ncoords, sizeof(*w->coords));
	if (!w->coords) {
		rc = -ENOMEM;
		goto err_rpc;
	}
	for (unsigned i = 0; i < w->ncoords; i++) {
		rc = coord_init(w, &w->coords[i], i);
		if (rc)
			goto err_coords;
	}
	rc = txn_route_worker_init(w);
	if (rc)
		goto err_coords;
	*out = w;
	return 0;

err_coords:
	for (unsigned i = 0; i < w->ncoords; i++)
		coord_fini(&w->coords[i]);
	free(w->coords);
err_rpc:
	remora_rpc_ep_close(w->rpc);
err_sched:
	remora_sched_destroy(w->sched);
err_chan:
	remora_chan_close(w->ch);
err_free:
	snprintf(db->errmsg, sizeof(db->errmsg), "worker %u: %s", index, remora_strerror(rc));
	free(w);
	return rc;
}

REMORA_API void remora_worker_destroy(struct remora_worker *w)
{
	if (!w)
		return;
	if (w->loader) {
		store_load_flush(w->loader);
		store_loader_destroy(w->loader);
	}
	for (unsigned i = 0; i < w->ncoords; i++) {
		struct txn_coord *c = &w->coords[i];

		if (c->tx.active)
			remora_tx_abort(&c->tx);
		txn_async_settle(c, true); /* before the waiters are freed */
		__atomic_fetch_add(&w->db->locks_unreleased,
				   (int64_t)(c->locks_won - c->locks_given - c->locks_left),
				   __ATOMIC_RELAXED);
	}
	if (w->rpc)
		w->db->proto->worker_drain(w);
	txn_route_worker_fini(w);
	for (unsigned i = 0; i < w->ncoords; i++)
		coord_fini(&w->coords[i]);
	free(w->coords);
	remora_rpc_ep_close(w->rpc);
	remora_sched_destroy(w->sched);
	/* Fire-and-forget verbs (unlocks) may still be in flight: let them land. */
	while (remora_chan_outstanding(w->ch))
		remora_chan_progress(w->ch);
	remora_chan_close(w->ch);
	free(w);
}

REMORA_API struct remora_sched *remora_worker_sched(struct remora_worker *w)
{
	return w->sched;
}

REMORA_API struct remora_chan *remora_worker_chan(struct remora_worker *w)
{
	return w->ch;
}

REMORA_API const char *remora_worker_errmsg(const struct remora_worker *w)
{
	return w->errmsg;
}

REMORA_API enum remora_abort_reason remora_worker_last_abort(const struct remora_worker *w)
{
	return w->last_abort;
}

REMORA_API int remora_worker_last_lock(const struct remora_worker *w, char *buf, size_t len)
{
	if (!w->last_lock)
		return -REMORA_ENOTFOUND;
	w->db->proto->describe_lock(w->db, w->last_lock, buf, len);
	return 0;
}

REMORA_API const char *remora_abort_reason_name(enum remora_abort_reason r)
{
	static const char *const names[REMORA_ABORT__COUNT] = {
		[REMORA_ABORT_NONE] = "none",
		[REMORA_ABORT_LOCKED] = "locked",
		[REMORA_ABORT_VALIDATION] = "validation",
		[REMORA_ABORT_USER] = "user",
		[REMORA_ABORT_NOT_FOUND] = "not_found",
	};

	return (unsigned)r < REMORA_ABORT__COUNT ? names[r] : "unknown";
}

struct remora_wr *txn_wrs(struct txn_coord *c, unsigned n)
{
	if (n > c->wcap) {
		unsigned cap = c->wcap ? c->wcap : 64;
		struct remora_wr *p;

		while (cap < n)
			cap *= 2;
		p = realloc(c->wrs, cap * sizeof(*p));
		if (!p)
			return NULL;
		c->wrs = p;
		c->wcap = cap;
	}
	return c->wrs;
}

void *txn_scratch(struct txn_coord *c, enum txn_scratch which, size_t bytes)
{
	if (bytes > c->scratch_cap[which]) {
		size_t cap = c->scratch_cap[which] ? c->scratch_cap[which] : 256;
		void *p;

		while (cap < bytes)
			cap *= 2;
		p = realloc(c->scratch[which], cap);
		if (!p)
			return NULL;
		c->scratch[which] = p;
		c->scratch_cap[which] = cap;
	}
	return c->scratch[which];
}

int txn_post_tracked(struct txn_coord *c, struct remora_wr *wrs, unsigned n)
{
	return store_post_nowait(c->w->ch, wrs, n, &c->async);
}

/* A verb refused because its memory node failed over: its locks went with the node. */
static bool failed_over(const struct remora_db *db, int rc)
{
	return rc == -REMORA_ENODE && rt_transport_down_mask(db->st.tp);
}

#define MNF_AWAIT_NS (2000u * 1000000u)

int txn_mnf_await(const struct remora_db *db, int rc)
{
	struct timespec t0, now;

	if (rc != -EIO || db->st.replicas < 2)
		return rc;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		/* a node taken out (the completion does not say which node failed: as for
		 * -REMORA_ENODE, failed_over, any taken-out node excuses it) */
		if (rt_transport_down_mask(db->st.tp))
			return -REMORA_ENODE;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((uint64_t)(now.tv_sec - t0.tv_sec) * 1000000000u + (uint64_t)now.tv_nsec -
			    (uint64_t)t0.tv_nsec >=
		    MNF_AWAIT_NS)
			return rc;
		if (remora_coro_self())
			remora_yield();
		else
			nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
	}
}

void txn_unlock_failed(struct txn_coord *c, int rc)
{
	rc = txn_mnf_await(c->w->db, rc);
	if (rc && rc != -REMORA_EABORT && !failed_over(c->w->db, rc) && !c->unlocks.status)
		c->unlocks.status = rc;
}

int txn_post_unlocks(struct remora_tx *tx, struct remora_wr *wrs, unsigned n)
{
	int rc = txn_post_tracked(tx->c, wrs, n);

	if (rc) {
		rc = txn_errf(tx, rc, "unlock: %s", remora_strerror(rc));
		txn_unlock_failed(tx->c, rc);
	}
	return rc;
}

/* Until every verb counted in w completed: polls c's channel, yielding inside a coroutine. */
static void waiter_drain(struct txn_coord *c, const struct remora_waiter *w)
{
	bool in_coro = remora_coro_self() != NULL;

	while (w->pending) {
		remora_chan_progress(c->w->ch);
		if (w->pending && in_coro)
			remora_yield();
	}
}

int txn_async_wait(struct txn_coord *c)
{
	int status;

	waiter_drain(c, &c->async);
	status = c->async.status;
	c->async.status = 0;
	return status;
}

/*
 * A fire-and-forget verb of c's last transaction failed: an unlock (of an abort or of a decided
 * commit) that may not have landed. Its lock would stay under a live coordinator id, which no
 * transaction ever steals and no recovery ever releases. So the compute node strands, as after
 * a commit that fails past its log: it ends without leaving the cluster, and the online
 * recovery of another node releases what it left. A failure among the tracked verbs (crest's
 * and oocc's unlocks go there, their sources live in the arena) stops it too.
 *
 * Only a memory node that failed over by the time of the check excuses a failure
 * (-REMORA_ENODE; on rdma the transport reports a verb that failed on a node taken out
 * so too). One that fails on rdma before the watchdog took its node out still strands.
 */
int txn_async_settle(struct txn_coord *c, bool drain)
{
	struct remora_db *db = c->w->db;
	int rc = txn_async_wait(c);

	txn_unlock_failed(c, rc);
	if (drain)
		waiter_drain(c, &c->unlocks);
	else if (c->unlocks.pending)
		remora_chan_progress(c->w->ch); /* no wait: what completed so far */
	if (c->unlocks.status == -EIO) /* on rdma: in flight to a node not taken out yet? */
		c->unlocks.status = txn_mnf_await(db, c->unlocks.status);
	if (failed_over(db, c->unlocks.status))
		c->unlocks.status = 0;
	rc = c->unlocks.status; /* kept: the coordinator stays stopped */
	if (!rc)
		return 0;
	snprintf(c->w->errmsg, sizeof(c->w->errmsg),
		 "coordinator %u stopped: a verb posted without waiting failed (an unlock, or "
		 "motor's GC horizon): %s; its locks are left to recovery", (unsigned)c->id,
		 remora_strerror(rc));
	__atomic_store_n(&db->stranded, true, __ATOMIC_RELAXED);
	return rc;
}

/* ---- errors and points ----------------------------------------------------------------- */

int txn_errf(struct remora_tx *tx, int code, const char *fmt, ...)
{
	struct remora_worker *w = tx->c->w;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(w->errmsg, sizeof(w->errmsg), fmt, ap);
	va_end(ap);
	/* a verb refused because its memory node failed over: retry on the new placement */
	if (failed_over(w->db, code))
		return -REMORA_EABORT;
	return code;
}

int txn_poison(struct remora_tx *tx, int rc, enum remora_abort_reason why)
{
	if (rc < 0 && !tx->poison) {
		tx->poison = rc;
		if (rc == -REMORA_EABORT)
			tx->c->w->last_abort = why;
	}
	return rc;
}

void txn_point_slow(struct remora_tx *tx, const char *point)
{
	remora_fault_point(point);
	if (txn_test_hook)
		txn_test_hook(tx, point);
}

/* ---- address cache --------------------------------------------------------------------- */

#define CACHE_WAYS 4u
#define CACHE_OFF_BITS 40u
#define CACHE_OFF_MASK ((UINT64_C(1) << CACHE_OFF_BITS) - 1)

#define CACHE_HUGE (UINT64_C(2) << 20)
#define CACHE_MAX_BYTES (UINT64_C(1) << 40)

static uint64_t cache_bytes(uint64_t sets)
{
	uint64_t bytes = sets * CACHE_WAYS * sizeof(uint64_t);

	return bytes < CACHE_HUGE ? bytes : (bytes + CACHE_HUGE - 1) & ~(CACHE_HUGE - 1);
}

/*
 * Zeroed memory for the cache, touched only as sets fill; from 2 MiB on, on huge pages where
 * the kernel gives them (THP in madvise mode gives them only when asked). The sets are read
 * at random: on 4 KiB pages a 4 MiB cache (100K keys) took a TLB miss on top of the cache
 * miss at most lookups.
 */
static uint64_t *cache_alloc(uint64_t bytes)
{
	void *p;

	if (bytes < CACHE_HUGE)
		return calloc(1, bytes);
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	madvise(p, bytes, MADV_HUGEPAGE); /* advice only */
	return p;
}

int txn_cache_init(struct txn_cache *c, uint64_t entries)
{
	uint64_t sets = 1;

	c->e = NULL;
	c->sets_mask = 0;
	if (entries == 0)
		return 0; /* disabled */
	while (sets * CACHE_WAYS < entries && sets * CACHE_WAYS * sizeof(*c->e) < CACHE_MAX_BYTES)
		sets <<= 1;
	if (sets * CACHE_WAYS < entries)
		return -ENOMEM; /* REMORA_ADDR_CACHE beyond any memory */
	c->e = cache_alloc(cache_bytes(sets));
	if (!c->e)
		return -ENOMEM;
	c->sets_mask = sets - 1;
	return 0;
}

void txn_cache_fini(struct txn_cache *c)
{
	uint64_t bytes = cache_bytes(c->sets_mask + 1);

	if (c->e && bytes >= CACHE_HUGE)
		munmap(c->e, bytes);
	else
		free(c->e);
	c->e = NULL;
}

static inline uint64_t *cache_set(const struct txn_cache *c, uint64_t hash)
{
	return c->e + ((hash >> 20) & c->sets_mask) * CACHE_WAYS;
}

static inline uint64_t cache_tag(uint64_t hash)
{
	return hash >> CACHE_OFF_BITS;
}

uint64_t txn_cache_get(const struct txn_cache *c, uint64_t hash)
{
	uint64_t *set;

	if (!c->e)
		return 0;
	set = cache_set(c, hash);
	for (unsigned i = 0; i < CACHE_WAYS; i++) {
		uint64_t e = __atomic_load_n(&set[i], __ATOMIC_RELAXED);

		if (e && (e >> CACHE_OFF_BITS) == cache_tag(hash))
			return (e & CACHE_OFF_MASK) << 3;
	}
	return 0;
}

void txn_cache_prefetch(const struct txn_cache *c, uint64_t hash)
{
	if (c->e)
		__builtin_prefetch(cache_set(c, hash));
}

/* Racing writers may overwrite each other's entries: the cache is a hint, checked by key. */
void txn_cache_put(struct txn_cache *c, uint64_t hash, uint64_t off)
{
	uint64_t e = cache_tag(hash) << CACHE_OFF_BITS | ((off >> 3) & CACHE_OFF_MASK);
	uint64_t *set;
	unsigned victim;

	if (!c->e || (off >> 3) > CACHE_OFF_MASK)
		return;
	set = cache_set(c, hash);
	victim = (unsigned)(hash >> 8) % CACHE_WAYS;
	for (unsigned i = 0; i < CACHE_WAYS; i++) {
		uint64_t cur = __atomic_load_n(&set[i], __ATOMIC_RELAXED);

		if (cur == e)
			return;
		if (cur == 0) {
			victim = i;
			break;
		}
	}
	__atomic_store_n(&set[victim], e, __ATOMIC_RELAXED);
}

void txn_cache_drop(struct txn_cache *c, uint64_t hash, uint64_t off)
{
	uint64_t e = cache_tag(hash) << CACHE_OFF_BITS | ((off >> 3) & CACHE_OFF_MASK);
	uint64_t *set;

	if (!c->e)
		return;
	set = cache_set(c, hash);
	for (unsigned i = 0; i < CACHE_WAYS; i++) {
		uint64_t cur = e;

		__atomic_compare_exchange_n(&set[i], &cur, 0, false, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED);
	}
}

/* ---- arena ----------------------------------------------------------------------------- */

#define ARENA_BLOCK (64u * 1024)

struct txn_arena_blk {
	struct txn_arena_blk *next;
	size_t size, used;
	_Alignas(64) unsigned char data[];
};

void *txn_arena_alloc(struct txn_arena *a, size_t bytes)
{
	struct txn_arena_blk *b = a->cur;

	bytes = (bytes + 63) & ~(size_t)63;
	while (b && b->used + bytes > b->size) {
		b = b->next;
		if (b)
			b->used = 0;
	}
	if (!b) {
		size_t size = bytes > ARENA_BLOCK ? bytes : ARENA_BLOCK;

		b = aligned_alloc(64, (sizeof(*b) + size + 63) & ~(size_t)63);
		if (!b)
			return NULL;
		b->size = size;
		b->used = 0;
		b->next = NULL;
		if (a->cur) {
			b->next = a->cur->next;
			a->cur->next = b;
		} else {
			a->head = b;
		}
	}
	a->cur = b;
	b->used += bytes;
	return b->data + b->used - bytes;
}

void txn_arena_reset(struct txn_arena *a)
{
	a->cur = a->head;
	if (a->head)
		a->head->used = 0;
}

void txn_arena_fini(struct txn_arena *a)
{
	struct txn_arena_blk *b = a->head;

	while (b) {
		struct txn_arena_blk *n = b->next;

		free(b);
		b = n;
	}
	a->head = a->cur = NULL;
}
