/* SPDX-License-Identifier: MIT */
/*
 * runtime/recovery: bringing a database back after a whole-cluster crash (every compute and
 * memory node died, e.g. kill -9 or a power failure on pmem), and checking a pool a memory
 * node reopens. See docs/recovery.md.
 *
 * recovery_run(), once every memory node is up again and attached to tp, and before
 * any compute node runs a transaction:
 *   1. reads every coordinator's log slot on every memory node (one large READ per chunk);
 *   2. decides each valid log (Pandora section 3.3, versions only -- lock words are not
 *      persistent, so after a power failure they cannot be trusted):
 *        finished   a replica carries a version other than the logged old/new one, or
 *                   another log read this transaction's version: it released its locks
 *                   long ago -- nothing to do
 *        forward    every replica of every logged record carries the new version and
 *                   decodes: the commit may have been acknowledged -- keep it
 *        back       otherwise: the commit never completed, so it was never acknowledged --
 *                   write the undo image over every replica that is not the old one
 *   3. invalidates every log (zeroes its header, durably);
 *   4. releases every lock word (no transaction is live after a whole-cluster crash: locks
 *      without a log, Pandora's NotLogged, are simply released), and counts records that
 *      fail their checksum.
 * Every write is durable before the next step starts. Running it again (also after it
 * crashed halfway) ends in the same state: it is idempotent.
 */
#ifndef REMORA_RECOVERY_H
#define REMORA_RECOVERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <remora/transport.h>

#include "mutate/mutate.h"

enum recovery_flags {
	REMORA_RECOVERY_CHECK = 1u << 0, /* write nothing: count what a run would do */
};

struct recovery_cfg {
	uint32_t size;  /* sizeof(struct recovery_cfg) */
	uint32_t flags; /* enum recovery_flags */
	uint16_t n_mn;  /* memory nodes 0 .. n_mn-1, all attached to the transport */
};

struct recovery_report {
	uint64_t log_slots;        /* log slots read (all nodes) */
	uint64_t log_copies;       /* slots holding a valid log record */
	uint64_t logs;             /* distinct transactions among them */
	uint64_t logs_bad;         /* valid checksum, but naming records that do not exist */
	uint64_t finished;         /* logs of transactions that had finished */
	uint64_t forward;          /* rolled forward */
	uint64_t back;             /* rolled back */
	uint64_t images_restored;  /* undo images written (one per replica) */
	uint64_t logs_invalidated; /* log headers zeroed */
	uint64_t records;          /* record slots scanned */
	uint64_t locks;            /* lock words found held */
	uint64_t locks_released;
	uint64_t torn;             /* records an index slot points to, failing their checksum */
	uint64_t ns_logs, ns_locks, ns_total; /* wall time of steps 1-3, step 4, all */
	uint64_t torn_unpublished; /* the same, in record slots no index slot points to: harmless */
	uint64_t live_opens;       /* db opens never closed, on nodes that did not restart */
	uint64_t marked;           /* opens of crashed processes found by restarted nodes */
	bool locks_at_survivors;   /* online: the survivors drop the locks from their own lock
				    * tables (LOTUS), nothing to publish or scan */
};

/*
 * Recovers the database on memory nodes 0 .. cfg->n_mn-1 (see above). With
 * REMORA_RECOVERY_CHECK nothing is written and rep says what is left to do: a recovered
 * database has no valid log and no held lock. Returns 0, -REMORA_ELAYOUT / -REMORA_ECONFIG
 * (no database, or one this build cannot recover), or a verb's error; err gets one line.
 */
int recovery_run(struct remora_transport *tp,
				   const struct recovery_cfg *cfg,
				   struct recovery_report *rep, char *err, size_t errlen);

/*
 * Online recovery of one failed compute node while the others run (builtin membership: the
 * memory nodes declared it dead; see docs/recovery.md, "Online recovery").
 */
struct recovery_online_cfg {
	uint32_t size;        /* sizeof(struct recovery_online_cfg) */
	uint16_t n_mn;        /* memory nodes 0 .. n_mn-1, all attached to the transport */
	uint16_t self_cn;     /* the compute node that asks (a live member) */
	const char *protocol; /* the cluster's transaction protocol */
	uint64_t dead;        /* bit i: compute node i is dead AND the caller fenced it on every
			       * memory node (only then is a claim of it void: it can no longer
			       * land an undo image) */
};

/*
 * One decision per failed compute node for the whole cluster: a CAS on the claim word of cn
 * in the acting control node's area (store_ctl_node; lease[cn]: 0 free, CLAIM | claimant + 1,
 * DONE | recoverer + 1).
 * The caller wins it when it is free or held by a dead claimant (who died recovering: the
 * protocol's recovery is idempotent). The winner runs the protocol's recover_online op
 * (which reads the logs, decides, and publishes the failed ids), then marks the word DONE.
 * The caller must have fenced cn on every memory node first (remora_cluster_fence).
 * Returns 0 (recovered here: rep filled), 1 (done already), 2 (a live compute node holds the
 * claim: ask again when another node dies, it may be the claimant), -EOPNOTSUPP (the
 * protocol has no online recovery: FORD; nothing is claimed), or an error with one line in
 * err (a claim won here is given back, so that the next attempt, by anyone, can win it).
 */
int recovery_online(struct remora_transport *tp, const struct recovery_online_cfg *cfg,
			   uint16_t cn, struct recovery_report *rep, char *err,
			   size_t errlen);

