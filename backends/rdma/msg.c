/* SPDX-License-Identifier: MIT */
/*
 * Compute-node messages over RC SEND/RECV: one QP per (sender, receiver) pair, which gives
 * exactly-once, in-order delivery per pair while it holds. If it breaks (retries exhausted),
 * the sends after the last one known to have arrived are reported lost: the next send
 * returns -ECONNRESET once, then connects again. Bounded by credits: the receiver pre-posts
 * RRDMA_MSG_SLOTS receive buffers per sender and returns credits by RDMA-writing its consumed
 * count into a word of the sender's (registered) memory every RRDMA_MSG_CREDIT_EVERY messages;
 * a sender with no credit left gets -EAGAIN, as with a full mailbox.
 *
 * Discovery: every compute node listens with rdma_cm on its device address; "ip:port" is its
 * message locator. A sender connects at its first message to the locator it was given for the
 * destination (rrdma_msg_set_peer: a control plane carries locators, no files involved). A
 * transport opened without REMORA_TRANSPORT_MSG_PEERS (tests, tools without a cluster) also
 * publishes its locator in <dir>/remora-<cluster>-cn<N>.rdma (written atomically by rename) and
 * falls back to reading the destination's file when no locator was set. See README.md.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rrdma.h"

#define SLOT_BYTES RRDMA_MSG_MAX
#define BUF_BYTES (RRDMA_MSG_SLOTS * SLOT_BYTES + 64) /* slots, then the credit source word */
#define CREDIT_SQ 8u

/* Receiving end of one sender's pair. 64-byte aligned: wr_id = address | slot. */
struct rrdma_in {
	struct rdma_cm_id *id;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	uint64_t consumed, credited;
	uint64_t credit_addr;
	uint32_t credit_rkey;
	uint32_t posted;        /* receives posted and not yet completed */
	uint16_t src;
	bool gone;              /* the sender left (its cm id reported so); recv_lock */
	struct rrdma_in *next;  /* the pairs of m->ins: freed once the sender left and no
				   completion can name their buffers any more (reclaim) */
} __attribute__((aligned(64)));

/* Sending end to one receiver. */
struct rrdma_out {
	struct rrdma_cconn cc;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t *buf;
	uint64_t sent, acked; /* acked: sends whose completion has been reaped */
	uint64_t delivered;   /* once broken: sends before this one arrived (RC order) */
	uint32_t slots;
	uint32_t peer_gen; /* m->peer_gen[dst] when connected */
	bool broken;
};

struct rrdma_msg {
	struct rrdma_tp *t;
	struct ibv_cq *rcq; /* receive completions of every incoming pair */
	struct ibv_cq *ccq; /* completions of our credit writes */
	struct rrdma_listener lis;
	bool files;         /* publish and read address files (no REMORA_TRANSPORT_MSG_PEERS) */
	char addr_path[PATH_MAX];
	uint64_t *credit;   /* [REMORA_MAX_CN]: consumed counts, written by the receivers */
	struct ibv_mr *credit_mr;
	pthread_mutex_t send_lock[REMORA_MAX_CN];
	struct rrdma_out *out[REMORA_MAX_CN];
	/*
	 * Locators set per peer ("": none) and a count of changes. A lock of their own, never held
	 * across a connection attempt: the control plane's heartbeat thread sets them and must not
	 * wait behind a sender's connect (up to RRDMA_CONNECT_MS).
	 */
	pthread_mutex_t peer_lock;
	char peer[REMORA_MAX_CN][REMORA_MSG_LOCATOR_MAX];
	uint32_t peer_gen[REMORA_MAX_CN];
	pthread_mutex_t recv_lock; /* ins, rcq, ccq, stash, credit_owed */
	struct rrdma_in *ins;
	bool credit_owed;   /* a credit write failed: give it at the next rrdma_msg_recv() */
	bool stashed;
	struct ibv_wc stash;
};

