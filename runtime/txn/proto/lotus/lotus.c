/* SPDX-License-Identifier: MIT */
/*
 * LOTUS over CVTs (full record per version). A read-write transaction, no conflict, cached
 * addresses (docs/lotus.md):
 *
 *   begin       T_start from the timestamp service (clock: no verb)
 *   lock        every lock of the phase, BEFORE any READ: a CPU CAS in this node's lock table
 *               for keys of shards it owns, one batched RPC per other owner node
 *   execution   1 RTT: READ of each CVT from its primary (one doorbell)
 *   log         1 RTT: the new cells marked INVISIBLE to every replica and the log to f+1
 *               log servers, one doorbell
 *   T_commit    the timestamp service
 *   visible     1 RTT: the new cells again, stamped T_commit, to every replica
 *   unlock      CPU CAS locally, one RPC per other owner node
 *
 * No atomic verb ever reaches a memory node on this path (inserts still publish their index
 * slot with the index's own CAS). A read-only transaction (REMORA_TX_READ_ONLY) takes no lock:
 * it reads the newest version below T_start, and waits (bounded) on an INVISIBLE cell, since
 * that writer may have taken a T_commit below our T_start.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster/evlog.h"
#include "config/env.h"
#include "lotus.h"
#include "reshard.h"
#include "txn/batch.h"

#define LOTUS_GC_NS 500000000ull /* inline GC: versions older than this are reclaimed */
#define LOTUS_WAITS 64u        /* re-READs over an INVISIBLE cell or a torn image */
#define LOTUS_ROUNDS_MAX 128u
#define LOTUS_INSERT_ATTEMPTS 8u

static inline struct lotus_tx *ltx(const struct remora_tx *tx)
{
	return tx->priv;
}

static inline struct lotus_db *ldb(const struct remora_tx *tx)
{
	return ldb_of(txn_db(tx));
}

static uint64_t now_ns(void)
{
	return lotus_clock_ns(CLOCK_MONOTONIC);
}

/* REMORA_LOTUS_SLOW: the transaction takes ns longer; the coordinator yields meanwhile, so
 * the worker's other coordinators and the lock requests it serves go on. */
static void delay_ns(uint64_t ns)
{
	uint64_t end = now_ns() + ns;

	while (now_ns() < end)
		remora_yield();
}

/* ---- locks ----------------------------------------------------------------------------- */

/* Whether o needs a lock it does not hold: W for what it writes, R for what it reads (SR). */
static bool lock_wanted(const struct remora_tx *tx, const struct txn_obj *o)
{
	if (tx->flags & REMORA_TX_READ_ONLY)
		return false;
	if (o->flags & OBJ_WANT_RW)
		return LO(o)->mode != 2;
	return ldb(tx)->iso == MOTOR_SR && LO(o)->mode == 0;
}

static bool is_local(const struct remora_tx *tx, const struct txn_obj *o)
{
	return LO(o)->owner == txn_db(tx)->cn_id;
}

static void local_unlock(struct remora_tx *tx, struct txn_obj *o)
{
	lotus_unhold(ldb(tx), tx->c->id, tx->id, o->hash, LO(o)->mode == 2);
	LO(o)->mode = 0;
}

/* ---- index-bucket locks (inserts) ------------------------------------------------------- */

/*
 * An insert locks the index bucket it publishes its slot in, and the slot then goes out as a
 * plain WRITE: no atomic verb, even for inserts. The bucket is locked like a key, through a
 * stand-in object outside tx->objs: key = the bucket's number, so its shard is that number's
 * low 12 bits and its owner comes from the shard map (decision 10, docs/lotus.md), hashed
 * apart from every table's keys. The key's home bucket is asked in the key's own lock phase,
 * before the lookup READs it; the lock goes once the slot is out (or with the transaction).
 */
static void bkt_init(struct remora_tx *tx, const struct txn_obj *o, uint64_t b,
		     struct lotus_bkt *k)
{
	memset(k, 0, sizeof(*k));
	k->o.priv = &k->lo;
	k->o.table = o->table;
	k->o.key = b;
	k->o.hash = store_key_hash(REMORA_MAX_TABLES + o->table, b);
	k->o.flags = OBJ_WANT_RW;
	k->lo.owner = lotus_owner(ldb(tx), (uint32_t)(b % LOTUS_SHARDS));
}

static void unlock_objs(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n);

/* Gives back o's home-bucket lock, if it has one. */
static void bkt_release(struct remora_tx *tx, struct txn_obj *o)
{
	struct lotus_bkt *k = LO(o)->bkt;
	struct txn_obj *p;

	if (!k)
		return;
	LO(o)->bkt = NULL;
	LO(o)->bkt_fresh = false;
	p = &k->o;
	unlock_objs(tx, &p, 1);
}

/* Whether o's lock phase asks its home bucket too: an insert before its lookup. */
static bool bkt_wanted(const struct remora_tx *tx, const struct txn_obj *o)
{
	return (o->flags & OBJ_INSERTING) && !(o->flags & OBJ_RESOLVED) && !LO(o)->bkt &&
	       !(tx->flags & REMORA_TX_READ_ONLY) && !txb_mut(tx, MUT_LOTUS_NO_BUCKET_LOCK);
}

/*
 * objs[0..n-1] and, behind them, the home-bucket stand-ins of the inserts among them (made
 * here, in the arena); *m: how many in all. NULL: out of memory.
 */
static struct txn_obj **with_buckets(struct remora_tx *tx, struct txn_obj *const *objs,
				     unsigned n, unsigned *m)
{
	struct txn_obj **all = txn_arena_alloc(&tx->c->arena, 2 * n * sizeof(*all));

	if (!all)
		return NULL;
	memcpy(all, objs, n * sizeof(*all));
	*m = n;
	for (unsigned i = 0; i < n; i++) {
		struct txn_obj *o = objs[i];
		struct lotus_bkt *k;

		if (!bkt_wanted(tx, o))
			continue;
		k = txn_arena_alloc(&tx->c->arena, sizeof(*k));
		if (!k)
			return NULL;
		bkt_init(tx, o, store_range(o->hash, o->t->ent.nbuckets), k);
		LO(o)->bkt = k;
		all[(*m)++] = &k->o;
	}
	return all;
}

