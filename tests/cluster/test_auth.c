/* SPDX-License-Identifier: MIT */
/*
 * The authenticated control plane: strangers (no key, a wrong key, another cluster) are refused
 * with the reason and change nothing; the memory node proves the key back; key files that others
 * may read are refused; idle and half-sent connections time out; a flood of idle connections
 * does not lock members out; refused peers are logged at a bounded rate. Each has a negative
 * control: REMORA_MUTATE=skip_auth, no_idle_timeout, no_evict or no_log_limit makes it
 * fail (see docs/cluster.md).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <remora/cluster.h>
#include <remora/params.h>

#include "cluster/ctl.h"
#include "cutil.h"

static struct remora_params *p;
static struct remora_mn *mn;
static pthread_t mn_thread;
static bool mn_running;
static char cluster[48];
static uint16_t port;
static uint8_t key[RAUTH_KEY_BYTES];
static char key_path[RAUTH_PATH_MAX];
static char tmpdir[64];

static void *mn_main(void *arg)
{
	(void)arg;
	remora_mn_run(mn);
	return NULL;
}

static void set(struct remora_params *q, const char *name, const char *value)
{
	cr_assert_eq(remora_params_set(q, name, value, REMORA_SRC_FLAG, "test"), 0, "%s",
		     remora_params_errmsg(q));
}

/* A memory node of a fresh cluster, serving from its own thread; kv: extra name, value pairs. */
static void start_mn(const char *const *kv)
{
	struct remora_mn_cfg cfg = { .size = sizeof(cfg), .id = 0, .port = 0, .signal_fd = -1 };
	char err[320], addr[64];
	int rc;

	cr_assert_eq(remora_params_create(&p), 0);
	set(p, "cluster", cu_name("tau", cluster, sizeof(cluster)));
	set(p, "pool_size", "1M");
	set(p, "cn", "4");
	set(p, "lease_ms", "10000"); /* no test here needs a lease to run out: a loaded host */
	set(p, "heartbeat_ms", "50");
	set(p, "connect_ms", "2000");
	for (; kv && kv[0]; kv += 2)
		set(p, kv[0], kv[1]);
	cr_assert_eq(remora_params_check(p), 0, "%s", remora_params_errmsg(p));
	cfg.params = p;
	rc = remora_mn_open(&cfg, &mn, err, sizeof(err));
	if (rc == -REMORA_ENOBACKEND)
		cr_skip_test("%s", err);
	cr_assert_eq(rc, 0, "remora_mn_open: %s", err);
	port = remora_mn_port(mn);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
	set(p, "mn_addrs", addr);
	cr_assert_eq(rauth_key_load(p, false, key, key_path, sizeof(key_path), err, sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(pthread_create(&mn_thread, NULL, mn_main, NULL), 0);
	mn_running = true;
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
	if (tmpdir[0]) {
		char cmd[96];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
		cr_expect_eq(system(cmd), 0);
		tmpdir[0] = '\0';
	}
}

TestSuite(auth, .fini = stop_mn, .timeout = 120);

/* A private directory for key files of this test. */
static const char *scratch(void)
{
	if (!tmpdir[0]) {
		snprintf(tmpdir, sizeof(tmpdir), "/tmp/remora-auth-%d-XXXXXX", (int)getpid());
		cr_assert_not_null(mkdtemp(tmpdir));
	}
	return tmpdir;
}

/* Writes text to dir/name with mode; returns the path in buf. */
static const char *write_file(const char *name, const char *text, mode_t mode, char *buf,
			      size_t len)
{
	int fd;

	snprintf(buf, len, "%s/%s", scratch(), name);
	unlink(buf);
	fd = open(buf, O_WRONLY | O_CREAT | O_EXCL, 0600);
	cr_assert_geq(fd, 0, "%s: %s", buf, strerror(errno));
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	cr_assert_eq(fchmod(fd, mode), 0);
	close(fd);
	return buf;
}

static const char other_key[] =
	"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";

/* Parameters of a client of this cluster (the same node, cn count), with key_file set. */
static struct remora_params *client_params(const char *cluster_name, const char *key_file)
{
	struct remora_params *q;
	char addr[64];

	cr_assert_eq(remora_params_create(&q), 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
	set(q, "cluster", cluster_name);
	set(q, "pool_size", "1M");
	set(q, "cn", "4");
	set(q, "connect_ms", "2000");
	set(q, "mn_addrs", addr);
	if (key_file)
		set(q, "key_file", key_file);
	cr_assert_eq(remora_params_check(q), 0, "%s", remora_params_errmsg(q));
	return q;
}

/* ---- raw peers -------------------------------------------------------------------------- */

static int raw_connect_to(uint16_t to, int timeout_s)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(to) };
	struct timeval tv = { .tv_sec = timeout_s };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "connect: %s",
		     strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* A peer that has not authenticated. */
static int stranger(void)
{
	return raw_connect_to(port, 10);
}

/* The node hangs up in order: end of file, not a reset. */
static void expect_hangup(int fd)
{
	char c;
	ssize_t n = recv(fd, &c, 1, 0);

	cr_assert_eq(n, 0, "no orderly hang-up: %s", n < 0 ? strerror(errno) : "more data");
}

static void expect_error(int fd, int status, const char *text)
{
	union {
		struct rctl_error_rep e;
		char bytes[RCTL_MAX_MSG];
	} r;

	cr_assert_eq(cu_raw_reply(fd, &r, sizeof(r)), sizeof(r.e), "not an error reply (type %#x)",
		     r.e.r.h.type);
	cr_assert_eq(r.e.r.h.type, RCTL_REPLY | RCTL_ERROR);
	cr_assert_eq(r.e.r.status, status, "status %d, expected %d (%s)", r.e.r.status, status,
		     r.e.text);
	cr_assert(strstr(r.e.text, text), "error text '%s' lacks '%s'", r.e.text, text);
}

static void hello(struct rctl_hello *q, const char *name, uint32_t seq)
{
	memset(q, 0, sizeof(*q));
	rctl_hdr_init(&q->h, RCTL_HELLO, sizeof(*q), seq);
	q->cn = -1;
	q->max_cn = 4;
	snprintf(q->cluster, sizeof(q->cluster), "%s", name);
	snprintf(q->backend, sizeof(q->backend), "%s", remora_params_str(p, REMORA_P_BACKEND));
	rauth_nonce(q->nonce);
}

/* HELLO then AUTH with proof (NULL: the right one); returns the AUTH reply's frame. */
static void handshake(int fd, const uint8_t *proof, struct rctl_hello_rep *r)
{
	struct rctl_hello q;
	struct rctl_auth a;

	hello(&q, cluster, 1);
	cu_raw_send(fd, &q, sizeof(q));
	cr_assert_eq(cu_raw_reply(fd, r, sizeof(*r)), sizeof(*r), "HELLO refused");
	cr_assert_eq(r->r.status, 0);
	memset(&a, 0, sizeof(a));
	rctl_hdr_init(&a.h, RCTL_AUTH, sizeof(a), 2);
	if (proof)
		memcpy(a.proof, proof, sizeof(a.proof));
	else
		rauth_proof(a.proof, key, RAUTH_CLIENT, q.cluster, q.nonce, r->nonce);
	cu_raw_send(fd, &a, sizeof(a));
}

static int member_conn(void)
{
	struct rctl_hello_rep r;
	struct rctl_rep ar;
	int fd = stranger();

	handshake(fd, NULL, &r);
	cr_assert_eq(cu_raw_reply(fd, &ar, sizeof(ar)), sizeof(ar), "AUTH refused");
	cr_assert_eq(ar.status, 0);
	return fd;
}

static void cn_req(int fd, unsigned type, uint16_t cn, uint32_t seq)
{
	struct rctl_join q = { .q = { .cn = cn, .pid = 4242 } };
	size_t len = rctl_req_len(type);

	rctl_hdr_init(&q.q.h, type, len, seq);
	cu_raw_send(fd, &q, len);
}

/* ---- strangers -------------------------------------------------------------------------- */

/*
 * Every request but HELLO and AUTH is refused before authentication, the connection closes, and
 * the node's state does not change: a member keeps its lease, no id is taken or fenced, the
 * node still runs, and no descriptor (with its keys) goes out.
 */
Test(auth, requests_before_hello_are_refused_and_change_nothing)
{
	static const unsigned types[] = { RCTL_FENCE,	  RCTL_SHUTDOWN, RCTL_GET_DESC,
					   RCTL_JOIN,	  RCTL_MEMBERS,	 RCTL_HEARTBEAT,
					   RCTL_LEAVE,	  RCTL_GET_PEER };
	struct remora_cluster *member;
	struct remora_cluster_view v;
	char err[320], want[64];
	int fd;

	start_mn(NULL);
	cr_assert_eq(remora_cluster_join(p, 0, &member, err, sizeof(err)), 0, "%s", err);
	for (unsigned i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		fd = stranger();
		cn_req(fd, types[i], types[i] == RCTL_JOIN ? 1 : 0, 10 + i);
		snprintf(want, sizeof(want), "%s refused: authenticate first",
			 rctl_type_name(types[i]));
		expect_error(fd, -EACCES, want);
		expect_hangup(fd);
		close(fd);
	}
	/* pipelined: one refusal, nothing else served */
	fd = stranger();
	{
		struct rctl_cn_req q[3] = { { .cn = 0 }, { .cn = 0 }, { .cn = 0 } };

		rctl_hdr_init(&q[0].h, RCTL_FENCE, sizeof(q[0]), 1);
		rctl_hdr_init(&q[1].h, RCTL_FENCE, sizeof(q[1]), 2);
		rctl_hdr_init(&q[2].h, RCTL_FENCE, sizeof(q[2]), 3);
		cu_raw_send(fd, q, sizeof(q));
	}
	expect_error(fd, -EACCES, "FENCE refused");
	expect_hangup(fd);
	close(fd);
	/* AUTH without HELLO, and a HELLO of another cluster */
	fd = stranger();
	{
		struct rctl_auth a;

		memset(&a, 0, sizeof(a));
		rctl_hdr_init(&a.h, RCTL_AUTH, sizeof(a), 1);
		cu_raw_send(fd, &a, sizeof(a));
	}
	expect_error(fd, -EACCES, "AUTH before HELLO");
	expect_hangup(fd);
	close(fd);
	fd = stranger();
	{
		struct rctl_hello q;

		hello(&q, "someone-else", 1);
		cu_raw_send(fd, &q, sizeof(q));
	}
	expect_error(fd, -REMORA_ECONFIG, "cluster 'someone-else' asked");
	expect_hangup(fd);
	close(fd);

	remora_mn_view(mn, &v);
	cr_assert_eq(v.alive, 1u, "a stranger changed the members (alive %#llx)",
		     (unsigned long long)v.alive);
	cr_assert_eq(v.dead, 0, "a stranger fenced a member");
	cr_assert_eq(v.joined, 1u, "a stranger took an id");
	cr_assert(remora_cluster_lease_valid(member));
	fd = member_conn(); /* the node still serves members */
	close(fd);
	remora_cluster_leave(member);
}

/*
 * A refused peer that goes on sending still reads why, then an orderly end of the stream: the
 * node reads what it sends until it hangs up, instead of closing on unread bytes (a reset that
 * destroys the answer: "Connection reset by peer").
 */
Test(auth, a_refused_peer_that_keeps_sending_reads_why_not_a_reset)
{
	static char junk[64 * 1024];
	struct rctl_cn_req q = { .cn = 0 };
	int fd;

	start_mn(NULL);
	fd = stranger();
	rctl_hdr_init(&q.h, RCTL_FENCE, sizeof(q), 1);
	memset(junk, 'j', sizeof(junk));
	cu_raw_send(fd, &q, sizeof(q)); /* and at once more than the node reads before refusing */
	for (size_t off = 0; off < sizeof(junk);) {
		ssize_t n = send(fd, junk + off, sizeof(junk) - off, MSG_NOSIGNAL);

		cr_assert_gt(n, 0, "send after the refusal: %s", strerror(errno));
		off += (size_t)n;
	}
	expect_error(fd, -EACCES, "FENCE refused: authenticate first");
	expect_hangup(fd);
	close(fd);
}

Test(auth, wrong_key_is_refused_with_the_reason)
{
	struct remora_params *q;
	struct remora_cluster *cl;
	struct remora_cluster_view v;
	struct rctl_hello_rep r;
	uint8_t zero[RAUTH_PROOF_BYTES] = { 0 };
	char err[1200], want[1200], path[256];
	int fd;

	start_mn(NULL);
	write_file("other.key", other_key, 0600, path, sizeof(path));
	q = client_params(cluster, path);
	cr_assert_eq(remora_cluster_join(q, 1, &cl, err, sizeof(err)), -EACCES, "%s", err);
	snprintf(want, sizeof(want),
		 "memory node 127.0.0.1:%u refused us: wrong cluster key (key file %s)", port,
		 path);
	cr_assert_str_eq(err, want);
	cr_assert_eq(remora_cluster_join(q, -1, &cl, err, sizeof(err)), -EACCES, "a tool too");
	remora_params_destroy(q);
	remora_mn_view(mn, &v);
	cr_assert_eq(v.alive | v.joined | v.dead, 0, "a client with a wrong key joined");

	/* the same with raw frames: a proof that does not check ends the connection */
	fd = stranger();
	handshake(fd, zero, &r);
	expect_error(fd, -EACCES, "wrong cluster key");
	expect_hangup(fd);
	close(fd);

	/* our key and another cluster's name: the name is the reason */
	q = client_params("not-this-one", key_path);
	cr_assert_eq(remora_cluster_join(q, -1, &cl, err, sizeof(err)), -REMORA_ECONFIG);
	snprintf(want, sizeof(want),
		 "memory node 127.0.0.1:%u refused us: cluster 'not-this-one' asked, this memory "
		 "node serves '%s'",
		 port, cluster);
	cr_assert_str_eq(err, want);
	remora_params_destroy(q);

	/* and the right key gets in */
	q = client_params(cluster, key_path);
	cr_assert_eq(remora_cluster_join(q, 1, &cl, err, sizeof(err)), 0, "%s", err);
	remora_cluster_leave(cl);
	remora_params_destroy(q);
}

Test(auth, a_client_without_the_key_file_says_where_it_looked)
{
	struct remora_params *q;
	struct remora_cluster *cl;
	char err[400], path[256];

	start_mn(NULL);
	snprintf(path, sizeof(path), "%s/absent.key", scratch());
	q = client_params(cluster, path);
	cr_assert_eq(remora_cluster_join(q, 1, &cl, err, sizeof(err)), -REMORA_ECONFIG);
	cr_assert(strncmp(err, "no cluster key: key file ", 25) == 0 && strstr(err, path) &&
			  strstr(err, "does not exist"),
		  "%s", err);
	remora_params_destroy(q);
}

/* ---- the memory node proves the key too ------------------------------------------------- */

static int impostor_fd = -1;
static unsigned impostor_frames; /* frames received after AUTH */

/* Answers HELLO with a proof made without the key, accepts any AUTH, counts what follows. */
static void *impostor_main(void *arg)
{
	struct rctl_hello q;
	struct rctl_hello_rep r;
	struct rctl_auth a;
	struct rctl_rep ar;
	struct rctl_hdr h;
	int fd = accept(impostor_fd, NULL, NULL);

	(void)arg;
	if (fd < 0)
		return NULL;
	if (recv(fd, &q, sizeof(q), MSG_WAITALL) == sizeof(q)) {
		memset(&r, 0, sizeof(r));
		rctl_hdr_init(&r.r.h, RCTL_REPLY | RCTL_HELLO, sizeof(r), q.h.seq);
		r.max_cn = q.max_cn;
		r.heartbeat_ms = 50;
		r.lease_ms = 1000;
		memcpy(r.cluster, q.cluster, sizeof(r.cluster));
		memcpy(r.backend, q.backend, sizeof(r.backend));
		rauth_nonce(r.nonce);
		rauth_nonce(r.proof); /* random: it does not hold the key */
		send(fd, &r, sizeof(r), MSG_NOSIGNAL);
	}
	if (recv(fd, &a, sizeof(a), MSG_WAITALL) == sizeof(a)) {
		memset(&ar, 0, sizeof(ar));
		rctl_hdr_init(&ar.h, RCTL_REPLY | RCTL_AUTH, sizeof(ar), a.h.seq);
		send(fd, &ar, sizeof(ar), MSG_NOSIGNAL);
	}
	while (recv(fd, &h, sizeof(h), MSG_WAITALL) == sizeof(h))
		impostor_frames++;
	close(fd);
	return NULL;
}

/* A client does not hand its locator (nor ask for anything) to a node that cannot prove the key. */
Test(auth, a_node_without_the_key_is_not_trusted)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	struct remora_params *q;
	struct remora_cluster *cl;
	char err[1200], want[1200];
	pthread_t th;

	start_mn(NULL); /* for its key file only */
	impostor_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(impostor_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(impostor_fd, 4), 0);
	cr_assert_eq(getsockname(impostor_fd, (struct sockaddr *)&sa, &sl), 0);
	port = ntohs(sa.sin_port);
	cr_assert_eq(pthread_create(&th, NULL, impostor_main, NULL), 0);
	q = client_params(cluster, key_path);
	cr_assert_eq(remora_cluster_join(q, 1, &cl, err, sizeof(err)), -EACCES, "%s", err);
	snprintf(want, sizeof(want),
		 "memory node 127.0.0.1:%u could not prove it holds the cluster key (key file %s): "
		 "an impostor, or a node of another cluster's key",
		 port, key_path);
	cr_assert_str_eq(err, want);
	pthread_join(th, NULL);
	close(impostor_fd);
	cr_assert_eq(impostor_frames, 0, "the client went on after a failed proof");
	remora_params_destroy(q);
}

/* ---- the key file ----------------------------------------------------------------------- */

Test(auth, key_files_others_may_read_are_refused)
{
	struct remora_mn_cfg cfg = { .size = sizeof(cfg), .id = 0, .port = 0, .signal_fd = -1 };
	static const mode_t bad[] = { 0644, 0640, 0604, 0620, 0602 };
	uint8_t k[RAUTH_KEY_BYTES];
	char err[1200], path[256], got[RAUTH_PATH_MAX], want[1200], name[48];
	struct remora_params *q;
	struct remora_mn *m;
	struct stat st;

	/* what a memory node creates: mode 0600, one line of 64 hex digits */
	start_mn(NULL);
	cr_assert_eq(stat(key_path, &st), 0);
	cr_assert_eq(st.st_mode & 07777, 0600, "mode %o", st.st_mode & 07777);
	cr_assert_eq(st.st_size, 65);

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_file("loose.key", other_key, bad[i], path, sizeof(path));
		q = client_params(cluster, path);
		cr_assert_eq(rauth_key_load(q, false, k, got, sizeof(got), err, sizeof(err)),
			     -REMORA_ECONFIG, "mode %o accepted", bad[i]);
		snprintf(want, sizeof(want),
			 "key file %s may be read or written by group or others (mode %04o): "
			 "refused; chmod 600 %s",
			 path, bad[i], path);
		cr_assert_str_eq(err, want);
		remora_params_destroy(q);
	}
	/* a memory node given such a file does not start, and creates no pool */
	cr_assert_eq(remora_params_create(&q), 0);
	set(q, "cluster", cu_name("tak", name, sizeof(name)));
	set(q, "pool_size", "1M");
	set(q, "key_file", path);
	cr_assert_eq(remora_params_check(q), 0);
	cfg.params = q;
	cr_assert_eq(remora_mn_open(&cfg, &m, err, sizeof(err)), -REMORA_ECONFIG);
	cr_assert(strstr(err, "may be read or written by group or others"), "%s", err);
	cr_assert_eq(cu_leftovers(name), 0, "a pool was created");
	remora_params_destroy(q);

	/* chmod 600 fixes it; contents that are no key are refused */
	cr_assert_eq(chmod(path, 0600), 0);
	q = client_params(cluster, path);
	cr_assert_eq(rauth_key_load(q, false, k, got, sizeof(got), err, sizeof(err)), 0, "%s",
		     err);
	cr_assert_eq(k[0], 0x00);
	cr_assert_eq(k[31], 0xff);
	remora_params_destroy(q);
	write_file("short.key", "00112233\n", 0600, path, sizeof(path));
	q = client_params(cluster, path);
	cr_assert_eq(rauth_key_load(q, false, k, got, sizeof(got), err, sizeof(err)),
		     -REMORA_ECONFIG);
	cr_assert(strstr(err, "holds no cluster key (64 hex digits expected)"), "%s", err);
	remora_params_destroy(q);

	/* a key file of another user (planted in a shared directory) or behind a link */
	write_file("planted.key", other_key, 0600, path, sizeof(path));
	q = client_params(cluster, path);
	if (geteuid() == 0 && chown(path, 1, 1) == 0) {
		cr_assert_eq(rauth_key_load(q, false, k, got, sizeof(got), err, sizeof(err)),
			     -REMORA_ECONFIG, "a key file of uid 1 accepted");
		cr_assert(strstr(err, "belongs to uid 1, not to us"), "%s", err);
	} else {
		cr_log_warn("not root: the other-owner case is not exercised");
	}
	remora_params_destroy(q);
	snprintf(want, sizeof(want), "%s.link", path);
	unlink(want);
	cr_assert_eq(symlink(key_path, want), 0);
	q = client_params(cluster, want);
	cr_assert_lt(rauth_key_load(q, false, k, got, sizeof(got), err, sizeof(err)), 0,
		     "a key file behind a symbolic link accepted");
	remora_params_destroy(q);
	unlink(want);
}

