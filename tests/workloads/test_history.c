// SPDX-License-Identifier: MIT
/*
 * The serializability checker on hand-built histories: serial ones pass, and each anomaly
 * (lost update, write skew, circular information flow, dirty read, a final value that is not
 * the last committed version, a duplicated id) is reported. Also a round trip through the
 * history files the kvs workload writes, and the snapshot-isolation mode (write skew passes,
 * G-single, lost updates and wr/ww cycles do not).
 *
 * Crashes: a log abandoned without closing it (what a SIGKILL leaves) loads up to its last
 * record, drops a torn last record and refuses a torn one before it; a pending transaction
 * (recorded before its commit verbs) is kept as committed exactly when the history or the
 * final store shows its version, and a partial commit or a read nobody wrote still fails.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "history.h"

/* op(key, seen, write) */
#define R(k, s) { .key = (k), .seen = (s), .write = 0 }
#define W(k, s) { .key = (k), .seen = (s), .write = 1 }

static void add(struct hist_set *s, uint64_t txid, unsigned n, const struct hist_op *ops)
{
	struct hist_txn t = { .txid = txid, .nops = n };

	memcpy(t.op, ops, n * sizeof(*ops));
	cr_assert_eq(hist_set_add(s, &t), 0);
}

#define TXN(s, id, ...)                                                                    \
	do {                                                                               \
		const struct hist_op ops_[] = { __VA_ARGS__ };                             \
		add((s), (id), sizeof(ops_) / sizeof(ops_[0]), ops_);                      \
	} while (0)

static int check(struct hist_set *s, const uint64_t *final, uint64_t nkeys,
		 struct hist_report *rep)
{
	int rc = hist_check(s, final, nkeys, rep);

	cr_assert_geq(rc, 0, "checker failed: %d", rc);
	return rc;
}

Test(history, serial_history_passes)
{
	struct hist_set s = { 0 };
	struct hist_report rep;
	uint64_t final[3] = { 30, 20, 0 };

	TXN(&s, 10, R(0, 0), W(1, 0));         /* reads key 0 (loaded), writes key 1 */
	TXN(&s, 20, R(0, 0), W(1, 10));        /* overwrites 10's key 1 */
	TXN(&s, 30, W(0, 0), R(1, 20), R(2, 0));
	TXN(&s, 40, R(0, 30), R(1, 20));       /* read-only, after all */
	cr_expect_eq(check(&s, final, 3, &rep), 0, "%s", rep.msg);
	cr_expect_str_eq(rep.msg, "serializable");
	cr_expect_eq(rep.txns, 4);
	cr_expect_eq(rep.writes, 3);
	cr_expect_gt(rep.edges_rw, 0); /* 10 and 20 read key 0 before 30 overwrote it */
	hist_set_free(&s);
}

Test(history, lost_update_is_reported)
{
	struct hist_set s = { 0 };
	struct hist_report rep;

	TXN(&s, 10, W(5, 0));
	TXN(&s, 20, W(5, 0)); /* both overwrote the loaded version */
	cr_expect_eq(check(&s, NULL, 0, &rep), 1);
	cr_expect(strstr(rep.msg, "lost update") != NULL, "%s", rep.msg);
	hist_set_free(&s);
}

Test(history, write_skew_is_a_cycle)
{
	struct hist_set s = { 0 };
	struct hist_report rep;

	TXN(&s, 10, R(0, 0), W(1, 0));
	TXN(&s, 20, R(1, 0), W(0, 0));
	cr_expect_eq(check(&s, NULL, 0, &rep), 1);
	cr_expect(strstr(rep.msg, "cycle") != NULL, "%s", rep.msg);
	cr_expect(strstr(rep.msg, "-rw(") != NULL, "%s", rep.msg);
	hist_set_free(&s);
}

