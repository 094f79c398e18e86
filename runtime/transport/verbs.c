/* SPDX-License-Identifier: MIT */
/*
 * The data path: validation, posting, completions, the cost layer, waiters and the synchronous
 * helpers. The fast path (profile none, no fault injection) takes no lock, makes no system call
 * and allocates nothing: a scan of at most REMORA_MAX_REGIONS regions per verb, one indirect call
 * per batch, plain counter increments and a ring of completions.
 */
#include <errno.h>
#include <string.h>

#include "core.h"
#include "direct.h"
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
		p->visible = rt_cost_verb(tp->cost, (enum remora_op)wr->op, wr->flags, now,
					      &srv->busy_until, &q->last_visible[node]);
		if (tp->cost->svc_ns[c]) /* what utilization is computed from */
			__atomic_fetch_add(&srv->charged, tp->cost->svc_ns[c], __ATOMIC_RELAXED);
		p->next = UINT32_MAX;
		if (q->active & (1u << node))
			q->slots[q->tail[node]].next = s;
		else
			q->head[node] = s;
		q->tail[node] = s;
		q->active |= 1u << node;
	}
}

static inline void count_verb(struct remora_chan *ch, const struct remora_wr *wr)
{
	uint16_t node = remora_gaddr_node(wr->raddr);

	RT_COUNT(ch->cnt.verbs[node][wr->op], 1);
	RT_COUNT(ch->cnt.bytes[node][wr->op], wr_len(wr));
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
		for (unsigned i = 0; i < n; i++)
			count_verb(ch, &wrs[i]);
		if (ch->costq)
			cost_enqueue(ch, wrs, n);
		return 0;
	}
	for (unsigned i = 0; i < n; i++) {
		fill_cqe(&ch->cq[(ch->cq_tail + i) & ch->cq_mask], &wrs[i], ch->status[i]);
		count_verb(ch, &wrs[i]);
	}
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

/* Every verb of the batch, as the target's RNIC would check it: 0 or the first refusal. */
static inline int validate_batch(struct remora_transport *tp, const struct remora_wr *wrs,
				 unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		int rc = validate(tp, &wrs[i]);

		if (unlikely(rc))
			return refuse(tp, i, &wrs[i], rc);
	}
	return 0;
}

static inline int post_checked(struct remora_chan *ch, const struct remora_wr *wrs, unsigned n)
{
	struct remora_transport *tp = ch->tp;
	int rc;

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

static bool inline_exec_off; /* tests: rt_transport_inline_exec(0) */

void rt_transport_inline_exec(int on)
{
	__atomic_store_n(&inline_exec_off, !on, __ATOMIC_RELAXED);
}

/*
 * Inline completion (direct.h). The conditions make it indistinguishable from post + poll:
 * the backend has applied the verbs when post returns, no cost model delays them, and the
 * queue is empty, so the caller's poll would deliver exactly these completions, in order.
 * Fault injection (die at the Nth verb) keeps the counted path.
 */
static inline bool exec_inline(struct remora_chan *ch, struct remora_wr *wrs, unsigned n,
			       int *rc)
{
	if (unlikely(!ch->inline_cq || ch->costq || ch->cq_head != ch->cq_tail || n == 0 ||
		     n > ch->max_batch || __atomic_load_n(&inline_exec_off, __ATOMIC_RELAXED) ||
		     __atomic_load_n(&rt_die_at_verb, __ATOMIC_RELAXED)))
		return false;
	*rc = validate_batch(ch->tp, wrs, n);
	if (unlikely(*rc))
		return true;
	*rc = ch->post(ch->priv, wrs, n, ch->status, ch->tp->pflags);
	if (unlikely(*rc))
		return true;
	RT_COUNT(ch->cnt.doorbells, 1);
	for (unsigned i = 0; i < n; i++) {
		count_verb(ch, &wrs[i]);
		if (unlikely(ch->status[i] < 0) && *rc == 0)
			*rc = ch->status[i];
	}
	return true;
}

bool rt_transport_exec_inline(struct remora_chan *ch, struct remora_wr *wrs, unsigned n,
			      int *rc)
{
	unsigned layer = prof_enter(PROF_TRANSPORT);
	bool done = exec_inline(ch, wrs, n, rc);

	prof_leave(layer);
	return done;
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

static inline int poll_cq(struct remora_chan *ch, struct remora_cqe *cqes, unsigned max)
{
	unsigned got;

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
	}
	ch->outstanding -= got;
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

REMORA_API int remora_exec(struct remora_chan *ch, struct remora_wr *wrs, unsigned n)
{
	struct remora_waiter w = { .pending = 0, .status = 0 };
	unsigned done = 0;
	int rc = 0;

	for (unsigned i = 0; i < n; i++)
		wrs[i].wr_id = (uintptr_t)&w;
	if (rt_transport_exec_inline(ch, wrs, n, &rc))
		return rc;
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

		rc = tp->ops.msg_send_at(ch->priv, dst_cn, buf, len,
					 rt_cost_msg_claim(tp->cost, rt_cost_now(),
							       &nic->busy_until));
		/* A refused send (full mailbox) still took the NIC's time: a retry is a resend. */
		if (tp->cost->msg_svc_ns)
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
