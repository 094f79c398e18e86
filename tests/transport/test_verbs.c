/* SPDX-License-Identifier: MIT */
/*
 * Conformance: the semantics of each verb (READ, WRITE, CAS, FAA), mixed batches, completions,
 * back-pressure, and exact counters. Ground truth is the memory node's own mapping.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tutil.h"

static struct tu_ctx c;

TestSuite(verbs, .fini = tu_fini, .timeout = TU_TIMEOUT);

static remora_gaddr ga(unsigned node, uint64_t off)
{
	return remora_gaddr_make((uint16_t)node, off);
}

static uint64_t word(unsigned node, uint64_t off)
{
	uint64_t v;

	memcpy(&v, c.mn[node].base + off, 8);
	return v;
}

static void set_word(unsigned node, uint64_t off, uint64_t v)
{
	memcpy(c.mn[node].base + off, &v, 8);
}

Test(verbs, gaddr_roundtrip)
{
	remora_gaddr a = remora_gaddr_make(31, UINT64_C(0x0000123456789abc));

	cr_assert_eq(remora_gaddr_node(a), 31);
	cr_assert_eq(remora_gaddr_off(a), UINT64_C(0x0000123456789abc));
	cr_assert_eq(remora_gaddr_off(remora_gaddr_make(1, REMORA_GADDR_OFF_MASK)),
		     REMORA_GADDR_OFF_MASK);
}

Test(verbs, op_names_distinct)
{
	for (int i = 0; i < REMORA_OP__COUNT; i++) {
		const char *a = remora_op_name((enum remora_op)i);

		cr_assert_not_null(a, "op %d has no name", i);
		cr_assert_gt(strlen(a), 0);
		for (int j = 0; j < i; j++)
			cr_assert_str_neq(a, remora_op_name((enum remora_op)j));
	}
}

/* Capabilities agree with themselves and with remora_backend_caps(). */
Test(verbs, caps_are_consistent)
{
	struct remora_caps caps, dflt = { .size = sizeof(dflt) };
	uint32_t all = (1u << REMORA_OP__COUNT) - 1;

	tu_open(&c, 0, 1, TU_POOL_BYTES);
	tu_caps(c.tp, &caps);
	cr_assert_eq(caps.size, sizeof(caps));
	cr_assert_eq(caps.ops & ~all, 0, "unknown op bits %#x", caps.ops);
	cr_assert_eq(caps.ops & 3u, 3u, "READ and WRITE are mandatory (ops %#x)", caps.ops);
	cr_assert_eq(caps.emulated_ops & ~caps.ops, 0, "emulates ops it does not offer");
	if (caps.flags & REMORA_CAP_NATIVE_MCAS) {
		cr_assert_neq(caps.ops & (1u << REMORA_OP_MCAS), 0, "native MCAS but no MCAS op");
		cr_assert_eq(caps.emulated_ops & (1u << REMORA_OP_MCAS), 0,
			     "MCAS both native and emulated");
	}
	cr_assert_gt(caps.max_batch, 0);
	cr_assert_leq(caps.max_batch, caps.max_outstanding);
	if (caps.flags & REMORA_CAP_MSG)
		cr_assert_gt(caps.max_msg, 0, "messages of 0 bytes only");
	if (caps.flags & REMORA_CAP_PERSIST)
		cr_assert_neq(caps.persist_gran, REMORA_PERSIST_NONE);
	cr_assert_eq(remora_backend_caps(tu_backend(), &dflt), 0);
	cr_assert_eq(dflt.ops, caps.ops, "default caps differ from an opened transport's");
	cr_assert_eq(dflt.flags, caps.flags);
	cr_assert_str_eq(remora_transport_backend(c.tp), tu_backend());
}

