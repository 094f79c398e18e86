/* SPDX-License-Identifier: MIT */
/*
 * Negative-control mutations of the RPC layer (runtime/mutate, layer MUT_RPC), for tests only (internal: tests link the static
 * library and call it directly; nothing in the environment sets them).
 *
 *   "reply_to_slot0"    replies are matched against call slot 0, whoever asked
 *   "no_timeout"        deadlines never expire (a call to a dead node waits for ever)
 *   "batch_first_only"  remora_rpc_call sends only the first request of a batch
 *   "skip_frame_check"  the receiver stops checking frame headers against the message
 *   "none"              clears every mutation
 *
 * Returns 0, or -EINVAL for an unknown name.
 */
#ifndef REMORA_RPC_MUTATE_H
#define REMORA_RPC_MUTATE_H

#include <remora/rpc.h>

int rpc_mutate(struct remora_rpc *r, const char *name);

#endif
