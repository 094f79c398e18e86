// SPDX-License-Identifier: MIT
/*
 * End to end: `remora bench --workload tpcc|tatp --check` on ford and pandora, two compute-node
 * processes with two threads of coordinators each, then the workload's check on the store the
 * run left (TPC-C consistency conditions 1-4; TATP call_forwarding rows). Also the sweep
 * driver and `remora plot` on what it wrote, and their bad inputs.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "wutil.h"

#define TIMEOUT_S 90

static const char *const protocols[] = { "ford", "pandora" };

static void expect_run(struct wu_run *r, const char *what, const char *check_word)
{
	cr_expect_eq(r->status, 0, "%s: exit %d\n%s", what, r->status, r->log);
	cr_assert_not_null(r->summary, "%s: no summary\n%s", what, r->log);
	cr_expect(wu_bool(r, "check.run"), "%s: check did not run", what);
	cr_expect(wu_bool(r, "check.ok"), "%s: %s", what, wu_str(r, "check.message"));
	cr_expect(strstr(wu_str(r, "check.message"), check_word) != NULL, "%s: %s", what,
		  wu_str(r, "check.message"));
	cr_expect_gt(wu_num(r, "committed"), 0, "%s: nothing committed", what);
	cr_expect_eq(wu_num(r, "cn_reported"), 2, "%s", what);
	cr_expect_eq(wu_num(r, "integrity_errors"), 0, "%s", what);
	cr_expect_gt(wu_num(r, "load.rows"), 0, "%s: no load statistics", what);
}

Test(oltp_run, tpcc_checks_hold_after_a_run, .timeout = 4 * TIMEOUT_S)
{
	for (unsigned p = 0; p < 2; p++) {
		char proto[32];
		/*
		 * A counted run: 8 coordinators x 2000 transactions, of which about 14,100
		 * NewOrder and Payment, inside the room for 20,000. A 1 s run (as before) made
		 * 25,000 on a fast host and filled new_order ("record area full").
		 */
		const char *args[] = { "--workload=tpcc", proto, "--warehouses=2", "--scale=0.01",
				       "--room=20000", "--cn=2", "--threads=2", "--coros=2",
				       "--txns=2000", "--pool-size=96M", "--check", NULL };
		struct wu_run r;

		snprintf(proto, sizeof(proto), "--protocol=%s", protocols[p]);
		wu_bench(&r, NULL, TIMEOUT_S, args);
		expect_run(&r, protocols[p], "conditions 1-4 hold");
		/* every transaction type ran and committed */
		cr_expect_gt(wu_num(&r, "committed_by_type.NewOrder"), 0, "%s", protocols[p]);
		cr_expect_gt(wu_num(&r, "committed_by_type.Payment"), 0, "%s", protocols[p]);
		cr_expect_gt(wu_num(&r, "committed_by_type.Delivery"), 0, "%s", protocols[p]);
		cr_expect_gt(wu_num(&r, "committed_by_type.StockLevel"), 0, "%s", protocols[p]);
		cr_expect_gt(wu_num(&r, "committed_by_type.OrderStatus"), 0, "%s", protocols[p]);
		wu_free(&r);
	}
}

Test(oltp_run, tatp_call_forwarding_rows_are_conserved, .timeout = 4 * TIMEOUT_S)
{
	for (unsigned p = 0; p < 2; p++) {
		char proto[32];
		const char *args[] = { "--workload=tatp", proto, "--subscribers=2000", "--cn=2",
				       "--threads=2", "--coros=2", "--duration=1", "--warmup=0.2",
				       "--check", NULL };
		struct wu_run r;

		snprintf(proto, sizeof(proto), "--protocol=%s", protocols[p]);
		wu_bench(&r, NULL, TIMEOUT_S, args);
		expect_run(&r, protocols[p], "conserved");
		cr_expect_gt(wu_num(&r, "committed_by_type.InsertCallForwarding"), 0, "%s",
			     protocols[p]);
		cr_expect_gt(wu_num(&r, "committed_by_type.DeleteCallForwarding"), 0, "%s",
			     protocols[p]);
		/* the spec's failing cases are rolled back by the application */
		cr_expect_gt(wu_num(&r, "user_aborted"), 0, "%s", protocols[p]);
		wu_free(&r);
	}
}

