/* SPDX-License-Identifier: MIT */
/*
 * The transaction API: handle rules (poisoning, consumption), the object set, own-write
 * visibility and index lookups. Concurrency control is the protocol's (protocol.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "prof/prof.h"
#include "protocol.h"
#include "txn.h"

#define RESOLVE_ROUNDS_MAX 64u

/* ---- object set ------------------------------------------------------------------------ */

static struct txn_obj *tx_find(const struct remora_tx *tx, uint32_t table, uint64_t key)
{
	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];

		if (o->key == key && o->table == table)
			return o;
	}
	return NULL;
}

static int tx_new_obj(struct remora_tx *tx, const struct store_table *t, uint64_t key,
		      struct txn_obj **out)
{
	struct txn_coord *c = tx->c;
	struct store_place pl;
	struct txn_obj *o;

	if (tx->nobj == tx->objcap) {
		unsigned cap = tx->objcap ? tx->objcap * 2 : 32;
		struct txn_obj **p = realloc(tx->objs, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		tx->objs = p;
		tx->objcap = cap;
	}
	/* The protocol's per-object state right behind the object (the arena aligns both). */
	o = txn_arena_alloc(&c->arena, TXN_OBJ_PRIV_AT + txn_db(tx)->proto->obj_priv_size);
	if (!o)
		return -ENOMEM;
	memset(o, 0, TXN_OBJ_PRIV_AT + txn_db(tx)->proto->obj_priv_size);
	if (txn_db(tx)->proto->obj_priv_size)
		o->priv = (unsigned char *)o + TXN_OBJ_PRIV_AT;
	o->img = txn_arena_alloc(&c->arena, t->geom.stride);
	if (!o->img)
		return -ENOMEM;
	store_place(&txn_db(tx)->st, t, key, &pl);
	/* the lookup comes at the fetch; the cache set is most likely not in the CPU's cache */
	txn_cache_prefetch(&txn_db(tx)->cache, pl.hash);
	o->table = t->ent.id;
	o->key = key;
	o->t = t;
	o->hash = pl.hash;
	o->bucket = pl.bucket;
	o->fp = pl.fp;
	o->primary = pl.primary;
	tx->objs[tx->nobj++] = o;
	*out = o;
	return 0;
}

static int tx_obj(struct remora_tx *tx, uint32_t table, uint64_t key, struct txn_obj **out)
{
	const struct store_table *t = store_table(&txn_db(tx)->st, table);

	if (!t)
		return txn_errf(tx, -EINVAL, "no table with id %u", table);
	*out = tx_find(tx, table, key);
	if (*out)
		return 0;
	return tx_new_obj(tx, t, key, out);
}

/* Present as this transaction sees it (its own inserts, updates and deletes included). */
static bool obj_present(const struct txn_obj *o)
{
	if (o->flags & OBJ_DELETE)
		return false;
	if (o->flags & (OBJ_INSERT | OBJ_DIRTY))
		return true;
	return (o->flags & OBJ_FOUND) != 0;
}

static const void *obj_value(const struct txn_obj *o)
{
	return (o->flags & (OBJ_INSERT | OBJ_DIRTY)) ? o->newval : o->value;
}

static bool obj_needs_exec(const struct txn_obj *o)
{
	if (!(o->flags & OBJ_FETCHED))
		return true;
	return (o->flags & OBJ_WANT_RW) && !(o->flags & OBJ_RW_DONE);
}

/* ---- index lookups --------------------------------------------------------------------- */

void txn_unresolve(struct remora_tx *tx, struct txn_obj *o)
{
	o->flags &= ~(OBJ_HAVE_REC | OBJ_FETCHED | OBJ_FOUND | OBJ_RW_DONE);
	if (o->flags & OBJ_CACHED) {
		/* A stale or colliding cache entry: look the key up in the index. */
		txn_cache_drop(&txn_db(tx)->cache, o->hash, o->off);
		o->flags &= ~(OBJ_CACHED | OBJ_RESOLVED);
	} else {
		/* The only fingerprint match of the index holds another key: the key is absent. */
		o->flags |= OBJ_RESOLVED;
	}
	o->off = 0;
}

/* Scans a bucket just read; returns true when the lookup of o is complete. */
static int scan_bucket(struct remora_tx *tx, struct txn_obj *o, bool *done)
{
	struct remora_db *db = txn_db(tx);
	const struct store_bucket *b = o->bkt;
	uint64_t boff = store_bucket_off(o->t, o->bucket);

	if (b->hdr != store_bucket_hdr(o->table, o->bucket))
		return txn_errf(tx, -REMORA_ELAYOUT, "table %u bucket %llu: bad header %#llx",
				o->table, (unsigned long long)o->bucket,
				(unsigned long long)b->hdr);
	*done = false;
	for (unsigned i = 0; i < REMORA_STORE_BUCKET_SLOTS; i++) {
		uint64_t s = b->slot[i];
		uint64_t off = s & REMORA_STORE_SLOT_OFF_MASK;

		if (s == 0) {
			o->slot_off = boff + 8 + 8ull * i;
			*done = true;
			return 0;
		}
		if ((uint16_t)(s >> REMORA_STORE_SLOT_FP_SHIFT) != o->fp)
			continue;
		if (!store_rec_valid(o->t, off))
			return txn_errf(tx, -REMORA_ELAYOUT,
					"table %u bucket %llu slot %u: bad record offset %#llx",
					o->table, (unsigned long long)o->bucket, i,
					(unsigned long long)off);
		if (o->ncand == TXN_MAX_CAND)
			return txn_errf(tx, -REMORA_EFULL,
					"table %u: more than %u fingerprint matches for key %llu",
					o->table, TXN_MAX_CAND, (unsigned long long)o->key);
		o->cand[o->ncand++] = off;
	}
	if (++o->probes >= o->t->ent.nbuckets / db->st.n_mn) {
		o->slot_off = 0; /* the index is full: no slot to insert into */
		*done = true;
		return 0;
	}
	o->bucket = store_next_bucket(&db->st, o->t, o->bucket);
	return 0;
}

/* After the scan: 0 candidates = absent, 1 = the record (verified by its READ), more = ask. */
static void scan_finish(struct remora_tx *tx, struct txn_obj *o)
{
	o->flags &= ~OBJ_SCANNING;
	if (o->ncand == 0) {
		o->flags |= OBJ_RESOLVED;
	} else if (o->ncand == 1) {
		o->off = o->cand[0];
		o->flags |= OBJ_RESOLVED | OBJ_HAVE_REC;
		txn_cache_put(&txn_db(tx)->cache, o->hash, o->off);
	}
}

static int pick_candidate(struct remora_tx *tx, struct txn_obj *o, const unsigned char *imgs)
{
	const struct store_db *st = &txn_db(tx)->st;

	for (unsigned i = 0; i < o->ncand; i++) {
		struct codec_rec r;
		int rc = st->codec->decode(&o->t->geom, imgs + (size_t)i * o->t->geom.stride, 0, &r);

		if (rc == -EAGAIN)
			return rc; /* torn: read the candidates again */
		if (rc == 0 && r.key == o->key && r.table == o->table) {
			o->ncand = 1;
			o->cand[0] = o->cand[i];
			return 0;
		}
	}
	o->ncand = 0;
	return 0;
}

static int resolve_round(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n,
			 unsigned *pending)
{
	struct remora_db *db = txn_db(tx);
	struct txn_coord *c = tx->c;
	unsigned nw = 0, need = 0;
	struct remora_wr *wrs;
	unsigned char **cimg;
	int rc;

	for (unsigned i = 0; i < n; i++)
		if (!(objs[i]->flags & OBJ_RESOLVED))
			need += objs[i]->ncand > 1 ? objs[i]->ncand : 1;
	*pending = 0;
	if (!need)
		return 0;
	wrs = txn_wrs(c, need);
	cimg = txn_scratch(c, TXN_SCRATCH_CAND, n * sizeof(*cimg));
	if (!wrs || !cimg)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		struct txn_obj *o = objs[i];
		uint16_t node = o->primary;

		if (o->flags & OBJ_RESOLVED)
			continue;
		if (o->ncand > 1) {
			/* Several fingerprint matches: READ them all, keep the one with our key. */
			cimg[i] = txn_arena_alloc(&c->arena, (size_t)o->ncand * o->t->geom.stride);
			if (!cimg[i])
				return -ENOMEM;
			for (unsigned k = 0; k < o->ncand; k++)
				wrs[nw++] = store_wr_read(
					&db->st, node, o->cand[k],
					cimg[i] + (size_t)k * o->t->geom.stride, o->t->geom.stride);
			continue;
		}
		if (!o->bkt) {
			o->bkt = txn_arena_alloc(&c->arena, sizeof(*o->bkt));
			if (!o->bkt)
				return -ENOMEM;
		}
		wrs[nw++] = store_wr_read(&db->st, node,
						 store_bucket_off(o->t, o->bucket), o->bkt,
						 sizeof(*o->bkt));
	}
	rc = store_exec(txn_chan(tx), wrs, nw);
	if (rc)
		return txn_errf(tx, rc, "index lookup: %s", remora_strerror(rc));
	for (unsigned i = 0; i < n; i++) {
		struct txn_obj *o = objs[i];
		bool done = false;

		if (o->flags & OBJ_RESOLVED)
			continue;
		if (o->ncand > 1) {
			rc = pick_candidate(tx, o, cimg[i]);
			if (rc == 0)
				scan_finish(tx, o);
			else if (rc != -EAGAIN)
				return rc;
		} else {
			rc = scan_bucket(tx, o, &done);
			if (rc)
				return rc;
			if (done)
				scan_finish(tx, o);
		}
		if (!(o->flags & OBJ_RESOLVED))
			(*pending)++;
	}
	return 0;
}

