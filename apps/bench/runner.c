// SPDX-License-Identifier: MIT
#include "runner.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <remora/route.h>
#include <remora/sched.h>

enum wlr_phase { PH_WARMUP, PH_MEASURE, PH_STOP };

struct wlr;

struct wlr_thread {
	struct wlr *r;
	unsigned index;
	pthread_t tid;
	bool started;
	struct remora_worker *w;
	struct wl_coord *coords;
	struct wl_counts warm, meas;
	struct bu_hist *hist;
	struct remora_counters c_start, c_end;
	struct cs_snap cpu_start, cpu_end; /* the thread's CPU time and samples by layer */
	int seen_phase;
	bool have_start, have_end;
	unsigned route_waiting; /* coordinators waiting for a handed-over transaction */
};

struct wlr {
	const struct wlr_cfg *cfg;
	struct wlr_thread *t;
	int phase;    /* enum wlr_phase, atomic */
	int stopping; /* phase == PH_STOP, atomic; what wl_run_txn watches */
	unsigned ready;
	unsigned finished; /* threads whose coordinators all returned, atomic */
	int error;    /* first failure, atomic */
	uint32_t *tl; /* commits per ms (cfg->timeline), atomic adds */
	uint32_t tl_len;
	uint64_t tl_t0_ms;
	pthread_mutex_t err_lock;
	char errmsg[256];
};

