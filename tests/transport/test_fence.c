/* SPDX-License-Identifier: MIT */
/*
 * Conformance: fencing. After remora_pool_fence(pool, cn) returns, no verb of cn changes the
 * pool: WRITE, CAS, FAA and MCAS complete with -REMORA_EFENCED, other compute nodes go on
 * unaffected, and a compute node hammering WRITEs in another process stops changing memory at
 * the moment the fence returns. The negative control applies the fenced node's verbs anyway
 * (mutation skip_fence_check) and asserts that the same snapshot check reports the leak.
 *
 * The test process is the memory node (self_cn -1); each compute node is a forked child with
 * its own transport and channel, talking to the parent over pipes.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "tutil.h"

static struct tu_ctx mn;

TestSuite(fence, .fini = tu_fini, .timeout = TU_TIMEOUT);

#define POOL (256u << 10)
#define HAMMER_OFF 4096u /* 64 words the fenced CN of the first test writes */
#define HAMMER_WORDS 64u
#define CN2_OFF 8192u
#define BIG_OFF 65536u   /* the hammering CN's WRITE area */
#define BIG_LEN 4096u    /* bytes per WRITE */
#define BIG_N 15u        /* WRITEs per batch, then the marker */
#define MARK_OFF (BIG_OFF + BIG_N * BIG_LEN) /* batch counter, written last in each batch */
#define AREA (BIG_N * BIG_LEN + 8)

enum { MSG_READY = 1, MSG_FENCED = 2 };

struct cn_arg {
	int cn;
	const char *mutation; /* NULL or a negative-control mutation for this CN's transport */
	uint64_t after;       /* hammer: batches to post after the parent said it fenced */
};

static uint64_t word_at(uint64_t off)
{
	uint64_t v;

	memcpy(&v, mn.mn[0].base + off, 8);
	return v;
}

static void skip_without_fencing(void)
{
	struct remora_caps caps;

	tu_caps(mn.tp, &caps);
	if (!(caps.flags & REMORA_CAP_FENCING))
		tu_skip("backend %s does not advertise REMORA_CAP_FENCING", tu_backend());
}

/* A compute node in a child: transport, attach, channel. Returns 0 or prints why not. */
static int child_open(int cn, const char *mutation, struct remora_transport **tp,
		      struct remora_chan **ch)
{
	int rc = tu_transport_try(cn, NULL, tp);

	TU_CHILD_CHECK(rc == 0, "cn %d: transport_open = %d (%s)", cn, rc, remora_strerror(rc));
	rc = remora_transport_attach(*tp, &mn.mn[0].desc);
	TU_CHILD_CHECK(rc == 0, "cn %d: attach = %d (%s)", cn, rc, remora_strerror(rc));
	rc = remora_chan_open(*tp, ch);
	TU_CHILD_CHECK(rc == 0, "cn %d: chan_open = %d (%s)", cn, rc, remora_strerror(rc));
	if (mutation) {
		rc = tu_mutate(*tp, mutation);
		TU_CHILD_CHECK(rc == 0, "mutation %s: %d", mutation, rc);
	}
	return 0;
}

static remora_gaddr ga(uint64_t off)
{
	return remora_gaddr_make(0, off);
}

