/* SPDX-License-Identifier: MIT */
/*
 * LOTUS's whole-cluster recovery (every compute node died; the lock tables died with them and
 * are not rebuilt). What a crash can leave: cells still INVISIBLE, each tagged with its
 * writer's transaction id, on some or all replicas, and cells of that writer already stamped
 * with its T_commit on others. Decision per logged transaction T (digest ambiguities 5-6):
 *
 *   - T's visible cells are recognised without a tag: T held the W lock of every key it wrote
 *     from before its INVISIBLE WRITE until after its visible one, and a commit never
 *     overwrites a CVT's newest version, so a logged cell that is visible AND the newest of its
 *     CVT replica, while some logged cell of T is still INVISIBLE(T), can only be T's stamp.
 *   - Such a stamp exists: T reached step 3 (every INVISIBLE cell had landed, or step 3 would
 *     not have started): every INVISIBLE(T) cell is stamped with that T_commit (roll forward).
 *   - None: T never made anything visible; its INVISIBLE cells go (the sweep below).
 *
 * Then every CVT of every table on every replica is swept: an INVISIBLE cell left is an orphan
 * (its log never landed, or it rolled back) and is marked unused. Finally Motor's recovery runs
 * for the logs it owns (the two share the cvt codec; lotus logs carry their own codec tag, so
 * Motor skips them), zeroing CVT lock words and moving its counter past every version: this
 * runs after the sweep, when no INVISIBLE tag can be mistaken for a timestamp.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/env.h"
#include "lotus.h"
#include "reshard.h"

#define CHUNK 512u

static uint64_t now_ns(void)
{
	return lotus_clock_ns(CLOCK_MONOTONIC);
}

struct lrcv {
	const struct store_db *st;
	struct remora_chan *ch;
	struct recovery_report *rep;
	bool check;
	bool online; /* one dead compute node: its rolled-back cells go here, not in a sweep */
	unsigned char *img;
};

static int rd(struct lrcv *r, uint16_t node, uint64_t off, void *buf, uint32_t len)
{
	struct remora_wr wr = store_wr_read(r->st, node, off, buf, len);

	return store_exec(r->ch, &wr, 1);
}

static int wr_dur(struct lrcv *r, uint16_t node, uint64_t off, const void *buf, uint32_t len)
{
	struct remora_wr wr = store_wr_write(r->st, node, off, buf, len, REMORA_WR_DURABLE);

	return r->check ? 0 : store_exec(r->ch, &wr, 1);
}

/* A valid lotus log in p (len bytes): header, checksum, entries filling it exactly. */
static bool log_valid(unsigned char *p, uint32_t len)
{
	struct store_log_hdr h;
	uint64_t csum;
	bool ok;

	memcpy(&h, p, sizeof(h));
	if (!(h.flags & REMORA_STORE_LOG_VALID) || h.codec != LOTUS_LOG_CODEC || h.n == 0 ||
	    h.len > len || h.len != sizeof(h) + (uint64_t)h.n * sizeof(struct store_log_ent))
		return false;
	csum = h.csum;
	((struct store_log_hdr *)p)->csum = 0;
	ok = store_csum(REMORA_STORE_LOG_CSUM_SEED, p, h.len) == csum;
	((struct store_log_hdr *)p)->csum = csum;
	return ok;
}

/* The logged cell of e on one replica: INVISIBLE(tag) (1), T's stamp (2, *ts), other (0). */
static int cell_state(struct lrcv *r, const struct store_table *t, const struct store_log_ent *e,
		      uint16_t node, uint64_t tag, uint64_t *ts)
{
	struct codec_rec c, o;
	uint64_t newest = 0;
	int rc = rd(r, node, e->off, r->img, t->geom.stride);

	if (rc)
		return rc;
	if (r->st->codec->decode(&t->geom, r->img, (unsigned)e->old_version, &c) ||
	    !(c.flags & REMORA_CVT_USED))
		return 0;
	if (c.version == tag)
		return 1;
	for (unsigned i = 0; i < t->geom.nparts; i++)
		if (!r->st->codec->decode(&t->geom, r->img, i, &o) && (o.flags & REMORA_CVT_USED) &&
		    !(o.version & LOTUS_INV_BIT) && o.version > newest)
			newest = o.version;
	if (c.version & LOTUS_INV_BIT || c.version != newest)
		return 0;
	*ts = c.version;
	return 2;
}

/* e's cell on node, when it is INVISIBLE(tag): stamped with ts (forward), or with ts 0 marked
 * reclaimed (a rolled-back transaction's). */
