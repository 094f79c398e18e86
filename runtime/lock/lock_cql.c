/* SPDX-License-Identifier: MIT */
/*
 * DecLock's CQL (docs/declock.md): an 8 B header changed only by FAA (a reset's CASes aside)
 * and C 8 B entries. Acquire is one FAA, decided from the header it returns; a waiter WRITEs
 * its entry once and waits for a grant message. Release is FAA + READ of the queue in one
 * doorbell, then grants from compute node to compute node. Versions tell a late entry from a
 * written one; an overwrite, a version wrap or a timeout resets the lock under a new epoch.
 *
 * Header, MSB..LSB: qhead 32 | qsize 12 | wcnt 12 | reset id 8 (compute node + 1, 0: none).
 * Entry, MSB..LSB: coord 16 | cn 7 | mode 1 | epoch 8 | ts 16 | version 16.
 */
#include <errno.h>
#include <string.h>

#include "lock/lock.h"
#include "mutate/mutate.h"

#define H_RID_MASK 0xffull
#define H_W_SHIFT 8
#define H_S_SHIFT 20
#define H_Q_SHIFT 32
#define H_FIELD 0xfffull


static unsigned h_rid(uint64_t h) { return (unsigned)(h & H_RID_MASK); }
static unsigned h_wcnt(uint64_t h) { return (unsigned)((h >> H_W_SHIFT) & H_FIELD); }
static unsigned h_qsize(uint64_t h) { return (unsigned)((h >> H_S_SHIFT) & H_FIELD); }
static uint64_t h_qhead(uint64_t h) { return h >> H_Q_SHIFT; }

static unsigned e_ver(uint64_t e) { return (unsigned)(e & 0xffff); }
static uint8_t e_epoch(uint64_t e) { return (uint8_t)(e >> 32); }
static unsigned e_mode(uint64_t e) { return (unsigned)((e >> 40) & 1); }
static unsigned e_cn(uint64_t e) { return (unsigned)((e >> 41) & 0x7f); }
static unsigned e_coord(uint64_t e) { return (unsigned)(e >> 48); }

static unsigned vmask(const struct lock_svc *s) { return (1u << s->m_bits) - 1; }
/* The version the entry of absolute index i carries. */
static unsigned ver_of(const struct lock_svc *s, uint64_t i) { return (unsigned)(i >> s->c) & vmask(s); }

/*
 * Entries hold their version inverted (stored = version ^ all ones), so that the free value,
 * all ones, is stored as 0: a zeroed lock table is a formatted one (the declock protocol
 * keeps its table in memory nobody formats).
 */
static unsigned e_ver_of(const struct lock_svc *s, uint64_t e)
{
	return (e_ver(e) ^ vmask(s)) & vmask(s);
}

static unsigned e_ts(uint64_t e) { return (unsigned)(e >> 16) & 0xffff; }

static uint64_t entry(const struct lock_svc *s, uint64_t i, enum lock_mode m, uint8_t epoch,
		      unsigned coord, uint16_t ts)
{
	return (uint64_t)(ver_of(s, i) ^ vmask(s)) | (uint64_t)ts << 16 | (uint64_t)epoch << 32 |
	       (uint64_t)m << 40 |
	       (uint64_t)s->cfg.cn << 41 | (uint64_t)coord << 48;
}

static size_t cql_stride(unsigned cap_log2)
{
	return 8u + 8u * ((size_t)1 << cap_log2);
}

static void cql_image(const struct lock_svc *s, void *buf)
{
	uint64_t *w = buf;

	w[0] = 0;
	for (unsigned i = 0; i < s->cap; i++)
		w[1 + i] = 0; /* version all ones: matches no index before a version wrap */
}

static int cql_reset_won(struct lock_cli *c, uint32_t lock, uint64_t h);

