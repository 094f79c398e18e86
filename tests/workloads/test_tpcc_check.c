// SPDX-License-Identifier: MIT
/*
 * The TPC-C consistency checks (clause 3.3.2, conditions 1-4) and their negative controls: a
 * memory node runs in this process, the test joins it as a tool, loads a small TPC-C database,
 * runs a few hundred transactions, and checks. Then it corrupts the database on purpose, one
 * condition at a time (a bumped D_YTD, a bumped D_NEXT_O_ID, an order past D_NEXT_O_ID, a
 * deleted new_order row, a changed O_OL_CNT, a deleted order line), and requires the check to
 * fail with a message naming that condition and the district; putting the value back makes it
 * pass again. The same checks run through `remora check` attached to the memory node.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <remora/cluster.h>
#include <remora/params.h>
#include <remora/tx.h>

#include "tpcc.h"

#define WAREHOUSES "2"
#define SCALE "0.01"
#define ROOM "600"
#define SEED 7
#define TXNS 400

struct fx {
	struct remora_params *p;
	struct remora_mn *mn;
	pthread_t mt;
	bool mt_started;
	struct remora_cluster *cl;
	struct remora_db *db;
	struct remora_worker *w;
	struct wl wl;
	bool wl_set;
	char name[48], addr[48];
	const char *protocol;
};

static struct fx fx;

static void *mn_main(void *arg)
{
	remora_mn_run(arg);
	return NULL;
}

static void set(const char *name, const char *value)
{
	int rc = remora_params_set(fx.p, name, value, REMORA_SRC_FLAG, "test");

	cr_assert_eq(rc, 0, "%s=%s: %s", name, value, remora_params_errmsg(fx.p));
}

static void fx_format_load(void)
{
	struct remora_table_def defs[REMORA_MAX_TABLES];
	unsigned n = fx.wl.desc->tables(&fx.wl, defs);
	struct remora_db_format_cfg f = {
		.size = sizeof(f), .n_mn = 1, .replicas = 1, .protocol = fx.protocol,
		.tables = defs, .ntables = n, .max_cn = 1, .coords_per_cn = 1,
	};
	struct remora_db_cfg cfg = {
		.size = sizeof(cfg), .tp = remora_cluster_transport(fx.cl), .protocol = fx.protocol,
		.cn_id = 0, .n_mn = 1, .replicas = 1, .coords_per_worker = 1, .workers = 1,
	};
	int rc;

	rc = remora_db_format_ex(remora_cluster_transport(fx.cl), &f);
	cr_assert_eq(rc, 0, "format: %s", remora_db_errmsg(NULL));
	rc = remora_db_open(&cfg, &fx.db);
	cr_assert_eq(rc, 0, "open: %s", remora_db_errmsg(NULL));
	rc = remora_worker_create(fx.db, 0, &fx.w);
	cr_assert_eq(rc, 0, "worker: %s", remora_strerror(rc));
	rc = wl_load_range(&fx.wl, fx.w, 0, fx.wl.desc->load_count(&fx.wl), NULL, NULL);
	cr_assert_eq(rc, 0, "load: %s (%s)", remora_strerror(rc), remora_worker_errmsg(fx.w));
}

/* A memory node in this process, joined as a tool, with workload d (options a) loaded. */
static void fx_open_wl(const char *protocol, const struct wl_desc *d, const struct wl_args *a)
{
	struct remora_mn_cfg cfg = { .size = sizeof(cfg), .id = 0, .port = 0, .signal_fd = -1 };
	char err[320];
	int rc;

	memset(&fx, 0, sizeof(fx));
	fx.protocol = protocol;
	cr_assert_eq(remora_params_create(&fx.p), 0);
	snprintf(fx.name, sizeof(fx.name), "tpcck%d", (int)getpid());
	set("cluster", fx.name);
	set("pool_size", "48M");
	set("protocol", protocol);
	cr_assert_eq(remora_params_check(fx.p), 0, "%s", remora_params_errmsg(fx.p));
	cfg.params = fx.p;
	rc = remora_mn_open(&cfg, &fx.mn, err, sizeof(err));
	if (rc == -REMORA_ENOBACKEND)
		cr_skip_test("%s", err);
	cr_assert_eq(rc, 0, "memory node: %s", err);
	snprintf(fx.addr, sizeof(fx.addr), "127.0.0.1:%u", remora_mn_port(fx.mn));
	set("mn_addrs", fx.addr);
	cr_assert_eq(pthread_create(&fx.mt, NULL, mn_main, fx.mn), 0);
	fx.mt_started = true;
	rc = remora_cluster_join(fx.p, -1, &fx.cl, err, sizeof(err));
	cr_assert_eq(rc, 0, "join: %s", err);
	rc = wl_setup(&fx.wl, d, a, SEED, 1);
	cr_assert_eq(rc, 0, "%s", fx.wl.err);
	fx.wl_set = true;
	fx_format_load();
}

