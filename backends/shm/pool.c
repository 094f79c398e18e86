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

#include "remora_config.h"
#include "rshm.h"

#if REMORA_HAVE_NUMA
#include <numa.h>
#endif

#define HUGETLBFS_MAGIC_ 0x958458f6

int rshm_pool_path(const struct rshm_tp *t, unsigned node, char *buf, size_t size)
{
	char what[16];
	char name[128];
	int rc;

	snprintf(what, sizeof(what), "mn%u", node);
	rc = remora_backend_cluster_name(t->cluster, what, name, sizeof(name));
	if (rc)
		return rc;
	if ((size_t)snprintf(buf, size, "%s/%s", t->dir, name) >= size)
		return -ENAMETOOLONG;
	return 0;
}

static size_t round_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

/*
 * Maps len bytes of fd shared. With huge, the mapping starts 2 MiB aligned (so the usable area,
 * at a 2 MiB offset, is too) and is advised for transparent huge pages; THP may still decline.
 */
int rshm_map_file(int fd, size_t len, bool huge, void **map)
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

int rshm_check_header(const struct rshm_hdr *h, size_t file_len)
{
	if (h->magic != RSHM_MAGIC || h->layout != RSHM_LAYOUT)
		return -REMORA_ELAYOUT;
	if (h->hdr_bytes < RSHM_HDR_BYTES || h->hdr_bytes % 4096 ||
	    h->usable_bytes > file_len - h->hdr_bytes || h->hdr_bytes > file_len)
		return -REMORA_ELAYOUT;
	return 0;
}

static int bind_numa(struct rshm_tp *t, void *p, size_t len)
{
	if (t->cfg.numa_node < 0)
		return 0;
#if REMORA_HAVE_NUMA
	if (numa_available() < 0 || t->cfg.numa_node > numa_max_node())
		return remora_backend_error(t->tp, -REMORA_ECONFIG,
					    "NUMA node %d not available on this host",
					    t->cfg.numa_node);
	numa_tonode_memory(p, len, t->cfg.numa_node);
	return 0;
#else
	(void)p, (void)len;
	return remora_backend_error(t->tp, -REMORA_ECONFIG,
				    "NUMA binding requested but remora was built without libnuma");
#endif
}

static bool on_hugetlbfs(int fd)
{
	struct statfs sf;

	return fstatfs(fd, &sf) == 0 && (unsigned long)sf.f_type == HUGETLBFS_MAGIC_;
}

