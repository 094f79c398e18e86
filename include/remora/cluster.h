/* SPDX-License-Identifier: MIT */
/*
 * Cluster bootstrap, control plane, membership and leases (see docs/cluster.md).
 *
 * A memory node (remora_mn) creates its pool through the transport, registers it, and then
 * only answers control-plane requests over TCP (io_uring event loop): it is never on the
 * data path. A compute node (remora_cluster) connects to every memory node of the
 * configuration, fetches each node's descriptor, attaches it to its transport, joins the
 * membership, and renews a lease with a heartbeat thread.
 *
 * Leases: a compute node renews its lease at every memory node every heartbeat_ms. A memory
 * node that has not heard from a member for lease_ms (or whose control connection dropped
 * without a LEAVE) declares it dead and fences it in the pool (remora_pool_fence), so its
 * verbs no longer take effect; ids of dead nodes are never reused. The compute node counts
 * its lease from when it *sent* the last acknowledged heartbeat, so it believes itself alive
 * no longer than any memory node does.
 */
#ifndef REMORA_CLUSTER_H
#define REMORA_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <remora/error.h>
#include <remora/params.h>
#include <remora/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

_Static_assert(REMORA_MAX_CN <= 64, "membership bitmaps are 64-bit words");

/* Membership as memory nodes see it (sent on the wire: fixed layout). */
struct remora_cluster_view {
	uint64_t epoch; /* grows with every membership change (sum over memory nodes) */
	uint64_t alive; /* bit i: compute node i is a member */
	uint64_t dead;  /* bit i: compute node i was declared dead and fenced */
	uint64_t joined; /* bit i: compute node i joined since no member was left (start barriers) */
	uint32_t pid[REMORA_MAX_CN]; /* process id of each member, as it joined */
};
_Static_assert(sizeof(struct remora_cluster_view) == 32 + 4 * REMORA_MAX_CN, "wire layout");

/* ---- memory node ------------------------------------------------------------------------ */

struct remora_mn;

struct remora_mn_cfg {
	uint32_t size;                   /* sizeof(struct remora_mn_cfg) */
	const struct remora_params *params;
	uint16_t id;                     /* memory-node id, < remora_params_mn_count() */
	int port;                        /* >= 0: listen here, not on the configured port; 0: any */
	int signal_fd;                   /* >= 0: a signalfd; a readable signal stops the node */
	/*
	 * Additive: durable pools (docs/recovery.md). With keep_pool set the node opens the
	 * pool file it finds (and creates it when absent) instead of requiring a new one.
	 * pool_check, if set, runs on the opened pool before it is registered, and before the
	 * backend takes it over (REMORA_POOL_DEFER_COMMIT); a negative return refuses the pool
	 * (err holds one line; the pool file is kept byte for byte).
	 */
	int (*pool_check)(void *arg, struct remora_pool *pool, uint16_t id, char *err,
			  size_t errlen);
	void *pool_check_arg;
};

/*
 * Creates the pool of memory node cfg->id (it must not exist yet unless keep_pool is set: then
 * an existing pool is opened, see pool_check), registers it for remote
 * access, and starts listening. Returns 0, or a negative code with one line in err:
 * -EEXIST when the pool file exists (another memory node, or a crashed one's leftover),
 * -EADDRINUSE, -REMORA_ECONFIG, or the transport's codes.
 */
REMORA_API int remora_mn_open(const struct remora_mn_cfg *cfg, struct remora_mn **out, char *err,
			      size_t errlen);
/* The TCP port the node listens on (useful with port 0). */
REMORA_API uint16_t remora_mn_port(const struct remora_mn *mn);
/* Usable bytes of the pool it serves (a reopened kept pool keeps its own size). */
REMORA_API uint64_t remora_mn_pool_bytes(const struct remora_mn *mn);
/*
 * Serves requests until SHUTDOWN, remora_mn_stop() or a signal on signal_fd. Returns 0, or
 * a negative code when the event loop itself fails (messages from peers never make it fail).
 */
REMORA_API int remora_mn_run(struct remora_mn *mn);
/* Makes remora_mn_run() return soon; callable from any thread and from signal handlers. */
REMORA_API void remora_mn_stop(struct remora_mn *mn);
/* Closes the pool (removing its file unless keep_pool) and frees mn. */
REMORA_API void remora_mn_close(struct remora_mn *mn);
/* This memory node's own membership view. */
REMORA_API void remora_mn_view(const struct remora_mn *mn, struct remora_cluster_view *out);
/*
 * Asks memory node id, at the address p gives it, to exit (from any process: `remora mn
 * --stop`). Returns 0 once it acknowledged, or a negative code with one line in err.
 */
