/* SPDX-License-Identifier: MIT */
/*
 * `remora bench --sweep`: runs `remora bench` once per point of a grid of parameters (for
 * throughput-latency curves) and writes one JSON result per point plus a combined file that
 * `remora plot` reads. Prefix sweep_.
 */
#ifndef REMORA_APPS_SWEEP_H
#define REMORA_APPS_SWEEP_H

#include <stdbool.h>

/* True when argv (of `remora bench`) asks for a sweep (--sweep anywhere). */
bool sweep_requested(int argc, char **argv);

/*
 * Runs the sweep described by argv: "--sweep KEY=V1,V2,... [KEY=...]" plus any bench option,
 * each point in a child process running cmd_bench(). Returns the exit status: 0 every
 * point ran, 1 some point failed (the others still ran), 2 bad usage (nothing ran).
 */
int sweep_run(int argc, char **argv);

#endif
