/* SPDX-License-Identifier: MIT */
/*
 * CREST over cell records (store/codec_cell.c). Verbs with cached addresses and no conflict
 * (docs/crest.md, "Verbs"):
 *
 *   execution   read-only record: 1 READ of the record.
 *               read-write record: 1 masked-CAS on the lock bitmap taking exactly the cells
 *               written, + 1 READ of the record, one doorbell (the channel keeps their order).
 *   validation  1 READ of the 64-byte header per record with a cell read but not locked: no
 *               read cell locked by another transaction, every read cell's epoch unchanged.
 *   commit      log WRITE {tx id, commit timestamp, written cells, dependencies} to f+1 log
 *               servers, durable, acknowledged; then per written record and replica the
 *               written cells (value + version), then their epochs in the header, then on the
 *               primary the masked-CAS that clears exactly our lock bits: one ordered doorbell.
 *
 * Lock failure is no-wait (abort). Aborts clear our bits with masked-CAS, tracked.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crest.h"
#include "txn/batch.h"

#define CREST_TORN_RETRIES 16u
#define CREST_ROUNDS_MAX 64u
#define CREST_INSERT_ATTEMPTS 8u
#define CREST_UNLOCK_CHUNK 16u /* unlocks posted at once when locks go back */

uint64_t crest_clock_skew_us;
uint64_t crest_en_wrap_us = CREST_EN_WRAP_US;

static inline struct crest_obj *OB(const struct txn_obj *o)
{
	return o->priv;
}

static inline struct crest_tx *ctx(const struct remora_tx *tx)
{
	return tx->priv;
}

static inline struct crest_db *cdb(const struct remora_tx *tx)
{
	return txn_db(tx)->proto_priv;
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u + crest_clock_skew_us;
}

static uint64_t all_cells(const struct txn_obj *o)
{
	return codec_all_cells(o->t->geom.cells);
}

/* Cells o writes: those asked for, or every cell at record level. */
static uint64_t wr_cells(const struct remora_tx *tx, const struct txn_obj *o)
{
	if (!(o->flags & OBJ_WANT_RW))
		return 0;
	return cdb(tx)->cell_level ? o->wr_cells & all_cells(o) : all_cells(o);
}

/* Cells o reads (written cells are read too: their old value is what the caller sees). */
static uint64_t rd_cells(const struct remora_tx *tx, const struct txn_obj *o)
{
	if (!cdb(tx)->cell_level)
		return all_cells(o);
	return (o->rd_cells | o->wr_cells) & all_cells(o);
}

static struct remora_wr wr_mcas(const struct store_db *st, uint16_t node, uint64_t off,
				uint64_t cmp, uint64_t cmask, uint64_t swap, uint64_t smask,
				uint64_t *old)
{
	return (struct remora_wr){ .raddr = remora_gaddr_make(node, off), .rkey = st->rkey[node],
				   .op = REMORA_OP_MCAS, .compare = cmp, .compare_mask = cmask,
				   .swap = swap, .swap_mask = smask, .local = old };
}

/* The masked-CAS taking bits: succeeds when none of them was set (old & bits == 0). */
static void post_lock(struct remora_tx *tx, struct txb *b, struct txn_obj *o, uint64_t bits)
{
	OB(o)->want = bits;
	OB(o)->mcas_old = bits; /* a refused verb must not read as a won lock */
	b->wrs[b->n++] = wr_mcas(&txn_db(tx)->st, o->primary, o->off + CODEC_CELL_LOCK_OFF, 0,
				 bits, bits, bits, &OB(o)->mcas_old);
	o->flags |= OBJ_CAS_SENT;
}

/* The masked-CAS clearing bits and only them (crest_unlock_all: every bit of the word). */
static void post_unlock(struct remora_tx *tx, struct txb *b, struct txn_obj *o, uint64_t bits)
{
	uint64_t mask = txb_mut(tx, MUT_CREST_UNLOCK_ALL) ? UINT64_MAX : bits;

	b->wrs[b->n++] = wr_mcas(&txn_db(tx)->st, o->primary, o->off + CODEC_CELL_LOCK_OFF, bits,
				 bits, 0, mask, &OB(o)->unlock_old);
}

/* ---- releasing --------------------------------------------------------------------------- */

