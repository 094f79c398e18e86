/* SPDX-License-Identifier: MIT */
/*
 * OOCC (one-round optimistic concurrency control): read-only transactions that commit after
 * one round of READs while a lease holds; writers take intention locks, upgrade them by WRITE,
 * write a redo log, wait out the write lease and commit each record with one WRITE that also
 * unlocks it. docs/oocc.md has the protocol, its decisions and the ablation variants.
 */
#ifndef REMORA_TXN_OOCC_H
#define REMORA_TXN_OOCC_H

#include <stdbool.h>
#include <stdint.h>

#include "txn/protocol.h"
#include "txn/txn.h"

/* Lock word: state in bits 63:62, owner (sequence << 16 | coordinator id) below. */
#define OOCC_FREE 0ull
#define OOCC_INTENT (1ull << 62)
#define OOCC_LOCKED (2ull << 62)
#define OOCC_STATE(w) ((w) & (3ull << 62))

/* Which of the paper's steps are on (Fig. 11 ablation); each plug-in fixes one set. */
struct oocc_variant {
	const char *name;
	bool lease;         /* readers skip validation inside rv; writers wait ww */
	bool write_unlock;  /* redo log; the commit WRITE clears the lock (else undo-style: log
			     * round, commit WRITE, then a separate unlock WRITE) */
	bool delayed_lock;  /* CAS takes an intention lock; the upgrade WRITE locks in round 2 */
	bool unsafe;        /* upper bound: no validation, no lease wait (NOT serializable) */
	bool twopl;         /* the 2PL baseline: CAS read locks (shared count), no validation */
};

/* The lease word of this compute node: rv_ns << 32 | ww_ns (docs/oocc.md, "Leases"). */
static inline uint64_t oocc_lease_pack(uint32_t rv, uint32_t ww)
{
	return (uint64_t)rv << 32 | ww;
}

/* Read-only statistics the lease manager reads (relaxed atomics). */
#define OOCC_HIST 48u /* log2 buckets of the read phase's elapsed ns */
struct oocc_stats {
	uint64_t ro;        /* read-only commits and aborts */
	uint64_t ro_omit;   /* ... that skipped validation */
	uint64_t hist[OOCC_HIST];
};

struct oocc_db {
	struct oocc_variant v;
	uint64_t lease_word;  /* atomic; the manager's Prepare / Commit write it */
	uint64_t lease_ns;    /* L of the last commit */
	uint32_t delta_ppm;
	struct oocc_stats stats;
	struct oocc_stats seen; /* the manager's copy at its last tick */
	bool manager;          /* the policy runs from commit (REMORA_OOCC manager=1) */
	uint16_t ncn;          /* compute nodes the database is for; > 1 with manager: compute
				* node 0 runs the policy over every node's word (manager.c) */
	bool synced;           /* atomic; the word is the manager's (always, without cluster) */
	uint64_t msg_seq;      /* cluster: node 0, the last round's number; others, the latest
				* round number taken (older Prepares and Commits are dropped) */
	bool late_upgrade;     /* upgrade ~1 RTT before the write lease ends (default) */
	uint64_t next_tick_ns;
	uint32_t tick_lock;
};

/* rv and ww of base lease L: L -/+ delta, delta = L * ppm / 1e6 (at least 1 ns when ppm). */
void oocc_lease_derive(uint64_t lease_ns, uint32_t delta_ppm, uint32_t *rv, uint32_t *ww);
/*
 * The lease manager's adjustment to base lease L (paper section VII-A): Prepare writes
 * rv = min(old, new), ww = max(old, new); waits the old ww (plus delta) so that every lease
 * taken under the old values has run out; Commit writes the new pair. Blocks ~old ww.
 */
void oocc_lease_set(struct remora_db *db, uint64_t lease_ns);
/*
 * The steps of oocc_lease_set on this node's word. Prepare returns the word it replaced;
 * Commit also marks the node synced (a round of the manager reached it).
 */
uint64_t oocc_lease_prepare(struct oocc_db *d, uint32_t rv, uint32_t ww);
void oocc_lease_commit(struct oocc_db *d, uint32_t rv, uint32_t ww);
/* Waits until a lease of old_ww (plus 0.1%) taken before this call has run out; yields. */
void oocc_lease_wait_out(uint32_t old_ww);
#define OOCC_TICK_NS 100000000u /* the manager's policy step: every 100 ms */
#define OOCC_SYNC_WAIT_NS 1000000000u /* a writer of an unsynced node waits this for a round */
/* The new L from the statistics now against d->seen (which becomes now). */
uint64_t oocc_lease_policy(struct oocc_db *d, const struct oocc_stats *now);
void oocc_stats_snapshot(const struct oocc_stats *live, struct oocc_stats *out);
/*
 * One policy step: from the statistics since the last tick, the lease that would have let 80%
 * of read-only transactions skip validation (p80 of their read phase, plus 25%); grows the
 * lease when fewer than 80% skipped, shrinks it when it is over twice that. Returns the new L
 * (or the old one).
 */
