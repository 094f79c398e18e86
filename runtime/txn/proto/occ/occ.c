/* SPDX-License-Identifier: MIT */
/*
 * One-sided OCC over lock+version records (FORD, Pandora). Round trips per transaction with
 * cached addresses and no conflicts:
 *
 *   execution   1 RTT: READ per read record, CAS + READ per written record, one doorbell
 *   validation  1 RTT: READ of the version (FORD, 8 B) or {lock, version} (Pandora, 16 B)
 *               FORD posts its undo log in the same batch
 *   log         Pandora only, 1 RTT: one WRITE per log server
 *   commit      1 RTT: WRITE of each written record to every replica
 *   unlock      fire-and-forget WRITE lock = 0 on each primary
 *
 * A read-only transaction skips log and commit; a transaction that reads nothing it does not
 * also lock skips validation.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <remora/sched.h>

#include "config/env.h"
#include "occ.h"
#include "txn/batch.h"
#include "txn/ids.h"

#define OCC_TORN_RETRIES 16u
#define OCC_ROUNDS_MAX 64u
#define OCC_INSERT_ATTEMPTS 8u
#define OCC_FAILED_CHECK_NS 1000000u /* failed-ids READs per owner compute node: 1 per ms */
#define OCC_STALL_MAX_NS 10000000000u /* failed_locks = stall: the longest wait on one lock */

/* ---- private state (occ.h; the generic layer allocates it) ---------------------------- */

static inline struct occ_obj *OO(const struct txn_obj *o)
{
	return o->priv;
}

static inline struct occ_tx *occ_tx(const struct remora_tx *tx)
{
	return tx->priv;
}

static inline struct occ_coord *occ_coord(const struct txn_coord *c)
{
	return c->priv;
}

static const struct occ_policy *pol(const struct remora_tx *tx)
{
	return txn_db(tx)->proto_priv;
}

/* ---- lock words ------------------------------------------------------------------------ */

/*
 * PILL: owner coordinator id in bits 15:0, the owner's tx sequence in bits 63:16: its low 32
 * bits and, above them, the incarnation of the process (seq_base). Coordinator ids are a
 * function of the compute-node id, so a restarted process reuses them: without the
 * incarnation its lock words would repeat those its dead predecessor may have left behind,
 * and a recovery releasing the old lock by value would release the new owner's.
 */
