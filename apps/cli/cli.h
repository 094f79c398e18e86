/* SPDX-License-Identifier: MIT */
/*
 * Command-line helpers shared by the remora commands that take cluster parameters
 * (mn, cn, run, info, clean, bench): --config FILE ($REMORA_CONFIG), parameter flags
 * --<name>[=value], then the config file and REMORA_* variables, then the cross-checks.
 * Errors are printed as one line "remora <cmd>: ..." and map to exit code 2.
 */
#ifndef REMORA_APPS_CLI_H
#define REMORA_APPS_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include <remora/params.h>

#define CLI_MAX_FLAGS 128

struct cli_params {
	const char *cmd;           /* "run", for messages */
	struct remora_params *p;
	const char *config;        /* --config, else $REMORA_CONFIG, else NULL */
	int nflags;
	char *flags[CLI_MAX_FLAGS]; /* parameter flags as written ("--mn=2"), for child processes */
};

/* Starts with every parameter at its default. Returns 0, or 2 after printing the error. */
int cli_params_init(struct cli_params *cp, const char *cmd);
void cli_params_fini(struct cli_params *cp);
/*
 * Consumes argv[*i] (and its value) when it is --config or a parameter flag: returns 1 and
 * advances *i; returns 0 when argv[*i] is something else; returns 2 after printing an error.
 */
int cli_params_arg(struct cli_params *cp, int argc, char **argv, int *i);
/* Reads the config file and the environment, then checks. Returns 0, or 2 after printing. */
int cli_params_finish(struct cli_params *cp);
/* Prints the help lines about --config and parameter flags. */
void cli_params_help(FILE *f);
/* Prints "remora <cmd>: unknown option 'x' (see remora <cmd> --help)" and returns 2. */
int cli_unknown_option(const char *cmd, const char *arg);
/* Parses an unsigned decimal in [lo, hi] given to option opt; 0, or 2 after printing. */
int cli_uint(const char *cmd, const char *opt, const char *val, unsigned long lo, unsigned long hi,
	     unsigned long *out);

#endif