REMORA_API int remora_mn_shutdown(const struct remora_params *p, unsigned id, char *err,
				  size_t errlen);
/*
 * The path of the cluster's key file: key_file, or <dir>/remora-<cluster>-key (dir empty: the
 * backend's default pool directory). Every connection to a memory node proves it knows the
 * secret in it; the cluster's first memory node creates it (mode 0600). Returns 0 or
 * -ENAMETOOLONG.
 */
REMORA_API int remora_cluster_key_path(const struct remora_params *p, char *buf, size_t len);
/* Removes the key file, with the cluster's other files (remora run, remora clean): 0 or -errno. */
REMORA_API int remora_cluster_key_remove(const struct remora_params *p);

/* ---- compute node and tools ------------------------------------------------------------- */

struct remora_cluster;

/*
 * Joins the cluster described by p as compute node cn (0 <= cn < remora_params_cn_count()),
 * or as a tool when cn is -1 (attached to every memory node, but no member: no lease, no
 * heartbeat, no messages). Opens a transport from p, connects to every memory node
 * (retrying for connect_ms), checks cluster name, backend and cn count, attaches each
 * node's descriptor, joins (with its message locator, remora_msg_locator), hands the locators of
 * the other members to its transport (remora_msg_set_peer; members that join later follow within
 * a heartbeat), and starts the heartbeat thread.
 * Every connection first proves it holds the cluster secret (remora_cluster_key_path), and
 * checks that the memory node holds it too.
 * Returns 0, or a negative code with one line in err: -REMORA_ECONFIG (mismatch, no
 * address, an unknown name in $REMORA_MUTATE, no usable key file), -EACCES (a memory
 * node refused our key, or could not prove its own), -REMORA_EFENCED (this id was declared
 * dead earlier), -EEXIST (id in use), -ECONNREFUSED, -ETIMEDOUT, the transport's codes.
 */
REMORA_API int remora_cluster_join(const struct remora_params *p, int cn,
				   struct remora_cluster **out, char *err, size_t errlen);
/* Leaves (LEAVE to every memory node), stops the heartbeat, closes the transport, frees cl. */
REMORA_API void remora_cluster_leave(struct remora_cluster *cl);

REMORA_API struct remora_transport *remora_cluster_transport(struct remora_cluster *cl);
REMORA_API const struct remora_params *remora_cluster_params(const struct remora_cluster *cl);
REMORA_API int remora_cluster_cn_id(const struct remora_cluster *cl);
REMORA_API unsigned remora_cluster_n_mn(const struct remora_cluster *cl);
REMORA_API unsigned remora_cluster_n_cn(const struct remora_cluster *cl);
/* The descriptor memory node mn sent (regions and their keys); NULL if mn is out of range. */
REMORA_API const struct remora_node_desc *remora_cluster_desc(const struct remora_cluster *cl,
							      unsigned mn);

/*
 * True while this compute node holds a lease at every memory node: each acknowledged a
 * heartbeat sent less than lease_ms ago, and none declared it dead. Always false for tools.
 */
REMORA_API bool remora_cluster_lease_valid(const struct remora_cluster *cl);
/*
 * -1 while the lease holds and every memory node answered the latest heartbeat; else the id
 * of the memory node to blame (a failed heartbeat call breaks its link for good, or its
 * lease lapsed; 0 when fenced), with one line in why. A compute node that gets >= 0 must stop
 * running transactions: what it writes may no longer reach every replica. -1 for tools.
 */
REMORA_API int remora_cluster_lease_lost(struct remora_cluster *cl, char *why, size_t len);
/*
 * The membership view: the union over memory nodes (a compute node dead at any memory node
 * is dead). Members use the view of the latest heartbeats; tools ask every memory node now.
 * Returns 0 or a negative code (remora_cluster_errmsg() says which node failed).
 */
REMORA_API int remora_cluster_view(struct remora_cluster *cl, struct remora_cluster_view *out);
/* Fences compute node cn on every memory node. Returns 0 or the first failure. */
REMORA_API int remora_cluster_fence(struct remora_cluster *cl, uint16_t cn);
/* Asks every memory node to exit (they remove their pools unless keep_pool). */
REMORA_API int remora_cluster_shutdown(struct remora_cluster *cl);
REMORA_API const char *remora_cluster_errmsg(const struct remora_cluster *cl);

/*
 * Transport configuration the parameters describe (strings point into p), with
 * REMORA_TRANSPORT_MSG_PEERS: message locators come from the control plane.
 */
REMORA_API void remora_cluster_transport_cfg(const struct remora_params *p, int self_cn,
					     struct remora_transport_cfg *cfg);

#ifdef __cplusplus
}
#endif
#endif