static uint64_t pill_word(const struct remora_tx *tx)
{
	uint64_t seq = tx->seq & ((UINT64_C(1) << 48) - 1);

	if (txb_mut(tx, MUT_PILL_NO_INCARNATION))
		seq &= 0xffffffffu;
	return seq << 16 | tx->c->id;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * A lock word of this very process: same compute node, same incarnation. Never stray, whatever
 * the failed-ids sets say: a process reopening a dead compute node's id finds its ids there
 * (they name the dead incarnation's locks), and its coordinators must not steal each other's.
 */
static bool own_lock(const struct remora_db *db, uint64_t w)
{
	uint16_t id = (uint16_t)w, first = txn_db_coord_id(db, 0);

	return id >= first && id < first + db->st.sb.coords_per_cn &&
	       w >> 48 == (db->seq_base >> 32 & 0xffff);
}

/* A PILL word in words: its owner, whose it is, and whether this process counts it failed. */
void occ_describe_lock(const struct remora_db *db, uint64_t w, char *buf, size_t len)
{
	const struct occ_policy *p = db->proto_priv;

	if (!p->pill) {
		snprintf(buf, len, "lock word %#llx (no owner in it)", (unsigned long long)w);
		return;
	}
	snprintf(buf, len, "lock word %#llx: coordinator id %u, incarnation %u, transaction %u; "
		 "%s", (unsigned long long)w, (unsigned)(uint16_t)w, (unsigned)(w >> 48),
		 (unsigned)(uint32_t)(w >> 16),
		 own_lock(db, w)           ? "held by this process"
		 : txn_lock_failed(db, w) ? "its owner is among the failed ids"
					    : "its owner is not among the failed ids");
}

/*
 * Whether the failed-ids set in memory-node memory names the owner of lock word w: one READ
 * of its word in node's control area (the recovery that publishes an id writes it on every
 * node before the id counts). At most one READ per owner compute node per
 * OCC_FAILED_CHECK_NS: the price of learning a failure on a failed CAS, not on every
 * conflict.
 */
static bool failed_in_memory(struct remora_tx *tx, uint16_t node, uint64_t w)
{
	struct remora_db *db = txn_db(tx);
	struct occ_db *od = db->proto_priv;
	uint16_t id = (uint16_t)w;
	uint32_t cn = (uint32_t)(id - 1) / REMORA_STORE_COORD_SLOTS;
	uint64_t word = 0, now = mono_ns(), next;
	struct remora_wr wr;

	if (id == 0 || cn >= REMORA_MAX_CN)
		return false;
	next = __atomic_load_n(&od->next_check_ns[cn], __ATOMIC_RELAXED);
	if (now < next || !__atomic_compare_exchange_n(&od->next_check_ns[cn], &next,
						       now + OCC_FAILED_CHECK_NS, false,
						       __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return false;
	wr = store_wr_read(&db->st, node, occ_failed_word_off(id), &word, 8);
	if (store_exec(txn_chan(tx), &wr, 1) || !(word >> (id & 63) & 1))
		return false;
	txn_set_failed_inc(db, id, (uint16_t)(w >> 48));
	return true;
}

/*
 * PILL: lock word w (read on node) names a failed owner -- a stray lock, free to steal. A lock
 * of this process never is (own_lock, first: the own_lock_stray mutation asks it last); then
 * the local copy of the failed-ids set; else, the first time, the copy in memory.
 */
static bool lock_stray(struct remora_tx *tx, uint16_t node, uint64_t w)
{
	struct remora_db *db = txn_db(tx);

	if (!pol(tx)->pill || !w)
		return false;
	if (txb_mut(tx, MUT_OWN_LOCK_STRAY) && txn_lock_failed(db, w))
		return true;
	if (own_lock(db, w))
		return false;
	return txn_lock_failed(db, w) || failed_in_memory(tx, node, w);
}

/*
 * failed_locks = stall (Pandora's figures 13 and 14): a lock whose owner is dead and fenced but
 * not recovered yet (txn_lock_suspected) is waited on, other coordinators of the thread
 * running meanwhile, until the failed ids are published and it can be stolen (true), or the
 * owner is no longer suspected, or OCC_STALL_MAX_NS passed (false: abort, as by default).
 */
static bool stall_for(struct remora_tx *tx, uint16_t node, uint64_t w)
{
	const struct occ_db *od = txn_db(tx)->proto_priv;
	uint64_t deadline;

	if (!od->stall || !w || !txn_lock_suspected(w))
		return false;
	deadline = mono_ns() + OCC_STALL_MAX_NS;
	while (mono_ns() < deadline && txn_lock_suspected(w)) {
		if (remora_coro_self())
			remora_yield();
		else
			nanosleep(&(struct timespec){ .tv_nsec = 50000 }, NULL);
		if (lock_stray(tx, node, w))
			return true;
	}
	return false;
}

/* A lock another live transaction holds (our own lock on o does not count). */
static bool lock_conflict(struct remora_tx *tx, const struct txn_obj *o, uint64_t w)
{
	if (w == 0 || (o->flags & OBJ_LOCKED))
		return false;
	return !lock_stray(tx, o->primary, w);
}

/* ---- verbs ----------------------------------------------------------------------------- */

/* The lock CAS of o (txb_lock_cas), unless no_lock_cas leaves the MN atomic out. */
static void b_lock_cas(struct remora_tx *tx, struct txb *b, struct txn_obj *o, uint64_t compare)
{
	if (txb_mut(tx, MUT_NO_LOCK_CAS)) { /* unsafe: no MN atomic */
		OO(o)->cas_old = compare;
		return;
	}
	txb_lock_cas(tx, b, o, compare, occ_tx(tx)->lock, &OO(o)->cas_old);
}

/* ---- releasing locks ------------------------------------------------------------------- */

/*
 * Releases every lock tx holds (fire and forget). With the complicit_abort mutation it also
 * clears the words whose CAS failed -- the lock of whoever holds them.
 *
 * After a failed verb batch (failed), a lock CAS of it with no result may still have landed:
 * an RDMA QP that broke after the memory node executed it. A PILL word names this very
 * transaction, so a CAS from that word back to 0 releases the lock exactly when it is ours, and
 * nothing else. FORD's word names nobody: its unknown CASes stay as they are.
 */
static void release_locks(struct remora_tx *tx, bool failed)
{
	bool complicit = txb_mut(tx, MUT_COMPLICIT_ABORT);
	bool if_mine = failed && pol(tx)->pill && !txb_mut(tx, MUT_UNKNOWN_CAS_KEPT);
	struct txb b;

	if (txb_init(tx, &b, tx->nobj ? tx->nobj : 1))
		return;
	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];

		tx->c->locks_given += (o->flags & OBJ_LOCKED) != 0;
		if ((o->flags & OBJ_LOCKED) || (complicit && (o->flags & OBJ_CAS_SENT)))
			txb_unlock(tx, &b, o);
		else if (if_mine && (o->flags & OBJ_CAS_SENT))
			txb_cas(tx, &b, o->primary, o->off + o->t->geom.lock_off, occ_tx(tx)->lock,
				0, NULL);
		o->flags &= ~(OBJ_LOCKED | OBJ_CAS_SENT);
	}
	txn_point(tx, "txn.abort_unlock");
	txb_post_async(tx, &b);
}

static void occ_release(struct remora_tx *tx)
{
	release_locks(tx, false);
}

static int occ_abort_with(struct remora_tx *tx, enum remora_abort_reason why)
{
	occ_release(tx);
	return txn_poison(tx, -REMORA_EABORT, why);
}

/* An abort on lock word w of a live owner; the worker keeps w (remora_worker_last_lock). */
static int occ_abort_locked(struct remora_tx *tx, uint64_t w)
{
	tx->c->w->last_lock = w;
	return occ_abort_with(tx, REMORA_ABORT_LOCKED);
}

/*
 * A failure before any log can have landed. One caused by a memory node that failed over
 * (its verbs refused) is an abort: the transaction is retried on the new placement.
 */
static int occ_fail(struct remora_tx *tx, int rc)
{
	rc = txn_mnf_await(txn_db(tx), rc);
	release_locks(tx, true);
	if (rc == -REMORA_ENODE && txb_down(tx))
		return txn_poison(tx, -REMORA_EABORT, REMORA_ABORT_NONE);
	return txn_poison(tx, rc, REMORA_ABORT_NONE);
}

static int mnf_resolve(struct remora_tx *tx, bool may_forward);

/*
 * A commit that fails once a log WRITE may have landed: only recovery may decide it now (a
 * valid log names it; some commit WRITEs may have landed, which recovery may undo). Every lock
 * stays held, so no reader sees a half-applied commit, and the coordinator stops: its log
 * slot must stay as it is for the recovery of this compute node. The unlock_after_log
 * mutation releases the locks instead.
 */
static int occ_strand_at(struct remora_tx *tx, int rc, bool may_forward)
{
	if (txb_mut(tx, MUT_UNLOCK_AFTER_LOG))
		return occ_fail(tx, rc);
	rc = txn_mnf_await(txn_db(tx), rc);
	if (txb_down(tx)) {
		if (mnf_resolve(tx, may_forward) != -EAGAIN)
			return tx->poison;
		/* Undecided: a hard error, never "aborted" (a retry could apply it twice), and no
		 * failover barrier passes (failover.c) while its outcome is open. */
		rc = -EIO;
		__atomic_store_n(&txn_db(tx)->mnf_undecided, true, __ATOMIC_SEQ_CST);
	}
	occ_coord(tx->c)->stranded = rc;
	__atomic_store_n(&txn_db(tx)->stranded, true, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < tx->nobj; i++) {
		tx->c->locks_left += (tx->objs[i]->flags & OBJ_LOCKED) != 0;
		tx->objs[i]->flags &= ~(OBJ_LOCKED | OBJ_CAS_SENT);
	}
	return txn_poison(tx, rc, REMORA_ABORT_NONE);
}

/* Before any commit WRITE: a memory-node failover only rolls back. */
static int occ_strand(struct remora_tx *tx, int rc)
{
	return occ_strand_at(tx, rc, false);
}

/*
 * Posts the unlocks of a transaction that is decided (committed, or read-only). A refused
 * post does not undo the commit: it is reported committed, and its locks are left, with the
 * coordinator stopped, to the recovery of this compute node (the unlock_fails_commit
 * mutation reports the commit failed instead).
 */
static int unlock_decided(struct remora_tx *tx, struct txb *b)
{
	int rc = txb_post_async(tx, b);

	if (!rc || txb_mut(tx, MUT_UNLOCK_FAILS_COMMIT))
		return rc;
	occ_coord(tx->c)->stranded = rc;
	__atomic_store_n(&txn_db(tx)->stranded, true, __ATOMIC_RELAXED);
	return 0;
}

/* ---- logs ------------------------------------------------------------------------------ */

enum log_sel {
	LOG_SEL_DIRTY,   /* the write set as staged: what a correct log holds */
	LOG_SEL_WANT_RW, /* everything fetched for writing, locked or not (log_without_lock) */
};

/* Builds the log record of tx into the coordinator's buffer; *len 0 when nothing to log. */
static int log_build(struct remora_tx *tx, enum log_sel sel, uint32_t *len)
{
	const struct remora_db *db = txn_db(tx);
	bool inserts = pol(tx)->log_inserts && !txb_mut(tx, MUT_MISSING_ACTIONS);
	unsigned char *buf = occ_coord(tx->c)->logbuf;
	uint32_t at = sizeof(struct store_log_hdr), cap = db->st.sb.log_slot_bytes;
	uint16_t n = 0;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		int rc;

		if (sel == LOG_SEL_DIRTY ? !(o->flags & OBJ_DIRTY) :
					   !(o->flags & OBJ_WANT_RW) || !(o->flags & OBJ_HAVE_REC))
			continue;
		if (txn_log_op(o) == REMORA_STORE_LOG_INS && !inserts)
			continue;
		rc = txn_log_append(tx, buf, &at, cap, o, OO(o)->version, o->img);
		if (rc)
			return rc;
		o->flags |= OBJ_LOGGED;
		n++;
	}
	*len = 0;
	if (!n)
		return 0;
	txn_log_seal(tx, buf, at, n, occ_tx(tx)->lock);
	*len = at;
	return 0;
}

/*
 * Where tx's log goes: its coordinator's log servers (Pandora) or every node holding a copy of
 * a logged record (FORD); nodes that failed over left out.
 */
static uint32_t log_nodes(const struct remora_tx *tx)
{
	const struct store_db *st = &txn_db(tx)->st;
	uint32_t nodes = 0;

	if (pol(tx)->log_servers) {
		for (unsigned i = 0; i < st->replicas; i++)
			nodes |= 1u << store_log_server(st, tx->c->id, i);
	} else {
		for (unsigned i = 0; i < tx->nobj; i++) {
			const struct txn_obj *o = tx->objs[i];

			if (!(o->flags & OBJ_LOGGED))
				continue;
			for (unsigned r = 0; r < st->replicas; r++)
				nodes |= 1u << store_replica(st, store_home(st, o->bucket), r);
		}
	}
	return nodes & ~store_dead(st);
}

/* Adds the log WRITEs: one per log server (Pandora) or per node holding written data (FORD). */
static int log_post(struct remora_tx *tx, struct txb *b, enum log_sel sel)
{
	const struct store_db *st = &txn_db(tx)->st;
	uint64_t off = store_log_off(st, tx->c->log_slot);
	uint32_t nodes = 0, len = 0;
	int rc = log_build(tx, sel, &len);

	if (rc || !len)
		return rc;
	nodes = log_nodes(tx);
	for (uint16_t m = 0; m < st->n_mn; m++)
		if (nodes & (1u << m))
			txb_write(tx, b, m, off, occ_coord(tx->c)->logbuf, len,
				  txb_durable(tx, MUT_NO_LOG_PERSIST));
	return 0;
}

/* ---- execution ------------------------------------------------------------------------- */

static enum txn_step fetch_step(const struct remora_tx *tx, const struct txn_obj *o)
{
	bool want_rw = (o->flags & OBJ_WANT_RW) && !(o->flags & OBJ_RW_DONE);

	if (want_rw && !(o->flags & OBJ_LOCKED) && !txb_mut(tx, MUT_RELAXED_LOCKS))
		return TXN_STEP_LOCK_READ;
	if (!(o->flags & OBJ_FETCHED) || want_rw)
		return TXN_STEP_READ;
	return TXN_STEP_NONE;
}

/*
 * Handles one fetched image. Returns 0 (done), -EAGAIN (read again: torn, or a stray lock to
 * steal), 1 (the record holds another key: look it up again), or an abort/failure.
 */
static int fetch_settle(struct remora_tx *tx, struct txn_obj *o, enum txn_step step)
{
	struct codec_rec r;
	int rc;

	if (step == TXN_STEP_LOCK_READ) {
		if (!(o->flags & OBJ_LOCKED)) {
			if (lock_stray(tx, o->primary, OO(o)->cas_old) ||
			    stall_for(tx, o->primary, OO(o)->cas_old)) {
				OO(o)->steal_from = OO(o)->cas_old; /* owner failed: take it over */
				return -EAGAIN;
			}
			return occ_abort_locked(tx, OO(o)->cas_old);
		}
		OO(o)->steal_from = 0;
	}
	rc = txn_fetch_decode(tx, o, &r);
	if (rc == -EAGAIN)
		return ++OO(o)->retries > OCC_TORN_RETRIES ?
			       occ_abort_with(tx, REMORA_ABORT_VALIDATION) : -EAGAIN;
	if (rc)
		return rc < 0 ? occ_fail(tx, rc) : rc;
	if ((o->flags & OBJ_FETCHED) && r.version != OO(o)->version)
		return occ_abort_with(tx, REMORA_ABORT_VALIDATION); /* changed since we read it */
	if (!(o->flags & OBJ_LOCKED) && pol(tx)->read_locks && lock_conflict(tx, o, r.lock))
		return stall_for(tx, o->primary, r.lock) ? -EAGAIN : occ_abort_locked(tx, r.lock);
	OO(o)->version = r.version;
	txn_fetch_take(o, &r);
	OO(o)->retries = 0;
	return 0;
}

int occ_fetch(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	enum txn_step *steps;
	bool again = false;
	struct txb b;
	int rc;

	steps = txn_scratch(tx->c, TXN_SCRATCH_STEPS, n * sizeof(*steps));
	if (!steps || txb_init(tx, &b, txb_need(tx)))
		return occ_fail(tx, -ENOMEM);
	for (unsigned round = 0;; round++) {
		bool locking = false;
		unsigned pending = 0;

		if (round == OCC_ROUNDS_MAX)
			return occ_fail(tx, txn_errf(tx, -EIO, "fetch: no progress after %u rounds",
						     round));
		for (unsigned i = 0; i < n; i++) {
			struct txn_obj *o = objs[i];
			const struct codec_geom *g = &o->t->geom;

			steps[i] = (o->flags & OBJ_HAVE_REC) ? fetch_step(tx, o) : TXN_STEP_NONE;
			if (steps[i] == TXN_STEP_LOCK_READ) {
				b_lock_cas(tx, &b, o, OO(o)->steal_from);
				o->flags |= OBJ_CAS_SENT;
				locking = true;
			}
			if (steps[i] != TXN_STEP_NONE) {
				txb_read(tx, &b, o->primary, o->off, o->img, g->stride);
				pending++;
			}
		}
		if (!pending)
			break;
		if (locking && txb_mut(tx, MUT_LOG_WITHOUT_LOCK)) {
			rc = log_post(tx, &b, LOG_SEL_WANT_RW);
			if (rc)
				return occ_fail(tx, rc);
		}
		rc = txb_exec(tx, &b, "fetch");
		/* Note every lock won before anything can abort, so an abort releases them all. */
		for (unsigned i = 0; i < n; i++)
			if (steps[i] == TXN_STEP_LOCK_READ &&
			    OO(objs[i])->cas_old == OO(objs[i])->steal_from) {
				objs[i]->flags |= OBJ_LOCKED;
				tx->c->locks_won++;
			}
		if (rc)
			return occ_fail(tx, rc);
		if (locking)
			txn_point(tx, "txn.locked");
		rc = txn_settle_round(tx, objs, n, steps, fetch_settle, &again);
		if (rc)
			return rc;
	}
	return again ? -EAGAIN : 0;
}

/* ---- writes ---------------------------------------------------------------------------- */

int occ_write(struct remora_tx *tx, struct txn_obj *o, const void *value)
{
	return txn_stage_write(tx, o, value) ? occ_fail(tx, -ENOMEM) : 0;
}

int occ_remove(struct remora_tx *tx, struct txn_obj *o)
{
	return txn_stage_remove(tx, o) ? occ_fail(tx, -ENOMEM) : 0;
}

/* The new record's images: free on the backups, locked by us (absent) on the primary. */
static void insert_fill(struct remora_tx *tx, struct txn_obj *o, unsigned char *bimg)
{
	txn_insert_images(tx, o, bimg, occ_tx(tx)->lock);
}

/*
 * A new record for an absent key: write it (locked by us, absent) on the primary, then claim
 * the first empty slot of the key's probe sequence with one CAS in the same batch (same node,
 * so the record is in place before the slot points at it). Backups get the record and the
 * slot afterwards, fire and forget.
 */
static int insert_claim(struct remora_tx *tx, struct txn_obj *o, bool *won)
{
	int rc;

	*won = false;
	rc = txn_insert_claim(tx, o, insert_fill, OBJ_LOCKED, &OO(o)->slot_word, &OO(o)->cas_old,
			      won);
	/* The new record is written locked by us. Counted here, not in txn_insert_claim: only
	 * ford and pandora keep the count (remora_db_locks_unreleased); motor, crest and oocc
	 * claim locked too, and their inserts read as locks never given back. */
	if (*won)
		tx->c->locks_won++;
	return rc;
}

/* A won claim: the record is empty, version 0, locked by us. */
static void insert_fresh(struct remora_tx *tx, struct txn_obj *o)
{
	struct codec_rec r;

	txn_db(tx)->st.codec->decode(&o->t->geom, o->img, 0, &r);
	o->value = r.value;
	OO(o)->version = 0;
}

int occ_insert(struct remora_tx *tx, struct txn_obj *o, const void *value)
{
	static const struct txn_insert_ops ops = {
		.attempts = OCC_INSERT_ATTEMPTS, .claim = insert_claim, .fresh = insert_fresh,
		.release = occ_release,
	};

	return txn_insert(tx, o, value, &ops);
}

/* ---- commit ---------------------------------------------------------------------------- */

/* The validation READs of everything read but not locked; absent keys check their slot. */
static void validate_post(struct remora_tx *tx, struct txb *b)
{
	bool locks = pol(tx)->validate_locks && !txb_mut(tx, MUT_COVERT_LOCKS);

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		const struct codec_geom *g = &o->t->geom;

		if (!(o->flags & OBJ_FETCHED) || (o->flags & OBJ_LOCKED))
			continue;
		if ((o->flags & OBJ_WANT_RW) && (o->flags & OBJ_HAVE_REC) &&
		    txb_mut(tx, MUT_RELAXED_LOCKS))
			continue; /* checked when its deferred lock is taken */
		OO(o)->check[0] = 0;
		if (!(o->flags & OBJ_HAVE_REC)) {
			if (o->slot_off)
				txb_read(tx, b, o->primary, o->slot_off, &OO(o)->check[0], 8);
		} else if (locks) {
			txb_read(tx, b, o->primary, o->off + g->check_off, OO(o)->check, g->check_len);
		} else {
			txb_read(tx, b, o->primary, o->off + g->version_off, &OO(o)->check[1], 8);
		}
	}
}

