/* SPDX-License-Identifier: MIT */
/*
 * The memory-node daemon core: creates and registers the pool, then serves the control plane
 * from one io_uring event loop (accept, recv, send, a lease timer, a stop eventfd and an
 * optional signalfd). Each connection has at most one operation in flight: it receives, and
 * once a whole request is in its buffer it sends the one reply, then receives again. Bytes
 * from peers are never trusted: every frame is checked before it is read (ctl.h), and nothing
 * but the handshake is served before the peer proved it holds the cluster secret (auth.h).
 * Connections that never authenticate, or stall inside a request, are closed after ctl_idle_ms;
 * newcomers evict the oldest unauthenticated connections, so idle strangers cannot lock members
 * out; refusals are logged at a bounded rate.
 */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "cluster/ctl.h"
#include "cluster/evlog.h"
#include "mutate/mutate.h"

#define MN_MAX_CONNS 256 /* live connections */
/* Slots: live ones, plus refused ones whose operation in flight has not returned yet. */
#define MN_SLOTS (MN_MAX_CONNS + 64)
#define MN_RING_DEPTH 512
#define MN_REFUSED_LINES 10 /* refused peers logged one by one per second; the rest counted */
#define MN_DRAIN_NS 1000000000ull /* a refused peer gets this long to read why, then is cut */

enum mn_op {
	OP_ACCEPT = 1,
	OP_RECV,
	OP_SEND,
	OP_TIMER,
	OP_STOP,
	OP_SIGNAL,
};

enum member_state {
	MEMBER_NONE,
	MEMBER_ALIVE,
	MEMBER_DEAD,
};

struct conn {
	int fd;             /* -1: free slot */
	int cn;             /* the compute node that joined on this connection, -1 */
	bool closing;       /* close once the pending reply is sent */
	bool authed;        /* proved the cluster secret (AUTH) */
	bool helloed;       /* a HELLO was answered: want is this connection's expected proof */
	bool sending;       /* the operation in flight is a send (else a receive) */
	bool dying;         /* refused: closed once its operation in flight returns; not live */
	bool draining;      /* refusal sent: reading (and dropping) until the peer hangs up */
	uint64_t since_ns;  /* accepted at; once authenticated: first byte of an unfinished frame */
	uint8_t addr[16];   /* the peer's IP address (IPv4 as ::ffff:a.b.c.d) */
	char peer[64];      /* "address:port", for the log */
	uint8_t want[RAUTH_PROOF_BYTES]; /* the client's proof expected by AUTH */
	uint32_t rx_len;
	uint32_t tx_len, tx_off;
	_Alignas(8) uint8_t rx[RCTL_MAX_MSG];
	_Alignas(8) uint8_t tx[RCTL_MAX_MSG]; /* replies are built in place, as structs */
};

struct member {
	uint8_t state;  /* enum member_state */
	bool joined;    /* joined at least once: start barriers wait for every id to have joined */
	uint32_t pid;
	uint64_t expiry_ns; /* lease end, monotonic clock */
	int conn;           /* connection slot it joined on, -1 */
	uint32_t msg_gen;   /* generation of msg_loc, 0: none (see struct rctl_view_rep) */
	char msg_loc[REMORA_MSG_LOCATOR_MAX]; /* where it receives messages, as it joined */
};

struct remora_mn {
	const struct remora_params *p;
	uint16_t id;
	struct remora_transport *tp;
	struct remora_pool *pool;
	struct remora_node_desc desc;
	int listen_fd;
	uint16_t port;
	int stop_fd;
	int signal_fd;
	bool keep_pool;
	struct io_uring ring;
	bool ring_up;
	bool stopping;
	bool shutdown_after_send;
	bool accept_paused; /* accept failed for lack of resources; re-posted by the timer */
	uint32_t max_cn, heartbeat_ms, lease_ms;
	bool zk_decides; /* membership = zookeeper: a member is declared dead only on FENCE */
	struct __kernel_timespec tick;
	uint64_t stop_buf;
	struct signalfd_siginfo sig_buf;
	pthread_mutex_t lock; /* members and epoch, read by remora_mn_view() from any thread */
	struct member members[REMORA_MAX_CN];
	uint64_t epoch;
	uint32_t msg_serial; /* last message-locator generation handed out */
	struct conn *conns;
	uint8_t key[RAUTH_KEY_BYTES]; /* the cluster secret */
	uint64_t mutations;           /* runtime/mutate, layer MUT_CLUSTER */
	uint64_t idle_ns;             /* ctl_idle_ms */
	unsigned peer_conns;          /* ctl_peer_conns */
	struct {
		uint64_t window_ns; /* start of the current second */
		unsigned lines, suppressed;
	} refused_log;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Membership events only: never called per verb (the node is not on the data path). */
#define mn_log(mn, ...) evlog(stderr, "mn", (mn)->id, __VA_ARGS__)

/* ---- io_uring submission helpers -------------------------------------------------------- */

static inline uint64_t udata(enum mn_op op, unsigned slot)
{
	return (uint64_t)op | ((uint64_t)slot << 8);
}

static struct io_uring_sqe *get_sqe(struct remora_mn *mn)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&mn->ring);

	if (!sqe) {
		io_uring_submit(&mn->ring);
		sqe = io_uring_get_sqe(&mn->ring);
	}
	return sqe;
}

