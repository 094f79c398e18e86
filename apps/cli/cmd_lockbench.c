/* SPDX-License-Identifier: MIT */
/*
 * `remora lockbench`: DecLock's lock microbenchmark (lockbench.c runs it) on a private
 * in-process cluster: clients = compute nodes x coroutines, Zipf-popular locks, a read
 * ratio, a critical section of k memory-node verbs. One table row per run, or per point of
 * --sweep KEY=V1,V2,...; --json writes the same rows.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <remora/error.h>

#include "benchutil.h"
#include "cli.h"
#include "cmd.h"
#include "lockbench.h"

#define LB_MAX_POINTS 32

struct lb_cli {
	struct lb_opts o;
	const char *json;
	const char *sweep_key;
	char sweep_vals[LB_MAX_POINTS][32];
	unsigned npoints;
	bool duration_set;
};

static int opt_lock(void *opts, const char *cmd, const char *name, const char *v)
{
	static const char *const ok[] = { "declock", "declock-tf", "declock-pf", "caslock",
					  "dslr", "shiftlock", NULL };

	for (unsigned i = 0; ok[i]; i++)
		if (strcmp(v, ok[i]) == 0) {
			((struct lb_cli *)opts)->o.lock = ok[i];
			return 0;
		}
	fprintf(stderr, "remora %s: %s: unknown lock type '%s' (declock-tf, declock-pf, declock, "
			"caslock, dslr, shiftlock)\n", cmd, name, v);
	return 2;
}

static int parse_theta(const char *cmd, const char *name, const char *v, double *out)
{
	char *end;
	double t = strtod(v, &end);

	if (!*v || *end || !isfinite(t) || t < 0 || t > 10) {
		fprintf(stderr, "remora %s: %s: '%s' is not a number in [0, 10]\n", cmd, name, v);
		return 2;
	}
	*out = t;
	return 0;
}

static int opt_theta(void *opts, const char *cmd, const char *name, const char *v)
{
	return parse_theta(cmd, name, v, &((struct lb_cli *)opts)->o.theta);
}

static int opt_duration(void *opts, const char *cmd, const char *name, const char *v)
{
	struct lb_cli *c = opts;
	char err[128];

	if (bu_parse_seconds(v, &c->o.duration, err, sizeof(err)) || c->o.duration <= 0) {
		fprintf(stderr, "remora %s: %s: %s\n", cmd, name, *err ? err : "must be above 0");
		return 2;
	}
	c->duration_set = true;
	return 0;
}

static int opt_json(void *opts, const char *cmd, const char *name, const char *v)
{
	if (bu_check_out_path(cmd, name, v))
		return 2;
	((struct lb_cli *)opts)->json = v;
	return 0;
}

static int opt_kill(void *opts, const char *cmd, const char *name, const char *v)
{
	struct lb_cli *c = opts;
	char *end;
	unsigned long cn;
	char err[128];

	if (strncmp(v, "cn", 2) == 0) /* remora bench's form, cnI@T */
		v += 2;
	cn = strtoul(v, &end, 10);
	if (end == v || *end != '@' || cn >= 64 || v[0] < '0' || v[0] > '9' ||
	    bu_parse_seconds(end + 1, &c->o.kill_at, err, sizeof(err)) || c->o.kill_at <= 0) {
		fprintf(stderr, "remora %s: %s: want [cn]CN@SEC, e.g. cn1@0.5 (compute node 1 dies "
				"0.5 s in)\n", cmd, name);
		return 2;
	}
	c->o.kill_cn = (int)cn;
	return 0;
}

static const char *const sweep_keys[] = { "cns", "coros", "cs", "read-ratio", "locks", "theta",
					  "lock", NULL };

