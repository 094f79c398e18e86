/* SPDX-License-Identifier: MIT */
/*
 * pmem pools: one file per memory node, <dir>/remora-<cluster>-mn<N> (mode 0600), mapped with
 * libpmem2 by the memory node and by every compute node that attaches. Layout in rpmem.h.
 *
 * Durability rules:
 *   - A pool file appears under its name only complete: it is built as an unnamed file
 *     (O_TMPFILE, or a temporary name), persisted, and linked into place (link fails if the
 *     name exists, so two creators cannot both win).
 *   - An existing file is never reformatted. It is read with pread and checked (magic, layout,
 *     CRC, sizes, node) before anything maps or writes it; a refused file stays byte for byte
 *     as it was.
 *   - The memory node holds an exclusive flock on its pool: a second memory node on the same
 *     file is refused instead of resetting the first one's control area.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zlib.h>

#include "rpmem.h"

#define PAGE_BYTES 4096u

/* libpmem2 returns -errno for system errors and its own codes below -100000 for the rest. */
static int pmem2_code(int rc)
{
	if (rc > PMEM2_E_UNKNOWN)
		return rc;
	switch (rc) {
	case PMEM2_E_NOSUPP:
	case PMEM2_E_GRANULARITY_NOT_SUPPORTED:
	case PMEM2_E_SOURCE_TYPE_NOT_SUPPORTED:
		return -EOPNOTSUPP;
	case PMEM2_E_IO_FAIL:
		return -EIO;
	case PMEM2_E_NO_ACCESS:
		return -EACCES;
	default:
		return -EINVAL;
	}
}

/* pmem2's message without the trailing newline it sometimes carries: ours are one line. */
static const char *pmem2_msg(void)
{
	static __thread char buf[256];
	size_t n;

	snprintf(buf, sizeof(buf), "%s", pmem2_errormsg());
	n = strcspn(buf, "\n");
	buf[n] = '\0';
	return buf;
}

/*
 * Asks for PAGE granularity, the weakest, so that any file maps (pmem2 then tells what it really
 * granted: BYTE or CACHE_LINE on DAX); the map fails rather than degrade below the request.
 */
int rpmem_map_fd(int fd, struct rpmem_map *m)
{
	struct pmem2_config *cfg = NULL;
	struct pmem2_source *src = NULL;
	int rc;

	memset(m, 0, sizeof(*m));
	rc = pmem2_config_new(&cfg);
	if (rc)
		return pmem2_code(rc);
	rc = pmem2_config_set_required_store_granularity(cfg, PMEM2_GRANULARITY_PAGE);
	if (!rc)
		rc = pmem2_source_from_fd(&src, fd);
	if (!rc)
		rc = pmem2_map_new(&m->map, cfg, src);
	if (src)
		pmem2_source_delete(&src);
	pmem2_config_delete(&cfg);
	if (rc)
		return pmem2_code(rc);
	m->addr = pmem2_map_get_address(m->map);
	m->len = pmem2_map_get_size(m->map);
	m->persist = pmem2_get_persist_fn(m->map);
	m->gran = pmem2_map_get_store_granularity(m->map);
	return 0;
}

void rpmem_unmap(struct rpmem_map *m)
{
	if (m->map)
		pmem2_map_delete(&m->map);
	memset(m, 0, sizeof(*m));
}

static uint32_t super_crc(const struct rpmem_super *s)
{
	return (uint32_t)crc32(0L, (const Bytef *)s, RPMEM_CRC_BYTES);
}

/* Checks a superblock read from a file of file_bytes; why gets the reason of a refusal. */
static int check_super(const struct rpmem_super *s, uint64_t file_bytes, char *why, size_t size)
{
	if (s->magic != RPMEM_MAGIC)
		snprintf(why, size, "not a remora pmem pool (magic %#llx)",
			 (unsigned long long)s->magic);
	else if (s->layout != RPMEM_LAYOUT)
		snprintf(why, size, "pool layout %u, this build reads layout %d", s->layout,
			 RPMEM_LAYOUT);
	else if (s->crc != super_crc(s))
		snprintf(why, size, "header checksum mismatch: the superblock is corrupted");
	else if (s->hdr_bytes != RPMEM_HDR_BYTES || s->flags != 0 ||
		 s->usable_bytes == 0 || s->usable_bytes > REMORA_GADDR_OFF_MASK ||
		 s->file_bytes < (uint64_t)s->hdr_bytes + s->usable_bytes)
		snprintf(why, size, "superblock sizes are inconsistent");
	else if (file_bytes < s->file_bytes)
		snprintf(why, size, "file truncated: %llu bytes, the pool needs %llu",
			 (unsigned long long)file_bytes, (unsigned long long)s->file_bytes);
	else
		return 0;
	return -REMORA_ELAYOUT;
}

