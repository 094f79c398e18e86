/* SPDX-License-Identifier: MIT */
/* Shared test helpers and the criterion main() of the suites that link them (see tutil.h). */
#include "tutil.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/hooks.h>
#include <criterion/internal/ordered-set.h>
#include <criterion/options.h>

#include "backends/host/hostmem.h"
#include "transport/mutate.h"

/* Names the runner process so workers name their directories after it, for the final sweep. */
#define TU_RUN_ENV "REMORA_TEST_RUN"
#define TU_DIR_PREFIX "remora-test-"

static char tu_cluster_name[32];
static char tu_dir_path[512];
static const char *tu_profile;
static struct tu_ctx *tu_current;

const char *tu_backend(void)
{
	const char *b = getenv("REMORA_BACKEND");

	return b && *b ? b : "shm";
}

static const char *tu_run(void)
{
	const char *run = getenv(TU_RUN_ENV);

	return run && *run ? run : "0";
}

/* "t<runner pid>x<pid>": the runner removes the segments of its crashed workers by prefix. */
const char *tu_cluster(void)
{
	if (!tu_cluster_name[0])
		snprintf(tu_cluster_name, sizeof(tu_cluster_name), "t%sx%ld", tu_run(),
			 (long)getpid());
	return tu_cluster_name;
}

void tu_use_profile(const char *profile)
{
	tu_profile = profile;
}

/* Where pool directories go: $REMORA_TEST_DIR, else the backend default area, else $TMPDIR. */
static const char *tu_base_dir(void)
{
	const char *d = getenv("REMORA_TEST_DIR");
	struct stat st;

	if (d && *d)
		return d;
	if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0)
		return "/dev/shm";
	d = getenv("TMPDIR");
	return d && *d ? d : "/tmp";
}

const char *tu_dir(void)
{
	if (tu_dir_path[0])
		return tu_dir_path;
	snprintf(tu_dir_path, sizeof(tu_dir_path), "%s/" TU_DIR_PREFIX "%s-%ld-XXXXXX",
		 tu_base_dir(), tu_run(), (long)getpid());
	if (!mkdtemp(tu_dir_path)) {
		fprintf(stderr, "tutil: mkdtemp %s: %s\n", tu_dir_path, strerror(errno));
		tu_dir_path[0] = 0;
		return NULL;
	}
	return tu_dir_path;
}

static int tu_rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	remove(path);
	return 0;
}

