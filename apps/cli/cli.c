/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <remora/cluster.h>
#include <remora/error.h>

#include "config/env.h"
#include "mutate/mutate.h"
#include "benchutil.h"
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

/*
 * A protocol's own parameters (lotus_*, crest_*) reach the library through no
 * remora_db_cfg field: it reads them from REMORA_<PARAM>. A value the command line or the
 * config file gave is put there, so it reaches the library in this process and in every
 * process it starts, as the precedence rule says. Only those: others the library also reads
 * from the environment mean something else there (REMORA_CN: the compute nodes LOTUS spreads
 * its locks over, 1 for a tool), or reach it through a field.
 */
static void export_protocol_params(const struct remora_params *p)
{
	for (unsigned id = 0; id < REMORA_P__COUNT; id++) {
		enum remora_param_src src = remora_params_src(p, (enum remora_param_id)id);
		const char *name = remora_param_def((enum remora_param_id)id)->name;
		char var[96];

		if (src != REMORA_SRC_FLAG && src != REMORA_SRC_FILE)
			continue;
		if (strncmp(name, "lotus_", 6) && strncmp(name, "crest_", 6))
			continue;
		if (cfg_param_env_var((enum remora_param_id)id, var, sizeof(var)))
			setenv(var, remora_params_str(p, (enum remora_param_id)id), 1);
	}
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
	export_protocol_params(cp->p);
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

/* ---- option tables -------------------------------------------------------------------- */

int cli_bad(const char *cmd, const char *name, const char *why)
{
	fprintf(stderr, "remora %s: %s: %s\n", cmd, name, why);
	return 2;
}

/*
 * Negative control of tests/cluster/test_cli_opts.c: REMORA_MUTATE=cli_help_drift makes the
 * parser forget the last option of every table while --help still lists it, the drift that
 * separate help texts and parsers allowed.
 */
static bool help_drift(void)
{
	uint64_t mask = 0;
	char err[8];

	return mut_from_env(MUT_CLI, &mask, err, sizeof(err)) == 0 &&
	       mut_on(mask, MUT_CLI_HELP_DRIFT);
}

/* The entry named by a ("--id" or "--id=..."), or NULL; *val is the text after '='. */
static const struct cli_opt *find_opt(const struct cli_opt *t, const char *a, const char **val)
{
	for (; t->name && !(help_drift() && !t[1].name); t++) {
		size_t len = strlen(t->name);

		if (strncmp(a, t->name, len) == 0 && (a[len] == '\0' || a[len] == '=')) {
			*val = a[len] == '=' ? a + len + 1 : NULL;
			return t;
		}
	}
	return NULL;
}

static int store(const char *cmd, const struct cli_opt *t, void *opts, const char *val)
{
	char *field = (char *)opts + t->off, err[160];
	uint64_t v;

	switch (t->kind) {
	case CLI_FLAG:
		*(bool *)field = true;
		return 0;
	case CLI_UINT:
		return cli_uint(cmd, t->name, val, (unsigned long)t->lo, (unsigned long)t->hi,
				(unsigned long *)field);
	case CLI_UNSIGNED:
	case CLI_U64:
		if (bu_parse_u64(val, t->lo, t->hi, &v, err, sizeof(err)))
			return cli_bad(cmd, t->name, err);
		if (t->kind == CLI_U64)
			*(uint64_t *)field = v;
		else
			*(unsigned *)field = (unsigned)v;
		return 0;
	case CLI_SIZE:
		if (bu_parse_size(val, &v, err, sizeof(err)))
			return cli_bad(cmd, t->name, err);
		if (v < t->lo || v > t->hi) {
			snprintf(err, sizeof(err), "'%s' is outside %" PRIu64 "..%" PRIu64 " bytes",
				 val, t->lo, t->hi);
			return cli_bad(cmd, t->name, err);
		}
		*(uint64_t *)field = v;
		return 0;
	case CLI_STR:
		if (!*val)
			return cli_bad(cmd, t->name, "empty value");
		*(const char **)field = val;
		return 0;
	case CLI_SECONDS:
		if (bu_parse_seconds(val, (double *)field, err, sizeof(err)))
			return cli_bad(cmd, t->name, err);
		return 0;
	case CLI_FN:
		return t->fn(opts, cmd, t->name, val);
	}
	return 2;
}

/* Takes the option at argv[*i] and its value; 0, or 2 after printing. */
static int take(const struct cli_cmd *c, const struct cli_opt *t, void *opts, int argc,
		char **argv, int *i, const char *val)
{
	if (!t->arg && val)
		return cli_bad(c->name, t->name, "takes no value");
	if (t->arg && !val) {
		if (*i + 1 >= argc)
			return cli_bad(c->name, t->name, "missing value");
		val = argv[++*i];
	}
	++*i;
	return store(c->name, t, opts, val);
}

int cli_parse(const struct cli_cmd *c, void *opts, struct cli_params *cp, int argc, char **argv,
	      int *i)
{
	while (*i < argc) {
		const char *a = argv[*i], *val;
		const struct cli_opt *t;
		int rc;

		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			cli_help(c, stdout);
			return 1;
		}
		t = find_opt(c->opts, a, &val);
		if (t) {
			if (take(c, t, opts, argc, argv, i, val))
				return 2;
			continue;
		}
		rc = c->params && cp ? cli_params_arg(cp, argc, argv, i) : 0;
		if (!rc && c->other)
			rc = c->other(opts, c->name, argc, argv, i);
		if (rc == 2)
			return 2;
		if (rc == 1)
			continue;
		if (c->operands && (a[0] != '-' || a[1] == '\0'))
			return 0;
		fprintf(stderr, "remora %s: %s '%s' (see remora %s --help)\n", c->name,
			a[0] == '-' && a[1] ? "unknown option" : "unexpected argument", a,
			c->see ? c->see : c->name);
		return 2;
	}
	return 0;
}

