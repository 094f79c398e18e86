/* SPDX-License-Identifier: MIT */
/* The common part of the host-memory backends (shm, pmem); see hostmem.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "transport/core.h"
#include "hostmem.h"

/* The pid of the flock on the file st names, from /proc/locks; -1 when not found. */
static int flock_holder(const struct stat *st)
{
	char line[256], dev[64];
	FILE *f = fopen("/proc/locks", "re");
	int pid = -1;

	if (!f)
		return -1;
	snprintf(dev, sizeof(dev), " %02x:%02x:%llu ", major(st->st_dev), minor(st->st_dev),
		 (unsigned long long)st->st_ino);
	while (pid < 0 && fgets(line, sizeof(line), f)) {
		char *at = strstr(line, dev);
		int p;

		/* "N: FLOCK  ADVISORY  WRITE <pid> <maj>:<min>:<inode> 0 EOF" */
		if (!at || !strstr(line, "FLOCK"))
			continue;
		while (at > line && at[-1] == ' ')
			at--;
		while (at > line && at[-1] >= '0' && at[-1] <= '9')
			at--;
		if (sscanf(at, "%d", &p) == 1)
			pid = p;
	}
	fclose(f);
	return pid;
}

int rt_host_pool_lock(struct remora_transport *tp, int fd, const char *path)
{
	struct stat st;
	int pid;

	if (flock(fd, LOCK_EX | LOCK_NB) == 0)
		return 0;
	if (errno != EWOULDBLOCK)
		return remora_backend_error(tp, -errno, "%s: lock: %s", path, strerror(errno));
	pid = fstat(fd, &st) == 0 ? flock_holder(&st) : -1;
	if (pid > 0)
		return remora_backend_error(tp, -EBUSY,
					    "%s: in use by a memory node, process %d (left "
					    "untouched)", path, pid);
	return remora_backend_error(tp, -EBUSY, "%s: in use by another memory node (left "
				    "untouched)", path);
}

int rt_host_pool_busy(const char *path)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC), pid = 0;

	if (fd < 0)
		return 0;
	if (flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK)
		pid = fstat(fd, &st) == 0 ? flock_holder(&st) : -1;
	close(fd); /* drops our shared lock, if we got it */
	return pid;
}

int rt_host_cleanup_check(const char *dir, const char *cluster)
{
	char path[PATH_MAX];

	for (unsigned n = 0; n < REMORA_MAX_MN; n++) {
		int pid;

		if (rt_host_pool_path(dir, cluster, n, path, sizeof(path)))
			return -ENAMETOOLONG;
		pid = rt_host_pool_busy(path);
		if (pid > 0)
			return rt_last_error(-EBUSY, "cluster '%s' is running: memory node %u, process "
					     "%d, serves %s; stop it first (nothing removed)",
					     cluster, n, pid, path);
		if (pid)
			return rt_last_error(-EBUSY, "cluster '%s' is running: memory node %u serves "
					     "%s; stop it first (nothing removed)", cluster, n,
					     path);
	}
	return 0;
}

