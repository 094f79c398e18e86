/* SPDX-License-Identifier: MIT */
/*
 * pmem backend: persist points and durable pools.
 *
 *   - Bytes written with REMORA_WR_DURABLE are in the pool file after the pool is closed and
 *     reopened, by another process, after a clean close and after the writer was SIGKILLed.
 *   - The persist counter equals the number of DURABLE verbs (WRITEs and atomics), and so does
 *     the number of msync calls libpmem2 makes when it maps at page granularity (observed by
 *     interposing msync in this executable: an oracle independent of the backend's counting).
 *   - The granularity pmem2 grants is reported in caps.persist_gran.
 *   - Negative controls (backends/pmem/mutate.h): "skip_persist" is caught by the counter
 *     check; "count_without_persist" slips past the counter and is caught by the msync oracle.
 *
 * What cannot be tested here: a power failure. Data in the page cache (regular files) or in
 * CPU caches (DAX without eADR) that was never persisted would be lost, but a process crash
 * loses nothing of a MAP_SHARED mapping, so only the persist calls themselves are observable.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "backends/pmem/mutate.h"
#include "tutil.h"

#pragma weak rpmem_mutate

TestSuite(pmem_durable, .fini = tu_fini, .timeout = TU_TIMEOUT);

#define POOL (256u << 10)
#define AREA_OFF 4096u
#define NWRITES 64u
#define WLEN 200u
#define STATE_OFF 256 /* struct rpmem_state in the pool file (backends/pmem/rpmem.h) */
#define TMPFS_MAGIC_ 0x01021994

/* ---- msync oracle: every msync of this process, libpmem2's included ------------------------ */

static uint64_t msync_calls;

/* Exported (the build hides symbols by default) so that libpmem2's calls bind to it. */
__attribute__((visibility("default"))) int msync(void *addr, size_t len, int flags)
{
	static int (*real)(void *, size_t, int);

	if (!real)
		real = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "msync");
	__atomic_add_fetch(&msync_calls, 1, __ATOMIC_RELAXED);
	return real(addr, len, flags);
}

static uint64_t msyncs(void)
{
	return __atomic_load_n(&msync_calls, __ATOMIC_RELAXED);
}

/* ---- helpers ------------------------------------------------------------------------------ */

static void need_pmem(void)
{
	if (strcmp(tu_backend(), "pmem") != 0)
		tu_skip("a pmem backend test, run with REMORA_BACKEND=%s", tu_backend());
}

static void mutate(const char *m)
{
	if (!rpmem_mutate)
		tu_skip("pmem backend not built");
	cr_assert_eq(rpmem_mutate(m), 0, "rpmem_mutate(%s)", m);
}

static struct remora_pool *pool_open(struct remora_transport *tp, uint16_t node, uint64_t bytes,
				     uint32_t flags)
{
	struct remora_pool_spec spec = { .size = sizeof(spec), .node = node, .bytes = bytes,
					 .flags = flags };
	struct remora_pool *p = NULL;
	int rc = remora_pool_open(tp, &spec, &p);

	cr_assert_eq(rc, 0, "pool_open(node %u) = %d (%s): %s", node, rc, remora_strerror(rc),
		     remora_transport_errmsg(tp));
	return p;
}

static uint8_t pattern(unsigned i, unsigned k)
{
	return (uint8_t)(i * 37 + k * 11 + 5);
}

static uint64_t file_state_word(uint16_t node, unsigned word)
{
	char path[512];
	uint64_t v = UINT64_MAX;
	int fd;

	tu_pool_path(node, path, sizeof(path));
	fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(pread(fd, &v, 8, STATE_OFF + 8 * word), 8);
	close(fd);
	return v;
}

/*
 * Memory node and compute node cn in this process: pool `node` (kept on close), one region
 * over it, attached, a channel. mn_tp is the memory node's transport.
 */
struct rig {
	struct remora_transport *mn_tp, *cn_tp;
	struct remora_pool *pool;
	struct remora_chan *ch;
	uint32_t key;
	uint16_t node;
};

