/* SPDX-License-Identifier: MIT */
/*
 * runtime/txn internals: the database handle, workers, coordinators, transactions and their
 * object sets, shared by the generic layer (db.c, worker.c, tx.c) and the protocol plug-ins.
 */
#ifndef REMORA_TXN_H
#define REMORA_TXN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <remora/params.h>
#include <remora/rpc.h>
#include <remora/sched.h>
#include <remora/transport.h>
#include <remora/tx.h>

#include "cluster/ts.h"
#include "mutate/mutate.h"
#include "store/store.h"
#include "transport/direct.h"

struct txn_proto_ops;
struct recovery_report;

#define TXN_ERRLEN 256

/* ---- identifiers (docs/engine.md, "Identifiers") ----------------------------------------- */

/* Coordinator id: unique in the cluster, never 0, 16 bits (Pandora's PILL owner field). */
static inline uint16_t txn_coord_id(uint16_t cn, uint32_t local)
{
	return (uint16_t)(cn * REMORA_STORE_COORD_SLOTS + 1 + local);
}

/* Transaction id = coordinator id << 48 | sequence: unique, and the version its writes leave. */
static inline uint64_t txn_make_id(uint16_t coord_id, uint64_t seq)
{
	return (uint64_t)coord_id << 48 | (seq & ((UINT64_C(1) << 48) - 1));
}

/* ---- address cache: (table, key) -> record offset, shared by the workers of a db -------- */

struct txn_cache {
	uint64_t *e;  /* 4-way sets; entry = tag << 40 | offset >> 3; 0 = empty */
	uint64_t sets_mask;
};

int txn_cache_init(struct txn_cache *c, uint64_t entries);
void txn_cache_fini(struct txn_cache *c);
uint64_t txn_cache_get(const struct txn_cache *c, uint64_t hash);   /* 0: miss */
/* Starts loading hash's set into the CPU cache: txn_cache_get then need not wait for DRAM. */
void txn_cache_prefetch(const struct txn_cache *c, uint64_t hash);
void txn_cache_put(struct txn_cache *c, uint64_t hash, uint64_t off);
void txn_cache_drop(struct txn_cache *c, uint64_t hash, uint64_t off);

/* ---- database ----------------------------------------------------------------------------- */

/* Transactions running on one worker (written by its thread only), alone on its line. */
struct txn_mnf_busy {
	uint32_t n;
} __attribute__((aligned(64)));

struct remora_db {
	struct store_db st;
	const struct txn_proto_ops *proto; /* merged over stubs: no NULL slot */
	void *proto_priv;
	uint16_t cn_id;
	uint16_t coords_per_worker;
	uint32_t workers;
	uint64_t mutations;       /* runtime/mutate, layer MUT_TXN */
	uint64_t proto_mutations; /* ... layer MUT_PROTO (read both through txn_db_mut) */
	struct remora_rpc *rpc; /* protocols with REMORA_PROTO_NEEDS_MSG; else NULL */
	bool route; /* remora_db_cfg.route: the routing service is on (route.c) */
	/* the workers by index, for the routing handlers (atomic; NULL: none) */
	struct remora_worker *route_w[REMORA_RPC_MAX_WORKERS];
	bool wants_msg; /* set by db_init: this open sends messages although the protocol's
			 * flags do not say so (oocc's lease manager over several compute nodes) */
	struct txn_cache cache;
	struct ts_service ts;
	uint64_t failed_ids[65536 / 64]; /* PILL: coordinators declared failed (atomic bits) */
	/* ... and the incarnation each failed with, + 1 (0: any): a recycled id's next owner
	 * has another incarnation, so a stale entry never matches its lock words */
	uint32_t failed_inc[65536];
	uint32_t id_block; /* PILL: the block of coordinator ids taken at open, + 1 (0: by cn) */
	uint64_t loaded;                 /* records loaded by this process's workers */
	char errmsg[TXN_ERRLEN];
	char isolation[8]; /* remora_db_cfg.isolation ("": not given); MVCC protocols parse it */
	char failed_locks[8]; /* remora_db_cfg.failed_locks ("": not given); pandora parses it */
	/* REMORA_DIE_AT names txn.commit_mid: commit WRITEs go in two doorbells around it. */
	bool split_commit;
	/* Lock words go back by CAS from the holder's word, not by a WRITE of 0 (txb_unlock). */
	bool unlock_cas;
	bool stranded; /* a coordinator stopped with locks and log left to recovery (atomic) */
	int64_t locks_unreleased; /* sum of the destroyed workers' lock balances (atomic) */
	uint64_t seq_base;               /* incarnation << 32: first sequence of every coordinator */
	struct recovery_report *online_rep; /* recover_online adds its counts here, or NULL */
	/* memory-node failover (failover.c): transactions running per worker, the barrier's
	 * runner */
	struct txn_mnf_busy *mnf_busy;
	bool mnf_leader;
	bool mnf_undecided; /* a commit cut by a dead node stayed undecided: no failover (atomic) */
	int mnf_failed;     /* the barrier's error, kept: every coordinator stops (atomic) */
};

