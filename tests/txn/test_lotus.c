/* SPDX-License-Identifier: MIT */
/*
 * LOTUS (docs/lotus.md) on one compute node (every shard local): exact verbs per transaction
 * shape with no atomic verb to any memory node, a lock conflict that aborts before any verb,
 * locks taken before the first READ, SR read locks and SI without them, and the commit order
 * seen by others: a snapshot reader never skips an INVISIBLE cell, and no writer gets a lock
 * before the visible WRITE landed. Each lotus mutation has its negative control here.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ttx.h"
#include "txn/proto/lotus/lotus.h"
#include "txn/txn.h"

TestSuite(txn_lotus, .fini = ttx_fini, .timeout = TU_TIMEOUT);

static struct ttx T;

/* Three memory nodes, 3 replicas, two workers; keys 1..8 hold key * 10. */
static void open_lotus(const char *iso, const char *mutate)
{
	struct ttx_opts o = { .protocol = "lotus", .nmn = 3, .workers = 2, .isolation = iso };

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

/* ---- verbs -------------------------------------------------------------------------------- */

/* Read-write record: begin nothing (clock); lock nothing (CPU CAS); 1 READ; commit 3 cells +
 * 3 logs (one doorbell), 3 visible cells (one doorbell); no CAS, no FAA anywhere. */
Test(txn_lotus, verbs_rw_record_no_mn_atomics)
{
	struct remora_counters c0, c1, c2, c3;
	struct remora_tx *tx;
	uint64_t x;

	open_lotus("sr", NULL);
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	c1 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 1, &x), 0);
	cr_assert_eq(x, 10);
	c2 = ttx_counters(&T, 0);
	x++;
	cr_assert_eq(remora_tx_write(tx, 0, 1, &x), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	c3 = ttx_counters(&T, 0);
	TTX_VC_EQ(ttx_vc(&c0, &c1), 0, 0, 0, 0, 0);
	TTX_VC_EQ(ttx_vc(&c1, &c2), 1, 0, 0, 0, 1);
	TTX_VC_EQ(ttx_vc(&c2, &c3), 0, 9, 0, 0, 2);
	cr_assert_eq(ttx_get(&T, 0, 0, 1, &x), 0);
	cr_assert_eq(x, 11);
	ttx_close(&T);
}

/* A steady stream of transfers and reads: not one CAS, FAA or masked-CAS to a memory node. */
Test(txn_lotus, steady_state_zero_mn_atomics)
{
	struct remora_counters c0, c1;
	struct ttx_vc v;

	open_lotus("sr", NULL);
	c0 = ttx_counters(&T, 0);
	for (unsigned i = 0; i < 200; i++) {
		struct remora_tx *tx;
		uint64_t a, b, ka = 1 + i % 8, kb = 1 + (i + 3) % 8;

		cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
		cr_assert_eq(remora_tx_read_for_update(tx, 0, ka, &a), 0);
		cr_assert_eq(remora_tx_read_for_update(tx, 0, kb, &b), 0);
		a--, b++;
		cr_assert_eq(remora_tx_write(tx, 0, ka, &a), 0);
		cr_assert_eq(remora_tx_write(tx, 0, kb, &b), 0);
		cr_assert_eq(remora_tx_commit(tx), 0);
		cr_assert_eq(ttx_get(&T, 0, 0, ka, &a), 0);
	}
	c1 = ttx_counters(&T, 0);
	v = ttx_vc(&c0, &c1);
	cr_assert_eq(v.cas + v.faa, 0, "%llu CAS, %llu FAA", (unsigned long long)v.cas,
		     (unsigned long long)v.faa);
	cr_assert_eq(ttx_verbs(&c0, &c1, REMORA_OP_MCAS), 0);
	cr_assert_gt(v.write, 0);
	ttx_close(&T);
}

