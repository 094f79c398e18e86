/* SPDX-License-Identifier: MIT */
/* `remora lockbench`'s engine and its linearizability checker (lockbench.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <remora/error.h>
#include <remora/rpc.h>
#include <remora/sched.h>

#include "benchutil.h"
#include "lockbench.h"
#include "rng.h"
#include "zipf.h"

void lb_defaults(struct lb_opts *o)
{
	*o = (struct lb_opts){ .lock = "declock", .cns = 2, .coros = 8, .locks = 100000,
			       .theta = 0.99, .read_pct = 50, .cs = 1, .duration = 2.0,
			       .cap_log2 = 3, .cap_set = true, .seed = 1, .kill_cn = -1 };
}

/* ---- the checker ------------------------------------------------------------------------- */

struct lb_pend {
	uint32_t lock;
	uint8_t mode, cn;
	uint64_t ticket;
};

struct lb_held {
	uint32_t lock;
	uint8_t mode;
	bool on;
};

struct lb_check {
	pthread_mutex_t mu;
	uint32_t *readers;
	uint8_t *writer;
	struct lb_pend *pend;
	size_t npend, cap;
	struct lb_held *held; /* per (compute node, coordinator) */
	unsigned coros;
	bool dead[REMORA_MAX_CN];
	uint64_t violations, excl;
	char msg[200];
};

static void violation(struct lb_check *k, const char *what, uint32_t lock, uint64_t ticket)
{
	if (!k->violations++)
		snprintf(k->msg, sizeof(k->msg), "lock %u ticket %u (epoch %u): %s", lock,
			 (unsigned)ticket, (unsigned)(ticket >> 32) & 0xff, what);
}

static void pend_drop(struct lb_check *k, uint32_t lock, uint64_t ticket)
{
	for (size_t i = 0; i < k->npend; i++)
		if (k->pend[i].lock == lock && k->pend[i].ticket == ticket) {
			k->pend[i] = k->pend[--k->npend];
			return;
		}
}

static void pend_add(struct lb_check *k, unsigned cn, uint32_t lock, uint64_t ticket,
		     enum lock_mode m)
{
	if (k->npend == k->cap) {
		size_t cap = k->cap ? k->cap * 2 : 256;
		struct lb_pend *p = realloc(k->pend, cap * sizeof(*p));

		if (!p)
			return;
		k->pend = p;
		k->cap = cap;
	}
	k->pend[k->npend++] = (struct lb_pend){ lock, (uint8_t)m, (uint8_t)cn, ticket };
}

/* A grant must not pass an earlier place of the same epoch when either of the two is X. */
static void order_check(struct lb_check *k, uint32_t lock, uint64_t ticket, enum lock_mode m)
{
	for (size_t i = 0; i < k->npend; i++) {
		const struct lb_pend *p = &k->pend[i];

		if (p->lock == lock && p->ticket >> 32 == ticket >> 32 &&
		    (uint32_t)p->ticket < (uint32_t)ticket && (p->mode == LOCK_X || m == LOCK_X)) {
			violation(k, "granted out of FAA order (an earlier place waits)", lock, ticket);
			return;
		}
	}
}

/* A holder stops holding (its release, or its node's death). */
static void unhold(struct lb_check *k, uint32_t lock, enum lock_mode m)
{
	if (m == LOCK_X)
		k->writer[lock] = 0;
	else if (k->readers[lock])
		k->readers[lock]--;
}

struct lb_obs {
	struct lb_check *k;
	unsigned cn;
};

static void observe(void *arg, unsigned coord, uint32_t lock, uint64_t ticket, enum lock_mode m,
		    enum lock_event ev)
{
	struct lb_obs *obs = arg;
	struct lb_check *k = obs->k;
	struct lb_held *held = &k->held[obs->cn * k->coros + coord];
	bool ordered = !(ticket & LOCK_TICKET_UNORDERED);

