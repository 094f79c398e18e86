/* SPDX-License-Identifier: MIT */
/* The bank of the transaction-engine concurrency tests; see bank.h. */
#include <stdio.h>
#include <string.h>

#include <remora/sched.h>

#include "bank.h"

#define ATTEMPTS 100000 /* per transfer, before the test calls it a livelock */
#define AUDIT_TRIES 200 /* audits meet locks often (Pandora aborts on them) */
#define MAX_AMOUNT 100

uint64_t bank_rand64(uint64_t *state)
{
	uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static void co_fail(struct bank_co *c, int rc, const char *what)
{
	if (!c->fail)
		snprintf(c->why, sizeof(c->why), "coordinator %u: %s: %s (%s)", c->id, what,
			 remora_strerror(rc), remora_worker_errmsg(c->w));
	c->fail = true;
}

/* One transfer; returns 0 committed, -REMORA_EABORT to retry, else a failure. */
static int transfer(struct remora_worker *w, uint64_t from, uint64_t to, int64_t amount)
{
	struct remora_tx *tx;
	int64_t vf, vt;
	int rc = remora_tx_begin(w, 0, &tx);

	if (rc)
		return rc;
	rc = remora_tx_stage(tx, 0, from, REMORA_RW, &vf, NULL);
	if (!rc)
		rc = remora_tx_stage(tx, 0, to, REMORA_RW, &vt, NULL);
	if (!rc)
		rc = remora_tx_fetch(tx);
	if (!rc) {
		vf -= amount;
		vt += amount;
		rc = remora_tx_write(tx, 0, from, &vf);
	}
	if (!rc)
		rc = remora_tx_write(tx, 0, to, &vt);
	if (rc) {
		remora_tx_abort(tx);
		return rc;
	}
	return remora_tx_commit(tx);
}

/* Reads every account in one batch; a committed audit must see the exact total. */
static int audit(struct bank_co *c)
{
	int64_t v[BANK_MAX_ACCOUNTS], sum = 0;
	struct remora_tx *tx;
	int rc = remora_tx_begin(c->w, REMORA_TX_READ_ONLY, &tx);

	if (rc)
		return rc;
	for (unsigned i = 0; i < c->accounts && !rc; i++)
		rc = remora_tx_stage(tx, 0, i, REMORA_RD, &v[i], NULL);
	if (!rc)
		rc = remora_tx_fetch(tx);
	if (rc) {
		remora_tx_abort(tx);
		return rc;
	}
	rc = remora_tx_commit(tx);
	if (rc)
		return rc;
	for (unsigned i = 0; i < c->accounts; i++)
		sum += v[i];
	if (sum != (int64_t)c->accounts * BANK_START) {
		/* FORD validates versions only (Covert Locks): an audit can commit a torn
		 * snapshot across threads. Counted for FORD, a failure for Pandora. */
		c->torn++;
		if (c->strict && !c->fail) {
			snprintf(c->why, sizeof(c->why), "coordinator %u: audit saw total %lld",
				 c->id, (long long)sum);
			c->fail = true;
		}
	}
	c->audits++;
	return 0;
}

/* Retries an aborted transfer after a random backoff that grows with the attempts. */
static int transfer_until_committed(struct bank_co *c, uint64_t from, uint64_t to,
				    int64_t amount)
{
	int rc = -REMORA_EABORT;

	for (unsigned attempt = 0; attempt < ATTEMPTS && rc == -REMORA_EABORT; attempt++) {
		rc = transfer(c->w, from, to, amount);
		if (rc == -REMORA_EABORT) {
			/* Let the lock holder finish. */
			unsigned spins = 1 + (unsigned)(bank_rand64(&c->rng) %
							 (2u << (attempt < 6 ? attempt : 6)));

			c->aborted++;
			while (spins--)
				remora_yield();
		}
	}
	if (rc)
		co_fail(c, rc, rc == -REMORA_EABORT ? "livelock" : "transfer");
	return rc;
}

void bank_coordinator(void *arg)
{
	struct bank_co *c = arg;

	for (unsigned n = 0; n < c->transfers && !c->fail; n++) {
		uint64_t from = bank_rand64(&c->rng) % c->accounts;
		uint64_t to = (from + 1 + bank_rand64(&c->rng) % (c->accounts - 1)) % c->accounts;
		int64_t amount = (int64_t)(bank_rand64(&c->rng) % MAX_AMOUNT);
		int rc;

		if (transfer_until_committed(c, from, to, amount))
			break;
		c->committed++;
		c->delta[from] -= amount;
		c->delta[to] += amount;
		if (n % BANK_AUDIT_EVERY)
			continue;
		rc = -REMORA_EABORT;
		for (unsigned k = 0; k < AUDIT_TRIES && rc == -REMORA_EABORT; k++) {
			rc = audit(c);
			if (rc == -REMORA_EABORT)
				remora_yield();
		}
		if (rc && rc != -REMORA_EABORT)
			co_fail(c, rc, "audit");
	}
}

int bank_run(struct remora_worker *w, struct bank_co *co, unsigned n)
{
	struct remora_sched *s = remora_worker_sched(w);

	for (unsigned i = 0; i < n; i++) {
		int rc = remora_sched_spawn(s, bank_coordinator, &co[i]);

		if (rc)
			return rc;
	}
	return remora_sched_run(s);
}

int bank_tally(const struct bank_co *co, unsigned n, struct bank_tally *t, char *why,
	       size_t size)
{
	memset(t, 0, sizeof(*t));
	for (unsigned k = 0; k < BANK_MAX_ACCOUNTS; k++)
		t->expect[k] = BANK_START;
	for (unsigned i = 0; i < n; i++) {
		const struct bank_co *c = &co[i];

		if (c->fail) {
			snprintf(why, size, "%s", c->why);
			return 1;
		}
		if (c->committed != c->transfers) {
			snprintf(why, size, "coordinator %u committed %u of %u transfers", c->id,
				 c->committed, c->transfers);
			return 1;
		}
		t->committed += c->committed;
		t->aborted += c->aborted;
		t->audits += c->audits;
		t->torn += c->torn;
		for (unsigned k = 0; k < c->accounts; k++)
			t->expect[k] += c->delta[k];
	}
	return 0;
}
