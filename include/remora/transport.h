/* SPDX-License-Identifier: MIT */
/*
 * The verbs transport: one-sided READ, WRITE, CAS, FAA and masked-CAS on memory-node pools,
 * and bounded messages between compute nodes. The same calls run on every backend
 * (shm, rdma, pmem); protocols never see which one.
 *
 * Objects:
 *   remora_transport  one per process: a backend instance and the memory nodes it knows.
 *   remora_pool       a memory node's pool, held by the memory-node process (or a test).
 *   remora_chan       one per thread: an RC-ordered channel to every memory node and one
 *                     completion queue. Not thread-safe; never share a channel.
 *
 * Contract (see docs/transport.md):
 *   - Global address = (node, offset) in 64 bits. Every verb names a region key; a verb whose
 *     key is not registered on its node, or whose bytes leave that region, is refused at post
 *     time with -REMORA_EBADKEY / -REMORA_EBOUNDS and touches no memory.
 *   - CAS, FAA and masked-CAS act atomically on aligned 8-byte words, against each other.
 *     READ and WRITE larger than 8 bytes are not atomic.
 *   - masked-CAS:  old = *p;
 *                  if (((old ^ compare) & compare_mask) == 0)
 *                          *p = (old & ~swap_mask) | (swap & swap_mask);
 *                  return old;
 *   - CAS:         old = *p; if (old == compare) *p = swap; return old;
 *   - FAA:         old = *p; *p = old + swap; return old;
 *   - Verbs on one channel to one node take effect in posting order. REMORA_WR_FENCE makes a
 *     verb wait for earlier READs and atomics of its channel to complete.
 *   - Posting never blocks: -EAGAIN means the channel is full; poll, then post again.
 *   - Every posted verb produces exactly one completion carrying its own status.
 */
#ifndef REMORA_TRANSPORT_H
#define REMORA_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <remora/error.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- global addresses ------------------------------------------------------------------ */

typedef uint64_t remora_gaddr;

#define REMORA_GADDR_OFF_BITS 48
#define REMORA_GADDR_OFF_MASK ((UINT64_C(1) << REMORA_GADDR_OFF_BITS) - 1)
#define REMORA_MAX_MN 32       /* memory nodes one cluster may have */
#define REMORA_MAX_CN 64       /* compute-node processes one cluster may have */
#define REMORA_MAX_REGIONS 8   /* registered regions per memory node */

static inline remora_gaddr remora_gaddr_make(uint16_t node, uint64_t off)
{
	return ((uint64_t)node << REMORA_GADDR_OFF_BITS) | (off & REMORA_GADDR_OFF_MASK);
}

static inline uint16_t remora_gaddr_node(remora_gaddr a)
{
	return (uint16_t)(a >> REMORA_GADDR_OFF_BITS);
}

static inline uint64_t remora_gaddr_off(remora_gaddr a)
{
	return a & REMORA_GADDR_OFF_MASK;
}

/* ---- verbs ----------------------------------------------------------------------------- */

enum remora_op {
	REMORA_OP_READ,
	REMORA_OP_WRITE,
	REMORA_OP_CAS,
	REMORA_OP_FAA,
	REMORA_OP_MCAS,
	REMORA_OP__COUNT
};

enum remora_wr_flags {
	REMORA_WR_FENCE = 1u << 0,   /* wait for earlier READs/atomics on this channel */
	REMORA_WR_DURABLE = 1u << 1, /* WRITE: persistent before its completion (pmem) */
};

struct remora_wr {
	uint64_t wr_id;        /* returned in the completion; see remora_waiter below */
	remora_gaddr raddr;    /* remote address */
	uint32_t rkey;         /* key of the region raddr lies in */
	uint32_t len;          /* READ/WRITE bytes; ignored for atomics (always 8) */
	uint8_t op;            /* enum remora_op */
	uint8_t flags;         /* enum remora_wr_flags */
	uint16_t _pad;
	uint32_t _pad2;
	void *local;           /* READ: destination; WRITE: source; atomics: uint64_t *old (may be NULL) */
	uint64_t compare;      /* CAS, MCAS */
	uint64_t swap;         /* CAS, MCAS: new value; FAA: addend */
	uint64_t compare_mask; /* MCAS */
	uint64_t swap_mask;    /* MCAS */
};

