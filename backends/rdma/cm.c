/* SPDX-License-Identifier: MIT */
/*
 * Connection management over rdma_cm. QPs are created and moved through INIT -> RTR -> RTS by
 * hand (not with rdma_create_qp) so that they live on our own device context and protection
 * domain and take our MTU, GID index, timeout and retry settings; rdma_cm only carries the
 * handshake and its private data (struct rrdma_wire_req / rrdma_wire_rep).
 *
 * Active side: rrdma_connect() (synchronous, bounded). Passive side: a listener thread per
 * listening object (memory-node pool, compute-node mailbox) calling the owner's handler.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "rrdma.h"

/* ---- fork safety ---------------------------------------------------------------------------- */

static pthread_mutex_t cm_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t cm_once = PTHREAD_ONCE_INIT;

static void cm_prepare(void)
{
	pthread_mutex_lock(&cm_mutex);
}

static void cm_parent(void)
{
	pthread_mutex_unlock(&cm_mutex);
}

static void cm_child(void)
{
	pthread_mutex_init(&cm_mutex, NULL);
}

static void cm_register(void)
{
	pthread_atfork(cm_prepare, cm_parent, cm_child);
}

void rrdma_cm_lock(void)
{
	pthread_once(&cm_once, cm_register);
	pthread_mutex_lock(&cm_mutex);
}

void rrdma_cm_unlock(void)
{
	pthread_mutex_unlock(&cm_mutex);
}

/* ---- addresses and wire format ------------------------------------------------------------ */

uint64_t rrdma_hash(const char *s)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325); /* FNV-1a */

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * UINT64_C(0x100000001b3);
	return h;
}

/* "a.b.c.d:port" or "[v6]:port" (a "%scope" suffix inside the brackets is allowed). */
int rrdma_parse_locator(const char *s, struct sockaddr_storage *ss)
{
	char host[INET6_ADDRSTRLEN + IF_NAMESIZE + 2];
	const char *colon, *hs = s, *he;
	unsigned long port;
	char *end;

	memset(ss, 0, sizeof(*ss));
	if (s[0] == '[') {
		hs = s + 1;
		he = strchr(hs, ']');
		if (!he || he[1] != ':')
			return -EINVAL;
		colon = he + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -EINVAL;
		he = colon;
	}
	if ((size_t)(he - hs) >= sizeof(host) || he == hs)
		return -EINVAL;
	memcpy(host, hs, (size_t)(he - hs));
	host[he - hs] = '\0';
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (errno || *end || end == colon + 1 || port == 0 || port > 65535)
		return -EINVAL;
	if (s[0] != '[') {
		struct sockaddr_in *in = (struct sockaddr_in *)ss;

		if (inet_pton(AF_INET, host, &in->sin_addr) != 1)
			return -EINVAL;
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
		char *pct = strchr(host, '%');

		if (pct) {
			*pct = '\0';
			in6->sin6_scope_id = if_nametoindex(pct + 1);
			if (!in6->sin6_scope_id)
				in6->sin6_scope_id = (uint32_t)strtoul(pct + 1, NULL, 10);
		}
		if (inet_pton(AF_INET6, host, &in6->sin6_addr) != 1)
			return -EINVAL;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
	}
	return 0;
}

void rrdma_format_addr(const struct sockaddr *sa, bool with_port, char *buf, size_t n)
{
	char host[INET6_ADDRSTRLEN];

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		if (with_port)
			snprintf(buf, n, "%s:%u", host, ntohs(in->sin_port));
		else
			snprintf(buf, n, "%s", host);
	} else {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		if (with_port && in6->sin6_scope_id)
			snprintf(buf, n, "[%s%%%u]:%u", host, in6->sin6_scope_id,
				 ntohs(in6->sin6_port));
		else if (with_port)
			snprintf(buf, n, "[%s]:%u", host, ntohs(in6->sin6_port));
		else
			snprintf(buf, n, "%s", host);
	}
}

void rrdma_wire_req_init(struct rrdma_tp *t, struct rrdma_wire_req *r, uint8_t kind,
			 uint16_t target)
{
	uint16_t cn = t->cfg.self_cn >= 0 ? (uint16_t)t->cfg.self_cn : RRDMA_NO_CN;

	memset(r, 0, sizeof(*r));
	r->magic = htole32(RRDMA_WIRE_MAGIC);
	r->version = htole16(RRDMA_WIRE_VERSION);
	r->kind = kind;
	r->mtu = (uint8_t)t->dev.mtu;
	r->cn = htole16(cn);
	r->target = htole16(target);
	r->cluster = htole64(t->cluster_hash);
}

