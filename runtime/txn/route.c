/* SPDX-License-Identifier: MIT */
/*
 * Routing transactions to their home compute node (<remora/route.h>, docs/lotus.md "Routing").
 *
 * Per worker: a ring of requests that came in for it, and one answer slot per coordinator.
 * Both are touched by the worker's own thread only: the RPC handlers run in the worker's
 * dispatcher, inside its scheduler, as do the coroutines that take requests and poll answers.
 * So no locks; a plain ring serves (a Debian queue library would add the locking this does
 * not need).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <remora/route.h>
#include <remora/rpc.h>

#include "protocol.h"
#include "store/hash.h"
#include "txn.h"

#define ROUTE_RING_MIN 256u     /* the ring's first size; it doubles when full */
#define ROUTE_RING_MAX 65536u   /* past this a request is refused (a sender ignoring answers) */

struct route_wire_req {
	uint32_t ticket;
	uint16_t dst_worker;
	uint16_t len;
	unsigned char data[REMORA_ROUTE_MAX_REQ];
};

struct route_wire_ans {
	uint32_t ticket;
	uint16_t worker; /* the sender's worker and coordinator */
	uint16_t coord;
	int32_t status;
};

struct route_slot {
	uint32_t ticket; /* the request this coordinator sent last */
	uint32_t next;   /* its next ticket */
	bool done;
	int status;
};

struct txn_route {
	struct remora_route_req *ring;
	uint32_t cap;     /* ring entries, a power of 2 */
	uint64_t head, tail;
	struct route_slot *slots; /* per coordinator of the worker */
};

/* A starting ticket that differs between processes (time and pid) and coordinators. */
static uint32_t ticket_base(const struct remora_worker *w, unsigned coord)
{
	struct timespec ts;
	uint64_t x;

	clock_gettime(CLOCK_REALTIME, &ts);
	x = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 7;
	x ^= (uint64_t)w->index << 48 ^ (uint64_t)coord << 40;
	return (uint32_t)(store_mix64(x) >> 32);
}

int txn_route_worker_init(struct remora_worker *w)
{
	struct txn_route *r;

	if (!w->db->route)
		return 0;
	if (w->index >= REMORA_RPC_MAX_WORKERS || !w->rpc)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (r) {
		r->cap = ROUTE_RING_MIN;
		r->ring = calloc(r->cap, sizeof(*r->ring));
		r->slots = calloc(w->ncoords, sizeof(*r->slots));
	}
	if (!r || !r->ring || !r->slots) {
		if (r) {
			free(r->ring);
			free(r->slots);
		}
		free(r);
		return -ENOMEM;
	}
	/* tickets start somewhere new in every process: an answer meant for a restarted
	 * sender's previous process must not match a request of this one */
	for (unsigned i = 0; i < w->ncoords; i++)
		r->slots[i].next = ticket_base(w, i);
	w->route = r;
	__atomic_store_n(&w->db->route_w[w->index], w, __ATOMIC_RELEASE);
	return 0;
}

void txn_route_worker_fini(struct remora_worker *w)
{
	struct txn_route *r = w->route;

	if (w->index < REMORA_RPC_MAX_WORKERS)
		__atomic_store_n(&w->db->route_w[w->index], NULL, __ATOMIC_RELEASE);
	if (!r)
		return;
	free(r->ring);
	free(r->slots);
	free(r);
	w->route = NULL;
}

/* The worker a handler runs for: the one whose endpoint received the request. */
static struct remora_worker *handler_worker(struct remora_db *db, const struct remora_rpc_req *q,
					    unsigned index)
{
	struct remora_worker *w;

	if (index >= REMORA_RPC_MAX_WORKERS)
		return NULL;
	w = __atomic_load_n(&db->route_w[index], __ATOMIC_ACQUIRE);
	return w && w->rpc == q->ep && w->route ? w : NULL;
}

/* Doubles r's ring, keeping the queued requests in order. 0 or -ENOMEM. */
static int ring_grow(struct txn_route *r)
{
	uint32_t n = (uint32_t)(r->tail - r->head), cap = r->cap * 2;
	struct remora_route_req *ring;

	if (cap > ROUTE_RING_MAX || !(ring = calloc(cap, sizeof(*ring))))
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		ring[i] = r->ring[(r->head + i) & (r->cap - 1)];
	free(r->ring);
	r->ring = ring;
	r->cap = cap;
	r->head = 0;
	r->tail = n;
	return 0;
}

