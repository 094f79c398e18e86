// SPDX-License-Identifier: MIT
/*
 * SmallBank (Alomari et al., ICDE'08; the H-Store version), as FORD and Motor run it and
 * Pandora, LOTUS and CREST reuse: two tables (savings, checking) keyed by account, six
 * transactions mixed 15/15/15/25/15/15, and 90% of transactions drawing their accounts from a
 * hot set of 4% of the accounts (FORD: 4,000 of 100,000), the rest from all accounts.
 * CREST instead draws accounts from Zipf(0.99): --dist zipf.
 *
 * Balances are int64 cents (FORD uses floats) so that the invariant is exact: the bank's
 * total changes only by the deposits and checks of committed transactions, which every
 * coordinator sums (accumulator delta_cents); verify reads every account back and compares.
 *
 * --ledger on adds a third table, one record per coordinator, that every transaction which
 * changes the total updates in the same transaction by the same delta. The total then equals
 * the loaded one plus the ledgers' sum in the store itself, so the check stays exact when a
 * compute node died with its counts (the crash campaign): a commit applied in part shows.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "workload.h"

enum { SB_SAVINGS, SB_CHECKING, SB_LEDGER };

/* Ledger records: one per coordinator of the cluster (global_index), at most this many. */
#define SB_LEDGER_SLOTS 4096u

enum sb_type {
	SB_AMALGAMATE,
	SB_BALANCE,
	SB_DEPOSIT_CHECKING,
	SB_SEND_PAYMENT,
	SB_TRANSACT_SAVING,
	SB_WRITE_CHECK,
	SB__TYPES
};

/* Amounts of FORD's SmallBank, in cents. */
#define SB_DEPOSIT 130        /* DepositChecking: $1.30 */
#define SB_PAYMENT 500        /* SendPayment: $5 */
#define SB_SAVING 2020        /* TransactSaving: $20.20 */
#define SB_CHECK 500          /* WriteCheck: $5, plus $1 penalty on overdraft */
#define SB_PENALTY 100

struct sb_val {
	int64_t cents;
};
_Static_assert(sizeof(struct sb_val) == 8, "SmallBank values are 8 B (16 B records with key)");

enum sb_dist { SB_DIST_HOT, SB_DIST_UNIFORM, SB_DIST_ZIPF };

struct smallbank {
	uint64_t accounts;
	uint64_t hot;
	unsigned hot_pct;
	enum sb_dist dist;
	struct wl_keydist zipf;
	unsigned mix[SB__TYPES]; /* cumulative percentages */
	bool ledger;
};

struct sb_coord {
	struct sb_val v[4];
	bool found[4];
	uint64_t slot; /* this coordinator's ledger record */
};

static const struct wl_knob sb_knobs[] = {
	{ "accounts", "100000", "accounts (FORD: 100K; LOTUS: 20M)" },
	{ "dist", "hot", "account choice: hot (FORD/Motor) | uniform | zipf (CREST)" },
	{ "hot-pct", "90", "percent of transactions on hot accounts (--dist hot)" },
	{ "hot-accounts", "", "size of the hot set; empty: 4% of --accounts" },
	{ "theta", "0.99", "Zipf skew (--dist zipf)" },
	{ "mix", "15,15,15,25,15,15",
	  "percent of Amalgamate,Balance,DepositChecking,SendPayment,TransactSaving,WriteCheck" },
	{ "ledger", "off", "on: every delta also goes to the coordinator's ledger record in the "
	  "same transaction, so --check stays exact after a crash (off: FORD's transactions)" },
	{ NULL, NULL, NULL },
};

static int parse_mix(struct wl *wl, struct smallbank *sb)
{
	const char *s = wl_knob_str(wl, "mix");
	unsigned total = 0;

	for (unsigned i = 0; i < SB__TYPES; i++) {
		char *end;
		unsigned long v = strtoul(s, &end, 10);

		if (end == s || v > 100 || (i + 1 < SB__TYPES ? *end != ',' : *end != '\0'))
			return wl_fail(wl, "--mix: expected six percentages summing to 100, such "
				       "as 15,15,15,25,15,15");
		total += (unsigned)v;
		sb->mix[i] = total;
		s = end + 1;
	}
	if (total != 100)
		return wl_fail(wl, "--mix: percentages sum to %u, not 100", total);
	return 0;
}

