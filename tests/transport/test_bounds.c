/* SPDX-License-Identifier: MIT */
/*
 * Conformance: the region check (RDMA's rkey check, enforced by every backend). A verb outside
 * its key's region, with an unknown key, to an unknown node, or an atomic on a misaligned
 * address is refused at post time with the documented code, produces no completion, and
 * touches no memory: the whole pool is a canary pattern and must stay intact. One bad verb
 * refuses its whole batch. The negative control switches the core's bounds check off (mutation
 * skip_bounds_check) and asserts that the canary check then sees the damage, or, where the
 * device checks bounds itself (REMORA_CAP_DEVICE_BOUNDS), that the device still refuses the verb.
 */
#include <errno.h>
#include <string.h>

#include "tutil.h"

static struct tu_ctx c;

TestSuite(bounds, .fini = tu_fini, .timeout = TU_TIMEOUT);

#define POOL (64u << 10)
#define A_OFF 8192u
#define A_LEN 4096u
#define B_OFF 16384u
#define B_LEN 4096u
#define A_END (A_OFF + A_LEN)

static uint32_t key_a, key_b, key_whole, key_bad;
static bool have_mcas;

/* Pool with regions A and B only (the whole-pool region is deregistered before attaching). */
static void open_regions(void)
{
	struct remora_caps caps;
	int rc;

	tu_open_pools(&c, 0, 1, POOL);
	key_whole = c.mn[0].key;
	rc = remora_pool_dereg(c.mn[0].pool, key_whole);
	cr_assert_eq(rc, 0, "remora_pool_dereg = %d (%s)", rc, remora_strerror(rc));
	rc = remora_pool_reg(c.mn[0].pool, A_OFF, A_LEN, &key_a);
	cr_assert_eq(rc, 0, "reg A = %d (%s)", rc, remora_strerror(rc));
	rc = remora_pool_reg(c.mn[0].pool, B_OFF, B_LEN, &key_b);
	cr_assert_eq(rc, 0, "reg B = %d (%s)", rc, remora_strerror(rc));
	cr_assert_neq(key_a, key_b, "two regions got the same key");
	tu_attach_all(&c);
	key_bad = 0x5a5a5a5a;
	while (key_bad == key_a || key_bad == key_b || key_bad == key_whole)
		key_bad++;
	tu_caps(c.tp, &caps);
	have_mcas = caps.ops & (1u << REMORA_OP_MCAS);
	tu_canary_fill(c.mn[0].base, 0, POOL);
}

struct bad {
	const char *what;
	uint8_t op;
	uint16_t node;
	uint64_t off;
	uint32_t len;
	uint32_t *key;
	int want;
};