/* A lock conflict aborts before any verb: worker 1's attempt sends nothing at all. */
Test(txn_lotus, lock_conflict_abort_costs_no_verb)
{
	struct remora_counters c0, c1;
	struct remora_tx *a, *b;
	uint64_t x;

	open_lotus("sr", NULL);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &a), 0);
	cr_assert_eq(remora_tx_read_for_update(a, 0, 2, &x), 0);
	c0 = ttx_counters(&T, 1);
	cr_assert_eq(remora_tx_begin(T.w[1], 0, &b), 0);
	cr_assert_eq(remora_tx_read_for_update(b, 0, 2, &x), -REMORA_EABORT);
	remora_tx_abort(b);
	c1 = ttx_counters(&T, 1);
	TTX_VC_EQ(ttx_vc(&c0, &c1), 0, 0, 0, 0, 0);
	cr_assert_eq(remora_worker_last_abort(T.w[1]), REMORA_ABORT_LOCKED);
	remora_tx_abort(a);
	ttx_close(&T);
}

/* ---- lock-first --------------------------------------------------------------------------- */

static uint64_t reads_at_begin, reads_at_lock;
static unsigned locks_seen;

static uint64_t reads_now(void)
{
	struct remora_counters c = ttx_counters(&T, 0);

	return remora_counters_total(&c, REMORA_OP_READ);
}

static void lock_hook(struct remora_tx *tx, const char *point)
{
	(void)tx;
	if (!strcmp(point, "txn.locked") && !locks_seen++)
		reads_at_lock = reads_now();
}

/* READs that left before the lock phase of a two-key transaction (one RW, one RD). */
static uint64_t reads_before_locks(const char *mutate)
{
	struct remora_tx *tx;
	uint64_t v;

	open_lotus("sr", mutate);
	locks_seen = 0;
	txn_test_hook = lock_hook;
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	reads_at_begin = reads_now();
	(void)remora_tx_stage(tx, 0, 4, REMORA_RW, &v, NULL);
	(void)remora_tx_stage(tx, 0, 5, REMORA_RD, &v, NULL);
	(void)remora_tx_fetch(tx);
	remora_tx_abort(tx);
	txn_test_hook = NULL;
	cr_assert_eq(locks_seen, 1);
	ttx_close(&T);
	return reads_at_lock - reads_at_begin;
}

Test(txn_lotus, no_read_before_the_locks)
{
	cr_assert_eq(reads_before_locks(NULL), 0);
}

/* Negative control: lotus_read_before_lock sends the CVT READs first. */
Test(txn_lotus, no_read_before_the_locks_mutated)
{
	cr_assert_gt(reads_before_locks("lotus_read_before_lock"), 0);
}

/* ---- isolation ---------------------------------------------------------------------------- */

/* Whether a writer on worker 1 gets key 6 while worker 0's transaction has read it. */
static bool writer_passes_reader(const char *iso)
{
	struct remora_tx *r, *w;
	uint64_t x;
	int rc;

	open_lotus(iso, NULL);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &r), 0);
	cr_assert_eq(remora_tx_read(r, 0, 6, &x), 0);
	cr_assert_eq(remora_tx_begin(T.w[1], 0, &w), 0);
	rc = remora_tx_read_for_update(w, 0, 6, &x);
	remora_tx_abort(w);
	remora_tx_abort(r);
	ttx_close(&T);
	return rc == 0;
}

Test(txn_lotus, sr_read_lock_blocks_writer)
{
	cr_assert_not(writer_passes_reader("sr"));
}

Test(txn_lotus, si_takes_no_read_lock)
{
	cr_assert(writer_passes_reader("si"));
}

/* ---- commit order, as others see it -------------------------------------------------------- */

static int other_rc;
static uint64_t other_val;
static const char *other_at;
static bool other_ro;

/* At point other_at of worker 0's commit, worker 1 runs one transaction on key 7. */
static void other_hook(struct remora_tx *tx, const char *point)
{
	struct remora_tx *o;

	if (tx->c->w != T.w[0] || strcmp(point, other_at) || other_rc != 1)
		return;
	cr_assert_eq(remora_tx_begin(T.w[1], other_ro ? REMORA_TX_READ_ONLY : 0, &o), 0);
	other_rc = other_ro ? remora_tx_read(o, 0, 7, &other_val) :
			      remora_tx_read_for_update(o, 0, 7, &other_val);
	if (other_rc == 0)
		other_rc = remora_tx_commit(o);
	else
		remora_tx_abort(o);
}

