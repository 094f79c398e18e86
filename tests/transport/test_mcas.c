/* SPDX-License-Identifier: MIT */
/*
 * Conformance: masked-CAS truth table. For every case the memory word and the returned value
 * must equal the Linux masked-atomics formula:
 *   old = *p; if (((old ^ cmp) & cmp_mask) == 0) *p = (old & ~swap_mask) | (swap & swap_mask);
 * Exhaustive over all 2-bit values of 5 operands on bit pairs at the edges of the word and of
 * its halves, all 3-bit values on bits {0, 33, 63}, then random 64-bit vectors.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tutil.h"

static struct tu_ctx c;

TestSuite(mcas, .fini = tu_fini, .timeout = TU_TIMEOUT);

/* Words sit 16 bytes apart; the 8 bytes between them are canary that no MCAS may touch. */
#define STRIDE 16
#define SLOTS 256

struct mcase {
	uint64_t old, cmp, cmask, swp, smask;
};

static uint64_t expect(const struct mcase *m)
{
	if (((m->old ^ m->cmp) & m->cmask) == 0)
		return (m->old & ~m->smask) | (m->swp & m->smask);
	return m->old;
}

static unsigned batch_max;
static struct mcase pend[SLOTS];
static unsigned npend;
static uint64_t ncases;

static void open_mcas(void)
{
	struct remora_caps caps;

	tu_atomics_mode(NULL);
	tu_open(&c, 0, 1, TU_POOL_BYTES);
	tu_caps(c.tp, &caps);
	if (!(caps.ops & (1u << REMORA_OP_MCAS)))
		tu_skip("backend does not advertise masked-CAS");
	batch_max = SLOTS;
	if (caps.max_batch < batch_max)
		batch_max = caps.max_batch;
	if (caps.max_outstanding < batch_max)
		batch_max = caps.max_outstanding;
	cr_assert_gt(batch_max, 0);
	tu_canary_fill(c.mn[0].base, 0, SLOTS * STRIDE + 64);
	npend = 0;
	ncases = 0;
}

static void fmt_case(char *buf, size_t n, const struct mcase *m)
{
	snprintf(buf, n, "old %#llx cmp %#llx cmask %#llx swap %#llx smask %#llx",
		 (unsigned long long)m->old, (unsigned long long)m->cmp,
		 (unsigned long long)m->cmask, (unsigned long long)m->swp,
		 (unsigned long long)m->smask);
}

/* Runs the pending cases as one batch of MCAS verbs and checks memory, returns and canaries. */
static void flush(void)
{
	static uint64_t olds[SLOTS];
	static struct remora_wr wrs[SLOTS];
	static struct remora_cqe cqes[SLOTS];
	uint8_t *base = c.mn[0].base;
	char what[200];
	int rc, n;

	if (!npend)
		return;
	for (unsigned i = 0; i < npend; i++) {
		memcpy(base + i * STRIDE, &pend[i].old, 8);
		olds[i] = ~pend[i].old;
		wrs[i] = tu_wr_mcas(remora_gaddr_make(0, i * STRIDE), c.mn[0].key, pend[i].cmp,
				    pend[i].cmask, pend[i].swp, pend[i].smask, &olds[i]);
		wrs[i].wr_id = i;
	}
	rc = remora_post(c.ch, wrs, npend);
	cr_assert_eq(rc, 0, "post of %u MCAS = %d (%s)", npend, rc, remora_strerror(rc));
	n = tu_drain(c.ch, cqes, npend);
	cr_assert_eq(n, (int)npend, "%d of %u MCAS completions", n, npend);
	for (int i = 0; i < n; i++)
		cr_assert_eq(cqes[i].status, 0, "MCAS %llu status %d (%s)",
			     (unsigned long long)cqes[i].wr_id, cqes[i].status,
			     remora_strerror(cqes[i].status));
	for (unsigned i = 0; i < npend; i++) {
		uint64_t now;

		memcpy(&now, base + i * STRIDE, 8);
		fmt_case(what, sizeof(what), &pend[i]);
		cr_assert_eq(olds[i], pend[i].old, "%s: returned %#llx", what,
			     (unsigned long long)olds[i]);
		cr_assert_eq(now, expect(&pend[i]), "%s: memory %#llx, want %#llx", what,
			     (unsigned long long)now, (unsigned long long)expect(&pend[i]));
		cr_assert_eq(tu_canary_damage(base, i * STRIDE + 8, (i + 1) * STRIDE), 0,
			     "%s: MCAS wrote past its word", what);
	}
	ncases += npend;
	npend = 0;
}

static void add_case(uint64_t old, uint64_t cmp, uint64_t cmask, uint64_t swp, uint64_t smask)
{
	pend[npend++] = (struct mcase){ old, cmp, cmask, swp, smask };
	if (npend == batch_max)
		flush();
}

/* Spreads the low `nbits` bits of v over the bit positions pos[]. */
static uint64_t spread(unsigned v, const unsigned *pos, unsigned nbits)
{
	uint64_t r = 0;

	for (unsigned b = 0; b < nbits; b++)
		if (v & (1u << b))
			r |= UINT64_C(1) << pos[b];
	return r;
}

