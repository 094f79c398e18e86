/* SPDX-License-Identifier: MIT */
/*
 * The control plane against an in-process memory node: message validation (garbage, short,
 * oversize, unknown, wrong-length and random frames get an error or a hang-up, and the node
 * keeps serving), membership, leases and fencing, message locators (JOIN, GET_PEER, their
 * generations, malformed ones refused), and the compute-node client library, including members
 * learning each other's locators and the negative control that turns that off.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <remora/cluster.h>
#include <remora/params.h>

#include "cluster/ctl.h"
#include "cutil.h"
#include "transport/mutate.h"

static struct remora_params *p;
static struct remora_mn *mn;
static pthread_t mn_thread;
static bool mn_running;
static int mn_result = -1;
static char cluster[48];
static uint16_t port;
static uint8_t key[RAUTH_KEY_BYTES]; /* the secret the node created, for raw peers */

static void *mn_main(void *arg)
{
	(void)arg;
	mn_result = remora_mn_run(mn);
	return NULL;
}

static void set(const char *name, const char *value)
{
	cr_assert_eq(remora_params_set(p, name, value, REMORA_SRC_FLAG, "test"), 0, "%s",
		     remora_params_errmsg(p));
}

/* A memory node of a fresh cluster, serving from its own thread. */
static void start_mn(const char *lease_ms, const char *heartbeat_ms)
{
	struct remora_mn_cfg cfg = { .size = sizeof(cfg), .id = 0, .port = 0, .signal_fd = -1 };
	char err[320], addr[64];
	int rc;

	cr_assert_eq(remora_params_create(&p), 0);
	set("cluster", cu_name("tctl", cluster, sizeof(cluster)));
	set("pool_size", "1M");
	set("cn", "4");
	set("lease_ms", lease_ms);
	set("heartbeat_ms", heartbeat_ms);
	cr_assert_eq(remora_params_check(p), 0, "%s", remora_params_errmsg(p));
	cfg.params = p;
	rc = remora_mn_open(&cfg, &mn, err, sizeof(err));
	if (rc == -REMORA_ENOBACKEND)
		cr_skip_test("%s", err);
	cr_assert_eq(rc, 0, "remora_mn_open: %s", err);
	port = remora_mn_port(mn);
	cr_assert_neq(port, 0);
	{
		char path[RAUTH_PATH_MAX];

		cr_assert_eq(rauth_key_load(p, false, key, path, sizeof(path), err, sizeof(err)), 0,
			     "%s", err);
	}
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
	set("mn_addrs", addr);
	cr_assert_eq(pthread_create(&mn_thread, NULL, mn_main, NULL), 0);
	mn_running = true;
}

static void default_mn(void)
{
	start_mn("1000", "50");
}

static void stop_mn(void)
{
	struct remora_transport_cfg tcfg;

	if (mn_running) {
		remora_mn_stop(mn);
		pthread_join(mn_thread, NULL);
		mn_running = false;
	}
	if (mn)
		remora_mn_close(mn);
	mn = NULL;
	if (p) {
		remora_cluster_transport_cfg(p, -1, &tcfg);
		remora_transport_cleanup(&tcfg);
		remora_cluster_key_remove(p);
		cr_expect_eq(cu_leftovers(cluster), 0, "files of cluster %s left behind", cluster);
		remora_params_destroy(p);
		p = NULL;
	}
}

/* Leases short enough to run out within a test. */
static void short_lease_mn(void)
{
	start_mn("100", "20");
}

TestSuite(ctl, .init = default_mn, .fini = stop_mn, .timeout = 60);
TestSuite(lease, .init = short_lease_mn, .fini = stop_mn, .timeout = 60);

/* ---- raw peers -------------------------------------------------------------------------- */

static void raw_auth(int fd);

