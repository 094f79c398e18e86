/* SPDX-License-Identifier: MIT */
/*
 * OCC recovery after a whole-cluster crash (the recover op of ford and pandora): undo logs
 * decide every transaction that may have been in flight, then every lock is released and
 * every log invalidated (runtime/recovery/recovery.h, and docs/recovery.md for why each rule
 * is safe). Everything goes through verbs, like format, so it runs from any process attached
 * to every memory node.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "occ.h"
#include "recovery/sweep.h"
#include "txn/ids.h"

#define RCV_CHUNK (1u << 20) /* bytes per READ of the log and record areas */
#define RCV_BATCH 256u       /* verbs per store_exec */

enum verdict {
	V_BAD,      /* names records that do not exist: left alone */
	V_FINISHED, /* the transaction had released its locks: nothing to do */
	V_FORWARD,  /* every replica carries the new image: keep it */
	V_BACK,     /* write the undo images */
};

/* One distinct logged transaction (its copies on several nodes are identical). */
struct rlog {
	uint64_t tx_id;
	uint32_t len;
	uint32_t n;
	unsigned char *rec; /* header and entries, as logged */
	enum verdict v;
};

/* One logged record, for finding the transaction that read another's version. */
struct rent {
	uint32_t table;
	uint32_t log;
	uint64_t off;
	uint64_t old_version;
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
	bool online;     /* one failed compute node, the others running: memory survived */
	bool lock_proof; /* online: only a log whose locks are all still held is live */
	struct recovery_report *rep;
	char *err;
	size_t errlen;
	struct rlog *logs;
	size_t nlogs, caplogs;
	struct rent *ents;
	size_t nents;
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

static int q_cas(struct rcv *r, uint16_t node, uint64_t off, uint64_t cmp, uint64_t swap,
		 uint64_t *old)
{
	struct remora_wr wr = store_wr_cas(&r->st, node, off, cmp, swap, old);

	return queue(r, &wr);
}

/* ---- step 1: read every log slot ------------------------------------------------------- */

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
static int log_valid(struct rcv *r, const unsigned char *p, uint64_t slot, uint32_t *n_out)
{
	const struct store_db *st = &r->st;
	struct store_log_hdr h;
	uint64_t csum, at;

	memcpy(&h, p, sizeof(h));
	if (!(h.flags & REMORA_STORE_LOG_VALID) || h.len < sizeof(h) ||
	    h.len > st->sb.log_slot_bytes || h.n == 0 || !slot_coord_fits(st, slot, h.coord))
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

/* Log slots [first, first + nslots) of node m. */
static int read_log_slots(struct rcv *r, uint16_t m, uint64_t first, uint64_t nslots)
{
	const struct store_sb *sb = &r->st.sb;
	uint64_t per = r->buflen / sb->log_slot_bytes;
	int rc;

	for (uint64_t s0 = first; s0 < first + nslots; s0 += per) {
		uint64_t k = first + nslots - s0 < per ? first + nslots - s0 : per;

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

static int read_logs_node(struct rcv *r, uint16_t m)
{
	return read_log_slots(r, m, 0, r->st.sb.log_bytes / r->st.sb.log_slot_bytes);
}

/* ---- step 2: decide every log ---------------------------------------------------------- */

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

static int ent_cmp(const void *a, const void *b)
{
	const struct rent *x = a, *y = b;

	if (x->table != y->table)
		return x->table < y->table ? -1 : 1;
	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	if (x->old_version != y->old_version)
		return x->old_version < y->old_version ? -1 : 1;
	return 0;
}

/* Lists every record of every well-formed log; marks the others bad. */
static int index_entries(struct rcv *r)
{
	size_t total = 0;

	for (size_t i = 0; i < r->nlogs; i++)
		total += r->logs[i].n;
	r->ents = calloc(total ? total : 1, sizeof(*r->ents));
	if (!r->ents)
		return rerr(r, -ENOMEM, "recover: out of memory");
	for (size_t i = 0; i < r->nlogs; i++) {
		struct rlog *l = &r->logs[i];
		size_t first = r->nents;

		for (unsigned k = 0; k < l->n; k++) {
			const unsigned char *img;
			const struct store_log_ent *e = log_ent(l, k, &img);

			if (!ent_table(&r->st, e)) {
				l->v = V_BAD;
				r->nents = first;
				break;
			}
			r->ents[r->nents++] = (struct rent){ .table = e->table, .log = (uint32_t)i,
							     .off = e->off,
							     .old_version = e->old_version };
			l->v = V_FORWARD; /* provisional: decided below */
		}
	}
	qsort(r->ents, r->nents, sizeof(*r->ents), ent_cmp);
	return 0;
}

/*
 * True when another logged transaction read the version l wrote on record (table, off): it
 * could lock that record only after l released it, and l releases only after every commit
 * WRITE acked. l's records may look half-written then, but by that later writer.
 */
static bool has_successor(const struct rcv *r, const struct rlog *l, uint32_t table, uint64_t off)
{
	struct rent key = { .table = table, .off = off, .old_version = l->tx_id };
	const struct rent *e = bsearch(&key, r->ents, r->nents, sizeof(key), ent_cmp);

	return e && &r->logs[e->log] != l;
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
 * Online, the memory survived, and with it the lock words: a log is live only while its
 * transaction holds every lock it logged (the lock value is in the log header). The log goes
 * out after every lock is taken, and a lock is released only by an abort before the log or
 * after every commit WRITE acked; the owner is fenced, so a held lock stays held. One lock
 * gone: the commit finished long ago (its log slot was never invalidated) and another
 * transaction may be writing the record now, so its images prove nothing. Also true while
 * the lock_proof is off (the online_no_lock_proof mutation): then the images alone decide.
 */
static int holds_all_locks(struct rcv *r, const struct rlog *l, bool *held)
{
	const struct store_db *st = &r->st;
	struct store_log_hdr h;
	uint64_t *words;
	int rc = 0;

	*held = true;
	if (!r->online || !r->lock_proof)
		return 0;
	memcpy(&h, l->rec, sizeof(h));
	words = calloc(l->n, sizeof(*words));
	if (!words)
		return rerr(r, -ENOMEM, "recover: out of memory");
	for (unsigned k = 0; !rc && k < l->n; k++) {
		const unsigned char *u;
		const struct store_log_ent *e = log_ent(l, k, &u);
		const struct store_table *t = ent_table(st, e);
		struct store_place pl;

		store_place(st, t, e->key, &pl);
		rc = q_read(r, pl.primary, e->off + t->geom.lock_off, &words[k], 8);
	}
	if (!rc)
		rc = flush(r);
	for (unsigned k = 0; !rc && k < l->n; k++)
		*held &= words[k] == h.lock;
	free(words);
	return rc;
}

/* True when some replica carries the new version but does not decode (a WRITE in flight?). */
static bool some_torn(const struct rcv *r, const struct rlog *l, const unsigned char *imgs)
{
	const struct store_db *st = &r->st;
	size_t at = 0;

	for (unsigned k = 0; k < l->n; k++) {
		const unsigned char *u;
		const struct store_log_ent *e = log_ent(l, k, &u);
		const struct store_table *t = ent_table(st, e);

		for (unsigned i = 0; i < st->replicas; i++, at += t->geom.stride) {
			struct rimg s = classify(st, t, e, imgs + at);

			if (s.s == S_NEW && !s.ok)
				return true;
		}
	}
	return false;
}

#define RCV_REREADS 4u /* online: READs of an image that does not decode before it counts torn */

/*
 * Decides l from its replicas' images as they were after the crash: every log is decided
 * before any undo image is written, so the outcome does not depend on the order of the logs.
 * Online, first the locks (holds_all_locks); an image that does not decode is read again,
 * since a READ may cross a WRITE of a live writer.
 */
static int decide(struct rcv *r, struct rlog *l)
{
	const struct store_db *st = &r->st;
	bool all_new = true, finished = false, held;
	unsigned char *imgs = NULL;
	size_t at = 0;
	int rc;

	rc = holds_all_locks(r, l, &held);
	if (!rc && !held) {
		l->v = V_FINISHED;
		return 0;
	}
	if (!rc)
		rc = read_replicas(r, l, &imgs);
	for (unsigned n = 1; !rc && r->online && n < RCV_REREADS && some_torn(r, l, imgs); n++) {
		free(imgs);
		imgs = NULL;
		rc = read_replicas(r, l, &imgs);
	}
	for (unsigned k = 0; !rc && k < l->n && !finished; k++) {
		const unsigned char *undo;
		const struct store_log_ent *e = log_ent(l, k, &undo);
		const struct store_table *t = ent_table(st, e);

		finished = has_successor(r, l, e->table, e->off);
		for (unsigned i = 0; i < st->replicas; i++, at += t->geom.stride) {
			struct rimg s = classify(st, t, e, imgs + at);

			finished |= s.s == S_OTHER;
			all_new &= s.s == S_NEW && s.ok;
		}
	}
	l->v = finished ? V_FINISHED : all_new ? V_FORWARD : V_BACK;
	free(imgs);
	return rc;
}

/*
 * Rolls l back: its undo image over every replica that does not hold it already. Never over
 * a later transaction's image (S_OTHER): that one committed, or holds the lock, after l.
 */
static int undo(struct rcv *r, struct rlog *l)
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
		const struct codec_geom *g = &t->geom;
		struct store_place pl;

		store_place(st, t, e->key, &pl);
		for (unsigned i = 0; !rc && i < st->replicas; i++, at += g->stride) {
			struct rimg s = classify(st, t, e, imgs + at);

			if ((s.s == S_OLD && s.ok) || s.s == S_OTHER)
				continue;
			r->rep->images_restored++;
			if (r->check)
				continue;
			/* The lock word stays as it is: step 4 releases it. */
			rc = q_write(r, store_replica(st, pl.primary, i),
				     e->off + g->write_off, img + g->write_off,
				     g->stride - g->write_off);
		}
	}
	if (!rc)
		rc = flush(r); /* the undo images live in l->rec, which outlives this */
	free(imgs);
	return rc;
}

static int decide_all(struct rcv *r)
{
	int rc = index_entries(r);

	for (size_t i = 0; !rc && i < r->nlogs; i++) {
		struct rlog *l = &r->logs[i];

		if (l->v == V_BAD) {
			r->rep->logs_bad++;
			continue;
		}
		rc = decide(r, l);
		r->rep->finished += l->v == V_FINISHED;
		r->rep->forward += l->v == V_FORWARD;
		r->rep->back += l->v == V_BACK;
	}
	for (size_t i = 0; !rc && i < r->nlogs; i++)
		if (r->logs[i].v == V_BACK)
			rc = undo(r, &r->logs[i]);
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
	free(r->ents);
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

int occ_recover_cluster(const struct store_db *st, struct remora_chan *ch, uint32_t flags,
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

/* ---- online: one failed compute node while the others run ------------------------------ */

/*
 * Publishes every coordinator id of cn in the failed-ids set of every node (CAS loops: other
 * recoveries may set bits of the same word), then in db's own copy. Written on every node
 * before any live compute node can rely on one copy: a reader that sees the bit on any node
 * sees a recovery that is complete.
 */
static int publish_failed(struct rcv *r, struct remora_db *db, uint16_t cn)
{
	uint16_t first = txn_coord_id(cn, 0), last = txn_coord_id(cn, r->st.sb.coords_per_cn - 1u);
	uint32_t block = 0;
	uint16_t inc = 0;
	int owned = txn_ids_owner(&r->st, r->ch, cn, &block, &inc);

	if (owned < 0)
		return owned;
	/* No open of cn holds a block (it closed cleanly, or never opened): no id of it can be
	 * on a lock, and the range by cn may be another live node's block. */
	if (!owned && !mut_on(db->mutations, MUT_IDS_BY_CN))
		return 0;
	if (owned) { /* cn's latest open took a block: those ids are the ones its locks carry */
		first = txn_ids_first(r->st.sb.coords_per_cn, block);
		last = (uint16_t)(first + r->st.sb.coords_per_cn - 1u);
	}

	for (uint32_t w = first >> 6; w <= (uint32_t)(last >> 6); w++) {
		uint64_t mask = 0;

		for (uint32_t id = first; id <= last; id++)
			if (id >> 6 == w)
				mask |= UINT64_C(1) << (id & 63);
		for (uint16_t m = 0; m < r->st.n_mn; m++) {
			uint64_t seen = 0, old = 0;
			int rc = q_read(r, m, occ_failed_word_off((uint16_t)(w << 6)), &seen, 8);

			if (!rc)
				rc = flush(r);
			while (!rc && (seen & mask) != mask) {
				rc = q_cas(r, m, occ_failed_word_off((uint16_t)(w << 6)), seen,
					   seen | mask, &old);
				if (!rc)
					rc = flush(r);
				seen = old == seen ? seen | mask : old;
			}
			if (rc)
				return rc;
		}
	}
	for (uint32_t id = first; id <= last; id++)
		if (owned)
			txn_set_failed_inc(db, (uint16_t)id, inc);
		else
			txn_set_failed(db, (uint16_t)id, true);
	return 0;
}

/*
 * Pandora's recovery of failed compute nodes while the rest run (section 3.3): the caller
 * fenced each of them on every memory node (their verbs no longer take effect) and made sure
 * it is the only one recovering them. For each: read its coordinators' log slots on every
 * node, decide every log as the whole-cluster recovery does (forward when every replica of
 * every write carries the new version, else back), write the undo images, invalidate the
 * logs; only then publish its coordinator ids as failed, so that live transactions steal its
 * locks with one CAS each. No lock scan. Rerunning it (the recovering process died) reads the
 * logs it left and ends in the same state. FORD has none: its reads ignore locks, so a FORD
 * reader may already have committed on a half-applied commit that an undo would revert.
 */
int occ_recover_online(struct remora_db *db, const uint16_t *failed_cn, unsigned n)
{
	struct recovery_report own = { 0 }, *rep = &own;
	struct rcv *r;
	uint64_t t0 = now_ns();
	int rc = 0;

	if (!db || !failed_cn)
		return -EINVAL;
	if (!db->proto || strcmp(db->proto->name, "pandora") != 0)
		return -EOPNOTSUPP;
	if (db->online_rep)
		rep = db->online_rep;
	for (unsigned i = 0; !rc && i < n; i++) {
		uint64_t per = db->st.sb.coords_per_cn;

		if (failed_cn[i] >= db->st.sb.max_cn)
			return -EINVAL;
		r = calloc(1, sizeof(*r));
		if (!r)
			return -ENOMEM;
		r->st = db->st;
		r->rep = rep;
		r->online = true;
		r->lock_proof = !mut_on(db->mutations, MUT_ONLINE_NO_LOCK_PROOF);
		rc = remora_chan_open(db->st.tp, &r->ch);
		if (!rc) {
			/* Fault points (REMORA_DIE_AT): a recovery killed after any step and run
			 * again ends as a clean run does (tests/recovery, online_rerun_*). */
			rc = rcv_init(r);
			for (uint16_t m = 0; !rc && m < r->st.n_mn; m++)
				rc = read_log_slots(r, m, failed_cn[i] * per, per);
			remora_fault_point("online.read");
			if (!rc)
				rc = decide_all(r);
			remora_fault_point("online.decided");
			if (!rc)
				rc = invalidate_logs(r);
			remora_fault_point("online.invalidated");
			rep->logs += r->nlogs;
			if (!rc && !mut_on(db->mutations, MUT_UNPUBLISHED_FAILURE))
				rc = publish_failed(r, db, failed_cn[i]);
			remora_fault_point("online.published");
			remora_chan_close(r->ch);
		}
		rcv_fini(r);
		free(r);
	}
	rep->ns_logs = now_ns() - t0;
	return rc;
}
