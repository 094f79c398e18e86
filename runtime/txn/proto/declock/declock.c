/* SPDX-License-Identifier: MIT */
/*
 * Strict 2PL over the lock service (declock.h; docs/declock.md, section 8). Round trips of a
 * read-write transaction with cached addresses and no conflict:
 *
 *   locks      one acquisition per lock, in ascending lock order (before any index READ)
 *   execution  one READ per record, one doorbell
 *   log        the redo log, one WRITE per node holding a written record's replica
 *   commit     one WRITE per written record and replica
 *   release    one release per lock, after the commit WRITEs are acknowledged
 *
 * Locks are taken in ascending order, so waits never form a cycle. A fetch that needs a lock
 * below one already held (or an S lock held turned X) gives back every held lock from that
 * one up, takes the union again in order, and READs again what it had read under the locks it
 * gave back: a changed version (or a key now in the index) aborts the transaction.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "declock.h"
#include "txn/batch.h"
#include "transport/core.h"
#include "txn/proto/oocc/oocc.h"

#define DL_TORN_RETRIES 16u
#define DL_ROUNDS_MAX 64u
#define DL_INSERT_ATTEMPTS 8u

static inline struct dl_obj *OB(const struct txn_obj *o)
{
	return o->priv;
}

static inline struct dl_coord *dco(const struct remora_tx *tx)
{
	return tx->c->priv;
}

uint32_t dl_lock_of(uint32_t table, uint64_t key)
{
	uint64_t z = key * 0x9e3779b97f4a7c15ull ^ ((uint64_t)table << 56 | table);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (uint32_t)((z ^ (z >> 31)) % DL_LOCKS);
}

/* ---- releasing --------------------------------------------------------------------------- */

/*
 * Gives back holds[from ..]; a failed release counts as released (lock.h). Highest lock first
 * (holds are sorted ascending): a release may reset its lock and wait until every node's
 * holders of it leave, and one of those may wait for a lock of ours. Acquisitions go upwards,
 * so it can only wait for a higher one; given back first, every higher lock is free of us by
 * then. In ascending order that wait was a deadlock no timeout ended.
 */
static void release_from(struct remora_tx *tx, unsigned from)
{
	struct dl_coord *k = dco(tx);

	for (unsigned i = k->nholds; i-- > from;)
		lock_release(k->cli, &k->holds[i]);
	if (from < k->nholds)
		k->nholds = from;
}

static void release_all(struct remora_tx *tx)
{
	release_from(tx, 0);
}

static int abort_with(struct remora_tx *tx, enum remora_abort_reason why)
{
	release_all(tx);
	return txn_poison(tx, -REMORA_EABORT, why);
}

static int fail(struct remora_tx *tx, int rc)
{
	release_all(tx);
	return txn_poison(tx, rc, REMORA_ABORT_NONE);
}

/* A commit WRITE failed: keep every lock (recovery decides), stop the coordinator. */
static int strand(struct remora_tx *tx, int rc)
{
	dco(tx)->stranded = rc;
	dco(tx)->nholds = 0;
	return txn_poison(tx, rc, REMORA_ABORT_NONE);
}

/* ---- taking locks in order ---------------------------------------------------------------- */

