/* SPDX-License-Identifier: MIT */
/*
 * DecLock's hierarchical mode (docs/declock.md): the coordinators of one compute node share
 * one CQL entry per lock through a local lock. A local waiter gets the lock from a local
 * holder with 0 memory-node verbs, but only when it is earlier than the earliest remote
 * waiter (16-bit µs timestamps, compared wrap-aware); otherwise the node releases the CQL
 * (which grants the remote waiters) and the local waiter enqueues again. Two policies:
 * "declock-tf" (task-fair: the head of the local queue, readers admitted up to a writer or a
 * later-than-remote waiter) and "declock-pf" (phase-fair: every local reader joins a shared
 * phase; a release serves the first reader when the head cannot be served locally).
 * Timestamps count from a base the compute nodes agree on once a second through a counter on
 * the memory node. v1: one worker per compute node, so the local table needs no mutex (the
 * coroutines of a worker switch only where they yield).
 */
#include <errno.h>

#include "lock/lock.h"
#include "mutate/mutate.h"

#define SYNC_PERIOD_NS 1000000000ull
#define SYNC_WAIT_NS 2000000ull

static uint16_t now16(const struct lock_svc *s)
{
	return (uint16_t)((lock_now_ns() - s->clock_base) / 1000u);
}

/*
 * Once a second: FAA the counter; the node that brings it to n_cn WRITEs 0; every node READs
 * until it sees 0 and takes that moment as its base. A node that does not see 0 within 2 ms
 * keeps its own base (timestamps then only lose fairness, never safety).
 */
static void clock_tick(struct lock_cli *c)
{
	struct lock_svc *s = c->svc;
	uint64_t now = lock_now_ns(), v, end = now + SYNC_WAIT_NS;

	if (s->last_sync && now - s->last_sync < SYNC_PERIOD_NS)
		return;
	s->last_sync = now;
	if (!s->clock_base)
		s->clock_base = now;
	if (!s->cfg.has_clock || lock_faa(c, s->cfg.clock, 1, &v, &c->st.sync_ops))
		return;
	if (v + 1 >= s->cfg.n_cn) {
		struct remora_wr w = { .raddr = s->cfg.clock, .op = REMORA_OP_WRITE, .local = &(uint64_t){ 0 },
				       .len = 8 };

		if (lock_exec(c, &w, 1, &c->st.sync_ops))
			return;
		v = 0;
	}
	while (v && lock_now_ns() < end) {
		lock_pause(c, 1);
		if (lock_read(c, s->cfg.clock, &v, 8, &c->st.sync_ops))
			return;
	}
	if (!v)
		s->clock_base = lock_now_ns();
}

static void lw_append(struct lock_local *ll, struct lock_lwait *w)
{
	w->next = NULL;
	if (ll->tail)
		ll->tail->next = w;
	else
		ll->head = w;
	ll->tail = w;
}

static void lw_remove(struct lock_local *ll, struct lock_lwait *w)
{
	struct lock_lwait **pp = &ll->head, *prev = NULL;

	while (*pp && *pp != w)
		prev = *pp, pp = &(*pp)->next;
	if (!*pp)
		return;
	*pp = w->next;
	if (ll->tail == w)
		ll->tail = prev;
}

/* The local waiter w may have the lock now without the CQL changing hands. */
static bool servable(const struct lock_svc *s, uint32_t lock, const struct lock_local *ll,
		     const struct lock_lwait *w)
{
	return ll->cqlheld && w->mode == ll->cql_mode && s->epoch[lock] == ll->cql.epoch &&
	       (!ll->rts_set || lock_ts_before(w->ts, ll->rts) ||
		lock_mut(s, MUT_LOCAL_IGNORES_REMOTE));
}

/* The CQL is held in S: let local readers join (TF: up to a writer or a later one; PF: all). */
static void admit_readers(const struct lock_svc *s, uint32_t lock, struct lock_local *ll)
{
	struct lock_lwait *w = ll->head, *next;

	for (; w; w = next) {
		next = w->next;
		if (w->mode == LOCK_S && servable(s, lock, ll, w)) {
			lw_remove(ll, w);
			ll->holders++;
			w->state = LOCK_LW_LOCAL;
		} else if (s->ops->policy == LOCK_TF) {
			return;
		}
	}
}

