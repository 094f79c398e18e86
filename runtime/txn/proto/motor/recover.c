/* SPDX-License-Identifier: MIT */
/*
 * Motor's whole-cluster recovery (every compute node died), from its redo logs:
 *
 *   1. read every log slot of every memory node; keep the valid ones (VALID, the slot's owner,
 *      checksum, entries that fill it exactly, codec cvt)
 *   2. roll every logged transaction forward, oldest T_commit first: on each replica of each
 *      logged CVT whose newest version is older than the logged T_commit, WRITE the logged
 *      cell into the logged cell index. A log is written only after validation passed, so a
 *      valid log is a decided commit; a replica already holding the version (or a newer one,
 *      which can only exist once the logged one reached every replica) is left alone.
 *   3. zero every lock word of every record slot handed out (a lock never survives a crash),
 *      and move the timestamp counter past the newest version found
 *
 * Logs stay as they are: applying one again changes nothing (step 2's test), and every later
 * commit timestamp is larger (the counter is persistent).
 */
#include <errno.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "motor.h"

#define MRCV_BATCH 256u
#define MRCV_CHUNK_RECORDS 512u

struct mentry {
	struct store_log_ent e;
	const unsigned char *cell; /* the logged cell image (e.img_len bytes) */
};

struct mrcv {
	struct store_db st;
	struct remora_chan *ch;
	struct recovery_report *rep;
	char *err;
	size_t errlen;
	unsigned char **logs; /* valid log copies (kept for their cell images) */
	size_t nlogs;
	struct mentry *ents;
	size_t nents;
	bool check; /* REMORA_RECOVERY_CHECK: count, write nothing */
	uint64_t max_ts; /* newest version timestamp found in any CVT */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int mrcv_err(struct mrcv *r, int rc, const char *what)
{
	snprintf(r->err, r->errlen, "motor recover: %s: %s", what, remora_strerror(rc));
	return rc;
}

static uint16_t slot_coord(const struct store_db *st, uint64_t s)
{
	uint64_t cn = s / st->sb.coords_per_cn, local = s % st->sb.coords_per_cn;

	return (uint16_t)(cn * REMORA_STORE_COORD_SLOTS + 1 + local);
}

/* 1: p is a valid motor log of slot s. */
static int log_valid(const struct store_db *st, unsigned char *p, uint64_t s)
{
	struct store_log_hdr h;
	uint64_t csum, at = sizeof(h);
	int ok;

	memcpy(&h, p, sizeof(h));
	if (!(h.flags & REMORA_STORE_LOG_VALID) || h.len < sizeof(h) ||
	    h.len > st->sb.log_slot_bytes || h.n == 0 || h.coord != slot_coord(st, s) ||
	    h.codec != REMORA_CODEC_CVT)
		return 0;
	csum = h.csum;
	((struct store_log_hdr *)p)->csum = 0;
	ok = store_csum(REMORA_STORE_LOG_CSUM_SEED, p, h.len) == csum;
	((struct store_log_hdr *)p)->csum = csum;
	for (unsigned i = 0; ok && i < h.n; i++) {
		struct store_log_ent e;

		if (at + sizeof(e) > h.len)
			return 0;
		memcpy(&e, p + at, sizeof(e));
		at += sizeof(e) + e.img_len;
	}
	return ok && at == h.len;
}

static int note_entries(struct mrcv *r, const unsigned char *p)
{
	const struct store_log_hdr *h = (const void *)p;
	uint64_t at = sizeof(*h);
	struct mentry *n = realloc(r->ents, (r->nents + h->n) * sizeof(*n));

	if (!n)
		return -ENOMEM;
	r->ents = n;
	for (unsigned i = 0; i < h->n; i++) {
		struct mentry *m = &r->ents[r->nents++];

		memcpy(&m->e, p + at, sizeof(m->e));
		m->cell = p + at + sizeof(m->e);
		at += sizeof(m->e) + m->e.img_len;
	}
	return 0;
}

static int read_logs(struct mrcv *r)
{
	const struct store_db *st = &r->st;
	uint64_t nslots = (uint64_t)st->sb.max_cn * st->sb.coords_per_cn;
	uint32_t len = st->sb.log_slot_bytes;

	for (uint16_t m = 0; m < st->n_mn; m++) {
		for (uint64_t s = 0; s < nslots; s++) {
			unsigned char *p = malloc(len), **l;
			struct remora_wr wr = store_wr_read(st, m, store_log_off(st, s),
								   p, len);
			int rc = p ? store_exec(r->ch, &wr, 1) : -ENOMEM;

			r->rep->log_slots++;
			if (!rc && !log_valid(st, p, s)) {
				free(p);
				continue;
			}
			l = rc ? NULL : realloc(r->logs, (r->nlogs + 1) * sizeof(*l));
			if (!l) {
				free(p);
				return mrcv_err(r, rc ? rc : -ENOMEM, "reading the logs");
			}
			r->logs = l;
			r->logs[r->nlogs++] = p;
			r->rep->log_copies++;
			if (note_entries(r, p))
				return mrcv_err(r, -ENOMEM, "reading the logs");
		}
	}
	return 0;
}

static int ent_cmp(const void *a, const void *b)
{
	const struct mentry *x = a, *y = b;

	return x->e.new_version < y->e.new_version ? -1 : x->e.new_version > y->e.new_version;
}

/* Step 2 for one entry: every replica missing its version gets the logged cell. */
static int redo(struct mrcv *r, const struct mentry *m)
{
	const struct store_db *st = &r->st;
	const struct store_table *t = store_table(st, m->e.table);
	struct store_place pl;
	unsigned char *img;
	uint32_t at[2] = { 0 }, plen[2] = { 0 }, len = 0;
	unsigned char *cellbuf;
	unsigned np = 0;
	int rc = 0;

	if (t && m->e.old_version < t->geom.nparts)
		np = codec_cvt_pieces(&t->geom, (unsigned)m->e.old_version, at, plen);
	for (unsigned k = 0; k < np; k++)
		len += plen[k];
	/* deltas: the cell was logged without its zero tail (at least its 16-byte header) */
	if (np == 2 && m->e.img_len < len && m->e.img_len >= plen[0] + 16)
		len = m->e.img_len;
	if (!t || m->e.old_version >= t->geom.nparts || m->e.img_len != len ||
	    !store_rec_valid(t, m->e.off)) {
		r->rep->logs_bad++;
		return 0;
	}
	store_place(st, t, m->e.key, &pl);
	img = malloc(t->geom.stride);
	cellbuf = np == 2 ? calloc(1, plen[1]) : NULL;
	if (!img || (np == 2 && !cellbuf)) {
		free(img);
		return mrcv_err(r, -ENOMEM, "redo");
	}
	if (cellbuf)
		memcpy(cellbuf, m->cell + plen[0], m->e.img_len - plen[0]);
	for (unsigned k = 0; k < st->replicas; k++) {
		uint16_t node = store_replica(st, pl.primary, k);
		struct remora_wr wr = store_wr_read(st, node, m->e.off, img, t->geom.stride);
		uint64_t newest = 0;
		bool have = false;

		rc = store_exec(r->ch, &wr, 1);
		if (rc)
			break;
		for (unsigned c = 0; c < t->geom.nparts; c++) {
			struct codec_rec rec;

			st->codec->decode(&t->geom, img, c, &rec); /* torn: rewritten below */
			if ((rec.flags & REMORA_CVT_USED) && rec.version >= newest) {
				newest = rec.version;
				have = true;
			}
		}
		if (have && newest >= m->e.new_version)
			continue;
		r->rep->images_restored++;
		if (r->check)
			continue;
		for (unsigned k = 0; !rc && k < np; k++) {
			wr = store_wr_write(st, node, m->e.off + at[k],
					    k ? cellbuf : m->cell, plen[k], REMORA_WR_DURABLE);
			rc = store_exec(r->ch, &wr, 1);
		}
		if (rc)
			break;
	}
	free(img);
	free(cellbuf);
	return rc ? mrcv_err(r, rc, "redo of a logged cell") : 0;
}

static int redo_all(struct mrcv *r)
{
	int rc = 0;

	qsort(r->ents, r->nents, sizeof(*r->ents), ent_cmp);
	for (size_t i = 0; !rc && i < r->nents; i++) {
		if (i && r->ents[i].e.new_version == r->ents[i - 1].e.new_version &&
		    r->ents[i].e.off == r->ents[i - 1].e.off && r->ents[i].e.table == r->ents[i - 1].e.table)
			continue; /* the same entry from another log server */
		rc = redo(r, &r->ents[i]);
		r->rep->forward++;
	}
	return rc;
}

static void note_ts(struct mrcv *r, const struct store_table *t, const unsigned char *img)
{
	for (unsigned c = 0; c < t->geom.nparts; c++) {
		struct codec_rec rec;

		if (r->st.codec->decode(&t->geom, img, c, &rec) == 0 &&
		    (rec.flags & REMORA_CVT_USED) && rec.version > r->max_ts)
			r->max_ts = rec.version;
	}
}

/*
 * The timestamp counter's FAAs are not durable, so after a power failure it may stand below
 * versions that are: move it past the newest one (else new snapshots would not see them).
 */
static int bump_counter(struct mrcv *r)
{
	const struct store_db *st = &r->st;
	uint64_t off = REMORA_STORE_CONTROL_OFF + offsetof(struct store_control, ts_counter);
	uint64_t cur = 0;
	struct remora_wr wr = store_wr_read(st, 0, off, &cur, 8);
	int rc = store_exec(r->ch, &wr, 1);

	if (rc || cur >= r->max_ts || r->check)
		return rc ? mrcv_err(r, rc, "timestamp counter") : 0;
	wr = store_wr_write(st, 0, off, &r->max_ts, 8, REMORA_WR_DURABLE);
	rc = store_exec(r->ch, &wr, 1);
	return rc ? mrcv_err(r, rc, "timestamp counter") : 0;
}

/*
 * Step 5: no compute node has the database open after a whole-cluster crash: the GC horizon
 * entries they left (gc.c) would hold every writer's GC back for good. Zeroed (durable).
 */
static int clear_gc_horizon(struct mrcv *r)
{
	static const uint64_t zero[REMORA_MAX_CN];
	uint64_t off = REMORA_STORE_CONTROL_OFF + offsetof(struct store_control, gc_horizon);
	struct remora_wr wr = store_wr_write(&r->st, 0, off, zero, sizeof(zero), REMORA_WR_DURABLE);
	int rc = r->check ? 0 : store_exec(r->ch, &wr, 1);

	return rc ? mrcv_err(r, rc, "gc horizon") : 0;
}

/* Step 3: zero every held lock word of table t on node m (and note the newest version). */
static int release_table(struct mrcv *r, uint16_t m, const struct store_table *t)
{
	const struct store_db *st = &r->st;
	uint64_t cursor = 0, used;
	struct remora_wr wr = store_wr_read(st, 0, t->ent.cursor_off, &cursor, 8);
	unsigned char *buf = malloc((size_t)MRCV_CHUNK_RECORDS * t->geom.stride);
	static const uint64_t zero;
	int rc = buf ? store_exec(r->ch, &wr, 1) : -ENOMEM;

	used = cursor < t->ent.capacity ? cursor : t->ent.capacity;
	for (uint64_t first = 0; !rc && first < used; first += MRCV_CHUNK_RECORDS) {
		uint64_t k = used - first < MRCV_CHUNK_RECORDS ? used - first : MRCV_CHUNK_RECORDS;

		wr = store_wr_read(st, m, store_rec_off(t, first), buf,
					  (uint32_t)(k * t->geom.stride));
		rc = store_exec(r->ch, &wr, 1);
		for (uint64_t i = 0; !rc && i < k; i++) {
			uint64_t lock;

			memcpy(&lock, buf + i * t->geom.stride + t->geom.lock_off, 8);
			r->rep->records++;
			note_ts(r, t, buf + i * t->geom.stride);
			if (!lock)
				continue;
			r->rep->locks++;
			if (r->check)
				continue;
			wr = store_wr_write(st, m, store_rec_off(t, first + i) +
							  t->geom.lock_off, &zero, 8, REMORA_WR_DURABLE);
			rc = store_exec(r->ch, &wr, 1);
			r->rep->locks_released += !rc;
		}
	}
	free(buf);
	return rc ? mrcv_err(r, rc, "releasing locks") : 0;
}

int motor_recover_cluster(const struct store_db *st, struct remora_chan *ch, uint32_t flags,
			  struct recovery_report *rep, char *err, size_t errlen)
{
	struct mrcv r = { .st = *st, .ch = ch, .rep = rep, .err = err, .errlen = errlen };
	uint64_t t0 = now_ns(), t1;
	int rc;

	r.check = flags & REMORA_RECOVERY_CHECK;
	rc = read_logs(&r);
	if (!rc)
		rc = redo_all(&r);
	rep->logs = r.nlogs;
	t1 = now_ns();
	rep->ns_logs = t1 - t0;
	for (uint16_t m = 0; !rc && m < st->n_mn; m++)
		for (unsigned i = 0; !rc && i < REMORA_MAX_TABLES; i++)
			if (store_table(st, i))
				rc = release_table(&r, m, store_table(st, i));
	if (!rc)
		rc = bump_counter(&r);
	if (!rc)
		rc = clear_gc_horizon(&r);
	rep->ns_locks = now_ns() - t1;
	for (size_t i = 0; i < r.nlogs; i++)
		free(r.logs[i]);
	free(r.logs);
	free(r.ents);
	return rc;
}
