/* SPDX-License-Identifier: MIT */
/*
 * CREST's localized execution (docs/crest.md, "Localized execution"): the coordinators of one
 * worker run as coroutines, scripted here step by step (a shared phase counter; a commit is
 * held at a point by the test hook, which yields). Checked: a local reader sees an earlier
 * uncommitted local version with no verb and commits after its writer; a writer's abort
 * aborts its readers (mutation crest_no_cascade: a lost abort); K local writers of one cell
 * make exactly one memory-node write-back and one unlock, and the hold's bound
 * (crest_local_writers) makes more; local writers of one record are serialized by the local
 * lock (mutation crest_local_no_lock: a lost update); the paper's Fig. 10 crossing across
 * blocks and its reverse-order rule abort; a cell read from the worker's hold is validated
 * against the versions the worker has at commit; a coordinator's next commit waits until its last
 * one's versions are written back, so recovery after a crash finds its log (mutation
 * crest_no_pin: the log is overwritten and the committed update is lost).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <remora/sched.h>

#include "recovery/recovery.h"
#include "store/codec.h"
#include "txn/proto/crest/crest.h"
#include "txn/txn.h"
#include "ttx.h"

TestSuite(txn_crest_local, .fini = ttx_fini, .timeout = TU_TIMEOUT);

static struct ttx T;

#define NCELL 4
#define VWORDS 20 /* 4 cells of 40 B */
#define COORDS 4

static const struct remora_table_def tabs[] = {
	{ .name = "y", .id = 0, .value_size = VWORDS * 8, .max_records = 64 },
};
static const struct remora_cell_def cells[] = {
	{ .table = 0, .ncells = NCELL, .start = { 0, 40, 80, 120 } },
};

static void open_local_n(const char *mutate, const char *writers_max, bool localized,
			 unsigned workers)
{
	struct ttx_opts o = { .protocol = "crest", .nmn = 1, .workers = workers, .coords = COORDS,
			      .tables = tabs, .ntables = 1, .cells = cells, .ncells = 1 };
	uint64_t v[VWORDS];

	if (mutate)
		setenv("REMORA_MUTATE", mutate, 1);
	if (writers_max)
		setenv("REMORA_CREST_LOCAL_WRITERS", writers_max, 1);
	setenv("REMORA_CREST_LOCALIZED", localized ? "true" : "false", 1);
	ttx_open(&T, &o);
	unsetenv("REMORA_MUTATE");
	unsetenv("REMORA_CREST_LOCAL_WRITERS");
	unsetenv("REMORA_CREST_LOCALIZED");
	for (uint64_t k = 1; k <= 8; k++) {
		for (unsigned i = 0; i < VWORDS; i++)
			v[i] = k * 100 + i;
		cr_assert_eq(remora_db_load(T.w[0], 0, k, v), 0);
	}
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
}

static void open_local_ex(const char *mutate, const char *writers_max, bool localized)
{
	open_local_n(mutate, writers_max, localized, 1);
}

static void open_local(const char *mutate, const char *writers_max)
{
	open_local_ex(mutate, writers_max, true);
}

static uint64_t bit(unsigned c)
{
	return UINT64_C(1) << c;
}

/* ---- scripting coroutines ---------------------------------------------------------------- */

static unsigned phase;

static void wait_phase(unsigned p)
{
	while (phase < p)
		remora_yield();
}

/*
 * A commit of a coordinator named in hold_mask, at hold_point, moves the phase on to
 * hold_from (if it is behind) and waits there until the phase reaches hold_until.
 */
static uint32_t hold_mask;
static const char *hold_point = "txn.log";
static unsigned hold_from[COORDS], hold_until[COORDS];

static void hold_hook(struct remora_tx *tx, const char *point)
{
	unsigned c = (unsigned)(tx->c - tx->c->w->coords); /* the worker-local index */

	if (!(hold_mask >> c & 1) || strcmp(point, hold_point))
		return;
	if (phase < hold_from[c])
		phase = hold_from[c];
	wait_phase(hold_until[c]);
}

typedef void (*step_fn)(unsigned coord);

static step_fn steps[COORDS];

static void coord_main(void *arg)
{
	unsigned c = (unsigned)(uintptr_t)arg;

	if (steps[c])
		steps[c](c);
}

/* Runs steps[0..n) as coroutines of worker 0 (coroutine i is coordinator i) to the end, with
 * hook at the commits' points. */