/*
 * Every lock bit still held goes back (tracked: the results land in the objects). The unlocks
 * go out in chunks from the stack, so running out of memory (the path that often brings us
 * here) never leaves a lock behind.
 */
static void release_at(struct remora_tx *tx, const char *point)
{
	struct remora_wr wrs[CREST_UNLOCK_CHUNK];
	struct txb b = { .wrs = wrs, .cap = CREST_UNLOCK_CHUNK };
	int rc = 0, prc;

	if (point)
		txn_point(tx, point);
	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];

		if (OB(o) && OB(o)->locked)
			post_unlock(tx, &b, o, OB(o)->locked);
		if (OB(o))
			OB(o)->locked = 0;
		o->flags &= ~(OBJ_LOCKED | OBJ_CAS_SENT);
		if (b.n == b.cap || (b.n && i + 1 == tx->nobj)) {
			prc = txn_post_unlocks(tx, b.wrs, b.n);
			rc = rc ? rc : prc;
			b.n = 0;
		}
	}
}

static int abort_with(struct remora_tx *tx, enum remora_abort_reason why)
{
	release_at(tx, "txn.abort_unlock");
	return txn_poison(tx, -REMORA_EABORT, why);
}

static int fail(struct remora_tx *tx, int rc)
{
	release_at(tx, "txn.abort_unlock");
	return txn_poison(tx, rc, REMORA_ABORT_NONE);
}

/* A commit that failed after its log landed: locks and log stay for recovery. */
static int strand(struct remora_tx *tx, int rc)
{
	if (txb_mut(tx, MUT_UNLOCK_AFTER_LOG))
		return fail(tx, rc);
	((struct crest_coord *)tx->c->priv)->stranded = rc;
	for (unsigned i = 0; i < tx->nobj; i++) {
		tx->objs[i]->flags &= ~(OBJ_LOCKED | OBJ_CAS_SENT);
		OB(tx->objs[i])->locked = 0;
	}
	return txn_poison(tx, rc, REMORA_ABORT_NONE);
}

/* ---- execution --------------------------------------------------------------------------- */

enum fetch_step { STEP_NONE, STEP_READ, STEP_LOCK_READ };

static enum fetch_step fetch_step(const struct remora_tx *tx, const struct txn_obj *o)
{
	bool want_rw = (o->flags & OBJ_WANT_RW) && !(o->flags & OBJ_RW_DONE);

	if (!(o->flags & OBJ_HAVE_REC))
		return STEP_NONE; /* held another key: the caller looks it up again */
	if (want_rw && (wr_cells(tx, o) & ~OB(o)->locked))
		return STEP_LOCK_READ;
	if (!(o->flags & OBJ_FETCHED) || want_rw)
		return STEP_READ;
	return STEP_NONE;
}

/* The lock masked-CAS's outcome: the bits are ours (0), or another holds one of them (1). */
static int settle_lock(struct txn_obj *o)
{
	if (OB(o)->mcas_old & OB(o)->want)
		return 1;
	OB(o)->locked |= OB(o)->want;
	o->flags |= OBJ_LOCKED;
	return 0;
}

/* A torn or inconsistent READ: read again, up to a bound, then abort. */
static int torn(struct remora_tx *tx, struct txn_obj *o)
{
	return ++OB(o)->retries > CREST_TORN_RETRIES ? abort_with(tx, REMORA_ABORT_VALIDATION) :
						       -EAGAIN;
}

/*
 * The snapshot check across the cells o reads (section 3.1 step 4 of the digest): each cell
 * whole, no read cell locked by another transaction, hdr.en[c] == EN(version of c). A cell read
 * earlier in this transaction must still carry the version seen then. Returns 0, -EAGAIN (read
 * again) or an abort.
 */