/* One WRITE then READ of len bytes at off (unaligned remote and local); checks every byte. */
static void write_read_once(uint64_t off, uint32_t len, unsigned shift, uint64_t *seed)
{
	enum { GUARD = 32 };
	static uint8_t src[4096 + 64], dst[4096 + 2 * GUARD + 16];
	uint8_t *s = src + shift, *d = dst + GUARD + shift;
	uint8_t *base = c.mn[0].base;
	uint64_t lo = off - 64, hi = off + len + 64;
	int rc;

	for (uint32_t i = 0; i < len; i++)
		s[i] = (uint8_t)tu_rand64(seed);
	rc = remora_write(c.ch, ga(0, off), c.mn[0].key, s, len);
	cr_assert_eq(rc, 0, "WRITE off %llu len %u = %d (%s)", (unsigned long long)off, len, rc,
		     remora_strerror(rc));
	cr_assert_eq(memcmp(base + off, s, len), 0, "WRITE off %llu len %u: pool bytes differ",
		     (unsigned long long)off, len);
	cr_assert_eq(tu_canary_damage(base, lo, off), 0, "WRITE len %u touched bytes before", len);
	cr_assert_eq(tu_canary_damage(base, off + len, hi), 0, "WRITE len %u touched bytes after",
		     len);

	memset(dst, 0x5c, sizeof(dst));
	rc = remora_read(c.ch, ga(0, off), c.mn[0].key, d, len);
	cr_assert_eq(rc, 0, "READ off %llu len %u = %d (%s)", (unsigned long long)off, len, rc,
		     remora_strerror(rc));
	cr_assert_eq(memcmp(d, s, len), 0, "READ off %llu len %u: bytes differ",
		     (unsigned long long)off, len);
	for (uint8_t *p = dst; p < d; p++)
		cr_assert_eq(*p, 0x5c, "READ wrote before its local buffer");
	for (uint8_t *p = d + len; p < dst + sizeof(dst); p++)
		cr_assert_eq(*p, 0x5c, "READ len %u wrote past its local buffer", len);
	tu_canary_fill(base, lo, hi);
}

Test(verbs, write_read_all_sizes_unaligned)
{
	static const uint32_t big[] = { 65, 100, 127, 128, 129, 255, 256, 511, 512, 1000, 1023,
					1024, 2047, 2048, 3001, 4095, 4096 };
	static const unsigned shifts[] = { 0, 1, 3, 7, 8, 13 };
	uint64_t seed = 1;

	tu_open(&c, 0, 1, TU_POOL_BYTES);
	tu_canary_fill(c.mn[0].base, 0, c.mn[0].bytes);
	for (unsigned k = 0; k < sizeof(shifts) / sizeof(shifts[0]); k++) {
		uint64_t off = 4096 + shifts[k];

		for (uint32_t len = 1; len <= 64; len++)
			write_read_once(off, len, shifts[k], &seed);
		for (unsigned i = 0; i < sizeof(big) / sizeof(big[0]); i++)
			write_read_once(off, big[i], (shifts[k] * 5) % 16, &seed);
	}
	/* The first and the last byte of the region are reachable. */
	write_read_once(64, 1, 0, &seed);
	cr_assert_eq(remora_write(c.ch, ga(0, 0), c.mn[0].key, "A", 1), 0);
	cr_assert_eq(c.mn[0].base[0], 'A');
	cr_assert_eq(remora_write(c.ch, ga(0, TU_POOL_BYTES - 1), c.mn[0].key, "Z", 1), 0);
	cr_assert_eq(c.mn[0].base[TU_POOL_BYTES - 1], 'Z');
}

/* A zero-length READ or WRITE is a verb that moves no byte, on an aligned word or not. */
Test(verbs, zero_length_read_and_write_touch_nothing)
{
	static const uint64_t offs[] = { 0, 8, 4096, 4099, TU_POOL_BYTES };
	uint8_t local[16];

	tu_open(&c, 0, 1, TU_POOL_BYTES);
	tu_canary_fill(c.mn[0].base, 0, c.mn[0].bytes);
	for (unsigned i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		memset(local, 0x5c, sizeof(local));
		cr_assert_eq(remora_write(c.ch, ga(0, offs[i]), c.mn[0].key, local + 8, 0), 0,
			     "WRITE len 0 at %llu", (unsigned long long)offs[i]);
		cr_assert_eq(remora_read(c.ch, ga(0, offs[i]), c.mn[0].key, local + 8, 0), 0,
			     "READ len 0 at %llu", (unsigned long long)offs[i]);
		for (unsigned k = 0; k < sizeof(local); k++)
			cr_assert_eq(local[k], 0x5c, "READ len 0 wrote local byte %u", k);
	}
	cr_assert_eq(tu_canary_damage(c.mn[0].base, 0, c.mn[0].bytes), 0,
		     "a zero-length verb changed the pool");
}

