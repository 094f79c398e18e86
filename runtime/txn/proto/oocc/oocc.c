/* SPDX-License-Identifier: MIT */
/*
 * OOCC over footer records (store/codec_footer.c). Round trips with cached addresses and no
 * conflicts (docs/oocc.md):
 *
 *   read-only   1 RTT: one READ per record; commits when every record was FREE and the read
 *               phase took less than rv. Otherwise 2: READ {version, lock} of the records
 *               seen under an intention lock (or of all, when the lease ran out).
 *   read-write  1: READ the read set, CAS(0 -> INTENT) + READ each written record
 *               2: upgrade WRITE (LOCKED) + redo-log WRITEs + validation READs, one doorbell
 *               wait until now >= t_lock_done + ww (overlaps round 2)
 *               3: one WRITE per record and replica: value, new version, lock 0
 *
 * Aborts release locks by WRITE 0, fire and forget.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <remora/sched.h>

#include "oocc.h"
#include "txn/batch.h"

#define OOCC_TORN_RETRIES 16u
#define OOCC_ROUNDS_MAX 64u
#define OOCC_INSERT_ATTEMPTS 8u

static inline struct oocc_obj *OB(const struct txn_obj *o)
{
	return o->priv;
}

static inline struct oocc_tx *otx(const struct remora_tx *tx)
{
	return tx->priv;
}

static inline struct oocc_db *odb(const struct remora_tx *tx)
{
	return txn_db(tx)->proto_priv;
}

uint64_t oocc_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- releasing --------------------------------------------------------------------------- */

/*
 * Every lock we still hold goes back to 0 (fire and forget): on abort, intention or upgraded
 * locks over untouched data; after a commit, the locks of records fetched for writing but not
 * written (and, without write unlock, those of the written records).
 */
static void release_at(struct remora_tx *tx, const char *point)
{
	struct txb b;

	if (txb_init(tx, &b, txb_need(tx)))
		return;
	bool faa = false;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];

		if (o->flags & OBJ_LOCKED)
			txb_unlock(tx, &b, o);
		o->flags &= ~(OBJ_LOCKED | OBJ_CAS_SENT);
		if (OB(o) && OB(o)->rlocked) {
			b.wrs[b.n++] = store_wr_faa(&txn_db(tx)->st, o->primary,
							   o->off + o->t->geom.lock_off,
							   (uint64_t)-1, &OB(o)->faa_old, 0);
			OB(o)->rlocked = false;
			faa = true;
		}
	}
	if (point)
		txn_point(tx, point);
	if (!faa) {
		txb_post_async(tx, &b);
		return;
	}
	txn_post_unlocks(tx, b.wrs, b.n); /* the FAA results land in the arena */
}

static void release(struct remora_tx *tx)
{
	release_at(tx, "txn.abort_unlock");
}

static int abort_with(struct remora_tx *tx, enum remora_abort_reason why)
{
	release(tx);
	return txn_poison(tx, -REMORA_EABORT, why);
}

static int fail(struct remora_tx *tx, int rc)
{
	release(tx);
	return txn_poison(tx, rc, REMORA_ABORT_NONE);
}

/*
 * A commit that fails once its commit WRITEs went out: some may have landed (the primary's
 * WRITE also unlocks its record), others not, and only recovery decides it now (roll forward
 * when some replica carries the new version). Every lock still held stays held, so no reader
 * sees the records not yet written next to those written, and the coordinator stops: its log
 * slot must stay as it is for recovery. The unlock_after_log mutation releases the locks.
 */
static int strand(struct remora_tx *tx, int rc)
{
	if (txb_mut(tx, MUT_UNLOCK_AFTER_LOG))
		return fail(tx, rc);
	((struct oocc_coord *)tx->c->priv)->stranded = rc;
	for (unsigned i = 0; i < tx->nobj; i++) {
		tx->objs[i]->flags &= ~(OBJ_LOCKED | OBJ_CAS_SENT);
		if (OB(tx->objs[i]))
			OB(tx->objs[i])->rlocked = false;
	}
	return txn_poison(tx, rc, REMORA_ABORT_NONE);
}

