/* SPDX-License-Identifier: MIT */
/*
 * Fidelity of the cost model where the papers' bottlenecks come from, under an injected clock
 * (simulated time, never the wall clock), all checks exact:
 *
 * - a saturated memory node completes verbs at exactly its modelled rate, unscaled and scaled
 *   (mn_scale K multiplies every service time by K and keeps the round trip);
 * - utilization adds up: the busy time remora_transport_cost_stats() reports per node and
 *   class is the verbs counted by the transport times their service time, and a node queued
 *   without a gap is busy 100% of the window;
 * - messages are charged: a compute node's NIC sends one message per msg_svc, and each is
 *   receivable rtt/2 after it left;
 * - the knee: closed-loop coordinators doing lock CAS + READ + WRITE stop gaining throughput
 *   at the memory node's atomic rate; with the atomic service cost switched off
 *   (skip_atomic_cost) the same test sees throughput keep growing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/cost.h"
#include "tutil.h"

static struct tu_ctx c;

TestSuite(cost_fidelity, .fini = tu_fini, .timeout = TU_TIMEOUT);

#define T0 UINT64_C(1000000000)
#define NCH 32

static uint64_t sim_now;

static uint64_t sim_clock(void) { return __atomic_load_n(&sim_now, __ATOMIC_SEQ_CST); }

static void set_now(uint64_t t) { __atomic_store_n(&sim_now, t, __ATOMIC_SEQ_CST); }

static struct remora_chan *chans[NCH];
static uint64_t scratch[64];

/* Opens profile cx3 scaled by k (via $REMORA_MN_SCALE) with nmn nodes and nch channels. */
static void open_scaled(unsigned k, unsigned nmn, unsigned nch)
{
	char buf[16];
	int rc;

	snprintf(buf, sizeof(buf), "%u", k);
	setenv("REMORA_MN_SCALE", buf, 1);
	rt_cost_set_clock(sim_clock);
	set_now(T0);
	{
		struct remora_transport *probe = NULL;

		rc = tu_transport_try(-1, "cx3", &probe);
		if (rc == -REMORA_ECONFIG)
			tu_skip("backend %s takes no cost profile: %s", tu_backend(),
				remora_last_error());
		cr_assert_eq(rc, 0, "open = %d (%s)", rc, remora_strerror(rc));
		remora_transport_close(probe);
	}
	tu_use_profile("cx3");
	tu_open(&c, 0, nmn, 65536);
	cr_assert_eq(remora_transport_mn_scale(c.tp), k);
	memset(chans, 0, sizeof(chans));
	chans[0] = c.ch;
	for (unsigned i = 1; i < nch; i++)
		cr_assert_eq(remora_chan_open(c.tp, &chans[i]), 0);
}

static void close_chans(void)
{
	for (unsigned i = 1; i < NCH; i++)
		if (chans[i])
			remora_chan_close(chans[i]);
	memset(chans, 0, sizeof(chans));
}

static const struct rt_cost_profile *cx3(void)
{
	const struct rt_cost_profile *p = rt_cost_profile_find("cx3");

	cr_assert_not_null(p);
	return p;
}

static struct remora_wr wr_of(enum remora_op op, unsigned mn, unsigned i)
{
	remora_gaddr a = remora_gaddr_make((uint16_t)mn, 8 * (i % 1024));

	if (op == REMORA_OP_READ)
		return tu_wr_read(a, c.mn[mn].key, &scratch[i % 64], 8);
	if (op == REMORA_OP_WRITE)
		return tu_wr_write(a, c.mn[mn].key, &scratch[i % 64], 8);
	return tu_wr_cas(a, c.mn[mn].key, 0, 1, NULL);
}

/* Completions of every channel that are due now. */
static unsigned poll_all(unsigned nch)
{
	struct remora_cqe cq[64];
	unsigned got = 0;

	for (unsigned ch = 0; ch < nch; ch++) {
		int n;

		while ((n = remora_poll(chans[ch], cq, 64)) > 0)
			got += (unsigned)n;
		cr_assert_geq(n, 0);
	}
	return got;
}

