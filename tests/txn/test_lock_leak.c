/* SPDX-License-Identifier: MIT */
/*
 * No transaction leaves a lock behind.
 *
 * Regression: insert_backup_failure. An insert publishes its record locked (placeholder
 * written with the inserter's lock word, index slot claimed by CAS), then posts the backup
 * copies. When that post failed, the transaction failed without having noted the lock, so the
 * published record stayed locked for good and every later transaction on the key aborted.
 *
 * The lock scan: every record slot's lock word, READ through the verbs API once every
 * scheduler has returned and every channel is drained, must be 0 (a negative control shows
 * the scan sees a lock left held). Same key staged twice: one object, one CAS, no lock left.
 *
 * The stress: many short, highly contended runs of a SmallBank-like mix on a handful of
 * accounts -- transfers that may name the same account twice, user aborts (insufficient funds,
 * abandoned transactions), read-then-upgrade, inserts and deletes on a tiny key range -- from
 * several threads and a second compute-node process, each with many coroutine coordinators.
 * The engine's test hook yields at random protocol points, and some rounds run under the cx3
 * cost profile (completions arrive later than the post), so interleavings differ from round to
 * round. After each round: the lock scan, and the bank's total against the committed deltas. A
 * coordinator that keeps aborting on one input far too long fails the round with the lock
 * words of its keys (a leaked lock pins coordinators that retry the same input).
 *
 * After each round the engine's own lock count (remora_db_locks_unreleased: locks won, minus
 * given back, minus left to recovery) must be 0 too; negative control occ_forgets_unlock (a
 * commit skips its unlocks once in 1024 transactions) is seen by both that count and the scan.
 *
 * Environment (soaks): REMORA_LOCKSCAN_ROUNDS multiplies the rounds of each stress test.
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <remora/sched.h>

#include "store/store.h"
#include "ttx.h"
#include "txn/txn.h"

TestSuite(txn_lock_leak, .fini = ttx_fini, .timeout = 120);

enum { T_SAV, T_CHK, T_EXTRA };

#define MAX_THREADS 2
#define MAX_COORDS 8
#define EXTRA_KEYS 6
#define START 700          /* per account and table: SendPayment often lacks funds */
#define ATTEMPTS 20000u    /* aborts of one input before the round calls it a livelock */

static const struct remora_table_def tables[] = {
	{ .name = "savings", .id = T_SAV, .value_size = 8, .max_records = 64 },
	{ .name = "checking", .id = T_CHK, .value_size = 8, .max_records = 64 },
	{ .name = "extra", .id = T_EXTRA, .value_size = 8, .max_records = 64 },
};

struct round {
	const char *proto;
	unsigned threads, coords, accounts, txns; /* txns per coordinator */
	unsigned yield_pct;                       /* test hook: yield at a protocol point */
	bool child;                               /* a second compute node in a child process */
	uint64_t seed;
};

static struct ttx T;
static const struct round *cur;

/* ---- the workload ---------------------------------------------------------------------- */

struct co {
	struct remora_worker *w;
	uint64_t rng;
	int64_t delta;      /* money the committed transactions added */
	int64_t extra;      /* extra-table inserts minus deletes committed */
	unsigned committed, user_aborts, aborts;
	int fail;
	char why[256];
};

static __thread uint64_t hook_rng;

static uint64_t below(uint64_t *rng, uint64_t n)
{
	return tu_rand64(rng) % n;
}

/* Test hook: a random yield at any named protocol point varies the interleavings. */
static void hook(struct remora_tx *tx, const char *point)
{
	(void)tx;
	(void)point;
	if (!hook_rng)
		hook_rng = (uint64_t)(uintptr_t)&hook_rng;
	if (cur && remora_coro_self() && below(&hook_rng, 100) < cur->yield_pct)
		remora_yield();
}

enum { RUN_COMMIT, RUN_USER_ABORT };

/* Amalgamate: savings and checking of a0 move to checking of a1 (a0 != a1). */
static int amalgamate(struct remora_tx *tx, uint64_t a0, uint64_t a1)
{
	int64_t s0, c0, c1, zero = 0;
	int rc = remora_tx_stage(tx, T_SAV, a0, REMORA_RW, &s0, NULL);

	if (!rc)
		rc = remora_tx_stage(tx, T_CHK, a0, REMORA_RW, &c0, NULL);
	if (!rc)
		rc = remora_tx_stage(tx, T_CHK, a1, REMORA_RW, &c1, NULL);
	if (!rc)
		rc = remora_tx_fetch(tx);
	if (rc)
		return rc;
	c1 += s0 + c0;
	rc = remora_tx_write(tx, T_SAV, a0, &zero);
	if (!rc)
		rc = remora_tx_write(tx, T_CHK, a0, &zero);
	return rc ? rc : remora_tx_write(tx, T_CHK, a1, &c1);
}