/* Reads and checks the superblock of an open pool file, without writing anything. */
static int read_super(struct remora_transport *tp, int fd, const char *path, uint16_t node,
		      struct rpmem_super *s)
{
	char why[128];
	struct stat st;
	ssize_t got;

	if (fstat(fd, &st) < 0)
		return remora_backend_error(tp, -errno, "%s: %s", path, strerror(errno));
	memset(s, 0, sizeof(*s));
	got = pread(fd, s, sizeof(*s), 0);
	if (got < 0)
		return remora_backend_error(tp, -errno, "%s: %s", path, strerror(errno));
	if (got < (ssize_t)sizeof(*s) || (uint64_t)st.st_size < RPMEM_HDR_BYTES)
		return remora_backend_error(tp, -REMORA_ELAYOUT,
					    "%s: not a remora pmem pool (%lld bytes, too short for "
					    "a header; left untouched)", path, (long long)st.st_size);
	if (check_super(s, (uint64_t)st.st_size, why, sizeof(why)))
		return remora_backend_error(tp, -REMORA_ELAYOUT, "%s: %s (left untouched)", path,
					    why);
	if (s->node != node)
		return remora_backend_error(tp, -REMORA_ELAYOUT,
					    "%s: holds memory node %u, not %u (left untouched)",
					    path, s->node, node);
	return 0;
}

static void read_boot_id(char *buf, size_t size)
{
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

	buf[0] = '\0';
	if (!f)
		return;
	if (!fgets(buf, (int)size, f))
		buf[0] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	fclose(f);
}

/* Re-initializes the volatile part of the header and marks the pool open (not clean). */
static void start_incarnation(struct rpmem_pool *p, bool fresh)
{
	struct rpmem_ctl *ctl = rpmem_ctl_of(p->m.addr);
	struct rpmem_state *st = rpmem_state_of(p->m.addr);
	char boot[sizeof(ctl->boot_id)];
	bool same_boot;

	read_boot_id(boot, sizeof(boot));
	same_boot = !fresh && boot[0] && strncmp(ctl->boot_id, boot, sizeof(boot)) == 0;
	rt_regtab_clear(&ctl->regions);
	__atomic_store_n(&ctl->arbiter, 0, __ATOMIC_SEQ_CST);
	for (unsigned cn = 0; cn < REMORA_MAX_CN; cn++)
		rt_host_fence_slot_reset(&rpmem_fence(p->m.addr)[cn], same_boot);
	memcpy(ctl->boot_id, boot, sizeof(boot));
	st->clean = 0;
	st->opens++;
	p->m.persist(p->m.addr, RPMEM_HDR_BYTES);
}

/* An unnamed file in dir, or (file systems without O_TMPFILE) "<path>.new<random>". */
static int create_tmp(struct rpmem_pool *p, char *tmp, size_t size)
{
	char dir[PATH_MAX];
	char *slash;
	int fd;

	snprintf(dir, sizeof(dir), "%s", p->h.path);
	slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	fd = open(slash ? dir : ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	tmp[0] = '\0';
	if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR))
		return fd;
	if ((size_t)snprintf(tmp, size, "%s.newXXXXXX", p->h.path) >= size) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return mkostemp(tmp, O_CLOEXEC);
}

/* Links the finished file to its name; fails with EEXIST when someone else's pool got there. */
static int publish(int fd, const char *tmp, const char *path)
{
	char proc[64];
	int rc;

	if (tmp[0]) {
		rc = link(tmp, path);
		unlink(tmp);
	} else {
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
		rc = linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW);
	}
	return rc < 0 ? -errno : 0;
}

