/* SPDX-License-Identifier: MIT */
/*
 * The NIC cost model, observed through the transport under an injected clock (simulated time,
 * never the wall clock). For every verb the test computes, with its own copy of the formula
 * documented in runtime/transport/cost.h, the time its completion becomes pollable:
 *
 *   start = now + rtt/2; ready = max(start, busy[mn][class]) + svc[class]; busy = ready;
 *   visible = max(ready + rtt - rtt/2, last_visible[chan][mn]); FENCE: now = max(now, last)
 *
 * and asserts that remora_poll() hands the completion out at exactly that time and not one
 * nanosecond earlier. busy is shared by every channel and process of the cluster per memory
 * node and class, independent across memory nodes, and an idle node starts from now.
 * Finally the CAS and WRITE rates measured from simulated arrival times must equal the cx3
 * profile's rates (2.5 Mops atomics, ~35 Mops WRITE per memory node).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "transport/cost.h"
#include "tutil.h"

static struct tu_ctx c;

TestSuite(cost, .fini = tu_fini, .timeout = TU_TIMEOUT);

#define T0 UINT64_C(1000000000)
#define MAXCH 4

static uint64_t sim_now;
static const struct rt_cost_profile *prof;

static uint64_t sim_clock(void)
{
	return __atomic_load_n(&sim_now, __ATOMIC_SEQ_CST);
}

static void set_now(uint64_t t)
{
	__atomic_store_n(&sim_now, t, __ATOMIC_SEQ_CST);
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* ---- the test's own model ------------------------------------------------------------- */

struct model {
	uint64_t busy[2][3];
	uint64_t last[MAXCH][2];
};

static unsigned class_of(enum remora_op op)
{
	return op == REMORA_OP_READ ? 0 : op == REMORA_OP_WRITE ? 1 : 2;
}

static uint64_t model_verb(struct model *m, unsigned ch, unsigned mn, enum remora_op op,
			   bool fence, uint64_t now)
{
	unsigned cl = class_of(op);
	uint64_t ready, vis;

	if (fence)
		now = max_u64(now, m->last[ch][mn]);
	ready = max_u64(now + prof->rtt_ns / 2, m->busy[mn][cl]) + prof->svc_ns[cl];
	if (prof->svc_ns[cl])
		m->busy[mn][cl] = ready;
	vis = max_u64(ready + prof->rtt_ns - prof->rtt_ns / 2, m->last[ch][mn]);
	m->last[ch][mn] = vis;
	return vis;
}

/* ---- posting and checking ------------------------------------------------------------- */

struct expect {
	unsigned ch;
	uint64_t wr_id;
	uint64_t vis;
	bool got;
};

static struct remora_chan *chans[MAXCH];
static struct expect exp_[4096];
static unsigned nexp;
static uint64_t next_id = 1;
static uint64_t scratch[64];

/* Posts one verb on channel ch at the current simulated time and records its expected time. */
static void post(struct model *m, unsigned ch, unsigned mn, enum remora_op op, bool fence)
{
	struct remora_wr wr;
	remora_gaddr a = remora_gaddr_make((uint16_t)mn, 64 * (next_id % 64));
	int rc;

	if (op == REMORA_OP_READ)
		wr = tu_wr_read(a, c.mn[mn].key, &scratch[next_id % 64], 8);
	else if (op == REMORA_OP_WRITE)
		wr = tu_wr_write(a, c.mn[mn].key, &scratch[next_id % 64], 8);
	else
		wr = tu_wr_cas(a, c.mn[mn].key, 0, 1, NULL);
	if (fence)
		wr.flags = REMORA_WR_FENCE;
	wr.wr_id = next_id++;
	rc = remora_post(chans[ch], &wr, 1);
	cr_assert_eq(rc, 0, "post = %d (%s)", rc, remora_strerror(rc));
	cr_assert_lt(nexp, sizeof(exp_) / sizeof(exp_[0]));
	exp_[nexp++] = (struct expect){ .ch = ch, .wr_id = wr.wr_id,
					.vis = model_verb(m, ch, mn, op, fence, sim_clock()) };
}

