/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_params_init(struct cli_params *cp, const char *cmd)
{
	int rc;

	memset(cp, 0, sizeof(*cp));
	cp->cmd = cmd;
	rc = remora_params_create(&cp->p);
	if (rc) {
		fprintf(stderr, "remora %s: %s\n", cmd, remora_strerror(rc));
		return 2;
	}
	return 0;
}

void cli_params_fini(struct cli_params *cp)
{
	for (int i = 0; i < cp->nflags; i++)
		free(cp->flags[i]);
	remora_params_destroy(cp->p);
	cp->p = NULL;
	cp->nflags = 0;
}

/* Remembers the flag as one "--name=value" word so children parse exactly what we parsed. */
static int keep_flag(struct cli_params *cp, char **argv, int first, int next)
{
	char *word;

	if (cp->nflags == CLI_MAX_FLAGS) {
		fprintf(stderr, "remora %s: more than %d parameter flags\n", cp->cmd,
			CLI_MAX_FLAGS);
		return 2;
	}
	if (next - first == 2) {
		size_t len = strlen(argv[first]) + strlen(argv[first + 1]) + 2;

		word = malloc(len);
		if (word)
			snprintf(word, len, "%s=%s", argv[first], argv[first + 1]);
	} else {
		word = strdup(argv[first]);
	}
	if (!word) {
		fprintf(stderr, "remora %s: out of memory\n", cp->cmd);
		return 2;
	}
	cp->flags[cp->nflags++] = word;
	return 0;
}

int cli_params_arg(struct cli_params *cp, int argc, char **argv, int *i)
{
	const char *a = argv[*i];
	int first = *i, rc;

	if (strcmp(a, "--config") == 0 || strncmp(a, "--config=", 9) == 0) {
		if (a[8] == '=') {
			cp->config = a + 9;
		} else if (*i + 1 < argc) {
			cp->config = argv[++*i];
		} else {
			fprintf(stderr, "remora %s: --config: missing file name\n", cp->cmd);
			return 2;
		}
		if (!*cp->config) {
			fprintf(stderr, "remora %s: --config: empty file name\n", cp->cmd);
			return 2;
		}
		++*i;
		return 1;
	}
	rc = remora_params_parse_flag(cp->p, argc, argv, i);
	if (rc < 0) {
		fprintf(stderr, "remora %s: %s\n", cp->cmd, remora_params_errmsg(cp->p));
		return 2;
	}
	if (rc == 0)
		return 0;
	return keep_flag(cp, argv, first, *i) ? 2 : 1;
}

int cli_params_finish(struct cli_params *cp)
{
	int rc;

	if (!cp->config) {
		const char *env = getenv("REMORA_CONFIG");

		if (env && *env)
			cp->config = env;
	}
	if (cp->config) {
		rc = remora_params_load_file(cp->p, cp->config);
		if (rc) {
			fprintf(stderr, "remora %s: %s\n", cp->cmd, remora_params_errmsg(cp->p));
			return 2;
		}
	}
	rc = remora_params_load_env(cp->p, NULL);
	if (!rc)
		rc = remora_params_check(cp->p);
	if (rc) {
		fprintf(stderr, "remora %s: %s\n", cp->cmd, remora_params_errmsg(cp->p));
		return 2;
	}
	return 0;
}

void cli_params_help(FILE *f)
{
	fputs("  --config FILE      cluster config file (INI; default: $REMORA_CONFIG)\n"
	      "  --<param> VALUE    set a cluster parameter, e.g. --pool-size 256M;\n"
	      "                     booleans: --hugepages, --no-hugepages. Precedence:\n"
	      "                     default < config file < REMORA_<PARAM> < flag.\n"
	      "                     Every parameter: remora info --params\n",
	      f);
}

int cli_unknown_option(const char *cmd, const char *arg)
{
	fprintf(stderr, "remora %s: unknown option '%s' (see remora %s --help)\n", cmd, arg, cmd);
	return 2;
}

int cli_uint(const char *cmd, const char *opt, const char *val, unsigned long lo, unsigned long hi,
	     unsigned long *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = val ? strtoul(val, &end, 10) : 0;
	if (!val || !*val || *end || errno || *val == '-' || v < lo || v > hi) {
		fprintf(stderr, "remora %s: %s: '%s' is not a number in %lu..%lu\n", cmd, opt,
			val ? val : "", lo, hi);
		return 2;
	}
	*out = v;
	return 0;
}