struct remora_cqe {
	uint64_t wr_id;
	int32_t status; /* 0, or a negative code: -REMORA_EFENCED, -EOPNOTSUPP, -EIO, ... */
	uint8_t op;
	uint8_t _pad;
	uint16_t node;
};

/* ---- capabilities ---------------------------------------------------------------------- */

enum remora_cap_flags {
	REMORA_CAP_NATIVE_MCAS = 1u << 0,       /* masked-CAS in hardware, not a READ+CAS loop */
	REMORA_CAP_PERSIST = 1u << 1,           /* DURABLE writes reach persistence */
	REMORA_CAP_COHERENT_ATOMICS = 1u << 2,  /* atomics coherent across hosts and with CPU */
	REMORA_CAP_MSG = 1u << 3,               /* compute-node messages */
	REMORA_CAP_FENCING = 1u << 4,           /* a fenced compute node's verbs have no effect */
	/*
	 * The device checks each verb against its key's region itself (an RNIC's rkey check),
	 * independently of remora_post(): a verb outside its region fails at the device and
	 * changes no memory even when the core's check is bypassed.
	 */
	REMORA_CAP_DEVICE_BOUNDS = 1u << 5,
};

enum remora_persist_gran {
	REMORA_PERSIST_NONE,
	REMORA_PERSIST_BYTE,
	REMORA_PERSIST_CACHE_LINE,
	REMORA_PERSIST_PAGE,
};

struct remora_caps {
	uint32_t size;          /* sizeof(struct remora_caps) as the caller knows it */
	uint32_t ops;           /* bit (1u << enum remora_op) per supported verb */
	uint32_t emulated_ops;  /* subset of ops that the backend emulates with other verbs */
	uint32_t flags;         /* enum remora_cap_flags */
	uint32_t persist_gran;  /* enum remora_persist_gran */
	uint32_t max_batch;     /* verbs one remora_post() accepts */
	uint32_t max_inline;    /* WRITE bytes sent inline (0: none) */
	uint32_t max_msg;       /* bytes one message may carry */
	uint32_t max_outstanding; /* verbs a channel may have in flight */
};

/* ---- transport ------------------------------------------------------------------------- */

struct remora_transport;
struct remora_pool;
struct remora_chan;

enum remora_transport_flags {
	/*
	 * Compute nodes learn where their peers receive messages only through
	 * remora_msg_set_peer() (a control plane carries each one's remora_msg_locator()): the
	 * backend publishes and reads no discovery files of its own. remora_cluster_join() sets it.
	 */
	REMORA_TRANSPORT_MSG_PEERS = 1u << 0,
};

/*
 * One backend parameter, such as { "rdma_device", "rxe0" }. remora_backend_params() lists the
 * names a backend declares; the cluster's parameter table hands them over with the same names.
 */
struct remora_kv {
	const char *key;
	const char *value;
};