/*
 * Kills the redo log where it may have landed and waits for that: 0, or the error. Recovery
 * takes a valid log with a logged record that a later transaction overwrote as a commit
 * (docs/oocc.md, "Recovery"): a logged record is locked from before its log goes out, and
 * only a commit WRITE may unlock it while the log lives. So no lock of a logged transaction
 * goes back on an abort or a failure before this returned 0 (the abort_keeps_log mutation
 * skips it).
 */
static int unlog(struct remora_tx *tx)
{
	static const struct store_log_hdr dead;
	const struct store_db *st = &txn_db(tx)->st;
	uint32_t nodes = otx(tx)->log_nodes;
	struct txb b;
	int rc;

	if (!nodes || txb_mut(tx, MUT_OOCC_ABORT_KEEPS_LOG))
		return 0;
	if (txb_init(tx, &b, st->n_mn))
		return -ENOMEM;
	for (uint16_t m = 0; m < st->n_mn; m++)
		if (nodes & (1u << m))
			txb_write(tx, &b, m, store_log_off(st, tx->c->log_slot), &dead, sizeof(dead),
				txb_durable(tx, MUT_NO_LOG_PERSIST));
	txn_point(tx, "txn.unlog");
	rc = txb_exec(tx, &b, "log invalidation");
	if (!rc)
		otx(tx)->log_nodes = 0;
	return rc;
}

/* An abort once the log may have landed: unlogged, then unlocked; else stranded, locks kept. */
static int abort_logged(struct remora_tx *tx, enum remora_abort_reason why)
{
	int rc = unlog(tx);

	return rc ? strand(tx, rc) : abort_with(tx, why);
}

/* A failure once the log may have landed (rc: the failure), the same way. */
static int fail_logged(struct remora_tx *tx, int rc)
{
	return unlog(tx) ? strand(tx, rc) : fail(tx, rc);
}

/* ---- redo log ---------------------------------------------------------------------------- */

/* The committed image of o (lock 0), in the arena: the redo entry and the commit WRITE. */
static unsigned char *new_image(struct remora_tx *tx, struct txn_obj *o)
{
	const struct codec_geom *g = &o->t->geom;
	struct codec_rec r = {
		.lock = OOCC_FREE, .version = tx->id, .key = o->key, .table = o->table,
		.flags = (o->flags & OBJ_DELETE) ? REMORA_REC_DELETED : REMORA_REC_VALID,
		.value = o->newval,
	};
	unsigned char *img = txn_arena_alloc(&tx->c->arena, g->stride);

	if (img)
		txn_db(tx)->st.codec->encode(g, img, 0, &r);
	return img;
}

/*
 * Builds the redo log (header + per written record {entry, new image}) into the coordinator's
 * buffer and adds one WRITE per node holding a replica of a written record. imgs[i] is the
 * new image of tx->objs[i] (NULL: not written).
 */
static int log_post(struct remora_tx *tx, struct txb *b, unsigned char **imgs)
{
	const struct store_db *st = &txn_db(tx)->st;
	unsigned char *buf = ((struct oocc_coord *)tx->c->priv)->logbuf;
	uint32_t at = sizeof(struct store_log_hdr), cap = st->sb.log_slot_bytes, nodes = 0;
	uint16_t n = 0;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		int rc;

		if (!imgs[i])
			continue;
		rc = txn_log_append(tx, buf, &at, cap, o, OB(o)->version, imgs[i]);
		if (rc)
			return rc;
		n++;
		for (unsigned r = 0; r < st->replicas; r++)
			nodes |= 1u << store_replica(st, o->primary, r);
	}
	if (!n)
		return 0;
	txn_log_seal(tx, buf, at, n, otx(tx)->locked);
	for (uint16_t m = 0; m < st->n_mn; m++)
		if (nodes & (1u << m))
			txb_write(tx, b, m, store_log_off(st, tx->c->log_slot), buf, at,
				txb_durable(tx, MUT_NO_LOG_PERSIST));
	otx(tx)->log_nodes = nodes;
	return 0;
}

/* ---- execution --------------------------------------------------------------------------- */

static enum txn_step fetch_step(const struct remora_tx *tx, const struct txn_obj *o)
{
	bool want_rw = (o->flags & OBJ_WANT_RW) && !(o->flags & OBJ_RW_DONE);

