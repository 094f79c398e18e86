/* SPDX-License-Identifier: MIT */
/*
 * `remora bench --crash-campaign N [--crash-recover online|whole] [--crash-points LIST]
 *  [--seed S] [bench options]`
 *
 * Each iteration is one short cluster job: this very binary (/proc/self/exe) runs
 * `remora bench <options> --check --kill cnV@... [--cn-env V:REMORA_DIE_AT...]`, so the
 * cluster, the kill and the check are remora run's own. Compute node V, drawn at random, dies
 * in one of three ways, drawn at random too: at a commit-path point (REMORA_DIE_AT=point:K),
 * at a verb (REMORA_DIE_AT_VERB=N) or by SIGKILL at a random time within the run. A node that
 * finishes before its death point simply finishes: the table says how many died.
 *
 * online: the survivors recover the dead node while they run, then the job's check runs.
 * whole: once the memory nodes declared the node dead, the whole cluster is killed (remora run
 * stopped first, so that nothing removes the pools; they are kept in /dev/shm), its memory
 * nodes restarted on the kept pools, `remora recover` run, then `remora check --partial` (the
 * run's accumulators died with it), then the cluster removed.
 *
 * Litmus without --test cycles through l1, l1-insdel, l2 and l3. kvs records a history in each
 * job (--history, in the campaign's directory unless given; --history-crash on), which the
 * job's check runs the history checker on: the dead node's file holds its transactions up to
 * its death, the ones it was committing as pending. An iteration passes when the job (and in
 * whole mode recover and check) exit 0; a VIOLATION, any other failure, or a step still
 * running after its time limit (a hang) stops the campaign: its log is kept and the command
 * that reproduces the job is printed.
 */
#include "crash_campaign.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <remora/params.h>

#define CC_MAX_ARGS 128
#define CC_MAX_POINTS 8
#define CC_LIMIT_S 120 /* one step's time limit: a job still running then hangs */

enum cc_mode { CC_ONLINE, CC_WHOLE };
enum cc_outcome { CC_OK, CC_VIOLATION, CC_FAILED, CC_HANG, CC_USAGE };

struct cc {
	unsigned long iters;
	enum cc_mode mode;
	bool mode_set;
	uint64_t seed, rng;
	const char *protocol, *workload, *test;
	bool history_given;      /* --history DIR: the jobs share it */
	bool crash_given;        /* --history-crash given */
	unsigned n_cn;
	const char *points[CC_MAX_POINTS]; /* --crash-points: the deaths to draw from */
	unsigned npoints;
	double run_s;            /* about how long one job's transactions run */
	/* the bench options, one "--name=value" word each: all, cluster parameters, knobs */
	char *base[CC_MAX_ARGS], *params[CC_MAX_ARGS], *knobs[CC_MAX_ARGS];
	int nbase, nparams, nknobs;
	char dir[64];            /* logs */
	/* counts */
	unsigned long done, crashed, recovered, violations, failed, hangs;
};

/* Deaths: the commit-path points of REMORA_DIE_AT, a verb, a SIGKILL at a random time. */
static const char *const cc_all_points[] = {
	"txn.locked", "txn.logged", "txn.commit_write", "txn.commit_mid", "txn.unlock",
	"verb", "time", NULL,
};
static const char *const cc_tests[] = { "l1", "l1-insdel", "l2", "l3" };

bool cc_requested(int argc, char **argv)
{
	bool cc = false;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return false; /* bench prints the usage, --crash-campaign included */
		cc |= !strcmp(argv[i], "--crash-campaign") ||
		      !strncmp(argv[i], "--crash-campaign=", 17);
	}
	return cc;
}

/* ---- options ---------------------------------------------------------------------------- */

static int bad(const char *fmt, const char *val)
{
	fprintf(stderr, "remora bench: ");
	fprintf(stderr, fmt, val);
	fputc('\n', stderr);
	return 2;
}

