/* SPDX-License-Identifier: MIT */
/*
 * Zipf-distributed ranks: P(rank = i) proportional to 1 / (i + 1)^theta, i in [0, n).
 *
 * theta in (0, 1): the method of Gray et al., "Quickly generating billion-record synthetic
 * databases" (SIGMOD'94), the generator YCSB and the FORD/Motor/LOTUS workloads use: one
 * uniform draw and one pow() per sample after an O(1) setup (zeta(n) computed with an
 * Euler-Maclaurin tail, so setup stays fast for billions of keys).
 * theta >= 1 (CREST sweeps up to 1.22, where Gray's formula is undefined or inaccurate):
 * rejection-inversion of Hoermann and Derflinger (ACM TOMACS 1996), exact for any theta > 0.
 * theta == 0: uniform.
 */
#ifndef REMORA_APPS_ZIPF_H
#define REMORA_APPS_ZIPF_H

#include <stdint.h>

#include "rng.h"

enum wl_zipf_method {
	WL_ZIPF_UNIFORM,
	WL_ZIPF_GRAY,
	WL_ZIPF_REJINV,
};

struct wl_zipf {
	uint64_t n;
	double theta;
	enum wl_zipf_method method;
	/* Gray et al. */
	double zetan, alpha, eta, two_cut;
	/* rejection-inversion */
	double h_x1, h_n, s;
};

/* zeta(n, theta) = sum_{i=1..n} i^-theta (exact below 2^16 terms, Euler-Maclaurin above). */
double wl_zeta(uint64_t n, double theta);

/*
 * Prepares a generator over n ranks. Returns 0, or -EINVAL when n == 0 or theta is negative,
 * not finite or above 10 (the tool's documented range).
 */
int wl_zipf_init(struct wl_zipf *z, uint64_t n, double theta);

/* Forces a method (tests compare both on the same theta); -EINVAL where it does not apply. */
int wl_zipf_init_method(struct wl_zipf *z, uint64_t n, double theta, enum wl_zipf_method m);

/* Next rank in [0, n): rank 0 is the most popular. */
uint64_t wl_zipf_next(const struct wl_zipf *z, struct wl_rng *r);

/* Exact probability of a rank (for tests): (rank + 1)^-theta / zeta(n, theta). */
double wl_zipf_pmf(const struct wl_zipf *z, uint64_t rank);

#endif
