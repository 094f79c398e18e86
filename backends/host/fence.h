/* SPDX-License-Identifier: MIT */
/*
 * Fencing for the host backends (shm, pmem), whose memory nodes are shared memory of one host.
 * Internal to backends/host: no public header exposes it, and the rdma backend fences by moving
 * queue pairs to the error state instead.
 */
#ifndef REMORA_BACKENDS_HOST_FENCE_H
#define REMORA_BACKENDS_HOST_FENCE_H

#include <stdbool.h>
#include <stdint.h>

/*
 * Permission-epoch fencing, shared by the backends whose memory nodes are plain shared memory
 * of one host (shm, pmem). One struct rt_host_fence_slot per compute node lives in pool memory.
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
#define RT_HOST_FENCE_FENCED (UINT64_C(1) << 63)
#define RT_HOST_FENCE_LANES 6

struct rt_host_fence_slot {
	uint64_t epoch;  /* generation; bit 63: fenced for good */
	uint64_t pid;    /* process that attached as this CN (liveness check of the fencer) */
	uint64_t asym;   /* 1: the CN's lanes rely on the fencer's membarrier */
	uint64_t _pad0[5];
	uint64_t shared; /* runs in progress of channels without a lane */
	uint64_t _pad1[7];
	struct {
		uint64_t active; /* 1 while this lane's channel applies a run */
		uint64_t _pad[7];
	} lane[RT_HOST_FENCE_LANES];
};
_Static_assert(sizeof(struct rt_host_fence_slot) == 512, "fence slot: 8 cache lines");

/*
 * lane: the channel's lane, or -1 for the shared counter; asym: the value join returned in
 * *asym. True when the run may be applied (then call rt_host_fence_exit after it).
 */
static inline bool rt_host_fence_enter(struct rt_host_fence_slot *s, int lane, bool asym,
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

static inline void rt_host_fence_exit(struct rt_host_fence_slot *s, int lane)
{
	if (lane >= 0)
		__atomic_store_n(&s->lane[lane].active, 0, __ATOMIC_RELEASE);
	else
		__atomic_fetch_sub(&s->shared, 1, __ATOMIC_RELEASE);
}

/* Whether a run of verbs is in progress on the slot (or was, for a CN that died in it). */
static inline bool rt_host_fence_slot_busy(struct rt_host_fence_slot *s)
{
	if (__atomic_load_n(&s->shared, __ATOMIC_SEQ_CST))
		return true;
	for (unsigned l = 0; l < RT_HOST_FENCE_LANES; l++)
		if (__atomic_load_n(&s->lane[l].active, __ATOMIC_SEQ_CST))
			return true;
	return false;
}

/*
 * Fencer side: marks the slot fenced, then waits for runs in progress (see above). Returns 0,
 * or -ENOSYS when the CN relies on membarrier and this process may not call it (the fence
 * cannot be guaranteed; the slot is marked fenced all the same).
 */
int rt_host_fence_slot_fence(struct rt_host_fence_slot *s);
/*
 * Attach side: reads the epoch to check against into *mine and whether this process's lanes
 * may skip the CPU barrier into *asym. -REMORA_EFENCED if this CN is fenced.
 */
/*
 * A memory node that opens a kept pool starts a new incarnation: compute nodes attached to an
 * earlier one are shut out (their epoch no longer matches) and every CN id may attach again
 * (fenced or not before). Within one boot, processes of the earlier incarnation may still
 * live: the slot is fenced first (rt_host_fence_slot_fence waits until their runs are over or
 * they are dead). After a reboot (pmem only: shm pools do not outlive one) nobody can be
 * inside a run, and stale pids mean nothing.
 */
void rt_host_fence_slot_reset(struct rt_host_fence_slot *s, bool same_boot);

int rt_host_fence_slot_join(struct rt_host_fence_slot *s, uint64_t *mine, bool *asym);

/*
 * Lanes are handed out per process: a backend keeps one `uint32_t` bitmap per transport and
 * claims a lane for each channel it opens (-1 when all are taken), releasing it at close.
 */
static inline int rt_host_fence_lane_claim(uint32_t *bitmap)
{
	uint32_t cur = __atomic_load_n(bitmap, __ATOMIC_RELAXED);

	for (;;) {
		int lane = __builtin_ffs((int)~cur) - 1;

		if (lane < 0 || lane >= RT_HOST_FENCE_LANES)
			return -1;
		if (__atomic_compare_exchange_n(bitmap, &cur, cur | (1u << lane), true,
						__ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			return lane;
	}
}

static inline void rt_host_fence_lane_release(uint32_t *bitmap, int lane)
{
	if (lane >= 0)
		__atomic_fetch_and(bitmap, ~(1u << lane), __ATOMIC_ACQ_REL);
}

#endif
