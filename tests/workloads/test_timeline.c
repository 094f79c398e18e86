/* SPDX-License-Identifier: MIT */
/*
 * remora bench's kill-and-measure figures (apps/cli/bench_timeline.c) on a timeline made up
 * here: two compute nodes' result lines, aligned by wall clock and summed; a kill, the
 * survivors' drop, the dead bit seen, the recovery, the way back.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "../../apps/cli/bench_timeline.h"

#define T0 1000000u /* wall ms of node A's first bucket */

/* A result line: n buckets from t0, value f(i), and a watchdog event if seen_s > 0. */
static char *line(uint64_t t0, unsigned n, unsigned (*f)(unsigned), double seen_s, bool here)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);

	fprintf(m, "{\"tl_t0_ms\":%llu,\"tl\":[", (unsigned long long)t0);
	for (unsigned i = 0; i < n; i++)
		fprintf(m, "%s%u", i ? "," : "", f(i));
	fputc(']', m);
	if (seen_s > 0)
		fprintf(m, ",\"online\":{\"cn\":1,\"here\":%s,\"seen_s\":%.6f,\"total_ms\":5.0,"
			"\"logs_ms\":4.0,\"logs\":8}", here ? "true" : "false", seen_s);
	fputc('}', m);
	fclose(m);
	return buf;
}

/* 100 per ms, nothing from 1000 to 1030 ms (the kill at 1000), 50 until 1060, then 100. */
static unsigned shape(unsigned i)
{
	return i >= 1000 && i < 1030 ? 0 : i >= 1030 && i < 1060 ? 50 : 100;
}

static unsigned flat(unsigned i)
{
	(void)i;
	return 10;
}

Test(timeline, figures)
{
	struct btl t = { 0 };
	struct btl_figures g;
	char *a = line(T0, 3000, shape, (T0 + 1020) / 1000.0, true);
	char *b = line(T0 + 5, 2000, flat, (T0 + 1025) / 1000.0, false); /* starts 5 ms later */

	cr_assert_eq(btl_add(&t, a), 0);
	cr_assert_eq(btl_add(&t, b), 0);
	cr_assert_eq(t.t0_ms, T0);
	cr_assert_eq(t.len, 3000);
	cr_assert_eq(t.ms[4], 100);
	cr_assert_eq(t.ms[5], 110, "aligned by wall clock and summed");
	btl_figures(&t, (T0 + 1000) / 1000.0, &g);
	cr_assert_float_eq(g.kill_ms, 1000, 1e-6);
	cr_assert_float_eq(g.base_per_ms, 109.95, 1e-6, "%f", g.base_per_ms);
	cr_assert_float_eq(g.detect_ms, 20, 1e-3, "the earliest survivor: %f", g.detect_ms);
	cr_assert_float_eq(g.recovered_ms, 25, 1e-3, "%f", g.recovered_ms);
	cr_assert_float_eq(g.min_per_ms, 10, 1e-6, "%f", g.min_per_ms);
	/* 90% of 109.95: first reached by the window [1056, 1076) (4 ms at 60, 16 at 110) */
	cr_assert_float_eq(g.back90_ms, 76, 1e-6, "%f", g.back90_ms);
	btl_free(&t);
	free(a);
	free(b);
}

Test(timeline, no_kill_no_figures)
{
	struct btl t = { 0 };
	struct btl_figures g;
	char *a = line(T0, 100, flat, 0, false);

	cr_assert_eq(btl_add(&t, a), 0);
	btl_figures(&t, 0, &g);
	cr_assert_lt(g.kill_ms, 0);
	cr_assert_lt(g.back90_ms, 0);
	cr_assert_eq(btl_add(&t, "{\"job\":\"bench\"}"), 0, "a line without a timeline");
	cr_assert_eq(t.len, 100);
	btl_free(&t);
	free(a);
}

/*
 * A line without tl_t0_ms next to wall-clock ones would stretch the timeline from 0 to now
 * (about 1e12 buckets): refused, as is a start days away from the others; nothing is added.
 */
Test(timeline, mismatched_start_refused)
{
	struct btl t = { 0 };
	char *a = line(T0, 100, flat, 0, false);
	char *far = line(T0 + 100ull * 3600 * 1000, 100, flat, 0, false);

	cr_assert_eq(btl_add(&t, a), 0);
	cr_assert_eq(btl_add(&t, "{\"tl\":[1,2,3]}"), -ERANGE, "a timeline without a start");
	cr_assert_eq(btl_add(&t, far), -ERANGE, "a start 100 h after the others");
	cr_assert_eq(t.t0_ms, T0);
	cr_assert_eq(t.len, 100);
	btl_free(&t);
	free(a);
	free(far);
}