	pthread_mutex_lock(&k->mu);
	if (k->dead[obs->cn]) {
		pthread_mutex_unlock(&k->mu);
		return;
	}
	if (ev == LOCK_EV_ENQ && ordered) {
		pend_add(k, obs->cn, lock, ticket, m);
	} else if (ev == LOCK_EV_ABORT) {
		pend_drop(k, lock, ticket);
	} else if (ev == LOCK_EV_GRANT) {
		if (k->writer[lock] || (m == LOCK_X && k->readers[lock])) {
			char what[120];

			snprintf(what, sizeof(what), "%s granted to cn %u coord %u while %s",
				 m == LOCK_X ? "X" : "S", obs->cn, coord,
				 k->writer[lock] ? "X held" : "S held");
			k->excl++;
			violation(k, what, lock, ticket);
		}
		if (ordered) {
			order_check(k, lock, ticket, m);
			pend_drop(k, lock, ticket);
		}
		if (m == LOCK_X)
			k->writer[lock] = 1;
		else
			k->readers[lock]++;
		*held = (struct lb_held){ lock, (uint8_t)m, true };
	} else if (ev == LOCK_EV_RELEASE) {
		unhold(k, lock, m);
		held->on = false;
	}
	pthread_mutex_unlock(&k->mu);
}

/* A READ that rode an S acquisition and counted as read at the grant saw an older value. */
static void check_stale_ride(struct lb_check *k, uint32_t lock, uint64_t seen, uint64_t now)
{
	char what[120];

	snprintf(what, sizeof(what), "a READ that rode the acquisition saw %#llx, the object "
		 "holds %#llx under the same S hold", (unsigned long long)seen,
		 (unsigned long long)now);
	pthread_mutex_lock(&k->mu);
	violation(k, what, lock, 0);
	pthread_mutex_unlock(&k->mu);
}

/* A compute node died: its holds and places are void from now on. */
static void check_kill(struct lb_check *k, unsigned cn)
{
	pthread_mutex_lock(&k->mu);
	k->dead[cn] = true;
	for (unsigned i = 0; i < k->coros; i++) {
		struct lb_held *h = &k->held[cn * k->coros + i];

		if (h->on)
			unhold(k, h->lock, (enum lock_mode)h->mode);
		h->on = false;
	}
	for (size_t i = 0; i < k->npend;)
		if (k->pend[i].cn == cn)
			k->pend[i] = k->pend[--k->npend];
		else
			i++;
	pthread_mutex_unlock(&k->mu);
}

/* ---- the cluster ------------------------------------------------------------------------- */

struct lb_run;

struct lb_coro {
	struct lb_node *n;
	unsigned idx;
	struct lock_cli *cli;
	struct wl_rng rng;
	struct bu_hist *h;
	uint64_t ops, errors, cs_ops, ops_after_kill, rides, rides_valid;
	uint64_t ops_before_kill, ops_late; /* released before the kill; in the late window */
	int first_err;
};

struct lb_node {
	struct lb_run *run;
	unsigned cn;
	struct remora_transport *tp;
	struct remora_chan *ch;
	struct remora_rpc *rpc;
	struct remora_rpc_ep *ep;
	struct lock_svc *svc;
	struct remora_sched *sched;
	struct lb_coro *co;
	struct lb_obs obs;
	int dying, dead;
	uint64_t verbs0, verbs;
	int rc;
	pthread_t tid;
};

struct lb_run {
	const struct lb_opts *o;
	const char *type;
	struct wl_zipf z;
	remora_gaddr base, objs;
	uint32_t rkey;
	size_t stride;
	pthread_barrier_t bar;
	int stop, done;
	uint64_t start_ns, kill_ns, stop_ns;
	uint64_t late_ns; /* the late window runs from here to the stop: after the recovery */
	struct lb_check *check;
	struct lb_node *nodes;
};

static uint64_t chan_verbs(struct remora_chan *ch)
{
	struct remora_counters k;
	uint64_t n = 0;

	remora_chan_counters(ch, &k);
	for (unsigned op = 0; op < REMORA_OP__COUNT; op++)
		n += k.verbs[0][op];
	return n;
}

static struct remora_wr obj_wr(const struct lb_run *run, uint32_t lock, enum lock_mode m,
			       uint64_t *v)
{
	return (struct remora_wr){ .raddr = run->objs + 8ull * lock, .rkey = run->rkey, .len = 8,
				   .op = m == LOCK_X ? REMORA_OP_WRITE : REMORA_OP_READ,
				   .local = v };
}

/*
 * The critical section: cs verbs on the lock's 8 B object (READ for S, WRITE for X). A writer
 * writes a value no other write has (its client and count), so that a READ of an S holder
 * that rode on the acquisition and counts as read at the grant (ride, seen) can be compared,
 * with check, with one READ after the grant: a writer that held the lock in between shows.
 */
