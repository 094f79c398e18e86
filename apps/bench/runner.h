/* SPDX-License-Identifier: MIT */
/*
 * Runs a workload on this compute node: threads x coordinators for a warm-up and a measured
 * duration, or for exactly `txns` transactions per coordinator, and collects what
 * `remora bench` reports: outcome counts, latency histogram, transport counters of the
 * measured phase, and the workload's accumulators (over the whole run, warm-up included,
 * since invariants such as SmallBank's total need every commit).
 * Prefix wlr_.
 */
#ifndef REMORA_APPS_RUNNER_H
#define REMORA_APPS_RUNNER_H

#include <stdbool.h>
#include <stdint.h>

#include <remora/transport.h>
#include <remora/tx.h>

#include "benchutil.h"
#include "cpusplit.h"
#include "utilization.h"
#include "workload.h"

struct wlr_cfg {
	const struct wl *wl;
	struct remora_db *db;
	unsigned cn;          /* this compute node's id */
	unsigned threads;     /* worker threads (remora_worker index 0 .. threads-1) */
	unsigned coros;       /* coordinators per thread */
	unsigned coord_base;  /* global index of this node's first coordinator */
	double warmup_s;
	double duration_s;
	/*
	 * 0: run for warmup_s + duration_s. N > 0: no warm-up, every coordinator runs exactly N
	 * transactions (N generated inputs, each to its end: committed or aborted by the
	 * application; retries of an engine abort are attempts of the same transaction) and the
	 * run ends when all have; the durations are ignored. The counters then cover exactly
	 * those transactions, so a run with one coordinator is reproducible verb for verb.
	 */
	uint64_t txns;
	const int *stop;      /* set non-zero (e.g. by a signal handler) to end early; may be NULL */
	struct remora_transport *tp; /* for utilization (cost model counters); may be NULL */
	bool timeline;        /* count commits per millisecond of wall-clock time (res->tl) */
	/*
	 * Read-write transactions run on the home node of their first key (<remora/route.h>;
	 * the db must be opened with route on): handed over by message, and run here for the
	 * others between this node's own. Needs a duration (not txns).
	 */
	bool route;
	/* remora_sched_set_prefetch on every worker's scheduler (prefetch_yield) */
	bool prefetch;
	/* remora_sched_set_inline_yield on every worker's scheduler (inline_yield); 0 = 1 */
	unsigned inline_yield;
};

#define WLR_TL_MAX_MS 120000u /* the longest timeline kept: later commits are not counted */

struct wlr_result {
	struct wl_counts cnt;            /* transactions started in the measured phase */
	struct wl_counts cnt_all;        /* every transaction */
	int64_t acc[WL_MAX_ACC];         /* workload accumulators, whole run */
	struct bu_hist *hist;            /* ns from first attempt to commit, measured phase */
	struct remora_counters verbs;    /* transport counters of the measured phase */
	double seconds;                  /* length of the measured phase */
	struct ut_window util;           /* cost-model busy time and CPU time of the measured phase */
	uint32_t *tl;                    /* cfg->timeline: commits in each ms since tl_t0_ms */
	uint32_t tl_len;
	uint64_t tl_t0_ms;               /* CLOCK_REALTIME ms of tl[0]: the warm-up's start */
	struct cs_window cpu;            /* worker threads' CPU time of the measured phase, by layer */
	int error;                       /* 0, or the first failure of any coordinator */
	char errmsg[256];
};

/* Allocates res->hist; 0 or -ENOMEM. */
int wlr_result_init(struct wlr_result *res);
void wlr_result_free(struct wlr_result *res);
/* dst += src (counts, histogram, counters, utilization, accumulators by sum or max; seconds
 * by max). */
void wlr_result_merge(const struct wl *wl, struct wlr_result *dst, const struct wlr_result *src);

/*
 * Runs the workload. Returns 0, or the first failure (res->error and res->errmsg say more):
 * an engine error that is not an abort, a worker or coroutine that could not be created.
 */
int wlr_run(const struct wlr_cfg *cfg, struct wlr_result *res);

#endif