static int opt_sweep(void *opts, const char *cmd, const char *name, const char *v)
{
	struct lb_cli *c = opts;
	const char *eq = strchr(v, '=');
	char list[512];

	for (unsigned i = 0; eq && sweep_keys[i]; i++)
		if (strlen(sweep_keys[i]) == (size_t)(eq - v) && !strncmp(v, sweep_keys[i], (size_t)(eq - v)))
			c->sweep_key = sweep_keys[i];
	if (!c->sweep_key || strlen(eq + 1) >= sizeof(list) || !eq[1]) {
		fprintf(stderr, "remora %s: %s: want KEY=V1,V2,... with KEY one of cns, coros, cs, "
				"read-ratio, locks, theta, lock\n", cmd, name);
		return 2;
	}
	strcpy(list, eq + 1);
	c->npoints = 0;
	for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
		if (c->npoints == LB_MAX_POINTS || strlen(t) >= sizeof(c->sweep_vals[0])) {
			fprintf(stderr, "remora %s: %s: at most %u values of 31 characters\n", cmd,
				name, LB_MAX_POINTS);
			return 2;
		}
		strcpy(c->sweep_vals[c->npoints++], t);
	}
	return 0;
}

static const struct cli_opt lb_opt_table[] = {
	CLI_OPT_STR("--backend", "NAME", struct lb_cli, o.backend,
		    "transport backend (default: $REMORA_BACKEND, else shm)"),
	CLI_OPT_STR("--profile", "P", struct lb_cli, o.profile,
		    "NIC cost model: none | cxl | cx3 | cx4 | cx5 | cx6 (default: $REMORA_PROFILE, else none)"),
	CLI_OPT_U64("--mn-scale", "K", struct lb_cli, o.mn_scale, 1, REMORA_MN_SCALE_MAX,
		    "divide the profile's memory-node service rates by K, round trips\n"
		    "kept (default: $REMORA_MN_SCALE, else 1)"),
	CLI_OPT_UNSIGNED("--cns", "N", struct lb_cli, o.cns, 1, 64,
			 "compute nodes, one thread each (default: 2)"),
	CLI_OPT_UNSIGNED("--coros", "C", struct lb_cli, o.coros, 1, 1000,
			 "clients (coroutines) per compute node (default: 8)"),
	CLI_OPT_UNSIGNED("--locks", "N", struct lb_cli, o.locks, 1, 100000000,
			 "locks on the memory node (default: 100000)"),
	CLI_OPT_FN("--theta", "T", opt_theta, "Zipf skew of lock popularity, 0 = uniform "
					       "(default: 0.99)"),
	CLI_OPT_UNSIGNED("--read-ratio", "PCT", struct lb_cli, o.read_pct, 0, 100,
			 "percent of acquisitions in S mode (default: 50)"),
	CLI_OPT_UNSIGNED("--cs", "K", struct lb_cli, o.cs, 0, 1024,
			 "memory-node verbs in the critical section: READ (S) or WRITE (X)\n"
			 "of the lock's 8 B object (default: 1)"),
	CLI_OPT_FN("--lock", "TYPE", opt_lock,
		   "declock-tf | declock-pf (hierarchical: one queue entry per compute\n"
		   "node, task- or phase-fair local hand-off) | declock (flat: one\n"
		   "entry per client) | caslock | dslr | shiftlock (default: declock-tf)"),
	CLI_OPT_FN("--duration", "SEC", opt_duration, "measured time (default: 2; accepts ms/s/m)"),
	CLI_OPT_U64("--ops", "N", struct lb_cli, o.ops, 1, UINT64_C(1) << 40,
		    "instead of --duration: N acquisitions per client"),
	CLI_OPT_UNSIGNED("--cap-log2", "c", struct lb_cli, o.cap_log2, 0, 10,
			 "declock: queue of C = 2^c entries per lock (default: 3)"),
	CLI_OPT_UNSIGNED("--ver-bits", "M", struct lb_cli, o.ver_bits, 2, 16,
			 "declock: entry version bits (default: 16)"),
	CLI_OPT_UNSIGNED("--timeout-ms", "MS", struct lb_cli, o.timeout_ms, 1, 600000,
			 "declock: a waiter's bound before it resets the lock (default: 200)"),
	CLI_OPT_UNSIGNED("--entry-delay-us", "US", struct lb_cli, o.entry_delay_us, 0, 1000000,
			 "declock: a random delay up to US before each entry WRITE, to\n"
			 "make entries late for the releases that read them (default: 0)"),
	CLI_OPT_FN("--kill", "cnI@SEC", opt_kill,
		   "compute node I dies SEC into the run: its thread freezes (holds\n"
		   "kept, messages unanswered) and the others mark it down; needs\n"
		   "--duration longer than SEC. Prints the live nodes' rate late\n"
		   "after the kill against the rate before it. caslock, dslr and\n"
		   "shiftlock have no recovery: clients that wait for a dead node's\n"
		   "lock spin until the end and are reported stuck (exit 1)"),
	CLI_OPT_FLAG("--check", struct lb_cli, o.check,
		     "check S/X mutual exclusion and grant order = FAA order on\n"
		     "every acquisition (exit 1 on a violation)"),
	CLI_OPT_FLAG("--ride", struct lb_cli, o.ride,
		     "an S critical section's first READ rides on the acquisition's\n"
		     "first doorbell (the speculative READ of docs/declock.md, 8) and\n"
		     "counts when the acquisition was decided there, at once; with\n"
		     "--check, a READ after the grant must see the same value"),
	CLI_OPT_U64("--seed", "S", struct lb_cli, o.seed, 0, UINT64_MAX, "random seed (default: 1)"),
	CLI_OPT_FN("--sweep", "KEY=V1,V2", opt_sweep,
		   "one run per value; KEY: cns, coros, cs, read-ratio, locks,\n"
		   "theta, lock"),
	CLI_OPT_FN("--json", "FILE", opt_json, "also write the rows as JSON"),
	{ 0 },
};