static int settle_cells(struct remora_tx *tx, struct txn_obj *o, uint64_t lock)
{
	const struct store_db *st = &txn_db(tx)->st;
	const struct codec_geom *g = &o->t->geom;
	uint64_t cells = rd_cells(tx, o);
	bool skip = txb_mut(tx, MUT_CREST_SKIP_SNAPSHOT);

	for (unsigned c = 0; c < g->nparts; c++) {
		struct codec_rec r;
		uint64_t bit = UINT64_C(1) << c;

		if (!(cells & bit))
			continue;
		if (st->codec->decode(g, o->img, c, &r) == -EAGAIN && !skip)
			return torn(tx, o);
		if (!skip && (lock & bit) && !(OB(o)->locked & bit))
			return abort_with(tx, REMORA_ABORT_LOCKED);
		if (!skip && (uint16_t)r.aux != codec_cell_en(r.version))
			return torn(tx, o);
		if ((OB(o)->have & bit) && OB(o)->ver[c] != r.version)
			return abort_with(tx, REMORA_ABORT_VALIDATION);
		OB(o)->ver[c] = r.version;
		OB(o)->have |= bit;
		if ((r.version & CODEC_CELL_TS_MASK) > ctx(tx)->ts_seen)
			ctx(tx)->ts_seen = r.version & CODEC_CELL_TS_MASK;
	}
	return 0;
}

/* 0 done, -EAGAIN read again, 1 another key (look up again), or an abort/failure. */
static int fetch_settle(struct remora_tx *tx, struct txn_obj *o, enum fetch_step step)
{
	const struct codec_geom *g = &o->t->geom;
	struct codec_cell_hdr h;
	int rc;

	(void)step;
	memcpy(&h, o->img, sizeof(h));
	if (h.key != o->key) {
		if (OB(o)->locked) { /* not our record: give its bits back now */
			struct remora_wr wr;
			struct txb b = { .wrs = &wr, .cap = 1 };

			post_unlock(tx, &b, o, OB(o)->locked);
			txn_post_unlocks(tx, b.wrs, b.n);
			OB(o)->locked = 0;
			o->flags &= ~(OBJ_LOCKED | OBJ_CAS_SENT);
		}
		txn_unresolve(tx, o);
		return 1;
	}
	if ((OB(o)->have || (o->flags & OBJ_FETCHED)) && OB(o)->used != h.used)
		return abort_with(tx, REMORA_ABORT_VALIDATION);
	OB(o)->used = h.used;
	if (h.used & REMORA_REC_VALID) {
		rc = settle_cells(tx, o, h.lock);
		if (rc)
			return rc;
	}
	if (!OB(o)->val && !(OB(o)->val = txn_arena_alloc(&tx->c->arena, g->value_size)))
		return fail(tx, -ENOMEM);
	for (unsigned c = 0; c < g->nparts; c++)
		codec_cell_get(g, o->img, c, OB(o)->val);
	OB(o)->retries = 0;
	o->value = OB(o)->val;
	o->flags |= OBJ_FETCHED;
	o->flags = (h.used & REMORA_REC_VALID) ? o->flags | OBJ_FOUND : o->flags & ~OBJ_FOUND;
	if ((o->flags & OBJ_WANT_RW) && !(wr_cells(tx, o) & ~OB(o)->locked))
		o->flags |= OBJ_RW_DONE;
	return 0;
}

static void post_round(struct remora_tx *tx, struct txb *b, struct txn_obj *const *objs,
		       unsigned n, enum fetch_step *steps)
{
	for (unsigned i = 0; i < n; i++) {
		struct txn_obj *o = objs[i];

		steps[i] = fetch_step(tx, o);
		if (steps[i] == STEP_LOCK_READ)
			post_lock(tx, b, o, wr_cells(tx, o) & ~OB(o)->locked);
		if (steps[i] != STEP_NONE)
			txb_read(tx, b, o->primary, o->off, o->img, o->t->geom.stride);
	}
}

