/* SPDX-License-Identifier: MIT */
/*
 * Negative controls of the pmem backend, for tests only (not exported by libremora.so, not
 * settable from the environment). They act on every pmem transport of the process:
 *
 *   "skip_persist"           a DURABLE verb is applied but neither persisted nor counted:
 *                            the bug "forgot the persist point". Caught by the persist counter.
 *   "count_without_persist"  a DURABLE verb is counted but not persisted: a bug the counter
 *                            cannot see. Caught only by watching the persist calls themselves.
 *   "none"                   clears both.
 *
 * Returns 0, or -EINVAL for an unknown name. Only built with the pmem backend: callers declare
 * it weak and check for NULL.
 */
#ifndef REMORA_RPMEM_MUTATE_H
#define REMORA_RPMEM_MUTATE_H

int rpmem_mutate(const char *name);

#endif
