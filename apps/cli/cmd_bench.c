/* SPDX-License-Identifier: MIT */
/*
 * `remora bench`: runs a workload (apps/bench/) under any protocol, backend and cost
 * profile, on a whole single-host cluster started by the run machinery (job.h): memory-node
 * processes, then, in this process, the `bench` job's setup (format the pools, load the
 * records), then --cn compute-node processes that each run --threads x --coros coordinators
 * for a warm-up and a measured duration (or exactly --txns transactions each) and send one
 * result line, and finally the merge here:
 * one summary table on stdout, optionally a JSON file (--json), and optionally the workload's
 * invariant check (--check) on the store the run left behind.
 *
 * Every field of the output is described in docs/bench.md.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <remora/params.h>
#include <remora/tx.h>

#include "bench_timeline.h"
#include "benchcmp.h"
#include "calibrate.h"
#include "benchutil.h"
#include "cli.h"
#include "cmd.h"
#include "job.h"
#include "crash_campaign.h"
#include "sweep.h"
#include "runner.h"
#include "workload.h"

#define BENCH_MAX_ARGS 96

struct bench_opts {
	const char *workload;
	struct wl_args args;
	double duration, warmup;
	bool duration_set, warmup_set;
	uint64_t txns; /* 0: timed run; N: N transactions per coordinator, no warm-up */
	const char *json;
	uint64_t seed;
	bool check;
	const char *kill[2]; /* --kill mnI@T, cnI@T: handed to remora run, not to the compute nodes */
	const char *cn_env; /* --cn-env ID:NAME=VALUE: the same (the crash campaign's deaths) */
	bool timeline;    /* per-ms commit timeline (on with --kill; docs/recovery.md) */
};

static const char *const abort_keys[REMORA_ABORT__COUNT] = {
	"other", "locked", "validation", "user", "not_found",
};

static const char *const op_keys[REMORA_OP__COUNT] = { "read", "write", "cas", "faa", "mcas" };

/* ---- options ---------------------------------------------------------------------------- */

static int opt_seconds(const char *cmd, const char *name, const char *val, double *d,
		       bool *set)
{
	char err[160];

	if (bu_parse_seconds(val, d, err, sizeof(err)))
		return cli_bad(cmd, name, err);
	*set = true;
	return 0;
}

static int opt_duration(void *opts, const char *cmd, const char *name, const char *val)
{
	struct bench_opts *o = opts;

	return opt_seconds(cmd, name, val, &o->duration, &o->duration_set);
}

static int opt_warmup(void *opts, const char *cmd, const char *name, const char *val)
{
	struct bench_opts *o = opts;

	return opt_seconds(cmd, name, val, &o->warmup, &o->warmup_set);
}

static int opt_json(void *opts, const char *cmd, const char *name, const char *val)
{
	((struct bench_opts *)opts)->json = val;
	return bu_check_out_path(cmd, name, val) ? 2 : 0;
}

/* --kill at most twice (a memory node and compute nodes); run_parse_kill checks the kinds. */
static int opt_kill(void *opts, const char *cmd, const char *name, const char *val)
{
	struct bench_opts *o = opts;

	(void)name;
	if (o->kill[1]) {
		fprintf(stderr, "remora %s: --kill %s: a third --kill (one memory node and one set of "
			"compute nodes per run, e.g. --kill mn1@1s --kill cn2@2s)\n", cmd, val);
		return 2;
	}
	o->kill[o->kill[0] != NULL] = val;
	return 0;
}

static int opt_no_check(void *opts, const char *cmd, const char *name, const char *val)
{
	(void)cmd;
	(void)name;
	(void)val;
	((struct bench_opts *)opts)->check = false;
	return 0;
}

static int opt_knob(void *opts, const char *cmd, int argc, char **argv, int *i)
{
	return wl_args_arg(&((struct bench_opts *)opts)->args, cmd, argc, argv, i);
}

static void bench_usage(FILE *f);
static void bench_more_help(FILE *f);

static const struct cli_opt bench_opt_table[] = {
	CLI_OPT_STR("--workload", "NAME", struct bench_opts, workload,
		    "one of the workloads below (default kvs)"),
	CLI_OPT_FN("--duration", "SECS", opt_duration,
		   "measured phase (default 5; litmus: its rounds)"),
	CLI_OPT_FN("--warmup", "SECS", opt_warmup,
		   "warm-up before it, not measured (default 1; litmus: 0)"),
	CLI_OPT_U64("--txns", "N", struct bench_opts, txns, 1, UINT64_MAX >> 16,
		    "instead of a duration: every coordinator runs exactly N\n"
		    "transactions (to commit or application abort), no\n"
		    "warm-up; with one coordinator the verb counts are exact\n"
		    "and reproducible"),
	CLI_OPT_FN("--json", "FILE", opt_json, "also write the summary as JSON ('-': stdout)"),
	CLI_OPT_FLAG("--check", struct bench_opts, check,
		     "after the run, check the workload's invariant on the store\n"
		     "(exit 1 on a violation)"),
	CLI_OPT_FN("--no-check", NULL, opt_no_check, "do not (the default)"),
	CLI_OPT_U64("--seed", "N", struct bench_opts, seed, 0, UINT64_MAX,
		    "seed of every generator (default 1)"),
	CLI_OPT_FN("--kill", "cnI@T|cnI+J@T|mnI@T", opt_kill,
		    "SIGKILL compute node I T seconds after the start (cn1@2s;\n"
		    "cn1+2@2s: two at once);\n"
		    "the survivors recover it online (pandora) and print the\n"
		    "detection and recovery times; FORD has no online recovery.\n"
		    "mnI@T kills memory node I: ford and pandora fail over to\n"
		    "the live copies (replicas 2 or more). Twice: one memory\n"
		    "node and compute nodes (--kill mn1@1s --kill cn2@2s)"),
	CLI_OPT_STR("--cn-env", "ID:NAME=VALUE", struct bench_opts, cn_env,
		    "one more environment variable for compute node ID, as\n"
		    "remora run --cn-env (REMORA_DIE_AT=txn.logged:5)"),
	CLI_OPT_FLAG("--timeline", struct bench_opts, timeline,
		     "count commits per millisecond: the JSON gets the timeline\n"
		     "(on with --kill), which remora plot draws"),
	{ 0 },
};

static const struct cli_cmd bench_cmd = {
	.name = "bench",
	.usage_fn = bench_usage,
	.opts = bench_opt_table,
	.params = true,
	.other = opt_knob,
	.more_help = bench_more_help,
};

/*
 * Parses bench options. cp (NULL inside the job) takes the cluster parameter flags. Returns
 * 0, 1 after printing the help, or 2 after printing a one-line error.
 */
static int parse_opts(int argc, char **argv, void *opts, struct cli_params *cp)
{
	struct bench_opts *o = opts;
	int i = 1, rc;

	memset(o, 0, sizeof(*o));
	o->workload = "kvs";
	o->duration = 5.0;
	o->warmup = 1.0;
	o->seed = 1;
	rc = cli_parse(&bench_cmd, o, cp, argc, argv, &i);
	if (rc)
		return rc;
	if (o->txns && (o->duration_set || o->warmup_set)) {
		fprintf(stderr, "remora bench: --txns runs a fixed number of transactions without "
			"warm-up; it cannot be combined with --%s\n",
			o->duration_set ? "duration" : "warmup");
		return 2;
	}
	return 0;
}

/* ---- the cluster's shape, from the parameters ------------------------------------------- */