	if (want_rw && !(o->flags & OBJ_LOCKED))
		return TXN_STEP_LOCK_READ;
	if (odb(tx)->v.twopl && !(o->flags & OBJ_WANT_RW) && !OB(o)->rlocked)
		return TXN_STEP_RLOCK_READ; /* 2PL: READ under a shared lock, taken by CAS */
	if (!(o->flags & OBJ_FETCHED) || want_rw)
		return TXN_STEP_READ;
	return TXN_STEP_NONE;
}

/* 0 done, -EAGAIN read again (torn), 1 another key (look up again), or an abort/failure. */
static int fetch_settle(struct remora_tx *tx, struct txn_obj *o, enum txn_step step)
{
	struct codec_rec r;
	int rc;

	if (step == TXN_STEP_LOCK_READ && !(o->flags & OBJ_LOCKED))
		return abort_with(tx, REMORA_ABORT_LOCKED);
	if (step == TXN_STEP_RLOCK_READ && !OB(o)->rlocked) {
		/* a writer holds it (no-wait: abort), or other readers: CAS on their count */
		if (OOCC_STATE(OB(o)->cas_old) || ++OB(o)->retries > OOCC_TORN_RETRIES)
			return abort_with(tx, REMORA_ABORT_LOCKED);
		OB(o)->rl_expect = OB(o)->cas_old;
		return -EAGAIN;
	}
	rc = txn_fetch_decode(tx, o, &r);
	if (rc == -EAGAIN)
		return ++OB(o)->retries > OOCC_TORN_RETRIES ?
			       abort_with(tx, REMORA_ABORT_VALIDATION) : -EAGAIN;
	if (rc)
		return rc < 0 ? fail(tx, rc) : rc;
	if ((o->flags & OBJ_FETCHED) && r.version != OB(o)->version)
		return abort_with(tx, REMORA_ABORT_VALIDATION);
	if (!(o->flags & OBJ_LOCKED)) {
		if (OOCC_STATE(r.lock) == OOCC_LOCKED)
			return abort_with(tx, REMORA_ABORT_LOCKED);
		if (OOCC_STATE(r.lock) == OOCC_INTENT)
			OB(o)->intent_seen = true;
	}
	OB(o)->version = r.version;
	txn_fetch_take(o, &r);
	OB(o)->retries = 0;
	return 0;
}

/* The lock word the execution CAS installs: INTENT, or LOCKED at once without delayed locks. */
static uint64_t exec_lock(const struct remora_tx *tx)
{
	return odb(tx)->v.delayed_lock ? otx(tx)->intent : otx(tx)->locked;
}

/*
 * After a round that took locks: the writer's lease starts at the arrival of the last CAS ack,
 * and its ww is the larger of the one at begin and the one now (a lease raised meanwhile by
 * the manager must be honoured: docs/oocc.md, decision 10).
 */
static void note_locks_done(struct remora_tx *tx)
{
	uint64_t w = __atomic_load_n(&odb(tx)->lease_word, __ATOMIC_ACQUIRE);
	uint32_t ww = txb_mut(tx, MUT_OOCC_RV_GT_WW) ? (uint32_t)w / 8 : (uint32_t)w;

	otx(tx)->t_lock_done = oocc_now_ns();
	if (ww > otx(tx)->ww)
		otx(tx)->ww = ww;
}

/*
 * The reader's lease starts at the issue of its first execution verb, and the rv it trusts is
 * the smaller of the one read at begin and the one read now, after taking t_start: a lease
 * manager that committed a shorter lease between begin and this point has waited out only the
 * leases started before its Prepare, not one started now under the old, longer rv. Reading
 * the word after the clock keeps the lease inside what the word allows (decision 18). The
 * oocc_rv_at_begin mutation keeps begin's rv.
 */
static void lease_start(struct remora_tx *tx)
{
	struct oocc_tx *t = otx(tx);
	uint64_t w;
	uint32_t rv;

	t->t_start = oocc_now_ns();
	w = __atomic_load_n(&odb(tx)->lease_word, __ATOMIC_ACQUIRE);
	rv = (uint32_t)(w >> 32);
	if (!txb_mut(tx, MUT_OOCC_RV_AT_BEGIN) && rv < t->rv)
		t->rv = rv;
}

