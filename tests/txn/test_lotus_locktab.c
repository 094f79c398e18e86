/* SPDX-License-Identifier: MIT */
/*
 * LOTUS's compute-node lock table (runtime/txn/proto/lotus/locktab.c): one CAS per acquire and
 * per release, no-wait, a full bucket and reader overflow refused, and the FINDMATCH race of
 * digest ambiguity 1 closed by the rescan after each grant. The race is replayed exactly (a
 * hook between FINDMATCH and the CAS) and then hammered by threads; negative control: the
 * lotus_findmatch_race mutation (no rescan) lets a reader and a writer hold one key at once.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "tutil.h"

#include "txn/proto/lotus/locktab.h"

TestSuite(lotus_locktab, .timeout = TU_TIMEOUT);

/* Hashes with one bucket index (0) and distinct fingerprints. */
#define H(n) ((uint64_t)(n) << 20)

Test(lotus_locktab, modes_and_no_wait)
{
	struct lotus_lt lt;
	int w, r1, r2;

	cr_assert_eq(lotus_lt_init(&lt, 1u << 16), 0);
	w = lotus_lt_acquire(&lt, H(1), true);
	cr_assert_geq(w, 0);
	cr_assert_lt(lotus_lt_acquire(&lt, H(1), true), 0, "two writers");
	cr_assert_lt(lotus_lt_acquire(&lt, H(1), false), 0, "a reader over a writer");
	lotus_lt_release(&lt, H(1), w, true);
	cr_assert_eq(lotus_lt_peek(&lt, H(1)), 0, "release zeroes the slot");
	r1 = lotus_lt_acquire(&lt, H(1), false);
	r2 = lotus_lt_acquire(&lt, H(1), false);
	cr_assert(r1 >= 0 && r1 == r2, "readers share one slot");
	cr_assert_eq(lotus_lt_peek(&lt, H(1)) & 0xff, 4, "two readers: counter 4");
	cr_assert_lt(lotus_lt_acquire(&lt, H(1), true), 0, "a writer over readers");
	lotus_lt_release(&lt, H(1), r1, false);
	lotus_lt_release(&lt, H(1), r2, false);
	cr_assert_eq(lotus_lt_peek(&lt, H(1)), 0);
	lotus_lt_fini(&lt);
}

Test(lotus_locktab, full_bucket_and_overflow)
{
	struct lotus_lt lt;
	int s;

	cr_assert_eq(lotus_lt_init(&lt, 64), 0); /* one bucket */
	for (unsigned i = 0; i < LOTUS_LT_SLOTS; i++)
		cr_assert_geq(lotus_lt_acquire(&lt, H(10 + i), true), 0);
	cr_assert_lt(lotus_lt_acquire(&lt, H(99), false), 0, "a full bucket refuses");
	lotus_lt_release(&lt, H(10), 0, true);
	for (unsigned i = 0; i < 127; i++)
		cr_assert_geq(lotus_lt_acquire(&lt, H(99), false), 0, "reader %u", i);
	cr_assert_lt(lotus_lt_acquire(&lt, H(99), false), 0, "the 128th reader overflows");
	s = lotus_lt_acquire(&lt, H(11), true);
	cr_assert_lt(s, 0);
	lotus_lt_fini(&lt);
}

/* ---- the FINDMATCH race, replayed ------------------------------------------------------- */

struct replay {
	int other_slot, writer_slot;
	bool fired;
};

/* The reader has picked slot 1 (slot 0 held by another key); now slot 0 frees and a writer of
 * the same key takes it, before the reader's CAS. */
static void replay_hook(struct lotus_lt *lt, void *arg)
{
	struct replay *r = arg;

	if (r->fired)
		return;
	r->fired = true;
	lotus_lt_release(lt, H(2), r->other_slot, true);
	r->writer_slot = lotus_lt_acquire(lt, H(1), true);
}

/* Whether the reader was granted next to the writer (both hold key 1). */
static bool replay(bool mutated)
{
	struct lotus_lt lt;
	struct replay r = { 0 };
	int reader;

	cr_assert_eq(lotus_lt_init(&lt, 64), 0);
	lt.no_rescan = mutated;
	r.other_slot = lotus_lt_acquire(&lt, H(2), true);
	cr_assert_eq(r.other_slot, 0);
	lt.race_hook = replay_hook;
	lt.race_arg = &r;
	reader = lotus_lt_acquire(&lt, H(1), false);
	cr_assert(r.fired);
	cr_assert_eq(r.writer_slot, 0, "the writer took the freed slot 0");
	cr_assert_eq(lotus_lt_peek(&lt, H(1)) & 0xff, 1, "the writer keeps its lock");
	lotus_lt_fini(&lt);
	return reader >= 0;
}

Test(lotus_locktab, findmatch_race_replayed)
{
	cr_assert_not(replay(false), "a reader granted while a writer holds the key");
}

/* Negative control: without the rescan the reader is granted next to the writer. */
Test(lotus_locktab, findmatch_race_replayed_mutated)
{
	cr_assert(replay(true), "the race did not replay");
}

/* ---- under thread contention -------------------------------------------------------------- */

#define THREADS 4
#define ROUNDS 200000

static struct lotus_lt LT;
static atomic_int readers, writers, bad;

/* Key 1 taken R or W by every thread; keys 2..5 churn through the same bucket, so free slots
 * open and close before and after key 1's slot. */
static void *hammer(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg, x = id * 2654435761u + 1;

	for (unsigned i = 0; i < ROUNDS; i++) {
		bool w;
		int s, o;

		x = x * 1103515245u + 12345u;
		w = (x >> 16) % 3 == 0;
		o = lotus_lt_acquire(&LT, H(2 + (x >> 8) % 4), true);
		s = lotus_lt_acquire(&LT, H(1), w);
		if (o >= 0)
			lotus_lt_release(&LT, H(2 + (x >> 8) % 4), o, true);
		if (s < 0)
			continue;
		if (w) {
			if (atomic_fetch_add(&writers, 1) != 0 || atomic_load(&readers) != 0)
				atomic_fetch_add(&bad, 1);
			atomic_fetch_sub(&writers, 1);
		} else {
			atomic_fetch_add(&readers, 1);
			if (atomic_load(&writers) != 0)
				atomic_fetch_add(&bad, 1);
			atomic_fetch_sub(&readers, 1);
		}
		lotus_lt_release(&LT, H(1), s, w);
	}
	return NULL;
}

Test(lotus_locktab, contention_never_r_and_w)
{
	pthread_t t[THREADS];

	cr_assert_eq(lotus_lt_init(&LT, 64), 0); /* everything in one bucket */
	for (uintptr_t i = 0; i < THREADS; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, hammer, (void *)i), 0);
	for (unsigned i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(atomic_load(&bad), 0, "%d overlapping R/W or W/W holds", atomic_load(&bad));
	for (unsigned i = 0; i < LOTUS_LT_SLOTS; i++)
		cr_assert_eq(LT.slot[i], 0, "slot %u left %#llx", i, (unsigned long long)LT.slot[i]);
	lotus_lt_fini(&LT);
}
