// SPDX-License-Identifier: MIT
/*
 * `remora bench --compare`: exact verb counts of two sets of `--txns` runs, side by side.
 *
 * A run with --txns N and one coordinator does the same transactions on every backend (same
 * seed, same inputs, no contention), so whatever the transport counted must be the same
 * whichever backend carried it: that is what this checks, as counts (never rates). The
 * emulation verbs a backend adds (rdma's masked-CAS as READ + CAS, shm's arbiter routing)
 * and persist points (pmem) are not verbs of the protocol: they are shown, not compared.
 */
#include "benchcmp.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <remora/transport.h>

#define BCMP_MAX_FILES 64
#define BCMP_NOTE 512

static const char *const op_keys[REMORA_OP__COUNT] = { "read", "write", "cas", "faa", "mcas" };

/* Settings that decide which transactions run: they must match for the counts to. */
static const char *const setup_keys[] = {
	"workload", "params", "protocol", "txns", "seed", "mn", "cn", "threads", "coros",
	"replicas", NULL,
};

/* One bench document, as read from a file (or one point of a sweep file). */
struct bcmp_run {
	const char *file;
	json_t *doc; /* borrowed from the file's root */
	char extra[128]; /* a sweep point's values other than the protocol, or "" */
	uint64_t committed, attempted, user_aborted;
	uint64_t verbs[REMORA_OP__COUNT], bytes[REMORA_OP__COUNT], emulated[REMORA_OP__COUNT];
	uint64_t doorbells, persists;
};

struct bcmp_file {
	const char *path;
	json_t *root;
	struct bcmp_run *runs;
	unsigned nruns;
};

bool bcmp_requested(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return false;
		if (!strcmp(argv[i], "--compare"))
			return true;
	}
	return false;
}

static uint64_t u64_at(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v)
							       : 0;
}

static const char *str_at(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "";
}

static void ops_at(json_t *o, const char *key, uint64_t *out)
{
	json_t *obj = json_object_get(o, key);

	for (unsigned op = 0; op < REMORA_OP__COUNT; op++)
		out[op] = u64_at(obj, op_keys[op]);
}

/* Fills r from one bench document; 0, or 2 after a one-line error. */
static int run_read(struct bcmp_run *r, json_t *doc, const char *file, const char *what)
{
	r->file = file;
	r->doc = doc;
	if (!json_is_object(doc) || strcmp(str_at(doc, "tool"), "remora bench")) {
		fprintf(stderr, "remora bench --compare: %s%s: not a remora bench result\n", file,
			what);
		return 2;
	}
	if (str_at(doc, "error")[0]) {
		fprintf(stderr, "remora bench --compare: %s%s: the run failed: %s\n", file, what,
			str_at(doc, "error"));
		return 2;
	}
	if (!u64_at(doc, "txns") || !json_object_get(doc, "verbs_total") ||
	    !json_object_get(doc, "doorbells_total")) {
		fprintf(stderr, "remora bench --compare: %s%s: not a --txns run (the counts of a "
			"timed run depend on timing and cannot be compared)\n", file, what);
		return 2;
	}
	r->committed = u64_at(doc, "committed");
	r->attempted = u64_at(doc, "attempted");
	r->user_aborted = u64_at(doc, "user_aborted");
	ops_at(doc, "verbs_total", r->verbs);
	ops_at(doc, "bytes_total", r->bytes);
	ops_at(doc, "emulation_verbs_total", r->emulated);
	r->doorbells = u64_at(doc, "doorbells_total");
	r->persists = u64_at(doc, "persists_total");
	return 0;
}

/* "threads=2 coros=4": a sweep point's values, the protocol excepted (it has a column). */
static void point_extra(json_t *grid, unsigned p, unsigned npoints, char *out, size_t len)
{
	const char *key;
	json_t *vals;
	unsigned stride = npoints;
	size_t at = 0;

	out[0] = '\0';
	json_object_foreach(grid, key, vals) {
		size_t n = json_array_size(vals);
		const char *v;

		if (!n)
			continue;
		stride /= (unsigned)n;
		v = json_string_value(json_array_get(vals, (p / (stride ? stride : 1)) % n));
		if (!strcmp(key, "protocol") || !v || at >= len)
			continue;
		at += (size_t)snprintf(out + at, len - at, "%s%s=%s", at ? " " : "", key, v);
	}
}

