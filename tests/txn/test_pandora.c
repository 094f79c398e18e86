/* SPDX-License-Identifier: MIT */
/*
 * Pandora's specific guarantees and the mutation switches that take them back out. Every
 * guarantee is written as a check returning true when the engine behaves; the plain test
 * asserts the check holds, the negative control switches the bug back in (REMORA_MUTATE) and
 * asserts the same check now fails -- so each check is shown able to fail.
 *
 * Interleavings are deterministic: a second transaction runs on another worker (its own
 * channel and coordinator) from inside the first one's commit, through the engine's test hook
 * at a named protocol point.
 */
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "ttx.h"
#include "txn/txn.h"

TestSuite(txn_pandora, .fini = ttx_fini, .timeout = TU_TIMEOUT);

static struct ttx T;

static void open_with(const char *proto, const char *mutation, unsigned workers)
{
	struct ttx_opts o = { .protocol = proto, .nmn = 1, .workers = workers };

	if (mutation)
		setenv("REMORA_MUTATE", mutation, 1);
	ttx_open(&T, &o);
	unsetenv("REMORA_MUTATE");
	for (uint64_t k = 1; k <= 8; k++)
		cr_assert_eq(remora_db_load(T.w[0], 0, k, &(uint64_t){ 0 }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
}

static uint64_t get(uint64_t key)
{
	uint64_t v = UINT64_MAX;

	cr_assert_eq(ttx_get(&T, 0, 0, key, &v), 0);
	return v;
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

/* The VALID log record in worker w's log slot (node 0), if it is transaction txid's. */
static const struct store_log_hdr *log_of(unsigned w, uint64_t txid)
{
	const struct txn_coord *c = &T.w[w]->coords[0];
	const struct store_log_hdr *h =
		(const void *)(T.tu.mn[0].base + store_log_off(&T.db->st, c->log_slot));

	if (!(h->flags & REMORA_STORE_LOG_VALID) || h->tx_id != txid)
		return NULL;
	return h;
}

static bool log_names(const struct store_log_hdr *h, uint64_t key, uint8_t op)
{
	const unsigned char *p = (const unsigned char *)(h + 1);

	for (unsigned i = 0; i < h->n; i++) {
		const struct store_log_ent *e = (const void *)p;

		if (e->key == key && e->op == op)
			return true;
		p += sizeof(*e) + e->img_len;
	}
	return false;
}

/* ---- PILL: stray locks ----------------------------------------------------------------- */

Test(txn_pandora, stray_lock_stolen_with_one_cas)
{
	struct remora_counters c0, c1;
	struct remora_tx *dead, *tx;
	uint64_t v;

	open_with("pandora", NULL, 2);
	/* Coordinator of worker 0 locks key 1, then "dies" holding it. */
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &dead), 0);
	cr_assert_eq(remora_tx_read_for_update(dead, 0, 1, &v), 0);
	/* While it is live, others abort on its lock (reads too). */
	cr_assert_eq(incr(1, 1), -REMORA_EABORT);
	cr_assert_eq(remora_worker_last_abort(T.w[1]), REMORA_ABORT_LOCKED);
	cr_assert_eq(remora_tx_begin(T.w[1], 0, &tx), 0);
	cr_assert_eq(remora_tx_read(tx, 0, 1, &v), -REMORA_EABORT, "a live lock aborts a read");
	remora_tx_abort(tx);

	txn_set_failed(T.db, T.w[0]->coords[0].id, true);
	/* Reads treat a stray lock as free. */
	cr_assert_eq(ttx_get(&T, 1, 0, 1, &v), 0);
	/* A writer takes it over: first CAS fails (stray owner), one more CAS + READ wins. */
	cr_assert_eq(remora_tx_begin(T.w[1], 0, &tx), 0);
	c0 = ttx_counters(&T, 1);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 1, &v), 0);
	c1 = ttx_counters(&T, 1);
	cr_assert_eq(ttx_verbs(&c0, &c1, REMORA_OP_CAS), 2);
	cr_assert_eq(ttx_verbs(&c0, &c1, REMORA_OP_READ), 2);
	v = 42;
	cr_assert_eq(remora_tx_write(tx, 0, 1, &v), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	cr_assert_eq(ttx_get(&T, 1, 0, 1, &v), 0);
	cr_assert_eq(v, 42);
	/* Without a failed owner there is nothing to steal: clear the bit, lock again, abort. */
	txn_set_failed(T.db, T.w[0]->coords[0].id, false);
	remora_tx_abort(dead);
	ttx_close(&T);
}

