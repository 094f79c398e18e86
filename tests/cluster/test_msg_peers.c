/* SPDX-License-Identifier: MIT */
/*
 * Message locators: remora_msg_locator / remora_msg_set_peer validate their input on every
 * backend; on rdma (skipped without a device, e.g. outside the soft-RoCE guest of
 * scripts/rdma-vm/) a transport of a cluster writes no address file and reaches a peer only
 * once it was given the peer's locator; and `remora run --cn 3 smoke` passes when each compute
 * node has a directory of its own (compute nodes that share no file, as on different hosts),
 * fails under the negative control REMORA_MUTATE=no_msg_peers (the file discovery of
 * before), which passes again when the directory is shared.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <remora/cluster.h>
#include <remora/transport.h>

#include "cutil.h"
#include "transport/mutate.h"

TestSuite(locator, .timeout = 60);
TestSuite(rdma_peers, .timeout = 120);
/* Three clusters one after another, under emulation (~20x slower) in the guest. */
TestSuite(rdma_run, .timeout = 500);

static char cluster[48];

static int open_tp(const char *backend, int self_cn, uint32_t flags, const char *dir,
		   struct remora_transport **tp)
{
	struct remora_transport_cfg cfg = { .size = sizeof(cfg), .backend = backend,
					    .cluster = cluster, .dir = dir, .self_cn = self_cn,
					    .max_cn = 4, .numa_node = -1, .flags = flags };

	return remora_transport_open(&cfg, tp);
}

static void cleanup(const char *backend, const char *dir)
{
	struct remora_transport_cfg cfg = { .size = sizeof(cfg), .backend = backend,
					    .cluster = cluster, .dir = dir, .self_cn = -1,
					    .numa_node = -1 };

	remora_transport_cleanup(&cfg);
}

/* ---- validation (shm: a backend that needs no locator) -------------------------------------- */

