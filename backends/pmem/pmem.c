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

#define PROBE_BYTES 4096

uint64_t rpmem_mutations;

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
	const char *dir = cfg && cfg->dir ? cfg->dir : RPMEM_DEFAULT_DIR;

	return rt_host_caps(cfg, caps, REMORA_CAP_PERSIST, probe_dir(dir));
}

static int rpmem_open(struct remora_transport *tp, const struct remora_backend_cfg *cfg,
		      void **tpriv)
{
	return rt_host_open(tp, cfg, RPMEM_DEFAULT_DIR, sizeof(struct rpmem_tp), rpmem_unmap_node,
			    tpriv);
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
	struct dirent *e;
	DIR *d;
	int rc = rt_host_cleanup_check(dir, cfg->cluster);

	if (rc)
		return rc;
	rc = rt_mbox_unlink(cfg->cluster, cfg->dir);
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
	uint64_t mask = __atomic_load_n(&rpmem_mutations, __ATOMIC_RELAXED);
	int rc = mut_set(&mask, MUT_PMEM, name);

	if (rc == 0)
		__atomic_store_n(&rpmem_mutations, mask, __ATOMIC_RELAXED);
	return rc;
}

const struct remora_backend_ops rt_backend_pmem = {
	.size = sizeof(struct remora_backend_ops),
	.flags = REMORA_BACKEND_INLINE,
	.name = "pmem",
	.description = "durable pools in files mapped with libpmem2 (DAX or regular files)",
	.caps = rpmem_caps,
	.open = rpmem_open,
	.close = rt_host_close,
	.pool_open = rpmem_pool_open,
	.pool_close = rpmem_pool_close,
	.pool_reg = rt_host_pool_reg,
	.pool_dereg = rt_host_pool_dereg,
	.pool_fence = rt_host_pool_fence,
	.pool_describe = rt_host_pool_describe,
	.pool_persist = rpmem_pool_persist,
	.pool_commit = rpmem_pool_commit,
	.attach = rpmem_attach,
	.detach = rt_host_detach,
	.chan_open = rt_host_chan_open,
	.chan_close = rt_host_chan_close,
	.post = rpmem_post,
	.prefetch = rt_host_prefetch,
	/* poll: inline backend, the core owns the completion queue */
	.msg_send = rt_host_msg_send,
	.msg_recv = rt_host_msg_recv,
	.persist = rpmem_persist,
	.cleanup = rpmem_cleanup,
	.msg_send_at = rt_host_msg_send_at,
	.msg_recv_at = rt_host_msg_recv_at,
};
