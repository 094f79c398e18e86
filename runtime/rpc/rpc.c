/* SPDX-License-Identifier: MIT */
/*
 * Compute-node RPC on the message API (docs/rpc.md).
 *
 * Receiving: the mailbox belongs to the process, so whichever endpoint polls first takes the
 * process's receive lock and routes frames into the inbox of the worker each one names (a
 * single-producer single-consumer ring: the lock holder produces, the owner consumes). A frame
 * whose inbox is full waits in a one-frame stash and routing stops until it fits. Each endpoint
 * then handles its own inbox: requests run their handlers and the reply goes out at once (or
 * into the endpoint's bounded outbox when the requester's ring is full); replies are streamed
 * straight into the caller's buffers and wake the parked caller.
 *
 * Bounds: every buffer is allocated when an endpoint opens. A request message longer than one
 * frame needs one of RPC_REASM reassembly buffers; with none free the receiver answers "busy"
 * and the caller sends again within its deadline. A request is taken from the inbox only when
 * the outbox has room for the largest reply, so a reply is never dropped for lack of space.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <remora/rpc.h>

#include "mutate/mutate.h"
#include "rpc/mutate.h"
#include "rpc/wire.h"

#define RPC_REASM 4u              /* multi-frame requests one endpoint reassembles at once */
#define RPC_REASM_STALE_NS 2000000000ull /* a half-received request older than this is dropped */
#define RPC_ROUTE_BURST 32u       /* frames routed per poll */
#define RPC_RETRY_NS 20000ull     /* pause before sending again after "busy" */
#define RPC_FRAME_MIN 64u
#define RPC_OUT_MIN 256u          /* outbox frames at least (rdma's 1 KiB frames: 3 x 17) */
#define RPC_EXPIRE_EVERY 16u      /* polls between two deadline checks (a clock read each) */

enum pend_state {
	P_FREE,
	P_WAIT,  /* sent (or sending), reply not complete */
	P_RETRY, /* the receiver was busy: send again at retry_at */
	P_DONE,
};

struct rpc_pending {
	uint16_t gen;
	uint8_t state;
	uint16_t cn, worker, coord;
	struct remora_rpc_call *calls;
	unsigned n;
	struct remora_coro *co;
	uint64_t deadline, retry_at;
	int status;
	int32_t next_free;
	/* streaming parse of the reply */
	uint16_t next_frag;
	uint32_t total, got;
	unsigned ci;
	uint32_t ehdr_got, dlen, dgot;
	uint8_t ehdr[sizeof(struct rpc_rep_ent)];
};

struct rpc_reasm {
	bool used;
	uint16_t src_cn, src_worker, coord, nent, next, nfrag;
	uint32_t id, total, got;
	uint64_t since;
	uint8_t *buf;
};

/* A frame in an inbox or the outbox: who (source or destination), how long, the bytes. */
struct rpc_slot {
	uint16_t cn;
	uint16_t len;
	uint32_t _pad;
	uint8_t data[];
};

struct rpc_ring {
	uint8_t *mem;
	uint32_t cap, stride;
	uint64_t head, tail; /* inbox: tail written by the router (release), head by the owner */
};

struct remora_rpc_ep {
	struct remora_rpc *r;
	unsigned worker;
	struct remora_chan *ch;
	struct remora_sched *s;
	struct rpc_ring in, out;
	struct rpc_reasm reasm[RPC_REASM];
	uint8_t *reasm_mem;
	uint8_t *rep_buf; /* one reply message being built */
	struct rpc_pending *pend;
	uint32_t npend, inflight;
	int32_t free_head;
	uint64_t next_deadline;
	uint32_t down_epoch;
	uint32_t expire_tick; /* the clock is read every RPC_EXPIRE_EVERY polls */
	struct remora_rpc_stats st;
	char errmsg[256];
};

struct rpc_handler {
	remora_rpc_handler fn;
	void *arg;
};

struct remora_rpc {
	struct remora_transport *tp;
	uint32_t frame, fpay, max_frames; /* frame bytes, payload per frame, frames per message */
	uint16_t self_cn;
	uint32_t max_cn, workers, max_pending;
	struct rpc_handler h[REMORA_RPC_MAX_OPS];
	struct remora_rpc_ep *eps[REMORA_RPC_MAX_WORKERS]; /* atomic: the router reads them */
	unsigned nopen;
	int rx_lock;
	bool stash_full;
	uint16_t stash_src, stash_len;
	uint8_t stash[RPC_FRAME_MAX];
	uint8_t rxbuf[RPC_FRAME_MAX] __attribute__((aligned(8)));
	uint64_t down;        /* bit per compute node, atomic */
	uint32_t down_epoch;  /* bumped by every remora_rpc_set_down, atomic */
	uint64_t refused;     /* atomic */
	uint64_t mutate; /* runtime/mutate, layer MUT_RPC */
};

static _Thread_local char create_err[256];

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int ep_err(struct remora_rpc_ep *ep, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int ep_err(struct remora_rpc_ep *ep, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ep->errmsg, sizeof(ep->errmsg), fmt, ap);
	va_end(ap);
	return rc;
}

/* ---- mutations (negative controls) ------------------------------------------------------ */

int rpc_mutate(struct remora_rpc *r, const char *name)
{
	return r ? mut_set(&r->mutate, MUT_RPC, name) : -EINVAL;
}

static inline bool mutated(const struct remora_rpc *r, enum mut_id m)
{
	return mut_on(r->mutate, m);
}

/* ---- rings ------------------------------------------------------------------------------ */

static int ring_init(struct rpc_ring *q, uint32_t cap, uint32_t frame)
{
	q->cap = cap;
	q->stride = (uint32_t)sizeof(struct rpc_slot) + ((frame + 7u) & ~7u);
	q->head = q->tail = 0;
	q->mem = calloc(cap, q->stride);
	return q->mem ? 0 : -ENOMEM;
}

