/* SPDX-License-Identifier: MIT */
/*
 * The pmem backend: memory-node pools are files mapped with libpmem2, on a DAX file system
 * (real persistent memory, or fsdax) or on any file system for development. Verbs are CPU
 * loads, stores and atomics applied at post time, as on shm; a WRITE flagged REMORA_WR_DURABLE
 * is made persistent with pmem2's persist function before its completion exists. Pools are
 * durable: reopening a pool file keeps its bytes. See README.md for what it promises.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mutate.h"
#include "rpmem.h"

#define RPMEM_MAX_BATCH 256u
#define RPMEM_MAX_OUTSTANDING 4096u
#define RPMEM_MAX_INLINE 1024u
#define PROBE_BYTES 4096

unsigned rpmem_mutations;

enum remora_persist_gran rpmem_gran(enum pmem2_granularity g)
{
	switch (g) {
	case PMEM2_GRANULARITY_BYTE:
		return REMORA_PERSIST_BYTE;
	case PMEM2_GRANULARITY_CACHE_LINE:
		return REMORA_PERSIST_CACHE_LINE;
	default:
		return REMORA_PERSIST_PAGE;
	}
}

/* An unnamed file in dir (nothing to leave behind); a named one, unlinked at once, otherwise. */
static int probe_file(const char *dir)
{
	char path[PATH_MAX];
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR))
		return fd;
	if ((size_t)snprintf(path, sizeof(path), "%s/remora-probe-XXXXXX", dir) >= sizeof(path))
		return -1;
	fd = mkostemp(path, O_CLOEXEC);
	if (fd >= 0)
		unlink(path);
	return fd;
}

/*
 * The store granularity libpmem2 grants a file in dir: maps a one-page file there. PAGE (the
 * weakest, which every pool accepts) when dir cannot hold a mappable file.
 */
static enum remora_persist_gran probe_dir(const char *dir)
{
	enum remora_persist_gran gran = REMORA_PERSIST_PAGE;
	struct rpmem_map m;
	int fd = probe_file(dir);

	if (fd < 0)
		return gran;
	if (ftruncate(fd, PROBE_BYTES) == 0 && rpmem_map_fd(fd, &m) == 0) {
		gran = rpmem_gran(m.gran);
		rpmem_unmap(&m);
	}
	close(fd);
	return gran;
}

/*
 * PERSIST always: every DURABLE verb goes through a libpmem2 persist point. persist_gran is
 * what libpmem2 grants a file in cfg->dir (default dir without cfg): BYTE on an eADR platform,
 * CACHE_LINE on PMem/fsdax mapped with MAP_SYNC, PAGE on any other file (persisted by msync).
 * What the medium keeps across a power cycle is the file system's business: tmpfs keeps
 * nothing (README.md).
 */
