/* SPDX-License-Identifier: MIT */
/*
 * Coroutine scheduler: one per thread. Coroutines run from a FIFO run queue; a coroutine that
 * yields or parks switches straight to the next runnable one (one context switch, not two
 * through a central loop). Only when nothing is runnable does control return to the thread's
 * own context in remora_sched_run(), which drives the poller (remora_chan_progress on the
 * scheduler's channel); the poller settles waiters, whose wake callbacks put coroutines back
 * on the run queue.
 *
 * Wake-up rule: remora_coro_wake() on a coroutine that is not parked (running or queued)
 * leaves a wake token, and its next remora_coro_park() returns at once, as with thread
 * unpark. Callers therefore park in a loop on their own condition (remora_co_exec does).
 *
 * Not thread-safe: a scheduler, its coroutines and its channel belong to one thread.
 */
#include <sched.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <remora/sched.h>
#include "prof/prof.h"
#include "transport/direct.h"

#include "ctx.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RSCHED_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define RSCHED_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(RSCHED_ASAN)
#define RSCHED_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(RSCHED_TSAN)
#define RSCHED_TSAN 1
#endif

#ifdef RSCHED_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef RSCHED_TSAN
#include <sanitizer/tsan_interface.h>
#endif

#define RSCHED_DEFAULT_STACK (64u * 1024)
#define RSCHED_MIN_STACK (16u * 1024)
/* A coroutine that keeps yielding still lets the poller run this often (in yields). */
#define RSCHED_POLL_EVERY 32u

enum coro_state {
	CORO_READY,   /* on the run queue */
	CORO_RUNNING,
	CORO_PARKED,
	CORO_DONE,    /* returned; on the free list, its stack kept for the next spawn */
};

/* One machine context: a coroutine's, or the thread's own while coroutines run. */
struct rsched_ctx {
	void *sp; /* saved stack pointer while not running */
#ifdef RSCHED_ASAN
	void *fake_stack;     /* ASan's fake stack, saved while switched out */
	const void *stack_lo; /* stack bounds; for the thread, learned at its first switch */
	size_t stack_len;
#endif
#ifdef RSCHED_TSAN
	void *fiber;
#endif
};

struct remora_coro {
	struct rsched_ctx ctx;
	struct remora_sched *sched;
	struct remora_coro *next; /* run queue or free list */
	remora_coro_fn fn;
	void *arg;
	unsigned index;
	unsigned char state;
	bool wake_token;
	unsigned inline_calls; /* co_exec calls completed inline since it last gave its turn */
	void *map; /* guard page + stack */
	size_t map_len;
	void *stack_lo;
	size_t stack_len;
};

struct remora_sched {
	struct rsched_ctx main; /* the thread inside remora_sched_run() */
	struct rsched_ctx *from; /* context that made the latest switch (ASan bookkeeping) */
	struct remora_coro *cur;
	struct remora_coro *runq_head, *runq_tail;
	struct remora_coro *free;
	struct remora_coro **all; /* every coroutine ever allocated, for destroy */
	unsigned nall, capall;
	unsigned live;    /* spawned, not yet returned */
	unsigned spawned; /* next remora_coro_index() */
	unsigned poll_budget;
	struct remora_chan *ch;
	remora_sched_poll_fn poll_fn; /* second poller (RPC dispatcher), or NULL */
	void *poll_arg;
	unsigned max_batch; /* of ch, 0 if unknown */
	size_t stack_bytes;
	bool prefetch;      /* remora_sched_set_prefetch */
	unsigned inline_yield; /* remora_sched_set_inline_yield, >= 1 */
};

/*
 * The scheduler running on this thread. initial-exec: the library is also built shared, and
 * the default model there would cost a __tls_get_addr call on every yield.
 */
static _Thread_local struct remora_sched *cur_sched __attribute__((tls_model("initial-exec")));

/* ---- context switch with sanitizer bookkeeping ----------------------------------------- */

/* Tells the sanitizers where the new context lives, then switches. */
static inline void ctx_leave(struct remora_sched *s, struct rsched_ctx *from,
			     struct rsched_ctx *to, bool from_done)
{
	s->from = from;
#ifdef RSCHED_ASAN
	/* NULL for a context that never resumes: ASan frees its fake stack. */
	__sanitizer_start_switch_fiber(from_done ? NULL : &from->fake_stack, to->stack_lo,
				       to->stack_len);
#else
	(void)from_done;
#endif
#ifdef RSCHED_TSAN
	__tsan_switch_to_fiber(to->fiber, 0);
#endif
	rsched_ctx_switch(&from->sp, to->sp);
}

