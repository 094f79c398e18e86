/* SPDX-License-Identifier: MIT */
/*
 * The rdma device settings are cluster parameters: rdma_device, rdma_port, rdma_gid_index and
 * rdma_mtu given in a config file or as flags reach the backend, which refuses a value that
 * does not fit this machine with one line naming it, and `remora mn` exits 1. A value that
 * never reached the backend would let it pick its own device and start: the test would see a
 * memory node running instead of refused. Needs an RDMA device (skipped elsewhere; the
 * soft-RoCE guest of scripts/rdma-vm/ runs it and counts a skip as a failure).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "cutil.h"

static char cluster[48];
static char dir[64];
static char path[128];

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/remora-rdmap-XXXXXX");
	cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
	snprintf(path, sizeof(path), "%s/cluster.ini", dir);
	cu_name("rdmap", cluster, sizeof(cluster));
}

static void teardown(void)
{
	unlink(path);
	rmdir(dir);
}

TestSuite(rdma_params, .init = setup, .fini = teardown, .timeout = 120);

static void write_config(const char *key, const char *value)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	fprintf(f, "[cluster]\ncluster = %s\nbackend = rdma\n%s = %s\n", cluster, key, value);
	fclose(f);
}

/* A memory node that started when it should have been refused: stop it (it detached). */
static void stop_started(const char **argv, unsigned n)
{
	struct cu_proc p;

	argv[n] = "--stop";
	argv[n + 1] = NULL;
	cu_run(&p, argv, 60000);
	cu_free(&p);
	argv[n] = NULL;
}

/* Runs remora mn 0 with the given extra arguments; asserts exit 1 and one line naming needle. */
static void expect_refused(const char *const *extra, const char *needle)
{
	const char *argv[16] = { "remora", "mn", "--id", "0" };
	unsigned n = 4;
	struct cu_proc p;
	int rc;

	for (unsigned i = 0; extra[i] && n < 14; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	rc = cu_run(&p, argv, 60000);
	if (rc == 0)
		stop_started(argv, n);
	cr_assert_eq(rc, 1, "remora mn %s %s: exit %d, want 1 (a value that did not reach the "
		     "backend lets it start); stderr: %s", extra[0], extra[1], rc, p.err);
	cr_assert(strstr(p.err, needle), "message does not name '%s': %s", needle, p.err);
	cr_assert(strchr(p.err, '\n') == p.err + strlen(p.err) - 1, "not one line: %s", p.err);
	cr_assert_eq(cu_leftovers(cluster), 0, "files of cluster %s left behind", cluster);
	cu_free(&p);
}

Test(rdma_params, config_file_values_reach_the_backend)
{
	static const struct {
		const char *key, *value, *needle;
	} cases[] = {
		{ "rdma_device", "nosuchdev9", "'nosuchdev9'" },
		{ "rdma_port", "200", "rdma_port=200" },
		{ "rdma_gid_index", "100000", "rdma_gid_index=100000" },
		{ "rdma_mtu", "3000", "rdma_mtu='3000'" },
		{ "rdma_qp_timeout", "40", "rdma_qp_timeout='40'" },
	};
	const char *const extra[] = { "--config", path, NULL };

	cu_need_rdma_device();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		write_config(cases[i].key, cases[i].value);
		expect_refused(extra, cases[i].needle);
	}
}

Test(rdma_params, flags_reach_the_backend_and_override_the_file)
{
	const char *const device[] = { "--backend", "rdma", "--cluster", cluster,
				       "--rdma-device", "nosuchdev9", NULL };
	const char *const mtu_over_file[] = { "--config", path, "--rdma-mtu", "3000", NULL };

	cu_need_rdma_device();
	expect_refused(device, "'nosuchdev9'");
	write_config("rdma_mtu", "256"); /* valid on every device: only the flag can refuse */
	expect_refused(mtu_over_file, "rdma_mtu='3000'");
}