static int rpmem_caps(const struct remora_backend_cfg *cfg, struct remora_caps *caps)
{
	int atomics = cfg ? cfg->atomics : REMORA_ATOMICS_NATIVE;
	const char *dir = cfg && cfg->dir ? cfg->dir : RPMEM_DEFAULT_DIR;
	uint32_t all = (1u << REMORA_OP_READ) | (1u << REMORA_OP_WRITE) | (1u << REMORA_OP_CAS) |
		       (1u << REMORA_OP_FAA) | (1u << REMORA_OP_MCAS);
	struct remora_caps c = {
		.size = sizeof(c),
		.ops = all,
		.flags = REMORA_CAP_NATIVE_MCAS | REMORA_CAP_MSG | REMORA_CAP_FENCING |
			 REMORA_CAP_PERSIST,
		.persist_gran = probe_dir(dir),
		.max_batch = RPMEM_MAX_BATCH,
		.max_inline = RPMEM_MAX_INLINE,
		.max_msg = RT_MBOX_MAX,
		.max_outstanding = RPMEM_MAX_OUTSTANDING,
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

static int rpmem_open(struct remora_transport *tp, const struct remora_backend_cfg *cfg,
		      void **tpriv)
{
	struct rpmem_tp *t = calloc(1, sizeof(*t));
	int rc;

	if (!t)
		return -ENOMEM;
	t->tp = tp;
	t->cfg = *cfg;
	snprintf(t->cluster, sizeof(t->cluster), "%s", cfg->cluster);
	snprintf(t->dir, sizeof(t->dir), "%s", cfg->dir ? cfg->dir : RPMEM_DEFAULT_DIR);
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

static void rpmem_close(void *tpriv)
{
	struct rpmem_tp *t = tpriv;

	for (unsigned n = 0; n < REMORA_MAX_MN; n++)
		if (t->nodes[n].m.map)
			rpmem_detach(t, (uint16_t)n);
	rt_mbox_close(&t->mbox);
	free(t);
}

static int rpmem_chan_open(void *tpriv, struct remora_chan *ch, void **cpriv)
{
	struct rpmem_chan *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->t = tpriv;
	c->ch = ch;
	c->lane = remora_fence_lane_claim(&c->t->lanes);
	*cpriv = c;
	return 0;
}

static void rpmem_chan_close(void *cpriv)
{
	struct rpmem_chan *c = cpriv;

	remora_fence_lane_release(&c->t->lanes, c->lane);
	free(c);
}

static int rpmem_msg_send(void *cpriv, uint16_t dst_cn, const void *buf, uint32_t len)
{
	return rt_mbox_send(&((struct rpmem_chan *)cpriv)->t->mbox, dst_cn, buf, len, 0);
}

static int rpmem_msg_recv(void *cpriv, uint16_t *src_cn, void *buf, uint32_t cap)
{
	return rt_mbox_recv(&((struct rpmem_chan *)cpriv)->t->mbox, src_cn, buf, cap, UINT64_MAX);
}

static int rpmem_msg_send_at(void *cpriv, uint16_t dst_cn, const void *buf, uint32_t len,
			     uint64_t deliver_at)
{
	return rt_mbox_send(&((struct rpmem_chan *)cpriv)->t->mbox, dst_cn, buf, len, deliver_at);
}

static int rpmem_msg_recv_at(void *cpriv, uint16_t *src_cn, void *buf, uint32_t cap,
			     uint64_t now)
{
	return rt_mbox_recv(&((struct rpmem_chan *)cpriv)->t->mbox, src_cn, buf, cap, now);
}

/*
 * Removes what processes of the cluster leave behind: the message segment and the temporary
 * files of pool creations that were interrupted ("<pool>.new*", only on file systems without
 * O_TMPFILE). Pool files are not leftovers but the durable data a restart recovers from: they
 * stay (remove one with rm, or close it with unlink).
 */
static int rpmem_cleanup(const struct remora_backend_cfg *cfg)
{
	const char *dir = cfg->dir ? cfg->dir : RPMEM_DEFAULT_DIR;
	char prefix[128], path[PATH_MAX];
	int rc = rt_mbox_unlink(cfg->cluster);
	struct dirent *e;
	DIR *d;

	if (remora_backend_cluster_name(cfg->cluster, "mn", prefix, sizeof(prefix)))
		return -ENAMETOOLONG;
	d = opendir(dir);
	if (!d)
		return rc ? rc : (errno == ENOENT ? 0 : -errno);
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) || !strstr(e->d_name, ".new"))
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= sizeof(path))
			continue;
		if (unlink(path) < 0 && errno != ENOENT && !rc)
			rc = -errno;
	}
	closedir(d);
	return rc;
}

int rpmem_mutate(const char *name)
{
	if (strcmp(name, "skip_persist") == 0)
		__atomic_or_fetch(&rpmem_mutations, RPMEM_MUT_SKIP_PERSIST, __ATOMIC_RELAXED);
	else if (strcmp(name, "count_without_persist") == 0)
		__atomic_or_fetch(&rpmem_mutations, RPMEM_MUT_COUNT_NO_PERSIST, __ATOMIC_RELAXED);
	else if (strcmp(name, "none") == 0)
		__atomic_store_n(&rpmem_mutations, 0, __ATOMIC_RELAXED);
	else
		return -EINVAL;
	return 0;
}

const struct remora_backend_ops remora_backend_pmem = {
	.size = sizeof(struct remora_backend_ops),
	.flags = REMORA_BACKEND_INLINE,
	.name = "pmem",
	.description = "durable pools in files mapped with libpmem2 (DAX or regular files)",
	.caps = rpmem_caps,
	.open = rpmem_open,
	.close = rpmem_close,
	.pool_open = rpmem_pool_open,
	.pool_close = rpmem_pool_close,
	.pool_reg = rpmem_pool_reg,
	.pool_dereg = rpmem_pool_dereg,
	.pool_fence = rpmem_pool_fence,
	.pool_describe = rpmem_pool_describe,
	.pool_persist = rpmem_pool_persist,
	.attach = rpmem_attach,
	.detach = rpmem_detach,
	.chan_open = rpmem_chan_open,
	.chan_close = rpmem_chan_close,
	.post = rpmem_post,
	/* poll: inline backend, the core owns the completion queue */
	.msg_send = rpmem_msg_send,
	.msg_recv = rpmem_msg_recv,
	.persist = rpmem_persist,
	.cleanup = rpmem_cleanup,
	.msg_send_at = rpmem_msg_send_at,
	.msg_recv_at = rpmem_msg_recv_at,
};
