/* SPDX-License-Identifier: MIT */
/*
 * Coroutines: many coordinators per worker thread. Each coroutine yields while its verbs are
 * outstanding; one poller per thread (remora_chan_progress on the thread's channel) wakes them.
 * Stackful, with a hand-written context switch (x86-64, aarch64): ucontext's swapcontext makes
 * a signal-mask system call on every switch, which costs ~100x more than the switch itself.
 */
#ifndef REMORA_SCHED_H
#define REMORA_SCHED_H

#include <stdbool.h>
#include <stddef.h>

#include <remora/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

struct remora_sched;
struct remora_coro;

typedef void (*remora_coro_fn)(void *arg);

/*
 * Creates a scheduler for the calling thread. ch (may be NULL) is the channel its poller
 * drives. stack_bytes 0 picks the default (64 KiB). Returns 0 or -errno.
 */
REMORA_API int remora_sched_create(struct remora_chan *ch, size_t stack_bytes,
				   struct remora_sched **out);
REMORA_API void remora_sched_destroy(struct remora_sched *s);
/*
 * A second poller driven beside the channel (the RPC dispatcher, <remora/rpc.h>): whenever the
 * scheduler polls its channel it also calls fn(arg, &waiting). fn returns the events it handled
 * and sets waiting when something it tracks (a call in flight) may still wake a parked
 * coroutine, which keeps remora_sched_run from reporting -EDEADLK. NULL fn removes it.
 */
typedef int (*remora_sched_poll_fn)(void *arg, bool *waiting);
REMORA_API void remora_sched_set_poller(struct remora_sched *s, remora_sched_poll_fn fn, void *arg);
/*
 * Prefetch and yield (off by default). On a backend that applies verbs while they are posted
 * (shm, pmem) with no cost profile, remora_co_exec first asks the CPU for the pool lines its
 * verbs touch, yields, and applies the verbs when the coroutine runs again: the other
 * coroutines' work hides the memory latency, as interleaved lookups do. The verbs then take
 * effect after the other coroutines' turn instead of before it (so a WRITE's source buffer
 * is read then: as always, it must stay untouched until the call returns); results and order
 * on the channel are as without it. Worth it for pools far larger than the CPU's caches.
 */
REMORA_API void remora_sched_set_prefetch(struct remora_sched *s, bool on);
/*
 * Where verbs complete while they are posted (shm and pmem with no cost profile),
 * remora_co_exec gives the turn to the other coroutines after every call by default (every =
 * 1), as it does when the verbs complete later. every = k: after every k-th such call of a
 * coroutine since it last gave its turn (any yield or park counts); 0 is taken as 1. Each
 * switch costs the switch itself and the returns up the stack it makes the CPU mispredict,
 * while it hides no latency there; coroutines that spin on verbs still give their turn every
 * k calls. Calls under prefetch and yield always yield.
 */
REMORA_API void remora_sched_set_inline_yield(struct remora_sched *s, unsigned every);
/*
 * For lines the caller has prefetched and is about to read (an index or cache lookup): inside
 * a coroutine whose scheduler does prefetch and yield, gives the other coroutines their turn
 * so that the lines arrive meanwhile, as remora_co_exec does for its verbs. Does nothing
 * otherwise.
 */
REMORA_API void remora_co_prefetch_yield(void);
/* Adds a coroutine that will run fn(arg) once remora_sched_run() starts. Returns 0 or -errno. */
REMORA_API int remora_sched_spawn(struct remora_sched *s, remora_coro_fn fn, void *arg);
/*
 * Runs until every coroutine has returned. Returns 0, or -EDEADLK when the remaining
 * coroutines are all parked and nothing is in flight on the channel that could wake them
 * (they stay parked; remora_sched_destroy() releases them).
 */
REMORA_API int remora_sched_run(struct remora_sched *s);

/* Inside a coroutine: the running coroutine and its scheduler; NULL outside any. */
REMORA_API struct remora_coro *remora_coro_self(void);
REMORA_API struct remora_sched *remora_sched_self(void);
/* Lets the other runnable coroutines of this thread run, then continues. */
REMORA_API void remora_yield(void);
/*
 * Suspends the running coroutine until remora_coro_wake() names it. A wake that arrives while
 * the coroutine is not parked is kept, and its next park returns at once: park in a loop on
 * your own condition.
 */
REMORA_API void remora_coro_park(void);
REMORA_API void remora_coro_wake(struct remora_coro *c);
/* Index of the coroutine within its scheduler (0-based, in spawn order). */
REMORA_API unsigned remora_coro_index(const struct remora_coro *c);

/*
 * Posts n verbs on ch and returns when all have completed: inside a coroutine it parks and
 * lets others run; outside one it spins on the channel. -EAGAIN from the channel is handled
 * by waiting; batches beyond the channel's max_batch go out in chunks, as with remora_exec.
 * Returns 0, the first failed verb's status, a post error (none of the verbs from the refused
 * chunk on was posted), or -E2BIG when a chunk cannot fit even in an empty channel.
 */
REMORA_API int remora_co_exec(struct remora_chan *ch, struct remora_wr *wrs, unsigned n);

#ifdef __cplusplus
}
#endif
#endif