static inline struct rpc_slot *ring_at(const struct rpc_ring *q, uint64_t i)
{
	return (struct rpc_slot *)(q->mem + (size_t)(i % q->cap) * q->stride);
}

static inline uint32_t out_room(const struct remora_rpc_ep *ep)
{
	return ep->out.cap - (uint32_t)(ep->out.tail - ep->out.head);
}

/* ---- creation ---------------------------------------------------------------------------- */

REMORA_API int remora_rpc_create(struct remora_transport *tp, const struct remora_rpc_cfg *cfg,
				 struct remora_rpc **out)
{
	struct remora_caps caps = { .size = sizeof(caps) };
	struct remora_rpc *r;
	int rc;

	if (!tp || !cfg || !out || cfg->size < sizeof(*cfg) || cfg->workers == 0 ||
	    cfg->workers > REMORA_RPC_MAX_WORKERS || cfg->max_pending > UINT16_MAX) {
		snprintf(create_err, sizeof(create_err),
			 "rpc: bad configuration (workers 1..%u, max_pending <= 65535)",
			 REMORA_RPC_MAX_WORKERS);
		return -EINVAL;
	}
	rc = remora_transport_caps(tp, &caps);
	if (rc)
		return rc;
	if (!(caps.flags & REMORA_CAP_MSG) || caps.max_msg < RPC_FRAME_MIN) {
		snprintf(create_err, sizeof(create_err),
			 "rpc: backend %s has no compute-node messages of >= %u bytes",
			 remora_transport_backend(tp), RPC_FRAME_MIN);
		return -EOPNOTSUPP;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->tp = tp;
	r->frame = caps.max_msg < RPC_FRAME_MAX ? caps.max_msg : RPC_FRAME_MAX;
	r->fpay = r->frame - (uint32_t)sizeof(struct rpc_hdr);
	r->max_frames = (REMORA_RPC_MAX_MSG + r->fpay - 1) / r->fpay;
	r->workers = cfg->workers;
	r->max_pending = cfg->max_pending ? cfg->max_pending : 256;
	r->max_cn = REMORA_MAX_CN;
	*out = r;
	return 0;
}

REMORA_API void remora_rpc_destroy(struct remora_rpc *r)
{
	free(r);
}

REMORA_API int remora_rpc_register(struct remora_rpc *r, uint16_t op, remora_rpc_handler fn,
				   void *arg)
{
	if (!r || op >= REMORA_RPC_MAX_OPS || !fn)
		return -EINVAL;
	if (r->nopen)
		return -EBUSY; /* the table is read without locks once endpoints run */
	r->h[op].fn = fn;
	r->h[op].arg = arg;
	return 0;
}

REMORA_API void remora_rpc_set_down(struct remora_rpc *r, uint16_t cn, bool down)
{
	if (!r || cn >= 64)
		return;
	if (down)
		__atomic_fetch_or(&r->down, 1ull << cn, __ATOMIC_RELEASE);
	else
		__atomic_fetch_and(&r->down, ~(1ull << cn), __ATOMIC_RELEASE);
	__atomic_fetch_add(&r->down_epoch, 1, __ATOMIC_RELEASE);
}

static inline bool is_down(const struct remora_rpc *r, uint16_t cn)
{
	return cn < 64 && (__atomic_load_n(&r->down, __ATOMIC_ACQUIRE) & (1ull << cn));
}

static int ep_sched_poll(void *arg, bool *waiting);

REMORA_API int remora_rpc_ep_open(struct remora_rpc *r, unsigned worker, struct remora_chan *ch,
				  struct remora_sched *s, struct remora_rpc_ep **out)
{
	struct remora_rpc_ep *ep;
	int rc;

