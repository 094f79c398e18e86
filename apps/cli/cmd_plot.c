/* SPDX-License-Identifier: MIT */
/*
 * `remora plot FILE... [--out DIR]`: turns `remora bench` results (single runs and `--sweep`
 * combined files) into PNG figures with gnuplot, one set per (backend, cost profile), since
 * results are comparable only under the same profile:
 *
 *   <workload>-latency-p50-<backend>-<profile>.png   throughput vs median latency, one line
 *   <workload>-latency-p99-<backend>-<profile>.png   per protocol (points in the order of
 *                                                    coordinators, as the papers draw them)
 *   throughput-<backend>-<profile>.png               peak throughput per workload, one bar
 *                                                    per protocol
 *   aborts-<backend>-<profile>.png                   abort rate by reason at the peak point
 *                                                    of each workload and protocol
 *   <workload>-utilization-<backend>-<profile>.png   throughput and utilization (busiest
 *                                                    memory node's atomics, compute CPU) vs
 *                                                    coordinators, one colour per protocol
 *   lockbench-<file>-throughput.png, -p99.png        `remora lockbench --json` rows:
 *                                                    against the swept field, one line per
 *                                                    lock type (bars when only the type
 *                                                    varies)
 *   timeline-<protocol>-<workload>-<backend>.png     a run with a timeline (remora bench
 *                                                    --kill): the survivors' commits per ms
 *                                                    around the kill, with detection,
 *                                                    recovery and back-to-90% marked
 *
 * A scaled cluster's profile is labelled with its scale (cx3-x40); a run under REMORA_MUTATE
 * is labelled protocol+mutation, so an unsafe variant never passes for the protocol.
 *
 * Every title names the backend and the profile; axes carry units. The script goes to
 * gnuplot's standard input (pngcairo terminal), data inline, so no temporary files are left.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "benchutil.h"
#include "cli.h"
#include "cmd.h"

#define PLOT_MAX_POINTS 4096
#define PLOT_NAME 32

enum { R_LOCKED, R_VALIDATION, R_USER, R_NOT_FOUND, R_OTHER, R__COUNT };
static const char *const reason_key[R__COUNT] = {
	"locked", "validation", "user", "not_found", "other",
};

struct pt {
	char workload[PLOT_NAME], protocol[PLOT_NAME], backend[PLOT_NAME], profile[PLOT_NAME];
	unsigned coords;          /* cn x threads x coros */
	double tput;              /* committed txn/s */
	double p50_us, p99_us;
	double abort_pct[R__COUNT]; /* percent of attempts */
	bool has_util;
	double atomic_pct, cpu_pct; /* busiest memory node's atomics; compute CPU */
};

struct plot {
	struct pt *pt;
	unsigned n;
	unsigned lb_rows; /* rows of `remora lockbench --json` files (drawn on their own) */
	const char *out;
	unsigned figures;
};

/* ---- reading results -------------------------------------------------------------------- */

