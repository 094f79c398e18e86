/* SPDX-License-Identifier: MIT */
/*
 * The data path: validation, posting, completions, the cost layer, waiters and the synchronous
 * helpers. The fast path (profile none, no fault injection) takes no lock, makes no system call
 * and allocates nothing: a scan of at most REMORA_MAX_REGIONS regions per verb, one indirect call
 * per batch, plain counter increments and a ring of completions.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core.h"
#include "direct.h"
#include "mutate.h"
#include "prof/prof.h"

#define ATOMIC_OPS ((1u << REMORA_OP_CAS) | (1u << REMORA_OP_FAA) | (1u << REMORA_OP_MCAS))
#define WR_FLAGS (REMORA_WR_FENCE | REMORA_WR_DURABLE)

static inline uint32_t wr_len(const struct remora_wr *wr)
{
	return ((1u << wr->op) & ATOMIC_OPS) ? 8 : wr->len;
}

/* Why a verb is refused, as a message; only reached on the error path. */
static __attribute__((noinline, cold)) int refuse(struct remora_transport *tp, unsigned i,
						   const struct remora_wr *wr, int code)
{
	uint32_t len = wr->op < REMORA_OP__COUNT ? wr_len(wr) : wr->len; /* op may be invalid */

	return rt_error(tp, code, "verb %u (%s node %u off %#llx len %u key %#x): %s", i,
			remora_op_name((enum remora_op)wr->op), remora_gaddr_node(wr->raddr),
			(unsigned long long)remora_gaddr_off(wr->raddr), len, wr->rkey,
			remora_strerror(code));
}

/* The rkey check of RDMA, done in software for every backend. */
static inline int validate(const struct remora_transport *tp, const struct remora_wr *wr)
{
	uint16_t node = remora_gaddr_node(wr->raddr);
	uint64_t off = remora_gaddr_off(wr->raddr);
	const struct rt_node *n;
	uint32_t len;

	if (unlikely(wr->op >= REMORA_OP__COUNT || (wr->flags & ~WR_FLAGS)))
		return -EINVAL;
	if (unlikely(!((1u << wr->op) & tp->ops_mask)))
		return -EOPNOTSUPP;
	if (unlikely(node >= REMORA_MAX_MN))
		return -REMORA_ENODE;
	n = &tp->nodes[node];
	if (unlikely(!n->attached))
		return -REMORA_ENODE;
	len = wr_len(wr);
	if (unlikely(len && !wr->local && !((1u << wr->op) & ATOMIC_OPS)))
		return -EINVAL;
	for (uint32_t r = 0; r < n->nregions; r++) {
		const struct rt_region *reg = &n->regions[r];

		if (reg->key != wr->rkey)
			continue;
		if (unlikely(len == 8 && (off & 7) && ((1u << wr->op) & ATOMIC_OPS)))
			return -REMORA_EALIGN;
		if (likely(off >= reg->off && len <= reg->len && off - reg->off <= reg->len - len))
			return 0;
		/* Mutation skip_bounds_check: stay inside the node's mapping, skip the region. */
		if (unlikely(mut_on(tp->mutations, MUT_SKIP_BOUNDS_CHECK)) && len <= n->bytes &&
		    off <= n->bytes - len)
			return 0;
		return -REMORA_EBOUNDS;
	}
	return -REMORA_EBADKEY;
}

/*
 * The common verb in few instructions: an allowed op and flags, in bounds of the node's first
 * region, with a local buffer where one is needed. fast_ok accepts the verb exactly as
 * validate() would; false says nothing, and validate() then gives the verdict (other regions,
 * refusals, the mutation). Measured on shm: the full check was a quarter of a verb's cost in
 * cache.
 *
 * The node's key and bounds come from one seqlock read (rt_node_fast_set), taken once per
 * run of verbs to one node: a batch of 16 to one node read them 16 times, each behind a
 * compare of the sequence word. A view read at the start of a batch is as good as one read
 * per verb: the whole batch is checked against the table of one moment either way.
 */
