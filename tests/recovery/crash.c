/* SPDX-License-Identifier: MIT */
/*
 * Crash-consistency test: whole remora clusters on pmem pools (regular files in a temporary
 * directory), or shm pools (REMORA_CRASH_BACKEND=shm: /dev/shm, which outlives processes but
 * not the host, so there are no power failures), killed and recovered over and over.
 *
 *   crash <workload> <protocol> [<mutation>]
 *
 * One run: 3 memory nodes (`remora mn --keep-pool`, pools kept and reopened), format and load
 * (crash_wl setup), a clean stop so the pools are fully persistent, then ITERS times:
 *   1. start 2 compute nodes (crash_wl run) on the running memory nodes;
 *   2. crash: SIGKILL every compute AND memory node, at a random moment, or once compute
 *      node 0 killed itself at a random protocol point (REMORA_DIE_AT=txn.locked, txn.logged,
 *      txn.commit_write, txn.commit_mid, txn.unlock, :K-th time) or at a random verb
 *      (REMORA_DIE_AT_VERB);
 *   3. power failure (unless REMORA_CRASH_POWER=0): every pool file is replaced by its
 *      medium, the bytes that reached persistence (medium.c, preloaded into every process);
 *   4. restart the memory nodes on their pools, `remora recover` (timed), then
 *      `remora recover --check` (no valid log, no held lock: every lock word scanned) and
 *      `crash_wl check` (every acknowledged commit present, the workload's invariant).
 * With a mutation (REMORA_MUTATE for the compute nodes, e.g. no_log_persist) the run is a
 * negative control: it passes only if a check fails within the iterations.
 *
 * Environment: REMORA_BIN, REMORA_CRASH_WL, REMORA_MEDIUM_LIB (set by meson);
 * REMORA_CRASH_ITERS (default 5; a soak sets e.g. 500), REMORA_CRASH_SEED, REMORA_CRASH_DIR
 * (default $TMPDIR or /tmp), REMORA_CRASH_POWER (1), REMORA_CRASH_KEEP (keep the directory),
 * REMORA_CRASH_RECORDS (smallbank accounts / kvs keys; default 1000 / 2000),
 * REMORA_CRASH_COROS (coordinators per compute node, 4), REMORA_CRASH_POOL (pool size, 16M),
 * REMORA_CRASH_BACKEND (pmem, or shm: power failures off).
 * Exit 0 pass, 1 fail, 77 skip.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#define N_MN 3
#define N_CN 2
#define MAX_ARGS 24
#define WAIT_MS 30000

struct env {
	const char *bin, *wl, *medium;
	const char *workload, *protocol, *mutation;
	char dir[512], config[600], addrs[256], ackdir[600], state[600];
	bool power;
	unsigned iters, coros;
	const char *records, *pool, *backend;
	uint64_t rng;
	pid_t mn[N_MN];
};

static struct env E;

/* ---- small helpers ------------------------------------------------------------------------ */

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

static uint64_t rnd(void)
{
	uint64_t z = (E.rng += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static unsigned rnd_in(unsigned lo, unsigned hi)
{
	return lo + (unsigned)(rnd() % (hi - lo + 1));
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void cleanup(void)
{
	static const char *const suffix[] = { "", "small" };
	char cmd[1400];

	for (unsigned i = 0; i < N_MN; i++)
		if (E.mn[i] > 0) {
			kill(E.mn[i], SIGKILL);
			waitpid(E.mn[i], NULL, 0);
			E.mn[i] = 0;
		}
	/* Killed processes leave their cluster's message segment behind: remora clean. */
	for (unsigned i = 0; E.bin && E.dir[0] && i < 2; i++) {
		snprintf(cmd, sizeof(cmd),
			 "'%s' clean --cluster crash%d%s --backend %s --dir '%s' >/dev/null 2>&1",
			 E.bin, (int)getpid(), suffix[i], E.backend ? E.backend : "pmem", E.dir);
		if (system(cmd)) {
			/* nothing to remove for that name */
		}
	}
	if (E.dir[0] && !getenv("REMORA_CRASH_KEEP")) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", E.dir);
		if (system(cmd)) {
			/* nothing more to do */
		}
	}
}

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "crash: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	if (E.dir[0])
		fprintf(stderr, "crash: logs in %s (kept)\n", E.dir);
	setenv("REMORA_CRASH_KEEP", "1", 1);
	cleanup();
	exit(1);
}

/* ---- processes ---------------------------------------------------------------------------- */

struct spawn {
	const char *argv[MAX_ARGS];
	unsigned argc;
	const char *env[8];
	unsigned envc;
	const char *log;  /* stdout and stderr, appended */
	int ready_fd;     /* >= 0: becomes fd 3 in the child */
};

static void arg(struct spawn *s, const char *a)
{
	if (s->argc + 1 < MAX_ARGS)
		s->argv[s->argc++] = a;
}

static void add_env(struct spawn *s, const char *kv)
{
	if (s->envc < 8)
		s->env[s->envc++] = kv;
}

static pid_t run_bg(struct spawn *s)
{
	pid_t pid = fork();

	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		if (s->ready_fd >= 0) {
			dup2(s->ready_fd, 3);
			fcntl(3, F_SETFD, 0);
		}
		for (unsigned i = 0; i < s->envc; i++)
			putenv((char *)s->env[i]);
		s->argv[s->argc] = NULL;
		execv(s->argv[0], (char *const *)s->argv);
		_exit(127);
	}
	return pid;
}

