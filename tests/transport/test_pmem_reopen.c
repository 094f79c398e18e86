/* SPDX-License-Identifier: MIT */
/*
 * pmem backend: reopening pool files. An existing valid pool opens with its bytes intact; a file
 * of another magic or layout, with a corrupted superblock, truncated, of another node or too
 * small for the request is refused with a one-line reason, and every refused file is byte for
 * byte what it was (compared in full, not by a hash). One memory node owns a pool at a time.
 * A reopen starts a new incarnation: region keys and compute nodes of the previous one are shut
 * out, and compute-node ids fenced before may attach again.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tutil.h"

TestSuite(pmem_reopen, .fini = tu_fini, .timeout = TU_TIMEOUT);

#define POOL (128u << 10)
/* Offsets in the pool file (backends/pmem/rpmem.h). */
#define OFF_LAYOUT 8
#define OFF_USABLE 16
#define OFF_FILE_BYTES 24
#define HDR_BYTES 65536

static struct remora_transport *tp;

static void need_pmem(void)
{
	if (strcmp(tu_backend(), "pmem") != 0)
		tu_skip("a pmem backend test, run with REMORA_BACKEND=%s", tu_backend());
	tp = tu_transport(-1);
}

static int try_open(uint16_t node, uint64_t bytes, uint32_t flags, struct remora_pool **out)
{
	struct remora_pool_spec spec = { .size = sizeof(spec), .node = node, .bytes = bytes,
					 .flags = flags };

	*out = NULL;
	return remora_pool_open(tp, &spec, out);
}

static struct remora_pool *must_open(uint16_t node, uint64_t bytes, uint32_t flags)
{
	struct remora_pool *p;
	int rc = try_open(node, bytes, flags, &p);

	cr_assert_eq(rc, 0, "pool_open(node %u) = %d (%s): %s", node, rc, remora_strerror(rc),
		     remora_transport_errmsg(tp));
	return p;
}

/* Creates pool node with a byte pattern over all of it, closes it (kept). */
static void make_pool(uint16_t node)
{
	struct remora_pool *p = must_open(node, POOL, REMORA_POOL_CREATE | REMORA_POOL_EXCL);

	tu_canary_fill(remora_pool_base(p), 0, POOL);
	remora_pool_close(p, false);
}

struct blob {
	uint8_t *bytes;
	size_t len;
};

static struct blob slurp(const char *path)
{
	struct blob b = { 0 };
	struct stat st;
	int fd = open(path, O_RDONLY);

	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(fstat(fd, &st), 0);
	b.len = (size_t)st.st_size;
	b.bytes = malloc(b.len ? b.len : 1);
	cr_assert_not_null(b.bytes);
	cr_assert_eq(pread(fd, b.bytes, b.len, 0), (ssize_t)b.len);
	close(fd);
	return b;
}

static void patch(const char *path, off_t off, const void *v, size_t len)
{
	int fd = open(path, O_WRONLY);

	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, v, len, off), (ssize_t)len);
	close(fd);
}

/*
 * Opens the file at node's name and expects refusal code with a one-line message containing
 * what; then checks the file did not change by a single byte.
 */
static void expect_refused(uint16_t node, uint64_t bytes, uint32_t flags, int code,
			   const char *what)
{
	struct remora_pool *p;
	char path[512];
	struct blob before, after;
	const char *msg;
	int rc;

	tu_pool_path(node, path, sizeof(path));
	before = slurp(path);
	rc = try_open(node, bytes, flags, &p);
	msg = remora_transport_errmsg(tp);
	if (rc == 0)
		remora_pool_close(p, false);
	cr_assert_eq(rc, code, "open = %d (%s), expected %d (%s): %s", rc, remora_strerror(rc),
		     code, remora_strerror(code), msg);
	cr_assert_null(p, "out pointer written on failure");
	cr_assert_null(strchr(msg, '\n'), "message is not one line: %s", msg);
	cr_assert_not_null(strstr(msg, what), "message '%s' does not say '%s'", msg, what);
	after = slurp(path);
	cr_assert_eq(after.len, before.len, "refused file changed size");
	cr_assert_eq(memcmp(after.bytes, before.bytes, before.len), 0,
		     "refused file changed its bytes");
	free(before.bytes);
	free(after.bytes);
}

