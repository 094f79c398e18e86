/* SPDX-License-Identifier: MIT */
/*
 * runtime/recovery, the lock sweep: step 4 of a whole-cluster recovery (recovery.h) for the
 * protocols whose entries carry one lock word per record slot (the OCC core: FORD, Pandora;
 * OOCC and its ablations). Every used record slot of every table on every memory node is
 * read; each held lock word is released with a CAS (no transaction is live after a
 * whole-cluster crash), and each used slot that fails its codec's decode is counted as torn
 * (published: an index slot points to it) or torn_unpublished (no read can reach it).
 */
#ifndef REMORA_RECOVERY_SWEEP_H
#define REMORA_RECOVERY_SWEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recovery.h"
#include "store/store.h"

/* What the sweep borrows from its caller's recovery. */
struct sweep_cfg {
	const struct store_db *st;
	struct remora_chan *ch;
	bool check;                  /* write nothing: count only */
	struct recovery_report *rep; /* records, locks, locks_released, torn, torn_unpublished */
	unsigned char *buf;          /* scratch for one READ of records or buckets */
	size_t buflen;
	char *err;                   /* one line on failure */
	size_t errlen;
};

/*
 * Releases every held lock word on memory nodes 0 .. st->n_mn-1 and persists the swept areas
 * (one persist point per table and node that had a lock released). Returns 0, -ENOMEM, or a
 * verb's error with one line in cfg->err.
 */
int sweep_release_locks(const struct sweep_cfg *cfg);

#endif
