/* SPDX-License-Identifier: MIT */
/*
 * Motor's cluster-wide GC horizon (docs/motor.md, "Garbage collection"). A writer that must
 * reuse the cell of a CVT's oldest version (no free cell) may do so only when no snapshot,
 * running now or later on any compute node, can need that version: when the next newer
 * version's timestamp lies below every such snapshot's T_start. Each compute node keeps a
 * lower bound of its own T_starts in memory and publishes it, now and then, in node 0's
 * control area (gc_horizon[cn]); a writer takes the minimum of its own node's live bound and
 * the others' published ones.
 *
 * Why every value is a lower bound forever: a coordinator stores a bound (the node's newest
 * timestamp) in its active slot before its T_start FAA, so a reader of the slots that finds
 * it empty reads before that FAA, whose result is then above any timestamp taken so far. A
 * published or cached bound therefore only gets staler (lower) with time, never wrong: it
 * costs reclaims, not safety. A node that has no entry yet (0) opens after the READ that
 * found it missing, so its T_starts lie above a timestamp taken before that READ, which
 * bounds the remote horizon too.
 */
#include <errno.h>
#include <stdlib.h>

#include "motor.h"
#include "txn/batch.h"

/* Publish when this node's bound moved this many timestamps: a WRITE now and then, posted
 * after a commit without waiting (no round trip). */
#define MOTOR_GC_PUBLISH_TICKS 64u

static inline struct motor_db *gc_db(const struct remora_tx *tx)
{
	return txn_db(tx)->proto_priv;
}

static uint64_t gc_entry_off(uint16_t cn)
{
	return REMORA_STORE_CONTROL_OFF + offsetof(struct store_control, gc_horizon) + 8u * cn;
}

static void gc_max(uint64_t *word, uint64_t v)
{
	uint64_t cur = __atomic_load_n(word, __ATOMIC_SEQ_CST);

	while (cur < v && !__atomic_compare_exchange_n(word, &cur, v, true, __ATOMIC_SEQ_CST,
						       __ATOMIC_SEQ_CST))
		;
}

/*
 * This node's bound: its oldest running T_start (or the bound stored before it), else one
 * above the newest timestamp it took (timestamps are unique: the next one is larger). skip: a coordinator left out (the writer asking: it reads what it
 * writes through its lock, the newest version, never an old one), or UINT32_MAX.
 */
static uint64_t gc_local(struct motor_gc *g, unsigned skip)
{
	uint64_t low = __atomic_load_n(&g->seen, __ATOMIC_SEQ_CST) + 1;

	for (unsigned i = 0; i < g->ncoords; i++) {
		uint64_t a = i == skip ? 0 : __atomic_load_n(&g->active[i], __ATOMIC_SEQ_CST);

		if (a && a - 1 < low)
			low = a - 1;
	}
	return low;
}

/*
 * The other nodes' bound from the entries read (n of them). A node with no entry opened after
 * the READ: its T_starts lie above before_read, a timestamp taken before it.
 */
static uint64_t gc_remote(const uint64_t *ent, unsigned n, uint16_t self, uint64_t before_read)
{
	uint64_t low = before_read + 1;

	for (unsigned cn = 0; cn < n; cn++)
		if (cn != self && ent[cn] && ent[cn] - 1 < low)
			low = ent[cn] - 1;
	return low;
}

static unsigned gc_slot(const struct remora_tx *tx)
{
	return (unsigned)(tx->c->id - txn_coord_id(txn_db(tx)->cn_id, 0));
}

int motor_gc_init(struct remora_db *db, struct motor_db *m)
{
	unsigned n = db->st.sb.max_cn < REMORA_MAX_CN ? db->st.sb.max_cn : REMORA_MAX_CN;
	uint64_t ent[REMORA_MAX_CN] = { 0 }, t0 = 0, word;
	struct remora_chan *ch;
	struct remora_wr wr;
	int rc;

	m->gc.ncoords = db->workers * db->coords_per_worker;
	m->gc.active = calloc(m->gc.ncoords, sizeof(*m->gc.active));
	if (!m->gc.active)
		return -ENOMEM;
	rc = remora_chan_open(db->st.tp, &ch);
	if (rc)
		return rc;
	rc = ts_next(&m->ts, ch, &t0); /* every T_start of this node lies above it */
	word = t0 + 2; /* 1 + the bound t0 + 1 */
	wr = store_wr_write(&db->st, 0, gc_entry_off(db->cn_id), &word, 8, 0);
	if (!rc)
		rc = store_exec(ch, &wr, 1);
	wr = store_wr_read(&db->st, 0, gc_entry_off(0), ent, 8u * n);
	if (!rc)
		rc = store_exec(ch, &wr, 1);
	remora_chan_close(ch);
	m->gc.seen = t0;
	m->gc.published = t0 + 1;
	m->gc.remote = gc_remote(ent, n, db->cn_id, t0);
	return rc;
}

