/* SPDX-License-Identifier: MIT */
/*
 * `remora lockbench`'s engine (the command is cmd_lockbench.c): DecLock's microbenchmark on a
 * private in-process cluster. Compute nodes are threads with a transport, an RPC layer and a
 * lock service each; their coroutines are the clients. One memory-node pool holds the lock
 * table and one 8 B object per lock. With check, every acquisition is fed to a checker of S/X
 * mutual exclusion and of grant order against FAA order. Prefix lb_.
 */
#ifndef REMORA_APPS_LOCKBENCH_H
#define REMORA_APPS_LOCKBENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "lock/lock.h"

struct lb_opts {
	const char *backend, *profile;
	uint64_t mn_scale;       /* divide the profile's memory-node service rates by this (0: 1) */
	const char *lock;        /* declock, declock-tf, declock-pf, caslock, dslr */
	unsigned cns, coros;     /* clients = cns x coros */
	unsigned locks;
	double theta;
	unsigned read_pct;
	unsigned cs;             /* memory-node verbs in each critical section */
	double duration;         /* seconds; 0: ops per client instead */
	uint64_t ops;            /* acquisitions per client when duration is 0 */
	unsigned cap_log2, ver_bits, timeout_ms, entry_delay_us;
	bool cap_set;
	uint64_t mutate;         /* switches of layer lock */
	bool check;
	bool ride;               /* an S critical section's first READ rides on the acquisition */
	uint64_t seed;
	int kill_cn;             /* a compute node that dies (frozen, marked down), or -1 */
	double kill_at;          /* seconds into the run */
};

struct lb_result {
	double secs;
	uint64_t ops, errors, cs_ops;
	uint64_t rides, rides_valid; /* ride: acquisitions that posted the READ, and saw the grant */
	uint64_t ops_after_kill; /* acquisitions of the live nodes granted after the kill */
	double rate_before_kill; /* acquisitions/s of all nodes from the start to the kill */
	double rate_late;        /* acquisitions/s of the live nodes in the second half of the
				  * time from the kill to the stop (recovered, or not) */
	uint64_t ops_least_node; /* acquisitions of the compute node that made the fewest */
	unsigned stuck;          /* live compute nodes whose clients still waited LB_GRACE after
				  * the stop (a hang: their lock services were shut down then) */
	int first_err;           /* the first failed acquisition's code */
	uint64_t p50_ns, p99_ns, p999_ns;
	struct lock_stats st;
	uint64_t chan_verbs;     /* verbs the channels counted (every one the benchmark posted) */
	double mn_util;          /* the cost model's memory-node busy time over the model's time
				  * (-1: no cost profile) */
	uint64_t violations;
	uint64_t excl_violations; /* of which S/X exclusion (the rest: grant order) */
	char violation[200];     /* the first */
};

/* How long after the stop live compute nodes may take to finish: max(5 s, 40 timeouts). */
#define LB_GRACE_MIN_NS 5000000000ull
#define LB_GRACE_TIMEOUTS 40u

/* Fills every field with the command's defaults. */
void lb_defaults(struct lb_opts *o);
/* Runs it. 0, or a negative code after printing one line to stderr. */
int lb_run(const struct lb_opts *o, struct lb_result *r);

#endif
