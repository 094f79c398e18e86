/* SPDX-License-Identifier: MIT */
/*
 * CREST over cell records (store/codec_cell.c). Verbs with cached addresses and no conflict
 * (docs/crest.md, "Verbs"):
 *
 *   execution   read-only record: 1 READ of the record.
 *               read-write record: 1 masked-CAS on the lock bitmap taking exactly the cells
 *               written, + 1 READ of the record, one doorbell (the channel keeps their order).
 *   validation  1 READ of the 64-byte header per record with a cell read but not locked: no
 *               read cell locked by another transaction, every read cell's epoch unchanged.
 *   commit      log WRITE {tx id, commit timestamp, written cells, dependencies} to f+1 log
 *               servers, durable, acknowledged; then per written record and replica the
 *               written cells (value + version), then their epochs in the header, then on the
 *               primary the masked-CAS that clears exactly our lock bits: one ordered doorbell.
 *
 * Lock failure is no-wait (abort). Aborts clear our bits with masked-CAS, tracked.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crest.h"
#include "txn/batch.h"

#include <remora/sched.h>

#define CREST_TORN_RETRIES 16u
#define CREST_ROUNDS_MAX 64u
#define CREST_INSERT_ATTEMPTS 8u
#define CREST_UNLOCK_CHUNK 16u /* unlocks posted at once when locks go back */

uint64_t crest_clock_skew_us;
uint64_t crest_en_wrap_us = CREST_EN_WRAP_US;

static inline struct crest_obj *OB(const struct txn_obj *o)
{
	return o->priv;
}

static inline struct crest_tx *ctx(const struct remora_tx *tx)
{
	return tx->priv;
}

static inline struct crest_db *cdb(const struct remora_tx *tx)
{
	return txn_db(tx)->proto_priv;
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u + crest_clock_skew_us;
}

/* Lock bits of o's record this transaction counts as its own: the ones it took alone, or its
 * worker's hold on a cached record (its own are then always 0). */
static uint64_t held_bits(const struct txn_obj *o)
{
	return OB(o)->locked | (OB(o)->lo ? OB(o)->lo->held : 0);
}

/*
 * The lock bits validation may count as its own: as held_bits, but not a hold whose
 * write-back is out (its unlock may have landed, and another node may have locked and written
 * since), nor one left to recovery.
 */
static bool hold_valid(const struct remora_tx *tx, const struct crest_lobj *lo)
{
	return lo && !lo->lost && (!lo->applying || txb_mut(tx, MUT_CREST_TRUST_APPLYING));
}

static uint64_t valid_bits(const struct remora_tx *tx, const struct txn_obj *o)
{
	return OB(o)->locked | (hold_valid(tx, OB(o)->lo) ? OB(o)->lo->held : 0);
}

static uint64_t all_cells(const struct txn_obj *o)
{
	return codec_all_cells(o->t->geom.cells);
}

/* Cells o writes: those asked for, or every cell at record level. */
static uint64_t wr_cells(const struct remora_tx *tx, const struct txn_obj *o)
{
	if (!(o->flags & OBJ_WANT_RW))
		return 0;
	return cdb(tx)->cell_level ? o->wr_cells & all_cells(o) : all_cells(o);
}

/* Cells o reads (written cells are read too: their old value is what the caller sees). */
static uint64_t rd_cells(const struct remora_tx *tx, const struct txn_obj *o)
{
	if (!cdb(tx)->cell_level)
		return all_cells(o);
	return (o->rd_cells | o->wr_cells) & all_cells(o);
}

static struct remora_wr wr_mcas(const struct store_db *st, uint16_t node, uint64_t off,
				uint64_t cmp, uint64_t cmask, uint64_t swap, uint64_t smask,
				uint64_t *old)
{
	return (struct remora_wr){ .raddr = remora_gaddr_make(node, off), .rkey = st->rkey[node],
				   .op = REMORA_OP_MCAS, .compare = cmp, .compare_mask = cmask,
				   .swap = swap, .swap_mask = smask, .local = old };
}

/* The masked-CAS taking bits: succeeds when none of them was set (old & bits == 0). */
static void post_lock(struct remora_tx *tx, struct txb *b, struct txn_obj *o, uint64_t bits)
{
	OB(o)->want = bits;
	OB(o)->mcas_old = bits; /* a refused verb must not read as a won lock */
	b->wrs[b->n++] = wr_mcas(&txn_db(tx)->st, o->primary, o->off + CODEC_CELL_LOCK_OFF, 0,
				 bits, bits, bits, &OB(o)->mcas_old);
	o->flags |= OBJ_CAS_SENT;
}

/* The masked-CAS clearing bits and only them (crest_unlock_all: every bit of the word). */
static void post_unlock_at(struct remora_tx *tx, struct txb *b, uint16_t node, uint64_t off,
			   uint64_t bits, uint64_t *old)
{
	uint64_t mask = txb_mut(tx, MUT_CREST_UNLOCK_ALL) ? UINT64_MAX : bits;

	b->wrs[b->n++] = wr_mcas(&txn_db(tx)->st, node, off + CODEC_CELL_LOCK_OFF, bits, bits, 0,
				 mask, old);
}

static void post_unlock(struct remora_tx *tx, struct txb *b, struct txn_obj *o, uint64_t bits)
{
	post_unlock_at(tx, b, o->primary, o->off, bits, &OB(o)->unlock_old);
}

/* ---- yield points under the compute node's cache lock (crest.h, struct crest_cache) ------- */

static struct crest_cache *cache_of(const struct remora_tx *tx)
{
	return ((const struct crest_coord *)tx->c->priv)->cache;
}

static int cx_exec(struct remora_tx *tx, struct txb *b, const char *what)
{
	uint32_t depth = crest_cache_suspend(cache_of(tx));
	int rc = txb_exec(tx, b, what);

	crest_cache_resume(cache_of(tx), depth);
	return rc;
}

static int cx_post_unlocks(struct remora_tx *tx, struct remora_wr *wrs, unsigned n)
{
	uint32_t depth = crest_cache_suspend(cache_of(tx));
	int rc = txn_post_unlocks(tx, wrs, n);

	crest_cache_resume(cache_of(tx), depth);
	return rc;
}

static void cx_yield(struct remora_tx *tx)
{
	crest_cache_wait(cache_of(tx));
}

/* A release that failed: the engine may wait there for a memory node's failover. */
static void cx_unlock_failed(struct remora_tx *tx, int rc)
{
	uint32_t depth = crest_cache_suspend(cache_of(tx));

	txn_unlock_failed(tx->c, rc);
	crest_cache_resume(cache_of(tx), depth);
}

/* Crash points: a test's hook may wait there for another worker. */
static void cx_point(struct remora_tx *tx, const char *point)
{
	uint32_t depth;

	if (!__atomic_load_n(&txn_test_hook, __ATOMIC_RELAXED)) {
		txn_point(tx, point);
		return;
	}
	depth = crest_cache_suspend(cache_of(tx));
	txn_point(tx, point);
	crest_cache_resume(cache_of(tx), depth);
}

/* ---- releasing --------------------------------------------------------------------------- */

static void local_release(struct remora_tx *tx, struct txn_obj *o);
static void deps_put(struct remora_tx *tx);

/*
 * Every lock bit still held goes back (tracked: the results land in the objects). The unlocks
 * go out in chunks from the stack, so running out of memory (the path that often brings us
 * here) never leaves a lock behind.
 */
static void release_at(struct remora_tx *tx, const char *point)
{
	struct remora_wr wrs[CREST_UNLOCK_CHUNK];
	struct txb b = { .wrs = wrs, .cap = CREST_UNLOCK_CHUNK };
	int rc = 0, prc;

	if (point)
		cx_point(tx, point);
	for (unsigned i = 0; i < tx->nobj; i++)
		if (OB(tx->objs[i]))
			local_release(tx, tx->objs[i]);
	deps_put(tx);
	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];

		if (OB(o) && OB(o)->locked)
			post_unlock(tx, &b, o, OB(o)->locked);
		if (OB(o))
			OB(o)->locked = 0;
		o->flags &= ~(OBJ_LOCKED | OBJ_CAS_SENT);
		if (b.n == b.cap || (b.n && i + 1 == tx->nobj)) {
			prc = cx_post_unlocks(tx, b.wrs, b.n);
			rc = rc ? rc : prc;
			b.n = 0;
		}
	}
}

