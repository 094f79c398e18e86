/* SPDX-License-Identifier: MIT */
/* Benchmark helpers: see benchutil.h. */
#include "benchutil.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- histogram ------------------------------------------------------------------------- */

struct bu_hist *bu_hist_new(void)
{
	return calloc(1, sizeof(struct bu_hist));
}

void bu_hist_reset(struct bu_hist *h)
{
	memset(h, 0, sizeof(*h));
}

void bu_hist_merge(struct bu_hist *dst, const struct bu_hist *src)
{
	if (!src->count)
		return;
	for (unsigned i = 0; i < BU_HIST_BUCKETS; i++)
		dst->buckets[i] += src->buckets[i];
	if (!dst->count || src->min < dst->min)
		dst->min = src->min;
	if (src->max > dst->max)
		dst->max = src->max;
	dst->count += src->count;
	dst->sum += src->sum;
}

/* Smallest and largest value that map to bucket i. */
static void bucket_range(unsigned i, uint64_t *lo, uint64_t *hi)
{
	unsigned shift;

	if (i < BU_HIST_SUB) {
		*lo = *hi = i;
		return;
	}
	shift = i / BU_HIST_SUB - 1;
	*lo = (uint64_t)(BU_HIST_SUB + i % BU_HIST_SUB) << shift;
	*hi = *lo + ((UINT64_C(1) << shift) - 1);
}

uint64_t bu_hist_quantile(const struct bu_hist *h, double q)
{
	uint64_t rank, seen = 0, lo, hi, v;

	if (!h->count)
		return 0;
	if (!(q > 0))
		return h->min;
	if (q >= 1)
		return h->max;
	/* The value of rank ceil(q * count), counted from 1. */
	rank = (uint64_t)ceil(q * (double)h->count);
	if (rank == 0)
		rank = 1;
	for (unsigned i = 0; i < BU_HIST_BUCKETS; i++) {
		seen += h->buckets[i];
		if (seen < rank)
			continue;
		bucket_range(i, &lo, &hi);
		v = lo + (hi - lo) / 2;
		return v < h->min ? h->min : v > h->max ? h->max : v;
	}
	return h->max;
}

double bu_hist_mean(const struct bu_hist *h)
{
	return h->count ? (double)h->sum / (double)h->count : 0.0;
}

/* ---- time ------------------------------------------------------------------------------ */

uint64_t bu_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t bu_thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double ticks_per_ns;

void bu_ticks_calibrate(void)
{
	uint64_t t0, c0, t1, c1;

	if (ticks_per_ns > 0)
		return;
	t0 = bu_now_ns();
	c0 = bu_ticks();
	do
		t1 = bu_now_ns();
	while (t1 - t0 < 20 * 1000 * 1000);
	c1 = bu_ticks();
	ticks_per_ns = (double)(c1 - c0) / (double)(t1 - t0);
	if (!(ticks_per_ns > 0))
		ticks_per_ns = 1.0;
}

double bu_ticks_per_ns(void)
{
	if (!(ticks_per_ns > 0))
		bu_ticks_calibrate();
	return ticks_per_ns;
}

/* ---- parsing --------------------------------------------------------------------------- */

static int fail(char *err, size_t errlen, const char *what, const char *s)
{
	snprintf(err, errlen, "'%s' is not %s", s, what);
	return -1;
}

/* Decimal number with an optional fraction; *end set after it. No sign, no blanks, no exponent. */
static int parse_decimal(const char *s, long double *out, const char **end)
{
	const char *p = s;
	long double v = 0, scale = 1;
	bool digits = false;

	while (*p >= '0' && *p <= '9') {
		v = v * 10 + (*p++ - '0');
		digits = true;
	}
	if (*p == '.') {
		p++;
		while (*p >= '0' && *p <= '9') {
			scale /= 10;
			v += (*p++ - '0') * scale;
			digits = true;
		}
	}
	if (!digits)
		return -1;
	*out = v;
	*end = p;
	return 0;
}

int bu_parse_size(const char *s, uint64_t *out, char *err, size_t errlen)
{
	static const char *const what = "a size (bytes, or with K/M/G/T, e.g. 64K, 1G)";
	const char *p;
	long double v;
	unsigned shift = 0;

	if (!s || parse_decimal(s, &v, &p))
		return fail(err, errlen, what, s ? s : "");
	switch (*p) {
	case 'k': case 'K': shift = 10; p++; break;
	case 'm': case 'M': shift = 20; p++; break;
	case 'g': case 'G': shift = 30; p++; break;
	case 't': case 'T': shift = 40; p++; break;
	default: break;
	}
	if (shift && p[0] == 'i' && p[1] == 'B')
		p += 2;
	else if (*p == 'B' || *p == 'b')
		p++;
	if (*p)
		return fail(err, errlen, what, s);
	v *= (long double)(UINT64_C(1) << shift);
	if (v < 1 || v > 18446744073709551615.0L || v != floorl(v)) {
		snprintf(err, errlen, "'%s' is not a whole number of bytes >= 1 that fits 64 bits", s);
		return -1;
	}
	*out = (uint64_t)v;
	return 0;
}

