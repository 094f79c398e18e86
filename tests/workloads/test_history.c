// SPDX-License-Identifier: MIT
/*
 * The serializability checker on hand-built histories: serial ones pass, and each anomaly
 * (lost update, write skew, circular information flow, dirty read, a final value that is not
 * the last committed version, a duplicated id) is reported. Also a round trip through the
 * history files the kvs workload writes, and the snapshot-isolation mode (write skew passes,
 * G-single, lost updates and wr/ww cycles do not).
 */
#include <criterion/criterion.h>
#include <stdio.h>
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
	cr_assert_eq(hist_log_open(&log, dir, 0, 0, 0), 0);
	cr_assert_eq(hist_log_append(&log, &t), 0);
	cr_assert_eq(hist_log_close(&log), 0);
	cr_assert_eq(hist_log_open(&log, dir, 1, 0, 0), 0);
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
