/* SPDX-License-Identifier: MIT */
/*
 * The lock service's ThreadSanitizer target (criterion cannot run under TSan, see
 * tests/README.md): `remora lockbench`'s in-process cluster -- 3 compute-node threads, each
 * with its own transport, RPC layer and lock service, 6 coroutine clients each -- on 4 hot
 * locks, random S/X mix, random delays before every entry WRITE, every acquisition fed to the
 * checker of S/X exclusion and grant order. Pass: no violation, no failed acquisition, every
 * acquisition done.
 *
 * Usage: stress_lock <lock type> | stress_lock <lock mutation>   (exit 0 pass, 1 fail)
 * With a mutation (the negative control, on declock) it passes only when the checker catches
 * the bug.
 */
#include <stdio.h>
#include <string.h>

#include "apps/cli/lockbench.h"
#include "mutate/mutate.h"

int main(int argc, char **argv)
{
	struct lb_result r;
	struct lb_opts o;
	uint64_t m = 0;
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: stress_lock <lock type> | <lock mutation>\n");
		return 2;
	}
	lb_defaults(&o);
	o.lock = argv[1];
	if (mut_set(&m, MUT_LOCK, argv[1]) == 0) {
		o.lock = "declock";
		o.mutate = m;
		o.timeout_ms = 100;
	} else {
		o.timeout_ms = 3000;
	}
	o.cns = 3;
	o.coros = 6;
	o.locks = 4;
	o.duration = 0;
	o.ops = 100;
	o.cap_log2 = 5; /* C = 32 >= 18 clients: no overflow */
	o.entry_delay_us = 30;
	o.check = true;
	rc = lb_run(&o, &r);
	if (rc) {
		fprintf(stderr, "stress_lock %s: lockbench failed (%d)\n", argv[1], rc);
		return 1;
	}
	if (m) {
		printf("stress_lock %s: %lu violations (%s)\n", argv[1],
		       (unsigned long)r.violations, r.violation);
		return r.violations > 0 ? 0 : 1;
	}
	printf("stress_lock %s: %lu acquisitions, %lu violations, %lu failed\n", argv[1],
	       (unsigned long)r.ops, (unsigned long)r.violations, (unsigned long)r.errors);
	if (r.violations || r.errors || r.ops != (uint64_t)o.cns * o.coros * o.ops) {
		fprintf(stderr, "stress_lock %s: %s\n", argv[1], r.violation);
		return 1;
	}
	return 0;
}