const char *rrdma_default_dir(void)
{
	return "/dev/shm";
}

int rrdma_msg_addr_path(const char *dir, const char *cluster, unsigned cn, char *buf, size_t size)
{
	char what[16];

	snprintf(what, sizeof(what), "cn%u.rdma", cn);
	return remora_backend_cluster_path(dir, cluster, what, buf, size);
}

/* ---- receiving side --------------------------------------------------------------------- */

static int post_recv(struct rrdma_in *in, uint32_t slot)
{
	struct ibv_sge s = { .addr = (uintptr_t)(in->buf + (size_t)slot * SLOT_BYTES),
			     .length = SLOT_BYTES,
			     .lkey = in->mr->lkey };
	struct ibv_recv_wr w = { .wr_id = (uintptr_t)in | slot, .sg_list = &s, .num_sge = 1 };
	struct ibv_recv_wr *bad;
	int rc = -ibv_post_recv(in->qp, &w, &bad);

	in->posted += rc == 0;
	return rc;
}

static void in_free(struct rrdma_in *in)
{
	if (in->qp)
		ibv_destroy_qp(in->qp);
	if (in->mr)
		ibv_dereg_mr(in->mr);
	free(in->buf);
	free(in);
}

/* Frees a pair whose sender left once no receive of it is outstanding (recv_lock held). */
static void reclaim(struct rrdma_msg *m, struct rrdma_in *in)
{
	struct rrdma_in **p = &m->ins;

	if (!in->gone || in->posted)
		return;
	while (*p && *p != in)
		p = &(*p)->next;
	if (*p)
		*p = in->next;
	in_free(in);
}

/* Sets up the receiving end of a new pair and accepts it (listener thread, cm lock held). */
static bool accept_msg(struct rrdma_msg *m, struct rdma_cm_id *id, const struct rrdma_wire_req *req)
{
	struct rrdma_tp *t = m->t;
	enum ibv_mtu mtu = rrdma_mtu_min(t->dev.mtu, (enum ibv_mtu)req->mtu);
	struct rrdma_wire_rep rep;
	struct rrdma_in *in = aligned_alloc(64, sizeof(*in));
	uint32_t inl = 0;

	if (!in)
		goto err_reject;
	memset(in, 0, sizeof(*in));
	in->src = req->cn;
	in->credit_addr = req->credit_addr;
	in->credit_rkey = req->credit_rkey;
	if (posix_memalign((void **)&in->buf, 4096, BUF_BYTES)) {
		in->buf = NULL;
		goto err_free;
	}
	in->mr = ibv_reg_mr(t->dev.pd, in->buf, BUF_BYTES, IBV_ACCESS_LOCAL_WRITE);
	in->qp = in->mr ? rrdma_qp_create(t, m->ccq, m->rcq, CREDIT_SQ, RRDMA_MSG_SLOTS, &inl) :
			  NULL;
	if (!in->qp || rrdma_qp_init(t, id, in->qp, IBV_ACCESS_LOCAL_WRITE))
		goto err_free;
	for (uint32_t s = 0; s < RRDMA_MSG_SLOTS; s++)
		if (post_recv(in, s))
			goto err_free;
	if (rrdma_qp_rtr_rts(t, id, in->qp, mtu, t->dev.rd_atomic))
		goto err_free;
	rrdma_wire_rep_fill(&rep, RRDMA_REP_OK, (uint8_t)mtu, RRDMA_MSG_SLOTS);
	if (rrdma_accept(t, id, in->qp, &rep))
		goto err_free;
	in->id = id;
	id->context = in;
	pthread_mutex_lock(&m->recv_lock);
	in->next = m->ins;
	m->ins = in; /* a restarted sender's old pair stays until close, its queue drained */
	pthread_mutex_unlock(&m->recv_lock);
	return false;

err_free:
	in_free(in);
err_reject:
	rrdma_reject(id, RRDMA_REP_NO_RESOURCES);
	return true;
}