int bu_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out, char *err,
		 size_t errlen)
{
	uint64_t v = 0;
	const char *p = s;

	if (!s || !*s)
		return fail(err, errlen, "an integer", s ? s : "");
	for (; *p; p++) {
		if (*p < '0' || *p > '9')
			return fail(err, errlen, "an integer", s);
		if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10) {
			snprintf(err, errlen, "'%s' is too large (at most %llu)", s,
				 (unsigned long long)max);
			return -1;
		}
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (v < min || v > max) {
		snprintf(err, errlen, "%llu is outside %llu..%llu", (unsigned long long)v,
			 (unsigned long long)min, (unsigned long long)max);
		return -1;
	}
	*out = v;
	return 0;
}

int bu_check_out_path(const char *cmd, const char *flag, const char *path)
{
	char dir[4096];
	const char *slash = strrchr(path, '/');
	struct stat st;

	if (!*path || path[strlen(path) - 1] == '/') {
		fprintf(stderr, "remora %s: %s '%s': needs a file name\n", cmd, flag, path);
		return 2;
	}
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else
		snprintf(dir, sizeof(dir), "%.*s", slash == path ? 1 : (int)(slash - path), path);
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "remora %s: %s %s: directory '%s' %s\n", cmd, flag, path, dir,
			errno == ENOENT || !errno ? "does not exist" : strerror(errno));
		return 2;
	}
	if (access(dir, W_OK | X_OK) < 0) {
		fprintf(stderr, "remora %s: %s %s: cannot write in '%s': %s\n", cmd, flag, path,
			dir, strerror(errno));
		return 2;
	}
	return 0;
}

int bu_parse_seconds(const char *s, double *out, char *err, size_t errlen)
{
	static const char *const what = "a duration (seconds, or with ms/s/m, e.g. 0.5, 1500ms)";
	const char *p;
	long double v;

	if (!s || parse_decimal(s, &v, &p))
		return fail(err, errlen, what, s ? s : "");
	if (strcmp(p, "ms") == 0)
		v /= 1000;
	else if (strcmp(p, "m") == 0 || strcmp(p, "min") == 0)
		v *= 60;
	else if (*p && strcmp(p, "s") != 0)
		return fail(err, errlen, what, s);
	if (v > 86400) {
		snprintf(err, errlen, "'%s' is longer than a day", s);
		return -1;
	}
	*out = (double)v;
	return 0;
}

void bu_format_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned u = 0;

	while (u + 1 < sizeof(units) / sizeof(units[0]) && bytes >= 1024 && bytes % 1024 == 0) {
		bytes /= 1024;
		u++;
	}
	snprintf(buf, len, "%llu %s", (unsigned long long)bytes, units[u]);
}

/* ---- JSON ------------------------------------------------------------------------------ */

void bu_json_init(struct bu_json *j, FILE *f)
{
	memset(j, 0, sizeof(*j));
	j->f = f;
	j->first[0] = true;
}

static void indent(struct bu_json *j)
{
	fputc('\n', j->f);
	for (unsigned i = 0; i < j->depth; i++)
		fputs("  ", j->f);
}

static void put_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\t': fputs("\\t", f); break;
		case '\r': fputs("\\r", f); break;
		default:
			if (*p < 0x20)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
	}
	fputc('"', f);
}

/* Comma, newline, indentation and "key": before a value (the document itself has none). */
static void value_prefix(struct bu_json *j, const char *key)
{
	if (j->depth > 0) {
		if (!j->first[j->depth])
			fputc(',', j->f);
		indent(j);
		if (key) {
			put_string(j->f, key);
			fputs(": ", j->f);
		}
	}
	j->first[j->depth] = false;
}

static void open_scope(struct bu_json *j, const char *key, char ch)
{
	value_prefix(j, key);
	fputc(ch, j->f);
	if (j->depth + 1 < BU_JSON_DEPTH)
		j->depth++;
	j->first[j->depth] = true;
}

static void close_scope(struct bu_json *j, char ch)
{
	bool empty = j->first[j->depth];

	if (j->depth)
		j->depth--;
	if (!empty)
		indent(j);
	fputc(ch, j->f);
}

void bu_json_obj_begin(struct bu_json *j, const char *key)
{
	open_scope(j, key, '{');
}

void bu_json_obj_end(struct bu_json *j)
{
	close_scope(j, '}');
}

void bu_json_arr_begin(struct bu_json *j, const char *key)
{
	open_scope(j, key, '[');
}

void bu_json_arr_end(struct bu_json *j)
{
	close_scope(j, ']');
}

void bu_json_str(struct bu_json *j, const char *key, const char *val)
{
	value_prefix(j, key);
	if (val)
		put_string(j->f, val);
	else
		fputs("null", j->f);
}

void bu_json_u64(struct bu_json *j, const char *key, uint64_t val)
{
	value_prefix(j, key);
	fprintf(j->f, "%llu", (unsigned long long)val);
}

void bu_json_i64(struct bu_json *j, const char *key, int64_t val)
{
	value_prefix(j, key);
	fprintf(j->f, "%lld", (long long)val);
}

void bu_json_f64(struct bu_json *j, const char *key, double val)
{
	value_prefix(j, key);
	if (isfinite(val))
		fprintf(j->f, "%.9g", val);
	else
		fputs("null", j->f);
}

void bu_json_bool(struct bu_json *j, const char *key, bool val)
{
	value_prefix(j, key);
	fputs(val ? "true" : "false", j->f);
}

int bu_json_finish(struct bu_json *j)
{
	fputc('\n', j->f);
	if (fflush(j->f) || ferror(j->f))
		return -EIO;
	return 0;
}
