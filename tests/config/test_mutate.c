/* SPDX-License-Identifier: MIT */
/*
 * The one mutation table (runtime/mutate): names are unique, every layer takes only its own,
 * and the environment reaches only the txn and cluster layers. The layers' own setters are
 * exercised by their suites (test_bounds, test_rpc, test_pmem_durable, test_ctl).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <remora/error.h>

#include "mutate/mutate.h"

Test(mutate, names_are_unique_and_described)
{
	for (unsigned i = 0; i < MUT__COUNT; i++) {
		const struct mut_def *a = mut_def((enum mut_id)i);

		cr_assert(a && a->name && a->name[0] && a->what && a->what[0], "entry %u", i);
		cr_assert_str_neq(a->name, "none", "'none' is reserved for clearing");
		for (unsigned j = i + 1; j < MUT__COUNT; j++)
			cr_assert_str_neq(a->name, mut_def((enum mut_id)j)->name, "twice: %s",
					  a->name);
	}
	cr_assert_null(mut_def(MUT__COUNT));
}

Test(mutate, set_takes_only_its_layer)
{
	uint64_t m = 0;

	cr_assert_eq(mut_set(&m, MUT_TXN, "early_unlock"), 0);
	cr_assert(mut_on(m, MUT_EARLY_UNLOCK));
	cr_assert_eq(mut_set(&m, MUT_RPC, "early_unlock"), -EINVAL, "a txn name set on rpc");
	cr_assert_eq(mut_set(&m, MUT_TXN, "no_such_bug"), -EINVAL);
	cr_assert_eq(mut_set(&m, MUT_TXN, "none"), 0);
	cr_assert_eq(m, 0, "none clears");
}

Test(mutate, parse_routes_names_to_layers)
{
	uint64_t txn, cl;
	char err[512] = "";

	cr_assert_eq(mut_parse("covert_locks,skip_auth", MUT_TXN, &txn, err, sizeof(err)), 0,
		     "%s", err);
	cr_assert_eq(mut_parse("covert_locks,skip_auth", MUT_CLUSTER, &cl, err, sizeof(err)), 0);
	cr_assert_eq(txn, UINT64_C(1) << mut_bit(MUT_COVERT_LOCKS), "txn takes its own name only");
	cr_assert_eq(cl, UINT64_C(1) << mut_bit(MUT_SKIP_AUTH), "cluster takes its own name only");
	cr_assert_eq(mut_parse("", MUT_TXN, &txn, err, sizeof(err)), 0);
	cr_assert_eq(txn, 0);
	cr_assert_eq(mut_parse(NULL, MUT_TXN, &txn, err, sizeof(err)), 0);
}

Test(mutate, environment_cannot_reach_api_layers)
{
	uint64_t m;
	char err[512] = "";

	cr_assert_eq(mut_parse("skip_bounds_check", MUT_TXN, &m, err, sizeof(err)),
		     -REMORA_ECONFIG);
	cr_assert(strstr(err, "'skip_bounds_check' is a transport switch"), "%s", err);
	cr_assert_eq(mut_parse("covert_lock", MUT_TXN, &m, err, sizeof(err)), -REMORA_ECONFIG);
	cr_assert(strstr(err, "unknown mutation 'covert_lock' (`remora info --mutations`"), "%s",
		  err);
}

Test(mutate, names_round_trip)
{
	char buf[128];

	mut_names(MUT_CLUSTER, (UINT64_C(1) << mut_bit(MUT_NO_EVICT)) |
			(UINT64_C(1) << mut_bit(MUT_SKIP_AUTH)), buf,
		  sizeof(buf));
	cr_assert_str_eq(buf, "skip_auth,no_evict");
	mut_names(MUT_CLUSTER, 0, buf, sizeof(buf));
	cr_assert_str_eq(buf, "");
}

/*
 * Each layer has its own 64 bits: every switch sets one bit below 64 that no other switch of
 * its layer reads, however many switches the whole table holds.
 */
Test(mutate, each_layer_owns_its_bits)
{
	for (unsigned i = 0; i < MUT__COUNT; i++) {
		const struct mut_def *d = mut_def((enum mut_id)i);
		uint64_t m = 0;

		cr_assert_eq(mut_set(&m, d->layer, d->name), 0, "%s", d->name);
		cr_assert_lt(mut_bit((enum mut_id)i), 64, "%s", d->name);
		cr_assert_eq(__builtin_popcountll(m), 1, "%s", d->name);
		for (unsigned j = 0; j < MUT__COUNT; j++)
			if (mut_def((enum mut_id)j)->layer == d->layer)
				cr_assert_eq(mut_on(m, (enum mut_id)j), i == j, "%s reads %s's bit",
					     mut_def((enum mut_id)j)->name, d->name);
	}
}
