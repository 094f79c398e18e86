/* SPDX-License-Identifier: MIT */
/*
 * Concurrent transfers between a few hot accounts, from several threads, each running several
 * coordinators as coroutines: the total balance is conserved, every committed read-only audit
 * sees the exact total (Pandora; FORD's version-only validation lets an audit commit a torn
 * snapshot, its Covert Locks bug, so there they are only counted), and no transfer gets lost (the number of committed transfers matches
 * the per-account deltas). Runs for ford and pandora; bounded work, no timing assertions.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ttx.h"

TestSuite(txn_concurrency, .fini = ttx_fini, .timeout = 120);

#define ACCOUNTS 24
#define START 1000
#define THREADS 2
#define COORDS 4
#define TRANSFERS 150   /* per coordinator */
#define ATTEMPTS 100000 /* per transfer, before the test calls it a livelock */

static struct ttx T;

struct co_arg {
	struct remora_worker *w;
	unsigned id;
	uint64_t rng;
	int64_t delta[ACCOUNTS]; /* what this coordinator's committed transfers did */
	unsigned committed, aborted, audits, torn;
	bool strict; /* a committed audit must see the exact total (not FORD: Covert Locks) */
	int fail;
	char why[160];
};

static void co_fail(struct co_arg *a, int rc, const char *what)
{
	if (!a->fail)
		snprintf(a->why, sizeof(a->why), "coordinator %u: %s: %s", a->id, what,
			 remora_strerror(rc));
	a->fail = 1;
}

/* One transfer; returns 0 committed, -REMORA_EABORT to retry, else a failure. */
static int transfer(struct co_arg *a, uint64_t from, uint64_t to, int64_t amount)
{
	struct remora_tx *tx;
	int64_t vf, vt;
	int rc = remora_tx_begin(a->w, 0, &tx);

	if (rc)
		return rc;
	rc = remora_tx_stage(tx, 0, from, REMORA_RW, &vf, NULL);
	if (!rc)
		rc = remora_tx_stage(tx, 0, to, REMORA_RW, &vt, NULL);
	if (!rc)
		rc = remora_tx_fetch(tx);
	if (!rc) {
		vf -= amount;
		vt += amount;
		rc = remora_tx_write(tx, 0, from, &vf);
	}
	if (!rc)
		rc = remora_tx_write(tx, 0, to, &vt);
	if (rc) {
		remora_tx_abort(tx);
		return rc;
	}
	return remora_tx_commit(tx);
}

/* Reads every account in one batch; a committed audit must see the exact total. */
static int audit(struct co_arg *a)
{
	int64_t v[ACCOUNTS], sum = 0;
	struct remora_tx *tx;
	int rc = remora_tx_begin(a->w, REMORA_TX_READ_ONLY, &tx);

	if (rc)
		return rc;
	for (unsigned i = 0; i < ACCOUNTS && !rc; i++)
		rc = remora_tx_stage(tx, 0, i, REMORA_RD, &v[i], NULL);
	if (!rc)
		rc = remora_tx_fetch(tx);
	if (rc) {
		remora_tx_abort(tx);
		return rc;
	}
	rc = remora_tx_commit(tx);
	if (rc)
		return rc;
	for (unsigned i = 0; i < ACCOUNTS; i++)
		sum += v[i];
	if (sum != (int64_t)ACCOUNTS * START) {
		/* FORD validates versions only (Covert Locks): an audit can commit a torn
		 * snapshot across threads. Counted for FORD, a failure for Pandora. */
		a->torn++;
		if (a->strict) {
			snprintf(a->why, sizeof(a->why), "coordinator %u: audit saw total %lld",
				 a->id, (long long)sum);
			a->fail = 1;
		}
	}
	a->audits++;
	return 0;
}

static void coordinator(void *p)
{
	struct co_arg *a = p;

	for (unsigned n = 0; n < TRANSFERS && !a->fail; n++) {
		uint64_t from = tu_rand64(&a->rng) % ACCOUNTS;
		uint64_t to = (from + 1 + tu_rand64(&a->rng) % (ACCOUNTS - 1)) % ACCOUNTS;
		int64_t amount = (int64_t)(tu_rand64(&a->rng) % 50);
		unsigned attempt;
		int rc = -REMORA_EABORT;

		for (attempt = 0; attempt < ATTEMPTS && rc == -REMORA_EABORT; attempt++) {
			rc = transfer(a, from, to, amount);
			if (rc == -REMORA_EABORT) {
				/* Let the lock holder finish: random backoff, growing with attempts. */
				unsigned spins = 1 + (unsigned)(tu_rand64(&a->rng) %
								 (2u << (attempt < 6 ? attempt : 6)));

				a->aborted++;
				while (spins--)
					remora_yield();
			}
		}
		if (rc) {
			co_fail(a, rc, attempt == ATTEMPTS ? "livelock" : "transfer");
			break;
		}
		a->committed++;
		a->delta[from] -= amount;
		a->delta[to] += amount;
		if (n % 10 == 0) {
			/* Audits meet locks often (pandora aborts on them): retry a little. */
			rc = -REMORA_EABORT;
			for (unsigned k = 0; k < 200 && rc == -REMORA_EABORT; k++) {
				rc = audit(a);
				if (rc == -REMORA_EABORT)
					remora_yield();
			}
			if (rc && rc != -REMORA_EABORT)
				co_fail(a, rc, "audit");
		}
	}
}

