/* SPDX-License-Identifier: MIT */
/*
 * OOCC recovery after a whole-cluster crash (the recover op of the oocc plug-ins): redo logs
 * decide every transaction that may have been in flight (roll forward when any of its records
 * carries its version, else it aborted), then every log is invalidated and every lock released
 * (docs/oocc.md, "Recovery"). The log reading, invalidation and lock sweep follow the OCC
 * core's recovery (proto/occ/recover.c); only the decision differs.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "oocc.h"
#include "recovery/recovery.h"
#include "recovery/sweep.h"

#define RCV_CHUNK (1u << 20) /* bytes per READ of the log and record areas */
#define RCV_BATCH 256u       /* verbs per store_exec */

enum verdict {
	V_BAD,      /* names records that do not exist: left alone */
	V_FINISHED, /* every replica carries the new version: nothing to do */
	V_FORWARD,  /* a record carries the new version: write the redo images */
	V_BACK,     /* no record carries it: aborted, nothing to write */
};

/* One distinct logged transaction (its copies on several nodes are identical). */
struct rlog {
	uint64_t tx_id;
	uint32_t len;
	uint32_t n;
	unsigned char *rec; /* header and entries, as logged */
	enum verdict v;
};

/* Where a valid-looking log header lies, to invalidate it. */
struct rslot {
	uint16_t node;
	uint64_t off;
};

struct rcv {
	struct store_db st;
	struct remora_chan *ch;
	bool check;
	bool other_proves; /* an overwritten record proves the commit (not: a mutation) */
	struct recovery_report *rep;
	char *err;
	size_t errlen;
	struct rlog *logs;
	size_t nlogs, caplogs;
	struct rslot *slots;
	size_t nslots, capslots;
	struct remora_wr wrs[RCV_BATCH];
	unsigned nwr;
	unsigned char *buf; /* RCV_CHUNK bytes, or one log slot if larger */
	size_t buflen;
	unsigned char *scratch; /* one log slot: a record with its checksum field zeroed */
};

