/* SPDX-License-Identifier: MIT */
/*
 * shm pools: one file per memory node, <dir>/remora-<cluster>-mn<N> (mode 0600), mapped
 * MAP_SHARED by the memory node and by every compute node that attaches. Layout in rshm.h:
 * a header (magic, layout, region table, arbiter word, fence slots), then the usable bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "rshm.h"

#define HUGETLBFS_MAGIC_ 0x958458f6

static size_t round_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

/*
 * Maps len bytes of fd shared. With huge, the mapping starts 2 MiB aligned (so the usable area,
 * at a 2 MiB offset, is too) and is advised for transparent huge pages; THP may still decline.
 */
static int map_file(int fd, size_t len, bool huge, void **map)
{
	size_t a = RSHM_HUGE_BYTES;
	char *r, *al, *m;

	if (!huge) {
		m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED)
			return -errno;
		*map = m;
		return 0;
	}
	r = mmap(NULL, len + a, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED)
		return -errno;
	al = (char *)(((uintptr_t)r + a - 1) & ~(uintptr_t)(a - 1));
	m = mmap(al, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
	if (m == MAP_FAILED) {
		int rc = -errno;

		munmap(r, len + a);
		return rc;
	}
	if (al > r)
		munmap(r, (size_t)(al - r));
	if (r + len + a > al + len)
		munmap(al + len, (size_t)(r + len + a - (al + len)));
	madvise(m, len, MADV_HUGEPAGE); /* advice only: tmpfs may not do THP */
	*map = m;
	return 0;
}

static int check_header(const struct rshm_hdr *h, size_t file_len)
{
	if (h->magic != RSHM_MAGIC || h->layout != RSHM_LAYOUT)
		return -REMORA_ELAYOUT;
	if (h->hdr_bytes < RSHM_HDR_BYTES || h->hdr_bytes % 4096 ||
	    h->usable_bytes > file_len - h->hdr_bytes || h->hdr_bytes > file_len)
		return -REMORA_ELAYOUT;
	return 0;
}

/* A header that is good but for the file's length (read whatever there is of it). */
static bool truncated(int fd, struct rshm_hdr *h, size_t *file_len)
{
	struct stat st;

	if (fstat(fd, &st) < 0 || pread(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h))
		return false;
	*file_len = (size_t)st.st_size;
	return h->magic == RSHM_MAGIC && h->layout == RSHM_LAYOUT &&
	       h->hdr_bytes >= RSHM_HDR_BYTES && h->hdr_bytes % 4096 == 0 &&
	       (uint64_t)h->hdr_bytes + h->usable_bytes > (uint64_t)st.st_size;
}

/* Reads and checks the header of an open pool file, without writing to it. */
static int read_header(int fd, struct rshm_hdr *h, size_t *file_len)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	if ((size_t)st.st_size < sizeof(*h) || pread(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h) ||
	    check_header(h, (size_t)st.st_size))
		return -REMORA_ELAYOUT;
	*file_len = (size_t)st.st_size;
	return 0;
}

static bool on_hugetlbfs(int fd)
{
	struct statfs sf;

	return fstatfs(fd, &sf) == 0 && (unsigned long)sf.f_type == HUGETLBFS_MAGIC_;
}