Test(oltp_run, bench_refuses_bad_tpcc_input, .timeout = TIMEOUT_S)
{
	static const struct {
		const char *arg, *needle;
	} bad[] = {
		{ "--warehouses=0", "--warehouses" },
		{ "--mix=45,43,4,4,5", "sum to 101" },
		{ "--mix=NewOrder=50,Refund=50", "unknown transaction 'Refund'" },
	};

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *args[] = { "--workload=tpcc", bad[i].arg, NULL };
		struct wu_run r;

		wu_bench(&r, NULL, TIMEOUT_S, args);
		cr_expect_eq(r.status, 2, "%s: exit %d\n%s", bad[i].arg, r.status, r.log);
		cr_expect(strstr(r.log, bad[i].needle) != NULL, "%s: %s", bad[i].arg, r.log);
		cr_expect_null(r.summary, "%s: a run happened", bad[i].arg);
		wu_free(&r);
	}
}

/* ---- sweep and plot --------------------------------------------------------------------- */

static int sh(const char *cmd, char *out, size_t len)
{
	size_t n = 0;
	FILE *f = popen(cmd, "r");
	int st;

	cr_assert_not_null(f);
	while (n + 1 < len && fgets(out + n, (int)(len - n), f))
		n += strlen(out + n);
	out[n] = '\0';
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static bool is_png(const char *path)
{
	static const unsigned char magic[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
	unsigned char b[8] = { 0 };
	struct stat st;
	FILE *f = fopen(path, "rb");
	bool ok;

	if (!f)
		return false;
	ok = fread(b, 1, 8, f) == 8 && !memcmp(b, magic, 8);
	fclose(f);
	return ok && stat(path, &st) == 0 && st.st_size > 4096;
}

Test(oltp_run, sweep_writes_points_and_plot_draws_them, .timeout = 4 * TIMEOUT_S)
{
	const char *args[] = { "--workload=tatp", "--subscribers=2000", "--duration=0.4",
			       "--warmup=0.1", "--sweep", "coros=1,2", "protocol=ford,pandora",
			       NULL };
	const char *bin = getenv("REMORA_BIN");
	static const char *const figs[] = {
		"tatp-latency-p50-shm-none.png", "tatp-latency-p99-shm-none.png",
		"throughput-shm-none.png", "aborts-shm-none.png",
	};
	char cmd[1024], out[4096], path[256];
	struct wu_run r;
	int rc;

	wu_bench(&r, NULL, 2 * TIMEOUT_S, args);
	cr_assert_eq(r.status, 0, "sweep: exit %d\n%s", r.status, r.log);
	cr_assert_not_null(r.summary, "no combined file\n%s", r.log);
	cr_expect_str_eq(wu_str(&r, "tool"), "remora bench --sweep");
	cr_assert_eq(json_array_size(json_object_get(r.summary, "points")), 4);
	for (unsigned i = 0; i < 4; i++) {
		json_t *pt = json_array_get(json_object_get(r.summary, "points"), i);

		cr_expect_str_eq(json_string_value(json_object_get(pt, "tool")), "remora bench");
		cr_expect_eq(json_integer_value(json_object_get(pt, "coros")), 1 + i / 2);
		cr_expect_str_eq(json_string_value(json_object_get(pt, "protocol")),
				 protocols[i % 2]);
	}
	snprintf(path, sizeof(path), "%s/out-coros2-protocolpandora.json", r.dir);
	cr_expect_eq(access(path, R_OK), 0, "no per-point file %s", path);

	if (access("/usr/bin/gnuplot", X_OK) && system("command -v gnuplot >/dev/null 2>&1")) {
		wu_free(&r);
		cr_skip_test("gnuplot is not installed (Debian: gnuplot-nox)");
	}
	snprintf(cmd, sizeof(cmd), "%s plot --out %s %s/out.json 2>&1", bin, r.dir, r.dir);
	rc = sh(cmd, out, sizeof(out));
	cr_expect_eq(rc, 0, "plot: exit %d: %s", rc, out);
	for (unsigned i = 0; i < sizeof(figs) / sizeof(figs[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", r.dir, figs[i]);
		cr_expect(is_png(path), "%s is not a PNG figure (plot said: %s)", path, out);
	}

	/* a file that is not remora's: one line, exit 2 */
	snprintf(cmd, sizeof(cmd), "echo '{\"tool\": \"fio\"}' > %s/other.json && %s plot --out "
		 "%s %s/other.json 2>&1", r.dir, bin, r.dir, r.dir);
	rc = sh(cmd, out, sizeof(out));
	cr_expect_eq(rc, 2, "exit %d: %s", rc, out);
	cr_expect(strstr(out, "not a remora result file") != NULL, "%s", out);
	cr_expect_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);

	/* no gnuplot on PATH: one line naming the package, exit 1 */
	snprintf(cmd, sizeof(cmd), "PATH=/nonexistent %s plot --out %s %s/out.json 2>&1", bin,
		 r.dir, r.dir);
	rc = sh(cmd, out, sizeof(out));
	cr_expect_eq(rc, 1, "exit %d: %s", rc, out);
	cr_expect(strstr(out, "gnuplot-nox") != NULL, "%s", out);
	wu_free(&r);
}

Test(oltp_run, sweep_refuses_bad_keys, .timeout = TIMEOUT_S)
{
	const char *args[] = { "--workload=tatp", "--sweep", "threadz=1,2", NULL };
	struct wu_run r;

	wu_bench(&r, NULL, TIMEOUT_S, args);
	cr_expect_eq(r.status, 2, "exit %d\n%s", r.status, r.log);
	cr_expect(strstr(r.log, "'threadz' is neither") != NULL, "%s", r.log);
	wu_free(&r);
}

/* `remora lockbench --json` rows: one line per lock type against the swept field. */
Test(oltp_run, plot_draws_lockbench_rows, .timeout = 2 * TIMEOUT_S)
{
	const char *bin = getenv("REMORA_BIN");
	char dir[] = "/tmp/remora-lbplot-XXXXXX", cmd[1024], out[4096], path[320];
	static const char *const figs[] = { "lockbench-lb-throughput.png", "lockbench-lb-p99.png" };
	int rc;

	cr_assert_not_null(mkdtemp(dir));
	if (access("/usr/bin/gnuplot", X_OK) && system("command -v gnuplot >/dev/null 2>&1"))
		cr_skip_test("gnuplot is not installed (Debian: gnuplot-nox)");
	snprintf(cmd, sizeof(cmd), "%s lockbench --lock caslock --cns 1 --coros 2 --locks 8 "
		 "--ops 50 --sweep cs=0,1 --json %s/lb.json 2>&1", bin, dir);
	rc = sh(cmd, out, sizeof(out));
	cr_assert_eq(rc, 0, "lockbench: exit %d: %s", rc, out);
	snprintf(cmd, sizeof(cmd), "%s plot --out %s %s/lb.json 2>&1", bin, dir, dir);
	rc = sh(cmd, out, sizeof(out));
	cr_expect_eq(rc, 0, "plot: exit %d: %s", rc, out);
	for (unsigned i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, figs[i]);
		cr_expect(is_png(path), "%s is not a PNG figure (plot said: %s)", path, out);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/lb.json", dir);
	unlink(path);
	rmdir(dir);
}