/* Worker 0 sets key 7 to 71; worker 1 runs at `at`. Returns worker 1's result. */
static int run_other(const char *mutate, const char *at, bool ro)
{
	struct remora_tx *tx;
	uint64_t x;

	open_lotus("sr", mutate);
	other_rc = 1, other_val = 0, other_at = at, other_ro = ro;
	txn_test_hook = other_hook;
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 7, &x), 0);
	x = 71;
	cr_assert_eq(remora_tx_write(tx, 0, 7, &x), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	txn_test_hook = NULL;
	ttx_close(&T);
	return other_rc;
}

/* A snapshot taken after T_commit meets the INVISIBLE cell: it may not read 70 (it would miss
 * a commit below its snapshot); it waits, and here (the writer is paused) aborts. */
Test(txn_lotus, snapshot_never_skips_invisible)
{
	cr_assert_eq(run_other(NULL, "txn.stamped", true), -REMORA_EABORT);
}

/* Negative control: lotus_skip_invisible reads the old version and commits. */
Test(txn_lotus, snapshot_never_skips_invisible_mutated)
{
	cr_assert_eq(run_other("lotus_skip_invisible", "txn.stamped", true), 0);
	cr_assert_eq(other_val, 70);
}

/* Before the visible WRITE the key is still locked: a second writer aborts. */
Test(txn_lotus, lock_held_until_visible)
{
	cr_assert_eq(run_other(NULL, "txn.commit_write", false), -REMORA_EABORT);
}

/* Negative control: lotus_early_unlock lets the second writer in (over an INVISIBLE cell). */
Test(txn_lotus, lock_held_until_visible_mutated)
{
	cr_assert_neq(run_other("lotus_early_unlock", "txn.commit_write", false), -REMORA_EABORT);
}

/* ---- lock state ---------------------------------------------------------------------------- */

/* A retried request is granted once (no double count); a late request of a coordinator's
 * older transaction is refused and leaves its current transaction's locks alone. */
Test(txn_lotus, lock_state_idempotent_and_stale_refused)
{
	struct lotus_db *l;
	const uint64_t h1 = 0x1234500000ull, h2 = 0x6789a00000ull, h3 = 0xbcdef00000ull;

	open_lotus("sr", NULL);
	l = T.db->proto_priv;
	cr_assert_eq(lotus_hold(l, 900, 10, h1, 0, false), 0);
	cr_assert_eq(lotus_hold(l, 900, 10, h1, 0, false), 0, "a retry");
	cr_assert_eq(lotus_lt_peek(&l->lt, h1) & 0xff, 2, "one reader, not two");
	cr_assert_eq(lotus_hold(l, 900, 11, h2, 0, true), 0, "the next transaction");
	cr_assert_eq(lotus_lt_peek(&l->lt, h1), 0, "the previous one's hold dropped");
	cr_assert_eq(lotus_hold(l, 900, 10, h3, 0, true), -EBUSY, "a late request refused");
	cr_assert_eq(lotus_lt_peek(&l->lt, h2) & 0xff, 1, "the current lock kept");
	cr_assert_eq(lotus_lt_peek(&l->lt, h3), 0);
	lotus_unhold(l, 900, 11, h2, true);
	cr_assert_eq(lotus_lt_peek(&l->lt, h2), 0);
	ttx_close(&T);
}

/*
 * A remote coordinator whose release got lost (or whose lock was granted after its call timed
 * out) and which then finished: its DONE (lotus_finish) drops the hold, and a request of it
 * delivered later is refused. Returns whether the key was free again after the DONE.
 */
static bool finished_coordinator_frees(const char *mutate)
{
	const uint64_t h1 = 0x1234500000ull, h2 = 0x6789a00000ull;
	struct lotus_db *l;
	bool freed;

	open_lotus("sr", mutate);
	l = T.db->proto_priv;
	cr_assert_eq(lotus_hold(l, 900, 10, h1, 0, true), 0);
	lotus_finish(l, 900);
	freed = lotus_lt_peek(&l->lt, h1) == 0;
	if (freed) {
		cr_assert_eq(lotus_hold(l, 900, 10, h2, 0, true), -EBUSY, "a late request refused");
		cr_assert_eq(lotus_lt_peek(&l->lt, h2), 0);
		cr_assert_eq(lotus_hold(l, 901, 5, h1, 0, true), 0, "another coordinator gets it");
		lotus_unhold(l, 901, 5, h1, true);
	}
	ttx_close(&T);
	return freed;
}