static int validate_settle(struct remora_tx *tx)
{
	bool locks = pol(tx)->validate_locks && !txb_mut(tx, MUT_COVERT_LOCKS);

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];

		if (!(o->flags & OBJ_FETCHED) || (o->flags & OBJ_LOCKED))
			continue;
		if ((o->flags & OBJ_WANT_RW) && (o->flags & OBJ_HAVE_REC) &&
		    txb_mut(tx, MUT_RELAXED_LOCKS))
			continue;
		if (!(o->flags & OBJ_HAVE_REC)) {
			if (OO(o)->check[0] != 0) /* someone inserted into the slot our key needs */
				return occ_abort_with(tx, REMORA_ABORT_VALIDATION);
			continue;
		}
		if (OO(o)->check[1] != OO(o)->version || (locks && lock_conflict(tx, o, OO(o)->check[0])))
			return occ_abort_with(tx, REMORA_ABORT_VALIDATION);
	}
	return 0;
}

/* relaxed_locks mutation: the write locks FORD takes late, here after validation. */
static int lock_deferred(struct remora_tx *tx, struct txb *b)
{
	int rc;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		const struct codec_geom *g = &o->t->geom;

		if (!(o->flags & OBJ_WANT_RW) || !(o->flags & OBJ_HAVE_REC) ||
		    (o->flags & OBJ_LOCKED))
			continue;
		b_lock_cas(tx, b, o, 0);
		txb_read(tx, b, o->primary, o->off + g->check_off, OO(o)->check, g->check_len);
		o->flags |= OBJ_CAS_SENT;
	}
	txn_point(tx, "txn.lock");
	rc = txb_exec(tx, b, "lock");
	if (rc)
		return occ_fail(tx, rc);
	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];

		if ((o->flags & OBJ_CAS_SENT) && OO(o)->cas_old == 0) {
			o->flags |= OBJ_LOCKED; /* all noted first: an abort releases them all */
			tx->c->locks_won++;
		}
	}
	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];

		if (!(o->flags & OBJ_CAS_SENT))
			continue;
		if (!(o->flags & OBJ_LOCKED))
			return occ_abort_locked(tx, OO(o)->cas_old);
		if (OO(o)->check[1] != OO(o)->version)
			return occ_abort_with(tx, REMORA_ABORT_VALIDATION);
	}
	return 0;
}

