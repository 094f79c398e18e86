/* SPDX-License-Identifier: MIT */
/*
 * Motor's recovery from its redo logs (runtime/txn/proto/motor/recover.c, docs/motor.md,
 * "Logs and recovery"), in one test process: the test is the memory nodes and the tool; each
 * transaction runs in a forked compute node (cn 1) that kills itself at a named protocol point
 * (REMORA_DIE_AT). Then the test damages one replica the way a crash can, recovers, and checks
 * every replica byte by byte through the codec:
 *
 *   - header_lost: an insert's placeholder is the only WRITE of a CVT's header (key, table),
 *     and its backup WRITEs are not waited for. A crash can leave a backup with the committed
 *     cell and no header (zeroed here): recovery must write the header back from the log;
 *   - torn_cell: a commit WRITE cut short leaves a cell whose header says the new version and
 *     whose value is the old bytes: recovery must see it fail its checksum and rewrite it from
 *     the log's after-image, not take it as present because of its timestamp.
 * Negative control of both: redo_trusts_version (recovery counts a cell by its timestamp and
 * leaves the header alone): the damaged replica stays undecodable.
 *
 *   - online_points: cn 1 dies at each protocol point of a transfer; the test, a live compute
 *     node, fences it and recovers it online (recovery_online, protocol motor), then runs a
 *     transfer on the same accounts, which must commit at once: the dead node's locks were
 *     released. A logged transfer is rolled forward, an unlogged one leaves no trace. Negative
 *     control motor_online_keeps_locks: the live transfer aborts on the dead node's lock.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <remora/tx.h>

#include "../txn/ttx.h"
#include "recovery/recovery.h"
#include "store/codec.h"
#include "store/store.h"
#include "txn/txn.h"

#define NMN 3
#define ACCOUNTS 8u
#define START 100u
#define INSERTED 105u

static struct ttx T;

static void fini(void)
{
	ttx_fini();
}

TestSuite(motor_recovery, .fini = fini, .timeout = 120);

/* ---- the compute node that crashes ------------------------------------------------------ */

struct child_arg {
	bool insert;        /* insert INSERTED (value 5) and take 5 from account 0; else move 7
			     * from account 0 to account 1 */
	const char *die_at; /* REMORA_DIE_AT */
};

static int run_op(struct remora_worker *w, const struct child_arg *a)
{
	struct remora_tx *tx;
	uint64_t v0, v1 = 0;
	int rc = remora_tx_begin(w, 0, &tx);

	if (rc)
		return rc;
	rc = remora_tx_read_for_update(tx, 0, 0, &v0);
	if (!rc && a->insert)
		rc = remora_tx_insert(tx, 0, INSERTED, &(uint64_t){ 5 });
	if (!rc && !a->insert)
		rc = remora_tx_read_for_update(tx, 0, 1, &v1);
	if (!rc)
		rc = remora_tx_write(tx, 0, 0, &(uint64_t){ v0 - (a->insert ? 5 : 7) });
	if (!rc && !a->insert)
		rc = remora_tx_write(tx, 0, 1, &(uint64_t){ v1 + 7 });
	if (rc) {
		remora_tx_abort(tx);
		return rc;
	}
	return remora_tx_commit(tx);
}

static int crash_child(void *p, int rd, int wr)
{
	const struct child_arg *a = p;
	struct remora_db_cfg cfg = { .size = sizeof(cfg), .protocol = "motor", .cn_id = 1,
				     .n_mn = NMN, .workers = 1, .coords_per_worker = 1 };
	struct remora_transport *tp;
	struct remora_worker *w;
	struct remora_db *db;
	int rc;

	(void)rd;
	(void)wr;
	setenv("REMORA_DIE_AT", a->die_at, 1);
	rc = tu_transport_try(1, NULL, &tp);
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
	rc = run_op(w, a);
	TU_CHILD_CHECK(rc == 0, "transaction: %s (%s)", remora_strerror(rc),
		       remora_worker_errmsg(w));
	return 0;
}

static int run_child(const struct child_arg *a)
{
	struct tu_proc p;

	tu_spawn(&p, crash_child, (void *)a);
	return tu_proc_wait(&p);
}

/* ---- the test's side ---------------------------------------------------------------------- */