/* ---- limits ----------------------------------------------------------------------------- */

Test(auth, idle_and_half_sent_connections_time_out)
{
	static const char *const kv[] = { "ctl_idle_ms", "1000", NULL };
	struct remora_cluster *member;
	struct rctl_hdr h;
	struct rctl_view_rep vr;
	char err[320];
	int silent, half, member_half, idle_member;

	start_mn(kv);
	cr_assert_eq(remora_cluster_join(p, 1, &member, err, sizeof(err)), 0, "%s", err);
	silent = stranger();
	half = stranger();
	rctl_hdr_init(&h, RCTL_HELLO, sizeof(struct rctl_hello), 1);
	cu_raw_send(half, &h, sizeof(h)); /* a header promising a body that never comes */
	member_half = member_conn();
	rctl_hdr_init(&h, RCTL_MEMBERS, sizeof(h), 5);
	cu_raw_send(member_half, &h, 8);
	idle_member = member_conn();

	expect_error(silent, -ETIMEDOUT, "not authenticated within 1000 ms");
	expect_hangup(silent);
	expect_error(half, -ETIMEDOUT, "not authenticated within 1000 ms");
	expect_hangup(half);
	expect_error(member_half, -ETIMEDOUT, "half a request for more than 1000 ms");
	expect_hangup(member_half);
	/* an authenticated connection between requests is no idle stranger: it stays */
	rctl_hdr_init(&h, RCTL_MEMBERS, sizeof(h), 6);
	cu_raw_send(idle_member, &h, sizeof(h));
	cr_assert_eq(cu_raw_reply(idle_member, &vr, sizeof(vr)), sizeof(vr),
		     "an idle member's connection was closed");
	cr_assert_eq(vr.view.alive, 1u << 1);
	cr_assert(remora_cluster_lease_valid(member), "a heartbeating member lost its lease");
	close(silent);
	close(half);
	close(member_half);
	close(idle_member);
	remora_cluster_leave(member);
}

