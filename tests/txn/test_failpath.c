/* SPDX-License-Identifier: MIT */
/*
 * Commit-path failures (verbs that fail, not aborts). Each guarantee is a check that returns
 * true when the engine behaves; the plain test asserts it, the negative control switches the
 * bug back in with its REMORA_MUTATE switch and asserts the check now fails.
 *
 *   unlock_after_log     a commit fenced at one memory node after its log landed keeps its
 *                        locks: no reader sees the half-applied commit recovery may undo
 *                        (oocc, twopl: a commit cut between its commit WRITEs keeps the locks
 *                        of the records not written yet)
 *   stale_cas_old        a lock CAS refused with its batch is not taken as won: the failed
 *                        transaction does not release another transaction's lock (pandora,
 *                        ford, oocc, and twopl's write and read locks)
 *   unlock_fails_commit  a commit whose WRITEs all landed is reported committed even when its
 *                        unlocks cannot be posted
 *   pill_no_incarnation  PILL lock words of a restarted process differ from its predecessor's
 *   stranded_clean_close a db with a stranded coordinator closes as a crash does: its open
 *                        stays counted, so that it is recovered
 *   own_lock_stray       a process whose own coordinator ids are in its local failed set (it
 *                        reopened a dead compute node's id) does not steal its own live locks
 *   unlock_failure_strands  an unlock posted without waiting that fails stops its
 *                        coordinator and strands the db: its lock is left to recovery
 *   unknown_cas_released a failed batch releases, by a CAS from its own PILL word, a lock
 *                        CAS of it that has no result (it may have landed)
 *
 * Failures are injected in-process: remora_pool_fence() on one pool (the same fence the
 * control plane uses on a compute node it declares dead), and remora_transport_detach().
 */
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "ttx.h"
#include "txn/proto/occ/occ.h"
#include "txn/txn.h"

TestSuite(txn_failpath, .fini = ttx_fini, .timeout = TU_TIMEOUT);

static struct ttx T;

