/* SPDX-License-Identifier: MIT */
/*
 * membership = zookeeper (docs/cluster.md, "ZooKeeper membership"): each compute node holds an
 * ephemeral znode /remora/<cluster>/cn/<id> in a session whose timeout is lease_ms. A node
 * that leaves cleanly first writes /remora/<cluster>/left/<id>. A member whose znode is gone
 * without that mark is dead: its session ended (the process died, or it was cut off or hung
 * for lease_ms). The decision is ZooKeeper's, one for the whole cluster; the memory nodes then
 * fence the node when a survivor asks (remora_cluster_fence), and recovery goes on as with
 * builtin membership. Built only with the ZooKeeper C client (libzookeeper-mt-dev).
 */
#ifndef REMORA_CLUSTER_ZK_H
#define REMORA_CLUSTER_ZK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct clzk;

/* Whether this build has the ZooKeeper client. */
bool clzk_built(void);

/*
 * Connects to hosts ("h:p,h:p") within connect_ms, with a session of lease_ms, creates the
 * cluster's directories and, for cn >= 0, the ephemeral znode of cn (and removes its left
 * mark). 0, or a negative code with one line in err (no server, id in use, not built).
 */
int clzk_open(const char *hosts, const char *cluster, int cn, int lease_ms, int connect_ms,
	      struct clzk **out, char *err, size_t errlen);

/* Members now (bit i: cn i holds its znode) and left marks. 0 or an error. */
int clzk_members(struct clzk *z, uint64_t *members, uint64_t *left);

/* True once this node's session cannot be proved alive (expired, or disconnected for the
 * session timeout); why says which. */
bool clzk_lost(struct clzk *z, char *why, size_t len);

/* A clean leave: writes the left mark, then ends the session (the znode goes). */
void clzk_leave(struct clzk *z);

/* Ends the session without the mark (the others see a death); NULL is fine. */
void clzk_close(struct clzk *z);

#endif