static void done(void)
{
	remora_transport_close(tp);
	tp = NULL;
}

/* ---- reopen of valid pools ---------------------------------------------------------------- */

Test(pmem_reopen, create_without_excl_keeps_contents)
{
	struct remora_pool *p;

	need_pmem();
	make_pool(0);
	p = must_open(0, POOL, REMORA_POOL_CREATE);
	cr_assert_eq(remora_pool_bytes(p), POOL);
	cr_assert_eq(tu_canary_damage(remora_pool_base(p), 0, POOL), 0, "contents changed");
	remora_pool_close(p, false);
	p = must_open(0, POOL / 2, 0); /* smaller request, no CREATE: the whole pool */
	cr_assert_eq(remora_pool_bytes(p), POOL);
	cr_assert_eq(tu_canary_damage(remora_pool_base(p), 0, POOL), 0);
	remora_pool_close(p, true);
	cr_assert_eq(try_open(0, POOL, 0, &p), -ENOENT, "close with unlink left the file");
	done();
}

/*
 * REMORA_POOL_DEFER_COMMIT: the owner reads the data of a mapped pool before the backend takes
 * it over. Closed uncommitted, the file is byte for byte what it was (header included);
 * committed, the header changes (a new incarnation) and the data stays.
 */
Test(pmem_reopen, deferred_open_writes_nothing_until_commit)
{
	struct blob before, after;
	struct remora_pool *p;
	char path[512];
	uint32_t key;

	need_pmem();
	make_pool(0);
	tu_pool_path(0, path, sizeof(path));
	before = slurp(path);
	p = must_open(0, POOL, REMORA_POOL_CREATE | REMORA_POOL_DEFER_COMMIT);
	cr_assert_eq(tu_canary_damage(remora_pool_base(p), 0, POOL), 0, "data not readable");
	cr_assert_eq(remora_pool_reg(p, 0, POOL, &key), -EINVAL, "registered before the commit");
	remora_pool_close(p, false);
	after = slurp(path);
	cr_assert_eq(after.len, before.len);
	cr_assert_eq(memcmp(after.bytes, before.bytes, before.len), 0,
		     "an uncommitted open changed the file");
	free(after.bytes);

	p = must_open(0, POOL, REMORA_POOL_DEFER_COMMIT);
	cr_assert_eq(remora_pool_commit(p), 0, "%s", remora_transport_errmsg(tp));
	cr_assert_eq(remora_pool_commit(p), 0, "a second commit is a no-op");
	cr_assert_eq(remora_pool_reg(p, 0, POOL, &key), 0, "%s", remora_transport_errmsg(tp));
	remora_pool_close(p, false);
	after = slurp(path);
	cr_assert_neq(memcmp(after.bytes, before.bytes, HDR_BYTES), 0,
		      "a commit started no incarnation");
	cr_assert_eq(memcmp(after.bytes + HDR_BYTES, before.bytes + HDR_BYTES,
			    before.len - HDR_BYTES), 0, "a commit changed the data");
	free(before.bytes);
	free(after.bytes);
	done();
}

Test(pmem_reopen, excl_on_existing_refused)
{
	need_pmem();
	make_pool(0);
	expect_refused(0, POOL, REMORA_POOL_CREATE | REMORA_POOL_EXCL, -EEXIST, "exists");
	done();
}

Test(pmem_reopen, too_small_for_request_refused)
{
	need_pmem();
	make_pool(0);
	expect_refused(0, 2 * POOL, REMORA_POOL_CREATE, -REMORA_EFULL, "requested");
	done();
}

/* ---- files that are not this pool --------------------------------------------------------- */

/* Writes len bytes at off of pool 0's file, then reopening must fail naming what it found. */
static void patched_file_refused(off_t off, const void *bytes, size_t len, const char *needle)
{
	char path[512];

	need_pmem();
	make_pool(0);
	tu_pool_path(0, path, sizeof(path));
	patch(path, off, bytes, len);
	expect_refused(0, POOL, REMORA_POOL_CREATE, -REMORA_ELAYOUT, needle);
	done();
}

Test(pmem_reopen, bad_magic_refused)
{
	patched_file_refused(0, "NOTAPOOL", 8, "magic");
}