struct th_arg {
	struct remora_worker *w;
	struct co_arg co[COORDS];
	int rc;
};

static void *thread_main(void *p)
{
	struct th_arg *t = p;
	struct remora_sched *s = remora_worker_sched(t->w);

	for (unsigned i = 0; i < COORDS; i++) {
		t->rc = remora_sched_spawn(s, coordinator, &t->co[i]);
		if (t->rc)
			return NULL;
	}
	t->rc = remora_sched_run(s);
	return NULL;
}

static void transfers(const char *proto)
{
	struct ttx_opts o = { .protocol = proto, .nmn = 3, .workers = THREADS, .coords = COORDS };
	static struct th_arg th[THREADS];
	pthread_t tid[THREADS];
	int64_t expect[ACCOUNTS], total = 0;
	unsigned committed = 0, aborted = 0, audits = 0, torn = 0;

	ttx_open(&T, &o);
	for (uint64_t k = 0; k < ACCOUNTS; k++)
		cr_assert_eq(remora_db_load(T.w[0], 0, k, &(int64_t){ START }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
	memset(th, 0, sizeof(th));
	for (unsigned i = 0; i < THREADS; i++) {
		th[i].w = T.w[i];
		for (unsigned c = 0; c < COORDS; c++)
			th[i].co[c] = (struct co_arg){ .w = T.w[i], .id = i * COORDS + c,
						       .rng = 0x5eed + i * 131 + c,
						       .strict = strcmp(proto, "ford") != 0 };
		cr_assert_eq(pthread_create(&tid[i], NULL, thread_main, &th[i]), 0);
	}
	for (unsigned i = 0; i < THREADS; i++)
		pthread_join(tid[i], NULL);
	for (unsigned k = 0; k < ACCOUNTS; k++)
		expect[k] = START;
	for (unsigned i = 0; i < THREADS; i++) {
		cr_assert_eq(th[i].rc, 0);
		for (unsigned c = 0; c < COORDS; c++) {
			struct co_arg *a = &th[i].co[c];

			cr_assert_not(a->fail, "%s", a->why);
			committed += a->committed;
			aborted += a->aborted;
			audits += a->audits;
			torn += a->torn;
			for (unsigned k = 0; k < ACCOUNTS; k++)
				expect[k] += a->delta[k];
		}
	}
	cr_assert_eq(committed, THREADS * COORDS * TRANSFERS);
	cr_assert_gt(audits, 0, "no audit ever committed: the audit check did not run");
	for (uint64_t k = 0; k < ACCOUNTS; k++) {
		uint64_t v;

		cr_assert_eq(ttx_get(&T, 0, 0, k, &v), 0);
		cr_assert_eq((int64_t)v, expect[k], "account %llu: %lld, expected %lld",
			     (unsigned long long)k, (long long)(int64_t)v, (long long)expect[k]);
		total += (int64_t)v;
	}
	cr_assert_eq(total, (int64_t)ACCOUNTS * START);
	cr_log_info("%s: %u transfers committed, %u aborted attempts, %u audits (%u torn)", proto,
		    committed, aborted, audits, torn);
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
	static struct th_arg th;
	struct remora_transport *tp;
	struct remora_db *db;
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
	memset(&th, 0, sizeof(th));
	rc = remora_worker_create(db, 0, &th.w);
	TU_CHILD_CHECK(rc == 0, "worker: %s", remora_strerror(rc));
	for (unsigned c = 0; c < COORDS; c++)
		th.co[c] = (struct co_arg){ .w = th.w, .id = arg->cn * COORDS + c,
					    .rng = 0xc0ffee + arg->cn * 977 + c,
					    .strict = strcmp(arg->proto, "ford") != 0 };
	thread_main(&th);
	TU_CHILD_CHECK(th.rc == 0, "scheduler: %s", remora_strerror(th.rc));
	for (unsigned c = 0; c < COORDS; c++) {
		TU_CHILD_CHECK(!th.co[c].fail, "%s", th.co[c].why);
		TU_CHILD_CHECK(th.co[c].committed == TRANSFERS, "coordinator %u committed %u", c,
			       th.co[c].committed);
	}
	for (unsigned k = 0; k < ACCOUNTS; k++) {
		int64_t d = 0;

		for (unsigned c = 0; c < COORDS; c++)
			d += th.co[c].delta[k];
		TU_CHILD_CHECK(tu_send(wr, (uint64_t)d) == 0, "pipe");
	}
	remora_worker_destroy(th.w);
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
		cr_assert_eq(remora_db_load(T.w[0], 0, k, &(int64_t){ START }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
	for (unsigned i = 0; i < 2; i++)
		tu_spawn(&procs[i], cn_child, &args[i]);
	for (unsigned k = 0; k < ACCOUNTS; k++)
		expect[k] = START;
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
