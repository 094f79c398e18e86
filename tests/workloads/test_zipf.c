// SPDX-License-Identifier: MIT
/*
 * The key generators of the workloads: Zipf (Gray et al. below theta 1, rejection-inversion
 * from theta 1), the zeta approximation behind Gray's setup, uniform draws, and the key
 * scrambling bijection. Seeds are fixed, so every bound below is deterministic.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "workload.h"
#include "zipf.h"

#define N_RANKS 1000
#define SAMPLES 2000000

/* Total-variation distance between sampled frequencies and the exact pmf. */
static double tv_distance(const struct wl_zipf *z, uint64_t seed)
{
	static uint64_t cnt[N_RANKS];
	struct wl_rng r;
	double tv = 0.0;

	memset(cnt, 0, sizeof(cnt));
	wl_rng_seed(&r, seed, 7);
	for (unsigned i = 0; i < SAMPLES; i++) {
		uint64_t k = wl_zipf_next(z, &r);

		cr_assert_lt(k, N_RANKS, "rank %llu out of range", (unsigned long long)k);
		cnt[k]++;
	}
	for (unsigned k = 0; k < N_RANKS; k++)
		tv += fabs((double)cnt[k] / SAMPLES - wl_zipf_pmf(z, k));
	return tv / 2.0;
}

Test(zipf, zeta_tail_matches_exact_sum)
{
	const double thetas[] = { 0.5, 0.99, 1.0, 1.2 };

	for (unsigned t = 0; t < 4; t++) {
		uint64_t n = 400000;
		double exact = 0.0;

		for (uint64_t i = n; i >= 1; i--) /* smallest terms first */
			exact += pow((double)i, -thetas[t]);
		cr_expect_float_eq(wl_zeta(n, thetas[t]), exact, 1e-9 * exact, "theta %g",
				   thetas[t]);
	}
}

Test(zipf, rejection_inversion_is_exact)
{
	const double thetas[] = { 0.5, 0.99, 1.0, 1.22, 2.0 };

	for (unsigned t = 0; t < 5; t++) {
		struct wl_zipf z;

		cr_assert_eq(wl_zipf_init_method(&z, N_RANKS, thetas[t], WL_ZIPF_REJINV), 0);
		/* sampling noise alone is ~0.005 at 2M samples over 1000 ranks */
		cr_expect_lt(tv_distance(&z, 11), 0.01, "theta %g", thetas[t]);
	}
}

Test(zipf, gray_matches_head_and_is_close)
{
	const double thetas[] = { 0.3, 0.8, 0.99 };

	for (unsigned t = 0; t < 3; t++) {
		struct wl_zipf z;
		struct wl_rng r;
		uint64_t head[2] = { 0, 0 };

		cr_assert_eq(wl_zipf_init_method(&z, N_RANKS, thetas[t], WL_ZIPF_GRAY), 0);
		/* Gray's method is exact for ranks 0 and 1 and approximates the tail */
		wl_rng_seed(&r, 5, 1);
		for (unsigned i = 0; i < SAMPLES; i++) {
			uint64_t k = wl_zipf_next(&z, &r);

			if (k < 2)
				head[k]++;
		}
		for (unsigned k = 0; k < 2; k++)
			cr_expect_float_eq((double)head[k] / SAMPLES, wl_zipf_pmf(&z, k),
					   0.03 * wl_zipf_pmf(&z, k), "theta %g rank %u",
					   thetas[t], k);
		cr_expect_lt(tv_distance(&z, 13), 0.03, "theta %g", thetas[t]);
	}
}

Test(zipf, default_method_by_theta)
{
	struct wl_zipf z;

	cr_assert_eq(wl_zipf_init(&z, 100, 0.0), 0);
	cr_expect_eq(z.method, WL_ZIPF_UNIFORM);
	cr_assert_eq(wl_zipf_init(&z, 100, 0.99), 0);
	cr_expect_eq(z.method, WL_ZIPF_GRAY);
	cr_assert_eq(wl_zipf_init(&z, 100, 1.0), 0);
	cr_expect_eq(z.method, WL_ZIPF_REJINV);
	cr_assert_eq(wl_zipf_init(&z, 1, 0.99), 0);
	cr_expect_eq(wl_zipf_next(&z, &(struct wl_rng){ { 1, 2, 3, 4 } }), 0);
}

Test(zipf, rejects_bad_parameters)
{
	struct wl_zipf z;

	cr_expect_eq(wl_zipf_init(&z, 0, 0.5), -EINVAL);
	cr_expect_eq(wl_zipf_init(&z, 10, -0.1), -EINVAL);
	cr_expect_eq(wl_zipf_init(&z, 10, NAN), -EINVAL);
	cr_expect_eq(wl_zipf_init(&z, 10, INFINITY), -EINVAL);
	cr_expect_eq(wl_zipf_init_method(&z, 10, 1.5, WL_ZIPF_GRAY), -EINVAL);
}

Test(zipf, uniform_covers_range_evenly)
{
	struct wl_rng r;
	uint64_t cnt[10] = { 0 };

	wl_rng_seed(&r, 3, 3);
	for (unsigned i = 0; i < 1000000; i++) {
		uint64_t k = wl_rng_below(&r, 10);

		cr_assert_lt(k, 10);
		cnt[k]++;
	}
	for (unsigned k = 0; k < 10; k++)
		cr_expect_float_eq(cnt[k] / 1e6, 0.1, 0.005, "bucket %u", k);
}

Test(zipf, scrambled_keys_are_a_bijection)
{
	const uint64_t sizes[] = { 3, 10, 1000, 4096, 99991 };

	for (unsigned s = 0; s < 5; s++) {
		uint64_t n = sizes[s];
		uint8_t *seen = calloc(n, 1);
		struct wl_keydist kd;
		struct wl wl = { 0 };

		cr_assert_not_null(seen);
		cr_assert_eq(wl_keydist_init(&wl, &kd, n, 0.99, true), 0);
		cr_assert(kd.scramble);
		for (uint64_t rank = 0; rank < n; rank++) {
			uint64_t key = (uint64_t)(((unsigned __int128)rank * kd.mul + kd.add) % n);

			cr_assert_lt(key, n);
			cr_assert_eq(seen[key], 0, "n %llu: key %llu twice", (unsigned long long)n,
				     (unsigned long long)key);
			seen[key] = 1;
		}
		free(seen);
	}
}
