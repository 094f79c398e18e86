/* SPDX-License-Identifier: MIT */
/*
 * Motor over CVTs. Round trips of a read-write transaction with cached addresses and no
 * conflict (docs/motor.md):
 *
 *   begin       1 RTT: T_start, one FAA on the memory-node counter
 *   execution   1 RTT: READ of the CVT per read-only object; CAS of the header lock + READ of
 *               the CVT per read-write object; one doorbell
 *   T_commit    1 RTT: FAA
 *   validation  SR only, when something was read without a lock: 1 RTT, READ of each such CVT
 *               (no newer version, no lock)
 *   log         1 RTT: the redo log (new cells) in ONE WRITE to each of f+1 log servers
 *   commit      1 RTT: WRITE of the new cell (timestamp, flags, full value) to every replica,
 *               into a free cell or over the oldest one (inline GC); the newest is never reused
 *   unlock      fire and forget
 *
 * A read-only transaction (nothing written) takes T_start and one READ per object, and commits
 * without locks or validation: it read the snapshot at T_start.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/env.h"
#include "motor.h"
#include "txn/batch.h"

#define MOTOR_TORN_RETRIES 16u
#define MOTOR_LOCK_WAITS 32u
#define MOTOR_ROUNDS_MAX 128u
#define MOTOR_INSERT_ATTEMPTS 8u

static inline struct motor_obj *MO(const struct txn_obj *o)
{
	return o->priv;
}

static inline struct motor_tx *mtx(const struct remora_tx *tx)
{
	return tx->priv;
}

static inline struct motor_db *mdb(const struct remora_tx *tx)
{
	return txn_db(tx)->proto_priv;
}

/* A lock word another live transaction holds (ours does not count). */
static bool foreign_lock(const struct remora_tx *tx, uint64_t w)
{
	return w != 0 && w != mtx(tx)->lock && !txn_coord_failed(txn_db(tx), (uint16_t)w);
}

/* ---- verbs ----------------------------------------------------------------------------- */

static void b_cas(struct remora_tx *tx, struct txb *b, uint16_t node, uint64_t off,
		  uint64_t swap, uint64_t *old)
{
	if (txb_mut(tx, MUT_NO_LOCK_CAS)) { /* unsafe: no MN atomic (LOTUS figs 2-3) */
		*old = 0;
		return;
	}
	txb_cas(tx, b, node, off, 0, swap, old);
}

/* ---- releasing --------------------------------------------------------------------------- */

/*
 * Every transaction that ends, committed or aborted, may move this node's published GC
 * horizon: a node whose writers only abort (turned away by the other nodes' horizons) must
 * still move its own, or two such nodes would hold each other back for good.
 */
static void gc_end(struct remora_tx *tx)
{
	struct remora_wr wr;
	struct txb b = { .wrs = &wr, .n = 0, .cap = 1 };

	motor_gc_leave(tx);
	motor_gc_publish(tx, &b);
	txb_post_async(tx, &b);
}

static void motor_release(struct remora_tx *tx)
{
	struct txb b;

	if (txb_init(tx, &b, txb_need(tx)))
		return;
	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];

		if (o->flags & OBJ_LOCKED)
			txb_unlock(tx, &b, o);
		o->flags &= ~(OBJ_LOCKED | OBJ_CAS_SENT);
	}
	txn_point(tx, "txn.abort_unlock");
	txb_post_async(tx, &b);
	gc_end(tx);
}

static int motor_abort_with(struct remora_tx *tx, enum remora_abort_reason why)
{
	motor_release(tx);
	return txn_poison(tx, -REMORA_EABORT, why);
}

static int motor_fail(struct remora_tx *tx, int rc)
{
	motor_release(tx);
	return txn_poison(tx, rc, REMORA_ABORT_NONE);
}

/* ---- reading a CVT ------------------------------------------------------------------------ */

/* What one CVT image holds, decoded. */
struct cvt_view {
	uint64_t lock, key;
	uint32_t table;
	int newest;  /* cell of the newest version, -1: none */
	int visible; /* cell of the newest version below the snapshot, -1: none */
	int free;    /* a cell never used, -1: none */
	int oldest;  /* cell of the oldest version, -1: none */
	uint64_t next_ts; /* timestamp of the second oldest version (UINT64_MAX: none) */
	bool torn;
};