static int crit(struct lb_coro *co, uint32_t lock, enum lock_mode m, bool rode, uint64_t seen)
{
	struct lb_run *run = co->n->run;
	uint64_t v = (uint64_t)(co->n->cn * run->o->coros + co->idx + 1) << 40 | co->ops;
	struct remora_wr w = obj_wr(run, lock, m, &v);
	unsigned i = 0;
	int rc = 0;

	if (rode && run->o->cs) {
		i = 1; /* the ride was the first READ */
		if (run->check) {
			rc = remora_co_exec(co->n->ch, &w, 1);
			co->cs_ops++;
			if (!rc && v != seen)
				check_stale_ride(run->check, lock, seen, v);
		}
	}
	for (; i < run->o->cs && !rc; i++, co->cs_ops++)
		rc = remora_co_exec(co->n->ch, &w, 1);
	return rc;
}

/* Takes lock in mode m; an S acquisition of a ride run carries the first READ (*rode, *seen). */
static int acquire(struct lb_coro *co, uint32_t lock, enum lock_mode m, struct lock_hold *h,
		   bool *rode, uint64_t *seen)
{
	struct lb_run *run = co->n->run;
	struct remora_wr w = obj_wr(run, lock, m, seen);
	enum lock_ride ride = LOCK_RIDE_NONE;
	int rc;

	*rode = false;
	if (!run->o->ride || m != LOCK_S || !run->o->cs)
		return lock_acquire(co->cli, lock, m, h);
	rc = lock_acquire_riding(co->cli, lock, m, h, &w, 1, &ride);
	co->rides += ride != LOCK_RIDE_NONE;
	co->cs_ops += ride != LOCK_RIDE_NONE; /* a verb of the channel, not of the service */
	co->rides_valid += ride == LOCK_RIDE_VALID;
	*rode = ride == LOCK_RIDE_VALID;
	return rc;
}

/*
 * This node dies, from one of its coroutines: the checker forgets its holds, every other node
 * marks it down (the control plane's verdict), and the whole thread freezes (no coroutine
 * runs, nothing answers its messages) until every live node is done; then its lock service
 * shuts down so that its coroutines end without touching the memory node.
 */
static void die(struct lb_node *n)
{
	struct lb_run *run = n->run;
	uint64_t kill_ns, end_ns;

	if (run->check)
		check_kill(run->check, n->cn);
	for (unsigned i = 0; i < run->o->cns; i++)
		if (i != n->cn) {
			remora_rpc_set_down(run->nodes[i].rpc, (uint16_t)n->cn, true);
			lock_svc_node_down(run->nodes[i].svc, n->cn, true);
		}
	kill_ns = bu_now_ns();
	end_ns = run->start_ns + (uint64_t)(run->o->duration * 1e9);
	__atomic_store_n(&run->late_ns, end_ns > kill_ns ? kill_ns + (end_ns - kill_ns) / 2 : 0,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&run->kill_ns, kill_ns, __ATOMIC_RELEASE);
	while (__atomic_load_n(&run->done, __ATOMIC_ACQUIRE) < (int)run->o->cns - 1)
		usleep(1000);
	lock_svc_shutdown(n->svc);
	n->dead = 1;
}

static bool dying(struct lb_node *n)
{
	if (n->dead)
		return true;
	if (!__atomic_load_n(&n->dying, __ATOMIC_ACQUIRE))
		return false;
	die(n);
	return true;
}

/* An acquisition released at time t: before the kill, or in the late window after it. */
static void count_window(struct lb_coro *co, uint64_t t)
{
	struct lb_run *run = co->n->run;
	uint64_t kill = __atomic_load_n(&run->kill_ns, __ATOMIC_ACQUIRE);
	uint64_t late = __atomic_load_n(&run->late_ns, __ATOMIC_RELAXED);
	uint64_t stop = __atomic_load_n(&run->stop_ns, __ATOMIC_RELAXED);

	co->ops_before_kill += !kill;
	co->ops_late += kill && late && t >= late && (!stop || t <= stop);
}