Test(locator, set_peer_validates_and_remembers)
{
	struct remora_transport *tp, *tool;
	char buf[REMORA_MSG_LOCATOR_MAX], longest[REMORA_MSG_LOCATOR_MAX + 1];

	cu_name("tloc", cluster, sizeof(cluster));
	cr_assert_eq(open_tp("shm", 0, REMORA_TRANSPORT_MSG_PEERS, NULL, &tp), 0, "%s",
		     remora_last_error());
	cr_assert_eq(remora_msg_locator(tp, buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "", "shm needs no locator");
	cr_assert_eq(remora_msg_locator(tp, buf, 0), -EINVAL);
	cr_assert_eq(remora_msg_locator(tp, NULL, 8), -EINVAL);

	cr_assert_eq(remora_msg_set_peer(tp, 1, "10.0.0.2:4000"), 0);
	rt_transport_msg_peer(tp, 1, buf, sizeof(buf));
	cr_assert_str_eq(buf, "10.0.0.2:4000", "the core forgot the locator");
	cr_assert_eq(remora_msg_set_peer(tp, 1, "10.0.0.2:4000"), 0, "setting it again");
	cr_assert_eq(remora_msg_set_peer(tp, 4, "10.0.0.2:4000"), -REMORA_ENODE, "cn >= max_cn");
	cr_assert(strstr(remora_transport_errmsg(tp), "compute node 4 outside 0..3"), "%s",
		  remora_transport_errmsg(tp));
	cr_assert_eq(remora_msg_set_peer(tp, 0xffff, "a:1"), -REMORA_ENODE);

	static const char *const bad[] = { "has space:1", "tab\t:1", "ctl\x01:1", "del\x7f:1",
					   "high\xc3\xa9:1" };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(remora_msg_set_peer(tp, 2, bad[i]), -EINVAL, "'%s' accepted", bad[i]);
		cr_assert(strstr(remora_transport_errmsg(tp), "not a printable string"), "%s",
			  remora_transport_errmsg(tp));
	}
	cr_assert_eq(remora_msg_set_peer(tp, 2, NULL), -EINVAL);
	memset(longest, 'x', sizeof(longest));
	longest[REMORA_MSG_LOCATOR_MAX] = '\0';
	cr_assert_eq(remora_msg_set_peer(tp, 2, longest), -EINVAL, "128 characters accepted");
	longest[REMORA_MSG_LOCATOR_MAX - 1] = '\0';
	cr_assert_eq(remora_msg_set_peer(tp, 2, longest), 0, "127 characters refused");
	rt_transport_msg_peer(tp, 2, buf, sizeof(buf));
	cr_assert_str_eq(buf, longest);

	cr_assert_eq(remora_msg_set_peer(tp, 1, ""), 0);
	rt_transport_msg_peer(tp, 1, buf, sizeof(buf));
	cr_assert_str_eq(buf, "", "\"\" did not forget the locator");
	remora_transport_close(tp);

	cr_assert_eq(open_tp("shm", -1, 0, NULL, &tool), 0, "%s", remora_last_error());
	cr_assert_eq(remora_msg_set_peer(tool, 1, "10.0.0.2:4000"), -REMORA_ENODE,
		     "a process that is not a compute node has no peers");
	cr_assert_eq(remora_msg_locator(tool, buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "");
	remora_transport_close(tool);
	cleanup("shm", NULL);
}

/* ---- rdma ------------------------------------------------------------------------------------ */

static void need_rdma(void)
{
	cu_need_rdma_device();
	cu_name("tpeer", cluster, sizeof(cluster));
}

static void make_dir(char *buf, size_t len, const char *what)
{
	snprintf(buf, len, "/tmp/remora-%s-XXXXXX", what);
	cr_assert_not_null(mkdtemp(buf), "mkdtemp: %s", strerror(errno));
}

static unsigned files_in(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	unsigned n = 0;

	cr_assert_not_null(d, "%s: %s", dir, strerror(errno));
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* Sends one message from a to cn 1, retrying -EAGAIN for up to ms. */
static int send_within(struct remora_chan *a, const char *msg, int ms)
{
	unsigned long long deadline = cu_now_ms() + (unsigned long long)ms;
	int rc;

	do {
		rc = remora_msg_send(a, 1, msg, (uint32_t)strlen(msg) + 1);
	} while (rc == -EAGAIN && cu_now_ms() < deadline);
	return rc;
}

Test(rdma_peers, a_cluster_transport_writes_no_file_and_needs_the_locator)
{
	struct remora_transport *t0, *t1;
	struct remora_chan *c0, *c1;
	char dir[64], loc[REMORA_MSG_LOCATOR_MAX], got[64];
	uint16_t src = 0xffff;
	int n = -EAGAIN;

	need_rdma();
	make_dir(dir, sizeof(dir), "peers");
	cr_assert_eq(open_tp("rdma", 0, REMORA_TRANSPORT_MSG_PEERS, dir, &t0), 0, "%s",
		     remora_last_error());
	cr_assert_eq(open_tp("rdma", 1, REMORA_TRANSPORT_MSG_PEERS, dir, &t1), 0, "%s",
		     remora_last_error());
	cr_assert_eq(files_in(dir), 0, "a cluster transport published an address file");

	cr_assert_eq(remora_msg_locator(t1, loc, sizeof(loc)), 0);
	cr_assert(strchr(loc, ':') && loc[0], "rdma locator '%s' is not ip:port", loc);
	cr_assert_eq(remora_msg_locator(t1, got, 4), -ENOSPC);
	cr_assert_eq(remora_msg_set_peer(t0, 1, "no-port-here"), -EINVAL);
	cr_assert(strstr(remora_transport_errmsg(t0), "is not ip:port"), "%s",
		  remora_transport_errmsg(t0));
	cr_assert_eq(remora_msg_set_peer(t0, 1, "10.0.0.1:0"), -EINVAL, "port 0 accepted");

	cr_assert_eq(remora_chan_open(t0, &c0), 0);
	cr_assert_eq(remora_chan_open(t1, &c1), 0);
	cr_assert_eq(send_within(c0, "early", 300), -EAGAIN,
		     "cn 1 reached without its locator (a file, or a guess?)");
	cr_assert_eq(remora_msg_set_peer(t0, 1, loc), 0, "%s", remora_transport_errmsg(t0));
	cr_assert_eq(send_within(c0, "hello", 20000), 0, "send once introduced: %s",
		     remora_transport_errmsg(t0));
	for (unsigned long long end = cu_now_ms() + 20000; n == -EAGAIN && cu_now_ms() < end;)
		n = remora_msg_recv(c1, &src, got, sizeof(got));
	cr_assert_eq(n, 6, "receive: %d", n);
	cr_assert_str_eq(got, "hello");
	cr_assert_eq(src, 0);
	cr_assert_eq(files_in(dir), 0, "an address file appeared");

	remora_chan_close(c0);
	remora_chan_close(c1);
	remora_transport_close(t0);
	remora_transport_close(t1);
	cleanup("rdma", dir);
	rmdir(dir);
}

/*
 * remora run --cn 3 smoke on rdma, each compute node with `dir` of its own (--cn-env
 * i:REMORA_DIR=...), so no compute node can read another's files. Returns the exit code;
 * p holds the output.
 */
static int run_smoke(struct cu_proc *p, char dirs[3][128], const char *wait_ms)
{
	char env[3][160];
	const char *argv[] = { "remora", "run", "--backend", "rdma", "--mn", "1", "--cn", "3",
			       "--pool-size", "16M", "--lease-ms", "30000", "--heartbeat-ms",
			       "200", "--cn-env", env[0], "--cn-env", env[1], "--cn-env", env[2],
			       "smoke", "--ops", "50", "--rounds", "20", "--wait-ms", wait_ms,
			       NULL };

	for (unsigned i = 0; i < 3; i++)
		snprintf(env[i], sizeof(env[i]), "%u:REMORA_DIR=%s", i, dirs[i]);
	return cu_run(p, argv, 150000);
}

Test(rdma_run, smoke_across_private_dirs_and_its_negative_control)
{
	char dirs[3][128], shared[128], base[64];
	struct cu_proc p;
	int rc;

	need_rdma();
	cu_bin();
	/*
	 * 1. Directories that do not even exist: the cluster must neither write nor read one.
	 */
	make_dir(base, sizeof(base), "run");
	for (unsigned i = 0; i < 3; i++)
		snprintf(dirs[i], sizeof(dirs[i]), "%s/cn%u-absent", base, i);
	rc = run_smoke(&p, dirs, "60000");
	cr_assert_eq(rc, 0, "smoke across private dirs failed (exit %d):\n%s\n%s", rc, p.out,
		     p.err);
	cr_assert(strstr(p.out, "smoke: PASS"), "%s", p.out);
	cr_assert(strstr(p.out, "backend rdma"), "not on rdma:\n%s", p.out);
	cu_free(&p);

	/*
	 * 2. Negative control: the control plane carries no locators; each compute node publishes
	 * its file in a directory of its own, where the others cannot find it: the ring stalls.
	 */
	for (unsigned i = 0; i < 3; i++) {
		snprintf(dirs[i], sizeof(dirs[i]), "%s/cn%u", base, i);
		cr_assert_eq(mkdir(dirs[i], 0700), 0, "%s: %s", dirs[i], strerror(errno));
	}
	cr_assert_eq(setenv("REMORA_MUTATE", "no_msg_peers", 1), 0);
	rc = run_smoke(&p, dirs, "5000");
	cr_assert_neq(rc, 0, "negative control: the ring ran without the control plane's "
			     "locators (are the directories really private?):\n%s", p.out);
	cr_assert(strstr(p.err, "ring: no progress from cn") ||
			  strstr(p.out, "ring: no progress from cn"),
		  "the run failed, but not for want of a peer:\n%s\n%s", p.out, p.err);
	cu_free(&p);

	/*
	 * 3. The same mutation with one shared directory passes: the failure above came from the
	 * private directories, not from a broken mutation.
	 */
	snprintf(shared, sizeof(shared), "%s/shared", base);
	cr_assert_eq(mkdir(shared, 0700), 0);
	for (unsigned i = 0; i < 3; i++)
		snprintf(dirs[i], sizeof(dirs[i]), "%s", shared);
	rc = run_smoke(&p, dirs, "60000");
	unsetenv("REMORA_MUTATE");
	cr_assert_eq(rc, 0, "file discovery in a shared dir failed (exit %d):\n%s\n%s", rc, p.out,
		     p.err);
	cu_free(&p);

	for (unsigned i = 0; i < 3; i++) {
		snprintf(dirs[i], sizeof(dirs[i]), "%s/cn%u", base, i);
		cr_expect_eq(files_in(dirs[i]), 0, "%s: files left behind", dirs[i]);
		rmdir(dirs[i]);
	}
	cr_expect_eq(files_in(shared), 0, "%s: files left behind", shared);
	rmdir(shared);
	rmdir(base);
}