static void cvt_view(const struct remora_tx *tx, const struct txn_obj *o, const unsigned char *img,
		     uint64_t below, struct cvt_view *v)
{
	const struct store_db *st = &txn_db(tx)->st;
	const struct codec_geom *g = &o->t->geom;
	uint64_t nts = 0, vts = 0, ots = UINT64_MAX;

	memset(v, 0, sizeof(*v));
	v->newest = v->visible = v->free = v->oldest = -1;
	v->next_ts = UINT64_MAX;
	for (unsigned i = 0; i < g->nparts; i++) {
		struct codec_rec r;
		int rc = st->codec->decode(g, img, i, &r);

		if (rc == -EAGAIN && !txb_mut(tx, MUT_SKIP_TORN_CHECK))
			v->torn = true;
		if (i == 0) {
			v->lock = r.lock;
			v->key = r.key;
			v->table = r.table;
		}
		if (!(r.flags & REMORA_CVT_USED)) {
			if (v->free < 0)
				v->free = (int)i;
			continue;
		}
		if (v->newest < 0 || r.version > nts)
			nts = r.version, v->newest = (int)i;
		if (v->oldest < 0 || r.version < ots) {
			if (v->oldest >= 0)
				v->next_ts = ots;
			ots = r.version, v->oldest = (int)i;
		} else if (r.version < v->next_ts) {
			v->next_ts = r.version;
		}
		if (r.version < below && (v->visible < 0 || r.version > vts))
			vts = r.version, v->visible = (int)i;
	}
}

static uint64_t cell_ts(const struct remora_tx *tx, const struct txn_obj *o, const void *img,
			int cell, uint32_t *flags)
{
	struct codec_rec r;

	txn_db(tx)->st.codec->decode(&o->t->geom, img, (unsigned)cell, &r);
	if (flags)
		*flags = r.flags;
	return r.version;
}

/*
 * The object now shows the version in `cell` of its image (-1: absent). With deltas an older
 * version is rebuilt into a buffer of the object; -EAGAIN when the image does not allow it
 * (torn: read again).
 */
static int obj_show(struct remora_tx *tx, struct txn_obj *o, int cell)
{
	const struct codec_geom *g = &o->t->geom;
	uint32_t flags = 0;
	const void *value = NULL;

	if (cell >= 0 && g->full_off && !MO(o)->vbuf)
		MO(o)->vbuf = txn_arena_alloc(&tx->c->arena, g->value_size);
	if (cell >= 0 && g->full_off && !MO(o)->vbuf)
		return -ENOMEM;
	if (cell >= 0 && codec_cvt_value(g, o->img, (unsigned)cell, MO(o)->vbuf, &value,
					 txb_mut(tx, MUT_DELTA_SKIP)) &&
	    !txb_mut(tx, MUT_SKIP_TORN_CHECK))
		return -EAGAIN;
	MO(o)->ts = cell >= 0 ? cell_ts(tx, o, o->img, cell, &flags) : 0;
	o->value = value ? value : o->img + g->part_off[0] + 16;
	o->flags |= OBJ_FETCHED;
	if (cell >= 0 && (flags & REMORA_REC_VALID))
		o->flags |= OBJ_FOUND;
	else
		o->flags &= ~OBJ_FOUND;
	return 0;
}

enum fetch_step {
	STEP_NONE,
	STEP_READ,
	STEP_LOCK_READ,
};

static enum fetch_step fetch_step(const struct txn_obj *o)
{
	bool want_rw = (o->flags & OBJ_WANT_RW) && !(o->flags & OBJ_RW_DONE);

	if (want_rw && !(o->flags & OBJ_LOCKED))
		return STEP_LOCK_READ;
	if (!(o->flags & OBJ_FETCHED) || want_rw)
		return STEP_READ;
	return STEP_NONE;
}

