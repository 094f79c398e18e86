/* SPDX-License-Identifier: MIT */
/*
 * The engine's CPU per committed transaction and where it goes (`remora bench`): the worker
 * threads' CPU time of the measured phase, split by layer from the samples of runtime/prof
 * (workload, index and address cache, protocol, transport, scheduler), and set against what
 * the same verbs cost as plain loads, stores and atomics on this host (the `remora verbs
 * --raw` loop, over a buffer the size of a pool). Prefix cs_.
 */
#ifndef REMORA_APPS_CPUSPLIT_H
#define REMORA_APPS_CPUSPLIT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <remora/transport.h>

#include "benchutil.h"
#include "prof/prof.h"

/* Per compute node, summable: what the worker threads spent in the measured phase. */
struct cs_window {
	uint64_t cpu_ns;		   /* thread CPU time of the workers, summed */
	uint64_t samples[PROF__COUNT];	   /* runtime/prof samples by layer */
	uint64_t period_ns;		   /* CPU time per sample; 0: no sampling */
};

/* A worker thread's snapshot at a phase boundary (call on that thread). */
struct cs_snap {
	uint64_t cpu_ns;
	struct prof_counts prof;
};

/*
 * The sampling period in CPU time of the worker thread. The kernel checks the timer at its
 * tick, so signals come at most once per tick, each counting the periods elapsed.
 */
#define CS_PERIOD_NS 250000u

/* Starts this thread's sampling; false when the host has no per-thread CPU timers. */
bool cs_thread_start(void);
void cs_thread_stop(void);
void cs_snap(struct cs_snap *s);
/* w += the window from a to b. */
void cs_add(struct cs_window *w, const struct cs_snap *a, const struct cs_snap *b);
void cs_merge(struct cs_window *dst, const struct cs_window *src);
/* Writes `"cpu":{...}` (no separators) for a compute node's result line. */
void cs_line(FILE *f, const struct cs_window *w);
/* Reads what cs_line wrote (NULL leaves w empty: a line of an older remora). 0 or -EPROTO. */
int cs_parse(json_t *o, struct cs_window *w);

struct cs_report {
	bool have;			    /* some CPU time and at least one commit */
	double ns_per_txn;		    /* worker CPU ns per committed transaction */
	double layer_ns[PROF__COUNT];	    /* its split (0 everywhere without samples) */
	uint64_t samples;
	double raw_ns[REMORA_OP__COUNT];    /* one raw verb of the class, this host */
	double raw_per_txn;		    /* sum of verbs/txn x raw_ns */
	double ratio;			    /* ns_per_txn / raw_per_txn; 0: unknown */
	uint64_t raw_bytes;		    /* the buffer the raw loop ran over */
};

/*
 * verbs_per_txn and bytes_per_verb per verb class; pool_bytes: the pools' size (the raw loop
 * runs over a buffer that large, at most 1 GiB, with random 8-byte-aligned addresses, as
 * `remora verbs --raw` does).
 */
void cs_report(const struct cs_window *w, uint64_t committed,
	       const double verbs_per_txn[REMORA_OP__COUNT],
	       const double bytes_per_verb[REMORA_OP__COUNT], uint64_t pool_bytes,
	       struct cs_report *r);
/* "  cpu/txn        ..." and "  cpu split      ..." lines of a summary. */
void cs_print(FILE *f, const struct cs_report *r);
/* "cpu_per_txn": {...} of a JSON document. */
void cs_json(struct bu_json *j, const struct cs_report *r);

#endif