static int crest_fetch(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	enum fetch_step *steps = txn_scratch(tx->c, TXN_SCRATCH_STEPS, n * sizeof(*steps));
	bool again = false;
	struct txb b;
	int rc;

	if (!steps || txb_init(tx, &b, txb_need(tx)))
		return fail(tx, -ENOMEM);
	for (unsigned round = 0;; round++) {
		bool lock_failed = false;

		if (round == CREST_ROUNDS_MAX)
			return fail(tx, txn_errf(tx, -EIO, "fetch: no progress after %u rounds", round));
		post_round(tx, &b, objs, n, steps);
		if (!b.n)
			break;
		if (!ctx(tx)->t_first_us)
			ctx(tx)->t_first_us = now_us();
		rc = txb_exec(tx, &b, "fetch");
		/* every lock that landed is ours before any abort below releases what we hold */
		for (unsigned i = 0; i < n; i++)
			if (steps[i] == STEP_LOCK_READ && settle_lock(objs[i]))
				lock_failed = true;
		if (rc)
			return fail(tx, rc);
		if (lock_failed)
			return abort_with(tx, REMORA_ABORT_LOCKED);
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

/* ---- writes ------------------------------------------------------------------------------ */

static int crest_write(struct remora_tx *tx, struct txn_obj *o, const void *value)
{
	return txn_stage_write(tx, o, value) ? fail(tx, -ENOMEM) : 0;
}

static int crest_remove(struct remora_tx *tx, struct txn_obj *o)
{
	if (txn_stage_remove(tx, o))
		return fail(tx, -ENOMEM);
	o->dirty_cells = all_cells(o);
	return 0;
}

/*
 * The new record's images: every cell empty on the backups; on the primary also every cell
 * locked by us, noted before the claim's verbs so that a failure after it releases them.
 */
static void insert_fill(struct remora_tx *tx, struct txn_obj *o, unsigned char *bimg)
{
	const struct store_db *st = &txn_db(tx)->st;
	const struct store_table *t = o->t;
	struct codec_rec r = { .key = o->key, .table = o->table, .flags = 0 };

	memset(bimg, 0, t->geom.stride);
	for (unsigned c = 0; c < t->geom.nparts; c++)
		st->codec->encode(&t->geom, bimg, c, &r);
	memcpy(o->img, bimg, t->geom.stride);
	memcpy(o->img + CODEC_CELL_LOCK_OFF, &(uint64_t){ all_cells(o) }, 8);
	OB(o)->locked = all_cells(o);
	OB(o)->used = 0;
}

/*
 * A new record for an absent key: a placeholder (key, used 0, every cell locked by us) on the
 * primary, published by one CAS on the first empty index slot in the same doorbell; the
 * backups get it unlocked, fire and forget (as the other protocols do).
 */
static int insert_claim(struct remora_tx *tx, struct txn_obj *o, bool *won)
{
	int rc = txn_insert_claim(tx, o, insert_fill, OBJ_LOCKED, &OB(o)->slot_word,
				  &OB(o)->mcas_old, won);

	if (!rc && !*won)
		OB(o)->locked = 0; /* the record was never published: nothing of it is ours */
	return rc;
}

static int crest_insert(struct remora_tx *tx, struct txn_obj *o, const void *value)
{
	int rc;

	if (txn_obj_newval(tx, o))
		return fail(tx, -ENOMEM);
	for (unsigned attempt = 0; attempt < CREST_INSERT_ATTEMPTS; attempt++) {
		bool won = false;

		if (!(o->flags & OBJ_HAVE_REC)) {
			rc = insert_claim(tx, o, &won);
			if (rc)
				return fail(tx, rc);
		}
		if ((o->flags & OBJ_HAVE_REC) && OB(o)->locked == all_cells(o)) {
			memcpy(o->newval, value, o->t->geom.value_size);
			o->dirty_cells = all_cells(o);
			o->flags |= OBJ_INSERT | OBJ_DIRTY | OBJ_FETCHED | OBJ_RW_DONE;
			o->flags &= ~OBJ_FOUND;
			return 0;
		}
		rc = txn_refetch_rw(tx, o);
		if (rc)
			return rc;
		if (o->flags & OBJ_FOUND)
			return -REMORA_EEXIST;
	}
	return abort_with(tx, REMORA_ABORT_LOCKED);
}

/* ---- validation -------------------------------------------------------------------------- */

/* Cells of o read and not held by us: what validation looks at. */
static uint64_t ro_cells(const struct remora_tx *tx, const struct txn_obj *o)
{
	if (!(o->flags & OBJ_FETCHED) || !(o->flags & OBJ_HAVE_REC))
		return 0;
	if (!(OB(o)->used & REMORA_REC_VALID))
		return OB(o)->locked ? 0 : all_cells(o); /* absent: the header must stay so */
	return rd_cells(tx, o) & ~OB(o)->locked;
}

/* One READ per record with unlocked read cells: the header line, or (EN guard) the record. */
static unsigned validate_post(struct remora_tx *tx, struct txb *b, bool full)
{
	unsigned n = 0;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		uint32_t len = full ? o->t->geom.stride : CODEC_CELL_LINE;

		if (!ro_cells(tx, o) || txb_mut(tx, MUT_SKIP_VALIDATION))
			continue;
		OB(o)->chk = txn_arena_alloc(&tx->c->arena, len);
		if (!OB(o)->chk)
			return UINT32_MAX;
		txb_read(tx, b, o->primary, o->off, OB(o)->chk, len);
		n++;
	}
	return n;
}

/*
 * No read cell locked by someone else, the used word unchanged, and per read cell the epoch
 * unchanged (crest_lock_bits_only: not checked, the prototype's gap 12), or with the EN
 * guard the whole version word.
 */
static int validate_settle(struct remora_tx *tx, bool full)
{
	const struct store_db *st = &txn_db(tx)->st;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		uint64_t ro = ro_cells(tx, o);
		struct codec_cell_hdr h;

		if (!ro || txb_mut(tx, MUT_SKIP_VALIDATION))
			continue;
		memcpy(&h, OB(o)->chk, sizeof(h));
		if ((h.lock & ro) || h.used != OB(o)->used)
			return abort_with(tx, REMORA_ABORT_VALIDATION);
		for (unsigned c = 0; c < o->t->geom.nparts; c++) {
			struct codec_rec r;

			if (!(ro >> c & 1) || !(OB(o)->have >> c & 1))
				continue;
			if (full) {
				if (st->codec->decode(&o->t->geom, OB(o)->chk, c, &r) ||
				    r.version != OB(o)->ver[c])
					return abort_with(tx, REMORA_ABORT_VALIDATION);
			} else if (!txb_mut(tx, MUT_CREST_LOCK_BITS_ONLY) &&
				   h.en[c] != codec_cell_en(OB(o)->ver[c])) {
				return abort_with(tx, REMORA_ABORT_VALIDATION);
			}
		}
	}
	return 0;
}