struct remora_transport_cfg {
	uint32_t size;          /* sizeof(struct remora_transport_cfg) */
	const char *backend;    /* "shm" | "rdma" | "pmem"; NULL: $REMORA_BACKEND, else "shm" */
	const char *cluster;    /* scopes pool and mailbox names; NULL: "remora" */
	const char *dir;        /* where pool files live; NULL: backend default (/dev/shm) */
	const char *profile;    /* NIC cost model: none | cxl | cx3 | cx4 | cx5 | cx6; NULL: "none" */
	const char *atomics;    /* cxl pools: native | refuse | arbiter; NULL: native */
	int self_cn;            /* this process's compute-node id, or -1 (memory node, tool) */
	uint32_t max_cn;        /* compute nodes the cluster may have (mailboxes); 0: REMORA_MAX_CN */
	int numa_node;          /* bind pools created here to this NUMA node; -1: no binding */
	bool hugepages;         /* back pools with huge pages where the backend can */
	uint32_t flags;         /* enum remora_transport_flags (additive: 0 before it existed) */
	/*
	 * Additive: parameters of the backend's own (remora_backend_params()). A key that no built
	 * backend declares fails the open with -REMORA_ECONFIG; one that another backend declares
	 * is ignored, so one parameter list serves every backend. Copied at open.
	 */
	const struct remora_kv *backend_params;
	uint32_t n_backend_params;
	/*
	 * Scaled cluster: every service rate of the cost profile (memory-node verbs, compute-node
	 * message sends) is divided by mn_scale, round trips are kept, so one host's compute
	 * stands for mn_scale hosts' against the same NICs. 0: $REMORA_MN_SCALE, else 1.
	 */
	uint32_t mn_scale;
	/*
	 * Additive: the verb deadline in ms (parameter verb_timeout_ms). A channel with verbs in
	 * flight that hands out no completion for this long is broken: the backend ends every
	 * verb in flight (their completions carry -ETIMEDOUT) and later posts are refused with
	 * -ETIMEDOUT; remora_transport_errmsg() names the node and the verb. 0: the parameter
	 * ($REMORA_VERB_TIMEOUT_MS, else its default); < 0: no deadline.
	 */
	int32_t verb_timeout_ms;
};
#define REMORA_MN_SCALE_MAX 1000000

/*
 * Opens the backend named by cfg (or $REMORA_BACKEND). Returns 0, -REMORA_ENOBACKEND for an
 * unknown name (the message lists the built-in backends), -REMORA_ECONFIG for a bad profile,
 * or -errno. On failure *out is untouched and remora_last_error() holds a one-line reason.
 */
REMORA_API int remora_transport_open(const struct remora_transport_cfg *cfg,
				     struct remora_transport **out);
REMORA_API void remora_transport_close(struct remora_transport *tp);
REMORA_API const char *remora_transport_backend(const struct remora_transport *tp);
REMORA_API const char *remora_transport_profile(const struct remora_transport *tp);
/* The memory-node scale K the cost profile's rates are divided by (1: unscaled). */
REMORA_API unsigned remora_transport_mn_scale(const struct remora_transport *tp);

/* Verb classes of the cost model, as the counters of remora_cost_stats index them. */
enum remora_cost_verb_class {
	REMORA_COST_CLASS_READ,
	REMORA_COST_CLASS_WRITE,
	REMORA_COST_CLASS_ATOMIC, /* CAS, FAA, masked-CAS */
	REMORA_COST_CLASSES
};

/*
 * What the cost model has served so far, for utilization (busy time over wall time, the
 * difference of two snapshots): cumulative over every process of the cluster since its cost
 * segment was created. A server's busy time counts the service time of the verbs it has
 * finished by now_ns (verbs still queued behind busy_until are not served yet).
 */
struct remora_cost_stats {
	uint64_t now_ns;                                      /* the cost model's clock */
	uint32_t mn_scale;
	uint64_t svc_ns[REMORA_COST_CLASSES];                 /* per verb, scaled; 0: no limit */
	uint64_t msg_svc_ns;                                  /* per message sent, scaled */
	uint64_t mn_busy_ns[REMORA_MAX_MN][REMORA_COST_CLASSES]; /* per memory node and class */
	uint64_t cn_msg_busy_ns[REMORA_MAX_CN];               /* per compute node's NIC (sends) */
};

/* Fills *st; -ENODATA (st zeroed but mn_scale) when no cost profile is on (none, rdma). */
REMORA_API int remora_transport_cost_stats(const struct remora_transport *tp,
					   struct remora_cost_stats *st);
REMORA_API int remora_transport_caps(const struct remora_transport *tp, struct remora_caps *caps);
/* The last error message of this transport (context-local, never thread-local). */
REMORA_API const char *remora_transport_errmsg(const struct remora_transport *tp);
/* The last error message of a failed remora_transport_open() in this thread. */
REMORA_API const char *remora_last_error(void);

/*
 * Removes every file the cluster cfg->cluster left behind: pool files of the backend named by
 * cfg (in cfg->dir), the message and cost segments. For `remora run` after a failure or Ctrl-C;
 * never call it while processes of that cluster are running. Returns 0 or the first -errno.
 */