static void run_coords_hooked(unsigned n, void (*hook)(struct remora_tx *, const char *))
{
	struct remora_sched *s = remora_worker_sched(T.w[0]);

	txn_test_hook = hook;
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(remora_sched_spawn(s, coord_main, (void *)(uintptr_t)i), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	txn_test_hook = NULL;
	while (remora_chan_outstanding(remora_worker_chan(T.w[0])))
		remora_chan_progress(remora_worker_chan(T.w[0]));
}

static void run_coords(unsigned n)
{
	run_coords_hooked(n, hold_hook);
}

static uint64_t word_now(uint64_t key, unsigned word)
{
	struct remora_tx *tx;
	uint64_t v[VWORDS];

	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read(tx, 0, key, v), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	return v[word];
}


/* Adds d to word 0 of cell 0 of key; returns the commit's outcome. */
static int add(uint64_t key, uint64_t d)
{
	struct remora_tx *tx;
	uint64_t v[VWORDS];
	int rc;

	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	rc = remora_tx_read_cells(tx, 0, key, 0, bit(0), v);
	if (rc) {
		remora_tx_abort(tx);
		return rc;
	}
	v[0] += d;
	cr_assert_eq(remora_tx_write_cells(tx, 0, key, bit(0), v), 0);
	return remora_tx_commit(tx);
}

/* ---- a local read of an uncommitted version ------------------------------------------------ */

static int rc_of[COORDS];
static uint64_t seen[COORDS];
static struct remora_counters c_before, c_after;

static void writer_held(unsigned c)
{
	rc_of[c] = add(1, 5);
}

static void local_reader(unsigned c)
{
	struct remora_tx *tx;
	uint64_t v[VWORDS];

	wait_phase(1);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	c_before = ttx_counters(&T, 0);
	rc_of[c] = remora_tx_read_cells(tx, 0, 1, bit(0), 0, v);
	c_after = ttx_counters(&T, 0);
	seen[c] = v[0];
	phase = 2; /* the writer may log now; this commit waits for it */
	if (!rc_of[c])
		rc_of[c] = remora_tx_commit(tx);
	else
		remora_tx_abort(tx);
}

/* Scripting state is reset per test (each test runs in its own process, but be explicit). */
static void script(uint32_t held, const char *point)
{
	phase = 0;
	hold_mask = held;
	hold_point = point;
	memset(hold_from, 0, sizeof(hold_from));
	memset(hold_until, 0, sizeof(hold_until));
	memset(steps, 0, sizeof(steps));
	memset(rc_of, 0, sizeof(rc_of));
	memset(seen, 0, sizeof(seen));
}

Test(txn_crest_local, reader_sees_uncommitted_version_without_verbs)
{
	struct ttx_vc vc;

	open_local(NULL, NULL);
	script(bit(0), "txn.log");
	hold_from[0] = 1; /* the writer's version exists: the reader may start */
	hold_until[0] = 2;
	steps[0] = writer_held; /* its commit waits at its log until the reader read */
	steps[1] = local_reader;
	run_coords(2);
	cr_assert_eq(rc_of[0], 0, "the writer committed");
	cr_assert_eq(rc_of[1], 0, "the reader committed after its writer");
	cr_assert_eq(seen[1], 105, "the reader saw the uncommitted local version");
	vc = ttx_vc(&c_before, &c_after);
	TTX_VC_EQ(vc, 0, 0, 0, 0, 0);
	cr_assert_eq(ttx_verbs(&c_before, &c_after, REMORA_OP_MCAS), 0);
	cr_assert_eq(word_now(1, 0), 105);
}

/* The switch: with crest_localized false the same reader READs and meets the writer's lock. */
Test(txn_crest_local, localized_off_reader_meets_the_lock)
{
	struct ttx_vc vc;

	open_local_ex(NULL, NULL, false);
	script(bit(0), "txn.log");
	hold_from[0] = 1;
	hold_until[0] = 2;
	steps[0] = writer_held;
	steps[1] = local_reader;
	run_coords(2);
	cr_assert_eq(rc_of[0], 0);
	cr_assert_eq(rc_of[1], -REMORA_EABORT, "a read cell locked by another transaction");
	vc = ttx_vc(&c_before, &c_after);
	cr_assert_eq(vc.read, 1, "the reader READ the record");
}

/* ---- cascading aborts ------------------------------------------------------------------------ */

/* Adds 5 to key 1 having read key 2; its validation waits (hold) while key 2 changes. */
static void doomed_writer(unsigned c)
{
	struct remora_tx *tx;
	uint64_t v[VWORDS], u[VWORDS];

	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 2, bit(0), 0, u), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 1, 0, bit(0), v), 0);
	v[0] += 5;
	cr_assert_eq(remora_tx_write_cells(tx, 0, 1, bit(0), v), 0);
	rc_of[c] = remora_tx_commit(tx);
}

