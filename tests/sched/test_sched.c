/* SPDX-License-Identifier: MIT */
/*
 * Coroutine scheduler: execution order, park/wake, many coroutines with intact stacks, deep
 * recursion and the guard page, callee-saved and floating-point state across switches, and
 * remora_co_exec without a channel. Verbs through a real transport: test_co_exec.c.
 */
#include <errno.h>
#include <fenv.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <remora/sched.h>

/* ---- a trace of who ran when ----------------------------------------------------------- */

static char trace[512];
static unsigned ntrace;

static void mark(char ch)
{
	if (ntrace < sizeof(trace) - 1)
		trace[ntrace++] = ch;
	trace[ntrace] = '\0';
}

static void trace_reset(void)
{
	ntrace = 0;
	trace[0] = '\0';
}

static struct remora_sched *new_sched(size_t stack)
{
	struct remora_sched *s = NULL;

	cr_assert_eq(remora_sched_create(NULL, stack, &s), 0);
	cr_assert_not_null(s);
	return s;
}

/* ---- order of execution ---------------------------------------------------------------- */

static void letters(void *arg)
{
	char ch = (char)(uintptr_t)arg;

	for (int i = 0; i < 3; i++) {
		mark(ch);
		remora_yield();
	}
}

Test(sched, fifo_interleaving_with_yields)
{
	struct remora_sched *s = new_sched(0);

	trace_reset();
	for (char ch = 'a'; ch <= 'c'; ch++)
		cr_assert_eq(remora_sched_spawn(s, letters, (void *)(uintptr_t)ch), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	cr_assert_str_eq(trace, "abcabcabc");
	remora_sched_destroy(s);
}

static void hinted_letters(void *arg)
{
	char ch = (char)(uintptr_t)arg;

	for (int i = 0; i < 2; i++) {
		mark(ch);
		remora_co_prefetch_yield();
	}
}

static const char *hinted_trace(bool prefetch)
{
	struct remora_sched *s = new_sched(0);

	trace_reset();
	remora_sched_set_prefetch(s, prefetch);
	for (char ch = 'a'; ch <= 'b'; ch++)
		cr_assert_eq(remora_sched_spawn(s, hinted_letters, (void *)(uintptr_t)ch), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	remora_sched_destroy(s);
	return trace;
}

/* A prefetch hint gives the turn away under prefetch and yield only; outside any
 * coroutine it does nothing. */
Test(sched, prefetch_yield_hint_yields_only_when_prefetching)
{
	remora_co_prefetch_yield();
	cr_assert_str_eq(hinted_trace(false), "aabb", "the hint yielded with prefetch off");
	cr_assert_str_eq(hinted_trace(true), "abab", "the hint kept the turn with prefetch on");
}

static void uneven(void *arg)
{
	int n = (int)(uintptr_t)arg;

	for (int i = 0; i < n; i++) {
		mark((char)('0' + n));
		remora_yield();
	}
}

Test(sched, finished_coroutines_leave_the_rotation)
{
	struct remora_sched *s = new_sched(0);

	trace_reset();
	for (uintptr_t n = 1; n <= 3; n++)
		cr_assert_eq(remora_sched_spawn(s, uneven, (void *)n), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	cr_assert_str_eq(trace, "123233");
	remora_sched_destroy(s);
}

static void child_body(void *arg)
{
	(void)arg;
	mark('c');
	remora_yield();
	mark('C');
}

static void parent_body(void *arg)
{
	(void)arg;
	mark('p');
	cr_assert_eq(remora_sched_spawn(remora_sched_self(), child_body, NULL), 0);
	remora_yield();
	mark('P');
}

Test(sched, spawn_inside_a_coroutine_queues_at_the_tail)
{
	struct remora_sched *s = new_sched(0);

	trace_reset();
	cr_assert_eq(remora_sched_spawn(s, parent_body, NULL), 0);
	cr_assert_eq(remora_sched_spawn(s, letters, (void *)(uintptr_t)'x'), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	/* p spawns c behind x; then the queue rotates p x c. */
	cr_assert_str_eq(trace, "pxcPxCx");
	remora_sched_destroy(s);
}

static struct remora_coro *seen_self[4];
static struct remora_sched *seen_sched[4];

static void who_am_i(void *arg)
{
	unsigned i = (unsigned)(uintptr_t)arg;

	seen_self[i] = remora_coro_self();
	seen_sched[i] = remora_sched_self();
	cr_assert_eq(remora_coro_index(seen_self[i]), i);
}

Test(sched, self_and_index)
{
	struct remora_sched *s = new_sched(0);

	cr_assert_null(remora_coro_self());
	cr_assert_null(remora_sched_self());
	for (uintptr_t i = 0; i < 4; i++)
		cr_assert_eq(remora_sched_spawn(s, who_am_i, (void *)i), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	for (unsigned i = 0; i < 4; i++) {
		cr_assert_not_null(seen_self[i]);
		cr_assert_eq(seen_sched[i], s);
		for (unsigned j = 0; j < i; j++)
			cr_assert_neq(seen_self[i], seen_self[j]);
	}
	cr_assert_null(remora_coro_self());
	/* Outside a coroutine these are no-ops, not crashes. */
	remora_yield();
	remora_coro_park();
	remora_sched_destroy(s);
}

Test(sched, bad_arguments)
{
	struct remora_sched *s = new_sched(0);

	cr_assert_eq(remora_sched_spawn(NULL, letters, NULL), -EINVAL);
	cr_assert_eq(remora_sched_spawn(s, NULL, NULL), -EINVAL);
	cr_assert_eq(remora_sched_create(NULL, 0, NULL), -EINVAL);
	cr_assert_eq(remora_sched_create(NULL, SIZE_MAX, &s), -EINVAL);
	cr_assert_eq(remora_sched_run(NULL), -EINVAL);
	/* Nothing spawned: returns at once. */
	cr_assert_eq(remora_sched_run(s), 0);
	remora_sched_destroy(s);
	remora_sched_destroy(NULL);
}

/* ---- park and wake --------------------------------------------------------------------- */

static struct remora_coro *parker;

static void park_body(void *arg)
{
	(void)arg;
	parker = remora_coro_self();
	mark('A');
	remora_coro_park();
	mark('a');
}

static void wake_body(void *arg)
{
	(void)arg;
	mark('B');
	remora_coro_wake(parker);
	mark('W'); /* wake only queues: the waker keeps running */
	remora_yield();
	mark('b');
}

Test(sched, park_until_woken)
{
	struct remora_sched *s = new_sched(0);

	trace_reset();
	cr_assert_eq(remora_sched_spawn(s, park_body, NULL), 0);
	cr_assert_eq(remora_sched_spawn(s, wake_body, NULL), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	cr_assert_str_eq(trace, "ABWab");
	remora_sched_destroy(s);
}

static void park_forever(void *arg)
{
	(void)arg;
	mark('z');
	remora_coro_park();
	mark('!');
}

Test(sched, parked_with_nothing_in_flight_is_a_deadlock)
{
	struct remora_sched *s = new_sched(0);

	trace_reset();
	cr_assert_eq(remora_sched_spawn(s, park_forever, NULL), 0);
	cr_assert_eq(remora_sched_spawn(s, letters, (void *)(uintptr_t)'q'), 0);
	cr_assert_eq(remora_sched_run(s), -EDEADLK);
	cr_assert_str_eq(trace, "zqqq");
	remora_sched_destroy(s); /* releases the parked coroutine's stack */
}

static void wake_before_park(void *arg)
{
	(void)arg;
	mark('1');
	remora_coro_wake(remora_coro_self()); /* a token: the next park returns at once */
	remora_coro_park();
	mark('2');
	remora_coro_park(); /* the token was consumed: this one really parks */
	mark('3');
}

static void late_waker(void *arg)
{
	struct remora_coro *target = arg;

	mark('w');
	remora_yield();
	mark('x');
	remora_coro_wake(target);
	remora_coro_wake(target); /* twice while queued: still one resumption */
}

static struct remora_coro *first_coro;

static void record_first(void *arg)
{
	(void)arg;
	first_coro = remora_coro_self();
	wake_before_park(NULL);
}

Test(sched, wake_before_park_is_not_lost)
{
	struct remora_sched *s = new_sched(0);

	trace_reset();
	first_coro = NULL;
	cr_assert_eq(remora_sched_spawn(s, record_first, NULL), 0);
	cr_assert_eq(remora_sched_run(s), -EDEADLK);
	cr_assert_str_eq(trace, "12");
	remora_sched_destroy(s);

	/* Same again with someone to wake the second park. */
	trace_reset();
	s = new_sched(0);
	cr_assert_eq(remora_sched_spawn(s, record_first, NULL), 0);
	cr_assert_eq(remora_sched_run(s), -EDEADLK);
	cr_assert_eq(remora_sched_spawn(s, late_waker, first_coro), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	cr_assert_str_eq(trace, "12wx3");
	remora_sched_destroy(s);
}

/* The waiter protocol of transport.h, played by hand: what the poller does on completions. */
static struct remora_waiter *shared_waiter;

static void waiter_wake(struct remora_waiter *w)
{
	remora_coro_wake(w->owner);
}

static struct remora_waiter the_waiter;

static void waiting_body(void *arg)
{
	struct remora_waiter *w = &the_waiter;

	(void)arg;
	*w = (struct remora_waiter){ .pending = 3, .wake = waiter_wake, .owner = remora_coro_self() };
	shared_waiter = w;
	while (w->pending)
		remora_coro_park();
	mark(w->status == -EIO ? 'E' : '?');
}

static void fake_poller(void *arg)
{
	(void)arg;
	for (int i = 0; i < 3; i++) {
		struct remora_waiter *w = shared_waiter;

		mark('c');
		if (i == 1 && w->status == 0)
			w->status = -EIO;
		if (--w->pending == 0)
			w->wake(w);
		remora_yield();
	}
}

Test(sched, waiter_protocol_wakes_once_all_completed)
{
	struct remora_sched *s = new_sched(0);

	trace_reset();
	cr_assert_eq(remora_sched_spawn(s, waiting_body, NULL), 0);
	cr_assert_eq(remora_sched_spawn(s, fake_poller, NULL), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	cr_assert_str_eq(trace, "cccE");
	remora_sched_destroy(s);
}

/* ---- many coroutines, each with its own stack ------------------------------------------ */

#define MANY 1000
#define MANY_ROUNDS 8

static unsigned many_ok;
static unsigned many_order_errors;
static unsigned many_next;
static unsigned many_base; /* remora_coro_index() of the first coroutine of a run */

static void many_body(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;
	volatile uint32_t buf[128];
	bool intact = true;

	for (unsigned r = 0; r < MANY_ROUNDS; r++) {
		/* Strict round robin: coroutine id runs exactly when the counter says so. */
		if (many_next != r * MANY + id)
			many_order_errors++;
		many_next++;
		for (unsigned i = 0; i < 128; i++)
			buf[i] = id * 2654435761u + i * 40503u + r;
		remora_yield();
		for (unsigned i = 0; i < 128; i++)
			intact &= buf[i] == id * 2654435761u + i * 40503u + r;
	}
	if (intact && remora_coro_index(remora_coro_self()) == many_base + id)
		many_ok++;
}

Test(sched, a_thousand_coroutines_keep_their_stacks)
{
	struct remora_sched *s = new_sched(0);

	/* The second run reuses the stacks of the first one's finished coroutines. */
	for (unsigned run = 0; run < 2; run++) {
		many_ok = many_order_errors = many_next = 0;
		many_base = run * MANY;
		for (uintptr_t i = 0; i < MANY; i++)
			cr_assert_eq(remora_sched_spawn(s, many_body, (void *)i), 0);
		cr_assert_eq(remora_sched_run(s), 0);
		cr_assert_eq(many_ok, MANY, "run %u", run);
		cr_assert_eq(many_order_errors, 0, "run %u", run);
		cr_assert_eq(many_next, MANY * MANY_ROUNDS, "run %u", run);
	}
	remora_sched_destroy(s);
}

/* ---- deep recursion and the guard page -------------------------------------------------- */

static uintptr_t frame_hi, frame_lo;

/*
 * Not ASan-instrumented: with detect_stack_use_after_return its fake stack takes the first
 * frames' arrays and then runs out, so frame sizes would change with depth.
 */
__attribute__((noinline, no_sanitize_address)) static uint64_t recurse(unsigned depth,
									 uint64_t seed)
{
	volatile uint8_t pad[200];
	uintptr_t frame = (uintptr_t)__builtin_frame_address(0);
	uint64_t sum;

	for (unsigned i = 0; i < sizeof(pad); i++)
		pad[i] = (uint8_t)(seed + i);
	if (frame < frame_lo)
		frame_lo = frame;
	sum = depth ? recurse(depth - 1, seed * 31 + 7) : 0;
	for (unsigned i = 0; i < sizeof(pad); i++)
		sum += pad[i];
	return sum;
}

static uint64_t recurse_reference(unsigned depth, uint64_t seed)
{
	uint64_t sum = 0;

	for (unsigned d = 0; d <= depth; d++) {
		for (unsigned i = 0; i < 200; i++)
			sum += (uint8_t)(seed + i);
		seed = seed * 31 + 7;
	}
	return sum;
}

struct deep_arg {
	size_t stack;
	unsigned depth;
	uint64_t result;
	size_t used;
};

static void deep_body(void *arg)
{
	struct deep_arg *d = arg;

	frame_hi = (uintptr_t)__builtin_frame_address(0);
	frame_lo = UINTPTR_MAX;
	d->result = recurse(d->depth, 1);
	remora_yield();
	d->used = frame_hi - frame_lo;
}

static void measure_frame(void *arg)
{
	size_t *per_frame = arg;

	frame_hi = (uintptr_t)__builtin_frame_address(0);
	frame_lo = UINTPTR_MAX;
	recurse(15, 1);
	*per_frame = (frame_hi - frame_lo) / 16;
}

Test(sched, deep_recursion_within_the_default_stack)
{
	struct remora_sched *s = new_sched(0);
	size_t per_frame = 0;
	struct deep_arg d = { .stack = 64 * 1024 };

	/* Frame sizes differ by compiler and sanitizer: measure, then fill ~3/4 of 64 KiB. */
	cr_assert_eq(remora_sched_spawn(s, measure_frame, &per_frame), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	cr_assert_gt(per_frame, 0);
	d.depth = (unsigned)(d.stack * 3 / 4 / per_frame);
	cr_assert_eq(remora_sched_spawn(s, deep_body, &d), 0);
	cr_assert_eq(remora_sched_spawn(s, letters, (void *)(uintptr_t)'r'), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	cr_assert_eq(d.result, recurse_reference(d.depth, 1));
	cr_assert_gt(d.used, d.stack / 2, "recursion used only %zu bytes", d.used);
	cr_assert_lt(d.used, d.stack);
	remora_sched_destroy(s);
}

static void overflow_body(void *arg)
{
	(void)arg;
	/* 1 MiB of frames on a 64 KiB stack: must hit the guard page long before the end. */
	recurse(1u << 20 >> 8, 1);
}

Test(sched, stack_overflow_hits_the_guard_page)
{
	pid_t pid = fork();
	int st;

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct remora_sched *s;

		/* ASan reports the overflow on stderr: keep the test log readable. */
		if (!freopen("/dev/null", "w", stderr))
			_exit(3);
		if (remora_sched_create(NULL, 0, &s) || remora_sched_spawn(s, overflow_body, NULL))
			_exit(2);
		remora_sched_run(s);
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	/* Plain build: SIGSEGV. Under ASan its handler reports the fault and exits non-zero. */
	if (WIFSIGNALED(st))
		cr_assert(WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS, "signal %d",
			  WTERMSIG(st));
	else
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 2,
			  "the overflow went unnoticed (status %d)", st);
}

/* ---- callee-saved registers and floating point ----------------------------------------- */

/*
 * rtest_clobber_call(seed, fn, arg): loads every callee-saved register with seed + i (x86-64:
 * rbx, rbp, r12-r15; aarch64: x19-x28 and d8-d15), calls fn(arg), and returns how many of them
 * no longer hold their value. fn yields to coroutines that do the same with other seeds, so a
 * switch that forgot a register shows up as a mismatch.
 */
long rtest_clobber_call(long seed, void (*fn)(void *), void *arg);

#if defined(__x86_64__)
__asm__(".pushsection .text\n"
	".globl rtest_clobber_call\n"
	".type rtest_clobber_call, @function\n"
	"rtest_clobber_call:\n"
	"	pushq %rbp\n	pushq %rbx\n	pushq %r12\n"
	"	pushq %r13\n	pushq %r14\n	pushq %r15\n"
	"	subq $8, %rsp\n"
	"	movq %rdi, (%rsp)\n"
	"	movq %rdi, %rbx\n"
	"	leaq 1(%rdi), %rbp\n"
	"	leaq 2(%rdi), %r12\n"
	"	leaq 3(%rdi), %r13\n"
	"	leaq 4(%rdi), %r14\n"
	"	leaq 5(%rdi), %r15\n"
	"	movq %rdx, %rdi\n"
	"	callq *%rsi\n"
	"	movq (%rsp), %rcx\n"
	"	xorl %eax, %eax\n"
	"	xorl %edx, %edx\n"
	"	cmpq %rcx, %rbx\n	setne %dl\n	addq %rdx, %rax\n"
	"	leaq 1(%rcx), %rsi\n	cmpq %rsi, %rbp\n	setne %dl\n	addq %rdx, %rax\n"
	"	leaq 2(%rcx), %rsi\n	cmpq %rsi, %r12\n	setne %dl\n	addq %rdx, %rax\n"
	"	leaq 3(%rcx), %rsi\n	cmpq %rsi, %r13\n	setne %dl\n	addq %rdx, %rax\n"
	"	leaq 4(%rcx), %rsi\n	cmpq %rsi, %r14\n	setne %dl\n	addq %rdx, %rax\n"
	"	leaq 5(%rcx), %rsi\n	cmpq %rsi, %r15\n	setne %dl\n	addq %rdx, %rax\n"
	"	addq $8, %rsp\n"
	"	popq %r15\n	popq %r14\n	popq %r13\n"
	"	popq %r12\n	popq %rbx\n	popq %rbp\n"
	"	ret\n"
	".size rtest_clobber_call, .-rtest_clobber_call\n"
	".popsection\n");
#elif defined(__aarch64__)
/* Keeps the seed in x0's slot on the stack; compares x19-x28 and d8-d15 (as integers). */
__asm__(".pushsection .text\n"
	".globl rtest_clobber_call\n"
	".type rtest_clobber_call, %function\n"
	"rtest_clobber_call:\n"
	"	stp x29, x30, [sp, #-176]!\n"
	"	stp x19, x20, [sp, #16]\n	stp x21, x22, [sp, #32]\n"
	"	stp x23, x24, [sp, #48]\n	stp x25, x26, [sp, #64]\n"
	"	stp x27, x28, [sp, #80]\n	stp d8, d9, [sp, #96]\n"
	"	stp d10, d11, [sp, #112]\n	stp d12, d13, [sp, #128]\n"
	"	stp d14, d15, [sp, #144]\n	str x0, [sp, #160]\n"
	"	mov x19, x0\n	add x20, x0, #1\n	add x21, x0, #2\n	add x22, x0, #3\n"
	"	add x23, x0, #4\n	add x24, x0, #5\n	add x25, x0, #6\n	add x26, x0, #7\n"
	"	add x27, x0, #8\n	add x28, x0, #9\n"
	"	add x9, x0, #10\n	fmov d8, x9\n	add x9, x0, #11\n	fmov d9, x9\n"
	"	add x9, x0, #12\n	fmov d10, x9\n	add x9, x0, #13\n	fmov d11, x9\n"
	"	add x9, x0, #14\n	fmov d12, x9\n	add x9, x0, #15\n	fmov d13, x9\n"
	"	add x9, x0, #16\n	fmov d14, x9\n	add x9, x0, #17\n	fmov d15, x9\n"
	"	mov x0, x2\n"
	"	blr x1\n"
	"	ldr x1, [sp, #160]\n"
	"	mov x0, #0\n"
	"	cmp x19, x1\n	cinc x0, x0, ne\n"
	"	add x2, x1, #1\n	cmp x20, x2\n	cinc x0, x0, ne\n"
	"	add x2, x1, #2\n	cmp x21, x2\n	cinc x0, x0, ne\n"
	"	add x2, x1, #3\n	cmp x22, x2\n	cinc x0, x0, ne\n"
	"	add x2, x1, #4\n	cmp x23, x2\n	cinc x0, x0, ne\n"
	"	add x2, x1, #5\n	cmp x24, x2\n	cinc x0, x0, ne\n"
	"	add x2, x1, #6\n	cmp x25, x2\n	cinc x0, x0, ne\n"
	"	add x2, x1, #7\n	cmp x26, x2\n	cinc x0, x0, ne\n"
	"	add x2, x1, #8\n	cmp x27, x2\n	cinc x0, x0, ne\n"
	"	add x2, x1, #9\n	cmp x28, x2\n	cinc x0, x0, ne\n"
	"	add x2, x1, #10\n	fmov x3, d8\n	cmp x3, x2\n	cinc x0, x0, ne\n"
	"	add x2, x1, #11\n	fmov x3, d9\n	cmp x3, x2\n	cinc x0, x0, ne\n"
	"	add x2, x1, #12\n	fmov x3, d10\n	cmp x3, x2\n	cinc x0, x0, ne\n"
	"	add x2, x1, #13\n	fmov x3, d11\n	cmp x3, x2\n	cinc x0, x0, ne\n"
	"	add x2, x1, #14\n	fmov x3, d12\n	cmp x3, x2\n	cinc x0, x0, ne\n"
	"	add x2, x1, #15\n	fmov x3, d13\n	cmp x3, x2\n	cinc x0, x0, ne\n"
	"	add x2, x1, #16\n	fmov x3, d14\n	cmp x3, x2\n	cinc x0, x0, ne\n"
	"	add x2, x1, #17\n	fmov x3, d15\n	cmp x3, x2\n	cinc x0, x0, ne\n"
	"	ldp x19, x20, [sp, #16]\n	ldp x21, x22, [sp, #32]\n"
	"	ldp x23, x24, [sp, #48]\n	ldp x25, x26, [sp, #64]\n"
	"	ldp x27, x28, [sp, #80]\n	ldp d8, d9, [sp, #96]\n"
	"	ldp d10, d11, [sp, #112]\n	ldp d12, d13, [sp, #128]\n"
	"	ldp d14, d15, [sp, #144]\n"
	"	ldp x29, x30, [sp], #176\n"
	"	ret\n"
	".size rtest_clobber_call, .-rtest_clobber_call\n"
	".popsection\n");
#else
#error "test_sched: no register test for this architecture"
#endif

static void yield_a_few(void *arg)
{
	(void)arg;
	for (int i = 0; i < 4; i++)
		remora_yield();
}

static long reg_mismatch[3];

static void clobber_body(void *arg)
{
	unsigned i = (unsigned)(uintptr_t)arg;

	reg_mismatch[i] = rtest_clobber_call(0x1000 * (long)(i + 1), yield_a_few, NULL);
}

Test(sched, callee_saved_registers_survive_switches)
{
	struct remora_sched *s = new_sched(0);

	for (unsigned i = 0; i < 3; i++)
		reg_mismatch[i] = -1;
	for (uintptr_t i = 0; i < 3; i++)
		cr_assert_eq(remora_sched_spawn(s, clobber_body, (void *)i), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	for (unsigned i = 0; i < 3; i++)
		cr_assert_eq(reg_mismatch[i], 0, "coroutine %u lost %ld registers", i,
			     reg_mismatch[i]);
	remora_sched_destroy(s);
}

__attribute__((noinline)) static double fp_step(double x, double k)
{
	return x * 1.0000001 + k / 3.0;
}

static double fp_result[3];

static void fp_body(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;
	double x = id, y = 1.0 / (id + 1), z = -(double)id;

	for (int i = 0; i < 50; i++) {
		x = fp_step(x, y);
		y = fp_step(y, z);
		remora_yield();
		z = fp_step(z, x);
	}
	fp_result[id] = x + 2 * y + 3 * z;
}

static double fp_reference(unsigned id)
{
	double x = id, y = 1.0 / (id + 1), z = -(double)id;

	for (int i = 0; i < 50; i++) {
		x = fp_step(x, y);
		y = fp_step(y, z);
		z = fp_step(z, x);
	}
	return x + 2 * y + 3 * z;
}

Test(sched, floating_point_values_survive_switches)
{
	struct remora_sched *s = new_sched(0);

	for (uintptr_t i = 0; i < 3; i++)
		cr_assert_eq(remora_sched_spawn(s, fp_body, (void *)i), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	for (unsigned i = 0; i < 3; i++)
		cr_assert_eq(fp_result[i], fp_reference(i), "coroutine %u", i);
	remora_sched_destroy(s);
}

static const int modes[3] = { FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO };
static unsigned round_errors;

static void rounding_body(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;
	volatile double one = 1.0, three = 3.0;

	fesetround(modes[id]);
	for (int i = 0; i < 5; i++) {
		remora_yield();
		if (fegetround() != modes[id])
			round_errors++;
	}
	/* Prove the mode acts on arithmetic too, not only on what fegetround reads back. */
	if (modes[id] == FE_UPWARD && !(one / three > 0.3333333333333333))
		round_errors++;
	if (modes[id] == FE_DOWNWARD && !(one / three < 0.33333333333333337))
		round_errors++;
}

Test(sched, rounding_mode_is_per_coroutine)
{
	struct remora_sched *s = new_sched(0);
	int outer = fegetround();

	round_errors = 0;
	for (uintptr_t i = 0; i < 3; i++)
		cr_assert_eq(remora_sched_spawn(s, rounding_body, (void *)i), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	cr_assert_eq(round_errors, 0);
	/* The thread's own mode is back once the coroutines are done. */
	cr_assert_eq(fegetround(), outer);
	remora_sched_destroy(s);
}

/* ---- remora_co_exec without a channel --------------------------------------------------- */

static int co_exec_rc[2];

static void co_exec_body(void *arg)
{
	struct remora_wr wr = { .op = REMORA_OP_READ };

	(void)arg;
	co_exec_rc[0] = remora_co_exec(NULL, &wr, 1);
	co_exec_rc[1] = remora_co_exec(NULL, NULL, 0);
}

Test(sched, co_exec_rejects_a_missing_channel)
{
	struct remora_sched *s = new_sched(0);

	co_exec_rc[0] = co_exec_rc[1] = 99;
	cr_assert_eq(remora_sched_spawn(s, co_exec_body, NULL), 0);
	cr_assert_eq(remora_sched_run(s), 0);
	cr_assert_eq(co_exec_rc[0], -EINVAL);
	cr_assert_eq(co_exec_rc[1], -EINVAL);
	remora_sched_destroy(s);
}
