/* SPDX-License-Identifier: MIT */
/*
 * Memory-node side: the pool is memory of the memory-node process (huge pages where available,
 * else page-aligned), registered as memory regions whose I/O virtual address is the pool
 * offset, so a compute node's remote address is just the offset it names. An rdma_cm listener
 * thread accepts one RC QP per (compute-node channel, this node) and refuses fenced compute
 * nodes; fencing moves that node's QPs to the error state.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "rrdma.h"

#define HUGE_BYTES (2u << 20)
#define MN_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | \
		   IBV_ACCESS_REMOTE_ATOMIC)

_Static_assert(REMORA_MAX_CN <= 64, "fenced compute nodes are one 64-bit mask");

/* One accepted connection: a compute node's channel reaching this pool. */
struct rrdma_mconn {
	struct rdma_cm_id *id;
	struct ibv_qp *qp;
	uint16_t cn;
	bool fenced;
	struct rrdma_mconn *next;
};

struct rrdma_region {
	uint64_t off;
	uint64_t len;
	struct ibv_mr *mr; /* NULL: free slot */
};

struct rrdma_pool {
	struct rrdma_tp *t;
	uint16_t node;
	void *mem;
	size_t map_len;
	uint64_t bytes;
	struct ibv_cq *cq;     /* QPs need one; a responder posts nothing to it */
	pthread_mutex_t lock;  /* regions, conns, fenced */
	struct rrdma_region regions[REMORA_MAX_REGIONS];
	struct rrdma_mconn *conns;
	uint64_t fenced;       /* bit per compute node, never cleared */
	struct rrdma_listener lis;
};

/* ---- connections (listener thread, rrdma_cm_lock held) -------------------------------------- */

static void mconn_free(struct rrdma_mconn *c)
{
	if (c->qp)
		ibv_destroy_qp(c->qp);
	free(c);
}

static void mconn_unlink(struct rrdma_pool *p, struct rrdma_mconn *c)
{
	for (struct rrdma_mconn **pp = &p->conns; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			return;
		}
	}
}

static bool cn_fenced(const struct rrdma_pool *p, uint16_t cn)
{
	return cn < REMORA_MAX_CN && ((p->fenced >> cn) & 1);
}

/* Makes a QP for the request and accepts it. Pool lock held: a fence cannot slip between the
 * check of the fenced mask and the connection joining the list. */
static bool accept_verbs(struct rrdma_pool *p, struct rdma_cm_id *id,
			 const struct rrdma_wire_req *req)
{
	struct rrdma_tp *t = p->t;
	struct rrdma_wire_rep rep;
	struct rrdma_mconn *c = calloc(1, sizeof(*c));
	enum ibv_mtu mtu = rrdma_mtu_min(t->dev.mtu, (enum ibv_mtu)req->mtu);
	uint32_t inl = 0;

	if (!c)
		goto err_reject;
	c->id = id;
	c->cn = req->cn;
	c->qp = rrdma_qp_create(t, p->cq, p->cq, 1, 1, &inl);
	if (!c->qp || rrdma_qp_ready(t, id, c->qp, MN_ACCESS, mtu, t->dev.rd_atomic))
		goto err_free;
	rrdma_wire_rep_fill(&rep, RRDMA_REP_OK, (uint8_t)mtu, 0);
	if (rrdma_accept(t, id, c->qp, &rep))
		goto err_free;
	id->context = c;
	c->next = p->conns;
	p->conns = c;
	return false;

err_free:
	mconn_free(c);
err_reject:
	rrdma_reject(id, RRDMA_REP_NO_RESOURCES);
	return true;
}

static bool on_request(struct rrdma_pool *p, struct rdma_cm_event *ev)
{
	struct rrdma_wire_req req;
	uint8_t status;
	bool destroy;

	if (!rrdma_wire_req_parse(ev->param.conn.private_data, ev->param.conn.private_data_len,
				  &req) ||
	    (req.kind != RRDMA_KIND_VERBS && req.kind != RRDMA_KIND_CHECK))
		status = RRDMA_REP_BAD_REQUEST;
	else if (req.cluster != p->t->cluster_hash)
		status = RRDMA_REP_WRONG_CLUSTER;
	else if (req.target != p->node)
		status = RRDMA_REP_WRONG_NODE;
	else
		status = RRDMA_REP_OK;
	if (status != RRDMA_REP_OK) {
		rrdma_reject(ev->id, status);
		return true;
	}
	pthread_mutex_lock(&p->lock);
	if (cn_fenced(p, req.cn)) {
		rrdma_reject(ev->id, RRDMA_REP_FENCED);
		destroy = true;
	} else if (req.kind == RRDMA_KIND_CHECK) {
		rrdma_reject(ev->id, RRDMA_REP_CHECKED); /* an answer without a QP */
		destroy = true;
	} else {
		destroy = accept_verbs(p, ev->id, &req);
	}
	pthread_mutex_unlock(&p->lock);
	return destroy;
}

