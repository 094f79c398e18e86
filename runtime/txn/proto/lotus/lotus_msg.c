/* SPDX-License-Identifier: MIT */
/*
 * LOTUS's lock state and remote locks. A coordinator's lock requests to another compute node
 * go as one batched RPC per (phase, target node) to the worker with its own index there, so
 * each requesting coordinator's lock state is only ever touched by one worker thread. The
 * state makes requests idempotent (a retried batch never counts a lock twice) and holds the
 * slot each grant used, so a release gives back exactly that hold.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lotus.h"

#define REMOTE_TRIES 2       /* a batch that timed out is sent again (idempotent) */
#define REMOTE_TIMEOUT_MS 1000
#define BATCH 32u            /* requests per message (well within REMORA_RPC_MAX_BATCH) */

static void held_drop_all(struct lotus_db *l, struct lotus_held *p)
{
	for (unsigned i = 0; i < p->n; i++)
		lotus_lt_release(&l->lt, p->e[i].h, p->e[i].slot, p->e[i].write);
	p->n = 0;
}

/* The lock state of coord for txid. A new transaction of the coordinator finds its previous
 * one's holds gone; any left (a release that never arrived) are dropped here. A request of an
 * older transaction (a retried batch delivered late) gets NULL: it must not touch the state
 * of the coordinator's current one (ids of one coordinator only grow). */
static struct lotus_held *held_of(struct lotus_db *l, uint16_t coord, uint64_t txid)
{
	struct lotus_held *p = l->held[coord];

	if (p && txid < p->txid)
		return NULL;

	if (!p) {
		p = calloc(1, sizeof(*p));
		if (!p)
			return NULL;
		l->held[coord] = p;
		p->txid = txid;
	}
	if (p->txid != txid) {
		held_drop_all(l, p);
		p->txid = txid;
	}
	return p;
}

static int held_find(const struct lotus_held *p, uint64_t h, bool write)
{
	for (unsigned i = 0; i < p->n; i++)
		if (p->e[i].h == h && p->e[i].write == write)
			return (int)i;
	return -1;
}

int lotus_hold(struct lotus_db *l, uint16_t coord, uint64_t txid, uint64_t h, bool write)
{
	struct lotus_held *p = held_of(l, coord, txid);
	int slot;

	if (!p)
		return l->held[coord] ? -EBUSY : -ENOMEM; /* stale, or out of memory */
	if (held_find(p, h, write) >= 0)
		return 0; /* a retry: granted already */
	if (p->n == p->cap) {
		unsigned cap = p->cap ? 2 * p->cap : 16;
		struct lotus_hold *e = realloc(p->e, cap * sizeof(*e));

		if (!e)
			return -ENOMEM;
		p->e = e, p->cap = cap;
	}
	slot = lotus_lt_acquire(&l->lt, h, write);
	if (slot < 0)
		return -EBUSY;
	p->e[p->n++] = (struct lotus_hold){ .h = h, .slot = (int8_t)slot, .write = write };
	return 0;
}

void lotus_unhold(struct lotus_db *l, uint16_t coord, uint64_t txid, uint64_t h, bool write)
{
	struct lotus_held *p = l->held[coord];
	int i;

	if (!p || p->txid != txid)
		return;
	i = held_find(p, h, write);
	if (i < 0)
		return;
	lotus_lt_release(&l->lt, h, p->e[i].slot, write);
	p->e[i] = p->e[--p->n];
}

/* ---- handlers ------------------------------------------------------------------------------ */

static int lock_handler(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
			uint32_t *rep_len)
{
	struct remora_db *db = arg;
	struct lotus_db *l = ldb_of(db);
	struct lotus_lock_req r;

	(void)rep, (void)cap;
	*rep_len = 0;
	if (req->len != sizeof(r))
		return -EINVAL;
	memcpy(&r, req->data, sizeof(r));
	if (r.shard >= LOTUS_SHARDS || l->shard_cn[r.shard] != db->cn_id)
		return -ESTALE; /* not the owner: the requester refreshes its map */
	if (req->op == LOTUS_OP_UNLOCK) {
		lotus_unhold(l, r.coord, r.txid, r.h, r.write);
		return 0;
	}
	return lotus_hold(l, r.coord, r.txid, r.h, r.write);
}

