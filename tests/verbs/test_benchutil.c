/* SPDX-License-Identifier: MIT */
/* apps/bench/benchutil: histogram accuracy and merging, parsers, PRNG, JSON writer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "apps/bench/benchutil.h"

static struct bu_hist *hist(void)
{
	struct bu_hist *h = bu_hist_new();

	cr_assert_not_null(h);
	return h;
}

Test(hist, small_values_are_exact)
{
	struct bu_hist *h = hist();

	for (uint64_t v = 0; v < BU_HIST_SUB; v++)
		bu_hist_record(h, v);
	cr_assert_eq(h->count, BU_HIST_SUB);
	cr_assert_eq(h->min, 0);
	cr_assert_eq(h->max, BU_HIST_SUB - 1);
	cr_assert_eq(bu_hist_quantile(h, 0.5), BU_HIST_SUB / 2 - 1);
	cr_assert_eq(bu_hist_quantile(h, 0.0), 0);
	cr_assert_eq(bu_hist_quantile(h, 1.0), BU_HIST_SUB - 1);
	free(h);
}

Test(hist, buckets_are_contiguous_and_monotonic)
{
	unsigned prev = 0;

	for (uint64_t v = 1; v < (1u << 20); v++) {
		unsigned i = bu_hist_index(v);

		cr_assert(i == prev || i == prev + 1, "value %llu: bucket %u after %u",
			  (unsigned long long)v, i, prev);
		prev = i;
	}
	cr_assert_lt(bu_hist_index(UINT64_MAX), BU_HIST_BUCKETS);
	cr_assert_eq(bu_hist_index(UINT64_MAX), BU_HIST_BUCKETS - 1);
}

Test(hist, quantiles_within_the_relative_error)
{
	struct bu_hist *h = hist();
	const double qs[] = { 0.1, 0.5, 0.9, 0.99, 0.999 };

	/* Values 1000..1000999: the exact quantile q is 1000 + q * 1e6 (up to rounding). */
	for (uint64_t v = 1000; v < 1001000; v++)
		bu_hist_record(h, v);
	for (unsigned i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
		double exact = 1000 + qs[i] * 1e6;
		double got = (double)bu_hist_quantile(h, qs[i]);

		cr_assert_lt(fabs(got - exact) / exact, 1.0 / BU_HIST_SUB, "q %g: %g vs %g", qs[i],
			     got, exact);
	}
	cr_assert_float_eq(bu_hist_mean(h), 501000 - 0.5, 1e-6);
	free(h);
}

Test(hist, merge_equals_recording_everything_in_one)
{
	struct bu_hist *a = hist(), *b = hist(), *all = hist();

	for (uint64_t v = 1; v < 100000; v += 7) {
		bu_hist_record(v % 3 ? a : b, v * 13);
		bu_hist_record(all, v * 13);
	}
	bu_hist_merge(a, b);
	cr_assert_eq(a->count, all->count);
	cr_assert_eq(a->sum, all->sum);
	cr_assert_eq(a->min, all->min);
	cr_assert_eq(a->max, all->max);
	cr_assert_eq(memcmp(a->buckets, all->buckets, sizeof(a->buckets)), 0);
	bu_hist_reset(b);
	cr_assert_eq(bu_hist_quantile(b, 0.5), 0, "an empty histogram reports 0");
	free(a);
	free(b);
	free(all);
}

Test(parse, sizes)
{
	const struct {
		const char *s;
		uint64_t v;
	} good[] = {
		{ "1", 1 }, { "4096", 4096 }, { "64K", 65536 }, { "64k", 65536 },
		{ "1M", 1u << 20 }, { "1G", 1u << 30 }, { "2GiB", UINT64_C(2) << 30 },
		{ "1.5K", 1536 }, { "8B", 8 }, { "1T", UINT64_C(1) << 40 },
	};
	const char *bad[] = { "", "0", "-1", "K", "1.3", "12Q", "1 G", "1GG", "0.1K",
			      "99999999999999999999", "100000000T" };
	char err[160];
	uint64_t v;

	for (unsigned i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		cr_assert_eq(bu_parse_size(good[i].s, &v, err, sizeof(err)), 0, "%s: %s", good[i].s,
			     err);
		cr_assert_eq(v, good[i].v, "%s", good[i].s);
	}
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 42;
		err[0] = '\0';
		cr_assert_eq(bu_parse_size(bad[i], &v, err, sizeof(err)), -1, "'%s' accepted", bad[i]);
		cr_assert_eq(v, 42, "output written on failure");
		cr_assert_neq(err[0], '\0');
		cr_assert_null(strchr(err, '\n'), "the error is one line");
	}
}

