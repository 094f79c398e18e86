/* SPDX-License-Identifier: MIT */
/*
 * `remora cn`: one compute-node process. Joins the cluster, runs a job in-process, leaves.
 * Under `remora run` it reports on the pipe named by $REMORA_RESULT_FD ("ready", then
 * "result <json>") and starts the job when the byte on $REMORA_GO_FD arrives, so every
 * compute node of a run starts together; alone (compute nodes on other hosts), it prints the
 * job's result on stdout, and a start barrier on the memory nodes' membership takes the place
 * of that start signal: the job starts once every compute-node id has joined at least once.
 * One compute node of such a run passes --setup and runs the job's setup (format, load) as a
 * tool before it joins; since it joins only then, passing the barrier also means "set up".
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "benchutil.h"
#include "cli.h"
#include "cmd.h"
#include "job.h"
#include "recovery/recovery.h"

#define CN_START_TIMEOUT_SEC 120 /* default bound of the start barrier: long enough for a load */
#define CN_START_TIMEOUT_S ((double)CN_START_TIMEOUT_SEC)
#define CN_STR_(x) #x
#define CN_STR(x) CN_STR_(x)

struct cn_opts {
	unsigned long id;
	bool setup;
	double start_timeout; /* seconds */
};

static void cn_usage(FILE *f)
{
	char names[256];

	job_names(names, sizeof(names));
	fprintf(f,
		"usage: remora cn --id N [--setup] [--start-timeout S] [--config FILE]\n"
		"                 [--<param> VALUE...] <job> [job args]\n"
		"Runs compute node N of the cluster: joins every memory node, runs <job>,\n"
		"prints its result line on stdout, leaves. The memory nodes come from --mn-addrs\n"
		"host:port,... or [mn.N] sections of the config file. Started by hand (not by\n"
		"remora run), it first waits until every compute node 0 .. cn-1 has joined (the\n"
		"start barrier). Collect the lines and pass them to remora merge. Jobs: %s\n"
		"(job arguments: remora run --help). Exit status: 0 done, 1 failure, 2 usage.\n",
		names);
}

/* No --id: required. */
#define CN_NO_ID ((unsigned long)-1)

static const struct cli_opt cn_opt_table[] = {
	CLI_OPT_UINT("--id", "N", struct cn_opts, id, 0, REMORA_MAX_CN - 1,
		     "this compute node, 0 .. cn-1"),
	CLI_OPT_FLAG("--setup", struct cn_opts, setup,
		     "before joining, run the job's setup (format, load) as a\n"
		     "tool; exactly one compute node of a run passes it, on\n"
		     "memory nodes that no compute node used before"),
	CLI_OPT_SECONDS("--start-timeout", "S", struct cn_opts, start_timeout,
			"give up when some compute node has not joined after S\n"
			"seconds (default " CN_STR(CN_START_TIMEOUT_SEC) "; 500ms, 2m also work)"),
	{ 0 },
};

static const struct cli_cmd cn_cmd = {
	.name = "cn",
	.usage_fn = cn_usage,
	.opts = cn_opt_table,
	.params = true,
	.operands = true,
};

/* Environment fd set by remora run, or -1. */
static int env_fd(const char *name)
{
	const char *v = getenv(name);
	char *end;
	long fd;

	if (!v || !*v)
		return -1;
	fd = strtol(v, &end, 10);
	return *end || fd < 0 || fd > 65535 ? -1 : (int)fd;
}

/* Tells remora run this node joined, and waits for everyone's start signal. */
static int wait_for_go(int result_fd, int go_fd)
{
	static const char ready[] = "ready\n";
	char go;
	ssize_t n;

	if (write(result_fd, ready, sizeof(ready) - 1) != (ssize_t)sizeof(ready) - 1)
		return -EPIPE;
	if (go_fd < 0)
		return 0;
	do
		n = read(go_fd, &go, 1);
	while (n < 0 && errno == EINTR);
	close(go_fd);
	return n == 1 ? 0 : -EPIPE;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * Setup erases the store, so it refuses memory nodes where that would hurt or where the run
 * cannot succeed: a compute node of the current round that joined and left already (a run is
 * going on), this node's own id a member already, or ids declared dead (never reused, so
 * those compute nodes could not join). Members that are alive are taken for this run's nodes
 * waiting at the start barrier: the view cannot tell them from the nodes of a run that is
 * still going on, in which no node has finished yet.
 */
