/* SPDX-License-Identifier: MIT */
/*
 * remora_co_exec through a real transport (the default backend, $REMORA_BACKEND else shm): verbs
 * from many coroutines in flight at once on one channel, the poller waking them, completion
 * status, chunking beyond max_batch, back-pressure, a channel the scheduler does not poll, and
 * the spin path outside any coroutine. Counts are checked against the transport's counters.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <remora/sched.h>
#include <remora/transport.h>

#include "transport/direct.h"

#define POOL_BYTES (1u << 20)

static struct remora_transport *tp;
static struct remora_pool *pool;
static struct remora_chan *ch;
static uint32_t key;
static uint8_t *base;
static struct remora_transport_cfg cfg;
static char cluster[48];

static void setup(void)
{
	struct remora_pool_spec spec = { .size = sizeof(spec), .node = 0, .bytes = POOL_BYTES,
					 .flags = REMORA_POOL_CREATE | REMORA_POOL_EXCL |
						  REMORA_POOL_UNLINK_ON_CLOSE };
	struct remora_node_desc desc;
	int rc;

	snprintf(cluster, sizeof(cluster), "tsched-%ld", (long)getpid());
	cfg = (struct remora_transport_cfg){ .size = sizeof(cfg), .cluster = cluster,
					     .self_cn = 0, .numa_node = -1 };
	rc = remora_transport_open(&cfg, &tp);
	if (rc)
		cr_skip_test("transport cannot open here: %s", remora_last_error());
	cr_assert_eq(remora_pool_open(tp, &spec, &pool), 0, "%s", remora_transport_errmsg(tp));
	cr_assert_eq(remora_pool_reg(pool, 0, POOL_BYTES, &key), 0);
	cr_assert_eq(remora_pool_describe(pool, &desc), 0);
	cr_assert_eq(remora_transport_attach(tp, &desc), 0);
	cr_assert_eq(remora_chan_open(tp, &ch), 0);
	base = remora_pool_base(pool);
	cr_assert_not_null(base);
	memset(base, 0, POOL_BYTES);
}

static void teardown(void)
{
	remora_chan_close(ch);
	remora_pool_close(pool, true);
	remora_transport_close(tp);
	remora_transport_cleanup(&cfg);
	ch = NULL;
	pool = NULL;
	tp = NULL;
}

TestSuite(co_exec, .init = setup, .fini = teardown, .timeout = 60);

static struct remora_caps caps_of_tp(void)
{
	struct remora_caps caps = { .size = sizeof(caps) };

	cr_assert_eq(remora_transport_caps(tp, &caps), 0);
	return caps;
}

static uint64_t verbs_of(enum remora_op op)
{
	struct remora_counters c;

	remora_chan_counters(ch, &c);
	return remora_counters_total(&c, op);
}

static uint64_t doorbells(void)
{
	struct remora_counters c;

	remora_chan_counters(ch, &c);
	return c.doorbells;
}

/* ---- outside a coroutine: behaves like remora_exec -------------------------------------- */

Test(co_exec, outside_a_coroutine_spins_until_done)
{
	uint64_t v = 0x1122334455667788, back = 0, old = 7;
	struct remora_wr wrs[3] = {
		{ .op = REMORA_OP_WRITE, .raddr = remora_gaddr_make(0, 64), .rkey = key,
		  .len = 8, .local = &v },
		{ .op = REMORA_OP_READ, .raddr = remora_gaddr_make(0, 64), .rkey = key,
		  .len = 8, .local = &back },
		{ .op = REMORA_OP_FAA, .raddr = remora_gaddr_make(0, 64), .rkey = key, .swap = 1,
		  .local = &old },
	};

	cr_assert_null(remora_coro_self());
	cr_assert_eq(remora_co_exec(ch, wrs, 3), 0);
	cr_assert_eq(back, v);
	cr_assert_eq(old, v);
	cr_assert_eq(remora_chan_outstanding(ch), 0);
	cr_assert_eq(verbs_of(REMORA_OP_FAA), 1);
}

/* ---- many coroutines, verbs in flight together ----------------------------------------- */

#define NCORO 8
#define ROUNDS 50

static unsigned max_in_flight;
static unsigned coro_errors;

