/* SPDX-License-Identifier: MIT */
/*
 * Conformance: atomics are atomic against each other across channels, threads and processes.
 * FAA increments and CAS-increment loops from several processes (each its own transport, one
 * channel per thread, all attached to the same pool) add up exactly; masked-CAS updates of
 * disjoint bit fields of one word never lose an update. The threads-only test is the one to run
 * under ThreadSanitizer. Lock words used as the engine uses them (lock_words_*): a CAS from 0 to
 * the caller's unique value that reports the word taken never leaves that value there, and an
 * unlock posted without waiting, behind which the next CAS goes, always lands. The unlock is
 * the engine's (txb_unlock): a WRITE of 0 where atomics are atomic against WRITEs, else a CAS
 * from the holder's value. On soft-RoCE (6.1) the WRITE unlock fails this test in every run:
 * a failed CAS of another QP writes the locked word back over it (docs/rdma.md).
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

/* ---- lock words, the engine's way ---------------------------------------------------------- */

#define LW_WORDS 4u
#define LW_OFF 4096u  /* past the counting words */
#define LW_ROUNDS 20000u

/* The checker's own negative controls: one thread plays a lost unlock or a lost CAS result. */
enum lw_fault { LW_NONE, LW_DROP_UNLOCK, LW_HIDE_WIN };

struct lw_arg {
	int cn;
	unsigned threads;
	enum lw_fault fault;
};

struct lw_thread {
	struct remora_transport *tp;
	uint32_t key;
	uint64_t id; /* high bits of every value this thread CASes in (never 0) */
	enum lw_fault fault; /* played once, at round 1000 */
	uint8_t won[LW_ROUNDS / 8 + 1]; /* rounds whose CAS reported the word won */
	uint64_t *behind;  /* per won round: the word as a READ behind its unlock saw it */
	bool unlock_cas;   /* the transport's atomics are not atomic against WRITEs */
	const char *why;
	uint64_t word, seen;
};

static remora_gaddr lw_addr(unsigned w)
{
	return remora_gaddr_make(0, LW_OFF + 64u * w);
}

/*
 * One round: CAS(0 -> mine) and a READ of another word in one doorbell, as a lock-and-read;
 * won: the unlock and a READ behind it go without waiting (completions collected as later
 * rounds poll); lost: a READ of the word must not show mine (only a CAS of ours puts it there).
 */
static int lw_round(struct lw_thread *t, struct remora_chan *ch, struct remora_waiter *unl,
		    uint64_t mine, unsigned w)
{
	static const uint64_t zero;
	uint64_t old = ~UINT64_C(0), other = 0, now = 0;
	struct remora_wr v[2] = {
		{ .raddr = lw_addr(w), .rkey = t->key, .op = REMORA_OP_CAS, .compare = 0,
		  .swap = mine, .local = &old },
		{ .raddr = lw_addr((w + 1) % LW_WORDS), .rkey = t->key, .op = REMORA_OP_READ,
		  .len = 8, .local = &other },
	};
	uint64_t r = mine & 0xffffffffu;
	struct remora_wr u[2] = {
		{ .raddr = lw_addr(w), .rkey = t->key,
		  .op = t->unlock_cas ? REMORA_OP_CAS : REMORA_OP_WRITE, .len = t->unlock_cas ? 0 : 8,
		  .local = t->unlock_cas ? NULL : (void *)&zero, .compare = mine, .swap = 0,
		  .wr_id = (uintptr_t)unl },
		{ .raddr = lw_addr(w), .rkey = t->key, .op = REMORA_OP_READ, .len = 8,
		  .local = &t->behind[r], .wr_id = (uintptr_t)unl },
	};
	int rc = remora_exec(ch, v, 2);

	if (rc)
		return rc;
	if (old == 0)
		t->won[r / 8] |= (uint8_t)(1u << (r & 7));
	if (old == 0 && t->fault && r >= 1000) {
		enum lw_fault f = t->fault;

		t->fault = LW_NONE;
		if (f == LW_DROP_UNLOCK)
			return 0;
		old = mine; /* LW_HIDE_WIN: told the word was taken, by ourselves */
	}
	if (old == 0) {
		/* The READ behind the unlock (same connection, in order) tells, for a word left
		 * held, an unlock that did not land from a CAS that took the word again later
		 * (behind[] starts all ones: "no unlock was posted"). */
		while ((rc = remora_post(ch, u, 2)) == -EAGAIN)
			remora_chan_progress(ch);
		unl->pending += rc == 0 ? 2 : 0;
		return rc;
	}
	rc = remora_read(ch, lw_addr(w), t->key, &now, 8);
	if (!rc && now == mine) {
		t->why = "a CAS that reported the word taken left the caller's value in it";
		t->word = w, t->seen = old;
	}
	return rc;
}

static void *lw_thread_main(void *arg)
{
	struct lw_thread *t = arg;
	struct remora_waiter unl = { .pending = 0 };
	struct remora_chan *ch;
	int rc = remora_chan_open(t->tp, &ch);

	if (rc) {
		t->why = "chan_open failed";
		return NULL;
	}
	for (uint64_t i = 1; i <= LW_ROUNDS && !rc && !t->why; i++)
		rc = lw_round(t, ch, &unl, t->id << 32 | i, (unsigned)(i * 2654435761u >> 7) % LW_WORDS);
	while (unl.pending)
		remora_chan_progress(ch);
	if (rc && !t->why)
		t->why = "a verb failed";
	if (unl.status && !t->why)
		t->why = "an unlock WRITE failed";
	remora_chan_close(ch);
	return NULL;
}