/* Never asserts (usable in children): 0 or the failing step's code, printed. */
static int rig_try_open(struct rig *r, uint16_t node, int cn)
{
	struct remora_pool_spec spec = { .size = sizeof(spec), .node = node, .bytes = POOL,
					 .flags = REMORA_POOL_CREATE };
	struct remora_node_desc d;
	int rc;

	memset(r, 0, sizeof(*r));
	r->node = node;
	rc = tu_transport_try(-1, NULL, &r->mn_tp);
	TU_CHILD_CHECK(rc == 0, "mn transport: %s", remora_last_error());
	rc = remora_pool_open(r->mn_tp, &spec, &r->pool);
	TU_CHILD_CHECK(rc == 0, "pool_open: %s", remora_transport_errmsg(r->mn_tp));
	rc = remora_pool_reg(r->pool, 0, POOL, &r->key);
	TU_CHILD_CHECK(rc == 0, "pool_reg = %d", rc);
	rc = remora_pool_describe(r->pool, &d);
	TU_CHILD_CHECK(rc == 0, "describe = %d", rc);
	rc = tu_transport_try(cn, NULL, &r->cn_tp);
	TU_CHILD_CHECK(rc == 0, "cn transport: %s", remora_last_error());
	rc = remora_transport_attach(r->cn_tp, &d);
	TU_CHILD_CHECK(rc == 0, "attach = %d: %s", rc, remora_transport_errmsg(r->cn_tp));
	rc = remora_chan_open(r->cn_tp, &r->ch);
	TU_CHILD_CHECK(rc == 0, "chan_open = %d", rc);
	return 0;
}

static void rig_open(struct rig *r, uint16_t node, int cn)
{
	cr_assert_eq(rig_try_open(r, node, cn), 0, "rig_open (reason above)");
}

static void rig_close(struct rig *r, bool unlink)
{
	remora_chan_close(r->ch);
	remora_transport_close(r->cn_tp);
	remora_pool_close(r->pool, unlink);
	remora_transport_close(r->mn_tp);
}

/*
 * n WRITEs of WLEN bytes, DURABLE when durable, in batches of 8, plus one DURABLE FAA per batch
 * when atomics. Returns the number of verbs flagged DURABLE, or -1 (printed) when a batch
 * failed. Never asserts.
 */
static int write_area(struct rig *r, unsigned n, bool durable, bool atomics)
{
	static uint8_t src[NWRITES][WLEN];
	struct remora_wr wrs[9];
	unsigned k = 0;
	uint64_t old;
	int flagged = 0, rc;

	for (unsigned i = 0; i < n; i++) {
		for (unsigned b = 0; b < WLEN; b++)
			src[i][b] = pattern(i, b);
		wrs[k] = tu_wr_write(remora_gaddr_make(r->node, AREA_OFF + i * 256u), r->key,
				     src[i], WLEN);
		wrs[k].flags = durable ? REMORA_WR_DURABLE : 0;
		flagged += durable;
		if (++k < 8 && i + 1 < n)
			continue;
		if (atomics) {
			wrs[k] = tu_wr_faa(remora_gaddr_make(r->node, 0), r->key, 1, &old);
			wrs[k++].flags = REMORA_WR_DURABLE;
			flagged++;
		}
		rc = remora_exec(r->ch, wrs, k);
		if (rc) {
			fprintf(stderr, "write_area: exec = %d (%s)\n", rc, remora_strerror(rc));
			return -1;
		}
		k = 0;
	}
	return flagged;
}

static unsigned area_damage(const uint8_t *base, unsigned n)
{
	unsigned bad = 0;

	for (unsigned i = 0; i < n; i++)
		for (unsigned b = 0; b < WLEN; b++)
			bad += base[AREA_OFF + i * 256u + b] != pattern(i, b);
	return bad;
}

static enum remora_persist_gran rig_gran(struct rig *r)
{
	struct remora_caps caps;

	tu_caps(r->cn_tp, &caps);
	return (enum remora_persist_gran)caps.persist_gran;
}

/* ---- persist counter and oracle ----------------------------------------------------------- */

struct run {
	unsigned flagged;     /* verbs posted with REMORA_WR_DURABLE */
	uint64_t persists;    /* the transport's persist counter, delta */
	uint64_t syncs;       /* msync calls, delta */
	bool page;            /* pmem2 maps at page granularity: persists are msyncs */
};