/* A read-write object: the newest version (SI: first-committer-wins against T_start). */
static int settle_rw(struct remora_tx *tx, struct txn_obj *o, const struct cvt_view *v)
{
	int rc;
	uint64_t nts = v->newest >= 0 ? cell_ts(tx, o, o->img, v->newest, NULL) : 0;

	if ((o->flags & OBJ_FETCHED) && nts != MO(o)->ts)
		return motor_abort_with(tx, REMORA_ABORT_VALIDATION); /* changed since we read it */
	if (mdb(tx)->iso == MOTOR_SI && nts >= mtx(tx)->t_start && !txb_mut(tx, MUT_SKIP_FCW))
		return motor_abort_with(tx, REMORA_ABORT_VALIDATION); /* a later writer committed */
	rc = obj_show(tx, o, v->newest);
	if (rc)
		return rc;
	MO(o)->newest = nts;
	MO(o)->reuse = (uint32_t)(v->free >= 0 ? v->free : v->oldest);
	MO(o)->reclaim = v->free < 0;
	MO(o)->empty = v->newest < 0;
	MO(o)->next_ts = v->next_ts;
	o->flags |= OBJ_RW_DONE;
	return 0;
}

/* A read-only object: the newest version below T_start. */
static int settle_ro(struct remora_tx *tx, struct txn_obj *o, const struct cvt_view *v)
{
	int cell = v->visible, rc;

	if (foreign_lock(tx, v->lock)) {
		/* The holder may have taken a commit timestamp below ours and not yet written its
		 * cell: wait for it rather than read a snapshot that misses its version. */
		if (++MO(o)->waits > MOTOR_LOCK_WAITS)
			return motor_abort_with(tx, REMORA_ABORT_LOCKED);
		return -EAGAIN;
	}
	if (cell < 0 && v->free < 0 && v->newest >= 0) {
		/* Every cell holds a version newer than the snapshot: ours was reclaimed. */
		if (!txb_mut(tx, MUT_RECLAIM_VISIBLE))
			return motor_abort_with(tx, REMORA_ABORT_VALIDATION);
		cell = v->oldest;
	}
	rc = obj_show(tx, o, cell);
	if (rc)
		return rc;
	MO(o)->newest = v->newest >= 0 ? cell_ts(tx, o, o->img, v->newest, NULL) : 0;
	return 0;
}

/* 0 done, -EAGAIN read again, 1 another key's record (look up again), or an abort. */
static int fetch_settle(struct remora_tx *tx, struct txn_obj *o, enum fetch_step step)
{
	struct cvt_view v;
	int rc;

	if (step == STEP_LOCK_READ && !(o->flags & OBJ_LOCKED))
		return motor_abort_with(tx, REMORA_ABORT_LOCKED);
	cvt_view(tx, o, o->img, mtx(tx)->t_start, &v);
	if (v.torn) {
		if (++MO(o)->retries > MOTOR_TORN_RETRIES)
			return motor_abort_with(tx, REMORA_ABORT_VALIDATION);
		return -EAGAIN;
	}
	if (v.key != o->key || v.table != o->table) {
		if (o->flags & OBJ_LOCKED)
			txb_unlock_now(tx, o);
		txn_unresolve(tx, o);
		return 1;
	}
	rc = (o->flags & OBJ_WANT_RW) ? settle_rw(tx, o, &v) : settle_ro(tx, o, &v);
	if (rc == -ENOMEM)
		return motor_fail(tx, rc);
	if (rc == -EAGAIN && ++MO(o)->retries > MOTOR_TORN_RETRIES)
		return motor_abort_with(tx, REMORA_ABORT_VALIDATION);
	if (rc == 0)
		MO(o)->retries = MO(o)->waits = 0;
	return rc;
}