/* ---- complicit abort --------------------------------------------------------------------- */

/* A holds X; B fails to lock X and aborts; C must still find X locked. */
static bool check_abort_keeps_others_locks(const char *proto, const char *mutation)
{
	struct remora_tx *a;
	uint64_t v;
	int rc;

	open_with(proto, mutation, 3);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &a), 0);
	cr_assert_eq(remora_tx_read_for_update(a, 0, 1, &v), 0);
	cr_assert_eq(incr(1, 1), -REMORA_EABORT);
	rc = incr(2, 1); /* with the bug: B's abort freed A's lock, so C wins too */
	v = 7;
	cr_assert_eq(remora_tx_write(a, 0, 1, &v), 0);
	cr_assert_eq(remora_tx_commit(a), 0);
	ttx_close(&T);
	return rc == -REMORA_EABORT;
}

Test(txn_pandora, complicit_abort) { cr_assert(check_abort_keeps_others_locks("pandora", NULL)); }
Test(txn_pandora, complicit_abort_ford) { cr_assert(check_abort_keeps_others_locks("ford", NULL)); }
Test(txn_pandora, complicit_abort_mutated)
{
	cr_assert_not(check_abort_keeps_others_locks("pandora", "complicit_abort"));
}

/* ---- missing actions --------------------------------------------------------------------- */

static bool check_inserts_logged(const char *mutation)
{
	const struct store_log_hdr *h;
	struct remora_tx *tx;
	uint64_t v = 5, id;
	bool ok;

	open_with("pandora", mutation, 1);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	id = remora_tx_id(tx);
	cr_assert_eq(remora_tx_insert(tx, 0, 100, &v), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 2, &v), 0);
	cr_assert_eq(remora_tx_write(tx, 0, 2, &v), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	h = log_of(0, id);
	cr_assert_not_null(h, "the write set was logged");
	cr_assert(log_names(h, 2, REMORA_STORE_LOG_UPD));
	ok = log_names(h, 100, REMORA_STORE_LOG_INS);
	ttx_close(&T);
	return ok;
}

Test(txn_pandora, missing_actions) { cr_assert(check_inserts_logged(NULL)); }
Test(txn_pandora, missing_actions_mutated) { cr_assert_not(check_inserts_logged("missing_actions")); }

/* ---- covert locks ------------------------------------------------------------------------ */

/* A reads X; B locks X (not yet committed); A's validation must see B's lock and abort. */
static bool check_validation_sees_locks(const char *proto, const char *mutation)
{
	struct remora_tx *a, *b;
	uint64_t v;
	int rc;

	open_with(proto, mutation, 2);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &a), 0);
	cr_assert_eq(remora_tx_read(a, 0, 1, &v), 0);
	cr_assert_eq(remora_tx_begin(T.w[1], 0, &b), 0);
	cr_assert_eq(remora_tx_read_for_update(b, 0, 1, &v), 0);
	rc = remora_tx_commit(a);
	remora_tx_abort(b);
	ttx_close(&T);
	return rc == -REMORA_EABORT;
}

Test(txn_pandora, covert_locks) { cr_assert(check_validation_sees_locks("pandora", NULL)); }
Test(txn_pandora, covert_locks_mutated)
{
	cr_assert_not(check_validation_sees_locks("pandora", "covert_locks"));
}
/* FORD validates versions only: FORD as published has this bug. */
Test(txn_pandora, covert_locks_ford_has_it)
{
	cr_assert_not(check_validation_sees_locks("ford", NULL));
}