static void sync_dir(const char *path)
{
	char dir[PATH_MAX];
	char *slash;
	int fd;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	fd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

static void fill_super(struct rpmem_super *s, const struct remora_pool_spec *spec, size_t len)
{
	struct timespec now;

	memset(s, 0, sizeof(*s));
	clock_gettime(CLOCK_REALTIME, &now);
	s->layout = RPMEM_LAYOUT;
	s->hdr_bytes = RPMEM_HDR_BYTES;
	s->usable_bytes = spec->bytes;
	s->file_bytes = len;
	s->node = spec->node;
	s->created_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
	if (getrandom(s->uuid, sizeof(s->uuid), 0) != (ssize_t)sizeof(s->uuid))
		memcpy(s->uuid, &s->created_ns, sizeof(s->created_ns));
	s->magic = RPMEM_MAGIC;
	s->crc = super_crc(s);
}

/*
 * Builds a new pool in an unnamed file: blocks allocated up front (a DAX page fault on a full
 * file system would be SIGBUS, not an error code), header written and persisted, then linked.
 * Returns 0, -EEXIST when the name appeared meanwhile, or an error with the message set.
 */
static int pool_create(struct rpmem_pool *p, const struct remora_pool_spec *spec)
{
	struct remora_transport *tp = p->h.t->tp;
	size_t len = RPMEM_HDR_BYTES + (spec->bytes + PAGE_BYTES - 1) / PAGE_BYTES * PAGE_BYTES;
	struct rpmem_super *s;
	char tmp[PATH_MAX];
	int rc;

	p->fd = create_tmp(p, tmp, sizeof(tmp));
	if (p->fd < 0)
		return remora_backend_error(tp, -errno, "%s: cannot create the pool: %s", p->h.path,
					    strerror(errno));
	rc = posix_fallocate(p->fd, 0, (off_t)len);
	if (rc == EOPNOTSUPP || rc == EINVAL)
		rc = ftruncate(p->fd, (off_t)len) < 0 ? errno : 0;
	if (rc) {
		rc = remora_backend_error(tp, -rc, "%s: cannot allocate %zu bytes: %s", p->h.path,
					  len, strerror(rc));
		goto err_close;
	}
	flock(p->fd, LOCK_EX | LOCK_NB); /* nobody else can see this file yet */
	rc = rpmem_map_fd(p->fd, &p->m);
	if (rc) {
		rc = remora_backend_error(tp, rc, "%s: libpmem2 cannot map a file there: %s",
					  p->h.path, pmem2_msg());
		goto err_close;
	}
	s = (struct rpmem_super *)(void *)p->m.addr;
	fill_super(s, spec, len);
	start_incarnation(p, true);
	fsync(p->fd); /* the file's size and blocks (metadata) */
	rc = publish(p->fd, tmp, p->h.path);
	if (rc) {
		if (rc != -EEXIST)
			remora_backend_error(tp, rc, "%s: %s", p->h.path, strerror(-rc));
		goto err_unmap;
	}
	sync_dir(p->h.path);
	p->h.bytes = spec->bytes;
	return 0;

err_unmap:
	rpmem_unmap(&p->m);
err_close:
	if (tmp[0])
		unlink(tmp);
	close(p->fd);
	p->fd = -1;
	return rc;
}

/* Opens an existing pool: refuse without writing, or map it and (unless deferred) take it over. */
static int pool_load(struct rpmem_pool *p, const struct remora_pool_spec *spec)
{
	struct remora_transport *tp = p->h.t->tp;
	struct rpmem_super s;
	int rc;

	rc = rt_host_pool_lock(tp, p->fd, p->h.path);
	if (rc)
		return rc;
	rc = read_super(tp, p->fd, p->h.path, spec->node, &s);
	if (rc)
		return rc;
	if (spec->bytes > s.usable_bytes)
		return remora_backend_error(tp, -REMORA_EFULL,
					    "%s: pool holds %llu usable bytes, %llu requested (a "
					    "pool never grows; left untouched)", p->h.path,
					    (unsigned long long)s.usable_bytes,
					    (unsigned long long)spec->bytes);
	rc = rpmem_map_fd(p->fd, &p->m);
	if (rc)
		return remora_backend_error(tp, rc, "%s: libpmem2 cannot map it: %s", p->h.path,
					    pmem2_msg());
	if (p->m.len < s.file_bytes) { /* it shrank between the check and the map */
		rpmem_unmap(&p->m);
		return remora_backend_error(tp, -REMORA_ELAYOUT, "%s: file truncated", p->h.path);
	}
	/*
	 * Deferred: the owner reads the data first and may refuse the pool, which must then stay
	 * byte for byte as it was (header included); rpmem_pool_commit starts the incarnation.
	 */
	p->uncommitted = spec->flags & REMORA_POOL_DEFER_COMMIT;
	if (!p->uncommitted)
		start_incarnation(p, false);
	p->h.bytes = s.usable_bytes;
	return 0;
}

/* Opens path if it exists. 1: opened (p->fd), 0: does not exist, < 0: error (message set). */
static int open_existing(struct rpmem_pool *p)
{
	p->fd = open(p->h.path, O_RDWR | O_CLOEXEC);
	if (p->fd >= 0)
		return 1;
	if (errno == ENOENT)
		return 0;
	return remora_backend_error(p->h.t->tp, -errno, "%s: %s", p->h.path, strerror(errno));
}

int rpmem_pool_open(void *tpriv, const struct remora_pool_spec *spec, void **ppriv, void **base,
		    uint64_t *bytes)
{
	struct rpmem_tp *t = tpriv;
	struct remora_transport *tp = t->h.tp;
	struct rpmem_pool *p;
	int rc;

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->h.t = &t->h;
	p->fd = -1;
	p->h.node = spec->node;
	p->unlink = spec->flags & REMORA_POOL_UNLINK_ON_CLOSE;
	rc = rt_host_pool_path(t->h.dir, t->h.cluster, spec->node, p->h.path, sizeof(p->h.path));
	if (rc) {
		remora_backend_error(tp, rc, "pool path too long");
		goto err_free;
	}
	for (;;) {
		rc = open_existing(p);
		if (rc < 0)
			goto err_free;
		if (rc == 1 && (spec->flags & REMORA_POOL_CREATE) &&
		    (spec->flags & REMORA_POOL_EXCL)) {
			rc = remora_backend_error(tp, -EEXIST, "%s: pool exists (left untouched)",
						  p->h.path);
			goto err_close;
		}
		if (rc == 1) {
			rc = pool_load(p, spec);
			if (rc)
				goto err_close;
			break;
		}
		if (!(spec->flags & REMORA_POOL_CREATE)) {
			rc = remora_backend_error(tp, -ENOENT, "%s: no such pool", p->h.path);
			goto err_free;
		}
		if (spec->bytes == 0) {
			rc = remora_backend_error(tp, -EINVAL, "pool %u: bytes must be > 0",
						  spec->node);
			goto err_free;
		}
		rc = pool_create(p, spec);
		if (rc == 0)
			break;
		if (rc == -EEXIST && (spec->flags & REMORA_POOL_EXCL))
			remora_backend_error(tp, rc, "%s: pool exists (left untouched)", p->h.path);
		if (rc != -EEXIST || (spec->flags & REMORA_POOL_EXCL))
			goto err_free;
		/* another process created it first: open theirs */
	}
	p->h.regions = &rpmem_ctl_of(p->m.addr)->regions;
	p->h.fence = rpmem_fence(p->m.addr);
	*ppriv = p;
	*base = p->m.addr + RPMEM_HDR_BYTES;
	*bytes = p->h.bytes;
	return 0;

err_close:
	close(p->fd);
err_free:
	free(p);
	return rc;
}

/*
 * Kept: everything is persisted, then the pool is marked clean. Unlinked: nothing to persist.
 * Closing the descriptor releases the memory node's flock.
 */
void rpmem_pool_close(void *ppriv, bool unlink_file)
{
	struct rpmem_pool *p = ppriv;
	struct rpmem_state *st = rpmem_state_of(p->m.addr);

	if (unlink_file || p->unlink) {
		unlink(p->h.path);
	} else if (!p->uncommitted) { /* an uncommitted pool was never ours: leave it as found */
		p->m.persist(p->m.addr + RPMEM_HDR_BYTES, p->h.bytes);
		st->clean = 1;
		p->m.persist(st, sizeof(*st));
	}
	rpmem_unmap(&p->m);
	close(p->fd);
	free(p);
}

int rpmem_pool_commit(void *ppriv)
{
	struct rpmem_pool *p = ppriv;

	if (p->uncommitted) {
		start_incarnation(p, false);
		p->uncommitted = false;
	}
	return 0;
}

int rpmem_pool_persist(void *ppriv, uint64_t off, uint64_t len)
{
	struct rpmem_pool *p = ppriv;

	if (len)
		p->m.persist(p->m.addr + RPMEM_HDR_BYTES + off, len);
	return 0;
}

/* ---- compute-node side ---------------------------------------------------------------- */

int rpmem_attach(void *tpriv, const struct remora_node_desc *desc)
{
	struct rpmem_tp *t = tpriv;
	struct remora_transport *tp = t->h.tp;
	struct rpmem_map *m = &t->maps[desc->node];
	struct rpmem_ctl *ctl;
	struct rpmem_super s;
	int fd, rc;

	rc = rt_host_attach_open(&t->h, desc, &fd);
	if (rc || fd < 0)
		return rc;
	rc = read_super(tp, fd, desc->locator, desc->node, &s);
	if (!rc && desc->bytes > s.usable_bytes)
		rc = remora_backend_error(tp, -REMORA_ELAYOUT,
					  "attach node %u: %s holds %llu bytes, descriptor says %llu",
					  desc->node, desc->locator,
					  (unsigned long long)s.usable_bytes,
					  (unsigned long long)desc->bytes);
	if (!rc) {
		rc = rpmem_map_fd(fd, m);
		if (rc)
			remora_backend_error(tp, rc, "attach node %u: %s: libpmem2: %s",
					     desc->node, desc->locator, pmem2_msg());
	}
	close(fd);
	if (rc)
		return rc;
	ctl = rpmem_ctl_of(m->addr);
	return rt_host_attach_node(&t->h, desc, m->addr + RPMEM_HDR_BYTES, s.usable_bytes,
				   &ctl->regions, &ctl->arbiter, rpmem_fence(m->addr));
}

/* rt_host_unmap_fn: releases this process's mapping of node's pool. */
void rpmem_unmap_node(struct rt_host_tp *h, uint16_t node)
{
	rpmem_unmap(&rpmem_tp_of(h)->maps[node]);
}