/* One round: the verbs of every object that needs some; returns how many were posted. */
static unsigned fetch_post(struct remora_tx *tx, struct txb *b, struct txn_obj *const *objs,
			   unsigned n, enum fetch_step *steps, bool *locking)
{
	unsigned pending = 0;

	for (unsigned i = 0; i < n; i++) {
		struct txn_obj *o = objs[i];

		steps[i] = (o->flags & OBJ_HAVE_REC) ? fetch_step(o) : STEP_NONE;
		if (steps[i] == STEP_LOCK_READ) {
			b_cas(tx, b, o->primary, o->off + o->t->geom.lock_off, mtx(tx)->lock,
			      &MO(o)->cas_old);
			o->lock_word = mtx(tx)->lock;
			o->flags |= OBJ_CAS_SENT;
			*locking = true;
		}
		if (steps[i] != STEP_NONE) {
			txb_read(tx, b, o->primary, o->off, o->img, o->t->geom.stride);
			pending++;
		}
	}
	return pending;
}

static int motor_fetch(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	enum fetch_step *steps = txn_scratch(tx->c, TXN_SCRATCH_STEPS, n * sizeof(*steps));
	bool again = false;
	struct txb b;
	int rc;

	if (!steps || txb_init(tx, &b, txb_need(tx)))
		return motor_fail(tx, -ENOMEM);
	for (unsigned round = 0;; round++) {
		bool locking = false;

		if (round == MOTOR_ROUNDS_MAX)
			return motor_fail(tx, txn_errf(tx, -EIO, "fetch: no progress after %u rounds",
						       round));
		if (!fetch_post(tx, &b, objs, n, steps, &locking))
			break;
		rc = txb_exec(tx, &b, "fetch");
		for (unsigned i = 0; i < n; i++)
			if (steps[i] == STEP_LOCK_READ && MO(objs[i])->cas_old == 0)
				objs[i]->flags |= OBJ_LOCKED;
		if (rc)
			return motor_fail(tx, rc);
		if (locking)
			txn_point(tx, "txn.locked");
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

/* ---- writes ---------------------------------------------------------------------------- */

static int motor_write(struct remora_tx *tx, struct txn_obj *o, const void *value)
{
	return txn_stage_write(tx, o, value) ? motor_fail(tx, -ENOMEM) : 0;
}

static int motor_remove(struct remora_tx *tx, struct txn_obj *o)
{
	return txn_stage_remove(tx, o) ? motor_fail(tx, -ENOMEM) : 0;
}

/* Encodes every cell of a CVT for key with lock word `lock` and no version (a placeholder). */
static void cvt_empty(const struct store_db *st, const struct txn_obj *o, unsigned char *img,
		      uint64_t lock)
{
	struct codec_rec r = { .lock = lock, .key = o->key, .table = o->table, .flags = 0 };

	for (unsigned i = 0; i < o->t->geom.nparts; i++)
		st->codec->encode(&o->t->geom, img, i, &r);
}

/* The new record's images: an empty CVT, unlocked on the backups, locked by us on the primary. */
static void insert_fill(struct remora_tx *tx, struct txn_obj *o, unsigned char *bimg)
{
	const struct store_db *st = &txn_db(tx)->st;

	cvt_empty(st, o, bimg, 0);
	cvt_empty(st, o, o->img, mtx(tx)->lock);
}

/* Claims a record slot for an absent key and publishes it, locked (as runtime/txn/proto/occ). */
static int insert_claim(struct remora_tx *tx, struct txn_obj *o, bool *won)
{
	return txn_insert_claim(tx, o, insert_fill, OBJ_LOCKED, &MO(o)->slot_word,
				&MO(o)->cas_old, won);
}

/* A won claim: an empty CVT, locked by us, no version yet. */
static void insert_fresh(struct remora_tx *tx, struct txn_obj *o)
{
	(void)tx;
	MO(o)->ts = MO(o)->newest = 0;
	MO(o)->reuse = 0;
	MO(o)->empty = true;
	o->value = o->img + o->t->geom.part_off[0] + 16;
}

static int motor_insert(struct remora_tx *tx, struct txn_obj *o, const void *value)
{
	static const struct txn_insert_ops ops = {
		.attempts = MOTOR_INSERT_ATTEMPTS, .claim = insert_claim, .fresh = insert_fresh,
		.release = motor_release,
	};

	return txn_insert(tx, o, value, &ops);
}

/* ---- commit ---------------------------------------------------------------------------- */

/* SR: objects read without a lock (read-only objects, absent keys) need a check. */
static bool needs_check(const struct txn_obj *o)
{
	return (o->flags & OBJ_FETCHED) && !(o->flags & OBJ_LOCKED);
}

static int validate_post(struct remora_tx *tx, struct txb *b)
{
	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];

		if (!needs_check(o))
			continue;
		MO(o)->check = 0;
		if (!(o->flags & OBJ_HAVE_REC)) {
			if (o->slot_off)
				txb_read(tx, b, o->primary, o->slot_off, &MO(o)->check, 8);
			continue;
		}
		if (!MO(o)->vimg)
			MO(o)->vimg = txn_arena_alloc(&tx->c->arena, o->t->geom.stride);
		if (!MO(o)->vimg)
			return -ENOMEM;
		txb_read(tx, b, o->primary, o->off, MO(o)->vimg, o->t->geom.stride);
	}
	return 0;
}

