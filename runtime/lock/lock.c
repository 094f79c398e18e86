/* SPDX-License-Identifier: MIT */
/*
 * The lock service (lock.h): the registry of lock types, the clients' verbs and counters, the
 * grant mailboxes, and the two RPC handlers every lock type may use: GRANT (a releaser hands a
 * lock to a waiting coordinator) and RESET (a resetter raises a lock's epoch on this node,
 * aborts its waiters and answers once no holder of the old epoch is left).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <remora/error.h>
#include <remora/sched.h>

#include "lock/lock.h"
#include "mutate/mutate.h"

extern const struct lock_ops *const lock_type_registry[];

static _Thread_local char errbuf[160];

const char *lock_errmsg(void)
{
	return errbuf;
}

static const struct lock_ops *type_find(const char *name)
{
	for (unsigned i = 0; name && lock_type_registry[i]; i++)
		if (strcmp(lock_type_registry[i]->name, name) == 0)
			return lock_type_registry[i];
	return NULL;
}

const char *const *lock_type_names(void)
{
	static const char *names[16];

	for (unsigned i = 0; i < 15 && lock_type_registry[i]; i++)
		names[i] = lock_type_registry[i]->name;
	return names;
}

size_t lock_type_stride(const char *type, unsigned cap_log2)
{
	const struct lock_ops *o = type_find(type);

	return o ? o->stride(cap_log2) : 0;
}

/* The wire form of a GRANT (op) and a RESET (op + 1) request. */
struct lock_msg {
	uint32_t lock;
	uint16_t coord; /* the coordinator it is for */
	uint8_t epoch;
	uint8_t kind;   /* 0 grant, 1 successor (peer queued behind coord) */
	uint16_t rts;
	uint16_t has_rts; /* grant: rts is set (a remote waiter remains) */
	uint32_t peer;  /* successor: its id, (cn << 10 | coord) + 1; grant: its place tag (0: any) */
};
_Static_assert(sizeof(struct lock_msg) == 16, "the grant message's wire size");

static void deliver(struct lock_svc *s, const struct lock_msg *m)
{
	struct lock_cli *c = m->coord < LOCK_MAX_COORD ? s->clients[m->coord] : NULL;
	bool epoch_ok, place_ok;

	if (c && m->kind == 1) {
		c->succ_lock = m->lock;
		c->succ = m->peer;
		return;
	}
	epoch_ok = c && (c->w.epoch == m->epoch || lock_mut(s, MUT_STALE_EPOCH_GRANT));
	/* A grant for another place (or before the entry exists) is not this waiter's. */
	place_ok = c && (m->peer == 0 || m->peer == c->w.place ||
			 lock_mut(s, MUT_GRANT_IGNORES_PLACE));

	if (!c || c->w.state != LOCK_W_WAITING || c->w.lock != m->lock || !epoch_ok || !place_ok ||
	    (s->epoch[m->lock] != m->epoch && !lock_mut(s, MUT_STALE_EPOCH_GRANT))) {
		if (c)
			c->st.grants_dropped++;
		return;
	}
	c->w.rts = m->rts;
	c->w.rts_set = m->has_rts != 0;
	c->w.state = LOCK_W_GRANTED;
	s->holders[m->lock]++; /* now, so that a reset handled before the waiter runs waits */
}

static int h_grant(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
		   uint32_t *rep_len)
{
	struct lock_svc *s = arg;
	struct lock_msg m;

	(void)rep, (void)cap;
	*rep_len = 0;
	if (req->len != sizeof(m))
		return -EINVAL;
	memcpy(&m, req->data, sizeof(m));
	if (m.lock >= s->cfg.n_locks)
		return -EINVAL;
	deliver(s, &m);
	return 0;
}

