/* SPDX-License-Identifier: MIT */
/*
 * The backend author's header: what a transport backend (shm, rdma, pmem) implements and the
 * few core services it may call. Applications never include this file.
 *
 * A backend is one `const struct remora_backend_ops remora_backend_<name>` listed in the
 * registry the build generates (runtime/transport/registry.c.in). The core copies the table at
 * remora_transport_open() and fills every missing (NULL) op, and every op beyond the table's
 * `size`, with a stub returning -EOPNOTSUPP, so no slot is ever NULL and an older backend keeps
 * working when the table grows (fields are only ever appended).
 *
 * Division of work:
 *   core     validates every verb before the backend sees it (node attached, key registered,
 *            bounds, alignment, op supported), counts verbs and bytes, runs fault injection
 *            and the NIC cost model, owns the completion ring of inline backends.
 *   backend  moves the bytes: maps pools, applies verbs, fences compute nodes, carries messages.
 *
 * Inline backends (flag REMORA_BACKEND_INLINE: shm, pmem) apply the verbs of a batch inside
 * post(), in posting order, and write each verb's status to status[i]; the core turns those into
 * completions. Other backends (rdma) complete asynchronously and hand completions out of poll().
 */
#ifndef REMORA_BACKEND_H
#define REMORA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <remora/error.h>
#include <remora/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- configuration handed to a backend --------------------------------------------------- */

enum remora_atomics_mode {
	REMORA_ATOMICS_NATIVE,  /* CPU/NIC atomics, coherent across hosts */
	REMORA_ATOMICS_REFUSE,  /* no atomics: refused by the core with -EOPNOTSUPP */
	REMORA_ATOMICS_ARBITER, /* atomics serialized by one per-MN arbiter (emulated) */
};

/* The transport configuration with every default resolved (no NULL strings except dir). */
struct remora_backend_cfg {
	const char *cluster;   /* never NULL */
	const char *dir;       /* NULL: the backend's default */
	const char *profile;   /* cost profile name, never NULL */
	int atomics;           /* enum remora_atomics_mode */
	int self_cn;           /* -1: not a compute node */
	uint32_t max_cn;       /* never 0 */
	int numa_node;         /* -1: no binding */
	bool hugepages;
	uint32_t flags;        /* enum remora_transport_flags */
	/* The backend's own parameters (names from its ops' params), valid while it is open. */
	const struct remora_kv *params;
	uint32_t n_params;
};

/* The value of the backend parameter key, or NULL when it was not given. */
static inline const char *remora_backend_cfg_param(const struct remora_backend_cfg *cfg,
						   const char *key)
{
	for (uint32_t i = 0; i < cfg->n_params; i++)
		if (strcmp(cfg->params[i].key, key) == 0)
			return cfg->params[i].value;
	return NULL;
}

/* ---- the ops table ----------------------------------------------------------------------- */

enum remora_backend_flags {
	REMORA_BACKEND_INLINE = 1u << 0, /* post() applies verbs and fills status[] */
};

/* Flags the core passes to post(). */
enum remora_post_flags {
	/* Negative-control mutation "skip_fence_check" (tests only): apply a fenced CN's verbs. */
	REMORA_POST_SKIP_FENCE_CHECK = 1u << 0,
};

/*
 * Object handles: the core owns struct remora_transport / remora_pool / remora_chan; the
 * backend keeps its own state behind the void *priv pointers it returns from the open calls.
 */
struct remora_backend_ops {
	uint32_t size;        /* sizeof(struct remora_backend_ops) the backend was built with */
	uint32_t flags;       /* enum remora_backend_flags */
	const char *name;     /* "shm": matches $REMORA_BACKEND and remora_backend_<name> */
	const char *description;

	/* Capabilities with this configuration (cfg may be NULL: defaults). */
	int (*caps)(const struct remora_backend_cfg *cfg, struct remora_caps *caps);

	int (*open)(struct remora_transport *tp, const struct remora_backend_cfg *cfg, void **tpriv);
	void (*close)(void *tpriv);

	/* Memory-node side. base/bytes: the local mapping of the usable bytes. */
	int (*pool_open)(void *tpriv, const struct remora_pool_spec *spec, void **ppriv,
			 void **base, uint64_t *bytes);
	void (*pool_close)(void *ppriv, bool unlink);
	int (*pool_reg)(void *ppriv, uint64_t off, uint64_t len, uint32_t *key);
	int (*pool_dereg)(void *ppriv, uint32_t key);
	int (*pool_fence)(void *ppriv, uint16_t cn);
	int (*pool_describe)(void *ppriv, struct remora_node_desc *desc);
	int (*pool_persist)(void *ppriv, uint64_t off, uint64_t len);

	/* Compute-node side. The core keeps its own copy of desc's regions for validation. */
	int (*attach)(void *tpriv, const struct remora_node_desc *desc);
	int (*detach)(void *tpriv, uint16_t node);

	int (*chan_open)(void *tpriv, struct remora_chan *ch, void **cpriv);
	void (*chan_close)(void *cpriv);