	if (!r || !ch || !out || worker >= r->workers)
		return -EINVAL;
	if (__atomic_load_n(&r->eps[worker], __ATOMIC_ACQUIRE))
		return -EEXIST;
	ep = calloc(1, sizeof(*ep));
	if (!ep)
		return -ENOMEM;
	ep->r = r;
	ep->worker = worker;
	ep->ch = ch;
	ep->s = s;
	ep->npend = r->max_pending;
	rc = ring_init(&ep->in, 4 * r->max_frames, r->frame);
	if (!rc)
		/* three largest replies, and at least RPC_OUT_MIN frames for bursts of grants */
		rc = ring_init(&ep->out, 3 * r->max_frames > RPC_OUT_MIN ? 3 * r->max_frames :
								       RPC_OUT_MIN, r->frame);
	ep->reasm_mem = malloc((size_t)RPC_REASM * REMORA_RPC_MAX_MSG);
	ep->rep_buf = malloc(REMORA_RPC_MAX_MSG);
	ep->pend = calloc(ep->npend, sizeof(*ep->pend));
	if (rc || !ep->reasm_mem || !ep->rep_buf || !ep->pend) {
		free(ep->in.mem);
		free(ep->out.mem);
		free(ep->reasm_mem);
		free(ep->rep_buf);
		free(ep->pend);
		free(ep);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < RPC_REASM; i++)
		ep->reasm[i].buf = ep->reasm_mem + (size_t)i * REMORA_RPC_MAX_MSG;
	for (uint32_t i = 0; i < ep->npend; i++)
		ep->pend[i].next_free = i + 1 < ep->npend ? (int32_t)(i + 1) : -1;
	ep->free_head = 0;
	ep->down_epoch = __atomic_load_n(&r->down_epoch, __ATOMIC_ACQUIRE);
	r->nopen++;
	__atomic_store_n(&r->eps[worker], ep, __ATOMIC_RELEASE);
	if (s)
		remora_sched_set_poller(s, ep_sched_poll, ep);
	*out = ep;
	return 0;
}

REMORA_API void remora_rpc_ep_close(struct remora_rpc_ep *ep)
{
	struct remora_rpc *r;

	if (!ep)
		return;
	r = ep->r;
	if (ep->s)
		remora_sched_set_poller(ep->s, NULL, NULL);
	/* The router must not be writing into the inbox while it goes away. */
	while (__atomic_exchange_n(&r->rx_lock, 1, __ATOMIC_ACQUIRE))
		;
	__atomic_store_n(&r->eps[ep->worker], NULL, __ATOMIC_RELEASE);
	__atomic_store_n(&r->rx_lock, 0, __ATOMIC_RELEASE);
	r->nopen--;
	free(ep->in.mem);
	free(ep->out.mem);
	free(ep->reasm_mem);
	free(ep->rep_buf);
	free(ep->pend);
	free(ep);
}

REMORA_API void remora_rpc_ep_stats(const struct remora_rpc_ep *ep, struct remora_rpc_stats *out)
{
	if (!ep || !out)
		return;
	*out = ep->st;
	out->refused += __atomic_load_n(&ep->r->refused, __ATOMIC_RELAXED);
}

REMORA_API const char *remora_rpc_errmsg(const struct remora_rpc_ep *ep)
{
	return ep ? ep->errmsg : create_err;
}

/* ---- building frames -------------------------------------------------------------------- */

/* The bytes of a message, as segments: seg(ctx, i) gives segment i. */
typedef bool (*rpc_seg_fn)(const void *ctx, unsigned i, const void **p, uint32_t *len);

struct rpc_cursor {
	rpc_seg_fn seg;
	const void *ctx;
	unsigned i;
	uint32_t off;
};

static uint32_t gather(struct rpc_cursor *c, uint8_t *dst, uint32_t want)
{
	uint32_t got = 0;
	const void *p;
	uint32_t len;

	while (got < want && c->seg(c->ctx, c->i, &p, &len)) {
		uint32_t take = len - c->off;

		if (take > want - got)
			take = want - got;
		if (take)
			memcpy(dst + got, (const uint8_t *)p + c->off, take);
		got += take;
		c->off += take;
		if (c->off == len) {
			c->i++;
			c->off = 0;
		}
	}
	return got;
}

struct rpc_msg {
	uint8_t kind;
	uint16_t dst_cn, dst_worker, coord, nent, nfrag;
	uint32_t id, total;
};

static uint16_t frames_for(const struct remora_rpc *r, uint32_t total)
{
	return total ? (uint16_t)((total + r->fpay - 1) / r->fpay) : 1;
}

/* Frame `frag` of m, its payload taken from c. Returns the frame's length. */
static uint32_t build_frame(const struct remora_rpc_ep *ep, const struct rpc_msg *m,
			    struct rpc_cursor *c, uint16_t frag, uint8_t *buf)
{
	struct rpc_hdr h = {
		.magic = RPC_MAGIC,
		.version = RPC_VERSION,
		.kind = m->kind,
		.src_worker = (uint16_t)ep->worker,
		.dst_worker = m->dst_worker,
		.coord = m->coord,
		.nent = m->nent,
		.frag = frag,
		.nfrag = m->nfrag,
		.id = m->id,
		.total = m->total,
	};
	uint32_t n = gather(c, buf + sizeof(h), ep->r->fpay);

