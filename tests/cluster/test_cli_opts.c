/* SPDX-License-Identifier: MIT */
/*
 * Every command's --help and its parser come from one option table (apps/cli/cli.h): every
 * option the help lists is accepted, and an unknown one is refused with one line and exit 2.
 * Each listed option is given (with a sample value when it takes one) before --help, which
 * stops the command after parsing, so nothing runs. Negative control: REMORA_MUTATE=
 * cli_help_drift makes the parser forget the last option of each table; the check catches it
 * in every command that has options of its own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cutil.h"

TestSuite(cli_opts, .timeout = 120);

static const char *const cmds[] = { "run", "mn", "cn", "info", "clean", "recover",
				    "verbs", "bench", "check", "plot", "merge", "lockbench" };

/* A value each option accepts at parse time; "1" for the others. */
static const char *sample(const char *opt)
{
	static const char *const v[][2] = {
		{ "--backend", "shm" },   { "--profile", "none" }, { "--op", "read" },
		{ "--pattern", "seq" },   { "--size", "8" },       { "--pool-size", "1M" },
		{ "--json", "out.json" }, { "--out", "." },        { "--log", "mn.log" },
		{ "--cn-env", "0:X=1" },  { "--results", "r.txt" }, { "--workload", "kvs" },
		{ "--result", "r.json" }, { "--config", "c.ini" }, { "--id", "0" },
		{ "--kill", "cn1@1s" },   { "--isolation", "sr" },
		{ "--lock", "caslock" },  { "--sweep", "cs=1" },   { "--ver-bits", "16" },
	};

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		if (strcmp(opt, v[i][0]) == 0)
			return v[i][1];
	return "1";
}

/*
 * Runs `remora cmd --help`, then `remora cmd OPT [VALUE] --help` for every line "  --opt [ARG]"
 * of it; returns how many listed options were refused (the first one's error in first), and
 * the count listed in *listed.
 */
static unsigned refused_options(const char *cmd, unsigned *listed, char *first, size_t first_len)
{
	const char *help[] = { "remora", cmd, "--help", NULL };
	unsigned refused = 0;
	struct cu_proc p;
	char *line, *save = NULL;

	*listed = 0;
	cr_assert_eq(cu_run(&p, help, 20000), 0, "remora %s --help: %s", cmd, p.err);
	/* the option lines end with "--help", after which come a job's or workload's own */
	for (line = strtok_r(p.out, "\n", &save); line && strncmp(line, "  --help ", 9) != 0;
	     line = strtok_r(NULL, "\n", &save)) {
		const char *argv[6] = { "remora", cmd, NULL };
		char opt[64] = "";
		struct cu_proc q;
		size_t len;
		int n = 3;

		if (strncmp(line, "  --", 4) != 0 || sscanf(line, " %63s", opt) != 1)
			continue;
		len = strlen(opt);
		if (strspn(opt + 2, "abcdefghijklmnopqrstuvwxyz0123456789-") != len - 2)
			continue; /* "--<param>", the description of the parameter flags */
		++*listed;
		argv[2] = opt;
		/* "  --name ARG   help": one blank, then the value's name */
		if (line[2 + len] == ' ' && line[3 + len] != ' ' && line[3 + len] != '\0')
			argv[n++] = sample(opt);
		argv[n++] = "--help";
		argv[n] = NULL;
		if (cu_run(&q, argv, 20000) != 0 && !refused++)
			snprintf(first, first_len, "%s", q.err);
		cu_free(&q);
	}
	cu_free(&p);
	return refused;
}

Test(cli_opts, every_option_in_help_is_accepted)
{
	for (unsigned i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		char first[256] = "";
		unsigned listed, refused = refused_options(cmds[i], &listed, first, sizeof(first));

		cr_expect_gt(listed, 0, "remora %s --help lists no option", cmds[i]);
		cr_expect_eq(refused, 0, "remora %s refuses %u of the %u options its help lists: %s",
			     cmds[i], refused, listed, first);
	}
}

Test(cli_opts, an_unknown_option_is_one_line_and_exit_2)
{
	for (unsigned i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		const char *argv[] = { "remora", cmds[i], "--no-such-option", NULL };
		char want[160];
		struct cu_proc p;

		snprintf(want, sizeof(want),
			 "remora %s: unknown option '--no-such-option' (see remora %s --help)\n",
			 cmds[i], cmds[i]);
		cr_expect_eq(cu_run(&p, argv, 20000), 2, "remora %s", cmds[i]);
		cr_expect_str_eq(p.err, want);
		cu_free(&p);
	}
}

Test(cli_opts, negative_control_help_drift_is_caught)
{
	unsigned listed, refused;
	char first[256];

	setenv("REMORA_MUTATE", "cli_help_drift", 1);
	for (unsigned i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		if (strcmp(cmds[i], "clean") == 0)
			continue; /* no option of its own: only the parameter flags */
		refused = refused_options(cmds[i], &listed, first, sizeof(first));
		cr_expect_gt(refused, 0, "remora %s: the drift went unnoticed", cmds[i]);
	}
}