/* Waits for pid at most ms; returns the wait status, or -1 (still running). */
static int wait_for(pid_t pid, unsigned ms)
{
	uint64_t end = now_ms() + ms;
	int st;

	do {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			return st;
		sleep_ms(5);
	} while (now_ms() < end);
	return -1;
}

static int run_fg(struct spawn *s, unsigned ms)
{
	pid_t pid = run_bg(s);
	int st = wait_for(pid, ms);

	if (st == -1) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		die("%s %s did not finish within %u ms", s->argv[0], s->argc > 1 ? s->argv[1] : "",
		    ms);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char preload[700], asan[300], mutate[128];

/* Environment of every cluster process: the medium library when power failures are on. */
static void cluster_env(struct spawn *s)
{
	if (E.power)
		add_env(s, preload);
	add_env(s, asan);
}

static char logpath[N_MN + N_CN + 4][640];

static const char *log_of(const char *what)
{
	static unsigned n;
	char *p = logpath[n++ % (sizeof(logpath) / sizeof(logpath[0]))];

	snprintf(p, sizeof(logpath[0]), "%s/%s.log", E.dir, what);
	return p;
}

/* ---- memory nodes ------------------------------------------------------------------------ */

static char ids[N_MN][8];

static void start_mns_with(const char *extra)
{
	char ports[N_MN][16];
	size_t at = 0;

	for (unsigned i = 0; i < N_MN; i++) {
		struct spawn s = { .ready_fd = -1 };
		int p[2];
		char line[64] = "";
		ssize_t n = 0;
		uint64_t end = now_ms() + WAIT_MS;

		if (pipe(p))
			die("pipe: %s", strerror(errno));
		snprintf(ids[i], sizeof(ids[i]), "%u", i);
		arg(&s, E.bin);
		arg(&s, "mn");
		arg(&s, "--config");
		arg(&s, E.config);
		arg(&s, "--id");
		arg(&s, ids[i]);
		arg(&s, "--foreground");
		arg(&s, "--port");
		arg(&s, "0");
		arg(&s, "--ready-fd");
		arg(&s, "3");
		if (extra)
			arg(&s, extra);
		s.ready_fd = p[1];
		s.log = log_of(i == 0 ? "mn0" : i == 1 ? "mn1" : "mn2");
		cluster_env(&s);
		E.mn[i] = run_bg(&s);
		close(p[1]);
		fcntl(p[0], F_SETFL, O_NONBLOCK);
		while (now_ms() < end && !strchr(line, '\n')) {
			ssize_t k = read(p[0], line + n, sizeof(line) - 1 - (size_t)n);

			if (k > 0)
				n += k;
			else if (k == 0)
				break;
			else
				sleep_ms(5);
			line[n] = '\0';
		}
		close(p[0]);
		if (strncmp(line, "ready ", 6) != 0)
			die("memory node %u did not start (see %s/mn%u.log)", i, E.dir, i);
		snprintf(ports[i], sizeof(ports[i]), "%u", (unsigned)atoi(line + 6));
	}
	at = (size_t)snprintf(E.addrs, sizeof(E.addrs), "--mn-addrs=");
	for (unsigned i = 0; i < N_MN; i++)
		at += (size_t)snprintf(E.addrs + at, sizeof(E.addrs) - at, "%s127.0.0.1:%s",
				       i ? "," : "", ports[i]);
}

static void start_mns(void)
{
	start_mns_with(NULL);
}

static void kill_mns(int sig)
{
	for (unsigned i = 0; i < N_MN; i++)
		if (E.mn[i] > 0)
			kill(E.mn[i], sig);
	for (unsigned i = 0; i < N_MN; i++) {
		if (E.mn[i] > 0 && wait_for(E.mn[i], WAIT_MS) == -1)
			die("memory node %u ignores signal %d", i, sig);
		E.mn[i] = 0;
	}
}

/* ---- pools and their media ---------------------------------------------------------------- */

static void copy_file(const char *from, const char *to)
{
	static char buf[1 << 16];
	int in = open(from, O_RDONLY), out;
	ssize_t n;

	if (in < 0)
		die("%s: %s", from, strerror(errno));
	out = open(to, O_WRONLY | O_CREAT, 0600);
	if (out < 0)
		die("%s: %s", to, strerror(errno));
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n)
			die("%s: short write", to);
	close(in);
	close(out);
}

static void pool_path(unsigned m, char *buf, size_t len)
{
	snprintf(buf, len, "%s/remora-crash%d-mn%u", E.dir, (int)getpid(), m);
}

/* Media start as the cleanly closed pools: everything in them is persistent. */
static void media_create(void)
{
	for (unsigned m = 0; m < N_MN; m++) {
		char p[700], med[720];

		pool_path(m, p, sizeof(p));
		snprintf(med, sizeof(med), "%s.medium", p);
		copy_file(p, med);
	}
}

