/* SPDX-License-Identifier: MIT */
/*
 * Recovery after a whole-cluster crash (runtime/recovery), in one test process: the test is
 * the memory nodes (pools on this process's transport) and a tool; each transaction runs in a
 * forked compute node that kills itself at a named protocol point (REMORA_DIE_AT) or at its
 * Nth verb (REMORA_DIE_AT_VERB). Then recovery_run() and exact checks:
 *
 *   - the outcome at each point: NotLogged and logged-but-unwritten transactions leave the
 *     data as it was, a partly written commit is rolled back, a commit whose WRITEs all
 *     landed is rolled forward; every lock is released, every log invalidated;
 *   - at every verb of a transfer: all or nothing, money conserved, no lock left;
 *   - recovery run twice leaves the pools byte for byte as after the first run;
 *   - recovery killed halfway and run again ends as a clean run does;
 *   - logs of finished transactions are never rolled back (the engine leaves committed logs
 *     valid), also when a later writer's half-written image sits on the record;
 *   - inserts and deletes of pandora are undone;
 *   - the memory node's pool check refuses bad superblocks, and recovery refuses pools
 *     without a database.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <remora/tx.h>

#include "../txn/ttx.h"
#include "recovery/recovery.h"
#include "store/store.h"
#include "txn/ids.h"
#include "txn/proto/occ/occ.h"
#include "txn/txn.h"

#define NMN 3
#define ACCOUNTS 8u
#define START 100u

static struct ttx T;

static void fini(void)
{
	ttx_fini();
}

TestSuite(recovery, .fini = fini, .timeout = 120);

/* ---- the compute node that crashes ------------------------------------------------------ */

enum op {
	OP_TRANSFER, /* 0 -= amount, 1 += amount, 2 rewritten (a third commit WRITE) */
	OP_INSERT,   /* insert key 100 + amount, 0 -= amount */
	OP_DELETE,   /* delete key 3, 0 += its balance */
};

struct child_arg {
	const char *proto;
	uint16_t cn;
	enum op op;
	uint64_t amount;
	const char *die_at;   /* REMORA_DIE_AT, or NULL */
	uint64_t die_verb;    /* REMORA_DIE_AT_VERB, or 0 */
	bool report_verbs;    /* send the verb count before and after the transaction */
};

static uint64_t verbs_total(struct remora_transport *tp)
{
	struct remora_counters c;
	uint64_t n = 0;

	remora_transport_counters(tp, &c);
	for (unsigned op = 0; op < REMORA_OP__COUNT; op++)
		n += remora_counters_total(&c, op);
	return n;
}

static int run_op(struct remora_worker *w, const struct child_arg *a)
{
	struct remora_tx *tx;
	uint64_t v0, v;
	int rc;

	rc = remora_tx_begin(w, 0, &tx);
	if (rc)
		return rc;
	rc = remora_tx_read_for_update(tx, 0, 0, &v0);
	switch (a->op) {
	case OP_TRANSFER:
		if (!rc)
			rc = remora_tx_read_for_update(tx, 0, 1, &v);
		if (!rc)
			rc = remora_tx_write(tx, 0, 0, &(uint64_t){ v0 - a->amount });
		if (!rc)
			rc = remora_tx_write(tx, 0, 1, &(uint64_t){ v + a->amount });
		if (!rc)
			rc = remora_tx_read_for_update(tx, 0, 2, &v);
		if (!rc)
			rc = remora_tx_write(tx, 0, 2, &v);
		break;
	case OP_INSERT:
		if (!rc)
			rc = remora_tx_insert(tx, 0, 100 + a->amount, &a->amount);
		if (!rc)
			rc = remora_tx_write(tx, 0, 0, &(uint64_t){ v0 - a->amount });
		break;
	case OP_DELETE:
		if (!rc)
			rc = remora_tx_read_for_update(tx, 0, 3, &v);
		if (!rc)
			rc = remora_tx_delete(tx, 0, 3);
		if (!rc)
			rc = remora_tx_write(tx, 0, 0, &(uint64_t){ v0 + v });
		break;
	}
	if (rc) {
		remora_tx_abort(tx);
		return rc;
	}
	return remora_tx_commit(tx);
}

static int crash_child(void *p, int rd, int wr)
{
	const struct child_arg *a = p;
	struct remora_db_cfg cfg = { .size = sizeof(cfg), .protocol = a->proto, .cn_id = a->cn,
				     .n_mn = NMN, .workers = 1, .coords_per_worker = 1 };
	struct remora_transport *tp;
	struct remora_worker *w;
	struct remora_db *db;
	char verb[32];
	int rc;

	(void)rd;
	snprintf(verb, sizeof(verb), "%llu", (unsigned long long)a->die_verb);
	setenv("REMORA_DIE_AT", a->die_at ? a->die_at : "", 1);
	setenv("REMORA_DIE_AT_VERB", a->die_verb ? verb : "", 1);
	rc = tu_transport_try(a->cn, NULL, &tp);
	TU_CHILD_CHECK(rc == 0, "transport: %s", remora_strerror(rc));
	for (unsigned m = 0; m < NMN; m++) {
		rc = remora_transport_attach(tp, &T.tu.mn[m].desc);
		TU_CHILD_CHECK(rc == 0, "attach %u: %s", m, remora_strerror(rc));
	}
	cfg.tp = tp;
	rc = remora_db_open(&cfg, &db);
	TU_CHILD_CHECK(rc == 0, "db open: %s", remora_db_errmsg(NULL));
	rc = remora_worker_create(db, 0, &w);
	TU_CHILD_CHECK(rc == 0, "worker: %s", remora_strerror(rc));
	if (a->report_verbs)
		TU_CHILD_CHECK(tu_send(wr, verbs_total(tp)) == 0, "pipe");
	rc = run_op(w, a);
	TU_CHILD_CHECK(rc == 0, "transaction: %s (%s)", remora_strerror(rc),
		       remora_worker_errmsg(w));
	if (a->report_verbs)
		TU_CHILD_CHECK(tu_send(wr, verbs_total(tp)) == 0, "pipe");
	remora_worker_destroy(w);
	remora_db_close(db);
	remora_transport_close(tp);
	return 0;
}

/* Runs the child to its end or its death; returns its exit code (128 + 9 when it died). */
static int run_child(const struct child_arg *a)
{
	struct tu_proc p;

	tu_spawn(&p, crash_child, (void *)a);
	return tu_proc_wait(&p);
}

/* ---- the test's side: pools, store, recovery --------------------------------------------- */

static const char *open_failed_locks; /* remora_db_cfg.failed_locks of open_db, or NULL */