bool rrdma_wire_req_parse(const void *pdata, uint8_t len, struct rrdma_wire_req *r)
{
	if (!pdata || len < sizeof(*r))
		return false;
	memcpy(r, pdata, sizeof(*r));
	r->magic = le32toh(r->magic);
	r->version = le16toh(r->version);
	r->cn = le16toh(r->cn);
	r->target = le16toh(r->target);
	r->credit_rkey = le32toh(r->credit_rkey);
	r->credit_addr = le64toh(r->credit_addr);
	r->cluster = le64toh(r->cluster);
	return r->magic == RRDMA_WIRE_MAGIC && r->version == RRDMA_WIRE_VERSION;
}

void rrdma_wire_rep_fill(struct rrdma_wire_rep *r, uint8_t status, uint8_t mtu, uint32_t slots)
{
	memset(r, 0, sizeof(*r));
	r->magic = htole32(RRDMA_WIRE_MAGIC);
	r->version = htole16(RRDMA_WIRE_VERSION);
	r->status = status;
	r->mtu = mtu;
	r->slots = htole32(slots);
}

bool rrdma_wire_rep_parse(const void *pdata, uint8_t len, struct rrdma_wire_rep *r)
{
	if (!pdata || len < sizeof(*r))
		return false;
	memcpy(r, pdata, sizeof(*r));
	r->magic = le32toh(r->magic);
	r->version = le16toh(r->version);
	r->slots = le32toh(r->slots);
	return r->magic == RRDMA_WIRE_MAGIC && r->version == RRDMA_WIRE_VERSION;
}

/* ---- queue pairs ---------------------------------------------------------------------------- */

struct ibv_qp *rrdma_qp_create(struct rrdma_tp *t, struct ibv_cq *scq, struct ibv_cq *rcq,
			       uint32_t sq_depth, uint32_t rq_depth, uint32_t *max_inline)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = scq,
		.recv_cq = rcq,
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0,
		.cap = {
			.max_send_wr = sq_depth,
			.max_recv_wr = rq_depth ? rq_depth : 1,
			.max_send_sge = 1,
			.max_recv_sge = 1,
			.max_inline_data = *max_inline,
		},
	};
	struct ibv_qp *qp = ibv_create_qp(t->dev.pd, &ia);

	if (!qp && *max_inline) {
		/* Some devices have no inline data: plain WRITEs from the bounce arena instead. */
		ia.cap.max_inline_data = 0;
		qp = ibv_create_qp(t->dev.pd, &ia);
	}
	if (qp)
		*max_inline = ia.cap.max_inline_data < *max_inline ? ia.cap.max_inline_data :
								     *max_inline;
	return qp;
}

int rrdma_qp_init(struct rrdma_tp *t, struct rdma_cm_id *id, struct ibv_qp *qp, int access)
{
	struct ibv_qp_attr a;
	int mask = 0;

	(void)t;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	if (rdma_init_qp_attr(id, &a, &mask))
		return -errno;
	a.qp_access_flags = (unsigned)access;
	mask |= IBV_QP_ACCESS_FLAGS;
	return -ibv_modify_qp(qp, &a, mask);
}

int rrdma_qp_rtr_rts(struct rrdma_tp *t, struct rdma_cm_id *id, struct ibv_qp *qp,
		     enum ibv_mtu mtu, uint8_t rd_atomic)
{
	struct ibv_qp_attr a;
	int mask = 0, rc;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (rdma_init_qp_attr(id, &a, &mask))
		return -errno;
	a.path_mtu = rrdma_mtu_min(a.path_mtu, mtu);
	a.max_dest_rd_atomic = rd_atomic;
	if (a.ah_attr.is_global)
		a.ah_attr.grh.sgid_index = (uint8_t)t->dev.gid_index;
	rc = ibv_modify_qp(qp, &a, mask | IBV_QP_PATH_MTU | IBV_QP_MAX_DEST_RD_ATOMIC);
	if (rc)
		return -rc;
	memset(&a, 0, sizeof(a));
	mask = 0;
	a.qp_state = IBV_QPS_RTS;
	if (rdma_init_qp_attr(id, &a, &mask))
		return -errno;
	/* rdma_cm's RoCE timeout is ~0.5 s per try: a fenced peer would take seconds to notice. */
	a.timeout = t->dev.qp_timeout;
	a.retry_cnt = RRDMA_QP_RETRY;
	a.rnr_retry = 7; /* 7 = retry forever: receivers pre-post, credits bound the sender */
	a.max_rd_atomic = rd_atomic;
	return -ibv_modify_qp(qp, &a, mask | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					      IBV_QP_MAX_QP_RD_ATOMIC);
}