/* First thing a context does once it runs again (or for the first time: fake_stack NULL). */
static inline void ctx_arrived(struct remora_sched *s, struct rsched_ctx *self)
{
#ifdef RSCHED_ASAN
	struct rsched_ctx *from = s->from;

	/* Records the bounds of the stack we came from; that is how the thread's become known. */
	__sanitizer_finish_switch_fiber(self->fake_stack, &from->stack_lo, &from->stack_len);
#else
	(void)s;
	(void)self;
#endif
}

static inline void ctx_switch(struct remora_sched *s, struct rsched_ctx *from,
			      struct rsched_ctx *to)
{
	ctx_leave(s, from, to, false);
	ctx_arrived(s, from);
}

/* ---- run queue ------------------------------------------------------------------------- */

static inline void runq_push(struct remora_sched *s, struct remora_coro *c)
{
	c->next = NULL;
	if (s->runq_tail)
		s->runq_tail->next = c;
	else
		s->runq_head = c;
	s->runq_tail = c;
}

static inline struct remora_coro *runq_pop(struct remora_sched *s)
{
	struct remora_coro *c = s->runq_head;

	if (c) {
		s->runq_head = c->next;
		if (!s->runq_head)
			s->runq_tail = NULL;
	}
	return c;
}

/* Leaves the running coroutine for the next runnable one, or for the thread if none is. */
static inline __attribute__((always_inline)) void coro_switch_out(struct remora_sched *s,
							     struct remora_coro *self,
							     bool self_done)
{
	struct remora_coro *next = runq_pop(s);
	struct rsched_ctx *to = &s->main;
	/* the next context resumes in the scheduler's layer and restores its own (prof.h) */
	unsigned layer = prof_enter(PROF_SCHED);

	if (next) {
		next->state = CORO_RUNNING;
		to = &next->ctx;
	}
	s->cur = next;
	ctx_leave(s, &self->ctx, to, self_done);
	ctx_arrived(s, &self->ctx);
	prof_leave(layer);
}

/* ---- coroutines ------------------------------------------------------------------------ */

/* Runs on the coroutine's own stack, entered from rsched_ctx_entry; never returns. */
static void coro_main(void *p)
{
	struct remora_coro *c = p;
	struct remora_sched *s = c->sched;

	ctx_arrived(s, &c->ctx);
	prof_enter(PROF_WORKLOAD); /* a new coroutine's code is the application's until it says */
	c->fn(c->arg);
	c->state = CORO_DONE;
	s->live--;
	c->next = s->free;
	s->free = c;
	coro_switch_out(s, c, true);
	__builtin_unreachable();
}

static void stack_unmap(struct remora_coro *c)
{
#ifdef RSCHED_ASAN
	/* Frames that never returned left poisoned redzones in the shadow of this range. */
	__asan_unpoison_memory_region(c->stack_lo, c->stack_len);
#endif
	munmap(c->map, c->map_len);
}

/* Maps the stack with an inaccessible guard page below it, so an overflow faults at once. */
static int stack_map(struct remora_coro *c, size_t bytes)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t len = bytes + page;
	void *m;

	m = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
	if (m == MAP_FAILED)
		return -errno;
	if (mprotect(m, page, PROT_NONE)) {
		int err = -errno;

		munmap(m, len);
		return err;
	}
	c->map = m;
	c->map_len = len;
	c->stack_lo = (char *)m + page;
	c->stack_len = bytes;
	return 0;
}

static struct remora_coro *coro_alloc(struct remora_sched *s)
{
	struct remora_coro *c;

	if (s->nall == s->capall) {
		unsigned cap = s->capall ? s->capall * 2 : 16;
		struct remora_coro **all = realloc(s->all, cap * sizeof(*all));

		if (!all)
			return NULL;
		s->all = all;
		s->capall = cap;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	if (stack_map(c, s->stack_bytes))
		goto free_coro;
#ifdef RSCHED_ASAN
	c->ctx.stack_lo = c->stack_lo;
	c->ctx.stack_len = c->stack_len;
#endif
#ifdef RSCHED_TSAN
	c->ctx.fiber = __tsan_create_fiber(0);
#endif
	c->sched = s;
	s->all[s->nall++] = c;
	return c;

free_coro:
	free(c);
	return NULL;
}

static void coro_release(struct remora_coro *c)
{
#ifdef RSCHED_TSAN
	__tsan_destroy_fiber(c->ctx.fiber);
#endif
	stack_unmap(c);
	free(c);
}

/* ---- public API ------------------------------------------------------------------------ */

REMORA_API int remora_sched_create(struct remora_chan *ch, size_t stack_bytes,
				   struct remora_sched **out)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	struct remora_sched *s;