static int resolve_objs(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	struct remora_db *db = txn_db(tx);
	unsigned pending = 0;
	bool looked = false;
	int rc;

	for (unsigned i = 0; i < n; i++) {
		struct txn_obj *o = objs[i];

		if (o->flags & (OBJ_RESOLVED | OBJ_SCANNING))
			continue;
		/* tx_new_obj prefetched the cache sets; under prefetch and yield they arrive
		 * meanwhile (one turn for all of them) */
		if (!looked)
			remora_co_prefetch_yield();
		looked = true;
		o->off = txn_cache_get(&db->cache, o->hash);
		if (o->off && store_rec_valid(o->t, o->off)) {
			o->flags |= OBJ_RESOLVED | OBJ_HAVE_REC | OBJ_CACHED;
			continue;
		}
		o->off = 0;
		o->ncand = 0;
		o->probes = 0;
		o->flags |= OBJ_SCANNING;
		o->bucket = store_range(o->hash, o->t->ent.nbuckets);
		pending++;
	}
	if (pending)
		txn_point(tx, "txn.lookup");
	for (unsigned round = 0; pending; round++) {
		if (round == RESOLVE_ROUNDS_MAX)
			return txn_errf(tx, -EIO, "index lookup did not settle after %u rounds", round);
		rc = resolve_round(tx, objs, n, &pending);
		if (rc)
			return rc;
	}
	return 0;
}

