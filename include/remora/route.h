/* SPDX-License-Identifier: MIT */
/*
 * Routing transactions to their home compute node (LOTUS's two-level load balancing,
 * docs/lotus.md "Routing"). A protocol whose locks live on compute nodes names a home for every
 * key (LOTUS: the owner of the key's shard); a read-write transaction runs best there, where
 * its first key's locks are local.
 *
 * The application hands the home node an opaque request (the inputs of one transaction, which
 * it knows how to run) with remora_route_send, from a coordinator coroutine, and goes on: the
 * answer comes back one way. At the home node the request queues at the worker of the same
 * index; a coordinator of that worker takes it with remora_route_take between its own
 * transactions (also while it waits for its own answer, so that nobody waits on a node whose
 * coordinators all wait), runs it, and answers with remora_route_answer. The sender polls
 * remora_route_done. Requests and answers ride on the db's RPC layer as one-way posts; a db
 * opened with remora_db_cfg.route registers them.
 *
 * Nothing is sent again: a request or an answer lost with a dead node is gone, and the sender
 * decides when to stop waiting (its transaction then may or may not have run).
 */
#ifndef REMORA_ROUTE_H
#define REMORA_ROUTE_H

#include <stdint.h>

#include <remora/tx.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of one request: a transaction's inputs. */
#define REMORA_ROUTE_MAX_REQ 176u

/* A request taken at its home node. */
struct remora_route_req {
	uint16_t cn;     /* the sender: compute node, worker, coordinator */
	uint16_t worker;
	uint16_t coord;
	uint16_t _pad;
	uint32_t ticket; /* the sender's, echoed in the answer */
	uint32_t len;
	unsigned char data[REMORA_ROUTE_MAX_REQ];
};

/*
 * The home compute node of key in table: 0 with *cn set, -EOPNOTSUPP when the db's protocol
 * has no homes (its locks are not on compute nodes), -EINVAL.
 */
REMORA_API int remora_route_home(struct remora_db *db, uint32_t table, uint64_t key,
				 uint16_t *cn);
/*
 * Sends req to compute node cn, from the calling coordinator coroutine of w; *ticket names it
 * for remora_route_done. One request per coordinator at a time: a new one replaces the old
 * one's answer slot. 0, -EINVAL (no coroutine, len too large, routing off), -EHOSTDOWN, or the
 * RPC layer's error.
 */
REMORA_API int remora_route_send(struct remora_worker *w, uint16_t cn, const void *req,
				 uint32_t len, uint32_t *ticket);
/* Takes the oldest request queued at w: 0 with *out filled, -EAGAIN (none), -EINVAL. */
REMORA_API int remora_route_take(struct remora_worker *w, struct remora_route_req *out);
/* Answers r with status (the application's; any int). 0 or the RPC layer's error. */
REMORA_API int remora_route_answer(struct remora_worker *w, const struct remora_route_req *r,
				   int status);
/*
 * The answer to the calling coordinator's request ticket: 0 with *status set, -EAGAIN (not
 * yet), -EINVAL.
 */
REMORA_API int remora_route_done(struct remora_worker *w, uint32_t ticket, int *status);

#ifdef __cplusplus
}
#endif

#endif
