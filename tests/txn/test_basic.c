/* SPDX-License-Identifier: MIT */
/*
 * Transaction semantics on one process with in-process pools: read / update / insert /
 * delete, -REMORA_ENOTFOUND vs -REMORA_EABORT, poisoned handles, loading, and the checks
 * db open and format make on the pools. Every semantic test runs for ford and pandora.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ttx.h"

TestSuite(txn_basic, .fini = ttx_fini, .timeout = TU_TIMEOUT);

static struct ttx T;

static void open_proto(const char *proto, unsigned nmn, unsigned workers)
{
	struct ttx_opts o = { .protocol = proto, .nmn = nmn, .workers = workers };

	ttx_open(&T, &o);
}

/* ---- read / update / insert / delete --------------------------------------------------- */

static void crud(const char *proto, unsigned nmn)
{
	struct remora_tx *tx;
	uint64_t v = 0;
	int rc;

	open_proto(proto, nmn, 1);
	cr_assert_eq(ttx_get(&T, 0, 0, 7, &v), -REMORA_ENOTFOUND);
	ttx_put(&T, 0, 0, 7, 70);
	cr_assert_eq(ttx_get(&T, 0, 0, 7, &v), 0);
	cr_assert_eq(v, 70);
	ttx_put(&T, 0, 0, 7, 71);
	cr_assert_eq(ttx_get(&T, 0, 0, 7, &v), 0);
	cr_assert_eq(v, 71);

	/* Delete, then the key is absent; insert brings it back. */
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_delete(tx, 0, 7), 0);
	cr_assert_eq(remora_tx_read(tx, 0, 7, &v), -REMORA_ENOTFOUND, "own delete is visible");
	cr_assert_eq(remora_tx_commit(tx), 0);
	cr_assert_eq(ttx_get(&T, 0, 0, 7, &v), -REMORA_ENOTFOUND);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_delete(tx, 0, 7), -REMORA_ENOTFOUND, "delete of a missing key");
	v = 72;
	cr_assert_eq(remora_tx_insert(tx, 0, 7, &v), 0, "a deleted key can be inserted again");
	cr_assert_eq(remora_tx_insert(tx, 0, 7, &v), -REMORA_EEXIST, "insert of a present key");
	v = 0;
	cr_assert_eq(remora_tx_read(tx, 0, 7, &v), 0, "own insert is visible");
	cr_assert_eq(v, 72);
	cr_assert_eq(remora_tx_commit(tx), 0);
	cr_assert_eq(ttx_get(&T, 0, 0, 7, &v), 0);
	cr_assert_eq(v, 72);

	/* Many keys across buckets and nodes. */
	for (uint64_t k = 100; k < 300; k++)
		ttx_put(&T, 0, 0, k, k * 3);
	for (uint64_t k = 100; k < 300; k++) {
		rc = ttx_get(&T, 0, 0, k, &v);
		cr_assert_eq(rc, 0, "key %llu", (unsigned long long)k);
		cr_assert_eq(v, k * 3);
	}
	ttx_close(&T);
}

Test(txn_basic, crud_ford) { crud("ford", 1); }
Test(txn_basic, crud_pandora) { crud("pandora", 1); }
Test(txn_basic, crud_ford_3mn) { crud("ford", 3); }
Test(txn_basic, crud_pandora_3mn) { crud("pandora", 3); }

/* An aborted transaction leaves no trace: its insert, update and delete are all undone. */
static void abort_undoes(const char *proto)
{
	struct remora_tx *tx;
	uint64_t v;

	open_proto(proto, 2, 1);
	ttx_put(&T, 0, 0, 1, 10);
	ttx_put(&T, 0, 0, 2, 20);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 1, &v), 0);
	v = 11;
	cr_assert_eq(remora_tx_write(tx, 0, 1, &v), 0);
	cr_assert_eq(remora_tx_delete(tx, 0, 2), 0);
	v = 30;
	cr_assert_eq(remora_tx_insert(tx, 0, 3, &v), 0);
	remora_tx_abort(tx);
	cr_assert_eq(remora_worker_last_abort(T.w[0]), REMORA_ABORT_USER);
	cr_assert_eq(ttx_get(&T, 0, 0, 1, &v), 0);
	cr_assert_eq(v, 10);
	cr_assert_eq(ttx_get(&T, 0, 0, 2, &v), 0);
	cr_assert_eq(v, 20);
	cr_assert_eq(ttx_get(&T, 0, 0, 3, &v), -REMORA_ENOTFOUND);
	/* The aborted insert left a tombstone record; inserting again reuses it. */
	ttx_put(&T, 0, 0, 3, 33);
	cr_assert_eq(ttx_get(&T, 0, 0, 3, &v), 0);
	cr_assert_eq(v, 33);
	ttx_close(&T);
}

