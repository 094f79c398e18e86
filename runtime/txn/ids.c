/* SPDX-License-Identifier: MIT */
/* Coordinator-id blocks: allocation by CAS, and the recycler. See ids.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ids.h"
#include "mutate/mutate.h"

#define IDS_CHUNK (1u << 20) /* bytes per READ of a record area */
#define IDS_BATCH 256u       /* CASes per store_exec */
#define IDS_FULL_PCT 95u     /* the recycler runs once this share of the blocks is used */
#define IDS_LEASE_S 10u      /* a recycler's claim lapses this long after it was last renewed */

static uint64_t ctl(size_t field)
{
	return REMORA_STORE_CONTROL_OFF + field;
}

uint32_t txn_ids_block_size(uint32_t coords_per_cn)
{
	uint32_t b = 64;

	while (b <= coords_per_cn)
		b <<= 1;
	return b;
}

uint32_t txn_ids_blocks(uint32_t coords_per_cn)
{
	return 65536u / txn_ids_block_size(coords_per_cn);
}

/* Id 0 means "free": block k holds ids k * size + 1 .. k * size + coords_per_cn. */
uint16_t txn_ids_first(uint32_t coords_per_cn, uint32_t block)
{
	return (uint16_t)(block * txn_ids_block_size(coords_per_cn) + 1u);
}

static int read_used(const struct store_db *st, struct remora_chan *ch, uint64_t *used,
		     uint32_t words)
{
	struct remora_wr wr = store_wr_read(
	    st, store_ctl_node(st), ctl(offsetof(struct store_control, id_used)), used, words * 8u);

	return store_exec(ch, &wr, 1);
}

static uint32_t popcount_words(const uint64_t *w, uint32_t n)
{
	uint32_t c = 0;

	for (uint32_t i = 0; i < n; i++)
		c += (uint32_t)__builtin_popcountll(w[i]);
	return c;
}

/*
 * Sets or clears bit k of the used bitmap on node m by CAS, starting from the word seen.
 * 0 when this call changed it, 1 when not.
 */
static int flip_bit(const struct store_db *st, struct remora_chan *ch, uint16_t m, uint32_t k,
		    bool set, uint64_t seen)
{
	uint64_t off = ctl(offsetof(struct store_control, id_used)) + (k / 64) * 8u;
	uint64_t bit = UINT64_C(1) << (k % 64);

	for (;;) {
		uint64_t want = set ? seen | bit : seen & ~bit, old = 0;
		struct remora_wr wr;
		int rc;

		if (want == seen)
			return 1;
		wr = store_wr_cas(st, m, off, seen, want, &old);
		rc = store_exec(ch, &wr, 1);
		if (rc)
			return rc;
		if (old == seen)
			return 0;
		seen = old;
	}
}

/*
 * Bit k set or cleared on every live copy of home 0 but acting. A set must take the bit from
 * 0 on each: a copy that holds it already had it taken by a process that saw another acting
 * node (during a failover), so on such a conflict the bits this call set are given back and
 * 1 is returned. 0, 1 or a verb's error.
 */
static int mirror_bit(const struct store_db *st, struct remora_chan *ch, uint16_t acting,
		      uint32_t k, bool set)
{
	uint32_t mine = 0, mirrors = store_ctl_copies(st) & ~(1u << acting);
	int rc = 0;

	for (uint16_t m = 0; m < 32; m++) {
		if (!(mirrors >> m & 1u))
			continue;
		rc = flip_bit(st, ch, m, k, set, set ? 0 : UINT64_MAX);
		if (rc == 0)
			mine |= 1u << m;
		if (rc < 0 || (rc == 1 && set))
			break;
		rc = 0;
	}
	for (uint16_t m = 0; rc == 1 && m < 32; m++)
		if (mine >> m & 1u)
			(void)flip_bit(st, ch, m, k, false, UINT64_MAX);
	return rc;
}

/*
 * Sets or clears bit k of the used bitmap: decided by CAS on the acting control node, then
 * mirrored on the other copies of home 0 (which take over when node 0 fails over). A clear
 * reads the acting word again after its mirror: a block allocated again between the two
 * (its set mirrored before this clear's) is set once more, so a mirror never holds a used
 * block as free. 0 when this call changed every copy; 1 when the acting word was changed
 * already (lost a race: read again); 2 when a set met the bit set on a mirror (the acting bit
 * is given back: take another block).
 */
