/* SPDX-License-Identifier: MIT */
/*
 * OOCC's strict-serializability stress test (docs/oocc.md, "Checks"): writers keep every pair
 * {a_i, b_i} equal (both +1 in one read-write transaction); read-only transactions READ a_i,
 * wait a random time below the read lease (yielding to the other coordinators, while two
 * threads per core preempt each other), READ b_i, and count a committed a_i != b_i as a
 * violation. With the protocol as built there must be none; each negative control switches a
 * mutation in (the writer's lease wait off, or rv > ww) and must see violations.
 *
 * Usage: stress_oocc [none|oocc_no_lease_wait|oocc_rv_gt_ww]   (exit 0 pass, 1 fail, 77 skip)
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <remora/sched.h>
#include <remora/transport.h>
#include <remora/tx.h>

#include "senv.h"

#define NMN 2
#define POOL_BYTES (8u << 20)
#define PAIRS 4
#define THREADS 4 /* 2 writer threads, 2 reader threads */
#define COORDS 2
#define LEASE_US 2000u

static const struct remora_table_def tables[] = {
	{ .name = "pairs", .id = 0, .value_size = 8, .max_records = 2 * PAIRS },
};

static uint64_t run_until_ns;
static bool stop_at_violation;
static uint64_t violations, ro_commits, rw_commits, ro_aborts;
static char failure[200];

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

struct co {
	struct remora_worker *w;
	bool writer;
	uint64_t rng;
};

static void note_fail(const char *what, int rc)
{
	if (!failure[0])
		snprintf(failure, sizeof(failure), "%s: %s", what, remora_strerror(rc));
}

static void writer_tx(struct co *c)
{
	uint64_t i = rnd(&c->rng) % PAIRS, a, b;
	struct remora_tx *tx;
	bool fa, fb;
	int rc = remora_tx_begin(c->w, 0, &tx);

	if (!rc)
		rc = remora_tx_stage(tx, 0, 2 * i, REMORA_RW, &a, &fa);
	if (!rc)
		rc = remora_tx_stage(tx, 0, 2 * i + 1, REMORA_RW, &b, &fb);
	if (!rc)
		rc = remora_tx_fetch(tx);
	if (!rc) {
		a++, b++;
		rc = remora_tx_write(tx, 0, 2 * i, &a);
	}
	if (!rc)
		rc = remora_tx_write(tx, 0, 2 * i + 1, &b);
	rc = rc ? (remora_tx_abort(tx), rc) : remora_tx_commit(tx);
	if (rc == 0)
		__atomic_fetch_add(&rw_commits, 1, __ATOMIC_RELAXED);
	else if (rc != -REMORA_EABORT)
		note_fail("writer", rc);
}

static void reader_tx(struct co *c)
{
	uint64_t i = rnd(&c->rng) % PAIRS, a = 0, b = 0;
	uint64_t pause = rnd(&c->rng) % (LEASE_US * 900u), until;
	struct remora_tx *tx;
	int rc = remora_tx_begin(c->w, REMORA_TX_READ_ONLY, &tx);

	if (!rc)
		rc = remora_tx_read(tx, 0, 2 * i, &a);
	for (until = now_ns() + pause; !rc && now_ns() < until;)
		remora_yield();
	if (!rc)
		rc = remora_tx_read(tx, 0, 2 * i + 1, &b);
	rc = rc ? (remora_tx_abort(tx), rc) : remora_tx_commit(tx);
	if (rc == 0) {
		__atomic_fetch_add(&ro_commits, 1, __ATOMIC_RELAXED);
		if (a != b)
			__atomic_fetch_add(&violations, 1, __ATOMIC_RELAXED);
	} else if (rc == -REMORA_EABORT) {
		__atomic_fetch_add(&ro_aborts, 1, __ATOMIC_RELAXED);
	} else {
		note_fail("reader", rc);
	}
}

static void coordinator(void *arg)
{
	struct co *c = arg;

	while (now_ns() < run_until_ns && !failure[0] &&
	       !(stop_at_violation && __atomic_load_n(&violations, __ATOMIC_RELAXED))) {
		if (c->writer)
			writer_tx(c);
		else
			reader_tx(c);
	}
}