static void copy_name(char *dst, json_t *v)
{
	const char *s = json_string_value(v);

	snprintf(dst, PLOT_NAME, "%s", s && *s ? s : "?");
	/* only characters that are safe in file names and gnuplot strings */
	for (char *c = dst; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' || *c == '.'))
			*c = '_';
}

static double jnum(json_t *o, const char *a, const char *b)
{
	json_t *v = json_object_get(o, a);

	if (b)
		v = json_object_get(v, b);
	return json_number_value(v);
}

/* Scale and mutation into the labels; utilization, when the result has it. */
static void label_point(struct pt *p, json_t *d)
{
	const char *mut = json_string_value(json_object_get(d, "mutate"));
	json_t *u = json_object_get(d, "utilization"), *mn;
	double k = jnum(d, "mn_scale", NULL);
	char buf[2 * PLOT_NAME + 8];
	size_t i;

	if (k > 1) {
		snprintf(buf, sizeof(buf), "%s-x%.0f", p->profile, k);
		buf[PLOT_NAME - 1] = '\0';
		memcpy(p->profile, buf, PLOT_NAME);
	}
	if (mut && *mut) {
		snprintf(buf, sizeof(buf), "%s+%s", p->protocol, mut);
		buf[PLOT_NAME - 1] = '\0';
		memcpy(p->protocol, buf, PLOT_NAME);
		for (char *c = p->protocol; *c; c++) /* safe in gnuplot strings */
			if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
			      (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' || *c == '+'))
				*c = '+';
	}
	if (!json_is_object(u))
		return;
	p->has_util = true;
	p->cpu_pct = 100.0 * jnum(u, "cpu", NULL);
	json_array_foreach(json_object_get(u, "mn"), i, mn)
		if (100.0 * jnum(mn, "atomic", NULL) > p->atomic_pct)
			p->atomic_pct = 100.0 * jnum(mn, "atomic", NULL);
}

/* One bench result object; points without committed transactions carry nothing to plot. */
static int add_point(struct plot *pl, json_t *d)
{
	struct pt *p;

	if (!json_is_object(d) || jnum(d, "committed", NULL) <= 0)
		return 0;
	if (pl->n == PLOT_MAX_POINTS)
		return -ENOSPC;
	p = &pl->pt[pl->n++];
	memset(p, 0, sizeof(*p));
	copy_name(p->workload, json_object_get(d, "workload"));
	copy_name(p->protocol, json_object_get(d, "protocol"));
	copy_name(p->backend, json_object_get(d, "backend"));
	copy_name(p->profile, json_object_get(d, "profile"));
	label_point(p, d);
	p->coords = (unsigned)(jnum(d, "cn", NULL) * jnum(d, "threads", NULL) *
			       jnum(d, "coros", NULL));
	p->tput = jnum(d, "committed_per_s", NULL);
	p->p50_us = jnum(d, "latency_ns", "p50") / 1e3;
	p->p99_us = jnum(d, "latency_ns", "p99") / 1e3;
	for (unsigned r = 0; r < R__COUNT; r++)
		p->abort_pct[r] = 100.0 * jnum(d, "abort_rate_by_reason", reason_key[r]);
	return 0;
}

/* Reads one file: a bench result or a sweep's combined file. Returns 0 or the exit code 2. */
/* `remora lockbench --json` writes a bare array of rows, each naming its lock type. */
static bool lb_is_rows(json_t *doc)
{
	json_t *r = json_array_get(doc, 0);

	return json_is_array(doc) && json_is_string(json_object_get(r, "lock")) &&
	       json_is_integer(json_object_get(r, "acquisitions"));
}

static int read_file(struct plot *pl, const char *path)
{
	json_error_t jerr;
	json_t *doc = json_load_file(path, 0, &jerr), *points, *d;
	const char *tool;
	size_t i;
	int rc = 0;

	if (!doc) {
		fprintf(stderr, "remora plot: %s: %s\n", path,
			access(path, R_OK) ? strerror(errno) :
					     "not a remora result file (not JSON)");
		return 2;
	}
	tool = json_string_value(json_object_get(doc, "tool"));
	if (lb_is_rows(doc)) {
		pl->lb_rows += (unsigned)json_array_size(doc);
	} else if (tool && strcmp(tool, "remora bench") == 0) {
		rc = add_point(pl, doc);
	} else if (tool && strcmp(tool, "remora bench --sweep") == 0 &&
		   json_is_array(points = json_object_get(doc, "points"))) {
		json_array_foreach(points, i, d)
			if (!rc)
				rc = add_point(pl, d);
	} else {
		fprintf(stderr, "remora plot: %s: not a remora result file (no \"tool\": \"remora "
			"bench\", nor rows of remora lockbench --json)\n", path);
		json_decref(doc);
		return 2;
	}
	json_decref(doc);
	if (rc) {
		fprintf(stderr, "remora plot: more than %d results\n", PLOT_MAX_POINTS);
		return 2;
	}
	return 0;
}

/* ---- gnuplot ---------------------------------------------------------------------------- */

static bool have_gnuplot(void)
{
	const char *path = getenv("PATH");
	char buf[PATH_MAX];

	while (path && *path) {
		size_t len = strcspn(path, ":");

		snprintf(buf, sizeof(buf), "%.*s/gnuplot", (int)len, len ? path : ".");
		if (access(buf, X_OK) == 0)
			return true;
		path += len + (path[len] == ':');
	}
	return false;
}

static FILE *figure_begin(struct plot *pl, const char *file, const char *title,
			  const char *xlabel, const char *ylabel, char *path, size_t len)
{
	FILE *g;

	snprintf(path, len, "%s/%s", pl->out, file);
	fflush(NULL);
	g = popen("gnuplot", "w");
	if (!g)
		return NULL;
	fprintf(g, "set terminal pngcairo size 960,640 enhanced font 'sans,11'\n"
		   "set encoding utf8\nset output '%s'\nset title \"%s\" noenhanced\n"
		   "set xlabel \"%s\"\nset ylabel \"%s\"\nset grid\nset key outside right top "
		   "noenhanced\n", path, title, xlabel, ylabel);
	return g;
}

static int figure_end(struct plot *pl, FILE *g, const char *path)
{
	int st = pclose(g);

	if (st != 0) {
		fprintf(stderr, "remora plot: gnuplot failed to draw %s\n", path);
		return 1;
	}
	printf("%s\n", path);
	pl->figures++;
	return 0;
}

static bool same_group(const struct pt *a, const struct pt *b)
{
	return !strcmp(a->backend, b->backend) && !strcmp(a->profile, b->profile);
}

static int cmp_curve(const void *x, const void *y)
{
	const struct pt *a = x, *b = y;

	if (a->coords != b->coords)
		return a->coords < b->coords ? -1 : 1;
	return (a->tput > b->tput) - (a->tput < b->tput);
}

/* Distinct values of a field among points of group g (and workload w when given). */
static unsigned distinct(const struct plot *pl, const struct pt *g, const char *w, size_t off,
			 char names[][PLOT_NAME], unsigned max)
{
	unsigned n = 0;

	for (unsigned i = 0; i < pl->n; i++) {
		const struct pt *p = &pl->pt[i];
		const char *v = (const char *)p + off;
		unsigned j;

		if (!same_group(p, g) || (w && strcmp(p->workload, w)))
			continue;
		for (j = 0; j < n && strcmp(names[j], v); j++)
			;
		if (j == n && n < max)
			snprintf(names[n++], PLOT_NAME, "%s", v);
	}
	return n;
}

#define MAX_SERIES 16

/* The points of group g, workload w and protocol proto into curve, in coordinator order. */
static unsigned select_curve(const struct plot *pl, const struct pt *g, const char *w,
			     const char *proto, struct pt *curve)
{
	unsigned n = 0;

	for (unsigned i = 0; i < pl->n; i++)
		if (same_group(&pl->pt[i], g) && !strcmp(pl->pt[i].workload, w) &&
		    !strcmp(pl->pt[i].protocol, proto))
			curve[n++] = pl->pt[i];
	qsort(curve, n, sizeof(*curve), cmp_curve);
	return n;
}

/* Throughput vs p50 or p99 latency for workload w, one line per protocol. */
static int latency_figure(struct plot *pl, const struct pt *g, const char *w, bool p99)
{
	char protos[MAX_SERIES][PLOT_NAME], file[256], title[256], path[PATH_MAX];
	unsigned np = distinct(pl, g, w, offsetof(struct pt, protocol), protos, MAX_SERIES);
	struct pt *curve = calloc(pl->n, sizeof(*curve));
	FILE *f;

	if (!curve)
		return 1;
	snprintf(file, sizeof(file), "%s-latency-%s-%s-%s.png", w, p99 ? "p99" : "p50",
		 g->backend, g->profile);
	snprintf(title, sizeof(title), "%s: committed throughput vs %s latency (backend %s, "
		 "profile %s)\\npoints labelled with their coordinators (CN x threads x "
		 "coroutines)", w, p99 ? "p99" : "median (p50)", g->backend, g->profile);
	f = figure_begin(pl, file, title, "committed throughput (thousand txn/s)",
			 p99 ? "p99 latency (µs)" : "p50 latency (µs)", path, sizeof(path));
	if (!f) {
		free(curve);
		return 1;
	}
	fprintf(f, "set xrange [0:*]\nset yrange [0:*]\n");
	for (unsigned s = 0; s < np; s++) {
		unsigned n = select_curve(pl, g, w, protos[s], curve);

		fprintf(f, "$d%u << EOD\n", s);
		for (unsigned i = 0; i < n; i++)
			fprintf(f, "%.4f %.3f %u\n", curve[i].tput / 1e3,
				p99 ? curve[i].p99_us : curve[i].p50_us, curve[i].coords);
		fprintf(f, "EOD\n");
	}
	fprintf(f, "plot ");
	for (unsigned s = 0; s < np; s++)
		fprintf(f, "%s$d%u using 1:2 with linespoints lw 2 pt %u ps 1.3 title '%s', "
			"$d%u using 1:2:(sprintf('%%d', $3)) with labels offset 0.9,0.7 "
			"font ',8' notitle", s ? ", " : "", s, 5 + 2 * s, protos[s], s);
	fprintf(f, "\n");
	free(curve);
	return figure_end(pl, f, path);
}

/*
 * Throughput (left axis) and utilization (right axis, percent) against coordinators for
 * workload w: where throughput stops growing, the line that reached 100% names the reason.
 */
static int utilization_figure(struct plot *pl, const struct pt *g, const char *w)
{
	char protos[MAX_SERIES][PLOT_NAME], file[256], title[320], path[PATH_MAX];
	unsigned np = distinct(pl, g, w, offsetof(struct pt, protocol), protos, MAX_SERIES);
	struct pt *curve = calloc(pl->n, sizeof(*curve));
	FILE *f;

	if (!curve)
		return 1;
	snprintf(file, sizeof(file), "%s-utilization-%s-%s.png", w, g->backend, g->profile);
	snprintf(title, sizeof(title), "%s: throughput and utilization (backend %s, profile %s)"
		 "\\nsolid: txn/s; dashed: busiest MN's atomics; dotted: compute CPU", w,
		 g->backend, g->profile);
	f = figure_begin(pl, file, title, "coordinators (CN x threads x coroutines)",
			 "committed throughput (thousand txn/s)", path, sizeof(path));
	if (!f) {
		free(curve);
		return 1;
	}
	fprintf(f, "set xrange [0:*]\nset yrange [0:*]\nset y2range [0:110]\nset y2tics\n"
		   "set y2label \"utilization (%%)\"\n");
	for (unsigned s = 0; s < np; s++) {
		unsigned n = select_curve(pl, g, w, protos[s], curve);

		fprintf(f, "$u%u << EOD\n", s);
		for (unsigned i = 0; i < n; i++)
			fprintf(f, "%u %.4f %.2f %.2f\n", curve[i].coords, curve[i].tput / 1e3,
				curve[i].atomic_pct, curve[i].cpu_pct);
		fprintf(f, "EOD\n");
	}
	fprintf(f, "plot ");
	for (unsigned s = 0; s < np; s++)
		fprintf(f, "%s$u%u using 1:2 with linespoints lw 2 lc %u pt 7 title '%s', "
			"$u%u using 1:3 axes x1y2 with linespoints lw 1.5 dt 2 lc %u pt 6 "
			"title '%s MN atomics %%', $u%u using 1:4 axes x1y2 with lines lw 1.5 dt 3 "
			"lc %u title '%s CPU %%'", s ? ", " : "", s, s + 1, protos[s], s, s + 1,
			protos[s], s, s + 1, protos[s]);
	fprintf(f, "\n");
	free(curve);
	return figure_end(pl, f, path);
}

/* The point of (workload, protocol) in group g with the highest throughput, or NULL. */
static const struct pt *peak(const struct plot *pl, const struct pt *g, const char *w,
			     const char *proto)
{
	const struct pt *best = NULL;

	for (unsigned i = 0; i < pl->n; i++) {
		const struct pt *p = &pl->pt[i];

		if (same_group(p, g) && !strcmp(p->workload, w) && !strcmp(p->protocol, proto) &&
		    (!best || p->tput > best->tput))
			best = p;
	}
	return best;
}

/* Peak throughput per workload, a bar per protocol. */
static int throughput_figure(struct plot *pl, const struct pt *g)
{
	char wls[MAX_SERIES][PLOT_NAME], protos[MAX_SERIES][PLOT_NAME];
	char file[256], title[256], path[PATH_MAX];
	unsigned nw = distinct(pl, g, NULL, offsetof(struct pt, workload), wls, MAX_SERIES);
	unsigned np = distinct(pl, g, NULL, offsetof(struct pt, protocol), protos, MAX_SERIES);
	double lo = 0, hi = 0;
	bool logy;
	FILE *f;

	for (unsigned w = 0; w < nw; w++)
		for (unsigned p = 0; p < np; p++) {
			const struct pt *b = peak(pl, g, wls[w], protos[p]);

			if (b && (lo == 0 || b->tput < lo))
				lo = b->tput;
			if (b && b->tput > hi)
				hi = b->tput;
		}
	/* workloads an order of magnitude apart (TATP vs TPC-C) stay readable on a log axis */
	logy = lo > 0 && hi / lo >= 20;
	snprintf(file, sizeof(file), "throughput-%s-%s.png", g->backend, g->profile);
	snprintf(title, sizeof(title), "Peak committed throughput per workload (backend %s, "
		 "profile %s)", g->backend, g->profile);
	f = figure_begin(pl, file, title, "workload",
			 logy ? "committed throughput (thousand txn/s, log scale)" :
				"committed throughput (thousand txn/s)", path, sizeof(path));
	if (!f)
		return 1;
	if (logy)
		fprintf(f, "set logscale y\nset yrange [%g:*]\n", lo / 1e3 / 2);
	else
		fprintf(f, "set yrange [0:*]\n");
	fprintf(f, "set style data histograms\nset style histogram clustered gap 1\n"
		   "set style fill solid 0.85 border -1\nset grid noxtics\n"
		   "$bars << EOD\nworkload");
	for (unsigned p = 0; p < np; p++)
		fprintf(f, " %s", protos[p]);
	fprintf(f, "\n");
	for (unsigned w = 0; w < nw; w++) {
		fprintf(f, "%s", wls[w]);
		for (unsigned p = 0; p < np; p++) {
			const struct pt *b = peak(pl, g, wls[w], protos[p]);

			if (b)
				fprintf(f, " %.4f", b->tput / 1e3);
			else
				fprintf(f, " NaN");
		}
		fprintf(f, "\n");
	}
	fprintf(f, "EOD\nplot for [i=2:%u] $bars using i:xtic(1) title columnheader(i)\n",
		np + 1);
	return figure_end(pl, f, path);
}

/* Abort rate by reason at each (workload, protocol)'s peak point, stacked. */
static int aborts_figure(struct plot *pl, const struct pt *g)
{
	char wls[MAX_SERIES][PLOT_NAME], protos[MAX_SERIES][PLOT_NAME];
	char file[256], title[256], path[PATH_MAX];
	unsigned nw = distinct(pl, g, NULL, offsetof(struct pt, workload), wls, MAX_SERIES);
	unsigned np = distinct(pl, g, NULL, offsetof(struct pt, protocol), protos, MAX_SERIES);
	FILE *f;

	snprintf(file, sizeof(file), "aborts-%s-%s.png", g->backend, g->profile);
	snprintf(title, sizeof(title), "Abort rate by reason at peak throughput (backend %s, "
		 "profile %s)", g->backend, g->profile);
	f = figure_begin(pl, file, title, "workload / protocol",
			 "aborted attempts (% of attempts)", path, sizeof(path));
	if (!f)
		return 1;
	fprintf(f, "set style data histograms\nset style histogram rowstacked\n"
		   "set style fill solid 0.85 border -1\nset boxwidth 0.6\nset yrange [0:*]\n"
		   "set xtics rotate by -30 noenhanced\nset grid noxtics\n$ab << EOD\nrun");
	for (unsigned r = 0; r < R__COUNT; r++)
		fprintf(f, " %s", reason_key[r]);
	fprintf(f, "\n");
	for (unsigned w = 0; w < nw; w++)
		for (unsigned p = 0; p < np; p++) {
			const struct pt *b = peak(pl, g, wls[w], protos[p]);

			if (!b)
				continue;
			fprintf(f, "%s/%s", wls[w], protos[p]);
			for (unsigned r = 0; r < R__COUNT; r++)
				fprintf(f, " %.4f", b->abort_pct[r]);
			fprintf(f, "\n");
		}
	fprintf(f, "EOD\nplot for [i=2:%u] $ab using i:xtic(1) title columnheader(i)\n",
		R__COUNT + 1);
	return figure_end(pl, f, path);
}

static int plot_group(struct plot *pl, const struct pt *g)
{
	char wls[MAX_SERIES][PLOT_NAME];
	unsigned nw = distinct(pl, g, NULL, offsetof(struct pt, workload), wls, MAX_SERIES);
	int rc = 0;

	for (unsigned w = 0; w < nw && !rc; w++) {
		bool util = false;

		rc = latency_figure(pl, g, wls[w], false);
		if (!rc)
			rc = latency_figure(pl, g, wls[w], true);
		for (unsigned i = 0; i < pl->n; i++)
			util |= same_group(&pl->pt[i], g) && !strcmp(pl->pt[i].workload, wls[w]) &&
				pl->pt[i].has_util;
		if (!rc && util)
			rc = utilization_figure(pl, g, wls[w]);
	}
	if (!rc)
		rc = throughput_figure(pl, g);
	if (!rc)
		rc = aborts_figure(pl, g);
	return rc;
}

static int plot_out(void *opts, const char *cmd, const char *name, const char *val)
{
	if (bu_check_out_path(cmd, name, val))
		return 2;
	((struct plot *)opts)->out = val;
	return 0;
}

static void plot_more_help(FILE *f)
{
	fputs("\nNeeds gnuplot on PATH (Debian: gnuplot-nox). Exit status: 0 done, 1 gnuplot\n"
	      "missing or failed, 2 bad usage or a file that is not a remora result.\n", f);
}

static const struct cli_opt plot_opt_table[] = {
	CLI_OPT_FN("--out", "DIR", plot_out,
		   "where the figures go (default: the current directory)"),
	{ 0 },
};

static const struct cli_cmd plot_cmd = {
	.name = "plot",
	.usage = "usage: remora plot [--out DIR] FILE...\n"
		 "Draws PNG figures from remora bench results (--json files, --sweep combined\n"
		 "files) with gnuplot, one set per backend and cost profile:\n"
		 "  <workload>-latency-p50-<backend>-<profile>.png  throughput vs p50 latency\n"
		 "  <workload>-latency-p99-<backend>-<profile>.png  throughput vs p99 latency\n"
		 "  throughput-<backend>-<profile>.png              peak throughput per\n"
		 "                                                  workload\n"
		 "  aborts-<backend>-<profile>.png                  abort rate by reason\n"
		 "  <workload>-utilization-<backend>-<profile>.png  throughput, MN atomics\n"
		 "                                                  and CPU utilization vs\n"
		 "                                                  coordinators\n",
	.opts = plot_opt_table,
	.operands = true,
	.more_help = plot_more_help,
};

/* ---- the kill-and-measure timeline ------------------------------------------------------ */

static void timeline_mark(FILE *g, json_t *tl, const char *key, const char *label, int n)
{
	double v = jnum(tl, key, NULL);

	if (v >= 0)
		fprintf(g, "set arrow %d from %.3f, graph 0 to %.3f, graph 1 nohead dt 2\n"
			   "set label %d \"%s %.1f ms\" at %.3f, graph %.2f left offset 0.5,0\n",
			n, v, v, n, label, v, v, 0.95 - 0.05 * n);
}

/* One run's timeline (bench --kill): commits per ms and a 10 ms mean, from 300 ms before
 * the kill to the end of the run. */
static int timeline_figure(struct plot *pl, json_t *d)
{
	json_t *tl = json_object_get(d, "timeline"), *a = json_object_get(tl, "txn_per_ms");
	double kill = jnum(tl, "kill_ms", NULL);
	char file[160], title[256], path[PATH_MAX];
	struct pt p = { 0 };
	size_t n = json_array_size(a), end = n, from;
	FILE *g;

	if (!json_is_array(a) || kill < 0)
		return 0;
	while (end && json_integer_value(json_array_get(a, end - 1)) == 0)
		end--;
	copy_name(p.workload, json_object_get(d, "workload"));
	copy_name(p.protocol, json_object_get(d, "protocol"));
	copy_name(p.backend, json_object_get(d, "backend"));
	label_point(&p, d);
	snprintf(file, sizeof(file), "timeline-%s-%s-%s.png", p.protocol, p.workload, p.backend);
	snprintf(title, sizeof(title), "%s, %s: the survivors' throughput around the SIGKILL of a "
		 "compute node (%s)", p.protocol, p.workload, p.backend);
	g = figure_begin(pl, file, title, "ms since the kill", "committed transactions per ms",
			 path, sizeof(path));
	if (!g)
		return 1;
	timeline_mark(g, tl, "detect_ms", "detected", 1);
	timeline_mark(g, tl, "recovered_ms", "recovered", 2);
	timeline_mark(g, tl, "back90_ms", "back to 90%", 3);
	fprintf(g, "set arrow 4 from 0, graph 0 to 0, graph 1 nohead lw 2\n"
		   "plot '-' using 1:2 with lines lc rgb '#b0b0b0' title 'per ms', "
		   "'-' using 1:2 with lines lw 2 lc rgb '#c00000' title 'mean of 10 ms'\n");
	from = kill > 300 ? (size_t)(kill - 300) : 0;
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = from; i + (pass ? 10 : 1) <= end; i++) {
			double s = 0;

			for (size_t k = i; k < i + (pass ? 10 : 1); k++)
				s += (double)json_integer_value(json_array_get(a, k));
			fprintf(g, "%.3f %.3f\n", (double)i + (pass ? 5 : 0) - kill, pass ? s / 10 : s);
		}
		fprintf(g, "e\n");
	}
	return figure_end(pl, g, path);
}