/* The power failure: what never reached persistence is gone. */
static void power_fail(void)
{
	for (unsigned m = 0; m < N_MN; m++) {
		char p[700], med[720];

		pool_path(m, p, sizeof(p));
		snprintf(med, sizeof(med), "%s.medium", p);
		copy_file(med, p);
	}
}

/* ---- tools --------------------------------------------------------------------------------- */

/* crash_wl setup or check; extra: more arguments, NULL-terminated. */
static int crash_wl(const char *mode, const char *log, const char *const *extra)
{
	struct spawn s = { .ready_fd = -1, .log = log };

	if (truncate(log, 0) && errno != ENOENT)
		die("%s: %s", log, strerror(errno));
	arg(&s, E.wl);
	arg(&s, mode);
	arg(&s, "--config");
	arg(&s, E.config);
	arg(&s, E.addrs);
	arg(&s, "--workload");
	arg(&s, E.workload);
	if (E.records) {
		arg(&s, "--records");
		arg(&s, E.records);
	}
	for (unsigned i = 0; extra && extra[i]; i++)
		arg(&s, extra[i]);
	cluster_env(&s);
	return run_fg(&s, 120000);
}

struct rec_stats {
	double ms;
	unsigned long fwd, back, locks, images;
};

/* Runs remora recover; parses its report. */
static int recover(bool check, struct rec_stats *st)
{
	struct spawn s = { .ready_fd = -1, .log = log_of(check ? "recover-check" : "recover") };
	char line[512];
	FILE *f;
	int rc;

	if (truncate(s.log, 0) && errno != ENOENT)
		die("%s: %s", s.log, strerror(errno));
	arg(&s, E.bin);
	arg(&s, "recover");
	arg(&s, "--config");
	arg(&s, E.config);
	arg(&s, E.addrs);
	if (check)
		arg(&s, "--check");
	cluster_env(&s);
	rc = run_fg(&s, WAIT_MS);
	if (!st)
		return rc;
	memset(st, 0, sizeof(*st));
	f = fopen(s.log, "r");
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long a, b, c, d;
		double ms;

		if (sscanf(line,
			   "remora recover: %lu finished, %lu rolled forward, %lu rolled back "
			   "(%lu undo images)", &a, &b, &c, &d) == 4) {
			st->fwd = b;
			st->back = c;
			st->images = d;
		} else if (sscanf(line, "remora recover: %lu records scanned, %lu locks held", &a,
				  &b) == 2) {
			st->locks = b;
		} else if (sscanf(line, "remora recover: %lf ms", &ms) == 1) {
			st->ms = ms;
		}
	}
	if (f)
		fclose(f);
	return rc;
}

/* ---- one crash ---------------------------------------------------------------------------- */

static const char *const points[] = { "txn.locked", "txn.logged", "txn.commit_write",
				      "txn.commit_mid", "txn.unlock" };
#define NPOINTS (sizeof(points) / sizeof(points[0]))

struct outcome {
	unsigned by_point[NPOINTS], by_verb, external, clean;
	unsigned detected;
	double rec_ms_sum, rec_ms_max;
	unsigned long fwd, back, locks, images;
};

/* Transactions acknowledged so far in this iteration (ack files are plain memory). */
static uint64_t progress(void)
{
	uint64_t sum = 0;

	for (unsigned k = 0; k < N_CN; k++) {
		char p[700];
		uint64_t v[2];
		FILE *f;

		snprintf(p, sizeof(p), "%s/ack-cn%u", E.ackdir, k);
		f = fopen(p, "rb");
		if (!f)
			continue;
		/* header (32 B), then per coordinator {nent, acked, ...} */
		for (unsigned c = 0; c < E.coros; c++) {
			if (fseek(f, 32 + c * 32, SEEK_SET) == 0 && fread(v, 8, 2, f) == 2)
				sum += v[0];
		}
		fclose(f);
	}
	return sum;
}

/* A compute node may only die by SIGKILL (ours or its own fault injection). */
static void cn_died(unsigned it, unsigned i, int st)
{
	if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
		die("iteration %u: compute node %u ended by itself (%s %d), see %s/cn%u.log", it, i,
		    WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) :
		    WTERMSIG(st), E.dir, i);
}

/*
 * crash_wl check; for kvs also the CLI checker, `remora check` (kvs needs no accumulator;
 * SmallBank's would be the committed deltas, which only the ack files know).
 */
static int check_workload(void)
{
	const char *const extra[] = { "--ack", E.ackdir, "--state", E.state, NULL };
	struct spawn s = { .ready_fd = -1, .log = log_of("remora-check") };
	int rc = crash_wl("check", log_of("check"), extra);

	if (rc || strcmp(E.workload, "kvs"))
		return rc;
	if (truncate(s.log, 0) && errno != ENOENT)
		die("%s: %s", s.log, strerror(errno));
	arg(&s, E.bin);
	arg(&s, "check");
	arg(&s, "--config");
	arg(&s, E.config);
	arg(&s, E.addrs);
	arg(&s, "--workload");
	arg(&s, "kvs");
	arg(&s, "--keys");
	arg(&s, E.records ? E.records : "2000");
	cluster_env(&s);
	rc = run_fg(&s, WAIT_MS);
	if (rc)
		fprintf(stderr, "crash: remora check failed (exit %d), see %s\n", rc, s.log);
	return rc;
}

