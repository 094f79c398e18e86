/* SPDX-License-Identifier: MIT */
/*
 * The parameter table: types, precedence default < file < env < flag, provenance, and the
 * exact one-line errors for bad config lines, variables and flags.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <remora/cluster.h>
#include <remora/params.h>
#include <remora/transport.h>

#include "cutil.h"

static struct remora_params *p;
static char dir[64];
static char path[128];

static void setup(void)
{
	cr_assert_eq(remora_params_create(&p), 0);
	snprintf(dir, sizeof(dir), "/tmp/remora-params-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/cluster.ini", dir);
}

static void teardown(void)
{
	remora_params_destroy(p);
	unlink(path);
	rmdir(dir);
}

TestSuite(params, .init = setup, .fini = teardown, .timeout = 20);

static void write_file(const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
}

/* Expects the file to be rejected with exactly "<path>:<line>: <what>". */
static void expect_file_error(const char *text, unsigned line, const char *what)
{
	char want[512];

	write_file(text);
	snprintf(want, sizeof(want), "%s:%u: %s", path, line, what);
	cr_assert_lt(remora_params_load_file(p, path), 0);
	cr_assert_str_eq(remora_params_errmsg(p), want);
}

static int flag(const char *arg)
{
	char *argv[] = { (char *)arg, NULL };
	int i = 0;

	return remora_params_parse_flag(p, 1, argv, &i);
}

Test(params, defaults_come_from_the_table)
{
	cr_assert_eq(remora_params_size(p, REMORA_P_POOL_SIZE), 64u << 20);
	cr_assert_str_eq(remora_params_str(p, REMORA_P_BACKEND), "shm");
	cr_assert_eq(remora_params_int(p, REMORA_P_NUMA_NODE), -1);
	cr_assert_eq(remora_params_bool(p, REMORA_P_HUGEPAGES), false);
	cr_assert_eq(remora_params_src(p, REMORA_P_THREADS), REMORA_SRC_DEFAULT);
	cr_assert_str_eq(remora_params_origin(p, REMORA_P_THREADS), "default");
}

Test(params, every_default_parses_and_names_are_unique)
{
	for (unsigned i = 0; i < REMORA_P__COUNT; i++) {
		const struct remora_param_def *d = remora_param_def((enum remora_param_id)i);

		cr_assert_eq(remora_params_set(p, d->name, d->def, REMORA_SRC_FLAG, "test"), 0,
			     "default of %s: %s", d->name, remora_params_errmsg(p));
		cr_assert_eq(remora_param_find(d->name), (int)i, "name %s not unique", d->name);
		cr_assert_not_null(d->help);
	}
}

Test(params, precedence_default_file_env_flag)
{
	char *env[] = { "REMORA_THREADS=3", "REMORA_COROS=5", NULL };

	write_file("[cluster]\nthreads = 2\ncoros = 4\npool_size = 8M\n");
	cr_assert_eq(flag("--threads=7"), 1);
	cr_assert_eq(remora_params_load_env(p, env), 0, "%s", remora_params_errmsg(p));
	cr_assert_eq(remora_params_load_file(p, path), 0, "%s", remora_params_errmsg(p));
	cr_assert_eq(remora_params_check(p), 0, "%s", remora_params_errmsg(p));

	/* flag beats env beats file beats default, whatever order they were applied in */
	cr_assert_eq(remora_params_int(p, REMORA_P_THREADS), 7);
	cr_assert_str_eq(remora_params_origin(p, REMORA_P_THREADS), "flag --threads");
	cr_assert_eq(remora_params_int(p, REMORA_P_COROS), 5);
	cr_assert_str_eq(remora_params_origin(p, REMORA_P_COROS), "env REMORA_COROS");
	cr_assert_eq(remora_params_size(p, REMORA_P_POOL_SIZE), 8u << 20);
	char want[160];
	snprintf(want, sizeof(want), "%s:4", path);
	cr_assert_str_eq(remora_params_origin(p, REMORA_P_POOL_SIZE), want);
	cr_assert_eq(remora_params_src(p, REMORA_P_POOL_SIZE), REMORA_SRC_FILE);
	cr_assert_eq(remora_params_src(p, REMORA_P_MN), REMORA_SRC_DEFAULT);
}

