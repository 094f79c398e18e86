/* SPDX-License-Identifier: MIT */
/* ZooKeeper membership (see zk.h). */
#include "zk.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <remora/error.h>

#include "remora_config.h"

#if REMORA_HAVE_ZK
#define THREADED /* the synchronous API of the multi-threaded client */
#include <zookeeper/zookeeper.h>

struct clzk {
	zhandle_t *zh;
	char dir[128]; /* /remora/<cluster> */
	int cn;
	int lease_ms;
	int expired;                    /* atomic */
	uint64_t disconnected_ns;       /* atomic; 0: connected */
};

static uint64_t zk_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

bool clzk_built(void)
{
	return true;
}

/* Session events only (no znode watches are set). */
static void zk_watch(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
	struct clzk *z = ctx;

	(void)zh, (void)path;
	if (type != ZOO_SESSION_EVENT || !z)
		return;
	if (state == ZOO_CONNECTED_STATE)
		__atomic_store_n(&z->disconnected_ns, 0, __ATOMIC_RELEASE);
	else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE)
		__atomic_store_n(&z->expired, 1, __ATOMIC_RELEASE);
	else if (!__atomic_load_n(&z->disconnected_ns, __ATOMIC_ACQUIRE))
		__atomic_store_n(&z->disconnected_ns, zk_now_ns(), __ATOMIC_RELEASE);
}

static int zk_err(int zrc, char *err, size_t len, const char *what)
{
	if (err && len)
		snprintf(err, len, "zookeeper: %s: %s", what, zerror(zrc));
	return zrc == ZNODEEXISTS ? -EEXIST : -REMORA_EPROTO;
}

static int zk_mkdir(struct clzk *z, const char *path, char *err, size_t len)
{
	int zrc = zoo_create(z->zh, path, "", 0, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);

	return zrc == ZOK || zrc == ZNODEEXISTS ? 0 : zk_err(zrc, err, len, path);
}