/*
 * A clean stop: the compute nodes finish, the memory nodes close their pools (which persists
 * them), the power fails, and the restarted cluster needs no recovery: `remora recover
 * --check` passes as it is, and every acknowledged commit is there.
 */
static void clean_stop(unsigned it, const pid_t *cn, struct outcome *o)
{
	uint64_t t0 = now_ms();
	int rc;

	(void)o;
	for (unsigned i = 0; i < N_CN; i++) {
		int st = wait_for(cn[i], WAIT_MS);

		if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st))
			die("iteration %u: compute node %u did not finish cleanly "
			    "(see %s/cn%u.log)", it, i, E.dir, i);
	}
	kill_mns(SIGTERM);
	if (E.power)
		power_fail();
	start_mns();
	if (recover(true, NULL))
		die("iteration %u: the cluster needs recovery after a clean stop (see %s)", it,
		    log_of("recover-check"));
	rc = check_workload();
	printf("iter %3u: %-30s %4.1f s, no recovery needed; check %s\n", it,
	       "clean stop and restart", (now_ms() - t0) / 1000.0, rc ? "FAILED" : "ok");
	fflush(stdout);
	if (rc)
		die("iteration %u: the check failed after a clean restart (see %s/check.log)", it,
		    E.dir);
	for (unsigned i = 0; i < N_CN; i++) {
		char p[720];

		snprintf(p, sizeof(p), "%s/ack-cn%u", E.ackdir, i);
		unlink(p);
	}
}

static void one_crash(unsigned it, struct outcome *o)
{
	pid_t cn[N_CN];
	char ack[N_CN][720], cnid[N_CN][8], cnlog[N_CN][32], die_env[96] = "";
	/* 0 external kill, 1 protocol point, 2 verb, 3 clean stop (always first) */
	unsigned mode = E.mutation ? 1 : it == 1 ? 3 : rnd_in(0, 3), point = 0, k = 0, delay;
	struct rec_stats rs;
	uint64_t t0;
	int rc;

	if (mode == 1) {
		point = E.mutation ? 3 : rnd_in(0, NPOINTS - 1);
		k = rnd_in(1, 40);
		snprintf(die_env, sizeof(die_env), "REMORA_DIE_AT=%s:%u", points[point], k);
		o->by_point[point]++;
	} else if (mode == 2) {
		k = rnd_in(300, 12000);
		snprintf(die_env, sizeof(die_env), "REMORA_DIE_AT_VERB=%u", k);
		o->by_verb++;
	} else if (mode == 0) {
		o->external++;
	} else {
		o->clean++;
	}
	for (unsigned i = 0; i < N_CN; i++) {
		struct spawn s = { .ready_fd = -1 };

		snprintf(ack[i], sizeof(ack[i]), "--ack=%s/ack-cn%u", E.ackdir, i);
		snprintf(cnid[i], sizeof(cnid[i]), "%u", i);
		snprintf(cnlog[i], sizeof(cnlog[i]), "cn%u", i);
		arg(&s, E.wl);
		arg(&s, "run");
		arg(&s, "--config");
		arg(&s, E.config);
		arg(&s, E.addrs);
		arg(&s, "--workload");
		arg(&s, E.workload);
		if (E.records) {
			arg(&s, "--records");
			arg(&s, E.records);
		}
		arg(&s, "--cn");
		arg(&s, cnid[i]);
		arg(&s, "--ack");
		arg(&s, ack[i] + 6);
		/*
		 * A crash run must never end by itself: the harness waits up to 15 s for progress
		 * and 8 s more for the die point, then kills. Under ASan on a loaded 2-core host
		 * a 20 s run once ended before either (exit 0, reported as a failure).
		 */
		arg(&s, "--seconds");
		arg(&s, mode == 3 ? "0.5" : "120");
		s.log = log_of(cnlog[i]);
		cluster_env(&s);
		if (E.mutation)
			add_env(&s, mutate);
		if (i == 0 && die_env[0])
			add_env(&s, die_env);
		cn[i] = run_bg(&s);
	}
	t0 = now_ms();
	if (mode == 3) {
		clean_stop(it, cn, o);
		return;
	}
	/* Let transactions flow, then crash: at a random moment, or when cn 0 killed itself. */
	while (progress() < 20 && now_ms() - t0 < 15000) {
		int st;

		if (mode && waitpid(cn[0], &st, WNOHANG) == cn[0]) {
			cn_died(it, 0, st);
			cn[0] = 0;
			break;
		}
		sleep_ms(5);
	}
	delay = mode ? 0 : rnd_in(20, 600);
	if (mode && cn[0]) {
		int st = wait_for(cn[0], 8000);

		if (st != -1) {
			cn_died(it, 0, st);
			cn[0] = 0;
		}
		delay = rnd_in(0, 30);
	}
	sleep_ms(delay);
	/* The whole cluster dies at once. */
	for (unsigned i = 0; i < N_CN; i++)
		if (cn[i])
			kill(cn[i], SIGKILL);
	for (unsigned i = 0; i < N_MN; i++)
		kill(E.mn[i], SIGKILL);
	for (unsigned i = 0; i < N_CN; i++) {
		int st;

		if (cn[i] && waitpid(cn[i], &st, 0) == cn[i])
			cn_died(it, i, st);
	}
	for (unsigned i = 0; i < N_MN; i++) {
		waitpid(E.mn[i], NULL, 0);
		E.mn[i] = 0;
	}
	if (E.power)
		power_fail();
	start_mns();
	rc = recover(false, &rs);
	if (rc)
		die("iteration %u: remora recover failed (exit %d), see %s", it, rc,
		    log_of("recover"));
	o->rec_ms_sum += rs.ms;
	o->rec_ms_max = rs.ms > o->rec_ms_max ? rs.ms : o->rec_ms_max;
	o->fwd += rs.fwd;
	o->back += rs.back;
	o->locks += rs.locks;
	o->images += rs.images;
	rc = recover(true, NULL);
	if (rc)
		die("iteration %u: locks or logs remain after recovery (see %s)", it,
		    log_of("recover-check"));
	rc = check_workload();
	printf("iter %3u: %-30s %4.1f s run, recover %7.3f ms: %lu forward, %lu back (%lu "
	       "images), %lu locks released; check %s\n",
	       it, mode == 1 ? die_env + 14 : mode == 2 ? die_env + 7 : "external SIGKILL",
	       (now_ms() - t0) / 1000.0, rs.ms, rs.fwd, rs.back, rs.images, rs.locks,
	       rc ? "FAILED" : "ok");
	fflush(stdout);
	if (rc) {
		char cmd[800];

		snprintf(cmd, sizeof(cmd), "tail -n 5 '%s/check.log' >&2", E.dir);
		if (system(cmd)) {
			/* the log is kept anyway */
		}
		if (!E.mutation)
			die("iteration %u: the check failed", it);
		o->detected++;
	}
	for (unsigned i = 0; i < N_CN; i++)
		unlink(ack[i] + 6);
}

