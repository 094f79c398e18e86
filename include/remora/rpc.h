/* SPDX-License-Identifier: MIT */
/*
 * Compute-node RPC: requests from one coordinator to a worker of another compute node, and the
 * reply back to the coordinator that asked. Built on the message API of <remora/transport.h>
 * (process-to-process rings of small slots), so it runs on every backend with
 * REMORA_CAP_MSG. Wire format, limits and numbers: docs/rpc.md.
 *
 * One struct remora_rpc per compute-node process (it owns the handler table and routes the
 * process's mailbox to its workers), one struct remora_rpc_ep per worker thread. A coroutine
 * that calls parks until its reply arrives; the worker's scheduler runs the endpoint's
 * dispatcher (remora_rpc_poll) whenever it drives its channel, which handles requests, wakes
 * callers and expires deadlines. Nothing polls per coroutine.
 */
#ifndef REMORA_RPC_H
#define REMORA_RPC_H

#include <stdbool.h>
#include <stdint.h>

#include <remora/sched.h>
#include <remora/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Payload bytes one message may carry: a batch's requests with their entry headers (8 each). */
#define REMORA_RPC_MAX_MSG 16384u
/* Requests one batch (one message) may carry. */
#define REMORA_RPC_MAX_BATCH 256u
/* Operation codes are 0 .. REMORA_RPC_MAX_OPS-1. */
#define REMORA_RPC_MAX_OPS 64u
/* Workers one compute node may route to. */
#define REMORA_RPC_MAX_WORKERS 64u
/*
 * A handler's return value: it answers later with remora_rpc_reply() (a grant). Reserved: no
 * request status may take this value.
 */
#define REMORA_RPC_DEFER 0x44454652 /* "DEFR" */
/* The default bound of a call, for timeout_ms 0. */
#define REMORA_RPC_DEFAULT_TIMEOUT_MS 1000

struct remora_rpc;
struct remora_rpc_ep;

/* Who asked: the requester's compute node, worker and coordinator (its coroutine index). */
struct remora_rpc_addr {
	uint16_t cn;
	uint16_t worker;
	uint16_t coord;
};

/* What a deferred reply needs: copy it out of the request, pass it to remora_rpc_reply(). */
struct remora_rpc_token {
	struct remora_rpc_addr to;
	uint16_t _pad;
	uint32_t id;
};

struct remora_rpc_req {
	struct remora_rpc_addr from;
	uint16_t op;
	const void *data; /* valid during the handler only */
	uint32_t len;
	unsigned index, count; /* this request's position in its batch */
	struct remora_rpc_token token;
	struct remora_rpc_ep *ep; /* the endpoint running the handler (for remora_rpc_reply) */
	bool oneway;  /* sent by remora_rpc_post: nothing answers it, so it must not be deferred
		       * (REMORA_RPC_DEFER then counts as -EINVAL, and no reply is ever sent) */
};

/*
 * Runs on the worker the request names, inside its dispatcher: it must not park or call. It
 * writes at most cap reply bytes to rep, sets *rep_len, and returns the request's status
 * (>= 0 or -errno; the caller sees it in remora_rpc_call.status), or REMORA_RPC_DEFER to
 * answer later (only a batch of one request may be deferred; in a larger batch it is -EINVAL).
 */
typedef int (*remora_rpc_handler)(void *arg, const struct remora_rpc_req *req, void *rep,
				  uint32_t cap, uint32_t *rep_len);

/* One request of a batch. */
struct remora_rpc_call {
	uint16_t op;
	const void *req;
	uint32_t req_len;
	void *rep;        /* reply bytes land here (may be NULL with rep_cap 0) */
	uint32_t rep_cap;
	uint32_t rep_len; /* out: the reply's length (also when it did not fit) */
	int status;       /* out: the handler's status; -EMSGSIZE if the reply exceeded rep_cap,
			   * -EOPNOTSUPP if no handler is registered for op */
};

struct remora_rpc_cfg {
	uint32_t size;        /* sizeof(struct remora_rpc_cfg) */
	uint32_t workers;     /* endpoints this process will open (1..REMORA_RPC_MAX_WORKERS) */
	uint32_t max_pending; /* calls one endpoint may have in flight; 0: 256 */
};

/*
 * Opens the RPC layer of this compute-node process on tp (which needs REMORA_CAP_MSG; a
 * transport that is not a compute node's gets -REMORA_ENODE from its calls). Returns 0,
 * -EINVAL, -EOPNOTSUPP (no messages on this backend), -ENOMEM; one line in
 * remora_rpc_errmsg(NULL) (this thread's last failure).
 */
REMORA_API int remora_rpc_create(struct remora_transport *tp, const struct remora_rpc_cfg *cfg,
				 struct remora_rpc **out);
/* Every endpoint must be closed first. */
REMORA_API void remora_rpc_destroy(struct remora_rpc *r);
/* Registers op's handler; before the first endpoint opens. 0 or -EINVAL / -EBUSY. */
REMORA_API int remora_rpc_register(struct remora_rpc *r, uint16_t op, remora_rpc_handler fn,
				   void *arg);
