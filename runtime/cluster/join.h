/* SPDX-License-Identifier: MIT */
/* The compute-node side of the cluster (join.c): what the runtime asks beyond the public API. */
#ifndef REMORA_CLUSTER_JOIN_H
#define REMORA_CLUSTER_JOIN_H

#include <stdbool.h>

struct remora_cluster;

/*
 * Whether some memory node fenced this compute node (its heartbeat got REMORA_EFENCED, or the
 * view declared it dead): a lost lease is then this node's death, never a memory node's.
 */
bool cluster_fenced(struct remora_cluster *cl);

#endif