/* SendPayment through single-key calls, so a0 == a1 (the same key locked twice) is fine. */
static int send_payment(struct remora_tx *tx, uint64_t a0, uint64_t a1, int64_t amt)
{
	int64_t v;
	int rc = remora_tx_read_for_update(tx, T_CHK, a0, &v);

	if (rc)
		return rc;
	if (v < amt)
		return RUN_USER_ABORT;
	v -= amt;
	rc = remora_tx_write(tx, T_CHK, a0, &v);
	if (!rc)
		rc = remora_tx_read_for_update(tx, T_CHK, a1, &v); /* sees our own write */
	if (rc)
		return rc;
	v += amt;
	return remora_tx_write(tx, T_CHK, a1, &v);
}

/* Adds amt to (table, a) by read_for_update; a result below 0 is the user's abort. */
static int add(struct remora_tx *tx, uint32_t table, uint64_t a, int64_t amt)
{
	int64_t v;
	int rc = remora_tx_read_for_update(tx, table, a, &v);

	if (rc)
		return rc;
	v += amt;
	if (v < 0)
		return RUN_USER_ABORT;
	return remora_tx_write(tx, table, a, &v);
}

/* WriteCheck: savings read, checking written (a read object next to a locked one). */
static int write_check(struct remora_tx *tx, uint64_t a, int64_t amt)
{
	int64_t s, c;
	int rc = remora_tx_stage(tx, T_SAV, a, REMORA_RD, &s, NULL);

	if (!rc)
		rc = remora_tx_stage(tx, T_CHK, a, REMORA_RW, &c, NULL);
	if (!rc)
		rc = remora_tx_fetch(tx);
	if (rc)
		return rc;
	c -= amt;
	return remora_tx_write(tx, T_CHK, a, &c);
}

static int balance(struct remora_tx *tx, uint64_t a)
{
	int64_t s, c;
	int rc = remora_tx_stage(tx, T_SAV, a, REMORA_RD, &s, NULL);

	if (!rc)
		rc = remora_tx_stage(tx, T_CHK, a, REMORA_RD, &c, NULL);
	return rc ? rc : remora_tx_fetch(tx);
}

/* Read first, then upgrade the same key to a write lock. */
static int upgrade(struct remora_tx *tx, uint64_t a, int64_t amt)
{
	int64_t v;
	int rc = remora_tx_read(tx, T_SAV, a, &v);

	if (!rc)
		rc = remora_tx_read_for_update(tx, T_SAV, a, &v);
	if (rc)
		return rc;
	v += amt;
	return remora_tx_write(tx, T_SAV, a, &v);
}

/* Insert the key if absent, else delete it; sometimes both ways round in one transaction. */
static int churn(struct remora_tx *tx, uint64_t k, unsigned how, int64_t *extra)
{
	int64_t v = (int64_t)k;
	int rc = remora_tx_read_for_update(tx, T_EXTRA, k, &v);

	if (rc == -REMORA_ENOTFOUND) {
		rc = remora_tx_insert(tx, T_EXTRA, k, &v);
		if (rc == -REMORA_EEXIST)
			return RUN_USER_ABORT; /* inserted meanwhile: our read is stale anyway */
		*extra = 1;
		if (!rc && how == 1) {
			rc = remora_tx_delete(tx, T_EXTRA, k);
			*extra = 0;
		}
	} else if (rc == 0) {
		rc = remora_tx_delete(tx, T_EXTRA, k);
		*extra = -1;
		if (!rc && how == 1) {
			rc = remora_tx_insert(tx, T_EXTRA, k, &v);
			*extra = 0;
		}
	}
	return rc;
}

/* Locks two keys, then the application walks away. */
static int abandon(struct remora_tx *tx, uint64_t a0, uint64_t a1)
{
	int64_t x, y;
	int rc = remora_tx_stage(tx, T_CHK, a0, REMORA_RW, &x, NULL);

	if (!rc)
		rc = remora_tx_stage(tx, T_SAV, a1, REMORA_RW, &y, NULL);
	if (!rc)
		rc = remora_tx_fetch(tx);
	return rc ? rc : RUN_USER_ABORT;
}

struct input {
	unsigned type;
	uint64_t a0, a1;
	int64_t amt;
	unsigned how;
};

