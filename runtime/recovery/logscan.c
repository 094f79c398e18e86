/* SPDX-License-Identifier: MIT */
/* runtime/recovery, the log scan (logscan.h). */
#include "logscan.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "recovery/sweep.h"
#include "store/codec.h"
#include "txn/ids.h"

int logscan_err(struct logscan *s, int code, const char *fmt, ...)
{
	va_list ap;

	if (s->err && s->errlen) {
		va_start(ap, fmt);
		vsnprintf(s->err, s->errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
	size_t c = *cap ? *cap : 16;
	void *q;

	if (need <= *cap)
		return p;
	while (c < need)
		c *= 2;
	q = realloc(p, c * elem);
	if (q)
		*cap = c;
	return q;
}

int logscan_init(struct logscan *s, const struct store_db *st, struct remora_chan *ch,
		 struct recovery_report *rep, char *err, size_t errlen)
{
	*s = (struct logscan){.st = st, .ch = ch, .rep = rep, .err = err, .errlen = errlen};
	s->buflen = LOGSCAN_CHUNK > st->sb.log_slot_bytes ? LOGSCAN_CHUNK : st->sb.log_slot_bytes;
	s->buf = malloc(s->buflen);
	s->scratch = malloc(st->sb.log_slot_bytes);
	if (!s->buf || !s->scratch)
		return logscan_err(s, -ENOMEM, "recover: out of memory");
	return 0;
}

void logscan_fini(struct logscan *s)
{
	for (size_t i = 0; i < s->nlogs; i++)
		free(s->logs[i].rec);
	free(s->logs);
	free(s->slots);
	free(s->buf);
	free(s->scratch);
	s->logs = NULL;
	s->slots = NULL;
	s->buf = s->scratch = NULL;
	s->nlogs = s->nslots = 0;
}

/* ---- batched verbs ------------------------------------------------------------------------ */

int logscan_flush(struct logscan *s)
{
	int rc = store_exec(s->ch, s->wrs, s->nwr);

	s->nwr = 0;
	return rc ? logscan_err(s, rc, "recover: verbs failed: %s", remora_strerror(rc)) : 0;
}

int logscan_queue(struct logscan *s, const struct remora_wr *wr)
{
	if (s->nwr == LOGSCAN_BATCH) {
		int rc = logscan_flush(s);

		if (rc)
			return rc;
	}
	s->wrs[s->nwr++] = *wr;
	return 0;
}

int logscan_read(struct logscan *s, uint16_t node, uint64_t off, void *dst, uint32_t len)
{
	struct remora_wr wr = store_wr_read(s->st, node, off, dst, len);

	return logscan_queue(s, &wr);
}

int logscan_write(struct logscan *s, uint16_t node, uint64_t off, const void *src, uint32_t len)
{
	struct remora_wr wr = store_wr_write(s->st, node, off, src, len, REMORA_WR_DURABLE);

	return logscan_queue(s, &wr);
}

int logscan_cas(struct logscan *s, uint16_t node, uint64_t off, uint64_t cmp, uint64_t swap,
		uint64_t *old)
{
	struct remora_wr wr = store_wr_cas(s->st, node, off, cmp, swap, old);

	return logscan_queue(s, &wr);
}

/* ---- reading the logs --------------------------------------------------------------------- */

/*
 * Whether coordinator id coord may own log slot s (docs/engine.md, "Identifiers"): the slot's
 * coordinator index within its compute node, in its id block (runtime/txn/ids.h) or, for ids
 * by compute node, in cn * REMORA_STORE_COORD_SLOTS + 1 + index (the block size divides it).
 */
static bool slot_coord_fits(const struct store_db *st, uint64_t s, uint16_t coord)
{
	uint32_t bsize = txn_ids_block_size(st->sb.coords_per_cn);

	return coord != 0 && (uint32_t)(coord - 1u) % bsize == s % st->sb.coords_per_cn;
}

/* Checks a log record in place: 1 valid, 0 not (torn, stale header, foreign bytes). */
static int log_valid(struct logscan *s, const unsigned char *p, uint64_t slot, uint32_t *n_out)
{
	const struct store_db *st = s->st;
	struct store_log_hdr h;
	uint64_t csum, at;

	memcpy(&h, p, sizeof(h));
	if (!(h.flags & REMORA_STORE_LOG_VALID) || h.len < sizeof(h) ||
	    h.len > st->sb.log_slot_bytes || h.n == 0 || !slot_coord_fits(st, slot, h.coord))
		return 0;
	/* The engine checksums header (csum field 0) and entries as one run of bytes. */
	csum = h.csum;
	h.csum = 0;
	memcpy(s->scratch, &h, sizeof(h));
	memcpy(s->scratch + sizeof(h), p + sizeof(h), h.len - sizeof(h));
	if (store_csum(REMORA_STORE_LOG_CSUM_SEED, s->scratch, h.len) != csum)
		return 0;
	at = sizeof(h);
	for (unsigned i = 0; i < h.n; i++) {
		struct store_log_ent e;

		if (at + sizeof(e) > h.len)
			return 0;
		memcpy(&e, p + at, sizeof(e));
		at += sizeof(e) + e.img_len;
		if (at > h.len)
			return 0;
	}
	*n_out = h.n;
	return at == h.len;
}

static int note_slot(struct logscan *s, uint16_t node, uint64_t off)
{
	struct logscan_slot *sl = grow(s->slots, &s->capslots, s->nslots + 1, sizeof(*sl));

	if (!sl)
		return logscan_err(s, -ENOMEM, "recover: out of memory");
	s->slots = sl;
	sl[s->nslots++] = (struct logscan_slot){.node = node, .off = off};
	return 0;
}

static int note_log(struct logscan *s, const unsigned char *p, uint32_t n)
{
	struct store_log_hdr h;
	struct logscan_log *l;

	memcpy(&h, p, sizeof(h));
	s->rep->log_copies++;
	for (size_t i = 0; i < s->nlogs; i++)
		if (s->logs[i].tx_id == h.tx_id)
			return 0; /* another copy: same transaction, same bytes (one WRITE) */
	l = grow(s->logs, &s->caplogs, s->nlogs + 1, sizeof(*l));
	if (!l)
		return logscan_err(s, -ENOMEM, "recover: out of memory");
	s->logs = l;
	l = &s->logs[s->nlogs];
	*l = (struct logscan_log){.tx_id = h.tx_id, .len = h.len, .n = n, .rec = malloc(h.len)};
	if (!l->rec)
		return logscan_err(s, -ENOMEM, "recover: out of memory");
	memcpy(l->rec, p, h.len);
	s->nlogs++;
	return 0;
}

/* The slots of one READ: buf holds k slots from slot s0 of node m. */
static int scan_chunk(struct logscan *s, uint16_t m, uint64_t s0, uint64_t k)
{
	const struct store_sb *sb = &s->st->sb;

	for (uint64_t i = 0; i < k; i++) {
		const unsigned char *p = s->buf + i * sb->log_slot_bytes;
		uint32_t flags, n = 0;
		int rc;

		s->rep->log_slots++;
		memcpy(&flags, p + offsetof(struct store_log_hdr, flags), 4);
		if (!(flags & REMORA_STORE_LOG_VALID))
			continue;
		rc = note_slot(s, m, sb->log_off + (s0 + i) * sb->log_slot_bytes);
		if (!rc)
			rc = log_valid(s, p, s0 + i, &n);
		if (rc == 1)
			rc = note_log(s, p, n);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int logscan_read_slots(struct logscan *s, uint16_t m, uint64_t first, uint64_t nslots)
{
	const struct store_sb *sb = &s->st->sb;
	uint64_t per = s->buflen / sb->log_slot_bytes;
	int rc = 0;

	for (uint64_t s0 = first; !rc && s0 < first + nslots; s0 += per) {
		uint64_t k = first + nslots - s0 < per ? first + nslots - s0 : per;

		rc = logscan_read(s, m, sb->log_off + s0 * sb->log_slot_bytes, s->buf,
				  (uint32_t)(k * sb->log_slot_bytes));
		if (!rc)
			rc = logscan_flush(s);
		if (!rc)
			rc = scan_chunk(s, m, s0, k);
	}
	return rc;
}

int logscan_read_node(struct logscan *s, uint16_t m)
{
	return logscan_read_slots(s, m, 0, s->st->sb.log_bytes / s->st->sb.log_slot_bytes);
}

/* ---- a log's records ------------------------------------------------------------------------ */

const struct store_log_ent *logscan_ent(const struct logscan_log *l, unsigned i,
					const unsigned char **img)
{
	size_t at = sizeof(struct store_log_hdr);
	const struct store_log_ent *e;

	for (unsigned k = 0;; k++) {
		e = (const void *)(l->rec + at);
		if (k == i)
			break;
		at += sizeof(*e) + e->img_len;
	}
	*img = l->rec + at + sizeof(*e);
	return e;
}

const struct store_table *logscan_ent_table(const struct store_db *st,
					    const struct store_log_ent *e)
{
	const struct store_table *t = store_table(st, e->table);

	if (!t || !store_rec_valid(t, e->off) || e->img_len != t->geom.stride ||
	    e->op < REMORA_STORE_LOG_UPD || e->op > REMORA_STORE_LOG_DEL)
		return NULL;
	return t;
}

struct logscan_img logscan_classify(const struct store_db *st, const struct store_table *t,
				    const struct store_log_ent *e, const unsigned char *img)
{
	struct codec_rec rec;
	struct logscan_img out;
	uint64_t ver;

	/* An aligned 8-byte word is never torn, even when the image around it is. */
	memcpy(&ver, img + t->geom.version_off, 8);
	out.s = ver == e->new_version	? LOGSCAN_NEW
		: ver == e->old_version ? LOGSCAN_OLD
					: LOGSCAN_OTHER;
	out.ok = st->codec->decode(&t->geom, img, 0, &rec) == 0 && rec.key == e->key &&
		 rec.table == e->table;
	return out;
}

/* After a failover: each dead copy's image slot gets its acting primary's image. */
static void fill_dead_copies(const struct store_db *st, const struct logscan_log *l,
			     unsigned char *imgs)
{
	size_t at = 0;

	for (unsigned k = 0; k < l->n; k++) {
		const unsigned char *u;
		const struct store_log_ent *e = logscan_ent(l, k, &u);
		const struct store_table *t = logscan_ent_table(st, e);
		struct store_place pl;
		uint16_t home;
		unsigned live = 0;

		store_place(st, t, e->key, &pl);
		home = store_home(st, pl.bucket);
		while (live < st->replicas - 1u && store_node_dead(st, store_replica(st, home, live)))
			live++;
		for (unsigned i = 0; i < st->replicas; i++)
			if (i != live && store_node_dead(st, store_replica(st, home, i)))
				memcpy(imgs + at + (size_t)i * t->geom.stride,
				       imgs + at + (size_t)live * t->geom.stride, t->geom.stride);
		at += (size_t)st->replicas * t->geom.stride;
	}
}

int logscan_read_replicas(struct logscan *s, const struct logscan_log *l, unsigned char **imgs)
{
	const struct store_db *st = s->st;
	size_t bytes = 0, at = 0;
	int rc;

	for (unsigned k = 0; k < l->n; k++) {
		const unsigned char *u;

		bytes += (size_t)st->replicas *
			 logscan_ent_table(st, logscan_ent(l, k, &u))->geom.stride;
	}
	*imgs = malloc(bytes);
	if (!*imgs)
		return logscan_err(s, -ENOMEM, "recover: out of memory");
	for (unsigned k = 0; k < l->n; k++) {
		const unsigned char *u;
		const struct store_log_ent *e = logscan_ent(l, k, &u);
		const struct store_table *t = logscan_ent_table(st, e);
		struct store_place pl;

		store_place(st, t, e->key, &pl);
		for (unsigned i = 0; i < st->replicas; i++) {
			uint16_t m = store_replica(st, store_home(st, pl.bucket), i);

			/* A failed-over copy is gone: its slot gets the acting primary's image
			 * below, so deciding over the slots decides over the live copies. */
			rc = store_node_dead(st, m) ? 0 : logscan_read(s, m, e->off, *imgs + at,
								       t->geom.stride);
			if (rc)
				return rc;
			at += t->geom.stride;
		}
	}
	rc = logscan_flush(s);
	if (!rc && store_dead(st))
		fill_dead_copies(st, l, *imgs);
	return rc;
}

/* ---- the end: invalidate ------------------------------------------------------------------ */

int logscan_invalidate(struct logscan *s, bool check)
{
	static const struct store_log_hdr zero;
	uint32_t nodes = 0;
	int rc;

	for (size_t i = 0; i < s->nslots; i++) {
		struct remora_wr wr = store_wr_write(s->st, s->slots[i].node, s->slots[i].off,
						     &zero, sizeof(zero), 0);

		s->rep->logs_invalidated++;
		if (check)
			continue;
		nodes |= 1u << s->slots[i].node;
		rc = logscan_queue(s, &wr);
		if (rc)
			return rc;
	}
	rc = logscan_flush(s);
	for (uint16_t m = 0; !rc && m < s->st->n_mn; m++) {
		if (!(nodes & (1u << m)))
			continue;
		rc = remora_persist(s->ch, m, s->st->sb.log_off, s->st->sb.log_bytes);
		if (rc)
			logscan_err(s, rc, "recover: persisting the logs of node %u: %s", m,
				    remora_strerror(rc));
	}
	return rc;
}

/* ---- the whole-cluster driver ------------------------------------------------------------- */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int logscan_restore(struct logscan *s, const struct logscan_log *l, enum logscan_state want,
		    bool keep_other, bool lock_stays, bool check)
{
	const struct store_db *st = s->st;
	unsigned char *imgs = NULL;
	size_t at = 0;
	int rc;

	rc = logscan_read_replicas(s, l, &imgs);
	for (unsigned k = 0; !rc && k < l->n; k++) {
		const unsigned char *img;
		const struct store_log_ent *e = logscan_ent(l, k, &img);
		const struct store_table *t = logscan_ent_table(st, e);
		uint32_t from = lock_stays ? t->geom.write_off : 0;
		struct store_place pl;

		store_place(st, t, e->key, &pl);
		for (unsigned i = 0; !rc && i < st->replicas; i++, at += t->geom.stride) {
			struct logscan_img c = logscan_classify(st, t, e, imgs + at);

			if ((c.s == want && c.ok) || (c.s == LOGSCAN_OTHER && keep_other))
				continue;
			uint16_t m = store_replica(st, store_home(st, pl.bucket), i);

			if (store_node_dead(st, m))
				continue; /* failed over: nobody serves it */
			s->rep->images_restored++;
			if (!check)
				rc = logscan_write(s, m, e->off + from, img + from,
						   t->geom.stride - from);
		}
	}
	if (!rc)
		rc = logscan_flush(s); /* the images live in l->rec, which outlives this */
	free(imgs);
	return rc;
}

int logscan_decide_all(struct logscan *s, logscan_log_fn decide, enum logscan_verdict apply_on,
		       logscan_log_fn apply, void *ctx)
{
	int rc = 0;

	for (size_t i = 0; !rc && i < s->nlogs; i++) {
		struct logscan_log *l = &s->logs[i];

		if (l->verdict == LOGSCAN_BAD) {
			s->rep->logs_bad++;
			continue;
		}
		rc = decide(ctx, l);
		s->rep->finished += l->verdict == LOGSCAN_FINISHED;
		s->rep->forward += l->verdict == LOGSCAN_FORWARD;
		s->rep->back += l->verdict == LOGSCAN_BACK;
	}
	for (size_t i = 0; !rc && i < s->nlogs; i++)
		if (s->logs[i].verdict == (int)apply_on)
			rc = apply(ctx, &s->logs[i]);
	return rc;
}

int logscan_recover_cluster(struct logscan *s, bool check, int (*decide)(void *ctx), void *ctx)
{
	const struct sweep_cfg cfg = {
	    .st = s->st,
	    .ch = s->ch,
	    .check = check,
	    .rep = s->rep,
	    .buf = s->buf,
	    .buflen = s->buflen,
	    .err = s->err,
	    .errlen = s->errlen,
	};
	uint64_t t0 = now_ns(), t1;
	int rc = 0;

	for (uint16_t m = 0; !rc && m < s->st->n_mn; m++)
		rc = logscan_read_node(s, m);
	if (!rc)
		rc = decide(ctx);
	if (!rc)
		rc = logscan_invalidate(s, check);
	s->rep->logs = s->nlogs;
	t1 = now_ns();
	s->rep->ns_logs = t1 - t0;
	if (!rc)
		rc = sweep_release_locks(&cfg);
	s->rep->ns_locks = now_ns() - t1;
	return rc;
}