/* Index lookups and the address cache: their own layer of the CPU split (prof.h). */
int txn_resolve(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	unsigned layer = prof_enter(PROF_INDEX);
	int rc = resolve_objs(tx, objs, n);

	prof_leave(layer);
	return rc;
}

/* ---- fetching -------------------------------------------------------------------------- */

static void obj_copy_out(struct txn_obj *o)
{
	bool present = obj_present(o);

	if (o->dest && present)
		memcpy(o->dest, obj_value(o), o->t->geom.value_size);
	if (o->dest_found)
		*o->dest_found = present;
	o->dest = NULL;
	o->dest_found = NULL;
	o->flags &= ~OBJ_COPY;
}

/* Resolves and fetches every object of list that needs it (one doorbell batch per phase). */
static int tx_fetch_list(struct remora_tx *tx, struct txn_obj **list, unsigned n)
{
	struct remora_db *db = txn_db(tx);
	struct txn_obj **ex;
	unsigned m;
	int rc;

	ex = txn_scratch(tx->c, TXN_SCRATCH_EXEC, (n ? n : 1) * sizeof(*ex));
	if (!ex)
		return -ENOMEM;
	/* Lock-first protocols lock what this fetch is about before any index READ. */
	m = 0;
	for (unsigned i = 0; i < n; i++)
		if (obj_needs_exec(list[i]))
			ex[m++] = list[i];
	if (m) {
		rc = db->proto->before_resolve(tx, ex, m);
		if (rc)
			return rc;
	}
	for (unsigned attempt = 0;; attempt++) {
		if (attempt == RESOLVE_ROUNDS_MAX)
			return txn_errf(tx, -EIO, "fetch did not settle after %u attempts", attempt);
		rc = txn_resolve(tx, list, n);
		if (rc)
			return rc;
		m = 0;
		for (unsigned i = 0; i < n; i++) {
			struct txn_obj *o = list[i];

			if (!obj_needs_exec(o))
				continue;
			if (!(o->flags & OBJ_HAVE_REC)) {
				/* Absent from the index: nothing to read or lock. */
				o->flags |= OBJ_FETCHED;
				o->flags &= ~OBJ_FOUND;
				if (o->flags & OBJ_WANT_RW)
					o->flags |= OBJ_RW_DONE;
				continue;
			}
			ex[m++] = o;
		}
		if (!m)
			return 0;
		txn_point(tx, "txn.fetch");
		rc = db->proto->fetch(tx, ex, m);
		if (rc != -EAGAIN)
			return rc;
	}
}

static int tx_enter(struct remora_tx *tx)
{
	if (!tx || !tx->active)
		return -EINVAL;
	return tx->poison ? -REMORA_EPOISONED : 0;
}

