/* SPDX-License-Identifier: MIT */
/*
 * LOTUS's lock state and remote locks. A coordinator's lock requests to another compute node
 * go as one batched RPC per (phase, target node) to the worker with its own index there, so
 * each requesting coordinator's lock state is only ever touched by one worker thread. The
 * state makes requests idempotent (a retried batch never counts a lock twice) and holds the
 * slot each grant used, so a release gives back exactly that hold.
 *
 * Draining: a compute node's lock table must outlive its own coordinators, since another
 * node's coordinators still lock there. When a worker's coordinators are done, the worker
 * tells the worker of its index on every other node DONE (with its coordinators' ids: the
 * owner drops whatever they still hold, such as a hold whose release got lost) and keeps
 * serving until each of them said DONE to it as well.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lotus.h"

#define REMOTE_TRIES 40      /* a batch that timed out is sent again (idempotent) */
#define REMOTE_TIMEOUT_MS 50 /* per try: 2 s in all, cut short once the node is dead */
#define BATCH 32u            /* requests per message (well within REMORA_RPC_MAX_BATCH) */
#define DRAIN_IDLE_NS 10000000000ull /* a drain with no message for 10 s stops (a dead peer) */
#define DRAIN_NAP_NS 100000L         /* a draining worker with nothing to do sleeps 0.1 ms */

static void hold_release(struct lotus_db *l, const struct lotus_hold *e)
{
	lotus_lt_release(&l->lt, e->h, e->slot, e->write);
	__atomic_fetch_sub(&l->held_n[e->shard], 1, __ATOMIC_SEQ_CST);
}