static void open_db(const char *proto)
{
	struct ttx_opts o = { .protocol = proto, .nmn = NMN, .replicas = NMN,
			      .failed_locks = open_failed_locks };

	ttx_open(&T, &o);
	for (uint64_t k = 0; k < ACCOUNTS; k++)
		cr_assert_eq(remora_db_load(T.w[0], 0, k, &(uint64_t){ START }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
}

static struct recovery_report recover(uint32_t flags)
{
	struct recovery_cfg cfg = { .size = sizeof(cfg), .flags = flags, .n_mn = NMN };
	struct recovery_report rep;
	char err[256] = "";
	int rc = recovery_run(T.tu.tp, &cfg, &rep, err, sizeof(err));

	cr_assert_eq(rc, 0, "recovery: %s (%s)", remora_strerror(rc), err);
	return rep;
}

/* Recovered: no valid log, no held lock, no torn record. */
static void assert_clean(void)
{
	struct recovery_report r = recover(REMORA_RECOVERY_CHECK);

	cr_assert_eq(r.log_copies, 0, "%llu valid log copies remain",
		     (unsigned long long)r.log_copies);
	cr_assert_eq(r.locks, 0, "%llu locks remain", (unsigned long long)r.locks);
	cr_assert_eq(r.torn, 0, "%llu torn records", (unsigned long long)r.torn);
}

static uint64_t get(uint64_t key)
{
	uint64_t v = UINT64_MAX;
	int rc = ttx_get(&T, 0, 0, key, &v);

	return rc == 0 ? v : UINT64_MAX;
}

static uint64_t total(void)
{
	uint64_t s = 0;

	for (uint64_t k = 0; k < ACCOUNTS; k++)
		if (get(k) != UINT64_MAX)
			s += get(k);
	return s;
}

/* The primary lock word of key (the record is at the same offset on every node). */
static uint64_t lock_word(uint64_t key)
{
	const struct store_db *st = &T.db->st;
	const struct store_table *t = store_table(st, 0);
	struct store_place pl;
	uint64_t off = 0, w;

	store_place(st, t, key, &pl);
	for (uint64_t b = pl.bucket; !off; b = store_next_bucket(st, t, b)) {
		const struct store_bucket *bk =
			(const void *)(T.tu.mn[pl.primary].base + store_bucket_off(t, b));

		for (unsigned s = 0; s < REMORA_STORE_BUCKET_SLOTS && !off; s++) {
			uint64_t slot = bk->slot[s], o = slot & REMORA_STORE_SLOT_OFF_MASK;
			uint64_t k;

			cr_assert_neq(slot, 0, "key %llu not in the index",
				      (unsigned long long)key);
			struct codec_rec rec;

			k = st->codec->decode(&t->geom, T.tu.mn[pl.primary].base + o, 0, &rec) == 0 ?
				    rec.key : UINT64_MAX;
			if (k == key)
				off = o;
		}
	}
	memcpy(&w, T.tu.mn[pl.primary].base + off + t->geom.lock_off, 8);
	return w;
}

/* ---- named crash points ------------------------------------------------------------------ */

struct point_case {
	const char *point;
	bool forward;       /* the commit's writes all landed: recovery keeps them */
	bool logged;        /* a log exists */
	bool some_written;  /* some replica carries the new image: undo images are written */
};

static const struct point_case point_cases[] = {
	{ "txn.locked", false, false, false },
	{ "txn.logged", false, true, false },
	{ "txn.commit_write", false, true, false },
	{ "txn.commit_mid", false, true, true },
	{ "txn.unlock", true, true, true },
};

static void crash_points(const char *proto)
{
	for (size_t i = 0; i < sizeof(point_cases) / sizeof(point_cases[0]); i++) {
		const struct point_case *c = &point_cases[i];
		struct child_arg a = { .proto = proto, .cn = 1, .op = OP_TRANSFER, .amount = 7,
				       .die_at = c->point };
		struct recovery_report r;
		uint64_t before[3];

		open_db(proto);
		cr_assert_eq(run_child(&a), 128 + 9, "%s: the compute node did not die there",
			     c->point);
		cr_assert_neq(lock_word(0), 0, "%s: account 0 is not locked after the crash",
			      c->point);
		r = recover(0);
		cr_assert_eq(r.logs > 0, c->logged, "%s: %llu logs", c->point,
			     (unsigned long long)r.logs);
		cr_assert_eq(r.forward, c->forward ? 1 : 0, "%s: forward %llu", c->point,
			     (unsigned long long)r.forward);
		cr_assert_eq(r.back, c->logged && !c->forward ? 1 : 0, "%s: back %llu", c->point,
			     (unsigned long long)r.back);
		cr_assert_eq(r.images_restored > 0, c->some_written && !c->forward,
			     "%s: %llu undo images", c->point,
			     (unsigned long long)r.images_restored);
		cr_assert_geq(r.locks_released, 1, "%s: %llu locks released", c->point,
			      (unsigned long long)r.locks_released);
		assert_clean();
		for (unsigned k = 0; k < 3; k++)
			before[k] = get(k);
		cr_assert_eq(before[0], c->forward ? START - 7 : START, "%s: account 0 = %llu",
			     c->point, (unsigned long long)before[0]);
		cr_assert_eq(before[1], c->forward ? START + 7 : START, "%s", c->point);
		cr_assert_eq(total(), ACCOUNTS * START, "%s: money not conserved", c->point);
		ttx_close(&T);
	}
}

Test(recovery, crash_points_pandora) { crash_points("pandora"); }
Test(recovery, crash_points_ford) { crash_points("ford"); }

/* ---- every verb of a transfer ------------------------------------------------------------- */

static void every_verb(const char *proto)
{
	struct child_arg a = { .proto = proto, .cn = 1, .op = OP_TRANSFER, .amount = 1,
			       .report_verbs = true };
	uint64_t from = 0, to = 0, expect0 = START, fwd = 0, back = 0;
	struct tu_proc p;

	open_db(proto);
	/* A dry run tells where the transaction's verbs start and end. */
	tu_spawn(&p, crash_child, &a);
	cr_assert_eq(tu_recv(p.rd, &from), 0);
	cr_assert_eq(tu_recv(p.rd, &to), 0);
	cr_assert_eq(tu_proc_wait(&p), 0);
	expect0 -= 1;
	cr_assert_gt(to, from + 8, "a transfer takes %llu verbs", (unsigned long long)(to - from));
	a.report_verbs = false;
	for (uint64_t n = from + 1; n <= to; n++) {
		struct recovery_report r;
		uint64_t v0;

		a.die_verb = n;
		cr_assert_eq(run_child(&a), 128 + 9, "verb %llu: no crash",
			     (unsigned long long)n);
		r = recover(0);
		fwd += r.forward;
		back += r.back;
		assert_clean();
		v0 = get(0);
		cr_assert(v0 == expect0 || v0 == expect0 - 1, "verb %llu: account 0 = %llu",
			  (unsigned long long)n, (unsigned long long)v0);
		cr_assert_eq(get(1), START + (START - v0), "verb %llu: not all or nothing",
			     (unsigned long long)n);
		cr_assert_eq(total(), ACCOUNTS * START, "verb %llu: money not conserved",
			     (unsigned long long)n);
		expect0 = v0;
	}
	/* The crash points cover both outcomes. */
	cr_assert_gt(back, 0);
	cr_assert_gt(fwd, 0);
	ttx_close(&T);
}

/*
 * OOCC (redo log, the commit WRITE unlocks): a log whose transaction wrote no record is an
 * abort (nothing written back); one with some record at its new version rolls forward.
 */
static const struct point_case oocc_cases[] = {
	{ "txn.locked", false, false, false },
	{ "txn.logged", false, true, false },
	{ "txn.commit_write", false, true, false },
	{ "txn.commit_mid", true, true, true },
	{ "txn.unlock", true, true, true },
};

Test(recovery, crash_points_oocc)
{
	for (size_t i = 0; i < sizeof(oocc_cases) / sizeof(oocc_cases[0]); i++) {
		const struct point_case *c = &oocc_cases[i];
		struct child_arg a = { .proto = "oocc", .cn = 1, .op = OP_TRANSFER, .amount = 7,
				       .die_at = c->point };
		struct recovery_report r;
		bool mid = !strcmp(c->point, "txn.commit_mid");

		open_db("oocc");
		cr_assert_eq(run_child(&a), 128 + 9, "%s: the compute node did not die there",
			     c->point);
		r = recover(0);
		cr_assert_eq(r.logs > 0, c->logged, "%s: %llu logs", c->point,
			     (unsigned long long)r.logs);
		cr_assert_eq(r.forward, mid ? 1 : 0, "%s: forward %llu", c->point,
			     (unsigned long long)r.forward);
		cr_assert_eq(r.finished, c->forward && !mid ? 1 : 0, "%s: finished", c->point);
		cr_assert_eq(r.back, c->logged && !c->forward ? 1 : 0, "%s: aborted %llu",
			     c->point, (unsigned long long)r.back);
		cr_assert_eq(r.images_restored > 0, mid, "%s: %llu redo images", c->point,
			     (unsigned long long)r.images_restored);
		assert_clean();
		cr_assert_eq(get(0), c->forward ? START - 7 : START, "%s: account 0 = %llu",
			     c->point, (unsigned long long)get(0));
		cr_assert_eq(get(1), c->forward ? START + 7 : START, "%s", c->point);
		cr_assert_eq(total(), ACCOUNTS * START, "%s: money not conserved", c->point);
		ttx_close(&T);
	}
}

/*
 * OOCC's commit WRITE of a record also unlocks it. The compute node dies at txn.commit_mid:
 * account 0's WRITE landed (its primary is unlocked and new), 1's and 2's did not. A later
 * transaction then overwrites account 0, so no record carries the logged new version any
 * more. The overwritten record itself must prove the commit (only a commit WRITE unlocks a
 * logged record while its log lives): recovery rolls forward and account 1 gets its 7.
 * Returns account 1 after recovery; the oocc_other_not_proof mutation decides "aborted".
 */
static uint64_t overwritten_mid_commit(const char *mutation)
{
	struct child_arg a = { .proto = "oocc", .cn = 1, .op = OP_TRANSFER, .amount = 7,
			       .die_at = "txn.commit_mid" };
	struct recovery_report r;
	uint64_t got;

	open_db("oocc");
	cr_assert_eq(run_child(&a), 128 + 9, "the compute node did not die at txn.commit_mid");
	ttx_put(&T, 0, 0, 0, 500); /* the later writer takes the unlocked account 0 */
	if (mutation)
		setenv("REMORA_MUTATE", mutation, 1);
	r = recover(0);
	unsetenv("REMORA_MUTATE");
	cr_assert_eq(r.logs, 2, "%llu logs (the dead one's, the later writer's)",
		     (unsigned long long)r.logs);
	assert_clean();
	cr_assert_eq(get(0), 500, "the later writer's account 0 = %llu",
		     (unsigned long long)get(0));
	cr_assert_eq(get(2), START);
	got = get(1);
	ttx_close(&T);
	return got;
}

Test(recovery, overwritten_mid_commit_oocc)
{
	cr_assert_eq(overwritten_mid_commit(NULL), START + 7, "account 1 lost its half");
}

Test(recovery, overwritten_mid_commit_oocc_mutated)
{
	cr_assert_eq(overwritten_mid_commit("oocc_other_not_proof"), START);
}

Test(recovery, every_verb_oocc) { every_verb("oocc"); }
Test(recovery, every_verb_pandora) { every_verb("pandora"); }
Test(recovery, every_verb_ford) { every_verb("ford"); }

/* ---- idempotence --------------------------------------------------------------------------- */

static uint8_t *snapshot(void)
{
	uint64_t n = T.tu.mn[0].bytes;
	uint8_t *s = malloc(NMN * n);

	cr_assert_not_null(s);
	for (unsigned m = 0; m < NMN; m++)
		memcpy(s + m * n, T.tu.mn[m].base, n);
	return s;
}

static bool same_as(const uint8_t *s)
{
	uint64_t n = T.tu.mn[0].bytes;

	for (unsigned m = 0; m < NMN; m++)
		if (memcmp(s + m * n, T.tu.mn[m].base, n))
			return false;
	return true;
}

Test(recovery, twice_is_once)
{
	struct child_arg a = { .proto = "pandora", .cn = 1, .op = OP_TRANSFER, .amount = 3,
			       .die_at = "txn.commit_mid" };
	struct recovery_report r;
	uint8_t *s;

	open_db("pandora");
	cr_assert_eq(run_child(&a), 128 + 9);
	r = recover(0);
	cr_assert_eq(r.back, 1);
	s = snapshot();
	r = recover(0);
	cr_assert_eq(r.logs + r.locks + r.images_restored + r.logs_invalidated, 0);
	cr_assert(same_as(s), "a second recovery changed the pools");
	free(s);
	ttx_close(&T);
}

/* Recovery itself dies at its kth verb; a second recovery ends where a clean one does. */
struct rec_arg {
	uint64_t die_verb;
};

static int recover_child(void *p, int rd, int wr)
{
	const struct rec_arg *a = p;
	struct recovery_cfg cfg = { .size = sizeof(cfg), .n_mn = NMN };
	struct recovery_report rep;
	struct remora_transport *tp;
	char verb[32], err[256];
	int rc;

	(void)rd, (void)wr;
	snprintf(verb, sizeof(verb), "%llu", (unsigned long long)a->die_verb);
	setenv("REMORA_DIE_AT_VERB", verb, 1);
	rc = tu_transport_try(-1, NULL, &tp);
	TU_CHILD_CHECK(rc == 0, "transport: %s", remora_strerror(rc));
	for (unsigned m = 0; m < NMN; m++)
		TU_CHILD_CHECK(remora_transport_attach(tp, &T.tu.mn[m].desc) == 0, "attach");
	rc = recovery_run(tp, &cfg, &rep, err, sizeof(err));
	TU_CHILD_CHECK(rc == 0, "%s", err);
	remora_transport_close(tp);
	return 0;
}

Test(recovery, killed_recovery_reruns)
{
	unsigned died = 0;

	for (uint64_t k = 2; k < 60; k += 3) {
		struct child_arg a = { .proto = "pandora", .cn = 1, .op = OP_TRANSFER,
				       .amount = 5, .die_at = "txn.commit_mid" };
		struct rec_arg ra = { .die_verb = k };
		struct tu_proc p;
		int st;

		open_db("pandora");
		cr_assert_eq(run_child(&a), 128 + 9);
		tu_spawn(&p, recover_child, &ra);
		st = tu_proc_wait(&p);
		cr_assert(st == 0 || st == 128 + 9, "recovery child: exit %d", st);
		died += st != 0;
		recover(0);
		assert_clean();
		cr_assert_eq(get(0), START, "k %llu", (unsigned long long)k);
		cr_assert_eq(get(1), START);
		cr_assert_eq(total(), ACCOUNTS * START);
		ttx_close(&T);
	}
	cr_assert_gt(died, 3, "recovery was killed only %u times", died);
}

/* ---- logs of finished transactions ---------------------------------------------------------- */

/*
 * T1 (compute node 1) commits, then T2 and T3 (compute node 0, one coordinator: T3's log
 * replaces T2's) write the same records. T1's log stays valid but names versions that are
 * gone: it must be left alone, not rolled back over T3.
 */
static void finished_logs(const char *proto)
{
	struct child_arg a = { .proto = proto, .cn = 1, .op = OP_TRANSFER, .amount = 10 };
	struct recovery_report r;

	open_db(proto);
	cr_assert_eq(run_child(&a), 0);
	a.cn = 0;
	a.amount = 20;
	cr_assert_eq(run_child(&a), 0);
	a.amount = 5;
	cr_assert_eq(run_child(&a), 0);
	r = recover(0);
	cr_assert_eq(r.back, 0, "a committed transaction was rolled back");
	cr_assert_eq(r.finished, 1);
	cr_assert_eq(r.images_restored, 0);
	cr_assert_eq(get(0), START - 35);
	cr_assert_eq(get(1), START + 35);
	assert_clean();
	ttx_close(&T);
}

Test(recovery, finished_logs_stay_pandora) { finished_logs("pandora"); }
Test(recovery, finished_logs_stay_ford) { finished_logs("ford"); }

/*
 * A committed transaction T1 (logged, finished), then T2 logs the same records and dies while
 * its commit WRITE is half done: simulated by tearing account 0's image on its primary with
 * T1's version still in place. T1's log sees its version on a record that fails its checksum,
 * but T2's log read T1's version: T1 is finished, T2 rolls back to T1's image.
 */
static void torn_successor(const char *proto)
{
	struct child_arg a = { .proto = proto, .cn = 1, .op = OP_TRANSFER, .amount = 10 };
	const struct store_table *t;
	struct store_place pl;
	struct recovery_report r;
	uint64_t off = 0;

	open_db(proto);
	cr_assert_eq(run_child(&a), 0);
	a.cn = 0;
	a.amount = 20;
	a.die_at = "txn.logged";
	cr_assert_eq(run_child(&a), 128 + 9);
	t = store_table(&T.db->st, 0);
	store_place(&T.db->st, t, 0, &pl);
	for (uint64_t i = 0; i < t->ent.capacity && !off; i++) {
		uint64_t k, o = store_rec_off(t, i), ver;

		memcpy(&k, T.tu.mn[pl.primary].base + o + 16, 8);
		memcpy(&ver, T.tu.mn[pl.primary].base + o + 8, 8);
		if (k == 0 && ver != 0)
			off = o;
	}
	cr_assert_neq(off, 0);
	T.tu.mn[pl.primary].base[off + 32] ^= 0x5a; /* the value byte: half of T2's WRITE */
	r = recover(0);
	cr_assert_eq(r.back, 1, "back %llu", (unsigned long long)r.back);
	assert_clean();
	cr_assert_eq(get(0), START - 10, "account 0 = %llu", (unsigned long long)get(0));
	cr_assert_eq(get(1), START + 10);
	ttx_close(&T);
}

Test(recovery, torn_successor_pandora) { torn_successor("pandora"); }

/*
 * Every replica carries the new version, but one image is torn (its version word landed, the
 * rest of the WRITE did not: a power failure in the middle of it). The commit cannot have
 * been acknowledged: roll back, never keep a torn record.
 */
static void torn_own_write(const char *proto)
{
	struct child_arg a = { .proto = proto, .cn = 1, .op = OP_TRANSFER, .amount = 10,
			       .die_at = "txn.unlock" };
	const struct store_table *t;
	struct store_place pl;
	struct recovery_report r;
	uint64_t off = 0;

	open_db(proto);
	cr_assert_eq(run_child(&a), 128 + 9);
	t = store_table(&T.db->st, 0);
	store_place(&T.db->st, t, 1, &pl);
	for (uint64_t i = 0; i < t->ent.capacity && !off; i++) {
		uint64_t k, o = store_rec_off(t, i), ver;

		memcpy(&k, T.tu.mn[pl.primary].base + o + 16, 8);
		memcpy(&ver, T.tu.mn[pl.primary].base + o + 8, 8);
		if (k == 1 && ver != 0)
			off = o;
	}
	cr_assert_neq(off, 0);
	/* the last replica: tear the value of account 1 */
	T.tu.mn[(pl.primary + NMN - 1) % NMN].base[off + 33] ^= 0x11;
	r = recover(0);
	cr_assert_eq(r.back, 1, "back %llu forward %llu", (unsigned long long)r.back,
		     (unsigned long long)r.forward);
	assert_clean();
	cr_assert_eq(get(0), START);
	cr_assert_eq(get(1), START);
	ttx_close(&T);
}

Test(recovery, torn_own_write_pandora) { torn_own_write("pandora"); }
Test(recovery, torn_own_write_ford) { torn_own_write("ford"); }
Test(recovery, torn_successor_ford) { torn_successor("ford"); }

/* ---- inserts and deletes (pandora logs them) --------------------------------------------- */

Test(recovery, insert_rolled_back_and_forward)
{
	static const char *const points[] = { "txn.logged", "txn.commit_mid", "txn.unlock" };

	for (unsigned i = 0; i < 3; i++) {
		struct child_arg a = { .proto = "pandora", .cn = 1, .op = OP_INSERT, .amount = 4,
				       .die_at = points[i] };
		uint64_t v = 0;
		bool fwd = i == 2;
		int rc;

		open_db("pandora");
		cr_assert_eq(run_child(&a), 128 + 9);
		recover(0);
		assert_clean();
		rc = ttx_get(&T, 0, 0, 104, &v);
		cr_assert_eq(rc, fwd ? 0 : -REMORA_ENOTFOUND, "%s: insert %s", points[i],
			     rc ? "missing" : "present");
		cr_assert_eq(get(0), fwd ? START - 4 : START, "%s", points[i]);
		/* The key can be inserted again afterwards (its slot and record are reusable). */
		if (!fwd)
			ttx_put(&T, 0, 0, 104, 9);
		cr_assert_eq(ttx_get(&T, 0, 0, 104, &v), 0);
		ttx_close(&T);
	}
}

Test(recovery, delete_rolled_back_and_forward)
{
	static const char *const points[] = { "txn.commit_mid", "txn.unlock" };

	for (unsigned i = 0; i < 2; i++) {
		struct child_arg a = { .proto = "pandora", .cn = 1, .op = OP_DELETE,
				       .die_at = points[i] };
		bool fwd = i == 1;

		open_db("pandora");
		cr_assert_eq(run_child(&a), 128 + 9);
		recover(0);
		assert_clean();
		cr_assert_eq(get(3), fwd ? UINT64_MAX : START, "%s", points[i]);
		cr_assert_eq(get(0), fwd ? 2 * START : START, "%s", points[i]);
		cr_assert_eq(total(), ACCOUNTS * START);
		ttx_close(&T);
	}
}

/*
 * A torn record that an index slot points to is damage recovery reports (no log can explain
 * it); a torn record slot nothing points to (an insert cut before its slot CAS) is harmless
 * and counted apart.
 */
Test(recovery, torn_published_and_unpublished)
{
	const struct store_table *t;
	struct store_place pl;
	struct recovery_report r;
	uint64_t off = 0, spare;

	open_db("pandora");
	t = store_table(&T.db->st, 0);
	store_place(&T.db->st, t, 5, &pl);
	for (uint64_t i = 0; i < ACCOUNTS && !off; i++) {
		uint64_t k, o = store_rec_off(t, i);

		memcpy(&k, T.tu.mn[pl.primary].base + o + 16, 8);
		if (k == 5)
			off = o;
	}
	cr_assert_neq(off, 0);
	r = recover(REMORA_RECOVERY_CHECK);
	cr_assert_eq(r.torn + r.torn_unpublished, 0);
	/* a slot the loader's chunk claimed but never filled: unpublished */
	spare = store_rec_off(t, ACCOUNTS + 3);
	memset(T.tu.mn[0].base + spare + 8, 0x5a, 24);
	r = recover(REMORA_RECOVERY_CHECK);
	cr_assert_eq(r.torn, 0);
	cr_assert_eq(r.torn_unpublished, 1);
	T.tu.mn[pl.primary].base[off + 32] ^= 0x42;
	r = recover(REMORA_RECOVERY_CHECK);
	cr_assert_eq(r.torn, 1, "torn %llu", (unsigned long long)r.torn);
	ttx_close(&T);
}

/* ---- bad input ------------------------------------------------------------------------------ */

Test(recovery, pool_check_refusals)
{
	struct store_sb sb;
	uint8_t *img;
	char err[256];
	uint64_t bytes;

	open_db("pandora");
	img = T.tu.mn[1].base;
	bytes = T.tu.mn[1].bytes;
	memcpy(&sb, img, sizeof(sb));
	cr_assert_eq(recovery_pool_check(img, bytes, 1, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(recovery_pool_check(img, bytes, 2, err, sizeof(err)), -REMORA_ELAYOUT);
	cr_assert(strstr(err, "memory node 1"), "%s", err);
	cr_assert_eq(recovery_pool_check(img, sb.layout_bytes - 1, 1, err, sizeof(err)),
		     -REMORA_ELAYOUT);
	cr_assert(strstr(err, "needs"), "%s", err);
	img[40] ^= 1; /* a byte of the geometry: the checksum catches it */
	cr_assert_eq(recovery_pool_check(img, bytes, 1, err, sizeof(err)), -REMORA_ELAYOUT);
	cr_assert(strstr(err, "checksum"), "%s", err);
	img[40] ^= 1;
	sb.layout_version = REMORA_STORE_LAYOUT_VERSION + 1;
	sb.csum = store_csum(REMORA_STORE_SB_CSUM_SEED, &sb,
				    offsetof(struct store_sb, csum));
	memcpy(img, &sb, sizeof(sb));
	cr_assert_eq(recovery_pool_check(img, bytes, 1, err, sizeof(err)), -REMORA_ELAYOUT);
	cr_assert(strstr(err, "layout version"), "%s", err);
	img[0] = 'x';
	cr_assert_eq(recovery_pool_check(img, bytes, 1, err, sizeof(err)), -REMORA_ELAYOUT);
	cr_assert(strstr(err, "no remora database"), "%s", err);
	cr_assert_null(strchr(err, '\n'));
	recovery_pool_erase(img, bytes);
	cr_assert_eq(recovery_pool_check(img, bytes, 1, err, sizeof(err)), 1);
	ttx_close(&T);
}

/*
 * A database one of whose memory nodes failed over in an earlier run (mnf_dead says so on the
 * live nodes) is not recovered whole: that node's pool is stale, and its old logs would
 * decide. The recovery refuses with one line and changes nothing.
 */
Test(recovery, failed_over_node_refused)
{
	const uint64_t off = REMORA_STORE_CONTROL_OFF + offsetof(struct store_control, mnf_dead);
	struct recovery_cfg cfg = { .size = sizeof(cfg), .n_mn = NMN };
	struct recovery_report rep;
	char err[256] = "";
	uint8_t *s;

	open_db("pandora");
	for (unsigned m = 0; m < NMN; m++)
		if (m != 1)
			*(volatile uint64_t *)((char *)T.tu.mn[m].base + off) = 1u << 1;
	s = snapshot();
	cr_assert_eq(recovery_run(T.tu.tp, &cfg, &rep, err, sizeof(err)), -REMORA_ECONFIG, "%s",
		     err);
	cr_assert(strstr(err, "memory node 1 failed over in an earlier run"), "%s", err);
	cr_assert(same_as(s), "a refused recovery changed the pools");
	free(s);
	ttx_close(&T);
}

Test(recovery, no_database)
{
	struct recovery_cfg cfg = { .size = sizeof(cfg), .n_mn = NMN };
	struct recovery_report rep;
	char err[256] = "";

	tu_open(&T.tu, 0, NMN, 1u << 20);
	cr_assert_eq(recovery_run(T.tu.tp, &cfg, &rep, err, sizeof(err)),
		     -REMORA_ELAYOUT);
	cr_assert(strstr(err, "no remora database"), "%s", err);
	tu_close(&T.tu);
}

/* ---- online recovery of one compute node while the test (compute node 0) runs ------------- */

/* Compute node 1 is dead: fenced on every memory node, as remora_cluster_fence does. */
static void fence_cn1(void)
{
	for (unsigned m = 0; m < NMN; m++)
		cr_assert_eq(remora_pool_fence(T.tu.mn[m].pool, 1), 0);
}

static int recover_online_as(struct remora_transport *tp, uint16_t self, uint64_t dead,
			     struct recovery_report *rep, char *err, size_t errlen)
{
	struct recovery_online_cfg cfg = { .size = sizeof(cfg), .n_mn = NMN, .self_cn = self,
					 .protocol = "pandora", .dead = dead };

	return recovery_online(tp, &cfg, 1, rep, err, errlen);
}

/* Every coordinator id of compute node 1 is in the failed-ids set of every node. */
static bool cn1_published(void)
{
	uint16_t id = txn_coord_id(1, 0);
	uint64_t w, owner;

	memcpy(&owner, T.tu.mn[0].base + REMORA_STORE_CONTROL_OFF +
			       offsetof(struct store_control, id_owner) + 8, 8);
	if (owner & 0xffffffffu) /* compute node 1's block (runtime/txn/ids.h) */
		id = txn_ids_first(T.db->st.sb.coords_per_cn, (uint32_t)(owner & 0xffffffffu) - 1u);

	for (unsigned m = 0; m < NMN; m++) {
		memcpy(&w, T.tu.mn[m].base + occ_failed_word_off(id), 8);
		if (!(w >> (id & 63) & 1))
			return false;
	}
	return true;
}

/* A transfer of 1 from account 1 to 0 that also rewrites 2, on the test's worker. */
static int transfer_here(void)
{
	struct remora_tx *tx;
	uint64_t a, b, c;
	int rc;

	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	rc = remora_tx_read_for_update(tx, 0, 0, &a);
	if (!rc)
		rc = remora_tx_read_for_update(tx, 0, 1, &b);
	if (!rc)
		rc = remora_tx_read_for_update(tx, 0, 2, &c);
	if (!rc)
		rc = remora_tx_write(tx, 0, 0, &(uint64_t){ a + 1 });
	if (!rc)
		rc = remora_tx_write(tx, 0, 1, &(uint64_t){ b - 1 });
	if (!rc)
		rc = remora_tx_write(tx, 0, 2, &c);
	if (rc) {
		remora_tx_abort(tx);
		return rc;
	}
	return remora_tx_commit(tx);
}

/*
 * Compute node 1 dies at each protocol point of a transfer; the test process, a live compute
 * node, recovers it online (no lock scan), then steals its locks: its own transfer on the
 * same accounts commits at once. Outcome as after a whole-cluster recovery (crash_points).
 * unpublished_failure (negative control): the failed ids never appear, the locks stay.
 */
static bool online_points(const char *mutation)
{
	bool ok = true;

	for (size_t i = 0; i < sizeof(point_cases) / sizeof(point_cases[0]); i++) {
		const struct point_case *c = &point_cases[i];
		struct child_arg a = { .proto = "pandora", .cn = 1, .op = OP_TRANSFER, .amount = 7,
				       .die_at = c->point };
		struct recovery_report r;
		char err[256] = "";
		int rc;

		open_db("pandora");
		cr_assert_eq(run_child(&a), 128 + 9, "%s: the compute node did not die there",
			     c->point);
		fence_cn1();
		if (mutation)
			setenv("REMORA_MUTATE", mutation, 1);
		rc = recover_online_as(T.tu.tp, 0, UINT64_C(1) << 1, &r, err, sizeof(err));
		unsetenv("REMORA_MUTATE");
		cr_assert_eq(rc, 0, "%s: %s", c->point, err);
		cr_assert_eq(r.forward, c->forward ? 1 : 0, "%s: forward %llu", c->point,
			     (unsigned long long)r.forward);
		cr_assert_eq(r.back, c->logged && !c->forward ? 1 : 0, "%s: back", c->point);
		cr_assert_eq(r.locks, 0, "%s: online recovery scanned locks", c->point);
		ok = ok && transfer_here() == 0; /* steals compute node 1's locks */
		if (ok) {
			cr_assert(cn1_published(), "%s", c->point);
			cr_assert_eq(get(0), (c->forward ? START - 7 : START) + 1, "%s", c->point);
			cr_assert_eq(get(1), (c->forward ? START + 7 : START) - 1, "%s", c->point);
			cr_assert_eq(total(), ACCOUNTS * START, "%s: money not conserved", c->point);
			cr_assert_eq(recover(REMORA_RECOVERY_CHECK).locks, 0, "%s: a lock is left",
				     c->point);
		}
		ttx_close(&T);
	}
	return ok;
}

Test(recovery, online_points_pandora) { cr_assert(online_points(NULL)); }
Test(recovery, online_points_unpublished) { cr_assert_not(online_points("unpublished_failure")); }

struct online_arg {
	const char *die_at;
};

/* A live compute node that claims compute node 1's recovery and dies at a step of it. */
static int online_child(void *p, int rd, int wr)
{
	const struct online_arg *a = p;
	struct recovery_report rep;
	struct remora_transport *tp;
	char err[256] = "";
	int rc;

	(void)rd, (void)wr;
	setenv("REMORA_DIE_AT", a->die_at, 1);
	rc = tu_transport_try(-1, NULL, &tp);
	TU_CHILD_CHECK(rc == 0, "transport: %s", remora_strerror(rc));
	for (unsigned m = 0; m < NMN; m++)
		TU_CHILD_CHECK(remora_transport_attach(tp, &T.tu.mn[m].desc) == 0, "attach");
	rc = recover_online_as(tp, 0, UINT64_C(1) << 1, &rep, err, sizeof(err));
	TU_CHILD_CHECK(rc == 0, "%s", err);
	remora_transport_close(tp);
	return 0;
}

/*
 * The recovering node dies after each step (logs read, decided and undone, invalidated,
 * failed ids published); another live node (id 5) takes the claim of the dead claimant over
 * and recovers again. The end is the clean run's: the transfer cut between its commit WRITEs
 * rolled back, the ids published, the claim DONE, and the survivor's transfer commits.
 * claim_done_first (negative control): the claim says DONE before the recovery ran, so the
 * node that takes over finds nothing to do and the dead node's log and locks stay.
 */
static bool online_rerun(const char *mutation)
{
	static const char *const steps[] = { "online.read", "online.decided",
					     "online.invalidated", "online.published" };
	bool ok = true;

	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]) && ok; i++) {
		struct child_arg a = { .proto = "pandora", .cn = 1, .op = OP_TRANSFER, .amount = 7,
				       .die_at = "txn.commit_mid" };
		struct online_arg oa = { .die_at = steps[i] };
		struct recovery_report r;
		char err[256] = "";
		struct tu_proc p;
		uint64_t claim;

		open_db("pandora");
		cr_assert_eq(run_child(&a), 128 + 9);
		fence_cn1();
		if (mutation)
			setenv("REMORA_MUTATE", mutation, 1);
		tu_spawn(&p, online_child, &oa);
		cr_assert_eq(tu_proc_wait(&p), 128 + 9, "%s: the recovering node did not die there",
			     steps[i]);
		cr_assert_eq(recover_online_as(T.tu.tp, 5, UINT64_C(1) << 0 | UINT64_C(1) << 1, &r,
					       err, sizeof(err)) < 0,
			     false, "%s: %s", steps[i], err);
		unsetenv("REMORA_MUTATE");
		memcpy(&claim, T.tu.mn[0].base + REMORA_STORE_CONTROL_OFF +
				       offsetof(struct store_control, lease) + 8, 8);
		ok = claim == (UINT64_C(1) << 63 | 6) && cn1_published() &&
		     recover(REMORA_RECOVERY_CHECK).log_copies == 0 && get(0) == START &&
		     get(1) == START;
		if (ok) {
			cr_assert_eq(transfer_here(), 0, "%s", steps[i]);
			cr_assert_eq(total(), ACCOUNTS * START, "%s", steps[i]);
		}
		ttx_close(&T);
	}
	return ok;
}

Test(recovery, online_rerun_after_recoverer_died) { cr_assert(online_rerun(NULL)); }
Test(recovery, online_rerun_claim_done_first)
{
	cr_assert_not(online_rerun("claim_done_first"));
}

/*
 * The lease watchdog's pass (recovery_watch) over a membership the test controls: which
 * compute nodes are dead, and whose fence fails at the last memory node (the others fenced
 * it: a half-fenced node, whose verbs still land there).
 */
struct fake_members {
	uint64_t dead;
	uint64_t fence_fails;
};

static int fake_view(void *ctx, uint64_t *dead)
{
	*dead = ((struct fake_members *)ctx)->dead;
	return 0;
}

static int fake_fence(void *ctx, uint16_t cn)
{
	const struct fake_members *f = ctx;

	for (unsigned m = 0; m < NMN; m++) {
		if (m == NMN - 1 && (f->fence_fails >> cn & 1))
			return -REMORA_ENODE;
		cr_assert_eq(remora_pool_fence(T.tu.mn[m].pool, cn), 0);
	}
	return 0;
}

static const char *fake_errmsg(void *ctx)
{
	(void)ctx;
	return "memory node 2 did not answer";
}

static const char *watch_mutation; /* REMORA_MUTATE while the watcher runs */

static void watch_tick(struct fake_members *f, struct recovery_watcher *w, FILE *log)
{
	struct recovery_watch_src src = { .view = fake_view, .fence = fake_fence,
					  .errmsg = fake_errmsg, .ctx = f, .tp = T.tu.tp,
					  .n_mn = NMN, .self_cn = 0 };
	if (watch_mutation)
		setenv("REMORA_MUTATE", watch_mutation, 1);
	recovery_watch_src(&src, "pandora", w, log);
	unsetenv("REMORA_MUTATE");
}

/* Nobody has looked at compute node 1's log: still valid, no claim, no id published. */
static bool cn1_untouched(void)
{
	uint64_t claim;

	memcpy(&claim, T.tu.mn[0].base + REMORA_STORE_CONTROL_OFF +
			       offsetof(struct store_control, lease) + 8, 8);
	return recover(REMORA_RECOVERY_CHECK).log_copies > 0 && !cn1_published() &&
	       (claim == 0 || claim == (UINT64_C(1) << 62 | 3));
}

/*
 * Fence before takeover. Compute node 1 died between its commit WRITEs (its log valid).
 *   a) Its fence fails at one memory node: the watcher must not claim it nor read its log;
 *      once the fence succeeds (next tick), it recovers it.
 *   b) Compute node 2 claimed 1's recovery and died too, but 2's fence fails at one memory
 *      node (its undo WRITEs may still land there): its claim must not be taken over until 2
 *      is fenced everywhere; then it is.
 * recover_unfenced (negative control): the watcher claims what the view shows dead.
 */
static bool fence_before_takeover(const char *mutation, bool claimant)
{
	struct child_arg a = { .proto = "pandora", .cn = 1, .op = OP_TRANSFER, .amount = 7,
			       .die_at = "txn.commit_mid" };
	struct fake_members f = { .dead = UINT64_C(1) << 1 };
	struct recovery_watcher w = { 0 };
	FILE *log = tmpfile();
	bool ok;

	cr_assert(log);
	watch_mutation = mutation;
	open_db("pandora");
	cr_assert_eq(run_child(&a), 128 + 9);
	if (claimant) {
		uint64_t held = UINT64_C(1) << 62 | 3; /* CLAIM by compute node 2 */

		memcpy(T.tu.mn[0].base + REMORA_STORE_CONTROL_OFF +
			       offsetof(struct store_control, lease) + 8, &held, 8);
		f.dead |= UINT64_C(1) << 2;
		f.fence_fails = UINT64_C(1) << 2;
	} else {
		f.fence_fails = UINT64_C(1) << 1;
	}
	watch_tick(&f, &w, log);
	watch_tick(&f, &w, log);
	ok = cn1_untouched();
	f.fence_fails = 0;
	watch_tick(&f, &w, log);
	watch_mutation = NULL;
	cr_assert(cn1_published(), "not recovered once fenced everywhere");
	cr_assert_eq(recover(REMORA_RECOVERY_CHECK).log_copies, 0);
	cr_assert_eq(get(0), START);
	cr_assert_eq(transfer_here(), 0);
	cr_assert_eq(total(), ACCOUNTS * START);
	fclose(log);
	ttx_close(&T);
	return ok;
}

Test(recovery, online_fence_before_recovery) { cr_assert(fence_before_takeover(NULL, false)); }
Test(recovery, online_fence_before_takeover) { cr_assert(fence_before_takeover(NULL, true)); }
Test(recovery, online_fence_unfenced_recovered)
{
	cr_assert_not(fence_before_takeover("recover_unfenced", false));
}
Test(recovery, online_fence_unfenced_taken_over)
{
	cr_assert_not(fence_before_takeover("recover_unfenced", true));
}

/*
 * Compute node 1 committed a transfer long ago (its locks released, its log left valid, as
 * the engine leaves committed logs) and then died. A live transaction of this node holds
 * account 0 and is writing it: the primary image carries the dead node's version with a body
 * that is half the live WRITE (torn). Online recovery must find the dead node's log finished
 * (its locks are gone), never roll it back over accounts 1 and 2 or the live writer.
 * online_no_lock_proof (negative control): the images decide, the torn one says "back".
 */
static bool online_finished_log(const char *mutation)
{
	struct child_arg a = { .proto = "pandora", .cn = 1, .op = OP_TRANSFER, .amount = 10 };
	const struct store_table *t;
	struct store_place pl;
	struct recovery_report r;
	struct remora_tx *tx;
	char err[256] = "";
	uint64_t off = 0, v = 0;
	bool ok;

	open_db("pandora");
	cr_assert_eq(run_child(&a), 0);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 0, &v), 0); /* the live lock */
	cr_assert_eq(v, START - 10);
	t = store_table(&T.db->st, 0);
	store_place(&T.db->st, t, 0, &pl);
	for (uint64_t i = 0; i < t->ent.capacity && !off; i++) {
		uint64_t k, o = store_rec_off(t, i), ver;

		memcpy(&k, T.tu.mn[pl.primary].base + o + 16, 8);
		memcpy(&ver, T.tu.mn[pl.primary].base + o + 8, 8);
		if (k == 0 && ver != 0)
			off = o;
	}
	cr_assert_neq(off, 0);
	T.tu.mn[pl.primary].base[off + 32] ^= 0x5a; /* the live WRITE, half landed */
	fence_cn1();
	if (mutation)
		setenv("REMORA_MUTATE", mutation, 1);
	cr_assert_eq(recover_online_as(T.tu.tp, 0, UINT64_C(1) << 1, &r, err, sizeof(err)), 0,
		     "%s", err);
	unsetenv("REMORA_MUTATE");
	ok = r.back == 0 && r.finished == 1 && r.images_restored == 0;
	cr_assert_eq(remora_tx_write(tx, 0, 0, &(uint64_t){ v + 1 }), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	ok = ok && get(0) == START - 9 && get(1) == START + 10;
	cr_assert_eq(recover(REMORA_RECOVERY_CHECK).torn, 0);
	ttx_close(&T);
	return ok;
}