/* No read object has a newer version than the one read, nor a lock; no phantom appeared. */
static int validate_settle(struct remora_tx *tx)
{
	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		struct cvt_view v;
		uint64_t nts;

		if (!needs_check(o))
			continue;
		if (!(o->flags & OBJ_HAVE_REC)) {
			if (MO(o)->check != 0)
				return motor_abort_with(tx, REMORA_ABORT_VALIDATION);
			continue;
		}
		cvt_view(tx, o, MO(o)->vimg, UINT64_MAX, &v);
		nts = v.newest >= 0 ? cell_ts(tx, o, MO(o)->vimg, v.newest, NULL) : 0;
		if (v.torn || foreign_lock(tx, v.lock) || nts != MO(o)->ts)
			return motor_abort_with(tx, REMORA_ABORT_VALIDATION);
	}
	return 0;
}

static int commit_validate(struct remora_tx *tx, struct txb *b)
{
	int rc;

	if (mdb(tx)->iso != MOTOR_SR || txb_mut(tx, MUT_SKIP_VALIDATION))
		return 0;
	rc = validate_post(tx, b);
	if (rc)
		return motor_fail(tx, rc);
	if (!b->n)
		return 0;
	txn_point(tx, "txn.validate");
	rc = txb_exec(tx, b, "validate");
	if (rc)
		return motor_fail(tx, rc);
	return validate_settle(tx);
}

/* The new cell of o at T_commit, encoded into its own image buffer. */
static int cell_build(struct remora_tx *tx, struct txn_obj *o)
{
	const struct codec_geom *g = &o->t->geom;
	struct codec_rec r = {
		.lock = 0, .version = mtx(tx)->t_commit, .key = o->key, .table = o->table,
		.flags = (o->flags & OBJ_DELETE) ? REMORA_REC_DELETED : REMORA_REC_VALID,
		.value = o->newval,
	};

	MO(o)->cell = txn_arena_alloc(&tx->c->arena, g->stride);
	if (!MO(o)->cell)
		return -ENOMEM;
	memcpy(MO(o)->cell, o->img, g->stride); /* header key and table: the cell's checksum */
	txn_db(tx)->st.codec->encode(g, MO(o)->cell, MO(o)->reuse, &r);
	return 0;
}

/*
 * The redo log: per written object an entry {table, op, key, CVT offset, cell index in
 * old_version, T_commit in new_version} and the new cell (with deltas: the new full value,
 * then the new cell without its delta area's zero tail). One WRITE per log server.
 */