static int settle(struct lrcv *r, const struct store_table *t, const struct store_log_ent *e,
		  uint16_t node, uint64_t tag, uint64_t ts)
{
	uint64_t dummy;
	struct codec_rec c;
	uint32_t at, len;
	int rc = cell_state(r, t, e, node, tag, &dummy);

	if (rc != 1)
		return rc < 0 ? rc : 0;
	r->st->codec->decode(&t->geom, r->img, (unsigned)e->old_version, &c);
	if (ts)
		c.version = ts;
	else
		c.flags = REMORA_CVT_RECLAIMED;
	r->st->codec->encode(&t->geom, r->img, (unsigned)e->old_version, &c);
	codec_cvt_span(&t->geom, (unsigned)e->old_version, &at, &len);
	r->rep->images_restored++;
	return wr_dur(r, node, e->off + at, r->img + at, len);
}

/* Every (entry, replica) of log p: pass 0 looks (*inv: an INVISIBLE(T) cell is left, *ts: T's
 * stamp, 0 if none), pass 1 settles T's INVISIBLE cells with it. */
static int log_apply(struct lrcv *r, const unsigned char *p, int pass, bool *inv, uint64_t *ts)
{
	const struct store_log_hdr *h = (const void *)p;
	uint64_t tag = LOTUS_INV_BIT | h->tx_id;
	int rc = 0;

	for (unsigned i = 0; !rc && i < h->n; i++) {
		struct store_log_ent e;
		const struct store_table *t;
		struct store_place pl;

		memcpy(&e, p + sizeof(*h) + i * sizeof(e), sizeof(e));
		t = store_table(r->st, e.table);
		if (!t || e.old_version >= t->geom.nparts || !store_rec_valid(t, e.off))
			continue;
		store_place(r->st, t, e.key, &pl);
		for (unsigned k = 0; !rc && k < r->st->replicas; k++) {
			uint16_t node = store_replica(r->st, pl.primary, k);

			if (pass == 0) {
				uint64_t seen = 0;

				rc = cell_state(r, t, &e, node, tag, &seen);
				*inv |= rc == 1;
				*ts = rc == 2 ? seen : *ts;
				rc = rc < 0 ? rc : 0;
			} else {
				rc = settle(r, t, &e, node, tag, *ts);
			}
		}
	}
	return rc;
}

/* Rolls forward the transaction of the lotus log in p, if it made anything visible. */
static int log_decide(struct lrcv *r, const unsigned char *p)
{
	uint64_t ts = 0;
	bool inv = false;
	int rc = log_apply(r, p, 0, &inv, &ts);

	if (rc < 0)
		return rc;
	r->rep->logs++;
	if (!inv) {
		r->rep->finished++; /* nothing of it is left INVISIBLE */
		return 0;
	}
	if (!ts) {
		r->rep->back++; /* nothing visible: its INVISIBLE cells go (offline: in the sweep) */
		return r->online ? log_apply(r, p, 1, &inv, &ts) : 0;
	}
	r->rep->forward++;
	return log_apply(r, p, 1, &inv, &ts);
}

/* Decides the logs in slots [first, first + n) on every memory node. */
static int logs_all(struct lrcv *r, uint64_t first, uint64_t n)
{
	const struct store_db *st = r->st;
	uint32_t len = st->sb.log_slot_bytes;
	unsigned char *p = malloc(len);
	int rc = p ? 0 : -ENOMEM;

	for (uint16_t m = 0; !rc && m < st->n_mn; m++)
		for (uint64_t s = first; !rc && s < first + n; s++) {
			rc = rd(r, m, store_log_off(st, s), p, len);
			if (!rc && log_valid(p, len))
				rc = log_decide(r, p);
		}
	free(p);
	return rc;
}

/* Marks every INVISIBLE cell of one CVT image reclaimed; returns how many it found. */
static unsigned cvt_sweep(struct lrcv *r, const struct store_table *t, unsigned char *img,
			  uint16_t node, uint64_t off, int *rc)
{
	unsigned found = 0;

	for (unsigned i = 0; i < t->geom.nparts && !*rc; i++) {
		struct codec_rec c;
		uint32_t at, len;

		if (r->st->codec->decode(&t->geom, img, i, &c) || !(c.flags & REMORA_CVT_USED) ||
		    !(c.version & LOTUS_INV_BIT))
			continue;
		found++;
		/* RECLAIMED, not free: the orphan may have overwritten a live version, and a
		 * snapshot reader must not then take the key for absent (lotus.c, settle_snapshot). */
		c.flags = REMORA_CVT_RECLAIMED;
		r->st->codec->encode(&t->geom, img, i, &c);
		codec_cvt_span(&t->geom, i, &at, &len);
		*rc = wr_dur(r, node, off + at, img + at, len);
		r->rep->locks_released += !*rc && !r->check;
	}
	return found;
}