struct bench_shape {
	unsigned n_mn, n_cn, threads, coros, replicas;
	unsigned mn_scale; /* cost profile's rates divided by it (1: unscaled) */
	uint64_t pool_bytes; /* per memory node: the raw-verb reference runs over as much */
	const char *protocol, *backend, *profile;
	const char *isolation; /* sr | si: passed to the database (MVCC protocols use it) */
	const char *failed_locks; /* abort | stall: passed to the database (pandora uses it) */
	bool route;            /* lotus: transactions run on their first key's home node */
	bool prefetch;         /* prefetch_yield */
	unsigned inline_yield; /* inline_yield */
	const char *iso_label; /* " SR" / " SI" for MVCC protocols, else "" (header) */
};

static void shape_from(const struct remora_params *p, struct bench_shape *s)
{
	s->n_mn = remora_params_mn_count(p);
	s->n_cn = remora_params_cn_count(p);
	s->threads = (unsigned)remora_params_int(p, REMORA_P_THREADS);
	s->coros = (unsigned)remora_params_int(p, REMORA_P_COROS);
	s->replicas = (unsigned)remora_params_int(p, REMORA_P_REPLICAS);
	s->protocol = remora_params_str(p, REMORA_P_PROTOCOL);
	s->backend = remora_params_str(p, REMORA_P_BACKEND);
	s->profile = remora_params_str(p, REMORA_P_PROFILE);
	s->mn_scale = (unsigned)remora_params_int(p, REMORA_P_MN_SCALE);
	s->isolation = remora_params_str(p, REMORA_P_ISOLATION);
	s->iso_label = strcmp(s->protocol, "motor") && strcmp(s->protocol, "lotus") ? "" :
		       strcmp(s->isolation, "si") ? " SR" : " SI";
	s->failed_locks = remora_params_str(p, REMORA_P_FAILED_LOCKS);
	s->route = remora_params_bool(p, REMORA_P_ROUTE);
	s->prefetch = remora_params_bool(p, REMORA_P_PREFETCH_YIELD);
	s->inline_yield = (unsigned)remora_params_int(p, REMORA_P_INLINE_YIELD);
	s->pool_bytes = remora_params_size(p, REMORA_P_POOL_SIZE);
}

/* Configures the workload for a cluster of this shape; 0, or 2 after printing. */
static int setup_wl(struct wl *wl, const struct bench_opts *o, const struct bench_shape *s)
{
	const struct wl_desc *d = wl_find(o->workload);
	char names[128] = "";
	int rc;

	if (!d) {
		for (const struct wl_desc *const *l = wl_list(); *l; l++) {
			if (names[0])
				strncat(names, ", ", sizeof(names) - strlen(names) - 1);
			strncat(names, (*l)->name, sizeof(names) - strlen(names) - 1);
		}
		fprintf(stderr, "remora bench: unknown workload '%s' (known: %s)\n", o->workload,
			names);
		return 2;
	}
	rc = wl_setup(wl, d, &o->args, o->seed, s->n_cn * s->threads * s->coros);
	wl->si = !strcmp(s->isolation, "si");
	if (rc) {
		fprintf(stderr, "remora bench: %s\n", wl->err);
		wl_teardown(wl);
		return 2;
	}
	return 0;
}

/*
 * Opens the database as compute node cn. lock_cns: the compute nodes lotus spreads its lock
 * shards over (REMORA_CN): all of them for a compute node of the run, 1 for the host's own
 * opens (load, check), which run alone.
 */
static int open_db(struct remora_transport *tp, const struct bench_shape *s, int cn,
		   unsigned workers, unsigned coros, unsigned lock_cns, struct remora_db **db)
{
	struct remora_db_cfg cfg = {
		.size = sizeof(cfg),
		.tp = tp,
		.protocol = s->protocol,
		.cn_id = (uint16_t)cn,
		.n_mn = (uint16_t)s->n_mn,
		.replicas = (uint16_t)s->replicas,
		.coords_per_worker = (uint16_t)coros,
		.workers = workers,
		.isolation = s->isolation,
		.failed_locks = s->failed_locks,
		.route = s->route,
	};
	char ncn[16];
	int rc;

	snprintf(ncn, sizeof(ncn), "%u", lock_cns);
	setenv("REMORA_CN", ncn, 1);
	rc = remora_db_open(&cfg, db);
	if (rc)
		fprintf(stderr, "remora bench: opening the database: %s\n", remora_db_errmsg(NULL));
	return rc;
}

/*
 * How long the setup's load took. Under remora run, setup and merge run in the same (parent)
 * process; across hosts the setup runs in `remora cn --setup`, whose result line carries it
 * to `remora merge` ("load"). rows 0: unknown.
 */
static struct {
	uint64_t rows;
	double seconds;
} bench_load;

/* ---- one compute node's result line ----------------------------------------------------- */

static void put_counts(FILE *f, const char *key, const struct wl_counts *c)
{
	fprintf(f, "\"%s\":{\"committed\":%" PRIu64 ",\"attempts\":%" PRIu64
		",\"user_aborts\":%" PRIu64 ",\"integrity_errors\":%" PRIu64
		",\"not_found\":%" PRIu64 ",\"routed\":%" PRIu64 ",\"served\":%" PRIu64
		",\"route_lost\":%" PRIu64 ",\"aborts\":[", key, c->committed, c->attempts,
		c->user_aborts, c->integrity_errors, c->not_found, c->routed, c->served,
		c->route_lost);
	for (unsigned i = 0; i < REMORA_ABORT__COUNT; i++)
		fprintf(f, "%s%" PRIu64, i ? "," : "", c->aborts[i]);
	fprintf(f, "],\"by_type\":[");
	for (unsigned i = 0; i < WL_MAX_TYPES; i++)
		fprintf(f, "%s%" PRIu64, i ? "," : "", c->committed_by_type[i]);
	fprintf(f, "]}");
}

/* Persist points (pmem: DURABLE verbs and remora_persist calls) over every memory node. */
static uint64_t persists_total(const struct remora_counters *v)
{
	uint64_t n = 0;

	for (unsigned i = 0; i < REMORA_MAX_MN; i++)
		n += v->persists[i];
	return n;
}

/*
 * Compact and lossless: histogram buckets and counters are sent sparse. "job" and "workload"
 * let a merge refuse a line of another run; "load" is there on the node that ran the setup.
 */