static void lb_more_help(FILE *f)
{
	fputs("\n"
	      "Latency is per acquisition (from the call to the grant). MN ops/acq counts the\n"
	      "memory-node verbs of acquisitions that met no reset; refetch/rel is the queue READs\n"
	      "a release added; reset is the fraction of acquisitions that met a reset; MNutil is\n"
	      "the cost model's memory-node busy time over its elapsed time (0 without a profile).\n"
	      "Exit status: 0 done, 1 run-time failure or a --check violation, 2 bad option.\n",
	      f);
}

static const struct cli_cmd lb_cmd = {
	.name = "lockbench",
	.usage = "usage: remora lockbench [options]\n"
		 "\n"
		 "DecLock's lock microbenchmark on a private in-process cluster: each client\n"
		 "takes a Zipf-chosen lock in S or X mode, runs the critical section, releases.\n",
	.opts = lb_opt_table,
	.more_help = lb_more_help,
};

/* Sets the swept key to v in o; 0 or 2 after printing. */
static int apply_point(struct lb_cli *c, struct lb_opts *o, const char *v)
{
	const char *k = c->sweep_key;
	uint64_t u;
	char err[128];

	if (strcmp(k, "theta") == 0)
		return parse_theta("lockbench", "--sweep", v, &o->theta);
	if (strcmp(k, "lock") == 0) {
		struct lb_cli t = *c;

		if (opt_lock(&t, "lockbench", "--sweep", v))
			return 2;
		o->lock = t.o.lock;
		return 0;
	}
	if (bu_parse_u64(v, strcmp(k, "cs") && strcmp(k, "read-ratio") ? 1 : 0,
			 strcmp(k, "read-ratio") == 0 ? 100 : strcmp(k, "cns") == 0 ? 64 : 100000000,
			 &u, err, sizeof(err))) {
		fprintf(stderr, "remora lockbench: --sweep %s=%s: %s\n", k, v, err);
		return 2;
	}
	if (strcmp(k, "cns") == 0)
		o->cns = (unsigned)u;
	else if (strcmp(k, "coros") == 0)
		o->coros = (unsigned)u > 1000 ? 1000 : (unsigned)u;
	else if (strcmp(k, "cs") == 0)
		o->cs = (unsigned)u;
	else if (strcmp(k, "read-ratio") == 0)
		o->read_pct = (unsigned)u;
	else
		o->locks = (unsigned)u;
	return 0;
}