static int flip_used(const struct store_db *st, struct remora_chan *ch, uint32_t k, bool set,
		     uint64_t seen)
{
	const uint16_t acting = store_ctl_node(st);
	uint64_t now = 0;
	struct remora_wr wr = store_wr_read(
	    st, acting, ctl(offsetof(struct store_control, id_used)) + (k / 64) * 8u, &now, 8);
	int rc = flip_bit(st, ch, acting, k, set, seen), m;

	if (rc != 0)
		return rc;
	m = mirror_bit(st, ch, acting, k, set);
	if (m == 1) {
		m = flip_bit(st, ch, acting, k, false, UINT64_MAX);
		return m < 0 ? m : 2;
	}
	if (!m && !set)
		m = store_exec(ch, &wr, 1);
	if (!m && !set && (now >> (k % 64) & 1))
		m = mirror_bit(st, ch, acting, k, true) < 0 ? -EIO : 0;
	return m;
}

/* id_owner[cn] on every live copy of home 0 (the acting control node's is the one read). */
static int set_owner(const struct store_db *st, struct remora_chan *ch, uint16_t cn,
		     uint64_t v)
{
	struct remora_wr wrs[REMORA_MAX_MN];
	unsigned n = 0;

	for (uint16_t m = 0; m < 32; m++)
		if (store_ctl_copies(st) >> m & 1u)
			wrs[n++] = store_wr_write(st, m, ctl(offsetof(struct store_control,
								     id_owner)) + cn * 8u,
						  &v, 8, REMORA_WR_DURABLE);
	return store_exec(ch, wrs, n);
}

int txn_ids_alloc(const struct store_db *st, struct remora_chan *ch, uint16_t cn, uint16_t inc,
		  uint64_t mutations, uint32_t *block)
{
	const uint32_t nb = txn_ids_blocks(st->sb.coords_per_cn), words = (nb + 63) / 64;
	uint64_t used[65536 / 64 / 64], skip[65536 / 64 / 64] = { 0 };
	bool recycled = false;

	if (cn >= REMORA_MAX_CN)
		return -EINVAL;
	for (;;) {
		uint32_t freed = 0, k;
		uint64_t strays = 0;
		int rc = read_used(st, ch, used, words);

		if (rc)
			return rc;
		if (!recycled && popcount_words(used, words) * 100u >= IDS_FULL_PCT * nb) {
			recycled = true;
			rc = txn_ids_recycle(st, ch, cn, inc, mutations, &freed, &strays);
			if (rc && rc != -EBUSY) /* -EBUSY: another took the claim over, and recycles */
				return rc;
			continue;
		}
		for (k = 0; k < nb && ((used[k / 64] | skip[k / 64]) >> (k % 64) & 1); k++)
			;
		if (k == nb)
			return -REMORA_EFULL;
		rc = flip_used(st, ch, k, true, used[k / 64]);
		if (rc < 0)
			return rc;
		if (rc == 2)
			skip[k / 64] |= UINT64_C(1) << (k % 64);
		if (rc == 0) {
			*block = k;
			return set_owner(st, ch, cn, (uint64_t)inc << 32 | (k + 1u));
		}
	}
}

int txn_ids_free(const struct store_db *st, struct remora_chan *ch, uint16_t cn, uint16_t inc,
		 uint32_t block)
{
	const uint64_t owner_off = ctl(offsetof(struct store_control, id_owner)) + cn * 8u;
	const uint64_t used_off = ctl(offsetof(struct store_control, id_used)) + (block / 64) * 8u;
	const uint16_t acting = store_ctl_node(st);
	uint64_t seen = 0, mine = (uint64_t)inc << 32 | (block + 1u), old = 0;
	struct remora_wr wrs[REMORA_MAX_MN + 1] = {
		store_wr_read(st, acting, used_off, &seen, 8),
	};
	uint64_t sink[REMORA_MAX_MN + 1];
	unsigned n = 1;
	int rc;

	/* Only our own record, on every live copy: another open of the same cn id may have
	 * taken the word since. */
	for (uint16_t m = 0; m < 32; m++) {
		if (!(store_ctl_copies(st) >> m & 1u))
			continue;
		wrs[n] = store_wr_cas(st, m, owner_off, mine, 0, m == acting ? &old : &sink[n]);
		n++;
	}
	rc = store_exec(ch, wrs, n);
	if (!rc)
		rc = flip_used(st, ch, block, false, seen);
	return rc < 0 ? rc : 0;
}