int lotus_rpc_init(struct remora_db *db, struct remora_rpc *rpc)
{
	int rc = remora_rpc_register(rpc, LOTUS_OP_LOCK, lock_handler, db);

	return rc ? rc : remora_rpc_register(rpc, LOTUS_OP_UNLOCK, lock_handler, db);
}

/* ---- requester side ------------------------------------------------------------------------ */

static void req_fill(struct remora_tx *tx, const struct txn_obj *o, bool write,
		     struct lotus_lock_req *r)
{
	memset(r, 0, sizeof(*r));
	r->txid = tx->id;
	r->h = o->hash;
	r->coord = tx->c->id;
	r->shard = (uint16_t)(o->key % LOTUS_SHARDS);
	r->write = write;
}

/* The object's lock mode to request (lock) or give back. */
static bool want_write(const struct txn_obj *o, bool lock)
{
	return lock ? (o->flags & OBJ_WANT_RW) != 0 : LO(o)->mode == 2;
}

/* One batch (at most BATCH requests) to cn, sent again after a timeout. */
static int remote_batch(struct remora_tx *tx, uint16_t cn, struct remora_rpc_call *calls,
			unsigned m)
{
	int rc = -ETIMEDOUT;

	for (unsigned t = 0; t < REMOTE_TRIES && rc == -ETIMEDOUT; t++)
		rc = remora_rpc_call(txn_rpc_ep(tx), cn, (uint16_t)tx->c->w->index, calls, m,
				     REMOTE_TIMEOUT_MS);
	return rc;
}

/* Collects objs owned by cn (and needing the step) into calls/reqs; returns how many. */
static unsigned remote_collect(struct remora_tx *tx, uint16_t cn, struct txn_obj *const *objs,
			       unsigned n, bool lock, struct remora_rpc_call *calls,
			       struct lotus_lock_req *reqs, struct txn_obj **who)
{
	unsigned m = 0;

	for (unsigned i = 0; i < n && m < BATCH; i++) {
		struct txn_obj *o = objs[i];

		if (LO(o)->owner != cn || (lock ? LO(o)->mode != 0 : LO(o)->mode == 0))
			continue;
		req_fill(tx, o, want_write(o, lock), &reqs[m]);
		calls[m] = (struct remora_rpc_call){ .op = lock ? LOTUS_OP_LOCK : LOTUS_OP_UNLOCK,
						     .req = &reqs[m], .req_len = sizeof(reqs[m]) };
		who[m++] = o;
	}
	return m;
}

int lotus_remote(struct remora_tx *tx, uint16_t cn, struct txn_obj *const *objs, unsigned n,
		 bool lock)
{
	struct remora_rpc_call calls[BATCH];
	struct lotus_lock_req reqs[BATCH];
	struct txn_obj *who[BATCH];
	int refused = 0;

	for (;;) {
		unsigned m = remote_collect(tx, cn, objs, n, lock, calls, reqs, who);
		int rc;

		if (!m)
			return refused;
		rc = remote_batch(tx, cn, calls, m);
		if (rc && lock) {
			/* No answer (a node stopped or slow): maybe granted, so the abort releases
			 * them (a release of a lock not held is a no-op in the lock state). */
			for (unsigned i = 0; i < m; i++)
				LO(who[i])->mode = reqs[i].write ? 2 : 1;
			return -EBUSY;
		}
		for (unsigned i = 0; i < m; i++) {
			if (!lock || rc) {
				LO(who[i])->mode = 0; /* a release that got no answer: the node's own
						       * next grant to this coordinator drops it */
			} else if (calls[i].status == 0) {
				LO(who[i])->mode = reqs[i].write ? 2 : 1;
			} else {
				LO(who[i])->mode = -1; /* refused: not asked again this round */
				refused = -EBUSY;
			}
		}
	}
}
