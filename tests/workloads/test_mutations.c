// SPDX-License-Identifier: MIT
/*
 * Negative controls: with a known protocol bug switched back in (REMORA_MUTATE, docs/engine.md
 * section 6), each check must report a violation. A check that cannot fail is not a check.
 *
 * A bug shows only when transactions interleave inside its window, so each control runs under
 * heavy contention (a handful of keys, two compute-node processes, several coordinators) and
 * gets up to WU_TRIES bounded runs to expose it; on the unmutated engine the same settings
 * pass (test_checks.c). A litmus bug of the write-skew kind (covert_locks on l2) shows only
 * when the first two writers of a round overlap, so the litmus runs use many short rounds:
 * at 40 rounds of 20 ms one run in two missed it, at 200 rounds of 5 ms about one in ten.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "wutil.h"

#define TIMEOUT_S 60
#define WU_TRIES 5

/* Runs until the check reports a violation (exit 1, check.ok false) or WU_TRIES runs pass. */
static void expect_caught(const char *mutate, const char *const *args, const char *what)
{
	char last[4096] = "";

	for (unsigned i = 0; i < WU_TRIES; i++) {
		struct wu_run r;
		bool caught;

		wu_bench(&r, mutate, TIMEOUT_S, args);
		cr_assert_not_null(r.summary, "%s: no summary (exit %d)\n%s", what, r.status,
				   r.log);
		cr_assert(wu_bool(&r, "check.run"), "%s: check did not run", what);
		/* caught by the check, not by a crash: every compute node reported */
		caught = !wu_bool(&r, "check.ok") && r.status == 1 &&
			 wu_num(&r, "cn_reported") == wu_num(&r, "cn") &&
			 !strstr(r.log, "Sanitizer");
		snprintf(last, sizeof(last), "exit %d, check: %s", r.status,
			 wu_str(&r, "check.message"));
		wu_free(&r);
		if (caught)
			return;
	}
	cr_expect_fail("%s with REMORA_MUTATE=%s was not caught in %u runs (last: %s)", what,
		       mutate ? mutate : "(none)", WU_TRIES, last);
}

static void history(const char *protocol, const char *mutate)
{
	char proto[32];
	const char *args[] = { "--workload=kvs", proto, "--keys=16", "--txn-keys=2-4",
			       "--update-pct=50", "--dist=uniform", "--fetch=each",
			       "--history=%DIR%/hist", "--cn=2", "--threads=2", "--coros=4",
			       "--duration=1", "--warmup=0", "--check", NULL };

	snprintf(proto, sizeof(proto), "--protocol=%s", protocol);
	expect_caught(mutate, args, "kvs history");
}

static void litmus(const char *protocol, const char *test, const char *mutate)
{
	char proto[32], t[32];
	const char *args[] = { "--workload=litmus", proto, t, "--rounds=200", "--round-ms=5",
			       "--cn=2", "--threads=2", "--coros=4", "--check", NULL };

	snprintf(proto, sizeof(proto), "--protocol=%s", protocol);
	snprintf(t, sizeof(t), "--test=%s", test);
	expect_caught(mutate, args, test);
}

Test(mutations, history_catches_skip_validation, .timeout = 4 * TIMEOUT_S)
{
	history("pandora", "skip_validation");
}

Test(mutations, history_catches_early_unlock, .timeout = 4 * TIMEOUT_S)
{
	history("pandora", "early_unlock");
}

Test(mutations, history_catches_covert_locks, .timeout = 4 * TIMEOUT_S)
{
	history("pandora", "covert_locks");
}

Test(mutations, history_catches_relaxed_locks, .timeout = 4 * TIMEOUT_S)
{
	history("pandora", "relaxed_locks");
}

Test(mutations, history_catches_complicit_abort, .timeout = 4 * TIMEOUT_S)
{
	history("pandora", "complicit_abort");
}

/* FORD validates versions only (Covert Locks, kept as in FORD): the checks must see it. */
Test(mutations, history_catches_ford_by_design, .timeout = 4 * TIMEOUT_S)
{
	history("ford", NULL);
}

Test(mutations, l2_catches_ford_by_design, .timeout = 4 * TIMEOUT_S)
{
	litmus("ford", "l2", NULL);
}

Test(mutations, smallbank_catches_early_unlock, .timeout = 4 * TIMEOUT_S)
{
	const char *args[] = { "--workload=smallbank", "--protocol=pandora", "--accounts=100",
			       "--hot-accounts=4", "--cn=2", "--threads=2", "--coros=4",
			       "--duration=1", "--warmup=0", "--check", NULL };

	expect_caught("early_unlock", args, "smallbank total");
}

Test(mutations, l1_catches_complicit_abort, .timeout = 4 * TIMEOUT_S)
{
	litmus("pandora", "l1", "complicit_abort");
}

Test(mutations, l1_insdel_catches_complicit_abort, .timeout = 4 * TIMEOUT_S)
{
	litmus("pandora", "l1-insdel", "complicit_abort");
}

Test(mutations, l1_catches_early_unlock, .timeout = 4 * TIMEOUT_S)
{
	litmus("pandora", "l1", "early_unlock");
}

Test(mutations, l2_catches_covert_locks, .timeout = 4 * TIMEOUT_S)
{
	litmus("pandora", "l2", "covert_locks");
}

Test(mutations, l2_catches_relaxed_locks, .timeout = 4 * TIMEOUT_S)
{
	litmus("pandora", "l2", "relaxed_locks");
}

Test(mutations, l2_catches_skip_validation, .timeout = 4 * TIMEOUT_S)
{
	litmus("pandora", "l2", "skip_validation");
}

Test(mutations, l3_catches_early_unlock, .timeout = 4 * TIMEOUT_S)
{
	litmus("pandora", "l3", "early_unlock");
}