static void open_with(const char *proto, const char *mutation, unsigned nmn, uint16_t replicas,
		      unsigned workers)
{
	struct ttx_opts o = {
		.protocol = proto, .nmn = nmn, .replicas = replicas, .workers = workers,
	};

	if (mutation)
		setenv("REMORA_MUTATE", mutation, 1);
	ttx_open(&T, &o);
	unsetenv("REMORA_MUTATE");
	for (uint64_t k = 1; k <= 16; k++)
		cr_assert_eq(remora_db_load(T.w[0], 0, k, &(uint64_t){ 100 }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
}

/* The first key whose primary is node mn and not any of the nodes in `avoid` (bits). */
static uint64_t key_on(unsigned mn)
{
	const struct store_table *t = store_table(&T.db->st, 0);

	for (uint64_t k = 1; k <= 16; k++) {
		struct store_place p;

		store_place(&T.db->st, t, k, &p);
		if (p.primary == mn)
			return k;
	}
	cr_assert_fail("no key on node %u", mn);
	return 0;
}

static struct remora_tx *begin_rw(unsigned w, uint64_t key, uint64_t *v)
{
	struct remora_tx *tx;

	cr_assert_eq(remora_tx_begin(T.w[w], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, key, v), 0, "%s",
		     remora_worker_errmsg(T.w[w]));
	return tx;
}

/* One-shot increment on worker w; returns commit's result. */
static int incr(unsigned w, uint64_t key)
{
	struct remora_tx *tx;
	uint64_t v;
	int rc;

	cr_assert_eq(remora_tx_begin(T.w[w], 0, &tx), 0);
	rc = remora_tx_read_for_update(tx, 0, key, &v);
	if (rc == 0) {
		v++;
		rc = remora_tx_write(tx, 0, key, &v);
	}
	if (rc) {
		remora_tx_abort(tx);
		return rc;
	}
	return remora_tx_commit(tx);
}

/* A read-only transaction on worker w: 0 with *v, or its error (an abort). */
static int read_key(unsigned w, uint64_t key, uint64_t *v)
{
	struct remora_tx *tx;
	int rc;

	cr_assert_eq(remora_tx_begin(T.w[w], REMORA_TX_READ_ONLY, &tx), 0);
	rc = remora_tx_read(tx, 0, key, v);
	if (rc) {
		remora_tx_abort(tx);
		return rc;
	}
	return remora_tx_commit(tx);
}


static void attach_again(uint16_t node)
{
	cr_assert_eq(remora_transport_attach(T.tu.tp, &T.tu.mn[node].desc), 0);
}

/* ---- 1. a commit failing after its log landed ---------------------------------------------- */

static struct remora_tx *fl_tx;
static const char *fl_point;
static int fl_fence_rc = 1;
static bool fl_stopped;

static void fence_mn2(struct remora_tx *tx, const char *point)
{
	if (tx != fl_tx || strcmp(point, fl_point) || fl_fence_rc != 1)
		return;
	fl_fence_rc = remora_pool_fence(T.tu.mn[2].pool, 0); /* this process is compute node 0 */
}

/*
 * 3 memory nodes, 3 replicas: worker 0's increment of a key with its primary on node 0 is
 * fenced at node 2 once its log landed (or between its commit WRITEs). Its commit fails; a
 * reader on worker 1 must not see the new value, which the recovery of this compute node may
 * still undo: it aborts on the lock, or reads the old value.
 */
static bool check_fenced_commit_hidden(const char *proto, const char *mutation,
				       const char *point)
{
	uint64_t key, v = 0, seen = 0;
	int rc, rd;

	open_with(proto, mutation, 3, 3, 2);
	key = key_on(0);
	fl_tx = begin_rw(0, key, &v);
	v++;
	cr_assert_eq(remora_tx_write(fl_tx, 0, key, &v), 0);
	fl_point = point;
	fl_fence_rc = 1;
	txn_test_hook = fence_mn2;
	rc = remora_tx_commit(fl_tx);
	txn_test_hook = NULL;
	cr_assert_eq(fl_fence_rc, 0, "fence: %s", remora_strerror(fl_fence_rc));
	cr_assert_eq(rc, -REMORA_EFENCED, "commit: %s", remora_strerror(rc));
	rd = read_key(1, key, &seen);
	/* The coordinator that failed runs nothing more: its log is left to recovery. */
	fl_stopped = remora_tx_begin(T.w[0], 0, &fl_tx) != 0;
	if (!fl_stopped)
		remora_tx_abort(fl_tx);
	ttx_close(&T);
	return rd != 0 || seen == 100;
}

Test(txn_failpath, fenced_after_log_keeps_locks)
{
	cr_assert(check_fenced_commit_hidden("pandora", NULL, "txn.logged"));
	cr_assert(fl_stopped);
}

/* The same between two commit WRITEs (the primary's landed, node 2's is fenced). */
Test(txn_failpath, fenced_mid_commit_keeps_locks)
{
	cr_assert(check_fenced_commit_hidden("pandora", NULL, "txn.commit_write"));
	cr_assert(fl_stopped);
}

/*
 * FORD keeps the locks too, but its reads ignore locks (no PILL check): its reader commits
 * on the half-applied commit that the recovery of the fenced node will undo. Documented in
 * docs/recovery.md; this test shows it.
 */
Test(txn_failpath, ford_reader_sees_half_applied_commit)
{
	cr_assert_not(check_fenced_commit_hidden("ford", NULL, "txn.logged"));
	cr_assert(fl_stopped);
}

/*
 * The stranded coordinator makes its db stranded; closing it leaves the open counted on the
 * memory nodes it still reaches (node 0): a restart asks for recovery, as after a crash.
 * True when it does.
 */
static bool check_stranded_close(const char *mutation)
{
	const uint64_t off = REMORA_STORE_CONTROL_OFF +
			     offsetof(struct store_control, live_opens);
	uint64_t key, v = 0, opens;
	bool stranded;

	open_with("pandora", mutation, 3, 3, 1);
	cr_assert_not(remora_db_stranded(T.db));
	key = key_on(0);
	fl_tx = begin_rw(0, key, &v);
	v++;
	cr_assert_eq(remora_tx_write(fl_tx, 0, key, &v), 0);
	fl_point = "txn.logged";
	fl_fence_rc = 1;
	txn_test_hook = fence_mn2;
	cr_assert_eq(remora_tx_commit(fl_tx), -REMORA_EFENCED);
	txn_test_hook = NULL;
	stranded = remora_db_stranded(T.db);
	remora_worker_destroy(T.w[0]);
	T.nw = 0;
	remora_db_close(T.db);
	T.db = NULL;
	memcpy(&opens, T.tu.mn[0].base + off, 8);
	ttx_close(&T);
	return stranded && opens == 1;
}

Test(txn_failpath, stranded_close_stays_counted)
{
	cr_assert(check_stranded_close(NULL));
}

Test(txn_failpath, stranded_close_stays_counted_mutated)
{
	cr_assert_not(check_stranded_close("stranded_clean_close"));
}

Test(txn_failpath, fenced_after_log_keeps_locks_mutated)
{
	cr_assert_not(check_fenced_commit_hidden("pandora", "unlock_after_log", "txn.logged"));
}

/*
 * oocc and twopl: the commit WRITE of a record also unlocks it, so the pandora check above
 * cannot tell (a primary whose WRITE landed is unlocked and carries the new value, which the
 * recovery of this compute node rolls forward). What the locks must keep hidden is a commit
 * applied to some records and not to others. 2 memory nodes, 1 replica: worker 0 increments
 * a (node 0) and b (node 1); its commit WRITEs go in two doorbells (split_commit, as for the
 * txn.commit_mid crash point) and node 1 is detached between them, so a's WRITE landed and
 * b's was refused. Node 1 is back when the failure would release its locks. A reader on
 * worker 1 must not see a new and b old: it aborts on b's lock (or sees both equal).
 */
static struct remora_tx *mc_tx;
static bool mc_detached;

static void detach_mid_commit(struct remora_tx *tx, const char *point)
{
	if (tx != mc_tx)
		return;
	if (!mc_detached && !strcmp(point, "txn.commit_mid")) {
		mc_detached = true;
		cr_assert_eq(remora_transport_detach(T.tu.tp, 1), 0);
	} else if (mc_detached && !strcmp(point, "txn.abort_unlock")) {
		mc_detached = false;
		attach_again(1);
	}
}

static bool check_mid_commit_hidden(const char *proto, const char *mutation)
{
	uint64_t a, b, va = 0, vb = 0, ra = 0, rb = 0;
	struct remora_tx *r;
	int rc, rd;

	open_with(proto, mutation, 2, 1, 2);
	a = key_on(0);
	b = key_on(1);
	mc_tx = begin_rw(0, a, &va);
	cr_assert_eq(remora_tx_read_for_update(mc_tx, 0, b, &vb), 0);
	va++;
	vb++;
	cr_assert_eq(remora_tx_write(mc_tx, 0, a, &va), 0);
	cr_assert_eq(remora_tx_write(mc_tx, 0, b, &vb), 0);
	T.db->split_commit = true;
	mc_detached = false;
	txn_test_hook = detach_mid_commit;
	rc = remora_tx_commit(mc_tx);
	txn_test_hook = NULL;
	T.db->split_commit = false;
	if (mc_detached)
		attach_again(1);
	cr_assert(rc < 0 && rc != -REMORA_EABORT, "commit: %s", remora_strerror(rc));
	cr_assert_eq(remora_tx_begin(T.w[1], REMORA_TX_READ_ONLY, &r), 0);
	rd = remora_tx_read(r, 0, a, &ra);
	if (!rd)
		rd = remora_tx_read(r, 0, b, &rb);
	if (rd)
		remora_tx_abort(r);
	else
		rd = remora_tx_commit(r);
	fl_stopped = remora_tx_begin(T.w[0], 0, &fl_tx) != 0;
	if (!fl_stopped)
		remora_tx_abort(fl_tx);
	ttx_close(&T);
	return rd != 0 || ra == rb;
}

Test(txn_failpath, detached_mid_commit_keeps_locks_oocc)
{
	cr_assert(check_mid_commit_hidden("oocc", NULL));
	cr_assert(fl_stopped);
}

Test(txn_failpath, detached_mid_commit_keeps_locks_twopl)
{
	cr_assert(check_mid_commit_hidden("twopl", NULL));
	cr_assert(fl_stopped);
}

Test(txn_failpath, detached_mid_commit_keeps_locks_oocc_mutated)
{
	cr_assert_not(check_mid_commit_hidden("oocc", "unlock_after_log"));
}

/* ---- 2. a refused lock CAS is not a won lock ----------------------------------------------- */

static struct remora_tx *rc_tx;
static bool rc_detached;

/* Node 1 is back by the time the failed transaction releases what it believes it locked. */
static void attach_at_abort(struct remora_tx *tx, const char *point)
{
	if (tx != rc_tx || !rc_detached || strcmp(point, "txn.abort_unlock"))
		return;
	rc_detached = false;
	attach_again(1);
}

/*
 * 2 memory nodes, 1 replica. Worker 1 holds key a (node 0). Worker 0 fetches a and b (node 1)
 * for writing in one batch while node 1 is detached: the batch is refused, no CAS is sent.
 * Node 1 is back when the failure releases its locks. That must not release a's lock, so
 * worker 2's increment of a still aborts, and worker 1's commit is not lost.
 */
static bool check_refused_cas_not_won(const char *proto, const char *mutation)
{
	uint64_t a, b, va = 0, vb = 0, v;
	struct remora_tx *x, *tx;
	int rc, y;

	open_with(proto, mutation, 2, 1, 3);
	a = key_on(0);
	b = key_on(1);
	x = begin_rw(1, a, &va);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_stage(tx, 0, a, REMORA_RW, &v, NULL), 0);
	cr_assert_eq(remora_tx_stage(tx, 0, b, REMORA_RW, &vb, NULL), 0);
	cr_assert_eq(remora_transport_detach(T.tu.tp, 1), 0);
	rc_tx = tx;
	rc_detached = true;
	txn_test_hook = attach_at_abort;
	rc = remora_tx_fetch(tx);
	remora_tx_abort(tx);
	txn_test_hook = NULL;
	if (rc_detached)
		attach_again(1);
	cr_assert(rc < 0 && rc != -REMORA_EABORT, "fetch: %s", remora_strerror(rc));
	y = incr(2, a); /* with the bug: worker 0's failure cleared x's lock, so this wins */
	va++;
	cr_assert_eq(remora_tx_write(x, 0, a, &va), 0);
	cr_assert_eq(remora_tx_commit(x), 0);
	cr_assert_eq(read_key(2, a, &v), 0);
	ttx_close(&T);
	return y == -REMORA_EABORT && v == 101;
}

Test(txn_failpath, refused_cas_not_won_pandora)
{
	cr_assert(check_refused_cas_not_won("pandora", NULL));
}

Test(txn_failpath, refused_cas_not_won_ford)
{
	cr_assert(check_refused_cas_not_won("ford", NULL));
}

Test(txn_failpath, refused_cas_not_won_oocc)
{
	cr_assert(check_refused_cas_not_won("oocc", NULL));
}

Test(txn_failpath, refused_cas_not_won_twopl)
{
	cr_assert(check_refused_cas_not_won("twopl", NULL));
}

Test(txn_failpath, refused_cas_not_won_oocc_mutated)
{
	cr_assert_not(check_refused_cas_not_won("oocc", "stale_cas_old"));
}

Test(txn_failpath, refused_cas_not_won_twopl_mutated)
{
	cr_assert_not(check_refused_cas_not_won("twopl", "stale_cas_old"));
}

/*
 * twopl's read locks: worker 1 holds a read lock on a (reader count 1). Worker 0's read-lock
 * CAS on a is refused with its batch (node 1, b's node, detached). Taking it as won would give
 * back a read lock it never had (FAA -1: count 0), and worker 2's write lock on a would then
 * win while worker 1 still reads under its lock.
 */
static bool check_refused_rlock_not_won(const char *mutation)
{
	uint64_t a, b, va = 0, v;
	struct remora_tx *r, *tx;
	int rc, y;

	open_with("twopl", mutation, 2, 1, 3);
	a = key_on(0);
	b = key_on(1);
	cr_assert_eq(remora_tx_begin(T.w[1], REMORA_TX_READ_ONLY, &r), 0);
	cr_assert_eq(remora_tx_read(r, 0, a, &va), 0);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_stage(tx, 0, a, REMORA_RD, &v, NULL), 0);
	cr_assert_eq(remora_tx_stage(tx, 0, b, REMORA_RD, &v, NULL), 0);
	cr_assert_eq(remora_transport_detach(T.tu.tp, 1), 0);
	rc_tx = tx;
	rc_detached = true;
	txn_test_hook = attach_at_abort;
	rc = remora_tx_fetch(tx);
	remora_tx_abort(tx);
	txn_test_hook = NULL;
	if (rc_detached)
		attach_again(1);
	cr_assert(rc < 0 && rc != -REMORA_EABORT, "fetch: %s", remora_strerror(rc));
	y = incr(2, a); /* with the bug: the reader count is 0, so this write lock wins */
	cr_assert_eq(remora_tx_commit(r), 0);
	ttx_close(&T);
	return y == -REMORA_EABORT && va == 100;
}