/*
 * n CAS posted at T0 over nch channels (round robin, so service order = posting order) must
 * complete one every svc: by time t exactly floor((t - T0 - rtt) / svc) of them, checked at
 * steps of a third of svc and one ns before and at every completion.
 */
static void saturated_rate(unsigned k)
{
	const struct rt_cost_profile *p = cx3();
	struct remora_cost_stats st0, st1;
	uint64_t svc = p->svc_ns[REMORA_COST_ATOMIC] * k, done = 0;
	const unsigned nch = 8, n = 8 * 64;

	open_scaled(k, 1, nch);
	cr_assert_eq(remora_transport_cost_stats(c.tp, &st0), 0);
	cr_assert_eq(st0.svc_ns[REMORA_COST_CLASS_ATOMIC], svc, "scaled atomic service time");
	for (unsigned i = 0; i < n; i++) {
		struct remora_wr w = wr_of(REMORA_OP_CAS, 0, i);

		cr_assert_eq(remora_post(chans[i % nch], &w, 1), 0);
	}
	for (uint64_t i = 1; i <= n; i++) {
		uint64_t due = T0 + p->rtt_ns + i * svc;

		for (uint64_t t = due - svc + svc / 3; t < due - 1; t += svc / 3) {
			set_now(t);
			done += poll_all(nch);
			cr_assert_eq(done, i - 1,
				     "at T0%+lld: %llu completed, the rate allows %llu",
				     (long long)(t - T0), (unsigned long long)done,
				     (unsigned long long)(i - 1));
		}
		set_now(due - 1);
		done += poll_all(nch);
		cr_assert_eq(done, i - 1, "verb %llu completed before T0%+lld",
			     (unsigned long long)i, (long long)(due - T0));
		set_now(due);
		done += poll_all(nch);
		cr_assert_eq(done, i, "verb %llu not completed at T0%+lld (%llu done)",
			     (unsigned long long)i, (long long)(due - T0),
			     (unsigned long long)done);
	}
	/* The node was busy without a gap from T0 + rtt/2 to its last service: 100%. */
	set_now(T0 + p->rtt_ns / 2);
	cr_assert_eq(remora_transport_cost_stats(c.tp, &st0), 0);
	set_now(T0 + p->rtt_ns / 2 + n * svc);
	cr_assert_eq(remora_transport_cost_stats(c.tp, &st1), 0);
	cr_assert_eq(st1.mn_busy_ns[0][REMORA_COST_CLASS_ATOMIC] -
			 st0.mn_busy_ns[0][REMORA_COST_CLASS_ATOMIC],
		     st1.now_ns - st0.now_ns, "a saturated node is busy the whole window");
	close_chans();
}

Test(cost_fidelity, saturated_node_serves_exactly_its_rate) { saturated_rate(1); }

Test(cost_fidelity, saturated_scaled_node_serves_exactly_its_rate_divided_by_k)
{
	saturated_rate(40);
}

/* Every class and the message NIC scale by K; the round trip does not. */
Test(cost_fidelity, scaled_rates_are_exact)
{
	static const unsigned ks[] = {1, 3, 40, 1000};
	const struct rt_cost_profile *p = cx3();

	for (unsigned i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
		struct rt_cost_profile s;

		rt_cost_profile_scale(p, ks[i], &s);
		cr_assert_eq(s.rtt_ns, p->rtt_ns);
		for (unsigned cl = 0; cl < REMORA_COST__NCLASS; cl++)
			cr_assert_eq(s.svc_ns[cl], p->svc_ns[cl] * ks[i]);
		cr_assert_eq(s.msg_svc_ns, p->msg_svc_ns * ks[i]);
	}
	/* through the transport: one verb of each class on an idle node */
	open_scaled(40, 1, 3);
	for (unsigned cl = 0; cl < 3; cl++) {
		static const enum remora_op ops[] = {REMORA_OP_READ, REMORA_OP_WRITE,
						     REMORA_OP_CAS};
		struct remora_wr w = wr_of(ops[cl], 0, cl);
		uint64_t due = T0 + p->rtt_ns + 40 * p->svc_ns[cl];
		struct remora_cqe cq;

		cr_assert_eq(remora_post(chans[cl], &w, 1), 0);
		set_now(due - 1);
		cr_assert_eq(remora_poll(chans[cl], &cq, 1), 0, "class %u early", cl);
		set_now(due);
		cr_assert_eq(remora_poll(chans[cl], &cq, 1), 1, "class %u not due at rtt + 40 svc",
			     cl);
		set_now(T0);
	}
	close_chans();
}