struct fast_view {
	uint64_t node; /* REMORA_MAX_MN: nothing loaded yet */
	uint64_t key, lo, hi;
	bool ok;       /* a consistent publication was read */
};

static inline __attribute__((always_inline)) void fast_load(const struct remora_transport *tp,
							    struct fast_view *v, uint64_t node)
{
	const struct rt_node *n = &tp->nodes[node];
	uint64_t seq;

	v->node = node;
	/* Acquire loads (plain loads on x86) keep the second look at the sequence word after
	 * them. */
	seq = __atomic_load_n(&n->fast_seq, __ATOMIC_ACQUIRE);
	v->key = __atomic_load_n(&n->fast_key, __ATOMIC_ACQUIRE);
	v->lo = __atomic_load_n(&n->fast_lo, __ATOMIC_ACQUIRE);
	v->hi = __atomic_load_n(&n->fast_hi, __ATOMIC_ACQUIRE);
	v->ok = !(seq & 1) && __atomic_load_n(&n->fast_seq, __ATOMIC_RELAXED) == seq;
}

static inline __attribute__((always_inline)) bool fast_ok(const struct remora_transport *tp,
							  struct fast_view *v,
							  const struct remora_wr *wr)
{
	uint64_t node = wr->raddr >> REMORA_GADDR_OFF_BITS, off = remora_gaddr_off(wr->raddr);
	uint32_t op = wr->op, bit = 1u << (op & 31);
	uint64_t len;

	if (unlikely((node >= REMORA_MAX_MN) | (op > 31) | !(bit & tp->ops_mask) |
		     ((wr->flags & ~WR_FLAGS) != 0)))
		return false;
	if (node != v->node)
		fast_load(tp, v, node);
	if (unlikely(!v->ok || v->key != (RT_NODE_FAST | wr->rkey)))
		return false;
	if (bit & ATOMIC_OPS) {
		if (unlikely(off & 7))
			return false;
		len = 8;
	} else {
		len = wr->len;
		if (unlikely(len && !wr->local))
			return false;
	}
	return off >= v->lo && off + len <= v->hi;
}

static inline void fill_cqe(struct remora_cqe *c, const struct remora_wr *wr, int32_t status)
{
	c->wr_id = wr->wr_id;
	c->status = status;
	c->op = wr->op;
	c->_pad = 0;
	c->node = remora_gaddr_node(wr->raddr);
}

/* Cost model on: each completion joins its node's FIFO with the time it becomes visible. */
static void cost_enqueue(struct remora_chan *ch, const struct remora_wr *wrs, unsigned n)
{
	struct remora_transport *tp = ch->tp;
	struct rt_costq *q = ch->costq;
	uint64_t now = rt_cost_now();

	for (unsigned i = 0; i < n; i++) {
		const struct remora_wr *wr = &wrs[i];
		uint16_t node = remora_gaddr_node(wr->raddr);
		enum rt_cost_class c = rt_cost_class_of((enum remora_op)wr->op);
		uint32_t s = q->free_head;
		struct rt_pend *p = &q->slots[s];
		struct rt_cost_server *srv = &tp->cost_seg->busy[node][c];

		q->free_head = p->next;
		fill_cqe(&p->cqe, wr, ch->status[i]);
		if (unlikely(ch->cost_exempt)) {
			p->visible = now;
		} else {
			p->visible = rt_cost_verb(tp->cost, (enum remora_op)wr->op, wr->flags, now,
						  &srv->busy_until, &q->last_visible[node]);
			if (tp->cost->svc_ns[c]) /* what utilization is computed from */
				__atomic_fetch_add(&srv->charged, tp->cost->svc_ns[c],
						   __ATOMIC_RELAXED);
		}
		p->next = UINT32_MAX;
		if (q->active & (1u << node))
			q->slots[q->tail[node]].next = s;
		else
			q->head[node] = s;
		q->tail[node] = s;
		q->active |= 1u << node;
	}
}