/*
 * Opens worker `worker`'s endpoint, receiving through ch (the worker's channel). With s, the
 * scheduler runs the dispatcher whenever it drives its channel (remora_sched_set_poller), so
 * callers parked in remora_rpc_call wake without polling. Returns 0, -EINVAL, -EEXIST, -ENOMEM.
 */
REMORA_API int remora_rpc_ep_open(struct remora_rpc *r, unsigned worker, struct remora_chan *ch,
				  struct remora_sched *s, struct remora_rpc_ep **out);
/*
 * Detaches the endpoint and frees it. Close it once no coroutine waits in one of its calls
 * (after remora_sched_run returned): a caller still parked would wake on freed memory.
 */
REMORA_API void remora_rpc_ep_close(struct remora_rpc_ep *ep);

/*
 * The dispatcher, once: routes frames from the process's mailbox to their workers, handles the
 * requests addressed to this endpoint, wakes callers whose reply arrived, expires deadlines.
 * Returns the events handled (>= 0). A worker with no coroutine left serves by calling it.
 */
REMORA_API int remora_rpc_poll(struct remora_rpc_ep *ep);

/*
 * Sends n requests in one message to worker dst_worker of compute node dst_cn and waits for
 * their replies: inside a coroutine it parks (its scheduler's dispatcher wakes it), outside
 * one it runs the dispatcher itself. Each call's status and rep_len are filled in. Returns 0
 * (then see each call's status), -EINVAL, -EMSGSIZE (the batch exceeds REMORA_RPC_MAX_MSG),
 * -EHOSTDOWN (dst_cn is marked down), -ETIMEDOUT (no reply within timeout_ms; 0: the default;
 * the message may still be handled), -REMORA_ENODE, -REMORA_EPROTO (a malformed reply); one line in
 * remora_rpc_errmsg(ep) names the node. A busy receiver (no reassembly buffer free) and a full
 * mailbox are retried within the timeout.
 */
REMORA_API int remora_rpc_call(struct remora_rpc_ep *ep, uint16_t dst_cn, uint16_t dst_worker,
			       struct remora_rpc_call *calls, unsigned n, int timeout_ms);
/*
 * Sends n requests one way: their handlers run at worker dst_worker of compute node dst_cn, and
 * nothing answers (each call's status and reply are left as they are). The requests go in as
 * few messages as frames they need, each of whole requests, and they are handled in the order
 * this endpoint sends to that worker, before any later call or post of it: a post followed by
 * a call to the same worker is handled first. Waits only for room in the mailbox. Returns 0
 * once every one is sent, -EINVAL, -EMSGSIZE (one request does not fit one frame),
 * -EHOSTDOWN (dst_cn is marked down), -ETIMEDOUT (the mailbox stayed full for timeout_ms; 0:
 * the default; the requests before were sent), -REMORA_ENODE. Nothing sends a post again: one
 * that a lost connection dropped after this returned 0 is gone, so the requests must be ones
 * the receiver can do without (LOTUS's unlocks: its lock state drops a stale hold later).
 */
REMORA_API int remora_rpc_post(struct remora_rpc_ep *ep, uint16_t dst_cn, uint16_t dst_worker,
			       const struct remora_rpc_call *calls, unsigned n, int timeout_ms);
/*
 * Answers a request whose handler returned REMORA_RPC_DEFER, from the endpoint that received
 * it (same thread). Returns 0, -EINVAL, -EMSGSIZE, -ENOBUFS (the endpoint's outbox is full).
 */
REMORA_API int remora_rpc_reply(struct remora_rpc_ep *ep, const struct remora_rpc_token *t,
				int status, const void *data, uint32_t len);
/*
 * The control plane's verdict on a compute node (dead, fenced, or back): calls to a node that
 * is down fail at once with -EHOSTDOWN, and those in flight to it fail at their endpoint's
 * next poll. Safe from any thread.
 */
REMORA_API void remora_rpc_set_down(struct remora_rpc *r, uint16_t cn, bool down);

struct remora_rpc_stats {
	uint64_t calls;        /* remora_rpc_call batches sent */
	uint64_t requests;     /* requests in them */
	uint64_t msgs_sent;    /* messages (batches and replies), not frames */
	uint64_t frames_sent;  /* ring slots used */
	uint64_t frames_recv;  /* frames this endpoint consumed */
	uint64_t handled;      /* requests whose handler ran here */
	uint64_t batches_in;   /* request messages received here */
	uint64_t retries;      /* batches sent again after a busy receiver */
	uint64_t timeouts;
	uint64_t stale;        /* reply frames for a call that had already ended: dropped */
	uint64_t refused;      /* malformed frames refused (counted where they were read) */
	uint64_t dropped;      /* reply frames that found neither ring nor outbox room */
};
REMORA_API void remora_rpc_ep_stats(const struct remora_rpc_ep *ep, struct remora_rpc_stats *out);
/* The endpoint's last error message; with NULL, the last remora_rpc_create failure's. */
REMORA_API const char *remora_rpc_errmsg(const struct remora_rpc_ep *ep);

#ifdef __cplusplus
}
#endif
#endif
