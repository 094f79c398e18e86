/* SPDX-License-Identifier: MIT */
/*
 * Verbs as CPU instructions on a mapping of a memory node's pool: the data movement shared by
 * the backends whose memory nodes are plain shared memory (shm, pmem). Header-only so that it
 * inlines into each backend's post loop; include it as "transport/cpuverbs.h".
 *
 * Semantics are those of <remora/transport.h>:
 *   CAS:   old = *p; if (old == compare) *p = swap; return old;
 *   FAA:   old = *p; *p = old + swap; return old;
 *   MCAS:  old = *p; if (((old ^ compare) & compare_mask) == 0)
 *                            *p = (old & ~swap_mask) | (swap & swap_mask);
 *          return old;
 * READ and WRITE copy bytes; only each aligned 8-byte word of a copy is single-copy atomic.
 */
#ifndef REMORA_BACKENDS_HOST_CPUVERBS_H
#define REMORA_BACKENDS_HOST_CPUVERBS_H

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <remora/transport.h>

static inline void rt_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Process-local spinlock for short critical sections without system calls. */
static inline void rt_cpu_lock(uint32_t *l)
{
	while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
		while (__atomic_load_n(l, __ATOMIC_RELAXED))
			rt_cpu_relax();
}

static inline void rt_cpu_unlock(uint32_t *l)
{
	__atomic_store_n(l, 0, __ATOMIC_RELEASE);
}

/*
 * Copies that are not word aligned (CREST's cells, odd lengths): the bytes before the first
 * aligned word and after the last one go one by one, the words between whole, every access a
 * relaxed atomic. A concurrent WRITE or atomic then meets each byte old or new, never a C data
 * race (a plain memcpy here was one, and ThreadSanitizer said so); a torn result is the
 * protocol's to detect, as on a NIC.
 */
static inline void rt_cpu_read_unaligned(unsigned char *dst, const unsigned char *p, uint32_t len)
{
	uint32_t i = 0;

	for (; i < len && ((uintptr_t)(p + i) & 7); i++)
		dst[i] = __atomic_load_n(p + i, __ATOMIC_RELAXED);
	for (; i + 8 <= len; i += 8) {
		uint64_t v = __atomic_load_n((const uint64_t *)(const void *)(p + i), __ATOMIC_RELAXED);

		memcpy(dst + i, &v, 8);
	}
	for (; i < len; i++)
		dst[i] = __atomic_load_n(p + i, __ATOMIC_RELAXED);
}

static inline void rt_cpu_write_unaligned(unsigned char *p, const unsigned char *src, uint32_t len)
{
	uint32_t i = 0;

	for (; i < len && ((uintptr_t)(p + i) & 7); i++)
		__atomic_store_n(p + i, src[i], __ATOMIC_RELAXED);
	for (; i + 8 <= len; i += 8) {
		uint64_t v;

		memcpy(&v, src + i, 8);
		__atomic_store_n((uint64_t *)(void *)(p + i), v, __ATOMIC_RELAXED);
	}
	for (; i < len; i++)
		__atomic_store_n(p + i, src[i], __ATOMIC_RELAXED);
}

/*
 * READ: pool -> local. When the pool side and the length are word aligned, every word is loaded
 * with one relaxed atomic load, so a concurrent 8-byte atomic or WRITE of that word is never
 * seen half done (protocols rely on it for version words, as on an RDMA NIC) and sanitizers see
 * no race; the copy as a whole is not atomic, as the contract says. Anything else goes through
 * rt_cpu_read_unaligned: such bytes carry no single-copy guarantee beyond the byte. One aligned
 * word, the most common READ of the protocols, is tested for first. Aligned multi-word copies
 * load the last word first. Every READ but one aligned word goes out of line, here, so that
 * the word stays small where it is inlined (rt_cpu_read, below).
 */
static __attribute__((noinline, unused)) void rt_cpu_read_long(void *dst, const void *pool,
							       uint32_t len)
{
	const uint64_t *s = pool;

	if (!len) /* the word loop below would start at word len / 8 - 1 */
		return;
	if (((uintptr_t)pool | len) & 7) {
		rt_cpu_read_unaligned(dst, pool, len);
		return;
	}
	/* Ordered copy: the last word first, with acquire, then the others (see rt_cpu_write). */
	uint32_t last = len / 8 - 1;
	uint64_t top = __atomic_load_n(&s[last], __ATOMIC_ACQUIRE);

	if (!((uintptr_t)dst & 7)) {
		uint64_t *d = dst;

		for (uint32_t i = 0; i < last; i++)
			d[i] = __atomic_load_n(&s[i], __ATOMIC_RELAXED);
		d[last] = top;
		return;
	}
	for (uint32_t i = 0; i < last; i++) {
		uint64_t v = __atomic_load_n(&s[i], __ATOMIC_RELAXED);

		memcpy((char *)dst + 8 * (size_t)i, &v, 8);
	}
	memcpy((char *)dst + 8 * (size_t)last, &top, 8);
}

