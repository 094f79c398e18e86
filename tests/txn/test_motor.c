/* SPDX-License-Identifier: MIT */
/*
 * Motor (docs/motor.md): exact verbs per object type, a torn CVT READ refused, a long
 * read-only snapshot while writers commit and reclaim cells, SR validation, SI
 * first-committer-wins. Each motor mutation switch has a targeted check here that passes
 * without it and fails with it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/codec.h"
#include "store/store.h"
#include "ttx.h"
#include "txn/txn.h"

TestSuite(txn_motor, .fini = ttx_fini, .timeout = TU_TIMEOUT);

static struct ttx T;

/* Three memory nodes, 3 replicas, keys 1..8 loaded with value key * 10; mutations, isolation. */
static void open_motor(const char *iso, const char *mutate, unsigned workers)
{
	struct ttx_opts o = { .protocol = "motor", .nmn = 3, .workers = workers, .isolation = iso };

	if (mutate)
		setenv("REMORA_MUTATE", mutate, 1);
	else
		unsetenv("REMORA_MUTATE");
	ttx_open(&T, &o);
	for (uint64_t k = 1; k <= 8; k++)
		cr_assert_eq(remora_db_load(T.w[0], 0, k, &(uint64_t){ k * 10 }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
	unsetenv("REMORA_MUTATE");
}

/* ---- isolation is the open's configuration ------------------------------------------------ */

/* remora_db_cfg.isolation wins over $REMORA_ISOLATION; an unknown value is refused at open. */
Test(txn_motor, isolation_cfg_refused)
{
	struct remora_db_format_cfg f = { .size = sizeof(f), .n_mn = 1, .protocol = "motor",
					  .tables = (const struct remora_table_def[]){
						  { .name = "t", .id = 0, .value_size = 8,
						    .max_records = 64 } },
					  .ntables = 1, .max_cn = 1, .coords_per_cn = 1,
					  .log_slot_bytes = 8192 };
	struct remora_db_cfg cfg = { .size = sizeof(cfg), .protocol = "motor", .n_mn = 1,
				     .coords_per_worker = 1, .workers = 1, .isolation = "rc" };
	struct remora_db *db = NULL;

	setenv("REMORA_ISOLATION", "si", 1);
	tu_open(&T.tu, 0, 1, TTX_POOL_BYTES);
	cr_assert_eq(remora_db_format_ex(T.tu.tp, &f), 0, "%s", remora_db_errmsg(NULL));
	cfg.tp = T.tu.tp;
	cr_assert_eq(remora_db_open(&cfg, &db), -REMORA_ECONFIG);
	cr_assert(strstr(remora_db_errmsg(NULL), "isolation 'rc'") != NULL, "%s",
		  remora_db_errmsg(NULL));
	unsetenv("REMORA_ISOLATION");
	tu_close(&T.tu);
}

/* ---- verbs ------------------------------------------------------------------------------ */

/* Read-write record (cached): begin FAA; CAS + READ; FAA, 3 log WRITEs, 3 cell WRITEs, unlock. */
Test(txn_motor, verbs_rw_record)
{
	struct remora_counters c0, c1, c2, c3;
	struct remora_tx *tx;
	uint64_t x;

	open_motor("sr", NULL, 1);
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	c1 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 1, &x), 0);
	cr_assert_eq(x, 10);
	c2 = ttx_counters(&T, 0);
	x++;
	cr_assert_eq(remora_tx_write(tx, 0, 1, &x), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	txn_async_wait(&T.w[0]->coords[0]);
	c3 = ttx_counters(&T, 0);
	TTX_VC_EQ(ttx_vc(&c0, &c1), 0, 0, 0, 1, 1);
	TTX_VC_EQ(ttx_vc(&c1, &c2), 1, 0, 1, 0, 1);
	TTX_VC_EQ(ttx_vc(&c2, &c3), 0, 7, 0, 1, 4);
	cr_assert_eq(ttx_get(&T, 0, 0, 1, &x), 0);
	cr_assert_eq(x, 11);
}

/* One read-write transaction on key 3 (+1); the verbs of its commit (after the fetch). */
static struct ttx_vc update_commit_verbs(void)
{
	struct remora_counters c0, c1;
	struct remora_tx *tx;
	uint64_t x;

	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 3, &x), 0);
	x++;
	cr_assert_eq(remora_tx_write(tx, 0, 3, &x), 0);
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	txn_async_wait(&T.w[0]->coords[0]);
	c1 = ttx_counters(&T, 0);
	return ttx_vc(&c0, &c1);
}