Test(params, flag_forms)
{
	char *argv[] = { "--pool-size", "1G", "--hugepages", "--no-keep-pool", "--profile=cx3",
			 "job" };
	int i = 0;

	cr_assert_eq(remora_params_parse_flag(p, 6, argv, &i), 1);
	cr_assert_eq(i, 2);
	cr_assert_eq(remora_params_size(p, REMORA_P_POOL_SIZE), 1ull << 30);
	cr_assert_eq(remora_params_parse_flag(p, 6, argv, &i), 1);
	cr_assert_eq(i, 3, "a boolean flag takes no value");
	cr_assert(remora_params_bool(p, REMORA_P_HUGEPAGES));
	cr_assert_eq(remora_params_parse_flag(p, 6, argv, &i), 1);
	cr_assert_not(remora_params_bool(p, REMORA_P_KEEP_POOL));
	cr_assert_eq(remora_params_parse_flag(p, 6, argv, &i), 1);
	cr_assert_str_eq(remora_params_str(p, REMORA_P_PROFILE), "cx3");
	cr_assert_eq(remora_params_int(p, REMORA_P_PROFILE), 2, "enum index of cx3");
	cr_assert_eq(remora_params_parse_flag(p, 6, argv, &i), 0, "not a flag");
	cr_assert_eq(i, 5);
	cr_assert_eq(flag("--not-a-param=1"), 0);
}

Test(params, sizes)
{
	static const struct {
		const char *text;
		unsigned long long bytes;
	} ok[] = { { "4096", 4096 }, { "4K", 4096 }, { "64m", 64ull << 20 },
		   { "2GiB", 2ull << 30 }, { "1T", 1ull << 40 }, { "8KB", 8192 } };
	static const char *const bad[] = { "abc", "", "-4K", "4X", "1.5G", "4K4", "2T" };

	for (unsigned i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		cr_assert_eq(remora_params_set(p, "pool_size", ok[i].text, REMORA_SRC_FLAG, "t"), 0,
			     "%s: %s", ok[i].text, remora_params_errmsg(p));
		cr_assert_eq(remora_params_size(p, REMORA_P_POOL_SIZE), ok[i].bytes, "%s",
			     ok[i].text);
	}
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(remora_params_set(p, "pool_size", bad[i], REMORA_SRC_FLAG, "t"),
			     -REMORA_ECONFIG, "'%s' accepted", bad[i]);
	cr_assert_eq(remora_params_size(p, REMORA_P_POOL_SIZE), 8192,
		     "a rejected value leaves the old one");
}

Test(params, env_errors_name_the_variable)
{
	char *bad_size[] = { "REMORA_POOL_SIZE=abc", NULL };
	char *typo[] = { "REMORA_POOL_SIZ=1M", NULL };
	char *others[] = { "REMORA_DIE_AT_VERB=5", "REMORA_SOMETHING_ELSE_ENTIRELY=1", "PATH=/x",
			   NULL };

	cr_assert_eq(remora_params_load_env(p, bad_size), -REMORA_ECONFIG);
	cr_assert_str_eq(remora_params_errmsg(p),
			 "REMORA_POOL_SIZE: 'abc' is not a size (bytes, or with K/M/G/T: 64M, 1G)");
	cr_assert_eq(remora_params_load_env(p, typo), -REMORA_ECONFIG);
	cr_assert_str_eq(remora_params_errmsg(p),
			 "REMORA_POOL_SIZ: unknown parameter (did you mean REMORA_POOL_SIZE?)");
	cr_assert_eq(remora_params_load_env(p, others), 0, "%s", remora_params_errmsg(p));
}