static int parse_u64(const char *v, uint64_t min, uint64_t *out)
{
	char *end;
	unsigned long long x;

	if (!v || *v < '0' || *v > '9')
		return -1;
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || *end || x < min)
		return -1;
	*out = x;
	return 0;
}

/* Bench's own options (not handed to remora check): those with a value, then flags. */
static const char *const bench_valued[] = { "workload", "duration", "warmup", "txns", "json",
					    NULL };
static const char *const bench_flags[] = { "check", "no-check", "timeline", NULL };

static bool in(const char *const *list, const char *name)
{
	for (; *list; list++)
		if (!strcmp(*list, name))
			return true;
	return false;
}

/* 1: a cluster parameter taking no value word (a boolean, or its --no- form), 2: one with. */
static int param_kind(const char *name)
{
	int id = remora_param_find(name);

	if (!strcmp(name, "config"))
		return 2;
	if (id < 0 && !strncmp(name, "no-", 3) && remora_param_find(name + 3) >= 0)
		return 1;
	if (id < 0)
		return 0;
	return remora_param_def((enum remora_param_id)id)->type == REMORA_PT_BOOL ? 1 : 2;
}

/* --crash-points txn.commit_mid,verb,...: the deaths drawn from (default: all of them). */
static int parse_points(struct cc *c, const char *v)
{
	char list[256], *save = NULL;

	snprintf(list, sizeof(list), "%s", v);
	c->npoints = 0;
	for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		unsigned k = 0;

		while (cc_all_points[k] && strcmp(cc_all_points[k], t))
			k++;
		if (!cc_all_points[k])
			return bad("--crash-points '%s': expected a list of txn.locked, txn.logged, "
				   "txn.commit_write, txn.commit_mid, txn.unlock, verb, time", v);
		if (c->npoints < CC_MAX_POINTS)
			c->points[c->npoints++] = cc_all_points[k];
	}
	return c->npoints ? 0 : bad("--crash-points '%s': empty", v);
}

static int campaign_opt(struct cc *c, const char *name, const char *v)
{
	uint64_t x;

	if (!strcmp(name, "crash-campaign")) {
		if (parse_u64(v, 1, &x))
			return bad("--crash-campaign '%s': expected a positive number of iterations",
				   v);
		c->iters = (unsigned long)x;
	} else if (!strcmp(name, "crash-recover")) {
		if (strcmp(v, "online") && strcmp(v, "whole"))
			return bad("--crash-recover '%s': expected online or whole", v);
		c->mode = strcmp(v, "online") ? CC_WHOLE : CC_ONLINE;
		c->mode_set = true;
	} else if (!strcmp(name, "crash-points")) {
		return parse_points(c, v);
	} else if (parse_u64(v, 0, &c->seed)) {
		return bad("--seed '%s': expected a number", v);
	}
	return 0;
}

/* Keeps "--name=value" (or a flag) in base, and in params or knobs. */
static int keep(struct cc *c, const char *name, const char *v, int kind)
{
	static char words[CC_MAX_ARGS][256];
	char *w = words[c->nbase];

	if (c->nbase + 1 >= CC_MAX_ARGS)
		return bad("--%s: too many options", name);
	snprintf(w, sizeof(words[0]), v ? "--%s=%s" : "--%s", name, v);
	c->base[c->nbase++] = w;
	if (kind)
		c->params[c->nparams++] = w;
	else if (!in(bench_valued, name) && !in(bench_flags, name))
		c->knobs[c->nknobs++] = w;
	if (!v)
		return 0;
	if (!strcmp(name, "protocol"))
		c->protocol = v;
	else if (!strcmp(name, "workload"))
		c->workload = v;
	else if (!strcmp(name, "test"))
		c->test = v;
	else if (!strcmp(name, "history"))
		c->history_given = true;
	else if (!strcmp(name, "history-crash"))
		c->crash_given = true;
	else if (!strcmp(name, "cn") && parse_u64(v, 0, &(uint64_t){ 0 }) == 0)
		c->n_cn = (unsigned)strtoul(v, NULL, 10);
	return 0;
}

