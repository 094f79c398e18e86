/* SPDX-License-Identifier: MIT */
/*
 * OCC recovery after a whole-cluster crash (the recover op of ford and pandora): undo logs
 * decide every transaction that may have been in flight, then every lock is released and
 * every log invalidated (runtime/recovery/recovery.h, and docs/recovery.md for why each rule
 * is safe). Everything goes through verbs, like format, so it runs from any process attached
 * to every memory node.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "occ.h"
#include "recovery/logscan.h"
#include "recovery/recovery.h"
#include "txn/ids.h"

/*
 * Verdicts (logscan.h), for an undo log: LOGSCAN_FINISHED, the transaction had released its
 * locks; LOGSCAN_FORWARD, every replica carries the new image: keep it; LOGSCAN_BACK, write
 * the undo images.
 */

/* One logged record, for finding the transaction that read another's version. */
struct rent {
	uint32_t table;
	uint32_t log;
	uint64_t off;
	uint64_t old_version;
};

struct rcv {
	struct store_db st;
	struct remora_chan *ch;
	bool check;
	bool online;     /* one failed compute node, the others running: memory survived */
	bool lock_proof; /* online: only a log whose locks are all still held is live */
	bool forward_partial; /* the forward_partial mutation: some new image suffices */
	/* recover_paper_rule: the Pandora paper's rule, by version alone: a copy not at the logged
	 * old version counts as written by this log, whoever wrote it (decide and undo) */
	bool paper_rule;
	struct recovery_report *rep;
	char *err;
	size_t errlen;
	struct logscan ls; /* the logs read, the verbs queued */
	struct rent *ents;
	size_t nents;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
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