static int abort_with(struct remora_tx *tx, enum remora_abort_reason why)
{
	release_at(tx, "txn.abort_unlock");
	return txn_poison(tx, -REMORA_EABORT, why);
}

static int fail(struct remora_tx *tx, int rc)
{
	release_at(tx, "txn.abort_unlock");
	return txn_poison(tx, rc, REMORA_ABORT_NONE);
}

/* A commit that failed after its log landed: locks and log stay for recovery. */
static int strand(struct remora_tx *tx, int rc)
{
	if (txb_mut(tx, MUT_UNLOCK_AFTER_LOG))
		return fail(tx, rc);
	((struct crest_coord *)tx->c->priv)->stranded = rc;
	for (unsigned i = 0; i < tx->nobj; i++) {
		tx->objs[i]->flags &= ~(OBJ_LOCKED | OBJ_CAS_SENT);
		OB(tx->objs[i])->locked = 0;
		local_release(tx, tx->objs[i]); /* a committed version stays, unwritten */
	}
	deps_put(tx);
	return txn_poison(tx, rc, REMORA_ABORT_NONE);
}

/* ---- localized execution (docs/crest.md, "Localized execution") ------------------------- */

static void write_runs(struct remora_tx *tx, struct txb *b, uint16_t node,
		       const struct store_table *t, uint64_t rec, const unsigned char *img,
		       uint64_t mask, bool epochs);

static struct crest_coord *coord_of(const struct remora_tx *tx)
{
	return tx->c->priv;
}

/* Whether o goes through its worker's record cache. */
static bool is_local(const struct remora_tx *tx, const struct txn_obj *o)
{
	return cdb(tx)->localized && !OB(o)->alone;
}

/*
 * Waiting for another transaction of the worker means yielding to it; outside a coroutine
 * nothing else of the worker runs, so the caller aborts (or fails) instead.
 */
static bool may_wait(void)
{
	return remora_coro_self() != NULL;
}

static void deps_put(struct remora_tx *tx)
{
	struct crest_tx *t = ctx(tx);

	for (unsigned i = 0; i < t->ndeps; i++)
		crest_lver_put(t->deps[i]);
	t->ndeps = 0;
}

/* This transaction read v before v's writer committed: it commits only if that one does. */
static int add_dep(struct remora_tx *tx, struct crest_lver *v)
{
	struct crest_tx *t = ctx(tx);

	for (unsigned i = 0; i < t->ndeps; i++)
		if (t->deps[i] == v)
			return 0;
	if (t->ndeps == CREST_DEPS_MAX)
		return abort_with(tx, REMORA_ABORT_VALIDATION);
	v->refs++;
	t->deps[t->ndeps++] = v;
	return 0;
}

/* Verbs of one write-back: cells and epochs on every replica, and the unlock. */
static unsigned wb_need(const struct remora_tx *tx)
{
	return txn_db(tx)->st.replicas * (CODEC_CELL_MAX + 2u) + 1u;
}

/*
 * The write-back of lo, in the commit's order: the changed cells on every replica, then their
 * epochs, then on the primary the masked-CAS clearing every bit held for this worker.
 */
static void wb_post(struct remora_tx *tx, struct txb *b, struct crest_lobj *lo, uint64_t cells)
{
	const struct store_db *st = &txn_db(tx)->st;

	for (unsigned pass = 0; pass < 2; pass++)
		for (unsigned k = 0; k < st->replicas; k++)
			write_runs(tx, b, store_replica(st, lo->primary, k), lo->t, lo->off, lo->wb,
				   cells, pass == 1);
	post_unlock_at(tx, b, lo->primary, lo->off, lo->held, NULL);
}

/* A write-back that did not land: its versions are committed (logged) and left to recovery,
 * and so are the locks held. */
static void lobj_lost(struct crest_lobj *lo)
{
	for (struct crest_lver *v = lo->newest; v; v = v->older)
		if (v->state == CREST_V_COMMITTED)
			v->state = CREST_V_LOST;
	lo->applying = false;
	lo->lost = true; /* never admitted to, read from, written back or unlocked again */
}

/*
 * The last writer of lo left without a commit doorbell to ride on (it aborted, or committed
 * nothing there): the newest committed versions go back now, or only the unlock. Its own
 * buffer, since the coordinator's verb scratch may be in use by the caller's batch.
 */
static void writeback_now(struct remora_tx *tx, struct crest_lobj *lo)
{
	unsigned cap = wb_need(tx);
	struct txb b = { .wrs = calloc(cap, sizeof(*b.wrs)), .cap = cap };
	uint64_t cells = crest_lobj_wb_image(lo);
	int rc;

	if (!b.wrs) {
		lobj_lost(lo);
		cx_unlock_failed(tx, txn_errf(tx, -ENOMEM, "write-back: out of memory"));
		return;
	}
	lo->applying = true;
	wb_post(tx, &b, lo, cells);
	rc = cx_exec(tx, &b, "write-back");
	free(b.wrs);
	if (rc) {
		lobj_lost(lo);
		cx_unlock_failed(tx, rc);
		return;
	}
	crest_lobj_written_back(lo);
}

/* The creator keeps a committed version until it is written back: its log stays until then
 * (one whose write-back failed, LOST, for good: settle_pins stops the coordinator). */
static void keep_or_put(struct remora_tx *tx, struct crest_lver *v)
{
	struct crest_coord *cc = coord_of(tx);

	if (v->state != CREST_V_COMMITTED && v->state != CREST_V_LOST) {
		crest_lver_put(v);
		return;
	}
	if (cc->npins == cc->pins_cap) {
		uint32_t cap = cc->pins_cap ? 2 * cc->pins_cap : 16;
		struct crest_lver **p = realloc(cc->pins, cap * sizeof(*p));

		if (!p) { /* keep the reference: a leak, never a log overwritten too early */
			cx_unlock_failed(tx, -ENOMEM);
			return;
		}
		cc->pins = p;
		cc->pins_cap = cap;
	}
	cc->pins[cc->npins++] = v;
}

/*
 * Ends o's part in its cache entry: a version not committed is aborted, the local lock goes,
 * the writer's place goes (the last writer writes back, or unlocks), and the reference.
 */
static void local_release(struct remora_tx *tx, struct txn_obj *o)
{
	struct crest_obj *ob = OB(o);
	struct crest_lobj *lo = ob->lo;

	if (!lo)
		return;
	if (ob->mine) {
		if (ob->mine->state == CREST_V_PENDING) {
			ob->mine->state = CREST_V_ABORTED;
			crest_lobj_unlink(lo, ob->mine);
		}
		keep_or_put(tx, ob->mine);
		ob->mine = NULL;
	}
	if (lo->owner == tx)
		lo->owner = NULL;
	if (ob->writer) {
		ob->writer = false;
		if (--lo->writers == 0 && lo->held && !lo->lost)
			writeback_now(tx, lo);
	}
	ob->lo = NULL;
	crest_lobj_put(coord_of(tx)->cache, lo);
}

/* Another transaction of the worker has the local lock, a write-back is in flight, or the
 * hold admitted its bound of writers (gap 5: the record must go back to the memory node). */
static bool lobj_busy(const struct remora_tx *tx, const struct crest_lobj *lo)
{
	uint32_t max = cdb(tx)->writers_max;

	if (lo->lost)
		return true;
	if (lo->owner == tx)
		return false;
	if (lo->owner && !txb_mut(tx, MUT_CREST_LOCAL_NO_LOCK))
		return true;
	return lo->applying || (max && lo->held && lo->admitted >= max);
}

/* o's transaction becomes a writer of its record here: the local lock, and a place. */
static int lobj_admit(struct remora_tx *tx, struct txn_obj *o, bool wait)
{
	struct crest_lobj *lo = OB(o)->lo;

	while (lobj_busy(tx, lo)) {
		if (!wait || !may_wait() || lo->lost)
			return abort_with(tx, REMORA_ABORT_LOCKED);
		cx_yield(tx);
	}
	lo->owner = tx;
	if (!OB(o)->writer) {
		OB(o)->writer = true;
		lo->writers++;
		lo->admitted++;
	}
	return 0;
}

