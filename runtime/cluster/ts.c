/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>
#include <time.h>

#include <remora/sched.h>

#include "ts.h"

#define TS_CN_BITS 6u
#define TS_CN_MASK ((UINT64_C(1) << TS_CN_BITS) - 1)
_Static_assert((1u << TS_CN_BITS) >= REMORA_MAX_CN, "every compute node id fits the low bits");

int ts_parse(const char *name, enum ts_kind *kind)
{
	if (!name || strcmp(name, "clock") == 0)
		*kind = REMORA_TS_CLOCK;
	else if (strcmp(name, "counter") == 0)
		*kind = REMORA_TS_COUNTER;
	else
		return -REMORA_ECONFIG;
	return 0;
}

const char *ts_name(enum ts_kind kind)
{
	return kind == REMORA_TS_COUNTER ? "counter" : "clock";
}

int ts_init_clock(struct ts_service *ts, uint16_t cn)
{
	if (cn >= REMORA_MAX_CN)
		return -REMORA_ECONFIG;
	memset(ts, 0, sizeof(*ts));
	ts->kind = REMORA_TS_CLOCK;
	ts->cn = cn;
	return 0;
}

void ts_init_counter(struct ts_service *ts, remora_gaddr word, uint32_t key)
{
	memset(ts, 0, sizeof(*ts));
	ts->kind = REMORA_TS_COUNTER;
	ts->word = word;
	ts->key = key;
}

/*
 * Clock: candidate = now with the node id in the low bits; if the process already issued
 * something >= candidate (clock step back, or two calls in the same 64 ns), take the next
 * value with our low bits above the last one. One CAS loop on a process-local word.
 */
static uint64_t ts_clock_next(struct ts_service *ts)
{
	struct timespec now;
	uint64_t cand, last, next;

	clock_gettime(CLOCK_REALTIME, &now);
	cand = ((uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec) & ~TS_CN_MASK;
	cand |= ts->cn;
	last = __atomic_load_n(&ts->last, __ATOMIC_RELAXED);
	do {
		next = cand > last ? cand : ((last & ~TS_CN_MASK) + (TS_CN_MASK + 1)) | ts->cn;
	} while (!__atomic_compare_exchange_n(&ts->last, &last, next, true, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return next;
}

int ts_next(struct ts_service *ts, struct remora_chan *ch, uint64_t *out)
{
	struct remora_wr wr;
	uint64_t old = 0;
	int rc;

	if (ts->kind == REMORA_TS_CLOCK) {
		*out = ts_clock_next(ts);
		return 0;
	}
	if (!ch)
		return -EINVAL;
	wr = (struct remora_wr){ .raddr = ts->word, .rkey = ts->key, .op = REMORA_OP_FAA,
				 .swap = 1, .local = &old };
	rc = remora_co_exec(ch, &wr, 1);
	if (rc)
		return rc;
	*out = old + 1;
	return 0;
}