/* Verbs of one (node, op) share their counters: node above the op's 8 bits. */
static inline uint64_t count_tag(const struct remora_wr *wr)
{
	return (wr->raddr >> REMORA_GADDR_OFF_BITS) << 8 | wr->op;
}

/*
 * The verbs and bytes counters of a batch, one add per run of verbs with the same node and
 * op: the adds of a run to one counter form a chain through memory (each load waits for the
 * store before it), which cost more than a verb's own copy at batch 16 in cache.
 */
static inline __attribute__((always_inline)) void count_batch(struct remora_chan *ch,
							      const struct remora_wr *wrs,
							      unsigned n)
{
	unsigned i = 0;

	while (i < n) {
		uint64_t tag = count_tag(&wrs[i]);
		uint64_t verbs = 1, bytes = wr_len(&wrs[i]);
		unsigned j = i + 1;

		for (; j < n && count_tag(&wrs[j]) == tag; j++) {
			verbs++;
			bytes += wr_len(&wrs[j]);
		}
		RT_COUNT(ch->cnt.verbs[tag >> 8][tag & 0xff], verbs);
		RT_COUNT(ch->cnt.bytes[tag >> 8][tag & 0xff], bytes);
		i = j;
	}
}

/* Hands the validated batch to the backend and turns statuses into completions. */
static inline __attribute__((always_inline)) int post_batch_inline(struct remora_chan *ch,
								    const struct remora_wr *wrs,
								    unsigned n)
{
	int rc;

	rc = ch->post(ch->priv, wrs, n, ch->status, ch->tp->pflags);
	if (unlikely(rc))
		return rc;
	ch->outstanding += n;
	RT_COUNT(ch->cnt.doorbells, 1);
	if (unlikely(!ch->inline_cq || ch->costq)) {
		count_batch(ch, wrs, n);
		if (ch->costq)
			cost_enqueue(ch, wrs, n);
		return 0;
	}
	for (unsigned i = 0; i < n; i++)
		fill_cqe(&ch->cq[(ch->cq_tail + i) & ch->cq_mask], &wrs[i], ch->status[i]);
	count_batch(ch, wrs, n);
	ch->cq_tail += n;
	return 0;
}

static __attribute__((noinline)) int post_batch(struct remora_chan *ch,
						const struct remora_wr *wrs, unsigned n)
{
	return post_batch_inline(ch, wrs, n);
}

/* Fault injection: the process dies as it posts its Nth verb, the verbs before it applied. */
static int post_counted(struct remora_chan *ch, const struct remora_wr *wrs, unsigned n)
{
	uint64_t die = __atomic_load_n(&rt_die_at_verb, __ATOMIC_RELAXED);
	uint64_t first = rt_fault_verbs(n) + 1;

	if (die >= first && die < first + n) {
		unsigned before = (unsigned)(die - first);

		if (before)
			post_batch(ch, wrs, before);
		rt_fault_die();
	}
	return post_batch(ch, wrs, n);
}

/*
 * Every verb of the batch, as the target's RNIC would check it: 0 or the first refusal.
 * Inlined into its two callers: on shm and pmem the call itself was a visible part of a verb.
 */
static inline __attribute__((always_inline)) int validate_batch(struct remora_transport *tp,
								const struct remora_wr *wrs,
								unsigned n)
{
	struct fast_view v = { .node = REMORA_MAX_MN };

	for (unsigned i = 0; i < n; i++) {
		int rc;

		if (likely(fast_ok(tp, &v, &wrs[i])))
			continue;
		rc = validate(tp, &wrs[i]);
		if (unlikely(rc))
			return refuse(tp, i, &wrs[i], rc);
	}
	return 0;
}