static int grow(void **p, unsigned *cap, unsigned n, size_t size)
{
	void *q;

	if (n <= *cap)
		return 0;
	q = realloc(*p, (size_t)n * size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = n;
	return 0;
}

static int need_cmp(const void *a, const void *b)
{
	const struct dl_need *x = a, *y = b;

	return x->lock < y->lock ? -1 : x->lock > y->lock;
}

/* Sorts need[0..n) and merges entries of one lock (X wins); returns the new count. */
static unsigned need_sort(struct dl_need *need, unsigned n)
{
	unsigned m = 0;

	qsort(need, n, sizeof(*need), need_cmp);
	for (unsigned i = 0; i < n; i++) {
		if (m && need[m - 1].lock == need[i].lock) {
			if (need[i].mode > need[m - 1].mode)
				need[m - 1].mode = need[i].mode;
			continue;
		}
		need[m++] = need[i];
	}
	return m;
}

/* The held mode of lock + 1 (0: not held). */
static unsigned held_mode(const struct dl_coord *k, uint32_t lock)
{
	for (unsigned i = 0; i < k->nholds; i++)
		if (k->holds[i].lock == lock)
			return k->holds[i].mode + 1u;
	return 0;
}

/*
 * Re-READs every object read under a lock at or above first (given back and taken again):
 * its record must carry the version it was read with, an absent key's index slot must still
 * be empty. Otherwise the transaction aborts.
 */
static int revalidate(struct remora_tx *tx, uint32_t first)
{
	const struct store_db *st = &txn_db(tx)->st;
	struct txb b;
	int rc;

	if (txb_mut(tx, MUT_DL_NO_REVALIDATE))
		return 0;
	if (txb_init(tx, &b, txb_need(tx)))
		return fail(tx, -ENOMEM);
	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];

		if (!(o->flags & OBJ_FETCHED) || dl_lock_of(o->table, o->key) < first)
			continue;
		if (!(o->flags & OBJ_HAVE_REC)) {
			if (!o->slot_off)
				return abort_with(tx, REMORA_ABORT_VALIDATION);
			OB(o)->check = ~0ull;
			txb_read(tx, &b, o->primary, o->slot_off, &OB(o)->check, 8);
			continue;
		}
		if (!OB(o)->again && !(OB(o)->again = txn_arena_alloc(&tx->c->arena,
								      o->t->geom.stride)))
			return fail(tx, -ENOMEM);
		txb_read(tx, &b, o->primary, o->off, OB(o)->again, o->t->geom.stride);
	}
	rc = txb_exec(tx, &b, "revalidate");
	if (rc)
		return fail(tx, rc);
	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		struct codec_rec r;

		if (!(o->flags & OBJ_FETCHED) || dl_lock_of(o->table, o->key) < first)
			continue;
		if (!(o->flags & OBJ_HAVE_REC)) {
			if (OB(o)->check)
				return abort_with(tx, REMORA_ABORT_VALIDATION);
			continue;
		}
		if (st->codec->decode(&o->t->geom, OB(o)->again, 0, &r) || r.key != o->key ||
		    r.table != o->table || r.version != OB(o)->version)
			return abort_with(tx, REMORA_ABORT_VALIDATION);
	}
	return 0;
}

static int settle(struct remora_tx *tx, struct txn_obj *o);

/*
 * The speculative READ (the FORD artifact's; docs/declock.md, section 8): the records of lock's
 * objects that are on the lock table's node and whose address is cached go in riders, READ
 * into their images in the acquisition's first doorbell. Returns how many (at most
 * LOCK_RIDERS_MAX); rid[] names their objects.
 */
static unsigned riders_for(struct remora_tx *tx, uint32_t lock, struct txn_obj *const *objs,
			   unsigned nobjs, struct remora_wr *wr, struct txn_obj **rid)
{
	struct remora_db *db = txn_db(tx);
	unsigned n = 0;

	if (txb_mut(tx, MUT_DL_NO_RIDE))
		return 0;
	for (unsigned i = 0; i < nobjs && n < LOCK_RIDERS_MAX; i++) {
		struct txn_obj *o = objs[i];
		uint64_t off;

		if (o->primary != 0 || (o->flags & (OBJ_FETCHED | OBJ_RESOLVED)) ||
		    dl_lock_of(o->table, o->key) != lock)
			continue;
		off = txn_cache_get(&db->cache, o->hash);
		if (!off || !store_rec_valid(o->t, off))
			continue;
		o->off = off;
		wr[n] = store_wr_read(&db->st, 0, off, o->img, o->t->geom.stride);
		rid[n++] = o;
	}
	return n;
}

/*
 * Riders that saw the grant: their objects are resolved (from the cache) and settled as a
 * fetch would. A torn image or another key's record is left to the fetch (unresolved again).
 */
