/* SPDX-License-Identifier: MIT */
/*
 * `remora bench --calibrate FILE... [--target N]`: reads `remora bench` results (sweeps of
 * mn_scale x coordinators, scripts/calibrate.sh runs them) and finds the memory-node scale K
 * at which a baseline reaches its paper's knee: throughput that stops growing with
 * coordinators while memory-node atomics are the bottleneck at 90% or more. Prints a sweep
 * table with utilization per point (the evidence), the knee of every K, and the K chosen: the
 * one whose knee, with atomics as the bottleneck, lies closest to N coordinators. Prefix cal_.
 */
#ifndef REMORA_APPS_CALIBRATE_H
#define REMORA_APPS_CALIBRATE_H

#include <stdbool.h>

/* True when argv (of `remora bench`) asks for a calibration (--calibrate anywhere). */
bool cal_requested(int argc, char **argv);

/* Exit status: 0 a K qualifies, 1 none does, 2 bad usage or a file that is not a result. */
int cal_run(int argc, char **argv);

#endif
