/* SPDX-License-Identifier: MIT */
/*
 * The rdma backend: memory nodes serve their pools to RC queue pairs over ibverbs, compute
 * nodes post one-sided verbs to them and exchange messages over SEND/RECV, connections are made
 * with rdma_cm. Verbs complete asynchronously (not an inline backend). See README.md for what it
 * promises, what it cannot, and how it is tested on soft-RoCE.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rrdma.h"

static int rrdma_caps(const struct remora_backend_cfg *cfg, struct remora_caps *caps)
{
	uint32_t all = (1u << REMORA_OP_READ) | (1u << REMORA_OP_WRITE) | (1u << REMORA_OP_CAS) |
		       (1u << REMORA_OP_FAA) | (1u << REMORA_OP_MCAS);
	struct remora_caps c = {
		.size = sizeof(c),
		.ops = all,
		/* upstream verbs have no masked-CAS: READ + CAS loop (verbs.c) */
		.emulated_ops = 1u << REMORA_OP_MCAS,
		/*
		 * NIC atomics are atomic against each other, not against CPU atomics; the NIC
		 * checks every rkey's bounds itself
		 */
		.flags = REMORA_CAP_MSG | REMORA_CAP_FENCING | REMORA_CAP_DEVICE_BOUNDS,
		.persist_gran = REMORA_PERSIST_NONE,
		.max_batch = RRDMA_MAX_BATCH,
		.max_inline = RRDMA_MAX_INLINE,
		.max_msg = RRDMA_MSG_MAX,
		.max_outstanding = RRDMA_MAX_OUTSTANDING,
	};
	uint32_t n = caps->size && caps->size < sizeof(c) ? caps->size : sizeof(c);

	(void)cfg;
	c.size = n;
	memcpy(caps, &c, n);
	return 0;
}

static int rrdma_open(struct remora_transport *tp, const struct remora_backend_cfg *cfg,
		      void **tpriv)
{
	struct rrdma_tp *t;
	int rc;

	if (cfg->atomics == REMORA_ATOMICS_ARBITER)
		return remora_backend_error(tp, -REMORA_ECONFIG,
					    "atomics=arbiter models CXL pools (shm); an RNIC "
					    "serializes its own atomics: use native or refuse");
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->tp = tp;
	t->cfg = *cfg;
	snprintf(t->cluster, sizeof(t->cluster), "%s", cfg->cluster);
	snprintf(t->dir, sizeof(t->dir), "%s", cfg->dir ? cfg->dir : rrdma_default_dir());
	t->cfg.cluster = t->cluster;
	t->cfg.dir = t->dir;
	t->cluster_hash = rrdma_hash(t->cluster);
	pthread_mutex_init(&t->lock, NULL);
	rc = rrdma_dev_open(t);
	if (rc)
		goto err_free;
	if (!t->dev.atomics && cfg->atomics != REMORA_ATOMICS_REFUSE) {
		rc = remora_backend_error(tp, -EOPNOTSUPP,
					  "%s has no remote atomics (CAS, FAA); set REMORA_ATOMICS="
					  "refuse to run without them", t->dev.name);
		goto err_dev;
	}
	if (cfg->self_cn >= 0) {
		rc = rrdma_msg_open(t);
		if (rc)
			goto err_dev;
	}
	*tpriv = t;
	return 0;

err_dev:
	rrdma_dev_close(&t->dev);
err_free:
	pthread_mutex_destroy(&t->lock);
	free(t);
	return rc;
}

static void rrdma_close(void *tpriv)
{
	struct rrdma_tp *t = tpriv;

	rrdma_msg_close(t);
	rrdma_dev_close(&t->dev);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

/* Removes the message address files of the cluster (pools leave no files behind). */
static int rrdma_cleanup(const struct remora_backend_cfg *cfg)
{
	const char *dir = cfg->dir ? cfg->dir : rrdma_default_dir();
	char path[PATH_MAX];
	int rc = 0;

	for (unsigned cn = 0; cn < REMORA_MAX_CN; cn++) {
		if (rrdma_msg_addr_path(dir, cfg->cluster, cn, path, sizeof(path)))
			return -ENAMETOOLONG;
		if (unlink(path) < 0 && errno != ENOENT && !rc)
			rc = -errno;
	}
	return rc;
}

static const char *const rrdma_params[] = { "rdma_device", "rdma_port", "rdma_gid_index",
					     "rdma_mtu", "rdma_qp_timeout", NULL };

const struct remora_backend_ops rt_backend_rdma = {
	.size = sizeof(struct remora_backend_ops),
	.flags = 0, /* completions come from the NIC, through poll */
	.name = "rdma",
	.description = "RDMA NICs through ibverbs and rdma_cm (RC queue pairs, RoCE or soft-RoCE)",
	.caps = rrdma_caps,
	.open = rrdma_open,
	.close = rrdma_close,
	.pool_open = rrdma_pool_open,
	.pool_close = rrdma_pool_close,
	.pool_reg = rrdma_pool_reg,
	.pool_dereg = rrdma_pool_dereg,
	.pool_fence = rrdma_pool_fence,
	.pool_describe = rrdma_pool_describe,
	/* pool_persist, persist: not persistent; the core's stubs make them no-ops */
	.attach = rrdma_attach,
	.detach = rrdma_detach,
	.chan_open = rrdma_chan_open,
	.chan_close = rrdma_chan_close,
	.post = rrdma_post,
	.poll = rrdma_poll,
	.chan_break = rrdma_chan_break,
	.msg_send = rrdma_msg_send,
	.msg_recv = rrdma_msg_recv,
	.cleanup = rrdma_cleanup,
	.msg_locator = rrdma_msg_locator,
	.msg_set_peer = rrdma_msg_set_peer,
	.params = rrdma_params,
};