/* Whether the membership view declares compute node cn dead (the watchdog's view). */
static bool cn_gone(uint16_t cn)
{
	return cn < 64 && (txn_cn_gone() >> cn & 1);
}

/* Gives back every lock of objs[0..n-1] (all of tx: tx->objs, which ends the transaction). */
static void unlock_objs(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		bkt_release(tx, objs[i]);
	for (unsigned i = 0; i < n; i++)
		if (LO(objs[i])->mode > 0 && is_local(tx, objs[i]))
			local_unlock(tx, objs[i]);
	for (uint16_t cn = 0; cn < ldb(tx)->ncn; cn++)
		if (cn != txn_db(tx)->cn_id && !cn_gone(cn)) /* a dead node's locks died with it */
			lotus_remote(tx, cn, objs, n, false);
	for (unsigned i = 0; i < n; i++) {
		LO(objs[i])->mode = 0;
		objs[i]->flags &= ~OBJ_LOCKED;
	}
	if (objs == tx->objs)
		lotus_active_end(ldb(tx), tx->c);
}

static int lotus_abort_with(struct remora_tx *tx, enum remora_abort_reason why)
{
	txn_point(tx, "txn.abort_unlock");
	unlock_objs(tx, tx->objs, tx->nobj);
	return txn_poison(tx, -REMORA_EABORT, why);
}

static int lotus_fail(struct remora_tx *tx, int rc)
{
	unlock_objs(tx, tx->objs, tx->nobj);
	return txn_poison(tx, rc, REMORA_ABORT_NONE);
}

/*
 * A commit that failed once its INVISIBLE cells and log may have landed: its locks stay
 * held, since a writer that took them would take the cells for a dead writer's orphans and
 * reuse them while a replica may already carry the stamped version; the coordinator stops
 * and the database counts as stranded, so the compute node ends as a crash does and
 * recovery decides from the log. The unlock_after_log mutation releases the locks.
 */
static int lotus_strand(struct remora_tx *tx, int rc)
{
	if (txb_mut(tx, MUT_UNLOCK_AFTER_LOG))
		return lotus_fail(tx, rc);
	((struct lotus_coord *)tx->c->priv)->stranded = rc;
	lotus_active_end(ldb(tx), tx->c); /* it writes nothing more; recovery decides */
	__atomic_store_n(&txn_db(tx)->stranded, true, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < tx->nobj; i++)
		if (tx->objs[i]->flags & OBJ_DIRTY) /* its CVT may hold cells the cache lacks */
			lotus_vt_drop(&ldb(tx)->vt, tx->objs[i]->hash);
	for (unsigned i = 0; i < tx->nobj; i++) {
		LO(tx->objs[i])->mode = 0; /* held on: nothing gives it back but recovery */
		tx->objs[i]->flags &= ~OBJ_LOCKED;
	}
	return txn_poison(tx, rc, REMORA_ABORT_NONE);
}

/* An object read under R that is now written: its R goes first (then W is asked like any). */
static void drop_upgrades(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct txn_obj *o = objs[i];

		if (!(o->flags & OBJ_WANT_RW) || LO(o)->mode != 1)
			continue;
		if (is_local(tx, o))
			local_unlock(tx, o);
		else
			lotus_remote(tx, LO(o)->owner, &objs[i], 1, false);
	}
}

/* Marks the objects that need a lock (mode 0 = ask); the others stay out of the requests. */
static int lock_local(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	int rc = 0;

	for (unsigned i = 0; i < n; i++) {
		struct txn_obj *o = objs[i];
		bool w = (o->flags & OBJ_WANT_RW) != 0;

		if (!lock_wanted(tx, o) || !is_local(tx, o) || rc)
			continue;
		rc = lotus_hold(ldb(tx), tx->c->id, tx->id, o->hash,
				(uint16_t)(o->key % LOTUS_SHARDS), w);
		if (!rc)
			LO(o)->mode = w ? 2 : 1;
	}
	return rc == -ESTALE ? -EBUSY : rc; /* handed over meanwhile: like a conflict */
}

/* -EBUSY when a lock of objs is wanted at node cn (dead: asked at once, no message), else 0. */
static int asks(struct remora_tx *tx, uint16_t cn, struct txn_obj *const *objs, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (LO(objs[i])->owner == cn && LO(objs[i])->mode == 0)
			return -EBUSY;
	(void)tx;
	return 0;
}

/* One batched request per other owner node (objects not wanting a lock are skipped). */
static int lock_remote(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	int rc = 0;

	for (unsigned i = 0; i < n; i++)
		if (!lock_wanted(tx, objs[i]) && LO(objs[i])->mode == 0)
			LO(objs[i])->mode = -2; /* not asked: the collector skips mode != 0 */
	for (uint16_t cn = 0; cn < ldb(tx)->ncn && !rc; cn++)
		if (cn != txn_db(tx)->cn_id)
			rc = cn_gone(cn) ? asks(tx, cn, objs, n) : lotus_remote(tx, cn, objs, n, true);
	for (unsigned i = 0; i < n; i++)
		if (LO(objs[i])->mode < 0)
			LO(objs[i])->mode = 0;
	return rc;
}

/* Whether a lock objs[] wants lies in a shard that is being handed over (nobody serves it). */
static bool unowned(const struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (LO(objs[i])->owner >= ldb(tx)->ncn && lock_wanted(tx, objs[i]))
			return true;
	return false;
}

