/* SPDX-License-Identifier: MIT */
/*
 * Negative-control mutations of the transport core, for tests only: each switches one check off
 * so that a test can prove it would catch the bug. Internal (not exported by libremora.so, not
 * settable from the environment); tests link the static library and call it directly.
 *
 *   "skip_bounds_check"  remora_post() no longer refuses keys/bounds of a region: a verb whose
 *                        bytes leave its region (but stay inside the node's pool) takes effect.
 *                        The key must still name a registered region and the bytes must stay
 *                        in the mapping, so the process does not crash.
 *   "skip_fence_check"   the backend applies a fenced compute node's verbs (no -REMORA_EFENCED).
 *   "none"               clears every mutation.
 *
 * Returns 0, or -EINVAL for an unknown name.
 */
#ifndef REMORA_TRANSPORT_MUTATE_H
#define REMORA_TRANSPORT_MUTATE_H

#include <remora/transport.h>

int rt_transport_mutate(struct remora_transport *tp, const char *name);

/*
 * Not a mutation: chooses how compute nodes of this process that attach from now on enter a
 * fence lane. 1 (default): a plain store, the fencer's membarrier supplies the CPU barrier;
 * 0: a seq_cst exchange per run. Lets tests cover both fencing paths.
 */
void rt_transport_fence_mode(int asym);

/*
 * Not a mutation: from now on, compute-node transports this process opens on a backend without
 * message locators (shm, pmem) report "<prefix><self_cn>.<n>" from remora_msg_locator (n counts
 * them), so tests can follow locators through the control plane without an RDMA device. NULL or
 * "": off (transports opened earlier keep theirs).
 */
void rt_transport_test_msg_locator(const char *prefix);

/*
 * Not a mutation: breaks ch now, as its verb deadline (verb_timeout_ms) would: the backend
 * ends every verb in flight with -ETIMEDOUT and the channel refuses later verbs. Lets tests
 * cover the break with verbs really in flight, which a healthy device never leaves there.
 */
void rt_transport_chan_break(struct remora_chan *ch);

/*
 * Transport mutations that act while a transport opens (keep_stale_messages, on the host
 * backends' message segment): set for the compute-node transports this process opens from
 * now on; "none" clears them. 0, or -EINVAL for a name that is not a transport mutation.
 */
int rt_transport_mutate_opens(const char *name);

/* The locator last set for cn with remora_msg_set_peer ("" if none). 0, or -EINVAL. */
int rt_transport_msg_peer(struct remora_transport *tp, uint16_t cn, char *buf, size_t len);

#endif