static char *result_line(unsigned cn, const char *workload, const struct wlr_result *r)
{
	const struct remora_counters *v = &r->verbs;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	bool first = true;

	if (!f)
		return NULL;
	fprintf(f, "{\"job\":\"bench\",\"workload\":\"%s\",\"cn\":%u,\"seconds\":%.9f,", workload,
		cn, r->seconds);
	if (bench_load.rows)
		fprintf(f, "\"load\":{\"rows\":%" PRIu64 ",\"seconds\":%.9f},", bench_load.rows,
			bench_load.seconds);
	put_counts(f, "cnt", &r->cnt);
	fputc(',', f);
	put_counts(f, "cnt_all", &r->cnt_all);
	fprintf(f, ",\"acc\":[");
	for (unsigned i = 0; i < WL_MAX_ACC; i++)
		fprintf(f, "%s%" PRId64, i ? "," : "", r->acc[i]);
	fprintf(f, "],\"hist\":{\"count\":%" PRIu64 ",\"sum\":%" PRIu64 ",\"min\":%" PRIu64
		",\"max\":%" PRIu64 ",\"b\":[", r->hist->count, r->hist->sum, r->hist->min,
		r->hist->max);
	for (unsigned i = 0; i < BU_HIST_BUCKETS; i++) {
		if (!r->hist->buckets[i])
			continue;
		fprintf(f, "%s[%u,%" PRIu64 "]", first ? "" : ",", i, r->hist->buckets[i]);
		first = false;
	}
	fprintf(f, "]},\"verbs\":[");
	first = true;
	for (unsigned n = 0; n < REMORA_MAX_MN; n++) {
		for (unsigned op = 0; op < REMORA_OP__COUNT; op++) {
			if (!v->verbs[n][op] && !v->bytes[n][op] && !v->emulated[n][op])
				continue;
			fprintf(f, "%s[%u,%u,%" PRIu64 ",%" PRIu64 ",%" PRIu64 "]",
				first ? "" : ",", n, op, v->verbs[n][op], v->bytes[n][op],
				v->emulated[n][op]);
			first = false;
		}
	}
	fprintf(f, "],\"doorbells\":%" PRIu64 ",\"persists\":%" PRIu64 ",", v->doorbells,
		persists_total(v));
	ut_line(f, &r->util);
	btl_line(f, r);
	fputc(',', f);
	cs_line(f, &r->cpu);
	fprintf(f, ",\"error\":%d,\"errmsg\":", r->error);
	{
		json_t *msg = json_string(r->errmsg);

		json_dumpf(msg, f, JSON_ENCODE_ANY);
		json_decref(msg);
	}
	fputc('}', f);
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	return buf;
}

static uint64_t ju64(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
}

static void get_u64_array(json_t *a, uint64_t *out, unsigned n)
{
	for (unsigned i = 0; i < n && i < json_array_size(a); i++)
		out[i] = (uint64_t)json_integer_value(json_array_get(a, i));
}

static int get_counts(json_t *o, struct wl_counts *c)
{
	if (!json_is_object(o))
		return -EPROTO;
	c->committed = ju64(o, "committed");
	c->attempts = ju64(o, "attempts");
	c->user_aborts = ju64(o, "user_aborts");
	c->integrity_errors = ju64(o, "integrity_errors");
	c->not_found = ju64(o, "not_found");
	c->routed = ju64(o, "routed");
	c->served = ju64(o, "served");
	c->route_lost = ju64(o, "route_lost");
	get_u64_array(json_object_get(o, "aborts"), c->aborts, REMORA_ABORT__COUNT);
	get_u64_array(json_object_get(o, "by_type"), c->committed_by_type, WL_MAX_TYPES);
	return 0;
}

/* What a result line says besides the counts: its workload, and the load if it ran setup. */
struct line_meta {
	char workload[32]; /* "" when the line names none */
	uint64_t load_rows;
	double load_seconds;
};

static void get_meta(json_t *root, struct line_meta *meta)
{
	const char *w = json_string_value(json_object_get(root, "workload"));
	json_t *load = json_object_get(root, "load");

	snprintf(meta->workload, sizeof(meta->workload), "%s", w ? w : "");
	meta->load_rows = ju64(load, "rows");
	meta->load_seconds = json_number_value(json_object_get(load, "seconds"));
}

/* Parses a result line into r (whose histogram is allocated) and meta. 0 or -EPROTO. */
static int parse_line(const char *line, struct wlr_result *r, struct line_meta *meta)
{
	json_error_t jerr;
	json_t *root = json_loads(line, 0, &jerr), *a;
	size_t i;
	json_t *e;
	int rc = -EPROTO;

	if (!json_is_object(root))
		goto free_root;
	get_meta(root, meta);
	r->seconds = json_real_value(json_object_get(root, "seconds"));
	if (get_counts(json_object_get(root, "cnt"), &r->cnt) ||
	    get_counts(json_object_get(root, "cnt_all"), &r->cnt_all))
		goto free_root;
	a = json_object_get(root, "acc");
	for (unsigned k = 0; k < WL_MAX_ACC && k < json_array_size(a); k++)
		r->acc[k] = (int64_t)json_integer_value(json_array_get(a, k));
	a = json_object_get(root, "hist");
	r->hist->count = ju64(a, "count");
	r->hist->sum = ju64(a, "sum");
	r->hist->min = ju64(a, "min");
	r->hist->max = ju64(a, "max");
	json_array_foreach(json_object_get(a, "b"), i, e) {
		uint64_t idx = (uint64_t)json_integer_value(json_array_get(e, 0));

		if (idx >= BU_HIST_BUCKETS)
			goto free_root;
		r->hist->buckets[idx] = (uint64_t)json_integer_value(json_array_get(e, 1));
	}
	json_array_foreach(json_object_get(root, "verbs"), i, e) {
		uint64_t n = (uint64_t)json_integer_value(json_array_get(e, 0));
		uint64_t op = (uint64_t)json_integer_value(json_array_get(e, 1));

		if (n >= REMORA_MAX_MN || op >= REMORA_OP__COUNT)
			goto free_root;
		r->verbs.verbs[n][op] = (uint64_t)json_integer_value(json_array_get(e, 2));
		r->verbs.bytes[n][op] = (uint64_t)json_integer_value(json_array_get(e, 3));
		r->verbs.emulated[n][op] = (uint64_t)json_integer_value(json_array_get(e, 4));
	}
	if (ut_parse(json_object_get(root, "util"), &r->util) ||
	    cs_parse(json_object_get(root, "cpu"), &r->cpu))
		goto free_root;
	r->verbs.doorbells = ju64(root, "doorbells");
	r->verbs.persists[0] = ju64(root, "persists"); /* the total, kept on node 0 */
	r->error = (int)json_integer_value(json_object_get(root, "error"));
	if (json_string_value(json_object_get(root, "errmsg")))
		snprintf(r->errmsg, sizeof(r->errmsg), "%s",
			 json_string_value(json_object_get(root, "errmsg")));
	rc = 0;
free_root:
	json_decref(root);
	return rc;
}

/*
 * What the job's setup, run and merge each start with: the job's arguments, the cluster's
 * shape and the workload configured for it. 0, or nonzero after printing.
 */
static int job_workload(const struct remora_params *p, int argc, char **argv,
			struct bench_opts *o, struct bench_shape *s, struct wl *wl)
{
	if (parse_opts(argc, argv, o, NULL))
		return 2;
	shape_from(p, s);
	return setup_wl(wl, o, s);
}

/* ---- setup: format and load ------------------------------------------------------------- */

struct load_progress {
	const char *name;
	uint64_t total;
	uint64_t last_ns;
	bool tty;
};

static void load_progress(void *arg, uint64_t done)
{
	struct load_progress *p = arg;
	uint64_t now = bu_now_ns();

	if (!p->tty || (now - p->last_ns < 100 * 1000 * 1000 && done < p->total))
		return;
	p->last_ns = now;
	fprintf(stderr, "\rremora bench: loading %s: %3u%% (%" PRIu64 " of %" PRIu64 " records)",
		p->name, (unsigned)(done * 100 / (p->total ? p->total : 1)), done, p->total);
	if (done >= p->total)
		fputc('\n', stderr);
}