static int validate(struct remora_tx *tx, struct txb *b)
{
	bool full = ctx(tx)->t_first_us && now_us() - ctx(tx)->t_first_us > crest_en_wrap_us;
	unsigned n = validate_post(tx, b, full);
	int rc;

	if (n == UINT32_MAX)
		return fail(tx, -ENOMEM);
	if (!n)
		return 0;
	txn_point(tx, full ? "crest.validate_full" : "txn.validate");
	rc = txb_exec(tx, b, "validate");
	if (rc)
		return fail(tx, rc);
	return validate_settle(tx, full);
}

/* ---- commit ------------------------------------------------------------------------------ */

/* Lamport commit timestamp: above every TS this transaction read and every earlier commit of
 * this compute node (cell locks already order writers of a cell across compute nodes). */
static uint64_t commit_ts(struct remora_tx *tx)
{
	uint64_t *clk = &cdb(tx)->clock;
	uint64_t cur = __atomic_load_n(clk, __ATOMIC_RELAXED), want;

	do {
		want = (cur > ctx(tx)->ts_seen ? cur : ctx(tx)->ts_seen) + 1;
	} while (!__atomic_compare_exchange_n(clk, &cur, want, false, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return want & CODEC_CELL_TS_MASK;
}

/* The new image of o (lock word 0): fetched cells, the written ones with epoch + 1 and ts. */
static unsigned char *new_image(struct remora_tx *tx, struct txn_obj *o, uint64_t ts)
{
	const struct codec_geom *g = &o->t->geom;
	unsigned char *img = txn_arena_alloc(&tx->c->arena, g->stride);
	struct codec_cell_hdr h;

	if (!img)
		return NULL;
	memcpy(img, o->img, g->stride);
	memcpy(&h, img, sizeof(h));
	h.key = o->key;
	h.lock = 0;
	h.used = (o->flags & OBJ_DELETE) ? REMORA_REC_DELETED : REMORA_REC_VALID;
	h.used |= (uint64_t)(o->table & 0xffffu) << 16 | (uint64_t)g->nparts << 32;
	memcpy(img, &h, sizeof(h)); /* the cells' checksums cover the key and table */
	for (unsigned c = 0; c < g->nparts; c++) {
		uint16_t en;

		if (!(o->dirty_cells >> c & 1))
			continue;
		en = (uint16_t)(h.en[c] + 1);
		h.en[c] = en;
		codec_cell_put(g, img, c, o->newval, codec_cell_version(en, ts));
	}
	memcpy(img, &h, sizeof(h));
	return img;
}

/*
 * The version word logged for written cell c: the one the new image carries, so recovery
 * recognizes the cell when it landed without its epoch. The fetched version is no source: an
 * insert over a deleted record never recorded one (the record was not VALID), while its image
 * counts on from the header's epoch (crest_log_fetched_epoch: the old bug).
 */
static uint64_t log_version(struct remora_tx *tx, const struct txn_obj *o,
			    const unsigned char *img, unsigned c, uint64_t ts)
{
	uint64_t ver;

	if (txb_mut(tx, MUT_CREST_LOG_FETCHED_EPOCH))
		return codec_cell_version((uint16_t)(OB(o)->ver[c] >> 48) + 1u, ts);
	memcpy(&ver, img + o->t->geom.part_off[c], 8);
	return ver;
}

/*
 * The redo log: a header {tx id, VALID, coordinator, entries, length, checksum; reserved[0] =
 * commit timestamp, reserved[1] = dependencies (0: none without localized execution)} and per
 * written record an entry {table, op, key, offset, old_version = written cells, new_version =
 * commit timestamp}, the new used word, and per written cell in cell order {version, value
 * bytes padded to 8} (crest_log_len). One WRITE per log server (f+1), durable.
 */
static int log_post(struct remora_tx *tx, struct txb *b, unsigned char **imgs, uint64_t ts)
{
	const struct store_db *st = &txn_db(tx)->st;
	unsigned char *buf = ((struct crest_coord *)tx->c->priv)->logbuf;
	struct store_log_hdr *h = (void *)buf;
	uint32_t at = sizeof(*h), cap = st->sb.log_slot_bytes;
	uint16_t n = 0;

	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];
		const struct codec_geom *g = &o->t->geom;
		struct store_log_ent e = { 0 };
		uint32_t len = crest_log_len(g, o->dirty_cells);

		if (!imgs[i])
			continue;
		if (at + sizeof(e) + len > cap)
			return txn_errf(tx, -REMORA_EFULL,
					"log: the write set needs more than the %u-byte log slot", cap);
		e.table = o->table;
		e.op = (o->flags & OBJ_INSERT) ? REMORA_STORE_LOG_INS :
		       (o->flags & OBJ_DELETE) ? REMORA_STORE_LOG_DEL : REMORA_STORE_LOG_UPD;
		e.key = o->key;
		e.off = o->off;
		e.old_version = o->dirty_cells;
		e.new_version = ts;
		e.img_len = len;
		memcpy(buf + at, &e, sizeof(e));
		at += sizeof(e);
		memcpy(buf + at, imgs[i] + offsetof(struct codec_cell_hdr, used), 8);
		at += 8;
		for (unsigned c = 0; c < g->nparts; c++) {
			uint32_t off, clen;
			uint64_t ver;

			if (!(o->dirty_cells >> c & 1))
				continue;
			codec_cell_span(g->cells, g->value_size, c, &off, &clen);
			ver = log_version(tx, o, imgs[i], c, ts);
			memcpy(buf + at, &ver, 8);
			memcpy(buf + at + 8, o->newval + off, clen);
			memset(buf + at + 8 + clen, 0, ((clen + 7) & ~7u) - clen);
			at += 8 + ((clen + 7) & ~7u);
		}
		n++;
	}
	memset(h, 0, sizeof(*h));
	h->tx_id = tx->id;
	h->flags = REMORA_STORE_LOG_VALID;
	h->coord = tx->c->id;
	h->n = n;
	h->len = at;
	h->codec = st->codec->id;
	h->reserved[0] = ts;
	h->reserved[1] = 0; /* dependencies */
	h->csum = store_csum(REMORA_STORE_LOG_CSUM_SEED, h, at);
	for (unsigned r = 0; r < st->replicas; r++)
		txb_write(tx, b, store_log_server(st, tx->c->id, r),
			  store_log_off(st, tx->c->log_slot), buf, at,
			  txb_durable(tx, MUT_NO_LOG_PERSIST));
	return 0;
}

