/* SPDX-License-Identifier: MIT */
/*
 * Concurrency of the cluster layer, as a plain program (criterion cannot run under
 * ThreadSanitizer): one process hosts a memory node on its own thread, three compute nodes
 * on three threads (each with its heartbeat thread), and a tool thread. Members join, poll
 * their lease and view while their heartbeats run, add to a counter, and leave, three times;
 * the tool reads views and fences an id nobody uses. The counter must be exact and nobody
 * may be declared dead. Members have made-up message locators (the transport's test hook), so
 * their heartbeat threads hand each other's to the transport while the members read them.
 * Exit 0 pass, 1 fail, 77 skip.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <remora/cluster.h>
#include <remora/params.h>

#include "transport/mutate.h"

#define MEMBERS 3
#define ROUNDS 3
#define ADDS 200

static struct remora_params *p;
static struct remora_mn *mn;
static atomic_int failures;
static atomic_bool members_done;

#define CHECK(cond, ...)                                                                   \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);               \
			fprintf(stderr, __VA_ARGS__);                                      \
			fputc('\n', stderr);                                               \
			atomic_fetch_add(&failures, 1);                                    \
		}                                                                          \
	} while (0)

static void *mn_main(void *arg)
{
	(void)arg;
	CHECK(remora_mn_run(mn) == 0, "memory node loop failed");
	return NULL;
}

static void *member_main(void *arg)
{
	int cn = (int)(intptr_t)arg;

	for (unsigned r = 0; r < ROUNDS; r++) {
		struct remora_cluster *cl;
		struct remora_cluster_view v;
		struct remora_chan *ch;
		const struct remora_node_desc *d;
		char err[320];
		int rc = remora_cluster_join(p, cn, &cl, err, sizeof(err));

		CHECK(rc == 0, "cn %d join: %s", cn, err);
		if (rc)
			return NULL;
		d = remora_cluster_desc(cl, 0);
		rc = remora_chan_open(remora_cluster_transport(cl), &ch);
		CHECK(rc == 0, "cn %d channel: %s", cn, remora_strerror(rc));
		for (unsigned i = 0; i < ADDS && !rc; i++) {
			rc = remora_faa(ch, remora_gaddr_make(0, d->regions[0].off),
					d->regions[0].key, 1, NULL);
			CHECK(rc == 0, "cn %d faa: %s", cn, remora_strerror(rc));
			CHECK(remora_cluster_lease_valid(cl), "cn %d lost its lease", cn);
			CHECK(remora_cluster_view(cl, &v) == 0, "cn %d view", cn);
			CHECK(!(v.dead >> cn & 1), "cn %d declared dead", cn);
			if (i % 50 == 0) {
				char loc[REMORA_MSG_LOCATOR_MAX];

				for (uint16_t c = 0; c < MEMBERS; c++)
					rt_transport_msg_peer(remora_cluster_transport(cl), c,
								  loc, sizeof(loc));
				usleep(2000); /* let a few heartbeats interleave */
			}
		}
		if (!rc)
			remora_chan_close(ch);
		remora_cluster_leave(cl);
	}
	return NULL;
}

static void *tool_main(void *arg)
{
	struct remora_cluster *tool = arg;

	while (!atomic_load(&members_done)) {
		struct remora_cluster_view v, w;

		CHECK(remora_cluster_view(tool, &v) == 0, "tool view: %s",
		      remora_cluster_errmsg(tool));
		remora_mn_view(mn, &w);
		CHECK((v.dead & 7) == 0 && (w.dead & 7) == 0, "a member was declared dead");
		usleep(1000);
	}
	CHECK(remora_cluster_fence(tool, 3) == 0, "fence: %s", remora_cluster_errmsg(tool));
	return NULL;
}

static int set(const char *name, const char *value)
{
	return remora_params_set(p, name, value, REMORA_SRC_FLAG, "stress");
}

int main(void)
{
	struct remora_mn_cfg cfg = { .size = sizeof(cfg), .id = 0, .port = 0, .signal_fd = -1 };
	struct remora_transport_cfg tcfg;
	struct remora_cluster *tool;
	struct remora_cluster_view v;
	struct remora_chan *ch;
	pthread_t mt, tt, members[MEMBERS];
	char name[48], addr[48], err[320];
	uint64_t counter = 0;
	int rc;

	if (remora_params_create(&p))
		return 1;
	snprintf(name, sizeof(name), "stress%d", (int)getpid());
	if (set("cluster", name) || set("pool_size", "1M") || set("cn", "4") ||
	    set("heartbeat_ms", "5") || set("lease_ms", "5000") || remora_params_check(p)) {
		fprintf(stderr, "FAIL parameters: %s\n", remora_params_errmsg(p));
		return 1;
	}
	cfg.params = p;
	rt_transport_test_msg_locator("stress-");
	rc = remora_mn_open(&cfg, &mn, err, sizeof(err));
	if (rc == -REMORA_ENOBACKEND) {
		printf("SKIP: %s\n", err);
		return 77;
	}
	if (rc) {
		fprintf(stderr, "FAIL memory node: %s\n", err);
		return 1;
	}
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", remora_mn_port(mn));
	set("mn_addrs", addr);
	pthread_create(&mt, NULL, mn_main, NULL);
	rc = remora_cluster_join(p, -1, &tool, err, sizeof(err));
	CHECK(rc == 0, "tool join: %s", err);
	if (rc) {
		remora_mn_stop(mn);
		pthread_join(mt, NULL);
		goto out;
	}
	pthread_create(&tt, NULL, tool_main, tool);
	for (intptr_t i = 0; i < MEMBERS; i++)
		pthread_create(&members[i], NULL, member_main, (void *)i);
	for (unsigned i = 0; i < MEMBERS; i++)
		pthread_join(members[i], NULL);
	atomic_store(&members_done, true);
	pthread_join(tt, NULL);

	remora_mn_view(mn, &v);
	CHECK(v.alive == 0, "members left but view says alive %#llx", (unsigned long long)v.alive);
	CHECK(v.dead == 1u << 3, "dead %#llx, expected only the fenced id 3",
	      (unsigned long long)v.dead);
	if (remora_chan_open(remora_cluster_transport(tool), &ch) == 0) {
		const struct remora_node_desc *d = remora_cluster_desc(tool, 0);

		CHECK(remora_read(ch, remora_gaddr_make(0, d->regions[0].off), d->regions[0].key,
				  &counter, sizeof(counter)) == 0,
		      "read counter");
		remora_chan_close(ch);
	}
	CHECK(counter == MEMBERS * ROUNDS * ADDS, "counter %llu, expected %u",
	      (unsigned long long)counter, MEMBERS * ROUNDS * ADDS);
	CHECK(remora_cluster_shutdown(tool) == 0, "shutdown: %s", remora_cluster_errmsg(tool));
	pthread_join(mt, NULL);
	remora_cluster_leave(tool);
out:
	remora_mn_close(mn);
	remora_cluster_transport_cfg(p, -1, &tcfg);
	remora_transport_cleanup(&tcfg);
	remora_cluster_key_remove(p);
	remora_params_destroy(p);
	if (atomic_load(&failures))
		return 1;
	printf("PASS: %d members x %d rounds x %d FAA, heartbeats every 5 ms, no one dead\n",
	       MEMBERS, ROUNDS, ADDS);
	return 0;
}
