/* SPDX-License-Identifier: MIT */
/* The NIC cost model arithmetic; formulas in cost.h. */
#include "cost.h"

#include <time.h>

static uint64_t clock_monotonic(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static rt_cost_clock_fn cost_clock = clock_monotonic;

void rt_cost_set_clock(rt_cost_clock_fn fn)
{
	__atomic_store_n(&cost_clock, fn ? fn : clock_monotonic, __ATOMIC_RELEASE);
}

uint64_t rt_cost_now(void)
{
	return __atomic_load_n(&cost_clock, __ATOMIC_ACQUIRE)();
}

static inline uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

uint64_t rt_cost_ready(const struct rt_cost_profile *p, enum rt_cost_class c,
			   uint64_t now, uint64_t busy)
{
	return max_u64(now + p->rtt_ns / 2, busy) + p->svc_ns[c];
}

uint64_t rt_cost_visible(const struct rt_cost_profile *p, uint64_t ready)
{
	return ready + (p->rtt_ns - p->rtt_ns / 2);
}

uint64_t rt_cost_claim(const struct rt_cost_profile *p, enum rt_cost_class c,
			   uint64_t now, uint64_t *busy)
{
	uint64_t old = __atomic_load_n(busy, __ATOMIC_RELAXED);
	uint64_t ready;

	if (p->svc_ns[c] == 0)
		return rt_cost_ready(p, c, now, 0); /* unlimited: nothing shared to claim */
	do {
		ready = rt_cost_ready(p, c, now, old);
	} while (!__atomic_compare_exchange_n(busy, &old, ready, true, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	return ready;
}

uint64_t rt_cost_verb(const struct rt_cost_profile *p, enum remora_op op, unsigned wr_flags,
			  uint64_t now, uint64_t *busy, uint64_t *last_visible)
{
	uint64_t visible;

	if (wr_flags & REMORA_WR_FENCE)
		now = max_u64(now, *last_visible);
	visible = rt_cost_visible(p, rt_cost_claim(p, rt_cost_class_of(op), now, busy));
	visible = max_u64(visible, *last_visible);
	*last_visible = visible;
	return visible;
}

static uint64_t msg_sent(const struct rt_cost_profile *p, uint64_t now, uint64_t busy)
{
	return max_u64(now, busy) + p->msg_svc_ns;
}

uint64_t rt_cost_msg_deliver(const struct rt_cost_profile *p, uint64_t now, uint64_t busy)
{
	return msg_sent(p, now, busy) + p->rtt_ns / 2;
}

uint64_t rt_cost_msg_claim(const struct rt_cost_profile *p, uint64_t now, uint64_t *busy,
			   uint64_t *before)
{
	uint64_t old = __atomic_load_n(busy, __ATOMIC_RELAXED);
	uint64_t sent;

	*before = old;
	if (p->msg_svc_ns == 0)
		return rt_cost_msg_deliver(p, now, 0);
	do {
		sent = msg_sent(p, now, old);
	} while (!__atomic_compare_exchange_n(busy, &old, sent, true, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	*before = old;
	return sent + p->rtt_ns / 2;
}

void rt_cost_msg_unclaim(const struct rt_cost_profile *p, uint64_t *busy, uint64_t deliver_at,
			 uint64_t before)
{
	uint64_t sent = deliver_at - p->rtt_ns / 2;

	if (p->msg_svc_ns)
		__atomic_compare_exchange_n(busy, &sent, before, false, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED);
}

uint64_t rt_cost_served(uint64_t charged, uint64_t busy_until, uint64_t now)
{
	uint64_t queued = busy_until > now ? busy_until - now : 0;

	return charged > queued ? charged - queued : 0;
}

void rt_cost_profile_scale(const struct rt_cost_profile *base, unsigned k,
			       struct rt_cost_profile *out)
{
	*out = *base;
	if (k < 1)
		k = 1;
	for (unsigned c = 0; c < REMORA_COST__NCLASS; c++)
		out->svc_ns[c] = base->svc_ns[c] * k;
	out->msg_svc_ns = base->msg_svc_ns * k;
}