static const struct bad bad_verbs[] = {
	{ "WRITE crossing the region end", REMORA_OP_WRITE, 0, A_END - 4, 8, &key_a,
	  -REMORA_EBOUNDS },
	{ "WRITE one byte past the end", REMORA_OP_WRITE, 0, A_END, 1, &key_a, -REMORA_EBOUNDS },
	{ "WRITE starting before the region", REMORA_OP_WRITE, 0, A_OFF - 1, 2, &key_a,
	  -REMORA_EBOUNDS },
	{ "WRITE wholly before the region", REMORA_OP_WRITE, 0, A_OFF - 8, 8, &key_a,
	  -REMORA_EBOUNDS },
	{ "WRITE of the region plus one", REMORA_OP_WRITE, 0, A_OFF, A_LEN + 1, &key_a,
	  -REMORA_EBOUNDS },
	{ "READ crossing the region end", REMORA_OP_READ, 0, A_END - 1, 2, &key_a,
	  -REMORA_EBOUNDS },
	{ "READ of 4 GiB - 1", REMORA_OP_READ, 0, A_OFF + 8, UINT32_MAX, &key_a, -REMORA_EBOUNDS },
	{ "WRITE of 4 GiB - 1", REMORA_OP_WRITE, 0, A_OFF + 8, UINT32_MAX, &key_a,
	  -REMORA_EBOUNDS },
	{ "WRITE at offset 2^48 - 4 (wraps)", REMORA_OP_WRITE, 0, REMORA_GADDR_OFF_MASK - 3, 8,
	  &key_a, -REMORA_EBOUNDS },
	{ "WRITE at offset 2^48 - 1", REMORA_OP_WRITE, 0, REMORA_GADDR_OFF_MASK, 1, &key_a,
	  -REMORA_EBOUNDS },
	{ "READ at offset 2^48 - 8", REMORA_OP_READ, 0, REMORA_GADDR_OFF_MASK - 7, 8, &key_a,
	  -REMORA_EBOUNDS },
	{ "WRITE with key A into region B", REMORA_OP_WRITE, 0, B_OFF, 8, &key_a,
	  -REMORA_EBOUNDS },
	{ "WRITE with key B into region A", REMORA_OP_WRITE, 0, A_OFF, 8, &key_b,
	  -REMORA_EBOUNDS },
	{ "WRITE between the regions", REMORA_OP_WRITE, 0, A_END + 64, 8, &key_a,
	  -REMORA_EBOUNDS },
	{ "CAS just past the end", REMORA_OP_CAS, 0, A_END, 8, &key_a, -REMORA_EBOUNDS },
	{ "FAA just before the start", REMORA_OP_FAA, 0, A_OFF - 8, 8, &key_a, -REMORA_EBOUNDS },
	{ "MCAS at 2^48 - 8", REMORA_OP_MCAS, 0, REMORA_GADDR_OFF_MASK - 7, 8, &key_a,
	  -REMORA_EBOUNDS },
	{ "WRITE with an unknown key", REMORA_OP_WRITE, 0, A_OFF, 8, &key_bad, -REMORA_EBADKEY },
	{ "READ with an unknown key", REMORA_OP_READ, 0, A_OFF, 8, &key_bad, -REMORA_EBADKEY },
	{ "CAS with an unknown key", REMORA_OP_CAS, 0, A_OFF, 8, &key_bad, -REMORA_EBADKEY },
	{ "WRITE with a deregistered key", REMORA_OP_WRITE, 0, A_OFF, 8, &key_whole,
	  -REMORA_EBADKEY },
	{ "FAA with a deregistered key", REMORA_OP_FAA, 0, 0, 8, &key_whole, -REMORA_EBADKEY },
	{ "WRITE to node 1 (not attached)", REMORA_OP_WRITE, 1, A_OFF, 8, &key_a, -REMORA_ENODE },
	{ "CAS to node 31 (not attached)", REMORA_OP_CAS, 31, A_OFF, 8, &key_a, -REMORA_ENODE },
	{ "READ to node 40 (>= REMORA_MAX_MN)", REMORA_OP_READ, 40, A_OFF, 8, &key_a,
	  -REMORA_ENODE },
	{ "WRITE to node 0xffff", REMORA_OP_WRITE, 0xffff, A_OFF, 8, &key_a, -REMORA_ENODE },
	{ "CAS at +4", REMORA_OP_CAS, 0, A_OFF + 4, 8, &key_a, -REMORA_EALIGN },
	{ "FAA at +1", REMORA_OP_FAA, 0, A_OFF + 1, 8, &key_a, -REMORA_EALIGN },
	{ "MCAS at +2", REMORA_OP_MCAS, 0, A_OFF + 2, 8, &key_a, -REMORA_EALIGN },
	{ "CAS at the last-but-7 byte", REMORA_OP_CAS, 0, A_END - 15, 8, &key_a, -REMORA_EALIGN },
	{ "unknown opcode 99", 99, 0, A_OFF, 8, &key_a, -EINVAL },
	{ "opcode REMORA_OP__COUNT", REMORA_OP__COUNT, 0, A_OFF, 8, &key_a, -EINVAL },
};

#define NBAD (sizeof(bad_verbs) / sizeof(bad_verbs[0]))