static int by_table_key(const void *a, const void *b)
{
	const struct txn_obj *x = *(struct txn_obj *const *)a, *y = *(struct txn_obj *const *)b;

	if (x->table != y->table)
		return x->table < y->table ? -1 : 1;
	return x->key < y->key ? -1 : x->key > y->key;
}

/*
 * The start of a block (one fetch): each object finds its record's entry (a writer makes
 * one), and the writers are admitted in (table, key) order. The first block waits for local
 * locks (the order rules out a cycle); a later one does not wait, since it holds the locks of
 * earlier blocks in another order. TS_exec is drawn once the first block's locks are held.
 */
static int local_enter(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	struct crest_cache *cache = coord_of(tx)->cache;
	struct txn_obj **rw = txn_arena_alloc(&tx->c->arena, (n ? n : 1) * sizeof(*rw));
	bool first = ctx(tx)->blocks++ == 0;
	unsigned nrw = 0;
	int rc;

	if (!rw)
		return fail(tx, -ENOMEM);
	for (unsigned i = 0; i < n; i++) {
		struct txn_obj *o = objs[i];
		bool want_rw = (o->flags & OBJ_WANT_RW) != 0;

		if (!(o->flags & OBJ_HAVE_REC) || !is_local(tx, o))
			continue;
		if (!OB(o)->lo && !(OB(o)->lo = crest_lobj_get(cache, o, want_rw)) && want_rw)
			return fail(tx, -ENOMEM);
		if (want_rw && !OB(o)->writer)
			rw[nrw++] = o;
	}
	qsort(rw, nrw, sizeof(*rw), by_table_key);
	for (unsigned k = 0; k < nrw; k++) {
		rc = lobj_admit(tx, rw[k], first);
		if (rc)
			return rc;
	}
	if (!ctx(tx)->ts_exec)
		ctx(tx)->ts_exec = ++cache->ts_exec;
	return 0;
}

/*
 * Insert and delete lock alone: when this transaction is the record's only writer and no
 * local version waits to go back, the hold becomes its own (the old path from here on); else
 * it aborts.
 */
static int go_alone(struct remora_tx *tx, struct txn_obj *o)
{
	struct crest_lobj *lo = OB(o)->lo;

	if (!lo) {
		OB(o)->alone = true; /* a retry's refetch must not join a cache entry either */
		return 0;
	}
	if (!OB(o)->writer || lo->writers != 1 || lo->newest || lo->applying || lo->lost)
		return abort_with(tx, REMORA_ABORT_LOCKED);
	OB(o)->locked = lo->held;
	if (lo->held)
		o->flags |= OBJ_LOCKED;
	lo->held = 0;
	lo->admitted = 0;
	lo->writers = 0;
	OB(o)->writer = false;
	OB(o)->alone = true;
	if (lo->owner == tx)
		lo->owner = NULL;
	OB(o)->lo = NULL;
	crest_lobj_put(coord_of(tx)->cache, lo);
	return 0;
}

/*
 * Cell c of a record whose cell this worker holds: the newest local version that wrote it
 * (its writer becomes a dependency while not committed; one that began later aborts us, the
 * paper's reverse-order rule), or the base. Zero memory-node accesses.
 */
static int settle_local_cell(struct remora_tx *tx, struct txn_obj *o, unsigned c)
{
	struct crest_lver *from;
	uint64_t ver = crest_lobj_cell(OB(o)->lo, c, OB(o)->val, &from);
	uint64_t bit = UINT64_C(1) << c;
	int rc;

	if (OB(o)->lo->lost) /* its committed versions are recovery's now */
		return abort_with(tx, REMORA_ABORT_LOCKED);
	if (from && from->state == CREST_V_PENDING) {
		if (from->ts_exec > ctx(tx)->ts_exec)
			return abort_with(tx, REMORA_ABORT_VALIDATION);
		rc = add_dep(tx, from);
		if (rc)
			return rc;
	}
	if ((OB(o)->have & bit) && codec_cell_en(OB(o)->ver[c]) != codec_cell_en(ver))
		return abort_with(tx, REMORA_ABORT_VALIDATION);
	OB(o)->ver[c] = ver;
	OB(o)->have |= bit;
	if ((ver & CODEC_CELL_TS_MASK) > ctx(tx)->ts_seen)
		ctx(tx)->ts_seen = ver & CODEC_CELL_TS_MASK;
	return 0;
}

/*
 * A record read under the node's hold whose write-back is out: wait for it to land (the cells
 * are then validated by the header READ, which would see the node's own lock bit while the
 * unlock is on its way and abort). Outside a coroutine nothing waits: validation decides.
 */
static void wait_write_backs(struct remora_tx *tx)
{
	for (unsigned i = 0; i < tx->nobj && may_wait(); i++) {
		const struct crest_lobj *lo = OB(tx->objs[i])->lo;

		while (lo && !hold_valid(tx, lo) && lo->held && !lo->lost)
			cx_yield(tx);
	}
}

/* Every version read before its writer committed: wait for the outcome; an abort cascades. */
static int wait_deps(struct remora_tx *tx)
{
	struct crest_tx *t = ctx(tx);

	for (unsigned i = 0; i < t->ndeps; i++) {
		struct crest_lver *v = t->deps[i];

		while (v->state == CREST_V_PENDING) {
			if (!may_wait())
				return abort_with(tx, REMORA_ABORT_VALIDATION);
			cx_yield(tx);
		}
		if (v->state == CREST_V_ABORTED && !txb_mut(tx, MUT_CREST_NO_CASCADE))
			return abort_with(tx, REMORA_ABORT_VALIDATION);
		if (v->ts > t->ts_seen)
			t->ts_seen = v->ts;
	}
	return 0;
}

/*
 * A coordinator's log slot is overwritten by its next commit, so it begins only once every
 * version its last commit left to other writers has been written back.
 */
static int settle_pins(struct remora_tx *tx)
{
	struct crest_coord *cc = coord_of(tx);

	while (cc->npins) {
		struct crest_lver *v = cc->pins[cc->npins - 1];

		if (v->state == CREST_V_LOST)
			return txn_errf(tx, -EIO,
					"coordinator %u stopped: the write-back of a commit of it "
					"failed; its log and locks are left to recovery",
					(unsigned)tx->c->id);
		if (v->state == CREST_V_COMMITTED && !txb_mut(tx, MUT_CREST_NO_PIN)) {
			if (!may_wait())
				return txn_errf(tx, -EBUSY,
						"coordinator %u: its last commit is not written "
						"back yet (a writer of the worker is still open)",
						(unsigned)tx->c->id);
			cx_yield(tx);
			continue;
		}
		crest_lver_put(v);
		cc->npins--;
	}
	return 0;
}

/*
 * The end of execution: each written record gets this transaction's version (its cells'
 * epochs one past the ones read), visible to the worker's later transactions at once, and
 * the local locks go.
 */
static int local_commit_start(struct remora_tx *tx)
{
	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		struct crest_obj *ob = OB(o);
		uint64_t ver[CODEC_CELL_MAX] = { 0 };
		struct codec_cell_hdr h;

		if (!ob->lo)
			continue;
		if (ob->writer && (o->flags & OBJ_DIRTY)) {
			memcpy(&h, o->img, sizeof(h));
			for (unsigned c = 0; c < o->t->geom.nparts; c++) {
				if (!(o->dirty_cells >> c & 1))
					continue;
				h.en[c] = codec_cell_en(ob->ver[c]); /* new_image counts on from it */
				ver[c] = codec_cell_version((uint16_t)(h.en[c] + 1), 0);
			}
			memcpy(o->img, &h, sizeof(h));
			ob->mine = crest_lver_new(ob->lo, tx->id, o->dirty_cells,
						  ctx(tx)->ts_exec, o->newval, ver);
			if (!ob->mine)
				return fail(tx, -ENOMEM);
		}
		if (ob->lo->owner == tx)
			ob->lo->owner = NULL;
	}
	return 0;
}

