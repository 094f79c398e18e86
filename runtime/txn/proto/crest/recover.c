/* SPDX-License-Identifier: MIT */
/*
 * CREST recovery after a whole-cluster crash (the recover op of crest and crest_record). A
 * crest log is written only after validation, so a valid log (VALID, checksum, entries that
 * fill it) is a committed transaction: recovery rolls every one forward, oldest commit
 * timestamp first, writing on each replica the logged cells whose version there is older than
 * the logged one (or torn), with their epochs, and the key and used words of inserts and
 * deletes. A cell that carries a newer timestamp was written by a later commit and is left
 * alone, so replaying an old log never undoes a newer one. Then every log header is zeroed
 * and every lock bitmap cleared (the shared lock sweep). docs/crest.md, "Recovery".
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "crest.h"
#include "recovery/sweep.h"

#define RCV_BATCH 64u

struct rlog {
	uint64_t tx_id, ts;
	unsigned char *rec;
	uint32_t len;
	uint16_t n; /* entries (the dependencies' ids follow them) */
};

struct rcv {
	const struct store_db *st;
	struct remora_chan *ch;
	bool check;
	struct recovery_report *rep;
	struct rlog *logs;
	size_t nlogs;
	uint16_t *slot_node;
	uint64_t *slot_off;
	size_t nslots;
	char *err;
	size_t errlen;
};

static int rerr(struct rcv *r, int rc, const char *what)
{
	snprintf(r->err, r->errlen, "crest recover: %s: %s", what, remora_strerror(rc));
	return rc;
}

static bool log_ok(const struct store_db *st, const unsigned char *p, struct store_log_hdr *h)
{
	struct store_log_hdr z;
	uint64_t at = sizeof(*h), csum;
	unsigned char *copy;
	bool ok;

	memcpy(h, p, sizeof(*h));
	if (!(h->flags & REMORA_STORE_LOG_VALID) || h->codec != REMORA_CODEC_CELL ||
	    h->len < sizeof(*h) || h->len > st->sb.log_slot_bytes || h->n == 0)
		return false;
	for (unsigned i = 0; i < h->n; i++) {
		struct store_log_ent e;

		if (at + sizeof(e) > h->len)
			return false;
		memcpy(&e, p + at, sizeof(e));
		at += sizeof(e) + e.img_len;
	}
	if (CREST_LOG_DEPS(h) > CREST_DEPS_MAX)
		return false;
	at += 8u * CREST_LOG_DEPS(h); /* the dependencies' ids */
	if (at != h->len || !(copy = malloc(h->len)))
		return false;
	memcpy(copy, p, h->len);
	z = *h;
	z.csum = 0;
	memcpy(copy, &z, sizeof(z));
	csum = h->csum;
	ok = store_csum(REMORA_STORE_LOG_CSUM_SEED, copy, h->len) == csum;
	free(copy);
	return ok;
}

static int note_log(struct rcv *r, const unsigned char *p, const struct store_log_hdr *h)
{
	struct rlog *l;

	r->rep->log_copies++;
	for (size_t i = 0; i < r->nlogs; i++)
		if (r->logs[i].tx_id == h->tx_id)
			return 0;
	l = realloc(r->logs, (r->nlogs + 1) * sizeof(*l));
	if (!l)
		return -ENOMEM;
	r->logs = l;
	l = &r->logs[r->nlogs];
	*l = (struct rlog){ .tx_id = h->tx_id, .ts = h->reserved[0], .len = h->len, .n = h->n,
			    .rec = malloc(h->len) };
	if (!l->rec)
		return -ENOMEM;
	memcpy(l->rec, p, h->len);
	r->nlogs++;
	return 0;
}

static int note_slot(struct rcv *r, uint16_t node, uint64_t off)
{
	uint16_t *n = realloc(r->slot_node, (r->nslots + 1) * sizeof(*n));
	uint64_t *o;

	if (!n)
		return -ENOMEM;
	r->slot_node = n;
	o = realloc(r->slot_off, (r->nslots + 1) * sizeof(*o));
	if (!o)
		return -ENOMEM;
	r->slot_off = o;
	n[r->nslots] = node;
	o[r->nslots++] = off;
	return 0;
}