static uint64_t lock_expect(const struct txn_obj *o)
{
	return OB(o)->rlocked ? 1 : OOCC_FREE;
}

static void post_round(struct remora_tx *tx, struct txb *b, struct txn_obj *const *objs,
		       unsigned n, enum txn_step *steps, bool *locking)
{
	for (unsigned i = 0; i < n; i++) {
		struct txn_obj *o = objs[i];
		const struct codec_geom *g = &o->t->geom;

		steps[i] = (o->flags & OBJ_HAVE_REC) ? fetch_step(tx, o) : TXN_STEP_NONE;
		if (steps[i] == TXN_STEP_LOCK_READ) {
			/* twopl: a read lock that is ours alone (count 1) upgrades in place */
			txb_lock_cas(tx, b, o, lock_expect(o), exec_lock(tx), &OB(o)->cas_old);
			o->flags |= OBJ_CAS_SENT;
			*locking = true;
		} else if (steps[i] == TXN_STEP_RLOCK_READ) {
			txb_lock_cas(tx, b, o, OB(o)->rl_expect, OB(o)->rl_expect + 1,
				     &OB(o)->cas_old);
		}
		if (steps[i] != TXN_STEP_NONE)
			txb_read(tx, b, o->primary, o->off, o->img, g->stride);
	}
}

int oocc_fetch(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	enum txn_step *steps = txn_scratch(tx->c, TXN_SCRATCH_STEPS, n * sizeof(*steps));
	bool again = false;
	struct txb b;
	int rc;

	if (!steps || txb_init(tx, &b, txb_need(tx)))
		return fail(tx, -ENOMEM);
	for (unsigned round = 0;; round++) {
		bool locking = false;

		if (round == OOCC_ROUNDS_MAX)
			return fail(tx, txn_errf(tx, -EIO, "fetch: no progress after %u rounds", round));
		post_round(tx, &b, objs, n, steps, &locking);
		if (!b.n)
			break;
		if (!otx(tx)->t_start)
			lease_start(tx); /* the reader's lease starts at issue */
		rc = txb_exec(tx, &b, "fetch");
		for (unsigned i = 0; i < n; i++) {
			if (steps[i] == TXN_STEP_LOCK_READ &&
			    OB(objs[i])->cas_old == lock_expect(objs[i])) {
				objs[i]->flags |= OBJ_LOCKED;
				OB(objs[i])->rlocked = false; /* upgraded */
			}
			if (steps[i] == TXN_STEP_RLOCK_READ &&
			    OB(objs[i])->cas_old == OB(objs[i])->rl_expect)
				OB(objs[i])->rlocked = true;
		}
		if (rc)
			return fail(tx, rc);
		if (locking) {
			note_locks_done(tx);
			txn_point(tx, "txn.locked");
		}
		txn_point(tx, "oocc.read");
		rc = txn_settle_round(tx, objs, n, steps, fetch_settle, &again);
		if (rc)
			return rc;
	}
	return again ? -EAGAIN : 0;
}

/* ---- writes ------------------------------------------------------------------------------ */

int oocc_write(struct remora_tx *tx, struct txn_obj *o, const void *value)
{
	return txn_stage_write(tx, o, value) ? fail(tx, -ENOMEM) : 0;
}

int oocc_remove(struct remora_tx *tx, struct txn_obj *o)
{
	return txn_stage_remove(tx, o) ? fail(tx, -ENOMEM) : 0;
}

/* The new record's images: free on the backups, held with our execution lock on the primary. */
static void insert_fill(struct remora_tx *tx, struct txn_obj *o, unsigned char *bimg)
{
	txn_insert_images(tx, o, bimg, otx(tx)->locked); /* backups: OOCC_FREE, 0 */
	if (!otx(tx)->t_start)
		lease_start(tx); /* before the insert's verbs are issued: the reader's lease */
}

/*
 * A new record for an absent key: written on the primary absent and held with our execution
 * lock, then published by one CAS on the first empty index slot in the same doorbell; backups
 * follow fire and forget (as in the OCC core).
 */
