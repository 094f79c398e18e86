/* SPDX-License-Identifier: MIT */
/*
 * `remora check`: checks a workload's invariant on the store of a running cluster. It joins the
 * cluster as a tool (attached to every memory node, not a member), opens the database and
 * runs the workload's verify (transactions that fetch for update and write nothing, so a
 * leaked lock shows too): TPC-C consistency conditions 1-4, SmallBank's total balance, TATP's
 * call_forwarding rows, the kvs record self-checks.
 * `remora bench --check` runs the same verify on the store its run leaves behind.
 *
 * The workload and its sizes come from the command line (they must be those the database was
 * loaded with), or from a `remora bench --json` result (--result FILE), which also carries the
 * run's accumulators that some invariants need (SmallBank: the committed deposits).
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <remora/cluster.h>
#include <remora/params.h>
#include <remora/tx.h>

#include "benchutil.h"
#include "cli.h"
#include "cmd.h"
#include "workload.h"

struct check_opts {
	const char *workload;
	const char *result;
	struct wl_args args;
	uint64_t seed;
	bool seed_set;
	bool partial;             /* the run's accumulators are lost (a whole-cluster crash) */
	int64_t acc[WL_MAX_ACC];
	json_t *doc;              /* the --result document (its strings back args) */
};

static int opt_seed(void *opts, const char *cmd, const char *name, const char *val)
{
	struct check_opts *o = opts;
	char err[160];

	if (bu_parse_u64(val, 0, UINT64_MAX, &o->seed, err, sizeof(err)))
		return cli_bad(cmd, name, err);
	o->seed_set = true;
	return 0;
}

static int opt_knob(void *opts, const char *cmd, int argc, char **argv, int *i)
{
	return wl_args_arg(&((struct check_opts *)opts)->args, cmd, argc, argv, i);
}

static void check_knobs_help(FILE *f)
{
	fputs("  workload options   as for remora bench (sizes must match the database)\n", f);
}

static void check_more_help(FILE *f)
{
	fprintf(f, "\nExit status: 0 the invariant holds, 1 it is violated or could not be\n"
		   "checked, 2 bad usage. `remora bench --check` runs the same check after\n"
		   "a run.\n");
}

static const struct cli_opt check_opt_table[] = {
	CLI_OPT_STR("--workload", "NAME", struct check_opts, workload,
		    "the workload the database was loaded with"),
	CLI_OPT_STR("--result", "FILE", struct check_opts, result,
		    "a `remora bench --json` result: workload, options,\n"
		    "seed and the run's accumulators (SmallBank needs\n"
		    "them); options given here override it"),
	CLI_OPT_FN("--seed", "N", opt_seed, "the seed the database was loaded with (default 1)"),
	CLI_OPT_FLAG("--partial", struct check_opts, partial,
		     "the run's accumulators are lost (its compute nodes\n"
		     "crashed): leave out what needs them (SmallBank's total,\n"
		     "TATP's rows, L3's increments), as bench --check does for\n"
		     "a killed node"),
	{ 0 },
};

static const struct cli_cmd check_cmd = {
	.name = "check",
	.usage = "usage: remora check --workload NAME [workload options] [--result FILE]\n"
		 "                    [--seed N] [--config FILE] [--<param> VALUE...]\n"
		 "Joins a running cluster as a tool and checks the workload's invariant on its\n"
		 "store (TPC-C consistency conditions 1-4, SmallBank's total balance, TATP's\n"
		 "call_forwarding rows, kvs records), fetching records for update without\n"
		 "writing them, so a leaked lock shows: run it while compute nodes are idle.\n",
	.opts = check_opt_table,
	.params = true,
	.other = opt_knob,
	.other_help = check_knobs_help,
	.more_help = check_more_help,
};

static const char *knob_name(const char *name)
{
	for (const char *const *k = wl_all_knob_names(); *k; k++)
		if (strcmp(*k, name) == 0)
			return *k;
	return NULL;
}

/* Reads a bench result: the workload, its options, the seed and the accumulators. */
static int load_result(struct check_opts *o)
{
	json_error_t jerr;
	const char *tool, *name, *key;
	const struct wl_desc *d;
	json_t *params, *acc, *v;

	o->doc = json_load_file(o->result, 0, &jerr);
	if (!o->doc) {
		fprintf(stderr, "remora check: --result %s: not a JSON file (%s, line %d)\n",
			o->result, jerr.text, jerr.line);
		return 2;
	}
	tool = json_string_value(json_object_get(o->doc, "tool"));
	name = json_string_value(json_object_get(o->doc, "workload"));
	if (!tool || strcmp(tool, "remora bench") != 0 || !name) {
		fprintf(stderr, "remora check: --result %s: not a remora bench result\n",
			o->result);
		return 2;
	}
	if (!o->workload)
		o->workload = name;
	d = wl_find(o->workload);
	params = json_object_get(o->doc, "params");
	json_object_foreach(params, key, v) {
		const char *k = knob_name(key);
		bool given = false;

		if (!k || !json_is_string(v) || !d || !wl_knob_find(d, k))
			continue;
		for (unsigned i = 0; i < o->args.n; i++)
			given |= strcmp(o->args.name[i], k) == 0;
		if (!given && wl_args_set(&o->args, k, json_string_value(v)))
			return 2;
	}
	if (!o->seed_set && json_is_integer(json_object_get(o->doc, "seed")))
		o->seed = (uint64_t)json_integer_value(json_object_get(o->doc, "seed"));
	acc = json_object_get(o->doc, "accumulators");
	for (unsigned i = 0; d && i < WL_MAX_ACC; i++) {
		json_t *a = d->acc_names[i] ? json_object_get(acc, d->acc_names[i]) : NULL;

		if (json_is_integer(a))
			o->acc[i] = (int64_t)json_integer_value(a);
	}
	return 0;
}