static void open_db(void)
{
	struct ttx_opts o = { .protocol = "motor", .nmn = NMN, .replicas = NMN };

	unsetenv("REMORA_MUTATE");
	ttx_open(&T, &o);
	for (uint64_t k = 0; k < ACCOUNTS; k++)
		cr_assert_eq(remora_db_load(T.w[0], 0, k, &(uint64_t){ START }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
}

static struct recovery_report recover(const char *mutation)
{
	struct recovery_cfg cfg = { .size = sizeof(cfg), .n_mn = NMN };
	struct recovery_report rep;
	char err[256] = "";
	int rc;

	if (mutation)
		setenv("REMORA_MUTATE", mutation, 1);
	rc = recovery_run(T.tu.tp, &cfg, &rep, err, sizeof(err));
	unsetenv("REMORA_MUTATE");
	cr_assert_eq(rc, 0, "recovery: %s (%s)", remora_strerror(rc), err);
	return rep;
}

/* Offset of key's CVT (the same on every replica) from the primary's index; its primary. */
static uint64_t rec_off(uint64_t key, uint16_t *primary)
{
	const struct store_db *st = &T.db->st;
	const struct store_table *t = store_table(st, 0);
	struct store_place pl;

	store_place(st, t, key, &pl);
	*primary = pl.primary;
	for (uint64_t b = pl.bucket;; b = store_next_bucket(st, t, b)) {
		const struct store_bucket *bk =
			(const void *)(T.tu.mn[pl.primary].base + store_bucket_off(t, b));

		for (unsigned s = 0; s < REMORA_STORE_BUCKET_SLOTS; s++) {
			uint64_t o = bk->slot[s] & REMORA_STORE_SLOT_OFF_MASK;
			uint64_t k;

			cr_assert_neq(bk->slot[s], 0, "key %llu not in the index",
				      (unsigned long long)key);
			memcpy(&k, T.tu.mn[pl.primary].base + o + 8, 8); /* the CVT's key */
			if (k == key)
				return o;
		}
	}
}

/*
 * Replica k of key: 0 with *value the newest version's when every cell decodes under key,
 * else -EAGAIN.
 */
static int replica_value(uint64_t key, unsigned k, uint64_t *value)
{
	const struct store_db *st = &T.db->st;
	const struct codec_geom *g = &store_table(st, 0)->geom;
	uint16_t primary;
	uint64_t off = rec_off(key, &primary), newest = 0;
	const unsigned char *img = T.tu.mn[store_replica(st, primary, k)].base + off;
	unsigned char buf[64];
	bool any = false;

	for (unsigned c = 0; c < g->nparts; c++) {
		struct codec_rec r;
		const void *v;

		if (codec_cvt.decode(g, img, c, &r) || r.key != key)
			return -EAGAIN;
		if (!(r.flags & REMORA_CVT_USED) || (any && r.version < newest))
			continue;
		if (codec_cvt_value(g, img, c, buf, &v, false))
			return -EAGAIN;
		memcpy(value, v, 8);
		newest = r.version;
		any = true;
	}
	return any ? 0 : -EAGAIN;
}

/* Replicas of key that are whole and hold `want` as their newest version. */
static unsigned replicas_holding(uint64_t key, uint64_t want)
{
	unsigned n = 0;

	for (unsigned k = 0; k < NMN; k++) {
		uint64_t v = 0;

		n += replica_value(key, k, &v) == 0 && v == want;
	}
	return n;
}

/*
 * The inserted key's first backup lost its header (the placeholder WRITE never landed): its
 * committed cell does not decode. Returns how many replicas hold the inserted value after
 * recovery (3: repaired).
 */
static unsigned header_lost(const char *mutation)
{
	struct child_arg a = { .insert = true, .die_at = "txn.unlock" };
	uint16_t primary;
	uint64_t off;
	unsigned n;

	open_db();
	cr_assert_eq(run_child(&a), 128 + 9, "the compute node did not die at txn.unlock");
	cr_assert_eq(replicas_holding(INSERTED, 5), 3, "the commit WRITEs did not all land");
	off = rec_off(INSERTED, &primary);
	memset(T.tu.mn[store_replica(&T.db->st, primary, 1)].base + off + 8, 0, 24);
	cr_assert_eq(replicas_holding(INSERTED, 5), 2);
	recover(mutation);
	n = replicas_holding(INSERTED, 5);
	if (n == 3) {
		uint64_t v = 0;

		cr_assert_eq(ttx_get(&T, 0, 0, INSERTED, &v), 0);
		cr_assert_eq(v, 5);
		cr_assert_eq(ttx_get(&T, 0, 0, 0, &v), 0);
		cr_assert_eq(v, START - 5);
	}
	ttx_close(&T);
	return n;
}

Test(motor_recovery, header_lost) { cr_assert_eq(header_lost(NULL), 3); }
Test(motor_recovery, header_lost_trusts_version)
{
	cr_assert_eq(header_lost("redo_trusts_version"), 2);
}

/*
 * The commit WRITE of account 0 on its second backup was cut short: the new cell header
 * (T_commit, its checksum) over the bytes the cell held before. Returns how many replicas hold
 * the committed balance after recovery (3: repaired).
 */
static unsigned torn_cell(const char *mutation)
{
	struct child_arg a = { .insert = false, .die_at = "txn.unlock" };
	const struct codec_geom *g;
	unsigned char *img;
	uint16_t primary;
	uint64_t off, newest = 0;
	int cell = -1;
	unsigned n;

	open_db();
	cr_assert_eq(run_child(&a), 128 + 9, "the compute node did not die at txn.unlock");
	cr_assert_eq(replicas_holding(0, START - 7), 3, "the commit WRITEs did not all land");
	g = &store_table(&T.db->st, 0)->geom;
	off = rec_off(0, &primary);
	img = T.tu.mn[store_replica(&T.db->st, primary, 2)].base + off;
	for (unsigned c = 0; c < g->nparts; c++) {
		struct codec_rec r;

		codec_cvt.decode(g, img, c, &r);
		if ((r.flags & REMORA_CVT_USED) && (cell < 0 || r.version > newest))
			cell = (int)c, newest = r.version;
	}
	cr_assert_gt(newest, 0, "no committed version on the backup");
	/* the value part of the WRITE never arrived: the bytes before it (deltas: the full area) */
	memcpy(img + (g->full_off ? g->full_off : g->part_off[cell]) + 16, &(uint64_t){ START },
	       8);
	cr_assert_eq(replicas_holding(0, START - 7), 2);
	recover(mutation);
	n = replicas_holding(0, START - 7);
	if (n == 3) {
		uint64_t v = 0;

		cr_assert_eq(ttx_get(&T, 0, 0, 1, &v), 0);
		cr_assert_eq(v, START + 7);
	}
	ttx_close(&T);
	return n;
}

Test(motor_recovery, torn_cell) { cr_assert_eq(torn_cell(NULL), 3); }
Test(motor_recovery, torn_cell_trusts_version)
{
	cr_assert_eq(torn_cell("redo_trusts_version"), 2);
}

/* ---- online recovery: the test is a live compute node (cn 0) ------------------------------ */

/* Moves 1 from account 1 to account 0 on the test's worker; 0 or the error. */
static int transfer_here(void)
{
	struct remora_tx *tx;
	uint64_t a, b;
	int rc;

	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	rc = remora_tx_read_for_update(tx, 0, 0, &a);
	if (!rc)
		rc = remora_tx_read_for_update(tx, 0, 1, &b);
	if (!rc)
		rc = remora_tx_write(tx, 0, 0, &(uint64_t){ a + 1 });
	if (!rc)
		rc = remora_tx_write(tx, 0, 1, &(uint64_t){ b - 1 });
	if (rc) {
		remora_tx_abort(tx);
		return rc;
	}
	return remora_tx_commit(tx);
}

struct online_case {
	const char *point;
	bool logged; /* the log was written: the transfer is a decided commit */
};

static const struct online_case online_cases[] = {
	{ "txn.locked", false },     { "txn.logged", true }, { "txn.commit_write", true },
	{ "txn.commit_mid", true },  { "txn.unlock", true },
};

/* True when every crash point ends with the live transfer committed on a whole store. */
static bool online_points(const char *mutation)
{
	bool ok = true;

	for (size_t i = 0; i < sizeof(online_cases) / sizeof(online_cases[0]); i++) {
		const struct online_case *c = &online_cases[i];
		struct child_arg a = { .insert = false, .die_at = c->point };
		struct recovery_online_cfg cfg = { .size = sizeof(cfg), .n_mn = NMN, .self_cn = 0,
						 .protocol = "motor", .dead = UINT64_C(1) << 1 };
		uint64_t moved = c->logged ? 7 : 0;
		struct recovery_report r;
		char err[256] = "";
		int rc;

		open_db();
		cr_assert_eq(run_child(&a), 128 + 9, "%s: the compute node did not die there",
			     c->point);
		for (unsigned m = 0; m < NMN; m++)
			cr_assert_eq(remora_pool_fence(T.tu.mn[m].pool, 1), 0);
		if (mutation)
			setenv("REMORA_MUTATE", mutation, 1);
		rc = recovery_online(T.tu.tp, &cfg, 1, &r, err, sizeof(err));
		unsetenv("REMORA_MUTATE");
		cr_assert_eq(rc, 0, "%s: %s", c->point, err);
		cr_assert_geq(r.locks, 1, "%s: no lock of the dead node found", c->point);
		ok = ok && transfer_here() == 0;
		if (ok) {
			cr_assert_eq(replicas_holding(0, START - moved + 1), 3, "%s", c->point);
			cr_assert_eq(replicas_holding(1, START + moved - 1), 3, "%s", c->point);
		}
		ttx_close(&T);
	}
	return ok;
}

Test(motor_recovery, online_points) { cr_assert(online_points(NULL)); }
Test(motor_recovery, online_points_keeps_locks)
{
	cr_assert_not(online_points("motor_online_keeps_locks"));
}