void motor_gc_fini(struct remora_db *db, struct motor_db *m)
{
	static const uint64_t none;
	struct remora_chan *ch;
	struct remora_wr wr;

	free(m->gc.active);
	m->gc.active = NULL;
	if (remora_chan_open(db->st.tp, &ch))
		return; /* the entry stays: it only holds GC back, and recovery clears it */
	wr = store_wr_write(&db->st, 0, gc_entry_off(db->cn_id), &none, 8, 0);
	store_exec(ch, &wr, 1);
	remora_chan_close(ch);
}


void motor_gc_enter(struct remora_tx *tx)
{
	struct motor_gc *g = &gc_db(tx)->gc;

	/* the FAA that follows returns more than any timestamp taken so far */
	__atomic_store_n(&g->active[gc_slot(tx)], __atomic_load_n(&g->seen, __ATOMIC_SEQ_CST) + 2,
			 __ATOMIC_SEQ_CST);
}

void motor_gc_started(struct remora_tx *tx)
{
	struct motor_gc *g = &gc_db(tx)->gc;
	uint64_t t = ((struct motor_tx *)tx->priv)->t_start;

	__atomic_store_n(&g->active[gc_slot(tx)], t + 1, __ATOMIC_SEQ_CST);
	gc_max(&g->seen, t);
}

void motor_gc_took(struct remora_tx *tx, uint64_t ts)
{
	gc_max(&gc_db(tx)->gc.seen, ts);
}

void motor_gc_leave(struct remora_tx *tx)
{
	struct motor_gc *g = &gc_db(tx)->gc;

	__atomic_store_n(&g->active[gc_slot(tx)], 0, __ATOMIC_SEQ_CST);
}

bool motor_gc_may_reclaim(struct remora_tx *tx, uint64_t next)
{
	struct motor_gc *g = &gc_db(tx)->gc;

	if (txb_mut(tx, MUT_GC_NO_HORIZON))
		return true;
	return next < __atomic_load_n(&g->remote, __ATOMIC_SEQ_CST) &&
	       next < gc_local(g, gc_slot(tx));
}

int motor_gc_refresh(struct remora_tx *tx)
{
	struct remora_db *db = txn_db(tx);
	struct motor_gc *g = &gc_db(tx)->gc;
	unsigned n = db->st.sb.max_cn < REMORA_MAX_CN ? db->st.sb.max_cn : REMORA_MAX_CN;
	uint64_t *ent = txn_arena_alloc(&tx->c->arena, 8u * n);
	uint64_t before = __atomic_load_n(&g->seen, __ATOMIC_SEQ_CST); /* a timestamp taken before
									  * the READ */
	struct remora_wr wr;
	int rc;

	if (!ent)
		return -ENOMEM;
	wr = store_wr_read(&db->st, 0, gc_entry_off(0), ent, 8u * n);
	rc = store_exec(txn_chan(tx), &wr, 1);
	if (rc)
		return txn_errf(tx, rc, "gc horizon: %s", remora_strerror(rc));
	gc_max(&g->remote, gc_remote(ent, n, db->cn_id, before));
	return 0;
}

void motor_gc_publish(struct remora_tx *tx, struct txb *b)
{
	struct motor_gc *g = &gc_db(tx)->gc;
	uint64_t *word = &((struct motor_coord *)tx->c->priv)->gc_word;
	uint64_t low = gc_local(g, UINT32_MAX);

	if (low < __atomic_load_n(&g->published, __ATOMIC_SEQ_CST) + MOTOR_GC_PUBLISH_TICKS)
		return;
	*word = low + 1;
	txb_write(tx, b, 0, gc_entry_off(txn_db(tx)->cn_id), word, 8, 0);
	gc_max(&g->published, low);
}
