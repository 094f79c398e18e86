/* SPDX-License-Identifier: MIT */
/*
 * Timestamp services (prefix ts_). Two implementations behind one call:
 *
 *   clock    hybrid clock: CLOCK_REALTIME nanoseconds with the low 6 bits replaced by the
 *            compute-node id, bumped past the last value issued by this process, so values
 *            are strictly increasing per process and unique across compute nodes. Issues no
 *            verb at all (LOTUS's "physical clock" option; no MN atomics).
 *   counter  one FAA on an 8-byte word in a memory node (the store's control area): globally
 *            unique and strictly increasing, at one MN atomic per timestamp. The caller names
 *            the word (gaddr + region key), since this module sits below the store.
 *
 * Both are safe to call from any thread; next() of the counter service waits for its FAA
 * (parking the running coroutine).
 */
#ifndef REMORA_CLUSTER_TS_H
#define REMORA_CLUSTER_TS_H

#include <stdint.h>

#include <remora/transport.h>

enum ts_kind {
	REMORA_TS_CLOCK,
	REMORA_TS_COUNTER,
};

struct ts_service {
	enum ts_kind kind;
	uint16_t cn;
	uint64_t last;        /* clock: last value issued by this process (atomic) */
	remora_gaddr word;    /* counter: the FAA target */
	uint32_t key;
};

/* "clock" | "counter" (NULL: clock) -> kind; -REMORA_ECONFIG for anything else. */
int ts_parse(const char *name, enum ts_kind *kind);
const char *ts_name(enum ts_kind kind);

/* cn < REMORA_MAX_CN. Returns 0 or -REMORA_ECONFIG. */
int ts_init_clock(struct ts_service *ts, uint16_t cn);
void ts_init_counter(struct ts_service *ts, remora_gaddr word, uint32_t key);

/* A new timestamp in *out. ch is used by the counter service only (may be NULL for clock).
 * Returns 0 or the FAA's error. */
int ts_next(struct ts_service *ts, struct remora_chan *ch, uint64_t *out);

#endif
