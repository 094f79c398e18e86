// SPDX-License-Identifier: MIT
/*
 * The correctness checks on the real engine, across two compute-node processes with two
 * threads of coordinators each, under heavy contention: SmallBank's total, the kvs history
 * checker on 2-4 key transactions (pandora, oocc), and Pandora's litmus tests L1 (and its insert/delete
 * variant), L2 and L3. Each must pass on the unmutated engine (test_mutations.c proves each
 * can fail). ford passes only the checks its design allows: it validates versions without
 * locks ("Covert Locks", kept as in FORD, docs/engine.md section 7), so L2 and the history
 * checker must catch it (test_mutations.c, ford_*).
 */
#include <criterion/criterion.h>
#include <string.h>

#include "wutil.h"

#define TIMEOUT_S 60

static const char *const protocols[] = { "pandora", "oocc", "ford" };

static void expect_pass(struct wu_run *r, const char *what)
{
	cr_expect_eq(r->status, 0, "%s: exit %d\n%s", what, r->status, r->log);
	cr_assert_not_null(r->summary, "%s: no summary\n%s", what, r->log);
	cr_expect(wu_bool(r, "check.run"), "%s: check did not run", what);
	cr_expect(wu_bool(r, "check.ok"), "%s: %s", what, wu_str(r, "check.message"));
	cr_expect_gt(wu_num(r, "committed"), 0, "%s: nothing committed", what);
	cr_expect_eq(wu_num(r, "cn_reported"), 2, "%s", what);
	cr_expect_eq(wu_num(r, "integrity_errors"), 0, "%s", what);
}

Test(checks, smallbank_total_is_conserved, .timeout = 2 * TIMEOUT_S)
{
	for (unsigned p = 0; p < 3; p++) {
		char proto[32];
		const char *args[] = { "--workload=smallbank", proto, "--accounts=2000",
				       "--hot-accounts=16", "--cn=2", "--threads=2", "--coros=4",
				       "--duration=1", "--warmup=0.2", "--check", NULL };
		struct wu_run r;

		snprintf(proto, sizeof(proto), "--protocol=%s", protocols[p]);
		wu_bench(&r, NULL, TIMEOUT_S, args);
		expect_pass(&r, protocols[p]);
		cr_expect(strstr(wu_str(&r, "check.message"), "conserved") != NULL, "%s",
			  wu_str(&r, "check.message"));
		/* contention was real: some attempts aborted */
		cr_expect_gt(wu_num(&r, "abort_rate"), 0, "%s: no contention", protocols[p]);
		wu_free(&r);
	}
}

static void kvs_history(const char *protocol)
{
	char proto[32];
	const char *args[] = { "--workload=kvs", proto, "--keys=16",
			       "--txn-keys=2-4", "--update-pct=50", "--dist=uniform", "--fetch=each",
			       "--history=%DIR%/hist", "--cn=2", "--threads=2", "--coros=4",
			       "--duration=1", "--warmup=0", "--check", NULL };
	struct wu_run r;

	snprintf(proto, sizeof(proto), "--protocol=%s", protocol);
	wu_bench(&r, NULL, TIMEOUT_S, args);
	expect_pass(&r, protocol);
	cr_expect(strstr(wu_str(&r, "check.message"), "serializable") != NULL, "%s",
		  wu_str(&r, "check.message"));
	cr_expect_gt(wu_num(&r, "abort_rate"), 0, "no contention");
	wu_free(&r);
}

Test(checks, kvs_history_is_serializable, .timeout = TIMEOUT_S)
{
	kvs_history("pandora");
}

Test(checks, kvs_history_is_serializable_oocc, .timeout = TIMEOUT_S)
{
	kvs_history("oocc");
}

/*
 * Runs a litmus test on the first nproto protocols of protocols[]. The tests hold for pandora
 * and oocc: ford keeps FORD's Covert Locks (validation checks versions, not locks), so a
 * read-only assertion transaction can validate while a writer holds the lock between its
 * commit WRITEs and see half a committed pair (seen in CI on L1 once in 40 rounds).
 */
static void litmus_pass(const char *test, unsigned nproto)
{
	for (unsigned p = 0; p < nproto; p++) {
		char proto[32], t[32];
		const char *args[] = { "--workload=litmus", proto, t, "--rounds=200",
				       "--round-ms=5", "--cn=2", "--threads=2", "--coros=4",
				       "--check", NULL };
		struct wu_run r;

		snprintf(proto, sizeof(proto), "--protocol=%s", protocols[p]);
		snprintf(t, sizeof(t), "--test=%s", test);
		wu_bench(&r, NULL, TIMEOUT_S, args);
		expect_pass(&r, test);
		cr_expect(strstr(wu_str(&r, "check.message"), "rounds hold") != NULL, "%s: %s",
			  protocols[p], wu_str(&r, "check.message"));
		wu_free(&r);
	}
}

Test(checks, litmus_l1_direct_write, .timeout = 2 * TIMEOUT_S)
{
	litmus_pass("l1", 2); /* pandora, oocc: see the note above litmus_pass */
}

Test(checks, litmus_l1_insert_delete, .timeout = 2 * TIMEOUT_S)
{
	litmus_pass("l1-insdel", 2); /* pandora, oocc: see the note above litmus_pass */
}

Test(checks, litmus_l2_read_write, .timeout = TIMEOUT_S)
{
	litmus_pass("l2", 2); /* pandora, oocc: ford keeps Covert Locks */
}

Test(checks, litmus_l3_indirect_write, .timeout = 2 * TIMEOUT_S)
{
	litmus_pass("l3", 2); /* pandora, oocc: see the note above litmus_pass */
}
