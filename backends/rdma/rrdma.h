/* SPDX-License-Identifier: MIT */
/*
 * rdma backend internals: device selection, connection management over rdma_cm, memory-node
 * pools, compute-node channels and messages. The only place in remora that includes
 * <infiniband/verbs.h> and <rdma/rdma_cma.h>.
 */
#ifndef REMORA_RRDMA_H
#define REMORA_RRDMA_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <remora/backend.h>

/* ---- limits (see README.md for why these values) ------------------------------------------ */

#define RRDMA_MAX_BATCH 64u
#define RRDMA_MAX_OUTSTANDING 512u      /* verbs in flight per channel */
#define RRDMA_SQ_DEPTH RRDMA_MAX_OUTSTANDING /* each verb has at most one WR in a send queue */
#define RRDMA_CQ_DEPTH (2 * RRDMA_MAX_OUTSTANDING + 64) /* a replaced QP may still flush */
#define RRDMA_MAX_INLINE 64u            /* WRITE bytes copied into the WQE */
#define RRDMA_STAGE_BYTES (1u << 20)    /* registered bounce arena per channel */
#define RRDMA_STAGE_MAX (64u << 10)     /* larger verbs register the caller's buffer instead */
#define RRDMA_RD_ATOMIC 16u             /* READs/atomics in flight per QP, if the device allows */
#define RRDMA_CONNECT_MS 5000           /* one connection attempt, address to established */
#define RRDMA_RESOLVE_MS 2000
#define RRDMA_QP_TIMEOUT 14             /* 4.096 us * 2^14 = 67 ms before a retransmit */
#define RRDMA_QP_TIMEOUT_MAX 31         /* the 5-bit field of the QP attribute */
#define RRDMA_QP_RETRY 6              /* 7 means "retry forever" to soft-RoCE */
#define RRDMA_FENCE_GRACE_MS 10
#define RRDMA_SYSFS_CLASS "/sys/class/infiniband" /* the kernel's RDMA devices */

_Static_assert((RRDMA_SQ_DEPTH & (RRDMA_SQ_DEPTH - 1)) == 0, "send queue ring is a power of 2");
_Static_assert(RRDMA_MAX_BATCH <= RRDMA_MAX_OUTSTANDING, "batch fits the channel");

/* messages: one RC QP per (sender, receiver) pair, RRDMA_MSG_SLOTS receive buffers each */
#define RRDMA_MSG_SLOTS 32u
#define RRDMA_MSG_MAX 1024u
#define RRDMA_MSG_CREDIT_EVERY (RRDMA_MSG_SLOTS / 4) /* receiver returns credits this often */
#define RRDMA_MSG_SQ (2 * RRDMA_MSG_SLOTS)
#define RRDMA_MSG_SIGNAL_EVERY (RRDMA_MSG_SLOTS / 4)
_Static_assert(RRDMA_MSG_SLOTS <= 64, "slot index fits the low 6 bits of a receive wr_id");

/* ---- connection private data (on the wire, little-endian) ---------------------------------- */

#define RRDMA_WIRE_MAGIC 0x6d647272u /* "rrdm" */
#define RRDMA_WIRE_VERSION 1
#define RRDMA_NO_CN 0xffffu          /* a tool, not a compute node: never fenced */

enum rrdma_conn_kind {
	RRDMA_KIND_VERBS = 1, /* compute node -> memory node: an RC QP for one-sided verbs */
	RRDMA_KIND_CHECK = 2, /* attach: is the node there, and is this CN fenced? (no QP) */
	RRDMA_KIND_MSG = 3,   /* compute node -> compute node: messages */
};

enum rrdma_reply_status {
	RRDMA_REP_OK = 0,
	RRDMA_REP_CHECKED = 1,   /* reply to KIND_CHECK: reachable and not fenced */
	RRDMA_REP_FENCED = 2,
	RRDMA_REP_WRONG_NODE = 3,
	RRDMA_REP_WRONG_CLUSTER = 4,
	RRDMA_REP_BAD_REQUEST = 5,
	RRDMA_REP_NO_RESOURCES = 6,
};

/* Connect request: rdma_cm leaves 56 bytes of private data to an RC connect over IB CM. */
struct rrdma_wire_req {
	uint32_t magic;
	uint16_t version;
	uint8_t kind;         /* enum rrdma_conn_kind */
	uint8_t mtu;          /* enum ibv_mtu the requester wants at most */
	uint16_t cn;          /* requesting compute node or RRDMA_NO_CN */
	uint16_t target;      /* memory node (VERBS, CHECK) or receiving compute node (MSG) */
	uint32_t credit_rkey; /* MSG: where the receiver writes its consumed count */
	uint64_t credit_addr;
	uint64_t cluster;     /* hash of the cluster name: no cross-talk between clusters */
};
_Static_assert(sizeof(struct rrdma_wire_req) == 32, "connect request layout");
_Static_assert(offsetof(struct rrdma_wire_req, credit_addr) == 16, "connect request layout");
_Static_assert(sizeof(struct rrdma_wire_req) <= 56, "fits rdma_cm connect private data");