/* Whether mutation m is switched on for db (the engine's or a protocol's switch). */
static inline bool txn_db_mut(const struct remora_db *db, enum mut_id m)
{
	return mut_on(mut_layer_of(m) == MUT_PROTO ? db->proto_mutations : db->mutations, m);
}

/* Routing (route.c, <remora/route.h>): the RPC ops, per-worker state, handlers. */
enum {
	TXN_ROUTE_OP_REQUEST = 30,
	TXN_ROUTE_OP_ANSWER = 31,
};
int txn_route_worker_init(struct remora_worker *w);
void txn_route_worker_fini(struct remora_worker *w);
int txn_route_rpc_init(struct remora_db *db, struct remora_rpc *rpc);

/*
 * Memory-node failover (failover.c). txn_mnf_enter, at every begin: waits while the placement
 * lags the transport's dead nodes (the failover barrier), then counts the transaction as
 * running until txn_mnf_leave. 0 or the barrier's error (db->errmsg). txn_mnf_ack writes this
 * compute node's ack word on every live node: open with the dead mask it runs on, or closed.
 */
int txn_mnf_enter(struct remora_worker *w);
void txn_mnf_leave(struct remora_worker *w);
/* The per-worker counts (db->workers of them): 0 or -ENOMEM. */
int txn_mnf_init(struct remora_db *db);
int txn_mnf_ack(struct remora_db *db, struct remora_chan *ch, uint32_t dead, bool open);
/* When this process last took a new placement (CLOCK_REALTIME, s; 0: never). */
double txn_mnf_resumed_s(void);
/*
 * The compute nodes the membership view declares dead (bit i: node i), refreshed by the
 * watchdog: the barrier does not wait for their acks (a dead node's lease lapsed, so it runs
 * nothing; its fence and recovery also clear its ack word).
 */
void txn_mnf_cn_gone(uint64_t dead);
/* That mask, as the watchdog last set it (0: no watchdog in this process). */
uint64_t txn_cn_gone(void);
/* The dead compute nodes whose online recovery is done (by this node or another), set by the
 * watchdog after each pass; a protocol whose survivors hold state for a dead node's
 * coordinators (LOTUS's lock states) drops it once the bit is set. */
void txn_cn_recovered_set(uint64_t mask);
uint64_t txn_cn_recovered(void);

/* PILL failed-ids bitset (internal API for the recovery module and tests). */
static inline bool txn_coord_failed(const struct remora_db *db, uint16_t id)
{
	return (__atomic_load_n(&db->failed_ids[id >> 6], __ATOMIC_ACQUIRE) >> (id & 63)) & 1;
}
void txn_set_failed(struct remora_db *db, uint16_t coord_id, bool failed);

/* Marks coord_id failed in its incarnation inc (bits 63:48 of its lock words). */
void txn_set_failed_inc(struct remora_db *db, uint16_t coord_id, uint16_t inc);

/* Whether lock word w names a coordinator this db knows failed, in that incarnation. */
static inline bool txn_lock_failed(const struct remora_db *db, uint64_t w)
{
	uint16_t id = (uint16_t)w;
	uint32_t inc;

	if (!txn_coord_failed(db, id))
		return false;
	inc = __atomic_load_n(&db->failed_inc[id], __ATOMIC_ACQUIRE);
	return inc == 0 || inc - 1u == (uint32_t)(w >> 48);
}