/* New images of every written record, to every replica (the lock word is not written). */
static int commit_post(struct remora_tx *tx, struct txb *b)
{
	const struct store_db *st = &txn_db(tx)->st;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		const struct codec_geom *g = &o->t->geom;
		struct codec_rec r = {
			.lock = 0, .version = tx->id, .key = o->key, .table = o->table,
			.flags = (o->flags & OBJ_DELETE) ? REMORA_REC_DELETED : REMORA_REC_VALID,
			.value = o->newval,
		};
		unsigned char *img;

		if (!(o->flags & OBJ_DIRTY))
			continue;
		img = txn_arena_alloc(&tx->c->arena, g->stride);
		if (!img)
			return -ENOMEM;
		st->codec->encode(g, img, 0, &r);
		for (unsigned k = 0; k < st->replicas; k++) {
			uint16_t m = store_replica(st, store_home(st, o->bucket), k);

			if (!store_node_dead(st, m))
				txb_write(tx, b, m, o->off + g->write_off, img + g->write_off,
					  g->stride - g->write_off,
					  txb_durable(tx, MUT_NO_COMMIT_PERSIST));
		}
	}
	return 0;
}

static void unlock_post(struct remora_tx *tx, struct txb *b)
{
	bool forget = txb_mut(tx, MUT_OCC_FORGETS_UNLOCK);

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];

		if (o->flags & OBJ_LOCKED) {
			if (!forget || (tx->id & 1023) != 0) { /* the mutation: 1 in 1024 forgotten */
				txb_unlock(tx, b, o);
				tx->c->locks_given++;
			}
		}
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