/*
 * Poisons tx with a failure or abort rc (ENOTFOUND / EEXIST leave it usable). A verb that
 * failed because its memory node failed over (refused after the detach, or on rdma in flight
 * to it: txn_mnf_await) before the commit is an abort: the application retries on the new
 * placement, as a protocol's own failure path does (occ_fail).
 */
static int tx_ret(struct remora_tx *tx, int rc)
{
	if ((rc == -EIO || rc == -REMORA_ENODE) && !tx->poison &&
	    txn_mnf_await(txn_db(tx), rc) == -REMORA_ENODE && txb_down(tx)) {
		tx->c->w->last_abort = REMORA_ABORT_NONE;
		rc = -REMORA_EABORT;
	}
	if (rc < 0 && rc != -REMORA_ENOTFOUND && rc != -REMORA_EEXIST && !tx->poison) {
		if (rc != -REMORA_EABORT)
			tx->c->w->last_abort = REMORA_ABORT_NONE;
		tx->poison = rc;
	}
	return rc;
}

static int tx_api_fetch(struct remora_tx *tx)
{
	struct txn_obj **list;
	unsigned n = 0;
	int rc = tx_enter(tx);

	if (rc)
		return rc;
	list = txn_scratch(tx->c, TXN_SCRATCH_FETCH, (tx->nobj ? tx->nobj : 1) * sizeof(*list));
	if (!list)
		return tx_ret(tx, -ENOMEM);
	for (unsigned i = 0; i < tx->nobj; i++)
		if (tx->objs[i]->flags & OBJ_COPY)
			list[n++] = tx->objs[i];
	rc = tx_fetch_list(tx, list, n);
	if (rc)
		return tx_ret(tx, rc);
	for (unsigned i = 0; i < n; i++)
		obj_copy_out(list[i]);
	return 0;
}

/*
 * Adds cells to what o reads and writes. A cell-level protocol locks the cells it writes when
 * it fetches them: more cells to write than a done RW fetch locked make it fetch again (the
 * others lock the whole record at once, so their RW fetch covers every cell).
 */
/* A cell mask for o's table: any bit of a table formatted without cells is the record. */
static uint64_t cells_norm(const struct txn_obj *o, uint64_t mask)
{
	uint64_t all = codec_all_cells(o->t->geom.cells);

	if (codec_ncells(o->t->geom.cells) == 1)
		return mask ? all : 0;
	return mask & all;
}

static void obj_add_cells(struct remora_tx *tx, struct txn_obj *o, uint64_t rd, uint64_t wr)
{
	uint64_t all = codec_all_cells(o->t->geom.cells);

	rd = cells_norm(o, rd);
	wr = cells_norm(o, wr);
	o->rd_cells |= rd;
	if (!wr)
		return;
	if ((o->flags & OBJ_RW_DONE) && (wr & all & ~o->wr_cells) &&
	    txn_db(tx)->proto->codec == REMORA_CODEC_CELL)
		o->flags &= ~OBJ_RW_DONE;
	o->wr_cells |= wr;
	o->flags |= OBJ_WANT_RW;
}

static int tx_api_stage(struct remora_tx *tx, uint32_t table, uint64_t key, uint64_t rd,
			uint64_t wr, void *buf, bool *found)
{
	struct txn_obj *o;
	int rc = tx_enter(tx);

	if (rc)
		return rc;
	if (wr && (tx->flags & REMORA_TX_READ_ONLY))
		return tx_ret(tx, txn_errf(tx, -EINVAL, "stage: RW access in a read-only transaction"));
	rc = tx_obj(tx, table, key, &o);
	if (rc)
		return tx_ret(tx, rc);
	obj_add_cells(tx, o, rd, wr);
	o->dest = buf;
	o->dest_found = found;
	o->flags |= OBJ_COPY;
	return 0;
}

static int tx_read_mode(struct remora_tx *tx, uint32_t table, uint64_t key, void *buf,
			uint64_t rd, uint64_t wr)
{
	struct txn_obj *o;
	int rc = tx_enter(tx);

	if (rc)
		return rc;
	if (wr && (tx->flags & REMORA_TX_READ_ONLY))
		return tx_ret(tx, txn_errf(tx, -EINVAL, "read_for_update in a read-only transaction"));
	rc = tx_obj(tx, table, key, &o);
	if (rc)
		return tx_ret(tx, rc);
	obj_add_cells(tx, o, rd, wr);
	o->flags |= OBJ_COPY; /* fetched with the other staged objects; their buffers kept */
	rc = tx_api_fetch(tx);
	if (rc)
		return rc;
	if (!obj_present(o))
		return -REMORA_ENOTFOUND;
	if (buf)
		memcpy(buf, obj_value(o), o->t->geom.value_size);
	return 0;
}