static void gen(struct co *c, struct input *in)
{
	unsigned n = cur->accounts;

	in->type = (unsigned)below(&c->rng, 9);
	in->a0 = below(&c->rng, n);
	in->a1 = below(&c->rng, n);
	if (in->type == 0 && in->a1 == in->a0)
		in->a1 = (in->a0 + 1) % n;
	in->amt = (int64_t)below(&c->rng, 400);
	in->how = (unsigned)below(&c->rng, 3);
}

/* One attempt: RUN_COMMIT (committed), RUN_USER_ABORT, -REMORA_EABORT, or a failure. */
static int attempt(struct co *c, const struct input *in, int64_t *delta, int64_t *extra)
{
	unsigned flags = in->type == 1 ? REMORA_TX_READ_ONLY : 0;
	struct remora_tx *tx;
	int rc = remora_tx_begin(c->w, flags, &tx);

	*delta = 0;
	*extra = 0;
	if (rc)
		return rc;
	switch (in->type) {
	case 0:
		rc = amalgamate(tx, in->a0, in->a1);
		break;
	case 1:
		rc = balance(tx, in->a0);
		break;
	case 2:
		rc = add(tx, T_CHK, in->a0, in->amt);
		*delta = in->amt;
		break;
	case 3:
		rc = send_payment(tx, in->a0, in->a1, in->amt);
		break;
	case 4:
		rc = add(tx, T_SAV, in->a0, -in->amt);
		*delta = -in->amt;
		break;
	case 5:
		rc = write_check(tx, in->a0, in->amt);
		*delta = -in->amt;
		break;
	case 6:
		rc = upgrade(tx, in->a0, 1);
		*delta = 1;
		break;
	case 7:
		rc = churn(tx, in->a0 % EXTRA_KEYS, in->how, extra);
		break;
	default:
		rc = abandon(tx, in->a0, in->a1);
		break;
	}
	if (rc) {
		remora_tx_abort(tx);
		return rc;
	}
	return remora_tx_commit(tx);
}

/* Diagnostics: the lock word of (table, key), from its primary's pool memory (0: absent). */
static uint64_t lock_word(uint32_t table, uint64_t key);

static void livelock(struct co *c, const struct input *in)
{
	snprintf(c->why, sizeof(c->why),
		 "type %u keys %llu,%llu: %u aborts in a row (lock words chk %#llx,%#llx sav "
		 "%#llx,%#llx)", in->type, (unsigned long long)in->a0, (unsigned long long)in->a1,
		 ATTEMPTS, (unsigned long long)lock_word(T_CHK, in->a0),
		 (unsigned long long)lock_word(T_CHK, in->a1),
		 (unsigned long long)lock_word(T_SAV, in->a0),
		 (unsigned long long)lock_word(T_SAV, in->a1));
	c->fail = 1;
}

static void coordinator(void *p)
{
	struct co *c = p;

	for (unsigned n = 0; n < cur->txns && !c->fail; n++) {
		struct input in;
		int64_t delta, extra;
		unsigned a;
		int rc = -REMORA_EABORT;

		gen(c, &in);
		for (a = 0; a < ATTEMPTS && rc == -REMORA_EABORT; a++) {
			rc = attempt(c, &in, &delta, &extra);
			if (rc == -REMORA_EABORT) {
				unsigned spins = 1 + (unsigned)below(&c->rng, 2u << (a < 6 ? a : 6));

				c->aborts++;
				if (a >= 3)
					sched_yield(); /* a holder in another thread or process */
				while (spins--)
					remora_yield();
			}
		}
		if (rc == RUN_USER_ABORT) {
			c->user_aborts++;
		} else if (rc == RUN_COMMIT) {
			c->committed++;
			c->delta += delta;
			c->extra += extra;
		} else if (a == ATTEMPTS) {
			livelock(c, &in);
		} else {
			snprintf(c->why, sizeof(c->why), "type %u: %s (%s)", in.type,
				 remora_strerror(rc), remora_worker_errmsg(c->w));
			c->fail = 1;
		}
	}
}

struct thr {
	struct remora_worker *w;
	struct co co[MAX_COORDS];
	int rc;
};

/* Runs the thread's coordinators to the end, then drains its channel (fire-and-forget verbs). */
static void thr_run(struct thr *t, unsigned coords)
{
	struct remora_sched *s = remora_worker_sched(t->w);
	struct remora_chan *ch = remora_worker_chan(t->w);

	for (unsigned i = 0; i < coords && !t->rc; i++)
		t->rc = remora_sched_spawn(s, coordinator, &t->co[i]);
	if (!t->rc)
		t->rc = remora_sched_run(s);
	while (remora_chan_outstanding(ch))
		remora_chan_progress(ch);
}

