/* SPDX-License-Identifier: MIT */
/*
 * rsched_ctx_switch(void **save_sp, void *next_sp)
 *	Saves the running context on its own stack, stores that stack pointer in *save_sp and
 *	resumes the context whose stack pointer is next_sp. Returns when someone switches back.
 * rsched_ctx_entry
 *	Where a new context starts: rsched_ctx_make() (ctx.h) builds a frame whose return address
 *	is this label, with fn and arg in two callee-saved registers; it calls fn(arg), which
 *	never returns.
 *
 * What is preserved, and why only that: rsched_ctx_switch is reached through an ordinary
 * call, so every caller-saved register is already dead by the ABI; only what the ABI makes a
 * callee preserve is saved (this is why the switch is a few ns and swapcontext is not: no
 * signal mask, no full FP state).
 *
 *   x86-64 (SysV): rbx, rbp, r12-r15, rsp, plus the MXCSR register and the x87 control word.
 *	The SysV ABI lists the control bits of both (rounding mode, exception masks, FTZ/DAZ,
 *	x87 precision) as callee-saved, and every coroutine of a thread shares the physical
 *	registers: without this a coroutine that calls fesetround() would change the rounding of
 *	whichever coroutine runs next. MXCSR is saved whole (stmxcsr has no control-only form),
 *	so its sticky status flags also follow each coroutine. x87 status and tag words, and
 *	all vector registers, are caller-saved and not touched.
 *	Frame, from the saved sp up: mxcsr(4) x87cw(2) pad(2) r15 r14 r13 r12 rbx rbp ret.
 *
 *   aarch64 (AAPCS64): x19-x28, fp (x29), lr (x30), sp, d8-d15 (only the low 64 bits of
 *	v8-v15 are callee-saved), and FPCR, whose mode bits (rounding, FZ, DN, AHP) AAPCS64
 *	treats as preserved across calls, for the same reason as MXCSR above. FPCR is written
 *	only when it differs: on some cores an msr to FPCR is far slower than the compare.
 *	FPSR (cumulative flags) is caller-saved and not touched.
 *	Frame, from the saved sp up: x19..x28, x29, x30, d8..d15, fpcr, pad (176 bytes).
 *
 * Control-flow protection: the switch begins with endbr64 / bti c when the compiler enables
 * IBT / BTI. This object carries no GNU property note, so a linker asked for CET shadow
 * stacks leaves them off for the binary (a stack switch is incompatible with a shadow stack).
 */

#if defined(__x86_64__)

	.text
	.globl	rsched_ctx_switch
	.hidden	rsched_ctx_switch
	.type	rsched_ctx_switch, @function
	.p2align 4
rsched_ctx_switch:
	.cfi_startproc
#ifdef __CET__
	endbr64
#endif
	pushq	%rbp
	pushq	%rbx
	pushq	%r12
	pushq	%r13
	pushq	%r14
	pushq	%r15
	subq	$8, %rsp
	stmxcsr	(%rsp)
	fnstcw	4(%rsp)
	movq	%rsp, (%rdi)
	movq	%rsi, %rsp
	ldmxcsr	(%rsp)
	fldcw	4(%rsp)
	addq	$8, %rsp
	popq	%r15
	popq	%r14
	popq	%r13
	popq	%r12
	popq	%rbx
	popq	%rbp
	ret
	.cfi_endproc
	.size	rsched_ctx_switch, .-rsched_ctx_switch

	.globl	rsched_ctx_entry
	.hidden	rsched_ctx_entry
	.type	rsched_ctx_entry, @function
	.p2align 4
rsched_ctx_entry:
	.cfi_startproc
	.cfi_undefined rip		/* outermost frame: unwinders stop here */
	movq	%r13, %rdi		/* arg */
	callq	*%r12			/* fn(arg); never returns */
	ud2
	.cfi_endproc
	.size	rsched_ctx_entry, .-rsched_ctx_entry

	.section .note.GNU-stack, "", @progbits

#elif defined(__aarch64__)

	.text
	.globl	rsched_ctx_switch
	.hidden	rsched_ctx_switch
	.type	rsched_ctx_switch, %function
	.p2align 4
rsched_ctx_switch:
	.cfi_startproc
#ifdef __ARM_FEATURE_BTI_DEFAULT
	hint	#34			/* bti c */
#endif
	sub	sp, sp, #176
	stp	x19, x20, [sp, #0]
	stp	x21, x22, [sp, #16]
	stp	x23, x24, [sp, #32]
	stp	x25, x26, [sp, #48]
	stp	x27, x28, [sp, #64]
	stp	x29, x30, [sp, #80]
	stp	d8, d9, [sp, #96]
	stp	d10, d11, [sp, #112]
	stp	d12, d13, [sp, #128]
	stp	d14, d15, [sp, #144]
	mrs	x9, fpcr
	str	x9, [sp, #160]
	mov	x9, sp
	str	x9, [x0]
	mov	sp, x1
	ldr	x9, [sp, #160]
	mrs	x10, fpcr
	cmp	x9, x10
	b.eq	1f
	msr	fpcr, x9
1:
	ldp	x19, x20, [sp, #0]
	ldp	x21, x22, [sp, #16]
	ldp	x23, x24, [sp, #32]
	ldp	x25, x26, [sp, #48]
	ldp	x27, x28, [sp, #64]
	ldp	x29, x30, [sp, #80]
	ldp	d8, d9, [sp, #96]
	ldp	d10, d11, [sp, #112]
	ldp	d12, d13, [sp, #128]
	ldp	d14, d15, [sp, #144]
	add	sp, sp, #176
	ret
	.cfi_endproc
	.size	rsched_ctx_switch, .-rsched_ctx_switch

	.globl	rsched_ctx_entry
	.hidden	rsched_ctx_entry
	.type	rsched_ctx_entry, %function
	.p2align 4
rsched_ctx_entry:
	.cfi_startproc
	.cfi_undefined x30		/* outermost frame: unwinders stop here */
	mov	x0, x20			/* arg */
	blr	x19			/* fn(arg); never returns */
	brk	#0
	.cfi_endproc
	.size	rsched_ctx_entry, .-rsched_ctx_entry

	.section .note.GNU-stack, "", %progbits

#else
#error "remora coroutines: no context switch for this architecture (x86-64 and aarch64 only)"
#endif