/*
 * GC horizon: the first update of key 3 takes its free cell; the second reclaims the loaded
 * version, which the horizon cached at open does not allow yet: one READ of the horizon
 * entries (8 B per compute node, node 0) in a round trip of its own, then the usual commit.
 */
Test(txn_motor, verbs_gc_refresh)
{
	struct ttx_vc v;

	open_motor("sr", NULL, 1);
	TTX_VC_EQ(update_commit_verbs(), 0, 7, 0, 1, 4);
	v = update_commit_verbs();
	TTX_VC_EQ(v, 1, 7, 0, 1, 5);
	cr_assert_eq(v.read_bytes, 8u * 2); /* formatted for 2 compute nodes */
	TTX_VC_EQ(update_commit_verbs(), 0, 7, 0, 1, 4); /* the refreshed bound allows it */
}

/* Read-only transaction: begin FAA, one READ per record, commit sends nothing. */
Test(txn_motor, verbs_ro_txn)
{
	struct remora_counters c0, c1;
	struct remora_tx *tx;
	uint64_t x, y;

	open_motor("sr", NULL, 1);
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_begin(T.w[0], REMORA_TX_READ_ONLY, &tx), 0);
	cr_assert_eq(remora_tx_stage(tx, 0, 2, REMORA_RD, &x, NULL), 0);
	cr_assert_eq(remora_tx_stage(tx, 0, 3, REMORA_RD, &y, NULL), 0);
	cr_assert_eq(remora_tx_fetch(tx), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	c1 = ttx_counters(&T, 0);
	cr_assert_eq(x + y, 50);
	TTX_VC_EQ(ttx_vc(&c0, &c1), 2, 0, 0, 1, 2);
}

/* A read-only object in a read-write transaction: SR validates it (one READ of the CVT, one
 * more round trip); SI does not. */
static void ro_in_rw(const char *iso, int val_reads, int doorbells)
{
	struct remora_counters c0, c1;
	struct remora_tx *tx;
	uint64_t x, y;

	open_motor(iso, NULL, 1);
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_stage(tx, 0, 2, REMORA_RD, &x, NULL), 0);
	cr_assert_eq(remora_tx_stage(tx, 0, 3, REMORA_RW, &y, NULL), 0);
	cr_assert_eq(remora_tx_fetch(tx), 0);
	y += x;
	cr_assert_eq(remora_tx_write(tx, 0, 3, &y), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	txn_async_wait(&T.w[0]->coords[0]);
	c1 = ttx_counters(&T, 0);
	/* begin FAA (1) | READ + CAS + READ (1) | FAA (1) | validation | log 3 (1) | cells 3 (1) |
	 * unlock 1 (1) */
	TTX_VC_EQ(ttx_vc(&c0, &c1), 2 + val_reads, 7, 1, 2, doorbells);
}

Test(txn_motor, verbs_ro_in_rw_sr) { ro_in_rw("sr", 1, 7); }
Test(txn_motor, verbs_ro_in_rw_si) { ro_in_rw("si", 0, 6); }

/* Two read-write records: CAS + READ each in one doorbell; commit 3 log, 6 cells, 2 unlocks. */
Test(txn_motor, verbs_transfer)
{
	struct remora_counters c0, c1;
	struct remora_tx *tx;
	uint64_t a, b;

	open_motor("sr", NULL, 1);
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_stage(tx, 0, 4, REMORA_RW, &a, NULL), 0);
	cr_assert_eq(remora_tx_stage(tx, 0, 5, REMORA_RW, &b, NULL), 0);
	cr_assert_eq(remora_tx_fetch(tx), 0);
	a -= 5;
	b += 5;
	cr_assert_eq(remora_tx_write(tx, 0, 4, &a), 0);
	cr_assert_eq(remora_tx_write(tx, 0, 5, &b), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	txn_async_wait(&T.w[0]->coords[0]);
	c1 = ttx_counters(&T, 0);
	TTX_VC_EQ(ttx_vc(&c0, &c1), 2, 11, 2, 2, 6);
}