/* A bad scale is refused with one line. */
Test(cost_fidelity, bad_scale_is_refused)
{
	static const char *const bad[] = {"0", "-2", "x", "1000001", "4k"};
	struct remora_transport *tp;

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("REMORA_MN_SCALE", bad[i], 1);
		cr_assert_eq(tu_transport_try(-1, "cx3", &tp), -REMORA_ECONFIG, "scale '%s'",
			     bad[i]);
		cr_assert(strstr(remora_last_error(), "mn_scale"), "%s", remora_last_error());
	}
}

/*
 * Reads, writes and CAS to two nodes from several channels at scattered times: afterwards the
 * busy time of each (node, class) is its counted verbs times the scaled service time, and a
 * snapshot taken while verbs are queued counts only those already served.
 */
Test(cost_fidelity, utilization_adds_up)
{
	static const enum remora_op ops[] = {REMORA_OP_READ, REMORA_OP_WRITE, REMORA_OP_CAS,
					     REMORA_OP_FAA, REMORA_OP_MCAS};
	const struct rt_cost_profile *p = cx3();
	struct remora_cost_stats st0, st1, mid;
	struct remora_counters cnt = {0};
	uint64_t seed = 7, t = T0, k = 5;
	unsigned posted = 0;

	open_scaled((unsigned)k, 2, 4);
	cr_assert_eq(remora_transport_cost_stats(c.tp, &st0), 0);
	for (unsigned i = 0; i < 300; i++) {
		unsigned ch = (unsigned)(tu_rand64(&seed) % 4),
			 mn = (unsigned)(tu_rand64(&seed) % 2);
		enum remora_op op = ops[tu_rand64(&seed) % 5];
		struct remora_wr w = wr_of(op, mn, i);
		struct remora_cqe cq[64];

		if (op == REMORA_OP_FAA)
			w = tu_wr_faa(w.raddr, w.rkey, 1, NULL);
		else if (op == REMORA_OP_MCAS)
			w = tu_wr_mcas(w.raddr, w.rkey, 0, 1, 1, 1, NULL);
		t += tu_rand64(&seed) % 3000;
		set_now(t);
		while (remora_post(chans[ch], &w, 1) == -EAGAIN)
			cr_assert_geq(remora_poll(chans[ch], cq, 64), 0);
		posted++;
	}
	/* queued: 10 CAS on node 1 at once, then look at a third of them served */
	{
		uint64_t b1;

		set_now(t + 10000000);
		cr_assert_eq(remora_transport_cost_stats(c.tp, &mid), 0);
		b1 = mid.mn_busy_ns[1][REMORA_COST_CLASS_ATOMIC];
		for (unsigned i = 0; i < 10; i++) {
			struct remora_wr w = wr_of(REMORA_OP_CAS, 1, i);

			while (remora_post(chans[0], &w, 1) == -EAGAIN)
				poll_all(4);
		}
		set_now(t + 10000000 + p->rtt_ns / 2 + 3 * k * p->svc_ns[REMORA_COST_ATOMIC]);
		cr_assert_eq(remora_transport_cost_stats(c.tp, &mid), 0);
		cr_assert_eq(mid.mn_busy_ns[1][REMORA_COST_CLASS_ATOMIC] - b1,
			     3 * k * p->svc_ns[REMORA_COST_ATOMIC],
			     "3 of 10 queued CAS are served, the other 7 not yet");
	}
	set_now(t + 20000000);
	poll_all(4);
	cr_assert_eq(remora_transport_cost_stats(c.tp, &st1), 0);
	for (unsigned ch = 0; ch < 4; ch++) {
		struct remora_counters one;

		remora_chan_counters(chans[ch], &one);
		for (unsigned n = 0; n < 2; n++)
			for (unsigned op = 0; op < REMORA_OP__COUNT; op++)
				cnt.verbs[n][op] += one.verbs[n][op];
	}
	for (unsigned n = 0; n < 2; n++) {
		uint64_t v[3] = {cnt.verbs[n][REMORA_OP_READ], cnt.verbs[n][REMORA_OP_WRITE],
				 cnt.verbs[n][REMORA_OP_CAS] + cnt.verbs[n][REMORA_OP_FAA] +
				     cnt.verbs[n][REMORA_OP_MCAS]};

		for (unsigned cl = 0; cl < 3; cl++)
			cr_assert_eq(
			    st1.mn_busy_ns[n][cl] - st0.mn_busy_ns[n][cl],
			    v[cl] * k * p->svc_ns[cl],
			    "node %u class %u: busy %llu ns for %llu verbs of %llu ns", n, cl,
			    (unsigned long long)(st1.mn_busy_ns[n][cl] - st0.mn_busy_ns[n][cl]),
			    (unsigned long long)v[cl], (unsigned long long)(k * p->svc_ns[cl]));
	}
	cr_assert_eq(posted, 300);
	close_chans();
}