/*
 * Ids of compute nodes declared dead and fenced, not recovered yet (process-wide: the lease
 * watchdog marks them for every db of the process). A lock word is suspected when its id was
 * marked for the incarnation in its bits 63:48 (inc_any: whatever its incarnation).
 */
#define TXN_INC_ANY 0x10000u
void txn_suspect_ids(uint16_t first, uint32_t n, uint32_t inc);
bool txn_lock_suspected(uint64_t w);

/* The id of coordinator local of this db: from its block, or by compute node. */
uint16_t txn_db_coord_id(const struct remora_db *db, uint32_t local);
/* A protocol's parameter id as this process was given it (its environment, else the default):
 * SIZE in bytes, BOOL 0/1, INT. 0, or a code with db->errmsg set. */
int txn_db_param(struct remora_db *db, enum remora_param_id id, uint64_t *out);

/* ---- object set --------------------------------------------------------------------------- */

enum txn_obj_flags {
	OBJ_WANT_RW = 1u << 0,   /* staged or fetched for writing */
	OBJ_RESOLVED = 1u << 1,  /* index lookup done: HAVE_REC, or absent with slot known */
	OBJ_HAVE_REC = 1u << 2,  /* off names the key's record (verified after its READ) */
	OBJ_FETCHED = 1u << 3,   /* img holds the record as read */
	OBJ_FOUND = 1u << 4,     /* the record was present (VALID) when read */
	OBJ_LOCKED = 1u << 5,    /* we hold its lock */
	OBJ_CAS_SENT = 1u << 6,  /* a lock CAS was issued (complicit_abort mutation) */
	OBJ_DIRTY = 1u << 7,     /* commit writes a new image */
	OBJ_INSERT = 1u << 8,    /* ... as an insert */
	OBJ_DELETE = 1u << 9,    /* ... as a delete */
	OBJ_NEW_REC = 1u << 10,  /* this tx created the record (a placeholder) */
	OBJ_COPY = 1u << 11,     /* staged: copy value / found into the user's buffers at fetch */
	OBJ_CACHED = 1u << 12,   /* off came from the address cache (not yet verified) */
	OBJ_LOGGED = 1u << 13,   /* included in a log record */
	OBJ_RW_DONE = 1u << 14,  /* fetched in RW mode (locked, lock deferred, or absent) */
	OBJ_SCANNING = 1u << 15, /* lookup under way: bucket READs */
	OBJ_INSERTING = 1u << 16, /* fetched for an insert (lotus locks the index bucket too) */
};

#define TXN_MAX_CAND 8u

struct txn_obj {
	uint32_t table;
	uint32_t flags;       /* enum txn_obj_flags */
	uint64_t key;
	uint64_t hash;
	uint64_t bucket;      /* lookup: bucket the scan is at */
	void *priv;           /* the protocol's per-object state (obj_priv_size bytes), or NULL */
	uint64_t off;         /* record offset (same on every replica) */
	uint64_t slot_off;    /* absent key: offset of the first empty index slot seen */
	uint16_t primary;
	uint16_t fp;
	uint32_t probes;      /* lookup: buckets scanned */
	uint32_t ncand;       /* lookup: fingerprint matches before the first empty slot */
	uint64_t cand[TXN_MAX_CAND];
	struct store_bucket *bkt; /* lookup: READ target */
	const unsigned char *value; /* the value inside img */
	unsigned char *img;   /* record image as read (stride bytes): the undo image */
	unsigned char *newval; /* staged value (value_size bytes) */
	void *dest;           /* staged user buffer */
	bool *dest_found;
	const struct store_table *t;
	uint64_t rd_cells;    /* cells read (masks; whole-value calls: every cell) */
	uint64_t wr_cells;    /* cells fetched for writing (cell-level protocols lock these) */
	uint64_t dirty_cells; /* cells written */
	uint64_t lock_word;   /* the value our lock CAS put in its lock word (0: none known) */
};

/* Where an object's private state starts, from the object (16-byte aligned). */
#define TXN_OBJ_PRIV_AT ((sizeof(struct txn_obj) + 15) & ~(size_t)15)

/* ---- arena: per-coordinator memory, reset per transaction, never moved ------------------- */