static int insert_claim(struct remora_tx *tx, struct txn_obj *o, bool *won)
{
	int rc = txn_insert_claim(tx, o, insert_fill, OBJ_LOCKED, &OB(o)->slot_word,
				  &OB(o)->cas_old, won);

	if (!rc && *won)
		note_locks_done(tx); /* after the CAS ack: the writer's lease (a later start waits longer) */
	return rc;
}

/* A won claim: the record is empty, version 0, held with our execution lock. */
static void insert_fresh(struct remora_tx *tx, struct txn_obj *o)
{
	struct codec_rec r;

	txn_db(tx)->st.codec->decode(&o->t->geom, o->img, 0, &r);
	o->value = r.value;
	OB(o)->version = 0;
}

int oocc_insert(struct remora_tx *tx, struct txn_obj *o, const void *value)
{
	static const struct txn_insert_ops ops = {
		.attempts = OOCC_INSERT_ATTEMPTS, .claim = insert_claim, .fresh = insert_fresh,
		.release = release,
	};

	return txn_insert(tx, o, value, &ops);
}

/* ---- commit ------------------------------------------------------------------------------ */

static bool tx_writes(const struct remora_tx *tx)
{
	for (unsigned i = 0; i < tx->nobj; i++)
		if (tx->objs[i]->flags & OBJ_DIRTY)
			return true;
	return false;
}

/* Read, not held by us: what validation may have to look at. */
static bool is_read(const struct txn_obj *o)
{
	return (o->flags & OBJ_FETCHED) && !(o->flags & OBJ_LOCKED);
}

/*
 * Whether o needs its validation READ. Read-only: only when the lease ran out or o was seen
 * under an intention lock. Read-write: always (skipping it lets two writers that read each
 * other's write set both commit, a write skew: docs/oocc.md, decision R1). Absent keys always
 * check their index slot.
 */
static bool needs_check(const struct remora_tx *tx, const struct txn_obj *o, bool writes,
			bool expired)
{
	if (odb(tx)->v.unsafe || txb_mut(tx, MUT_SKIP_VALIDATION))
		return false;
	if (!(o->flags & OBJ_HAVE_REC))
		return true;
	if (odb(tx)->v.twopl)
		return false; /* read under its read lock */
	if (writes)
		return true;
	return expired || OB(o)->intent_seen || !odb(tx)->v.lease;
}

static unsigned validate_post(struct remora_tx *tx, struct txb *b, bool writes, bool expired)
{
	unsigned n = 0;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		const struct codec_geom *g = &o->t->geom;

		OB(o)->check[0] = OB(o)->check[1] = 0;
		if (!is_read(o) || !needs_check(tx, o, writes, expired))
			continue;
		if (!(o->flags & OBJ_HAVE_REC)) {
			if (o->slot_off)
				txb_read(tx, b, o->primary, o->slot_off, &OB(o)->check[0], 8);
		} else {
			txb_read(tx, b, o->primary, o->off + g->check_off, OB(o)->check, g->check_len);
		}
		n++;
	}
	return n;
}

/* Version unchanged and no lock of another transaction (read-only: an intention lock is fine,
 * the reader is ordered before that writer). */
static int validate_settle(struct remora_tx *tx, bool writes, bool expired)
{
	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		uint64_t st = OOCC_STATE(OB(o)->check[1]);

		if (!is_read(o) || !needs_check(tx, o, writes, expired))
			continue;
		if (!(o->flags & OBJ_HAVE_REC)) {
			if (OB(o)->check[0])
				return abort_logged(tx, REMORA_ABORT_VALIDATION);
			continue;
		}
		if (OB(o)->check[0] != OB(o)->version || st == OOCC_LOCKED ||
		    (writes && st == OOCC_INTENT))
			return abort_logged(tx, REMORA_ABORT_VALIDATION);
	}
	return 0;
}