/* A request for this node: queue it at its worker. */
static int h_request(void *arg, const struct remora_rpc_req *q, void *rep, uint32_t cap,
		     uint32_t *rep_len)
{
	struct route_wire_req m;
	struct remora_route_req *e;
	struct remora_worker *w;
	struct txn_route *r;

	(void)rep;
	(void)cap;
	*rep_len = 0;
	if (q->len < offsetof(struct route_wire_req, data) || q->len > sizeof(m))
		return -REMORA_EPROTO;
	memset(&m, 0, sizeof(m));
	memcpy(&m, q->data, q->len);
	if (m.len > q->len - offsetof(struct route_wire_req, data) ||
	    !(w = handler_worker(arg, q, m.dst_worker)))
		return -REMORA_EPROTO;
	r = w->route;
	if (r->tail - r->head == r->cap && ring_grow(r))
		return -ENOMEM;
	e = &r->ring[r->tail++ & (r->cap - 1)];
	*e = (struct remora_route_req){ .cn = q->from.cn, .worker = q->from.worker,
					.coord = q->from.coord, .ticket = m.ticket, .len = m.len };
	memcpy(e->data, m.data, m.len);
	return 0;
}

/* An answer: the coordinator's slot takes it if it is for the request it sent last. */
static int h_answer(void *arg, const struct remora_rpc_req *q, void *rep, uint32_t cap,
		    uint32_t *rep_len)
{
	struct route_wire_ans a;
	struct remora_worker *w;
	struct route_slot *s;

	(void)rep;
	(void)cap;
	*rep_len = 0;
	if (q->len != sizeof(a))
		return -REMORA_EPROTO;
	memcpy(&a, q->data, sizeof(a));
	w = handler_worker(arg, q, a.worker);
	if (!w || a.coord >= w->ncoords)
		return -REMORA_EPROTO;
	s = &w->route->slots[a.coord];
	if (s->ticket == a.ticket && !s->done) {
		s->done = true;
		s->status = a.status;
	}
	return 0;
}

int txn_route_rpc_init(struct remora_db *db, struct remora_rpc *rpc)
{
	int rc = remora_rpc_register(rpc, TXN_ROUTE_OP_REQUEST, h_request, db);

	return rc ? rc : remora_rpc_register(rpc, TXN_ROUTE_OP_ANSWER, h_answer, db);
}

REMORA_API int remora_route_home(struct remora_db *db, uint32_t table, uint64_t key,
				 uint16_t *cn)
{
	if (!db || !cn)
		return -EINVAL;
	return db->proto->key_home(db, table, key, cn);
}

/* The calling coroutine's coordinator index on w, or -EINVAL. */
static int self_coord(const struct remora_worker *w)
{
	struct remora_coro *co = remora_coro_self();
	unsigned i = co && remora_sched_self() == w->sched ? remora_coro_index(co) : UINT32_MAX;

	return i < w->ncoords ? (int)i : -EINVAL;
}

REMORA_API int remora_route_send(struct remora_worker *w, uint16_t cn, const void *req,
				 uint32_t len, uint32_t *ticket)
{
	struct route_wire_req m;
	struct remora_rpc_call k = { .op = TXN_ROUTE_OP_REQUEST, .req = &m };
	struct route_slot *s;
	int coord, rc;

	if (!w || !w->route || !ticket || (len && !req) || len > REMORA_ROUTE_MAX_REQ ||
	    cn == w->db->cn_id)
		return -EINVAL;
	coord = self_coord(w);
	if (coord < 0)
		return coord;
	s = &w->route->slots[coord];
	m.ticket = ++s->next;
	m.dst_worker = (uint16_t)w->index;
	m.len = (uint16_t)len;
	if (len)
		memcpy(m.data, req, len);
	k.req_len = (uint32_t)(offsetof(struct route_wire_req, data) + len);
	*s = (struct route_slot){ .ticket = m.ticket, .next = m.ticket };
	rc = remora_rpc_post(w->rpc, cn, (uint16_t)w->index, &k, 1, 0);
	if (rc)
		return rc;
	*ticket = m.ticket;
	return 0;
}

REMORA_API int remora_route_take(struct remora_worker *w, struct remora_route_req *out)
{
	struct txn_route *r;

	if (!w || !w->route || !out)
		return -EINVAL;
	r = w->route;
	if (r->head == r->tail)
		return -EAGAIN;
	*out = r->ring[r->head++ & (r->cap - 1)];
	return 0;
}

REMORA_API int remora_route_answer(struct remora_worker *w, const struct remora_route_req *r,
				   int status)
{
	struct route_wire_ans a;
	struct remora_rpc_call k = { .op = TXN_ROUTE_OP_ANSWER, .req = &a, .req_len = sizeof(a) };

	if (!w || !w->route || !r)
		return -EINVAL;
	a = (struct route_wire_ans){ .ticket = r->ticket, .worker = r->worker, .coord = r->coord,
				     .status = status };
	return remora_rpc_post(w->rpc, r->cn, r->worker, &k, 1, 0);
}

REMORA_API int remora_route_done(struct remora_worker *w, uint32_t ticket, int *status)
{
	struct route_slot *s;
	int coord;

	if (!w || !w->route || !status)
		return -EINVAL;
	coord = self_coord(w);
	if (coord < 0)
		return coord;
	s = &w->route->slots[coord];
	if (s->ticket != ticket)
		return -EINVAL;
	if (!s->done)
		return -EAGAIN;
	*status = s->status;
	return 0;
}