/* ---- relaxed locks (litmus L2 made deterministic) ---------------------------------------- */

static struct remora_tx *l2_t1;
static int l2_t2_rc;
static bool l2_fired;

/* T2 = {read Y; write X = Y + 1}, started earlier; committed from inside T1's commit. */
static struct remora_tx *l2_t2;

static void l2_hook(struct remora_tx *tx, const char *point)
{
	if (tx != l2_t1 || l2_fired || strcmp(point, "txn.lock"))
		return;
	l2_fired = true;
	l2_t2_rc = remora_tx_commit(l2_t2);
}

/* L2: T1 {r X; w Y = X + 1}, T2 {r Y; w X = Y + 1}; forbidden: both commit having read 0. */
static bool check_l2(const char *mutation)
{
	uint64_t x = 9, y = 9, one;
	int rc1 = 0, rc2 = 0;

	open_with("pandora", mutation, 2);
	l2_fired = false;
	l2_t2_rc = 1;
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &l2_t1), 0);
	cr_assert_eq(remora_tx_begin(T.w[1], 0, &l2_t2), 0);
	cr_assert_eq(remora_tx_read(l2_t1, 0, 1, &x), 0);
	rc1 = remora_tx_read_for_update(l2_t1, 0, 2, &one);
	if (rc1 == 0)
		rc2 = remora_tx_read(l2_t2, 0, 2, &y);
	if (rc2 == 0)
		rc2 = remora_tx_read_for_update(l2_t2, 0, 1, &one);
	if (rc2 == 0)
		rc2 = remora_tx_write(l2_t2, 0, 1, &(uint64_t){ y + 1 });
	if (rc2) {
		remora_tx_abort(l2_t2);
		l2_t2_rc = rc2;
		l2_fired = true;
	}
	if (rc1 == 0)
		rc1 = remora_tx_write(l2_t1, 0, 2, &(uint64_t){ x + 1 });
	txn_test_hook = l2_hook;
	rc1 = rc1 ? (remora_tx_abort(l2_t1), rc1) : remora_tx_commit(l2_t1);
	txn_test_hook = NULL;
	if (!l2_fired)
		l2_t2_rc = remora_tx_commit(l2_t2);
	x = get(1);
	y = get(2);
	ttx_close(&T);
	/* Serializable outcomes: at most one committed, or X != Y. */
	return !(rc1 == 0 && l2_t2_rc == 0 && x == 1 && y == 1);
}

Test(txn_pandora, relaxed_locks) { cr_assert(check_l2(NULL)); }
Test(txn_pandora, relaxed_locks_mutated) { cr_assert_not(check_l2("relaxed_locks")); }

/* ---- lost decision and logging without locking ------------------------------------------- */

/* T1 locks and writes X, Y, read Z; Z changes; T1 aborts at validation: no valid log of T1. */
static bool check_no_log_survives_abort(const char *mutation)
{
	struct remora_tx *t1;
	uint64_t v, id;
	bool ok;

	open_with("pandora", mutation, 2);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &t1), 0);
	id = remora_tx_id(t1);
	cr_assert_eq(remora_tx_read(t1, 0, 3, &v), 0);
	cr_assert_eq(remora_tx_read_for_update(t1, 0, 1, &v), 0);
	cr_assert_eq(remora_tx_read_for_update(t1, 0, 2, &v), 0);
	v = 1;
	cr_assert_eq(remora_tx_write(t1, 0, 1, &v), 0);
	cr_assert_eq(remora_tx_write(t1, 0, 2, &v), 0);
	cr_assert_eq(incr(1, 3), 0);
	cr_assert_eq(remora_tx_commit(t1), -REMORA_EABORT);
	ok = log_of(0, id) == NULL;
	ttx_close(&T);
	return ok;
}

Test(txn_pandora, lost_decision) { cr_assert(check_no_log_survives_abort(NULL)); }
Test(txn_pandora, lost_decision_mutated)
{
	cr_assert_not(check_no_log_survives_abort("lost_decision"));
}