/* ---- torn READs ------------------------------------------------------------------------- */

/* Record offset and primary of key (a read of it fills the object). */
static void locate(uint64_t key, uint64_t *off, uint16_t *primary)
{
	struct remora_tx *tx;
	uint64_t x;

	cr_assert_eq(remora_tx_begin(T.w[0], REMORA_TX_READ_ONLY, &tx), 0);
	cr_assert_eq(remora_tx_read(tx, 0, key, &x), 0);
	*off = tx->objs[0]->off;
	*primary = tx->objs[0]->primary;
	cr_assert_eq(remora_tx_commit(tx), 0);
}

/*
 * Tears cell 0 of key 1 in the primary's pool on purpose: the value from a newer image (999,
 * timestamp 1), the cell header as loaded. Returns what a read then gives:
 * 0 with the value, or the read's error.
 */
static int read_torn(const char *mutate, uint64_t *got)
{
	const struct codec_geom *g;
	unsigned char *img, *newer;
	struct remora_tx *tx;
	uint64_t off;
	uint16_t primary;
	int rc;

	open_motor("sr", mutate, 1);
	locate(1, &off, &primary);
	g = &store_table(&T.db->st, 0)->geom;
	img = T.tu.mn[primary].base + off;
	newer = malloc(g->stride);
	memcpy(newer, img, g->stride);
	codec_cvt.encode(g, newer, 0,
				&(struct codec_rec){ .key = 1, .table = 0, .version = 1,
						      .flags = REMORA_REC_VALID,
						      .value = &(uint64_t){ 999 } });
	/* the newer value under the older cell header, as a READ that overlapped the WRITE of
	 * the value (but not yet of the header) returns it; with deltas the value is the full one */
	memcpy(img + (g->full_off ? g->full_off : g->part_off[0]) + 16,
	       newer + (g->full_off ? g->full_off : g->part_off[0]) + 16, 8);
	free(newer);
	cr_assert_eq(remora_tx_begin(T.w[0], REMORA_TX_READ_ONLY, &tx), 0);
	rc = remora_tx_read(tx, 0, 1, got);
	remora_tx_commit(tx);
	return rc;
}

Test(txn_motor, torn_read_refused)
{
	uint64_t x = 0;

	cr_assert_eq(read_torn(NULL, &x), -REMORA_EABORT);
	cr_assert_eq(remora_worker_last_abort(T.w[0]), REMORA_ABORT_VALIDATION);
}

Test(txn_motor, torn_read_mutated)
{
	uint64_t x = 0;

	cr_assert_eq(read_torn("skip_torn_check", &x), 0); /* the torn value gets through */
	cr_assert_neq(x, 10);
}

/* A READ that overlaps the commit WRITE of cell 1, cut at any byte, either way round. */
Test(txn_motor, codec_detects_every_half_tear)
{
	struct remora_table_def d = { .name = "t", .id = 0, .value_size = 40, .max_records = 8 };
	struct codec_geom g;
	unsigned char a[256], b[256], m[256];
	struct codec_rec r;
	uint32_t off, len, end;

	cr_assert_eq(codec_cvt.geom(&d, &g), 0);
	memset(a, 0, sizeof(a));
	for (unsigned p = 0; p < g.nparts; p++) /* as loaded: cell 0 at timestamp 0, others free */
		codec_cvt.encode(&g, a, p, &(struct codec_rec){ .key = 7, .version = 0,
			.flags = REMORA_REC_VALID, .value = "0123456789012345678901234567890123456789" });
	memcpy(b, a, sizeof(a)); /* ... and after the commit of version 9 into cell 1 */
	codec_cvt.encode(&g, b, 1, &(struct codec_rec){ .key = 7, .version = 9,
		.flags = REMORA_REC_VALID, .value = "abcdefghijabcdefghijabcdefghijabcdefghij" });
	codec_cvt_span(&g, 1, &off, &len); /* what the commit of cell 1 writes */
	end = off + len;
	for (uint32_t cut = off + 1; cut < end; cut++) {
		if (!memcmp(a + cut, b + cut, end - cut))
			continue; /* the rest is the same in both images: no tear */
		memcpy(m, a, g.stride);
		memcpy(m + cut, b + cut, end - cut);
		cr_assert_eq(codec_cvt.decode(&g, m, 1, &r), -EAGAIN, "cut at %u", cut);
		memcpy(m, b, g.stride);
		memcpy(m + cut, a + cut, end - cut);
		cr_assert_eq(codec_cvt.decode(&g, m, 1, &r), -EAGAIN, "cut at %u", cut);
	}
	cr_assert_eq(codec_cvt.decode(&g, b, 1, &r), 0);
	cr_assert_eq(r.version, 9);
}

