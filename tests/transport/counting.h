/* SPDX-License-Identifier: MIT */
/*
 * Counting workers of the atomics tests, shared by test_concurrency.c and stress_threads.c (the
 * ThreadSanitizer program, which cannot link criterion, so neither does this file). Each worker
 * opens its own channel on a transport attached to memory node 0 and, k times each, does an FAA
 * increment, a CAS-increment loop, and on a third word FAA and CAS loops in turn; then CW_KF
 * masked-CAS increments of its own 8-bit field of a fourth word. Atomics that are atomic against
 * each other leave every total exact, whatever the interleaving.
 */
#ifndef REMORA_TESTS_COUNTING_H
#define REMORA_TESTS_COUNTING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <remora/transport.h>

#define CW_FAA_OFF 0u   /* FAA only */
#define CW_CAS_OFF 64u  /* CAS-increment loops only */
#define CW_MIX_OFF 128u /* FAA and CAS loops on one word */
#define CW_FLD_OFF 192u /* 8 fields of 8 bits, one per worker */
#define CW_BYTES 256u   /* node 0's bytes the workers use, from offset 0: zero them first */
#define CW_FIELDS 8u    /* at most this many workers per run */
#define CW_KF 200u      /* masked-CAS increments per worker (< 256) */

struct cw_worker {
	struct remora_transport *tp;
	uint32_t key;     /* a region of node 0 covering [0, CW_BYTES) */
	unsigned field;   /* < CW_FIELDS */
	unsigned k;       /* increments per kind */
	bool mcas;        /* the transport has masked-CAS */
	const char *file; /* NULL: passed; else where the first check failed ... */
	int line;
	char why[160];    /* ... and what it saw */
};

/* pthread start routine: runs worker arg to its end or its first failure. */
void *cw_worker_main(void *arg);

/* FAA verbs one worker posts: k increments plus half the k mixed ones. */
static inline uint64_t cw_faa_verbs(unsigned k)
{
	return k + k / 2;
}

/*
 * Checks the words at base (node 0's offset 0) once `workers` workers of k increments each ran,
 * with fields 0..workers-1 (with mcas). 0, or 1 with why describing the first wrong total.
 */
int cw_check(const uint8_t *base, unsigned workers, unsigned k, bool mcas, char *why,
	     size_t size);

#endif