static void note_ro(struct remora_tx *tx, uint64_t elapsed, bool omitted)
{
	struct oocc_stats *s = &odb(tx)->stats;
	unsigned b = elapsed ? 64u - (unsigned)__builtin_clzll(elapsed) : 0;

	__atomic_fetch_add(&s->ro, 1, __ATOMIC_RELAXED);
	if (omitted)
		__atomic_fetch_add(&s->ro_omit, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&s->hist[b < OOCC_HIST ? b : OOCC_HIST - 1], 1, __ATOMIC_RELAXED);
}

/* The manager's policy, from whichever coordinator passes its tick time first. */
static void manager_poll(struct remora_tx *tx, uint64_t now)
{
	struct oocc_db *d = odb(tx);

	bool cluster = d->ncn > 1;

	/* over several compute nodes, node 0 manages every node's word (manager.c) */
	if (!d->manager || (cluster && txn_db(tx)->cn_id != 0) ||
	    now < __atomic_load_n(&d->next_tick_ns, __ATOMIC_RELAXED))
		return;
	if (__atomic_exchange_n(&d->tick_lock, 1, __ATOMIC_ACQUIRE))
		return;
	__atomic_store_n(&d->next_tick_ns, now + OOCC_TICK_NS, __ATOMIC_RELAXED);
	if (!cluster)
		oocc_lease_tick(txn_db(tx));
	else
		(void)oocc_cluster_tick(txn_db(tx), txn_rpc_ep(tx)); /* a failed tick: no change */
	__atomic_store_n(&d->tick_lock, 0, __ATOMIC_RELEASE);
}

/*
 * Over several compute nodes, this node's word is the cluster's only once a round of the
 * manager reached it (manager.c); before that another node's readers may trust a longer rv
 * than this node's ww. A writer of an unsynced node waits for the round (node 0 runs it from
 * here), then takes the synced ww. No round within OOCC_SYNC_WAIT_NS (the manager or a node
 * is not up): the writer aborts before anything is logged, and the runner retries it.
 */
static int sync_wait(struct remora_tx *tx)
{
	struct oocc_db *d = odb(tx);
	uint64_t now, end, w;
	bool coro;

	if (__atomic_load_n(&d->synced, __ATOMIC_ACQUIRE))
		return 0; /* every commit passes here: no clock read unless it must wait */
	now = oocc_now_ns();
	end = now + OOCC_SYNC_WAIT_NS;
	coro = remora_sched_self() != NULL;
	while (!__atomic_load_n(&d->synced, __ATOMIC_ACQUIRE)) {
		if (now >= end)
			return abort_with(tx, REMORA_ABORT_LOCKED);
		manager_poll(tx, now);
		if (coro)
			remora_yield();
		else if (txn_rpc_ep(tx))
			remora_rpc_poll(txn_rpc_ep(tx)); /* the Commit's handler runs here */
		now = oocc_now_ns();
	}
	w = __atomic_load_n(&d->lease_word, __ATOMIC_ACQUIRE);
	if ((uint32_t)w > otx(tx)->ww)
		otx(tx)->ww = (uint32_t)w;
	return 0;
}

/* Read-only (nothing written): 1 round when the lease covers it, else one validation round. */
static int commit_ro(struct remora_tx *tx, struct txb *b)
{
	uint64_t now = oocc_now_ns();
	uint64_t elapsed = otx(tx)->t_start ? now - otx(tx)->t_start : 0;
	bool expired = elapsed >= otx(tx)->rv;
	unsigned n = validate_post(tx, b, false, expired);
	int rc;

	if (n) {
		txn_point(tx, "txn.validate");
		rc = txb_exec(tx, b, "validate");
		if (rc)
			return fail(tx, rc);
		rc = validate_settle(tx, false, expired);
		if (rc) {
			note_ro(tx, elapsed, false);
			return rc;
		}
	}
	note_ro(tx, elapsed, n == 0);
	release_at(tx, NULL); /* locks of records fetched for writing but not written */
	manager_poll(tx, now);
	return 0;
}

/*
 * The upgrade of o's intention lock to LOCKED: a WRITE, or where atomics are not atomic
 * against WRITEs (db->unlock_cas, txb_unlock) a CAS from our INTENT, which no failed CAS of
 * another node can then write back over.
 */