static int format_pools(struct remora_transport *tp, const struct wl *wl,
			const struct bench_shape *s)
{
	struct remora_table_def defs[REMORA_MAX_TABLES];
	struct remora_cell_def cdefs[REMORA_MAX_TABLES];
	unsigned n = wl->desc->tables(wl, defs);
	struct remora_db_format_cfg cfg = {
		.size = sizeof(cfg),
		.n_mn = (uint16_t)s->n_mn,
		.replicas = (uint16_t)s->replicas,
		.protocol = s->protocol,
		.tables = defs,
		.ntables = n,
		.max_cn = (uint16_t)s->n_cn,
		.coords_per_cn = (uint16_t)(s->threads * s->coros),
		.cells = cdefs,
		.ncells = wl_cells(wl, cdefs),
	};
	int rc = remora_db_format_ex(tp, &cfg);

	if (rc == -REMORA_EFULL)
		fprintf(stderr, "remora bench: the %s tables do not fit %u memory node(s) of "
			"--pool-size each; use fewer records or a larger --pool-size (%s)\n",
			wl->desc->name, s->n_mn, remora_db_errmsg(NULL));
	else if (rc)
		fprintf(stderr, "remora bench: formatting the pools: %s\n",
			remora_db_errmsg(NULL));
	return rc;
}

static int bench_setup(struct job_host *host, int argc, char **argv)
{
	struct load_progress prog = { .tty = isatty(STDERR_FILENO) };
	struct remora_worker *w = NULL;
	struct remora_db *db = NULL;
	struct bench_shape s;
	struct bench_opts o;
	struct wl wl;
	int rc;

	if (job_workload(host->params, argc, argv, &o, &s, &wl))
		return -REMORA_ECONFIG;
	if (wl.desc->prepare) {
		rc = wl.desc->prepare(&wl);
		if (rc) {
			fprintf(stderr, "remora bench: preparing %s: %s\n", wl.desc->name,
				remora_strerror(rc));
			goto teardown;
		}
	}
	rc = format_pools(host->tp, &wl, &s);
	if (rc)
		goto teardown;
	rc = open_db(host->tp, &s, 0, 1, 1, 1, &db);
	if (rc)
		goto teardown;
	rc = remora_worker_create(db, 0, &w);
	if (rc) {
		fprintf(stderr, "remora bench: loader: %s\n", remora_db_errmsg(db));
		goto close_db;
	}
	prog.name = wl.desc->name;
	prog.total = wl.desc->load_count(&wl);
	{
		uint64_t t0 = bu_now_ns();

		rc = wl_load_range(&wl, w, 0, prog.total, load_progress, &prog);
		bench_load.rows = remora_db_load_count(db);
		bench_load.seconds = (double)(bu_now_ns() - t0) / 1e9;
	}
	if (rc) /* a verb deadline: the transport's line names the node and the verb */
		fprintf(stderr, "remora bench: loading %s: %s (%s)%s%s\n", wl.desc->name,
			remora_strerror(rc), remora_worker_errmsg(w), rc == -ETIMEDOUT ? "; " : "",
			rc == -ETIMEDOUT ? remora_transport_errmsg(host->tp) : "");
	remora_worker_destroy(w);
close_db:
	remora_db_close(db);
teardown:
	wl_teardown(&wl);
	return rc;
}

static int bench_check(int argc, char **argv)
{
	struct bench_opts o;

	return parse_opts(argc, argv, &o, NULL);
}

/* ---- run: one compute node -------------------------------------------------------------- */

static int bench_run(struct job_ctx *ctx, int argc, char **argv)
{
	struct wlr_result res;
	struct bench_shape s;
	struct remora_db *db;
	struct bench_opts o;
	struct wl wl;
	int64_t unreleased;
	char *line;
	int rc;

	if (job_workload(ctx->params, argc, argv, &o, &s, &wl))
		return -REMORA_ECONFIG;
	rc = wlr_result_init(&res);
	if (rc)
		goto teardown;
	rc = open_db(ctx->tp, &s, ctx->cn, s.threads, s.coros, s.n_cn, &db);
	if (rc)
		goto free_res;
	{
		struct wlr_cfg cfg = {
			.wl = &wl,
			.db = db,
			.cn = (unsigned)ctx->cn,
			.threads = s.threads,
			.coros = s.coros,
			.coord_base = (unsigned)ctx->cn * s.threads * s.coros,
			.warmup_s = o.warmup,
			.duration_s = o.duration,
			.txns = o.txns,
			.tp = ctx->tp,
			.timeline = o.timeline,
			.route = s.route,
			.prefetch = s.prefetch,
			.inline_yield = s.inline_yield,
		};

		wlr_run(&cfg, &res);
	}
	line = result_line((unsigned)ctx->cn, wl.desc->name, &res);
	rc = line ? job_emit(ctx, "%s", line) : -ENOMEM;
	free(line);
	if (!rc && res.error) {
		fprintf(stderr, "remora bench: cn %d: %s\n", ctx->cn, res.errmsg);
		rc = res.error; /* a failed job is a failed compute node: exit status 1 */
	}
	unreleased = remora_db_locks_unreleased(db); /* the engine's own count: docs/rdma.md */
	if (unreleased > 0)
		fprintf(stderr, "remora bench: cn %d: %lld locks won by its transactions were "
			"neither given back nor left to recovery\n", ctx->cn, (long long)unreleased);
	ctx->stranded = remora_db_stranded(db);
	remora_db_close(db);
free_res:
	wlr_result_free(&res);
teardown:
	wl_teardown(&wl);
	return rc;
}

/* ---- merge: the summary ----------------------------------------------------------------- */

struct bench_summary {
	const struct bench_opts *o;
	const struct bench_shape *s;
	const struct wl *wl;
	const struct wlr_result *r;
	const struct btl *tl; /* the survivors' per-ms commits (--timeline), or empty */
	unsigned cn_ok, cn_total;
	/* per reporting compute node (cn_ok of them): its id, commits and attempts, for the
	 * shares a fairness question needs (a node may keep a hot record from the others) */
	struct bench_cn_share {
		unsigned cn;
		uint64_t committed, attempts, aborts;
	} *cn_share;
	uint64_t op_verbs[REMORA_OP__COUNT], op_bytes[REMORA_OP__COUNT];
	uint64_t op_emulated[REMORA_OP__COUNT];
	uint64_t verbs_total, atomics;
	uint64_t aborts;
	struct ut_report util;
	struct cs_report cpu;
	bool checked;
	int check_rc;
	char check_msg[1024];
};

static double per(uint64_t x, uint64_t n)
{
	return n ? (double)x / (double)n : 0.0;
}

/* Aborted attempts, every reason. */
static uint64_t aborts_of(const struct wl_counts *c)
{
	uint64_t n = 0;

	for (unsigned i = 0; i < REMORA_ABORT__COUNT; i++)
		n += c->aborts[i];
	return n;
}

/* CPU per committed transaction against the raw cost of its verbs (apps/bench/cpusplit.h). */
static void summarize_cpu(struct bench_summary *m)
{
	uint64_t txns = m->r->cnt.committed;
	double vpt[REMORA_OP__COUNT], bpv[REMORA_OP__COUNT];

	for (unsigned op = 0; op < REMORA_OP__COUNT; op++) {
		vpt[op] = per(m->op_verbs[op], txns);
		bpv[op] = per(m->op_bytes[op], m->op_verbs[op]);
	}
	cs_report(&m->r->cpu, txns, vpt, bpv, m->s->pool_bytes, &m->cpu);
}