static int log_post(struct remora_tx *tx, struct txb *b)
{
	const struct store_db *st = &txn_db(tx)->st;
	unsigned char *buf = ((struct motor_coord *)tx->c->priv)->logbuf;
	struct store_log_hdr *h = (void *)buf;
	uint32_t at = sizeof(*h), cap = st->sb.log_slot_bytes;
	uint16_t n = 0;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		const struct codec_geom *g = &o->t->geom;
		struct store_log_ent e = { 0 };
		uint32_t off[2], plen[2], len = 0;
		unsigned np;

		if (!(o->flags & OBJ_DIRTY))
			continue;
		np = codec_cvt_pieces(g, MO(o)->reuse, off, plen);
		while (np > 1 && plen[1] > 16 && !MO(o)->cell[off[1] + plen[1] - 1])
			plen[1]--; /* a delta's unused tail is zeros: recovery writes them back */
		for (unsigned k = 0; k < np; k++)
			len += plen[k];
		if (at + sizeof(e) + len > cap)
			return txn_errf(tx, -REMORA_EFULL,
					"log: the write set needs more than the %u-byte log slot", cap);
		e.table = o->table;
		e.op = (o->flags & OBJ_INSERT) ? REMORA_STORE_LOG_INS :
		       (o->flags & OBJ_DELETE) ? REMORA_STORE_LOG_DEL : REMORA_STORE_LOG_UPD;
		e.key = o->key;
		e.off = o->off;
		e.old_version = MO(o)->reuse;
		e.new_version = mtx(tx)->t_commit;
		e.img_len = len;
		memcpy(buf + at, &e, sizeof(e));
		at += sizeof(e);
		for (unsigned k = 0; k < np; k++, at += plen[k - 1])
			memcpy(buf + at, MO(o)->cell + off[k], plen[k]);
		o->flags |= OBJ_LOGGED;
		n++;
	}
	memset(h, 0, sizeof(*h));
	h->tx_id = tx->id;
	h->lock = mtx(tx)->lock;
	h->flags = REMORA_STORE_LOG_VALID;
	h->coord = tx->c->id;
	h->n = n;
	h->len = at;
	h->codec = st->codec->id;
	h->csum = store_csum(REMORA_STORE_LOG_CSUM_SEED, h, at);
	for (unsigned i = 0; i < st->replicas; i++)
		txb_write(tx, b, store_log_server(st, tx->c->id, i),
			store_log_off(st, tx->c->log_slot), buf, at,
			txb_durable(tx, MUT_NO_LOG_PERSIST));
	return 0;
}

/*
 * An insert's placeholder went to the backups without waiting (txb_insert_backups), and it
 * alone writes a CVT's header (key, table), which every cell's checksum covers. Before the log
 * says committed, those WRITEs must have landed: a log is overwritten by the coordinator's next
 * transaction, after which recovery could no longer rewrite a header that never arrived. The
 * completions are normally in by now; a failed one fails the transaction, unlogged.
 */
static int await_inserts(struct remora_tx *tx)
{
	int rc;

	for (unsigned i = 0; i < tx->nobj; i++) {
		if (!(tx->objs[i]->flags & OBJ_NEW_REC))
			continue;
		rc = txn_async_wait(tx->c);
		return rc ? txn_errf(tx, rc, "insert backups: %s", remora_strerror(rc)) : 0;
	}
	return 0;
}

static int commit_log(struct remora_tx *tx, struct txb *b)
{
	int rc = await_inserts(tx);

	if (rc)
		return motor_fail(tx, rc);
	for (unsigned i = 0; i < tx->nobj; i++)
		if ((tx->objs[i]->flags & OBJ_DIRTY) && cell_build(tx, tx->objs[i]))
			return motor_fail(tx, -ENOMEM);
	rc = log_post(tx, b);
	if (rc)
		return motor_fail(tx, rc);
	txn_point(tx, "txn.log");
	rc = txb_exec(tx, b, "log");
	if (rc)
		return motor_fail(tx, rc);
	txn_point(tx, "txn.logged");
	return 0;
}

/*
 * A commit into a CVT without versions (a placeholder) writes its header too (key, table,
 * cells: bytes 8..31, just before the span, which then starts at the first cell or the full
 * area): 24 more bytes, no more verbs. The placeholder's backup WRITEs were not waited for and
 * may never have landed (an aborted insert's, cut by a crash), and each cell's checksum covers
 * the header. Later commits leave the header alone: this one made it whole on every replica.
 */
static void commit_span(struct remora_tx *tx, const struct txn_obj *o, uint32_t *at,
			uint32_t *len)
{
	const uint32_t hdr = 8u, end = 32u;

	codec_cvt_span(&o->t->geom, MO(o)->reuse, at, len);
	if (MO(o)->empty && *at == end && !txb_mut(tx, MUT_COMMIT_NO_HEADER)) {
		*at = hdr;
		*len += end - hdr;
	}
}

