/* SPDX-License-Identifier: MIT */
/*
 * runtime/prof and apps/bench/cpusplit: samples are counted for the layer that is current when
 * they come (and unmarked code counts as the workload: the control that shows the check can
 * fail), a result line round-trips, and the report's arithmetic (split sums to the total, the
 * ratio to the raw verbs). Sample counts are asserted, never times.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "apps/bench/cpusplit.h"

/* Burns this thread's CPU until `periods` samples came, or 10 s of CPU (no timers here). */
static void burn(uint64_t periods, struct prof_counts *d)
{
	struct prof_counts a, b;
	uint64_t t0 = bu_thread_cpu_ns(), total = 0;
	volatile uint64_t x = 0;

	prof_thread_read(&a);
	while (total < periods && bu_thread_cpu_ns() - t0 < UINT64_C(10000000000)) {
		for (unsigned i = 0; i < 100000; i++)
			x += i;
		prof_thread_read(&b);
		total = 0;
		for (unsigned l = 0; l < PROF__COUNT; l++)
			total += b.samples[l] - a.samples[l];
	}
	prof_thread_read(&b);
	prof_counts_diff(&b, &a, d);
}

static uint64_t total_of(const struct prof_counts *d)
{
	uint64_t t = 0;

	for (unsigned l = 0; l < PROF__COUNT; l++)
		t += d->samples[l];
	return t;
}

static void start_or_skip(void)
{
	if (!cs_thread_start())
		cr_skip_test("no per-thread CPU timers here");
}

Test(prof, samples_land_in_the_current_layer)
{
	struct prof_counts d;
	unsigned layer;

	start_or_skip();
	layer = prof_enter(PROF_PROTOCOL);
	burn(200, &d);
	prof_leave(layer);
	cs_thread_stop();
	if (total_of(&d) < 200)
		cr_skip_test("the timer did not fire (%llu samples)",
			     (unsigned long long)total_of(&d));
	cr_assert_eq(layer, PROF_WORKLOAD, "a thread starts in the workload layer");
	cr_assert_eq(d.samples[PROF_PROTOCOL], total_of(&d), "%llu of %llu samples in protocol",
		     (unsigned long long)d.samples[PROF_PROTOCOL],
		     (unsigned long long)total_of(&d));
	cr_assert_eq(d.period_ns, CS_PERIOD_NS);
}

/* Control: the same burn with no layer marked is all workload, so the check above can fail. */
Test(prof, unmarked_code_counts_as_workload)
{
	struct prof_counts d;

	start_or_skip();
	burn(200, &d);
	cs_thread_stop();
	if (total_of(&d) < 200)
		cr_skip_test("the timer did not fire");
	cr_assert_eq(d.samples[PROF_WORKLOAD], total_of(&d));
	cr_assert_eq(d.samples[PROF_PROTOCOL], 0);
}

Test(cpusplit, result_line_round_trips)
{
	struct cs_window w = { .cpu_ns = 123456789, .samples = { 1, 2, 3, 4, 5 },
			       .period_ns = CS_PERIOD_NS }, back;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	json_error_t err;
	json_t *root;

	cr_assert_not_null(f);
	fputc('{', f);
	cs_line(f, &w);
	fputc('}', f);
	fclose(f);
	root = json_loads(buf, 0, &err);
	cr_assert_not_null(root, "%s: %s", buf, err.text);
	cr_assert_eq(cs_parse(json_object_get(root, "cpu"), &back), 0);
	cr_assert_eq(memcmp(&w, &back, sizeof(w)), 0, "%s", buf);
	cr_assert_eq(cs_parse(NULL, &back), 0, "a line without it (older remora) is empty");
	cr_assert_eq(back.cpu_ns, 0);
	json_decref(root);
	free(buf);
}

Test(cpusplit, report_splits_the_total_and_sets_it_against_raw_verbs)
{
	struct cs_window w = { .cpu_ns = 1000000, .samples = { 1, 2, 3, 4, 0 },
			       .period_ns = CS_PERIOD_NS };
	double verbs[REMORA_OP__COUNT] = { 2.0, 1.0, 0.5, 0, 0 };
	double bytes[REMORA_OP__COUNT] = { 64, 8, 8, 0, 0 };
	struct cs_report r;
	double sum = 0;

	cs_report(&w, 100, verbs, bytes, 1u << 20, &r);
	cr_assert(r.have);
	cr_assert_float_eq(r.ns_per_txn, 10000.0, 1e-9);
	for (unsigned l = 0; l < PROF__COUNT; l++)
		sum += r.layer_ns[l];
	cr_assert_float_eq(sum, r.ns_per_txn, 1e-6);
	cr_assert_float_eq(r.layer_ns[PROF_TRANSPORT], 4000.0, 1e-9);
	cr_assert_eq(r.samples, 10);
	cr_assert_eq(r.raw_bytes, 1u << 20);
	cr_assert_gt(r.raw_ns[REMORA_OP_READ], 0);
	cr_assert_gt(r.raw_ns[REMORA_OP_CAS], 0);
	cr_assert_eq(r.raw_ns[REMORA_OP_FAA], 0, "classes the transactions do not use are skipped");
	cr_assert_float_eq(r.raw_per_txn,
			   2.0 * r.raw_ns[REMORA_OP_READ] + r.raw_ns[REMORA_OP_WRITE] +
				   0.5 * r.raw_ns[REMORA_OP_CAS], 1e-6);
	cr_assert_float_eq(r.ratio, r.ns_per_txn / r.raw_per_txn, 1e-9);
	cs_report(&w, 0, verbs, bytes, 1u << 20, &r);
	cr_assert_not(r.have, "nothing committed: no report");
}