/*
 * Deltas (REMORA_CVT_DELTA=1, 4 cells, 40-byte values): four versions that change a few bytes,
 * none, all of them, and two ranges; every cell rebuilds exactly its version from the newest
 * full value. skip_one (the delta_skip mutation) leaves the newest delta out: caught.
 */
static int delta_versions(bool skip_one)
{
	static const char *const v[4] = { "0123456789012345678901234567890123456789",
					   "0123456789012345678901234567890123456789",
					   "0123x5678901234567890123456789012345678y",
					   "abcdefghijabcdefghijabcdefghijabcdefghij" };
	struct remora_table_def d = { .name = "t", .id = 0, .value_size = 40, .max_records = 8 };
	unsigned char img[512], buf[40];
	struct codec_geom g;
	const void *val;
	int bad = 0;

	setenv("REMORA_CVT_DELTA", "1", 1);
	setenv("REMORA_CVT_CELLS", "4", 1);
	cr_assert_eq(codec_cvt.geom(&d, &g), 0);
	unsetenv("REMORA_CVT_CELLS");
	unsetenv("REMORA_CVT_DELTA");
	cr_assert_neq(g.full_off, 0);
	memset(img, 0, sizeof(img));
	for (unsigned p = 0; p < g.nparts; p++)
		codec_cvt.encode(&g, img, p, &(struct codec_rec){ .key = 7, .version = 0,
			.flags = p ? 0 : REMORA_REC_VALID, .value = v[0] });
	for (unsigned p = 1; p < 4; p++) /* versions 10, 20, 30, each a commit of cell p */
		codec_cvt.encode(&g, img, p, &(struct codec_rec){ .key = 7, .version = 10 * p,
			.flags = REMORA_REC_VALID, .value = v[p] });
	for (unsigned p = 0; p < 4; p++) {
		struct codec_rec r;

		cr_assert_eq(codec_cvt.decode(&g, img, p, &r), 0);
		cr_assert_eq(r.version, 10 * p);
		cr_assert_eq(codec_cvt_value(&g, img, p, buf, &val, skip_one), 0);
		bad += memcmp(val, v[p], 40) != 0;
	}
	return bad;
}

Test(txn_motor, delta_rebuilds_every_version)
{
	cr_assert_eq(delta_versions(false), 0);
}

Test(txn_motor, delta_skip_mutated)
{
	cr_assert_gt(delta_versions(true), 0);
}

/* ---- snapshots -------------------------------------------------------------------------- */

/* Moves amount from key a to key b in one transaction of worker w; its commit's result. */
static int try_transfer(struct remora_worker *w, uint64_t a, uint64_t b, uint64_t amount)
{
	struct remora_tx *tx;
	uint64_t x, y;

	cr_assert_eq(remora_tx_begin(w, 0, &tx), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, a, &x), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, b, &y), 0);
	x -= amount;
	y += amount;
	cr_assert_eq(remora_tx_write(tx, 0, a, &x), 0);
	cr_assert_eq(remora_tx_write(tx, 0, b, &y), 0);
	return remora_tx_commit(tx);
}

/* ... which must commit. */
static void transfer(unsigned w, uint64_t a, uint64_t b, uint64_t amount)
{
	cr_assert_eq(try_transfer(T.w[w], a, b, amount), 0);
}