Test(history, circular_reads_are_a_cycle)
{
	struct hist_set s = { 0 };
	struct hist_report rep;

	/* 10 reads 20's write and 20 reads 10's write: a wr-wr cycle */
	TXN(&s, 10, W(0, 0), R(1, 20));
	TXN(&s, 20, W(1, 0), R(0, 10));
	cr_expect_eq(check(&s, NULL, 0, &rep), 1);
	cr_expect(strstr(rep.msg, "-wr(") != NULL, "%s", rep.msg);
	hist_set_free(&s);
}

Test(history, long_cycle_is_found)
{
	struct hist_set s = { 0 };
	struct hist_report rep;

	/* a ring of 50 write-skew steps: i reads key i (loaded), writes key i+1 mod 50 */
	for (uint64_t i = 0; i < 50; i++)
		TXN(&s, 100 + i, R(i, 0), W((i + 1) % 50, 0));
	cr_expect_eq(check(&s, NULL, 0, &rep), 1);
	cr_expect(strstr(rep.msg, "cycle") != NULL, "%s", rep.msg);
	hist_set_free(&s);
}

Test(history, dirty_read_is_reported)
{
	struct hist_set s = { 0 };
	struct hist_report rep;

	TXN(&s, 10, R(0, 99)); /* 99 never committed */
	cr_expect_eq(check(&s, NULL, 0, &rep), 1);
	cr_expect(strstr(rep.msg, "committed no such write") != NULL, "%s", rep.msg);
	hist_set_free(&s);
}

Test(history, read_of_version_from_another_key_is_reported)
{
	struct hist_set s = { 0 };
	struct hist_report rep;

	TXN(&s, 10, W(0, 0));
	TXN(&s, 20, R(1, 10)); /* 10 wrote key 0, not key 1 */
	cr_expect_eq(check(&s, NULL, 0, &rep), 1);
	hist_set_free(&s);
}

Test(history, final_state_must_end_the_chain)
{
	struct hist_set s = { 0 };
	struct hist_report rep;
	uint64_t good[1] = { 20 }, stale[1] = { 10 }, none[1] = { 0 };

	TXN(&s, 10, W(0, 0));
	TXN(&s, 20, W(0, 10));
	cr_expect_eq(check(&s, good, 1, &rep), 0, "%s", rep.msg);
	cr_expect_eq(check(&s, stale, 1, &rep), 1);
	cr_expect(strstr(rep.msg, "last committed version") != NULL, "%s", rep.msg);
	cr_expect_eq(check(&s, none, 1, &rep), 1);
	hist_set_free(&s);
}

Test(history, duplicate_id_is_reported)
{
	struct hist_set s = { 0 };
	struct hist_report rep;

	TXN(&s, 10, R(0, 0));
	TXN(&s, 10, R(1, 0));
	cr_expect_eq(check(&s, NULL, 0, &rep), 1);
	cr_expect(strstr(rep.msg, "twice") != NULL, "%s", rep.msg);
	hist_set_free(&s);
}

Test(history, empty_history_passes)
{
	struct hist_set s = { 0 };
	struct hist_report rep;
	uint64_t final[2] = { 0, 0 };

	cr_expect_eq(check(&s, final, 2, &rep), 0, "%s", rep.msg);
}