static void *thr_main(void *p)
{
	struct thr *t = p;

	thr_run(t, cur->coords);
	return NULL;
}

static void thr_init(struct thr *t, struct remora_worker *w, unsigned cn, unsigned i)
{
	memset(t, 0, sizeof(*t));
	t->w = w;
	for (unsigned c = 0; c < cur->coords; c++)
		t->co[c] = (struct co){ .w = w, .rng = cur->seed * 1000003u + cn * 7919u +
							i * 131u + c + 1 };
}

/* Sums of a thread's coordinators; the first failure goes to why. */
struct sums {
	int64_t delta, extra;
	uint64_t committed, user_aborts, aborts;
	int fail;
	char why[300];
};

static void thr_sum(const struct thr *t, struct sums *s)
{
	if (t->rc && !s->fail) {
		snprintf(s->why, sizeof(s->why), "scheduler: %s", remora_strerror(t->rc));
		s->fail = 1;
	}
	for (unsigned c = 0; c < cur->coords; c++) {
		const struct co *o = &t->co[c];

		if (o->fail && !s->fail) {
			snprintf(s->why, sizeof(s->why), "coordinator %u: %s", c, o->why);
			s->fail = 1;
		}
		s->delta += o->delta;
		s->extra += o->extra;
		s->committed += o->committed;
		s->user_aborts += o->user_aborts;
		s->aborts += o->aborts;
	}
}

static void spares_of(struct remora_worker *const *w, unsigned nw, uint64_t *out, unsigned *n);

/* ---- the second compute node ----------------------------------------------------------- */

static int cn_child(void *p, int rd, int wr)
{
	struct remora_db_cfg cfg = { .size = sizeof(cfg), .protocol = cur->proto, .cn_id = 1,
				     .n_mn = (uint16_t)T.nmn, .workers = cur->threads,
				     .coords_per_worker = (uint16_t)cur->coords };
	static struct thr th[MAX_THREADS];
	pthread_t tid[MAX_THREADS];
	struct remora_transport *tp;
	struct sums s = { 0 };
	struct remora_db *db;
	int rc;

	(void)p;
	(void)rd;
	rc = tu_transport_try(1, NULL, &tp);
	TU_CHILD_CHECK(rc == 0, "transport: %s", remora_strerror(rc));
	for (unsigned m = 0; m < T.nmn; m++) {
		rc = remora_transport_attach(tp, &T.tu.mn[m].desc);
		TU_CHILD_CHECK(rc == 0, "attach %u: %s", m, remora_strerror(rc));
	}
	cfg.tp = tp;
	rc = remora_db_open(&cfg, &db);
	TU_CHILD_CHECK(rc == 0, "db open: %s", remora_db_errmsg(NULL));
	for (unsigned i = 0; i < cur->threads; i++) {
		struct remora_worker *w;

		rc = remora_worker_create(db, i, &w);
		TU_CHILD_CHECK(rc == 0, "worker: %s", remora_strerror(rc));
		thr_init(&th[i], w, 1, i);
		TU_CHILD_CHECK(pthread_create(&tid[i], NULL, thr_main, &th[i]) == 0, "thread");
	}
	for (unsigned i = 0; i < cur->threads; i++)
		pthread_join(tid[i], NULL);
	for (unsigned i = 0; i < cur->threads; i++)
		thr_sum(&th[i], &s);
	TU_CHILD_CHECK(!s.fail, "compute node 1: %s", s.why);
	{
		struct remora_worker *ws[MAX_THREADS];
		uint64_t sp[MAX_THREADS * MAX_COORDS * 3];
		unsigned n = 0;

		for (unsigned i = 0; i < cur->threads; i++)
			ws[i] = th[i].w;
		spares_of(ws, cur->threads, sp, &n);
		TU_CHILD_CHECK(tu_send(wr, (uint64_t)s.delta) == 0 &&
			       tu_send(wr, (uint64_t)s.extra) == 0 && tu_send(wr, n) == 0, "pipe");
		for (unsigned i = 0; i < n; i++)
			TU_CHILD_CHECK(tu_send(wr, sp[i]) == 0, "pipe");
	}
	/* Workers are not destroyed: destroy would abort an active transaction, hiding a leak. */
	return 0;
}