/* Adds 1 to key 1 on top of the doomed writer's version (a dependency). */
static void dependent_writer(unsigned c)
{
	wait_phase(1);
	phase = 2; /* set before: add returns only once its dependency ended */
	rc_of[c] = add(1, 1);
}

/* Changes key 2 under the doomed writer's read, then lets it validate. */
static void spoiler(unsigned c)
{
	wait_phase(2);
	rc_of[c] = add(2, 1);
	phase = 3;
}

static void cascade(const char *mutate)
{
	open_local(mutate, NULL);
	script(bit(0), "txn.validate");
	hold_from[0] = 1;
	hold_until[0] = 3;
	steps[0] = doomed_writer;
	steps[1] = dependent_writer;
	steps[2] = spoiler;
	run_coords(3);
	cr_assert_eq(rc_of[2], 0, "the spoiler committed");
	cr_assert_eq(rc_of[0], -REMORA_EABORT, "the writer failed its validation");
}

Test(txn_crest_local, writer_abort_cascades_to_its_reader)
{
	cascade(NULL);
	cr_assert_eq(rc_of[1], -REMORA_EABORT, "the dependent aborted with its writer");
	cr_assert_eq(word_now(1, 0), 100, "nothing of the aborted writer is visible");
	cr_assert_eq(word_now(2, 0), 201);
}

Test(txn_crest_local, no_cascade_mutated_commits_an_aborted_write)
{
	cascade("crest_no_cascade");
	cr_assert_eq(rc_of[1], 0);
	cr_assert_eq(word_now(1, 0), 106, "the aborted writer's +5 reached memory");
}

/* ---- parallel commits: one write-back for K local writers ---------------------------------- */

static void adder(unsigned c)
{
	if (c)
		wait_phase(1);
	rc_of[c] = add(1, 1);
}

/* At phase from, lets the others run up to their waits, then moves the script to from + 1. */
static void advance_after_waits(unsigned from)
{
	wait_phase(from);
	for (unsigned i = 0; i < 200; i++)
		remora_yield();
	phase = from + 1;
}

/* Lets the other writers run up to their waits, then releases the first one's log. */
static void driver(unsigned c)
{
	(void)c;
	advance_after_waits(1);
}

/* The same for the local-validation script: the reader and the holder are in their waits. */
static void driver_to_4(unsigned c)
{
	(void)c;
	advance_after_waits(3);
}

static struct ttx_vc three_writers(const char *writers_max, uint64_t *mcas)
{
	struct remora_counters a, b;

	open_local(NULL, writers_max);
	script(bit(0), "txn.log");
	hold_from[0] = 1;
	hold_until[0] = 2;
	steps[0] = adder;
	steps[1] = adder;
	steps[2] = adder;
	steps[3] = driver;
	a = ttx_counters(&T, 0);
	run_coords(4);
	b = ttx_counters(&T, 0);
	for (unsigned i = 0; i < 3; i++)
		cr_assert_eq(rc_of[i], 0, "writer %u committed", i);
	cr_assert_eq(word_now(1, 0), 103);
	*mcas = ttx_verbs(&a, &b, REMORA_OP_MCAS);
	return ttx_vc(&a, &b);
}

/*
 * Three local writers of one cell under one hold: one lock (masked-CAS + READ), three logs,
 * and one write-back (the cell, its epoch) with one unlock, by the last of them.
 */
