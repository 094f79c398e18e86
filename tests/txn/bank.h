/* SPDX-License-Identifier: MIT */
/*
 * The bank of the transaction-engine concurrency tests, shared by test_concurrency.c and
 * stress_txn.c (the ThreadSanitizer program, which cannot link criterion, so neither does this
 * file). Table 0 holds `accounts` accounts of BANK_START each. Coordinators (coroutines) move
 * random amounts between two accounts, retrying aborted transfers with a random backoff, and
 * audit all accounts in one read-only transaction every BANK_AUDIT_EVERY transfers. Each
 * coordinator records what its committed transfers did, so that the final balances can be
 * predicted exactly: no lost update, no money created or destroyed.
 */
#ifndef REMORA_TESTS_BANK_H
#define REMORA_TESTS_BANK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <remora/tx.h>

#define BANK_MAX_ACCOUNTS 32
#define BANK_START 1000
#define BANK_AUDIT_EVERY 8

struct bank_co {
	struct remora_worker *w;
	unsigned id;        /* for messages */
	unsigned accounts;  /* 2..BANK_MAX_ACCOUNTS */
	unsigned transfers; /* to commit */
	bool strict;        /* committed audits must see the exact total (not FORD: Covert Locks) */
	uint64_t rng;
	int64_t delta[BANK_MAX_ACCOUNTS]; /* what this coordinator's committed transfers did */
	unsigned committed, aborted, audits, torn;
	bool fail;
	char why[200];
};

/* What a set of coordinators did, summed. */
struct bank_tally {
	int64_t expect[BANK_MAX_ACCOUNTS]; /* each account's balance once they all ended */
	unsigned committed, aborted, audits, torn;
};

/* splitmix64 */
uint64_t bank_rand64(uint64_t *state);

/* The coroutine of coordinator arg (a struct bank_co): its transfers and audits. */
void bank_coordinator(void *arg);
/* Spawns the n coordinators co[] on w's scheduler and runs it. 0 or the scheduler's error. */
int bank_run(struct remora_worker *w, struct bank_co *co, unsigned n);
/*
 * Sums the n coordinators co[] into *t. 0, or 1 with why saying which coordinator failed or
 * did not commit all its transfers.
 */
int bank_tally(const struct bank_co *co, unsigned n, struct bank_tally *t, char *why,
	       size_t size);

#endif