/* ---- messages ------------------------------------------------------------------------- */

/* Compute nodes 0 and 1 on cx3 (scaled by $REMORA_MN_SCALE) under the simulated clock. */
static void open_two_cns(struct remora_transport **a, struct remora_transport **b,
			 struct remora_chan **ca, struct remora_chan **cb)
{
	int rc;

	rt_cost_set_clock(sim_clock);
	set_now(T0);
	rc = tu_transport_try(0, "cx3", a);
	if (rc == -REMORA_ECONFIG)
		tu_skip("backend %s takes no cost profile", tu_backend());
	cr_assert_eq(rc, 0);
	cr_assert_eq(tu_transport_try(1, "cx3", b), 0);
	cr_assert_eq(remora_chan_open(*a, ca), 0);
	cr_assert_eq(remora_chan_open(*b, cb), 0);
}

Test(cost_fidelity, messages_are_charged_at_the_senders_nic)
{
	const struct rt_cost_profile *p = cx3();
	struct remora_transport *a, *b;
	struct remora_chan *ca, *cb;
	struct remora_cost_stats st;
	const unsigned k = 10, m = 16;
	uint64_t svc = p->msg_svc_ns * k;
	uint8_t buf[32] = {1};
	uint16_t src;
	int rc;

	setenv("REMORA_MN_SCALE", "10", 1);
	open_two_cns(&a, &b, &ca, &cb);
	cr_assert_gt(svc, 0, "cx3 charges message sends");
	for (unsigned i = 0; i < m; i++) {
		rc = remora_msg_send(ca, 1, buf, sizeof(buf));
		if (rc == -EOPNOTSUPP)
			tu_skip("backend %s has no messages", tu_backend());
		cr_assert_eq(rc, 0, "send %u = %d", i, rc);
	}
	/* message i (from 1) leaves at T0 + i svc and is receivable rtt/2 later */
	for (unsigned i = 1; i <= m; i++) {
		uint64_t due = T0 + i * svc + p->rtt_ns / 2;

		set_now(due - 1);
		cr_assert_eq(remora_msg_recv(cb, &src, buf, sizeof(buf)), -EAGAIN,
			     "message %u receivable before T0%+lld", i, (long long)(due - T0));
		set_now(due);
		cr_assert_eq(remora_msg_recv(cb, &src, buf, sizeof(buf)), (int)sizeof(buf),
			     "message %u not receivable at T0%+lld", i, (long long)(due - T0));
		cr_assert_eq(src, 0);
	}
	cr_assert_eq(remora_transport_cost_stats(a, &st), 0);
	cr_assert_eq(st.msg_svc_ns, svc);
	cr_assert_eq(st.cn_msg_busy_ns[0], m * svc, "CN 0's NIC busy %llu ns for %u sends",
		     (unsigned long long)st.cn_msg_busy_ns[0], m);
	cr_assert_eq(st.cn_msg_busy_ns[1], 0);
	remora_chan_close(ca);
	remora_chan_close(cb);
	remora_transport_close(a);
	remora_transport_close(b);
}