/* Reads a bench document or a sweep file into f->runs; 0, or 2 after a one-line error. */
static int file_read(struct bcmp_file *f)
{
	json_error_t jerr;
	json_t *points;
	char what[32];

	f->root = json_load_file(f->path, 0, &jerr);
	if (!f->root) {
		fprintf(stderr, "remora bench --compare: %s: %s\n", f->path, jerr.text);
		return 2;
	}
	points = json_object_get(f->root, "points");
	f->nruns = json_is_array(points) ? (unsigned)json_array_size(points) : 1;
	f->runs = calloc(f->nruns ? f->nruns : 1, sizeof(*f->runs));
	if (!f->runs) {
		fprintf(stderr, "remora bench --compare: out of memory\n");
		return 2;
	}
	if (!json_is_array(points))
		return run_read(&f->runs[0], f->root, f->path, "");
	if (!f->nruns) {
		fprintf(stderr, "remora bench --compare: %s: a sweep without points\n", f->path);
		return 2;
	}
	/* json key order is kept by jansson, so the grid reads back in the sweep's key order */
	for (unsigned p = 0; p < f->nruns; p++) {
		snprintf(what, sizeof(what), " (point %u)", p + 1);
		if (run_read(&f->runs[p], json_array_get(points, p), f->path, what))
			return 2;
		point_extra(json_object_get(f->root, "sweep"), p, f->nruns, f->runs[p].extra,
			    sizeof(f->runs[p].extra));
	}
	return 0;
}

static void note_add(char *note, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note_add(char *note, const char *fmt, ...)
{
	size_t at = strlen(note);
	va_list ap;

	if (at + 1 >= BCMP_NOTE)
		return;
	if (at)
		at += (size_t)snprintf(note + at, BCMP_NOTE - at, "; ");
	va_start(ap, fmt);
	vsnprintf(note + at, BCMP_NOTE - at, fmt, ap);
	va_end(ap);
}

static void diff_u64(char *note, const char *what, uint64_t a, uint64_t b)
{
	if (a != b)
		note_add(note, "%s %" PRIu64 " vs %" PRIu64, what, a, b);
}

/* Writes what differs between a and b into note ("" when equal); true when equal. */
static bool runs_equal(const struct bcmp_run *a, const struct bcmp_run *b, char *note)
{
	char what[32];

	note[0] = '\0';
	for (const char *const *k = setup_keys; *k; k++)
		if (!json_equal(json_object_get(a->doc, *k), json_object_get(b->doc, *k)))
			note_add(note, "setting %s differs", *k);
	diff_u64(note, "committed", a->committed, b->committed);
	diff_u64(note, "attempts", a->attempted, b->attempted);
	diff_u64(note, "application aborts", a->user_aborted, b->user_aborted);
	for (unsigned op = 0; op < REMORA_OP__COUNT; op++) {
		snprintf(what, sizeof(what), "%s verbs", op_keys[op]);
		diff_u64(note, what, a->verbs[op], b->verbs[op]);
		snprintf(what, sizeof(what), "%s bytes", op_keys[op]);
		diff_u64(note, what, a->bytes[op], b->bytes[op]);
	}
	diff_u64(note, "doorbells", a->doorbells, b->doorbells);
	return note[0] == '\0';
}

static double per(uint64_t x, uint64_t n)
{
	return n ? (double)x / (double)n : 0.0;
}

static uint64_t sum_ops(const uint64_t *v)
{
	uint64_t s = 0;

	for (unsigned op = 0; op < REMORA_OP__COUNT; op++)
		s += v[op];
	return s;
}

static void cell(uint64_t a, uint64_t an, uint64_t b, uint64_t bn)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%.2f/%.2f", per(a, an), per(b, bn));
	printf(" %-11s", buf);
}