	memcpy(buf, &h, sizeof(h));
	return (uint32_t)sizeof(h) + n;
}

/* Queues one frame in the outbox (the caller checked the room). */
static void out_push(struct remora_rpc_ep *ep, uint16_t cn, const uint8_t *frame, uint32_t len)
{
	struct rpc_slot *s = ring_at(&ep->out, ep->out.tail++);

	s->cn = cn;
	s->len = (uint16_t)len;
	memcpy(s->data, frame, len);
}

/* Sends what the outbox holds, in order, until the network pushes back. */
static int out_flush(struct remora_rpc_ep *ep)
{
	int n = 0;

	while (ep->out.head != ep->out.tail) {
		struct rpc_slot *s = ring_at(&ep->out, ep->out.head);
		int rc = remora_msg_send(ep->ch, s->cn, s->data, s->len);

		if (rc == -EAGAIN || rc == -ECONNRESET)
			break; /* full, or reconnecting: the next poll sends it */
		if (rc == 0) {
			ep->st.frames_sent++;
			n++;
		}
		ep->out.head++; /* sent, or undeliverable (-REMORA_ENODE): the caller times out */
	}
	return n;
}

/* A message that must not wait (replies, busy): sent now, or queued behind the outbox. */
static void send_nowait(struct remora_rpc_ep *ep, const struct rpc_msg *m, struct rpc_cursor *c)
{
	uint8_t frame[RPC_FRAME_MAX];

	for (uint16_t f = 0; f < m->nfrag; f++) {
		uint32_t len = build_frame(ep, m, c, f, frame);
		int rc = -EAGAIN;

		if (ep->out.head == ep->out.tail)
			rc = remora_msg_send(ep->ch, m->dst_cn, frame, len);
		if (rc == -ECONNRESET) /* lost before; this one was not sent: connect again */
			rc = remora_msg_send(ep->ch, m->dst_cn, frame, len);
		if (rc == 0)
			ep->st.frames_sent++;
		else if ((rc == -EAGAIN || rc == -ECONNRESET) && out_room(ep))
			out_push(ep, m->dst_cn, frame, len);
		else
			ep->st.dropped++; /* its caller times out */
	}
	ep->st.msgs_sent++;
}

static bool flat_seg(const void *ctx, unsigned i, const void **p, uint32_t *len)
{
	const struct { const void *p; uint32_t len; } *f = ctx;

	if (i)
		return false;
	*p = f->p;
	*len = f->len;
	return true;
}

struct one_rep {
	struct rpc_rep_ent e;
	const void *data;
};

static bool one_rep_seg(const void *ctx, unsigned i, const void **p, uint32_t *len)
{
	const struct one_rep *o = ctx;

	if (i == 0) {
		*p = &o->e;
		*len = sizeof(o->e);
		return true;
	}
	if (i == 1) {
		*p = o->data;
		*len = o->e.len;
		return true;
	}
	return false;
}

struct req_src {
	const struct remora_rpc_call *calls;
	unsigned n;
	struct rpc_req_ent *ents;
};

static bool req_seg(const void *ctx, unsigned i, const void **p, uint32_t *len)
{
	const struct req_src *q = ctx;

	if (i / 2 >= q->n)
		return false;
	if (i % 2 == 0) {
		*p = &q->ents[i / 2];
		*len = sizeof(q->ents[0]);
	} else {
		*p = q->calls[i / 2].req;
		*len = q->calls[i / 2].req_len;
	}
	return true;
}

/* ---- receiving: routing ------------------------------------------------------------------ */

/* Checks what routing needs; the owner checks the rest. */
static bool frame_routable(const struct remora_rpc *r, const uint8_t *f, int len)
{
	struct rpc_hdr h;

	if (len < (int)sizeof(h))
		return false;
	memcpy(&h, f, sizeof(h));
	return h.magic == RPC_MAGIC && h.version == RPC_VERSION && h.dst_worker < r->workers;
}

/* Into its worker's inbox; false when that inbox is full. Frames for a closed worker drop. */
static bool deliver(struct remora_rpc *r, uint16_t src, const uint8_t *f, uint16_t len)
{
	struct rpc_hdr h;
	struct remora_rpc_ep *dst;
	struct rpc_slot *s;
	uint64_t tail;

	memcpy(&h, f, sizeof(h));
	dst = __atomic_load_n(&r->eps[h.dst_worker], __ATOMIC_ACQUIRE);
	if (!dst) {
		__atomic_fetch_add(&r->refused, 1, __ATOMIC_RELAXED);
		return true;
	}
	tail = dst->in.tail;
	if (tail - __atomic_load_n(&dst->in.head, __ATOMIC_ACQUIRE) >= dst->in.cap)
		return false;
	s = ring_at(&dst->in, tail);
	s->cn = src;
	s->len = len;
	memcpy(s->data, f, len);
	__atomic_store_n(&dst->in.tail, tail + 1, __ATOMIC_RELEASE);
	return true;
}

static bool handle_frame(struct remora_rpc_ep *ep, uint16_t src, const uint8_t *f, uint32_t len);

static int route(struct remora_rpc_ep *ep)
{
	struct remora_rpc *r = ep->r;
	int n = 0;

	if (__atomic_exchange_n(&r->rx_lock, 1, __ATOMIC_ACQUIRE))
		return 0; /* another worker is routing */
	if (r->stash_full) {
		if (!deliver(r, r->stash_src, r->stash, r->stash_len))
			goto out;
		r->stash_full = false;
	}
	for (unsigned i = 0; i < RPC_ROUTE_BURST; i++) {
		uint16_t src = 0;
		int len = remora_msg_recv(ep->ch, &src, r->rxbuf, r->frame);

		if (len < 0)
			break; /* -EAGAIN: nothing; -EMSGSIZE cannot happen: frames fit r->frame */
		n++;
		if (!frame_routable(r, r->rxbuf, len)) {
			__atomic_fetch_add(&r->refused, 1, __ATOMIC_RELAXED);
			continue;
		}
		/* Ours, with nothing queued before it: handled in place, no copy through the inbox. */
		if (!r->stash_full && ((const struct rpc_hdr *)(const void *)r->rxbuf)->dst_worker ==
					      ep->worker &&
		    ep->in.head == __atomic_load_n(&ep->in.tail, __ATOMIC_RELAXED) &&
		    handle_frame(ep, src, r->rxbuf, (uint32_t)len)) {
			ep->st.frames_recv++;
			continue;
		}
		if (!deliver(r, src, r->rxbuf, (uint16_t)len)) {
			memcpy(r->stash, r->rxbuf, (size_t)len);
			r->stash_src = src;
			r->stash_len = (uint16_t)len;
			r->stash_full = true;
			break;
		}
	}
out:
	__atomic_store_n(&r->rx_lock, 0, __ATOMIC_RELEASE);
	return n;
}

/* ---- receiving: requests ----------------------------------------------------------------- */

static void reply_busy(struct remora_rpc_ep *ep, uint16_t src, const struct rpc_hdr *h)
{
	struct rpc_msg m = { .kind = RPC_BUSY, .dst_cn = src, .dst_worker = h->src_worker,
			     .coord = h->coord, .nfrag = 1, .id = h->id };
	struct { const void *p; uint32_t len; } none = { NULL, 0 };
	struct rpc_cursor c = { .seg = flat_seg, .ctx = &none };

	send_nowait(ep, &m, &c);
}

/* Runs the handlers of a whole request message and answers it (unless it is one-way). */
static void handle_request(struct remora_rpc_ep *ep, uint16_t src, const struct rpc_hdr *h,
			   const uint8_t *data, uint32_t total)
{
	bool answer = h->kind != RPC_ONEWAY;
	struct remora_rpc *r = ep->r;
	struct remora_rpc_req req = {
		.from = { .cn = src, .worker = h->src_worker, .coord = h->coord },
		.count = h->nent,
		.token = { .to = { .cn = src, .worker = h->src_worker, .coord = h->coord },
			   .id = h->id },
		.ep = ep,
		.oneway = h->kind == RPC_ONEWAY,
	};
	uint32_t off = 0, used = 0;
	bool deferred = false;

	/* The whole message is checked before any handler runs. */
	for (unsigned i = 0; i < h->nent; i++) {
		struct rpc_req_ent e;

		if (total - off < sizeof(e))
			goto bad;
		memcpy(&e, data + off, sizeof(e));
		if (e.len > total - off - sizeof(e))
			goto bad;
		off += (uint32_t)sizeof(e) + e.len;
	}
	if (off != total)
		goto bad;
	off = 0;
	for (unsigned i = 0; i < h->nent; i++) {
		struct rpc_req_ent e;
		struct rpc_rep_ent re = { 0, 0 };
		uint32_t cap = REMORA_RPC_MAX_MSG - used -
			       (uint32_t)sizeof(re) * (h->nent - i);
		uint32_t rep_len = 0;

		memcpy(&e, data + off, sizeof(e));
		req.op = e.op;
		req.data = data + off + sizeof(e);
		req.len = e.len;
		req.index = i;
		off += (uint32_t)sizeof(e) + e.len;
		if (e.op >= REMORA_RPC_MAX_OPS || !r->h[e.op].fn) {
			re.status = -EOPNOTSUPP;
		} else {
			re.status = r->h[e.op].fn(r->h[e.op].arg, &req, ep->rep_buf + used + sizeof(re),
						  cap, &rep_len);
			ep->st.handled++;
			if (re.status == REMORA_RPC_DEFER && h->nent == 1 && answer) {
				deferred = true;
				break;
			}
			if (re.status == REMORA_RPC_DEFER)
				re.status = -EINVAL;
			else if (rep_len > cap)
				re.status = -REMORA_EPROTO;
			else
				re.len = rep_len;
		}
		memcpy(ep->rep_buf + used, &re, sizeof(re));
		used += (uint32_t)sizeof(re) + re.len;
	}
	ep->st.batches_in++;
	if (!deferred && answer) {
		struct rpc_msg m = { .kind = RPC_REP, .dst_cn = src, .dst_worker = h->src_worker,
				     .coord = h->coord, .nent = h->nent, .id = h->id,
				     .total = used, .nfrag = frames_for(r, used) };
		struct { const void *p; uint32_t len; } flat = { ep->rep_buf, used };
		struct rpc_cursor c = { .seg = flat_seg, .ctx = &flat };

		send_nowait(ep, &m, &c);
	}
	return;
bad:
	__atomic_fetch_add(&r->refused, 1, __ATOMIC_RELAXED);
}

REMORA_API int remora_rpc_reply(struct remora_rpc_ep *ep, const struct remora_rpc_token *t,
				int status, const void *data, uint32_t len)
{
	struct one_rep o = { .e = { .status = status, .len = len }, .data = data };
	struct rpc_msg m;
	struct rpc_cursor c = { .seg = one_rep_seg, .ctx = &o };

	if (!ep || !t || (len && !data) || status == REMORA_RPC_DEFER ||
	    t->to.worker >= REMORA_RPC_MAX_WORKERS)
		return -EINVAL;
	if (len > REMORA_RPC_MAX_MSG - sizeof(o.e))
		return -EMSGSIZE;
	m = (struct rpc_msg){ .kind = RPC_REP, .dst_cn = t->to.cn, .dst_worker = t->to.worker,
			      .coord = t->to.coord, .nent = 1, .id = t->id,
			      .total = (uint32_t)sizeof(o.e) + len };
	m.nfrag = frames_for(ep->r, m.total);
	if (out_room(ep) < m.nfrag)
		return ep_err(ep, -ENOBUFS, "rpc reply to cn %u: the outbox is full", t->to.cn);
	send_nowait(ep, &m, &c);
	return 0;
}

static struct rpc_reasm *reasm_find(struct remora_rpc_ep *ep, uint16_t src,
				    const struct rpc_hdr *h)
{
	for (unsigned i = 0; i < RPC_REASM; i++) {
		struct rpc_reasm *a = &ep->reasm[i];

		if (a->used && a->src_cn == src && a->src_worker == h->src_worker && a->id == h->id)
			return a;
	}
	return NULL;
}

static struct rpc_reasm *reasm_get(struct remora_rpc_ep *ep, uint64_t now)
{
	for (unsigned i = 0; i < RPC_REASM; i++)
		if (!ep->reasm[i].used)
			return &ep->reasm[i];
	for (unsigned i = 0; i < RPC_REASM; i++) /* a sender gave up half-way */
		if (now - ep->reasm[i].since > RPC_REASM_STALE_NS)
			return &ep->reasm[i];
	return NULL;
}

/* ---- receiving: replies ------------------------------------------------------------------ */

static void finish(struct rpc_pending *p, int status)
{
	p->status = status;
	p->state = P_DONE;
	if (p->co)
		remora_coro_wake(p->co);
}

/* Streams reply bytes into the calls' buffers. false: the reply is malformed. */
static bool feed(struct rpc_pending *p, const uint8_t *d, uint32_t len)
{
	while (len) {
		struct remora_rpc_call *c;
		uint32_t take;

		if (p->ci >= p->n)
			return false;
		c = &p->calls[p->ci];
		if (p->ehdr_got < sizeof(p->ehdr)) {
			struct rpc_rep_ent e;

			take = (uint32_t)sizeof(p->ehdr) - p->ehdr_got;
			take = take < len ? take : len;
			memcpy(p->ehdr + p->ehdr_got, d, take);
			p->ehdr_got += take;
			d += take;
			len -= take;
			if (p->ehdr_got < sizeof(p->ehdr))
				continue;
			memcpy(&e, p->ehdr, sizeof(e));
			p->dlen = e.len;
			p->dgot = 0;
			c->rep_len = e.len;
			c->status = e.len > c->rep_cap ? -EMSGSIZE : e.status;
		} else {
			take = p->dlen - p->dgot;
			take = take < len ? take : len;
			if (p->dgot < c->rep_cap) {
				uint32_t room = c->rep_cap - p->dgot;

				memcpy((uint8_t *)c->rep + p->dgot, d, take < room ? take : room);
			}
			p->dgot += take;
			d += take;
			len -= take;
		}
		if (p->ehdr_got == sizeof(p->ehdr) && p->dgot == p->dlen) {
			p->ci++;
			p->ehdr_got = 0;
			p->dlen = p->dgot = 0;
		}
	}
	return true;
}

static void handle_reply(struct remora_rpc_ep *ep, uint16_t src, const struct rpc_hdr *h,
			 const uint8_t *data, uint32_t plen)
{
	uint32_t slot = mutated(ep->r, MUT_REPLY_TO_SLOT0) ? 0 : (h->id & 0xffffu);
	struct rpc_pending *p = slot < ep->npend ? &ep->pend[slot] : NULL;

	if (!p || (p->state != P_WAIT && p->state != P_RETRY) || p->gen != (uint16_t)(h->id >> 16) ||
	    p->cn != src || p->worker != h->src_worker || p->coord != h->coord) {
		ep->st.stale++;
		return;
	}
	if (h->kind == RPC_BUSY) {
		if (p->state == P_WAIT && p->next_frag == 0) {
			p->state = P_RETRY;
			p->retry_at = now_ns() + RPC_RETRY_NS;
			if (p->co)
				remora_coro_wake(p->co);
		}
		return;
	}
	if (p->state != P_WAIT || h->frag != p->next_frag || h->nent != p->n ||
	    (h->frag && h->total != p->total) || plen > h->total - p->got) {
		finish(p, -REMORA_EPROTO);
		return;
	}
	p->total = h->total;
	p->next_frag++;
	p->got += plen;
	if (!feed(p, data, plen)) {
		finish(p, -REMORA_EPROTO);
		return;
	}
	if (h->frag + 1u == h->nfrag)
		finish(p, p->got == p->total && p->ci == p->n ? 0 : -REMORA_EPROTO);
}

/*
 * One frame from the inbox. Returns false when it must stay there for now (a request while the
 * outbox lacks room for its reply).
 */
static bool handle_frame(struct remora_rpc_ep *ep, uint16_t src, const uint8_t *f, uint32_t len)
{
	struct remora_rpc *r = ep->r;
	struct rpc_hdr h;
	const uint8_t *pay = f + sizeof(h);
	uint32_t plen = len - (uint32_t)sizeof(h);
	bool check = !mutated(r, MUT_SKIP_FRAME_CHECK);

	memcpy(&h, f, sizeof(h)); /* the router checked len >= sizeof(h) */
	if (check && (h.nfrag == 0 || h.frag >= h.nfrag || h.total > REMORA_RPC_MAX_MSG ||
		      h.nent > REMORA_RPC_MAX_BATCH || plen > h.total ||
		      (h.kind != RPC_BUSY && h.nent == 0)))
		goto bad;
	switch (h.kind) {
	case RPC_REP:
	case RPC_BUSY:
		handle_reply(ep, src, &h, pay, plen);
		return true;
	case RPC_REQ:
		break;
	case RPC_ONEWAY:
		if (h.nfrag != 1 || plen != h.total)
			goto bad;
		handle_request(ep, src, &h, pay, plen); /* nothing to answer: no room needed */
		return true;
	default:
		goto bad;
	}
	if (h.nfrag == 1) {
		if (check && plen != h.total)
			goto bad;
		if (out_room(ep) < r->max_frames)
			return false;
		handle_request(ep, src, &h, pay, plen);
		return true;
	}
	if (h.frag == 0) {
		struct rpc_reasm *a = reasm_find(ep, src, &h);
		uint64_t now = now_ns();

		if (!a)
			a = reasm_get(ep, now);
		if (!a) {
			if (out_room(ep) < 1)
				return false;
			reply_busy(ep, src, &h);
			return true;
		}
		*a = (struct rpc_reasm){ .used = true, .src_cn = src, .src_worker = h.src_worker,
					 .coord = h.coord, .nent = h.nent, .next = 1,
					 .nfrag = h.nfrag, .id = h.id, .total = h.total,
					 .got = plen, .since = now, .buf = a->buf };
		if (check && plen >= h.total) {
			a->used = false;
			goto bad;
		}
		memcpy(a->buf, pay, plen);
		return true;
	}
	{
		struct rpc_reasm *a = reasm_find(ep, src, &h);
		bool last = h.frag + 1u == h.nfrag;

		if (!a || a->next != h.frag || a->nfrag != h.nfrag || a->total != h.total ||
		    a->nent != h.nent || a->coord != h.coord) {
			ep->st.stale++; /* its first frame was refused (busy) or is gone */
			return true;
		}
		if (check && (plen > a->total - a->got || (last && a->got + plen != a->total) ||
			      (!last && a->got + plen >= a->total))) {
			a->used = false;
			goto bad;
		}
		if (last && out_room(ep) < r->max_frames)
			return false;
		memcpy(a->buf + a->got, pay, plen);
		a->got += plen;
		a->next++;
		if (last) {
			a->used = false;
			handle_request(ep, src, &h, a->buf, a->total);
		}
		return true;
	}
bad:
	__atomic_fetch_add(&r->refused, 1, __ATOMIC_RELAXED);
	return true;
}

static int drain_inbox(struct remora_rpc_ep *ep)
{
	int n = 0;

	for (;;) {
		uint64_t head = ep->in.head;
		struct rpc_slot *s;

		if (head == __atomic_load_n(&ep->in.tail, __ATOMIC_ACQUIRE))
			break;
		s = ring_at(&ep->in, head);
		if (!handle_frame(ep, s->cn, s->data, s->len))
			break;
		ep->st.frames_recv++;
		__atomic_store_n(&ep->in.head, head + 1, __ATOMIC_RELEASE);
		n++;
	}
	return n;
}

/* Fails calls to nodes marked down and calls past their deadline. */
static int expire(struct remora_rpc_ep *ep)
{
	uint32_t epoch = __atomic_load_n(&ep->r->down_epoch, __ATOMIC_ACQUIRE);
	uint64_t now, next = UINT64_MAX;
	int n = 0;

	if (!ep->inflight || (++ep->expire_tick % RPC_EXPIRE_EVERY && epoch == ep->down_epoch))
		return 0;
	now = now_ns();
	if (now < ep->next_deadline && epoch == ep->down_epoch)
		return 0;
	ep->down_epoch = epoch;
	for (uint32_t i = 0; i < ep->npend; i++) {
		struct rpc_pending *p = &ep->pend[i];

		if (p->state != P_WAIT && p->state != P_RETRY)
			continue;
		if (is_down(ep->r, p->cn)) {
			finish(p, -EHOSTDOWN);
			n++;
		} else if (now >= p->deadline && !mutated(ep->r, MUT_NO_TIMEOUT)) {
			finish(p, -ETIMEDOUT);
			n++;
		} else if (p->deadline < next) {
			next = p->deadline;
		}
	}
	ep->next_deadline = next;
	return n;
}

REMORA_API int remora_rpc_poll(struct remora_rpc_ep *ep)
{
	int n;

	if (!ep)
		return -EINVAL;
	n = out_flush(ep);
	n += route(ep);
	n += drain_inbox(ep);
	n += expire(ep);
	return n;
}

static int ep_sched_poll(void *arg, bool *waiting)
{
	struct remora_rpc_ep *ep = arg;
	int n = remora_rpc_poll(ep);

	*waiting = ep->inflight > 0 || ep->out.head != ep->out.tail;
	return n;
}

/* ---- calling ----------------------------------------------------------------------------- */

/* Lets the dispatcher run while a caller waits for room or time. */
static void wait_step(struct remora_rpc_ep *ep)
{
	struct remora_sched *self = remora_sched_self();

	if (self && self == ep->s) {
		remora_yield(); /* the scheduler polls the dispatcher */
		return;
	}
	remora_rpc_poll(ep);
	if (self)
		remora_yield();
}

/*
 * Sends a request message, frame by frame, waiting for room up to deadline. p is the call it
 * belongs to, whose end (down, timeout) stops the wait, its status saying why; NULL for a
 * one-way post, which a node marked down stops instead.
 */
static int send_request(struct remora_rpc_ep *ep, struct rpc_pending *p, const struct rpc_msg *m,
			const struct req_src *q, uint64_t deadline)
{
	struct rpc_cursor c = { .seg = req_seg, .ctx = q };
	uint8_t frame[RPC_FRAME_MAX];

	for (uint16_t f = 0; f < m->nfrag; f++) {
		uint32_t len = build_frame(ep, m, &c, f, frame);

		for (;;) {
			int rc = remora_msg_send(ep->ch, m->dst_cn, frame, len);

			if (rc == 0)
				break;
			if (rc != -EAGAIN && rc != -ECONNRESET)
				return ep_err(ep, rc, "rpc to cn %u: %s", m->dst_cn,
					      remora_strerror(rc));
			wait_step(ep);
			if (p && p->state != P_WAIT)
				return 0; /* ended meanwhile (down, timeout): its status says why */
			if (!p && is_down(ep->r, m->dst_cn))
				return ep_err(ep, -EHOSTDOWN, "rpc to cn %u: the node went down",
					      m->dst_cn);
			if (now_ns() >= deadline)
				return ep_err(ep, -ETIMEDOUT,
					      "rpc to cn %u worker %u: its mailbox stayed full", m->dst_cn,
					      m->dst_worker);
		}
		ep->st.frames_sent++;
	}
	ep->st.msgs_sent++;
	return 0;
}

/* The arguments every batch (call or post) must have right; 0 or -EINVAL with its line. */
static int batch_check(struct remora_rpc_ep *ep, const struct remora_rpc_call *calls, unsigned n,
		       uint16_t dst_worker, int timeout_ms)
{
	if (!calls || n == 0 || n > REMORA_RPC_MAX_BATCH || timeout_ms < 0 ||
	    dst_worker >= REMORA_RPC_MAX_WORKERS)
		return ep_err(ep, -EINVAL, "rpc: bad call (batch 1..%u, worker < %u)",
			      REMORA_RPC_MAX_BATCH, REMORA_RPC_MAX_WORKERS);
	for (unsigned i = 0; i < n; i++)
		if ((calls[i].req_len && !calls[i].req) || (calls[i].rep_cap && !calls[i].rep))
			return ep_err(ep, -EINVAL, "rpc: request %u has a NULL buffer", i);
	return 0;
}

static uint64_t deadline_after(int timeout_ms)
{
	return now_ns() +
	       (uint64_t)(timeout_ms ? timeout_ms : REMORA_RPC_DEFAULT_TIMEOUT_MS) * 1000000u;
}

static void pend_reset_parse(struct rpc_pending *p)
{
	p->next_frag = 0;
	p->total = p->got = 0;
	p->ci = 0;
	p->ehdr_got = p->dlen = p->dgot = 0;
}

REMORA_API int remora_rpc_call(struct remora_rpc_ep *ep, uint16_t dst_cn, uint16_t dst_worker,
			       struct remora_rpc_call *calls, unsigned n, int timeout_ms)
{
	struct rpc_req_ent ents[REMORA_RPC_MAX_BATCH];
	struct req_src q = { .calls = calls, .n = n, .ents = ents };
	struct remora_coro *co = remora_coro_self();
	struct rpc_pending *p;
	struct rpc_msg m;
	uint64_t total = 0, deadline;
	uint32_t slot;
	int rc;