REMORA_API int remora_transport_cleanup(const struct remora_transport_cfg *cfg);

/*
 * The parameter names backend declares (NULL-terminated; empty when it has none), or NULL when
 * no backend of that name is built in.
 */
REMORA_API const char *const *remora_backend_params(const char *backend);
/* Names of the backends built into this binary, NULL-terminated. */
REMORA_API const char *const *remora_backend_names(void);
/* Capabilities a backend would report with default settings; -REMORA_ENOBACKEND if unknown. */
REMORA_API int remora_backend_caps(const char *name, struct remora_caps *caps);

/* ---- memory-node side ------------------------------------------------------------------ */

enum remora_pool_flags {
	REMORA_POOL_CREATE = 1u << 0, /* create the pool file if it does not exist */
	REMORA_POOL_EXCL = 1u << 1,   /* fail with -EEXIST if it exists */
	REMORA_POOL_UNLINK_ON_CLOSE = 1u << 2,
	/*
	 * Open an existing pool without writing to it: the backend checks and maps it, and takes
	 * it over (its own header: open counter, incarnation) only in remora_pool_commit(). The
	 * owner reads its data first; a pool closed before the commit is left byte for byte.
	 */
	REMORA_POOL_DEFER_COMMIT = 1u << 3,
};

struct remora_pool_spec {
	uint32_t size;     /* sizeof(struct remora_pool_spec) */
	uint16_t node;     /* memory-node id, < REMORA_MAX_MN */
	uint16_t _pad;
	uint64_t bytes;    /* usable bytes of the pool */
	uint32_t flags;    /* enum remora_pool_flags */
};

struct remora_region_desc {
	uint64_t off;
	uint64_t len;
	uint32_t key;
	uint32_t _pad;
};

/* What a compute node needs to reach one memory node; fixed size, sent over the control plane. */
struct remora_node_desc {
	uint16_t node;
	uint16_t nregions;
	uint32_t _pad;
	uint64_t bytes;
	struct remora_region_desc regions[REMORA_MAX_REGIONS];
	char locator[128]; /* backend-specific: pool file path, "host:port", ... */
};

/* Creates or opens the pool of memory node spec->node. Returns 0 or -errno / -REMORA_E*. */
REMORA_API int remora_pool_open(struct remora_transport *tp, const struct remora_pool_spec *spec,
				struct remora_pool **out);
/* Closes the pool; with unlink the pool's backing file is removed. */
REMORA_API void remora_pool_close(struct remora_pool *pool, bool unlink);
/* Local mapping of the pool's usable bytes (for the memory node's own formatting only). */
REMORA_API void *remora_pool_base(struct remora_pool *pool);
/*
 * Takes over a pool opened with REMORA_POOL_DEFER_COMMIT, once its owner accepted what it
 * holds; 0 and a no-op for a pool opened without it. remora_pool_reg refuses before it.
 */
REMORA_API int remora_pool_commit(struct remora_pool *pool);
REMORA_API uint64_t remora_pool_bytes(const struct remora_pool *pool);
/* Registers [off, off+len) for remote access; the key is written to *key. */
REMORA_API int remora_pool_reg(struct remora_pool *pool, uint64_t off, uint64_t len, uint32_t *key);
REMORA_API int remora_pool_dereg(struct remora_pool *pool, uint32_t key);
/*
 * Fences compute node cn: when this returns 0, no verb of cn takes effect on this pool any
 * more (verbs already applied stay applied). Fencing is permanent for that cn id.
 */
REMORA_API int remora_pool_fence(struct remora_pool *pool, uint16_t cn);
REMORA_API int remora_pool_describe(const struct remora_pool *pool, struct remora_node_desc *desc);
/* Makes [off, off+len) of the pool persistent (pmem); 0 and a no-op where not persistent. */
REMORA_API int remora_pool_persist(struct remora_pool *pool, uint64_t off, uint64_t len);

/* ---- compute-node side ----------------------------------------------------------------- */