static void summarize(struct bench_summary *m)
{
	const struct remora_counters *v = &m->r->verbs;

	for (unsigned n = 0; n < REMORA_MAX_MN; n++) {
		for (unsigned op = 0; op < REMORA_OP__COUNT; op++) {
			m->op_verbs[op] += v->verbs[n][op];
			m->op_bytes[op] += v->bytes[n][op];
			m->op_emulated[op] += v->emulated[n][op];
		}
	}
	for (unsigned op = 0; op < REMORA_OP__COUNT; op++)
		m->verbs_total += m->op_verbs[op];
	m->atomics = m->op_verbs[REMORA_OP_CAS] + m->op_verbs[REMORA_OP_FAA] +
		     m->op_verbs[REMORA_OP_MCAS];
	m->aborts = aborts_of(&m->r->cnt);
	ut_report(&m->r->util, m->r->seconds, m->s->n_cn * m->s->threads, m->s->n_mn, m->s->n_cn,
		  &m->util);
	summarize_cpu(m);
}

static void print_params(FILE *f, const struct bench_summary *m)
{
	const struct wl *wl = m->wl;

	fprintf(f, "  parameters     ");
	for (const struct wl_knob *k = wl->desc->knobs; k->name; k++) {
		const char *v = wl_knob_str(wl, k->name);

		if (v && *v)
			fprintf(f, "%s=%s ", k->name, v);
	}
	fprintf(f, "seed=%" PRIu64 "\n", m->o->seed);
}

/* " x40" after the profile's name when its rates are scaled, "" otherwise. */
static const char *scale_label(const struct bench_shape *s)
{
	static char buf[24];

	if (s->mn_scale <= 1)
		return "";
	snprintf(buf, sizeof(buf), " x%u", s->mn_scale);
	return buf;
}

/* With several compute nodes: each one's share of the commits and its own abort rate. */
static void print_shares(FILE *f, const struct bench_summary *m)
{
	if (m->cn_ok < 2 || !m->cn_share)
		return;
	fprintf(f, "  per node      ");
	for (unsigned i = 0; i < m->cn_ok; i++) {
		const struct bench_cn_share *c = &m->cn_share[i];

		fprintf(f, " cn%u %.1f%% of commits (aborts %.1f%%)%s", c->cn,
			100.0 * per(c->committed, m->r->cnt.committed),
			100.0 * per(c->aborts, c->attempts),
			i + 1 < m->cn_ok ? "," : "");
	}
	fputc('\n', f);
}

static void print_summary(FILE *f, const struct bench_summary *m)
{
	const struct wlr_result *r = m->r;
	const struct wl_counts *c = &r->cnt;
	uint64_t txns = c->committed;
	double secs = r->seconds > 0 ? r->seconds : 1e-9;

	fprintf(f, "remora bench: %s on %s%s, backend %s, profile %s%s, %u MN, %u CN x %u threads x "
		"%u coordinators\n", m->wl->desc->name, m->s->protocol, m->s->iso_label, m->s->backend,
		m->s->profile, scale_label(m->s), m->s->n_mn, m->s->n_cn, m->s->threads,
		m->s->coros);
	print_params(f, m);
	if (m->o->txns)
		fprintf(f, "  measured       %" PRIu64 " transactions per coordinator in %.2f s, no "
			"warm-up (%u of %u compute nodes reported)\n", m->o->txns, r->seconds,
			m->cn_ok, m->cn_total);
	else
		fprintf(f, "  measured       %.2f s after %.2f s warm-up (%u of %u compute nodes "
			"reported)\n", r->seconds, m->o->warmup, m->cn_ok, m->cn_total);
	fprintf(f, "  committed      %.0f txn/s  (%" PRIu64 " transactions)\n", txns / secs, txns);
	fprintf(f, "  attempted      %.0f txn/s  (%" PRIu64 " attempts, %" PRIu64
		" aborted by the application)\n", c->attempts / secs, c->attempts, c->user_aborts);
	if (c->routed || c->served)
		fprintf(f, "  routed         %" PRIu64 " transactions handed to their home node, %"
			PRIu64 " run for another node, %" PRIu64 " unanswered\n", c->routed,
			c->served, c->route_lost);
	fprintf(f, "  abort rate     %.2f%% of attempts:", 100.0 * per(m->aborts, c->attempts));
	for (unsigned i = 1; i < REMORA_ABORT__COUNT; i++)
		fprintf(f, " %s %.2f%%", abort_keys[i], 100.0 * per(c->aborts[i], c->attempts));
	if (c->aborts[0])
		fprintf(f, " other %.2f%%", 100.0 * per(c->aborts[0], c->attempts));
	fputc('\n', f);
	print_shares(f, m);
	fprintf(f, "  latency        p50 %.1f us  p99 %.1f us  p999 %.1f us  mean %.1f us\n",
		bu_hist_quantile(r->hist, 0.5) / 1e3, bu_hist_quantile(r->hist, 0.99) / 1e3,
		bu_hist_quantile(r->hist, 0.999) / 1e3, bu_hist_mean(r->hist) / 1e3);
	fprintf(f, "  verbs/txn     ");
	for (unsigned op = 0; op < REMORA_OP__COUNT; op++)
		fprintf(f, " %s %.2f", op_keys[op], per(m->op_verbs[op], txns));
	fprintf(f, "  (total %.2f, %.2f doorbells", per(m->verbs_total, txns),
		per(r->verbs.doorbells, txns));
	if (persists_total(&r->verbs))
		fprintf(f, ", %.2f persists", per(persists_total(&r->verbs), txns));
	fprintf(f, ")\n");
	fprintf(f, "  MN atomics/txn %.2f", per(m->atomics, txns));
	for (unsigned op = 0; op < REMORA_OP__COUNT; op++)
		if (m->op_emulated[op])
			fprintf(f, "  (%.2f emulation verbs/txn for masked-CAS)",
				per(m->op_emulated[op], txns));
	fputc('\n', f);
	cs_print(f, &m->cpu);
	ut_print(f, &m->util, m->s->n_mn, m->s->n_cn);
	fprintf(f, "  by type       ");
	for (unsigned i = 0; i < m->wl->desc->ntypes; i++)
		fprintf(f, " %s %.1f%%", m->wl->desc->type_names[i],
			100.0 * per(c->committed_by_type[i], txns));
	fputc('\n', f);
	if (bench_load.rows)
		fprintf(f, "  load           %" PRIu64 " rows in %.2f s (%.2f s per million "
			"rows)\n", bench_load.rows, bench_load.seconds,
			bench_load.seconds * 1e6 / (double)bench_load.rows);
	if (r->error)
		fprintf(f, "  error          %s\n", r->errmsg);
	if (m->checked)
		fprintf(f, "  check          %s: %s\n", m->check_rc == 0 ? "ok" :
			m->check_rc == 1 ? "VIOLATION" : "not checked", m->check_msg);
}

static void json_counts(struct bu_json *j, const struct bench_summary *m)
{
	const struct wl_counts *c = &m->r->cnt;
	double secs = m->r->seconds > 0 ? m->r->seconds : 1e-9;

	bu_json_u64(j, "committed", c->committed);
	bu_json_u64(j, "attempted", c->attempts);
	bu_json_u64(j, "user_aborted", c->user_aborts);
	bu_json_f64(j, "committed_per_s", c->committed / secs);
	bu_json_f64(j, "attempted_per_s", c->attempts / secs);
	bu_json_f64(j, "abort_rate", per(m->aborts, c->attempts));
	bu_json_obj_begin(j, "aborts");
	for (unsigned i = 0; i < REMORA_ABORT__COUNT; i++)
		bu_json_u64(j, abort_keys[i], c->aborts[i]);
	bu_json_obj_end(j);
	bu_json_obj_begin(j, "abort_rate_by_reason");
	for (unsigned i = 0; i < REMORA_ABORT__COUNT; i++)
		bu_json_f64(j, abort_keys[i], per(c->aborts[i], c->attempts));
	bu_json_obj_end(j);
	bu_json_obj_begin(j, "committed_by_type");
	for (unsigned i = 0; i < m->wl->desc->ntypes; i++)
		bu_json_u64(j, m->wl->desc->type_names[i], c->committed_by_type[i]);
	bu_json_obj_end(j);
	bu_json_u64(j, "integrity_errors", c->integrity_errors);
	bu_json_u64(j, "not_found_reads", c->not_found);
	bu_json_u64(j, "routed", c->routed);
	bu_json_u64(j, "served_for_others", c->served);
	bu_json_u64(j, "route_lost", c->route_lost);
}

