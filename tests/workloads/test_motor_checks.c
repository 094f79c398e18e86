// SPDX-License-Identifier: MIT
/*
 * Every workload on motor, serializable and snapshot isolation, with --check: SmallBank's
 * total, TPC-C conditions 1-4, TATP's rows, YCSB and kvs integrity, Pandora's litmus tests (L2
 * allows write skew under SI), and the kvs history checker (serializable under SR, snapshot
 * isolation under SI). The negative controls: motor's skip_validation (SR) and
 * skip_first_committer_wins (SI) are caught by the history checker.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "wutil.h"

#define TIMEOUT_S 90

static const char *const isos[] = { "sr", "si" };

/* Runs one workload on motor under isolation iso with --check; returns the check's result. */
static bool run(const char *iso, const char *mutate, const char *const *wl_args, char *msg,
		size_t msglen)
{
	char isoarg[32];
	const char *base[] = { "--protocol=motor", isoarg, "--threads=2", "--coros=4", NULL };

	snprintf(isoarg, sizeof(isoarg), "--isolation=%s", iso);
	return wu_check(base, wl_args, iso, mutate, TIMEOUT_S, msg, msglen);
}

static void both(const char *const *wl_args)
{
	char msg[512];

	for (unsigned i = 0; i < 2; i++)
		cr_expect(run(isos[i], NULL, wl_args, msg, sizeof(msg)), "%s", msg);
}

Test(motor_checks, smallbank, .timeout = 2 * TIMEOUT_S)
{
	const char *a[] = { "--workload=smallbank", "--accounts=2000", "--hot-accounts=16", "--cn=2",
			    "--duration=1", "--warmup=0", NULL };
	both(a);
}

Test(motor_checks, kvs_and_ycsb, .timeout = 4 * TIMEOUT_S)
{
	const char *k[] = { "--workload=kvs", "--keys=1000", "--update-pct=50", "--duration=1",
			    "--warmup=0", NULL };
	const char *y[] = { "--workload=ycsb", "--records=2000", "--value-size=100",
			    "--duration=1", "--warmup=0", NULL };
	both(k);
	both(y);
}

Test(motor_checks, tatp_and_tpcc, .timeout = 4 * TIMEOUT_S)
{
	const char *t[] = { "--workload=tatp", "--pool-size=256M", "--duration=1", "--warmup=0",
			    NULL };
	/* counted: 8 coordinators x 2000, inside the default room (test_oltp_run.c says why) */
	const char *c[] = { "--workload=tpcc", "--pool-size=256M", "--txns=2000", NULL };
	both(t);
	both(c);
}

Test(motor_checks, litmus, .timeout = 8 * TIMEOUT_S)
{
	static const char *const tests[] = { "--test=l1", "--test=l1-insdel", "--test=l2",
					     "--test=l3" };

	for (unsigned i = 0; i < 4; i++) {
		const char *a[] = { "--workload=litmus", tests[i], "--rounds=30", "--round-ms=20",
				    "--cn=2", NULL };
		both(a);
	}
}

static const char *const hist_args[] = { "--workload=kvs", "--keys=16", "--txn-keys=2-4",
					 "--update-pct=50", "--history=%DIR%/hist", "--cn=2",
					 "--duration=1", "--warmup=0", NULL };

Test(motor_checks, history_sr_and_si, .timeout = 2 * TIMEOUT_S)
{
	both(hist_args);
}

/*
 * A negative control: the history checker must catch the mutation in one of three runs (a
 * slow or loaded host, ASan, interleaves less: one second may hold no anomaly).
 */
static bool caught(const char *iso, const char *mutate, char *msg, size_t msglen)
{
	for (unsigned i = 0; i < 3; i++)
		if (!run(iso, mutate, hist_args, msg, msglen))
			return true;
	return false;
}

Test(motor_checks, history_catches_skip_validation, .timeout = 3 * TIMEOUT_S)
{
	char msg[512];

	cr_expect(caught("sr", "skip_validation", msg, sizeof(msg)), "%s", msg);
	cr_expect(strstr(msg, "not serializable") != NULL, "%s", msg);
}

Test(motor_checks, history_catches_skip_first_committer_wins, .timeout = 3 * TIMEOUT_S)
{
	char msg[512];

	cr_expect(caught("si", "skip_first_committer_wins", msg, sizeof(msg)), "%s", msg);
	cr_expect(strstr(msg, "not snapshot isolation") != NULL, "%s", msg);
}