static struct run durable_run(bool durable, bool atomics)
{
	struct remora_counters a, b, d;
	struct run out = { 0 };
	struct rig r;
	uint64_t s0;
	int flagged;

	rig_open(&r, 0, 1);
	out.page = rig_gran(&r) == REMORA_PERSIST_PAGE;
	remora_chan_counters(r.ch, &a);
	s0 = msyncs();
	flagged = write_area(&r, NWRITES, durable, atomics);
	cr_assert_geq(flagged, 0);
	out.flagged = (unsigned)flagged;
	out.syncs = msyncs() - s0;
	remora_chan_counters(r.ch, &b);
	remora_counters_diff(&b, &a, &d);
	out.persists = d.persists[0];
	rig_close(&r, true);
	return out;
}

/* The two checks every run must pass; false with the reason printed when one fails. */
static bool counter_ok(const struct run *x)
{
	if (x->persists == x->flagged)
		return true;
	fprintf(stderr, "counter check: %llu persists for %u DURABLE verbs\n",
		(unsigned long long)x->persists, x->flagged);
	return false;
}

static bool oracle_ok(const struct run *x)
{
	if (!x->page || x->syncs == x->flagged)
		return true;
	fprintf(stderr, "msync oracle: %llu msync calls for %u DURABLE verbs\n",
		(unsigned long long)x->syncs, x->flagged);
	return false;
}

Test(pmem_durable, persist_counter_equals_durable_verbs)
{
	struct run x;

	need_pmem();
	x = durable_run(true, true);
	cr_assert_eq(x.flagged, NWRITES + NWRITES / 8);
	cr_assert(counter_ok(&x));
	cr_assert(oracle_ok(&x));
	if (!x.page)
		cr_log_info("granularity finer than a page: the msync oracle does not apply");
}

Test(pmem_durable, plain_writes_persist_nothing)
{
	struct run x;

	need_pmem();
	x = durable_run(false, false);
	cr_assert_eq(x.flagged, 0);
	cr_assert_eq(x.persists, 0, "%llu persists without DURABLE",
		     (unsigned long long)x.persists);
	cr_assert_eq(x.syncs, 0, "%llu msync calls without DURABLE", (unsigned long long)x.syncs);
}

/* Negative control: the backend forgets its persist points; the counter check must see it. */
Test(pmem_durable, mutation_skip_persist_is_caught)
{
	struct run x;

	need_pmem();
	mutate("skip_persist");
	x = durable_run(true, false);
	mutate("none");
	cr_assert_gt(x.flagged, 0);
	cr_assert_not(counter_ok(&x), "skip_persist went unnoticed by the counter check");
}

/* Negative control: counted but not persisted; only the independent oracle can see it. */
Test(pmem_durable, mutation_count_without_persist_is_caught)
{
	struct run x;

	need_pmem();
	mutate("count_without_persist");
	x = durable_run(true, false);
	mutate("none");
	if (!x.page)
		tu_skip("pmem2 maps at a granularity finer than a page here: persists are CPU "
			"cache flushes, which this test cannot observe");
	cr_assert(counter_ok(&x), "the counter should be fooled by this mutation");
	cr_assert_not(oracle_ok(&x), "count_without_persist went unnoticed by the msync oracle");
}

/* remora_pool_persist on the memory node: a persist point over the range, not counted. */
Test(pmem_durable, pool_persist_range)
{
	struct rig r;
	uint64_t s0;

	need_pmem();
	rig_open(&r, 0, 1);
	s0 = msyncs();
	cr_assert_eq(remora_pool_persist(r.pool, 100, 5000), 0);
	cr_assert_eq(remora_pool_persist(r.pool, 0, 0), 0);
	if (rig_gran(&r) == REMORA_PERSIST_PAGE)
		cr_assert_eq(msyncs() - s0, 1, "one msync for one non-empty range");
	cr_assert_eq(remora_pool_persist(r.pool, POOL, 1), -REMORA_EBOUNDS);
	rig_close(&r, true);
}

/* ---- granularity -------------------------------------------------------------------------- */

