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

#include "tutil.h"

static struct tu_ctx mn;

TestSuite(concurrency, .fini = tu_fini, .timeout = TU_TIMEOUT);

#define FAA_OFF 0u   /* FAA only */
#define CAS_OFF 64u  /* CAS-increment loops only */
#define MIX_OFF 128u /* FAA and CAS loops on one word */
#define FLD_OFF 192u /* 8 fields of 8 bits, one per (process, thread) */
#define K 40000u     /* increments per thread and kind: long enough to overlap on a busy host */
#define KF 200u      /* field increments per thread (< 256) */

struct worker {
	struct remora_transport *tp;
	const struct remora_node_desc *desc;
	uint32_t key;
	unsigned field; /* 0..7 */
	bool mcas;
	int err;        /* 0, or the line of the first failed check */
	char why[160];
};

#define WCHECK(w, cond, ...)                                                                       \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			(w)->err = __LINE__;                                                       \
			snprintf((w)->why, sizeof((w)->why), __VA_ARGS__);                         \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

static remora_gaddr ga(uint64_t off)
{
	return remora_gaddr_make(0, off);
}

/* CAS-increment: read with a CAS that cannot succeed, then CAS cur -> cur + 1 until it sticks. */
static int cas_increment(struct remora_chan *ch, uint64_t off, uint32_t key, uint64_t *cur)
{
	for (;;) {
		uint64_t old = 0;
		int rc = remora_cas(ch, ga(off), key, *cur, *cur + 1, &old);

		if (rc)
			return rc;
		if (old == *cur) {
			*cur = old + 1;
			return 0;
		}
		*cur = old;
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct remora_chan *ch = NULL;
	uint64_t cur = 0, mix = 0, shift = 8ull * w->field, fmask = 0xffull << (8 * w->field);
	int rc;

	rc = remora_chan_open(w->tp, &ch);
	WCHECK(w, rc == 0, "chan_open = %d", rc);
	for (unsigned i = 0; i < K; i++) {
		rc = remora_faa(ch, ga(FAA_OFF), w->key, 1, NULL);
		WCHECK(w, rc == 0, "FAA = %d (%s)", rc, remora_strerror(rc));
		rc = cas_increment(ch, CAS_OFF, w->key, &cur);
		WCHECK(w, rc == 0, "CAS = %d (%s)", rc, remora_strerror(rc));
		if (i % 2)
			rc = remora_faa(ch, ga(MIX_OFF), w->key, 1, NULL);
		else
			rc = cas_increment(ch, MIX_OFF, w->key, &mix);
		WCHECK(w, rc == 0, "mixed = %d (%s)", rc, remora_strerror(rc));
	}
	for (uint64_t v = 0; w->mcas && v < KF; v++) {
		uint64_t old = 0;

		/* Only this worker writes its field, so the masked compare must always match. */
		rc = remora_mcas(ch, ga(FLD_OFF), w->key, v << shift, fmask, (v + 1) << shift, fmask,
				 &old);
		WCHECK(w, rc == 0, "MCAS = %d (%s)", rc, remora_strerror(rc));
		WCHECK(w, ((old & fmask) >> shift) == v,
		       "field %u: MCAS saw %llu, expected %llu (an update was lost)", w->field,
		       (unsigned long long)((old & fmask) >> shift), (unsigned long long)v);
	}
out:
	remora_chan_close(ch);
	return NULL;
}

/* Runs nthreads workers on tp, fields first_field.. ; returns 0 or prints the first failure. */
static int run_threads(struct remora_transport *tp, unsigned nthreads, unsigned first_field,
		       bool mcas)
{
	pthread_t th[8];
	struct worker w[8];
	struct remora_counters k;
	int bad = 0;

	for (unsigned i = 0; i < nthreads; i++) {
		w[i] = (struct worker){ .tp = tp, .key = mn.mn[0].key, .field = first_field + i,
					.mcas = mcas };
		if (pthread_create(&th[i], NULL, worker_main, &w[i]))
			return 1;
	}
	for (unsigned i = 0; i < nthreads; i++) {
		pthread_join(th[i], NULL);
		if (w[i].err) {
			tu_child_fail(__FILE__, w[i].err, "worker", "thread %u: %s", i, w[i].why);
			bad = 1;
		}
	}
	/* Counters are exact: every thread's FAAs on this node, closed channels included. */
	remora_transport_counters(tp, &k);
	if (!bad && k.verbs[0][REMORA_OP_FAA] != (uint64_t)nthreads * (K + K / 2)) {
		tu_child_fail(__FILE__, __LINE__, "counters", "%llu FAA counted, want %llu",
			      (unsigned long long)k.verbs[0][REMORA_OP_FAA],
			      (unsigned long long)nthreads * (K + K / 2));
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
	uint64_t go;
	int rc;

	rc = tu_transport_try(a->cn, NULL, &tp);
	TU_CHILD_CHECK(rc == 0, "cn %d transport_open = %d (%s)", a->cn, rc, remora_strerror(rc));
	rc = remora_transport_attach(tp, &mn.mn[0].desc);
	TU_CHILD_CHECK(rc == 0, "cn %d attach = %d (%s)", a->cn, rc, remora_strerror(rc));
	tu_send(wr, 1);
	TU_CHILD_CHECK(tu_recv(rd, &go) == 0, "no start signal");
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

static uint64_t word(uint64_t off)
{
	uint64_t v;

	memcpy(&v, mn.mn[0].base + off, 8);
	return v;
}

static void check_totals(unsigned workers, bool mcas)
{
	uint64_t want = (uint64_t)workers * K;

	cr_assert_eq(word(FAA_OFF), want, "FAA total %llu, want %llu",
		     (unsigned long long)word(FAA_OFF), (unsigned long long)want);
	cr_assert_eq(word(CAS_OFF), want, "CAS-loop total %llu, want %llu",
		     (unsigned long long)word(CAS_OFF), (unsigned long long)want);
	cr_assert_eq(word(MIX_OFF), want, "FAA+CAS on one word: total %llu, want %llu",
		     (unsigned long long)word(MIX_OFF), (unsigned long long)want);
	for (unsigned f = 0; mcas && f < 8; f++) {
		uint64_t v = (word(FLD_OFF) >> (8 * f)) & 0xff;

		cr_assert_eq(v, f < workers ? KF : 0, "bit field %u holds %llu, want %u", f,
			     (unsigned long long)v, f < workers ? KF : 0);
	}
}

static void processes_and_threads(void)
{
	enum { NP = 4, NT = 2 };
	struct proc_arg a[NP];
	struct tu_proc p[NP];
	unsigned which;
	uint64_t ready;
	bool mcas;
	int rc;

	tu_open_pools(&mn, -1, 1, TU_POOL_BYTES);
	mcas = have_mcas();
	memset(mn.mn[0].base, 0, 4096);
	for (int i = 0; i < NP; i++) {
		a[i] = (struct proc_arg){ .cn = 1 + i, .threads = NT, .first_field = NT * i,
					  .mcas = mcas };
		tu_spawn(&p[i], proc_main, &a[i]);
	}
	for (int i = 0; i < NP; i++)
		cr_assert_eq(tu_recv(p[i].rd, &ready), 0, "process %d did not attach", i);
	for (int i = 0; i < NP; i++)
		tu_send(p[i].wr, 1); /* start together, to collide */
	rc = tu_proc_wait_all(p, NP, &which);
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
	struct remora_transport *probe;
	int rc;

	setenv("REMORA_ATOMICS", "arbiter", 1);
	rc = tu_transport_try(-1, NULL, &probe);
	if (rc == -REMORA_ECONFIG || rc == -EOPNOTSUPP)
		tu_skip("backend %s has no atomics mode arbiter", tu_backend());
	cr_assert_eq(rc, 0);
	remora_transport_close(probe);
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
	memset(mn.mn[0].base, 0, 4096);
	tp = mn.tp;
	desc = mn.mn[0].desc;
	rc = remora_transport_attach(tp, &desc);
	cr_assert_eq(rc, 0, "attach = %d (%s)", rc, remora_strerror(rc));
	rc = run_threads(tp, 4, 0, mcas);
	cr_assert_eq(rc, 0, "a worker thread failed (its line is above)");
	check_totals(4, mcas);
}