static int post_accept(struct remora_mn *mn)
{
	struct io_uring_sqe *sqe = get_sqe(mn);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_accept(sqe, mn->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(sqe, udata(OP_ACCEPT, 0));
	return 0;
}

static int post_timer(struct remora_mn *mn)
{
	struct io_uring_sqe *sqe = get_sqe(mn);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_timeout(sqe, &mn->tick, 0, 0);
	io_uring_sqe_set_data64(sqe, udata(OP_TIMER, 0));
	return 0;
}

static int post_read(struct remora_mn *mn, int fd, void *buf, unsigned len, enum mn_op op)
{
	struct io_uring_sqe *sqe = get_sqe(mn);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_read(sqe, fd, buf, len, 0);
	io_uring_sqe_set_data64(sqe, udata(op, 0));
	return 0;
}

static void conn_close(struct remora_mn *mn, unsigned slot);

static void post_recv(struct remora_mn *mn, unsigned slot)
{
	struct conn *c = &mn->conns[slot];
	struct io_uring_sqe *sqe = get_sqe(mn);

	if (!sqe) {
		conn_close(mn, slot);
		return;
	}
	io_uring_prep_recv(sqe, c->fd, c->rx + c->rx_len, sizeof(c->rx) - c->rx_len, 0);
	io_uring_sqe_set_data64(sqe, udata(OP_RECV, slot));
	c->sending = false;
}

static void post_send(struct remora_mn *mn, unsigned slot)
{
	struct conn *c = &mn->conns[slot];
	struct io_uring_sqe *sqe = get_sqe(mn);

	if (!sqe) {
		conn_close(mn, slot);
		return;
	}
	io_uring_prep_send(sqe, c->fd, c->tx + c->tx_off, c->tx_len - c->tx_off, MSG_NOSIGNAL);
	io_uring_sqe_set_data64(sqe, udata(OP_SEND, slot));
	c->sending = true;
}

/* ---- refused peers ---------------------------------------------------------------------- */

/* Starts a new second of the refused-peer log, first reporting what the last one suppressed. */
static void refused_log_roll(struct remora_mn *mn, uint64_t now)
{
	if (now - mn->refused_log.window_ns < 1000000000ull)
		return;
	if (mn->refused_log.suppressed)
		mn_log(mn,
		       "refused %u more peers (not logged one by one: at most %u lines a second)",
		       mn->refused_log.suppressed, MN_REFUSED_LINES);
	mn->refused_log.window_ns = now;
	mn->refused_log.lines = 0;
	mn->refused_log.suppressed = 0;
}

/* One line per refused peer, at most MN_REFUSED_LINES a second: a flood cannot fill a disk. */
static void log_refused(struct remora_mn *mn, const char *peer, const char *why)
{
	refused_log_roll(mn, now_ns());
	if (mn->refused_log.lines >= MN_REFUSED_LINES &&
	    !(mut_on(mn->mutations, MUT_NO_LOG_LIMIT))) {
		mn->refused_log.suppressed++;
		return;
	}
	mn->refused_log.lines++;
	mn_log(mn, "refused %s: %s", peer, why);
}

/*
 * Tells a peer why it is cut off, outside the request/reply order: an ERROR with seq 0, which
 * no request has (ctl.c). Best effort and never blocking; only between requests, so that it
 * cannot land inside a reply being sent.
 */
static void send_reason(int fd, int status, const char *why)
{
	struct rctl_error_rep e;
	ssize_t n;

	memset(&e, 0, sizeof(e));
	rctl_hdr_init(&e.r.h, RCTL_REPLY | RCTL_ERROR, sizeof(e), 0);
	e.r.status = status;
	snprintf(e.text, sizeof(e.text), "%s", why);
	n = send(fd, &e, sizeof(e), MSG_DONTWAIT | MSG_NOSIGNAL);
	(void)n; /* a peer that cannot take 136 bytes learns it from the hang-up alone */
}

/*
 * Ends a connection that has an operation in flight: says why, logs the peer, and shuts the
 * socket down, which completes that operation; its completion then closes the slot. The slot
 * stops counting as live at once, so that a newcomer can take its place.
 */
static void conn_kill(struct remora_mn *mn, unsigned slot, int status, const char *why)
{
	struct conn *c = &mn->conns[slot];

	if (!c->sending)
		send_reason(c->fd, status, why);
	log_refused(mn, c->peer, why);
	shutdown(c->fd, SHUT_RDWR);
	c->dying = true;
}

/* ---- membership ------------------------------------------------------------------------- */

/*
 * Once no member is left, the next run of jobs starts a new round: the joined bits go, so
 * that its start barrier waits for every compute node again instead of seeing the last
 * round's arrivals. Dead ids keep their dead bit, which barriers count as arrived.
 */
static void forget_joined_when_idle(struct remora_mn *mn)
{
	for (unsigned i = 0; i < REMORA_MAX_CN; i++)
		if (mn->members[i].state == MEMBER_ALIVE)
			return;
	for (unsigned i = 0; i < REMORA_MAX_CN; i++)
		mn->members[i].joined = false;
}

static void fill_view(struct remora_mn *mn, struct remora_cluster_view *v)
{
	memset(v, 0, sizeof(*v));
	v->epoch = mn->epoch;
	for (unsigned i = 0; i < REMORA_MAX_CN; i++) {
		const struct member *m = &mn->members[i];

		if (m->state == MEMBER_ALIVE)
			v->alive |= UINT64_C(1) << i;
		else if (m->state == MEMBER_DEAD)
			v->dead |= UINT64_C(1) << i;
		if (m->joined)
			v->joined |= UINT64_C(1) << i;
		v->pid[i] = m->state == MEMBER_NONE ? 0 : m->pid;
	}
}

void remora_mn_view(const struct remora_mn *mn, struct remora_cluster_view *out)
{
	struct remora_mn *m = (struct remora_mn *)mn;

	pthread_mutex_lock(&m->lock);
	fill_view(m, out);
	pthread_mutex_unlock(&m->lock);
}

/* A member that left or died receives no more messages: peers forget its locator. */
static void forget_locator(struct member *m)
{
	m->msg_gen = 0;
	m->msg_loc[0] = '\0';
}

/* Fences cn in the pool and marks it dead; called with mn->lock held. */
static int declare_dead(struct remora_mn *mn, unsigned cn, const char *why)
{
	struct member *m = &mn->members[cn];
	int rc = remora_pool_fence(mn->pool, (uint16_t)cn);

	if (m->state != MEMBER_DEAD) {
		mn_log(mn, "cn %u (pid %u) declared dead: %s; %s", cn, m->pid, why,
		       rc ? remora_strerror(rc) : "fenced");
		m->state = MEMBER_DEAD;
		mn->epoch++;
		forget_joined_when_idle(mn);
	}
	forget_locator(m);
	if (m->conn >= 0 && mn->conns[m->conn].cn == (int)cn)
		mn->conns[m->conn].cn = -1;
	m->conn = -1;
	return rc;
}

static void check_leases(struct remora_mn *mn)
{
	uint64_t now = now_ns();

	pthread_mutex_lock(&mn->lock);
	for (unsigned i = 0; i < REMORA_MAX_CN; i++) {
		struct member *m = &mn->members[i];

		if (m->state == MEMBER_ALIVE && now > m->expiry_ns && !mn->zk_decides) {
			char why[64];

			snprintf(why, sizeof(why), "no heartbeat for %u ms", mn->lease_ms);
			declare_dead(mn, i, why);
		}
	}
	pthread_mutex_unlock(&mn->lock);
}

/* ---- replies ---------------------------------------------------------------------------- */

static void *reply_start(struct conn *c, const struct rctl_hdr *req, size_t len, int status)
{
	struct rctl_rep *r = (struct rctl_rep *)c->tx;

	memset(c->tx, 0, len);
	rctl_hdr_init(&r->h, req->type | RCTL_REPLY, len, req->seq);
	r->status = status;
	c->tx_len = (uint32_t)len;
	c->tx_off = 0;
	return r;
}

static void reply_error(struct conn *c, uint32_t seq, int status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void reply_error(struct conn *c, uint32_t seq, int status, const char *fmt, ...)
{
	struct rctl_error_rep *e = (struct rctl_error_rep *)c->tx;
	va_list ap;

	memset(e, 0, sizeof(*e));
	rctl_hdr_init(&e->r.h, RCTL_REPLY | RCTL_ERROR, sizeof(*e), seq);
	e->r.status = status;
	va_start(ap, fmt);
	vsnprintf(e->text, sizeof(e->text), fmt, ap);
	va_end(ap);
	c->tx_len = sizeof(*e);
	c->tx_off = 0;
}

static void reply_view(struct remora_mn *mn, struct conn *c, const struct rctl_hdr *req,
		       int status)
{
	struct rctl_view_rep *r = reply_start(c, req, sizeof(*r), status);

	fill_view(mn, &r->view);
	for (unsigned i = 0; i < REMORA_MAX_CN; i++)
		r->msg_gen[i] = mn->members[i].msg_gen;
}

/* ---- requests --------------------------------------------------------------------------- */

static void on_hello(struct remora_mn *mn, struct conn *c, const struct rctl_hello *q)
{
	struct rctl_hello_rep *r;
	char cluster[RCTL_NAME_MAX], backend[sizeof(q->backend)];
	const char *mine = remora_params_str(mn->p, REMORA_P_CLUSTER);

	snprintf(cluster, sizeof(cluster), "%.*s", (int)sizeof(q->cluster) - 1, q->cluster);
	snprintf(backend, sizeof(backend), "%.*s", (int)sizeof(q->backend) - 1, q->backend);
	if (strcmp(cluster, mine) != 0) {
		reply_error(c, q->h.seq, -REMORA_ECONFIG,
			    "cluster '%.40s' asked, this memory node serves '%.40s'", cluster,
			    mine);
		return;
	}
	/* A tool that asks no backend and no cn count (remora mn --stop) is checked for neither. */
	if ((q->cn != -1 || backend[0]) &&
	    strcmp(backend, remora_transport_backend(mn->tp)) != 0) {
		reply_error(c, q->h.seq, -REMORA_ECONFIG,
			    "backend '%s' asked, this memory node runs '%s'", backend,
			    remora_transport_backend(mn->tp));
		return;
	}
	if ((q->cn != -1 || q->max_cn) && q->max_cn != mn->max_cn) {
		reply_error(c, q->h.seq, -REMORA_ECONFIG,
			    "cn count %u asked, this memory node was started with cn = %u",
			    q->max_cn, mn->max_cn);
		return;
	}
	r = reply_start(c, &q->h, sizeof(*r), 0);
	r->mn = mn->id;
	r->max_cn = mn->max_cn;
	r->heartbeat_ms = mn->heartbeat_ms;
	r->lease_ms = mn->lease_ms;
	r->pid = (uint32_t)getpid();
	snprintf(r->cluster, sizeof(r->cluster), "%s", mine);
	snprintf(r->backend, sizeof(r->backend), "%s", remora_transport_backend(mn->tp));
	/* Our proof over both nonces, and the client's proof that AUTH must bring. */
	rauth_nonce(r->nonce);
	rauth_proof(r->proof, mn->key, RAUTH_MN, q->cluster, q->nonce, r->nonce);
	rauth_proof(c->want, mn->key, RAUTH_CLIENT, q->cluster, q->nonce, r->nonce);
	c->helloed = true;
}

static void on_auth(struct remora_mn *mn, struct conn *c, const struct rctl_auth *q)
{
	if (mut_on(mn->mutations, MUT_SKIP_AUTH)) {
		c->authed = true;
		reply_start(c, &q->h, sizeof(struct rctl_rep), 0);
		return;
	}
	if (c->authed) {
		reply_error(c, q->h.seq, -EINVAL, "this connection is authenticated already");
		return;
	}
	if (!c->helloed) {
		reply_error(c, q->h.seq, -EACCES, "AUTH before HELLO");
		return;
	}
	if (!rauth_equal(c->want, q->proof)) {
		reply_error(c, q->h.seq, -EACCES, "wrong cluster key");
		return;
	}
	c->authed = true;
	c->since_ns = now_ns();
	reply_start(c, &q->h, sizeof(struct rctl_rep), 0);
}

/* A JOIN that brings another locator than the member had starts a new generation. */
static void set_locator(struct remora_mn *mn, struct member *m, const char *loc)
{
	if (!loc[0]) {
		forget_locator(m);
		return;
	}
	if (m->msg_gen && strcmp(m->msg_loc, loc) == 0)
		return;
	snprintf(m->msg_loc, sizeof(m->msg_loc), "%s", loc);
	if (++mn->msg_serial == 0)
		mn->msg_serial = 1; /* 0 means "none" */
	m->msg_gen = mn->msg_serial;
}

static void on_join(struct remora_mn *mn, unsigned slot, const struct rctl_join *j)
{
	const struct rctl_cn_req *q = &j->q;
	struct conn *c = &mn->conns[slot];
	struct member *m = &mn->members[q->cn];

	if (!rctl_locator_ok(j->msg_locator, sizeof(j->msg_locator))) {
		reply_error(c, q->h.seq, -EINVAL,
			    "JOIN of cn %u: message locator is not a printable string", q->cn);
		return;
	}
	if (c->cn >= 0 && c->cn != q->cn) {
		reply_error(c, q->h.seq, -EINVAL, "this connection already joined as cn %d", c->cn);
		return;
	}
	if (m->state == MEMBER_DEAD) {
		reply_error(c, q->h.seq, -REMORA_EFENCED,
			    "cn %u was declared dead and fenced; its id is not reused", q->cn);
		return;
	}
	if (m->state == MEMBER_ALIVE && m->conn != (int)slot) {
		reply_error(c, q->h.seq, -EEXIST, "cn %u is already a member (pid %u)", q->cn,
			    m->pid);
		return;
	}
	if (m->state != MEMBER_ALIVE)
		mn->epoch++;
	m->state = MEMBER_ALIVE;
	m->joined = true;
	m->pid = q->pid;
	m->conn = (int)slot;
	m->expiry_ns = now_ns() + (uint64_t)mn->lease_ms * 1000000u;
	set_locator(mn, m, j->msg_locator);
	c->cn = q->cn;
	reply_view(mn, c, &q->h, 0);
}

static void on_heartbeat(struct remora_mn *mn, unsigned slot, const struct rctl_cn_req *q)
{
	struct conn *c = &mn->conns[slot];
	struct member *m = &mn->members[q->cn];

	if (m->state == MEMBER_DEAD) {
		reply_view(mn, c, &q->h, -REMORA_EFENCED);
		return;
	}
	if (m->state != MEMBER_ALIVE || m->conn != (int)slot) {
		reply_error(c, q->h.seq, -REMORA_ENODE, "cn %u has not joined on this connection",
			    q->cn);
		return;
	}
	m->expiry_ns = now_ns() + (uint64_t)mn->lease_ms * 1000000u;
	reply_view(mn, c, &q->h, 0);
}

static void on_leave(struct remora_mn *mn, unsigned slot, const struct rctl_cn_req *q)
{
	struct conn *c = &mn->conns[slot];
	struct member *m = &mn->members[q->cn];

	if (m->state != MEMBER_ALIVE || m->conn != (int)slot) {
		reply_error(c, q->h.seq, -REMORA_ENODE, "cn %u has not joined on this connection",
			    q->cn);
		return;
	}
	m->state = MEMBER_NONE;
	m->conn = -1;
	forget_locator(m);
	c->cn = -1;
	mn->epoch++;
	forget_joined_when_idle(mn);
	reply_view(mn, c, &q->h, 0);
}

/* Any connection may ask (members learn their peers; tools may look). */
static void on_get_peer(struct remora_mn *mn, unsigned slot, const struct rctl_cn_req *q)
{
	const struct member *m = &mn->members[q->cn];
	struct rctl_peer_rep *r = reply_start(&mn->conns[slot], &q->h, sizeof(*r), 0);

	r->cn = q->cn;
	r->gen = m->msg_gen;
	snprintf(r->locator, sizeof(r->locator), "%s", m->msg_loc);
}

static void on_fence(struct remora_mn *mn, unsigned slot, const struct rctl_cn_req *q)
{
	int rc = declare_dead(mn, q->cn, "fenced on request");

	reply_view(mn, &mn->conns[slot], &q->h, rc);
}

static void on_cn_request(struct remora_mn *mn, unsigned slot, const struct rctl_cn_req *q)
{
	struct conn *c = &mn->conns[slot];

	if (q->cn >= mn->max_cn) {
		reply_error(c, q->h.seq, -REMORA_ENODE, "cn %u out of range (cn = %u)", q->cn,
			    mn->max_cn);
		return;
	}
	pthread_mutex_lock(&mn->lock);
	switch (q->h.type) {
	case RCTL_JOIN:
		on_join(mn, slot, (const struct rctl_join *)q);
		break;
	case RCTL_HEARTBEAT:
		on_heartbeat(mn, slot, q);
		break;
	case RCTL_LEAVE:
		on_leave(mn, slot, q);
		break;
	case RCTL_GET_PEER:
		on_get_peer(mn, slot, q);
		break;
	default:
		on_fence(mn, slot, q);
		break;
	}
	pthread_mutex_unlock(&mn->lock);
}

/* Handles one whole, length-checked frame and leaves exactly one reply in c->tx. */
static void handle(struct remora_mn *mn, unsigned slot, const struct rctl_hdr *h)
{
	struct conn *c = &mn->conns[slot];
	size_t want = rctl_req_len(h->type);

	if (!want) {
		reply_error(c, h->seq, -REMORA_EPROTO, "unknown request type %u", h->type);
		return;
	}
	if (h->len != want) {
		reply_error(c, h->seq, -REMORA_EPROTO, "%s request of %u bytes (expected %zu)",
			    rctl_type_name(h->type), h->len, want);
		return;
	}
	if (!c->authed && h->type != RCTL_HELLO && h->type != RCTL_AUTH) {
		reply_error(c, h->seq, -EACCES, "%s refused: authenticate first (HELLO, then AUTH)",
			    rctl_type_name(h->type));
		return;
	}
	switch (h->type) {
	case RCTL_HELLO:
		on_hello(mn, c, (const struct rctl_hello *)h);
		break;
	case RCTL_AUTH:
		on_auth(mn, c, (const struct rctl_auth *)h);
		break;
	case RCTL_GET_DESC: {
		struct rctl_desc_rep *r = reply_start(c, h, sizeof(*r), 0);

		r->desc = mn->desc;
		break;
	}
	case RCTL_MEMBERS:
		pthread_mutex_lock(&mn->lock);
		reply_view(mn, c, h, 0);
		pthread_mutex_unlock(&mn->lock);
		break;
	case RCTL_SHUTDOWN:
		reply_start(c, h, sizeof(struct rctl_rep), 0);
		mn->shutdown_after_send = true;
		c->closing = true;
		break;
	default:
		on_cn_request(mn, slot, (const struct rctl_cn_req *)h);
		break;
	}
}

/*
 * Before it authenticated, a peer gets one refusal: the ERROR reply in c->tx says why, the
 * connection closes once it is sent, and the peer is logged.
 */
static void refuse_if_stranger(struct remora_mn *mn, struct conn *c)
{
	const struct rctl_error_rep *e = (const struct rctl_error_rep *)c->tx;

	if (c->authed || e->r.h.type != (RCTL_REPLY | RCTL_ERROR))
		return;
	c->closing = true;
	log_refused(mn, c->peer, e->text);
}

/*
 * Consumes the next whole frame of c's buffer, if any, and sends its reply; otherwise
 * receives more. Frames are copied out first so a struct is never read misaligned.
 */
static void conn_progress(struct remora_mn *mn, unsigned slot)
{
	struct conn *c = &mn->conns[slot];
	union {
		struct rctl_hdr h;
		uint8_t bytes[RCTL_MAX_MSG];
	} frame;
	const char *why;

	if (c->rx_len < sizeof(frame.h)) {
		post_recv(mn, slot);
		return;
	}
	memcpy(&frame.h, c->rx, sizeof(frame.h));
	if (rctl_check_hdr(&frame.h, &why)) {
		/* Framing is lost: say why, then hang up. */
		reply_error(c, frame.h.seq, -REMORA_EPROTO, "%s", why);
		c->closing = true;
		c->rx_len = 0;
		refuse_if_stranger(mn, c);
		post_send(mn, slot);
		return;
	}
	if (c->rx_len < frame.h.len) {
		post_recv(mn, slot);
		return;
	}
	memcpy(frame.bytes, c->rx, frame.h.len);
	c->rx_len -= frame.h.len;
	memmove(c->rx, c->rx + frame.h.len, c->rx_len);
	if (c->rx_len)
		c->since_ns = now_ns(); /* the next frame started arriving already */
	handle(mn, slot, &frame.h);
	refuse_if_stranger(mn, c);
	post_send(mn, slot);
}

/* ---- connections ------------------------------------------------------------------------ */

static void conn_close(struct remora_mn *mn, unsigned slot)
{
	struct conn *c = &mn->conns[slot];

	if (c->cn >= 0) {
		const struct member *m = &mn->members[c->cn];

		pthread_mutex_lock(&mn->lock);
		if (m->state == MEMBER_ALIVE && m->conn == (int)slot && !mn->zk_decides)
			declare_dead(mn, (unsigned)c->cn, "control connection lost without LEAVE");
		pthread_mutex_unlock(&mn->lock);
	}
	close(c->fd);
	c->fd = -1;
	c->cn = -1;
	c->dying = c->draining = false;
}

/* The peer's address as 16 bytes (IPv4 mapped into IPv6) and as "address:port". */
static void peer_of(int fd, uint8_t addr[16], char *name, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	memset(addr, 0, 16);
	memset(&ss, 0, sizeof(ss)); /* AF_UNSPEC when getpeername fails */
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;

		addr[10] = addr[11] = 0xff;
		memcpy(addr + 12, &in->sin_addr, 4);
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		port = ntohs(in->sin_port);
	} else if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&ss;

		memcpy(addr, &in6->sin6_addr, 16);
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		port = ntohs(in6->sin6_port);
	}
	snprintf(name, len, "%s:%u", host, port);
}

