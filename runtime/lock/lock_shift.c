/* SPDX-License-Identifier: MIT */
/*
 * ShiftLock-style reader-writer queue lock (the MCS-style baseline, docs/declock.md): one 8 B
 * word, MSB..LSB: tail 24 (id of the last writer queued, 0: none) | readers 40 (reader
 * holders). A writer swaps itself into the tail with CAS; with a predecessor it tells it by
 * message and waits for the hand-over message (no memory-node polling); without one it READs
 * until the readers that came before it have left. A reader FAAs +1 and holds when no writer
 * is queued; otherwise it takes its +1 back and READs until the writer queue is empty, then
 * tries again (readers are counted and re-check on the memory node). A writer's release hands
 * over to its successor by message (0 memory-node verbs), or CASes the tail back to 0.
 * Decided here, not in the paper's text: no phase switch, so a stream of writers holds readers
 * off; a writer whose predecessor died times out (-ETIMEDOUT) instead of repairing the queue.
 */
#include <errno.h>

#include "lock/lock.h"

#define T_SHIFT 40
#define R_MASK ((UINT64_C(1) << T_SHIFT) - 1)

static uint32_t tail(uint64_t v) { return (uint32_t)(v >> T_SHIFT); }

static size_t shift_stride(unsigned cap_log2)
{
	(void)cap_log2;
	return 8;
}

static void shift_image(const struct lock_svc *s, void *buf)
{
	(void)s;
	*(uint64_t *)buf = 0;
}

#define BACKOFF_CAP 64 /* yields */

static int acquire_s(struct lock_cli *c, remora_gaddr a)
{
	uint64_t v, end = lock_now_ns() + (uint64_t)c->svc->cfg.timeout_ms * 10000000u;
	unsigned b = 1;
	int rc;

	for (;;) {
		rc = lock_faa(c, a, 1, &v, &c->st.acq_ops);
		if (rc || tail(v) == 0)
			return rc;
		rc = lock_faa(c, a, (uint64_t)0 - 1, &v, &c->st.acq_ops);
		while (!rc && tail(v) != 0) {
			if (lock_now_ns() > end)
				return -ETIMEDOUT; /* a writer that never leaves must not wedge us */
			rc = lock_backoff_read(c, &b, BACKOFF_CAP, a, &v, &c->st.acq_ops);
		}
		if (rc)
			return rc;
	}
}

static int acquire_x(struct lock_cli *c, uint32_t lock, remora_gaddr a)
{
	uint64_t me = lock_cli_id(c), v = 0, old;
	unsigned b = 1;
	uint32_t prev;
	int rc;

	/*
	 * One successor slot per client: a second X acquisition would wipe the notice for the
	 * first lock, whose release would then never hand over. Refuse it instead.
	 */
	if (c->x_held)
		return -EDEADLK;
	c->succ_lock = lock;
	c->succ = 0;
	for (;;) { /* swap into the tail */
		rc = lock_cas(c, a, v, me << T_SHIFT | (v & R_MASK), &old, &c->st.acq_ops);
		if (rc || old == v)
			break;
		v = old;
	}
	if (rc)
		return rc;
	prev = tail(v);
	if (prev) { /* queued behind a writer: it hands over by message */
		lock_wait_arm(c, lock);
		rc = lock_tell_succ(c, lock, (prev - 1) >> 10, (prev - 1) & 1023u);
		if (!rc && lock_wait_grant(c, c->svc->cfg.timeout_ms * 10, (remora_gaddr)-1) !=
				   LOCK_W_GRANTED)
			rc = -ETIMEDOUT;
		else if (!rc)
			c->svc->holders[lock]--; /* the grant counted a holder; this type keeps none */
		c->w.state = LOCK_W_IDLE;
		return rc;
	}
	while (!rc && (v & R_MASK)) /* readers that came before: wait until they leave */
		rc = lock_backoff_read(c, &b, BACKOFF_CAP, a, &v, &c->st.acq_ops);
	return rc;
}

static int shift_acquire(struct lock_cli *c, uint32_t lock, enum lock_mode m, struct lock_hold *h)
{
	remora_gaddr a = lock_addr(c->svc, lock);
	uint64_t ops0 = c->st.acq_ops;
	int rc = m == LOCK_X ? acquire_x(c, lock, a) : acquire_s(c, a);

	if (rc)
		return rc;
	if (m == LOCK_X)
		c->x_held = lock + 1;
	c->st.waited += c->st.acq_ops - ops0 > 1;
	if (c->st.acq_ops - ops0 > c->st.acq_ops_max)
		c->st.acq_ops_max = c->st.acq_ops - ops0;
	c->st.acquires++;
	*h = (struct lock_hold){ .lock = lock, .mode = (uint8_t)m, .ticket = LOCK_TICKET_UNORDERED };
	lock_emit(c, lock, h->ticket, m, LOCK_EV_GRANT);
	return 0;
}

static int hand_over(struct lock_cli *c, uint32_t lock)
{
	uint32_t id = c->succ - 1;

	c->succ = 0;
	return lock_grant(c, lock, id >> 10, id & 1023u, c->svc->epoch[lock], -1);
}

static int release_x(struct lock_cli *c, uint32_t lock, remora_gaddr a)
{
	uint64_t me = lock_cli_id(c), v = me << T_SHIFT, old, end;
	int rc;

	if (c->succ && c->succ_lock == lock)
		return hand_over(c, lock);
	for (;;) {
		rc = lock_cas(c, a, v, v & R_MASK, &old, &c->st.rel_ops);
		if (rc || old == v)
			return rc;
		if (tail(old) != me)
			break; /* a successor swapped in: its message is on the way */
		v = old;
	}
	end = lock_now_ns() + (uint64_t)c->svc->cfg.timeout_ms * 10000000u;
	while (!(c->succ && c->succ_lock == lock)) {
		if (lock_now_ns() > end)
			return -ETIMEDOUT;
		lock_pause(c, 1);
	}
	return hand_over(c, lock);
}

static int shift_release(struct lock_cli *c, const struct lock_hold *h)
{
	remora_gaddr a = lock_addr(c->svc, h->lock);
	uint64_t old;

	if (h->mode == LOCK_X) {
		c->x_held = 0;
		return release_x(c, h->lock, a);
	}
	return lock_faa(c, a, (uint64_t)0 - 1, &old, &c->st.rel_ops);
}

const struct lock_ops lock_type_shiftlock = {
	.size = sizeof(struct lock_ops),
	.name = "shiftlock",
	.stride = shift_stride,
	.image = shift_image,
	.acquire = shift_acquire,
	.release = shift_release,
};