struct txn_arena_blk;
struct txn_arena {
	struct txn_arena_blk *head, *cur;
};
void *txn_arena_alloc(struct txn_arena *a, size_t bytes);
void txn_arena_reset(struct txn_arena *a);
void txn_arena_fini(struct txn_arena *a);

/* ---- coordinator, transaction, worker ----------------------------------------------------- */

struct txn_coord;

/* Per-coordinator arrays reused by every call (never nested with themselves). */
enum txn_scratch {
	TXN_SCRATCH_FETCH, /* remora_tx_fetch: the staged objects */
	TXN_SCRATCH_EXEC,  /* objects handed to the protocol's fetch */
	TXN_SCRATCH_STEPS, /* protocol fetch: per-object step */
	TXN_SCRATCH_CAND,  /* lookup: candidate images */
	TXN_SCRATCH__COUNT
};

struct remora_tx {
	struct txn_coord *c;
	bool active;
	unsigned flags;      /* enum remora_tx_flags */
	int poison;          /* 0, or the code that poisoned the handle */
	uint64_t id;
	uint64_t seq;
	void *priv;          /* the protocol's per-transaction state (tx_priv_size bytes), or NULL */
	struct txn_obj **objs;
	unsigned nobj, objcap;
};

struct txn_coord {
	struct remora_worker *w;
	uint16_t id;         /* cluster-unique coordinator id */
	uint32_t log_slot;   /* index of its log slot */
	uint64_t seq;
	struct store_chunk chunk[REMORA_MAX_TABLES];
	uint64_t spare[REMORA_MAX_TABLES]; /* record slot written but never published, + 1 */
	struct remora_tx tx;
	struct txn_arena arena;
	struct remora_wr *wrs;
	unsigned wcap;
	void *priv;          /* the protocol's per-coordinator state (coord_priv_size bytes), or NULL */
	void *scratch[TXN_SCRATCH__COUNT];
	size_t scratch_cap[TXN_SCRATCH__COUNT];
	struct remora_waiter async; /* fire-and-forget verbs whose sources live in the arena */
	/* Fire-and-forget unlocks: nobody waits for them, but a failed one (its first error,
	 * kept) stops the coordinator at its next begin (txn_async_settle). */
	struct remora_waiter unlocks;
	/*
	 * The engine's own count of lock words (FORD's and Pandora's) this coordinator's
	 * transactions won, gave back (an unlock posted) and left to recovery (a stranded
	 * commit). At worker destroy, won - given - left goes into db->locks_unreleased.
	 */
	uint64_t locks_won, locks_given, locks_left;
};

struct remora_worker {
	struct remora_db *db;
	unsigned index;
	struct remora_chan *ch;
	struct remora_sched *sched;
	struct remora_rpc_ep *rpc; /* this worker's endpoint of db->rpc, or NULL */
	struct txn_route *route;   /* routed transactions queued here (route.c), or NULL */
	struct txn_coord *coords;
	unsigned ncoords;
	struct store_loader *loader;
	enum remora_abort_reason last_abort;
	uint64_t last_lock; /* the lock word of the last abort on a live lock (0: none yet) */
	char errmsg[TXN_ERRLEN];
};

static inline struct remora_db *txn_db(const struct remora_tx *tx)
{
	return tx->c->w->db;
}

/* The RPC endpoint of tx's worker (protocols with REMORA_PROTO_NEEDS_MSG), else NULL. */
static inline struct remora_rpc_ep *txn_rpc_ep(const struct remora_tx *tx)
{
	return tx->c->w->rpc;
}

static inline struct remora_chan *txn_chan(const struct remora_tx *tx)
{
	return tx->c->w->ch;
}

/* Verb scratch of the coordinator, grown to n entries (never shrinks). NULL: out of memory. */
struct remora_wr *txn_wrs(struct txn_coord *c, unsigned n);
/*
 * Posts verbs without waiting for them, though their local buffers live in the arena: the
 * next transaction of the coordinator first waits for them (txn_async_wait), so the buffers
 * stay valid until the NIC has read them. Returns 0 or an error (then nothing is pending).
 * txn_async_wait returns how they ended: 0, or the first failed verb's error.
 */
