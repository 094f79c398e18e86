/* SPDX-License-Identifier: MIT */
/* remora: one binary, one command table. `remora <command> --help` describes each command. */
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "remora_config.h"

struct command {
	const char *name;
	const char *help; /* one line */
	int (*fn)(int argc, char **argv);
};

/* One line per command. */
static const struct command commands[] = {
	{ "run", "start a cluster on this host, run a job on it, check, clean up", cmd_run },
	{ "mn", "memory-node daemon: create a pool and serve the control plane", cmd_mn },
	{ "cn", "compute node: join a cluster and run a job (by hand: --setup, start barrier)",
	  cmd_cn },
	{ "info", "backends, capabilities, profiles, jobs and effective parameters",
	  cmd_info },
	{ "clean", "remove the files a crashed cluster left behind", cmd_clean },
	{ "recover", "after a whole-cluster crash: roll logged transactions back or forward, "
		     "release every lock", cmd_recover },
	{ "verbs", "perftest-like benchmark of the verbs transport (no cluster)",
	  cmd_verbs },
	{ "bench", "run a workload on a cluster on this host: throughput, latency, aborts, verbs",
	  cmd_bench },
	{ "check", "check a workload's invariant (TPC-C consistency, SmallBank total) on a cluster",
	  cmd_check },
	{ "plot", "PNG figures (throughput-latency, throughput, aborts) from bench results",
	  cmd_plot },
	{ "merge", "merge the result lines of compute nodes started by hand (summary, check)",
	  cmd_merge },
	{ "lockbench", "lock microbenchmark: declock, caslock, dslr, shiftlock in one process",
	  cmd_lockbench },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	fprintf(f, "usage: remora <command> [options]    (remora <command> --help for each)\n\n"
		   "remora %s: transactions over disaggregated memory.\n\ncommands:\n",
		REMORA_VERSION);
	for (unsigned i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].help);
	fprintf(f, "\nWith no other option, `remora run` starts 1 memory node and 1 compute node\n"
		   "and runs the smoke job. Parameters: remora info --params; docs/config.md.\n");
}

int main(int argc, char **argv)
{
	char names[256];
	size_t off = 0;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("remora %s\n", REMORA_VERSION);
		return 0;
	}
	for (unsigned i = 0; i < NCOMMANDS; i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].fn(argc - 1, argv + 1);
	for (unsigned i = 0; i < NCOMMANDS && off < sizeof(names); i++)
		off += (size_t)snprintf(names + off, sizeof(names) - off, "%s%s", i ? ", " : "",
					commands[i].name);
	fprintf(stderr, "remora: unknown command '%s' (commands: %s)\n", argv[1], names);
	return 2;
}
