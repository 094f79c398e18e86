/* SPDX-License-Identifier: MIT */
/*
 * The engine's RPC hook: a protocol with REMORA_PROTO_NEEDS_MSG gets an RPC layer per db, its
 * handlers registered by rpc_init, and an endpoint per worker whose dispatcher rides on the
 * worker's scheduler. A test-only protocol (the OCC core plus an echo handler) shows a
 * worker (worker 0) answering a request while its only coroutine never touches the RPC layer,
 * which only a dispatcher driven by the worker's scheduler can do (negative control: open the
 * endpoints without the scheduler and that call times out), then a coroutine of worker 0
 * parked on a call to worker 1, which a second thread drives. A protocol without the flag gets
 * no RPC layer at all.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "ttx.h"

#include "txn/proto/occ/occ.h"
#include "txn/protocol.h"
#include "txn/txn.h"

TestSuite(txn_rpc_hook, .fini = ttx_fini, .timeout = TU_TIMEOUT);

#define OP_ECHO 3

static struct ttx T;
static atomic_int handled, stop, go;
static const struct occ_policy msg_policy = { .name = "msgocc" };

static int msg_db_init(struct remora_db *db)
{
	return occ_db_init(db, &msg_policy);
}

/* Replies with the request's value plus one, and the worker that ran it. */
static int echo(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
		uint32_t *rep_len)
{
	uint64_t v[2];

	(void)arg;
	if (req->len != 8 || cap < sizeof(v))
		return -EINVAL;
	memcpy(&v[0], req->data, 8);
	v[0]++;
	v[1] = req->ep == T.w[1]->rpc ? 1 : 0;
	memcpy(rep, v, sizeof(v));
	*rep_len = sizeof(v);
	atomic_fetch_add(&handled, 1);
	return 0;
}

static int msg_rpc_init(struct remora_db *db, struct remora_rpc *rpc)
{
	(void)db;
	return remora_rpc_register(rpc, OP_ECHO, echo, NULL);
}

static struct txn_proto_ops msg_ops = OCC_PROTO_OPS("msgocc", msg_db_init);

/* Worker 1's thread: asks worker 0 once, then serves until told to stop. */
static struct {
	int rc;
	uint64_t got[2];
	struct remora_rpc_call call;
} w1, w0;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void *worker1(void *arg)
{
	uint64_t x = 7;

	(void)arg;
	w1.call = (struct remora_rpc_call){ .op = OP_ECHO, .req = &x, .req_len = 8,
					    .rep = w1.got, .rep_cap = sizeof(w1.got) };
	w1.rc = remora_rpc_call(T.w[1]->rpc, 0, 0, &w1.call, 1, 2000);
	atomic_store(&go, 1);
	while (!atomic_load(&stop))
		remora_rpc_poll(T.w[1]->rpc);
	return NULL;
}

/* Worker 0's only coroutine while worker 1 asks: it never touches the RPC layer itself. */
static void bystander(void *arg)
{
	uint64_t end = now_ms() + 3000;

	(void)arg;
	while (!atomic_load(&go) && now_ms() < end)
		remora_yield();
}

static void caller(void *arg)
{
	uint64_t x = 41;

	(void)arg;
	w0.call = (struct remora_rpc_call){ .op = OP_ECHO, .req = &x, .req_len = 8,
					    .rep = w0.got, .rep_cap = sizeof(w0.got) };
	w0.rc = remora_rpc_call(T.w[0]->rpc, 0, 1, &w0.call, 1, 3000);
}

Test(txn_rpc_hook, worker_endpoints_answer_each_other)
{
	pthread_t th;

	msg_ops.flags |= REMORA_PROTO_NEEDS_MSG;
	msg_ops.rpc_init = msg_rpc_init;
	txn_proto_test = &msg_ops;
	ttx_open(&T, &(struct ttx_opts){ .protocol = "msgocc", .workers = 2 });
	cr_assert_not_null(T.db->rpc, "a NEEDS_MSG protocol gets an RPC layer");
	cr_assert(T.w[0]->rpc && T.w[1]->rpc, "and an endpoint per worker");

	/* Worker 0 serves through its scheduler alone. */
	cr_assert_eq(pthread_create(&th, NULL, worker1, NULL), 0);
	cr_assert_eq(remora_sched_spawn(T.w[0]->sched, bystander, NULL), 0);
	cr_assert_eq(remora_sched_run(T.w[0]->sched), 0);
	cr_assert(atomic_load(&go), "worker 1's call never returned");
	cr_assert_eq(w1.rc, 0, "worker 0, running a coroutine that never polls, answered: %d",
		     w1.rc);
	cr_assert_eq(w1.call.status, 0);
	cr_assert_eq(w1.got[0], 8);
	cr_assert_eq(w1.got[1], 0, "on worker 0's endpoint");

	/* A coroutine of worker 0 parks on a call that worker 1's thread answers. */
	cr_assert_eq(remora_sched_spawn(T.w[0]->sched, caller, NULL), 0);
	cr_assert_eq(remora_sched_run(T.w[0]->sched), 0);
	atomic_store(&stop, 1);
	pthread_join(th, NULL);
	cr_assert_eq(w0.rc, 0, "call: %d (%s)", w0.rc, remora_rpc_errmsg(T.w[0]->rpc));
	cr_assert_eq(w0.call.status, 0);
	cr_assert_eq(w0.got[0], 42, "the handler rpc_init registered answered");
	cr_assert_eq(w0.got[1], 1, "on worker 1's endpoint");
	cr_assert_eq(atomic_load(&handled), 2);
	ttx_close(&T);
	txn_proto_test = NULL;
}

Test(txn_rpc_hook, no_rpc_without_the_flag)
{
	ttx_open(&T, &(struct ttx_opts){ .protocol = "ford", .workers = 2 });
	cr_assert_null(T.db->rpc);
	cr_assert_null(T.w[0]->rpc);
	ttx_close(&T);
}