/* The lock phase of one fetch: every lock granted, or the transaction aborts (no-wait). */
static int lock_phase(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	struct txn_obj **all;
	unsigned m;
	int rc;

	for (unsigned i = 0; i < n; i++)
		LO(objs[i])->owner = lotus_owner(ldb(tx), (uint32_t)(objs[i]->key % LOTUS_SHARDS));
	all = with_buckets(tx, objs, n, &m);
	if (!all)
		return lotus_fail(tx, txn_errf(tx, -ENOMEM, "lock: out of memory"));
	drop_upgrades(tx, objs, n);
	rc = unowned(tx, all, m) ? -EBUSY : lock_local(tx, all, m);
	if (!rc)
		rc = lock_remote(tx, all, m);
	for (unsigned i = 0; i < n; i++)
		if (LO(objs[i])->bkt)
			LO(objs[i])->bkt_fresh = LO(objs[i])->bkt->lo.mode == 2;
	for (unsigned i = 0; i < m; i++)
		if (LO(all[i])->mode > 0)
			all[i]->flags |= OBJ_LOCKED;
	if (rc == -EBUSY) {
		rc = lotus_abort_with(tx, REMORA_ABORT_LOCKED);
		/*
		 * A refused local lock costs no verb, so nothing here yields: a coordinator that
		 * retries at once would spin while the holder (a coroutine of this worker, or a
		 * remote one whose release waits in this worker's mailbox) never runs, and the
		 * node would answer no lock request of the other nodes either.
		 */
		if (!txb_mut(tx, MUT_LOTUS_ABORT_NO_YIELD))
			remora_yield();
		return rc;
	}
	if (rc)
		return lotus_fail(tx, txn_errf(tx, rc, "lock: %s", remora_strerror(rc)));
	txn_point(tx, "txn.locked");
	return 0;
}

static int lotus_before_resolve(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	if (txb_mut(tx, MUT_LOTUS_READ_BEFORE_LOCK))
		return 0; /* the bug: the locks are taken after the READs (lotus_fetch) */
	return lock_phase(tx, objs, n);
}

/* ---- reading a CVT ------------------------------------------------------------------------ */

struct lview {
	uint64_t key, newest_ts;
	uint32_t table;
	int newest, visible, oldest, invisible;
	int free;      /* a cell never used */
	int reclaimed; /* a cell whose version was reclaimed (REMORA_CVT_RECLAIMED) */
	bool torn;
};

static void lview_cell(struct lview *v, const struct codec_rec *r, int i, uint64_t below,
		       uint64_t *ots, uint64_t *vts)
{
	if (!(r->flags & REMORA_CVT_USED)) {
		int *first = (r->flags & REMORA_CVT_RECLAIMED) ? &v->reclaimed : &v->free;

		if (*first < 0)
			*first = i;
		return;
	}
	if (r->version & LOTUS_INV_BIT) {
		v->invisible = i;
		return;
	}
	if (v->newest < 0 || r->version > v->newest_ts)
		v->newest_ts = r->version, v->newest = i;
	if (v->oldest < 0 || r->version < *ots)
		*ots = r->version, v->oldest = i;
	if (r->version < below && (v->visible < 0 || r->version > *vts))
		*vts = r->version, v->visible = i;
}

static void lview(const struct remora_tx *tx, const struct txn_obj *o, uint64_t below,
		  struct lview *v)
{
	const struct codec_geom *g = &o->t->geom;
	uint64_t ots = 0, vts = 0;

	memset(v, 0, sizeof(*v));
	v->newest = v->visible = v->free = v->reclaimed = v->oldest = v->invisible = -1;
	for (unsigned i = 0; i < g->nparts; i++) {
		struct codec_rec r;

		if (txn_db(tx)->st.codec->decode(g, o->img, i, &r) == -EAGAIN)
			v->torn = true;
		if (i == 0)
			v->key = r.key, v->table = r.table;
		lview_cell(v, &r, (int)i, below, &ots, &vts);
	}
}

/* The object shows the version in `cell` (-1: absent). */
static void obj_show(struct remora_tx *tx, struct txn_obj *o, int cell)
{
	const struct codec_geom *g = &o->t->geom;
	struct codec_rec r = { 0 };

	if (cell >= 0)
		txn_db(tx)->st.codec->decode(g, o->img, (unsigned)cell, &r);
	LO(o)->ts = cell >= 0 ? r.version : 0;
	o->value = o->img + g->part_off[cell >= 0 ? cell : 0] + 16;
	o->flags |= OBJ_FETCHED;
	if (cell >= 0 && (r.flags & REMORA_REC_VALID))
		o->flags |= OBJ_FOUND;
	else
		o->flags &= ~OBJ_FOUND;
}

/* Under a lock: the newest version (INVISIBLE cells are orphans of a dead writer, reused).
 * SI: first-committer-wins against T_start for what we write. */
static int settle_locked(struct remora_tx *tx, struct txn_obj *o, const struct lview *v)
{
	if ((o->flags & OBJ_FETCHED) && v->newest >= 0 && v->newest_ts != LO(o)->ts)
		return lotus_abort_with(tx, REMORA_ABORT_VALIDATION); /* changed since read */
	if (ldb(tx)->iso == MOTOR_SI && (o->flags & OBJ_WANT_RW) && v->newest >= 0 &&
	    v->newest_ts >= ltx(tx)->t_start)
		return lotus_abort_with(tx, REMORA_ABORT_VALIDATION);
	obj_show(tx, o, v->newest);
	/* An orphan before a reclaimed cell: the reclaimed one keeps its mark for readers, and
	 * an orphan left behind would make every snapshot reader of the key wait and abort. */
	LO(o)->reuse = (uint32_t)(v->free >= 0	    ? v->free :
				  v->invisible >= 0 ? v->invisible :
				  v->reclaimed >= 0 ? v->reclaimed :
						      v->oldest);
	LO(o)->keep = (int8_t)v->newest;
	if (o->flags & OBJ_WANT_RW)
		o->flags |= OBJ_RW_DONE;
	return 0;
}