/*
 * A long read-only transaction (on worker `reader`) reads key 1, then writers (worker 1 of
 * compute node 0) try to move money from 1 to 2 `rounds` times, then it reads key 2. Keys
 * 1 + 2 hold 30 in every committed state. Returns 0 with the sum it saw, or its error;
 * *refused counts the writers GC turned away (they abort: a snapshot needs the version).
 */
static int snapshot_on(struct remora_worker *reader, unsigned rounds, uint64_t *sum,
		       unsigned *refused)
{
	struct remora_tx *ro;
	uint64_t a, b;
	int rc;

	transfer(1, 5, 6, 1); /* other keys: the writers' GC runs on them too */
	cr_assert_eq(remora_tx_begin(reader, REMORA_TX_READ_ONLY, &ro), 0);
	cr_assert_eq(remora_tx_read(ro, 0, 1, &a), 0);
	*refused = 0;
	for (unsigned i = 0; i < rounds; i++) {
		rc = try_transfer(T.w[1], 1, 2, 1);
		cr_assert(rc == 0 || rc == -REMORA_EABORT, "%s", remora_strerror(rc));
		*refused += rc != 0;
		rc = try_transfer(T.w[1], 5, 6, 1); /* refused too while the snapshot may read 5 */
		cr_assert(rc == 0 || rc == -REMORA_EABORT, "%s", remora_strerror(rc));
	}
	rc = remora_tx_read(ro, 0, 2, &b);
	if (rc == 0)
		rc = remora_tx_commit(ro);
	else
		remora_tx_commit(ro);
	*sum = a + b;
	return rc;
}

static int long_snapshot(const char *mutate, unsigned rounds, uint64_t *sum, unsigned *refused)
{
	open_motor("sr", mutate, 2);
	return snapshot_on(T.w[0], rounds, sum, refused);
}

/* One writer committed since T_start: the snapshot still sees the state before it. */
Test(txn_motor, snapshot_consistent)
{
	uint64_t sum = 0, x;
	unsigned refused;

	cr_assert_eq(long_snapshot(NULL, 1, &sum, &refused), 0);
	cr_assert_eq(sum, 30);
	cr_assert_eq(refused, 0);
	cr_assert_eq(ttx_get(&T, 0, 0, 2, &x), 0);
	cr_assert_eq(x, 21); /* the writer did commit */
}

/*
 * Two writers on key 2 with N = 2 cells: the second would have to reclaim the version the
 * snapshot reads. The GC horizon (the snapshot's T_start) turns it away; the snapshot commits
 * the state it started in, and the writer goes through once the snapshot ended.
 */
Test(txn_motor, snapshot_survives_gc)
{
	uint64_t sum = 0, x;
	unsigned refused;

	cr_assert_eq(long_snapshot(NULL, 2, &sum, &refused), 0);
	cr_assert_eq(sum, 30);
	cr_assert_eq(refused, 1);
	cr_assert_eq(try_transfer(T.w[1], 1, 2, 1), 0);
	cr_assert_eq(ttx_get(&T, 0, 0, 2, &x), 0);
	cr_assert_eq(x, 22);
}

/* gc_no_horizon: the writer reclaims the snapshot's version; the snapshot cannot finish. */
Test(txn_motor, snapshot_gc_no_horizon_mutated)
{
	uint64_t sum = 0;
	unsigned refused;

	cr_assert_eq(long_snapshot("gc_no_horizon", 2, &sum, &refused), -REMORA_EABORT);
	cr_assert_eq(refused, 0);
}

/* ... and a snapshot that then reads the next newer version sees a state that never was. */
Test(txn_motor, snapshot_reclaim_visible_mutated)
{
	uint64_t sum = 0;
	unsigned refused;

	cr_assert_eq(long_snapshot("gc_no_horizon,reclaim_visible", 2, &sum, &refused), 0);
	cr_assert_neq(sum, 30);
}

/*
 * The snapshot runs on another compute node (a second database handle, compute node 1, on
 * the same memory nodes): the writers of compute node 0 learn its T_start only from the
 * horizon it published in node 0's control area.
 */
