/* SPDX-License-Identifier: MIT */
/*
 * Compute-node side: attaching memory nodes, channels, posting and completing verbs.
 *
 * A channel has one completion queue and one RC QP per memory node it talks to, connected when
 * the channel opens (or at the first verb to a node attached later). Each remora verb becomes
 * one "op"; an op has at most one work request in a send queue at a time, and every op ends in
 * exactly one remora completion:
 *
 *   - A post builds one chain of work requests per memory node and rings one doorbell per
 *     node. Only the last request of a chain is signaled: RC completes a send queue in order,
 *     so its completion also completes the unsignaled requests before it (an error always
 *     produces a completion of its own).
 *   - Callers' buffers are not registered memory: small WRITEs go inline, other WRITEs and all
 *     READ and atomic results go through a registered bounce arena per channel; verbs larger
 *     than RRDMA_STAGE_MAX register the caller's buffer for their duration instead.
 *   - masked-CAS has no verb upstream: it is a READ, then CAS until the word either fails the
 *     compare under the mask or is swapped, counted with remora_backend_count_emulated(). Verbs
 *     posted after it to the same node wait behind it, so posting order still holds.
 *   - When a QP breaks, the channel reconnects once to learn why: a memory node that refuses
 *     this compute node has fenced it (-REMORA_EFENCED for that node from now on); one that
 *     accepts gets the new QP (the failed verb reports -REMORA_EBADKEY for a revoked region,
 *     else -EIO, the verbs behind it -EIO); one that does not
 *     answer is dead (-EIO until the node is attached again).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rrdma.h"

#define SEQ_BITS 48
#define SEQ_MASK ((UINT64_C(1) << SEQ_BITS) - 1)
#define NONE UINT32_MAX
#define NOSEQ UINT64_MAX
#define READY_N 512u
#define STAGE_ALIGN 64u

_Static_assert(READY_N >= RRDMA_MAX_OUTSTANDING && (READY_N & (READY_N - 1)) == 0,
	       "every op's completion fits the ready ring");
_Static_assert(REMORA_MAX_MN < (1 << (64 - SEQ_BITS)), "node fits the top of a wr_id");

enum conn_state { CONN_NONE, CONN_READY, CONN_FENCED, CONN_DEAD };
enum op_state { OP_FREE, OP_DEFERRED, OP_POSTED, OP_MCAS_READ, OP_MCAS_CAS };
enum route { ROUTE_POST, ROUTE_DEFER, ROUTE_FINISH };

struct rrdma_op {
	struct remora_wr wr;
	uint64_t seen;       /* MCAS: the word as last read */
	uint64_t stage_seq;  /* allocation record in the arena, NOSEQ: none */
	uint32_t stage_off;
	uint32_t next;       /* free list or deferred FIFO */
	struct ibv_mr *mr;   /* caller's buffer, registered for a large verb */
	uint8_t state;
	uint8_t route;
	bool inline_data;
};

struct rrdma_conn {
	uint8_t state;
	bool blocked;        /* an emulated MCAS is in flight: later verbs wait in the FIFO */
	uint16_t node;
	uint32_t gen;
	uint32_t revive;     /* the node's revive count when this connection was made */
	uint32_t breaks;     /* conn_broken() calls: handle_wc stops when one ran under it */
	int err;             /* status of verbs to a FENCED or DEAD connection */
	struct rrdma_cconn cc;
	uint64_t sq_head, sq_tail; /* sequence numbers of the oldest unreaped and the next WR */
	uint32_t defer_head, defer_tail;
	struct ibv_send_wr *first, *last; /* chain being built */
	uint32_t sq_op[RRDMA_SQ_DEPTH];
};

/* Registered bounce memory, handed out in allocation order and freed out of order. */
struct rrdma_stage {
	uint8_t *mem;
	struct ibv_mr *mr;
	uint64_t head, tail; /* byte positions; head - tail <= RRDMA_STAGE_BYTES */
	uint64_t rhead, rtail;
	struct {
		uint64_t end;
		bool done;
	} rec[RRDMA_MAX_OUTSTANDING];
};

struct rrdma_chan {
	struct rrdma_tp *t;
	struct remora_chan *ch;
	struct ibv_cq *cq;
	bool skip_fence; /* negative control: a fenced CN reconnects without its id */
	uint32_t op_free;
	uint32_t ready_head, ready_tail;
	unsigned nwr, ntouched;
	struct rrdma_stage st;
	struct rrdma_op ops[RRDMA_MAX_OUTSTANDING];
	struct remora_cqe ready[READY_N];
	struct ibv_send_wr wr[RRDMA_MAX_BATCH];
	struct ibv_sge sge[RRDMA_MAX_BATCH];
	uint16_t touched[REMORA_MAX_MN];
	struct rrdma_conn conns[REMORA_MAX_MN];
};

struct rrdma_tp *rrdma_chan_tp(void *cpriv)
{
	return ((struct rrdma_chan *)cpriv)->t;
}