/* The timelines among the files (bench results only; a sweep's points have none). */
static int timeline_figures(struct plot *pl, char **files, int nfiles)
{
	int rc = 0;

	for (int i = 1; i <= nfiles && !rc; i++) {
		json_t *doc = json_load_file(files[i], 0, NULL);

		if (json_is_object(json_object_get(doc, "timeline")))
			rc = timeline_figure(pl, doc);
		json_decref(doc);
	}
	return rc;
}

/* ---- remora lockbench rows ---------------------------------------------------------------- */

static const char *lb_lock(json_t *row)
{
	const char *l = json_string_value(json_object_get(row, "lock"));

	return l ? l : "?";
}

/* The row field a sweep varied (the x axis), or NULL when every row has the same values. */
static const char *lb_xkey(json_t *rows)
{
	static const char *const keys[] = { "cns", "coros", "cs", "read_ratio", "locks", "theta" };

	for (unsigned k = 0; k < 6; k++) {
		double first = jnum(json_array_get(rows, 0), keys[k], NULL);
		size_t i;
		json_t *r;

		json_array_foreach(rows, i, r)
			if (jnum(r, keys[k], NULL) != first)
				return keys[k];
	}
	return NULL;
}

/*
 * One figure of a lockbench file: throughput (thousand acquisitions/s) or p99 acquisition
 * latency (µs) against the swept field, one line per lock type; with no swept field (a sweep
 * of lock types), one bar per lock type.
 */