REMORA_API int remora_tx_read(struct remora_tx *tx, uint32_t table, uint64_t key, void *buf)
{
	unsigned layer = prof_enter(PROF_PROTOCOL);
	int rc = tx_read_mode(tx, table, key, buf, UINT64_MAX, 0);

	prof_leave(layer);
	return rc;
}

REMORA_API int remora_tx_read_for_update(struct remora_tx *tx, uint32_t table, uint64_t key,
					 void *buf)
{
	unsigned layer = prof_enter(PROF_PROTOCOL);
	int rc = tx_read_mode(tx, table, key, buf, UINT64_MAX, UINT64_MAX);

	prof_leave(layer);
	return rc;
}

/* ---- writes ---------------------------------------------------------------------------- */

static int tx_write_enter(struct remora_tx *tx, const char *what)
{
	int rc = tx_enter(tx);

	if (rc)
		return rc;
	if (tx->flags & REMORA_TX_READ_ONLY)
		return tx_ret(tx, txn_errf(tx, -EINVAL, "%s in a read-only transaction", what));
	return 0;
}

int txn_refetch_rw(struct remora_tx *tx, struct txn_obj *o)
{
	o->flags &= ~(OBJ_RESOLVED | OBJ_HAVE_REC | OBJ_CACHED | OBJ_SCANNING | OBJ_FETCHED |
		      OBJ_FOUND | OBJ_RW_DONE);
	o->flags |= OBJ_WANT_RW;
	o->off = 0;
	o->ncand = 0;
	return tx_fetch_list(tx, &o, 1);
}

/* Finds or creates the object and fetches it for writing (lookup + lock) if not done yet. */
/* The object of (table, key) fetched for writing; intent (OBJ_INSERTING or 0) is noted on it
 * before the fetch, for the protocol's lock phase. */
static int tx_rw_obj(struct remora_tx *tx, uint32_t table, uint64_t key, uint32_t intent,
		     struct txn_obj **out)
{
	struct txn_obj *o;
	int rc = tx_obj(tx, table, key, &o);

	if (rc)
		return rc;
	o->flags |= intent;
	obj_add_cells(tx, o, UINT64_MAX, UINT64_MAX);
	if (obj_needs_exec(o)) {
		rc = tx_fetch_list(tx, &o, 1);
		if (rc)
			return rc;
	}
	*out = o;
	return 0;
}

/* The value that writing cells mask of value over o's current value gives, in the arena. */
static const void *cells_merge(struct remora_tx *tx, struct txn_obj *o, uint64_t mask,
			       const void *value)
{
	const struct codec_geom *g = &o->t->geom;
	unsigned char *m;

	if (mask == codec_all_cells(g->cells))
		return value;
	m = txn_arena_alloc(&tx->c->arena, g->value_size);
	if (!m)
		return NULL;
	memcpy(m, obj_value(o), g->value_size);
	for (unsigned c = 0; c < codec_ncells(g->cells); c++) {
		uint32_t off, len;

		if (!(mask >> c & 1))
			continue;
		codec_cell_span(g->cells, g->value_size, c, &off, &len);
		memcpy(m + off, (const unsigned char *)value + off, len);
	}
	return m;
}

static int tx_api_write(struct remora_tx *tx, uint32_t table, uint64_t key, uint64_t mask,
			const void *value)
{
	struct txn_obj *o;
	int rc = tx_write_enter(tx, "write");

	if (rc)
		return rc;
	o = tx_find(tx, table, key);
	if (!o || !(o->flags & OBJ_WANT_RW) || !(o->flags & OBJ_RW_DONE))
		return tx_ret(tx, txn_errf(tx, -EINVAL,
					   "write: table %u key %llu was not fetched with REMORA_RW",
					   table, (unsigned long long)key));
	if (!value)
		return tx_ret(tx, txn_errf(tx, -EINVAL, "write: value is NULL"));
	mask = cells_norm(o, mask);
	if (!mask || (mask & ~o->wr_cells))
		return tx_ret(tx, txn_errf(tx, -EINVAL,
					   "write: table %u key %llu: cells %#llx were not fetched "
					   "for writing (%#llx were)", table, (unsigned long long)key,
					   (unsigned long long)mask, (unsigned long long)o->wr_cells));
	if (!obj_present(o))
		return -REMORA_ENOTFOUND;
	value = cells_merge(tx, o, mask, value);
	if (!value)
		return tx_ret(tx, -ENOMEM);
	o->dirty_cells |= mask;
	if (o->flags & OBJ_INSERT) {
		memcpy(o->newval, value, o->t->geom.value_size);
		return 0;
	}
	return tx_ret(tx, txn_db(tx)->proto->write(tx, o, value));
}