/* Cells of a cached record read and not written here whose value this worker holds: what
 * local_validate checks (fixed when validation's READs go out, like the READ's own cells). */
static uint64_t local_cells(const struct remora_tx *tx, const struct txn_obj *o)
{
	const struct crest_lobj *lo = OB(o)->lo;

	if (!lo || !(o->flags & OBJ_FETCHED) || !(OB(o)->used & REMORA_REC_VALID))
		return 0;
	return rd_cells(tx, o) & ~o->dirty_cells & valid_bits(tx, o) & OB(o)->have;
}

/*
 * The local cells, after the READs of validation: each still held by the node and at the
 * epoch read (no newer live local version, or the same base), with no verb. One whose hold
 * ended meanwhile was checked by nobody: abort. So does one whose write-back is out: its
 * unlock may have landed already, and another node may have written the cell since.
 */
static int local_validate(struct remora_tx *tx)
{
	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		struct crest_lobj *lo = OB(o)->lo;
		uint64_t cells = OB(o)->lmask;

		if (cells & ~(hold_valid(tx, lo) ? lo->held : 0))
			return abort_with(tx, REMORA_ABORT_VALIDATION);
		for (unsigned c = 0; cells && c < o->t->geom.nparts; c++) {
			struct crest_lver *from;
			uint64_t ver;

			if (!(cells >> c & 1))
				continue;
			ver = crest_lobj_cell(lo, c, NULL, &from);
			if (codec_cell_en(ver) != codec_cell_en(OB(o)->ver[c]))
				return abort_with(tx, REMORA_ABORT_VALIDATION);
		}
	}
	return 0;
}

/* ---- execution --------------------------------------------------------------------------- */

/* STEP_LOCAL: every cell it needs is held by the worker: read from the cache, no verb. */
enum fetch_step { STEP_NONE, STEP_READ, STEP_LOCK_READ, STEP_LOCAL };

static enum fetch_step fetch_step(const struct remora_tx *tx, const struct txn_obj *o)
{
	bool want_rw = (o->flags & OBJ_WANT_RW) && !(o->flags & OBJ_RW_DONE);
	uint64_t mine = held_bits(o);

	if (!(o->flags & OBJ_HAVE_REC))
		return STEP_NONE; /* held another key: the caller looks it up again */
	if (want_rw && (wr_cells(tx, o) & ~mine))
		return STEP_LOCK_READ;
	if ((o->flags & OBJ_FETCHED) && !want_rw)
		return STEP_NONE;
	return OB(o)->lo && !(rd_cells(tx, o) & ~mine) ? STEP_LOCAL : STEP_READ;
}

/* The lock masked-CAS's outcome: the bits are ours (0), or another holds one of them (1). */
static int settle_lock(struct remora_tx *tx, struct txn_obj *o, bool landed)
{
	if (OB(o)->mcas_old & OB(o)->want)
		return 1;
	if (OB(o)->lo && !landed) {
		/* the batch failed: its READ may not have landed, so no base; the bits go back */
		struct remora_wr wr;
		struct txb b = { .wrs = &wr, .cap = 1 };

		post_unlock(tx, &b, o, OB(o)->want);
		cx_post_unlocks(tx, b.wrs, b.n);
		return 0;
	}
	if (OB(o)->lo) {
		/*
		 * The worker's hold, for every local writer, and the record READ behind the new
		 * bits as its base, at once: a yield before the base is in place would let
		 * another transaction of the worker read held cells from a stale base.
		 */
		OB(o)->lo->held |= OB(o)->want;
		memcpy(OB(o)->lo->base, o->img, o->t->geom.stride);
		return 0;
	}
	OB(o)->locked |= OB(o)->want;
	o->flags |= OBJ_LOCKED;
	return 0;
}

/* A torn or inconsistent READ: read again, up to a bound, then abort. */
static int torn(struct remora_tx *tx, struct txn_obj *o)
{
	return ++OB(o)->retries > CREST_TORN_RETRIES ? abort_with(tx, REMORA_ABORT_VALIDATION) :
						       -EAGAIN;
}

/*
 * The snapshot check across the cells o reads (section 3.1 step 4 of the digest): each cell
 * whole, no read cell locked by another transaction, hdr.en[c] == EN(version of c). A cell read
 * earlier in this transaction must still carry the version seen then. Returns 0, -EAGAIN (read
 * again) or an abort.
 */
static int settle_cells(struct remora_tx *tx, struct txn_obj *o, uint64_t lock)
{
	const struct store_db *st = &txn_db(tx)->st;
	const struct codec_geom *g = &o->t->geom;
	uint64_t cells = rd_cells(tx, o);
	uint64_t local = OB(o)->lo ? OB(o)->lo->held & cells : 0;
	bool skip = txb_mut(tx, MUT_CREST_SKIP_SNAPSHOT);
	int rc;

	for (unsigned c = 0; c < g->nparts; c++) {
		struct codec_rec r;
		uint64_t bit = UINT64_C(1) << c;

		if (!(cells & bit))
			continue;
		if (local & bit) {
			rc = settle_local_cell(tx, o, c);
			if (rc)
				return rc;
			continue;
		}
		if (st->codec->decode(g, o->img, c, &r) == -EAGAIN && !skip)
			return torn(tx, o);
		if (!skip && (lock & bit) && !(OB(o)->locked & bit))
			return abort_with(tx, REMORA_ABORT_LOCKED);
		if (!skip && (uint16_t)r.aux != codec_cell_en(r.version))
			return torn(tx, o);
		if ((OB(o)->have & bit) && OB(o)->ver[c] != r.version)
			return abort_with(tx, REMORA_ABORT_VALIDATION);
		OB(o)->ver[c] = r.version;
		OB(o)->have |= bit;
		if ((r.version & CODEC_CELL_TS_MASK) > ctx(tx)->ts_seen)
			ctx(tx)->ts_seen = r.version & CODEC_CELL_TS_MASK;
	}
	return 0;
}

/* 0 done, -EAGAIN read again, 1 another key (look up again), or an abort/failure. */
static int fetch_settle(struct remora_tx *tx, struct txn_obj *o, enum fetch_step step)
{
	const struct codec_geom *g = &o->t->geom;
	struct crest_lobj *lo = OB(o)->lo;
	struct codec_cell_hdr h;
	int rc;

	if (step == STEP_LOCAL)
		memcpy(o->img, lo->base, g->stride);
	memcpy(&h, o->img, sizeof(h));
	if (h.key != o->key) {
		if (lo) { /* its bits go back with the worker's hold */
			local_release(tx, o);
		} else if (OB(o)->locked) { /* not our record: give its bits back now */
			struct remora_wr wr;
			struct txb b = { .wrs = &wr, .cap = 1 };

			post_unlock(tx, &b, o, OB(o)->locked);
			cx_post_unlocks(tx, b.wrs, b.n);
			OB(o)->locked = 0;
			o->flags &= ~(OBJ_LOCKED | OBJ_CAS_SENT);
		}
		txn_unresolve(tx, o);
		return 1;
	}
	if ((OB(o)->have || (o->flags & OBJ_FETCHED)) && OB(o)->used != h.used)
		return abort_with(tx, REMORA_ABORT_VALIDATION);
	OB(o)->used = h.used;
	if (!OB(o)->val && !(OB(o)->val = txn_arena_alloc(&tx->c->arena, g->value_size)))
		return fail(tx, -ENOMEM);
	for (unsigned c = 0; c < g->nparts; c++)
		codec_cell_get(g, o->img, c, OB(o)->val);
	if (h.used & REMORA_REC_VALID) {
		rc = settle_cells(tx, o, h.lock); /* local cells: their versions over the image */
		if (rc)
			return rc;
	}
	OB(o)->retries = 0;
	o->value = OB(o)->val;
	o->flags |= OBJ_FETCHED;
	o->flags = (h.used & REMORA_REC_VALID) ? o->flags | OBJ_FOUND : o->flags & ~OBJ_FOUND;
	if ((o->flags & OBJ_WANT_RW) && !(wr_cells(tx, o) & ~held_bits(o)))
		o->flags |= OBJ_RW_DONE;
	return 0;
}