	if (!out)
		return -EINVAL;
	if (stack_bytes == 0)
		stack_bytes = RSCHED_DEFAULT_STACK;
	if (stack_bytes > SIZE_MAX / 4)
		return -EINVAL;
	if (stack_bytes < RSCHED_MIN_STACK)
		stack_bytes = RSCHED_MIN_STACK; /* the first frames alone need a few KiB */
	stack_bytes = (stack_bytes + page - 1) & ~(page - 1);
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->ch = ch;
	if (ch) {
		struct remora_caps caps = { .size = sizeof(caps) };

		if (remora_transport_caps(remora_chan_transport(ch), &caps) == 0)
			s->max_batch = caps.max_batch;
	}
	s->stack_bytes = stack_bytes;
	s->poll_budget = RSCHED_POLL_EVERY;
	s->inline_yield = 1;
	*out = s;
	return 0;
}

REMORA_API void remora_sched_destroy(struct remora_sched *s)
{
	if (!s)
		return;
	for (unsigned i = 0; i < s->nall; i++)
		coro_release(s->all[i]);
	free(s->all);
	free(s);
}

REMORA_API int remora_sched_spawn(struct remora_sched *s, remora_coro_fn fn, void *arg)
{
	struct remora_coro *c;

	if (!s || !fn)
		return -EINVAL;
	c = s->free;
	if (c) {
		s->free = c->next;
#ifdef RSCHED_ASAN
		/* The previous coroutine's last frames never returned: clear their redzones. */
		__asan_unpoison_memory_region(c->stack_lo, c->stack_len);
		c->ctx.fake_stack = NULL;
#endif
	} else {
		c = coro_alloc(s);
		if (!c)
			return -ENOMEM;
	}
	c->fn = fn;
	c->arg = arg;
	c->index = s->spawned++;
	c->state = CORO_READY;
	c->wake_token = false;
	c->inline_calls = 0; /* a coroutine from the free list kept its predecessor's count */
	c->ctx.sp = rsched_ctx_make((char *)c->stack_lo + c->stack_len, coro_main, c);
	s->live++;
	runq_push(s, c);
	return 0;
}

/*
 * Nothing is runnable: drives the poller once. Returns false when waiting is hopeless: no
 * channel, or no verb in flight that could ever wake a parked coroutine.
 */
static bool sched_idle(struct remora_sched *s)
{
	bool waiting = false;
	int n = s->poll_fn ? s->poll_fn(s->poll_arg, &waiting) : 0;

	if (s->ch)
		n += remora_chan_progress(s->ch);
	if (n == 0 && !s->runq_head && waiting &&
	    !(s->ch && remora_chan_outstanding(s->ch) > 0))
		sched_yield(); /* only another process's message can wake us: let it run */
	if (n > 0 || s->runq_head || waiting)
		return true;
	return s->ch && remora_chan_outstanding(s->ch) > 0;
}

REMORA_API void remora_sched_set_poller(struct remora_sched *s, remora_sched_poll_fn fn, void *arg)
{
	s->poll_fn = fn;
	s->poll_arg = fn ? arg : NULL;
}

REMORA_API void remora_sched_set_prefetch(struct remora_sched *s, bool on)
{
	s->prefetch = on;
}

REMORA_API void remora_sched_set_inline_yield(struct remora_sched *s, unsigned every)
{
	s->inline_yield = every ? every : 1;
}

REMORA_API void remora_co_prefetch_yield(void)
{
	struct remora_sched *s = cur_sched;

	if (s && s->cur && s->prefetch)
		remora_yield();
}

REMORA_API int remora_sched_run(struct remora_sched *s)
{
	struct remora_sched *outer = cur_sched;
	unsigned layer;
	int rc = 0;

	if (!s)
		return -EINVAL;
	layer = prof_enter(PROF_SCHED);
	cur_sched = s;
#ifdef RSCHED_TSAN
	s->main.fiber = __tsan_get_current_fiber();
#endif
	while (s->live) {
		struct remora_coro *c = runq_pop(s);

		if (c) {
			c->state = CORO_RUNNING;
			s->cur = c;
			ctx_switch(s, &s->main, &c->ctx);
			continue;
		}
		if (!sched_idle(s)) {
			rc = -EDEADLK;
			break;
		}
	}
	cur_sched = outer;
	prof_leave(layer);
	return rc;
}

REMORA_API struct remora_coro *remora_coro_self(void)
{
	return cur_sched ? cur_sched->cur : NULL;
}

REMORA_API struct remora_sched *remora_sched_self(void)
{
	return cur_sched && cur_sched->cur ? cur_sched : NULL;
}

REMORA_API void remora_yield(void)
{
	struct remora_sched *s = cur_sched;
	struct remora_coro *self = s ? s->cur : NULL;

	if (!self)
		return;
	self->inline_calls = 0;
	/* Coroutines that only yield must not starve the ones parked on verbs. */
	if (--s->poll_budget == 0 || !s->runq_head) {
		s->poll_budget = RSCHED_POLL_EVERY;
		if (s->ch)
			remora_chan_progress(s->ch);
		if (s->poll_fn) {
			bool waiting;

			s->poll_fn(s->poll_arg, &waiting);
		}
		if (!s->runq_head)
			return;
	}
	self->state = CORO_READY;
	runq_push(s, self);
	coro_switch_out(s, self, false);
}