	/*
	 * n (>= 1, <= caps.max_batch) verbs, already validated by the core. Inline backends apply
	 * them in order and set status[i]; the return value is 0 or a negative code meaning that
	 * no verb was applied and nothing is completed. Non-inline backends ignore status.
	 */
	int (*post)(void *cpriv, const struct remora_wr *wrs, unsigned n, int32_t *status,
		    unsigned pflags);
	/* Non-inline backends: hand out up to max completions. */
	int (*poll)(void *cpriv, struct remora_cqe *cqes, unsigned max);

	int (*msg_send)(void *cpriv, uint16_t dst_cn, const void *buf, uint32_t len);
	int (*msg_recv)(void *cpriv, uint16_t *src_cn, void *buf, uint32_t cap);

	/* Makes [off, off+len) of node persistent from the compute node's side (pmem). */
	int (*persist)(void *cpriv, uint16_t node, uint64_t off, uint64_t len);

	/* Removes every file of the cluster cfg->cluster the backend created (best effort). */
	int (*cleanup)(const struct remora_backend_cfg *cfg);

	/*
	 * Optional, for the cost model: as msg_send/msg_recv, but a message may be received only
	 * once the receiver's clock (now, in cost-model ns) has reached its deliver_at. With a
	 * profile on, the core calls these instead when the backend has both.
	 */
	int (*msg_send_at)(void *cpriv, uint16_t dst_cn, const void *buf, uint32_t len,
			   uint64_t deliver_at);
	int (*msg_recv_at)(void *cpriv, uint16_t *src_cn, void *buf, uint32_t cap, uint64_t now);

	/*
	 * Optional: takes over a pool opened with REMORA_POOL_DEFER_COMMIT (pool_open wrote
	 * nothing to it). Absent: nothing to take over, the core's stub returns 0.
	 */
	int (*pool_commit)(void *ppriv);

	/*
	 * Optional: message endpoints (remora_msg_locator / remora_msg_set_peer). Absent: the
	 * backend needs none (its mailboxes are found without help); the core reports "" and
	 * ignores peers. The core validates cn (< max_cn, this process a compute node) and that the
	 * locator is a printable string shorter than REMORA_MSG_LOCATOR_MAX; the backend parses it
	 * (-EINVAL with a message when malformed). msg_locator returns -ENOSPC when len is short.
	 */
	int (*msg_locator)(void *tpriv, char *buf, size_t len);
	int (*msg_set_peer)(void *tpriv, uint16_t cn, const char *locator);

	/*
	 * Optional: the names of the backend's own parameters, NULL-terminated (the parameter
	 * table has an entry of each name; tests/cluster/test_params.c checks it). The core hands
	 * their values to open() in remora_backend_cfg.params and refuses names no backend has.
	 */
	const char *const *params;

	/*
	 * Optional, for non-inline backends: the channel missed its verb deadline and is given up.
	 * Ends every verb the channel has in flight: when it returns, the device will never again
	 * touch their buffers (rdma: the QPs are moved to the error state, their flush drained
	 * for a bounded time, then destroyed), and each has a completion with status -ETIMEDOUT
	 * waiting for poll(). Fills *oldest with the oldest verb in flight (wr_id, op, node, and
	 * status -ETIMEDOUT; left zeroed when none) and why with what the device showed, one
	 * line. Returns the number of verbs ended. Absent: the core's stub; an inline backend has nothing in flight.
	 */
	int (*chan_break)(void *cpriv, struct remora_cqe *oldest, char *why, size_t len);

	/*
	 * Optional, for backends that apply verbs while they are posted: asks the CPU to start
	 * loading the pool memory that wrs[0..n) will touch, so that a coroutine can yield while
	 * the lines arrive (remora_sched_set_prefetch). Only a hint: the verbs are not validated
	 * yet, so it must not fault or read anything for a bad address (a prefetch instruction
	 * does neither), and it changes nothing.
	 */
	void (*prefetch)(void *cpriv, const struct remora_wr *wrs, unsigned n);
};

/* ---- core services for backends ---------------------------------------------------------- */

/* Sets the transport's one-line error message (printf format) and returns code. */
REMORA_API int remora_backend_error(struct remora_transport *tp, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Counts n verbs of kind op that were issued to node to emulate another verb. */
REMORA_API void remora_backend_count_emulated(struct remora_chan *ch, uint16_t node,
					      enum remora_op op, uint64_t n);
/* Counts a persist call towards node. */
REMORA_API void remora_backend_count_persist(struct remora_chan *ch, uint16_t node);

/* Fills buf (size >= 32) with the file name "remora-<cluster>-<what>". Returns 0 or -ENAMETOOLONG. */
REMORA_API int remora_backend_cluster_name(const char *cluster, const char *what, char *buf,
					   size_t size);
/* Fills buf with the path "<dir>/remora-<cluster>-<what>". Returns 0 or -ENAMETOOLONG. */
REMORA_API int remora_backend_cluster_path(const char *dir, const char *cluster, const char *what,
					   char *buf, size_t size);

/*
 * Binds [p, p+len) of a new pool to NUMA node numa_node (cfg->numa_node; < 0: no binding,
 * returns 0). -REMORA_ECONFIG with the message set when the node does not exist here or remora
 * was built without libnuma.
 */
REMORA_API int remora_backend_bind_numa(struct remora_transport *tp, int numa_node, void *p,
					size_t len);

#ifdef __cplusplus
}
#endif
#endif