static void post_round(struct remora_tx *tx, struct txb *b, struct txn_obj *const *objs,
		       unsigned n, enum fetch_step *steps)
{
	for (unsigned i = 0; i < n; i++) {
		struct txn_obj *o = objs[i];

		steps[i] = fetch_step(tx, o);
		if (steps[i] == STEP_LOCK_READ)
			post_lock(tx, b, o, wr_cells(tx, o) & ~held_bits(o));
		if (steps[i] == STEP_READ || steps[i] == STEP_LOCK_READ)
			txb_read(tx, b, o->primary, o->off, o->img, o->t->geom.stride);
	}
}

static int fetch_objs(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	enum fetch_step *steps = txn_scratch(tx->c, TXN_SCRATCH_STEPS, n * sizeof(*steps));
	bool again = false;
	struct txb b;
	int rc;

	if (!steps || txb_init(tx, &b, txb_need(tx)))
		return fail(tx, -ENOMEM);
	if (cdb(tx)->localized && (rc = local_enter(tx, objs, n)))
		return rc;
	for (unsigned round = 0;; round++) {
		bool lock_failed = false, any = false;

		if (round == CREST_ROUNDS_MAX)
			return fail(tx, txn_errf(tx, -EIO, "fetch: no progress after %u rounds", round));
		post_round(tx, &b, objs, n, steps);
		for (unsigned i = 0; i < n; i++)
			any |= steps[i] != STEP_NONE;
		if (!any)
			break;
		if (b.n && !ctx(tx)->t_first_us)
			ctx(tx)->t_first_us = now_us();
		rc = cx_exec(tx, &b, "fetch");
		/* every lock that landed is ours before any abort below releases what we hold */
		for (unsigned i = 0; i < n; i++)
			if (steps[i] == STEP_LOCK_READ && settle_lock(tx, objs[i], rc == 0))
				lock_failed = true;
		if (rc)
			return fail(tx, rc);
		if (lock_failed)
			return abort_with(tx, REMORA_ABORT_LOCKED);
		cx_point(tx, "txn.locked");
		for (unsigned i = 0; i < n; i++) {
			if (steps[i] == STEP_NONE)
				continue;
			rc = fetch_settle(tx, objs[i], steps[i]);
			if (rc == 1)
				again = true;
			else if (rc < 0 && rc != -EAGAIN)
				return rc;
		}
	}
	return again ? -EAGAIN : 0;
}

/* ---- writes ------------------------------------------------------------------------------ */

static int write_obj(struct remora_tx *tx, struct txn_obj *o, const void *value)
{
	return txn_stage_write(tx, o, value) ? fail(tx, -ENOMEM) : 0;
}

static int remove_obj(struct remora_tx *tx, struct txn_obj *o)
{
	int rc = go_alone(tx, o);

	if (rc)
		return rc;
	if (txn_stage_remove(tx, o))
		return fail(tx, -ENOMEM);
	o->dirty_cells = all_cells(o);
	return 0;
}

/*
 * The new record's images: every cell empty on the backups; on the primary also every cell
 * locked by us, noted before the claim's verbs so that a failure after it releases them.
 */
static void insert_fill(struct remora_tx *tx, struct txn_obj *o, unsigned char *bimg)
{
	const struct store_db *st = &txn_db(tx)->st;
	const struct store_table *t = o->t;
	struct codec_rec r = { .key = o->key, .table = o->table, .flags = 0 };

	memset(bimg, 0, t->geom.stride);
	for (unsigned c = 0; c < t->geom.nparts; c++)
		st->codec->encode(&t->geom, bimg, c, &r);
	memcpy(o->img, bimg, t->geom.stride);
	memcpy(o->img + CODEC_CELL_LOCK_OFF, &(uint64_t){ all_cells(o) }, 8);
	OB(o)->locked = all_cells(o);
	OB(o)->used = 0;
}

/*
 * A new record for an absent key: a placeholder (key, used 0, every cell locked by us) on the
 * primary, published by one CAS on the first empty index slot in the same doorbell; the
 * backups get it unlocked, fire and forget (as the other protocols do).
 */
static int insert_claim(struct remora_tx *tx, struct txn_obj *o, bool *won)
{
	uint32_t depth = crest_cache_suspend(cache_of(tx));
	int rc = txn_insert_claim(tx, o, insert_fill, OBJ_LOCKED, &OB(o)->slot_word,
				  &OB(o)->mcas_old, won);

	crest_cache_resume(cache_of(tx), depth);

	if (!rc && !*won)
		OB(o)->locked = 0; /* the record was never published: nothing of it is ours */
	return rc;
}

/* The engine's refetch comes back through crest_fetch, which takes the lock again. */
static int refetch(struct remora_tx *tx, struct txn_obj *o)
{
	uint32_t depth = crest_cache_suspend(cache_of(tx));
	int rc = txn_refetch_rw(tx, o);

	crest_cache_resume(cache_of(tx), depth);
	return rc;
}

static int insert_obj(struct remora_tx *tx, struct txn_obj *o, const void *value)
{
	int rc = go_alone(tx, o);

	if (rc)
		return rc;
	if (txn_obj_newval(tx, o))
		return fail(tx, -ENOMEM);
	for (unsigned attempt = 0; attempt < CREST_INSERT_ATTEMPTS; attempt++) {
		bool won = false;

		if (!(o->flags & OBJ_HAVE_REC)) {
			rc = insert_claim(tx, o, &won);
			if (rc)
				return fail(tx, rc);
		}
		if ((o->flags & OBJ_HAVE_REC) && OB(o)->locked == all_cells(o)) {
			memcpy(o->newval, value, o->t->geom.value_size);
			o->dirty_cells = all_cells(o);
			o->flags |= OBJ_INSERT | OBJ_DIRTY | OBJ_FETCHED | OBJ_RW_DONE;
			o->flags &= ~OBJ_FOUND;
			return 0;
		}
		rc = refetch(tx, o);
		if (rc)
			return rc;
		if (o->flags & OBJ_FOUND)
			return -REMORA_EEXIST;
	}
	return abort_with(tx, REMORA_ABORT_LOCKED);
}

/* ---- validation -------------------------------------------------------------------------- */

/* Cells of o read and not held by us: what validation looks at. */
static uint64_t ro_cells(const struct remora_tx *tx, const struct txn_obj *o)
{
	if (!(o->flags & OBJ_FETCHED) || !(o->flags & OBJ_HAVE_REC))
		return 0;
	if (!(OB(o)->used & REMORA_REC_VALID)) /* absent: the header must stay so */
		return valid_bits(tx, o) ? 0 : all_cells(o);
	/* cells held by the node are checked locally (local_validate); written ones are held */
	return rd_cells(tx, o) & ~o->dirty_cells & ~valid_bits(tx, o);
}

/* One READ per record with unlocked read cells: the header line, or (EN guard) the record. */
static unsigned validate_post(struct remora_tx *tx, struct txb *b, bool full)
{
	unsigned n = 0;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		uint32_t len = full ? o->t->geom.stride : CODEC_CELL_LINE;

		/* kept: the worker's hold may change while the READs are out */
		OB(o)->vmask = txb_mut(tx, MUT_SKIP_VALIDATION) ? 0 : ro_cells(tx, o);
		OB(o)->lmask = txb_mut(tx, MUT_SKIP_VALIDATION) ? 0 : local_cells(tx, o);
		if (!OB(o)->vmask)
			continue;
		OB(o)->chk = txn_arena_alloc(&tx->c->arena, len);
		if (!OB(o)->chk)
			return UINT32_MAX;
		txb_read(tx, b, o->primary, o->off, OB(o)->chk, len);
		n++;
	}
	return n;
}

/* crest_excuse_late_hold (the bug): a hold the node took after the READ went out excuses the
 * lock bit the READ saw, though the READ may have landed before it. */
static uint64_t late_excuse(const struct remora_tx *tx, const struct txn_obj *o)
{
	return txb_mut(tx, MUT_CREST_EXCUSE_LATE_HOLD) ? valid_bits(tx, o) : 0;
}

/*
 * No read cell locked by someone else, the used word unchanged, and per read cell the epoch
 * unchanged (crest_lock_bits_only: not checked, the prototype's gap 12), or with the EN
 * guard the whole version word.
 */