Test(pmem_durable, granularity_reported)
{
	struct remora_caps caps, dflt = { .size = sizeof(dflt) };
	struct remora_transport *tp;
	struct statfs sf;

	need_pmem();
	tp = tu_transport(-1);
	tu_caps(tp, &caps);
	cr_assert(caps.flags & REMORA_CAP_PERSIST);
	cr_assert(caps.persist_gran == REMORA_PERSIST_BYTE ||
		  caps.persist_gran == REMORA_PERSIST_CACHE_LINE ||
		  caps.persist_gran == REMORA_PERSIST_PAGE, "persist_gran %u", caps.persist_gran);
	cr_assert_eq(statfs(tu_dir(), &sf), 0);
	if ((unsigned long)sf.f_type == TMPFS_MAGIC_)
		cr_assert_eq(caps.persist_gran, REMORA_PERSIST_PAGE,
			     "tmpfs is no DAX file system, yet granularity %u", caps.persist_gran);
	cr_assert_eq(remora_backend_caps("pmem", &dflt), 0);
	cr_assert(dflt.flags & REMORA_CAP_PERSIST);
	cr_assert_neq(dflt.persist_gran, REMORA_PERSIST_NONE);
	fprintf(stderr, "pmem granularity in %s: %s\n", tu_dir(),
		caps.persist_gran == REMORA_PERSIST_BYTE ? "byte" :
		caps.persist_gran == REMORA_PERSIST_CACHE_LINE ? "cache line" : "page");
	remora_transport_close(tp);
}

/* ---- durability across processes ---------------------------------------------------------- */

enum { WRITER_CLEAN, WRITER_KILLED };

/* Child: creates the pool, writes the area DURABLE as compute node 2, then closes or dies. */
static int writer(void *arg, int rd, int wr)
{
	int how = *(int *)arg;
	struct rig r;

	(void)rd;
	if (rig_try_open(&r, 0, 2) || write_area(&r, NWRITES, true, false) != NWRITES)
		return 1;
	if (how == WRITER_KILLED) {
		tu_send(wr, 1);
		raise(SIGKILL);
	}
	rig_close(&r, false);
	tu_send(wr, 1);
	return 0;
}

static void durable_across(int how)
{
	struct remora_transport *tp;
	struct remora_pool *p;
	struct tu_proc child;
	uint64_t v, opens;
	int rc;

	cr_assert_not_null(tu_dir()); /* the child must use this process's directory and cluster */
	tu_cluster();
	tu_spawn(&child, writer, &how);
	cr_assert_eq(tu_recv(child.rd, &v), 0, "the writer never finished");
	rc = tu_proc_wait(&child);
	cr_assert_eq(rc, how == WRITER_KILLED ? 128 + SIGKILL : 0, "writer exit %d", rc);
	cr_assert_eq(file_state_word(0, 0), how == WRITER_CLEAN ? 1u : 0u,
		     "clean-shutdown flag after a %s", how == WRITER_CLEAN ? "close" : "kill");
	opens = file_state_word(0, 1);

	tp = tu_transport(-1);
	p = pool_open(tp, 0, POOL, REMORA_POOL_CREATE); /* no EXCL: open what is there */
	cr_assert_eq(remora_pool_bytes(p), POOL);
	cr_assert_eq(area_damage(remora_pool_base(p), NWRITES), 0,
		     "DURABLE bytes lost across %s + reopen in another process",
		     how == WRITER_CLEAN ? "close" : "SIGKILL");
	cr_assert_eq(file_state_word(0, 0), 0, "an open pool is not clean");
	cr_assert_eq(file_state_word(0, 1), opens + 1, "open count");
	remora_pool_close(p, false);
	cr_assert_eq(file_state_word(0, 0), 1);
	p = pool_open(tp, 0, 0, 0); /* neither CREATE nor a size: an existing pool only */
	cr_assert_eq(area_damage(remora_pool_base(p), NWRITES), 0);
	remora_pool_close(p, true);
	remora_transport_close(tp);
}

Test(pmem_durable, survives_close_and_reopen_in_new_process)
{
	need_pmem();
	durable_across(WRITER_CLEAN);
}

Test(pmem_durable, survives_writer_crash)
{
	need_pmem();
	durable_across(WRITER_KILLED);
}