static int take_riders(struct remora_tx *tx, struct txn_obj **rid, unsigned n, bool valid)
{
	for (unsigned i = 0; i < n; i++) {
		struct txn_obj *o = rid[i];
		int rc;

		if (!valid) {
			o->off = 0;
			continue;
		}
		o->flags |= OBJ_RESOLVED | OBJ_HAVE_REC | OBJ_CACHED;
		rc = settle(tx, o);
		if (rc == -EAGAIN) {
			OB(o)->retries = 0;
			continue; /* torn: the fetch READs it again */
		}
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Takes need[0..n) (sorted, above every hold) in order; objs may ride (riders_for). */
static int take(struct remora_tx *tx, const struct dl_need *need, unsigned n,
		struct txn_obj *const *objs, unsigned nobjs)
{
	struct dl_coord *k = dco(tx);
	struct remora_wr wr[LOCK_RIDERS_MAX];
	struct txn_obj *rid[LOCK_RIDERS_MAX];
	int rc;

	for (unsigned i = 0; i < n; i++) {
		unsigned nr = riders_for(tx, need[i].lock, objs, nobjs, wr, rid);
		enum lock_ride ride = LOCK_RIDE_NONE;

		rc = lock_acquire_riding(k->cli, need[i].lock, (enum lock_mode)need[i].mode,
					 &k->holds[k->nholds], wr, nr, &ride);
		if (rc)
			take_riders(tx, rid, nr, false); /* their offsets go back to unresolved */
		if (rc == -ETIMEDOUT)
			return abort_with(tx, REMORA_ABORT_LOCKED);
		if (rc)
			return fail(tx, txn_errf(tx, rc, "lock %u: %s", need[i].lock,
						 remora_strerror(rc)));
		k->nholds++;
		rc = take_riders(tx, rid, nr, ride == LOCK_RIDE_VALID ||
				 (ride == LOCK_RIDE_STALE && txb_mut(tx, MUT_DL_RIDE_TRUSTED)));
		if (rc)
			return rc;
	}
	txn_point(tx, "txn.locked");
	return 0;
}

/*
 * Lock first: every object this fetch is about gets its lock (S to read, X to write) before
 * any index READ. Locks below one already held: give back from there, take all in order.
 */
static int dl_before_resolve(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	struct dl_coord *k = dco(tx);
	unsigned m = 0, keep, total;

	if (grow((void **)&k->need, &k->needcap, n + k->nholds, sizeof(*k->need)) ||
	    grow((void **)&k->holds, &k->holdcap, n + k->nholds, sizeof(*k->holds)))
		return fail(tx, -ENOMEM);
	for (unsigned i = 0; i < n; i++) {
		struct dl_need d = { dl_lock_of(objs[i]->table, objs[i]->key),
				     (objs[i]->flags & OBJ_WANT_RW) ? LOCK_X : LOCK_S };

		if (held_mode(k, d.lock) < d.mode + 1u)
			k->need[m++] = d;
	}
	m = need_sort(k->need, m);
	if (!m)
		return 0;
	for (keep = 0; keep < k->nholds && k->holds[keep].lock < k->need[0].lock; keep++)
		;
	total = m;
	for (unsigned i = keep; i < k->nholds; i++)
		k->need[total++] = (struct dl_need){ k->holds[i].lock, k->holds[i].mode };
	if (total > m) {
		uint32_t first = k->need[0].lock;
		int rc;

		release_from(tx, keep);
		m = need_sort(k->need, total);
		rc = take(tx, k->need, m, NULL, 0);
		return rc ? rc : revalidate(tx, first);
	}
	return take(tx, k->need, m, objs, n);
}

/* ---- execution ---------------------------------------------------------------------------- */

/* 0 done, -EAGAIN READ again (torn), 1 another key (look up again), or an abort. */
static int settle(struct remora_tx *tx, struct txn_obj *o)
{
	const struct store_db *st = &txn_db(tx)->st;
	struct codec_rec r;
	int rc = st->codec->decode(&o->t->geom, o->img, 0, &r);

	if (rc == -EAGAIN)
		return ++OB(o)->retries > DL_TORN_RETRIES ?
			       abort_with(tx, REMORA_ABORT_VALIDATION) : -EAGAIN;
	if (rc)
		return fail(tx, txn_errf(tx, rc, "table %u: record at %#llx is corrupt", o->table,
					 (unsigned long long)o->off));
	if (r.key != o->key || r.table != o->table) {
		txn_unresolve(tx, o);
		return 1;
	}
	if ((o->flags & OBJ_FETCHED) && r.version != OB(o)->version)
		return abort_with(tx, REMORA_ABORT_VALIDATION);
	OB(o)->version = r.version;
	OB(o)->retries = 0;
	o->value = r.value;
	o->flags |= OBJ_FETCHED;
	if (r.flags & REMORA_REC_VALID)
		o->flags |= OBJ_FOUND;
	else
		o->flags &= ~OBJ_FOUND;
	if (o->flags & OBJ_WANT_RW)
		o->flags |= OBJ_RW_DONE | OBJ_LOCKED;
	return 0;
}

static bool wants_read(const struct txn_obj *o)
{
	return (o->flags & OBJ_HAVE_REC) &&
	       (!(o->flags & OBJ_FETCHED) ||
		((o->flags & OBJ_WANT_RW) && !(o->flags & OBJ_RW_DONE)));
}

/* Every object is locked already (dl_before_resolve): READ the records, one doorbell. */
static int dl_fetch(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	bool *pend = txn_scratch(tx->c, TXN_SCRATCH_STEPS, n * sizeof(*pend));
	bool again = false;
	struct txb b;
	int rc;

	if (!pend || txb_init(tx, &b, txb_need(tx)))
		return fail(tx, -ENOMEM);
	for (unsigned round = 0;; round++) {
		if (round == DL_ROUNDS_MAX)
			return fail(tx, txn_errf(tx, -EIO, "fetch: no progress after %u rounds", round));
		for (unsigned i = 0; i < n; i++) {
			pend[i] = wants_read(objs[i]);
			if (pend[i])
				txb_read(tx, &b, objs[i]->primary, objs[i]->off, objs[i]->img,
					 objs[i]->t->geom.stride);
		}
		if (!b.n)
			break;
		rc = txb_exec(tx, &b, "fetch");
		if (rc)
			return fail(tx, rc);
		for (unsigned i = 0; i < n; i++) {
			if (!pend[i])
				continue;
			rc = settle(tx, objs[i]);
			if (rc == 1)
				again = true;
			else if (rc < 0 && rc != -EAGAIN)
				return rc;
		}
	}
	return again ? -EAGAIN : 0;
}

/* ---- writes ------------------------------------------------------------------------------- */

static int dl_write(struct remora_tx *tx, struct txn_obj *o, const void *value)
{
	return txn_stage_write(tx, o, value) ? fail(tx, -ENOMEM) : 0;
}

static int dl_remove(struct remora_tx *tx, struct txn_obj *o)
{
	return txn_stage_remove(tx, o) ? fail(tx, -ENOMEM) : 0;
}

/* The new record's images: the same free record everywhere (the lock lives in the table). */
static void insert_fill(struct remora_tx *tx, struct txn_obj *o, unsigned char *bimg)
{
	const struct store_db *st = &txn_db(tx)->st;
	struct codec_rec r = { .key = o->key, .table = o->table, .flags = 0, .lock = 0 };

	st->codec->encode(&o->t->geom, bimg, 0, &r);
	memcpy(o->img, bimg, o->t->geom.stride);
}

/*
 * A record for an absent key (its X lock is held): written on the primary absent, then
 * published by one CAS on the first empty index slot in the same doorbell; backups follow.
 */
static int insert_claim(struct remora_tx *tx, struct txn_obj *o, bool *won)
{
	return txn_insert_claim(tx, o, insert_fill, 0, &OB(o)->slot_word, &OB(o)->cas_old, won);
}

/* A won claim: the record is empty, version 0; its key's lock was taken at the fetch. */
static void insert_fresh(struct remora_tx *tx, struct txn_obj *o)
{
	struct codec_rec r;

	txn_db(tx)->st.codec->decode(&o->t->geom, o->img, 0, &r);
	o->value = r.value;
	OB(o)->version = 0;
	o->flags |= OBJ_LOCKED;
}

static int dl_insert(struct remora_tx *tx, struct txn_obj *o, const void *value)
{
	static const struct txn_insert_ops ops = {
		.attempts = DL_INSERT_ATTEMPTS, .claim = insert_claim, .fresh = insert_fresh,
		.release = release_all,
	};

	return txn_insert(tx, o, value, &ops);
}

/* ---- commit ------------------------------------------------------------------------------- */

/* The committed image of o (version = tx id, lock word 0), in the arena. */
static unsigned char *new_image(struct remora_tx *tx, struct txn_obj *o)
{
	const struct codec_geom *g = &o->t->geom;
	struct codec_rec r = {
		.lock = 0, .version = tx->id, .key = o->key, .table = o->table,
		.flags = (o->flags & OBJ_DELETE) ? REMORA_REC_DELETED : REMORA_REC_VALID,
		.value = o->newval,
	};
	unsigned char *img = txn_arena_alloc(&tx->c->arena, g->stride);

	if (img)
		txn_db(tx)->st.codec->encode(g, img, 0, &r);
	return img;
}

/* One redo entry: {entry, new image} at buf + *at; -REMORA_EFULL past the slot. */
static int log_entry(struct remora_tx *tx, unsigned char *buf, uint32_t *at,
		     const struct txn_obj *o, const unsigned char *img)
{
	struct store_log_ent e = { 0 };
	uint32_t len = o->t->geom.stride, cap = txn_db(tx)->st.sb.log_slot_bytes;

	if (*at + sizeof(e) + len > cap)
		return txn_errf(tx, -REMORA_EFULL,
				"log: the write set needs more than the %u-byte log slot", cap);
	e.table = o->table;
	e.op = (o->flags & OBJ_INSERT) ? REMORA_STORE_LOG_INS :
	       (o->flags & OBJ_DELETE) ? REMORA_STORE_LOG_DEL : REMORA_STORE_LOG_UPD;
	e.key = o->key;
	e.off = o->off;
	e.old_version = OB(o)->version;
	e.new_version = tx->id;
	e.img_len = len;
	memcpy(buf + *at, &e, sizeof(e));
	memcpy(buf + *at + sizeof(e), img, len);
	*at += (uint32_t)sizeof(e) + len;
	return 0;
}

/*
 * The redo log (oocc's log body, so its recovery decides it): header + one entry per written
 * record, one WRITE per node holding a replica of a written record.
 */
static int log_post(struct remora_tx *tx, struct txb *b, unsigned char **imgs)
{
	const struct store_db *st = &txn_db(tx)->st;
	unsigned char *buf = dco(tx)->logbuf;
	struct store_log_hdr *h = (void *)buf;
	uint32_t at = sizeof(*h), nodes = 0;
	uint16_t n = 0;
	int rc;

	for (unsigned i = 0; i < tx->nobj; i++) {
		if (!imgs[i])
			continue;
		rc = log_entry(tx, buf, &at, tx->objs[i], imgs[i]);
		if (rc)
			return rc;
		n++;
		for (unsigned r = 0; r < st->replicas; r++)
			nodes |= 1u << store_replica(st, tx->objs[i]->primary, r);
	}
	memset(h, 0, sizeof(*h));
	h->tx_id = tx->id;
	h->flags = REMORA_STORE_LOG_VALID;
	h->coord = tx->c->id;
	h->n = n;
	h->len = at;
	h->codec = st->codec->id;
	h->csum = store_csum(REMORA_STORE_LOG_CSUM_SEED, h, at);
	for (uint16_t m = 0; m < st->n_mn; m++)
		if (nodes & (1u << m))
			txb_write(tx, b, m, store_log_off(st, tx->c->log_slot), buf, at,
				  txb_durable(tx, MUT_NO_LOG_PERSIST));
	return 0;
}

/* The commit WRITEs, in two doorbells around txn.commit_mid when a crash test asks. */
static int apply(struct remora_tx *tx, struct txb *b, unsigned char **imgs)
{
	const struct store_db *st = &txn_db(tx)->st;
	int rc;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];

		if (!imgs[i])
			continue;
		for (unsigned r = 0; r < st->replicas; r++)
			txb_write(tx, b, store_replica(st, o->primary, r), o->off, imgs[i],
				  o->t->geom.stride, txb_durable(tx, MUT_NO_COMMIT_PERSIST));
	}
	txn_point(tx, "txn.commit_write");
	if (txn_db(tx)->split_commit && b->n > 1) {
		rc = store_exec(txn_chan(tx), b->wrs, 1);
		if (!rc) {
			txn_point(tx, "txn.commit_mid");
			rc = store_exec(txn_chan(tx), b->wrs + 1, b->n - 1);
		}
		b->n = 0;
		return rc ? txn_errf(tx, rc, "commit: %s", remora_strerror(rc)) : 0;
	}
	return txb_exec(tx, b, "commit");
}

