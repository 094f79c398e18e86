/* SPDX-License-Identifier: MIT */
/*
 * Motor's whole-cluster recovery (every compute node died), from its redo logs:
 *
 *   1. read every log slot of every memory node; keep the valid ones (VALID, the slot's owner,
 *      checksum, entries that fill it exactly, codec cvt)
 *   2. roll every logged transaction forward, oldest T_commit first: on each replica of each
 *      logged CVT whose newest intact version (a cell that decodes under the logged key and
 *      table) is older than the logged T_commit, WRITE the CVT's header and the logged cell
 *      into the logged cell index: a torn cell, or one whose header never landed, is repaired
 *      from the log's after-image. A log is written only after validation passed, so a
 *      valid log is a decided commit; a replica already holding the version (or a newer one,
 *      which can only exist once the logged one reached every replica) is left alone.
 *   3. zero every lock word of every record slot handed out (a lock never survives a crash),
 *      and move the timestamp counter past the newest version found
 *
 * Logs stay as they are: applying one again changes nothing (step 2's test), and every later
 * commit timestamp is larger (the counter is persistent).
 *
 * Online (motor_recover_online, at the end): the same steps for one dead, fenced compute node
 * while the others run, with a lock proof before step 2 and step 3 limited to its lock words.
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
#define MRCV_HDR_OFF 8u  /* a CVT's header after its lock word: key, table, cells, layout */
#define MRCV_HDR_LEN 24u

struct mentry {
	struct store_log_ent e;
	uint64_t lock; /* the lock word of the logged transaction */
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
	uint64_t mutations; /* the txn layer's $REMORA_MUTATE (negative controls) */
	uint64_t max_ts; /* newest version timestamp found in any CVT */
	bool online; /* one dead compute node, the others running (motor_recover_online) */
	uint16_t dead_first, dead_last; /* online: the dead node's coordinator ids */
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
		m->lock = h->lock;
		m->cell = p + at + sizeof(m->e);
		at += sizeof(m->e) + m->e.img_len;
	}
	return 0;
}