Test(pmem_reopen, other_layout_refused)
{
	uint32_t layout = 2;

	patched_file_refused(OFF_LAYOUT, &layout, sizeof(layout), "layout 2");
}

Test(pmem_reopen, corrupted_header_refused)
{
	uint64_t usable = POOL * 4; /* plausible, but not what the CRC covers */

	patched_file_refused(OFF_USABLE, &usable, sizeof(usable), "checksum");
}

Test(pmem_reopen, truncated_file_refused)
{
	char path[512];
	struct stat st;

	need_pmem();
	make_pool(0);
	tu_pool_path(0, path, sizeof(path));
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(truncate(path, st.st_size - 4096), 0);
	expect_refused(0, POOL, REMORA_POOL_CREATE, -REMORA_ELAYOUT, "truncated");
	cr_assert_eq(truncate(path, 100), 0); /* not even a header */
	expect_refused(0, POOL, REMORA_POOL_CREATE, -REMORA_ELAYOUT, "not a remora pmem pool");
	done();
}

Test(pmem_reopen, other_node_refused)
{
	char p0[512], p1[512];

	need_pmem();
	make_pool(0);
	tu_pool_path(0, p0, sizeof(p0));
	tu_pool_path(1, p1, sizeof(p1));
	cr_assert_eq(rename(p0, p1), 0);
	expect_refused(1, POOL, REMORA_POOL_CREATE, -REMORA_ELAYOUT, "memory node 0");
	done();
}

/* A shm pool where a pmem pool is expected: another backend's layout, never reformatted. */
Test(pmem_reopen, shm_pool_refused)
{
	struct remora_transport_cfg cfg;
	struct remora_transport *shm;
	struct remora_pool_spec spec = { .size = sizeof(spec), .node = 0, .bytes = POOL,
					 .flags = REMORA_POOL_CREATE | REMORA_POOL_EXCL };
	struct remora_pool *p;

	need_pmem();
	tu_cfg(&cfg, -1);
	cfg.backend = "shm";
	cr_assert_eq(remora_transport_open(&cfg, &shm), 0, "%s", remora_last_error());
	cr_assert_eq(remora_pool_open(shm, &spec, &p), 0, "%s", remora_transport_errmsg(shm));
	tu_canary_fill(remora_pool_base(p), 0, POOL);
	remora_pool_close(p, false);
	remora_transport_close(shm);
	expect_refused(0, POOL, REMORA_POOL_CREATE, -REMORA_ELAYOUT, "not a remora pmem pool");
	done();
}

/* ---- places a pool cannot be -------------------------------------------------------------- */

Test(pmem_reopen, unusable_dir_one_line_error)
{
	struct remora_transport_cfg cfg;
	struct remora_transport *t2;
	struct remora_pool_spec spec = { .size = sizeof(spec), .node = 0, .bytes = POOL,
					 .flags = REMORA_POOL_CREATE };
	const char *dirs[] = { "missing", "plainfile" };
	char dir[600], file[600];
	struct remora_pool *p = NULL;
	const char *msg;
	int rc, fd;

	need_pmem();
	snprintf(file, sizeof(file), "%s/plainfile", tu_dir());
	fd = open(file, O_CREAT | O_WRONLY, 0600);
	cr_assert_geq(fd, 0);
	close(fd);
	for (unsigned i = 0; i < 2; i++) {
		snprintf(dir, sizeof(dir), "%s/%s", tu_dir(), dirs[i]);
		tu_cfg(&cfg, -1);
		cfg.dir = dir;
		cr_assert_eq(remora_transport_open(&cfg, &t2), 0, "%s", remora_last_error());
		rc = remora_pool_open(t2, &spec, &p);
		msg = remora_transport_errmsg(t2);
		cr_assert_lt(rc, 0, "pool in %s opened", dir);
		cr_assert_null(p);
		cr_assert_null(strchr(msg, '\n'), "not one line: %s", msg);
		cr_assert_not_null(strstr(msg, dir), "message does not name the place: %s", msg);
		remora_transport_close(t2);
	}
	done();
}

/* ---- ownership and incarnations ----------------------------------------------------------- */