static int validate_settle(struct remora_tx *tx, bool full)
{
	const struct store_db *st = &txn_db(tx)->st;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		uint64_t ro = OB(o)->vmask;
		struct codec_cell_hdr h;

		if (!ro)
			continue;
		memcpy(&h, OB(o)->chk, sizeof(h));
		/* ro: cells not held when the READ went out; a hold taken since may have come
		 * after the READ landed, so no lock bit of them is excused */
		if ((h.lock & ro & ~late_excuse(tx, o)) || h.used != OB(o)->used)
			return abort_with(tx, REMORA_ABORT_VALIDATION);
		for (unsigned c = 0; c < o->t->geom.nparts; c++) {
			struct codec_rec r;

			if (!(ro >> c & 1) || !(OB(o)->have >> c & 1))
				continue;
			if (full) {
				if (st->codec->decode(&o->t->geom, OB(o)->chk, c, &r) ||
				    r.version != OB(o)->ver[c])
					return abort_with(tx, REMORA_ABORT_VALIDATION);
			} else if (!txb_mut(tx, MUT_CREST_LOCK_BITS_ONLY) &&
				   h.en[c] != codec_cell_en(OB(o)->ver[c])) {
				return abort_with(tx, REMORA_ABORT_VALIDATION);
			}
		}
	}
	return 0;
}

static int validate(struct remora_tx *tx, struct txb *b)
{
	bool full = ctx(tx)->t_first_us && now_us() - ctx(tx)->t_first_us > crest_en_wrap_us;
	unsigned n = validate_post(tx, b, full);
	int rc;

	if (n == UINT32_MAX)
		return fail(tx, -ENOMEM);
	if (!n)
		return 0;
	cx_point(tx, full ? "crest.validate_full" : "txn.validate");
	rc = cx_exec(tx, b, "validate");
	if (rc)
		return fail(tx, rc);
	cx_point(tx, "crest.validate_landed"); /* the node's holds may change before the check */
	return validate_settle(tx, full);
}

/* ---- commit ------------------------------------------------------------------------------ */

/* Lamport commit timestamp: above every TS this transaction read and every earlier commit of
 * this compute node (cell locks already order writers of a cell across compute nodes). */
static uint64_t commit_ts(struct remora_tx *tx)
{
	uint64_t *clk = &cdb(tx)->clock;
	uint64_t cur = __atomic_load_n(clk, __ATOMIC_RELAXED), want;

	do {
		want = (cur > ctx(tx)->ts_seen ? cur : ctx(tx)->ts_seen) + 1;
	} while (!__atomic_compare_exchange_n(clk, &cur, want, false, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return want & CODEC_CELL_TS_MASK;
}

/* The new image of o (lock word 0): fetched cells, the written ones with epoch + 1 and ts. */
static unsigned char *new_image(struct remora_tx *tx, struct txn_obj *o, uint64_t ts)
{
	const struct codec_geom *g = &o->t->geom;
	unsigned char *img = txn_arena_alloc(&tx->c->arena, g->stride);
	struct codec_cell_hdr h;

	if (!img)
		return NULL;
	memcpy(img, o->img, g->stride);
	memcpy(&h, img, sizeof(h));
	h.key = o->key;
	h.lock = 0;
	h.used = (o->flags & OBJ_DELETE) ? REMORA_REC_DELETED : REMORA_REC_VALID;
	h.used |= (uint64_t)(o->table & 0xffffu) << 16 | (uint64_t)g->nparts << 32;
	memcpy(img, &h, sizeof(h)); /* the cells' checksums cover the key and table */
	for (unsigned c = 0; c < g->nparts; c++) {
		uint16_t en;

		if (!(o->dirty_cells >> c & 1))
			continue;
		en = (uint16_t)(h.en[c] + 1);
		h.en[c] = en;
		codec_cell_put(g, img, c, o->newval, codec_cell_version(en, ts));
	}
	memcpy(img, &h, sizeof(h));
	return img;
}

/*
 * The version word logged for written cell c: the one the new image carries, so recovery
 * recognizes the cell when it landed without its epoch. The fetched version is no source: an
 * insert over a deleted record never recorded one (the record was not VALID), while its image
 * counts on from the header's epoch (crest_log_fetched_epoch: the old bug).
 */
static uint64_t log_version(struct remora_tx *tx, const struct txn_obj *o,
			    const unsigned char *img, unsigned c, uint64_t ts)
{
	uint64_t ver;

	if (txb_mut(tx, MUT_CREST_LOG_FETCHED_EPOCH))
		return codec_cell_version((uint16_t)(OB(o)->ver[c] >> 48) + 1u, ts);
	memcpy(&ver, img + o->t->geom.part_off[c], 8);
	return ver;
}

/*
 * The redo log (crest.h, CREST_LOG_DEPS): a header {tx id, VALID, coordinator, entries,
 * length, checksum; reserved[0] = commit timestamp, reserved[1] = dependencies} and per
 * written record an entry {table, op, key, offset, old_version = written cells, new_version =
 * commit timestamp}, the new used word, and per written cell in cell order {version, value
 * bytes padded to 8} (crest_log_len). One WRITE per log server (f+1), durable.
 */
static int log_post(struct remora_tx *tx, struct txb *b, unsigned char **imgs, uint64_t ts)
{
	const struct store_db *st = &txn_db(tx)->st;
	unsigned char *buf = ((struct crest_coord *)tx->c->priv)->logbuf;
	struct store_log_hdr *h = (void *)buf;
	uint32_t at = sizeof(*h), cap = st->sb.log_slot_bytes;
	uint16_t n = 0;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		const struct codec_geom *g = &o->t->geom;
		struct store_log_ent e = { 0 };
		uint32_t len = crest_log_len(g, o->dirty_cells);

		if (!imgs[i])
			continue;
		if (at + sizeof(e) + len > cap)
			return txn_errf(tx, -REMORA_EFULL,
					"log: the write set needs more than the %u-byte log slot", cap);
		e.table = o->table;
		e.op = (o->flags & OBJ_INSERT) ? REMORA_STORE_LOG_INS :
		       (o->flags & OBJ_DELETE) ? REMORA_STORE_LOG_DEL : REMORA_STORE_LOG_UPD;
		e.key = o->key;
		e.off = o->off;
		e.old_version = o->dirty_cells;
		e.new_version = ts;
		e.img_len = len;
		memcpy(buf + at, &e, sizeof(e));
		at += sizeof(e);
		memcpy(buf + at, imgs[i] + offsetof(struct codec_cell_hdr, used), 8);
		at += 8;
		for (unsigned c = 0; c < g->nparts; c++) {
			uint32_t off, clen;
			uint64_t ver;

			if (!(o->dirty_cells >> c & 1))
				continue;
			codec_cell_span(g->cells, g->value_size, c, &off, &clen);
			ver = log_version(tx, o, imgs[i], c, ts);
			memcpy(buf + at, &ver, 8);
			memcpy(buf + at + 8, o->newval + off, clen);
			memset(buf + at + 8 + clen, 0, ((clen + 7) & ~7u) - clen);
			at += 8 + ((clen + 7) & ~7u);
		}
		n++;
	}
	if (at + 8u * ctx(tx)->ndeps > cap)
		return txn_errf(tx, -REMORA_EFULL,
				"log: the write set needs more than the %u-byte log slot", cap);
	for (unsigned i = 0; i < ctx(tx)->ndeps; i++, at += 8)
		memcpy(buf + at, &ctx(tx)->deps[i]->txid, 8);
	memset(h, 0, sizeof(*h));
	h->tx_id = tx->id;
	h->flags = REMORA_STORE_LOG_VALID;
	h->coord = tx->c->id;
	h->n = n;
	h->len = at;
	h->codec = st->codec->id;
	h->reserved[0] = ts;
	CREST_LOG_DEPS(h) = ctx(tx)->ndeps;
	h->csum = store_csum(REMORA_STORE_LOG_CSUM_SEED, h, at);
	for (unsigned r = 0; r < st->replicas; r++)
		txb_write(tx, b, store_log_server(st, tx->c->id, r),
			  store_log_off(st, tx->c->log_slot), buf, at,
			  txb_durable(tx, MUT_NO_LOG_PERSIST));
	return 0;
}

/* WRITEs of the runs of consecutive bits of mask: cells (img parts) or header epochs. */
static void write_runs(struct remora_tx *tx, struct txb *b, uint16_t node,
		       const struct store_table *t, uint64_t rec, const unsigned char *img,
		       uint64_t mask, bool epochs)
{
	const struct codec_geom *g = &t->geom;
	uint8_t fl = txb_durable(tx, MUT_NO_COMMIT_PERSIST);

	for (unsigned c = 0; c < g->nparts;) {
		unsigned e = c;
		uint32_t off, len;

		if (!(mask >> c & 1)) {
			c++;
			continue;
		}
		while (e + 1 < g->nparts && (mask >> (e + 1) & 1))
			e++;
		if (epochs) {
			off = CODEC_CELL_EN_OFF + 2u * c;
			len = 2u * (e - c + 1);
		} else {
			off = g->part_off[c];
			len = g->part_off[e] + g->part_len[e] - off;
		}
		txb_write(tx, b, node, rec + off, img + off, len, fl);
		c = e + 1;
	}
}

/*
 * The commit doorbell, in this order: the written cells of every record on every replica;
 * then their epochs and (insert, delete) the key and used words; then on the primary the
 * unlock of our bits. The channel applies them in order, so a reader that sees a cell
 * unlocked sees its data and epoch. Returns the number of cell WRITEs at the front.
 */
static unsigned apply_post(struct remora_tx *tx, struct txb *b, const struct crest_wb *wbs)
{
	const struct store_db *st = &txn_db(tx)->st;
	unsigned ncell_wrs = 0;

	for (unsigned pass = 0; pass < 2; pass++) {
		for (unsigned i = 0; i < tx->nobj; i++) {
			struct txn_obj *o = tx->objs[i];

			for (unsigned k = 0; wbs[i].img && k < st->replicas; k++) {
				uint16_t m = store_replica(st, o->primary, k);

				write_runs(tx, b, m, o->t, o->off, wbs[i].img, wbs[i].cells,
					   pass == 1);
				if (pass == 1 && (o->flags & (OBJ_INSERT | OBJ_DELETE)))
					txb_write(tx, b, m, o->off, wbs[i].img, 16,
						  txb_durable(tx, MUT_NO_COMMIT_PERSIST));
			}
		}
		if (pass == 0)
			ncell_wrs = b->n;
	}
	for (unsigned i = 0; i < tx->nobj; i++)
		if (wbs[i].unlock)
			post_unlock(tx, b, tx->objs[i], wbs[i].unlock);
	return ncell_wrs;
}

/*
 * What the commit doorbell writes per object: a record locked alone, its new image; a cached
 * record, nothing unless this transaction is its last writer, which then writes back the
 * newest committed version of every changed cell (its own and other local writers') and
 * releases the worker's whole hold.
 */
static struct crest_wb *plan_wb(struct remora_tx *tx, unsigned char **imgs)
{
	struct crest_wb *wbs = txn_arena_alloc(&tx->c->arena, tx->nobj * sizeof(*wbs));

	if (!wbs)
		return NULL;
	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		struct crest_lobj *lo = OB(o)->lo;

		if (!lo) {
			wbs[i] = (struct crest_wb){ .img = imgs[i], .cells = o->dirty_cells,
						    .unlock = OB(o)->locked };
			continue;
		}
		wbs[i] = (struct crest_wb){ 0 };
		if (!OB(o)->writer)
			continue;
		OB(o)->writer = false;
		if (--lo->writers || !lo->held || lo->lost)
			continue;
		wbs[i] = (struct crest_wb){ .img = lo->wb, .cells = crest_lobj_wb_image(lo),
					    .unlock = lo->held, .lo = lo };
		lo->applying = true;
	}
	return wbs;
}