static int cross_cn_snapshot(const char *mutate, uint64_t *sum, unsigned *refused)
{
	struct remora_db_cfg cfg = { .size = sizeof(cfg), .tp = NULL, .protocol = "motor",
				     .cn_id = 1, .n_mn = 3, .coords_per_worker = 1, .workers = 1,
				     .isolation = "sr" };
	struct remora_worker *w;
	struct remora_db *db;
	int rc;

	open_motor("sr", mutate, 2);
	cfg.tp = T.tu.tp;
	cr_assert_eq(remora_db_open(&cfg, &db), 0, "%s", remora_db_errmsg(NULL));
	cr_assert_eq(remora_worker_create(db, 0, &w), 0);
	rc = snapshot_on(w, 2, sum, refused);
	remora_worker_destroy(w);
	remora_db_close(db);
	return rc;
}

Test(txn_motor, snapshot_survives_gc_across_cns)
{
	uint64_t sum = 0;
	unsigned refused;

	cr_assert_eq(cross_cn_snapshot(NULL, &sum, &refused), 0);
	cr_assert_eq(sum, 30);
	cr_assert_eq(refused, 1);
}

Test(txn_motor, snapshot_across_cns_gc_no_horizon_mutated)
{
	uint64_t sum = 0;
	unsigned refused;

	cr_assert_eq(cross_cn_snapshot("gc_no_horizon", &sum, &refused), -REMORA_EABORT);
	cr_assert_eq(refused, 0);
}

/* With three cells the snapshot's version survives two writers (GC took other cells). */
Test(txn_motor, snapshot_three_cells)
{
	uint64_t sum = 0;
	unsigned refused;

	setenv("REMORA_CVT_CELLS", "3", 1);
	cr_assert_eq(long_snapshot(NULL, 2, &sum, &refused), 0);
	unsetenv("REMORA_CVT_CELLS");
	cr_assert_eq(sum, 30);
	cr_assert_eq(refused, 0);
}

/*
 * Deltas end to end (3 cells): a snapshot starts, two writers commit 0x11e (byte 1 changed)
 * and 0x11f (byte 0 changed) over key 3 (loaded 30 = 0x1e), then the snapshot reads key 3
 * through both deltas and must see exactly 30. Returns what it saw; the delta_skip mutation
 * (the newest delta left out) gives 0x1f.
 */
static uint64_t delta_snapshot(const char *mutate)
{
	struct remora_tx *ro, *tx;
	uint64_t x, got = 0;

	setenv("REMORA_CVT_DELTA", "1", 1);
	setenv("REMORA_CVT_CELLS", "3", 1);
	open_motor("sr", mutate, 2);
	unsetenv("REMORA_CVT_CELLS");
	unsetenv("REMORA_CVT_DELTA");
	cr_assert_neq(store_table(&T.db->st, 0)->geom.full_off, 0);
	cr_assert_eq(remora_tx_begin(T.w[0], REMORA_TX_READ_ONLY, &ro), 0);
	for (uint64_t nv = 0x11e, old = 30; nv <= 0x11f; old = nv++) {
		cr_assert_eq(remora_tx_begin(T.w[1], 0, &tx), 0);
		cr_assert_eq(remora_tx_read_for_update(tx, 0, 3, &x), 0);
		cr_assert_eq(x, old);
		cr_assert_eq(remora_tx_write(tx, 0, 3, &nv), 0);
		cr_assert_eq(remora_tx_commit(tx), 0);
	}
	cr_assert_eq(remora_tx_read(ro, 0, 3, &got), 0);
	cr_assert_eq(remora_tx_commit(ro), 0);
	cr_assert_eq(ttx_get(&T, 0, 0, 3, &x), 0);
	cr_assert_eq(x, 0x11f);
	return got;
}

Test(txn_motor, delta_snapshot_old_version)
{
	cr_assert_eq(delta_snapshot(NULL), 30);
}

Test(txn_motor, delta_snapshot_skip_mutated)
{
	cr_assert_eq(delta_snapshot("delta_skip"), 0x1f);
}

/* ---- SR validation and SI first-committer-wins ----------------------------------------- */

