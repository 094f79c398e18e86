/* SPDX-License-Identifier: MIT */
/*
 * Bulk loading without transactions. Records are carved from large chunks of consecutive
 * record slots, so a whole chunk of record images (every part the codec has) goes out as ONE
 * WRITE per memory node, and so do their side areas (a second WRITE, same batch); the
 * index slots are then claimed with one CAS each (on the bucket's primary) and copied to the
 * backups with plain WRITEs. Everything of a batch is posted at once (many verbs in flight).
 *
 * Index slots follow the insert rule (first empty slot of the probe sequence). Each loader
 * keeps, per bucket, the first slot it does not know to be taken: a slot it claimed, or one a
 * concurrent loader won, is known taken; the loader never skips a slot it has not seen taken,
 * so several loaders (threads, compute nodes) may load one table at once.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"

#define LOAD_CHUNK 256u  /* records per chunk image (one WRITE per node) */
#define LOAD_PEND 1024u  /* index slots claimed per batch */

struct ld_table {
	uint8_t *hint;          /* per bucket: first slot not known to be taken */
	struct store_chunk chunk;
	unsigned char *img;     /* LOAD_CHUNK record images */
	unsigned char *side;    /* their LOAD_CHUNK side areas, or NULL (the codec has none) */
	uint64_t img_first;     /* record slot index of img[0] */
	uint32_t img_n;
	uint32_t nodes;         /* bit per node holding a replica of a record in img */
	bool index_dirty;       /* slots claimed since the index was last persisted */
};

struct ld_pend {
	uint64_t hash;
	uint64_t bucket;
	uint64_t word;          /* slot value: fingerprint and record offset */
	uint64_t old;           /* CAS result */
	uint32_t table;
	uint16_t primary;
	uint8_t slot;
};

struct store_loader {
	const struct store_db *st;
	struct remora_chan *ch;
	uint64_t *counter;
	store_loaded_fn loaded;
	void *loaded_arg;
	struct ld_table tab[REMORA_MAX_TABLES];
	struct ld_pend *pend;
	unsigned npend;
	struct remora_wr *wrs;
	unsigned wcap;
	char errmsg[256];
};