/* A connection that has not authenticated: strangers. */
static int raw_connect_stranger(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct timeval tv = { .tv_sec = 10 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "connect: %s",
		     strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* A connection that proved the cluster secret (HELLO, AUTH), as members' are. */
static int raw_connect(void)
{
	int fd = raw_connect_stranger();

	raw_auth(fd);
	return fd;
}

/* The node hangs up: recv() sees end of file. */
static void expect_hangup(int fd)
{
	char c;

	cr_assert_eq(recv(fd, &c, 1, 0), 0, "connection still open");
}

static void expect_error(int fd, int status, const char *text)
{
	union {
		struct rctl_error_rep e;
		char bytes[RCTL_MAX_MSG];
	} r;

	cr_assert_eq(cu_raw_reply(fd, &r, sizeof(r)), sizeof(r.e), "not an error reply");
	cr_assert_eq(r.e.r.h.type, RCTL_REPLY | RCTL_ERROR);
	cr_assert_eq(r.e.r.status, status, "status %d, expected %d (%s)", r.e.r.status, status,
		     r.e.text);
	cr_assert(strstr(r.e.text, text), "error text '%s' lacks '%s'", r.e.text, text);
}

static void hello(struct rctl_hello *q, uint32_t seq)
{
	memset(q, 0, sizeof(*q));
	rctl_hdr_init(&q->h, RCTL_HELLO, sizeof(*q), seq);
	q->cn = -1;
	q->max_cn = 4;
	snprintf(q->cluster, sizeof(q->cluster), "%s", cluster);
	snprintf(q->backend, sizeof(q->backend), "%s", remora_params_str(p, REMORA_P_BACKEND));
	rauth_nonce(q->nonce);
}

static void raw_auth(int fd)
{
	struct rctl_hello q;
	struct rctl_hello_rep r;
	struct rctl_auth a;
	struct rctl_rep ar;

	hello(&q, 0x4001);
	cu_raw_send(fd, &q, sizeof(q));
	cr_assert_eq(cu_raw_reply(fd, &r, sizeof(r)), sizeof(r), "HELLO refused");
	cr_assert_eq(r.r.status, 0);
	cr_assert(rauth_check(r.proof, key, RAUTH_MN, q.cluster, q.nonce, r.nonce),
		  "the memory node's proof does not check");
	memset(&a, 0, sizeof(a));
	rctl_hdr_init(&a.h, RCTL_AUTH, sizeof(a), 0x4002);
	rauth_proof(a.proof, key, RAUTH_CLIENT, q.cluster, q.nonce, r.nonce);
	cu_raw_send(fd, &a, sizeof(a));
	cr_assert_eq(cu_raw_reply(fd, &ar, sizeof(ar)), sizeof(ar), "AUTH refused");
	cr_assert_eq(ar.status, 0);
}

/* A proper HELLO gets a proper answer: the node is alive and this connection usable. */
static void expect_hello_ok(int fd)
{
	struct rctl_hello q;
	struct rctl_hello_rep r;

	hello(&q, 77);
	cu_raw_send(fd, &q, sizeof(q));
	cr_assert_eq(cu_raw_reply(fd, &r, sizeof(r)), sizeof(r));
	cr_assert_eq(r.r.h.type, RCTL_REPLY | RCTL_HELLO);
	cr_assert_eq(r.r.h.seq, 77);
	cr_assert_eq(r.r.status, 0);
	cr_assert_eq(r.mn, 0);
	cr_assert_str_eq(r.cluster, cluster);
}

static void join_req(int fd, uint16_t cn, uint32_t seq, const char *locator)
{
	struct rctl_join q = { .q = { .cn = cn, .pid = 4242 } };

	rctl_hdr_init(&q.q.h, RCTL_JOIN, sizeof(q), seq);
	snprintf(q.msg_locator, sizeof(q.msg_locator), "%s", locator);
	cu_raw_send(fd, &q, sizeof(q));
}

static void cn_req(int fd, unsigned type, uint16_t cn, uint32_t seq)
{
	struct rctl_cn_req q = { .cn = cn, .pid = 4242 };

	if (type == RCTL_JOIN) {
		join_req(fd, cn, seq, "");
		return;
	}
	rctl_hdr_init(&q.h, type, sizeof(q), seq);
	cu_raw_send(fd, &q, sizeof(q));
}

static struct rctl_peer_rep get_peer(int fd, uint16_t cn, uint32_t seq)
{
	struct rctl_peer_rep r;

	cn_req(fd, RCTL_GET_PEER, cn, seq);
	cr_assert_eq(cu_raw_reply(fd, &r, sizeof(r)), sizeof(r), "GET_PEER: not a peer reply");
	cr_assert_eq(r.r.h.type, RCTL_REPLY | RCTL_GET_PEER);
	cr_assert_eq(r.r.h.seq, seq);
	cr_assert_eq(r.r.status, 0);
	cr_assert_eq(r.cn, cn);
	cr_assert(memchr(r.locator, '\0', sizeof(r.locator)), "locator not terminated");
	return r;
}

static struct rctl_view_rep view_reply(int fd, int status)
{
	struct rctl_view_rep r;

	cr_assert_eq(cu_raw_reply(fd, &r, sizeof(r)), sizeof(r));
	cr_assert_eq(r.r.status, status, "status %d (%s), expected %d", r.r.status,
		     remora_strerror(r.r.status), status);
	return r;
}

/* ---- validation ------------------------------------------------------------------------- */

Test(ctl, hello_and_descriptor)
{
	int fd = raw_connect();
	struct rctl_req q;
	struct rctl_desc_rep r;

	expect_hello_ok(fd);
	rctl_hdr_init(&q.h, RCTL_GET_DESC, sizeof(q), 5);
	cu_raw_send(fd, &q, sizeof(q));
	cr_assert_eq(cu_raw_reply(fd, &r, sizeof(r)), sizeof(r));
	cr_assert_eq(r.r.status, 0);
	cr_assert_eq(r.desc.node, 0);
	cr_assert_eq(r.desc.nregions, 1);
	cr_assert_geq(r.desc.regions[0].len, 1u << 20);
	close(fd);
}

Test(ctl, garbage_gets_an_error_and_a_hangup)
{
	char junk[16];
	int fd = raw_connect();

	memset(junk, 'x', sizeof(junk));
	cu_raw_send(fd, junk, sizeof(junk));
	expect_error(fd, -REMORA_EPROTO, "bad magic");
	expect_hangup(fd);
	close(fd);
	fd = raw_connect();
	expect_hello_ok(fd);
	close(fd);
}

Test(ctl, oversize_and_undersize_lengths_hang_up)
{
	struct rctl_hdr h;
	int fd = raw_connect();

	rctl_hdr_init(&h, RCTL_HELLO, 1u << 20, 1);
	cu_raw_send(fd, &h, sizeof(h));
	expect_error(fd, -REMORA_EPROTO, "length out of bounds");
	expect_hangup(fd);
	close(fd);

	fd = raw_connect();
	rctl_hdr_init(&h, RCTL_MEMBERS, 8, 2);
	cu_raw_send(fd, &h, sizeof(h));
	expect_error(fd, -REMORA_EPROTO, "length out of bounds");
	expect_hangup(fd);
	close(fd);

	fd = raw_connect();
	rctl_hdr_init(&h, RCTL_MEMBERS, sizeof(h), 3);
	h.version = 9;
	cu_raw_send(fd, &h, sizeof(h));
	expect_error(fd, -REMORA_EPROTO, "version");
	expect_hangup(fd);
	close(fd);
}

Test(ctl, short_packet_then_close_leaves_the_node_serving)
{
	struct rctl_hdr h;
	int fd = raw_connect();

	rctl_hdr_init(&h, RCTL_HELLO, sizeof(struct rctl_hello), 1);
	cu_raw_send(fd, &h, 8);
	close(fd);
	fd = raw_connect();
	cu_raw_send(fd, &h, sizeof(h)); /* a header promising a body that never comes */
	close(fd);
	fd = raw_connect();
	expect_hello_ok(fd);
	close(fd);
}

Test(ctl, unknown_type_and_wrong_length_keep_the_connection)
{
	struct {
		struct rctl_hdr h;
		char body[40];
	} m;
	int fd = raw_connect();

	memset(&m, 0, sizeof(m));
	rctl_hdr_init(&m.h, 99, sizeof(m.h), 1);
	cu_raw_send(fd, &m, sizeof(m.h));
	expect_error(fd, -REMORA_EPROTO, "unknown request type 99");
	rctl_hdr_init(&m.h, RCTL_HELLO, sizeof(m), 2);
	cu_raw_send(fd, &m, sizeof(m));
	expect_error(fd, -REMORA_EPROTO, "HELLO request of 56 bytes (expected 136)");
	rctl_hdr_init(&m.h, RCTL_HELLO | RCTL_REPLY, sizeof(m.h), 3);
	cu_raw_send(fd, &m, sizeof(m.h));
	expect_error(fd, -REMORA_EPROTO, "unknown request type");
	expect_hello_ok(fd);
	close(fd);
}

Test(ctl, pipelined_requests_are_answered_in_order)
{
	struct rctl_req q[3];
	struct rctl_view_rep r;
	int fd = raw_connect();

	for (unsigned i = 0; i < 3; i++)
		rctl_hdr_init(&q[i].h, RCTL_MEMBERS, sizeof(q[i]), 100 + i);
	cu_raw_send(fd, q, sizeof(q));
	for (unsigned i = 0; i < 3; i++) {
		cr_assert_eq(cu_raw_reply(fd, &r, sizeof(r)), sizeof(r));
		cr_assert_eq(r.r.h.seq, 100 + i);
		cr_assert_eq(r.r.h.type, RCTL_REPLY | RCTL_MEMBERS);
	}
	close(fd);
}

Test(ctl, mismatched_hello_is_refused)
{
	struct rctl_hello q;
	int fd = raw_connect();

	hello(&q, 1);
	snprintf(q.cluster, sizeof(q.cluster), "someone-else");
	cu_raw_send(fd, &q, sizeof(q));
	expect_error(fd, -REMORA_ECONFIG, "cluster 'someone-else' asked");
	hello(&q, 2);
	q.max_cn = 9;
	cu_raw_send(fd, &q, sizeof(q));
	expect_error(fd, -REMORA_ECONFIG, "cn count 9 asked");
	close(fd);
}

/* Random frames with a fixed seed: every one is answered or hung up on; the node survives. */
Test(ctl, fuzz_random_frames)
{
	union {
		struct rctl_hdr h;
		unsigned char bytes[RCTL_MAX_MSG + 64];
	} m;
	char reply[RCTL_MAX_MSG];
	unsigned seed = 12345, hangups = 0, replies = 0;
	int fd = raw_connect();

	for (unsigned i = 0; i < 400; i++) {
		unsigned type = (unsigned)rand_r(&seed) % 12, len;
		bool sane = rand_r(&seed) % 8 != 0;
		size_t n;

		for (unsigned k = 0; k < sizeof(m.bytes); k++)
			m.bytes[k] = (unsigned char)rand_r(&seed);
		if (type == RCTL_SHUTDOWN)
			type = RCTL_MEMBERS; /* the one request that legitimately stops the node */
		len = rand_r(&seed) % 2 ? (unsigned)rctl_req_len(type)
					: 16 + (unsigned)rand_r(&seed) % (RCTL_MAX_MSG + 32);
		if (len < 16)
			len = 16;
		if (sane)
			rctl_hdr_init(&m.h, type, len, i);
		m.h.seq = i;
		/* Send what the header promises, but never more than a frame may hold. */
		cu_raw_send(fd, m.bytes, m.h.len >= 16 && m.h.len <= RCTL_MAX_MSG ? m.h.len : 16);
		if (m.h.magic == RCTL_MAGIC && m.h.version == RCTL_VERSION && m.h.len >= 16 &&
		    m.h.len <= RCTL_MAX_MSG) {
			n = cu_raw_reply(fd, reply, sizeof(reply));
			cr_assert_gt(n, 0, "frame %u (type %u, len %u) got no reply", i, type,
				     m.h.len);
			cr_assert_eq(((struct rctl_hdr *)reply)->seq, i);
			replies++;
			continue;
		}
		n = cu_raw_reply(fd, reply, sizeof(reply));
		cr_assert_eq(n, sizeof(struct rctl_error_rep), "bad frame %u not refused", i);
		expect_hangup(fd);
		close(fd);
		fd = raw_connect();
		hangups++;
	}
	cr_assert_gt(replies, 100);
	cr_assert_gt(hangups, 10);
	expect_hello_ok(fd);
	close(fd);
}

/* ---- membership and leases -------------------------------------------------------------- */

Test(ctl, join_heartbeat_leave)
{
	int a = raw_connect(), b = raw_connect();
	struct rctl_view_rep r;
	struct remora_cluster_view v;

	cn_req(a, RCTL_JOIN, 1, 1);
	r = view_reply(a, 0);
	cr_assert_eq(r.view.alive, 1u << 1);
	cr_assert_eq(r.view.pid[1], 4242);
	cn_req(b, RCTL_JOIN, 1, 2);
	expect_error(b, -EEXIST, "cn 1 is already a member");
	cn_req(b, RCTL_HEARTBEAT, 1, 3);
	expect_error(b, -REMORA_ENODE, "has not joined on this connection");
	cn_req(b, RCTL_JOIN, 7, 4);
	expect_error(b, -REMORA_ENODE, "cn 7 out of range");
	cn_req(a, RCTL_HEARTBEAT, 1, 5);
	r = view_reply(a, 0);
	cn_req(a, RCTL_LEAVE, 1, 6);
	r = view_reply(a, 0);
	cr_assert_eq(r.view.alive, 0);
	cr_assert_eq(r.view.dead, 0, "leaving is not dying");
	close(a);
	close(b);
	remora_mn_view(mn, &v);
	cr_assert_eq(v.dead, 0);
}

static bool wait_dead(unsigned cn, int ms)
{
	unsigned long long deadline = cu_now_ms() + (unsigned long long)ms;
	struct remora_cluster_view v;

	do {
		remora_mn_view(mn, &v);
		if (v.dead >> cn & 1)
			return true;
		nanosleep(&(struct timespec){ .tv_nsec = 5 * 1000 * 1000 }, NULL);
	} while (cu_now_ms() < deadline);
	return false;
}

Test(ctl, lost_connection_means_dead_and_fenced_for_good)
{
	int a = raw_connect();

	cn_req(a, RCTL_JOIN, 2, 1);
	view_reply(a, 0);
	close(a);
	cr_assert(wait_dead(2, 10000), "cn 2 not declared dead after its connection closed");
	a = raw_connect();
	cn_req(a, RCTL_JOIN, 2, 2);
	expect_error(a, -REMORA_EFENCED, "declared dead and fenced");
	close(a);
}

Test(lease, silent_member_loses_its_lease)
{
	int a = raw_connect();

	cn_req(a, RCTL_JOIN, 3, 1);
	cr_assert_eq(view_reply(a, 0).view.alive, 1u << 3);
	/* no heartbeats: the lease of 100 ms runs out while the connection stays open */
	cr_assert(wait_dead(3, 10000), "cn 3 never declared dead");
	cn_req(a, RCTL_HEARTBEAT, 3, 2);
	view_reply(a, -REMORA_EFENCED);
	close(a);
}

Test(ctl, fence_request)
{
	int a = raw_connect(), b = raw_connect();
	struct rctl_view_rep r;

	cn_req(a, RCTL_JOIN, 0, 1);
	view_reply(a, 0);
	cn_req(b, RCTL_FENCE, 0, 2);
	r = view_reply(b, 0);
	cr_assert_eq(r.view.dead, 1u);
	cr_assert_eq(r.view.alive, 0);
	cn_req(a, RCTL_HEARTBEAT, 0, 3);
	view_reply(a, -REMORA_EFENCED);
	close(a);
	close(b);
}

/* ---- message locators ------------------------------------------------------------------- */

Test(ctl, join_carries_a_locator_get_peer_returns_it_with_its_generation)
{
	int a = raw_connect(), b = raw_connect();
	struct rctl_view_rep r;
	struct rctl_peer_rep pr;
	uint32_t gen;

	join_req(a, 1, 1, "10.0.0.1:4791");
	r = view_reply(a, 0);
	gen = r.msg_gen[1];
	cr_assert_neq(gen, 0, "a member with a locator has a generation");
	for (unsigned i = 0; i < REMORA_MAX_CN; i++)
		if (i != 1)
			cr_assert_eq(r.msg_gen[i], 0, "cn %u has a generation but never joined", i);
	pr = get_peer(b, 1, 2); /* any connection may ask */
	cr_assert_str_eq(pr.locator, "10.0.0.1:4791");
	cr_assert_eq(pr.gen, gen);
	pr = get_peer(b, 2, 3);
	cr_assert_eq(pr.gen, 0, "cn 2 never joined");
	cr_assert_str_eq(pr.locator, "");

	cn_req(a, RCTL_HEARTBEAT, 1, 4);
	cr_assert_eq(view_reply(a, 0).msg_gen[1], gen, "a heartbeat changed the generation");
	join_req(a, 1, 5, "10.0.0.1:4791"); /* joining again as itself, same locator */
	cr_assert_eq(view_reply(a, 0).msg_gen[1], gen, "the same locator got a new generation");
	join_req(a, 1, 6, "[fe80::1]:5000");
	r = view_reply(a, 0);
	cr_assert_neq(r.msg_gen[1], 0);
	cr_assert_neq(r.msg_gen[1], gen, "a new locator kept the old generation");
	gen = r.msg_gen[1];
	pr = get_peer(b, 1, 7);
	cr_assert_str_eq(pr.locator, "[fe80::1]:5000");
	cr_assert_eq(pr.gen, gen);

	cn_req(a, RCTL_LEAVE, 1, 8);
	cr_assert_eq(view_reply(a, 0).msg_gen[1], 0, "a member that left kept its generation");
	pr = get_peer(b, 1, 9);
	cr_assert_eq(pr.gen, 0);
	cr_assert_str_eq(pr.locator, "", "a member that left kept its locator");

	join_req(a, 1, 10, ""); /* a backend that needs no locator (shm, pmem) */
	r = view_reply(a, 0);
	cr_assert_eq(r.view.alive, 1u << 1);
	cr_assert_eq(r.msg_gen[1], 0, "no locator, no generation: peers fetch nothing");
	close(a);
	close(b);
}

Test(ctl, a_dead_member_loses_its_locator)
{
	int a = raw_connect(), b = raw_connect();

	join_req(a, 2, 1, "192.168.1.2:7000");
	cr_assert_neq(view_reply(a, 0).msg_gen[2], 0);
	close(a);
	cr_assert(wait_dead(2, 10000), "cn 2 not declared dead after its connection closed");
	cr_assert_eq(get_peer(b, 2, 2).gen, 0, "a dead member kept its locator");
	cr_assert_str_eq(get_peer(b, 2, 3).locator, "");
	close(b);
}

/* Every malformed locator gets -EINVAL, the connection stays, and nothing changes. */
Test(ctl, malformed_locators_and_peer_requests_are_refused)
{
	static const char *const bad[] = { "has space:1", "tab\t:1", "ctl\x01:1", "high\xff:1" };
	struct rctl_join q = { .q = { .cn = 3, .pid = 1 } };
	struct {
		struct rctl_hdr h;
		char body[24];
	} wrong;
	struct remora_cluster_view v;
	int fd = raw_connect();

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		join_req(fd, 3, i + 1, bad[i]);
		expect_error(fd, -EINVAL, "message locator is not a printable string");
	}
	rctl_hdr_init(&q.q.h, RCTL_JOIN, sizeof(q), 20);
	memset(q.msg_locator, 'a', sizeof(q.msg_locator)); /* no terminating NUL */
	cu_raw_send(fd, &q, sizeof(q));
	expect_error(fd, -EINVAL, "message locator is not a printable string");
	remora_mn_view(mn, &v);
	cr_assert_eq(v.alive, 0, "a refused JOIN made a member");
	cr_assert_eq(v.joined, 0, "a refused JOIN counted as joined");

	/* version 1 JOIN (no locator) and other wrong lengths: refused, connection kept */
	cn_req(fd, RCTL_HEARTBEAT, 3, 21);
	expect_error(fd, -REMORA_ENODE, "has not joined");
	{
		struct rctl_cn_req old = { .cn = 3, .pid = 1 };

		rctl_hdr_init(&old.h, RCTL_JOIN, sizeof(old), 22);
		cu_raw_send(fd, &old, sizeof(old));
		expect_error(fd, -REMORA_EPROTO, "JOIN request of 24 bytes (expected 152)");
	}
	memset(&wrong, 0, sizeof(wrong));
	rctl_hdr_init(&wrong.h, RCTL_GET_PEER, sizeof(wrong), 23);
	cu_raw_send(fd, &wrong, sizeof(wrong));
	expect_error(fd, -REMORA_EPROTO, "GET_PEER request of 40 bytes (expected 24)");
	cn_req(fd, RCTL_GET_PEER, 4, 24);
	expect_error(fd, -REMORA_ENODE, "cn 4 out of range");
	cn_req(fd, RCTL_GET_PEER, 0xffff, 25);
	expect_error(fd, -REMORA_ENODE, "out of range");

	join_req(fd, 3, 26, "10.1.2.3:99"); /* and a proper one still works */
	cr_assert_eq(view_reply(fd, 0).view.alive, 1u << 3);
	close(fd);
}

/* ---- the client library ----------------------------------------------------------------- */

Test(ctl, client_join_lease_view_leave)
{
	struct remora_cluster *cl, *tool;
	struct remora_cluster_view v;
	char err[320];
	int rc;

	rc = remora_cluster_join(p, 1, &cl, err, sizeof(err));
	cr_assert_eq(rc, 0, "join: %s", err);
	cr_assert(remora_cluster_lease_valid(cl));
	cr_assert_eq(remora_cluster_n_mn(cl), 1);
	cr_assert_not_null(remora_cluster_desc(cl, 0));
	cr_assert_null(remora_cluster_desc(cl, 1));
	cr_assert_eq(remora_cluster_view(cl, &v), 0);
	cr_assert_eq(v.alive, 1u << 1);
	cr_assert_eq(v.pid[1], (uint32_t)getpid());

	rc = remora_cluster_join(p, -1, &tool, err, sizeof(err));
	cr_assert_eq(rc, 0, "tool join: %s", err);
	cr_assert_not(remora_cluster_lease_valid(tool), "a tool holds no lease");
	cr_assert_eq(remora_cluster_view(tool, &v), 0);
	cr_assert_eq(v.alive, 1u << 1);

	remora_cluster_leave(cl);
	remora_mn_view(mn, &v);
	cr_assert_eq(v.alive, 0);
	cr_assert_eq(v.dead, 0);
	remora_cluster_leave(tool);
}

Test(ctl, client_fence_is_seen_by_the_member)
{
	struct remora_cluster *cl, *tool;
	char err[320];

	cr_assert_eq(remora_cluster_join(p, 2, &cl, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(remora_cluster_join(p, -1, &tool, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(remora_cluster_fence(tool, 2), 0, "%s", remora_cluster_errmsg(tool));
	/* the next heartbeat (every 50 ms) tells the member; bounded wait, no speed claim */
	for (unsigned i = 0; i < 2000 && remora_cluster_lease_valid(cl); i++)
		nanosleep(&(struct timespec){ .tv_nsec = 5 * 1000 * 1000 }, NULL);
	cr_assert_not(remora_cluster_lease_valid(cl), "fenced member still believes in its lease");
	remora_cluster_leave(cl);
	cr_assert_eq(remora_cluster_join(p, 2, &cl, err, sizeof(err)), -REMORA_EFENCED,
		     "a fenced id joined again: %s", err);
	remora_cluster_leave(tool);
}

Test(ctl, client_refuses_a_mismatched_cluster)
{
	struct remora_params *q;
	struct remora_cluster *cl;
	char err[320], addr[64];

	cr_assert_eq(remora_params_create(&q), 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
	remora_params_set(q, "mn_addrs", addr, REMORA_SRC_FLAG, "t");
	remora_params_set(q, "cn", "4", REMORA_SRC_FLAG, "t");
	remora_params_set(q, "cluster", "not-this-one", REMORA_SRC_FLAG, "t");
	{
		char path[RAUTH_PATH_MAX]; /* with our key: the name alone differs */

		cr_assert_eq(remora_cluster_key_path(p, path, sizeof(path)), 0);
		remora_params_set(q, "key_file", path, REMORA_SRC_FLAG, "t");
	}
	cr_assert_eq(remora_params_check(q), 0);
	cr_assert_eq(remora_cluster_join(q, -1, &cl, err, sizeof(err)), -REMORA_ECONFIG);
	cr_assert(strstr(err, "cluster 'not-this-one' asked"), "%s", err);
	remora_params_destroy(q);
}

Test(ctl, shutdown_stops_the_node)
{
	struct remora_cluster *tool;
	char err[320];

	cr_assert_eq(remora_cluster_join(p, -1, &tool, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(remora_cluster_shutdown(tool), 0, "%s", remora_cluster_errmsg(tool));
	pthread_join(mn_thread, NULL);
	mn_running = false;
	cr_assert_eq(mn_result, 0);
	remora_cluster_leave(tool);
}

/* ---- members learn each other's message locators ---------------------------------------- */

static struct remora_cluster *join_cn(int cn)
{
	struct remora_cluster *cl;
	char err[320];

	cr_assert_eq(remora_cluster_join(p, cn, &cl, err, sizeof(err)), 0, "join cn %d: %s", cn,
		     err);
	return cl;
}

static void locator_of(struct remora_cluster *cl, char *buf)
{
	cr_assert_eq(remora_msg_locator(remora_cluster_transport(cl), buf, REMORA_MSG_LOCATOR_MAX),
		     0);
}

/*
 * Whether every member in cls (index: cn id; NULL: not a member) was given every other member's
 * locator, and "" for the ids that are no members; waits up to ms for it.
 */
static bool all_introduced(struct remora_cluster **cls, unsigned n, int ms)
{
	unsigned long long deadline = cu_now_ms() + (unsigned long long)ms;
	char want[4][REMORA_MSG_LOCATOR_MAX], got[REMORA_MSG_LOCATOR_MAX];

	for (unsigned j = 0; j < n; j++) {
		want[j][0] = '\0';
		if (cls[j])
			locator_of(cls[j], want[j]);
	}
	for (;;) {
		bool ok = true;

		for (unsigned i = 0; i < n && ok; i++)
			for (unsigned j = 0; j < n && ok && cls[i]; j++) {
				if (i == j)
					continue;
				rt_transport_msg_peer(remora_cluster_transport(cls[i]),
							  (uint16_t)j, got, sizeof(got));
				ok = strcmp(got, want[j]) == 0;
			}
		if (ok)
			return true;
		if (cu_now_ms() > deadline)
			return false;
		nanosleep(&(struct timespec){ .tv_nsec = 5 * 1000 * 1000 }, NULL);
	}
}

/* shm needs no locators: the transport's test hook gives each compute node a made-up one. */
Test(ctl, members_learn_each_others_locators_and_forget_who_left)
{
	struct remora_cluster *cls[3];
	char l1[REMORA_MSG_LOCATOR_MAX], l1b[REMORA_MSG_LOCATOR_MAX];

	rt_transport_test_msg_locator("tloc-");
	for (int i = 0; i < 3; i++)
		cls[i] = join_cn(i);
	locator_of(cls[1], l1);
	cr_assert(strncmp(l1, "tloc-1.", 7) == 0, "test locator '%s'", l1);
	cr_assert(all_introduced(cls, 3, 20000), "members were not introduced to each other");

	/* leave and rejoin at once: no view may show the gap, the generation tells */
	remora_cluster_leave(cls[1]);
	cls[1] = join_cn(1);
	locator_of(cls[1], l1b);
	cr_assert_str_neq(l1, l1b);
	cr_assert(all_introduced(cls, 3, 20000), "a rejoined member's new locator was not learned");

	remora_cluster_leave(cls[1]);
	cls[1] = NULL;
	cr_assert(all_introduced(cls, 3, 20000), "the locator of a member that left was kept");
	remora_cluster_leave(cls[0]);
	remora_cluster_leave(cls[2]);
	rt_transport_test_msg_locator(NULL);
}

/*
 * Negative control: with the control plane carrying no locators (the mutation no_msg_peers),
 * the check above fails: nobody is introduced, and the memory node holds no locator.
 */
Test(ctl, negative_control_no_msg_peers_introduces_nobody)
{
	struct remora_cluster *cls[2], *cl;
	char err[640]; /* the list of every environment switch grows with the table */
	int fd;

	rt_transport_test_msg_locator("tloc-");
	cr_assert_eq(setenv("REMORA_MUTATE", "no_msg_peers", 1), 0);
	for (int i = 0; i < 2; i++)
		cls[i] = join_cn(i);
	cr_assert_not(all_introduced(cls, 2, 1000), "introduced without the control plane");
	fd = raw_connect();
	cr_assert_eq(get_peer(fd, 0, 1).gen, 0, "JOIN carried a locator under no_msg_peers");
	close(fd);
	remora_cluster_leave(cls[0]);
	remora_cluster_leave(cls[1]);

	cr_assert_eq(setenv("REMORA_MUTATE", "no_msg_peers,bogus", 1), 0);
	cr_assert_eq(remora_cluster_join(p, 0, &cl, err, sizeof(err)), -REMORA_ECONFIG);
	cr_assert_str_eq(err, "REMORA_MUTATE: unknown mutation 'bogus' (`remora info --mutations` "
			      "lists them)");
	unsetenv("REMORA_MUTATE");
	rt_transport_test_msg_locator(NULL);
}

/* A member that heartbeats outlives several leases (1 s lease, 50 ms heartbeats, 2.5 s). */
Test(ctl, heartbeats_keep_the_lease)
{
	struct remora_cluster *cl;
	struct remora_cluster_view v;
	char err[320];

	cr_assert_eq(remora_cluster_join(p, 3, &cl, err, sizeof(err)), 0, "%s", err);
	nanosleep(&(struct timespec){ .tv_sec = 2, .tv_nsec = 500 * 1000 * 1000 }, NULL);
	cr_assert(remora_cluster_lease_valid(cl));
	remora_mn_view(mn, &v);
	cr_assert_eq(v.alive, 1u << 3);
	cr_assert_eq(v.dead, 0);
	remora_cluster_leave(cl);
}