int txn_ids_owner(const struct store_db *st, struct remora_chan *ch, uint16_t cn,
		  uint32_t *block, uint16_t *inc)
{
	uint64_t v = 0;
	struct remora_wr wr = store_wr_read(
	    st, store_ctl_node(st), ctl(offsetof(struct store_control, id_owner)) + cn * 8u, &v, 8);
	int rc = cn < REMORA_MAX_CN ? store_exec(ch, &wr, 1) : -EINVAL;

	if (rc || !(v & 0xffffffffu))
		return rc;
	*block = (uint32_t)(v & 0xffffffffu) - 1u;
	*inc = (uint16_t)(v >> 32);
	return 1;
}

/* ---- the recycler ------------------------------------------------------------------------ */

/*
 * The recycler's claim word (id_recycling): lease expiry (CLOCK_REALTIME seconds) << 32 |
 * claimant's incarnation << 16 | claimant's compute node + 1; 0: free. A claimant that died
 * holding it stops renewing it: once the expiry has passed, the next recycler takes it over
 * (with a CAS from the lapsed word). Clocks of compute nodes are assumed within a few seconds
 * of each other; the lease is ten.
 */
struct ids_claim {
	uint64_t off;  /* the claim word in the acting control node's area (store_ctl_node) */
	uint64_t word; /* what it holds while ours */
	uint16_t cn, inc;
	uint64_t mutations;
};

static uint64_t realtime_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec;
}

static uint64_t claim_fresh(const struct ids_claim *c)
{
	return (realtime_s() + IDS_LEASE_S) << 32 | (uint64_t)c->inc << 16 | (uint16_t)(c->cn + 1u);
}

/* A claim word held by nobody alive: its lease expired (never, with recycle_claim_forever). */
static bool claim_lapsed(const struct ids_claim *c, uint64_t w)
{
	return !mut_on(c->mutations, MUT_RECYCLE_CLAIM_FOREVER) && (w >> 32) < realtime_s();
}

/* 1: the claim is ours now (free, or lapsed and taken over); 0: a live recycler holds it. */
static int claim_take(const struct store_db *st, struct remora_chan *ch, struct ids_claim *c)
{
	uint64_t want = claim_fresh(c), old = 0;
	struct remora_wr wr = store_wr_cas(st, store_ctl_node(st), c->off, 0, want, &old);
	int rc = store_exec(ch, &wr, 1);

	if (!rc && old != 0 && claim_lapsed(c, old)) {
		uint64_t seen = old;

		wr = store_wr_cas(st, store_ctl_node(st), c->off, seen, want, &old);
		rc = store_exec(ch, &wr, 1);
		old = !rc && old == seen ? 0 : old | 1u;
	}
	if (rc)
		return rc;
	c->word = want;
	return old == 0;
}

/*
 * Renews the claim when less than half its lease is left. -EBUSY when it is no longer ours
 * (it lapsed and another recycler took it over): the caller stops at once.
 */
static int claim_renew(const struct store_db *st, struct remora_chan *ch, struct ids_claim *c)
{
	uint64_t want, old = 0;
	struct remora_wr wr;
	int rc;

	if (!c || (c->word >> 32) > realtime_s() + IDS_LEASE_S / 2)
		return 0;
	want = claim_fresh(c);
	wr = store_wr_cas(st, store_ctl_node(st), c->off, c->word, want, &old);
	rc = store_exec(ch, &wr, 1);
	if (rc)
		return rc;
	if (old != c->word)
		return -EBUSY;
	c->word = want;
	return 0;
}