Test(txn_failpath, refused_rlock_not_won_twopl)
{
	cr_assert(check_refused_rlock_not_won(NULL));
}

Test(txn_failpath, refused_rlock_not_won_twopl_mutated)
{
	cr_assert_not(check_refused_rlock_not_won("stale_cas_old"));
}

Test(txn_failpath, refused_cas_not_won_pandora_mutated)
{
	cr_assert_not(check_refused_cas_not_won("pandora", "stale_cas_old"));
}

Test(txn_failpath, refused_cas_not_won_ford_mutated)
{
	cr_assert_not(check_refused_cas_not_won("ford", "stale_cas_old"));
}

/* ---- 3. a landed commit whose unlocks are refused ------------------------------------------ */

static struct remora_tx *ul_tx;
static bool ul_fired;

static void detach_at_unlock(struct remora_tx *tx, const char *point)
{
	if (tx != ul_tx || ul_fired || strcmp(point, "txn.unlock"))
		return;
	ul_fired = true;
	cr_assert_eq(remora_transport_detach(T.tu.tp, 0), 0);
}

/* Every commit WRITE acked, then node 0 goes away before the unlocks are posted. */
static bool check_landed_commit_reported(const char *proto, const char *mutation)
{
	uint64_t key, v = 0;
	int rc;

	open_with(proto, mutation, 1, 1, 1);
	key = key_on(0);
	ul_tx = begin_rw(0, key, &v);
	v = 555;
	cr_assert_eq(remora_tx_write(ul_tx, 0, key, &v), 0);
	ul_fired = false;
	txn_test_hook = detach_at_unlock;
	rc = remora_tx_commit(ul_tx);
	txn_test_hook = NULL;
	attach_again(0);
	cr_assert(ul_fired);
	ttx_close(&T);
	return rc == 0;
}