/* 0, 1 after printing the help, or 2 after printing a one-line error. */
static int parse_opts(int argc, char **argv, void *opts, struct cli_params *cp)
{
	struct check_opts *o = opts;
	int i = 1, rc;

	o->seed = 1;
	rc = cli_parse(&check_cmd, o, cp, argc, argv, &i);
	if (rc)
		return rc;
	if (o->result)
		return load_result(o);
	return 0;
}

static int setup_wl(struct wl *wl, const struct check_opts *o)
{
	const struct wl_desc *d;
	char names[128] = "";

	if (!o->workload) {
		fprintf(stderr, "remora check: --workload NAME or --result FILE is required\n");
		return 2;
	}
	d = wl_find(o->workload);
	if (!d) {
		for (const struct wl_desc *const *l = wl_list(); *l; l++) {
			if (names[0])
				strncat(names, ", ", sizeof(names) - strlen(names) - 1);
			strncat(names, (*l)->name, sizeof(names) - strlen(names) - 1);
		}
		fprintf(stderr, "remora check: unknown workload '%s' (known: %s)\n", o->workload,
			names);
		return 2;
	}
	if (wl_setup(wl, d, &o->args, o->seed, 1)) {
		fprintf(stderr, "remora check: %s\n", wl->err);
		wl_teardown(wl);
		return 2;
	}
	return 0;
}

/*
 * The workload's tables, as these options size them, against the catalog of the database:
 * a check with other options (another workload, another account count) would read the wrong
 * records and report a VIOLATION that is no loss at all. Tables the workload does not use
 * (an application's own) are no mismatch. 0, or 2 with one line.
 */
static int match_catalog(const struct wl *wl, const struct remora_db *db)
{
	struct remora_table_def defs[REMORA_MAX_TABLES], have;
	unsigned n = wl->desc->tables(wl, defs);

	for (unsigned i = 0; i < n; i++) {
		const struct remora_table_def *d = &defs[i];

		if (remora_db_table_def(db, d->id, &have)) {
			fprintf(stderr, "remora check: the database has no table %u ('%s' of %s): "
				"it was loaded by another workload; check with the options of the "
				"run\n", d->id, d->name, wl->desc->name);
			return 2;
		}
		if (strcmp(have.name, d->name) || have.value_size != d->value_size ||
		    have.max_records != d->max_records) {
			fprintf(stderr, "remora check: table %u is '%s' with %" PRIu64 " records of "
				"%u bytes in the database, but these options make '%s' with %" PRIu64
				" records of %u bytes (%s): check with the options of the run\n",
				d->id, have.name, have.max_records, have.value_size, d->name,
				d->max_records, d->value_size, wl->desc->name);
			return 2;
		}
	}
	return 0;
}

/* Opens the database on tp and runs the verify; prints the verdict. Returns the exit code. */
static int check_db(struct remora_transport *tp, const struct remora_params *p, struct wl *wl,
		    const int64_t *acc, unsigned n_mn)
{
	struct remora_db_cfg cfg = {
		.size = sizeof(cfg),
		.tp = tp,
		.protocol = remora_params_str(p, REMORA_P_PROTOCOL),
		.cn_id = 0,
		.n_mn = (uint16_t)n_mn,
		.replicas = (uint16_t)remora_params_int(p, REMORA_P_REPLICAS),
		.coords_per_worker = 1,
		.workers = 1,
		.isolation = remora_params_str(p, REMORA_P_ISOLATION),
	};
	struct remora_worker *w;
	struct remora_db *db;
	char msg[1024] = "";
	int rc;

	wl->si = !strcmp(cfg.isolation, "si");
	if (!wl->desc->verify) {
		printf("remora check: %s: nothing to check (the workload has no invariant)\n",
		       wl->desc->name);
		return 0;
	}
	rc = remora_db_open(&cfg, &db);
	if (rc) {
		fprintf(stderr, "remora check: opening the database: %s\n", remora_db_errmsg(NULL));
		return 1;
	}
	rc = match_catalog(wl, db);
	if (rc) {
		remora_db_close(db);
		return rc;
	}
	rc = remora_worker_create(db, 0, &w);
	if (rc) {
		fprintf(stderr, "remora check: %s\n", remora_db_errmsg(db));
		remora_db_close(db);
		return 1;
	}
	rc = wl->desc->verify(wl, w, acc, msg, sizeof(msg));
	remora_worker_destroy(w);
	remora_db_close(db);
	if (rc == 0) {
		printf("remora check: %s: ok: %s\n", wl->desc->name, msg);
		return 0;
	}
	printf("remora check: %s: %s: %s\n", wl->desc->name, rc == 1 ? "VIOLATION" : "not checked",
	       msg);
	return 1;
}

int cmd_check(int argc, char **argv)
{
	struct check_opts o = { 0 };
	struct remora_cluster *cl = NULL;
	struct cli_params cp;
	struct wl wl;
	int rc;

	rc = cli_begin(&cp, "check", parse_opts, &o, argc, argv);
	if (rc != CLI_GO) {
		json_decref(o.doc);
		return rc;
	}
	rc = setup_wl(&wl, &o);
	if (rc)
		goto fini;
	wl.acc_partial = o.partial;
	rc = cli_join(&cp, -1, &cl, "joining the cluster");
	if (rc)
		goto teardown;
	rc = check_db(remora_cluster_transport(cl), cp.p, &wl, o.acc, remora_cluster_n_mn(cl));
	remora_cluster_leave(cl);
teardown:
	wl_teardown(&wl);
fini:
	json_decref(o.doc);
	cli_params_fini(&cp);
	return rc;
}