/* Validation (with FORD's log in the same round trip). */
static int commit_validate(struct remora_tx *tx, struct txb *b, bool ford_log)
{
	int rc;

	if (ford_log) {
		rc = log_post(tx, b, LOG_SEL_DIRTY);
		if (rc)
			return occ_fail(tx, rc);
	}
	if (!txb_mut(tx, MUT_SKIP_VALIDATION))
		validate_post(tx, b);
	if (!b->n)
		return 0;
	txn_point(tx, "txn.validate");
	rc = txb_exec(tx, b, "validate");
	if (rc)
		return ford_log ? occ_strand(tx, rc) : occ_fail(tx, rc);
	if (ford_log)
		txn_point(tx, "txn.logged");
	return txb_mut(tx, MUT_SKIP_VALIDATION) ? 0 : validate_settle(tx);
}

static int commit_log(struct remora_tx *tx, struct txb *b)
{
	int rc = log_post(tx, b, LOG_SEL_DIRTY);

	if (rc)
		return occ_fail(tx, rc);
	if (!b->n)
		return 0;
	txn_point(tx, "txn.log");
	rc = txb_exec(tx, b, "log");
	if (rc)
		return occ_strand(tx, rc);
	txn_point(tx, "txn.logged");
	return 0;
}

/*
 * The commit WRITEs in one doorbell; when REMORA_DIE_AT names txn.commit_mid, the first one
 * alone first, so that crash point lies between commit WRITEs (a partly applied commit).
 */
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

