/* SPDX-License-Identifier: MIT */
/*
 * OOCC recovery after a whole-cluster crash (the recover op of the oocc plug-ins): redo logs
 * decide every transaction that may have been in flight (roll forward when any of its records
 * carries its version, else it aborted), then every log is invalidated and every lock released
 * (docs/oocc.md, "Recovery"). The log reading and invalidation are the shared log scan
 * (runtime/recovery/logscan.h), the lock release the shared sweep; only the decision differs
 * from the OCC core's (proto/occ/recover.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oocc.h"
#include "recovery/logscan.h"
#include "recovery/recovery.h"

/*
 * Verdicts (logscan.h), for a redo log: LOGSCAN_FINISHED, every replica carries the new
 * version; LOGSCAN_FORWARD, a record carries it: write the redo images; LOGSCAN_BACK, no record
 * carries it: aborted, nothing to write.
 */

struct rcv {
	struct store_db st;
	bool check;
	bool other_proves; /* an overwritten record proves the commit (not: a mutation) */
	struct logscan ls; /* the logs read, the verbs queued; the channel, report and error */
};

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
static int decide(void *ctx, struct logscan_log *l)
{
	struct rcv *r = ctx;
	const struct store_db *st = &r->st;
	bool proof = false, all_new = true; /* proof: a replica shows the commit decision */
	unsigned char *imgs = NULL;
	size_t at = 0;
	int rc;

	rc = logscan_read_replicas(&r->ls, l, &imgs);
	for (unsigned k = 0; !rc && k < l->n; k++) {
		const unsigned char *img;
		const struct store_log_ent *e = logscan_ent(l, k, &img);
		const struct store_table *t = logscan_ent_table(st, e);

		for (unsigned i = 0; i < st->replicas; i++, at += t->geom.stride) {
			struct logscan_img s = logscan_classify(st, t, e, imgs + at);

			proof |= s.s == LOGSCAN_NEW || (s.s == LOGSCAN_OTHER && r->other_proves);
			all_new &= (s.s == LOGSCAN_NEW && s.ok) || s.s == LOGSCAN_OTHER;
		}
	}
	l->verdict = all_new && proof ? LOGSCAN_FINISHED : proof ? LOGSCAN_FORWARD : LOGSCAN_BACK;
	free(imgs);
	return rc;
}

/* Rolls l forward: its redo image (lock 0) over every replica still at the old version. */
static int redo(void *ctx, struct logscan_log *l)
{
	struct rcv *r = ctx;

	/* Applied, or a later transaction's image: kept. */
	return logscan_restore(&r->ls, l, LOGSCAN_NEW, true, false, r->check);
}

static bool log_sane(const struct store_db *st, const struct logscan_log *l)
{
	for (unsigned k = 0; k < l->n; k++) {
		const unsigned char *img;

		if (!logscan_ent_table(st, logscan_ent(l, k, &img)))
			return false;
	}
	return true;
}

/* Marks the logs that name only real records; decides them, then redoes those to roll forward. */
static int decide_all(struct rcv *r)
{
	for (size_t i = 0; i < r->ls.nlogs; i++) {
		struct logscan_log *l = &r->ls.logs[i];

		l->verdict = log_sane(&r->st, l) ? LOGSCAN_BACK /* provisional */ : LOGSCAN_BAD;
	}
	return logscan_decide_all(&r->ls, decide, LOGSCAN_FORWARD, redo, r);
}

static int decide_all_ctx(void *r) { return decide_all(r); }

int oocc_recover_cluster(const struct store_db *st, struct remora_chan *ch, uint32_t flags,
			struct recovery_report *rep, char *err, size_t errlen)
{
	struct rcv *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return -ENOMEM;
	r->st = *st;
	r->check = flags & REMORA_RECOVERY_CHECK;
	r->other_proves = !recovery_mutated(MUT_OOCC_OTHER_NOT_PROOF);
	rc = logscan_init(&r->ls, &r->st, ch, rep, err, errlen);
	if (!rc)
		rc = logscan_recover_cluster(&r->ls, r->check, decide_all_ctx, r);
	logscan_fini(&r->ls);
	free(r);
	return rc;
}