/* A channel broken by the verb deadline refuses every verb; the reason stays in errmsg. */
static __attribute__((noinline, cold)) int refuse_broken(struct remora_chan *ch)
{
	return ch->broken;
}

static inline int post_checked(struct remora_chan *ch, const struct remora_wr *wrs, unsigned n)
{
	struct remora_transport *tp = ch->tp;
	int rc;

	if (unlikely(ch->broken))
		return refuse_broken(ch);
	if (unlikely(n == 0))
		return 0;
	if (unlikely(n > ch->max_batch))
		return rt_error(tp, -EINVAL, "batch of %u verbs exceeds max_batch %u", n,
				ch->max_batch);
	if (unlikely(ch->outstanding + n > ch->cq_cap))
		return -EAGAIN;
	rc = validate_batch(tp, wrs, n);
	if (unlikely(rc))
		return rc;
	if (unlikely(__atomic_load_n(&rt_die_at_verb, __ATOMIC_RELAXED)))
		return post_counted(ch, wrs, n);
	return post_batch_inline(ch, wrs, n);
}

REMORA_API int remora_post(struct remora_chan *ch, const struct remora_wr *wrs, unsigned n)
{
	unsigned layer = prof_enter(PROF_TRANSPORT);
	int rc = post_checked(ch, wrs, n);

	prof_leave(layer);
	return rc;
}

uint32_t rt_exec_slow;

void rt_exec_slow_set(uint32_t bit, bool on)
{
	if (on)
		__atomic_fetch_or(&rt_exec_slow, bit, __ATOMIC_RELAXED);
	else
		__atomic_fetch_and(&rt_exec_slow, ~bit, __ATOMIC_RELAXED);
}

void rt_transport_inline_exec(int on)
{
	rt_exec_slow_set(RT_SLOW_INLINE_OFF, !on);
}

/*
 * Inline completion (direct.h). The conditions make it indistinguishable from post + poll:
 * the backend has applied the verbs when post returns, no cost model delays them, and the
 * queue is empty, so the caller's poll would deliver exactly these completions, in order.
 * Fault injection (die at the Nth verb, a lost completion) keeps the counted path.
 */
static inline __attribute__((always_inline)) bool inline_applies(const struct remora_chan *ch,
								 unsigned n)
{
	/* One test for all: n - 1 wraps for n == 0. */
	return !(!ch->direct | (ch->cq_head != ch->cq_tail) | (n - 1 >= ch->max_batch) |
		 (__atomic_load_n(&rt_exec_slow, __ATOMIC_RELAXED) != 0));
}

/* The first negative status of a batch, in posting order, or 0: one OR per verb when all
 * succeeded. */
static inline __attribute__((always_inline)) int first_failed(const int32_t *status, unsigned n)
{
	int32_t any = 0;

	for (unsigned i = 0; i < n; i++)
		any |= status[i];
	if (likely(any >= 0))
		return 0;
	for (unsigned i = 0;; i++)
		if (status[i] < 0)
			return status[i];
}

static inline __attribute__((always_inline)) bool exec_inline_n(struct remora_chan *ch,
							       struct remora_wr *wrs, unsigned n,
							       int *rc)
{
	if (unlikely(!inline_applies(ch, n)))
		return false;
	*rc = validate_batch(ch->tp, wrs, n);
	if (unlikely(*rc))
		return true;
	*rc = ch->post(ch->priv, wrs, n, ch->status, ch->tp->pflags);
	if (unlikely(*rc))
		return true;
	RT_COUNT(ch->cnt.doorbells, 1);
	count_batch(ch, wrs, n);
	*rc = first_failed(ch->status, n);
	return true;
}

/* The batch of one, the most common, compiled apart: its loops fold away. */
static inline __attribute__((always_inline)) bool exec_inline(struct remora_chan *ch,
							     struct remora_wr *wrs, unsigned n,
							     int *rc)
{
	if (n == 1)
		return exec_inline_n(ch, wrs, 1, rc);
	return exec_inline_n(ch, wrs, n, rc);
}

