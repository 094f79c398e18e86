/* SPDX-License-Identifier: MIT */
/*
 * Utilization of a measured phase, and the bottleneck it names: per memory node and verb
 * class, the cost model's busy time over wall time (the service time the modelled NIC spent on
 * finished verbs, remora_transport_cost_stats); per compute node, its NIC's message sends the
 * same way; and the compute side's CPU time over wall time x cores used. A result that shows
 * throughput without saying which of these was full cannot tell a protocol's gain from the
 * host's limit. Prefix ut_.
 */
#ifndef REMORA_APPS_UTILIZATION_H
#define REMORA_APPS_UTILIZATION_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <remora/transport.h>

#include "benchutil.h"

/* One point in time: the cost model's counters and this process's CPU time. */
struct ut_snap {
	struct remora_cost_stats st;
	bool cost;			/* a cost profile is on */
	uint64_t cpu_ns;		/* CLOCK_PROCESS_CPUTIME_ID */
	uint64_t host_busy, host_total; /* /proc/stat jiffies of every process; 0: unknown */
};

/* What happened between two snapshots, summable over the compute nodes of a run. */
struct ut_window {
	unsigned n;		      /* windows summed (compute nodes) */
	double cost_s;		      /* cost-model clock time, summed; 0: no cost profile */
	double cpu_s;		      /* CPU time of the processes, summed */
	double host_busy, host_total; /* host jiffies (all processes), summed over windows */
	unsigned scale;		      /* mn_scale */
	uint64_t svc_ns[REMORA_COST_CLASSES];
	uint64_t msg_svc_ns;
	uint64_t mn_busy_ns[REMORA_MAX_MN][REMORA_COST_CLASSES]; /* summed over windows */
	uint64_t cn_msg_busy_ns[REMORA_MAX_CN];
};

/* Utilizations in [0, 1] (a backlog at a window's edge may push one a hair above 1). */
struct ut_report {
	bool cost;
	unsigned scale;
	double mn[REMORA_MAX_MN][REMORA_COST_CLASSES];
	double cn_msg[REMORA_MAX_CN];
	double cpu;
	unsigned cores; /* cores the compute side could use: min(workers, online CPUs) */
	double cpu_s;
	double host_cpu;     /* every process of the host (others' too); < 0: unknown */
	char bottleneck[64]; /* "memory node 0 atomics", "compute CPU", ... */
	double bottleneck_util;
	char next[64]; /* the runner-up, for context */
	double next_util;
};

void ut_snap(struct remora_transport *tp, struct ut_snap *s);
/* *w = the window from a to b (n = 1). */
void ut_window(const struct ut_snap *a, const struct ut_snap *b, struct ut_window *w);
void ut_merge(struct ut_window *dst, const struct ut_window *src);
/* Writes `"util":{...}` (no separators) for a compute node's result line. */
void ut_line(FILE *f, const struct ut_window *w);
/* Reads what ut_line wrote (o: the "util" member; NULL leaves w empty). 0 or -EPROTO. */
int ut_parse(json_t *o, struct ut_window *w);
/*
 * wall_s: the measured phase; workers: compute-side threads of the whole run on this host.
 * n_mn, n_cn bound the nodes the bottleneck is looked for in.
 */
void ut_report(const struct ut_window *w, double wall_s, unsigned workers, unsigned n_mn,
	       unsigned n_cn, struct ut_report *r);
/* "  utilization    ..." and "  bottleneck     ..." lines of a summary. */
void ut_print(FILE *f, const struct ut_report *r, unsigned n_mn, unsigned n_cn);
/* "utilization": {...} of a JSON document. */
void ut_json(struct bu_json *j, const struct ut_report *r, unsigned n_mn, unsigned n_cn);
/* The verb class name of the summary ("reads", "writes", "atomics"). */
const char *ut_class_name(unsigned c);

#endif