/*
 * The commit doorbell; when REMORA_DIE_AT names txn.commit_mid, the cell WRITEs (first) go
 * alone, so that crash point leaves cells written without their epochs, header words and
 * unlocks (a partly applied commit that recovery must finish).
 */
static int commit_exec(struct remora_tx *tx, struct txb *b, unsigned first)
{
	uint32_t depth;
	int rc;

	if (!txn_db(tx)->split_commit || first == 0 || first >= b->n)
		return cx_exec(tx, b, "commit");
	depth = crest_cache_suspend(cache_of(tx));
	rc = store_exec(txn_chan(tx), b->wrs, first);
	if (!rc) {
		txn_point(tx, "txn.commit_mid");
		rc = store_exec(txn_chan(tx), b->wrs + first, b->n - first);
	}
	crest_cache_resume(cache_of(tx), depth);
	b->n = 0;
	return rc ? txn_errf(tx, rc, "commit: %s", remora_strerror(rc)) : 0;
}

/* After the doorbell: the write-backs' versions are on the memory nodes (or lost with it). */
static void wb_done(struct remora_tx *tx, const struct crest_wb *wbs, bool landed)
{
	for (unsigned i = 0; i < tx->nobj; i++) {
		if (!wbs[i].lo)
			continue;
		if (landed)
			crest_lobj_written_back(wbs[i].lo);
		else
			lobj_lost(wbs[i].lo);
	}
}

static int apply(struct remora_tx *tx, struct txb *b, unsigned char **imgs)
{
	struct crest_wb *wbs = plan_wb(tx, imgs);
	unsigned first;
	int rc;

	if (!wbs)
		return strand(tx, txn_errf(tx, -ENOMEM, "commit: out of memory"));
	if (txb_mut(tx, MUT_CREST_UNLOCK_FIRST)) {
		/* the bug: the unlock goes (and lands) before the data WRITEs */
		for (unsigned i = 0; i < tx->nobj; i++)
			if (wbs[i].unlock)
				post_unlock(tx, b, tx->objs[i], wbs[i].unlock);
		rc = cx_exec(tx, b, "unlock");
		for (unsigned i = 0; i < tx->nobj; i++) {
			OB(tx->objs[i])->locked = 0;
			wbs[i].unlock = 0;
		}
		if (rc)
			return strand(tx, rc);
		cx_point(tx, "txn.unlock");
	}
	first = apply_post(tx, b, wbs);
	cx_point(tx, "txn.commit_write");
	rc = commit_exec(tx, b, first);
	wb_done(tx, wbs, rc == 0);
	if (rc)
		return strand(tx, rc);
	for (unsigned i = 0; i < tx->nobj; i++) {
		OB(tx->objs[i])->locked = 0;
		tx->objs[i]->flags &= ~(OBJ_LOCKED | OBJ_CAS_SENT);
		local_release(tx, tx->objs[i]);
	}
	deps_put(tx);
	cx_point(tx, "txn.unlock");
	return 0;
}

/* This transaction's versions are committed (the log landed): their words carry its TS. */
static void local_committed(struct remora_tx *tx, unsigned char **imgs, uint64_t ts)
{
	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		struct crest_lver *v = OB(o)->mine;

		if (!v || !imgs[i])
			continue;
		for (unsigned c = 0; c < o->t->geom.nparts; c++)
			if (v->cells >> c & 1)
				memcpy(&v->ver[c], imgs[i] + o->t->geom.part_off[c], 8);
		v->ts = ts;
		v->state = CREST_V_COMMITTED;
	}
}