static void counter_body(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;
	uint64_t mine = 0, back = 0, old = 0;
	remora_gaddr slot = remora_gaddr_make(0, 4096 + 64 * (uint64_t)id);

	for (unsigned r = 0; r < ROUNDS; r++) {
		struct remora_wr faa = { .op = REMORA_OP_FAA, .raddr = remora_gaddr_make(0, 0),
					 .rkey = key, .swap = 1, .local = &old };
		struct remora_wr wr[2] = {
			{ .op = REMORA_OP_WRITE, .raddr = slot, .rkey = key, .len = 8,
			  .local = &mine },
			{ .op = REMORA_OP_READ, .raddr = slot, .rkey = key, .len = 8,
			  .local = &back },
		};

		mine = (uint64_t)id << 32 | r;
		if (remora_co_exec(ch, &faa, 1))
			coro_errors++;
		if (remora_co_exec(ch, wr, 2) || back != mine)
			coro_errors++;
	}
}

/* Queued behind the others: sees how many verbs they have in flight while parked. */
static void peek_body(void *arg)
{
	(void)arg;
	for (unsigned r = 0; r < 4; r++) {
		if (remora_chan_outstanding(ch) > max_in_flight)
			max_in_flight = remora_chan_outstanding(ch);
		remora_yield();
	}
}