uint64_t oocc_lease_tick(struct remora_db *db);
/*
 * The manager over several compute nodes (manager.c), run by compute node 0 through its
 * worker's endpoint ep: statistics of every node by message, the policy over their sum, and
 * a change as Prepare on every node, the wait of the largest old ww, Commit on every node.
 * A node that does not answer skips the tick (no change; a Prepare already applied stays,
 * which is safe: it is stricter than both the old and the new pair). 0 or its error.
 */
int oocc_cluster_tick(struct remora_db *db, struct remora_rpc_ep *ep);
/* The lease manager runs over several compute nodes (else: in the process, or not at all). */
static inline bool oocc_cluster(const struct oocc_db *d)
{
	return d->manager && d->ncn > 1;
}
/* A node's answer to OOCC_OP_STATS. */
struct oocc_report {
	struct oocc_stats s;
	uint64_t word;   /* its lease word now */
	uint64_t synced; /* 1: a Commit of the manager reached this db since it opened */
};
/* Registers the manager's messages (stats, Prepare, Commit) on every compute node. */
int oocc_rpc_init(struct remora_db *db, struct remora_rpc *rpc);
enum {
	OOCC_OP_STATS = 50,   /* RPC op: this node's statistics and word (struct oocc_report) */
	OOCC_OP_PREPARE = 51, /* ... Prepare a pair (rv, ww); replies the word it replaced */
	OOCC_OP_COMMIT = 52,  /* ... Commit a pair */
};
uint64_t oocc_now_ns(void);

/* Recovery (recover.c): redo logs after a whole-cluster crash. */
int oocc_recover_cluster(const struct store_db *st, struct remora_chan *ch, uint32_t flags,
			 struct recovery_report *rep, char *err, size_t errlen);

int oocc_db_init(struct remora_db *db, const struct oocc_variant *v);
void oocc_db_fini(struct remora_db *db);
int oocc_coord_init(struct txn_coord *c);
void oocc_coord_fini(struct txn_coord *c);
int oocc_begin(struct remora_tx *tx);
int oocc_fetch(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n);
int oocc_write(struct remora_tx *tx, struct txn_obj *o, const void *value);
int oocc_insert(struct remora_tx *tx, struct txn_obj *o, const void *value);
int oocc_remove(struct remora_tx *tx, struct txn_obj *o);
int oocc_commit(struct remora_tx *tx);
void oocc_abort(struct remora_tx *tx);

struct oocc_obj {
	uint64_t version;   /* version as fetched */
	uint64_t cas_old;   /* intention-lock CAS result */
	uint64_t slot_word; /* insert: the index slot value */
	uint64_t check[2];  /* validation READ target: {version, lock} (the record's tail) */
	uint32_t retries;   /* torn READs in a row */
	bool intent_seen;   /* read while another transaction held its intention lock */
	bool rlocked;       /* twopl: we hold one of its read locks */
	uint64_t rl_expect; /* twopl: reader count the next read-lock CAS expects */
	uint64_t faa_old;   /* twopl: result of the read-unlock FAA */
};

struct oocc_tx {
	uint64_t intent, locked; /* our lock words */
	uint64_t t_start;        /* issue of the first execution verb (0: none yet) */
	uint64_t t_lock_done;    /* arrival of the last intention-CAS ack */
	uint32_t rv, ww;         /* lease at begin; rv: min with the one at t_start, ww: max
				  * with the one after locking */
	bool round2_acked;       /* every upgrade and log WRITE of round 2 acknowledged */
	uint32_t log_nodes;      /* bit m: the redo log went to node m (may have landed) */
};

struct oocc_coord {
	unsigned char *logbuf;
	int stranded; /* a commit WRITE failed: no more transactions (its error) */
};

#define OOCC_PROTO_OPS(proto_name, proto_db_init)                                                  \
	{                                                                                          \
		.size = sizeof(struct txn_proto_ops),                                           \
		.name = (proto_name),                                                              \
		.codec = REMORA_CODEC_FOOTER,                                                      \
		.flags = 0,                                                                        \
		.db_init = (proto_db_init),                                                        \
		.db_fini = oocc_db_fini,                                                           \
		.begin = oocc_begin,                                                               \
		.fetch = oocc_fetch,                                                               \
		.write = oocc_write,                                                               \
		.insert = oocc_insert,                                                             \
		.remove = oocc_remove,                                                             \
		.commit = oocc_commit,                                                             \
		.abort = oocc_abort,                                                               \
		.tx_priv_size = sizeof(struct oocc_tx),                                            \
		.obj_priv_size = sizeof(struct oocc_obj),                                          \
		.coord_priv_size = sizeof(struct oocc_coord),                                      \
		.coord_init = oocc_coord_init,                                                     \
		.coord_fini = oocc_coord_fini,                                                     \
		.recover = oocc_recover_cluster,                                                   \
		.rpc_init = oocc_rpc_init,                                                         \
	}

#endif
