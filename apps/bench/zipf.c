// SPDX-License-Identifier: MIT
#include "zipf.h"

#include <errno.h>
#include <math.h>

#define ZETA_EXACT_TERMS 65536u

/* Sum of x^-theta for integer x in [a, b], by Euler-Maclaurin with two correction terms. */
static double zeta_tail(double a, double b, double theta)
{
	double integral, ends, d1, d3;

	if (theta == 1.0)
		integral = log(b / a);
	else
		integral = (pow(b, 1.0 - theta) - pow(a, 1.0 - theta)) / (1.0 - theta);
	ends = (pow(a, -theta) + pow(b, -theta)) / 2.0;
	/* f'(x) = -theta x^(-theta-1); f'''(x) = -theta (theta+1) (theta+2) x^(-theta-3) */
	d1 = -theta * (pow(b, -theta - 1.0) - pow(a, -theta - 1.0));
	d3 = -theta * (theta + 1.0) * (theta + 2.0) * (pow(b, -theta - 3.0) - pow(a, -theta - 3.0));
	return integral + ends + d1 / 12.0 - d3 / 720.0;
}

double wl_zeta(uint64_t n, double theta)
{
	uint64_t exact = n < ZETA_EXACT_TERMS ? n : ZETA_EXACT_TERMS - 1;
	double sum = 0.0;

	/* Smallest terms first would be more precise, but 2^16 terms in double lose < 1e-12. */
	for (uint64_t i = 1; i <= exact; i++)
		sum += pow((double)i, -theta);
	if (n > exact)
		sum += zeta_tail((double)exact + 1.0, (double)n, theta);
	return sum;
}

/* ---- Gray et al. ------------------------------------------------------------------------ */

static void gray_init(struct wl_zipf *z)
{
	double zeta2 = 1.0 + pow(2.0, -z->theta);

	z->zetan = wl_zeta(z->n, z->theta);
	z->alpha = 1.0 / (1.0 - z->theta);
	z->eta = (1.0 - pow(2.0 / (double)z->n, 1.0 - z->theta)) / (1.0 - zeta2 / z->zetan);
	z->two_cut = 1.0 + pow(0.5, z->theta);
}

static uint64_t gray_next(const struct wl_zipf *z, struct wl_rng *r)
{
	double u = wl_rng_double(r);
	double uz = u * z->zetan;
	uint64_t rank;

	if (uz < 1.0)
		return 0;
	if (uz < z->two_cut)
		return 1;
	rank = (uint64_t)((double)z->n * pow(z->eta * u - z->eta + 1.0, z->alpha));
	return rank < z->n ? rank : z->n - 1;
}

/* ---- rejection-inversion (Hoermann and Derflinger) -------------------------------------- */

/* expm1(x) / x, continuous at 0 */
static double helper_expm1_div(double x)
{
	return fabs(x) > 1e-8 ? expm1(x) / x : 1.0 + x / 2.0 + x * x / 6.0;
}

/* log1p(x) / x, continuous at 0 */
static double helper_log1p_div(double x)
{
	return fabs(x) > 1e-8 ? log1p(x) / x : 1.0 - x / 2.0 + x * x / 3.0;
}

/* h(x) = x^-s, the hat function's density */
static double ri_h(double s, double x)
{
	return exp(-s * log(x));
}

/* H(x) = integral of h from 1 to x, written to stay exact at s == 1 */
static double ri_hint(double s, double x)
{
	double lx = log(x);

	return helper_expm1_div((1.0 - s) * lx) * lx;
}

static double ri_hint_inv(double s, double y)
{
	double t = y * (1.0 - s);

	if (t < -1.0)
		t = -1.0; /* rounding at the far end of the range */
	return exp(helper_log1p_div(t) * y);
}

static void rejinv_init(struct wl_zipf *z)
{
	double s = z->theta;

	z->h_x1 = ri_hint(s, 1.5) - 1.0;
	z->h_n = ri_hint(s, (double)z->n + 0.5);
	z->s = 2.0 - ri_hint_inv(s, ri_hint(s, 2.5) - ri_h(s, 2.0));
}

static uint64_t rejinv_next(const struct wl_zipf *z, struct wl_rng *r)
{
	double s = z->theta;

	for (;;) {
		double u = z->h_n + wl_rng_double(r) * (z->h_x1 - z->h_n);
		double x = ri_hint_inv(s, u);
		double kd = floor(x + 0.5);
		uint64_t k;

		if (kd < 1.0)
			kd = 1.0;
		else if (kd > (double)z->n)
			kd = (double)z->n;
		k = (uint64_t)kd;
		if (kd - x <= z->s || u >= ri_hint(s, kd + 0.5) - ri_h(s, kd))
			return k - 1;
	}
}

/* ---- public ----------------------------------------------------------------------------- */

int wl_zipf_init_method(struct wl_zipf *z, uint64_t n, double theta, enum wl_zipf_method m)
{
	if (n == 0 || !isfinite(theta) || theta < 0.0 || theta > 10.0)
		return -EINVAL;
	if (m == WL_ZIPF_GRAY && !(theta > 0.0 && theta < 1.0))
		return -EINVAL;
	if (m == WL_ZIPF_REJINV && theta <= 0.0)
		return -EINVAL;
	*z = (struct wl_zipf){ .n = n, .theta = theta, .method = m };
	if (n <= 1)
		z->method = WL_ZIPF_UNIFORM;
	else if (m == WL_ZIPF_GRAY)
		gray_init(z);
	else if (m == WL_ZIPF_REJINV)
		rejinv_init(z);
	return 0;
}

int wl_zipf_init(struct wl_zipf *z, uint64_t n, double theta)
{
	enum wl_zipf_method m = WL_ZIPF_REJINV;

	if (theta == 0.0)
		m = WL_ZIPF_UNIFORM;
	else if (theta < 1.0)
		m = WL_ZIPF_GRAY;
	return wl_zipf_init_method(z, n, theta, m);
}

uint64_t wl_zipf_next(const struct wl_zipf *z, struct wl_rng *r)
{
	switch (z->method) {
	case WL_ZIPF_GRAY:
		return gray_next(z, r);
	case WL_ZIPF_REJINV:
		return rejinv_next(z, r);
	case WL_ZIPF_UNIFORM:
	default:
		return wl_rng_below(r, z->n);
	}
}

double wl_zipf_pmf(const struct wl_zipf *z, uint64_t rank)
{
	if (rank >= z->n)
		return 0.0;
	if (z->method == WL_ZIPF_UNIFORM)
		return 1.0 / (double)z->n;
	return pow((double)(rank + 1), -z->theta) / wl_zeta(z->n, z->theta);
}