int txn_post_tracked(struct txn_coord *c, struct remora_wr *wrs, unsigned n);
/* txn_post_tracked for unlocks: a refused post is kept and stops the coordinator at its next
 * begin (txn_async_settle), with one line on tx. */
int txn_post_unlocks(struct remora_tx *tx, struct remora_wr *wrs, unsigned n);
/* Keeps rc, the first failure of an unlock of c (not an abort, nor a node that failed over):
 * it stops the coordinator at its next begin. */
void txn_unlock_failed(struct txn_coord *c, int rc);
/*
 * On rdma a verb in flight to a memory node that died fails with -EIO before this process's
 * watchdog has taken the node out (at its next heartbeat). For -EIO with replicas 2 or more,
 * waits (yielding) up to 2 s for a node to be taken out (any: the failure does not say which
 * node it came from, and failed_over takes any too): then the failure is the failover's,
 * -REMORA_ENODE. Otherwise rc as it was.
 */
int txn_mnf_await(const struct remora_db *db, int rc);
int txn_async_wait(struct txn_coord *c);
/*
 * txn_async_wait, and a failed verb among those and c's unlocks (all of them landed first when
 * drain) strands the compute node (worker.c says why); 0 or the failure.
 */
int txn_async_settle(struct txn_coord *c, bool drain);
/* Scratch array `which` of at least bytes bytes (contents not kept). NULL: out of memory. */
void *txn_scratch(struct txn_coord *c, enum txn_scratch which, size_t bytes);

/* Marks tx poisoned with rc (an abort or a failure) and records an abort's reason. */
int txn_poison(struct remora_tx *tx, int rc, enum remora_abort_reason why);
/*
 * The record slot an insert of o writes: the coordinator's spare (written, never published),
 * else a new one from its chunk of the table. 0 with *idx, or the error after txn_errf.
 */
int txn_insert_slot(struct remora_tx *tx, const struct txn_obj *o, uint64_t *idx);
/* Builds a new record's images: bimg for the backups, o->img for the primary (o->off set). */
typedef void (*txn_insert_fill_fn)(struct remora_tx *tx, struct txn_obj *o, unsigned char *bimg);
/* A new record's images, absent: bimg (the backups') free, o->img (the primary's) with lock. */
void txn_insert_images(struct remora_tx *tx, struct txn_obj *o, unsigned char *bimg,
		       uint64_t lock);
/*
 * Every protocol's insert of a record for an absent key: takes a record slot
 * (txn_insert_slot), lets fill build the images, WRITEs the primary and CASes the key's first
 * empty index slot to *slot_word (the record's slot word) in one doorbell (same node: the
 * record is in place before the slot points at it). Won (*won, also when the batch failed
 * but the CAS completed): o is resolved with won_flags too (noted before anything else can
 * fail, so a failure releases what they say, e.g. OBJ_LOCKED), and the backups follow fire
 * and forget; lost: the slot is kept as the coordinator's spare. 0, or an error.
 * cas_old NULL: the caller holds the lock of the slot's bucket (LOTUS's index-bucket lock),
 * and the slot is published by a WRITE, no atomic; won unless the batch failed.
 */
int txn_insert_claim(struct remora_tx *tx, struct txn_obj *o, txn_insert_fill_fn fill,
		     uint32_t won_flags, uint64_t *slot_word, uint64_t *cas_old, bool *won);
/* What a protocol gives txn_insert. */
struct txn_insert_ops {
	unsigned attempts; /* claims lost to other inserters before tx aborts (LOCKED) */
	/* Claims a new record for o (usually through txn_insert_claim): 0 with *won, or an error.
	 */
	int (*claim)(struct remora_tx *tx, struct txn_obj *o, bool *won);
	/* A won claim: the protocol's state of its empty record (o->value, versions, flags). */
	void (*fresh)(struct remora_tx *tx, struct txn_obj *o);
	/* Gives back everything tx holds (before it is poisoned). */
	void (*release)(struct remora_tx *tx);
};
/*
 * Every protocol's insert op, for o fetched for writing: reuses the record the key has, else
 * claims a new one; a lost race looks the key up again. 0 (o staged: OBJ_INSERT, OBJ_DIRTY),
 * -REMORA_EEXIST (another transaction inserted the key), or tx released and poisoned: an
 * abort (every attempt lost) or a failure.
 */