static void tu_rm_tree(const char *path)
{
	nftw(path, tu_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void tu_cfg(struct remora_transport_cfg *cfg, int self_cn)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->size = sizeof(*cfg);
	cfg->backend = NULL; /* $REMORA_BACKEND picks it, as for every remora binary */
	cfg->cluster = tu_cluster();
	cfg->dir = tu_dir();
	cfg->profile = tu_profile;
	cfg->self_cn = self_cn;
	cfg->max_cn = 0;
	cfg->numa_node = -1;
}

int tu_transport_try(int self_cn, const char *profile, struct remora_transport **out)
{
	struct remora_transport_cfg cfg;

	tu_cfg(&cfg, self_cn);
	if (profile)
		cfg.profile = profile;
	return remora_transport_open(&cfg, out);
}

struct remora_transport *tu_transport(int self_cn)
{
	struct remora_transport *tp = NULL;
	int rc = tu_transport_try(self_cn, NULL, &tp);

	cr_assert_eq(rc, 0, "remora_transport_open(backend %s, cn %d) = %d (%s): %s", tu_backend(),
		     self_cn, rc, remora_strerror(rc), remora_last_error());
	cr_assert_not_null(tp);
	return tp;
}

void tu_pool_path(uint16_t node, char *buf, size_t size)
{
	int rc = rt_host_pool_path(tu_dir(), tu_cluster(), node, buf, size);

	cr_assert_eq(rc, 0, "path of pool %u: %s", node, strerror(-rc));
}

void tu_node_open(struct remora_transport *tp, uint16_t node, uint64_t bytes, struct tu_node *mn)
{
	struct remora_pool_spec spec = {
		.size = sizeof(spec),
		.node = node,
		.bytes = bytes,
		.flags = REMORA_POOL_CREATE | REMORA_POOL_EXCL | REMORA_POOL_UNLINK_ON_CLOSE,
	};
	int rc;

	memset(mn, 0, sizeof(*mn));
	rc = remora_pool_open(tp, &spec, &mn->pool);
	cr_assert_eq(rc, 0, "remora_pool_open(node %u, %llu bytes) = %d (%s): %s", node,
		     (unsigned long long)bytes, rc, remora_strerror(rc), remora_transport_errmsg(tp));
	mn->base = remora_pool_base(mn->pool);
	mn->bytes = remora_pool_bytes(mn->pool);
	cr_assert_not_null(mn->base);
	cr_assert_geq(mn->bytes, bytes, "pool has %llu usable bytes, asked %llu",
		      (unsigned long long)mn->bytes, (unsigned long long)bytes);
	rc = remora_pool_reg(mn->pool, 0, bytes, &mn->key);
	cr_assert_eq(rc, 0, "remora_pool_reg = %d (%s)", rc, remora_strerror(rc));
	rc = remora_pool_describe(mn->pool, &mn->desc);
	cr_assert_eq(rc, 0, "remora_pool_describe = %d (%s)", rc, remora_strerror(rc));
	cr_assert_eq(mn->desc.node, node);
}

void tu_node_close(struct tu_node *mn)
{
	if (mn->pool)
		remora_pool_close(mn->pool, true);
	mn->pool = NULL;
	mn->base = NULL;
}

void tu_open_pools(struct tu_ctx *c, int self_cn, unsigned nmn, uint64_t bytes)
{
	memset(c, 0, sizeof(*c));
	tu_current = c;
	cr_assert_leq(nmn, TU_MAX_NODES);
	c->tp = tu_transport(self_cn);
	for (unsigned i = 0; i < nmn; i++) {
		tu_node_open(c->tp, (uint16_t)i, bytes, &c->mn[i]);
		c->nmn = i + 1;
	}
}

void tu_attach_all(struct tu_ctx *c)
{
	int rc;

	for (unsigned i = 0; i < c->nmn; i++) {
		rc = remora_pool_describe(c->mn[i].pool, &c->mn[i].desc);
		cr_assert_eq(rc, 0, "remora_pool_describe = %d (%s)", rc, remora_strerror(rc));
		rc = remora_transport_attach(c->tp, &c->mn[i].desc);
		cr_assert_eq(rc, 0, "remora_transport_attach(node %u) = %d (%s): %s", i, rc,
			     remora_strerror(rc), remora_transport_errmsg(c->tp));
	}
	rc = remora_chan_open(c->tp, &c->ch);
	cr_assert_eq(rc, 0, "remora_chan_open = %d (%s)", rc, remora_strerror(rc));
}

void tu_open(struct tu_ctx *c, int self_cn, unsigned nmn, uint64_t bytes)
{
	tu_open_pools(c, self_cn, nmn, bytes);
	tu_attach_all(c);
}

void tu_close(struct tu_ctx *c)
{
	if (c->ch)
		remora_chan_close(c->ch);
	c->ch = NULL;
	for (unsigned i = 0; i < c->nmn; i++) {
		if (c->tp)
			remora_transport_detach(c->tp, (uint16_t)i);
		tu_node_close(&c->mn[i]);
	}
	c->nmn = 0;
	if (c->tp)
		remora_transport_close(c->tp);
	c->tp = NULL;
	if (tu_current == c)
		tu_current = NULL;
}

void tu_current_set(struct tu_ctx *c)
{
	tu_current = c;
}

void tu_fini(void)
{
	struct remora_transport_cfg cfg;

	if (tu_current)
		tu_close(tu_current);
	if (tu_dir_path[0]) {
		tu_cfg(&cfg, -1);
		remora_transport_cleanup(&cfg);
		tu_rm_tree(tu_dir_path);
	}
	tu_dir_path[0] = 0;
}

void tu_skip_note(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "[SKIP] %s: ", tu_backend());
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void tu_caps(struct remora_transport *tp, struct remora_caps *caps)
{
	int rc;

	memset(caps, 0, sizeof(*caps));
	caps->size = sizeof(*caps);
	rc = remora_transport_caps(tp, caps);
	cr_assert_eq(rc, 0, "remora_transport_caps = %d (%s)", rc, remora_strerror(rc));
}

void tu_atomics_mode(const char *mode)
{
	struct remora_transport *probe;
	int rc;

	if (mode)
		setenv("REMORA_ATOMICS", mode, 1);
	mode = getenv("REMORA_ATOMICS");
	if (!mode)
		return;
	rc = tu_transport_try(-1, NULL, &probe);
	if (rc == -REMORA_ECONFIG || rc == -EOPNOTSUPP)
		tu_skip("backend %s has no atomics mode %s: %s", tu_backend(), mode,
			remora_last_error());
	cr_assert_eq(rc, 0, "open with atomics=%s: %d (%s)", mode, rc, remora_strerror(rc));
	remora_transport_close(probe);
}

struct remora_wr tu_wr_read(remora_gaddr a, uint32_t key, void *dst, uint32_t len)
{
	return (struct remora_wr){ .raddr = a, .rkey = key, .len = len, .op = REMORA_OP_READ,
				   .local = dst };
}

struct remora_wr tu_wr_write(remora_gaddr a, uint32_t key, const void *src, uint32_t len)
{
	/* The API takes a non-const pointer because READ writes through the same field. */
	return (struct remora_wr){ .raddr = a, .rkey = key, .len = len, .op = REMORA_OP_WRITE,
				   .local = (void *)(uintptr_t)src };
}

struct remora_wr tu_wr_cas(remora_gaddr a, uint32_t key, uint64_t cmp, uint64_t swp, uint64_t *old)
{
	return (struct remora_wr){ .raddr = a, .rkey = key, .len = 8, .op = REMORA_OP_CAS,
				   .local = old, .compare = cmp, .swap = swp };
}

struct remora_wr tu_wr_faa(remora_gaddr a, uint32_t key, uint64_t add, uint64_t *old)
{
	return (struct remora_wr){ .raddr = a, .rkey = key, .len = 8, .op = REMORA_OP_FAA,
				   .local = old, .swap = add };
}

struct remora_wr tu_wr_mcas(remora_gaddr a, uint32_t key, uint64_t cmp, uint64_t cmask,
			    uint64_t swp, uint64_t smask, uint64_t *old)
{
	return (struct remora_wr){ .raddr = a, .rkey = key, .len = 8, .op = REMORA_OP_MCAS,
				   .local = old, .compare = cmp, .compare_mask = cmask,
				   .swap = swp, .swap_mask = smask };
}

/* $REMORA_TEST_TIME_SCALE: 1 when unset, 0 when malformed or out of range. */
static double tu_parse_time_scale(void)
{
	const char *s = getenv(TU_TIME_SCALE_ENV);
	char *end;
	double v;

	if (!s || !*s)
		return 1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v > 0) || v > TU_TIME_SCALE_MAX)
		return 0;
	return v;
}