/* CN that gets fenced: every modifying verb after the fence must fail with -EFENCED. */
static int fenced_cn(void *argp, int rd, int wr)
{
	struct cn_arg *a = argp;
	struct remora_transport *tp;
	struct remora_chan *ch;
	struct remora_wr w[3];
	struct remora_cqe cq[3];
	uint32_t key = mn.mn[0].key;
	uint64_t v = 1, msg, old = 0;
	int rc;

	if (child_open(a->cn, NULL, &tp, &ch))
		return 1;
	rc = remora_write(ch, ga(HAMMER_OFF), key, &v, 8);
	TU_CHILD_CHECK(rc == 0, "WRITE before the fence = %d (%s)", rc, remora_strerror(rc));
	tu_send(wr, MSG_READY);
	TU_CHILD_CHECK(tu_recv(rd, &msg) == 0 && msg == MSG_FENCED, "no fence message");

	v = 2;
	rc = remora_write(ch, ga(HAMMER_OFF), key, &v, 8);
	TU_CHILD_CHECK(rc == -REMORA_EFENCED, "WRITE after the fence = %d (%s)", rc,
		       remora_strerror(rc));
	rc = remora_cas(ch, ga(HAMMER_OFF), key, 1, 3, &old);
	TU_CHILD_CHECK(rc == -REMORA_EFENCED, "CAS after the fence = %d (%s)", rc,
		       remora_strerror(rc));
	rc = remora_faa(ch, ga(HAMMER_OFF + 8), key, 5, &old);
	TU_CHILD_CHECK(rc == -REMORA_EFENCED, "FAA after the fence = %d (%s)", rc,
		       remora_strerror(rc));
	rc = remora_mcas(ch, ga(HAMMER_OFF + 16), key, 0, 0, ~0ull, ~0ull, &old);
	TU_CHILD_CHECK(rc == -REMORA_EFENCED || rc == -EOPNOTSUPP, "MCAS after the fence = %d (%s)",
		       rc, remora_strerror(rc));

	/* A posted batch: each verb completes, each with its own -EFENCED status. */
	w[0] = tu_wr_write(ga(HAMMER_OFF + 24), key, &v, 8);
	w[1] = tu_wr_faa(ga(HAMMER_OFF + 32), key, 1, NULL);
	w[2] = tu_wr_cas(ga(HAMMER_OFF + 40), key, 0, 9, NULL);
	for (unsigned i = 0; i < 3; i++)
		w[i].wr_id = 100 + i;
	rc = remora_post(ch, w, 3);
	TU_CHILD_CHECK(rc == 0, "post by a fenced CN = %d: it must complete, not refuse", rc);
	rc = tu_drain(ch, cq, 3);
	TU_CHILD_CHECK(rc == 3, "fenced batch: %d of 3 completions", rc);
	for (unsigned i = 0; i < 3; i++) {
		TU_CHILD_CHECK(cq[i].wr_id >= 100 && cq[i].wr_id < 103, "wr_id %llu",
			       (unsigned long long)cq[i].wr_id);
		TU_CHILD_CHECK(cq[i].status == -REMORA_EFENCED, "fenced batch verb %llu status %d",
			       (unsigned long long)cq[i].wr_id, cq[i].status);
	}
	remora_chan_close(ch);
	remora_transport_close(tp);
	return 0;
}

/* CN that is not fenced: its verbs go on working after another CN's fence. */
static int bystander_cn(void *argp, int rd, int wr)
{
	struct cn_arg *a = argp;
	struct remora_transport *tp;
	struct remora_chan *ch;
	uint32_t key = mn.mn[0].key;
	uint64_t v = 10, msg, old = 0;
	int rc;

	if (child_open(a->cn, NULL, &tp, &ch))
		return 1;
	rc = remora_write(ch, ga(CN2_OFF), key, &v, 8);
	TU_CHILD_CHECK(rc == 0, "bystander WRITE = %d (%s)", rc, remora_strerror(rc));
	tu_send(wr, MSG_READY);
	TU_CHILD_CHECK(tu_recv(rd, &msg) == 0 && msg == MSG_FENCED, "no fence message");
	v = 20;
	rc = remora_write(ch, ga(CN2_OFF), key, &v, 8);
	TU_CHILD_CHECK(rc == 0, "bystander WRITE after another CN's fence = %d (%s)", rc,
		       remora_strerror(rc));
	rc = remora_faa(ch, ga(CN2_OFF), key, 5, &old);
	TU_CHILD_CHECK(rc == 0 && old == 20, "bystander FAA = %d, old %llu", rc,
		       (unsigned long long)old);
	rc = remora_cas(ch, ga(CN2_OFF + 8), key, 0, 7, &old);
	TU_CHILD_CHECK(rc == 0 && old == 0, "bystander CAS = %d, old %llu", rc,
		       (unsigned long long)old);
	remora_chan_close(ch);
	remora_transport_close(tp);
	return 0;
}

static void open_mn(void)
{
	tu_open_pools(&mn, -1, 1, POOL);
	skip_without_fencing();
	memset(mn.mn[0].base, 0, POOL);
}

Test(fence, fenced_cn_has_no_effect_others_unaffected)
{
	struct cn_arg a1 = { .cn = 1 }, a2 = { .cn = 2 };
	struct tu_proc p1, p2;
	uint64_t msg;
	int rc;

	open_mn();
	tu_spawn(&p1, fenced_cn, &a1);
	tu_spawn(&p2, bystander_cn, &a2);
	cr_assert_eq(tu_recv(p1.rd, &msg), 0, "CN 1 did not get ready");
	cr_assert_eq(tu_recv(p2.rd, &msg), 0, "CN 2 did not get ready");
	cr_assert_eq(word_at(HAMMER_OFF), 1);
	rc = remora_pool_fence(mn.mn[0].pool, 1);
	cr_assert_eq(rc, 0, "remora_pool_fence(1) = %d (%s)", rc, remora_strerror(rc));
	tu_send(p1.wr, MSG_FENCED);
	tu_send(p2.wr, MSG_FENCED);
	rc = tu_proc_wait(&p1);
	cr_assert_eq(rc, 0, "fenced CN's checks failed (exit %d, see its line above)", rc);
	rc = tu_proc_wait(&p2);
	cr_assert_eq(rc, 0, "bystander CN's checks failed (exit %d)", rc);
	cr_assert_eq(word_at(HAMMER_OFF), 1, "fenced CN changed memory: %llu",
		     (unsigned long long)word_at(HAMMER_OFF));
	for (unsigned i = 1; i < HAMMER_WORDS; i++)
		cr_assert_eq(word_at(HAMMER_OFF + 8 * i), 0, "fenced CN changed word %u", i);
	cr_assert_eq(word_at(CN2_OFF), 25);
	cr_assert_eq(word_at(CN2_OFF + 8), 7);
}

