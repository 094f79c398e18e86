/* SPDX-License-Identifier: MIT */
/*
 * ZooKeeper membership (runtime/cluster/zk.c) against a real server ($REMORA_TEST_ZK_HOSTS,
 * scripts/zk-local.sh): a node that comes back after a clean leave creates its member znode
 * before it removes its left mark, so a survivor never sees it absent and unmarked (which
 * it would take for a death and fence). The order is read from the server's zxids: the
 * member znode's creation (czxid) comes before the last child change of left/ (its pzxid,
 * the removal of the mark).
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "remora_config.h"
#include "cluster/zk.h"

#if REMORA_HAVE_ZK
#define THREADED
#include <zookeeper/zookeeper.h>
#endif

TestSuite(zk, .timeout = 60);

Test(zk, rejoin_creates_member_before_clearing_left)
{
#if REMORA_HAVE_ZK
	const char *hosts = getenv("REMORA_TEST_ZK_HOSTS");
	char cluster[64], err[256], p[192];
	struct clzk *z;
	struct Stat member, left;
	zhandle_t *zh;

	if (!hosts || !*hosts)
		cr_skip_test("no ZooKeeper server: set REMORA_TEST_ZK_HOSTS");
	snprintf(cluster, sizeof(cluster), "zkorder-%ld", (long)getpid());
	cr_assert_eq(clzk_open(hosts, cluster, 1, 2000, 3000, &z, err, sizeof(err)), 0, "%s", err);
	clzk_leave(z); /* left/1 written, cn/1 gone with the session */
	cr_assert_eq(clzk_open(hosts, cluster, 1, 2000, 3000, &z, err, sizeof(err)), 0, "%s", err);
	zh = zookeeper_init(hosts, NULL, 2000, NULL, NULL, 0);
	cr_assert_not_null(zh);
	for (int i = 0; i < 300 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++)
		usleep(10000);
	snprintf(p, sizeof(p), "/remora/%s/left/1", cluster);
	cr_assert_eq(zoo_exists(zh, p, 0, &left), ZNONODE, "the left mark stayed");
	snprintf(p, sizeof(p), "/remora/%s/cn/1", cluster);
	cr_assert_eq(zoo_exists(zh, p, 0, &member), ZOK);
	snprintf(p, sizeof(p), "/remora/%s/left", cluster);
	cr_assert_eq(zoo_exists(zh, p, 0, &left), ZOK);
	cr_assert_lt(member.czxid, left.pzxid,
		     "the left mark went (zxid %lld) before the member znode came (zxid %lld)",
		     (long long)left.pzxid, (long long)member.czxid);
	zookeeper_close(zh);
	clzk_leave(z);
#else
	cr_skip_test("this build has no ZooKeeper client");
#endif
}