/*
 * Makes room for a newcomer from addr, or says it cannot be let in. Unauthenticated connections
 * are the only ones ever evicted, the oldest first: a newcomer that authenticates at once is
 * never the oldest, so idle strangers cannot lock members out. Per address, at most
 * ctl_peer_conns of them are kept, so one flooding address churns its own connections only.
 * Returns false when the newcomer must be refused (every live connection authenticated).
 */
/*
 * Evicts a stranger. One being drained (refused, reading until the peer hangs up) holds its
 * slot too: a flood of refused peers that never hang up must not fill the table, so it is cut
 * at once; its slot comes free when the pending receive completes.
 */
static void evict(struct remora_mn *mn, unsigned slot, const char *why)
{
	struct conn *c = &mn->conns[slot];

	if (c->draining) {
		shutdown(c->fd, SHUT_RDWR);
		c->draining = false;
		return;
	}
	conn_kill(mn, slot, -EBUSY, why);
}

static bool make_room(struct remora_mn *mn, const uint8_t addr[16])
{
	unsigned live = 0, same = 0, oldest = MN_SLOTS, oldest_same = MN_SLOTS;
	bool evict_ok = !(mut_on(mn->mutations, MUT_NO_EVICT));

	for (unsigned i = 0; i < MN_SLOTS; i++) {
		const struct conn *c = &mn->conns[i];

		if (c->fd < 0 || (c->dying && !c->draining))
			continue;
		live++;
		if (c->authed && !c->draining)
			continue;
		if (oldest == MN_SLOTS || c->since_ns < mn->conns[oldest].since_ns)
			oldest = i;
		if (memcmp(c->addr, addr, 16) == 0) {
			same++;
			if (oldest_same == MN_SLOTS ||
			    c->since_ns < mn->conns[oldest_same].since_ns)
				oldest_same = i;
		}
	}
	if (same >= mn->peer_conns) {
		if (!evict_ok)
			return false;
		evict(mn, oldest_same, "evicted: too many unauthenticated connections from this address");
		live--;
		if (oldest == oldest_same)
			oldest = MN_SLOTS;
	}
	if (live < MN_MAX_CONNS)
		return true;
	if (!evict_ok || oldest == MN_SLOTS)
		return false;
	evict(mn, oldest, "evicted: too many unauthenticated connections");
	return true;
}

