/* SPDX-License-Identifier: MIT */
/*
 * Conformance: the compute-node RPC layer (runtime/rpc, docs/rpc.md) on the backend under test.
 * A server process (compute node SERVER_CN, one thread per worker) answers requests from the
 * test process and from client children. Covered: the reply reaches the coordinator that asked
 * among many (two client processes x many coroutines x two server workers), batches (N
 * requests in one message, counted on both sides), payloads of one, several and the maximum
 * number of slots (and oversize refused), garbled frames refused, many coroutines parked on
 * deferred replies at once, and calls to a killed server ending with -ETIMEDOUT (or at once
 * with -EHOSTDOWN once the node is marked down) within a bound. Each has a negative control
 * through a mutation of runtime/rpc/mutate.h.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <remora/rpc.h>
#include <remora/sched.h>

#include "rpc/mutate.h"
#include "rpc/wire.h"
#include "tutil.h"

TestSuite(rpc, .fini = tu_fini, .timeout = TU_TIMEOUT);

#define SERVER_CN 1
#define CLIENT_CN 2
#define CLIENT2_CN 3
#define SERVER_WORKERS 2

enum op {
	OP_ECHO,     /* reply: struct echo_hdr, then the request's bytes */
	OP_RAW,      /* reply: the request's bytes */
	OP_SIZE,     /* request: u32 n; reply: n pattern bytes */
	OP_STATS,    /* reply: the worker's struct remora_rpc_stats */
	OP_HOLD,     /* deferred; answered when HOLD_N of them wait (reply: the asker's coord) */
	OP_STOP,
	OP_SEQ,      /* request: u32 seq, counted in order per worker; reply: none */
	OP_SEQ_GET,  /* reply: u32 next expected seq, u32 out of order */
};

struct echo_hdr {
	uint16_t cn, worker, coord, served_by;
	uint32_t index, count;
};