static uint64_t local_old;
static uint8_t local_buf[4096];

static struct remora_wr make_wr(const struct bad *b)
{
	return (struct remora_wr){
		.wr_id = 0xbad,
		.raddr = remora_gaddr_make(b->node, b->off),
		.rkey = *b->key,
		.len = b->len,
		.op = b->op,
		.local = b->op == REMORA_OP_READ || b->op == REMORA_OP_WRITE ? (void *)local_buf
									     : (void *)&local_old,
		.compare = 0,
		.swap = 0xdeadbeefdeadbeef,
		.compare_mask = 0,
		.swap_mask = UINT64_MAX,
	};
}

/* Nothing may have happened: no completion, no outstanding verb, no pool byte, no local byte. */
static void assert_untouched(const char *what)
{
	struct remora_cqe cqe;
	uint64_t dmg;

	cr_assert_eq(remora_poll(c.ch, &cqe, 1), 0, "%s: a refused verb produced a completion",
		     what);
	cr_assert_eq(remora_chan_outstanding(c.ch), 0, "%s: refused verb is outstanding", what);
	dmg = tu_canary_damage(c.mn[0].base, 0, POOL);
	cr_assert_eq(dmg, 0, "%s: %llu pool bytes changed", what, (unsigned long long)dmg);
	for (unsigned i = 0; i < sizeof(local_buf); i++)
		cr_assert_eq(local_buf[i], 0x77, "%s: local buffer byte %u changed", what, i);
	cr_assert_eq(local_old, 0x7777, "%s: atomic result written for a refused verb", what);
}

Test(bounds, refused_with_code_and_memory_untouched)
{
	struct remora_counters k0, k1;
	unsigned tested = 0;

	open_regions();
	memset(local_buf, 0x77, sizeof(local_buf));
	local_old = 0x7777;
	remora_chan_counters(c.ch, &k0);
	for (unsigned i = 0; i < NBAD; i++) {
		const struct bad *b = &bad_verbs[i];
		struct remora_wr wr = make_wr(b);
		int rc;

		if (b->op == REMORA_OP_MCAS && !have_mcas)
			continue;
		rc = remora_post(c.ch, &wr, 1);
		cr_assert_eq(rc, b->want, "%s: post = %d (%s), want %d (%s)", b->what, rc,
			     remora_strerror(rc), b->want, remora_strerror(b->want));
		assert_untouched(b->what);
		rc = remora_exec(c.ch, &wr, 1); /* inline completion validates on its own path */
		cr_assert_eq(rc, b->want, "%s: exec = %d (%s), want %d (%s)", b->what, rc,
			     remora_strerror(rc), b->want, remora_strerror(b->want));
		assert_untouched(b->what);
		tested++;
	}
	remora_chan_counters(c.ch, &k1);
	cr_assert_eq(k1.doorbells, k0.doorbells, "refused posts counted as doorbells");
	cr_assert_eq(remora_counters_total(&k1, REMORA_OP_WRITE), 0, "refused WRITEs counted");
	cr_assert_geq(tested, NBAD - 2);
}

/* Malformed verbs inside a valid region: an unknown flag bit, no local buffer. */
Test(bounds, malformed_verbs_refused)
{
	static const struct {
		const char *what;
		uint8_t op, flags;
		bool no_local;
	} forms[] = {
		{ "WRITE with flag 0x80", REMORA_OP_WRITE, 0x80, false },
		{ "CAS with flag 0x04", REMORA_OP_CAS, 0x04, false },
		{ "READ into no buffer", REMORA_OP_READ, 0, true },
		{ "WRITE from no buffer", REMORA_OP_WRITE, 0, true },
	};

	open_regions();
	memset(local_buf, 0x77, sizeof(local_buf));
	local_old = 0x7777;
	for (unsigned i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		struct bad b = { forms[i].what, forms[i].op, 0, A_OFF, 8, &key_a, -EINVAL };
		struct remora_wr wr = make_wr(&b);
		int rc;

		wr.flags = forms[i].flags;
		if (forms[i].no_local)
			wr.local = NULL;
		rc = remora_post(c.ch, &wr, 1);
		cr_assert_eq(rc, -EINVAL, "%s: post = %d (%s)", b.what, rc, remora_strerror(rc));
		assert_untouched(b.what);
		rc = remora_exec(c.ch, &wr, 1);
		cr_assert_eq(rc, -EINVAL, "%s: exec = %d (%s)", b.what, rc, remora_strerror(rc));
		assert_untouched(b.what);
	}
}