/* ---- the lock scan --------------------------------------------------------------------- */

static uint64_t lock_at(struct remora_chan *ch, uint16_t node, uint64_t off)
{
	uint64_t w = UINT64_MAX;
	struct remora_wr wr = {
		.raddr = store_addr(node, off), .rkey = T.db->st.rkey[node], .len = 8,
		.op = REMORA_OP_READ, .local = &w,
	};
	int rc = store_exec(ch, &wr, 1);

	cr_assert_eq(rc, 0, "lock scan READ: %s", remora_strerror(rc));
	return w;
}

static uint64_t lock_word(uint32_t table, uint64_t key)
{
	const struct store_table *t = store_table(&T.db->st, table);
	struct store_place pl;
	struct codec_rec r;

	store_place(&T.db->st, t, key, &pl);
	for (uint64_t i = 0; i < t->ent.capacity; i++) {
		uint64_t off = store_rec_off(t, i);
		const unsigned char *img = T.tu.mn[pl.primary].base + off;

		if (T.db->st.codec->decode(&t->geom, img, 0, &r) == 0 && r.key == key &&
		    r.table == table && (r.flags & REMORA_REC_VALID))
			return r.lock;
	}
	return 0;
}

/*
 * Record slots that coordinators wrote for an insert that lost its index slot race and keep
 * for their next insert (never published, so nobody can reach their lock word), + 1.
 */
static uint64_t spares[2 * MAX_THREADS * MAX_COORDS * 3];
static unsigned nspares, nspares_child; /* the first nspares_child came from the child */

static void spares_of(struct remora_worker *const *w, unsigned nw, uint64_t *out, unsigned *n)
{
	for (unsigned i = 0; i < nw; i++)
		for (unsigned c = 0; c < w[i]->ncoords; c++)
			for (uint32_t t = 0; t < 3; t++)
				if (w[i]->coords[c].spare[t])
					out[(*n)++] = (uint64_t)t << 48 | w[i]->coords[c].spare[t];
}

static bool is_spare(uint32_t table, uint64_t idx)
{
	for (unsigned i = 0; i < nspares; i++)
		if (spares[i] == ((uint64_t)table << 48 | (idx + 1)))
			return true;
	return false;
}

/* Every record slot of every table on every node: the lock word must be 0. */
static unsigned scan_locks(char *first, size_t len)
{
	const struct store_db *st = &T.db->st;
	unsigned held = 0;

	for (uint32_t id = 0; id < sizeof(tables) / sizeof(tables[0]); id++) {
		const struct store_table *t = store_table(st, id);

		for (uint64_t i = 0; i < t->ent.capacity; i++) {
			uint64_t off = store_rec_off(t, i) + t->geom.lock_off;

			for (uint16_t m = 0; m < st->n_mn; m++) {
				uint64_t w = lock_at(T.tu.ch, m, off);
				uint64_t key;

				if (!w || is_spare(id, i))
					continue;
				memcpy(&key, T.tu.mn[m].base + store_rec_off(t, i) + 16, 8);
				if (!held++)
					snprintf(first, len,
						 "table %u slot %llu (key %llu) node %u: lock word %#llx",
						 id, (unsigned long long)i, (unsigned long long)key, m,
						 (unsigned long long)w);
			}
		}
	}
	return held;
}

/* Lock words left set once every worker's channel is drained (fire-and-forget unlocks). */
static unsigned held_locks(char *first, size_t len)
{
	for (unsigned i = 0; i < T.nw; i++) {
		struct remora_chan *ch = remora_worker_chan(T.w[i]);

		while (remora_chan_outstanding(ch))
			remora_chan_progress(ch);
	}
	nspares = nspares_child;
	spares_of(T.w, T.nw, spares, &nspares);
	return scan_locks(first, len);
}

/* ---- deterministic checks -------------------------------------------------------------- */

static void open_small(const char *proto, unsigned nmn)
{
	struct ttx_opts o = { .protocol = proto, .nmn = nmn, .workers = 1, .coords = 1,
			      .tables = tables, .ntables = 3 };

	nspares_child = 0;
	ttx_open(&T, &o);
	for (uint64_t k = 0; k < 4; k++)
		cr_assert_eq(remora_db_load(T.w[0], T_CHK, k, &(int64_t){ START }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
}

Test(txn_lock_leak, scan_sees_a_held_lock)
{
	struct remora_tx *tx;
	char first[200] = "";
	int64_t v;

	open_small("pandora", 1);
	cr_assert_eq(held_locks(first, sizeof(first)), 0, "%s", first);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, T_CHK, 2, &v), 0);
	cr_assert_eq(held_locks(first, sizeof(first)), 1, "the scan misses a held lock");
	cr_assert(strstr(first, "(key 2)"), "the scan names the wrong record: %s", first);
	remora_tx_abort(tx);
	cr_assert_eq(held_locks(first, sizeof(first)), 0, "%s", first);
	ttx_close(&T);
}