static void held_drop_all(struct lotus_db *l, struct lotus_held *p)
{
	for (unsigned i = 0; i < p->n; i++)
		hold_release(l, &p->e[i]);
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

/*
 * A grant counts in its shard's held_n, then the shard's owner is read again: the resharder
 * stores LOTUS_NO_OWNER, then reads held_n (reshard.c), so of a grant and a handover that
 * overlap, one of the two sees the other (both sides store, then load, seq_cst).
 */
static int grant_counted(struct lotus_db *l, uint64_t h, uint16_t shard, bool write, int slot)
{
	__atomic_fetch_add(&l->held_n[shard], 1, __ATOMIC_SEQ_CST);
	if (lotus_owner(l, shard) == l->self) {
		__atomic_fetch_add(&l->hits[shard], 1, __ATOMIC_RELAXED);
		return 0;
	}
	hold_release(l, &(struct lotus_hold){ .h = h, .shard = shard, .slot = (int8_t)slot,
					      .write = write });
	return -ESTALE;
}

void lotus_dead_drop(struct lotus_db *l, unsigned w)
{
	uint64_t rec = txn_cn_recovered(), fresh;
	uint32_t cpw = l->per_worker;

	if (w >= REMORA_RPC_MAX_WORKERS || rec == l->dead_seen[w] || l->keep_dead_holds)
		return;
	fresh = rec & ~l->dead_seen[w];
	l->dead_seen[w] = rec;
	for (uint16_t cn = 0; fresh; cn++, fresh >>= 1) {
		if (!(fresh & 1))
			continue;
		/* the coordinators of worker index w there send to worker w here */
		for (uint32_t k = w * cpw; k < (w + 1) * cpw && k < l->per_cn; k++) {
			struct lotus_held *p = l->held[txn_coord_id(cn, k)];

			if (p)
				held_drop_all(l, p);
		}
	}
}

int lotus_hold(struct lotus_db *l, uint16_t coord, uint64_t txid, uint64_t h, uint16_t shard,
	       bool write)
{
	struct lotus_held *p;
	int slot;

	if (!__atomic_load_n(&l->serving, __ATOMIC_ACQUIRE))
		return -ESTALE; /* restarted: not yet (reshard.c) */
	p = held_of(l, coord, txid);
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
	shard %= LOTUS_SHARDS;
	if (lotus_owner(l, shard) != l->self)
		return -ESTALE;
	slot = lotus_lt_acquire(&l->lt, h, write);
	if (slot < 0)
		return -EBUSY;
	if (grant_counted(l, h, shard, write, slot))
		return -ESTALE;
	p->e[p->n++] = (struct lotus_hold){ .h = h, .shard = shard, .slot = (int8_t)slot,
					    .write = write };
	return 0;
}

void lotus_finish(struct lotus_db *l, uint16_t coord)
{
	if (!l->done_keeps_holds)
		held_of(l, coord, UINT64_MAX); /* drops every hold; no later id passes it */
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
	hold_release(l, &p->e[i]);
	p->e[i] = p->e[--p->n];
}

/* ---- handlers ------------------------------------------------------------------------------ */

static int lock_handler(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
			uint32_t *rep_len)
{
	struct remora_db *db = arg;
	struct lotus_db *l = ldb_of(db);
	struct lotus_lock_req r;
	int rc;

	(void)rep, (void)cap;
	*rep_len = 0;
	if (req->len != sizeof(r))
		return -EINVAL;
	memcpy(&r, req->data, sizeof(r));
	if (r.shard >= LOTUS_SHARDS)
		return -EINVAL;
	lotus_dead_drop(l, req->from.worker);
	if (req->op == LOTUS_OP_UNLOCK) { /* also while handing the shard over: it drains */
		lotus_unhold(l, r.coord, r.txid, r.h, r.write);
		return 0;
	}
	if (req->from.cn < 64 && (txn_cn_gone() >> req->from.cn & 1))
		return -ESTALE; /* sent before its node died: nobody would release it */
	rc = lotus_hold(l, r.coord, r.txid, r.h, r.shard, r.write); /* -ESTALE: not the owner */
	/* Another node's writer: our cached image of the key is about to go stale (Alg. 1). */
	if (rc == 0 && r.write && !l->vt_no_drop)
		lotus_vt_drop(&l->vt, r.h);
	return rc;
}

/* DONE from the worker of our index on node from.cn: its coordinators (the payload) ended. */
static int done_handler(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
			uint32_t *rep_len)
{
	struct lotus_db *l = ldb_of(arg);
	const unsigned char *d = req->data;

	(void)rep, (void)cap;
	*rep_len = 0;
	if (req->len % sizeof(uint16_t) || req->from.cn >= 64 ||
	    req->from.worker >= REMORA_RPC_MAX_WORKERS)
		return -EINVAL;
	for (uint32_t i = 0; i < req->len; i += sizeof(uint16_t)) {
		uint16_t c;

		memcpy(&c, d + i, sizeof(c));
		lotus_finish(l, c);
	}
	__atomic_fetch_or(&l->peers_done[req->from.worker], UINT64_C(1) << req->from.cn,
			  __ATOMIC_RELEASE);
	return 0;
}

int lotus_rpc_init(struct remora_db *db, struct remora_rpc *rpc)
{
	int rc = remora_rpc_register(rpc, LOTUS_OP_LOCK, lock_handler, db);

	if (!rc)
		rc = remora_rpc_register(rpc, LOTUS_OP_UNLOCK, lock_handler, db);
	return rc ? rc : remora_rpc_register(rpc, LOTUS_OP_DONE, done_handler, db);
}

/* ---- draining ------------------------------------------------------------------------------ */

static uint64_t drain_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Tells every peer in `peers` not yet in *told that w's coordinators are done (one try each). */
static bool drain_tell(struct remora_worker *w, uint64_t peers, uint64_t *told,
		       const uint16_t *ids)
{
	bool any = false;

	for (uint16_t cn = 0; cn < 64; cn++) {
		struct remora_rpc_call c = { .op = LOTUS_OP_DONE, .req = ids,
					     .req_len = w->ncoords * (uint32_t)sizeof(*ids) };

		if (!(peers >> cn & 1) || (*told >> cn & 1))
			continue;
		if (remora_rpc_call(w->rpc, cn, (uint16_t)w->index, &c, 1, REMOTE_TIMEOUT_MS) == 0 &&
		    c.status == 0) {
			*told |= UINT64_C(1) << cn;
			any = true;
		}
	}
	return any;
}

void lotus_worker_drain(struct remora_worker *w)
{
	struct lotus_db *l = ldb_of(w->db);
	uint64_t all = l->ncn >= 64 ? UINT64_MAX : (UINT64_C(1) << l->ncn) - 1;
	uint64_t peers = all & ~(UINT64_C(1) << w->db->cn_id), told = 0, last, *done;
	uint16_t *ids;

	if (!peers || w->index >= REMORA_RPC_MAX_WORKERS)
		return;
	ids = calloc(w->ncoords ? w->ncoords : 1, sizeof(*ids));
	if (!ids)
		return;
	done = &l->peers_done[w->index];
	last = drain_now();
	for (unsigned i = 0; i < w->ncoords; i++)
		ids[i] = w->coords[i].id;
	/* A node beyond ncn owns no shard: nobody locks there, so it only tells. */
	if (w->db->cn_id >= l->ncn)
		__atomic_fetch_or(done, peers, __ATOMIC_RELAXED);
	while ((told != peers || (__atomic_load_n(done, __ATOMIC_ACQUIRE) & peers) != peers) &&
	       drain_now() - last < DRAIN_IDLE_NS) {
		bool any;

		peers &= ~txn_cn_gone(); /* a dead peer says nothing, and needs nothing */
		any = drain_tell(w, peers, &told, ids);

		if (remora_rpc_poll(w->rpc) > 0 || any)
			last = drain_now();
		else
			nanosleep(&(struct timespec){ .tv_nsec = DRAIN_NAP_NS }, NULL);
	}
	free(ids);
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

/* One batch (at most BATCH requests) to cn, sent again after a timeout, until cn is
 * declared dead (its lock table died with it: nothing to wait for). */
static int remote_batch(struct remora_tx *tx, uint16_t cn, struct remora_rpc_call *calls,
			unsigned m)
{
	int rc = -ETIMEDOUT;

	for (unsigned t = 0; t < REMOTE_TRIES && rc == -ETIMEDOUT; t++) {
		if (cn < 64 && (txn_cn_gone() >> cn & 1))
			return -ETIMEDOUT;
		rc = remora_rpc_call(txn_rpc_ep(tx), cn, (uint16_t)tx->c->w->index, calls, m,
				     REMOTE_TIMEOUT_MS);
	}
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

/*
 * The unlocks of objs owned by cn, one way: nothing waits for them. The owner handles them
 * before any later request of this worker (remora_rpc_post), so this coordinator's next lock
 * there comes after; an unlock that never lands is dropped by the owner at this coordinator's
 * next grant (lotus_hold), as one whose reply was lost always was. A post that fails (a full
 * mailbox until the timeout, a lost connection) falls back to the waited unlock, which tries
 * again. The lotus_unlock_waits mutation waits for the replies always (the old way, for the
 * ablation).
 */
static void remote_unlock(struct remora_tx *tx, uint16_t cn, struct txn_obj *const *objs,
			  unsigned n)
{
	struct remora_rpc_call calls[BATCH];
	struct lotus_lock_req reqs[BATCH];
	struct txn_obj *who[BATCH];
	unsigned m;

	while ((m = remote_collect(tx, cn, objs, n, false, calls, reqs, who)) > 0) {
		if (remora_rpc_post(txn_rpc_ep(tx), cn, (uint16_t)tx->c->w->index, calls, m,
				    REMOTE_TIMEOUT_MS))
			remote_batch(tx, cn, calls, m);
		for (unsigned i = 0; i < m; i++)
			LO(who[i])->mode = 0;
	}
}

int lotus_remote(struct remora_tx *tx, uint16_t cn, struct txn_obj *const *objs, unsigned n,
		 bool lock)
{
	struct remora_rpc_call calls[BATCH];
	struct lotus_lock_req reqs[BATCH];
	struct txn_obj *who[BATCH];
	int refused = 0;

	if (!lock && !txn_db_mut(txn_db(tx), MUT_LOTUS_UNLOCK_WAITS)) {
		remote_unlock(tx, cn, objs, n);
		return 0;
	}
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