static int dl_commit(struct remora_tx *tx)
{
	unsigned char **imgs = txn_arena_alloc(&tx->c->arena, (tx->nobj + 1) * sizeof(*imgs));
	bool writes = false;
	struct txb b;
	int rc;

	if (!imgs || txb_init(tx, &b, txb_need(tx)))
		return fail(tx, -ENOMEM);
	for (unsigned i = 0; i < tx->nobj; i++) {
		imgs[i] = NULL;
		if (!(tx->objs[i]->flags & OBJ_DIRTY))
			continue;
		writes = true;
		if (!(imgs[i] = new_image(tx, tx->objs[i])))
			return fail(tx, -ENOMEM);
	}
	if (writes) {
		rc = log_post(tx, &b, imgs);
		if (!rc)
			rc = txb_exec(tx, &b, "log");
		if (rc)
			return fail(tx, rc);
		txn_point(tx, "txn.logged");
		if (txb_mut(tx, MUT_EARLY_UNLOCK))
			release_all(tx); /* the bug: others see the old values and overwrite them */
		rc = apply(tx, &b, imgs);
		if (rc)
			return strand(tx, rc);
	}
	txn_point(tx, "txn.unlock");
	release_all(tx);
	return 0;
}

static void dl_abort(struct remora_tx *tx)
{
	release_all(tx);
}

