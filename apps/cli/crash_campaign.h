/* SPDX-License-Identifier: MIT */
/*
 * `remora bench --crash-campaign N`: N short cluster jobs (remora bench with --check), each
 * with one compute node, drawn at random, killed at a random moment: at a random commit-path
 * point (REMORA_DIE_AT), at a random verb (REMORA_DIE_AT_VERB) or by SIGKILL at a random time.
 * The survivors recover it online, then the job's check runs. One table of counts at the end.
 * Prefix cc_.
 */
#ifndef REMORA_APPS_CRASH_CAMPAIGN_H
#define REMORA_APPS_CRASH_CAMPAIGN_H

#include <stdbool.h>

/* True when argv (of `remora bench`) asks for a crash campaign (--crash-campaign anywhere). */
bool cc_requested(int argc, char **argv);

/*
 * Runs the campaign argv describes: --crash-campaign N, --crash-recover online, --seed S,
 * and any bench option, handed to every iteration's `remora bench`. Returns the exit status:
 * 0 no violation and no hang, 1 some (the failing iteration's log is kept and the command
 * that reproduces it printed), 2 bad usage (nothing ran).
 */
int cc_run(int argc, char **argv);

#endif
