/* SPDX-License-Identifier: MIT */
/*
 * Concurrent transfers between a few hot accounts (the bank of bank.h), from several threads,
 * each running several coordinators as coroutines, and from two compute-node processes: the
 * total balance is conserved, every committed read-only audit sees the exact total (Pandora;
 * FORD's version-only validation lets an audit commit a torn snapshot, its Covert Locks bug, so
 * there they are only counted), and no transfer gets lost (every account ends at what the
 * committed transfers predict). Runs for ford and pandora; bounded work, no timing assertions.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "bank.h"
#include "ttx.h"

TestSuite(txn_concurrency, .fini = ttx_fini, .timeout = 120);

#define ACCOUNTS 24
#define THREADS 2
#define COORDS 4
#define TRANSFERS 150 /* per coordinator */

static struct ttx T;

struct th_arg {
	struct remora_worker *w;
	struct bank_co *co; /* COORDS of them */
	int rc;
};

static void *thread_main(void *p)
{
	struct th_arg *t = p;

	t->rc = bank_run(t->w, t->co, COORDS);
	return NULL;
}

static void transfers(const char *proto)
{
	struct ttx_opts o = { .protocol = proto, .nmn = 3, .workers = THREADS, .coords = COORDS };
	static struct bank_co co[THREADS * COORDS];
	struct th_arg th[THREADS];
	pthread_t tid[THREADS];
	struct bank_tally t;
	int64_t total = 0;
	char why[200];

	ttx_open(&T, &o);
	for (uint64_t k = 0; k < ACCOUNTS; k++)
		cr_assert_eq(remora_db_load(T.w[0], 0, k, &(int64_t){ BANK_START }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
	for (unsigned i = 0; i < THREADS; i++) {
		for (unsigned c = 0; c < COORDS; c++)
			co[i * COORDS + c] = (struct bank_co){
				.w = T.w[i], .id = i * COORDS + c, .accounts = ACCOUNTS,
				.transfers = TRANSFERS, .rng = 0x5eed + i * 131 + c,
				.strict = strcmp(proto, "ford") != 0 };
		th[i] = (struct th_arg){ .w = T.w[i], .co = &co[i * COORDS] };
		cr_assert_eq(pthread_create(&tid[i], NULL, thread_main, &th[i]), 0);
	}
	for (unsigned i = 0; i < THREADS; i++)
		pthread_join(tid[i], NULL);
	for (unsigned i = 0; i < THREADS; i++)
		cr_assert_eq(th[i].rc, 0);
	cr_assert_eq(bank_tally(co, THREADS * COORDS, &t, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(t.committed, THREADS * COORDS * TRANSFERS);
	cr_assert_gt(t.audits, 0, "no audit ever committed: the audit check did not run");
	for (uint64_t k = 0; k < ACCOUNTS; k++) {
		uint64_t v;

		cr_assert_eq(ttx_get(&T, 0, 0, k, &v), 0);
		cr_assert_eq((int64_t)v, t.expect[k], "account %llu: %lld, expected %lld",
			     (unsigned long long)k, (long long)(int64_t)v, (long long)t.expect[k]);
		total += (int64_t)v;
	}
	cr_assert_eq(total, (int64_t)ACCOUNTS * BANK_START);
	cr_log_info("%s: %u transfers committed, %u aborted attempts, %u audits (%u torn)", proto,
		    t.committed, t.aborted, t.audits, t.torn);
	ttx_close(&T);
}

Test(txn_concurrency, transfers_ford) { transfers("ford"); }
Test(txn_concurrency, transfers_pandora) { transfers("pandora"); }

/* Under a NIC cost model completions arrive later than the post: coordinators really park
 * and interleave while their verbs are in flight. */
Test(txn_concurrency, transfers_ford_cx3)
{
	tu_use_profile("cx3");
	transfers("ford");
}

Test(txn_concurrency, transfers_pandora_cx3)
{
	tu_use_profile("cx3");
	transfers("pandora");
}

/* ---- two compute-node processes on the same pools ---------------------------------------- */

struct cn_arg {
	unsigned cn;
	const char *proto;
};

/* A compute node of its own: transport, attach, db open, coordinators; reports its deltas. */
static int cn_child(void *p, int rd, int wr)
{
	const struct cn_arg *arg = p;
	struct remora_db_cfg cfg = { .size = sizeof(cfg), .protocol = arg->proto,
				     .cn_id = (uint16_t)arg->cn, .n_mn = 3, .workers = 1,
				     .coords_per_worker = COORDS };
	static struct bank_co co[COORDS];
	struct remora_transport *tp;
	struct remora_worker *w;
	struct remora_db *db;
	struct bank_tally t;
	char why[200];
	int rc;

	(void)rd;
	rc = tu_transport_try((int)arg->cn, NULL, &tp);
	TU_CHILD_CHECK(rc == 0, "transport: %s", remora_strerror(rc));
	for (unsigned m = 0; m < 3; m++) {
		rc = remora_transport_attach(tp, &T.tu.mn[m].desc);
		TU_CHILD_CHECK(rc == 0, "attach %u: %s", m, remora_strerror(rc));
	}
	cfg.tp = tp;
	rc = remora_db_open(&cfg, &db);
	TU_CHILD_CHECK(rc == 0, "db open: %s", remora_db_errmsg(NULL));
	rc = remora_worker_create(db, 0, &w);
	TU_CHILD_CHECK(rc == 0, "worker: %s", remora_strerror(rc));
	for (unsigned c = 0; c < COORDS; c++)
		co[c] = (struct bank_co){ .w = w, .id = arg->cn * COORDS + c, .accounts = ACCOUNTS,
					  .transfers = TRANSFERS,
					  .rng = 0xc0ffee + arg->cn * 977 + c,
					  .strict = strcmp(arg->proto, "ford") != 0 };
	rc = bank_run(w, co, COORDS);
	TU_CHILD_CHECK(rc == 0, "scheduler: %s", remora_strerror(rc));
	TU_CHILD_CHECK(bank_tally(co, COORDS, &t, why, sizeof(why)) == 0, "%s", why);
	for (unsigned k = 0; k < ACCOUNTS; k++)
		TU_CHILD_CHECK(tu_send(wr, (uint64_t)(t.expect[k] - BANK_START)) == 0, "pipe");
	remora_worker_destroy(w);
	remora_db_close(db);
	remora_transport_close(tp);
	return 0;
}

static void two_cns(const char *proto)
{
	struct ttx_opts o = { .protocol = proto, .nmn = 3, .workers = 1, .coords = COORDS };
	struct cn_arg args[2] = { { .cn = 1, .proto = proto }, { .cn = 0, .proto = proto } };
	struct tu_proc procs[2];
	int64_t expect[ACCOUNTS];
	unsigned which = 0;

	ttx_open(&T, &o);
	for (uint64_t k = 0; k < ACCOUNTS; k++)
		cr_assert_eq(remora_db_load(T.w[0], 0, k, &(int64_t){ BANK_START }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
	for (unsigned i = 0; i < 2; i++)
		tu_spawn(&procs[i], cn_child, &args[i]);
	for (unsigned k = 0; k < ACCOUNTS; k++)
		expect[k] = BANK_START;
	for (unsigned i = 0; i < 2; i++)
		for (unsigned k = 0; k < ACCOUNTS; k++) {
			uint64_t d;

			if (tu_recv(procs[i].rd, &d))
				break;
			expect[k] += (int64_t)d;
		}
	cr_assert_eq(tu_proc_wait_all(procs, 2, &which), 0, "compute node %u failed", which);
	for (uint64_t k = 0; k < ACCOUNTS; k++) {
		uint64_t v;

		cr_assert_eq(ttx_get(&T, 0, 0, k, &v), 0);
		cr_assert_eq((int64_t)v, expect[k], "account %llu", (unsigned long long)k);
	}
	ttx_close(&T);
}

Test(txn_concurrency, two_compute_nodes_ford) { two_cns("ford"); }
Test(txn_concurrency, two_compute_nodes_pandora) { two_cns("pandora"); }