static int rerr(struct rcv *r, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int rerr(struct rcv *r, int code, const char *fmt, ...)
{
	va_list ap;

	if (r->err && r->errlen) {
		va_start(ap, fmt);
		vsnprintf(r->err, r->errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
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

/* ---- verbs ----------------------------------------------------------------------------- */

static int flush(struct rcv *r)
{
	int rc = store_exec(r->ch, r->wrs, r->nwr);

	r->nwr = 0;
	return rc ? rerr(r, rc, "recover: verbs failed: %s", remora_strerror(rc)) : 0;
}

static int queue(struct rcv *r, const struct remora_wr *wr)
{
	if (r->nwr == RCV_BATCH) {
		int rc = flush(r);

		if (rc)
			return rc;
	}
	r->wrs[r->nwr++] = *wr;
	return 0;
}

static int q_read(struct rcv *r, uint16_t node, uint64_t off, void *dst, uint32_t len)
{
	struct remora_wr wr = store_wr_read(&r->st, node, off, dst, len);

	return queue(r, &wr);
}

/* Recovery's writes are durable: the next step may rely on them after a power failure. */
static int q_write(struct rcv *r, uint16_t node, uint64_t off, const void *src, uint32_t len)
{
	struct remora_wr wr = store_wr_write(&r->st, node, off, src, len,
						    REMORA_WR_DURABLE);

	return queue(r, &wr);
}

/* ---- step 1: read every log slot ------------------------------------------------------- */

/* The coordinator id that owns log slot s (docs/engine.md, "Identifiers"). */
static uint16_t slot_coord(const struct store_db *st, uint64_t s)
{
	uint64_t cn = s / st->sb.coords_per_cn, local = s % st->sb.coords_per_cn;

	return (uint16_t)(cn * REMORA_STORE_COORD_SLOTS + 1 + local);
}

/* Checks a log record in place: 1 valid, 0 not (torn, stale header, foreign bytes). */
static int log_valid(struct rcv *r, const unsigned char *p, uint64_t slot, uint32_t *n_out)
{
	const struct store_db *st = &r->st;
	struct store_log_hdr h;
	uint64_t csum, at;

	memcpy(&h, p, sizeof(h));
	if (!(h.flags & REMORA_STORE_LOG_VALID) || h.len < sizeof(h) ||
	    h.len > st->sb.log_slot_bytes || h.n == 0 || h.coord != slot_coord(st, slot))
		return 0;
	/* The engine checksums header (csum field 0) and entries as one run of bytes. */
	csum = h.csum;
	h.csum = 0;
	memcpy(r->scratch, &h, sizeof(h));
	memcpy(r->scratch + sizeof(h), p + sizeof(h), h.len - sizeof(h));
	if (store_csum(REMORA_STORE_LOG_CSUM_SEED, r->scratch, h.len) != csum)
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

static int note_slot(struct rcv *r, uint16_t node, uint64_t off)
{
	struct rslot *s = grow(r->slots, &r->capslots, r->nslots + 1, sizeof(*s));

	if (!s)
		return rerr(r, -ENOMEM, "recover: out of memory");
	r->slots = s;
	s[r->nslots++] = (struct rslot){ .node = node, .off = off };
	return 0;
}

static int note_log(struct rcv *r, const unsigned char *p, uint32_t n)
{
	struct store_log_hdr h;
	struct rlog *l;

	memcpy(&h, p, sizeof(h));
	r->rep->log_copies++;
	for (size_t i = 0; i < r->nlogs; i++)
		if (r->logs[i].tx_id == h.tx_id)
			return 0; /* another copy: same transaction, same bytes (one WRITE) */
	l = grow(r->logs, &r->caplogs, r->nlogs + 1, sizeof(*l));
	if (!l)
		return rerr(r, -ENOMEM, "recover: out of memory");
	r->logs = l;
	l = &r->logs[r->nlogs];
	*l = (struct rlog){ .tx_id = h.tx_id, .len = h.len, .n = n, .rec = malloc(h.len) };
	if (!l->rec)
		return rerr(r, -ENOMEM, "recover: out of memory");
	memcpy(l->rec, p, h.len);
	r->nlogs++;
	return 0;
}

static int read_logs_node(struct rcv *r, uint16_t m)
{
	const struct store_sb *sb = &r->st.sb;
	uint64_t nslots = sb->log_bytes / sb->log_slot_bytes;
	uint64_t per = r->buflen / sb->log_slot_bytes;
	int rc;

	for (uint64_t s0 = 0; s0 < nslots; s0 += per) {
		uint64_t k = nslots - s0 < per ? nslots - s0 : per;

		rc = q_read(r, m, sb->log_off + s0 * sb->log_slot_bytes, r->buf,
			    (uint32_t)(k * sb->log_slot_bytes));
		if (!rc)
			rc = flush(r);
		if (rc)
			return rc;
		for (uint64_t i = 0; i < k; i++) {
			const unsigned char *p = r->buf + i * sb->log_slot_bytes;
			uint32_t flags, n = 0;

			r->rep->log_slots++;
			memcpy(&flags, p + offsetof(struct store_log_hdr, flags), 4);
			if (!(flags & REMORA_STORE_LOG_VALID))
				continue;
			rc = note_slot(r, m, sb->log_off + (s0 + i) * sb->log_slot_bytes);
			if (!rc)
				rc = log_valid(r, p, s0 + i, &n);
			if (rc == 1)
				rc = note_log(r, p, n);
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

/* ---- step 2: decide every log (redo) ------------------------------------------------- */

static const struct store_log_ent *log_ent(const struct rlog *l, unsigned i,
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

/* The table of a logged record, if the entry names a real record slot of a real table. */
static const struct store_table *ent_table(const struct store_db *st,
						  const struct store_log_ent *e)
{
	const struct store_table *t = store_table(st, e->table);

	if (!t || !store_rec_valid(t, e->off) || e->img_len != t->geom.stride ||
	    e->op < REMORA_STORE_LOG_UPD || e->op > REMORA_STORE_LOG_DEL)
		return NULL;
	return t;
}

enum rstate {
	S_OLD,   /* the logged old version: untouched by this transaction */
	S_NEW,   /* the logged new version */
	S_OTHER, /* neither: a later transaction wrote it */
};

struct rimg {
	enum rstate s;
	bool ok; /* decodes (checksum) and holds the logged key */
};

static struct rimg classify(const struct store_db *st, const struct store_table *t,
			    const struct store_log_ent *e, const unsigned char *img)
{
	struct codec_rec rec;
	struct rimg out;
	uint64_t ver;

	/* An aligned 8-byte word is never torn, even when the image around it is. */
	memcpy(&ver, img + t->geom.version_off, 8);
	out.s = ver == e->new_version ? S_NEW : ver == e->old_version ? S_OLD : S_OTHER;
	out.ok = st->codec->decode(&t->geom, img, 0, &rec) == 0 && rec.key == e->key &&
		 rec.table == e->table;
	return out;
}

/* Reads every replica of every record of l into imgs (n x replicas x stride each). */
static int read_replicas(struct rcv *r, struct rlog *l, unsigned char **imgs)
{
	const struct store_db *st = &r->st;
	size_t bytes = 0, at = 0;
	int rc;

	for (unsigned k = 0; k < l->n; k++) {
		const unsigned char *u;

		bytes += (size_t)st->replicas * ent_table(st, log_ent(l, k, &u))->geom.stride;
	}
	*imgs = malloc(bytes);
	if (!*imgs)
		return rerr(r, -ENOMEM, "recover: out of memory");
	for (unsigned k = 0; k < l->n; k++) {
		const unsigned char *u;
		const struct store_log_ent *e = log_ent(l, k, &u);
		const struct store_table *t = ent_table(st, e);
		struct store_place pl;

		store_place(st, t, e->key, &pl);
		for (unsigned i = 0; i < st->replicas; i++) {
			rc = q_read(r, store_replica(st, pl.primary, i), e->off, *imgs + at,
				    t->geom.stride);
			if (rc)
				return rc;
			at += t->geom.stride;
		}
	}
	return flush(r);
}

/*
 * Decides l from its replicas as they were after the crash. Commit WRITEs go out only after
 * the log and every lock upgrade acked, the lease ran out and validation passed, so a record
 * carrying the logged new version proves the transaction had decided to commit: roll forward.
 * So does a record a later transaction overwrote (neither old nor new): every logged record
 * was locked before the log went out, and while the log lives only a commit WRITE unlocks
 * one (an abort or a failure invalidates the log first, oocc.c unlog()). The commit WRITE of
 * one record may land, a later writer take it, and the crash come before the WRITE of the
 * next: that record is the only proof left. No record either way: the transaction never
 * started its commit WRITEs and never replied: aborted, nothing to write. Every replica new
 * or overwritten: finished.
 */
static int decide(struct rcv *r, struct rlog *l)
{
	const struct store_db *st = &r->st;
	bool proof = false, all_new = true; /* proof: a replica shows the commit decision */
	unsigned char *imgs = NULL;
	size_t at = 0;
	int rc;

	rc = read_replicas(r, l, &imgs);
	for (unsigned k = 0; !rc && k < l->n; k++) {
		const unsigned char *img;
		const struct store_log_ent *e = log_ent(l, k, &img);
		const struct store_table *t = ent_table(st, e);

		for (unsigned i = 0; i < st->replicas; i++, at += t->geom.stride) {
			struct rimg s = classify(st, t, e, imgs + at);

			proof |= s.s == S_NEW || (s.s == S_OTHER && r->other_proves);
			all_new &= (s.s == S_NEW && s.ok) || s.s == S_OTHER;
		}
	}
	l->v = all_new && proof ? V_FINISHED : proof ? V_FORWARD : V_BACK;
	free(imgs);
	return rc;
}

/* Rolls l forward: its redo image (lock 0) over every replica still at the old version. */
static int redo(struct rcv *r, struct rlog *l)
{
	const struct store_db *st = &r->st;
	unsigned char *imgs = NULL;
	size_t at = 0;
	int rc;

	rc = read_replicas(r, l, &imgs);
	for (unsigned k = 0; !rc && k < l->n; k++) {
		const unsigned char *img;
		const struct store_log_ent *e = log_ent(l, k, &img);
		const struct store_table *t = ent_table(st, e);
		struct store_place pl;

		store_place(st, t, e->key, &pl);
		for (unsigned i = 0; !rc && i < st->replicas; i++, at += t->geom.stride) {
			struct rimg s = classify(st, t, e, imgs + at);

			if ((s.s == S_NEW && s.ok) || s.s == S_OTHER)
				continue; /* applied, or a later transaction's image */
			r->rep->images_restored++;
			if (!r->check)
				rc = q_write(r, store_replica(st, pl.primary, i), e->off, img,
					     t->geom.stride);
		}
	}
	if (!rc)
		rc = flush(r);
	free(imgs);
	return rc;
}

static bool log_sane(const struct store_db *st, const struct rlog *l)
{
	for (unsigned k = 0; k < l->n; k++) {
		const unsigned char *img;

		if (!ent_table(st, log_ent(l, k, &img)))
			return false;
	}
	return true;
}

static int decide_all(struct rcv *r)
{
	int rc = 0;

	for (size_t i = 0; !rc && i < r->nlogs; i++) {
		struct rlog *l = &r->logs[i];

		if (!log_sane(&r->st, l)) {
			l->v = V_BAD;
			r->rep->logs_bad++;
			continue;
		}
		rc = decide(r, l);
		r->rep->finished += l->v == V_FINISHED;
		r->rep->forward += l->v == V_FORWARD;
		r->rep->back += l->v == V_BACK;
	}
	for (size_t i = 0; !rc && i < r->nlogs; i++)
		if (r->logs[i].v == V_FORWARD)
			rc = redo(r, &r->logs[i]);
	return rc;
}

/* ---- step 3: invalidate the logs ------------------------------------------------------- */

/* Zeroes every valid-looking log header; then one persist point per node, not per header. */
static int invalidate_logs(struct rcv *r)
{
	static const struct store_log_hdr zero;
	uint32_t nodes = 0;
	int rc;

	for (size_t i = 0; i < r->nslots; i++) {
		struct remora_wr wr = store_wr_write(&r->st, r->slots[i].node,
							    r->slots[i].off, &zero, sizeof(zero), 0);

		r->rep->logs_invalidated++;
		if (r->check)
			continue;
		nodes |= 1u << r->slots[i].node;
		rc = queue(r, &wr);
		if (rc)
			return rc;
	}
	rc = flush(r);
	for (uint16_t m = 0; !rc && m < r->st.n_mn; m++) {
		if (!(nodes & (1u << m)))
			continue;
		rc = remora_persist(r->ch, m, r->st.sb.log_off, r->st.sb.log_bytes);
		if (rc)
			rerr(r, rc, "recover: persisting the logs of node %u: %s", m,
			     remora_strerror(rc));
	}
	return rc;
}

/* ---- step 4: release every lock -------------------------------------------------------- */

static int release_locks(struct rcv *r)
{
	const struct sweep_cfg cfg = {
		.st = &r->st, .ch = r->ch, .check = r->check, .rep = r->rep,
		.buf = r->buf, .buflen = r->buflen, .err = r->err, .errlen = r->errlen,
	};

	return sweep_release_locks(&cfg);
}

/* ---- entry points ---------------------------------------------------------------------- */

static void rcv_fini(struct rcv *r)
{
	for (size_t i = 0; i < r->nlogs; i++)
		free(r->logs[i].rec);
	free(r->logs);
	free(r->slots);
	free(r->buf);
	free(r->scratch);
}

static int rcv_init(struct rcv *r)
{
	r->buflen = RCV_CHUNK > r->st.sb.log_slot_bytes ? RCV_CHUNK : r->st.sb.log_slot_bytes;
	r->buf = malloc(r->buflen);
	r->scratch = malloc(r->st.sb.log_slot_bytes);
	if (!r->buf || !r->scratch)
		return rerr(r, -ENOMEM, "recover: out of memory");
	return 0;
}

int oocc_recover_cluster(const struct store_db *st, struct remora_chan *ch, uint32_t flags,
			struct recovery_report *rep, char *err, size_t errlen)
{
	struct rcv *r;
	uint64_t t0 = now_ns(), t1;
	int rc;

	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->st = *st;
	r->ch = ch;
	r->rep = rep;
	r->err = err;
	r->errlen = errlen;
	r->check = flags & REMORA_RECOVERY_CHECK;
	r->other_proves = !recovery_mutated(MUT_OOCC_OTHER_NOT_PROOF);
	rc = rcv_init(r);
	for (uint16_t m = 0; !rc && m < r->st.n_mn; m++)
		rc = read_logs_node(r, m);
	if (!rc)
		rc = decide_all(r);
	if (!rc)
		rc = invalidate_logs(r);
	rep->logs = r->nlogs;
	t1 = now_ns();
	rep->ns_logs = t1 - t0;
	if (!rc)
		rc = release_locks(r);
	rep->ns_locks = now_ns() - t1;
	rcv_fini(r);
	free(r);
	return rc;
}