Test(txn_failpath, landed_commit_reported_pandora)
{
	cr_assert(check_landed_commit_reported("pandora", NULL));
}

Test(txn_failpath, landed_commit_reported_ford)
{
	cr_assert(check_landed_commit_reported("ford", NULL));
}

Test(txn_failpath, landed_commit_reported_mutated)
{
	cr_assert_not(check_landed_commit_reported("pandora", "unlock_fails_commit"));
}

/* ---- 4. PILL lock words across restarts ---------------------------------------------------- */

/* The lock word the first transaction of worker 0 takes after an open of the database. */
static uint64_t first_lock_word(void)
{
	struct remora_tx *tx;
	uint64_t w;

	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	w = ((const struct occ_tx *)tx->priv)->lock;
	remora_tx_abort(tx);
	return w;
}

/* Opens the database again on the same pools: a restart of this compute node. */
static void reopen(const char *mutation)
{
	struct remora_db_cfg cfg = {
		.size = sizeof(cfg), .protocol = "pandora", .cn_id = 0, .n_mn = 1,
		.coords_per_worker = 1, .workers = 1, .tp = T.tu.tp,
	};
	int rc;

	remora_worker_destroy(T.w[0]);
	remora_db_close(T.db);
	if (mutation)
		setenv("REMORA_MUTATE", mutation, 1);
	rc = remora_db_open(&cfg, &T.db);
	unsetenv("REMORA_MUTATE");
	cr_assert_eq(rc, 0, "open: %s (%s)", remora_strerror(rc), remora_db_errmsg(NULL));
	cr_assert_eq(remora_worker_create(T.db, 0, &T.w[0]), 0);
}

