// SPDX-License-Identifier: MIT
/*
 * Pandora's litmus tests (EDBT'25, section 5) as a workload, so that they run through the same
 * machinery as the benchmarks: any protocol, backend, number of compute-node processes,
 * threads and coordinators. Application-observable-state checking: small transactions whose
 * values reveal a non-serializable execution, checked by read-only assertion transactions
 * during the run and by a scan of every round's final values after it.
 *
 * Every round uses fresh keys X, Y, Z; all coordinators of all compute nodes work on the same
 * round at the same time (round = (now - epoch) / round-ms, on a clock every process of the
 * host shares), which is what makes the contention heavy.
 *
 *   l1         Direct-Write   T1 {X=V1; Y=V1}, T2 {Y=V2; X=V2}            assert X == Y
 *              (checked also by every committed writer, on the values it locked)
 *   l1-insdel  the insert/delete variant: keys start absent; a writer inserts both, or
 *              deletes both, or overwrites both          assert both absent or both X == Y
 *   l2         Read-Write     T1 {Y = X+1}, T2 {X = Y+1}, from 0 (reads encoded in values)
 *              any serial order leaves X != Y once one committed: assert X == Y -> X == 0
 *   l3         Indirect-Write T1 {X = X+1; Y = X}, T2 {X = X+1; Z = X}
 *              assert X == max(Y, Z) (so Y <= X and Z <= X), and after the run
 *              sum(X) == committed T1 + T2
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "workload.h"

#define LIT_TABLE 0
#define LIT_VARS 3 /* X, Y, Z */

enum lit_test { LIT_L1, LIT_L1_INSDEL, LIT_L2, LIT_L3 };
enum lit_type { LIT_T1, LIT_T2, LIT_ASSERT };
enum { X, Y, Z };

struct lit_val {
	int64_t v;
	uint64_t writer;
};
_Static_assert(sizeof(struct lit_val) == 16, "litmus values are 16 B");

struct litmus {
	enum lit_test test;
	uint64_t rounds;
	uint64_t round_ns;
	uint64_t epoch_ns;
	unsigned assert_pct;
	bool each; /* one round trip per access, in program order (the paper's T1 {r X; w Y}) */
};

struct lit_coord {
	struct lit_val v[LIT_VARS];
	bool found[LIT_VARS];
};

/* Accumulators. */
enum { ACC_VIOLATIONS, ACC_INCREMENTS, ACC_VIOLATION_ROUND };

