// SPDX-License-Identifier: MIT
/*
 * `remora bench` as a user sees it: bad command lines are one-line errors with exit status 2
 * and start nothing; a short run reports consistent numbers (verbs counted per transaction,
 * every committed transaction typed, rates that match counts over the measured time).
 */
#include <criterion/criterion.h>
#include <string.h>

#include "wutil.h"

#define TIMEOUT_S 60

static void expect_usage_error(const char *const *args, const char *needle)
{
	struct wu_run r;

	wu_bench(&r, NULL, TIMEOUT_S, args);
	cr_expect_eq(r.status, 2, "exit %d\n%s", r.status, r.log);
	cr_expect_null(r.summary, "a summary was written");
	cr_expect(strstr(r.log, needle) != NULL, "expected '%s' in:\n%s", needle, r.log);
	/* one line */
	cr_expect(strchr(r.log, '\n') == strrchr(r.log, '\n'), "more than one line:\n%s", r.log);
	wu_free(&r);
}

Test(bench, unknown_workload)
{
	const char *args[] = { "--workload=tpcz", NULL };

	expect_usage_error(args, "unknown workload 'tpcz'");
}

Test(bench, unknown_protocol)
{
	const char *args[] = { "--protocol=nosuch", NULL };

	expect_usage_error(args, "nosuch");
}

Test(bench, unknown_option)
{
	const char *args[] = { "--frobnicate=3", NULL };

	expect_usage_error(args, "unknown option");
}

Test(bench, option_of_another_workload)
{
	const char *args[] = { "--workload=kvs", "--accounts=10", NULL };

	expect_usage_error(args, "does not apply to workload kvs");
}

Test(bench, bad_knob_value)
{
	const char *args[] = { "--workload=kvs", "--theta=-1", NULL };

	expect_usage_error(args, "--theta");
}

Test(bench, bad_mix)
{
	const char *args[] = { "--workload=smallbank", "--mix=50,50,50,0,0,0", NULL };

	expect_usage_error(args, "--mix");
}

Test(bench, tables_that_do_not_fit_are_refused, .timeout = TIMEOUT_S)
{
	const char *args[] = { "--workload=kvs", "--keys=50000000", "--pool-size=16M",
			       "--duration=1", NULL };

	expect_usage_error(args, "larger --pool-size");
}

Test(bench, smallbank_accounts_that_do_not_fit_are_refused, .timeout = TIMEOUT_S)
{
	const char *args[] = { "--workload=smallbank", "--accounts=20M", "--pool-size=64M",
			       NULL };

	expect_usage_error(args, "smallbank tables need");
}

