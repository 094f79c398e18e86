/* SPDX-License-Identifier: MIT */
/*
 * The transaction engine's ThreadSanitizer target (criterion cannot run under TSan, see
 * tests/README.md): two compute-node "processes" worth of workers in one process -- threads,
 * each with a channel, a scheduler and several coroutine coordinators -- run transfers
 * between hot accounts (the bank of bank.h) on three in-process shm pools, while two loader
 * threads fill another table concurrently. Checks: the total balance is conserved, every
 * account matches the sum of the committed transfers, every committed read-only audit saw the
 * exact total (Pandora; FORD's version-only validation -- its Covert Locks bug -- lets audits
 * commit torn snapshots across threads, so there they are only counted), and every loaded
 * record is readable with its value.
 *
 * Usage: stress_txn ford|pandora   (exit 0 pass, 1 fail, 77 skip)
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <remora/transport.h>
#include <remora/tx.h>

#include "bank.h"
#include "senv.h"

#define NMN 3
#define POOL_BYTES (8u << 20)
#define THREADS 3
#define COORDS 4
#define ACCOUNTS 16
#define TRANSFERS 200
#define LOADERS 2
#define LOAD_KEYS 6000u

static const struct remora_table_def tables[] = {
	{ .name = "acct", .id = 0, .value_size = 8, .max_records = 64 },
	{ .name = "bulk", .id = 1, .value_size = 24, .max_records = LOAD_KEYS },
};

struct thr {
	struct remora_worker *w;
	struct bank_co *co; /* COORDS of them, for a transfer thread */
	unsigned loader;    /* 1-based loader index, or 0 */
	char why[160];
};

static void *thread_main(void *arg)
{
	struct thr *t = arg;
	unsigned char val[24];
	int rc;

	if (t->loader) {
		for (uint64_t k = t->loader - 1; k < LOAD_KEYS; k += LOADERS) {
			memset(val, (int)(k & 0xff), sizeof(val));
			memcpy(val, &k, sizeof(k));
			rc = remora_db_load(t->w, 1, k, val);
			if (rc) {
				snprintf(t->why, sizeof(t->why), "load: %s", remora_worker_errmsg(t->w));
				return NULL;
			}
		}
		if (remora_db_load_flush(t->w))
			snprintf(t->why, sizeof(t->why), "flush: %s", remora_worker_errmsg(t->w));
		return NULL;
	}
	rc = bank_run(t->w, t->co, COORDS);
	if (rc)
		snprintf(t->why, sizeof(t->why), "scheduler: %s", remora_strerror(rc));
	return NULL;
}

static int fail(const char *what, int rc)
{
	fprintf(stderr, "stress_txn: %s: %s\n", what, remora_strerror(rc));
	return 1;
}

static int check(struct remora_db *db, struct remora_worker *w, struct thr *th,
		 const struct bank_co *co)
{
	struct bank_tally t;
	struct remora_tx *tx;
	int64_t total = 0;
	char why[200];
	int rc;

	for (unsigned i = 0; i < THREADS + LOADERS; i++) {
		if (th[i].why[0]) {
			fprintf(stderr, "stress_txn: thread %u: %s\n", i, th[i].why);
			return 1;
		}
	}
	if (bank_tally(co, THREADS * COORDS, &t, why, sizeof(why))) {
		fprintf(stderr, "stress_txn: %s\n", why);
		return 1;
	}
	if (remora_db_load_count(db) != LOAD_KEYS + ACCOUNTS) {
		fprintf(stderr, "stress_txn: loaded %llu of %u\n",
			(unsigned long long)remora_db_load_count(db), LOAD_KEYS + ACCOUNTS);
		return 1;
	}
	rc = remora_tx_begin(w, REMORA_TX_READ_ONLY, &tx);
	for (unsigned k = 0; !rc && k < ACCOUNTS; k++) {
		int64_t v;

		rc = remora_tx_read(tx, 0, k, &v);
		if (!rc && v != t.expect[k]) {
			fprintf(stderr, "stress_txn: account %u = %lld, expected %lld\n", k,
				(long long)v, (long long)t.expect[k]);
			return 1;
		}
		total += v;
	}
	for (uint64_t k = 0; !rc && k < LOAD_KEYS; k += 37) {
		unsigned char v[24];
		uint64_t got;

		rc = remora_tx_read(tx, 1, k, v);
		memcpy(&got, v, sizeof(got));
		if (!rc && (got != k || v[23] != (k & 0xff))) {
			fprintf(stderr, "stress_txn: loaded key %llu reads back wrong\n",
				(unsigned long long)k);
			return 1;
		}
	}
	if (rc)
		return fail("final read", rc);
	remora_tx_commit(tx);
	if (total != (int64_t)ACCOUNTS * BANK_START || t.audits == 0) {
		fprintf(stderr, "stress_txn: total %lld, %u audits\n", (long long)total, t.audits);
		return 1;
	}
	printf("stress_txn %s: %u transfers, %u audits (%u torn), %u records loaded\n",
	       remora_db_protocol(db), t.committed, t.audits, t.torn, LOAD_KEYS);
	return 0;
}