/* T2 holds X; T1's lock on X fails: T1 must never have logged X. */
static bool check_log_only_locked(const char *mutation)
{
	const struct store_log_hdr *h;
	struct remora_tx *t1, *t2;
	uint64_t v, id;
	bool ok;

	open_with("pandora", mutation, 2);
	cr_assert_eq(remora_tx_begin(T.w[1], 0, &t2), 0);
	cr_assert_eq(remora_tx_read_for_update(t2, 0, 1, &v), 0);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &t1), 0);
	id = remora_tx_id(t1);
	cr_assert_eq(remora_tx_read_for_update(t1, 0, 1, &v), -REMORA_EABORT);
	remora_tx_abort(t1);
	h = log_of(0, id);
	ok = !h || !log_names(h, 1, REMORA_STORE_LOG_UPD);
	remora_tx_abort(t2);
	ttx_close(&T);
	return ok;
}

Test(txn_pandora, log_without_lock) { cr_assert(check_log_only_locked(NULL)); }
Test(txn_pandora, log_without_lock_mutated)
{
	cr_assert_not(check_log_only_locked("log_without_lock"));
}

/* ---- skip validation --------------------------------------------------------------------- */

/* T1 reads X, X changes, T1 writes Y: T1 must abort (else a lost-update style anomaly). */
static bool check_validation_runs(const char *proto, const char *mutation)
{
	struct remora_tx *t1;
	uint64_t v;
	int rc;

	open_with(proto, mutation, 2);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &t1), 0);
	cr_assert_eq(remora_tx_read(t1, 0, 1, &v), 0);
	cr_assert_eq(incr(1, 1), 0);
	cr_assert_eq(remora_tx_read_for_update(t1, 0, 2, &v), 0);
	cr_assert_eq(remora_tx_write(t1, 0, 2, &v), 0);
	rc = remora_tx_commit(t1);
	if (rc == -REMORA_EABORT)
		cr_assert_eq(remora_worker_last_abort(T.w[0]), REMORA_ABORT_VALIDATION);
	ttx_close(&T);
	return rc == -REMORA_EABORT;
}

Test(txn_pandora, skip_validation) { cr_assert(check_validation_runs("pandora", NULL)); }
Test(txn_pandora, skip_validation_ford) { cr_assert(check_validation_runs("ford", NULL)); }
Test(txn_pandora, skip_validation_mutated)
{
	cr_assert_not(check_validation_runs("pandora", "skip_validation"));
}

/* ---- early unlock ------------------------------------------------------------------------ */

static struct remora_tx *eu_t1;
static int eu_t2_rc;
static bool eu_fired;

static void eu_hook(struct remora_tx *tx, const char *point)
{
	if (tx != eu_t1 || eu_fired || strcmp(point, "txn.commit_write"))
		return;
	eu_fired = true;
	eu_t2_rc = incr(1, 1); /* between T1's unlock and its commit WRITE, if the bug is in */
}

/* Two increments; the final value must count every committed one. */
static bool check_no_lost_update(const char *mutation)
{
	uint64_t v;
	int rc1;

	open_with("pandora", mutation, 2);
	eu_fired = false;
	eu_t2_rc = 1;
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &eu_t1), 0);
	cr_assert_eq(remora_tx_read_for_update(eu_t1, 0, 1, &v), 0);
	v++;
	cr_assert_eq(remora_tx_write(eu_t1, 0, 1, &v), 0);
	txn_test_hook = eu_hook;
	rc1 = remora_tx_commit(eu_t1);
	txn_test_hook = NULL;
	cr_assert_eq(rc1, 0);
	cr_assert(eu_fired);
	v = get(1);
	ttx_close(&T);
	return v == 1u + (eu_t2_rc == 0);
}

Test(txn_pandora, early_unlock) { cr_assert(check_no_lost_update(NULL)); }
Test(txn_pandora, early_unlock_mutated) { cr_assert_not(check_no_lost_update("early_unlock")); }