/* Without a lock: the newest version below T_start; never past an INVISIBLE cell. */
static int settle_snapshot(struct remora_tx *tx, struct txn_obj *o, const struct lview *v)
{
	if (v->invisible >= 0 && !txb_mut(tx, MUT_LOTUS_SKIP_INVISIBLE)) {
		/* Its writer may hold a T_commit below our T_start: wait for the stamp. */
		if (++LO(o)->waits > LOTUS_WAITS)
			return lotus_abort_with(tx, REMORA_ABORT_LOCKED);
		return -EAGAIN;
	}
	/*
	 * No version below T_start. The key was absent then only if nothing was ever overwritten
	 * or reclaimed: writers take never-used cells first, so while one is left, every cell
	 * that lost its version still carries the RECLAIMED mark.
	 */
	if (v->visible < 0 && v->newest >= 0 &&
	    (v->free < 0 || (v->reclaimed >= 0 && !txb_mut(tx, MUT_LOTUS_GC_UNMARKED))))
		return lotus_abort_with(tx, REMORA_ABORT_VALIDATION); /* ours was reclaimed */
	obj_show(tx, o, v->visible);
	return 0;
}

/* 0 done, -EAGAIN read again, 1 another key's record (look up again), or an abort. */
static int fetch_settle(struct remora_tx *tx, struct txn_obj *o)
{
	struct lview v;

	lview(tx, o, ltx(tx)->t_start, &v);
	if (v.torn)
		return ++LO(o)->waits > LOTUS_WAITS ?
			       lotus_abort_with(tx, REMORA_ABORT_VALIDATION) : -EAGAIN;
	if (v.key != o->key || v.table != o->table) {
		txn_unresolve(tx, o);
		return 1;
	}
	if (LO(o)->mode > 0)
		return settle_locked(tx, o, &v);
	return settle_snapshot(tx, o, &v);
}

/* ---- the VT cache (vtcache.h): locked objects of shards this node owns --------------------- */

static bool vt_owned(struct remora_tx *tx, const struct txn_obj *o)
{
	return LO(o)->mode > 0 && is_local(tx, o) && !txb_mut(tx, MUT_LOTUS_NO_VT_CACHE);
}

/* A hit fills o->img with no verb (only under a lock of ours: no writer runs meanwhile). */
static bool vt_get(struct remora_tx *tx, struct txn_obj *o)
{
	return vt_owned(tx, o) && lotus_vt_get(&ldb(tx)->vt, o->hash, o->table, o->key, o->off,
					       o->img, o->t->geom.stride);
}

static void vt_put(struct remora_tx *tx, const struct txn_obj *o, const unsigned char *img)
{
	lotus_vt_put(&ldb(tx)->vt, o->hash, o->table, o->key, o->off, img, o->t->geom.stride);
}

static bool needs_read(const struct txn_obj *o)
{
	bool want_rw = (o->flags & OBJ_WANT_RW) && !(o->flags & OBJ_RW_DONE);

	return (o->flags & OBJ_HAVE_REC) && (!(o->flags & OBJ_FETCHED) || want_rw);
}

/* One round: a READ of every CVT still needed, one doorbell; then settle each. */
static int fetch_round(struct remora_tx *tx, struct txb *b, struct txn_obj *const *objs,
		       unsigned n, bool lock_late, bool *again, bool *more)
{
	bool *todo = txn_scratch(tx->c, TXN_SCRATCH_STEPS, n * sizeof(*todo));
	int rc;

	if (!todo)
		return lotus_fail(tx, -ENOMEM);
	*more = false;
	for (unsigned i = 0; i < n; i++) {
		todo[i] = needs_read(objs[i]);
		LO(objs[i])->vt_hit = todo[i] && !lock_late && vt_get(tx, objs[i]);
		if (todo[i])
			LO(objs[i])->img_locked = !lock_late && LO(objs[i])->mode > 0;
		if (todo[i] && !LO(objs[i])->vt_hit)
			txb_read(tx, b, objs[i]->primary, objs[i]->off, objs[i]->img,
				 objs[i]->t->geom.stride);
	}
	/* Served from the cache alone: no verb parks this coroutine, so let the others run
	 * (and this worker answer other nodes' lock requests), as a refused lock does. */
	if (!b->n)
		remora_yield();
	rc = txb_exec(tx, b, "fetch");
	if (rc)
		return lotus_fail(tx, rc);
	if (lock_late) {
		rc = lock_phase(tx, objs, n); /* the bug: the images predate the locks */
		if (rc)
			return rc;
	}
	for (unsigned i = 0; i < n; i++) {
		if (!todo[i])
			continue;
		rc = fetch_settle(tx, objs[i]);
		if (rc == 0 && !lock_late && !LO(objs[i])->vt_hit && vt_owned(tx, objs[i]))
			vt_put(tx, objs[i], objs[i]->img);
		if (rc == 1)
			*again = true;
		else if (rc == -EAGAIN)
			*more = true;
		else if (rc)
			return rc;
	}
	return 0;
}

static int lotus_fetch(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	bool again = false, more = true;
	struct txb b;
	int rc;

	if (txb_init(tx, &b, txb_need(tx)))
		return lotus_fail(tx, -ENOMEM);
	for (unsigned round = 0; more; round++) {
		if (round == LOTUS_ROUNDS_MAX)
			return lotus_fail(tx, txn_errf(tx, -EIO, "fetch: no progress"));
		rc = fetch_round(tx, &b, objs, n,
				 round == 0 && txb_mut(tx, MUT_LOTUS_READ_BEFORE_LOCK), &again, &more);
		if (rc)
			return rc;
	}
	return again ? -EAGAIN : 0;
}

/* ---- writes ---------------------------------------------------------------------------- */

static int lotus_write(struct remora_tx *tx, struct txn_obj *o, const void *value)
{
	return txn_stage_write(tx, o, value) ? lotus_fail(tx, -ENOMEM) : 0;
}

static int lotus_remove(struct remora_tx *tx, struct txn_obj *o)
{
	return txn_stage_remove(tx, o) ? lotus_fail(tx, -ENOMEM) : 0;
}

/* Every cell of a CVT for o's key, none used (a placeholder; no lock word: locks are CN's). */
static void cvt_empty(const struct store_db *st, const struct txn_obj *o, unsigned char *img)
{
	struct codec_rec r = { .key = o->key, .table = o->table };

	for (unsigned i = 0; i < o->t->geom.nparts; i++)
		st->codec->encode(&o->t->geom, img, i, &r);
}