/* One READ of the queue: the earliest timestamp among its waiters, when none is known. */
static void prefetch(struct lock_cli *c, uint32_t lock, struct lock_local *ll)
{
	struct lock_svc *s = c->svc;
	uint64_t buf[1 + 1024], h, head, n;

	if (lock_read(c, lock_addr(s, lock), buf, 8u + 8u * s->cap, &c->st.prefetch_ops))
		return;
	h = buf[0];
	head = h >> 32;
	n = (h >> 20) & 0xfff;
	for (uint64_t i = head + 1; i < head + n && n <= s->cap; i++) {
		uint64_t e = buf[1 + (i & (s->cap - 1))];
		uint16_t t = (uint16_t)(e >> 16);
		unsigned vm = (1u << s->m_bits) - 1;

		/* versions are stored inverted (lock_cql.c) */
		if (((e ^ vm) & vm) != ((i >> s->c) & vm) ||
		    (uint8_t)(e >> 32) != s->epoch[lock])
			continue;
		if (!ll->rts_set || lock_ts_before(t, ll->rts))
			ll->rts = t, ll->rts_set = true;
	}
}

/* Waits in the local queue: LOCK_LW_LOCAL (granted here) or LOCK_LW_REACQ (take the CQL). */
static int local_wait(struct lock_cli *c, uint32_t lock, struct lock_local *ll, enum lock_mode m,
		      uint16_t ts)
{
	struct lock_lwait w = { .mode = (uint8_t)m, .ts = ts, .state = LOCK_LW_WAIT };

	if (m == LOCK_X && ll->state == LOCK_LL_SHARED)
		ll->state = LOCK_LL_EXCL; /* later local readers queue behind this writer */
	lw_append(ll, &w);
	if (!ll->rts_set && ll->cqlheld)
		prefetch(c, lock, ll);
	c->st.waited++;
	while (w.state == LOCK_LW_WAIT && !lock_down(c->svc))
		lock_pause(c, 1);
	/*
	 * The prefetch READ above carried the acquisition's riders (lock_acquire_riding): they
	 * were read before the local holder ahead of us let go, and it may have written them
	 * since. A local grant takes no verb that would tell lock_acquire_riding so, and the
	 * loop may not have paused at all when the hand-off came during the prefetch's own
	 * yield: the wait makes the ride stale here. (That case lost SmallBank's money on
	 * declock-tf once coordinators yielded less often than at every verb.)
	 */
	c->ride.later = c->ride.posted;
	if (w.state == LOCK_LW_WAIT) { /* shut down: leave the queue, fail in take_cql */
		lw_remove(ll, &w);
		return LOCK_LW_REACQ;
	}
	return w.state;
}

/* The CQL acquisition failed: the next local waiter tries it in turn. */
static void pass_on(struct lock_local *ll)
{
	struct lock_lwait *w = ll->head;

	ll->state = LOCK_LL_FREE;
	ll->holders = 0;
	if (!w)
		return;
	lw_remove(ll, w);
	ll->state = LOCK_LL_PENDING;
	ll->holders = 1;
	w->state = LOCK_LW_REACQ;
}

static int take_cql(struct lock_cli *c, uint32_t lock, struct lock_local *ll, enum lock_mode m,
		    uint16_t ts, struct lock_hold *h)
{
	struct lock_svc *s = c->svc;
	int rc = lock_cql_acquire(c, lock, m, ts, &ll->cql);

	if (rc) {
		pass_on(ll);
		return rc;
	}
	ll->cqlheld = true;
	ll->cql_mode = (uint8_t)m;
	ll->state = m == LOCK_X ? LOCK_LL_EXCL : LOCK_LL_SHARED;
	ll->rts = c->w.rts;
	ll->rts_set = c->w.rts_set;
	if (m == LOCK_S)
		admit_readers(s, lock, ll);
	*h = ll->cql;
	lock_emit(c, lock, h->ticket, m, LOCK_EV_GRANT);
	return 0;
}