Test(txn_basic, abort_undoes_ford) { abort_undoes("ford"); }
Test(txn_basic, abort_undoes_pandora) { abort_undoes("pandora"); }

/* ---- not-found vs abort, poisoning ----------------------------------------------------- */

static void notfound_is_not_abort(const char *proto)
{
	struct remora_tx *tx;
	uint64_t v = 5;

	open_proto(proto, 1, 1);
	ttx_put(&T, 0, 0, 1, 10);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read(tx, 0, 99, &v), -REMORA_ENOTFOUND);
	cr_assert_eq(v, 5, "output untouched on failure");
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 98, &v), -REMORA_ENOTFOUND);
	cr_assert_eq(remora_tx_write(tx, 0, 98, &v), -REMORA_ENOTFOUND);
	/* The transaction goes on after not-found. */
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 1, &v), 0);
	v = 12;
	cr_assert_eq(remora_tx_write(tx, 0, 1, &v), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	cr_assert_eq(ttx_get(&T, 0, 0, 1, &v), 0);
	cr_assert_eq(v, 12);
	ttx_close(&T);
}

Test(txn_basic, notfound_is_not_abort_ford) { notfound_is_not_abort("ford"); }
Test(txn_basic, notfound_is_not_abort_pandora) { notfound_is_not_abort("pandora"); }

/* A conflict aborts; the handle is then poisoned: every call but abort/commit refuses. */
static void poisoned(const char *proto)
{
	struct remora_tx *a, *b;
	uint64_t v;

	open_proto(proto, 1, 2);
	ttx_put(&T, 0, 0, 1, 10);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &a), 0);
	cr_assert_eq(remora_tx_read_for_update(a, 0, 1, &v), 0);
	cr_assert_eq(remora_tx_begin(T.w[1], 0, &b), 0);
	cr_assert_eq(remora_tx_read_for_update(b, 0, 1, &v), -REMORA_EABORT);
	cr_assert_eq(remora_worker_last_abort(T.w[1]), REMORA_ABORT_LOCKED);
	cr_assert_eq(remora_tx_read(b, 0, 1, &v), -REMORA_EPOISONED);
	cr_assert_eq(remora_tx_write(b, 0, 1, &v), -REMORA_EPOISONED);
	cr_assert_eq(remora_tx_insert(b, 0, 2, &v), -REMORA_EPOISONED);
	cr_assert_eq(remora_tx_delete(b, 0, 1), -REMORA_EPOISONED);
	cr_assert_eq(remora_tx_fetch(b), -REMORA_EPOISONED);
	cr_assert_eq(remora_tx_commit(b), -REMORA_EABORT, "commit of a poisoned tx says why");
	/* The loser released nothing of the winner's: the winner commits. */
	v = 11;
	cr_assert_eq(remora_tx_write(a, 0, 1, &v), 0);
	cr_assert_eq(remora_tx_commit(a), 0);
	cr_assert_eq(ttx_get(&T, 1, 0, 1, &v), 0);
	cr_assert_eq(v, 11);
	ttx_close(&T);
}

Test(txn_basic, poisoned_ford) { poisoned("ford"); }
Test(txn_basic, poisoned_pandora) { poisoned("pandora"); }

Test(txn_basic, misuse_is_refused)
{
	struct remora_tx *tx, *tx2;
	uint64_t v = 1;

	open_proto("pandora", 1, 1);
	ttx_put(&T, 0, 0, 1, 10);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx2), -EBUSY, "one tx per coordinator");
	cr_assert_eq(remora_tx_read(tx, 0, 1, &v), 0);
	cr_assert_eq(remora_tx_write(tx, 0, 1, &v), -EINVAL, "write needs an RW fetch");
	cr_assert_eq(remora_tx_read(tx, 0, 1, &v), -REMORA_EPOISONED);
	remora_tx_abort(tx);
	cr_assert_eq(remora_tx_begin(T.w[0], REMORA_TX_READ_ONLY, &tx), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 1, &v), -EINVAL);
	remora_tx_abort(tx);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read(tx, 31, 1, &v), -EINVAL, "no such table");
	remora_tx_abort(tx);
	ttx_close(&T);
}