/*
 * A reset that did not end within 8 timeouts and whose node the control plane declared down:
 * this node CASes its own reset id over the dead one's, then finishes the reset (the digest:
 * "survivors race a new CAS"). Should the resetter come back, it notices at its final CAS and
 * leaves the header alone.
 */
static int cql_takeover(struct lock_cli *c, remora_gaddr a, uint64_t h)
{
	struct lock_svc *s = c->svc;
	uint64_t mine = (h & ~H_RID_MASK) | (s->cfg.cn + 1u), old;
	uint32_t lock = (uint32_t)((a - s->cfg.base) / s->stride);
	int rc = lock_cas(c, a, h, mine, &old, &c->st.reset_ops);

	if (rc || old != h)
		return rc;
	return cql_reset_won(c, lock, mine);
}

/* An acquirer that met a reset in progress: READ the header until the reset is over. */
static int wait_reset(struct lock_cli *c, remora_gaddr a)
{
	uint64_t end = lock_now_ns() + 8ull * c->svc->cfg.timeout_ms * 1000000u, h = 1;
	unsigned back = 1;
	int rc = 0;

	while (!rc && h_rid(h)) {
		if (lock_down(c->svc))
			return -ECANCELED;
		if (lock_now_ns() > end && lock_node_is_down(c->svc, h_rid(h) - 1u))
			return cql_takeover(c, a, h); /* the resetter died: take its reset over */
		lock_pause(c, back);
		back = back < 64 ? back * 2 : 64;
		rc = lock_read(c, a, &h, 8, &c->st.reset_ops);
	}
	return rc;
}

/*
 * Resets the lock (h: the header as last seen): CAS in this node's reset id, raise the epoch
 * everywhere, WRITE the queue back to all ones, then CAS the header to 0. A node that finds
 * another resetter waits for it instead.
 */
static int cql_reset(struct lock_cli *c, uint32_t lock, uint64_t h)
{
	struct lock_svc *s = c->svc;
	remora_gaddr a = lock_addr(s, lock);
	uint64_t rid = s->cfg.cn + 1u, old;
	int rc;

	for (;;) {
		rc = lock_cas(c, a, h, (h & ~H_RID_MASK) | rid, &old, &c->st.reset_ops);
		if (rc)
			return rc;
		if (old == h)
			break;
		if (h_rid(old))
			return wait_reset(c, a);
		h = old;
	}
	return cql_reset_won(c, lock, (h & ~H_RID_MASK) | rid);
}

/* The reset CAS is won (h: the header with this node's id): tell everyone, wipe, clear. */
static int cql_reset_won(struct lock_cli *c, uint32_t lock, uint64_t h)
{
	struct lock_svc *s = c->svc;
	remora_gaddr a = lock_addr(s, lock);
	uint64_t rid = s->cfg.cn + 1u, old;
	int rc;

	lock_reset_broadcast(c, lock);
	for (unsigned i = 0; i < s->cap; i++)
		c->qbuf[i] = 0; /* version all ones */
	{
		struct remora_wr w = { .raddr = a + 8, .op = REMORA_OP_WRITE, .local = c->qbuf,
				       .len = 8u * s->cap };

		rc = lock_exec(c, &w, 1, &c->st.reset_ops);
	}
	while (!rc) {
		rc = lock_cas(c, a, h, 0, &old, &c->st.reset_ops);
		if (old == h || h_rid(old) != rid) /* done, or a survivor took the reset over */
			break;
		h = old;
	}
	return rc;
}

static void delay_entry(struct lock_cli *c)
{
	uint64_t d = c->svc->cfg.entry_delay_us, end;

	if (!d)
		return;
	end = lock_now_ns() + (lock_rand(c) % (d + 1)) * 1000u;
	while (lock_now_ns() < end)
		lock_pause(c, 1);
}