/* ---- setup --------------------------------------------------------------------------------- */

static void write_config(const char *suffix, const char *pool_size)
{
	FILE *f = fopen(E.config, "w");

	if (!f)
		die("%s: %s", E.config, strerror(errno));
	fprintf(f, "[cluster]\ncluster = crash%d%s\nbackend = %s\ndir = %s\npool_size = %s\n"
		   "mn = %d\ncn = %d\nthreads = 1\ncoros = %u\nprotocol = %s\nreplicas = 3\n"
		   "keep_pool = true\nlease_ms = 5000\nheartbeat_ms = 50\nconnect_ms = 10000\n",
		(int)getpid(), suffix, E.backend, E.dir, pool_size, N_MN, N_CN, E.coros,
		E.protocol);
	fclose(f);
}

static void setup_env(int argc, char **argv)
{
	const char *base = getenv("REMORA_CRASH_DIR");
	const char *v;

	memset(&E, 0, sizeof(E));
	E.bin = getenv("REMORA_BIN");
	E.wl = getenv("REMORA_CRASH_WL");
	E.medium = getenv("REMORA_MEDIUM_LIB");
	if (argc < 3 && !(argc == 2 && !strcmp(argv[1], "bad-input"))) {
		fprintf(stderr, "usage: crash <workload> <protocol> [<mutation>] | crash "
			"bad-input | crash unrecovered <protocol>\n");
		exit(2);
	}
	E.workload = argv[1];
	E.protocol = argc > 2 ? argv[2] : "pandora";
	E.mutation = argc > 3 ? argv[3] : NULL;
	if (!E.bin || !E.wl || !E.medium) {
		printf("crash: REMORA_BIN, REMORA_CRASH_WL and REMORA_MEDIUM_LIB must be set "
		       "(meson test sets them): skipped\n");
		exit(77);
	}
	v = getenv("REMORA_CRASH_ITERS");
	E.iters = v && *v ? (unsigned)strtoul(v, NULL, 10) : 5;
	v = getenv("REMORA_CRASH_COROS");
	E.coros = v && *v ? (unsigned)strtoul(v, NULL, 10) : 4;
	if (E.coros < 1 || E.coros > 64)
		E.coros = 4;
	v = getenv("REMORA_CRASH_POOL");
	E.pool = v && *v ? v : "16M";
	v = getenv("REMORA_CRASH_RECORDS");
	E.records = v && *v ? v : NULL;
	v = getenv("REMORA_CRASH_SEED");
	E.rng = v && *v ? strtoull(v, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)getpid() << 20;
	v = getenv("REMORA_CRASH_BACKEND");
	E.backend = v && *v ? v : "pmem";
	if (strcmp(E.backend, "pmem") && strcmp(E.backend, "shm")) {
		fprintf(stderr, "crash: REMORA_CRASH_BACKEND='%s': use pmem or shm\n", E.backend);
		exit(2);
	}
	v = getenv("REMORA_CRASH_POWER");
	E.power = !(v && !strcmp(v, "0")) && !strcmp(E.backend, "pmem");
	if (E.mutation && !E.power) {
		printf("crash: a lost persist point is invisible without the power-failure "
		       "simulation (REMORA_CRASH_POWER=0): skipped\n");
		exit(77);
	}
	if (!base || !*base)
		base = getenv("TMPDIR");
	snprintf(E.dir, sizeof(E.dir), "%s/remora-crash-XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(E.dir))
		die("mkdtemp %s: %s", E.dir, strerror(errno));
	snprintf(E.config, sizeof(E.config), "%s/cluster.ini", E.dir);
	snprintf(E.ackdir, sizeof(E.ackdir), "%s", E.dir);
	snprintf(E.state, sizeof(E.state), "%s/state", E.dir);
	snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", E.medium);
	v = getenv("ASAN_OPTIONS");
	snprintf(asan, sizeof(asan), "ASAN_OPTIONS=%s%sverify_asan_link_order=0", v ? v : "",
		 v && *v ? ":" : "");
	snprintf(mutate, sizeof(mutate), "REMORA_MUTATE=%s", E.mutation ? E.mutation : "");
}

/* ---- bad input: refusals are one line, a non-zero exit, and leave the data alone -------- */

/* The pmem backend's usable area starts here in the pool file (backends/pmem/README.md). */
#define PMEM_USABLE_OFF 65536u

static void read_file(const char *path, char **buf, size_t *len)
{
	FILE *f = fopen(path, "rb");
	long n;

	if (!f || fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		die("%s: %s", path, strerror(errno));
	*len = (size_t)n;
	*buf = malloc(*len ? *len : 1);
	if (!*buf || fread(*buf, 1, *len, f) != *len)
		die("%s: short read", path);
	fclose(f);
}

static void write_at(const char *path, uint64_t off, const void *src, size_t len)
{
	int fd = open(path, O_WRONLY);

	if (fd < 0 || pwrite(fd, src, len, (off_t)off) != (ssize_t)len)
		die("%s: %s", path, strerror(errno));
	close(fd);
}

/* Runs argv; demands exit status 1 and exactly one line on stderr containing want. */
static void expect_refusal(const char *what, struct spawn *s, const char *want)
{
	char *out;
	size_t len, lines = 0;
	int rc;

	s->log = log_of("refusal");
	if (truncate(s->log, 0) && errno != ENOENT)
		die("%s: %s", s->log, strerror(errno));
	rc = run_fg(s, WAIT_MS);
	read_file(s->log, &out, &len);
	for (size_t i = 0; i < len; i++)
		lines += out[i] == '\n';
	if (rc != 1 || lines != 1 || len < 2 || !memmem(out, len, want, strlen(want)))
		die("%s: exit %d, expected 1 and one line with '%s'; got:\n%.*s", what, rc, want,
		    (int)len, out);
	printf("bad input: %-34s exit 1: %.*s", what, (int)len, out);
	free(out);
}

static void mn_args(struct spawn *s, const char *config, const char *dir_flag)
{
	arg(s, E.bin);
	arg(s, "mn");
	arg(s, "--config");
	arg(s, config);
	arg(s, "--id");
	arg(s, "0");
	arg(s, "--foreground");
	arg(s, "--port");
	arg(s, "0");
	if (dir_flag)
		arg(s, dir_flag);
}

/*
 * A memory node on a damaged pool refuses it: one line, exit 1, and the whole file kept byte
 * for byte, the pmem backend's header (open counter, incarnation, clean flag) included.
 */
static void refuse_pool(const char *what, const char *pool, uint64_t off, const void *bytes,
			size_t n, const char *want)
{
	struct spawn s = { .ready_fd = -1 };
	char *before, *after;
	size_t lb, la;

	write_at(pool, PMEM_USABLE_OFF + off, bytes, n);
	read_file(pool, &before, &lb);
	mn_args(&s, E.config, NULL);
	expect_refusal(what, &s, want);
	read_file(pool, &after, &la);
	if (la != lb)
		die("%s: the refused pool's size changed (%zu to %zu bytes)", what, lb, la);
	for (size_t i = 0; i < lb; i++)
		if (before[i] != after[i])
			die("%s: the refused pool changed, first at byte %zu (%s)", what, i,
			    i < PMEM_USABLE_OFF ? "the backend's header" : "the database");
	free(before);
	free(after);
}

static uint64_t sb_csum(const unsigned char *sb)
{
	/* store_csum (runtime/store/hash.h, XXH3-64) over the superblock up to its csum field */
	return XXH3_64bits_withSeed(sb, 184, 0x5342u);
}

static int bad_input(void)
{
	unsigned char sb[192], tmp[192];
	struct spawn s = { .ready_fd = -1 };
	char pool[700], *orig;
	size_t len;
	uint64_t v;

	E.workload = "smallbank";
	write_config("", "16M");
	start_mns();
	if (crash_wl("setup", log_of("setup"), NULL))
		die("setup failed, see %s/setup.log", E.dir);
	kill_mns(SIGTERM);
	pool_path(0, pool, sizeof(pool));
	read_file(pool, &orig, &len);
	memcpy(sb, orig + PMEM_USABLE_OFF, sizeof(sb));
	if (sb_csum(sb) != *(uint64_t *)(void *)(sb + 184))
		die("the checksum here does not match runtime/store's (update sb_csum)");

	refuse_pool("corrupted superblock", pool, 40, (const char[]){ (char)(sb[40] ^ 1) }, 1,
		    "checksum");
	memcpy(tmp, sb, sizeof(tmp));
	v = 99;
	memcpy(tmp + 8, &v, 4);
	v = sb_csum(tmp);
	memcpy(tmp + 184, &v, 8);
	refuse_pool("another layout version", pool, 0, tmp, sizeof(tmp), "layout version 99");
	memcpy(tmp, sb, sizeof(tmp));
	tmp[24] = 2; /* sb.node */
	v = sb_csum(tmp);
	memcpy(tmp + 184, &v, 8);
	refuse_pool("another memory node's database", pool, 0, tmp, sizeof(tmp),
		    "formatted as memory node 2");
	memcpy(tmp, sb, sizeof(tmp));
	v = UINT64_C(1) << 40; /* sb.layout_bytes */
	memcpy(tmp + 48, &v, 8);
	v = sb_csum(tmp);
	memcpy(tmp + 184, &v, 8);
	refuse_pool("a database larger than the pool", pool, 0, tmp, sizeof(tmp), "needs");
	refuse_pool("not a remora database", pool, 0, "garbage!", 8, "no remora database");

	/* --format erases it explicitly; recovery then finds no database (one line, exit 1). */
	start_mns_with("--format");
	memset(&s, 0, sizeof(s));
	s.ready_fd = -1;
	arg(&s, E.bin);
	arg(&s, "recover");
	arg(&s, "--config");
	arg(&s, E.config);
	arg(&s, E.addrs);
	expect_refusal("recover on an erased pool", &s, "no remora database");
	kill_mns(SIGTERM);

	/* The pool directory cannot hold a pool. */
	memset(&s, 0, sizeof(s));
	s.ready_fd = -1;
	mn_args(&s, E.config, "--dir=/nonexistent/remora-crash");
	expect_refusal("a directory that does not exist", &s, "/nonexistent/remora-crash");

	/* Tables that do not fit the pools (a second cluster with 128 KiB pools). */
	memset(&s, 0, sizeof(s));
	s.ready_fd = -1;
	write_config("small", "128K");
	start_mns();
	arg(&s, E.wl);
	arg(&s, "setup");
	arg(&s, "--config");
	arg(&s, E.config);
	arg(&s, E.addrs);
	arg(&s, "--workload");
	arg(&s, "smallbank");
	expect_refusal("tables larger than the pools", &s, "the tables need");
	kill_mns(SIGTERM);
	free(orig);
	printf("bad input: PASS\n");
	cleanup();
	return 0;
}

/* ---- a database that needs recovery runs no transaction --------------------------------- */

static char unrec_ack[N_CN][720], unrec_id[N_CN][8], refused_ack[720];

static pid_t start_cn(unsigned i, const char *seconds, const char *log)
{
	struct spawn s = { .ready_fd = -1, .log = log };

	snprintf(unrec_ack[i], sizeof(unrec_ack[i]), "%s/ack-cn%u", E.ackdir, i);
	snprintf(unrec_id[i], sizeof(unrec_id[i]), "%u", i);
	arg(&s, E.wl);
	arg(&s, "run");
	arg(&s, "--config");
	arg(&s, E.config);
	arg(&s, E.addrs);
	arg(&s, "--workload");
	arg(&s, E.workload);
	arg(&s, "--cn");
	arg(&s, unrec_id[i]);
	arg(&s, "--ack");
	arg(&s, unrec_ack[i]);
	arg(&s, "--seconds");
	arg(&s, seconds);
	cluster_env(&s);
	return run_bg(&s);
}

/* The database areas of every pool (the backend's header holds fence slots CNs write). */
static char *db_bytes(size_t *total)
{
	char *all = NULL;
	size_t at = 0;

	for (unsigned m = 0; m < N_MN; m++) {
		char p[700], *b;
		size_t len;

		pool_path(m, p, sizeof(p));
		read_file(p, &b, &len);
		if (len < PMEM_USABLE_OFF)
			die("%s: %zu bytes, shorter than a pool header", p, len);
		all = realloc(all, at + len - PMEM_USABLE_OFF);
		if (!all)
			die("out of memory");
		memcpy(all + at, b + PMEM_USABLE_OFF, len - PMEM_USABLE_OFF);
		at += len - PMEM_USABLE_OFF;
		free(b);
	}
	*total = at;
	return all;
}

/*
 * After a whole-cluster crash and a restart on the kept pools, compute nodes that start
 * before `remora recover` are refused (one line naming the fix, exit 1, the database areas
 * unchanged); recover --check says recovery is needed; after recover they run, and every
 * acknowledged commit is there.
 */
static int unrecovered(void)
{
	struct spawn s = { .ready_fd = -1 };
	pid_t cn[N_CN];
	char *before, *after;
	size_t lb, la;
	uint64_t t0;

	E.power = false;
	E.workload = "smallbank";
	write_config("", E.pool);
	start_mns();
	if (crash_wl("setup", log_of("setup"), NULL))
		die("setup failed, see %s/setup.log", E.dir);
	for (unsigned i = 0; i < N_CN; i++)
		cn[i] = start_cn(i, "20", log_of(i ? "cn1" : "cn0"));
	t0 = now_ms();
	while (progress() < 20 && now_ms() - t0 < 15000)
		sleep_ms(5);
	if (progress() < 20)
		die("the compute nodes committed nothing (see %s/cn0.log)", E.dir);
	for (unsigned i = 0; i < N_CN; i++)
		kill(cn[i], SIGKILL);
	kill_mns(SIGKILL);
	for (unsigned i = 0; i < N_CN; i++)
		waitpid(cn[i], NULL, 0);
	start_mns();

	before = db_bytes(&lb);
	snprintf(refused_ack, sizeof(refused_ack), "%s/ack-refused", E.dir);
	arg(&s, E.wl);
	arg(&s, "run");
	arg(&s, "--config");
	arg(&s, E.config);
	arg(&s, E.addrs);
	arg(&s, "--workload");
	arg(&s, E.workload);
	arg(&s, "--cn");
	arg(&s, "0");
	arg(&s, "--ack");
	arg(&s, refused_ack); /* its own: a run starts its ack file afresh */
	arg(&s, "--seconds");
	arg(&s, "1");
	expect_refusal("a compute node before recovery", &s, "run `remora recover` first");
	after = db_bytes(&la);
	if (la != lb || memcmp(before, after, lb))
		die("the refused compute node changed the database");
	free(before);
	free(after);
	if (recover(true, NULL) != 1)
		die("remora recover --check did not ask for recovery (see %s)",
		    log_of("recover-check"));
	if (recover(false, NULL))
		die("remora recover failed, see %s", log_of("recover"));
	if (recover(true, NULL))
		die("recovery still needed after remora recover (see %s)", log_of("recover-check"));
	if (check_workload())
		die("the check failed after recovery (see %s/check.log)", E.dir);
	for (unsigned i = 0; i < N_CN; i++) {
		unlink(unrec_ack[i]);
		cn[i] = start_cn(i, "0.5", log_of(i ? "cn1" : "cn0"));
	}
	for (unsigned i = 0; i < N_CN; i++) {
		int st = wait_for(cn[i], WAIT_MS);

		if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st))
			die("compute node %u failed after recovery (see %s/cn%u.log)", i, E.dir, i);
	}
	if (check_workload())
		die("the check failed after a run on the recovered database (see %s/check.log)",
		    E.dir);
	kill_mns(SIGTERM);
	printf("unrecovered: PASS\n");
	cleanup();
	return 0;
}