static void admit(struct remora_mn *mn, int fd)
{
	struct conn *c = NULL;
	uint8_t addr[16];
	char peer[64];
	int one = 1;

	peer_of(fd, addr, peer, sizeof(peer));
	if (make_room(mn, addr))
		for (unsigned slot = 0; slot < MN_SLOTS && !c; slot++)
			if (mn->conns[slot].fd < 0)
				c = &mn->conns[slot];
	if (!c) {
		send_reason(fd, -EBUSY, "too many connections");
		log_refused(mn, peer, "too many connections");
		close(fd);
		return;
	}
	memset(c, 0, offsetof(struct conn, rx));
	c->fd = fd;
	c->cn = -1;
	c->authed = false;
	c->since_ns = now_ns();
	memcpy(c->addr, addr, sizeof(c->addr));
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	post_recv(mn, (unsigned)(c - mn->conns));
}

/*
 * Closes connections that never authenticated within ctl_idle_ms, or that hold an unfinished
 * request that long, and cuts refused peers that did not hang up after reading why.
 */
static void check_idle(struct remora_mn *mn)
{
	uint64_t now = now_ns();
	char why[80];

	refused_log_roll(mn, now);
	for (unsigned i = 0; i < MN_SLOTS; i++) {
		struct conn *c = &mn->conns[i];

		if (c->fd < 0 || (c->dying && !c->draining))
			continue;
		if (c->draining) {
			if (now - c->since_ns > MN_DRAIN_NS)
				shutdown(c->fd, SHUT_RDWR);
			continue;
		}
		if ((mut_on(mn->mutations, MUT_NO_IDLE_TIMEOUT)) || now - c->since_ns <= mn->idle_ns)
			continue;
		if (!c->authed) {
			snprintf(why, sizeof(why), "not authenticated within %" PRIu64 " ms",
				 mn->idle_ns / 1000000u);
			conn_kill(mn, i, -ETIMEDOUT, why);
		} else if (c->rx_len && !c->sending) {
			snprintf(why, sizeof(why), "half a request for more than %" PRIu64 " ms",
				 mn->idle_ns / 1000000u);
			conn_kill(mn, i, -ETIMEDOUT, why);
		}
	}
}