static void coro_main(void *arg)
{
	struct lb_coro *co = arg;
	struct lb_run *run = co->n->run;
	const struct lb_opts *o = run->o;

	for (uint64_t i = 0; o->duration > 0 || i < o->ops; i++) {
		uint32_t lock = (uint32_t)wl_zipf_next(&run->z, &co->rng);
		enum lock_mode m = wl_rng_next(&co->rng) % 100 < o->read_pct ? LOCK_S : LOCK_X;
		struct lock_hold h;
		uint64_t t0, t1, seen = 0;
		bool rode;
		int rc, rc2;

		if ((o->duration > 0 && __atomic_load_n(&run->stop, __ATOMIC_RELAXED)) ||
		    co->n->dead)
			break;
		t0 = bu_now_ns();
		rc = acquire(co, lock, m, &h, &rode, &seen);
		if (co->n->dead || (!rc && dying(co->n))) /* the node dies holding a lock */
			break;
		if (rc) {
			co->errors++;
			co->first_err = co->first_err ? co->first_err : rc;
			continue;
		}
		t1 = bu_now_ns();
		bu_hist_record(co->h, t1 - t0);
		/* granted after the kill: also one that waited across it for the dead holder */
		co->ops_after_kill += run->kill_ns && t1 > __atomic_load_n(&run->kill_ns,
								  __ATOMIC_ACQUIRE);
		rc = crit(co, lock, m, rode, seen);
		rc2 = lock_release(co->cli, &h);
		co->errors += (rc != 0) + (rc2 != 0);
		if (!co->first_err)
			co->first_err = rc ? rc : rc2;
		co->ops++;
		if (o->kill_cn >= 0) /* the kill's windows: no clock read without one */
			count_window(co, bu_now_ns());
	}
}

static int node_setup(struct lb_node *n)
{
	struct lb_run *run = n->run;
	const struct lb_opts *o = run->o;
	struct remora_rpc_cfg rc_cfg = { .size = sizeof(rc_cfg), .workers = 1 };
	struct lock_svc_cfg lc = {
		.type = run->type, .cn = (uint16_t)n->cn, .n_cn = (uint16_t)o->cns,
		.base = run->base, .rkey = run->rkey, .n_locks = o->locks, .cap_log2 = o->cap_log2,
		.cap_set = o->cap_set, .ver_bits = o->ver_bits, .timeout_ms = o->timeout_ms,
		.entry_delay_us = o->entry_delay_us, .mutate = o->mutate,
		.observe = run->check ? observe : NULL, .observe_arg = &n->obs,
		.clock = run->objs + 8ull * o->locks, .has_clock = true,
	};
	int rc = remora_sched_create(n->ch, 0, &n->sched);

	n->obs = (struct lb_obs){ run->check, n->cn };

	if (!rc)
		rc = remora_rpc_create(n->tp, &rc_cfg, &n->rpc);
	lc.rpc = n->rpc;
	if (!rc && (rc = lock_svc_create(&lc, &n->svc)) != 0)
		fprintf(stderr, "remora lockbench: %s\n", lock_errmsg());
	if (!rc)
		rc = remora_rpc_ep_open(n->rpc, 0, n->ch, n->sched, &n->ep);
	for (unsigned i = 0; !rc && i < o->coros; i++) {
		struct lb_coro *co = &n->co[i];

		co->n = n;
		co->idx = i;
		wl_rng_seed(&co->rng, o->seed, (uint64_t)n->cn << 20 | i);
		co->h = bu_hist_new();
		rc = co->h ? lock_cli_open(n->svc, n->ch, n->ep, i, &co->cli) : -ENOMEM;
		if (!rc)
			rc = remora_sched_spawn(n->sched, coro_main, co);
	}
	if (!rc && n->cn == 0)
		rc = lock_format(n->co[0].cli);
	return rc;
}

static void node_teardown(struct lb_node *n)
{
	for (unsigned i = 0; n->co && i < n->run->o->coros; i++)
		lock_cli_close(n->co[i].cli);
	if (n->ep)
		remora_rpc_ep_close(n->ep);
	if (n->sched)
		remora_sched_destroy(n->sched);
	lock_svc_destroy(n->svc);
	if (n->rpc)
		remora_rpc_destroy(n->rpc);
}