/*
 * Read each time rather than cached: criterion's workers do not run main(), and threads of a
 * test call it too. main() has refused a malformed value, so 0 cannot reach the waits.
 */
double tu_time_scale(void)
{
	double v = tu_parse_time_scale();

	return v > 0 ? v : 1;
}

int tu_wait_ms(void)
{
	double ms = TU_WAIT_BASE_MS * tu_time_scale();

	return ms < 1 ? 1 : (int)ms;
}

static int64_t tu_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int tu_drain(struct remora_chan *ch, struct remora_cqe *cqes, unsigned n)
{
	int64_t deadline = tu_now_ms() + TU_WAIT_MS;
	unsigned got = 0;

	while (got < n) {
		int k = remora_poll(ch, cqes + got, n - got);

		if (k < 0)
			return k;
		got += (unsigned)k;
		if (k == 0 && tu_now_ms() > deadline)
			break;
	}
	return (int)got;
}

uint8_t tu_canary_byte(uint64_t off)
{
	/* Position-dependent, never zero, so a shifted or zeroed write is always visible. */
	return (uint8_t)(0xa5 ^ (off * 131) ^ (off >> 8)) | 1;
}

void tu_canary_fill(uint8_t *base, uint64_t from, uint64_t to)
{
	for (uint64_t i = from; i < to; i++)
		base[i] = tu_canary_byte(i);
}

