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
};

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

/*
 * Permission-epoch fencing, shared by the backends whose memory nodes are plain shared memory
 * of one host (shm, pmem). One struct remora_fence_slot per compute node lives in pool memory.
 *
 * A compute-node channel owns a lane (one word, its own cache line) when one is free, else it
 * uses the shared counter. Around each run of verbs to one node:
 *     lane:    lane = 1                 e = load(epoch) [acquire]  apply  lane = 0 [release]
 *     shared:  fetch_add(shared, 1)     e = load(epoch)            apply  fetch_sub(shared, 1)
 * and nothing is applied when e differs from the epoch the compute node attached with.
 * Fencer:      epoch = (epoch + 1) | FENCED [seq_cst CAS];  membarrier(GLOBAL_EXPEDITED);
 *              wait until shared == 0 and every lane == 0, or the CN's process is dead.
 *
 * This is a Dekker handshake. Its compute-node side needs "store lane, then load epoch" in
 * that order, which x86 and arm only give with a full barrier. Instead of paying one on every
 * run, the fencer (rare) makes every CPU that runs a registered thread execute one, with the
 * membarrier system call: either the compute node's load comes after that barrier and sees
 * the new epoch, or its lane store is visible to the fencer by then and the fencer waits for the
 * run to end. A process whose kernel lacks MEMBARRIER_CMD_GLOBAL_EXPEDITED registration uses a
 * seq_cst exchange for the lane store instead (slot->asym = 0 tells the fencer). Either way,
 * when the fence returns no verb of that CN takes effect any more.
 */
#define REMORA_FENCE_FENCED (UINT64_C(1) << 63)
#define REMORA_FENCE_LANES 6

struct remora_fence_slot {
	uint64_t epoch;  /* generation; bit 63: fenced for good */
	uint64_t pid;    /* process that attached as this CN (liveness check of the fencer) */
	uint64_t asym;   /* 1: the CN's lanes rely on the fencer's membarrier */
	uint64_t _pad0[5];
	uint64_t shared; /* runs in progress of channels without a lane */
	uint64_t _pad1[7];
	struct {
		uint64_t active; /* 1 while this lane's channel applies a run */
		uint64_t _pad[7];
	} lane[REMORA_FENCE_LANES];
};
_Static_assert(sizeof(struct remora_fence_slot) == 512, "fence slot: 8 cache lines");

/*
 * lane: the channel's lane, or -1 for the shared counter; asym: the value join returned in
 * *asym. True when the run may be applied (then call remora_fence_exit after it).
 */
static inline bool remora_fence_enter(struct remora_fence_slot *s, int lane, bool asym,
				      uint64_t mine)
{
	if (lane >= 0 && asym) {
		__atomic_store_n(&s->lane[lane].active, 1, __ATOMIC_RELAXED);
		__atomic_signal_fence(__ATOMIC_SEQ_CST); /* the CPU barrier is the fencer's job */
	} else if (lane >= 0) {
		__atomic_exchange_n(&s->lane[lane].active, 1, __ATOMIC_SEQ_CST);
	} else {
		__atomic_fetch_add(&s->shared, 1, __ATOMIC_SEQ_CST);
	}
	if (__atomic_load_n(&s->epoch, __ATOMIC_SEQ_CST) == mine)
		return true;
	if (lane >= 0)
		__atomic_store_n(&s->lane[lane].active, 0, __ATOMIC_RELEASE);
	else
		__atomic_fetch_sub(&s->shared, 1, __ATOMIC_RELEASE);
	return false;
}

static inline void remora_fence_exit(struct remora_fence_slot *s, int lane)
{
	if (lane >= 0)
		__atomic_store_n(&s->lane[lane].active, 0, __ATOMIC_RELEASE);
	else
		__atomic_fetch_sub(&s->shared, 1, __ATOMIC_RELEASE);
}

/* Whether a run of verbs is in progress on the slot (or was, for a CN that died in it). */
static inline bool remora_fence_slot_busy(struct remora_fence_slot *s)
{
	if (__atomic_load_n(&s->shared, __ATOMIC_SEQ_CST))
		return true;
	for (unsigned l = 0; l < REMORA_FENCE_LANES; l++)
		if (__atomic_load_n(&s->lane[l].active, __ATOMIC_SEQ_CST))
			return true;
	return false;
}

/*
 * Fencer side: marks the slot fenced, then waits for runs in progress (see above). Returns 0,
 * or -ENOSYS when the CN relies on membarrier and this process may not call it (the fence
 * cannot be guaranteed; the slot is marked fenced all the same).
 */
REMORA_API int remora_fence_slot_fence(struct remora_fence_slot *s);
/*
 * Attach side: reads the epoch to check against into *mine and whether this process's lanes
 * may skip the CPU barrier into *asym. -REMORA_EFENCED if this CN is fenced.
 */
REMORA_API int remora_fence_slot_join(struct remora_fence_slot *s, uint64_t *mine, bool *asym);

/*
 * Lanes are handed out per process: a backend keeps one `uint32_t` bitmap per transport and
 * claims a lane for each channel it opens (-1 when all are taken), releasing it at close.
 */
static inline int remora_fence_lane_claim(uint32_t *bitmap)
{
	uint32_t cur = __atomic_load_n(bitmap, __ATOMIC_RELAXED);

	for (;;) {
		int lane = __builtin_ffs((int)~cur) - 1;

		if (lane < 0 || lane >= REMORA_FENCE_LANES)
			return -1;
		if (__atomic_compare_exchange_n(bitmap, &cur, cur | (1u << lane), true,
						__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			return lane;
	}
}

static inline void remora_fence_lane_release(uint32_t *bitmap, int lane)
{
	if (lane >= 0)
		__atomic_fetch_and(bitmap, ~(1u << lane), __ATOMIC_ACQ_REL);
}

#ifdef __cplusplus
}
#endif
#endif