static double per(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0.0;
}

static void row_print(const struct lb_opts *o, const struct lb_result *r)
{
	uint64_t clean = r->st.acquires - r->st.reset_acq;

	printf("%-10s %4u %5u %6.2f %4u %3u %12.0f %9.2f %9.2f %9.2f %8.3f %9.4f %9.6f %6" PRIu64
	       " %6.3f\n", o->lock, o->cns, o->coros, o->theta, o->read_pct, o->cs,
	       per(r->ops, 1) / (r->secs > 0 ? r->secs : 1), r->p50_ns / 1e3, r->p99_ns / 1e3,
	       r->p999_ns / 1e3, per(r->st.acq_ops, clean), per(r->st.refetches, r->st.releases),
	       per(r->st.reset_acq, r->st.acquires), r->st.acq_ops_max,
	       r->mn_util >= 0 ? r->mn_util : 0.0);
}

static void row_json(struct bu_json *j, const struct lb_opts *o, const struct lb_result *r)
{
	uint64_t clean = r->st.acquires - r->st.reset_acq;

	bu_json_obj_begin(j, NULL);
	bu_json_str(j, "lock", o->lock);
	bu_json_u64(j, "cns", o->cns);
	bu_json_u64(j, "coros", o->coros);
	bu_json_u64(j, "clients", (uint64_t)o->cns * o->coros);
	bu_json_u64(j, "locks", o->locks);
	bu_json_f64(j, "theta", o->theta);
	bu_json_u64(j, "read_ratio", o->read_pct);
	bu_json_u64(j, "cs", o->cs);
	bu_json_f64(j, "seconds", r->secs);
	bu_json_u64(j, "acquisitions", r->ops);
	bu_json_f64(j, "throughput", r->secs > 0 ? (double)r->ops / r->secs : 0);
	bu_json_u64(j, "p50_ns", r->p50_ns);
	bu_json_u64(j, "p99_ns", r->p99_ns);
	bu_json_u64(j, "p999_ns", r->p999_ns);
	bu_json_f64(j, "mn_ops_per_acq", per(r->st.acq_ops, clean));
	bu_json_u64(j, "mn_ops_per_acq_max", r->st.acq_ops_max);
	bu_json_f64(j, "mn_ops_per_rel", per(r->st.rel_ops, r->st.releases));
	bu_json_f64(j, "refetches_per_rel", per(r->st.refetches, r->st.releases));
	bu_json_f64(j, "reset_fraction", per(r->st.reset_acq, r->st.acquires));
	bu_json_u64(j, "resets", r->st.resets);
	bu_json_u64(j, "reset_ops", r->st.reset_ops);
	bu_json_u64(j, "timeouts", r->st.timeouts);
	bu_json_u64(j, "overflows", r->st.overflows);
	bu_json_u64(j, "wraps", r->st.wraps);
	bu_json_u64(j, "reset_acquisitions", r->st.reset_acq);
	bu_json_u64(j, "grants", r->st.grants_sent);
	bu_json_u64(j, "grants_lost", r->st.grants_lost);
	bu_json_u64(j, "local_grants", r->st.local_grants);
	bu_json_u64(j, "prefetch_ops", r->st.prefetch_ops);
	bu_json_u64(j, "sync_ops", r->st.sync_ops);
	bu_json_u64(j, "errors", r->errors);
	if (o->ride) {
		bu_json_u64(j, "rides", r->rides);
		bu_json_u64(j, "rides_valid", r->rides_valid);
	}
	if (r->mn_util >= 0)
		bu_json_f64(j, "mn_utilization", r->mn_util);
	bu_json_u64(j, "acquisitions_after_kill", r->ops_after_kill);
	if (o->kill_cn >= 0) {
		bu_json_f64(j, "acq_per_s_before_kill", r->rate_before_kill);
		bu_json_f64(j, "acq_per_s_late_after_kill", r->rate_late);
	}
	bu_json_u64(j, "violations", r->violations);
	bu_json_u64(j, "stuck_nodes", r->stuck);
	bu_json_obj_end(j);
}