static void upgrade_post(struct remora_tx *tx, struct txb *b, struct txn_obj *o)
{
	uint64_t off = o->off + o->t->geom.lock_off;

	if (txn_db(tx)->unlock_cas)
		txb_cas(tx, b, o->primary, off, otx(tx)->intent, otx(tx)->locked, NULL);
	else
		txb_write(tx, b, o->primary, off, &otx(tx)->locked, 8, 0);
	o->lock_word = otx(tx)->locked;
}

/* Round 2: upgrade WRITEs, the log, the validation READs, in one doorbell. */
static int commit_round2(struct remora_tx *tx, struct txb *b, unsigned char **imgs)
{
	uint64_t elapsed = oocc_now_ns() - otx(tx)->t_start;
	bool expired = elapsed >= otx(tx)->rv;
	int rc;

	if (odb(tx)->v.delayed_lock)
		for (unsigned i = 0; i < tx->nobj; i++)
			if (imgs[i])
				upgrade_post(tx, b, tx->objs[i]);
	rc = log_post(tx, b, imgs);
	if (rc)
		return fail(tx, rc);
	validate_post(tx, b, true, expired);
	txn_point(tx, "txn.validate");
	rc = txb_exec(tx, b, "validate and lock");
	if (rc)
		return fail_logged(tx, rc);
	otx(tx)->round2_acked = true;
	txn_point(tx, "txn.logged");
	return validate_settle(tx, true, expired);
}

/* Whether commit WRITEs wait out the write lease (the no_lease_wait mutation: not). */
static bool lease_gated(const struct remora_tx *tx)
{
	return !odb(tx)->v.unsafe && odb(tx)->v.lease && !txb_mut(tx, MUT_OOCC_NO_LEASE_WAIT);
}

/*
 * The wait of the commit gate: until the write lease ran out since the last lock was taken
 * (decisions 6 and 3). The no_lease_wait mutation skips it (negative control of the stress
 * test).
 */
static void lease_wait(struct remora_tx *tx)
{
	uint64_t until = otx(tx)->t_lock_done + otx(tx)->ww;
	bool coro = remora_sched_self() != NULL;

	if (!lease_gated(tx))
		return;
	while (oocc_now_ns() < until) {
		if (coro)
			remora_yield();
	}
}

/*
 * The commit gate, checked right before the commit WRITEs are posted, in every build: every
 * upgrade and log WRITE acknowledged (round 2 returned) and now >= t_lock_done + ww. A miss is
 * a bug of this file (or a clock running backwards); the transaction fails with a message
 * instead of posting, and since no commit WRITE went out it unlogs, then releases.
 */
static int gate_check(struct remora_tx *tx)
{
	const struct oocc_tx *t = otx(tx);
	uint64_t now = oocc_now_ns(), until = t->t_lock_done + t->ww;

	if (!t->round2_acked)
		return fail_logged(tx, txn_errf(tx, -EIO, "commit gate: round 2 (upgrades, log) "
						"not acknowledged before the commit WRITEs"));
	if (lease_gated(tx) && now < until)
		return fail_logged(tx, txn_errf(tx, -EIO, "commit gate: commit WRITEs %llu ns "
						"before the write lease (ww %u ns) ran out",
						(unsigned long long)(until - now), t->ww));
	return 0;
}

/*
 * Late upgrade (decision 13): hold the intention lock, which readers pass, until about one
 * round trip before the write lease ends, so that the lock readers abort on lasts ~1 RTT
 * (the paper's claim) instead of the rest of the lease. The round trip is estimated as
 * twice the execution round's. Off with REMORA_OOCC late_upgrade=0 (Algorithm 1 as written).
 */
static void upgrade_wait(struct remora_tx *tx)
{
	const struct oocc_tx *t = otx(tx);
	uint64_t lead = 2 * (t->t_lock_done - t->t_start), until;

	if (!odb(tx)->late_upgrade || !odb(tx)->v.delayed_lock || !odb(tx)->v.lease ||
	    odb(tx)->v.unsafe || txb_mut(tx, MUT_OOCC_NO_LEASE_WAIT) || t->ww <= lead)
		return;
	until = t->t_lock_done + t->ww - lead;
	while (oocc_now_ns() < until)
		if (remora_sched_self())
			remora_yield();
}