static int tx_api_insert(struct remora_tx *tx, uint32_t table, uint64_t key,
			const void *value)
{
	struct txn_obj *o;
	int rc = tx_write_enter(tx, "insert");

	if (rc)
		return rc;
	if (!value)
		return tx_ret(tx, txn_errf(tx, -EINVAL, "insert: value is NULL"));
	rc = tx_rw_obj(tx, table, key, OBJ_INSERTING, &o);
	if (rc)
		return tx_ret(tx, rc);
	if (obj_present(o))
		return -REMORA_EEXIST;
	if (o->flags & OBJ_DELETE) {
		/* Deleted earlier in this transaction: inserting it again is an update. */
		o->flags &= ~OBJ_DELETE;
		memcpy(o->newval, value, o->t->geom.value_size);
		return 0;
	}
	return tx_ret(tx, txn_db(tx)->proto->insert(tx, o, value));
}

static int tx_api_delete(struct remora_tx *tx, uint32_t table, uint64_t key)
{
	struct txn_obj *o;
	int rc = tx_write_enter(tx, "delete");

	if (rc)
		return rc;
	rc = tx_rw_obj(tx, table, key, 0, &o);
	if (rc)
		return tx_ret(tx, rc);
	if (!obj_present(o))
		return -REMORA_ENOTFOUND;
	if (o->flags & OBJ_INSERT) {
		/* Inserted earlier in this transaction: the key simply stays absent. */
		o->flags &= ~(OBJ_INSERT | OBJ_DIRTY);
		return 0;
	}
	return tx_ret(tx, txn_db(tx)->proto->remove(tx, o));
}

/* ---- begin / commit / abort ------------------------------------------------------------ */

static struct txn_coord *tx_coord(struct remora_worker *w, int *rc)
{
	struct remora_coro *self = remora_coro_self();
	unsigned idx = 0;

	if (self && remora_sched_self() == w->sched)
		idx = remora_coro_index(self);
	if (idx >= w->ncoords) {
		snprintf(w->errmsg, sizeof(w->errmsg),
			 "coroutine %u has no coordinator: the db was opened with %u coordinators per worker",
			 idx, w->ncoords);
		*rc = -EINVAL;
		return NULL;
	}
	return &w->coords[idx];
}

static int tx_api_begin(struct remora_worker *w, unsigned flags, struct remora_tx **out)
{
	struct txn_coord *c;
	struct remora_tx *tx;
	int rc = 0;

	if (!w || !out)
		return -EINVAL;
	c = tx_coord(w, &rc);
	if (!c)
		return rc;
	tx = &c->tx;
	if (tx->active) {
		snprintf(w->errmsg, sizeof(w->errmsg),
			 "coordinator %u already runs a transaction", (unsigned)(c - w->coords));
		return -EBUSY;
	}
	rc = txn_mnf_enter(w);
	if (rc) {
		snprintf(w->errmsg, sizeof(w->errmsg), "%s", w->db->errmsg);
		return rc;
	}
	/* the last transaction's buffers may still be read by the NIC */
	rc = txn_async_settle(c, false);
	if (rc) {
		txn_mnf_leave(w);
		return rc;
	}
	txn_arena_reset(&c->arena);
	tx->nobj = 0;
	tx->poison = 0;
	tx->flags = flags;
	tx->seq = ++c->seq;
	tx->id = txn_make_id(c->id, tx->seq);
	if (tx->priv)
		memset(tx->priv, 0, w->db->proto->tx_priv_size);
	tx->active = true;
	rc = w->db->proto->begin(tx);
	if (rc) {
		tx->active = false;
		txn_mnf_leave(w);
		return rc;
	}
	*out = tx;
	return 0;
}

static int tx_api_commit(struct remora_tx *tx)
{
	int rc;

	if (!tx || !tx->active)
		return -EINVAL;
	if (tx->poison) {
		rc = tx->poison;
		txn_db(tx)->proto->abort(tx);
	} else {
		rc = txn_db(tx)->proto->commit(tx);
		if (rc)
			tx_ret(tx, rc);
	}
	tx->active = false;
	txn_mnf_leave(tx->c->w);
	return rc;
}

static void tx_api_abort(struct remora_tx *tx)
{
	if (!tx || !tx->active)
		return;
	if (!tx->poison)
		tx->c->w->last_abort = REMORA_ABORT_USER;
	txn_db(tx)->proto->abort(tx);
	tx->active = false;
	txn_mnf_leave(tx->c->w);
}

REMORA_API uint64_t remora_tx_id(const struct remora_tx *tx)
{
	return tx ? tx->id : 0;
}

/* ---- the exported entries: each runs in the protocol layer of the CPU split (prof.h) ---- */