/* Staged accesses are fetched together and fill every buffer and found flag. */
Test(txn_basic, stage_fetch)
{
	struct remora_tx *tx;
	uint64_t v[4] = { 0 };
	bool f[4] = { false, true, false, false };

	open_proto("ford", 3, 1);
	ttx_put(&T, 0, 0, 1, 10);
	ttx_put(&T, 0, 0, 3, 30);
	ttx_put(&T, 0, 0, 4, 40);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_stage(tx, 0, 1, REMORA_RD, &v[0], &f[0]), 0);
	cr_assert_eq(remora_tx_stage(tx, 0, 2, REMORA_RD, &v[1], &f[1]), 0);
	cr_assert_eq(remora_tx_stage(tx, 0, 3, REMORA_RW, &v[2], &f[2]), 0);
	cr_assert_eq(remora_tx_stage(tx, 0, 4, REMORA_RW, &v[3], &f[3]), 0);
	cr_assert_eq(remora_tx_fetch(tx), 0);
	cr_assert(f[0] && !f[1] && f[2] && f[3]);
	cr_assert_eq(v[0], 10);
	cr_assert_eq(v[2], 30);
	cr_assert_eq(v[3], 40);
	v[2] = 31;
	cr_assert_eq(remora_tx_write(tx, 0, 3, &v[2]), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	cr_assert_eq(ttx_get(&T, 0, 0, 3, &v[0]), 0);
	cr_assert_eq(v[0], 31);
	ttx_close(&T);
}

/* ---- loading --------------------------------------------------------------------------- */

Test(txn_basic, bulk_load)
{
	static const struct remora_table_def tabs[] = {
		{ .name = "a", .id = 0, .value_size = 8, .max_records = 5000 },
		{ .name = "b", .id = 3, .value_size = 40, .max_records = 2000 },
	};
	struct ttx_opts o = { .protocol = "pandora", .nmn = 3, .tables = tabs, .ntables = 2 };
	unsigned char val[40];
	uint64_t v;

	ttx_open(&T, &o);
	cr_assert_eq(remora_db_table(T.db, "b"), 3);
	cr_assert_eq(remora_db_table(T.db, "zz"), -REMORA_ENOTFOUND);
	for (uint64_t k = 0; k < 5000; k++) {
		cr_assert_eq(remora_db_load(T.w[0], 0, k, &(uint64_t){ k + 1 }), 0);
		if (k < 2000) {
			memset(val, (int)k, sizeof(val));
			cr_assert_eq(remora_db_load(T.w[0], 3, k, val), 0);
		}
	}
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
	cr_assert_eq(remora_db_load_count(T.db), 7000);
	for (uint64_t k = 0; k < 5000; k += 7) {
		cr_assert_eq(ttx_get(&T, 0, 0, k, &v), 0, "key %llu", (unsigned long long)k);
		cr_assert_eq(v, k + 1);
	}
	cr_assert_eq(ttx_get(&T, 0, 0, 5000, &v), -REMORA_ENOTFOUND);
	ttx_close(&T);
}

/* ---- format and open checks ------------------------------------------------------------ */

Test(txn_basic, format_refuses_too_big)
{
	static const struct remora_table_def big[] = {
		{ .name = "big", .id = 0, .value_size = 1000, .max_records = 100000 },
	};
	int rc;

	tu_open(&T.tu, 0, 2, 12u << 20);
	rc = remora_db_format(T.tu.tp, 2, 0, "ford", big, 1);
	cr_assert_eq(rc, -REMORA_EFULL, "got %s", remora_strerror(rc));
	cr_assert(strstr(remora_db_errmsg(NULL), "bytes per memory node"), "%s",
		  remora_db_errmsg(NULL));
	tu_close(&T.tu);
}

Test(txn_basic, format_refuses_bad_tables)
{
	struct remora_table_def bad[2] = {
		{ .name = "x", .id = 0, .value_size = 8, .max_records = 10 },
		{ .name = "x", .id = 1, .value_size = 8, .max_records = 10 },
	};

	tu_open(&T.tu, 0, 1, 1u << 20);
	cr_assert_eq(remora_db_format(T.tu.tp, 1, 0, "ford", bad, 2), -REMORA_ECONFIG);
	bad[1].id = 0;
	strcpy(bad[1].name, "y");
	cr_assert_eq(remora_db_format(T.tu.tp, 1, 0, "ford", bad, 2), -REMORA_ECONFIG);
	cr_assert_eq(remora_db_format(T.tu.tp, 1, 0, "nope", bad, 1), -REMORA_ECONFIG);
	cr_assert(strstr(remora_db_errmsg(NULL), "ford, pandora"), "%s", remora_db_errmsg(NULL));
	tu_close(&T.tu);
}