/* WRITEs of the runs of consecutive bits of mask: cells (img parts) or header epochs. */
static void write_runs(struct remora_tx *tx, struct txb *b, uint16_t node,
		       const struct txn_obj *o, const unsigned char *img, uint64_t mask,
		       bool epochs)
{
	const struct codec_geom *g = &o->t->geom;
	uint8_t fl = txb_durable(tx, MUT_NO_COMMIT_PERSIST);

	for (unsigned c = 0; c < g->nparts;) {
		unsigned e = c;
		uint32_t off, len;

		if (!(mask >> c & 1)) {
			c++;
			continue;
		}
		while (e + 1 < g->nparts && (mask >> (e + 1) & 1))
			e++;
		if (epochs) {
			off = CODEC_CELL_EN_OFF + 2u * c;
			len = 2u * (e - c + 1);
		} else {
			off = g->part_off[c];
			len = g->part_off[e] + g->part_len[e] - off;
		}
		txb_write(tx, b, node, o->off + off, img + off, len, fl);
		c = e + 1;
	}
}

/*
 * The commit doorbell, in this order: the written cells of every record on every replica;
 * then their epochs and (insert, delete) the key and used words; then on the primary the
 * unlock of our bits. The channel applies them in order, so a reader that sees a cell
 * unlocked sees its data and epoch. Returns the number of cell WRITEs at the front.
 */