int rrdma_qp_ready(struct rrdma_tp *t, struct rdma_cm_id *id, struct ibv_qp *qp, int access,
		   enum ibv_mtu mtu, uint8_t rd_atomic)
{
	int rc = rrdma_qp_init(t, id, qp, access);

	return rc ? rc : rrdma_qp_rtr_rts(t, id, qp, mtu, rd_atomic);
}

/* ---- active side ---------------------------------------------------------------------------- */

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
}

/* Waits for the next event on ec until deadline; the caller acknowledges it. */
static int wait_event(struct rdma_event_channel *ec, int64_t deadline,
		      struct rdma_cm_event **ev)
{
	for (;;) {
		struct pollfd pfd = { .fd = ec->fd, .events = POLLIN };
		int64_t left = deadline - now_ms();
		int rc;

		rrdma_cm_lock();
		rc = rdma_get_cm_event(ec, ev);
		rrdma_cm_unlock();
		if (rc == 0)
			return 0;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		if (left <= 0)
			return -ETIMEDOUT;
		if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR)
			return -errno;
	}
}

static const char *rep_status_name(uint8_t s)
{
	switch (s) {
	case RRDMA_REP_FENCED:
		return "this compute node is fenced";
	case RRDMA_REP_WRONG_NODE:
		return "the listener serves another memory node";
	case RRDMA_REP_WRONG_CLUSTER:
		return "the listener belongs to another cluster";
	case RRDMA_REP_BAD_REQUEST:
		return "the peer did not understand the request (version?)";
	case RRDMA_REP_NO_RESOURCES:
		return "the peer is out of resources";
	default:
		return "refused";
	}
}

static int rep_status_code(uint8_t s)
{
	switch (s) {
	case RRDMA_REP_FENCED:
		return -REMORA_EFENCED;
	case RRDMA_REP_WRONG_NODE:
		return -REMORA_ENODE;
	case RRDMA_REP_WRONG_CLUSTER:
	case RRDMA_REP_BAD_REQUEST:
		return -REMORA_EPROTO;
	case RRDMA_REP_NO_RESOURCES:
		return -ENOMEM;
	default:
		return -ECONNREFUSED;
	}
}

/* What a REJECTED event means: our reply status, or nobody listening there. */
static int on_rejected(const struct rrdma_connect_args *a, struct rdma_cm_event *ev,
		       struct rrdma_cconn *cc, char *why, size_t whylen)
{
	struct rrdma_wire_rep rep;

	if (!rrdma_wire_rep_parse(ev->param.conn.private_data, ev->param.conn.private_data_len,
				  &rep)) {
		if (ev->status == 10) { /* IB_CM_REJ_STALE_CONN */
			snprintf(why, whylen, "refused as a stale connection");
			return -EAGAIN;
		}
		snprintf(why, whylen, "connection refused (nobody listens there; reason %d)",
			 ev->status);
		return -ECONNREFUSED;
	}
	cc->rep = rep;
	if (a->req.kind == RRDMA_KIND_CHECK && rep.status == RRDMA_REP_CHECKED)
		return 0;
	snprintf(why, whylen, "%s", rep_status_name(rep.status));
	return rep_status_code(rep.status);
}

static int connect_fail(char *why, size_t whylen, int rc, const char *what)
{
	snprintf(why, whylen, "%s: %s", what, strerror(-rc));
	return rc;
}