/* The same key staged and read for update twice: one object, one CAS, nothing left held. */
static void same_key_twice(const char *proto)
{
	struct remora_counters c0, c1;
	struct remora_tx *tx;
	char first[200] = "";
	int64_t a = 0, b = 0, v = 0;
	uint64_t got;

	open_small(proto, 1);
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_stage(tx, T_CHK, 1, REMORA_RW, &a, NULL), 0);
	cr_assert_eq(remora_tx_stage(tx, T_CHK, 1, REMORA_RW, &b, NULL), 0);
	cr_assert_eq(remora_tx_fetch(tx), 0, "%s", remora_worker_errmsg(T.w[0]));
	cr_assert_eq(remora_tx_read_for_update(tx, T_CHK, 1, &v), 0);
	cr_assert_eq(v, START);
	v += 5;
	cr_assert_eq(remora_tx_write(tx, T_CHK, 1, &v), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, T_CHK, 1, &v), 0);
	cr_assert_eq(v, START + 5, "own write not visible");
	cr_assert_eq(remora_tx_commit(tx), 0, "%s", remora_worker_errmsg(T.w[0]));
	c1 = ttx_counters(&T, 0);
	cr_assert_eq(ttx_verbs(&c0, &c1, REMORA_OP_CAS), 1, "one lock CAS for one key");
	cr_assert_eq(held_locks(first, sizeof(first)), 0, "%s", first);
	cr_assert_eq(ttx_get(&T, 0, T_CHK, 1, &got), 0);
	cr_assert_eq((int64_t)got, START + 5);

	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, T_CHK, 3, &v), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, T_CHK, 3, &v), 0);
	remora_tx_abort(tx);
	cr_assert_eq(held_locks(first, sizeof(first)), 0, "%s", first);
	ttx_close(&T);
}

Test(txn_lock_leak, same_key_twice_ford) { same_key_twice("ford"); }
Test(txn_lock_leak, same_key_twice_pandora) { same_key_twice("pandora"); }

/* A key of table whose primary is node, from `from` on. */
static uint64_t key_on(uint32_t table, uint16_t node, uint64_t from)
{
	const struct store_table *t = store_table(&T.db->st, table);
	struct store_place pl;

	for (uint64_t k = from;; k++) {
		store_place(&T.db->st, t, k, &pl);
		if (pl.primary == node)
			return k;
	}
}

/*
 * The regression: an insert whose backup copies cannot be posted (a backup memory node is
 * unreachable) fails after it published its record locked. The failure must release it.
 */
static void insert_backup_failure(const char *proto)
{
	struct remora_tx *tx;
	char first[200] = "";
	uint64_t k, got = 0;
	int64_t v = 77;
	int rc;

	open_small(proto, 3);
	k = key_on(T_EXTRA, 0, 100);
	cr_assert_eq(remora_transport_detach(T.tu.tp, 1), 0);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	rc = remora_tx_insert(tx, T_EXTRA, k, &v);
	cr_assert_eq(rc, -REMORA_ENODE, "insert with backup node 1 detached: %s (%s)",
		     remora_strerror(rc), remora_worker_errmsg(T.w[0]));
	remora_tx_abort(tx);
	cr_assert_eq(remora_transport_attach(T.tu.tp, &T.tu.mn[1].desc), 0);
	cr_assert_eq(held_locks(first, sizeof(first)), 0,
		     "the record of the failed insert stays locked: %s", first);
	/* The key is not blocked: the next insert takes the placeholder over and commits. */
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_insert(tx, T_EXTRA, k, &v), 0, "%s",
		     remora_worker_errmsg(T.w[0]));
	cr_assert_eq(remora_tx_commit(tx), 0, "%s", remora_worker_errmsg(T.w[0]));
	cr_assert_eq(ttx_get(&T, 0, T_EXTRA, k, &got), 0);
	cr_assert_eq(got, 77);
	cr_assert_eq(held_locks(first, sizeof(first)), 0, "%s", first);
	ttx_close(&T);
}

Test(txn_lock_leak, insert_backup_failure_ford) { insert_backup_failure("ford"); }
Test(txn_lock_leak, insert_backup_failure_pandora) { insert_backup_failure("pandora"); }