/*
 * Marks the coordinator ids of compute node cn (dead, fenced, not recovered yet) as suspected
 * in this process, for failed_locks = stall: conflicting transactions wait for its recovery
 * instead of aborting. The watchdog calls it once it fenced cn. 0 or an error.
 */
int recovery_suspect(struct remora_transport *tp, uint16_t n_mn, uint16_t cn);

/*
 * What a live compute node does about failed ones, called from its lease watchdog. First every
 * compute node the membership view newly shows dead (other than self) is fenced on every
 * memory node, all of them before any recovery: a claimant that one memory node declared
 * dead may still be landing undo images elsewhere, and its claim counts as void only once it
 * is fenced everywhere. Then each fenced one is recovered with recovery_online, once;
 * a failed fence or recovery is tried again at the next call. One line per event goes to
 * log, with the wall-clock time (s) at which the dead bit was seen and the recovery's
 * figures. w: the caller's memory of what it dealt with (start zeroed).
 */
struct recovery_watcher {
	uint64_t handled;   /* dead compute nodes dealt with */
	uint64_t pending;   /* ... whose claim another live node held: retried on a new death */
	uint64_t seen_dead; /* the fenced mask last seen */
	uint64_t fenced;    /* dead compute nodes this process fenced on every memory node */
	uint64_t failing;   /* ... whose last fence or recovery failed (logged once) */
	uint64_t done;      /* ... whose online recovery is done (here or by another node) */
};
struct remora_cluster;
void recovery_watch(struct remora_cluster *cl, const char *protocol,
			   struct recovery_watcher *w, FILE *log);

/*
 * Memory-node failover (mnfail.c; docs/recovery.md, "Memory-node failover"). recovery_mnf_lost:
 * the lease watchdog found memory node `node` gone (why says how). When this compute node can fail
 * over (ford or pandora, shm or pmem, not node 0, a live copy of everything left),
 * the node is taken out of the transport and published dead in every live node's control area, one
 * line goes to log, and true is returned: keep running. Else why gets the reason appended and
 * false: stop as before. recovery_mnf_watch, every watchdog pass: takes out the nodes another
 * compute node published; returns one that cannot fail over (why set), or -1.
 */
bool recovery_mnf_lost(struct remora_cluster *cl, int node, char *why, size_t len,
		       FILE *log);
int recovery_mnf_watch(struct remora_cluster *cl, char *why, size_t len, FILE *log);

/*
 * The same over any source of membership (tests drive it with their own): view() gives the
 * dead compute nodes (the union of the memory nodes' views), fence() fences one on every
 * memory node (0 only when all of them did), errmsg() says why the last call failed; the
 * recovery itself runs on tp, attached to memory nodes 0 .. n_mn-1, as compute node self_cn.
 */
struct recovery_watch_src {
	int (*view)(void *ctx, uint64_t *dead);
	int (*fence)(void *ctx, uint16_t cn);
	const char *(*errmsg)(void *ctx);
	void *ctx;
	struct remora_transport *tp;
	uint16_t n_mn, self_cn;
};
void recovery_watch_src(const struct recovery_watch_src *src, const char *protocol,
			struct recovery_watcher *w, FILE *log);

/*
 * What this process's watchdog saw of the latest failed compute node, for remora bench's
 * kill-and-measure: when it saw the dead bit (wall clock, s), and, when it recovered the node
 * itself, how long the recovery took (claim to DONE) and how many logs it decided.
 */
struct recovery_event {
	uint16_t cn;     /* the failed compute node, or memory node when mn */
	bool mn;         /* a memory-node failover: seen_s its detection here, total_ms the
			  * time to the new placement (the failover barrier passed) */
	bool here;       /* recovered by this process */
	double seen_s;   /* dead bit seen (CLOCK_REALTIME) */
	double total_ms; /* here: claim to DONE */
	double logs_ms;  /* here: logs read, decided, invalidated, ids published */
	uint64_t logs;
};
/* The latest event (false: none yet). */
bool recovery_last_event(struct recovery_event *out);
/* Records ev as the latest event. */
void recovery_note_event(const struct recovery_event *ev);

/* Whether the txn-layer mutation id is on for recovery ($REMORA_MUTATE; bad names: none). */
bool recovery_mutated(enum mut_id id);

/*
 * A memory node's check of its own pool before it serves it (local memory, no verbs): base
 * and bytes are the pool's usable area, node the memory node's id. Returns 1 when the pool
 * holds no database (its superblock page is all zeros), 0 when it holds a database this build
 * reads, formatted for this node and fitting the pool, else -REMORA_ELAYOUT with one line in
 * err (not a remora database, another layout version, a checksum mismatch, another node's
 * pool, a database larger than the pool). Reads only.
 */
int recovery_pool_check(const void *base, uint64_t bytes, uint16_t node,
					  char *err, size_t errlen);

/*
 * A memory node starting on a kept pool that holds a database (pool_check returned 0): opens
 * that were never closed belong to processes that died with the previous incarnation, so the
 * database is marked as needing recovery (remora_db_open refuses it until recovery_run
 * cleared the mark). Writes only the control area of node's pool (the caller persists it) and
 * returns the mark: 0 when the database was closed cleanly.
 */
uint64_t recovery_pool_mark(void *base, uint64_t bytes);

/*
 * Erases the database of a pool (zeroes its superblock page; the caller persists that page):
 * the next format starts from an empty pool. For `remora mn --format`.
 */
void recovery_pool_erase(void *base, uint64_t bytes);

#endif