Test(verbs, cas_success_and_failure_return_old)
{
	uint64_t old = 0;
	int rc;

	tu_open(&c, 0, 1, TU_POOL_BYTES);
	set_word(0, 128, 0x1111);
	set_word(0, 136, 0xabcdef);

	rc = remora_cas(c.ch, ga(0, 128), c.mn[0].key, 0x1111, 0x2222, &old);
	cr_assert_eq(rc, 0, "CAS = %d (%s)", rc, remora_strerror(rc));
	cr_assert_eq(old, 0x1111, "successful CAS returned old %#llx", (unsigned long long)old);
	cr_assert_eq(word(0, 128), 0x2222, "successful CAS did not swap");

	old = 0;
	rc = remora_cas(c.ch, ga(0, 128), c.mn[0].key, 0x1111, 0x3333, &old);
	cr_assert_eq(rc, 0, "failed compare is not a verb error, got %d", rc);
	cr_assert_eq(old, 0x2222, "failed CAS returned %#llx, not the current value",
		     (unsigned long long)old);
	cr_assert_eq(word(0, 128), 0x2222, "failed CAS changed memory");
	cr_assert_eq(word(0, 136), 0xabcdef, "CAS touched the next word");

	/* Full 64-bit compare: differing only in the top bit fails. */
	set_word(0, 128, UINT64_C(0x8000000000000001));
	rc = remora_cas(c.ch, ga(0, 128), c.mn[0].key, 1, 5, &old);
	cr_assert_eq(rc, 0);
	cr_assert_eq(old, UINT64_C(0x8000000000000001));
	cr_assert_eq(word(0, 128), UINT64_C(0x8000000000000001));
	rc = remora_cas(c.ch, ga(0, 128), c.mn[0].key, UINT64_C(0x8000000000000001), UINT64_MAX,
			&old);
	cr_assert_eq(rc, 0);
	cr_assert_eq(word(0, 128), UINT64_MAX);

	/* old may be NULL. */
	rc = remora_cas(c.ch, ga(0, 128), c.mn[0].key, UINT64_MAX, 7, NULL);
	cr_assert_eq(rc, 0);
	cr_assert_eq(word(0, 128), 7);
}

Test(verbs, faa_returns_old_and_wraps)
{
	uint64_t old = 0;
	int rc;

	tu_open(&c, 0, 1, TU_POOL_BYTES);
	set_word(0, 256, 40);
	rc = remora_faa(c.ch, ga(0, 256), c.mn[0].key, 2, &old);
	cr_assert_eq(rc, 0, "FAA = %d (%s)", rc, remora_strerror(rc));
	cr_assert_eq(old, 40);
	cr_assert_eq(word(0, 256), 42);

	set_word(0, 256, UINT64_MAX - 1);
	rc = remora_faa(c.ch, ga(0, 256), c.mn[0].key, 3, &old);
	cr_assert_eq(rc, 0);
	cr_assert_eq(old, UINT64_MAX - 1);
	cr_assert_eq(word(0, 256), 1, "FAA must wrap modulo 2^64, got %llu",
		     (unsigned long long)word(0, 256));

	rc = remora_faa(c.ch, ga(0, 256), c.mn[0].key, UINT64_MAX, &old); /* adds -1 */
	cr_assert_eq(rc, 0);
	cr_assert_eq(old, 1);
	cr_assert_eq(word(0, 256), 0);

	rc = remora_faa(c.ch, ga(0, 256), c.mn[0].key, 0, NULL);
	cr_assert_eq(rc, 0);
	cr_assert_eq(word(0, 256), 0);
	for (int i = 0; i < 100; i++)
		cr_assert_eq(remora_faa(c.ch, ga(0, 256), c.mn[0].key, 3, NULL), 0);
	cr_assert_eq(word(0, 256), 300);
}

