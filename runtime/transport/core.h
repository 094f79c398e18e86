/* SPDX-License-Identifier: MIT */
/* Internal state of the transport core, shared by its source files only. */
#ifndef REMORA_TRANSPORT_CORE_H
#define REMORA_TRANSPORT_CORE_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <remora/backend.h>
#include <remora/transport.h>

#include "mutate/mutate.h"
#include "cost.h"

_Static_assert((int)REMORA_COST__NCLASS == (int)REMORA_COST_CLASSES &&
		       (int)REMORA_COST_ATOMIC == (int)REMORA_COST_CLASS_ATOMIC,
	       "public and internal verb classes agree");

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* At most this many backend parameters reach one backend (remora_transport_cfg.backend_params). */
#define RT_BACKEND_PARAMS_MAX 16

/* Counters are written by their channel's thread only and read by remora_transport_counters()
 * from any thread: relaxed atomic load+store compiles to a plain add and is race-free. */
#define RT_COUNT(field, v) \
	__atomic_store_n(&(field), __atomic_load_n(&(field), __ATOMIC_RELAXED) + (v), \
			 __ATOMIC_RELAXED)

struct rt_region {
	uint64_t off;
	uint64_t len;
	uint32_t key;
};

/* What the core knows of one memory node this process attached. */
struct rt_node {
	uint32_t attached;
	uint32_t nregions;
	uint64_t bytes;
	/*
	 * The verb path's first check (verbs.c, validate_fast): RT_NODE_FAST | regions[0].key
	 * while the node is attached and has a region, else 0; with regions[0] as [lo, hi).
	 * Written under fast_seq (odd while a writer is at it, rt_node_fast_set): a re-attach
	 * may change them while other threads post.
	 */
	uint64_t fast_seq;
	uint64_t fast_key;
	uint64_t fast_lo, fast_hi;
	struct rt_region regions[REMORA_MAX_REGIONS];
};
#define RT_NODE_FAST (UINT64_C(1) << 32)
/* Publishes a node's fast check (key 0: none); writers are rare and may race each other. */
void rt_node_fast_set(struct rt_node *n, uint64_t key, uint64_t lo, uint64_t hi);

/*
 * One server of the cost model, one cache line: busy_until (see cost.h) and charged, the
 * service time claimed on it so far (what utilization is computed from).
 */
struct rt_cost_server {
	uint64_t busy_until;
	uint64_t charged;
	uint64_t _pad[6];
};

/* The shared segment of the cost model: a server per (MN, class) and per CN's message NIC. */
struct rt_cost_seg {
	uint64_t magic;
	uint64_t version;
	uint64_t _pad[6];
	struct rt_cost_server busy[REMORA_MAX_MN][REMORA_COST__NCLASS];
	struct rt_cost_server msg[REMORA_MAX_CN];
};
#define RT_COST_MAGIC UINT64_C(0x74736f632d6d7272) /* "rrm-cost" */
#define RT_COST_VERSION 2
_Static_assert(sizeof(struct rt_cost_seg) ==
		       64 + 64 * (REMORA_MAX_MN * REMORA_COST__NCLASS + REMORA_MAX_CN),
	       "cost segment layout");

struct remora_transport {
	struct remora_backend_ops ops; /* merged over stubs: no NULL slot */
	void *priv;
	uint32_t ops_mask;  /* verbs allowed at post */
	unsigned pflags;    /* enum remora_post_flags for the backend */
	uint64_t mutations; /* runtime/mutate, layer MUT_TRANSPORT */
	bool timed_msg;     /* backend has msg_send_at/msg_recv_at (cost model for messages) */
	const struct rt_cost_profile *cost; /* NULL when profile is none; else &prof */
	struct rt_cost_profile prof; /* the named profile, its rates divided by mn_scale */
	const struct rt_cost_profile *cost_base; /* the named profile, from the table */
	unsigned mn_scale;                           /* >= 1 */
	uint64_t verb_timeout_ns; /* verb deadline (verb_timeout_ms); 0: none */
	struct rt_cost_seg *cost_seg;
	struct remora_caps caps;
	struct remora_backend_cfg bcfg;
	struct remora_kv bparams[RT_BACKEND_PARAMS_MAX]; /* bcfg.params: keys static, values owned */
	char cluster[64];
	char dir[PATH_MAX];
	struct rt_node nodes[REMORA_MAX_MN];
	uint32_t mn_down; /* rt_transport_mn_down (atomic) */