/* Accept or reject reply. */
struct rrdma_wire_rep {
	uint32_t magic;
	uint16_t version;
	uint8_t status;       /* enum rrdma_reply_status */
	uint8_t mtu;          /* enum ibv_mtu both ends use */
	uint32_t slots;       /* MSG: receive buffers the receiver posted (initial credits) */
	uint32_t _pad;
};
_Static_assert(sizeof(struct rrdma_wire_rep) == 16, "connect reply layout");

/* ---- transport: device and nodes ------------------------------------------------------------ */

struct rrdma_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	char name[IBV_SYSFS_NAME_MAX];
	uint8_t port;
	int gid_index;
	enum ibv_mtu mtu;
	uint8_t rd_atomic;                /* min(RRDMA_RD_ATOMIC, device limits) */
	uint8_t qp_timeout;               /* rdma_qp_timeout, else RRDMA_QP_TIMEOUT */
	bool atomics;                     /* device has remote atomics */
	struct sockaddr_storage addr;     /* the GID's IP address: rdma_cm binds here */
	char addr_str[INET6_ADDRSTRLEN + 8];
};

struct rrdma_node {
	uint32_t gen;                   /* bumped by attach/detach; channels reconnect on change */
	uint32_t revive;                /* bumped by attach again: channels retry it if found dead */
	bool attached;
	struct sockaddr_storage addr;
	char locator[128];
};

struct rrdma_msg;

struct rrdma_tp {
	struct remora_transport *tp;
	struct remora_backend_cfg cfg;
	char cluster[64];
	char dir[PATH_MAX];
	uint64_t cluster_hash;
	struct rrdma_dev dev;
	pthread_mutex_t lock; /* nodes */
	struct rrdma_node nodes[REMORA_MAX_MN];
	struct rrdma_msg *msg; /* compute nodes only */
};

/* ---- rdma_cm helpers (cm.c) --------------------------------------------------------------- */

/* An active-side connection: its own event channel, id and QP. */
struct rrdma_cconn {
	struct rdma_event_channel *ec;
	struct rdma_cm_id *id;
	struct ibv_qp *qp;
	struct ibv_cq *tmp_cq; /* a KIND_CHECK handshake's own */
	uint32_t max_inline;
	struct rrdma_wire_rep rep;
};

/* What a connect needs: the peer, the request, and the queues of the QP to create. */
struct rrdma_connect_args {
	const struct sockaddr *dst;
	struct rrdma_wire_req req;
	struct ibv_cq *scq, *rcq;
	uint32_t sq_depth, rq_depth, max_inline;
	int access;         /* remote access our QP grants (MSG: the credit word is written) */
	bool want_qp;       /* false for KIND_CHECK: the reply is a reject, the QP is dropped */
};

/*
 * A listener: an rdma_cm id bound to the device's address on an ephemeral port, and a thread
 * that hands every event to handle() with rrdma_cm_lock held. handle() returns true when the
 * event's id must be destroyed (after the event is acknowledged).
 */
struct rrdma_listener {
	struct rrdma_tp *t;
	struct rdma_event_channel *ec;
	struct rdma_cm_id *id;
	int stop_fd;
	pthread_t thread;
	bool running;
	char locator[INET6_ADDRSTRLEN + 16];
	bool (*handle)(void *arg, struct rdma_cm_event *ev);
	void *arg;
};

/*
 * Serializes librdmacm/ibverbs control calls of the background threads with fork(): a child
 * forked while a listener thread held a library mutex would deadlock on it.
 */
void rrdma_cm_lock(void);
void rrdma_cm_unlock(void);

uint64_t rrdma_hash(const char *s);
int rrdma_parse_locator(const char *s, struct sockaddr_storage *ss);
void rrdma_format_addr(const struct sockaddr *sa, bool with_port, char *buf, size_t n);
void rrdma_wire_req_init(struct rrdma_tp *t, struct rrdma_wire_req *r, uint8_t kind,
			 uint16_t target);
bool rrdma_wire_req_parse(const void *pdata, uint8_t len, struct rrdma_wire_req *r);
bool rrdma_wire_rep_parse(const void *pdata, uint8_t len, struct rrdma_wire_rep *r);
void rrdma_wire_rep_fill(struct rrdma_wire_rep *r, uint8_t status, uint8_t mtu, uint32_t slots);