/* The live nodes' throughput once the kill's timeouts and resets are behind them. */
static void print_recovery(const struct lb_opts *o, const struct lb_result *r)
{
	printf("after the kill: %.0f acq/s in the second half of the rest of the run, %.0f "
	       "before it: %.2f of it ((N-1)/N = %.2f)\n", r->rate_late, r->rate_before_kill,
	       r->rate_before_kill > 0 ? r->rate_late / r->rate_before_kill : 0.0,
	       (double)(o->cns - 1) / o->cns);
}

static int run_points(struct lb_cli *c, struct bu_json *j)
{
	unsigned n = c->sweep_key ? c->npoints : 1;
	int status = 0;

	printf("%-10s %4s %5s %6s %4s %3s %12s %9s %9s %9s %8s %9s %9s %6s %6s\n", "lock",
	       "cns", "coros", "theta", "rd%", "cs", "acq/s", "p50 us", "p99 us", "p999 us",
	       "MNop/acq", "refetch/r", "reset", "maxop", "MNutil");
	for (unsigned i = 0; i < n; i++) {
		struct lb_opts o = c->o;
		struct lb_result r;

		if (c->sweep_key && apply_point(c, &o, c->sweep_vals[i]))
			return 2;
		if (lb_run(&o, &r))
			return 1;
		row_print(&o, &r);
		if (j)
			row_json(j, &o, &r);
		if (r.errors)
			fprintf(stderr, "remora lockbench: %" PRIu64 " acquisitions failed (first: %s)\n",
				r.errors, remora_strerror(r.first_err));
		if (r.violations) {
			fprintf(stderr, "remora lockbench: %" PRIu64 " violations; first: %s\n",
				r.violations, r.violation);
			status = 1;
		}
		if (o.kill_cn >= 0)
			print_recovery(&o, &r);
		if (r.stuck) {
			fprintf(stderr, "remora lockbench: %u compute nodes still waited for a lock "
				"long after the stop (a hang); their lock services were shut down\n",
				r.stuck);
			status = 1;
		}
	}
	return status;
}

int cmd_lockbench(int argc, char **argv)
{
	struct lb_cli c = { 0 };
	struct bu_json j;
	FILE *f = NULL;
	int i = 1, rc;

	lb_defaults(&c.o);
	c.o.lock = "declock-tf";
	rc = cli_parse(&lb_cmd, &c, NULL, argc, argv, &i);
	if (rc)
		return rc == 1 ? 0 : rc;
	if (i < argc)
		return cli_unknown_option("lockbench", argv[i]);
	if (c.o.ops && c.duration_set) {
		fprintf(stderr, "remora lockbench: --ops conflicts with --duration (give one)\n");
		return 2;
	}
	if (c.o.ops)
		c.o.duration = 0;
	if (c.o.kill_cn >= 0 && (c.o.ops || c.o.duration <= c.o.kill_at ||
				 (unsigned)c.o.kill_cn >= c.o.cns || c.o.cns < 2)) {
		fprintf(stderr, "remora lockbench: --kill needs a compute node below --cns (>= 2) "
				"and a --duration longer than its time\n");
		return 2;
	}
	if (c.json && !(f = fopen(c.json, "w"))) {
		fprintf(stderr, "remora lockbench: --json: cannot write %s\n", c.json);
		return 1;
	}
	if (f) {
		bu_json_init(&j, f);
		bu_json_arr_begin(&j, NULL);
	}
	rc = run_points(&c, f ? &j : NULL);
	if (f) {
		bu_json_arr_end(&j);
		if (bu_json_finish(&j) && !rc)
			rc = 1;
		fclose(f);
	}
	return rc;
}