static int sweep_table(struct lrcv *r, const struct store_table *t, uint16_t m)
{
	uint64_t cursor = 0, used;
	unsigned char *buf = malloc((size_t)CHUNK * t->geom.stride);
	int rc = buf ? rd(r, 0, t->ent.cursor_off, &cursor, 8) : -ENOMEM;

	used = cursor < t->ent.capacity ? cursor : t->ent.capacity;
	for (uint64_t first = 0; !rc && first < used; first += CHUNK) {
		uint64_t k = used - first < CHUNK ? used - first : CHUNK;

		rc = rd(r, m, store_rec_off(t, first), buf, (uint32_t)(k * t->geom.stride));
		for (uint64_t i = 0; !rc && i < k; i++)
			r->rep->locks += cvt_sweep(r, t, buf + i * t->geom.stride, m,
						   store_rec_off(t, first + i), &rc);
	}
	free(buf);
	return rc;
}

int lotus_recover_cluster(const struct store_db *st, struct remora_chan *ch, uint32_t flags,
			  struct recovery_report *rep, char *err, size_t errlen)
{
	struct lrcv r = { .st = st, .ch = ch, .rep = rep, .check = flags & REMORA_RECOVERY_CHECK };
	uint32_t stride = 0;
	int rc;

	for (unsigned i = 0; i < REMORA_MAX_TABLES; i++)
		if (store_table(st, i) && store_table(st, i)->geom.stride > stride)
			stride = store_table(st, i)->geom.stride;
	r.img = malloc(stride ? stride : 1);
	rc = r.img ? logs_all(&r, 0, (uint64_t)st->sb.max_cn * st->sb.coords_per_cn) : -ENOMEM;
	for (uint16_t m = 0; !rc && m < st->n_mn; m++)
		for (unsigned i = 0; !rc && i < REMORA_MAX_TABLES; i++)
			if (store_table(st, i))
				rc = sweep_table(&r, store_table(st, i), m);
	free(r.img);
	if (rc) {
		snprintf(err, errlen, "lotus recover: %s", remora_strerror(rc));
		return rc;
	}
	return motor_recover_cluster(st, ch, flags, rep, err, errlen);
}

/*
 * Online recovery of dead compute nodes while the others run (the watchdog fenced each, and
 * won its claim). Survivors scan its logs, not the store: each valid log of its coordinators
 * is decided as above, and a rolled-back transaction's INVISIBLE cells are reclaimed through
 * the log's entries. Its locks are not here to release: the survivors drop its coordinators'
 * holds from their own lock states once the claim is done (lotus_dead_drop), and the locks it
 * owned died with its lock table; its shards go to the live nodes (lotus_rs_take_dead). Cells it left INVISIBLE without any log copy (a
 * kill inside the doorbell that carries cells and log) stay: a writer under the key's lock
 * reuses them, and `remora recover` sweeps them (docs/lotus.md, "Online recovery").
 */
int lotus_recover_online(struct remora_db *db, const uint16_t *failed_cn, unsigned n)
{
	struct recovery_report own = { 0 };
	struct lrcv r = { .online = true };
	uint64_t per, t0 = now_ns();
	long ncn = strtol(cfg_param_env(REMORA_P_CN), NULL, 10);
	uint32_t stride = 0;
	int rc;

	if (!db || !failed_cn)
		return -EINVAL;
	r.st = &db->st;
	r.rep = db->online_rep ? db->online_rep : &own;
	per = db->st.sb.coords_per_cn;

	for (unsigned i = 0; i < REMORA_MAX_TABLES; i++)
		if (store_table(&db->st, i) && store_table(&db->st, i)->geom.stride > stride)
			stride = store_table(&db->st, i)->geom.stride;
	r.img = malloc(stride ? stride : 1);
	rc = r.img ? remora_chan_open(db->st.tp, &r.ch) : -ENOMEM;
	for (unsigned i = 0; !rc && i < n; i++)
		rc = failed_cn[i] < db->st.sb.max_cn ? logs_all(&r, failed_cn[i] * per, per) :
						       -EINVAL;
	r.rep->ns_logs += now_ns() - t0;
	for (unsigned i = 0; !rc && i < n && ncn > 1; i++)
		rc = lotus_rs_take_dead(&db->st, r.ch, failed_cn[i], (unsigned)ncn, txn_cn_gone());
	r.rep->locks_at_survivors = true;
	if (r.ch)
		remora_chan_close(r.ch);
	free(r.img);
	return rc;
}