Test(pmem_reopen, second_memory_node_refused)
{
	struct remora_pool *p, *q;

	need_pmem();
	make_pool(0);
	p = must_open(0, POOL, REMORA_POOL_CREATE);
	expect_refused(0, POOL, REMORA_POOL_CREATE, -EBUSY, "in use");
	cr_assert_eq(tu_canary_damage(remora_pool_base(p), 0, POOL), 0);
	remora_pool_close(p, false);
	q = must_open(0, POOL, REMORA_POOL_CREATE);
	remora_pool_close(q, true);
	done();
}

static struct remora_transport *attach_cn(int cn, struct remora_pool *p, struct remora_chan **ch,
					  int *attach_rc)
{
	struct remora_transport *t = tu_transport(cn);
	struct remora_node_desc d;

	cr_assert_eq(remora_pool_describe(p, &d), 0);
	*attach_rc = remora_transport_attach(t, &d);
	*ch = NULL;
	if (*attach_rc == 0)
		cr_assert_eq(remora_chan_open(t, ch), 0);
	return t;
}

Test(pmem_reopen, reopen_starts_new_incarnation)
{
	struct remora_transport *old_cn, *fenced_cn;
	struct remora_chan *old_ch, *fenced_ch;
	struct remora_node_desc d;
	struct remora_pool *p;
	uint32_t key, key2;
	uint64_t v = 7;
	int rc;

	need_pmem();
	p = must_open(0, POOL, REMORA_POOL_CREATE | REMORA_POOL_EXCL);
	cr_assert_eq(remora_pool_reg(p, 0, POOL, &key), 0);
	old_cn = attach_cn(3, p, &old_ch, &rc);
	cr_assert_eq(rc, 0);
	cr_assert_eq(remora_write(old_ch, remora_gaddr_make(0, 64), key, &v, 8), 0);
	cr_assert_eq(remora_pool_fence(p, 5), 0);
	fenced_cn = attach_cn(5, p, &fenced_ch, &rc);
	cr_assert_eq(rc, -REMORA_EFENCED, "fenced cn attached: %d", rc);
	remora_transport_close(fenced_cn);

	/* The memory node restarts while compute node 3 still has the pool mapped. */
	remora_pool_close(p, false);
	p = must_open(0, POOL, REMORA_POOL_CREATE);
	cr_assert_eq(remora_pool_describe(p, &d), 0);
	cr_assert_eq(d.nregions, 0, "regions of the previous incarnation survived");
	cr_assert_eq(remora_pool_reg(p, 0, POOL, &key2), 0);
	rc = remora_write(old_ch, remora_gaddr_make(0, 128), key, &v, 8);
	cr_assert_eq(rc, -REMORA_EFENCED, "a compute node of the previous incarnation wrote: %d",
		     rc);
	cr_assert_eq(((uint64_t *)remora_pool_base(p))[16], 0);
	remora_transport_close(old_cn);

	fenced_cn = attach_cn(5, p, &fenced_ch, &rc);
	cr_assert_eq(rc, 0, "cn 5 fenced in the previous incarnation cannot attach: %d", rc);
	cr_assert_eq(remora_write(fenced_ch, remora_gaddr_make(0, 128), key2, &v, 8), 0);
	cr_assert_eq(((uint64_t *)remora_pool_base(p))[16], 7);
	cr_assert_eq(((uint64_t *)remora_pool_base(p))[8], 7, "data of incarnation 1 lost");
	remora_transport_close(fenced_cn);
	remora_pool_close(p, true);
	done();
}

/* remora_transport_cleanup removes leftovers, never the durable pools. */
Test(pmem_reopen, cleanup_keeps_pools)
{
	struct remora_transport_cfg cfg;
	struct remora_pool *p;
	char path[512];

	need_pmem();
	make_pool(0);
	tu_cfg(&cfg, -1);
	cr_assert_eq(remora_transport_cleanup(&cfg), 0);
	tu_pool_path(0, path, sizeof(path));
	cr_assert_eq(access(path, F_OK), 0, "cleanup removed a durable pool");
	p = must_open(0, POOL, 0);
	cr_assert_eq(tu_canary_damage(remora_pool_base(p), 0, POOL), 0);
	remora_pool_close(p, true);
	done();
}