Test(txn_crest_local, three_local_writers_one_write_back)
{
	uint64_t mcas;
	struct ttx_vc vc = three_writers(NULL, &mcas);

	const struct txn_coord *last = &T.w[0]->coords[2];
	const struct store_db *st = &T.db->st;
	const unsigned char *log = T.tu.mn[store_log_server(st, last->id, 0)].base +
				   store_log_off(st, last->log_slot);
	struct store_log_hdr h;
	uint64_t dep;

	cr_assert_eq(mcas, 2, "one lock and one unlock, not %llu", (unsigned long long)mcas);
	cr_assert_eq(vc.read, 1);
	cr_assert_eq(vc.write, 3 + 2, "three logs and one write-back, not %llu WRITEs",
		     (unsigned long long)vc.write);
	/* the last writer's log names the one it read from */
	memcpy(&h, log, sizeof(h));
	cr_assert_eq(CREST_LOG_DEPS(&h), 1);
	memcpy(&dep, log + h.len - 8, 8);
	cr_assert_eq(dep, T.w[0]->coords[1].tx.id);
}

/* Gap 5: with crest_local_writers = 1 every writer takes its own hold and writes back. */
Test(txn_crest_local, hold_bound_one_writes_back_each)
{
	uint64_t mcas;
	struct ttx_vc vc = three_writers("1", &mcas);

	cr_assert_eq(mcas, 6, "three locks and three unlocks, not %llu", (unsigned long long)mcas);
	cr_assert_eq(vc.read, 3);
	cr_assert_eq(vc.write, 3 + 3 * 2);
}

/* ---- the local lock ---------------------------------------------------------------------- */

static void slow_writer(unsigned c)
{
	struct remora_tx *tx;
	uint64_t v[VWORDS];

	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 1, 0, bit(0), v), 0);
	phase = 1;
	wait_phase(2);
	v[0] += 1;
	cr_assert_eq(remora_tx_write_cells(tx, 0, 1, bit(0), v), 0);
	rc_of[c] = remora_tx_commit(tx);
}

static void second_writer(unsigned c)
{
	wait_phase(1);
	phase = 2;
	rc_of[c] = add(1, 1);
}

static uint64_t two_local_writers(const char *mutate)
{
	open_local(mutate, NULL);
	script(0, "txn.log");
	steps[0] = slow_writer;
	steps[1] = second_writer;
	run_coords(2);
	cr_assert_eq(rc_of[0], 0);
	cr_assert_eq(rc_of[1], 0);
	return word_now(1, 0);
}

Test(txn_crest_local, local_lock_serializes_writers)
{
	cr_assert_eq(two_local_writers(NULL), 102);
}

Test(txn_crest_local, local_no_lock_mutated_loses_an_update)
{
	cr_assert_eq(two_local_writers("crest_local_no_lock"), 101);
}

/* ---- blocks: Fig. 10, and the reverse-order rule ------------------------------------------- */

/* Block 1 writes key a, block 2 reads key b, then a := a + b. */
static int crossing(uint64_t a, uint64_t b, unsigned after1, unsigned after2)
{
	struct remora_tx *tx;
	uint64_t va[VWORDS], vb[VWORDS];
	int rc;

	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, a, 0, bit(0), va), 0);
	phase = after1;
	wait_phase(after1 + 1);
	rc = remora_tx_read_cells(tx, 0, b, bit(0), 0, vb);
	if (rc) {
		remora_tx_abort(tx);
		return rc;
	}
	phase = after2;
	wait_phase(after2 + 1);
	va[0] += vb[0];
	cr_assert_eq(remora_tx_write_cells(tx, 0, a, bit(0), va), 0);
	return remora_tx_commit(tx);
}

static void cross_first(unsigned c)
{
	rc_of[c] = crossing(1, 2, 1, 3);
	phase = 5; /* T1 committed: T2 goes on */
}

static void cross_second(unsigned c)
{
	wait_phase(1);
	rc_of[c] = crossing(2, 1, 2, 4);
}

/*
 * The paper's Fig. 10: T1 writes A then reads B, T2 writes B then reads A, blocks crossing.
 * Both committing would make a cycle; one of them must abort (here T2, at validation: T1's
 * version of A is newer than the A it read).
 */
Test(txn_crest_local, fig10_crossing_blocks_abort)
{
	open_local(NULL, NULL);
	script(0, "txn.log");
	steps[0] = cross_first;
	steps[1] = cross_second;
	run_coords(2);
	cr_assert(rc_of[0] == -REMORA_EABORT || rc_of[1] == -REMORA_EABORT,
		  "both committed: %d %d", rc_of[0], rc_of[1]);
	cr_assert_eq(rc_of[0], 0, "T1 commits");
	cr_assert_eq(word_now(1, 0), 100 + 200);
	cr_assert_eq(word_now(2, 0), 200);
}