static int by_vis(const void *a, const void *b)
{
	const struct expect *x = a, *y = b;

	return x->vis < y->vis ? -1 : x->vis > y->vis;
}

/* Polls every channel at the current time; each completion must be expected at <= now. */
static unsigned poll_all(uint64_t want_time)
{
	struct remora_cqe cq[64];
	unsigned got = 0;

	for (unsigned ch = 0; ch < MAXCH; ch++) {
		int n;

		if (!chans[ch])
			continue;
		while ((n = remora_poll(chans[ch], cq, 64)) > 0) {
			for (int i = 0; i < n; i++) {
				unsigned j;

				for (j = 0; j < nexp; j++)
					if (exp_[j].ch == ch && exp_[j].wr_id == cq[i].wr_id)
						break;
				cr_assert_lt(j, nexp, "unexpected completion %llu",
					     (unsigned long long)cq[i].wr_id);
				cr_assert_not(exp_[j].got, "completion %llu twice",
					      (unsigned long long)cq[i].wr_id);
				cr_assert_eq(exp_[j].vis, want_time,
					     "verb %llu on channel %u visible at T0%+lld, the model "
					     "says T0%+lld",
					     (unsigned long long)exp_[j].wr_id, ch,
					     (long long)(want_time - T0), (long long)(exp_[j].vis - T0));
				exp_[j].got = true;
				got++;
			}
		}
		cr_assert_geq(n, 0);
	}
	return got;
}

/* Steps the clock to one ns before and then to each expected time; checks what comes out. */
static void check_times(void)
{
	qsort(exp_, nexp, sizeof(exp_[0]), by_vis);
	for (unsigned i = 0; i < nexp;) {
		uint64_t t = exp_[i].vis;
		unsigned k = i, got;

		while (k < nexp && exp_[k].vis == t)
			k++;
		set_now(t - 1);
		got = poll_all(t - 1); /* nothing is due before t: any completion fails above */
		cr_assert_eq(got, 0);
		set_now(t);
		got = poll_all(t);
		cr_assert_eq(got, k - i, "at T0%+lld: %u completions, the model says %u",
			     (long long)(t - T0), got, k - i);
		i = k;
	}
	for (unsigned ch = 0; ch < MAXCH; ch++)
		if (chans[ch])
			cr_assert_eq(remora_chan_outstanding(chans[ch]), 0);
	nexp = 0;
}

static void open_cost(const char *profile, unsigned nmn, unsigned nch)
{
	struct remora_transport *probe = NULL;
	int rc;

	rt_cost_set_clock(sim_clock);
	set_now(T0);
	rc = tu_transport_try(-1, profile, &probe);
	if (rc == -REMORA_ECONFIG)
		tu_skip("backend %s takes no cost profile: %s", tu_backend(), remora_last_error());
	cr_assert_eq(rc, 0, "open with profile %s = %d (%s)", profile, rc, remora_strerror(rc));
	remora_transport_close(probe);
	tu_use_profile(profile);
	tu_open(&c, 0, nmn, 65536);
	cr_assert_str_eq(remora_transport_profile(c.tp), profile);
	prof = rt_cost_profile_find(profile);
	cr_assert_not_null(prof);
	memset(chans, 0, sizeof(chans));
	chans[0] = c.ch;
	for (unsigned i = 1; i < nch; i++) {
		rc = remora_chan_open(c.tp, &chans[i]);
		cr_assert_eq(rc, 0);
	}
	nexp = 0;
}

static void close_chans(void)
{
	for (unsigned i = 1; i < MAXCH; i++)
		if (chans[i])
			remora_chan_close(chans[i]);
	memset(chans, 0, sizeof(chans));
}