static int hier_acquire(struct lock_cli *c, uint32_t lock, enum lock_mode m, struct lock_hold *h)
{
	struct lock_svc *s = c->svc;
	struct lock_local *ll = &s->local[lock];
	uint16_t ts;

	clock_tick(c);
	ts = now16(s);
	if (m == LOCK_S && ll->state == LOCK_LL_SHARED && !ll->head &&
	    (!ll->rts_set || lock_ts_before(ts, ll->rts)) && s->epoch[lock] == ll->cql.epoch) {
		ll->holders++;
	} else if (ll->state != LOCK_LL_FREE) {
		if (local_wait(c, lock, ll, m, ts) == LOCK_LW_REACQ)
			return take_cql(c, lock, ll, m, ts, h);
	} else {
		ll->state = LOCK_LL_PENDING;
		ll->holders = 1;
		return take_cql(c, lock, ll, m, ts, h);
	}
	c->st.acquires++;
	c->st.local_grants++;
	*h = (struct lock_hold){ .lock = lock, .mode = (uint8_t)m, .epoch = ll->cql.epoch,
				 .ticket = LOCK_TICKET_UNORDERED };
	lock_emit(c, lock, h->ticket, m, LOCK_EV_GRANT);
	return 0;
}

/* The local waiter a release serves next: TF the head; PF the head, else the first reader. */
static struct lock_lwait *pick(const struct lock_svc *s, uint32_t lock,
			       const struct lock_local *ll)
{
	if (s->ops->policy == LOCK_PF && ll->head && !servable(s, lock, ll, ll->head))
		for (struct lock_lwait *w = ll->head; w; w = w->next)
			if (w->mode == LOCK_S && servable(s, lock, ll, w))
				return w;
	return ll->head;
}

static int hier_release(struct lock_cli *c, const struct lock_hold *h)
{
	struct lock_svc *s = c->svc;
	struct lock_local *ll = &s->local[h->lock];
	struct lock_lwait *w;
	struct lock_hold cql;
	int rc;

	if (ll->holders > 1) {
		ll->holders--;
		return 0;
	}
	w = pick(s, h->lock, ll);
	if (w && servable(s, h->lock, ll, w)) { /* hand over here: 0 memory-node verbs */
		lw_remove(ll, w);
		ll->holders = 1;
		ll->state = w->mode == LOCK_X ? LOCK_LL_EXCL : LOCK_LL_SHARED;
		w->state = LOCK_LW_LOCAL;
		if (w->mode == LOCK_S)
			admit_readers(s, h->lock, ll);
		return 0;
	}
	cql = ll->cql;
	ll->cqlheld = false;
	ll->rts_set = false;
	ll->state = w ? LOCK_LL_PENDING : LOCK_LL_FREE;
	ll->holders = w ? 1 : 0;
	if (w)
		lw_remove(ll, w);
	rc = lock_cql_release(c, &cql);
	if (w)
		w->state = LOCK_LW_REACQ;
	return rc;
}

static size_t hier_stride(unsigned cap_log2)
{
	return 8u + 8u * ((size_t)1 << cap_log2);
}

static void hier_image(const struct lock_svc *s, void *buf)
{
	uint64_t *w = buf;

	w[0] = 0;
	for (unsigned i = 0; i < s->cap; i++)
		w[1 + i] = 0; /* version all ones, stored inverted (lock_cql.c) */
}

const struct lock_ops lock_type_declock_tf = {
	.size = sizeof(struct lock_ops),
	.name = "declock-tf",
	.policy = LOCK_TF,
	.stride = hier_stride,
	.image = hier_image,
	.acquire = hier_acquire,
	.release = hier_release,
};

const struct lock_ops lock_type_declock_pf = {
	.size = sizeof(struct lock_ops),
	.name = "declock-pf",
	.policy = LOCK_PF,
	.stride = hier_stride,
	.image = hier_image,
	.acquire = hier_acquire,
	.release = hier_release,
};