int txn_insert(struct remora_tx *tx, struct txn_obj *o, const void *value,
	       const struct txn_insert_ops *ops);
/* o's new-value buffer, taken from the arena once: 0 or -ENOMEM. */
int txn_obj_newval(struct remora_tx *tx, struct txn_obj *o);
/* A write of value staged on o (OBJ_DIRTY): 0 or -ENOMEM; the protocol fails tx on error. */
int txn_stage_write(struct remora_tx *tx, struct txn_obj *o, const void *value);
/* A delete staged on o: the tombstone keeps the old value (OBJ_DIRTY | OBJ_DELETE). */
int txn_stage_remove(struct remora_tx *tx, struct txn_obj *o);
int txn_errf(struct remora_tx *tx, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Generic lookups: resolves every object of objs that is not resolved yet (bucket READs). */
int txn_resolve(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n);
/* A fetched record turned out to hold another key: forget off and look the key up again. */
void txn_unresolve(struct remora_tx *tx, struct txn_obj *o);
/* Forgets everything known about o's record and looks it up and fetches it for writing again
 * (after an insert lost the race for its index slot). */
int txn_refetch_rw(struct remora_tx *tx, struct txn_obj *o);

/* ---- fetch rounds and log records (rounds.c): the OCC core's and OOCC's, shared ---------- */

struct codec_rec;

/* What one fetch round does for an object. */
enum txn_step {
	TXN_STEP_NONE,	     /* nothing: fetched already, or no record */
	TXN_STEP_READ,	     /* READ the record */
	TXN_STEP_LOCK_READ,  /* CAS the lock, READ the record after it (same node: ordered) */
	TXN_STEP_RLOCK_READ, /* CAS a shared (read) lock, then READ (OOCC's 2PL variant) */
};
/* A protocol's settle of one fetched object: 0 done, -EAGAIN fetch it again, 1 looked up
 * again, or an abort or failure (tx released and poisoned). */
typedef int (*txn_settle_fn)(struct remora_tx *tx, struct txn_obj *o, enum txn_step step);
/*
 * Settles a fetch round, object by object (those with a step): 0 (*again set when one is to be
 * looked up again), or the first abort or failure, at once.
 */
int txn_settle_round(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n,
		     const enum txn_step *steps, txn_settle_fn settle, bool *again);
/*
 * Decodes the image fetched for o into *r: 0 (o's record), -EAGAIN (torn), 1 (another key's
 * record now: a lock on it goes back at once and o is looked up again), or the codec's error
 * with its line. The protocol checks versions and locks, then takes it (txn_fetch_take).
 */
int txn_fetch_decode(struct remora_tx *tx, struct txn_obj *o, struct codec_rec *r);
/* o's value and found/fetched flags from its decoded record r. */
void txn_fetch_take(struct txn_obj *o, const struct codec_rec *r);
/* The log op of o's staged change (enum store_log_op). */
uint8_t txn_log_op(const struct txn_obj *o);
/*
 * Appends o's log entry (old_version -> tx->id) and its image img (stride bytes) at *at of the
 * log record in buf; -REMORA_EFULL with its line when it would pass cap.
 */
int txn_log_append(struct remora_tx *tx, unsigned char *buf, uint32_t *at, uint32_t cap,
		   const struct txn_obj *o, uint64_t old_version, const unsigned char *img);
/* Writes the valid header of the log record in buf: n entries, len bytes, tx's lock word. */
void txn_log_seal(struct remora_tx *tx, unsigned char *buf, uint32_t len, uint16_t n,
		  uint64_t lock);

/* Test hook: called at each named protocol point (internal; tests set it). */
extern void (*txn_test_hook)(struct remora_tx *tx, const char *point);
void txn_point_slow(struct remora_tx *tx, const char *point);
/* A fault point (remora_fault_point) and test hook; inline while neither is armed. */
static inline void txn_point(struct remora_tx *tx, const char *point)
{
	if (__atomic_load_n(&rt_fault_points_live, __ATOMIC_RELAXED) || txn_test_hook)
		txn_point_slow(tx, point);
}

#endif