static void early_reader(unsigned c)
{
	struct remora_tx *tx;
	uint64_t v[VWORDS], u[VWORDS];

	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 1, 0, bit(0), v), 0); /* TS_exec drawn */
	phase = 1;
	wait_phase(2);
	rc_of[c] = remora_tx_read_cells(tx, 0, 2, bit(0), 0, u);
	phase = 3;
	remora_tx_abort(tx);
}

static void late_writer(unsigned c)
{
	wait_phase(1);
	rc_of[c] = add(2, 1); /* held at its log (hold_from 2) until phase 3 */
}

/* A version made by a transaction that began later (TS_exec greater) aborts its reader. */
Test(txn_crest_local, reverse_order_read_aborts)
{
	open_local(NULL, NULL);
	script(bit(1), "txn.log");
	hold_from[1] = 2;
	hold_until[1] = 3;
	steps[0] = early_reader;
	steps[1] = late_writer;
	run_coords(2);
	cr_assert_eq(rc_of[0], -REMORA_EABORT, "the earlier transaction read a later one's version");
	cr_assert_eq(rc_of[1], 0);
	cr_assert_eq(word_now(2, 0), 201);
}

/* ---- a coordinator's log outlives its unwritten versions ----------------------------------- */

static const struct codec_geom *geom;
static unsigned char *rec1;
static uint64_t after_crash;

/* Commits +5 to key 1 while another writer is open on it (not the last writer), then a
 * second transaction on key 5, whose log takes the coordinator's slot. */
static void pinned_writer(unsigned c)
{
	rc_of[c] = add(1, 5); /* held at its log until the dependent is in */
	phase = 3;
	seen[c] = (uint64_t)add(5, 7);
}

static void open_dependent(unsigned c)
{
	wait_phase(1);
	phase = 2;
	rc_of[c] = add(1, 1); /* held at its log (hold_from 4) until phase 5 */
}

/* The whole cluster crashes now: recovery runs on the memory node as it is. */
static void crash(unsigned c)
{
	struct recovery_cfg cfg = { .size = sizeof(cfg), .n_mn = 1 };
	struct recovery_report rep;
	uint64_t v[VWORDS];
	char err[256] = "";

	(void)c;
	wait_phase(4);
	for (unsigned i = 0; i < 200; i++) /* the pinned writer's second commit, if it may */
		remora_yield();
	cr_assert_eq(recovery_run(T.tu.tp, &cfg, &rep, err, sizeof(err)), 0, "%s", err);
	codec_cell_get(geom, rec1, 0, v);
	after_crash = v[0];
	phase = 5;
}

static uint64_t crash_with_open_writer(const char *mutate)
{
	struct remora_tx *tx;
	uint64_t v[VWORDS];

	open_local(mutate, NULL);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read(tx, 0, 1, v), 0);
	geom = &tx->objs[0]->t->geom;
	rec1 = T.tu.mn[0].base + tx->objs[0]->off;
	cr_assert_eq(remora_tx_commit(tx), 0);
	script(bit(0) | bit(1), "txn.log");
	hold_from[0] = 1;
	hold_until[0] = 2;
	hold_from[1] = 4;
	hold_until[1] = 5;
	steps[0] = pinned_writer;
	steps[1] = open_dependent;
	steps[2] = crash;
	run_coords(3);
	cr_assert_eq(rc_of[0], 0);
	return after_crash;
}

Test(txn_crest_local, committed_non_last_writer_survives_a_crash)
{
	cr_assert_eq(crash_with_open_writer(NULL), 105, "recovery lost a committed update");
}

Test(txn_crest_local, no_pin_mutated_loses_a_committed_update)
{
	cr_assert_eq(crash_with_open_writer("crest_no_pin"), 100);
}

/* ---- validation of cells the worker holds ---------------------------------------------------- */

/* Adds 5 to key 1 and key 2 in one transaction, after the reader read key 1 (phase 1 -> 2). */
static void pair_writer(unsigned c)
{
	struct remora_tx *tx;
	uint64_t a[VWORDS], b[VWORDS];

	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 1, 0, bit(0), a), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 2, 0, bit(0), b), 0);
	phase = 1;
	wait_phase(2);
	a[0] += 5;
	b[0] += 5;
	cr_assert_eq(remora_tx_write_cells(tx, 0, 1, bit(0), a), 0);
	cr_assert_eq(remora_tx_write_cells(tx, 0, 2, bit(0), b), 0);
	rc_of[c] = remora_tx_commit(tx); /* held at its log (hold_from 3) until phase 4 */
}

