// SPDX-License-Identifier: MIT
/*
 * The unsafe no_lock_cas switch (REMORA_MUTATE, docs/engine.md) is the analogue of LOTUS's
 * figures 2-3, FORD/Motor with their lock CAS removed: what the baseline would reach if
 * memory-node atomics cost nothing (docs/bench.md, "The knee"). It must remove exactly the
 * lock CAS: a counted SmallBank run on FORD then issues no CAS at all, the same run without
 * it does, and the transactions still commit; the result is labelled with the mutation.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "wutil.h"

#define TIMEOUT_S 120

static void run(const char *mutate, struct wu_run *r)
{
	static const char *const args[] = {
	    "--workload=smallbank", "--protocol=ford", "--accounts=1000",
	    "--txns=100",	    "--coros=1",       NULL};

	wu_bench(r, mutate, TIMEOUT_S, args);
	cr_assert_not_null(r->summary, "no summary (exit %d)\n%s", r->status, r->log);
	cr_assert_eq(r->status, 0, "exit %d\n%s", r->status, r->log);
}

Test(no_lock_cas, ford_smallbank_sends_no_cas_only_with_the_switch, .timeout = 3 * TIMEOUT_S)
{
	struct wu_run r;

	run(NULL, &r);
	cr_assert_gt(wu_num(&r, "verbs_total.cas"), 0, "FORD's SmallBank sent no lock CAS");
	cr_assert_str_eq(wu_str(&r, "mutate"), "", "an unmutated run is labelled");
	wu_free(&r);
	run("no_lock_cas", &r);
	cr_assert_eq(wu_num(&r, "verbs_total.cas"), 0, "%.0f CAS with no_lock_cas",
		     wu_num(&r, "verbs_total.cas"));
	cr_assert_eq(wu_num(&r, "verbs_total.mcas") + wu_num(&r, "verbs_total.faa"), 0);
	cr_assert_gt(wu_num(&r, "committed"), 0);
	cr_assert_str_eq(wu_str(&r, "mutate"), "no_lock_cas");
	wu_free(&r);
}