/* Address and route resolution, then checks that rdma_cm picked our device and port. */
static int resolve(struct rrdma_tp *t, const struct rrdma_connect_args *a, struct rrdma_cconn *cc,
		   int64_t deadline, char *why, size_t whylen)
{
	static const enum rdma_cm_event_type want[2] = { RDMA_CM_EVENT_ADDR_RESOLVED,
							 RDMA_CM_EVENT_ROUTE_RESOLVED };
	struct rdma_cm_event *ev;
	int rc;

	for (int step = 0; step < 2; step++) {
		enum rdma_cm_event_type got;

		rrdma_cm_lock();
		rc = step == 0 ? rdma_resolve_addr(cc->id, (struct sockaddr *)&t->dev.addr,
						   (struct sockaddr *)a->dst, RRDMA_RESOLVE_MS) :
				 rdma_resolve_route(cc->id, RRDMA_RESOLVE_MS);
		rc = rc ? -errno : 0;
		rrdma_cm_unlock();
		if (rc)
			return connect_fail(why, whylen, rc,
					    step ? "rdma_resolve_route" : "rdma_resolve_addr");
		rc = wait_event(cc->ec, deadline, &ev);
		if (rc)
			return connect_fail(why, whylen, rc, step ? "route" : "address");
		got = ev->event;
		rdma_ack_cm_event(ev);
		if (got != want[step]) {
			snprintf(why, whylen, "%s: %s", step ? "route" : "address",
				 rdma_event_str(got));
			return -EHOSTUNREACH;
		}
	}
	if (!cc->id->verbs || strcmp(ibv_get_device_name(cc->id->verbs->device), t->dev.name) ||
	    cc->id->port_num != t->dev.port) {
		snprintf(why, whylen, "the route leaves through %s port %u, not %s port %u",
			 cc->id->verbs ? ibv_get_device_name(cc->id->verbs->device) : "?",
			 cc->id->port_num, t->dev.name, t->dev.port);
		return -EHOSTUNREACH;
	}
	return 0;
}

/* CONNECT_RESPONSE: RTR and RTS with the MTU the passive side chose, then establish. */
static int finish_connect(struct rrdma_tp *t, struct rdma_cm_event *ev, struct rrdma_cconn *cc,
			  char *why, size_t whylen)
{
	uint8_t rd = ev->param.conn.responder_resources;
	int rc;

	if (!rrdma_wire_rep_parse(ev->param.conn.private_data, ev->param.conn.private_data_len,
				  &cc->rep) || cc->rep.status != RRDMA_REP_OK) {
		snprintf(why, whylen, "malformed accept reply");
		return -REMORA_EPROTO;
	}
	if (rd == 0 || rd > t->dev.rd_atomic)
		rd = t->dev.rd_atomic;
	rc = rrdma_qp_rtr_rts(t, cc->id, cc->qp, rrdma_mtu_min(t->dev.mtu, cc->rep.mtu), rd);
	if (rc)
		return connect_fail(why, whylen, rc, "QP to RTS");
	rrdma_cm_lock();
	rc = rdma_establish(cc->id) ? -errno : 0;
	rrdma_cm_unlock();
	return rc ? connect_fail(why, whylen, rc, "rdma_establish") : 0;
}

static int do_connect(struct rrdma_tp *t, const struct rrdma_connect_args *a,
		      struct rrdma_cconn *cc, int64_t deadline, char *why, size_t whylen)
{
	struct rdma_conn_param p = {
		.private_data = &a->req,
		.private_data_len = sizeof(a->req),
		.responder_resources = t->dev.rd_atomic,
		.initiator_depth = t->dev.rd_atomic,
		.retry_count = RRDMA_QP_RETRY,
		.rnr_retry_count = 7,
	};
	struct rdma_cm_event *ev;
	int rc;