/* ---- attach --------------------------------------------------------------------------------- */

int rrdma_attach(void *tpriv, const struct remora_node_desc *desc)
{
	struct rrdma_tp *t = tpriv;
	struct rrdma_node *n = &t->nodes[desc->node];
	struct rrdma_connect_args a = { .want_qp = false };
	struct sockaddr_storage ss;
	struct rrdma_cconn cc;
	char why[160];
	bool again;
	int rc;

	pthread_mutex_lock(&t->lock);
	again = n->attached && strcmp(n->locator, desc->locator) == 0;
	pthread_mutex_unlock(&t->lock);
	if (rrdma_parse_locator(desc->locator, &ss))
		return remora_backend_error(t->tp, -EINVAL,
					    "attach node %u: locator '%s' is not ip:port", desc->node,
					    desc->locator);
	/* One handshake without a QP: reachable, serving that node, and not fencing us? */
	a.dst = (struct sockaddr *)&ss;
	rrdma_wire_req_init(t, &a.req, RRDMA_KIND_CHECK, desc->node);
	rc = rrdma_connect(t, &a, &cc, why, sizeof(why));
	if (rc)
		return remora_backend_error(t->tp, rc, "attach node %u at %s via %s: %s",
					    desc->node, desc->locator, t->dev.name, why);
	pthread_mutex_lock(&t->lock);
	if (again) {
		/* Same node, same address: live connections stay; ones found dead try again. */
		__atomic_store_n(&n->revive, n->revive + 1, __ATOMIC_RELEASE);
	} else {
		n->addr = ss;
		snprintf(n->locator, sizeof(n->locator), "%s", desc->locator);
		n->attached = true;
		__atomic_store_n(&n->gen, n->gen + 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&t->lock);
	return 0;
}

int rrdma_detach(void *tpriv, uint16_t node)
{
	struct rrdma_tp *t = tpriv;
	struct rrdma_node *n = &t->nodes[node];
	int rc = 0;

	pthread_mutex_lock(&t->lock);
	if (n->attached) {
		n->attached = false;
		n->locator[0] = '\0';
		__atomic_store_n(&n->gen, n->gen + 1, __ATOMIC_RELEASE);
	} else {
		rc = -REMORA_ENODE;
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

/* ---- ops, arena, completions ------------------------------------------------------------- */

static uint32_t op_alloc(struct rrdma_chan *c)
{
	uint32_t i = c->op_free;

	c->op_free = c->ops[i].next;
	c->ops[i].next = NONE;
	c->ops[i].stage_seq = NOSEQ;
	c->ops[i].mr = NULL;
	c->ops[i].inline_data = false;
	return i;
}

static void op_release(struct rrdma_chan *c, uint32_t i)
{
	c->ops[i].state = OP_FREE;
	c->ops[i].next = c->op_free;
	c->op_free = i;
}

static int stage_alloc(struct rrdma_stage *st, uint32_t len, uint32_t *off, uint64_t *seq)
{
	uint64_t need = len ? (len + STAGE_ALIGN - 1) & ~(uint64_t)(STAGE_ALIGN - 1) : STAGE_ALIGN;
	uint64_t pos = st->head % RRDMA_STAGE_BYTES;
	uint64_t waste = pos + need > RRDMA_STAGE_BYTES ? RRDMA_STAGE_BYTES - pos : 0;

	if (st->head + waste + need - st->tail > RRDMA_STAGE_BYTES ||
	    st->rtail - st->rhead >= RRDMA_MAX_OUTSTANDING)
		return -EAGAIN;
	*off = (uint32_t)((st->head + waste) % RRDMA_STAGE_BYTES);
	st->head += waste + need;
	st->rec[st->rtail % RRDMA_MAX_OUTSTANDING].end = st->head;
	st->rec[st->rtail % RRDMA_MAX_OUTSTANDING].done = false;
	*seq = st->rtail++;
	return 0;
}

static void stage_free(struct rrdma_stage *st, uint64_t seq)
{
	st->rec[seq % RRDMA_MAX_OUTSTANDING].done = true;
	while (st->rhead < st->rtail && st->rec[st->rhead % RRDMA_MAX_OUTSTANDING].done) {
		st->tail = st->rec[st->rhead % RRDMA_MAX_OUTSTANDING].end;
		st->rhead++;
	}
}

static inline uint64_t *stage_word(struct rrdma_chan *c, const struct rrdma_op *op)
{
	return (uint64_t *)(void *)(c->st.mem + op->stage_off);
}

static inline bool is_atomic(uint8_t op)
{
	return op == REMORA_OP_CAS || op == REMORA_OP_FAA || op == REMORA_OP_MCAS;
}

/* Ends op i: results to the caller, one completion, resources back. */
static void finish(struct rrdma_chan *c, uint32_t i, int status, uint64_t atomic_old)
{
	struct rrdma_op *op = &c->ops[i];
	struct remora_cqe *q = &c->ready[c->ready_tail++ % READY_N];

	if (status == 0 && op->wr.op == REMORA_OP_READ && op->stage_seq != NOSEQ)
		memcpy(op->wr.local, c->st.mem + op->stage_off, op->wr.len);
	else if (status == 0 && is_atomic(op->wr.op) && op->wr.local)
		memcpy(op->wr.local, &atomic_old, sizeof(atomic_old));
	q->wr_id = op->wr.wr_id;
	q->status = status;
	q->op = op->wr.op;
	q->_pad = 0;
	q->node = remora_gaddr_node(op->wr.raddr);
	if (op->mr)
		ibv_dereg_mr(op->mr);
	if (op->stage_seq != NOSEQ)
		stage_free(&c->st, op->stage_seq);
	op_release(c, i);
}

/* ---- building and posting work requests -------------------------------------------------- */

static void flush_chains(struct rrdma_chan *c);
static uint32_t defer_pop(struct rrdma_conn *conn, struct rrdma_chan *c);
static void conn_broken(struct rrdma_chan *c, struct rrdma_conn *conn, enum ibv_wc_status ws);

static void set_sge(struct rrdma_chan *c, const struct rrdma_op *op, struct ibv_sge *s,
		    uint32_t len)
{
	if (op->mr) {
		s->addr = (uintptr_t)op->wr.local;
		s->lkey = op->mr->lkey;
	} else if (op->inline_data) {
		s->addr = (uintptr_t)op->wr.local;
		s->lkey = 0;
	} else {
		s->addr = (uintptr_t)(c->st.mem + op->stage_off);
		s->lkey = c->st.mr->lkey;
	}
	s->length = len;
}

/* Appends op i's next work request to its connection's chain. */
static void add_wr(struct rrdma_chan *c, struct rrdma_conn *conn, uint32_t i)
{
	struct rrdma_op *op = &c->ops[i];
	uint64_t raddr = remora_gaddr_off(op->wr.raddr);
	struct ibv_send_wr *w;
	struct ibv_sge *s;

	if (c->nwr == RRDMA_MAX_BATCH)
		flush_chains(c);
	w = &c->wr[c->nwr];
	s = &c->sge[c->nwr];
	c->nwr++;
	memset(w, 0, sizeof(*w));
	w->wr_id = ((uint64_t)conn->node << SEQ_BITS) | (conn->sq_tail & SEQ_MASK);
	conn->sq_op[conn->sq_tail++ % RRDMA_SQ_DEPTH] = i;
	w->sg_list = s;
	w->num_sge = 1;
	if (op->wr.flags & REMORA_WR_FENCE)
		w->send_flags |= IBV_SEND_FENCE;
	switch (op->wr.op) {
	case REMORA_OP_READ:
	case REMORA_OP_WRITE:
		w->opcode = op->wr.op == REMORA_OP_READ ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
		w->wr.rdma.remote_addr = raddr;
		w->wr.rdma.rkey = op->wr.rkey;
		set_sge(c, op, s, op->wr.len);
		if (op->wr.len == 0)
			w->num_sge = 0;
		if (op->inline_data)
			w->send_flags |= IBV_SEND_INLINE;
		op->state = OP_POSTED;
		return;
	case REMORA_OP_CAS:
	case REMORA_OP_FAA:
		w->opcode = op->wr.op == REMORA_OP_CAS ? IBV_WR_ATOMIC_CMP_AND_SWP :
							IBV_WR_ATOMIC_FETCH_AND_ADD;
		w->wr.atomic.remote_addr = raddr;
		w->wr.atomic.rkey = op->wr.rkey;
		w->wr.atomic.compare_add = op->wr.op == REMORA_OP_CAS ? op->wr.compare : op->wr.swap;
		w->wr.atomic.swap = op->wr.swap;
		set_sge(c, op, s, 8);
		op->state = OP_POSTED;
		return;
	default: /* MCAS: READ first, CAS from the value seen (see mcas_step) */
		w->send_flags |= IBV_SEND_SIGNALED;
		set_sge(c, op, s, 8);
		if (op->state != OP_MCAS_CAS) {
			w->opcode = IBV_WR_RDMA_READ;
			w->wr.rdma.remote_addr = raddr;
			w->wr.rdma.rkey = op->wr.rkey;
			op->state = OP_MCAS_READ;
			conn->blocked = true;
			remora_backend_count_emulated(c->ch, conn->node, REMORA_OP_READ, 1);
			return;
		}
		w->opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
		w->wr.atomic.remote_addr = raddr;
		w->wr.atomic.rkey = op->wr.rkey;
		w->wr.atomic.compare_add = op->seen;
		w->wr.atomic.swap = (op->seen & ~op->wr.swap_mask) | (op->wr.swap & op->wr.swap_mask);
		remora_backend_count_emulated(c->ch, conn->node, REMORA_OP_CAS, 1);
	}
}

/* Ends every op queued on a connection that is not READY with the connection's status. */
static void settle_dead(struct rrdma_chan *c, struct rrdma_conn *conn)
{
	while (conn->sq_head < conn->sq_tail)
		finish(c, conn->sq_op[conn->sq_head++ % RRDMA_SQ_DEPTH], conn->err, 0);
	for (uint32_t i = defer_pop(conn, c); i != NONE; i = defer_pop(conn, c))
		finish(c, i, conn->err, 0);
	conn->blocked = false;
}

/*
 * One doorbell per connection touched since the last flush; the chain's tail is signaled.
 * Failures are handled after the loop: handling them may build new chains in the scratch.
 */
static void flush_chains(struct rrdma_chan *c)
{
	uint16_t failed[REMORA_MAX_MN];
	unsigned n = c->ntouched, nf = 0;

	for (unsigned k = 0; k < n; k++) {
		struct rrdma_conn *conn = &c->conns[c->touched[k]];
		struct ibv_send_wr *bad = NULL;

		conn->last->next = NULL;
		conn->last->send_flags |= IBV_SEND_SIGNALED;
		if (conn->state != CONN_READY || ibv_post_send(conn->cc.qp, conn->first, &bad))
			failed[nf++] = conn->node;
		conn->first = conn->last = NULL;
	}
	c->ntouched = 0;
	c->nwr = 0;
	for (unsigned k = 0; k < nf; k++) {
		struct rrdma_conn *conn = &c->conns[failed[k]];

		if (conn->state == CONN_READY)
			conn_broken(c, conn, IBV_WC_GENERAL_ERR); /* the QP refused work */
		else
			settle_dead(c, conn);
	}
}

static void chain_append(struct rrdma_chan *c, struct rrdma_conn *conn, uint32_t i)
{
	add_wr(c, conn, i);
	if (!conn->first) {
		conn->first = &c->wr[c->nwr - 1];
		c->touched[c->ntouched++] = conn->node;
	} else {
		conn->last->next = &c->wr[c->nwr - 1];
	}
	conn->last = &c->wr[c->nwr - 1];
}

static void defer_push(struct rrdma_conn *conn, struct rrdma_chan *c, uint32_t i)
{
	c->ops[i].state = OP_DEFERRED;
	c->ops[i].next = NONE;
	if (conn->defer_head == NONE)
		conn->defer_head = i;
	else
		c->ops[conn->defer_tail].next = i;
	conn->defer_tail = i;
}

static uint32_t defer_pop(struct rrdma_conn *conn, struct rrdma_chan *c)
{
	uint32_t i = conn->defer_head;

	if (i != NONE) {
		conn->defer_head = c->ops[i].next;
		c->ops[i].next = NONE;
	}
	return i;
}

/* The MCAS in flight finished: post what waited behind it, up to the next MCAS. */
static void release_deferred(struct rrdma_chan *c, struct rrdma_conn *conn)
{
	while (!conn->blocked && conn->state == CONN_READY && conn->defer_head != NONE)
		chain_append(c, conn, defer_pop(conn, c));
}

/* ---- completions ---------------------------------------------------------------------------- */

static bool mcas_match(const struct remora_wr *wr, uint64_t v)
{
	return ((v ^ wr->compare) & wr->compare_mask) == 0;
}

/* The word is v: done if it fails the masked compare or the swap changes nothing, else CAS. */
static void mcas_step(struct rrdma_chan *c, struct rrdma_conn *conn, uint32_t i, uint64_t v)
{
	struct rrdma_op *op = &c->ops[i];
	uint64_t next = (v & ~op->wr.swap_mask) | (op->wr.swap & op->wr.swap_mask);

	if (!mcas_match(&op->wr, v) || next == v) {
		/* The READ or failed CAS that returned v is the linearization point. */
		conn->blocked = false;
		finish(c, i, 0, v);
		release_deferred(c, conn);
		return;
	}
	op->seen = v;
	op->state = OP_MCAS_CAS;
	chain_append(c, conn, i);
}

/* Work request of op i completed successfully (signaled, or before a signaled one). */
static void wr_done(struct rrdma_chan *c, struct rrdma_conn *conn, uint32_t i)
{
	struct rrdma_op *op = &c->ops[i];
	uint64_t v = op->stage_seq != NOSEQ ? *stage_word(c, op) : 0;

	switch (op->state) {
	case OP_MCAS_READ:
		mcas_step(c, conn, i, v);
		return;
	case OP_MCAS_CAS:
		if (v == op->seen) {
			conn->blocked = false;
			finish(c, i, 0, v);
			release_deferred(c, conn);
		} else {
			mcas_step(c, conn, i, v);
		}
		return;
	default:
		finish(c, i, 0, v);
	}
}

static int wc_code(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_REM_ACCESS_ERR:
		/* The core checked keys and bounds against the region table of attach: the
		 * memory node has deregistered the region since (docs/transport.md). */
		return -REMORA_EBADKEY;
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_LOC_LEN_ERR:
	case IBV_WC_LOC_ACCESS_ERR:
		return -EFAULT;
	default:
		return -EIO;
	}
}

static void handle_wc(struct rrdma_chan *c, const struct ibv_wc *wc)
{
	unsigned node = (unsigned)(wc->wr_id >> SEQ_BITS);
	uint64_t seq = wc->wr_id & SEQ_MASK;
	struct rrdma_conn *conn;
	uint32_t breaks;

	if (node >= REMORA_MAX_MN)
		return;
	conn = &c->conns[node];
	/* wr_ids carry the low 48 bits of the sequence number; a request of a QP already given
	 * up on lies before sq_head and is ignored. */
	seq = (seq - conn->sq_head) & SEQ_MASK;
	if (seq >= conn->sq_tail - conn->sq_head)
		return;
	seq += conn->sq_head;
	breaks = conn->breaks;
	while (conn->sq_head < seq) {
		wr_done(c, conn, conn->sq_op[conn->sq_head++ % RRDMA_SQ_DEPTH]);
		/* An emulated MCAS step may fill the scratch and flush it; if that post broke
		 * the QP, conn_broken() has settled every op, this completion's included. */
		if (conn->breaks != breaks)
			return;
	}
	if (wc->status != IBV_WC_SUCCESS) {
		conn_broken(c, conn, wc->status);
		return;
	}
	wr_done(c, conn, conn->sq_op[conn->sq_head++ % RRDMA_SQ_DEPTH]);
}

/* ---- connections ---------------------------------------------------------------------------- */

static int conn_connect(struct rrdma_chan *c, struct rrdma_conn *conn, bool anonymous)
{
	struct rrdma_tp *t = c->t;
	struct rrdma_node *nd = &t->nodes[conn->node];
	struct rrdma_connect_args a = {
		.scq = c->cq,
		.rcq = c->cq,
		.sq_depth = RRDMA_SQ_DEPTH,
		.rq_depth = 0,
		.max_inline = RRDMA_MAX_INLINE,
		.want_qp = true,
	};
	struct sockaddr_storage ss;
	char why[160], loc[128];
	bool attached;
	int rc;

	pthread_mutex_lock(&t->lock);
	ss = nd->addr;
	attached = nd->attached;
	conn->gen = nd->gen;
	conn->revive = nd->revive;
	snprintf(loc, sizeof(loc), "%s", nd->locator);
	pthread_mutex_unlock(&t->lock);
	if (!attached)
		return remora_backend_error(t->tp, -REMORA_ENODE, "node %u is not attached",
					    conn->node);
	a.dst = (struct sockaddr *)&ss;
	rrdma_wire_req_init(t, &a.req, RRDMA_KIND_VERBS, conn->node);
	if (anonymous)
		a.req.cn = 0xffff; /* RRDMA_NO_CN, same in either byte order */
	rc = rrdma_connect(t, &a, &conn->cc, why, sizeof(why));
	if (rc)
		return remora_backend_error(t->tp, rc, "node %u at %s via %s: %s", conn->node, loc,
					    t->dev.name, why);
	conn->state = CONN_READY;
	conn->err = 0;
	conn->blocked = false;
	conn->sq_head = conn->sq_tail;
	return 0;
}

/* Makes the connection to node usable before verbs are routed to it. */
static int conn_ensure(struct rrdma_chan *c, uint16_t node)
{
	struct rrdma_conn *conn = &c->conns[node];
	uint32_t gen = __atomic_load_n(&c->t->nodes[node].gen, __ATOMIC_ACQUIRE);
	uint32_t revive = __atomic_load_n(&c->t->nodes[node].revive, __ATOMIC_ACQUIRE);
	int rc;

	if (conn->state != CONN_NONE && conn->gen == gen &&
	    !(conn->state == CONN_DEAD && conn->revive != revive) &&
	    !(conn->state == CONN_FENCED && c->skip_fence))
		return 0;
	if (conn->sq_head != conn->sq_tail || conn->defer_head != NONE)
		return -EAGAIN; /* re-attached under verbs in flight: poll them out first */
	rrdma_cconn_close(&conn->cc);
	conn->state = CONN_NONE;
	rc = conn_connect(c, conn, conn->gen == gen && c->skip_fence);
	if (rc == -REMORA_EFENCED) {
		conn->state = CONN_FENCED;
		conn->err = rc;
		return 0;
	}
	return rc;
}

/* Re-issues ops (oldest first) on a fresh QP: the negative control's reconnect. */
static void repost(struct rrdma_chan *c, struct rrdma_conn *conn, const uint32_t *ops, unsigned n)
{
	for (unsigned k = 0; k < n; k++) {
		struct rrdma_op *op = &c->ops[ops[k]];

		if (op->wr.op == REMORA_OP_MCAS)
			op->state = OP_DEFERRED; /* start again from the READ */
		if (conn->blocked)
			defer_push(conn, c, ops[k]);
		else
			chain_append(c, conn, ops[k]);
	}
}

/*
 * A work request failed: the QP is in the error state and everything behind it is flushed.
 * Reconnect once to find out why (see the file comment), then settle every op of the
 * connection. May block for up to RRDMA_CONNECT_MS, on this error path only.
 */
static void conn_broken(struct rrdma_chan *c, struct rrdma_conn *conn, enum ibv_wc_status ws)
{
	uint32_t ops[RRDMA_MAX_OUTSTANDING];
	unsigned n = 0;
	int first, rest, rc;

	conn->breaks++;
	while (conn->sq_head < conn->sq_tail)
		ops[n++] = conn->sq_op[conn->sq_head++ % RRDMA_SQ_DEPTH];
	for (uint32_t i = defer_pop(conn, c); i != NONE; i = defer_pop(conn, c))
		ops[n++] = i;
	conn->blocked = false;
	rrdma_cconn_close(&conn->cc);
	conn->state = CONN_NONE;
	rc = conn_connect(c, conn, false);
	if (rc == -REMORA_EFENCED && c->skip_fence)
		rc = conn_connect(c, conn, true);
	if (rc == 0 && c->skip_fence) {
		repost(c, conn, ops, n);
		return;
	}
	if (rc == -REMORA_EFENCED) {
		conn->state = CONN_FENCED;
		first = rest = -REMORA_EFENCED;
	} else if (rc) {
		conn->state = CONN_DEAD;
		first = rest = -EIO;
	} else {
		first = wc_code(ws);
		rest = -EIO;
	}
	conn->err = rc ? first : 0;
	for (unsigned k = 0; k < n; k++)
		finish(c, ops[k], k ? rest : first, 0);
}

/* ---- post ----------------------------------------------------------------------------------- */

/* The verb's own buffer, registered for its duration (slow: ibv_reg_mr per verb). */
static int register_local(struct rrdma_chan *c, struct rrdma_op *op, uint32_t len)
{
	int access = op->wr.op == REMORA_OP_READ ? IBV_ACCESS_LOCAL_WRITE : 0;

	op->mr = ibv_reg_mr(c->t->dev.pd, op->wr.local, len, access);
	if (!op->mr)
		return remora_backend_error(c->t->tp, -errno,
					    "register a %u-byte buffer for a verb: %s", len,
					    strerror(errno));
	return 0;
}

/* Where op i goes, and the memory it needs. Undone by rollback() if a later verb cannot fit. */
static int prepare(struct rrdma_chan *c, uint32_t i, const struct remora_wr *wr,
		   uint32_t *blocked, bool arena_was_idle)
{
	struct rrdma_op *op = &c->ops[i];
	uint16_t node = remora_gaddr_node(wr->raddr);
	struct rrdma_conn *conn = &c->conns[node];
	uint32_t len = is_atomic(wr->op) ? 8 : wr->len;
	bool deferred;

	op->wr = *wr;
	if (conn->state != CONN_READY) {
		op->route = ROUTE_FINISH;
		return 0;
	}
	deferred = conn->blocked || (*blocked & (1u << node));
	op->route = deferred ? ROUTE_DEFER : ROUTE_POST;
	if (wr->op == REMORA_OP_MCAS)
		*blocked |= 1u << node;
	if (len == 0)
		return 0;
	if (wr->op == REMORA_OP_WRITE && !deferred && len <= conn->cc.max_inline) {
		op->inline_data = true; /* copied into the WQE by ibv_post_send, now */
		return 0;
	}
	if (len > RRDMA_STAGE_MAX)
		return register_local(c, op, len);
	if (stage_alloc(&c->st, len, &op->stage_off, &op->stage_seq) == 0) {
		if (wr->op == REMORA_OP_WRITE)
			memcpy(c->st.mem + op->stage_off, wr->local, len);
		return 0;
	}
	/*
	 * The arena is full. When it held nothing before this post, the batch alone overflows it
	 * (64 verbs of up to 64 KiB outgrow 1 MiB), and waiting would never make room: register
	 * the caller's buffer instead, as for a large verb. Otherwise completions will free space.
	 */
	return arena_was_idle ? register_local(c, op, len) : -EAGAIN;
}

static void rollback(struct rrdma_chan *c, const uint32_t *ops, unsigned n, uint64_t head,
		     uint64_t rtail)
{
	for (unsigned k = 0; k < n; k++) {
		if (c->ops[ops[k]].mr)
			ibv_dereg_mr(c->ops[ops[k]].mr);
		op_release(c, ops[k]);
	}
	c->st.head = head;
	c->st.rtail = rtail;
}

int rrdma_post(void *cpriv, const struct remora_wr *wrs, unsigned n, int32_t *status,
	       unsigned pflags)
{
	struct rrdma_chan *c = cpriv;
	uint32_t ops[RRDMA_MAX_BATCH], blocked = 0;
	uint64_t head = c->st.head, rtail = c->st.rtail;
	bool arena_was_idle = c->st.rhead == c->st.rtail;
	int rc;

	(void)status;
	c->skip_fence = pflags & REMORA_POST_SKIP_FENCE_CHECK;
	for (unsigned k = 0; k < n; k++) {
		rc = conn_ensure(c, remora_gaddr_node(wrs[k].raddr));
		if (rc)
			return rc;
	}
	for (unsigned k = 0; k < n; k++) {
		ops[k] = op_alloc(c);
		rc = prepare(c, ops[k], &wrs[k], &blocked, arena_was_idle);
		if (rc) {
			rollback(c, ops, k + 1, head, rtail);
			return rc;
		}
	}
	for (unsigned k = 0; k < n; k++) {
		struct rrdma_op *op = &c->ops[ops[k]];
		struct rrdma_conn *conn = &c->conns[remora_gaddr_node(op->wr.raddr)];

		if (op->route == ROUTE_FINISH)
			finish(c, ops[k], conn->err, 0);
		else if (op->route == ROUTE_DEFER)
			defer_push(conn, c, ops[k]);
		else
			chain_append(c, conn, ops[k]);
	}
	flush_chains(c);
	return 0;
}

/* ---- poll ----------------------------------------------------------------------------------- */

#define POLL_BATCH 32

int rrdma_poll(void *cpriv, struct remora_cqe *cqes, unsigned max)
{
	struct rrdma_chan *c = cpriv;
	unsigned got;

	if (c->ready_tail - c->ready_head < max) {
		struct ibv_wc wc[POLL_BATCH];
		int k = ibv_poll_cq(c->cq, POLL_BATCH, wc);

		for (int j = 0; j < k; j++)
			handle_wc(c, &wc[j]);
		if (c->ntouched)
			flush_chains(c);
	}
	got = c->ready_tail - c->ready_head;
	if (got > max)
		got = max;
	for (unsigned k = 0; k < got; k++)
		cqes[k] = c->ready[(c->ready_head + k) % READY_N];
	c->ready_head += got;
	return (int)got;
}

/* ---- the verb deadline ---------------------------------------------------------------------- */

#define BREAK_DRAIN_MS 2000u /* how long the flush of QPs moved to the error state is awaited */

/* What the flush of the broken QPs showed. */
struct break_tally {
	uint64_t last[REMORA_MAX_MN]; /* wr_id of each QP's newest WR, NOSEQ: seen or none */
	unsigned waiting, ok, flushed, other;
};

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static const char *qp_state_name(struct ibv_qp *qp)
{
	static const char *const names[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) || (unsigned)a.qp_state >= 7)
		return "?";
	return names[a.qp_state];
}

/* The oldest op of conn: the head of its send queue, else of its deferred FIFO. */
static uint32_t oldest_op(const struct rrdma_conn *conn)
{
	if (conn->sq_head != conn->sq_tail)
		return conn->sq_op[conn->sq_head % RRDMA_SQ_DEPTH];
	return conn->defer_head;
}

/* Moves conn's QP to the error state so that its WRs flush; notes its state before. */
static void break_qp(struct rrdma_conn *conn, struct break_tally *t, char *why, size_t len,
		     size_t *used)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	const char *was = qp_state_name(conn->cc.qp);
	int rc = ibv_modify_qp(conn->cc.qp, &a, IBV_QP_STATE);

	if (*used < len)
		*used += (size_t)snprintf(why + *used, len - *used, "%snode %u QP %u was %s with %llu WRs posted%s",
					  *used ? ", " : "", conn->node, conn->cc.qp->qp_num, was,
					  (unsigned long long)(conn->sq_tail - conn->sq_head),
					  rc ? " (error state refused)" : "");
	if (rc)
		return;
	t->last[conn->node] = ((uint64_t)conn->node << SEQ_BITS) | ((conn->sq_tail - 1) & SEQ_MASK);
	t->waiting++;
}

