// SPDX-License-Identifier: MIT
/*
 * Every workload on lotus over two compute nodes (shards spread over both, so locks go local
 * and remote), serializable and snapshot isolation, with --check: SmallBank's total, TPC-C
 * conditions 1-4, TATP's rows, YCSB and kvs integrity, Pandora's litmus tests, and the kvs
 * history checker (serializable under SR, snapshot isolation under SI). Negative control:
 * lotus_early_unlock (locks given back before the visible WRITE) is caught by the history
 * checker as a lost update, and so is lotus_vt_no_drop (the VT cache keeps an image past a
 * remote writer). One thread per compute node: on a 2-core host, more threads make
 * every remote lock wait for an operating-system time slice of the node that serves it.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "wutil.h"

#define TIMEOUT_S 120

static const char *const isos[] = { "sr", "si" };

/* One workload on lotus, isolation iso, with --check; returns the check's result. */
static bool run(const char *iso, const char *mutate, const char *const *wl_args, char *msg,
		size_t msglen)
{
	char isoarg[32];
	const char *base[] = { "--protocol=lotus", isoarg, "--threads=1", "--coros=4", "--cn=2",
			       NULL };

	snprintf(isoarg, sizeof(isoarg), "--isolation=%s", iso);
	return wu_check(base, wl_args, iso, mutate, TIMEOUT_S, msg, msglen);
}

static void both(const char *const *wl_args)
{
	char msg[512];

	for (unsigned i = 0; i < 2; i++)
		cr_expect(run(isos[i], NULL, wl_args, msg, sizeof(msg)), "%s", msg);
}

Test(lotus_checks, smallbank, .timeout = 2 * TIMEOUT_S)
{
	const char *a[] = { "--workload=smallbank", "--accounts=2000", "--hot-accounts=16",
			    "--duration=1", "--warmup=0", NULL };
	both(a);
}

Test(lotus_checks, kvs_and_ycsb, .timeout = 4 * TIMEOUT_S)
{
	const char *k[] = { "--workload=kvs", "--keys=1000", "--update-pct=50", "--duration=1",
			    "--warmup=0", NULL };
	const char *y[] = { "--workload=ycsb", "--records=2000", "--value-size=100",
			    "--duration=1", "--warmup=0", NULL };
	both(k);
	both(y);
}

Test(lotus_checks, tatp_and_tpcc, .timeout = 4 * TIMEOUT_S)
{
	const char *t[] = { "--workload=tatp", "--pool-size=256M", "--duration=1", "--warmup=0",
			    NULL };
	/*
	 * 4 s: TPC-C's hot district rows under no-wait commit few per second on a busy host; a
	 * quiet one commits ~15000/s, so the tables get room for 80000 NewOrders and Payments.
	 */
	const char *c[] = { "--workload=tpcc", "--pool-size=512M", "--room=80000", "--duration=4",
			    "--warmup=0", NULL };
	both(t);
	both(c);
}

/*
 * A counted run ends: the node that finishes first keeps serving its lock table until the
 * other one is done (the drain). Before it, that node closed its table and the other node's
 * coordinators aborted on lock-RPC timeouts for ever (TPC-C, --txns 150: over 200 s).
 */
Test(lotus_checks, txns_run_ends, .timeout = 2 * TIMEOUT_S)
{
	const char *c[] = { "--workload=tpcc", "--pool-size=256M", "--txns=30", NULL };
	const char *s[] = { "--workload=smallbank", "--accounts=2000", "--hot-accounts=16",
			    "--txns=200", NULL };
	char msg[512];

	cr_expect(run("sr", NULL, c, msg, sizeof(msg)), "%s", msg);
	cr_expect(run("si", NULL, s, msg, sizeof(msg)), "%s", msg);
}

Test(lotus_checks, litmus, .timeout = 8 * TIMEOUT_S)
{
	static const char *const tests[] = { "--test=l1", "--test=l1-insdel", "--test=l2",
					     "--test=l3" };

	for (unsigned i = 0; i < 4; i++) {
		const char *a[] = { "--workload=litmus", tests[i], "--rounds=30", "--round-ms=20",
				    NULL };
		both(a);
	}
}

/*
 * Routing (route=true): a read-write transaction runs on the node that owns its first key,
 * handed over by message and run there between that node's own. The checks still hold (the
 * serving coordinator counts the transaction and runs its commit hook: SmallBank's deltas,
 * the history's records), and transactions really went over: some handed away, as many run
 * for the other node.
 */