static bool msg_handle(void *arg, struct rdma_cm_event *ev)
{
	struct rrdma_msg *m = arg;
	struct rrdma_wire_req req;
	struct rrdma_in *in;

	switch (ev->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		if (!rrdma_wire_req_parse(ev->param.conn.private_data,
					  ev->param.conn.private_data_len, &req) ||
		    req.kind != RRDMA_KIND_MSG || req.cn >= m->t->cfg.max_cn) {
			rrdma_reject(ev->id, RRDMA_REP_BAD_REQUEST);
			return true;
		}
		if (req.cluster != m->t->cluster_hash || req.target != m->t->cfg.self_cn) {
			rrdma_reject(ev->id, req.cluster != m->t->cluster_hash ?
						     RRDMA_REP_WRONG_CLUSTER : RRDMA_REP_WRONG_NODE);
			return true;
		}
		return accept_msg(m, ev->id, &req);
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
		/* The sender left. Its messages already received stay in the completion queue;
		 * the error state flushes the receives still posted, and the pair is freed once
		 * rrdma_msg_recv() has seen them all (reclaim). */
		in = ev->id->context;
		if (!in)
			return true;
		pthread_mutex_lock(&m->recv_lock);
		in->id = NULL;
		in->gone = true;
		ibv_modify_qp(in->qp, &(struct ibv_qp_attr){ .qp_state = IBV_QPS_ERR },
			      IBV_QP_STATE);
		reclaim(m, in);
		pthread_mutex_unlock(&m->recv_lock);
		return true;
	default:
		return false;
	}
}

/*
 * Tells the sender how many messages this pair consumed: an 8-byte RDMA WRITE of the count.
 * The source word may change while a write is in flight; the sender then reads a newer count,
 * which is just as true (counts only grow).
 */
