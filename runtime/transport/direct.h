/* SPDX-License-Identifier: MIT */
/*
 * Inline completion, for the scheduler's remora_co_exec (runtime/sched). Internal: not
 * exported by libremora.so.
 */
#ifndef REMORA_TRANSPORT_DIRECT_H
#define REMORA_TRANSPORT_DIRECT_H

#include <stdbool.h>

#include <remora/transport.h>

/*
 * On a backend that applies verbs while they are posted (shm, pmem) with no cost model, and
 * with no completion of the channel waiting to be polled, posts wrs[0..n) as one batch and
 * takes their completions at once: *rc is what remora_exec would return (the post's error, or
 * the first failed verb's status, in posting order), and no completion enters the channel's
 * queue, since the caller is the one that would have polled them and nothing else is queued
 * before them. Returns false, with nothing posted, when the channel does not qualify; the
 * caller then posts and polls as usual.
 */
bool rt_transport_exec_inline(struct remora_chan *ch, struct remora_wr *wrs, unsigned n,
			      int *rc);

/*
 * When wrs[0..n) would complete inline on ch (as rt_transport_exec_inline checks) and the
 * backend can prefetch: asks the CPU for their pool lines and returns true. Nothing is
 * validated or applied; false when the channel or backend does not qualify.
 */
bool rt_transport_prefetch(struct remora_chan *ch, const struct remora_wr *wrs, unsigned n);

/*
 * Not for production: turns inline completion off (0) or back on (1, the default) for the
 * whole process, so that tests can still see verbs in flight on the host backends.
 */
void rt_transport_inline_exec(int on);

/*
 * Memory-node failover: node is dead for the rest of the run. From now on every verb to it is
 * refused (-REMORA_ENODE), although on shm its pool file stays mapped and would keep taking
 * verbs: a node some compute nodes still wrote while others had moved on would split lock
 * words between the old primary and the new one. Idempotent; never undone.
 */
void rt_transport_mn_down(struct remora_transport *tp, uint16_t node);
/* The nodes rt_transport_mn_down took out, as a mask (bit i: node i). */
uint32_t rt_transport_down_mask(const struct remora_transport *tp);

/*
 * 0 when remora_fault_point() would do nothing (the environment was read and names no point):
 * the library's own points test it inline and skip the call. 1 until then.
 */
extern int rt_fault_points_live;

#endif
