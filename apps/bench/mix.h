/* SPDX-License-Identifier: MIT */
/*
 * Transaction mixes given on the command line (--mix), for the workloads whose transactions
 * have names (tatp, tpcc). Two spellings:
 *
 *   positional   "45,43,4,4,4"                        one percentage per type, in order
 *   named        "NewOrder=50,Payment=50"             types not named get 0 (':' works too)
 *
 * Names are matched without regard to case. The percentages must sum to 100.
 */
#ifndef REMORA_APPS_MIX_H
#define REMORA_APPS_MIX_H

#include "workload.h"

/*
 * Parses the value of knob `knob` into cumulative percentages cum[0..n) (cum[n-1] == 100).
 * Returns 0, or -REMORA_ECONFIG with a one-line reason in wl->err: a malformed number, an
 * unknown transaction name (the message lists the names), a type named twice, or a sum that
 * is not 100.
 */
int wl_mix_parse(struct wl *wl, const char *knob, const char *const *names, unsigned n,
		 unsigned *cum);

/* Draws a type from cumulative percentages. */
static inline unsigned wl_mix_draw(const unsigned *cum, unsigned n, struct wl_rng *r)
{
	unsigned p = (unsigned)wl_rng_below(r, 100), t = 0;

	while (t + 1 < n && p >= cum[t])
		t++;
	return t;
}

#endif