static void give_credit(struct rrdma_msg *m, struct rrdma_in *in)
{
	uint64_t *word = (uint64_t *)(void *)(in->buf + RRDMA_MSG_SLOTS * SLOT_BYTES);
	struct ibv_sge s = { .addr = (uintptr_t)word, .length = 8, .lkey = in->mr->lkey };
	struct ibv_send_wr w = { .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad;
	struct ibv_wc wc[CREDIT_SQ];

	while (ibv_poll_cq(m->ccq, CREDIT_SQ, wc) > 0)
		; /* reap earlier credit writes: frees their send-queue slots */
	__atomic_store_n(word, in->consumed, __ATOMIC_RELAXED);
	w.wr.rdma.remote_addr = in->credit_addr;
	w.wr.rdma.rkey = in->credit_rkey;
	if (ibv_post_send(in->qp, &w, &bad) == 0)
		in->credited = in->consumed;
	else
		m->credit_owed = true; /* send queue full: rrdma_msg_recv() tries again */
}

/*
 * Credits a failed write left owed. Without this a sender that used its whole window would
 * wait for ever: no message arrives to trigger the next credit.
 */
static void give_owed_credits(struct rrdma_msg *m)
{
	m->credit_owed = false;
	for (struct rrdma_in *in = m->ins; in; in = in->next)
		if (!in->gone && in->consumed - in->credited >= RRDMA_MSG_CREDIT_EVERY)
			give_credit(m, in);
}

int rrdma_msg_recv(void *cpriv, uint16_t *src_cn, void *buf, uint32_t cap)
{
	struct rrdma_msg *m = rrdma_chan_tp(cpriv)->msg;
	int rc = -EAGAIN;

	if (!m)
		return -REMORA_ENODE;
	pthread_mutex_lock(&m->recv_lock);
	if (m->credit_owed)
		give_owed_credits(m);
	for (;;) {
		struct ibv_wc *wc = &m->stash;
		struct rrdma_in *in;
		uint32_t slot;

		if (!m->stashed && ibv_poll_cq(m->rcq, 1, wc) <= 0)
			break;
		m->stashed = false;
		in = (struct rrdma_in *)(uintptr_t)(wc->wr_id & ~(uint64_t)63);
		slot = (uint32_t)(wc->wr_id & 63);
		if (wc->status != IBV_WC_SUCCESS) {
			in->posted--; /* flushed: the pair is gone */
			reclaim(m, in);
			continue;
		}
		if (wc->byte_len > cap) {
			m->stashed = true; /* the message stays; retry with a larger buffer */
			rc = -EMSGSIZE;
			break;
		}
		in->posted--;
		memcpy(buf, in->buf + (size_t)slot * SLOT_BYTES, wc->byte_len);
		*src_cn = in->src;
		rc = (int)wc->byte_len;
		in->consumed++;
		if (in->gone)
			reclaim(m, in); /* the sender left: no new receive, no credit */
		else if (post_recv(in, slot) == 0 &&
			 in->consumed - in->credited >= RRDMA_MSG_CREDIT_EVERY)
			give_credit(m, in);
		break;
	}
	pthread_mutex_unlock(&m->recv_lock);
	return rc;
}

/* ---- sending side ----------------------------------------------------------------------- */

static void out_free(struct rrdma_out *o)
{
	rrdma_cconn_close(&o->cc);
	if (o->cq)
		ibv_destroy_cq(o->cq);
	if (o->mr)
		ibv_dereg_mr(o->mr);
	free(o->buf);
	free(o);
}

/*
 * Where dst receives (send_lock[dst] held): the locator set for it, else, for transports with
 * address files, dst's published file. -EAGAIN: not known (yet).
 */
static int read_addr(struct rrdma_msg *m, uint16_t dst, struct sockaddr_storage *ss,
		     uint32_t *gen)
{
	char path[PATH_MAX], line[160];
	ssize_t n;
	int fd;

	pthread_mutex_lock(&m->peer_lock);
	*gen = m->peer_gen[dst];
	snprintf(line, sizeof(line), "%s", m->peer[dst]);
	pthread_mutex_unlock(&m->peer_lock);
	if (line[0])
		return rrdma_parse_locator(line, ss) ? -REMORA_EPROTO : 0;
	if (!m->files)
		return -EAGAIN; /* the control plane has not introduced dst yet */
	if (rrdma_msg_addr_path(m->t->dir, m->t->cluster, dst, path, sizeof(path)))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -EAGAIN : -errno;
	n = read(fd, line, sizeof(line) - 1);
	close(fd);
	if (n <= 0)
		return -EAGAIN;
	line[n] = '\0';
	line[strcspn(line, "\n")] = '\0';
	return rrdma_parse_locator(line, ss) ? -REMORA_EPROTO : 0;
}

/* Connects to dst. -EAGAIN when dst has not published an address or does not answer. */
static int out_open(struct rrdma_msg *m, uint16_t dst, struct rrdma_out **out)
{
	struct rrdma_tp *t = m->t;
	struct rrdma_connect_args a = { .sq_depth = RRDMA_MSG_SQ, .rq_depth = 0,
					.max_inline = RRDMA_MAX_INLINE,
					.access = IBV_ACCESS_REMOTE_WRITE, .want_qp = true };
	struct sockaddr_storage ss;
	struct rrdma_out *o;
	char why[160];
	uint32_t gen;
	int rc = read_addr(m, dst, &ss, &gen);

	if (rc)
		return rc;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->peer_gen = gen;
	o->buf = aligned_alloc(4096, RRDMA_MSG_SLOTS * SLOT_BYTES);
	o->mr = o->buf ? ibv_reg_mr(t->dev.pd, o->buf, RRDMA_MSG_SLOTS * SLOT_BYTES, 0) : NULL;
	o->cq = o->mr ? ibv_create_cq(t->dev.ctx, RRDMA_MSG_SQ, NULL, NULL, 0) : NULL;
	if (!o->cq) {
		out_free(o);
		return -ENOMEM;
	}
	__atomic_store_n(&m->credit[dst], 0, __ATOMIC_RELAXED);
	a.dst = (struct sockaddr *)&ss;
	a.scq = a.rcq = o->cq;
	rrdma_wire_req_init(t, &a.req, RRDMA_KIND_MSG, dst);
	a.req.credit_addr = htole64((uintptr_t)&m->credit[dst]);
	a.req.credit_rkey = htole32(m->credit_mr->rkey);
	rc = rrdma_connect(t, &a, &o->cc, why, sizeof(why));
	if (rc) {
		out_free(o);
		if (rc == -ECONNREFUSED || rc == -ETIMEDOUT || rc == -EHOSTUNREACH)
			return -EAGAIN; /* a stale address: the receiver is not (yet) there */
		return remora_backend_error(t->tp, rc, "messages to cn %u: %s", dst, why);
	}
	o->delivered = UINT64_MAX; /* not broken */
	o->slots = o->cc.rep.slots ? o->cc.rep.slots : 1;
	if (o->slots > RRDMA_MSG_SLOTS)
		o->slots = RRDMA_MSG_SLOTS;
	*out = o;
	return 0;
}

/* Reaps send completions: frees send-queue room, notices a broken pair. */
static void out_reap(struct rrdma_out *o)
{
	struct ibv_wc wc[RRDMA_MSG_SQ];
	int n = ibv_poll_cq(o->cq, RRDMA_MSG_SQ, wc);

	for (int i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_SUCCESS)
			o->broken = true;
		if (wc[i].status != IBV_WC_SUCCESS && wc[i].wr_id < o->delivered)
			o->delivered = wc[i].wr_id; /* the first failed; the rest were flushed */
		else if (wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id + 1 > o->acked)
			o->acked = wc[i].wr_id + 1;
	}
}