uint64_t tu_canary_damage(const uint8_t *base, uint64_t from, uint64_t to)
{
	uint64_t bad = 0;

	for (uint64_t i = from; i < to; i++)
		bad += base[i] != tu_canary_byte(i);
	return bad;
}

uint64_t tu_rand64(uint64_t *state)
{
	uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* ---- child processes ------------------------------------------------------------------- */

void tu_spawn(struct tu_proc *p, tu_child_fn fn, void *arg)
{
	int down[2], up[2];

	cr_assert_eq(pipe(down), 0);
	cr_assert_eq(pipe(up), 0);
	fflush(NULL);
	p->pid = fork();
	cr_assert_geq(p->pid, 0, "fork: %s", strerror(errno));
	if (p->pid == 0) {
		int rc;

		close(down[1]);
		close(up[0]);
		/* A child must not run the parent's criterion fini or tutil cleanup. */
		tu_current = NULL;
		rc = fn(arg, down[0], up[1]);
		fflush(NULL);
		_exit(rc);
	}
	close(down[0]);
	close(up[1]);
	p->rd = up[0];
	p->wr = down[1];
}

int tu_proc_wait(struct tu_proc *p)
{
	int64_t deadline = tu_now_ms() + TU_WAIT_MS;
	int status = 0;
	pid_t r;

	if (p->pid <= 0)
		return -1;
	close(p->wr);
	for (;;) {
		r = waitpid(p->pid, &status, WNOHANG);
		if (r == p->pid)
			break;
		if (r < 0)
			return -1;
		if (tu_now_ms() > deadline) {
			fprintf(stderr, "tutil: child %ld hangs, killing it\n", (long)p->pid);
			kill(p->pid, SIGKILL);
			waitpid(p->pid, &status, 0);
			break;
		}
		usleep(1000);
	}
	close(p->rd);
	p->pid = 0;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + WTERMSIG(status);
}

static int tu_status_code(int status)
{
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int tu_proc_wait_all(struct tu_proc *p, unsigned n, unsigned *which)
{
	int64_t deadline = tu_now_ms() + TU_WAIT_MS;
	unsigned left = 0;
	int first = 0;

	*which = 0;
	for (unsigned i = 0; i < n; i++) {
		if (p[i].pid > 0) {
			close(p[i].wr);
			left++;
		}
	}
	while (left) {
		bool progress = false;

		for (unsigned i = 0; i < n; i++) {
			int status, code;

			if (p[i].pid <= 0 || waitpid(p[i].pid, &status, WNOHANG) != p[i].pid)
				continue;
			code = tu_status_code(status);
			close(p[i].rd);
			p[i].pid = 0;
			left--;
			progress = true;
			if (code && !first) {
				first = code;
				*which = i;
			}
		}
		if (left && (first || tu_now_ms() > deadline)) {
			if (!first) {
				fprintf(stderr, "tutil: children hang, killing them\n");
				first = 128 + SIGKILL;
			}
			for (unsigned i = 0; i < n; i++)
				if (p[i].pid > 0) {
					kill(p[i].pid, SIGKILL);
					if (!*which && first == 128 + SIGKILL)
						*which = i;
				}
		}
		if (!progress)
			usleep(1000);
	}
	return first;
}

int tu_send(int fd, uint64_t v)
{
	return write(fd, &v, sizeof(v)) == (ssize_t)sizeof(v) ? 0 : -EPIPE;
}

int tu_recv(int fd, uint64_t *v)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	size_t got = 0;

	while (got < sizeof(*v)) {
		ssize_t k;

		if (poll(&pfd, 1, TU_WAIT_MS) <= 0)
			return -ETIMEDOUT;
		k = read(fd, (char *)v + got, sizeof(*v) - got);
		if (k <= 0)
			return -EPIPE;
		got += (size_t)k;
	}
	return 0;
}

int tu_run_together(tu_child_fn fn, void *args, size_t arg_size, unsigned n, unsigned *which)
{
	struct tu_proc p[TU_MAX_PROCS];
	uint64_t ready;

	cr_assert_leq(n, TU_MAX_PROCS);
	for (unsigned i = 0; i < n; i++)
		tu_spawn(&p[i], fn, (char *)args + i * arg_size);
	for (unsigned i = 0; i < n; i++) {
		if (tu_recv(p[i].rd, &ready) == 0)
			continue;
		/* No child may outlive the test: stop them all, then report. */
		for (unsigned j = 0; j < n; j++)
			kill(p[j].pid, SIGKILL);
		tu_proc_wait_all(p, n, which);
		cr_assert_fail("worker %u did not get ready (its line, if any, is above)", i);
	}
	for (unsigned i = 0; i < n; i++)
		tu_send(p[i].wr, 1);
	return tu_proc_wait_all(p, n, which);
}

int tu_child_ready(int rd, int wr)
{
	uint64_t go;

	tu_send(wr, 1);
	return tu_recv(rd, &go);
}

void tu_child_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "[FAIL] child %ld %s:%d: (%s) ", (long)getpid(), file, line, cond);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int tu_mutate(struct remora_transport *tp, const char *m)
{
	return rt_transport_mutate(tp, m);
}