static void fx_open(const char *protocol)
{
	struct wl_args a = { 0 };

	wl_args_set(&a, "warehouses", WAREHOUSES);
	wl_args_set(&a, "scale", SCALE);
	wl_args_set(&a, "room", ROOM);
	fx_open_wl(protocol, &wl_tpcc, &a);
}

static void fx_close(void)
{
	struct remora_transport_cfg tcfg;

	if (fx.w)
		remora_worker_destroy(fx.w);
	if (fx.db)
		remora_db_close(fx.db);
	if (fx.wl_set)
		wl_teardown(&fx.wl);
	if (fx.cl) {
		remora_cluster_shutdown(fx.cl);
		remora_cluster_leave(fx.cl);
	}
	if (fx.mt_started) {
		remora_mn_stop(fx.mn);
		pthread_join(fx.mt, NULL);
	}
	if (fx.mn)
		remora_mn_close(fx.mn);
	if (fx.p) {
		remora_cluster_transport_cfg(fx.p, -1, &tcfg);
		remora_transport_cleanup(&tcfg);
		remora_cluster_key_remove(fx.p);
		remora_params_destroy(fx.p);
	}
	memset(&fx, 0, sizeof(fx));
}

/* Runs TXNS transactions of the standard mix on one coordinator. */
static void run_mix(void)
{
	struct wl_counts cnt = { 0 };
	struct wl_coord c;
	struct wl_input in;
	int rc;

	wl_coord_prepare(&fx.wl, &c, fx.w, 0, 0, 0, 0);
	cr_assert_eq(wl_coord_init(&fx.wl, &c), 0);
	for (unsigned i = 0; i < TXNS; i++) {
		fx.wl.desc->gen(&fx.wl, &c, &in);
		rc = wl_run_txn(&fx.wl, &c, &in, &cnt, NULL);
		cr_assert(rc == 0 || rc == WL_USER_ABORT, "txn %u (type %u): %s (%s)", i, in.type,
			  remora_strerror(rc), remora_worker_errmsg(fx.w));
	}
	wl_coord_fini(&fx.wl, &c);
	cr_assert_gt(cnt.committed_by_type[TPCC_NEW_ORDER_TX], 100);
	cr_assert_gt(cnt.committed_by_type[TPCC_DELIVERY_TX], 0);
	cr_assert_eq(cnt.integrity_errors, 0);
}

static int check(char *msg, size_t len)
{
	return tpcc_check(&fx.wl, fx.w, msg, len);
}

static void expect_ok(const char *when)
{
	char msg[1024];
	int rc = check(msg, sizeof(msg));

	cr_assert_eq(rc, 0, "%s: check failed (%d): %s", when, rc, msg);
	cr_expect(strstr(msg, "conditions 1-4 hold") != NULL, "%s: %s", when, msg);
}

static void expect_violation(const char *cond, const char *where)
{
	char msg[1024];
	int rc = check(msg, sizeof(msg));

	cr_assert_eq(rc, 1, "corruption not caught (rc %d): %s", rc, msg);
	cr_expect(strstr(msg, cond) != NULL, "message does not name %s: %s", cond, msg);
	cr_expect(strstr(msg, where) != NULL, "message does not name %s: %s", where, msg);
}