/* Raises lock's epoch here to e and aborts this node's waiters on it. */
static void adopt_epoch(struct lock_svc *s, uint32_t lock, uint8_t e)
{
	s->epoch[lock] = e;
	for (unsigned i = 0; i < LOCK_MAX_COORD; i++) {
		struct lock_cli *c = s->clients[i];

		if (c && c->w.lock == lock && c->w.state == LOCK_W_WAITING)
			c->w.state = LOCK_W_ABORTED;
	}
}

static int h_reset(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
		   uint32_t *rep_len)
{
	struct lock_svc *s = arg;
	struct lock_msg m;

	(void)rep, (void)cap;
	*rep_len = 0;
	if (req->len != sizeof(m))
		return -EINVAL;
	memcpy(&m, req->data, sizeof(m));
	if (m.lock >= s->cfg.n_locks)
		return -EINVAL;
	adopt_epoch(s, m.lock, m.epoch);
	if (s->holders[m.lock] == 0)
		return 0;
	/* Answer once this node's last holder of the old epoch has left. */
	for (unsigned i = 0; i < LOCK_MAX_DEFER; i++)
		if (!s->deferred[i].used) {
			s->deferred[i].used = true;
			s->deferred[i].lock = m.lock;
			s->deferred[i].t = req->token;
			return REMORA_RPC_DEFER;
		}
	return -EBUSY;
}

void lock_holder_gone(struct lock_svc *s, uint32_t lock)
{
	if (s->holders[lock] > 0)
		s->holders[lock]--;
	if (s->holders[lock] > 0 || !s->ep)
		return;
	for (unsigned i = 0; i < LOCK_MAX_DEFER; i++)
		if (s->deferred[i].used && s->deferred[i].lock == lock) {
			s->deferred[i].used = false;
			remora_rpc_reply(s->ep, &s->deferred[i].t, 0, NULL, 0);
		}
}

static int cfg_check(const struct lock_svc_cfg *cfg)
{
	/* 64, not the 127 the reset id allows: the down mask (down_cn) has one bit per node */
	if (!cfg || !cfg->n_locks || !cfg->n_cn || cfg->cn >= cfg->n_cn || cfg->n_cn > 64)
		snprintf(errbuf, sizeof(errbuf), "lock: need n_locks > 0 and cn < n_cn <= 64");
	else if ((cfg->cap_set || cfg->cap_log2) && cfg->cap_log2 > 10)
		snprintf(errbuf, sizeof(errbuf), "lock: cap_log2 %u is above 10", cfg->cap_log2);
	else if (cfg->ver_bits && (cfg->ver_bits < 2 || cfg->ver_bits > 16))
		snprintf(errbuf, sizeof(errbuf), "lock: ver_bits %u is not in 2..16", cfg->ver_bits);
	else if (cfg->n_cn > 1 && !cfg->rpc)
		snprintf(errbuf, sizeof(errbuf), "lock: several compute nodes need an RPC layer");
	else
		return 0;
	return -EINVAL;
}

static int svc_rpc(struct lock_svc *s)
{
	int rc;

	if (!s->cfg.rpc)
		return 0;
	rc = remora_rpc_register(s->cfg.rpc, s->cfg.rpc_op, h_grant, s);
	if (!rc)
		rc = remora_rpc_register(s->cfg.rpc, (uint16_t)(s->cfg.rpc_op + 1), h_reset, s);
	if (rc)
		snprintf(errbuf, sizeof(errbuf), "lock: RPC ops %u..%u: %s", s->cfg.rpc_op,
			 s->cfg.rpc_op + 1, remora_strerror(rc));
	return rc;
}