static void commit_post(struct remora_tx *tx, struct txb *b)
{
	const struct store_db *st = &txn_db(tx)->st;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		uint32_t at, len;

		if (!(o->flags & OBJ_DIRTY))
			continue;
		commit_span(tx, o, &at, &len);
		for (unsigned k = 0; k < st->replicas; k++)
			txb_write(tx, b, store_replica(st, o->primary, k), o->off + at,
				MO(o)->cell + at, len,
				txb_durable(tx, MUT_NO_COMMIT_PERSIST));
	}
}

static int commit_exec(struct remora_tx *tx, struct txb *b)
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

static void unlock_post(struct remora_tx *tx, struct txb *b)
{
	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];

		if (o->flags & OBJ_LOCKED)
			txb_unlock(tx, b, o);
		o->flags &= ~(OBJ_LOCKED | OBJ_CAS_SENT);
	}
}

static bool tx_writes(const struct remora_tx *tx)
{
	for (unsigned i = 0; i < tx->nobj; i++)
		if (tx->objs[i]->flags & OBJ_DIRTY)
			return true;
	return false;
}

/*
 * A transaction that writes nothing but read a locked object's version newer than T_start
 * (SR allows that) did not read one snapshot: it must validate its unlocked reads.
 */
static bool locked_past_start(const struct remora_tx *tx)
{
	for (unsigned i = 0; i < tx->nobj; i++)
		if ((tx->objs[i]->flags & OBJ_LOCKED) && MO(tx->objs[i])->ts >= mtx(tx)->t_start)
			return true;
	return false;
}

/*
 * Every written object that reuses a version's cell: may GC take that version? When the
 * horizon known here says no, it is read again from node 0 (once); a version some running
 * snapshot may still need is never taken: the writer aborts (LOCKED: a live snapshot holds
 * it) and retries, as it would on a lock.
 */
static int gc_check(struct remora_tx *tx)
{
	bool refreshed = false;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		int rc;

		if (!(o->flags & OBJ_DIRTY) || !MO(o)->reclaim ||
		    motor_gc_may_reclaim(tx, MO(o)->next_ts))
			continue;
		if (!refreshed) {
			rc = motor_gc_refresh(tx);
			if (rc)
				return motor_fail(tx, rc);
			refreshed = true;
			if (motor_gc_may_reclaim(tx, MO(o)->next_ts))
				continue;
		}
		return motor_abort_with(tx, REMORA_ABORT_LOCKED);
	}
	return 0;
}

static int commit_body(struct remora_tx *tx)
{
	struct txb b;
	int rc;

	if (txb_init(tx, &b, txb_need(tx)))
		return motor_fail(tx, -ENOMEM);
	if (!tx_writes(tx)) { /* the snapshot at T_start: no validation, locks just go */
		if (locked_past_start(tx)) {
			rc = commit_validate(tx, &b); /* SR: serialized now, while the locks hold */
			if (rc)
				return rc;
		}
		unlock_post(tx, &b);
		return txb_post_async(tx, &b);
	}
	rc = ts_next(&mdb(tx)->ts, txn_chan(tx), &mtx(tx)->t_commit);
	if (rc)
		return motor_fail(tx, txn_errf(tx, rc, "commit timestamp: %s", remora_strerror(rc)));
	motor_gc_took(tx, mtx(tx)->t_commit);
	rc = commit_validate(tx, &b);
	if (!rc)
		rc = gc_check(tx);
	if (rc)
		return rc;
	rc = commit_log(tx, &b);
	if (rc)
		return rc;
	commit_post(tx, &b);
	txn_point(tx, "txn.commit_write");
	rc = commit_exec(tx, &b);
	if (rc)
		return motor_fail(tx, rc);
	unlock_post(tx, &b);
	txn_point(tx, "txn.unlock");
	return txb_post_async(tx, &b);
}

static int motor_commit(struct remora_tx *tx)
{
	int rc = commit_body(tx);

	gc_end(tx);
	return rc;
}

static void motor_abort(struct remora_tx *tx)
{
	motor_release(tx);
}