	if (!ep)
		return -EINVAL;
	rc = batch_check(ep, calls, n, dst_worker, timeout_ms);
	if (rc)
		return rc;
	if (mutated(ep->r, MUT_BATCH_FIRST_ONLY))
		n = q.n = 1;
	for (unsigned i = 0; i < n; i++) {
		ents[i] = (struct rpc_req_ent){ .op = calls[i].op, .len = calls[i].req_len };
		total += sizeof(ents[i]) + (uint64_t)calls[i].req_len;
		calls[i].status = -ETIMEDOUT;
		calls[i].rep_len = 0;
	}
	if (total > REMORA_RPC_MAX_MSG)
		return ep_err(ep, -EMSGSIZE, "rpc to cn %u: %llu bytes exceed one message (%u)",
			      dst_cn, (unsigned long long)total, REMORA_RPC_MAX_MSG);
	if (is_down(ep->r, dst_cn))
		return ep_err(ep, -EHOSTDOWN, "rpc to cn %u: the node is down (dead or fenced)",
			      dst_cn);
	deadline = deadline_after(timeout_ms);
	while (ep->free_head < 0) {
		wait_step(ep);
		if (now_ns() >= deadline)
			return ep_err(ep, -ETIMEDOUT, "rpc to cn %u: all %u call slots stayed busy",
				      dst_cn, ep->npend);
	}
	slot = (uint32_t)ep->free_head;
	p = &ep->pend[slot];
	ep->free_head = p->next_free;
	p->gen++;
	p->state = P_WAIT;
	p->cn = dst_cn;
	p->worker = dst_worker;
	p->coord = co ? (uint16_t)remora_coro_index(co) : UINT16_MAX;
	p->calls = calls;
	p->n = n;
	p->co = co && remora_sched_self() == ep->s ? co : NULL;
	p->deadline = deadline;
	p->status = 0;
	pend_reset_parse(p);
	ep->inflight++;
	if (deadline < ep->next_deadline || ep->inflight == 1)
		ep->next_deadline = deadline;
	m = (struct rpc_msg){ .kind = RPC_REQ, .dst_cn = dst_cn, .dst_worker = dst_worker,
			      .coord = p->coord, .nent = (uint16_t)n, .id = slot | (uint32_t)p->gen << 16,
			      .total = (uint32_t)total };
	m.nfrag = frames_for(ep->r, m.total);
	ep->st.calls++;
	ep->st.requests += n;
	rc = send_request(ep, p, &m, &q, p->deadline);
	while (!rc && p->state != P_DONE) {
		if (p->state == P_RETRY) {
			if (now_ns() >= p->retry_at) {
				p->state = P_WAIT;
				pend_reset_parse(p);
				ep->st.retries++;
				rc = send_request(ep, p, &m, &q, p->deadline);
				continue;
			}
			if (now_ns() >= p->deadline)
				finish(p, -ETIMEDOUT);
			else
				wait_step(ep);
			continue;
		}
		if (p->co)
			remora_coro_park(); /* the dispatcher wakes it: reply, busy, deadline, down */
		else
			wait_step(ep);
	}
	if (!rc)
		rc = p->status;
	if (rc == -ETIMEDOUT) {
		ep->st.timeouts++;
		if (p->state == P_DONE)
			ep_err(ep, rc, "rpc to cn %u worker %u: no reply within %d ms (dead, fenced "
				       "or overloaded)", dst_cn, dst_worker,
			       timeout_ms ? timeout_ms : REMORA_RPC_DEFAULT_TIMEOUT_MS);
	} else if (rc == -EHOSTDOWN) {
		ep_err(ep, rc, "rpc to cn %u: the node went down (dead or fenced)", dst_cn);
	} else if (rc == -REMORA_EPROTO) {
		ep_err(ep, rc, "rpc to cn %u: malformed reply", dst_cn);
	}
	p->state = P_FREE;
	p->co = NULL;
	p->calls = NULL;
	p->next_free = ep->free_head;
	ep->free_head = (int32_t)slot;
	ep->inflight--;
	return rc;
}

/* How many of calls[0..n) fit one frame as whole requests (0: not even the first). */
static unsigned frame_fit(const struct remora_rpc *r, const struct remora_rpc_call *calls,
			  unsigned n, uint32_t *total)
{
	unsigned k = 0;

	*total = 0;
	for (; k < n; k++) {
		uint64_t t = *total + sizeof(struct rpc_req_ent) + (uint64_t)calls[k].req_len;

		if (t > r->fpay)
			break;
		*total = (uint32_t)t;
	}
	return k;
}

/* Sends calls[0..n) (they fit one frame) as one one-way message, waiting for room only. */
static int post_frame(struct remora_rpc_ep *ep, uint16_t dst_cn, uint16_t dst_worker,
		      const struct remora_rpc_call *calls, unsigned n, uint32_t total,
		      uint64_t deadline)
{
	struct rpc_req_ent ents[REMORA_RPC_MAX_BATCH];
	struct req_src q = { .calls = calls, .n = n, .ents = ents };
	struct remora_coro *co = remora_coro_self();
	struct rpc_msg m = { .kind = RPC_ONEWAY, .dst_cn = dst_cn, .dst_worker = dst_worker,
			     .coord = co ? (uint16_t)remora_coro_index(co) : UINT16_MAX,
			     .nent = (uint16_t)n, .nfrag = 1, .id = RPC_ONEWAY_ID, .total = total };
	int rc;

	for (unsigned i = 0; i < n; i++)
		ents[i] = (struct rpc_req_ent){ .op = calls[i].op, .len = calls[i].req_len };
	rc = send_request(ep, NULL, &m, &q, deadline);
	if (rc)
		return rc;
	ep->st.calls++;
	ep->st.requests += n;
	return 0;
}

REMORA_API int remora_rpc_post(struct remora_rpc_ep *ep, uint16_t dst_cn, uint16_t dst_worker,
			       const struct remora_rpc_call *calls, unsigned n, int timeout_ms)
{
	uint64_t deadline;
	unsigned at = 0;
	int rc;

	if (!ep)
		return -EINVAL;
	rc = batch_check(ep, calls, n, dst_worker, timeout_ms);
	if (rc)
		return rc;
	if (is_down(ep->r, dst_cn))
		return ep_err(ep, -EHOSTDOWN, "rpc post to cn %u: the node is down (dead or "
			      "fenced)", dst_cn);
	deadline = deadline_after(timeout_ms);
	while (at < n) {
		uint32_t total;
		unsigned k = frame_fit(ep->r, calls + at, n - at, &total);

		if (!k)
			return ep_err(ep, -EMSGSIZE, "rpc post to cn %u: request %u (%u bytes) does "
				      "not fit one frame (%u)", dst_cn, at, calls[at].req_len,
				      ep->r->fpay);
		rc = post_frame(ep, dst_cn, dst_worker, calls + at, k, total, deadline);
		if (rc)
			return rc;
		at += k;
	}
	return 0;
}
