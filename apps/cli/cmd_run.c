/* SPDX-License-Identifier: MIT */
/*
 * `remora run`: a whole cluster on this host, and `remora clean`.
 *
 * The parent forks memory-node and compute-node processes of its own binary
 * (/proc/self/exe mn|cn ...), talks to them over pipes (a "ready <port>" line from each
 * memory node; "ready", then "result <json>" from each compute node; one start byte back
 * to each compute node) and stays in one poll() loop that also watches a self-pipe
 * written by its signal handlers. Whatever happens, the children are stopped and the
 * cluster's files removed before it returns.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <remora/cluster.h>

#include "cli.h"
#include "benchutil.h"
#include "cmd.h"
#include "job.h"

#define RUN_LINE_MAX (1u << 20)  /* longest result line accepted from a compute node */
#define RUN_START_GRACE_MS 10000 /* on top of connect_ms, for processes to start */
#define RUN_STOP_GRACE_MS 5000   /* for children to exit after SHUTDOWN or SIGTERM */

struct child {
	pid_t pid;
	char role;     /* 'm' or 'c' */
	unsigned id;
	int rd_fd;     /* memory node: ready pipe; compute node: result pipe; -1 at EOF */
	int go_fd;     /* compute node: start pipe; -1 once used */
	bool exited;
	int wstatus;
	bool ready;
	bool killed;   /* we sent SIGKILL after the memory nodes declared it dead */
	bool doomed;   /* killed on purpose by --kill: its death is no failure */
	uint16_t port;
	char *buf;     /* unparsed bytes from rd_fd */
	size_t len, cap;
	char *result;  /* compute node: its result line */
};

struct run {
	const struct run_opts *o;
	const struct job *job;
	int argc;
	char **argv;
	struct remora_params *p;
	unsigned n_mn, n_cn;
	struct child mn[REMORA_MAX_MN];
	struct child cn[REMORA_MAX_CN];
	char exe[PATH_MAX];
	char cluster_flag[96]; /* "--cluster=run<pid>" when we named the cluster, else "" */
	char key_flag[600];    /* "--key-file=<path>": every child uses the same secret */
	char *addrs_flag;      /* "--mn-addrs=..." when ports were picked, else NULL */
	struct remora_cluster *tool;
	struct remora_transport_cfg tcfg;
	bool failed;
	bool foreign; /* the cluster's files were someone else's: remove nothing */
};

/* ---- signals ---------------------------------------------------------------------------- */

static volatile sig_atomic_t run_signal;
static int run_sigpipe[2] = { -1, -1 };
static pid_t run_parent;
static volatile pid_t run_pids[REMORA_MAX_MN + REMORA_MAX_CN];

/* Only async-signal-safe calls: stop every child, wake the loop. */
static void on_stop_signal(int sig)
{
	int saved = errno;

	if (getpid() == run_parent) {
		run_signal = sig;
		for (unsigned i = 0; i < REMORA_MAX_MN + REMORA_MAX_CN; i++)
			if (run_pids[i] > 0)
				kill(run_pids[i], SIGTERM);
		if (write(run_sigpipe[1], "s", 1) < 0) {
			/* the pipe is full: the loop is awake already */
		}
	}
	errno = saved;
}

static void on_child_signal(int sig)
{
	int saved = errno;

	(void)sig;
	if (getpid() == run_parent && write(run_sigpipe[1], "c", 1) < 0) {
		/* full: a wake-up is pending anyway */
	}
	errno = saved;
}

struct saved_signals {
	struct sigaction old[5];
};

static const int handled_signals[5] = { SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE };

static int install_signals(struct saved_signals *s)
{
	if (pipe2(run_sigpipe, O_CLOEXEC | O_NONBLOCK))
		return -errno;
	run_parent = getpid();
	run_signal = 0;
	for (unsigned i = 0; i < 5; i++) {
		struct sigaction sa = { .sa_flags = SA_RESTART };

		sigemptyset(&sa.sa_mask);
		if (handled_signals[i] == SIGCHLD)
			sa.sa_handler = on_child_signal;
		else if (handled_signals[i] == SIGPIPE)
			sa.sa_handler = SIG_IGN;
		else
			sa.sa_handler = on_stop_signal;
		sigaction(handled_signals[i], &sa, &s->old[i]);
	}
	return 0;
}

static void restore_signals(struct saved_signals *s)
{
	for (unsigned i = 0; i < 5; i++)
		sigaction(handled_signals[i], &s->old[i], NULL);
	close(run_sigpipe[0]);
	close(run_sigpipe[1]);
	run_sigpipe[0] = run_sigpipe[1] = -1;
}

static void block_signals(sigset_t *old)
{
	sigset_t set;

	sigemptyset(&set);
	for (unsigned i = 0; i < 5; i++)
		sigaddset(&set, handled_signals[i]);
	sigprocmask(SIG_BLOCK, &set, old);
}

/* ---- messages --------------------------------------------------------------------------- */