Test(recovery, online_finished_log_stays) { cr_assert(online_finished_log(NULL)); }
Test(recovery, online_finished_log_no_lock_proof)
{
	cr_assert_not(online_finished_log("online_no_lock_proof"));
}

/* ---- coordinator-id blocks (runtime/txn/ids.h) ------------------------------------------- */

/* A second compute node in this process: compute node cn's db, with one worker. */
static struct remora_db *open_cn(uint16_t cn, struct remora_worker **w)
{
	struct remora_db_cfg cfg = { .size = sizeof(cfg), .protocol = "pandora", .tp = T.tu.tp,
				     .cn_id = cn, .n_mn = NMN, .replicas = NMN, .workers = 1,
				     .coords_per_worker = 1 };
	struct remora_db *db = NULL;
	int rc = remora_db_open(&cfg, &db);

	cr_assert_eq(rc, 0, "open as cn %u: %s (%s)", cn, remora_strerror(rc),
		     remora_db_errmsg(NULL));
	cr_assert_eq(remora_worker_create(db, 0, w), 0);
	return db;
}

/*
 * Compute node 1 died holding the locks of a transfer (before its log) and was recovered
 * online. It restarts (a new process, same compute-node id) and takes account 0 over. The
 * survivor (compute node 0) must see a live lock there and abort, not steal it: the new
 * process's ids are fresh. ids_by_cn (negative control): they are the dead node's, published
 * as failed, and the survivor steals a live lock.
 */