/* The new record's images: the same empty CVT everywhere (its lock lives in a lock table). */
static void insert_fill(struct remora_tx *tx, struct txn_obj *o, unsigned char *bimg)
{
	cvt_empty(&txn_db(tx)->st, o, o->img);
	memcpy(bimg, o->img, o->t->geom.stride);
}

/* 0, -EBUSY (held by another transaction: no-wait), or an error. */
static int bkt_lock(struct remora_tx *tx, struct lotus_bkt *k)
{
	struct txn_obj *p = &k->o;
	int rc;

	if (txb_mut(tx, MUT_LOTUS_NO_BUCKET_LOCK))
		return 0;
	if (k->lo.owner >= ldb(tx)->ncn || cn_gone(k->lo.owner))
		return -EBUSY; /* handed over, or its owner died: nobody serves it now */
	if (!is_local(tx, p))
		return lotus_remote(tx, k->lo.owner, &p, 1, true);
	rc = lotus_hold(ldb(tx), tx->c->id, tx->id, p->hash, (uint16_t)(p->key % LOTUS_SHARDS),
			true);
	if (!rc)
		k->lo.mode = 2;
	return rc == -ESTALE ? -EBUSY : rc;
}

/* Under the bucket's lock: READs bucket b again and points o->slot_off at its first empty
 * slot (0: the bucket filled since the lookup). */
static int bkt_first_free(struct remora_tx *tx, struct txn_obj *o, uint64_t b)
{
	struct store_bucket *bk = txn_arena_alloc(&tx->c->arena, sizeof(*bk));
	uint64_t boff = store_bucket_off(o->t, b);
	struct txb tb;
	int rc;

	if (!bk || txb_init(tx, &tb, 1))
		return -ENOMEM;
	txb_read(tx, &tb, o->primary, boff, bk, sizeof(*bk));
	rc = txb_exec(tx, &tb, "insert: bucket");
	o->slot_off = 0;
	for (unsigned i = 0; !rc && i < REMORA_STORE_BUCKET_SLOTS; i++)
		if (bk->slot[i] == 0) {
			o->slot_off = boff + 8 + 8ull * i;
			break;
		}
	return rc;
}

/*
 * The slot is in bucket b, whose lock was not held when the lookup READ it (a bucket past the
 * home one, or a lookup from an earlier fetch): lock b now and READ it again.
 */
static int claim_relocked(struct remora_tx *tx, struct txn_obj *o, uint64_t b, bool *won)
{
	struct lotus_bkt k;
	struct txn_obj *p = &k.o;
	int rc;

	bkt_init(tx, o, b, &k);
	rc = bkt_lock(tx, &k);
	if (rc == -EBUSY) {
		unlock_objs(tx, &p, 1); /* a remote grant may have come without its answer */
		return lotus_abort_with(tx, REMORA_ABORT_LOCKED);
	}
	if (!rc)
		rc = bkt_first_free(tx, o, b);
	txn_point(tx, "txn.insert_slot");
	if (!rc && o->slot_off)
		rc = txn_insert_claim(tx, o, insert_fill, 0, &LO(o)->slot_word, NULL, won);
	unlock_objs(tx, &p, 1);
	return rc;
}

/*
 * Claims a record slot for an absent key (held under our W lock) and publishes it under the
 * lock of the slot's bucket. When the lookup READ the home bucket under its lock (asked with
 * the key), the empty slot it saw is still empty: no second READ. Lost (*won false) when the
 * bucket filled since the lookup: the caller looks the key up again.
 */
static int insert_claim(struct remora_tx *tx, struct txn_obj *o, bool *won)
{
	uint64_t b = (o->slot_off - o->t->ent.index_off) / sizeof(struct store_bucket);
	const struct lotus_bkt *k = LO(o)->bkt;
	int rc;

	*won = false;
	if (!o->slot_off) /* the index is full: the claim says so, before any verb */
		return txn_insert_claim(tx, o, insert_fill, 0, &LO(o)->slot_word, NULL, won);
	if (k && LO(o)->bkt_fresh && k->o.key == b) {
		txn_point(tx, "txn.insert_slot");
		rc = txn_insert_claim(tx, o, insert_fill, 0, &LO(o)->slot_word, NULL, won);
	} else {
		rc = claim_relocked(tx, o, b, won);
	}
	if (rc != -REMORA_EABORT)
		bkt_release(tx, o);
	return rc;
}

/* A won claim: an empty CVT, no version yet. */
static void insert_fresh(struct remora_tx *tx, struct txn_obj *o)
{
	(void)tx;
	LO(o)->ts = 0;
	LO(o)->reuse = 0;
	LO(o)->keep = -1;
	o->value = o->img + o->t->geom.part_off[0] + 16;
}

static void lotus_release(struct remora_tx *tx)
{
	unlock_objs(tx, tx->objs, tx->nobj);
}

static int lotus_insert(struct remora_tx *tx, struct txn_obj *o, const void *value)
{
	static const struct txn_insert_ops ops = {
		.attempts = LOTUS_INSERT_ATTEMPTS, .claim = insert_claim, .fresh = insert_fresh,
		.release = lotus_release,
	};

	return txn_insert(tx, o, value, &ops);
}

/* ---- commit ---------------------------------------------------------------------------- */

/*
 * Inline GC (digest 3.7): cells other than the one written and the newest version whose
 * version is more than LOTUS_GC_NS older than T_start are reclaimed in the commit's WRITE
 * (they keep their timestamp, marked RECLAIMED). Versions live inline in the cells, so there
 * is no record to free; what GC buys is that a writer takes such a cell before overwriting
 * the oldest live one. The newest version is kept whatever its age: until our stamp lands it
 * is the only committed one. Needs the clock service (counter timestamps are not time).
 */
