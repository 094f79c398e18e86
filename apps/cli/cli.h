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
#include <stddef.h>
#include <stdint.h>
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

/* ---- option tables -------------------------------------------------------------------- */

/*
 * A command's options are data: one table of {name, value kind, target field or handler,
 * help}, read by one parser (cli_parse) and by the --help text (cli_help), so the help lists
 * exactly what the parser accepts. A value is given as "--name VALUE" or "--name=VALUE".
 */
enum cli_kind {
	CLI_FLAG,    /* no value: sets a bool */
	CLI_UINT,    /* unsigned long in [lo, hi] */
	CLI_UNSIGNED, /* unsigned in [lo, hi], bu_parse_u64 */
	CLI_U64,     /* uint64_t in [lo, hi], bu_parse_u64 */
	CLI_SIZE,    /* uint64_t bytes in [lo, hi], bu_parse_size (K/M/G/T) */
	CLI_STR,     /* const char *, not empty */
	CLI_SECONDS, /* double, bu_parse_seconds (s, ms, m) */
	CLI_FN,      /* fn(opts, value): value is NULL when arg is NULL */
};

struct cli_opt {
	const char *name;  /* "--id" */
	const char *arg;   /* the value in the help ("N"); NULL: takes none */
	enum cli_kind kind;
	size_t off;        /* the target field in the command's options struct */
	uint64_t lo, hi;
	/* CLI_FN: 0, or 2 after printing "remora <cmd>: <name>: ..." (cli_bad does). */
	int (*fn)(void *opts, const char *cmd, const char *name, const char *val);
	const char *help;  /* '\n' starts a continuation line */
};

/* Table entries; the _Generic term makes a field of the wrong type a compile error. */
#define CLI_FIELD(T, f, type) (offsetof(T, f) + 0 * sizeof(_Generic(((T *)0)->f, type : 1)))
#define CLI_OPT_FLAG(n, T, f, h) { .name = n, .kind = CLI_FLAG, .off = CLI_FIELD(T, f, bool), .help = h }
#define CLI_OPT_UINT(n, a, T, f, l, u, h) \
	{ .name = n, .arg = a, .kind = CLI_UINT, .off = CLI_FIELD(T, f, unsigned long), .lo = l, \
	  .hi = u, .help = h }
#define CLI_OPT_UNSIGNED(n, a, T, f, l, u, h) \
	{ .name = n, .arg = a, .kind = CLI_UNSIGNED, .off = CLI_FIELD(T, f, unsigned), .lo = l, \
	  .hi = u, .help = h }
#define CLI_OPT_U64(n, a, T, f, l, u, h) \
	{ .name = n, .arg = a, .kind = CLI_U64, .off = CLI_FIELD(T, f, uint64_t), .lo = l, \
	  .hi = u, .help = h }
#define CLI_OPT_SIZE(n, a, T, f, l, u, h) \
	{ .name = n, .arg = a, .kind = CLI_SIZE, .off = CLI_FIELD(T, f, uint64_t), .lo = l, \
	  .hi = u, .help = h }
#define CLI_OPT_STR(n, a, T, f, h) \
	{ .name = n, .arg = a, .kind = CLI_STR, .off = CLI_FIELD(T, f, const char *), .help = h }
#define CLI_OPT_SECONDS(n, a, T, f, h) \
	{ .name = n, .arg = a, .kind = CLI_SECONDS, .off = CLI_FIELD(T, f, double), .help = h }
#define CLI_OPT_FN(n, a, handler, h) { .name = n, .arg = a, .kind = CLI_FN, .fn = handler, .help = h }

struct cli_cmd {
	const char *name;  /* "mn", for messages */
	const char *see;   /* the command whose --help describes it, if not name (a job's: run) */
	const char *usage; /* printed before the options */
	void (*usage_fn)(FILE *f); /* instead of usage, for a text that is not constant */
	void (*more_help)(FILE *f); /* printed after them, or NULL */
	const struct cli_opt *opts; /* ends with an entry whose name is NULL */
	bool params;       /* takes --config and the parameter flags (when cp is given) */
	bool operands;     /* stops at the first word that is not an option (a job, a file, -) */
	/* Options the table cannot list (a workload's knobs): 1 taken, 0 not, 2 error. */
	int (*other)(void *opts, const char *cmd, int argc, char **argv, int *i);
	void (*other_help)(FILE *f); /* their help lines, or NULL */
};

/*
 * Parses argv[*i..] into opts (and cp when the command takes parameters). Returns 0 with *i
 * on the first operand (or argc), 1 after printing the help for --help / -h, 2 after printing
 * a one-line error.
 */
int cli_parse(const struct cli_cmd *c, void *opts, struct cli_params *cp, int argc, char **argv,
	      int *i);
/* Prints the usage, the table's options, the parameter flags when taken, and --help. */
void cli_help(const struct cli_cmd *c, FILE *f);
/* Prints the lines of a table's options only (a job's arguments in remora run --help). */
void cli_options_help(const struct cli_opt *t, FILE *f);
/* What cli_start returns when the command goes on. */
#define CLI_GO (-1)
/*
 * The start every command with parameters shares: cli_params_init, then cli_parse. Returns
 * CLI_GO with *i on the first operand, or the exit status (0 after --help, 2 after an error)
 * with cp released.
 */
int cli_start(const struct cli_cmd *c, void *opts, struct cli_params *cp, int argc, char **argv,
	      int *i);
/*
 * For commands whose parsing does more than cli_parse: cli_params_init, then parse (0 go on,
 * 1 the help was printed, 2 an error was), then cli_params_finish. Returns CLI_GO, or the exit
 * status with cp released.
 */
int cli_begin(struct cli_params *cp, const char *cmd,
	      int (*parse)(int argc, char **argv, void *opts, struct cli_params *cp), void *opts,
	      int argc, char **argv);
/*
 * Joins the cluster of cp's (finished) parameters as compute node cn, -1 for a tool. Returns
 * 0, or the exit status after printing "remora <cmd>: <what>: <why>": 2 for a configuration
 * error, 1 otherwise.
 */
struct remora_cluster;
int cli_join(const struct cli_params *cp, int cn, struct remora_cluster **cl, const char *what);
/* Prints "remora <cmd>: <name>: <why>" and returns 2. */
int cli_bad(const char *cmd, const char *name, const char *why);

#endif