int lock_svc_create(const struct lock_svc_cfg *cfg, struct lock_svc **out)
{
	struct lock_svc *s;
	int rc = cfg_check(cfg);

	if (rc)
		return rc;
	if (!type_find(cfg->type)) {
		snprintf(errbuf, sizeof(errbuf), "lock: unknown lock type '%s'",
			 cfg->type ? cfg->type : "(null)");
		return -ENOENT;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	s->ops = type_find(cfg->type);
	s->c = cfg->cap_set || cfg->cap_log2 ? cfg->cap_log2 : 3;
	s->cap = 1u << s->c;
	s->m_bits = cfg->ver_bits ? cfg->ver_bits : 16;
	s->op_base = cfg->rpc_op ? cfg->rpc_op : 60;
	s->cfg.rpc_op = (uint16_t)(s->op_base +
				   2u * (cfg->node_workers ? cfg->cn % cfg->node_workers : 0));
	s->cfg.timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : 200;
	s->stride = s->ops->stride(s->c);
	s->epoch = calloc(cfg->n_locks, 1);
	s->holders = calloc(cfg->n_locks, sizeof(*s->holders));
	if (s->ops->policy != LOCK_FLAT)
		s->local = calloc(cfg->n_locks, sizeof(*s->local));
	rc = !s->epoch || !s->holders || (s->ops->policy != LOCK_FLAT && !s->local) ? -ENOMEM
										     : svc_rpc(s);
	if (rc) {
		lock_svc_destroy(s);
		return rc;
	}
	*out = s;
	return 0;
}

void lock_svc_destroy(struct lock_svc *s)
{
	if (!s)
		return;
	free(s->epoch);
	free(s->holders);
	free(s->local);
	free(s);
}

remora_gaddr lock_addr(const struct lock_svc *s, uint32_t lock)
{
	return s->cfg.base + (uint64_t)lock * s->stride;
}

int lock_cli_open(struct lock_svc *s, struct remora_chan *ch, struct remora_rpc_ep *ep,
		  unsigned coord, struct lock_cli **out)
{
	struct lock_cli *c;

	if (!s || !ch || coord >= LOCK_MAX_COORD || s->clients[coord] ||
	    (s->cfg.n_cn > 1 && !ep) || (s->ep && ep && ep != s->ep))
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (c)
		c->qbuf = calloc(s->cap, sizeof(uint64_t));
	if (!c || !c->qbuf) {
		free(c);
		return -ENOMEM;
	}
	c->svc = s;
	c->ch = ch;
	c->ep = ep;
	c->coord = coord;
	c->rng = 0x9e3779b97f4a7c15ull * (coord + 1) ^ ((uint64_t)s->cfg.cn << 40);
	if (ep)
		s->ep = ep;
	s->clients[coord] = c;
	*out = c;
	return 0;
}

void lock_cli_close(struct lock_cli *c)
{
	if (!c)
		return;
	c->svc->clients[c->coord] = NULL;
	free(c->qbuf);
	free(c);
}

int lock_format(struct lock_cli *c)
{
	struct lock_svc *s = c->svc;
	uint32_t per = (uint32_t)((1u << 20) / s->stride), n;
	uint8_t *buf = malloc((size_t)per * s->stride);
	int rc = buf ? 0 : -ENOMEM;

	for (uint32_t i = 0; buf && i < per; i++)
		s->ops->image(s, buf + (size_t)i * s->stride);
	for (uint32_t l = 0; !rc && l < s->cfg.n_locks; l += n) {
		n = s->cfg.n_locks - l < per ? s->cfg.n_locks - l : per;
		rc = remora_write(c->ch, lock_addr(s, l), s->cfg.rkey, buf,
				  (uint32_t)(n * s->stride));
	}
	free(buf);
	return rc;
}

void lock_svc_shutdown(struct lock_svc *s)
{
	__atomic_store_n(&s->down, 1, __ATOMIC_RELEASE);
}

void lock_svc_node_down(struct lock_svc *s, unsigned cn, bool down)
{
	if (cn >= 64)
		return;
	if (down)
		__atomic_or_fetch(&s->down_cn, UINT64_C(1) << cn, __ATOMIC_ACQ_REL);
	else
		__atomic_and_fetch(&s->down_cn, ~(UINT64_C(1) << cn), __ATOMIC_ACQ_REL);
}

bool lock_node_is_down(const struct lock_svc *s, unsigned cn)
{
	return cn < 64 && (__atomic_load_n(&s->down_cn, __ATOMIC_ACQUIRE) >> cn & 1);
}

bool lock_down(const struct lock_svc *s)
{
	return __atomic_load_n(&s->down, __ATOMIC_ACQUIRE) != 0;
}

int lock_acquire(struct lock_cli *c, uint32_t lock, enum lock_mode m, struct lock_hold *h)
{
	if (lock >= c->svc->cfg.n_locks || (m != LOCK_S && m != LOCK_X))
		return -EINVAL;
	if (lock_down(c->svc))
		return -ECANCELED;
	return c->svc->ops->acquire(c, lock, m, h);
}

int lock_acquire_riding(struct lock_cli *c, uint32_t lock, enum lock_mode m, struct lock_hold *h,
			const struct remora_wr *riders, unsigned n, enum lock_ride *ride)
{
	uint16_t home = remora_gaddr_node(c->svc->cfg.base);
	int rc;

	for (unsigned i = 0; i < n; i++)
		if (remora_gaddr_node(riders[i].raddr) != home)
			n = 0; /* unordered against the atomic: the caller READs after the grant */
	c->ride.wrs = riders;
	c->ride.n = n <= LOCK_RIDERS_MAX && lock < c->svc->cfg.n_locks ? n : 0;
	c->ride.lo = lock_addr(c->svc, lock);
	c->ride.hi = c->ride.lo + c->svc->stride;
	c->ride.rc = 0;
	c->ride.posted = c->ride.later = false;
	rc = lock_acquire(c, lock, m, h);
	if (!c->ride.posted)
		*ride = LOCK_RIDE_NONE;
	else if (rc == 0 && c->ride.rc == 0 &&
		 (!c->ride.later || lock_mut(c->svc, MUT_RIDE_ALWAYS_VALID)))
		*ride = LOCK_RIDE_VALID;
	else
		*ride = LOCK_RIDE_STALE;
	c->ride.n = 0;
	c->ride.posted = false;
	return rc;
}

int lock_release(struct lock_cli *c, const struct lock_hold *h)
{
	if (lock_down(c->svc))
		return 0;
	lock_emit(c, h->lock, h->ticket, (enum lock_mode)h->mode, LOCK_EV_RELEASE);
	c->st.releases++;
	return c->svc->ops->release(c, h);
}

void lock_cli_stats(const struct lock_cli *c, struct lock_stats *out)
{
	*out = c->st;
}

void lock_stats_add(struct lock_stats *d, const struct lock_stats *s)
{
	uint64_t mx = d->acq_ops_max > s->acq_ops_max ? d->acq_ops_max : s->acq_ops_max;
	uint64_t *dv = (uint64_t *)d;
	const uint64_t *sv = (const uint64_t *)s;

	for (size_t i = 0; i < sizeof(*d) / sizeof(uint64_t); i++)
		dv[i] += sv[i];
	d->acq_ops_max = mx;
}

bool lock_mut(const struct lock_svc *s, int id)
{
	return mut_on(s->cfg.mutate, (enum mut_id)id);
}

/* ---- verbs ------------------------------------------------------------------------------ */

/* The first doorbell of a riding acquisition: its verbs, then the riders (not counted). */
static int exec_with_riders(struct lock_cli *c, const struct remora_wr *wrs, unsigned n)
{
	struct remora_wr all[4 + LOCK_RIDERS_MAX];

	if (n > 4)
		return remora_co_exec(c->ch, (struct remora_wr *)wrs, n); /* riders stay home */
	memcpy(all, wrs, n * sizeof(*wrs));
	memcpy(all + n, c->ride.wrs, c->ride.n * sizeof(*all));
	c->ride.posted = true;
	return remora_co_exec(c->ch, all, n + c->ride.n);
}

int lock_exec(struct lock_cli *c, struct remora_wr *wrs, unsigned n, uint64_t *count)
{
	for (unsigned i = 0; i < n; i++)
		wrs[i].rkey = c->svc->cfg.rkey;
	*count += n;
	if (c->ride.posted)
		c->ride.later = true;
	else if (c->ride.n && n && wrs[0].raddr >= c->ride.lo && wrs[0].raddr < c->ride.hi)
		return c->ride.rc = exec_with_riders(c, wrs, n);
	return remora_co_exec(c->ch, wrs, n);
}

int lock_faa(struct lock_cli *c, remora_gaddr a, uint64_t add, uint64_t *old, uint64_t *count)
{
	struct remora_wr w = { .raddr = a, .op = REMORA_OP_FAA, .local = old, .swap = add };

	return lock_exec(c, &w, 1, count);
}

int lock_cas(struct lock_cli *c, remora_gaddr a, uint64_t cmp, uint64_t swp, uint64_t *old,
	     uint64_t *count)
{
	struct remora_wr w = { .raddr = a, .op = REMORA_OP_CAS, .local = old, .compare = cmp,
			       .swap = swp };

	*old = ~cmp; /* a failed verb must not look won */
	return lock_exec(c, &w, 1, count);
}

int lock_read(struct lock_cli *c, remora_gaddr a, void *dst, uint32_t len, uint64_t *count)
{
	struct remora_wr w = { .raddr = a, .op = REMORA_OP_READ, .local = dst, .len = len };

	return lock_exec(c, &w, 1, count);
}

void lock_emit(struct lock_cli *c, uint32_t lock, uint64_t ticket, enum lock_mode m,
	       enum lock_event ev)
{
	if (c->svc->cfg.observe)
		c->svc->cfg.observe(c->svc->cfg.observe_arg, c->coord, lock, ticket, m, ev);
}

uint64_t lock_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t lock_rand(struct lock_cli *c)
{
	uint64_t z = (c->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void lock_pause(struct lock_cli *c, unsigned spins)
{
	c->ride.later = c->ride.posted;
	if (!remora_coro_self()) {
		if (c->ep)
			remora_rpc_poll(c->ep);
		return;
	}
	for (unsigned i = 0; i < (spins ? spins : 1); i++)
		remora_yield();
}

int lock_backoff(struct lock_cli *c, unsigned *b, unsigned cap)
{
	if (lock_down(c->svc))
		return -ECANCELED;
	lock_pause(c, 1 + (unsigned)(lock_rand(c) % *b));
	*b = *b < cap ? *b * 2 : cap;
	return 0;
}

int lock_backoff_read(struct lock_cli *c, unsigned *b, unsigned cap, remora_gaddr a,
		      uint64_t *v, uint64_t *count)
{
	int rc = lock_backoff(c, b, cap);

	return rc ? rc : lock_read(c, a, v, 8, count);
}

/* ---- grants and resets -------------------------------------------------------------------- */

void lock_wait_arm(struct lock_cli *c, uint32_t lock)
{
	c->w.lock = lock;
	c->w.epoch = c->svc->epoch[lock];
	c->w.state = LOCK_W_WAITING;
	c->w.place = 0;
}

int lock_wait_grant(struct lock_cli *c, unsigned timeout_ms, remora_gaddr poll_addr)
{
	uint64_t end = lock_now_ns() + (uint64_t)timeout_ms * 1000000u, junk;

	c->ride.later = c->ride.posted;
	for (unsigned i = 0; c->w.state == LOCK_W_WAITING && !lock_down(c->svc); i++) {
		if (poll_addr != (remora_gaddr)-1 && lock_read(c, poll_addr, &junk, 8, &c->st.acq_ops))
			break;
		if ((i & 15) == 15 && lock_now_ns() >= end)
			break;
		lock_pause(c, 1);
	}
	return c->w.state;
}

/*
 * A call to node n of the service: worker n % k of compute node n / k (node_workers k), on
 * that worker's op codes (k->op names this node's).
 */
static int svc_call(struct lock_cli *c, unsigned node, struct remora_rpc_call *k, int timeout_ms)
{
	const struct lock_svc *s = c->svc;
	unsigned per = s->cfg.node_workers ? s->cfg.node_workers : 1;

	k->op = (uint16_t)(k->op - s->cfg.rpc_op + s->op_base + 2u * (node % per));

	return remora_rpc_call(c->ep, (uint16_t)(node / per), (uint16_t)(node % per), k, 1,
			       timeout_ms);
}

int lock_grant(struct lock_cli *c, uint32_t lock, unsigned cn, unsigned coord, uint8_t epoch,
	       int32_t rts)
{
	return lock_grant_place(c, lock, cn, coord, epoch, rts, 0);
}

int lock_grant_place(struct lock_cli *c, uint32_t lock, unsigned cn, unsigned coord,
		     uint8_t epoch, int32_t rts, uint32_t tag)
{
	struct lock_svc *s = c->svc;
	struct lock_msg m = { .lock = lock, .coord = (uint16_t)coord, .epoch = epoch,
			      .rts = (uint16_t)(rts < 0 ? 0 : rts), .has_rts = rts >= 0,
			      .peer = tag };
	struct remora_rpc_call k = { .op = s->cfg.rpc_op, .req = &m, .req_len = sizeof(m) };
	int rc;

	c->st.grants_sent++;
	if (cn == s->cfg.cn) {
		deliver(s, &m);
		return 0;
	}
	rc = svc_call(c, cn, &k, (int)s->cfg.timeout_ms);
	return rc ? rc : k.status;
}

int lock_tell_succ(struct lock_cli *c, uint32_t lock, unsigned cn, unsigned coord)
{
	struct lock_svc *s = c->svc;
	struct lock_msg m = { .lock = lock, .coord = (uint16_t)coord, .kind = 1,
			      .peer = lock_cli_id(c) };
	struct remora_rpc_call k = { .op = s->cfg.rpc_op, .req = &m, .req_len = sizeof(m) };
	int rc;

	if (cn == s->cfg.cn) {
		deliver(s, &m);
		return 0;
	}
	rc = svc_call(c, cn, &k, (int)s->cfg.timeout_ms);
	return rc ? rc : k.status;
}

uint32_t lock_cli_id(const struct lock_cli *c)
{
	return ((uint32_t)c->svc->cfg.cn << 10 | c->coord) + 1;
}

/*
 * Sends RESET to cn until it answers (its holders of the old epoch are gone), the control
 * plane declares it down (its holders are gone with it), or this node shuts down. A silent
 * node is not taken as dead: a holder that is only slow must not see its lock given away.
 */
static void reset_ack(struct lock_cli *c, unsigned cn, const struct lock_msg *m)
{
	struct lock_svc *s = c->svc;
	bool deaf = lock_mut(s, MUT_RESET_WAITS_FOR_DEAD); /* waits for the dead node's answer */

	while ((deaf || !lock_node_is_down(s, cn)) && !lock_down(s)) {
		struct remora_rpc_call k = { .op = (uint16_t)(s->cfg.rpc_op + 1), .req = m,
					     .req_len = sizeof(*m) };
		/* A long bound: the answer ends the call, and a node marked down ends it too. */
		int rc = svc_call(c, cn, &k, REMORA_RPC_DEFAULT_TIMEOUT_MS);

		if ((!rc && k.status == 0) || (rc == -EHOSTDOWN && !deaf))
			return;
		lock_pause(c, 16);
	}
}

int lock_reset_broadcast(struct lock_cli *c, uint32_t lock)
{
	struct lock_svc *s = c->svc;
	struct lock_msg m = { .lock = lock, .epoch = (uint8_t)(s->epoch[lock] + 1) };

	adopt_epoch(s, lock, m.epoch);
	for (unsigned cn = 0; cn < s->cfg.n_cn; cn++)
		if (cn != s->cfg.cn)
			reset_ack(c, cn, &m);
	while (s->holders[lock] > 0 && !lock_down(s))
		lock_pause(c, 1);
	c->st.resets++;
	return 0;
}