static int zk_setup(struct clzk *z, const char *cluster, char *err, size_t len)
{
	char p[192];
	int rc;

	snprintf(z->dir, sizeof(z->dir), "/remora/%s", cluster);
	rc = zk_mkdir(z, "/remora", err, len);
	if (!rc)
		rc = zk_mkdir(z, z->dir, err, len);
	snprintf(p, sizeof(p), "%s/cn", z->dir);
	if (!rc)
		rc = zk_mkdir(z, p, err, len);
	snprintf(p, sizeof(p), "%s/left", z->dir);
	if (!rc)
		rc = zk_mkdir(z, p, err, len);
	if (rc || z->cn < 0)
		return rc;
	/*
	 * The member znode first, the left mark after: in between a survivor sees cn both
	 * present and left, never absent and unmarked, which it would take for a death.
	 */
	snprintf(p, sizeof(p), "%s/cn/%d", z->dir, z->cn);
	rc = zoo_create(z->zh, p, "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, NULL, 0);
	if (rc == ZNODEEXISTS && err && len) {
		snprintf(err, len, "zookeeper: compute node %d is a member already (%s exists)",
			 z->cn, p);
		return -EEXIST;
	}
	if (rc != ZOK)
		return zk_err(rc, err, len, p);
	snprintf(p, sizeof(p), "%s/left/%d", z->dir, z->cn);
	(void)zoo_delete(z->zh, p, -1); /* a new incarnation of cn: not left any more */
	return 0;
}

int clzk_open(const char *hosts, const char *cluster, int cn, int lease_ms, int connect_ms,
	      struct clzk **out, char *err, size_t errlen)
{
	struct clzk *z = calloc(1, sizeof(*z));
	uint64_t deadline = zk_now_ns() + (uint64_t)connect_ms * 1000000u;
	int rc;

	if (!z)
		return -ENOMEM;
	z->cn = cn;
	z->lease_ms = lease_ms;
	zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
	z->zh = zookeeper_init(hosts, zk_watch, lease_ms, NULL, z, 0);
	if (!z->zh) {
		snprintf(err, errlen, "zookeeper: %s: %s", hosts, strerror(errno));
		free(z);
		return -REMORA_ECONFIG;
	}
	while (zoo_state(z->zh) != ZOO_CONNECTED_STATE && zk_now_ns() < deadline)
		nanosleep(&(struct timespec){ .tv_nsec = 5000000 }, NULL);
	if (zoo_state(z->zh) != ZOO_CONNECTED_STATE) {
		snprintf(err, errlen, "zookeeper: no server of %s answered within %d ms", hosts,
			 connect_ms);
		clzk_close(z);
		return -ETIMEDOUT;
	}
	rc = zk_setup(z, cluster, err, errlen);
	if (rc) {
		clzk_close(z);
		return rc;
	}
	*out = z;
	return 0;
}

/* The compute-node ids among the children of dir/sub. */
static int zk_ids(struct clzk *z, const char *sub, uint64_t *mask)
{
	struct String_vector v = { 0 };
	char p[192];
	int zrc;

	snprintf(p, sizeof(p), "%s/%s", z->dir, sub);
	zrc = zoo_get_children(z->zh, p, 0, &v);
	*mask = 0;
	if (zrc != ZOK)
		return -REMORA_EPROTO;
	for (int i = 0; i < v.count; i++) {
		char *end;
		long id = strtol(v.data[i], &end, 10);

		if (!*end && id >= 0 && id < 64)
			*mask |= UINT64_C(1) << id;
	}
	deallocate_String_vector(&v);
	return 0;
}

int clzk_members(struct clzk *z, uint64_t *members, uint64_t *left)
{
	int rc = zk_ids(z, "cn", members);

	return rc ? rc : zk_ids(z, "left", left);
}

bool clzk_lost(struct clzk *z, char *why, size_t len)
{
	uint64_t since = __atomic_load_n(&z->disconnected_ns, __ATOMIC_ACQUIRE);

	if (__atomic_load_n(&z->expired, __ATOMIC_ACQUIRE)) {
		snprintf(why, len, "zookeeper: the session of this compute node expired");
		return true;
	}
	if (since && zk_now_ns() - since >= (uint64_t)z->lease_ms * 1000000u) {
		snprintf(why, len, "zookeeper: disconnected for %d ms (the session timeout): the "
			 "session may have expired", z->lease_ms);
		return true;
	}
	return false;
}

void clzk_leave(struct clzk *z)
{
	char p[192];

	if (!z)
		return;
	if (z->cn >= 0) {
		snprintf(p, sizeof(p), "%s/left/%d", z->dir, z->cn);
		(void)zoo_create(z->zh, p, "", 0, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0);
	}
	clzk_close(z);
}

void clzk_close(struct clzk *z)
{
	if (!z)
		return;
	zookeeper_close(z->zh);
	free(z);
}

#else /* no ZooKeeper client in this build */

bool clzk_built(void)
{
	return false;
}

int clzk_open(const char *hosts, const char *cluster, int cn, int lease_ms, int connect_ms,
	      struct clzk **out, char *err, size_t errlen)
{
	(void)hosts, (void)cluster, (void)cn, (void)lease_ms, (void)connect_ms, (void)out;
	snprintf(err, errlen, "membership = zookeeper: this build has no ZooKeeper client "
		 "(install libzookeeper-mt-dev and rebuild)");
	return -REMORA_ECONFIG;
}

int clzk_members(struct clzk *z, uint64_t *members, uint64_t *left)
{
	(void)z;
	*members = *left = 0;
	return -REMORA_ECONFIG;
}

bool clzk_lost(struct clzk *z, char *why, size_t len)
{
	(void)z, (void)why, (void)len;
	return false;
}

void clzk_leave(struct clzk *z)
{
	(void)z;
}

void clzk_close(struct clzk *z)
{
	(void)z;
}

#endif