Test(parse, integers_and_seconds)
{
	char err[160];
	uint64_t v;
	double d;

	cr_assert_eq(bu_parse_u64("17", 1, 100, &v, err, sizeof(err)), 0);
	cr_assert_eq(v, 17);
	cr_assert_eq(bu_parse_u64("18446744073709551615", 0, UINT64_MAX, &v, err, sizeof(err)), 0);
	cr_assert_eq(v, UINT64_MAX);
	cr_assert_eq(bu_parse_u64("18446744073709551616", 0, UINT64_MAX, &v, err, sizeof(err)), -1);
	cr_assert_eq(bu_parse_u64("0", 1, 100, &v, err, sizeof(err)), -1);
	cr_assert_eq(bu_parse_u64("101", 1, 100, &v, err, sizeof(err)), -1);
	cr_assert_eq(bu_parse_u64("1x", 1, 100, &v, err, sizeof(err)), -1);
	cr_assert_eq(bu_parse_u64("-1", 0, 100, &v, err, sizeof(err)), -1);
	cr_assert_eq(bu_parse_u64("", 0, 100, &v, err, sizeof(err)), -1);

	cr_assert_eq(bu_parse_seconds("2", &d, err, sizeof(err)), 0);
	cr_assert_float_eq(d, 2.0, 1e-12);
	cr_assert_eq(bu_parse_seconds("0.25s", &d, err, sizeof(err)), 0);
	cr_assert_float_eq(d, 0.25, 1e-12);
	cr_assert_eq(bu_parse_seconds("1500ms", &d, err, sizeof(err)), 0);
	cr_assert_float_eq(d, 1.5, 1e-12);
	cr_assert_eq(bu_parse_seconds("2m", &d, err, sizeof(err)), 0);
	cr_assert_float_eq(d, 120.0, 1e-12);
	cr_assert_eq(bu_parse_seconds("2h", &d, err, sizeof(err)), -1);
	cr_assert_eq(bu_parse_seconds("-1", &d, err, sizeof(err)), -1);
	cr_assert_eq(bu_parse_seconds("100000", &d, err, sizeof(err)), -1);
}

Test(parse, format_size)
{
	char buf[32];

	bu_format_size(UINT64_C(1) << 30, buf, sizeof(buf));
	cr_assert_str_eq(buf, "1 GiB");
	bu_format_size(65536, buf, sizeof(buf));
	cr_assert_str_eq(buf, "64 KiB");
	bu_format_size(1536, buf, sizeof(buf));
	cr_assert_str_eq(buf, "1536 B");
}

Test(rng, same_seed_same_stream_and_bounded)
{
	struct bu_rng a, b;

	bu_rng_seed(&a, 99);
	bu_rng_seed(&b, 99);
	for (int i = 0; i < 1000; i++)
		cr_assert_eq(bu_rng_next(&a), bu_rng_next(&b));
	for (int i = 0; i < 100000; i++)
		cr_assert_lt(bu_rng_below(&a, 7), 7);
}

Test(json, document_layout_and_escapes)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	struct bu_json j;

	cr_assert_not_null(f);
	bu_json_init(&j, f);
	bu_json_obj_begin(&j, NULL);
	bu_json_str(&j, "s", "a\"b\\c\n");
	bu_json_u64(&j, "u", 18446744073709551615u);
	bu_json_i64(&j, "i", -5);
	bu_json_f64(&j, "f", 0.5);
	bu_json_f64(&j, "nan", NAN);
	bu_json_bool(&j, "b", true);
	bu_json_arr_begin(&j, "a");
	bu_json_u64(&j, NULL, 1);
	bu_json_obj_begin(&j, NULL);
	bu_json_obj_end(&j);
	bu_json_arr_end(&j);
	bu_json_arr_begin(&j, "empty");
	bu_json_arr_end(&j);
	bu_json_obj_end(&j);
	cr_assert_eq(bu_json_finish(&j), 0);
	fclose(f);
	cr_assert_str_eq(out, "{\n"
			      "  \"s\": \"a\\\"b\\\\c\\n\",\n"
			      "  \"u\": 18446744073709551615,\n"
			      "  \"i\": -5,\n"
			      "  \"f\": 0.5,\n"
			      "  \"nan\": null,\n"
			      "  \"b\": true,\n"
			      "  \"a\": [\n"
			      "    1,\n"
			      "    {}\n"
			      "  ],\n"
			      "  \"empty\": []\n"
			      "}\n");
	free(out);
}
