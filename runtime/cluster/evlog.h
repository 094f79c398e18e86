/* SPDX-License-Identifier: MIT */
/*
 * One line per membership event of a node ("remora mn 2: ...", "remora cn 0: ..."): a memory
 * node's joins, deaths and signals, a compute node's fences and online recoveries. Never on
 * the data path. The line is flushed at once: an operator reads it while the node runs.
 */
#ifndef REMORA_CLUSTER_EVLOG_H
#define REMORA_CLUSTER_EVLOG_H

#include <stdio.h>

/* Writes "remora <role> <id>: <fmt...>" and a newline to out (cut at 384 bytes). */
void evlog(FILE *out, const char *role, unsigned id, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
