/* SPDX-License-Identifier: MIT */
/*
 * The lock service: shared and exclusive locks that live in memory-node memory, taken and
 * given back by coordinator coroutines of compute nodes. Lock types are plug-ins of one
 * service: DecLock's queue-notify lock ("declock", "declock-tf", "declock-pf") and the
 * baselines it is measured against ("caslock", "dslr", "shiftlock"). Layouts, verbs per
 * acquisition and the decisions behind them: docs/declock.md.
 *
 * One struct remora_lock_svc per compute-node process, one struct remora_lock_cli per
 * coordinator coroutine. Waiters of the queue types are handed the lock by a message from the
 * compute node that releases it, over the RPC layer of <remora/rpc.h>: create the service
 * before the RPC layer's endpoints open, and drive the endpoint (a worker's scheduler does)
 * while coroutines wait. One worker (one endpoint) per compute node.
 */
#ifndef REMORA_LOCK_H
#define REMORA_LOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <remora/rpc.h>
#include <remora/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

enum remora_lock_mode { REMORA_LOCK_S = 0, REMORA_LOCK_X = 1 };

struct remora_lock_cfg {
	uint32_t size;          /* sizeof(struct remora_lock_cfg) */
	const char *type;       /* a lock type of remora_lock_types() */
	struct remora_rpc *rpc; /* this process's RPC layer; NULL only with n_cn 1 */
	uint16_t rpc_op;        /* first of the 2 RPC operation codes the service takes; 0: 60 */
	uint16_t cn, n_cn;      /* this compute node, and how many take part (ids 0 .. n_cn-1) */
	remora_gaddr base;      /* the lock table: n_locks x remora_lock_stride(type) bytes */
	uint32_t rkey;          /* ... in this registered region */
	uint32_t n_locks;
	unsigned timeout_ms;    /* a waiter's bound before it resets the lock; 0: 200 */
};

/* A held lock: filled by remora_lock_acquire, given back to remora_lock_release. */
struct remora_lock_hold {
	uint32_t lock;
	uint8_t mode;
	uint8_t epoch;
	uint64_t ticket;
};

struct remora_lock_svc;
struct remora_lock_cli;

/* NULL-terminated list of the lock types built. */
REMORA_API const char *const *remora_lock_types(void);
/* Bytes one lock of type takes in memory-node memory; 0 for an unknown type. */
REMORA_API size_t remora_lock_stride(const char *type);

/*
 * Creates this compute node's service (and registers its RPC handlers). 0, -EINVAL (a bad
 * configuration: remora_lock_errmsg() says which field), -ENOENT (unknown type), -ENOMEM.
 */
REMORA_API int remora_lock_svc_create(const struct remora_lock_cfg *cfg,
				      struct remora_lock_svc **out);
REMORA_API void remora_lock_svc_destroy(struct remora_lock_svc *s);
/* The one-line reason of this thread's last failed remora_lock_svc_create. */
REMORA_API const char *remora_lock_errmsg(void);
/*
 * The control plane's verdict on compute node cn (down, or back): a waiter stops waiting for
 * a node that is down, and its locks are reset. Any thread.
 */
REMORA_API void remora_lock_node_down(struct remora_lock_svc *s, unsigned cn, bool down);

/*
 * A coordinator's client. Verbs go through ch, grants arrive through ep (the worker's RPC
 * endpoint; NULL with n_cn 1). coord is the coroutine's index on its worker (< 1024).
 */
REMORA_API int remora_lock_cli_open(struct remora_lock_svc *s, struct remora_chan *ch,
				    struct remora_rpc_ep *ep, unsigned coord,
				    struct remora_lock_cli **out);
REMORA_API void remora_lock_cli_close(struct remora_lock_cli *c);
/* Writes every lock's free image: once, by one client, before any node acquires. */
REMORA_API int remora_lock_format(struct remora_lock_cli *c);

/*
 * Takes lock (0 .. n_locks-1) in mode m; a coroutine parks while it waits. 0 (held, h
 * filled), -ETIMEDOUT (no grant within the timeout even after resetting the lock: not held),
 * -EINVAL (lock out of range or a bad mode), or a verb's error.
 */
REMORA_API int remora_lock_acquire(struct remora_lock_cli *c, uint32_t lock,
				   enum remora_lock_mode m, struct remora_lock_hold *h);
/* Gives h's lock back: 0, or a verb's error (the lock counts as given back either way). */
REMORA_API int remora_lock_release(struct remora_lock_cli *c, const struct remora_lock_hold *h);

/* Memory-node verbs this client posted to acquire and to release (exact counters). */
struct remora_lock_counts {
	uint64_t acquires, releases;
	uint64_t acquire_verbs, release_verbs;
	uint64_t waited; /* acquisitions that waited for a grant or a turn */
	uint64_t resets; /* resets this client performed */
};
REMORA_API void remora_lock_counts(const struct remora_lock_cli *c,
				   struct remora_lock_counts *out);

#ifdef __cplusplus
}
#endif

#endif
