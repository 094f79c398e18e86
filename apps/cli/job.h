/* SPDX-License-Identifier: MIT */
/*
 * Jobs: what `remora run` and `remora cn` execute on compute nodes, and the run machinery
 * that starts a whole cluster on this host.
 *
 * A job is registered in job_table[] (job.c, one line each). Its life in `remora run`:
 *   1. check(argc, argv)            parent, before anything starts: reject bad job arguments
 *                                   (print one line, return non-zero -> exit 2). Optional.
 *   2. setup(host, argc, argv)      parent, once the memory nodes answer: format, load, ...
 *                                   Optional. 0 or a negative code (the run then stops).
 *   3. run(ctx, argc, argv)         every compute-node process, all started together after
 *                                   each one joined. Writes its result with job_emit()
 *                                   (one JSON object, one line). Returns 0 or negative.
 *   4. merge(host, res, n, ...)     parent, after every compute node exited: prints the
 *                                   summary and returns the exit code (0 = success).
 * argv[0] is the job name; the rest are the job's own arguments.
 *
 * Across hosts (docs/cluster.md, "Across hosts") the same steps run in separate commands:
 *   remora cn --id N [--setup] <job>   step 3 on compute node N, its result line on stdout.
 *                                      With --setup (one compute node of the run) step 2
 *                                      first, as a tool. Every compute node then waits until
 *                                      each id 0..cn-1 joined (the start barrier), instead
 *                                      of remora run's start signal.
 *   remora merge --results F,... <job> step 4, as a tool, on the lines the nodes printed.
 * So setup, run and merge may each run in a different process: whatever merge needs from
 * setup must travel in a result line (bench: the load time, from the --setup node's line).
 * A result line should carry "job":"<name>": remora merge refuses a line of another job.
 */
#ifndef REMORA_APPS_JOB_H
#define REMORA_APPS_JOB_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <remora/cluster.h>
#include <remora/params.h>
#include <remora/transport.h>

struct cli_opt; /* cli.h */

/* What a job sees on a compute node. */
struct job_ctx {
	struct remora_cluster *cluster;   /* joined; heartbeat running */
	struct remora_transport *tp;      /* attached to every memory node */
	const struct remora_params *params;
	int cn;                           /* this compute node: 0 .. n_cn-1 */
	unsigned n_cn, n_mn;
	int result_fd;                    /* where job_emit() writes; -1: stdout */
	bool stranded;                    /* set by the job: remora_db_stranded() at its close */
};

/* What setup and merge see: the parent of remora run, remora cn --setup, remora merge. */
struct job_host {
	struct remora_cluster *cluster;   /* joined as a tool (cn -1): no lease, no messages */
	struct remora_transport *tp;      /* attached to every memory node */
	const struct remora_params *params;
	unsigned n_cn, n_mn;
};

/*
 * One compute node's outcome, as merge receives it. From remora merge: pid is the line's
 * "pid" (0 if none), wstatus 0, ok true for every line read; a node without a line has
 * json NULL and ok false.
 */
struct job_result {
	unsigned cn;
	pid_t pid;
	const char *json; /* its result line without the newline; NULL if it sent none */
	int wstatus;      /* from waitpid() */
	bool ok;          /* exited with status 0 */
};

struct job {
	const char *name;
	const char *help;  /* one line */
	const char *usage; /* the job's arguments, one option per line, or NULL */
	const struct cli_opt *args; /* instead of usage: the table its arguments are parsed by */
	int (*check)(int argc, char **argv);
	int (*setup)(struct job_host *host, int argc, char **argv);
	int (*run)(struct job_ctx *ctx, int argc, char **argv);
	int (*merge)(struct job_host *host, const struct job_result *res, unsigned n,
		     int argc, char **argv);
};

/* NULL-terminated registry. */
extern const struct job *const job_table[];
extern const struct job job_smoke;
extern const struct job job_bench; /* cmd_bench.c */

const struct job *job_find(const char *name);
/* "smoke, bench" */
void job_names(char *buf, size_t len);
/* One line per job: name and help. */
void job_list(FILE *f, const char *indent);

/* "0, 2, 5": the ids whose bits are set. */
void job_id_list(uint64_t ids, char *buf, size_t len);

/* Writes one result line (JSON object, no newline inside). Returns 0 or -errno. */
int job_emit(struct job_ctx *ctx, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ---- the run machinery ------------------------------------------------------------------ */

struct run_opts {
	struct remora_params *params; /* checked (remora_params_check); run may set cluster
					 and mn_addrs in it */
	const char *config;           /* passed on to every child as --config, or NULL */
	int nflags;
	char *const *flags;           /* parameter flags as "--name=value", passed on verbatim */
	int ncn_env;
	const char *const *cn_env;    /* "ID:NAME=VALUE": one more variable for compute node ID */
	bool quiet;                   /* no progress lines on stderr */
	unsigned kill_cn;             /* --kill cnI@T: I + 1 (0: none); SIGKILL compute node I
					 (cnI+J@T: the first of the list) */
	double kill_at;               /* ... T seconds after the start (< 0: it crashes by itself);
					 its result is left out, its death is no failure */
	uint64_t kill_also;           /* --kill cnI+J+...@T: the others (bit J), killed with I */
	unsigned kill_mn;             /* --kill mnI@T: I + 1 (0: none); SIGKILL memory node I (its
					 compute nodes fail over or stop, docs/recovery.md, "Memory-node
					 failover"); one compute-node kill may come with it */
	double kill_mn_at;            /* ... T seconds after the start */
};

/* Parses --kill's value (cnI@SECONDS, cnI@crash or mnI@SECONDS) into o; 1 with one line on
 * stderr. */
int run_parse_kill(const char *v, struct run_opts *o);
/* When --kill's SIGKILL was sent (CLOCK_REALTIME, s); 0: none (yet, or cnI@crash). */
double run_kill_time(void);

/*
 * Runs a whole cluster on this host: starts remora_params_mn_count() memory-node processes
 * (ports picked automatically unless the config names them), waits until their control
 * plane answers, runs job->setup in this process, starts remora_params_cn_count()
 * compute-node processes running job->run, releases them together once all joined, waits,
 * calls job->merge with every result, and shuts the memory nodes down. On every exit path
 * (failure, a crashed child, SIGINT/SIGTERM) the children are stopped and every file of the
 * cluster is removed (remora_transport_cleanup).
 *
 * Unless the user named the cluster, it is named "run<pid>" so concurrent runs never meet.
 * Returns the exit code: merge's code when every compute node exited 0, else 1;
 * 2 for bad job arguments; 128+signal after SIGINT/SIGTERM.
 */
int run_cluster(const struct run_opts *o, const struct job *job, int argc,
		       char **argv);

#endif