static void on_accept(struct remora_mn *mn, int fd)
{
	if (fd >= 0)
		admit(mn, fd);
	/* Out of descriptors (or worse): retry at the next timer tick instead of spinning. */
	if (fd < 0 && fd != -ECONNABORTED && fd != -EINTR && fd != -EAGAIN) {
		mn->accept_paused = true;
		return;
	}
	if (!mn->stopping && post_accept(mn))
		mn->stopping = true;
}

static void on_recv(struct remora_mn *mn, unsigned slot, int res)
{
	struct conn *c = &mn->conns[slot];

	if (res <= 0 || (c->dying && !c->draining)) {
		conn_close(mn, slot);
		return;
	}
	if (c->draining) { /* what a refused peer still sends is dropped */
		c->rx_len = 0;
		post_recv(mn, slot);
		return;
	}
	if (c->authed && c->rx_len == 0)
		c->since_ns = now_ns(); /* a frame starts */
	c->rx_len += (uint32_t)res;
	conn_progress(mn, slot);
}

static void on_send(struct remora_mn *mn, unsigned slot, int res)
{
	struct conn *c = &mn->conns[slot];

	if (res < 0 || c->dying) {
		conn_close(mn, slot);
		return;
	}
	c->tx_off += (uint32_t)res;
	if (c->tx_off < c->tx_len) {
		post_send(mn, slot);
		return;
	}
	if (c->closing) {
		if (mn->shutdown_after_send) {
			mn->stopping = true;
			conn_close(mn, slot);
			return;
		}
		/*
		 * Closing at once could turn what the peer sent meanwhile into a reset that
		 * destroys our answer before it is read: end our side, then read until the peer
		 * hangs up.
		 */
		shutdown(c->fd, SHUT_WR);
		c->dying = c->draining = true;
		c->since_ns = now_ns();
		c->rx_len = 0;
		post_recv(mn, slot);
		return;
	}
	conn_progress(mn, slot);
}