/* Polls the CQ until every broken QP flushed its newest WR, or BREAK_DRAIN_MS passed. */
static void break_drain(struct rrdma_chan *c, struct break_tally *t)
{
	uint64_t t0 = mono_ms();

	while (t->waiting && mono_ms() - t0 < BREAK_DRAIN_MS) {
		struct ibv_wc wc[POLL_BATCH];
		int k = ibv_poll_cq(c->cq, POLL_BATCH, wc);

		if (k <= 0) {
			sched_yield(); /* soft-RoCE flushes from a kernel task */
			continue;
		}
		for (int j = 0; j < k; j++) {
			unsigned node = (unsigned)(wc[j].wr_id >> SEQ_BITS);

			if (wc[j].status == IBV_WC_SUCCESS)
				t->ok++;
			else if (wc[j].status == IBV_WC_WR_FLUSH_ERR)
				t->flushed++;
			else
				t->other++;
			if (node < REMORA_MAX_MN && t->last[node] == wc[j].wr_id) {
				t->last[node] = NOSEQ;
				t->waiting--;
			}
		}
	}
}

/*
 * remora_backend_ops.chan_break: the channel completed nothing for the verb deadline. Every
 * QP with WRs posted goes to the error state (its WRs flush with error completions, drained
 * here for at most BREAK_DRAIN_MS, counted for the message), then every connection with work
 * is closed, which destroys its QP: from then on the device touches none of the ops' buffers,
 * flushed or not. Every op then ends with -ETIMEDOUT (registrations and bounce space freed).
 */
