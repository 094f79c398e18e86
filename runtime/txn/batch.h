/* SPDX-License-Identifier: MIT */
/*
 * A transaction's verb batch, shared by the protocols that build their phases as batches of
 * one-sided verbs (the OCC core, Motor, OOCC): verbs are appended to the coordinator's verb
 * scratch, then executed (waited for) or posted without waiting. Appending never checks room:
 * txb_need() is the most any phase of a transaction posts at once.
 */
#ifndef REMORA_TXN_BATCH_H
#define REMORA_TXN_BATCH_H

#include <errno.h>

#include "transport/direct.h"
#include "txn.h"

struct txb {
	struct remora_wr *wrs;
	unsigned n, cap;
};

/* Whether mutation m is switched on for tx's database. */
static inline bool txb_mut(const struct remora_tx *tx, enum mut_id m)
{
	return txn_db_mut(txn_db(tx), m);
}

/*
 * What recovery after a whole-cluster crash reads must be persistent before it counts (pmem;
 * other backends ignore the flag): a log before any commit WRITE starts, a commit WRITE
 * before commit returns, an insert's record and index slot before anything can depend on
 * them. Lock words are not: recovery releases every lock. The no_*_persist mutations drop
 * the flag, for the crash test's negative controls: REMORA_WR_DURABLE unless `unless` is on.
 */
static inline uint8_t txb_durable(const struct remora_tx *tx, enum mut_id unless)
{
	return txb_mut(tx, unless) ? 0 : REMORA_WR_DURABLE;
}

/* Room for every verb any phase of this transaction can post at once. */
static inline unsigned txb_need(const struct remora_tx *tx)
{
	const struct store_db *st = &txn_db(tx)->st;

	return tx->nobj * (st->replicas + 3u) + st->n_mn + 8u;
}

/* An empty batch of room cap (at least one verb) in the coordinator's scratch; -ENOMEM. */
static inline int txb_init(struct remora_tx *tx, struct txb *b, unsigned cap)
{
	b->wrs = txn_wrs(tx->c, cap ? cap : 1);
	b->n = 0;
	b->cap = cap;
	return b->wrs ? 0 : -ENOMEM;
}

static inline void txb_read(struct remora_tx *tx, struct txb *b, uint16_t node, uint64_t off,
			    void *dst, uint32_t len)
{
	b->wrs[b->n++] = store_wr_read(&txn_db(tx)->st, node, off, dst, len);
}

static inline void txb_write(struct remora_tx *tx, struct txb *b, uint16_t node, uint64_t off,
			     const void *src, uint32_t len, uint8_t flags)
{
	b->wrs[b->n++] = store_wr_write(&txn_db(tx)->st, node, off, src, len, flags);
}

static inline void txb_cas(struct remora_tx *tx, struct txb *b, uint16_t node, uint64_t off,
			   uint64_t compare, uint64_t swap, uint64_t *old)
{
	b->wrs[b->n++] = store_wr_cas(&txn_db(tx)->st, node, off, compare, swap, old);
}

/*
 * The lock CAS of o (compare -> swap on its lock word, the result into *old). *old first gets
 * a value the CAS cannot return on success (~compare), so that a CAS refused with its batch,
 * or completed with an error, never reads as a won lock, whose release would then clear
 * another transaction's lock. The stale_cas_old mutation leaves *old as it was.
 */
static inline void txb_lock_cas(struct remora_tx *tx, struct txb *b, struct txn_obj *o,
				uint64_t compare, uint64_t swap, uint64_t *old)
{
	if (!txb_mut(tx, MUT_STALE_CAS_OLD))
		*old = ~compare;
	o->lock_word = swap;
	txb_cas(tx, b, o->primary, o->off + o->t->geom.lock_off, compare, swap, old);
}

/*
 * Releases o's lock word: a WRITE of zero (only the holder writes it), or with db->unlock_cas
 * (atomics not atomic against WRITEs) a CAS from the word our lock CAS put there to zero, so
 * that no failed CAS of another node can write the locked word back over it. The CAS's
 * result is not needed: the word is ours until it goes.
 */