static int motor_begin(struct remora_tx *tx)
{
	int rc;

	mtx(tx)->lock = (tx->seq & 0xffffffffu) << 16 | tx->c->id;
	mtx(tx)->t_commit = 0;
	motor_gc_enter(tx); /* a bound below T_start, before the FAA takes it */
	rc = ts_next(&mdb(tx)->ts, txn_chan(tx), &mtx(tx)->t_start);
	if (rc) {
		motor_gc_leave(tx);
		return txn_errf(tx, rc, "start timestamp: %s", remora_strerror(rc));
	}
	motor_gc_started(tx);
	return 0;
}

/* ---- setup ----------------------------------------------------------------------------- */

int motor_isolation_parse(const char *s, enum motor_isolation *out)
{
	if (!s || !*s || !strcmp(s, "sr"))
		*out = MOTOR_SR;
	else if (!strcmp(s, "si"))
		*out = MOTOR_SI;
	else
		return -REMORA_ECONFIG;
	return 0;
}

static int motor_db_init(struct remora_db *db)
{
	struct motor_db *m = calloc(1, sizeof(*m));
	/* the open's configuration first; a library user without one gets $REMORA_ISOLATION */
	const char *iso = db->isolation[0] ? db->isolation : cfg_param_env(REMORA_P_ISOLATION);
	const char *ts = cfg_knob(CFG_KNOB_MOTOR_TS);
	int rc;

	if (!m)
		return -ENOMEM;
	if (motor_isolation_parse(iso, &m->iso)) {
		free(m);
		snprintf(db->errmsg, sizeof(db->errmsg), "isolation '%s': use sr or si", iso);
		return -REMORA_ECONFIG;
	}
	/*
	 * The counter, whatever db->ts is: it alone is ordered across compute nodes.
	 * REMORA_MOTOR_TS=clock takes the clock service instead (no MN atomic; ordered only among
	 * the processes of one host): Motor's own per-node counter, for cost experiments.
	 */
	if (ts && !strcmp(ts, "clock")) {
		if (ts_init_clock(&m->ts, db->cn_id)) {
			free(m);
			return -REMORA_ECONFIG;
		}
	} else {
		ts_init_counter(&m->ts,
				store_addr(0, REMORA_STORE_CONTROL_OFF +
						      offsetof(struct store_control, ts_counter)),
				db->st.rkey[0]);
	}
	rc = motor_gc_init(db, m);
	if (rc) {
		free(m->gc.active);
		free(m);
		snprintf(db->errmsg, sizeof(db->errmsg), "gc horizon: %s", remora_strerror(rc));
		return rc;
	}
	db->proto_priv = m;
	return 0;
}

static void motor_db_fini(struct remora_db *db)
{
	motor_gc_fini(db, db->proto_priv);
	free(db->proto_priv);
	db->proto_priv = NULL;
}

static int motor_coord_init(struct txn_coord *c)
{
	struct motor_coord *mc = c->priv;

	mc->logbuf = aligned_alloc(64, c->w->db->st.sb.log_slot_bytes);
	return mc->logbuf ? 0 : -ENOMEM;
}

static void motor_coord_fini(struct txn_coord *c)
{
	if (c->priv)
		free(((struct motor_coord *)c->priv)->logbuf);
}

const struct txn_proto_ops txn_proto_motor = {
	.size = sizeof(struct txn_proto_ops),
	.name = "motor",
	.codec = REMORA_CODEC_CVT,
	.flags = REMORA_PROTO_NEEDS_TS,
	.db_init = motor_db_init,
	.db_fini = motor_db_fini,
	.begin = motor_begin,
	.fetch = motor_fetch,
	.write = motor_write,
	.insert = motor_insert,
	.remove = motor_remove,
	.commit = motor_commit,
	.abort = motor_abort,
	.tx_priv_size = sizeof(struct motor_tx),
	.obj_priv_size = sizeof(struct motor_obj),
	.coord_priv_size = sizeof(struct motor_coord),
	.coord_init = motor_coord_init,
	.coord_fini = motor_coord_fini,
	.recover = motor_recover_cluster,
	.recover_online = motor_recover_online,
};