static inline __attribute__((always_inline)) void rt_cpu_read(void *dst, const void *pool,
							      uint32_t len)
{
	if (len == 8 && !((uintptr_t)pool & 7)) {
		uint64_t v = __atomic_load_n((const uint64_t *)pool, __ATOMIC_RELAXED);

		memcpy(dst, &v, 8);
		return;
	}
	rt_cpu_read_long(dst, pool, len);
}

/*
 * WRITE: local -> pool, word by word with relaxed atomic stores when the pool side allows, the
 * last word stored last with release. With rt_cpu_read loading the last word first (acquire),
 * a READ that sees a WRITE's last word sees every earlier word of it too: OOCC keeps its lock
 * word at the highest address, so a READ never returns old data under the new, cleared lock
 * (docs/oocc.md, "Torn reads"). Word copies in any order remain allowed by the contract.
 * Every WRITE but one aligned word goes out of line, here, as READs do.
 */
static __attribute__((noinline, unused)) void rt_cpu_write_long(void *pool, const void *src,
							       uint32_t len)
{
	uint64_t *d = pool;
	uint64_t v;

	if (!len) /* the word loop below would end at word len / 8 - 1 */
		return;
	if (((uintptr_t)pool | len) & 7) {
		rt_cpu_write_unaligned(pool, src, len);
		return;
	}
	for (uint32_t i = 0; i + 1 < len / 8; i++) {
		memcpy(&v, (const char *)src + 8 * (size_t)i, 8);
		__atomic_store_n(&d[i], v, __ATOMIC_RELAXED);
	}
	memcpy(&v, (const char *)src + len - 8, 8);
	__atomic_store_n(&d[len / 8 - 1], v, __ATOMIC_RELEASE);
}

static inline __attribute__((always_inline)) void rt_cpu_write(void *pool, const void *src,
							       uint32_t len)
{
	if (len == 8 && !((uintptr_t)pool & 7)) {
		uint64_t v;

		memcpy(&v, src, 8);
		__atomic_store_n((uint64_t *)pool, v, __ATOMIC_RELAXED);
		return;
	}
	rt_cpu_write_long(pool, src, len);
}

static inline uint64_t rt_cpu_mcas_value(uint64_t old, const struct remora_wr *wr)
{
	return (old & ~wr->swap_mask) | (wr->swap & wr->swap_mask);
}

/*
 * One atomic on an aligned word, seq_cst: protocols build cross-process locks and version
 * checks from these, and on x86 every locked instruction is a full barrier anyway.
 * masked-CAS is a compare-exchange loop on the word: still one verb, atomic against the others.
 */
static inline uint64_t rt_cpu_atomic(uint64_t *p, const struct remora_wr *wr)
{
	uint64_t old;

	switch (wr->op) {
	case REMORA_OP_CAS:
		old = wr->compare;
		__atomic_compare_exchange_n(p, &old, wr->swap, false, __ATOMIC_SEQ_CST,
					    __ATOMIC_SEQ_CST);
		return old;
	case REMORA_OP_FAA:
		return __atomic_fetch_add(p, wr->swap, __ATOMIC_SEQ_CST);
	default:
		old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
		while (!((old ^ wr->compare) & wr->compare_mask) &&
		       !__atomic_compare_exchange_n(p, &old, rt_cpu_mcas_value(old, wr), false,
						    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
			;
		return old;
	}
}

/*
 * atomics=arbiter: a multi-host CXL pool has no coherent cross-host atomics, so every atomic of
 * a node becomes a plain read-modify-write under one lock word of that node (*arbiter, in pool
 * memory). The word holds the holder's pid; a holder found dead is evicted, and its half-done
 * update may be lost, as a crashed client of a real arbiter's would be.
 */
static inline uint64_t rt_cpu_arbiter_atomic(uint64_t *arbiter, uint64_t *p,
					     const struct remora_wr *wr)
{
	uint64_t me = (uint64_t)getpid(), holder = 0, old, new;
	unsigned spins = 0;

	while (!__atomic_compare_exchange_n(arbiter, &holder, me, false, __ATOMIC_ACQUIRE,
					    __ATOMIC_RELAXED)) {
		if (++spins % 65536 == 0 && kill((pid_t)holder, 0) < 0 && errno == ESRCH)
			__atomic_compare_exchange_n(arbiter, &holder, 0, false, __ATOMIC_RELAXED,
						    __ATOMIC_RELAXED);
		rt_cpu_relax();
		holder = 0;
	}
	old = __atomic_load_n(p, __ATOMIC_RELAXED);
	if (wr->op == REMORA_OP_CAS)
		new = old == wr->compare ? wr->swap : old;
	else if (wr->op == REMORA_OP_FAA)
		new = old + wr->swap;
	else
		new = ((old ^ wr->compare) & wr->compare_mask) ? old : rt_cpu_mcas_value(old, wr);
	__atomic_store_n(p, new, __ATOMIC_RELAXED);
	__atomic_store_n(arbiter, 0, __ATOMIC_RELEASE);
	return old;
}

#endif