struct ibv_qp *rrdma_qp_create(struct rrdma_tp *t, struct ibv_cq *scq, struct ibv_cq *rcq,
			       uint32_t sq_depth, uint32_t rq_depth, uint32_t *max_inline);
/* INIT -> RTR -> RTS with the attributes rdma_cm computed, clamped to our settings. */
int rrdma_qp_ready(struct rrdma_tp *t, struct rdma_cm_id *id, struct ibv_qp *qp, int access,
		   enum ibv_mtu mtu, uint8_t rd_atomic);
int rrdma_qp_init(struct rrdma_tp *t, struct rdma_cm_id *id, struct ibv_qp *qp, int access);
int rrdma_qp_rtr_rts(struct rrdma_tp *t, struct rdma_cm_id *id, struct ibv_qp *qp,
		     enum ibv_mtu mtu, uint8_t rd_atomic);

/*
 * Connects synchronously (bounded by RRDMA_CONNECT_MS). Returns 0, -REMORA_EFENCED when the
 * peer refuses this compute node for good, -ECONNREFUSED, -EHOSTUNREACH, -ETIMEDOUT,
 * -REMORA_ENODE (the peer is another node), -REMORA_EPROTO, or -errno; why gets one line.
 * For a KIND_CHECK request a CHECKED reply is success and no QP is made.
 */
int rrdma_connect(struct rrdma_tp *t, const struct rrdma_connect_args *a, struct rrdma_cconn *cc,
		  char *why, size_t whylen);
void rrdma_cconn_close(struct rrdma_cconn *cc);

int rrdma_listener_start(struct rrdma_tp *t, struct rrdma_listener *l,
			 bool (*handle)(void *arg, struct rdma_cm_event *ev), void *arg);
void rrdma_listener_halt(struct rrdma_listener *l);
void rrdma_listener_stop(struct rrdma_listener *l);
/* Passive side: accept id with qp (NULL qp: no QP) and reply rep. */
int rrdma_accept(struct rrdma_tp *t, struct rdma_cm_id *id, struct ibv_qp *qp,
		 const struct rrdma_wire_rep *rep);
void rrdma_reject(struct rdma_cm_id *id, uint8_t status);

/* ---- device (dev.c) ------------------------------------------------------------------------ */

int rrdma_dev_open(struct rrdma_tp *t);
void rrdma_dev_close(struct rrdma_dev *d);
enum ibv_mtu rrdma_mtu_min(enum ibv_mtu a, enum ibv_mtu b);

/* ---- memory-node side (pool.c) -------------------------------------------------------------- */

int rrdma_pool_open(void *tpriv, const struct remora_pool_spec *spec, void **ppriv, void **base,
		    uint64_t *bytes);
void rrdma_pool_close(void *ppriv, bool unlink);
int rrdma_pool_reg(void *ppriv, uint64_t off, uint64_t len, uint32_t *key);
int rrdma_pool_dereg(void *ppriv, uint32_t key);
int rrdma_pool_fence(void *ppriv, uint16_t cn);
int rrdma_pool_describe(void *ppriv, struct remora_node_desc *desc);

/* ---- compute-node side (verbs.c) ------------------------------------------------------------ */

int rrdma_attach(void *tpriv, const struct remora_node_desc *desc);
int rrdma_detach(void *tpriv, uint16_t node);
int rrdma_chan_open(void *tpriv, struct remora_chan *ch, void **cpriv);
void rrdma_chan_close(void *cpriv);
int rrdma_post(void *cpriv, const struct remora_wr *wrs, unsigned n, int32_t *status,
	       unsigned pflags);
int rrdma_poll(void *cpriv, struct remora_cqe *cqes, unsigned max);
int rrdma_chan_break(void *cpriv, struct remora_cqe *oldest, char *why, size_t len);

/* ---- messages (msg.c) ----------------------------------------------------------------------- */

int rrdma_msg_open(struct rrdma_tp *t);
void rrdma_msg_close(struct rrdma_tp *t);
int rrdma_msg_send(void *cpriv, uint16_t dst_cn, const void *buf, uint32_t len);
int rrdma_msg_recv(void *cpriv, uint16_t *src_cn, void *buf, uint32_t cap);
int rrdma_msg_locator(void *tpriv, char *buf, size_t len);
int rrdma_msg_set_peer(void *tpriv, uint16_t cn, const char *locator);
int rrdma_msg_addr_path(const char *dir, const char *cluster, unsigned cn, char *buf,
			size_t size);
const char *rrdma_default_dir(void);

/* the transport of a channel (msg.c needs it) */
struct rrdma_tp *rrdma_chan_tp(void *cpriv);

#endif