static int sb_init(struct wl *wl)
{
	static const char *const dists[] = { "hot", "uniform", "zipf", NULL };
	struct smallbank *sb = calloc(1, sizeof(*sb));
	const char *hot;
	unsigned d;
	uint64_t v;
	int rc;

	if (!sb)
		return wl_fail(wl, "out of memory");
	wl->priv = sb;
	rc = wl_knob_u64(wl, "accounts", 2, UINT64_C(1) << 36, &sb->accounts);
	if (!rc)
		rc = wl_knob_choice(wl, "dist", dists, &d);
	if (!rc)
		rc = wl_knob_u64(wl, "hot-pct", 0, 100, &v);
	if (!rc)
		rc = parse_mix(wl, sb);
	if (rc)
		return rc;
	sb->dist = (enum sb_dist)d;
	rc = wl_knob_onoff(wl, "ledger", &sb->ledger);
	if (rc)
		return rc;
	if (sb->ledger && wl->total_coords > SB_LEDGER_SLOTS)
		return wl_fail(wl, "--ledger on: at most %u coordinators in a cluster (one ledger "
			       "record each)", SB_LEDGER_SLOTS);
	sb->hot_pct = (unsigned)v;
	hot = wl_knob_str(wl, "hot-accounts");
	if (hot && *hot) {
		rc = wl_knob_u64(wl, "hot-accounts", 2, sb->accounts, &sb->hot);
		if (rc)
			return rc;
	} else {
		sb->hot = sb->accounts * 4 / 100;
		if (sb->hot < 2)
			sb->hot = 2;
	}
	if (sb->dist == SB_DIST_ZIPF) {
		double theta;

		rc = wl_knob_double(wl, "theta", 0.0, 10.0, &theta);
		if (!rc)
			rc = wl_keydist_init(wl, &sb->zipf, sb->accounts, theta, false);
	}
	return rc;
}

static void sb_fini(struct wl *wl)
{
	free(wl->priv);
}

static unsigned sb_tables(const struct wl *wl, struct remora_table_def *defs)
{
	const struct smallbank *sb = wl->priv;

	memset(defs, 0, 3 * sizeof(*defs));
	snprintf(defs[0].name, sizeof(defs[0].name), "savings");
	defs[0].id = SB_SAVINGS;
	snprintf(defs[1].name, sizeof(defs[1].name), "checking");
	defs[1].id = SB_CHECKING;
	snprintf(defs[2].name, sizeof(defs[2].name), "ledger");
	defs[2].id = SB_LEDGER;
	for (unsigned i = 0; i < 3; i++) {
		defs[i].value_size = sizeof(struct sb_val);
		defs[i].max_records = i == SB_LEDGER ? SB_LEDGER_SLOTS : sb->accounts;
	}
	return sb->ledger ? 3 : 2;
}

/* Initial balance of an account's savings or checking: $10,000..$50,000 (H-Store's range). */
static int64_t sb_initial(uint64_t acct, unsigned table)
{
	uint64_t x = acct * 2 + table;

	return (int64_t)(10000 + wl_splitmix64(&x) % 40001) * 100;
}

static uint64_t sb_load_count(const struct wl *wl)
{
	const struct smallbank *sb = wl->priv;

	return 2 * sb->accounts + (sb->ledger ? SB_LEDGER_SLOTS : 0);
}

static int sb_load(const struct wl *wl, struct remora_worker *w, uint64_t begin, uint64_t end)
{
	const struct smallbank *sb = wl->priv;

	for (uint64_t i = begin; i < end; i++) {
		unsigned table = i < sb->accounts ? SB_SAVINGS : i < 2 * sb->accounts ? SB_CHECKING :
										    SB_LEDGER;
		uint64_t acct = i - (uint64_t)table * sb->accounts;
		struct sb_val v = { .cents = table == SB_LEDGER ? 0 : sb_initial(acct, table) };
		int rc = remora_db_load(w, table, acct, &v);

		if (rc)
			return rc;
	}
	return 0;
}

static int sb_coord_init(const struct wl *wl, struct wl_coord *c)
{
	struct sb_coord *sc;

	(void)wl;
	sc = calloc(1, sizeof(*sc));
	if (!sc)
		return -ENOMEM;
	sc->slot = c->global_index;
	c->priv = sc;
	return 0;
}

static void sb_coord_fini(const struct wl *wl, struct wl_coord *c)
{
	(void)wl;
	free(c->priv);
}

static uint64_t sb_account(const struct smallbank *sb, struct wl_coord *c, bool hot)
{
	switch (sb->dist) {
	case SB_DIST_ZIPF:
		return wl_keydist_next(&sb->zipf, &c->rng);
	case SB_DIST_UNIFORM:
		return wl_rng_below(&c->rng, sb->accounts);
	case SB_DIST_HOT:
	default:
		return wl_rng_below(&c->rng, hot ? sb->hot : sb->accounts);
	}
}