/* Every combination of nbits-wide old/cmp/cmask/swap/smask on bits pos[], over background bg. */
static void exhaustive(const unsigned *pos, unsigned nbits, uint64_t bg)
{
	unsigned vals = 1u << nbits;
	uint64_t posmask = spread(vals - 1, pos, nbits);

	for (unsigned o = 0; o < vals; o++)
		for (unsigned cm = 0; cm < vals; cm++)
			for (unsigned k = 0; k < vals; k++)
				for (unsigned s = 0; s < vals; s++)
					for (unsigned sm = 0; sm < vals; sm++)
						add_case((bg & ~posmask) | spread(o, pos, nbits),
							 spread(cm, pos, nbits),
							 spread(k, pos, nbits),
							 spread(s, pos, nbits) | (~bg & ~posmask),
							 spread(sm, pos, nbits));
	flush();
}

Test(mcas, exhaustive_2bit_pairs)
{
	static const unsigned pairs[][2] = { { 0, 1 }, { 31, 32 }, { 62, 63 }, { 7, 56 } };

	open_mcas();
	for (unsigned i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		exhaustive(pairs[i], 2, 0);
		exhaustive(pairs[i], 2, UINT64_C(0xa5a5a5a5a5a5a5a5));
	}
	cr_assert_eq(ncases, 8 * 1024);
}

Test(mcas, exhaustive_3bit_edges)
{
	static const unsigned pos[] = { 0, 33, 63 };

	open_mcas();
	exhaustive(pos, 3, UINT64_C(0x0123456789abcdef));
	cr_assert_eq(ncases, 32768);
}

static uint64_t rand_mask(uint64_t *seed)
{
	switch (tu_rand64(seed) % 6) {
	case 0:
		return 0;
	case 1:
		return UINT64_MAX;
	case 2:
		return UINT64_C(1) << (tu_rand64(seed) % 64);
	case 3:
		return tu_rand64(seed) & tu_rand64(seed);
	case 4:
		return tu_rand64(seed) | tu_rand64(seed);
	default:
		return tu_rand64(seed);
	}
}

Test(mcas, random_vectors)
{
	uint64_t seed = 0x6d636173;

	open_mcas();
	for (int i = 0; i < 20000; i++) {
		uint64_t old = tu_rand64(&seed), cmask = rand_mask(&seed), cmp;

		/* Half the cases match under the mask (a random compare almost never would). */
		if (i & 1)
			cmp = old ^ (tu_rand64(&seed) & ~cmask);
		else
			cmp = tu_rand64(&seed);
		add_case(old, cmp, cmask, tu_rand64(&seed), rand_mask(&seed));
	}
	flush();
	cr_assert_eq(ncases, 20000);
}

/* The synchronous helper, and MCAS as a plain CAS (both masks all ones) or a plain read. */
Test(mcas, helper_and_degenerate_masks)
{
	uint64_t old = 0, w;
	uint8_t *p;
	int rc;

	open_mcas();
	p = c.mn[0].base + 4096;
	w = 0x1234;
	memcpy(p, &w, 8);
	rc = remora_mcas(c.ch, remora_gaddr_make(0, 4096), c.mn[0].key, 0x1234, UINT64_MAX, 0x99,
			 UINT64_MAX, &old);
	cr_assert_eq(rc, 0, "remora_mcas = %d (%s)", rc, remora_strerror(rc));
	cr_assert_eq(old, 0x1234);
	memcpy(&w, p, 8);
	cr_assert_eq(w, 0x99, "full masks act as CAS");

	rc = remora_mcas(c.ch, remora_gaddr_make(0, 4096), c.mn[0].key, 0, 0, 0, 0, &old);
	cr_assert_eq(rc, 0);
	cr_assert_eq(old, 0x99, "zero masks act as a read");
	memcpy(&w, p, 8);
	cr_assert_eq(w, 0x99, "zero swap mask must not write");

	/* Set one bit whatever the rest holds (compare mask 0 always matches). */
	rc = remora_mcas(c.ch, remora_gaddr_make(0, 4096), c.mn[0].key, 0, 0, UINT64_C(1) << 63,
			 UINT64_C(1) << 63, NULL);
	cr_assert_eq(rc, 0);
	memcpy(&w, p, 8);
	cr_assert_eq(w, (UINT64_C(1) << 63) | 0x99);
}

/* atomics=arbiter (CXL pools without coherent cross-host atomics) computes MCAS on its own path. */
Test(mcas, arbiter_mode_truth_table)
{
	static const unsigned pair[2] = { 62, 63 };
	uint64_t seed = 0xa4b;

	setenv("REMORA_ATOMICS", "arbiter", 1);
	open_mcas();
	exhaustive(pair, 2, UINT64_C(0x00ff00ff00ff00ff));
	for (int i = 0; i < 5000; i++) {
		uint64_t old = tu_rand64(&seed), cmask = rand_mask(&seed);
		uint64_t cmp = (i & 1) ? old ^ (tu_rand64(&seed) & ~cmask) : tu_rand64(&seed);

		add_case(old, cmp, cmask, tu_rand64(&seed), rand_mask(&seed));
	}
	flush();
	cr_assert_eq(ncases, 1024 + 5000);
}