/* A batch of every verb kind in one post; each completion carries its own wr_id, op, node. */
Test(verbs, mixed_batch_completions)
{
	enum { N = 10 };
	uint64_t rbuf = 0, wval = 0x77, old[N] = { 0 };
	uint8_t big[300], rbig[300];
	struct remora_wr wrs[N];
	struct remora_cqe cqes[N + 1];
	bool seen[N] = { false };
	uint32_t k0, k1;
	int rc, n;

	tu_open(&c, 0, 2, TU_POOL_BYTES);
	k0 = c.mn[0].key;
	k1 = c.mn[1].key;
	memset(big, 0xe1, sizeof(big));
	memset(rbig, 0, sizeof(rbig));
	set_word(0, 1024, 5);
	set_word(1, 1024, 9);
	set_word(0, 1032, 100);
	set_word(1, 2048, UINT64_C(0xff00));
	memset(c.mn[1].base + 8192, 0x3c, sizeof(rbig));

	wrs[0] = tu_wr_cas(ga(0, 1024), k0, 5, 6, &old[0]);
	wrs[1] = tu_wr_cas(ga(1, 1024), k1, 5, 6, &old[1]);     /* fails: 9 != 5 */
	wrs[2] = tu_wr_faa(ga(0, 1032), k0, 11, &old[2]);
	wrs[3] = tu_wr_write(ga(1, 4096), k1, &wval, 8);
	wrs[4] = tu_wr_read(ga(1, 1024), k1, &rbuf, 8);
	wrs[5] = tu_wr_write(ga(0, 5000), k0, big, sizeof(big));
	wrs[6] = tu_wr_read(ga(1, 8192), k1, rbig, sizeof(rbig));
	wrs[7] = tu_wr_mcas(ga(1, 2048), k1, UINT64_C(0xff00), UINT64_C(0xff00), UINT64_C(0x00aa),
			    UINT64_C(0x00ff), &old[7]);
	wrs[8] = tu_wr_faa(ga(1, 1024), k1, 1, &old[8]);
	wrs[9] = tu_wr_cas(ga(0, 1032), k0, 111, 1, &old[9]);
	for (int i = 0; i < N; i++)
		wrs[i].wr_id = UINT64_C(0xabc0000000) + (uint64_t)i * 7;

	rc = remora_post(c.ch, wrs, N);
	cr_assert_eq(rc, 0, "post of a mixed batch = %d (%s)", rc, remora_strerror(rc));
	n = tu_drain(c.ch, cqes, N);
	cr_assert_eq(n, N, "got %d of %d completions", n, N);
	cr_assert_eq(remora_poll(c.ch, cqes + N, 1), 0, "a completion too many");
	cr_assert_eq(remora_chan_outstanding(c.ch), 0);
	for (int i = 0; i < N; i++) {
		uint64_t id = cqes[i].wr_id - UINT64_C(0xabc0000000);
		unsigned j = (unsigned)(id / 7);

		cr_assert(id % 7 == 0 && j < N, "unknown wr_id %#llx",
			  (unsigned long long)cqes[i].wr_id);
		cr_assert_not(seen[j], "wr_id of verb %u completed twice", j);
		seen[j] = true;
		cr_assert_eq(cqes[i].status, 0, "verb %u status %d (%s)", j, cqes[i].status,
			     remora_strerror(cqes[i].status));
		cr_assert_eq(cqes[i].op, wrs[j].op, "verb %u: cqe op %u", j, cqes[i].op);
		cr_assert_eq(cqes[i].node, remora_gaddr_node(wrs[j].raddr), "verb %u: cqe node %u",
			     j, cqes[i].node);
	}
	cr_assert_eq(old[0], 5);
	cr_assert_eq(word(0, 1024), 6);
	cr_assert_eq(old[1], 9);
	cr_assert_eq(old[2], 100);
	cr_assert_eq(word(1, 4096), 0x77);
	cr_assert_eq(rbuf, 9, "READ after a failed CAS on the same word saw %llu",
		     (unsigned long long)rbuf);
	cr_assert_eq(memcmp(c.mn[0].base + 5000, big, sizeof(big)), 0);
	for (unsigned i = 0; i < sizeof(rbig); i++)
		cr_assert_eq(rbig[i], 0x3c);
	cr_assert_eq(old[7], UINT64_C(0xff00));
	cr_assert_eq(word(1, 2048), UINT64_C(0xffaa));
	cr_assert_eq(old[8], 9);
	cr_assert_eq(word(1, 1024), 10);
	cr_assert_eq(old[9], 111, "CAS after FAA in one batch saw %llu",
		     (unsigned long long)old[9]);
	cr_assert_eq(word(0, 1032), 1);
}