Test(cost, cx3_profile_is_the_documented_data)
{
	const struct rt_cost_profile *p = rt_cost_profile_find("cx3");

	cr_assert_not_null(p);
	cr_assert_eq(p->rtt_ns, 2000, "cx3 RTT %llu ns, documented ~2 us",
		     (unsigned long long)p->rtt_ns);
	cr_assert_not_null(rt_cost_profile_find("none"));
	cr_assert_not_null(rt_cost_profile_find("cxl"));
	cr_assert_not_null(rt_cost_profile_find("cx6"));
	cr_assert_null(rt_cost_profile_find("cx9"));
}

/* Each NIC generation serves atomics faster than the one before (DecLock's cx4 rate sits
 * between LOTUS's cx3 and the cx6 judgement), and every profile is accepted by name. */
Test(cost, nic_generations_in_order)
{
	static const char *const gen[] = { "cx3", "cx4", "cx5", "cx6" };

	for (unsigned i = 0; i + 1 < 4; i++) {
		const struct rt_cost_profile *a = rt_cost_profile_find(gen[i]);
		const struct rt_cost_profile *b = rt_cost_profile_find(gen[i + 1]);

		cr_assert(a && b, "%s or %s missing", gen[i], gen[i + 1]);
		cr_assert_gt(a->svc_ns[2], b->svc_ns[2], "%s atomics not slower than %s", gen[i],
			     gen[i + 1]);
		cr_assert_geq(a->rtt_ns, b->rtt_ns, "%s RTT below %s", gen[i], gen[i + 1]);
	}
	cr_assert_eq(rt_cost_profile_find("cx4")->svc_ns[2], 300, "cx4: DecLock's ~3.3 M atomics/s");
}

Test(cost, one_verb_per_class_latency_plus_service)
{
	struct model m = { 0 };

	open_cost("cx3", 1, 3);
	post(&m, 0, 0, REMORA_OP_READ, false);
	post(&m, 1, 0, REMORA_OP_WRITE, false);
	post(&m, 2, 0, REMORA_OP_CAS, false);
	cr_assert_eq(exp_[0].vis, T0 + prof->rtt_ns + prof->svc_ns[REMORA_COST_READ]);
	cr_assert_eq(exp_[2].vis, T0 + prof->rtt_ns + prof->svc_ns[REMORA_COST_ATOMIC]);
	check_times();
	close_chans();
}

/* busy_until is per (MN, class), shared by channels; completions keep RC order per channel. */
Test(cost, shared_service_rate_rc_order_and_independent_nodes)
{
	struct model m = { 0 };

	open_cost("cx3", 2, 3);
	for (int i = 0; i < 10; i++)
		post(&m, 0, 0, REMORA_OP_CAS, false);
	for (int i = 0; i < 5; i++)
		post(&m, 1, 0, REMORA_OP_CAS, false);
	for (int i = 0; i < 3; i++)
		post(&m, 0, 0, REMORA_OP_READ, false); /* behind ch0's CAS: RC order */
	post(&m, 1, 1, REMORA_OP_CAS, false);           /* MN 1 is idle */
	post(&m, 2, 0, REMORA_OP_READ, false);          /* own channel: not held back */
	set_now(T0 + 100);
	post(&m, 2, 0, REMORA_OP_CAS, false); /* queued behind all 15 atomics of MN 0 */
	/* Spot checks against numbers, so a model bug in the test cannot hide an engine bug. */
	cr_assert_eq(exp_[14].vis, T0 + prof->rtt_ns + 15 * prof->svc_ns[REMORA_COST_ATOMIC]);
	cr_assert_eq(exp_[15].vis, exp_[9].vis, "READ after CAS on one channel keeps RC order");
	cr_assert_eq(exp_[18].vis, T0 + prof->rtt_ns + prof->svc_ns[REMORA_COST_ATOMIC]);
	cr_assert_eq(exp_[20].vis, T0 + prof->rtt_ns + 16 * prof->svc_ns[REMORA_COST_ATOMIC]);
	check_times();
	close_chans();
}