static uint8_t pat(uint32_t i, uint32_t salt)
{
	return (uint8_t)(i * 131u + salt * 7u + (i >> 8));
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- the server ---------------------------------------------------------------------- */

struct server {
	struct remora_transport *tp;
	struct remora_rpc *rpc;
	unsigned hold_n;
	int stop;
	struct {
		struct remora_rpc_ep *ep;
		struct remora_rpc_token held[256];
		unsigned nheld;
		int rc;
		uint32_t seq_next, seq_bad;
	} w[SERVER_WORKERS];
};

static unsigned worker_of(struct server *sv, const struct remora_rpc_req *req)
{
	for (unsigned i = 0; i < SERVER_WORKERS; i++)
		if (sv->w[i].ep == req->ep)
			return i;
	return 0;
}

static int h_echo(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
		  uint32_t *rep_len)
{
	struct echo_hdr e = { req->from.cn, req->from.worker, req->from.coord,
			      (uint16_t)worker_of(arg, req), req->index, req->count };

	if (cap < sizeof(e) + req->len)
		return -ENOSPC;
	memcpy(rep, &e, sizeof(e));
	memcpy((uint8_t *)rep + sizeof(e), req->data, req->len);
	*rep_len = (uint32_t)sizeof(e) + req->len;
	return (int)req->index;
}

static int h_raw(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
		 uint32_t *rep_len)
{
	(void)arg;
	if (cap < req->len)
		return -ENOSPC;
	memcpy(rep, req->data, req->len);
	*rep_len = req->len;
	return 0;
}

static int h_size(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
		  uint32_t *rep_len)
{
	uint32_t n;

	(void)arg;
	if (req->len != sizeof(n))
		return -EINVAL;
	memcpy(&n, req->data, sizeof(n));
	if (n > cap)
		return -ENOSPC;
	for (uint32_t i = 0; i < n; i++)
		((uint8_t *)rep)[i] = pat(i, n);
	*rep_len = n;
	return 0;
}

static int h_stats(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
		   uint32_t *rep_len)
{
	struct remora_rpc_stats st;

	(void)arg;
	if (cap < sizeof(st))
		return -ENOSPC;
	remora_rpc_ep_stats(req->ep, &st);
	memcpy(rep, &st, sizeof(st));
	*rep_len = sizeof(st);
	return 0;
}

static int h_hold(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
		  uint32_t *rep_len)
{
	struct server *sv = arg;
	unsigned w = worker_of(sv, req);

	(void)rep;
	(void)cap;
	(void)rep_len;
	if (sv->w[w].nheld >= 256)
		return -ENOSPC;
	sv->w[w].held[sv->w[w].nheld++] = req->token;
	if (sv->w[w].nheld < sv->hold_n)
		return REMORA_RPC_DEFER;
	/* All of them wait at once: now grant every one, the newest last (this one). */
	for (unsigned i = 0; i + 1 < sv->w[w].nheld; i++) {
		uint16_t coord = sv->w[w].held[i].to.coord;
		int rc = remora_rpc_reply(req->ep, &sv->w[w].held[i], 7, &coord, sizeof(coord));

		if (rc)
			sv->w[w].rc = rc;
	}
	sv->w[w].nheld = 0;
	memcpy(rep, &req->from.coord, sizeof(req->from.coord));
	*rep_len = sizeof(req->from.coord);
	return 7;
}

static int h_seq(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
		 uint32_t *rep_len)
{
	struct server *sv = arg;
	unsigned w = worker_of(sv, req);
	uint32_t seq;

	(void)rep;
	(void)cap;
	(void)rep_len;
	if (req->len != sizeof(seq))
		return -EINVAL;
	memcpy(&seq, req->data, sizeof(seq));
	sv->w[w].seq_bad += seq != sv->w[w].seq_next;
	sv->w[w].seq_next = seq + 1;
	return 0;
}

static int h_seq_get(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
		     uint32_t *rep_len)
{
	struct server *sv = arg;
	unsigned w = worker_of(sv, req);
	uint32_t v[2] = { sv->w[w].seq_next, sv->w[w].seq_bad };

	if (cap < sizeof(v))
		return -ENOSPC;
	memcpy(rep, v, sizeof(v));
	*rep_len = sizeof(v);
	return 0;
}

static int h_stop(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
		  uint32_t *rep_len)
{
	(void)req;
	(void)rep;
	(void)cap;
	(void)rep_len;
	__atomic_store_n(&((struct server *)arg)->stop, 1, __ATOMIC_RELEASE);
	return 0;
}

struct server_thread {
	struct server *sv;
	unsigned w;
};

static void *server_worker(void *argp)
{
	struct server_thread *t = argp;
	struct server *sv = t->sv;
	uint64_t until = 0, bound = now_ms() + (uint64_t)TU_WAIT_MS * 3;

	for (;;) {
		remora_rpc_poll(sv->w[t->w].ep);
		if (now_ms() > bound)
			__atomic_store_n(&sv->stop, 1, __ATOMIC_RELEASE); /* a lost test */
		if (__atomic_load_n(&sv->stop, __ATOMIC_ACQUIRE)) {
			/* let the last replies out */
			if (!until)
				until = now_ms() + 100;
			else if (now_ms() > until)
				break;
		}
	}
	return NULL;
}

struct server_args {
	unsigned hold_n;
	const char *mutation; /* on the server's rpc, or NULL */
};

static int server_main(void *argp, int rd, int wr)
{
	struct server_args *a = argp;
	static struct server sv;
	struct server_thread th[SERVER_WORKERS];
	struct remora_chan *ch[SERVER_WORKERS];
	pthread_t tid[SERVER_WORKERS];
	struct remora_rpc_cfg cfg = { .size = sizeof(cfg), .workers = SERVER_WORKERS };
	int rc;

	(void)rd;
	/* never outlive the test: a server whose test died or forgot it goes too */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	rc = tu_transport_try(SERVER_CN, NULL, &sv.tp);
	TU_CHILD_CHECK(rc == 0, "server transport: %s", remora_last_error());
	rc = remora_rpc_create(sv.tp, &cfg, &sv.rpc);
	TU_CHILD_CHECK(rc == 0, "rpc_create = %d: %s", rc, remora_rpc_errmsg(NULL));
	sv.hold_n = a->hold_n;
	if (a->mutation)
		TU_CHILD_CHECK(rpc_mutate(sv.rpc, a->mutation) == 0, "mutation %s", a->mutation);
	remora_rpc_register(sv.rpc, OP_ECHO, h_echo, &sv);
	remora_rpc_register(sv.rpc, OP_RAW, h_raw, &sv);
	remora_rpc_register(sv.rpc, OP_SIZE, h_size, &sv);
	remora_rpc_register(sv.rpc, OP_STATS, h_stats, &sv);
	remora_rpc_register(sv.rpc, OP_HOLD, h_hold, &sv);
	remora_rpc_register(sv.rpc, OP_STOP, h_stop, &sv);
	remora_rpc_register(sv.rpc, OP_SEQ, h_seq, &sv);
	remora_rpc_register(sv.rpc, OP_SEQ_GET, h_seq_get, &sv);
	for (unsigned i = 0; i < SERVER_WORKERS; i++) {
		TU_CHILD_CHECK(remora_chan_open(sv.tp, &ch[i]) == 0, "chan");
		rc = remora_rpc_ep_open(sv.rpc, i, ch[i], NULL, &sv.w[i].ep);
		TU_CHILD_CHECK(rc == 0, "ep_open = %d", rc);
	}
	tu_send(wr, 1);
	for (unsigned i = 0; i < SERVER_WORKERS; i++) {
		th[i] = (struct server_thread){ &sv, i };
		pthread_create(&tid[i], NULL, server_worker, &th[i]);
	}
	for (unsigned i = 0; i < SERVER_WORKERS; i++)
		pthread_join(tid[i], NULL);
	for (unsigned i = 0; i < SERVER_WORKERS; i++) {
		TU_CHILD_CHECK(sv.w[i].rc == 0, "worker %u: a deferred reply failed: %d", i,
			       sv.w[i].rc);
		remora_rpc_ep_close(sv.w[i].ep);
		remora_chan_close(ch[i]);
	}
	remora_rpc_destroy(sv.rpc);
	remora_transport_close(sv.tp);
	return 0;
}

/* ---- the client side ----------------------------------------------------------------- */

struct client {
	struct remora_transport *tp;
	struct remora_chan *ch;
	struct remora_sched *s;
	struct remora_rpc *rpc;
	struct remora_rpc_ep *ep;
};

static int client_open(struct client *c, int cn, const char *mutation)
{
	struct remora_rpc_cfg cfg = { .size = sizeof(cfg), .workers = 1 };
	int rc = tu_transport_try(cn, NULL, &c->tp);

	if (rc)
		return rc;
	if ((rc = remora_chan_open(c->tp, &c->ch)) || (rc = remora_sched_create(c->ch, 0, &c->s)) ||
	    (rc = remora_rpc_create(c->tp, &cfg, &c->rpc)))
		return rc;
	if (mutation && (rc = rpc_mutate(c->rpc, mutation)))
		return rc;
	return remora_rpc_ep_open(c->rpc, 0, c->ch, c->s, &c->ep);
}

static void client_close(struct client *c)
{
	remora_rpc_ep_close(c->ep);
	remora_rpc_destroy(c->rpc);
	remora_sched_destroy(c->s);
	remora_chan_close(c->ch);
	remora_transport_close(c->tp);
}

static struct tu_proc server;

static void start_server(unsigned hold_n, const char *mutation)
{
	static struct server_args a;
	uint64_t v;

	a = (struct server_args){ hold_n, mutation };
	/* named here, before the fork, so that the server's are the same (rdma publishes its
	 * message locators in the pool directory) */
	tu_cluster();
	tu_dir();
	tu_spawn(&server, server_main, &a);
	cr_assert_eq(tu_recv(server.rd, &v), 0, "the server did not start");
}

static int call1(struct client *c, uint16_t w, uint16_t op, const void *req, uint32_t len,
		 void *rep, uint32_t cap, int *status)
{
	struct remora_rpc_call k = { .op = op, .req = req, .req_len = len, .rep = rep, .rep_cap = cap };
	/* 2 s, stretched on slow machines (REMORA_TEST_TIME_SCALE) like every bound here */
	int rc = remora_rpc_call(c->ep, SERVER_CN, w, &k, 1, (int)(2000 * tu_time_scale()));

	*status = k.status;
	return rc;
}

static void stop_server(struct client *c)
{
	int st;

	for (unsigned w = 0; w < SERVER_WORKERS; w++)
		call1(c, (uint16_t)w, OP_STOP, NULL, 0, NULL, 0, &st);
	cr_assert_eq(tu_proc_wait(&server), 0, "the server failed");
}

static struct remora_rpc_stats server_stats(struct client *c, uint16_t w)
{
	struct remora_rpc_stats st;
	int status, rc = call1(c, w, OP_STATS, NULL, 0, &st, sizeof(st), &status);

	cr_assert_eq(rc, 0, "stats: %d %s", rc, remora_rpc_errmsg(c->ep));
	cr_assert_eq(status, 0);
	return st;
}

/* ---- addressing: many coordinators, two client processes, two server workers ----------- */

#define NCOORD 48
#define ROUNDS 20

struct coord_ctx {
	struct client *c;
	unsigned bad;
	unsigned failed;
	char first[256];
};

static void coord_fn(void *arg)
{
	struct coord_ctx *x = arg;
	unsigned me = remora_coro_index(remora_coro_self());
	uint16_t cn = (uint16_t)CLIENT_CN;
	char errbuf[256];

	for (unsigned r = 0; r < ROUNDS; r++) {
		uint32_t req[4] = { me, r, 0xabcd0000u + me, (uint32_t)getpid() };
		uint8_t rep[sizeof(struct echo_hdr) + sizeof(req)];
		struct echo_hdr e;
		uint16_t w = (uint16_t)((me + r) % SERVER_WORKERS);
		int status, rc = call1(x->c, w, OP_ECHO, req, sizeof(req), rep, sizeof(rep), &status);

		if (rc || status != 0) {
			if (!x->failed++)
				snprintf(x->first, sizeof(x->first), "coord %u round %u: rc %d status %d: %s",
					 me, r, rc, status, remora_rpc_errmsg(x->c->ep));
			return; /* one failure says it: no need to wait out every round */
		}
		memcpy(&e, rep, sizeof(e));
		(void)cn;
		if (e.coord != me || e.served_by != w || memcmp(rep + sizeof(e), req, sizeof(req))) {
			if (!x->bad++) {
				snprintf(errbuf, sizeof(errbuf),
					 "coord %u got a reply for coord %u (worker %u, want %u)", me,
					 e.coord, e.served_by, w);
				memcpy(x->first, errbuf, sizeof(errbuf));
			}
		}
	}
}

/* Runs NCOORD coordinators on client c; returns wrong + failed replies. */
static unsigned run_coords(struct client *c, char *first, size_t len)
{
	struct coord_ctx x = { .c = c };
	int rc;

	for (unsigned i = 0; i < NCOORD; i++)
		if (remora_sched_spawn(c->s, coord_fn, &x))
			return 1000;
	rc = remora_sched_run(c->s);
	if (rc)
		snprintf(first, len, "sched_run = %d", rc);
	else
		snprintf(first, len, "%s", x.first);
	return x.bad + x.failed + (rc != 0);
}

static int client2_main(void *argp, int rd, int wr)
{
	struct client c;
	char first[256] = "";
	uint64_t go;
	unsigned bad;
	int rc = client_open(&c, CLIENT2_CN, argp);

	TU_CHILD_CHECK(rc == 0, "client 2 open = %d", rc);
	tu_send(wr, 1);
	TU_CHILD_CHECK(tu_recv(rd, &go) == 0, "no start");
	bad = run_coords(&c, first, sizeof(first));
	TU_CHILD_CHECK(bad == 0, "%u bad replies; first: %s", bad, first);
	client_close(&c);
	return 0;
}

/* 0 when every coordinator of both clients got its own replies. */
static unsigned addressing(const char *mutation, char *first, size_t len)
{
	struct client c;
	struct tu_proc c2;
	uint64_t v;
	unsigned bad;
	int rc;

	start_server(0, NULL);
	cr_assert_eq(client_open(&c, CLIENT_CN, mutation), 0);
	tu_spawn(&c2, client2_main, (void *)mutation);
	cr_assert_eq(tu_recv(c2.rd, &v), 0, "client 2 did not start");
	tu_send(c2.wr, 1);
	bad = run_coords(&c, first, len);
	rc = tu_proc_wait(&c2);
	if (rc && !bad)
		snprintf(first, len, "client 2 exited %d", rc);
	bad += rc != 0;
	remora_rpc_set_down(c.rpc, SERVER_CN, false);
	stop_server(&c);
	client_close(&c);
	return bad;
}

Test(rpc, replies_reach_the_coordinator_that_asked)
{
	char first[256] = "";
	unsigned bad = addressing(NULL, first, sizeof(first));

	cr_assert_eq(bad, 0, "%u wrong or failed replies; first: %s", bad, first);
}

Test(rpc, replies_reach_the_coordinator_that_asked_control)
{
	char first[256] = "";
	unsigned bad = addressing("reply_to_slot0", first, sizeof(first));

	cr_assert_gt(bad, 0, "replies matched to call slot 0 went unnoticed");
}

/* ---- batching ------------------------------------------------------------------------ */

#define BATCH 100

static unsigned batching(const char *mutation, char *why, size_t len)
{
	static struct remora_rpc_call k[BATCH];
	static uint32_t req[BATCH];
	static uint8_t rep[BATCH][sizeof(struct echo_hdr) + 4];
	struct remora_rpc_stats s0, s1, c0, c1;
	struct client c;
	unsigned bad = 0;
	int rc;

	start_server(0, NULL);
	cr_assert_eq(client_open(&c, CLIENT_CN, mutation), 0);
	s0 = server_stats(&c, 0);
	remora_rpc_ep_stats(c.ep, &c0);
	for (unsigned i = 0; i < BATCH; i++) {
		req[i] = i * 3 + 1;
		k[i] = (struct remora_rpc_call){ .op = OP_ECHO, .req = &req[i], .req_len = 4,
						 .rep = rep[i], .rep_cap = sizeof(rep[i]) };
	}
	rc = remora_rpc_call(c.ep, SERVER_CN, 0, k, BATCH, (int)(2000 * tu_time_scale()));
	remora_rpc_ep_stats(c.ep, &c1);
	s1 = server_stats(&c, 0);
	why[0] = 0;
	if (rc) {
		snprintf(why, len, "call = %d: %s", rc, remora_rpc_errmsg(c.ep));
		bad++;
	}
	for (unsigned i = 0; i < BATCH && !rc; i++) {
		struct echo_hdr e;
		uint32_t v;

		memcpy(&e, rep[i], sizeof(e));
		memcpy(&v, rep[i] + sizeof(e), 4);
		if (k[i].status != (int)i || e.index != i || e.count != BATCH || v != req[i]) {
			if (!bad++)
				snprintf(why, len, "request %u: status %d index %u count %u", i,
					 k[i].status, e.index, e.count);
		}
	}
	/* one message out (the STATS calls are the others), BATCH handled in one batch */
	if (c1.calls - c0.calls != 1 || c1.requests - c0.requests != BATCH ||
	    s1.batches_in - s0.batches_in != 2 || s1.handled - s0.handled != BATCH + 1) {
		if (!bad++)
			snprintf(why, len, "calls %llu requests %llu; server: batches %llu handled %llu",
				 (unsigned long long)(c1.calls - c0.calls),
				 (unsigned long long)(c1.requests - c0.requests),
				 (unsigned long long)(s1.batches_in - s0.batches_in),
				 (unsigned long long)(s1.handled - s0.handled));
	}
	stop_server(&c);
	client_close(&c);
	return bad;
}

Test(rpc, one_message_carries_a_batch)
{
	char why[256];
	unsigned bad = batching(NULL, why, sizeof(why));

	cr_assert_eq(bad, 0, "%s", why);
}

Test(rpc, one_message_carries_a_batch_control)
{
	char why[256];

	cr_assert_gt(batching("batch_first_only", why, sizeof(why)), 0,
		     "a batch cut to its first request went unnoticed");
}

/* ---- large payloads ------------------------------------------------------------------ */

static uint8_t big_req[REMORA_RPC_MAX_MSG], big_rep[REMORA_RPC_MAX_MSG + 16];

struct big_ctx {
	struct client *c;
	unsigned bad;
	char why[256];
};

static void big_fn(void *arg)
{
	struct big_ctx *x = arg;
	unsigned me = remora_coro_index(remora_coro_self());
	uint32_t n = 3000 + me * 97;
	uint8_t out[8192], in[8192];
	int status;
	int rc = call1(x->c, (uint16_t)(me % SERVER_WORKERS), OP_SIZE, &n, sizeof(n), out,
		       sizeof(out), &status);

	if (rc || status) {
		if (!x->bad++)
			snprintf(x->why, sizeof(x->why), "coord %u: rc %d status %d", me, rc, status);
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		if (out[i] != pat(i, n)) {
			if (!x->bad++)
				snprintf(x->why, sizeof(x->why), "coord %u: byte %u", me, i);
			return;
		}
	/* a request of many frames too: more of them at once than a worker reassembles */
	for (uint32_t i = 0; i < n; i++)
		in[i] = pat(i, me);
	memset(out, 0, n);
	rc = call1(x->c, (uint16_t)(me % SERVER_WORKERS), OP_RAW, in, n, out, sizeof(out), &status);
	if (rc || status || memcmp(in, out, n)) {
		if (!x->bad++)
			snprintf(x->why, sizeof(x->why), "coord %u: large request: rc %d status %d%s",
				 me, rc, status, rc || status ? "" : ", came back changed");
	}
}

Test(rpc, payloads_larger_than_a_slot)
{
	struct client c;
	struct remora_caps caps = { .size = sizeof(caps) };
	uint32_t fpay, sizes[8];
	struct big_ctx x = { .c = &c };
	int rc, status;

	start_server(0, NULL);
	cr_assert_eq(client_open(&c, CLIENT_CN, NULL), 0);
	tu_caps(c.tp, &caps);
	fpay = (caps.max_msg < RPC_FRAME_MAX ? caps.max_msg : RPC_FRAME_MAX) - 24;
	/* one slot exactly, one byte more, several slots, the largest request and reply */
	sizes[0] = fpay - 8;
	sizes[1] = fpay - 7;
	sizes[2] = 5 * fpay + 3;
	sizes[3] = 4096;
	sizes[4] = 10000;
	sizes[5] = REMORA_RPC_MAX_MSG - 8;
	for (unsigned s = 0; s < 6; s++) {
		uint32_t n = sizes[s];

		for (uint32_t i = 0; i < n; i++)
			big_req[i] = pat(i, s);
		memset(big_rep, 0, sizeof(big_rep));
		rc = call1(&c, (uint16_t)(s % SERVER_WORKERS), OP_RAW, big_req, n, big_rep,
			   sizeof(big_rep), &status);
		cr_assert_eq(rc, 0, "%u bytes: %d %s", n, rc, remora_rpc_errmsg(c.ep));
		cr_assert_eq(status, 0, "%u bytes: status %d", n, status);
		cr_assert_eq(memcmp(big_req, big_rep, n), 0, "%u bytes came back changed", n);
		cr_assert_eq(big_rep[n], 0, "%u bytes: written past the reply", n);
	}
	/* oversize: refused before anything is sent */
	rc = call1(&c, 0, OP_RAW, big_req, REMORA_RPC_MAX_MSG - 7, big_rep, sizeof(big_rep), &status);
	cr_assert_eq(rc, -EMSGSIZE, "oversize request: %d", rc);
	/* a reply larger than the caller's buffer: -EMSGSIZE, its length, the buffer's end kept */
	memset(big_rep, 0x5a, sizeof(big_rep));
	rc = call1(&c, 0, OP_RAW, big_req, 1000, big_rep, 100, &status);
	cr_assert_eq(rc, 0);
	cr_assert_eq(status, -EMSGSIZE, "reply too large for its buffer: status %d", status);
	cr_assert_eq(memcmp(big_req, big_rep, 100), 0);
	cr_assert_eq(big_rep[100], 0x5a, "written past rep_cap");
	/* many large replies at once from many coroutines */
	for (unsigned i = 0; i < 16; i++)
		cr_assert_eq(remora_sched_spawn(c.s, big_fn, &x), 0);
	cr_assert_eq(remora_sched_run(c.s), 0);
	cr_assert_eq(x.bad, 0, "%u bad large replies; first: %s", x.bad, x.why);
	{
		struct remora_rpc_stats st;

		remora_rpc_ep_stats(c.ep, &st);
		cr_log_info("large requests sent again after a busy receiver: %llu",
			    (unsigned long long)st.retries);
	}
	stop_server(&c);
	client_close(&c);
}

/*
 * Garbled frames sent raw into the server's mailbox (valid magic, inconsistent fields) are
 * refused, counted, and change nothing: the server answers correctly afterwards. Returns the
 * frames refused.
 */
static uint64_t garbled(const char *server_mutation, bool *served_after)
{
	struct client c;
	struct remora_caps caps = { .size = sizeof(caps) };
	struct remora_rpc_stats s0, s1;
	uint8_t f[RPC_FRAME_MAX];
	struct rpc_hdr good = { .magic = RPC_MAGIC, .version = RPC_VERSION, .kind = RPC_REQ,
				.nent = 1, .nfrag = 1, .total = 8 };
	struct rpc_hdr bad[6];
	uint32_t flen;
	int status;

	start_server(0, server_mutation);
	cr_assert_eq(client_open(&c, CLIENT_CN, NULL), 0);
	tu_caps(c.tp, &caps);
	flen = caps.max_msg < RPC_FRAME_MAX ? caps.max_msg : RPC_FRAME_MAX;
	for (unsigned i = 0; i < 6; i++)
		bad[i] = good;
	bad[0].total = 4;                           /* payload longer than the message */
	bad[1].frag = 3;                            /* fragment beyond nfrag */
	bad[2].nfrag = 2, bad[2].frag = 1, bad[2].total = REMORA_RPC_MAX_MSG + 4096; /* huge */
	bad[3].nfrag = 2, bad[3].total = 40;        /* first fragment already the whole message */
	bad[4].kind = 9;                            /* unknown kind */
	bad[5].nent = 0;                            /* no entries */
	s0 = server_stats(&c, 0);
	for (unsigned i = 0; i < 6; i++) {
		memset(f, 0xee, sizeof(f));
		memcpy(f, &bad[i], sizeof(bad[i]));
		for (uint64_t spins = 0; remora_msg_send(c.ch, SERVER_CN, f, flen) == -EAGAIN;
		     spins++)
			cr_assert_lt(spins, 100000000u, "the server's mailbox stays full");
	}
	s1 = server_stats(&c, 0);
	*served_after = false;
	{
		uint32_t n = 700, i;
		uint8_t out[700];

		if (call1(&c, 1, OP_SIZE, &n, 4, out, sizeof(out), &status) == 0 && status == 0) {
			for (i = 0; i < n && out[i] == pat(i, n); i++)
				;
			*served_after = i == n;
		}
	}
	stop_server(&c);
	client_close(&c);
	return s1.refused - s0.refused;
}

Test(rpc, garbled_frames_are_refused)
{
	bool ok;
	uint64_t refused = garbled(NULL, &ok);

	cr_assert_eq(refused, 6, "%llu of 6 garbled frames refused", (unsigned long long)refused);
	cr_assert(ok, "the server answered wrongly after the garbled frames");
}

Test(rpc, garbled_frames_are_refused_control)
{
	bool ok;
	uint64_t refused = garbled("skip_frame_check", &ok);

	cr_assert_lt(refused, 6, "with the frame check off all 6 were still refused");
}

/* ---- many coroutines parked on replies at once ------------------------------------- */

#define NPARK 200

struct park_ctx {
	struct client *c;
	unsigned bad;
	char why[256];
};

static void park_fn(void *arg)
{
	struct park_ctx *x = arg;
	uint16_t me = (uint16_t)remora_coro_index(remora_coro_self()), got = 0xffff;
	int status, rc = call1(x->c, 1, OP_HOLD, NULL, 0, &got, sizeof(got), &status);

	if (rc || status != 7 || got != me) {
		if (!x->bad++)
			snprintf(x->why, sizeof(x->why), "coord %u: rc %d status %d reply for %u: %s",
				 me, rc, status, got, remora_rpc_errmsg(x->c->ep));
	}
}

static unsigned parked(const char *mutation, char *why, size_t len)
{
	struct client c;
	struct park_ctx x = { .c = &c };
	int rc;

	start_server(NPARK, NULL);
	cr_assert_eq(client_open(&c, CLIENT_CN, mutation), 0);
	for (unsigned i = 0; i < NPARK; i++)
		cr_assert_eq(remora_sched_spawn(c.s, park_fn, &x), 0);
	rc = remora_sched_run(c.s);
	snprintf(why, len, "sched_run %d; %s", rc, x.why);
	stop_server(&c);
	client_close(&c);
	return x.bad + (rc != 0);
}

Test(rpc, many_coroutines_parked_on_replies)
{
	char why[300];
	unsigned bad = parked(NULL, why, sizeof(why));

	cr_assert_eq(bad, 0, "%u of %u parked coordinators failed: %s", bad, NPARK, why);
}

Test(rpc, many_coroutines_parked_on_replies_control)
{
	char why[300];

	cr_assert_gt(parked("reply_to_slot0", why, sizeof(why)), 0,
		     "grants matched to call slot 0 went unnoticed");
}

/* ---- a killed server ----------------------------------------------------------------- */

/*
 * The server answers, is killed (SIGKILL), and the next call must end with -ETIMEDOUT naming
 * the node, within a bound; once the node is marked down, calls fail at once with -EHOSTDOWN.
 * In a child, so that the control (no timeout) can be seen hanging and killed.
 */
static int killed_main(void *argp, int rd, int wr)
{
	const char *mutation = argp;
	struct client c;
	uint32_t n = 16;
	uint8_t out[16];
	uint64_t t0, dt;
	int status, rc = client_open(&c, CLIENT_CN, mutation);

	(void)rd;
	TU_CHILD_CHECK(rc == 0, "client open = %d", rc);
	rc = call1(&c, 0, OP_SIZE, &n, 4, out, sizeof(out), &status);
	TU_CHILD_CHECK(rc == 0 && status == 0, "first call = %d: %s", rc, remora_rpc_errmsg(c.ep));
	tu_send(wr, 1); /* the parent kills the server now */
	TU_CHILD_CHECK(tu_recv(rd, &t0) == 0, "no word from the parent");
	t0 = now_ms();
	{
		struct remora_rpc_call k = { .op = OP_SIZE, .req = &n, .req_len = 4, .rep = out,
					     .rep_cap = sizeof(out) };

		rc = remora_rpc_call(c.ep, SERVER_CN, 0, &k, 1, 300);
	}
	dt = now_ms() - t0;
	TU_CHILD_CHECK(rc == -ETIMEDOUT, "call to a killed node = %d (%s)", rc, remora_strerror(rc));
	TU_CHILD_CHECK(strstr(remora_rpc_errmsg(c.ep), "cn 1"), "message does not name the node: %s",
		       remora_rpc_errmsg(c.ep));
	TU_CHILD_CHECK(dt >= 300, "timed out after %llu ms, before its 300 ms",
		       (unsigned long long)dt);
	remora_rpc_set_down(c.rpc, SERVER_CN, true);
	rc = call1(&c, 0, OP_SIZE, &n, 4, out, sizeof(out), &status);
	TU_CHILD_CHECK(rc == -EHOSTDOWN, "call to a node marked down = %d", rc);
	TU_CHILD_CHECK(strstr(remora_rpc_errmsg(c.ep), "cn 1"), "message does not name the node: %s",
		       remora_rpc_errmsg(c.ep));
	client_close(&c);
	return 0;
}

/* Returns the client's exit code, or -1 when it still ran after the bound. */
static int killed(const char *mutation)
{
	struct tu_proc cl;
	uint64_t v, t0;
	int status = 0;

	start_server(0, NULL);
	tu_spawn(&cl, killed_main, (void *)mutation);
	cr_assert_eq(tu_recv(cl.rd, &v), 0, "the client did not reach the server");
	kill(server.pid, SIGKILL);
	waitpid(server.pid, &status, 0);
	close(server.rd);
	close(server.wr);
	tu_send(cl.wr, 1);
	t0 = now_ms();
	/* bound: 300 ms timeout, generously scaled for slow machines */
	while (waitpid(cl.pid, &status, WNOHANG) == 0) {
		if (now_ms() - t0 > (uint64_t)(5000 * tu_time_scale())) {
			kill(cl.pid, SIGKILL);
			waitpid(cl.pid, &status, 0);
			close(cl.rd);
			close(cl.wr);
			return -1;
		}
		usleep(1000);
	}
	close(cl.rd);
	close(cl.wr);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Test(rpc, call_to_a_killed_node_times_out)
{
	int rc = killed(NULL);

	cr_assert_eq(rc, 0, "client %s", rc < 0 ? "hung past the bound" : "failed");
}

Test(rpc, call_to_a_killed_node_times_out_control)
{
	cr_assert_eq(killed("no_timeout"), -1, "without deadlines the call still returned");
}

/* ---- marked down while calls wait -------------------------------------------------- */

struct down_ctx {
	struct client *c;
	unsigned hostdown;
};

static void down_waiter(void *arg)
{
	struct down_ctx *x = arg;
	struct remora_rpc_call k = { .op = OP_HOLD };
	/* a deadline far beyond the test's: only the down mark can end these calls */
	int rc = remora_rpc_call(x->c->ep, SERVER_CN, 1, &k, 1, 600000);

	if (rc == -EHOSTDOWN)
		x->hostdown++;
}

static void down_marker(void *arg)
{
	struct down_ctx *x = arg;

	for (unsigned i = 0; i < 1000; i++)
		remora_yield();
	remora_rpc_set_down(x->c->rpc, SERVER_CN, true);
}

Test(rpc, calls_in_flight_fail_when_the_node_is_marked_down)
{
	struct client c;
	struct down_ctx x = { .c = &c };
	start_server(1000, NULL); /* HOLD never answers */
	cr_assert_eq(client_open(&c, CLIENT_CN, NULL), 0);
	for (unsigned i = 0; i < 8; i++)
		cr_assert_eq(remora_sched_spawn(c.s, down_waiter, &x), 0);
	cr_assert_eq(remora_sched_spawn(c.s, down_marker, &x), 0);
	cr_assert_eq(remora_sched_run(c.s), 0);
	cr_assert_eq(x.hostdown, 8, "%u of 8 waiting calls got -EHOSTDOWN", x.hostdown);
	remora_rpc_set_down(c.rpc, SERVER_CN, false);
	stop_server(&c);
	client_close(&c);
}

/* ---- a receiver with no reassembly buffer free ----------------------------------------- */

/*
 * Four multi-frame requests left half-sent (raw first frames) hold every reassembly buffer of
 * server worker 0: a real multi-frame request gets "busy" and is sent again until the stale
 * ones are reclaimed (after 2 s), within its deadline.
 */
Test(rpc, a_busy_receiver_is_retried)
{
	struct client c;
	struct remora_caps caps = { .size = sizeof(caps) };
	struct remora_rpc_stats st;
	uint8_t f[RPC_FRAME_MAX];
	static uint8_t in[1000], out[1000];
	uint32_t flen;
	int rc;

	start_server(0, NULL);
	cr_assert_eq(client_open(&c, CLIENT_CN, NULL), 0);
	tu_caps(c.tp, &caps);
	flen = caps.max_msg < RPC_FRAME_MAX ? caps.max_msg : RPC_FRAME_MAX;
	for (unsigned i = 0; i < 4; i++) {
		struct rpc_hdr h = { .magic = RPC_MAGIC, .version = RPC_VERSION, .kind = RPC_REQ,
				     .nent = 1, .nfrag = 9, .id = 0xdead0000u + i,
				     .total = 8 * flen };

		memset(f, 0, sizeof(f));
		memcpy(f, &h, sizeof(h));
		for (uint64_t spins = 0; remora_msg_send(c.ch, SERVER_CN, f, flen) == -EAGAIN;
		     spins++)
			cr_assert_lt(spins, 100000000u, "the server's mailbox stays full");
	}
	for (unsigned i = 0; i < sizeof(in); i++)
		in[i] = pat(i, 99);
	{
		struct remora_rpc_call k = { .op = OP_RAW, .req = in, .req_len = sizeof(in),
					     .rep = out, .rep_cap = sizeof(out) };

		rc = remora_rpc_call(c.ep, SERVER_CN, 0, &k, 1, (int)(10000 * tu_time_scale()));
		cr_assert_eq(rc, 0, "call = %d: %s", rc, remora_rpc_errmsg(c.ep));
		cr_assert_eq(k.status, 0);
	}
	cr_assert_eq(memcmp(in, out, sizeof(in)), 0, "the retried request came back changed");
	remora_rpc_ep_stats(c.ep, &st);
	cr_assert_geq(st.retries, 1, "never told busy: the half-sent requests held no buffer");
	stop_server(&c);
	client_close(&c);
}

/* ---- one-way requests -------------------------------------------------------------------- */

#define NPOST 300

/*
 * 300 one-way requests in posts of 1 to 23 (the larger ones span several frames), then one
 * call to the same worker: it is handled after every post (one order per endpoint and
 * worker), so it sees all 300, in order; and the client received only that call's reply.
 */
Test(rpc, posts_are_handled_in_order_before_a_later_call)
{
	struct remora_rpc_call calls[23];
	struct remora_rpc_stats before, after;
	uint32_t seqs[NPOST], got[2] = { 0, 0 };
	struct client c;
	unsigned at = 0;
	int st, rc;

	start_server(0, NULL);
	cr_assert_eq(client_open(&c, CLIENT_CN, NULL), 0, "%s", remora_last_error());
	remora_rpc_ep_stats(c.ep, &before);
	for (unsigned k = 1; at < NPOST; k = k % 23 + 1) {
		unsigned n = NPOST - at < k ? NPOST - at : k;

		for (unsigned i = 0; i < n; i++) {
			seqs[at + i] = at + i;
			calls[i] = (struct remora_rpc_call){ .op = OP_SEQ, .req = &seqs[at + i],
							     .req_len = sizeof(seqs[0]) };
		}
		rc = remora_rpc_post(c.ep, SERVER_CN, 1, calls, n, (int)(2000 * tu_time_scale()));
		cr_assert_eq(rc, 0, "post: %s", remora_rpc_errmsg(c.ep));
		at += n;
	}
	rc = call1(&c, 1, OP_SEQ_GET, NULL, 0, got, sizeof(got), &st);
	cr_assert_eq(rc, 0, "%s", remora_rpc_errmsg(c.ep));
	cr_assert_eq(st, 0);
	cr_expect_eq(got[0], NPOST, "the call saw %u of %u posted requests", got[0], NPOST);
	cr_expect_eq(got[1], 0, "%u requests out of order", got[1]);
	remora_rpc_ep_stats(c.ep, &after);
	cr_expect_eq(after.frames_recv - before.frames_recv, 1, "replies to one-way requests");
	stop_server(&c);
	client_close(&c);
}

/* A request that cannot fit one frame is refused with -EMSGSIZE, and nothing is sent. */
Test(rpc, post_refuses_a_request_larger_than_a_frame)
{
	struct remora_rpc_call k = { .op = OP_SEQ, .req = big_req, .req_len = 4096 };
	struct remora_rpc_stats before, after;
	struct client c;

	start_server(0, NULL);
	cr_assert_eq(client_open(&c, CLIENT_CN, NULL), 0, "%s", remora_last_error());
	remora_rpc_ep_stats(c.ep, &before);
	cr_assert_eq(remora_rpc_post(c.ep, SERVER_CN, 0, &k, 1, 0), -EMSGSIZE);
	cr_assert(strstr(remora_rpc_errmsg(c.ep), "does not fit one frame"), "%s",
		  remora_rpc_errmsg(c.ep));
	remora_rpc_ep_stats(c.ep, &after);
	cr_assert_eq(after.frames_sent, before.frames_sent);
	stop_server(&c);
	client_close(&c);
}