bool rt_transport_prefetch(struct remora_chan *ch, const struct remora_wr *wrs, unsigned n)
{
	/* exec_inline's conditions, so that a batch that will be queued anyway is not delayed */
	if (!ch->tp->ops.prefetch || !inline_applies(ch, n))
		return false;
	ch->tp->ops.prefetch(ch->priv, wrs, n);
	return true;
}

/* exec_inline, counted as transport time (runtime/prof); inlined into remora_exec too. */
static inline __attribute__((always_inline)) bool exec_inline_marked(struct remora_chan *ch,
								    struct remora_wr *wrs,
								    unsigned n, int *rc)
{
	unsigned layer = prof_enter(PROF_TRANSPORT);
	bool done = exec_inline(ch, wrs, n, rc);

	prof_leave(layer);
	return done;
}

bool rt_transport_exec_inline(struct remora_chan *ch, struct remora_wr *wrs, unsigned n,
			      int *rc)
{
	return exec_inline_marked(ch, wrs, n, rc);
}

static int cost_poll(struct remora_chan *ch, struct remora_cqe *cqes, unsigned max)
{
	struct rt_costq *q = ch->costq;
	uint32_t active = q->active;
	uint64_t now;
	unsigned got = 0;

	if (!active)
		return 0;
	now = rt_cost_now();
	while (active && got < max) {
		unsigned node = (unsigned)__builtin_ctz(active);
		uint32_t s = q->head[node];

		active &= active - 1;
		while (got < max && q->slots[s].visible <= now) {
			struct rt_pend *p = &q->slots[s];
			uint32_t next = p->next;

			cqes[got++] = p->cqe;
			p->next = q->free_head;
			q->free_head = s;
			if (next == UINT32_MAX) {
				q->active &= ~(1u << node);
				break;
			}
			s = next;
			q->head[node] = s;
		}
	}
	return (int)got;
}

/* ---- the verb deadline ------------------------------------------------------------------ */

/* Empty polls between two looks at the clock while verbs are in flight. */
#define DEADLINE_POLLS 64u

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* $REMORA_LOSE_COMPLETION: the chosen completion leaves cqes[0..got) for ch->lost. */
static __attribute__((noinline, cold)) unsigned hold_lost(struct remora_chan *ch,
							  struct remora_cqe *cqes, unsigned got)
{
	for (unsigned i = 0; i < got; i++) {
		if (!rt_fault_lose() || ch->nlost == RT_LOST_MAX)
			continue;
		ch->lost[ch->nlost++] = cqes[i];
		memmove(&cqes[i], &cqes[i + 1], (got - i - 1) * sizeof(*cqes));
		got--;
		i--;
	}
	return got;
}

/* After the break: the held-back completions end with the deadline's code. */
static __attribute__((noinline, cold)) int release_lost(struct remora_chan *ch,
							struct remora_cqe *cqes, unsigned max)
{
	unsigned k = ch->nlost < max ? ch->nlost : max;

	for (unsigned i = 0; i < k; i++) {
		cqes[i] = ch->lost[i];
		cqes[i].status = ch->broken;
	}
	memmove(ch->lost, ch->lost + k, (ch->nlost - k) * sizeof(*ch->lost));
	ch->nlost -= k;
	ch->outstanding -= k;
	return (int)k;
}

/*
 * The deadline passed: the backend ends every verb it has in flight (their completions carry
 * -ETIMEDOUT; the device touches none of their buffers again), the core's held-back ones
 * follow, and the channel refuses every later verb. Waiters are woken by those completions
 * as usual, so none returns while a verb of its batch is still in flight.
 */