static int commit_apply(struct remora_tx *tx, struct txb *b)
{
	int rc;

	if (txb_mut(tx, MUT_EARLY_UNLOCK)) {
		unlock_post(tx, b);
		txn_point(tx, "txn.unlock");
		rc = txb_exec(tx, b, "unlock");
		if (rc)
			return occ_fail(tx, rc);
	}
	rc = commit_post(tx, b);
	if (rc)
		return occ_strand(tx, rc);
	txn_point(tx, "txn.commit_write");
	rc = commit_exec(tx, b);
	if (rc)
		return occ_strand_at(tx, rc, true);
	/* Every replica of every write acked: the commit is decided; locks go afterwards. */
	unlock_post(tx, b);
	txn_point(tx, "txn.unlock");
	return unlock_decided(tx, b);
}

int occ_commit(struct remora_tx *tx)
{
	const struct occ_policy *p = pol(tx);
	bool writes = tx_writes(tx);
	bool relaxed = txb_mut(tx, MUT_RELAXED_LOCKS);
	struct txb b;
	int rc;

	if (txb_init(tx, &b, txb_need(tx)))
		return occ_fail(tx, -ENOMEM);
	if (writes && txb_mut(tx, MUT_LOST_DECISION)) {
		rc = commit_log(tx, &b); /* logged before the decision is known */
		if (rc)
			return rc;
	}
	rc = commit_validate(tx, &b, writes && !p->log_after_validate &&
					     !txb_mut(tx, MUT_LOST_DECISION));
	if (rc)
		return rc;
	if (relaxed) {
		rc = lock_deferred(tx, &b);
		if (rc)
			return rc;
	}
	if (!writes) {
		unlock_post(tx, &b);
		return unlock_decided(tx, &b);
	}
	if (p->log_after_validate && !txb_mut(tx, MUT_LOST_DECISION)) {
		rc = commit_log(tx, &b);
		if (rc)
			return rc;
	}
	return commit_apply(tx, &b);
}