/* Without polling, the channel fills: -EAGAIN, and nothing of a refused post happens. */
Test(verbs, eagain_when_full_then_success_after_poll)
{
	struct remora_caps caps;
	struct remora_cqe cqe[4];
	struct remora_wr wr[2];
	uint64_t one = 1, two = 2, three = 3, posted = 0, last, w;
	unsigned limit;
	int rc = 0;

	tu_open(&c, 0, 1, TU_POOL_BYTES);
	tu_caps(c.tp, &caps);
	cr_assert_gt(caps.max_outstanding, 0, "caps.max_outstanding is 0");
	cr_assert_gt(caps.max_batch, 0, "caps.max_batch is 0");
	limit = caps.max_outstanding;
	if (limit > (1u << 20))
		tu_skip("max_outstanding %u too large to fill in a test", limit);
	memset(c.mn[0].base, 0, TU_POOL_BYTES);
	last = TU_POOL_BYTES - 8;

	/* WRITE 1 into words 1..; word 0 and the last word are kept for the checks below. */
	for (uint64_t i = 0; i <= limit; i++) {
		wr[0] = tu_wr_write(ga(0, 8 * (1 + i % (TU_POOL_BYTES / 8 - 2))), c.mn[0].key, &one,
				    8);
		wr[0].wr_id = i;
		rc = remora_post(c.ch, wr, 1);
		if (rc == -EAGAIN)
			break;
		cr_assert_eq(rc, 0, "post %llu = %d (%s)", (unsigned long long)i, rc,
			     remora_strerror(rc));
		posted++;
	}
	cr_assert_eq(rc, -EAGAIN, "posted %u + 1 verbs (max_outstanding) without -EAGAIN", limit);
	cr_assert_eq(posted, limit, "-EAGAIN after %llu verbs, max_outstanding is %u",
		     (unsigned long long)posted, limit);
	cr_assert_eq(remora_chan_outstanding(c.ch), posted);

	wr[0] = tu_wr_write(ga(0, 0), c.mn[0].key, &two, 8);
	wr[1] = tu_wr_faa(ga(0, 0), c.mn[0].key, 5, NULL);
	cr_assert_eq(remora_post(c.ch, wr, 1), -EAGAIN);
	cr_assert_eq(remora_post(c.ch, wr, 2), -EAGAIN, "a two-verb post into a full channel");
	cr_assert_eq(remora_chan_outstanding(c.ch), posted);

	cr_assert_eq(tu_drain(c.ch, cqe, 1), 1);
	cr_assert_eq(cqe[0].status, 0);
	cr_assert_eq(remora_chan_outstanding(c.ch), posted - 1);
	wr[0] = tu_wr_write(ga(0, last), c.mn[0].key, &three, 8);
	rc = remora_post(c.ch, wr, 1);
	cr_assert_eq(rc, 0, "post after a poll freed a slot = %d (%s)", rc, remora_strerror(rc));
	for (uint64_t i = 0; i < posted; i++)
		cr_assert_eq(tu_drain(c.ch, cqe, 1), 1, "completion %llu missing",
			     (unsigned long long)i);
	cr_assert_eq(remora_poll(c.ch, cqe, 4), 0, "more completions than posted verbs");
	cr_assert_eq(remora_chan_outstanding(c.ch), 0);
	memcpy(&w, c.mn[0].base, 8);
	cr_assert_eq(w, 0, "a verb refused with -EAGAIN changed memory (%llu)",
		     (unsigned long long)w);
	memcpy(&w, c.mn[0].base + last, 8);
	cr_assert_eq(w, 3, "the verb posted after polling did not take effect");
}

static void check_node_counts(const struct remora_counters *k, unsigned node, const uint64_t *want,
			      const uint64_t *want_bytes)
{
	for (int op = 0; op < REMORA_OP__COUNT; op++) {
		cr_assert_eq(k->verbs[node][op], want[op], "node %u %s: %llu verbs, want %llu", node,
			     remora_op_name((enum remora_op)op),
			     (unsigned long long)k->verbs[node][op], (unsigned long long)want[op]);
		cr_assert_eq(k->bytes[node][op], want_bytes[op], "node %u %s: %llu bytes, want %llu",
			     node, remora_op_name((enum remora_op)op),
			     (unsigned long long)k->bytes[node][op],
			     (unsigned long long)want_bytes[op]);
	}
}

