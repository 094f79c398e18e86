/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the workload suites: run `remora bench` (the CLI named by $REMORA_BIN, which the
 * build sets) as a child process with a bounded run time, and read its --json summary.
 */
#ifndef REMORA_TESTS_WUTIL_H
#define REMORA_TESTS_WUTIL_H

#include <jansson.h>
#include <stdbool.h>

struct wu_run {
	int status;       /* exit status, or 128 + signal */
	json_t *summary;  /* the --json document, or NULL */
	char log[4096];   /* the tail of its stdout + stderr */
	char dir[64];     /* a private temporary directory (history files go here) */
};

/*
 * Runs `remora bench ARGS... --json DIR/out.json` with REMORA_MUTATE=mutate (NULL: unset); skips the test (exit 77) when $REMORA_BIN is not set. Kills the run
 * after timeout_s seconds. args ends with NULL; "%DIR%" inside an argument is replaced by the
 * run's temporary directory.
 */
void wu_bench(struct wu_run *r, const char *mutate, unsigned timeout_s, const char *const *args);
void wu_free(struct wu_run *r);

/* Summary accessors (0 / "" / false when missing). */
/* path: keys and array indexes joined by dots ("per_cn.1.committed"); 0 when absent. */
double wu_num(const struct wu_run *r, const char *path);
const char *wu_str(const struct wu_run *r, const char *path);
bool wu_bool(const struct wu_run *r, const char *path);

/*
 * Runs `remora bench BASE... --check WL...` (each list ends with NULL) and returns whether
 * the check ran and passed. msg gets "<workload> <label>: exit N: <check message>". Without a
 * mutation the run must also have committed something (a failed criterion expectation).
 */
bool wu_check(const char *const *base, const char *const *wl, const char *label,
	      const char *mutate, unsigned timeout_s, char *msg, size_t msglen);

#endif
