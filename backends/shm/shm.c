/* SPDX-License-Identifier: MIT */
/*
 * The shm backend: CXL memory pools emulated on one host. Pools are files mapped by every
 * process; verbs are CPU loads, stores and atomics applied at post time; compute-node messages
 * go through lock-free rings in a shared segment. All of that but the pool files is shared
 * with pmem (backends/host/hostmem.h). See README.md for what it promises.
 */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "rshm.h"

static int rshm_caps(const struct remora_backend_cfg *cfg, struct remora_caps *caps)
{
	return rt_host_caps(cfg, caps, 0, REMORA_PERSIST_NONE);
}

static int rshm_open(struct remora_transport *tp, const struct remora_backend_cfg *cfg,
		     void **tpriv)
{
	return rt_host_open(tp, cfg, RSHM_DEFAULT_DIR, sizeof(struct rshm_tp), rshm_unmap, tpriv);
}

/* Removes the pool files of every memory node and the message segment of the cluster. */
static int rshm_cleanup(const struct remora_backend_cfg *cfg)
{
	const char *dir = cfg->dir ? cfg->dir : RSHM_DEFAULT_DIR;
	char path[PATH_MAX];
	int rc = rt_host_cleanup_check(dir, cfg->cluster), msg_rc;

	if (rc)
		return rc;
	for (unsigned n = 0; n < REMORA_MAX_MN; n++) {
		if (rt_host_pool_path(dir, cfg->cluster, n, path, sizeof(path)))
			return -ENAMETOOLONG;
		if (unlink(path) < 0 && errno != ENOENT && !rc)
			rc = -errno;
	}
	msg_rc = rt_mbox_unlink(cfg->cluster, cfg->dir);
	if (msg_rc == -ENAMETOOLONG)
		return msg_rc;
	return rc ? rc : msg_rc;
}

const struct remora_backend_ops rt_backend_shm = {
	.size = sizeof(struct remora_backend_ops),
	.flags = REMORA_BACKEND_INLINE,
	.name = "shm",
	.description = "CXL memory pools emulated in shared files on one host",
	.caps = rshm_caps,
	.open = rshm_open,
	.close = rt_host_close,
	.pool_open = rshm_pool_open,
	.pool_close = rshm_pool_close,
	.pool_reg = rt_host_pool_reg,
	.pool_dereg = rt_host_pool_dereg,
	.pool_fence = rt_host_pool_fence,
	.pool_describe = rt_host_pool_describe,
	/* pool_persist, persist: not persistent; the core's stubs make them no-ops */
	.attach = rshm_attach,
	.detach = rt_host_detach,
	.chan_open = rt_host_chan_open,
	.chan_close = rt_host_chan_close,
	.post = rt_host_post,
	.prefetch = rt_host_prefetch,
	/* poll: inline backend, the core owns the completion queue */
	.msg_send = rt_host_msg_send,
	.msg_recv = rt_host_msg_recv,
	.cleanup = rshm_cleanup,
	.msg_send_at = rt_host_msg_send_at,
	.msg_recv_at = rt_host_msg_recv_at,
};