/* Waits for its grant after the entry of index i is written; the mailbox's last state. */
static int wait_turn(struct lock_cli *c, uint32_t lock, uint64_t i, enum lock_mode m,
		     uint16_t ts)
{
	struct lock_svc *s = c->svc;
	remora_gaddr a = lock_addr(s, lock);
	uint64_t e = entry(s, i, m, c->w.epoch, c->coord, ts);
	struct remora_wr w = { .raddr = a + 8 + 8u * (i & (s->cap - 1)), .op = REMORA_OP_WRITE,
			       .local = &e, .len = 8 };
	int rc;

	c->st.waited++;
	delay_entry(c);
	rc = lock_exec(c, &w, 1, &c->st.acq_ops);
	if (rc)
		return rc;
	return lock_wait_grant(c, s->cfg.timeout_ms + 2u * s->cfg.cn,
			       lock_mut(s, MUT_WAITER_POLLS) ? a : (remora_gaddr)-1);
}

static uint64_t acq_delta(enum lock_mode m)
{
	return (1ull << H_S_SHIFT) + (m == LOCK_X ? 1ull << H_W_SHIFT : 0);
}

/*
 * One attempt: 0 held, 1 aborted by a reset (try again), or an error. *ticket gets the
 * place the FAA gave.
 */
static int cql_try(struct lock_cli *c, uint32_t lock, enum lock_mode m, uint16_t ts,
		   uint64_t *ticket)
{
	struct lock_svc *s = c->svc;
	remora_gaddr a = lock_addr(s, lock);
	uint64_t old, i;
	uint8_t ep;
	int rc, st;

	lock_wait_arm(c, lock);
	ep = c->w.epoch;
	rc = lock_faa(c, a, acq_delta(m), &old, &c->st.acq_ops);
	if (rc)
		return rc;
	if (c->w.state == LOCK_W_GRANTED && !lock_mut(s, MUT_EARLY_GRANT_ABANDONS_PLACE)) {
		/*
		 * No entry yet, so no grant can be ours (one of an earlier incarnation, say): drop
		 * it and keep the place. Leaving instead would strand the FAA's increments: a place
		 * nobody writes or releases, behind which every later acquirer waits for a timeout.
		 */
		c->st.grants_dropped++;
		lock_holder_gone(s, lock);
		c->w.state = LOCK_W_WAITING;
	}
	if (h_rid(old) || c->w.state != LOCK_W_WAITING || s->epoch[lock] != ep) {
		if (c->w.state == LOCK_W_GRANTED) { /* the mutation: leaves its place stranded */
			c->st.grants_dropped++;
			lock_holder_gone(s, lock);
		}
		c->w.state = LOCK_W_IDLE;
		rc = h_rid(old) ? wait_reset(c, a) : 0;
		return rc ? rc : 1;
	}
	i = h_qhead(old) + h_qsize(old);
	if (h_qsize(old) >= s->cap || ver_of(s, i) == vmask(s)) {
		/* The queue is full (an entry would overwrite a live one) or versions wrap. */
		c->w.state = LOCK_W_IDLE;
		c->st.overflows += h_qsize(old) >= s->cap;
		c->st.wraps += h_qsize(old) < s->cap;
		rc = cql_reset(c, lock, old + acq_delta(m));
		return rc ? rc : 1;
	}
	*ticket = (uint64_t)ep << 32 | (uint32_t)i;
	lock_emit(c, lock, *ticket, m, LOCK_EV_ENQ);
	if (h_qsize(old) == 0 ||
	    (m == LOCK_S && (h_wcnt(old) == 0 || lock_mut(s, MUT_READER_IGNORES_WCNT)))) {
		c->w.state = LOCK_W_IDLE;
		s->holders[lock]++;
		return 0;
	}
	c->w.rts_set = false;
	c->w.place = lock_place_tag(i);
	st = wait_turn(c, lock, i, m, ts);
	if (st == LOCK_W_GRANTED) { /* the grant counted this node's holder */
		c->w.state = LOCK_W_IDLE;
		return 0;
	}
	c->w.state = LOCK_W_IDLE;
	lock_emit(c, lock, *ticket, m, LOCK_EV_ABORT);
	if (st < 0)
		return st;
	if (lock_down(s)) /* shut down while waiting: leave the lock to the live nodes */
		return -ECANCELED;
	if (st == LOCK_W_WAITING) { /* timed out: the holder or a grant is lost */
		c->st.timeouts++;
		rc = lock_read(c, a, &old, 8, &c->st.reset_ops);
		if (!rc && !h_rid(old) && s->epoch[lock] == ep)
			rc = cql_reset(c, lock, old);
		return rc ? rc : 1;
	}
	return 1;
}