Test(co_exec, coroutines_keep_verbs_in_flight_together)
{
	struct remora_sched *s;
	uint64_t faa0 = verbs_of(REMORA_OP_FAA), rd0 = verbs_of(REMORA_OP_READ);
	uint64_t counter;

	max_in_flight = 0;
	coro_errors = 0;
	/* on shm and pmem verbs would complete as they are posted (next test) */
	rt_transport_inline_exec(0);
	cr_assert_eq(remora_sched_create(ch, 0, &s), 0);
	for (uintptr_t i = 0; i < NCORO; i++)
		cr_assert_eq(remora_sched_spawn(s, counter_body, (void *)i), 0);
	cr_assert_eq(remora_sched_spawn(s, peek_body, NULL), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	remora_sched_destroy(s);
	rt_transport_inline_exec(1);

	cr_assert_eq(coro_errors, 0);
	memcpy(&counter, base, 8);
	cr_assert_eq(counter, NCORO * ROUNDS);
	cr_assert_eq(verbs_of(REMORA_OP_FAA) - faa0, NCORO * ROUNDS);
	cr_assert_eq(verbs_of(REMORA_OP_READ) - rd0, NCORO * ROUNDS);
	/* FIFO: all NCORO first FAAs are posted before the poller runs once. */
	cr_assert_geq(max_in_flight, NCORO, "at most %u verbs were in flight", max_in_flight);
	cr_assert_eq(remora_chan_outstanding(ch), 0);
}

/*
 * Inline completion: on a backend that applies verbs as they are posted (shm, pmem) with no
 * cost model, remora_co_exec and remora_exec take the completions at once, so no verb is ever
 * left in flight, while every verb is still counted and applied, and the coroutines still take
 * turns (each one's FAAs interleave with the others').
 */
Test(co_exec, inline_backends_complete_verbs_as_posted)
{
	const char *be = remora_transport_backend(tp);
	struct remora_sched *s;
	uint64_t faa0 = verbs_of(REMORA_OP_FAA), rd0 = verbs_of(REMORA_OP_READ), counter;
	uint64_t v = 0;
	struct remora_wr rd = { .op = REMORA_OP_READ, .raddr = remora_gaddr_make(0, 0),
				.rkey = key, .len = 8, .local = &v };

	if (strcmp(be, "shm") && strcmp(be, "pmem"))
		cr_skip_test("backend %s completes verbs later", be);
	max_in_flight = 0;
	coro_errors = 0;
	cr_assert_eq(remora_sched_create(ch, 0, &s), 0);
	for (uintptr_t i = 0; i < NCORO; i++)
		cr_assert_eq(remora_sched_spawn(s, counter_body, (void *)i), 0);
	cr_assert_eq(remora_sched_spawn(s, peek_body, NULL), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	remora_sched_destroy(s);

	cr_assert_eq(coro_errors, 0);
	memcpy(&counter, base, 8);
	cr_assert_eq(counter, NCORO * ROUNDS);
	cr_assert_eq(verbs_of(REMORA_OP_FAA) - faa0, NCORO * ROUNDS);
	cr_assert_eq(verbs_of(REMORA_OP_READ) - rd0, NCORO * ROUNDS);
	cr_assert_eq(max_in_flight, 0, "%u verbs were in flight", max_in_flight);
	/* outside a coroutine too, and the status of a refused verb still comes back */
	cr_assert_eq(remora_exec(ch, &rd, 1), 0);
	cr_assert_eq(v, NCORO * ROUNDS);
	rd.rkey = key + 1000;
	cr_assert_eq(remora_exec(ch, &rd, 1), -REMORA_EBADKEY);
	cr_assert_eq(remora_chan_outstanding(ch), 0);
}

/* ---- prefetch and yield ------------------------------------------------------------------ */

#define PF_SLOT 8192u

static uint64_t pf_seen; /* the slot as the second coroutine found it in the first one's call */

static void pf_writer(void *arg)
{
	uint64_t one = 1;
	struct remora_wr wr = { .op = REMORA_OP_WRITE, .raddr = remora_gaddr_make(0, PF_SLOT),
				.rkey = key, .len = 8, .local = &one };

	(void)arg;
	if (remora_co_exec(ch, &wr, 1))
		coro_errors++;
}

static void pf_peeker(void *arg)
{
	(void)arg;
	memcpy(&pf_seen, base + PF_SLOT, 8);
}

/* Whether the peeker, run while the writer is inside remora_co_exec, saw its WRITE. */
static uint64_t writer_seen_by_peeker(bool prefetch)
{
	struct remora_sched *s;
	uint64_t zero = 0, after;

	memcpy(base + PF_SLOT, &zero, 8);
	pf_seen = UINT64_MAX;
	cr_assert_eq(remora_sched_create(ch, 0, &s), 0);
	remora_sched_set_prefetch(s, prefetch);
	cr_assert_eq(remora_sched_spawn(s, pf_writer, NULL), 0);
	cr_assert_eq(remora_sched_spawn(s, pf_peeker, NULL), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	remora_sched_destroy(s);
	memcpy(&after, base + PF_SLOT, 8);
	cr_assert_eq(after, 1, "the WRITE did not land (prefetch %d)", prefetch);
	return pf_seen;
}

/*
 * With prefetch and yield the verbs take effect after the other coroutines' turn, and
 * everything else is as without it: every result, the counters, nothing in flight.
 */
Test(co_exec, prefetch_and_yield_applies_verbs_after_the_others_turn)
{
	const char *be = remora_transport_backend(tp);
	struct remora_sched *s;
	uint64_t faa0, rd0, wr0, db0, counter;

	if (strcmp(be, "shm") && strcmp(be, "pmem"))
		cr_skip_test("backend %s has no prefetch", be);
	coro_errors = 0;
	cr_assert_eq(writer_seen_by_peeker(false), 1, "without prefetch: applied before the yield");
	cr_assert_eq(writer_seen_by_peeker(true), 0, "with prefetch: applied after the yield");

	memset(base, 0, 8);
	max_in_flight = 0;
	faa0 = verbs_of(REMORA_OP_FAA);
	rd0 = verbs_of(REMORA_OP_READ);
	wr0 = verbs_of(REMORA_OP_WRITE);
	db0 = doorbells();
	cr_assert_eq(remora_sched_create(ch, 0, &s), 0);
	remora_sched_set_prefetch(s, true);
	for (uintptr_t i = 0; i < NCORO; i++)
		cr_assert_eq(remora_sched_spawn(s, counter_body, (void *)i), 0);
	cr_assert_eq(remora_sched_spawn(s, peek_body, NULL), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	remora_sched_destroy(s);
	cr_assert_eq(coro_errors, 0, "%u wrong results or failed calls", coro_errors);
	memcpy(&counter, base, 8);
	cr_assert_eq(counter, NCORO * ROUNDS);
	cr_assert_eq(verbs_of(REMORA_OP_FAA) - faa0, NCORO * ROUNDS);
	cr_assert_eq(verbs_of(REMORA_OP_READ) - rd0, NCORO * ROUNDS);
	cr_assert_eq(verbs_of(REMORA_OP_WRITE) - wr0, NCORO * ROUNDS);
	cr_assert_eq(doorbells() - db0, 2 * NCORO * ROUNDS);
	cr_assert_eq(max_in_flight, 0, "%u verbs were in flight", max_in_flight);
}

/* ---- how often an inline-completed call gives the turn ---------------------------------- */

static char iy_trace[64];
static unsigned iy_len;

static void iy_body(void *arg)
{
	uint64_t old;
	struct remora_wr wr = { .op = REMORA_OP_FAA, .raddr = remora_gaddr_make(0, 64),
				.rkey = key, .swap = 1, .local = &old };

	for (int i = 0; i < 6; i++) {
		if (remora_co_exec(ch, &wr, 1))
			coro_errors++;
		if (iy_len < sizeof(iy_trace) - 1)
			iy_trace[iy_len++] = (char)(uintptr_t)arg;
	}
}

/* Two coroutines of six FAAs each; the order in which their calls returned. */
static const char *inline_yield_trace(unsigned every)
{
	struct remora_sched *s;

	iy_len = 0;
	memset(iy_trace, 0, sizeof(iy_trace));
	cr_assert_eq(remora_sched_create(ch, 0, &s), 0);
	remora_sched_set_inline_yield(s, every);
	cr_assert_eq(remora_sched_spawn(s, iy_body, (void *)(uintptr_t)'a'), 0);
	cr_assert_eq(remora_sched_spawn(s, iy_body, (void *)(uintptr_t)'b'), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	remora_sched_destroy(s);
	return iy_trace;
}

/* Where verbs complete inline, a coroutine gives its turn in every k-th call (default 1). */
Test(co_exec, inline_yield_gives_the_turn_every_kth_call)
{
	const char *be = remora_transport_backend(tp);

	if (strcmp(be, "shm") && strcmp(be, "pmem"))
		cr_skip_test("backend %s does not complete verbs inline", be);
	coro_errors = 0;
	cr_assert_str_eq(inline_yield_trace(1), "abababababab");
	cr_assert_str_eq(inline_yield_trace(0), "abababababab", "0 is taken as 1");
	/* every 3rd call yields before it returns: a a | b b | a(3) a a | b(3) b b | a(6) b(6) */
	cr_assert_str_eq(inline_yield_trace(3), "aabbaaabbbab");
	cr_assert_str_eq(inline_yield_trace(8), "aaaaaabbbbbb");
	cr_assert_eq(coro_errors, 0);
	cr_assert_eq(remora_chan_outstanding(ch), 0);
}

/* ---- status, chunking, back-pressure ---------------------------------------------------- */

static int body_rc;

static void bad_key_body(void *arg)
{
	uint64_t v = 0;
	struct remora_wr wr[2] = {
		{ .op = REMORA_OP_READ, .raddr = remora_gaddr_make(0, 0), .rkey = key, .len = 8,
		  .local = &v },
		{ .op = REMORA_OP_READ, .raddr = remora_gaddr_make(0, 0), .rkey = key + 1000,
		  .len = 8, .local = &v },
	};

	(void)arg;
	body_rc = remora_co_exec(ch, wr, 2);
}

Test(co_exec, a_refused_post_is_returned_and_nothing_is_posted)
{
	struct remora_sched *s;
	uint64_t rd0 = verbs_of(REMORA_OP_READ);

	body_rc = 99;
	cr_assert_eq(remora_sched_create(ch, 0, &s), 0);
	cr_assert_eq(remora_sched_spawn(s, bad_key_body, NULL), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	remora_sched_destroy(s);
	cr_assert_eq(body_rc, -REMORA_EBADKEY);
	cr_assert_eq(verbs_of(REMORA_OP_READ), rd0);
}

static void fenced_body(void *arg)
{
	uint64_t old = 0;
	struct remora_wr wr = { .op = REMORA_OP_CAS, .raddr = remora_gaddr_make(0, 8), .rkey = key,
				.compare = 0, .swap = 5, .local = &old };

	(void)arg;
	body_rc = remora_co_exec(ch, &wr, 1);
}

Test(co_exec, completion_status_reaches_the_caller)
{
	struct remora_caps caps = caps_of_tp();
	struct remora_sched *s;
	uint64_t word;

	if (!(caps.flags & REMORA_CAP_FENCING))
		cr_skip_test("backend %s cannot fence", remora_transport_backend(tp));
	cr_assert_eq(remora_pool_fence(pool, 0), 0);
	body_rc = 99;
	cr_assert_eq(remora_sched_create(ch, 0, &s), 0);
	cr_assert_eq(remora_sched_spawn(s, fenced_body, NULL), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	remora_sched_destroy(s);
	cr_assert_eq(body_rc, -REMORA_EFENCED);
	memcpy(&word, base + 8, 8);
	cr_assert_eq(word, 0, "a fenced CAS changed memory");
}

static unsigned big_n;
static uint64_t big_sum;

static void big_batch_body(void *arg)
{
	struct remora_wr *wrs = arg;
	uint64_t *vals = (uint64_t *)(wrs + big_n);

	body_rc = remora_co_exec(ch, wrs, big_n);
	big_sum = 0;
	for (unsigned i = 0; i < big_n; i++)
		big_sum += vals[i];
}

Test(co_exec, batches_beyond_max_batch_go_out_in_chunks)
{
	struct remora_caps caps = caps_of_tp();
	struct remora_sched *s;
	struct remora_wr *wrs;
	uint64_t *vals, db0 = doorbells(), want = 0;
	unsigned chunks;

	big_n = caps.max_batch * 2 + 3;
	if (big_n > caps.max_outstanding || (uint64_t)big_n * 8 > POOL_BYTES)
		cr_skip_test("max_batch %u too large for this test", caps.max_batch);
	chunks = 3;
	wrs = calloc(big_n, sizeof(*wrs) + sizeof(uint64_t));
	cr_assert_not_null(wrs);
	vals = (uint64_t *)(wrs + big_n);
	for (unsigned i = 0; i < big_n; i++) {
		uint64_t v = 1000 + i;

		memcpy(base + 8 * (uint64_t)i, &v, 8);
		want += v;
		wrs[i] = (struct remora_wr){ .op = REMORA_OP_READ, .rkey = key, .len = 8,
					     .raddr = remora_gaddr_make(0, 8 * (uint64_t)i),
					     .local = &vals[i] };
	}
	body_rc = 99;
	cr_assert_eq(remora_sched_create(ch, 0, &s), 0);
	cr_assert_eq(remora_sched_spawn(s, big_batch_body, wrs), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	remora_sched_destroy(s);
	cr_assert_eq(body_rc, 0);
	cr_assert_eq(big_sum, want);
	cr_assert_eq(doorbells() - db0, chunks);
	free(wrs);
}

static unsigned pressure_done;

static void pressure_body(void *arg)
{
	struct remora_wr *wrs = arg;

	if (remora_co_exec(ch, wrs, 64) == 0)
		pressure_done++;
}

Test(co_exec, back_pressure_waits_for_room)
{
	struct remora_caps caps = caps_of_tp();
	unsigned ncoro = caps.max_outstanding / 64 + 4; /* more than the channel holds */
	struct remora_sched *s;
	struct remora_wr *wrs;
	uint64_t faa0 = verbs_of(REMORA_OP_FAA), counter;

	if (caps.max_batch < 64)
		cr_skip_test("max_batch %u below 64", caps.max_batch);
	wrs = calloc((size_t)ncoro * 64, sizeof(*wrs) + sizeof(uint64_t));
	cr_assert_not_null(wrs);
	for (unsigned i = 0; i < ncoro * 64; i++)
		wrs[i] = (struct remora_wr){ .op = REMORA_OP_FAA, .rkey = key, .swap = 1,
					     .raddr = remora_gaddr_make(0, 0),
					     .local = (uint64_t *)(wrs + ncoro * 64) + i };
	pressure_done = 0;
	cr_assert_eq(remora_sched_create(ch, 0, &s), 0);
	for (unsigned c = 0; c < ncoro; c++)
		cr_assert_eq(remora_sched_spawn(s, pressure_body, wrs + (size_t)c * 64), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	remora_sched_destroy(s);
	cr_assert_eq(pressure_done, ncoro);
	memcpy(&counter, base, 8);
	cr_assert_eq(counter, (uint64_t)ncoro * 64);
	cr_assert_eq(verbs_of(REMORA_OP_FAA) - faa0, (uint64_t)ncoro * 64);
	free(wrs);
}

/* ---- a channel the scheduler does not poll ---------------------------------------------- */

static unsigned own_errors;

static void own_channel_body(void *arg)
{
	uint64_t old = 0;
	struct remora_wr wr = { .op = REMORA_OP_FAA, .raddr = remora_gaddr_make(0, 16), .rkey = key,
				.swap = 3, .local = &old };

	(void)arg;
	for (int i = 0; i < 2; i++) {
		if (remora_co_exec(ch, &wr, 1))
			own_errors++;
		remora_yield();
	}
}

Test(co_exec, a_channel_nobody_polls_is_polled_by_the_caller)
{
	struct remora_sched *s;
	uint64_t word;

	own_errors = 0;
	cr_assert_eq(remora_sched_create(NULL, 0, &s), 0); /* no poller */
	cr_assert_eq(remora_sched_spawn(s, own_channel_body, NULL), 0);
	cr_assert_eq(remora_sched_spawn(s, own_channel_body, NULL), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	remora_sched_destroy(s);
	cr_assert_eq(own_errors, 0);
	memcpy(&word, base + 16, 8);
	cr_assert_eq(word, 12);
}