struct ids_sweep {
	const struct store_db *st;
	struct remora_chan *ch;
	struct ids_claim *claim; /* renewed once per chunk read */
	const uint64_t *cand; /* candidate blocks (bitmap) */
	uint32_t bsize;
	unsigned char *buf;
	struct remora_wr wrs[IDS_BATCH];
	uint64_t olds[IDS_BATCH], want[IDS_BATCH];
	unsigned n;
	uint64_t released;
};

static int sweep_flush(struct ids_sweep *s)
{
	int rc = store_exec(s->ch, s->wrs, s->n);

	for (unsigned i = 0; !rc && i < s->n; i++)
		s->released += s->olds[i] == s->want[i];
	s->n = 0;
	return rc;
}

/* A lock word whose owner id lies in a candidate block: a stray lock of a recovered node. */
static bool stray_of_candidate(const struct ids_sweep *s, uint64_t w)
{
	uint16_t id = (uint16_t)w;
	uint32_t k;

	if (!w || !id)
		return false;
	k = (uint32_t)(id - 1u) / s->bsize;
	return (s->cand[k / 64] >> (k % 64)) & 1;
}

/* Releases the candidates' stray locks among records [0, used) of t on node m. */
static int sweep_table_ids(struct ids_sweep *s, uint16_t m, const struct store_table *t)
{
	const uint32_t stride = t->geom.stride;
	const uint64_t per = IDS_CHUNK / stride;
	uint64_t cursor = 0, used;
	struct remora_wr wr = store_wr_read(s->st, store_ctl_node(s->st), t->ent.cursor_off, &cursor, 8);
	int rc = store_exec(s->ch, &wr, 1);

	used = cursor < t->ent.capacity ? cursor : t->ent.capacity;
	for (uint64_t first = 0; !rc && first < used; first += per) {
		uint64_t k = used - first < per ? used - first : per;

		rc = claim_renew(s->st, s->ch, s->claim);
		if (rc)
			break;
		wr = store_wr_read(s->st, m, store_rec_off(t, first), s->buf,
				   (uint32_t)(k * stride));
		rc = store_exec(s->ch, &wr, 1);
		for (uint64_t i = 0; !rc && i < k; i++) {
			uint64_t w;

			memcpy(&w, s->buf + i * stride + t->geom.lock_off, 8);
			if (!stray_of_candidate(s, w))
				continue;
			s->want[s->n] = w;
			s->wrs[s->n] = store_wr_cas(s->st, m,
						    store_rec_off(t, first + i) + t->geom.lock_off,
						    w, 0, &s->olds[s->n]);
			if (++s->n == IDS_BATCH)
				rc = sweep_flush(s);
		}
		if (!rc)
			rc = sweep_flush(s);
	}
	return rc;
}

static int sweep_strays(struct ids_sweep *s)
{
	int rc = 0;

	s->buf = malloc(IDS_CHUNK);
	if (!s->buf)
		return -ENOMEM;
	for (uint16_t m = 0; m < s->st->n_mn && !rc; m++)
		for (unsigned i = 0; i < REMORA_MAX_TABLES && !rc && !store_node_dead(s->st, m); i++)
			if (s->st->tab[i].present && s->st->tab[i].geom.lock_off != REMORA_CODEC_NO_OFF)
				rc = sweep_table_ids(s, m, &s->st->tab[i]);
	free(s->buf);
	return rc;
}