/* One-shot transaction: reads key for update, lets fn change the value, writes it. */
static void modify(uint32_t table, uint64_t key, size_t vsize, void (*fn)(void *v, long arg),
		   long arg)
{
	unsigned char buf[1024];
	struct remora_tx *tx;
	int rc;

	cr_assert_leq(vsize, sizeof(buf));
	cr_assert_eq(remora_tx_begin(fx.w, 0, &tx), 0);
	rc = remora_tx_read_for_update(tx, table, key, buf);
	cr_assert_eq(rc, 0, "read %llx: %s", (unsigned long long)key, remora_strerror(rc));
	fn(buf, arg);
	cr_assert_eq(remora_tx_write(tx, table, key, buf), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
}

static void delete_key(uint32_t table, uint64_t key, void *save)
{
	struct remora_tx *tx;
	int rc;

	cr_assert_eq(remora_tx_begin(fx.w, 0, &tx), 0);
	rc = remora_tx_read_for_update(tx, table, key, save);
	cr_assert_eq(rc, 0, "read %llx: %s", (unsigned long long)key, remora_strerror(rc));
	cr_assert_eq(remora_tx_delete(tx, table, key), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
}

static void insert_key(uint32_t table, uint64_t key, const void *v)
{
	struct remora_tx *tx;

	cr_assert_eq(remora_tx_begin(fx.w, 0, &tx), 0);
	cr_assert_eq(remora_tx_insert(tx, table, key, v), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
}

static void read_key(uint32_t table, uint64_t key, void *v)
{
	struct remora_tx *tx;

	cr_assert_eq(remora_tx_begin(fx.w, REMORA_TX_READ_ONLY, &tx), 0);
	cr_assert_eq(remora_tx_read(tx, table, key, v), 0, "read %llx", (unsigned long long)key);
	cr_assert_eq(remora_tx_commit(tx), 0);
}

static void add_d_ytd(void *v, long arg)
{
	((struct tpcc_district *)v)->d_ytd += arg;
}

static void add_next_o_id(void *v, long arg)
{
	((struct tpcc_district *)v)->d_next_o_id += (uint32_t)arg;
}

static void add_ol_cnt(void *v, long arg)
{
	((struct tpcc_order *)v)->o_ol_cnt = (uint8_t)(((struct tpcc_order *)v)->o_ol_cnt + arg);
}

TestSuite(tpcc_check, .fini = fx_close, .timeout = 120);

Test(tpcc_check, conditions_hold_after_transactions_ford)
{
	fx_open("ford");
	expect_ok("after the load");
	run_mix();
	expect_ok("after the transactions");
}

Test(tpcc_check, conditions_hold_after_transactions_pandora)
{
	fx_open("pandora");
	run_mix();
	expect_ok("after the transactions");
}

Test(tpcc_check, condition1_catches_a_bumped_d_ytd)
{
	fx_open("ford");
	run_mix();
	modify(TPCC_DISTRICT, tpcc_key(2, 3, 0), sizeof(struct tpcc_district), add_d_ytd, 1);
	expect_violation("condition 1", "warehouse 2");
	modify(TPCC_DISTRICT, tpcc_key(2, 3, 0), sizeof(struct tpcc_district), add_d_ytd, -1);
	expect_ok("after the repair");
}

Test(tpcc_check, condition2_catches_a_bumped_next_o_id)
{
	fx_open("ford");
	run_mix();
	modify(TPCC_DISTRICT, tpcc_key(1, 5, 0), sizeof(struct tpcc_district), add_next_o_id, 1);
	expect_violation("condition 2", "warehouse 1 district 5");
	modify(TPCC_DISTRICT, tpcc_key(1, 5, 0), sizeof(struct tpcc_district), add_next_o_id, -1);
	expect_ok("after the repair");
}

Test(tpcc_check, condition2_catches_an_order_past_next_o_id)
{
	struct tpcc_district d;
	struct tpcc_order o = { .o_ol_cnt = 0 };
	unsigned char save[64];

	fx_open("pandora");
	run_mix();
	read_key(TPCC_DISTRICT, tpcc_key(2, 7, 0), &d);
	o.o_id = d.d_next_o_id + 3;
	insert_key(TPCC_ORDER, tpcc_key(2, 7, o.o_id), &o);
	expect_violation("condition 2", "warehouse 2 district 7");
	delete_key(TPCC_ORDER, tpcc_key(2, 7, o.o_id), save);
	expect_ok("after the repair");
}

Test(tpcc_check, condition3_catches_a_deleted_new_order)
{
	struct tpcc_delivery cur;
	struct tpcc_district d;
	struct tpcc_new_order no;
	unsigned best = 0, bw = 0, bd = 0;
	uint64_t mid = 0;
	char where[64];

	fx_open("ford");
	run_mix();
	/* a row in the middle of [cursor, D_NEXT_O_ID): max and min stay, the count drops */
	for (unsigned w = 1; w <= 2; w++)
		for (unsigned dd = 1; dd <= TPCC_DISTRICTS; dd++) {
			read_key(TPCC_DELIVERY, tpcc_key(w, dd, 0), &cur);
			read_key(TPCC_DISTRICT, tpcc_key(w, dd, 0), &d);
			if (d.d_next_o_id - cur.next_o_id > best) {
				best = d.d_next_o_id - cur.next_o_id;
				bw = w;
				bd = dd;
				mid = (cur.next_o_id + d.d_next_o_id - 1) / 2;
			}
		}
	cr_assert_geq(best, 3, "too few undelivered orders");
	delete_key(TPCC_NEW_ORDER, tpcc_key(bw, bd, mid), &no);
	snprintf(where, sizeof(where), "warehouse %u district %u", bw, bd);
	expect_violation("condition 3", where);
	insert_key(TPCC_NEW_ORDER, tpcc_key(bw, bd, mid), &no);
	expect_ok("after the repair");
}

Test(tpcc_check, condition4_catches_a_changed_ol_cnt)
{
	fx_open("ford");
	run_mix();
	modify(TPCC_ORDER, tpcc_key(2, 4, 5), sizeof(struct tpcc_order), add_ol_cnt, 1);
	expect_violation("condition 4", "warehouse 2 district 4");
	modify(TPCC_ORDER, tpcc_key(2, 4, 5), sizeof(struct tpcc_order), add_ol_cnt, -1);
	expect_ok("after the repair");
}

Test(tpcc_check, condition4_catches_a_deleted_order_line)
{
	struct tpcc_order_line ol;
	uint64_t key = tpcc_ol_key(1, 9, 11, 3);

	fx_open("pandora");
	run_mix();
	delete_key(TPCC_ORDER_LINE, key, &ol);
	expect_violation("condition 4", "warehouse 1 district 9");
	insert_key(TPCC_ORDER_LINE, key, &ol);
	expect_ok("after the repair");
}

/* ---- `remora check` attached to the memory node ----------------------------------------- */

/* Runs the CLI with args (a shell command tail); returns the exit status, output in out. */
static int run_cli(const char *args, char *out, size_t len)
{
	const char *bin = getenv("REMORA_BIN");
	char cmd[1024];
	size_t n = 0;
	FILE *f;
	int st;

	if (!bin || !*bin)
		cr_skip_test("REMORA_BIN is not set (run the suite through meson test)");
	snprintf(cmd, sizeof(cmd), "%s %s 2>&1", bin, args);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	while (n + 1 < len && fgets(out + n, (int)(len - n), f))
		n += strlen(out + n);
	out[n] = '\0';
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int cli_check(const char *extra, char *out, size_t len)
{
	char args[768];

	snprintf(args, sizeof(args), "check --workload tpcc --warehouses " WAREHOUSES
		 " --scale " SCALE " --room " ROOM " --seed %d --cluster %s --mn-addrs %s "
		 "--protocol %s %s", SEED, fx.name, fx.addr, fx.protocol, extra);
	return run_cli(args, out, len);
}

Test(tpcc_check, remora_check_attaches_and_reports)
{
	char out[2048], path[64];
	FILE *f;
	int rc;

	fx_open("ford");
	run_mix();
	rc = cli_check("", out, sizeof(out));
	cr_assert_eq(rc, 0, "exit %d: %s", rc, out);
	cr_expect(strstr(out, "ok: TPC-C consistency conditions 1-4 hold") != NULL, "%s", out);

	modify(TPCC_DISTRICT, tpcc_key(1, 1, 0), sizeof(struct tpcc_district), add_d_ytd, 100);
	rc = cli_check("", out, sizeof(out));
	cr_expect_eq(rc, 1, "exit %d: %s", rc, out);
	cr_expect(strstr(out, "VIOLATION") && strstr(out, "condition 1"), "%s", out);

	/* a --result file that is not remora's: one line, exit 2, nothing checked */
	snprintf(path, sizeof(path), "/tmp/tpcck%d.json", (int)getpid());
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs("{\"tool\": \"fio\", \"jobs\": []}\n", f);
	fclose(f);
	snprintf(out, sizeof(out), "--result %s", path);
	{
		char args[256];

		snprintf(args, sizeof(args), "check --result %s --cluster %s --mn-addrs %s", path,
			 fx.name, fx.addr);
		rc = run_cli(args, out, sizeof(out));
	}
	unlink(path);
	cr_expect_eq(rc, 2, "exit %d: %s", rc, out);
	cr_expect(strstr(out, "not a remora bench result") != NULL, "%s", out);
	cr_expect_eq(strchr(out, '\n'), out + strlen(out) - 1, "not one line: %s", out);

	rc = cli_check("--warehouses 0", out, sizeof(out));
	cr_expect_eq(rc, 2, "exit %d: %s", rc, out);
	cr_expect(strstr(out, "--warehouses") != NULL, "%s", out);
}

/* SmallBank through `remora check --result`: its total needs the run's committed deposits. */
extern const struct wl_desc wl_smallbank;

static void write_result(const char *path, int64_t delta)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	fprintf(f, "{\"tool\": \"remora bench\", \"workload\": \"smallbank\", \"seed\": %d, "
		"\"params\": {\"accounts\": \"500\"}, \"accumulators\": {\"delta_cents\": %lld}}\n",
		SEED, (long long)delta);
	fclose(f);
}

Test(tpcc_check, remora_check_takes_smallbank_deltas_from_a_result)
{
	struct wl_args a = { 0 };
	struct wl_counts cnt = { 0 };
	struct wl_coord c;
	struct wl_input in;
	char path[64], args[512], out[2048];
	int rc;

	wl_args_set(&a, "accounts", "500");
	fx_open_wl("pandora", &wl_smallbank, &a);
	wl_coord_prepare(&fx.wl, &c, fx.w, 0, 0, 0, 0);
	cr_assert_eq(wl_coord_init(&fx.wl, &c), 0);
	for (unsigned i = 0; i < TXNS; i++) {
		fx.wl.desc->gen(&fx.wl, &c, &in);
		rc = wl_run_txn(&fx.wl, &c, &in, &cnt, NULL);
		cr_assert(rc == 0 || rc == WL_USER_ABORT, "%s", remora_strerror(rc));
	}
	wl_coord_fini(&fx.wl, &c);
	cr_assert_neq(c.acc[0], 0, "no deposit committed");

	snprintf(path, sizeof(path), "/tmp/sbk%d.json", (int)getpid());
	snprintf(args, sizeof(args), "check --result %s --cluster %s --mn-addrs %s "
		 "--protocol pandora", path, fx.name, fx.addr);
	write_result(path, c.acc[0]);
	rc = run_cli(args, out, sizeof(out));
	cr_expect_eq(rc, 0, "exit %d: %s", rc, out);
	cr_expect(strstr(out, "smallbank: ok: total balance conserved") != NULL, "%s", out);

	/* the same store against deltas one cent off: the total does not add up */
	write_result(path, c.acc[0] + 1);
	rc = run_cli(args, out, sizeof(out));
	unlink(path);
	cr_expect_eq(rc, 1, "exit %d: %s", rc, out);
	cr_expect(strstr(out, "VIOLATION") && strstr(out, "off by -1"), "%s", out);
}