static __attribute__((noinline, cold)) void chan_break(struct remora_chan *ch)
{
	struct remora_transport *tp = ch->tp;
	struct remora_cqe oldest;
	char why[192];
	unsigned inflight = ch->outstanding;

	memset(&oldest, 0, sizeof(oldest));
	tp->ops.chan_break(ch->priv, &oldest, why, sizeof(why));
	if (oldest.status == 0 && ch->nlost) {
		oldest = ch->lost[0];
		oldest.status = -ETIMEDOUT;
		snprintf(why, sizeof(why), "%u completion%s held back by REMORA_LOSE_COMPLETION",
			 ch->nlost, ch->nlost > 1 ? "s" : "");
	}
	ch->broken = -ETIMEDOUT;
	ch->direct = false;
	if (oldest.status == 0) /* nothing left in the device: completions not polled yet */
		rt_error(tp, -ETIMEDOUT,
			 "no completion for %llu ms with %u verbs not handed out: channel broken "
			 "(verb_timeout_ms); %s",
			 (unsigned long long)(tp->verb_timeout_ns / 1000000u), inflight, why);
	else
		rt_error(tp, -ETIMEDOUT,
			 "node %u: no completion for %llu ms with %u verbs in flight (oldest: %s): "
			 "channel broken (verb_timeout_ms); %s",
			 oldest.node, (unsigned long long)(tp->verb_timeout_ns / 1000000u),
			 inflight, remora_op_name((enum remora_op)oldest.op), why);
}

void rt_transport_chan_break(struct remora_chan *ch)
{
	if (!ch->broken)
		chan_break(ch);
}

/* An empty poll with verbs in flight: every DEADLINE_POLLS of them, a look at the clock. */
static __attribute__((noinline)) void deadline_check(struct remora_chan *ch)
{
	uint64_t now;

	if (++ch->idle_polls % DEADLINE_POLLS || ch->broken)
		return;
	now = now_ns();
	if (!ch->stall_since)
		ch->stall_since = now;
	else if (now - ch->stall_since >= ch->tp->verb_timeout_ns)
		chan_break(ch);
}

/*
 * A verb that failed on a node taken out (rt_transport_mn_down: it failed over) reports
 * -REMORA_ENODE, as one refused after the detach does. On rdma a verb in flight to a node
 * that died completes with an error of the RNIC's some time after the watchdog took it out;
 * the engine treats both alike (an abort, or the failover's resolution of a commit).
 */
static __attribute__((noinline, cold)) void failed_over_status(const struct remora_transport *tp,
								struct remora_cqe *cqes,
								unsigned n)
{
	uint32_t down = __atomic_load_n(&tp->mn_down, __ATOMIC_SEQ_CST);

	for (unsigned i = 0; i < n; i++)
		if (cqes[i].status < 0 && cqes[i].node < 32 && (down >> cqes[i].node & 1u))
			cqes[i].status = -REMORA_ENODE;
}

static inline int poll_cq(struct remora_chan *ch, struct remora_cqe *cqes, unsigned max)
{
	unsigned got;

	if (unlikely(ch->nlost && ch->broken))
		return release_lost(ch, cqes, max);
	if (likely(ch->inline_cq && !ch->costq)) {
		got = ch->cq_tail - ch->cq_head;
		if (got > max)
			got = max;
		for (unsigned i = 0; i < got; i++)
			cqes[i] = ch->cq[(ch->cq_head + i) & ch->cq_mask];
		ch->cq_head += got;
	} else {
		int rc = ch->inline_cq ? cost_poll(ch, cqes, max) : ch->tp->ops.poll(ch->priv, cqes, max);

		if (rc < 0)
			return rc;
		got = (unsigned)rc;
		if (unlikely(__atomic_load_n(&ch->tp->mn_down, __ATOMIC_RELAXED)))
			failed_over_status(ch->tp, cqes, got);
	}
	if (unlikely(__atomic_load_n(&rt_lose_completion, __ATOMIC_RELAXED)) && got)
		got = hold_lost(ch, cqes, got);
	ch->outstanding -= got;
	if (likely(got)) {
		if (unlikely(ch->idle_polls)) {
			ch->idle_polls = 0;
			ch->stall_since = 0;
		}
	} else if (unlikely(ch->outstanding) && ch->tp->verb_timeout_ns) {
		deadline_check(ch);
	}
	return (int)got;
}