/* FORD decides hot-or-not once per transaction, then draws every account from that set. */
static void sb_gen(const struct wl *wl, struct wl_coord *c, struct wl_input *in)
{
	const struct smallbank *sb = wl->priv;
	unsigned p = (unsigned)wl_rng_below(&c->rng, 100);
	bool hot = wl_rng_pct(&c->rng, sb->hot_pct);

	memset(in, 0, sizeof(*in));
	in->type = 0;
	while (in->type + 1 < SB__TYPES && p >= sb->mix[in->type])
		in->type++;
	in->key[0] = sb_account(sb, c, hot);
	in->nkeys = 1;
	if (in->type == SB_AMALGAMATE || in->type == SB_SEND_PAYMENT) {
		do
			in->key[1] = sb_account(sb, c, hot);
		while (in->key[1] == in->key[0]);
		in->nkeys = 2;
	}
}

static unsigned sb_tx_flags(const struct wl *wl, const struct wl_input *in)
{
	(void)wl;
	return in->type == SB_BALANCE ? REMORA_TX_READ_ONLY : 0;
}

/* Stages (table, account, mode) triples into the coordinator's buffers and fetches them. */
static int sb_fetch(struct remora_tx *tx, struct sb_coord *sc, unsigned n, const unsigned *table,
		    const uint64_t *acct, const enum remora_access *mode)
{
	int rc;

	for (unsigned i = 0; i < n; i++) {
		rc = remora_tx_stage(tx, table[i], acct[i], mode[i], &sc->v[i], &sc->found[i]);
		if (rc)
			return rc;
	}
	rc = remora_tx_fetch(tx);
	if (rc)
		return rc;
	for (unsigned i = 0; i < n; i++)
		if (!sc->found[i])
			return -REMORA_ENOTFOUND; /* every account is loaded: a store bug */
	return 0;
}

static int sb_put(struct remora_tx *tx, unsigned table, uint64_t acct, int64_t cents)
{
	struct sb_val v = { .cents = cents };

	return remora_tx_write(tx, table, acct, &v);
}

/*
 * A transaction that changes the total: fetches its n records and, with --ledger on, the
 * coordinator's ledger record (read for update) in the same round trip, as v[n].
 */
static int sb_fetch_delta(const struct smallbank *sb, struct remora_tx *tx, struct sb_coord *sc,
			  unsigned n, const unsigned *table, const uint64_t *acct,
			  const enum remora_access *mode)
{
	unsigned t[4];
	uint64_t a[4];
	enum remora_access m[4];

	memcpy(t, table, n * sizeof(*t));
	memcpy(a, acct, n * sizeof(*a));
	memcpy(m, mode, n * sizeof(*m));
	if (sb->ledger) {
		t[n] = SB_LEDGER;
		a[n] = sc->slot;
		m[n] = REMORA_RW;
		n++;
	}
	return sb_fetch(tx, sc, n, t, a, m);
}

/* Adds delta to the ledger record fetched as v[at] (--ledger on), else nothing. */
static int sb_ledger_put(const struct smallbank *sb, struct remora_tx *tx, struct sb_coord *sc,
			 unsigned at, int64_t delta)
{
	return sb->ledger ? sb_put(tx, SB_LEDGER, sc->slot, sc->v[at].cents + delta) : 0;
}

