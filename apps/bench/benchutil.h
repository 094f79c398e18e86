/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the benchmark commands (`remora verbs`, `remora bench`): a log-linear
 * latency histogram, a cheap timestamp counter, a small PRNG, parsers for sizes, counts and
 * durations with one-line errors, and a streaming JSON writer. Prefix bu_ ("bench util").
 *
 * Why a histogram of our own: Debian packages HdrHistogram only for Java and Go, not C. The one
 * here has the same idea (log-linear buckets, bounded relative error, mergeable, fixed memory)
 * in ~100 lines.
 */
#ifndef REMORA_APPS_BENCHUTIL_H
#define REMORA_APPS_BENCHUTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* ---- histogram ------------------------------------------------------------------------- */

/*
 * Values below 2^BU_HIST_SUB_BITS are exact; above, each power of two is split into
 * 2^BU_HIST_SUB_BITS buckets, so a reported percentile is within 1/128 (0.8%) of the truth.
 * Covers every uint64_t value; 7424 buckets (58 KiB).
 */
#define BU_HIST_SUB_BITS 7
#define BU_HIST_SUB (1u << BU_HIST_SUB_BITS)
#define BU_HIST_BUCKETS ((65u - BU_HIST_SUB_BITS) * BU_HIST_SUB)

struct bu_hist {
	uint64_t count;
	uint64_t sum; /* exact, for the mean */
	uint64_t min, max;
	uint64_t buckets[BU_HIST_BUCKETS];
};

/* Returns a zeroed histogram or NULL (out of memory); release with free(). */
struct bu_hist *bu_hist_new(void);
void bu_hist_reset(struct bu_hist *h);

static inline unsigned bu_hist_index(uint64_t v)
{
	unsigned e, shift;

	if (v < BU_HIST_SUB)
		return (unsigned)v;
	e = 63u - (unsigned)__builtin_clzll(v);
	shift = e - BU_HIST_SUB_BITS;
	return (shift + 1) * BU_HIST_SUB + (unsigned)((v >> shift) - BU_HIST_SUB);
}

static inline void bu_hist_record(struct bu_hist *h, uint64_t v)
{
	h->buckets[bu_hist_index(v)]++;
	h->count++;
	h->sum += v;
	if (v < h->min || h->count == 1)
		h->min = v;
	if (v > h->max)
		h->max = v;
}

/* dst += src. */
void bu_hist_merge(struct bu_hist *dst, const struct bu_hist *src);
/* The value at quantile q in [0, 1] (0.5: median), clamped to [min, max]; 0 when empty. */
uint64_t bu_hist_quantile(const struct bu_hist *h, double q);
double bu_hist_mean(const struct bu_hist *h);

/* ---- time ------------------------------------------------------------------------------ */

/* CLOCK_MONOTONIC in ns. */
uint64_t bu_now_ns(void);
/* CPU time the calling thread has used, in ns (time it was descheduled does not count). */
uint64_t bu_thread_cpu_ns(void);

/*
 * A timestamp counter for per-operation latencies: the TSC on x86-64, CNTVCT on aarch64
 * (~10 ns to read, where clock_gettime costs ~20-30 ns), else CLOCK_MONOTONIC. Convert
 * differences with bu_ticks_to_ns() after bu_ticks_calibrate() has run once.
 */
static inline uint64_t bu_ticks(void)
{
#if defined(__x86_64__)
	uint32_t lo, hi, aux;

	/*
	 * rdtscp waits until every earlier instruction has executed and its loads are done, so
	 * a load that misses is counted in the interval it belongs to (plain rdtsc runs ahead
	 * of it); the lfence keeps later instructions from starting before the read.
	 */
	__asm__ volatile("rdtscp; lfence" : "=a"(lo), "=d"(hi), "=c"(aux) : : "memory");
	return ((uint64_t)hi << 32) | lo;
#elif defined(__aarch64__)
	uint64_t v;

	/* dsb: earlier memory accesses complete; isb: the counter is read after them. */
	__asm__ volatile("dsb ish; isb; mrs %0, cntvct_el0" : "=r"(v) : : "memory");
	return v;
#else
	return bu_now_ns();
#endif
}