static bool pool_handle(void *arg, struct rdma_cm_event *ev)
{
	struct rrdma_pool *p = arg;
	struct rrdma_mconn *c;

	switch (ev->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		return on_request(p, ev);
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
		/* The compute node closed, died or never completed the handshake. */
		c = ev->id->context;
		pthread_mutex_lock(&p->lock);
		mconn_unlink(p, c);
		pthread_mutex_unlock(&p->lock);
		mconn_free(c);
		return true;
	default:
		return false;
	}
}

/* ---- pool ----------------------------------------------------------------------------------- */

static size_t round_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

/*
 * Explicit huge pages when asked for and reserved, else transparent huge pages by advice (the
 * NIC's address translation caches fewer entries for larger pages). Private anonymous memory:
 * since Linux 5.x a fork copies pinned pages for the child, so the registered pages stay ours.
 */
static int pool_alloc(struct rrdma_pool *p, uint64_t bytes)
{
	size_t len = round_up(bytes, HUGE_BYTES);
	void *m = MAP_FAILED;

	if (p->t->cfg.hugepages)
		m = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (m == MAP_FAILED) {
		len = round_up(bytes, (size_t)sysconf(_SC_PAGESIZE));
		m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return remora_backend_error(p->t->tp, -errno, "pool %u: mmap %zu bytes: %s",
						    p->node, len, strerror(errno));
		madvise(m, len, MADV_HUGEPAGE); /* advice only */
	}
	p->mem = m;
	p->map_len = len;
	p->bytes = bytes;
	return remora_backend_bind_numa(p->t->tp, p->t->cfg.numa_node, m, len);
}

int rrdma_pool_open(void *tpriv, const struct remora_pool_spec *spec, void **ppriv, void **base,
		    uint64_t *bytes)
{
	struct rrdma_tp *t = tpriv;
	struct rrdma_pool *p;
	int rc;

	if (!(spec->flags & REMORA_POOL_CREATE))
		return remora_backend_error(t->tp, -ENOENT,
					    "pool %u: rdma pools live in the memory-node process; "
					    "open them with REMORA_POOL_CREATE", spec->node);
	if (spec->bytes == 0)
		return remora_backend_error(t->tp, -EINVAL, "pool %u: bytes must be > 0",
					    spec->node);
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->t = t;
	p->node = spec->node;
	pthread_mutex_init(&p->lock, NULL);
	rc = pool_alloc(p, spec->bytes);
	if (rc)
		goto err_unmap;
	p->cq = ibv_create_cq(t->dev.ctx, 1, NULL, NULL, 0);
	if (!p->cq) {
		rc = remora_backend_error(t->tp, -errno, "pool %u: completion queue: %s", p->node,
					  strerror(errno));
		goto err_unmap;
	}
	rc = rrdma_listener_start(t, &p->lis, pool_handle, p);
	if (rc)
		goto err_cq;
	*ppriv = p;
	*base = p->mem;
	*bytes = p->bytes;
	return 0;

err_cq:
	ibv_destroy_cq(p->cq);
err_unmap:
	if (p->mem)
		munmap(p->mem, p->map_len);
	pthread_mutex_destroy(&p->lock);
	free(p);
	return rc;
}