void occ_abort(struct remora_tx *tx)
{
	occ_release(tx);
}

int occ_begin(struct remora_tx *tx)
{
	int stranded = occ_coord(tx->c)->stranded;

	if (stranded)
		return txn_errf(tx, stranded,
				"coordinator %u stopped: a commit of it failed after its log (%s); "
				"its locks and log are left to recovery",
				(unsigned)tx->c->id, remora_strerror(stranded));
	occ_tx(tx)->lock = pol(tx)->pill ? pill_word(tx) : 1;
	return 0;
}

/* ---- memory-node failover: a transaction cut by the dead node -------------------------- */

/* The version of every dirty record on every live copy, in the arena (order of mnf_each). */
static int mnf_read_versions(struct remora_tx *tx, uint32_t down, uint64_t **out)
{
	const struct store_db *st = &txn_db(tx)->st;
	uint64_t *ver = txn_arena_alloc(&tx->c->arena, (tx->nobj * st->replicas + 1u) * 8u);
	struct txb b;
	unsigned j = 0;

	if (!ver || txb_init(tx, &b, txb_need(tx)))
		return -ENOMEM;
	for (unsigned i = 0; i < tx->nobj; i++) {
		const struct txn_obj *o = tx->objs[i];

		if (!(o->flags & OBJ_DIRTY))
			continue;
		for (unsigned k = 0; k < st->replicas; k++) {
			uint16_t m = store_replica(st, store_home(st, o->bucket), k);

			ver[j] = 0;
			if (!(down >> m & 1u))
				txb_read(tx, &b, m, o->off + o->t->geom.version_off, &ver[j], 8);
			j++;
		}
	}
	*out = ver;
	return txb_exec(tx, &b, "failover: reading the versions");
}

/*
 * Rolls back (undo) every live copy that carries tx's version, or (!undo) tells whether all
 * of them do: *all_new.
 */
static int mnf_settle(struct remora_tx *tx, uint32_t down, const uint64_t *ver, bool undo,
		      bool *all_new)
{
	const struct store_db *st = &txn_db(tx)->st;
	struct txb b;
	unsigned j = 0;

	if (txb_init(tx, &b, txb_need(tx)))
		return -ENOMEM;
	*all_new = true;
	for (unsigned i = 0; i < tx->nobj; i++) {
		const struct txn_obj *o = tx->objs[i];
		const struct codec_geom *g = &o->t->geom;

		if (!(o->flags & OBJ_DIRTY))
			continue;
		for (unsigned k = 0; k < st->replicas; k++, j++) {
			uint16_t m = store_replica(st, store_home(st, o->bucket), k);

			if (down >> m & 1u)
				continue;
			*all_new &= ver[j] == tx->id;
			/* o->img is the image fetched under our lock: the undo image */
			if (undo && ver[j] == tx->id)
				txb_write(tx, &b, m, o->off + g->write_off, o->img + g->write_off,
					  g->stride - g->write_off, REMORA_WR_DURABLE);
		}
	}
	return undo ? txb_exec(tx, &b, "failover: undo") : 0;
}

/* Zeroes the log header on every live node that may hold it, then gives the locks back. */
static int mnf_finish(struct remora_tx *tx, uint32_t down)
{
	static const struct store_log_hdr zero;
	const struct store_db *st = &txn_db(tx)->st;
	uint64_t off = store_log_off(st, tx->c->log_slot);
	uint32_t nodes = log_nodes(tx) & ~down;
	struct txb b;
	int rc;

	if (txb_init(tx, &b, txb_need(tx)))
		return -ENOMEM;
	for (uint16_t m = 0; m < st->n_mn; m++)
		if (nodes >> m & 1u)
			txb_write(tx, &b, m, off, &zero, sizeof(zero), REMORA_WR_DURABLE);
	rc = txb_exec(tx, &b, "failover: invalidating the log");
	if (rc)
		return rc;
	unlock_post(tx, &b);
	return txb_post_async(tx, &b);
}