static int sb_exec(const struct wl *wl, struct wl_coord *c, struct remora_tx *tx,
		   const struct wl_input *in, struct wl_result *res)
{
	const struct smallbank *sb = wl->priv;
	struct sb_coord *sc = c->priv;
	uint64_t a0 = in->key[0], a1 = in->key[1];
	int rc;

	switch (in->type) {
	case SB_AMALGAMATE: {
		static const unsigned t[] = { SB_SAVINGS, SB_CHECKING, SB_CHECKING };
		static const enum remora_access m[] = { REMORA_RW, REMORA_RW, REMORA_RW };
		const uint64_t a[] = { a0, a0, a1 };
		int64_t moved;

		rc = sb_fetch(tx, sc, 3, t, a, m);
		if (rc)
			return rc;
		moved = sc->v[0].cents + sc->v[1].cents;
		rc = sb_put(tx, SB_SAVINGS, a0, 0);
		if (!rc)
			rc = sb_put(tx, SB_CHECKING, a0, 0);
		if (!rc)
			rc = sb_put(tx, SB_CHECKING, a1, sc->v[2].cents + moved);
		return rc;
	}
	case SB_BALANCE: {
		static const unsigned t[] = { SB_SAVINGS, SB_CHECKING };
		static const enum remora_access m[] = { REMORA_RD, REMORA_RD };
		const uint64_t a[] = { a0, a0 };

		return sb_fetch(tx, sc, 2, t, a, m);
	}
	case SB_DEPOSIT_CHECKING: {
		static const unsigned t[] = { SB_CHECKING };
		static const enum remora_access m[] = { REMORA_RW };

		rc = sb_fetch_delta(sb, tx, sc, 1, t, &a0, m);
		if (!rc)
			rc = sb_put(tx, SB_CHECKING, a0, sc->v[0].cents + SB_DEPOSIT);
		if (!rc)
			rc = sb_ledger_put(sb, tx, sc, 1, SB_DEPOSIT);
		res->delta = SB_DEPOSIT;
		return rc;
	}
	case SB_SEND_PAYMENT: {
		static const unsigned t[] = { SB_CHECKING, SB_CHECKING };
		static const enum remora_access m[] = { REMORA_RW, REMORA_RW };
		const uint64_t a[] = { a0, a1 };

		rc = sb_fetch(tx, sc, 2, t, a, m);
		if (rc)
			return rc;
		if (sc->v[0].cents < SB_PAYMENT)
			return WL_USER_ABORT; /* insufficient funds: the transaction's own abort */
		rc = sb_put(tx, SB_CHECKING, a0, sc->v[0].cents - SB_PAYMENT);
		if (!rc)
			rc = sb_put(tx, SB_CHECKING, a1, sc->v[1].cents + SB_PAYMENT);
		return rc;
	}
	case SB_TRANSACT_SAVING: {
		static const unsigned t[] = { SB_SAVINGS };
		static const enum remora_access m[] = { REMORA_RW };

		rc = sb_fetch_delta(sb, tx, sc, 1, t, &a0, m);
		if (!rc)
			rc = sb_put(tx, SB_SAVINGS, a0, sc->v[0].cents + SB_SAVING);
		if (!rc)
			rc = sb_ledger_put(sb, tx, sc, 1, SB_SAVING);
		res->delta = SB_SAVING;
		return rc;
	}
	case SB_WRITE_CHECK:
	default: {
		static const unsigned t[] = { SB_SAVINGS, SB_CHECKING };
		static const enum remora_access m[] = { REMORA_RD, REMORA_RW };
		const uint64_t a[] = { a0, a0 };
		int64_t debit = SB_CHECK;

		rc = sb_fetch_delta(sb, tx, sc, 2, t, a, m);
		if (rc)
			return rc;
		if (sc->v[0].cents + sc->v[1].cents < SB_CHECK)
			debit += SB_PENALTY;
		res->delta = -debit;
		rc = sb_put(tx, SB_CHECKING, a0, sc->v[1].cents - debit);
		return rc ? rc : sb_ledger_put(sb, tx, sc, 2, -debit);
	}
	}
}

static void sb_commit(const struct wl *wl, struct wl_coord *c, const struct wl_input *in,
		      const struct wl_result *res, uint64_t txid)
{
	(void)wl;
	(void)in;
	(void)txid;
	c->acc[0] += res->delta;
}

/* ---- verify: the bank's total ----------------------------------------------------------- */

#define SUM_BATCH 16

struct sb_sum {
	const struct smallbank *sb;
	struct remora_worker *w;
	int64_t total;
	int64_t ledger; /* the ledger records' sum (--ledger on) */
	uint64_t locked_acct;
	int rc;
};

static int sum_batch(struct sb_sum *s, unsigned table, uint64_t at, unsigned n)
{
	struct sb_val v[SUM_BATCH];
	bool found[SUM_BATCH];
	uint64_t keys[SUM_BATCH];
	int rc;

	for (unsigned i = 0; i < n; i++)
		keys[i] = at + i;
	rc = wl_probe_locks(s->w, table, keys, n, v, sizeof(v[0]), found, WL_VERIFY_TIMEOUT_MS);
	if (rc == -ETIMEDOUT)
		s->locked_acct = at;
	if (rc)
		return rc;
	for (unsigned i = 0; i < n; i++) {
		if (!found[i])
			return -REMORA_ENOTFOUND;
		*(table == SB_LEDGER ? &s->ledger : &s->total) += v[i].cents;
	}
	return 0;
}