/*
 * A send the full mailbox refuses gives its NIC slot back: after 50 refusals, the message sent
 * once the receiver took one is due one service time after the last accepted one, and the
 * NIC is charged for accepted sends only. (When refusals kept their slots, each pushed every
 * later message back and a sender retrying at CPU speed kept the mailbox full for good.)
 */
Test(cost_fidelity, refused_sends_give_their_nic_time_back)
{
	const struct rt_cost_profile *p = cx3();
	struct remora_transport *a, *b;
	struct remora_chan *ca, *cb;
	struct remora_cost_stats st;
	uint64_t svc = p->msg_svc_ns, due;
	uint8_t buf[32] = {1};
	unsigned sent = 0;
	uint16_t src;
	int rc;

	unsetenv("REMORA_MN_SCALE");
	open_two_cns(&a, &b, &ca, &cb);
	while ((rc = remora_msg_send(ca, 1, buf, sizeof(buf))) == 0 && sent < 1000000)
		sent++;
	if (rc == -EOPNOTSUPP)
		tu_skip("backend %s has no messages", tu_backend());
	cr_assert_eq(rc, -EAGAIN, "no full mailbox after %u sends: %d", sent, rc);
	for (unsigned i = 0; i < 50; i++)
		cr_assert_eq(remora_msg_send(ca, 1, buf, sizeof(buf)), -EAGAIN);
	set_now(T0 + svc + p->rtt_ns / 2); /* the first message is due */
	cr_assert_eq(remora_msg_recv(cb, &src, buf, sizeof(buf)), (int)sizeof(buf));
	cr_assert_eq(remora_msg_send(ca, 1, buf, sizeof(buf)), 0, "room after a receive");
	due = T0 + (sent + 1) * svc + p->rtt_ns / 2;
	for (unsigned i = 1; i < sent; i++) { /* the ones before it */
		set_now(T0 + (i + 1) * svc + p->rtt_ns / 2);
		cr_assert_eq(remora_msg_recv(cb, &src, buf, sizeof(buf)), (int)sizeof(buf));
	}
	set_now(due - 1);
	cr_assert_eq(remora_msg_recv(cb, &src, buf, sizeof(buf)), -EAGAIN,
		     "the message after the refusals came before T0%+lld", (long long)(due - T0));
	set_now(due);
	cr_assert_eq(remora_msg_recv(cb, &src, buf, sizeof(buf)), (int)sizeof(buf),
		     "the message after the refusals is not due at T0%+lld: pushed back by them",
		     (long long)(due - T0));
	cr_assert_eq(remora_transport_cost_stats(a, &st), 0);
	cr_assert_eq(st.cn_msg_busy_ns[0], (sent + 1) * svc, "CN 0's NIC charged %llu ns for %u "
		     "accepted sends", (unsigned long long)st.cn_msg_busy_ns[0], sent + 1);
	remora_chan_close(ca);
	remora_chan_close(cb);
	remora_transport_close(a);
	remora_transport_close(b);
}

/* ---- the knee ------------------------------------------------------------------------- */