/* A new process that takes the id of a fenced CN stays fenced (fencing is permanent). */
static int fenced_again(void *argp, int rd, int wr)
{
	struct cn_arg *a = argp;
	struct remora_transport *tp;
	struct remora_chan *ch;
	uint64_t v = 99;
	int rc;

	(void)rd;
	(void)wr;
	rc = tu_transport_try(a->cn, NULL, &tp);
	TU_CHILD_CHECK(rc == 0, "transport_open = %d", rc);
	rc = remora_transport_attach(tp, &mn.mn[0].desc);
	if (rc == -REMORA_EFENCED) {
		remora_transport_close(tp);
		return 0;
	}
	TU_CHILD_CHECK(rc == 0, "attach as a fenced CN = %d (%s)", rc, remora_strerror(rc));
	rc = remora_chan_open(tp, &ch);
	TU_CHILD_CHECK(rc == 0, "chan_open = %d", rc);
	rc = remora_write(ch, ga(HAMMER_OFF), mn.mn[0].key, &v, 8);
	TU_CHILD_CHECK(rc == -REMORA_EFENCED, "WRITE by a re-attached fenced CN = %d (%s)", rc,
		       remora_strerror(rc));
	remora_chan_close(ch);
	remora_transport_close(tp);
	return 0;
}

Test(fence, fence_is_permanent_for_the_cn_id)
{
	struct cn_arg a = { .cn = 3 };
	struct tu_proc p;
	int rc;

	open_mn();
	rc = remora_pool_fence(mn.mn[0].pool, 3);
	cr_assert_eq(rc, 0, "fencing a CN that never attached = %d (%s)", rc, remora_strerror(rc));
	tu_spawn(&p, fenced_again, &a);
	rc = tu_proc_wait(&p);
	cr_assert_eq(rc, 0, "a fenced CN id could act again (exit %d)", rc);
	cr_assert_eq(word_at(HAMMER_OFF), 0, "the fenced CN id changed memory");
	cr_assert_eq(remora_pool_fence(mn.mn[0].pool, REMORA_MAX_CN), -EINVAL);
}

/*
 * Hammering CN: batches of BIG_N WRITEs of BIG_LEN bytes, then the batch number into the marker
 * word, until the parent says it fenced, then `after` more batches. A batch takes microseconds,
 * so a fence often lands inside one: a fencer that does not wait for a batch in progress lets
 * the rest of it, and at least its marker, land after the fence returned. Reports how many
 * batches succeeded after the parent's message (0 is the contract) and how many verbs were
 * fenced.
 */
static int hammer_cn(void *argp, int rd, int wr)
{
	enum { B = BIG_N + 1 };
	struct cn_arg *a = argp;
	struct remora_transport *tp;
	struct remora_chan *ch;
	struct remora_wr w[B];
	struct remora_cqe cq[B];
	struct pollfd pfd = { .fd = rd, .events = POLLIN };
	static uint8_t data[BIG_LEN];
	uint64_t seq = 0, ok_after = 0, fenced = 0, after = 0, msg;
	bool told = false, ready = false, saw_fenced = false;
	uint32_t key = mn.mn[0].key;

	if (child_open(a->cn, a->mutation, &tp, &ch))
		return 1;
	while (!told || after < a->after) {
		bool fenced_before = saw_fenced;
		int rc, n, ok = 0;

		seq++;
		memset(data, (int)(seq & 0xff), sizeof(data));
		for (unsigned i = 0; i < BIG_N; i++)
			w[i] = tu_wr_write(ga(BIG_OFF + (uint64_t)i * BIG_LEN), key, data, BIG_LEN);
		w[B - 1] = tu_wr_write(ga(MARK_OFF), key, &seq, 8);
		rc = remora_post(ch, w, B);
		TU_CHILD_CHECK(rc == 0, "hammer post = %d (%s)", rc, remora_strerror(rc));
		n = tu_drain(ch, cq, B);
		TU_CHILD_CHECK(n == B, "hammer: %d of %d completions", n, B);
		for (int i = 0; i < n; i++) {
			TU_CHILD_CHECK(cq[i].status == 0 || cq[i].status == -REMORA_EFENCED,
				       "hammer status %d", cq[i].status);
			ok += cq[i].status == 0;
			fenced += cq[i].status == -REMORA_EFENCED;
			saw_fenced |= cq[i].status == -REMORA_EFENCED;
		}
		if (!a->mutation)
			TU_CHILD_CHECK(!(fenced_before && ok), "a batch succeeded after one was fenced");
		if (!ready) {
			TU_CHILD_CHECK(ok == B, "first hammer batch failed");
			tu_send(wr, MSG_READY);
			ready = true;
		}
		if (told) {
			after++;
			ok_after += ok > 0;
		} else if (poll(&pfd, 1, 0) == 1) {
			TU_CHILD_CHECK(tu_recv(rd, &msg) == 0 && msg == MSG_FENCED, "bad message");
			told = true;
		}
		TU_CHILD_CHECK(seq < (UINT64_C(1) << 40), "runaway");
	}
	tu_send(wr, ok_after);
	tu_send(wr, fenced);
	remora_chan_close(ch);
	remora_transport_close(tp);
	return 0;
}