static bool check_lock_words_fresh(const char *mutation)
{
	uint64_t before, after;

	open_with("pandora", mutation, 1, 1, 1);
	before = first_lock_word();
	reopen(mutation);
	after = first_lock_word();
	cr_assert_eq(before & 0xffff, after & 0xffff, "same coordinator id after a restart");
	ttx_close(&T);
	return before != after;
}

Test(txn_failpath, pill_words_fresh_after_restart)
{
	cr_assert(check_lock_words_fresh(NULL));
}

Test(txn_failpath, pill_words_fresh_after_restart_mutated)
{
	cr_assert_not(check_lock_words_fresh("pill_no_incarnation"));
}

/* ---- 5. own locks are never stray ------------------------------------------------------------ */

/*
 * Worker 0 holds key 1's lock; its coordinator id is in the local failed set, as after this
 * process learnt that the previous holder of its compute-node id failed. Worker 1 (same
 * process, same incarnation) must see a live lock, not a stray one. True when it does.
 */
static bool check_own_lock_not_stray(const char *mutation)
{
	struct remora_tx *a, *b;
	uint64_t v;
	int rc;

	open_with("pandora", mutation, 1, 1, 2);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &a), 0);
	cr_assert_eq(remora_tx_read_for_update(a, 0, 1, &v), 0);
	txn_set_failed(T.db, a->c->id, true);
	cr_assert_eq(remora_tx_begin(T.w[1], 0, &b), 0);
	rc = remora_tx_read_for_update(b, 0, 1, &v);
	remora_tx_abort(b);
	remora_tx_abort(a);
	ttx_close(&T);
	return rc != 0;
}