int rrdma_chan_break(void *cpriv, struct remora_cqe *oldest, char *why, size_t len)
{
	struct rrdma_chan *c = cpriv;
	struct break_tally t = { .waiting = 0 };
	uint64_t t0 = mono_ms();
	size_t used = 0;
	int ended = 0;

	why[0] = '\0';
	for (unsigned n = 0; n < REMORA_MAX_MN; n++) {
		struct rrdma_conn *conn = &c->conns[n];
		uint32_t i = oldest_op(conn);

		t.last[n] = NOSEQ;
		if (i == NONE)
			continue;
		if (oldest->status == 0) {
			oldest->wr_id = c->ops[i].wr.wr_id;
			oldest->op = c->ops[i].wr.op;
			oldest->node = conn->node;
			oldest->status = -ETIMEDOUT;
		}
		if (conn->state == CONN_READY && conn->sq_head != conn->sq_tail && conn->cc.qp)
			break_qp(conn, &t, why, len, &used);
	}
	break_drain(c, &t);
	if (used < len)
		snprintf(why + used, len - used,
			 "; in the error state %u completions (%u flushed, %u success, %u other) in "
			 "%llu ms%s", t.ok + t.flushed + t.other, t.flushed, t.ok, t.other,
			 (unsigned long long)(mono_ms() - t0),
			 t.waiting ? ", a flush never came" : "");
	for (unsigned n = 0; n < REMORA_MAX_MN; n++) {
		struct rrdma_conn *conn = &c->conns[n];

		if (oldest_op(conn) == NONE)
			continue;
		rrdma_cconn_close(&conn->cc);
		conn->state = CONN_DEAD;
		conn->err = -ETIMEDOUT;
		ended += (int)(conn->sq_tail - conn->sq_head);
		for (uint32_t i = conn->defer_head; i != NONE; i = c->ops[i].next)
			ended++;
		settle_dead(c, conn);
	}
	return ended;
}

