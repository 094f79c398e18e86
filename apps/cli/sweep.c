/* SPDX-License-Identifier: MIT */
/*
 * `remora bench --sweep threads=1,2 coros=1,2,4,8 [bench options] [--json FILE]`
 *
 * Runs one `remora bench` per point of the grid (every combination of the listed values, the
 * last key varying fastest), each in a child process that calls cmd_bench() with the
 * point's values as ordinary flags and its own --json file, so a point is exactly the run
 * `remora bench` would do with those flags. Keys are cluster parameters (threads, coros, cn,
 * protocol, profile, ...) or workload options (warehouses, theta, ...).
 *
 * Output: each point's summary as it finishes, one JSON per point (FILE's name plus the
 * point's values: sweep-threads1-coros2.json), the combined file FILE (default sweep.json:
 * {"tool": "remora bench --sweep", "sweep": {key: [values]}, "points": [bench results]}), and
 * a closing table of throughput, latency and abort rate per point.
 */
#include "sweep.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <remora/params.h>

#include "benchutil.h"
#include "cmd.h"
#include "workload.h"

#define SWEEP_MAX_KEYS 4
#define SWEEP_MAX_VALUES 32
#define SWEEP_MAX_POINTS 256
#define SWEEP_MAX_ARGS 128

struct sweep_key {
	char *spec;              /* the "key=v1,v2" word, owned; val[] point into it */
	char name[40];
	unsigned n;
	char *val[SWEEP_MAX_VALUES];
};

struct sweep {
	struct sweep_key key[SWEEP_MAX_KEYS];
	unsigned nkeys;
	const char *json;        /* the combined file */
	char *base[SWEEP_MAX_ARGS];
	int nbase;
};

bool sweep_requested(int argc, char **argv)
{
	bool sweep = false;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return false; /* bench prints the usage, --sweep included */
		sweep |= strcmp(argv[i], "--sweep") == 0 || strncmp(argv[i], "--sweep=", 8) == 0;
	}
	return sweep;
}

static bool known_key(const char *name)
{
	char p[40];

	for (const char *const *k = wl_all_knob_names(); *k; k++)
		if (strcmp(*k, name) == 0)
			return true;
	snprintf(p, sizeof(p), "%s", name);
	for (char *c = p; *c; c++)
		if (*c == '-')
			*c = '_';
	return remora_param_find(p) >= 0;
}

/* Checks KEY of a "KEY=V1,V2" word and cuts the word at '='. */
static int check_spec(struct sweep *s, char *spec)
{
	char *eq = strchr(spec, '=');

	if (!eq || eq == spec) {
		fprintf(stderr, "remora bench: --sweep: '%s' is not KEY=V1,V2,...\n", spec);
		return 2;
	}
	if (s->nkeys == SWEEP_MAX_KEYS) {
		fprintf(stderr, "remora bench: --sweep: at most %d keys\n", SWEEP_MAX_KEYS);
		return 2;
	}
	*eq = '\0';
	if ((size_t)(eq - spec) >= sizeof(s->key[0].name) || !known_key(spec)) {
		fprintf(stderr, "remora bench: --sweep: '%s' is neither a cluster parameter nor a "
			"workload option (see remora bench --help)\n", spec);
		return 2;
	}
	for (unsigned i = 0; i < s->nkeys; i++)
		if (strcmp(s->key[i].name, spec) == 0) {
			fprintf(stderr, "remora bench: --sweep: %s is given twice\n", spec);
			return 2;
		}
	return 0;
}

/* Splits a checked spec (its '=' already replaced by NUL) into a new key. */
static int split_spec(struct sweep *s, char *spec)
{
	struct sweep_key *k = &s->key[s->nkeys++];
	char *save = NULL;

	k->spec = spec;
	snprintf(k->name, sizeof(k->name), "%s", spec);
	for (char *v = strtok_r(spec + strlen(spec) + 1, ",", &save); v;
	     v = strtok_r(NULL, ",", &save)) {
		if (k->n == SWEEP_MAX_VALUES) {
			fprintf(stderr, "remora bench: --sweep: at most %d values per key\n",
				SWEEP_MAX_VALUES);
			return 2;
		}
		k->val[k->n++] = v;
	}
	if (!k->n) {
		fprintf(stderr, "remora bench: --sweep: %s has no values\n", k->name);
		return 2;
	}
	return 0;
}