/* Reads key 1 from the hold's base before the pair's commit, key 2 from its version after. */
static void torn_reader(unsigned c)
{
	struct remora_tx *tx;
	uint64_t a[VWORDS], b[VWORDS];

	wait_phase(1);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 1, bit(0), 0, a), 0);
	phase = 2;
	wait_phase(3);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 2, bit(0), 0, b), 0);
	seen[c] = a[0] + b[0];
	rc_of[c] = remora_tx_commit(tx);
	phase = 5;
}

/* Keeps key 1 held past the pair's commit: a second writer of it, open until phase 5. */
static void holder(unsigned c)
{
	wait_phase(3);
	rc_of[c] = add(1, 1); /* held at its log until the reader committed (phase 5) */
}

/*
 * A reader saw key 1 before a local transaction's commit and key 2 after it. Key 2 was written
 * back; key 1 is still held for the worker (another writer of it is open), so only the local
 * check (the epochs of the versions the worker has now) can tell that key 1 moved on: the
 * reader must abort. Without local_validate it commits a total that never existed.
 */
Test(txn_crest_local, local_cells_are_validated)
{
	open_local(NULL, NULL);
	script(bit(0) | bit(2), "txn.log");
	hold_from[0] = 3;
	hold_until[0] = 4;
	hold_until[2] = 5; /* no hold_from: it waits for the reader's commit */
	steps[0] = pair_writer;
	steps[1] = torn_reader;
	steps[2] = holder;
	steps[3] = driver_to_4;
	run_coords(4);
	cr_assert_eq(rc_of[0], 0);
	cr_assert_eq(rc_of[2], 0);
	cr_assert_eq(rc_of[1], -REMORA_EABORT, "the reader committed %llu, the old key 1 and the new "
		     "key 2", (unsigned long long)seen[1]);
	cr_assert_eq(word_now(1, 0), 106);
}

/* ---- one cache per compute node --------------------------------------------------------- */

/*
 * Two workers (threads) of one compute node, one coordinator each: worker 0's writer of key 1
 * stops at its log, worker 1's writer of the same cell is admitted under the node's hold. It
 * takes no lock and reads nothing from the memory node (the uncommitted version is its
 * dependency), commits after worker 0's, and writes both back: +6, one lock, one unlock.
 * With crest_node_cache false each worker has a cache of its own, so worker 1 meets the lock
 * worker 0's hold took on the memory node and aborts (the check's negative control).
 */
static unsigned xphase; /* atomic: the two threads' script */
static struct remora_counters x_before, x_after;

static void xwait(unsigned p)
{
	while (__atomic_load_n(&xphase, __ATOMIC_ACQUIRE) < p)
		remora_yield();
}

static void xset(unsigned p)
{
	__atomic_store_n(&xphase, p, __ATOMIC_RELEASE);
}

static void xhold(struct remora_tx *tx, const char *point)
{
	if (tx->c->w != T.w[0] || strcmp(point, "txn.log"))
		return;
	xset(1);
	xwait(2);
}

/* Criterion's asserts belong to the test's main thread: the workers only record outcomes. */
static void xwriter0(void *arg)
{
	struct remora_tx *tx;
	uint64_t v[VWORDS];

	(void)arg;
	rc_of[0] = remora_tx_begin(T.w[0], 0, &tx);
	if (rc_of[0])
		return;
	rc_of[0] = remora_tx_read_cells(tx, 0, 1, 0, bit(0), v);
	v[0] += 5;
	if (!rc_of[0])
		rc_of[0] = remora_tx_write_cells(tx, 0, 1, bit(0), v);
	if (!rc_of[0])
		rc_of[0] = remora_tx_commit(tx);
	else
		remora_tx_abort(tx);
	xset(2); /* worker 1 must not wait for a hold point never reached */
}