static int check_fresh(struct remora_cluster *tool, unsigned long id)
{
	struct remora_cluster_view v;
	char ids[256];
	uint64_t left, self = UINT64_C(1) << id;

	if (remora_cluster_view(tool, &v)) {
		fprintf(stderr, "remora cn %lu: --setup: membership: %s\n", id,
			remora_cluster_errmsg(tool));
		return -EIO;
	}
	left = v.joined & ~v.alive & ~v.dead;
	if (v.dead) {
		job_id_list(v.dead, ids, sizeof(ids));
		fprintf(stderr, "remora cn %lu: --setup: compute node(s) %s were declared dead on "
			"these memory nodes and can never join again; start fresh memory nodes\n",
			id, ids);
	} else if (left) {
		job_id_list(left, ids, sizeof(ids));
		fprintf(stderr, "remora cn %lu: --setup: compute node(s) %s joined and left "
			"already: a run is going on on these memory nodes\n", id, ids);
	} else if (v.alive & self) {
		fprintf(stderr, "remora cn %lu: --setup: compute node %lu is a member already "
			"(pid %u)\n", id, id, (unsigned)v.pid[id]);
	} else {
		return 0;
	}
	return -EEXIST;
}

/* --setup: the job's setup, as a tool (attached to every memory node, no member). */
static int run_setup(const struct cli_params *cp, const struct job *job,
		     unsigned long id, int argc, char **argv)
{
	struct job_host host;
	struct remora_cluster *tool;
	char err[320];
	int rc;

	rc = remora_cluster_join(cp->p, -1, &tool, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "remora cn %lu: --setup: join as a tool: %s\n", id, err);
		return rc;
	}
	rc = check_fresh(tool, id);
	if (!rc && job->setup) {
		host = (struct job_host){ .cluster = tool,
						 .tp = remora_cluster_transport(tool),
						 .params = cp->p,
						 .n_cn = remora_cluster_n_cn(tool),
						 .n_mn = remora_cluster_n_mn(tool) };
		rc = job->setup(&host, argc, argv);
		if (rc)
			fprintf(stderr, "remora cn %lu: %s setup: %s\n", id, job->name,
				remora_strerror(rc));
	}
	remora_cluster_leave(tool);
	return rc;
}

/*
 * The start barrier of compute nodes started by hand: waits until every id 0 .. cn-1 joined
 * in this round (the memory nodes forget the joined ids once no member is left) or was
 * declared dead (it joined once; the job sees it dead). A member's view comes from its latest
 * heartbeat replies, so the nodes pass within about one heartbeat_ms of each other.
 */
static int start_barrier(struct remora_cluster *cl, unsigned long id, double timeout_s)
{
	unsigned n = remora_cluster_n_cn(cl);
	uint64_t want = n >= 64 ? UINT64_MAX : (UINT64_C(1) << n) - 1;
	int64_t hb = remora_params_int(remora_cluster_params(cl), REMORA_P_HEARTBEAT_MS);
	long poll_ms = hb / 2 < 1 ? 1 : hb / 2 > 100 ? 100 : (long)(hb / 2);
	uint64_t deadline = now_ms() + (uint64_t)(timeout_s * 1000.0);
	struct remora_cluster_view v;
	bool said = false;
	char ids[256];

	for (;;) {
		uint64_t missing;

		remora_cluster_view(cl, &v); /* a member's view: never fails */
		missing = want & ~(v.joined | v.dead);
		if (!missing)
			return 0;
		job_id_list(missing, ids, sizeof(ids));
		if (!remora_cluster_lease_valid(cl)) {
			fprintf(stderr, "remora cn %lu: lost its lease while waiting for compute "
				"node(s) %s to join\n", id, ids);
			return -REMORA_EFENCED;
		}
		if (now_ms() >= deadline) {
			fprintf(stderr, "remora cn %lu: start barrier: compute node(s) %s did not "
				"join within %g s (cn = %u)\n", id, ids, timeout_s, n);
			return -ETIMEDOUT;
		}
		if (!said) {
			fprintf(stderr, "remora cn %lu: waiting for compute node(s) %s to join\n",
				id, ids);
			said = true;
		}
		nanosleep(&(struct timespec){ .tv_nsec = poll_ms * 1000000L }, NULL);
	}
}