static void dispatch(struct remora_mn *mn, const struct io_uring_cqe *cqe)
{
	uint64_t ud = io_uring_cqe_get_data64(cqe);
	unsigned slot = (unsigned)(ud >> 8);

	switch ((enum mn_op)(ud & 0xff)) {
	case OP_ACCEPT:
		on_accept(mn, cqe->res);
		break;
	case OP_RECV:
		on_recv(mn, slot, cqe->res);
		break;
	case OP_SEND:
		on_send(mn, slot, cqe->res);
		break;
	case OP_TIMER:
		check_leases(mn);
		check_idle(mn);
		if (mn->accept_paused && !post_accept(mn))
			mn->accept_paused = false;
		if (post_timer(mn))
			mn->stopping = true;
		break;
	case OP_STOP:
	case OP_SIGNAL:
		if (cqe->res > 0 && (ud & 0xff) == OP_SIGNAL)
			mn_log(mn, "signal %u: exiting", mn->sig_buf.ssi_signo);
		mn->stopping = true;
		break;
	}
}

int remora_mn_run(struct remora_mn *mn)
{
	struct io_uring_cqe *cqe;
	int rc = 0;

	if (post_accept(mn) || post_timer(mn) ||
	    post_read(mn, mn->stop_fd, &mn->stop_buf, sizeof(mn->stop_buf), OP_STOP) ||
	    (mn->signal_fd >= 0 &&
	     post_read(mn, mn->signal_fd, &mn->sig_buf, sizeof(mn->sig_buf), OP_SIGNAL)))
		return -EBUSY;
	while (!mn->stopping) {
		unsigned head, n = 0;

		rc = io_uring_submit_and_wait(&mn->ring, 1);
		if (rc == -EINTR) {
			rc = 0;
			continue;
		}
		if (rc < 0)
			break;
		rc = 0;
		io_uring_for_each_cqe(&mn->ring, head, cqe)
		{
			dispatch(mn, cqe);
			n++;
		}
		io_uring_cq_advance(&mn->ring, n);
	}
	/* The last second's suppressed refusals are reported, not lost with the node. */
	refused_log_roll(mn, mn->refused_log.window_ns + 1000000000ull);
	/* Members are not declared dead here: it is this node that goes away. */
	for (unsigned i = 0; i < MN_SLOTS; i++) {
		if (mn->conns[i].fd >= 0)
			close(mn->conns[i].fd);
		mn->conns[i].fd = -1;
	}
	return rc;
}