Test(params, flag_errors_name_the_flag)
{
	cr_assert_eq(flag("--backend=foo"), -REMORA_ECONFIG);
	cr_assert_str_eq(remora_params_errmsg(p), "--backend: 'foo' is not one of shm|rdma|pmem");
	cr_assert_eq(flag("--threads=0"), -REMORA_ECONFIG);
	cr_assert_str_eq(remora_params_errmsg(p), "--threads: '0' is out of range 1..256");
	cr_assert_eq(flag("--hugepages=maybe"), -REMORA_ECONFIG);
	cr_assert_eq(flag("--threads"), -REMORA_ECONFIG);
	cr_assert_str_eq(remora_params_errmsg(p), "--threads: missing value");
	cr_assert_eq(flag("--mn-addrs=localhost"), -REMORA_ECONFIG);
	cr_assert_str_eq(remora_params_errmsg(p),
			 "--mn-addrs: 'localhost' is not host:port (port 1..65535)");
}

Test(params, bad_config_lines)
{
	expect_file_error("[cluster]\nname = x\n", 2,
			  "unknown key 'name' (see remora info --params)");
	remora_params_destroy(p);
	remora_params_create(&p);
	expect_file_error("[cluster]\n\npool_sizee = 64M\n", 3,
			  "unknown key 'pool_sizee' (did you mean 'pool_size'?)");
	remora_params_destroy(p);
	remora_params_create(&p);
	expect_file_error("[cluster]\npool_size = abc\n", 2,
			  "pool_size: 'abc' is not a size (bytes, or with K/M/G/T: 64M, 1G)");
	remora_params_destroy(p);
	remora_params_create(&p);
	expect_file_error("[cluster]\nthreads = 2\nthreads = 3\n", 3,
			  "duplicate key 'threads' (first at line 2)");
	remora_params_destroy(p);
	remora_params_create(&p);
	expect_file_error("; a comment\n[clutser]\nthreads = 2\n", 2,
			  "unknown section [clutser] (expected [cluster], [mn.N] or [cn.N], "
			  "N < 32)");
	remora_params_destroy(p);
	remora_params_create(&p);
	expect_file_error("[cluster]\nthreads\n", 2,
			  "syntax error (expected [section], key = value or a comment)");
	remora_params_destroy(p);
	remora_params_create(&p);
	expect_file_error("[mn.0]\nhost = 127.0.0.1\nport = 99999\n", 3,
			  "port: '99999' is not a port (0..65535)");
	remora_params_destroy(p);
	remora_params_create(&p);
	expect_file_error("[cn.0]\nport = 7000\n", 2,
			  "unknown key 'port' in [cn.0] (expected host)");
}

Test(params, indented_lines_are_keys_not_continuations)
{
	write_file("[cluster]\n  threads = 2\n\tcoros = 3\n");
	cr_assert_eq(remora_params_load_file(p, path), 0, "%s", remora_params_errmsg(p));
	cr_assert_eq(remora_params_int(p, REMORA_P_THREADS), 2);
	cr_assert_eq(remora_params_int(p, REMORA_P_COROS), 3);
}

Test(params, nodes_from_sections)
{
	write_file("[cluster]\nbackend = shm\n"
		   "[mn.0]\nhost = 127.0.0.1\nport = 7100\n"
		   "[mn.1]\nhost = localhost\nport = 7101\n"
		   "[cn.0]\n[cn.1]\n[cn.2]\nhost = 127.0.0.1\n");
	cr_assert_eq(remora_params_load_file(p, path), 0, "%s", remora_params_errmsg(p));
	cr_assert_eq(remora_params_check(p), 0, "%s", remora_params_errmsg(p));
	cr_assert_eq(remora_params_mn_count(p), 2);
	cr_assert_eq(remora_params_cn_count(p), 3);
	struct remora_node_addr a;
	cr_assert_eq(remora_params_mn_addr(p, 1, &a), 0);
	cr_assert_str_eq(a.host, "localhost");
	cr_assert_eq(a.port, 7101);
	cr_assert_eq(remora_params_mn_addr(p, 2, &a), -REMORA_ENODE);
	cr_assert(remora_params_have_mn_addrs(p));
}