/* ---- one round ------------------------------------------------------------------------- */

static int64_t table_sum(uint32_t table, unsigned n)
{
	int64_t sum = 0;

	for (uint64_t k = 0; k < n; k++) {
		uint64_t v;

		cr_assert_eq(ttx_get(&T, 0, table, k, &v), 0, "table %u key %llu", table,
			     (unsigned long long)k);
		sum += (int64_t)v;
	}
	return sum;
}

static unsigned extra_count(void)
{
	unsigned n = 0;

	for (uint64_t k = 0; k < EXTRA_KEYS; k++) {
		uint64_t v;

		if (ttx_get(&T, 0, T_EXTRA, k, &v) == 0)
			n++;
	}
	return n;
}

static void run_round(const struct round *r, const char *profile, struct sums *total)
{
	struct ttx_opts o = { .protocol = r->proto, .nmn = 1 + (unsigned)(r->seed % 3),
			      .workers = r->threads, .coords = r->coords, .tables = tables,
			      .ntables = 3 };
	static struct thr th[MAX_THREADS];
	pthread_t tid[MAX_THREADS];
	struct sums s = { 0 };
	struct tu_proc proc;
	char first[200] = "";
	unsigned held, which = 0, extra0 = (unsigned)(r->seed % EXTRA_KEYS);
	int64_t start = 0;

	cur = r;
	nspares = nspares_child = 0;
	tu_use_profile(profile);
	ttx_open(&T, &o);
	for (uint64_t k = 0; k < r->accounts; k++)
		for (uint32_t t = T_SAV; t <= T_CHK; t++) {
			cr_assert_eq(remora_db_load(T.w[0], t, k, &(int64_t){ START }), 0);
			start += START;
		}
	for (uint64_t k = 0; k < extra0; k++)
		cr_assert_eq(remora_db_load(T.w[0], T_EXTRA, k, &(int64_t){ 0 }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
	if (r->child)
		tu_spawn(&proc, cn_child, NULL);
	for (unsigned i = 0; i < r->threads; i++) {
		thr_init(&th[i], T.w[i], 0, i);
		cr_assert_eq(pthread_create(&tid[i], NULL, thr_main, &th[i]), 0);
	}
	for (unsigned i = 0; i < r->threads; i++)
		pthread_join(tid[i], NULL);
	for (unsigned i = 0; i < r->threads; i++)
		thr_sum(&th[i], &s);
	if (r->child) {
		uint64_t d = 0, e = 0, n = 0;

		if (tu_recv(proc.rd, &d) == 0 && tu_recv(proc.rd, &e) == 0 &&
		    tu_recv(proc.rd, &n) == 0) {
			s.delta += (int64_t)d;
			s.extra += (int64_t)e;
			for (uint64_t i = 0; i < n && nspares_child < MAX_THREADS * MAX_COORDS * 3;
			     i++)
				if (tu_recv(proc.rd, &spares[nspares_child]) == 0)
					nspares_child++;
		}
		cr_assert_eq(tu_proc_wait_all(&proc, 1, &which), 0, "compute node 1 failed");
	}
	cur = NULL;
	cr_assert_not(s.fail, "%s seed %llu: %s", r->proto, (unsigned long long)r->seed, s.why);
	held = held_locks(first, sizeof(first));
	cr_assert_eq(held, 0, "%s seed %llu profile %s: %u lock words left set after the run, "
		     "first: %s", r->proto, (unsigned long long)r->seed, profile ? profile : "none",
		     held, first);
	cr_assert_eq(table_sum(T_SAV, r->accounts) + table_sum(T_CHK, r->accounts),
		     start + s.delta, "%s seed %llu: money not conserved", r->proto,
		     (unsigned long long)r->seed);
	cr_assert_eq((int64_t)extra_count(), (int64_t)extra0 + s.extra,
		     "%s seed %llu: extra-table rows", r->proto, (unsigned long long)r->seed);
	total->committed += s.committed;
	total->user_aborts += s.user_aborts;
	total->aborts += s.aborts;
	ttx_close_workers(&T);
	cr_assert_eq(remora_db_locks_unreleased(T.db), 0,
		     "%s seed %llu: the engine lost track of %lld locks", r->proto,
		     (unsigned long long)r->seed, (long long)remora_db_locks_unreleased(T.db));
	ttx_close(&T);
}

static unsigned rounds_scale(void)
{
	const char *e = getenv("REMORA_LOCKSCAN_ROUNDS");
	unsigned long v = e ? strtoul(e, NULL, 10) : 1;

	return v ? (unsigned)v : 1;
}

static void rounds(const char *proto, const char *profile, unsigned n, bool child)
{
	struct sums total = { 0 };

	txn_test_hook = hook;
	n *= rounds_scale();
	for (unsigned i = 0; i < n; i++) {
		struct round r = {
			.proto = proto, .seed = i + 1,
			.threads = 1 + i % MAX_THREADS,
			.coords = 4 + (i * 3) % (MAX_COORDS - 3),
			.accounts = 2 + i % 7,
			.txns = 150,
			.yield_pct = (unsigned[]){ 0, 5, 30 }[i % 3],
			.child = child,
		};

		run_round(&r, profile, &total);
	}
	txn_test_hook = NULL;
	cr_assert_gt(total.committed, 0);
	cr_assert_gt(total.user_aborts, 0, "no user abort: the abort paths were not exercised");
	cr_assert_gt(total.aborts, 0, "no conflict: the contended paths were not exercised");
	cr_log_info("%s %s: %llu committed, %llu user aborts, %llu conflict aborts", proto,
		    profile ? profile : "none", (unsigned long long)total.committed,
		    (unsigned long long)total.user_aborts, (unsigned long long)total.aborts);
}

Test(txn_lock_leak, stress_ford) { rounds("ford", NULL, 12, false); }
Test(txn_lock_leak, stress_pandora) { rounds("pandora", NULL, 12, false); }
Test(txn_lock_leak, stress_ford_cx3) { rounds("ford", "cx3", 4, false); }
Test(txn_lock_leak, stress_pandora_cx3) { rounds("pandora", "cx3", 4, false); }
Test(txn_lock_leak, stress_ford_two_compute_nodes) { rounds("ford", NULL, 4, true); }

/* unlock = cas (the rule on RDMA NICs, txb_unlock): the same stress, lock words given back by
 * CAS from the holder's word, insert-claimed records and Pandora's stolen locks included. */
static void rounds_unlock_cas(const char *proto)
{
	setenv("REMORA_UNLOCK", "cas", 1);
	rounds(proto, NULL, 4, false);
	unsetenv("REMORA_UNLOCK");
}

Test(txn_lock_leak, stress_ford_unlock_cas) { rounds_unlock_cas("ford"); }
Test(txn_lock_leak, stress_pandora_unlock_cas) { rounds_unlock_cas("pandora"); }
Test(txn_lock_leak, stress_pandora_two_compute_nodes) { rounds("pandora", NULL, 4, true); }

/* 3000 single-key updates; with occ_forgets_unlock some commits skip their unlock. */
static int64_t unreleased_after_updates(const char *proto, const char *mutate, unsigned *held)
{
	struct ttx_opts o = { .protocol = proto, .workers = 1, .coords = 1, .tables = tables,
			      .ntables = 3 };
	char first[160];
	int64_t n;

	nspares_child = 0;
	if (mutate)
		setenv("REMORA_MUTATE", mutate, 1);
	ttx_open(&T, &o);
	unsetenv("REMORA_MUTATE");
	for (uint64_t k = 0; k < 16; k++)
		ttx_put(&T, 0, T_SAV, k, k);
	for (unsigned i = 0; i < 3000; i++) { /* a forgotten lock makes its key's updates abort */
		struct remora_tx *tx;
		int64_t v;

		cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
		if (remora_tx_read_for_update(tx, T_SAV, i % 16, &v) == 0 &&
		    remora_tx_write(tx, T_SAV, i % 16, &(int64_t){ v + 1 }) == 0)
			remora_tx_commit(tx);
		else
			remora_tx_abort(tx);
	}
	*held = held_locks(first, sizeof(first));
	ttx_close_workers(&T);
	n = remora_db_locks_unreleased(T.db);
	ttx_close(&T);
	return n;
}

Test(txn_lock_leak, engine_lock_count_sees_a_forgotten_unlock)
{
	static const char *const protos[] = { "ford", "pandora" };

	for (unsigned i = 0; i < 2; i++) {
		unsigned held;

		cr_assert_eq(unreleased_after_updates(protos[i], NULL, &held), 0, "%s", protos[i]);
		cr_assert_eq(held, 0);
		cr_assert_gt(unreleased_after_updates(protos[i], "occ_forgets_unlock", &held), 0,
			     "%s: a forgotten unlock must show in the count", protos[i]);
		cr_assert_gt(held, 0, "%s: and in the scan", protos[i]);
	}
}