/*
 * A commit cut by a memory node that failed over (docs/recovery.md, "Memory-node failover"): the
 * transaction still holds its locks on the live primaries, and no transaction of any compute
 * node can take the dead primary's records over before this node passes the failover
 * barrier, which it does only once this returned. So it decides itself, from its own state:
 * forward when every live copy of every write carries its version (may_forward: the commit
 * WRITEs were posted), else back, its undo images over the live copies that took the new
 * one; then its log is invalidated and its locks given back. Returns 0 (committed), -EAGAIN
 * (no decision: strand as without failover), or the abort (tx poisoned).
 */
static int mnf_resolve(struct remora_tx *tx, bool may_forward)
{
	uint32_t down = txb_down(tx);
	uint64_t *ver = NULL;
	bool all_new = false;
	int rc;

	if (may_forward && txb_mut(tx, MUT_MNF_NO_RESOLVE)) {
		occ_release(tx); /* unsafe: the commit is acknowledged whatever landed */
		tx->poison = 0;
		return 0;
	}
	rc = mnf_read_versions(tx, down, &ver);
	if (!rc)
		rc = mnf_settle(tx, down, ver, false, &all_new);
	if (!rc && !(may_forward && all_new))
		rc = mnf_settle(tx, down, ver, true, &all_new);
	if (!rc)
		rc = mnf_finish(tx, down);
	if (rc)
		return -EAGAIN;
	tx->poison = 0;
	if (may_forward && all_new)
		return 0;
	return txn_poison(tx, -REMORA_EABORT, REMORA_ABORT_NONE);
}

/* ---- setup ----------------------------------------------------------------------------- */

/*
 * PILL: this open's coordinator ids, a fresh block (runtime/txn/ids.h), so that a restarted
 * compute node never reuses the ids its dead predecessor's stray locks carry.
 */
static int occ_ids_take(struct remora_db *db)
{
	struct remora_chan *ch;
	uint32_t block = 0;
	int rc;

	if (mut_on(db->mutations, MUT_IDS_BY_CN))
		return 0;
	rc = remora_chan_open(db->st.tp, &ch);
	if (rc)
		return rc;
	rc = txn_ids_alloc(&db->st, ch, db->cn_id, (uint16_t)(db->seq_base >> 32), db->mutations,
			   &block);
	remora_chan_close(ch);
	if (rc)
		snprintf(db->errmsg, sizeof(db->errmsg), "coordinator ids: %s%s",
			 remora_strerror(rc),
			 rc == -REMORA_EFULL ? " (every block held, none recyclable)" : "");
	else
		db->id_block = block + 1u;
	return rc;
}

/* A clean close gives the block back; a stranded one leaves it to recovery. */
static void occ_ids_give_back(struct remora_db *db)
{
	struct remora_chan *ch;

	if (!db->id_block || remora_db_stranded(db) || remora_chan_open(db->st.tp, &ch))
		return;
	(void)txn_ids_free(&db->st, ch, db->cn_id, (uint16_t)(db->seq_base >> 32),
			   db->id_block - 1u);
	remora_chan_close(ch);
	db->id_block = 0;
}

int occ_db_init(struct remora_db *db, const struct occ_policy *p)
{
	struct occ_db *mine = calloc(1, sizeof(*mine));
	const char *pol_s;
	int rc;

	if (!mine)
		return -ENOMEM;
	mine->pol = *p;
	db->proto_priv = mine;
	/* the open's configuration, $REMORA_FAILED_LOCKS over it when set, else abort */
	pol_s = cfg_param_env_or(REMORA_P_FAILED_LOCKS,
				 db->failed_locks[0] ? db->failed_locks : NULL);
	if (strcmp(pol_s, "abort") != 0 && strcmp(pol_s, "stall") != 0) {
		snprintf(db->errmsg, sizeof(db->errmsg), "failed_locks '%s': use abort or stall",
			 pol_s);
		free(mine);
		db->proto_priv = NULL;
		return -REMORA_ECONFIG;
	}
	mine->stall = p->pill && strcmp(pol_s, "stall") == 0;
	rc = p->pill ? occ_ids_take(db) : 0;
	if (rc) {
		free(mine);
		db->proto_priv = NULL;
	}
	return rc;
}

int occ_coord_init(struct txn_coord *c)
{
	occ_coord(c)->logbuf = aligned_alloc(64, c->w->db->st.sb.log_slot_bytes);
	return occ_coord(c)->logbuf ? 0 : -ENOMEM;
}

void occ_coord_fini(struct txn_coord *c)
{
	if (c->priv)
		free(occ_coord(c)->logbuf);
}

void occ_db_fini(struct remora_db *db)
{
	occ_ids_give_back(db);
	free(db->proto_priv);
	db->proto_priv = NULL;
}