static void xwriter1(void *arg)
{
	struct remora_tx *tx;
	uint64_t v[VWORDS];

	(void)arg;
	xwait(1);
	rc_of[1] = remora_tx_begin(T.w[1], 0, &tx);
	if (rc_of[1]) {
		xset(2);
		return;
	}
	x_before = ttx_counters(&T, 1);
	rc_of[1] = remora_tx_read_cells(tx, 0, 1, 0, bit(0), v);
	x_after = ttx_counters(&T, 1);
	seen[1] = v[0];
	xset(2);
	v[0] += 1;
	if (!rc_of[1])
		rc_of[1] = remora_tx_write_cells(tx, 0, 1, bit(0), v);
	if (!rc_of[1])
		rc_of[1] = remora_tx_commit(tx);
	else
		remora_tx_abort(tx);
}

static void *xrun(void *arg)
{
	unsigned w = (unsigned)(uintptr_t)arg;
	struct remora_sched *s = remora_worker_sched(T.w[w]);

	if (remora_sched_spawn(s, w ? xwriter1 : xwriter0, NULL) || remora_sched_run(s))
		rc_of[w] = -EIO;
	while (remora_chan_outstanding(remora_worker_chan(T.w[w])))
		remora_chan_progress(remora_worker_chan(T.w[w]));
	return NULL;
}

static uint64_t two_workers(bool node_cache, uint64_t *mcas)
{
	pthread_t t[2];
	struct remora_counters a[2], b[2];

	setenv("REMORA_CREST_NODE_CACHE", node_cache ? "true" : "false", 1);
	open_local_n(NULL, NULL, true, 2);
	unsetenv("REMORA_CREST_NODE_CACHE");
	script(0, "txn.log");
	xphase = 0;
	a[0] = ttx_counters(&T, 0);
	a[1] = ttx_counters(&T, 1);
	txn_test_hook = xhold;
	for (unsigned w = 0; w < 2; w++)
		cr_assert_eq(pthread_create(&t[w], NULL, xrun, (void *)(uintptr_t)w), 0);
	for (unsigned w = 0; w < 2; w++)
		pthread_join(t[w], NULL);
	txn_test_hook = NULL;
	b[0] = ttx_counters(&T, 0);
	b[1] = ttx_counters(&T, 1);
	*mcas = ttx_verbs(&a[0], &b[0], REMORA_OP_MCAS) + ttx_verbs(&a[1], &b[1], REMORA_OP_MCAS);
	return word_now(1, 0);
}

Test(txn_crest_local, workers_of_one_node_share_a_hold)
{
	uint64_t mcas, v = two_workers(true, &mcas);
	struct ttx_vc vc = ttx_vc(&x_before, &x_after);

	cr_assert_eq(rc_of[0], 0);
	cr_assert_eq(rc_of[1], 0, "worker 1 was admitted under the node's hold");
	cr_assert_eq(seen[1], 105, "it read worker 0's uncommitted version");
	TTX_VC_EQ(vc, 0, 0, 0, 0, 0);
	cr_assert_eq(ttx_verbs(&x_before, &x_after, REMORA_OP_MCAS), 0);
	cr_assert_eq(mcas, 2, "one lock and one unlock, not %llu", (unsigned long long)mcas);
	cr_assert_eq(v, 106);
}

Test(txn_crest_local, worker_caches_meet_their_own_node)
{
	uint64_t mcas, v = two_workers(false, &mcas);

	cr_assert_eq(rc_of[0], 0);
	cr_assert_eq(rc_of[1], -REMORA_EABORT, "worker 1 met worker 0's lock on the memory node");
	cr_assert_eq(v, 105);
}

/* ---- a lock bit seen before a hold of the node's: never excused ------------------------------ */

/*
 * T (coordinator 1) reads cell 0 of key 1 from the memory node while its node holds only
 * cell 1 (W0, coordinator 0, open at its log). X, on another compute node, reads key 2, locks
 * cell 0 of key 1 and logs. T locks key 2 and validates: its READ of key 1 sees X's lock bit
 * and the epoch T read. Then X writes cell 0 and unlocks, and U (coordinator 3) takes cell 0
 * for T's node, before T checks the READ. The bit may not be excused by U's hold: X
 * committed a new cell 0 before T's check, and X read the key 2 T overwrites (write skew).
 * crest_excuse_late_hold excuses it, and T commits. (A review read found the hole.)
 */
static struct remora_db *x_db;
static struct remora_worker *x_w;
static enum remora_abort_reason t_reason;