Test(bench, short_run_reports_consistent_numbers, .timeout = TIMEOUT_S)
{
	const char *args[] = { "--workload=kvs", "--keys=1000", "--update-pct=50",
			       "--dist=uniform", "--cn=2", "--threads=1", "--coros=4",
			       "--duration=1", "--warmup=0.2", NULL };
	struct wu_run r;
	double committed, secs, read, update;

	wu_bench(&r, NULL, TIMEOUT_S, args);
	cr_assert_eq(r.status, 0, "exit %d\n%s", r.status, r.log);
	cr_assert_not_null(r.summary);
	committed = wu_num(&r, "committed");
	secs = wu_num(&r, "seconds");
	cr_expect_gt(committed, 0);
	cr_expect_gt(secs, 0.5);
	cr_expect_float_eq(wu_num(&r, "committed_per_s"), committed / secs,
			   1e-6 * committed / secs);
	cr_expect_geq(wu_num(&r, "attempted"), committed);
	read = wu_num(&r, "committed_by_type.ReadOne");
	update = wu_num(&r, "committed_by_type.UpdateOne");
	cr_expect_eq(read + update, committed);
	/* 50% updates: both types occur, in roughly equal numbers */
	cr_expect_gt(read, committed * 0.35);
	cr_expect_gt(update, committed * 0.35);
	/* every transaction reads at least one record from the memory node */
	cr_expect_geq(wu_num(&r, "verbs_per_txn.read"), 1.0);
	/* updates write: at least the new value */
	cr_expect_gt(wu_num(&r, "verbs_per_txn.write"), 0.3);
	cr_expect_float_eq(wu_num(&r, "verbs_per_txn.total"),
			   wu_num(&r, "verbs_per_txn.read") + wu_num(&r, "verbs_per_txn.write") +
				   wu_num(&r, "verbs_per_txn.cas") + wu_num(&r, "verbs_per_txn.faa") +
				   wu_num(&r, "verbs_per_txn.mcas"),
			   1e-6);
	cr_expect_float_eq(wu_num(&r, "mn_atomics_per_txn"),
			   wu_num(&r, "verbs_per_txn.cas") + wu_num(&r, "verbs_per_txn.faa") +
				   wu_num(&r, "verbs_per_txn.mcas"),
			   1e-6);
	cr_expect_gt(wu_num(&r, "latency_ns.p50"), 0);
	cr_expect_geq(wu_num(&r, "latency_ns.p99"), wu_num(&r, "latency_ns.p50"));
	cr_expect_geq(wu_num(&r, "latency_ns.p999"), wu_num(&r, "latency_ns.p99"));
	cr_expect_str_eq(wu_str(&r, "workload"), "kvs");
	cr_expect_str_eq(wu_str(&r, "params.update-pct"), "50");
	cr_expect_eq(wu_num(&r, "cn"), 2);
	cr_expect_eq(wu_num(&r, "cn_reported"), 2);
	/* each node's share: its commits add up to the total, its aborts to the node's attempts */
	cr_expect_eq(wu_num(&r, "per_cn.0.cn") + wu_num(&r, "per_cn.1.cn"), 1);
	cr_expect_gt(wu_num(&r, "per_cn.0.committed"), 0);
	cr_expect_gt(wu_num(&r, "per_cn.1.committed"), 0);
	cr_expect_eq(wu_num(&r, "per_cn.0.committed") + wu_num(&r, "per_cn.1.committed"),
		     wu_num(&r, "committed"));
	cr_expect_eq(wu_num(&r, "per_cn.0.attempted") + wu_num(&r, "per_cn.1.attempted"),
		     wu_num(&r, "attempted"));
	cr_expect(strstr(r.log, "per node"), "%s", r.log);
	wu_free(&r);
}

/* Committed transactions per type, as fractions of all committed. */
static double share(const struct wu_run *r, const char *type)
{
	char path[96];

	snprintf(path, sizeof(path), "committed_by_type.%s", type);
	return wu_num(r, path) / wu_num(r, "committed");
}

static void run_short(struct wu_run *r, const char *const *args)
{
	wu_bench(r, NULL, TIMEOUT_S, args);
	cr_assert_eq(r->status, 0, "exit %d\n%s", r->status, r->log);
	cr_assert_not_null(r->summary);
	cr_assert_gt(wu_num(r, "committed"), 2000, "too few transactions to check a mix");
}

Test(bench, ycsb_mixes_follow_the_core_workloads, .timeout = 2 * TIMEOUT_S)
{
	static const struct {
		const char *mix;
		double read, update, insert, scan, rmw;
	} want[] = {
		{ "A", 0.50, 0.50, 0, 0, 0 }, { "B", 0.95, 0.05, 0, 0, 0 },
		{ "C", 1.00, 0, 0, 0, 0 },    { "D", 0.95, 0, 0.05, 0, 0 },
		{ "E", 0, 0, 0.05, 0.95, 0 }, { "F", 0.50, 0, 0, 0, 0.50 },
	};

	for (unsigned i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		char mix[16];
		/* insert room beyond what 0.5 s can use: a full table turns inserts into reads */
		const char *args[] = { "--workload=ycsb", mix, "--records=5000",
				       "--insert-room=200000", "--value-size=100", "--dist=uniform",
				       "--max-scan=10", "--duration=0.5", "--warmup=0", NULL };
		struct wu_run r;

		snprintf(mix, sizeof(mix), "--mix=%s", want[i].mix);
		run_short(&r, args);
		cr_expect_float_eq(share(&r, "Read"), want[i].read, 0.03, "%s", want[i].mix);
		cr_expect_float_eq(share(&r, "Update"), want[i].update, 0.03, "%s", want[i].mix);
		cr_expect_float_eq(share(&r, "Insert"), want[i].insert, 0.03, "%s", want[i].mix);
		cr_expect_float_eq(share(&r, "Scan"), want[i].scan, 0.03, "%s", want[i].mix);
		cr_expect_float_eq(share(&r, "ReadModifyWrite"), want[i].rmw, 0.03, "%s",
				   want[i].mix);
		cr_expect_eq(wu_num(&r, "integrity_errors"), 0, "%s", want[i].mix);
		wu_free(&r);
	}
}