Test(params, node_sections_must_be_dense)
{
	write_file("[mn.1]\nport = 7001\n");
	cr_assert_eq(remora_params_load_file(p, path), 0, "%s", remora_params_errmsg(p));
	cr_assert_eq(remora_params_check(p), -REMORA_ECONFIG);
	char want[256];
	snprintf(want, sizeof(want), "%s:1: [mn.1] is given but [mn.0] is missing", path);
	cr_assert_str_eq(remora_params_errmsg(p), want);
}

Test(params, counts_must_agree)
{
	write_file("[mn.0]\nport = 7000\n[mn.1]\nport = 7001\n");
	cr_assert_eq(flag("--mn=3"), 1);
	cr_assert_eq(remora_params_load_file(p, path), 0, "%s", remora_params_errmsg(p));
	cr_assert_eq(remora_params_check(p), -REMORA_ECONFIG);
	char want[256];
	snprintf(want, sizeof(want), "--mn: mn = 3 but %s ([mn.N] sections) names 2 memory nodes",
		 path);
	cr_assert_str_eq(remora_params_errmsg(p), want);
}

Test(params, mn_addrs_set_the_count_and_override_sections)
{
	write_file("[mn.0]\nport = 7000\n");
	cr_assert_eq(remora_params_load_file(p, path), 0);
	cr_assert_eq(flag("--mn-addrs=10.0.0.1:9000,10.0.0.2:9001"), 1);
	cr_assert_eq(remora_params_check(p), 0, "%s", remora_params_errmsg(p));
	cr_assert_eq(remora_params_mn_count(p), 2);
	struct remora_node_addr a;
	cr_assert_eq(remora_params_mn_addr(p, 0, &a), 0);
	cr_assert_str_eq(a.host, "10.0.0.1");
	cr_assert_eq(a.port, 9000);
}

Test(params, cross_checks)
{
	cr_assert_eq(flag("--replicas=2"), 1);
	cr_assert_eq(remora_params_check(p), -REMORA_ECONFIG);
	cr_assert_str_eq(remora_params_errmsg(p),
			 "flag --replicas: replicas = 2 exceeds mn = 1 (default)");
	cr_assert_eq(flag("--mn=2"), 1);
	cr_assert_eq(flag("--lease-ms=60"), 1);
	cr_assert_eq(remora_params_check(p), -REMORA_ECONFIG);
	cr_assert_str_eq(remora_params_errmsg(p),
			 "flag --lease-ms: lease_ms = 60 must be at least twice heartbeat_ms = 50 "
			 "(default)");
}

Test(params, only_one_config_file)
{
	write_file("[cluster]\n");
	cr_assert_eq(remora_params_load_file(p, path), 0);
	cr_assert_eq(remora_params_load_file(p, path), -REMORA_ECONFIG);
}

Test(params, missing_file_is_an_errno)
{
	cr_assert_eq(remora_params_load_file(p, "/nonexistent/cluster.ini"), -2 /* ENOENT */);
	cr_assert_str_eq(remora_params_errmsg(p),
			 "/nonexistent/cluster.ini: No such file or directory");
}

