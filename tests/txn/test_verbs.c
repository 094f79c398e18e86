/* SPDX-License-Identifier: MIT */
/*
 * Exact verbs per transaction shape, read from the transport counters: the round trips of
 * the digests (FORD/Pandora: cached read-write record = CAS + READ in one doorbell, cached
 * read = one READ, validation = one READ of 8 B (FORD) or 16 B (Pandora), ...).
 */
#include <stdlib.h>
#include <string.h>

#include "ttx.h"

TestSuite(txn_verbs, .fini = ttx_fini, .timeout = TU_TIMEOUT);

static struct ttx T;

/* Exact verbs of a path that uses no FAA. */
#define VC_EQ(v, r, w, c, db) TTX_VC_EQ(v, r, w, c, 0, db)

static void open3(const char *proto)
{
	struct ttx_opts o = { .protocol = proto, .nmn = 3 };

	ttx_open(&T, &o);
	for (uint64_t k = 1; k <= 4; k++)
		cr_assert_eq(remora_db_load(T.w[0], 0, k, &(uint64_t){ k * 10 }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
}

/* Read-write record: execution, then commit; the first access is uncached. */
static void rw_record(const char *proto)
{
	struct remora_counters c0, c1, c2;
	struct remora_tx *tx;
	struct ttx_vc v;
	uint64_t x;

	open3(proto);
	for (int pass = 0; pass < 2; pass++) {
		cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
		c0 = ttx_counters(&T, 0);
		cr_assert_eq(remora_tx_read_for_update(tx, 0, 1, &x), 0);
		c1 = ttx_counters(&T, 0);
		v = ttx_vc(&c0, &c1);
		VC_EQ(v, 1, 0, 1, 1); /* cached (the loader filled the cache): CAS + READ, 1 doorbell */
		x++;
		cr_assert_eq(remora_tx_write(tx, 0, 1, &x), 0);
		cr_assert_eq(remora_tx_commit(tx), 0);
		c2 = ttx_counters(&T, 0);
		v = ttx_vc(&c1, &c2);
		/* log: 3 WRITEs (FORD: every replica node; Pandora: f+1 log servers), commit: one
		 * WRITE per replica, unlock: one WRITE; no validation (nothing read unlocked). */
		VC_EQ(v, 0, 7, 0, 3);
	}
	ttx_close(&T);
}

Test(txn_verbs, rw_record_ford) { rw_record("ford"); }

/* Without the address cache every access first READs the key's bucket. */
static void uncached(const char *proto)
{
	struct remora_counters c0, c1;
	struct remora_tx *tx;
	struct ttx_vc v;
	uint64_t x;

	setenv("REMORA_ADDR_CACHE", "0", 1);
	open3(proto);
	unsetenv("REMORA_ADDR_CACHE");
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 1, &x), 0);
	cr_assert_eq(remora_tx_read(tx, 0, 2, &x), 0);
	c1 = ttx_counters(&T, 0);
	v = ttx_vc(&c0, &c1);
	VC_EQ(v, 4, 0, 1, 4); /* per key: bucket READ, then CAS + READ (RW) or READ (RD) */
	cr_assert_eq(remora_tx_commit(tx), 0);
	ttx_close(&T);
}

Test(txn_verbs, uncached_ford) { uncached("ford"); }
Test(txn_verbs, uncached_pandora) { uncached("pandora"); }
Test(txn_verbs, rw_record_pandora) { rw_record("pandora"); }

/* Read-only record: one READ, then the validation READ (8 B FORD, 16 B Pandora). */
static void ro_record(const char *proto, uint64_t check_bytes)
{
	struct remora_counters c0, c1, c2;
	struct remora_tx *tx;
	struct ttx_vc v;
	uint64_t x;

	open3(proto);
	ttx_get(&T, 0, 0, 2, &x); /* warm the address cache */
	cr_assert_eq(remora_tx_begin(T.w[0], REMORA_TX_READ_ONLY, &tx), 0);
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_read(tx, 0, 2, &x), 0);
	cr_assert_eq(x, 20);
	c1 = ttx_counters(&T, 0);
	v = ttx_vc(&c0, &c1);
	VC_EQ(v, 1, 0, 0, 1);
	cr_assert_eq(remora_tx_commit(tx), 0);
	c2 = ttx_counters(&T, 0);
	v = ttx_vc(&c1, &c2);
	VC_EQ(v, 1, 0, 0, 1);
	cr_assert_eq(v.read_bytes, check_bytes);
	ttx_close(&T);
}

