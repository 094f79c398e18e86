/* SPDX-License-Identifier: MIT */
/*
 * Conformance: atomics are atomic against each other across channels, threads and processes.
 * FAA increments and CAS-increment loops from several processes (each its own transport, one
 * channel per thread, all attached to the same pool) add up exactly; masked-CAS updates of
 * disjoint bit fields of one word never lose an update. The threads-only test is the one to run
 * under ThreadSanitizer.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "counting.h"
#include "tutil.h"

static struct tu_ctx mn;

TestSuite(concurrency, .fini = tu_fini, .timeout = TU_TIMEOUT);

#define K 40000u /* increments per thread and kind: long enough to overlap on a busy host */

/* Runs nthreads workers on tp, fields first_field.. ; returns 0 or prints the first failure. */
static int run_threads(struct remora_transport *tp, unsigned nthreads, unsigned first_field,
		       bool mcas)
{
	pthread_t th[CW_FIELDS];
	struct cw_worker w[CW_FIELDS];
	struct remora_counters k;
	int bad = 0;

	for (unsigned i = 0; i < nthreads; i++) {
		w[i] = (struct cw_worker){ .tp = tp, .key = mn.mn[0].key, .field = first_field + i,
					   .k = K, .mcas = mcas };
		if (pthread_create(&th[i], NULL, cw_worker_main, &w[i]))
			return 1;
	}
	for (unsigned i = 0; i < nthreads; i++) {
		pthread_join(th[i], NULL);
		if (w[i].file) {
			tu_child_fail(w[i].file, w[i].line, "worker", "thread %u: %s", i, w[i].why);
			bad = 1;
		}
	}
	/* Counters are exact: every thread's FAAs on this node, closed channels included. */
	remora_transport_counters(tp, &k);
	if (!bad && k.verbs[0][REMORA_OP_FAA] != nthreads * cw_faa_verbs(K)) {
		tu_child_fail(__FILE__, __LINE__, "counters", "%llu FAA counted, want %llu",
			      (unsigned long long)k.verbs[0][REMORA_OP_FAA],
			      (unsigned long long)(nthreads * cw_faa_verbs(K)));
		bad = 1;
	}
	return bad;
}

struct proc_arg {
	int cn;
	unsigned threads;
	unsigned first_field;
	bool mcas;
};

static int proc_main(void *argp, int rd, int wr)
{
	struct proc_arg *a = argp;
	struct remora_transport *tp;
	int rc;

	rc = tu_transport_try(a->cn, NULL, &tp);
	TU_CHILD_CHECK(rc == 0, "cn %d transport_open = %d (%s)", a->cn, rc, remora_strerror(rc));
	rc = remora_transport_attach(tp, &mn.mn[0].desc);
	TU_CHILD_CHECK(rc == 0, "cn %d attach = %d (%s)", a->cn, rc, remora_strerror(rc));
	TU_CHILD_CHECK(tu_child_ready(rd, wr) == 0, "no start signal");
	rc = run_threads(tp, a->threads, a->first_field, a->mcas);
	remora_transport_close(tp);
	return rc;
}

static bool have_mcas(void)
{
	struct remora_caps caps;

	tu_caps(mn.tp, &caps);
	return caps.ops & (1u << REMORA_OP_MCAS);
}

static void check_totals(unsigned workers, bool mcas)
{
	char why[160];

	cr_assert_eq(cw_check(mn.mn[0].base, workers, K, mcas, why, sizeof(why)), 0, "%s", why);
}

static void processes_and_threads(void)
{
	enum { NP = 4, NT = 2 };
	struct proc_arg a[NP];
	unsigned which;
	bool mcas;
	int rc;

	tu_open_pools(&mn, -1, 1, TU_POOL_BYTES);
	mcas = have_mcas();
	memset(mn.mn[0].base, 0, CW_BYTES);
	for (int i = 0; i < NP; i++)
		a[i] = (struct proc_arg){ .cn = 1 + i, .threads = NT, .first_field = NT * i,
					  .mcas = mcas };
	rc = tu_run_together(proc_main, a, sizeof(a[0]), NP, &which);
	cr_assert_eq(rc, 0, "process %u failed (exit %d, its line is above)", which, rc);
	check_totals(NP * NT, mcas);
}

Test(concurrency, processes_and_threads_add_up)
{
	processes_and_threads();
}

/* atomics=arbiter: every atomic of a node under one lock word, from every process. */
Test(concurrency, arbiter_mode_processes_add_up)
{
	tu_atomics_mode("arbiter");
	processes_and_threads();
}

/* One process, several threads, each its own channel: the case ThreadSanitizer can see. */
Test(concurrency, threads_add_up)
{
	struct remora_transport *tp;
	struct remora_node_desc desc;
	bool mcas;
	int rc;

	tu_open_pools(&mn, 0, 1, TU_POOL_BYTES);
	mcas = have_mcas();
	memset(mn.mn[0].base, 0, CW_BYTES);
	tp = mn.tp;
	desc = mn.mn[0].desc;
	rc = remora_transport_attach(tp, &desc);
	cr_assert_eq(rc, 0, "attach = %d (%s)", rc, remora_strerror(rc));
	rc = run_threads(tp, 4, 0, mcas);
	cr_assert_eq(rc, 0, "a worker thread failed (its line is above)");
	check_totals(4, mcas);
}
