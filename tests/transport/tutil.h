/* SPDX-License-Identifier: MIT */
/*
 * Shared helpers of the transport conformance suite (and of any suite that links tutil.c):
 * a pool + region + attach + channel in one call, a unique cluster name and pool directory per
 * test process, canary fills, bounded polling, forked child processes that talk over pipes,
 * and cleanup that also runs when an assertion fails.
 *
 * tutil.c provides main(): it probes the backend named by $REMORA_BACKEND first and exits 77
 * (skipped, with the reason) when that backend cannot run on this machine, and it exits 77
 * when every test of the executable was skipped. Workers never see a half-cleaned machine:
 * the runner removes the pool directories of all its workers at the end, crashed ones too.
 */
#ifndef REMORA_TESTS_TUTIL_H
#define REMORA_TESTS_TUTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <criterion/criterion.h>

#include <remora/transport.h>

/*
 * Per-test time limit in seconds (criterion kills the test and reports a crash). Like every
 * criterion time limit of an executable that links tutil.c, main() multiplies it by
 * tu_time_scale() before the tests run.
 */
#define TU_TIMEOUT 60
/* How long any helper waits for a completion or a child before it gives up (a hang bound). */
#define TU_WAIT_MS tu_wait_ms()
#define TU_WAIT_BASE_MS 20000
/*
 * Slow machines (an emulated guest) stretch every bound of the suite, never the workload:
 * $REMORA_TEST_TIME_SCALE (a number > 0, at most TU_TIME_SCALE_MAX; default 1) multiplies
 * TU_WAIT_MS and the criterion time limits alike. main() refuses a malformed value.
 */
#define TU_TIME_SCALE_ENV "REMORA_TEST_TIME_SCALE"
#define TU_TIME_SCALE_MAX 1000.0
double tu_time_scale(void);
/* TU_WAIT_BASE_MS x tu_time_scale(). */
int tu_wait_ms(void);
#define TU_POOL_BYTES (256u << 10)
#define TU_MAX_NODES 4

/* A memory node held by this process: its pool, one region over all of it, its descriptor. */
struct tu_node {
	struct remora_pool *pool;
	uint8_t *base;
	uint64_t bytes;
	uint32_t key;
	struct remora_node_desc desc;
};

/* One compute node in this process: transport, channel and the memory nodes it opened. */
struct tu_ctx {
	struct remora_transport *tp;
	struct remora_chan *ch;
	struct tu_node mn[TU_MAX_NODES];
	unsigned nmn;
};

/* Backend under test ($REMORA_BACKEND, else "shm"). */
const char *tu_backend(void);
/* Cluster name unique to this test process (inherited by its forked children). */
const char *tu_cluster(void);
/* Pool directory of this test process, created on first use, removed by tu_fini(). */
const char *tu_dir(void);
/* Cost profile that tu_cfg() puts in the configuration (NULL: none), for this test process. */
void tu_use_profile(const char *profile);
/* Fills cfg for compute node self_cn (-1: memory node or tool) of this test's cluster. */
void tu_cfg(struct remora_transport_cfg *cfg, int self_cn);

/* Opens a transport; returns 0 or the error (never asserts: usable in children). */
int tu_transport_try(int self_cn, const char *profile, struct remora_transport **out);
/* Same, asserting success. */
struct remora_transport *tu_transport(int self_cn);

/* The file of pool `node` in this test's directory (backends with pool files: shm, pmem). */
void tu_pool_path(uint16_t node, char *buf, size_t size);

/* Creates pool `node` of `bytes` on tp, registers all of it and fills in mn->desc. Asserts. */
void tu_node_open(struct remora_transport *tp, uint16_t node, uint64_t bytes, struct tu_node *mn);
void tu_node_close(struct tu_node *mn);

/*
 * One compute node self_cn with nmn memory nodes 0..nmn-1 of `bytes` each, all attached, and a
 * channel. The context is remembered so that tu_fini() / tu_skip() release it.
 */
void tu_open(struct tu_ctx *c, int self_cn, unsigned nmn, uint64_t bytes);
/* tu_open() in two steps, to register regions of one's own in between. */
void tu_open_pools(struct tu_ctx *c, int self_cn, unsigned nmn, uint64_t bytes);
/* Describes every node again, attaches it and opens the channel. */
void tu_attach_all(struct tu_ctx *c);
void tu_close(struct tu_ctx *c);
/* Makes tu_fini() release c (for contexts a test builds by hand). */
void tu_current_set(struct tu_ctx *c);
/* Criterion .fini of every suite: closes the remembered context, removes the pool directory. */
void tu_fini(void);