int main(int argc, char **argv)
{
	struct outcome o = { 0 };
	unsigned total = 0;
	int rc;

	setup_env(argc, argv);
	if (!strcmp(E.workload, "bad-input"))
		return bad_input();
	if (!strcmp(E.workload, "unrecovered"))
		return unrecovered();
	signal(SIGPIPE, SIG_IGN);
	printf("crash: %s on %s, %s backend, %u iterations, seed %#" PRIx64 ", power failures "
	       "%s%s%s, dir %s\n",
	       E.workload, E.protocol, E.backend, E.iters, E.rng, E.power ? "on" : "off",
	       E.mutation ? ", NEGATIVE CONTROL: REMORA_MUTATE=" : "",
	       E.mutation ? E.mutation : "", E.dir);
	write_config("", E.pool);
	start_mns();
	rc = crash_wl("setup", log_of("setup"), NULL);
	if (rc)
		die("setup failed (exit %d), see %s/setup.log", rc, E.dir);
	kill_mns(SIGTERM); /* a clean close persists the whole pool */
	if (E.power)
		media_create();
	start_mns();
	for (unsigned it = 1; it <= E.iters; it++) {
		one_crash(it, &o);
		total++;
		if (E.mutation && o.detected)
			break;
	}
	kill_mns(SIGTERM);
	printf("crash: %u iterations (clean stops %u, external kills %u, verbs %u, points:", total,
	       o.clean, o.external, o.by_verb);
	for (unsigned i = 0; i < NPOINTS; i++)
		printf(" %s %u", points[i], o.by_point[i]);
	printf("); recovery %.3f ms average, %.3f ms max; %lu rolled forward, %lu rolled back "
	       "(%lu undo images), %lu locks released\n",
	       total > o.clean ? o.rec_ms_sum / (total - o.clean) : 0.0, o.rec_ms_max, o.fwd,
	       o.back, o.images, o.locks);
	if (E.mutation) {
		if (!o.detected)
			die("negative control: REMORA_MUTATE=%s went undetected in %u crashes",
			    E.mutation, total);
		printf("crash: negative control: REMORA_MUTATE=%s caught after %u crashes: PASS\n",
		       E.mutation, total);
	} else {
		printf("crash: PASS\n");
	}
	cleanup();
	return 0;
}