REMORA_API int remora_poll(struct remora_chan *ch, struct remora_cqe *cqes, unsigned max)
{
	unsigned layer = prof_enter(PROF_TRANSPORT);
	int rc = poll_cq(ch, cqes, max);

	prof_leave(layer);
	return rc;
}

REMORA_API unsigned remora_chan_outstanding(const struct remora_chan *ch)
{
	return ch->outstanding;
}

REMORA_API bool remora_chan_cost_exempt(struct remora_chan *ch, bool exempt)
{
	bool was = ch->cost_exempt;

	ch->cost_exempt = exempt;
	return was;
}

/* ---- waiters and synchronous helpers --------------------------------------------------- */

#define PROGRESS_BATCH 32

REMORA_API int remora_chan_progress(struct remora_chan *ch)
{
	struct remora_cqe cqes[PROGRESS_BATCH];
	int n = remora_poll(ch, cqes, PROGRESS_BATCH);

	for (int i = 0; i < n; i++) {
		struct remora_waiter *w = (struct remora_waiter *)(uintptr_t)cqes[i].wr_id;

		if (!w)
			continue; /* wr_id 0: nobody waits for this verb */
		if (cqes[i].status < 0 && w->status == 0)
			w->status = cqes[i].status;
		if (--w->pending == 0 && w->wake)
			w->wake(w);
	}
	return n;
}

/* remora_exec when inline completion does not apply: post, then poll until all completed. */
static __attribute__((noinline)) int exec_queued(struct remora_chan *ch, struct remora_wr *wrs,
						 unsigned n)
{
	struct remora_waiter w = { .pending = 0, .status = 0 };
	unsigned done = 0;
	int rc = 0;

	for (unsigned i = 0; i < n; i++)
		wrs[i].wr_id = (uintptr_t)&w;
	while (done < n) {
		unsigned chunk = n - done < ch->max_batch ? n - done : ch->max_batch;

		rc = remora_post(ch, wrs + done, chunk);
		if (rc == -EAGAIN) {
			remora_chan_progress(ch);
			continue;
		}
		if (rc)
			break;
		w.pending += chunk;
		done += chunk;
	}
	while (w.pending)
		remora_chan_progress(ch);
	return rc ? rc : w.status;
}

REMORA_API int remora_exec(struct remora_chan *ch, struct remora_wr *wrs, unsigned n)
{
	int rc;

	return exec_inline_marked(ch, wrs, n, &rc) ? rc : exec_queued(ch, wrs, n);
}

REMORA_API int remora_read(struct remora_chan *ch, remora_gaddr src, uint32_t key, void *dst,
			   uint32_t len)
{
	struct remora_wr wr = { .raddr = src, .rkey = key, .len = len, .op = REMORA_OP_READ,
				.local = dst };

	return remora_exec(ch, &wr, 1);
}

REMORA_API int remora_write(struct remora_chan *ch, remora_gaddr dst, uint32_t key, const void *src,
			    uint32_t len)
{
	struct remora_wr wr = { .raddr = dst, .rkey = key, .len = len, .op = REMORA_OP_WRITE,
				.local = (void *)(uintptr_t)src };

	return remora_exec(ch, &wr, 1);
}

/* Atomics write *old only on success (an output argument is written only on success). */
static int exec_atomic(struct remora_chan *ch, struct remora_wr *wr, uint64_t *old)
{
	uint64_t v = 0;
	int rc;

	wr->local = &v;
	rc = remora_exec(ch, wr, 1);
	if (rc == 0 && old)
		*old = v;
	return rc;
}

