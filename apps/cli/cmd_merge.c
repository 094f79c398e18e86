/* SPDX-License-Identifier: MIT */
/*
 * `remora merge`: the last step of a run whose compute nodes were started by hand, maybe on
 * other hosts (docs/cluster.md, "Across hosts"). It reads the result lines the `remora cn`
 * processes printed, joins the cluster as a tool, and hands the lines to the job's merge,
 * which prints the summary, checks what the job checks (`bench ... --check`: the workload's
 * invariant on the store the run left) and decides the exit status, as under `remora run`.
 *
 * The files are checked before anything else, strictly: every line must be one JSON object,
 * of this job when it names one ("job"), for a compute node of this cluster ("cn"; without
 * it, the line's position over all files), at most one per compute node. A compute node
 * without a line is passed to merge as one that sent none, so the job reports it (and bench's
 * --check then lacks its share of the accumulators).
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmd.h"
#include "job.h"

#define MERGE_MAX_FILES 64
#define MERGE_LINE_MAX (1u << 20) /* as remora run accepts from a compute node */

struct merge_line {
	char *json;       /* NULL: no line for this compute node */
	long pid;
	const char *file; /* where it came from, for messages */
	unsigned line;
};

struct merge {
	const struct job *job;
	unsigned n_cn;
	unsigned next_pos;                /* cn of the next line that names none */
	struct merge_line res[REMORA_MAX_CN];
	const char *files[MERGE_MAX_FILES];
	unsigned nfiles;
};

static void merge_usage(FILE *f)
{
	char names[256];

	job_names(names, sizeof(names));
	fprintf(f,
		"usage: remora merge --results FILE[,FILE...] [--config FILE]\n"
		"                    [--<param> VALUE...] <job> [job args]\n"
		"Merges the result lines of compute nodes started by hand (remora cn ... > FILE,\n"
		"one file per node or several lines per file): joins the cluster as a tool and\n"
		"runs the job's merge, which prints the summary and checks what the job checks\n"
		"(bench --check: the workload's invariant on the store the run left), exactly as\n"
		"remora run does. Give the cluster parameters and job arguments the compute nodes\n"
		"were given. Jobs: %s.\n",
		names);
}

static void merge_exit_help(FILE *f)
{
	fprintf(f, "\nExit status: the job's merge (0: every node reported and the job's check\n"
		   "passed, 1 otherwise); 2 for bad usage or a malformed results file.\n");
}

/* Splits "a,b" into m->files (the strings stay in argv, commas become NULs). */
static int add_files(struct merge *m, char *list)
{
	char *save = NULL;

	if (!list || !list[strspn(list, ",")]) {
		fprintf(stderr, "remora merge: --results: missing file name(s)\n");
		return 2;
	}
	for (char *f = strtok_r(list, ",", &save); f; f = strtok_r(NULL, ",", &save)) {
		if (m->nfiles == MERGE_MAX_FILES) {
			fprintf(stderr, "remora merge: --results: more than %d files\n",
				MERGE_MAX_FILES);
			return 2;
		}
		m->files[m->nfiles++] = f;
	}
	return 0;
}

/* Checks one line (NUL-terminated, no newline) and files it under its compute node. */
static int take_line(struct merge *m, const char *file, unsigned lineno, char *line)
{
	json_error_t jerr;
	json_t *root = json_loads(line, JSON_REJECT_DUPLICATES, &jerr), *job, *cn, *pid;
	struct merge_line *slot;
	long long id;
	int rc = 2;

	if (!json_is_object(root)) {
		fprintf(stderr, "remora merge: %s:%u: not a result line (one JSON object): %s\n",
			file, lineno, root ? "not an object" : jerr.text);
		goto free_root;
	}
	job = json_object_get(root, "job");
	if (job && (!json_is_string(job) || strcmp(json_string_value(job), m->job->name))) {
		fprintf(stderr, "remora merge: %s:%u: a result of job '%s', not '%s'\n", file,
			lineno, json_is_string(job) ? json_string_value(job) : "?", m->job->name);
		goto free_root;
	}
	cn = json_object_get(root, "cn");
	if (cn && !json_is_integer(cn)) {
		fprintf(stderr, "remora merge: %s:%u: \"cn\" is not a number\n", file, lineno);
		goto free_root;
	}
	id = cn ? json_integer_value(cn) : (long long)m->next_pos;
	m->next_pos++;
	if (id < 0 || id >= (long long)m->n_cn) {
		fprintf(stderr, "remora merge: %s:%u: compute node %lld is not in this cluster "
			"(cn = %u)\n", file, lineno, id, m->n_cn);
		goto free_root;
	}
	slot = &m->res[id];
	if (slot->json) {
		fprintf(stderr, "remora merge: %s:%u: a second result of compute node %lld (the "
			"first: %s:%u)\n", file, lineno, id, slot->file, slot->line);
		goto free_root;
	}
	slot->json = strdup(line);
	if (!slot->json) {
		fprintf(stderr, "remora merge: out of memory\n");
		rc = 1;
		goto free_root;
	}
	pid = json_object_get(root, "pid");
	slot->pid = json_is_integer(pid) ? (long)json_integer_value(pid) : 0;
	slot->file = file;
	slot->line = lineno;
	rc = 0;
free_root:
	json_decref(root);
	return rc;
}