Test(verbs, counters_exact_per_node_and_class)
{
	struct remora_counters a, t, d, zero;
	struct remora_chan *ch2;
	struct remora_caps caps;
	uint8_t buf[100] = { 0 };
	uint64_t w0[REMORA_OP__COUNT] = { 0 }, b0[REMORA_OP__COUNT] = { 0 };
	uint64_t w1[REMORA_OP__COUNT] = { 0 }, b1[REMORA_OP__COUNT] = { 0 };
	struct remora_wr batch[3];
	bool mcas_native;

	tu_open(&c, 0, 2, TU_POOL_BYTES);
	tu_caps(c.tp, &caps);
	mcas_native = !(caps.emulated_ops & (1u << REMORA_OP_MCAS));
	remora_chan_counters(c.ch, &zero);
	for (int op = 0; op < REMORA_OP__COUNT; op++)
		cr_assert_eq(remora_counters_total(&zero, (enum remora_op)op), 0);
	cr_assert_eq(zero.doorbells, 0);

	/* node 0: 3 READs of 10 bytes, 1 WRITE of 100, 2 CAS; node 1: 4 FAA, 2 WRITEs of 7, 1 MCAS */
	for (int i = 0; i < 3; i++)
		cr_assert_eq(remora_read(c.ch, ga(0, 64), c.mn[0].key, buf, 10), 0);
	cr_assert_eq(remora_write(c.ch, ga(0, 512), c.mn[0].key, buf, 100), 0);
	cr_assert_eq(remora_cas(c.ch, ga(0, 8), c.mn[0].key, 0, 1, NULL), 0);
	cr_assert_eq(remora_cas(c.ch, ga(0, 8), c.mn[0].key, 0, 1, NULL), 0); /* fails, counts */
	for (int i = 0; i < 4; i++)
		cr_assert_eq(remora_faa(c.ch, ga(1, 16), c.mn[1].key, 1, NULL), 0);
	batch[0] = tu_wr_write(ga(1, 700), c.mn[1].key, buf, 7);
	batch[1] = tu_wr_write(ga(1, 800), c.mn[1].key, buf, 7);
	batch[2] = tu_wr_mcas(ga(1, 24), c.mn[1].key, 0, 1, 1, 1, NULL);
	cr_assert_eq(remora_exec(c.ch, batch, 3), 0);

	w0[REMORA_OP_READ] = 3, b0[REMORA_OP_READ] = 30;
	w0[REMORA_OP_WRITE] = 1, b0[REMORA_OP_WRITE] = 100;
	w0[REMORA_OP_CAS] = 2, b0[REMORA_OP_CAS] = 16;
	w1[REMORA_OP_FAA] = 4, b1[REMORA_OP_FAA] = 32;
	w1[REMORA_OP_WRITE] = 2, b1[REMORA_OP_WRITE] = 14;
	remora_chan_counters(c.ch, &a);
	if (mcas_native) {
		w1[REMORA_OP_MCAS] = 1, b1[REMORA_OP_MCAS] = 8;
		check_node_counts(&a, 1, w1, b1);
		for (int op = 0; op < REMORA_OP__COUNT; op++)
			cr_assert_eq(a.emulated[1][op], 0, "native MCAS counted emulated verbs");
	} else {
		cr_assert_geq(a.emulated[1][REMORA_OP_CAS], 1, "emulated MCAS counted no CAS");
		cr_assert_geq(a.emulated[1][REMORA_OP_READ] + a.emulated[1][REMORA_OP_CAS], 2,
			      "emulated MCAS must count its READ + CAS");
		cr_assert_eq(a.verbs[1][REMORA_OP_FAA], 4);
		cr_assert_eq(a.bytes[1][REMORA_OP_FAA], 32);
		cr_assert_eq(a.verbs[1][REMORA_OP_WRITE], 2);
		cr_assert_eq(a.bytes[1][REMORA_OP_WRITE], 14);
	}
	check_node_counts(&a, 0, w0, b0);
	for (int n = 2; n < REMORA_MAX_MN; n++)
		for (int op = 0; op < REMORA_OP__COUNT; op++)
			cr_assert_eq(a.verbs[n][op], 0, "node %d was never addressed", n);
	cr_assert_eq(a.doorbells, 11, "11 posts, %llu doorbells", (unsigned long long)a.doorbells);
	cr_assert_eq(a.msgs_sent + a.msgs_recv, 0);
	cr_assert_eq(remora_counters_total(&a, REMORA_OP_READ), 3);
	cr_assert_eq(remora_counters_total(&a, REMORA_OP_WRITE), 3);
	cr_assert_eq(remora_counters_total(&a, REMORA_OP_FAA), 4);

	/* A second channel, then closed: the transport sums both. */
	cr_assert_eq(remora_chan_open(c.tp, &ch2), 0);
	cr_assert_eq(remora_read(ch2, ga(1, 0), c.mn[1].key, buf, 50), 0);
	remora_chan_counters(ch2, &d);
	cr_assert_eq(d.verbs[1][REMORA_OP_READ], 1, "a new channel starts from zero");
	cr_assert_eq(d.verbs[0][REMORA_OP_READ], 0, "a new channel starts from zero");
	remora_chan_close(ch2);
	remora_transport_counters(c.tp, &t);
	cr_assert_eq(t.verbs[0][REMORA_OP_READ], 3);
	cr_assert_eq(t.verbs[1][REMORA_OP_READ], 1, "closed channel's READ lost from the sum");
	cr_assert_eq(t.bytes[1][REMORA_OP_READ], 50);
	cr_assert_eq(t.verbs[1][REMORA_OP_FAA], 4);
	cr_assert_eq(t.doorbells, 12);

	remora_counters_diff(&t, &a, &d);
	cr_assert_eq(d.verbs[1][REMORA_OP_READ], 1);
	cr_assert_eq(d.bytes[1][REMORA_OP_READ], 50);
	cr_assert_eq(d.verbs[0][REMORA_OP_READ], 0);
	cr_assert_eq(d.verbs[1][REMORA_OP_FAA], 0);
	cr_assert_eq(d.doorbells, 1);
}