/*
 * 300 idle connections (more than the node's 256) do not keep a member out: newcomers evict the
 * oldest unauthenticated ones, and each address keeps at most ctl_peer_conns of those.
 */
Test(auth, idle_strangers_do_not_lock_members_out)
{
	/* no timeout helps here: only eviction can let the member in */
	static const char *const kv[] = { "ctl_idle_ms", "600000", NULL };
	enum { N = 300 };
	static int fds[N];
	struct remora_cluster *member, *tool;
	struct remora_cluster_view v;
	unsigned evicted = 0;
	char err[320];

	start_mn(kv);
	for (unsigned i = 0; i < N; i++)
		fds[i] = stranger();
	{
		struct rctl_hdr h; /* the newest strangers hold half a frame, too */

		rctl_hdr_init(&h, RCTL_HELLO, sizeof(struct rctl_hello), 1);
		for (unsigned i = N - 10; i < N; i++)
			cu_raw_send(fds[i], &h, 8);
	}
	cr_assert_eq(remora_cluster_join(p, 2, &member, err, sizeof(err)), 0,
		     "a member was locked out by %u idle connections: %s", N, err);
	cr_assert_eq(remora_cluster_join(p, -1, &tool, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(remora_cluster_view(tool, &v), 0);
	cr_assert_eq(v.alive, 1u << 2);
	for (unsigned i = 0; i < N; i++) {
		union {
			struct rctl_error_rep e;
			char bytes[RCTL_MAX_MSG];
		} r;
		ssize_t n = recv(fds[i], &r, sizeof(r.e), MSG_DONTWAIT | MSG_WAITALL);

		if (n == (ssize_t)sizeof(r.e) && r.e.r.status == -EBUSY &&
		    strstr(r.e.text, "evicted"))
			evicted++;
		close(fds[i]);
	}
	cr_assert_geq(evicted, N - 64, "only %u of %u idle strangers were evicted", evicted, N);
	remora_cluster_leave(tool);
	remora_cluster_leave(member);
}

/*
 * Refused strangers that never hang up hold their slot while the node drains them (up to 1 s):
 * one address sending a request on more connections than the node has slots must not fill
 * them, or every newcomer, members too, would be told "too many connections". Past
 * ctl_peer_conns of them the oldest is cut at once, so each one here is answered as a
 * stranger, and a member still gets in.
 */
Test(auth, refused_strangers_that_stay_connected_do_not_lock_members_out)
{
	static const char *const kv[] = { "ctl_idle_ms", "600000", NULL };
	enum { N = 340 }; /* more than the node's 320 slots */
	static int fds[N];
	struct remora_cluster *member;
	char err[320];

	start_mn(kv);
	for (unsigned i = 0; i < N; i++) {
		struct rctl_req q;

		fds[i] = stranger();
		rctl_hdr_init(&q.h, RCTL_MEMBERS, sizeof(q), 1);
		cu_raw_send(fds[i], &q, sizeof(q));
		expect_error(fds[i], -EACCES, "MEMBERS refused: authenticate first");
	}
	cr_assert_eq(remora_cluster_join(p, 2, &member, err, sizeof(err)), 0,
		     "a member was locked out by %u refused connections: %s", N, err);
	for (unsigned i = 0; i < N; i++)
		close(fds[i]);
	remora_cluster_leave(member);
}

/* A stranger connecting from another loopback address (127.0.0.2). */
static int stranger_from_127_0_0_2(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct sockaddr_in me = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	me.sin_addr.s_addr = htonl(0x7f000002);
	cr_assert_eq(bind(fd, (struct sockaddr *)&me, sizeof(me)), 0, "bind 127.0.0.2: %s",
		     strerror(errno));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "connect: %s",
		     strerror(errno));
	return fd;
}

/* Whether the node told fd it was evicted (without waiting: evictions happen at accept). */
static bool was_evicted(int fd)
{
	struct rctl_error_rep e;
	ssize_t n = recv(fd, &e, sizeof(e), MSG_DONTWAIT | MSG_WAITALL);

	return n == (ssize_t)sizeof(e) && e.r.status == -EBUSY && strstr(e.text, "evicted");
}

/*
 * One address that floods churns only its own unauthenticated connections (ctl_peer_conns of
 * them are kept): the older idle connections of another address are not evicted.
 */
Test(auth, a_flooding_address_evicts_only_its_own_connections)
{
	static const char *const kv[] = { "ctl_idle_ms", "600000", "ctl_peer_conns", "8", NULL };
	enum { OTHER = 4, FLOOD = 40 };
	int other[OTHER], flood[FLOOD];
	struct remora_cluster *member;
	unsigned evicted = 0;
	char err[320];

	start_mn(kv);
	for (unsigned i = 0; i < OTHER; i++)
		other[i] = stranger_from_127_0_0_2();
	for (unsigned i = 0; i < FLOOD; i++)
		flood[i] = stranger();
	/* a member from the flooding address still gets in: it is the newest */
	cr_assert_eq(remora_cluster_join(p, 0, &member, err, sizeof(err)), 0, "%s", err);
	for (unsigned i = 0; i < FLOOD; i++) {
		evicted += was_evicted(flood[i]);
		close(flood[i]);
	}
	cr_assert_geq(evicted, FLOOD - 8, "only %u of %u were evicted", evicted, FLOOD);
	for (unsigned i = 0; i < OTHER; i++) {
		cr_assert_not(was_evicted(other[i]),
			      "a connection of 127.0.0.2 was evicted by 127.0.0.1's flood");
		close(other[i]);
	}
	remora_cluster_leave(member);
}

/* ---- the refused-peer log, through the remora binary ------------------------------------ */

static unsigned count_lines(const char *text, const char *needle)
{
	unsigned n = 0;

	for (const char *s = strstr(text, needle); s; s = strstr(s + 1, needle))
		n++;
	return n;
}

/* Sum of N over the lines "refused N more peers". */
static unsigned suppressed_sum(const char *text)
{
	unsigned sum = 0;

	for (const char *s = strstr(text, "refused "); s; s = strstr(s + 1, "refused ")) {
		unsigned n;
		char more[8];

		if (sscanf(s, "refused %u %4s peers", &n, more) == 2 && strcmp(more, "more") == 0)
			sum += n;
	}
	return sum;
}

/* A memory node process of a fresh cluster; returns its port. */
static uint16_t start_mn_process(struct cu_proc *proc, char *name, size_t len)
{
	const char *argv[] = { "remora", "mn",	      "--foreground", "--cluster",
			       cu_name("tal", name, len), "--id",	      "0",
			       "--port",		  "0",	      "--pool-size",
			       "1M",			  NULL };
	const char *s;

	cu_start(proc, argv);
	cu_wait_for(proc, ", port ", 30000);
	s = strstr(proc->err, ", port ");
	return (uint16_t)atoi(s + 7);
}

static void stop_mn_process(struct cu_proc *proc, const char *name)
{
	const char *clean[] = { "remora", "clean", "--cluster", name, NULL };
	struct cu_proc c;

	kill(proc->pid, SIGTERM);
	cu_wait(proc, 30000);
	cr_assert_eq(cu_run(&c, clean, 30000), 0, "%s", c.err);
	cu_free(&c);
	cr_assert_eq(cu_leftovers(name), 0, "files of %s left", name);
}

Test(auth, refused_peers_are_logged_at_a_bounded_rate)
{
	enum { N = 200, PER_SECOND = 10 };
	struct cu_proc proc;
	char name[48];
	unsigned long long t0, seconds;
	unsigned logged, suppressed;
	uint16_t to = start_mn_process(&proc, name, sizeof(name));

	t0 = cu_now_ms();
	for (unsigned i = 0; i < N; i++) {
		struct rctl_req q;
		int fd = raw_connect_to(to, 10);

		rctl_hdr_init(&q.h, RCTL_MEMBERS, sizeof(q), 1);
		cu_raw_send(fd, &q, sizeof(q));
		expect_error(fd, -EACCES, "MEMBERS refused: authenticate first");
		expect_hangup(fd);
		close(fd);
	}
	seconds = (cu_now_ms() - t0) / 1000 + 1;
	/* the count of the last second is written at the node's next tick (at most 1 s) */
	nanosleep(&(struct timespec){ .tv_sec = 2, .tv_nsec = 500 * 1000 * 1000 }, NULL);
	stop_mn_process(&proc, name);
	logged = count_lines(proc.err, "refused 127.0.0.1:");
	suppressed = suppressed_sum(proc.err);
	cr_assert(strstr(proc.err, ": MEMBERS refused: authenticate first (HELLO, then AUTH)\n"),
		  "%s", proc.err);
	cr_assert_eq(logged + suppressed, N, "%u logged + %u counted, %u refused:\n%s", logged,
		     suppressed, N, proc.err);
	cr_assert_leq(logged, PER_SECOND * (seconds + 1),
		      "%u lines for %u refusals in %llu s: not bounded", logged, N, seconds);
	cr_assert_gt(suppressed, 0);
	cu_free(&proc);
}

/* ---- the tools ---------------------------------------------------------------------------- */

/* remora cn and remora mn --stop with another key: one line with the reason; the node lives. */
Test(auth, tools_with_a_wrong_key_are_refused_in_one_line)
{
	struct cu_proc proc, c;
	char name[48], addrs[64], path[256], want[400];
	uint16_t to = start_mn_process(&proc, name, sizeof(name));
	const char *cn[] = { "remora",	  "cn",	  "--cluster", name, "--mn-addrs", addrs,
			     "--key-file", path, "--id",      "0",  "smoke",	   NULL };
	const char *stop[] = { "remora",     "mn", "--cluster", name, "--mn-addrs", addrs,
			       "--key-file", path, "--id",	 "0",  "--stop",     NULL };
	const char *stop_ok[] = { "remora", "mn", "--cluster", name, "--mn-addrs", addrs,
				  "--id",   "0",  "--stop",    NULL };

	snprintf(addrs, sizeof(addrs), "127.0.0.1:%u", to);
	write_file("other.key", other_key, 0600, path, sizeof(path));
	snprintf(want, sizeof(want),
		 "memory node 127.0.0.1:%u refused us: wrong cluster key (key file %s)\n", to,
		 path);

	cr_assert_neq(cu_run(&c, cn, 60000), 0, "remora cn got in with another key");
	cr_assert(strstr(c.err, want), "%s", c.err);
	cr_assert_eq(count_lines(c.err, "\n"), 1, "not one line: %s", c.err);
	cu_free(&c);
	cr_assert_eq(cu_run(&c, stop, 60000), 1, "remora mn --stop got in with another key");
	cr_assert(strstr(c.err, want), "%s", c.err);
	cr_assert_eq(count_lines(c.err, "\n"), 1, "not one line: %s", c.err);
	cu_free(&c);
	cr_assert_eq(kill(proc.pid, 0), 0, "the memory node stopped for a stranger");
	cu_wait_for(&proc, ": wrong cluster key\n", 20000); /* the node logged the stranger */

	cr_assert_eq(cu_run(&c, stop_ok, 60000), 0, "%s", c.err); /* with the key it stops */
	cu_free(&c);
	cu_wait(&proc, 30000);
	cr_assert_eq(cu_exit_code(&proc), 0, "%s", proc.err);
	{
		const char *clean[] = { "remora", "clean", "--cluster", name, NULL };

		cr_assert_eq(cu_run(&c, clean, 30000), 0, "%s", c.err);
		cu_free(&c);
	}
	cr_assert_eq(cu_leftovers(name), 0, "files of %s left", name);
	cu_free(&proc);
}