/* Opens object key with one member per op, v[op] / txns; the caller closes it. */
static void json_op_ratios(struct bu_json *j, const char *key, const uint64_t *v, uint64_t txns)
{
	bu_json_obj_begin(j, key);
	for (unsigned op = 0; op < REMORA_OP__COUNT; op++)
		bu_json_f64(j, op_keys[op], per(v[op], txns));
}

/* Object key with one member per op, the count v[op]. */
static void json_op_counts(struct bu_json *j, const char *key, const uint64_t *v)
{
	bu_json_obj_begin(j, key);
	for (unsigned op = 0; op < REMORA_OP__COUNT; op++)
		bu_json_u64(j, op_keys[op], v[op]);
	bu_json_obj_end(j);
}

static void json_verbs(struct bu_json *j, const struct bench_summary *m)
{
	uint64_t txns = m->r->cnt.committed;

	json_op_ratios(j, "verbs_per_txn", m->op_verbs, txns);
	bu_json_f64(j, "total", per(m->verbs_total, txns));
	bu_json_obj_end(j);
	json_op_ratios(j, "bytes_per_txn", m->op_bytes, txns);
	bu_json_obj_end(j);
	json_op_ratios(j, "emulation_verbs_per_txn", m->op_emulated, txns);
	bu_json_obj_end(j);
	bu_json_f64(j, "doorbells_per_txn", per(m->r->verbs.doorbells, txns));
	bu_json_f64(j, "persists_per_txn", per(persists_total(&m->r->verbs), txns));
	bu_json_f64(j, "mn_atomics_per_txn", per(m->atomics, txns));
	json_op_counts(j, "verbs_total", m->op_verbs);
	/* the raw counts behind the ratios, for exact comparisons (remora bench --compare) */
	json_op_counts(j, "bytes_total", m->op_bytes);
	json_op_counts(j, "emulation_verbs_total", m->op_emulated);
	bu_json_u64(j, "doorbells_total", m->r->verbs.doorbells);
	bu_json_u64(j, "persists_total", persists_total(&m->r->verbs));
}

static int write_json(const char *path, const struct bench_summary *m)
{
	const struct wlr_result *r = m->r;
	struct bu_json j;
	FILE *f = strcmp(path, "-") ? fopen(path, "w") : stdout;
	int rc;

	if (!f) {
		fprintf(stderr, "remora bench: --json %s: %s\n", path, strerror(errno));
		return -errno;
	}
	bu_json_init(&j, f);
	bu_json_obj_begin(&j, NULL);
	bu_json_str(&j, "tool", "remora bench");
	bu_json_str(&j, "workload", m->wl->desc->name);
	bu_json_obj_begin(&j, "params");
	for (const struct wl_knob *k = m->wl->desc->knobs; k->name; k++)
		bu_json_str(&j, k->name, wl_knob_str(m->wl, k->name));
	bu_json_obj_end(&j);
	bu_json_str(&j, "protocol", m->s->protocol);
	bu_json_str(&j, "backend", m->s->backend);
	bu_json_str(&j, "profile", m->s->profile);
	bu_json_u64(&j, "mn_scale", m->s->mn_scale);
	if (getenv("REMORA_MUTATE") && *getenv("REMORA_MUTATE")) /* an unsafe variant ran */
		bu_json_str(&j, "mutate", getenv("REMORA_MUTATE"));
	bu_json_u64(&j, "mn", m->s->n_mn);
	bu_json_u64(&j, "cn", m->s->n_cn);
	bu_json_u64(&j, "threads", m->s->threads);
	bu_json_u64(&j, "coros", m->s->coros);
	bu_json_u64(&j, "replicas", m->s->replicas);
	bu_json_u64(&j, "cn_reported", m->cn_ok);
	if (m->cn_share) {
		bu_json_arr_begin(&j, "per_cn");
		for (unsigned i = 0; i < m->cn_ok; i++) {
			bu_json_obj_begin(&j, NULL);
			bu_json_u64(&j, "cn", m->cn_share[i].cn);
			bu_json_u64(&j, "committed", m->cn_share[i].committed);
			bu_json_u64(&j, "attempted", m->cn_share[i].attempts);
			bu_json_u64(&j, "aborts", m->cn_share[i].aborts);
			bu_json_obj_end(&j);
		}
		bu_json_arr_end(&j);
	}
	bu_json_u64(&j, "seed", m->o->seed);
	bu_json_u64(&j, "txns", m->o->txns);
	bu_json_f64(&j, "warmup_s", m->o->txns ? 0.0 : m->o->warmup);
	bu_json_f64(&j, "duration_s", m->o->txns ? 0.0 : m->o->duration);
	bu_json_f64(&j, "seconds", r->seconds);
	json_counts(&j, m);
	bu_json_obj_begin(&j, "latency_ns");
	bu_json_u64(&j, "p50", bu_hist_quantile(r->hist, 0.5));
	bu_json_u64(&j, "p99", bu_hist_quantile(r->hist, 0.99));
	bu_json_u64(&j, "p999", bu_hist_quantile(r->hist, 0.999));
	bu_json_f64(&j, "mean", bu_hist_mean(r->hist));
	bu_json_u64(&j, "min", r->hist->min);
	bu_json_u64(&j, "max", r->hist->max);
	bu_json_u64(&j, "samples", r->hist->count);
	bu_json_obj_end(&j);
	json_verbs(&j, m);
	cs_json(&j, &m->cpu);
	ut_json(&j, &m->util, m->s->n_mn, m->s->n_cn);
	bu_json_obj_begin(&j, "accumulators");
	for (unsigned i = 0; i < WL_MAX_ACC; i++)
		if (m->wl->desc->acc_names[i])
			bu_json_i64(&j, m->wl->desc->acc_names[i], r->acc[i]);
	bu_json_obj_end(&j);
	if (bench_load.rows) { /* unknown to a merge that saw no line of the setup's node */
		bu_json_obj_begin(&j, "load");
		bu_json_u64(&j, "rows", bench_load.rows);
		bu_json_f64(&j, "seconds", bench_load.seconds);
		bu_json_f64(&j, "s_per_million_rows",
			    bench_load.seconds * 1e6 / (double)bench_load.rows);
		bu_json_obj_end(&j);
	}
	bu_json_obj_begin(&j, "check");
	bu_json_bool(&j, "run", m->checked);
	bu_json_bool(&j, "ok", m->checked && m->check_rc == 0);
	bu_json_str(&j, "message", m->checked ? m->check_msg : "");
	bu_json_obj_end(&j);
	btl_json(&j, m->tl, run_kill_time());
	bu_json_str(&j, "error", r->error ? r->errmsg : "");
	bu_json_obj_end(&j);
	rc = bu_json_finish(&j);
	if (f != stdout && fclose(f) && !rc)
		rc = -errno;
	if (rc)
		fprintf(stderr, "remora bench: --json %s: write error\n", path);
	return rc;
}

