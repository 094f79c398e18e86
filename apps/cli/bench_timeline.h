/* SPDX-License-Identifier: MIT */
/*
 * remora bench's kill-and-measure: the per-millisecond commit timeline of the surviving
 * compute nodes (--timeline, on with --kill), its analysis (detection, recovery, back to 90%)
 * and its place in the result lines and the JSON. docs/recovery.md, section 7.
 */
#ifndef REMORA_CLI_BENCH_TIMELINE_H
#define REMORA_CLI_BENCH_TIMELINE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "benchutil.h"
#include "runner.h"

struct btl {
	uint64_t t0_ms;  /* CLOCK_REALTIME ms of ms[0] */
	uint32_t len;
	uint64_t *ms;    /* commits of every reporting compute node in each ms */
	bool have_event; /* a survivor saw the failure */
	double seen_s;   /* earliest dead bit seen (wall clock, s) */
	double recover_ms, logs_ms; /* of the survivor that recovered it */
	uint64_t logs;
};

/* Appends this node's timeline and what its watchdog saw to a result line (inside its
 * object, after a field: starts with a comma). Nothing without a timeline. */
void btl_line(FILE *f, const struct wlr_result *r);

/* Adds one result line's timeline (none: nothing). 0, -ENOMEM, or -ERANGE (and nothing
 * added) when the line has no start time or the timelines together would span over 6 h. */
int btl_add(struct btl *t, const char *line);
void btl_free(struct btl *t);

/*
 * The figures, given the kill time (wall clock s; 0: unknown): the survivors' mean commits
 * per ms over the second before the kill, the ms from the kill to the dead bit seen, to
 * recovery done, and to the first 20 ms window back at 90% of that mean (-1: never).
 */
struct btl_figures {
	double kill_ms;     /* since t0_ms; -1: no kill */
	double base_per_ms;
	double detect_ms, recovered_ms, back90_ms, min_per_ms;
	uint64_t after; /* commits from the detection on (survivors' progress; 0: none or no event) */
};
void btl_figures(const struct btl *t, double kill_s, struct btl_figures *out);

/* One or two lines of the text summary; the "timeline" object of the JSON. */
void btl_print(FILE *f, const struct btl *t, double kill_s);
void btl_json(struct bu_json *j, const struct btl *t, double kill_s);

#endif