/*
 * ncoord closed-loop coordinators (one channel each) run "transactions": a lock CAS and a
 * READ in one batch, then a WRITE, then the next. Simulated time advances in 20 ns steps.
 * Returns committed transactions per simulated second over the window after the first
 * `warm` transactions up to `warm + total`.
 */
static double closed_loop(unsigned ncoord, unsigned warm, unsigned total)
{
	unsigned stage[NCH] = {0}, pending[NCH] = {0}, done = 0;
	uint64_t t = T0, t_warm = 0;

	for (;;) {
		set_now(t);
		for (unsigned i = 0; i < ncoord; i++) {
			struct remora_cqe cq[4];
			int n = remora_poll(chans[i], cq, 4);

			cr_assert_geq(n, 0);
			pending[i] -= (unsigned)n;
			if (pending[i])
				continue;
			if (stage[i] == 1) { /* lock + read done: write */
				struct remora_wr w = wr_of(REMORA_OP_WRITE, 0, i);

				cr_assert_eq(remora_post(chans[i], &w, 1), 0);
				pending[i] = 1;
				stage[i] = 2;
				continue;
			}
			if (stage[i] == 2 && ++done == warm)
				t_warm = t;
			if (done >= warm + total)
				return (double)total * 1e9 / (double)(t - t_warm);
			{
				struct remora_wr w[2] = {wr_of(REMORA_OP_CAS, 0, 64 + i),
							 wr_of(REMORA_OP_READ, 0, i)};

				cr_assert_eq(remora_post(chans[i], w, 2), 0);
				pending[i] = 2;
				stage[i] = 1;
			}
		}
		t += 20;
	}
}

/* Throughput at 1, 4, 16 and 32 coordinators; cx3 unscaled, one memory node. */
static void knee_sweep(bool atomic_cost_off, double tput[4])
{
	static const unsigned coords[4] = {1, 4, 16, 32};

	open_scaled(1, 1, NCH);
	if (atomic_cost_off)
		cr_assert_eq(tu_mutate(c.tp, "skip_atomic_cost"), 0);
	for (unsigned i = 0; i < 4; i++)
		tput[i] = closed_loop(coords[i], 200, 4000);
	close_chans();
}

/*
 * The knee: below it throughput grows with coordinators (latency-bound); past it, it stays at
 * the node's atomic rate, one CAS per transaction: 1e9 / svc_atomic.
 */
static void assert_knee(const double tput[4])
{
	double cap = 1e9 / (double)cx3()->svc_ns[REMORA_COST_ATOMIC];

	cr_assert_gt(tput[1], 3.0 * tput[0], "4 coordinators: %.0f txn/s, 1: %.0f", tput[1],
		     tput[0]);
	cr_assert_lt(tput[3], 1.001 * cap,
		     "32 coordinators reach %.0f txn/s past the atomic rate %.0f/s", tput[3], cap);
	cr_assert_gt(tput[3], 0.995 * cap, "32 coordinators: %.0f txn/s, the node allows %.0f",
		     tput[3], cap);
	cr_assert_lt(tput[3], 1.01 * tput[2], "throughput still grows past the knee: %.0f -> %.0f",
		     tput[2], tput[3]);
}

Test(cost_fidelity, knee_at_the_memory_nodes_atomic_rate)
{
	double tput[4];

	knee_sweep(false, tput);
	assert_knee(tput);
}

/* Negative control: the same sweep without the atomic service cost has no knee there. */
Test(cost_fidelity, knee_disappears_without_the_atomic_service_cost)
{
	double tput[4], cap = 1e9 / (double)cx3()->svc_ns[REMORA_COST_ATOMIC];

	knee_sweep(true, tput);
	cr_assert_gt(tput[3], 1.5 * cap, "without the atomic cost 32 coordinators reach only %.0f",
		     tput[3]);
	cr_assert_gt(tput[3], 1.5 * tput[2], "%.0f -> %.0f", tput[2], tput[3]);
}
