/* SPDX-License-Identifier: MIT */
/*
 * The cost model's shared segment, /dev/shm/remora-<cluster>-cost (mode 0600): busy_until and
 * charged service time per (memory node, verb class) and per compute node's message NIC,
 * shared by every process of the cluster so that their verbs queue behind each other at one
 * emulated NIC. All-zero is a valid initial state, so creation needs
 * no lock: whoever comes first sizes the file, everyone stamps the same magic with a CAS.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"

#define RT_RUN_DIR "/dev/shm"

static int cost_path(const char *cluster, const char *dir, char *buf, size_t size)
{
	char key[128];
	int rc = rt_seg_key(cluster, dir, key, sizeof(key));

	return rc ? rc : remora_backend_cluster_path(RT_RUN_DIR, key, "cost", buf, size);
}

int rt_cost_attach(struct remora_transport *tp)
{
	char path[PATH_MAX];
	struct rt_cost_seg *seg;
	struct stat st;
	uint64_t zero = 0;
	int fd, rc;

	rc = cost_path(tp->cluster, tp->bcfg.dir, path, sizeof(path));
	if (rc)
		return rt_last_error(rc, "cost segment name too long for cluster '%s'", tp->cluster);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return rt_last_error(-errno, "%s: %s", path, remora_strerror(-errno));
	if (fstat(fd, &st) < 0)
		goto err_errno;
	/* blocks reserved: a full /dev/shm is an error here, not SIGBUS at the first verb */
	if (st.st_size == 0 && (errno = posix_fallocate(fd, 0, sizeof(*seg))) != 0 &&
	    (errno != EOPNOTSUPP || ftruncate(fd, sizeof(*seg)) < 0))
		goto err_errno;
	if (st.st_size != 0 && st.st_size != (off_t)sizeof(*seg)) {
		close(fd);
		return rt_last_error(-REMORA_ELAYOUT, "%s: size %lld, expected %zu (other version?)",
				     path, (long long)st.st_size, sizeof(*seg));
	}
	seg = mmap(NULL, sizeof(*seg), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (seg == MAP_FAILED)
		goto err_errno;
	close(fd);
	if (!__atomic_compare_exchange_n(&seg->magic, &zero, RT_COST_MAGIC, false, __ATOMIC_SEQ_CST,
					 __ATOMIC_SEQ_CST) && zero != RT_COST_MAGIC) {
		munmap(seg, sizeof(*seg));
		return rt_last_error(-REMORA_ELAYOUT, "%s: not a remora cost segment", path);
	}
	zero = 0;
	__atomic_compare_exchange_n(&seg->version, &zero, RT_COST_VERSION, false, __ATOMIC_SEQ_CST,
				    __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&seg->version, __ATOMIC_SEQ_CST) != RT_COST_VERSION) {
		munmap(seg, sizeof(*seg));
		return rt_last_error(-REMORA_ELAYOUT, "%s: cost segment of another version", path);
	}
	tp->cost_seg = seg;
	return 0;

err_errno:
	rc = -errno;
	close(fd);
	return rt_last_error(rc, "%s: %s", path, remora_strerror(rc));
}

void rt_cost_detach(struct remora_transport *tp)
{
	if (tp->cost_seg)
		munmap(tp->cost_seg, sizeof(*tp->cost_seg));
	tp->cost_seg = NULL;
}

int rt_cost_unlink(const char *cluster, const char *dir)
{
	char path[PATH_MAX];
	int rc = cost_path(cluster, dir, path, sizeof(path));

	if (rc)
		return rc;
	if (unlink(path) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}