/*
 * One batch whose neighbours differ by node only, by op only, or by neither: the counters of
 * a batch are added per run of one node and op, and each run must land on its own counter.
 */
Test(verbs, counters_of_one_batch_split_by_node_and_op)
{
	struct remora_counters k;
	uint8_t buf[64] = { 0 };
	uint64_t old[2];
	uint64_t w0[REMORA_OP__COUNT] = { 0 }, b0[REMORA_OP__COUNT] = { 0 };
	uint64_t w1[REMORA_OP__COUNT] = { 0 }, b1[REMORA_OP__COUNT] = { 0 };

	tu_open(&c, 0, 2, TU_POOL_BYTES);
	struct remora_wr batch[] = {
		tu_wr_read(ga(0, 64), c.mn[0].key, buf, 5),
		tu_wr_read(ga(0, 128), c.mn[0].key, buf, 6),
		tu_wr_read(ga(1, 64), c.mn[1].key, buf, 9),
		tu_wr_read(ga(0, 256), c.mn[0].key, buf, 12),
		tu_wr_faa(ga(0, 8), c.mn[0].key, 1, &old[0]),
		tu_wr_faa(ga(1, 8), c.mn[1].key, 1, &old[1]),
		tu_wr_read(ga(1, 512), c.mn[1].key, buf, 16),
	};

	cr_assert_eq(remora_exec(c.ch, batch, 7), 0);
	remora_chan_counters(c.ch, &k);
	w0[REMORA_OP_READ] = 3, b0[REMORA_OP_READ] = 23;
	w0[REMORA_OP_FAA] = 1, b0[REMORA_OP_FAA] = 8;
	w1[REMORA_OP_READ] = 2, b1[REMORA_OP_READ] = 25;
	w1[REMORA_OP_FAA] = 1, b1[REMORA_OP_FAA] = 8;
	check_node_counts(&k, 0, w0, b0);
	check_node_counts(&k, 1, w1, b1);
	cr_assert_eq(k.doorbells, 1);
}

/*
 * The core checks a batch against each node's own regions, also when the batch changes node:
 * node 0's key is no key of node 1, and a verb to node 1 with it is refused, whatever came
 * before it in the batch and wherever it stands.
 */
Test(verbs, batch_checks_each_verb_against_its_own_node)
{
	uint8_t buf[8] = { 0 };
	uint64_t w = 0;

	tu_open(&c, 0, 2, TU_POOL_BYTES);
	cr_assert_neq(c.mn[0].key, c.mn[1].key, "the two nodes' regions got one key");
	memcpy(c.mn[1].base + 64, &(uint64_t){ 0x1111 }, 8);
	for (int post = 0; post < 2; post++) {
		struct remora_wr batch[] = {
			tu_wr_read(ga(0, 64), c.mn[0].key, buf, 8),
			tu_wr_write(ga(1, 64), c.mn[0].key, &w, 8),
		};
		int rc = post ? remora_post(c.ch, batch, 2) : remora_exec(c.ch, batch, 2);

		cr_assert_eq(rc, -REMORA_EBADKEY, "%s: node 1 took node 0's key (rc %d)",
			     post ? "remora_post" : "remora_exec", rc);
	}
	memcpy(&w, c.mn[1].base + 64, 8);
	cr_assert_eq(w, 0x1111, "the refused WRITE changed node 1");
}

/* Opens with $REMORA_ATOMICS=mode, or skips when the backend has no such mode. */
static void open_atomics_mode(const char *mode)
{
	tu_atomics_mode(mode);
	tu_open(&c, 0, 1, TU_POOL_BYTES);
}

