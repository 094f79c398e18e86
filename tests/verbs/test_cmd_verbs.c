/* SPDX-License-Identifier: MIT */
/*
 * `remora verbs` end to end on the default backend with a small pool: every op runs exactly
 * the verbs it should (checked in its JSON against the transport's counters), --raw replays
 * the same count, bad flags exit 2 with one line, --coro-switch reports a time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "apps/cli/cmd.h"

static char json_path[64];

static void quiet(void)
{
	/* The command prints its table; keep the test log to the assertions. */
	cr_assert_not_null(freopen("/dev/null", "w", stdout));
	snprintf(json_path, sizeof(json_path), "/tmp/remora-test-verbs-%ld.json", (long)getpid());
}

static void cleanup(void)
{
	unlink(json_path);
}

TestSuite(cmd_verbs, .init = quiet, .fini = cleanup, .timeout = 60);

static int run(const char *args)
{
	char buf[512], *argv[32], *save = NULL;
	int argc = 0;

	snprintf(buf, sizeof(buf), "verbs %s", args);
	for (char *t = strtok_r(buf, " ", &save); t && argc < 31; t = strtok_r(NULL, " ", &save))
		argv[argc++] = t;
	argv[argc] = NULL;
	return cmd_verbs(argc, argv);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *s;
	long n;

	cr_assert_not_null(f, "%s was not written", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	s = calloc(1, (size_t)n + 1);
	cr_assert_not_null(s);
	cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return s;
}

/* The unsigned integer after "key": at or after from; aborts the test if absent. */
static unsigned long long json_u64(const char *from, const char *key, const char **after)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(from, pat);
	cr_assert_not_null(p, "no \"%s\" in the JSON", key);
	p += strlen(pat);
	if (after)
		*after = p;
	return strtoull(p, NULL, 10);
}

static const char *const all_ops[] = { "read", "write", "cas", "faa", "mcas" };

/* The result object of op in the JSON, the first one at or after *from; moves *from past it. */
static const char *op_result(const char **from, const char *op)
{
	char opkey[32];
	const char *res;

	snprintf(opkey, sizeof(opkey), "\"op\": \"%s\"", op);
	res = strstr(*from, opkey);
	cr_assert_not_null(res, "no result for %s", op);
	*from = res + 1;
	return res;
}

Test(cmd_verbs, every_op_runs_and_counts_exactly)
{
	const unsigned threads = 2, coros = 3, iters = 40, batch = 4;
	const unsigned long long want = (unsigned long long)threads * coros * iters * batch;
	char args[256];
	const char *p;
	char *doc;

	snprintf(args, sizeof(args),
		 "--op all --threads %u --coros %u --iters %u --batch %u --pool-size 1M "
		 "--warmup 0 --raw --json %s",
		 threads, coros, iters, batch, json_path);
	cr_assert_eq(run(args), 0);
	doc = slurp(json_path);
	p = doc;
	for (unsigned i = 0; i < 5; i++) {
		const char *op = all_ops[i], *res = op_result(&p, op);

		cr_assert_eq(json_u64(res, "verbs", NULL), want, "%s", op);
		/* The transport counted exactly these verbs, in batches of `batch`. */
		cr_assert_eq(json_u64(strstr(res, "\"counted\""), op, NULL), want, "%s", op);
		cr_assert_eq(json_u64(res, "doorbells", NULL), want / batch, "%s", op);
		cr_assert_not_null(strstr(res, "\"raw\""), "%s: no raw replay", op);
	}
	free(doc);
}

/* --floor replays every verb of the API pass once more, each one checked, for every op. */
Test(cmd_verbs, floor_replays_the_same_verbs)
{
	char args[256];
	const char *p;
	char *doc;

	snprintf(args, sizeof(args),
		 "--op all --coros 2 --iters 30 --batch 3 --pool-size 1M --warmup 0 --raw --floor "
		 "--json %s", json_path);
	cr_assert_eq(run(args), 0);
	doc = slurp(json_path);
	p = doc;
	for (unsigned i = 0; i < 5; i++) {
		const char *res = op_result(&p, all_ops[i]);

		cr_assert_eq(json_u64(strstr(res, "\"raw\""), "floor_verbs", NULL), 2 * 30 * 3,
			     "%s", all_ops[i]);
	}
	free(doc);
}

Test(cmd_verbs, seq_pattern_and_large_reads)
{
	char args[256];
	char *doc;

	snprintf(args, sizeof(args),
		 "--op read --pattern seq --size 4K --iters 10 --coros 2 --pool-size 64K "
		 "--warmup 0 --json %s",
		 json_path);
	cr_assert_eq(run(args), 0);
	doc = slurp(json_path);
	cr_assert_eq(json_u64(doc, "verbs", NULL), 20);
	free(doc);
}

Test(cmd_verbs, bad_flags_exit_2)
{
	const char *bad[] = { "--batch 0", "--op nope", "--size 12Q", "--pool-size 1K",
			      "--pattern zig", "--profile cx9", "--backend nope", "--bogus",
			      "--duration 1 --iters 2", "--threads", "--raw=yes", "stray",
			      "--size 2M --pool-size 1M", "--floor" };

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(run(bad[i]), 2, "'%s' was accepted", bad[i]);
	cr_assert_eq(run("--help"), 0);
}

Test(cmd_verbs, coro_switch_reports_a_time)
{
	char args[128];
	char *doc, *p;

	snprintf(args, sizeof(args), "--coro-switch --iters 2000 --json %s", json_path);
	cr_assert_eq(run(args), 0);
	doc = slurp(json_path);
	p = strstr(doc, "\"switch_ns_min\": ");
	cr_assert_not_null(p);
	cr_assert_gt(strtod(p + strlen("\"switch_ns_min\": "), NULL), 0.0);
	free(doc);
}

/* --op rpc checks every echoed reply itself and exits 1 on a wrong one. */
Test(cmd_verbs, rpc_round_trip_runs)
{
	cr_assert_eq(run("--op rpc --duration 0.05 --warmup 0"), 0);
	cr_assert_eq(run("--op rpc --backend nope"), 2);
}