/*
 * The lease watchdog: while the job runs, polls the lease every heartbeat_ms / 2 (at most 100
 * ms). A memory node that is gone (killed, its connection broken), stopped or cut off (no
 * renewal for lease_ms), or a fence, stops this compute node at once with one line naming the
 * node and exit status 1: its transactions could no longer reach every replica, and a memory
 * node's pool file that is still mapped would take commits that no memory node serves. It
 * ends like a crash (locks and logs stay): the restarted cluster runs `remora recover`.
 * It also deals with other compute nodes the memory nodes declared dead: fence, then the
 * protocol's online recovery (recovery_watch; docs/recovery.md, section 7).
 */
struct watchdog {
	struct remora_cluster *cl;
	unsigned long id;
	long poll_ms;
	long heartbeat_ms;
	struct recovery_watcher recovered; /* failed compute nodes dealt with */
	atomic_bool stop;
	pthread_t thread;
};

static void *watchdog_main(void *arg)
{
	struct watchdog *w = arg;
	char why[300];

	while (!atomic_load(&w->stop)) {
		int lost = remora_cluster_lease_lost(w->cl, why, sizeof(why));

		/* A memory node gone: fail over when the run can (docs/recovery.md, "Memory-node
		 * failover"). A fence of this node is refused there (cluster_fenced), whatever
		 * the text says. */
		if (lost >= 0 && strncmp(why, "memory node ", 12) == 0 &&
		    recovery_mnf_lost(w->cl, lost, why, sizeof(why), stderr))
			continue;
		if (lost < 0)
			lost = recovery_mnf_watch(w->cl, why, sizeof(why), stderr);
		if (lost >= 0) {
			fprintf(stderr, "remora cn %lu: stopped: %s\n", w->id, why);
			fflush(stderr);
			_exit(1);
		}
		recovery_watch(w->cl, remora_params_str(remora_cluster_params(w->cl),
							      REMORA_P_PROTOCOL), &w->recovered, stderr);
		nanosleep(&(struct timespec){ .tv_nsec = w->poll_ms * 1000000L }, NULL);
	}
	return NULL;
}

static int watchdog_start(struct watchdog *w, struct remora_cluster *cl, unsigned long id)
{
	int64_t hb = remora_params_int(remora_cluster_params(cl), REMORA_P_HEARTBEAT_MS);

	w->cl = cl;
	w->id = id;
	w->recovered = (struct recovery_watcher){ 0 };
	w->poll_ms = hb / 2 < 1 ? 1 : hb / 2 > 100 ? 100 : (long)(hb / 2);
	w->heartbeat_ms = (long)hb;
	atomic_init(&w->stop, false);
	return -pthread_create(&w->thread, NULL, watchdog_main, w);
}

/*
 * The job ended: one last pass before leaving, over a view two heartbeats newer, so that a
 * compute node that died while this one finished its work is recovered now. Were every
 * survivor gone before its watchdog saw the death, the dead node's locks would wait for an
 * offline `remora recover`.
 */
static void watchdog_stop(struct watchdog *w)
{
	long ms = 2 * w->heartbeat_ms;

	atomic_store(&w->stop, true);
	pthread_join(w->thread, NULL);
	nanosleep(&(struct timespec){ .tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000L }, NULL);
	recovery_watch(w->cl, remora_params_str(remora_cluster_params(w->cl), REMORA_P_PROTOCOL),
		       &w->recovered, stderr);
}