Test(txn_lotus, finished_coordinator_holds_dropped)
{
	cr_assert(finished_coordinator_frees(NULL));
}

/* Negative control: lotus_done_keeps_holds leaves the hold, and the key stays locked. */
Test(txn_lotus, finished_coordinator_holds_dropped_mutated)
{
	cr_assert_not(finished_coordinator_frees("lotus_done_keeps_holds"));
}

/* ---- a lock-conflict abort yields ---------------------------------------------------------- */

static struct {
	int holder_rc;
	unsigned tries; /* the retrier's attempt that got the lock (0: none did) */
} YR;

/* Takes key 1's W lock and holds it across the READ and the commit's verbs (each parks). */
static void yield_holder(void *arg)
{
	struct remora_tx *tx;
	uint64_t v = 0;
	int rc = remora_tx_begin(T.w[0], 0, &tx);

	(void)arg;
	if (!rc)
		rc = remora_tx_read_for_update(tx, 0, 1, &v);
	v++;
	if (!rc)
		rc = remora_tx_write(tx, 0, 1, &v);
	if (!rc)
		rc = remora_tx_commit(tx);
	YR.holder_rc = rc;
}

/* Asks for key 1 again at once after each abort, as the workload runners do (64 tries). */
static void yield_retrier(void *arg)
{
	(void)arg;
	for (unsigned a = 1; a <= 64; a++) {
		struct remora_tx *tx;
		uint64_t v;
		int rc = remora_tx_begin(T.w[0], 0, &tx);

		if (rc)
			return;
		rc = remora_tx_read_for_update(tx, 0, 1, &v);
		if (rc == 0 && remora_tx_commit(tx) == 0) {
			YR.tries = a;
			return;
		}
		if (rc)
			remora_tx_abort(tx);
	}
}