static unsigned apply_post(struct remora_tx *tx, struct txb *b, unsigned char **imgs)
{
	const struct store_db *st = &txn_db(tx)->st;
	unsigned ncell_wrs = 0;

	for (unsigned pass = 0; pass < 2; pass++) {
		for (unsigned i = 0; i < tx->nobj; i++) {
			struct txn_obj *o = tx->objs[i];

			for (unsigned k = 0; imgs[i] && k < st->replicas; k++) {
				uint16_t m = store_replica(st, o->primary, k);

				write_runs(tx, b, m, o, imgs[i], o->dirty_cells, pass == 1);
				if (pass == 1 && (o->flags & (OBJ_INSERT | OBJ_DELETE)))
					txb_write(tx, b, m, o->off, imgs[i], 16,
						  txb_durable(tx, MUT_NO_COMMIT_PERSIST));
			}
		}
		if (pass == 0)
			ncell_wrs = b->n;
	}
	for (unsigned i = 0; i < tx->nobj; i++) {
		struct txn_obj *o = tx->objs[i];

		if (OB(o)->locked)
			post_unlock(tx, b, o, OB(o)->locked);
	}
	return ncell_wrs;
}

/*
 * The commit doorbell; when REMORA_DIE_AT names txn.commit_mid, the cell WRITEs (first) go
 * alone, so that crash point leaves cells written without their epochs, header words and
 * unlocks (a partly applied commit that recovery must finish).
 */
static int commit_exec(struct remora_tx *tx, struct txb *b, unsigned first)
{
	int rc;

	if (!txn_db(tx)->split_commit || first == 0 || first >= b->n)
		return txb_exec(tx, b, "commit");
	rc = store_exec(txn_chan(tx), b->wrs, first);
	if (!rc) {
		txn_point(tx, "txn.commit_mid");
		rc = store_exec(txn_chan(tx), b->wrs + first, b->n - first);
	}
	b->n = 0;
	return rc ? txn_errf(tx, rc, "commit: %s", remora_strerror(rc)) : 0;
}

static int apply(struct remora_tx *tx, struct txb *b, unsigned char **imgs)
{
	unsigned first;
	int rc;

	if (txb_mut(tx, MUT_CREST_UNLOCK_FIRST)) {
		/* the bug: the unlock goes (and lands) before the data WRITEs */
		for (unsigned i = 0; i < tx->nobj; i++)
			if (OB(tx->objs[i])->locked)
				post_unlock(tx, b, tx->objs[i], OB(tx->objs[i])->locked);
		rc = txb_exec(tx, b, "unlock");
		for (unsigned i = 0; i < tx->nobj; i++)
			OB(tx->objs[i])->locked = 0;
		if (rc)
			return strand(tx, rc);
		txn_point(tx, "txn.unlock");
	}
	first = apply_post(tx, b, imgs);
	txn_point(tx, "txn.commit_write");
	rc = commit_exec(tx, b, first);
	if (rc)
		return strand(tx, rc);
	for (unsigned i = 0; i < tx->nobj; i++) {
		OB(tx->objs[i])->locked = 0;
		tx->objs[i]->flags &= ~(OBJ_LOCKED | OBJ_CAS_SENT);
	}
	txn_point(tx, "txn.unlock");
	return 0;
}