Test(txn_failpath, own_lock_not_stray)
{
	cr_assert(check_own_lock_not_stray(NULL));
}

Test(txn_failpath, own_lock_not_stray_mutated)
{
	cr_assert_not(check_own_lock_not_stray("own_lock_stray"));
}

/*
 * unlock_failure_strands: an abort's fire-and-forget unlock fails (node 0 fences this compute
 * node as the abort posts it), so the lock may stay under a live coordinator id that nobody
 * would ever steal. The coordinator's next begin must fail and strand the db, so that the node
 * exits as a crash does and is recovered. The negative control forgets the failed unlock: the
 * next begin goes on. True when the engine strands.
 */
static struct remora_tx *uf_tx;
static int uf_fence_rc = 1;

static void fence_at_abort_unlock(struct remora_tx *tx, const char *point)
{
	if (tx != uf_tx || strcmp(point, "txn.abort_unlock") || uf_fence_rc != 1)
		return;
	uf_fence_rc = remora_pool_fence(T.tu.mn[0].pool, 0);
}

static bool check_unlock_failure_strands(const char *mutation)
{
	struct remora_tx *tx;
	uint64_t v;
	bool stopped;

	open_with("pandora", mutation, 1, 1, 1);
	uf_tx = begin_rw(0, 1, &v);
	uf_fence_rc = 1;
	txn_test_hook = fence_at_abort_unlock;
	remora_tx_abort(uf_tx);
	txn_test_hook = NULL;
	cr_assert_eq(uf_fence_rc, 0, "fence: %s", remora_strerror(uf_fence_rc));
	stopped = remora_tx_begin(T.w[0], 0, &tx) != 0;
	if (stopped)
		cr_assert(strstr(remora_worker_errmsg(T.w[0]), "posted without waiting failed"), "%s",
			  remora_worker_errmsg(T.w[0]));
	else
		remora_tx_abort(tx);
	stopped = stopped && remora_db_stranded(T.db);
	ttx_close(&T);
	return stopped;
}

Test(txn_failpath, unlock_failure_strands)
{
	cr_assert(check_unlock_failure_strands(NULL));
}

Test(txn_failpath, unlock_failure_strands_mutated)
{
	cr_assert_not(check_unlock_failure_strands("unlock_failure_ignored"));
}

/*
 * unknown_cas_released: a lock CAS whose batch failed has no result, yet it may have landed (an
 * RDMA QP that broke after the memory node executed it). Simulated: worker 0 locks a (node 0),
 * and the test forgets that it won (the flag a failed batch would not have set); then its next
 * fetch, of b on node 1, which has fenced this compute node, fails. The failure must release a
 * by a CAS from this transaction's own PILL word, which frees a exactly because it is ours.
 * Worker 1 then locks a (or aborts on the leaked lock: mutation unknown_cas_kept). True when a
 * is free.
 */
static bool check_unknown_cas_released(const char *mutation)
{
	uint64_t a, b, va = 0, vb = 0;
	struct remora_tx *tx, *tx1;
	int rc;

	open_with("pandora", mutation, 2, 1, 2);
	a = key_on(0);
	b = key_on(1);
	tx = begin_rw(0, a, &va);
	cr_assert_eq(tx->nobj, 1);
	cr_assert(tx->objs[0]->flags & OBJ_LOCKED);
	tx->objs[0]->flags &= ~OBJ_LOCKED; /* the CAS's result never came */
	cr_assert_eq(remora_pool_fence(T.tu.mn[1].pool, 0), 0);
	rc = remora_tx_read_for_update(tx, 0, b, &vb);
	cr_assert_eq(rc, -REMORA_EFENCED, "fetch of b: %s", remora_strerror(rc));
	remora_tx_abort(tx);
	cr_assert_eq(remora_tx_begin(T.w[1], 0, &tx1), 0);
	rc = remora_tx_read_for_update(tx1, 0, a, &va);
	remora_tx_abort(tx1);
	ttx_close(&T);
	return rc == 0;
}

Test(txn_failpath, unknown_cas_released)
{
	cr_assert(check_unknown_cas_released(NULL));
}

Test(txn_failpath, unknown_cas_released_mutated)
{
	cr_assert_not(check_unknown_cas_released("unknown_cas_kept"));
}