/* Clears, on every node, the failed bits of every id of the candidate blocks. */
static int clear_failed(const struct store_db *st, struct remora_chan *ch, const uint64_t *cand,
			uint32_t nb, uint32_t bsize)
{
	const uint64_t base = ctl(offsetof(struct store_control, failed_ids));

	for (uint32_t w = 0; w < 65536u / 64; w++) {
		uint64_t mask = 0;

		for (uint32_t b = 0; b < 64; b++) {
			uint32_t id = w * 64 + b, k = id ? (id - 1u) / bsize : nb;

			if (k < nb && (cand[k / 64] >> (k % 64) & 1))
				mask |= UINT64_C(1) << b;
		}
		for (uint16_t m = 0; mask && m < st->n_mn; m++) {
			uint64_t seen = 0, old = 0;
			struct remora_wr wr = store_wr_read(st, m, base + w * 8u, &seen, 8);
			int rc = store_node_dead(st, m) ? 0 : store_exec(ch, &wr, 1);

			while (!rc && (seen & mask)) {
				wr = store_wr_cas(st, m, base + w * 8u, seen, seen & ~mask, &old);
				rc = store_exec(ch, &wr, 1);
				seen = old == seen ? seen & ~mask : old;
			}
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* Candidates: used blocks whose first id is published failed (their node was recovered). */
static uint32_t candidates(const struct store_db *st, struct remora_chan *ch, uint64_t *cand,
			   int *rc)
{
	const uint32_t per = st->sb.coords_per_cn, nb = txn_ids_blocks(per);
	static _Thread_local uint64_t failed[65536 / 64];
	uint64_t used[65536 / 64 / 64] = { 0 };
	struct remora_wr wrs[2] = {
		store_wr_read(st, store_ctl_node(st), ctl(offsetof(struct store_control, failed_ids)), failed,
			      sizeof(failed)),
		store_wr_read(st, store_ctl_node(st), ctl(offsetof(struct store_control, id_used)), used,
			      (nb + 63) / 64 * 8u),
	};
	uint32_t n = 0;

	*rc = store_exec(ch, wrs, 2);
	for (uint32_t k = 0; !*rc && k < nb; k++) {
		uint16_t id = txn_ids_first(per, k);

		if ((used[k / 64] >> (k % 64) & 1) && (failed[id / 64] >> (id % 64) & 1)) {
			cand[k / 64] |= UINT64_C(1) << (k % 64);
			n++;
		}
	}
	return n;
}

int txn_ids_recycle(const struct store_db *st, struct remora_chan *ch, uint16_t cn, uint16_t inc,
		    uint64_t mutations, uint32_t *freed, uint64_t *strays)
{
	const uint32_t per = st->sb.coords_per_cn, nb = txn_ids_blocks(per);
	struct ids_claim claim = { .off = ctl(offsetof(struct store_control, id_recycling)),
				   .cn = cn, .inc = inc, .mutations = mutations };
	uint64_t cand[65536 / 64 / 64] = { 0 }, old = 1, count = 0;
	struct ids_sweep s = { .st = st, .ch = ch, .cand = cand, .claim = &claim,
			       .bsize = txn_ids_block_size(per) };
	struct remora_wr wr;
	int rc = claim_take(st, ch, &claim);
	uint32_t n;

	*freed = 0;
	*strays = 0;
	if (rc <= 0)
		return rc; /* a live recycler holds the claim: nothing to do here */
	rc = 0;
	n = candidates(st, ch, cand, &rc);
	if (!rc && n && !mut_on(mutations, MUT_RECYCLE_WITH_STRAYS))
		rc = sweep_strays(&s);
	if (!rc && n)
		rc = claim_renew(st, ch, &claim);
	if (!rc && n)
		rc = clear_failed(st, ch, cand, nb, s.bsize);
	for (uint32_t k = 0; !rc && k < nb; k++) {
		uint64_t seen = 0;

		if (!(cand[k / 64] >> (k % 64) & 1))
			continue;
		rc = claim_renew(st, ch, &claim); /* a lapsed claim frees no block */
		wr = store_wr_read(st, store_ctl_node(st), ctl(offsetof(struct store_control, id_used)) +
					      (k / 64) * 8u, &seen, 8);
		if (!rc)
			rc = store_exec(ch, &wr, 1);
		if (!rc)
			rc = flip_used(st, ch, k, false, seen);
		rc = rc < 0 ? rc : 0;
	}
	if (!rc && n) {
		wr = store_wr_faa(st, store_ctl_node(st), ctl(offsetof(struct store_control, id_recycled)), n,
				  &count, REMORA_WR_DURABLE);
		rc = store_exec(ch, &wr, 1);
	}
	/* The claim is given back even after a failure (unless it was lost): the next open
	 * tries again. */
	wr = store_wr_cas(st, store_ctl_node(st), claim.off, claim.word, 0, &old);
	(void)store_exec(ch, &wr, 1);
	if (!rc) {
		*freed = n;
		*strays = s.released;
	}
	return rc;
}