Test(cost, idle_gap_restarts_from_now_and_partial_queueing)
{
	struct model m = { 0 };
	uint64_t t1 = T0 + 10000000;

	open_cost("cx3", 1, 2);
	for (int i = 0; i < 5; i++)
		post(&m, 0, 0, REMORA_OP_CAS, false);
	check_times();
	set_now(t1); /* the node was idle for 10 ms: no leftover queue */
	post(&m, 1, 0, REMORA_OP_CAS, false);
	cr_assert_eq(exp_[0].vis, t1 + prof->rtt_ns + prof->svc_ns[REMORA_COST_ATOMIC]);
	for (int i = 0; i < 9; i++)
		post(&m, 1, 0, REMORA_OP_CAS, false);
	set_now(t1 + 2000); /* the node is still busy with the 10 above */
	post(&m, 0, 0, REMORA_OP_CAS, false);
	cr_assert_eq(exp_[10].vis, t1 + prof->rtt_ns + 11 * prof->svc_ns[REMORA_COST_ATOMIC]);
	check_times();
	close_chans();
}

Test(cost, fence_waits_for_earlier_verbs_of_its_channel)
{
	struct model m = { 0 };

	open_cost("cx3", 1, 2);
	/*
	 * The other channel's READ goes first: service is claimed in posting order (a FIFO
	 * server), so a READ posted after the fenced one would queue behind its future slot.
	 */
	post(&m, 1, 0, REMORA_OP_READ, false);
	post(&m, 0, 0, REMORA_OP_CAS, false);
	post(&m, 0, 0, REMORA_OP_READ, true);
	cr_assert_eq(exp_[0].vis, T0 + prof->rtt_ns + prof->svc_ns[REMORA_COST_READ]);
	cr_assert_eq(exp_[2].vis, T0 + 2 * prof->rtt_ns + prof->svc_ns[REMORA_COST_ATOMIC] +
					  prof->svc_ns[REMORA_COST_READ],
		     "a fenced READ must start when the CAS before it completed");
	check_times();
	/*
	 * CAS, READ (its own time is earlier, its completion is held back behind the CAS),
	 * then a fenced READ: it waits for the CAS too, not only for the READ's own time.
	 */
	set_now(T0 + 100000);
	post(&m, 0, 0, REMORA_OP_CAS, false);
	post(&m, 0, 0, REMORA_OP_READ, false);
	post(&m, 0, 0, REMORA_OP_READ, true);
	cr_assert_eq(exp_[2].vis, T0 + 100000 + 2 * prof->rtt_ns +
					  prof->svc_ns[REMORA_COST_ATOMIC] + prof->svc_ns[REMORA_COST_READ],
		     "fenced READ after CAS + READ");
	check_times();
	close_chans();
}

/* Another process of the cluster keeps the node busy: our CAS queues behind its 20. */
static int busy_child(void *arg, int rd, int wr)
{
	struct remora_transport *tp;
	struct remora_chan *ch;
	struct remora_wr w[20];
	struct remora_cqe cq[20];
	int rc, n;

	(void)arg;
	(void)rd;
	rc = tu_transport_try(1, "cx3", &tp);
	TU_CHILD_CHECK(rc == 0, "open = %d", rc);
	rc = remora_transport_attach(tp, &c.mn[0].desc);
	TU_CHILD_CHECK(rc == 0, "attach = %d", rc);
	rc = remora_chan_open(tp, &ch);
	TU_CHILD_CHECK(rc == 0, "chan = %d", rc);
	for (int i = 0; i < 20; i++)
		w[i] = tu_wr_cas(remora_gaddr_make(0, 8 * (unsigned)i), c.mn[0].key, 0, 1, NULL);
	set_now(T0); /* this process's own simulated clock */
	rc = remora_post(ch, w, 20);
	TU_CHILD_CHECK(rc == 0, "post = %d", rc);
	set_now(T0 + prof->rtt_ns + 20 * prof->svc_ns[REMORA_COST_ATOMIC] - 1);
	TU_CHILD_CHECK(remora_poll(ch, cq, 20) == 19, "child: 19 CAS due before the last");
	set_now(T0 + prof->rtt_ns + 20 * prof->svc_ns[REMORA_COST_ATOMIC]);
	n = remora_poll(ch, cq, 20);
	TU_CHILD_CHECK(n == 1, "child: last CAS not due at its time (%d)", n);
	tu_send(wr, 1);
	remora_chan_close(ch);
	remora_transport_close(tp);
	return 0;
}