/* One "KEY=V1,V2" word (owned: freed here on error, else by free_specs). */
static int add_spec(struct sweep *s, char *spec)
{
	int rc = check_spec(s, spec);

	if (rc) {
		free(spec);
		return rc;
	}
	return split_spec(s, spec);
}

static int parse(int argc, char **argv, struct sweep *s)
{
	bool in_sweep = false;

	s->json = "sweep.json";
	for (int i = 1; i < argc; i++) {
		char *a = argv[i];

		if (strcmp(a, "--sweep") == 0) {
			in_sweep = true;
			continue;
		}
		if (strncmp(a, "--sweep=", 8) == 0) {
			in_sweep = true;
			a += 8;
		} else if (in_sweep && strncmp(a, "--", 2) != 0) {
			/* KEY=VALUES after --sweep */
		} else {
			in_sweep = false;
			if (strcmp(a, "--json") == 0 && i + 1 < argc) {
				s->json = argv[++i];
				if (bu_check_out_path("bench", "--json", s->json))
					return 2;
				continue;
			}
			if (strncmp(a, "--json=", 7) == 0) {
				s->json = a + 7;
				if (bu_check_out_path("bench", "--json", s->json))
					return 2;
				continue;
			}
			if (s->nbase + 8 >= SWEEP_MAX_ARGS) {
				fprintf(stderr, "remora bench: too many options\n");
				return 2;
			}
			s->base[s->nbase++] = a;
			continue;
		}
		{
			char *copy = strdup(a);
			int rc = copy ? add_spec(s, copy) : 2;

			if (rc)
				return rc;
		}
	}
	if (!s->nkeys) {
		fprintf(stderr, "remora bench: --sweep needs KEY=V1,V2,... (e.g. --sweep "
			"threads=1,2 coros=1,2,4,8)\n");
		return 2;
	}
	if (!strcmp(s->json, "-")) {
		fprintf(stderr, "remora bench: --sweep writes files; --json names the combined "
			"file and cannot be '-'\n");
		return 2;
	}
	return 0;
}

static unsigned npoints(const struct sweep *s)
{
	unsigned n = 1;

	for (unsigned k = 0; k < s->nkeys; k++)
		n *= s->key[k].n;
	return n;
}

/* Value index of key k at point p (the last key varies fastest). */
static unsigned value_at(const struct sweep *s, unsigned p, unsigned k)
{
	for (unsigned j = s->nkeys; j-- > k + 1;)
		p /= s->key[j].n;
	return p % s->key[k].n;
}

/* FILE.json -> FILE-threads1-coros2.json (characters outside [A-Za-z0-9._] become '_'). */
static void point_path(const struct sweep *s, unsigned p, char *out, size_t len)
{
	size_t stem = strlen(s->json), at;

	if (stem > 5 && strcmp(s->json + stem - 5, ".json") == 0)
		stem -= 5;
	at = (size_t)snprintf(out, len, "%.*s", (int)stem, s->json);
	for (unsigned k = 0; k < s->nkeys && at < len; k++) {
		const char *v = s->key[k].val[value_at(s, p, k)];

		at += (size_t)snprintf(out + at, len - at, "-%s", s->key[k].name);
		for (; *v && at + 1 < len; v++)
			out[at++] = (char)(strchr("._", *v) || (*v >= '0' && *v <= '9') ||
						   (*v >= 'a' && *v <= 'z') ||
						   (*v >= 'A' && *v <= 'Z') ? *v : '_');
		out[at < len ? at : len - 1] = '\0';
	}
	if (at < len)
		snprintf(out + at, len - at, ".json");
}

/* Runs one point in a child; returns its exit status. */
static int run_point(const struct sweep *s, unsigned p, const char *json)
{
	static char flags[SWEEP_MAX_KEYS][512], json_flag[1100];
	char *argv[SWEEP_MAX_ARGS + SWEEP_MAX_KEYS + 4];
	int argc = 0, st;
	pid_t pid;

	argv[argc++] = "bench";
	for (int i = 0; i < s->nbase; i++)
		argv[argc++] = s->base[i];
	for (unsigned k = 0; k < s->nkeys; k++) {
		snprintf(flags[k], sizeof(flags[k]), "--%s=%s", s->key[k].name,
			 s->key[k].val[value_at(s, p, k)]);
		argv[argc++] = flags[k];
	}
	snprintf(json_flag, sizeof(json_flag), "--json=%s", json);
	argv[argc++] = json_flag;
	argv[argc] = NULL;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "remora bench: --sweep: fork: %s\n", strerror(errno));
		return 1;
	}
	if (pid == 0)
		_exit(cmd_bench(argc, argv));
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return 1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static double num(json_t *doc, const char *a, const char *b)
{
	json_t *v = json_object_get(doc, a);

	if (b)
		v = json_object_get(v, b);
	return json_number_value(v);
}