static int commit_tx(struct remora_tx *tx)
{
	unsigned char **imgs;
	bool writes = false;
	struct txb b;
	uint64_t ts;
	int rc;

	if (txb_init(tx, &b, txb_need(tx) + tx->nobj * txn_db(tx)->st.replicas *
						      (CODEC_CELL_MAX + 2u)))
		return fail(tx, -ENOMEM);
	if (cdb(tx)->localized) {
		rc = local_commit_start(tx);
		if (!rc)
			rc = wait_deps(tx);
		if (rc)
			return rc;
		wait_write_backs(tx);
	}
	rc = validate(tx, &b);
	if (!rc && cdb(tx)->localized)
		rc = local_validate(tx);
	if (rc)
		return rc;
	for (unsigned i = 0; i < tx->nobj; i++)
		writes |= (tx->objs[i]->flags & OBJ_DIRTY) != 0;
	if (!writes) {
		release_at(tx, NULL);
		return 0;
	}
	imgs = txn_arena_alloc(&tx->c->arena, tx->nobj * sizeof(*imgs));
	if (!imgs)
		return fail(tx, -ENOMEM);
	ts = commit_ts(tx);
	for (unsigned i = 0; i < tx->nobj; i++) {
		imgs[i] = NULL;
		if ((tx->objs[i]->flags & OBJ_DIRTY) && !(imgs[i] = new_image(tx, tx->objs[i], ts)))
			return fail(tx, -ENOMEM);
	}
	rc = log_post(tx, &b, imgs, ts);
	if (rc)
		return fail(tx, rc);
	cx_point(tx, "txn.log");
	rc = cx_exec(tx, &b, "log");
	if (rc)
		return fail(tx, rc);
	cx_point(tx, "txn.logged");
	local_committed(tx, imgs, ts);
	return apply(tx, &b, imgs);
}

static void abort_tx(struct remora_tx *tx)
{
	release_at(tx, "txn.abort_unlock");
}

static int begin_tx(struct remora_tx *tx)
{
	int stranded = ((struct crest_coord *)tx->c->priv)->stranded;

	if (stranded)
		return txn_errf(tx, stranded,
				"coordinator %u stopped: a commit of it failed after its log "
				"landed (%s); its locks and log are left to recovery",
				(unsigned)tx->c->id, remora_strerror(stranded));
	ctx(tx)->ts_seen = 0;
	ctx(tx)->t_first_us = 0;
	ctx(tx)->ts_exec = 0;
	ctx(tx)->blocks = 0;
	ctx(tx)->ndeps = 0;
	return cdb(tx)->localized ? settle_pins(tx) : 0;
}

/* ---- the entry points: each runs under the compute node's cache lock ------------------- */

static int crest_begin(struct remora_tx *tx)
{
	int rc;

	crest_cache_lock(cache_of(tx));
	rc = begin_tx(tx);
	crest_cache_unlock(cache_of(tx));
	return rc;
}

static int crest_fetch(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	int rc;

	crest_cache_lock(cache_of(tx));
	rc = fetch_objs(tx, objs, n);
	crest_cache_unlock(cache_of(tx));
	return rc;
}

static int crest_write(struct remora_tx *tx, struct txn_obj *o, const void *value)
{
	int rc;

	crest_cache_lock(cache_of(tx));
	rc = write_obj(tx, o, value);
	crest_cache_unlock(cache_of(tx));
	return rc;
}

static int crest_insert(struct remora_tx *tx, struct txn_obj *o, const void *value)
{
	int rc;

	crest_cache_lock(cache_of(tx));
	rc = insert_obj(tx, o, value);
	crest_cache_unlock(cache_of(tx));
	return rc;
}

static int crest_remove(struct remora_tx *tx, struct txn_obj *o)
{
	int rc;

	crest_cache_lock(cache_of(tx));
	rc = remove_obj(tx, o);
	crest_cache_unlock(cache_of(tx));
	return rc;
}

static int crest_commit(struct remora_tx *tx)
{
	int rc;

	crest_cache_lock(cache_of(tx));
	rc = commit_tx(tx);
	crest_cache_unlock(cache_of(tx));
	return rc;
}

static void crest_abort(struct remora_tx *tx)
{
	crest_cache_lock(cache_of(tx));
	abort_tx(tx);
	crest_cache_unlock(cache_of(tx));
}

/* ---- set-up ------------------------------------------------------------------------------ */

static int db_init_with(struct remora_db *db, bool cell_level)
{
	struct crest_db *d = calloc(1, sizeof(*d));
	uint64_t localized = 0, writers = 0, node_cache = 1;
	bool shared;
	int rc;

	if (!d)
		return -ENOMEM;
	rc = txn_db_param(db, REMORA_P_CREST_LOCALIZED, &localized);
	if (!rc)
		rc = txn_db_param(db, REMORA_P_CREST_LOCAL_WRITERS, &writers);
	if (!rc)
		rc = txn_db_param(db, REMORA_P_CREST_NODE_CACHE, &node_cache);
	if (rc) {
		free(d);
		return rc;
	}
	d->cell_level = cell_level;
	d->localized = cell_level && localized; /* crest_record: neither technique */
	d->writers_max = (uint32_t)writers;
	d->node_cache = node_cache != 0;
	shared = db->workers > 1 && !txn_db_mut(db, MUT_CREST_CACHE_NO_LOCK);
	if (d->localized && d->node_cache && (rc = crest_cache_create(&d->cache, shared))) {
		free(d);
		return rc;
	}
	db->proto_priv = d;
	return 0;
}

static int crest_db_init(struct remora_db *db)
{
	return db_init_with(db, true);
}

static int crest_record_db_init(struct remora_db *db)
{
	return db_init_with(db, false);
}

static void crest_db_fini(struct remora_db *db)
{
	struct crest_db *d = db->proto_priv;

	if (d)
		crest_cache_destroy(d->cache);
	free(db->proto_priv);
	db->proto_priv = NULL;
}

/* Whether each worker has a record cache of its own (crest_node_cache false: its coordinator
 * 0 makes it and finishes first, the others only drop what they pinned). */
static bool worker_cache(const struct txn_coord *c)
{
	return !((const struct crest_db *)c->w->db->proto_priv)->node_cache;
}

static int crest_coord_init(struct txn_coord *c)
{
	const struct crest_db *d = c->w->db->proto_priv;
	struct crest_coord *cc = c->priv;

	cc->logbuf = aligned_alloc(64, c->w->db->st.sb.log_slot_bytes);
	if (!cc->logbuf)
		return -ENOMEM;
	if (!d->localized)
		return 0;
	if (!worker_cache(c)) {
		cc->cache = d->cache;
		return 0;
	}
	if (c != &c->w->coords[0]) {
		cc->cache = ((struct crest_coord *)c->w->coords[0].priv)->cache;
		return 0;
	}
	return crest_cache_create(&cc->cache, false);
}

/* Its pins go under the node's cache lock: other workers of the node may still use them. (A
 * worker's own cache may be gone already: its coordinator 0 finishes first.) */
static void crest_coord_fini(struct txn_coord *c)
{
	struct crest_coord *cc = c->priv;
	struct crest_cache *node = c->w && worker_cache(c) ? NULL : cc->cache;

	free(cc->logbuf);
	cc->logbuf = NULL;
	crest_cache_lock(node);
	for (uint32_t i = 0; i < cc->npins; i++)
		crest_lver_put(cc->pins[i]);
	crest_cache_unlock(node);
	free(cc->pins);
	cc->pins = NULL;
	cc->npins = 0;
	if (c->w && c == &c->w->coords[0] && worker_cache(c))
		crest_cache_destroy(cc->cache);
	cc->cache = NULL;
}

#define CREST_PROTO_OPS(proto_name, proto_db_init)                                                 \
	{                                                                                          \
		.size = sizeof(struct txn_proto_ops),                                              \
		.name = (proto_name),                                                              \
		.codec = REMORA_CODEC_CELL,                                                        \
		.flags = REMORA_PROTO_NEEDS_MCAS,                                                  \
		.db_init = (proto_db_init),                                                        \
		.db_fini = crest_db_fini,                                                          \
		.begin = crest_begin,                                                              \
		.fetch = crest_fetch,                                                              \
		.write = crest_write,                                                              \
		.insert = crest_insert,                                                            \
		.remove = crest_remove,                                                            \
		.commit = crest_commit,                                                            \
		.abort = crest_abort,                                                              \
		.tx_priv_size = sizeof(struct crest_tx),                                           \
		.obj_priv_size = sizeof(struct crest_obj),                                         \
		.coord_priv_size = sizeof(struct crest_coord),                                     \
		.coord_init = crest_coord_init,                                                    \
		.coord_fini = crest_coord_fini,                                                    \
		.recover = crest_recover_cluster,                                                  \
	}

const struct txn_proto_ops txn_proto_crest = CREST_PROTO_OPS("crest", crest_db_init);
const struct txn_proto_ops txn_proto_crest_record =
	CREST_PROTO_OPS("crest_record", crest_record_db_init);