static void print_header(const struct bcmp_file *files, unsigned nfiles)
{
	for (unsigned side = 0; side < 2; side++) {
		const struct bcmp_run *r = &files[side].runs[0];

		printf("  %c  backend %s, profile %s:", side ? 'B' : 'A', str_at(r->doc, "backend"),
		       str_at(r->doc, "profile"));
		for (unsigned i = side; i < nfiles; i += 2)
			printf(" %s", files[i].path);
		putchar('\n');
	}
	printf("%-10s %-9s %9s", "workload", "protocol", "committed");
	for (unsigned op = 0; op < REMORA_OP__COUNT; op++)
		printf(" %-11s", op_keys[op]);
	printf(" %-11s %-11s %-11s %s\n", "doorbells", "emulated", "persists", "equal");
}

/* One row per pair of runs; returns true when equal. */
static bool print_row(const struct bcmp_run *a, const struct bcmp_run *b)
{
	char note[BCMP_NOTE];
	bool eq = runs_equal(a, b, note);

	printf("%-10s %-9s %9" PRIu64, str_at(a->doc, "workload"), str_at(a->doc, "protocol"),
	       a->committed);
	for (unsigned op = 0; op < REMORA_OP__COUNT; op++)
		cell(a->verbs[op], a->committed, b->verbs[op], b->committed);
	cell(a->doorbells, a->committed, b->doorbells, b->committed);
	cell(sum_ops(a->emulated), a->committed, sum_ops(b->emulated), b->committed);
	cell(a->persists, a->committed, b->persists, b->committed);
	printf(" %s%s%s\n", eq ? "yes" : "NO", a->extra[0] ? "  " : "", a->extra);
	if (!eq)
		printf("    differs: %s\n", note);
	for (unsigned side = 0; side < 2; side++) {
		const struct bcmp_run *r = side ? b : a;

		if (!sum_ops(r->emulated))
			continue;
		/* rdma: masked-CAS as READ + CAS; shm's arbiter mode: each atomic */
		printf("    %c emulation verbs/txn (%s):", side ? 'B' : 'A',
		       str_at(r->doc, "backend"));
		for (unsigned op = 0; op < REMORA_OP__COUNT; op++)
			if (r->emulated[op])
				printf(" %s %.2f", op_keys[op], per(r->emulated[op], r->committed));
		putchar('\n');
	}
	return eq;
}

static int usage_error(const char *msg)
{
	fprintf(stderr, "remora bench --compare: %s (usage: remora bench --compare A.json "
		"B.json [A2.json B2.json ...])\n", msg);
	return 2;
}

int bcmp_run(int argc, char **argv)
{
	struct bcmp_file files[BCMP_MAX_FILES] = { 0 };
	unsigned nfiles = 0, rows = 0, equal = 0;
	int rc = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--compare"))
			continue;
		if (!strncmp(argv[i], "--", 2))
			return usage_error("takes only result files");
		if (nfiles == BCMP_MAX_FILES)
			return usage_error("too many files");
		files[nfiles++].path = argv[i];
	}
	if (nfiles < 2 || nfiles % 2)
		return usage_error("needs result files in pairs");
	for (unsigned i = 0; i < nfiles && !rc; i++)
		rc = file_read(&files[i]);
	for (unsigned i = 0; i + 1 < nfiles && !rc; i += 2) {
		if (files[i].nruns != files[i + 1].nruns) {
			fprintf(stderr, "remora bench --compare: %s has %u runs, %s has %u\n",
				files[i].path, files[i].nruns, files[i + 1].path,
				files[i + 1].nruns);
			rc = 2;
		}
	}
	if (!rc) {
		printf("remora bench --compare: verbs per committed transaction, A/B\n");
		print_header(files, nfiles);
		for (unsigned i = 0; i < nfiles; i += 2) {
			for (unsigned p = 0; p < files[i].nruns; p++) {
				equal += print_row(&files[i].runs[p], &files[i + 1].runs[p]);
				rows++;
			}
		}
		printf("%u of %u equal (verbs, bytes, doorbells and outcomes; emulation verbs "
		       "and persists are not compared)\n", equal, rows);
		rc = equal == rows ? 0 : 1;
	}
	for (unsigned i = 0; i < nfiles; i++) {
		free(files[i].runs);
		json_decref(files[i].root);
	}
	return rc;
}
