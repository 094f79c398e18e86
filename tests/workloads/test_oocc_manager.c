// SPDX-License-Identifier: MIT
/*
 * OOCC's lease manager over several compute nodes (docs/oocc.md, "The lease manager across
 * compute nodes"): compute node 0 changes every node's lease word by messages.
 *
 * Two compute-node processes start from a lease of 1 ns (rv 0: every read-only transaction
 * validates, 2 READs per record) and run read-only YCSB. The manager raises the lease within
 * the warm-up, on both nodes, so the measured second reads each record once: about 2.0 READs
 * per 2-record transaction. The negative control oocc_manager_local changes node 0's word
 * only; node 1 keeps validating and the run averages 2.7-3.0. The history check then shows
 * that the changes keep kvs serializable across the two nodes.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "wutil.h"

#define TIMEOUT_S 120
#define READS_CONVERGED 2.4 /* READs per 2-record transaction: 2 plus address-cache misses */

static double reads_per_txn(const char *mutate)
{
	static const char *const args[] = {
		"--workload=ycsb", "--mix=C", "--value-size=16", "--ops-per-txn=2",
		"--protocol=oocc", "--cn=2", "--threads=1", "--coros=4", "--duration=1",
		"--warmup=2", NULL };
	struct wu_run r;
	double reads;

	setenv("REMORA_OOCC", "lease=1ns,manager=1", 1);
	wu_bench(&r, mutate, TIMEOUT_S, args);
	unsetenv("REMORA_OOCC");
	cr_assert_not_null(r.summary, "no summary (exit %d)\n%s", r.status, r.log);
	cr_assert_eq(r.status, 0, "exit %d\n%s", r.status, r.log);
	cr_assert_eq(wu_num(&r, "cn_reported"), 2, "%s", r.log);
	cr_assert_gt(wu_num(&r, "committed"), 0);
	reads = wu_num(&r, "verbs_per_txn.read");
	if (!mutate && reads >= READS_CONVERGED)
		fprintf(stderr, "the run's output:\n%s\n", r.log);
	wu_free(&r);
	return reads;
}

Test(oocc_manager, every_node_takes_the_lease, .timeout = 3 * TIMEOUT_S)
{
	double reads = reads_per_txn(NULL);

	cr_assert_lt(reads, READS_CONVERGED, "%.2f READs per transaction: a node still validates",
		     reads);
}

/*
 * The mean is over both nodes' commits: when a loaded host starves node 1 (the one that keeps
 * validating), node 0's commits dominate it (a CI run under load measured 2.07). So up to 3
 * runs, one of which must show node 1 validating.
 */
Test(oocc_manager, every_node_takes_the_lease_mutated, .timeout = 9 * TIMEOUT_S)
{
	double reads = 0;

	for (unsigned i = 0; i < 3 && reads <= READS_CONVERGED; i++)
		reads = reads_per_txn("oocc_manager_local");
	cr_assert_gt(reads, READS_CONVERGED,
		     "%.2f READs per transaction with node 1's word left alone (3 runs)", reads);
}

Test(oocc_manager, history_serializable_while_the_lease_moves, .timeout = 3 * TIMEOUT_S)
{
	static const char *const args[] = {
		"--workload=kvs", "--protocol=oocc", "--keys=16", "--txn-keys=2-4",
		"--update-pct=50", "--dist=uniform", "--fetch=each", "--history=%DIR%/hist",
		"--cn=2", "--threads=2", "--coros=4", "--duration=2", "--warmup=0", "--check",
		NULL };
	struct wu_run r;

	setenv("REMORA_OOCC", "lease=1ns,manager=1", 1);
	wu_bench(&r, NULL, TIMEOUT_S, args);
	unsetenv("REMORA_OOCC");
	cr_assert_not_null(r.summary, "no summary (exit %d)\n%s", r.status, r.log);
	cr_assert(wu_bool(&r, "check.ok"), "%s\n%s", wu_str(&r, "check.message"), r.log);
	cr_assert_eq(r.status, 0, "exit %d\n%s", r.status, r.log);
	cr_assert_gt(wu_num(&r, "committed"), 0);
	wu_free(&r);
}