/* Opens the database as a client of its own and runs the workload's verify on it. */
static void run_check(struct job_host *host, struct bench_summary *m)
{
	struct remora_worker *w;
	struct remora_db *db;
	int rc;

	m->checked = true;
	m->check_rc = -1;
	if (!m->wl->desc->verify) {
		snprintf(m->check_msg, sizeof(m->check_msg), "workload %s has no invariant",
			 m->wl->desc->name);
		m->check_rc = 0;
		return;
	}
	rc = open_db(host->tp, m->s, 0, 1, 1, 1, &db);
	if (rc) {
		snprintf(m->check_msg, sizeof(m->check_msg), "cannot open the database: %s",
			 remora_strerror(rc));
		return;
	}
	rc = remora_worker_create(db, 0, &w);
	if (rc) {
		snprintf(m->check_msg, sizeof(m->check_msg), "cannot create a worker: %s",
			 remora_strerror(rc));
	} else {
		m->check_rc = m->wl->desc->verify(m->wl, w, m->r->acc, m->check_msg,
						  sizeof(m->check_msg));
		remora_worker_destroy(w);
	}
	remora_db_close(db);
}

static int bench_merge(struct job_host *host, const struct job_result *res,
		       unsigned n, int argc, char **argv)
{
	struct bench_summary m = { .cn_total = n };
	struct btl tl = { 0 };
	struct wlr_result total;
	struct bench_shape s;
	struct bench_opts o;
	struct wl wl;
	int rc = 0;

	if (job_workload(host->params, argc, argv, &o, &s, &wl))
		return 2;
	m.cn_share = calloc(n ? n : 1, sizeof(*m.cn_share));
	if (!m.cn_share || wlr_result_init(&total)) {
		fprintf(stderr, "remora bench: out of memory\n");
		rc = 1;
		goto free_results;
	}
	for (unsigned i = 0; i < n; i++) {
		struct line_meta meta;
		struct wlr_result one;

		if (wlr_result_init(&one) || !res[i].json || parse_line(res[i].json, &one, &meta)) {
			fprintf(stderr, "remora bench: compute node %u sent no usable result\n",
				res[i].cn);
			wlr_result_free(&one);
			rc = 1;
			continue;
		}
		if (meta.workload[0] && strcmp(meta.workload, wl.desc->name)) {
			fprintf(stderr, "remora bench: compute node %u ran workload %s, not %s\n",
				res[i].cn, meta.workload, wl.desc->name);
			wlr_result_free(&one);
			rc = 1;
			continue;
		}
		/* Across hosts the load ran in another process: its time comes in a line. */
		if (!bench_load.rows && meta.load_rows) {
			bench_load.rows = meta.load_rows;
			bench_load.seconds = meta.load_seconds;
		}
		m.cn_share[m.cn_ok] = (struct bench_cn_share){ .cn = res[i].cn,
							       .committed = one.cnt.committed,
							       .attempts = one.cnt.attempts,
							       .aborts = aborts_of(&one.cnt) };
		wlr_result_merge(&wl, &total, &one);
		wlr_result_free(&one);
		int trc = btl_add(&tl, res[i].json);

		if (trc == -ERANGE) {
			fprintf(stderr, "remora bench: compute node %u's timeline does not line up with "
				"the others (no tl_t0_ms, or over 6 h apart); left out\n", res[i].cn);
			rc = 1;
		} else if (trc) {
			fprintf(stderr, "remora bench: out of memory for the timeline\n");
		}
		m.cn_ok++;
	}
	m.o = &o;
	m.s = &s;
	m.wl = &wl;
	m.r = &total;
	m.tl = &tl;
	summarize(&m);
	/* remora run left out a node --kill killed (what it committed is unknown); remora merge
	 * passes every node, and a missing line there is the operator's, reported as such */
	wl.acc_partial = n < host->n_cn;
	if (o.check)
		run_check(host, &m);
	print_summary(stdout, &m);
	btl_print(stdout, &tl, run_kill_time());
	fflush(stdout);
	if (o.json && write_json(o.json, &m))
		rc = 1;
	if (total.error || (m.checked && m.check_rc != 0))
		rc = 1;
free_results:
	free(m.cn_share);
	btl_free(&tl);
	wlr_result_free(&total);
	wl_teardown(&wl);
	return rc;
}

/* ---- the command ------------------------------------------------------------------------ */

static void bench_usage(FILE *f)
{
	fputs("usage: remora bench [options] [workload options]\n"
	      "Runs a workload on a single-host cluster and prints one summary.\n"
	      "Other modes, each taking the whole command line:\n"
	      "  remora bench --sweep K=V,V ... [options]\n"
	      "                     one run per combination of the values (cluster\n"
	      "                     parameters or workload options, e.g. threads=1,2\n"
	      "                     coros=1,2,4,8); --json names the combined file\n"
	      "                     (default sweep.json)\n"
	      "  remora bench --compare A.json B.json [A2.json B2.json ...]\n"
	      "                     compare the exact verb counts of --txns runs pairwise\n"
	      "                     (bench or sweep files); exit 1 on a difference\n"
	      "  remora bench --crash-campaign N [--crash-recover online|whole]\n"
	      "               [--crash-points LIST] [--seed S] [options]\n"
	      "                     N jobs, each with one compute node killed at a random\n"
	      "                     commit-path point, verb or time, recovered (online by the\n"
	      "                     survivors, or whole: remora recover on the kept pools) and\n"
	      "                     checked (kvs: its history too); prints a table of\n"
	      "                     counts, exit 1 on a violation or hang (docs/bench.md)\n"
	      "  remora bench --calibrate FILE... [--target N]\n"
	      "                     the memory-node scale K whose knee (memory-node atomics\n"
	      "                     the bottleneck) lies closest to N coordinators, from\n"
	      "                     sweeps of mn_scale x coros (scripts/calibrate.sh)\n"
	      "Cluster parameters: --protocol P, --backend B, --profile X, --mn N, --cn N,\n"
	      "--threads N, --coros N, --pool-size S, --replicas N, ... (remora info --params)\n",
	      f);
}

static void bench_more_help(FILE *f)
{
	fprintf(f, "\nworkload options (docs/workloads.md):\n");
	for (const struct wl_desc *const *l = wl_list(); *l; l++) {
		fprintf(f, "  %s: %s\n", (*l)->name, (*l)->summary);
		for (const struct wl_knob *k = (*l)->knobs; k->name; k++)
			fprintf(f, "    --%-14s %s%s%s%s\n", k->name, k->help,
				k->def[0] ? " [" : "", k->def, k->def[0] ? "]" : "");
	}
	fprintf(f, "\nOutput fields: docs/bench.md. Exit status: 0 done, 1 run-time failure or "
		   "check violation, 2 bad usage.\n");
}