REMORA_API int remora_tx_fetch(struct remora_tx *tx)
{
	unsigned layer = prof_enter(PROF_PROTOCOL);
	int rc = tx_api_fetch(tx);

	prof_leave(layer);
	return rc;
}

REMORA_API int remora_tx_stage(struct remora_tx *tx, uint32_t table, uint64_t key,
			       enum remora_access mode, void *buf, bool *found)
{
	unsigned layer = prof_enter(PROF_PROTOCOL);
	int rc = tx_enter(tx);

	if (!rc && mode != REMORA_RD && mode != REMORA_RW)
		rc = tx_ret(tx, txn_errf(tx, -EINVAL, "stage: bad access mode %d", (int)mode));
	if (!rc)
		rc = tx_api_stage(tx, table, key, UINT64_MAX, mode == REMORA_RW ? UINT64_MAX : 0,
				  buf, found);

	prof_leave(layer);
	return rc;
}

REMORA_API int remora_tx_stage_cells(struct remora_tx *tx, uint32_t table, uint64_t key,
				     uint64_t rd, uint64_t wr, void *buf, bool *found)
{
	unsigned layer = prof_enter(PROF_PROTOCOL);
	int rc = tx_api_stage(tx, table, key, rd, wr, buf, found);

	prof_leave(layer);
	return rc;
}

REMORA_API int remora_tx_read_cells(struct remora_tx *tx, uint32_t table, uint64_t key,
				    uint64_t rd, uint64_t wr, void *buf)
{
	unsigned layer = prof_enter(PROF_PROTOCOL);
	int rc = tx_read_mode(tx, table, key, buf, rd, wr);

	prof_leave(layer);
	return rc;
}

REMORA_API int remora_tx_write_cells(struct remora_tx *tx, uint32_t table, uint64_t key,
				     uint64_t mask, const void *value)
{
	unsigned layer = prof_enter(PROF_PROTOCOL);
	int rc = tx_api_write(tx, table, key, mask, value);

	prof_leave(layer);
	return rc;
}

REMORA_API int remora_tx_write(struct remora_tx *tx, uint32_t table, uint64_t key,
			       const void *value)
{
	unsigned layer = prof_enter(PROF_PROTOCOL);
	int rc = tx_api_write(tx, table, key, UINT64_MAX, value);

	prof_leave(layer);
	return rc;
}

REMORA_API int remora_tx_insert(struct remora_tx *tx, uint32_t table, uint64_t key,
				const void *value)
{
	unsigned layer = prof_enter(PROF_PROTOCOL);
	int rc = tx_api_insert(tx, table, key, value);

	prof_leave(layer);
	return rc;
}

REMORA_API int remora_tx_delete(struct remora_tx *tx, uint32_t table, uint64_t key)
{
	unsigned layer = prof_enter(PROF_PROTOCOL);
	int rc = tx_api_delete(tx, table, key);

	prof_leave(layer);
	return rc;
}

REMORA_API int remora_tx_begin(struct remora_worker *w, unsigned flags, struct remora_tx **out)
{
	unsigned layer = prof_enter(PROF_PROTOCOL);
	int rc = tx_api_begin(w, flags, out);

	prof_leave(layer);
	return rc;
}

REMORA_API int remora_tx_commit(struct remora_tx *tx)
{
	unsigned layer = prof_enter(PROF_PROTOCOL);
	int rc = tx_api_commit(tx);

	prof_leave(layer);
	return rc;
}

REMORA_API void remora_tx_abort(struct remora_tx *tx)
{
	unsigned layer = prof_enter(PROF_PROTOCOL);

	tx_api_abort(tx);
	prof_leave(layer);
}

int txn_insert_slot(struct remora_tx *tx, const struct txn_obj *o, uint64_t *idx)
{
	const struct store_table *t = o->t;
	struct txn_coord *c = tx->c;
	int rc;

	if (!o->slot_off)
		return txn_errf(tx, -REMORA_EFULL, "insert: index of table '%s' is full",
				t->ent.name);
	if (c->spare[o->table]) {
		*idx = c->spare[o->table] - 1;
		c->spare[o->table] = 0;
		return 0;
	}
	rc = store_alloc(&txn_db(tx)->st, txn_chan(tx), t, &c->chunk[o->table],
			 store_chunk_records(t), idx);
	if (rc)
		return txn_errf(tx, rc, "insert: table '%s': %s", t->ent.name,
				rc == -REMORA_EFULL ? "record area full" : remora_strerror(rc));
	return 0;
}