static bool restarted_fresh_ids(const char *mutation)
{
	struct child_arg a = { .proto = "pandora", .cn = 1, .op = OP_TRANSFER, .amount = 7,
			       .die_at = "txn.locked" };
	struct recovery_report r;
	struct remora_worker *w2;
	struct remora_db *db2;
	struct remora_tx *tx;
	char err[256] = "";
	uint64_t v;
	bool ok;

	if (mutation)
		setenv("REMORA_MUTATE", mutation, 1);
	open_db("pandora");
	cr_assert_eq(run_child(&a), 128 + 9);
	fence_cn1();
	cr_assert_eq(recover_online_as(T.tu.tp, 0, UINT64_C(1) << 1, &r, err, sizeof(err)), 0,
		     "%s", err);
	db2 = open_cn(1, &w2);
	unsetenv("REMORA_MUTATE");
	cr_assert_eq(remora_tx_begin(w2, 0, &tx), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 0, &v), 0, "the restarted node steals");
	ok = transfer_here() != 0; /* account 0 is live: abort */
	remora_tx_abort(tx);
	remora_worker_destroy(w2);
	remora_db_close(db2);
	cr_assert_eq(transfer_here(), 0);
	cr_assert_eq(total(), ACCOUNTS * START);
	ttx_close(&T);
	return ok;
}