REMORA_API void remora_coro_park(void)
{
	struct remora_sched *s = cur_sched;
	struct remora_coro *self = s ? s->cur : NULL;

	if (!self)
		return;
	if (self->wake_token) {
		self->wake_token = false;
		return;
	}
	self->inline_calls = 0;
	self->state = CORO_PARKED;
	coro_switch_out(s, self, false);
}

REMORA_API void remora_coro_wake(struct remora_coro *c)
{
	if (!c)
		return;
	switch (c->state) {
	case CORO_PARKED:
		c->state = CORO_READY;
		runq_push(c->sched, c);
		break;
	case CORO_READY:
	case CORO_RUNNING:
		c->wake_token = true;
		break;
	default:
		break;
	}
}

REMORA_API unsigned remora_coro_index(const struct remora_coro *c)
{
	return c->index;
}

/* ---- verbs from coroutines ------------------------------------------------------------- */

static void co_waiter_wake(struct remora_waiter *w)
{
	remora_coro_wake(w->owner);
}

/*
 * The channel refused a post for lack of room: settle completions (which frees room and
 * wakes their coroutines) and let others run. Returns -E2BIG when the channel is empty and
 * still refused, as the batch can then never fit.
 */
static int co_wait_room(struct remora_chan *ch)
{
	if (remora_chan_outstanding(ch) == 0)
		return -E2BIG;
	remora_chan_progress(ch);
	remora_yield();
	return 0;
}

/* Verbs one remora_post() on ch accepts; the scheduler's channel has it cached. */
static unsigned co_max_batch(struct remora_sched *s, struct remora_chan *ch)
{
	struct remora_caps caps = { .size = sizeof(caps) };

	if (ch == s->ch && s->max_batch)
		return s->max_batch;
	if (remora_transport_caps(remora_chan_transport(ch), &caps) || caps.max_batch == 0)
		return 1;
	return caps.max_batch;
}

/* Waits until every verb counted in w has completed. */
static void co_wait(struct remora_sched *s, struct remora_chan *ch, struct remora_waiter *w)
{
	while (w->pending) {
		if (ch == s->ch) {
			remora_coro_park();
			continue;
		}
		/* Not the scheduler's channel: nobody else polls it, so this coroutine does. */
		remora_chan_progress(ch);
		if (w->pending)
			remora_yield();
	}
}

REMORA_API int remora_co_exec(struct remora_chan *ch, struct remora_wr *wrs, unsigned n)
{
	struct remora_sched *s = cur_sched;
	struct remora_coro *self = s ? s->cur : NULL;
	struct remora_waiter w = { .pending = 0, .wake = co_waiter_wake, .owner = self };
	unsigned max, done = 0;
	int rc = 0;

	if (!self)
		return remora_exec(ch, wrs, n);
	if (!ch || (!wrs && n))
		return -EINVAL;
	if (n == 0)
		return 0;
	max = co_max_batch(s, ch);
	for (unsigned i = 0; i < n; i++)
		wrs[i].wr_id = (uint64_t)(uintptr_t)&w;
	/*
	 * Verbs that complete while posted need no park, idle poll and wake. The coroutine still
	 * yields, so that coroutines take turns at every verb as they do when it completes later;
	 * or at every inline_yield-th call, where the switches cost more than the turns are worth.
	 */
	/*
	 * Prefetch and yield: the lines are on their way while the others run, and the verbs
	 * take effect on the way back (still one yield per call). When inline completion no
	 * longer applies by then, the verbs go the usual way below.
	 */
	if (s->prefetch && rt_transport_prefetch(ch, wrs, n)) {
		remora_yield();
		if (rt_transport_exec_inline(ch, wrs, n, &rc))
			return rc;
	} else if (rt_transport_exec_inline(ch, wrs, n, &rc)) {
		if (++self->inline_calls >= s->inline_yield)
			remora_yield();
		return rc;
	}
	/* Batches beyond max_batch go out in chunks, one doorbell each, as remora_exec does. */
	while (done < n) {
		unsigned chunk = n - done < max ? n - done : max;

		rc = remora_post(ch, wrs + done, chunk);
		if (rc == -EAGAIN) {
			rc = co_wait_room(ch);
			if (rc)
				break;
			continue;
		}
		if (rc)
			break;
		w.pending += chunk;
		done += chunk;
	}
	/* Even after a refused chunk, the posted ones point at w: wait for them. */
	co_wait(s, ch, &w);
	return rc ? rc : w.status;
}