void txn_insert_images(struct remora_tx *tx, struct txn_obj *o, unsigned char *bimg,
		       uint64_t lock)
{
	const struct store_db *st = &txn_db(tx)->st;
	struct codec_rec r = { .key = o->key, .table = o->table, .flags = 0, .lock = 0 };

	st->codec->encode(&o->t->geom, bimg, 0, &r);
	r.lock = lock;
	o->lock_word = lock; /* the new record is ours, locked by that word */
	st->codec->encode(&o->t->geom, o->img, 0, &r);
}

int txn_insert_claim(struct remora_tx *tx, struct txn_obj *o, txn_insert_fill_fn fill,
		     uint32_t won_flags, uint64_t *slot_word, uint64_t *cas_old, bool *won)
{
	const struct store_table *t = o->t;
	unsigned char *bimg;
	struct txb b;
	uint64_t idx;
	int rc = txn_insert_slot(tx, o, &idx);

	if (rc)
		return rc;
	bimg = txn_arena_alloc(&tx->c->arena, t->geom.stride);
	if (!bimg || txb_init(tx, &b, txb_need(tx)))
		return -ENOMEM;
	o->off = store_rec_off(t, idx);
	fill(tx, o, bimg);
	*slot_word = store_slot_make(o->fp, o->off);
	txb_write(tx, &b, o->primary, o->off, o->img, t->geom.stride, REMORA_WR_DURABLE);
	if (cas_old) {
		*cas_old = ~UINT64_C(0); /* never read as won unless the CAS completed */
		txb_cas(tx, &b, o->primary, o->slot_off, 0, *slot_word, cas_old);
		b.wrs[b.n - 1].flags = REMORA_WR_DURABLE;
	} else {
		txb_write(tx, &b, o->primary, o->slot_off, slot_word, 8, REMORA_WR_DURABLE);
	}
	rc = txb_exec(tx, &b, "insert");
	/* A CAS's record is ours also in a failed batch once the CAS completed. */
	*won = cas_old ? *cas_old == 0 : rc == 0;
	if (*won)
		o->flags |= OBJ_HAVE_REC | OBJ_RESOLVED | OBJ_NEW_REC | won_flags;
	if (rc)
		return rc;
	if (!*won) {
		tx->c->spare[o->table] = idx + 1; /* written but never published: reuse it */
		return 0;
	}
	return txb_insert_backups(tx, &b, o, bimg, slot_word);
}

int txn_insert(struct remora_tx *tx, struct txn_obj *o, const void *value,
	       const struct txn_insert_ops *ops)
{
	int rc = txn_obj_newval(tx, o) ? -ENOMEM : 0;

	for (unsigned attempt = 0; !rc && attempt < ops->attempts; attempt++) {
		bool won = false;

		if (o->flags & OBJ_HAVE_REC) {
			/* The key has a record (deleted, a placeholder, an aborted insert): the
			 * fetch took it for writing; reuse it. */
			memcpy(o->newval, value, o->t->geom.value_size);
			o->flags |= OBJ_INSERT | OBJ_DIRTY;
			return 0;
		}
		rc = ops->claim(tx, o, &won);
		if (!rc && won) {
			ops->fresh(tx, o);
			memcpy(o->newval, value, o->t->geom.value_size);
			o->flags |= OBJ_FETCHED | OBJ_INSERT | OBJ_DIRTY | OBJ_RW_DONE;
			o->flags &= ~OBJ_FOUND;
			return 0;
		}
		if (rc)
			break;
		/* Someone took the slot first -- maybe with our key: look it up again. */
		rc = txn_refetch_rw(tx, o);
		if (rc)
			return rc; /* the fetch released what tx holds */
		if (o->flags & OBJ_FOUND)
			return -REMORA_EEXIST;
	}
	ops->release(tx);
	return rc ? txn_poison(tx, rc, REMORA_ABORT_NONE)
		  : txn_poison(tx, -REMORA_EABORT, REMORA_ABORT_LOCKED);
}

int txn_obj_newval(struct remora_tx *tx, struct txn_obj *o)
{
	if (!o->newval)
		o->newval = txn_arena_alloc(&tx->c->arena, o->t->geom.value_size);
	return o->newval ? 0 : -ENOMEM;
}

int txn_stage_write(struct remora_tx *tx, struct txn_obj *o, const void *value)
{
	if (txn_obj_newval(tx, o))
		return -ENOMEM;
	memcpy(o->newval, value, o->t->geom.value_size);
	o->flags |= OBJ_DIRTY;
	return 0;
}

int txn_stage_remove(struct remora_tx *tx, struct txn_obj *o)
{
	if (txn_obj_newval(tx, o))
		return -ENOMEM;
	memcpy(o->newval, o->value, o->t->geom.value_size);
	o->flags |= OBJ_DIRTY | OBJ_DELETE;
	return 0;
}
