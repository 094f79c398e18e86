/* SPDX-License-Identifier: MIT */
/*
 * LOTUS's resharding, pass-by-range (docs/lotus.md, "Resharding"). Every compute node runs
 * one resharder thread. Each interval (lotus_reshard_ms, 100 ms) it WRITEs the node's
 * average transaction latency to the shard directory on memory node 0 and READs the others'.
 * A node above 1.5x the cluster's average for 3 intervals in a row hands its hottest shard
 * (most grants in the last interval) to the node with the lowest latency: it stops serving
 * the shard, waits until no lock of it is held here (10 ms at most, else it serves on and
 * tries again later), drops the shard's VT-cache entries, and publishes the new owner in
 * the directory. Every resharder polls the directory's move counters each millisecond and
 * takes a changed map over: the receiver serves the shard from then on, the others send to
 * it. Only lock ownership moves, never data. Prefix lotus_rs_.
 */
#ifndef REMORA_TXN_LOTUS_RESHARD_H
#define REMORA_TXN_LOTUS_RESHARD_H

#include <stdint.h>

#include "lotus.h"

/* One compute node's latest interval, in the directory. */
struct lotus_rs_metric {
	uint64_t seq;    /* intervals published */
	uint64_t t_ns;   /* when (CLOCK_REALTIME) */
	uint64_t avg_ns; /* average latency of the transactions it ran in the interval */
	uint64_t txns;   /* how many */
	uint64_t pad[4];
};

/* A compute node's oldest running transaction, in the directory (the restart rule). */
struct lotus_rs_oldest {
	uint64_t begin_ns; /* CLOCK_REALTIME begin of its oldest running transaction, or t_ns */
	uint64_t t_ns;     /* when it was published */
};

/* A compute node's latest handover, in the directory. */
struct lotus_rs_move {
	uint64_t shard, to;
	uint64_t t_stop_ns; /* it stopped serving the shard (CLOCK_REALTIME) */
	uint64_t t_pub_ns;  /* it published the new owner */
};

/*
 * The shard directory: lotus's tail on memory node 0 (zeroed by format). map[s] is 0 while
 * shard s has its initial owner (s mod the compute nodes), else (owner + 1) | epoch << 16,
 * written only by the shard's current owner. moves[cn] counts cn's handovers (its own word),
 * so a poller READs 8 bytes per node to know whether the map changed.
 */
struct lotus_rs_dir {
	uint64_t map[LOTUS_SHARDS];
	uint64_t moves[REMORA_MAX_CN];
	struct lotus_rs_move last[REMORA_MAX_CN];
	struct lotus_rs_metric met[REMORA_MAX_CN];
	struct lotus_rs_oldest oldest[REMORA_MAX_CN];
};

/*
 * The resharder of db (a thread): polls the directory (every node, so that moves reach it),
 * publishes this node's oldest running transaction (each millisecond), and with interval_ms
 * not 0 the metrics and handovers. It starts with the restart rule: this node grants no lock
 * (l->serving) until every live peer has published that its transactions began after this
 * open (a transaction of theirs that held a lock of this node's previous process must be over
 * before the same lock can be granted again); meanwhile requests are refused at once. 0 with
 * l->rs set, or an error with a line in db->errmsg.
 */
int lotus_rs_start(struct remora_db *db, struct lotus_db *l, unsigned interval_ms);
/* Stops and joins it (nothing when l->rs is NULL). */
void lotus_rs_stop(struct lotus_db *l);

/*
 * Hands shard s, which this node serves, to compute node `to` through channel ch: 0, -EINVAL
 * (not ours, or `to` is no other node), -ETIMEDOUT (locks of it stayed held for 10 ms: this
 * node serves it on), or a verb's error (serving on). *drain_ns: how long the holders took.
 */
int lotus_rs_move(struct remora_db *db, struct remora_chan *ch, uint32_t s, uint16_t to,
		  uint64_t *drain_ns);

/*
 * Online recovery of dead compute node `dead` (recover.c, the claimant): its shards go to the
 * live nodes (round robin over [0, ncn) without the nodes in gone), in the directory through
 * st and ch; every live node takes them over at its next poll, and serves them once no
 * transaction older than the takeover runs anywhere. 0 or a verb's error.
 */
int lotus_rs_take_dead(const struct store_db *st, struct remora_chan *ch, uint16_t dead,
		       unsigned ncn, uint64_t gone);

/*
 * Whether a peer that published o may still run a transaction that began before t (now: the
 * time): it published within 50 ms (alive), and not since t, or its oldest began before t.
 */
bool lotus_rs_peer_older(const struct lotus_rs_oldest *o, uint64_t t, uint64_t now);

/* A transaction of worker w ran for ns (begin to commit): counts toward the node's latency. */
static inline void lotus_rs_count(struct lotus_db *l, unsigned w, uint64_t ns)
{
	struct lotus_lat *t = &l->lat[w % REMORA_RPC_MAX_WORKERS];

	/* single writer (worker w's thread); the resharder reads */
	__atomic_store_n(&t->sum_ns, t->sum_ns + ns, __ATOMIC_RELAXED);
	__atomic_store_n(&t->n, t->n + 1, __ATOMIC_RELAXED);
}

#endif