/*
 * A word still holding one of this process's values once its threads are done: which round
 * put it there, and whether that round's CAS reported it won (then its unlock was posted and
 * completed) or lost. Other processes may still run; only this process writes these values.
 */
static void lw_whose(struct remora_transport *tp, const struct lw_thread *t, unsigned n, int cn)
{
	struct remora_chan *ch;

	if (remora_chan_open(tp, &ch))
		return;
	for (unsigned w = 0; w < LW_WORDS; w++) {
		uint64_t v = 0, r;

		if (remora_read(ch, lw_addr(w), t[0].key, &v, 8) || !v)
			continue;
		for (unsigned i = 0; i < n; i++) {
			if (v >> 32 != t[i].id)
				continue;
			r = v & 0xffffffffu;
			fprintf(stderr, "lock words: cn %d thread %u: word %u holds its round %llu, "
				"whose CAS reported it %s", cn, i, w, (unsigned long long)r,
				t[i].won[r / 8] >> (r & 7) & 1 ? "won (its unlock completed)" : "lost");
			if (t[i].won[r / 8] >> (r & 7) & 1)
				fprintf(stderr, "; the READ behind the unlock saw %#llx (%s)",
					(unsigned long long)t[i].behind[r],
					t[i].behind[r] == v	     ? "the unlock did not land" :
					t[i].behind[r] == ~UINT64_C(0) ? "no unlock was posted" :
					"the unlock landed: the CAS took it again later");
			fputc('\n', stderr);
		}
	}
	remora_chan_close(ch);
}

static int lw_proc_main(void *argp, int rd, int wr)
{
	struct lw_arg *a = argp;
	struct remora_caps caps = { .size = sizeof(caps) };
	struct lw_thread t[4];
	pthread_t th[4];
	struct remora_transport *tp;
	int rc, bad = 0;

	rc = tu_transport_try(a->cn, NULL, &tp);
	TU_CHILD_CHECK(rc == 0, "cn %d transport_open = %d (%s)", a->cn, rc, remora_strerror(rc));
	rc = remora_transport_attach(tp, &mn.mn[0].desc);
	TU_CHILD_CHECK(rc == 0, "cn %d attach = %d (%s)", a->cn, rc, remora_strerror(rc));
	TU_CHILD_CHECK(tu_child_ready(rd, wr) == 0, "no start signal");
	TU_CHILD_CHECK(remora_transport_caps(tp, &caps) == 0, "caps");
	for (unsigned i = 0; i < a->threads; i++) {
		t[i] = (struct lw_thread){ .tp = tp, .key = mn.mn[0].key,
					   .unlock_cas = !(caps.flags & REMORA_CAP_COHERENT_ATOMICS),
					   .id = (uint64_t)a->cn << 8 | (i + 1),
					   .fault = i == 0 ? a->fault : LW_NONE,
					   .behind = calloc(LW_ROUNDS + 1, sizeof(uint64_t)) };
		TU_CHILD_CHECK(t[i].behind, "out of memory");
		memset(t[i].behind, 0xff, (LW_ROUNDS + 1) * sizeof(uint64_t));
		TU_CHILD_CHECK(pthread_create(&th[i], NULL, lw_thread_main, &t[i]) == 0, "thread");
	}
	for (unsigned i = 0; i < a->threads; i++)
		pthread_join(th[i], NULL);
	lw_whose(tp, t, a->threads, a->cn);
	for (unsigned i = 0; i < a->threads; i++) {
		if (t[i].why) {
			tu_child_fail(__FILE__, __LINE__, "lock words",
				      "cn %d thread %u: %s (word %llu, CAS returned %#llx)", a->cn, i,
				      t[i].why, (unsigned long long)t[i].word,
				      (unsigned long long)t[i].seen);
			bad = 1;
		}
	}
	for (unsigned i = 0; i < a->threads; i++)
		free(t[i].behind);
	remora_transport_close(tp);
	return bad;
}

/* 0, or the lock word left set; *failed: a process reported a violation. */
static uint64_t lock_words(enum lw_fault fault, bool *failed)
{
	enum { NP = 2, NT = 2 };
	struct lw_arg a[NP];
	unsigned which;
	uint64_t left = 0;

	tu_open_pools(&mn, -1, 1, TU_POOL_BYTES);
	memset(mn.mn[0].base + LW_OFF, 0, 64u * LW_WORDS);
	for (int i = 0; i < NP; i++)
		a[i] = (struct lw_arg){ .cn = 1 + i, .threads = NT, .fault = i ? LW_NONE : fault };
	*failed = tu_run_together(lw_proc_main, a, sizeof(a[0]), NP, &which) != 0;
	for (unsigned w = 0; w < LW_WORDS && !left; w++)
		memcpy(&left, mn.mn[0].base + LW_OFF + 64u * w, 8);
	tu_close(&mn);
	return left;
}

Test(concurrency, lock_words_taken_and_given_back)
{
	bool failed;
	uint64_t left = lock_words(LW_NONE, &failed);

	cr_assert_not(failed, "a process saw a violation (its line is above)");
	cr_assert_eq(left, 0, "a lock word stays %#llx after every process ended (an unlock that "
		     "never landed, or a CAS reported lost that won)", (unsigned long long)left);
}

/* The checks see a dropped unlock (a word left set) and a hidden win (the READ shows ours). */
Test(concurrency, lock_words_checks_catch_their_faults)
{
	bool failed;

	cr_assert_neq(lock_words(LW_DROP_UNLOCK, &failed), 0, "a dropped unlock must stay seen");
	lock_words(LW_HIDE_WIN, &failed);
	cr_assert(failed, "a CAS reported lost that won must be seen by its READ");
}