Test(recovery, ids_fresh_after_restart) { cr_assert(restarted_fresh_ids(NULL)); }
Test(recovery, ids_fresh_after_restart_by_cn) { cr_assert_not(restarted_fresh_ids("ids_by_cn")); }

static uint64_t ctl_word(unsigned m, size_t field, unsigned i)
{
	uint64_t v;

	memcpy(&v, T.tu.mn[m].base + REMORA_STORE_CONTROL_OFF + field + i * 8u, 8);
	return v;
}

static void ctl_or(unsigned m, size_t field, unsigned i, uint64_t bits)
{
	uint64_t v = ctl_word(m, field, i) | bits;

	memcpy(T.tu.mn[m].base + REMORA_STORE_CONTROL_OFF + field + i * 8u, &v, 8);
}

/* Where account key's record lies on its primary: *node, and the byte offset returned. */
static uint64_t primary_rec(uint64_t key, uint16_t *node)
{
	const struct store_table *t = store_table(&T.db->st, 0);
	struct store_place pl;

	store_place(&T.db->st, t, key, &pl);
	*node = pl.primary;
	for (uint64_t i = 0; i < t->ent.capacity; i++) {
		uint64_t k, o = store_rec_off(t, i), ver;

		memcpy(&k, T.tu.mn[pl.primary].base + o + 16, 8);
		memcpy(&ver, T.tu.mn[pl.primary].base + o + 8, 8);
		if (k == key && ver != 0)
			return o;
	}
	cr_assert_fail("no record of key %llu", (unsigned long long)key);
	return 0;
}