/* Rebuilds the job's own arguments (what every compute node and merge parse again). */
static int job_args(const struct bench_opts *o, char **jargv, char store[][160], int max)
{
	int n = 0;

	jargv[n++] = "bench";
#define JARG(...)                                                                          \
	do {                                                                               \
		if (n + 1 >= max)                                                          \
			return -1;                                                         \
		snprintf(store[n], 160, __VA_ARGS__);                                      \
		jargv[n] = store[n];                                                       \
		n++;                                                                       \
	} while (0)
	JARG("--workload=%s", o->workload);
	if (o->txns) {
		JARG("--txns=%" PRIu64, o->txns);
	} else {
		JARG("--duration=%.6f", o->duration);
		JARG("--warmup=%.6f", o->warmup);
	}
	JARG("--seed=%" PRIu64, o->seed);
	if (o->check)
		JARG("--check");
	if (o->timeline || o->kill[0])
		JARG("--timeline");
	if (o->json)
		JARG("--json=%s", o->json);
	for (unsigned i = 0; i < o->args.n; i++)
		JARG("--%s=%s", o->args.name[i], o->args.value[i]);
#undef JARG
	jargv[n] = NULL;
	return n;
}

/*
 * Do the tables fit the pools, and can the format step take this configuration at all (a
 * protocol that is not built)? Asked before any process starts, so that the answer is one line
 * and exit status 2. The format step checks the layout's size against each pool before it
 * writes anything; formatting a private 64 KiB pool therefore fails at once and its message
 * names the bytes the layout needs ("format: the tables need N bytes per memory node, ...").
 * The layout is the same on every node and for any replica count. When the message cannot be
 * read, the check is skipped: the real format step still refuses, before writing.
 */
static int preflight_fit(const struct wl *wl, const struct bench_shape *s,
			 const struct remora_params *p)
{
	struct remora_table_def defs[REMORA_MAX_TABLES];
	struct remora_cell_def cdefs[REMORA_MAX_TABLES];
	struct remora_pool_spec spec = { .size = sizeof(spec), .node = 0, .bytes = 64 * 1024,
					 .flags = REMORA_POOL_CREATE | REMORA_POOL_EXCL |
						  REMORA_POOL_UNLINK_ON_CLOSE };
	struct remora_db_format_cfg fc = {
		.size = sizeof(fc),
		.n_mn = 1,
		.replicas = 1,
		.protocol = s->protocol,
		.tables = defs,
		.ntables = wl->desc->tables(wl, defs),
		.max_cn = (uint16_t)s->n_cn,
		.coords_per_cn = (uint16_t)(s->threads * s->coros),
		.cells = cdefs,
		.ncells = wl_cells(wl, cdefs),
	};
	uint64_t pool = remora_params_size(p, REMORA_P_POOL_SIZE);
	struct remora_transport_cfg tc = { .size = sizeof(tc), .backend = "shm",
					   .self_cn = -1, .numa_node = -1 };
	struct remora_transport *tp;
	struct remora_pool *pl;
	struct remora_node_desc desc;
	unsigned long long need = 0;
	const char *msg, *at;
	char cluster[48];
	uint32_t key;
	int rc, code = 0;

	snprintf(cluster, sizeof(cluster), "bench-fit-%ld", (long)getpid());
	tc.cluster = cluster;
	if (remora_transport_open(&tc, &tp))
		return 0;
	if (remora_pool_open(tp, &spec, &pl))
		goto close_tp;
	rc = remora_pool_reg(pl, 0, remora_pool_bytes(pl), &key);
	if (!rc)
		rc = remora_pool_describe(pl, &desc);
	if (!rc)
		rc = remora_transport_attach(tp, &desc);
	if (!rc)
		rc = remora_db_format_ex(tp, &fc);
	if (rc == -REMORA_ECONFIG) {
		/* a protocol that is not built, too many coordinators per compute node, ... */
		fprintf(stderr, "remora bench: %s\n", remora_db_errmsg(NULL));
		code = 2;
	} else if (rc == -REMORA_EFULL) {
		msg = remora_db_errmsg(NULL);
		at = msg ? strstr(msg, "need ") : NULL;
		if (at && sscanf(at, "need %llu bytes", &need) == 1 && need > pool) {
			fprintf(stderr, "remora bench: the %s tables need %llu MiB per memory node, "
				"more than --pool-size %llu MiB; use fewer records or a larger "
				"--pool-size\n", wl->desc->name, (need + (1 << 20) - 1) >> 20,
				(unsigned long long)(pool >> 20));
			code = 2;
		}
	}
	remora_pool_close(pl, true);
close_tp:
	remora_transport_close(tp);
	return code;
}

/* Litmus runs as long as its rounds last (plus the start-up margin its epoch leaves). */
static void litmus_defaults(struct bench_opts *o, struct wl *wl)
{
	uint64_t rounds = 0, ms = 0;

	if (strcmp(o->workload, "litmus") || o->duration_set || o->txns)
		return;
	if (wl_knob_u64(wl, "rounds", 1, UINT64_MAX, &rounds) ||
	    wl_knob_u64(wl, "round-ms", 1, UINT64_MAX, &ms))
		return;
	o->warmup = 0;
	o->duration = 0.3 + (double)(rounds * ms) / 1000.0;
}

int cmd_bench(int argc, char **argv)
{
	static char store[BENCH_MAX_ARGS][160];
	char *jargv[BENCH_MAX_ARGS];
	struct run_opts ro = { 0 };
	struct cli_params cp;
	struct bench_shape s;
	struct bench_opts o;
	struct wl wl;
	int rc, jargc;

	if (cal_requested(argc, argv))
		return cal_run(argc, argv); /* apps/cli/calibrate.c: K of a paper's knee */
	if (bcmp_requested(argc, argv))
		return bcmp_run(argc, argv); /* apps/cli/benchcmp.c: verb counts of two runs */
	if (sweep_requested(argc, argv))
		return sweep_run(argc, argv); /* apps/cli/sweep.c: one bench per point */
	if (cc_requested(argc, argv))
		return cc_run(argc, argv); /* apps/cli/crash_campaign.c: kill, recover, check */
	rc = cli_begin(&cp, "bench", parse_opts, &o, argc, argv);
	if (rc != CLI_GO)
		return rc;
	shape_from(cp.p, &s);
	rc = setup_wl(&wl, &o, &s);
	if (rc)
		goto fini;
	litmus_defaults(&o, &wl);
	rc = preflight_fit(&wl, &s, cp.p);
	wl_teardown(&wl);
	if (rc)
		goto fini;
	if (!o.txns && o.duration <= 0) {
		fprintf(stderr, "remora bench: --duration must be positive\n");
		rc = 2;
		goto fini;
	}
	jargc = job_args(&o, jargv, store, BENCH_MAX_ARGS);
	if (jargc < 0) {
		fprintf(stderr, "remora bench: too many options\n");
		rc = 2;
		goto fini;
	}
	ro.params = cp.p;
	ro.config = cp.config;
	ro.nflags = cp.nflags;
	ro.flags = cp.flags;
	ro.quiet = !isatty(STDERR_FILENO);
	if (o.cn_env) {
		ro.cn_env = &o.cn_env;
		ro.ncn_env = 1;
	}
	for (unsigned k = 0; k < 2 && o.kill[k]; k++)
		if (run_parse_kill(o.kill[k], &ro)) {
			rc = 2;
			goto fini;
		}
	rc = run_cluster(&ro, &job_bench, jargc, jargv);
fini:
	cli_params_fini(&cp);
	return rc;
}

const struct job job_bench = {
	.name = "bench",
	.help = "run a workload for a fixed time (or --txns N) and report throughput, latency, aborts, verbs",
	.usage = "--workload NAME, --duration S, --warmup S, --txns N, --seed N, --check,\n"
		 "--json FILE,\n"
		 "workload options: see remora bench --help",
	.check = bench_check,
	.setup = bench_setup,
	.run = bench_run,
	.merge = bench_merge,
};
