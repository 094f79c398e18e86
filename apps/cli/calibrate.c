/* SPDX-License-Identifier: MIT */
/* `remora bench --calibrate`: the memory-node scale K of a paper's knee; see calibrate.h. */
#include "calibrate.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAL_MAX_POINTS 1024
#define CAL_NAME 64

/* Past the knee throughput stays within this fraction of the best point of its K. */
#define CAL_PLATEAU 0.90
/* ... and the memory nodes' atomics are at least this busy there. */
#define CAL_ATOMICS_FULL 0.90

struct cal_pt {
	char label[CAL_NAME]; /* protocol[+mutation] workload profile */
	unsigned k, coords;
	double tput, p50_us, atomics, cpu, bottleneck_util;
	char bottleneck[CAL_NAME];
};

struct cal {
	struct cal_pt *pt;
	unsigned n;
};

bool cal_requested(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--calibrate"))
			return true;
	return false;
}

static double num(json_t *o, const char *key) { return json_number_value(json_object_get(o, key)); }

static int add_point(struct cal *c, json_t *d)
{
	json_t *u = json_object_get(d, "utilization"), *mn;
	const char *mut = json_string_value(json_object_get(d, "mutate"));
	struct cal_pt *p;
	size_t i;

	if (!json_is_object(d) || num(d, "committed") <= 0)
		return 0; /* a failed point or one that committed nothing */
	if (!json_is_object(u))
		return -EPROTO;
	if (c->n == CAL_MAX_POINTS)
		return -ENOSPC;
	p = &c->pt[c->n++];
	memset(p, 0, sizeof(*p));
	snprintf(p->label, sizeof(p->label), "%.12s%s%.20s %.12s %.8s",
		 json_string_value(json_object_get(d, "protocol")) ?: "?", mut && *mut ? "+" : "",
		 mut && *mut ? mut : "", json_string_value(json_object_get(d, "workload")) ?: "?",
		 json_string_value(json_object_get(d, "profile")) ?: "?");
	p->k = (unsigned)num(d, "mn_scale");
	if (!p->k)
		p->k = 1;
	p->coords = (unsigned)(num(d, "cn") * num(d, "threads") * num(d, "coros"));
	p->tput = num(d, "committed_per_s");
	p->p50_us = num(json_object_get(d, "latency_ns"), "p50") / 1e3;
	p->cpu = num(u, "cpu");
	json_array_foreach(json_object_get(u, "mn"), i, mn) if (num(mn, "atomic") > p->atomics)
	    p->atomics = num(mn, "atomic");
	snprintf(p->bottleneck, sizeof(p->bottleneck), "%s",
		 json_string_value(json_object_get(json_object_get(u, "bottleneck"), "what"))
		     ?: "?");
	p->bottleneck_util = num(json_object_get(u, "bottleneck"), "utilization");
	return 0;
}

static int read_file(struct cal *c, const char *path)
{
	json_error_t jerr;
	json_t *doc = json_load_file(path, 0, &jerr), *d;
	const char *tool;
	size_t i;
	int rc = 0;

	if (!doc) {
		fprintf(stderr, "remora bench --calibrate: %s: %s\n", path, jerr.text);
		return 2;
	}
	tool = json_string_value(json_object_get(doc, "tool"));
	if (tool && !strcmp(tool, "remora bench")) {
		rc = add_point(c, doc);
	} else if (tool && !strcmp(tool, "remora bench --sweep")) {
		json_array_foreach(json_object_get(doc, "points"), i, d) if (!rc) rc =
		    add_point(c, d);
	} else {
		rc = -EINVAL;
	}
	json_decref(doc);
	if (rc == -EPROTO)
		fprintf(stderr,
			"remora bench --calibrate: %s: a result without utilization (made "
			"by an older remora)\n",
			path);
	else if (rc == -ENOSPC)
		fprintf(stderr, "remora bench --calibrate: more than %d points\n", CAL_MAX_POINTS);
	else if (rc)
		fprintf(stderr, "remora bench --calibrate: %s: not a remora bench result\n", path);
	return rc ? 2 : 0;
}

static int by_group(const void *a, const void *b)
{
	const struct cal_pt *x = a, *y = b;
	int s = strcmp(x->label, y->label);

	if (s)
		return s;
	if (x->k != y->k)
		return x->k < y->k ? -1 : 1;
	return (x->coords > y->coords) - (x->coords < y->coords);
}

static bool same_group(const struct cal_pt *a, const struct cal_pt *b)
{
	return !strcmp(a->label, b->label) && a->k == b->k;
}