/* Sizes and maps a file this process just created, then writes the header, magic last. */
static int pool_format(struct rshm_pool *p, int fd, const struct remora_pool_spec *spec)
{
	struct rt_host_tp *t = p->h.t;
	bool hugetlb = on_hugetlbfs(fd);
	bool huge = t->cfg.hugepages || hugetlb;
	size_t hdr = huge ? RSHM_HUGE_BYTES : RSHM_HDR_BYTES;
	size_t len = hdr + round_up(spec->bytes, huge ? RSHM_HUGE_BYTES : 4096);
	struct rshm_hdr *h;
	int rc;

	if (spec->bytes == 0)
		return remora_backend_error(t->tp, -EINVAL, "pool %u: bytes must be > 0",
					    spec->node);
	/*
	 * Reserve every block now: a sparse file on a full tmpfs (Docker's /dev/shm is 64 MiB)
	 * would kill the first process that touches an unbacked page with SIGBUS.
	 */
	rc = posix_fallocate(fd, 0, (off_t)len);
	if (rc == EOPNOTSUPP || rc == EINVAL)
		rc = ftruncate(fd, (off_t)len) < 0 ? errno : 0;
	if (rc)
		return remora_backend_error(t->tp, -rc,
					    "%s: cannot reserve %zu bytes (pool_size %llu and the "
					    "header): %s; free space there or lower pool_size",
					    p->h.path, len, (unsigned long long)spec->bytes,
					    strerror(rc));
	rc = map_file(fd, len, huge, &p->map.addr);
	if (rc)
		return remora_backend_error(t->tp, rc, "%s: mmap: %s", p->h.path, strerror(-rc));
	p->map.len = len;
	rc = remora_backend_bind_numa(t->tp, t->cfg.numa_node, (char *)p->map.addr + hdr,
				      len - hdr);
	if (rc)
		return rc;
	h = p->map.addr;
	h->layout = RSHM_LAYOUT;
	h->hdr_bytes = (uint32_t)hdr;
	h->usable_bytes = spec->bytes;
	h->node = spec->node;
	h->flags = huge ? RSHM_HDR_HUGE : 0;
	__atomic_store_n(&h->magic, RSHM_MAGIC, __ATOMIC_RELEASE);
	p->hdr = h;
	return 0;
}

/* Checks an existing file without writing to it, then maps it. */
static int pool_load(struct rshm_pool *p, int fd, const struct remora_pool_spec *spec)
{
	struct rt_host_tp *t = p->h.t;
	struct rshm_hdr h;
	size_t len;
	int rc;

	rc = read_header(fd, &h, &len);
	if (rc == -REMORA_ELAYOUT && truncated(fd, &h, &len))
		/* the same words as pmem (backends/pmem/pool.c, check_super) */
		return remora_backend_error(t->tp, rc,
					    "%s: file truncated: %zu bytes, the pool needs %llu (left "
					    "untouched)", p->h.path, len,
					    (unsigned long long)(h.hdr_bytes + h.usable_bytes));
	if (rc == -REMORA_ELAYOUT)
		return remora_backend_error(t->tp, rc,
					    "%s: not a remora shm pool of layout %d (left untouched)",
					    p->h.path, RSHM_LAYOUT);
	if (rc)
		return remora_backend_error(t->tp, rc, "%s: %s", p->h.path, strerror(-rc));
	if (h.node != spec->node)
		return remora_backend_error(t->tp, -REMORA_ELAYOUT,
					    "%s: holds memory node %u, not %u", p->h.path, h.node,
					    spec->node);
	/* As pmem: a kept pool reopens at its own size; it never grows. */
	if (spec->bytes > h.usable_bytes)
		return remora_backend_error(t->tp, -REMORA_EFULL,
					    "%s: pool holds %llu usable bytes, %llu requested (a pool "
					    "never grows; left untouched)", p->h.path,
					    (unsigned long long)h.usable_bytes,
					    (unsigned long long)spec->bytes);
	rc = map_file(fd, len, h.flags & RSHM_HDR_HUGE, &p->map.addr);
	if (rc)
		return remora_backend_error(t->tp, rc, "%s: mmap: %s", p->h.path, strerror(-rc));
	p->map.len = len;
	p->hdr = p->map.addr;
	/*
	 * A new incarnation, as pmem's (backends/pmem/pool.c, start_incarnation): the regions of
	 * the previous memory node go (it re-registers its own; kept, each restart would take new
	 * slots until the table is full), and CNs it fenced may join again.
	 */
	rt_regtab_clear(&p->hdr->regions);
	__atomic_store_n(&p->hdr->arbiter, 0, __ATOMIC_SEQ_CST);
	for (unsigned cn = 0; cn < REMORA_MAX_CN; cn++)
		rt_host_fence_slot_reset(&rshm_fence(p->hdr)[cn], true);
	return 0;
}