static void sum_coro(void *arg)
{
	struct sb_sum *s = arg;

	for (unsigned table = 0; table < (s->sb->ledger ? 3u : 2u); table++) {
		uint64_t n = table == SB_LEDGER ? SB_LEDGER_SLOTS : s->sb->accounts;

		for (uint64_t at = 0; at < n && !s->rc; at += SUM_BATCH) {
			uint64_t left = n - at;

			s->rc = sum_batch(s, table, at, left < SUM_BATCH ? (unsigned)left : SUM_BATCH);
		}
	}
}

/*
 * --ledger on: the total must equal the loaded one plus the ledgers, in the store itself, even
 * when a compute node died; with every node's counts at hand the ledgers must also equal them.
 */
static int sb_verify_ledger(const struct wl *wl, const struct sb_sum *s, int64_t initial,
			    const int64_t *acc, char *msg, size_t msglen)
{
	if (s->total != initial + s->ledger) {
		snprintf(msg, msglen, "total balance is %" PRId64 " cents, expected %" PRId64
			 " (loaded %" PRId64 " + ledgers %" PRId64 "): off by %" PRId64, s->total,
			 initial + s->ledger, initial, s->ledger, s->total - initial - s->ledger);
		return 1;
	}
	if (!wl->acc_partial && s->ledger != acc[0]) {
		snprintf(msg, msglen, "the ledgers sum to %" PRId64 " cents but the committed "
			 "transactions reported %" PRId64, s->ledger, acc[0]);
		return 1;
	}
	snprintf(msg, msglen, "total balance conserved: %" PRId64 " cents (loaded %" PRId64
		 " + ledgers %" PRId64 "%s)", s->total, initial, s->ledger,
		 wl->acc_partial ? "; a compute node died, its counts are not needed" : "");
	return 0;
}

static int sb_verify(const struct wl *wl, struct remora_worker *w, const int64_t *acc, char *msg,
		     size_t msglen)
{
	const struct smallbank *sb = wl->priv;
	struct sb_sum s = { .sb = sb, .w = w };
	int64_t initial = 0, expect;
	int rc;

	for (uint64_t a = 0; a < sb->accounts; a++)
		initial += sb_initial(a, SB_SAVINGS) + sb_initial(a, SB_CHECKING);
	rc = wl_on_worker(w, sum_coro, &s);
	if (!rc)
		rc = s.rc;
	if (rc == -ETIMEDOUT) {
		char note[WL_LOCK_NOTE_LEN];

		snprintf(msg, msglen, "an account among %" PRIu64 "..%" PRIu64 " stays locked after "
			 "every compute node exited (a leaked lock)%s", s.locked_acct,
			 s.locked_acct + SUM_BATCH - 1, wl_lock_note(w, note, sizeof(note)));
		return 1;
	}
	if (rc) {
		snprintf(msg, msglen, "reading the accounts back failed: %s", remora_strerror(rc));
		return rc;
	}
	if (sb->ledger)
		return sb_verify_ledger(wl, &s, initial, acc, msg, msglen);
	expect = initial + acc[0];
	if (wl->acc_partial) {
		snprintf(msg, msglen,
			 "no account left locked; conservation not checked: a compute "
			 "node died, and the deltas it committed with it (total %" PRId64 " cents)",
			 s.total);
		return 0;
	}
	if (s.total != expect) {
		snprintf(msg, msglen, "total balance is %" PRId64 " cents, expected %" PRId64
			 " (loaded %" PRId64 " + committed deltas %" PRId64 "): off by %" PRId64,
			 s.total, expect, initial, acc[0], s.total - expect);
		return 1;
	}
	snprintf(msg, msglen, "total balance conserved: %" PRId64 " cents (loaded %" PRId64
		 " + committed deltas %" PRId64 ")", s.total, initial, acc[0]);
	return 0;
}

const struct wl_desc wl_smallbank = {
	.name = "smallbank",
	.summary = "SmallBank: 2 tables, 6 transactions, 90% on 4% hot accounts (FORD/Motor)",
	.source = "FORD (FAST'22) and Motor (OSDI'24) SmallBank; H-Store SmallBank",
	.knobs = sb_knobs,
	.ntypes = SB__TYPES,
	.type_names = { "Amalgamate", "Balance", "DepositChecking", "SendPayment",
			"TransactSaving", "WriteCheck" },
	.acc_names = { "delta_cents" },
	.init = sb_init,
	.fini = sb_fini,
	.tables = sb_tables,
	.load_count = sb_load_count,
	.load = sb_load,
	.coord_init = sb_coord_init,
	.coord_fini = sb_coord_fini,
	.gen = sb_gen,
	.tx_flags = sb_tx_flags,
	.exec = sb_exec,
	.commit = sb_commit,
	.verify = sb_verify,
};