/* Step 1 over log slots first .. first + nslots - 1. */
static int read_logs(struct mrcv *r, uint64_t first, uint64_t nslots)
{
	const struct store_db *st = &r->st;
	uint32_t len = st->sb.log_slot_bytes;

	for (uint16_t m = 0; m < st->n_mn; m++) {
		for (uint64_t s = first; s < first + nslots; s++) {
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

/*
 * Whether a replica's image img already holds the logged version or a newer one. A newer
 * version (by timestamp, as before) means the logged one was superseded: its cell may have
 * been reused since, and the replica is left alone. At the logged timestamp, the logged cell
 * counts only when it is whole under the logged key and table (its checksum covers them): a
 * torn cell, or a cell under a header that never landed (the header is written by the
 * insert's placeholder and by the first commit into it, and by no later commit), is rewritten
 * from the log. The redo_trusts_version mutation takes the timestamp alone.
 */
static bool replica_has(const struct mrcv *r, const struct store_table *t, const struct mentry *m,
			const unsigned char *img)
{
	const struct codec_geom *g = &t->geom;
	bool trust = mut_on(r->mutations, MUT_REDO_TRUSTS_VERSION), have = false;
	uint64_t newest = 0;
	struct codec_rec rec;

	for (unsigned c = 0; c < g->nparts; c++) {
		r->st.codec->decode(g, img, c, &rec);
		if ((rec.flags & REMORA_CVT_USED) && rec.version >= newest) {
			newest = rec.version;
			have = true;
		}
	}
	if (!have || newest < m->e.new_version)
		return false;
	if (newest > m->e.new_version || trust)
		return true;
	r->st.codec->decode(g, img, (unsigned)m->e.old_version, &rec);
	return rec.version == m->e.new_version && (rec.flags & REMORA_CVT_USED) &&
	       rec.key == m->e.key && rec.table == m->e.table &&
	       codec_cvt_cell_intact(g, img, (unsigned)m->e.old_version);
}

/* The logged record's header (key, table, cell count, layout): bytes 8..31 of hdr. */
static void header_image(const struct mrcv *r, const struct store_table *t,
			 const struct mentry *m, unsigned char *hdr)
{
	struct codec_rec rec = { .key = m->e.key, .table = m->e.table };

	r->st.codec->encode(&t->geom, hdr, 0, &rec);
}

/* The logged pieces of m (and its header, unless the mutation is on) onto one replica. */
static int redo_write(struct mrcv *r, const struct mentry *m, uint16_t node,
		      const unsigned char *hdr, const uint32_t *at, const uint32_t *plen,
		      unsigned np, const unsigned char *cellbuf)
{
	const struct store_db *st = &r->st;
	struct remora_wr wr = store_wr_write(st, node, m->e.off + MRCV_HDR_OFF, hdr + MRCV_HDR_OFF,
					     MRCV_HDR_LEN, REMORA_WR_DURABLE);
	int rc = mut_on(r->mutations, MUT_REDO_TRUSTS_VERSION) ? 0 : store_exec(r->ch, &wr, 1);

	for (unsigned k = 0; !rc && k < np; k++) {
		wr = store_wr_write(st, node, m->e.off + at[k], k ? cellbuf : m->cell, plen[k],
				    REMORA_WR_DURABLE);
		rc = store_exec(r->ch, &wr, 1);
	}
	return rc;
}

/* Step 2 for one entry: every replica missing its version gets the header and logged cell. */
static int redo(struct mrcv *r, const struct mentry *m)
{
	const struct store_db *st = &r->st;
	const struct store_table *t = store_table(st, m->e.table);
	struct store_place pl;
	unsigned char *img, *hdr;
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
	hdr = calloc(1, t->geom.stride);
	cellbuf = np == 2 ? calloc(1, plen[1]) : NULL;
	if (!img || !hdr || (np == 2 && !cellbuf)) {
		free(img);
		free(hdr);
		free(cellbuf);
		return mrcv_err(r, -ENOMEM, "redo");
	}
	header_image(r, t, m, hdr);
	if (cellbuf)
		memcpy(cellbuf, m->cell + plen[0], m->e.img_len - plen[0]);
	for (unsigned k = 0; k < st->replicas; k++) {
		uint16_t node = store_replica(st, pl.primary, k);
		struct remora_wr wr = store_wr_read(st, node, m->e.off, img, t->geom.stride);

		rc = store_exec(r->ch, &wr, 1);
		if (rc)
			break;
		if (replica_has(r, t, m, img))
			continue;
		r->rep->images_restored++;
		if (r->check)
			continue;
		rc = redo_write(r, m, node, hdr, at, plen, np, cellbuf);
		if (rc)
			break;
	}
	free(img);
	free(hdr);
	free(cellbuf);
	return rc ? mrcv_err(r, rc, "redo of a logged cell") : 0;
}

/*
 * Online: whether the logged transaction of m still holds m's record, i.e. never finished (its
 * lock word is on the primary). Only then may the record be written while the others run: a
 * released lock means every commit WRITE had landed (unlock follows them), and the record may
 * carry newer versions, or a live writer's WRITE in flight, that a redo must not touch. The
 * dead node is fenced, so its lock words stay as they are.
 */
static int still_locked(struct mrcv *r, const struct mentry *m, bool *held)
{
	const struct store_db *st = &r->st;
	const struct store_table *t = store_table(st, m->e.table);
	struct store_place pl;
	uint64_t w = 0;
	struct remora_wr wr;
	int rc;

	*held = false;
	if (!t || !store_rec_valid(t, m->e.off))
		return 0; /* redo counts it as bad */
	store_place(st, t, m->e.key, &pl);
	wr = store_wr_read(st, pl.primary, m->e.off + t->geom.lock_off, &w, 8);
	rc = store_exec(r->ch, &wr, 1);
	*held = !rc && w == m->lock;
	return rc ? mrcv_err(r, rc, "reading a lock word") : 0;
}

static int redo_all(struct mrcv *r)
{
	int rc = 0;

	if (r->nents) /* no logs: ents is NULL, which qsort must not get */
		qsort(r->ents, r->nents, sizeof(*r->ents), ent_cmp);
	for (size_t i = 0; !rc && i < r->nents; i++) {
		bool held = true;

		if (i && r->ents[i].e.new_version == r->ents[i - 1].e.new_version &&
		    r->ents[i].e.off == r->ents[i - 1].e.off && r->ents[i].e.table == r->ents[i - 1].e.table)
			continue; /* the same entry from another log server */
		if (r->online)
			rc = still_locked(r, &r->ents[i], &held);
		if (rc || !held) {
			r->rep->finished += !rc;
			continue;
		}
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

/*
 * Zeroes one lock word. Online, with a CAS from the dead owner's word: a live writer may take
 * the lock the moment it is free, and a WRITE racing with its CAS could clear its lock.
 */
static int release_one(struct mrcv *r, uint16_t m, uint64_t off, uint64_t lock)
{
	static const uint64_t zero;
	uint64_t old = 0;
	struct remora_wr wr = r->online ? store_wr_cas(&r->st, m, off, lock, 0, &old) :
					  store_wr_write(&r->st, m, off, &zero, 8, REMORA_WR_DURABLE);

	return store_exec(r->ch, &wr, 1);
}

/* Step 3: zero every held lock word of table t on node m (and note the newest version). */
static int release_table(struct mrcv *r, uint16_t m, const struct store_table *t)
{
	const struct store_db *st = &r->st;
	uint64_t cursor = 0, used;
	struct remora_wr wr = store_wr_read(st, 0, t->ent.cursor_off, &cursor, 8);
	unsigned char *buf = malloc((size_t)MRCV_CHUNK_RECORDS * t->geom.stride);
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
			if (!r->online)
				note_ts(r, t, buf + i * t->geom.stride);
			if (!lock || (r->online && ((uint16_t)lock < r->dead_first ||
						    (uint16_t)lock > r->dead_last)))
				continue;
			r->rep->locks++;
			if (r->check ||
			    (r->online && mut_on(r->mutations, MUT_MOTOR_ONLINE_KEEPS_LOCKS)))
				continue;
			rc = release_one(r, m, store_rec_off(t, first + i) + t->geom.lock_off, lock);
			r->rep->locks_released += !rc;
		}
	}
	free(buf);
	return rc ? mrcv_err(r, rc, "releasing locks") : 0;
}

static void mrcv_free(struct mrcv *r)
{
	for (size_t i = 0; i < r->nlogs; i++)
		free(r->logs[i]);
	free(r->logs);
	free(r->ents);
}

int motor_recover_cluster(const struct store_db *st, struct remora_chan *ch, uint32_t flags,
			  struct recovery_report *rep, char *err, size_t errlen)
{
	struct mrcv r = { .st = *st, .ch = ch, .rep = rep, .err = err, .errlen = errlen };
	uint64_t t0 = now_ns(), t1;
	int rc;

	r.check = flags & REMORA_RECOVERY_CHECK;
	if (mut_from_env(MUT_TXN, &r.mutations, NULL, 0))
		r.mutations = 0; /* bad names: none */
	rc = read_logs(&r, 0, (uint64_t)st->sb.max_cn * st->sb.coords_per_cn);
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
	mrcv_free(&r);
	return rc;
}

/* Online: the dead node's GC horizon entry goes (it runs no snapshot any more). */
static int clear_gc_entry(struct mrcv *r, uint16_t cn)
{
	static const uint64_t zero;
	uint64_t off = REMORA_STORE_CONTROL_OFF + offsetof(struct store_control, gc_horizon) +
		       (uint64_t)cn * 8u;
	struct remora_wr wr = store_wr_write(&r->st, 0, off, &zero, 8, REMORA_WR_DURABLE);
	int rc = store_exec(r->ch, &wr, 1);

	return rc ? mrcv_err(r, rc, "gc horizon") : 0;
}

/* One dead compute node cn on channel ch (see motor_recover_online). */
static int recover_one(struct remora_db *db, struct remora_chan *ch, uint16_t cn,
		       struct recovery_report *rep)
{
	uint64_t per = db->st.sb.coords_per_cn, t0 = now_ns(), t1;
	char err[160];
	struct mrcv r = { .st = db->st, .ch = ch, .rep = rep, .err = err, .errlen = sizeof(err),
			  .online = true, .mutations = db->mutations };
	int rc;

	r.dead_first = txn_coord_id(cn, 0);
	r.dead_last = txn_coord_id(cn, (uint32_t)per - 1u);
	rc = read_logs(&r, cn * per, per);
	remora_fault_point("online.read");
	if (!rc)
		rc = redo_all(&r);
	remora_fault_point("online.decided");
	rep->logs += r.nlogs;
	t1 = now_ns();
	rep->ns_logs += t1 - t0;
	for (uint16_t m = 0; !rc && m < db->st.n_mn; m++)
		for (unsigned i = 0; !rc && i < REMORA_MAX_TABLES; i++)
			if (store_table(&db->st, i))
				rc = release_table(&r, m, store_table(&db->st, i));
	if (!rc)
		rc = clear_gc_entry(&r, cn);
	rep->ns_locks += now_ns() - t1;
	mrcv_free(&r);
	return rc;
}

/*
 * Online recovery of dead compute nodes while the others run (recovery_online claimed them,
 * and the caller fenced each on every memory node: none of its verbs lands any more). For
 * each: read its coordinators' log slots; roll forward every logged transaction that still
 * holds its lock (it never finished: a valid log is a decided commit); then release every lock
 * word naming one of its coordinators (a scan of every record slot handed out, one CAS per
 * lock: motor publishes no failed ids for live transactions to steal with); then drop its GC
 * horizon entry. Rerunning it changes nothing more: the redo test and the CASes are idempotent.
 */
int motor_recover_online(struct remora_db *db, const uint16_t *failed_cn, unsigned n)
{
	struct recovery_report own = { 0 }, *rep = &own;
	struct remora_chan *ch = NULL;
	int rc;

	if (!db || !failed_cn)
		return -EINVAL;
	if (db->online_rep)
		rep = db->online_rep;
	rc = remora_chan_open(db->st.tp, &ch);
	if (rc)
		return rc;
	for (unsigned i = 0; !rc && i < n; i++)
		rc = failed_cn[i] < db->st.sb.max_cn ? recover_one(db, ch, failed_cn[i], rep) :
						       -EINVAL;
	remora_chan_close(ch);
	return rc;
}