/* docs/config.md carries the table `remora info --params-md` prints, between two markers. */
Test(params, docs_config_md_lists_every_parameter)
{
	const char *src = getenv("REMORA_SRCDIR");
	char doc_path[512], *doc = NULL, *gen = NULL, *begin, *end;
	size_t doc_len = 0, gen_len = 0;
	FILE *f, *mem;

	if (!src || !*src)
		cr_skip_test("REMORA_SRCDIR not set (run through meson test)");
	snprintf(doc_path, sizeof(doc_path), "%s/docs/config.md", src);
	f = fopen(doc_path, "r");
	cr_assert_not_null(f, "%s missing", doc_path);
	cr_assert_geq(getdelim(&doc, &doc_len, '\0', f), 0);
	fclose(f);
	mem = open_memstream(&gen, &gen_len);
	remora_params_doc_table(mem);
	fclose(mem);
	begin = strstr(doc, "<!-- params:begin -->\n");
	end = strstr(doc, "<!-- params:end -->");
	cr_assert(begin && end && end > begin, "markers missing in docs/config.md");
	begin += strlen("<!-- params:begin -->\n");
	*end = '\0';
	cr_assert_str_eq(begin, gen,
			 "docs/config.md is out of date: replace its table with the output of "
			 "`remora info --params-md`");
	free(doc);
	free(gen);
}

/* Every parameter a built backend declares has an entry of the same name in the table. */
Test(params, backend_parameters_are_in_the_table)
{
	unsigned n = 0;

	for (const char *const *b = remora_backend_names(); *b; b++)
		for (const char *const *name = remora_backend_params(*b); *name; name++, n++)
			cr_assert_geq(remora_param_find(*name), 0,
				      "backend %s declares '%s', which the parameter table lacks", *b,
				      *name);
	cr_assert_null(remora_backend_params("nosuchbackend"));
	cr_log_info("%u backend parameters, each in the table", n);
}

/*
 * The table hands a backend its own parameters through the transport cfg (no environment in
 * between): set ones only, under the backend's names, whatever the source.
 */
Test(params, backend_parameters_reach_the_transport_cfg)
{
	struct remora_transport_cfg cfg;
	const char *const *rdma = remora_backend_params("rdma");

	if (!rdma || !*rdma)
		cr_skip_test("no backend with parameters is built");
	write_file("[cluster]\nrdma_mtu = 1024\n");
	cr_assert_eq(remora_params_load_file(p, path), 0, "%s", remora_params_errmsg(p));
	cr_assert_eq(flag("--rdma-device=rxe9"), 1);
	cr_assert_eq(remora_params_check(p), 0, "%s", remora_params_errmsg(p));
	remora_cluster_transport_cfg(p, -1, &cfg);
	cr_assert_eq(cfg.n_backend_params, 2, "backend params handed over: %u, want 2",
		     cfg.n_backend_params);
	for (uint32_t i = 0; i < cfg.n_backend_params; i++) {
		const struct remora_kv *kv = &cfg.backend_params[i];

		if (strcmp(kv->key, "rdma_device") == 0)
			cr_assert_str_eq(kv->value, "rxe9");
		else
			cr_assert(strcmp(kv->key, "rdma_mtu") == 0 && strcmp(kv->value, "1024") == 0,
				  "unexpected backend parameter %s=%s", kv->key, kv->value);
	}
}

/* The core refuses a parameter no backend has, and passes another backend's over. */
Test(params, transport_refuses_a_parameter_no_backend_has)
{
	struct remora_kv other = { "rdma_device", "rxe9" }, typo = { "rdma_devcie", "rxe9" };
	struct remora_transport_cfg cfg = { .size = sizeof(cfg), .backend = "shm",
					    .cluster = "params-kv", .n_backend_params = 1 };
	struct remora_transport *tp = NULL;
	int rc;

	if (!remora_backend_params("rdma"))
		cr_skip_test("rdma backend not built: no backend declares a parameter");
	cfg.backend_params = &other;
	rc = remora_transport_open(&cfg, &tp);
	cr_assert_eq(rc, 0, "shm with rdma_device set: %d (%s)", rc, remora_last_error());
	remora_transport_close(tp);
	cfg.backend_params = &typo;
	rc = remora_transport_open(&cfg, &tp);
	cr_assert_eq(rc, -REMORA_ECONFIG, "a parameter no backend has: %d, want -REMORA_ECONFIG", rc);
	cr_assert(strstr(remora_last_error(), "'rdma_devcie'"), "message: %s", remora_last_error());
}
