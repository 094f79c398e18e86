/* SPDX-License-Identifier: MIT */
/*
 * Subcommands of the `remora` CLI. The dispatcher (apps/cli/remora.c) includes this header and maps
 * each subcommand name to its entry point. Each entry gets argv with argv[0] = the subcommand's
 * name and returns the process exit status: 0 done, 1 run-time failure, 2 bad usage (after
 * printing a one-line error). Add new commands at the end.
 */
#ifndef REMORA_APPS_CMD_H
#define REMORA_APPS_CMD_H

#include <stddef.h>
#include <stdint.h>

/* `remora verbs`: perftest-like verbs benchmark on a private in-process pool (cmd_verbs.c). */
int cmd_verbs(int argc, char **argv);
/* Cluster commands (cmd_mn.c, cmd_cn.c, cmd_run.c, cmd_info.c). */
int cmd_mn(int argc, char **argv);
int cmd_cn(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_clean(int argc, char **argv);
/* `remora bench`: a workload on a single-host cluster, one summary (cmd_bench.c). */
int cmd_bench(int argc, char **argv);
/* `remora recover`: recovery after a whole-cluster crash (cmd_recover.c). */
int cmd_recover(int argc, char **argv);
/* remora mn's check of the pool it opened: arg points to a bool, "--format" (cmd_recover.c). */
struct remora_pool;
int mn_pool_check(void *arg, struct remora_pool *pool, uint16_t id, char *err,
			 size_t errlen);
/* `remora check`: a workload's invariant on a running cluster's store (cmd_check.c). */
int cmd_check(int argc, char **argv);
/* `remora plot`: PNG figures from bench results with gnuplot (cmd_plot.c). */
int cmd_plot(int argc, char **argv);
/* `remora merge`: a job's merge on the result lines of compute nodes started by hand. */
int cmd_merge(int argc, char **argv);
/* `remora lockbench`: DecLock's lock microbenchmark (cmd_lockbench.c, lockbench.c). */
int cmd_lockbench(int argc, char **argv);

#endif