static int crest_commit(struct remora_tx *tx)
{
	unsigned char **imgs;
	bool writes = false;
	struct txb b;
	uint64_t ts;
	int rc;

	if (txb_init(tx, &b, txb_need(tx) + 4u * tx->nobj * txn_db(tx)->st.replicas))
		return fail(tx, -ENOMEM);
	rc = validate(tx, &b);
	if (rc)
		return rc;
	for (unsigned i = 0; i < tx->nobj; i++)
		writes |= (tx->objs[i]->flags & OBJ_DIRTY) != 0;
	if (!writes) {
		release_at(tx, NULL);
		return 0;
	}
	imgs = txn_arena_alloc(&tx->c->arena, tx->nobj * sizeof(*imgs));
	if (!imgs)
		return fail(tx, -ENOMEM);
	ts = commit_ts(tx);
	for (unsigned i = 0; i < tx->nobj; i++) {
		imgs[i] = NULL;
		if ((tx->objs[i]->flags & OBJ_DIRTY) && !(imgs[i] = new_image(tx, tx->objs[i], ts)))
			return fail(tx, -ENOMEM);
	}
	rc = log_post(tx, &b, imgs, ts);
	if (rc)
		return fail(tx, rc);
	txn_point(tx, "txn.log");
	rc = txb_exec(tx, &b, "log");
	if (rc)
		return fail(tx, rc);
	txn_point(tx, "txn.logged");
	return apply(tx, &b, imgs);
}

static void crest_abort(struct remora_tx *tx)
{
	release_at(tx, "txn.abort_unlock");
}

static int crest_begin(struct remora_tx *tx)
{
	int stranded = ((struct crest_coord *)tx->c->priv)->stranded;

	if (stranded)
		return txn_errf(tx, stranded,
				"coordinator %u stopped: a commit of it failed after its log "
				"landed (%s); its locks and log are left to recovery",
				(unsigned)tx->c->id, remora_strerror(stranded));
	ctx(tx)->ts_seen = 0;
	ctx(tx)->t_first_us = 0;
	return 0;
}

/* ---- set-up ------------------------------------------------------------------------------ */

static int db_init_with(struct remora_db *db, bool cell_level)
{
	struct crest_db *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	d->cell_level = cell_level;
	db->proto_priv = d;
	return 0;
}

static int crest_db_init(struct remora_db *db)
{
	return db_init_with(db, true);
}

static int crest_record_db_init(struct remora_db *db)
{
	return db_init_with(db, false);
}

static void crest_db_fini(struct remora_db *db)
{
	free(db->proto_priv);
	db->proto_priv = NULL;
}

static int crest_coord_init(struct txn_coord *c)
{
	struct crest_coord *cc = c->priv;

	cc->logbuf = aligned_alloc(64, c->w->db->st.sb.log_slot_bytes);
	return cc->logbuf ? 0 : -ENOMEM;
}

static void crest_coord_fini(struct txn_coord *c)
{
	struct crest_coord *cc = c->priv;

	free(cc->logbuf);
	cc->logbuf = NULL;
}

#define CREST_PROTO_OPS(proto_name, proto_db_init)                                                 \
	{                                                                                          \
		.size = sizeof(struct txn_proto_ops),                                              \
		.name = (proto_name),                                                              \
		.codec = REMORA_CODEC_CELL,                                                        \
		.flags = REMORA_PROTO_NEEDS_MCAS,                                                  \
		.db_init = (proto_db_init),                                                        \
		.db_fini = crest_db_fini,                                                          \
		.begin = crest_begin,                                                              \
		.fetch = crest_fetch,                                                              \
		.write = crest_write,                                                              \
		.insert = crest_insert,                                                            \
		.remove = crest_remove,                                                            \
		.commit = crest_commit,                                                            \
		.abort = crest_abort,                                                              \
		.tx_priv_size = sizeof(struct crest_tx),                                           \
		.obj_priv_size = sizeof(struct crest_obj),                                         \
		.coord_priv_size = sizeof(struct crest_coord),                                     \
		.coord_init = crest_coord_init,                                                    \
		.coord_fini = crest_coord_fini,                                                    \
		.recover = crest_recover_cluster,                                                  \
	}

const struct txn_proto_ops txn_proto_crest = CREST_PROTO_OPS("crest", crest_db_init);
const struct txn_proto_ops txn_proto_crest_record =
	CREST_PROTO_OPS("crest_record", crest_record_db_init);
