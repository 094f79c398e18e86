/* SPDX-License-Identifier: MIT */
/*
 * The NIC cost model (internal to the transport core; tests include it as "transport/cost.h").
 *
 * Per verb, with one profile p, verb class c (read | write | atomic), memory node mn and the
 * time now at which the verb is posted:
 *
 *   start   = now + rtt/2                       (request crosses the fabric)
 *   ready   = max(start, busy_until[mn][c]) + svc[c]
 *   busy_until[mn][c] = ready                    (one CAS loop on a counter shared by every
 *                                                 process of the cluster)
 *   visible = ready + (rtt - rtt/2)             (the completion travels back)
 *
 * and then, per channel and memory node (RC completions are delivered in posting order):
 *
 *   visible = max(visible, last_visible[ch][mn]);  last_visible[ch][mn] = visible
 *
 * A verb flagged REMORA_WR_FENCE starts only once the earlier verbs of its channel to that node
 * have completed: now is replaced by max(now, last_visible[ch][mn]).
 *
 * A completion is handed out by remora_poll() only once clock() >= visible. Verbs still take
 * effect at post time (the shm backend applies them inline); the model delays what a caller can
 * observe and limits the rate it can achieve, which is what the papers' comparisons rest on.
 *
 * Messages between compute nodes (SEND/RECV on a NIC) queue at the sender's NIC, which sends
 * one every msg_svc, then travel one way:
 *
 *   sent       = max(now, msg_busy_until[cn]) + msg_svc;  msg_busy_until[cn] = sent
 *   deliver_at = sent + rtt/2   (the receiver gets it only once its clock reaches deliver_at)
 *
 * so that moving work from memory-node atomics to messages (LOTUS, DecLock) is not free.
 *
 * A scaled cluster (mn_scale K) multiplies every svc (verbs and messages) by K and leaves rtt
 * alone: one host's compute then stands for K hosts' worth against the same NICs.
 *
 * Times are nanoseconds of one clock shared by every process of the host (CLOCK_MONOTONIC),
 * or of a clock injected with rt_cost_set_clock() (tests: simulated time, never wall time).
 * Profile "none" disables the layer: the post and poll paths then take one predictable branch.
 */
#ifndef REMORA_TRANSPORT_COST_H
#define REMORA_TRANSPORT_COST_H

#include <stdint.h>

#include <remora/transport.h>

enum rt_cost_class {
	REMORA_COST_READ,
	REMORA_COST_WRITE,
	REMORA_COST_ATOMIC,
	REMORA_COST__NCLASS
};

struct rt_cost_profile {
	const char *name;
	uint64_t rtt_ns;                       /* round trip of one verb, unloaded */
	uint64_t svc_ns[REMORA_COST__NCLASS];  /* 1e9 / rate: service time per verb per MN; 0 = no limit */
	uint64_t msg_svc_ns;                   /* 1e9 / messages one CN's NIC sends per s; 0 = no limit */
	const char *summary;                   /* one line for `remora info` and result labels */
};

/* The profile named name (none | cxl | cx3 | cx4 | cx5 | cx6), or NULL. */
const struct rt_cost_profile *rt_cost_profile_find(const char *name);
/* The table of profiles; *n receives its length. */
const struct rt_cost_profile *rt_cost_profiles(unsigned *n);
/* *out = *base with every service time (verbs, messages) multiplied by k >= 1; rtt kept. */
void rt_cost_profile_scale(const struct rt_cost_profile *base, unsigned k,
			       struct rt_cost_profile *out);

typedef uint64_t (*rt_cost_clock_fn)(void);
/* Replaces the clock of every transport of this process; NULL restores CLOCK_MONOTONIC. */
void rt_cost_set_clock(rt_cost_clock_fn fn);
/* The current cost-model time in ns. */
uint64_t rt_cost_now(void);

static inline enum rt_cost_class rt_cost_class_of(enum remora_op op)
{
	return op == REMORA_OP_READ ? REMORA_COST_READ :
	       op == REMORA_OP_WRITE ? REMORA_COST_WRITE : REMORA_COST_ATOMIC;
}

/* Pure: the ready time of a verb of class c posted at now when the node is busy until busy. */
uint64_t rt_cost_ready(const struct rt_cost_profile *p, enum rt_cost_class c,
			   uint64_t now, uint64_t busy);
/* Pure: when the completion of a verb that is ready at ready becomes pollable. */
uint64_t rt_cost_visible(const struct rt_cost_profile *p, uint64_t ready);
/*
 * Claims service on the shared counter *busy (atomically, CAS loop): returns the ready time and
 * leaves *busy = ready. Tests may pass a plain local counter.
 */
uint64_t rt_cost_claim(const struct rt_cost_profile *p, enum rt_cost_class c,
			   uint64_t now, uint64_t *busy);
/* Pure: when a message sent at now, with the sender's NIC busy until busy, may be received. */
uint64_t rt_cost_msg_deliver(const struct rt_cost_profile *p, uint64_t now, uint64_t busy);
/*
 * Claims the sender NIC's counter *busy (CAS loop) for one message; returns its deliver_at.
 * *before gets the counter's value the claim replaced (for rt_cost_msg_unclaim).
 */
uint64_t rt_cost_msg_claim(const struct rt_cost_profile *p, uint64_t now, uint64_t *busy,
			   uint64_t *before);
/* Gives back the claim that returned deliver_at, if no later claim followed it. */
void rt_cost_msg_unclaim(const struct rt_cost_profile *p, uint64_t *busy, uint64_t deliver_at,
			 uint64_t before);
/*
 * Service time a server has delivered by now, from the time charged to it so far and its
 * busy_until: what is still queued (busy_until - now) is not served yet.
 */
uint64_t rt_cost_served(uint64_t charged, uint64_t busy_until, uint64_t now);

/*
 * The whole per-verb step: fence and RC-order handling on *last_visible (the channel's, for
 * this node), claim on *busy; returns the visible time and updates both.
 */
uint64_t rt_cost_verb(const struct rt_cost_profile *p, enum remora_op op, unsigned wr_flags,
			  uint64_t now, uint64_t *busy, uint64_t *last_visible);

#endif