	for (size_t i = 0; i < r->ls.nlogs; i++)
		total += r->ls.logs[i].n;
	r->ents = calloc(total ? total : 1, sizeof(*r->ents));
	if (!r->ents)
		return logscan_err(&r->ls, -ENOMEM, "recover: out of memory");
	for (size_t i = 0; i < r->ls.nlogs; i++) {
		struct logscan_log *l = &r->ls.logs[i];
		size_t first = r->nents;

		for (unsigned k = 0; k < l->n; k++) {
			const unsigned char *img;
			const struct store_log_ent *e = logscan_ent(l, k, &img);

			if (!logscan_ent_table(&r->st, e)) {
				l->verdict = LOGSCAN_BAD;
				r->nents = first;
				break;
			}
			r->ents[r->nents++] = (struct rent){ .table = e->table, .log = (uint32_t)i,
							     .off = e->off,
							     .old_version = e->old_version };
			l->verdict = LOGSCAN_FORWARD; /* provisional: decided below */
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
static bool has_successor(const struct rcv *r, const struct logscan_log *l, uint32_t table,
			  uint64_t off)
{
	struct rent key = { .table = table, .off = off, .old_version = l->tx_id };
	const struct rent *e = bsearch(&key, r->ents, r->nents, sizeof(key), ent_cmp);

	return e && &r->ls.logs[e->log] != l;
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
static int holds_all_locks(struct rcv *r, const struct logscan_log *l, bool *held)
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
		return logscan_err(&r->ls, -ENOMEM, "recover: out of memory");
	for (unsigned k = 0; !rc && k < l->n; k++) {
		const unsigned char *u;
		const struct store_log_ent *e = logscan_ent(l, k, &u);
		const struct store_table *t = logscan_ent_table(st, e);
		struct store_place pl;

		store_place(st, t, e->key, &pl);
		rc = logscan_read(&r->ls, pl.primary, e->off + t->geom.lock_off, &words[k], 8);
	}
	if (!rc)
		rc = logscan_flush(&r->ls);
	for (unsigned k = 0; !rc && k < l->n; k++) {
		const unsigned char *u;
		const struct store_log_ent *e = logscan_ent(l, k, &u);
		struct store_place pl;

		/* A lock taken on a primary that failed over went with it (backups carry no lock
		 * word): that entry proves nothing, and the images decide. */
		store_place(st, logscan_ent_table(st, e), e->key, &pl);
		if (!store_node_dead(st, store_home(st, pl.bucket)))
			*held &= words[k] == h.lock;
	}
	free(words);
	return rc;
}

/* True when some replica carries the new version but does not decode (a WRITE in flight?). */
static bool some_torn(const struct rcv *r, const struct logscan_log *l, const unsigned char *imgs)
{
	const struct store_db *st = &r->st;
	size_t at = 0;

	for (unsigned k = 0; k < l->n; k++) {
		const unsigned char *u;
		const struct store_log_ent *e = logscan_ent(l, k, &u);
		const struct store_table *t = logscan_ent_table(st, e);

		for (unsigned i = 0; i < st->replicas; i++, at += t->geom.stride) {
			struct logscan_img s = logscan_classify(st, t, e, imgs + at);

			if (s.s == LOGSCAN_NEW && !s.ok)
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
static int decide(void *ctx, struct logscan_log *l)
{
	struct rcv *r = ctx;
	const struct store_db *st = &r->st;
	bool all_new = true, any_new = false, finished = false, held;
	unsigned char *imgs = NULL;
	size_t at = 0;
	int rc;

	rc = holds_all_locks(r, l, &held);
	if (!rc && !held) {
		l->verdict = LOGSCAN_FINISHED;
		return 0;
	}
	if (!rc)
		rc = logscan_read_replicas(&r->ls, l, &imgs);
	for (unsigned n = 1; !rc && r->online && n < RCV_REREADS && some_torn(r, l, imgs); n++) {
		free(imgs);
		imgs = NULL;
		rc = logscan_read_replicas(&r->ls, l, &imgs);
	}
	for (unsigned k = 0; !rc && k < l->n && !finished; k++) {
		const unsigned char *undo;
		const struct store_log_ent *e = logscan_ent(l, k, &undo);
		const struct store_table *t = logscan_ent_table(st, e);

		finished = !r->paper_rule && has_successor(r, l, e->table, e->off);
		for (unsigned i = 0; i < st->replicas; i++, at += t->geom.stride) {
			struct logscan_img s = logscan_classify(st, t, e, imgs + at);

			if (r->paper_rule && s.s == LOGSCAN_OTHER)
				s.s = LOGSCAN_NEW; /* "updated": not the logged old version */
			finished |= s.s == LOGSCAN_OTHER;
			all_new &= s.s == LOGSCAN_NEW && s.ok;
			any_new |= s.s == LOGSCAN_NEW && s.ok;
		}
	}
	all_new |= r->forward_partial && any_new;
	l->verdict = finished ? LOGSCAN_FINISHED : all_new ? LOGSCAN_FORWARD : LOGSCAN_BACK;
	free(imgs);
	return rc;
}

/*
 * Rolls l back: its undo image over every replica that does not hold it already. Never over
 * a later transaction's image (LOGSCAN_OTHER): that one committed, or holds the lock, after l.
 * (Under recover_paper_rule it does: the paper's "roll back any updated objects".)
 */
static int undo(void *ctx, struct logscan_log *l)
{
	struct rcv *r = ctx;

	/* The lock word stays as it is: step 4 releases it. */
	return logscan_restore(&r->ls, l, LOGSCAN_OLD, !r->paper_rule, true, r->check);
}

static int decide_all(struct rcv *r)
{
	int rc = index_entries(r);

	return rc ? rc : logscan_decide_all(&r->ls, decide, LOGSCAN_BACK, undo, r);
}

static int decide_all_ctx(void *r) { return decide_all(r); }

int occ_recover_cluster(const struct store_db *st, struct remora_chan *ch, uint32_t flags,
			struct recovery_report *rep, char *err, size_t errlen)
{
	struct rcv *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return -ENOMEM;
	r->st = *st;
	r->ch = ch;
	r->rep = rep;
	r->err = err;
	r->errlen = errlen;
	r->check = flags & REMORA_RECOVERY_CHECK;
	r->paper_rule = recovery_mutated(MUT_RECOVER_PAPER_RULE);
	rc = logscan_init(&r->ls, &r->st, r->ch, r->rep, r->err, r->errlen);
	if (!rc)
		rc = logscan_recover_cluster(&r->ls, r->check, decide_all_ctx, r);
	logscan_fini(&r->ls);
	free(r->ents);
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
			int rc;

			if (store_node_dead(&r->st, m))
				continue;
			rc = logscan_read(&r->ls, m, occ_failed_word_off((uint16_t)(w << 6)),
					      &seen, 8);

			if (!rc)
				rc = logscan_flush(&r->ls);
			while (!rc && (seen & mask) != mask) {
				rc = logscan_cas(&r->ls, m, occ_failed_word_off((uint16_t)(w << 6)),
						 seen, seen | mask, &old);
				if (!rc)
					rc = logscan_flush(&r->ls);
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
		r->forward_partial = mut_on(db->mutations, MUT_FORWARD_PARTIAL);
		r->paper_rule = mut_on(db->mutations, MUT_RECOVER_PAPER_RULE);
		rc = remora_chan_open(db->st.tp, &r->ch);
		if (!rc) {
			/* Fault points (REMORA_DIE_AT): a recovery killed after any step and run
			 * again ends as a clean run does (tests/recovery, online_rerun_*). */
			rc = logscan_init(&r->ls, &r->st, r->ch, r->rep, r->err, r->errlen);
			/* a failed-over node's log copies are gone: f+1 copies leave one live */
			for (uint16_t m = 0; !rc && m < r->st.n_mn; m++)
				if (!store_node_dead(&r->st, m) ||
				    mut_on(db->mutations, MUT_MNF_RECOVER_READS_DEAD))
					rc = logscan_read_slots(&r->ls, m, failed_cn[i] * per, per);
			remora_fault_point("online.read");
			if (!rc)
				rc = decide_all(r);
			remora_fault_point("online.decided");
			if (!rc)
				rc = logscan_invalidate(&r->ls, r->check);
			remora_fault_point("online.invalidated");
			rep->logs += r->ls.nlogs;
			if (!rc && !mut_on(db->mutations, MUT_UNPUBLISHED_FAILURE))
				rc = publish_failed(r, db, failed_cn[i]);
			remora_fault_point("online.published");
			remora_chan_close(r->ch);
		}
		logscan_fini(&r->ls);
		free(r->ents);
		free(r);
	}
	rep->ns_logs = now_ns() - t0;
	return rc;
}
