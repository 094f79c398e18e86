/* SPDX-License-Identifier: MIT */
/* Helpers of the cluster tests; cutil.c also carries main() (exit 77 when all skipped). */
#ifndef REMORA_TESTS_CLUSTER_CUTIL_H
#define REMORA_TESTS_CLUSTER_CUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct cu_proc {
	pid_t pid;
	int out_fd, err_fd;
	char *out, *err; /* collected output, NUL-terminated */
	size_t out_len, err_len;
	int wstatus;
	bool exited;
};

/* The remora binary under test ($REMORA_BIN); skips the test when unset. */
const char *cu_bin(void);
/* Skips the test unless the rdma backend is built and opens a device here. */
void cu_need_rdma_device(void);
/* A cluster name unique to this process and call: "<prefix><pid>x<n>". */
const char *cu_name(const char *prefix, char *buf, size_t len);
/* Starts argv (argv[0] is replaced by the binary), output captured. */
void cu_start(struct cu_proc *p, const char *const *argv);
/* Collects output and waits up to timeout_ms; on timeout kills the process and fails. */
void cu_wait(struct cu_proc *p, int timeout_ms);
/* Collects output until stderr contains needle; fails after timeout_ms. */
void cu_wait_for(struct cu_proc *p, const char *needle, int timeout_ms);
/* Runs argv to completion; returns the exit code (128+N when killed by signal N). */
int cu_run(struct cu_proc *p, const char *const *argv, int timeout_ms);
int cu_exit_code(const struct cu_proc *p);
void cu_free(struct cu_proc *p);
/* Children of pid whose command line contains needle ("cn --id 1"); 0 when none. */
pid_t cu_find_child(pid_t pid, const char *needle);
/* Number of files /dev/shm/remora-<cluster>-* (the shm backend's default directory). */
unsigned cu_leftovers(const char *cluster);
/* Milliseconds of the monotonic clock. */
unsigned long long cu_now_ms(void);

/* Raw control-plane peers (tests of the memory node's wire): sends all of buf, or fails. */
void cu_raw_send(int fd, const void *buf, size_t len);
/* Reads one frame into buf; returns its length, 0 when the node hung up. Fails on timeout. */
size_t cu_raw_reply(int fd, void *buf, size_t cap);

#endif