/* Round 3: one WRITE per written record and replica; with write_unlock it clears the lock. */
static int commit_apply(struct remora_tx *tx, struct txb *b, unsigned char **imgs)
{
	const struct store_db *st = &txn_db(tx)->st;
	bool wu = odb(tx)->v.write_unlock;
	int rc;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		uint32_t len = wu ? o->t->geom.stride : o->t->geom.lock_off;

		if (!imgs[i])
			continue;
		for (unsigned k = 0; k < st->replicas; k++)
			txb_write(tx, b, store_replica(st, o->primary, k), o->off, imgs[i], len,
				txb_durable(tx, MUT_NO_COMMIT_PERSIST));
	}
	txn_point(tx, "txn.commit_write");
	rc = gate_check(tx);
	if (rc)
		return rc;
	if (txn_db(tx)->split_commit && b->n > 1) {
		rc = store_exec(txn_chan(tx), b->wrs, 1);
		if (!rc) {
			txn_point(tx, "txn.commit_mid");
			rc = store_exec(txn_chan(tx), b->wrs + 1, b->n - 1);
		}
		b->n = 0;
		rc = rc ? txn_errf(tx, rc, "commit: %s", remora_strerror(rc)) : 0;
	} else {
		rc = txb_exec(tx, b, "commit");
	}
	if (rc)
		return strand(tx, rc);
	for (unsigned i = 0; i < tx->nobj; i++)
		if (imgs[i] && wu)
			tx->objs[i]->flags &= ~(OBJ_LOCKED | OBJ_CAS_SENT); /* the WRITE unlocked */
	txn_point(tx, "txn.unlock");
	release_at(tx, NULL); /* without write unlock: the unlock WRITEs; else unwritten locks */
	return 0;
}

int oocc_commit(struct remora_tx *tx)
{
	unsigned char **imgs;
	struct txb b;
	int rc;

	if (txb_init(tx, &b, txb_need(tx)))
		return fail(tx, -ENOMEM);
	if (!tx_writes(tx))
		return commit_ro(tx, &b);
	imgs = txn_arena_alloc(&tx->c->arena, tx->nobj * sizeof(*imgs));
	if (!imgs)
		return fail(tx, -ENOMEM);
	for (unsigned i = 0; i < tx->nobj; i++) {
		imgs[i] = NULL;
		if ((tx->objs[i]->flags & OBJ_DIRTY) &&
		    !(imgs[i] = new_image(tx, tx->objs[i])))
			return fail(tx, -ENOMEM);
	}
	rc = sync_wait(tx);
	if (rc)
		return rc;
	upgrade_wait(tx);
	rc = commit_round2(tx, &b, imgs);
	if (rc)
		return rc;
	lease_wait(tx);
	rc = commit_apply(tx, &b, imgs);
	if (!rc && odb(tx)->manager) /* the clock only when a manager may tick */
		manager_poll(tx, oocc_now_ns());
	return rc;
}

void oocc_abort(struct remora_tx *tx)
{
	release(tx);
}

int oocc_begin(struct remora_tx *tx)
{
	int stranded = ((struct oocc_coord *)tx->c->priv)->stranded;
	struct oocc_tx *t = otx(tx);
	uint64_t w = __atomic_load_n(&odb(tx)->lease_word, __ATOMIC_ACQUIRE);
	uint64_t owner = (tx->seq & 0xffffffffu) << 16 | tx->c->id;

	if (stranded)
		return txn_errf(tx, stranded,
				"coordinator %u stopped: a commit of it failed after its commit "
				"WRITEs went out (%s); its locks and log are left to recovery",
				(unsigned)tx->c->id, remora_strerror(stranded));
	t->intent = OOCC_INTENT | owner;
	t->locked = OOCC_LOCKED | owner;
	t->t_start = 0;
	t->t_lock_done = 0;
	t->round2_acked = false;
	t->log_nodes = 0;
	t->rv = (uint32_t)(w >> 32);
	t->ww = (uint32_t)w;
	if (txb_mut(tx, MUT_OOCC_RV_GT_WW))
		t->ww /= 8; /* writers wait far less than readers trust: unsafe on purpose */
	return 0;
}