	/* message endpoints (peers.c) */
	bool msg_locator_op;  /* the backend's own msg_locator, not the stub */
	char test_locator[REMORA_MSG_LOCATOR_MAX]; /* rt_transport_test_msg_locator() */
	pthread_mutex_t peer_lock; /* msg_peer; held across the backend's msg_set_peer */
	char msg_peer[REMORA_MAX_CN][REMORA_MSG_LOCATOR_MAX]; /* as last set */

	pthread_mutex_t lock; /* guards: chans list, closed, errmsg */
	struct remora_chan *chans;
	struct remora_counters closed;
	char errmsg[256];
};

struct remora_pool {
	struct remora_transport *tp;
	void *priv;
	void *base;
	uint64_t bytes;
	uint16_t node;
	bool committed; /* false between a REMORA_POOL_DEFER_COMMIT open and remora_pool_commit */
};

/* Completions held back by the cost model until their visible time, one FIFO per MN. */
struct rt_pend {
	struct remora_cqe cqe;
	uint64_t visible;
	uint32_t next;
};

struct rt_costq {
	uint32_t free_head;
	uint32_t active; /* bit per MN with a non-empty FIFO */
	uint32_t head[REMORA_MAX_MN];
	uint32_t tail[REMORA_MAX_MN];
	uint64_t last_visible[REMORA_MAX_MN];
	struct rt_pend slots[];
};

#define RT_LOST_MAX 4

struct remora_chan {
	struct remora_transport *tp;
	void *priv;
	int (*post)(void *cpriv, const struct remora_wr *wrs, unsigned n, int32_t *status,
		    unsigned pflags);
	bool inline_cq;
	/* inline_cq, no cost model, not broken: what inline completion needs of the channel */
	bool direct;
	unsigned max_batch;
	uint32_t cq_cap;
	uint32_t outstanding;
	/* inline completion ring (cost model off) */
	uint32_t cq_mask;
	uint32_t cq_head;
	uint32_t cq_tail;
	struct remora_cqe *cq;
	int32_t *status;
	struct rt_costq *costq; /* cost model on */
	bool cost_exempt;       /* remora_chan_cost_exempt(): verbs visible at once, uncharged */
	/* The verb deadline (verbs.c): empty polls with verbs in flight, and since when (ns). */
	int broken;             /* 0, or the code every post gets once the deadline passed */
	uint32_t idle_polls;
	uint64_t stall_since;
	/* Fault injection $REMORA_LOSE_COMPLETION: completions held back, ended at the break. */
	uint32_t nlost;
	struct remora_cqe lost[RT_LOST_MAX];
	struct remora_chan *next, **pprev;
	struct remora_counters cnt;
};

int rt_error(struct remora_transport *tp, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Sets the thread's remora_last_error() message and returns code. */
int rt_last_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* fault.c */
int rt_fault_init(void);
extern uint64_t rt_die_at_verb;
uint64_t rt_fault_verbs(unsigned n);
extern uint64_t rt_lose_completion; /* 0: off; else the process's Nth completion is held */
bool rt_fault_lose(void);           /* counts one completion: true when it is the one */
/*
 * Reasons for the whole process to keep every batch off inline completion, as bits, so that
 * the verb path tests one word: fault injection needs the counted path, and tests can turn
 * inline completion off (rt_transport_inline_exec).
 */
enum { RT_SLOW_INLINE_OFF = 1, RT_SLOW_DIE_AT_VERB = 2, RT_SLOW_LOSE_COMPLETION = 4 };
extern uint32_t rt_exec_slow;
void rt_exec_slow_set(uint32_t bit, bool on);
__attribute__((noreturn)) void rt_fault_die(void);

/* cost segment (costseg.c) */
int rt_cost_attach(struct remora_transport *tp);
void rt_cost_detach(struct remora_transport *tp);
int rt_cost_unlink(const char *cluster, const char *dir);
/*
 * The name under which a cluster's shared segments (messages, cost) live in /dev/shm: the
 * cluster name, plus a hash of dir when one is given. Two clusters of the same name in
 * different directories are different clusters: they must not share segments.
 */
int rt_seg_key(const char *cluster, const char *dir, char *buf, size_t size);

/* peers.c: called by remora_transport_open once the backend is chosen */
void rt_peers_init(struct remora_transport *tp, const struct remora_backend_ops *backend);

/* verbs.c */
void rt_counters_add(struct remora_counters *dst, const struct remora_counters *src);

#endif