void remora_mn_stop(struct remora_mn *mn)
{
	uint64_t one = 1;
	ssize_t n = write(mn->stop_fd, &one, sizeof(one));

	(void)n; /* an eventfd write cannot fail short of overflow; nothing to do about it */
}

/* ---- setup ------------------------------------------------------------------------------ */

static int listen_on(struct remora_mn *mn, const struct remora_node_addr *a, char *err,
		     size_t errlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE };
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct addrinfo *res;
	char port[8];
	int one = 1, rc, fd;

	snprintf(port, sizeof(port), "%u", a->port);
	rc = getaddrinfo(a->host, port, &hints, &res);
	if (rc) {
		snprintf(err, errlen, "mn %u: %s: %s", mn->id, a->host, gai_strerror(rc));
		return -REMORA_ECONFIG;
	}
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto fail_errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 128) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
		goto fail_errno;
	freeaddrinfo(res);
	mn->listen_fd = fd;
	mn->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						  : ((struct sockaddr_in *)&ss)->sin_port);
	return 0;

fail_errno:
	rc = -errno;
	snprintf(err, errlen, "mn %u: listen on %s:%u: %s", mn->id, a->host, a->port,
		 strerror(-rc));
	if (fd >= 0)
		close(fd);
	freeaddrinfo(res);
	return rc;
}

static int open_pool(struct remora_mn *mn, const struct remora_mn_cfg *cfg, char *err,
		     size_t errlen)
{
	struct remora_transport_cfg tcfg;
	struct remora_pool_spec spec = {
		.size = sizeof(spec),
		.node = mn->id,
		.bytes = remora_params_size(mn->p, REMORA_P_POOL_SIZE),
		/*
		 * A kept pool is durable: reopen it, never require a new one. The backend takes
		 * it over only once pool_check accepted it, so a refused pool stays as it was.
		 */
		.flags = REMORA_POOL_CREATE |
			 (mn->keep_pool ? REMORA_POOL_DEFER_COMMIT : REMORA_POOL_EXCL),
	};
	const char *cluster = remora_params_str(mn->p, REMORA_P_CLUSTER);
	uint32_t key;
	int rc;

	remora_cluster_transport_cfg(mn->p, -1, &tcfg);
	rc = remora_transport_open(&tcfg, &mn->tp);
	if (rc) {
		snprintf(err, errlen, "mn %u: %s", mn->id, remora_last_error());
		return rc;
	}
	rc = remora_pool_open(mn->tp, &spec, &mn->pool);
	if (rc == -EEXIST) {
		snprintf(err, errlen,
			 "mn %u: the pool of cluster '%s' exists: another memory node runs, or one "
			 "crashed (remove it with: remora clean --cluster %s)",
			 mn->id, cluster, cluster);
		return rc;
	}
	if (rc) {
		snprintf(err, errlen, "mn %u: pool: %s", mn->id, remora_transport_errmsg(mn->tp));
		return rc;
	}
	if (cfg->pool_check) {
		rc = cfg->pool_check(cfg->pool_check_arg, mn->pool, mn->id, err, errlen);
		if (rc)
			return rc;
	}
	rc = remora_pool_commit(mn->pool);
	if (rc) {
		snprintf(err, errlen, "mn %u: pool: %s", mn->id, remora_transport_errmsg(mn->tp));
		return rc;
	}
	rc = remora_pool_reg(mn->pool, 0, remora_pool_bytes(mn->pool), &key);
	if (!rc)
		rc = remora_pool_describe(mn->pool, &mn->desc);
	if (rc)
		snprintf(err, errlen, "mn %u: register pool: %s", mn->id, remora_strerror(rc));
	return rc;
}

