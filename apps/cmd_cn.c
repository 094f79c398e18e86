/* SPDX-License-Identifier: MIT */
/*
 * `remora cn`: one compute-node process. Joins the cluster, runs a job in-process, leaves.
 * Under `remora run` it reports on the pipe named by $REMORA_RESULT_FD ("ready", then
 * "result <json>") and starts the job when the byte on $REMORA_GO_FD arrives, so every
 * compute node of a run starts together; alone, it prints the job's result on stdout.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmd.h"
#include "job.h"

static void cn_usage(FILE *f)
{
	char names[256];

	remora_job_names(names, sizeof(names));
	fprintf(f,
		"usage: remora cn --id N [--config FILE] [--<param> VALUE...] <job> [job args]\n"
		"Runs compute node N of the cluster: joins every memory node, runs <job>,\n"
		"leaves. The memory nodes come from --mn-addrs host:port,... or [mn.N]\n"
		"sections of the config file. Jobs: %s (job arguments: remora run --help).\n\n"
		"  --id N             this compute node, 0 .. cn-1\n",
		names);
	cli_params_help(f);
}

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

int remora_cmd_cn(int argc, char **argv)
{
	struct remora_job_ctx ctx = { .result_fd = -1 };
	const struct remora_job *job;
	struct cli_params cp;
	unsigned long id = 0;
	bool have_id = false;
	char err[320];
	int i = 1, rc, go_fd;

	if (cli_params_init(&cp, "cn"))
		return 2;
	while (i < argc) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			cn_usage(stdout);
			cli_params_fini(&cp);
			return 0;
		}
		if (strcmp(argv[i], "--id") == 0) {
			if (cli_uint("cn", "--id", i + 1 < argc ? argv[i + 1] : NULL, 0,
				     REMORA_MAX_CN - 1, &id))
				goto usage_error;
			have_id = true;
			i += 2;
			continue;
		}
		rc = cli_params_arg(&cp, argc, argv, &i);
		if (rc == 2)
			goto usage_error;
		if (rc == 1)
			continue;
		if (argv[i][0] == '-') {
			cli_unknown_option("cn", argv[i]);
			goto usage_error;
		}
		break;
	}
	if (!have_id || i == argc) {
		fprintf(stderr, "remora cn: %s (see remora cn --help)\n",
			!have_id ? "--id N is required" : "no job given");
		goto usage_error;
	}
	job = remora_job_find(argv[i]);
	if (!job) {
		char names[256];

		remora_job_names(names, sizeof(names));
		fprintf(stderr, "remora cn: unknown job '%s' (jobs: %s)\n", argv[i], names);
		goto usage_error;
	}
	if (cli_params_finish(&cp) || (job->check && job->check(argc - i, argv + i)))
		goto usage_error;

	rc = remora_cluster_join(cp.p, (int)id, &ctx.cluster, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "remora cn %lu: join: %s\n", id, err);
		cli_params_fini(&cp);
		return rc == -REMORA_ECONFIG ? 2 : 1;
	}
	ctx.tp = remora_cluster_transport(ctx.cluster);
	ctx.params = cp.p;
	ctx.cn = (int)id;
	ctx.n_cn = remora_cluster_n_cn(ctx.cluster);
	ctx.n_mn = remora_cluster_n_mn(ctx.cluster);
	ctx.result_fd = env_fd("REMORA_RESULT_FD");
	go_fd = env_fd("REMORA_GO_FD");
	rc = ctx.result_fd >= 0 ? wait_for_go(ctx.result_fd, go_fd) : 0;
	if (rc)
		fprintf(stderr, "remora cn %lu: remora run went away before the start\n", id);
	else
		rc = job->run(&ctx, argc - i, argv + i);
	remora_cluster_leave(ctx.cluster);
	cli_params_fini(&cp);
	return rc ? 1 : 0;

usage_error:
	cli_params_fini(&cp);
	return 2;
}