int lock_cql_acquire(struct lock_cli *c, uint32_t lock, enum lock_mode m, uint16_t ts,
		     struct lock_hold *h)
{
	uint64_t ops0 = c->st.acq_ops, ticket = 0, n;
	int rc, tries = 0;

	if (lock_down(c->svc))
		return -ECANCELED;
	/* Aborted by a reset: back off (the queue overflowed, others retry too), then again. */
	while ((rc = cql_try(c, lock, m, ts, &ticket)) == 1) {
		if (lock_down(c->svc)) {
			rc = -ECANCELED;
			break;
		}
		if (++tries > 64)
			break;
		lock_pause(c, 1 + (unsigned)(lock_rand(c) % (8u << (tries < 6 ? tries : 6))));
	}
	if (rc == 1)
		rc = -ETIMEDOUT;
	n = c->st.acq_ops - ops0;
	if (tries) { /* an acquisition that met a reset: its verbs are the reset's */
		c->st.acq_ops -= n;
		c->st.reset_ops += n;
		c->st.reset_acq++;
	} else if (n > c->st.acq_ops_max) {
		c->st.acq_ops_max = n;
	}
	if (rc)
		return rc;
	c->st.acquires++;
	*h = (struct lock_hold){ .lock = lock, .mode = (uint8_t)m, .epoch = (uint8_t)(ticket >> 32),
				 .ticket = ticket };
	return 0;
}

static int cql_acquire(struct lock_cli *c, uint32_t lock, enum lock_mode m, struct lock_hold *h)
{
	int rc = lock_cql_acquire(c, lock, m, 0, h);

	if (!rc)
		lock_emit(c, lock, h->ticket, m, LOCK_EV_GRANT);
	return rc;
}

/* ---- release ---------------------------------------------------------------------------- */

struct rel {
	struct lock_cli *c;
	uint32_t lock;
	uint8_t epoch;
	uint64_t qh;     /* qhead before the pop */
	unsigned qs, w;  /* qsize and wcnt before the pop */
	unsigned fetches;
	uint64_t t0;     /* the first refetch's time */
};

static bool valid(const struct rel *r, uint64_t i)
{
	const struct lock_svc *s = r->c->svc;
	uint64_t e = r->c->qbuf[i & (s->cap - 1)];

	return e_ver_of(s, e) == ver_of(s, i) && e_epoch(e) == r->epoch;
}

/* An entry newer than index i sits in its slot: the queue was overwritten. */
static bool overwritten(const struct rel *r, uint64_t i)
{
	const struct lock_svc *s = r->c->svc;
	uint64_t e = r->c->qbuf[i & (s->cap - 1)];
	unsigned d = (e_ver_of(s, e) - ver_of(s, i)) & vmask(s);

	return e_ver_of(s, e) != vmask(s) && d != 0 && d <= vmask(s) / 2;
}

/* READs the queue again: 0, 1 (give up: reset instead), or an error. */
static int refetch(struct rel *r)
{
	struct lock_cli *c = r->c;
	remora_gaddr a = lock_addr(c->svc, r->lock);

	if (c->svc->epoch[r->lock] != r->epoch || lock_down(c->svc)) /* reset meanwhile */
		return 2;
	/*
	 * The artifact gives up after 0x2000 refetches (about 16 ms of RDMA READs); here READs
	 * can be memcpys, so the bound is the waiters' own timeout, with backoff between READs.
	 */
	if (!r->fetches++)
		r->t0 = lock_now_ns();
	else if (lock_now_ns() - r->t0 > (uint64_t)c->svc->cfg.timeout_ms * 1000000u)
		return 1;
	c->st.refetches++;
	lock_pause(c, r->fetches < 64 ? r->fetches : 64);
	return lock_read(c, a + 8, c->qbuf, 8u * c->svc->cap, &c->st.rel_ops);
}