int rt_host_caps(const struct remora_backend_cfg *cfg, struct remora_caps *caps, uint32_t flags,
		 enum remora_persist_gran gran)
{
	int atomics = cfg ? cfg->atomics : REMORA_ATOMICS_NATIVE;
	uint32_t all = (1u << REMORA_OP_READ) | (1u << REMORA_OP_WRITE) | (1u << REMORA_OP_CAS) |
		       (1u << REMORA_OP_FAA) | (1u << REMORA_OP_MCAS);
	struct remora_caps c = {
		.size = sizeof(c),
		.ops = all,
		.emulated_ops = 0,
		.flags = REMORA_CAP_NATIVE_MCAS | REMORA_CAP_MSG | REMORA_CAP_FENCING | flags,
		.persist_gran = gran,
		.max_batch = RT_HOST_MAX_BATCH,
		.max_inline = RT_HOST_MAX_INLINE,
		.max_msg = RT_MBOX_MAX,
		.max_outstanding = RT_HOST_MAX_OUTSTANDING,
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

int rt_host_open(struct remora_transport *tp, const struct remora_backend_cfg *cfg,
		 const char *default_dir, size_t size, rt_host_unmap_fn *unmap, void **tpriv)
{
	struct rt_host_tp *t = calloc(1, size);
	int rc;

	if (!t)
		return -ENOMEM;
	t->tp = tp;
	t->unmap = unmap;
	t->cfg = *cfg;
	snprintf(t->cluster, sizeof(t->cluster), "%s", cfg->cluster);
	snprintf(t->dir, sizeof(t->dir), "%s", cfg->dir ? cfg->dir : default_dir);
	t->cfg.cluster = t->cluster;
	t->cfg.dir = t->dir;
	rc = rt_mbox_open(&t->mbox, tp, t->cluster, cfg->dir, cfg->max_cn, cfg->self_cn);
	if (rc) {
		free(t);
		return rc;
	}
	*tpriv = t;
	return 0;
}

void rt_host_close(void *tpriv)
{
	struct rt_host_tp *t = tpriv;

	for (unsigned n = 0; n < REMORA_MAX_MN; n++)
		if (t->nodes[n].base)
			rt_host_detach(t, (uint16_t)n);
	rt_mbox_close(&t->mbox);
	free(t);
}

int rt_host_chan_open(void *tpriv, struct remora_chan *ch, void **cpriv)
{
	struct rt_host_chan *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->t = tpriv;
	c->ch = ch;
	c->lane = rt_host_fence_lane_claim(&c->t->lanes);
	*cpriv = c;
	return 0;
}

void rt_host_chan_close(void *cpriv)
{
	struct rt_host_chan *c = cpriv;

	rt_host_fence_lane_release(&c->t->lanes, c->lane);
	free(c);
}

int rt_host_msg_send(void *cpriv, uint16_t dst_cn, const void *buf, uint32_t len)
{
	return rt_mbox_send(&((struct rt_host_chan *)cpriv)->t->mbox, dst_cn, buf, len, 0);
}

int rt_host_msg_recv(void *cpriv, uint16_t *src_cn, void *buf, uint32_t cap)
{
	return rt_mbox_recv(&((struct rt_host_chan *)cpriv)->t->mbox, src_cn, buf, cap,
			    UINT64_MAX);
}

int rt_host_msg_send_at(void *cpriv, uint16_t dst_cn, const void *buf, uint32_t len,
			uint64_t deliver_at)
{
	return rt_mbox_send(&((struct rt_host_chan *)cpriv)->t->mbox, dst_cn, buf, len,
			    deliver_at);
}

int rt_host_msg_recv_at(void *cpriv, uint16_t *src_cn, void *buf, uint32_t cap, uint64_t now)
{
	return rt_mbox_recv(&((struct rt_host_chan *)cpriv)->t->mbox, src_cn, buf, cap, now);
}

int rt_host_pool_path(const char *dir, const char *cluster, unsigned node, char *buf,
		      size_t size)
{
	char what[16];

	snprintf(what, sizeof(what), "mn%u", node);
	return remora_backend_cluster_path(dir, cluster, what, buf, size);
}

int rt_host_pool_reg(void *ppriv, uint64_t off, uint64_t len, uint32_t *key)
{
	struct rt_host_pool *p = ppriv;
	int rc = rt_regtab_reg(p->regions, off, len, key);

	if (rc)
		return remora_backend_error(p->t->tp, rc, "%s: all %d regions in use", p->path,
					    REMORA_MAX_REGIONS);
	return 0;
}

int rt_host_pool_dereg(void *ppriv, uint32_t key)
{
	struct rt_host_pool *p = ppriv;
	int rc = rt_regtab_dereg(p->regions, key);

	if (rc)
		return remora_backend_error(p->t->tp, rc, "%s: no region with key %#x", p->path,
					    key);
	return 0;
}

int rt_host_pool_fence(void *ppriv, uint16_t cn)
{
	struct rt_host_pool *p = ppriv;
	int rc = rt_host_fence_slot_fence(&p->fence[cn]);

	if (rc)
		return remora_backend_error(p->t->tp, rc,
					    "fence of compute node %u: membarrier not permitted here",
					    cn);
	return 0;
}

int rt_host_pool_describe(void *ppriv, struct remora_node_desc *desc)
{
	struct rt_host_pool *p = ppriv;

	if (strlen(p->path) >= sizeof(desc->locator))
		return remora_backend_error(p->t->tp, -ENAMETOOLONG,
					    "%s: path longer than a locator (%zu bytes)", p->path,
					    sizeof(desc->locator) - 1);
	desc->node = p->node;
	desc->bytes = p->bytes;
	desc->nregions = (uint16_t)rt_regtab_describe(p->regions, desc->regions);
	snprintf(desc->locator, sizeof(desc->locator), "%s", p->path);
	return 0;
}

/*
 * Remembers which region generation the descriptor describes. If the pool's table already
 * differs from desc, no generation matches and every verb is checked against the live table.
 */
static void note_region_gen(struct rt_host_node *n, const struct remora_node_desc *desc)
{
	uint64_t gen = rt_regtab_gen(n->regions);

	n->region_gen = rt_regtab_matches(n->regions, desc) ? gen : UINT64_MAX;
}

int rt_host_attach_open(struct rt_host_tp *t, const struct remora_node_desc *desc, int *fd)
{
	struct rt_host_node *n = &t->nodes[desc->node];

	*fd = -1;
	if (n->base && strcmp(n->locator, desc->locator) == 0) {
		note_region_gen(n, desc); /* refresh: the core copies the new table */
		return 0;
	}
	if (n->base)
		return remora_backend_error(t->tp, -EEXIST, "node %u already attached to %s",
					    desc->node, n->locator);
	*fd = open(desc->locator, O_RDWR | O_CLOEXEC);
	if (*fd < 0)
		return remora_backend_error(t->tp, -errno, "attach node %u: %s: %s", desc->node,
					    desc->locator, strerror(errno));
	return 0;
}

int rt_host_attach_node(struct rt_host_tp *t, const struct remora_node_desc *desc, char *base,
			uint64_t bytes, struct rt_regtab *regions, uint64_t *arbiter,
			struct rt_host_fence_slot *fence)
{
	struct rt_host_node *n = &t->nodes[desc->node];
	int rc;