static int lb_figure(struct plot *pl, json_t *rows, const char *stem, bool p99)
{
	char locks[MAX_SERIES][PLOT_NAME], file[256], title[256], path[PATH_MAX];
	const char *x = lb_xkey(rows), *ykey = p99 ? "p99_ns" : "throughput";
	const double scale = 1e3; /* thousand acquisitions/s, or ns to µs */
	unsigned nl = 0;
	size_t i;
	json_t *r;
	FILE *f;

	json_array_foreach(rows, i, r) {
		const char *l = lb_lock(r);
		unsigned j;

		for (j = 0; j < nl && strcmp(locks[j], l); j++)
			;
		if (j == nl && nl < MAX_SERIES)
			snprintf(locks[nl++], PLOT_NAME, "%s", l);
	}
	snprintf(file, sizeof(file), "lockbench-%s-%s.png", stem, p99 ? "p99" : "throughput");
	snprintf(title, sizeof(title), "remora lockbench %s: %s by lock type", stem,
		 p99 ? "p99 acquisition latency" : "acquisitions per second");
	f = figure_begin(pl, file, title, x ? x : "lock type",
			 p99 ? "p99 acquisition latency (µs)" : "thousand acquisitions/s", path,
			 sizeof(path));
	if (!f)
		return 1;
	fprintf(f, "set yrange [0:*]\n");
	if (!x) {
		fprintf(f, "set style fill solid 0.6\nset boxwidth 0.6\nunset key\n$d << EOD\n");
		json_array_foreach(rows, i, r)
			fprintf(f, "%zu \"%s\" %.4f\n", i, lb_lock(r), jnum(r, ykey, NULL) / scale);
		fprintf(f, "EOD\nplot $d using 1:3:xtic(2) with boxes\n");
		return figure_end(pl, f, path);
	}
	for (unsigned s = 0; s < nl; s++) {
		fprintf(f, "$d%u << EOD\n", s);
		json_array_foreach(rows, i, r)
			if (!strcmp(lb_lock(r), locks[s]))
				fprintf(f, "%g %.4f\n", jnum(r, x, NULL), jnum(r, ykey, NULL) / scale);
		fprintf(f, "EOD\n");
	}
	fprintf(f, "plot ");
	for (unsigned s = 0; s < nl; s++)
		fprintf(f, "%s$d%u using 1:2 with linespoints lw 2 pt %u ps 1.3 title '%s'",
			s ? ", " : "", s, 5 + 2 * s, locks[s]);
	fprintf(f, "\n");
	return figure_end(pl, f, path);
}