static void *node_main(void *arg)
{
	struct lb_node *n = arg;
	struct lb_run *run = n->run;

	n->rc = node_setup(n);
	pthread_barrier_wait(&run->bar);
	pthread_barrier_wait(&run->bar); /* every node set up (or the run is off) */
	n->verbs0 = chan_verbs(n->ch);
	if (!__atomic_load_n(&run->stop, __ATOMIC_ACQUIRE)) {
		int rc = remora_sched_run(n->sched);

		if (rc && !n->rc)
			n->rc = rc;
	}
	n->verbs = chan_verbs(n->ch) - n->verbs0;
	/* Serve grants and resets until every node's clients are done. */
	__atomic_add_fetch(&run->done, 1, __ATOMIC_ACQ_REL);
	while (__atomic_load_n(&run->done, __ATOMIC_ACQUIRE) < (int)run->o->cns)
		if (n->ep)
			remora_rpc_poll(n->ep);
	pthread_barrier_wait(&run->bar);
	node_teardown(n);
	return NULL;
}

static int pool_setup(struct lb_run *run, struct remora_pool **pool)
{
	const struct lb_opts *o = run->o;
	uint64_t bytes = (uint64_t)o->locks * (run->stride + 8) + 8 + 4096; /* + the clock word */
	struct remora_pool_spec spec = { .size = sizeof(spec), .node = 0,
					 .bytes = (bytes + 4095) & ~4095ull,
					 .flags = REMORA_POOL_CREATE | REMORA_POOL_EXCL |
						  REMORA_POOL_UNLINK_ON_CLOSE };
	struct remora_node_desc desc;
	int rc = remora_pool_open(run->nodes[0].tp, &spec, pool);

	if (!rc)
		rc = remora_pool_reg(*pool, 0, spec.bytes, &run->rkey);
	if (!rc)
		rc = remora_pool_describe(*pool, &desc);
	for (unsigned i = 0; !rc && i < o->cns; i++)
		rc = remora_transport_attach(run->nodes[i].tp, &desc);
	if (rc)
		fprintf(stderr, "remora lockbench: pool: %s\n",
			remora_transport_errmsg(run->nodes[0].tp));
	run->base = remora_gaddr_make(0, 0);
	run->objs = run->base + (uint64_t)o->locks * run->stride;
	return rc;
}

static int nodes_open(struct lb_run *run)
{
	const struct lb_opts *o = run->o;
	char cluster[64];

	snprintf(cluster, sizeof(cluster), "lockb-%ld-%08llx", (long)getpid(),
		 (unsigned long long)(bu_now_ns() & 0xffffffffu));
	for (unsigned i = 0; i < o->cns; i++) {
		struct lb_node *n = &run->nodes[i];
		struct remora_transport_cfg cfg = { .size = sizeof(cfg), .backend = o->backend,
						    .profile = o->profile, .cluster = cluster,
						    .self_cn = (int)i, .max_cn = o->cns,
						    .numa_node = -1,
						    .mn_scale = (uint32_t)o->mn_scale };
		int rc = remora_transport_open(&cfg, &n->tp);

		n->run = run;
		n->cn = i;
		if (!rc)
			rc = remora_chan_open(n->tp, &n->ch);
		n->co = calloc(o->coros, sizeof(*n->co));
		if (rc || !n->co) {
			fprintf(stderr, "remora lockbench: compute node %u: %s\n", i,
				rc ? remora_last_error() : "out of memory");
			return rc ? rc : -ENOMEM;
		}
	}
	return 0;
}

static void nodes_close(struct lb_run *run)
{
	for (unsigned i = 0; i < run->o->cns; i++) {
		struct lb_node *n = &run->nodes[i];

		for (unsigned j = 0; n->co && j < run->o->coros; j++)
			free(n->co[j].h);
		free(n->co);
		if (n->ch)
			remora_chan_close(n->ch);
		if (n->tp)
			remora_transport_close(n->tp);
	}
}

/* Throughput before the kill and late after it (0 without a kill, or a window empty). */
static void collect_kill_rates(struct lb_run *run, struct lb_result *r)
{
	uint64_t before = 0, late = 0;

	if (!run->kill_ns || !run->late_ns || run->stop_ns <= run->late_ns)
		return;
	for (unsigned i = 0; i < run->o->cns; i++)
		for (unsigned j = 0; j < run->o->coros; j++) {
			before += run->nodes[i].co[j].ops_before_kill;
			late += run->nodes[i].co[j].ops_late;
		}
	r->rate_before_kill = (double)before / ((double)(run->kill_ns - run->start_ns) / 1e9);
	r->rate_late = (double)late / ((double)(run->stop_ns - run->late_ns) / 1e9);
}