static void print_table(const struct sweep *s, json_t *points, const int *status)
{
	printf("\nremora bench --sweep: %u points\n ", npoints(s));
	for (unsigned k = 0; k < s->nkeys; k++)
		printf(" %-10s", s->key[k].name);
	printf(" %14s %10s %10s %8s\n", "committed/s", "p50 us", "p99 us", "aborts");
	for (unsigned p = 0; p < npoints(s); p++) {
		json_t *d = json_array_get(points, p);

		printf(" ");
		for (unsigned k = 0; k < s->nkeys; k++)
			printf(" %-10s", s->key[k].val[value_at(s, p, k)]);
		if (!json_is_object(d)) {
			printf(" failed (exit status %d)\n", status[p]);
			continue;
		}
		printf(" %14.0f %10.1f %10.1f %7.2f%%%s\n", num(d, "committed_per_s", NULL),
		       num(d, "latency_ns", "p50") / 1e3, num(d, "latency_ns", "p99") / 1e3,
		       100.0 * num(d, "abort_rate", NULL), status[p] ? "  (exit 1)" : "");
	}
}

static int write_combined(const struct sweep *s, json_t *points)
{
	json_t *doc = json_object(), *grid = json_object();
	int rc;

	for (unsigned k = 0; k < s->nkeys; k++) {
		json_t *vals = json_array();

		for (unsigned i = 0; i < s->key[k].n; i++)
			json_array_append_new(vals, json_string(s->key[k].val[i]));
		json_object_set_new(grid, s->key[k].name, vals);
	}
	json_object_set_new(doc, "tool", json_string("remora bench --sweep"));
	json_object_set_new(doc, "sweep", grid);
	json_object_set(doc, "points", points);
	rc = json_dump_file(doc, s->json, JSON_INDENT(2));
	json_decref(doc);
	if (rc)
		fprintf(stderr, "remora bench: --sweep: cannot write %s\n", s->json);
	return rc ? 1 : 0;
}

static void free_specs(struct sweep *s)
{
	for (unsigned k = 0; k < s->nkeys; k++)
		free(s->key[k].spec);
}

int sweep_run(int argc, char **argv)
{
	static int status[SWEEP_MAX_POINTS];
	struct sweep s = { 0 };
	json_t *points;
	int rc, failed = 0;
	unsigned n;

	rc = parse(argc, argv, &s);
	if (rc)
		goto free_specs;
	n = npoints(&s);
	if (n > SWEEP_MAX_POINTS) {
		fprintf(stderr, "remora bench: --sweep: %u points, at most %d\n", n,
			SWEEP_MAX_POINTS);
		rc = 2;
		goto free_specs;
	}
	points = json_array();
	for (unsigned p = 0; p < n; p++) {
		char path[1024];
		json_error_t jerr;
		json_t *doc;

		point_path(&s, p, path, sizeof(path));
		printf("remora bench --sweep: point %u of %u:", p + 1, n);
		for (unsigned k = 0; k < s.nkeys; k++)
			printf(" %s=%s", s.key[k].name, s.key[k].val[value_at(&s, p, k)]);
		printf(" -> %s\n", path);
		unlink(path);
		status[p] = run_point(&s, p, path);
		if (status[p] == 2 && p == 0) {
			/* a usage error is the same for every point: stop before running more */
			json_decref(points);
			rc = 2;
			goto free_specs;
		}
		doc = json_load_file(path, 0, &jerr);
		json_array_append_new(points, doc ? doc : json_null());
		failed |= status[p] != 0;
	}
	print_table(&s, points, status);
	rc = write_combined(&s, points);
	if (!rc)
		printf("remora bench --sweep: combined results in %s\n", s.json);
	json_decref(points);
	if (!rc && failed)
		rc = 1;
free_specs:
	free_specs(&s);
	return rc;
}