/*
 * A grant that cannot be delivered (its node is down or silent) is not the releaser's failure:
 * the lock stays with a waiter that is gone, and the waiters behind it time out and reset.
 */
static int grant_at(struct rel *r, uint64_t i, int32_t rts)
{
	uint64_t e = r->c->qbuf[i & (r->c->svc->cap - 1)];

	r->c->st.grants_lost += lock_grant_place(r->c, r->lock, e_cn(e), e_coord(e), r->epoch, rts,
						 lock_place_tag(i)) != 0;
	return 0;
}

/* The earliest timestamp among the valid entries of [from, to), or -1 (hierarchical mode). */
static int32_t earliest_ts(const struct rel *r, uint64_t from, uint64_t to)
{
	int32_t best = -1;

	for (uint64_t j = from; j < to; j++) {
		unsigned t = e_ts(r->c->qbuf[j & (r->c->svc->cap - 1)]);

		if (valid(r, j) && (best < 0 || lock_ts_before((uint16_t)t, (uint16_t)best)))
			best = (int32_t)t;
	}
	return best;
}

/* Waits until entry i is valid: 0, 1 (reset instead), 2 (a mutation gave up), or an error. */
static int await_valid(struct rel *r, uint64_t i)
{
	int rc = 0;

	while (!rc && !valid(r, i)) {
		/*
		 * An overwrite: the waiting reader at i was passed (readers that joined at once popped
		 * its place) and its slot reused; who it was is lost, so reset. Or a place whose
		 * version wraps: its acquirer resets, no entry.
		 */
		if (overwritten(r, i)) {
			r->c->st.reader_passed++;
			return 1;
		}
		if (ver_of(r->c->svc, i) == vmask(r->c->svc))
			return 1;
		if (lock_mut(r->c->svc, MUT_RELEASE_NO_REFETCH))
			return 2;
		rc = refetch(r);
	}
	return rc;
}

/* The last valid writer of the snapshot (for the grant_out_of_order mutation). */
static uint64_t last_x(const struct rel *r, uint64_t s1)
{
	uint64_t best = s1;

	for (uint64_t j = s1; j < r->qh + r->qs; j++)
		if (valid(r, j) && e_mode(r->c->qbuf[j & (r->c->svc->cap - 1)]))
			best = j;
	return best;
}

/*
 * A place of [from, to) holds a newer entry: the head went past that place. An entry is
 * written only when fewer than C places are queued, so its slot's older place was popped.
 */
static bool head_passed(const struct rel *r, uint64_t from, uint64_t to)
{
	for (uint64_t j = from; j < to; j++)
		if (overwritten(r, j))
			return true;
	return false;
}

/* A reader left: tell the next in line only if it is a writer now at the head. */
static int release_s(struct rel *r)
{
	uint64_t s1 = r->qh + 1, end = r->qh + r->qs;
	int rc = 0;

	if (r->w == 0)
		return 0;
	for (;;) {
		unsigned nx = 0;

		if (valid(r, s1))
			return e_mode(r->c->qbuf[s1 & (r->c->svc->cap - 1)])
				       ? grant_at(r, s1, earliest_ts(r, s1 + 1, end))
				       : 0;
		/*
		 * The head went past s1 while this release refetched (the lock moved on by C
		 * places). A writer at s1 would still wait for this release's grant, and nobody
		 * else holds before it: s1 was a reader holder, nothing to grant. Not an overwrite.
		 */
		if (head_passed(r, s1, end))
			return lock_mut(r->c->svc, MUT_REUSE_IS_OVERFLOW) ? 1 : 0;
		if (lock_mut(r->c->svc, MUT_RELEASE_NO_REFETCH))
			return 0;
		for (uint64_t j = s1; j < end; j++)
			if (ver_of(r->c->svc, j) == vmask(r->c->svc))
				return 1;
		for (uint64_t j = s1; j < end; j++)
			nx += valid(r, j) && e_mode(r->c->qbuf[j & (r->c->svc->cap - 1)]);
		if (nx == r->w) /* every writer is visible: the entry at s1 is a reader holder */
			return 0;
		if ((rc = refetch(r)) != 0)
			return rc == 2 ? 0 : rc;
	}
}