Test(txn_verbs, ro_record_ford) { ro_record("ford", 8); }
Test(txn_verbs, ro_record_pandora) { ro_record("pandora", 16); }

/* A transfer: two RW records staged and fetched in one doorbell. */
static void transfer(const char *proto)
{
	struct remora_counters c0, c1;
	struct remora_tx *tx;
	uint64_t a, b;
	struct ttx_vc v;

	open3(proto);
	ttx_get(&T, 0, 0, 3, &a);
	ttx_get(&T, 0, 0, 4, &b);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_stage(tx, 0, 3, REMORA_RW, &a, NULL), 0);
	cr_assert_eq(remora_tx_stage(tx, 0, 4, REMORA_RW, &b, NULL), 0);
	cr_assert_eq(remora_tx_fetch(tx), 0);
	c1 = ttx_counters(&T, 0);
	v = ttx_vc(&c0, &c1);
	VC_EQ(v, 2, 0, 2, 1);
	a--, b++;
	cr_assert_eq(remora_tx_write(tx, 0, 3, &a), 0);
	cr_assert_eq(remora_tx_write(tx, 0, 4, &b), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	c0 = ttx_counters(&T, 0);
	v = ttx_vc(&c1, &c0);
	VC_EQ(v, 0, 3 + 6 + 2, 0, 3);
	ttx_close(&T);
}

Test(txn_verbs, transfer_ford) { transfer("ford"); }
Test(txn_verbs, transfer_pandora) { transfer("pandora"); }

/* Reads and writes go to the primary only; commit writes reach every replica node once. */
Test(txn_verbs, replicas_each_get_one_write)
{
	struct remora_counters c0, c1, d;
	struct remora_tx *tx;
	unsigned nodes = 0;
	uint64_t x;

	open3("pandora");
	ttx_get(&T, 0, 0, 1, &x);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 1, &x), 0);
	c0 = ttx_counters(&T, 0);
	x = 5;
	cr_assert_eq(remora_tx_write(tx, 0, 1, &x), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	c1 = ttx_counters(&T, 0);
	remora_counters_diff(&c1, &c0, &d);
	for (unsigned m = 0; m < 3; m++) {
		/* log + commit on each node, the unlock on the primary only */
		cr_assert(d.verbs[m][REMORA_OP_WRITE] == 2 || d.verbs[m][REMORA_OP_WRITE] == 3);
		nodes += d.verbs[m][REMORA_OP_WRITE] == 3;
	}
	cr_assert_eq(nodes, 1, "exactly one primary got the unlock");
	ttx_close(&T);
}

/* Inserting a new key: bucket READ, record WRITE + slot CAS, backups async, then commit. */
Test(txn_verbs, insert_shape)
{
	struct remora_counters c0, c1;
	struct remora_tx *tx;
	uint64_t x = 9;
	struct ttx_vc v;

	open3("pandora");
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_insert(tx, 0, 100, &x), 0);
	c1 = ttx_counters(&T, 0);
	v = ttx_vc(&c0, &c1);
	/* bucket READ; FAA for a chunk of record slots, on each of the 3 copies of home 0 (the
	 * cursor is mirrored so that node 0 can fail over); record WRITE + CAS; 2 x (record +
	 * slot) to the backups */
	cr_assert_eq(v.read, 1);
	cr_assert_eq(v.faa, 3);
	cr_assert_eq(v.cas, 1);
	cr_assert_eq(v.write, 1 + 4);
	cr_assert_eq(remora_tx_commit(tx), 0);
	ttx_close(&T);
}