static int dl_begin(struct remora_tx *tx)
{
	struct dl_coord *k = dco(tx);

	if (k->stranded)
		return txn_errf(tx, k->stranded,
				"coordinator %u stopped: a commit of it failed after its commit "
				"WRITEs went out (%s); its locks and log are left to recovery",
				(unsigned)tx->c->id, remora_strerror(k->stranded));
	release_all(tx); /* none: every end of a transaction releases */
	return 0;
}

/* ---- set-up ------------------------------------------------------------------------------- */

static int dl_db_init(struct remora_db *db, const char *type)
{
	const struct store_db *st = &db->st;
	uint64_t off = store_tail_off(&st->sb), bytes = 0;
	uint32_t key;
	struct dl_db *d;
	int rc = store_node_key(st->tp, 0, &key, &bytes);
	const char *why = NULL;

	if (db->workers > DL_MAX_WORKERS)
		why = "more than 16 workers per compute node";
	else if (db->cn_id >= st->sb.max_cn && st->tp->bcfg.self_cn >= 0)
		why = "a compute node id at or above the format's max_cn";
	else if ((uint64_t)st->sb.max_cn * db->workers > 64)
		why = "more than 64 workers in the cluster (max_cn x workers)";
	else if (rc || off + DL_TABLE_BYTES > bytes)
		why = "no room for the lock table after the layout on memory node 0";
	if (why) {
		snprintf(db->errmsg, sizeof(db->errmsg),
			 "%s: %s (the lock table takes %u KiB on node 0 after the layout)",
			 db->proto->name, why, (unsigned)(DL_TABLE_BYTES / 1024));
		return -REMORA_ECONFIG;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->type = type;
	d->base_off = off;
	d->nodes = st->sb.max_cn * db->workers;
	db->proto_priv = d;
	return 0;
}

static void dl_db_fini(struct remora_db *db)
{
	struct dl_db *d = db->proto_priv;

	if (!d)
		return;
	for (unsigned w = 0; w < DL_MAX_WORKERS; w++)
		lock_svc_destroy(d->svc[w]);
	free(d);
	db->proto_priv = NULL;
}

/*
 * One lock service per worker: worker w of compute node cn is lock node cn x workers + w. A
 * tool that is no compute node (`remora check`, the verify of `remora bench --check`, run
 * when the compute nodes are gone) sends no messages: its workers are the only lock nodes.
 */
static int dl_rpc_init(struct remora_db *db, struct remora_rpc *rpc)
{
	struct dl_db *d = db->proto_priv;
	bool tool = db->st.tp->bcfg.self_cn < 0;
	unsigned cn = tool ? 0 : db->cn_id;

	if (tool)
		d->nodes = db->workers;
	for (unsigned w = 0; w < db->workers; w++) {
		struct lock_svc_cfg cfg = {
			.type = d->type, .rpc = rpc, .rpc_op = DL_RPC_OP,
			.cn = (uint16_t)(cn * db->workers + w), .n_cn = (uint16_t)d->nodes,
			.base = store_addr(0, d->base_off), .rkey = db->st.rkey[0],
			.n_locks = DL_LOCKS, .cap_log2 = DL_CAP_LOG2, .cap_set = true,
			.timeout_ms = DL_TIMEOUT_MS, .node_workers = (uint16_t)db->workers,
		};
		int rc = lock_svc_create(&cfg, &d->svc[w]);

		if (rc) {
			snprintf(db->errmsg, sizeof(db->errmsg), "%s: %s", db->proto->name,
				 lock_errmsg());
			return rc;
		}
	}
	return 0;
}

static int dl_coord_init(struct txn_coord *c)
{
	struct remora_db *db = c->w->db;
	struct dl_db *d = db->proto_priv;
	struct dl_coord *k = c->priv;
	unsigned idx = (unsigned)(c - c->w->coords);

	k->logbuf = malloc(db->st.sb.log_slot_bytes);
	if (!k->logbuf)
		return -ENOMEM;
	return lock_cli_open(d->svc[c->w->index], c->w->ch, c->w->rpc, idx, &k->cli);
}

static void dl_coord_fini(struct txn_coord *c)
{
	struct dl_coord *k = c->priv;

	lock_cli_close(k->cli);
	free(k->holds);
	free(k->need);
	free(k->logbuf);
}

/*
 * Whole-cluster recovery: oocc's (the same records and log body) decides every logged
 * transaction; then the lock table goes back to zero, which is every type's free image (as
 * format leaves it: the table is the protocol's tail_bytes).
 */
static int dl_recover(const struct store_db *st, struct remora_chan *ch, uint32_t flags,
		      struct recovery_report *rep, char *err, size_t errlen)
{
	uint64_t off = store_tail_off(&st->sb), bytes = 0, end = off + DL_TABLE_BYTES;
	const uint32_t chunk = 1u << 20;
	unsigned char *zero;
	uint32_t key;
	int rc = oocc_recover_cluster(st, ch, flags, rep, err, errlen);

	if (rc || (flags & REMORA_RECOVERY_CHECK) || store_node_key(st->tp, 0, &key, &bytes))
		return rc;
	if (end > bytes)
		end = bytes; /* a database no declock variant could open: what fits */
	zero = calloc(1, chunk);
	if (!zero)
		return -ENOMEM;
	for (uint64_t at = off; !rc && at < end; at += chunk) {
		struct remora_wr w = store_wr_write(st, 0, at, zero,
						    (uint32_t)(end - at < chunk ? end - at : chunk),
						    REMORA_WR_DURABLE);

		rc = store_exec(ch, &w, 1);
	}
	free(zero);
	if (rc)
		snprintf(err, errlen, "recover: clearing the declock lock table: %s",
			 remora_strerror(rc));
	return rc;
}

#define DL_VARIANT(ident, lock_type)                                                           \
	static int dl_db_init_##ident(struct remora_db *db)                                    \
	{                                                                                      \
		return dl_db_init(db, lock_type);                                              \
	}                                                                                      \
	const struct txn_proto_ops txn_proto_##ident = {                                       \
		.size = sizeof(struct txn_proto_ops),                                          \
		.name = #ident,                                                                \
		.codec = REMORA_CODEC_FOOTER,                                                  \
		.flags = REMORA_PROTO_NEEDS_MSG,                                               \
		.tail_bytes = DL_TABLE_BYTES,                                                  \
		.db_init = dl_db_init_##ident,                                                 \
		.db_fini = dl_db_fini,                                                         \
		.begin = dl_begin,                                                             \
		.fetch = dl_fetch,                                                             \
		.write = dl_write,                                                             \
		.insert = dl_insert,                                                           \
		.remove = dl_remove,                                                           \
		.commit = dl_commit,                                                           \
		.abort = dl_abort,                                                             \
		.obj_priv_size = sizeof(struct dl_obj),                                        \
		.coord_priv_size = sizeof(struct dl_coord),                                    \
		.coord_init = dl_coord_init,                                                   \
		.coord_fini = dl_coord_fini,                                                   \
		.recover = dl_recover,                                                         \
		.before_resolve = dl_before_resolve,                                           \
		.rpc_init = dl_rpc_init,                                                       \
	};

DL_VARIANT(declock, "declock")
DL_VARIANT(declock_tf, "declock-tf")
DL_VARIANT(declock_pf, "declock-pf")
DL_VARIANT(declock_cas, "caslock")
DL_VARIANT(declock_dslr, "dslr")
