/* SPDX-License-Identifier: MIT */
/*
 * The compute-node lock table (locktab.h). Alg. 1 of the paper with its FINDMATCH race
 * closed (digest ambiguity 1):
 *
 *   FINDMATCH picks the slot holding the key's fingerprint, else the first free one. Two
 *   acquirers can pick DIFFERENT slots for one fingerprint (one scans past slot 2 while it
 *   is taken, slot 2 frees, the other takes slot 2; the first takes slot 3), and then a
 *   reader and a writer both hold the key.
 *
 *   Fix: after every CAS that grants (a new slot or a join), the acquirer rescans its bucket;
 *   if another slot carries the same fingerprint in a conflicting mode (a writer, or any
 *   holder when we write), it gives its grant back and fails (no-wait: the transaction
 *   aborts). With sequentially consistent CAS and loads, of two grants that overlap in time
 *   the later one's rescan runs after the earlier one's CAS while that slot is still held, so
 *   it sees it: at most one of two conflicting holders survives. Both may back off (a false
 *   conflict, as a fingerprint collision is), never both keep. The rescan reads the one
 *   64-byte line the CAS just touched.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "locktab.h"

#define FP_SHIFT 8
#define CNT_MASK 0xffu
#define CNT_W 1u
#define CNT_R 2u
#define CNT_R_MAX 254u /* 127 readers */

static uint64_t fp_of(uint64_t h)
{
	uint64_t fp = h >> FP_SHIFT;

	return fp ? fp : 1; /* fingerprint 0 is a free slot's */
}

static uint64_t *bucket_of(const struct lotus_lt *lt, uint64_t h)
{
	return lt->slot + (h & (lt->nbuckets - 1)) * LOTUS_LT_SLOTS;
}

static uint64_t load(const uint64_t *w)
{
	return __atomic_load_n(w, __ATOMIC_SEQ_CST);
}

static bool cas(uint64_t *w, uint64_t old, uint64_t nw)
{
	return __atomic_compare_exchange_n(w, &old, nw, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

int lotus_lt_init(struct lotus_lt *lt, uint64_t bytes)
{
	uint64_t n = 1;

	while (n * 2 * LOTUS_LT_BUCKET <= bytes)
		n *= 2;
	memset(lt, 0, sizeof(*lt));
	lt->slot = aligned_alloc(LOTUS_LT_BUCKET, n * LOTUS_LT_BUCKET);
	if (!lt->slot)
		return -ENOMEM;
	memset(lt->slot, 0, n * LOTUS_LT_BUCKET);
	lt->nbuckets = n;
	return 0;
}

void lotus_lt_fini(struct lotus_lt *lt)
{
	free(lt->slot);
	lt->slot = NULL;
}

/* FINDMATCH: the slot with fp, else the first free one, else NULL (a full bucket). */
static uint64_t *findmatch(uint64_t *b, uint64_t fp, uint64_t *seen)
{
	uint64_t *free_slot = NULL;

	for (unsigned i = 0; i < LOTUS_LT_SLOTS; i++) {
		uint64_t w = load(&b[i]);

		if (w && w >> FP_SHIFT == fp) {
			*seen = w;
			return &b[i];
		}
		if (!w && !free_slot)
			free_slot = &b[i];
	}
	*seen = 0;
	return free_slot;
}

/* Another slot than mine holds fp in a mode that conflicts with ours. */
static bool rescan_conflict(const uint64_t *b, const uint64_t *mine, uint64_t fp, bool write)
{
	for (unsigned i = 0; i < LOTUS_LT_SLOTS; i++) {
		uint64_t w = load(&b[i]);

		if (&b[i] == mine || !w || w >> FP_SHIFT != fp)
			continue;
		if (write || (w & CNT_MASK) == CNT_W)
			return true;
	}
	return false;
}

/* The new slot word for a grant over `seen`, or 0 when the lock cannot be granted. */
static uint64_t grant_word(uint64_t fp, uint64_t seen, bool write)
{
	uint64_t cnt = seen & CNT_MASK;

	if (write)
		return seen ? 0 : fp << FP_SHIFT | CNT_W;
	if (cnt == CNT_W || cnt >= CNT_R_MAX)
		return 0;
	return fp << FP_SHIFT | (cnt + CNT_R);
}

/* Drops one hold of mode write from slot s (which carries fp). */
static void slot_release(uint64_t *s, bool write)
{
	for (;;) {
		uint64_t w = load(s), nw;

		if (write || (w & CNT_MASK) <= CNT_R)
			nw = 0; /* the last holder zeroes the whole slot: writers compare with 0 */
		else
			nw = w - CNT_R;
		if (cas(s, w, nw))
			return;
	}
}

int lotus_lt_acquire(struct lotus_lt *lt, uint64_t h, bool write)
{
	uint64_t fp = fp_of(h), *b = bucket_of(lt, h);

	for (;;) {
		uint64_t seen, *s = findmatch(b, fp, &seen), nw;

		if (!s)
			return -1;
		nw = grant_word(fp, seen, write);
		if (!nw)
			return -1;
		if (lt->race_hook)
			lt->race_hook(lt, lt->race_arg);
		if (!cas(s, seen, nw))
			continue; /* the slot moved under us: look again */
		if (!lt->no_rescan && rescan_conflict(b, s, fp, write)) {
			slot_release(s, write);
			return -1;
		}
		return (int)(s - b);
	}
}

/* By the slot the grant returned: while a racing acquirer backs off, a second slot may carry
 * the same fingerprint for a moment, so searching by fingerprint could hit its slot. */
void lotus_lt_release(struct lotus_lt *lt, uint64_t h, int slot, bool write)
{
	if (slot >= 0 && slot < (int)LOTUS_LT_SLOTS)
		slot_release(bucket_of(lt, h) + slot, write);
}

uint64_t lotus_lt_peek(const struct lotus_lt *lt, uint64_t h)
{
	uint64_t fp = fp_of(h), seen;

	findmatch(bucket_of(lt, h), fp, &seen);
	return seen;
}
