/* SPDX-License-Identifier: MIT */
/*
 * The shm backend: CXL memory pools emulated on one host. Pools are files mapped by every
 * process; verbs are CPU loads, stores and atomics applied at post time; compute-node messages
 * go through lock-free rings in a shared segment. See README.md for what it promises.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rshm.h"

#define RSHM_MAX_BATCH 256u
#define RSHM_MAX_OUTSTANDING 4096u
#define RSHM_MAX_INLINE 1024u

static int rshm_caps(const struct remora_backend_cfg *cfg, struct remora_caps *caps)
{
	int atomics = cfg ? cfg->atomics : REMORA_ATOMICS_NATIVE;
	uint32_t all = (1u << REMORA_OP_READ) | (1u << REMORA_OP_WRITE) | (1u << REMORA_OP_CAS) |
		       (1u << REMORA_OP_FAA) | (1u << REMORA_OP_MCAS);
	struct remora_caps c = {
		.size = sizeof(c),
		.ops = all,
		.emulated_ops = 0,
		.flags = REMORA_CAP_NATIVE_MCAS | REMORA_CAP_MSG | REMORA_CAP_FENCING,
		.persist_gran = REMORA_PERSIST_NONE,
		.max_batch = RSHM_MAX_BATCH,
		.max_inline = RSHM_MAX_INLINE,
		.max_msg = RT_MBOX_MAX,
		.max_outstanding = RSHM_MAX_OUTSTANDING,
	};
	uint32_t n = caps->size && caps->size < sizeof(c) ? caps->size : sizeof(c);

	if (atomics == REMORA_ATOMICS_NATIVE)
		c.flags |= REMORA_CAP_COHERENT_ATOMICS;
	if (atomics == REMORA_ATOMICS_ARBITER) { /* lock + read + write: emulated, not native */
		c.emulated_ops = all & ~((1u << REMORA_OP_READ) | (1u << REMORA_OP_WRITE));
		c.flags &= ~(uint32_t)REMORA_CAP_NATIVE_MCAS;
	}
	c.size = n;
	memcpy(caps, &c, n);
	return 0;
}

static int rshm_open(struct remora_transport *tp, const struct remora_backend_cfg *cfg,
		     void **tpriv)
{
	struct rshm_tp *t = calloc(1, sizeof(*t));
	int rc;

	if (!t)
		return -ENOMEM;
	t->tp = tp;
	t->cfg = *cfg;
	snprintf(t->cluster, sizeof(t->cluster), "%s", cfg->cluster);
	snprintf(t->dir, sizeof(t->dir), "%s", cfg->dir ? cfg->dir : RSHM_DEFAULT_DIR);
	t->cfg.cluster = t->cluster;
	t->cfg.dir = t->dir;
	rc = rt_mbox_open(&t->mbox, tp, t->cluster, cfg->max_cn, cfg->self_cn);
	if (rc) {
		free(t);
		return rc;
	}
	*tpriv = t;
	return 0;
}

static void rshm_close(void *tpriv)
{
	struct rshm_tp *t = tpriv;

	for (unsigned n = 0; n < REMORA_MAX_MN; n++)
		if (t->nodes[n].map)
			rshm_detach(t, (uint16_t)n);
	rt_mbox_close(&t->mbox);
	free(t);
}

static int rshm_chan_open(void *tpriv, struct remora_chan *ch, void **cpriv)
{
	struct rshm_chan *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->t = tpriv;
	c->ch = ch;
	c->lane = remora_fence_lane_claim(&c->t->lanes);
	*cpriv = c;
	return 0;
}

static void rshm_chan_close(void *cpriv)
{
	struct rshm_chan *c = cpriv;

	remora_fence_lane_release(&c->t->lanes, c->lane);
	free(c);
}

static int rshm_msg_send(void *cpriv, uint16_t dst_cn, const void *buf, uint32_t len)
{
	return rt_mbox_send(&((struct rshm_chan *)cpriv)->t->mbox, dst_cn, buf, len, 0);
}

static int rshm_msg_recv(void *cpriv, uint16_t *src_cn, void *buf, uint32_t cap)
{
	return rt_mbox_recv(&((struct rshm_chan *)cpriv)->t->mbox, src_cn, buf, cap, UINT64_MAX);
}

static int rshm_msg_send_at(void *cpriv, uint16_t dst_cn, const void *buf, uint32_t len,
			    uint64_t deliver_at)
{
	return rt_mbox_send(&((struct rshm_chan *)cpriv)->t->mbox, dst_cn, buf, len, deliver_at);
}

static int rshm_msg_recv_at(void *cpriv, uint16_t *src_cn, void *buf, uint32_t cap,
			    uint64_t now)
{
	return rt_mbox_recv(&((struct rshm_chan *)cpriv)->t->mbox, src_cn, buf, cap, now);
}

/* Removes the pool files of every memory node and the message segment of the cluster. */
static int rshm_cleanup(const struct remora_backend_cfg *cfg)
{
	struct rshm_tp t = { 0 };
	char path[PATH_MAX];
	int rc = 0, msg_rc;

	snprintf(t.cluster, sizeof(t.cluster), "%s", cfg->cluster);
	snprintf(t.dir, sizeof(t.dir), "%s", cfg->dir ? cfg->dir : RSHM_DEFAULT_DIR);
	for (unsigned n = 0; n < REMORA_MAX_MN; n++) {
		if (rshm_pool_path(&t, n, path, sizeof(path)))
			return -ENAMETOOLONG;
		if (unlink(path) < 0 && errno != ENOENT && !rc)
			rc = -errno;
	}
	msg_rc = rt_mbox_unlink(cfg->cluster);
	if (msg_rc == -ENAMETOOLONG)
		return msg_rc;
	return rc ? rc : msg_rc;
}

const struct remora_backend_ops remora_backend_shm = {
	.size = sizeof(struct remora_backend_ops),
	.flags = REMORA_BACKEND_INLINE,
	.name = "shm",
	.description = "CXL memory pools emulated in shared files on one host",
	.caps = rshm_caps,
	.open = rshm_open,
	.close = rshm_close,
	.pool_open = rshm_pool_open,
	.pool_close = rshm_pool_close,
	.pool_reg = rshm_pool_reg,
	.pool_dereg = rshm_pool_dereg,
	.pool_fence = rshm_pool_fence,
	.pool_describe = rshm_pool_describe,
	/* pool_persist, persist: not persistent; the core's stubs make them no-ops */
	.attach = rshm_attach,
	.detach = rshm_detach,
	.chan_open = rshm_chan_open,
	.chan_close = rshm_chan_close,
	.post = rshm_post,
	/* poll: inline backend, the core owns the completion queue */
	.msg_send = rshm_msg_send,
	.msg_recv = rshm_msg_recv,
	.cleanup = rshm_cleanup,
	.msg_send_at = rshm_msg_send_at,
	.msg_recv_at = rshm_msg_recv_at,
};
