// SPDX-License-Identifier: MIT
/*
 * The workloads on crest and on its record-level baseline crest_record, on two compute nodes
 * under high contention, with --check: SmallBank's total, TPC-C conditions 1-4, YCSB with four
 * cells of 40 B (integrity), and the kvs history checker (serializability). The negative
 * controls of crest's checks are in tests/txn/test_crest.c: each mutation there is caught by a
 * deterministic interleaving (the kvs history did not catch crest_lock_bits_only within a
 * 2-second run: its stale-read window is one commit long).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "wutil.h"

#define TIMEOUT_S 90

static const char *const protos[] = { "--protocol=crest", "--protocol=crest_record" };

/*
 * Runs one workload with --check; returns the check's result. profile: NULL for none, where
 * every verb completes as it is posted and a coordinator gives its turn only every few verbs
 * (inline_yield); under a cost profile the coordinators of a worker overlap at every verb,
 * and crest's localized execution (shared holds, uncommitted local versions, dependencies,
 * write-backs by the last writer) is at work.
 */
static bool run(const char *proto, const char *profile, const char *mutate,
		const char *const *wl_args, char *msg, size_t msglen)
{
	const char *base[] = { proto, "--cn=2", "--threads=2", "--coros=4", profile, NULL };

	return wu_check(base, wl_args, proto, mutate, TIMEOUT_S, msg, msglen);
}

static bool run_plain(const char *proto, const char *mutate, const char *const *wl_args,
		      char *msg, size_t msglen)
{
	return run(proto, NULL, mutate, wl_args, msg, msglen);
}

/* crest and crest_record without a profile, and crest under cx5 (localized execution). */
static void both(const char *const *wl_args)
{
	char msg[512];

	for (unsigned i = 0; i < 2; i++)
		cr_expect(run_plain(protos[i], NULL, wl_args, msg, sizeof(msg)), "%s", msg);
	cr_expect(run(protos[0], "--profile=cx5", NULL, wl_args, msg, sizeof(msg)), "cx5: %s",
		  msg);
}

Test(crest_checks, smallbank, .timeout = 2 * TIMEOUT_S)
{
	const char *a[] = { "--workload=smallbank", "--accounts=2000", "--hot-accounts=16",
			    "--duration=1", "--warmup=0", NULL };
	both(a);
}

Test(crest_checks, ycsb_cells, .timeout = 2 * TIMEOUT_S)
{
	const char *y[] = { "--workload=ycsb", "--records=1000", "--value-size=160", "--cells=4",
			    "--ops-per-txn=4", "--theta=0.99", "--duration=1", "--warmup=0", NULL };
	both(y);
}

Test(crest_checks, tpcc, .timeout = 2 * TIMEOUT_S)
{
	/* counted: 16 coordinators x 1000, inside the default room (test_oltp_run.c says why) */
	const char *c[] = { "--workload=tpcc", "--warehouses=1", "--pool-size=256M",
			    "--txns=1000", NULL };
	both(c);
}

static const char *const hist_args[] = { "--workload=kvs", "--keys=16", "--txn-keys=2-4",
					 "--update-pct=50", "--history=%DIR%/hist",
					 "--duration=1", "--warmup=0", NULL };

Test(crest_checks, history, .timeout = 2 * TIMEOUT_S)
{
	both(hist_args);
}

/*
 * The negative control of the node's shared cache: crest_trust_applying validates a read cell
 * against the node's hold while that hold's write-back, unlock included, is already out. The
 * other node locks and writes the cell in that window, and the reader commits a stale read
 * (up to 3 runs: the window is a race between the two workers of a node).
 */
Test(crest_checks, history_catches_trust_applying, .timeout = 2 * TIMEOUT_S)
{
	char msg[512] = "";
	bool caught = false;

	for (unsigned t = 0; t < 3 && !caught; t++)
		caught = !run(protos[0], NULL, "crest_trust_applying", hist_args, msg, sizeof(msg));
	cr_assert(caught, "3 runs with crest_trust_applying passed: %s", msg);
	cr_assert(strstr(msg, "serializ"), "%s", msg);
}

/*
 * The history checker over YCSB's cells (one cell per record and transaction, history key =
 * key x 4 + cell), on 64 hot records of 4 cells: crest, crest_record and crest under cx5
 * commit serializable histories. The negative control: crest_unlock_first (the unlock lands
 * before the cell WRITEs) lets a writer read a cell whose new value is not there yet, and the
 * checker reports the lost update (up to 3 runs: the window is a race).
 */
static const char *const ycsb_hist_args[] = {
	"--workload=ycsb", "--records=64",	 "--value-size=160",	  "--cells=4",
	"--ops-per-txn=4", "--theta=0.99",	 "--history=%DIR%/hist", "--duration=1",
	"--warmup=0",	   NULL
};

Test(crest_checks, ycsb_cell_history, .timeout = 2 * TIMEOUT_S)
{
	both(ycsb_hist_args);
}

Test(crest_checks, ycsb_cell_history_catches_unlock_first, .timeout = 2 * TIMEOUT_S)
{
	char msg[512] = "";
	bool caught = false;

	for (unsigned t = 0; t < 3 && !caught; t++)
		caught = !run(protos[0], "--profile=cx5", "crest_unlock_first", ycsb_hist_args, msg,
			      sizeof(msg));
	cr_assert(caught, "3 runs with crest_unlock_first passed: %s", msg);
	cr_assert(strstr(msg, "lost update") || strstr(msg, "serializ"), "%s", msg);
}