/*
 * The recycler. Blocks 10 .. the last are held (99% of the id space): 10 .. 109 by compute
 * nodes that failed and were recovered (their ids published), the rest by live ones; a stray
 * lock of block 50 sits on account 0. The next open recycles: the stray lock is released,
 * blocks 10 .. 109 are free again with their failed bits cleared, and account 0 commits.
 * recycle_with_strays (negative control): the blocks are freed with the stray lock left; its
 * id is no longer failed, so account 0 stays locked by nobody.
 */
static bool recycled_at_95(const char *mutation)
{
	const size_t used_f = offsetof(struct store_control, id_used);
	const size_t failed_f = offsetof(struct store_control, failed_ids);
	uint32_t per, nb;
	struct remora_worker *w2;
	struct remora_db *db2;
	uint64_t off, stray, lock;
	uint16_t node;
	bool ok;

	open_db("pandora");
	per = T.db->st.sb.coords_per_cn;
	nb = txn_ids_blocks(per);
	for (uint32_t k = 10; k < nb; k++)
		ctl_or(0, used_f, k / 64, UINT64_C(1) << (k % 64));
	for (uint32_t k = 10; k < 110; k++)
		for (uint32_t i = 0; i < per; i++) {
			uint16_t id = (uint16_t)(txn_ids_first(per, k) + i);

			for (unsigned m = 0; m < NMN; m++)
				ctl_or(m, failed_f, id / 64, UINT64_C(1) << (id % 64));
		}
	ttx_put(&T, 0, 0, 0, START); /* a version on account 0's record, to find it by */
	off = primary_rec(0, &node) + store_table(&T.db->st, 0)->geom.lock_off;
	stray = UINT64_C(77) << 48 | UINT64_C(5) << 16 | txn_ids_first(per, 50);
	memcpy(T.tu.mn[node].base + off, &stray, 8);
	if (mutation)
		setenv("REMORA_MUTATE", mutation, 1);
	db2 = open_cn(1, &w2);
	unsetenv("REMORA_MUTATE");
	cr_assert_eq(ctl_word(0, offsetof(struct store_control, id_recycled), 0), 100);
	for (uint32_t k = 10; k < 110; k++)
		cr_assert_not(ctl_word(0, used_f, k / 64) >> (k % 64) & 1, "block %u still used", k);
	for (unsigned m = 0; m < NMN; m++) {
		uint16_t id = txn_ids_first(per, 50);

		cr_assert_not(ctl_word(m, failed_f, id / 64) >> (id % 64) & 1);
	}
	cr_assert_eq(db2->id_block, 2, "the restarted node takes block 1 (block %u)",
		     db2->id_block - 1);
	memcpy(&lock, T.tu.mn[node].base + off, 8);
	ok = lock == 0 && transfer_here() == 0;
	remora_worker_destroy(w2);
	remora_db_close(db2);
	ttx_close(&T);
	return ok;
}

