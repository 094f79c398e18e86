/* SPDX-License-Identifier: MIT */
/*
 * Conformance: verbs posted on one channel to one memory node take effect in posting order
 * (RC queue-pair semantics); REMORA_WR_FENCE is accepted on every verb; every verb completes.
 */
#include <errno.h>
#include <string.h>

#include "tutil.h"

static struct tu_ctx c;

TestSuite(order, .fini = tu_fini, .timeout = TU_TIMEOUT);

static remora_gaddr ga(uint64_t off)
{
	return remora_gaddr_make(0, off);
}

static void exec_ok(struct remora_wr *wrs, unsigned n, const char *what)
{
	int rc = remora_exec(c.ch, wrs, n);

	cr_assert_eq(rc, 0, "%s: remora_exec = %d (%s)", what, rc, remora_strerror(rc));
	cr_assert_eq(remora_chan_outstanding(c.ch), 0, "%s: verbs left outstanding", what);
}

Test(order, write_then_read_in_one_batch)
{
	static const uint32_t lens[] = { 1, 8, 64, 1000, 4096 };
	uint8_t src[4096], dst[4096];
	struct remora_wr w[2];
	uint64_t seed = 3;
	uint32_t k;

	tu_open(&c, 0, 1, TU_POOL_BYTES);
	k = c.mn[0].key;
	memset(c.mn[0].base, 0, TU_POOL_BYTES);
	for (int round = 0; round < 50; round++) {
		uint32_t len = lens[round % 5];
		uint64_t off = 8192 + (uint64_t)(round % 7) * 3;

		for (uint32_t i = 0; i < len; i++)
			src[i] = (uint8_t)tu_rand64(&seed);
		memset(dst, 0, sizeof(dst));
		w[0] = tu_wr_write(ga(off), k, src, len);
		w[1] = tu_wr_read(ga(off), k, dst, len);
		exec_ok(w, 2, "WRITE+READ");
		cr_assert_eq(memcmp(dst, src, len), 0,
			     "round %d: READ posted after a WRITE of %u bytes missed it", round, len);
	}
}

Test(order, last_write_wins_and_overlaps_apply_in_order)
{
	uint64_t vals[32], r = 0;
	uint8_t a[4096], got[4096];
	struct remora_wr w[34];
	uint32_t k;

	tu_open(&c, 0, 1, TU_POOL_BYTES);
	k = c.mn[0].key;
	for (int i = 0; i < 32; i++) {
		vals[i] = (uint64_t)i + 1000;
		w[i] = tu_wr_write(ga(64), k, &vals[i], 8);
	}
	w[32] = tu_wr_read(ga(64), k, &r, 8);
	exec_ok(w, 33, "32 WRITEs + READ");
	cr_assert_eq(r, 1031, "READ after 32 WRITEs saw %llu", (unsigned long long)r);

	/* A big WRITE, a small WRITE inside it, then a READ of the whole: the small one wins. */
	memset(a, 0x11, sizeof(a));
	w[0] = tu_wr_write(ga(16384), k, a, sizeof(a));
	w[1] = tu_wr_write(ga(16384 + 100), k, "XYZ", 3);
	w[2] = tu_wr_read(ga(16384), k, got, sizeof(got));
	exec_ok(w, 3, "WRITE 4096, WRITE 3 inside, READ");
	cr_assert_eq(memcmp(got + 100, "XYZ", 3), 0, "overlapping WRITEs applied out of order");
	cr_assert_eq(got[99], 0x11);
	cr_assert_eq(got[103], 0x11);
	cr_assert_eq(memcmp(c.mn[0].base + 16384 + 100, "XYZ", 3), 0);
}

Test(order, write_then_atomics_see_the_write)
{
	uint64_t a = 0x5151, old = 0, fold = 0, r = 0;
	struct remora_wr w[4];
	uint32_t k;

	tu_open(&c, 0, 1, TU_POOL_BYTES);
	k = c.mn[0].key;
	for (int round = 0; round < 100; round++) {
		a = 0x5151 + (uint64_t)round;
		w[0] = tu_wr_write(ga(128), k, &a, 8);
		w[1] = tu_wr_cas(ga(128), k, a, a * 2, &old);
		w[2] = tu_wr_faa(ga(128), k, 1, &fold);
		w[3] = tu_wr_read(ga(128), k, &r, 8);
		exec_ok(w, 4, "WRITE, CAS, FAA, READ");
		cr_assert_eq(old, a, "round %d: CAS after WRITE saw %#llx, want %#llx", round,
			     (unsigned long long)old, (unsigned long long)a);
		cr_assert_eq(fold, a * 2, "round %d: FAA after CAS saw %#llx", round,
			     (unsigned long long)fold);
		cr_assert_eq(r, a * 2 + 1, "round %d: READ after FAA saw %#llx", round,
			     (unsigned long long)r);
	}
}