static int open_db(const char *proto, uint16_t n_mn, struct remora_db **db)
{
	struct remora_db_cfg cfg = { .size = sizeof(cfg), .tp = T.tu.tp, .protocol = proto,
				     .n_mn = n_mn, .workers = 1, .coords_per_worker = 1 };

	return remora_db_open(&cfg, db);
}

Test(txn_basic, layout_mismatch_refused_pool_untouched)
{
	static const struct remora_table_def tab[] = {
		{ .name = "t", .id = 0, .value_size = 8, .max_records = 100 },
	};
	struct remora_db *db = NULL;
	uint64_t bytes = 12u << 20;
	unsigned char *snap;
	int rc;

	tu_open(&T.tu, 0, 2, bytes);
	/* Never formatted: refused. */
	rc = open_db("ford", 2, &db);
	cr_assert_eq(rc, -REMORA_ELAYOUT, "got %s", remora_strerror(rc));
	cr_assert_null(db);
	cr_assert_eq(remora_db_format(T.tu.tp, 2, 0, "ford", tab, 1), 0);
	rc = open_db("ford", 2, &db);
	cr_assert_eq(rc, 0, "%s", remora_db_errmsg(NULL));
	remora_db_close(db);
	db = NULL;

	/* Another layout version on node 1: refused with a one-line message, nothing written. */
	((uint32_t *)(void *)T.tu.mn[1].base)[2] += 1;
	snap = malloc(bytes * 2);
	memcpy(snap, T.tu.mn[0].base, bytes);
	memcpy(snap + bytes, T.tu.mn[1].base, bytes);
	rc = open_db("pandora", 2, &db);
	cr_assert_eq(rc, -REMORA_ELAYOUT);
	cr_assert(strstr(remora_db_errmsg(NULL), "layout version"), "%s", remora_db_errmsg(NULL));
	cr_assert_null(strchr(remora_db_errmsg(NULL), '\n'));
	cr_assert(memcmp(snap, T.tu.mn[0].base, bytes) == 0, "node 0 untouched");
	cr_assert(memcmp(snap + bytes, T.tu.mn[1].base, bytes) == 0, "node 1 untouched");
	((uint32_t *)(void *)T.tu.mn[1].base)[2] -= 1;

	/* Wrong magic. */
	T.tu.mn[0].base[0] ^= 0xff;
	cr_assert_eq(open_db("ford", 2, &db), -REMORA_ELAYOUT);
	cr_assert(strstr(remora_db_errmsg(NULL), "magic"), "%s", remora_db_errmsg(NULL));
	T.tu.mn[0].base[0] ^= 0xff;
	/* Opened with another node count. */
	cr_assert_eq(open_db("ford", 1, &db), -REMORA_ECONFIG);
	/* Protocols that are not built (FaRM), and misspelt ones. */
	cr_assert_eq(open_db("farm", 2, &db), -REMORA_ECONFIG);
	cr_assert(strstr(remora_db_errmsg(NULL), "unknown protocol 'farm'"), "%s",
		  remora_db_errmsg(NULL));
	cr_assert_eq(open_db("fordd", 2, &db), -REMORA_ECONFIG);
	cr_assert(strstr(remora_db_errmsg(NULL), "ford, pandora"), "%s", remora_db_errmsg(NULL));
	cr_assert_eq(open_db("pandora", 2, &db), 0, "%s", remora_db_errmsg(NULL));
	remora_db_close(db);
	free(snap);
	tu_close(&T.tu);
}

Test(txn_basic, unknown_mutation_refused)
{
	static const struct remora_table_def tab[] = {
		{ .name = "t", .id = 0, .value_size = 8, .max_records = 100 },
	};
	struct remora_db *db = NULL;

	tu_open(&T.tu, 0, 1, 12u << 20);
	cr_assert_eq(remora_db_format(T.tu.tp, 1, 0, "ford", tab, 1), 0);
	setenv("REMORA_MUTATE", "covert_locks,early_unlok", 1);
	cr_assert_eq(open_db("pandora", 1, &db), -REMORA_ECONFIG);
	cr_assert(strstr(remora_db_errmsg(NULL), "early_unlok"), "%s", remora_db_errmsg(NULL));
	setenv("REMORA_MUTATE", "covert_locks,early_unlock", 1);
	cr_assert_eq(open_db("pandora", 1, &db), 0);
	unsetenv("REMORA_MUTATE");
	remora_db_close(db);
	tu_close(&T.tu);
}