/* One option at argv[*i] ("--name value", "--name=value" or a flag). */
static int take_opt(struct cc *c, int argc, char **argv, int *i)
{
	static const char *const ours[] = { "crash-campaign", "crash-recover", "crash-points",
					    "seed", NULL };
	char name[64];
	const char *a = argv[*i], *eq = strchr(a, '='), *v = NULL;
	int kind;

	if (strncmp(a, "--", 2) || (size_t)(eq ? eq - a : (long)strlen(a)) >= sizeof(name) + 2)
		return bad("'%s': not an option of remora bench", a);
	snprintf(name, sizeof(name), "%.*s", (int)(eq ? eq - a - 2 : (long)strlen(a) - 2), a + 2);
	if (!strcmp(name, "kill") || !strcmp(name, "cn-env"))
		return bad("--%s: the crash campaign draws its own kills", name);
	kind = param_kind(name);
	if (eq) {
		v = eq + 1;
	} else if (kind != 1 && !in(bench_flags, name)) {
		if (*i + 1 >= argc)
			return bad("--%s: a value is missing", name);
		v = argv[++*i];
	}
	if (in(ours, name))
		return v ? campaign_opt(c, name, v) : bad("--%s: a value is missing", name);
	return keep(c, name, v, kind);
}

/* Online recovery exists for these two (docs/recovery.md); whole-cluster recovery for all. */
static bool has_online_recovery(const char *p)
{
	return !strcmp(p, "pandora") || !strcmp(p, "motor");
}

/* Was a cluster parameter given ("--mn=" prefix), or a config file that may set it? */
static bool param_given(const struct cc *c, const char *prefix)
{
	for (int i = 0; i < c->nparams; i++)
		if (!strncmp(c->params[i], prefix, strlen(prefix)) ||
		    !strncmp(c->params[i], "--config=", 9))
			return true;
	return false;
}

static int parse(struct cc *c, int argc, char **argv)
{
	int rc;

	c->seed = 1;
	c->n_cn = 3;
	c->protocol = "pandora";
	c->workload = "kvs";
	for (int i = 1; i < argc; i++) {
		rc = take_opt(c, argc, argv, &i);
		if (rc)
			return rc;
	}
	/* remora run's shape unless given: 2 memory nodes, 3 compute nodes, pandora */
	if (!param_given(c, "--mn="))
		keep(c, "mn", "2", 2);
	if (!param_given(c, "--cn="))
		keep(c, "cn", "3", 2);
	if (!param_given(c, "--protocol="))
		keep(c, "protocol", c->protocol, 2);
	if (!c->npoints)
		parse_points(c, "txn.locked,txn.logged,txn.commit_write,txn.commit_mid,txn.unlock,"
				"verb,time");
	if (c->n_cn < 2)
		return bad("--crash-campaign: with %s compute node none survives a kill (give "
			   "--cn 2 or more)", c->n_cn ? "one" : "no");
	if (!c->mode_set)
		c->mode = has_online_recovery(c->protocol) ? CC_ONLINE : CC_WHOLE;
	if (c->mode == CC_ONLINE && !has_online_recovery(c->protocol))
		return bad("--crash-recover online: protocol %s has no online recovery (pandora "
			   "and motor have; --crash-recover whole recovers any)", c->protocol);
	return 0;
}

/* ---- one job ---------------------------------------------------------------------------- */