/* Two coordinators of one worker on one key; returns the attempt that got it (0: none). */
static unsigned retrier_gets_lock(const char *mutate)
{
	struct ttx_opts o = { .protocol = "lotus", .nmn = 1, .coords = 2 };
	struct remora_sched *s;

	if (mutate)
		setenv("REMORA_MUTATE", mutate, 1);
	ttx_open(&T, &o);
	unsetenv("REMORA_MUTATE");
	cr_assert_eq(remora_db_load(T.w[0], 0, 1, &(uint64_t){ 10 }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
	YR.holder_rc = -1;
	YR.tries = 0;
	s = remora_worker_sched(T.w[0]);
	cr_assert_eq(remora_sched_spawn(s, yield_holder, NULL), 0);
	cr_assert_eq(remora_sched_spawn(s, yield_retrier, NULL), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	cr_assert_eq(YR.holder_rc, 0, "the holder commits");
	ttx_close(&T);
	return YR.tries;
}

/* A refused local lock costs no verb: without a yield the retrier would spin while the
 * holder never runs again (on two nodes, the node stops answering lock requests too). */
Test(txn_lotus, lock_abort_yields_to_holder)
{
	unsigned tries = retrier_gets_lock(NULL);

	cr_assert(tries > 1 && tries <= 64, "the retrier got the lock at attempt %u", tries);
}

/* Negative control: lotus_abort_no_yield spins all 64 attempts; the holder ends after. */
Test(txn_lotus, lock_abort_yields_to_holder_mutated)
{
	cr_assert_eq(retrier_gets_lock("lotus_abort_no_yield"), 0);
}

/*
 * The VT cache (one compute node: every shard is ours). The first locked read of key 1 READs
 * its CVT and caches it, the commit caches the committed image, so the next transaction's
 * locked read costs no verb at all and sees the new value; a snapshot read (read-only, no
 * lock) never uses the cache. lotus_no_vt_cache: the second locked read READs again.
 */
static uint64_t second_locked_read_reads(const char *mutate)
{
	struct remora_counters c0, c1, c2;
	struct remora_tx *tx;
	uint64_t x, reads;

	open_lotus("sr", mutate);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 1, &x), 0);
	x++;
	cr_assert_eq(remora_tx_write(tx, 0, 1, &x), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	cr_assert_eq(remora_tx_begin(T.w[1], 0, &tx), 0);
	c0 = ttx_counters(&T, 1);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 1, &x), 0);
	c1 = ttx_counters(&T, 1);
	reads = ttx_vc(&c0, &c1).read;
	cr_assert_eq(x, 11, "the committed value");
	x++;
	cr_assert_eq(remora_tx_write(tx, 0, 1, &x), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	c1 = ttx_counters(&T, 0);
	cr_assert_eq(ttx_get(&T, 0, 0, 1, &x), 0);
	c2 = ttx_counters(&T, 0);
	cr_assert_eq(x, 12);
	cr_assert_eq(ttx_vc(&c1, &c2).read, 1, "a snapshot read READs");
	ttx_close(&T);
	return reads;
}

Test(txn_lotus, vt_cache_serves_the_owners_locked_read)
{
	cr_assert_eq(second_locked_read_reads(NULL), 0, "a VT cache hit READs nothing");
	cr_assert_eq(second_locked_read_reads("lotus_no_vt_cache"), 1);
}

/* ---- inline GC ---------------------------------------------------------------------------- */

/*
 * Five cells per CVT. Key 7 is written 70 (the loaded version carries timestamp 0, older than
 * any GC age: this write reclaims it). A snapshot reader begins (before 71 when `early`, after
 * it otherwise); worker 0 writes 71, waits `wait_ms`, writes 72; then the reader reads key 7.
 * The last writer finds 70 more than 500 ms old (when wait_ms is past 500) and not the newest,
 * and reclaims it; a never-used cell is left. Returns the reader's result, the value in *got.
 */
static int gc_reader(const char *mutate, bool early, unsigned wait_ms, uint64_t *got)
{
	struct remora_tx *ro = NULL;
	int rc;

	setenv("REMORA_CVT_CELLS", "5", 1);
	open_lotus("sr", mutate);
	unsetenv("REMORA_CVT_CELLS");
	ttx_put(&T, 0, 0, 7, 70);
	if (early)
		cr_assert_eq(remora_tx_begin(T.w[1], REMORA_TX_READ_ONLY, &ro), 0);
	ttx_put(&T, 0, 0, 7, 71);
	if (!early)
		cr_assert_eq(remora_tx_begin(T.w[1], REMORA_TX_READ_ONLY, &ro), 0);
	usleep(wait_ms * 1000u);
	ttx_put(&T, 0, 0, 7, 72);
	*got = 0;
	rc = remora_tx_read(ro, 0, 7, got);
	if (rc == 0)
		rc = remora_tx_commit(ro);
	else
		remora_tx_abort(ro);
	ttx_close(&T);
	return rc;
}

/* Young versions stay: the early reader reads 70. */
Test(txn_lotus, gc_keeps_young_versions)
{
	uint64_t v;

	cr_assert_eq(gc_reader(NULL, true, 0, &v), 0);
	cr_assert_eq(v, 70);
}

/* 70, 600 ms old and no longer the newest, is reclaimed: the early reader's version is gone,
 * and it aborts; it must not take the key for absent. */
Test(txn_lotus, gc_reclaimed_version_aborts_the_reader)
{
	uint64_t v;

	cr_assert_eq(gc_reader(NULL, true, 600, &v), -REMORA_EABORT);
}

/* Negative control: a reader that takes a reclaimed cell for a never-used one says absent. */
Test(txn_lotus, gc_reclaimed_version_aborts_the_reader_mutated)
{
	uint64_t v;

	cr_assert_eq(gc_reader("lotus_gc_unmarked", true, 600, &v), -REMORA_ENOTFOUND);
}

/* The newest version is never reclaimed, however old: 71 is 600 ms old when 72 is written,
 * and the reader that began after 71 still reads it. */
Test(txn_lotus, gc_never_reclaims_the_newest)
{
	uint64_t v;

	cr_assert_eq(gc_reader(NULL, false, 600, &v), 0);
	cr_assert_eq(v, 71);
}

/* ---- index-bucket locks ------------------------------------------------------------------- */

static uint64_t bkt_key_b;
static int bkt_other_rc;

/* Whether the index bucket of key (table 0) holds a slot with key's fingerprint: READ from
 * memory, past the address cache (which keeps a lost slot's record reachable). */
static bool bucket_has(uint64_t key)
{
	const struct store_table *t = store_table(&T.db->st, 0);
	struct store_bucket bk;
	struct store_place p;
	struct remora_wr wr;

	store_place(&T.db->st, t, key, &p);
	wr = store_wr_read(&T.db->st, p.primary, store_bucket_off(t, p.bucket), &bk, sizeof(bk));
	cr_assert_eq(store_exec(T.tu.ch, &wr, 1), 0);
	for (unsigned i = 0; i < REMORA_STORE_BUCKET_SLOTS; i++)
		if (bk.slot[i] && (uint16_t)(bk.slot[i] >> REMORA_STORE_SLOT_FP_SHIFT) == p.fp)
			return true;
	return false;
}

/* Another key of the bucket that key a's lookup lands in (table 0, both absent). */
static uint64_t same_bucket_key(uint64_t a)
{
	const struct store_table *t = store_table(&T.db->st, 0);
	struct store_place pa, pb;

	store_place(&T.db->st, t, a, &pa);
	for (uint64_t b = a + 1;; b++) {
		store_place(&T.db->st, t, b, &pb);
		if (pb.bucket == pa.bucket)
			return b;
	}
}

/* Between worker 0's bucket READ and its slot WRITE, worker 1 inserts the other key. */
static void bkt_hook(struct remora_tx *tx, const char *point)
{
	struct remora_tx *o;

	if (tx->c->w != T.w[0] || strcmp(point, "txn.insert_slot") || bkt_other_rc != 1)
		return;
	cr_assert_eq(remora_tx_begin(T.w[1], 0, &o), 0);
	bkt_other_rc = remora_tx_insert(o, 0, bkt_key_b, &(uint64_t){ 2 });
	if (bkt_other_rc == 0)
		bkt_other_rc = remora_tx_commit(o);
	else
		remora_tx_abort(o);
}

/*
 * Two inserts into one index bucket, the second between the first's bucket READ and its slot
 * WRITE. Returns whether the second's committed key is still in the index afterwards (true
 * also when it aborted); the first's must commit with no atomic verb.
 */
static bool bucket_inserts_both_kept(const char *mutate)
{
	struct remora_counters c0, c1;
	struct remora_tx *tx;
	uint64_t a = 1000, v;
	bool kept;

	open_lotus("sr", mutate);
	bkt_key_b = same_bucket_key(a);
	bkt_other_rc = 1;
	txn_test_hook = bkt_hook;
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_insert(tx, 0, a, &(uint64_t){ 1 }), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	c1 = ttx_counters(&T, 0);
	txn_test_hook = NULL;
	cr_assert_eq(ttx_vc(&c0, &c1).cas, 0, "an insert's slot goes out without a CAS");
	cr_assert_neq(bkt_other_rc, 1, "the second insert ran");
	cr_assert_eq(ttx_get(&T, 0, 0, a, &v), 0);
	cr_assert_eq(v, 1);
	cr_assert(bucket_has(a));
	kept = bkt_other_rc != 0 || bucket_has(bkt_key_b);
	ttx_close(&T);
	return kept;
}

/* The second insert meets the bucket's lock and aborts (no-wait): nothing is lost. */
Test(txn_lotus, bucket_lock_keeps_both_inserts)
{
	cr_assert(bucket_inserts_both_kept(NULL));
	cr_assert_eq(bkt_other_rc, -REMORA_EABORT);
}

/* Negative control: without the lock both WRITE the same empty slot, and the second's
 * committed key is gone. */
Test(txn_lotus, bucket_lock_keeps_both_inserts_mutated)
{
	cr_assert_not(bucket_inserts_both_kept("lotus_no_bucket_lock"));
	cr_assert_eq(bkt_other_rc, 0);
}

/* ---- resharding ----------------------------------------------------------------------------- */

#include "txn/proto/lotus/reshard.h"

/*
 * Shards spread over 2 compute nodes (this one is node 0: even shards), no handovers of the
 * resharder's own (lotus_reshard_ms 0): the test hands shard 2 to node 1 itself. A transaction of worker 0 holds key 2's W lock
 * through the first handover, which must wait for it and give up after 10 ms (the shard is
 * served here on), unless the mutation hands it over at once. Returns the first handover's
 * result; the second, after the holder committed, must succeed and publish node 1.
 */
static int handover_with_holder(const char *mutate)
{
	struct lotus_db *l;
	struct remora_tx *tx;
	uint64_t x, drain = 0, e = 0;
	struct remora_wr wr;
	int first;

	setenv("REMORA_CN", "2", 1);
	setenv("REMORA_LOTUS_RESHARD_MS", "0", 1);
	open_lotus("sr", mutate);
	unsetenv("REMORA_CN");
	unsetenv("REMORA_LOTUS_RESHARD_MS");
	l = T.db->proto_priv;
	cr_assert_eq(lotus_owner(l, 2), 0);
	/* the restart rule runs first in the resharder: no peer publishes, so it ends at once */
	for (unsigned i = 0; i < 1000 && !__atomic_load_n(&l->serving, __ATOMIC_ACQUIRE); i++)
		usleep(1000);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 2, &x), 0);
	first = lotus_rs_move(T.db, T.tu.ch, 2, 1, &drain);
	if (first == -ETIMEDOUT)
		cr_assert_eq(lotus_owner(l, 2), 0, "not handed over: served here on");
	x++;
	cr_assert_eq(remora_tx_write(tx, 0, 2, &x), 0);
	/* With the mutation it commits too, under a lock node 1 knows nothing of: the bug. */
	cr_assert_eq(remora_tx_commit(tx), 0);
	if (first == -ETIMEDOUT)
		cr_assert_eq(lotus_rs_move(T.db, T.tu.ch, 2, 1, &drain), 0);
	cr_assert_eq(lotus_owner(l, 2), 1);
	cr_assert_eq(lotus_hold(l, 900, 10, 0x1234500000ull, 2, true), -ESTALE,
		     "no grant here once handed over");
	wr = store_wr_read(&T.db->st, 0,
			   store_tail_off(&T.db->st.sb) + offsetof(struct lotus_rs_dir, map) + 16,
			   &e, 8);
	cr_assert_eq(store_exec(T.tu.ch, &wr, 1), 0);
	cr_assert_eq(e & 0xffff, 2, "the directory names node 1 (owner + 1)");
	l->ncn = 1; /* no node 1 runs: the workers' drain would wait 10 s for its DONE */
	ttx_close(&T);
	return first;
}