static void cells_reclaim(struct remora_tx *tx, struct txn_obj *o)
{
	const struct codec_geom *g = &o->t->geom;
	const struct codec_ops *cd = txn_db(tx)->st.codec;

	LO(o)->gc = 0;
	if (txn_db(tx)->ts.kind != REMORA_TS_CLOCK || ltx(tx)->t_start < LOTUS_GC_NS)
		return;
	for (unsigned i = 0; i < g->nparts; i++) {
		struct codec_rec r;

		if (i == LO(o)->reuse || (int)i == LO(o)->keep ||
		    cd->decode(g, LO(o)->cell, i, &r) || !(r.flags & REMORA_CVT_USED) ||
		    (r.version & LOTUS_INV_BIT) || r.version > ltx(tx)->t_start - LOTUS_GC_NS)
			continue;
		r.flags = REMORA_CVT_RECLAIMED;
		cd->encode(g, LO(o)->cell, i, &r);
		LO(o)->gc |= (uint8_t)(1u << i);
	}
}

/* The bytes of o's CVT the commit writes: its cell and the cells it reclaimed. */
static void cells_span(const struct txn_obj *o, uint32_t *at, uint32_t *len)
{
	unsigned lo = LO(o)->reuse, hi = LO(o)->reuse;
	uint32_t hi_at, hi_len;

	for (unsigned i = 0; i < 8; i++)
		if (LO(o)->gc & (1u << i)) {
			lo = i < lo ? i : lo;
			hi = i > hi ? i : hi;
		}
	codec_cvt_span(&o->t->geom, lo, at, len);
	codec_cvt_span(&o->t->geom, hi, &hi_at, &hi_len);
	*len = hi_at + hi_len - *at;
}

/* o's new cell stamped ts, encoded into the CVT image MO->cell (built once, then restamped). */
static int cell_stamp(struct remora_tx *tx, struct txn_obj *o, uint64_t ts)
{
	const struct codec_geom *g = &o->t->geom;
	struct codec_rec r = {
		.version = ts, .key = o->key, .table = o->table,
		.flags = (o->flags & OBJ_DELETE) ? REMORA_REC_DELETED : REMORA_REC_VALID,
		.value = o->newval,
	};

	if (!LO(o)->cell) {
		LO(o)->cell = txn_arena_alloc(&tx->c->arena, g->stride);
		if (!LO(o)->cell)
			return -ENOMEM;
		memcpy(LO(o)->cell, o->img, g->stride);
		cells_reclaim(tx, o);
	}
	txn_db(tx)->st.codec->encode(g, LO(o)->cell, LO(o)->reuse, &r);
	return 0;
}

/* The new cells of every written object to every replica. */
static void cells_post(struct remora_tx *tx, struct txb *b)
{
	const struct store_db *st = &txn_db(tx)->st;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		uint32_t at, len;

		if (!(o->flags & OBJ_DIRTY))
			continue;
		cells_span(o, &at, &len);
		for (unsigned k = 0; k < st->replicas; k++)
			txb_write(tx, b, store_replica(st, o->primary, k), o->off + at,
				  LO(o)->cell + at, len, txb_durable(tx, MUT_NO_COMMIT_PERSIST));
	}
}

/*
 * The log: metadata only, per written object {table, op, key, CVT offset, cell} and no image
 * (the INVISIBLE cell itself is the redo, its older cells the undo). T_commit is not known
 * yet: recovery (not built) would roll forward a log any of whose cells is visible.
 */
static int log_post(struct remora_tx *tx, struct txb *b)
{
	const struct store_db *st = &txn_db(tx)->st;
	unsigned char *buf = ((struct lotus_coord *)tx->c->priv)->logbuf;
	struct store_log_hdr *h = (void *)buf;
	uint32_t at = sizeof(*h);
	uint16_t n = 0;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		struct store_log_ent e = { 0 };

		if (!(o->flags & OBJ_DIRTY))
			continue;
		if (at + sizeof(e) > st->sb.log_slot_bytes)
			return txn_errf(tx, -REMORA_EFULL, "log: the write set overflows the slot");
		e.table = o->table;
		e.op = (o->flags & OBJ_INSERT) ? REMORA_STORE_LOG_INS :
		       (o->flags & OBJ_DELETE) ? REMORA_STORE_LOG_DEL : REMORA_STORE_LOG_UPD;
		e.key = o->key;
		e.off = o->off;
		e.old_version = LO(o)->reuse;
		memcpy(buf + at, &e, sizeof(e));
		at += sizeof(e);
		o->flags |= OBJ_LOGGED;
		n++;
	}
	memset(h, 0, sizeof(*h));
	h->tx_id = tx->id;
	h->flags = REMORA_STORE_LOG_VALID;
	h->coord = tx->c->id;
	h->n = n;
	h->len = at;
	h->codec = LOTUS_LOG_CODEC;
	h->csum = store_csum(REMORA_STORE_LOG_CSUM_SEED, h, at);
	for (unsigned i = 0; i < st->replicas; i++)
		txb_write(tx, b, store_log_server(st, tx->c->id, i),
			  store_log_off(st, tx->c->log_slot), buf, at,
			  txb_durable(tx, MUT_NO_LOG_PERSIST));
	return 0;
}

/* Step 1: records with INVISIBLE cells and the log, one round trip. */
static int commit_invisible(struct remora_tx *tx, struct txb *b)
{
	int rc;

	for (unsigned i = 0; i < tx->nobj; i++)
		if ((tx->objs[i]->flags & OBJ_DIRTY) &&
		    cell_stamp(tx, tx->objs[i], LOTUS_INV_BIT | tx->id))
			return lotus_fail(tx, -ENOMEM);
	cells_post(tx, b);
	rc = log_post(tx, b);
	if (rc)
		return lotus_fail(tx, rc);
	txn_point(tx, "txn.log");
	rc = txb_exec(tx, b, "log");
	if (rc)
		return lotus_strand(tx, rc); /* cells or log may have landed */
	txn_point(tx, "txn.logged");
	return 0;
}

/* The visible WRITEs; in two doorbells around txn.commit_mid when a crash test asks for it
 * (REMORA_DIE_AT=txn.commit_mid: one replica stamped, the others still INVISIBLE). */
static int visible_exec(struct remora_tx *tx, struct txb *b)
{
	int rc;

	if (!txn_db(tx)->split_commit || b->n < 2)
		return txb_exec(tx, b, "commit");
	rc = store_exec(txn_chan(tx), b->wrs, 1);
	if (!rc) {
		txn_point(tx, "txn.commit_mid");
		rc = store_exec(txn_chan(tx), b->wrs + 1, b->n - 1);
	}
	b->n = 0;
	return rc ? txn_errf(tx, rc, "commit: %s", remora_strerror(rc)) : 0;
}