/* The synchronous helpers report the same codes. */
Test(bounds, helpers_return_the_code)
{
	uint64_t v = 1;
	int rc;

	open_regions();
	rc = remora_write(c.ch, remora_gaddr_make(0, A_END - 4), key_a, &v, 8);
	cr_assert_eq(rc, -REMORA_EBOUNDS, "remora_write past the end = %d (%s)", rc,
		     remora_strerror(rc));
	rc = remora_cas(c.ch, remora_gaddr_make(0, A_OFF + 4), key_a, 0, 1, &v);
	cr_assert_eq(rc, -REMORA_EALIGN, "remora_cas misaligned = %d (%s)", rc, remora_strerror(rc));
	rc = remora_faa(c.ch, remora_gaddr_make(0, A_OFF), key_bad, 1, &v);
	cr_assert_eq(rc, -REMORA_EBADKEY, "remora_faa bad key = %d (%s)", rc, remora_strerror(rc));
	rc = remora_read(c.ch, remora_gaddr_make(2, A_OFF), key_a, &v, 8);
	cr_assert_eq(rc, -REMORA_ENODE, "remora_read node 2 = %d (%s)", rc, remora_strerror(rc));
	cr_assert_eq(tu_canary_damage(c.mn[0].base, 0, POOL), 0);
}

/* The check is not over-strict: the exact edges of a region are reachable. */
Test(bounds, region_edges_accepted)
{
	static uint8_t all[A_LEN];
	uint64_t old = 0;
	int rc;

	open_regions();
	memset(all, 0x42, sizeof(all));
	rc = remora_write(c.ch, remora_gaddr_make(0, A_OFF), key_a, all, A_LEN);
	cr_assert_eq(rc, 0, "WRITE of exactly region A = %d (%s)", rc, remora_strerror(rc));
	rc = remora_read(c.ch, remora_gaddr_make(0, B_OFF + B_LEN - 1), key_b, &old, 1);
	cr_assert_eq(rc, 0, "READ of B's last byte = %d (%s)", rc, remora_strerror(rc));
	rc = remora_cas(c.ch, remora_gaddr_make(0, A_END - 8), key_a, 0x4242424242424242, 9, &old);
	cr_assert_eq(rc, 0, "CAS on A's last word = %d (%s)", rc, remora_strerror(rc));
	cr_assert_eq(old, 0x4242424242424242);
	cr_assert_eq(tu_canary_damage(c.mn[0].base, 0, A_OFF), 0);
	cr_assert_eq(tu_canary_damage(c.mn[0].base, A_END, POOL), 0);
}

/* One invalid verb anywhere in a batch refuses all of it. */
Test(bounds, whole_batch_refused)
{
	static const unsigned where[] = { 0, 2, 5 };
	uint64_t vals[6] = { 1, 2, 3, 4, 5, 6 }, old = 0x7777;
	struct remora_wr w[6];

	open_regions();
	memset(local_buf, 0x77, sizeof(local_buf));
	for (unsigned k = 0; k < 3; k++) {
		local_old = 0x7777;
		for (unsigned i = 0; i < 6; i++) {
			if (i % 2)
				w[i] = tu_wr_faa(remora_gaddr_make(0, A_OFF + 64 * i), key_a, 1,
						 &old);
			else
				w[i] = tu_wr_write(remora_gaddr_make(0, A_OFF + 64 * i), key_a,
						   &vals[i], 8);
			w[i].wr_id = i;
		}
		w[where[k]] = make_wr(&bad_verbs[0]);
		cr_assert_eq(remora_post(c.ch, w, 6), -REMORA_EBOUNDS,
			     "batch with a bad verb at %u not refused", where[k]);
		cr_assert_eq(old, 0x7777, "a valid FAA of a refused batch returned a value");
		assert_untouched("batch with one bad verb");
	}
}