	/*
	 * A check makes a QP too, though it is never used: the CM of the other side refuses a
	 * request whose (GID, QP number) it already holds as "stale", so the number must be a
	 * live one of ours.
	 */
	if (!a->want_qp) {
		cc->tmp_cq = ibv_create_cq(t->dev.ctx, 1, NULL, NULL, 0);
		if (!cc->tmp_cq)
			return connect_fail(why, whylen, -errno, "create CQ");
	}
	cc->max_inline = a->want_qp ? a->max_inline : 0;
	cc->qp = rrdma_qp_create(t, a->want_qp ? a->scq : cc->tmp_cq,
				 a->want_qp ? a->rcq : cc->tmp_cq, a->want_qp ? a->sq_depth : 1,
				 a->rq_depth, &cc->max_inline);
	if (!cc->qp)
		return connect_fail(why, whylen, -errno, "create QP");
	rc = rrdma_qp_init(t, cc->id, cc->qp, IBV_ACCESS_LOCAL_WRITE | a->access);
	if (rc)
		return connect_fail(why, whylen, rc, "QP to INIT");
	p.qp_num = cc->qp->qp_num;
	rrdma_cm_lock();
	rc = rdma_connect(cc->id, &p) ? -errno : 0;
	rrdma_cm_unlock();
	if (rc)
		return connect_fail(why, whylen, rc, "rdma_connect");
	rc = wait_event(cc->ec, deadline, &ev);
	if (rc)
		return connect_fail(why, whylen, rc, "connect");
	switch (ev->event) {
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		rc = a->want_qp ? finish_connect(t, ev, cc, why, whylen) : -REMORA_EPROTO;
		break;
	case RDMA_CM_EVENT_REJECTED:
		rc = on_rejected(a, ev, cc, why, whylen);
		break;
	default:
		snprintf(why, whylen, "connect: %s (status %d)", rdma_event_str(ev->event),
			 ev->status);
		rc = ev->event == RDMA_CM_EVENT_UNREACHABLE ? -EHOSTUNREACH : -ECONNREFUSED;
	}
	rdma_ack_cm_event(ev);
	return rc;
}

static int connect_once(struct rrdma_tp *t, const struct rrdma_connect_args *a,
			struct rrdma_cconn *cc, int64_t deadline, char *why, size_t whylen)
{
	int rc;

	memset(cc, 0, sizeof(*cc));
	why[0] = '\0';
	rrdma_cm_lock();
	cc->ec = rdma_create_event_channel();
	rc = cc->ec ? 0 : -errno;
	if (!rc)
		rc = set_nonblock(cc->ec->fd);
	if (!rc && rdma_create_id(cc->ec, &cc->id, cc, RDMA_PS_TCP))
		rc = -errno;
	rrdma_cm_unlock();
	if (rc) {
		rrdma_cconn_close(cc);
		return connect_fail(why, whylen, rc, "rdma_cm");
	}
	rc = resolve(t, a, cc, deadline, why, whylen);
	if (!rc)
		rc = do_connect(t, a, cc, deadline, why, whylen);
	if (rc || !a->want_qp)
		rrdma_cconn_close(cc);
	return rc;
}

int rrdma_connect(struct rrdma_tp *t, const struct rrdma_connect_args *a, struct rrdma_cconn *cc,
		  char *why, size_t whylen)
{
	int64_t deadline = now_ms() + RRDMA_CONNECT_MS;
	int rc;

	for (;;) {
		rc = connect_once(t, a, cc, deadline, why, whylen);
		/* The peer's CM still remembers an old connection with our QP number (its
		 * time-wait): that clears by itself, so try again shortly. */
		if (rc != -EAGAIN || now_ms() + 20 > deadline)
			return rc == -EAGAIN ? -ECONNREFUSED : rc;
		poll(NULL, 0, 10);
	}
}

void rrdma_cconn_close(struct rrdma_cconn *cc)
{
	struct rdma_cm_event *ev;

	rrdma_cm_lock();
	if (cc->id && cc->qp)
		rdma_disconnect(cc->id); /* tells the peer; fails harmlessly if not connected */
	/* rdma_destroy_id waits for every event it reported to be acknowledged. */
	while (cc->ec && rdma_get_cm_event(cc->ec, &ev) == 0)
		rdma_ack_cm_event(ev);
	if (cc->qp)
		ibv_destroy_qp(cc->qp);
	if (cc->id)
		rdma_destroy_id(cc->id);
	if (cc->ec)
		rdma_destroy_event_channel(cc->ec);
	if (cc->tmp_cq)
		ibv_destroy_cq(cc->tmp_cq);
	rrdma_cm_unlock();
	cc->tmp_cq = NULL;
	cc->qp = NULL;
	cc->id = NULL;
	cc->ec = NULL;
}

/* ---- passive side --------------------------------------------------------------------------- */