/*
 * T (worker 0) reads key 3 and writes key 4 = key 3; before T commits, worker 1 commits a
 * new key 3. Under SR, T must abort (its read is stale at T_commit). Returns T's commit.
 */
static int stale_read(const char *iso, const char *mutate)
{
	struct remora_tx *tx, *w;
	uint64_t x, y;

	open_motor(iso, mutate, 2);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read(tx, 0, 3, &x), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 4, &y), 0);
	cr_assert_eq(remora_tx_begin(T.w[1], 0, &w), 0);
	cr_assert_eq(remora_tx_read_for_update(w, 0, 3, &y), 0);
	y = 77;
	cr_assert_eq(remora_tx_write(w, 0, 3, &y), 0);
	cr_assert_eq(remora_tx_commit(w), 0);
	cr_assert_eq(remora_tx_write(tx, 0, 4, &x), 0);
	return remora_tx_commit(tx);
}

Test(txn_motor, sr_validation) { cr_assert_eq(stale_read("sr", NULL), -REMORA_EABORT); }
Test(txn_motor, sr_validation_mutated) { cr_assert_eq(stale_read("sr", "skip_validation"), 0); }
Test(txn_motor, si_allows_stale_read_only_object) { cr_assert_eq(stale_read("si", NULL), 0); }

/*
 * SI: T (worker 0) begins; worker 1 commits key 7; T then updates key 7. First-committer-wins
 * aborts T (a lost update otherwise). Returns T's result.
 */
static int concurrent_writer(const char *mutate)
{
	struct remora_tx *tx;
	uint64_t x;
	int rc;

	open_motor("si", mutate, 2);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	transfer(1, 7, 8, 1);
	rc = remora_tx_read_for_update(tx, 0, 7, &x);
	if (rc) {
		remora_tx_abort(tx);
		return rc;
	}
	x += 100;
	cr_assert_eq(remora_tx_write(tx, 0, 7, &x), 0);
	return remora_tx_commit(tx);
}

Test(txn_motor, si_first_committer_wins) { cr_assert_eq(concurrent_writer(NULL), -REMORA_EABORT); }
Test(txn_motor, si_first_committer_wins_mutated)
{
	cr_assert_eq(concurrent_writer("skip_first_committer_wins"), 0);
}

/* ---- every image decodes after inserts and deletes --------------------------------------- */

/* Record i of table t on node m was never written (a chunk's unused slot). */
static bool blank(unsigned m, const struct store_table *t, uint64_t i)
{
	const unsigned char *img = T.tu.mn[m].base + store_rec_off(t, i);

	for (uint32_t k = 0; k < t->geom.stride; k++)
		if (img[k])
			return false;
	return true;
}

/* Cells of handed-out records of table 0, on every memory node, that fail decode. */
static unsigned undecodable(void)
{
	const struct store_table *t = store_table(&T.db->st, 0);
	uint64_t cursor;
	unsigned bad = 0;

	memcpy(&cursor, T.tu.mn[0].base + t->ent.cursor_off, 8);
	cursor = cursor < t->ent.capacity ? cursor : t->ent.capacity;
	for (unsigned m = 0; m < 3; m++)
		for (uint64_t i = 0; i < cursor; i++)
			for (unsigned p = 0; p < t->geom.nparts && !blank(m, t, i); p++) {
				struct codec_rec r;
				int rc = codec_cvt.decode(&t->geom, T.tu.mn[m].base +
							   store_rec_off(t, i), p, &r);

				bad += rc != 0;
			}
	return bad;
}

/*
 * insdel's pattern: transaction n inserts key 100 + n % 4 and deletes 100 + (n - 2) % 4,
 * retried until it commits; a read-only snapshot on worker 1 held over n in [20, 30) makes
 * inline GC refuse reclaims (the writer aborts after its insert claimed a record).
 */
