/* SPDX-License-Identifier: MIT */
/*
 * Per-coordinator pseudo-random numbers for workload generators: xoshiro256** seeded through
 * splitmix64 (Blackman and Vigna). Hand-written because it sits on the data path of every
 * generated transaction: a few cycles, no locks, no shared state, reproducible from a seed.
 */
#ifndef REMORA_APPS_RNG_H
#define REMORA_APPS_RNG_H

#include <stdint.h>

struct wl_rng {
	uint64_t s[4];
};

static inline uint64_t wl_splitmix64(uint64_t *x)
{
	uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Seeds from a base seed and a stream id, so every coordinator draws an independent stream. */
static inline void wl_rng_seed(struct wl_rng *r, uint64_t seed, uint64_t stream)
{
	uint64_t x = seed ^ (stream * UINT64_C(0xd1342543de82ef95));

	for (int i = 0; i < 4; i++)
		r->s[i] = wl_splitmix64(&x);
}

static inline uint64_t wl_rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static inline uint64_t wl_rng_next(struct wl_rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = wl_rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = wl_rotl(s[3], 45);
	return out;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double wl_rng_double(struct wl_rng *r)
{
	return (double)(wl_rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform in [0, bound), bound > 0 (Lemire's multiply-shift; bias below 2^-64 * bound). */
static inline uint64_t wl_rng_below(struct wl_rng *r, uint64_t bound)
{
	return (uint64_t)(((unsigned __int128)wl_rng_next(r) * bound) >> 64);
}

/* True with probability pct / 100. */
static inline int wl_rng_pct(struct wl_rng *r, unsigned pct)
{
	return wl_rng_below(r, 100) < pct;
}

#endif