/*
 * The knee of the group [from, to): the fewest coordinators whose throughput is within
 * CAL_PLATEAU of the group's best (more coordinators add less than that).
 */
static const struct cal_pt *knee(const struct cal_pt *from, const struct cal_pt *to)
{
	double best = 0;

	for (const struct cal_pt *p = from; p < to; p++)
		best = p->tput > best ? p->tput : best;
	for (const struct cal_pt *p = from; p < to; p++)
		if (p->tput >= CAL_PLATEAU * best)
			return p;
	return NULL;
}

/*
 * Memory-node atomics at CAL_ATOMICS_FULL or more and busier than the compute CPU. A host full
 * of other processes' work (the bottleneck line's "host CPU (shared ...)") does not disqualify
 * a point: the modelled atomics were full all the same.
 */
static bool atomics_bound(const struct cal_pt *p)
{
	return p->atomics >= CAL_ATOMICS_FULL && p->atomics >= p->cpu;
}

int cal_run(int argc, char **argv)
{
	struct cal c = {0};
	const struct cal_pt *chosen = NULL;
	unsigned target = 45, files = 0;
	int rc = 0;

	c.pt = calloc(CAL_MAX_POINTS, sizeof(*c.pt));
	if (!c.pt)
		return 1;
	for (int i = 1; i < argc && !rc; i++) {
		if (!strcmp(argv[i], "--calibrate"))
			continue;
		if (!strcmp(argv[i], "--target")) {
			char *end;
			unsigned long v = i + 1 < argc ? strtoul(argv[i + 1], &end, 10) : 0;

			if (!v || *end || v > 100000) {
				fprintf(stderr,
					"remora bench --calibrate: --target: want a number of "
					"coordinators (1..100000)\n");
				rc = 2;
			}
			target = (unsigned)v;
			i++;
			continue;
		}
		if (argv[i][0] == '-') {
			fprintf(stderr,
				"remora bench --calibrate: unknown option '%s' (usage: "
				"remora bench --calibrate FILE... [--target COORDINATORS])\n",
				argv[i]);
			rc = 2;
			break;
		}
		rc = read_file(&c, argv[i]);
		files++;
	}
	if (!rc && !c.n) {
		fprintf(stderr, "remora bench --calibrate: %s\n",
			files ? "the files hold no run that committed a transaction"
			      : "no result files given (usage: remora bench --calibrate FILE... "
				"[--target COORDINATORS])");
		rc = 2;
	}
	if (rc)
		goto out;
	qsort(c.pt, c.n, sizeof(*c.pt), by_group);
	printf("%-34s %6s %6s %12s %9s %10s %8s  %s\n", "run", "K", "coords", "txn/s", "p50 us",
	       "MN atomic", "CPU", "bottleneck");
	for (unsigned i = 0; i < c.n; i++) {
		const struct cal_pt *p = &c.pt[i];

		printf("%-34s %6u %6u %12.0f %9.1f %9.1f%% %7.1f%%  %s %.0f%%\n", p->label, p->k,
		       p->coords, p->tput, p->p50_us, 100 * p->atomics, 100 * p->cpu, p->bottleneck,
		       100 * p->bottleneck_util);
	}
	printf("\nknee = fewest coordinators within %.0f%% of the best throughput of that K\n",
	       100 * CAL_PLATEAU);
	for (unsigned i = 0; i < c.n;) {
		unsigned j = i;
		const struct cal_pt *kp;

		while (j < c.n && same_group(&c.pt[i], &c.pt[j]))
			j++;
		kp = knee(&c.pt[i], &c.pt[j]);
		printf("%-34s K=%-6u knee at %u coordinators, %.0f txn/s, MN atomics %.0f%%, CPU "
		       "%.0f%%: %s\n",
		       c.pt[i].label, c.pt[i].k, kp->coords, kp->tput, 100 * kp->atomics,
		       100 * kp->cpu,
		       atomics_bound(kp) ? "memory-node atomics bound it"
					 : "not bound by memory-node atomics");
		if (atomics_bound(kp) && (!chosen || abs((int)kp->coords - (int)target) <
							 abs((int)chosen->coords - (int)target)))
			chosen = kp;
		i = j;
	}
	if (chosen) {
		printf("\ncalibrated K = %u (%s): knee at %u coordinators (target %u), memory-node "
		       "atomics %.0f%%\n",
		       chosen->k, chosen->label, chosen->coords, target, 100 * chosen->atomics);
	} else {
		printf("\nno K of these runs puts the knee on memory-node atomics (>= %.0f%%): try "
		       "larger K\n",
		       100 * CAL_ATOMICS_FULL);
		rc = 1;
	}
out:
	free(c.pt);
	return rc;
}