Test(recovery, ids_recycled_at_95) { cr_assert(recycled_at_95(NULL)); }
Test(recovery, ids_recycled_with_strays) { cr_assert_not(recycled_at_95("recycle_with_strays")); }

/*
 * The recycler's claim word as a recycler left it: compute node 3 of incarnation 9, its lease
 * ending `expires_in` seconds from now (negative: it died and the lease lapsed). Blocks 10 ..
 * the last are held, 10 .. 109 by failed nodes, as in recycled_at_95. Returns how many blocks
 * the next open (compute node 1) recycled.
 */
static uint64_t recycled_past_claim(const char *mutation, int64_t expires_in)
{
	const size_t used_f = offsetof(struct store_control, id_used);
	const size_t failed_f = offsetof(struct store_control, failed_ids);
	const size_t claim_f = offsetof(struct store_control, id_recycling);
	struct timespec now;
	struct remora_worker *w2;
	struct remora_db *db2;
	uint64_t claim, recycled;
	uint32_t per, nb;

	open_db("pandora");
	per = T.db->st.sb.coords_per_cn;
	nb = txn_ids_blocks(per);
	for (uint32_t k = 10; k < nb; k++)
		ctl_or(0, used_f, k / 64, UINT64_C(1) << (k % 64));
	for (uint32_t k = 10; k < 110; k++)
		for (uint32_t i = 0; i < per; i++) {
			uint16_t id = (uint16_t)(txn_ids_first(per, k) + i);

			for (unsigned m = 0; m < NMN; m++)
				ctl_or(m, failed_f, id / 64, UINT64_C(1) << (id % 64));
		}
	clock_gettime(CLOCK_REALTIME, &now);
	claim = (uint64_t)(now.tv_sec + expires_in) << 32 | UINT64_C(9) << 16 | 4u;
	memcpy(T.tu.mn[0].base + REMORA_STORE_CONTROL_OFF + claim_f, &claim, 8);
	if (mutation)
		setenv("REMORA_MUTATE", mutation, 1);
	db2 = open_cn(1, &w2);
	unsetenv("REMORA_MUTATE");
	recycled = ctl_word(0, offsetof(struct store_control, id_recycled), 0);
	/* a claim taken over is given back; a live one is left alone */
	cr_assert_eq(ctl_word(0, claim_f, 0), recycled ? 0 : claim);
	remora_worker_destroy(w2);
	remora_db_close(db2);
	ttx_close(&T);
	return recycled;
}