static void say(const struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(const struct run *r, const char *fmt, ...)
{
	va_list ap;

	if (r->o->quiet)
		return;
	fputs("remora run: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void fail(struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Failures are printed even with --quiet. */
static void fail(struct run *r, const char *fmt, ...)
{
	va_list ap;

	r->failed = true;
	fputs("remora run: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void describe_status(const struct child *c, char *buf, size_t len)
{
	if (!c->exited)
		snprintf(buf, len, "still running");
	else if (WIFSIGNALED(c->wstatus))
		snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(c->wstatus),
			 strsignal(WTERMSIG(c->wstatus)));
	else
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(c->wstatus));
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- children --------------------------------------------------------------------------- */

static struct child *child_at(struct run *r, unsigned slot)
{
	return slot < r->n_mn ? &r->mn[slot] : &r->cn[slot - r->n_mn];
}

static unsigned child_slot(const struct run *r, const struct child *c)
{
	return c->role == 'm' ? c->id : r->n_mn + c->id;
}

/* Whether extra[0..nextra) sets the variable of entry ("NAME=value"). */
static bool env_overridden(const char *entry, char *const *extra, unsigned nextra)
{
	size_t len = strcspn(entry, "=");

	for (unsigned i = 0; i < nextra; i++)
		if (strncmp(extra[i], entry, len) == 0 && extra[i][len] == '=')
			return true;
	return false;
}

/*
 * The environment of a child: ours minus the pipe variables, plus its own (extra: --cn-env,
 * its pipes). An own variable replaces the inherited one: getenv returns the first match, and
 * the library reads its parameters with getenv.
 */
static char **child_env(char *const *extra, unsigned nextra)
{
	extern char **environ;
	unsigned n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	env = calloc(n + nextra + 1, sizeof(*env));
	if (!env)
		return NULL;
	for (unsigned i = 0; i < n; i++)
		if (strncmp(environ[i], "REMORA_RESULT_FD=", 17) != 0 &&
		    strncmp(environ[i], "REMORA_GO_FD=", 13) != 0 &&
		    !env_overridden(environ[i], extra, nextra))
			env[k++] = environ[i];
	for (unsigned i = 0; i < nextra; i++)
		env[k++] = extra[i];
	return env;
}

/*
 * fork + exec of our own binary. keep[] are the fds the child inherits (all others are
 * close-on-exec). Between fork and exec only async-signal-safe calls are made.
 */
static int spawn(struct run *r, struct child *c, char **argv, char **env, const int *keep,
		 unsigned nkeep)
{
	sigset_t old;
	pid_t pid;

	block_signals(&old);
	pid = fork();
	if (pid == 0) {
		struct sigaction dfl = { .sa_handler = SIG_DFL };

		for (unsigned i = 0; i < 5; i++)
			sigaction(handled_signals[i], &dfl, NULL);
		sigprocmask(SIG_SETMASK, &old, NULL);
		/* If remora run dies, memory nodes get SIGTERM and remove their pools. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != run_parent)
			_exit(127);
		for (unsigned i = 0; i < nkeep; i++)
			fcntl(keep[i], F_SETFD, 0);
		execve(r->exe, argv, env);
		_exit(127);
	}
	if (pid > 0) {
		c->pid = pid;
		run_pids[child_slot(r, c)] = pid;
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	return pid < 0 ? -errno : 0;
}

/* Collects exited children without blocking. */
static void reap(struct run *r)
{
	unsigned n = r->n_mn + r->n_cn;

	for (unsigned s = 0; s < n; s++) {
		struct child *c = child_at(r, s);
		sigset_t old;
		int st;

		if (c->pid <= 0 || c->exited)
			continue;
		block_signals(&old);
		if (waitpid(c->pid, &st, WNOHANG) == c->pid) {
			c->exited = true;
			c->wstatus = st;
			run_pids[s] = 0; /* never signal a reaped (maybe reused) pid */
		}
		sigprocmask(SIG_SETMASK, &old, NULL);
	}
}

static void signal_all(struct run *r, int sig, char role)
{
	unsigned n = r->n_mn + r->n_cn;

	reap(r);
	for (unsigned s = 0; s < n; s++) {
		struct child *c = child_at(r, s);

		if (c->pid > 0 && !c->exited && (!role || c->role == role))
			kill(c->pid, sig);
	}
}

static bool all_exited(struct run *r, char role)
{
	unsigned n = r->n_mn + r->n_cn;

	reap(r);
	for (unsigned s = 0; s < n; s++) {
		struct child *c = child_at(r, s);

		if (c->pid > 0 && !c->exited && (!role || c->role == role))
			return false;
	}
	return true;
}

/* SIGTERM, a grace period, then SIGKILL; returns once every child of role was reaped. */
static void stop_children(struct run *r, char role, bool term_first)
{
	uint64_t deadline = now_ms() + RUN_STOP_GRACE_MS;

	if (term_first)
		signal_all(r, SIGTERM, role);
	while (!all_exited(r, role) && now_ms() < deadline)
		nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
	if (!all_exited(r, role)) {
		signal_all(r, SIGKILL, role);
		while (!all_exited(r, role))
			nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
	}
}

/* ---- pipes ------------------------------------------------------------------------------ */

static void on_line(struct run *r, struct child *c, char *line)
{
	(void)r;
	if (c->role == 'm' && strncmp(line, "ready ", 6) == 0) {
		long port = strtol(line + 6, NULL, 10);

		if (port > 0 && port < 65536) {
			c->port = (uint16_t)port;
			c->ready = true;
		}
	} else if (c->role == 'c' && strcmp(line, "ready") == 0) {
		c->ready = true;
	} else if (c->role == 'c' && strncmp(line, "result ", 7) == 0) {
		free(c->result);
		c->result = strdup(line + 7);
	}
}

static void read_pipe(struct run *r, struct child *c)
{
	char *nl;
	ssize_t n;

	if (c->len + 4096 > c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 8192;
		char *b = cap <= RUN_LINE_MAX * 2 ? realloc(c->buf, cap) : NULL;

		if (!b) {
			c->len = 0; /* a line this long is garbage: drop what we have */
		} else {
			c->buf = b;
			c->cap = cap;
		}
	}
	n = read(c->rd_fd, c->buf + c->len, c->cap - c->len - 1);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		close(c->rd_fd);
		c->rd_fd = -1;
		return;
	}
	c->len += (size_t)n;
	c->buf[c->len] = '\0';
	while ((nl = memchr(c->buf, '\n', c->len)) != NULL) {
		size_t used = (size_t)(nl - c->buf) + 1;

		*nl = '\0';
		on_line(r, c, c->buf);
		memmove(c->buf, c->buf + used, c->len - used);
		c->len -= used;
	}
}

/* One round of the loop: waits up to timeout_ms for pipes or signals. */
static void pump(struct run *r, int timeout_ms)
{
	struct pollfd fds[1 + REMORA_MAX_MN + REMORA_MAX_CN];
	struct child *owner[1 + REMORA_MAX_MN + REMORA_MAX_CN];
	unsigned n = 0, total = r->n_mn + r->n_cn;
	char drain[64];

	fds[n] = (struct pollfd){ .fd = run_sigpipe[0], .events = POLLIN };
	owner[n++] = NULL;
	for (unsigned s = 0; s < total; s++) {
		struct child *c = child_at(r, s);

		if (c->rd_fd >= 0) {
			fds[n] = (struct pollfd){ .fd = c->rd_fd, .events = POLLIN };
			owner[n++] = c;
		}
	}
	if (poll(fds, n, timeout_ms) > 0) {
		for (unsigned i = 1; i < n; i++)
			if (fds[i].revents)
				read_pipe(r, owner[i]);
		while (read(run_sigpipe[0], drain, sizeof(drain)) > 0) {
		}
	}
	reap(r);
}

/* A memory node that exited during the run is fatal for it. */
static struct child *dead_mn(struct run *r)
{
	for (unsigned i = 0; i < r->n_mn; i++)
		if (r->mn[i].pid > 0 && !r->mn[i].doomed &&
		    (r->mn[i].exited || (r->mn[i].rd_fd < 0 && !r->mn[i].ready)))
			return &r->mn[i];
	return NULL;
}

/* While the compute nodes run: -ECHILD after reporting a memory node that died, else 0. */
static int mn_died_during_run(struct run *r)
{
	struct child *dead = dead_mn(r);
	char st[96];

	if (!dead)
		return 0;
	describe_status(dead, st, sizeof(st));
	fail(r, "mn %u (pid %d) %s during the run; stopping the compute nodes", dead->id,
	     (int)dead->pid, st);
	return -ECHILD;
}

/* ---- phases ----------------------------------------------------------------------------- */

static int add_arg(char **argv, unsigned *n, unsigned cap, char *arg)
{
	if (*n + 1 >= cap)
		return -E2BIG;
	argv[(*n)++] = arg;
	argv[*n] = NULL;
	return 0;
}

/* argv common to both roles: exe, role, --id, --config, the user's flags, our flags. */
static int base_argv(struct run *r, char **argv, unsigned cap, unsigned *n, const char *role,
		     char *id)
{
	int rc = 0;

	*n = 0;
	rc |= add_arg(argv, n, cap, r->exe);
	rc |= add_arg(argv, n, cap, (char *)role);
	rc |= add_arg(argv, n, cap, "--id");
	rc |= add_arg(argv, n, cap, id);
	if (r->o->config) {
		rc |= add_arg(argv, n, cap, "--config");
		rc |= add_arg(argv, n, cap, (char *)r->o->config);
	}
	for (int i = 0; i < r->o->nflags; i++)
		rc |= add_arg(argv, n, cap, r->o->flags[i]);
	if (r->cluster_flag[0])
		rc |= add_arg(argv, n, cap, r->cluster_flag);
	if (r->key_flag[0])
		rc |= add_arg(argv, n, cap, r->key_flag);
	return rc ? -E2BIG : 0;
}

static int start_mn(struct run *r, unsigned i, bool pick_port)
{
	struct child *c = &r->mn[i];
	char id[16], fdbuf[16], *argv[CLI_MAX_FLAGS + 16], **env;
	unsigned n;
	int p[2], rc;

	if (pipe2(p, O_CLOEXEC))
		return -errno;
	snprintf(id, sizeof(id), "%u", i);
	snprintf(fdbuf, sizeof(fdbuf), "%d", p[1]);
	rc = base_argv(r, argv, CLI_MAX_FLAGS + 16, &n, "mn", id);
	rc |= add_arg(argv, &n, CLI_MAX_FLAGS + 16, "--foreground");
	/* If this process is killed outright, the memory nodes still leave nothing behind. */
	rc |= add_arg(argv, &n, CLI_MAX_FLAGS + 16, "--remove-cluster-on-exit");
	rc |= add_arg(argv, &n, CLI_MAX_FLAGS + 16, "--ready-fd");
	rc |= add_arg(argv, &n, CLI_MAX_FLAGS + 16, fdbuf);
	if (pick_port) {
		rc |= add_arg(argv, &n, CLI_MAX_FLAGS + 16, "--port");
		rc |= add_arg(argv, &n, CLI_MAX_FLAGS + 16, "0");
	}
	env = rc ? NULL : child_env(NULL, 0);
	rc = env ? spawn(r, c, argv, env, &p[1], 1) : -E2BIG;
	free(env);
	close(p[1]);
	c->rd_fd = p[0];
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	return rc;
}

static int start_cn(struct run *r, unsigned i)
{
	struct child *c = &r->cn[i];
	char id[16], res_env[40], go_env[40], *extra[2 + 64], **env;
	char *argv[CLI_MAX_FLAGS + 16 + 256];
	unsigned n, nextra = 0, cap = CLI_MAX_FLAGS + 16 + 256;
	int res[2], go[2], keep[2], rc;

	if (pipe2(res, O_CLOEXEC))
		return -errno;
	if (pipe2(go, O_CLOEXEC)) {
		rc = -errno;
		close(res[0]);
		close(res[1]);
		return rc;
	}
	snprintf(id, sizeof(id), "%u", i);
	snprintf(res_env, sizeof(res_env), "REMORA_RESULT_FD=%d", res[1]);
	snprintf(go_env, sizeof(go_env), "REMORA_GO_FD=%d", go[0]);
	extra[nextra++] = res_env;
	extra[nextra++] = go_env;
	for (int k = 0; k < r->o->ncn_env && nextra < 2 + 64; k++) {
		const char *e = r->o->cn_env[k];

		if (strtoul(e, NULL, 10) == i)
			extra[nextra++] = (char *)strchr(e, ':') + 1;
	}
	rc = base_argv(r, argv, cap, &n, "cn", id);
	if (r->addrs_flag)
		rc |= add_arg(argv, &n, cap, r->addrs_flag);
	for (int k = 0; k < r->argc; k++)
		rc |= add_arg(argv, &n, cap, r->argv[k]);
	env = rc ? NULL : child_env(extra, nextra);
	keep[0] = res[1];
	keep[1] = go[0];
	rc = env ? spawn(r, c, argv, env, keep, 2) : -E2BIG;
	free(env);
	close(res[1]);
	close(go[0]);
	c->rd_fd = res[0];
	c->go_fd = go[1];
	fcntl(res[0], F_SETFL, O_NONBLOCK);
	return rc;
}

/* Ports are picked by the memory nodes themselves unless the configuration names every one. */
static bool must_pick_ports(const struct run *r)
{
	for (unsigned i = 0; i < r->n_mn; i++) {
		struct remora_node_addr a;

		if (remora_params_mn_addr(r->p, i, &a) || a.port == 0)
			return true;
	}
	return false;
}

/* Starts memory nodes [from, to) and waits until each is ready. */
static int start_mn_range(struct run *r, unsigned from, unsigned to, bool pick)
{
	uint64_t deadline = now_ms() + (uint64_t)remora_params_int(r->p, REMORA_P_CONNECT_MS) +
			    RUN_START_GRACE_MS;

	for (unsigned i = from; i < to; i++) {
		int rc = start_mn(r, i, pick);

		if (rc) {
			fail(r, "cannot start mn %u: %s", i, strerror(-rc));
			return rc;
		}
	}
	for (;;) {
		struct child *dead = dead_mn(r);
		unsigned ready = 0;

		for (unsigned i = from; i < to; i++)
			ready += r->mn[i].ready;
		if (ready == to - from)
			return 0;
		if (run_signal)
			return -EINTR;
		if (dead) {
			char st[96];

			pump(r, 50); /* let its last words arrive and it be reaped */
			describe_status(dead, st, sizeof(st));
			fail(r, "mn %u (pid %d) %s before it was ready", dead->id, (int)dead->pid,
			     st);
			return dead->exited && WIFEXITED(dead->wstatus) &&
					       WEXITSTATUS(dead->wstatus) == 3
				       ? -EEXIST
				       : -ECHILD;
		}
		if (now_ms() > deadline) {
			fail(r, "memory nodes not ready after %d ms",
			     (int)(remora_params_int(r->p, REMORA_P_CONNECT_MS) +
				   RUN_START_GRACE_MS));
			return -ETIMEDOUT;
		}
		pump(r, 100);
	}
}

static int start_memory_nodes(struct run *r)
{
	bool pick = must_pick_ports(r);
	size_t len = 16;
	char *s;
	int rc;

	/*
	 * Memory node 0 first, alone: if its pool exists, the cluster name belongs to someone
	 * else (or to a crash), and nothing of that name may be removed by this run.
	 */
	rc = start_mn_range(r, 0, 1, pick);
	if (rc == -EEXIST) {
		r->foreign = true;
		fail(r, "cluster '%s' has files already: another cluster of that name runs, or one "
			"crashed (remora clean --cluster %s)",
		     remora_params_str(r->p, REMORA_P_CLUSTER),
		     remora_params_str(r->p, REMORA_P_CLUSTER));
	}
	if (!rc)
		rc = start_mn_range(r, 1, r->n_mn, pick);
	if (rc)
		return rc;
	if (!pick)
		return 0;
	/* Tell compute nodes (and ourselves) where the memory nodes listen. */
	s = malloc(len + r->n_mn * (REMORA_HOST_MAX + 8));
	if (!s)
		return -ENOMEM;
	strcpy(s, "--mn-addrs=");
	for (unsigned i = 0; i < r->n_mn; i++) {
		struct remora_node_addr a;

		remora_params_mn_addr(r->p, i, &a);
		sprintf(s + strlen(s), "%s%s:%u", i ? "," : "", a.host, r->mn[i].port);
	}
	r->addrs_flag = s;
	if (remora_params_set(r->p, "mn_addrs", s + 11, REMORA_SRC_FLAG,
			      "--mn-addrs (set by remora run)")) {
		fail(r, "%s", remora_params_errmsg(r->p));
		return -REMORA_ECONFIG;
	}
	return 0;
}

static int start_compute_nodes(struct run *r)
{
	uint64_t deadline = now_ms() + (uint64_t)remora_params_int(r->p, REMORA_P_CONNECT_MS) +
			    RUN_START_GRACE_MS;
	int rc;

	for (unsigned i = 0; i < r->n_cn; i++) {
		rc = start_cn(r, i);
		if (rc) {
			fail(r, "cannot start cn %u: %s", i, strerror(-rc));
			return rc;
		}
	}
	/* Start everyone together once each compute node joined or gave up. */
	for (;;) {
		unsigned settled = 0;

		for (unsigned i = 0; i < r->n_cn; i++)
			settled += r->cn[i].ready || r->cn[i].exited || r->cn[i].rd_fd < 0;
		if (settled == r->n_cn)
			break;
		if (run_signal)
			return -EINTR;
		rc = mn_died_during_run(r); /* reported as when the compute nodes run */
		if (rc)
			return rc;
		if (now_ms() > deadline) {
			fail(r, "compute nodes did not join within %d ms",
			     (int)(remora_params_int(r->p, REMORA_P_CONNECT_MS) +
				   RUN_START_GRACE_MS));
			return -ETIMEDOUT;
		}
		pump(r, 100);
	}
	for (unsigned i = 0; i < r->n_cn; i++) {
		if (r->cn[i].go_fd >= 0) {
			if (write(r->cn[i].go_fd, "g", 1) < 0) {
				/* that compute node is gone; its exit status tells why */
			}
			close(r->cn[i].go_fd);
			r->cn[i].go_fd = -1;
		}
	}
	return 0;
}

/*
 * A compute node the memory nodes declared dead (lease expired: hung, stopped, cut off) is
 * fenced already; it must not linger either, or the run would never end.
 */
static void kill_declared_dead(struct run *r)
{
	struct remora_cluster_view v;

	reap(r); /* one that died by itself is reported with its own exit status */
	if (remora_cluster_view(r->tool, &v))
		return;
	for (unsigned i = 0; i < r->n_cn; i++) {
		struct child *c = &r->cn[i];

		if ((v.dead >> i & 1) && c->pid > 0 && !c->exited && !c->killed && !c->doomed) {
			fail(r, "cn %u (pid %d) was declared dead by the memory nodes; killing it",
			     i, (int)c->pid);
			kill(c->pid, SIGKILL);
			c->killed = true;
		}
	}
}

static double wall_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double run_killed_at; /* wall clock of --kill's SIGKILL, for bench's timeline */

double run_kill_time(void)
{
	return run_killed_at;
}

static void kill_child(struct child *c, bool mn, unsigned id)
{
	if (c->doomed || c->exited)
		return;
	c->doomed = true;
	kill(c->pid, SIGKILL);
	run_killed_at = wall_s();
	/* Always printed (also --quiet): the detection time is measured from here. */
	fprintf(stderr, "remora run: --kill: %s %u (pid %d) killed with SIGKILL at t=%.3f\n",
		mn ? "mn" : "cn", id, (int)c->pid, run_killed_at);
}

/* --kill: SIGKILL the nodes named once their T seconds passed since start. */
static void kill_on_schedule(struct run *r, uint64_t start)
{
	const struct run_opts *o = r->o;

	if (o->kill_mn && o->kill_mn <= r->n_mn &&
	    now_ms() >= start + (uint64_t)(o->kill_mn_at * 1000))
		kill_child(&r->mn[o->kill_mn - 1], true, o->kill_mn - 1);
	if (!o->kill_cn || o->kill_cn > r->n_cn)
		return;
	if (o->kill_at < 0) {
		r->cn[o->kill_cn - 1].doomed = true; /* cnI@crash: it kills itself (REMORA_DIE_AT) */
		return;
	}
	if (now_ms() < start + (uint64_t)(o->kill_at * 1000))
		return;
	kill_child(&r->cn[o->kill_cn - 1], false, o->kill_cn - 1);
	for (unsigned i = 0; i < r->n_cn; i++)
		if (o->kill_also >> i & 1)
			kill_child(&r->cn[i], false, i);
}

static int wait_compute_nodes(struct run *r)
{
	uint64_t start = now_ms();
	int64_t limit = remora_params_int(r->p, REMORA_P_RUN_TIMEOUT);
	uint64_t deadline = limit ? now_ms() + (uint64_t)limit * 1000 : UINT64_MAX;
	bool reported[REMORA_MAX_CN] = { false };
	uint64_t next_view = 0;

	for (;;) {
		unsigned done = 0;
		int rc;

		for (unsigned i = 0; i < r->n_cn; i++) {
			struct child *c = &r->cn[i];

			done += c->exited && c->rd_fd < 0;
			if (c->exited && !reported[i] && !c->doomed &&
			    (!WIFEXITED(c->wstatus) || WEXITSTATUS(c->wstatus))) {
				char st[96];

				describe_status(c, st, sizeof(st));
				fail(r, "cn %u (pid %d) %s", i, (int)c->pid, st);
				reported[i] = true;
			}
		}
		if (done == r->n_cn)
			return 0;
		if (run_signal)
			return -EINTR;
		rc = mn_died_during_run(r);
		if (rc)
			return rc;
		if (now_ms() > deadline) {
			fail(r, "run_timeout of %lld s reached; stopping the compute nodes",
			     (long long)limit);
			return -ETIMEDOUT;
		}
		kill_on_schedule(r, start);
		if (now_ms() >= next_view) {
			kill_declared_dead(r);
			next_view = now_ms() + 250;
		}
		pump(r, 200);
	}
}

static int merge_results(struct run *r)
{
	struct job_result res[REMORA_MAX_CN];
	struct job_host host = {
		.cluster = r->tool,
		.tp = remora_cluster_transport(r->tool),
		.params = r->p,
		.n_cn = r->n_cn,
		.n_mn = r->n_mn,
	};

	unsigned n = 0;

	for (unsigned i = 0; i < r->n_cn; i++) {
		const struct child *c = &r->cn[i];

		bool ok = c->exited && WIFEXITED(c->wstatus) && WEXITSTATUS(c->wstatus) == 0;

		/* Killed by --kill: what it committed is not known. One that outlived its death
		 * point (cnI@crash never fired) reported as any other. */
		if (c->doomed && !(ok && c->result))
			continue;
		res[n++] = (struct job_result){
		    .cn = i,
		    .pid = c->pid,
		    .json = c->result,
		    .wstatus = c->wstatus,
		    .ok = ok,
		};
	}
	fflush(stderr);
	return r->job->merge ? r->job->merge(&host, res, n, r->argc, r->argv) : 0;
}

/* Memory nodes exit on SHUTDOWN and remove their pools; stragglers get signals. */
static void stop_memory_nodes(struct run *r)
{
	if (r->tool) {
		/* --kill mnI: the killed node's link is gone, the others still get SHUTDOWN */
		if (!all_exited(r, 'm') && remora_cluster_shutdown(r->tool) && !r->o->kill_mn)
			say(r, "shutdown: %s", remora_cluster_errmsg(r->tool));
		remora_cluster_leave(r->tool);
		r->tool = NULL;
		stop_children(r, 'm', false);
	} else {
		stop_children(r, 'm', true);
	}
}

static int run_phases(struct run *r)
{
	struct job_host host;
	char err[320];
	int rc;

	rc = start_memory_nodes(r);
	if (rc)
		return rc;
	rc = remora_cluster_join(r->p, -1, &r->tool, err, sizeof(err));
	if (rc) {
		fail(r, "memory nodes do not answer: %s", err);
		return rc;
	}
	host = (struct job_host){ .cluster = r->tool,
					 .tp = remora_cluster_transport(r->tool),
					 .params = r->p,
					 .n_cn = r->n_cn,
					 .n_mn = r->n_mn };
	if (r->job->setup) {
		rc = r->job->setup(&host, r->argc, r->argv);
		if (rc) {
			fail(r, "%s setup: %s", r->job->name, remora_strerror(rc));
			return rc;
		}
		if (run_signal)
			return -EINTR;
	}
	rc = start_compute_nodes(r);
	if (!rc)
		rc = wait_compute_nodes(r);
	return rc;
}

static void free_run(struct run *r)
{
	for (unsigned s = 0; s < r->n_mn + r->n_cn; s++) {
		struct child *c = child_at(r, s);

		if (c->rd_fd >= 0)
			close(c->rd_fd);
		if (c->go_fd >= 0)
			close(c->go_fd);
		free(c->buf);
		free(c->result);
	}
	free(r->addrs_flag);
}

static int check_cn_env(const struct run_opts *o, unsigned n_cn, unsigned n_mn)
{
	unsigned killed = 1 + (unsigned)__builtin_popcountll(o->kill_also); /* --kill cn... */

	for (int k = 0; k < o->ncn_env; k++) {
		const char *e = o->cn_env[k], *colon = strchr(e, ':');
		char *end;
		unsigned long id = strtoul(e, &end, 10);

		if (!colon || end != colon || end == e || id >= n_cn || !strchr(colon, '=') ||
		    colon[1] == '=') {
			fprintf(stderr,
				"remora run: --cn-env '%s': expected ID:NAME=VALUE with ID < "
				"cn = %u\n",
				e, n_cn);
			return 2;
		}
	}
	if (o->kill_mn > n_mn) {
		fprintf(stderr, "remora run: --kill mn%u: no such memory node (mn = %u)\n",
			o->kill_mn - 1, n_mn);
		return 2;
	}
	if (o->kill_cn > n_cn) {
		fprintf(stderr, "remora run: --kill cn%u: no such compute node (cn = %u)\n",
			o->kill_cn - 1, n_cn);
		return 2;
	}
	if (n_cn < 64 && (o->kill_also >> n_cn) != 0) {
		fprintf(stderr, "remora run: --kill: compute node %u named, but cn = %u\n",
			63 - (unsigned)__builtin_clzll(o->kill_also), n_cn);
		return 2;
	}
	if (o->kill_cn && n_cn < killed + 1) {
		fprintf(stderr, "remora run: --kill: no compute node would survive to recover the "
			"%u killed (cn = %u; give --cn %u or more)\n", killed, n_cn, killed + 1);
		return 2;
	}
	return 0;
}

int run_cluster(const struct run_opts *o, const struct job *job, int argc,
		       char **argv)
{
	struct run *r;
	struct saved_signals saved;
	ssize_t n;
	int rc, code;

	if (check_cn_env(o, remora_params_cn_count(o->params),
			 remora_params_mn_count(o->params)) ||
	    (job->check && job->check(argc, argv)))
		return 2;
	r = calloc(1, sizeof(*r));
	if (!r)
		return 1;
	r->o = o;
	r->job = job;
	r->argc = argc;
	r->argv = argv;
	r->p = o->params;
	r->n_mn = remora_params_mn_count(r->p);
	r->n_cn = remora_params_cn_count(r->p);
	for (unsigned i = 0; i < REMORA_MAX_MN; i++)
		r->mn[i] = (struct child){ .role = 'm', .id = i, .rd_fd = -1, .go_fd = -1 };
	for (unsigned i = 0; i < REMORA_MAX_CN; i++)
		r->cn[i] = (struct child){ .role = 'c', .id = i, .rd_fd = -1, .go_fd = -1 };
	n = readlink("/proc/self/exe", r->exe, sizeof(r->exe) - 1);
	if (n <= 0) {
		fprintf(stderr, "remora run: /proc/self/exe: %s\n", strerror(errno));
		free(r);
		return 1;
	}
	r->exe[n] = '\0';
	if (remora_params_src(r->p, REMORA_P_CLUSTER) == REMORA_SRC_DEFAULT) {
		char name[32];

		snprintf(name, sizeof(name), "run%d", (int)getpid());
		snprintf(r->cluster_flag, sizeof(r->cluster_flag), "--cluster=%s", name);
		remora_params_set(r->p, "cluster", name, REMORA_SRC_FLAG,
				  "--cluster (set by remora run)");
	}
	/*
	 * The key file's path is fixed here, so that a child given a `dir` of its own (--cn-env)
	 * still finds the secret that memory node 0 creates.
	 */
	if (remora_params_src(r->p, REMORA_P_KEY_FILE) == REMORA_SRC_DEFAULT) {
		char path[512];

		if (remora_cluster_key_path(r->p, path, sizeof(path)) == 0)
			snprintf(r->key_flag, sizeof(r->key_flag), "--key-file=%s", path);
	}
	remora_cluster_transport_cfg(r->p, -1, &r->tcfg);
	if (install_signals(&saved)) {
		fprintf(stderr, "remora run: pipe: %s\n", strerror(errno));
		free(r);
		return 1;
	}
	say(r, "cluster '%s': %u memory nodes, %u compute nodes, backend %s, job %s",
	    remora_params_str(r->p, REMORA_P_CLUSTER), r->n_mn, r->n_cn,
	    remora_params_str(r->p, REMORA_P_BACKEND), job->name);

	rc = run_phases(r);
	if (rc == 0 && !run_signal) {
		code = merge_results(r);
		if (r->failed && code == 0)
			code = 1;
	} else {
		code = 1;
	}
	/* Every path ends here: stop what still runs, then remove every file of the cluster. */
	stop_children(r, 'c', true);
	stop_memory_nodes(r);
	rc = r->foreign ? 0 : remora_transport_cleanup(&r->tcfg);
	if (!r->foreign)
		remora_cluster_key_remove(r->p);
	if (rc && rc != -ENOENT)
		fail(r, "cleanup of cluster '%s': %s", r->tcfg.cluster,
		     rc == -EBUSY ? remora_last_error() : remora_strerror(rc));
	if (run_signal) {
		fprintf(stderr,
			"remora run: interrupted by signal %d; cluster stopped and removed\n",
			(int)run_signal);
		code = 128 + run_signal;
	}
	restore_signals(&saved);
	free_run(r);
	free(r);
	return code;
}

/* ---- the commands ----------------------------------------------------------------------- */

static void run_jobs_help(FILE *f)
{
	fprintf(f, "\nJobs:\n");
	job_list(f, "  ");
	for (unsigned i = 0; job_table[i]; i++)
		if (job_table[i]->args) {
			fprintf(f, "\n%s arguments:\n", job_table[i]->name);
			cli_options_help(job_table[i]->args, f);
		} else if (job_table[i]->usage) {
			fprintf(f, "\n%s arguments:\n%s", job_table[i]->name,
				job_table[i]->usage);
		}
}

#define RUN_MAX_CN_ENV 64

/* remora run's options: the run's, and room for the --cn-env words. */
struct run_cli {
	struct run_opts o;
	const char *cn_env[RUN_MAX_CN_ENV];
};

static int run_cn_env(void *opts, const char *cmd, const char *name, const char *val)
{
	struct run_cli *r = opts;

	if (r->o.ncn_env == RUN_MAX_CN_ENV)
		return cli_bad(cmd, name, "given too often");
	r->cn_env[r->o.ncn_env++] = val;
	return 0;
}

/* "cn" then a digit, no blank anywhere: sscanf alone would take "cn 1@2s" and "cn-1@2s". */
static bool kill_form(const char *v)
{
	return v && (!strncmp(v, "cn", 2) || !strncmp(v, "mn", 2)) &&
	       isdigit((unsigned char)v[2]) && !strpbrk(v, " \t\n\v\f\r");
}

/* A node id of at most 5 digits below max at s: the digits taken, or -1 (no wrap-around). */
static int node_id(const char *s, unsigned max, unsigned *id)
{
	unsigned long v = 0;
	int n = 0;

	while (n < 6 && isdigit((unsigned char)s[n]))
		v = v * 10 + (unsigned long)(s[n++] - '0');
	if (!n || n > 5 || v >= max)
		return -1;
	*id = (unsigned)v;
	return n;
}

_Static_assert(REMORA_MAX_CN <= 64, "--kill's list of compute nodes is a 64-bit set");

/*
 * "+J+K..." after the first compute node of --kill: bits J, K in *more; returns the characters
 * taken, or -1 on a bad or repeated id.
 */
static int parse_more_cns(const char *s, unsigned first, uint64_t *more)
{
	int at = 0;

	*more = 0;
	while (s[at] == '+') {
		unsigned j;
		int used = node_id(s + at + 1, REMORA_MAX_CN, &j);

		if (used < 0 || j == first || (*more >> j & 1))
			return -1;
		*more |= UINT64_C(1) << j;
		at += 1 + used;
	}
	return at;
}

/* cnI+J+...@T: several compute nodes at once (never @crash). */
static int parse_kill_list(const char *v, unsigned id, int used, struct run_opts *o)
{
	char err[160] = "bad id list";
	int more = parse_more_cns(v + 2 + used, id, &o->kill_also);

	if (more < 0 || v[2 + used + more] != '@' ||
	    bu_parse_seconds(v + 3 + used + more, &o->kill_at, err, sizeof(err))) {
		fprintf(stderr, "remora: --kill %s: %s (expected cnI+J@SECONDS, distinct ids, e.g. "
			"cn1+2@2s)\n", v, err);
		return 1;
	}
	o->kill_cn = id + 1;
	return 0;
}

/*
 * --kill cnI@T (T: seconds, "2", "2s", "500ms" as bu_parse_seconds takes them), or cnI@crash:
 * compute node I is expected to kill itself (fault injection given with --cn-env).
 * cnI+J+...@T kills several compute nodes at once. mnI@T kills memory node I. At most one
 * --kill of each kind: a memory node, then compute nodes after the failover, say.
 */
int run_parse_kill(const char *v, struct run_opts *o)
{
	char err[160] = "missing value";
	bool mn = kill_form(v) && v[0] == 'm';
	unsigned id = 0;
	double at = 0;
	int used = -1;

	if (mn ? o->kill_mn != 0 : o->kill_cn != 0) {
		fprintf(stderr, "remora: --kill %s: a second --kill of a %s node (one of each kind "
			"per run; name several compute nodes as cnI+J@T)\n", v ? v : "",
			mn ? "memory" : "compute");
		return 1;
	}
	if (kill_form(v))
		used = node_id(v + 2, mn ? REMORA_MAX_MN : REMORA_MAX_CN, &id);
	if (used > 0 && !mn && v[2 + used] == '+')
		return parse_kill_list(v, id, used, o);
	if (used > 0 && !mn && !strcmp(v + 2 + used, "@crash"))
		at = -1;
	else if (used < 0 || v[2 + used] != '@' ||
		 bu_parse_seconds(v + 3 + used, &at, err, sizeof(err))) {
		fprintf(stderr, "remora: --kill %s: %s (expected cnI@SECONDS or mnI@SECONDS, e.g. "
			"cn1@2s)\n", v ? v : "", used > 0 && v[2 + used] == '@' ? err : "bad form");
		return 1;
	}
	if (mn) {
		o->kill_mn = id + 1;
		o->kill_mn_at = at;
	} else {
		o->kill_cn = id + 1;
		o->kill_at = at;
	}
	return 0;
}

static int run_kill(void *opts, const char *cmd, const char *name, const char *val)
{
	(void)cmd, (void)name;
	return run_parse_kill(val, &((struct run_cli *)opts)->o) ? 2 : 0;
}

static const struct cli_opt run_opt_table[] = {
	CLI_OPT_FN("--cn-env", "ID:NAME=VALUE", run_cn_env,
		   "set an environment variable in compute node ID only, e.g.\n"
		   "--cn-env 1:REMORA_DIE_AT_VERB=5000 (repeatable)"),
	CLI_OPT_FN("--kill", "cnI@T|cnI+J@T|mnI@T", run_kill,
		   "SIGKILL compute node I T seconds after the start (e.g. cn1@2s;\n"
		   "cn1+2@2s kills two at once),\n"
		   "or cnI@crash: it kills itself (--cn-env I:REMORA_DIE_AT=...);\n"
		   "its death is expected and its result left out. mnI@T kills\n"
		   "memory node I: the compute nodes fail over (ford, pandora).\n"
		   "Twice: one memory node and compute nodes, e.g. --kill mn1@1s\n"
		   "--kill cn2@2s"),
	CLI_OPT_FLAG("--quiet", struct run_cli, o.quiet, "no progress lines on stderr"),
	{ 0 },
};

static const struct cli_cmd run_cmd = {
	.name = "run",
	.usage = "usage: remora run [--mn N] [--cn M] [--config FILE] [--<param> VALUE...] "
		 "[options]\n"
		 "                  [<job> [job args]]\n"
		 "Starts N memory-node and M compute-node processes on this host (parameters mn "
		 "and cn),\n"
		 "runs <job> (default: smoke) on every compute node, prints the merged result, "
		 "stops the\n"
		 "cluster and removes its files, also after a failure, a crashed process or "
		 "Ctrl-C.\n"
		 "Exit status: 0 when every compute node succeeded and the job's check passed, 1\n"
		 "otherwise, 2 for usage errors, 128+N after signal N. Memory-node ports are "
		 "picked\n"
		 "automatically unless the config file names every one; the cluster is named "
		 "run<pid>\n"
		 "unless --cluster is given.\n",
	.opts = run_opt_table,
	.params = true,
	.operands = true,
	.more_help = run_jobs_help,
};

int cmd_run(int argc, char **argv)
{
	static char *default_job[] = { "smoke", NULL };
	struct run_cli r = { 0 };
	const struct job *job;
	struct cli_params cp;
	char **job_argv = default_job;
	int i = 1, rc, job_argc = 1;

	r.o.cn_env = r.cn_env;
	rc = cli_start(&run_cmd, &r, &cp, argc, argv, &i);
	if (rc != CLI_GO)
		return rc;
	if (i < argc) {
		job_argv = argv + i;
		job_argc = argc - i;
	}
	job = job_find(job_argv[0]);
	if (!job) {
		char names[256];

		job_names(names, sizeof(names));
		fprintf(stderr, "remora run: unknown job '%s' (jobs: %s)\n", job_argv[0], names);
		goto usage_error;
	}
	if (cli_params_finish(&cp))
		goto usage_error;
	r.o.params = cp.p;
	r.o.config = cp.config;
	r.o.nflags = cp.nflags;
	r.o.flags = cp.flags;
	rc = run_cluster(&r.o, job, job_argc, job_argv);
	cli_params_fini(&cp);
	return rc;

usage_error:
	cli_params_fini(&cp);
	return 2;
}

static const struct cli_opt no_opts[] = { { 0 } };

static const struct cli_cmd clean_cmd = {
	.name = "clean",
	.usage = "usage: remora clean --cluster NAME [--config FILE] [--<param> VALUE...]\n"
		 "Removes every file cluster NAME left behind (pools, message and cost segments,\n"
		 "the key file)\n"
		 "after a crash. Never run it while processes of that cluster are alive.\n",
	.opts = no_opts,
	.params = true,
};

int cmd_clean(int argc, char **argv)
{
	struct remora_transport_cfg tcfg;
	struct cli_params cp;
	int i = 1, rc;

	rc = cli_start(&clean_cmd, NULL, &cp, argc, argv, &i);
	if (rc != CLI_GO)
		return rc;
	if (cli_params_finish(&cp)) {
		cli_params_fini(&cp);
		return 2;
	}
	if (remora_params_src(cp.p, REMORA_P_CLUSTER) == REMORA_SRC_DEFAULT)
		fprintf(stderr, "remora clean: no --cluster given: cleaning cluster '%s'\n",
			remora_params_str(cp.p, REMORA_P_CLUSTER));
	remora_cluster_transport_cfg(cp.p, -1, &tcfg);
	rc = remora_transport_cleanup(&tcfg);
	if (rc && rc != -ENOENT)
		fprintf(stderr, "remora clean: %s\n",
			rc == -EBUSY ? remora_last_error() : remora_strerror(rc));
	if (rc != -EBUSY) /* a live cluster keeps its key */
		remora_cluster_key_remove(cp.p);
	cli_params_fini(&cp);
	return rc && rc != -ENOENT ? 1 : 0;
}