/* Bytes of the hammered area that differ from the snapshot: the leak checker. */
static uint64_t changed_since(const uint8_t *snap)
{
	uint64_t n = 0;

	for (unsigned i = 0; i < AREA; i++)
		n += mn.mn[0].base[BIG_OFF + i] != snap[i];
	return n;
}

/*
 * Runs the hammer as compute node cn, with or without the mutation, fences it mid-hammer and
 * returns the leak count: bytes that changed after remora_pool_fence() returned.
 */
static uint64_t hammer_then_fence(int cn, const char *mutation, uint64_t *ok_after,
				  uint64_t *fenced)
{
	struct cn_arg a = { .cn = cn, .mutation = mutation, .after = 200 };
	static uint8_t snap[AREA];
	struct tu_proc p;
	uint64_t msg, start, mark;
	int rc;

	tu_spawn(&p, hammer_cn, &a);
	cr_assert_eq(tu_recv(p.rd, &msg), 0, "hammering CN did not start");
	/* Let it run until memory visibly moves, so the fence lands mid-hammer. */
	start = word_at(MARK_OFF);
	for (int i = 0; i < 200000 && word_at(MARK_OFF) < start + 20; i++)
		usleep(10);
	rc = remora_pool_fence(mn.mn[0].pool, (uint16_t)cn);
	mark = word_at(MARK_OFF); /* first: the marker is what an unfinished batch writes last */
	cr_assert_eq(rc, 0, "remora_pool_fence = %d (%s)", rc, remora_strerror(rc));
	memcpy(snap, mn.mn[0].base + BIG_OFF, sizeof(snap));
	memcpy(snap + AREA - 8, &mark, 8);
	tu_send(p.wr, MSG_FENCED);
	cr_assert_eq(tu_recv(p.rd, ok_after), 0, "hammering CN did not report");
	cr_assert_eq(tu_recv(p.rd, fenced), 0, "hammering CN did not report");
	rc = tu_proc_wait(&p);
	cr_assert_eq(rc, 0, "hammering CN failed (exit %d, see its line above)", rc);
	return changed_since(snap);
}

/* Ten rounds, ten CN ids: each fence lands at another point of a batch. */
Test(fence, fence_stops_a_hammering_cn)
{
	uint64_t ok_after = 0, fenced = 0, leak;

	open_mn();
	for (int round = 0; round < 10; round++) {
		leak = hammer_then_fence(10 + round, NULL, &ok_after, &fenced);
		cr_assert_eq(leak, 0, "round %d: %llu bytes changed after remora_pool_fence returned",
			     round, (unsigned long long)leak);
		cr_assert_eq(ok_after, 0, "round %d: %llu batches succeeded after the fence", round,
			     (unsigned long long)ok_after);
		cr_assert_geq(fenced, 200 * (BIG_N + 1),
			      "round %d: fenced CN saw only %llu -EFENCED completions", round,
			      (unsigned long long)fenced);
	}
}

/* Negative control: with skip_fence_check the same checker must see memory keep changing. */
Test(fence, negative_control_skip_fence_check_is_detected)
{
	uint64_t ok_after = 0, fenced = 0, leak;

	open_mn();
	leak = hammer_then_fence(1, "skip_fence_check", &ok_after, &fenced);
	cr_assert_gt(ok_after, 0, "mutation skip_fence_check did not switch the fence check off");
	cr_assert_gt(leak, 0, "the snapshot check missed writes of a fenced CN");
	cr_assert_eq(fenced, 0);
}