static int ld_err(struct store_loader *l, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int ld_err(struct store_loader *l, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(l->errmsg, sizeof(l->errmsg), fmt, ap);
	va_end(ap);
	return code;
}

int store_loader_create(const struct store_db *st, struct remora_chan *ch,
			       uint64_t *counter, store_loaded_fn loaded, void *arg,
			       struct store_loader **out)
{
	struct store_loader *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->st = st;
	l->ch = ch;
	l->counter = counter;
	l->loaded = loaded;
	l->loaded_arg = arg;
	l->pend = calloc(LOAD_PEND, sizeof(*l->pend));
	l->wcap = LOAD_PEND * st->replicas + 2 * REMORA_MAX_TABLES * REMORA_MAX_MN;
	l->wrs = calloc(l->wcap, sizeof(*l->wrs));
	if (!l->pend || !l->wrs) {
		store_loader_destroy(l);
		return -ENOMEM;
	}
	*out = l;
	return 0;
}

void store_loader_destroy(struct store_loader *l)
{
	if (!l)
		return;
	for (unsigned i = 0; i < REMORA_MAX_TABLES; i++) {
		free(l->tab[i].hint);
		free(l->tab[i].img);
		free(l->tab[i].side);
	}
	free(l->pend);
	free(l->wrs);
	free(l);
}

const char *store_loader_errmsg(const struct store_loader *l)
{
	return l->errmsg;
}

/* Picks the slot an index entry for home bucket b tries next: the first not known taken. */
static int ld_pick_slot(struct store_loader *l, const struct store_table *t,
			struct ld_table *lt, struct ld_pend *p)
{
	uint64_t b = p->bucket;

	for (uint64_t probes = 0; probes < t->ent.nbuckets; probes++) {
		if (lt->hint[b] < REMORA_STORE_BUCKET_SLOTS) {
			p->bucket = b;
			p->slot = lt->hint[b]++;
			return 0;
		}
		b = store_next_bucket(l->st, t, b);
	}
	return ld_err(l, -REMORA_EFULL, "load: index of table '%s' is full", t->ent.name);
}

static struct remora_wr *ld_wr(struct store_loader *l, unsigned *n)
{
	return *n < l->wcap ? &l->wrs[(*n)++] : NULL;
}

static uint64_t ld_slot_off(const struct store_table *t, const struct ld_pend *p)
{
	return store_bucket_off(t, p->bucket) + 8 + 8ull * p->slot;
}

/*
 * Loading puts a cluster's data in place before anything is measured, so its verbs are exempt
 * from the cost profile: on a memory node scaled by K (docs/bench.md) a TATP or TPC-C load
 * otherwise took minutes, K times the modelled hardware's time. Verbs other coroutines post on
 * the channel while this batch is in flight are exempt too; loads run before the workload.
 */
static int ld_exec(struct store_loader *l, unsigned n)
{
	bool was = remora_chan_cost_exempt(l->ch, true);
	int rc = store_exec(l->ch, l->wrs, n);

	remora_chan_cost_exempt(l->ch, was);
	return rc;
}

/* One round: the given CASes (and, first, the chunk images); returns verbs posted. */
static int ld_round(struct store_loader *l, bool images, unsigned *posted)
{
	const struct store_db *st = l->st;
	unsigned n = 0;

	if (images) {
		for (unsigned i = 0; i < REMORA_MAX_TABLES; i++) {
			struct ld_table *lt = &l->tab[i];
			const struct store_table *t = &st->tab[i];

			if (!lt->img_n)
				continue;
			for (uint16_t m = 0; m < st->n_mn; m++) {
				if (!(lt->nodes & (1u << m)))
					continue;
				*ld_wr(l, &n) = store_wr_write(
					st, m, store_rec_off(t, lt->img_first), lt->img,
					lt->img_n * t->geom.stride, REMORA_WR_DURABLE);
				if (!lt->side)
					continue;
				*ld_wr(l, &n) = store_wr_write(
					st, m, store_side_off(t, lt->img_first), lt->side,
					(uint32_t)(lt->img_n * t->geom.side_bytes), REMORA_WR_DURABLE);
			}
		}
	}
	for (unsigned i = 0; i < l->npend; i++) {
		struct ld_pend *p = &l->pend[i];
		const struct store_table *t = &st->tab[p->table];

		if (p->old == 0 && images == false)
			continue; /* already claimed in an earlier round */
		*ld_wr(l, &n) = store_wr_cas(st, p->primary, ld_slot_off(t, p), 0, p->word,
						    &p->old);
	}
	*posted = n;
	return ld_exec(l, n);
}

/* Sends every queued record and claims its index slot (nothing persisted explicitly). */
static int ld_flush(struct store_loader *l)
{
	const struct store_db *st = l->st;
	unsigned n, done = 0;
	bool first = true;
	int rc;

	for (unsigned i = 0; i < l->npend; i++)
		l->pend[i].old = UINT64_MAX; /* not yet claimed */
	while (l->npend) {
		rc = ld_round(l, first, &n);
		if (rc)
			return ld_err(l, rc, "load: %s", remora_strerror(rc));
		first = false;
		/* Claimed slots go to the backups; slots a concurrent loader won are retried. */
		n = 0;
		for (unsigned i = 0; i < l->npend;) {
			struct ld_pend *p = &l->pend[i];
			const struct store_table *t = &st->tab[p->table];

			if (p->old != 0) {
				rc = ld_pick_slot(l, t, &l->tab[p->table], p);
				if (rc)
					return rc;
				i++;
				continue;
			}
			for (unsigned r = 1; r < st->replicas; r++) {
				uint16_t m = store_replica(st, p->primary, r);

				*ld_wr(l, &n) = store_wr_write(st, m, ld_slot_off(t, p),
								      &p->word, 8, 0);
			}
			i++;
		}
		rc = ld_exec(l, n);
		if (rc)
			return ld_err(l, rc, "load: %s", remora_strerror(rc));
		/* Drop the claimed ones. */
		for (unsigned i = 0; i < l->npend;) {
			if (l->pend[i].old == 0) {
				if (l->loaded)
					l->loaded(l->loaded_arg, l->pend[i].hash,
						  l->pend[i].word & REMORA_STORE_SLOT_OFF_MASK);
				l->pend[i] = l->pend[--l->npend];
				done++;
			} else {
				l->pend[i].old = UINT64_MAX;
				i++;
			}
		}
	}
	for (unsigned i = 0; i < REMORA_MAX_TABLES; i++) {
		if (l->tab[i].img_n)
			l->tab[i].index_dirty = true;
		l->tab[i].img_n = 0;
		l->tab[i].nodes = 0;
	}
	if (l->counter)
		__atomic_add_fetch(l->counter, done, __ATOMIC_RELAXED);
	return 0;
}

/*
 * Record images went out DURABLE; index slots are claimed by CAS one by one, so rather than
 * one persist point per slot, the index of every table loaded into is persisted once here, on
 * every node (slots sit on primaries and backups). On pmem a load is durable once this
 * returned; elsewhere persisting is a no-op.
 */
static int ld_persist(struct store_loader *l)
{
	const struct store_db *st = l->st;
	int rc;

	for (unsigned i = 0; i < REMORA_MAX_TABLES; i++) {
		const struct store_table *t = &st->tab[i];

		if (!l->tab[i].index_dirty)
			continue;
		for (uint16_t m = 0; m < st->n_mn; m++) {
			rc = remora_persist(l->ch, m, t->ent.index_off, t->ent.index_bytes);
			if (rc)
				return ld_err(l, rc, "load: persisting the index of '%s': %s",
					      t->ent.name, remora_strerror(rc));
		}
		l->tab[i].index_dirty = false;
	}
	return 0;
}

int store_load_flush(struct store_loader *l)
{
	int rc = ld_flush(l);

	return rc ? rc : ld_persist(l);
}

static int ld_table_init(struct store_loader *l, const struct store_table *t,
			 struct ld_table *lt)
{
	lt->hint = calloc(t->ent.nbuckets, 1);
	lt->img = calloc(LOAD_CHUNK, t->geom.stride);
	if (t->geom.side_bytes && codec_side_fn(l->st->codec)) {
		lt->side = calloc(LOAD_CHUNK, t->geom.side_bytes);
		if (!lt->side)
			return ld_err(l, -ENOMEM, "load: out of memory");
	}
	if (!lt->hint || !lt->img)
		return ld_err(l, -ENOMEM, "load: out of memory");
	return 0;
}

int store_load(struct store_loader *l, uint32_t table, uint64_t key,
		      const void *value)
{
	const struct store_db *st = l->st;
	const struct store_table *t = store_table(st, table);
	struct store_place pl;
	struct ld_table *lt;
	struct ld_pend *p;
	struct codec_rec r;
	uint64_t idx;
	int rc;

	if (!t)
		return ld_err(l, -REMORA_ENOTFOUND, "load: no table with id %u", table);
	if (!value)
		return ld_err(l, -EINVAL, "load: value is NULL");
	lt = &l->tab[table];
	if (!lt->hint) {
		rc = ld_table_init(l, t, lt);
		if (rc)
			return rc;
	}
	/* A chunk image must stay contiguous: send it before it would wrap into a new chunk. */
	if (lt->img_n == LOAD_CHUNK || l->npend == LOAD_PEND ||
	    (lt->img_n && lt->chunk.next == lt->chunk.end)) {
		rc = ld_flush(l);
		if (rc)
			return rc;
	}
	rc = store_alloc(st, l->ch, t, &lt->chunk, LOAD_CHUNK, &idx);
	if (rc)
		return ld_err(l, rc, "load: table '%s': %s", t->ent.name,
			      rc == -REMORA_EFULL ? "record area full (max_records too small)" :
						    remora_strerror(rc));
	if (lt->img_n == 0)
		lt->img_first = idx;
	store_place(st, t, key, &pl);
	r = (struct codec_rec){ .lock = 0, .version = 0, .key = key, .table = table,
				 .flags = REMORA_REC_VALID, .value = value };
	for (unsigned part = 0; part < t->geom.nparts; part++) {
		st->codec->encode(&t->geom, lt->img + (size_t)lt->img_n * t->geom.stride, part, &r);
		if (lt->side)
			codec_side_fn(st->codec)(&t->geom, lt->side + (size_t)lt->img_n *
								    t->geom.side_bytes, part, &r);
	}
	lt->img_n++;
	for (unsigned i = 0; i < st->replicas; i++)
		lt->nodes |= 1u << store_replica(st, pl.primary, i);
	p = &l->pend[l->npend];
	p->hash = pl.hash;
	p->bucket = pl.bucket;
	p->table = table;
	p->primary = pl.primary;
	p->word = store_slot_make(pl.fp, store_rec_off(t, idx));
	rc = ld_pick_slot(l, t, lt, p);
	if (rc)
		return rc;
	l->npend++;
	return 0;
}
