/* SPDX-License-Identifier: MIT */
/*
 * Where a thread's CPU time goes, by layer: the engine's CPU split that `remora bench` prints.
 * Internal (not exported by libremora.so).
 *
 * Each thread has a current layer, one byte in thread-local storage. Layers set it on entry
 * and put the caller's back on return (prof_enter / prof_leave: two plain stores, no clock
 * read, so the hot path pays about a nanosecond per crossing). A thread that starts sampling
 * gets a timer on its own CPU clock that raises SIGPROF every period of CPU time it uses (at
 * most once per kernel tick: a late signal counts every period elapsed since the last one);
 * the handler counts them for the layer current at that moment. Samples x period estimate
 * the CPU time of each layer, without a timestamp on any path (a clock read per crossing
 * would cost more than the small layers it measures). Code that marks nothing counts as the
 * workload (the application's own code, and the runner around it).
 *
 * A coroutine switch leaves the layer of the coroutine that switched out: the scheduler sets
 * its own layer before it switches, and each coroutine restores its own when it resumes.
 */
#ifndef REMORA_PROF_H
#define REMORA_PROF_H

#include <stdint.h>

enum prof_layer {
	PROF_WORKLOAD,  /* unmarked: the application, the bench runner */
	PROF_INDEX,     /* index lookups and the address cache (runtime/txn resolve, cache) */
	PROF_PROTOCOL,  /* the transaction engine and its protocol (remora_tx_*) */
	PROF_TRANSPORT, /* remora_post / remora_poll and the backend's post */
	PROF_SCHED,     /* the coroutine scheduler: switches, run queue, idle polling */
	PROF__COUNT
};

extern _Thread_local uint8_t prof_cur __attribute__((tls_model("initial-exec")));

/* Makes layer current; returns the caller's, to give back to prof_leave. */
static inline unsigned prof_enter(enum prof_layer layer)
{
	unsigned prev = prof_cur;

	__atomic_store_n(&prof_cur, (uint8_t)layer, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST); /* the handler runs on this thread */
	return prev;
}

static inline void prof_leave(unsigned prev)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&prof_cur, (uint8_t)prev, __ATOMIC_RELAXED);
}

/* A thread's samples so far; cpu_ns is the estimate (samples x period) per layer. */
struct prof_counts {
	uint64_t samples[PROF__COUNT];
	uint64_t period_ns;
};

/*
 * Starts sampling the calling thread every period_ns of its CPU time (counts start at 0).
 * 0, or a negative errno (no per-thread CPU timers here: the split is then unavailable).
 */
int prof_thread_start(uint64_t period_ns);
/* The calling thread's counts (sampling on or off). */
void prof_thread_read(struct prof_counts *out);
/* Stops the calling thread's timer; its counts stay readable. */
void prof_thread_stop(void);
/* dst = a - b, per layer. */
void prof_counts_diff(const struct prof_counts *a, const struct prof_counts *b,
		      struct prof_counts *dst);
/* The layer's name as printed and written to JSON ("workload", "index", ...). */
const char *prof_layer_name(enum prof_layer layer);

#endif