static int out_send(struct rrdma_msg *m, uint16_t dst, struct rrdma_out *o, const void *buf,
		    uint32_t len)
{
	uint64_t consumed = __atomic_load_n(&m->credit[dst], __ATOMIC_ACQUIRE);
	uint8_t *slot = o->buf + (size_t)(o->sent % o->slots) * SLOT_BYTES;
	struct ibv_sge s = { .addr = (uintptr_t)slot, .length = len, .lkey = o->mr->lkey };
	struct ibv_send_wr w = { .wr_id = o->sent, .sg_list = &s, .num_sge = len ? 1 : 0,
				 .opcode = IBV_WR_SEND };
	struct ibv_send_wr *bad;

	/* rrdma_msg_send() has just reaped: a pair that broke is gone by now */
	if (o->broken)
		return -EAGAIN;
	/* A slot is free again once the receiver consumed its message (it was sent by then). */
	if (o->sent - consumed >= o->slots || o->sent - o->acked >= RRDMA_MSG_SQ - 1)
		return -EAGAIN;
	if (len <= o->cc.max_inline) {
		s.addr = (uintptr_t)buf;
		w.send_flags |= IBV_SEND_INLINE;
	} else {
		memcpy(slot, buf, len);
	}
	if (o->sent % RRDMA_MSG_SIGNAL_EVERY == RRDMA_MSG_SIGNAL_EVERY - 1 ||
	    o->sent + 1 - o->acked >= RRDMA_MSG_SQ / 2)
		w.send_flags |= IBV_SEND_SIGNALED;
	if (ibv_post_send(o->cc.qp, &w, &bad)) {
		o->broken = true; /* of what was sent, only the acknowledged part is known */
		if (o->acked < o->delivered)
			o->delivered = o->acked;
		return -EAGAIN;
	}
	o->sent++;
	return 0;
}