	memset(n, 0, sizeof(*n));
	if (t->cfg.self_cn >= 0) {
		n->slot = &fence[t->cfg.self_cn];
		rc = rt_host_fence_slot_join(n->slot, &n->epoch, &n->asym);
		if (rc) {
			memset(n, 0, sizeof(*n));
			t->unmap(t, desc->node);
			return remora_backend_error(t->tp, rc,
						    "attach node %u: compute node %d is fenced",
						    desc->node, t->cfg.self_cn);
		}
	}
	n->bytes = bytes;
	n->regions = regions;
	n->arbiter = arbiter;
	note_region_gen(n, desc);
	snprintf(n->locator, sizeof(n->locator), "%s", desc->locator);
	n->base = base; /* last: the node counts as attached from here */
	return 0;
}

int rt_host_detach(void *tpriv, uint16_t node)
{
	struct rt_host_tp *t = tpriv;
	struct rt_host_node *n = &t->nodes[node];

	if (!n->base)
		return -REMORA_ENODE;
	memset(n, 0, sizeof(*n));
	t->unmap(t, node);
	return 0;
}

/* noinline: see hostmem.h (the post loop of this file would take it in otherwise) */
__attribute__((noinline)) void rt_host_atomic(struct rt_host_chan *c, struct rt_host_node *nd,
					      uint16_t node, const struct remora_wr *wr,
					      uint64_t *p)
{
	uint64_t old;

	if (__builtin_expect(c->t->cfg.atomics != REMORA_ATOMICS_ARBITER, 1)) {
		old = rt_cpu_atomic(p, wr);
	} else {
		old = rt_cpu_arbiter_atomic(nd->arbiter, p, wr);
		remora_backend_count_emulated(c->ch, node, (enum remora_op)wr->op, 1);
	}
	if (wr->local)
		memcpy(wr->local, &old, sizeof(old));
}

__attribute__((noinline)) int rt_host_live_check(const struct rt_host_node *nd,
						 const struct remora_wr *wr)
{
	return rt_regtab_check(nd->regions, wr);
}

static __attribute__((noinline)) int post_runs(void *cpriv, const struct remora_wr *wrs,
					       unsigned n, int32_t *status, unsigned pflags)
{
	return rt_host_post_with(cpriv, wrs, n, status, pflags, NULL);
}

int rt_host_post(void *cpriv, const struct remora_wr *wrs, unsigned n, int32_t *status,
		 unsigned pflags)
{
	return rt_host_post_split(cpriv, wrs, n, status, pflags, NULL, post_runs);
}

void rt_host_prefetch(void *cpriv, const struct remora_wr *wrs, unsigned n)
{
	struct rt_host_chan *c = cpriv;

	for (unsigned i = 0; i < n; i++) {
		uint16_t node = remora_gaddr_node(wrs[i].raddr);

		if (node >= REMORA_MAX_MN || !c->t->nodes[node].base)
			continue;
		/* The offset is not validated yet: one past the mapping is a wasted hint. */
		rt_host_prefetch_wr((uintptr_t)c->t->nodes[node].base +
				    remora_gaddr_off(wrs[i].raddr), &wrs[i]);
	}
}