/* --write-pct P replaces the mix: P% Update, the rest Read; out of range is a usage error. */
Test(bench, ycsb_write_pct, .timeout = TIMEOUT_S)
{
	const char *args[] = { "--workload=ycsb", "--write-pct=30", "--records=5000",
			       "--value-size=100", "--dist=uniform", "--duration=0.5", "--warmup=0",
			       NULL };
	const char *bad[] = { "--workload=ycsb", "--write-pct=101", NULL };
	struct wu_run r;

	run_short(&r, args);
	cr_expect_float_eq(share(&r, "Update"), 0.30, 0.03);
	cr_expect_float_eq(share(&r, "Read"), 0.70, 0.03);
	wu_free(&r);
	expect_usage_error(bad, "--write-pct");
}

/* --history on YCSB: a mix with inserts or scans is refused (the checker needs one cell per
 * record and transaction over the loaded keys). */
Test(bench, ycsb_history_refuses_inserts)
{
	const char *args[] = { "--workload=ycsb", "--mix=D", "--history=/tmp", NULL };

	expect_usage_error(args, "--history needs mix A, B, C or F");
}

Test(bench, smallbank_mix_is_fords, .timeout = TIMEOUT_S)
{
	/* uniform over many accounts: few conflicts, so committed shares follow the mix */
	const char *args[] = { "--workload=smallbank", "--accounts=20000", "--dist=uniform",
			       "--duration=0.5", "--warmup=0", NULL };
	static const struct {
		const char *type;
		double pct;
	} want[] = {
		{ "Amalgamate", 0.15 },	   { "Balance", 0.15 },	       { "DepositChecking", 0.15 },
		{ "SendPayment", 0.25 },   { "TransactSaving", 0.15 }, { "WriteCheck", 0.15 },
	};
	struct wu_run r;
	double user, done;

	run_short(&r, args);
	/* SendPayment is the only transaction the application aborts (insufficient funds) */
	user = wu_num(&r, "user_aborted");
	done = wu_num(&r, "committed") + user;
	for (unsigned i = 0; i < 6; i++) {
		char path[96];
		double n;

		snprintf(path, sizeof(path), "committed_by_type.%s", want[i].type);
		n = wu_num(&r, path) + (strcmp(want[i].type, "SendPayment") ? 0 : user);
		cr_expect_float_eq(n / done, want[i].pct, 0.03, "%s: %.3f", want[i].type,
				   n / done);
	}
	wu_free(&r);
}

Test(bench, kvs_rw_ratio_sets_the_update_share, .timeout = TIMEOUT_S)
{
	const char *args[] = { "--workload=kvs", "--keys=10000", "--rw-ratio=95:5",
			       "--dist=uniform", "--duration=0.5", "--warmup=0", NULL };
	struct wu_run r;

	run_short(&r, args);
	cr_expect_float_eq(share(&r, "UpdateOne"), 0.05, 0.02);
	cr_expect_str_eq(wu_str(&r, "params.rw-ratio"), "95:5");
	wu_free(&r);
}

Test(bench, both_mix_flags_are_refused)
{
	const char *args[] = { "--workload=kvs", "--rw-ratio=1:1", "--update-pct=50", NULL };

	expect_usage_error(args, "not both");
}

Test(bench, too_many_coordinators_per_compute_node, .timeout = TIMEOUT_S)
{
	const char *args[] = { "--workload=kvs", "--threads=64", "--coros=64", NULL };

	expect_usage_error(args, "coords_per_cn");
}