int remora_mn_open(const struct remora_mn_cfg *cfg, struct remora_mn **out, char *err,
		   size_t errlen)
{
	struct remora_node_addr addr;
	struct remora_mn *mn;
	char key_path[RAUTH_PATH_MAX];
	bool key_created = false;
	uint64_t tick_ms;
	int rc;

	if (cfg->size < sizeof(*cfg) || !cfg->params) {
		snprintf(err, errlen, "remora_mn_open: bad configuration");
		return -EINVAL;
	}
	if (remora_params_mn_addr(cfg->params, cfg->id, &addr)) {
		snprintf(err, errlen, "mn %u: out of range (mn = %u)", cfg->id,
			 remora_params_mn_count(cfg->params));
		return -REMORA_ENODE;
	}
	if (cfg->port >= 0)
		addr.port = (uint16_t)cfg->port;
	mn = calloc(1, sizeof(*mn));
	if (!mn)
		return -ENOMEM;
	mn->conns = calloc(MN_SLOTS, sizeof(*mn->conns));
	if (!mn->conns) {
		rc = -ENOMEM;
		goto free_mn;
	}
	for (unsigned i = 0; i < MN_SLOTS; i++)
		mn->conns[i].fd = -1;
	for (unsigned i = 0; i < REMORA_MAX_CN; i++)
		mn->members[i].conn = -1;
	pthread_mutex_init(&mn->lock, NULL);
	mn->p = cfg->params;
	mn->id = cfg->id;
	mn->listen_fd = mn->stop_fd = -1;
	mn->signal_fd = cfg->signal_fd;
	mn->keep_pool = remora_params_bool(mn->p, REMORA_P_KEEP_POOL);
	mn->max_cn = remora_params_cn_count(mn->p);
	mn->heartbeat_ms = (uint32_t)remora_params_int(mn->p, REMORA_P_HEARTBEAT_MS);
	mn->lease_ms = (uint32_t)remora_params_int(mn->p, REMORA_P_LEASE_MS);
	mn->zk_decides = strcmp(remora_params_str(mn->p, REMORA_P_MEMBERSHIP), "zookeeper") == 0;
	mn->idle_ns = (uint64_t)remora_params_int(mn->p, REMORA_P_CTL_IDLE_MS) * 1000000u;
	mn->peer_conns = (unsigned)remora_params_int(mn->p, REMORA_P_CTL_PEER_CONNS);
	/*
	 * Check leases four times per lease (a dead node is declared within 1.25 leases), idle
	 * connections twice per ctl_idle_ms, and at least every second (a paused accept is
	 * retried on the tick).
	 */
	tick_ms = mn->lease_ms / 4 ? mn->lease_ms / 4 : 1;
	if (tick_ms > mn->idle_ns / 2000000u)
		tick_ms = mn->idle_ns / 2000000u;
	if (tick_ms > 1000)
		tick_ms = 1000;
	mn->tick.tv_sec = (long long)(tick_ms / 1000);
	mn->tick.tv_nsec = (long long)(tick_ms % 1000) * 1000000;

	/* The secret first: a node that cannot authenticate anyone must not create a pool. */
	rc = mut_from_env(MUT_CLUSTER, &mn->mutations, err, errlen);
	if (!rc && mn->mutations) {
		char names[256];

		mut_names(MUT_CLUSTER, mn->mutations, names, sizeof(names));
		mn_log(mn, "mutations %s: known bugs switched back in (tests only)", names);
	}
	if (!rc)
		rc = rauth_key_load(mn->p, true, mn->key, key_path, sizeof(key_path), err, errlen);
	if (rc < 0)
		goto close_pool;
	key_created = rc == 1;
	rc = open_pool(mn, cfg, err, errlen);
	if (rc)
		goto close_pool;
	rc = listen_on(mn, &addr, err, errlen);
	if (rc)
		goto close_pool;
	mn->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (mn->stop_fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "mn %u: eventfd: %s", mn->id, strerror(-rc));
		goto close_listen;
	}
	rc = io_uring_queue_init(MN_RING_DEPTH, &mn->ring, 0);
	if (rc) {
		snprintf(err, errlen, "mn %u: io_uring: %s", mn->id, strerror(-rc));
		goto close_stop;
	}
	mn->ring_up = true;
	*out = mn;
	return 0;

close_stop:
	close(mn->stop_fd);
close_listen:
	close(mn->listen_fd);
close_pool:
	if (mn->pool)
		remora_pool_close(mn->pool, !mn->keep_pool); /* a kept pool may hold a database */
	if (mn->tp)
		remora_transport_close(mn->tp);
	if (key_created)
		unlink(key_path); /* a node that never served leaves no secret behind */
	pthread_mutex_destroy(&mn->lock);
	free(mn->conns);
free_mn:
	free(mn);
	return rc;
}

uint16_t remora_mn_port(const struct remora_mn *mn)
{
	return mn->port;
}

void remora_mn_close(struct remora_mn *mn)
{
	if (!mn)
		return;
	for (unsigned i = 0; i < MN_SLOTS; i++)
		if (mn->conns[i].fd >= 0)
			close(mn->conns[i].fd);
	memset(mn->key, 0, sizeof(mn->key));
	if (mn->ring_up)
		io_uring_queue_exit(&mn->ring);
	close(mn->stop_fd);
	close(mn->listen_fd);
	remora_pool_close(mn->pool, !mn->keep_pool);
	remora_transport_close(mn->tp);
	pthread_mutex_destroy(&mn->lock);
	free(mn->conns);
	free(mn);
}

uint64_t remora_mn_pool_bytes(const struct remora_mn *mn)
{
	return remora_pool_bytes(mn->pool);
}