Test(cost, busy_until_is_shared_across_processes)
{
	struct model m = { 0 };
	struct tu_proc p;
	uint64_t v;
	int rc;

	open_cost("cx3", 1, 1);
	tu_spawn(&p, busy_child, NULL);
	cr_assert_eq(tu_recv(p.rd, &v), 0, "child did not finish");
	rc = tu_proc_wait(&p);
	cr_assert_eq(rc, 0, "child failed (exit %d, its line is above)", rc);
	m.busy[0][2] = T0 + prof->rtt_ns / 2 + 20 * prof->svc_ns[REMORA_COST_ATOMIC];
	set_now(T0);
	post(&m, 0, 0, REMORA_OP_CAS, false);
	post(&m, 0, 0, REMORA_OP_WRITE, false); /* other class, but RC order on this channel */
	cr_assert_eq(exp_[0].vis, T0 + prof->rtt_ns + 21 * prof->svc_ns[REMORA_COST_ATOMIC],
		     "the other process's atomics did not delay ours");
	check_times();
}

/*
 * Rate of one class at one memory node, measured from the simulated arrival times found by
 * stepping the clock one nanosecond at a time (independent of the test's model).
 */
static double measured_rate(enum remora_op op, unsigned n, uint64_t *first)
{
	struct remora_caps caps;
	struct remora_wr w[64];
	struct remora_cqe cq[64];
	uint64_t t, a0 = 0, alast = 0, limit;
	unsigned posted = 0, got = 0, batch;

	tu_caps(c.tp, &caps);
	if (n > caps.max_outstanding)
		n = caps.max_outstanding;
	batch = caps.max_batch < 64 ? caps.max_batch : 64;
	set_now(T0);
	while (posted < n) {
		unsigned k = n - posted < batch ? n - posted : batch;

		for (unsigned i = 0; i < k; i++) {
			remora_gaddr a = remora_gaddr_make(0, 8 * ((posted + i) % 1024));

			w[i] = op == REMORA_OP_WRITE ? tu_wr_write(a, c.mn[0].key, scratch, 8) :
						       tu_wr_cas(a, c.mn[0].key, 0, 1, NULL);
		}
		cr_assert_eq(remora_post(c.ch, w, k), 0);
		posted += k;
	}
	limit = T0 + 4 * prof->rtt_ns + (uint64_t)n * (prof->svc_ns[class_of(op)] + 1) + 1000;
	for (t = T0; got < n && t < limit; t++) {
		int k;

		set_now(t);
		k = remora_poll(c.ch, cq, 64);
		cr_assert_geq(k, 0);
		cr_assert_leq(k, 1, "%d completions arrived in the same ns", k);
		if (k && !got)
			a0 = t;
		if (k)
			alast = t;
		got += (unsigned)k;
	}
	cr_assert_eq(got, n, "only %u of %u completions by T0%+lld", got, n,
		     (long long)(limit - T0));
	*first = a0;
	return (double)(n - 1) * 1e9 / (double)(alast - a0);
}

Test(cost, cx3_atomic_rate_is_the_profile_rate)
{
	uint64_t first;
	double r, want;

	open_cost("cx3", 1, 1);
	r = measured_rate(REMORA_OP_CAS, 1000, &first);
	want = 1e9 / (double)prof->svc_ns[REMORA_COST_ATOMIC];
	cr_assert_eq(first, T0 + prof->rtt_ns + prof->svc_ns[REMORA_COST_ATOMIC]);
	cr_assert(fabs(r - want) / want < 1e-3, "CAS rate %.0f/s, profile %.0f/s", r, want);
	cr_assert(fabs(r - 2.5e6) / 2.5e6 < 0.01, "cx3 CAS rate %.3f Mops, documented 2.5 Mops",
		  r / 1e6);
}

