/* SPDX-License-Identifier: MIT */
/*
 * LOTUS (lock disaggregation): locks live in compute-node lock tables (locktab.h), sharded
 * over compute nodes by the key's low 12 bits; a transaction takes every lock of a phase
 * before it READs anything (lock-first); MVCC over Motor's CVTs with one full record per
 * version. docs/lotus.md says what is built, the decisions and what is not.
 */
#ifndef REMORA_TXN_LOTUS_H
#define REMORA_TXN_LOTUS_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "locktab.h"
#include "vtcache.h"
#include "txn/proto/motor/motor.h"
#include "txn/protocol.h"
#include "txn/txn.h"

#define LOTUS_SHARDS 4096u
/* The shard map's owner while a shard is handed over (reshard.c): nobody serves it. */
#define LOTUS_NO_OWNER 0xffffu
/*
 * A cell between its first WRITE and T_commit carries LOTUS_INV_BIT | its writer's
 * transaction id instead of a timestamp (no timestamp reaches 2^63): readers see INVISIBLE,
 * recovery sees whose it is.
 */
#define LOTUS_INV_BIT (UINT64_C(1) << 63)
/* The codec field of a lotus log header: Motor's recovery, which shares the cvt codec, skips
 * these logs (they hold no cell images). */
#define LOTUS_LOG_CODEC (REMORA_CODEC_CVT | 0x4c00u)

/* One lock a coordinator holds on this compute node (the "lock state" of Alg. 1). */
struct lotus_hold {
	uint64_t h;
	uint16_t shard;
	int8_t slot;
	bool write;
};

/* The lock state of one requesting coordinator: its transaction and the locks it holds here.
 * Only the worker that serves this coordinator touches it (see lotus_msg.c). */
struct lotus_held {
	uint64_t txid;
	unsigned n, cap;
	struct lotus_hold *e;
};

/* Per database (db->proto_priv). */
/* A worker's transactions, for the latency the resharder publishes (written by that worker). */
struct lotus_lat {
	uint64_t sum_ns, n;
} __attribute__((aligned(64)));

struct lotus_rs;

struct lotus_db {
	enum motor_isolation iso;
	struct lotus_lt lt;
	unsigned ncn;                         /* compute nodes the shards spread over */
	uint16_t self;                        /* this compute node */
	/* The shard map (owner of each shard; LOTUS_NO_OWNER while handed over). Atomic: the
	 * resharder changes it while workers read it (lotus_owner). */
	uint16_t shard_cn[LOTUS_SHARDS];
	uint32_t held_n[LOTUS_SHARDS];        /* locks held here per shard (atomic) */
	uint32_t hits[LOTUS_SHARDS];          /* grants per shard since the resharder looked */
	struct lotus_lat lat[REMORA_RPC_MAX_WORKERS];
	struct lotus_rs *rs;                  /* the resharder (reshard.c); NULL: none */
	/* Per coordinator of this node (its index in the node): CLOCK_REALTIME at the begin of
	 * its running transaction, 0 when none runs; published by the resharder for a
	 * restarted node's rule (reshard.c). NULL when no resharder runs. */
	uint64_t *active;
	uint32_t per_cn;                      /* coordinators per compute node (the format's) */
	uint32_t per_worker;                  /* coordinators per worker (every node alike) */
	/* Per worker: the recovered dead nodes whose coordinators' holds it dropped already. */
	uint64_t dead_seen[REMORA_RPC_MAX_WORKERS];
	bool serving; /* atomic: this node grants locks (after a restart: once the old
		       * transactions that held locks here are over, reshard.c) */
	uint64_t slow_ns;                     /* fault injection: busy time added per txn */
	struct lotus_held **held;             /* per coordinator id (65536), made on first use */
	/* Per worker index: bit cn set once that node's worker of this index said DONE (its
	 * coordinators finished; lotus_msg.c, "draining"). Atomic: set by the DONE handler. */
	uint64_t peers_done[REMORA_RPC_MAX_WORKERS];
	bool done_keeps_holds; /* the lotus_done_keeps_holds mutation */
	bool keep_dead_holds;  /* the lotus_online_keeps_holds mutation */
	struct lotus_vt vt;    /* the VT cache (vtcache.h) */
	bool vt_no_drop;       /* the lotus_vt_no_drop mutation */
};

/* Per object (o->priv). */
struct lotus_obj {
	uint16_t owner;     /* compute node owning the key's shard */
	int8_t mode;        /* lock held: 0 none, 1 R, 2 W */
	uint64_t ts;        /* timestamp of the version read (0: loaded or absent) */
	uint32_t reuse;     /* cell the commit writes */
	uint32_t waits;     /* re-READs over INVISIBLE cells or torn images */
	uint64_t slot_word; /* insert: the index slot value */
	uint64_t cas_old;   /* insert: index slot CAS result */
	unsigned char *cell; /* commit: the CVT image carrying the new cell */
	int8_t keep;         /* the newest version's cell when locked (-1: none), never reclaimed */
	bool bkt_fresh;      /* insert: bkt was granted before the lookup READ its bucket */
	struct lotus_bkt *bkt; /* insert: the lock of the key's home index bucket, or NULL */
	uint8_t gc;          /* commit: cells reclaimed in the same WRITE (bit per cell) */
	bool vt_hit;        /* this fetch round took the image from the VT cache */
	bool img_locked;    /* o->img was read (or taken from the cache) under our lock */
};