static bool run_routed(const char *const *wl_args, char *msg, size_t msglen)
{
	const char *base[] = { "--protocol=lotus", "--isolation=sr", "--threads=1", "--coros=4",
			       "--cn=2", "--route", NULL };

	return wu_check(base, wl_args, "sr routed", NULL, TIMEOUT_S, msg, msglen);
}

Test(lotus_checks, routed_runs_check, .timeout = 4 * TIMEOUT_S)
{
	const char *s[] = { "--workload=smallbank", "--accounts=2000", "--hot-accounts=16",
			    "--duration=1", "--warmup=0", NULL };
	const char *h[] = { "--workload=kvs", "--keys=16", "--txn-keys=2-4", "--update-pct=50",
			    "--history=%DIR%/hist", "--duration=1", "--warmup=0", NULL };
	const char *c[] = { "--workload=tpcc", "--pool-size=512M", "--room=80000", "--duration=2",
			    "--warmup=0", NULL };
	char msg[512];

	cr_expect(run_routed(s, msg, sizeof(msg)), "%s", msg);
	cr_expect(run_routed(h, msg, sizeof(msg)), "%s", msg);
	cr_expect(run_routed(c, msg, sizeof(msg)), "%s", msg);
}

Test(lotus_checks, routed_transactions_go_home, .timeout = TIMEOUT_S)
{
	const char *a[] = { "--protocol=lotus", "--threads=1", "--coros=4", "--cn=2", "--route",
			    "--workload=kvs", "--keys=1000", "--txn-keys=1", "--update-pct=100",
			    "--duration=1", "--warmup=0", NULL };
	struct wu_run r;
	double routed, served, lost;

	wu_bench(&r, NULL, TIMEOUT_S, a);
	routed = wu_num(&r, "routed");
	served = wu_num(&r, "served_for_others");
	lost = wu_num(&r, "route_lost");
	cr_assert_eq(r.status, 0, "%s", r.log);
	cr_assert_gt(routed, 0, "no transaction was handed to its home node: %s", r.log);
	/* every handed-over transaction ran at its home, unless its answer was late at the end;
	 * the nodes' measured phases start and end apart, so a few fall on one side only */
	cr_assert_leq(served, routed + 16, "%s", r.log);
	cr_assert_geq(served + lost + 16, routed, "%.0f handed over, %.0f run: %s", routed, served,
		      r.log);
	wu_free(&r);
}

/*
 * YCSB D inserts under routing: an insert's key is numbered where it was drawn, and it commits
 * at its home. When the number was the drawing coordinator's count of committed inserts, it
 * never moved and the second insert of a coordinator collided ("key already exists").
 */
Test(lotus_checks, routed_ycsb_inserts, .timeout = TIMEOUT_S)
{
	const char *y[] = { "--workload=ycsb", "--mix=D", "--records=2000", "--value-size=100",
			    "--duration=1", "--warmup=0", NULL };
	char msg[512];

	cr_expect(run_routed(y, msg, sizeof(msg)), "%s", msg);
}

/* A count of transactions cannot complete when a handed-over one may be lost: refused. */
Test(lotus_checks, routed_count_refused, .timeout = TIMEOUT_S)
{
	const char *a[] = { "--protocol=lotus", "--threads=1", "--coros=2", "--cn=2", "--route",
			    "--workload=kvs", "--keys=100", "--txns=10", NULL };
	struct wu_run r;

	wu_bench(&r, NULL, TIMEOUT_S, a);
	cr_assert_neq(r.status, 0, "a routed --txns run was accepted: %s", r.log);
	cr_assert(strstr(r.log, "route needs a run for a duration"), "%s", r.log);
	wu_free(&r);
}

static const char *const hist_args[] = { "--workload=kvs", "--keys=16", "--txn-keys=2-4",
					 "--update-pct=50", "--history=%DIR%/hist",
					 "--duration=1", "--warmup=0", NULL };

Test(lotus_checks, history_sr_and_si, .timeout = 2 * TIMEOUT_S)
{
	both(hist_args);
}