/* Steps 2-3: T_commit, then the cells stamped with it (one round trip). */
static int commit_visible(struct remora_tx *tx, struct txb *b)
{
	int rc = ts_next(&txn_db(tx)->ts, txn_chan(tx), &ltx(tx)->t_commit);

	if (rc)
		return lotus_strand(tx, txn_errf(tx, rc, "commit timestamp: %s",
						 remora_strerror(rc)));
	txn_point(tx, "txn.stamped");
	for (unsigned i = 0; i < tx->nobj; i++)
		if (tx->objs[i]->flags & OBJ_DIRTY)
			cell_stamp(tx, tx->objs[i], ltx(tx)->t_commit);
	if (txb_mut(tx, MUT_LOTUS_EARLY_UNLOCK))
		unlock_objs(tx, tx->objs, tx->nobj); /* the bug: others lock before the stamp */
	cells_post(tx, b);
	txn_point(tx, "txn.commit_write");
	rc = visible_exec(tx, b);
	if (rc)
		return lotus_strand(tx, rc);
	txn_point(tx, "txn.unlock");
	return 0;
}

static bool tx_writes(const struct remora_tx *tx)
{
	for (unsigned i = 0; i < tx->nobj; i++)
		if (tx->objs[i]->flags & OBJ_DIRTY)
			return true;
	return false;
}

/*
 * Whether tx holds a lock at a node declared dead: its lock table died, and a restarted node
 * could grant the lock again. Checked before the first WRITE: a transaction past it finishes
 * (the restarted node serves only once such transactions are over, reshard.c).
 */
static bool holds_at_gone(const struct remora_tx *tx)
{
	for (unsigned i = 0; i < tx->nobj; i++)
		if (LO(tx->objs[i])->mode > 0 && !is_local(tx, tx->objs[i]) &&
		    cn_gone(LO(tx->objs[i])->owner))
			return true;
	return false;
}

static int lotus_commit(struct remora_tx *tx)
{
	struct txb b;
	int rc;

	if (txb_init(tx, &b, txb_need(tx)))
		return lotus_fail(tx, -ENOMEM);
	if (tx_writes(tx) && holds_at_gone(tx))
		return lotus_abort_with(tx, REMORA_ABORT_LOCKED);
	if (tx_writes(tx)) {
		rc = commit_invisible(tx, &b);
		if (!rc)
			rc = commit_visible(tx, &b);
		if (rc)
			return rc;
		/* Under our W locks still: the cached images become the committed ones. */
		for (unsigned i = 0; i < tx->nobj; i++) {
			struct txn_obj *o = tx->objs[i];

			if (!(o->flags & OBJ_DIRTY))
				continue;
			if (vt_owned(tx, o) && LO(o)->img_locked)
				vt_put(tx, o, LO(o)->cell);
			else /* unlocked early (a mutation) or read before the lock: not ours to keep */
				lotus_vt_drop(&ldb(tx)->vt, o->hash);
		}
	}
	unlock_objs(tx, tx->objs, tx->nobj);
	if (ltx(tx)->t_begin) /* the resharder's metric: committed transactions' latency */
		lotus_rs_count(ldb(tx), tx->c->w->index, now_ns() - ltx(tx)->t_begin);
	return 0;
}

static void lotus_abort(struct remora_tx *tx)
{
	unlock_objs(tx, tx->objs, tx->nobj);
}

static int lotus_begin(struct remora_tx *tx)
{
	int stranded = ((struct lotus_coord *)tx->c->priv)->stranded;
	int rc;

	if (stranded)
		return txn_errf(tx, stranded,
				"coordinator %u stopped: a commit of it failed after its log went "
				"out (%s); its locks and log are left to recovery",
				(unsigned)tx->c->id, remora_strerror(stranded));
	ltx(tx)->t_begin = ldb(tx)->rs ? now_ns() : 0;
	lotus_active_begin(ldb(tx), tx->c);
	lotus_dead_drop(ldb(tx), tx->c->w->index);
	if (ldb(tx)->slow_ns)
		delay_ns(ldb(tx)->slow_ns);
	rc = ts_next(&txn_db(tx)->ts, txn_chan(tx), &ltx(tx)->t_start);
	ltx(tx)->t_commit = 0;
	if (rc)
		lotus_active_end(ldb(tx), tx->c);
	return rc ? txn_errf(tx, rc, "start timestamp: %s", remora_strerror(rc)) : 0;
}

/* ---- setup ----------------------------------------------------------------------------- */

/* Shard s's owner: s mod the compute nodes, so that the occupied shards (low key values:
 * warehouses, subscribers, accounts counted from 0 or 1) spread over every node. */
static void shard_map_init(struct lotus_db *l)
{
	for (unsigned s = 0; s < LOTUS_SHARDS; s++)
		l->shard_cn[s] = (uint16_t)(s % l->ncn);
}

static int lotus_db_check(struct remora_db *db, struct lotus_db *l)
{
	const char *iso = db->isolation[0] ? db->isolation : cfg_param_env(REMORA_P_ISOLATION);

	if (motor_isolation_parse(iso, &l->iso)) {
		snprintf(db->errmsg, sizeof(db->errmsg), "isolation '%s': use sr or si", iso);
		return -REMORA_ECONFIG;
	}
	for (unsigned i = 0; i < REMORA_MAX_TABLES; i++)
		if (db->st.tab[i].geom.full_off) {
			snprintf(db->errmsg, sizeof(db->errmsg),
				 "lotus needs a full record per version: format without "
				 "REMORA_CVT_DELTA=1");
			return -REMORA_ECONFIG;
		}
	return 0;
}

/* REMORA_LOTUS_SLOW (fault injection): microseconds of busy time per transaction. */
static uint64_t slow_ns(void)
{
	const char *v = cfg_knob(CFG_KNOB_LOTUS_SLOW);

	return v ? strtoull(v, NULL, 10) * 1000u : 0;
}