/* Parses the options before the job name; *i ends on it. 0, 1 (--help) or 2. */
static int cn_parse(int argc, char **argv, struct cli_params *cp, struct cn_opts *o, int *i)
{
	int rc;

	*o = (struct cn_opts){ .id = CN_NO_ID, .start_timeout = CN_START_TIMEOUT_S };
	rc = cli_parse(&cn_cmd, o, cp, argc, argv, i);
	if (rc)
		return rc;
	if (o->id == CN_NO_ID || *i == argc) {
		fprintf(stderr, "remora cn: %s (see remora cn --help)\n",
			o->id == CN_NO_ID ? "--id N is required" : "no job given");
		return 2;
	}
	return 0;
}

int cmd_cn(int argc, char **argv)
{
	struct job_ctx ctx = { .result_fd = -1 };
	const struct job *job;
	struct watchdog wd;
	struct cli_params cp;
	struct cn_opts o;
	char err[320];
	int i = 1, rc, go_fd;

	if (cli_params_init(&cp, "cn"))
		return 2;
	rc = cn_parse(argc, argv, &cp, &o, &i);
	if (rc) {
		cli_params_fini(&cp);
		return rc == 1 ? 0 : 2;
	}
	job = job_find(argv[i]);
	if (!job) {
		char names[256];

		job_names(names, sizeof(names));
		fprintf(stderr, "remora cn: unknown job '%s' (jobs: %s)\n", argv[i], names);
		goto usage_error;
	}
	if (cli_params_finish(&cp) || (job->check && job->check(argc - i, argv + i)))
		goto usage_error;
	if (o.id >= remora_params_cn_count(cp.p)) {
		fprintf(stderr, "remora cn: --id %lu out of range (cn = %u)\n", o.id,
			remora_params_cn_count(cp.p));
		goto usage_error;
	}
	ctx.result_fd = env_fd("REMORA_RESULT_FD");
	if (o.setup && ctx.result_fd >= 0) {
		fprintf(stderr, "remora cn: --setup is for compute nodes started by hand; "
			"remora run runs the setup itself\n");
		goto usage_error;
	}
	if (o.setup && run_setup(&cp, job, o.id, argc - i, argv + i)) {
		cli_params_fini(&cp);
		return 1;
	}

	rc = remora_cluster_join(cp.p, (int)o.id, &ctx.cluster, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "remora cn %lu: join: %s\n", o.id, err);
		cli_params_fini(&cp);
		return rc == -REMORA_ECONFIG ? 2 : 1;
	}
	ctx.tp = remora_cluster_transport(ctx.cluster);
	ctx.params = cp.p;
	ctx.cn = (int)o.id;
	ctx.n_cn = remora_cluster_n_cn(ctx.cluster);
	ctx.n_mn = remora_cluster_n_mn(ctx.cluster);
	if (ctx.result_fd >= 0) {
		go_fd = env_fd("REMORA_GO_FD");
		rc = wait_for_go(ctx.result_fd, go_fd);
		if (rc)
			fprintf(stderr, "remora cn %lu: remora run went away before the start\n",
				o.id);
	} else {
		rc = start_barrier(ctx.cluster, o.id, o.start_timeout);
	}
	if (!rc)
		rc = watchdog_start(&wd, ctx.cluster, o.id);
	if (!rc) {
		rc = job->run(&ctx, argc - i, argv + i);
		watchdog_stop(&wd);
	}
	if (ctx.stranded) {
		/* Locks and a valid log are left behind: end as a crash does, without LEAVE, so
		 * that the memory nodes declare this node dead and it is recovered. */
		fprintf(stderr, "remora cn %lu: a commit failed after its log: its locks and log "
			"are left to recovery; exiting without leaving the cluster\n", o.id);
		fflush(stderr);
		_exit(1);
	}
	remora_cluster_leave(ctx.cluster);
	cli_params_fini(&cp);
	return rc ? 1 : 0;

usage_error:
	cli_params_fini(&cp);
	return 2;
}