static void late_hook(struct remora_tx *tx, const char *point)
{
	unsigned c = (unsigned)(tx->c - tx->c->w->coords);

	if (tx->c->w == x_w) {
		if (!strcmp(point, "txn.logged")) {
			phase = 3; /* X committed; its cell WRITE and unlock wait */
			wait_phase(4);
		}
		return;
	}
	if (c == 0 && !strcmp(point, "txn.log")) {
		if (phase < 1)
			phase = 1;
		wait_phase(7);
	}
	if (c == 1 && !strcmp(point, "crest.validate_landed")) {
		phase = 4; /* T's READ saw X's bit */
		wait_phase(6);
	}
}

static void late_w0(unsigned c)
{
	uint64_t v[VWORDS];
	struct remora_tx *tx;

	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 1, 0, bit(1), v), 0);
	v[5] += 1;
	cr_assert_eq(remora_tx_write_cells(tx, 0, 1, bit(1), v), 0);
	rc_of[c] = remora_tx_commit(tx);
}

static void late_t(unsigned c)
{
	uint64_t v[VWORDS], u[VWORDS];
	struct remora_tx *tx;

	wait_phase(1);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 1, bit(0), 0, v), 0);
	phase = 2;
	wait_phase(3);
	rc_of[c] = remora_tx_read_cells(tx, 0, 2, 0, bit(0), u);
	if (!rc_of[c]) {
		u[0] = v[0] + 1000;
		cr_assert_eq(remora_tx_write_cells(tx, 0, 2, bit(0), u), 0);
		rc_of[c] = remora_tx_commit(tx);
	} else {
		remora_tx_abort(tx);
	}
	t_reason = remora_worker_last_abort(T.w[0]);
	phase = 7;
}

static void late_x(unsigned c)
{
	uint64_t v[VWORDS], u[VWORDS];
	struct remora_tx *tx;

	wait_phase(2);
	cr_assert_eq(remora_tx_begin(x_w, 0, &tx), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 2, bit(0), 0, u), 0);
	seen[c] = u[0];
	cr_assert_eq(remora_tx_read_cells(tx, 0, 1, 0, bit(0), v), 0);
	v[0] = u[0] + 1;
	cr_assert_eq(remora_tx_write_cells(tx, 0, 1, bit(0), v), 0);
	rc_of[c] = remora_tx_commit(tx);
	phase = 5;
}

static void late_u(unsigned c)
{
	uint64_t v[VWORDS];
	struct remora_tx *tx;

	wait_phase(5);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	rc_of[c] = remora_tx_read_cells(tx, 0, 1, 0, bit(0), v);
	phase = 6;
	wait_phase(7);
	remora_tx_abort(tx);
}

static void late_hold(const char *mutate)
{
	open_local(mutate, NULL);
	if (mutate)
		setenv("REMORA_MUTATE", mutate, 1);
	x_w = ttx_open_cn(&T, "crest", 1, &x_db);
	unsetenv("REMORA_MUTATE");
	script(0, "txn.log");
	steps[0] = late_w0;
	steps[1] = late_t;
	steps[2] = late_x;
	steps[3] = late_u;
	run_coords_hooked(4, late_hook);
	remora_worker_destroy(x_w);
	remora_db_close(x_db);
	cr_assert_eq(rc_of[0], 0, "W0 committed");
	cr_assert_eq(rc_of[2], 0, "X committed");
	cr_assert_eq(rc_of[3], 0, "U took cell 0 for the node");
}

Test(txn_crest_local, lock_bit_seen_before_a_hold_aborts)
{
	late_hold(NULL);
	cr_assert_eq(rc_of[1], -REMORA_EABORT, "T read a cell 0 X replaced before T's check");
	cr_assert_eq(t_reason, REMORA_ABORT_VALIDATION);
	cr_assert_eq(word_now(1, 0), 201, "X's write");
	cr_assert_eq(word_now(2, 0), 200, "nothing of T");
}

Test(txn_crest_local, excuse_late_hold_mutated_commits_a_write_skew)
{
	late_hold("crest_excuse_late_hold");
	cr_assert_eq(rc_of[1], 0, "T committed: it read the old cell 0, X read the old key 2");
	cr_assert_eq(seen[2], 200, "X read key 2 before T wrote it");
	/* each read what the other overwrote: no serial order gives both */
	cr_assert_eq(word_now(1, 0), 201, "X: key 1 = old key 2 + 1");
	cr_assert_eq(word_now(2, 0), 1100, "T: key 2 = old key 1 + 1000");
}