/* The resharder, when the shards spread over several nodes (tools open with REMORA_CN=1 and
 * take no part); lotus_reshard_ms 0 leaves the handovers out. */
static int reshard_init(struct remora_db *db, struct lotus_db *l)
{
	uint64_t ms = 0;
	int rc = txn_db_param(db, REMORA_P_LOTUS_RESHARD_MS, &ms);

	if (rc || l->ncn < 2)
		return rc;
	return lotus_rs_start(db, l, (unsigned)ms);
}

static int lotus_db_init(struct remora_db *db)
{
	struct lotus_db *l = calloc(1, sizeof(*l));
	long ncn = strtol(cfg_param_env(REMORA_P_CN), NULL, 10);
	uint64_t bytes = 0, vt = 0;
	int rc;

	if (!l)
		return -ENOMEM;
	l->self = db->cn_id;
	l->slow_ns = slow_ns();
	l->per_cn = db->st.sb.coords_per_cn ? db->st.sb.coords_per_cn : 1;
	l->per_worker = db->coords_per_worker;
	l->serving = true; /* a resharder makes a restarted node wait (reshard.c) */
	rc = lotus_db_check(db, l);
	/* every node must compute the same map: a node beyond ncn owns no shard */
	l->ncn = ncn > 0 && ncn <= 64 ? (unsigned)ncn : 1;
	if (!rc)
		rc = txn_db_param(db, REMORA_P_LOTUS_LOCK_TABLE, &bytes);
	if (!rc)
		rc = lotus_lt_init(&l->lt, bytes);
	if (!rc)
		rc = txn_db_param(db, REMORA_P_LOTUS_VT_CACHE, &vt);
	if (!rc)
		rc = lotus_vt_init(&l->vt, vt);
	l->vt_no_drop = txn_db_mut(db, MUT_LOTUS_VT_NO_DROP);
	l->lt.no_rescan = txn_db_mut(db, MUT_LOTUS_FINDMATCH_RACE);
	l->done_keeps_holds = txn_db_mut(db, MUT_LOTUS_DONE_KEEPS_HOLDS);
	l->keep_dead_holds = txn_db_mut(db, MUT_LOTUS_ONLINE_KEEPS_HOLDS);
	l->held = rc ? NULL : calloc(65536, sizeof(*l->held));
	if (!rc && !l->held)
		rc = -ENOMEM;
	if (rc) {
		lotus_vt_fini(&l->vt);
		lotus_lt_fini(&l->lt);
		free(l);
		return rc;
	}
	shard_map_init(l);
	db->proto_priv = l;
	rc = reshard_init(db, l);
	if (rc) {
		db->proto_priv = NULL;
		lotus_vt_fini(&l->vt);
		lotus_lt_fini(&l->lt);
		free(l->held);
		free(l);
	}
	return rc;
}

/*
 * At close every peer said DONE (its coordinators' holds went) or died (recovery dropped its
 * coordinators' holds): a hold left is a lock nobody will give back. Say so, one line.
 */
static void held_report(const struct remora_db *db, const struct lotus_db *l)
{
	uint64_t n = 0;

	for (unsigned i = 0; i < 65536; i++)
		if (l->held[i])
			n += l->held[i]->n;
	if (n)
		evlog(stderr, "cn", db->cn_id,
		      "lotus: %llu locks of other compute nodes' coordinators still held at close",
		      (unsigned long long)n);
}

static void lotus_db_fini(struct remora_db *db)
{
	struct lotus_db *l = db->proto_priv;

	if (!l)
		return;
	lotus_rs_stop(l);
	held_report(db, l);
	for (unsigned i = 0; i < 65536; i++)
		if (l->held[i]) {
			free(l->held[i]->e);
			free(l->held[i]);
		}
	free(l->held);
	lotus_vt_fini(&l->vt);
	lotus_lt_fini(&l->lt);
	free(l);
	db->proto_priv = NULL;
}

static int lotus_coord_init(struct txn_coord *c)
{
	struct lotus_coord *lc = c->priv;

	lc->logbuf = aligned_alloc(64, c->w->db->st.sb.log_slot_bytes);
	return lc->logbuf ? 0 : -ENOMEM;
}

static void lotus_coord_fini(struct txn_coord *c)
{
	if (c->priv)
		free(((struct lotus_coord *)c->priv)->logbuf);
}

/* Routing: a key's home is the owner of its shard (the table does not enter the shard). */
static int lotus_key_home(const struct remora_db *db, uint32_t table, uint64_t key,
			  uint16_t *cn)
{
	uint16_t owner = lotus_owner(ldb_of(db), (uint32_t)(key % LOTUS_SHARDS));

	(void)table;
	*cn = owner < ldb_of(db)->ncn ? owner : db->cn_id; /* handed over: run it here */
	return 0;
}

const struct txn_proto_ops txn_proto_lotus = {
	.size = sizeof(struct txn_proto_ops),
	.name = "lotus",
	.codec = REMORA_CODEC_CVT,
	.flags = REMORA_PROTO_NEEDS_TS | REMORA_PROTO_NEEDS_MSG,
	.db_init = lotus_db_init,
	.db_fini = lotus_db_fini,
	.begin = lotus_begin,
	.fetch = lotus_fetch,
	.write = lotus_write,
	.insert = lotus_insert,
	.remove = lotus_remove,
	.commit = lotus_commit,
	.abort = lotus_abort,
	.tx_priv_size = sizeof(struct lotus_tx),
	.obj_priv_size = sizeof(struct lotus_obj),
	.coord_priv_size = sizeof(struct lotus_coord),
	.coord_init = lotus_coord_init,
	.coord_fini = lotus_coord_fini,
	.before_resolve = lotus_before_resolve,
	.rpc_init = lotus_rpc_init,
	.worker_drain = lotus_worker_drain,
	.key_home = lotus_key_home,
	.tail_bytes = sizeof(struct lotus_rs_dir),
	.recover = lotus_recover_cluster,
	.recover_online = lotus_recover_online,
};
