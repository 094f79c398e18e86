/* SPDX-License-Identifier: MIT */
/*
 * `remora bench --compare A.json B.json [A2.json B2.json ...]`: compares the exact verb counts
 * of `--txns` runs pairwise (a bench document each, or two sweep files point by point), e.g.
 * the same workload on two backends. Per-op verbs, bytes, doorbells and transaction outcomes
 * must be equal; verbs a backend issued to emulate another (masked-CAS as READ + CAS) and
 * persist points are reported beside them, not compared. Prints one table row per pair.
 * Prefix bcmp_.
 */
#ifndef REMORA_APPS_BENCHCMP_H
#define REMORA_APPS_BENCHCMP_H

#include <stdbool.h>

/* True when argv (of `remora bench`) asks for a comparison (--compare anywhere). */
bool bcmp_requested(int argc, char **argv);

/*
 * Runs the comparison. Returns the exit status: 0 every pair equal, 1 some pair differs
 * (counts or settings), 2 bad usage or a file that is not a finished `--txns` bench result.
 */
int bcmp_run(int argc, char **argv);

#endif