/*
 * The run with the bug fails its check. Which check sees it first depends on timing: two
 * writers that both stamp a cell can leave it INVISIBLE for good, which the store scan reports
 * as a record that stays locked before the history is read; otherwise the history shows the
 * lost update. Which one depends on the host's load, not on the code: on an idle 2-core host
 * the leaked lock came first in 4 runs of 4, with this test's code of an earlier version too,
 * while full-suite runs used to show the lost update. So either verdict counts; the history
 * checker's own lost-update detection is covered by workloads/history.
 *
 * The bug's window is the time from the early unlock to the stamp. Since unlocks of remote
 * locks go one way, nothing waits in between, and 1 s runs no longer showed it (1 run of 1
 * passed as serializable); with the waited unlock (lotus_unlock_waits) the window is a
 * round trip again, as it was when the test was written.
 */
Test(lotus_checks, history_catches_early_unlock, .timeout = TIMEOUT_S)
{
	char msg[512];

	cr_assert_not(run("sr", "lotus_early_unlock,lotus_unlock_waits", hist_args, msg,
			  sizeof(msg)), "%s", msg);
	cr_assert(strstr(msg, "lost update") || strstr(msg, "(a leaked lock)"), "%s", msg);
}

/*
 * The VT cache under writers of the other node: keys 0..15 spread over both nodes' shards, so
 * every node caches the images of its own keys and the other node's writers lock them
 * remotely. With lotus_vt_no_drop the owner keeps its image when it grants such a W lock: its
 * next local transaction reads the version before the remote commit and writes over it, a
 * lost update for the history checker (or a stale read it reports as not serializable).
 */
Test(lotus_checks, history_catches_vt_cache_kept_past_a_remote_writer, .timeout = 3 * TIMEOUT_S)
{
	char msg[512];
	bool caught = false;

	/* the stale read needs a remote commit between two local reads of one key: a loaded
	 * host once ran a whole second (9298 transactions) without one, so up to 3 runs */
	for (unsigned i = 0; i < 3 && !caught; i++)
		caught = !run("sr", "lotus_vt_no_drop", hist_args, msg, sizeof(msg));
	cr_assert(caught, "3 runs with lotus_vt_no_drop passed: %s", msg);
	cr_assert(strstr(msg, "lost update") || strstr(msg, "serializ"), "%s", msg);
}

/*
 * Resharding: compute node 0 made slow (REMORA_LOTUS_SLOW: 2 ms more per transaction) sits
 * far above the average latency, so every 3 intervals it hands its hottest shard to node 1.
 * Shards move during the run, node 1 reports the service gap of each, and the checks hold
 * across the moves: SmallBank's balance, and the history checker over 16 hot keys.
 */
static bool run_resharded(const char *const *wl_args, char *msg, size_t msglen)
{
	const char *base[] = { "--protocol=lotus", "--isolation=sr", "--threads=1", "--coros=4",
			       "--cn=2", "--cn-env=0:REMORA_LOTUS_SLOW=2000", NULL };

	return wu_check(base, wl_args, "sr resharded", NULL, TIMEOUT_S, msg, msglen);
}

Test(lotus_checks, reshard_moves_the_slow_nodes_shards, .timeout = 3 * TIMEOUT_S)
{
	const char *a[] = { "--protocol=lotus", "--threads=1", "--coros=4", "--cn=2",
			    "--cn-env=0:REMORA_LOTUS_SLOW=2000", "--workload=smallbank",
			    "--duration=3", "--warmup=0", NULL };
	const char *s[] = { "--workload=smallbank", "--accounts=2000", "--hot-accounts=16",
			    "--duration=2", "--warmup=0", NULL };
	const char *h[] = { "--workload=kvs", "--keys=16", "--txn-keys=2-4", "--update-pct=50",
			    "--history=%DIR%/hist", "--duration=2", "--warmup=0", NULL };
	struct wu_run r;
	bool moved = false;
	char msg[512];

	/* A second try when none moved: on a host loaded by parallel suites, cn 1 can be as slow
	 * as cn 0 for the whole run (its locks at cn 0 wait too), and then nothing triggers
	 * (one CI run of many). */
	for (unsigned t = 0; t < 2; t++) {
		wu_bench(&r, NULL, TIMEOUT_S, a);
		cr_assert_eq(r.status, 0, "%s", r.log);
		moved = strstr(r.log, "remora cn 1: lotus: shard ") &&
			strstr(r.log, "handed over by cn 0; service gap");
		if (moved)
			break;
		wu_free(&r);
	}
	cr_assert(moved, "no shard moved in 2 runs: %s", r.log);
	wu_free(&r);
	cr_expect(run_resharded(s, msg, sizeof(msg)), "%s", msg);
	cr_expect(run_resharded(h, msg, sizeof(msg)), "%s", msg);
}