/* ---- channels ------------------------------------------------------------------------------- */

static int stage_open(struct rrdma_chan *c)
{
	c->st.mem = aligned_alloc(4096, RRDMA_STAGE_BYTES);
	if (!c->st.mem)
		return -ENOMEM;
	c->st.mr = ibv_reg_mr(c->t->dev.pd, c->st.mem, RRDMA_STAGE_BYTES, IBV_ACCESS_LOCAL_WRITE);
	if (!c->st.mr)
		return remora_backend_error(c->t->tp, -errno, "register the bounce arena: %s",
					    strerror(errno));
	return 0;
}

void rrdma_chan_close(void *cpriv)
{
	struct rrdma_chan *c = cpriv;

	for (unsigned n = 0; n < REMORA_MAX_MN; n++)
		rrdma_cconn_close(&c->conns[n].cc);
	for (unsigned i = 0; i < RRDMA_MAX_OUTSTANDING; i++)
		if (c->ops[i].state != OP_FREE && c->ops[i].mr)
			ibv_dereg_mr(c->ops[i].mr);
	if (c->cq)
		ibv_destroy_cq(c->cq);
	if (c->st.mr)
		ibv_dereg_mr(c->st.mr);
	free(c->st.mem);
	free(c);
}

int rrdma_chan_open(void *tpriv, struct remora_chan *ch, void **cpriv)
{
	struct rrdma_tp *t = tpriv;
	struct rrdma_chan *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return -ENOMEM;
	c->t = t;
	c->ch = ch;
	for (uint32_t i = 0; i < RRDMA_MAX_OUTSTANDING; i++)
		c->ops[i].next = i + 1 < RRDMA_MAX_OUTSTANDING ? i + 1 : NONE;
	for (uint16_t n = 0; n < REMORA_MAX_MN; n++) {
		c->conns[n].node = n;
		c->conns[n].defer_head = NONE;
	}
	c->cq = ibv_create_cq(t->dev.ctx, RRDMA_CQ_DEPTH, NULL, NULL, 0);
	if (!c->cq) {
		rc = remora_backend_error(t->tp, -errno, "completion queue on %s: %s", t->dev.name,
					  strerror(errno));
		goto err_close;
	}
	rc = stage_open(c);
	if (rc)
		goto err_close;
	for (uint16_t n = 0; n < REMORA_MAX_MN; n++) {
		bool attached;

		pthread_mutex_lock(&t->lock);
		attached = t->nodes[n].attached;
		pthread_mutex_unlock(&t->lock);
		/* A node that does not answer (it died: a memory node that failed over) fails its
		 * verbs, not the open: a tool opens its channels after such a failure too. The
		 * connection is tried again at the node's first verb (conn_ensure). */
		if (attached)
			(void)conn_ensure(c, n);
	}
	*cpriv = c;
	return 0;

err_close:
	rrdma_chan_close(c);
	return rc;
}