int rrdma_accept(struct rrdma_tp *t, struct rdma_cm_id *id, struct ibv_qp *qp,
		 const struct rrdma_wire_rep *rep)
{
	struct rdma_conn_param p = {
		.private_data = rep,
		.private_data_len = sizeof(*rep),
		.responder_resources = t->dev.rd_atomic,
		.initiator_depth = t->dev.rd_atomic,
		.rnr_retry_count = 7,
		.qp_num = qp ? qp->qp_num : 0,
	};

	return rdma_accept(id, &p) ? -errno : 0;
}

void rrdma_reject(struct rdma_cm_id *id, uint8_t status)
{
	struct rrdma_wire_rep rep;

	rrdma_wire_rep_fill(&rep, status, 0, 0);
	rdma_reject(id, &rep, sizeof(rep));
}

static void *listener_main(void *arg)
{
	struct rrdma_listener *l = arg;

	for (;;) {
		struct pollfd pfd[2] = { { .fd = l->ec->fd, .events = POLLIN },
					 { .fd = l->stop_fd, .events = POLLIN } };
		struct rdma_cm_event *ev;

		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			break;
		if (pfd[1].revents)
			break;
		rrdma_cm_lock();
		while (rdma_get_cm_event(l->ec, &ev) == 0) {
			struct rdma_cm_id *id = ev->id;
			bool destroy = id != l->id && l->handle(l->arg, ev);

			rdma_ack_cm_event(ev);
			if (destroy)
				rdma_destroy_id(id);
		}
		rrdma_cm_unlock();
	}
	return NULL;
}

int rrdma_listener_start(struct rrdma_tp *t, struct rrdma_listener *l,
			 bool (*handle)(void *arg, struct rdma_cm_event *ev), void *arg)
{
	const char *what = "rdma_create_event_channel";
	int rc = 0;

	memset(l, 0, sizeof(*l));
	l->t = t;
	l->handle = handle;
	l->arg = arg;
	l->stop_fd = -1;
	rrdma_cm_lock();
	l->ec = rdma_create_event_channel();
	if (!l->ec)
		rc = -errno;
	if (!rc && (rc = set_nonblock(l->ec->fd)) == 0 &&
	    rdma_create_id(l->ec, &l->id, l, RDMA_PS_TCP)) {
		rc = -errno;
		what = "rdma_create_id";
	}
	if (!rc && rdma_bind_addr(l->id, (struct sockaddr *)&t->dev.addr)) {
		rc = -errno;
		what = "rdma_bind_addr";
	}
	if (!rc && rdma_listen(l->id, 128)) {
		rc = -errno;
		what = "rdma_listen";
	}
	rrdma_cm_unlock();
	if (rc) {
		remora_backend_error(t->tp, rc, "listen on %s (%s port %u): %s: %s", t->dev.addr_str,
				     t->dev.name, t->dev.port, what, strerror(-rc));
		goto err_close;
	}
	rrdma_format_addr(rdma_get_local_addr(l->id), true, l->locator, sizeof(l->locator));
	l->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->stop_fd < 0) {
		rc = remora_backend_error(t->tp, -errno, "eventfd: %s", strerror(errno));
		goto err_close;
	}
	rc = -pthread_create(&l->thread, NULL, listener_main, l);
	if (rc) {
		remora_backend_error(t->tp, rc, "listener thread: %s", strerror(-rc));
		goto err_close;
	}
	l->running = true;
	return 0;

err_close:
	rrdma_listener_stop(l);
	return rc;
}

/* Stops the listener thread; connection ids stay (their owner destroys them next). */
void rrdma_listener_halt(struct rrdma_listener *l)
{
	uint64_t one = 1;

	if (!l->running)
		return;
	while (write(l->stop_fd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
	pthread_join(l->thread, NULL);
	l->running = false;
}

/* Halts the thread, then destroys the listening id and the channel. The owner must have
 * destroyed its connection ids (they share the channel) after rrdma_listener_halt(). */
void rrdma_listener_stop(struct rrdma_listener *l)
{
	if (!l->t)
		return; /* zeroed, never started: its stop_fd 0 is not ours to close */
	rrdma_listener_halt(l);
	if (l->stop_fd >= 0)
		close(l->stop_fd);
	l->stop_fd = -1;
	rrdma_cm_lock();
	if (l->id)
		rdma_destroy_id(l->id);
	if (l->ec)
		rdma_destroy_event_channel(l->ec);
	rrdma_cm_unlock();
	l->id = NULL;
	l->ec = NULL;
}