static void collect(struct lb_run *run, struct lb_result *r)
{
	struct bu_hist *all = bu_hist_new();

	r->ops_least_node = UINT64_MAX;
	for (unsigned i = 0; i < run->o->cns; i++) {
		struct lb_node *n = &run->nodes[i];
		uint64_t node_ops = 0;

		r->chan_verbs += n->verbs;
		for (unsigned j = 0; j < run->o->coros; j++) {
			struct lb_coro *co = &n->co[j];
			struct lock_stats st;

			if (!co->cli)
				continue;
			lock_cli_stats(co->cli, &st);
			lock_stats_add(&r->st, &st);
			r->ops += co->ops;
			node_ops += co->ops;
			r->errors += co->errors;
			r->first_err = r->first_err ? r->first_err : co->first_err;
			r->cs_ops += co->cs_ops;
			r->rides += co->rides;
			r->rides_valid += co->rides_valid;
			r->ops_after_kill += co->ops_after_kill;
			if (all && co->h)
				bu_hist_merge(all, co->h);
		}
		if (node_ops < r->ops_least_node)
			r->ops_least_node = node_ops;
	}
	if (all) {
		r->p50_ns = bu_hist_quantile(all, 0.50);
		r->p99_ns = bu_hist_quantile(all, 0.99);
		r->p999_ns = bu_hist_quantile(all, 0.999);
		free(all);
	}
}

/* Memory node 0's busy time (every verb class) over the cost model's elapsed time. */
static double mn_util(const struct remora_cost_stats *a, const struct remora_cost_stats *b)
{
	uint64_t busy = 0;

	for (unsigned k = 0; k < REMORA_COST_CLASSES; k++)
		busy += b->mn_busy_ns[0][k] - a->mn_busy_ns[0][k];
	return b->now_ns > a->now_ns ? (double)busy / (double)(b->now_ns - a->now_ns) : 0;
}

/*
 * Waits until every node is done. A live node still busy LB_GRACE after the stop hangs (a
 * client that waits for a lock nobody will ever give, or a reset for an answer that never
 * comes): it is counted in stuck, and every lock service shuts down, so that its waits end
 * and the run still returns.
 */
static unsigned wait_done(struct lb_run *run)
{
	const struct lb_opts *o = run->o;
	/* the service's own default bound when the options leave it at 0 (lock.c) */
	uint64_t grace = (uint64_t)(o->timeout_ms ? o->timeout_ms : 200) * 1000000u *
			 LB_GRACE_TIMEOUTS, end = 0;
	bool killed = o->kill_cn >= 0 && (unsigned)o->kill_cn < o->cns;
	unsigned stuck = 0;
	int done, frozen;

	if (grace < LB_GRACE_MIN_NS)
		grace = LB_GRACE_MIN_NS;
	while ((done = __atomic_load_n(&run->done, __ATOMIC_ACQUIRE)) < (int)o->cns) {
		/* from the stop (--duration), or from the first node done (--ops) */
		if (!end && (__atomic_load_n(&run->stop, __ATOMIC_ACQUIRE) || done > 0))
			end = bu_now_ns() + grace;
		/* the killed node stays frozen until the live ones are done: not one of them */
		frozen = killed && __atomic_load_n(&run->nodes[o->kill_cn].dying, __ATOMIC_ACQUIRE);
		if (end && !stuck && bu_now_ns() > end && done < (int)o->cns - frozen) {
			stuck = o->cns - (unsigned)frozen - (unsigned)done;
			for (unsigned i = 0; i < o->cns; i++)
				lock_svc_shutdown(run->nodes[i].svc);
		}
		usleep(1000);
	}
	return stuck;
}

