/* SPDX-License-Identifier: MIT */
/*
 * Conformance: the verb deadline (parameter verb_timeout_ms, runtime/transport/verbs.c). A
 * completion that never comes ($REMORA_LOSE_COMPLETION holds one back, as a device that lost
 * it) fails its batch with -ETIMEDOUT once the channel completed nothing for the deadline,
 * only after every other verb of the batch completed, with a message naming the node and the
 * verb; the channel then refuses every verb.
 *
 *   lost_completion_times_out     a batch of 8 WRITEs, the 3rd completion lost
 *   no_deadline_hangs             negative control: verb_timeout_ms = 0, the same batch in a
 *                                 child; the test's own watchdog sees it still waiting
 *   break_with_verbs_in_flight    the break with verbs really in flight (rdma: QPs to the
 *                                 error state, flushed, destroyed): each verb completes once
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "transport/mutate.h"
#include "tutil.h"

static struct tu_ctx c;

static void fini(void)
{
	unsetenv("REMORA_LOSE_COMPLETION");
	unsetenv("REMORA_VERB_TIMEOUT_MS");
	tu_fini();
}

TestSuite(deadline, .fini = fini, .timeout = TU_TIMEOUT);

#define NWR 8
#define DEADLINE_MS "300"

/* NWR WRITEs of 8 bytes to words 0..NWR-1 of node 0. */
static int write_batch(struct tu_ctx *x, uint64_t *src)
{
	struct remora_wr wrs[NWR];

	for (unsigned i = 0; i < NWR; i++) {
		src[i] = 0x1000 + i;
		wrs[i] = tu_wr_write(remora_gaddr_make(0, 8 * i), x->mn[0].key, &src[i], 8);
	}
	return remora_exec(x->ch, wrs, NWR);
}

Test(deadline, lost_completion_times_out)
{
	uint64_t src[NWR], v = 0;
	const char *msg;
	int rc;

	setenv("REMORA_LOSE_COMPLETION", "3", 1);
	setenv("REMORA_VERB_TIMEOUT_MS", DEADLINE_MS, 1);
	tu_open(&c, 0, 1, TU_POOL_BYTES);
	rc = write_batch(&c, src);
	cr_assert_eq(rc, -ETIMEDOUT, "exec: %d (%s)", rc, remora_strerror(rc));
	cr_assert_eq(remora_chan_outstanding(c.ch), 0, "the batch returned with verbs in flight");
	msg = remora_transport_errmsg(c.tp);
	cr_assert(strstr(msg, "node 0") && strstr(msg, "write") && strstr(msg, "verb_timeout_ms"),
		  "message: %s", msg);
	rc = remora_read(c.ch, remora_gaddr_make(0, 0), c.mn[0].key, &v, 8);
	cr_assert_eq(rc, -ETIMEDOUT, "a broken channel took a verb: %d", rc);
	cr_assert_eq(remora_chan_outstanding(c.ch), 0);
	tu_close(&c);
}

static int hang_child(void *arg, int rd, int wr)
{
	struct tu_ctx x = { 0 };
	uint64_t src[NWR];

	(void)arg, (void)rd;
	tu_open(&x, 0, 1, TU_POOL_BYTES);
	tu_send(wr, 1); /* about to post */
	write_batch(&x, src);
	return 3; /* returned: the batch did not wait for its lost completion */
}

/* Negative control: without the deadline the lost completion is waited for forever. */
Test(deadline, no_deadline_hangs)
{
	struct tu_proc p;
	uint64_t m = 0;
	struct timespec ts = { .tv_sec = 0, .tv_nsec = 100 * 1000000 };
	int st;

	setenv("REMORA_LOSE_COMPLETION", "3", 1);
	setenv("REMORA_VERB_TIMEOUT_MS", "0", 1);
	tu_spawn(&p, hang_child, NULL);
	cr_assert_eq(tu_recv(p.rd, &m), 0, "child did not get to its batch");
	/* The watchdog: 10 x the deadline of lost_completion_times_out, stretched on slow hosts. */
	for (unsigned i = 0; i < 30 * tu_time_scale(); i++) {
		nanosleep(&ts, NULL);
		cr_assert_eq(waitpid(p.pid, &st, WNOHANG), 0,
			     "the batch returned without its completion (exit %d)",
			     WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	}
	kill(p.pid, SIGKILL);
	cr_assert_eq(tu_proc_wait(&p), 128 + SIGKILL);
}

Test(deadline, break_with_verbs_in_flight)
{
	enum { N = 17, BIG = 128u << 10 };
	static uint8_t small[N - 1][4096], big[BIG];
	struct remora_wr wrs[N];
	struct remora_cqe cqes[N];
	uint64_t v;
	int got, rc;

	tu_open(&c, 0, 1, TU_POOL_BYTES);
	for (unsigned i = 0; i < N - 1; i++)
		wrs[i] = tu_wr_read(remora_gaddr_make(0, 4096 * i), c.mn[0].key, small[i], 4096);
	wrs[N - 1] = tu_wr_read(remora_gaddr_make(0, 0), c.mn[0].key, big, BIG);
	for (unsigned i = 0; i < N; i++)
		wrs[i].wr_id = i + 1;
	rc = remora_post(c.ch, wrs, N);
	cr_assert_eq(rc, 0, "post: %s", remora_strerror(rc));
	rt_transport_chan_break(c.ch);
	got = tu_drain(c.ch, cqes, N);
	cr_assert_eq(got, N, "%d completions of %d", got, N);
	for (unsigned i = 0; i < N; i++)
		cr_assert(cqes[i].status == 0 || cqes[i].status == -ETIMEDOUT, "verb %llu: %d",
			  (unsigned long long)cqes[i].wr_id, cqes[i].status);
	cr_assert_eq(remora_chan_outstanding(c.ch), 0);
	cr_assert_eq(remora_poll(c.ch, cqes, N), 0, "a verb completed twice");
	rc = remora_read(c.ch, remora_gaddr_make(0, 0), c.mn[0].key, &v, 8);
	cr_assert_eq(rc, -ETIMEDOUT, "a broken channel took a verb: %d", rc);
	cr_assert(strstr(remora_transport_errmsg(c.tp), "channel broken"), "%s",
		  remora_transport_errmsg(c.tp));
	/* What the device showed (rdma: QP state, flush counts), for the guest's log. */
	fprintf(stderr, "deadline::break_with_verbs_in_flight: %s\n",
		remora_transport_errmsg(c.tp));
	tu_close(&c);
}