static int read_file(struct merge *m, const char *file)
{
	FILE *f = fopen(file, "r");
	unsigned lineno = 0;
	size_t cap = 0;
	char *line = NULL;
	ssize_t n;
	int rc = 0;

	if (!f) {
		fprintf(stderr, "remora merge: %s: %s\n", file, strerror(errno));
		return 2;
	}
	while (!rc && (n = getline(&line, &cap, f)) >= 0) {
		lineno++;
		if (n > 0 && line[n - 1] == '\n')
			line[--n] = '\0';
		if ((size_t)n > MERGE_LINE_MAX) {
			fprintf(stderr, "remora merge: %s:%u: line longer than %u bytes\n", file,
				lineno, MERGE_LINE_MAX);
			rc = 2;
		} else if (strlen(line) != (size_t)n) {
			fprintf(stderr, "remora merge: %s:%u: a NUL byte in the line\n", file,
				lineno);
			rc = 2;
		} else {
			rc = take_line(m, file, lineno, line);
		}
	}
	if (!rc && ferror(f)) {
		fprintf(stderr, "remora merge: %s: %s\n", file, strerror(errno));
		rc = 2;
	}
	if (!rc && lineno == 0) {
		fprintf(stderr, "remora merge: %s: empty; expected the result line(s) remora cn "
			"printed\n", file);
		rc = 2;
	}
	free(line);
	fclose(f);
	return rc;
}

/* Joins as a tool and runs the job's merge on every compute node's line (or its absence). */
static int run_merge(struct merge *m, const struct cli_params *cp, int argc, char **argv)
{
	struct job_result res[REMORA_MAX_CN];
	struct job_host host;
	struct remora_cluster *tool;
	uint64_t missing = 0;
	char err[320];
	int rc;

	for (unsigned i = 0; i < m->n_cn; i++) {
		res[i] = (struct job_result){
			.cn = i,
			.pid = (pid_t)m->res[i].pid,
			.json = m->res[i].json,
			.ok = m->res[i].json != NULL,
		};
		missing |= (uint64_t)!m->res[i].json << i;
	}
	if (missing) {
		job_id_list(missing, err, sizeof(err));
		fprintf(stderr, "remora merge: no result line of compute node(s) %s (cn = %u)\n",
			err, m->n_cn);
	}
	rc = cli_join(cp, -1, &tool, "join as a tool");
	if (rc)
		return rc;
	host = (struct job_host){ .cluster = tool,
					 .tp = remora_cluster_transport(tool),
					 .params = cp->p,
					 .n_cn = m->n_cn,
					 .n_mn = remora_cluster_n_mn(tool) };
	fflush(stderr);
	rc = m->job->merge ? m->job->merge(&host, res, m->n_cn, argc, argv) : (missing ? 1 : 0);
	fflush(stdout);
	remora_cluster_leave(tool);
	return rc;
}

/* The value is a word of argv, which add_files may cut at its commas. */
static int merge_results(void *opts, const char *cmd, const char *name, const char *val)
{
	(void)cmd;
	(void)name;
	return add_files(opts, (char *)val);
}

static const struct cli_opt merge_opt_table[] = {
	CLI_OPT_FN("--results", "F,...", merge_results,
		   "files with the lines remora cn printed (repeatable); a\n"
		   "line's \"cn\" names its node, else its position does; a\n"
		   "node without a line counts as one that sent none"),
	{ 0 },
};

static const struct cli_cmd merge_cmd = {
	.name = "merge",
	.usage_fn = merge_usage,
	.opts = merge_opt_table,
	.params = true,
	.operands = true,
	.more_help = merge_exit_help,
};

static int merge_parse(int argc, char **argv, struct cli_params *cp, struct merge *m, int *i)
{
	int rc = cli_parse(&merge_cmd, m, cp, argc, argv, i);

	if (rc)
		return rc;
	if (!m->nfiles || *i == argc) {
		fprintf(stderr, "remora merge: %s (see remora merge --help)\n",
			!m->nfiles ? "--results FILE[,FILE...] is required" : "no job given");
		return 2;
	}
	return 0;
}

int cmd_merge(int argc, char **argv)
{
	struct cli_params cp;
	struct merge *m;
	int i = 1, rc;

	m = calloc(1, sizeof(*m));
	if (!m || cli_params_init(&cp, "merge")) {
		free(m);
		return 2;
	}
	rc = merge_parse(argc, argv, &cp, m, &i);
	if (rc) {
		rc = rc == 1 ? 0 : 2;
		goto fini;
	}
	rc = 2;
	m->job = job_find(argv[i]);
	if (!m->job) {
		char names[256];

		job_names(names, sizeof(names));
		fprintf(stderr, "remora merge: unknown job '%s' (jobs: %s)\n", argv[i], names);
		goto fini;
	}
	if (cli_params_finish(&cp) || (m->job->check && m->job->check(argc - i, argv + i)))
		goto fini;
	m->n_cn = remora_params_cn_count(cp.p);
	for (unsigned f = 0; f < m->nfiles; f++)
		if (read_file(m, m->files[f]))
			goto fini;
	rc = run_merge(m, &cp, argc - i, argv + i);
fini:
	for (unsigned k = 0; k < REMORA_MAX_CN; k++)
		free(m->res[k].json);
	free(m);
	cli_params_fini(&cp);
	return rc;
}