/* Stats must be read before the nodes tear their clients down: the threads wait for it. */
static int run_threads(struct lb_run *run, struct lb_result *r)
{
	const struct lb_opts *o = run->o;
	struct remora_cost_stats c0, c1;
	unsigned started = 0;
	bool have_cost;
	uint64_t t0;
	int rc = 0;

	for (; started < o->cns; started++)
		if (pthread_create(&run->nodes[started].tid, NULL, node_main, &run->nodes[started]))
			break;
	if (started < o->cns) {
		fprintf(stderr, "remora lockbench: cannot start compute-node threads\n");
		exit(1);
	}
	pthread_barrier_wait(&run->bar);
	for (unsigned i = 0; i < o->cns; i++)
		if (run->nodes[i].rc && !rc)
			rc = run->nodes[i].rc;
	if (rc)
		__atomic_store_n(&run->stop, 1, __ATOMIC_RELEASE);
	t0 = bu_now_ns();
	run->start_ns = t0;
	have_cost = remora_transport_cost_stats(run->nodes[0].tp, &c0) == 0;
	pthread_barrier_wait(&run->bar);
	if (!rc && o->kill_cn >= 0 && (unsigned)o->kill_cn < o->cns) {
		usleep((useconds_t)(o->kill_at * 1e6));
		__atomic_store_n(&run->nodes[o->kill_cn].dying, 1, __ATOMIC_RELEASE);
	}
	if (!rc && o->duration > 0) {
		double left = o->duration - (o->kill_cn >= 0 ? o->kill_at : 0);

		usleep((useconds_t)((left > 0 ? left : 0) * 1e6));
		__atomic_store_n(&run->stop_ns, bu_now_ns(), __ATOMIC_RELAXED);
		__atomic_store_n(&run->stop, 1, __ATOMIC_RELEASE);
	}
	r->stuck = wait_done(run);
	r->secs = (double)(bu_now_ns() - t0) / 1e9;
	r->mn_util = have_cost && remora_transport_cost_stats(run->nodes[0].tp, &c1) == 0
			     ? mn_util(&c0, &c1) : -1;
	collect(run, r);
	collect_kill_rates(run, r);
	pthread_barrier_wait(&run->bar);
	for (unsigned i = 0; i < o->cns; i++) {
		pthread_join(run->nodes[i].tid, NULL);
		if (run->nodes[i].rc && !rc)
			rc = run->nodes[i].rc;
	}
	return rc;
}

static int check_init(struct lb_check *k, const struct lb_opts *o)
{
	memset(k, 0, sizeof(*k));
	pthread_mutex_init(&k->mu, NULL);
	k->readers = calloc(o->locks, sizeof(*k->readers));
	k->writer = calloc(o->locks, 1);
	k->coros = o->coros;
	k->held = calloc((size_t)o->cns * o->coros, sizeof(*k->held));
	return k->readers && k->writer && k->held ? 0 : -ENOMEM;
}

static void check_fini(struct lb_check *k, struct lb_result *r)
{
	r->violations = k->violations;
	r->excl_violations = k->excl;
	snprintf(r->violation, sizeof(r->violation), "%s", k->msg);
	free(k->readers);
	free(k->writer);
	free(k->pend);
	free(k->held);
	pthread_mutex_destroy(&k->mu);
}

int lb_run(const struct lb_opts *o, struct lb_result *r)
{
	struct lb_run run = { .o = o, .type = o->lock };
	struct remora_pool *pool = NULL;
	struct lb_check check;
	int rc;

	memset(r, 0, sizeof(*r));
	run.stride = lock_type_stride(run.type, o->cap_set || o->cap_log2 ? o->cap_log2 : 3);
	if (!run.stride) {
		fprintf(stderr, "remora lockbench: unknown lock type '%s'\n", o->lock);
		return -EINVAL;
	}
	if (wl_zipf_init(&run.z, o->locks, o->theta)) {
		fprintf(stderr, "remora lockbench: bad --theta %g or --locks %u\n", o->theta, o->locks);
		return -EINVAL;
	}
	if (o->check && check_init(&check, o))
		return -ENOMEM;
	run.check = o->check ? &check : NULL;
	run.nodes = calloc(o->cns, sizeof(*run.nodes));
	pthread_barrier_init(&run.bar, NULL, o->cns + 1);
	rc = run.nodes ? nodes_open(&run) : -ENOMEM;
	if (!rc)
		rc = pool_setup(&run, &pool);
	if (!rc)
		rc = run_threads(&run, r);
	if (pool)
		remora_pool_close(pool, true);
	if (run.nodes)
		nodes_close(&run);
	free(run.nodes);
	pthread_barrier_destroy(&run.bar);
	if (o->check)
		check_fini(&check, r);
	return rc;
}