Test(order, read_then_fenced_write_returns_old)
{
	uint64_t v = 0, nv, r;
	struct remora_wr w[2];
	uint32_t k;

	tu_open(&c, 0, 1, TU_POOL_BYTES);
	k = c.mn[0].key;
	for (int round = 0; round < 100; round++) {
		v = 0x10000 + (uint64_t)round;
		nv = ~v;
		memcpy(c.mn[0].base + 256, &v, 8);
		r = 0;
		w[0] = tu_wr_read(ga(256), k, &r, 8);
		w[1] = tu_wr_write(ga(256), k, &nv, 8);
		w[1].flags = REMORA_WR_FENCE;
		exec_ok(w, 2, "READ, fenced WRITE");
		cr_assert_eq(r, v, "round %d: READ before a fenced WRITE saw %#llx, want %#llx", round,
			     (unsigned long long)r, (unsigned long long)v);
		memcpy(&r, c.mn[0].base + 256, 8);
		cr_assert_eq(r, nv, "round %d: the fenced WRITE did not land", round);
	}
}

/* FENCE is accepted on every verb kind and changes no result. */
Test(order, fence_flag_on_every_verb)
{
	uint64_t v = 7, r = 0, o1 = 0, o2 = 0, o3 = 0;
	struct remora_wr w[5];
	struct remora_caps caps;
	unsigned n = 4;
	uint32_t k;

	tu_open(&c, 0, 1, TU_POOL_BYTES);
	tu_caps(c.tp, &caps);
	k = c.mn[0].key;
	w[0] = tu_wr_write(ga(512), k, &v, 8);
	w[1] = tu_wr_cas(ga(512), k, 7, 8, &o1);
	w[2] = tu_wr_faa(ga(512), k, 2, &o2);
	w[3] = tu_wr_read(ga(512), k, &r, 8);
	if (caps.ops & (1u << REMORA_OP_MCAS))
		w[n++] = tu_wr_mcas(ga(512), k, 10, 0xff, 0x100, 0x100, &o3);
	for (unsigned i = 0; i < n; i++)
		w[i].flags = REMORA_WR_FENCE;
	exec_ok(w, n, "all verbs fenced");
	cr_assert_eq(o1, 7);
	cr_assert_eq(o2, 8);
	cr_assert_eq(r, 10);
	if (n == 5) {
		cr_assert_eq(o3, 10);
		memcpy(&r, c.mn[0].base + 512, 8);
		cr_assert_eq(r, 0x10a);
	}
}

/* Many batches polled in random slices: every verb completes exactly once, none is lost. */
Test(order, every_completion_arrives_once)
{
	enum { TOTAL = 3000, BATCH = 16 };
	static bool seen[TOTAL];
	struct remora_caps caps;
	struct remora_cqe cq[BATCH];
	struct remora_wr w[BATCH];
	uint64_t seed = 11, got = 0, id = 0, ctr = 0;
	unsigned batch;
	uint32_t k;

	tu_open(&c, 0, 1, TU_POOL_BYTES);
	tu_caps(c.tp, &caps);
	k = c.mn[0].key;
	batch = BATCH;
	if (caps.max_batch < batch)
		batch = caps.max_batch;
	memset(c.mn[0].base, 0, 4096);
	memset(seen, 0, sizeof(seen));
	while (got < TOTAL) {
		unsigned n = 1 + (unsigned)(tu_rand64(&seed) % batch);
		int rc, k2;

		if (id + n > TOTAL)
			n = (unsigned)(TOTAL - id);
		for (unsigned i = 0; i < n; i++) {
			w[i] = tu_wr_faa(ga(8 * (id % 64)), k, 1, NULL);
			w[i].wr_id = id + i;
		}
		rc = n ? remora_post(c.ch, w, n) : -EAGAIN;
		if (rc == 0)
			id += n;
		else
			cr_assert_eq(rc, -EAGAIN, "post = %d (%s)", rc, remora_strerror(rc));
		k2 = remora_poll(c.ch, cq, 1 + (unsigned)(tu_rand64(&seed) % BATCH));
		cr_assert_geq(k2, 0);
		for (int i = 0; i < k2; i++) {
			cr_assert_lt(cq[i].wr_id, id, "completion for a verb never posted");
			cr_assert_not(seen[cq[i].wr_id], "verb %llu completed twice",
				      (unsigned long long)cq[i].wr_id);
			cr_assert_eq(cq[i].status, 0);
			seen[cq[i].wr_id] = true;
		}
		got += (uint64_t)k2;
		cr_assert_lt(++ctr, 100000000, "completions stopped after %llu",
			     (unsigned long long)got);
	}
	cr_assert_eq(remora_chan_outstanding(c.ch), 0);
	for (unsigned i = 0; i < 64; i++) {
		uint64_t x;

		memcpy(&x, c.mn[0].base + 8 * i, 8);
		got -= x;
	}
	cr_assert_eq(got, 0, "FAAs lost or doubled");
}