static uint64_t rnd(struct cc *c, uint64_t n)
{
	uint64_t z = (c->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return n ? z % n : 0;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

struct cc_iter {
	char seed[40], test[40], kill[64], env[96], cluster[64], log[128];
	char hist[128], hist_dir[112]; /* --history=DIR of a kvs job, and DIR */
	const char *argv[CC_MAX_ARGS + 12];
	int argc;
	const char *how; /* the death drawn */
};

static void add(struct cc_iter *x, const char *w)
{
	x->argv[x->argc++] = w;
	x->argv[x->argc] = NULL;
}

/* kvs jobs record a history for the check, in a directory of their own unless given one. */
static bool records_history(const struct cc *c)
{
	return !strcmp(c->workload, "kvs") && !c->history_given;
}

/* Removes a passed job's history directory (its hist-*.bin files, then the directory). */
static void remove_history(const struct cc_iter *x)
{
	struct dirent *de;
	DIR *d = x->hist_dir[0] ? opendir(x->hist_dir) : NULL;

	if (!d)
		return;
	while ((de = readdir(d))) {
		char path[400];

		if (strncmp(de->d_name, "hist-", 5))
			continue;
		snprintf(path, sizeof(path), "%s/%s", x->hist_dir, de->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(x->hist_dir);
}

/* Draws iteration it's victim and death, and builds its job's command line. */
static void draw(struct cc *c, unsigned long it, struct cc_iter *x)
{
	unsigned v = (unsigned)rnd(c, c->n_cn);

	memset(x, 0, sizeof(*x));
	x->how = c->points[rnd(c, c->npoints)];
	add(x, "remora");
	add(x, "bench");
	for (int i = 0; i < c->nbase; i++)
		add(x, c->base[i]);
	if (!strcmp(c->workload, "litmus") && !c->test) {
		snprintf(x->test, sizeof(x->test), "--test=%s", cc_tests[it % 4]);
		add(x, x->test);
	}
	if (records_history(c)) {
		snprintf(x->hist_dir, sizeof(x->hist_dir), "%s/hist-%lu", c->dir, it);
		snprintf(x->hist, sizeof(x->hist), "--history=%s", x->hist_dir);
		add(x, x->hist);
	}
	if (!strcmp(c->workload, "kvs") && !c->crash_given)
		add(x, "--history-crash=on"); /* the dead node's records survive its kill */
	snprintf(x->seed, sizeof(x->seed), "--seed=%" PRIu64, c->seed * 1000003u + it);
	add(x, x->seed);
	add(x, "--check");
	if (!strcmp(x->how, "verb"))
		snprintf(x->env, sizeof(x->env), "--cn-env=%u:REMORA_DIE_AT_VERB=%u", v,
			 2000 + (unsigned)rnd(c, 40000));
	else if (strcmp(x->how, "time"))
		snprintf(x->env, sizeof(x->env), "--cn-env=%u:REMORA_DIE_AT=%s:%u", v, x->how,
			 1 + (unsigned)rnd(c, 200));
	if (x->env[0]) {
		snprintf(x->kill, sizeof(x->kill), "--kill=cn%u@crash", v);
		add(x, x->env);
	} else {
		snprintf(x->kill, sizeof(x->kill), "--kill=cn%u@%.3fs", v,
			 0.1 + (double)rnd(c, 1000) / 1000.0 * c->run_s);
	}
	add(x, x->kill);
	if (c->mode == CC_WHOLE) {
		/* a cluster of our own naming, whose pools a SIGKILL leaves for the restart */
		snprintf(x->cluster, sizeof(x->cluster), "--cluster=cc%ldi%lu", (long)getpid(), it);
		add(x, x->cluster);
		add(x, "--keep-pool");
	}
	snprintf(x->log, sizeof(x->log), "%s/iter-%lu.log", c->dir, it);
}

/* Starts argv (this binary) in a process group of its own, output appended to log. */
static pid_t spawn(const char *const *argv, const char *log, int ready_fd)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid != 0)
		return pid;
	int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

	/* its own group (a hang is killed whole), and gone with the campaign (^C, a kill) */
	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (fd >= 0) {
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		close(fd);
	}
	if (ready_fd >= 0) {
		dup2(ready_fd, 3);
		if (ready_fd != 3)
			close(ready_fd);
	}
	execv("/proc/self/exe", (char *const *)argv);
	_exit(127);
}

static bool log_has(const char *log, const char *what)
{
	char line[1024];
	bool found = false;
	FILE *f = fopen(log, "r");

	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	if (f)
		fclose(f);
	return found;
}

/* Exit status of pid (128 + signal when killed), or -1 after limit_s (it is then killed). */
static int wait_job(pid_t pid, unsigned limit_s, const char *log, bool *died)
{
	uint64_t end = now_ms() + limit_s * 1000u;
	int st;

	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);

		if (w == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (w < 0 && errno != EINTR)
			return 1;
		if (died && log_has(log, "declared dead")) {
			*died = true;
			return 0;
		}
		if (now_ms() > end) {
			/* remora run's memory nodes remove their pools when it dies */
			kill(-pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		sleep_ms(died ? 5 : 20);
	}
}

/* ---- whole-cluster recovery ------------------------------------------------------------- */

/* The whole cluster dies at once: remora run is frozen with its group, then all killed. */
static void kill_cluster(pid_t run)
{
	uint64_t end = now_ms() + 5000;

	kill(-run, SIGSTOP); /* nobody may remove a pool or the key on its way out */
	kill(-run, SIGKILL);
	waitpid(run, NULL, 0);
	while (kill(-run, 0) == 0 && now_ms() < end)
		sleep_ms(5); /* its children, now init's, are reaped */
}

struct cc_whole {
	const char *argv[CC_MAX_ARGS + 12];
	int argc;
	pid_t mn[8];
	unsigned n_mn;
	char ids[8][16], addrs[200];
};

static void wadd(struct cc_whole *w, const char *word)
{
	w->argv[w->argc++] = word;
	w->argv[w->argc] = NULL;
}

/* argv = remora CMD <the cluster parameters> --cluster=... */
static void wcmd(struct cc_whole *w, const struct cc *c, const struct cc_iter *x,
		 const char *cmd)
{
	w->argc = 0;
	wadd(w, "remora");
	wadd(w, cmd);
	for (int i = 0; i < c->nparams; i++)
		wadd(w, c->params[i]);
	wadd(w, x->cluster);
}

/* Restarts memory node i on its kept pool; 0, or -1 when it did not say ready in time. */
static int start_mn(struct cc_whole *w, const struct cc *c, const struct cc_iter *x,
		    unsigned i, unsigned *port)
{
	uint64_t end = now_ms() + 30000;
	char line[64] = "";
	size_t n = 0;
	int p[2];

	if (pipe(p))
		return -1;
	wcmd(w, c, x, "mn");
	snprintf(w->ids[i], sizeof(w->ids[i]), "--id=%u", i);
	wadd(w, w->ids[i]);
	wadd(w, "--keep-pool");
	wadd(w, "--foreground");
	wadd(w, "--port=0");
	wadd(w, "--ready-fd=3");
	w->mn[i] = spawn(w->argv, x->log, p[1]);
	close(p[1]);
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	while (w->mn[i] > 0 && now_ms() < end && !strchr(line, '\n')) {
		ssize_t k = read(p[0], line + n, sizeof(line) - 1 - n);

		if (k > 0)
			n += (size_t)k;
		else if (k == 0)
			break;
		else
			sleep_ms(5);
		line[n] = '\0';
	}
	close(p[0]);
	return sscanf(line, "ready %u", port) == 1 ? 0 : -1;
}

static void stop_mns(struct cc_whole *w)
{
	for (unsigned i = 0; i < w->n_mn; i++)
		if (w->mn[i] > 0)
			kill(w->mn[i], SIGTERM);
	for (unsigned i = 0; i < w->n_mn; i++)
		if (w->mn[i] > 0 && wait_job(w->mn[i], 10, NULL, NULL) < 0)
			kill(w->mn[i], SIGKILL);
}

static unsigned n_mn_of(const struct cc *c)
{
	for (int i = 0; i < c->nparams; i++)
		if (!strncmp(c->params[i], "--mn=", 5))
			return (unsigned)strtoul(c->params[i] + 5, NULL, 10);
	return 2;
}

/* remora clean: the kept pools of a whole-mode cluster, after its recovery or a hang. */
static void clean_cluster(const struct cc *c, const struct cc_iter *x)
{
	static struct cc_whole w;

	wcmd(&w, c, x, "clean");
	wait_job(spawn(w.argv, x->log, -1), 30, NULL, NULL);
}

/* Memory nodes back on their pools, remora recover, remora check --partial, cluster removed. */
static enum cc_outcome recover_whole(struct cc *c, const struct cc_iter *x)
{
	static struct cc_whole w;
	char wl[96];
	enum cc_outcome out = CC_OK;
	size_t at;
	int rc = 0;

	memset(&w, 0, sizeof(w));
	w.n_mn = n_mn_of(c);
	if (w.n_mn > 8)
		w.n_mn = 8;
	at = (size_t)snprintf(w.addrs, sizeof(w.addrs), "--mn-addrs=");
	for (unsigned i = 0; i < w.n_mn && !rc; i++) {
		unsigned port = 0;

		rc = start_mn(&w, c, x, i, &port);
		at += (size_t)snprintf(w.addrs + at, sizeof(w.addrs) - at, "%s127.0.0.1:%u",
				       i ? "," : "", port);
	}
	if (!rc) {
		wcmd(&w, c, x, "recover");
		wadd(&w, w.addrs);
		rc = wait_job(spawn(w.argv, x->log, -1), CC_LIMIT_S, x->log, NULL);
		if (rc == 0)
			c->recovered++;
	}
	if (!rc) {
		wcmd(&w, c, x, "check");
		wadd(&w, w.addrs);
		snprintf(wl, sizeof(wl), "--workload=%s", c->workload);
		wadd(&w, wl);
		for (int i = 0; i < c->nknobs; i++)
			wadd(&w, c->knobs[i]);
		if (x->test[0])
			wadd(&w, x->test);
		if (x->hist[0])
			wadd(&w, x->hist);
		wadd(&w, "--partial");
		rc = wait_job(spawn(w.argv, x->log, -1), CC_LIMIT_S, x->log, NULL);
	}
	if (rc < 0)
		out = CC_HANG;
	else if (rc)
		out = log_has(x->log, "VIOLATION") ? CC_VIOLATION : CC_FAILED;
	stop_mns(&w);
	clean_cluster(c, x);
	return out;
}

/* ---- one iteration ---------------------------------------------------------------------- */

static enum cc_outcome count(struct cc *c, enum cc_outcome out)
{
	c->violations += out == CC_VIOLATION;
	c->failed += out == CC_FAILED;
	c->hangs += out == CC_HANG;
	return out;
}

static enum cc_outcome one_iteration(struct cc *c, const struct cc_iter *x)
{
	bool died = false;
	pid_t pid = spawn(x->argv, x->log, -1);
	int rc;

	c->done++;
	if (pid < 0)
		return count(c, CC_FAILED);
	rc = wait_job(pid, CC_LIMIT_S, x->log, c->mode == CC_WHOLE ? &died : NULL);
	if (died) {
		sleep_ms((unsigned)rnd(c, 30)); /* the whole cluster dies a little later */
		kill_cluster(pid);
		c->crashed++;
		return count(c, recover_whole(c, x));
	}
	if (log_has(x->log, "declared dead"))
		c->crashed++;
	if (c->mode == CC_ONLINE && log_has(x->log, "recovered here"))
		c->recovered++;
	if (rc == 0)
		return CC_OK;
	if (rc == 2 && c->done == 1)
		return CC_USAGE; /* the first job refused its options: bad usage, not a crash */
	if (rc < 0 && c->mode == CC_WHOLE)
		clean_cluster(c, x); /* killed with its memory nodes: their pools were kept */
	if (rc < 0)
		return count(c, CC_HANG);
	return count(c, log_has(x->log, "VIOLATION") ? CC_VIOLATION : CC_FAILED);
}

/* ---- the campaign ----------------------------------------------------------------------- */

static void print_cmd(const struct cc_iter *x)
{
	printf("  the job (same environment, REMORA_MUTATE included):\n   ");
	for (int i = 0; i < x->argc; i++)
		printf(" %s", x->argv[i]);
	printf("\n");
}

static void print_table(const struct cc *c, double secs)
{
	printf("\nremora bench --crash-campaign: protocol %s, %s recovery, seed %" PRIu64
	       ", %.0f s\n", c->protocol, c->mode == CC_ONLINE ? "online" : "whole-cluster",
	       c->seed, secs);
	printf("  %-12s %10s %8s %10s %10s %7s %6s\n", "workload", "iterations", "crashes",
	       "recovered", "violations", "failed", "hangs");
	printf("  %-12s %10lu %8lu %10lu %10lu %7lu %6lu\n", c->test ? c->test :
	       records_history(c) || c->history_given ? "kvs+history" : c->workload, c->done,
	       c->crashed, c->recovered, c->violations, c->failed, c->hangs);
}

/* Litmus runs as long as its rounds last; others as long as --duration says (default 5). */
static double job_seconds(const struct cc *c)
{
	double rounds = 100, ms = 20, dur = 0;

	for (int i = 0; i < c->nbase; i++) {
		if (!strncmp(c->base[i], "--rounds=", 9))
			rounds = atof(c->base[i] + 9);
		else if (!strncmp(c->base[i], "--round-ms=", 11))
			ms = atof(c->base[i] + 11);
		else if (!strncmp(c->base[i], "--duration=", 11))
			dur = atof(c->base[i] + 11);
	}
	if (dur > 0)
		return dur;
	return strcmp(c->workload, "litmus") ? 5.0 : rounds * ms / 1000.0;
}

/* The check's own line (kvs: the store scan's or the history checker's verdict). */
static void print_violation(const struct cc_iter *x)
{
	char line[1024];
	FILE *f = fopen(x->log, "r");

	while (f && fgets(line, sizeof(line), f)) {
		const char *v = strstr(line, "VIOLATION");

		if (v) {
			printf("  check: %s", v);
			if (!strchr(v, '\n'))
				putchar('\n');
			break;
		}
	}
	if (f)
		fclose(f);
}

static void report(const struct cc *c, const struct cc_iter *x, enum cc_outcome out,
		   unsigned long it)
{
	if (out == CC_USAGE) {
		fprintf(stderr, "remora bench: --crash-campaign: the job refused its options (see "
			"%s)\n", x->log);
		return;
	}
	if (out != CC_OK) {
		printf("iteration %lu: %s (death: %s); log %s\n", it,
		       out == CC_VIOLATION ? "VIOLATION" : out == CC_HANG ? "hang" : "failed",
		       x->how, x->log);
		if (out == CC_VIOLATION)
			print_violation(x);
		return;
	}
	if ((it + 1) % 50 == 0) {
		printf("  %lu iterations, %lu crashes, %lu recovered\n", it + 1, c->crashed,
		       c->recovered);
		fflush(stdout);
	}
}

int cc_run(int argc, char **argv)
{
	static struct cc c;
	static struct cc_iter x;
	uint64_t t0 = now_ms();
	enum cc_outcome out = CC_OK;
	int rc = parse(&c, argc, argv);

	if (rc)
		return rc;
	c.rng = c.seed;
	c.run_s = job_seconds(&c);
	snprintf(c.dir, sizeof(c.dir), "/tmp/remora-campaign-XXXXXX");
	if (!mkdtemp(c.dir)) {
		fprintf(stderr, "remora bench: --crash-campaign: mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	for (unsigned long it = 0; it < c.iters && out == CC_OK; it++) {
		draw(&c, it, &x);
		out = one_iteration(&c, &x);
		if (out == CC_OK) {
			unlink(x.log);
			remove_history(&x);
		}
		report(&c, &x, out, it);
	}
	if (out == CC_USAGE)
		return 2;
	print_table(&c, (double)(now_ms() - t0) / 1000.0);
	if (out == CC_OK) {
		rmdir(c.dir);
		return 0;
	}
	print_cmd(&x);
	return 1;
}