/* The lock of an index bucket, asked like a key's through this stand-in object (lotus.c). */
struct lotus_bkt {
	struct txn_obj o;
	struct lotus_obj lo;
};

struct lotus_tx {
	uint64_t t_start, t_commit;
	uint64_t t_begin; /* CLOCK_MONOTONIC at begin, for the resharder (0: none runs) */
};

struct lotus_coord {
	unsigned char *logbuf;
	int stranded; /* a commit failed once its log may have landed: no more transactions */
};

/* Lock requests (lotus_msg.c). */
enum lotus_lock_op {
	LOTUS_OP_LOCK = 40,   /* RPC op code of a lock request */
	LOTUS_OP_UNLOCK = 41, /* ... of a release */
	LOTUS_OP_DONE = 42,   /* ... of "these coordinators finished" (payload: their ids) */
};

struct lotus_lock_req {
	uint64_t txid;
	uint64_t h;
	uint16_t coord;  /* requesting coordinator id */
	uint16_t shard;
	uint8_t write;
	uint8_t pad[3];
};

/* Lock state: the lock h (of shard `shard`) in mode write for coordinator coord's transaction
 * txid on this node (idempotent: a lock already held is granted again). 0, -EBUSY (conflict),
 * -ESTALE (the shard is not ours, or is being handed over), -ENOMEM. */
int lotus_hold(struct lotus_db *l, uint16_t coord, uint64_t txid, uint64_t h, uint16_t shard,
	       bool write);
/* Releases it (nothing when not held). */
void lotus_unhold(struct lotus_db *l, uint16_t coord, uint64_t txid, uint64_t h, bool write);
/* Coordinator coord finished for good: every hold it still has here goes, and any request of
 * it that arrives later is refused (a lock granted then would have no owner to release it). */
void lotus_finish(struct lotus_db *l, uint16_t coord);
/* The worker_drain hook: serves the peers until they are done too (lotus_msg.c). */
void lotus_worker_drain(struct remora_worker *w);

/* Whole-cluster recovery (recover.c), then Motor's for the logs and locks words it owns. */
int lotus_recover_cluster(const struct store_db *st, struct remora_chan *ch, uint32_t flags,
			  struct recovery_report *rep, char *err, size_t errlen);
/* Online recovery of dead compute nodes (their logs; recover.c). */
int lotus_recover_online(struct remora_db *db, const uint16_t *failed_cn, unsigned n);

/* The RPC handlers (lotus_msg.c). */
int lotus_rpc_init(struct remora_db *db, struct remora_rpc *rpc);
/*
 * Takes (or releases: lock false) the locks of objs[0..n-1] whose owner is cn, in one batched
 * request. 0, -EBUSY (a lock refused; the granted ones are marked held), or an error.
 */
int lotus_remote(struct remora_tx *tx, uint16_t cn, struct txn_obj *const *objs, unsigned n,
		 bool lock);

static inline struct lotus_obj *LO(const struct txn_obj *o)
{
	return o->priv;
}

static inline struct lotus_db *ldb_of(const struct remora_db *db)
{
	return db->proto_priv;
}

/* Coordinator c's index among its node's coordinators. */
static inline uint32_t lotus_in_cn(const struct lotus_db *l, const struct txn_coord *c)
{
	return c->log_slot % l->per_cn;
}

/* Clock c in nanoseconds (MONOTONIC for durations; REALTIME where nodes compare times). */
static inline uint64_t lotus_clock_ns(clockid_t c)
{
	struct timespec t;

	clock_gettime(c, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static inline void lotus_active_begin(struct lotus_db *l, const struct txn_coord *c)
{
	if (l->active)
		__atomic_store_n(&l->active[lotus_in_cn(l, c)], lotus_clock_ns(CLOCK_REALTIME),
				 __ATOMIC_SEQ_CST);
}

static inline void lotus_active_end(struct lotus_db *l, const struct txn_coord *c)
{
	if (l->active)
		__atomic_store_n(&l->active[lotus_in_cn(l, c)], 0, __ATOMIC_RELEASE);
}

/* Worker w drops the holds of the coordinators it serves of every dead compute node whose
 * online recovery is done (lotus_msg.c). */
void lotus_dead_drop(struct lotus_db *l, unsigned w);

/* The owner of shard s now (LOTUS_NO_OWNER while it is handed over). */
static inline uint16_t lotus_owner(const struct lotus_db *l, uint32_t s)
{
	return __atomic_load_n(&l->shard_cn[s % LOTUS_SHARDS], __ATOMIC_SEQ_CST);
}

#endif