/*
 * The generation of dst's locator if a new one was set since gen (a new process listens there:
 * the pair to the old one must go), else gen. A locator withdrawn ("") keeps a working pair: a
 * member the control plane no longer lists is gone or going, and its pair breaks then.
 */
static uint32_t peer_moved(struct rrdma_msg *m, uint16_t dst, uint32_t gen)
{
	uint32_t now;

	pthread_mutex_lock(&m->peer_lock);
	now = m->peer_gen[dst] != gen && m->peer[dst][0] ? m->peer_gen[dst] : gen;
	pthread_mutex_unlock(&m->peer_lock);
	return now;
}

int rrdma_msg_send(void *cpriv, uint16_t dst_cn, const void *buf, uint32_t len)
{
	struct rrdma_msg *m = rrdma_chan_tp(cpriv)->msg;
	struct rrdma_out *o;
	int rc = 0;

	if (!m || dst_cn >= m->t->cfg.max_cn)
		return -REMORA_ENODE;
	pthread_mutex_lock(&m->send_lock[dst_cn]);
	o = m->out[dst_cn];
	if (o)
		out_reap(o);
	if (o && o->broken && o->delivered < o->sent)
		rc = remora_backend_error(m->t->tp, -ECONNRESET,
					  "messages to cn %u: the connection broke; the last %llu "
					  "sent may not have arrived", dst_cn,
					  (unsigned long long)(o->sent - o->delivered));
	if (o && (o->broken || o->peer_gen != peer_moved(m, dst_cn, o->peer_gen))) {
		/* The receiver went away: drop the pair, connect again to whoever is there now. */
		out_free(o);
		o = m->out[dst_cn] = NULL;
	}
	if (!o && !rc)
		rc = out_open(m, dst_cn, &m->out[dst_cn]);
	if (!rc)
		rc = out_send(m, dst_cn, m->out[dst_cn], buf, len);
	pthread_mutex_unlock(&m->send_lock[dst_cn]);
	return rc;
}

/* ---- locators ----------------------------------------------------------------------------- */

int rrdma_msg_locator(void *tpriv, char *buf, size_t len)
{
	struct rrdma_tp *t = tpriv;

	if (!t->msg) {
		buf[0] = '\0';
		return 0;
	}
	if ((size_t)snprintf(buf, len, "%s", t->msg->lis.locator) >= len)
		return -ENOSPC;
	return 0;
}

/* The next message to cn connects to the new locator (see peer_moved). */
int rrdma_msg_set_peer(void *tpriv, uint16_t cn, const char *locator)
{
	struct rrdma_tp *t = tpriv;
	struct rrdma_msg *m = t->msg;
	struct sockaddr_storage ss;

	if (!m || cn >= t->cfg.max_cn)
		return -REMORA_ENODE;
	if (locator[0] && rrdma_parse_locator(locator, &ss))
		return remora_backend_error(t->tp, -EINVAL,
					    "messages to cn %u: locator '%s' is not ip:port", cn,
					    locator);
	pthread_mutex_lock(&m->peer_lock);
	if (strcmp(m->peer[cn], locator) != 0) {
		snprintf(m->peer[cn], sizeof(m->peer[cn]), "%s", locator);
		m->peer_gen[cn]++;
	}
	pthread_mutex_unlock(&m->peer_lock);
	return 0;
}

/* ---- open / close ----------------------------------------------------------------------- */

/* Publishes "ip:port" for senders: written to a temporary file, then renamed into place. */
static int publish(struct rrdma_msg *m)
{
	struct rrdma_tp *t = m->t;
	char tmp[PATH_MAX + 16];
	FILE *f;

	if (rrdma_msg_addr_path(t->dir, t->cluster, (unsigned)t->cfg.self_cn, m->addr_path,
				sizeof(m->addr_path)))
		return remora_backend_error(t->tp, -ENAMETOOLONG, "message address path too long");
	snprintf(tmp, sizeof(tmp), "%s.%ld", m->addr_path, (long)getpid());
	f = fopen(tmp, "we");
	if (!f)
		return remora_backend_error(t->tp, -errno, "%s: %s", tmp, strerror(errno));
	fprintf(f, "%s\n", m->lis.locator);
	if (fclose(f) || rename(tmp, m->addr_path)) {
		int rc = -errno;

		unlink(tmp);
		return remora_backend_error(t->tp, rc, "%s: %s", m->addr_path, strerror(-rc));
	}
	return 0;
}

