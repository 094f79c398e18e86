/* SPDX-License-Identifier: MIT */
/*
 * Machine contexts for the coroutine scheduler: the hand-written switch (ctx_switch.S) and
 * the first frame of a new context. Private to runtime/sched.
 */
#ifndef RSCHED_CTX_H
#define RSCHED_CTX_H

#include <stdint.h>
#include <string.h>

/* Saves the running context, stores its stack pointer in *save_sp, resumes next_sp. */
void rsched_ctx_switch(void **save_sp, void *next_sp);
/* First instruction of every new context; see ctx_switch.S. */
void rsched_ctx_entry(void);

#if defined(__x86_64__)

#define RSCHED_CTX_FRAME 64 /* mxcsr+x87cw, r15, r14, r13, r12, rbx, rbp, return address */

/*
 * Builds the frame rsched_ctx_switch() pops the first time it resumes this stack: callee-saved
 * registers zero except r12 = fn and r13 = arg, the return address rsched_ctx_entry, and the
 * creating thread's MXCSR and x87 control word, so a new coroutine starts with the
 * floating-point environment of the code that spawned it. Returns the stack pointer to resume.
 * After the ret the stack pointer is 16-byte aligned, as a call site requires.
 */
static inline void *rsched_ctx_make(void *stack_hi, void (*fn)(void *), void *arg)
{
	uintptr_t top = (uintptr_t)stack_hi & ~(uintptr_t)15;
	uint64_t *f = (uint64_t *)(top - RSCHED_CTX_FRAME);
	uint32_t mxcsr;
	uint16_t x87cw;

	__asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
	__asm__ volatile("fnstcw %0" : "=m"(x87cw));
	memset(f, 0, RSCHED_CTX_FRAME);
	f[0] = mxcsr | (uint64_t)x87cw << 32;
	f[3] = (uint64_t)(uintptr_t)arg; /* r13 */
	f[4] = (uint64_t)(uintptr_t)fn;  /* r12 */
	f[7] = (uint64_t)(uintptr_t)rsched_ctx_entry;
	return f;
}

#elif defined(__aarch64__)

#define RSCHED_CTX_FRAME 176 /* x19..x30, d8..d15, fpcr, pad */

/* As on x86-64: x19 = fn, x20 = arg, x30 = rsched_ctx_entry, FPCR of the creator. */
static inline void *rsched_ctx_make(void *stack_hi, void (*fn)(void *), void *arg)
{
	uintptr_t top = (uintptr_t)stack_hi & ~(uintptr_t)15;
	uint64_t *f = (uint64_t *)(top - RSCHED_CTX_FRAME);
	uint64_t fpcr;

	__asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
	memset(f, 0, RSCHED_CTX_FRAME);
	f[0] = (uint64_t)(uintptr_t)fn;  /* x19 */
	f[1] = (uint64_t)(uintptr_t)arg; /* x20 */
	f[11] = (uint64_t)(uintptr_t)rsched_ctx_entry; /* x30 */
	f[20] = fpcr;
	return f;
}

#else
#error "remora coroutines: no context switch for this architecture (x86-64 and aarch64 only)"
#endif

#endif