/* Step 1: every log slot of every node, one READ each. */
static int read_logs(struct rcv *r)
{
	const struct store_sb *sb = &r->st->sb;
	uint64_t nslots = sb->log_bytes / sb->log_slot_bytes;
	unsigned char *buf = malloc(sb->log_slot_bytes);
	int rc = buf ? 0 : -ENOMEM;

	for (uint16_t m = 0; !rc && m < r->st->n_mn; m++) {
		for (uint64_t s = 0; !rc && s < nslots; s++) {
			uint64_t off = sb->log_off + s * sb->log_slot_bytes;
			struct remora_wr wr = store_wr_read(r->st, m, off, buf, sb->log_slot_bytes);
			struct store_log_hdr h;

			rc = store_exec(r->ch, &wr, 1);
			if (rc)
				break;
			r->rep->log_slots++;
			if (!(((struct store_log_hdr *)(void *)buf)->flags & REMORA_STORE_LOG_VALID))
				continue;
			rc = note_slot(r, m, off);
			if (!rc && log_ok(r->st, buf, &h))
				rc = note_log(r, buf, &h);
		}
	}
	free(buf);
	return rc;
}

static int cmp_ts(const void *a, const void *b)
{
	const struct rlog *x = a, *y = b;

	return x->ts < y->ts ? -1 : x->ts > y->ts;
}

/* The logged cells of entry e missing on replica m: WRITEs of cells and epochs. */
static int redo_replica(struct rcv *r, const struct store_log_ent *e, const unsigned char *img,
			uint16_t m, bool *wrote)
{
	const struct store_table *t = store_table(r->st, e->table);
	const struct codec_geom *g = &t->geom;
	unsigned char *cur = malloc(g->stride), *fresh = malloc(g->stride);
	unsigned char *val = calloc(1, g->value_size);
	struct remora_wr wrs[2 * CODEC_CELL_MAX + 1];
	const unsigned char *at = img + 8; /* the logged cells, in order */
	unsigned n = 0;
	int rc;

	rc = cur && fresh && val ? 0 : -ENOMEM;
	if (!rc) {
		wrs[0] = store_wr_read(r->st, m, e->off, cur, g->stride);
		rc = store_exec(r->ch, wrs, 1);
	}
	if (!rc)
		memcpy(fresh, cur, g->stride);
	for (unsigned c = 0; !rc && c < g->nparts; c++) {
		struct codec_rec have;
		struct codec_cell_hdr h;
		uint32_t off, clen;
		uint64_t ver;

		if (!(e->old_version >> c & 1))
			continue;
		codec_cell_span(g->cells, g->value_size, c, &off, &clen);
		memcpy(&ver, at, 8);
		memcpy(val + off, at + 8, clen);
		at += 8 + ((clen + 7) & ~7u);
		if (r->st->codec->decode(g, cur, c, &have) == 0 &&
		    (have.version & CODEC_CELL_TS_MASK) >= e->new_version &&
		    (have.version != ver || (uint16_t)have.aux == codec_cell_en(ver)))
			continue; /* this write or a later one landed whole, with its epoch */
		memcpy(fresh, &e->key, 8);
		memcpy(fresh + 8, img, 8);
		codec_cell_put(g, fresh, c, val, ver);
		memcpy(&h, fresh, sizeof(h));
		h.en[c] = codec_cell_en(ver);
		memcpy(fresh, &h, sizeof(h));
		wrs[n++] = store_wr_write(r->st, m, e->off + g->part_off[c], fresh + g->part_off[c],
					  g->part_len[c], REMORA_WR_DURABLE);
		wrs[n++] = store_wr_write(r->st, m, e->off + CODEC_CELL_EN_OFF + 2u * c,
					  fresh + CODEC_CELL_EN_OFF + 2u * c, 2, REMORA_WR_DURABLE);
	}
	if (!rc && e->op != REMORA_STORE_LOG_UPD && (n || memcmp(cur + 8, img, 8))) {
		/* an insert or delete whose key and used words did not land (they go last) */
		memcpy(fresh, &e->key, 8);
		memcpy(fresh + 8, img, 8);
		wrs[n++] = store_wr_write(r->st, m, e->off, fresh, 16, REMORA_WR_DURABLE);
	}
	if (!rc && n) {
		*wrote = true;
		r->rep->images_restored++;
		if (!r->check)
			rc = store_exec(r->ch, wrs, n);
	}
	free(cur);
	free(fresh);
	free(val);
	return rc;
}