static const struct wl_knob lit_knobs[] = {
	{ "test", "l2", "litmus test: l1 | l1-insdel | l2 | l3" },
	{ "rounds", "100", "rounds, each on fresh keys" },
	{ "round-ms", "20", "length of a round" },
	{ "epoch-ns", "", "CLOCK_REALTIME of round 0 (ns); empty: 250 ms after start-up" },
	{ "assert-pct", "20", "percent of read-only assertion transactions" },
	{ "fetch", "each", "each: one round trip per access, in order | batch: one for all" },
	{ NULL, NULL, NULL },
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int lit_init(struct wl *wl)
{
	static const char *const tests[] = { "l1", "l1-insdel", "l2", "l3", NULL };
	struct litmus *l = calloc(1, sizeof(*l));
	const char *epoch;
	unsigned t;
	uint64_t v;
	int rc;

	if (!l)
		return wl_fail(wl, "out of memory");
	wl->priv = l;
	rc = wl_knob_choice(wl, "test", tests, &t);
	if (!rc)
		rc = wl_knob_u64(wl, "rounds", 1, 1000000, &l->rounds);
	if (!rc)
		rc = wl_knob_u64(wl, "round-ms", 1, 3600000, &v);
	if (rc)
		return rc;
	l->test = (enum lit_test)t;
	l->round_ns = v * 1000000u;
	rc = wl_knob_u64(wl, "assert-pct", 0, 100, &v);
	if (rc)
		return rc;
	l->assert_pct = (unsigned)v;
	{
		static const char *const modes[] = { "batch", "each", NULL };
		unsigned m;

		rc = wl_knob_choice(wl, "fetch", modes, &m);
		if (rc)
			return rc;
		l->each = m == 1;
	}
	epoch = wl_knob_str(wl, "epoch-ns");
	if (epoch && *epoch) {
		rc = wl_knob_u64(wl, "epoch-ns", 0, UINT64_MAX, &l->epoch_ns);
		if (rc)
			return rc;
	} else {
		/*
		 * Compute nodes are released together and configure the workload first, so
		 * they agree on this within a few ms; 250 ms leaves time to open the database
		 * and start the coordinators before round 0.
		 */
		l->epoch_ns = now_ns() + 250 * 1000 * 1000;
	}
	return 0;
}

static void lit_fini(struct wl *wl)
{
	free(wl->priv);
}

static uint64_t lit_key(uint64_t round, unsigned var)
{
	return round * 4 + var;
}

static unsigned lit_tables(const struct wl *wl, struct remora_table_def *defs)
{
	const struct litmus *l = wl->priv;

	memset(defs, 0, sizeof(*defs));
	snprintf(defs[0].name, sizeof(defs[0].name), "litmus");
	defs[0].id = LIT_TABLE;
	defs[0].value_size = sizeof(struct lit_val);
	defs[0].max_records = l->rounds * LIT_VARS;
	return 1;
}

static uint64_t lit_load_count(const struct wl *wl)
{
	const struct litmus *l = wl->priv;

	return l->test == LIT_L1_INSDEL ? 0 : l->rounds * LIT_VARS;
}

static int lit_load(const struct wl *wl, struct remora_worker *w, uint64_t begin, uint64_t end)
{
	(void)wl;
	for (uint64_t i = begin; i < end; i++) {
		struct lit_val v = { 0 };
		int rc = remora_db_load(w, LIT_TABLE, lit_key(i / LIT_VARS, i % LIT_VARS), &v);

		if (rc)
			return rc;
	}
	return 0;
}

static int lit_coord_init(const struct wl *wl, struct wl_coord *c)
{
	(void)wl;
	c->priv = calloc(1, sizeof(struct lit_coord));
	return c->priv ? 0 : -ENOMEM;
}

static void lit_coord_fini(const struct wl *wl, struct wl_coord *c)
{
	(void)wl;
	free(c->priv);
}

static void lit_gen(const struct wl *wl, struct wl_coord *c, struct wl_input *in)
{
	const struct litmus *l = wl->priv;
	uint64_t now = now_ns();
	uint64_t round = now > l->epoch_ns ? (now - l->epoch_ns) / l->round_ns : 0;

	memset(in, 0, sizeof(*in));
	in->key[0] = round < l->rounds ? round : l->rounds - 1;
	in->nkeys = 1;
	if (wl_rng_pct(&c->rng, l->assert_pct))
		in->type = LIT_ASSERT;
	else
		in->type = wl_rng_below(&c->rng, 2) ? LIT_T2 : LIT_T1;
}

static unsigned lit_tx_flags(const struct wl *wl, const struct wl_input *in)
{
	(void)wl;
	return in->type == LIT_ASSERT ? REMORA_TX_READ_ONLY : 0;
}

/*
 * Fetches vars[0..n) of a round with their modes: one round trip per access in order when
 * each is set (a wider window between them, as in the paper's transactions), else one batch.
 */
static int lit_fetch(struct remora_tx *tx, struct lit_coord *lc, uint64_t round, unsigned n,
		     const unsigned *vars, const enum remora_access *mode, bool each)
{
	int rc;

	for (unsigned i = 0; i < n; i++) {
		rc = remora_tx_stage(tx, LIT_TABLE, lit_key(round, vars[i]), mode[i],
				     &lc->v[vars[i]], &lc->found[vars[i]]);
		if (!rc && each)
			rc = remora_tx_fetch(tx);
		if (rc)
			return rc;
	}
	return each ? 0 : remora_tx_fetch(tx);
}

static int lit_put(struct remora_tx *tx, uint64_t round, unsigned var, int64_t v, uint64_t me)
{
	struct lit_val val = { .v = v, .writer = me };

	return remora_tx_write(tx, LIT_TABLE, lit_key(round, var), &val);
}

/*
 * Is this round's state forbidden? (also used on the final values) si: the run is snapshot
 * isolation (--isolation si), where L2's X == Y == 1 is write skew, which SI allows.
 */
static bool lit_forbidden(enum lit_test t, bool si, const struct lit_val *v, const bool *found)
{
	if (t == LIT_L2 && si)
		return !found[X] || !found[Y];
	switch (t) {
	case LIT_L1:
		return !found[X] || !found[Y] || v[X].v != v[Y].v;
	case LIT_L1_INSDEL:
		return found[X] != found[Y] || (found[X] && v[X].v != v[Y].v);
	case LIT_L2:
		return !found[X] || !found[Y] || (v[X].v == v[Y].v && v[X].v != 0);
	case LIT_L3:
	default:
		/*
		 * The last committed writer set X and one of Y, Z to the same value: X ==
		 * max(Y, Z), not only Y, Z <= X. Two-sided without any count, so it holds a
		 * half-redone increment (X raised, its copy not) to account after a crash too.
		 */
		return !found[X] || !found[Y] || !found[Z] ||
		       v[X].v != (v[Y].v > v[Z].v ? v[Y].v : v[Z].v);
	}
}

static int lit_assert(const struct wl *wl, struct lit_coord *lc, struct remora_tx *tx,
		      uint64_t round, struct wl_result *res)
{
	const struct litmus *l = wl->priv;
	static const unsigned vars[] = { X, Y, Z };
	static const enum remora_access m[] = { REMORA_RD, REMORA_RD, REMORA_RD };
	int rc = lit_fetch(tx, lc, round, l->test == LIT_L3 ? 3 : 2, vars, m, l->each);

	if (rc)
		return rc;
	/* counted only if this read-only transaction commits (validated) */
	res->delta = lit_forbidden(l->test, wl->si, lc->v, lc->found);
	return 0;
}

/*
 * A writer is an assertion too: it holds the locks of X and Y from the moment it fetched each
 * until it commits, and every writer writes both, so the two values it read are the last
 * committed ones and must be equal. res->delta marks what it saw; it counts only if the writer
 * commits. This sees two writers that both believe they hold a lock (Complicit Abort) within
 * a round trip, where the final values would need their commit WRITEs to interleave.
 */
static int lit_l1(struct lit_coord *lc, struct remora_tx *tx, uint64_t round, bool t2,
		  bool each, uint64_t me, struct wl_result *res)
{
	static const enum remora_access m[] = { REMORA_RW, REMORA_RW };
	const unsigned vars[2] = { t2 ? Y : X, t2 ? X : Y };
	int rc = lit_fetch(tx, lc, round, 2, vars, m, each);

	if (!rc)
		res->delta = lit_forbidden(LIT_L1, false, lc->v, lc->found);
	if (!rc)
		rc = lit_put(tx, round, vars[0], (int64_t)me, me);
	if (!rc)
		rc = lit_put(tx, round, vars[1], (int64_t)me, me);
	return rc;
}

/*
 * Inserts when both are absent, else deletes (T1) or overwrites (T2) both. What the writer saw
 * is checked as in lit_l1 (absent keys stay validated: the engine re-checks their empty slot);
 * a forbidden state is left as it is (the transaction commits without writes).
 */
static int lit_l1_insdel(struct lit_coord *lc, struct remora_tx *tx, uint64_t round, bool t2,
			 bool each, uint64_t me, struct wl_result *res)
{
	static const enum remora_access m[] = { REMORA_RW, REMORA_RW };
	static const unsigned vars[] = { X, Y };
	struct lit_val val = { .v = (int64_t)me, .writer = me };
	int rc = lit_fetch(tx, lc, round, 2, vars, m, each);

	if (rc)
		return rc;
	res->delta = lit_forbidden(LIT_L1_INSDEL, false, lc->v, lc->found);
	if (res->delta)
		return 0;
	for (unsigned i = 0; i < 2 && !rc; i++) {
		uint64_t key = lit_key(round, vars[i]);

		if (!lc->found[X])
			rc = remora_tx_insert(tx, LIT_TABLE, key, &val);
		else if (!t2)
			rc = remora_tx_delete(tx, LIT_TABLE, key);
		else
			rc = remora_tx_write(tx, LIT_TABLE, key, &val);
	}
	/* a concurrent insert or delete of the same key is a conflict here, not a bug */
	if (rc == -REMORA_EEXIST || rc == -REMORA_ENOTFOUND)
		rc = WL_RETRY;
	return rc;
}

static int lit_l2(struct lit_coord *lc, struct remora_tx *tx, uint64_t round, bool t2,
		  bool each, uint64_t me)
{
	static const enum remora_access m[] = { REMORA_RD, REMORA_RW };
	const unsigned vars[2] = { t2 ? Y : X, t2 ? X : Y }; /* read, then write */
	int rc = lit_fetch(tx, lc, round, 2, vars, m, each);

	if (!rc)
		rc = lit_put(tx, round, vars[1], lc->v[vars[0]].v + 1, me);
	return rc;
}

static int lit_l3(struct lit_coord *lc, struct remora_tx *tx, uint64_t round, bool t2,
		  bool each, uint64_t me)
{
	static const enum remora_access m[] = { REMORA_RW, REMORA_RW };
	const unsigned vars[2] = { X, t2 ? Z : Y };
	int64_t x;
	int rc = lit_fetch(tx, lc, round, 2, vars, m, each);

	if (rc)
		return rc;
	x = lc->v[X].v + 1;
	rc = lit_put(tx, round, X, x, me);
	if (!rc)
		rc = lit_put(tx, round, vars[1], x, me);
	return rc;
}

static int lit_exec(const struct wl *wl, struct wl_coord *c, struct remora_tx *tx,
		    const struct wl_input *in, struct wl_result *res)
{
	const struct litmus *l = wl->priv;
	struct lit_coord *lc = c->priv;
	uint64_t round = in->key[0], me = wl_txid(c);
	bool t2 = in->type == LIT_T2;

	if (in->type == LIT_ASSERT)
		return lit_assert(wl, lc, tx, round, res);
	switch (l->test) {
	case LIT_L1:
		return lit_l1(lc, tx, round, t2, l->each, me, res);
	case LIT_L1_INSDEL:
		return lit_l1_insdel(lc, tx, round, t2, l->each, me, res);
	case LIT_L2:
		return lit_l2(lc, tx, round, t2, l->each, me);
	case LIT_L3:
	default:
		return lit_l3(lc, tx, round, t2, l->each, me);
	}
}

static void lit_commit(const struct wl *wl, struct wl_coord *c, const struct wl_input *in,
		       const struct wl_result *res, uint64_t txid)
{
	const struct litmus *l = wl->priv;

	(void)txid;
	if (res->delta) {
		/* an assertion, or an L1 writer, committed after seeing a forbidden state */
		c->acc[ACC_VIOLATIONS]++;
		if ((int64_t)in->key[0] + 1 > c->acc[ACC_VIOLATION_ROUND])
			c->acc[ACC_VIOLATION_ROUND] = (int64_t)in->key[0] + 1;
	}
	if (in->type != LIT_ASSERT && l->test == LIT_L3)
		c->acc[ACC_INCREMENTS]++;
}

/* ---- verify: every round's final values ------------------------------------------------- */

struct lit_scan {
	const struct litmus *l;
	struct remora_worker *w;
	bool si; /* the run's isolation is SI */
	uint64_t bad_rounds, first_bad;
	struct lit_val bad_v[LIT_VARS];
	bool bad_found[LIT_VARS];
	int64_t sum_x;
	uint64_t locked_round, locked_rounds;
	int rc;
};

static int scan_round(struct lit_scan *s, uint64_t round)
{
	struct lit_coord lc;
	uint64_t keys[LIT_VARS];
	unsigned n = s->l->test == LIT_L3 ? 3 : 2;
	int rc;

	memset(&lc, 0, sizeof(lc));
	for (unsigned i = 0; i < n; i++)
		keys[i] = lit_key(round, i);
	/* a lock left after every compute node exited never goes away: wait long only once */
	rc = wl_probe_locks(s->w, LIT_TABLE, keys, n, lc.v, sizeof(lc.v[0]), lc.found,
			  s->locked_rounds ? 50 : WL_VERIFY_TIMEOUT_MS);
	if (rc == -ETIMEDOUT) {
		if (!s->locked_rounds++)
			s->locked_round = round;
		return 0;
	}
	if (rc)
		return rc;
	if (lit_forbidden(s->l->test, s->si, lc.v, lc.found)) {
		if (!s->bad_rounds++) {
			s->first_bad = round;
			memcpy(s->bad_v, lc.v, sizeof(lc.v));
			memcpy(s->bad_found, lc.found, sizeof(lc.found));
		}
	}
	/* only L3's X counts increments; L1's and L2's hold writer ids, whose sum would overflow */
	if (lc.found[X] && s->l->test == LIT_L3)
		s->sum_x += lc.v[X].v;
	return 0;
}

static void scan_coro(void *arg)
{
	struct lit_scan *s = arg;

	for (uint64_t r = 0; r < s->l->rounds && !s->rc; r++)
		s->rc = scan_round(s, r);
}

static void fmt_var(char *buf, size_t len, const char *name, const struct lit_val *v, bool found)
{
	if (found)
		snprintf(buf, len, "%s=%" PRId64, name, v->v);
	else
		snprintf(buf, len, "%s=absent", name);
}

static int lit_verify(const struct wl *wl, struct remora_worker *w, const int64_t *acc, char *msg,
		      size_t msglen)
{
	const struct litmus *l = wl->priv;
	struct lit_scan s = { .l = l, .w = w, .si = wl->si };
	char vx[40], vy[40], vz[40] = "";
	int rc = wl_on_worker(w, scan_coro, &s);

	if (!rc)
		rc = s.rc;
	if (rc) {
		snprintf(msg, msglen, "reading the rounds back failed: %s", remora_strerror(rc));
		return rc;
	}
	if (s.bad_rounds) {
		fmt_var(vx, sizeof(vx), "X", &s.bad_v[X], s.bad_found[X]);
		fmt_var(vy, sizeof(vy), "Y", &s.bad_v[Y], s.bad_found[Y]);
		if (l->test == LIT_L3)
			fmt_var(vz, sizeof(vz), " Z", &s.bad_v[Z], s.bad_found[Z]);
		snprintf(msg, msglen, "%" PRIu64 " of %" PRIu64 " rounds end in a forbidden state "
			 "(round %" PRIu64 ": %s %s%s); %" PRId64 " assertions failed during the run; "
			 "%" PRIu64 " rounds stay locked", s.bad_rounds, l->rounds, s.first_bad, vx,
			 vy, vz, acc[ACC_VIOLATIONS], s.locked_rounds);
		return 1;
	}
	if (acc[ACC_VIOLATIONS]) {
		snprintf(msg, msglen, "%" PRId64 " committed transactions saw a forbidden state "
			 "(latest in round %" PRId64 "); %" PRIu64 " rounds stay locked",
			 acc[ACC_VIOLATIONS], acc[ACC_VIOLATION_ROUND] - 1, s.locked_rounds);
		return 1;
	}
	if (s.locked_rounds) {
		char note[WL_LOCK_NOTE_LEN];

		snprintf(msg, msglen, "%" PRIu64 " rounds (first: %" PRIu64 ") stay locked after "
			 "every compute node exited (a leaked lock); the others hold%s",
			 s.locked_rounds, s.locked_round, wl_lock_note(w, note, sizeof(note)));
		return 1;
	}
	/* Without a dead node's count, X can only exceed the survivors' increments. */
	if (l->test == LIT_L3 &&
	    (wl->acc_partial ? s.sum_x < acc[ACC_INCREMENTS] : s.sum_x != acc[ACC_INCREMENTS])) {
		snprintf(msg, msglen, "increments lost: X sums to %" PRId64 " over all rounds but "
			 "%" PRId64 " increments committed", s.sum_x, acc[ACC_INCREMENTS]);
		return 1;
	}
	snprintf(msg, msglen, "%" PRIu64 " rounds hold, no assertion failed%s%s", l->rounds,
		 l->test == LIT_L2 && wl->si ? " (SI: write skew X == Y allowed)" : "",
		 l->test == LIT_L3 && wl->acc_partial
		     ? " (X at least the survivors' increments: a compute node died with its count)"
		     : "");
	return 0;
}

const struct wl_desc wl_litmus = {
	.name = "litmus",
	.summary = "Pandora's litmus tests L1 (with insert/delete), L2, L3 as a workload",
	.source = "Pandora (EDBT'25) section 5, Figure 5",
	.knobs = lit_knobs,
	.ntypes = 3,
	.type_names = { "T1", "T2", "Assert" },
	.acc_names = { "assert_violations", "l3_increments", "violation_round" },
	.acc_max = { 0, 0, 1 },
	.init = lit_init,
	.fini = lit_fini,
	.tables = lit_tables,
	.load_count = lit_load_count,
	.load = lit_load,
	.coord_init = lit_coord_init,
	.coord_fini = lit_coord_fini,
	.gen = lit_gen,
	.tx_flags = lit_tx_flags,
	.exec = lit_exec,
	.commit = lit_commit,
	.verify = lit_verify,
};