static void fail(struct wlr *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void fail(struct wlr *r, int code, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&r->err_lock);
	if (!r->error) {
		va_start(ap, fmt);
		vsnprintf(r->errmsg, sizeof(r->errmsg), fmt, ap);
		va_end(ap);
		__atomic_store_n(&r->error, code, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&r->err_lock);
	__atomic_store_n(&r->stopping, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&r->phase, PH_STOP, __ATOMIC_RELEASE);
}

/*
 * The coordinators of a thread take turns, so the first one to see a phase change snapshots
 * the thread's channel counters for all of them.
 */
static int phase_sync(struct wlr_thread *t)
{
	int ph = __atomic_load_n(&t->r->phase, __ATOMIC_ACQUIRE);

	if (ph == t->seen_phase)
		return ph;
	if (ph >= PH_MEASURE && !t->have_start) {
		remora_chan_counters(remora_worker_chan(t->w), &t->c_start);
		cs_snap(&t->cpu_start);
		t->have_start = true;
	}
	if (ph == PH_STOP && !t->have_end) {
		remora_chan_counters(remora_worker_chan(t->w), &t->c_end);
		cs_snap(&t->cpu_end);
		t->have_end = true;
	}
	t->seen_phase = ph;
	return ph;
}

static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A commit, in the timeline of its millisecond (wall clock: compute nodes' lines align). */
static void tl_count(struct wlr *r)
{
	uint64_t i = wall_ms() - r->tl_t0_ms;

	if (i < r->tl_len)
		__atomic_add_fetch(&r->tl[i], 1, __ATOMIC_RELAXED);
}

struct coord_arg {
	struct wlr_thread *t;
	unsigned i;
};

/* ---- routing (cfg->route): LOTUS's two-level load balancing ---------------------------- */

/* A handed-over transaction whose answer takes longer than this is given up (counted lost). */
#define ROUTE_WAIT_NS UINT64_C(2000000000)
/* run_routed's answer when the transaction should run here after all */
#define ROUTE_LOCAL 0x524c /* "RL" */

static struct wl_counts *phase_counts(struct wlr_thread *t, int ph)
{
	return ph == PH_MEASURE ? &t->meas : &t->warm;
}

/* The home node of in when it is another one (read-write, routing on): true with *home. */
static bool route_away(struct wlr_thread *t, const struct wl_input *in, uint16_t *home)
{
	const struct wlr_cfg *cfg = t->r->cfg;
	const struct wl_desc *d = cfg->wl->desc;
	uint64_t key = in->key[0];

	if (!cfg->route || (d->tx_flags && (d->tx_flags(cfg->wl, in) & REMORA_TX_READ_ONLY)))
		return false;
	if (d->home_key ? !d->home_key(cfg->wl, in, &key) : in->nkeys == 0)
		return false;
	return remora_route_home(cfg->db, 0, key, home) == 0 && *home != cfg->cn;
}

/*
 * Runs one transaction another node handed to this worker, if one waits; whether one ran. It
 * is this coordinator's transaction from here on: counted, and its commit hook run, here.
 */
static bool serve_routed(struct wlr_thread *t, struct wl_coord *c, int ph)
{
	struct wlr *r = t->r;
	struct remora_route_req q;
	struct wl_input in;
	int rc;

	if (!r->cfg->route || remora_route_take(t->w, &q))
		return false;
	memset(&in, 0, sizeof(in));
	memcpy(&in, q.data, q.len < sizeof(in) ? q.len : sizeof(in));
	rc = wl_run_txn(r->cfg->wl, c, &in, phase_counts(t, ph), &r->stopping);
	if (rc == 0 || rc == WL_USER_ABORT)
		phase_counts(t, ph)->served++;
	else if (rc != -ECANCELED) /* this node failed: it says so, not the sender */
		fail(r, rc, "cn %u thread %u coordinator %u, running a transaction of cn %u: %s "
		     "(%s)", c->cn, c->thread, c->coro, q.cn, remora_strerror(rc),
		     remora_worker_errmsg(t->w));
	remora_route_answer(t->w, &q, rc);
	return true;
}

/*
 * Hands in to its home node and waits for the answer, serving what others handed here in the
 * meantime (so no node's coordinators all wait). 0 (committed), WL_USER_ABORT, ROUTE_LOCAL
 * (not handed over: run it here), WL_RETRY (no answer in time, the home stopped first or
 * failed: counted lost, not retried, since it may have run), -ECANCELED (stop).
 */
static int run_routed(struct wlr_thread *t, struct wl_coord *c, const struct wl_input *in,
		      uint16_t home, int ph)
{
	struct wlr *r = t->r;
	uint64_t t0 = bu_now_ns();
	uint32_t ticket, idle = 0;
	int rc, status = 0;

	if (remora_route_send(t->w, home, in, sizeof(*in), &ticket))
		return ROUTE_LOCAL;
	phase_counts(t, ph)->routed++;
	t->route_waiting++;
	while ((rc = remora_route_done(t->w, ticket, &status)) == -EAGAIN) {
		if (__atomic_load_n(&r->stopping, __ATOMIC_RELAXED) ||
		    bu_now_ns() - t0 > ROUTE_WAIT_NS)
			break;
		if (serve_routed(t, c, ph)) {
			idle = 0;
			continue;
		}
		/*
		 * Nothing to do here: let the other coordinators run, and when every one of them
		 * waits too, the other processes (the home node may need this core to answer).
		 */
		if (t->route_waiting == r->cfg->coros || ++idle % 64 == 0)
			sched_yield();
		remora_yield();
	}
	t->route_waiting--;
	if (__atomic_load_n(&r->stopping, __ATOMIC_RELAXED) && rc)
		return -ECANCELED;
	/* a failure at the home node is that node's to report (serve_routed) */
	if (rc == 0 && (status == 0 || status == WL_USER_ABORT))
		return status;
	phase_counts(t, ph)->route_lost++;
	return WL_RETRY;
}

/* One transaction of this coordinator's, here or at its home node. */
static int run_one(struct wlr_thread *t, struct wl_coord *c, const struct wl_input *in, int ph)
{
	struct wlr *r = t->r;
	uint16_t home;
	int rc = ROUTE_LOCAL;

	if (route_away(t, in, &home))
		rc = run_routed(t, c, in, home, ph);
	if (rc == ROUTE_LOCAL)
		rc = wl_run_txn(r->cfg->wl, c, in, phase_counts(t, ph), &r->stopping);
	return rc;
}

static void coord_main(void *p)
{
	struct coord_arg *a = p;
	struct wlr_thread *t = a->t;
	struct wlr *r = t->r;
	const struct wl *wl = r->cfg->wl;
	struct wl_coord *c = &t->coords[a->i];
	struct wl_input in;
	uint64_t done = 0;

	for (;;) {
		int ph = phase_sync(t);
		uint64_t t0;
		int rc;

		if (ph == PH_STOP)
			break;
		if (r->cfg->txns) {
			if (done == r->cfg->txns)
				break;
			/* a counted run has no warm-up: wait for the common start */
			if (ph == PH_WARMUP) {
				remora_yield();
				continue;
			}
		}
		while (serve_routed(t, c, ph))
			;
		wl->desc->gen(wl, c, &in);
		t0 = bu_ticks_fast(); /* a latency of microseconds: no serializing read needed */
		rc = run_one(t, c, &in, ph);
		if (rc == WL_RETRY)
			continue; /* handed over and lost: not done, not counted */
		if (rc == -ECANCELED)
			break;
		if (rc < 0) {
			/* A verb deadline: the transport's line names the node and the verb. */
			bool late = rc == -ETIMEDOUT && r->cfg->tp;

			fail(r, rc, "cn %u thread %u coordinator %u: %s (%s)%s%s", c->cn, c->thread,
			     c->coro, remora_strerror(rc), remora_worker_errmsg(t->w),
			     late ? "; " : "", late ? remora_transport_errmsg(r->cfg->tp) : "");
			break;
		}
		if (rc == 0 && ph == PH_MEASURE)
			bu_hist_record(t->hist, bu_ticks_to_ns(bu_ticks_fast() - t0));
		if (rc == 0 && r->tl)
			tl_count(r);
		done++;
	}
}

/* Creates the worker and its coordinators; *ninit counts those that need wl_coord_fini. */
static int thread_setup(struct wlr_thread *t, struct coord_arg *args, unsigned *ninit)
{
	const struct wlr_cfg *cfg = t->r->cfg;
	struct remora_sched *s;
	int rc;

	rc = remora_worker_create(cfg->db, t->index, &t->w);
	if (rc) {
		fail(t->r, rc, "worker %u: %s", t->index, remora_db_errmsg(cfg->db));
		return rc;
	}
	s = remora_worker_sched(t->w);
	remora_sched_set_prefetch(s, cfg->prefetch);
	remora_sched_set_inline_yield(s, cfg->inline_yield);
	for (unsigned i = 0; i < cfg->coros; i++) {
		struct wl_coord *c = &t->coords[i];
		uint32_t g = cfg->coord_base + t->index * cfg->coros + i;

		wl_coord_prepare(cfg->wl, c, t->w, (uint16_t)cfg->cn, (uint16_t)t->index,
				 (uint16_t)i, g);
		rc = wl_coord_init(cfg->wl, c);
		if (rc) {
			fail(t->r, rc, "coordinator %u: %s", i, remora_strerror(rc));
			return rc;
		}
		(*ninit)++;
		args[i] = (struct coord_arg){ .t = t, .i = i };
		rc = remora_sched_spawn(s, coord_main, &args[i]);
		if (rc) {
			fail(t->r, rc, "coroutine %u: %s", i, remora_strerror(rc));
			return rc;
		}
	}
	return 0;
}

static void *thread_main(void *p)
{
	struct wlr_thread *t = p;
	const struct wlr_cfg *cfg = t->r->cfg;
	struct coord_arg *args = calloc(cfg->coros, sizeof(*args));
	unsigned ninit = 0;

	if (args)
		thread_setup(t, args, &ninit);
	else
		fail(t->r, -ENOMEM, "out of memory");
	__atomic_add_fetch(&t->r->ready, 1, __ATOMIC_ACQ_REL);
	if (t->w) {
		/* the CPU split's samples; without per-thread CPU timers the split stays empty */
		cs_thread_start();
		/* coroutines already spawned run and see the stop at once after a failure */
		remora_sched_run(remora_worker_sched(t->w));
		phase_sync(t);
		if (!t->have_end) {
			remora_chan_counters(remora_worker_chan(t->w), &t->c_end);
			cs_snap(&t->cpu_end);
		}
		cs_thread_stop();
		for (unsigned i = 0; i < ninit; i++)
			wl_coord_fini(cfg->wl, &t->coords[i]);
		remora_worker_destroy(t->w);
		t->w = NULL;
	}
	free(args);
	__atomic_add_fetch(&t->r->finished, 1, __ATOMIC_ACQ_REL);
	return NULL;
}

int wlr_result_init(struct wlr_result *res)
{
	memset(res, 0, sizeof(*res));
	res->hist = bu_hist_new();
	return res->hist ? 0 : -ENOMEM;
}

void wlr_result_free(struct wlr_result *res)
{
	free(res->hist);
	res->hist = NULL;
	free(res->tl);
	res->tl = NULL;
}

static void counters_add(struct remora_counters *dst, const struct remora_counters *src)
{
	for (unsigned n = 0; n < REMORA_MAX_MN; n++) {
		for (unsigned op = 0; op < REMORA_OP__COUNT; op++) {
			dst->verbs[n][op] += src->verbs[n][op];
			dst->bytes[n][op] += src->bytes[n][op];
			dst->emulated[n][op] += src->emulated[n][op];
		}
		dst->persists[n] += src->persists[n];
	}
	dst->doorbells += src->doorbells;
	dst->msgs_sent += src->msgs_sent;
	dst->msgs_recv += src->msgs_recv;
}

void wlr_result_merge(const struct wl *wl, struct wlr_result *dst, const struct wlr_result *src)
{
	wl_counts_add(&dst->cnt, &src->cnt);
	wl_counts_add(&dst->cnt_all, &src->cnt_all);
	for (unsigned i = 0; i < WL_MAX_ACC; i++) {
		if (wl->desc->acc_max[i])
			dst->acc[i] = src->acc[i] > dst->acc[i] ? src->acc[i] : dst->acc[i];
		else
			dst->acc[i] += src->acc[i];
	}
	if (dst->hist && src->hist)
		bu_hist_merge(dst->hist, src->hist);
	counters_add(&dst->verbs, &src->verbs);
	ut_merge(&dst->util, &src->util);
	cs_merge(&dst->cpu, &src->cpu);
	if (src->seconds > dst->seconds)
		dst->seconds = src->seconds;
	if (!dst->error && src->error) {
		dst->error = src->error;
		memcpy(dst->errmsg, src->errmsg, sizeof(dst->errmsg));
	}
}

/* Sleeps up to `seconds` in small steps; returns early on a stop request or a failure. */
static void sleep_phase(struct wlr *r, double seconds)
{
	uint64_t end = bu_now_ns() + (uint64_t)(seconds * 1e9);

	while (bu_now_ns() < end) {
		struct timespec ts = { 0, 5 * 1000 * 1000 };

		if (__atomic_load_n(&r->error, __ATOMIC_ACQUIRE))
			return;
		if (r->cfg->stop && __atomic_load_n(r->cfg->stop, __ATOMIC_RELAXED))
			return;
		nanosleep(&ts, NULL);
	}
}

/* A counted run (--txns): waits until every started thread is done, or a stop request. */
static void wait_threads(struct wlr *r, unsigned started)
{
	while (__atomic_load_n(&r->finished, __ATOMIC_ACQUIRE) < started) {
		struct timespec ts = { 0, 1000 * 1000 };

		if (r->cfg->stop && __atomic_load_n(r->cfg->stop, __ATOMIC_RELAXED))
			return;
		nanosleep(&ts, NULL);
	}
}

static void collect(struct wlr *r, struct wlr_result *res)
{
	const struct wlr_cfg *cfg = r->cfg;

	for (unsigned i = 0; i < cfg->threads; i++) {
		struct wlr_thread *t = &r->t[i];
		struct remora_counters d;

		wl_counts_add(&res->cnt, &t->meas);
		wl_counts_add(&res->cnt_all, &t->meas);
		wl_counts_add(&res->cnt_all, &t->warm);
		bu_hist_merge(res->hist, t->hist);
		if (t->have_start) {
			remora_counters_diff(&t->c_end, &t->c_start, &d);
			counters_add(&res->verbs, &d);
			cs_add(&res->cpu, &t->cpu_start, &t->cpu_end);
		}
		for (unsigned c = 0; c < cfg->coros; c++)
			for (unsigned a = 0; a < WL_MAX_ACC; a++) {
				int64_t v = t->coords[c].acc[a];

				if (cfg->wl->desc->acc_max[a])
					res->acc[a] = v > res->acc[a] ? v : res->acc[a];
				else
					res->acc[a] += v;
			}
	}
}

static int alloc_threads(struct wlr *r)
{
	const struct wlr_cfg *cfg = r->cfg;

	r->t = calloc(cfg->threads, sizeof(*r->t));
	if (!r->t)
		return -ENOMEM;
	for (unsigned i = 0; i < cfg->threads; i++) {
		struct wlr_thread *t = &r->t[i];

		t->r = r;
		t->index = i;
		t->coords = calloc(cfg->coros, sizeof(*t->coords));
		t->hist = bu_hist_new();
		if (!t->coords || !t->hist)
			return -ENOMEM;
	}
	return 0;
}

static void free_threads(struct wlr *r)
{
	for (unsigned i = 0; r->t && i < r->cfg->threads; i++) {
		free(r->t[i].coords);
		free(r->t[i].hist);
	}
	free(r->t);
}

int wlr_run(const struct wlr_cfg *cfg, struct wlr_result *res)
{
	struct wlr r = { .cfg = cfg, .phase = PH_WARMUP };
	struct ut_snap u0, u1;
	uint64_t t0 = 0, t1 = 0;
	unsigned started = 0;
	int rc;

	pthread_mutex_init(&r.err_lock, NULL);
	if (cfg->route && cfg->txns) {
		/* a handed-over transaction may be lost: a count of them could never complete */
		fail(&r, -EINVAL, "route needs a run for a duration, not --txns");
		goto free_all;
	}
	bu_ticks_calibrate();
	if (cfg->timeline) {
		double s = cfg->warmup_s + cfg->duration_s + 2.0;

		r.tl_len = s * 1000 < WLR_TL_MAX_MS ? (uint32_t)(s * 1000) : WLR_TL_MAX_MS;
		r.tl = calloc(r.tl_len, sizeof(*r.tl));
		r.tl_t0_ms = wall_ms();
		if (!r.tl)
			r.tl_len = 0;
	}
	rc = alloc_threads(&r);
	if (rc) {
		fail(&r, rc, "out of memory");
		goto free_all;
	}
	for (unsigned i = 0; i < cfg->threads; i++) {
		if (pthread_create(&r.t[i].tid, NULL, thread_main, &r.t[i])) {
			fail(&r, -EAGAIN, "cannot start worker thread %u", i);
			break;
		}
		r.t[i].started = true;
		started++;
	}
	/* the warm-up starts once every worker and coordinator exists */
	while (__atomic_load_n(&r.ready, __ATOMIC_ACQUIRE) < cfg->threads &&
	       !__atomic_load_n(&r.error, __ATOMIC_ACQUIRE)) {
		struct timespec ts = { 0, 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
	if (!cfg->txns)
		sleep_phase(&r, cfg->warmup_s);
	if (!__atomic_load_n(&r.error, __ATOMIC_ACQUIRE)) {
		ut_snap(cfg->tp, &u0);
		t0 = bu_now_ns();
		__atomic_store_n(&r.phase, PH_MEASURE, __ATOMIC_RELEASE);
		if (cfg->txns)
			wait_threads(&r, started);
		else
			sleep_phase(&r, cfg->duration_s);
		t1 = bu_now_ns();
		ut_snap(cfg->tp, &u1);
		ut_window(&u0, &u1, &res->util);
	}
	__atomic_store_n(&r.stopping, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&r.phase, PH_STOP, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < cfg->threads; i++)
		if (r.t[i].started)
			pthread_join(r.t[i].tid, NULL);
	collect(&r, res);
	res->seconds = t1 > t0 ? (double)(t1 - t0) / 1e9 : 0.0;
free_all:
	free_threads(&r);
	res->tl = r.tl;
	res->tl_len = r.tl_len;
	res->tl_t0_ms = r.tl_t0_ms;
	res->error = r.error;
	if (r.error)
		snprintf(res->errmsg, sizeof(res->errmsg), "%s", r.errmsg);
	pthread_mutex_destroy(&r.err_lock);
	return r.error;
}