/*
 * With the core's bounds check switched off, a device that checks bounds itself
 * (REMORA_CAP_DEVICE_BOUNDS: an RNIC's rkey check) must still refuse the verb: it completes
 * with a failure and the whole pool stays intact.
 */
static void device_refuses_unchecked_verb(const struct bad *b, const struct remora_cqe *cqe)
{
	uint64_t dmg;

	cr_assert(cqe->status == -REMORA_EBADKEY || cqe->status == -REMORA_EBOUNDS,
		  "%s with the core's check off: completion status %d (%s); a device that "
		  "advertises REMORA_CAP_DEVICE_BOUNDS must refuse it with -REMORA_EBADKEY or "
		  "-REMORA_EBOUNDS", b->what, cqe->status, remora_strerror(cqe->status));
	dmg = tu_canary_damage(c.mn[0].base, 0, POOL);
	cr_assert_eq(dmg, 0, "%s: the device refused it, yet %llu pool bytes changed", b->what,
		     (unsigned long long)dmg);
}

/* Without a device check, the WRITE lands: the canary check must see its 4 bytes past A. */
static void canary_sees_unchecked_verb(const struct bad *b, const struct remora_cqe *cqe)
{
	uint64_t dmg;

	cr_assert_eq(cqe->status, 0, "%s under the mutation: status %d (%s)", b->what,
		     cqe->status, remora_strerror(cqe->status));
	dmg = tu_canary_damage(c.mn[0].base, A_END, POOL);
	cr_assert_gt(dmg, 0, "the canary check missed a WRITE past the region end");
	cr_assert_eq(dmg, 4, "the 4 bytes past the end must be the only damage, got %llu",
		     (unsigned long long)dmg);
}

/*
 * Negative control: with the core's bounds check switched off (mutation skip_bounds_check),
 * the WRITE crossing the end of A reaches the backend. On a backend without a bounds check of
 * its own it lands in the canary, and the same checker used above must report it: if the
 * checker passed here, the tests above would prove nothing. On a backend whose device checks
 * bounds (REMORA_CAP_DEVICE_BOUNDS), the stronger property holds instead: the device refuses it
 * and nothing changes, so the refusals above do not rest on the core alone.
 */
Test(bounds, negative_control_skip_bounds_check_is_detected)
{
	struct bad b = bad_verbs[0];
	struct remora_caps caps;
	struct remora_wr wr;
	struct remora_cqe cqe;
	int rc;

	open_regions();
	tu_caps(c.tp, &caps);
	rc = tu_mutate(c.tp, "skip_bounds_check");
	cr_assert_eq(rc, 0, "mutation skip_bounds_check unavailable: %d (%s)", rc,
		     remora_strerror(rc));
	for (unsigned i = 0; i < 8; i++)
		local_buf[i] = (uint8_t)~tu_canary_byte(b.off + i);
	wr = make_wr(&b);
	rc = remora_post(c.ch, &wr, 1);
	if (rc == -REMORA_EBOUNDS)
		cr_assert_fail("mutation skip_bounds_check did not switch the bounds check off");
	cr_assert_eq(rc, 0, "post under the mutation = %d (%s)", rc, remora_strerror(rc));
	cr_assert_eq(tu_drain(c.ch, &cqe, 1), 1, "no completion for the unchecked WRITE");
	cr_assert_eq(cqe.wr_id, wr.wr_id);
	if (caps.flags & REMORA_CAP_DEVICE_BOUNDS)
		device_refuses_unchecked_verb(&b, &cqe);
	else
		canary_sees_unchecked_verb(&b, &cqe);
}