/* Step 2: every committed log forward, oldest first. */
static int redo_all(struct rcv *r)
{
	if (r->nlogs) /* none: logs is NULL, which qsort must not get */
		qsort(r->logs, r->nlogs, sizeof(*r->logs), cmp_ts);
	r->rep->logs = r->nlogs;
	for (size_t i = 0; i < r->nlogs; i++) {
		const struct rlog *l = &r->logs[i];
		size_t at = sizeof(struct store_log_hdr);
		bool wrote = false, bad = false;

		for (unsigned k = 0; k < l->n; k++) {
			struct store_log_ent e;
			const struct store_table *t;

			memcpy(&e, l->rec + at, sizeof(e));
			t = store_table(r->st, e.table);
			if (!t || e.img_len != crest_log_len(&t->geom, e.old_version) ||
			    !store_rec_valid(t, e.off)) {
				bad = true;
				break;
			}
			for (unsigned rep = 0; rep < r->st->replicas; rep++) {
				struct store_place p;
				int rc;

				store_place(r->st, t, e.key, &p);
				rc = redo_replica(r, &e, l->rec + at + sizeof(e),
						  store_replica(r->st, p.primary, rep), &wrote);
				if (rc)
					return rc;
			}
			at += sizeof(e) + e.img_len;
		}
		if (bad)
			r->rep->logs_bad++;
		else if (wrote)
			r->rep->forward++;
		else
			r->rep->finished++;
	}
	return 0;
}

/* Step 3: zero every log header that looked valid. */
static int invalidate(struct rcv *r)
{
	static const unsigned char zero[sizeof(struct store_log_hdr)];

	for (size_t i = 0; i < r->nslots && !r->check; i++) {
		struct remora_wr wr = store_wr_write(r->st, r->slot_node[i], r->slot_off[i], zero,
						     sizeof(zero), REMORA_WR_DURABLE);
		int rc = store_exec(r->ch, &wr, 1);

		if (rc)
			return rc;
		r->rep->logs_invalidated++;
	}
	return 0;
}

int crest_recover_cluster(const struct store_db *st, struct remora_chan *ch, uint32_t flags,
			  struct recovery_report *rep, char *err, size_t errlen)
{
	struct rcv r = { .st = st, .ch = ch, .check = (flags & REMORA_RECOVERY_CHECK) != 0,
			 .rep = rep, .err = err, .errlen = errlen };
	size_t buflen = 1u << 20;
	unsigned char *buf = malloc(buflen);
	struct sweep_cfg sw = { .st = st, .ch = ch, .check = r.check, .rep = rep, .buf = buf,
				.buflen = buflen, .err = err, .errlen = errlen };
	int rc = buf ? 0 : -ENOMEM;

	if (!rc && st->codec->id != REMORA_CODEC_CELL)
		rc = -REMORA_ECONFIG;
	if (!rc && (rc = read_logs(&r)))
		rerr(&r, rc, "reading the logs");
	if (!rc && (rc = redo_all(&r)))
		rerr(&r, rc, "rolling forward");
	if (!rc && (rc = invalidate(&r)))
		rerr(&r, rc, "invalidating the logs");
	if (!rc)
		rc = sweep_release_locks(&sw);
	for (size_t i = 0; i < r.nlogs; i++)
		free(r.logs[i].rec);
	free(r.logs);
	free(r.slot_node);
	free(r.slot_off);
	free(buf);
	return rc;
}