Test(history, files_round_trip)
{
	char dir[] = "/tmp/remora-hist-XXXXXX";
	struct hist_log log;
	struct hist_set s = { 0 };
	struct hist_report rep;
	struct hist_txn t = { .txid = 10, .nops = 1, .op = { W(0, 0) } };
	char err[256] = "";

	cr_assert_not_null(mkdtemp(dir));
	cr_assert_eq(hist_log_open(&log, dir, 0, 0, 0, false), 0);
	cr_assert_eq(hist_log_append(&log, &t), 0);
	cr_assert_eq(hist_log_close(&log), 0);
	cr_assert_eq(hist_log_open(&log, dir, 1, 0, 0, true), 0);
	t = (struct hist_txn){ .txid = 20, .nops = 1, .op = { W(0, 0) } };
	cr_assert_eq(hist_log_append(&log, &t), 0);
	cr_assert_eq(hist_log_close(&log), 0);
	cr_assert_eq(hist_set_load_dir(&s, dir, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(s.n, 2);
	/* the two files hold a lost update: the checker must see both */
	cr_expect_eq(check(&s, NULL, 0, &rep), 1);
	hist_set_free(&s);
	unlink(log.path);
	{
		char p[600];

		snprintf(p, sizeof(p), "%s/hist-cn0-t0-c0.bin", dir);
		unlink(p);
	}
	rmdir(dir);
}

Test(history, corrupt_file_is_refused)
{
	char dir[] = "/tmp/remora-hist-XXXXXX", path[600], err[256] = "";
	struct hist_set s = { 0 };
	FILE *f;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/hist-cn0-t0-c0.bin", dir);
	f = fopen(path, "wb");
	cr_assert_not_null(f);
	fputs("not a history", f);
	fclose(f);
	cr_expect_lt(hist_set_load_dir(&s, dir, err, sizeof(err)), 0);
	cr_expect(strlen(err) > 0);
	hist_set_free(&s);
	unlink(path);
	rmdir(dir);
}

/* ---- crashes: abandoned logs and pending transactions ---------------------------------- */

struct tmpdir {
	char dir[32];
	char err[256];
};

static struct hist_log *open_log(struct tmpdir *d, struct hist_log *log)
{
	snprintf(d->dir, sizeof(d->dir), "/tmp/remora-hist-XXXXXX");
	cr_assert_not_null(mkdtemp(d->dir));
	cr_assert_eq(hist_log_open(log, d->dir, 0, 0, 0, true), 0);
	return log;
}

/* What a SIGKILL leaves: the mapping's stores are in the file, nothing is closed or cut. */
static void abandon(struct hist_log *log)
{
	munmap(log->win, 8192 * sizeof(struct hist_rec));
	close(log->fd);
}

static int load(struct tmpdir *d, struct hist_log *log, struct hist_set *s)
{
	int rc = hist_set_load_dir(s, d->dir, d->err, sizeof(d->err));

	unlink(log->path);
	rmdir(d->dir);
	return rc;
}

/* The mapped record of the log's next slot (the one a pending record occupies). */
static struct hist_rec *next_slot(struct hist_log *log)
{
	return &log->win[log->n + 1 - log->win_first];
}

static const struct hist_txn t10 = { .txid = 10, .nops = 1, .op = { W(0, 0) } };
static const struct hist_txn t20 = { .txid = 20, .nops = 2, .op = { W(0, 10), R(1, 0) } };
static const struct hist_txn t30 = { .txid = 30, .nops = 1, .op = { W(1, 0) } };

Test(history, killed_log_keeps_its_records_and_pending)
{
	struct tmpdir d;
	struct hist_log log;
	struct hist_set s = { 0 };

	open_log(&d, &log);
	cr_assert_eq(hist_log_append(&log, &t10), 0);
	cr_assert_eq(hist_log_pending(&log, &t20), 0); /* its commit aborted: replaced */
	cr_assert_eq(hist_log_pending(&log, &t30), 0);
	cr_assert_eq(hist_log_append(&log, &t30), 0);  /* committed: the pending one marked */
	cr_assert_eq(hist_log_pending(&log, &t20), 0); /* killed in its commit */
	abandon(&log);
	cr_assert_eq(load(&d, &log, &s), 0, "%s", d.err);
	cr_assert_eq(s.n, 3);
	cr_expect_eq(s.rec[0].txid, 10);
	cr_expect_eq(s.rec[1].txid, 30);
	cr_expect_eq(s.rec[1].flags, 0);
	cr_expect_eq(s.rec[2].txid, 20);
	cr_expect_eq(s.rec[2].flags, HIST_PENDING);
	hist_set_free(&s);
}

Test(history, clean_close_drops_a_pending_attempt)
{
	struct tmpdir d;
	struct hist_log log;
	struct hist_set s = { 0 };

	open_log(&d, &log);
	cr_assert_eq(hist_log_append(&log, &t10), 0);
	cr_assert_eq(hist_log_pending(&log, &t20), 0); /* aborted, then the run stopped */
	cr_assert_eq(hist_log_close(&log), 0);
	cr_assert_eq(load(&d, &log, &s), 0, "%s", d.err);
	cr_expect_eq(s.n, 1);
	hist_set_free(&s);
}

/*
 * A commit that failed without a verdict (its node's recovery decides): the pending record
 * survives the clean close (clean_close_drops_a_pending_attempt is the same without the
 * hist_log_undecided call: dropped), and nothing may follow it.
 */
Test(history, undecided_pending_survives_clean_close)
{
	struct tmpdir d;
	struct hist_log log;
	struct hist_set s = { 0 };

	open_log(&d, &log);
	cr_assert_eq(hist_log_append(&log, &t10), 0);
	cr_assert_eq(hist_log_pending(&log, &t20), 0);
	hist_log_undecided(&log);
	cr_assert_eq(hist_log_append(&log, &t30), -EPROTO, "a record after the undecided one");
	cr_assert_eq(hist_log_close(&log), -EPROTO);
	cr_assert_eq(load(&d, &log, &s), 0, "%s", d.err);
	cr_assert_eq(s.n, 2);
	cr_expect_eq(s.rec[1].txid, 20);
	cr_expect_eq(s.rec[1].flags, HIST_PENDING);
	hist_set_free(&s);
}

Test(history, torn_last_record_is_dropped)
{
	struct tmpdir d;
	struct hist_log log;
	struct hist_set s = { 0 };

	open_log(&d, &log);
	cr_assert_eq(hist_log_append(&log, &t10), 0);
	cr_assert_eq(hist_log_pending(&log, &t20), 0);
	next_slot(&log)->t.op[0].key = 7; /* half the record stored, its word already set */
	abandon(&log);
	cr_assert_eq(load(&d, &log, &s), 0, "%s", d.err);
	cr_expect_eq(s.n, 1);
	cr_expect_eq(s.rec[0].txid, 10);
	hist_set_free(&s);
}

Test(history, record_cut_before_its_word_is_dropped)
{
	struct tmpdir d;
	struct hist_log log;
	struct hist_set s = { 0 };
	struct hist_rec *r;

	open_log(&d, &log);
	cr_assert_eq(hist_log_append(&log, &t10), 0);
	r = next_slot(&log);
	r->t = t20; /* killed before its sum and state */
	abandon(&log);
	cr_assert_eq(load(&d, &log, &s), 0, "%s", d.err);
	cr_expect_eq(s.n, 1);
	hist_set_free(&s);
}

Test(history, torn_record_before_the_last_is_refused)
{
	struct tmpdir d;
	struct hist_log log;
	struct hist_set s = { 0 };

	open_log(&d, &log);
	cr_assert_eq(hist_log_append(&log, &t10), 0);
	cr_assert_eq(hist_log_append(&log, &t20), 0);
	log.win[1].t.nops = 2; /* record 0 damaged after the fact */
	abandon(&log);
	cr_expect_eq(load(&d, &log, &s), -EPROTO);
	cr_expect(strstr(d.err, "corrupt") != NULL, "%s", d.err);
	hist_set_free(&s);
}

/* Without crash_safe the records wait in a buffer: a log that was never closed is refused. */
Test(history, killed_buffered_log_is_refused)
{
	struct tmpdir d;
	struct hist_log log;
	struct hist_set s = { 0 };

	snprintf(d.dir, sizeof(d.dir), "/tmp/remora-hist-XXXXXX");
	cr_assert_not_null(mkdtemp(d.dir));
	cr_assert_eq(hist_log_open(&log, d.dir, 0, 0, 0, false), 0);
	cr_assert_eq(hist_log_append(&log, &t10), 0);
	fclose(log.f); /* what reaches the file of a killed process, at best */
	free(log.buf);
	cr_expect_eq(load(&d, &log, &s), -EPROTO);
	cr_expect(strstr(d.err, "--history-crash on") != NULL, "%s", d.err);
	hist_set_free(&s);
}

Test(history, log_killed_in_open_is_empty)
{
	struct tmpdir d;
	struct hist_log log = { 0 };
	struct hist_set s = { 0 };
	FILE *f;

	snprintf(d.dir, sizeof(d.dir), "/tmp/remora-hist-XXXXXX");
	cr_assert_not_null(mkdtemp(d.dir));
	snprintf(log.path, sizeof(log.path), "%s/hist-cn0-t0-c0.bin", d.dir);
	f = fopen(log.path, "wb");
	cr_assert_not_null(f);
	fclose(f);
	cr_assert_eq(load(&d, &log, &s), 0, "%s", d.err);
	cr_expect_eq(s.n, 0);
}

Test(history, log_spans_windows)
{
	struct tmpdir d;
	struct hist_log log;
	struct hist_set s = { 0 };
	struct hist_txn t = { .nops = 1, .op = { R(0, 0) } };

	open_log(&d, &log);
	for (uint64_t i = 1; i <= 20000; i++) {
		t.txid = i;
		cr_assert_eq(hist_log_append(&log, &t), 0);
	}
	t.txid = 20001;
	cr_assert_eq(hist_log_pending(&log, &t), 0);
	abandon(&log);
	cr_assert_eq(load(&d, &log, &s), 0, "%s", d.err);
	cr_assert_eq(s.n, 20001);
	cr_expect_eq(s.rec[19999].txid, 20000);
	cr_expect_eq(s.rec[20000].flags, HIST_PENDING);
	hist_set_free(&s);
}

static void pending(struct hist_set *s, uint64_t txid, unsigned n, const struct hist_op *ops)
{
	struct hist_txn t = { .txid = txid, .nops = n, .flags = HIST_PENDING };

	memcpy(t.op, ops, n * sizeof(*ops));
	cr_assert_eq(hist_set_add(s, &t), 0);
}

#define PENDING(s, id, ...)                                                                \
	do {                                                                               \
		const struct hist_op ops_[] = { __VA_ARGS__ };                             \
		pending((s), (id), sizeof(ops_) / sizeof(ops_[0]), ops_);                  \
	} while (0)

Test(history, pending_may_have_committed_or_not)
{
	struct hist_set s = { 0 };
	struct hist_report rep;
	uint64_t landed[2] = { 50, 0 }, rolled_back[2] = { 10, 0 };

	TXN(&s, 10, W(0, 0));
	PENDING(&s, 50, W(0, 10), R(1, 0)); /* its node died in its commit */
	cr_expect_eq(check(&s, landed, 2, &rep), 0, "%s", rep.msg);
	cr_expect_eq(rep.pending, 1);
	cr_expect_eq(rep.pending_kept, 1);
	cr_expect_eq(rep.txns, 2);
	cr_expect_eq(check(&s, rolled_back, 2, &rep), 0, "%s", rep.msg);
	cr_expect_eq(rep.pending_kept, 0);
	cr_expect_eq(rep.txns, 1);
	hist_set_free(&s);
}

Test(history, pending_read_by_others_committed)
{
	struct hist_set s = { 0 };
	struct hist_report rep;
	uint64_t final[2] = { 70, 60 };

	PENDING(&s, 50, W(0, 0));
	PENDING(&s, 60, R(0, 50), W(1, 0)); /* two coordinators of the dead node */
	TXN(&s, 70, W(0, 50));              /* overwrote 50's version: 50 committed */
	cr_expect_eq(check(&s, final, 2, &rep), 0, "%s", rep.msg);
	cr_expect_eq(rep.pending_kept, 2);
	/* 60 committed too (the store holds it), and it read 50's key 0 before 70: acyclic */
	hist_set_free(&s);
}

Test(history, partial_pending_commit_is_reported)
{
	struct hist_set s = { 0 };
	struct hist_report rep;
	uint64_t half[2] = { 50, 0 };

	PENDING(&s, 50, W(0, 0), W(1, 0)); /* only key 0's write landed */
	cr_expect_eq(check(&s, half, 2, &rep), 1);
	cr_expect(strstr(rep.msg, "last committed version") != NULL, "%s", rep.msg);
	hist_set_free(&s);
}

Test(history, pending_does_not_excuse_unwritten_reads)
{
	struct hist_set s = { 0 };
	struct hist_report rep;

	PENDING(&s, 50, W(0, 0));
	TXN(&s, 10, R(1, 50)); /* 50 would have written key 0, not key 1 */
	cr_expect_eq(check(&s, NULL, 0, &rep), 1);
	cr_expect(strstr(rep.msg, "committed no such write") != NULL, "%s", rep.msg);
	hist_set_free(&s);
	s = (struct hist_set){ 0 };
	PENDING(&s, 50, W(0, 0));
	TXN(&s, 10, R(0, 99)); /* nobody, pending or not, wrote 99 */
	cr_expect_eq(check(&s, NULL, 0, &rep), 1);
	hist_set_free(&s);
}

Test(history, pending_lost_update_is_reported)
{
	struct hist_set s = { 0 };
	struct hist_report rep;
	uint64_t final[1] = { 50 };

	TXN(&s, 10, W(0, 0));
	PENDING(&s, 50, W(0, 0)); /* in the store, yet it overwrote the version 10 overwrote */
	cr_expect_eq(check(&s, final, 1, &rep), 1);
	hist_set_free(&s);
}

/* ---- snapshot isolation (hist_check_si) ------------------------------------------------- */

static int check_si(struct hist_set *s, struct hist_report *rep)
{
	int rc = hist_check_si(s, NULL, 0, rep);

	cr_assert_geq(rc, 0, "checker failed: %d", rc);
	return rc;
}

Test(history, si_allows_write_skew)
{
	struct hist_set s = { 0 };
	struct hist_report rep;

	TXN(&s, 10, R(0, 0), W(1, 0));
	TXN(&s, 20, R(1, 0), W(0, 0));
	cr_expect_eq(check_si(&s, &rep), 0, "%s", rep.msg);
	cr_expect_str_eq(rep.msg, "snapshot isolation");
	cr_expect_eq(check(&s, NULL, 0, &rep), 1); /* and SR does not */
	hist_set_free(&s);
}

Test(history, si_reports_fractured_read)
{
	struct hist_set s = { 0 };
	struct hist_report rep;

	/* 20 sees 10's key 0 but the version of key 1 before 10's: no snapshot has both */
	TXN(&s, 10, W(0, 0), W(1, 0));
	TXN(&s, 20, R(0, 10), R(1, 0));
	cr_expect_eq(check_si(&s, &rep), 1);
	cr_expect(strstr(rep.msg, "G-single") != NULL, "%s", rep.msg);
	hist_set_free(&s);
}

Test(history, si_reports_lost_update_and_circular_reads)
{
	struct hist_set s = { 0 }, c = { 0 };
	struct hist_report rep;

	TXN(&s, 10, W(5, 0));
	TXN(&s, 20, W(5, 0));
	cr_expect_eq(check_si(&s, &rep), 1);
	cr_expect(strstr(rep.msg, "lost update") != NULL, "%s", rep.msg);
	TXN(&c, 10, W(0, 0), R(1, 20));
	TXN(&c, 20, W(1, 0), R(0, 10));
	cr_expect_eq(check_si(&c, &rep), 1);
	cr_expect(strstr(rep.msg, "-wr(") != NULL, "%s", rep.msg);
	hist_set_free(&s);
	hist_set_free(&c);
}