Test(recovery, ids_recycle_claim_lapsed) { cr_assert_eq(recycled_past_claim(NULL, -1), 100); }
Test(recovery, ids_recycle_claim_live) { cr_assert_eq(recycled_past_claim(NULL, 60), 0); }
Test(recovery, ids_recycle_claim_forever)
{
	cr_assert_eq(recycled_past_claim("recycle_claim_forever", -1), 0);
}

/* ---- failed_locks = abort | stall --------------------------------------------------------- */

struct late_arg {
	int rc;
	char err[256];
};

/* The recovering node, 200 ms late: the live transaction meets compute node 1's locks first. */
static void *late_recovery(void *p)
{
	struct late_arg *a = p;
	struct recovery_report r;

	nanosleep(&(struct timespec){ .tv_nsec = 200000000L }, NULL);
	a->rc = recover_online_as(T.tu.tp, 2, UINT64_C(1) << 1, &r, a->err, sizeof(a->err));
	return NULL;
}

/*
 * Compute node 1 died holding the locks of a transfer; it is fenced and marked suspected (as
 * the watchdog does), and recovered 200 ms later by another node. A transfer of this node on
 * the same accounts meets its locks first. Its outcome under policy: remora_db_cfg's
 * failed_locks (cfg, NULL: not given) and $REMORA_FAILED_LOCKS (env, NULL: unset).
 */
static int conflict_under(const char *cfg, const char *env)
{
	struct child_arg a = { .proto = "pandora", .cn = 1, .op = OP_TRANSFER, .amount = 7,
			       .die_at = "txn.locked" };
	struct late_arg la = { 0 };
	pthread_t th;
	int rc;

	if (env)
		setenv("REMORA_FAILED_LOCKS", env, 1);
	open_failed_locks = cfg;
	open_db("pandora");
	open_failed_locks = NULL;
	unsetenv("REMORA_FAILED_LOCKS");
	cr_assert_eq(run_child(&a), 128 + 9);
	fence_cn1();
	cr_assert_eq(recovery_suspect(T.tu.tp, NMN, 1), 0);
	cr_assert_eq(pthread_create(&th, NULL, late_recovery, &la), 0);
	rc = transfer_here();
	pthread_join(th, NULL);
	cr_assert_eq(la.rc, 0, "%s", la.err);
	if (rc == 0)
		cr_assert(cn1_published(), "committed on a dead node's lock before its recovery");
	cr_assert_eq(transfer_here(), 0);
	cr_assert_eq(total(), ACCOUNTS * START);
	ttx_close(&T);
	return rc;
}

static int conflict_while_recovering(const char *policy)
{
	return conflict_under(NULL, policy);
}

Test(recovery, failed_locks_stall_commits) { cr_assert_eq(conflict_while_recovering("stall"), 0); }
Test(recovery, failed_locks_abort_aborts)
{
	cr_assert_eq(conflict_while_recovering("abort"), -REMORA_EABORT);
}

/* The open's configuration chooses; the environment, when set, overrides it. */
Test(recovery, failed_locks_cfg_stall) { cr_assert_eq(conflict_under("stall", NULL), 0); }
Test(recovery, failed_locks_env_overrides_cfg)
{
	cr_assert_eq(conflict_under("stall", "abort"), -REMORA_EABORT);
}

/* A bad value in the configuration is refused at open, with the same line. */
Test(recovery, failed_locks_cfg_bad_value)
{
	struct remora_db_cfg cfg = { .size = sizeof(cfg), .protocol = "pandora", .cn_id = 1,
				     .n_mn = NMN, .replicas = NMN, .workers = 1,
				     .failed_locks = "wait" };
	struct remora_db *db = NULL;

	open_db("pandora");
	cfg.tp = T.tu.tp;
	cr_assert_eq(remora_db_open(&cfg, &db), -REMORA_ECONFIG);
	cr_assert(strstr(remora_db_errmsg(NULL), "failed_locks 'wait': use abort or stall"), "%s",
		  remora_db_errmsg(NULL));
	ttx_close(&T);
}

Test(recovery, failed_locks_bad_value)
{
	struct remora_db_cfg cfg = { .size = sizeof(cfg), .protocol = "pandora", .cn_id = 1,
				     .n_mn = NMN, .replicas = NMN, .workers = 1 };
	struct remora_db *db = NULL;

	open_db("pandora");
	cfg.tp = T.tu.tp;
	setenv("REMORA_FAILED_LOCKS", "wait", 1);
	cr_assert_eq(remora_db_open(&cfg, &db), -REMORA_ECONFIG);
	unsetenv("REMORA_FAILED_LOCKS");
	cr_assert(strstr(remora_db_errmsg(NULL), "use abort or stall"), "%s",
		  remora_db_errmsg(NULL));
	ttx_close(&T);
}