/* "  --name ARG         help", continuation lines under the help column. */
static void help_line(FILE *f, const struct cli_opt *t)
{
	char left[64];
	const char *h = t->help;

	snprintf(left, sizeof(left), "%s%s%s", t->name, t->arg ? " " : "", t->arg ? t->arg : "");
	if (strlen(left) > 18)
		fprintf(f, "  %s\n%21s", left, "");
	else
		fprintf(f, "  %-18s ", left);
	for (;;) {
		size_t len = strcspn(h, "\n");

		fprintf(f, "%.*s\n", (int)len, h);
		if (!h[len])
			break;
		h += len + 1;
		fprintf(f, "%21s", "");
	}
}

void cli_options_help(const struct cli_opt *t, FILE *f)
{
	for (; t->name; t++)
		help_line(f, t);
}

void cli_help(const struct cli_cmd *c, FILE *f)
{
	if (c->usage_fn)
		c->usage_fn(f);
	else
		fputs(c->usage, f);
	fputc('\n', f);
	cli_options_help(c->opts, f);
	if (c->other_help)
		c->other_help(f);
	if (c->params)
		cli_params_help(f);
	fputs("  --help             this text\n", f);
	if (c->more_help)
		c->more_help(f);
}

int cli_start(const struct cli_cmd *c, void *opts, struct cli_params *cp, int argc, char **argv,
	      int *i)
{
	int rc;

	if (cli_params_init(cp, c->name))
		return 2;
	rc = cli_parse(c, opts, cp, argc, argv, i);
	if (!rc)
		return CLI_GO;
	cli_params_fini(cp);
	return rc == 1 ? 0 : 2;
}

int cli_begin(struct cli_params *cp, const char *cmd,
	      int (*parse)(int argc, char **argv, void *opts, struct cli_params *cp), void *opts,
	      int argc, char **argv)
{
	int rc;

	if (cli_params_init(cp, cmd))
		return 2;
	rc = parse(argc, argv, opts, cp);
	if (!rc && !cli_params_finish(cp))
		return CLI_GO;
	cli_params_fini(cp);
	return rc == 1 ? 0 : 2;
}

int cli_join(const struct cli_params *cp, int cn, struct remora_cluster **cl, const char *what)
{
	char err[400];
	int rc = remora_cluster_join(cp->p, cn, cl, err, sizeof(err));

	if (!rc)
		return 0;
	fprintf(stderr, "remora %s: %s: %s\n", cp->cmd, what, err);
	return rc == -REMORA_ECONFIG ? 2 : 1;
}