/* ---- main ------------------------------------------------------------------------------ */

static struct criterion_global_stats tu_stats;

ReportHook(POST_ALL)(struct criterion_global_stats *st)
{
	tu_stats = *st;
}

/* Errors that mean "this machine lacks what the backend needs", not "the backend is broken". */
static bool tu_unusable(int rc)
{
	return rc == -ENODEV || rc == -ENXIO || rc == -EOPNOTSUPP || rc == -ENOSYS ||
	       rc == -EAFNOSUPPORT || rc == -EPROTONOSUPPORT || rc == -REMORA_ENOBACKEND;
}

/*
 * Opens the backend end to end once (pool, region, attach, channel, one WRITE and READ).
 * Returns 0, or 77 with the reason printed when the backend cannot run here. Any other failure
 * returns 0 too: the tests then run and fail with precise messages.
 */
static int tu_probe(void)
{
	struct remora_transport *tp = NULL;
	struct remora_pool *pool = NULL;
	struct remora_chan *ch = NULL;
	struct remora_pool_spec spec = { .size = sizeof(spec), .node = 0, .bytes = 65536,
					 .flags = REMORA_POOL_CREATE | REMORA_POOL_UNLINK_ON_CLOSE };
	struct remora_node_desc desc;
	const char *step = "transport_open";
	uint64_t v = 42, r = 0;
	uint32_t key;
	int rc;

	rc = tu_transport_try(0, NULL, &tp);
	if (rc) {
		fprintf(stderr, "probe: %s\n", remora_last_error());
		goto out;
	}
	step = "pool_open";
	rc = remora_pool_open(tp, &spec, &pool);
	if (rc)
		goto close_tp;
	step = "pool_reg";
	rc = remora_pool_reg(pool, 0, spec.bytes, &key);
	if (!rc) {
		step = "pool_describe";
		rc = remora_pool_describe(pool, &desc);
	}
	if (!rc) {
		step = "attach";
		rc = remora_transport_attach(tp, &desc);
	}
	if (!rc) {
		step = "chan_open";
		rc = remora_chan_open(tp, &ch);
	}
	if (!rc) {
		step = "write";
		rc = remora_write(ch, remora_gaddr_make(0, 64), key, &v, 8);
	}
	if (!rc) {
		step = "read";
		rc = remora_read(ch, remora_gaddr_make(0, 64), key, &r, 8);
	}
	if (rc)
		fprintf(stderr, "probe: %s\n", remora_transport_errmsg(tp));
	if (ch)
		remora_chan_close(ch);
	remora_pool_close(pool, true);
close_tp:
	remora_transport_close(tp);
out:
	if (rc && tu_unusable(rc)) {
		printf("SKIP: backend %s is not usable here: %s failed with %d (%s)\n",
		       tu_backend(), step, rc, remora_strerror(rc));
		return 77;
	}
	if (rc)
		fprintf(stderr, "probe of backend %s: %s failed with %d (%s); running the tests\n",
			tu_backend(), step, rc, remora_strerror(rc));
	return 0;
}