Test(txn_lotus, handover_waits_for_holders)
{
	cr_assert_eq(handover_with_holder(NULL), -ETIMEDOUT);
}

/* Negative control: lotus_reshard_no_drain hands the shard over under the holder's lock. */
Test(txn_lotus, handover_waits_for_holders_mutated)
{
	cr_assert_eq(handover_with_holder("lotus_reshard_no_drain"), 0);
}

/*
 * The restart rule's test of one peer's published oldest transaction: a node that opened (or
 * took a dead node's shards over) at t waits for a live peer until it published after t that
 * nothing older than t runs; a peer silent for 50 ms counts as dead.
 */
Test(txn_lotus, restart_rule_waits_for_older_transactions)
{
	const uint64_t ms = 1000000, t = 1000 * ms;
	struct lotus_rs_oldest busy = { .begin_ns = t - 5 * ms, .t_ns = t + 1 * ms };
	struct lotus_rs_oldest before = { .begin_ns = t - 1 * ms, .t_ns = t - 1 * ms };
	struct lotus_rs_oldest done = { .begin_ns = t + 1 * ms, .t_ns = t + 2 * ms };

	cr_assert(lotus_rs_peer_older(&busy, t, t + 2 * ms), "an older transaction runs");
	cr_assert(lotus_rs_peer_older(&before, t, t + 2 * ms), "not published since t");
	cr_assert_not(lotus_rs_peer_older(&done, t, t + 3 * ms), "all newer: serve");
	cr_assert_not(lotus_rs_peer_older(&busy, t, t + 60 * ms), "silent 50 ms: dead");
	cr_assert_not(lotus_rs_peer_older(&(struct lotus_rs_oldest){ 0 }, t, t), "never ran");
}