/* Sizes and maps a file this process just created, then writes the header, magic last. */
static int pool_format(struct rshm_pool *p, int fd, const struct remora_pool_spec *spec)
{
	struct rshm_tp *t = p->t;
	bool hugetlb = on_hugetlbfs(fd);
	bool huge = t->cfg.hugepages || hugetlb;
	size_t hdr = huge ? RSHM_HUGE_BYTES : RSHM_HDR_BYTES;
	size_t len = hdr + round_up(spec->bytes, huge ? RSHM_HUGE_BYTES : 4096);
	struct rshm_hdr *h;
	int rc;

	if (spec->bytes == 0)
		return remora_backend_error(t->tp, -EINVAL, "pool %u: bytes must be > 0",
					    spec->node);
	if (ftruncate(fd, (off_t)len) < 0)
		return remora_backend_error(t->tp, -errno, "%s: ftruncate %zu: %s", p->path, len,
					    strerror(errno));
	rc = rshm_map_file(fd, len, huge, &p->map);
	if (rc)
		return remora_backend_error(t->tp, rc, "%s: mmap: %s", p->path, strerror(-rc));
	p->map_len = len;
	rc = bind_numa(t, (char *)p->map + hdr, len - hdr);
	if (rc)
		return rc;
	h = p->map;
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
	struct rshm_tp *t = p->t;
	struct rshm_hdr h;
	struct stat st;
	int rc;

	if (fstat(fd, &st) < 0)
		return -errno;
	if ((size_t)st.st_size < sizeof(h) || pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    rshm_check_header(&h, (size_t)st.st_size))
		return remora_backend_error(t->tp, -REMORA_ELAYOUT,
					    "%s: not a remora shm pool of layout %d (left untouched)",
					    p->path, RSHM_LAYOUT);
	if (h.node != spec->node)
		return remora_backend_error(t->tp, -REMORA_ELAYOUT,
					    "%s: holds memory node %u, not %u", p->path, h.node,
					    spec->node);
	if (spec->bytes && spec->bytes != h.usable_bytes)
		return remora_backend_error(t->tp, -EINVAL,
					    "%s: pool has %llu usable bytes, %llu requested",
					    p->path, (unsigned long long)h.usable_bytes,
					    (unsigned long long)spec->bytes);
	rc = rshm_map_file(fd, (size_t)st.st_size, h.flags & RSHM_HDR_HUGE, &p->map);
	if (rc)
		return remora_backend_error(t->tp, rc, "%s: mmap: %s", p->path, strerror(-rc));
	p->map_len = (size_t)st.st_size;
	p->hdr = p->map;
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
	p->t = t;
	rc = rshm_pool_path(t, spec->node, p->path, sizeof(p->path));
	if (rc) {
		remora_backend_error(t->tp, rc, "pool path too long");
		goto err_free;
	}
	if (spec->flags & REMORA_POOL_CREATE) {
		fd = open(p->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd >= 0)
			created = true;
		else if (errno != EEXIST || (spec->flags & REMORA_POOL_EXCL))
			goto err_errno;
	}
	if (fd < 0) {
		fd = open(p->path, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			goto err_errno;
	}
	rc = created ? pool_format(p, fd, spec) : pool_load(p, fd, spec);
	close(fd);
	if (rc)
		goto err_unmap;
	*ppriv = p;
	*base = (char *)p->map + p->hdr->hdr_bytes;
	*bytes = p->hdr->usable_bytes;
	return 0;

err_errno:
	rc = remora_backend_error(t->tp, -errno, "%s: %s", p->path, strerror(errno));
	goto err_free;
err_unmap:
	if (p->map)
		munmap(p->map, p->map_len);
	if (created)
		unlink(p->path);
err_free:
	free(p);
	return rc;
}

void rshm_pool_close(void *ppriv, bool unlink_file)
{
	struct rshm_pool *p = ppriv;

	munmap(p->map, p->map_len);
	if (unlink_file)
		unlink(p->path);
	free(p);
}

int rshm_pool_reg(void *ppriv, uint64_t off, uint64_t len, uint32_t *key)
{
	struct rshm_pool *p = ppriv;
	int rc = rt_regtab_reg(&p->hdr->regions, off, len, key);

	if (rc)
		return remora_backend_error(p->t->tp, rc, "%s: all %d regions in use", p->path,
					    REMORA_MAX_REGIONS);
	return 0;
}

int rshm_pool_dereg(void *ppriv, uint32_t key)
{
	struct rshm_pool *p = ppriv;
	int rc = rt_regtab_dereg(&p->hdr->regions, key);

	if (rc)
		return remora_backend_error(p->t->tp, rc, "%s: no region with key %#x", p->path,
					    key);
	return 0;
}

int rshm_pool_fence(void *ppriv, uint16_t cn)
{
	struct rshm_pool *p = ppriv;
	int rc = remora_fence_slot_fence(rshm_fence_slot(p->hdr, cn));

	if (rc)
		return remora_backend_error(p->t->tp, rc,
					    "fence of compute node %u: membarrier not permitted here",
					    cn);
	return 0;
}

int rshm_pool_describe(void *ppriv, struct remora_node_desc *desc)
{
	struct rshm_pool *p = ppriv;
	struct rshm_hdr *h = p->hdr;

	if (strlen(p->path) >= sizeof(desc->locator))
		return remora_backend_error(p->t->tp, -ENAMETOOLONG,
					    "%s: path longer than a locator (%zu bytes)", p->path,
					    sizeof(desc->locator) - 1);
	desc->node = h->node;
	desc->bytes = h->usable_bytes;
	desc->nregions = (uint16_t)rt_regtab_describe(&h->regions, desc->regions);
	snprintf(desc->locator, sizeof(desc->locator), "%s", p->path);
	return 0;
}

/* ---- compute-node side ---------------------------------------------------------------- */

/*
 * Remembers which region generation the descriptor describes. If the pool's table already
 * differs from desc, no generation matches and every verb is checked against the live table.
 */
static void note_region_gen(struct rshm_node *n, const struct remora_node_desc *desc)
{
	uint64_t gen = rt_regtab_gen(&n->hdr->regions);

	n->region_gen = rt_regtab_matches(&n->hdr->regions, desc) ? gen : UINT64_MAX;
}

int rshm_attach(void *tpriv, const struct remora_node_desc *desc)
{
	struct rshm_tp *t = tpriv;
	struct rshm_node *n = &t->nodes[desc->node];
	struct rshm_hdr h;
	struct stat st;
	void *map;
	int fd, rc;

	if (n->map) {
		if (strcmp(n->locator, desc->locator) == 0) {
			note_region_gen(n, desc); /* refresh: the core copies the new table */
			return 0;
		}
		return remora_backend_error(t->tp, -EEXIST, "node %u already attached to %s",
					    desc->node, n->locator);
	}
	fd = open(desc->locator, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return remora_backend_error(t->tp, -errno, "attach node %u: %s: %s", desc->node,
					    desc->locator, strerror(errno));
	if (fstat(fd, &st) < 0 || (size_t)st.st_size < sizeof(h) ||
	    pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    rshm_check_header(&h, (size_t)st.st_size) || h.node != desc->node ||
	    desc->bytes > h.usable_bytes) {
		close(fd);
		return remora_backend_error(t->tp, -REMORA_ELAYOUT,
					    "attach node %u: %s is not its remora shm pool (layout "
					    "%d)", desc->node, desc->locator, RSHM_LAYOUT);
	}
	rc = rshm_map_file(fd, (size_t)st.st_size, h.flags & RSHM_HDR_HUGE, &map);
	close(fd);
	if (rc)
		return remora_backend_error(t->tp, rc, "attach node %u: mmap: %s", desc->node,
					    strerror(-rc));
	n->hdr = map;
	n->slot = NULL;
	if (t->cfg.self_cn >= 0) {
		n->slot = rshm_fence_slot(n->hdr, (unsigned)t->cfg.self_cn);
		rc = remora_fence_slot_join(n->slot, &n->epoch, &n->asym);
		if (rc) {
			munmap(map, (size_t)st.st_size);
			return remora_backend_error(t->tp, rc,
						    "attach node %u: compute node %d is fenced",
						    desc->node, t->cfg.self_cn);
		}
	}
	n->map = map;
	n->map_len = (size_t)st.st_size;
	n->base = (char *)map + h.hdr_bytes;
	note_region_gen(n, desc);
	snprintf(n->locator, sizeof(n->locator), "%s", desc->locator);
	return 0;
}

int rshm_detach(void *tpriv, uint16_t node)
{
	struct rshm_tp *t = tpriv;
	struct rshm_node *n = &t->nodes[node];

	if (!n->map)
		return -REMORA_ENODE;
	munmap(n->map, n->map_len);
	memset(n, 0, sizeof(*n));
	return 0;
}