/* Removes entries of dir whose name starts with prefix. */
static void tu_sweep_dir(const char *dir, const char *prefix)
{
	char path[1024];
	struct dirent *e;
	DIR *d = opendir(dir);

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, prefix, strlen(prefix)))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		tu_rm_tree(path);
	}
	closedir(d);
}

/*
 * Removes what workers of this run left behind (a crashed test skips its fini): their pool
 * directories, and the cluster segments named "remora-<cluster>-*" in /dev/shm.
 */
static void tu_sweep(void)
{
	char prefix[64];

	snprintf(prefix, sizeof(prefix), TU_DIR_PREFIX "%ld-", (long)getpid());
	tu_sweep_dir(tu_base_dir(), prefix);
	snprintf(prefix, sizeof(prefix), "remora-t%ldx", (long)getpid());
	tu_sweep_dir("/dev/shm", prefix);
}

/* The probe runs in a child so that the runner, whose forks become the tests, stays pristine. */
static int tu_probe_in_child(void)
{
	int status = 0;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return 0;
	if (pid == 0) {
		int rc = tu_probe();

		tu_fini();
		fflush(NULL);
		_exit(rc);
	}
	if (waitpid(pid, &status, 0) != pid)
		return 0;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
		return 77;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fprintf(stderr, "probe of backend %s crashed (status %#x); running the tests\n",
			tu_backend(), status);
	return 0;
}

static void tu_scale_suite(struct criterion_suite_set *ss, double k)
{
	if (ss->suite.data)
		ss->suite.data->timeout *= k;
	if (!ss->tests)
		return;
	FOREACH_SET(struct criterion_test *t, ss->tests)
		t->data->timeout *= k;
}

/*
 * Multiplies every criterion time limit (suites' and tests', 0 stays "none") by
 * tu_time_scale(). The runner reads them when it starts a worker, so this must run in the
 * runner before the tests. Returns 0, or -1 with a one-line message for a malformed value.
 */
static int tu_scale_timeouts(struct criterion_test_set *set)
{
	double k = tu_parse_time_scale();

	if (k == 0) {
		fprintf(stderr, "%s='%s': want a number > 0 and at most %g (a multiplier of the "
			"tests' time limits and waits)\n", TU_TIME_SCALE_ENV,
			getenv(TU_TIME_SCALE_ENV), TU_TIME_SCALE_MAX);
		return -1;
	}
	if (k == 1)
		return 0;
	FOREACH_SET(struct criterion_suite_set *ss, set->suites)
		tu_scale_suite(ss, k);
	return 0;
}

/* Visible: criterion's sandbox finds main by symbol to hijack it in its workers. */
__attribute__((visibility("default"))) int main(int argc, char *argv[])
{
	struct criterion_test_set *tests;
	char run[32];
	int rc = 0;

#ifdef __SANITIZE_THREAD__
	/* Criterion's sandbox arena collides with TSan's memory layout (Snaipe/Criterion#274). */
	(void)argc, (void)argv, (void)tests;
	printf("SKIP: criterion cannot run under ThreadSanitizer; the TSan targets are the plain "
	       "stress programs (tests/README.md)\n");
	return 77;
#endif
	tests = criterion_initialize();
	snprintf(run, sizeof(run), "%ld", (long)getpid());
	setenv(TU_RUN_ENV, run, 1);
	if (tu_scale_timeouts(tests)) {
		criterion_finalize(tests);
		return 1;
	}
	if (criterion_handle_args(argc, argv, true)) {
		rc = tu_probe_in_child();
		if (rc == 0)
			rc = !criterion_run_all_tests(tests);
	}
	criterion_finalize(tests);
	tu_sweep();
	if (rc == 0 && tu_stats.nb_tests > 0 && tu_stats.tests_skipped == tu_stats.nb_tests) {
		printf("SKIP: all %zu tests were skipped on backend %s (reasons above)\n",
		       tu_stats.nb_tests, tu_backend());
		return 77;
	}
	return rc;
}