int rshm_pool_open(void *tpriv, const struct remora_pool_spec *spec, void **ppriv, void **base,
		   uint64_t *bytes)
{
	struct rshm_tp *t = tpriv;
	struct rshm_pool *p;
	bool created = false;
	int fd = -1, rc;

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->h.t = &t->h;
	rc = rt_host_pool_path(t->h.dir, t->h.cluster, spec->node, p->h.path, sizeof(p->h.path));
	if (rc) {
		remora_backend_error(t->h.tp, rc, "pool path too long");
		goto err_free;
	}
	if (spec->flags & REMORA_POOL_CREATE) {
		fd = open(p->h.path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd >= 0)
			created = true;
		else if (errno != EEXIST || (spec->flags & REMORA_POOL_EXCL))
			goto err_errno;
	}
	if (fd < 0) {
		fd = open(p->h.path, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			goto err_errno;
	}
	/* A second memory node on the same file would serve (or --format) a live database. */
	rc = rt_host_pool_lock(t->h.tp, fd, p->h.path);
	if (!rc)
		rc = created ? pool_format(p, fd, spec) : pool_load(p, fd, spec);
	if (rc) {
		close(fd);
		goto err_unmap;
	}
	p->fd = fd;
	p->h.regions = &p->hdr->regions;
	p->h.fence = rshm_fence(p->hdr);
	p->h.bytes = p->hdr->usable_bytes;
	p->h.node = spec->node;
	*ppriv = p;
	*base = (char *)p->map.addr + p->hdr->hdr_bytes;
	*bytes = p->h.bytes;
	return 0;

err_errno:
	rc = remora_backend_error(t->h.tp, -errno, "%s: %s", p->h.path, strerror(errno));
	goto err_free;
err_unmap:
	if (p->map.addr)
		munmap(p->map.addr, p->map.len);
	if (created)
		unlink(p->h.path);
err_free:
	free(p);
	return rc;
}

void rshm_pool_close(void *ppriv, bool unlink_file)
{
	struct rshm_pool *p = ppriv;

	munmap(p->map.addr, p->map.len);
	if (unlink_file)
		unlink(p->h.path);
	close(p->fd); /* releases the owner lock */
	free(p);
}

/* ---- compute-node side ---------------------------------------------------------------- */

int rshm_attach(void *tpriv, const struct remora_node_desc *desc)
{
	struct rshm_tp *t = tpriv;
	struct rshm_map *m = &t->maps[desc->node];
	struct rshm_hdr h, *hdr;
	size_t len;
	int fd, rc;

	rc = rt_host_attach_open(&t->h, desc, &fd);
	if (rc || fd < 0)
		return rc;
	if (read_header(fd, &h, &len) || h.node != desc->node || desc->bytes > h.usable_bytes) {
		close(fd);
		return remora_backend_error(t->h.tp, -REMORA_ELAYOUT,
					    "attach node %u: %s is not its remora shm pool (layout "
					    "%d)", desc->node, desc->locator, RSHM_LAYOUT);
	}
	rc = map_file(fd, len, h.flags & RSHM_HDR_HUGE, &m->addr);
	close(fd);
	if (rc)
		return remora_backend_error(t->h.tp, rc, "attach node %u: mmap: %s", desc->node,
					    strerror(-rc));
	m->len = len;
	hdr = m->addr;
	return rt_host_attach_node(&t->h, desc, (char *)m->addr + h.hdr_bytes, h.usable_bytes,
				   &hdr->regions, &hdr->arbiter, rshm_fence(hdr));
}

/* rt_host_unmap_fn: releases this process's mapping of node's pool. */
void rshm_unmap(struct rt_host_tp *h, uint16_t node)
{
	struct rshm_map *m = &rshm_tp_of(h)->maps[node];

	munmap(m->addr, m->len);
	memset(m, 0, sizeof(*m));
}