/* A writer left: grant the next writer, or the run of readers up to the next writer. */
static int release_x(struct rel *r)
{
	uint64_t s1 = r->qh + 1, end = r->qh + r->qs;
	int rc = await_valid(r, s1);

	if (rc)
		return rc == 2 ? 0 : rc;
	uint64_t run = s1 + 1; /* grants go to [s1, run) */
	int32_t rts;

	if (e_mode(r->c->qbuf[s1 & (r->c->svc->cap - 1)]) || r->qs == 2) {
		uint64_t to = lock_mut(r->c->svc, MUT_GRANT_OUT_OF_ORDER) ? last_x(r, s1) : s1;

		return grant_at(r, to, earliest_ts(r, s1 + 1, end));
	}
	for (; run < end; run++) { /* the run of readers up to the next writer */
		rc = await_valid(r, run);
		if (rc)
			return rc == 2 ? 0 : rc;
		if (e_mode(r->c->qbuf[run & (r->c->svc->cap - 1)]))
			break;
	}
	rts = earliest_ts(r, run, end);
	for (uint64_t j = s1; j < run; j++)
		grant_at(r, j, rts);
	return 0;
}

int lock_cql_release(struct lock_cli *c, const struct lock_hold *h)
{
	struct lock_svc *s = c->svc;
	remora_gaddr a = lock_addr(s, h->lock);
	uint64_t old = 0;
	struct remora_wr w[2] = {
		{ .raddr = a, .op = REMORA_OP_FAA, .local = &old,
		  .swap = (1ull << H_Q_SHIFT) - (1ull << H_S_SHIFT) -
			  (h->mode == LOCK_X ? 1ull << H_W_SHIFT : 0) },
		{ .raddr = a + 8, .op = REMORA_OP_READ, .local = c->qbuf, .len = 8u * s->cap },
	};
	struct rel r = { .c = c, .lock = h->lock, .epoch = h->epoch };
	int rc;

	if (h->epoch != s->epoch[h->lock]) { /* a reset took the lock: nothing to give back */
		lock_holder_gone(s, h->lock);
		return 0;
	}
	rc = lock_exec(c, w, 2, &c->st.rel_ops);
	lock_holder_gone(s, h->lock);
	if (rc || h_rid(old) || h_qsize(old) <= 1)
		return rc;
	r.qh = h_qhead(old);
	r.qs = h_qsize(old);
	r.w = h_wcnt(old);
	if (r.qs > s->cap) /* an acquirer overflowed the queue and resets it */
		return 0;
	rc = h->mode == LOCK_X ? release_x(&r) : release_s(&r);
	if (rc == 1) {
		rc = lock_read(c, a, &old, 8, &c->st.reset_ops);
		if (!rc && !h_rid(old) && s->epoch[h->lock] == h->epoch)
			rc = cql_reset(c, h->lock, old);
	}
	return rc > 0 ? 0 : rc;
}

const struct lock_ops lock_type_declock = {
	.size = sizeof(struct lock_ops),
	.name = "declock",
	.stride = cql_stride,
	.image = cql_image,
	.acquire = cql_acquire,
	.release = lock_cql_release,
};