/* The figures of one file, when it holds lockbench rows (named after the file). */
static int lb_figures(struct plot *pl, const char *path)
{
	json_t *doc = json_load_file(path, 0, NULL);
	const char *base = strrchr(path, '/');
	char stem[PLOT_NAME * 2];
	int rc = 0;

	if (lb_is_rows(doc)) {
		snprintf(stem, sizeof(stem), "%s", base ? base + 1 : path);
		stem[strcspn(stem, ".")] = 0;
		rc = lb_figure(pl, doc, stem, false);
		if (!rc)
			rc = lb_figure(pl, doc, stem, true);
	}
	json_decref(doc);
	return rc;
}

/* Parses the options among the files; the files end up in argv[1 .. *nfiles]. */
static int plot_parse(struct plot *pl, int argc, char **argv, int *nfiles)
{
	int i = 1, rc;

	*nfiles = 0;
	while (i < argc) {
		rc = cli_parse(&plot_cmd, pl, NULL, argc, argv, &i);
		if (rc)
			return rc;
		if (i < argc)
			argv[1 + (*nfiles)++] = argv[i++];
	}
	return 0;
}

int cmd_plot(int argc, char **argv)
{
	struct plot pl = { .out = "." };
	struct stat st;
	int rc, nfiles;

	rc = plot_parse(&pl, argc, argv, &nfiles);
	if (rc)
		return rc == 1 ? 0 : 2;
	pl.pt = calloc(PLOT_MAX_POINTS, sizeof(*pl.pt));
	if (!pl.pt) {
		fprintf(stderr, "remora plot: out of memory\n");
		return 1;
	}
	for (int i = 1; i <= nfiles && !rc; i++)
		rc = read_file(&pl, argv[i]);
	if (!rc && !nfiles) {
		fprintf(stderr, "remora plot: no result files given (see remora plot --help)\n");
		rc = 2;
	}
	if (!rc && !pl.n && !pl.lb_rows) {
		fprintf(stderr, "remora plot: the files hold no run that committed a "
			"transaction\n");
		rc = 2;
	}
	if (!rc && (stat(pl.out, &st) || !S_ISDIR(st.st_mode))) {
		fprintf(stderr, "remora plot: --out %s: not a directory\n", pl.out);
		rc = 2;
	}
	if (!rc && !have_gnuplot()) {
		fprintf(stderr, "remora plot: gnuplot not found on PATH; install it (Debian: "
			"apt-get install gnuplot-nox)\n");
		rc = 1;
	}
	for (unsigned i = 0; !rc && i < pl.n; i++) {
		unsigned j;

		for (j = 0; j < i && !same_group(&pl.pt[j], &pl.pt[i]); j++)
			;
		if (j == i)
			rc = plot_group(&pl, &pl.pt[i]);
	}
	if (!rc)
		rc = timeline_figures(&pl, argv, nfiles);
	for (int i = 1; i <= nfiles && !rc && pl.lb_rows; i++)
		rc = lb_figures(&pl, argv[i]);
	free(pl.pt);
	return rc;
}