Test(cost, cx3_write_rate_is_the_profile_rate)
{
	uint64_t first;
	double r, want;

	open_cost("cx3", 1, 1);
	r = measured_rate(REMORA_OP_WRITE, 1000, &first);
	want = 1e9 / (double)prof->svc_ns[REMORA_COST_WRITE];
	cr_assert(fabs(r - want) / want < 1e-3, "WRITE rate %.0f/s, profile %.0f/s", r, want);
	cr_assert(fabs(r - 35e6) / 35e6 < 0.03, "cx3 WRITE rate %.2f Mops, documented ~35 Mops",
		  r / 1e6);
}

/*
 * An exempt channel (loading, the LOTUS directory's polls) gets its completions at once and
 * charges the node nothing: a costed verb posted after ten exempt CASes is timed as if they
 * were not there, and the node's atomic server shows only its service. Exemption switched
 * off again, the channel is costed as before.
 */
Test(cost, exempt_channel_is_neither_delayed_nor_charged)
{
	struct remora_cost_stats st;
	struct model m = { 0 };

	open_cost("cx3", 1, 2);
	remora_chan_cost_exempt(chans[1], true);
	for (int i = 0; i < 10; i++) {
		post(&m, 1, 0, REMORA_OP_CAS, false);
		exp_[nexp - 1].vis = sim_clock();
	}
	m = (struct model){ 0 }; /* the exempt verbs claimed no service */
	post(&m, 0, 0, REMORA_OP_CAS, false);
	cr_assert_eq(exp_[10].vis, T0 + prof->rtt_ns + prof->svc_ns[REMORA_COST_ATOMIC]);
	check_times();
	cr_assert_eq(remora_transport_cost_stats(c.tp, &st), 0);
	cr_assert_eq(st.mn_busy_ns[0][REMORA_COST_ATOMIC], prof->svc_ns[REMORA_COST_ATOMIC],
		     "the node was charged %llu ns for one costed CAS",
		     (unsigned long long)st.mn_busy_ns[0][REMORA_COST_ATOMIC]);
	remora_chan_cost_exempt(chans[1], false);
	post(&m, 1, 0, REMORA_OP_CAS, false);
	cr_assert_gt(exp_[0].vis, sim_clock());
	check_times();
	close_chans();
}

/* Profile none: completions are due at once, whatever the clock says. */
Test(cost, profile_none_ignores_the_clock)
{
	struct remora_cqe cq;
	struct remora_wr wr;
	uint64_t v = 5;

	rt_cost_set_clock(sim_clock);
	set_now(0);
	tu_use_profile("none");
	tu_open(&c, 0, 1, 65536);
	cr_assert_str_eq(remora_transport_profile(c.tp), "none");
	wr = tu_wr_write(remora_gaddr_make(0, 0), c.mn[0].key, &v, 8);
	cr_assert_eq(remora_post(c.ch, &wr, 1), 0);
	cr_assert_eq(remora_poll(c.ch, &cq, 1), 1, "profile none held a completion back");
}

/* The pure helpers agree with the formula on random inputs. */
Test(cost, pure_helpers_follow_the_formula)
{
	uint64_t seed = 99;

	prof = rt_cost_profile_find("cx6");
	cr_assert_not_null(prof);
	for (int i = 0; i < 10000; i++) {
		uint64_t now = tu_rand64(&seed) >> 8, busy = tu_rand64(&seed) >> 8, b2 = busy;
		unsigned cl = (unsigned)(tu_rand64(&seed) % 3);
		uint64_t want = max_u64(now + prof->rtt_ns / 2, busy) + prof->svc_ns[cl];
		uint64_t got = rt_cost_ready(prof, (enum rt_cost_class)cl, now, busy);

		cr_assert_eq(got, want);
		cr_assert_eq(rt_cost_visible(prof, got), got + prof->rtt_ns - prof->rtt_ns / 2);
		cr_assert_eq(rt_cost_claim(prof, (enum rt_cost_class)cl, now, &b2), want);
		cr_assert_eq(b2, want, "claim must leave busy = ready");
	}
}