/* atomics=refuse: a CXL pool without atomics. Atomics are refused, nothing else is. */
Test(verbs, atomics_refuse_mode)
{
	struct remora_caps caps;
	uint64_t v = 3, old = 0x77;
	struct remora_wr w[2];
	int rc;

	open_atomics_mode("refuse");
	tu_caps(c.tp, &caps);
	cr_assert_eq(caps.ops & ((1u << REMORA_OP_CAS) | (1u << REMORA_OP_FAA) |
				 (1u << REMORA_OP_MCAS)),
		     0, "atomics=refuse still advertises atomics (ops %#x)", caps.ops);
	cr_assert_eq(caps.flags & REMORA_CAP_COHERENT_ATOMICS, 0);
	set_word(0, 64, 1);
	rc = remora_cas(c.ch, ga(0, 64), c.mn[0].key, 1, 2, &old);
	cr_assert_eq(rc, -EOPNOTSUPP, "CAS with atomics=refuse: %d (%s)", rc, remora_strerror(rc));
	cr_assert_eq(old, 0x77, "a refused CAS wrote its result");
	rc = remora_faa(c.ch, ga(0, 64), c.mn[0].key, 1, NULL);
	cr_assert_eq(rc, -EOPNOTSUPP, "FAA with atomics=refuse: %d (%s)", rc, remora_strerror(rc));
	w[0] = tu_wr_write(ga(0, 64), c.mn[0].key, &v, 8);
	w[1] = tu_wr_mcas(ga(0, 64), c.mn[0].key, 0, 0, 9, ~0ull, NULL);
	cr_assert_eq(remora_post(c.ch, w, 2), -EOPNOTSUPP, "batch with an MCAS");
	cr_assert_eq(remora_chan_outstanding(c.ch), 0);
	cr_assert_eq(word(0, 64), 1, "refused atomics changed memory");
	cr_assert_eq(remora_write(c.ch, ga(0, 64), c.mn[0].key, &v, 8), 0);
	cr_assert_eq(word(0, 64), 3);
}

/* atomics=arbiter: atomics are emulated under a lock word, labelled and counted as emulated. */
Test(verbs, atomics_arbiter_mode)
{
	struct remora_caps caps;
	struct remora_counters k;
	uint64_t old = 0;
	int rc;

	open_atomics_mode("arbiter");
	tu_caps(c.tp, &caps);
	cr_assert_neq(caps.ops & (1u << REMORA_OP_CAS), 0, "arbiter mode must offer CAS");
	cr_assert_neq(caps.emulated_ops & (1u << REMORA_OP_CAS), 0,
		      "arbiter CAS is emulated: caps must say so (emulated_ops %#x)",
		      caps.emulated_ops);
	set_word(0, 64, 10);
	rc = remora_cas(c.ch, ga(0, 64), c.mn[0].key, 10, 11, &old);
	cr_assert_eq(rc, 0, "CAS = %d (%s)", rc, remora_strerror(rc));
	cr_assert_eq(old, 10);
	cr_assert_eq(remora_cas(c.ch, ga(0, 64), c.mn[0].key, 10, 12, &old), 0);
	cr_assert_eq(old, 11);
	cr_assert_eq(remora_faa(c.ch, ga(0, 64), c.mn[0].key, UINT64_MAX, &old), 0);
	cr_assert_eq(old, 11);
	cr_assert_eq(word(0, 64), 10);
	remora_chan_counters(c.ch, &k);
	cr_assert_eq(k.verbs[0][REMORA_OP_CAS], 2);
	cr_assert_eq(k.verbs[0][REMORA_OP_FAA], 1);
	cr_assert_geq(k.emulated[0][REMORA_OP_CAS] + k.emulated[0][REMORA_OP_FAA], 3,
		      "emulated atomics not counted as emulated");
}

/*
 * Bug pinned: with atomics=arbiter, caps listed MCAS in emulated_ops and still carried
 * REMORA_CAP_NATIVE_MCAS ("in hardware, not emulated"): a label that contradicts itself.
 */
Test(verbs, arbiter_caps_do_not_claim_native_mcas)
{
	struct remora_caps caps;

	open_atomics_mode("arbiter");
	tu_caps(c.tp, &caps);
	if (caps.emulated_ops & (1u << REMORA_OP_MCAS))
		cr_assert_eq(caps.flags & REMORA_CAP_NATIVE_MCAS, 0,
			     "MCAS is in emulated_ops (%#x) and flagged REMORA_CAP_NATIVE_MCAS",
			     caps.emulated_ops);
}