/*
 * The same counter without waiting for earlier instructions, for intervals of microseconds
 * (a transaction's latency) where a few ns of skew do not matter: about half the cost of
 * bu_ticks() (~12 against ~28 ns on the development VM), and it does not stall the pipeline.
 */
static inline uint64_t bu_ticks_fast(void)
{
#if defined(__x86_64__)
	uint32_t lo, hi;

	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return ((uint64_t)hi << 32) | lo;
#elif defined(__aarch64__)
	uint64_t v;

	__asm__ volatile("mrs %0, cntvct_el0" : "=r"(v));
	return v;
#else
	return bu_now_ns();
#endif
}

/* Measures ticks per ns against CLOCK_MONOTONIC (takes ~20 ms the first time). */
void bu_ticks_calibrate(void);
double bu_ticks_per_ns(void);
static inline uint64_t bu_ticks_to_ns(uint64_t ticks)
{
	return (uint64_t)((double)ticks / bu_ticks_per_ns() + 0.5);
}

/* ---- PRNG ------------------------------------------------------------------------------ */

/* splitmix64: fast, full-period, and any seed is fine; the same seed gives the same stream. */
struct bu_rng {
	uint64_t s;
};

static inline void bu_rng_seed(struct bu_rng *r, uint64_t seed)
{
	r->s = seed;
}

static inline uint64_t bu_rng_next(struct bu_rng *r)
{
	uint64_t z = (r->s += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Uniform in [0, n), n > 0 (Lemire's multiply-shift; bias below 2^-32 for n < 2^32). */
static inline uint64_t bu_rng_below(struct bu_rng *r, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)bu_rng_next(r) * n) >> 64);
}

/* ---- parsing --------------------------------------------------------------------------- */

/*
 * Parsers for command-line values. Each returns 0, or -1 after writing a one-line reason
 * (without the flag name) to err[errlen]. None accepts a sign, blank, or trailing junk.
 */
/* "4096", "64K", "1G", "2MiB", "1.5G": K/M/G/T are powers of 1024; result must be >= 1. */
int bu_parse_size(const char *s, uint64_t *out, char *err, size_t errlen);
/* A decimal integer in [min, max]. */
int bu_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out, char *err,
		 size_t errlen);
/*
 * An output file is checked before the work that fills it: its directory must exist and be
 * writable (a run of minutes must not end in "No such file or directory"). 0, or one line on
 * stderr ("remora <cmd>: <flag> <path>: ...") and 2.
 */
int bu_check_out_path(const char *cmd, const char *flag, const char *path);
/* Seconds: "2", "0.5", "1500ms", "3s", "1m"; in [0, 1 day]. */
int bu_parse_seconds(const char *s, double *out, char *err, size_t errlen);
/* Prints bytes as "1 GiB", "64 KiB", "4096 B" (exact units when they divide evenly). */
void bu_format_size(uint64_t bytes, char *buf, size_t len);

/* ---- JSON writer ----------------------------------------------------------------------- */

/*
 * Streams one JSON document to a FILE with commas and indentation handled. Keys are given
 * inside objects and NULL inside arrays. Nesting up to BU_JSON_DEPTH.
 */
#define BU_JSON_DEPTH 16

struct bu_json {
	FILE *f;
	unsigned depth;
	bool first[BU_JSON_DEPTH];
};

void bu_json_init(struct bu_json *j, FILE *f);
void bu_json_obj_begin(struct bu_json *j, const char *key);
void bu_json_obj_end(struct bu_json *j);
void bu_json_arr_begin(struct bu_json *j, const char *key);
void bu_json_arr_end(struct bu_json *j);
void bu_json_str(struct bu_json *j, const char *key, const char *val);
void bu_json_u64(struct bu_json *j, const char *key, uint64_t val);
void bu_json_i64(struct bu_json *j, const char *key, int64_t val);
/* Non-finite values are written as null (JSON has no NaN). */
void bu_json_f64(struct bu_json *j, const char *key, double val);
void bu_json_bool(struct bu_json *j, const char *key, bool val);
/* Ends the document with a newline; returns 0 or -errno if the stream had an error. */
int bu_json_finish(struct bu_json *j);

#endif