int rrdma_msg_open(struct rrdma_tp *t)
{
	struct rrdma_msg *m = calloc(1, sizeof(*m));
	int rc;

	if (!m)
		return -ENOMEM;
	m->t = t;
	for (unsigned i = 0; i < REMORA_MAX_CN; i++)
		pthread_mutex_init(&m->send_lock[i], NULL);
	pthread_mutex_init(&m->recv_lock, NULL);
	pthread_mutex_init(&m->peer_lock, NULL);
	t->msg = m;
	m->credit = aligned_alloc(4096, 4096);
	rc = -ENOMEM;
	if (!m->credit)
		goto err_close;
	memset(m->credit, 0, 4096);
	m->credit_mr = ibv_reg_mr(t->dev.pd, m->credit, 4096,
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	/* Room for every live pair's receives and as many again flushing from pairs that left. */
	m->rcq = ibv_create_cq(t->dev.ctx, (int)(2 * RRDMA_MSG_SLOTS * REMORA_MAX_CN), NULL, NULL,
			       0);
	m->ccq = ibv_create_cq(t->dev.ctx, (int)(CREDIT_SQ * REMORA_MAX_CN), NULL, NULL, 0);
	if (!m->credit_mr || !m->rcq || !m->ccq) {
		rc = remora_backend_error(t->tp, -errno ? -errno : -ENOMEM,
					  "message queues on %s: %s", t->dev.name, strerror(errno));
		goto err_close;
	}
	rc = rrdma_listener_start(t, &m->lis, msg_handle, m);
	if (rc)
		goto err_close;
	/* Messages to itself need no introduction. */
	snprintf(m->peer[t->cfg.self_cn], sizeof(m->peer[0]), "%s", m->lis.locator);
	m->files = !(t->cfg.flags & REMORA_TRANSPORT_MSG_PEERS);
	if (m->files)
		rc = publish(m);
	if (rc)
		goto err_close;
	return 0;

err_close:
	rrdma_msg_close(t);
	return rc;
}

void rrdma_msg_close(struct rrdma_tp *t)
{
	struct rrdma_msg *m = t->msg;

	if (!m)
		return;
	if (m->addr_path[0])
		unlink(m->addr_path);
	for (unsigned i = 0; i < REMORA_MAX_CN; i++)
		if (m->out[i])
			out_free(m->out[i]);
	rrdma_listener_halt(&m->lis);
	rrdma_cm_lock();
	for (struct rrdma_in *in = m->ins; in; in = in->next) {
		if (!in->id)
			continue;
		rdma_disconnect(in->id);
		rdma_destroy_id(in->id);
		in->id = NULL;
	}
	rrdma_cm_unlock();
	rrdma_listener_stop(&m->lis);
	while (m->ins) {
		struct rrdma_in *in = m->ins;

		m->ins = in->next;
		in_free(in);
	}
	if (m->rcq)
		ibv_destroy_cq(m->rcq);
	if (m->ccq)
		ibv_destroy_cq(m->ccq);
	if (m->credit_mr)
		ibv_dereg_mr(m->credit_mr);
	free(m->credit);
	for (unsigned i = 0; i < REMORA_MAX_CN; i++)
		pthread_mutex_destroy(&m->send_lock[i]);
	pthread_mutex_destroy(&m->recv_lock);
	pthread_mutex_destroy(&m->peer_lock);
	free(m);
	t->msg = NULL;
}