static void *thread_main(void *arg)
{
	struct co *c = arg;
	struct remora_sched *s = remora_worker_sched(c[0].w);

	for (unsigned i = 0; i < COORDS; i++)
		if (remora_sched_spawn(s, coordinator, &c[i]))
			return NULL;
	remora_sched_run(s);
	return NULL;
}

static int run(struct remora_transport *tp, bool negative)
{
	struct remora_db_format_cfg f = { .size = sizeof(f), .n_mn = NMN, .protocol = "oocc",
					  .tables = tables, .ntables = 1, .max_cn = 1,
					  .coords_per_cn = THREADS * COORDS, .log_slot_bytes = 8192 };
	struct remora_db_cfg cfg = { .size = sizeof(cfg), .tp = tp, .protocol = "oocc",
				     .n_mn = NMN, .coords_per_worker = COORDS, .workers = THREADS };
	static struct co co[THREADS][COORDS];
	struct remora_worker *w[THREADS] = { 0 };
	pthread_t tid[THREADS];
	struct remora_db *db;
	int rc, bad = 1;

	rc = remora_db_format_ex(tp, &f);
	if (!rc)
		rc = remora_db_open(&cfg, &db);
	if (rc)
		return fprintf(stderr, "stress_oocc: %s\n", remora_db_errmsg(NULL)), 1;
	for (unsigned t = 0; t < THREADS; t++) {
		if (remora_worker_create(db, t, &w[t]))
			goto out;
		for (unsigned c = 0; c < COORDS; c++)
			co[t][c] = (struct co){ .w = w[t], .writer = t < THREADS / 2,
						.rng = 0x9e3779b97f4a7c15u * (t * COORDS + c + 1) };
	}
	for (uint64_t k = 0; k < 2 * PAIRS; k++)
		remora_db_load(w[0], 0, k, &(uint64_t){ 0 });
	if (remora_db_load_flush(w[0]))
		goto out;
	/* the negative controls run until they see a violation, at most 8 s */
	stop_at_violation = negative;
	/* a negative control stops at its first violation; the long bound only matters on a loaded
	 * host, where the races it needs come rarely */
	run_until_ns = now_ns() + (negative ? 25000000000u : 2000000000u);
	for (unsigned t = 0; t < THREADS; t++)
		pthread_create(&tid[t], NULL, thread_main, co[t]);
	for (unsigned t = 0; t < THREADS; t++)
		pthread_join(tid[t], NULL);
	printf("stress_oocc %s: %llu read-write commits, %llu read-only commits, %llu read-only "
	       "aborts, %llu violations\n", negative ? getenv("REMORA_MUTATE") : "oocc",
	       (unsigned long long)rw_commits, (unsigned long long)ro_commits,
	       (unsigned long long)ro_aborts, (unsigned long long)violations);
	if (failure[0])
		fprintf(stderr, "stress_oocc: %s\n", failure);
	else if (!rw_commits || !ro_commits)
		fprintf(stderr, "stress_oocc: no progress\n");
	else if (negative && !violations)
		fprintf(stderr, "stress_oocc: the negative control saw no violation\n");
	else if (!negative && violations)
		fprintf(stderr, "stress_oocc: strict serializability violated\n");
	else
		bad = 0;
out:
	for (unsigned t = 0; t < THREADS; t++)
		if (w[t])
			remora_worker_destroy(w[t]);
	remora_db_close(db);
	return bad;
}

int main(int argc, char **argv)
{
	const char *mutation = argc > 1 ? argv[1] : "none";
	char oocc[64];

	setenv("REMORA_MUTATE", mutation, 1);
	snprintf(oocc, sizeof(oocc), "lease=%uus,delta_ppm=1000", LEASE_US);
	setenv("REMORA_OOCC", oocc, 1);
	struct senv e;
	int bad = senv_open(&e, "stress_oocc", 'o', NMN, POOL_BYTES);

	if (bad)
		return bad;
	bad = run(e.tp, strcmp(mutation, "none") != 0);
	senv_close(&e);
	return bad;
}
