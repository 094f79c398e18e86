/* SPDX-License-Identifier: MIT */
/*
 * LOTUS's compute-node lock table (prefix lotus_lt_): a fixed array of 64-byte buckets of
 * eight 8-byte slots, each slot {56-bit fingerprint | 8-bit counter} (counter 0 free, 1 write
 * locked, 2k: k readers). It lives in this compute node's DRAM only; acquire and release are
 * one CPU CAS each (plus a rescan, see locktab.c), never a memory-node verb. No-wait: a
 * conflict, a full bucket or a reader count that would overflow fails at once.
 */
#ifndef REMORA_TXN_LOTUS_LOCKTAB_H
#define REMORA_TXN_LOTUS_LOCKTAB_H

#include <stdbool.h>
#include <stdint.h>

#define LOTUS_LT_SLOTS 8u     /* slots per bucket */
#define LOTUS_LT_BUCKET 64u   /* bytes per bucket */

struct lotus_lt {
	uint64_t *slot;     /* nbuckets x LOTUS_LT_SLOTS words (atomic), 64-byte aligned */
	uint64_t nbuckets;  /* a power of two */
	bool no_rescan;     /* the lotus_findmatch_race mutation: no rescan after a CAS */
	/* Tests only: runs between FINDMATCH and the CAS of an acquire (to replay a race). */
	void (*race_hook)(struct lotus_lt *lt, void *arg);
	void *race_arg;
};

/* A table of about bytes bytes (rounded down to a power of two of buckets, at least one). */
int lotus_lt_init(struct lotus_lt *lt, uint64_t bytes);
void lotus_lt_fini(struct lotus_lt *lt);

/* The lock of hash h (of table and key): the slot (0..7) that grants it, or -1 (refused). */
int lotus_lt_acquire(struct lotus_lt *lt, uint64_t h, bool write);
/* Gives back a lock of h held in that mode in slot (what acquire returned). */
void lotus_lt_release(struct lotus_lt *lt, uint64_t h, int slot, bool write);

/* The slot word of h's fingerprint in its bucket (0: none), for tests. */
uint64_t lotus_lt_peek(const struct lotus_lt *lt, uint64_t h);

#endif