/* Makes memory node desc->node reachable from this process. Returns 0 or -errno / -REMORA_E*. */
REMORA_API int remora_transport_attach(struct remora_transport *tp,
				       const struct remora_node_desc *desc);
REMORA_API int remora_transport_detach(struct remora_transport *tp, uint16_t node);

REMORA_API int remora_chan_open(struct remora_transport *tp, struct remora_chan **out);
REMORA_API void remora_chan_close(struct remora_chan *ch);
REMORA_API struct remora_transport *remora_chan_transport(struct remora_chan *ch);
/*
 * Makes [off, off+len) of memory node `node` persistent through this compute node's mapping,
 * as if every byte there had been written with REMORA_WR_DURABLE (pmem; counted in
 * counters.persists). For bulk work whose verbs were not flagged (format, loading). A no-op
 * returning 0 on backends without persistence. Returns 0, -REMORA_ENODE (not attached),
 * -REMORA_EBOUNDS, -REMORA_EFENCED.
 */
REMORA_API int remora_persist(struct remora_chan *ch, uint16_t node, uint64_t off, uint64_t len);

/*
 * Posts n verbs with one doorbell. Returns 0 when all are posted, -EAGAIN when the channel
 * lacks room for all n (none posted), or a negative code when a verb is invalid (none posted):
 * -REMORA_ENODE, -REMORA_EBADKEY, -REMORA_EBOUNDS, -REMORA_EALIGN, -EINVAL, -EOPNOTSUPP.
 */
REMORA_API int remora_post(struct remora_chan *ch, const struct remora_wr *wrs, unsigned n);
/* Writes up to max completions; returns how many (0 when none is ready). Never blocks. */
REMORA_API int remora_poll(struct remora_chan *ch, struct remora_cqe *cqes, unsigned max);
/* Verbs posted and not yet polled on this channel. */
REMORA_API unsigned remora_chan_outstanding(const struct remora_chan *ch);
/*
 * With exempt set, verbs posted on ch complete as soon as the backend applied them and are not
 * charged to the cost profile's memory nodes (no delay, no utilization): for bulk loading
 * before a measured run, which on a scaled profile would otherwise take K times as long as on
 * the hardware modelled. Verbs already in flight keep their times and their order. No effect
 * without a cost profile. Returns the setting it replaced.
 */
REMORA_API bool remora_chan_cost_exempt(struct remora_chan *ch, bool exempt);

/*
 * Waiters: a caller that wants to be told when a group of verbs completes points each verb's
 * wr_id at one struct remora_waiter and calls remora_chan_progress() (the scheduler's poller
 * does so). When pending drops to zero, wake(w) runs. status keeps the first error.
 */
struct remora_waiter {
	unsigned pending;
	int status;
	void (*wake)(struct remora_waiter *w);
	void *owner;
};
/* Polls ch and settles waiters; returns completions handled. */
REMORA_API int remora_chan_progress(struct remora_chan *ch);

/*
 * Synchronous helpers for tools and tests: post and spin until done (never inside a
 * coroutine: use remora_co_exec from <remora/sched.h> there). Return 0 or the verb's status.
 */
REMORA_API int remora_exec(struct remora_chan *ch, struct remora_wr *wrs, unsigned n);
REMORA_API int remora_read(struct remora_chan *ch, remora_gaddr src, uint32_t key, void *dst,
			   uint32_t len);
REMORA_API int remora_write(struct remora_chan *ch, remora_gaddr dst, uint32_t key, const void *src,
			    uint32_t len);
REMORA_API int remora_cas(struct remora_chan *ch, remora_gaddr a, uint32_t key, uint64_t compare,
			  uint64_t swap, uint64_t *old);
REMORA_API int remora_faa(struct remora_chan *ch, remora_gaddr a, uint32_t key, uint64_t add,
			  uint64_t *old);
REMORA_API int remora_mcas(struct remora_chan *ch, remora_gaddr a, uint32_t key, uint64_t compare,
			   uint64_t compare_mask, uint64_t swap, uint64_t swap_mask, uint64_t *old);

/* ---- messages between compute nodes ---------------------------------------------------- */