void rrdma_pool_close(void *ppriv, bool unlink)
{
	struct rrdma_pool *p = ppriv;

	(void)unlink; /* no file behind an rdma pool */
	rrdma_listener_halt(&p->lis);
	rrdma_cm_lock();
	while (p->conns) {
		struct rrdma_mconn *c = p->conns;

		p->conns = c->next;
		rdma_disconnect(c->id);
		ibv_destroy_qp(c->qp);
		c->qp = NULL;
		rdma_destroy_id(c->id);
		free(c);
	}
	rrdma_cm_unlock();
	rrdma_listener_stop(&p->lis);
	for (unsigned i = 0; i < REMORA_MAX_REGIONS; i++)
		if (p->regions[i].mr)
			ibv_dereg_mr(p->regions[i].mr);
	ibv_destroy_cq(p->cq);
	munmap(p->mem, p->map_len);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

int rrdma_pool_reg(void *ppriv, uint64_t off, uint64_t len, uint32_t *key)
{
	struct rrdma_pool *p = ppriv;
	struct rrdma_region *r = NULL;
	struct ibv_mr *mr;
	int rc = 0;

	pthread_mutex_lock(&p->lock);
	for (unsigned i = 0; i < REMORA_MAX_REGIONS && !r; i++)
		if (!p->regions[i].mr)
			r = &p->regions[i];
	if (!r) {
		rc = remora_backend_error(p->t->tp, -REMORA_EFULL, "pool %u: all %d regions in use",
					  p->node, REMORA_MAX_REGIONS);
		goto out;
	}
	/* iova = pool offset: a compute node's remote address is the offset itself. */
	mr = ibv_reg_mr_iova(p->t->dev.pd, (char *)p->mem + off, len, off, MN_ACCESS);
	if (!mr) {
		rc = remora_backend_error(p->t->tp, -errno,
					  "pool %u: register [%llu, +%llu) on %s: %s", p->node,
					  (unsigned long long)off, (unsigned long long)len,
					  p->t->dev.name, strerror(errno));
		goto out;
	}
	if (mr->rkey == 0) { /* 0 means "no key" to the core; never seen, but never hand it out */
		ibv_dereg_mr(mr);
		rc = remora_backend_error(p->t->tp, -EAGAIN, "pool %u: device gave rkey 0", p->node);
		goto out;
	}
	r->off = off;
	r->len = len;
	r->mr = mr;
	*key = mr->rkey;
out:
	pthread_mutex_unlock(&p->lock);
	return rc;
}

int rrdma_pool_dereg(void *ppriv, uint32_t key)
{
	struct rrdma_pool *p = ppriv;
	int rc = -REMORA_EBADKEY;

	/* Under the lock, so that the slot is freed only once the key is dead at the NIC. */
	pthread_mutex_lock(&p->lock);
	for (unsigned i = 0; key && i < REMORA_MAX_REGIONS && rc == -REMORA_EBADKEY; i++) {
		if (!p->regions[i].mr || p->regions[i].mr->rkey != key)
			continue;
		rc = -ibv_dereg_mr(p->regions[i].mr); /* 0 or an errno value */
		if (rc == 0)
			p->regions[i].mr = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	if (rc == -REMORA_EBADKEY)
		return remora_backend_error(p->t->tp, rc, "pool %u: no region with key %#x",
					    p->node, key);
	if (rc)
		return remora_backend_error(p->t->tp, rc, "pool %u: deregister key %#x: %s",
					    p->node, key, strerror(-rc));
	return 0;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Moves one QP to the error state and reads the state back. */
static int qp_to_error(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	struct ibv_qp_init_attr ia;
	int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE);

	if (rc)
		return -rc;
	memset(&a, 0, sizeof(a));
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return -errno;
	return a.qp_state == IBV_QPS_ERR ? 0 : -EIO;
}

/*
 * Fencing: the mask makes the listener refuse cn from now on (a fenced CN cannot reconnect),
 * and every QP of cn goes to the error state, where the responder drops its requests. The
 * grace period covers soft-RoCE, whose responder runs in a softirq that the state change does
 * not wait for: a request already past the state check may still land in that window.
 */
int rrdma_pool_fence(void *ppriv, uint16_t cn)
{
	struct rrdma_pool *p = ppriv;
	unsigned moved = 0;
	int rc = 0;

	pthread_mutex_lock(&p->lock);
	p->fenced |= UINT64_C(1) << cn;
	for (struct rrdma_mconn *c = p->conns; c && !rc; c = c->next) {
		if (c->cn != cn || c->fenced)
			continue;
		rc = qp_to_error(c->qp);
		c->fenced = rc == 0;
		moved++;
	}
	pthread_mutex_unlock(&p->lock);
	if (rc)
		return remora_backend_error(p->t->tp, rc, "pool %u: fence cn %u: QP to error: %s",
					    p->node, cn, strerror(-rc));
	if (moved)
		sleep_ms(RRDMA_FENCE_GRACE_MS);
	return 0;
}

int rrdma_pool_describe(void *ppriv, struct remora_node_desc *desc)
{
	struct rrdma_pool *p = ppriv;
	unsigned n = 0;

	desc->node = p->node;
	desc->bytes = p->bytes;
	pthread_mutex_lock(&p->lock);
	for (unsigned i = 0; i < REMORA_MAX_REGIONS; i++) {
		if (!p->regions[i].mr)
			continue;
		desc->regions[n].off = p->regions[i].off;
		desc->regions[n].len = p->regions[i].len;
		desc->regions[n].key = p->regions[i].mr->rkey;
		n++;
	}
	pthread_mutex_unlock(&p->lock);
	desc->nregions = (uint16_t)n;
	snprintf(desc->locator, sizeof(desc->locator), "%s", p->lis.locator);
	return 0;
}
