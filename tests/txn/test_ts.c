/* SPDX-License-Identifier: MIT */
/* Timestamp services: monotone, unique across threads; the clock service issues no verbs. */
#include <pthread.h>
#include <stdlib.h>

#include "cluster/ts.h"
#include "store/layout.h"
#include "ttx.h"

TestSuite(txn_ts, .fini = ttx_fini, .timeout = TU_TIMEOUT);

static struct ttx T;

#define TS_THREADS 4
#define TS_PER_THREAD 20000

struct ts_arg {
	struct ts_service *ts;
	struct remora_transport *tp;
	uint64_t *out;
	int rc;
};

static void *ts_thread(void *p)
{
	struct ts_arg *a = p;
	struct remora_chan *ch = NULL;

	if (a->tp && remora_chan_open(a->tp, &ch)) {
		a->rc = -1;
		return NULL;
	}
	for (unsigned i = 0; i < TS_PER_THREAD; i++) {
		a->rc = ts_next(a->ts, ch, &a->out[i]);
		if (a->rc)
			break;
		if (i && a->out[i] <= a->out[i - 1]) {
			a->rc = -2; /* not monotone within a thread */
			break;
		}
	}
	if (ch)
		remora_chan_close(ch);
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void run_threads(struct ts_service *ts, struct remora_transport *tp)
{
	pthread_t th[TS_THREADS];
	struct ts_arg a[TS_THREADS];
	uint64_t *all = calloc(TS_THREADS * TS_PER_THREAD, sizeof(*all));

	cr_assert_not_null(all);
	for (unsigned i = 0; i < TS_THREADS; i++) {
		a[i] = (struct ts_arg){ .ts = ts, .tp = tp, .out = all + i * TS_PER_THREAD };
		cr_assert_eq(pthread_create(&th[i], NULL, ts_thread, &a[i]), 0);
	}
	for (unsigned i = 0; i < TS_THREADS; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(a[i].rc, 0, "thread %u: %d", i, a[i].rc);
	}
	qsort(all, TS_THREADS * TS_PER_THREAD, sizeof(*all), cmp_u64);
	for (unsigned i = 1; i < TS_THREADS * TS_PER_THREAD; i++)
		cr_assert_neq(all[i], all[i - 1], "duplicate timestamp %llu",
			      (unsigned long long)all[i]);
	free(all);
}

Test(txn_ts, clock_monotone_unique_no_verbs)
{
	struct remora_counters c0, c1;
	struct ts_service ts;
	uint64_t a, b;

	tu_open(&T.tu, 3, 1, 1u << 20);
	remora_transport_counters(T.tu.tp, &c0);
	cr_assert_eq(ts_init_clock(&ts, 3), 0);
	run_threads(&ts, T.tu.tp);
	remora_transport_counters(T.tu.tp, &c1);
	for (unsigned op = 0; op < REMORA_OP__COUNT; op++)
		cr_assert_eq(ttx_verbs(&c0, &c1, op), 0, "clock service issued %s verbs",
			     remora_op_name(op));
	/* The compute-node id sits in the low bits: two nodes never collide. */
	cr_assert_eq(ts_next(&ts, NULL, &a), 0);
	cr_assert_eq(a & 63, 3);
	cr_assert_eq(ts_next(&ts, NULL, &b), 0);
	cr_assert_gt(b, a);
	cr_assert_eq(ts_init_clock(&ts, REMORA_MAX_CN), -REMORA_ECONFIG);
	tu_close(&T.tu);
}

Test(txn_ts, counter_unique_one_faa_each)
{
	struct remora_counters c0, c1;
	struct ts_service ts;
	enum ts_kind k;

	tu_open(&T.tu, 0, 1, 1u << 20);
	ts_init_counter(&ts, remora_gaddr_make(0, 4096), T.tu.mn[0].key);
	remora_transport_counters(T.tu.tp, &c0);
	run_threads(&ts, T.tu.tp);
	remora_transport_counters(T.tu.tp, &c1);
	cr_assert_eq(ttx_verbs(&c0, &c1, REMORA_OP_FAA), TS_THREADS * TS_PER_THREAD);
	cr_assert_eq(ts_parse("counter", &k), 0);
	cr_assert_eq(k, REMORA_TS_COUNTER);
	cr_assert_eq(ts_parse("clok", &k), -REMORA_ECONFIG);
	tu_close(&T.tu);
}