static inline void txb_unlock(struct remora_tx *tx, struct txb *b, const struct txn_obj *o)
{
	static const uint64_t zero; /* the WRITE's source: lives as long as the process */
	uint64_t off = o->off + o->t->geom.lock_off;

	if (txn_db(tx)->unlock_cas && o->lock_word)
		txb_cas(tx, b, o->primary, off, o->lock_word, 0, NULL);
	else
		txb_write(tx, b, o->primary, off, &zero, 8, 0);
}

/* Executes the batch and waits; on failure one line "what: error" on tx. Empties b. */
static inline int txb_exec(struct remora_tx *tx, struct txb *b, const char *what)
{
	int rc;

	if (!b->n)
		return 0;
	rc = store_exec(txn_chan(tx), b->wrs, b->n);
	b->n = 0;
	return rc ? txn_errf(tx, rc, "%s: %s", what, remora_strerror(rc)) : 0;
}

/* The memory nodes failed over in this process (verbs to them are refused). */
static inline uint32_t txb_down(const struct remora_tx *tx)
{
	return rt_transport_down_mask(txn_db(tx)->st.tp);
}

/*
 * Drops the verbs of b aimed at nodes that failed over: a batch built before the failure
 * would be refused whole, and with it the unlocks of the live nodes.
 */
static inline void txb_drop_down(struct remora_tx *tx, struct txb *b)
{
	uint32_t down = txb_down(tx);
	unsigned n = 0;

	if (!down)
		return;
	for (unsigned i = 0; i < b->n; i++)
		if (!(down >> remora_gaddr_node(b->wrs[i].raddr) & 1u))
			b->wrs[n++] = b->wrs[i];
	b->n = n;
}

/*
 * Posts without waiting (unlocks): nobody waits for their completion. A refused post or a
 * failed unlock is kept in the coordinator's unlocks waiter: its next begin strands it
 * (txn_async_settle), since the lock may stay held under a live id. Empties b.
 */
static inline int txb_post_async(struct remora_tx *tx, struct txb *b)
{
	struct remora_waiter *w = &tx->c->unlocks;
	int rc;

	if (txb_mut(tx, MUT_UNLOCK_FAILURE_IGNORED))
		w = NULL;
	txb_drop_down(tx, b);
	rc = b->n ? store_post_nowait(txn_chan(tx), b->wrs, b->n, w) : 0;
	b->n = 0;
	if (!rc)
		return 0;
	rc = txn_errf(tx, rc, "unlock: %s", remora_strerror(rc));
	if (w)
		txn_unlock_failed(tx->c, rc);
	return rc;
}

/* Gives o's lock back at once, without touching the coordinator's verb scratch. */
static inline void txb_unlock_now(struct remora_tx *tx, struct txn_obj *o)
{
	struct remora_wr wr;
	struct txb b = { .wrs = &wr, .n = 0, .cap = 1 };

	txb_unlock(tx, &b, o);
	txb_post_async(tx, &b);
	o->flags &= ~(OBJ_LOCKED | OBJ_CAS_SENT);
}

/*
 * The last step of a won insert claim: o's record image bimg and its index slot word go to
 * every backup replica, durably, posted tracked (both live in the arena: the coordinator's
 * next transaction waits for these first); then the key's slot is cached.
 */
static inline int txb_insert_backups(struct remora_tx *tx, struct txb *b, struct txn_obj *o,
				     const void *bimg, const uint64_t *slot_word)
{
	const struct store_db *st = &txn_db(tx)->st;
	int rc;

	for (unsigned i = 0; i < st->replicas; i++) {
		uint16_t m = store_replica(st, store_home(st, o->bucket), i);

		if (m == o->primary || store_node_dead(st, m))
			continue;

		txb_write(tx, b, m, o->off, bimg, o->t->geom.stride, REMORA_WR_DURABLE);
		txb_write(tx, b, m, o->slot_off, slot_word, 8, REMORA_WR_DURABLE);
	}
	txb_drop_down(tx, b);
	rc = txn_post_tracked(tx->c, b->wrs, b->n);
	if (rc)
		return txn_errf(tx, rc, "insert: %s", remora_strerror(rc));
	txn_cache_put(&txn_db(tx)->cache, o->hash, o->off);
	return 0;
}

#endif