Test(txn_motor, insdel_images_decode)
{
	struct remora_tx *snap = NULL;
	const struct codec_geom *g;
	unsigned done = 0, aborted = 0;
	uint64_t x, off;
	uint16_t primary;

	open_motor("sr", NULL, 2);
	g = &store_table(&T.db->st, 0)->geom;
	for (uint64_t n = 0; n < 64; n++) {
		if (n == 20) {
			cr_assert_eq(remora_tx_begin(T.w[1], REMORA_TX_READ_ONLY, &snap), 0);
			cr_assert_eq(remora_tx_read(snap, 0, 1, &x), 0);
		}
		if (n == 30)
			cr_assert_eq(remora_tx_commit(snap), 0);
		for (unsigned attempt = 0; attempt < 4; attempt++) {
			struct remora_tx *tx;
			uint64_t v = n;
			int rc;

			cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
			rc = remora_tx_insert(tx, 0, 100 + n % 4, &v);
			if (!rc && n >= 2)
				rc = remora_tx_delete(tx, 0, 100 + (n - 2) % 4);
			if (!rc)
				rc = remora_tx_commit(tx);
			else
				remora_tx_abort(tx);
			txn_async_wait(&T.w[0]->coords[0]);
			if (!rc) {
				done++;
				break;
			}
			aborted++;
		}
	}
	cr_assert_gt(done, 32);
	cr_assert_gt(aborted, 0);
	cr_assert_eq(undecodable(), 0);
	/* the scan can fail: one byte of key 103's last cell on a backup */
	locate(103, &off, &primary);
	T.tu.mn[(primary + 1) % 3].base[off + g->part_off[g->nparts - 1] + 16] ^= 1;
	cr_assert_gt(undecodable(), 0);
}


/* ---- a placeholder whose backup WRITE never landed ---------------------------------------- */

/* Replicas of key whose every cell decodes under key, the newest holding value want. */
static unsigned whole_replicas(uint64_t key, uint64_t off, uint16_t primary, uint64_t want)
{
	const struct codec_geom *g = &store_table(&T.db->st, 0)->geom;
	unsigned n = 0;

	for (unsigned k = 0; k < 3; k++) {
		const unsigned char *img = T.tu.mn[store_replica(&T.db->st, primary, k)].base + off;
		unsigned char buf[64];
		uint64_t newest = 0, v = 0;
		bool ok = true, any = false;

		for (unsigned c = 0; ok && c < g->nparts; c++) {
			struct codec_rec r;
			const void *val;

			ok = codec_cvt.decode(g, img, c, &r) == 0 && r.key == key;
			if (!ok || !(r.flags & REMORA_CVT_USED) || (any && r.version < newest))
				continue;
			ok = codec_cvt_value(g, img, c, buf, &val, false) == 0;
			memcpy(&v, val, 8);
			newest = r.version, any = true;
		}
		n += ok && any && v == want;
	}
	return n;
}

/*
 * An insert of key 200 aborts after its placeholder was published; its WRITE to one backup
 * never landed (a crash cut it: the header is zeroed here). A later insert of the key reuses
 * the placeholder and commits: its WRITE must carry the header, or that backup's cell fails
 * its checksum for good. Returns the replicas that hold the inserted value whole.
 */
static unsigned insert_over_lost_placeholder(const char *mutate)
{
	struct remora_tx *tx;
	uint64_t off;
	uint16_t primary;

	open_motor("sr", mutate, 1);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_insert(tx, 0, 200, &(uint64_t){ 1 }), 0);
	off = tx->objs[0]->off;
	primary = tx->objs[0]->primary;
	remora_tx_abort(tx);
	txn_async_wait(&T.w[0]->coords[0]);
	memset(T.tu.mn[store_replica(&T.db->st, primary, 1)].base + off + 8, 0, 24);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_insert(tx, 0, 200, &(uint64_t){ 7 }), 0);
	cr_assert_eq(tx->objs[0]->off, off, "the insert did not reuse the placeholder");
	cr_assert_eq(remora_tx_commit(tx), 0);
	txn_async_wait(&T.w[0]->coords[0]);
	return whole_replicas(200, off, primary, 7);
}

Test(txn_motor, insert_over_lost_placeholder)
{
	cr_assert_eq(insert_over_lost_placeholder(NULL), 3);
}

Test(txn_motor, insert_over_lost_placeholder_no_header)
{
	cr_assert_eq(insert_over_lost_placeholder("commit_no_header"), 2);
}