/* Releases what tu_open() opened and skips the test, printing the reason (criterion hides it). */
#define tu_skip(...)                                                                               \
	do {                                                                                       \
		tu_skip_note(__VA_ARGS__);                                                         \
		tu_fini();                                                                         \
		cr_skip_test(__VA_ARGS__);                                                         \
	} while (0)
void tu_skip_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Capabilities of the transport, asserting success. */
void tu_caps(struct remora_transport *tp, struct remora_caps *caps);

/*
 * Sets $REMORA_ATOMICS to mode (NULL: keeps it as it is), then skips the test when the backend
 * has no such atomics mode (opening a transport with it fails with -REMORA_ECONFIG or
 * -EOPNOTSUPP); any other failure to open fails the test.
 */
void tu_atomics_mode(const char *mode);

/* Work-request builders. */
struct remora_wr tu_wr_read(remora_gaddr a, uint32_t key, void *dst, uint32_t len);
struct remora_wr tu_wr_write(remora_gaddr a, uint32_t key, const void *src, uint32_t len);
struct remora_wr tu_wr_cas(remora_gaddr a, uint32_t key, uint64_t cmp, uint64_t swp,
			   uint64_t *old);
struct remora_wr tu_wr_faa(remora_gaddr a, uint32_t key, uint64_t add, uint64_t *old);
struct remora_wr tu_wr_mcas(remora_gaddr a, uint32_t key, uint64_t cmp, uint64_t cmask,
			    uint64_t swp, uint64_t smask, uint64_t *old);

/*
 * Polls ch until n completions arrived or TU_WAIT_MS passed; returns how many arrived.
 * Never asserts (usable in children).
 */
int tu_drain(struct remora_chan *ch, struct remora_cqe *cqes, unsigned n);

/* Canary: a position-dependent byte pattern, and the count of bytes that no longer match. */
uint8_t tu_canary_byte(uint64_t off);
void tu_canary_fill(uint8_t *base, uint64_t from, uint64_t to);
uint64_t tu_canary_damage(const uint8_t *base, uint64_t from, uint64_t to);

/* Deterministic 64-bit generator (splitmix64) so failures reproduce. */
uint64_t tu_rand64(uint64_t *state);

/* ---- child processes ------------------------------------------------------------------- */

/*
 * A forked child: fn(arg, rd, wr) runs in it, reading the parent's messages from rd and
 * writing its own to wr; its return value is the child's exit code (0 = all checks passed).
 * Children must not use cr_assert: they print one line with TU_CHILD_CHECK and return non-zero.
 */
struct tu_proc {
	pid_t pid;
	int rd; /* parent reads the child's messages here */
	int wr; /* parent writes to the child here */
};
typedef int (*tu_child_fn)(void *arg, int rd, int wr);

void tu_spawn(struct tu_proc *p, tu_child_fn fn, void *arg);
/* Waits (bounded by TU_WAIT_MS, then SIGKILL) and returns the exit code, 128+sig if killed. */
int tu_proc_wait(struct tu_proc *p);
/*
 * Waits for all n children (bounded by TU_WAIT_MS overall). As soon as one fails, the others
 * are killed, so a failure never turns into a hang. Returns 0, or the failing child's exit
 * code (128+sig if killed) with *which set to its index.
 */
int tu_proc_wait_all(struct tu_proc *p, unsigned n, unsigned *which);
/* Pipe messages: one u64. recv returns 0, or -ETIMEDOUT / -EPIPE. */
int tu_send(int fd, uint64_t v);
int tu_recv(int fd, uint64_t *v);

/*
 * Workers that must collide: tu_run_together() spawns n children of fn (child i gets
 * (char *)args + i * arg_size), asserts that each reports ready, then starts them all at once
 * and waits for them (tu_proc_wait_all: returns 0, or a failing child's code with *which set).
 * A child calls tu_child_ready(rd, wr) once set up (attached): 0 when the start signal came.
 */
#define TU_MAX_PROCS 16
int tu_run_together(tu_child_fn fn, void *args, size_t arg_size, unsigned n, unsigned *which);
int tu_child_ready(int rd, int wr);

#define TU_CHILD_CHECK(cond, ...)                                                                  \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			tu_child_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                     \
			return 1;                                                                  \
		}                                                                                  \
	} while (0)
void tu_child_fail(const char *file, int line, const char *cond, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * Negative controls: switches mutation m ("skip_bounds_check", "skip_fence_check", "none") on
 * transport tp (see runtime/transport/mutate.h). Returns 0 or the error; never asserts.
 */
int tu_mutate(struct remora_transport *tp, const char *m);

#endif