static int run(struct remora_transport *tp, const char *proto)
{
	struct remora_db_format_cfg f = { .size = sizeof(f), .n_mn = NMN, .protocol = proto,
					  .tables = tables, .ntables = 2, .max_cn = 1,
					  .coords_per_cn = (THREADS + LOADERS) * COORDS,
					  .log_slot_bytes = 8192 };
	struct remora_db_cfg cfg = { .size = sizeof(cfg), .tp = tp, .protocol = proto,
				     .n_mn = NMN, .coords_per_worker = COORDS,
				     .workers = THREADS + LOADERS };
	static struct thr th[THREADS + LOADERS];
	static struct bank_co co[THREADS * COORDS];
	pthread_t tid[THREADS + LOADERS];
	struct remora_db *db;
	int rc, bad = 1;

	rc = remora_db_format_ex(tp, &f);
	if (rc)
		return fail(remora_db_errmsg(NULL), rc);
	rc = remora_db_open(&cfg, &db);
	if (rc)
		return fail(remora_db_errmsg(NULL), rc);
	memset(th, 0, sizeof(th));
	for (unsigned i = 0; i < THREADS + LOADERS; i++) {
		rc = remora_worker_create(db, i, &th[i].w);
		if (rc)
			goto out_workers;
		th[i].loader = i >= THREADS ? i - THREADS + 1 : 0;
		for (unsigned c = 0; i < THREADS && c < COORDS; c++)
			co[i * COORDS + c] = (struct bank_co){
				.w = th[i].w, .id = i * COORDS + c, .accounts = ACCOUNTS,
				.transfers = TRANSFERS, .rng = 77 + i * 1000 + c,
				.strict = strcmp(proto, "ford") != 0 };
		th[i].co = i < THREADS ? &co[i * COORDS] : NULL;
	}
	for (uint64_t k = 0; k < ACCOUNTS; k++)
		remora_db_load(th[0].w, 0, k, &(int64_t){ BANK_START });
	if (remora_db_load_flush(th[0].w))
		goto out_workers;
	for (unsigned i = 0; i < THREADS + LOADERS; i++)
		pthread_create(&tid[i], NULL, thread_main, &th[i]);
	for (unsigned i = 0; i < THREADS + LOADERS; i++)
		pthread_join(tid[i], NULL);
	bad = check(db, th[0].w, th, co);
out_workers:
	for (unsigned i = 0; i < THREADS + LOADERS; i++)
		remora_worker_destroy(th[i].w);
	remora_db_close(db);
	return bad;
}

int main(int argc, char **argv)
{
	const char *proto = argc > 1 ? argv[1] : "ford";
	struct senv e;
	int bad = senv_open(&e, "stress_txn", 'x', NMN, POOL_BYTES);

	if (bad)
		return bad;
	bad = run(e.tp, proto);
	senv_close(&e);
	return bad;
}