REMORA_API int remora_cas(struct remora_chan *ch, remora_gaddr a, uint32_t key, uint64_t compare,
			  uint64_t swap, uint64_t *old)
{
	struct remora_wr wr = { .raddr = a, .rkey = key, .op = REMORA_OP_CAS, .compare = compare,
				.swap = swap };

	return exec_atomic(ch, &wr, old);
}

REMORA_API int remora_faa(struct remora_chan *ch, remora_gaddr a, uint32_t key, uint64_t add,
			  uint64_t *old)
{
	struct remora_wr wr = { .raddr = a, .rkey = key, .op = REMORA_OP_FAA, .swap = add };

	return exec_atomic(ch, &wr, old);
}

REMORA_API int remora_mcas(struct remora_chan *ch, remora_gaddr a, uint32_t key, uint64_t compare,
			   uint64_t compare_mask, uint64_t swap, uint64_t swap_mask, uint64_t *old)
{
	struct remora_wr wr = { .raddr = a, .rkey = key, .op = REMORA_OP_MCAS, .compare = compare,
				.swap = swap, .compare_mask = compare_mask, .swap_mask = swap_mask };

	return exec_atomic(ch, &wr, old);
}

/* ---- messages -------------------------------------------------------------------------- */

REMORA_API int remora_msg_send(struct remora_chan *ch, uint16_t dst_cn, const void *buf,
			       uint32_t len)
{
	struct remora_transport *tp = ch->tp;
	int rc;

	if (tp->bcfg.self_cn < 0)
		return rt_error(tp, -REMORA_ENODE, "msg_send: this process is not a compute node");
	if (dst_cn >= tp->bcfg.max_cn)
		return rt_error(tp, -REMORA_ENODE, "msg_send: compute node %u outside 0..%u", dst_cn,
				tp->bcfg.max_cn - 1);
	if (len > tp->caps.max_msg)
		return -EMSGSIZE;
	if (len && !buf)
		return -EINVAL;
	if (unlikely(tp->cost && tp->timed_msg)) {
		struct rt_cost_server *nic = &tp->cost_seg->msg[tp->bcfg.self_cn];
		uint64_t before, at = rt_cost_msg_claim(tp->cost, rt_cost_now(),
							&nic->busy_until, &before);

		rc = tp->ops.msg_send_at(ch->priv, dst_cn, buf, len, at);
		/*
		 * A refused send (full mailbox) gives its NIC time back. A real NIC retries an
		 * RNR-refused SEND after a timer; the callers here retry at CPU speed, and when
		 * every retry kept its slot, the claims pushed each later message further back
		 * and the mailbox stayed full: LOTUS's TPC-C at x800 went from 495 txn/s at 2
		 * coordinators per node to 0 at 8, its NIC "busy" with refusals.
		 */
		if (rc)
			rt_cost_msg_unclaim(tp->cost, &nic->busy_until, at, before);
		else if (tp->cost->msg_svc_ns)
			__atomic_fetch_add(&nic->charged, tp->cost->msg_svc_ns, __ATOMIC_RELAXED);
	} else
		rc = tp->ops.msg_send(ch->priv, dst_cn, buf, len);
	if (rc == 0)
		RT_COUNT(ch->cnt.msgs_sent, 1);
	return rc;
}

REMORA_API int remora_msg_recv(struct remora_chan *ch, uint16_t *src_cn, void *buf, uint32_t cap)
{
	struct remora_transport *tp = ch->tp;
	int rc;

	if (tp->bcfg.self_cn < 0)
		return rt_error(tp, -REMORA_ENODE, "msg_recv: this process is not a compute node");
	if (unlikely(tp->cost && tp->timed_msg))
		rc = tp->ops.msg_recv_at(ch->priv, src_cn, buf, cap, rt_cost_now());
	else
		rc = tp->ops.msg_recv(ch->priv, src_cn, buf, cap);
	if (rc >= 0)
		RT_COUNT(ch->cnt.msgs_recv, 1);
	return rc;
}