/*
 * Messages go from this process's compute node to compute node dst. Delivery is exactly once
 * and in order per (sender, receiver) pair; buffers are preallocated and bounded. A network
 * backend whose connection to dst broke reports it once: messages sent before may be lost.
 * send: 0, -EAGAIN (receiver's mailbox full), -EMSGSIZE, -REMORA_ENODE, -ECONNRESET (rdma: the
 * connection broke; this message was not sent, the next send connects again).
 * recv: the message length (>= 0) with *src set, or -EAGAIN when none is waiting.
 */
REMORA_API int remora_msg_send(struct remora_chan *ch, uint16_t dst_cn, const void *buf,
			       uint32_t len);
REMORA_API int remora_msg_recv(struct remora_chan *ch, uint16_t *src_cn, void *buf, uint32_t cap);

/*
 * Message endpoints, for a control plane that introduces compute nodes to each other (the rdma
 * backend: "ip:port" of this process's message listener; shm and pmem need none, their
 * mailboxes live in shared files). A locator is a printable string without spaces, shorter than
 * REMORA_MSG_LOCATOR_MAX.
 *
 * remora_msg_locator: writes this process's locator to buf; "" when the backend needs none or
 * this process is not a compute node. Returns 0, -EINVAL (buf NULL or len 0), -ENOSPC (len too
 * small; REMORA_MSG_LOCATOR_MAX always fits).
 *
 * remora_msg_set_peer: compute node cn receives messages at locator (what cn's
 * remora_msg_locator returned); "" forgets it, so new connections to cn wait (-EAGAIN from
 * remora_msg_send) until a locator is set again. Setting the locator cn already has is a no-op;
 * a different one makes the next message to cn go to the new endpoint. Backends that need no
 * locator accept and ignore it. Returns 0, -REMORA_ENODE (this process is not a compute node,
 * or cn >= max_cn), -EINVAL (NULL, too long, not printable, or malformed for the backend; one
 * line in remora_transport_errmsg). Safe to call from any thread while others send.
 */
#define REMORA_MSG_LOCATOR_MAX 128
REMORA_API int remora_msg_locator(struct remora_transport *tp, char *buf, size_t len);
REMORA_API int remora_msg_set_peer(struct remora_transport *tp, uint16_t cn, const char *locator);

/* ---- counters -------------------------------------------------------------------------- */

struct remora_counters {
	uint64_t verbs[REMORA_MAX_MN][REMORA_OP__COUNT];    /* verbs that reached the node */
	uint64_t bytes[REMORA_MAX_MN][REMORA_OP__COUNT];
	uint64_t emulated[REMORA_MAX_MN][REMORA_OP__COUNT]; /* verbs issued to emulate another verb */
	uint64_t persists[REMORA_MAX_MN];                   /* persist calls (pmem) */
	uint64_t doorbells;                                 /* remora_post() calls that posted */
	uint64_t msgs_sent, msgs_recv;
};

/* Counters of one channel since it opened (exact; no sampling). */
REMORA_API void remora_chan_counters(const struct remora_chan *ch, struct remora_counters *out);
/* Sum over every channel this transport has opened, closed ones included. */
REMORA_API void remora_transport_counters(struct remora_transport *tp, struct remora_counters *out);
/* out = a - b, field by field. */
REMORA_API void remora_counters_diff(const struct remora_counters *a,
				     const struct remora_counters *b, struct remora_counters *out);
REMORA_API uint64_t remora_counters_total(const struct remora_counters *c, enum remora_op op);

REMORA_API const char *remora_op_name(enum remora_op op);

/* ---- fault injection ------------------------------------------------------------------- */

/*
 * $REMORA_DIE_AT_VERB=N kills this process (SIGKILL) as it posts its Nth verb, before that verb
 * takes effect. $REMORA_DIE_AT=NAME[:K] kills it the Kth time (default 1st) it passes
 * remora_fault_point(NAME). Both are read once, at the first verb or point.
 */
REMORA_API void remora_fault_point(const char *name);

#ifdef __cplusplus
}
#endif
#endif
